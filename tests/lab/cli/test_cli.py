"""``python -m gsd_lab``: generate (--json keys, image output, errors) and figures --quick
(PNG + SVG + JSON sidecars with provenance, results.md), on the tiny random model and, where
its weights are present, the stand-in."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from gsd_lab.cli import main
from gsd_lab.models.batched import default_batch_size

JSON_KEYS = {"nfe", "acceptance_rate", "wall_seconds", "tokens", "model", "method", "num_tokens"}


def _standin_available() -> bool:
    from gsd_lab.standin.loading import WEIGHTS_DIR

    return (WEIGHTS_DIR / "ar_model.safetensors").is_file() and (WEIGHTS_DIR / "classifier.safetensors").is_file()


def run_json(capsys, *args: str) -> dict:
    assert main(["generate", *args, "--json", "--threads", "1"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("method_args", [["--method", "ar"], ["--method", "sjd"],
                                         ["--method", "gsd", "--group-size", "10"],
                                         ["--method", "gsd", "--clusters", "rank-binned", "--residual", "cluster"],
                                         ["--method", "sjd", "--draft", "maximal"],
                                         ["--method", "sjd", "--verifier", "block"],
                                         ["--method", "gsd", "--group-size", "10", "--draft", "gumbel"]])
def test_generate_json_tiny(capsys, method_args):
    report = run_json(capsys, "--model", "tiny-random", "--class", "1", "--seed", "3", *method_args)
    assert JSON_KEYS <= set(report)
    assert len(report["tokens"]) == report["num_tokens"] == 64
    if report["method"] == "ar":
        assert report["nfe"] == 64 and report["acceptance_rate"] is None
    else:
        assert 1 <= report["nfe"] < 64 and 0 <= report["acceptance_rate"] <= 1
    again = run_json(capsys, "--model", "tiny-random", "--class", "1", "--seed", "3", *method_args)
    assert again["tokens"] == report["tokens"]  # seeded
    assert report["draft"] == (method_args[-1] if "--draft" in method_args else "independent")


def test_generate_text_and_image(capsys, tmp_path):
    out = tmp_path / "img.png"
    assert main(["generate", "--model", "tiny-random", "--method", "sjd", "--class", "0", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "nfe" in text and "acceptance rate" in text and "wall" in text
    from PIL import Image

    assert Image.open(out).size == (32, 32)


def test_generate_errors(capsys):
    """Usage errors exit 2 through argparse (usage line, the flag named); more in test_cli_checks.py."""
    for argv, message in ((["--model", "lumina-mgpt-7b-768", "--prompt", "a cat"], "--weights"),
                          (["--model", "tiny-random", "--method", "sjd", "--residual", "cluster"], "rank-binned"),
                          (["--model", "tiny-random", "--class", "9"], "--class '9': tiny-random has classes"),
                          (["--model", "tiny-random", "--method", "sjd", "--verifier", "block", "--draft",
                            "maximal"], "verifier 'block' is lossless SJD only")):
        with pytest.raises(SystemExit) as caught:
            main(["generate", *argv])
        assert caught.value.code == 2
        err = capsys.readouterr().err
        assert message in err and err.startswith("usage:") and "Traceback" not in err


def test_cpu_models_keep_torchs_threads_unless_told(capsys):
    """No ``--threads``: torch's thread count is left as it is (every core by default; the CPU
    models used to be forced to one); ``--threads 1`` sets it."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        argv = ["generate", "--model", "tiny-random", "--method", "ar", "--class", "0", "--json"]
        assert main(argv) == 0 and torch.get_num_threads() == 2
        assert main([*argv, "--threads", "1"]) == 0 and torch.get_num_threads() == 1
        capsys.readouterr()
    finally:
        torch.set_num_threads(before)


