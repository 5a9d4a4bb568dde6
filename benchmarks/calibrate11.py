"""Calibrate lesson 11's trained effect (induction heads) over several training seeds, so that the margins the lesson
asserts rest on more than one run (about half the smallest observed gap). Seeds go through ``ATTNEDU_SEED_OFFSET``
as in the test command's perturbed run: seed 1000 here is the perturbed run's model.

    python benchmarks/calibrate11.py [--seeds 0 1 2 3 4 1000 1001 1002] > benchmarks/calibration11.md
    ATEN_CPU_CAPABILITY=avx2 python benchmarks/calibrate11.py > benchmarks/calibration11_avx2.md   # other kernels

Each seed trains the lesson's 1-layer and 2-layer models with ``attnedu.heads.train_induction`` exactly as the
lesson does (one torch thread), and measures what the lesson asserts.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 1000, 1001, 1002])
    args = parser.parse_args()
    os.environ["ATTNEDU_PROGRESS"] = "0"
    import torch

    from attnedu import setup_notebook
    from attnedu.heads import INDUCTION, held_out_repeats, induction_scores, train_induction

    setup_notebook(seed=0)
    held_out = held_out_repeats()
    rows = []
    for seed in args.seeds:
        os.environ["ATTNEDU_SEED_OFFSET"] = str(seed)
        for layers in (1, 2):
            run = train_induction(layers, held_out, seed=0)
            prefix, previous = induction_scores(run.model, held_out)
            # the step at which the repeat's loss first falls below half of ln vocab: the phase change
            half = 0.5 * math.log(INDUCTION["vocab"])
            drop = next((s for s, v in zip(run.steps, run.second) if v < half), None)
            rows.append(dict(seed=seed, layers=layers, first=run.first[-1], second=run.second[-1],
                             prefix=prefix[-1].max().item(), previous=previous[0].max().item(),
                             prefix_below=prefix[:-1].max().item() if layers > 1 else float("nan"),
                             drop=drop, seconds=run.seconds))  # fmt: skip
            print(f"seed {seed} layers {layers}: {rows[-1]}", file=sys.stderr)
    print("# Calibration of lesson 11 (induction heads)\n")
    print(f"Measured {datetime.date.today().isoformat()} by `benchmarks/calibrate11.py` (one process, 1 torch thread). "
          f"Machine: {platform.machine()}, {os.cpu_count()} cores, torch's CPU kernels for "
          f"{torch.backends.cpu.get_cpu_capability()}; torch {torch.__version__}; Python {platform.python_version()}. "
          f"Recipe: `attnedu.heads.INDUCTION` = {INDUCTION}; held-out: 256 sequences of a 16-token block "
        "repeated once. "
          "Seed = `ATTNEDU_SEED_OFFSET`; 1000.. are what the perturbed run gives. Losses in nats on the held-out "
          "sequences at the end of training; prefix = the highest prefix-matching score in the last layer; "
          "previous = the highest previous-token score in layer 0; prefix below = the highest prefix-matching score "
          "in layer 0 of the 2-layer model; drop = the first measured step with the repeat's loss < ln(32)/2.\n"
    )  # fmt: skip
    print(
        "| seed | layers | first block | repeat | prefix (last layer) | previous (layer 0) | prefix (layer 0) "
        "| drop at step | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['seed']} | {r['layers']} | {r['first']:.3f} | {r['second']:.3f} | {r['prefix']:.3f} | "
            f"{r['previous']:.3f} | {r['prefix_below']:.3f} | {r['drop']} | {r['seconds']:.1f} |"
        )
    print("\n## Ranges over the seeds, for the margins the lesson asserts\n")
    for layers in (1, 2):
        mine = [r for r in rows if r["layers"] == layers]
        for key in ("second", "prefix", "previous", "prefix_below"):
            values = [r[key] for r in mine]
            print(f"- {layers} layer(s), {key}: {min(values):.3f} .. {max(values):.3f}")


if __name__ == "__main__":
    main()
