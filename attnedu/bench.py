"""Time and measure attention implementations (lesson 08): naive, tiled (``attnedu.flash``), PyTorch's SDPA with
its backend pinned and named, and on a CUDA GPU the Triton kernel.

    python -m attnedu.bench                         # CPU, float32, N 1024..4096 -> benchmarks/attention_cpu.*
    python -m attnedu.bench --device cuda --dtype bfloat16 --lengths 1024 4096 16384 --head-dims 64 128 \\
        --batch 4 --heads 32 --causal both --out benchmarks/attention_cuda   # any CUDA machine
    python -m attnedu.bench --quick --out /tmp/b   # seconds: what the test command runs

Method:
* time: warm-up calls per shape, then rounds in which every method runs once in turn (interleaved, so that a
  burst of load on a shared machine hits all of them); median, min and max over rounds. On CUDA, CUDA events
  around each call and a synchronize; on the CPU, ``time.perf_counter``.
* FLOPs: 4 * batch * heads * N^2 * head_dim per forward, halved when causal (``attnedu.flash.attention_flops``).
* memory, "extra": the peak beyond the inputs and the output. On CUDA, ``torch.cuda.max_memory_allocated`` after
  ``reset_peak_memory_stats``, minus what was allocated before the call and the output. On the CPU, tracemalloc
  cannot see torch's buffers, and a process's pages are reused, so each (method, shape) runs in a fresh Python
  process: after making the inputs and one tiny warm-up call it resets the peak resident size (writing 5 to
  ``/proc/self/clear_refs``, Linux), calls the method once, and reports the peak ``VmHWM`` minus the resident
  size before the call, minus the output's bytes.
Nothing here asserts a time: numbers are reported with the machine's load average, for a reader to judge.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .flash import attention_flops, naive_attention, tiled_attention
from .runtime import progress

MiB = 2**20
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
METHODS = ("naive", "tiled", "sdpa", "triton")
MEMORY_METHOD_CPU = (
    "peak resident memory (VmHWM) of a fresh process per (method, shape), reset via /proc/self/clear_refs after "
    "the inputs were made, minus the resident memory before the call and the output's bytes; 1 thread, "
    "MALLOC_MMAP_THRESHOLD_=65536 so that freed blocks go back to the system"
)
MEMORY_METHOD_CUDA = (
    "torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus memory before the call and the output"
)


@dataclass
class Measurement:
    """One method at one shape: times in ms over rounds, throughput, and extra memory in MiB (None if not measured).
    ``error`` says why a method could not run at this shape (e.g. "out of memory"); its numbers are then None."""

    method: str
    label: str
    n: int
    head_dim: int
    causal: bool
    times_ms: list[float]
    median_ms: float | None
    min_ms: float | None
    max_ms: float | None
    tflops: float | None
    extra_mib: float | None = None
    error: str | None = None


@dataclass
class Benchmark:
    provenance: dict
    results: list[Measurement] = field(default_factory=list)

    def find(self, method: str, n: int, head_dim: int, causal: bool, ran: bool = False) -> Measurement | None:
        """The measurement of ``method`` at this shape; with ``ran``, only if it ran (no error)."""
        for r in self.results:
            if (r.method, r.n, r.head_dim, r.causal) == (method, n, head_dim, causal):
                return None if ran and r.error else r
        return None

    def ratios(self) -> list[dict]:
        """Per shape: how many times slower naive is than tiled and than SDPA, tiled's time over SDPA's, how many
        times more extra memory naive needs than tiled, and Triton's throughput over SDPA's. A method that did not
        run at a shape (out of memory) is left out of that shape's ratios."""
        rows = []
        for shape in dict.fromkeys((r.n, r.head_dim, r.causal) for r in self.results):
            naive, tiled, sdpa, triton = (self.find(m, *shape, ran=True) for m in ("naive", "tiled", "sdpa", "triton"))
            row = dict(zip(("n", "head_dim", "causal"), shape))
            if naive and tiled:
                row["naive / tiled time"] = naive.median_ms / tiled.median_ms
                if naive.extra_mib is not None and tiled.extra_mib:
                    row["naive / tiled extra memory"] = naive.extra_mib / max(tiled.extra_mib, 1e-9)
            if naive and sdpa:
                row["naive / sdpa time"] = naive.median_ms / sdpa.median_ms
            if tiled and sdpa:
                row["tiled / sdpa time"] = tiled.median_ms / sdpa.median_ms
            if triton and sdpa:
                row["triton / sdpa throughput"] = sdpa.median_ms / triton.median_ms
            rows.append(row)
        return rows

    def to_json(self) -> dict:
        return {"provenance": self.provenance, "results": [asdict(r) for r in self.results], "ratios": self.ratios()}

    @classmethod
    def from_json(cls, data: dict) -> Benchmark:
        return cls(data["provenance"], [Measurement(**r) for r in data["results"]])

    @classmethod
    def load(cls, path: str | os.PathLike) -> Benchmark:
        return cls.from_json(json.loads(Path(path).read_text()))


