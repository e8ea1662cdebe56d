"""GPU shape check for the Chameleon / Anole 7B and Emu3-Gen families at their real
configurations, on random weights (nothing downloaded), through the package's adapters.

Per family (``--family anole``, ``emu3`` or ``all``):

- anole: ``ChameleonForConditionalGeneration`` at transformers' default ``ChameleonConfig`` (the
  7B: vocab 65536, hidden 4096, 32 layers, FFN 11008, 32 heads; vq_config resolution 512 with
  multipliers [1, 1, 2, 2, 4]: 32 x 32 codes per image) with a Chameleon-named vocabulary,
  ``AnoleAdapter`` (CFG 3.0, top-k 2000); pixels through a random Chameleon VQGAN decoder at the
  release's configuration (``chameleon_vqgan``, 8192 codes, x16);
- emu3: ``Emu3ForConditionalGeneration`` at transformers' default ``Emu3Config`` (the Emu3-Gen 8B
  text model: vocab 184622, hidden 4096, 32 layers, FFN 14336, 32 heads, 8 KV heads; VQ-VAE
  codebook 32768, multipliers [1, 2, 2, 4]: x8), ``Emu3Adapter`` at the processor's default
  image area 518400 (90 x 90 codes + 90 end-of-line tokens = 8190 tokens), CFG 3.0, top-k 2048.

Measured (CUDA-synchronised, median of ``--repeats``): ``forward_ms[T]``, one adapter forward
of T = 1 and T = ``--window`` tokens after a CFG prefill of the prompt plus ``--context`` image
tokens (the cache cropped back after each; ``model_ms[T]`` its model part; as
``gpu_lumina_shapes.window_medians`` times them); ``decode``: ``generate`` with SJD and GSD over
``--decode-tokens`` tokens (nfe, wall seconds; random weights: acceptance is not a real model's);
``pixels``: the VQ decoder on one full image (its shape and time); ``peak_gib``: peak GPU memory.
One JSON line. ``--tiny``: the tiny test checkpoints' configurations on the CPU (the tests).

    python benchmarks/gpu_family_shapes.py --family all        # on a GPU machine
    python benchmarks/gpu_family_shapes.py --tiny --family all # CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_lumina_shapes as shapes  # noqa: E402 (the GPU scripts' shared timing and header)

from gsd_lab.decode.loop import generate  # noqa: E402
from gsd_lab.decode.methods import ClusterAcceptance, DecodingMethod  # noqa: E402
from gsd_lab.models.lumina_mgpt import chameleon_vocabulary_map  # noqa: E402
from gsd_lab.testing.tiny_checkpoints import TEST_CONFIG_DIMS  # noqa: E402

FAMILIES = ("anole", "emu3")


def _emu3_names(vocab_size: int, num_codes: int) -> dict[str, int]:
    """Emu3's special names after the text ids, then the visual tokens at the top."""
    specials = ["<|image start|>", "<|image end|>", "<|image token|>", "<|extra_200|>",
                "<|extra_201|>", "<image>"]
    first_visual = vocab_size - num_codes
    names = {name: first_visual - len(specials) + i for i, name in enumerate(specials)}
    names.update({f"<|visual token{c:06d}|>": first_visual + c for c in range(num_codes)})
    return names


