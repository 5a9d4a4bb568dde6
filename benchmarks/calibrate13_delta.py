"""Calibration of lesson 13b's delta-rule section: the recall experiments, over many seed groups.

The notebook measures each effect as the mean over three seeds (``training_seed(s)`` for s = 0, 1, 2: seeds 0..2, or
1000..1002 in the perturbed run), with the constants below. This script repeats exactly that for the seed groups
(b, b + 1, b + 2), b = 0, 3, ..., 57 and 1000, 1003, ..., 1057, and writes the quantities the notebook asserts and the
smallest gaps to benchmarks/calibration13_delta.md (and .json). Numbers only (float64, no timing): it may run under
``nice`` without the CPU lock. Run: ``PYTHONPATH=. python benchmarks/calibrate13_delta.py``.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from attnedu.delta_rule import recall_by_age, recall_curve

# the notebook's constants (notebooks/13b_sparse_selection_and_delta_rule.ipynb, section "The delta rule")
D_K = 16
N_PAIRS = (4, 8, 12, 16, 24, 32, 48, 64)
TRIALS = 8
SOFT_BETA = 0.5
REWRITE_N = 8
REWRITES = (0, 2, 4, 6, 8)
AGE_N = 32
AGE_TRIALS = 16
NEWEST = 8  # "the newest pairs": the last NEWEST writes
SEEDS = (0, 1, 2)
# "Larger heads": (d_k, d_v) sizes at n = ratio x d_k pairs, one seed (the notebook's first), TRIALS draws
SIZES = ((16, 16), (64, 64), (64, 16))
RATIOS = (1, 2, 4)


def measure(base: int) -> dict[str, float]:
    """The notebook's quantities for the seeds base + SEEDS (means over the three)."""
    rows = []
    for s in SEEDS:
        seed = base + s
        curve = recall_curve(N_PAIRS, D_K, trials=TRIALS, seed=seed)
        soft = recall_curve(N_PAIRS, D_K, memories=["delta"], beta=SOFT_BETA, trials=TRIALS, seed=seed)["delta"]
        rewritten = {r: recall_curve([REWRITE_N], D_K, rewrites=r, trials=TRIALS, seed=seed) for r in REWRITES}
        age = recall_by_age(AGE_N, D_K, memories=["additive", "delta"], trials=AGE_TRIALS, seed=seed)
        age_soft = recall_by_age(AGE_N, D_K, memories=["delta"], beta=SOFT_BETA, trials=AGE_TRIALS, seed=seed)["delta"]
        at = {n: i for i, n in enumerate(N_PAIRS)}
        half = AGE_N // 2
        rows.append({
            "softmax min": min(curve["softmax"]),
            "additive n=d_k": curve["additive"][at[D_K]],
            "delta n=d_k": curve["delta"][at[D_K]],
            "delta 0.5 n=d_k": soft[at[D_K]],
            "additive n=4d_k": curve["additive"][at[4 * D_K]],
            "delta n=4d_k": curve["delta"][at[4 * D_K]],
            "delta n=2d_k": curve["delta"][at[2 * D_K]],
            "delta 0.5 n=2d_k": soft[at[2 * D_K]],
            "additive n=d_k/4": curve["additive"][at[D_K // 4]],
            "delta n=d_k/4": curve["delta"][at[D_K // 4]],
            "rewrite additive r=0": rewritten[0]["additive"][0],
            "rewrite delta r=0": rewritten[0]["delta"][0],
            "rewrite additive r=all": rewritten[REWRITES[-1]]["additive"][0],
            "rewrite delta r=all": rewritten[REWRITES[-1]]["delta"][0],
            "rewrite softmax r=all": rewritten[REWRITES[-1]]["softmax"][0],
            "age additive old half": statistics.mean(age["additive"][:half]),
            "age delta old half": statistics.mean(age["delta"][:half]),
            "age additive newest": statistics.mean(age["additive"][-NEWEST:]),
            "age delta newest": statistics.mean(age["delta"][-NEWEST:]),
            "age delta 0.5 old half": statistics.mean(age_soft[:half]),
            "age delta 0.5 newest": statistics.mean(age_soft[-NEWEST:]),
        })  # fmt: skip
    means = {key: statistics.mean(row[key] for row in rows) for key in rows[0]}
    sizes = {
        (d_k, d_v): recall_curve(
            [r * d_k for r in RATIOS], d_k, d_v=d_v, memories=["additive", "delta"], trials=TRIALS, seed=base + SEEDS[0]
        )  # fmt: skip
        for d_k, d_v in SIZES
    }
    for (d_k, d_v), result in sizes.items():
        for memory, recalls in result.items():
            for ratio, x in zip(RATIOS, recalls):
                means[f"size {memory} {ratio}d_k ({d_k},{d_v})"] = x
    return means


GAPS = {  # name: (larger, smaller, the notebook's margin): the notebook asserts larger - smaller >= the margin
    "additive - delta at n = d_k": ("additive n=d_k", "delta n=d_k", 0.06),
    "delta 0.5 - delta 1 at n = 2 d_k": ("delta 0.5 n=2d_k", "delta n=2d_k", 0.07),
    "delta - additive, every key rewritten": ("rewrite delta r=all", "rewrite additive r=all", 0.2),
    "additive no rewrite - all rewritten": ("rewrite additive r=0", "rewrite additive r=all", 0.24),
    "age: delta - additive, newest": ("age delta newest", "age additive newest", 0.12),
    "age: additive - delta, old half": ("age additive old half", "age delta old half", 0.21),
    "age: delta 0.5 - delta 1, old half": ("age delta 0.5 old half", "age delta old half", 0.08),
    "sizes, additive at 2 d_k: (64,64) - (16,16)": ("size additive 2d_k (64,64)", "size additive 2d_k (16,16)", 0.15),
    "sizes, additive at 2 d_k: (64,64) - (64,16)": ("size additive 2d_k (64,64)", "size additive 2d_k (64,16)", 0.25),
    "sizes, (64,64) at 2 d_k: additive - delta": ("size additive 2d_k (64,64)", "size delta 2d_k (64,64)", 0.21),
}
BOUNDS = (
    "the notebook also asserts: softmax min >= 0.95 (observed minimum in the ranges above), additive n=4d_k and "
    "delta n=4d_k <= 0.4 (observed maxima above), and exact recall (1.0) of d_k orthonormal keys for both "
    "fixed-size memories (holds for every seed: no interference)"
)


def main() -> None:
    torch.set_num_threads(1)
    start = time.time()
    bases = [*range(0, 60, 3), *range(1000, 1060, 3)]
    results = {base: measure(base) for base in bases}
    keys = list(results[0])
    lines = [
        "# Calibration of lesson 13b's delta rule (recall experiments)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} by `benchmarks/calibrate13_delta.py` (float64, 1 torch thread; "
        f"{platform.machine()}, torch {torch.__version__}, Python {sys.version.split()[0]}). Each row: the mean "
        f"over the seeds base + {SEEDS}, as the notebook computes it (bases 1000.. are the perturbed run's). d_k = "
        f"d_v = {D_K}; curves at n = {N_PAIRS}, {TRIALS} draws per n and seed; rewrites: {REWRITE_N} keys, the first "
        f"r of them written again with new values, r = {REWRITES}; by age: {AGE_N} pairs, {AGE_TRIALS} draws, 'old "
        f"half' = the first {AGE_N // 2} writes, 'newest' = the last {NEWEST}; 'delta 0.5' = beta {SOFT_BETA}. "
        f"'size M Rd_k (d_k,d_v)': the section 'Larger heads', memory M at n = R d_k pairs, (d_k, d_v) in {SIZES}, "
        f"{TRIALS} draws, one seed only (base + {SEEDS[0]}), as the notebook measures it.",
        "",
        "| base | " + " | ".join(keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    for base, row in results.items():
        lines.append(f"| {base} | " + " | ".join(f"{row[k]:.3f}" for k in keys) + " |")
    lines += ["", "## Ranges over the seed groups, and the smallest gaps (the notebook's margins: about half)", ""]
    for k in keys:
        values = [row[k] for row in results.values()]
        lines.append(f"- {k}: {min(values):.3f} .. {max(values):.3f}")
    lines.append("")
    gaps = {}
    for name, (big, small, margin) in GAPS.items():
        values = [row[big] - row[small] for row in results.values()]
        gaps[name] = min(values)
        lines.append(f"- gap {name}: smallest {min(values):.3f}, largest {max(values):.3f}; the notebook's margin "
                     f"{margin} ({margin / min(values):.0%} of the smallest)")  # fmt: skip
    lines += ["", f"And {BOUNDS}.", "", f"({time.time() - start:.0f} s.)", ""]
    out = Path(__file__).with_name("calibration13_delta.md")
    out.write_text("\n".join(lines))
    out.with_suffix(".json").write_text(json.dumps({"rows": results, "smallest_gaps": gaps}, indent=1) + "\n")
    print("\n".join(lines[-len(GAPS) - 6 - len(keys) :]))


if __name__ == "__main__":
    main()
