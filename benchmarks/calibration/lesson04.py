"""Lesson 04's calibration: ``attnedu.transformer.train_recall`` with ``RECALL_04``, as the lesson calls it, one head on
associative recall with and without the division by sqrt(d_k).

    python benchmarks/calibrate.py --lesson 04
"""

from __future__ import annotations

from .common import measured, printed
from .common import span as _span

LESSONS = ("04",)
EXPERIMENTS = ("scaling",)  # one head with and without 1/sqrt(d_k), d_k 16 and 256
SEEDS = (0, 1, 2, 1000, 1001)


def run(experiment: str, seed: int) -> dict:
    """Lesson 04's experiment at seed offset ``seed`` (``ATTNEDU_SEED_OFFSET``, which the driver set)."""
    if experiment != "scaling":
        raise ValueError(f"lesson 04's experiment is 'scaling', got {experiment!r}")
    return {"model": experiment, "seed": seed, **_scaling()}


def _scaling() -> dict:
    """Lesson 04's experiment, ``attnedu.transformer.train_recall`` with ``RECALL_04`` as the lesson calls it: for
    d_k 16 and 256, each arm (divided by sqrt(d_k), raw, and raw with W_Q, W_K initialised smaller by d_k^(-1/4),
    the control), three models (training seeds 0, 1, 2, moved by the offset); per arm, the spread of the scores at
    initialisation and the held-out accuracy every ``every`` steps, averaged over the three models."""
    import torch

    from attnedu.transformer import RECALL_04, RECALL_KINDS, recall_held_out, train_recall

    torch.set_num_threads(1)
    held_out = recall_held_out(RECALL_04)
    names = {"divided": "scaled", "raw": "raw", "raw, small init": "raw small init"}  # the record's names
    arms = {}
    for head_dim in (16, 256):
        for kind in RECALL_KINDS:
            runs = [train_recall(head_dim, kind, seed, held_out, RECALL_04) for seed in (0, 1, 2)]
            arms[f"{head_dim} {names[kind]}"] = {
                "spread": sum(run.spread for run in runs) / 3,
                "curve": [sum(run.curve[i] for run in runs) / 3 for i in range(len(runs[0].curve))],
                "per_seed_at_50": [run.curve[1] for run in runs],
            }
    return {"arms": arms}


def report(results: list[dict], info) -> str:
    """Lesson 04's table and the ranges over the seeds of the margins it asserts."""
    return printed(_report_scaling, results, info)


def _report_scaling(rows: list[dict], info) -> None:
    print("\n## Lesson 04: one head on associative recall, with and without the division by sqrt(d_k)\n")
    print(measured(info))
    print("Each row: the mean of the lesson's three models (training seeds 0, 1, 2 moved by the offset) after 150 Adam")
    print("steps; spread: the scores' standard deviation at initialisation; accuracy on 500 held-out questions.\n")
    print("| seed | d_k 16 divided: spread, at 50, at 150 | d_k 16 raw | d_k 256 divided | d_k 256 raw |")
    print("|---|---|---|---|---|")
    names = ("16 scaled", "16 raw", "256 scaled", "256 raw")
    for r in rows:
        cells = [
            f"{r['arms'][n]['spread']:.1f}, {r['arms'][n]['curve'][1]:.3f}, {r['arms'][n]['curve'][-1]:.3f}"
            for n in names
        ]
        print(f"| {r['seed']} | " + " | ".join(cells) + " |")
    controls = ("16 raw small init", "256 raw small init")
    if all(n in r["arms"] for r in rows for n in controls):
        print("\nThe control arm: raw scores, W_Q and W_K initialised smaller by d_k^(-1/4) (spread, at 50, at 150)\n")
        print("| seed | d_k 16 raw, small init | d_k 256 raw, small init |")
        print("|---|---|---|")
        for r in rows:
            cells = [
                f"{r['arms'][n]['spread']:.1f}, {r['arms'][n]['curve'][1]:.3f}, {r['arms'][n]['curve'][-1]:.3f}"
                for n in controls
            ]
            print(f"| {r['seed']} | " + " | ".join(cells) + " |")

    def arm(r, name, at):
        return r["arms"][name]["curve"][at]

    ranges = {
        "d_k 16, divided minus raw after 50 steps": [arm(r, "16 scaled", 1) - arm(r, "16 raw", 1) for r in rows],
        "d_k 256, divided minus raw after 50 steps": [arm(r, "256 scaled", 1) - arm(r, "256 raw", 1) for r in rows],
        "d_k 256, divided minus raw after 150 steps": [arm(r, "256 scaled", -1) - arm(r, "256 raw", -1) for r in rows],
        "divided, the lower of the two sizes after 150 steps": [
            min(arm(r, "16 scaled", -1), arm(r, "256 scaled", -1)) for r in rows
        ],
        "d_k 16 raw after 150 steps": [arm(r, "16 raw", -1) for r in rows],
    }
    if all("256 raw small init" in r["arms"] for r in rows):
        for d in (16, 256):
            ranges[f"d_k {d}, small-init raw minus raw after 50 steps"] = [
                arm(r, f"{d} raw small init", 1) - arm(r, f"{d} raw", 1) for r in rows
            ]
            ranges[f"d_k {d}, divided minus small-init raw after 50 steps"] = [
                arm(r, f"{d} scaled", 1) - arm(r, f"{d} raw small init", 1) for r in rows
            ]
    print("\nRanges over the seeds, for the margins lesson 04 asserts:\n")
    for label, values in ranges.items():
        print(f"- {label}: {_span(values)}")