# ------------------------------------------------------------------------------------------------------------
# the methods
# ------------------------------------------------------------------------------------------------------------


def make_methods(device: str, dtype: torch.dtype) -> dict[str, tuple[str, Callable]]:
    """name -> (label, fn(q, k, v, causal)). Triton only on CUDA (its CPU interpreter is far too slow to time)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    backend = SDPBackend.FLASH_ATTENTION
    if device == "cuda" and dtype == torch.float32:
        backend = SDPBackend.EFFICIENT_ATTENTION  # the flash kernel takes only float16/bfloat16 on CUDA

    def sdpa(q, k, v, causal):
        with sdpa_kernel(backend):
            return scaled_dot_product_attention(q, k, v, is_causal=causal)

    methods = {
        "naive": ("naive (S and P in memory)", lambda q, k, v, c: naive_attention(q, k, v, is_causal=c)),
        "tiled": ("tiled PyTorch (attnedu.flash)", lambda q, k, v, c: tiled_attention(q, k, v, is_causal=c)),
        "sdpa": (f"SDPA-{backend.name.lower().replace('_attention', '')}", sdpa),
    }
    if device == "cuda":
        from .triton_attention import triton_attention, unavailable_reason

        if unavailable_reason() is None:
            kernel = lambda q, k, v, c: triton_attention(q, k, v, is_causal=c)  # noqa: E731
            methods["triton"] = ("Triton (attnedu.triton_attention)", kernel)
    return methods


def make_inputs(batch: int, heads: int, n: int, head_dim: int, dtype: torch.dtype, device: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, heads, n, head_dim, generator=g).to(device, dtype) for _ in range(3))


# ------------------------------------------------------------------------------------------------------------
# timing and memory
# ------------------------------------------------------------------------------------------------------------


def _time_once(fn: Callable[[], object], device: str) -> float:
    """Seconds for one call: CUDA events around it and a synchronize on a GPU, perf_counter on the CPU."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1000
    begin = time.perf_counter()
    fn()
    return time.perf_counter() - begin


def _out_of_memory(error: BaseException) -> bool:
    if isinstance(error, (MemoryError, getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError))):
        return True
    return isinstance(error, RuntimeError) and any(s in str(error) for s in ("out of memory", "not enough memory"))


