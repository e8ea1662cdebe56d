"""Lumina-mGPT (Alpha-VLLM; Chameleon architecture) on stock ``transformers``,
as a decoding adapter.

Loading (``load_lumina_mgpt``): the checkpoint read and checked by ``lumina_checkpoint``.

Image layout (Lumina-mGPT ``FlexARItemProcessor``; ids of the 7B release in brackets, read here
from ``config.vocabulary_map`` by token name):

    prompt:  <s> "Generate an image of {W}x{H} according to the following prompt:\n{caption}"
             <reserved08706>[8710] <racm3:break>[8197] <reserved{8800+g}>[h] <reserved{8800+g}>[w]
    image:   (w codes IMGIMG..Z [4..8195], <reserved08799>[8803]) x h, then <eoss>[8196]

with g = side / 32 grid cells and h = w = 2 g latent rows/columns (the VQGAN downsamples x16):
768 x 768 gives 48 x 48 codes + 48 row ends = 2352 generated tokens. The image start and size
tokens, which the model would emit itself, are part of the prompt, so the image size is fixed.

Logits, sampling and the unconditional prompts (``UNCONDITIONAL_PROMPTS``): docs/lumina-mgpt.md,
sections 4 and 5.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .adapter import cache_kwarg
from .grid_image import GridImageAdapter
from .loading import device_and_dtype, refuse_large_on_cpu
from .lumina_checkpoint import (
    build_lumina_model,
    estimated_parameters,
    read_lumina_config,
    read_lumina_state_dict,
    resolve_weights_dir,
)
from .lumina_tokenizer import PromptTokenizer, find_tokenizer_file

logger = logging.getLogger(__name__)

PROMPT_TEMPLATE = (
    "Generate an image of {width}x{height} according to the following prompt:\n{prompt}"
)
PIXELS_PER_GRID = (
    32  # Lumina-mGPT's size tokens count 32-pixel cells; the VQGAN maps 16 px to one code
)
PIXELS_PER_CODE = 16
CPU_PARAMETER_LIMIT = 1_000_000_000  # above this, loading on CPU needs force_cpu=True

# Token names (Chameleon vocabulary), so tiny test vocabularies with the same names work unchanged.
BOS_NAME = "<s>"
END_OF_TURN_NAME = "<reserved08706>"
IMAGE_START_NAME = "<racm3:break>"
IMAGE_END_NAME = "<eoss>"
ROW_END_NAME = "<reserved08799>"


# The unconditional (CFG) row's prompt, by name: tokens before the first generated code.
GSD_RELEASE_UNCONDITIONAL = "gsd-release"
ALPHA_VLLM_UNCONDITIONAL = "alpha-vllm"
UNCONDITIONAL_PROMPTS = (GSD_RELEASE_UNCONDITIONAL, ALPHA_VLLM_UNCONDITIONAL)


def grid_token_name(cells: int) -> str:
    """Name of the size token for ``cells`` grid cells: <reserved{8800 + cells:05d}>
    (id 8804 + cells)."""
    return f"<reserved{8800 + cells:05d}>"


# ---- image layout --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LuminaImageLayout:
    """Token ids and geometry of one square image (see the module docstring)."""

    resolution: int
    latent_side: int  # codes per row = rows = resolution / 16
    bos: int
    end_of_turn: int
    image_start: int
    image_end: int
    row_end: int
    size_token: int

    @property
    def height(self) -> int:
        """Latent rows (= latent_side), as ``grid_image.GridLayout``."""
        return self.latent_side

    width = height  # codes per latent row

    @property
    def tail(self) -> tuple[int, int]:
        """Tokens forced after the last row: the image end, then end of turn (repeated)."""
        return (self.image_end, self.end_of_turn)

    @property
    def row_length(self) -> int:
        """Tokens per latent row including its row-end token."""
        return self.latent_side + 1

    @property
    def num_image_tokens(self) -> int:
        """Codes plus row ends: latent_side * (latent_side + 1) (2352 at 768 x 768)."""
        return self.latent_side * self.row_length

    @property
    def header(self) -> list[int]:
        """Tokens after the text: end of turn, image start, height and width size tokens."""
        return [self.end_of_turn, self.image_start, self.size_token, self.size_token]

    @classmethod
    def from_vocabulary(
        cls, vocabulary_map: dict[str, int], resolution: int, bos: int | None = None
    ) -> LuminaImageLayout:
        if (
            not isinstance(resolution, int)
            or resolution < PIXELS_PER_GRID
            or resolution % PIXELS_PER_GRID
        ):
            raise ValueError(
                f"resolution must be a positive multiple of {PIXELS_PER_GRID} "
                f"pixels, got {resolution!r}"
            )
        grid = resolution // PIXELS_PER_GRID
        names = {
            "bos": BOS_NAME,
            "end_of_turn": END_OF_TURN_NAME,
            "image_start": IMAGE_START_NAME,
            "image_end": IMAGE_END_NAME,
            "row_end": ROW_END_NAME,
            "size_token": grid_token_name(grid),
        }
        absent = [
            name
            for key, name in names.items()
            if name not in vocabulary_map and not (key == "bos" and bos is not None)
        ]
        if absent:
            raise ValueError(
                f"the vocabulary_map lacks the tokens {absent} "
                f"(needed for {resolution}x{resolution} images)"
            )
        ids = {key: vocabulary_map[name] for key, name in names.items() if name in vocabulary_map}
        if bos is not None:
            ids["bos"] = bos
        return cls(resolution=resolution, latent_side=resolution // PIXELS_PER_CODE, **ids)


LAYOUT_TOKEN_NAMES = (BOS_NAME, END_OF_TURN_NAME, IMAGE_START_NAME, IMAGE_END_NAME, ROW_END_NAME)


def tokenizer_mismatches(tokenizer: Any, vocabulary_map: dict[str, int]) -> list[str]:
    """Where ``tokenizer`` and the checkpoint's ``vocabulary_map`` disagree: one line per layout
    token (BOS, end of turn, image start/end, row end) and size token the map holds whose id
    in the tokenizer differs (or is absent), and the BOS id. Empty when they agree."""
    names = [n for n in LAYOUT_TOKEN_NAMES if n in vocabulary_map]
    names += sorted(n for n in vocabulary_map if n.startswith("<reserved088"))
    problems = [
        f"{name}: {tokenizer.token_to_id(name)} in the tokenizer, {vocabulary_map[name]} in the "
        "vocabulary_map"
        for name in names
        if tokenizer.token_to_id(name) != vocabulary_map[name]
    ]
    bos = tokenizer.bos_token_id
    if bos is not None and BOS_NAME in vocabulary_map and bos != vocabulary_map[BOS_NAME]:
        problems.append(
            f"BOS: {bos} in the tokenizer, {vocabulary_map[BOS_NAME]} "
            f"({BOS_NAME}) in the vocabulary_map"
        )
    return problems


def check_tokenizer_matches(tokenizer: Any, vocabulary_map: dict[str, int]) -> None:
    """Raise ``ValueError`` when the tokenizer is not the one of these weights
    (``tokenizer_mismatches``)."""
    problems = tokenizer_mismatches(tokenizer, vocabulary_map)
    if problems:
        raise ValueError(
            f"{getattr(tokenizer, 'path', 'the tokenizer')} does not match the checkpoint's "
            f"vocabulary_map ({len(problems)} tokens differ: {'; '.join(problems[:4])}): wrong "
            "--tokenizer for these weights?"
        )


def image_token_table(vocabulary_map: dict[str, int], vocab_size: int) -> tuple[Tensor, Tensor]:
    """Image-code ids (sorted) and a lookup table id -> VQ index (-1 for non-image ids), by name.

    Chameleon names VQ code n ``IMGIMG`` + the decimal digits of n written as letters A..J + one
    final letter; the VQ index is read from the name, never from an offset (as transformers'
    ``ChameleonImageVocabularyMapping.bpe2img``).
    """
    digits = {chr(ord("A") + i): str(i) for i in range(10)}
    table = torch.full((vocab_size,), -1, dtype=torch.long)
    for name, token in vocabulary_map.items():
        if name.startswith("IMGIMG"):
            code = "".join(digits.get(c, c) for c in name[len("IMGIMG") : -1])
            if not code.isdigit() or token >= vocab_size:
                raise ValueError(f"bad image token {name!r} -> {token} in the vocabulary_map")
            table[token] = int(code)
    ids = torch.nonzero(table >= 0).flatten()
    if ids.numel() == 0:
        raise ValueError("the vocabulary_map has no image tokens (names starting with IMGIMG)")
    codes = table[ids]
    if torch.unique(codes).numel() != codes.numel():
        raise ValueError("the vocabulary_map maps two tokens to the same VQ code")
    return ids, table


def chameleon_vocabulary_map(vocab_size: int, num_codes: int) -> dict[str, int]:
    """Chameleon's token names at their real ids (for a model built without its tokenizer):
    <s> <pad> </s> <unk>, IMGIMG codes at 4 .. 4 + num_codes - 1 (code = id - 4, named as
    ``image_token_table`` reads them), <eoss>, <racm3:break>, then <reservedNNNNN> = NNNNN + 4."""
    names = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for code in range(num_codes):
        names["IMGIMG" + "".join("ABCDEFGHIJ"[int(d)] for d in str(code)) + "Z"] = 4 + code
    names["<eoss>"], names["<racm3:break>"] = 4 + num_codes, 5 + num_codes
    for token in range(6 + num_codes, vocab_size):
        names[f"<reserved{token - 4:05d}>"] = token
    return names

# ---- prompts -------------------------------------------------------------------------------------


def prompt_text(layout: LuminaImageLayout, prompt: str) -> str:
    """The release's template around ``prompt`` at the layout's resolution."""
    return PROMPT_TEMPLATE.format(width=layout.resolution, height=layout.resolution, prompt=prompt)


def text_ids_to_prompt(layout: LuminaImageLayout, text_ids: Any) -> Tensor:
    """<s> + ``text_ids`` + [end of turn, image start, h, w] (1-D int64)."""
    text = [int(t) for t in torch.as_tensor(text_ids).flatten().tolist()]
    return torch.tensor([layout.bos, *text, *layout.header], dtype=torch.long)


def prompt_ids(tokenizer: Any, layout: LuminaImageLayout, prompt: str) -> Tensor:
    """<s> + ``tokenizer``'s ids of the templated prompt (no special tokens added) + [end of
    turn, image start, h, w]: what the model reads before the first image code."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("prompt must be a non-empty string")
    return text_ids_to_prompt(
        layout, tokenizer.encode(prompt_text(layout, prompt), add_special_tokens=False)
    )


