"""``python -m gsd_lab check-weights WEIGHTS [--vqgan DIR] [--clip DIR]``: the first command after
downloading Lumina-mGPT. One verdict per item, each from the code the package runs:

files          config.json, the safetensors shards and their index (no tensor twice, the index
               agrees with the shards, every listed shard present), sizes
architecture   ``architectures`` and the q/k-norm layout it implies (Lumina's per-rank
               [model_parallel_size, head_dim] or transformers' [heads, head_dim]), then every
               stored name and shape against stock Chameleon (shapes only: nothing is loaded)
vocabulary     the vocabulary map: image codes (by name), the layout tokens and the size token of
               the resolution; on the 7B vocabulary (65,536) the release's ids (BOS 0, end of turn
               8710, image start 8197, end 8196, row end 8803, size 8804 + cells, codes 4..8195)
tokenizer      which tokenizer.json (the checkpoint's or the 768 repo's) and its ids of the
               layout tokens against the vocabulary map
prompt ids     the package's prompt ids against a fresh ``tokenizers.Tokenizer.from_file`` of that
               file (and that they decode back to the prompt); what transformers' classes would
               give is reported (they are not used)
generation     the model loaded as ``generate`` loads it, ``rows`` image rows decoded by AR (finite
               distributions, a code at every code position, the row end at every row end)
image          (--vqgan) the VQGAN loaded (which layout it was found in, Meta's checksum, its
               codebook against the vocabulary's codes) and those rows decoded to pixels by it,
               saved with --out
clip           (--clip) the CLIP folder loads and scores that image against the prompt

A Janus-Pro checkpoint (config.json's model_type "janus") gets its own items
(``gsd_lab.check_weights_janus``). Exit status 0 when nothing failed (warnings allowed), 1
otherwise. Items after a failure that
they depend on are skipped, saying why.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .weight_checks import (
    FAIL,
    OK,
    SKIP,
    WARN,
    ItemRunner,
    Verdict,
    ar_rows,
    default_device,
    RunOptions,
    refuse_flags,
    report,
    save_png,
    size_text,
    stored_shards,
)

RELEASE_VOCAB_SIZE = 65536
# The 7B release's ids (Chameleon's vocabulary; docs/lumina-mgpt.md section 5).
RELEASE_IDS = {
    "bos": 0,
    "end_of_turn": 8710,
    "image_start": 8197,
    "image_end": 8196,
    "row_end": 8803,
}
RELEASE_CODES = (4, 8195)
RELEASE_SIZE_OFFSET = 8804
META_VQGAN_MD5 = "1a559fb5dab4d351d19496ae89da1db1"  # Meta's checklist.chk for tokenizer/vqgan.ckpt


def resolution_from_name(folder: str | Path) -> int | None:
    """512, 768 or 1024 when the folder's path names it (lumina-mgpt-7b-512, ...-7B-1024)."""
    match = re.search(r"7b-(512|768|1024)(?!\d)", str(folder), re.IGNORECASE)
    return int(match.group(1)) if match else None


