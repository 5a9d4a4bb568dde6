"""The GPU half of ``attnedu.bench``: ``python -m attnedu.bench --gpu-suite`` (``make gpu-bench``), and the timing
and measuring of one method at one shape on a CUDA GPU. The method (do_bench, first call apart, memory, constant
tokens) is described in ``attnedu.bench``'s docstring; the methods, inputs and results (``Benchmark``,
``Measurement``) are ``attnedu.measurements``', which this module and ``attnedu.bench`` import (``bench`` imports
this one; this one never imports ``bench``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence

import torch

from . import measurements
from ._validate import check_int, check_number
from .measurements import (
    DTYPES,
    MODES,
    Benchmark,
    Method,
    MiB,
    check_names,
    check_run_arguments,
    format_ms,
    format_tflops,
    free_cache,
    is_out_of_memory,
    load_average,
    make_call,
    make_inputs,
    make_measurement,
    nbytes,
    provenance,
)

GPU_SUITE = {
    "lengths": (1024, 2048, 4096, 8192, 16384),
    "head_dims": (64, 128),
    "dtypes": ("bfloat16", "float16"),
    "causal": (False, True),
    "modes": MODES,
    "methods": ("triton", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "naive"),
    "tokens": 16384,  # batch x N, as FlashAttention-2's benchmark
    "hidden": 2048,  # heads x head_dim
    "warmup_ms": 25,
    "rep_ms": 100,
}


def gpu_time(fn: Callable[[], object], warmup_ms: float = 25, rep_ms: float = 100) -> dict[str, float]:
    """Milliseconds per call of ``fn`` on the GPU: median, 20th and 80th percentiles, min, max, by
    ``triton.testing.do_bench`` (L2 flushed before every call, CUDA events, one synchronize at the end); without
    triton, the same method written out."""
    quantiles = [0.5, 0.2, 0.8, 0.0, 1.0]
    try:
        from triton.testing import do_bench
    except ImportError:
        values = _do_bench_events(fn, warmup_ms, rep_ms, quantiles)
    else:
        values = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=quantiles, return_mode="median")
    return dict(zip(("median", "q20", "q80", "min", "max"), values))


def _do_bench_events(fn, warmup_ms, rep_ms, quantiles):
    """do_bench's method without triton: estimate, warm up, then per call zero a 256 MB buffer (L2 flush) and time
    the call alone between CUDA events; one synchronize at the end."""
    cache = torch.empty(256 * MiB // 4, dtype=torch.int, device="cuda")
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        cache.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup_ms / estimate))):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(max(1, int(rep_ms / estimate)))]  # fmt: skip
    for begin, finish in events:
        cache.zero_()
        begin.record()
        fn()
        finish.record()
    torch.cuda.synchronize()
    times = torch.tensor([b.elapsed_time(f) for b, f in events])
    return torch.quantile(times, torch.tensor(quantiles)).tolist()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _refusal(method: Method, error: BaseException, caught: list) -> str | None:
    """'not supported: <why>' when a pinned SDPA backend refused this shape (it raises and warns why), else None."""
    if not (method.name.startswith("sdpa") and isinstance(error, RuntimeError)):
        return None
    reasons = [str(w.message).strip() for w in caught if issubclass(w.category, UserWarning)]
    why = "; ".join(dict.fromkeys(reasons)) or str(error).strip().splitlines()[0]
    return "not supported: " + " ".join(why.split())[:300]


def measure(method: Method, q, k, v, is_causal: bool, mode: str, device: str, grad_out=None, *, memory: bool = True,
            warmup_ms: float = 25, rep_ms: float = 100) -> dict:  # fmt: skip
    """One method at one shape on ``device`` (a GPU, or in tests the CPU with a fake ``gpu_time``): the first call
    (timed apart: compilation, autotuning), the extra and peak memory of one call (CUDA only), then ``gpu_time``.
    Returns the fields of a Measurement, with ``error`` set if the method ran out of memory or refused the shape."""
    call = make_call(method.fn, q, k, v, is_causal, mode, grad_out)
    result: dict = {}
    returned = None
    with method.context(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            _sync(device)
            begin = time.perf_counter()
            returned = call()
            _sync(device)
            result["first_call_ms"] = (time.perf_counter() - begin) * 1000
            if memory and device == "cuda":
                returned = None
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
                returned = call()
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated()
                result["extra_mib"] = (peak - before - nbytes(returned)) / MiB
                result["peak_mib"] = peak / MiB
            returned = None
            result.update(gpu_time(call, warmup_ms, rep_ms))
        except Exception as error:
            del returned  # free what a call returned before an error, before freeing the cache
            if is_out_of_memory(error):
                result = {"error": "out of memory"}
            else:
                refusal = _refusal(method, error, caught)
                if refusal is None:
                    raise
                result = {"error": refusal}
            free_cache(device)
    return result


def run_gpu_suite(
    lengths: Sequence[int] = GPU_SUITE["lengths"],
    head_dims: Sequence[int] = GPU_SUITE["head_dims"],
    dtypes: Sequence[str] = GPU_SUITE["dtypes"],
    causal: Sequence[bool] = GPU_SUITE["causal"],
    modes: Sequence[str] = GPU_SUITE["modes"],
    methods: Sequence[str] = GPU_SUITE["methods"],
    *,
    tokens: int = GPU_SUITE["tokens"],
    hidden: int = GPU_SUITE["hidden"],
    warmup_ms: float = GPU_SUITE["warmup_ms"],
    rep_ms: float = GPU_SUITE["rep_ms"],
    log: Callable[[str], None] | None = print,
) -> Benchmark:
    """The GPU comparison (module docstring): every (dtype, head_dim, causal, mode, N) with batch = tokens // N
    and heads = hidden // head_dim; each method measured by ``measure``. A method that runs out of memory at some
    N is recorded so there, and not tried at longer N of the same series (its memory only grows with N at constant
    tokens). Refuses to run without a CUDA GPU."""
    _check_suite(lengths, head_dims, dtypes, causal, modes, methods, tokens, hidden, warmup_ms, rep_ms)
    if not torch.cuda.is_available():
        raise RuntimeError(
            "the GPU suite needs a CUDA GPU, and torch sees none (torch.cuda.is_available() is False"
            + (", this torch is a CPU build" if torch.version.cuda is None else "")
            + "): run it on a machine with an NVIDIA GPU after `make cuda`; on the CPU use python -m attnedu.bench"
        )
    return _run_suite(lengths, head_dims, dtypes, causal, modes, methods, tokens, hidden, warmup_ms, rep_ms, log,
                      "cuda")  # fmt: skip


def _check_suite(lengths, head_dims, dtypes, causal, modes, methods, tokens, hidden, warmup_ms, rep_ms) -> None:
    check_run_arguments(lengths, head_dims, causal, methods, modes)
    check_names("dtypes", dtypes, tuple(DTYPES))
    check_int("tokens", tokens, "batch x N, constant over N", minimum=1)
    check_int("hidden", hidden, "heads x head_dim, constant over head_dim", minimum=1)
    for head_dim in head_dims:
        if hidden % head_dim:
            raise ValueError(f"hidden={hidden} is not a multiple of head_dim={head_dim}: heads = hidden // head_dim "
                             "would not be a whole number; pass --hidden as a multiple of every head_dim")  # fmt: skip
    check_number("warmup_ms", warmup_ms, "do_bench warm-up time", minimum=0, strict=True)
    check_number("rep_ms", rep_ms, "do_bench timing time", minimum=0, strict=True)


def _run_suite(lengths, head_dims, dtypes, causal, modes, methods, tokens, hidden, warmup_ms, rep_ms, log,
               device: str) -> Benchmark:  # fmt: skip
    """The suite's loop on ``device`` (``run_gpu_suite`` passes "cuda"; the tests run it on the CPU with a fake
    ``gpu_time`` and fake methods)."""
    log = log or (lambda line: None)
    info = provenance(device, ", ".join(dtypes), 0, 0, torch.get_num_threads(), 1, 0)
    info.pop("threads", None)
    info["dtypes"] = list(dtypes)
    info["batch"] = f"{tokens} // N (batch x N = {tokens}, at least 1)"
    info["heads"] = f"{hidden} // head_dim (heads x head_dim = {hidden})"
    info["shapes"] = (f"constant tokens, as FlashAttention-2's benchmark: batch x N = {tokens}, heads x head_dim = "
                      f"{hidden}; query_len = key_len = N; inputs from torch.randn")  # fmt: skip
    info["timing"] = (f"triton.testing.do_bench(warmup={warmup_ms} ms, rep={rep_ms} ms) per method and shape: "
                      "L2 flushed before every call, CUDA events around each, one synchronize at the end; median, "
                      "20th-80th percentiles, min, max")  # fmt: skip
    info["suite"] = True
    info["modes"] = list(modes)
    bench = Benchmark(info)
    series = [(dtype, d, c, mode) for dtype in dtypes for d in head_dims for c in causal for mode in modes]
    total, done, start = len(series) * len(lengths), 0, time.perf_counter()
    labels: dict[str, str] = {}
    for dtype, head_dim, is_causal, mode in series:
        chosen = measurements.make_methods(device, DTYPES[dtype], methods)  # looked up here: tests replace it
        labels.update({name: m.label for name, m in chosen.items()})
        ran_out: dict[str, int] = {}  # method -> the N at which it ran out of memory in this series
        heads = hidden // head_dim
        for n in lengths:
            batch = max(1, tokens // n)
            backward = mode == "forward+backward"
            q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], device, requires_grad=backward)
            grad_out = torch.randn_like(q) if backward else None
            cells = []
            for name, method in chosen.items():
                if name in ran_out:
                    result = {"error": f"out of memory (not run: out of memory at N={ran_out[name]} already)"}
                else:
                    result = measure(method, q, k, v, is_causal, mode, device, grad_out, warmup_ms=warmup_ms,
                                     rep_ms=rep_ms)  # fmt: skip
                    if result.get("error", "").startswith("out of memory"):
                        ran_out[name] = n
                row = make_measurement(name, method, n, head_dim, is_causal, mode, dtype, batch, heads, [], **result)
                bench.results.append(row)
                cells.append(f"{name} {row.error[:40]}" if row.error else
                             f"{name} {format_ms(row.median_ms)} ms {format_tflops(row.tflops)} TFLOP/s")  # fmt: skip
            del q, k, v, grad_out
            free_cache(device)
            done += 1
            elapsed = time.perf_counter() - start
            log(f"[{done}/{total}, {elapsed:.0f} s] {mode} {dtype} head_dim={head_dim} causal={is_causal} N={n} "
                f"(batch {batch}, heads {heads}): " + "; ".join(cells))  # fmt: skip
    info["methods"] = labels
    info["skipped"] = {name: "cannot run here" for name in methods if name not in labels}
    info["load_average_after"] = load_average()
    info["seconds"] = round(time.perf_counter() - start, 1)
    return bench


def plot_throughput(fig, bench: Benchmark, dtype: str | None = None):
    """TFLOP/s against N, one line per method, one panel per (mode, head_dim, causal), for one dtype (by default
    the first result's): the GPU suite's figure. A method that ran out of memory at some N is a red cross on the
    N axis there, with its name."""
    dtype = dtype or bench.results[0].dtype
    rows = [r for r in bench.results if r.dtype in (None, dtype) and not r.error]
    modes = list(dict.fromkeys(r.mode for r in bench.results))
    columns = list(dict.fromkeys((r.head_dim, r.causal) for r in bench.results))
    axes = fig.subplots(len(modes), len(columns), squeeze=False, sharex=True)
    for i, mode in enumerate(modes):
        for j, (head_dim, causal) in enumerate(columns):
            ax = axes[i][j]
            here = [r for r in rows if (r.mode, r.head_dim, r.causal) == (mode, head_dim, causal)]
            for method in dict.fromkeys(r.method for r in here):
                mine = sorted((r for r in here if r.method == method), key=lambda r: r.n)
                ax.plot([r.n for r in mine], [r.tflops for r in mine], marker="o", label=mine[0].label)
            failed = [r for r in bench.results if r.dtype in (None, dtype) and r.error and r.error.startswith(
                "out of memory") and (r.mode, r.head_dim, r.causal) == (mode, head_dim, causal)]  # fmt: skip
            for r in failed:  # a method that ran out of memory: a cross on the axis, and the method named
                ax.plot([r.n], [0], marker="x", color="red", markersize=9, clip_on=False)
                ax.annotate(f"{r.method}: out of memory", (r.n, 0), xytext=(-4, 6), textcoords="offset points",
                            ha="right", fontsize=7, color="red")  # fmt: skip
            ax.set(xscale="log", title=f"{mode}, head_dim {head_dim}{', causal' if causal else ''}",
                   xlabel="sequence length N", ylabel=f"TFLOP/s ({dtype})")  # fmt: skip
            ns = sorted({r.n for r in bench.results})
            ax.set_xticks(ns, labels=[f"{n // 1024}k" if n % 1024 == 0 else str(n) for n in ns])
            ax.minorticks_off()
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return axes
