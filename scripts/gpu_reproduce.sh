#!/usr/bin/env bash
# Reproduce the paper's analyses on Lumina-mGPT with real weights, in one command:
#
#   scripts/gpu_reproduce.sh WEIGHTS VQGAN CLIP PROMPTS
#
# WEIGHTS  Lumina-mGPT checkpoint folder (config.json, tokenizer, *.safetensors + index) or a
#          Hugging Face cache entry holding one
# VQGAN    folder with the Chameleon VQGAN's vqgan.yaml and vqgan.ckpt
# CLIP     local CLIP folder (CLIPModel + CLIPProcessor save_pretrained)
# PROMPTS  prompt file: PartiPrompts' TSV (header Prompt, Category, Challenge, Note) or one per line
#
# Runs every notebook in notebooks/ with its `parameters` cell pointed at these files
# (`python -m gsd_lab notebooks`: papermill injects them in a cell after the parameters cell), then
# `python -m gsd_lab figures --paper` on PROMPTS. Everything goes to a new folder outside the
# checkout (GSD_RESUME=1 continues an interrupted one):
#   OUT/notebooks/*.ipynb   executed notebooks (outputs, figures)
#   OUT/figures/            figures (PNG, SVG, JSON sidecars), results.md, results.json
#   OUT/figures/decoding/   one result file per (configuration, prompt), written as it is decoded
#   OUT/prompts.tsv         the prompts figures ran on; OUT/*.log; OUT/run.json (what ran, status)
# The checkout must be clean (git status) before anything runs: every output records its commit.
#
# Environment (all optional):
#   GSD_MODEL        lumina-mgpt-7b-768 (default), -512 or -1024
#   GSD_DEVICE       cuda (default), cuda:1, cpu, ...
#   GSD_OUT          output folder outside the checkout (default ~/gsd-runs/gpu-reproduce-<UTC
#                    timestamp>; must not exist unless GSD_RESUME=1)
#   GSD_RESUME=1     continue in an existing GSD_OUT after a crash: figures --paper skips every
#                    image already on disk (and refuses another model, weights or prompt list)
#   GSD_NPROC        processes for figures --paper (default 1): torchrun, one GPU each
#   GSD_ALLOW_DIRTY=1  run from a checkout with uncommitted changes (outputs then say dirty)
#   GSD_SIZES        paper (default): the notebooks' own sizes (the paper's configurations) and
#                    figures --paper on every prompt; tiny: small sizes for a CPU smoke test on
#                    the tiny checkpoints of gsd_lab.testing.tiny_checkpoints (the tests use it)
#   GSD_MAX_PROMPTS  first N prompts only (default: all in paper sizes, 1 in tiny sizes)
#   GSD_STEPS        "notebooks figures" (default), or one of them
#   GSD_NOTEBOOKS    notebook name prefixes to run, e.g. "02 04" (default: every notebook)
#   GSD_CELL_TIMEOUT seconds each notebook cell may run before its notebook fails naming the cell
#                    (python -m gsd_lab notebooks --timeout; default: its own per size)
#   GSD_PRESET       default (the package's exact variant) or release (the GSD release's window,
#                    Jacobi interval, drafts, distance filter and CLIP resize) for figures --paper
#   GSD_DRY_RUN=1    print the plan (parameters, commands) and stop before running anything
#   PYTHON           interpreter with gsd installed (".[lab,notebooks]"); default: python
#
# Time: figures --paper decodes 25 passes per prompt (24 configurations of the tables and curves,
# and AR without guidance on the first 256 prompts), each image ~2.4k tokens at 768 px; the
# paper's 1,600 Parti prompts are hundreds of GPU-hours. `python -m gsd_lab figures --paper
# --dry-run ...` (same flags) prints the estimate from per-forward times measured on the GPU and
# the images already in OUT/figures; progress lines (done / to do, ETA) go to OUT/figures.log.
set -euo pipefail

usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
fail() { echo "error: $*" >&2; exit 2; }

[ "$#" -eq 4 ] || usage
WEIGHTS=$1 VQGAN=$2 CLIP=$3 PROMPTS=$4
for pair in "WEIGHTS:$WEIGHTS" "VQGAN:$VQGAN" "CLIP:$CLIP"; do
    [ -d "${pair#*:}" ] || { echo "error: ${pair%%:*} is not a folder: ${pair#*:}" >&2; exit 2; }
