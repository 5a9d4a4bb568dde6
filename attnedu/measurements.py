"""What the attention benchmark (lesson 08) measures and records, shared by its CPU half (``attnedu.bench``) and
its GPU half (``attnedu.bench_gpu``), which both import it: the methods compared (each called as
``fn(q, k, v, is_causal=...)``, as PyTorch's SDPA and the course's attention functions are), their inputs and the
timed call, the FLOPs counted, a ``Measurement`` of one method at one shape and a ``Benchmark`` of them (ratios, out
of memory, JSON), the machine's provenance, and the checks of the arguments both halves take. How the timing and the
memory are measured is in ``attnedu.bench``'s docstring.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from ._validate import check_choice, check_int, check_items, check_positive_ints, describe
from .flash import attention_flops, naive_attention, tiled_attention

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
    "gc.collect(), then torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus memory before the call "
    "(the inputs) and what the call returned (the output, or the gradients): 'extra'; 'memory' = inputs + returned + "
    "extra; 'peak' is max_memory_allocated itself"
)


@dataclass
class Measurement:
    """One method at one shape: times in ms, throughput, and memory in MiB (None if not measured).
    ``error`` says why a method could not run at this shape ("out of memory", "not supported: ..."); its numbers
    are then None. ``times_ms`` holds one median per round on the CPU, and every timed call on a GPU (``rounds``
    of them), whose 20th-80th percentiles are ``q20_ms``/``q80_ms``. ``first_call_ms``: the first call's time
    (compilation, autotuning).

    Memory: ``extra_mib``, the peak beyond the inputs and what the call returned; ``memory_mib``, what the call
    needs in all (inputs + returned + extra: the comparison between methods, naive attention's N x N matrices
    against the inputs and output every method holds); on a GPU also ``peak_mib`` (the allocator's peak),
    ``retained_mib`` (memory the call kept or freed besides its result; about 0), ``gc_freed_mib`` (garbage of
    earlier calls collected before it) and ``memory_note``. ``config``: the launch configuration autotuning chose
    for each Triton kernel the call ran. ``gpu_state``: the GPU's clocks, power, temperature and throttle reasons
    over the shape's timing (``attnedu.bench_gpu.GpuMonitor.window``)."""

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
    memory_mib: float | None = None
    retained_mib: float | None = None
    gc_freed_mib: float | None = None
    memory_note: str | None = None
    config: dict | None = None
    rounds: int | None = None
    gpu_state: dict | None = None


RATIOS = [  # (a, b, what): "a / b time" = a's time over b's; "throughput" = a's TFLOP/s over b's; "extra memory"
    # = a's extra_mib over b's (the CPU's tiled attention holds tiles: a denominator worth dividing by), "memory" =
    # a's memory_mib (inputs + returned + extra) over b's (a GPU kernel's extra is a few MiB of log-sum-exp: a
    # ratio over it would compare naive's N x N matrices with a bookkeeping buffer)
    ("naive", "tiled", "time"),
    ("naive", "tiled", "extra memory"),
    ("naive", "sdpa", "time"),
    ("tiled", "sdpa", "time"),
    ("triton", "sdpa", "throughput"),
    ("triton", "sdpa_flash", "throughput"),
    ("triton", "sdpa_cudnn", "throughput"),
    ("triton", "sdpa_efficient", "throughput"),
    ("naive", "triton", "time"),
    ("naive", "triton", "memory"),
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
        time and memory (inputs + returned + extra) over Triton's. A method that did not run at a shape (out of
        memory, refused) is left out of that shape's ratios, and so is an extra-memory ratio whose denominator
        measured under 1 MiB (at that size the difference of two allocator readings is noise)."""
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
                elif what == "memory":
                    if x.memory_mib is not None and y.memory_mib:
                        row[f"{a} / {b} memory"] = x.memory_mib / y.memory_mib
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


def mode_flops(batch: int, heads: int, n: int, head_dim: int, is_causal: bool, mode: str) -> float:
    """FLOPs of one call: the forward's 4 * batch * heads * N^2 * head_dim (halved when causal), times 3.5 with
    the backward (which counts 2.5 forwards: five matrix products, one of them the recomputed Q K^T)."""
    forward = attention_flops(batch, heads, n, n, head_dim, is_causal)
    return forward * (1 + BACKWARD_FLOPS) if mode == "forward+backward" else float(forward)


# ------------------------------------------------------------------------------------------------------------
# the methods
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    """A way to compute attention: ``fn(q, k, v, is_causal=...)`` (the flag named as PyTorch's SDPA and the course's
    attention functions name it, so that they are methods as they are), called inside ``context()`` (which selects
    an SDPA backend; entered around a measurement or a call, never inside the timed region). ``configs(call)``,
    where a method is autotuned: calls ``call`` once and returns what it returned and the launch configuration of
    each kernel it ran."""

    name: str
    label: str
    fn: Callable
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    configs: Callable[[Callable[[], object]], tuple[object, dict]] | None = None  # call -> (returned, configurations)


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
            methods[name] = Method(name, "naive (S and P in memory)", naive_attention)
        elif name == "tiled":
            methods[name] = Method(name, "tiled PyTorch (attnedu.flash)", tiled_attention)
        elif name == "sdpa" or name in SDPA_BACKENDS:
            backend_name, label = SDPA_BACKENDS.get(name, SDPA_BACKENDS["sdpa_flash"])
            if name == "sdpa" and device == "cuda" and dtype == torch.float32:
                backend_name, label = SDPA_BACKENDS["sdpa_efficient"]  # the flash kernel takes only 16-bit on CUDA
            backend = getattr(SDPBackend, backend_name)
            sdpa = torch.nn.functional.scaled_dot_product_attention
            methods[name] = Method(name, label, sdpa, functools.partial(sdpa_kernel, backend))
        elif name == "linear":  # lesson 10's linear attention (not softmax: compared for time and memory only)
            methods[name] = Method(name, "linear attention (attnedu.linear_attention)", _linear)
        elif name == "triton" and device == "cuda":
            from .triton_attention import triton_attention, unavailable_reason

            if unavailable_reason() is None:
                label = "Triton (attnedu.triton_attention)"
                methods[name] = Method(name, label, triton_attention, configs=triton_configs)
    return methods


def triton_configs(call: Callable[[], object]) -> tuple[object, dict]:
    """Calls ``call`` once; returns what it returned and, for each autotuned Triton kernel the call launched, the
    configuration autotuning chose for it (BLOCK_M, BLOCK_N, num_warps, num_stages, ...): Triton's ``Autotuner``
    sets ``best_config`` at each launch, so it is cleared first and read after."""
    from . import triton_attention as ta

    if not ta.autotuning():
        return call(), {"autotune": f"off ({ta.AUTOTUNE_ENV}=0): the first candidate configuration that fits"}
    tuners = ta._get_kernels().tuned or {}  # the autotuned kernels by kind (None under the interpreter)
    for tuner in tuners.values():
        tuner.best_config = None
    returned = call()
    chosen = {}
    for kind, tuner in tuners.items():
        config = getattr(tuner, "best_config", None)
        if config is not None:
            chosen[kind] = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    return returned, chosen


def _linear(q, k, v, *, is_causal=False):
    """Lesson 10's linear attention as a method (``attnedu.linear_attention.linear_attention`` names its flag
    ``causal``)."""
    from .linear_attention import linear_attention

    return linear_attention(q, k, v, causal=is_causal)


def make_inputs(batch: int, heads: int, n: int, head_dim: int, dtype: torch.dtype, device: str, seed: int = 0,
                requires_grad: bool = False):  # fmt: skip
    """Query, key and value (batch, heads, n, head_dim) from torch.randn, drawn on ``device`` (on a GPU, drawing
    the GPU suite's 3 x 33 million numbers on the CPU would take a second per shape)."""
    g = torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn(batch, heads, n, head_dim, generator=g, device=device).to(dtype)
                 .requires_grad_(requires_grad) for _ in range(3))  # fmt: skip


