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
    from attnedu.heads import INDUCTION, held_out_repeats, held_out_varied, induction_scores, train_induction

    setup_notebook(seed=0)
    held_out = held_out_repeats()
    varied, periods = held_out_varied()
    rows = []
    for seed in args.seeds:
        os.environ["ATTNEDU_SEED_OFFSET"] = str(seed)
        for layers in (1, 2):
            run = train_induction(layers, held_out, seed=0, scored=(varied, periods))
            prefix, previous = induction_scores(run.model, held_out)
            varied_prefix, _ = induction_scores(run.model, varied, periods)
            # the step at which the repeat's loss first falls below half of ln vocab: the phase change
            half = 0.5 * math.log(INDUCTION["vocab"])
            drop = next((s for s, v in zip(run.steps, run.second) if v < half), None)
            # the step at which the last layer's best prefix-matching score (varied periods) first reaches 0.4
            formed = next((s for s, p in zip(run.steps, run.prefix) if p[-1].max() >= 0.4), None)
            # as the lesson computes them: the steps at which 10 % and 90 % of the repeat loss's fall are done, and
            # the step at which the last layer's best prefix-matching score reaches half its final value
            top = [p[-1].max().item() for p in run.prefix]
            high, low = run.second[0], run.second[-1]
            start = next(s for s, v in zip(run.steps, run.second) if v <= high - 0.1 * (high - low))
            end = next(s for s, v in zip(run.steps, run.second) if v <= low + 0.1 * (high - low))
            half_head = next(s for s, v in zip(run.steps, top) if v >= top[-1] / 2)
            rows.append(dict(seed=seed, layers=layers, first=run.first[-1], second=run.second[-1],
                             prefix=prefix[-1].max().item(), previous=previous[0].max().item(),
                             prefix_below=prefix[:-1].max().item() if layers > 1 else float("nan"),
                             varied=varied_prefix[-1].max().item(),
                             varied_below=varied_prefix[:-1].max().item() if layers > 1 else float("nan"),
                             drop=drop, formed=formed, start=start, end=end, half_head=half_head,
                             seconds=run.seconds))  # fmt: skip
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
          "in layer 0 of the 2-layer model; formed = the first measured step at which the last layer's best varied "
          "prefix-matching score is >= 0.4; varied = the same prefix-matching scores (last layer; layer 0 of the "
          "2-layer model) on 256 held-out sequences each with its own period (`held_out_varied`, 4..16, each row "
          "scored at its own period), where a head attending a fixed distance back cannot score; "
          "drop = the first measured step with the repeat's loss < ln(32)/2; fall 10 % .. 90 % = the steps at which "
          "10 % and 90 % of the repeat loss's fall (from step 0 to the end) are done; head at half = the first step "
          "at which the last layer's best varied prefix-matching score reaches half its final value (the lesson "
          "asserts that it lies in the fall; the line after the ranges counts the seeds where it does).\n"
    )  # fmt: skip
    print(
        "| seed | layers | first block | repeat | prefix (last layer) | previous (layer 0) | prefix (layer 0) "
        "| varied (last layer) | varied (layer 0) | drop at step | head formed at step | fall 10 % .. 90 % "
        "| head at half | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['seed']} | {r['layers']} | {r['first']:.3f} | {r['second']:.3f} | {r['prefix']:.3f} | "
            f"{r['previous']:.3f} | {r['prefix_below']:.3f} | {r['varied']:.3f} | {r['varied_below']:.3f} | "
            f"{r['drop']} | {r['formed']} | {r['start']} .. {r['end']} | {r['half_head']} | {r['seconds']:.1f} |"
        )
    print("\n## Ranges over the seeds, for the margins the lesson asserts\n")
    for layers in (1, 2):
        mine = [r for r in rows if r["layers"] == layers]
        for key in ("second", "prefix", "previous", "prefix_below", "varied", "varied_below"):
            values = [r[key] for r in mine]
            print(f"- {layers} layer(s), {key}: {min(values):.3f} .. {max(values):.3f}")
    inside = [r for r in rows if r["start"] <= r["half_head"] <= r["end"]]
    print(f"- head at half within the fall: {sum(r['layers'] == 2 for r in inside)} of "
          f"{sum(r['layers'] == 2 for r in rows)} two-layer runs")
    for key in ("drop", "formed"):
        values = [r[key] for r in rows if r["layers"] == 2]
        if None not in values:
            print(f"- 2 layer(s), {key}: {min(values)} .. {max(values)}")


if __name__ == "__main__":
    main()