done
[ -f "$PROMPTS" ] || { echo "error: PROMPTS is not a file: $PROMPTS" >&2; exit 2; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python}
MODEL=${GSD_MODEL:-lumina-mgpt-7b-768}
DEVICE=${GSD_DEVICE:-cuda}
SIZES=${GSD_SIZES:-paper}
STEPS=${GSD_STEPS:-notebooks figures}
PRESET=${GSD_PRESET:-default}
OUT=${GSD_OUT:-$HOME/gsd-runs/gpu-reproduce-$(date -u +%Y%m%dT%H%M%SZ)}
RESUME=${GSD_RESUME:-0}
NPROC=${GSD_NPROC:-1}
[[ "$NPROC" =~ ^[1-9][0-9]*$ ]] || fail "GSD_NPROC must be a positive integer, got '$NPROC'"
# The outputs record the commit they come from: refuse a dirty checkout before anything runs.
if [ "${GSD_ALLOW_DIRTY:-0}" != 1 ] && git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
    dirty=$(git -C "$REPO" status --porcelain)
    if [ -n "$dirty" ]; then
        echo "error: the checkout $REPO has uncommitted changes; commit or stash them first (or set" \
             "GSD_ALLOW_DIRTY=1: the outputs then say dirty):" >&2
        echo "$dirty" | head -20 >&2
        exit 2
    fi
fi
case "$SIZES" in
    paper) MAX_PROMPTS=${GSD_MAX_PROMPTS:-} ;;
    tiny) MAX_PROMPTS=${GSD_MAX_PROMPTS:-1} ;;
    *) echo "error: GSD_SIZES must be paper or tiny, got '$SIZES'" >&2; exit 2 ;;
esac
case "$MODEL" in
    lumina-mgpt-7b-512 | lumina-mgpt-7b-768 | lumina-mgpt-7b-1024) ;;
    *) echo "error: GSD_MODEL must be lumina-mgpt-7b-{512,768,1024}, got '$MODEL'" >&2; exit 2 ;;
esac
case "$PRESET" in
    default | release) ;;
    *) fail "GSD_PRESET must be default or release, got '$PRESET'" ;;
esac
read -ra NOTEBOOKS <<< "${GSD_NOTEBOOKS:-}"  # prefixes split on spaces, never globbed
for prefix in "${NOTEBOOKS[@]}"; do
    [[ "$prefix" =~ ^[0-9A-Za-z_]+$ ]] || fail "GSD_NOTEBOOKS holds notebook name prefixes (letters, digits, _), got '$prefix'"
done
for step in $STEPS; do
    case "$step" in
        notebooks | figures) ;;
        *) echo "error: GSD_STEPS may hold 'notebooks' and 'figures', got '$step'" >&2; exit 2 ;;
    esac
