"""Time every candidate launch configuration of the Triton attention kernels, each kernel alone, on a CUDA GPU: the
measurements from which ``attnedu.triton_attention``'s candidate lists (FORWARD_CONFIGS, DKDV_CONFIGS, DQ_CONFIGS)
are chosen. From the repository root, without installing anything but torch and triton:

    python3 benchmarks/tune_triton.py                 # bfloat16, N 4096 and 16384, head_dim 64 and 128, causal both
    python3 benchmarks/tune_triton.py --lengths 4096 --head-dims 128 --dtypes float16 float32 --causal yes
    python3 benchmarks/tune_triton.py --explore       # a wider grid: minutes per shape (every config compiles)
    python3 benchmarks/tune_triton.py --against benchmarks/attention_cuda.json --lengths 4096 16384
        # the suite's check: its forward at the configuration the suite's autotuning chose, timed alone; exit 1 where
        # the two medians differ by more than 3%

Per shape (constant tokens, as the GPU suite: batch = 16384 // N, heads = 2048 // head_dim) and per kernel (the
forward; dK/dV; dQ), every configuration in the candidate list for that head_dim, plus the fallbacks (with
--explore, a grid of block sizes, warps and stages), that fits the shared-memory and register estimate is compiled,
checked against PyTorch (outputs or gradients; "WRONG" marks a failure) and timed by the GPU suite's own timing
function, ``attnedu.bench_gpu.gpu_time`` (``time_interleaved``: untimed and timed rounds, the L2 flushed and a spin
kernel queued before each call, CUDA events; the median of 20 calls), so that a configuration measures the same
here and in the suite. TFLOP/s counts each kernel's own matrix products (forward 2, dK/dV 4
including the recomputed Q K^T, dQ 3). The last table gives, per (kernel, head_dim, dtype, causal), the candidates
ordered by their total time over the lengths, as Python to paste into the candidate lists.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # attnedu from this checkout, installed or not

import torch  # noqa: E402

from attnedu import triton_attention as ta  # noqa: E402
from attnedu.bench import DTYPES, make_inputs  # noqa: E402
from attnedu.flash import attention_flops  # noqa: E402

KERNELS = ("forward", "dkdv", "dq")
MATMULS = {"forward": 2, "dkdv": 4, "dq": 3}  # per (query, key) pair and head_dim: 2 FLOPs each
EXPLORE = {
    "forward": [(bm, bn, w, s) for bm in (64, 128) for bn in (32, 64, 128) for w in (4, 8) for s in (2, 3, 4)],
    "dkdv": [(bm, bn, w, s) for bm in (16, 32, 64) for bn in (64, 128) for w in (4, 8) for s in (2, 3, 4, 5)],
    "dq": [(bm, bn, w, s) for bm in (64, 128) for bn in (16, 32, 64) for w in (4, 8) for s in (2, 3, 4, 5)],
}
TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 1e-2, torch.float32: 1e-2}


def candidates(kind: str, head_dim: int, element_size: int, limit: int, explore: bool) -> list[dict]:
    table = {"forward": ta.FORWARD_CONFIGS, "dkdv": ta.DKDV_CONFIGS, "dq": ta.DQ_CONFIGS}[kind]
    block_d = ta._dims(head_dim, head_dim)[2]
    configs = table[ta._dim_class(block_d)] + ta.FALLBACK_CONFIGS + (EXPLORE[kind] if explore else [])
    kept = []
    for config in map(ta._as_dict, dict.fromkeys(configs)):
        smem, registers = ta._resources(kind, config, block_d, block_d, element_size)
        if smem <= limit and registers <= ta.MAX_REGISTERS:
            kept.append(config)
    return kept


def relative_error(got, expected) -> float:
    return (got.float() - expected).abs().max().item() / max(1.0, expected.abs().max().item())


def tune(
    lengths,
    head_dims,
    dtypes,
    causal_values,
    kernels=KERNELS,
    *,
    tokens=16384,
    hidden=2048,
    explore=False,
    rounds=20,
    warmup=3,
    device="cuda",
    timer=None,
    limit=None,
    log=print,
) -> dict:
    """Time the configurations (module docstring); returns {(kernel, head_dim, dtype, causal): {config: total ms}}.
    ``timer(fn) -> ms`` and ``limit`` (shared memory bytes) default to the suite's timing (``suite_timer``) and the
    GPU's; the test runs this on the CPU under Triton's interpreter with a fake timer."""
    timer = timer or suite_timer(rounds, warmup)

    limit = limit or ta._shared_memory_limit(torch.cuda.current_device())
    totals: dict[tuple, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
    for dtype_name in dtypes:
        for head_dim in head_dims:
            for causal in causal_values:
                for n in lengths:
                    shape = (max(1, tokens // n), hidden // head_dim, n, head_dim)
                    for kind, config, ms in tune_shape(shape, dtype_name, causal, kernels, explore, device, timer,
                                                       limit, log):  # fmt: skip
                        totals[(kind, head_dim, dtype_name, causal)][tuple(config.values())] += ms
                    if device == "cuda":
                        torch.cuda.empty_cache()
    log("\nCandidates by total time over the lengths, fastest first: (BLOCK_M, BLOCK_N, num_warps, num_stages)")
    for (kind, head_dim, dtype_name, causal), by_config in totals.items():
        ordered = sorted(by_config, key=by_config.get)
        log(f"{kind:<8} head_dim={head_dim:<4} {dtype_name:<9} causal={causal!s:<5} {ordered}")
    return totals


def suite_timer(rounds=20, warmup=3):
    """fn -> median ms by ``attnedu.bench_gpu.gpu_time``: the GPU suite's protocol for one callable."""
    from attnedu.bench_gpu import gpu_time

    return lambda fn: gpu_time(fn, rounds, warmup)["median"]


