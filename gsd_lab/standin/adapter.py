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

``load_standin(fast_forward=True)`` (float64 on CPU): the model is ``llama_forward.LlamaForward``
instead of ``transformers``' LlamaForCausalLM, the same logits bit for bit, seconds less to
import; for the eager runner only (the batched and static runners need ``transformers``' cache
classes). ``lazy_tokenizer=True``: the tokenizer loads at its first use (pixels, code content).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from torch import Tensor

from ..models.adapter import CausalLMAdapter
from .ar import TokenLayout
from .data import to_uint8
from .loading import (
    WEIGHTS_DIR,
    load_ar_forward,
    load_ar_model,
    load_tokenizer,
    read_tokenizer_config,
    stored_distance_quantiles,
)
from .tokenizer import PatchVQTokenizer

DEFAULT_CFG_SCALE = 3.0
DEFAULT_TOP_K: int | None = 2000
DEFAULT_TEMPERATURE = 1.0


class StandinAdapter(CausalLMAdapter):
    """CausalLMAdapter for the stand-in. Prompt: ``prompt_ids(c)`` = [class token of c];
    unconditional prompt: ``uncond_prompt_ids()`` = [null class token]; generate
    ``num_image_tokens`` (= 16 x 16) tokens in raster order, then ``decode_images``.

    tokenizer: the tokenizer, or a function loading it (called at its first use)."""

    def __init__(
        self,
        model,
        layout: TokenLayout,
        tokenizer: PatchVQTokenizer | Callable[[], PatchVQTokenizer],
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
        self._tokenizer: PatchVQTokenizer | None = None
        self._load_tokenizer = None
        if isinstance(tokenizer, PatchVQTokenizer):
            self._tokenizer = tokenizer.to(self.device)
        elif callable(tokenizer):
            self._load_tokenizer = tokenizer
        else:
            raise ValueError(
                "tokenizer must be a PatchVQTokenizer or a function loading one, got "
                f"{type(tokenizer).__name__}"
            )
        self.class_names = list(class_names)

    @property
    def tokenizer(self) -> PatchVQTokenizer:
        """The patch-VQ tokenizer (on ``device``; loaded here at first use when lazy)."""
        if self._tokenizer is None:
            self._tokenizer = self._load_tokenizer().to(self.device)
        return self._tokenizer

    @property
    def num_classes(self) -> int:
        return self.layout.num_classes

    @property
    def num_image_tokens(self) -> int:
        return self.layout.num_image_tokens

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
    fast_forward: bool = False,
    lazy_tokenizer: bool = False,
) -> StandinAdapter:
    """Load the shipped stand-in (safetensors only) and return its ready adapter.

    ``compute_dtype``: the model's parameter dtype; default float64 on CPU (reproducible across
    CPUs, see the module docstring) and float32 elsewhere. ``fast_forward``: the model is
    ``llama_forward.LlamaForward`` (float64 on CPU only; ValueError otherwise), bit for bit the
    float64 LlamaForCausalLM without importing ``transformers``; eager runner only.
    ``lazy_tokenizer``: load the tokenizer at its first use (its codebook size is checked now,
    from tokenizer_config.json).

    Missing files raise FileNotFoundError, corrupted ones ``WeightFileError`` (a ValueError),
    both naming the file.
    """
    directory = Path(weights_dir) if weights_dir is not None else WEIGHTS_DIR
    if compute_dtype is None:
        compute_dtype = torch.float64 if torch.device(device).type == "cpu" else torch.float32
    if not isinstance(compute_dtype, torch.dtype) or not compute_dtype.is_floating_point:
        raise ValueError(f"compute_dtype must be a floating torch.dtype, got {compute_dtype!r}")
    if fast_forward:
        if torch.device(device).type != "cpu" or compute_dtype != torch.float64:
            raise ValueError(
                "fast_forward runs the stand-in in float64 on the CPU only, got device "
                f"{device!r} and compute_dtype {compute_dtype}"
            )
        model, layout, cfg = load_ar_forward(directory)
    else:
        model, layout, cfg = load_ar_model(directory, dtype=compute_dtype)  # widened once, here
    if lazy_tokenizer:
        tokenizer = partial(load_tokenizer, directory)
        codebook = read_tokenizer_config(directory).codebook_size
    else:
        tokenizer = load_tokenizer(directory)
        codebook = tokenizer.codebook_size
    if codebook != layout.codebook_size:
        raise ValueError(
            f"tokenizer codebook {codebook} != AR layout {layout.codebook_size} in {directory}"
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
    if not fast_forward:  # LlamaForward is float64 already, with no float32 steps to remove
        adapter.set_compute_dtype(compute_dtype)
    # The distance filter's quantile, computed once at export (GSD's resolve checks the digest).
    adapter.distance_quantiles = stored_distance_quantiles(directory)
    return adapter


