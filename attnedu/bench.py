"""Time and measure attention implementations (lesson 08): naive, tiled (``attnedu.flash``), PyTorch's SDPA with
its backend pinned and named, and on a CUDA GPU the Triton kernels; the forward pass, or forward and backward.

    python -m attnedu.bench                         # CPU, float32, N 1024..4096 -> benchmarks/attention_cpu.*
    python -m attnedu.bench --modes forward forward+backward --lengths 1024 2048   # the CPU, with the backward
    python -m attnedu.bench --gpu-suite             # CUDA GPU: the suite below -> benchmarks/attention_cuda.*
    python -m attnedu.bench --gpu-suite --lengths 4096 --head-dims 64 --dtypes bfloat16 --out /tmp/x  # a subset
    python -m attnedu.bench --quick --out /tmp/b    # seconds: what the test command runs
    python -m attnedu.bench --gpu-suite --dry-run --out /tmp/d   # the GPU suite's whole pipeline on the CPU
    python -m attnedu.bench --compare A.json B.json # two runs, per (method, shape): fails above 3% apart
    python -m attnedu.bench --gpu-suite --estimate benchmarks/attention_cuda.json   # its run time, from a stored run

The GPU suite (``make gpu-bench``): forward and forward+backward, N = 1k..16k, head_dim 64 and 128, causal and
not, bfloat16 (``--dtypes`` adds float16); Triton against SDPA's CUDNN_ATTENTION and FLASH_ATTENTION backends
(each pinned; a backend that refuses a shape is recorded as refusing it; ``--methods`` adds sdpa_efficient) and
naive attention (recorded as out of memory where it runs out). Constant tokens, as FlashAttention-2's benchmark:
batch x N = 16384 and heads x head_dim = 2048 (batch 16 at N = 1k ... 1 at 16k; 32 heads of 64, 16 of 128).

Method:
* GPU time: ``attnedu.bench_gpu``'s protocol: per shape, each method's first call timed apart ("first call ms":
  Triton's compilation and autotuning), then rounds in which every method is timed once, in an order that changes
  from round to round (20 timed calls per method and shape); before each call the L2 cache is flushed (256 MB
  zeroed) and a spin kernel queued (the host's launch cost hidden), CUDA events around it; median, 20th-80th
  percentiles, min and max. Triton's autotuned configuration, and the GPU's clocks, power, temperature and
  throttle reasons (nvidia-smi) are recorded per shape. The SDPA backend is selected (``sdpa_kernel``) and every
  check is made outside the timed call.
* CPU time: ``torch.utils.benchmark.Timer.blocked_autorange`` (its own warm-up call, blocks of calls long enough
  for the timer's cost to vanish, the thread count set), in rounds in which every (shape, method) runs once in
  turn, so that a burst of load on a shared machine, or a slow drift, hits all of them alike; median, min and max
  over rounds.
* FLOPs: 4 * batch * heads * N^2 * head_dim per forward, halved when causal (``attnedu.flash.attention_flops``);
  a backward counts 2.5 times a forward, so forward+backward 3.5 times. TFLOP = 1e12.
* memory, "extra": the peak beyond the inputs and what the call returns (the output; the gradients for
  forward+backward); "memory": inputs + returned + extra, what the call needs in all, which the GPU's memory ratios
  compare. On CUDA, ``torch.cuda.max_memory_allocated`` after ``gc.collect()`` and ``reset_peak_memory_stats``. On
  the CPU,
  tracemalloc cannot see torch's buffers, and a process's pages are reused, so each (method, shape) runs in a fresh
  Python process: after making the inputs and one tiny warm-up call it resets the peak resident size (writing 5 to
  ``/proc/self/clear_refs``, Linux), calls the method once, and reports the peak ``VmHWM`` minus the resident size
  before the call, minus what the call returned.
Nothing here asserts a time: numbers are reported with the machine's load average, for a reader to judge.

Four modules, each importing only those below it: ``attnedu.measurements`` (the methods, each called as
``fn(q, k, v, is_causal=...)``, the inputs, ``Measurement`` and ``Benchmark``, provenance), ``attnedu.bench_gpu``
(GPU timing, the GPU suite and its dry run), ``attnedu.bench_report`` (the tables, the figure, the files) and this one
(CPU
timing and memory, the runs, the command).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from . import bench_gpu
from ._validate import check_bool, check_choice, check_int, check_number, check_positive_ints, describe
from .bench_report import compare, compare_markdown, markdown, write
from .measurements import (
    DEVICES,
    DTYPES,
    METHODS,
    MODES,
    Benchmark,
    MiB,
    check_device,
    check_run_arguments,
    free_cache,
    is_out_of_memory,
    load_average,
    make_call,
    make_inputs,
    make_measurement,
    make_methods,
    nbytes,
    provenance,
)
from .runtime import progress

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
            if not is_out_of_memory(error):
                raise
            errors[key] = "out of memory"
            free_cache(device)
    times: dict[object, list[float]] = {key: [] for key in calls if key not in errors}
    if device == "cuda":
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


def _child_memory(method: str, batch: int, heads: int, n: int, head_dim: int, dtype: str, is_causal: bool,
                  mode: str = "forward") -> float:  # fmt: skip
    """In a fresh process: the extra resident memory (MiB) of one call, beyond the inputs and what the call
    returned (see the module's docstring)."""
    torch.set_num_threads(1)
    chosen = make_methods("cpu", DTYPES[dtype], [method])[method]
    backward = mode == "forward+backward"
    with chosen.context():
        tiny = make_inputs(1, 1, 64, head_dim, DTYPES[dtype], "cpu", requires_grad=backward)
        make_call(chosen.fn, *tiny, is_causal, mode, torch.ones(1, 1, 64, head_dim, dtype=DTYPES[dtype]))()  # warm-up
        q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], "cpu", requires_grad=backward)
        call = make_call(chosen.fn, q, k, v, is_causal, mode, torch.ones_like(q) if backward else None)
        before = _status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        returned = call()
        peak = _status_kib("VmHWM")
    return (peak - before) / 1024 - nbytes(returned) / MiB


