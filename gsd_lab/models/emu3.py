"""Emu3 (BAAI; ``Emu3ForConditionalGeneration`` and ``Emu3VQVAE``, stock ``transformers``)
text-to-image as a decoding adapter.

Weights: ``BAAI/Emu3-Gen-hf`` (the transformers-layout conversion of ``BAAI/Emu3-Gen``; about 8B
parameters with its VQ-VAE). Loaded with the stock ``Emu3ForConditionalGeneration.from_pretrained``
(text model, ``lm_head`` and the VQ-VAE whose decoder makes the pixels).

Quirks of the family (what this adapter does differently from the stock model): docs/family-emu3.md,
section 3.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .grid_image import GridImageAdapter, GridLayout, code_table, vocabulary_id
from .loading import device_and_dtype, find_checkpoint, refuse_large_on_cpu, tokenizer_file

HF_REPO = "BAAI/Emu3-Gen-hf"
DEFAULT_IMAGE_AREA = 518400  # Emu3Processor's default image_area (720 x 720 pixels)
DEFAULT_CFG_SCALE = 3.0
DEFAULT_TOP_K = 2048
DEFAULT_TEMPERATURE = 1.0
CPU_PARAMETER_LIMIT = 1_000_000_000  # above this, loading on CPU needs force_cpu=True
NEGATIVE_PROMPT = (
    "lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, fewer digits, "
    "cropped, worst quality, low quality, normal quality, jpeg artifacts, signature, watermark, "
    "username, blurry."
)
IMAGE_START_NAME = "<|image start|>"
IMAGE_END_NAME = "<|image end|>"
IMAGE_WRAPPER_NAME = "<|image token|>"
END_OF_LINE_NAME = "<|extra_200|>"
END_OF_FRAME_NAME = "<|extra_201|>"
VISUAL_PREFIX = "<|visual token"


def emu3_code_table(vocabulary_map: dict[str, int], vocab_size: int) -> Tensor:
    """int64 [vocab_size]: the VQ index of each ``<|visual token NNNNNN|>`` id (stock
    ``Emu3ImageVocabularyMapping.img2bpe``, read from the names), -1 elsewhere."""
    from transformers.models.emu3.modeling_emu3 import Emu3ImageVocabularyMapping

    mapping = Emu3ImageVocabularyMapping(vocabulary_map)
    code_of_token = {token: code for code, token in mapping.img2bpe.items()}
    return code_table(code_of_token, vocab_size, f"names {VISUAL_PREFIX}...|>")


def latent_size(image_area: int, spatial_factor: int) -> tuple[int, int]:
    """(h, w) latent rows and columns of a 1:1 image of ``image_area`` pixels, as
    ``Emu3Processor.calculate_generate_size("1:1", image_area, spatial_factor)``."""
    if not isinstance(image_area, int) or isinstance(image_area, bool) or image_area < 1:
        raise ValueError(f"image_area must be an int >= 1 (pixels), got {image_area!r}")
    side = int(round(math.sqrt(image_area) / spatial_factor))
    if side < 1:
        raise ValueError(
            f"image_area {image_area} is below one latent code ({spatial_factor} px squared)"
        )
    return side, side


class Emu3Adapter(GridImageAdapter):
    """Emu3 text-to-image (module docstring): stock logits, visual tokens only, the end-of-line
    token forced after every row and <|extra_201|>, <|image end|>, EOS, padding after the image,
    CFG against a negative prompt as the second row of every forward, top-k, temperature.

    model: ``Emu3ForConditionalGeneration``. tokenizer: ``encode(text, add_special_tokens=False)
    -> list[int]`` (``PromptTokenizer``) or None (``text_ids_to_prompt`` only). image_processor:
    an ``Emu3ImageProcessor`` for pixels (its ``postprocess``), default the stock one."""

    def __init__(
        self,
        model: Any,
        *,
        image_area: int = DEFAULT_IMAGE_AREA,
        tokenizer: Any = None,
        image_processor: Any = None,
        negative_prompt: str = NEGATIVE_PROMPT,
        cfg_scale: float | None = DEFAULT_CFG_SCALE,
        top_k: int | None = DEFAULT_TOP_K,
        temperature: float = DEFAULT_TEMPERATURE,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        config = model.config
        text = config.text_config
        vocab = dict(config.vocabulary_map or {})
        table = emu3_code_table(vocab, int(text.vocab_size))
        height, width = latent_size(image_area, model.model.vqmodel.spatial_scale_factor)
        self.bos, self.eos, self.pad = text.bos_token_id, text.eos_token_id, text.pad_token_id
        for name in ("bos", "eos", "pad"):
            if getattr(self, name) is None:
                raise ValueError(f"the text config has no {name}_token_id")
        names = (IMAGE_START_NAME, IMAGE_WRAPPER_NAME, END_OF_LINE_NAME, END_OF_FRAME_NAME)
        self.image_start, self.image_wrapper, end_of_line, end_of_frame = (
            vocabulary_id(vocab, name, "Emu3") for name in names
        )
        image_end = vocabulary_id(vocab, IMAGE_END_NAME, "Emu3")
        tail = (end_of_frame, image_end, self.eos, self.pad)
        layout = GridLayout(height, width, row_end=end_of_line, tail=tail)
        super().__init__(
            model,
            layout,
            table,
            decode_indices=self._decode_indices,
            codebook=model.model.vqmodel.quantize.embedding.weight,
            tokenizer=tokenizer,
            cfg_scale=cfg_scale,
            top_k=top_k,
            temperature=temperature,
            compute_dtype=compute_dtype,
        )
        self.negative_prompt = negative_prompt
        if image_processor is None:
            from transformers import Emu3ImageProcessor

            image_processor = Emu3ImageProcessor()
        self.image_processor = image_processor

    # ---- prompts ----

    def image_header(self) -> list[int]:
        """<|image start|> + ids of "{h}*{w}" + <|image token|>."""
        size = self.encode(f"{self.layout.height}*{self.layout.width}")
        return [self.image_start, *size, self.image_wrapper]

    def unconditional_prompt_ids(self) -> Tensor:
        """The CFG row's prompt: the negative prompt in the same template."""
        return self.prompt_ids(self.negative_prompt)

    # ---- pixels ----

    def _decode_indices(self, indices: Tensor) -> Tensor:
        """VQ indices [B, h, w] -> uint8 [B, H, W, 3]: ``Emu3VQVAE.decode`` then the image
        processor's ``postprocess`` (its rescale and normalisation undone)."""
        vqmodel = self.model.model.vqmodel
        with torch.inference_mode():
            pixels = vqmodel.decode(indices.to(self.device))
        # The PIL form: stock postprocess's "np" form concatenates the images' channels.
        out = self.image_processor.postprocess(list(pixels.float().cpu()))["pixel_values"]
        return torch.stack([torch.from_numpy(np.asarray(image).copy()) for image in out])


