"""``draw`` is exact for every floating dtype: its CDF, total and u * total are float64.

The law ``draw`` samples from, for a continuous uniform u, is P(y) = (cdf(y) - cdf(y - 1)) / total
with cdf the float64 running sum of the weights. These tests compute that law, check that
``draw`` maps the middle and both ends of each token's interval of u to that token, and compare
the law with the exact w / sum(w) (float64 from the same low-precision values). A draw with the
running sum in the weights' dtype (``input_dtype_draw``) is the negative control that gives the
tests their power: on the adversarial rows it never returns the tokens whose weight that running
sum rounds away. ``verify`` converts 16-bit rows to float32 working rows before it draws
(``checks.working_dtype``), so bfloat16 weights reach ``draw`` only when it is called directly.
"""

from __future__ import annotations

import pytest
import torch

from gsd_core import verify
from gsd_core.verification import draw

LAW_TV_BOUND = 1e-9  # float64 rounding: at most V * 2^-52 ~ 3.4e-11 at V = 151,936
CONTROL_TV_FLOOR = 1e-4  # the float32 running sum's error at these V (measured: 1.3e-4 to 1e-3)


def input_dtype_draw(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """The inverse-CDF draw with the running sum, total and u * total in the weights' dtype
    (the negative control). weights [..., V] >= 0; uniform [..., 1]. Returns int64 [..., 1]."""
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
    """The total variation distance sum |a - b| / 2 of two laws a, b [V]."""
    return float((a - b).abs().sum() / 2)


@pytest.mark.parametrize("vocab", [65_536, 151_936])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_draw_law_is_exact_for_low_precision_rows(vocab: int, dtype: torch.dtype) -> None:
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(13))
    weights = torch.softmax(logits, -1).to(dtype)
    exact = weights.double() / weights.double().sum()
    cdf = weights.double().cumsum(-1)  # draw's running sum
    law = law_of(cdf)
    # draw maps the middle and both ends of each token's interval of u to that token: law is
    # its law (the midpoints alone pass with a float32 running sum at V = 65,536)
    w = weights.double()
    for inside in (w / 2, w * (1 - 2**-20), w * 2**-20):
        assert torch.equal(draw(weights, (cdf - inside) / cdf[-1]), torch.arange(vocab))
    assert tv(law, exact) < LAW_TV_BOUND
    assert tv(law_of(weights.float().cumsum(-1)), exact) > CONTROL_TV_FLOOR  # the control


def adversarial_row(pairs: int, step: float, dtype: torch.dtype) -> torch.Tensor:
    """One token of mass about 0.6, then ``pairs`` pairs of weights 13/8 and 3/8 times ``step``
    (the spacing of ``dtype`` just above 0.6), then a filler token to a total of 1. A running sum
    in ``dtype`` from 0.6 rounds 13/8 up to 2 steps and 3/8 down to 0: the 3/8 tokens vanish."""
    small = torch.tensor([13 / 8, 3 / 8], dtype=torch.float64).repeat(pairs) * step
    head = torch.tensor([0.6]).to(dtype).double()
    filler = 1 - head.sum() - small.sum()
    return torch.cat([head, small, filler.view(1)]).to(dtype)


def three_eighths_of(row: torch.Tensor) -> torch.Tensor:
    """The mask of the 3/8 tokens of ``adversarial_row``: ids 2, 4, .., V - 2."""
    mask = torch.zeros(row.numel(), dtype=torch.bool)
    mask[2:-1:2] = True
    return mask


def test_adversarial_float32_row_draws_every_token_at_its_share() -> None:
    p = adversarial_row(100_000, 2.0**-24, torch.float32)  # V = 200,002
    three_eighths = three_eighths_of(p)
    assert 2.2e-3 < float(p.double()[three_eighths].sum()) < 2.3e-3  # their mass: 0.22%
    cdf = p.double().cumsum(-1)
    middle = ((cdf - p.double() / 2) / cdf[-1]).view(1, -1)  # each token's interval of u
    assert torch.equal(draw(p.view(1, -1), middle)[0], torch.arange(p.numel()))
    control = input_dtype_draw(p.view(1, -1), middle)[0]  # the float32 running sum
    assert not bool((control == torch.arange(p.numel()))[three_eighths].any())


def test_adversarial_float32_row_bonus_draws_through_verify() -> None:
    """One window of V = 4 through ``verify``, L = 0: the bonus row p = [0.6, 13/8 s, 3/8 s,
    filler] (s = 2^-24) [1, 4], q [0, 4], no drafts. The u in the middle of token 2's interval
    draws token 2; the float32 running sum rounds that interval away and draws token 3."""
    p = adversarial_row(1, 2.0**-24, torch.float32)
    cdf = p.double().cumsum(-1)
    u = (cdf[2] - p.double()[2] / 2) / cdf[-1]  # the middle of token 2's interval of u
    result = verify(p.view(1, 4), p.new_zeros(0, 4), torch.zeros(0, dtype=torch.int64),
                    uniforms=u.view(1))
    assert result.tokens.tolist() == [2]
    assert input_dtype_draw(p.view(1, 4), u.view(1, 1)).item() == 3  # the control


def test_adversarial_bfloat16_row_draws_every_token_at_its_share() -> None:
    """``draw`` called on bfloat16 weights (``verify`` would draw from float32 working rows):
    20,000 draws [20000, V] of one row, the 3/8 tokens' count inside a 5 sd binomial band."""
    p = adversarial_row(40, 2.0**-8, torch.bfloat16)  # V = 82; the 3/8 tokens hold 5.86%
    vocab, draws = p.numel(), 20_000
    three_eighths = three_eighths_of(p)
    share = float(p.double()[three_eighths].sum() / p.double().sum())
    mean, sd = draws * share, (draws * share * (1 - share)) ** 0.5  # binomial: 1172 +- 33
    low, high = mean - 5 * sd, mean + 5 * sd  # a 5 sd band: fails with probability < 1e-6
    uniforms = torch.rand(draws, 1, generator=torch.Generator().manual_seed(0),
                          dtype=torch.float64)
    tokens = draw(p.view(1, vocab).expand(draws, vocab), uniforms)[:, 0]
    assert low <= int(three_eighths[tokens].sum()) <= high
    control = input_dtype_draw(p.view(1, vocab), uniforms.view(1, draws))[0]  # the bf16 sum
    assert int(three_eighths[control].sum()) == 0


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
