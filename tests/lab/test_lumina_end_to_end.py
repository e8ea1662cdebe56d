"""The Lumina-mGPT path end to end on a tiny checkpoint set in the release layouts (the session
fixture ``tiny_release_set``: a 512 folder without a tokenizer beside a 768 tokenizer folder):
notebook 04 with its parameters pointed at it, ``figures --paper`` on a PartiPrompts-format
file (both through ``scripts/gpu_reproduce.sh`` in its tiny CPU mode; figures killed mid-way by
SIGKILL, dry-run, then resumed under torchrun with 2 processes), and ``evaluate`` under
``torchrun --nproc-per-node 2`` (gloo)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
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
# The one notebook run on the checkpoint: it decodes every method of the tables. The others run
# under nbval on the stand-in; their Lumina paths (top-1 statistics, the replacement study) run
# here inside figures --paper. Each notebook's parameters are checked in the dry run.
NOTEBOOK = "04_speedup_and_quality"

# "slow" still runs in CI; the timeout leaves room for a machine shared with other jobs.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
SCRIPT_TIMEOUT = 900  # seconds for one run of the script
DRY_RUN_TIMEOUT = 120  # seconds for a dry run of it (nothing is executed)


def _write_prompts(path: Path) -> Path:
    """PartiPrompts' TSV layout: a header, one prompt per row, other columns ignored."""
    rows = [f"{PROMPTS[0]}\tAnimals\tSimple Detail\t", f"{PROMPTS[1]}\tAnimals\tBasic\tquoted"]
    path.write_text("Prompt\tCategory\tChallenge\tNote\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def _env(**extra: str) -> dict[str, str]:
    """This checkout first on the path (the notebooks' kernels inherit it), one thread each; a
    working tree with uncommitted changes allowed (``test_script_refuses_a_dirty_checkout``
    checks the refusal itself)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.update(OMP_NUM_THREADS="1", MPLBACKEND="Agg", PYTHON=sys.executable, GSD_ALLOW_DIRTY="1", **extra)
    return env


def _script_args(files, prompts: Path) -> list[str]:
    return ["bash", str(SCRIPT), str(files.weights), str(files.vqgan), str(files.clip), str(prompts)]


def _script(files, prompts: Path, **env: str) -> subprocess.CompletedProcess:
    """The script, failing the test when it runs past ``SCRIPT_TIMEOUT`` (each notebook cell has
    its own, shorter timeout: ``gsd_lab.teaching.notebooks.CELL_TIMEOUT``); on expiry its whole
    process group is killed, so no child outlives the test."""
    return _run_script(_script_args(files, prompts), _env(**env))


def _run_script(args: list[str], env: dict[str, str], timeout: int = SCRIPT_TIMEOUT,
                ) -> subprocess.CompletedProcess:
    """``args`` run in a session of their own within ``timeout`` seconds, text output captured;
    past it the session is killed (SIGKILL) and the test fails with the output's tail."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, cwd=REPO, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        tail = ((stdout or "") + (stderr or ""))[-3000:]
        pytest.fail(f"{Path(args[1]).name} did not finish within {timeout} s; "
                    f"its output ended:\n{tail}")
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def _result_rows(out: Path) -> list[Path]:
    return sorted((out / "figures" / "decoding").glob("*/seed-0/results/[0-9]*.json"))


@dataclass(frozen=True)
class ReproduceRun:
    out: Path
    before_resume: dict[Path, tuple[bytes, int]]  # result files on disk after the kill
    dry_run: str  # figures --paper --dry-run --forward-ms 40 on the killed run


def _kill_mid_way(files, prompts: Path, env: dict[str, str], out: Path, rows: int) -> None:
    """The script's figures step, killed (SIGKILL, its whole process group) once ``rows``
    result files are on disk: a real crash, not an exception."""
    process = subprocess.Popen(_script_args(files, prompts), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env=_env(**env), cwd=REPO, start_new_session=True)
    deadline = time.monotonic() + 900
    try:
        while len(_result_rows(out)) < rows:
            assert process.poll() is None, f"finished before the kill: {process.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "no result files appeared"
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)


