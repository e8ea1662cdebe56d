"""``python -m gsd_lab`` fails fast and clearly: every bad flag is refused before any model
loads (the loaders are replaced by ones that fail the test), with argparse's usage line, a
message naming the flag, exit status 2 and no traceback; an evaluation folder holding another
run is refused before loading too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gsd_lab.cli import main
from gsd_lab.cli.common import MODEL_CHOICES


def _never(*args, **kwargs):
    raise AssertionError("a model was loaded although the flags are bad")


@pytest.fixture
def no_model_load(monkeypatch):
    """Every model loader fails the test if called."""
    import gsd_lab.experiments.image_model as image_model
    import gsd_lab.models as models
    import gsd_lab.models.lumina_mgpt as lumina_mgpt
    import gsd_lab.standin.adapter as standin

    for module, name in ((image_model, "load_image_model"), (image_model, "tiny_random_model"),
                         (models, "load_model"), (standin, "load_standin"), (lumina_mgpt, "load_lumina_mgpt")):
        monkeypatch.setattr(module, name, _never)


def _usage_error(capsys, argv: list[str]) -> str:
    """Run main(argv), expect argparse's exit 2, return stderr."""
    threads = torch.get_num_threads()
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m gsd_lab") and "Traceback" not in err
    assert torch.get_num_threads() == threads  # --threads is applied only after every check
    return err


@pytest.fixture
def lumina_dir(tmp_path) -> Path:
    """A folder that resolves as Lumina-mGPT weights (only config.json and a tokenizer.json: never
    loaded here)."""
    folder = tmp_path / "lumina"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    return folder


GENERATE_CASES = {
    "group-size negative": (["--group-size", "-1"], "--group-size must be >= 2, got -1"),
    "gsd group-size 0 is SJD": (["--method", "gsd", "--group-size", "0"], "--group-size must be >= 2, got 0"),
    "gsd group-size 1 is SJD": (["--method", "gsd", "--group-size", "1"], "use --method sjd"),
    "window 0": (["--window", "0"], "--window must be >= 1, got 0"),
    "top-k 0": (["--top-k", "0"], "--top-k must be >= 1"),
    "threads -1": (["--threads", "-1"], "--threads must be >= 1, got -1"),
    "threads 0": (["--threads", "0"], "--threads must be >= 1, got 0"),
    "cfg nan": (["--cfg", "nan"], "--cfg must be a finite number"),
    "amplify 0": (["--amplify", "0"], "--amplify must be a finite number > 0"),
    "amplify with ar": (["--method", "ar", "--amplify", "2"], "--amplify applies to --method sjd or gsd"),
    "group-size with sjd": (["--method", "sjd", "--group-size", "10"], "--group-size applies to --method gsd only"),
    "clusters with ar": (["--method", "ar", "--clusters", "rank-binned"], "--clusters applies to --method gsd only"),
    "cluster residual, dynamic": (["--residual", "cluster"], "--residual cluster needs --clusters rank-binned"),
    "seed -1": (["--seed", "-1"], "--seed must be >= 0, got -1"),
    "device unknown": (["--device", "gpu"], "--device 'gpu' is not a device"),
    "prompt for the stand-in": (["--prompt", "a cat"], "--prompt is for text-prompted models"),
    "weights for tiny-random": (["--model", "tiny-random", "--weights", "."], "--weights does not apply"),
    "vqgan for the stand-in": (["--vqgan", "."], "--vqgan applies to the Lumina-mGPT models only"),
    "stand-in weights missing": (["--weights", "/nonexistent/folder"], "--weights /nonexistent/folder is not a folder"),
    "lumina without weights": (["--model", "lumina-mgpt-7b-768", "--prompt", "a cat"], "needs --weights DIR"),
    "out bad extension": (["--out", "image.xyz"], "--out image.xyz: unknown image extension"),
}


