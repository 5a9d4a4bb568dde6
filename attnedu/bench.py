"""Time and measure attention implementations (lesson 08): naive, tiled (``attnedu.flash``), PyTorch's SDPA with
its backend pinned and named, and on a CUDA GPU the Triton kernels; the forward pass, or forward and backward.

    python -m attnedu.bench                         # CPU, float32, N 1024..4096 -> benchmarks/attention_cpu.*
    python -m attnedu.bench --modes forward forward+backward --lengths 1024 2048   # the CPU, with the backward
    python -m attnedu.bench --gpu-suite             # CUDA GPU: the suite below -> benchmarks/attention_cuda.*
    python -m attnedu.bench --gpu-suite --lengths 4096 --head-dims 64 --dtypes bfloat16 --out /tmp/x  # a subset
    python -m attnedu.bench --quick --out /tmp/b    # seconds: what the test command runs

The GPU suite (``make gpu-bench``): forward and forward+backward, N = 1k..16k, head_dim 64 and 128, causal and
not, bfloat16 and float16; Triton against SDPA's FLASH_ATTENTION, CUDNN_ATTENTION and EFFICIENT_ATTENTION
backends (each pinned; a backend that refuses a shape is recorded as refusing it) and naive attention (recorded as
out of memory where it runs out). Constant tokens, as FlashAttention-2's benchmark: batch x N = 16384 and
heads x head_dim = 2048 (batch 16 at N = 1k ... 1 at 16k; 32 heads of 64, 16 of 128).

Method:
* GPU time: ``triton.testing.do_bench``, which zeroes a 256 MB buffer before every timed call (so the inputs are
  not served from the L2 cache), records CUDA events around each call and synchronizes once at the end; median,
  20th-80th percentiles, min and max. The SDPA backend is selected (``sdpa_kernel``) and every check is made
  outside the timed call. The first call of each method at each shape, which pays for Triton's compilation and
  autotuning, is timed apart ("first call ms").
* CPU time: ``torch.utils.benchmark.Timer.blocked_autorange`` (its own warm-up call, blocks of calls long enough
  for the timer's cost to vanish, the thread count set), in rounds in which every (shape, method) runs once in
  turn, so that a burst of load on a shared machine, or a slow drift, hits all of them alike; median, min and max
  over rounds.
* FLOPs: 4 * batch * heads * N^2 * head_dim per forward, halved when causal (``attnedu.flash.attention_flops``);
  a backward counts 2.5 times a forward, so forward+backward 3.5 times. TFLOP = 1e12.
* memory, "extra": the peak beyond the inputs and what the call returns (the output; the gradients for
  forward+backward). On CUDA, ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``. On the CPU,
  tracemalloc cannot see torch's buffers, and a process's pages are reused, so each (method, shape) runs in a fresh
  Python process: after making the inputs and one tiny warm-up call it resets the peak resident size (writing 5 to
  ``/proc/self/clear_refs``, Linux), calls the method once, and reports the peak ``VmHWM`` minus the resident size
  before the call, minus what the call returned.
Nothing here asserts a time: numbers are reported with the machine's load average, for a reader to judge.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from ._validate import (
    check_bool,
    check_choice,
    check_int,
    check_items,
    check_number,
    check_positive_ints,
    describe,
)
from .flash import attention_flops, naive_attention, tiled_attention
from .runtime import progress

MiB = 2**20
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MODES = ("forward", "forward+backward")
BACKWARD_FLOPS = 2.5  # a backward pass counts 2.5 forwards (FlashAttention-2's convention): fwd+bwd = 3.5
# name -> (SDPBackend member, label); "sdpa" is the backend this device and dtype would use for the lesson
SDPA_BACKENDS = {
    "sdpa_flash": ("FLASH_ATTENTION", "SDPA-flash"),
    "sdpa_cudnn": ("CUDNN_ATTENTION", "SDPA-cuDNN"),
    "sdpa_efficient": ("EFFICIENT_ATTENTION", "SDPA-efficient"),
    "sdpa_math": ("MATH", "SDPA-math"),
}
METHODS = ("naive", "tiled", "sdpa", *SDPA_BACKENDS, "triton")
DEVICES = ("cpu", "cuda")
MEMORY_METHOD_CPU = (
    "peak resident memory (VmHWM) of a fresh process per (method, shape), reset via /proc/self/clear_refs after "
    "the inputs were made, minus the resident memory before the call and what the call returned; 1 thread, "
    "MALLOC_MMAP_THRESHOLD_=65536 so that freed blocks go back to the system"
)
MEMORY_METHOD_CUDA = (
    "torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus memory before the call (the inputs) and "
    "what the call returned (the output, or the gradients); 'peak' is max_memory_allocated itself"
)


@dataclass
class Measurement:
    """One method at one shape: times in ms, throughput, and extra memory in MiB (None if not measured).
    ``error`` says why a method could not run at this shape ("out of memory", "not supported: ..."); its numbers
    are then None. ``times_ms`` holds one median per round on the CPU; on a GPU, do_bench's spread is in
    ``q20_ms``/``q80_ms`` (and ``min_ms``/``max_ms``). ``first_call_ms``: the first call's time (compilation)."""

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
    mode: str = "forward"
    dtype: str | None = None
    batch: int | None = None
    heads: int | None = None
    q20_ms: float | None = None
    q80_ms: float | None = None
    first_call_ms: float | None = None
    peak_mib: float | None = None


