"""Chameleon / Anole and Emu3 against their stock transformers models, on tiny random checkpoints
in the release layouts (``gsd_lab.testing.tiny_checkpoints``, written to tmp_path once per module).

Per family:
- fidelity: the adapter's rows for every position of a window equal the stock model's processed
  distribution for the same prefix: stock logits of a separately loaded stock model
  (``from_pretrained``), stock processors in generate's order (``UnbatchedClassifierFree-
  GuidanceLogitsProcessor`` with the unconditional prompt, ``PrefixConstrainedLogitsProcessor``
  with the family's documented prefix function, temperature, top-k), softmax; float64 both
  (the reference is cast with ``cast_model_float64`` too, so RMSNorm's float32 step does not
  differ), to 1e-12;
- rollback: a window forwarded after ``crop`` equals a full recompute (1e-12);
- AR against stock ``generate``: greedy decoding through the adapter (argmax of its rows, one
  token per forward, the cache extended) gives the tokens of stock ``generate(do_sample=False)``
  with CFG (negative prompt), the prefix function and the family's forced tokens. Sampled stock
  generation cannot be compared draw for draw (it samples from the global RNG with
  ``torch.multinomial``; the package samples with its own explicit generator), so greedy is the
  deterministic path compared;
- lossless: SJD and MC-SJD (maximal coupling) samples fit the exact AR law (enumerated over the
  support tree of the adapter's rows: top-k 2, CFG, a forced end-of-row token for Emu3) by the
  package's chi-square test;
- end to end: ``python -m gsd_lab generate --model <family> --weights DIR --method gsd --out``
  on the tiny checkpoint decodes an image through the family's VQ decoder.

Chameleon's stock forward masks every image logit, so its stock reference is the same stock
model with that masking switched off (``vocabulary_mapping.image_tokens`` emptied: the only way
stock ``generate`` can emit image tokens; docs/family-chameleon.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from gsd_lab.cli import main  # noqa: E402
from gsd_lab.decode.loop import generate  # noqa: E402
from gsd_lab.decode.methods import DecodingMethod  # noqa: E402
from gsd_lab.decode.methods import ClusterAcceptance
from gsd_lab.experiments.lossless import chi_square_pvalue  # noqa: E402
from gsd_lab.models.float64 import cast_model_float64  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
F64 = torch.float64
ATOL = 1e-12
SAMPLES = 200
SIGNIFICANCE = 1e-3


@dataclass
class Family:
    """A tiny checkpoint of one family, its adapter loaded by the package, and the stock side."""

    name: str
    folder: Path
    adapter: Any  # float64, the family's default processing (CFG, top-k, temperature)
    reference: Any  # a stock model loaded with from_pretrained, float64
    prefix_fn: Callable[[int, torch.Tensor], Any]  # the stock prefix_allowed_tokens_fn
    make_adapter: Callable[..., Any]  # (model, **kwargs) -> another adapter of the family
    cli_args: list[str]


def _anole(root: Path) -> Family:
    from transformers import ChameleonForConditionalGeneration

    from gsd_lab.models.anole import AnoleAdapter, load_anole
    from gsd_lab.testing.tiny_checkpoints import save_tiny_anole

    folder = save_tiny_anole(root / "anole")
    adapter = load_anole(folder, vqgan_dir=folder / "tokenizer", device="cpu", top_k=8)
    adapter.set_compute_dtype(F64)
    reference = ChameleonForConditionalGeneration.from_pretrained(str(folder)).eval()
    cast_model_float64(reference)
    mapping = reference.model.vocabulary_mapping
    _ = mapping.bpe2img  # materialise the cached map before emptying image_tokens
    mapping.__dict__["image_tokens"] = []  # stock forward's image-logit mask switched off
    layout, image_ids = adapter.layout, adapter.allowed_tokens.tolist()

    def prefix_fn(batch_id: int, input_ids: torch.Tensor) -> list[int]:
        start = int(torch.nonzero(input_ids == adapter.image_start).flatten()[-1])
        g = input_ids.shape[0] - start - 1
        if g < layout.num_image_tokens:
            return image_ids
        return [layout.tail[min(g - layout.num_image_tokens, len(layout.tail) - 1)]]

    def make(model: Any, **kwargs: Any) -> Any:
        return AnoleAdapter(model, tokenizer=adapter.tokenizer, vqgan=adapter.vqgan, **kwargs)

    cli = ["--model", "anole-7b", "--weights", str(folder), "--vqgan", str(folder / "tokenizer")]
    return Family("anole-7b", folder, adapter, reference, prefix_fn, make, cli)


def _emu3(root: Path) -> Family:
    from transformers import Emu3ForConditionalGeneration

    from gsd_lab.models.emu3 import Emu3Adapter, load_emu3
    from gsd_lab.testing.tiny_checkpoints import save_tiny_emu3

    folder = save_tiny_emu3(root / "emu3")
    adapter = load_emu3(folder, device="cpu")
    adapter.set_compute_dtype(F64)
    reference = Emu3ForConditionalGeneration.from_pretrained(str(folder)).eval()
    cast_model_float64(reference)
    layout = adapter.layout
    height, width = layout.height, layout.width
    visual = reference.vocabulary_mapping.image_tokens
    eol, eof, eoi = layout.row_end, layout.tail[0], layout.tail[1]

    def prefix_fn(batch_id: int, input_ids: torch.Tensor) -> Any:
        # transformers' Emu3 documentation's prefix_allowed_tokens_fn, as written there.
        position = torch.nonzero(input_ids == adapter.image_wrapper, as_tuple=True)[0][0]
        offset = input_ids.shape[0] - position
        if offset % (width + 1) == 0:
            return (eol,)
        elif offset == (width + 1) * height + 1:
            return (eof,)
        elif offset == (width + 1) * height + 2:
            return (eoi,)
        elif offset == (width + 1) * height + 3:
            return (adapter.eos,)
        elif offset > (width + 1) * height + 3:
            return (adapter.pad,)
        return visual

    def make(model: Any, **kwargs: Any) -> Any:
        return Emu3Adapter(model, tokenizer=adapter.tokenizer, **kwargs)

    cli = ["--model", "emu3-gen", "--weights", str(folder)]
    return Family("emu3-gen", folder, adapter, reference, prefix_fn, make, cli)


@pytest.fixture(scope="module", params=["anole", "emu3"])
def family(request, tmp_path_factory) -> Family:
    build = {"anole": _anole, "emu3": _emu3}[request.param]
    return build(tmp_path_factory.mktemp(request.param))


def _prompts(adapter: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return adapter.prompt_ids("a red cat"), adapter.unconditional_prompt_ids()


def _stock_row(family: Family, cond: torch.Tensor, uncond: torch.Tensor) -> torch.Tensor:
    """The stock processed distribution of the token after ``cond`` (generate's processors)."""
    from transformers import LogitsProcessorList
    from transformers.generation.logits_process import (
        PrefixConstrainedLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        UnbatchedClassifierFreeGuidanceLogitsProcessor,
    )

    adapter, model = family.adapter, family.reference
    processors = LogitsProcessorList(
        [
            UnbatchedClassifierFreeGuidanceLogitsProcessor(
                adapter.cfg_scale, model, unconditional_ids=uncond[None], use_cache=False
            ),
            PrefixConstrainedLogitsProcessor(family.prefix_fn, 1),
        ]
    )
    if adapter.temperature != 1.0:
        processors.append(TemperatureLogitsWarper(adapter.temperature))
    if adapter.top_k is not None:
        processors.append(TopKLogitsWarper(adapter.top_k))
    with torch.no_grad():
        scores = model(cond[None]).logits[:, -1]
        return torch.softmax(processors(cond[None], scores), dim=-1)[0]


def _generated(adapter: Any, count: int, seed: int = 5) -> torch.Tensor:
    """``count`` generated tokens valid for the layout: random codes, forced tokens in place."""
    return adapter.random_tokens(torch.arange(count), torch.Generator().manual_seed(seed))


def test_rows_equal_the_stock_processed_distributions(family):
    """A window covering the first rows, a row end (Emu3) and the image's forced tail."""
    adapter = family.adapter
    prompt, uncond = _prompts(adapter)
    n = adapter.num_image_tokens
    count = n + 2
    gen = _generated(adapter, count)
    adapter.start(prompt)
    rows = adapter.forward(torch.cat([prompt, gen[:-1]]), num_rows=count)
    assert adapter.uses_cfg and adapter.top_k is not None
    for j in range(count):
        expected = _stock_row(family, torch.cat([prompt, gen[:j]]), torch.cat([uncond, gen[:j]]))
        torch.testing.assert_close(rows[j], expected, atol=ATOL, rtol=0, msg=f"position {j}")
    forced = adapter.forced_tokens(torch.arange(count))
    assert bool((rows[forced >= 0].max(-1).values == 1).all())  # forced rows are one-hot
    free = rows[forced < 0]
    assert bool((free[:, adapter.allowed_tokens].sum(-1) > 1 - 1e-12).all())  # codes only
    assert int((free[0] > 0).sum()) == adapter.top_k  # top-k bites


def test_rollback_equals_a_full_recompute(family):
    adapter = family.adapter
    prompt, _ = _prompts(adapter)
    gen = _generated(adapter, 12, seed=7)
    adapter.start(prompt)
    adapter.forward(torch.cat([prompt, gen[:8]]))
    adapter.crop(prompt.numel() + 3)
    after = adapter.forward(gen[3:12])
    adapter.start(prompt)
    full = adapter.forward(torch.cat([prompt, gen]), num_rows=9)
    torch.testing.assert_close(after, full, atol=ATOL, rtol=0)


def test_greedy_ar_reproduces_stock_generate(family):
    adapter, model = family.adapter, family.reference
    prompt, uncond = _prompts(adapter)
    # Through the image end (Emu3: <|extra_201|>, <|image end|>; Anole: <eoss>), before EOS.
    count = adapter.num_image_tokens + (2 if family.name == "emu3-gen" else 1)
    adapter.start(prompt)
    rows = adapter.forward(prompt, num_rows=1)
    tokens = []
    for _ in range(count):
        token = rows[-1].argmax().reshape(1)
        tokens.append(int(token))
        rows = adapter.forward(token)
    with torch.no_grad():
        stock = model.generate(
            prompt[None],
            attention_mask=torch.ones_like(prompt)[None],
            do_sample=False,
            max_new_tokens=count,
            min_new_tokens=count,
            prefix_allowed_tokens_fn=family.prefix_fn,
            guidance_scale=adapter.cfg_scale,
            negative_prompt_ids=uncond[None],
            negative_prompt_attention_mask=torch.ones_like(uncond)[None],
            pad_token_id=0,
        )[0, prompt.numel() :]
    assert stock.tolist() == tokens
    assert len(set(tokens[: adapter.layout.width])) > 1  # not a constant image


def _exact_law(adapter: Any, prompt: torch.Tensor, length: int) -> dict[tuple[int, ...], float]:
    """P(sequence) of AR sampling over the support tree of the adapter's rows."""
    law: dict[tuple[int, ...], float] = {}

    def walk(seq: list[int], prob: float) -> None:
        if len(seq) == length:
            law[tuple(seq)] = prob
            return
        adapter.start(prompt)
        row = adapter.forward(torch.cat([prompt, torch.tensor(seq, dtype=torch.long)]), 1)[-1]
        for token in torch.nonzero(row > 0).flatten().tolist():
            walk([*seq, token], prob * float(row[token]))

    walk([], 1.0)
    assert abs(sum(law.values()) - 1) < 1e-9
    return law


@pytest.mark.parametrize("draft", ["independent", "maximal"])
def test_sjd_and_mc_sjd_are_lossless(family, draft):
    """2 x 2 images (Emu3: a forced end of line at position 2), top-k 2, CFG 3: the joint law of
    the first tokens is enumerated exactly and SJD / MC-SJD samples must fit it."""
    model = family.adapter.model
    # Emu3: a one-word negative prompt (the README's is about 200 byte tokens here: slow).
    size = {"latent_side": 2} if family.name == "anole-7b" else {"image_area": 64}
    if family.name == "emu3-gen":
        size["negative_prompt"] = "blurry"
    adapter = family.make_adapter(model, top_k=2, cfg_scale=3.0, **size)
    length = 3 if family.name == "anole-7b" else 4
    prompt = adapter.prompt_ids("a red cat")
    law = _exact_law(adapter, prompt, length)
    sequences = list(law)
    pmf = np.array([law[s] for s in sequences])
    assert pmf.max() > 1.5 / len(pmf)  # far from uniform: the test has power
    counts = np.zeros(len(sequences))
    index = {s: i for i, s in enumerate(sequences)}
    generator = torch.Generator().manual_seed(11 if draft == "independent" else 12)
    method = DecodingMethod("sjd", window=4, draft=draft)
    for _ in range(SAMPLES):
        result = generate(adapter, prompt, method, num_tokens=length, generator=generator)
        counts[index[tuple(result.tokens.tolist())]] += 1  # KeyError: a zero-probability draw
    assert chi_square_pvalue(counts, pmf) > SIGNIFICANCE


def test_cli_generate_gsd_decodes_an_image(family, tmp_path, capsys):
    from PIL import Image

    out = tmp_path / "image.png"
    argv = ["generate", *family.cli_args, "--prompt", "a red cat", "--method", "gsd"]
    assert main([*argv, "--out", str(out), "--json", "--threads", "1"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    layout = family.adapter.layout
    assert report["num_tokens"] == layout.num_image_tokens and report["method"] == "gsd"
    image = np.asarray(Image.open(out))
    expected = family.adapter.decode_images(torch.tensor(report["tokens"]))[0].numpy()
    assert image.shape == expected.shape and image.shape[-1] == 3
    assert np.array_equal(image, expected)
    assert image.std() > 0


def test_bad_input_fails_clearly(family, tmp_path):
    adapter = family.adapter
    tokens = _generated(adapter, adapter.num_image_tokens)
    bad = tokens.clone()
    bad[0] = adapter.layout.tail[0]  # not an image code
    with pytest.raises(ValueError, match="not image codes"):
        adapter.image_codes(bad)
    with pytest.raises(ValueError, match="expected"):
        adapter.image_codes(tokens[:-1])
    with pytest.raises(ValueError, match="non-empty"):
        adapter.prompt_ids("  ")
    with pytest.raises(SystemExit):
        main(["generate", *family.cli_args[:2], "--weights", str(tmp_path), "--prompt", "x"])
    if family.name == "emu3-gen":
        from gsd_lab.models.emu3 import load_emu3

        with pytest.raises(SystemExit):
            main(["generate", *family.cli_args, "--vqgan", str(tmp_path), "--prompt", "x"])
        (tmp_path / "config.json").write_text(json.dumps({"model_type": "chameleon"}))
        with pytest.raises(ValueError, match="model_type 'chameleon'"):
            load_emu3(tmp_path)


def test_generate_batch_matches_generate_alone(family):
    """Two prompts of different lengths in one batch (BatchRunner: padded rows, per-row cache
    lengths): each image's tokens are those of ``generate`` alone with the same seed."""
    from gsd_lab.decode.batch import DecodeRequest, generate_batch

    adapter = family.adapter
    method = DecodingMethod("gsd", window=6, acceptance=ClusterAcceptance(group_size=3)).for_model("family")
    prompts = [adapter.prompt_ids("a red cat"), adapter.prompt_ids("a blue sky on a dog")]
    count = adapter.num_image_tokens
    alone = [
        generate(adapter, p, method, num_tokens=count, generator=torch.Generator().manual_seed(i))
        for i, p in enumerate(prompts)
    ]
    requests = [
        DecodeRequest(p, method, count, generator=torch.Generator().manual_seed(i))
        for i, p in enumerate(prompts)
    ]
    batched = generate_batch(adapter, requests)
    for one, many in zip(alone, batched):
        assert one.tokens.tolist() == many.tokens.tolist() and one.nfe == many.nfe


def test_image_codes_check_the_tail(family):
    adapter = family.adapter
    tokens = _generated(adapter, adapter.num_image_tokens + 2)
    assert adapter.image_codes(tokens).shape == (1, adapter.layout.height, adapter.layout.width)
    wrong = tokens.clone()
    wrong[-1] = adapter.allowed_tokens[0]
    with pytest.raises(ValueError, match="after the image"):
        adapter.image_codes(wrong)


def test_stock_chameleon_forward_masks_image_logits(tmp_path):
    """Why Anole's adapter calls the backbone and lm_head itself: the stock forward sets every
    image-token logit to the dtype minimum (the adapter's rows are positive there)."""
    from transformers import ChameleonForConditionalGeneration

    from gsd_lab.models.anole import AnoleAdapter
    from gsd_lab.testing.tiny_checkpoints import save_tiny_anole

    folder = save_tiny_anole(tmp_path / "anole", with_vqgan=False)
    model = ChameleonForConditionalGeneration.from_pretrained(str(folder)).eval()
    adapter = AnoleAdapter(model, cfg_scale=None, top_k=None)
    prompt = adapter.text_ids_to_prompt([300, 301])
    with torch.no_grad():
        stock = model(prompt[None]).logits[0, -1]
    assert bool((stock[adapter.allowed_tokens] == torch.finfo(stock.dtype).min).all())
    adapter.start(prompt)
    assert bool((adapter.forward(prompt)[-1, adapter.allowed_tokens] > 0).all())