@pytest.mark.parametrize("argv, message", GENERATE_CASES.values(), ids=GENERATE_CASES.keys())
def test_generate_bad_flags_fail_before_loading(capsys, no_model_load, argv, message):
    assert message in _usage_error(capsys, ["generate", *argv])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda(capsys, no_model_load):
    err = _usage_error(capsys, ["generate", "--device", "cuda", "--model", "tiny-random"])
    assert "--device cuda: CUDA is not available" in err


def test_output_file_checks(capsys, no_model_load, tmp_path):
    assert "is a folder; give an image file name" in _usage_error(capsys, ["generate", "--out", str(tmp_path)])
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    err = _usage_error(capsys, ["generate", "--out", str(a_file / "sub" / "img.png")])
    assert f"{a_file} is a file, not a folder" in err
    if Path("/proc/self").is_dir():  # Linux: /proc refuses new files even to root
        assert "cannot write in /proc" in _usage_error(capsys, ["generate", "--out", "/proc/gsd-check.png"])
    assert not list(tmp_path.glob(".gsd-write-check-*"))  # the write probe cleans up


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes in read-only folders")
def test_output_folder_without_write_permission(capsys, no_model_load, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        assert "cannot write in" in _usage_error(capsys, ["generate", "--out", str(locked / "img.png")])
    finally:
        locked.chmod(0o700)


def test_lumina_flags_checked_without_loading(capsys, no_model_load, tmp_path, lumina_dir):
    lumina = ["generate", "--model", "lumina-mgpt-7b-512", "--weights", str(lumina_dir)]
    err = _usage_error(capsys, ["generate", "--model", "lumina-mgpt-7b-512", "--weights", str(tmp_path / "none"),
                                "--prompt", "a cat"])
    assert f"--weights {tmp_path / 'none'}: no Lumina-mGPT weights found" in err
    assert "--class is for the stand-in" in _usage_error(capsys, [*lumina, "--class", "1"])
    assert "non-empty text prompt" in _usage_error(capsys, [*lumina, "--prompt", " "])
    assert "--out needs pixels" in _usage_error(capsys, [*lumina, "--prompt", "a cat", "--out", "x.png"])
    err = _usage_error(capsys, [*lumina, "--prompt", "a cat", "--vqgan", str(tmp_path)])
    assert f"--vqgan {tmp_path}: no vqgan.yaml + vqgan.ckpt" in err
    assert "--clip" in _usage_error(capsys, [*lumina, "--prompt", "a cat", "--clip", str(tmp_path)])
    assert "--top-k must be >= 1" in _usage_error(capsys, [*lumina, "--prompt", "a cat", "--top-k", "0"])
    err = _usage_error(capsys, [*lumina, "--prompt", "a cat", "--tokenizer", str(tmp_path / "none")])
    assert "no tokenizer.json there" in err and "hf download Alpha-VLLM/Lumina-mGPT-7B-768" in err
    assert "--window" in _usage_error(capsys, [*lumina, "--prompt", "a cat", "--preset", "release", "--window", "16"])


def test_figures_and_evaluate_checks(capsys, no_model_load, tmp_path):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("0\n1\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("# only a comment\n")
    assert "this command writes a folder" in _usage_error(capsys, ["figures", "--out", str(a_file)])
    assert "--quick and --paper" in _usage_error(capsys, ["figures", "--quick", "--paper", "--out", str(tmp_path)])
    assert "prompt file not found" in _usage_error(capsys, ["figures", "--prompts", str(tmp_path / "no.txt")])
    assert "is a folder, not a prompt file" in _usage_error(capsys, ["figures", "--prompts", str(tmp_path)])
    binary = tmp_path / "prompts.bin"
    binary.write_bytes(b"\xff\xfe\x00cat")
    assert "is not UTF-8 text" in _usage_error(capsys, ["figures", "--prompts", str(binary)])
    evaluate = ["evaluate", "--model", "tiny-random", "--prompts", str(prompts)]
    assert "this command writes a folder" in _usage_error(capsys, [*evaluate, "--out", str(a_file)])
    assert "is a file, not a folder" in _usage_error(capsys, [*evaluate, "--out", str(a_file / "run")])
    err = _usage_error(capsys, ["evaluate", "--prompts", str(empty), "--out", str(tmp_path / "r")])
    assert f"--prompts {empty}: no prompts found" in err
    assert "--group-size must be >= 2" in _usage_error(capsys, [*evaluate, "--out", str(tmp_path / "r"),
                                                                "--group-size", "0"])
    assert "--seed must be >= 0" in _usage_error(capsys, [*evaluate, "--out", str(tmp_path / "r"), "--seed", "-2"])
    assert not (tmp_path / "r").exists()


def test_one_image_at_a_time_flags_refused_before_loading(capsys, no_model_load, tmp_path):
    # generate_batch refuses --verifier block and --candidates k > 1; evaluate's default batch
    # size is batched, so they need --batch-size 1, named before the model loads.
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("0\n")
    evaluate = ["evaluate", "--model", "tiny-random", "--prompts", str(prompts),
                "--out", str(tmp_path / "r"), "--method", "sjd"]
    for flags, named in ((["--verifier", "block"], "--verifier block"),
                         (["--candidates", "2"], "--candidates 2")):
        for batch in ([], ["--batch-size", "4"]):
            err = _usage_error(capsys, [*evaluate, *flags, *batch])
            assert named in err and "--batch-size 1" in err
        with pytest.raises(AssertionError, match="a model was loaded"):  # the checks pass
            main([*evaluate, *flags, "--batch-size", "1"])
    err = _usage_error(capsys, [*evaluate, "--candidates", "2", "--batch-size", "1", "--runner", "static"])
    assert "--candidates 2" in err and "--runner eager" in err


def test_figures_paper_refuses_workers(capsys, no_model_load, tmp_path):
    err = _usage_error(capsys, ["figures", "--paper", "--workers", "2", "--out", str(tmp_path)])
    assert "--workers does not apply to --paper" in err


@pytest.mark.parametrize("paper", [True, False])
def test_figures_threads_one_only_when_not_streamed(monkeypatch, tmp_path, paper):
    # The streamed --paper run has no workers: it keeps torch's thread count; the other runs
    # decode on one thread (gsd_lab.workers), this process's own decodes too.
    import types

    import gsd_lab.cli.figures as cli_figures
    import gsd_lab.paper as figures

    seen = []
    model = types.SimpleNamespace(adapter=types.SimpleNamespace(device="cpu"))
    monkeypatch.setattr(cli_figures, "load_model", lambda args: model)

    def run_figures(out, **kwargs):
        seen.append(torch.get_num_threads())
        return {"figures": [], "results": "results.md", "seconds": 0.0}

    monkeypatch.setattr(figures, "run_figures", run_figures)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        mode = ["--paper", "--device", "cpu"] if paper else ["--quick"]
        assert main(["figures", "--model", "tiny-random", *mode, "--out", str(tmp_path)]) == 0
    finally:
        torch.set_num_threads(before)
    assert seen == [2 if paper else 1]


def test_family_check_weights_refuses_lumina_only_flags(capsys, tmp_path):
    """Flags that do not apply to the family are usage errors, never ignored: --clip and
    --resolution for Anole and Emu3, --vqgan for Emu3 (its own VQ-VAE), --vqgan, --clip and
    --resolution for a Janus folder."""
    for model in ("anole-7b", "emu3-gen"):
        for flags in (["--clip", str(tmp_path)], ["--resolution", "512"]):
            argv = ["check-weights", str(tmp_path), "--model", model, *flags]
            err = _usage_error(capsys, argv)
            assert f"{flags[0]} does not apply to --model {model}" in err
    err = _usage_error(capsys, ["check-weights", str(tmp_path), "--model", "emu3-gen",
                                "--vqgan", str(tmp_path)])
    assert "--vqgan does not apply to emu3-gen" in err
    janus = tmp_path / "janus"
    janus.mkdir()
    (janus / "config.json").write_text(json.dumps({"model_type": "janus"}))
    for flags in (["--vqgan", str(tmp_path)], ["--clip", str(tmp_path)], ["--resolution", "512"]):
        err = _usage_error(capsys, ["check-weights", str(janus), *flags])
        assert f"{flags[0]} does not apply to a Janus checkpoint" in err


def test_check_weights_families_are_the_cli_choices(capsys, monkeypatch, tmp_path):
    """``--model``'s families are those ``checks.families`` checks; a family added to the CLI's
    choices alone is a usage error, never Lumina-mGPT's checks."""
    import gsd_lab.cli.common as common
    from gsd_lab.checks.families import MODEL_TYPES

    assert common.FAMILY_CHOICES == tuple(MODEL_TYPES)
    monkeypatch.setattr(common, "FAMILY_CHOICES", (*common.FAMILY_CHOICES, "new-family-7b"))
    err = _usage_error(capsys, ["check-weights", str(tmp_path), "--model", "new-family-7b"])
    assert "check-weights has no checks for --model new-family-7b" in err


def test_bad_flag_in_a_subprocess_exits_2_without_traceback():
    done = subprocess.run([sys.executable, "-m", "gsd_lab", "generate", "--group-size", "-1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert "Traceback" not in done.stderr and "--group-size must be >= 2, got -1" in done.stderr


def test_evaluate_refuses_another_run_before_loading(capsys, monkeypatch, tmp_path):
    """An SJD run, then GSD G=50 into the same --out: refused (before loading) naming the
    method; the prompt file reordered: refused naming the prompt; the same run again: resumed."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("0\n1\n")
    out = tmp_path / "run"
    base = ["evaluate", "--model", "tiny-random", "--prompts", str(prompts), "--out", str(out), "--no-progress",
            "--no-images", "--threads", "1"]
    assert main([*base, "--method", "sjd"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["complete"] and first["finished"] == 2
    rows = (out / "results.jsonl").read_text()

    import gsd_lab.experiments.image_model as image_model

    monkeypatch.setattr(image_model, "load_image_model", _never)
    err = _usage_error(capsys, [*base, "--method", "gsd", "--group-size", "50"])
    assert "decoding.method.kind: \"sjd\" in the existing run, \"gsd\" now" in err and "new --out" in err
    assert 'decoding.method.acceptance.group_size: "(absent)" in the existing run, 50 now' in err
    assert "decoding.top_k" not in err  # only what differs is named
    assert "decoding.top_k: null in the existing run, 5 now" in _usage_error(capsys, [*base, "--method", "sjd",
                                                                                      "--top-k", "5"])
    prompts.write_text("1\n0\n")
    err = _usage_error(capsys, [*base, "--method", "sjd"])
    assert "reordered" in err and "prompt 0 is '1' now, '0' in the existing run" in err
    assert (out / "results.jsonl").read_text() == rows  # nothing was merged over the first run

    monkeypatch.undo()
    prompts.write_text("0\n1\n")
    assert main([*base, "--method", "sjd"]) == 0
    assert json.loads(capsys.readouterr().out)["complete"]


def test_model_choices_match_the_registry():
    from gsd_lab.experiments.image_model import TINY_RANDOM
    from gsd_lab.models import MODEL_NAMES

    assert MODEL_CHOICES == MODEL_NAMES + (TINY_RANDOM,)


def test_models_and_standin_packages_have_no_cycle():
    """The stand-in builds on gsd_lab.models; nothing in gsd_lab.models imports gsd_lab.standin."""
    import ast
    from pathlib import Path

    import gsd_lab.models

    for path in Path(gsd_lab.models.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                target = "." * node.level + (node.module or "")
                assert "standin" not in target, f"{path.name} imports {target}"