def make_call(fn: Callable, q, k, v, is_causal: bool, mode: str, grad_out=None) -> Callable[[], object]:
    """The timed call: the forward alone (inputs that do not require grad: no graph is built), or forward and
    backward, returning the gradients (``torch.autograd.grad``: nothing accumulates into ``.grad``)."""
    if mode == "forward":
        return lambda: fn(q, k, v, is_causal=is_causal)
    return lambda: torch.autograd.grad(fn(q, k, v, is_causal=is_causal), (q, k, v), grad_out)


def nbytes(result) -> int:
    """Bytes held by a tensor, or by the tensors of a tuple (what a call returned: not counted as extra memory)."""
    if isinstance(result, torch.Tensor):
        return result.numel() * result.element_size()
    return sum(nbytes(x) for x in result)


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says that memory ran out (CPU or GPU): a result to record, not a failure of the run."""
    if isinstance(error, (MemoryError, getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError))):
        return True
    return isinstance(error, RuntimeError) and any(s in str(error) for s in ("out of memory", "not enough memory"))


def free_cache(device: str) -> None:
    """Give the CUDA caching allocator's free blocks back (between shapes, after running out); nothing on the CPU."""
    if device == "cuda":
        torch.cuda.empty_cache()


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


def load_average() -> list[float] | None:
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
            else f"attnedu.bench_gpu.time_interleaved: {warmup} untimed and {repeats} timed rounds per shape, each "
            "call after an L2 flush, between CUDA events; median"
        ),
        "spread": "min-max over rounds" if device == "cpu" else "20th-80th percentile of the timed calls",
        "memory": MEMORY_METHOD_CUDA if device == "cuda" else MEMORY_METHOD_CPU,
        "environment": {
            k: os.environ[k] for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS") if k in os.environ
        },  # fmt: skip
        "load_average_before": load_average(),
    }
    if device == "cuda":
        info.update(cuda_provenance())
    return info