def read_image_area(folder: Path) -> int:
    """``image_area`` from ``processor_config.json`` in ``folder`` when it sets one (the tiny
    checkpoints do, to keep images small; the release's does not), else Emu3Processor's default
    518400."""
    path = folder / "processor_config.json"
    if path.is_file():
        area = json.loads(path.read_text()).get("image_area")
        if area is not None:
            return int(area)
    return DEFAULT_IMAGE_AREA


def emu3_parameters(config: Any) -> int:
    """About how many parameters the text model has (untied embeddings and head 2 V d, per layer
    4 d^2 attention at most and 3 d f MLP): for the CPU guard only."""
    text = config.text_config
    d, f = text.hidden_size, text.intermediate_size
    return 2 * text.vocab_size * d + text.num_hidden_layers * (4 * d * d + 3 * d * f)


def load_emu3(
    weights: str | Path | None,
    *,
    image_area: int | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    force_cpu: bool = False,
    cfg_scale: float | None = None,
    top_k: int | None = None,
    temperature: float | None = None,
    tokenizer: str | Path | None = None,
    negative_prompt: str = NEGATIVE_PROMPT,
) -> Emu3Adapter:
    """Load an Emu3 checkpoint in the transformers layout (``config.json``, safetensors,
    ``tokenizer.json``; optional ``generation_config.json`` and ``preprocessor_config.json``) with
    ``Emu3ForConditionalGeneration.from_pretrained`` as an ``Emu3Adapter``.

    cfg_scale / top_k / temperature: None takes the checkpoint's generation config, else the
    README defaults (module docstring). image_area: pixels of the square image (None:
    ``read_image_area``). device: default cuda when available; dtype: default bfloat16 on GPU,
    float32 on CPU; above 1e9 parameters the CPU is refused unless ``force_cpu``. weights: the
    folder, or None for the Hugging Face cache (``loading.find_checkpoint``)."""
    from transformers import Emu3Config, Emu3ForConditionalGeneration, Emu3ImageProcessor

    from .lumina_tokenizer import PromptTokenizer

    folder = find_checkpoint(weights, HF_REPO, "Emu3")
    raw = json.loads((folder / "config.json").read_text())
    if raw.get("model_type") != "emu3":
        raise ValueError(
            f"{folder / 'config.json'} has model_type {raw.get('model_type')!r}; Emu3 is 'emu3'"
        )
    prompt_tokenizer = PromptTokenizer(tokenizer_file(folder, tokenizer))
    config = Emu3Config.from_pretrained(str(folder))
    device, dtype = device_and_dtype(device, dtype)
    refuse_large_on_cpu(
        folder, device, lambda: emu3_parameters(config), CPU_PARAMETER_LIMIT, force_cpu
    )
    settings = _generation_settings(folder)
    model = Emu3ForConditionalGeneration.from_pretrained(str(folder), dtype=dtype).to(device)
    processor = (
        Emu3ImageProcessor.from_pretrained(str(folder))
        if (folder / "preprocessor_config.json").is_file()
        else None
    )
    return Emu3Adapter(
        model.eval(),
        image_area=image_area if image_area is not None else read_image_area(folder),
        tokenizer=prompt_tokenizer,
        image_processor=processor,
        negative_prompt=negative_prompt,
        cfg_scale=cfg_scale if cfg_scale is not None else settings["guidance_scale"],
        top_k=top_k if top_k is not None else settings["top_k"],
        temperature=temperature if temperature is not None else settings["temperature"],
    )


def _generation_settings(folder: Path) -> dict[str, Any]:
    """guidance_scale, top_k, temperature from ``generation_config.json`` where set (a top-k of
    0 means none), else the README defaults."""
    settings: dict[str, Any] = {
        "guidance_scale": DEFAULT_CFG_SCALE,
        "top_k": DEFAULT_TOP_K,
        "temperature": DEFAULT_TEMPERATURE,
    }
    path = folder / "generation_config.json"
    if path.is_file():
        raw = json.loads(path.read_text())
        for key in settings:
            if raw.get(key) is not None:
                settings[key] = raw[key]
        if settings["top_k"] == 0:
            settings["top_k"] = None
    return settings