RATIOS = [  # (a, b, what): "a / b time" = a's time over b's; "throughput" = a's TFLOP/s over b's; memory likewise
    ("naive", "tiled", "time"),
    ("naive", "tiled", "extra memory"),
    ("naive", "sdpa", "time"),
    ("tiled", "sdpa", "time"),
    ("triton", "sdpa", "throughput"),
    ("triton", "sdpa_flash", "throughput"),
    ("triton", "sdpa_cudnn", "throughput"),
    ("triton", "sdpa_efficient", "throughput"),
    ("naive", "triton", "time"),
    ("naive", "triton", "extra memory"),
]


@dataclass
class Benchmark:
    provenance: dict
    results: list[Measurement] = field(default_factory=list)

    def find(self, method: str, n: int, head_dim: int, causal: bool, ran: bool = False, *, mode: str = "forward",
             dtype: str | None = None) -> Measurement | None:  # fmt: skip
        """The measurement of ``method`` at this shape (and ``mode``; any dtype unless one is given); with ``ran``,
        only if it ran (no error)."""
        for r in self.results:
            if (r.method, r.n, r.head_dim, r.causal, r.mode) == (method, n, head_dim, causal, mode) and (
                dtype is None or r.dtype in (None, dtype)
            ):
                return None if ran and r.error else r
        return None

    def shapes(self) -> list[tuple]:
        """(mode, dtype, n, head_dim, causal) of every measured shape, in order."""
        return list(dict.fromkeys((r.mode, r.dtype, r.n, r.head_dim, r.causal) for r in self.results))

    def ratios(self) -> list[dict]:
        """Per shape: how many times slower naive is than tiled and than SDPA, tiled's time over SDPA's, how many
        times more extra memory naive needs than tiled, Triton's throughput over each SDPA backend's, and naive's
        time and memory over Triton's. A method that did not run at a shape (out of memory, refused) is left out of
        that shape's ratios, and so is a memory ratio whose denominator measured under 1 MiB (at that size the
        difference of two allocator readings is noise, and can even come out negative)."""
        rows = []
        for mode, dtype, n, head_dim, causal in self.shapes():
            row = {"mode": mode, "dtype": dtype, "n": n, "head_dim": head_dim, "causal": causal}
            for a, b, what in RATIOS:
                x, y = (self.find(m, n, head_dim, causal, ran=True, mode=mode, dtype=dtype) for m in (a, b))
                if not (x and y):
                    continue
                if what == "time":
                    row[f"{a} / {b} time"] = x.median_ms / y.median_ms
                elif what == "throughput":
                    row[f"{a} / {b} throughput"] = y.median_ms / x.median_ms
                elif x.extra_mib is not None and y.extra_mib is not None and y.extra_mib >= 1.0:
                    row[f"{a} / {b} extra memory"] = x.extra_mib / y.extra_mib
            rows.append(row)
        return rows

    def out_of_memory(self) -> list[dict]:
        """Per method and series (mode, dtype, head_dim, causal) that ran out of memory: the shortest N at which it
        did, and the longest at which it ran."""
        found = {}
        for r in self.results:
            if r.error and r.error.startswith("out of memory"):
                key = (r.method, r.mode, r.dtype, r.head_dim, r.causal)
                found[key] = min(found.get(key, r.n), r.n)
        rows = []
        for (method, mode, dtype, head_dim, causal), n in found.items():
            ran = [r.n for r in self.results if (r.method, r.mode, r.dtype, r.head_dim, r.causal) ==
                   (method, mode, dtype, head_dim, causal) and not r.error]  # fmt: skip
            rows.append({"method": method, "mode": mode, "dtype": dtype, "head_dim": head_dim, "causal": causal,
                         "first_n_out_of_memory": n, "longest_n_that_ran": max(ran, default=None)})  # fmt: skip
        return rows

    def to_json(self) -> dict:
        return {"provenance": self.provenance, "results": [asdict(r) for r in self.results], "ratios": self.ratios(),
                "out_of_memory": self.out_of_memory()}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> Benchmark:
        known = {f.name for f in fields(Measurement)}
        return cls(data["provenance"], [Measurement(**{k: v for k, v in r.items() if k in known})
                                        for r in data["results"]])  # fmt: skip

    @classmethod
    def load(cls, path: str | os.PathLike) -> Benchmark:
        return cls.from_json(json.loads(Path(path).read_text()))


def mode_flops(batch: int, heads: int, n: int, head_dim: int, causal: bool, mode: str) -> float:
    """FLOPs of one call: the forward's 4 * batch * heads * N^2 * head_dim (halved when causal), times 3.5 with
    the backward (which counts 2.5 forwards: five matrix products, one of them the recomputed Q K^T)."""
    forward = attention_flops(batch, heads, n, n, head_dim, causal)
    return forward * (1 + BACKWARD_FLOPS) if mode == "forward+backward" else float(forward)


# ------------------------------------------------------------------------------------------------------------
# the methods
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    """A way to compute attention: ``fn(q, k, v, causal)``, called inside ``context()`` (which selects an SDPA
    backend; entered once around a whole measurement, never inside the timed call)."""

    name: str
    label: str
    fn: Callable
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


