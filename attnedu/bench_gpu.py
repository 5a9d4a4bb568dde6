"""The GPU half of ``attnedu.bench``: ``python -m attnedu.bench --gpu-suite`` (``make gpu-bench``), the timing and
measuring of methods at one shape on a CUDA GPU, and a dry run of all of it on the CPU (``--dry-run``: stand-in
methods, timer, memory counters and nvidia-smi, tiny shapes) so that minutes on a lent GPU are spent measuring.

The protocol, per shape (one (mode, dtype, head_dim, causal, N) with batch = tokens // N, heads = hidden // head_dim):
1. each method in turn: a first call timed apart by the wall clock (it pays for Triton's compilation and autotuning,
   cuDNN's plan); one call whose memory is measured (after ``gc.collect()``, so that garbage of earlier calls is not
   freed inside the measured call) and, for Triton, the launch configuration autotuning chose for each kernel;
2. ``warmup`` untimed rounds, then ``rounds`` timed rounds; a round times every method once, and the order changes
   from round to round (rotated by one each round, reversed every other round), so that a drift of the clocks or a
   burst of another process falls on every method alike. Before each timed call the L2 cache is flushed (a 256 MB
   buffer zeroed) and a short spin kernel is queued, so that the call's kernels are queued before its start event
   (the host's launch cost is hidden, as a CUDA graph hides it); CUDA events around the call; one synchronize per
   round. Median, 20th and 80th percentiles, min and max of the ``rounds`` calls;
3. the GPU's SM and memory clocks, power draw, temperature and throttle reasons, sampled every 100 ms by one
   ``nvidia-smi --query-gpu ... -lms 100`` process for the whole run, summarised over the shape's window.

``time_interleaved`` is the one timing function: the suite and ``benchmarks/tune_triton.py`` both use it, so that a
kernel at one configuration and shape measures the same in both (``python -m attnedu.bench --compare-tuning``).
The methods, inputs and results (``Benchmark``, ``Measurement``) are ``attnedu.measurements``'; this module never
imports ``attnedu.bench``.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import subprocess
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Sequence

import torch

from . import measurements
from ._validate import check_int
from .flash import naive_attention, tiled_attention
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
    "dtypes": ("bfloat16",),
    "causal": (False, True),
    "modes": MODES,
    "methods": ("triton", "sdpa_cudnn", "sdpa_flash", "naive"),
    "tokens": 16384,  # batch x N, as FlashAttention-2's benchmark
    "hidden": 2048,  # heads x head_dim
    "rounds": 20,  # timed calls per (method, shape), one per round
    "warmup": 3,  # untimed rounds after the first call and the memory call
    "oom_probe": (32768,),  # where naive attention ran at every N: one untimed call here, to show where it runs out
}
# The dry run (--dry-run): the suite's loop on the CPU at tiny shapes, stand-in methods, timer, memory and nvidia-smi.
DRY_RUN = {"lengths": (64, 128, 256), "head_dims": (16, 32), "tokens": 512, "hidden": 64, "rounds": 5, "warmup": 1,
           "oom_probe": (512,), "memory_mib": 2.0}  # fmt: skip
L2_FLUSH_BYTES = 256 * MiB  # more than any GPU's L2 (50 MB on an H100, 60 MB on an H200), as do_bench flushes
SPIN_CYCLES = 200_000  # torch.cuda._sleep: about 0.1 ms at 2 GHz, longer than launching a call from Python
SMI_INTERVAL_MS = 100
SMI_FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu", "clocks_throttle_reasons.active")
# nvidia-smi's clocks_throttle_reasons.active bits (nvml.h, nvmlClocksEventReason*)
THROTTLE_REASONS = {0x1: "GpuIdle", 0x2: "ApplicationsClocksSetting", 0x4: "SwPowerCap", 0x8: "HwSlowdown",
                    0x10: "SyncBoost", 0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown",
                    0x80: "HwPowerBrakeSlowdown", 0x100: "DisplayClockSetting"}  # fmt: skip


# ------------------------------------------------------------------------------------------------------------
# the device: a CUDA GPU, or the dry run's stand-in on the CPU
# ------------------------------------------------------------------------------------------------------------


class CudaDevice:
    """What the protocol needs from a CUDA GPU: synchronize, flush the L2 and queue a spin before a call, time
    stamps (CUDA events), the caching allocator's counters."""

    kind = "cuda"

    def __init__(self):
        self._flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self.spin = hasattr(torch.cuda, "_sleep")

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def before_call(self) -> None:
        self._flush.zero_()
        if self.spin:
            torch.cuda._sleep(SPIN_CYCLES)

    def stamp(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_ms(self, start, end) -> float:
        return start.elapsed_time(end)

    def allocated(self) -> int:
        return torch.cuda.memory_allocated()

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats()

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated()

    def held(self, returned) -> int:
        return nbytes(returned)

    def free_cache(self) -> None:
        torch.cuda.empty_cache()

    def describe(self) -> str:
        spin = f"a {SPIN_CYCLES}-cycle torch.cuda._sleep" if self.spin else "no spin kernel (torch.cuda._sleep absent)"
        return (f"the L2 flushed ({L2_FLUSH_BYTES // MiB} MiB zeroed) and {spin} queued before each timed call, "
                "CUDA events around it, one synchronize per round")  # fmt: skip


class StandInMemory:
    """A stand-in for a GPU's allocator counters: bytes allocated (tensors registered with ``track``, freed when
    they are garbage collected, and the working memory a stand-in method declares), the peak since ``reset_peak``,
    and a capacity beyond which an allocation raises "out of memory"."""

    def __init__(self, capacity_mib: float = float("inf")):
        self.capacity = capacity_mib * MiB
        self.allocated = 0
        self.peak = 0
        self._tracked: dict[int, int] = {}

    def alloc(self, size: int) -> None:
        if self.allocated + size > self.capacity:
            raise RuntimeError(f"stand-in device out of memory: tried to allocate {size / MiB:.2f} MiB "
                               f"({self.allocated / MiB:.2f} of {self.capacity / MiB:.2f} MiB in use)")  # fmt: skip
        self.allocated += size
        self.peak = max(self.peak, self.allocated)

    def free(self, size: int) -> None:
        self.allocated -= size

    def track(self, tensor: torch.Tensor) -> torch.Tensor:
        size = nbytes(tensor)
        self.alloc(size)
        self._tracked[id(tensor)] = size
        weakref.finalize(tensor, self._release, id(tensor))
        return tensor

    def _release(self, key: int) -> None:
        self.free(self._tracked.pop(key, 0))

    def held(self, returned) -> int:
        if isinstance(returned, torch.Tensor):
            return self._tracked.get(id(returned), 0)
        return sum(self.held(x) for x in returned)


class StandInDevice:
    """The dry run's device, on the CPU: calls are synchronous, so the wall clock around a call times it; memory
    from a ``StandInMemory``."""

    kind = "cpu"

    def __init__(self, memory: StandInMemory | None = None):
        self.memory = memory or StandInMemory()

    def synchronize(self) -> None:
        pass

    def before_call(self) -> None:
        pass

    def stamp(self) -> float:
        return time.perf_counter()

    def elapsed_ms(self, start: float, end: float) -> float:
        return (end - start) * 1000

    def allocated(self) -> int:
        return self.memory.allocated

    def reset_peak(self) -> None:
        self.memory.peak = self.memory.allocated

    def peak(self) -> int:
        return self.memory.peak

    def held(self, returned) -> int:
        return self.memory.held(returned)

    def free_cache(self) -> None:
        pass

    def describe(self) -> str:
        return "dry run: the CPU's wall clock around each call (a stand-in for CUDA events), no L2 flush"


def stand_in_methods(memory: StandInMemory, names: Sequence[str]) -> dict[str, Method]:
    """The dry run's methods, on the CPU: tiled PyTorch attention stands in for Triton (its block sizes stand in for
    the autotuned configuration), PyTorch's SDPA for each SDPA backend, and naive attention declares its two
    N x N matrices to the stand-in memory (so it runs out where they pass its capacity). Each registers its output."""

    def method(name, label, fn, working, configs=None):
        def call(q, k, v, *, is_causal=False):
            size = working(q)
            memory.alloc(size)
            try:
                return memory.track(fn(q, k, v, is_causal=is_causal))  # the output allocated, the work not yet freed
            finally:
                memory.free(size)

        return Method(name, f"stand-in for {name}: {label}", call, configs=configs)

    def tiled_configs(call):
        return call(), {"forward": {"BLOCK_M": 256, "BLOCK_N": 512}}  # tiled_attention's default blocks

    lse = lambda q: q.shape[0] * q.shape[1] * q.shape[2] * 4  # noqa: E731 (one float32 per query)
    scores = lambda q: 2 * q.shape[0] * q.shape[1] * q.shape[2] ** 2 * q.element_size()  # noqa: E731 (S and P)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    every = {
        "triton": method("triton", "tiled PyTorch", tiled_attention, lse, tiled_configs),
        "naive": method("naive", "naive attention", naive_attention, scores),
        **{name: method(name, "PyTorch SDPA on the CPU", sdpa, lse if name == "sdpa_flash" else (lambda q: 0))
           for name in ("sdpa", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math")},
    }  # fmt: skip
    return {name: every[name] for name in names if name in every}


# ------------------------------------------------------------------------------------------------------------
# the GPU's clocks, power, temperature and throttle reasons (nvidia-smi, sampled for the whole run)
# ------------------------------------------------------------------------------------------------------------


def smi_command(fields: Sequence[str] = SMI_FIELDS, index: int = 0) -> list[str] | None:
    """The nvidia-smi query for ``fields`` on GPU ``index``, checked by running it once; the throttle-reasons field
    is renamed clocks_event_reasons on newer drivers, and dropped if neither name works. None without nvidia-smi."""
    base = ["nvidia-smi", "-i", str(index), "--format=csv,noheader,nounits"]
    reasons = [f for f in fields if "reasons" in f]
    others = [f for f in fields if f not in reasons]
    for tried in ([*others, *reasons], [*others, *(f.replace("throttle", "event") for f in reasons)], others):
        command = [*base, f"--query-gpu={','.join(tried)}"]
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
            if done.returncode == 0 and done.stdout.strip():
                return command
    return None


class GpuMonitor:
    """``command`` (an nvidia-smi --query-gpu, or the dry run's stand-in) run with ``-lms interval_ms`` for the whole
    run; a thread stamps each line it prints with ``time.perf_counter()``. ``window(start, end)`` summarises the
    samples taken between two stamps (and the last one before)."""

    def __init__(self, command: list[str] | None, interval_ms: int = SMI_INTERVAL_MS):
        self.command, self.interval_ms = command, interval_ms
        self.fields = command[-1].split("=", 1)[1].split(",") if command else []
        self.samples: list[tuple[float, list[str]]] = []
        self._process = None
        self._thread = None

    def __enter__(self) -> GpuMonitor:
        if self.command:
            with contextlib.suppress(OSError):
                command = [*self.command, "-lms", str(self.interval_ms)]
                self._process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                self._thread = threading.Thread(target=self._read, daemon=True)
                self._thread.start()
        return self

    def _read(self) -> None:
        for line in self._process.stdout:
            values = [v.strip() for v in line.split(",")]
            if len(values) == len(self.fields):
                self.samples.append((time.perf_counter(), values))

    def __exit__(self, *exc) -> None:
        if self._process is not None:
            self._process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)
            self._thread.join(timeout=5)

    def window(self, start: float, end: float) -> dict | None:
        """Over the samples from the last one before ``start`` to ``end``: their count; SM clock min, median, max
        (MHz); memory clock min and max; power draw median and max (W); temperature min and max (C); every throttle
        reason seen. None when there is no sample."""
        before = [s for s in self.samples if s[0] < start][-1:]
        rows = before + [s for s in self.samples if start <= s[0] <= end]
        if not rows:
            return None
        columns = {f: [r[1][i] for r in rows] for i, f in enumerate(self.fields)}

        def numbers(field):
            found = [f for f in columns if f.startswith(field)]
            values = []
            for v in columns[found[0]] if found else []:
                with contextlib.suppress(ValueError):
                    values.append(float(v))
            return values

        summary: dict = {"samples": len(rows)}
        for key, field, parts in (("sm_mhz", "clocks.sm", "min median max"), ("mem_mhz", "clocks.mem", "min max"),
                                  ("power_w", "power.draw", "median max"),
                                  ("temperature_c", "temperature.gpu", "min max")):  # fmt: skip
            values = numbers(field)
            if values:
                pick = {"min": min(values), "median": statistics.median(values), "max": max(values)}
                summary[key] = [round(pick[p], 1) for p in parts.split()]
        reasons = [f for f in columns if "reasons" in f]
        if reasons:
            bits = 0
            for v in columns[reasons[0]]:
                with contextlib.suppress(ValueError):
                    bits |= int(v, 16)
            summary["throttle"] = [name for bit, name in THROTTLE_REASONS.items() if bits & bit]
        return summary


# The dry run's nvidia-smi: the query's fields, every -lms milliseconds; the power cap flagged now and then.
STAND_IN_SMI = """
import sys, time
interval = int(sys.argv[sys.argv.index('-lms') + 1]) / 1000
i = 0
while True:
    print(f"{1980 - 15 * (i % 3)}, 2619, {650 + 10 * (i % 5)}.5, {50 + i % 4}, {'0x4' if i % 7 == 6 else '0x0'}",
          flush=True)
    i += 1
    time.sleep(interval)
"""


def stand_in_smi_command() -> list[str]:
    return [sys.executable, "-c", STAND_IN_SMI, f"--query-gpu={','.join(SMI_FIELDS)}"]


# ------------------------------------------------------------------------------------------------------------
# timing and memory
# ------------------------------------------------------------------------------------------------------------


def round_order(keys: Sequence, round_index: int) -> list:
    """The order of round ``round_index``: rotated by one each round, reversed every other round (each method comes
    first, and after each other method, equally often over a multiple of 2 x len(keys) rounds)."""
    keys = list(keys)
    shift = round_index % len(keys) if keys else 0
    order = keys[shift:] + keys[:shift]
    return order[::-1] if round_index % 2 else order


def time_interleaved(calls: dict, device, rounds: int, warmup: int = 0, contexts: dict | None = None,
                     errors: dict | None = None) -> dict[object, list[float]]:  # fmt: skip
    """Milliseconds of each of ``rounds`` timed calls per key of ``calls`` (zero-argument callables), after
    ``warmup`` untimed rounds: each round calls every key once in ``round_order``, each call preceded by
    ``device.before_call()`` (L2 flush, spin) and between two ``device.stamp()``; one synchronize per round. A key's
    context (``contexts``, e.g. a pinned SDPA backend) is entered around each of its calls, outside the stamps. With
    ``errors`` (a dict), a key whose call runs out of memory is recorded there and left out of the later rounds (its
    times dropped) instead of stopping the others."""
    rounds = check_int("rounds", rounds, "timed calls per key", minimum=1)
    warmup = check_int("warmup", warmup, "untimed rounds", minimum=0)
    contexts = contexts or {}
    times: dict[object, list[float]] = {key: [] for key in calls}
    for index in range(warmup + rounds):
        stamps = []
        for key in round_order([key for key in calls if key not in (errors or {})], index):
            with contexts.get(key, contextlib.nullcontext)():
                device.before_call()
                start = device.stamp()
                try:
                    calls[key]()
                except Exception as error:
                    if errors is None or not is_out_of_memory(error):
                        raise
                    errors[key] = "out of memory (in the timed rounds)"
                    times.pop(key, None)
                    device.free_cache()
                    continue
                stamps.append((key, start, device.stamp()))
        device.synchronize()
        if index >= warmup:
            for key, start, end in stamps:
                if key in times:
                    times[key].append(device.elapsed_ms(start, end))
    return times


def summarize(times_ms: Sequence[float]) -> dict[str, float]:
    """median, q20, q80 (inclusive quantiles), min and max of per-call times."""
    times_ms = list(times_ms)
    if len(times_ms) == 1:
        q20 = q80 = times_ms[0]
    else:
        quintiles = statistics.quantiles(times_ms, n=5, method="inclusive")
        q20, q80 = quintiles[0], quintiles[-1]
    return {"median": statistics.median(times_ms), "q20": q20, "q80": q80, "min": min(times_ms), "max": max(times_ms)}


def gpu_time(fn: Callable[[], object], rounds: int = GPU_SUITE["rounds"], warmup: int = GPU_SUITE["warmup"],
             device=None) -> dict[str, float]:  # fmt: skip
    """Milliseconds per call of ``fn`` on the GPU by ``time_interleaved`` (alone): median, q20, q80, min, max."""
    return summarize(time_interleaved({0: fn}, device or CudaDevice(), rounds, warmup)[0])


def measure_memory(call: Callable[[], object], device, inputs_bytes: int = 0) -> tuple[object, dict]:
    """One call's memory on ``device``: garbage collected first (a reference cycle left by an earlier call would
    otherwise be freed inside this one, after ``before`` counted it: the -122 MiB of the first H100 run), then the
    peak counted from here, the call, synchronized. Returns (what the call returned, fields): ``extra_mib`` = peak
    - before - returned; ``memory_mib`` = inputs + returned + extra (what the call needs in all: the memory
    comparison); ``peak_mib``; ``retained_mib`` = after - before - returned (0 unless the call kept or freed
    something besides its result, e.g. a cache); ``gc_freed_mib`` (what the collection freed)."""
    device.synchronize()
    previous = device.allocated()
    gc.collect()
    device.synchronize()
    before = device.allocated()
    device.reset_peak()
    returned = call()
    device.synchronize()
    peak, after, held = device.peak(), device.allocated(), device.held(returned)
    extra = peak - before - held
    fields = {"extra_mib": extra / MiB, "memory_mib": (inputs_bytes + held + extra) / MiB, "peak_mib": peak / MiB,
              "retained_mib": (after - before - held) / MiB, "gc_freed_mib": (previous - before) / MiB}  # fmt: skip
    return returned, fields


def _refusal(method: Method, error: BaseException, caught: list) -> str | None:
    """'not supported: <why>' when a pinned SDPA backend refused this shape (it raises and warns why), else None."""
    if not (method.name.startswith("sdpa") and isinstance(error, RuntimeError)):
        return None
    reasons = [str(w.message).strip() for w in caught if issubclass(w.category, UserWarning)]
    why = "; ".join(dict.fromkeys(reasons)) or str(error).strip().splitlines()[0]
    return "not supported: " + " ".join(why.split())[:300]


def _failure(method: Method, error: BaseException, caught: list) -> str:
    """The error to record for a method that could not run (out of memory, a refused shape); re-raises others."""
    if is_out_of_memory(error):
        return "out of memory"
    refusal = _refusal(method, error, caught)
    if refusal is None:
        raise error
    return refusal


def _prepare(method: Method, call: Callable[[], object], device, inputs_bytes: int, memory: bool) -> dict:
    """A method's first call (timed apart), its memory call (and Triton's configurations), at one shape."""
    result: dict = {}
    returned = None
    with method.context(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            device.synchronize()
            begin = time.perf_counter()
            returned = call()
            device.synchronize()
            result["first_call_ms"] = (time.perf_counter() - begin) * 1000
            returned = None

            def traced():  # the call, and the configuration each of its kernels launched with
                out, result["config"] = method.configs(call)
                return out

            traced = call if method.configs is None else traced
            if memory:
                returned, fields = measure_memory(traced, device, inputs_bytes)
                result.update(fields)
            else:
                returned = traced()
            if memory and result["retained_mib"] < -1:  # something was freed inside the call: measure again
                returned = None
                returned, fields = measure_memory(call, device, inputs_bytes)
                result.update(fields, memory_note="measured twice: the first call freed memory it did not allocate")
            returned = None
        except Exception as error:
            del returned  # free what a call returned before an error, before freeing the cache
            result = {"error": _failure(method, error, caught)}
            device.free_cache()
    return result


def measure_shape(methods: dict[str, Method], q, k, v, is_causal: bool, mode: str, device, grad_out=None, *,
                  rounds: int = GPU_SUITE["rounds"], warmup: int = GPU_SUITE["warmup"], memory: bool = True,
                  skip: dict[str, str] | None = None) -> dict[str, dict]:  # fmt: skip
    """Every method at one shape by the protocol (module docstring): name -> the fields of a Measurement (times,
    summary, first call, memory, configuration), or {"error": ...} for a method that ran out of memory or refused
    the shape. ``skip``: name -> the error to record without running it."""
    skip = skip or {}
    inputs_bytes = nbytes((q, k, v) + ((grad_out,) if grad_out is not None else ()))
    calls = {name: make_call(m.fn, q, k, v, is_causal, mode, grad_out) for name, m in methods.items()}
    results = {name: {"error": skip[name]} for name in methods if name in skip}
    for name, method in methods.items():
        if name not in skip:
            results[name] = _prepare(method, calls[name], device, inputs_bytes, memory)
    ready = {name: calls[name] for name in methods if "error" not in results[name]}
    if ready:
        errors: dict[str, str] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the pinned backends warn only when they refuse: they did not here
            contexts = {name: methods[name].context for name in ready}
            times = time_interleaved(ready, device, rounds, warmup, contexts, errors)
        for name, ms in times.items():
            results[name].update(summarize(ms), times=ms)
        for name, error in errors.items():
            results[name] = {"error": error}
    return results


def measure(method: Method, q, k, v, is_causal: bool, mode: str, device: str = "cuda", grad_out=None, *,
            memory: bool = True, rounds: int = GPU_SUITE["rounds"],
            warmup: int = GPU_SUITE["warmup"]) -> dict:  # fmt: skip
    """One method at one shape on a CUDA GPU (``measure_shape`` with one method)."""
    found = measure_shape({method.name: method}, q, k, v, is_causal, mode, CudaDevice(), grad_out, rounds=rounds,
                          warmup=warmup, memory=memory)[method.name]  # fmt: skip
    found.pop("times", None)
    return found


# ------------------------------------------------------------------------------------------------------------
# the suite
# ------------------------------------------------------------------------------------------------------------


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
    rounds: int = GPU_SUITE["rounds"],
    warmup: int = GPU_SUITE["warmup"],
    log: Callable[[str], None] | None = print,
    on_shape: Callable[[Benchmark], None] | None = None,
    time_limit_s: float | None = None,
    dry_run: bool = False,
    oom_probe: Sequence[int] | None = None,
) -> Benchmark:
    """The GPU comparison (module docstring): every (dtype, head_dim, causal, mode, N) with batch = tokens // N and
    heads = hidden // head_dim. A method that runs out of memory at some N is recorded so there, and not tried at
    longer N of the same series (its memory only grows with N at constant tokens); where naive attention ran at
    every N, one untimed call at each ``oom_probe`` length (by default the plan's) finds where it runs out.
    ``on_shape(bench)`` after each shape (the command writes the JSON there: a run cut off leaves what it measured);
    ``time_limit_s``: no shape after the first is started past it. ``dry_run``: on the CPU, with the stand-ins
    (module docstring). Refuses to run without a CUDA GPU otherwise."""
    _check_suite(lengths, head_dims, dtypes, causal, modes, methods, tokens, hidden, rounds, warmup)
    if dry_run:
        memory = StandInMemory(DRY_RUN["memory_mib"])
        device, smi = StandInDevice(memory), stand_in_smi_command()
        make = lambda dtype: stand_in_methods(memory, methods)  # noqa: E731
        track = memory.track
    else:
        if not torch.cuda.is_available():
            raise RuntimeError(
                "the GPU suite needs a CUDA GPU, and torch sees none (torch.cuda.is_available() is False"
                + (", this torch is a CPU build" if torch.version.cuda is None else "")
                + "): run it on a machine with an NVIDIA GPU after `make cuda`; on the CPU use python -m attnedu.bench"
                " (or --dry-run, which runs this suite's logic on the CPU with stand-ins)"
            )
        device, smi = CudaDevice(), smi_command(index=torch.cuda.current_device())
        make = lambda dtype: measurements.make_methods("cuda", DTYPES[dtype], methods)  # noqa: E731
        track = None
    threads = torch.get_num_threads()
    if dry_run:
        torch.set_num_threads(1)  # tiny shapes: more threads only wait for each other on a shared machine
    try:
        probe = (DRY_RUN if dry_run else GPU_SUITE)["oom_probe"] if oom_probe is None else oom_probe
        return _run_suite(lengths, head_dims, dtypes, causal, modes, make, tokens, hidden, rounds, warmup, log,
                          device, smi, track, on_shape, time_limit_s, methods, probe)  # fmt: skip
    finally:
        torch.set_num_threads(threads)


def _check_suite(lengths, head_dims, dtypes, causal, modes, methods, tokens, hidden, rounds, warmup) -> None:
    check_run_arguments(lengths, head_dims, causal, methods, modes)
    check_names("dtypes", dtypes, tuple(DTYPES))
    check_int("tokens", tokens, "batch x N, constant over N", minimum=1)
    check_int("hidden", hidden, "heads x head_dim, constant over head_dim", minimum=1)
    for head_dim in head_dims:
        if hidden % head_dim:
            raise ValueError(f"hidden={hidden} is not a multiple of head_dim={head_dim}: heads = hidden // head_dim "
                             "would not be a whole number; pass --hidden as a multiple of every head_dim")  # fmt: skip
    check_int("rounds", rounds, "timed calls per method and shape", minimum=1)
    check_int("warmup", warmup, "untimed rounds per shape", minimum=0)


def _probe_out_of_memory(bench, naive, lengths, dtype, head_dim, is_causal, mode, tokens, hidden, device, track,
                         log) -> None:  # fmt: skip
    """Naive attention ran at every N of a series: one untimed call at each of ``lengths`` (longer), until it runs
    out of memory, so that the table and the figure show where it does. A probe that ran is recorded as such."""
    heads = hidden // head_dim
    for n in lengths:
        batch = max(1, tokens // n)
        backward = mode == "forward+backward"
        q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], device.kind, requires_grad=backward)
        grad_out = torch.randn_like(q) if backward else None
        for x in (q, k, v, grad_out) if track else ():
            if x is not None:
                track(x)
        found = _prepare(naive, make_call(naive.fn, q, k, v, is_causal, mode, grad_out), device, 0, False)
        error = found.get("error") or "not timed: it ran (one call, probing where it runs out of memory)"
        if error.startswith("out of memory"):
            error = "out of memory (probe: one call)"
        bench.results.append(make_measurement("naive", naive, n, head_dim, is_causal, mode, dtype, batch, heads, [],
                                              error=error))  # fmt: skip
        log(f"  probe: naive {mode} {dtype} head_dim={head_dim} causal={is_causal} N={n}: {error}")
        del q, k, v, grad_out
        device.free_cache()
        if "out of memory" in error:
            break


