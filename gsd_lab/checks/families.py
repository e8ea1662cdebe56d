"""``check-weights --model anole-7b|emu3-gen`` items (Anole: Chameleon layout; Emu3-Gen):

files          config.json (model_type chameleon / emu3, a vocabulary_map), the shards and index
architecture   stored names and shapes, as the loader loads them, against the stock class of
               config.json (Anole: the image encoder ``model.vqmodel.*`` may be absent, q/k-norms
               expanded as ``load_anole`` expands them; Emu3: a tied head may be absent)
vocabulary     image codes by name, the layout tokens, (Emu3) the codes against the codebook
tokenizer      ``tokenizer.json``'s ids of the layout tokens against the vocabulary map
generation     ``rows`` image rows by AR of the model ``load_model`` loads
image          their codes decoded by the family's VQ decoder (Anole: --vqgan's), saved with --out
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .checkpoint import chameleon_shapes, files_outcome, on_meta, shape_mismatch, tokenizer_json
from .generation import RunOptions, grid_generation, save_png
from .items import FAIL, OK, SKIP, Outcome, Verdict, run_items

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


class FamilyChecks:
    """The items' checks for ``model`` (a key of ``MODEL_TYPES``) and what they share."""

    def __init__(self, model: str, weights: str | Path, run: RunOptions, vqgan: str | None) -> None:
        self.model, self.folder, self.run = model, Path(weights).expanduser(), run
        self.emu3 = model == "emu3-gen"
        # load_model's vqgan: the Chameleon VQGAN for Anole; Emu3 has its own VQ-VAE.
        self.vqgan_kwargs = {} if self.emu3 else {"vqgan": vqgan}
        self.config: Any = None
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.adapter: Any = None
        self.codes: torch.Tensor | None = None

    def files(self) -> Outcome:
        path = self.folder / "config.json"
        if not path.is_file():
            raise FileNotFoundError(f"no config.json in {self.folder}")
        raw = json.loads(path.read_text())
        expected = MODEL_TYPES[self.model]
        if raw.get("model_type") != expected:
            raise ValueError(
                f"{path} has model_type {raw.get('model_type')!r}; {self.model} is {expected!r}"
            )
        if not raw.get("vocabulary_map"):
            raise ValueError(f"{path} has no vocabulary_map (the image token ids)")
        if self.emu3:
            from transformers import Emu3Config

            self.config = Emu3Config.from_pretrained(str(self.folder))
        else:
            from ..models.lumina_checkpoint import read_lumina_config

            self.config = read_lumina_config(self.folder)
        self.shapes, outcome = files_outcome(self.folder)
        return outcome

    def architecture(self) -> Outcome:
        if self.emu3:
            from transformers import Emu3ForConditionalGeneration

            meta = on_meta(Emu3ForConditionalGeneration, self.config)
            stored = {emu3_loaded_name(k): v for k, v in self.shapes.items()}
            optional = ("lm_head.weight",) if self.config.tie_word_embeddings else ()
        else:
            from ..models.lumina_checkpoint import meta_lumina_model

            meta = meta_lumina_model(self.config)  # without the image encoder
            stored = chameleon_shapes(self.shapes, self.config)
            optional = ()
        problem = shape_mismatch(meta, stored, optional=optional)
        if problem:
            return FAIL, problem
        return OK, f"{len(stored)} tensors match {type(meta).__name__} (names, shapes)"

    def vocabulary(self) -> Outcome:
        vocab = dict(self.config.vocabulary_map)
        absent = [n for n in LAYOUT_NAMES[self.model] if n not in vocab]
        if absent:
            return FAIL, f"layout tokens absent: {absent}"
        if self.emu3:
            from ..models.emu3 import emu3_code_table

            table = emu3_code_table(vocab, int(self.config.text_config.vocab_size))
            codebook = int(self.config.vq_config.codebook_size)
            if int(table.max()) >= codebook:
                return FAIL, f"VQ codes up to {int(table.max())}, codebook of {codebook}"
        else:
            from ..models.anole import chameleon_code_table

            table = chameleon_code_table(vocab, int(self.config.vocab_size))
        return OK, f"{int((table >= 0).sum())} image codes by name; layout tokens present"

    def tokenizer(self) -> Outcome:
        from ..models.lumina_tokenizer import PromptTokenizer

        path = tokenizer_json(self.run.tokenizer, self.folder)
        tokenizer = PromptTokenizer(path)
        vocab = dict(self.config.vocabulary_map)
        differ = [
            f"{n}: {tokenizer.token_to_id(n)} vs {vocab[n]}"
            for n in LAYOUT_NAMES[self.model]
            if tokenizer.token_to_id(n) != vocab[n]
        ]
        if differ:
            return FAIL, f"{path} disagrees with the vocabulary: {differ[:4]}"
        return OK, f"{path}: layout token ids agree with the vocabulary"

    def generation(self) -> Outcome:
        from ..models import load_model

        def load() -> Any:
            kwargs = {**self.run.load_kwargs, **self.vqgan_kwargs}
            return load_model(self.model, weights=str(self.folder), **kwargs)

        self.adapter, outcome, self.codes = grid_generation(load, self.run)
        return outcome

    def image(self) -> Outcome:
        adapter = self.adapter
        if adapter.decode_indices is None:
            return SKIP, "no --vqgan (Anole decodes with the Chameleon VQGAN)"
        pixels = adapter.decode_indices(self.codes[None])[0].cpu().numpy()
        return OK, (
            f"{self.codes.shape[0]} x {self.codes.shape[1]} codes -> {pixels.shape[1]} x "
            f"{pixels.shape[0]} pixels" + save_png(pixels, self.run.out)
        )


def check_family_weights(
    model: str, weights: str | Path, *, vqgan: str | None = None, run: RunOptions = RunOptions()
) -> list[Verdict]:
    """Every verdict of the module docstring, in order, for ``model`` "anole-7b" or "emu3-gen"."""
    if model not in MODEL_TYPES:
        raise ValueError(f"model must be one of {tuple(MODEL_TYPES)}, got {model!r}")
    if vqgan is not None and model == "emu3-gen":
        raise ValueError("--vqgan does not apply to emu3-gen (it decodes with its own VQ-VAE)")
    checks = FamilyChecks(model, weights, run, vqgan)
    return run_items([
        ("files", (), checks.files),
        ("architecture", ("files",), checks.architecture),
        ("vocabulary", ("files",), checks.vocabulary),
        ("tokenizer", ("files",), checks.tokenizer),
        ("generation", ("architecture", "vocabulary", "tokenizer"), checks.generation),
        ("image", ("generation",), checks.image),
    ])