# ---- the adapter ---------------------------------------------------------------------------------


class LuminaMGPTAdapter(GridImageAdapter):
    """``GridImageAdapter`` for Lumina-mGPT text-to-image: logits from the backbone and ``lm_head``
    (no image-logit masking), image codes only, the row-end token forced at every row end, the
    image end after the last row and end of turn after it (``LuminaImageLayout.tail``), CFG /
    top-k / temperature as the GSD reference. ``unconditional_prompt``: "gsd-release" (default)
    or "alpha-vllm" (module docstring). vqgan: a ``ChameleonVQGANDecoder`` or None
    (``attach_vqgan`` later)."""

    def __init__(
        self,
        model: Any,
        layout: LuminaImageLayout,
        *,
        tokenizer: Any = None,
        vqgan: Any = None,
        top_k: int | None = 2000,
        temperature: float = 1.0,
        cfg_scale: float | None = 3.0,
        unconditional_prompt: str = GSD_RELEASE_UNCONDITIONAL,
    ) -> None:
        if unconditional_prompt not in UNCONDITIONAL_PROMPTS:
            raise ValueError(
                f"unconditional_prompt must be one of {UNCONDITIONAL_PROMPTS}, "
                f"got {unconditional_prompt!r}"
            )
        self.unconditional_prompt = unconditional_prompt
        _, table = image_token_table(model.config.vocabulary_map, model.config.vocab_size)
        super().__init__(
            model,
            layout,
            table,
            tokenizer=tokenizer,
            temperature=temperature,
            top_k=top_k,
            cfg_scale=cfg_scale,
        )
        self.bos = layout.bos
        self.vqgan = None
        if vqgan is not None:
            self.attach_vqgan(vqgan)
        # compute_logits calls the backbone directly: its own cache keyword, checked once here.
        self._backbone_cache_kwarg = cache_kwarg(model.model)

    def attach_vqgan(self, vqgan: Any) -> None:
        """Decode images with ``vqgan`` (a ``ChameleonVQGANDecoder``; its codebook is
        ``code_content``'s); raises ``ValueError`` when its codebook is smaller than the
        vocabulary's VQ codes (another model's VQGAN)."""
        codebook = getattr(getattr(vqgan, "config", None), "n_embed", None)
        if codebook is not None and int(self.code_of_token.max()) >= codebook:
            raise ValueError(
                f"the vocabulary has VQ codes up to {int(self.code_of_token.max())} but the "
                f"VQGAN codebook has {codebook} entries: wrong --vqgan for these weights?"
            )
        self.vqgan = vqgan
        self.decode_indices = vqgan.decode_to_uint8
        self._codebook = vqgan.quantize.embedding.weight

    # ---- prompts ----

    def prompt_text(self, prompt: str) -> str:
        return prompt_text(self.layout, prompt)

    def image_header(self) -> list[int]:
        """[end of turn, image start, h, w]: a prompt is <s> + text + this header."""
        return self.layout.header

    def unconditional_prompt_ids(self) -> Tensor:
        """The unconditional row's prompt (no text): [end of turn, image start, h, w] for
        "gsd-release" (the GSD release keeps <reserved08706>), [image start, h, w] for
        "alpha-vllm" (Lumina-mGPT's inference_solver starts the row at the image start)."""
        header = self.layout.header
        if self.unconditional_prompt == ALPHA_VLLM_UNCONDITIONAL:
            header = header[1:]
        return torch.tensor(header, dtype=torch.long)

    # ---- logits ----

    def compute_logits(
        self, input_ids: Tensor, attention_mask: Tensor | None, position_ids: Tensor, num_rows: int
    ) -> Tensor:
        """lm_head(backbone hidden states) of the last ``num_rows`` positions: [B, num_rows, V]
        (bypasses the stock forward, which masks every image-token logit)."""
        out = self.model.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{self._backbone_cache_kwarg: self.cache},
        )
        return self.model.lm_head(out.last_hidden_state[:, -num_rows:, :])