def measure_memory(method: str, batch: int, heads: int, n: int, head_dim: int, dtype: str, is_causal: bool,
                   device: str, mode: str = "forward") -> float | None:  # fmt: skip
    """Extra memory of one call in MiB, beyond inputs and what it returned, measured the right way for
    ``device``."""
    if device == "cuda":
        chosen = make_methods("cuda", DTYPES[dtype], [method])[method]
        backward = mode == "forward+backward"
        q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], "cuda", requires_grad=backward)
        grad_out = torch.ones_like(q) if backward else None
        measured = bench_gpu.measure(chosen, q, k, v, is_causal, mode, "cuda", grad_out, rounds=1, warmup=0)
        return measured.get("extra_mib")
    if not Path("/proc/self/clear_refs").exists():
        return None  # not Linux: no reliable way to reset the peak resident size
    args = [method, batch, heads, n, head_dim, dtype, int(is_causal), mode]
    command = [sys.executable, "-m", "attnedu.bench", "--child-memory", *map(str, args)]
    # glibc keeps freed blocks for reuse, which hides a later allocation from the peak, and a fixed mmap threshold
    # makes it hand every block above 64 KiB back to the system when freed: the peak then counts live memory only.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"memory measurement of {method} at N={n} failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------------------
# the runs
# ------------------------------------------------------------------------------------------------------------


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
    check_device(device)
    check_run_arguments(lengths, head_dims, causal, methods, modes, repeats, warmup)
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
    info["load_average_after"] = load_average()
    return bench


def _run_cpu_shapes(bench, chosen, shapes, batch, heads, dtype, repeats, warmup, threads, min_run_time, memory,
                    memory_lengths) -> None:  # fmt: skip
    calls = {}
    for mode, n, head_dim, is_causal in shapes:
        backward = mode == "forward+backward"
        q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], "cpu", requires_grad=backward)
        grad_out = torch.ones_like(q) if backward else None
        for name, method in chosen.items():
            calls[(mode, n, head_dim, is_causal, name)] = Call(make_call(method.fn, q, k, v, is_causal, mode, grad_out),
                                                            method.context)  # fmt: skip
    memory_jobs = [key for key in calls if memory and key[1] in memory_lengths]
    bar = progress(repeats + len(memory_jobs), "attention benchmark")
    try:
        times, errors = time_methods(calls, "cpu", repeats, warmup, threads=threads, min_run_time=min_run_time,
                                     on_round=bar.update)  # fmt: skip
        del calls
        for key in dict.fromkeys([*times, *errors]):
            mode, n, head_dim, is_causal, name = key
            if key in errors:
                extra = {"error": errors[key]}
            else:
                extra = {}
            bench.results.append(make_measurement(name, chosen[name], n, head_dim, is_causal, mode, dtype, batch, heads,
                                              [1000 * s for s in times.get(key, [])], **extra))  # fmt: skip
        for mode, n, head_dim, is_causal, name in memory_jobs:
            if (mode, n, head_dim, is_causal, name) not in errors:
                found = bench.find(name, n, head_dim, is_causal, mode=mode)
                found.extra_mib = measure_memory(name, batch, heads, n, head_dim, dtype, is_causal, "cpu", mode)
            bar.update()
    finally:
        bar.close()