def _nvidia_smi() -> dict | None:
    """Driver version and clocks (MHz) from nvidia-smi, or None where it cannot be run."""
    queries = ["driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem", "power.limit", "temperature.gpu"]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(queries)}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=20, check=True)  # fmt: skip
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        lines = done.stdout.strip().splitlines()
        if lines:
            return dict(zip(queries, (v.strip() for v in lines[min(index, len(lines) - 1)].split(","))))
    return None


def cuda_provenance() -> dict:
    """The GPU, its driver and clocks, cuDNN, TF32, and how the L2 cache, first calls and Triton's autotuning were
    handled: what ``provenance`` adds on CUDA."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    from .triton_attention import AUTOTUNE_ENV, autotuning

    return {
        "gpu": {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "sms": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1),
        },  # fmt: skip
        "nvidia_smi": _nvidia_smi(),
        "cudnn": torch.backends.cudnn.version(),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "l2": "flushed before every timed call (a 256 MiB buffer zeroed)",
        "first_call": "the first call of each method at each shape, synchronized, by the wall clock: it pays for "
        "Triton's compilation and autotuning, cuDNN's plan, the allocator's growth",  # fmt: skip
        "triton_autotune": f"{'on' if autotuning() else 'off'} ({AUTOTUNE_ENV})",
    }


# ------------------------------------------------------------------------------------------------------------
# argument checks
# ------------------------------------------------------------------------------------------------------------


def check_device(device) -> None:
    if device in ("gpu", "GPU"):
        raise ValueError(f"device should be one of {DEVICES}, got {device!r}; PyTorch calls an NVIDIA GPU 'cuda'")
    check_choice("device", device, DEVICES)


def check_names(name: str, values, choices: Sequence[str]) -> list[str]:
    values = check_items(name, values, str, f"names from {tuple(choices)}")
    for i, value in enumerate(values):
        check_choice(f"{name}[{i}]", value, choices)
    return values


def check_run_arguments(lengths, head_dims, causal, methods, modes, repeats=1, warmup=0) -> None:
    check_positive_ints("lengths", lengths, "sequence length N")
    check_positive_ints("head_dims", head_dims, "head size")
    check_items("causal", causal, bool, "bools (False: no mask, True: causal)")
    check_names("methods", methods, METHODS)
    check_names("modes", modes, MODES)
    check_int("repeats", repeats, "rounds of timing", minimum=1)
    check_int("warmup", warmup, "warm-up calls per method and shape", minimum=0)


# ------------------------------------------------------------------------------------------------------------
# measurements and their formatting
# ------------------------------------------------------------------------------------------------------------


def make_measurement(name, method, n, head_dim, causal, mode, dtype, batch, heads, times_ms, **extra) -> Measurement:
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


def format_ms(x: float) -> str:
    return f"{x:,.3f}" if x < 10 else f"{x:,.1f}"


def format_tflops(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.3f}" if x >= 0.1 else f"{x:.4f}"
