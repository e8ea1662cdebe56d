"""Multiple drafts through ``generate`` (``DecodingMethod(candidates=k)``, proofs/15).

1. The tree forward (``gsd_lab.models.tree``): every branch's rows equal a plain forward of that
   branch's own prefix, and the cache after ``keep_branch`` and a crop equals a recompute (a
   tiny transformers Llama with and without a padded CFG pair, and the stand-in's own float64
   forward), to float64 rounding.
2. The whole decode's joint law: a lookup-table model that reads its context through the 4-D
   mask and the KV cache (``TreeTableLM``: the token at position t depends on the tokens at t-1
   and t-2, found among the keys the query may see), N = 4 tokens over two allowed tokens, the
   exact AR joint of the 16 sequences by enumeration against samples of ``generate`` (chi-square,
   significance 1e-3, fixed seeds), for k = 2 and 3 (3 > the allowed tokens: an absent
   candidate), independent, maximal and Gumbel drafts.
3. Negative controls, each failing the same test (at 300 samples): the cache keeps branch 0
   whatever was accepted; the branches see each other (a plain causal mask). Over two tokens
   k >= 2 candidates cover the support, so a wrongly declared row for c_2..c_k has no power here;
   a wrongly coupled first candidate has (with k = 2 recursive rejection is SD on c_1 exactly),
   but the exact laws catch both with more power: through ``generate`` itself in
   test_decode_loop_exact.py, through a transcription of the loop over V = 3-4 in
   test_decode_laws_exact.py, and per position in ``tests/core/test_multidraft.py``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("scipy.stats")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import gsd_lab.decode.loop as loop_module  # noqa: E402
import gsd_lab.models.tree as tree  # noqa: E402
from gsd_lab.decode.batch import DecodeRequest, generate_batch  # noqa: E402
from gsd_lab.decode.loop import generate  # noqa: E402
from gsd_lab.decode.methods import DecodingMethod  # noqa: E402
from gsd_lab.decode.methods import AmplifyAcceptance, ClusterAcceptance
from gsd_lab.experiments.lossless import chi_square_pvalue, exact_joint  # noqa: E402
from gsd_lab.models import CausalLMAdapter  # noqa: E402
from test_coupled_drafts_lossless import TableAdapter, TableLM, _Output  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TOL = 1e-12
ALLOWED = (1, 2)
PROMPT = torch.tensor([0, 0])
NUM_TOKENS = 4
SIGNIFICANCE = 1e-3
SEQUENCES = list(itertools.product(ALLOWED, repeat=NUM_TOKENS))


# --- 1. the tree forward --------------------------------------------------------------------

def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=12, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                         initializer_range=0.5)
    return LlamaForCausalLM(config).eval()


def _keys(cache) -> list[torch.Tensor]:
    return tree._kv_tensors(cache)


def _check_tree(make_adapter, prompt, uncond, branches, second_branches, keep):
    """Two tree steps (the first with the prefill) against plain forwards of each branch."""
    adapter = make_adapter()
    adapter.start(prompt, uncond)
    p0, rows = tree.forward_tree(adapter, prompt, branches)
    k, depth = branches.shape
    for j in range(k):
        ref = make_adapter()
        ref.start(prompt, uncond)
        plain = ref.forward(torch.cat([prompt, branches[j]]), num_rows=depth + 1)
        assert (plain[0] - p0).abs().max() <= TOL
        assert (plain[1:] - rows[j]).abs().max() <= TOL
    tree.keep_branch(adapter, keep)
    adapter.crop(prompt.numel() + depth - 1)  # keep the branch but its last token
    head = branches[keep, -1:]
    p0b, rowsb = tree.forward_tree(adapter, head, second_branches)
    tree.keep_branch(adapter, 1)
    ref = make_adapter()
    ref.start(prompt, uncond)
    ref.forward(torch.cat([prompt, branches[keep, :-1]]))
    plain = ref.forward(torch.cat([head, second_branches[1]]))
    assert (plain[0] - p0b).abs().max() <= TOL and (plain[1:] - rowsb[1]).abs().max() <= TOL
    ours, theirs = _keys(adapter.cache), _keys(ref.cache)
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and (a - b).abs().max() <= TOL
    assert adapter.seq_len == ref.seq_len


@pytest.mark.parametrize("cfg", [None, 2.0])
def test_tree_rows_and_rollback_equal_plain_forwards_transformers(cfg):
    model = tiny_llama()
    CausalLMAdapter(model, compute_dtype=torch.float64)  # casts the model in place
    uncond = torch.tensor([4]) if cfg else None
    branches = torch.tensor([[5, 6, 7], [8, 6, 7], [9, 9, 1]])
    _check_tree(lambda: CausalLMAdapter(model, cfg_scale=cfg), torch.tensor([1, 2, 3]), uncond,
                branches, torch.tensor([[3, 4], [5, 6]]), keep=2)


def test_tree_rows_and_rollback_equal_plain_forwards_standin():
    from gsd_lab.standin.adapter import load_standin

    def fresh():
        return load_standin(fast_forward=True, lazy_tokenizer=True)

    adapter = fresh()
    prompt, uncond = adapter.prompt_ids(0), adapter.uncond_prompt_ids()
    codes = adapter.allowed_tokens[:20]
    branches = torch.stack([codes[0:4], codes[4:8], torch.cat([codes[8:9], codes[1:4]])])
    _check_tree(fresh, prompt, uncond, branches, torch.stack([codes[10:13], codes[13:16]]), keep=1)


def test_tree_needs_its_branch_kept_first():
    adapter = CausalLMAdapter(tiny_llama(), compute_dtype=torch.float64)
    adapter.start(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="forward_tree"):
        tree.keep_branch(adapter, 0)
    tree.forward_tree(adapter, torch.tensor([1, 2]), torch.tensor([[3], [4]]))
    with pytest.raises(ValueError, match="keep_branch"):
        tree.forward_tree(adapter, torch.tensor([3]), torch.tensor([[3], [4]]))
    with pytest.raises(ValueError, match="branch must be"):
        tree.keep_branch(adapter, 2)


# --- 2. the decode's joint law ----------------------------------------------------------------

class TreeTableLM(TableLM):
    """Logits of the token at position t + 1 after the query token at position t:
    ``table[t + 1, x_t, x_{t-1}]`` [T, V, V, V] (float64), x_{t-1} the id of the key at position
    t - 1 that the query may see (the 4-D mask's, else causal; x_t itself at t = 0). Ids and
    positions live in the KV cache (keys: ids, values: positions), so rollback is exercised."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=True, **kwargs):
        batch, width = input_ids.shape
        ids = input_ids.to(torch.float64).view(batch, 1, width, 1)
        pos = position_ids.to(torch.float64).view(batch, 1, width, 1)
        keys, values = past_key_values.update(ids, pos, 0)
        key_ids, key_pos = keys.view(batch, -1).long(), values.view(batch, -1).long()
        length = key_ids.shape[1]
        if attention_mask is not None and attention_mask.ndim == 4:
            visible = attention_mask[:, 0].to(torch.bool)
        else:
            queries = length - width + torch.arange(width)
            causal = torch.arange(length)[None, :] <= queries[:, None]
            visible = causal.expand(batch, width, length)
        match = visible & (key_pos[:, None, :] == (position_ids - 1)[:, :, None])
        first = match.to(torch.float64).argmax(-1)  # the first matching key
        before = torch.where(match.any(-1), key_ids.gather(1, first), input_ids)
        return _Output(self.table[position_ids + 1, input_ids, before])


def two_back_table() -> torch.Tensor:
    """Position 2 (generated 0): 0.7 / 0.3; generated 1: 0.4 / 0.6; after that the token two back
    is repeated with probability 0.9 (so a branch that sees the wrong context is caught)."""
    table = torch.full((10, 3, 3, 3), -40.0, dtype=torch.float64)
    table[..., 1:] = 0.0

    def row(position, previous, before, first):
        table[position, previous, before, 1] = np.log(first)
        table[position, previous, before, 2] = np.log(1 - first)

    row(2, slice(None), slice(None), 0.7)
    row(3, slice(None), slice(None), 0.4)
    for t in range(4, 10):
        row(t, slice(None), 1, 0.9)
        row(t, slice(None), 2, 0.1)
    return table


@pytest.fixture(scope="module")
def table_adapter():
    adapter = TableAdapter(TreeTableLM(two_back_table()), ALLOWED, row_length=1)
    return adapter, exact_joint(adapter, prompt=tuple(PROMPT.tolist()), sequences=SEQUENCES)


def pvalue(table_adapter, candidates: int, draft: str, seed: int, samples: int = 1000,
           init: str = "random", tree: tuple[int, ...] | None = None,
           side_tail: int | None = None) -> float:
    adapter, joint = table_adapter
    generator = torch.Generator().manual_seed(seed)
    index = {seq: i for i, seq in enumerate(SEQUENCES)}
    counts = np.zeros(len(SEQUENCES))
    method = DecodingMethod("sjd", window=3, init=init, draft=draft, candidates=candidates,
                            tree=tree, side_tail=side_tail)
    for _ in range(samples):
        result = generate(adapter, PROMPT, method, num_tokens=NUM_TOKENS, generator=generator)
        counts[index[tuple(result.tokens.tolist())]] += 1
    return chi_square_pvalue(counts, joint)


@pytest.mark.parametrize("candidates,draft,init", [
    (2, "independent", "random"), (2, "maximal", "random"), (2, "gumbel", "random"),
    (3, "independent", "repeat_row"),
])
def test_multidraft_decode_matches_the_exact_ar_joint(table_adapter, candidates, draft, init):
    assert pvalue(table_adapter, candidates, draft, seed=5, init=init) > SIGNIFICANCE


@pytest.mark.parametrize("tree_shape,draft,init", [
    ((2, 2), "independent", "random"), ((2, 2), "maximal", "random"),
    ((1, 2), "gumbel", "random"), ((2, 2, 2), "maximal", "repeat_row"),
])
def test_token_tree_decode_matches_the_exact_ar_joint(table_adapter, tree_shape, draft, init):
    """Token trees (proofs/16) through ``generate``, against the exact AR joint (chi-square)."""
    assert pvalue(table_adapter, 1, draft, seed=5, init=init, tree=tree_shape) > SIGNIFICANCE


@pytest.mark.parametrize("tree_shape,side_tail,draft", [
    ((2, 2), 0, "maximal"), ((3, 2), 1, "gumbel"), ((2,), 1, "independent"),
])
def test_spine_tree_decode_matches_the_exact_ar_joint(table_adapter, tree_shape, side_tail,
                                                      draft):
    """Spine trees (short side branches, the window cut to them) through ``generate``."""
    assert pvalue(table_adapter, 1, draft, seed=5, tree=tree_shape,
                  side_tail=side_tail) > SIGNIFICANCE


def test_the_tree_is_used_and_accepts_more(table_adapter):
    """The decode runs tree forwards (1 + k L tokens) and commits more per forward than k = 1."""
    adapter, _ = table_adapter
    nfe = {}
    for k in (1, 2):
        generator = torch.Generator().manual_seed(3)
        method = DecodingMethod("sjd", window=3, candidates=k)
        runs = [generate(adapter, PROMPT, method, num_tokens=NUM_TOKENS, generator=generator)
                for _ in range(200)]
        nfe[k] = np.mean([r.nfe for r in runs])
    assert runs[0].tokens_processed[0] == PROMPT.numel() + 2 * 3
    assert nfe[2] < nfe[1]


# --- 3. negative controls ---------------------------------------------------------------------

_ORIGINAL_KEEP = tree.keep_nodes


def _keep_branch_zero(adapter, nodes):
    """The first chain of the tree (its first children down to a leaf) whatever the walk chose."""
    first = [0]
    parent = adapter._tree[5].tolist()
    while True:
        kids = [i for i, up in enumerate(parent) if up == first[-1]]
        if not kids:
            break
        first.append(kids[0])
    _ORIGINAL_KEEP(adapter, first[: len(nodes)])


def _causal_node_mask(past, head, parent):
    width = head + parent.numel()
    return torch.ones(width, past + width, dtype=torch.bool, device=parent.device).tril(past)


WRONG = {
    "cache keeps branch 0": (loop_module, "keep_nodes", _keep_branch_zero),
    "branches see each other": (tree, "node_mask", _causal_node_mask),
}


@pytest.mark.parametrize("tree_shape", [None, (2, 2)])
@pytest.mark.parametrize("name", list(WRONG))
def test_negative_controls_fail_the_same_test(table_adapter, monkeypatch, name, tree_shape):
    module, attribute, wrong = WRONG[name]
    monkeypatch.setattr(module, attribute, wrong)
    candidates = 2 if tree_shape is None else 1
    assert pvalue(table_adapter, candidates, "independent", seed=5, samples=300,
                  tree=tree_shape) < SIGNIFICANCE


# --- 4. what refuses the option ---------------------------------------------------------------

def test_refusals(table_adapter):
    adapter, _ = table_adapter
    with pytest.raises(ValueError, match="candidates"):
        DecodingMethod("gsd", acceptance=ClusterAcceptance(group_size=2), candidates=2)
    with pytest.raises(ValueError, match="candidates"):
        DecodingMethod("sjd", acceptance=AmplifyAcceptance(scale=2.0), candidates=2)
    with pytest.raises(ValueError, match="candidates must be"):
        DecodingMethod("sjd", candidates=0)
    method = DecodingMethod("sjd", window=3, candidates=2)
    with pytest.raises(ValueError, match="eager"):
        generate(adapter, PROMPT, method, num_tokens=NUM_TOKENS, runner="static")
    request = DecodeRequest(PROMPT, method, NUM_TOKENS, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="candidates"):
        generate_batch(adapter, [request])
    def compute_logits(self, *args):  # a subclass computing its logits its own way (Lumina)
        return CausalLMAdapter.compute_logits(self, *args)

    own_logits = type("OwnLogits", (TableAdapter,), {"compute_logits": compute_logits})
    with pytest.raises(ValueError, match="compute_logits"):
        generate(own_logits(adapter.model, ALLOWED), PROMPT, method, num_tokens=NUM_TOKENS)
    assert DecodingMethod("sjd").to_dict()["candidates"] == 1
    assert DecodingMethod.from_dict(method.to_dict()) == method


def test_command_line_generate_with_candidates(capsys):
    import json

    from gsd_lab.cli import main

    args = ["generate", "--model", "tiny-random", "--class", "1", "--seed", "3", "--method", "sjd",
            "--candidates", "2", "--json", "--threads", "1"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["candidates"] == 2 and len(report["tokens"]) == 64
    assert len(report["tokens_processed"]) == report["nfe"]
    with pytest.raises(SystemExit) as caught:
        main(["generate", "--model", "tiny-random", "--method", "gsd", "--candidates", "2"])
    assert caught.value.code == 2 and "candidates" in capsys.readouterr().err


HELD_TOKENS = 6  # long enough that a pass after the first holds drafts drawn from model rows
HELD_SEQUENCES = list(itertools.product(ALLOWED, repeat=HELD_TOKENS))


def test_spine_tree_holding_model_row_drafts_keeps_the_ar_joint(table_adapter, monkeypatch):
    """The spine tree (1, 2), window 4, side tail 0, maximal drafts over N = 6: passes that end
    on a side branch hold drafts drawn from the model's rows for the next pass (counted: the case
    occurs), and the decode's law is the AR joint (chi-square). What it does not show: two
    controls on those drafts' q (declared uniform, or one-hot) were not caught here, so it has
    no demonstrated power for the q a held draft carries (proofs/16, "Checked by")."""
    adapter, _ = table_adapter
    joint = exact_joint(adapter, prompt=tuple(PROMPT.tolist()), sequences=HELD_SEQUENCES)
    original = loop_module.DecodeLoop.tree_step
    held_rows = 0

    def counted(self, L):
        nonlocal held_rows
        out = original(self, L)
        held_rows += self.held is not None and self.held[2] > 0
        return out

    monkeypatch.setattr(loop_module.DecodeLoop, "tree_step", counted)
    generator = torch.Generator().manual_seed(11)
    index = {seq: i for i, seq in enumerate(HELD_SEQUENCES)}
    counts = np.zeros(len(HELD_SEQUENCES))
    method = DecodingMethod("sjd", window=4, draft="maximal", tree=(1, 2), side_tail=0)
    for _ in range(1000):
        result = generate(adapter, PROMPT, method, num_tokens=HELD_TOKENS, generator=generator)
        counts[index[tuple(result.tokens.tolist())]] += 1
    assert held_rows > 100
    assert chi_square_pvalue(counts, joint) > SIGNIFICANCE