def time_methods(
    calls: dict[str, Callable[[], object]], device: str, repeats: int, warmup: int
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Warm up every call, then ``repeats`` rounds in which each runs once, in turn. Returns seconds per call, per
    name, and for a call that ran out of memory during its warm-up, the error instead."""
    errors: dict[str, str] = {}
    for name, fn in calls.items():
        try:
            for _ in range(max(warmup, 1)):
                fn()
        except Exception as error:
            if not _out_of_memory(error):
                raise
            errors[name] = "out of memory"
            if device == "cuda":
                torch.cuda.empty_cache()
    if device == "cuda":
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in calls if name not in errors}
    for _ in range(repeats):
        for name in times:
            times[name].append(_time_once(calls[name], device))
    return times, errors


def _status_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field_name} not in /proc/self/status")


def _child_memory(method: str, batch: int, heads: int, n: int, head_dim: int, dtype: str, causal: bool) -> float:
    """In a fresh process: the extra resident memory (MiB) of one call, beyond inputs and output (see module doc)."""
    torch.set_num_threads(1)
    fn = make_methods("cpu", DTYPES[dtype])[method][1]
    with torch.no_grad():
        fn(*make_inputs(1, 1, 64, head_dim, DTYPES[dtype], "cpu"), causal)  # load kernels, start thread pools
        q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], "cpu")
        before = _status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        out = fn(q, k, v, causal)
        peak = _status_kib("VmHWM")
    return (peak - before) / 1024 - out.numel() * out.element_size() / MiB


def measure_memory(method: str, batch: int, heads: int, n: int, head_dim: int, dtype: str, causal: bool,
                   device: str) -> float | None:  # fmt: skip
    """Extra memory of one call in MiB, beyond inputs and output, measured the right way for ``device``."""
    if device == "cuda":
        fn = make_methods("cuda", DTYPES[dtype])[method][1]
        q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], "cuda")
        with torch.no_grad():
            fn(q, k, v, causal)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            out = fn(q, k, v, causal)
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        return (peak - before - out.numel() * out.element_size()) / MiB
    if not Path("/proc/self/clear_refs").exists():
        return None  # not Linux: no reliable way to reset the peak resident size
    args = [method, batch, heads, n, head_dim, dtype, int(causal)]
    command = [sys.executable, "-m", "attnedu.bench", "--child-memory", *map(str, args)]
    # glibc keeps freed blocks for reuse, which hides a later allocation from the peak, and a fixed mmap threshold
    # makes it hand every block above 64 KiB back to the system when freed: the peak then counts live memory only.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"memory measurement of {method} at N={n} failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------------------
# provenance, the run, the report
# ------------------------------------------------------------------------------------------------------------


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def provenance(device: str, dtype: str, batch: int, heads: int, threads: int, repeats: int, warmup: int) -> dict:
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name() if device == "cuda" else f"CPU: {_cpu_model()}",
        "device_kind": device,
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cuda": torch.version.cuda if device == "cuda" else None,
        "dtype": dtype,
        "batch": batch,
        "heads": heads,
        "flops": "forward, 4 * batch * heads * N^2 * head_dim, halved when causal; TFLOP = 1e12",
        "timing": (
            f"{warmup} warm-up call(s) per method and shape, then {repeats} interleaved rounds; median, min, max; "
            + ("CUDA events + synchronize" if device == "cuda" else "time.perf_counter")
        ),
        "memory": MEMORY_METHOD_CUDA if device == "cuda" else MEMORY_METHOD_CPU,
        "environment": {
            k: os.environ[k] for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS") if k in os.environ
        },  # fmt: skip
        "load_average_before": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
    if device == "cuda":
        info["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
        info["l2"] = "L2-warm (inputs reused across calls, no flush)"
    return info


def _bind(fn, q, k, v, causal) -> Callable[[], object]:
    return lambda: fn(q, k, v, causal)


def run_benchmark(
    lengths: Sequence[int] = (1024, 2048, 4096),
    head_dims: Sequence[int] = (64,),
    *,
    batch: int = 1,
    heads: int = 8,
    dtype: str = "float32",
    causal: Sequence[bool] = (False,),
    device: str = "cpu",
    methods: Sequence[str] = ("naive", "tiled", "sdpa", "triton"),
    repeats: int = 5,
    warmup: int = 1,
    threads: int = 2,
    memory: bool = True,
    memory_lengths: Sequence[int] | None = None,
) -> Benchmark:
    """Time (and measure the memory of) every method at every (N, head_dim, causal). ``memory_lengths`` limits the
    memory measurement (a fresh process each on the CPU) to those N; by default all."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' but torch sees no CUDA GPU; use device='cpu' or install PyTorch's CUDA build")
    available = make_methods(device, DTYPES[dtype])
    chosen = {m: available[m] for m in methods if m in available}
    memory_lengths = set(lengths if memory_lengths is None else memory_lengths)
    shapes = [(n, d, c) for d in head_dims for c in causal for n in lengths]
    info = provenance(device, dtype, batch, heads, threads, repeats, warmup)
    info["methods"] = {name: label for name, (label, _) in chosen.items()}
    info["shapes"] = f"(batch, heads, N, head_dim) = ({batch}, {heads}, N, head_dim), query_len = key_len = N"
    bench = Benchmark(info)
    memory_jobs = sum(len(chosen) for n, _, _ in shapes if memory and n in memory_lengths)
    bar = progress(len(shapes) + memory_jobs, "attention benchmark")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for n, head_dim, is_causal in shapes:
            q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], device)
            with torch.no_grad():
                calls = {name: _bind(fn, q, k, v, is_causal) for name, (_, fn) in chosen.items()}
                times, errors = time_methods(calls, device, repeats, warmup)
            flops = attention_flops(batch, heads, n, n, head_dim, is_causal)
            for name, seconds in times.items():
                ms = [1000 * s for s in seconds]
                median = statistics.median(ms)
                bench.results.append(Measurement(
                    name, chosen[name][0], n, head_dim, is_causal, [round(t, 3) for t in ms], median, min(ms),
                    max(ms), flops / (median / 1000) / 1e12,
                ))  # fmt: skip
            for name, error in errors.items():
                bench.results.append(Measurement(name, chosen[name][0], n, head_dim, is_causal, [], None, None, None,
                                                 None, error=error))  # fmt: skip
            del q, k, v, calls
            bar.update()
            if memory and n in memory_lengths:
                for name in chosen:
                    if name not in errors:
                        extra = measure_memory(name, batch, heads, n, head_dim, dtype, is_causal, device)
                        bench.find(name, n, head_dim, is_causal).extra_mib = extra
                    bar.update()
    finally:
        torch.set_num_threads(previous_threads)
        bar.close()
    info["load_average_after"] = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return bench