def _dry_run(files, out: Path) -> str:
    from gsd_lab.cli import main

    buffer, threads = io.StringIO(), torch.get_num_threads()
    try:
        with contextlib.redirect_stdout(buffer):
            assert main(["figures", "--paper", "--dry-run", "--forward-ms", "40", "--model", MODEL, "--weights",
                         str(files.weights), "--vqgan", str(files.vqgan), "--clip", str(files.clip), "--device",
                         "cpu", "--threads", "1", "--prompts", str(out / "prompts.tsv"),
                         "--out", str(out / "figures")]) == 0
    finally:
        torch.set_num_threads(threads)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def reproduce_run(tiny_release_set, tmp_path_factory):
    """scripts/gpu_reproduce.sh in its tiny CPU mode: figures --paper killed mid-way, a dry run
    of what is left, then the whole script again into the same folder (GSD_RESUME=1): the
    notebooks, and figures --paper resumed on 2 processes (GSD_NPROC=2, torchrun)."""
    root = tmp_path_factory.mktemp("reproduce")
    prompts = _write_prompts(root / "small.tsv")
    out = root / "run"
    env = {"GSD_SIZES": "tiny", "GSD_MODEL": MODEL, "GSD_DEVICE": "cpu", "GSD_OUT": str(out)}
    _kill_mid_way(tiny_release_set, prompts, {**env, "GSD_STEPS": "figures"}, out, rows=4)
    before = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in _result_rows(out)}
    dry_run = _dry_run(tiny_release_set, out)
    done = _script(tiny_release_set, prompts, GSD_RESUME="1", GSD_NPROC="2", GSD_NOTEBOOKS=NOTEBOOK[:2], **env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return ReproduceRun(out, before, dry_run)


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
    """Rows of every markdown table a notebook displayed (``figure_io.markdown_table``), as dicts;
    the narrow parts one cell shows of one table (``course.show_tables``) joined on their first
    column."""
    rows = []
    for cell in nb.cells:
        joined: dict[tuple[str, str], dict[str, str]] = {}
        for out in cell.get("outputs", []):
            lines = [ln for ln in out.get("data", {}).get("text/markdown", "").splitlines() if ln.startswith("|")]
            if len(lines) < 3:
                continue
            cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", ln.strip().strip("|"))]
                     for ln in lines]
            for row in cells[2:]:
                joined.setdefault((cells[0][0], row[0]), {}).update(zip(cells[0], row))
        rows += list(joined.values())
    return rows


def test_notebook_04_runs_on_the_lumina_checkpoint(reproduce_run, tiny_release_set):
    ran = sorted(p.stem for p in (reproduce_run.out / "notebooks").glob("*.ipynb"))
    assert ran == [NOTEBOOK]  # GSD_NOTEBOOKS honoured
    nb = nbformat.read(reproduce_run.out / "notebooks" / f"{NOTEBOOK}.ipynb", as_version=4)
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    injected = nb.cells[index + 1]
    assert injected.metadata.get("tags") == ["injected-parameters"]
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code")
    text, mimes, errors = _outputs(nb)
    assert not errors, errors[0].get("ename")
    assert f'model_name = "{MODEL}"' in injected.source  # papermill's injected cell
    assert f'weights = "{tiny_release_set.weights}"' in injected.source
    assert 'device = "cpu"' in injected.source
    assert re.search(rf"model: {MODEL}; {TOKENS} tokens per image; \d+ image codes; cfg 3.0, top-k 2000; "
                     r"device cpu", text)
    assert "image/png" in mimes
    rows = [(r["method"], r["nfe"], r["condition_score"]) for r in _markdown_rows(nb) if r.get("condition_score")]
    methods = {m for m, _, _ in rows}
    assert {"AR", "SJD", "GSD (G=3)", "Amplify (k=2)"} <= methods and len(methods) >= 9
    for method, nfe, score in rows:
        assert 0 <= float(score) <= 100, (method, score)  # CLIP scores of VQGAN-decoded images
        # AR and AR on a second seed set (the seed-noise row) decode one token per forward.
        assert float(nfe) == TOKENS if method.startswith("AR") else 1 <= float(nfe) < TOKENS


