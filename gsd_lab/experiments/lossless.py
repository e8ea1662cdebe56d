"""Is a decoder lossless? Its emitted joint law against AR's, exactly enumerated on a tiny model.

A tiny random ``LlamaForCausalLM`` (vocabulary 6, image tokens ``ALLOWED`` = 1, 2, 3) generates
N = 3 tokens after a fixed prompt, so the joint law of AR sampling over all 3^3 = 27 sequences
is enumerated exactly: P(x_1 x_2 x_3) = p(x_1) p(x_2 | x_1) p(x_3 | x_1 x_2), the adapter's
processed conditionals from one teacher-forced pass per sequence. A decoder run through
``gsd_lab.decode.loop.generate`` with a seeded generator ``n`` times gives counts per sequence;
Pearson's chi-square test of the counts against the exact law (cells expected below 5 pooled)
has significance ``SIGNIFICANCE`` = 1e-3. SJD (standard speculative sampling inside Jacobi
windows, proofs/02) must pass for every window and drafting scheme; a lossy rule (GSD with one
cluster holding the three tokens: every draft accepted) must fail. The test is exact on the AR
side and sampled on the decoder side: a lossless decoder fails it with probability 1e-3 whatever
the seed, and a wrong one passes it only if its law is within the test's power of AR's.

The first-token law of a lossy rule (``first_token_law``, ``check_first_token``) and which drafts
see which bugs: docs/decoding.md.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

ALLOWED = (1, 2, 3)
PROMPT = (0, 5)
NUM_TOKENS = 3
SIGNIFICANCE = 1e-3
ROW_LENGTH = 1  # init="repeat_row" drafts the previous token (module docstring)
SEQUENCES = list(itertools.product(ALLOWED, repeat=NUM_TOKENS))


def tiny_model(seed: int = 0) -> Any:
    """A random 1-layer ``LlamaForCausalLM`` over 6 tokens (large initial weights, so that the
    conditionals are far from uniform and the test has power), in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)  # transformers initialises from the global stream
        config = LlamaConfig(
            vocab_size=6,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=32,
            initializer_range=0.5,
        )
        return LlamaForCausalLM(config).eval()
    finally:
        torch.random.set_rng_state(generator_state)


def exact_joint(
    adapter: Any,
    uncond: torch.Tensor | None = None,
    *,
    prompt: tuple[int, ...] = PROMPT,
    sequences: list[tuple[int, ...]] = SEQUENCES,
) -> np.ndarray:
    """P(sequence) of AR sampling for every sequence of ``sequences`` (default ``SEQUENCES`` [27],
    all of one length, after ``prompt``), float64, one uncached teacher-forced pass per sequence.
    Raises if it does not sum to 1 (1e-9)."""
    prompt, length = torch.tensor(prompt), len(sequences[0])
    joint = []
    for seq in sequences:
        adapter.start(prompt, uncond)
        rows = adapter.forward(
            torch.cat([prompt, torch.tensor(seq[:-1], dtype=torch.long)]), num_rows=length
        )
        joint.append(float(rows[torch.arange(length), torch.tensor(seq)].prod()))
    joint = np.array(joint)
    if abs(joint.sum() - 1) > 1e-9:
        raise ValueError(f"the enumerated joint law sums to {joint.sum()!r}, not 1")
    return joint


def sample_counts(
    adapter: Any, samples: int, seed: int, method: Any, uncond: torch.Tensor | None = None
) -> np.ndarray:
    """Counts per sequence of ``samples`` runs of ``generate`` with ``method`` (a
    ``decode.methods.DecodingMethod`` or its resolved form; one generator seeded by ``seed``)."""
    from ..decode.loop import generate

    generator = torch.Generator().manual_seed(seed)
    index = {seq: i for i, seq in enumerate(SEQUENCES)}
    counts = np.zeros(len(SEQUENCES))
    prompt = torch.tensor(PROMPT)
    for _ in range(samples):
        result = generate(
            adapter,
            prompt,
            method,
            num_tokens=NUM_TOKENS,
            generator=generator,
            uncond_prompt_ids=uncond,
        )
        counts[index[tuple(result.tokens.tolist())]] += 1
    return counts


def chi_square_pvalue(counts: np.ndarray, pmf: np.ndarray) -> float:
    """Pearson's goodness of fit of ``counts`` to ``pmf``; cells expected below 5 pooled into one.
    A sample in a zero-probability cell gives p = 0."""
    from scipy.stats import chisquare

    n = counts.sum()
    if counts[pmf == 0].sum() > 0:
        return 0.0
    expected = pmf * n
    big = expected >= 5
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(expected[big], expected[~big].sum())
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    if expected.sum() < 0.9 * n:
        raise ValueError("distribution too sparse for the chi-square test")
    return float(chisquare(observed, expected).pvalue)