def cpu_targets(bench: Benchmark, n: int = 4096, head_dim: int = 64) -> list[dict]:
    """The issue's CPU targets at (n, head_dim), non-causal: tiled within 3x of SDPA's time, at least 1.5x faster
    than naive, and at least n / (4 head_dim) times less extra memory than naive."""
    naive, tiled, sdpa = (bench.find(m, n, head_dim, False, ran=True) for m in ("naive", "tiled", "sdpa"))
    if not (naive and tiled and sdpa):
        return []
    rows = [
        {"target": "tiled time / SDPA time", "value": tiled.median_ms / sdpa.median_ms, "bound": "<= 3"},
        {"target": "naive time / tiled time", "value": naive.median_ms / tiled.median_ms, "bound": ">= 1.5"},
    ]
    if naive.extra_mib is not None and tiled.extra_mib is not None:
        ratio = naive.extra_mib / max(tiled.extra_mib, 1e-9)
        bound = f">= {n / (4 * head_dim):g}"
        rows.append({"target": "naive extra memory / tiled extra memory", "value": ratio, "bound": bound})
    for row in rows:
        op, bound = row["bound"].split()
        row["met"] = row["value"] <= float(bound) if op == "<=" else row["value"] >= float(bound)
    return rows


def markdown(bench: Benchmark, note: str = "") -> str:
    p = bench.provenance
    lines = [f"# Attention benchmark: {p['device']}", ""]
    lines += [f"- **{key}**: {value}" for key, value in p.items() if key not in ("methods",)]
    lines += ["- **methods**: " + "; ".join(f"`{k}` = {v}" for k, v in p["methods"].items()), ""]
    lines += ["| N | head_dim | causal | method | median ms | min-max ms | TFLOP/s | extra memory MiB |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in bench.results:
        memory = "-" if r.extra_mib is None else f"{r.extra_mib:,.1f}"
        shape = f"| {r.n} | {r.head_dim} | {'yes' if r.causal else 'no'} | {r.label} | "
        if r.error:
            lines.append(shape + f"{r.error} | - | - | - |")
            continue
        lines.append(shape + f"{r.median_ms:,.1f} | {r.min_ms:,.1f}-{r.max_ms:,.1f} | {r.tflops:.4f} | {memory} |")
    lines += ["", "## Ratios", ""]
    ratios = bench.ratios()
    keys = sorted({k for row in ratios for k in row} - {"n", "head_dim", "causal"})
    lines += ["| N | head_dim | causal | " + " | ".join(keys) + " |", "|---" * (3 + len(keys)) + "|"]
    for row in ratios:
        cells = [f"{row[k]:.2f}" if k in row else "-" for k in keys]
        shape = f"| {row['n']} | {row['head_dim']} | {'yes' if row['causal'] else 'no'} | "
        lines.append(shape + " | ".join(cells) + " |")
    targets = cpu_targets(bench)
    if targets and p["device_kind"] == "cpu":
        lines += ["", "## CPU targets (N = 4096, head_dim = 64, not causal)", "", "| target | measured | bound | met |",
                  "|---|---|---|---|"]  # fmt: skip
        lines += [f"| {t['target']} | {t['value']:.2f} | {t['bound']} | {'yes' if t['met'] else 'no'} |"
                  for t in targets]  # fmt: skip
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def plot_benchmark(fig, bench: Benchmark, head_dim: int | None = None, causal: bool = False):
    """Two panels into ``fig``: median time against N (min-max as error bars), and extra memory against N, one
    line per method, both on log scales."""
    head_dim = head_dim or bench.results[0].head_dim
    rows = [r for r in bench.results if r.head_dim == head_dim and r.causal == causal and not r.error]
    left, right = fig.subplots(1, 2)
    for method in dict.fromkeys(r.method for r in rows):
        mine = sorted((r for r in rows if r.method == method), key=lambda r: r.n)
        ns = [r.n for r in mine]
        medians = [r.median_ms for r in mine]
        spread = [[m - r.min_ms for m, r in zip(medians, mine)], [r.max_ms - m for m, r in zip(medians, mine)]]
        left.errorbar(ns, medians, yerr=spread, marker="o", capsize=3, label=mine[0].label)
        measured = [(r.n, r.extra_mib) for r in mine if r.extra_mib is not None]
        if measured:
            right.plot(*zip(*[(n, max(m, 0.1)) for n, m in measured]), marker="o", label=mine[0].label)
    kind = f"{bench.provenance['dtype']}, head_dim {head_dim}{', causal' if causal else ''}"
    left.set(xscale="log", yscale="log", xlabel="sequence length N", ylabel="median time (ms)", title=f"time ({kind})")
    right.set(xscale="log", yscale="log", xlabel="sequence length N", ylabel="extra memory (MiB)",
              title="peak memory beyond inputs and output")  # fmt: skip
    for ax in (left, right):
        ax.set_xticks(sorted({r.n for r in rows}), labels=[str(n) for n in sorted({r.n for r in rows})])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    return left, right


def write(bench: Benchmark, prefix: str | os.PathLike, note: str = "") -> list[Path]:
    """``prefix``.json, .md and .png."""
    from matplotlib.figure import Figure

    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    paths = [prefix.with_suffix(".json"), prefix.with_suffix(".md"), prefix.with_suffix(".png")]
    paths[0].write_text(json.dumps(bench.to_json(), indent=1) + "\n")
    paths[1].write_text(markdown(bench, note))
    fig = Figure(figsize=(11, 4), layout="constrained")
    plot_benchmark(fig, bench)
    fig.savefig(paths[2], dpi=100)
    return paths


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m attnedu.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="float32 on CPU, bfloat16 on CUDA")
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--causal", choices=("no", "yes", "both"), default="no")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    parser.add_argument("--memory-lengths", type=int, nargs="+", default=None, help="measure memory only at these N")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds: checks the command works")
    parser.add_argument(
        "--out", default=None, help="output prefix; default benchmarks/attention_<device> (--quick: a temporary folder)"
    )
    parser.add_argument("--note", default="", help="a paragraph appended to the Markdown report")
    parser.add_argument("--child-memory", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_memory:
        method, batch, heads, n, head_dim, dtype, causal = args.child_memory
        print(_child_memory(method, int(batch), int(heads), int(n), int(head_dim), dtype, bool(int(causal))))
        return
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    dtype = args.dtype or ("bfloat16" if device == "cuda" else "float32")
    if args.quick:
        lengths, head_dims, batch, heads = args.lengths or [128, 256], [32], 1, 2
        repeats, warmup, memory_lengths = args.repeats or 3, args.warmup or 1, [max(args.lengths or [256])]
    else:
        lengths = args.lengths or ([1024, 2048, 4096] if device == "cpu" else [1024, 2048, 4096, 8192, 16384])
        head_dims, batch, heads = args.head_dims, args.batch, args.heads
        repeats, warmup = args.repeats or (5 if device == "cpu" else 30), args.warmup or (1 if device == "cpu" else 10)
        memory_lengths = args.memory_lengths
    causal = {"no": [False], "yes": [True], "both": [False, True]}[args.causal]
    bench = run_benchmark(
        lengths, head_dims, batch=batch, heads=heads, dtype=dtype, causal=causal, device=device, repeats=repeats,
        warmup=warmup, threads=args.threads, memory=not args.no_memory, memory_lengths=memory_lengths,
    )  # fmt: skip
    default = Path(f"benchmarks/attention_{device}")
    if args.quick:
        default = Path(tempfile.gettempdir()) / "attnedu_bench_quick" / "attention"
    paths = write(bench, args.out or default, args.note)  # --quick never overwrites the recorded results
    print(markdown(bench, args.note))
    print("wrote", ", ".join(map(str, paths)))


if __name__ == "__main__":
    main()