def load_lumina_mgpt(
    weights: str | Path | None,
    *,
    vqgan_dir: str | Path | None = None,
    resolution: int = 768,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    force_cpu: bool = False,
    top_k: int | None = 2000,
    temperature: float = 1.0,
    cfg_scale: float | None = 3.0,
    vqgan_dtype: torch.dtype = torch.float32,
    unconditional_prompt: str = GSD_RELEASE_UNCONDITIONAL,
    tokenizer: str | Path | None = None,
) -> LuminaMGPTAdapter:
    """Load a Lumina-mGPT checkpoint (local folder or Hugging Face cache) as a
    ``LuminaMGPTAdapter``.

    device, dtype, force_cpu: as ``loading.device_and_dtype`` and ``refuse_large_on_cpu`` (above
    1e9 parameters the CPU is refused). ``vqgan_dir``: folder with ``vqgan.yaml`` +
    ``vqgan.ckpt`` (optional; needed by ``decode_images``). ``unconditional_prompt``: the CFG
    row's prompt, "gsd-release" (default, reproduces the GSD paper) or "alpha-vllm".
    ``tokenizer``: a folder holding ``tokenizer.json`` (or the file); default the checkpoint's,
    else the 768 repo's next to it (``lumina_tokenizer.find_tokenizer_file``); prompts are
    tokenised by that file as written (``PromptTokenizer``). No tokenizer found raises
    ``FileNotFoundError`` naming what to download, before the weights are read.
    """
    if unconditional_prompt not in UNCONDITIONAL_PROMPTS:  # before any file is read
        raise ValueError(
            f"unconditional_prompt must be one of {UNCONDITIONAL_PROMPTS}, "
            f"got {unconditional_prompt!r}"
        )
    folder = resolve_weights_dir(weights, resolution)
    config = read_lumina_config(folder)
    device, dtype = device_and_dtype(device, dtype)
    refuse_large_on_cpu(
        folder, device, lambda: estimated_parameters(config), CPU_PARAMETER_LIMIT, force_cpu
    )
    layout = LuminaImageLayout.from_vocabulary(config.vocabulary_map, resolution)
    # Before the weights are read: a missing or wrong tokenizer fails before the long read.
    prompt_tokenizer = PromptTokenizer(find_tokenizer_file(folder, tokenizer))
    check_tokenizer_matches(prompt_tokenizer, config.vocabulary_map)
    state = read_lumina_state_dict(folder, config, device=device, dtype=dtype)
    model = build_lumina_model(config, state, device=device)
    del state
    needed = layout.num_image_tokens + 64
    if needed > config.max_position_embeddings:
        logger.warning(
            "an image needs about %d positions; config.max_position_embeddings is %d",
            needed,
            config.max_position_embeddings,
        )
    vqgan = None
    if vqgan_dir is not None:
        from .chameleon_vqgan import load_chameleon_vqgan

        vqgan = load_chameleon_vqgan(vqgan_dir, device=device, dtype=vqgan_dtype)
    return LuminaMGPTAdapter(
        model,
        layout,
        tokenizer=prompt_tokenizer,
        vqgan=vqgan,
        top_k=top_k,
        temperature=temperature,
        cfg_scale=cfg_scale,
        unconditional_prompt=unconditional_prompt,
    )
