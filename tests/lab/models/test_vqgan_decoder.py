"""The Chameleon VQGAN decoder: taming key layout, loading from vqgan.yaml + vqgan.ckpt, decoding."""

from __future__ import annotations

import pytest
import torch
import yaml

from gsd_lab.models.chameleon_vqgan import (
    ChameleonVQGANDecoder,
    VQGANConfig,
    find_vqgan_files,
    load_chameleon_vqgan,
)
from gsd_lab.testing.tiny_checkpoints import write_tiny_vqgan


@pytest.fixture(scope="module")
def tiny_vqgan_dir(tmp_path_factory):
    return write_tiny_vqgan(tmp_path_factory.mktemp("vqgan"), ch_mult=(1, 2, 2), num_res_blocks=1)


def test_chameleon_config_parameter_count_matches_reference():
    """The real Chameleon config gives the decode-path size in lumina-mgpt.md section 7:
    decoder 39,294,851 + codebook 2,097,152 + post_quant_conv 65,792 parameters."""
    with torch.device("meta"):
        model = ChameleonVQGANDecoder(VQGANConfig())

    def count(module):
        return sum(p.numel() for p in module.parameters())

    assert count(model.decoder) == 39_294_851
    assert count(model.quantize) == 2_097_152
    assert count(model.post_quant_conv) == 65_792
    assert VQGANConfig().downsample_factor == 16


def test_yaml_config_is_read(tiny_vqgan_dir):
    config = VQGANConfig.from_yaml(tiny_vqgan_dir / "vqgan.yaml")
    assert config.ch_mult == (1, 2, 2) and config.n_embed == 64 and config.embed_dim == 8
    assert config.num_res_blocks == 1 and config.attn_resolutions == ()


def test_matches_taming_decoder_numerically(tiny_vqgan_dir):
    """Oracle: taming-transformers' own Decoder and codebook lookup on the same checkpoint."""
    taming_model = pytest.importorskip("taming.modules.diffusionmodules.model")
    config = VQGANConfig.from_yaml(tiny_vqgan_dir / "vqgan.yaml")
    dd = yaml.safe_load((tiny_vqgan_dir / "vqgan.yaml").read_text())["model"]["params"]["ddconfig"]
    reference = taming_model.Decoder(**dd).eval()
    state = torch.load(tiny_vqgan_dir / "vqgan.ckpt", weights_only=True)["state_dict"]
    reference.load_state_dict(
        {k[len("decoder.") :]: v for k, v in state.items() if k.startswith("decoder.")}
    )
    post_quant = torch.nn.Conv2d(config.embed_dim, config.z_channels, 1)
    post_quant.load_state_dict(
        {k.split(".", 1)[1]: v for k, v in state.items() if k.startswith("post_quant_conv.")}
    )

    ours = load_chameleon_vqgan(tiny_vqgan_dir)
    indices = torch.randint(
        0, config.n_embed, (2, 3, 5), generator=torch.Generator().manual_seed(0)
    )
    z_q = state["quantize.embedding.weight"][indices].permute(
        0, 3, 1, 2
    )  # taming get_codebook_entry
    with torch.no_grad():
        expected = reference(post_quant(z_q))
        got = ours.decoder(
            ours.post_quant_conv(ours.quantize.embedding(indices).permute(0, 3, 1, 2))
        )
    assert got.shape == (2, 3, 3 * 4, 5 * 4)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        ours.decode_indices(indices), expected.clamp(-1, 1), rtol=1e-5, atol=1e-5
    )


def test_decoding_shapes_determinism_and_context(tiny_vqgan_dir):
    model = load_chameleon_vqgan(tiny_vqgan_dir)
    indices = torch.randint(0, 64, (1, 4, 4), generator=torch.Generator().manual_seed(1))
    images = model.decode_to_uint8(indices)
    assert images.shape == (1, 16, 16, 3) and images.dtype == torch.uint8
    assert torch.equal(images, model.decode_to_uint8(indices))
    # Convolutions and the mid-block attention make every pixel depend on neighbouring codes:
    # changing one code changes pixels beyond its own 4x4 patch.
    changed = indices.clone()
    changed[0, 0, 0] = (changed[0, 0, 0] + 1) % 64
    diff = (model.decode_indices(changed) - model.decode_indices(indices)).abs().sum(1)[0]
    assert diff[:4, :4].max() > 0
    assert diff[8:, 8:].max() > 0  # far corner: reached only through attention / receptive field


def test_missing_and_unexpected_keys_raise(tmp_path):
    folder = write_tiny_vqgan(tmp_path / "a")
    ckpt = torch.load(folder / "vqgan.ckpt", weights_only=True)
    del ckpt["state_dict"]["decoder.mid.attn_1.q.weight"]
    torch.save(ckpt, folder / "vqgan.ckpt")
    with pytest.raises(ValueError, match="missing .*decoder.mid.attn_1.q.weight"):
        load_chameleon_vqgan(folder)

    folder = write_tiny_vqgan(tmp_path / "b")
    ckpt = torch.load(folder / "vqgan.ckpt", weights_only=True)
    ckpt["state_dict"]["decoder.up.0.block.9.conv1.weight"] = torch.zeros(1)
    torch.save(ckpt, folder / "vqgan.ckpt")
    with pytest.raises(ValueError, match="unexpected .*decoder.up.0.block.9"):
        load_chameleon_vqgan(folder)

    folder = write_tiny_vqgan(tmp_path / "c")
    ckpt = torch.load(folder / "vqgan.ckpt", weights_only=True)
    ckpt["state_dict"]["quantize.embedding.weight"] = torch.zeros(10, 8)
    torch.save(ckpt, folder / "vqgan.ckpt")
    with pytest.raises(ValueError, match="shape mismatch"):
        load_chameleon_vqgan(folder)


def test_file_discovery_and_bad_input(tmp_path, tiny_vqgan_dir):
    nested = tmp_path / "ckpts" / "chameleon" / "tokenizer"
    write_tiny_vqgan(nested)
    assert find_vqgan_files(tmp_path) == (nested / "vqgan.yaml", nested / "vqgan.ckpt")
    with pytest.raises(FileNotFoundError, match="vqgan.ckpt"):
        find_vqgan_files(tmp_path / "nothing")
    model = load_chameleon_vqgan(tiny_vqgan_dir)
    with pytest.raises(ValueError, match="indices"):
        model.decode_indices(torch.zeros(4, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 64\)"):
        model.decode_indices(torch.full((1, 2, 2), 64))
