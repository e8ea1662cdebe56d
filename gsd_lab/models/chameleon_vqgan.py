"""The Chameleon VQGAN image decoder (taming-transformers layout), for Lumina-mGPT image tokens.

Stock ``transformers`` ships only the Chameleon VQ *encoder*, so this module re-implements the
decode path of taming's ``VQModel`` (Esser et al. 2021) with the same parameter names, so the
user's ``vqgan.ckpt`` loads directly:

    indices [B, h, w] -> codebook rows z_q [B, embed_dim, h, w] (``quantize.embedding``)
    -> ``post_quant_conv`` (1x1, embed_dim -> z_channels) -> ``decoder`` -> pixels in [-1, 1]

Decoder (taming ``Decoder``): conv_in; mid = ResnetBlock, single-head AttnBlock, ResnetBlock;
then for each level from coarsest to finest ``num_res_blocks + 1`` ResnetBlocks (plus AttnBlocks
at ``attn_resolutions``) and a nearest x2 upsample + 3x3 conv except at level 0; GroupNorm(32,
eps 1e-6), swish, conv_out. Chameleon: embed_dim 256, 8192 codes, ch 128, ch_mult [1,1,2,2,4],
z_channels 256, 2 res blocks, attention only in the mid block; x16 upsampling.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

logger = logging.getLogger(__name__)

DECODE_PREFIXES = ("decoder.", "post_quant_conv.", "quantize.embedding.")


@dataclass(frozen=True)
class VQGANConfig:
    """The decode-relevant part of a taming ``vqgan.yaml`` (defaults: Chameleon's)."""

    embed_dim: int = 256
    n_embed: int = 8192
    z_channels: int = 256
    ch: int = 128
    ch_mult: tuple[int, ...] = (1, 1, 2, 2, 4)
    num_res_blocks: int = 2
    out_ch: int = 3
    resolution: int = 512
    attn_resolutions: tuple[int, ...] = field(default_factory=tuple)

    @property
    def downsample_factor(self) -> int:
        """Pixels per latent cell along each side: 2^(len(ch_mult) - 1)."""
        return 2 ** (len(self.ch_mult) - 1)

    @classmethod
    def from_yaml(cls, path: str | Path) -> VQGANConfig:
        """Read ``model.params.{embed_dim, n_embed, ddconfig}`` from a taming yaml file."""
        import yaml

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"VQGAN config not found: {path}")
        with path.open() as handle:
            data = yaml.safe_load(handle)
        params = data.get("model", data).get("params", data) if isinstance(data, dict) else None
        if not isinstance(params, dict) or "ddconfig" not in params:
            raise ValueError(f"{path} is not a taming VQModel yaml (no model.params.ddconfig)")
        dd = params["ddconfig"]
        if dd.get("double_z", False):
            raise ValueError(f"{path}: double_z=True is a KL autoencoder, not a VQGAN")
        return cls(
            embed_dim=int(params["embed_dim"]),
            n_embed=int(params["n_embed"]),
            z_channels=int(dd["z_channels"]),
            ch=int(dd["ch"]),
            ch_mult=tuple(int(m) for m in dd["ch_mult"]),
            num_res_blocks=int(dd["num_res_blocks"]),
            out_ch=int(dd.get("out_ch", 3)),
            resolution=int(dd.get("resolution", 512)),
            attn_resolutions=tuple(int(r) for r in dd.get("attn_resolutions", ()) or ()),
        )


def _group_norm(channels: int) -> nn.GroupNorm:
    if channels % 32:
        raise ValueError(
            f"taming's GroupNorm uses 32 groups; {channels} channels is not a multiple of 32"
        )
    return nn.GroupNorm(num_groups=32, num_channels=channels, eps=1e-6)


class ResnetBlock(nn.Module):
    """x + conv2(swish(norm2(conv1(swish(norm1(x)))))), with a 1x1 ``nin_shortcut`` on x when
    the channel count changes (taming, no timestep embedding)."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.norm1 = _group_norm(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm2 = _group_norm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.nin_shortcut = (
            nn.Conv2d(in_channels, out_channels, 1) if in_channels != out_channels else None
        )

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.nin_shortcut is None else self.nin_shortcut(x)) + h


class AttnBlock(nn.Module):
    """Single-head self-attention over the h*w cells: x + proj_out(softmax(q k^T / sqrt(C)) v)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = _group_norm(channels)
        self.q = nn.Conv2d(channels, channels, 1)
        self.k = nn.Conv2d(channels, channels, 1)
        self.v = nn.Conv2d(channels, channels, 1)
        self.proj_out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        y = self.norm(x)
        q, k, v = (
            conv(y).reshape(b, 1, c, h * w).transpose(-1, -2) for conv in (self.q, self.k, self.v)
        )
        out = F.scaled_dot_product_attention(q, k, v)  # scale 1/sqrt(C), one head
        return x + self.proj_out(out.transpose(-1, -2).reshape(b, c, h, w))