def _run_suite(lengths, head_dims, dtypes, causal, modes, make_methods, tokens, hidden, rounds, warmup, log, device,
               smi, track, on_shape, time_limit_s, names, oom_probe=()) -> Benchmark:  # fmt: skip
    """The suite's loop on ``device`` (a CudaDevice, or the dry run's and the tests' stand-ins)."""
    log = log or (lambda line: None)
    info = provenance(device.kind, ", ".join(dtypes), 0, 0, torch.get_num_threads(), rounds, warmup)
    for key in ("threads", "interop_threads", "spread", "timing"):
        info.pop(key, None)
    info["dtypes"] = list(dtypes)
    info["batch"] = f"{tokens} // N (batch x N = {tokens}, at least 1)"
    info["heads"] = f"{hidden} // head_dim (heads x head_dim = {hidden})"
    info["shapes"] = (f"constant tokens, as FlashAttention-2's benchmark: batch x N = {tokens}, heads x head_dim = "
                      f"{hidden}; query_len = key_len = N; inputs from torch.randn")  # fmt: skip
    info["timing"] = (f"per shape, each method's first call apart, then {warmup} untimed and {rounds} timed rounds, "
                      "each round timing every method once in an order that changes from round to round (rotated, "
                      f"reversed every other round); {device.describe()}; median, 20th-80th percentiles, min, max "
                      f"of the {rounds} calls")  # fmt: skip
    info["spread"] = f"20th-80th percentile of the {rounds} timed calls"
    info["rounds"], info["warmup_rounds"] = rounds, warmup
    info["gpu_state"] = (
        f"nvidia-smi sampled every {SMI_INTERVAL_MS} ms, summarised per shape over its window (the "
        "last sample before it included)"
        if smi
        else "not recorded: nvidia-smi did not run"
    )
    info["suite"], info["finished"] = True, False
    info["dry_run"] = device.kind != "cuda"
    if info["dry_run"]:
        info["memory"] = ("dry run: a stand-in allocator's counters (StandInMemory: the inputs and outputs registered, "
                          "each stand-in method's working memory declared), measured as on a GPU")  # fmt: skip
    info["modes"] = list(modes)
    bench = Benchmark(info)
    series = [(dtype, d, c, mode) for dtype in dtypes for d in head_dims for c in causal for mode in modes]
    total, done, start = len(series) * len(lengths), 0, time.perf_counter()
    labels: dict[str, str] = {}
    with GpuMonitor(smi) as monitor:
        for dtype, head_dim, is_causal, mode in series:
            chosen = make_methods(dtype)
            labels.update({name: m.label for name, m in chosen.items()})
            ran_out: dict[str, int] = {}  # method -> the N at which it ran out of memory in this series
            heads = hidden // head_dim
            for n in lengths:
                if time_limit_s is not None and done and time.perf_counter() - start > time_limit_s:
                    info["stopped"] = f"time limit of {time_limit_s:g} s reached after {done} of {total} shapes"
                    log(info["stopped"])
                    break
                batch = max(1, tokens // n)
                backward = mode == "forward+backward"
                q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], device.kind, requires_grad=backward)
                grad_out = torch.randn_like(q) if backward else None
                for x in (q, k, v, grad_out) if track else ():
                    if x is not None:
                        track(x)
                window = time.perf_counter()
                skip = {
                    name: f"out of memory (not run: out of memory at N={at} already)" for name, at in ran_out.items()
                }
                found = measure_shape(chosen, q, k, v, is_causal, mode, device, grad_out, rounds=rounds, warmup=warmup,
                                      skip=skip)  # fmt: skip
                state = monitor.window(window, time.perf_counter())
                cells = []
                for name, method in chosen.items():
                    result = found[name]
                    if result.get("error", "").startswith("out of memory") and name not in ran_out:
                        ran_out[name] = n
                    times = result.pop("times", [])
                    row = make_measurement(name, method, n, head_dim, is_causal, mode, dtype, batch, heads,
                                           [round(t, 5) for t in times], **result)  # fmt: skip
                    if not row.error:
                        row.rounds, row.gpu_state = len(times), state
                    bench.results.append(row)
                    timing = (
                        f"{format_ms(row.median_ms)} ms {format_tflops(row.tflops)} TFLOP/s" if not row.error else ""
                    )
                    cells.append(f"{name} {row.error[:40] if row.error else timing}")
                del q, k, v, grad_out
                device.free_cache()
                done += 1
                elapsed = time.perf_counter() - start
                clocks = (
                    f" SM {state['sm_mhz'][0]:.0f}-{state['sm_mhz'][2]:.0f} MHz" if state and "sm_mhz" in state else ""
                )
                log(f"[{done}/{total}, {elapsed:.0f} s] {mode} {dtype} head_dim={head_dim} causal={is_causal} N={n} "
                    f"(batch {batch}, heads {heads}){clocks}: " + "; ".join(cells))  # fmt: skip
                info["methods"], info["seconds"] = labels, round(elapsed, 1)
                if on_shape:
                    on_shape(bench)
            if "stopped" in info:
                break
            if "naive" in chosen and "naive" not in ran_out:
                _probe_out_of_memory(bench, chosen["naive"], oom_probe, dtype, head_dim, is_causal, mode, tokens,
                                     hidden, device, track, log)  # fmt: skip
                if on_shape:
                    on_shape(bench)
    info["methods"] = labels
    info["skipped"] = {name: "cannot run here" for name in names if name not in labels}
    info["load_average_after"] = load_average()
    info["seconds"] = round(time.perf_counter() - start, 1)
    info["finished"] = "stopped" not in info
    return bench


