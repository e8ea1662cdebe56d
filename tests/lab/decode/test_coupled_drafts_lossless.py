"""Coupled drafts keep SJD lossless (proofs/09_coupled_drafts.md), through ``generate`` itself.

The model is a lookup table over two allowed tokens {1, 2}: the logits of the token at absolute
position t are ``table[t, x_{t-1}, x_{t-2}]`` (a real KV cache holds the ids, so the adapter's
cache bookkeeping runs as for a transformer, at a fraction of its cost). N = 4 generated tokens:
the AR joint over the 16 sequences is the product of the adapter's conditionals, enumerated
exactly. Samples of ``generate`` are compared with it by a chi-square test (cells expected below
5 pooled; significance 1e-3; fixed seeds, so deterministic; ``gsd_lab.experiments.lossless``).

Two models, each chosen so that a deliberately wrong coupling changes the joint law a lot (the
power check: each wrong coupling must fail the same test at the same sample size):
- "context": position 0 is fixed (0.79 / 0.21), position 1 almost surely differs from position 0,
  position 2 leans slightly (0.51) towards position 0, position 3 differs from position 2 with
  probability 0.8; random init, window 2. After a rejection at position 0, position 1's draft
  was drawn given the wrong token and is rejected again, so position 2 is re-drafted a second
  time from a row q_old (given the rejected token) to q_new: keeping d with probability
  min(1, q_new(d)) instead of min(1, q_new(d) / q_old(d)) is caught here.
- "context-free": every position 0.7 / 0.3 whatever came before; repeat-row init (the previous
  token, known to the verifier), window 3. Here the fresh draft d is fixed given the past, so a
  re-draft that resamples from q_new instead of norm((q_new - q_old)+), one that declares q_old
  for a kept draft (SCD's released code, ``gsd_lab.decode.coupling``), and one Gumbel vector shared by
  all positions (two positions drafted in one pass from equal rows get equal drafts) are caught.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("scipy.stats")
from transformers import DynamicCache  # noqa: E402

import gsd_lab.decode.coupling as coupling  # noqa: E402
from gsd_core import sample_categorical  # noqa: E402
from gsd_lab.decode.loop import generate  # noqa: E402
from gsd_lab.experiments.lossless import chi_square_pvalue, exact_joint  # noqa: E402
from gsd_lab.decode.methods import DecodingMethod  # noqa: E402
from gsd_lab.models import CausalLMAdapter  # noqa: E402

ALLOWED = (1, 2)
PROMPT = torch.tensor([0, 0])
NUM_TOKENS = 4
SIGNIFICANCE = 1e-3
SEQUENCES = list(itertools.product(ALLOWED, repeat=NUM_TOKENS))

pytestmark = pytest.mark.usefixtures("one_thread")


class _Output:
    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits


class TableLM(torch.nn.Module):
    """Logits of the token at absolute position t: ``table[t, x_{t-1}, x_{t-2}]`` [T, V, V, V]
    (float64). The ids go through the KV cache it is given, so rolled-back drafts are forgotten."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(table, requires_grad=False)
        self.head = torch.nn.Linear(1, table.shape[-1], bias=False)

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.head

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.head

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=True,
                **kwargs):
        batch, width = input_ids.shape
        ids = input_ids.to(torch.float64).view(batch, 1, width, 1)
        keys, _ = past_key_values.update(ids, ids, 0)
        seq = keys.view(batch, -1).long()
        n = seq.shape[1]
        padded = torch.cat([seq[:, :1], seq], 1)
        previous, before = padded[:, 1 + n - width: 1 + n], padded[:, n - width: n]
        position = (torch.arange(n - width, n) + 1).expand(batch, -1)
        return _Output(self.table[position, previous, before])


class TableAdapter(CausalLMAdapter):
    def _new_cache(self):
        return DynamicCache()


def _table() -> torch.Tensor:
    table = torch.full((8, 3, 3, 3), -40.0, dtype=torch.float64)
    table[..., 1:] = 0.0
    return table


def _row(table, position, previous, before, first):
    """Set P(token 1) = first at ``position`` (slices allowed)."""
    table[position, previous, before, 1], table[position, previous, before, 2] = math.log(first), math.log(1 - first)


def context_table() -> torch.Tensor:
    table = _table()
    _row(table, 2, slice(None), slice(None), 0.79)  # generated position 0
    for token, other in ((1, 2), (2, 1)):
        toward = 0.97 if other == 1 else 0.03
        _row(table, 3, token, slice(None), toward)  # position 1: the other token of position 0
        _row(table, 4, slice(None), token, 0.51 if token == 1 else 0.49)  # position 2: leans to position 0
        _row(table, 5, token, slice(None), 0.8 if other == 1 else 0.2)  # position 3: the other of position 2
    return table


