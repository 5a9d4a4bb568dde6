"""Calibration of exercise 3 of solutions/13b_sparse_selection_and_delta_rule.ipynb, the graded prediction
``predicted_recall`` (attnedu/checks/lesson13.py), over seeds: its four recalls (d_k = d_v = 32, beta = 1, 8 draws; 64
distinct keys with seed s, 32 keys each written twice with seed s + 1) for s = 13 (the check's) .. 22, and how far
each is from 0 and 1, which sets the half credit for the right order (``ORDER_RANGE``).

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

PREDICTION_SEEDS = range(13, 23)


def prediction(seed: int) -> tuple[float, ...]:
    memories = ("additive", "delta")
    d_k, trials = RECALL["d_k"], RECALL["trials"]
    past = recall_curve([RECALL["past"]], d_k, memories=memories, trials=trials, seed=seed)
    twice = recall_curve([RECALL["keys"]], d_k, memories=memories, rewrites=RECALL["keys"], trials=trials,
                         seed=seed + 1)  # fmt: skip
    return past["additive"][0], past["delta"][0], twice["additive"][0], twice["delta"][0]


def main() -> None:
    torch.set_num_threads(1)
    lines = [
        "# Calibration of lesson 13b's exercise 3 (the recall prediction)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} by `benchmarks/calibrate13_recall_exercise.py` (float64, 1 torch "
        f"thread; {platform.machine()}, torch {torch.__version__}, Python {sys.version.split()[0]}). "
        f"d_k = d_v = {RECALL['d_k']}, beta = 1, {RECALL['trials']} draws; {RECALL['past']} distinct keys (seed s), "
        f"{RECALL['keys']} keys each written twice (seed s + 1); s = 13 is the check's measurement.",
        "",
        "| s | additive, distinct | delta, distinct | additive, twice | delta, twice |",
        "|---|---|---|---|---|",
    ]
    values = []
    for seed in PREDICTION_SEEDS:
        row = prediction(seed)
        values += row
        lines.append(f"| {seed} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    lines += [
        "",
        f"All recalls lie in [{min(values):.3f}, {max(values):.3f}]: none within 0.3 of 0, and a guess of 1 is within "
        f"0.3 only of the recalls above 0.7 (the check gives half credit for the right order within 0.3).",
        "",
    ]
    out = Path(__file__).with_name("calibration13_recall_exercise.md")
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