done
if [ -n "$MAX_PROMPTS" ] && ! [[ "$MAX_PROMPTS" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: GSD_MAX_PROMPTS must be a positive integer, got '$MAX_PROMPTS'" >&2
    exit 2
fi
CELL_TIMEOUT=${GSD_CELL_TIMEOUT:-}
if [ -n "$CELL_TIMEOUT" ] && ! [[ "$CELL_TIMEOUT" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: GSD_CELL_TIMEOUT must be a positive integer, got '$CELL_TIMEOUT'" >&2
    exit 2
fi
abspath() { (cd "$(dirname "$1")" && echo "$(pwd)/$(basename "$1")"); }
WEIGHTS=$(abspath "$WEIGHTS") VQGAN=$(abspath "$VQGAN") CLIP=$(abspath "$CLIP")
PROMPTS=$(abspath "$PROMPTS")
# Outside the checkout: results there would make the tree dirty (and be committed by mistake).
out_parent=$(dirname "$OUT")
while [ ! -d "$out_parent" ]; do out_parent=$(dirname "$out_parent"); done
case "$(cd "$out_parent" && pwd -P)/" in
    "$(cd "$REPO" && pwd -P)"/*) fail "GSD_OUT $OUT is inside the checkout $REPO; put outputs elsewhere" ;;
esac

DRY_RUN=${GSD_DRY_RUN:-0}
if [ "$DRY_RUN" = 1 ]; then
    echo "dry run: nothing is executed"
    echo "output folder: $OUT"
    echo "model: $MODEL on $DEVICE; sizes: $SIZES; preset: $PRESET; prompts: $PROMPTS (first ${MAX_PROMPTS:-all})"
else
    if [ -e "$OUT" ] && [ "$RESUME" != 1 ]; then
        echo "error: $OUT exists; every run writes to a new folder (set GSD_OUT), or GSD_RESUME=1 continues it" >&2
        exit 2
    fi
    if [ "$RESUME" = 1 ] && [ ! -f "$OUT/run.json" ]; then
        fail "GSD_RESUME=1: $OUT holds no run.json of this script"
    fi
    mkdir -p "$OUT/notebooks"
    OUT=$(cd "$OUT" && pwd)
fi
FIGURES_CMD=("$PYTHON")
if [ "$NPROC" -gt 1 ]; then FIGURES_CMD+=(-m torch.distributed.run --standalone --nproc-per-node "$NPROC"); fi
FIGURES_CMD+=(-m gsd_lab figures --model "$MODEL" --weights "$WEIGHTS" --vqgan "$VQGAN"
              --clip "$CLIP" --device "$DEVICE" --prompts "$OUT/prompts.tsv" --paper
              --preset "$PRESET" --out "$OUT/figures")
if [ "$SIZES" = tiny ]; then FIGURES_CMD+=(--threads 1); fi
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
export GSD_R_REPO="$REPO" GSD_R_OUT="$OUT" GSD_R_MODEL="$MODEL" GSD_R_DEVICE="$DEVICE"
export GSD_R_SIZES="$SIZES" GSD_R_WEIGHTS="$WEIGHTS" GSD_R_VQGAN="$VQGAN" GSD_R_CLIP="$CLIP"
export GSD_R_PROMPTS="$PROMPTS" GSD_R_MAX_PROMPTS="$MAX_PROMPTS" GSD_R_DRY_RUN="$DRY_RUN"
export GSD_R_RESUME="$RESUME" GSD_R_PRESET="$PRESET" GSD_R_NOTEBOOKS="${NOTEBOOKS[*]}"

# 1. The prompt subset, and the plan (run.json). --------------------------------------------
"$PYTHON" - <<'PY'
import json, os, subprocess, sys, time
from gsd_lab.io.prompts import read_prompts

env = {k[6:].lower(): v for k, v in os.environ.items() if k.startswith("GSD_R_")}
prompts = read_prompts(env["prompts"])
if env["max_prompts"]:
    prompts = prompts[: int(env["max_prompts"])]
print(f"{len(prompts)} prompts from {env['prompts']}")
if env["dry_run"] == "1":
    sys.exit(0)
out = env["out"]
with open(os.path.join(out, "prompts.tsv"), "w", encoding="utf-8") as f:
    f.write("Prompt\tCategory\tChallenge\tNote\n" + "".join(f"{p}\t\t\t\n" for p in prompts))
commit = subprocess.run(["git", "-C", env["repo"], "rev-parse", "HEAD"], capture_output=True, text=True)
now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
path = os.path.join(out, "run.json")
if env["resume"] == "1":  # the figures identity check refuses another model, weights or prompt list
    record = json.load(open(path))
    record.setdefault("resumed", []).append({"at": now, "git_commit": commit.stdout.strip() or None})
else:
    record = {"started": now, "argv": sys.argv, "git_commit": commit.stdout.strip() or None,
              "python": sys.executable,
              **{k: env[k] for k in ("model", "device", "sizes", "preset", "weights", "vqgan", "clip", "prompts",
                                    "notebooks")},
              "num_prompts": len(prompts), "steps": {}}
with open(path, "w") as f:
    json.dump(record, f, indent=1)
PY

status=0
log_to() {  # log_to FILE: copy stdin to FILE and stdout (stdout only in a dry run)
    if [ "$DRY_RUN" = 1 ]; then cat; else tee -a "$1"; fi
}
record_step() {  # record_step NAME STATUS SECONDS
    [ "$DRY_RUN" = 1 ] && return 0
    "$PYTHON" -c 'import json, sys
path, name, code, seconds = sys.argv[1:]
record = json.load(open(path))
record["steps"][name] = {"exit_status": int(code), "seconds": int(seconds)}
json.dump(record, open(path, "w"), indent=1)' "$OUT/run.json" "$1" "$2" "$3"
}

# 2. Notebooks. ------------------------------------------------------------------------------
if [[ " $STEPS " == *" notebooks "* ]]; then
    start=$SECONDS
    set +e
    NOTEBOOKS_CMD=("$PYTHON" -m gsd_lab notebooks -r model_name "$MODEL" -r weights "$WEIGHTS"
                   -r vqgan "$VQGAN" -r clip "$CLIP" -r device "$DEVICE")
    if [ "$SIZES" = tiny ]; then NOTEBOOKS_CMD+=(--sizes tiny); fi
    if [ "${#NOTEBOOKS[@]}" -gt 0 ]; then NOTEBOOKS_CMD+=(--only "${NOTEBOOKS[@]}"); fi
    if [ -n "$CELL_TIMEOUT" ]; then NOTEBOOKS_CMD+=(--timeout "$CELL_TIMEOUT"); fi
    if [ "$DRY_RUN" = 1 ]; then NOTEBOOKS_CMD+=(--dry-run); else NOTEBOOKS_CMD+=(--out "$OUT/notebooks"); fi
    (cd "$REPO" && "${NOTEBOOKS_CMD[@]}") 2>&1 | log_to "$OUT/notebooks.log"
    code=${PIPESTATUS[0]}
    set -e
    record_step notebooks "$code" $((SECONDS - start))
    [ "$code" = 0 ] || status=1
fi

# 3. figures --paper. ------------------------------------------------------------------------
if [[ " $STEPS " == *" figures "* ]]; then
    echo "figures: ${FIGURES_CMD[*]}"
    if [ "$DRY_RUN" != 1 ]; then
        start=$SECONDS
        set +e
        (cd "$REPO" && "${FIGURES_CMD[@]}") 2>&1 | log_to "$OUT/figures.log"
        code=${PIPESTATUS[0]}
        set -e
        record_step figures "$code" $((SECONDS - start))
        [ "$code" = 0 ] || status=1
    fi
fi

[ "$DRY_RUN" = 1 ] || echo "outputs in $OUT (run.json: what ran and how it ended)"
exit $status