@dataclass(frozen=True)
class JointCheck:
    """Outcome of ``check_joint`` (and of ``check_first_token``): the decoder's counts against
    an exact law (AR's joint, or the first token's)."""

    name: str
    samples: int
    pvalue: float
    lossless_expected: bool = True
    significance: float = SIGNIFICANCE

    @property
    def matches(self) -> bool:
        """The counts fit the exact law at the significance level."""
        return self.pvalue > self.significance

    @property
    def passed(self) -> bool:
        return self.matches == self.lossless_expected

    def line(self) -> str:
        """The checked-cell text: the verdict and its tolerance only (no sampled number)."""
        claim = "fit" if self.lossless_expected else "do not fit"
        return (
            f"{self.name}: {self.samples} decodes through generate {claim} AR's exact joint law "
            f"over the {len(SEQUENCES)} sequences (chi-square, significance "
            f"{self.significance:g}): {self.passed}"
        )


def check_joint(
    name: str,
    samples: int,
    seed: int,
    *,
    method: Any,
    lossless_expected: bool = True,
    model: Any = None,
) -> JointCheck:
    """Decode ``samples`` times with ``generate`` and ``method`` (a ``DecodingMethod``) on the tiny
    model and test the counts against the exact AR joint law (module docstring)."""
    from ..models import CausalLMAdapter

    adapter = CausalLMAdapter(
        model if model is not None else tiny_model(), ALLOWED, row_length=ROW_LENGTH
    )
    joint = exact_joint(adapter)
    counts = sample_counts(adapter, samples, seed, method)
    return JointCheck(name, samples, chi_square_pvalue(counts, joint), lossless_expected)


# ---- a lossy rule through the loop: the first token against its exact one-step law --------------

FIRST_TOKEN_LENGTH = 2  # tokens per decode in check_first_token: a window of one draft, then done


def first_token_law(adapter: Any, rule: Any, *, prompt: tuple[int, ...] = PROMPT) -> np.ndarray:
    """The exact law of the first token ``generate`` emits over ``ALLOWED`` [K], for any rule.

    Its first forward (window >= 1, at least two tokens to generate: the window is capped at
    the tokens still needed minus one) verifies the draft d_0 ~ uniform over the K allowed
    tokens, with one-hot q_0 = e_{d_0}, against p_0 = p(. | prompt), before anything else is
    decided, so the first token's law is one verification step averaged over the draft:

        P(x_1 = y) = (1/K) sum_d output_distribution(p_0, e_d, rule)(y),

    computed by gsd_core's exact enumeration (``output_distribution``), not by the loop."""
    from gsd_core import output_distribution

    ids = torch.tensor(prompt)
    adapter.start(ids)
    p0 = adapter.forward(ids, num_rows=1)[0].to(torch.float64).cpu()
    allowed = torch.tensor(ALLOWED)
    law = torch.zeros_like(p0)
    for d in ALLOWED:
        q0 = torch.zeros_like(p0)
        q0[d] = 1.0
        law += output_distribution(p0, q0, rule) / len(ALLOWED)
    if abs(float(law[allowed].sum()) - 1) > 1e-12:
        raise ValueError("the first token's law puts mass outside the allowed tokens")
    return law[allowed].numpy()


class FirstTokenCheck(JointCheck):
    """Outcome of ``check_first_token``: the first tokens of n decodes against their exact law
    (expected to fit, lossy rules included)."""

    def line(self) -> str:
        """The checked-cell text: the verdict and its tolerance only (no sampled number)."""
        return (
            f"{self.name}: the first token of {self.samples} decodes through generate fits "
            f"its exact one-step law (chi-square, significance {self.significance:g}): "
            f"{self.passed}"
        )


def check_first_token(
    name: str, samples: int, seed: int, *, method: Any, model: Any = None
) -> FirstTokenCheck:
    """Decode ``samples`` times ``FIRST_TOKEN_LENGTH`` tokens with ``generate`` and ``method`` (a
    ``DecodingMethod``, window >= 1; lossy rules included) on the tiny model (mostly one forward
    per decode) and test the first tokens' counts against
    ``first_token_law`` of the method's rule. A wrong credited mass, residual or accepted count
    in the loop's verification changes that law."""
    from ..decode.loop import generate
    from ..models import CausalLMAdapter

    model = model if model is not None else tiny_model()
    adapter = CausalLMAdapter(model, ALLOWED, row_length=ROW_LENGTH)
    resolved = method.resolve(adapter)
    law = first_token_law(adapter, resolved.rule)
    generator = torch.Generator().manual_seed(seed)
    counts = np.zeros(len(ALLOWED))
    for _ in range(samples):
        result = generate(
            adapter,
            torch.tensor(PROMPT),
            resolved,
            num_tokens=FIRST_TOKEN_LENGTH,
            generator=generator,
        )
        counts[ALLOWED.index(int(result.tokens[0]))] += 1
    return FirstTokenCheck(name, samples, chi_square_pvalue(counts, law))