def _sdpa(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def make_methods(device: str, dtype: torch.dtype, names: Sequence[str] = METHODS) -> dict[str, Method]:
    """name -> Method, for those of ``names`` that can run here. Triton only on CUDA (its CPU interpreter is far
    too slow to time), and only if triton is installed: checked here, once, not at every call. ``device``: "cpu" or
    "cuda"; ``dtype``: one of DTYPES' values; ``names``: from METHODS, or "linear" (lesson 10's linear attention)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    check_choice("device", device, DEVICES)
    if not isinstance(dtype, torch.dtype) or dtype not in DTYPES.values():
        raise TypeError(
            f"dtype should be one of {', '.join(f'torch.{k}' for k in DTYPES)} (a torch.dtype), got {describe(dtype)}"
        )
    names = check_items("names", names, str, "method names")
    for name in names:
        check_choice("names", name, (*METHODS, "linear"))
    methods = {}
    for name in names:
        if name == "naive":
            methods[name] = Method(name, "naive (S and P in memory)", functools.partial(_causal_kw, naive_attention))
        elif name == "tiled":
            methods[name] = Method(
                name, "tiled PyTorch (attnedu.flash)", functools.partial(_causal_kw, tiled_attention)
            )
        elif name == "sdpa" or name in SDPA_BACKENDS:
            backend_name, label = SDPA_BACKENDS.get(name, SDPA_BACKENDS["sdpa_flash"])
            if name == "sdpa" and device == "cuda" and dtype == torch.float32:
                backend_name, label = SDPA_BACKENDS["sdpa_efficient"]  # the flash kernel takes only 16-bit on CUDA
            backend = getattr(SDPBackend, backend_name)
            methods[name] = Method(name, label, _sdpa, functools.partial(sdpa_kernel, backend))
        elif name == "linear":  # lesson 10's linear attention (not softmax: compared for time and memory only)
            methods[name] = Method(name, "linear attention (attnedu.inference)", _linear)
        elif name == "triton" and device == "cuda":
            from .triton_attention import triton_attention, unavailable_reason

            if unavailable_reason() is None:
                label = "Triton (attnedu.triton_attention)"
                methods[name] = Method(name, label, functools.partial(_causal_kw, triton_attention))
    return methods


def _linear(q, k, v, causal):
    from .inference import linear_attention

    return linear_attention(q, k, v, causal=causal)


def _causal_kw(fn, q, k, v, causal):
    return fn(q, k, v, is_causal=causal)


def make_inputs(batch: int, heads: int, n: int, head_dim: int, dtype: torch.dtype, device: str, seed: int = 0,
                requires_grad: bool = False):  # fmt: skip
    """Query, key and value (batch, heads, n, head_dim) from torch.randn, drawn on ``device`` (on a GPU, drawing
    the GPU suite's 3 x 33 million numbers on the CPU would take a second per shape)."""
    g = torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn(batch, heads, n, head_dim, generator=g, device=device).to(dtype)
                 .requires_grad_(requires_grad) for _ in range(3))  # fmt: skip


def make_call(fn: Callable, q, k, v, causal: bool, mode: str, grad_out=None) -> Callable[[], object]:
    """The timed call: the forward alone (inputs that do not require grad: no graph is built), or forward and
    backward, returning the gradients (``torch.autograd.grad``: nothing accumulates into ``.grad``)."""
    if mode == "forward":
        return lambda: fn(q, k, v, causal)
    return lambda: torch.autograd.grad(fn(q, k, v, causal), (q, k, v), grad_out)


def _nbytes(result) -> int:
    if isinstance(result, torch.Tensor):
        return result.numel() * result.element_size()
    return sum(_nbytes(x) for x in result)


# ------------------------------------------------------------------------------------------------------------
# timing and memory
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A zero-argument callable to time, and the context to enter around its measurement (not around each call)."""

    fn: Callable[[], object]
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


def _as_call(call) -> Call:
    return call if isinstance(call, Call) else Call(call)


def _out_of_memory(error: BaseException) -> bool:
    if isinstance(error, (MemoryError, getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError))):
        return True
    return isinstance(error, RuntimeError) and any(s in str(error) for s in ("out of memory", "not enough memory"))


def _free(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()


def time_methods(
    calls: dict, device: str, repeats: int, warmup: int, *, threads: int | None = None, min_run_time: float = 0.05,
    on_round: Callable[[], None] | None = None,
) -> tuple[dict[object, list[float]], dict[object, str]]:  # fmt: skip
    """Time every call (a callable, or a ``Call`` with its context). First ``warmup`` calls each (a call that runs
    out of memory there is recorded, not timed). Then, on the CPU, ``repeats`` rounds in which each call is
    measured once, in turn, by ``torch.utils.benchmark.Timer.blocked_autorange(min_run_time)`` with ``threads``
    threads: its median seconds per call. On CUDA, one ``gpu_time`` measurement each, its median. Returns seconds
    per call (one per round), per key, and for a call that ran out of memory, the error instead."""
    check_choice("device", device, DEVICES)
    repeats = check_int("repeats", repeats, "rounds of timing", minimum=1)
    warmup = check_int("warmup", warmup, "untimed calls before the rounds", minimum=0)
    min_run_time = check_number("min_run_time", min_run_time, "seconds per measurement", minimum=0, strict=True)
    if threads is not None:
        threads = check_int("threads", threads, "torch threads while timing", minimum=1)
    if not isinstance(calls, dict):
        raise TypeError(f"calls should be a dict of key -> callable (or Call), got {describe(calls)}")
    calls = {key: _as_call(call) for key, call in calls.items()}
    previous_threads = torch.get_num_threads()
    if device == "cpu" and threads:
        torch.set_num_threads(threads)  # the warm-up too runs with the threads the rounds use
    try:
        return _time_calls(calls, device, repeats, warmup, threads or previous_threads, min_run_time, on_round)
    finally:
        torch.set_num_threads(previous_threads)


def _time_calls(calls, device, repeats, warmup, threads, min_run_time, on_round):
    from torch.utils.benchmark import Timer

    errors: dict[object, str] = {}
    for key, call in calls.items():
        try:
            with call.context():
                for _ in range(max(warmup, 1)):
                    call.fn()
        except Exception as error:
            if not _out_of_memory(error):
                raise
            errors[key] = "out of memory"
            _free(device)
    times: dict[object, list[float]] = {key: [] for key in calls if key not in errors}
    if device == "cuda":
        from . import bench_gpu

        for key in times:
            with calls[key].context():
                times[key].append(bench_gpu.gpu_time(calls[key].fn)["median"] / 1000)
        return times, errors
    timers = {key: Timer("fn()", globals={"fn": calls[key].fn}, num_threads=threads) for key in times}
    for _ in range(repeats):
        for key, timer in timers.items():
            with calls[key].context():
                times[key].append(timer.blocked_autorange(min_run_time=min_run_time).median)
        if on_round:
            on_round()
    return times, errors


def _status_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field_name} not in /proc/self/status")


def _child_memory(method: str, batch: int, heads: int, n: int, head_dim: int, dtype: str, causal: bool,
                  mode: str = "forward") -> float:  # fmt: skip
    """In a fresh process: the extra resident memory (MiB) of one call, beyond the inputs and what the call
    returned (see the module's docstring)."""
    torch.set_num_threads(1)
    chosen = make_methods("cpu", DTYPES[dtype], [method])[method]
    backward = mode == "forward+backward"
    with chosen.context():
        tiny = make_inputs(1, 1, 64, head_dim, DTYPES[dtype], "cpu", requires_grad=backward)
        make_call(chosen.fn, *tiny, causal, mode, torch.ones(1, 1, 64, head_dim, dtype=DTYPES[dtype]))()  # warm-up
        q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], "cpu", requires_grad=backward)
        call = make_call(chosen.fn, q, k, v, causal, mode, torch.ones_like(q) if backward else None)
        before = _status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        returned = call()
        peak = _status_kib("VmHWM")
    return (peak - before) / 1024 - _nbytes(returned) / MiB