def test_figures_paper_writes_tables_images_and_clip_scores(reproduce_run):
    from PIL import Image

    from gsd_lab.paper import FigureSizes

    figures = reproduce_run.out / "figures"
    record = json.loads((figures / "results.json").read_text())
    config = record["config"]
    assert config["model"] == MODEL and config["num_tokens"] == TOKENS
    assert config["sizes"] == json.loads(json.dumps(asdict(FigureSizes.paper())))  # --paper honoured
    assert record["seeds"]["prompts"] == PROMPTS[:1]  # tiny mode: the TSV's first prompt
    tables = record["tables"]
    labels = [row["method"] for row in tables["table1"]]
    assert labels == ["AR", "SJD", "MC-SJD (maximal)", "MC-SJD (Gumbel)", "GSD (G=3)", "GSD (G=10)", "GSD (G=25)",
                      "GSD (G=50)", "MC-GSD (G=50, maximal)", "Amplify (k=2)", "Amplify (k=3)"]
    rows = tables["table1"] + tables["table2"] + [r for v in tables["pareto"].values() for r in v]
    for row in rows:
        assert math.isfinite(row["condition_score"]) and 0 <= row["condition_score"] <= 100, row
        assert row["images"] == 1 and 1 <= row["nfe"] <= TOKENS
    assert tables["table1"][0]["nfe"] == TOKENS and tables["table1"][1]["nfe"] < TOKENS
    for variant in ("original", "top-k", "uniform"):
        assert math.isfinite(tables["replacement"]["quality"][variant]["condition_score"])
    # Fig. 4's study on the Lumina codes: half the codes replaced, a few redrawn alike.
    changed = {row["variant"]: float(row["changed_share"]) for row in tables["replacement"]["changes"]}
    assert 0.3 < changed["top-k"] <= 0.5 and 0.3 < changed["uniform"] <= 0.5
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
    run = json.loads((reproduce_run.out / "run.json").read_text())
    assert run["model"] == MODEL and run["num_prompts"] == 1 and len(run["resumed"]) == 1
    assert {k: v["exit_status"] for k, v in run["steps"].items()} == {"notebooks": 0, "figures": 0}
    assert (reproduce_run.out / "prompts.tsv").read_text().splitlines()[0] == "Prompt\tCategory\tChallenge\tNote"
    assert "CLIP score" in markdown.split("## Table 1")[1].split("##")[0]  # the quality column's name


