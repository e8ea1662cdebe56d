"""CLIP score on a tiny random CLIPModel saved to disk and loaded offline through ``load_clip``."""

from __future__ import annotations

import pytest
import torch

from gsd_lab.clip_score import clip_score, clip_scores, load_clip

TEXTS = ["a red cat", "blue sky", "a dog on the grass", "cat", "sky with a red dog"]


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    from transformers import (
        CLIPConfig,
        CLIPImageProcessorPil,
        CLIPModel,
        CLIPProcessor,
        CLIPTokenizer,
    )

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab.update({c: i + 2 for i, c in enumerate(chars)})
    vocab.update({c + "</w>": i + 2 + len(chars) for i, c in enumerate(chars)})
    processor = CLIPProcessor(
        image_processor=CLIPImageProcessorPil(
            size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
        ),
        tokenizer=CLIPTokenizer(vocab=vocab, merges=[]),
    )
    small = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
    }
    config = CLIPConfig(
        text_config=dict(
            vocab_size=len(vocab),
            max_position_embeddings=32,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
            **small,
        ),
        vision_config=dict(image_size=32, patch_size=8, **small),
        projection_dim=16,
    )
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("clip")
    CLIPModel(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


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