def measure_memory(method: str, batch: int, heads: int, n: int, head_dim: int, dtype: str, causal: bool,
                   device: str, mode: str = "forward") -> float | None:  # fmt: skip
    """Extra memory of one call in MiB, beyond inputs and what it returned, measured the right way for
    ``device``."""
    if device == "cuda":
        from .bench_gpu import measure

        chosen = make_methods("cuda", DTYPES[dtype], [method])[method]
        backward = mode == "forward+backward"
        q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], "cuda", requires_grad=backward)
        grad_out = torch.ones_like(q) if backward else None
        return measure(chosen, q, k, v, causal, mode, "cuda", grad_out, warmup_ms=1, rep_ms=1).get("extra_mib")
    if not Path("/proc/self/clear_refs").exists():
        return None  # not Linux: no reliable way to reset the peak resident size
    args = [method, batch, heads, n, head_dim, dtype, int(causal), mode]
    command = [sys.executable, "-m", "attnedu.bench", "--child-memory", *map(str, args)]
    # glibc keeps freed blocks for reuse, which hides a later allocation from the peak, and a fixed mmap threshold
    # makes it hand every block above 64 KiB back to the system when freed: the peak then counts live memory only.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"memory measurement of {method} at N={n} failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------------------
# provenance
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


def _load_average() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def provenance(device: str, dtype: str, batch: int, heads: int, threads: int, repeats: int, warmup: int,
               min_run_time: float = 0.05) -> dict:  # fmt: skip
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name() if device == "cuda" else f"CPU: {_cpu_model()}",
        "device_kind": device,
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "interop_threads": torch.get_num_interop_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cuda": torch.version.cuda if device == "cuda" else None,
        "dtype": dtype,
        "batch": batch,
        "heads": heads,
        "flops": "forward 4 * batch * heads * N^2 * head_dim, halved when causal; forward+backward 3.5 times that "
        "(a backward counts 2.5 forwards); TFLOP = 1e12",  # fmt: skip
        "timing": (
            f"{warmup} warm-up call(s) per method and shape, then {repeats} rounds in which every (shape, method) "
            f"is measured once in turn by torch.utils.benchmark.Timer.blocked_autorange(min_run_time={min_run_time}) "
            f"with {threads} thread(s); median, min, max over rounds"
            if device == "cpu"
            else "triton.testing.do_bench per method and shape: L2 flushed before every call, CUDA events, median"
        ),
        "spread": "min-max over rounds" if device == "cpu" else "20th-80th percentile of do_bench's calls",
        "memory": MEMORY_METHOD_CUDA if device == "cuda" else MEMORY_METHOD_CPU,
        "environment": {
            k: os.environ[k] for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS") if k in os.environ
        },  # fmt: skip
        "load_average_before": _load_average(),
    }
    if device == "cuda":
        from .bench_gpu import cuda_provenance

        info.update(cuda_provenance())
    return info


# ------------------------------------------------------------------------------------------------------------
# argument checks
# ------------------------------------------------------------------------------------------------------------


def _check_device(device) -> None:
    if device in ("gpu", "GPU"):
        raise ValueError(f"device should be one of {DEVICES}, got {device!r}; PyTorch calls an NVIDIA GPU 'cuda'")
    check_choice("device", device, DEVICES)


def _check_names(name: str, values, choices: Sequence[str]) -> list[str]:
    values = check_items(name, values, str, f"names from {tuple(choices)}")
    for i, value in enumerate(values):
        check_choice(f"{name}[{i}]", value, choices)
    return values