def check_against(suite_path, lengths=None, *, timer=None, tolerance=0.03, device="cuda", log=print) -> list[dict]:
    """The suite and this script agree: for every Triton forward row of the suite's JSON (at ``lengths``, or all)
    that recorded its autotuned configuration, the forward kernel at that configuration and shape, timed here by
    the same function, against the suite's median. Returns one row per shape (and logs a table); ``failed`` rows
    differ by more than ``tolerance``. The forward only: the suite's forward+backward also times autograd and the
    delta kernel, which no single kernel here does."""
    from attnedu.measurements import Benchmark

    timer = timer or suite_timer()
    suite = Benchmark.load(suite_path)
    rows = []
    log(
        f"{'dtype':<9}{'head_dim':>9}{'causal':>7}{'N':>7}  config (M, N, warps, stages)  suite ms  here ms  difference"
    )
    for r in suite.results:
        config = (r.config or {}).get("forward")
        if r.method != "triton" or r.mode != "forward" or r.error or not isinstance(config, dict):
            continue
        if lengths and r.n not in lengths:
            continue
        dtype = DTYPES[r.dtype]
        q, k, v = make_inputs(r.batch, r.heads, r.n, r.head_dim, dtype, device)
        launch = {key: config[key] for key in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages") if key in config}
        fn = functools.partial(ta._forward, q, k, v, r.causal, launch)
        fn()
        ms = timer(fn)
        difference = ms / r.median_ms - 1
        rows.append({"dtype": r.dtype, "head_dim": r.head_dim, "causal": r.causal, "n": r.n, "config": launch,
                     "suite_ms": r.median_ms, "here_ms": ms, "difference": difference,
                     "failed": abs(difference) > tolerance})  # fmt: skip
        shown = tuple(launch.values())
        log(f"{r.dtype:<9}{r.head_dim:>9}{r.causal!s:>7}{r.n:>7}  {shown!s:<28}{r.median_ms:>10.3f}{ms:>9.3f}"
            f"{difference:>+11.1%}{'  over' if abs(difference) > tolerance else ''}")  # fmt: skip
        del q, k, v
        if device == "cuda":
            torch.cuda.empty_cache()
    worst = max((abs(row["difference"]) for row in rows), default=0.0)
    failed = sum(row["failed"] for row in rows)
    log(f"{len(rows)} shapes; largest difference {worst:.1%}; {failed} over {tolerance:.0%}")
    return rows


def tune_shape(shape, dtype_name, causal, kernels, explore, device, timer, limit, log) -> list[tuple]:
    """Every configuration of every kernel at one shape (batch, heads, N, head_dim): checked, timed, printed fastest
    first. Returns (kernel, config, ms) of those that ran and were right."""
    batch, heads, n, head_dim = shape
    dtype = DTYPES[dtype_name]
    q, k, v = make_inputs(batch, heads, n, head_dim, dtype, device)
    grad_out = torch.randn_like(q)
    reference = [t.float().requires_grad_() for t in (q, k, v)]
    ref_out = torch.nn.functional.scaled_dot_product_attention(*reference, is_causal=causal)
    ref_grads = torch.autograd.grad(ref_out, reference, grad_out.float())
    block_d, size = ta._dims(head_dim, head_dim)[2], q.element_size()
    out, lse = ta._forward(q, k, v, causal, ta.candidate_configs("forward", block_d, block_d, size, limit)[0])
    launch = ta._BackwardLaunch(q, k, v, out, lse, grad_out, causal)
    launch.delta()
    flops = attention_flops(batch, heads, n, n, head_dim, causal) / 2  # one matrix product
    log(f"\n{dtype_name} head_dim={head_dim} causal={causal} N={n} (batch {batch}, heads {heads})")
    log(
        f"{'kernel':<8}{'BLOCK_M':>8}{'BLOCK_N':>8}{'warps':>6}{'stages':>7}{'ms':>10}{'TFLOP/s':>9}{'error':>10}  note"
    )
    timed = []
    for kind in kernels:
        first = ta.candidate_configs(kind, block_d, block_d, size, limit)[0]
        rows = []
        for config in candidates(kind, head_dim, size, limit, explore):
            if kind == "forward":
                fn = functools.partial(ta._forward, q, k, v, causal, config)
            else:
                fn = functools.partial(getattr(launch, kind), config)
            try:
                result = fn()
                if kind == "forward":
                    error = relative_error(result[0], ref_out.detach())
                else:
                    pairs = ((1, 1), (2, 2)) if kind == "dkdv" else ((0, 0),)
                    error = max(relative_error(launch.grads[i], ref_grads[j]) for i, j in pairs)
                ms = timer(fn)
            except Exception as exc:  # out of resources, a compiler error: report it, go on
                why = (str(exc).strip().splitlines() or [""])[0][:80]
                rows.append((float("inf"), config, None, f"{type(exc).__name__}: {why}"))
                continue
            wrong = error > TOLERANCE[dtype]
            rows.append(
                (ms, config, error, ("WRONG " if wrong else "") + ("first candidate" if config == first else ""))
            )
            if not wrong:
                timed.append((kind, config, ms))
        for ms, config, error, note in sorted(rows, key=lambda row: row[0]):
            if error is None:
                shown = f"{'-':>10}{'-':>9}{'-':>10}"
            else:
                shown = f"{ms:10.3f}{MATMULS[kind] * flops / (ms / 1e3) / 1e12:9.1f}{error:10.1e}"
            log(f"{kind:<8}{config['BLOCK_M']:>8}{config['BLOCK_N']:>8}{config['num_warps']:>6}"
                f"{config['num_stages']:>7}{shown}  {note}")  # fmt: skip
    return timed


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=None, help="4096 16384; --against: all")
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--dtypes", choices=sorted(DTYPES), nargs="+", default=["bfloat16"])
    parser.add_argument("--causal", choices=("no", "yes", "both"), default="both")
    parser.add_argument("--kernels", choices=KERNELS, nargs="+", default=list(KERNELS))
    parser.add_argument("--tokens", type=int, default=16384, help="batch x N")
    parser.add_argument("--hidden", type=int, default=2048, help="heads x head_dim")
    parser.add_argument("--explore", action="store_true", help="a wider grid of configurations (slow: each compiles)")
    parser.add_argument("--rounds", type=int, default=20, help="timed calls per configuration")
    parser.add_argument("--warmup-rounds", type=int, default=3)
    parser.add_argument(
        "--against",
        metavar="SUITE_JSON",
        default=None,
        help="time the suite's autotuned forward configurations alone; exit 1 above 3%% apart",
    )
    parser.add_argument("--tolerance", type=float, default=0.03)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or ta.interpreting():
        sys.exit("tune_triton.py needs a CUDA GPU, and TRITON_INTERPRET unset")
    import triton

    limit = ta._shared_memory_limit(torch.cuda.current_device())
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, shared memory "
          f"per program {limit} B (the device's, less an 8 KiB margin)", flush=True)  # fmt: skip
    if args.against:
        rows = check_against(args.against, args.lengths, timer=suite_timer(args.rounds, args.warmup_rounds),
                             tolerance=args.tolerance, log=lambda line: print(line, flush=True))  # fmt: skip
        sys.exit(1 if not rows or any(row["failed"] for row in rows) else 0)
    causal_values = {"no": [False], "yes": [True], "both": [False, True]}[args.causal]
    tune(args.lengths or [4096, 16384], args.head_dims, args.dtypes, causal_values, args.kernels, tokens=args.tokens,
         hidden=args.hidden, explore=args.explore, rounds=args.rounds, warmup=args.warmup_rounds,
         log=lambda line: print(line, flush=True))  # fmt: skip


if __name__ == "__main__":
    main()