class Upsample(nn.Module):
    """Nearest-neighbour x2, then a 3x3 conv."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class _UpLevel(nn.Module):
    def __init__(
        self, blocks: list[ResnetBlock], attn: list[AttnBlock], upsample: Upsample | None
    ) -> None:
        super().__init__()
        self.block = nn.ModuleList(blocks)
        self.attn = nn.ModuleList(attn)
        if upsample is not None:
            self.upsample = upsample


class _Mid(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.block_1 = ResnetBlock(channels, channels)
        self.attn_1 = AttnBlock(channels)
        self.block_2 = ResnetBlock(channels, channels)


class Decoder(nn.Module):
    """taming ``Decoder``: z [B, z_channels, h, w] -> pixels [B, out_ch, h*f, w*f],
    f = 2^(levels-1)."""

    def __init__(self, config: VQGANConfig) -> None:
        super().__init__()
        levels = len(config.ch_mult)
        block_in = config.ch * config.ch_mult[-1]
        resolution = config.resolution // 2 ** (levels - 1)
        self.conv_in = nn.Conv2d(config.z_channels, block_in, 3, padding=1)
        self.mid = _Mid(block_in)
        ups: list[_UpLevel] = []
        for level in reversed(range(levels)):
            block_out = config.ch * config.ch_mult[level]
            blocks, attn = [], []
            for _ in range(config.num_res_blocks + 1):
                blocks.append(ResnetBlock(block_in, block_out))
                block_in = block_out
                if resolution in config.attn_resolutions:
                    attn.append(AttnBlock(block_in))
            upsample = Upsample(block_in) if level != 0 else None
            if level != 0:
                resolution *= 2
            ups.insert(0, _UpLevel(blocks, attn, upsample))
        self.up = nn.ModuleList(ups)
        self.norm_out = _group_norm(block_in)
        self.conv_out = nn.Conv2d(block_in, config.out_ch, 3, padding=1)

    def forward(self, z: Tensor) -> Tensor:
        h = self.conv_in(z)
        h = self.mid.block_2(self.mid.attn_1(self.mid.block_1(h)))
        for level in reversed(range(len(self.up))):
            up = self.up[level]
            for i, block in enumerate(up.block):
                h = block(h)
                if len(up.attn) > 0:
                    h = up.attn[i](h)
            if level != 0:
                h = up.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class _Quantize(nn.Module):
    def __init__(self, n_embed: int, embed_dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(n_embed, embed_dim)


class ChameleonVQGANDecoder(nn.Module):
    """Decode path of the Chameleon VQGAN: VQ indices [B, h, w] -> images.

    Parameter names follow taming's ``VQModel`` (``quantize.embedding``, ``post_quant_conv``,
    ``decoder.*``), so ``load_state_dict`` takes the filtered ``vqgan.ckpt`` state dict as is.
    """

    def __init__(self, config: VQGANConfig) -> None:
        super().__init__()
        self.config = config
        self.quantize = _Quantize(config.n_embed, config.embed_dim)
        self.post_quant_conv = nn.Conv2d(config.embed_dim, config.z_channels, 1)
        self.decoder = Decoder(config)

    @torch.inference_mode()
    def decode_indices(self, indices: Tensor) -> Tensor:
        """indices: int [B, h, w] in [0, n_embed). Returns float pixels
        [B, out_ch, h*f, w*f] in [-1, 1]."""
        if indices.ndim != 3:
            raise ValueError(f"indices must have shape [B, h, w], got {tuple(indices.shape)}")
        if indices.numel() and (
            int(indices.min()) < 0 or int(indices.max()) >= self.config.n_embed
        ):
            raise ValueError(f"VQ indices must lie in [0, {self.config.n_embed})")
        weight = self.quantize.embedding.weight
        z_q = self.quantize.embedding(indices.to(weight.device).long()).permute(0, 3, 1, 2)
        return self.decoder(self.post_quant_conv(z_q)).clamp(-1.0, 1.0)

    def decode_to_uint8(self, indices: Tensor) -> Tensor:
        """As ``decode_indices``, mapped to uint8 images [B, H, W, C] via round((x + 1) * 127.5)."""
        pixels = self.decode_indices(indices).float()
        return (
            ((pixels + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).cpu()
        )


# Where the release's code reads the VQGAN, relative to the folder given (a Lumina-mGPT checkout,
# its lumina_mgpt/ folder, Meta's Chameleon download, or the files' own folder): Lumina-mGPT's
# first release (commits d897672, 250b9cf: ./ckpts/image_tokenizer/chameleon/) and every later
# one and the GSD release (./ckpts/chameleon/tokenizer/, next to text_tokenizer.json); Meta's
# Chameleon download keeps them in tokenizer/ (also under data/).
VQGAN_LAYOUTS = (
    ".",
    "tokenizer",
    "chameleon/tokenizer",
    "ckpts/chameleon/tokenizer",
    "lumina_mgpt/ckpts/chameleon/tokenizer",
    "image_tokenizer/chameleon",
    "ckpts/image_tokenizer/chameleon",
    "lumina_mgpt/ckpts/image_tokenizer/chameleon",
    "data/tokenizer",
)


def find_vqgan_files(vqgan_dir: str | Path) -> tuple[Path, Path]:
    """Locate ``vqgan.yaml`` and ``vqgan.ckpt`` in ``vqgan_dir`` or one of the release layouts
    below it (``VQGAN_LAYOUTS``, first match wins)."""
    root = Path(vqgan_dir).expanduser()
    for layout in VQGAN_LAYOUTS:
        folder = root / layout
        if (folder / "vqgan.ckpt").is_file() and (folder / "vqgan.yaml").is_file():
            return folder / "vqgan.yaml", folder / "vqgan.ckpt"
    raise FileNotFoundError(
        f"no vqgan.yaml + vqgan.ckpt found in {root} (also looked in "
        + ", ".join(f"{layout}/" for layout in VQGAN_LAYOUTS[1:])
        + "). Get Meta's Chameleon tokenizer files (vqgan.yaml, vqgan.ckpt; licence accepted "
        "on Meta's Chameleon download page) and pass their folder as --vqgan DIR."
    )


def decoder_state_dict(checkpoint: dict) -> dict[str, Tensor]:
    """The decode-path tensors of a taming/Lightning checkpoint (``state_dict`` or a bare dict)."""
    state = checkpoint.get("state_dict", checkpoint)
    if not isinstance(state, dict):
        raise ValueError("VQGAN checkpoint holds no state_dict")
    return {k: v for k, v in state.items() if k.startswith(DECODE_PREFIXES)}


def load_chameleon_vqgan(
    vqgan_dir: str | Path, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> ChameleonVQGANDecoder:
    """Build the decoder from ``vqgan.yaml`` and load ``vqgan.ckpt``
    (``torch.load(weights_only=True)``).

    Only ``decoder.*``, ``post_quant_conv.*`` and ``quantize.embedding.*`` are loaded (the encoder
    and loss weights are dropped); a missing or unexpected decode-path key raises ``ValueError``.
    """
    yaml_path, ckpt_path = find_vqgan_files(vqgan_dir)
    config = VQGANConfig.from_yaml(yaml_path)
    try:
        checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as error:  # torch's reader of a truncated or foreign file
        raise ValueError(
            f"{ckpt_path} cannot be read as a torch checkpoint (an interrupted download?): {error}"
        ) from error
    state = decoder_state_dict(checkpoint)
    with torch.device("meta"):
        model = ChameleonVQGANDecoder(config)
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise ValueError(
            f"{ckpt_path} does not match {yaml_path}: missing "
            f"{missing[:8]}{'...' if len(missing) > 8 else ''} ({len(missing)}), unexpected "
            f"{unexpected[:8]}{'...' if len(unexpected) > 8 else ''} ({len(unexpected)})"
        )
    reference = model.state_dict()
    wrong = [
        f"{k}: {tuple(v.shape)} vs {tuple(reference[k].shape)}"
        for k, v in state.items()
        if v.shape != reference[k].shape
    ]
    if wrong:
        raise ValueError(
            f"{ckpt_path} does not match {yaml_path}: shape mismatch {wrong[:4]} ({len(wrong)})"
        )
    state = {k: v.to(device=device, dtype=dtype) for k, v in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    logger.info(
        "loaded the Chameleon VQGAN decoder from %s (encoder weights not loaded)", ckpt_path
    )
    return model.eval()
