"""The Lumina-mGPT path end to end on a tiny checkpoint set in the release layouts (the session
fixture ``tiny_release_set``): every notebook with its parameters pointed at it, ``figures
--paper`` on a PartiPrompts-format file (both through ``scripts/gpu_reproduce.sh`` in its tiny
CPU mode), and ``evaluate`` under ``torchrun --nproc-per-node 2`` (gloo)."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_reproduce.sh"
MODEL = "lumina-mgpt-7b-512"  # 16 size cells -> 32 x 32 codes + 32 row ends = 1056 tokens
TOKENS = 32 * 33
PROMPTS = ["A red cat on a blue sky", '"a dog, with the sky"']
MODEL_NOTEBOOKS = ["01_tv_toy_examples", "02_top1_probability_histograms", "03_top100_replacement",
                   "04_speedup_and_quality"]

# About 130 s of CPU time for the whole module (notebooks ~60 s, figures ~35 s, torchrun ~15 s):
# "slow" still runs in CI; the timeout leaves room for a machine shared with other jobs.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def _write_prompts(path: Path) -> Path:
    """PartiPrompts' TSV layout: a header, one prompt per row, other columns ignored."""
    rows = [f"{PROMPTS[0]}\tAnimals\tSimple Detail\t", f"{PROMPTS[1]}\tAnimals\tBasic\tquoted"]
    path.write_text("Prompt\tCategory\tChallenge\tNote\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def _env(**extra: str) -> dict[str, str]:
    """This checkout first on the path (the notebooks' kernels inherit it), one thread each."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.update(OMP_NUM_THREADS="1", MPLBACKEND="Agg", PYTHON=sys.executable, **extra)
    return env


def _script(files, prompts: Path, **env: str) -> subprocess.CompletedProcess:
    args = ["bash", str(SCRIPT), str(files.weights), str(files.vqgan), str(files.clip), str(prompts)]
    return subprocess.run(args, capture_output=True, text=True, timeout=2000, env=_env(**env), cwd=REPO)


@pytest.fixture(scope="module")
def reproduce_run(tiny_release_set, tmp_path_factory):
    """scripts/gpu_reproduce.sh in its tiny CPU mode: notebooks, then figures --paper."""
    root = tmp_path_factory.mktemp("reproduce")
    prompts = _write_prompts(root / "small.tsv")
    out = root / "run"
    done = _script(tiny_release_set, prompts, GSD_SIZES="tiny", GSD_MODEL=MODEL, GSD_DEVICE="cpu",
                   GSD_OUT=str(out))
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return out


def _outputs(nb) -> tuple[str, list[str], list]:
    """(all stdout text, mime types of rich outputs, error outputs) of an executed notebook."""
    text, mimes, errors = [], [], []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream" and out.name == "stdout":
                text.append(out.text)
            elif out.output_type == "error":
                errors.append(out)
            elif "data" in out:
                mimes.extend(out.data)
    return "".join(text), mimes, errors


def _markdown_rows(nb) -> list[dict[str, str]]:
    """Rows of every markdown table a notebook displayed (``figure_io.markdown_table``), as dicts."""
    rows = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            lines = [ln for ln in out.get("data", {}).get("text/markdown", "").splitlines() if ln.startswith("|")]
            if len(lines) < 3:
                continue
            cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", ln.strip().strip("|"))]
                     for ln in lines]
            rows += [dict(zip(cells[0], row)) for row in cells[2:]]
    return rows


def test_every_notebook_runs_on_the_lumina_checkpoint(reproduce_run, tiny_release_set):
    names = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    assert len(names) == 5
    for name in names:
        nb = nbformat.read(reproduce_run / "notebooks" / f"{name}.ipynb", as_version=4)
        index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
        injected = nb.cells[index + 1]
        assert injected.metadata.get("tags") == ["injected-parameters"]
        assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code"), name
        text, mimes, errors = _outputs(nb)
        assert not errors, f"{name}: {errors[0].get('ename')}"
        if name not in MODEL_NOTEBOOKS:
            assert "model_name" not in injected.source  # a model-free notebook gets sizes only
            continue
        assert f'model_name = "{MODEL}"' in injected.source  # papermill's injected cell
        assert f'weights = "{tiny_release_set.weights}"' in injected.source
        assert 'device = "cpu"' in injected.source
        assert re.search(rf"model: {MODEL}; {TOKENS} tokens per image; \d+ image codes; cfg 3.0, top-k 2000; "
                         r"device cpu", text), name
        assert "image/png" in mimes
    rows = [(r["method"], r["nfe"], r["condition_score"]) for r in
            _markdown_rows(nbformat.read(reproduce_run / "notebooks" / "04_speedup_and_quality.ipynb", 4))
            if r.get("condition_score")]
    methods = {m for m, _, _ in rows}
    assert {"AR", "SJD", "GSD (G=3)", "Amplify (k=2)"} <= methods and len(methods) >= 9
    for method, nfe, score in rows:
        assert 0 <= float(score) <= 100, (method, score)  # CLIP scores of VQGAN-decoded images
        # AR and AR on a second seed set (the seed-noise row) decode one token per forward.
        assert float(nfe) == TOKENS if method.startswith("AR") else 1 <= float(nfe) < TOKENS
    text, _, _ = _outputs(nbformat.read(reproduce_run / "notebooks" / "03_top100_replacement.ipynb", 4))
    changed = re.search(r"^top-k\s+changed ([\d.]+) .*condition_score [\d.]+", text, re.M)
    assert changed and 0.3 < float(changed.group(1)) <= 0.5  # half the codes, a few redrawn alike


def test_figures_paper_writes_tables_images_and_clip_scores(reproduce_run):
    from PIL import Image

    from gsd_lab.figures import FigureSizes

    figures = reproduce_run / "figures"
    record = json.loads((figures / "results.json").read_text())
    config = record["config"]
    assert config["model"] == MODEL and config["num_tokens"] == TOKENS
    assert config["sizes"] == json.loads(json.dumps(asdict(FigureSizes.paper())))  # --paper honoured
    assert record["seeds"]["prompts"] == PROMPTS[:1]  # tiny mode: the TSV's first prompt
    tables = record["tables"]
    labels = [row["method"] for row in tables["table1"]]
    assert labels == ["AR", "SJD", "GSD (G=3)", "GSD (G=10)", "GSD (G=25)", "GSD (G=50)",
                      "Amplify (k=2)", "Amplify (k=3)"]
    rows = tables["table1"] + tables["table2"] + [r for v in tables["pareto"].values() for r in v]
    for row in rows:
        assert math.isfinite(row["condition_score"]) and 0 <= row["condition_score"] <= 100, row
        assert row["images"] == 1 and 1 <= row["nfe"] <= TOKENS
    assert tables["table1"][0]["nfe"] == TOKENS and tables["table1"][1]["nfe"] < TOKENS
    for variant in ("original", "top-k", "uniform"):
        assert math.isfinite(tables["replacement"]["quality"][variant]["condition_score"])
    assert tables["top1"]["tokens_per_image"] == TOKENS and tables["top1_without_guidance"] is not None
    names = ["fig6_tv_flat_vs_peaked", "fig6_tv_vs_viable_tokens", "theorem1_grouping_shrinks_tv",
             "gsd_distortion_vs_group_size", "top1_probability_histograms", "table1_speed_quality",
             "table2_clustering_ablation", "fig10_nfe_vs_quality", "samples_by_method",
             "fig4_top100_replacement"]
    for name in names:
        for suffix in (".png", ".svg", ".json"):
            assert (figures / f"{name}{suffix}").stat().st_size > 0, name + suffix
    samples = np.asarray(Image.open(figures / "samples_by_method.png").convert("RGB"))
    assert samples.std() > 1  # decoded images, not a blank canvas
    markdown = (figures / "results.md").read_text()
    assert f"GSD results ({MODEL})" in markdown and "CLIP score" in markdown
    run = json.loads((reproduce_run / "run.json").read_text())
    assert run["model"] == MODEL and run["num_prompts"] == 1
    assert {k: v["exit_status"] for k, v in run["steps"].items()} == {"notebooks": 0, "figures": 0}
    assert (reproduce_run / "prompts.tsv").read_text().splitlines()[0] == "Prompt\tCategory\tChallenge\tNote"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_evaluate_under_torchrun_two_processes(tiny_release_set, tmp_path):
    from PIL import Image

    from gsd_lab.clip_score import clip_scores, load_clip
    from gsd_lab.evaluate import result_path
    from gsd_lab.models.lumina_mgpt import load_lumina_mgpt

    files = tiny_release_set
    prompts, out = _write_prompts(tmp_path / "small.tsv"), tmp_path / "eval"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(_free_port()), "-m", "gsd_lab", "evaluate", "--model", MODEL,
           "--weights", str(files.weights), "--vqgan", str(files.vqgan), "--clip", str(files.clip),
           "--device", "cpu", "--threads", "1", "--method", "gsd", "--group-size", "3",
           "--prompts", str(prompts), "--out", str(out), "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=_env(), cwd=REPO)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["num_prompts"] == 2
    assert summary["config"]["world_size"] == 2 and summary["identity"]["model"] == MODEL
    # Decode on one thread, as the ranks did (--threads 1): float32 convolutions sum in another
    # order on other thread counts, which can move a pixel across a rounding boundary.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        adapter = load_lumina_mgpt(files.weights, vqgan_dir=files.vqgan, resolution=512, device="cpu")
        clip_model, processor = load_clip(files.clip)
        rows = [json.loads(result_path(out, i).read_text()) for i in range(2)]
        assert [r["rank"] for r in rows] == [0, 1] and [r["prompt"] for r in rows] == PROMPTS
        images = []
        for row in rows:
            tokens = torch.tensor(row["tokens"])
            assert tokens.numel() == TOKENS and 1 <= row["nfe"] < TOKENS
            image = np.asarray(Image.open(row["image"]))
            # The saved image is the VQGAN decoding of the saved tokens (row ends checked there).
            np.testing.assert_array_equal(image, adapter.decode_images(tokens)[0].numpy())
            assert image.shape == (64, 64, 3) and image.std() > 1
            images.append(image)
        expected = clip_scores(images, PROMPTS, clip_model, processor).numpy()
        np.testing.assert_allclose([r["condition_score"] for r in rows], expected, rtol=1e-4, atol=1e-4)
        assert np.isfinite(summary["mean"]["condition_score"])
    finally:
        torch.set_num_threads(threads)


def test_script_checks_its_arguments_and_has_a_dry_run(tiny_release_set, tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    prompts = _write_prompts(tmp_path / "p.tsv")
    out = tmp_path / "never"
    # Paper sizes (the default): the notebooks get the model parameters only, figures --paper
    # gets every prompt, and nothing is run or written.
    dry = _script(tiny_release_set, prompts, GSD_DRY_RUN="1", GSD_OUT=str(out))
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert not out.exists()
    assert "2 prompts from" in dry.stdout and "model: lumina-mgpt-7b-768 on cuda; sizes: paper" in dry.stdout
    lines = {line.split(":", 1)[0]: line for line in dry.stdout.splitlines() if ".ipynb:" in line}
    assert len(lines) == 5
    assert "'model_name': 'lumina-mgpt-7b-768'" in lines["04_speedup_and_quality.ipynb"]
    assert "seeds" not in lines["04_speedup_and_quality.ipynb"]
    assert lines["05_speculative_decoding_tutorial.ipynb"].endswith("{}")
    figures = next(line for line in dry.stdout.splitlines() if line.startswith("figures:"))
    assert "--paper" in figures and f"--weights {tiny_release_set.weights}" in figures
    bad = subprocess.run(["bash", str(SCRIPT), "a", "b"], capture_output=True, text=True)
    assert bad.returncode == 2 and "WEIGHTS VQGAN CLIP PROMPTS" in bad.stderr
    missing = _script(tiny_release_set, tmp_path / "absent.tsv")
    assert missing.returncode == 2 and "PROMPTS is not a file" in missing.stderr
    out.mkdir()
    taken = _script(tiny_release_set, prompts, GSD_OUT=str(out))
    assert taken.returncode == 2 and "exists" in taken.stderr
    wrong = _script(tiny_release_set, prompts, GSD_SIZES="huge", GSD_DRY_RUN="1")
    assert wrong.returncode == 2 and "GSD_SIZES" in wrong.stderr