# ------------------------------------------------------------------------------------------------------------
# how long the suite takes, estimated from a stored run
# ------------------------------------------------------------------------------------------------------------

CALL_OVERHEAD_MS = 0.25  # per call beyond the call itself: the L2 flush (~0.08 ms), the spin (~0.1 ms), the host


def estimate_seconds(reference: Benchmark, lengths, head_dims, dtypes, causal, modes, methods, rounds, warmup,
                     *, runs_before: int = 0) -> dict:  # fmt: skip
    """Seconds the suite would take with this plan, from ``reference``'s medians and first calls (a stored run on
    the same kind of GPU): per (method, shape), (first + memory + warmup + rounds) calls of the stored median plus
    ``CALL_OVERHEAD_MS`` each; the stored first call less one median is compilation, autotuning and planning, paid
    again only where nothing is cached (``runs_before`` = 0: a cold Triton cache and a fresh process; later runs of
    the same process kind pay the autotuning and cuDNN's plans but not compilation, taken as half). A shape or
    method the reference lacks is estimated from its nearest N at the same head_dim, scaled by the FLOPs."""
    calls = 2 + warmup + rounds
    timing = first = 0.0
    missing = []
    for dtype in dtypes:
        for d in head_dims:
            for c in causal:
                for mode in modes:
                    for n in lengths:
                        for method in methods:
                            row = _nearest(reference, method, n, d, c, mode, dtype)
                            if row is None:
                                missing.append((method, mode, dtype, n, d, c))
                                continue
                            scale = (n / row.n) if row.n != n else 1.0  # constant tokens: time grows as N
                            timing += calls * (row.median_ms * scale + CALL_OVERHEAD_MS) / 1000
                            setup = max(0.0, (row.first_call_ms or 0.0) - row.median_ms) / 1000
                            first += setup if runs_before == 0 else setup / 2
    return {"timing_s": round(timing, 1), "first_calls_s": round(first, 1), "total_s": round(timing + first, 1),
            "calls_per_method_and_shape": calls, "missing": missing}  # fmt: skip


