"""Lesson 10's benchmark: decoding speed and cache bytes of MHA, GQA, MQA, a sliding window and MLA on this CPU,
with provenance; what FlexAttention costs on the CPU and what its BlockMask buys there (eager, and compiled with
torch.compile, for masks that skip more or fewer blocks); and the extra memory of softmax attention (written out, and
torch's fused kernel) against linear attention as N grows.

    python benchmarks/inference_cpu.py [--threads 2] [--repeats 5]   # writes benchmarks/inference_cpu.{json,md}

Whole models (``DecoderLM``, untrained: speed does not depend on the weights' values) decode one token after a
context of t tokens already in a cache (``attnedu.kv_cache.KVCache`` or ``RollingKVCache``); the same model
without a cache recomputes all t + 1 tokens. MLA has no model in the package, so it is timed as one attention layer's
decoding step (``mla_attention``-style absorbed form over a cache of latents, and the explicit form that recomputes
every cached token's keys and values from its latent) against the same layer's MHA step, with DeepSeek-V2's ratio of
latent to head size (d_c = 4 head_dim).
Each time: ``attnedu.bench.time_methods`` (a warm-up, then rounds in which every method is timed in turn by
torch.utils.benchmark's blocked_autorange; median, min and max over rounds).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from attnedu.bench import measure_memory, provenance, time_methods  # noqa: E402
from attnedu.blocks import DecoderLM  # noqa: E402
from attnedu.cache_sizes import decode_step_costs, kv_cache_bytes, mla_cache_bytes  # noqa: E402
from attnedu.decoding import lm_forward  # noqa: E402
from attnedu.flex_masks import causal_mod, document_mod, flex_attention_cpu, sliding_window_mod  # noqa: E402
from attnedu.kv_cache import KVCache, RollingKVCache  # noqa: E402

D_MODEL, HEADS, LAYERS, VOCAB, WINDOW = 256, 8, 4, 100, 256
LATENT = 4 * (D_MODEL // HEADS)  # d_c = 4 head_dim, DeepSeek-V2's ratio (512 = 4 x 128)
LENGTHS = (256, 1024, 2048)
VARIANTS = {"MHA": 8, "GQA-2": 2, "MQA": 1, f"MHA, window {WINDOW}": 8}


def model_steps(lengths) -> tuple[dict, dict]:
    """Decoding one token after t cached tokens, for each variant and length; cache bytes after t tokens."""
    calls, sizes = {}, {}
    g = torch.Generator().manual_seed(0)
    for name, kv_heads in VARIANTS.items():
        model = DecoderLM(VOCAB, D_MODEL, HEADS, LAYERS, num_kv_heads=kv_heads, seed=0).eval()
        for t in lengths:
            ids = torch.randint(0, VOCAB, (1, t + 1), generator=g)
            cache = RollingKVCache(LAYERS, WINDOW) if "window" in name else KVCache(LAYERS)
            with torch.no_grad():
                lm_forward(model, ids[:, :t], cache)
            sizes[name, t] = cache.nbytes()
            keys, values = list(cache.k), list(cache.v)

            def step(model=model, cache=cache, keys=keys, values=values, ids=ids, t=t, rolling="window" in name):
                if not rolling:  # the cache of t tokens, every time (a rolling buffer stays the same size anyway,
                    cache.k, cache.v = list(keys), list(values)  # and moves on by one position per call)
                with torch.no_grad():
                    return lm_forward(model, ids[:, t:], cache)

            calls[name, t] = step
        if name == "MHA":
            for t in lengths:
                ids = torch.randint(0, VOCAB, (1, t + 1), generator=g)

                def recompute(model=model, ids=ids):
                    with torch.no_grad():
                        return model(ids)[0, -1]

                calls["MHA, no cache", t] = recompute
    return calls, sizes


def mla_steps(lengths) -> tuple[dict, dict]:
    """One attention layer's decoding step: MHA over cached K, V (2 x heads x head_dim numbers per token) against
    MLA over cached latents (LATENT numbers per token), absorbed and with the keys and values recomputed."""
    head_dim = D_MODEL // HEADS
    g = torch.Generator().manual_seed(1)
    W_q, W_o = torch.randn(D_MODEL, D_MODEL, generator=g) / 16, torch.randn(D_MODEL, D_MODEL, generator=g) / 16
    W_uk = torch.randn(LATENT, HEADS, head_dim, generator=g) / 8
    W_uv = torch.randn(LATENT, HEADS * head_dim, generator=g) / 8
    W_uv_o = torch.randn(HEADS, LATENT, D_MODEL, generator=g) / 8  # W_uv,h W_o,h folded, as the absorbed form keeps
    calls, sizes = {}, {}
    for t in lengths:
        x = torch.randn(1, D_MODEL, generator=g)
        k, v = torch.randn(HEADS, t, head_dim, generator=g), torch.randn(HEADS, t, head_dim, generator=g)
        c = torch.randn(t, LATENT, generator=g)

        def mha(x=x, k=k, v=v):
            q = (x @ W_q).view(HEADS, 1, head_dim)
            w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(head_dim), -1)
            return (w @ v).reshape(1, D_MODEL) @ W_o

        def mla(x=x, c=c):
            q = (x @ W_q).view(HEADS, head_dim)
            q_latent = torch.einsum("hd,chd->hc", q, W_uk)  # (heads, latent)
            w = torch.softmax(q_latent @ c.T / math.sqrt(head_dim), -1)  # (heads, t)
            return torch.einsum("hc,hce->e", w @ c, W_uv_o)

        def mla_recomputed(x=x, c=c, t=t):
            q = (x @ W_q).view(HEADS, 1, head_dim)
            keys = (c @ W_uk.reshape(LATENT, -1)).view(t, HEADS, head_dim).transpose(0, 1)  # every cached token's
            values = (c @ W_uv).view(t, HEADS, head_dim).transpose(0, 1)  # keys and values, again
            w = torch.softmax(q @ keys.transpose(1, 2) / math.sqrt(head_dim), -1)
            return (w @ values).reshape(1, D_MODEL) @ W_o

        calls["layer: MHA", t], calls["layer: MLA (absorbed)", t] = mha, mla
        calls["layer: MLA (keys recomputed)", t] = mla_recomputed
        sizes["layer: MHA", t] = 2 * k.numel() * k.element_size()
        sizes["layer: MLA (absorbed)", t] = sizes["layer: MLA (keys recomputed)", t] = c.numel() * c.element_size()
    return calls, sizes


FLEX_N, FLEX_HEADS, FLEX_DIM, FLEX_BLOCK = 4096, 4, 64, 128  # FlexAttention's default block of 128 x 128
FLEX_MASKS = {
    "no block_mask": None,
    "every key allowed": lambda b, h, q_idx, kv_idx: q_idx >= 0,
    "causal": causal_mod,
    "documents (8 of 512)": document_mod(torch.arange(FLEX_N)[None] // 512),
    "sliding window (256 back)": sliding_window_mod(256),
}


def flex_costs(repeats: int, threads: int) -> dict:
    """FlexAttention on the CPU (B 1, H 4, N 4096, d 64): for each mask of the ladder, the share of 128 x 128 blocks
    its BlockMask skips, the time of one forward call eager and compiled (torch.compile; the first call, compilation
    included, timed apart), and torch's fused SDPA with the same mask written out as a dense bool tensor; whether the
    backward runs, eager and compiled. Timed like the rest (time_methods: warm-up, interleaved rounds, median)."""
    from torch.nn.attention.flex_attention import create_block_mask, create_mask, flex_attention

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, FLEX_HEADS, FLEX_N, FLEX_DIM, generator=g) for _ in range(3))
    compiled = torch.compile(flex_attention)
    out = {"shape": f"B 1, H {FLEX_HEADS}, N {FLEX_N}, head_dim {FLEX_DIM}, blocks of {FLEX_BLOCK}", "masks": {}}
    calls = {}
    for name, mod in FLEX_MASKS.items():
        block_mask = None if mod is None else create_block_mask(mod, 1, 1, FLEX_N, FLEX_N, device="cpu")
        dense = None if mod is None else create_mask(mod, 1, 1, FLEX_N, FLEX_N, device="cpu")
        start = time.perf_counter()
        compiled(q, k, v, block_mask=block_mask)
        first = time.perf_counter() - start
        out["masks"][name] = {"skipped": 0.0 if block_mask is None else block_mask.sparsity() / 100,
                              "compile_and_first_call_s": first}  # fmt: skip

        def eager(bm=block_mask):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return flex_attention(q, k, v, block_mask=bm)

        calls[name, "eager"] = eager
        calls[name, "compiled"] = lambda bm=block_mask: compiled(q, k, v, block_mask=bm)
        calls[name, "sdpa"] = lambda m=dense: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
    seconds, _ = time_methods(calls, "cpu", repeats, 1, threads=threads, min_run_time=0.05)
    for (name, method), times in seconds.items():
        ms = [s_ * 1000 for s_ in times]
        out["masks"][name][method] = {"median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms)}
    block_mask = create_block_mask(causal_mod, 1, 1, FLEX_N, FLEX_N, device="cpu")
    for label, fn in (("backward, eager", flex_attention), ("backward, compiled", compiled)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(q.clone().requires_grad_(), k, v, block_mask=block_mask).sum().backward()
            out[label] = "ran"
        except Exception as error:  # noqa: BLE001 - recorded, not raised: the benchmark says what failed
            out[label] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    small = tuple(t[:, :, :256, :32].contiguous() for t in (q, k, v))  # the lesson's eager first call, in a fresh run
    start = time.perf_counter()
    flex_attention_cpu(*small, causal_mod)
    out["eager, first call in a process (N 256, head_dim 32)_s"] = time.perf_counter() - start
    return out


MEMORY_LENGTHS = (1024, 4096, 8192)
MEMORY_METHODS = {"naive": "softmax, written out (N x N scores)", "sdpa": "softmax, torch SDPA (fused)",
                  "linear": "linear attention"}  # fmt: skip


def attention_memory() -> dict:
    """Extra resident memory (MiB) of one non-causal forward call, one head of 32, batch 1, in a fresh process each
    (``attnedu.bench.measure_memory``): softmax attention written out, torch's fused SDPA, linear attention."""
    return {method: {str(n): measure_memory(method, 1, 1, n, 32, "float32", False, "cpu") for n in MEMORY_LENGTHS}
            for method in MEMORY_METHODS}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-run-time", type=float, default=0.05)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    info = provenance("cpu", "float32", 1, HEADS, args.threads, args.repeats, 1, args.min_run_time)
    info.update(model=f"DecoderLM, d_model {D_MODEL}, {HEADS} query heads of {D_MODEL // HEADS}, {LAYERS} layers, "
                      f"vocabulary {VOCAB}, untrained; batch 1; window {WINDOW}; MLA latent {LATENT}")  # fmt: skip
    flex = flex_costs(args.repeats, args.threads)  # first: its eager first call must be the process's first
    calls, sizes = model_steps(LENGTHS)
    layer_calls, layer_sizes = mla_steps(LENGTHS)
    calls.update(layer_calls)
    sizes.update(layer_sizes)
    seconds, failed = time_methods(calls, "cpu", args.repeats, 1, threads=args.threads,
                                   min_run_time=args.min_run_time)  # fmt: skip
    rows = []
    for (name, t), times in seconds.items():
        ms = [s * 1000 for s in times]
        rows.append({"method": name, "context": t, "ms_per_token": statistics.median(ms), "min_ms": min(ms),
                     "max_ms": max(ms), "tokens_per_s": 1000 / statistics.median(ms),
                     "cache_bytes": sizes.get((name, t))})  # fmt: skip
    head_dim = D_MODEL // HEADS
    formulas = {
        name: kv_cache_bytes(LAYERS, kv, head_dim, 4, tokens=max(LENGTHS), window=WINDOW if "window" in name else None)
        for name, kv in VARIANTS.items()
    }
    formulas["layer: MLA"] = mla_cache_bytes(1, LATENT, 0, 4, tokens=max(LENGTHS))
    costs = decode_step_costs(HEADS, head_dim, LATENT)
    memory = attention_memory()
    result = {"provenance": info, "rows": rows, "failed": {str(k): v for k, v in failed.items()},
              "cache_bytes_by_formula_at_max_context": formulas, "mla_layer": {"heads": HEADS, "head_dim": head_dim,
              "latent_dim": LATENT, "costs_per_cached_token": costs}, "flex_attention_cpu": flex,
              "attention_memory_mib": memory}  # fmt: skip
    (HERE / "inference_cpu.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        "# Attention at inference on the CPU (lesson 10)",
        "",
        f"Made by `python benchmarks/inference_cpu.py --threads {args.threads} --repeats {args.repeats}` on "
        f"{info['date']}: {info['device']}, {info['cpu_count']} cores, torch {info['torch']}, Python {info['python']}, "
        f"{args.threads} thread(s), load average before {info['load_average_before']}. {info['model']}.",
        "",
        f"Timing: {info['timing']}. The machine is shared and noisy (a 2-core CPU can vary by a factor of 2 between "
        "runs): read ratios, not absolute times.",
        "",
        "| method | context t | ms per token (median) | min-max | tokens/s | cache bytes after t tokens |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        cache = "-" if r["cache_bytes"] is None else f"{r['cache_bytes']:,}"
        lines.append(f"| {r['method']} | {r['context']} | {r['ms_per_token']:.3f} | {r['min_ms']:.3f}-"
                     f"{r['max_ms']:.3f} | {r['tokens_per_s']:,.0f} | {cache} |")  # fmt: skip
    lines += ["", f"Cache bytes by formula at t = {max(LENGTHS)} (float32): " + "; ".join(
        f"{k} {v:,}" for k, v in formulas.items()) + ". The layer rows hold one layer's cache.", ""]  # fmt: skip
    lines.append(f"The MLA layer ({HEADS} heads of {head_dim}, latent {LATENT}), per cached token and step: "
                 + "; ".join(f"{name} reads {c['numbers read']} numbers and does {c['multiply-adds']:,} multiply-adds"
                             for name, c in costs.items()) + " (attnedu.cache_sizes.decode_step_costs).")  # fmt: skip
    lines += ["", f"FlexAttention on the CPU ({flex['shape']}; 1 warm-up, {args.repeats} interleaved rounds, median "
              "ms; compiled = torch.compile(flex_attention), its first call timed apart; SDPA = torch's fused "
              "scaled_dot_product_attention with the same mask as a dense bool tensor):", "",
              "| mask | blocks skipped | eager ms | compiled ms | SDPA ms | compile + first call s |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for name, m in flex["masks"].items():
        lines.append(f"| {name} | {m['skipped']:.1%} | {m['eager']['median_ms']:.1f} | "
                     f"{m['compiled']['median_ms']:.1f} | {m['sdpa']['median_ms']:.1f} | "
                     f"{m['compile_and_first_call_s']:.2f} |")  # fmt: skip
    lines += ["", f"Backward, eager: {flex['backward, eager']}. Backward, compiled: {flex['backward, compiled']}. "
              f"The eager first call in a fresh process (N 256, head_dim 32, causal): "
              f"{flex['eager, first call in a process (N 256, head_dim 32)_s']:.2f} s."]  # fmt: skip
    lines += ["", "Extra memory of one forward call (MiB, beyond inputs and output; one head of 32, batch 1, not "
              "causal; "
              "a fresh process per entry, 1 thread, as attnedu.bench.measure_memory):", "",
              "| method | " + " | ".join(f"N = {n}" for n in MEMORY_LENGTHS) + " |",
              "|---|" + "---|" * len(MEMORY_LENGTHS)]  # fmt: skip
    for method, label in MEMORY_METHODS.items():
        lines.append(f"| {label} | " + " | ".join(f"{memory[method][str(n)]:.1f}" for n in MEMORY_LENGTHS) + " |")
    (HERE / "inference_cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