def _check_common(lengths, head_dims, causal, methods, modes, repeats=1, warmup=0) -> None:
    check_positive_ints("lengths", lengths, "sequence length N")
    check_positive_ints("head_dims", head_dims, "head size")
    check_items("causal", causal, bool, "bools (False: no mask, True: causal)")
    _check_names("methods", methods, METHODS)
    _check_names("modes", modes, MODES)
    check_int("repeats", repeats, "rounds of timing", minimum=1)
    check_int("warmup", warmup, "warm-up calls per method and shape", minimum=0)


# ------------------------------------------------------------------------------------------------------------
# the runs
# ------------------------------------------------------------------------------------------------------------


def _measurement(name, method, n, head_dim, causal, mode, dtype, batch, heads, times_ms, **extra) -> Measurement:
    """A Measurement from times in ms (one per round), or from do_bench's quantiles in ``extra``."""
    if "error" in extra:
        return Measurement(name, method.label, n, head_dim, causal, [], None, None, None, None, error=extra["error"],
                           mode=mode, dtype=dtype, batch=batch, heads=heads)  # fmt: skip
    median, low, high = extra.pop("median", None), extra.pop("min", None), extra.pop("max", None)
    if median is None:  # CPU: one median per round
        median, low, high = statistics.median(times_ms), min(times_ms), max(times_ms)
    flops = mode_flops(batch, heads, n, head_dim, causal, mode)
    return Measurement(
        name, method.label, n, head_dim, causal, [round(t, 4) for t in times_ms], median, low, high,
        flops / (median / 1000) / 1e12, mode=mode, dtype=dtype, batch=batch, heads=heads,
        q20_ms=extra.pop("q20", None), q80_ms=extra.pop("q80", None), **extra,
    )  # fmt: skip


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
    modes: Sequence[str] = ("forward",),
    min_run_time: float = 0.05,
) -> Benchmark:
    """Time (and measure the memory of) every method at every (mode, N, head_dim, causal), with fixed ``batch`` and
    ``heads``. On the CPU, all of them interleaved in ``repeats`` rounds; ``memory_lengths`` limits the memory
    measurement (a fresh process each on the CPU) to those N; by default all. On CUDA, each measured by do_bench
    (``attnedu.bench_gpu.run_gpu_suite`` is the full GPU comparison). Methods that cannot run here (Triton without
    a GPU) are left out and named in the provenance's "skipped"."""
    _check_device(device)
    _check_common(lengths, head_dims, causal, methods, modes, repeats, warmup)
    check_choice("dtype", dtype, tuple(DTYPES))
    for name, value, meaning in (("batch", batch, "batch size"), ("heads", heads, "number of heads"),
                                 ("threads", threads, "CPU threads")):  # fmt: skip
        check_int(name, value, meaning, minimum=1)
    check_bool("memory", memory, "whether to measure memory")
    if memory_lengths is not None:
        check_positive_ints("memory_lengths", memory_lengths, "N at which to measure memory")
    check_number("min_run_time", min_run_time, "seconds per Timer measurement", minimum=0, strict=True)
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' but torch sees no CUDA GPU; use device='cpu' or install PyTorch's CUDA build")
    chosen = make_methods(device, DTYPES[dtype], methods)
    memory_lengths = set(lengths if memory_lengths is None else memory_lengths)
    shapes = [(mode, n, d, c) for mode in modes for d in head_dims for c in causal for n in lengths]
    info = provenance(device, dtype, batch, heads, threads, repeats, warmup, min_run_time)
    info["methods"] = {name: m.label for name, m in chosen.items()}
    info["skipped"] = {name: "cannot run here (Triton runs only on a CUDA GPU)" for name in methods
                       if name not in chosen}  # fmt: skip
    info["modes"] = list(modes)
    info["shapes"] = f"(batch, heads, N, head_dim) = ({batch}, {heads}, N, head_dim), query_len = key_len = N"
    bench = Benchmark(info)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        if device == "cuda":
            _run_cuda_shapes(bench, chosen, shapes, batch, heads, dtype, memory, memory_lengths)
        else:
            _run_cpu_shapes(bench, chosen, shapes, batch, heads, dtype, repeats, warmup, threads, min_run_time,
                            memory, memory_lengths)  # fmt: skip
    finally:
        torch.set_num_threads(previous_threads)
    info["load_average_after"] = _load_average()
    return bench


def _run_cpu_shapes(bench, chosen, shapes, batch, heads, dtype, repeats, warmup, threads, min_run_time, memory,
                    memory_lengths) -> None:  # fmt: skip
    calls = {}
    for mode, n, head_dim, causal in shapes:
        backward = mode == "forward+backward"
        q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], "cpu", requires_grad=backward)
        grad_out = torch.ones_like(q) if backward else None
        for name, method in chosen.items():
            calls[(mode, n, head_dim, causal, name)] = Call(make_call(method.fn, q, k, v, causal, mode, grad_out),
                                                            method.context)  # fmt: skip
    memory_jobs = [key for key in calls if memory and key[1] in memory_lengths]
    bar = progress(repeats + len(memory_jobs), "attention benchmark")
    try:
        times, errors = time_methods(calls, "cpu", repeats, warmup, threads=threads, min_run_time=min_run_time,
                                     on_round=bar.update)  # fmt: skip
        del calls
        for key in dict.fromkeys([*times, *errors]):
            mode, n, head_dim, causal, name = key
            if key in errors:
                extra = {"error": errors[key]}
            else:
                extra = {}
            bench.results.append(_measurement(name, chosen[name], n, head_dim, causal, mode, dtype, batch, heads,
                                              [1000 * s for s in times.get(key, [])], **extra))  # fmt: skip
        for mode, n, head_dim, causal, name in memory_jobs:
            if (mode, n, head_dim, causal, name) not in errors:
                found = bench.find(name, n, head_dim, causal, mode=mode)
                found.extra_mib = measure_memory(name, batch, heads, n, head_dim, dtype, causal, "cpu", mode)
            bar.update()
    finally:
        bar.close()


