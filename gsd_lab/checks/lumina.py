"""``check-weights`` items of a Lumina-mGPT download (``cli.check_weights`` runs them):

files          config.json, the safetensors shards and their index (``checkpoint.files_outcome``)
architecture   the q/k-norm layout ``architectures`` implies (Lumina's per rank or transformers'
               [heads, head_dim]), every stored name and shape against stock Chameleon
vocabulary     image codes (by name), the layout and size tokens; on the 7B vocabulary the
               release's ids (``RELEASE_IDS``)
tokenizer      which tokenizer.json (the checkpoint's or the 768 repo's), its layout-token ids
prompt ids     the package's prompt ids against ``tokenizers.Tokenizer.from_file`` of that file,
               decoding back to the prompt; transformers' classes reported (not used)
generation     ``rows`` image rows by AR of the model loaded as ``generate`` loads it: the row
               end at every row end, an image code at every code position
image          (--vqgan) the VQGAN (Meta's checksum, its codebook against the codes) decodes them,
               saved with --out
clip           (--clip) the CLIP folder loads and scores that image against the prompt
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .checkpoint import chameleon_shapes, files_outcome, shape_mismatch
from .generation import RunOptions, grid_generation, save_png
from .items import FAIL, OK, SKIP, WARN, Item, Outcome, Verdict, run_items

RELEASE_VOCAB_SIZE = 65536
# The 7B release's ids (Chameleon's vocabulary; docs/lumina-mgpt.md section 5): size token
# RELEASE_SIZE_OFFSET + cells, image codes RELEASE_CODES (8192 of them).
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


class LuminaChecks:
    """The items' checks and what they share (folder, config, layout, adapter, image)."""

    def __init__(self, weights: str | Path, resolution: int, run: RunOptions) -> None:
        self.weights, self.resolution, self.run = weights, resolution, run
        self.folder: Path = Path(weights).expanduser()
        self.config: Any = None
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.layout: Any = None
        self.tokenizer_file: Path | None = None
        self.prompt_tokenizer: Any = None
        self.adapter: Any = None
        self.indices: torch.Tensor | None = None
        self.pixels: Any = None

    def files(self) -> Outcome:
        from ..models.lumina_checkpoint import read_lumina_config, resolve_weights_dir

        self.folder = resolve_weights_dir(self.weights, self.resolution)
        self.config = read_lumina_config(self.folder)
        self.shapes, outcome = files_outcome(self.folder)
        return outcome

    def architecture(self) -> Outcome:
        from ..models import lumina_checkpoint as lumina

        config = self.config
        architectures = getattr(config, "architectures", None)
        stored = chameleon_shapes(self.shapes, config)
        problem = shape_mismatch(lumina.meta_lumina_model(config), stored)
        if problem:
            return FAIL, f"architectures {architectures}: {problem}"
        qk_shapes = sorted({s for name, s in self.shapes.items() if lumina.is_qk_norm(name)})
        ranks = getattr(config, "model_parallel_size", 1) or 1
        layout = (
            "transformers' [heads, head_dim]"
            if lumina.stores_expanded_qk_norms(config)
            else f"Lumina's per rank [model_parallel_size={ranks}, head_dim]"
        )
        detail = (
            f"architectures {architectures}; q/k-norms stored as {qk_shapes} ({layout}), "
            f"expanded on load; {len(stored)} tensors match stock Chameleon; "
            f"{lumina.estimated_parameters(config):,} parameters as stored"
        )
        known = {lumina.LUMINA_ARCHITECTURE, *lumina.TRANSFORMERS_ARCHITECTURES}
        if set(architectures or ()) & known:
            return OK, detail
        note = "; an unknown architectures value: the q/k-norm layout is read as Lumina's"
        return WARN, detail + note

    def vocabulary(self) -> Outcome:
        from ..models.lumina_mgpt import LuminaImageLayout, image_token_table

        config = self.config
        ids, table = image_token_table(config.vocabulary_map, config.vocab_size)
        layout = self.layout = LuminaImageLayout.from_vocabulary(
            config.vocabulary_map, self.resolution
        )
        detail = (
            f"{ids.numel()} image codes (ids {int(ids.min())}..{int(ids.max())}); "
            f"{self.resolution} px: {layout.latent_side} x {layout.latent_side} codes + row ends = "
            f"{layout.num_image_tokens} tokens; BOS {layout.bos}, end of turn "
            f"{layout.end_of_turn}, image start {layout.image_start}, image end "
            f"{layout.image_end}, row end {layout.row_end}, size {layout.size_token}"
        )
        needed, positions = layout.num_image_tokens + 64, config.max_position_embeddings
        if needed > positions:
            note = f"max_position_embeddings {positions} < about {needed} positions an image needs"
            return WARN, f"{detail}; {note}"
        if config.vocab_size != RELEASE_VOCAB_SIZE:
            note = "not the 7B vocabulary, release ids not compared"
            return OK, f"{detail} (vocab_size {config.vocab_size}: {note})"
        wrong = release_differences(layout, ids, self.resolution)
        if wrong:
            return FAIL, f"{detail}; differs from the 7B release: " + "; ".join(wrong)
        offset = bool((table[ids] == ids - RELEASE_CODES[0]).all())
        index = "VQ index = id - 4 for every code" if offset else "VQ index read by name"
        return OK, f"{detail}; the release's ids; {index}"

    def tokenizer(self) -> Outcome:
        from ..models.lumina_mgpt import tokenizer_mismatches
        from ..models.lumina_tokenizer import PromptTokenizer, find_tokenizer_file

        file = self.tokenizer_file = find_tokenizer_file(self.folder, self.run.tokenizer)
        tokenizer = self.prompt_tokenizer = PromptTokenizer(file)
        problems = tokenizer_mismatches(tokenizer, self.config.vocabulary_map)
        where = "the checkpoint's" if file.parent == self.folder else "found beside it"
        if problems:
            detail = f"{file} ({where}) does not match the vocabulary map: "
            return FAIL, detail + "; ".join(problems[:4])
        detail = f"{file} ({where}; tokenizer_config.json names {tokenizer.declared_class})"
        return OK, detail + "; layout tokens agree with the vocabulary map"

    def prompt_ids(self) -> Outcome:
        from tokenizers import Tokenizer

        from ..models.lumina_mgpt import prompt_ids, prompt_text

        layout, prompt = self.layout, self.run.prompt
        ids = prompt_ids(self.prompt_tokenizer, layout, prompt).tolist()  # what generate reads
        raw = Tokenizer.from_file(str(self.tokenizer_file))
        text = prompt_text(layout, prompt)
        text_ids = raw.encode(text, add_special_tokens=False).ids
        expected = [layout.bos, *text_ids, *layout.header]
        if ids != expected:
            detail = f"the package's {len(ids)} prompt ids differ from the file's own "
            return FAIL, detail + f"({len(expected)}): {ids[:12]} vs {expected[:12]}"
        decoded = raw.decode(text_ids, skip_special_tokens=False)
        status = OK if decoded == text else WARN
        note = "" if status == OK else f"; but they decode to {decoded!r}, not the prompt text"
        return status, (
            f"{len(ids)} ids = tokenizers.Tokenizer.from_file's for the template "
            f"+ prompt, with <s> and the image header{note}; "
            + transformers_note(self.tokenizer_file, text, text_ids)
        )

    def generation(self) -> Outcome:
        from ..models.lumina_mgpt import load_lumina_mgpt

        def load() -> Any:
            return load_lumina_mgpt(self.folder, resolution=self.resolution, **self.run.load_kwargs)

        self.adapter, outcome, self.indices = grid_generation(load, self.run)
        return outcome

    def image(self, vqgan_dir: str) -> Outcome:
        from ..models.chameleon_vqgan import find_vqgan_files, load_chameleon_vqgan

        _, ckpt_path = find_vqgan_files(vqgan_dir)
        vqgan = load_chameleon_vqgan(vqgan_dir, device=self.adapter.device)  # as load_lumina_mgpt
        self.adapter.attach_vqgan(vqgan)  # its codebook against the vocabulary's codes
        image = self.pixels = self.adapter.decode_indices(self.indices[None])[0].cpu().numpy()
        md5 = file_md5(ckpt_path)
        meta = md5 == META_VQGAN_MD5
        checksum = "Meta's checksum" if meta else f"md5 {md5}, not Meta's {META_VQGAN_MD5}"
        detail = (
            f"{ckpt_path} ({checksum}); codebook {vqgan.config.n_embed} x "
            f"{vqgan.config.embed_dim}; {self.indices.shape[0]} rows -> {image.shape[1]} "
            f"x {image.shape[0]} px, pixel std {float(image.std()):.1f}"
            + save_png(image, self.run.out)
        )
        if float(image.std()) == 0.0:
            return FAIL, detail + ": a constant image"
        return (OK if meta else WARN), detail

    def clip(self, clip_dir: str) -> Outcome:
        from ..quality.clip_score import clip_scores, load_clip

        model, processor = load_clip(clip_dir, device=self.adapter.device)
        strip = self.pixels
        side = strip.shape[1]
        square = np.tile(strip, (-(-side // strip.shape[0]), 1, 1))[:side]  # rows to a square
        score = float(clip_scores([square], [self.run.prompt], model, processor)[0])
        vision = model.config.vision_config
        detail = (
            f"{clip_dir}: ViT with {vision.image_size} px input, patch {vision.patch_size}; CLIP "
            f"score {score:.2f} of the decoded rows tiled to {side} x {side} "
            "px against the prompt (a load check, not a quality figure)"
        )
        if not 0.0 <= score <= 100.0:
            return FAIL, detail
        if (vision.image_size, vision.patch_size) == (224, 16):
            return OK, detail
        return WARN, detail + "; SJD's evaluation used openai/clip-vit-base-patch16 (224 px, 16)"


def release_differences(layout: Any, ids: torch.Tensor, resolution: int) -> list[str]:
    """Where the layout's ids and the image codes differ from the 7B release's."""
    wrong = [
        f"{k} {getattr(layout, k)} (release {v})"
        for k, v in RELEASE_IDS.items()
        if getattr(layout, k) != v
    ]
    size = RELEASE_SIZE_OFFSET + resolution // 32
    if layout.size_token != size:
        wrong.append(f"size token {layout.size_token} (release {size})")
    if (int(ids.min()), int(ids.max()), ids.numel()) != (*RELEASE_CODES, 8192):
        codes = f"{int(ids.min())}..{int(ids.max())} ({ids.numel()})"
        wrong.append(f"image codes {codes}, release 4..8195 (8192)")
    return wrong


def file_md5(path: Path) -> str:
    """The hex MD5 of the file at ``path`` (as Meta's checklist.chk lists it), read in 4 MiB
    blocks."""
    digest = hashlib.md5()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def transformers_note(tokenizer_file: Path, text: str, expected: list[int]) -> str:
    """What transformers' own loading would give (informative: the package does not use it)."""
    import transformers

    notes = []
    for name in ("AutoTokenizer", "LlamaTokenizerFast"):
        try:
            tokenizer = getattr(transformers, name).from_pretrained(str(tokenizer_file.parent))
            ids = tokenizer.encode(text, add_special_tokens=False)
            notes.append(f"{name} {'same' if list(ids) == expected else 'OTHER ids'}")
        except Exception as error:  # any failure of a class we do not use is only reported
            notes.append(f"{name} fails ({type(error).__name__})")
    version = transformers.__version__
    return f"transformers {version} would give: " + ", ".join(notes) + " (not used)"


def check_lumina_weights(
    weights: str | Path,
    *,
    resolution: int | None = None,
    vqgan: str | None = None,
    clip: str | None = None,
    run: RunOptions = RunOptions(),
) -> list[Verdict]:
    """Every verdict of the module docstring, in order. ``resolution``: default from the
    folder's name (``resolution_from_name``), else 768."""
    checks = LuminaChecks(weights, resolution or resolution_from_name(weights) or 768, run)
    items: list[Item] = [
        ("files", (), checks.files),
        ("architecture", ("files",), checks.architecture),
        ("vocabulary", ("files",), checks.vocabulary),
        ("tokenizer", ("files",), checks.tokenizer),
        ("prompt ids", ("vocabulary", "tokenizer"), checks.prompt_ids),
        ("generation", ("architecture", "vocabulary", "tokenizer"), checks.generation),
    ]
    if vqgan is None:
        items.append(("image", (), lambda: (SKIP, "no --vqgan")))
    else:
        items.append(("image", ("generation",), lambda: checks.image(vqgan)))
    if clip is not None:
        items.append(("clip", ("image",), lambda: checks.clip(clip)))
    return run_items(items)
