"""``python -m gsd_lab check-weights`` on a tiny Janus-Pro checkpoint and broken copies of it:
every item passes (the size warned: not a release size), a mis-shaped tensor fails the
architecture, the CPU limit skips generation, another loader error fails it."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")


def test_check_weights_on_the_tiny_checkpoint(janus_weights, tmp_path, check):
    out = tmp_path / "rows.png"
    code, verdicts = check(str(janus_weights), "--rows", "1", "--out", str(out))
    assert list(verdicts) == ["files", "architecture", "generation cfg", "tokenizer",
                              "generation", "image"]
    assert code == 0 and verdicts["architecture"]["status"] == "warn"  # not a release size
    assert all(v["status"] == "ok" for k, v in verdicts.items() if k != "architecture")
    assert "CFG 5.0" in verdicts["generation cfg"]["detail"] and out.is_file()


def test_a_wrong_shape_fails_the_architecture(janus_weights, tmp_path, check):
    """A tensor of the wrong shape fails the architecture and skips what needs it."""
    from safetensors.torch import load_file, save_file

    broken = shutil.copytree(janus_weights, tmp_path / "broken")
    state = load_file(broken / "model.safetensors")
    name = "model.generation_head.vision_head.weight"
    state[name] = state[name][:-1].contiguous()
    save_file(state, str(broken / "model.safetensors"), metadata={"format": "pt"})
    code, verdicts = check(str(broken))
    assert code == 1
    architecture = verdicts["architecture"]
    assert architecture["status"] == "FAIL" and name in architecture["detail"]
    assert verdicts["generation"]["status"] == "skip"


def test_a_model_above_the_cpu_limit_skips_generation(janus_weights, check, monkeypatch):
    """The loader's refusal on the CPU (``TooLargeForCPU``) is the generation item's SKIP naming
    --force-cpu; the image, which needs it, is skipped in turn."""
    import gsd_lab.models.janus as janus

    monkeypatch.setattr(janus, "CPU_PARAMETER_LIMIT", 0)
    code, verdicts = check(str(janus_weights), "--rows", "1")
    assert code == 0 and verdicts["generation"]["status"] == "skip"
    assert "--force-cpu" in verdicts["generation"]["detail"]
    assert verdicts["image"] == {"item": "image", "status": "skip", "detail": "needs generation"}


def test_another_loader_error_naming_force_cpu_fails_generation(janus_weights, check, monkeypatch):
    """A ValueError that only mentions force_cpu (a path) is no CPU refusal: a FAIL, exit 1."""
    import gsd_lab.models.janus as janus

    def broken_load(*args, **kwargs):
        raise ValueError("cannot read /data/force_cpu_run/vqgan.ckpt")

    monkeypatch.setattr(janus, "load_janus", broken_load)
    code, verdicts = check(str(janus_weights), "--rows", "1")
    assert code == 1 and verdicts["generation"]["status"] == "FAIL"
    assert "/data/force_cpu_run/vqgan.ckpt" in verdicts["generation"]["detail"]
    assert verdicts["image"]["status"] == "skip"
