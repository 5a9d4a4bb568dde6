"""Two timings of lesson 10 that the lesson itself cannot afford, each with the control that tests its explanation.

    python benchmarks/cpu_cache_effects.py   # writes benchmarks/cpu_cache_effects.md (about 4 minutes)

1. **The decoding step at more lengths.** The lesson times one decoding step of its model (``DecoderLM``, 4 blocks
   of width 64, 4 heads of 16; untrained here: speed does not depend on the weights' values) at 64, 256 and 512
   tokens, recomputing the prefix and with a KV cache. Here the same step at 64 to 1,024 tokens, and, to test why
   the recomputation can grow faster than t^2, the part that grows like t^2 alone: one layer's attention written out
   (``attnedu.attention.scaled_dot_product_attention``: t x t scores, masked softmax, weights times values), timed
   for all 4 heads at once and for the same scores computed one head at a time (the same arithmetic, a quarter of
   the memory: each t x t tensor is then 4 t^2 bytes, not 16 t^2). If the cost per score rises with t only for all
   heads at once, what makes it rise is the size of the score tensors (the caches they no longer fit), not the
   arithmetic.
2. **FlexAttention without a block_mask.** ``benchmarks/inference_cpu.py`` found the compiled kernel slower given no
   ``block_mask`` than given a mask that allows every key. torch gives a call without one a mask of one block that
   spans everything (``_create_empty_block_mask``: blocks of 2^30). Timed here: no block_mask; every key allowed in
   blocks of 128 (the default) and in one block of 4,096 (the whole matrix, like torch's default), with 1 and 2
   threads (B 1, H 4, N 4,096, head_dim 64, as inference_cpu.py).

Every time: ``attnedu.bench.time_methods`` (a warm-up, then interleaved rounds, each method timed in turn by
``blocked_autorange``; median, min and max over rounds). The machine is shared: read ratios, not absolute times.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from attnedu.attention import scaled_dot_product_attention  # noqa: E402
from attnedu.bench import provenance, time_methods  # noqa: E402
from attnedu.blocks import DecoderLM  # noqa: E402
from attnedu.decoding import lm_forward  # noqa: E402
from attnedu.kv_cache import KVCache  # noqa: E402

LENGTHS = (64, 128, 256, 384, 512, 768, 1024)
SCORE_LENGTHS = (128, 256, 512, 768, 1024)
VOCAB, D_MODEL, HEADS, LAYERS = 100, 64, 4, 4  # the lesson's model (its vocabulary is about 100 characters)
FLEX_N, FLEX_HEADS, FLEX_DIM = 4096, 4, 64
ROUNDS = 5
RUNS = 4  # separate measurements of section 1


def _ms(times: list[float]) -> tuple[float, float, float]:
    ms = [t * 1000 for t in times]
    return statistics.median(ms), min(ms), max(ms)


def _decoding_calls() -> dict:
    """The lesson's decoding step (recompute, cached) at LENGTHS."""
    lm = DecoderLM(VOCAB, d_model=D_MODEL, num_heads=HEADS, num_layers=LAYERS, seed=0)
    g = torch.Generator().manual_seed(0)
    calls = {}
    for t in LENGTHS:
        ids = torch.randint(0, VOCAB, (1, t + 1), generator=g)
        cache = KVCache(LAYERS)
        with torch.no_grad():
            lm_forward(lm, ids[:, :t], cache)
        keys, values = list(cache.k), list(cache.v)

        @torch.no_grad()
        def recompute(ids=ids):
            return lm_forward(lm, ids)[0, -1]

        @torch.no_grad()
        def cached(ids=ids, cache=cache, keys=keys, values=values, t=t):
            cache.k, cache.v = list(keys), list(values)
            return lm_forward(lm, ids[:, t:], cache)[0, -1]

        calls[t, "recompute"], calls[t, "cached"] = recompute, cached
    return calls


