"""Calibration of exercise 3 of solutions/13b_sparse_selection_and_delta_rule.ipynb (the graded prediction
``predicted_recall``, attnedu/checks/lesson13.py) and of the cell after it, over many seeds.

1. The prediction's four recalls (d_k = d_v = 32, beta = 1, 8 draws; 64 distinct keys with seed s, 32 keys each
   written twice with seed s + 1), for s = 13 (the check's) .. 22: how far each is from 0 and 1, which sets the
   half credit for the right order (``ORDER_RANGE``).
2. The cell after the worked-out answer: the additive memory's recall with 2 d_k pairs for (d_k, d_v) = (16, 16),
   (32, 16), (32, 32), (32, 64), 8 draws, for seeds 0..19 and 1000..1009, and the smallest gaps its assertions need.

Numbers only (float64, no timing): it may run under ``nice`` without the CPU lock. Writes
benchmarks/calibration13_recall_exercise.md. Run: ``PYTHONPATH=. python benchmarks/calibrate13_recall_exercise.py``.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

import torch

from attnedu.checks.lesson13 import RECALL
from attnedu.delta_rule import recall_curve

DIMS = ((16, 16), (32, 16), (32, 32), (32, 64))
CELL_SEEDS = (*range(20), *range(1000, 1010))
PREDICTION_SEEDS = range(13, 23)


def prediction(seed: int) -> tuple[float, ...]:
    memories = ("additive", "delta")
    d_k, trials = RECALL["d_k"], RECALL["trials"]
    past = recall_curve([RECALL["past"]], d_k, memories=memories, trials=trials, seed=seed)
    twice = recall_curve([RECALL["keys"]], d_k, memories=memories, rewrites=RECALL["keys"], trials=trials,
                         seed=seed + 1)  # fmt: skip
    return past["additive"][0], past["delta"][0], twice["additive"][0], twice["delta"][0]


def cell(seed: int) -> dict[tuple[int, int], float]:
    return {
        (d_k, d_v): recall_curve([2 * d_k], d_k, d_v=d_v, memories=["additive"], trials=8, seed=seed)["additive"][0]
        for d_k, d_v in DIMS
    }


def main() -> None:
    torch.set_num_threads(1)
    lines = [
        "# Calibration of lesson 13b's exercise 3 (the recall prediction) and the cell after it",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} by `benchmarks/calibrate13_recall_exercise.py` (float64, 1 torch "
        f"thread; {platform.machine()}, torch {torch.__version__}, Python {sys.version.split()[0]}).",
        "",
        f"## The prediction: d_k = d_v = {RECALL['d_k']}, beta = 1, {RECALL['trials']} draws; {RECALL['past']} "
        f"distinct keys (seed s), {RECALL['keys']} keys each written twice (seed s + 1)",
        "",
        "| s | additive, distinct | delta, distinct | additive, twice | delta, twice |",
        "|---|---|---|---|---|",
    ]
    values = []
    for seed in PREDICTION_SEEDS:
        row = prediction(seed)
        values += row
        lines.append(f"| {seed} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    lines += ["", f"All recalls lie in [{min(values):.3f}, {max(values):.3f}] (s = 13 is the check's measurement).", ""]
    lines += [
        "## The cell after the worked-out answer: additive recall with 2 d_k pairs, 8 draws",
        "",
        "| seed | " + " | ".join(f"d_k {d_k}, d_v {d_v}" for d_k, d_v in DIMS) + " |",
        "|---|" + "---|" * len(DIMS),
    ]
    rows = []
    for seed in CELL_SEEDS:
        row = cell(seed)
        rows.append(row)
        lines.append(f"| {seed} | " + " | ".join(f"{row[d]:.3f}" for d in DIMS) + " |")
    same = max(abs(r[32, 16] - r[16, 16]) for r in rows)
    lift = min(r[32, 32] - r[32, 16] for r in rows)
    again = min(r[32, 64] - r[32, 32] for r in rows)
    lines += [
        "",
        f"Largest |(32, 16) - (16, 16)|: {same:.3f} (asserted <= 0.2). Smallest (32, 32) - (32, 16): {lift:.3f} "
        f"(asserted >= 0.12). Smallest (32, 64) - (32, 32): {again:.3f} (asserted >= 0.05).",
        "",
    ]
    out = Path(__file__).with_name("calibration13_recall_exercise.md")
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
