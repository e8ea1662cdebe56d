"""CLIP score on a tiny random CLIPModel saved to disk and loaded offline through ``load_clip``."""

from __future__ import annotations

import pytest
import torch

from gsd_lab.quality.clip_score import clip_score, clip_scores, load_clip

TEXTS = ["a red cat", "blue sky", "a dog on the grass", "cat", "sky with a red dog"]


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    """A tiny random CLIP written with save_pretrained (gsd_lab.models.lumina_tiny), no download."""
    from gsd_lab.models.lumina_tiny import write_tiny_clip

    return write_tiny_clip(tmp_path_factory.mktemp("clip"))


def test_tiny_clip_folder_has_the_save_pretrained_files(clip_dir):
    names = {p.name for p in clip_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= names
    assert {"tokenizer.json", "vocab.json"} & names  # transformers 5 / 4 tokenizer files
    assert {"processor_config.json", "preprocessor_config.json"} & names
    model, processor = load_clip(clip_dir)
    long_prompt = "an astronaut riding a horse in a field of flowers, 1024 px, photorealistic"
    scores = clip_scores(_images(1), [long_prompt], model, processor)  # 77 positions, truncated
    assert scores.shape == (1,) and bool(torch.isfinite(scores).all())


def _images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(
        0, 256, (n, 40, 48, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )


def _unclipped(model, processor, images, texts) -> torch.Tensor:
    """100 cos via get_image_features / get_text_features (another code path than the forward)."""
    inputs = processor(
        text=texts, images=[i.numpy() for i in images], return_tensors="pt", padding=True
    )
    with torch.no_grad():
        image = model.get_image_features(pixel_values=inputs["pixel_values"])
        text = model.get_text_features(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]
        )
    image = getattr(image, "pooler_output", image).double()
    text = getattr(text, "pooler_output", text).double()
    return 100 * torch.nn.functional.cosine_similarity(image, text, dim=-1)


def test_score_is_clipped_cosine(clip_dir):
    model, processor = load_clip(clip_dir)
    images = _images(len(TEXTS))
    raw = _unclipped(model, processor, images, TEXTS)
    scores = clip_scores(images, TEXTS, model, processor, batch_size=2)
    torch.testing.assert_close(scores, raw.clamp(min=0), rtol=1e-6, atol=1e-6)
    # Negating the visual projection negates every cosine: the clipped scores swap sides.
    with torch.no_grad():
        model.visual_projection.weight.neg_()
    flipped = clip_scores(images, TEXTS, model, processor)
    torch.testing.assert_close(scores + flipped, raw.abs(), rtol=1e-6, atol=1e-6)
    assert bool((scores > 0).any() or (flipped > 0).any())
    assert abs(clip_score(images, TEXTS, model, processor) - float(flipped.mean())) < 1e-9


def test_batching_and_input_forms_agree(clip_dir):
    model, processor = load_clip(clip_dir)
    images = _images(3, seed=1)
    texts = TEXTS[:3]
    whole = clip_scores(images, texts, model, processor, batch_size=8)
    # The model runs in float32 and padding changes the summation order: agree to ~1e-6 relative.
    torch.testing.assert_close(
        clip_scores(images, texts, model, processor, batch_size=1), whole, rtol=1e-5, atol=1e-4
    )
    from PIL import Image

    pil = [Image.fromarray(i.numpy()) for i in images]
    torch.testing.assert_close(clip_scores(pil, texts, model, processor, batch_size=8), whole)
    assert bool((whole >= 0).all() and (whole <= 100).all())


def test_bad_input(clip_dir, tmp_path):
    model, processor = load_clip(clip_dir)
    with pytest.raises(ValueError, match="2 images but 3 texts"):
        clip_scores(_images(2), TEXTS[:3], model, processor)
    with pytest.raises(ValueError, match="uint8"):
        clip_scores(torch.zeros(2, 8, 8, 3), TEXTS[:2], model, processor)
    with pytest.raises(FileNotFoundError, match="no CLIP model"):
        load_clip(tmp_path / "missing")
