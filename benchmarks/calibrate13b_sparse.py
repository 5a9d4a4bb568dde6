"""Calibrate lesson 13b's sparse-selection asserts over seeds (notebooks/13b_sparse_selection_and_delta_rule.ipynb,
section "Sparse selection"). Nothing is trained: each seed builds the lesson's retrieval task
(``attnedu.sparse_attention.retrieval_task``, the lesson's arguments) and runs the lesson's calls (dense, window, MoBA,
DSA, the sweep over k, the block sizes). Seeds are the lesson's ``training_seed(13)``: 13 plus ATTNEDU_SEED_OFFSET,
so offset 1000 is the test command's perturbed run. Prints a markdown table, one row per seed, and each asserted
quantity's range next to the bound the lesson asserts.

    python benchmarks/calibrate13b_sparse.py [--offsets 0 1 ... 1000] >> benchmarks/calibration13b_sparse.md
    MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default python benchmarks/calibrate13b_sparse.py ...   (the perturbed path)
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F

from attnedu.sparse_attention import (
    dsa_attention,
    moba_attention,
    retrieval_recall,
    retrieval_task,
    sliding_window_attention,
)

# the lesson's constants (its second code cell and the cells after it)
N, HEAD_DIM, SEQUENCES, ASKED, WINDOW, PASSAGE, INDEX_DIM = 1024, 64, 4, 64, 128, 64, 16
MOBA_BLOCK, MOBA_TOP_K, DSA_TOP_K = 64, 2, 32
MOBA_TOP_KS = {16: (2, 4, 8, 16), 64: (2, 3, 4, 8)}
DSA_TOP_KS = (8, 16, 32, 64, 128)
BLOCKS = (8, 16, 32, 64, 128)

# (quantity, the lesson's bound, "min" or "max": which end of the observed range the bound guards)
ASSERTED = [
    ("dense recall, worst sequence", 0.9, "min"),
    ("window recall, best sequence", 0.1, "max"),
    ("MoBA recall (mean)", 0.9, "min"),
    ("DSA recall (mean)", 0.8, "min"),
    ("float64 gap, covering all", 1e-6, "max"),
    ("float64 gap, one block fewer", 1e-3, "min"),
    ("MoBA-64 bytes for recall >= 0.95, c = 0.6", 0.3, "max"),
    ("MoBA-64 x4: c = 0.6 minus c = 0", 0.2, "min"),
    ("DSA top 32 minus MoBA-64 x4, c = 0", 0.2, "min"),
    ("needle: B = 8 minus B = 128, c = 0", 0.3, "min"),
    ("c = 0.6: worst recall, B <= 64", 0.9, "min"),
]
REPORTED = ["DSA top 32: c = 0 minus c = 0.6", "needle recall B = 64, c = 0"]


def task_with(topic, seed):
    return retrieval_task(N, HEAD_DIM, batch=SEQUENCES, passage=PASSAGE, topic=topic, asked=ASKED, window=WINDOW,
                          index_dim=INDEX_DIM, seed=seed)  # fmt: skip


def dense_attention(t):
    return F.scaled_dot_product_attention(t.q, t.k, t.v, is_causal=True)


def measure(seed: int) -> dict:
    out = {}
    task = task_with(0.6, seed)
    out["dense recall, worst sequence"] = retrieval_recall(dense_attention(task), task).min().item()
    window = sliding_window_attention(task.q, task.k, task.v, WINDOW).output
    out["window recall, best sequence"] = retrieval_recall(window, task).max().item()
    moba = moba_attention(task.q, task.k, task.v, MOBA_BLOCK, MOBA_TOP_K).output
    out["MoBA recall (mean)"] = retrieval_recall(moba, task).mean().item()
    out["DSA recall (mean)"] = retrieval_recall(dsa_attention(*task[:6], DSA_TOP_K).output, task).mean().item()

    small = retrieval_task(256, 16, batch=2, asked=16, window=32, seed=seed, dtype=torch.float64)
    reference = dense_attention(small)
    covering = [moba_attention(small.q, small.k, small.v, 32, 8).output, dsa_attention(*small[:6], 256).output,
                sliding_window_attention(small.q, small.k, small.v, 255).output]  # fmt: skip
    out["float64 gap, covering all"] = max((o - reference).abs().max().item() for o in covering)
    fewer = moba_attention(small.q, small.k, small.v, 32, 7).output
    out["float64 gap, one block fewer"] = (fewer - reference).abs().max().item()

    sweep = {}
    for topic in (0.6, 0.0):
        t = task_with(topic, seed)
        for block, top_ks in MOBA_TOP_KS.items():
            for top_k in top_ks:
                r = moba_attention(t.q, t.k, t.v, block, top_k)
                sweep[topic, block, top_k] = (r.counts.kv_bytes_fraction, retrieval_recall(r.output, t).mean().item())
        for top_k in DSA_TOP_KS:
            r = dsa_attention(*t[:6], top_k)
            sweep[topic, "DSA", top_k] = (r.counts.kv_bytes_fraction, retrieval_recall(r.output, t).mean().item())
    reached = [v[0] for (tp, m, _), v in sweep.items() if tp == 0.6 and m == 64 and v[1] >= 0.95]
    out["MoBA-64 bytes for recall >= 0.95, c = 0.6"] = min(reached, default=float("inf"))
    out["MoBA-64 x4: c = 0.6 minus c = 0"] = sweep[0.6, 64, 4][1] - sweep[0.0, 64, 4][1]
    out["DSA top 32 minus MoBA-64 x4, c = 0"] = sweep[0.0, "DSA", 32][1] - sweep[0.0, 64, 4][1]
    out["DSA top 32: c = 0 minus c = 0.6"] = sweep[0.0, "DSA", 32][1] - sweep[0.6, "DSA", 32][1]

    needle = {}
    for topic in (0.0, 0.6):
        t = task_with(topic, seed)
        for block in BLOCKS:
            needle[topic, block] = retrieval_recall(moba_attention(t.q, t.k, t.v, block, 256 // block).output, t)
            needle[topic, block] = needle[topic, block].mean().item()
    out["needle: B = 8 minus B = 128, c = 0"] = needle[0.0, 8] - needle[0.0, 128]
    out["c = 0.6: worst recall, B <= 64"] = min(needle[0.6, b] for b in BLOCKS[:-1])
    out["needle recall B = 64, c = 0"] = needle[0.0, 64]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offsets", type=int, nargs="+", default=[*range(20), 1000])
    args = parser.parse_args()
    torch.set_num_threads(1)
    kernels = ", ".join(f"{k}={os.environ[k]}" for k in ("MKL_CBWR", "ATEN_CPU_CAPABILITY") if k in os.environ)
    rows = {offset: measure(13 + offset) for offset in args.offsets}
    print(f"\n## Seeds 13 + {args.offsets}, kernels: {kernels or 'native'} (torch {torch.__version__})\n")
    print("| quantity | lesson's bound | observed min | observed max | smallest gap to the bound |")
    print("|---|---|---|---|---|")
    for name, bound, end in ASSERTED:
        values = [r[name] for r in rows.values()]
        low, high = min(values), max(values)
        gap = low - bound if end == "min" else bound - high
        print(f"| {name} | {'>=' if end == 'min' else '<='} {bound:g} | {low:.3g} | {high:.3g} | {gap:.3g} |")
    for name in REPORTED:
        values = [r[name] for r in rows.values()]
        print(f"| {name} (reported, not asserted) | - | {min(values):.3g} | {max(values):.3g} | - |")


if __name__ == "__main__":
    main()