def _run_cuda_shapes(bench, chosen, shapes, batch, heads, dtype, memory, memory_lengths) -> None:
    from .bench_gpu import measure

    for mode, n, head_dim, causal in shapes:
        backward = mode == "forward+backward"
        q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], "cuda", requires_grad=backward)
        grad_out = torch.randn_like(q) if backward else None
        for name, method in chosen.items():
            result = measure(method, q, k, v, causal, mode, "cuda", grad_out, memory=memory and n in memory_lengths)
            bench.results.append(_measurement(name, method, n, head_dim, causal, mode, dtype, batch, heads, [],
                                              **result))  # fmt: skip
        del q, k, v, grad_out


# ------------------------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------------------------


def cpu_targets(bench: Benchmark, n: int = 4096, head_dim: int = 64) -> list[dict]:
    """The CPU targets at (n, head_dim), not causal: the tiled PyTorch version within 1.5 times SDPA's fused kernel's
    time, forward and (where measured) forward+backward; at least 1.5 times faster than naive attention, and at least
    n / (4 head_dim) times less extra memory, forward. One row per target that the benchmark measured."""
    rows = []
    for mode in MODES:
        tiled, sdpa = (bench.find(m, n, head_dim, False, ran=True, mode=mode) for m in ("tiled", "sdpa"))
        if tiled and sdpa:
            rows.append({"target": f"tiled time / SDPA time, {mode}", "value": tiled.median_ms / sdpa.median_ms,
                         "bound": "<= 1.5"})  # fmt: skip
    naive, tiled = (bench.find(m, n, head_dim, False, ran=True) for m in ("naive", "tiled"))
    if naive and tiled:
        rows.append({"target": "naive time / tiled time, forward", "value": naive.median_ms / tiled.median_ms,
                     "bound": ">= 1.5"})  # fmt: skip
        if naive.extra_mib is not None and tiled.extra_mib is not None and tiled.extra_mib >= 1.0:
            memory = naive.extra_mib / tiled.extra_mib
            bound = f">= {n / (4 * head_dim):g}"
            rows.append({"target": "naive extra memory / tiled extra memory, forward", "value": memory, "bound": bound})
    for row in rows:
        op, bound = row["bound"].split()
        row["met"] = row["value"] <= float(bound) if op == "<=" else row["value"] >= float(bound)
    return rows


def _ms(x: float) -> str:
    return f"{x:,.3f}" if x < 10 else f"{x:,.1f}"


def _tflops(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.3f}" if x >= 0.1 else f"{x:.4f}"


def _spread(r: Measurement) -> str:
    if r.q20_ms is not None and r.q80_ms is not None:
        return f"{_ms(r.q20_ms)}-{_ms(r.q80_ms)}"
    return f"{_ms(r.min_ms)}-{_ms(r.max_ms)}"


