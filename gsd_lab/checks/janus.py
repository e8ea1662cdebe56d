"""``check-weights`` items of a Janus-Pro download (config.json's ``model_type`` "janus";
``cli.check_weights`` detects it):

files          config.json ("janus"; DeepSeek's "multi_modality" refused, naming the transformers
               conversion), the safetensors shards and their index
architecture   stored names and shapes against stock ``JanusForConditionalGeneration`` (a tied
               ``lm_head.weight`` may be absent); the Janus-Pro size (``janus.RELEASE_TEXT``)
               named, else a warning; the image tokens on the VQ grid
generation cfg generation_config.json's BOS, pad and BOI ids and the stock sampling
tokenizer      tokenizer.json's names of those ids (<begin_of_image> for BOI)
generation     ``rows`` image rows by AR of the model loaded as ``generate`` loads it
image          those rows decoded by ``JanusVQVAE.decode`` (the grid's rest the first code)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .checkpoint import files_outcome, on_meta, shape_mismatch, tokenizer_json
from .generation import RunOptions, ar_rows, load_timed, save_png
from .items import FAIL, OK, SKIP, WARN, Outcome, Verdict, run_items


def is_janus_folder(weights: str | Path) -> bool:
    """Whether ``weights`` (a folder) holds a config.json of model_type "janus" or DeepSeek's
    "multi_modality" (so that the Janus checks say why it cannot load)."""
    path = Path(weights).expanduser() / "config.json"
    if not path.is_file():
        return False
    try:
        kind = json.loads(path.read_text()).get("model_type")
    except (OSError, ValueError):
        return False
    return kind in ("janus", "multi_modality")


class JanusChecks:
    """The items' checks and what they share (folder, config, special ids, adapter, codes)."""

    def __init__(self, weights: str | Path, run: RunOptions) -> None:
        self.folder, self.run = Path(weights).expanduser(), run
        self.config: Any = None
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.ids: tuple[int, int, int] | None = None  # BOS, pad, BOI: the generation cfg item
        self.adapter: Any = None
        self.tokens: torch.Tensor | None = None

    def files(self) -> Outcome:
        from transformers import JanusConfig

        from ..models.janus import read_janus_config

        read_janus_config(self.folder)
        self.config = JanusConfig.from_pretrained(str(self.folder))
        self.shapes, outcome = files_outcome(self.folder)
        return outcome

    def architecture(self) -> Outcome:
        from transformers import JanusForConditionalGeneration

        from ..models.janus import RELEASE_TEXT

        model = on_meta(JanusForConditionalGeneration, self.config)
        problem = shape_mismatch(model, self.shapes, optional=("lm_head.weight",))  # tied
        if problem:
            return FAIL, problem
        grid = self.config.vq_config.num_patches
        tokens = self.config.vision_config.num_image_tokens
        if grid * grid != tokens:
            return FAIL, f"{tokens} image tokens but a {grid} x {grid} VQ grid"
        text = self.config.text_config
        sizes = {k: getattr(text, k) for k in next(iter(RELEASE_TEXT.values()))}
        known = [name for name, release in RELEASE_TEXT.items() if release == sizes]
        parameters = sum(v.numel() for v in model.parameters())
        detail = (
            f"{len(self.shapes)} tensors match JanusForConditionalGeneration "
            f"({parameters / 1e9:.2f}B parameters); {tokens} image tokens ({grid} x {grid}), "
            f"{self.config.vq_config.num_embeddings} codes"
        )
        if known:
            return OK, f"{detail}; the {known[0]} size"
        return WARN, f"{detail}; not a Janus-Pro release size {sizes}"

    def generation_config(self) -> Outcome:
        from transformers import GenerationConfig

        from ..models.janus import special_ids, stock_sampling

        config = GenerationConfig.from_pretrained(str(self.folder))
        bos, pad, boi = self.ids = special_ids(config)
        settings = stock_sampling(config)
        return OK, (
            f"BOS {bos}, pad {pad}, BOI {boi}; stock sampling: CFG {settings['cfg_scale']}, "
            f"temperature {settings['temperature']}, top-k {settings['top_k']}"
        )

    def tokenizer(self) -> Outcome:
        from ..models.janus import BOI_NAME
        from ..models.lumina_tokenizer import PromptTokenizer

        path = tokenizer_json(self.run.tokenizer, self.folder)
        tokenizer = PromptTokenizer(path)
        if self.ids is None:
            raise RuntimeError("the tokenizer item runs after the generation cfg item")
        bos, pad, boi = self.ids
        names = {i: tokenizer.tokenizer.id_to_token(i) for i in (bos, pad, boi)}
        detail = f"{path}: BOS {names[bos]!r}, pad {names[pad]!r}, BOI {names[boi]!r}"
        if names[boi] != BOI_NAME:
            return FAIL, f"{detail}; BOI should be {BOI_NAME!r}"
        return OK, detail

    def generation(self) -> Outcome:
        from ..models.janus import load_janus

        run = self.run
        adapter, loaded = load_timed(lambda: load_janus(self.folder, **run.load_kwargs))
        if adapter is None:
            return SKIP, loaded
        self.adapter = adapter
        count = max(1, min(run.rows, adapter.row_length)) * adapter.row_length
        result = ar_rows(adapter, run, count)
        tokens = self.tokens = result.tokens
        detail = (
            f"{loaded}; {count} codes by AR in {result.wall_seconds:.2f} s, "
            f"{len(set(tokens.tolist()))} distinct"
        )
        if int(tokens.min()) < 0 or int(tokens.max()) >= adapter.vocab_size:
            return FAIL, f"{detail}: codes outside the codebook"
        return OK, detail

    def image(self) -> Outcome:
        adapter = self.adapter
        codes = torch.full((adapter.num_image_tokens,), int(self.tokens[0]), dtype=torch.long)
        codes[: self.tokens.numel()] = self.tokens.cpu()
        pixels = adapter.decode_images(codes)[0].cpu().numpy()
        detail = f"{pixels.shape[1]} x {pixels.shape[0]} pixels decoded by JanusVQVAE"
        return OK, detail + save_png(pixels, self.run.out)


def check_janus_weights(weights: str | Path, run: RunOptions = RunOptions()) -> list[Verdict]:
    """Every verdict of the module docstring, in order; an item whose prerequisite failed is
    skipped, saying which."""
    checks = JanusChecks(weights, run)
    return run_items([
        ("files", (), checks.files),
        ("architecture", ("files",), checks.architecture),
        ("generation cfg", ("files",), checks.generation_config),
        ("tokenizer", ("generation cfg",), checks.tokenizer),
        ("generation", ("architecture", "generation cfg", "tokenizer"), checks.generation),
        ("image", ("generation",), checks.image),
    ])
