"""cProfile of the main job's decoding and accounting at figures scale: the figures' guided
configurations named in argv[1] (default "GSD (G=25),Amplify (k=2)") on the first 4 stand-in
prompts, seed 0, batch 4, one thread, exact TV and W1 recorded as in figures; prints the top
functions by own time and by cumulative time (where the time goes).

    PYTHONPATH=. python benchmarks/archive/profile_main_job.py ["GSD (G=25),Amplify (k=2)"]
"""

from __future__ import annotations

import cProfile
import pstats
import sys

import torch

from gsd_lab.experiments.image_model import load_image_model
from gsd_lab.experiments.runs import Recording, RunCache
from main_job_batched import figure_specs, short_commit  # the script's folder


def main() -> None:
    torch.set_num_threads(1)
    model = load_image_model("standin")
    labels, specs = figure_specs(model, sys.argv[1] if len(sys.argv) > 1 else
                                 "GSD (G=25),Amplify (k=2)")
    print(f"# commit {short_commit()}; {labels} x 4 prompts, batch 4, one thread")
    cache = RunCache(model, list(model.default_prompts[:4]), [0],
                     recording=Recording(distortion=True, w1=None, batch_size=4))
    profile = cProfile.Profile()
    profile.enable()
    cache.prefetch(specs)
    for spec in specs:
        cache.records(spec)
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