def markdown(bench: Benchmark, note: str = "") -> str:
    p = bench.provenance
    lines = [f"# Attention benchmark: {p['device']}", ""]
    lines += [f"- **{key}**: {value}" for key, value in p.items() if key not in ("methods",)]
    lines += ["- **methods**: " + "; ".join(f"`{k}` = {v}" for k, v in p.get("methods", {}).items())]
    spread = p.get("spread", "min-max over rounds")
    for mode, dtype in dict.fromkeys((r.mode, r.dtype) for r in bench.results):
        rows = [r for r in bench.results if (r.mode, r.dtype) == (mode, dtype)]
        lines += ["", f"## {mode}, {dtype or p.get('dtype')}", ""]
        lines += [f"| N | head_dim | causal | batch x heads | method | median ms | spread ms ({spread}) | TFLOP/s "
                  "| first call ms | extra memory MiB |", "|---" * 10 + "|"]  # fmt: skip
        for r in rows:
            shape = f"| {r.n} | {r.head_dim} | {'yes' if r.causal else 'no'} | "
            shape += f"{r.batch} x {r.heads} | " if r.batch else "- | "
            shape += f"{r.label} | "
            if r.error:
                lines.append(shape + f"{r.error} | - | - | - | - |")
                continue
            first = "-" if r.first_call_ms is None else _ms(r.first_call_ms)
            memory = "-" if r.extra_mib is None else f"{r.extra_mib:,.1f}"
            lines.append(shape + f"{_ms(r.median_ms)} | {_spread(r)} | {_tflops(r.tflops)} | {first} | {memory} |")
    ratios = bench.ratios()
    keys = list(dict.fromkeys(k for row in ratios for k in row if k not in ("mode", "dtype", "n", "head_dim",
                                                                             "causal")))  # fmt: skip
    if keys:
        lines += ["", "## Ratios", "", "| mode | dtype | N | head_dim | causal | " + " | ".join(keys) + " |",
                  "|---" * (5 + len(keys)) + "|"]  # fmt: skip
        for row in ratios:
            cells = [f"{row[k]:.2f}" if k in row else "-" for k in keys]
            shape = f"| {row['mode']} | {row['dtype'] or p.get('dtype')} | {row['n']} | {row['head_dim']} | "
            lines.append(shape + f"{'yes' if row['causal'] else 'no'} | " + " | ".join(cells) + " |")
    oom = bench.out_of_memory()
    if oom:
        lines += ["", "## Out of memory", "", "| method | mode | dtype | head_dim | causal | first N out of memory | "
                  "longest N that ran |", "|---" * 7 + "|"]  # fmt: skip
        lines += [f"| {o['method']} | {o['mode']} | {o['dtype']} | {o['head_dim']} | {'yes' if o['causal'] else 'no'} "
                  f"| {o['first_n_out_of_memory']} | {o['longest_n_that_ran'] or '-'} |" for o in oom]  # fmt: skip
    targets = cpu_targets(bench)
    if targets and p["device_kind"] == "cpu":
        lines += ["", "## CPU targets (N = 4096, head_dim = 64, not causal)", "", "| target | measured | bound | met |",
                  "|---|---|---|---|"]  # fmt: skip
        lines += [f"| {t['target']} | {t['value']:.2f} | {t['bound']} | {'yes' if t['met'] else 'no'} |"
                  for t in targets]  # fmt: skip
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def plot_benchmark(fig, bench: Benchmark, head_dim: int | None = None, causal: bool = False, *,
                   mode: str | None = None, dtype: str | None = None):  # fmt: skip
    """Two panels into ``fig``: median time against N (the spread as error bars), and extra memory against N, one
    line per method, both on log scales; for one head_dim, causal setting, mode and dtype (by default the first
    result's)."""
    first = bench.results[0]
    head_dim, mode = head_dim or first.head_dim, mode or first.mode
    dtype = dtype or first.dtype
    rows = [r for r in bench.results if (r.head_dim, r.causal, r.mode) == (head_dim, causal, mode)
            and r.dtype in (None, dtype) and not r.error]  # fmt: skip
    left, right = fig.subplots(1, 2)
    for method in dict.fromkeys(r.method for r in rows):
        mine = sorted((r for r in rows if r.method == method), key=lambda r: r.n)
        ns = [r.n for r in mine]
        medians = [r.median_ms for r in mine]
        low = [r.q20_ms if r.q20_ms is not None else r.min_ms for r in mine]
        high = [r.q80_ms if r.q80_ms is not None else r.max_ms for r in mine]
        spread = [[m - lo for m, lo in zip(medians, low)], [hi - m for m, hi in zip(medians, high)]]
        left.errorbar(ns, medians, yerr=spread, marker="o", capsize=3, label=mine[0].label)
        measured = [(r.n, r.extra_mib) for r in mine if r.extra_mib is not None]
        if measured:
            right.plot(*zip(*[(n, max(m, 0.1)) for n, m in measured]), marker="o", label=mine[0].label)
    kind = f"{dtype or bench.provenance.get('dtype')}, head_dim {head_dim}{', causal' if causal else ''}"
    kind += ", forward+backward" if mode == "forward+backward" else ""
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
    if bench.provenance.get("suite"):
        columns = len({(r.head_dim, r.causal) for r in bench.results})
        fig = Figure(figsize=(3.6 * columns + 1, 3.3 * len({r.mode for r in bench.results})), layout="constrained")
        from .bench_gpu import plot_throughput

        plot_throughput(fig, bench)
    else:
        fig = Figure(figsize=(11, 4), layout="constrained")
        plot_benchmark(fig, bench)
    fig.savefig(paths[2], dpi=100)
    return paths


# ------------------------------------------------------------------------------------------------------------
# the command
# ------------------------------------------------------------------------------------------------------------


def steady_medians(shape_ids: torch.Tensor, times_ms: torch.Tensor, warmup: int = 1) -> torch.Tensor:
    """What a benchmark reports from a timing loop's per-call times: for each shape, the median of its calls after
    its own first ``warmup`` calls.

    shape_ids (calls,) integers 0..shapes-1 say which shape (or method) each call ran, in the order the calls were
    made (interleaved or not); times_ms (calls,) how long each took. A shape's first call pays for what is done
    once per shape: compilation, autotuning (keyed on the shape), allocating, filling caches; it is dropped whatever
    its time, even when noise hides it (a slow function). The median of the rest is what a typical call costs,
    unmoved by the spikes another process causes now and then (a mean is moved by them). For an even number of
    calls it is the mean of the two middle ones (``statistics.median``; ``torch.median`` takes the lower one).
    -> (shapes,) in times_ms's dtype.
    """
    if not isinstance(shape_ids, torch.Tensor) or shape_ids.dim() != 1 or shape_ids.is_floating_point():
        raise TypeError(f"shape_ids should be a 1-D integer tensor (the shape of each call), got {describe(shape_ids)}")
    if not isinstance(times_ms, torch.Tensor) or not times_ms.is_floating_point() or times_ms.shape != shape_ids.shape:
        raise ValueError(f"times_ms should be a 1-D float tensor with one time per call, {tuple(shape_ids.shape)}, "
                         f"got {describe(times_ms)}")  # fmt: skip
    warmup = check_int("warmup", warmup, "calls dropped at the start of each shape", minimum=0)
    shapes = int(shape_ids.max()) + 1 if shape_ids.numel() else 0
    counts = torch.bincount(shape_ids, minlength=shapes) if shapes else torch.zeros(0, dtype=torch.long)
    if shapes == 0 or int(shape_ids.min()) < 0 or int(counts.min()) <= warmup:
        raise ValueError(
            f"shape_ids should number the shapes 0..shapes-1, each run more than warmup = {warmup} times, got "
            f"counts {counts.tolist()}"
        )
    medians = [statistics.median(times_ms[shape_ids == s][warmup:].tolist()) for s in range(shapes)]
    return torch.tensor(medians, dtype=times_ms.dtype)