def context_free_table() -> torch.Tensor:
    table = _table()
    _row(table, slice(None), slice(None), slice(None), 0.7)
    return table


MODELS = {"context": (context_table, "random", 2, 1200), "context-free": (context_free_table, "repeat_row", 3, 1000)}


@pytest.fixture(scope="module")
def adapters() -> dict[str, tuple[CausalLMAdapter, np.ndarray]]:
    out = {}
    for name, (table, *_) in MODELS.items():
        adapter = TableAdapter(TableLM(table()), ALLOWED, row_length=1)
        out[name] = (adapter, exact_joint(adapter, prompt=tuple(PROMPT.tolist()), sequences=SEQUENCES))
    return out


def pvalue(adapters, model: str, draft: str, seed: int) -> float:
    adapter, joint = adapters[model]
    _, init, window, samples = MODELS[model]
    generator = torch.Generator().manual_seed(seed)
    index = {seq: i for i, seq in enumerate(SEQUENCES)}
    counts = np.zeros(len(SEQUENCES))
    for _ in range(samples):
        result = generate(adapter, PROMPT, DecodingMethod("sjd", window=window, init=init, draft=draft),
                          num_tokens=NUM_TOKENS, generator=generator)
        counts[index[tuple(result.tokens.tolist())]] += 1
    return chi_square_pvalue(counts, joint)


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("draft", ["maximal", "gumbel"])
def test_coupled_drafts_match_the_exact_ar_joint(adapters, model, draft):
    assert pvalue(adapters, model, draft, seed=41) > SIGNIFICANCE


# --- negative controls: each wrong coupling fails the same test ------------------------------

def _gathered(rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return rows.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def residual_from_q_new(previous, previous_q, q, generator):
    """Keeps d as maximal coupling does, but redraws from q_new instead of norm((q_new - q_old)+)."""
    uniforms = torch.rand(q.shape[0], 2, generator=generator, dtype=torch.float64)
    old, new = _gathered(previous_q, previous), _gathered(q, previous)
    keep = (old > 0) & (uniforms[:, 0] * old < new)
    return torch.where(keep, previous, sample_categorical(q, uniforms[:, 1]))


def keep_with_q_new(previous, previous_q, q, generator):
    """Keeps d with probability min(1, q_new(d)) instead of min(1, q_new(d) / q_old(d))."""
    uniforms = torch.rand(q.shape[0], 2, generator=generator, dtype=torch.float64)
    keep = (_gathered(previous_q, previous) > 0) & (uniforms[:, 0] < _gathered(q, previous))
    excess = (q - previous_q).clamp(min=0)
    excess = torch.where(excess.sum(-1, keepdim=True) > 0, excess, q)
    return torch.where(keep, previous, sample_categorical(excess, uniforms[:, 1]))


_REDRAFT = coupling.DraftChain.redraft


def declare_q_old_when_kept(self, drafts, q, rows, accepted):
    """Maximal coupling, but a kept draft is verified against the q it was drawn from (as SCD's
    released ``SpeculativeSampler.__call__`` stores it), not against q_new, its law."""
    new, new_q = _REDRAFT(self, drafts, q, rows, accepted)
    previous = drafts[accepted + 1:]
    kept = torch.zeros(new.shape[0], dtype=torch.bool)
    kept[: previous.shape[0]] = new[: previous.shape[0]] == previous
    old_q = torch.cat([q[accepted + 1:], rows[-1:]])
    return new, torch.where(kept.unsqueeze(-1), old_q, new_q)


def one_noise_for_all_positions(self, drafts, q, rows, accepted):
    """Gumbel coupling with one noise vector shared by every position instead of one each."""
    if not hasattr(self, "_shared"):
        self._shared = self._fresh_noise(1)
    return coupling.gumbel_argmax(rows, self._shared.expand_as(rows)), rows


WRONG = {
    "keep with probability q_new(d)": ("context", "maximal", "maximal_coupling", keep_with_q_new),
    "residual from q_new": ("context-free", "maximal", "maximal_coupling", residual_from_q_new),
    "kept draft declared with q_old (SCD release)": ("context-free", "maximal", "redraft", declare_q_old_when_kept),
    "one Gumbel vector for all positions": ("context-free", "gumbel", "redraft", one_noise_for_all_positions),
}


@pytest.mark.parametrize("wrong", list(WRONG))
def test_wrong_couplings_fail_the_same_test(adapters, monkeypatch, wrong):
    model, draft, name, replacement = WRONG[wrong]
    if name == "redraft":
        monkeypatch.setattr(coupling.DraftChain, "redraft", replacement)
    else:
        monkeypatch.setattr(coupling, name, replacement)
    assert pvalue(adapters, model, draft, seed=41) < SIGNIFICANCE
