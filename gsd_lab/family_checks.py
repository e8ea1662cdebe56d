"""``python -m gsd_lab check-weights DIR --model anole-7b|emu3-gen [--vqgan DIR] [--out PNG]``:
the first command after downloading Anole (Chameleon layout) or Emu3-Gen. One verdict per item,
each from the code the package runs (the Lumina-mGPT items are ``gsd_lab.check_weights``):

files          config.json (model_type chameleon / emu3), the safetensors shards and their index
               (no tensor twice, the index agrees with the shards, every listed shard present)
architecture   every stored name and shape against the stock class built from config.json on
               the meta device (nothing is loaded); Anole's image encoder ``model.vqmodel.*``
               may be absent; a tied head may be absent where the config ties it
vocabulary     image codes by name (``IMGIMG...`` / ``<|visual token NNNNNN|>``), the family's
               layout tokens, and (Emu3) the codes against the VQ-VAE codebook
tokenizer      ``tokenizer.json`` and its ids of the layout tokens against the vocabulary map
generation     the model loaded as ``generate`` loads it (``load_model``) and ``rows`` image rows
               decoded by AR (a code at every code position, the end of line where Emu3 has one)
image          those rows' codes decoded to pixels by the family's VQ decoder (Anole: --vqgan,
               the Chameleon VQGAN; Emu3: its own VQ-VAE), saved with --out

Exit status 0 when nothing failed, 1 otherwise; items after a failure they depend on are skipped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from .weight_checks import (
    FAIL,
    OK,
    SKIP,
    ItemRunner,
    RunOptions,
    Verdict,
    ar_rows,
    default_device,
    refuse_flags,
    report,
    save_png,
    stored_shards,
    tokenizer_json,
)

MODEL_TYPES = {"anole-7b": "chameleon", "emu3-gen": "emu3"}
LAYOUT_NAMES = {
    "anole-7b": ("<s>", "</s>", "<racm3:break>", "<eoss>"),
    "emu3-gen": (
        "<|image start|>",
        "<|image end|>",
        "<|image token|>",
        "<|extra_200|>",
        "<|extra_201|>",
    ),
}


# transformers' checkpoint conversion for Emu3 (conversion_mapping "emu3" and "Emu3Model"): the
# serialised names (as save_pretrained writes them and the Hub's Emu3-Gen-hf holds them) -> the
# module names, applied in this order, first match only.
EMU3_RENAMES = (
    ("text_model.lm_head.", "lm_head."),
    ("text_model.model.", "model.text_model."),
    ("text_model.", "model.text_model."),
    ("vqmodel.", "model.vqmodel."),
)


def emu3_loaded_name(name: str) -> str:
    """The module name a stored Emu3 tensor loads into (``EMU3_RENAMES``)."""
    for old, new in EMU3_RENAMES:
        if name.startswith(old):
            return new + name[len(old) :]
    return name


class _FamilyChecks:
    def __init__(self, model: str, weights: str | Path, run: RunOptions, vqgan: str | None) -> None:
        self.model, self.folder = model, Path(weights).expanduser()
        self.run, self.tokenizer_arg = run, run.tokenizer
        # load_model's vqgan: the Chameleon VQGAN for Anole; Emu3 has its own VQ-VAE.
        self._vqgan_kwargs = {"vqgan": vqgan} if model == "anole-7b" else {}
        self.config: Any = None
        self.adapter: Any = None
        self.codes: torch.Tensor | None = None
        self.failed: set[str] = set()

    def files(self) -> Verdict:
        path = self.folder / "config.json"
        if not path.is_file():
            raise FileNotFoundError(f"no config.json in {self.folder}")
        raw = json.loads(path.read_text())
        expected = MODEL_TYPES[self.model]
        if raw.get("model_type") != expected:
            raise ValueError(f"model_type {raw.get('model_type')!r}; {self.model} is {expected!r}")
        if not raw.get("vocabulary_map"):
            raise ValueError("config.json has no vocabulary_map (the image token ids)")
        self.config = self._config()
        self.shapes, shards, size = stored_shards(self.folder)
        return Verdict(
            "files", OK, f"{len(shards)} shard(s), {len(self.shapes)} tensors, {size:,} bytes"
        )

    def _config(self) -> Any:
        if self.model == "emu3-gen":
            from transformers import Emu3Config

            return Emu3Config.from_pretrained(str(self.folder))
        from .models.lumina_mgpt import read_lumina_config

        return read_lumina_config(self.folder)

    def architecture(self) -> Verdict:
        from .models.lumina_mgpt import architecture_mismatch

        if self.model == "emu3-gen":
            from transformers import Emu3ForConditionalGeneration

            with torch.device("meta"):
                meta = Emu3ForConditionalGeneration(self.config)
            optional = {"lm_head.weight"} if self.config.tie_word_embeddings else set()
        else:
            from .models.lumina_mgpt import meta_lumina_model

            meta = meta_lumina_model(self.config)  # without the image encoder
            optional = set()
        expected = {k: tuple(v.shape) for k, v in meta.state_dict().items()}
        stored = {
            (emu3_loaded_name(k) if self.model == "emu3-gen" else k): v
            for k, v in self.shapes.items()
            if not (self.model == "anole-7b" and k.startswith("model.vqmodel."))
        }
        for name in optional - set(stored):
            expected.pop(name, None)
        problem = architecture_mismatch(expected, stored)
        if problem:
            return Verdict("architecture", FAIL, problem)
        return Verdict(
            "architecture", OK, f"{len(stored)} tensors match {type(meta).__name__} (names, shapes)"
        )

    def vocabulary(self) -> Verdict:
        vocab = dict(self.config.vocabulary_map)
        absent = [n for n in LAYOUT_NAMES[self.model] if n not in vocab]
        if absent:
            return Verdict("vocabulary", FAIL, f"layout tokens absent: {absent}")
        if self.model == "emu3-gen":
            from .models.emu3 import emu3_code_table

            table = emu3_code_table(vocab, int(self.config.text_config.vocab_size))
            codebook = int(self.config.vq_config.codebook_size)
            if int(table.max()) >= codebook:
                return Verdict(
                    "vocabulary",
                    FAIL,
                    f"VQ codes up to {int(table.max())}, codebook of {codebook}",
                )
        else:
            from .models.anole import chameleon_code_table

            table = chameleon_code_table(vocab, int(self.config.vocab_size))
        count = int((table >= 0).sum())
        return Verdict("vocabulary", OK, f"{count} image codes by name; layout tokens present")

    def tokenizer(self) -> Verdict:
        from .models.lumina_tokenizer import PromptTokenizer

        path = tokenizer_json(self.tokenizer_arg, self.folder)
        tokenizer = PromptTokenizer(path)
        vocab = dict(self.config.vocabulary_map)
        differ = [
            f"{n}: {tokenizer.token_to_id(n)} vs {vocab[n]}"
            for n in LAYOUT_NAMES[self.model]
            if tokenizer.token_to_id(n) != vocab[n]
        ]
        if differ:
            return Verdict("tokenizer", FAIL, f"{path} disagrees with the vocabulary: {differ[:4]}")
        return Verdict("tokenizer", OK, f"{path}: layout token ids agree with the vocabulary")

    def generation(self) -> Verdict:
        from .models import load_model

        run = self.run
        started = time.perf_counter()
        try:
            self.adapter = load_model(
                self.model,
                weights=str(self.folder),
                device=default_device(run.device),
                tokenizer=self.tokenizer_arg,
                force_cpu=run.force_cpu,
                **self._vqgan_kwargs,
            )
        except ValueError as error:
            if "force_cpu" in str(error):
                return Verdict("generation", SKIP, f"{error}")
            raise
        loaded = time.perf_counter() - started
        adapter = self.adapter
        rows = max(1, min(run.rows, adapter.layout.height))
        count = rows * adapter.layout.row_length
        result = ar_rows(adapter, run.prompt, count, run.seed)
        tokens = result.tokens.view(rows, adapter.layout.row_length)
        layout = adapter.layout
        if layout.row_end is not None and not bool((tokens[:, -1] == layout.row_end).all()):
            return Verdict("generation", FAIL, "end-of-line tokens misplaced")
        codes = tokens[:, : layout.width]
        if not bool((adapter.code_of_token[codes] >= 0).all()):
            return Verdict("generation", FAIL, "a code position holds a non-image token")
        self.codes = adapter.code_of_token[codes]
        return Verdict(
            "generation",
            OK,
            f"loaded in {loaded:.1f} s on {adapter.device}; {count} tokens ({rows} rows) by AR in "
            f"{result.wall_seconds:.2f} s, {len(set(codes.flatten().tolist()))} distinct codes",
        )

    def image(self) -> Verdict:
        adapter = self.adapter
        if adapter.decode_indices is None:
            return Verdict("image", SKIP, "no --vqgan (Anole decodes with the Chameleon VQGAN)")
        pixels = adapter.decode_indices(self.codes[None])[0].cpu().numpy()
        return Verdict(
            "image",
            OK,
            f"{self.codes.shape[0]} x {self.codes.shape[1]} codes -> {pixels.shape[1]} x "
            f"{pixels.shape[0]} pixels" + save_png(pixels, self.run.out),
        )


def check_family_weights(
    model: str,
    weights: str | Path,
    *,
    vqgan: str | None = None,
    run: RunOptions = RunOptions(),
) -> list[Verdict]:
    """Every verdict of the module docstring, in order, for ``model`` "anole-7b" or "emu3-gen"."""
    if model not in MODEL_TYPES:
        raise ValueError(f"model must be one of {tuple(MODEL_TYPES)}, got {model!r}")
    if vqgan is not None and model == "emu3-gen":
        raise ValueError("--vqgan does not apply to emu3-gen (it decodes with its own VQ-VAE)")
    checks = _FamilyChecks(model, weights, run, vqgan)
    return ItemRunner(checks.failed).all([
        ("files", (), checks.files),
        ("architecture", ("files",), checks.architecture),
        ("vocabulary", ("files",), checks.vocabulary),
        ("tokenizer", ("files",), checks.tokenizer),
        ("generation", ("architecture", "vocabulary", "tokenizer"), checks.generation),
        ("image", ("generation",), checks.image),
    ])


def main(args: Any) -> int:
    """``check-weights --model anole-7b|emu3-gen`` (``gsd_lab.cli``); --clip and --resolution,
    Lumina-mGPT's, are refused."""
    started = time.perf_counter()
    refuse_flags(args, ("--clip", "--resolution"), f"--model {args.model} (Lumina-mGPT only)")
    try:
        run = RunOptions.from_args(args)
        verdicts = check_family_weights(args.model, args.weights, vqgan=args.vqgan, run=run)
    except ValueError as error:
        args.command_parser.error(str(error))
    return report(args, verdicts, started, model=args.model)