def _run_cuda_shapes(bench, chosen, shapes, batch, heads, dtype, memory, memory_lengths) -> None:
    for mode, n, head_dim, is_causal in shapes:
        backward = mode == "forward+backward"
        q, k, v = make_inputs(batch, heads, n, head_dim, DTYPES[dtype], "cuda", requires_grad=backward)
        grad_out = torch.randn_like(q) if backward else None
        for name, method in chosen.items():
            result = bench_gpu.measure(method, q, k, v, is_causal, mode, "cuda", grad_out,
                                       memory=memory and n in memory_lengths)  # fmt: skip
            bench.results.append(make_measurement(name, method, n, head_dim, is_causal, mode, dtype, batch, heads, [],
                                              **result))  # fmt: skip
        del q, k, v, grad_out


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
    GPU_SUITE = bench_gpu.GPU_SUITE
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
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"suite: timed rounds per shape, a call of each method in each ({GPU_SUITE['rounds']})",
    )
    parser.add_argument("--warmup-rounds", type=int, default=None,
                        help=f"suite: untimed rounds per shape ({GPU_SUITE['warmup']})")  # fmt: skip
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="suite: its pipeline on the CPU, tiny shapes, stand-in methods, timer and nvidia-smi",
    )
    parser.add_argument("--time-limit", type=float, default=None, help="suite: start no shape after these seconds")
    parser.add_argument("--estimate", metavar="STORED_JSON", default=None,
                        help="suite: print how long it would take, from a stored run's timings, and stop")  # fmt: skip
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("A_JSON", "B_JSON"),
        default=None,
        help="two runs: per (method, shape) the relative difference of medians; exit 1 above 3%%",
    )
    parser.add_argument("--tolerance", type=float, default=0.03, help="--compare: the largest relative difference")
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
        method, batch, heads, n, head_dim, dtype, is_causal, mode = args.child_memory
        print(_child_memory(method, int(batch), int(heads), int(n), int(head_dim), dtype, bool(int(is_causal)), mode))
        return
    if args.compare:
        first, second = (Benchmark.load(path) for path in args.compare)
        result = compare(first, second, args.tolerance)
        print(compare_markdown(result, *args.compare))
        sys.exit(1 if result["failed"] else 0)
    causal_choice = {"no": [False], "yes": [True], "both": [False, True], None: None}[args.causal]
    if args.no_autotune:
        from .triton_attention import AUTOTUNE_ENV

        os.environ[AUTOTUNE_ENV] = "0"
    if args.gpu_suite:
        _gpu_suite_command(args, causal_choice, command)
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


def _gpu_suite_command(args, causal_choice, command: str) -> None:
    """--gpu-suite: the suite (or its dry run, or its estimate), the JSON rewritten after every shape, then the
    Markdown report and the figure."""
    suite = bench_gpu.GPU_SUITE
    plan = bench_gpu.DRY_RUN if args.dry_run else suite
    options = {
        "lengths": args.lengths or plan["lengths"], "head_dims": args.head_dims or plan["head_dims"],
        "dtypes": args.dtypes or suite["dtypes"], "causal": causal_choice or suite["causal"],
        "modes": args.modes or suite["modes"], "methods": args.methods or suite["methods"],
        "rounds": args.rounds or plan["rounds"],
        "warmup": plan["warmup"] if args.warmup_rounds is None else args.warmup_rounds,
    }  # fmt: skip
    tokens = plan["tokens"] if args.dry_run and args.tokens == suite["tokens"] else args.tokens
    hidden = plan["hidden"] if args.dry_run and args.hidden == suite["hidden"] else args.hidden
    if args.estimate:
        reference = Benchmark.load(args.estimate)
        for runs_before, what in ((0, "first run (cold Triton cache)"), (1, "a later run (kernels compiled)")):
            found = bench_gpu.estimate_seconds(reference, **options, runs_before=runs_before)
            calls = found["calls_per_method_and_shape"]
            print(f"{what}: {found['total_s']:.0f} s = timing {found['timing_s']:.0f} s ({calls} calls per method "
                  f"and shape) + first calls {found['first_calls_s']:.0f} s; "
                  f"{len(found['missing'])} (method, shape) not in {args.estimate}")  # fmt: skip
        return
    out = Path(args.out or ("/tmp/attnedu_dry_run/attention_cuda" if args.dry_run else "benchmarks/attention_cuda"))
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(bench: Benchmark) -> None:  # after every shape: a run cut off leaves what it measured
        bench.provenance["command"] = command
        partial = out.with_suffix(".json.partial")
        partial.write_text(json.dumps(bench.to_json(), indent=1) + "\n")
        partial.replace(out.with_suffix(".json"))

    try:
        bench = bench_gpu.run_gpu_suite(**options, tokens=tokens, hidden=hidden, on_shape=save,
                                        log=lambda line: print(line, flush=True), time_limit_s=args.time_limit,
                                        dry_run=args.dry_run)  # fmt: skip
    except RuntimeError as error:
        if torch.cuda.is_available() or args.dry_run:
            raise
        sys.exit(f"python -m attnedu.bench --gpu-suite: {error}")
    bench.provenance["command"] = command
    paths = write(bench, out, args.note)
    print(markdown(bench, args.note))
    print("wrote", ", ".join(map(str, paths)))


if __name__ == "__main__":
    main()