class _Checks:
    """State shared by the items (the folder, config, loaded adapter, decoded image)."""

    def __init__(self, weights: str | Path, resolution: int, run: RunOptions) -> None:
        self.weights, self.resolution, self.run = weights, resolution, run
        self.tokenizer_arg = run.tokenizer
        self.folder: Path | None = None
        self.config: Any = None
        self.adapter: Any = None
        self.tokenizer_file: Path | None = None
        self.prompt_tokenizer: Any = None
        self.layout: Any = None
        self.tokens: torch.Tensor | None = None
        self.pixels: Any = None
        self.failed: set[str] = set()

    # ---- items ----

    def files(self) -> Verdict:
        from .models.lumina_mgpt import read_lumina_config, resolve_weights_dir

        self.folder = resolve_weights_dir(self.weights, self.resolution)
        self.config = read_lumina_config(self.folder)
        shapes, shards, size = stored_shards(self.folder)
        index = self.folder / "model.safetensors.index.json"
        note = ""
        if index.is_file():
            total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
            note = "; index consistent" + (f", total_size {size_text(total)}" if total else "")
        return Verdict(
            "files",
            OK,
            f"{self.folder}: {len(shards)} shard(s), {len(shapes)} tensors, {size_text(size)} on "
            f"disk{note}",
        )

    def architecture(self) -> Verdict:
        from .models.lumina_mgpt import (
            IMAGE_ENCODER_PREFIX,
            architecture_mismatch,
            estimated_parameters,
            expand_qk_norm,
            is_qk_norm,
            meta_lumina_model,
            stored_tensors,
            stores_expanded_qk_norms,
        )

        config = self.config
        stored: dict[str, tuple[int, ...]] = {}
        qk_shapes: set[tuple[int, ...]] = set()
        for name, _, handle in stored_tensors(self.folder):
            if name.startswith(IMAGE_ENCODER_PREFIX):
                continue
            shape = tuple(handle.get_slice(name).get_shape())
            if is_qk_norm(name):
                qk_shapes.add(shape)
                shape = tuple(expand_qk_norm(name, torch.empty(shape, device="meta"), config).shape)
            stored[name] = shape
        expected = {k: tuple(v.shape) for k, v in meta_lumina_model(config).state_dict().items()}
        problem = architecture_mismatch(expected, stored)
        architectures = getattr(config, "architectures", None)
        layout = (
            "transformers' [heads, head_dim]"
            if stores_expanded_qk_norms(config)
            else "Lumina's per rank "
            f"[model_parallel_size={getattr(config, 'model_parallel_size', 1) or 1}, head_dim]"
        )
        if problem:
            return Verdict("architecture", FAIL, f"architectures {architectures}: {problem}")
        known = {
            "ChameleonXLLMXForConditionalGeneration",
            "ChameleonForConditionalGeneration",
            "ChameleonModel",
        }
        detail = (
            f"architectures {architectures}; q/k-norms stored as {sorted(qk_shapes)} ({layout}), "
            f"expanded on load; {len(stored)} tensors match stock Chameleon; "
            f"{estimated_parameters(config):,} parameters as stored"
        )
        if set(architectures or ()) & known:
            return Verdict("architecture", OK, detail)
        note = "; an unknown architectures value: the q/k-norm layout is read as Lumina's"
        return Verdict("architecture", WARN, detail + note)

    def vocabulary(self) -> Verdict:
        from .models.lumina_mgpt import LuminaImageLayout, image_token_table

        vocabulary_map = self.config.vocabulary_map
        ids, table = image_token_table(vocabulary_map, self.config.vocab_size)
        layout = self.layout = LuminaImageLayout.from_vocabulary(vocabulary_map, self.resolution)
        detail = (
            f"{ids.numel()} image codes (ids {int(ids.min())}..{int(ids.max())}); "
            f"{self.resolution} px: {layout.latent_side} x {layout.latent_side} codes + row ends = "
            f"{layout.num_image_tokens} tokens; BOS {layout.bos}, end of turn "
            f"{layout.end_of_turn}, image start {layout.image_start}, image end "
            f"{layout.image_end}, row end {layout.row_end}, size {layout.size_token}"
        )
        needed, positions = layout.num_image_tokens + 64, self.config.max_position_embeddings
        if needed > positions:
            note = f"max_position_embeddings {positions} < about {needed} positions an image needs"
            return Verdict("vocabulary", WARN, f"{detail}; {note}")
        if self.config.vocab_size != RELEASE_VOCAB_SIZE:
            size = self.config.vocab_size
            note = f" (vocab_size {size}: not the 7B vocabulary, release ids not compared)"
            return Verdict("vocabulary", OK, detail + note)
        wrong = [
            f"{k} {getattr(layout, k)} (release {v})"
            for k, v in RELEASE_IDS.items()
            if getattr(layout, k) != v
        ]
        cells = self.resolution // 32
        if layout.size_token != RELEASE_SIZE_OFFSET + cells:
            wrong.append(f"size token {layout.size_token} (release {RELEASE_SIZE_OFFSET + cells})")
        if (int(ids.min()), int(ids.max()), ids.numel()) != (*RELEASE_CODES, 8192):
            codes = f"{int(ids.min())}..{int(ids.max())} ({ids.numel()})"
            wrong.append(f"image codes {codes}, release 4..8195 (8192)")
        if wrong:
            note = "; differs from the 7B release: " + "; ".join(wrong)
            return Verdict("vocabulary", FAIL, detail + note)
        offset = bool((table[ids] == ids - RELEASE_CODES[0]).all())
        index = "VQ index = id - 4 for every code" if offset else "VQ index read by name"
        return Verdict("vocabulary", OK, f"{detail}; the release's ids; {index}")

    def tokenizer(self) -> Verdict:
        from .models.lumina_mgpt import tokenizer_mismatches
        from .models.lumina_tokenizer import PromptTokenizer, find_tokenizer_file

        self.tokenizer_file = find_tokenizer_file(self.folder, self.tokenizer_arg)
        tokenizer = self.prompt_tokenizer = PromptTokenizer(self.tokenizer_file)
        problems = tokenizer_mismatches(tokenizer, self.config.vocabulary_map)
        file = self.tokenizer_file
        where = "the checkpoint's" if file.parent == self.folder else "found beside it"
        if problems:
            detail = f"{file} ({where}) does not match the vocabulary map: "
            return Verdict("tokenizer", FAIL, detail + "; ".join(problems[:4]))
        detail = f"{file} ({where}; tokenizer_config.json names {tokenizer.declared_class})"
        return Verdict("tokenizer", OK, detail + "; layout tokens agree with the vocabulary map")

    def prompt_ids(self, prompt: str) -> Verdict:
        from tokenizers import Tokenizer

        from .models.lumina_mgpt import prompt_ids, prompt_text

        layout = self.layout
        ids = prompt_ids(self.prompt_tokenizer, layout, prompt).tolist()  # what generate reads
        raw = Tokenizer.from_file(str(self.tokenizer_file))
        text = prompt_text(layout, prompt)
        text_ids = raw.encode(text, add_special_tokens=False).ids
        expected = [layout.bos, *text_ids, *layout.header]
        if ids != expected:
            detail = f"the package's {len(ids)} prompt ids differ from the file's own "
            detail += f"({len(expected)}): {ids[:12]} vs {expected[:12]}"
            return Verdict("prompt ids", FAIL, detail)
        decoded = raw.decode(text_ids, skip_special_tokens=False)
        status = OK if decoded == text else WARN
        note = "" if status == OK else f"; but they decode to {decoded!r}, not the prompt text"
        return Verdict(
            "prompt ids",
            status,
            f"{len(ids)} ids = tokenizers.Tokenizer.from_file's for the template "
            f"+ prompt, with <s> and the image header{note}; "
            + _transformers_note(self.tokenizer_file, text, text_ids),
        )

    def generation(self) -> Verdict:
        from .models.lumina_mgpt import CPU_PARAMETER_LIMIT, estimated_parameters, load_lumina_mgpt

        run, device = self.run, default_device(self.run.device)
        if (
            torch.device(device).type == "cpu"
            and estimated_parameters(self.config) > CPU_PARAMETER_LIMIT
            and not run.force_cpu
        ):
            why = "a 7B model on the CPU takes minutes per token (--force-cpu to insist)"
            return Verdict("generation", SKIP, f"no GPU here (--device cuda); {why}")
        started = time.perf_counter()
        self.adapter = load_lumina_mgpt(
            self.folder,
            resolution=self.resolution,
            device=device,
            tokenizer=self.tokenizer_arg,
            force_cpu=run.force_cpu,
        )  # VQGAN: the image item
        loaded = time.perf_counter() - started
        adapter = self.adapter
        rows = max(1, min(run.rows, adapter.layout.latent_side))
        count = rows * adapter.layout.row_length
        result = ar_rows(adapter, run.prompt, count, run.seed, cfg=adapter.uses_cfg)
        tokens = result.tokens.view(rows, adapter.layout.row_length)
        row_ends = bool((tokens[:, -1] == adapter.layout.row_end).all())
        codes_ok = bool((adapter.vq_index_of_token.cpu()[tokens[:, :-1]] >= 0).all())
        self.tokens = tokens
        detail = (
            f"loaded in {loaded:.1f} s on {adapter.device} "
            f"({next(adapter.model.parameters()).dtype}); {count} tokens ({rows} rows) by AR in "
            f"{result.wall_seconds:.2f} s, {1000 * result.wall_seconds / result.nfe:.1f} ms per "
            f"forward (CFG pair), {len(set(tokens[:, :-1].flatten().tolist()))} distinct codes"
        )
        if not row_ends:
            return Verdict("generation", FAIL, detail + ": row ends misplaced")
        if not codes_ok:
            return Verdict("generation", FAIL, f"{detail}: a code position holds a non-image token")
        return Verdict("generation", OK, detail)

    def image(self, vqgan_dir: str, out: Path | None) -> Verdict:
        from .models.chameleon_vqgan import find_vqgan_files, load_chameleon_vqgan

        yaml_path, ckpt_path = find_vqgan_files(vqgan_dir)
        adapter = self.adapter
        vqgan = load_chameleon_vqgan(vqgan_dir, device=adapter.device)  # as load_lumina_mgpt
        adapter.attach_vqgan(vqgan)  # its codebook against the vocabulary's codes
        indices = adapter.vq_index_of_token[self.tokens[:, :-1].to(adapter.device)]
        image = vqgan.decode_to_uint8(indices.unsqueeze(0))[0].numpy()
        self.pixels = image
        md5 = _md5(ckpt_path)
        meta = md5 == META_VQGAN_MD5
        checksum = "Meta's checksum" if meta else f"md5 {md5}, not Meta's {META_VQGAN_MD5}"
        saved = save_png(image, out)
        detail = (
            f"{ckpt_path} ({checksum}); codebook {vqgan.config.n_embed} x "
            f"{vqgan.config.embed_dim}; {self.tokens.shape[0]} rows -> {image.shape[1]} "
            f"x {image.shape[0]} px, pixel std {float(image.std()):.1f}{saved}"
        )
        if float(image.std()) == 0.0:
            return Verdict("image", FAIL, detail + ": a constant image")
        return Verdict("image", OK if meta else WARN, detail)

    def clip(self, clip_dir: str, prompt: str) -> Verdict:
        from .quality.clip_score import clip_scores, load_clip

        model, processor = load_clip(clip_dir, device=self.adapter.device)
        strip = self.pixels
        side = strip.shape[1]
        square = np.tile(strip, (-(-side // strip.shape[0]), 1, 1))[:side]  # rows to a square
        score = float(clip_scores([square], [prompt], model, processor)[0])
        vision = model.config.vision_config
        detail = (
            f"{clip_dir}: ViT with {vision.image_size} px input, patch {vision.patch_size}; CLIP "
            f"score {score:.2f} of the decoded rows tiled to {side} x {side} "
            "px against the prompt (a load check, not a quality figure)"
        )
        if not 0.0 <= score <= 100.0:
            return Verdict("clip", FAIL, detail)
        if (vision.image_size, vision.patch_size) == (224, 16):
            return Verdict("clip", OK, detail)
        note = "; SJD's evaluation used openai/clip-vit-base-patch16 (224 px, 16)"
        return Verdict("clip", WARN, detail + note)


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _transformers_note(tokenizer_file: Path, text: str, expected: list[int]) -> str:
    """What transformers' own loading would give (informative: the package does not use it)."""
    import transformers

    notes = []
    for name in ("AutoTokenizer", "LlamaTokenizerFast"):
        try:
            cls = getattr(transformers, name)
            ids = cls.from_pretrained(str(tokenizer_file.parent)).encode(
                text, add_special_tokens=False
            )
            notes.append(f"{name} {'same' if list(ids) == expected else 'OTHER ids'}")
        except Exception as error:  # any failure of a class we do not use is only reported
            notes.append(f"{name} fails ({type(error).__name__})")
    return (
        f"transformers {transformers.__version__} would give: " + ", ".join(notes) + " (not used)"
    )


def check_weights(
    weights: str | Path,
    *,
    resolution: int | None = None,
    vqgan: str | None = None,
    clip: str | None = None,
    run: RunOptions = RunOptions(),
) -> list[Verdict]:
    """Every verdict of the module docstring, in order. ``resolution``: default from the
    folder's name (``resolution_from_name``), else 768."""
    resolution = resolution or resolution_from_name(weights) or 768
    checks = _Checks(weights, resolution, run)
    prompt = run.prompt
    items = ItemRunner(checks.failed)
    verdicts = items.all([
        ("files", (), checks.files),
        ("architecture", ("files",), checks.architecture),
        ("vocabulary", ("files",), checks.vocabulary),
        ("tokenizer", ("files",), checks.tokenizer),
        ("prompt ids", ("vocabulary", "tokenizer"), lambda: checks.prompt_ids(prompt)),
        ("generation", ("architecture", "vocabulary", "tokenizer"), checks.generation),
    ])
    if vqgan is not None:
        items("image", ("generation",), lambda: checks.image(vqgan, run.out))
    else:
        checks.failed.add("image")
        verdicts.append(Verdict("image", SKIP, "no --vqgan"))
    if clip is not None:
        items("clip", ("image",), lambda: checks.clip(clip, prompt))
    return verdicts


def main(args: Any) -> int:
    """The ``check-weights`` command (``gsd_lab.cli``); a Janus checkpoint (config.json's
    model_type) goes to ``gsd_lab.check_weights_janus``."""
    started = time.perf_counter()
    from .check_weights_janus import check_janus_weights, is_janus_folder

    if is_janus_folder(args.weights):
        refuse_flags(args, ("--vqgan", "--clip", "--resolution"), "a Janus checkpoint")
        verdicts = check_janus_weights(args.weights, RunOptions.from_args(args))
    else:
        verdicts = check_weights(
            args.weights,
            resolution=args.resolution,
            vqgan=args.vqgan,
            clip=args.clip,
            run=RunOptions.from_args(args),
        )
    return report(args, verdicts, started)