def _score_calls() -> dict:
    """One layer's attention written out, causal: all heads at once, and the same scores one head at a time."""
    g = torch.Generator().manual_seed(1)
    calls = {}
    for t in SCORE_LENGTHS:
        q, k, v = (torch.randn(1, HEADS, t, D_MODEL // HEADS, generator=g) for _ in range(3))
        mask = torch.ones(t, t, dtype=torch.bool).tril()[None, None]

        def all_heads(q=q, k=k, v=v, mask=mask):
            return scaled_dot_product_attention(q, k, v, mask)[0]

        def one_head(q=q, k=k, v=v, mask=mask):
            heads = [scaled_dot_product_attention(q[:, h : h + 1], k[:, h : h + 1], v[:, h : h + 1], mask)[0]
                     for h in range(HEADS)]  # fmt: skip
            return torch.cat(heads, dim=1)

        calls[t, "all heads at once"], calls[t, "one head at a time"] = all_heads, one_head
    return calls


def closer_look(runs: int) -> list[str]:
    """``runs`` separate measurements, each the decoding steps then the scores (1 thread), so that they sample the
    machine at different moments: the first in full, then per run the growth of the recomputation (its exponent
    between neighbouring lengths: 2 is t^2) and the cost per score, all heads at once against one head at a time."""
    decoding, scores = _decoding_calls(), _score_calls()
    lines, growth_lines, score_lines = [], [], []
    for run in range(runs):
        load = os.getloadavg()[0]
        steps, _ = time_methods(decoding, "cpu", ROUNDS, 1, threads=1, min_run_time=0.02)
        per_call, _ = time_methods(scores, "cpu", ROUNDS, 1, threads=1, min_run_time=0.05)
        recompute = {t: _ms(steps[t, "recompute"])[0] for t in LENGTHS}
        exponents = [
            f"{a}->{b}: {math.log(recompute[b] / recompute[a]) / math.log(b / a):.1f}"
            for a, b in zip(LENGTHS[2:], LENGTHS[3:], strict=False)
        ]
        growth_lines.append(f"- run {run + 1} (load average {load:.1f} before it): recompute "
                            + ", ".join(f"{recompute[t]:.1f} ms at {t}" for t in LENGTHS[2:])
                            + "; exponents " + ", ".join(exponents))  # fmt: skip
        per_score = {key: _ms(times)[0] * 1e6 / (HEADS * key[0] ** 2) for key, times in per_call.items()}
        score_lines.append(f"- run {run + 1}: " + ", ".join(
            f"{per_score[t, 'all heads at once'] / per_score[t, 'one head at a time']:.2f} at {t}"
            for t in SCORE_LENGTHS))  # fmt: skip
        if run:
            continue
        lines += ["| t | recompute ms (min-max) | x the previous length | cached ms (min-max) | speed-up |",
                  "|---|---|---|---|---|"]  # fmt: skip
        previous = None
        for t in LENGTHS:
            slow, fast = _ms(steps[t, "recompute"]), _ms(steps[t, "cached"])
            growth = "" if previous is None else f"{slow[0] / previous[1]:.2f} (t x{t / previous[0]:.2f})"
            lines.append(f"| {t} | {slow[0]:.2f} ({slow[1]:.2f}-{slow[2]:.2f}) | {growth} | {fast[0]:.2f} "
                         f"({fast[1]:.2f}-{fast[2]:.2f}) | {slow[0] / fast[0]:.1f} |")  # fmt: skip
            previous = (t, slow[0])
        lines += ["", f"One layer's attention written out, {HEADS} heads of {D_MODEL // HEADS}, causal: all heads at "
                  "once, and the same scores one head at a time (the same arithmetic, a quarter of the memory per "
                  "tensor):", "",
                  "| t | one t x t tensor, all heads | all heads at once: ms (min-max), ns per score | one head at a "
                  "time: ms (min-max), ns per score |", "|---|---|---|---|"]  # fmt: skip
        for t in SCORE_LENGTHS:
            cells = []
            for method in ("all heads at once", "one head at a time"):
                median, low, high = _ms(per_call[t, method])
                cells.append(f"{median:.2f} ({low:.2f}-{high:.2f}), {per_score[t, method]:.2f}")
            lines.append(f"| {t} | {HEADS * t * t * 4 / 2**20:g} MiB | {cells[0]} | {cells[1]} |")
    lines += ["", f"In {runs} separate measurements (the tables above are the first), the recomputation's time and "
              "how fast it grows (the exponent p of t^p between neighbouring lengths):", "", *growth_lines, "",
              "and the cost per score of all heads at once against one head at a time (above 1: the larger tensors "
              "cost more per score):", "", *score_lines]  # fmt: skip
    return lines


def flex_block_size() -> list[str]:
    """Compiled FlexAttention: no block_mask, every key allowed in blocks of 128 and in one block of FLEX_N."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()" does not apply: compiled
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, FLEX_HEADS, FLEX_N, FLEX_DIM, generator=g) for _ in range(3))

    def allowed(b, h, q_idx, kv_idx):
        return q_idx >= 0

    masks = {
        "no block_mask (torch's default: one block of 2^30)": None,
        "every key allowed, blocks of 128": create_block_mask(allowed, 1, 1, FLEX_N, FLEX_N, device="cpu"),
        f"every key allowed, one block of {FLEX_N}": create_block_mask(
            allowed, 1, 1, FLEX_N, FLEX_N, device="cpu", BLOCK_SIZE=FLEX_N
        ),
    }
    lines = ["| mask | 2 threads: ms (min-max) | 1 thread: ms (min-max) |", "|---|---|---|"]
    results = {}
    for threads in (2, 1):  # compiled afresh for each: the compiled kernel keeps the threads it was compiled with
        torch._dynamo.reset()
        torch.set_num_threads(threads)
        compiled = torch.compile(flex_attention)
        for mask in masks.values():
            compiled(q, k, v, block_mask=mask)  # compiled outside the timing
        calls = {name: (lambda m=mask, c=compiled: c(q, k, v, block_mask=m)) for name, mask in masks.items()}
        seconds, _ = time_methods(calls, "cpu", ROUNDS, 1, threads=threads, min_run_time=0.05)
        for name, times in seconds.items():
            results[name, threads] = _ms(times)
    for name in masks:
        cells = [f"{m:.1f} ({lo:.1f}-{hi:.1f})" for m, lo, hi in (results[name, 2], results[name, 1])]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    base = "every key allowed, blocks of 128"
    against = [
        f"{name}: {results[name, 2][0] / results[base, 2][0]:.2f} (2 threads), "
        f"{results[name, 1][0] / results[base, 1][0]:.2f} (1 thread)"
        for name in masks
        if name != base
    ]
    lines += ["", "Against every key allowed in blocks of 128: " + "; ".join(against) + "."]
    return lines


def main() -> None:
    start = time.perf_counter()
    info = provenance("cpu", "float32", 1, HEADS, 1, ROUNDS, 1, 0.02)
    closer, flex = closer_look(RUNS), flex_block_size()
    lines = [
        "# Lesson 10's timings, looked at closer (CPU)",
        "",
        f"Made by `python benchmarks/cpu_cache_effects.py` on {info['date']}: {info['device']}, {info['cpu_count']} "
        f"cores, torch {info['torch']}, Python {info['python']}, load average before {info['load_average_before']}; "
        f"{time.perf_counter() - start:.0f} s. Every time: 1 warm-up call, then {ROUNDS} rounds in which every "
        "method is timed in turn by torch.utils.benchmark's blocked_autorange; median, min and max over the rounds. "
        "What each section tests is in the script's docstring. The machine is shared with other work (the load "
        "averages say how much): read ratios, and how they vary, not absolute times.",
        "",
        "## 1. The decoding step of the lesson's model at more lengths (1 thread)",
        "",
        *closer,
        "",
        f"## 2. Compiled FlexAttention without a block_mask (B 1, H {FLEX_HEADS}, N {FLEX_N}, head_dim {FLEX_DIM})",
        "",
        *flex,
    ]
    (HERE / "cpu_cache_effects.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