class _DigitTokenizer:
    """Prompt ids without a tokenizer file: each character of the text -> 100 + its code point
    (random weights: any ids do)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [100 + (ord(c) % 1000) for c in text]


def build_anole(tiny: bool, device: torch.device, dtype: torch.dtype) -> Any:
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    from gsd_lab.models.anole import AnoleAdapter
    from gsd_lab.models.chameleon_vqgan import ChameleonVQGANDecoder, VQGANConfig

    if tiny:
        from gsd_lab.testing.tiny_checkpoints import tiny_vocabulary_map

        vocab = tiny_vocabulary_map(64)
        config = ChameleonConfig(vocab_size=len(vocab), **TEST_CONFIG_DIMS, vocabulary_map=vocab,
                                 vq_config={"resolution": 16, "channel_multiplier": [1, 2]})
        vq = VQGANConfig(embed_dim=8, n_embed=64, z_channels=8, ch=32, ch_mult=(1, 2),
                         num_res_blocks=1, resolution=32)
    else:
        config = ChameleonConfig(vocabulary_map=chameleon_vocabulary_map(65536, 8192))
        vq = VQGANConfig(embed_dim=256, n_embed=8192, z_channels=256, ch=128,
                         ch_mult=(1, 1, 2, 2, 4), num_res_blocks=2, resolution=512)
    with torch.device(device):
        model = ChameleonForConditionalGeneration._from_config(config, dtype=dtype).eval()
        vqgan = ChameleonVQGANDecoder(vq).to(dtype=torch.float32).eval()
    model.model.vqmodel = None  # the image encoder: never used for generation
    return AnoleAdapter(model, tokenizer=_DigitTokenizer(), vqgan=vqgan)


def build_emu3(tiny: bool, device: torch.device, dtype: torch.dtype) -> Any:
    from transformers import Emu3Config, Emu3ForConditionalGeneration, Emu3TextConfig

    from gsd_lab.models.emu3 import DEFAULT_IMAGE_AREA, Emu3Adapter

    if tiny:
        text = Emu3TextConfig(vocab_size=1200, **TEST_CONFIG_DIMS, max_position_embeddings=512,
                              bos_token_id=1, eos_token_id=2, pad_token_id=0)
        vq = {"codebook_size": 20, "temporal_downsample_factor": 1, "base_channels": 32,
              "channel_multiplier": [1, 2, 1], "hidden_size": 32, "attn_resolutions": []}
        config = Emu3Config(text_config=text, vq_config=vq,
                            vocabulary_map=_emu3_names(1200, 20))
        area = 256
    else:
        base = Emu3Config(vocabulary_map={})
        config = Emu3Config(text_config=base.text_config.to_dict(),
                            vq_config=base.vq_config.to_dict(),
                            vocabulary_map=_emu3_names(base.text_config.vocab_size, 32768))
        config.text_config.bos_token_id, config.text_config.eos_token_id = 1, 2
        config.text_config.pad_token_id = 0
        area = DEFAULT_IMAGE_AREA
    with torch.device(device):
        model = Emu3ForConditionalGeneration._from_config(config, dtype=dtype).eval()
    return Emu3Adapter(model, image_area=area, tokenizer=_DigitTokenizer(),
                       negative_prompt="blurry")


def measure(adapter: Any, *, window: int, context: int, repeats: int, decode_tokens: int,
            seed: int) -> dict[str, Any]:
    device = adapter.device
    generator = torch.Generator(device=device).manual_seed(seed)
    prompt = adapter.prompt_ids("a lighthouse on a rocky coast at sunset").to(device)
    context = min(context, adapter.num_image_tokens)
    tokens = adapter.random_tokens(torch.arange(context + window, device=device), generator)
    adapter.start(prompt)
    adapter.forward(torch.cat([prompt, tokens[:context]]), num_rows=1)
    forward_ms, model_ms = shapes.window_medians(adapter, tokens[context:], window, repeats,
                                                 device)
    decode = {}
    for name, method in {
        "sjd": DecodingMethod("sjd", window=window),
        "gsd": DecodingMethod("gsd", window=window, acceptance=ClusterAcceptance(group_size=25)),
    }.items():
        seconds, result = shapes.timed(lambda m=method: generate(
            adapter, prompt, m.for_model("family"), num_tokens=decode_tokens,
            generator=torch.Generator(device=device).manual_seed(seed + 1)), device)
        decode[name] = {"nfe": result.nfe, "tokens": int(result.tokens.numel()),
                        "wall_s": round(seconds, 3)}
    image_tokens = adapter.random_tokens(torch.arange(adapter.num_image_tokens, device=device),
                                         generator)
    seconds, pixels = shapes.timed(lambda: adapter.decode_images(image_tokens), device)
    return {
        "latent": [adapter.layout.height, adapter.layout.width],
        "num_image_tokens": adapter.num_image_tokens,
        "prompt_tokens": int(prompt.numel()),
        "context_tokens": int(prompt.numel()) + context,
        "cfg_batch": 2 if adapter.uses_cfg else 1,
        "parameters": sum(p.numel() for p in adapter.model.parameters()),
        "forward_ms": {str(k): v for k, v in forward_ms.items()},
        "model_ms": {str(k): v for k, v in model_ms.items()},
        "decode": decode,
        "pixels": {"shape": list(pixels.shape), "dtype": str(pixels.dtype),
                   "ms": round(1e3 * seconds, 2)},
    }


def run(*, families: tuple[str, ...], tiny: bool, window: int, context: int, repeats: int,
        decode_tokens: int, seed: int) -> dict[str, Any]:
    device, dtype = shapes.device_and_dtype(tiny)
    record: dict[str, Any] = {
        **shapes.run_header("gpu_family_shapes", tiny, device, gpu_mode="real-size-gpu"),
        "weights": "random (shapes and costs only; no released weights)",
    }
    builders = {"anole": build_anole, "emu3": build_emu3}
    for family in families:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            seconds, adapter = shapes.timed(lambda f=family: builders[f](tiny, device, dtype), device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        result = measure(adapter, window=window, context=context, repeats=repeats,
                         decode_tokens=decode_tokens, seed=seed)
        result["build_s"] = round(seconds, 2)
        if device.type == "cuda":
            result["peak_gib"] = shapes.peak_gib(device)
        record[family] = result
        del adapter
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=[*FAMILIES, "all"], default="all")
    parser.add_argument("--tiny", action="store_true", help="tiny configurations on the CPU")
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--context", type=int, default=None,
                        help="image tokens before the timed forwards (default: 1000; tiny: 8)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--decode-tokens", type=int, default=None,
                        help="tokens per decode (default 256; tiny: 16)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for flag, value in (("--window", args.window), ("--repeats", args.repeats)):
        if value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    if not args.tiny and not torch.cuda.is_available():
        parser.error("no CUDA device: run on a GPU machine, or pass --tiny for the CPU smoke run")
    record = run(
        families=FAMILIES if args.family == "all" else (args.family,),
        tiny=args.tiny,
        window=args.window,
        context=args.context if args.context is not None else (8 if args.tiny else 1000),
        repeats=args.repeats,
        decode_tokens=args.decode_tokens or (16 if args.tiny else 256),
        seed=args.seed,
    )
    print(json.dumps(record))
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