def test_figures_paper_resumed_after_a_kill_without_recomputing(reproduce_run, tiny_release_set, one_thread):
    from gsd_lab.experiments.image_model import load_image_model
    from gsd_lab.experiments.runs import generate_one, generator_seed
    from gsd_lab.decode.methods import DecodingMethod
    from gsd_lab.paper import FigureSizes, decoding_configurations

    out, before = reproduce_run.out, reproduce_run.before_resume
    model = load_image_model(MODEL, weights=str(tiny_release_set.weights), device="cpu")
    passes = len(decoding_configurations(FigureSizes.paper(), model))
    assert passes == 25  # 24 configurations of the tables and curves (4 coupled) + AR without guidance
    rows = _result_rows(out)
    assert len(rows) == passes and len({p.parents[2] for p in rows}) == passes  # one row per configuration
    assert 4 <= len(before) < passes
    for path, (content, mtime) in before.items():  # decoded before the kill: neither redone nor rewritten
        assert path.read_bytes() == content and path.stat().st_mtime_ns == mtime, path
    new = [json.loads(p.read_text()) for p in rows if p not in before]
    assert {row["rank"] for row in new} == {0, 1}  # the rest shared by the 2 processes
    log = (out / "figures.log").read_text()
    starts = re.findall(r"rank (\d) of 2 \(decoded images\): (\d+)/(\d+) \((\d+) to do\) done, (\d+) from disk", log)
    first = {rank: (int(total), int(disk)) for rank, _, total, _, disk in reversed(starts)}
    assert set(first) == {"0", "1"} and sum(t for t, _ in first.values()) == passes
    assert sum(d for _, d in first.values()) == len(before)
    # The rows are the images themselves: SJD's tokens again, in this process.
    sjd = next(json.loads(p.read_text()) for p in rows if p.parts[-4].startswith("sjd-"))
    result, _ = generate_one(model, DecodingMethod("sjd"), PROMPTS[0], generator_seed(0, 0))
    assert result.tokens.tolist() == sjd["tokens"] and result.nfe == sjd["nfe"]
    # The dry run after the kill: what is done and what is left, in device-hours at 40 ms a forward.
    dry = reproduce_run.dry_run
    assert f"{passes} decoding passes per prompt" in dry
    assert f"{passes} images; {len(before)} done" in dry and f"{passes - len(before)} to do" in dry
    forwards, hours = re.search(r"left: about ([\d,]+) forwards = ([\d.]+) device-hours", dry).groups()
    assert float(hours) == pytest.approx(int(forwards.replace(",", "")) * 0.040 / 3600, abs=0.06)
    terms = re.findall(r"([A-Z]+) ([\d,]+) x ([\d.]+) ms", re.search(r"\n +=(.*)\(forwards x time each\)", dry)[1])
    assert {kind for kind, _, _ in terms} == {"AR", "SJD", "GSD"} and {ms for _, _, ms in terms} == {"40.0"}
    assert sum(int(n.replace(",", "")) for _, n, _ in terms) == int(forwards.replace(",", ""))
    assert f"measured where rows exist ({len(before)} of {passes} configurations)" in dry


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_evaluate_under_torchrun_two_processes(tiny_release_set, tmp_path):
    from PIL import Image

    from gsd_lab.quality.clip_score import clip_scores, load_clip
    from gsd_lab.runs.store import result_path
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
    assert summary["config"]["condition_score"] == "CLIP score (higher better)"  # what the column is
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
    assert subprocess.run(["bash", "-n", str(SCRIPT)], timeout=60).returncode == 0
    prompts = _write_prompts(tmp_path / "p.tsv")
    out = tmp_path / "never"
    # Paper sizes (the default): the notebooks get the model parameters only, figures --paper
    # gets every prompt, and nothing is run or written.
    dry = _script(tiny_release_set, prompts, GSD_DRY_RUN="1", GSD_OUT=str(out))
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert not out.exists()
    assert "2 prompts from" in dry.stdout and "model: lumina-mgpt-7b-768 on cuda; sizes: paper" in dry.stdout
    assert "preset: default" in dry.stdout
    lines = {line.split(":", 1)[0]: line for line in dry.stdout.splitlines() if ".ipynb:" in line}
    assert len(lines) == 5
    assert "'model_name': 'lumina-mgpt-7b-768'" in lines["04_speedup_and_quality.ipynb"]
    assert "seeds" not in lines["04_speedup_and_quality.ipynb"]
    assert lines["05_speculative_decoding_tutorial.ipynb"].endswith("{}")
    tiny = _script(tiny_release_set, prompts, GSD_DRY_RUN="1", GSD_OUT=str(out), GSD_SIZES="tiny",
                   GSD_STEPS="notebooks")
    assert tiny.returncode == 0, tiny.stderr[-2000:]
    tiny_lines = {line.split(":", 1)[0]: line for line in tiny.stdout.splitlines() if ".ipynb:" in line}
    assert len(tiny_lines) == 5 and "'max_prompts': 1" in tiny_lines["02_top1_probability_histograms.ipynb"]
    for name, line in tiny_lines.items():  # a model-free notebook gets sizes only
        assert ("'model_name'" in line) == (not name.startswith("05")), line
    one = _script(tiny_release_set, prompts, GSD_DRY_RUN="1", GSD_OUT=str(out), GSD_NOTEBOOKS="02 04",
                  GSD_STEPS="notebooks")
    assert one.returncode == 0, one.stderr[-2000:]
    assert [line.split(":", 1)[0] for line in one.stdout.splitlines() if ".ipynb:" in line] == [
        "02_top1_probability_histograms.ipynb", "04_speedup_and_quality.ipynb"]
    globbed = _script(tiny_release_set, prompts, GSD_DRY_RUN="1", GSD_NOTEBOOKS="0*")
    assert globbed.returncode == 2 and "GSD_NOTEBOOKS holds notebook name prefixes" in globbed.stderr
    figures = next(line for line in dry.stdout.splitlines() if line.startswith("figures:"))
    assert "--paper" in figures and f"--weights {tiny_release_set.weights}" in figures
    inside = _script(tiny_release_set, prompts, GSD_DRY_RUN="1", GSD_OUT=str(REPO / "runs" / "x"))
    assert inside.returncode == 2 and "inside the checkout" in inside.stderr
    bad = subprocess.run(["bash", str(SCRIPT), "a", "b"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "WEIGHTS VQGAN CLIP PROMPTS" in bad.stderr
    missing = _script(tiny_release_set, tmp_path / "absent.tsv")
    assert missing.returncode == 2 and "PROMPTS is not a file" in missing.stderr
    out.mkdir()
    taken = _script(tiny_release_set, prompts, GSD_OUT=str(out))
    assert taken.returncode == 2 and "exists" in taken.stderr
    wrong = _script(tiny_release_set, prompts, GSD_SIZES="huge", GSD_DRY_RUN="1")
    assert wrong.returncode == 2 and "GSD_SIZES" in wrong.stderr
    release = _script(tiny_release_set, prompts, GSD_PRESET="release", GSD_DRY_RUN="1", GSD_STEPS="figures")
    assert release.returncode == 0 and "--preset release" in release.stdout
    wrong = _script(tiny_release_set, prompts, GSD_PRESET="paper", GSD_DRY_RUN="1")
    assert wrong.returncode == 2 and "GSD_PRESET must be default or release" in wrong.stderr
    timed = _script(tiny_release_set, prompts, GSD_CELL_TIMEOUT="7200", GSD_DRY_RUN="1",
                    GSD_STEPS="notebooks")
    assert timed.returncode == 0, timed.stderr[-2000:]
    wrong = _script(tiny_release_set, prompts, GSD_CELL_TIMEOUT="0", GSD_DRY_RUN="1")
    assert wrong.returncode == 2 and "GSD_CELL_TIMEOUT must be a positive integer" in wrong.stderr


def test_script_refuses_a_dirty_checkout(tiny_release_set, tmp_path):
    """Before anything runs: a copy of the script in a git repository with an untracked file."""
    repo = tmp_path / "checkout"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / SCRIPT.name).write_text(SCRIPT.read_text())
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "script"]):
        subprocess.run([*git, *command], check=True, capture_output=True, timeout=60)
    (repo / "notes.txt").write_text("uncommitted")
    prompts = _write_prompts(tmp_path / "p.tsv")
    args = ["bash", str(repo / "scripts" / SCRIPT.name), str(tiny_release_set.weights), str(tiny_release_set.vqgan),
            str(tiny_release_set.clip), str(prompts)]
    env = {k: v for k, v in _env(GSD_DRY_RUN="1", GSD_STEPS="figures", GSD_OUT=str(tmp_path / "out")).items()
           if k != "GSD_ALLOW_DIRTY"}
    dirty = _run_script(args, env, timeout=DRY_RUN_TIMEOUT)
    assert dirty.returncode == 2
    assert "uncommitted changes" in dirty.stderr and "notes.txt" in dirty.stderr
    allowed = _run_script(args, {**env, "GSD_ALLOW_DIRTY": "1"}, timeout=DRY_RUN_TIMEOUT)
    assert allowed.returncode == 0 and "dry run: nothing is executed" in allowed.stdout
