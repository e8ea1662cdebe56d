"""CLIP score of generated images against their prompts (the paper's text-image alignment metric).

score(image, text) = max(100 * cos(E_img(image), E_txt(text)), 0), averaged over the pairs,
where E are CLIP's projected image / text embeddings (as torchmetrics' ``CLIPScore``, which SJD
used with openai/clip-vit-base-patch16). Computed directly with ``transformers`` (torchmetrics'
own class breaks on transformers >= 5). The CLIP weights come from a local folder the user
provides (``CLIPModel`` + ``CLIPProcessor`` files); nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor


def load_clip(model_dir: str | Path, *, device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """``(CLIPModel, CLIPProcessor)`` from a local folder (config.json, weights, tokenizer and
    preprocessor files), offline."""
    from transformers import CLIPModel, CLIPProcessor

    folder = Path(model_dir).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"no CLIP model in {folder}: expected config.json, weights, tokenizer and preprocessor "
            "files, e.g. a local copy of openai/clip-vit-base-patch16 "
            "(save_pretrained of CLIPModel and CLIPProcessor)"
        )
    model = CLIPModel.from_pretrained(str(folder), local_files_only=True).to(device).eval()
    processor = CLIPProcessor.from_pretrained(str(folder), local_files_only=True)
    return model, processor


def resized(images: list[Any], side: int) -> list[Any]:
    """Each image resized to side x side pixels, bilinear (PIL), as uint8 arrays: SJD's evaluation
    resizes generated images to 299 x 299 before its CLIP score."""
    from PIL import Image

    return [
        np.asarray(Image.fromarray(np.asarray(image)).resize((side, side), Image.BILINEAR))
        for image in images
    ]


def _as_image_list(images: Any) -> list[Any]:
    """uint8 tensor [N, H, W, 3] / [H, W, 3], or a sequence of PIL images / HWC arrays -> list."""
    if isinstance(images, Tensor):
        if images.dtype != torch.uint8 or images.shape[-1] != 3 or images.ndim not in (3, 4):
            raise ValueError("image tensors must be uint8 [N, H, W, 3] or [H, W, 3]")
        images = images.unsqueeze(0) if images.ndim == 3 else images
        return [image.cpu().numpy() for image in images]
    return list(images)


@torch.inference_mode()
def clip_scores(
    images: Any,
    texts: Sequence[str],
    model: Any,
    processor: Any,
    *,
    batch_size: int = 32,
    resize: int | None = None,
) -> Tensor:
    """Per-pair CLIP scores [N] (float64): max(100 * cos(image_i, text_i), 0). ``resize``: first
    resize every image to resize x resize pixels (``resized``; None: as given)."""
    image_list = _as_image_list(images)
    if resize is not None:
        image_list = resized(image_list, resize)
    texts = [texts] if isinstance(texts, str) else list(texts)
    if len(image_list) != len(texts):
        raise ValueError(f"got {len(image_list)} images but {len(texts)} texts")
    if not image_list:
        raise ValueError("no images to score")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = next(model.parameters()).device
    scores = []
    for start in range(0, len(texts), batch_size):
        inputs = processor(
            text=texts[start : start + batch_size],
            images=image_list[start : start + batch_size],
            return_tensors="pt",
            padding=True,
            truncation=True,
        )
        inputs = {k: v.to(device) for k, v in inputs.items()}
        out = model(**inputs)
        image = torch.nn.functional.normalize(out.image_embeds.double(), dim=-1)
        text = torch.nn.functional.normalize(out.text_embeds.double(), dim=-1)
        scores.append((100.0 * (image * text).sum(-1)).clamp(min=0.0))
    return torch.cat(scores).cpu()


def clip_score(
    images: Any, texts: Sequence[str], model: Any, processor: Any, *, batch_size: int = 32
) -> float:
    """Mean CLIP score over the pairs (images[i], texts[i]), in [0, 100]."""
    return float(clip_scores(images, texts, model, processor, batch_size=batch_size).mean())
