"""The embedded stand-in model: a small class-conditional LlamaForCausalLM over patch-VQ image
tokens (8192 codes, one per 16x16 pixels, Lumina-mGPT's granularity), trained here on crops of
images shipped in scikit-image / scikit-learn / matplotlib (gsd_lab.standin).

``load_standin()`` returns a ``StandinAdapter``: a ``CausalLMAdapter`` whose allowed tokens are
the image codes 0..K-1, with classifier-free guidance against the null-class prompt, and the
tokenizer's decoder to turn 256 generated codes into a 256x256 RGB image.

Defaults are Lumina-mGPT's reference sampling: cfg_scale 3.0, top_k 2000 (of 8192 image
codes), temperature 1.0. On CPU the model runs in float64 (``compute_dtype``): last-bit
differences between CPU kernels (AVX2 vs AVX-512, thread counts) then stay far below the
resolution of any sampling decision, so the same seed gives the same tokens on any x86 CPU.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from .ar import TokenLayout
from .data import to_uint8
from .loading import WEIGHTS_DIR, load_ar_model, load_tokenizer, stored_distance_quantiles
from .tokenizer import PatchVQTokenizer
from ..models.adapter import CausalLMAdapter

DEFAULT_CFG_SCALE = 3.0
DEFAULT_TOP_K: int | None = 2000
DEFAULT_TEMPERATURE = 1.0


class StandinAdapter(CausalLMAdapter):
    """CausalLMAdapter for the stand-in. Prompt: ``prompt_ids(c)`` = [class token of c];
    unconditional prompt: ``uncond_prompt_ids()`` = [null class token]; generate
    ``num_image_tokens`` (= 16 x 16) tokens in raster order, then ``decode_images``."""

    def __init__(
        self,
        model,
        layout: TokenLayout,
        tokenizer: PatchVQTokenizer,
        class_names: list[str],
        *,
        cfg_scale: float | None = DEFAULT_CFG_SCALE,
        top_k: int | None = DEFAULT_TOP_K,
        temperature: float = DEFAULT_TEMPERATURE,
    ) -> None:
        if len(class_names) != layout.num_classes:
            raise ValueError(f"{len(class_names)} class names for {layout.num_classes} classes")
        super().__init__(
            model,
            allowed_tokens=torch.arange(layout.codebook_size),
            temperature=temperature,
            top_k=top_k,
            cfg_scale=cfg_scale,
            row_length=layout.grid,
        )
        self.layout = layout
        self.tokenizer = tokenizer.to(self.device)
        self.class_names = list(class_names)

    @property
    def num_classes(self) -> int:
        return self.layout.num_classes

    @property
    def num_image_tokens(self) -> int:
        return self.layout.num_image_tokens

    @property
    def image_token_embeddings(self) -> Tensor:
        """The AR model's input-embedding rows of the image codes, [K, D]."""
        return self.embeddings[: self.layout.codebook_size]

    @property
    def code_vectors(self) -> Tensor:
        """The tokenizer's code patches, [K, 3 * 16 * 16] pixel values in [-1, 1]
        (row i = code i)."""
        return self.tokenizer.codebook

    def code_content(self) -> Tensor:
        """Each code's decoded patch, [K, 3 * P * P] pixel values in [-1, 1] (row i = code i =
        ``allowed_tokens[i]``): the tokenizer's codebook clamped to [-1, 1], exactly the patch its
        decoder tiles into the image (``tokenizer.decode_tiles``) before the seam decoder blends
        the tiles' borders."""
        return self.tokenizer.codebook.clamp(-1, 1)

    def class_index(self, name_or_index: int | str) -> int:
        if isinstance(name_or_index, str):
            if name_or_index not in self.class_names:
                raise ValueError(f"unknown class {name_or_index!r}; classes: {self.class_names}")
            return self.class_names.index(name_or_index)
        return int(name_or_index)

    def prompt_ids(self, class_index: int | str) -> Tensor:
        """[class token] as a 1-D LongTensor; raises ValueError for an unknown class."""
        return torch.tensor(
            [self.layout.class_id(self.class_index(class_index))], device=self.device
        )

    def uncond_prompt_ids(self) -> Tensor:
        return torch.tensor([self.layout.null_class_id], device=self.device)

    def decode_images(self, tokens: Tensor, as_uint8: bool = True) -> Tensor:
        """tokens [N, 256] or [256] (image codes) -> uint8 [N, 256, 256, 3] (or float [N, 3, 256,
        256] in [-1, 1] when ``as_uint8`` is False)."""
        tokens = torch.as_tensor(tokens, device=self.device).long()
        if tokens.dim() == 1:
            tokens = tokens[None]
        if tokens.dim() != 2 or tokens.shape[1] != self.num_image_tokens:
            raise ValueError(
                f"tokens must be [N, {self.num_image_tokens}], got {tuple(tokens.shape)}"
            )
        if tokens.min() < 0 or tokens.max() >= self.layout.codebook_size:
            raise ValueError(f"tokens must be image codes in [0, {self.layout.codebook_size})")
        grid = self.layout.grid
        images = self.tokenizer.decode(tokens.view(-1, grid, grid))
        return to_uint8(images) if as_uint8 else images


def load_standin(
    device: str | torch.device = "cpu",
    *,
    weights_dir: str | Path | None = None,
    cfg_scale: float | None = DEFAULT_CFG_SCALE,
    top_k: int | None = DEFAULT_TOP_K,
    temperature: float = DEFAULT_TEMPERATURE,
    compute_dtype: torch.dtype | None = None,
) -> StandinAdapter:
    """Load the shipped stand-in (safetensors only) and return its ready adapter.

    ``compute_dtype``: the model's parameter dtype; default float64 on CPU (reproducible across
    CPUs, see the module docstring) and float32 elsewhere.

    Missing files raise FileNotFoundError, corrupted ones ``WeightFileError`` (a ValueError),
    both naming the file.
    """
    directory = Path(weights_dir) if weights_dir is not None else WEIGHTS_DIR
    if compute_dtype is None:
        compute_dtype = torch.float64 if torch.device(device).type == "cpu" else torch.float32
    if not isinstance(compute_dtype, torch.dtype) or not compute_dtype.is_floating_point:
        raise ValueError(f"compute_dtype must be a floating torch.dtype, got {compute_dtype!r}")
    model, layout, cfg = load_ar_model(directory, dtype=compute_dtype)  # widened once, here
    tokenizer = load_tokenizer(directory)
    if tokenizer.codebook_size != layout.codebook_size:
        raise ValueError(
            f"tokenizer codebook {tokenizer.codebook_size} != AR layout "
            f"{layout.codebook_size} in {directory}"
        )
    names = cfg.get("class_names") or [f"class_{i}" for i in range(layout.num_classes)]
    adapter = StandinAdapter(
        model.to(device),
        layout,
        tokenizer,
        names,
        cfg_scale=cfg_scale,
        top_k=top_k,
        temperature=temperature,
    )
    adapter.set_compute_dtype(compute_dtype)
    # The distance filter's quantile, computed once at export (GSD's resolve checks the digest).
    adapter.distance_quantiles = stored_distance_quantiles(directory)
    return adapter
