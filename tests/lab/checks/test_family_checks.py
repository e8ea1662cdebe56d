"""``python -m gsd_lab check-weights --model anole-7b|emu3-gen`` on tiny checkpoints of each
family and broken copies of them: every item passes, a config that is not the stored tensors'
architecture fails it, non-finite logits fail generation, the CPU limit skips it, another
loader error fails it."""

from __future__ import annotations

import importlib
import json
import shutil

import pytest

pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")


def test_check_weights_passes_and_catches_a_wrong_checkpoint(family_folder, tmp_path, check):
    code, verdicts = check(str(family_folder.folder), *family_folder.flags, "--out",
                           str(tmp_path / "rows.png"))
    assert code == 0 and [v["status"] for v in verdicts.values()] == ["ok"] * 6
    assert (tmp_path / "rows.png").is_file()
    broken = shutil.copytree(family_folder.folder, tmp_path / "broken")
    config = json.loads((broken / "config.json").read_text())
    text = config.get("text_config", config)
    text["hidden_size"] = 2 * text["hidden_size"]  # no longer the stored tensors' architecture
    (broken / "config.json").write_text(json.dumps(config))
    code, verdicts = check(str(broken), *family_folder.flags)
    assert code == 1
    assert verdicts["architecture"]["status"] == "FAIL"
    assert verdicts["generation"]["status"] == "skip"


def test_check_weights_non_finite_logits_is_a_fail_verdict(family_folder, check, monkeypatch):
    """``generate`` raises FloatingPointError on non-finite logits: a FAIL verdict, no traceback
    (every family runs its items through ``checks.items.run_items``)."""
    import gsd_lab.decode.loop as loop

    def non_finite(*args, **kwargs):
        raise FloatingPointError("non-finite logits at position 0")

    monkeypatch.setattr(loop, "generate", non_finite)
    code, verdicts = check(str(family_folder.folder), *family_folder.flags)
    assert code == 1
    assert verdicts["generation"]["status"] == "FAIL" and verdicts["image"]["status"] == "skip"


def test_a_model_above_the_cpu_limit_skips_generation(family_folder, check, monkeypatch):
    """The loader's refusal on the CPU (``TooLargeForCPU``, the limit its loader reads at call
    time) is the generation item's SKIP naming --force-cpu; the image is skipped in turn."""
    monkeypatch.setattr(importlib.import_module(family_folder.limit_module),
                        "CPU_PARAMETER_LIMIT", 0)
    code, verdicts = check(str(family_folder.folder), *family_folder.flags, "--rows", "1")
    assert code == 0 and verdicts["generation"]["status"] == "skip"
    assert "--force-cpu" in verdicts["generation"]["detail"]
    assert verdicts["image"] == {"item": "image", "status": "skip", "detail": "needs generation"}


def test_another_loader_error_naming_force_cpu_fails_generation(family_folder, check,
                                                                monkeypatch):
    """A ValueError that only mentions force_cpu (a path) is no CPU refusal: a FAIL, exit 1."""
    import gsd_lab.models as models

    def broken_load(*args, **kwargs):
        raise ValueError("cannot read /data/force_cpu_run/vqgan.ckpt")

    monkeypatch.setattr(models, "load_model", broken_load)
    code, verdicts = check(str(family_folder.folder), *family_folder.flags, "--rows", "1")
    assert code == 1 and verdicts["generation"]["status"] == "FAIL"
    assert "/data/force_cpu_run/vqgan.ckpt" in verdicts["generation"]["detail"]
    assert verdicts["image"]["status"] == "skip"


def test_anole_q_k_norms_are_checked_as_the_loader_expands_them(family_folder, tmp_path, check):
    """Anole's stock [heads, head_dim] q/k-norms under Lumina's per-rank architectures: the shapes
    match stock Chameleon as stored, but ``load_anole`` would expand them as Lumina's layout and
    refuse; the architecture item fails naming that layout."""
    if family_folder.name != "anole-7b":
        pytest.skip("q/k-norm layouts are Chameleon's (Anole)")
    from gsd_lab.models.lumina_checkpoint import LUMINA_ARCHITECTURE

    broken = shutil.copytree(family_folder.folder, tmp_path / "lumina-architectures")
    config = json.loads((broken / "config.json").read_text())
    config["architectures"] = [LUMINA_ARCHITECTURE]
    (broken / "config.json").write_text(json.dumps(config))
    code, verdicts = check(str(broken), *family_folder.flags)
    assert code == 1 and verdicts["architecture"]["status"] == "FAIL"
    assert "norm" in verdicts["architecture"]["detail"]
    assert verdicts["generation"]["status"] == "skip"
