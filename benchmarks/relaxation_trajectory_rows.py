"""Why the TV-optimal relaxation needs more forward passes than GSD at equal TV: per image, the
sum over emitted tokens of T = TV(p_t, q_t), of the exact TV spent, of T - TV (the expected
number of stops of a rule on the one-step bound, proofs/10), the stops counted, and the mean
top-1 probability of the rows the trajectory visits. Stand-in, classes 0-4, seed 0, window 16.
A measurement script, not a test: python benchmarks/relaxation_trajectory_rows.py
"""

import numpy as np
import torch

from gsd_lab.decode import loop as decoding
from gsd_lab.decode.methods import DecodingMethod

rows = []


class Log(decoding.DistortionLog):
    def add(self, start, p, q, num_accepted):
        tv = super().add(start, p, q, num_accepted)
        if tv is not None:
            L = q.shape[0]
            T = (0.5 * (p[:L].double() - q.double()).abs().sum(-1)).tolist()
            top = p.double().amax(-1).tolist()
            for i, v in enumerate(tv.tolist()):
                rows.append((T[i] if i < L else 0.0, v, top[i], i < num_accepted))
        return tv


decoding.DistortionLog = Log
torch.set_num_threads(1)
from gsd_lab.experiments.image_model import load_image_model
from gsd_lab.experiments.runs import Recording, generate_one, generator_seed, resolve_for

model = load_image_model("standin")
for label, m in [
    ("relax d=0.15", DecodingMethod("sjd", relaxation_delta=0.15)),
    ("GSD G=50", DecodingMethod("gsd", clusters="dynamic", group_size=50)),
]:
    rows.clear()
    nfe = []
    r = resolve_for(model, m)
    for i, prompt in enumerate(model.default_prompts[:5]):
        res, _ = generate_one(model, r, prompt, generator_seed(0, i), Recording(distortion=True))
        nfe.append(res.nfe)
    a = np.array([(t, v, top, acc) for t, v, top, acc in rows], dtype=float)
    n = 5
    print(
        f"{label:14s} NFE {np.mean(nfe):5.1f}  per image: sum T {a[:, 0].sum() / n:6.1f}  sum TV {a[:, 1].sum() / n:5.1f}  sum(T-TV) {(a[:, 0] - a[:, 1]).sum() / n:6.1f}  stops {(1 - a[:, 3]).sum() / n:5.1f}  mean top-1 of p {a[:, 2].mean():.3f}",
        flush=True,
    )
