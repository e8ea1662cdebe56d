"""The stand-in's token layout: its autoregressive model (a LlamaForCausalLM, or
``llama_forward.LlamaForward``) reads [class token] + h*w image tokens in raster order,
LlamaGen-style class-conditional generation.

Token-id layout (vocabulary V = K + C + 1, K = tokenizer codebook size, C = classes):
    0 .. K-1        image codes (the only tokens generation may emit)
    K + c           class token of class c, 0 <= c < C
    K + C           the null class (unconditional branch of classifier-free guidance)
The model's training is ``gsd_train.standin.ar``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenLayout:
    codebook_size: int
    num_classes: int
    grid: int = 16  # image tokens per side

    @property
    def vocab_size(self) -> int:
        return self.codebook_size + self.num_classes + 1

    @property
    def null_class_id(self) -> int:
        return self.codebook_size + self.num_classes

    @property
    def num_image_tokens(self) -> int:
        return self.grid * self.grid

    def class_id(self, class_index: int) -> int:
        if not 0 <= class_index < self.num_classes:
            raise ValueError(f"class index must lie in [0, {self.num_classes}), got {class_index}")
        return self.codebook_size + class_index

    def to_dict(self) -> dict:
        return {
            "codebook_size": self.codebook_size,
            "num_classes": self.num_classes,
            "grid": self.grid,
            "vocab_size": self.vocab_size,
            "image_token_ids": [0, self.codebook_size - 1],
            "class_token_ids": [self.codebook_size, self.codebook_size + self.num_classes - 1],
            "null_class_id": self.null_class_id,
            "sequence": "[class or null] + grid*grid image codes in raster order",
        }