def test_figures_quick_writes_sidecars(tmp_path):
    """On the stand-in when its weights are present (quality proxies included), else tiny-random."""
    model = "standin" if _standin_available() else "tiny-random"
    out = tmp_path / "figs"
    cmd = [sys.executable, "-m", "gsd_lab", "figures", "--model", model, "--quick", "--out", str(out),
           "--no-progress", "--threads", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    sidecars = sorted(out.glob("*.json"))
    names = {p.stem for p in sidecars} - {"results"}
    assert {"table1_speed_quality", "top1_probability_histograms", "fig6_tv_flat_vs_peaked"} <= names
    for name in names:
        assert (out / f"{name}.png").stat().st_size > 0 and (out / f"{name}.svg").stat().st_size > 0
        record = json.loads((out / f"{name}.json").read_text())
        assert record["git"]["commit"] and record["versions"]["torch"] == torch.__version__
        assert record["seeds"]["generation_seeds"] == [0] and record["model"] == model
        assert "sizes" in record["config"]
    results = (out / "results.md").read_text()
    assert "Table 1 analogue" in results and "| AR |" in results
    # Batched by default on the CPU, and the wall columns say what they then are.
    batch = json.loads((out / "results.json").read_text())["config"]["batch_size"]
    assert batch == default_batch_size("cpu") > 1
    assert f"decoded {batch} images of one configuration per forward" in results
    # The frontier, quick-sized: GSD and SJD shared with the tables, one relaxation decoded.
    assert "frontier_nfe_vs_distortion" in names and "The frontier: NFE against TV and W1" in results
    front = json.loads((out / "results.json").read_text())["tables"]["frontier"]
    assert front["seeds"] == [0] and front["shared_seeds"] == [0]
    (tv_row,) = [r for r in front["matched"] if r["measure"] == "TV"]
    assert tv_row["reference"] == "GSD (G=25)" and tv_row["n"] == 2
    assert {"difference", "se", "n", "verdict"} <= set(tv_row)
    if model == "standin":
        assert "fig10_nfe_vs_quality" in names and "condition_score" in results
    # Every claim by id, its numbers as numbers: what claims.evaluate gives on the stored tables.
    from gsd_lab.experiments import claims

    stored = json.loads((out / "results.json").read_text())
    assert sorted(stored["claims"]) == sorted(claims.IDS)  # results.json sorts its keys
    assert stored["claims"] == json.loads(json.dumps(claims.as_json(claims.of_results(stored))))
    table2 = stored["claims"]["table2_d_nfe_over_sjd"]  # quick sizes: Table 2 at G = 25
    assert table2["kind"] == "ratio" and table2["n"] == 2 and isinstance(table2["value"], float)
    assert table2["low"] <= table2["value"] <= table2["high"]
    assert stored["claims"]["gsd_speedup_over_ar"]["outcome"] == "not run"  # no G = 50 row
    assert "## Claims, by id" in results and "| table2_d_nfe_over_sjd |" in results
    # Where the job's time went: every step timed, together within the run's wall time.
    stages = stored["stage_seconds"]
    steps = {"decoding", "tables", "frontier", "top-1", "replacement", "toy", "saving"}
    assert set(stages) == steps
    assert all(v >= 0 for v in stages.values()) and sum(stages.values()) <= stored["seconds"]


@pytest.mark.skipif(not _standin_available(), reason="stand-in weights not in gsd_lab/standin/weights yet")
def test_generate_json_standin(capsys):
    report = run_json(capsys, "--method", "gsd", "--group-size", "25", "--class", "0", "--seed", "0")
    assert JSON_KEYS <= set(report) and report["model"] == "standin"
    assert report["num_tokens"] == 256 and 1 <= report["nfe"] < 256
    assert all(0 <= t < 8192 for t in report["tokens"])


def test_generate_lumina_layout_on_a_tiny_checkpoint(capsys, tmp_path):
    """The Lumina-mGPT path of the CLI (prompt template, row ends, VQGAN) on a tiny random
    checkpoint in the release layout, at the 512 layout (32 x 33 = 1056 tokens)."""
    from gsd_lab.testing.tiny_checkpoints import write_tiny_lumina_checkpoint, write_tiny_vqgan

    weights = write_tiny_lumina_checkpoint(tmp_path / "w", num_layers=1, num_shards=1)
    vqgan = write_tiny_vqgan(tmp_path / "v", n_embed=64)
    out = tmp_path / "lumina.png"
    report = run_json(capsys, "--model", "lumina-mgpt-7b-512", "--weights", str(weights), "--vqgan", str(vqgan),
                      "--prompt", "a red cube", "--method", "gsd", "--group-size", "10", "--device", "cpu",
                      "--out", str(out))
    assert report["num_tokens"] == 32 * 33 and report["nfe"] < report["num_tokens"]
    assert out.is_file()
