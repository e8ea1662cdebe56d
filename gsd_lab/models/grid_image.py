"""``GridImageAdapter``: what the AR image families of stock ``transformers`` share once their
logits are computed: an image is ``height`` rows of ``width`` VQ codes, each row optionally
followed by a forced end-of-row token, then a fixed tail of forced tokens.

Generated position g (0-based, the first image code is g = 0), N = ``num_image_tokens``:

    g < N, row_end set, (g + 1) % (width + 1) == 0   -> the end-of-row token (forced)
    g < N otherwise                                  -> a VQ code (sampled)
    g = N + i, i < len(tail)                         -> tail[i] (forced)
    g >= N + len(tail)                               -> tail[-1] (forced)

N = height * (width + 1) with an end-of-row token, height * width without. Tokens map to VQ
indices by a table read from each family's vocabulary *by name* (never by an id offset;
``code_table``, special tokens by ``vocabulary_id``); ``image_codes`` checks the row ends and
that every code position holds an image code. A prompt is BOS + text + the family's
``image_header()``. The families (``lumina_mgpt``: Lumina-mGPT; ``anole``: Chameleon /
Anole; ``emu3``: Emu3) subclass it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from .adapter import CausalLMAdapter


def vocabulary_id(vocabulary_map: dict[str, int], name: str, family: str) -> int:
    """The id of token ``name``; ``ValueError`` when the vocabulary lacks it."""
    if name not in vocabulary_map:
        raise ValueError(f"the vocabulary_map lacks {name!r} (a {family} vocabulary has it)")
    return int(vocabulary_map[name])


def code_table(code_of_token: dict[int, int], vocab_size: int, naming: str) -> Tensor:
    """int64 [vocab_size]: ``code_of_token[t]`` (a VQ index) at each image-code id t, -1
    elsewhere. ``ValueError`` for an id outside the vocabulary or no image code at all
    (``naming``: how the family names its image tokens)."""
    if not code_of_token:
        raise ValueError(f"the vocabulary_map has no image tokens ({naming})")
    table = torch.full((vocab_size,), -1, dtype=torch.long)
    for token, code in code_of_token.items():
        if not 0 <= token < vocab_size:
            raise ValueError(f"image token id {token} outside the vocabulary [0, {vocab_size})")
        table[token] = code
    return table


@dataclass(frozen=True)
class GridLayout:
    """Geometry and forced tokens of one image (module docstring)."""

    height: int  # latent rows
    width: int  # codes per latent row
    row_end: int | None  # token forced after each row, or None (no end-of-row token)
    tail: tuple[int, ...]  # tokens forced after the last row, the last one repeated

    def __post_init__(self) -> None:
        for name in ("height", "width"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not self.tail:
            raise ValueError("tail must hold at least one token (the image end)")

    @property
    def row_length(self) -> int:
        """Tokens per latent row, its end-of-row token included."""
        return self.width + (self.row_end is not None)

    @property
    def num_image_tokens(self) -> int:
        """Codes plus end-of-row tokens: height * row_length."""
        return self.height * self.row_length


class GridImageAdapter(CausalLMAdapter):
    """``CausalLMAdapter`` over a ``GridLayout`` (module docstring), or a layout with its fields
    (``lumina_mgpt.LuminaImageLayout``).

    code_of_token: int64 [V] table, the VQ index of each image-code id and -1 elsewhere.
    decode_indices: VQ indices [B, height, width] -> uint8 images [B, H, W, 3], or None (no
    decoder). codebook: the VQ codebook [K_vq, D] (``code_content``), or None. tokenizer:
    ``encode(text, add_special_tokens=False) -> list[int]`` (``PromptTokenizer``) or None (then
    token ids through ``text_ids_to_prompt`` only). Families set ``bos`` (the BOS id)."""

    bos: int

    def __init__(
        self,
        model: Any,
        layout: GridLayout | Any,
        code_of_token: Tensor,
        *,
        decode_indices: Callable[[Tensor], Tensor] | None = None,
        codebook: Tensor | None = None,
        tokenizer: Any = None,
        **kwargs: Any,
    ) -> None:
        image_ids = torch.nonzero(code_of_token >= 0).flatten()
        if image_ids.numel() == 0:
            raise ValueError("the vocabulary has no image codes")
        super().__init__(model, image_ids, row_length=layout.row_length, **kwargs)
        self.layout = layout
        self.tokenizer = tokenizer
        self.code_of_token = code_of_token.to(self.device)
        self.decode_indices = decode_indices
        self._codebook = codebook
        self._embeddings: Tensor | None = None

    @property
    def num_image_tokens(self) -> int:
        return self.layout.num_image_tokens

    # ---- prompts (each family defines image_header and unconditional_prompt_ids) ----

    def image_header(self) -> list[int]:
        """The family's tokens between the text and the first image code."""
        raise NotImplementedError

    def text_ids_to_prompt(self, text_ids: Any) -> Tensor:
        """BOS + ``text_ids`` (already tokenised) + ``image_header()`` (1-D int64)."""
        text = [int(t) for t in torch.as_tensor(text_ids).flatten().tolist()]
        return torch.tensor([self.bos, *text, *self.image_header()], dtype=torch.long)

    def unconditional_prompt_ids(self) -> Tensor:
        """The CFG row's default prompt (1-D int64)."""
        raise NotImplementedError

    def prompt_text(self, prompt: str) -> str:
        """The family's text template around ``prompt`` (none by default)."""
        return prompt

    def prompt_ids(self, prompt: str) -> Tensor:
        """``text_ids_to_prompt`` of the tokenizer's ids of ``prompt_text(prompt)``."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("prompt must be a non-empty string")
        return self.text_ids_to_prompt(self.encode(self.prompt_text(prompt)))

    def encode(self, text: str) -> list[int]:
        """The tokenizer's ids of ``text`` (no special tokens added)."""
        if self.tokenizer is None:
            raise ValueError(
                f"no tokenizer: build {type(self).__name__} with tokenizer=... (the family's "
                "loader finds the checkpoint's tokenizer.json), or pass token ids to "
                "text_ids_to_prompt instead"
            )
        return self.tokenizer.encode(text, add_special_tokens=False)

    def start(self, prompt_ids: Any, uncond_prompt_ids: Any = None) -> None:
        """As ``CausalLMAdapter.start``; with CFG the unconditional prompt defaults to
        ``unconditional_prompt_ids()``."""
        if self.uses_cfg and uncond_prompt_ids is None:
            uncond_prompt_ids = self.unconditional_prompt_ids()
        super().start(prompt_ids, uncond_prompt_ids)

    @property
    def embeddings(self) -> Tensor:
        """Input-embedding rows [V, D] in float32 (GSD's distance filter)."""
        if self._embeddings is None:
            self._embeddings = self.model.get_input_embeddings().weight.detach().float()
        return self._embeddings

    def code_content(self) -> Tensor | None:
        """Row i: the codebook vector of token ``allowed_tokens[i]``'s VQ index, or None."""
        if self._codebook is None:
            return None
        codebook = self._codebook.detach()
        return codebook[self.code_of_token[self.allowed_tokens].to(codebook.device)]

    def forced_tokens(self, generated_positions: Tensor) -> Tensor:
        """End-of-row tokens inside the image, the tail after it, -1 (free) elsewhere."""
        g = generated_positions
        layout = self.layout
        n = layout.num_image_tokens
        forced = torch.full_like(g, -1)
        if layout.row_end is not None:
            row_end = (g < n) & ((g + 1) % layout.row_length == 0)
            forced = torch.where(row_end, layout.row_end, forced)
        for i, token in enumerate(layout.tail):
            forced = torch.where(g == n + i, token, forced)
        return torch.where(g >= n + len(layout.tail), layout.tail[-1], forced)

    def image_codes(self, tokens: Any) -> Tensor:
        """Generated tokens [N] or [B, N] (N = num_image_tokens, optionally followed by tail
        tokens) -> VQ indices [B, height, width]. Raises ``ValueError`` when a row end is
        missing or a code position holds a token that is not an image code."""
        tokens = torch.as_tensor(tokens).to(self.device).long()
        if tokens.ndim == 1:
            tokens = tokens.unsqueeze(0)
        n, layout = self.num_image_tokens, self.layout
        if tokens.ndim != 2 or not n <= tokens.shape[1] <= n + len(layout.tail):
            raise ValueError(
                f"expected {n} image tokens per image (codes + row ends), optionally followed by "
                f"up to {len(layout.tail)} end tokens; got shape {tuple(tokens.shape)}"
            )
        tail = torch.tensor(layout.tail, device=tokens.device)[: tokens.shape[1] - n]
        if not bool((tokens[:, n:] == tail).all()):
            raise ValueError(f"the tokens after the image must be {layout.tail[: tail.numel()]}")
        grid = tokens[:, :n].reshape(-1, layout.height, layout.row_length)
        if layout.row_end is not None:
            if not bool((grid[:, :, -1] == layout.row_end).all()):
                raise ValueError(f"row-end token {layout.row_end} missing after some row")
            grid = grid[:, :, :-1]
        if int(grid.min()) < 0 or int(grid.max()) >= self.code_of_token.numel():
            raise ValueError("image tokens out of the vocabulary range")
        indices = self.code_of_token[grid]
        if bool((indices < 0).any()):
            raise ValueError("some image positions hold tokens that are not image codes")
        return indices

    def decode_images(self, tokens: Any) -> Tensor:
        """Generated tokens [N] or [B, N] -> uint8 images [B, H, W, 3] through the family's VQ
        decoder."""
        if self.decode_indices is None:
            raise ValueError(
                "no VQ decoder loaded (no VQGAN: pass vqgan_dir / --vqgan, the folder with "
                "vqgan.yaml and vqgan.ckpt): this adapter cannot turn tokens into pixels"
            )
        return self.decode_indices(self.image_codes(tokens))