def _nearest(reference: Benchmark, method, n, head_dim, causal, mode, dtype):
    rows = [r for r in reference.results if (r.method, r.head_dim, r.causal, r.mode) == (method, head_dim, causal, mode)
            and r.dtype in (None, dtype) and not r.error and r.median_ms]  # fmt: skip
    return min(rows, key=lambda r: abs(r.n - n), default=None)


# ------------------------------------------------------------------------------------------------------------
# the figure
# ------------------------------------------------------------------------------------------------------------


def plot_throughput(fig, bench: Benchmark, dtype: str | None = None):
    """TFLOP/s against N, one line per method, one panel per (mode, head_dim, causal), for one dtype (by default
    the first result's): the GPU suite's figure. Where a method ran out of memory, a red dotted vertical line at
    the first N it did (and a cross on the N axis), labelled with the method and the longest N that ran."""
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
            for o in bench.out_of_memory():
                if (o["mode"], o["head_dim"], o["causal"]) == (mode, head_dim, causal) and o["dtype"] in (None, dtype):
                    n = o["first_n_out_of_memory"]
                    ax.axvline(n, color="red", linestyle=":", linewidth=1.2)
                    ax.plot([n], [0], marker="x", color="red", markersize=9, clip_on=False)
                    ran = f", ran to N={o['longest_n_that_ran']}" if o["longest_n_that_ran"] else ""
                    ax.annotate(f"{o['method']}: out of memory{ran}", (n, 0), xytext=(-4, 6),
                                textcoords="offset points", ha="right", fontsize=7, color="red")  # fmt: skip
            ax.set_ylim(bottom=0)
            ax.set(xscale="log", title=f"{mode}, head_dim {head_dim}{', causal' if causal else ''}",
                   xlabel="sequence length N", ylabel=f"TFLOP/s ({dtype})")  # fmt: skip
            ns = sorted({r.n for r in bench.results})
            ax.set_xticks(ns, labels=[f"{n // 1024}k" if n % 1024 == 0 else str(n) for n in ns])
            ax.minorticks_off()
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return axes
