"""``python -m gsd_lab check-weights WEIGHTS`` for a Janus-Pro checkpoint (config.json's
``model_type`` "janus"; ``gsd_lab.check_weights`` dispatches here). One verdict per item:

files          config.json ("janus"; DeepSeek's own "multi_modality" release is refused, naming
               the transformers conversion), the safetensors shards and their index
architecture   every stored name and shape against a stock ``JanusForConditionalGeneration`` of
               that config on the meta device (``lm_head.weight`` may be absent: tied to the
               text embeddings); the size named when it is Janus-Pro 1B or 7B
               (``janus.RELEASE_TEXT``), a warning otherwise; 576 image tokens on the VQ grid
generation cfg generation_config.json's BOS, pad and BOI ids and the sampling the stock
               ``generate`` would use (``janus.stock_sampling``)
tokenizer      tokenizer.json's names of those ids (<begin_of_image> for BOI) and the prompt ids
generation     the model loaded as ``generate`` loads it, ``rows`` image rows (24 codes each at
               384 px) by AR: finite distributions, codes in the codebook
image          those rows decoded by ``JanusVQVAE.decode`` (the rest of the grid filled with the
               first generated code), saved with --out
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
    WARN,
    ItemRunner,
    RunOptions,
    Verdict,
    ar_rows,
    default_device,
    save_png,
    size_text,
    stored_shards,
    tokenizer_json,
)


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


class _JanusChecks:
    def __init__(self, weights: str | Path, run: RunOptions) -> None:
        self.weights, self.run, self.tokenizer_arg = weights, run, run.tokenizer
        self.folder: Path | None = None
        self.config: Any = None
        self.adapter: Any = None
        self.tokens: torch.Tensor | None = None
        self.ids: tuple[int, int, int] | None = None
        self.failed: set[str] = set()

    def files(self) -> Verdict:
        from transformers import JanusConfig

        from .models.janus import read_janus_config

        self.folder = Path(self.weights).expanduser()
        read_janus_config(self.folder)
        self.config = JanusConfig.from_pretrained(str(self.folder))
        self.shapes, shards, size = stored_shards(self.folder)
        detail = f"{self.folder}: {len(shards)} shard(s), {len(self.shapes)} tensors"
        return Verdict("files", OK, f"{detail}, {size_text(size)}")

    def architecture(self) -> Verdict:
        from transformers import JanusForConditionalGeneration

        from .models.janus import RELEASE_TEXT
        from .models.lumina_mgpt import architecture_mismatch

        stored = self.shapes
        with torch.device("meta"):
            model = JanusForConditionalGeneration(self.config)
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        if "lm_head.weight" not in stored:  # tied to the text embeddings
            expected.pop("lm_head.weight", None)
        problem = architecture_mismatch(expected, stored)
        if problem:
            return Verdict("architecture", FAIL, problem)
        grid = self.config.vq_config.num_patches
        tokens = self.config.vision_config.num_image_tokens
        if grid * grid != tokens:
            return Verdict(
                "architecture", FAIL, f"{tokens} image tokens but a {grid} x {grid} VQ grid"
            )
        text = self.config.text_config
        sizes = {k: getattr(text, k) for k in next(iter(RELEASE_TEXT.values()))}
        known = [name for name, release in RELEASE_TEXT.items() if release == sizes]
        parameters = sum(v.numel() for v in model.parameters())
        detail = (
            f"{len(stored)} tensors match JanusForConditionalGeneration ({parameters / 1e9:.2f}B "
            f"parameters); {tokens} image tokens ({grid} x {grid}), "
            f"{self.config.vq_config.num_embeddings} codes"
        )
        if known:
            return Verdict("architecture", OK, f"{detail}; the {known[0]} size")
        return Verdict("architecture", WARN, f"{detail}; not a Janus-Pro release size {sizes}")

    def generation_config(self) -> Verdict:
        from transformers import GenerationConfig

        from .models.janus import special_ids, stock_sampling

        config = GenerationConfig.from_pretrained(str(self.folder))
        self.ids = special_ids(config)
        settings = stock_sampling(config)
        bos, pad, boi = self.ids
        return Verdict(
            "generation cfg",
            OK,
            f"BOS {bos}, pad {pad}, BOI {boi}; stock sampling: CFG {settings['cfg_scale']}, "
            f"temperature {settings['temperature']}, top-k {settings['top_k']}",
        )

    def tokenizer(self) -> Verdict:
        from .models.janus import BOI_NAME
        from .models.lumina_tokenizer import PromptTokenizer

        path = tokenizer_json(self.tokenizer_arg, self.folder)
        tokenizer = PromptTokenizer(path)
        bos, pad, boi = self.ids
        names = {i: tokenizer.tokenizer.id_to_token(i) for i in (bos, pad, boi)}
        detail = f"{path}: BOS {names[bos]!r}, pad {names[pad]!r}, BOI {names[boi]!r}"
        if names[boi] != BOI_NAME:
            return Verdict("tokenizer", FAIL, f"{detail}; BOI should be {BOI_NAME!r}")
        return Verdict("tokenizer", OK, detail)

    def generation(self) -> Verdict:
        from .models.janus import CPU_PARAMETER_LIMIT, estimated_parameters, load_janus

        run, device = self.run, default_device(self.run.device)
        size = estimated_parameters(self.config)
        if torch.device(device).type == "cpu" and size > CPU_PARAMETER_LIMIT and not run.force_cpu:
            return Verdict("generation", SKIP, "no GPU here (--device cuda; --force-cpu to insist)")
        started = time.perf_counter()
        self.adapter = adapter = load_janus(
            self.folder, device=device, tokenizer=self.tokenizer_arg, force_cpu=run.force_cpu
        )
        loaded = time.perf_counter() - started
        count = max(1, min(run.rows, adapter.row_length)) * adapter.row_length
        result = ar_rows(adapter, run.prompt, count, run.seed)
        self.tokens = result.tokens
        detail = (
            f"loaded in {loaded:.1f} s on {adapter.device} "
            f"({next(adapter.model.parameters()).dtype}); {count} codes by AR in "
            f"{result.wall_seconds:.2f} s, {len(set(result.tokens.tolist()))} distinct"
        )
        if int(result.tokens.min()) < 0 or int(result.tokens.max()) >= adapter.vocab_size:
            return Verdict("generation", FAIL, f"{detail}: codes outside the codebook")
        return Verdict("generation", OK, detail)

    def image(self) -> Verdict:
        adapter = self.adapter
        codes = torch.full((adapter.num_image_tokens,), int(self.tokens[0]), dtype=torch.long)
        codes[: self.tokens.numel()] = self.tokens.cpu()
        pixels = adapter.decode_images(codes)[0].cpu().numpy()
        detail = f"{pixels.shape[1]} x {pixels.shape[0]} pixels decoded by JanusVQVAE"
        return Verdict("image", OK, detail + save_png(pixels, self.run.out))


def check_janus_weights(weights: str | Path, run: RunOptions = RunOptions()) -> list[Verdict]:
    """Every verdict of the module docstring, in order; an item whose prerequisite failed is
    skipped, saying which."""
    checks = _JanusChecks(weights, run)
    return ItemRunner(checks.failed).all([
        ("files", (), checks.files),
        ("architecture", ("files",), checks.architecture),
        ("generation cfg", ("files",), checks.generation_config),
        ("tokenizer", ("generation cfg",), checks.tokenizer),
        ("generation", ("architecture", "generation cfg", "tokenizer"), checks.generation),
        ("image", ("generation",), checks.image),
    ])