def main(argv: Sequence[str] | None = None) -> None:
    from .bench_gpu import GPU_SUITE, run_gpu_suite

    parser = argparse.ArgumentParser(prog="python -m attnedu.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu-suite", action="store_true", help="the GPU comparison -> benchmarks/attention_cuda.*")
    parser.add_argument("--device", choices=("auto", *DEVICES), default="auto")
    parser.add_argument("--dtypes", "--dtype", choices=sorted(DTYPES), nargs="+", default=None,
                        help="float32 on CPU, bfloat16 on CUDA; the suite: bfloat16 float16")  # fmt: skip
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--head-dims", type=int, nargs="+", default=None)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--causal", choices=("no", "yes", "both"), default=None, help="no; the suite: both")
    parser.add_argument("--modes", choices=MODES, nargs="+", default=None, help="forward; the suite: both")
    parser.add_argument("--methods", choices=METHODS, nargs="+", default=None)
    parser.add_argument("--repeats", type=int, default=None, help="CPU: rounds of timing")
    parser.add_argument("--warmup", type=int, default=None, help="CPU: warm-up calls per method and shape")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-run-time", type=float, default=0.05, help="CPU: seconds per Timer measurement")
    parser.add_argument("--warmup-ms", type=float, default=GPU_SUITE["warmup_ms"], help="GPU: do_bench warm-up")
    parser.add_argument("--rep-ms", type=float, default=GPU_SUITE["rep_ms"], help="GPU: do_bench timing per shape")
    parser.add_argument("--tokens", type=int, default=GPU_SUITE["tokens"], help="suite: batch x N")
    parser.add_argument("--hidden", type=int, default=GPU_SUITE["hidden"], help="suite: heads x head_dim")
    parser.add_argument("--no-autotune", action="store_true",
                        help="Triton: the first candidate configuration that fits, no autotuning")  # fmt: skip
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    parser.add_argument("--memory-lengths", type=int, nargs="+", default=None, help="measure memory only at these N")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds: checks the command works")
    parser.add_argument(
        "--out", default=None, help="output prefix; default benchmarks/attention_<device> (--quick: a temporary folder)"
    )
    parser.add_argument("--note", default="", help="a paragraph appended to the Markdown report")
    parser.add_argument("--child-memory", nargs=8, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    command = "python -m attnedu.bench " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.child_memory:
        method, batch, heads, n, head_dim, dtype, causal, mode = args.child_memory
        print(_child_memory(method, int(batch), int(heads), int(n), int(head_dim), dtype, bool(int(causal)), mode))
        return
    causal_choice = {"no": [False], "yes": [True], "both": [False, True], None: None}[args.causal]
    if args.no_autotune:
        from .triton_attention import AUTOTUNE_ENV

        os.environ[AUTOTUNE_ENV] = "0"
    if args.gpu_suite:
        try:
            bench = run_gpu_suite(
                args.lengths or GPU_SUITE["lengths"], args.head_dims or GPU_SUITE["head_dims"],
                args.dtypes or GPU_SUITE["dtypes"], causal_choice or GPU_SUITE["causal"],
                args.modes or GPU_SUITE["modes"], args.methods or GPU_SUITE["methods"], tokens=args.tokens,
                hidden=args.hidden, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms,
                log=lambda line: print(line, flush=True),
            )  # fmt: skip
        except RuntimeError as error:
            if torch.cuda.is_available():
                raise
            sys.exit(f"python -m attnedu.bench --gpu-suite: {error}")
        bench.provenance["command"] = command
        paths = write(bench, args.out or "benchmarks/attention_cuda", args.note)
        print(markdown(bench, args.note))
        print("wrote", ", ".join(map(str, paths)))
        return
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if args.dtypes and len(args.dtypes) > 1:
        parser.error("--dtypes: this benchmark takes one dtype (the --gpu-suite takes several)")
    dtype = args.dtypes[0] if args.dtypes else ("bfloat16" if device == "cuda" else "float32")
    if args.quick:
        lengths, head_dims, batch, heads = args.lengths or [128, 256], [32], 1, 2
        repeats, warmup, memory_lengths = args.repeats or 3, args.warmup or 1, [max(args.lengths or [256])]
        min_run_time = 0.01
    else:
        lengths = args.lengths or ([1024, 2048, 4096] if device == "cpu" else [1024, 2048, 4096, 8192, 16384])
        head_dims, batch, heads = args.head_dims or [64], args.batch, args.heads
        repeats, warmup = args.repeats or 5, 1 if args.warmup is None else args.warmup
        memory_lengths, min_run_time = args.memory_lengths, args.min_run_time
    bench = run_benchmark(
        lengths, head_dims, batch=batch, heads=heads, dtype=dtype, causal=causal_choice or [False], device=device,
        methods=args.methods or ("naive", "tiled", "sdpa", "triton"), repeats=repeats, warmup=warmup,
        threads=args.threads, memory=not args.no_memory, memory_lengths=memory_lengths,
        modes=args.modes or ["forward"], min_run_time=min_run_time,
    )  # fmt: skip
    bench.provenance["command"] = command
    default = Path(f"benchmarks/attention_{device}")
    if args.quick:
        default = Path(tempfile.gettempdir()) / "attnedu_bench_quick" / "attention"
    paths = write(bench, args.out or default, args.note)  # --quick never overwrites the recorded results
    print(markdown(bench, args.note))
    print("wrote", ", ".join(map(str, paths)))


if __name__ == "__main__":
    main()
