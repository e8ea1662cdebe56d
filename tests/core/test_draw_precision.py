"""``draw`` is exact for every floating dtype: its CDF, total and u * total are float64.

The law ``draw`` samples from, for a continuous uniform u, is P(y) = (cdf(y) - cdf(y - 1)) / total
with cdf the float64 running sum of the weights. These tests compute that law, check that
``draw`` maps each token's midpoint uniform to that token, and compare the law with the exact
w / sum(w) (float64 from the same low-precision values). A draw with a float32 running sum,
``float32_cdf_draw``, is the negative control that gives the tests their power.
"""

from __future__ import annotations

import pytest
import torch

from gsd_core import verify
from gsd_core.verification import draw

LAW_TV_BOUND = 1e-9  # float64 rounding: at most V * 2^-52 ~ 3.4e-11 at V = 151,936
CONTROL_TV_FLOOR = 1e-4  # the float32 running sum's error at these V (measured: 1.3e-4 to 1e-3)


def float32_cdf_draw(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """The inverse-CDF draw with the running sum in float32 (the negative control)."""
    cdf = weights.float().cumsum(-1)
    total = cdf[..., -1:]
    drawn = torch.searchsorted(cdf, uniform.float() * total, right=True)
    last = torch.searchsorted(cdf, total.contiguous())
    return torch.minimum(drawn, last).clamp_(max=weights.shape[-1] - 1)


def input_dtype_draw(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """The inverse-CDF draw with the running sum, total and u * total in the weights' dtype."""
    cdf = weights.cumsum(-1)
    total = cdf[..., -1:]
    uniform = uniform if uniform.dtype == cdf.dtype else uniform.to(cdf.dtype)
    drawn = torch.searchsorted(cdf, uniform * total, right=True)
    last = torch.searchsorted(cdf, total.contiguous())
    return torch.minimum(drawn, last).clamp_(max=weights.shape[-1] - 1)


def law_of(cdf: torch.Tensor) -> torch.Tensor:
    """P(y) = (cdf(y) - cdf(y - 1)) / total for a continuous u, from a 1-D running sum."""
    cdf = cdf.double()
    return torch.diff(cdf, prepend=cdf.new_zeros(1)) / cdf[-1]


def tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().sum() / 2)


@pytest.mark.parametrize("vocab", [65_536, 151_936])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_draw_law_is_exact_for_low_precision_rows(vocab: int, dtype: torch.dtype) -> None:
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(13))
    weights = torch.softmax(logits, -1).to(dtype)
    exact = weights.double() / weights.double().sum()
    cdf = weights.double().cumsum(-1)  # draw's running sum
    law = law_of(cdf)
    # draw maps the middle of each token's interval of u to that token: law is its law
    middle = (cdf - weights.double() / 2) / cdf[-1]
    assert torch.equal(draw(weights, middle), torch.arange(vocab))
    assert tv(law, exact) < LAW_TV_BOUND
    assert tv(law_of(weights.float().cumsum(-1)), exact) > CONTROL_TV_FLOOR  # the control


def adversarial_row(pairs: int = 100_000) -> torch.Tensor:
    """One token of mass 0.6, then ``pairs`` pairs of weights 13/8 and 3/8 times 2^-24, then a
    filler token to a total of 1 (float32). A float32 running sum from 0.6 (a step of 2^-24)
    rounds 13/8 up to 2 steps and 3/8 down to 0."""
    small = torch.tensor([13 / 8, 3 / 8], dtype=torch.float64).repeat(pairs) * 2.0**-24
    head = torch.tensor([0.6], dtype=torch.float64)
    filler = 1 - head.sum() - small.sum()
    return torch.cat([head, small, filler.view(1)]).float()


@pytest.mark.slow  # 20,000 rows of V = 200,002 through verify
def test_adversarial_row_bonus_draws_through_verify() -> None:
    p = adversarial_row()
    vocab, draws, chunk = p.numel(), 20_000, 500
    three_eighths = torch.zeros(vocab, dtype=torch.bool)
    three_eighths[2:-1:2] = True
    share = float(p.double()[three_eighths].sum() / p.double().sum())  # 0.2235%
    mean, sd = draws * share, (draws * share * (1 - share)) ** 0.5  # binomial: 44.7 +- 6.7
    low, high = mean - 5 * sd, mean + 5 * sd  # a 5 sd band: fails with probability < 1e-6
    uniforms = torch.rand(draws, 1, generator=torch.Generator().manual_seed(0),
                          dtype=torch.float64)
    # L = 0: the bonus row p [1, V] broadcast over a chunk of windows (checked once)
    q, none = p.new_zeros(chunk, 0, vocab), torch.zeros(chunk, 0, dtype=torch.int64)
    tokens = torch.cat([verify(p.view(1, vocab), q, none, uniforms=u).tokens[:, 0]
                        for u in uniforms.split(chunk)])
    assert low <= int(three_eighths[tokens].sum()) <= high
    control = float32_cdf_draw(p, uniforms.squeeze(-1))  # on the same uniforms
    assert not low <= int(three_eighths[control].sum()) <= high


def test_float64_rows_draw_the_same_tokens_as_the_input_dtype_cdf() -> None:
    generator = torch.Generator().manual_seed(5)
    for vocab in (1, 2, 7, 1000, 65_536):
        weights = torch.rand(64, vocab, generator=generator, dtype=torch.float64)
        weights[torch.rand(64, vocab, generator=generator) < 0.3] = 0  # zero runs and tails
        weights[:, 0] += 1e-3  # a positive total in every row
        weights = weights ** torch.randint(1, 8, (64, 1), generator=generator)
        uniforms = torch.rand(64, 1, generator=generator, dtype=torch.float64)
        uniforms[:4] = torch.tensor([0.0, 1 - 2**-53, 0.5, 2**-53]).view(4, 1).double()
        assert torch.equal(draw(weights, uniforms), input_dtype_draw(weights, uniforms))
        float32_uniforms = uniforms.float().clamp(max=1 - 2**-24)
        assert torch.equal(draw(weights, float32_uniforms),
                           input_dtype_draw(weights, float32_uniforms))
