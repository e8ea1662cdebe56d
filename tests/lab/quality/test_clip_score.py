"""CLIP score on a tiny random CLIPModel saved to disk and loaded offline through ``load_clip``."""

from __future__ import annotations

import pytest
import torch

from gsd_lab.quality.clip_score import clip_score, clip_scores, load_clip

TEXTS = ["a red cat", "blue sky", "a dog on the grass", "cat", "sky with a red dog"]


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    """A tiny random CLIP written with save_pretrained (gsd_lab.testing.tiny_checkpoints), no
    download."""
    from gsd_lab.testing.tiny_checkpoints import write_tiny_clip

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


# Float32 tolerance for scores of the same pairs computed along two paths (another batch size,
# text padding, get_*_features against the forward, another ATen kernel): they differ only in the
# order float32 sums are taken. Reordering a sum of n float32 terms moves it by at most
# n * u * sum|terms| (Higham's gamma_n, u = eps32 / 2); the widest sum in the tiny CLIP is its
# MLP's (n = 64). A relative error r on one side's embedding moves a cosine by at most 2r, and
# there are two sides: |d cos| <= 2 * 2 * 64 * u = 128 * eps32, and score = 100 cos. This is a
# worst-case bound per sum, far above the typical (random-walk) error, so the two layers'
# compounding stays inside it. Measured on AVX-512, AVX2 and ATen's scalar kernels: <= 1.8e-5.
FLOAT32_WIDEST_SUM = 64
SCORE_TOLERANCE = 100 * 2 * FLOAT32_WIDEST_SUM * torch.finfo(torch.float32).eps  # 1.5e-3


def test_score_is_clipped_cosine(clip_dir):
    model, processor = load_clip(clip_dir)
    images = _images(len(TEXTS))
    raw = _unclipped(model, processor, images, TEXTS)
    assert bool((raw > SCORE_TOLERANCE).any() and (raw < -SCORE_TOLERANCE).any())  # both sides
    scores = clip_scores(images, TEXTS, model, processor, batch_size=2)
    torch.testing.assert_close(scores, raw.clamp(min=0), rtol=0, atol=SCORE_TOLERANCE)
    assert bool((scores[raw < -SCORE_TOLERANCE] == 0).all())  # clipped to exactly 0
    # Negating the visual projection negates every image embedding exactly (the same sums of
    # negated terms): at the same batch size the clipped scores swap sides bit for bit, so one
    # of each pair is exactly 0 and their sum is |100 cos|.
    with torch.no_grad():
        model.visual_projection.weight.neg_()
    flipped = clip_scores(images, TEXTS, model, processor, batch_size=2)
    assert torch.equal(torch.minimum(scores, flipped), torch.zeros_like(scores))
    torch.testing.assert_close(scores + flipped, raw.abs(), rtol=0, atol=SCORE_TOLERANCE)
    assert clip_score(images, TEXTS, model, processor, batch_size=2) == float(flipped.mean())


def test_batching_and_input_forms_agree(clip_dir):
    model, processor = load_clip(clip_dir)
    images = _images(3, seed=1)
    texts = TEXTS[:3]
    whole = clip_scores(images, texts, model, processor, batch_size=8)
    torch.testing.assert_close(  # float32 sums in another order (padding, batch): see above
        clip_scores(images, texts, model, processor, batch_size=1), whole, rtol=0,
        atol=SCORE_TOLERANCE,
    )
    from PIL import Image

    pil = [Image.fromarray(i.numpy()) for i in images]  # the same pixels: the same scores
    assert torch.equal(clip_scores(pil, texts, model, processor, batch_size=8), whole)
    assert bool((whole >= 0).all() and (whole <= 100).all())


def test_bad_input(clip_dir, tmp_path):
    model, processor = load_clip(clip_dir)
    with pytest.raises(ValueError, match="2 images but 3 texts"):
        clip_scores(_images(2), TEXTS[:3], model, processor)
    with pytest.raises(ValueError, match="uint8"):
        clip_scores(torch.zeros(2, 8, 8, 3), TEXTS[:2], model, processor)
    with pytest.raises(FileNotFoundError, match="no CLIP model"):
        load_clip(tmp_path / "missing")
