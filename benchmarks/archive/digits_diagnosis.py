"""Where the digits model's AR samples go wrong: where conditioning on the digit helps, and
which digits the samples become.

Conditioning gain per position (held-out digits x with label c, teacher-forced, float64 model,
the law restricted to image codes as in sampling):
    gain_t = E[ log p(x_t | c, x_<t) - log p(x_t | null, x_<t) ]   (nats),
reported per raster row of the 14 x 14 grid (the sum over its 14 positions). It is a
log-likelihood ratio against the null (unconditional) branch, not the label's mutual information
(at most ln 10 per image): part of it is the null branch fitting worse. Stored under the keys
``class_information_*``. Also the conditional
NLL per row. Confusion: the digits classifier's argmax on AR samples (``--per-class`` per digit,
generator seed ``--seed``, the adapter's cfg_scale and top-k unless given), rows the prompted
digit.

    nice -n 5 python benchmarks/archive/digits_diagnosis.py  # --out benchmarks/results/digits_diagnosis
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


@torch.no_grad()
def code_logp(model, ids: torch.Tensor, codebook_size: int, chunk: int = 100) -> torch.Tensor:
    """log p(x_t | ids[:, 0], x_<t) over image codes, [N, T] float64, for ids [N, 1 + T]."""
    out = []
    for part in ids.split(chunk):
        logits = model(input_ids=part[:, :-1]).logits[..., :codebook_size].double()
        out.append(torch.log_softmax(logits, -1).gather(2, part[:, 1:, None])[..., 0])
    return torch.cat(out)


def main(argv: list[str] | None = None) -> int:
    from gsd_lab.digits import data
    from gsd_lab.digits.adapter import DEFAULT_CFG_SCALE, DEFAULT_TOP_K, WEIGHTS_DIR
    from gsd_lab.digits.quality import prompted_scores
    from gsd_lab.standin.loading import load_ar_model, load_classifier, load_tokenizer
    from gsd_lab.standin.sampling import sample_tokens
    from gsd_train.digits.train import encode

    parser = argparse.ArgumentParser()
    parser.add_argument("--per-class", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--cfg", type=float, default=DEFAULT_CFG_SCALE)
    parser.add_argument("--top-k", type=int, default=DEFAULT_TOP_K or 0, help="0: no top-k")
    parser.add_argument("--weights", type=Path, default=WEIGHTS_DIR)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/digits_diagnosis")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    model, layout, _ = load_ar_model(args.weights, dtype=torch.float64)
    tokenizer, classifier = load_tokenizer(args.weights), load_classifier(args.weights)
    images, labels = data.digits("heldout")
    codes = encode(tokenizer, images)
    cond = torch.cat([(labels + layout.codebook_size)[:, None], codes], 1)
    null = torch.cat([torch.full_like(labels, layout.null_class_id)[:, None], codes], 1)
    lp_cond = code_logp(model, cond, layout.codebook_size)
    lp_null = code_logp(model, null, layout.codebook_size)
    rows = lambda t: t.mean(0).view(layout.grid, layout.grid).sum(1).tolist()  # noqa: E731

    classes = torch.arange(layout.num_classes).repeat_interleave(args.per_class)
    tokens, _ = sample_tokens(
        model, layout, classes, cfg_scale=args.cfg, top_k=args.top_k or None,
        generator=torch.Generator().manual_seed(args.seed),
    )
    samples = tokenizer.decode(tokens.view(-1, layout.grid, layout.grid))
    _, correct = prompted_scores(classifier, samples, classes)
    with torch.no_grad():
        predicted = classifier(samples).argmax(-1)
    confusion = torch.zeros(layout.num_classes, layout.num_classes, dtype=torch.int64)
    confusion.index_put_((classes, predicted), torch.ones_like(classes), accumulate=True)
    result = {
        "heldout_images": int(labels.numel()),
        "class_information_nats_per_image": float((lp_cond - lp_null).sum(1).mean()),
        "class_information_nats_per_row": rows(lp_cond - lp_null),
        "conditional_nll_nats_per_row": [-v for v in rows(lp_cond)],
        "conditional_nll_per_token": float(-lp_cond.mean()),
        "null_nll_per_token": float(-lp_null.mean()),
        "samples": {"cfg_scale": args.cfg, "top_k": args.top_k or None, "seed": args.seed,
                    "per_class": args.per_class, "accuracy": float(correct.double().mean()),
                    "confusion_rows_prompted_cols_classified": confusion.tolist()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    print(confusion)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
