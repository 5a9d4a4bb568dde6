"""attnedu.bench (with attnedu.measurements and attnedu.bench_gpu): the benchmark command runs at small scale and
writes its reports; its GPU suite's whole pipeline runs on the CPU as a dry run (stand-in methods, timer, memory and
nvidia-smi); its arguments are checked; every method is called as fn(q, k, v, is_causal=...) and computes attention.
No time is asserted.

``test_gpu_suite_runs_on_a_real_gpu`` runs only with a CUDA GPU (``pytest tests/test_bench.py -k gpu``)."""

import contextlib
import gc
import importlib.util
import json
import os
import sys
import time
import types
from pathlib import Path

import pytest
import torch
from matplotlib.figure import Figure

from attnedu import bench, bench_gpu, bench_report, measurements
from attnedu.flash import attention_flops

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmark_writes_json_markdown_and_plot(tmp_path):
    bench.main(["--quick", "--out", str(tmp_path / "quick")])
    data = json.loads((tmp_path / "quick.json").read_text())
    provenance = data["provenance"]
    for key in ("device", "torch", "dtype", "timing", "memory", "date", "load_average_before", "flops", "threads"):
        assert provenance[key] is not None, key
    assert "blocked_autorange" in provenance["timing"]
    assert provenance["methods"]["sdpa"].startswith("SDPA-")  # the backend is named
    methods = {r["method"] for r in data["results"]}
    assert {"naive", "tiled", "sdpa"} <= methods
    for r in data["results"]:
        assert len(r["times_ms"]) == 3 and r["min_ms"] <= r["median_ms"] <= r["max_ms"] and r["tflops"] > 0
        assert r["mode"] == "forward" and r["dtype"] == "float32" and (r["batch"], r["heads"]) == (1, 2)
    measured = [r for r in data["results"] if r["extra_mib"] is not None]
    assert {r["n"] for r in measured} == {256}  # quick mode measures memory at the largest length only
    assert data["ratios"] and "naive / tiled time" in data["ratios"][0]
    assert "| N | head_dim |" in (tmp_path / "quick.md").read_text()
    assert (tmp_path / "quick.png").stat().st_size > 1000


def test_every_method_takes_the_flag_as_is_causal():
    """Each CPU method, called as the benchmark calls it (``make_call``: fn(q, k, v, is_causal=...)), computes
    attention with and without the causal mask: the flag reaches the function, named as PyTorch names it."""
    q, k, v = measurements.make_inputs(1, 2, 24, 8, torch.float32, "cpu", seed=3)
    chosen = measurements.make_methods("cpu", torch.float32, ("naive", "tiled", "sdpa", "sdpa_math", "linear"))
    for is_causal in (False, True):
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        for name, method in chosen.items():
            with method.context():
                out = measurements.make_call(method.fn, q, k, v, is_causal, "forward")()
            if name == "linear":  # not softmax attention: its causal output at position 0 is v's first row
                assert out.shape == expected.shape and torch.allclose(out[..., 0, :], v[..., 0, :]) == is_causal
            else:
                torch.testing.assert_close(out, expected, msg=f"{name}, is_causal={is_causal}")


def test_rounds_interleave_every_shape_and_method_and_set_the_threads():
    """After the warm-up, each round measures every (shape, method) once, in turn, with the requested threads."""
    order, threads_seen = [], set()

    def call(key):
        def fn():
            if not order or order[-1] != key:
                order.append(key)
            threads_seen.add(torch.get_num_threads())

        return fn

    calls = {key: call(key) for key in [(64, "naive"), (64, "sdpa"), (128, "naive"), (128, "sdpa")]}
    before = torch.get_num_threads()  # 1 in the tests (tests/conftest.py): ask for another number
    times, errors = bench.time_methods(calls, "cpu", repeats=2, warmup=1, threads=before + 1, min_run_time=0.001)
    assert not errors and all(len(t) == 2 for t in times.values())
    assert order == list(calls) * 3  # warm-up, round 1, round 2
    assert threads_seen == {before + 1}
    assert torch.get_num_threads() == before  # and put back


def test_forward_and_backward_on_the_cpu():
    run = bench.run_benchmark(lengths=(64,), head_dims=(16,), batch=1, heads=2, methods=("naive", "tiled", "sdpa"),
                              modes=bench.MODES, repeats=2, memory=False, min_run_time=0.001)  # fmt: skip
    assert {(r.method, r.mode) for r in run.results} == {(m, mode) for m in ("naive", "tiled", "sdpa")
                                                         for mode in bench.MODES}  # fmt: skip
    for r in run.results:
        flops = attention_flops(1, 2, 64, 64, 16) * (3.5 if r.mode == "forward+backward" else 1)
        assert r.tflops == pytest.approx(flops / (r.median_ms / 1000) / 1e12)
    assert {row["mode"] for row in run.ratios()} == set(bench.MODES)
    assert "## forward+backward, float32" in bench_report.markdown(run)


def test_memory_measurement_sees_the_score_matrices():
    """Naive attention at N=1024, 4 heads, float32 allocates S and P: 2 x 16 MiB. A fresh process must see them."""
    naive = bench.measure_memory("naive", 1, 4, 1024, 16, "float32", False, "cpu")
    tiled = bench.measure_memory("tiled", 1, 4, 1024, 16, "float32", False, "cpu")
    if naive is None:
        pytest.skip("no /proc/self/clear_refs (not Linux): peak resident memory cannot be reset")
    assert 24 <= naive <= 48
    assert tiled < naive / 4


def test_plot_and_targets_from_a_stored_benchmark():
    def m(method, n, ms, mib):
        return measurements.Measurement(method, method, n, 64, False, [ms], ms, ms, ms, 1.0, mib)

    stored = bench.Benchmark({"dtype": "float32", "device_kind": "cpu", "device": "CPU: test", "methods": {}}, [
        m("naive", 4096, 900.0, 1024.0), m("tiled", 4096, 400.0, 16.0), m("sdpa", 4096, 300.0, 8.0),
    ])  # fmt: skip
    targets = {t["target"]: t for t in bench_report.cpu_targets(stored)}
    assert all(t["met"] for t in targets.values()) and len(targets) == 3  # no forward+backward measured
    assert targets["naive extra memory / tiled extra memory, forward"]["value"] == 64
    assert targets["tiled time / SDPA time, forward"]["value"] == 400 / 300
    slow = bench.Benchmark(stored.provenance, [m("tiled", 4096, 500.0, 16.0), m("sdpa", 4096, 300.0, 8.0)])
    assert [t["met"] for t in bench_report.cpu_targets(slow)] == [False]  # 1.67 times SDPA misses the 1.5 bound
    again = bench.Benchmark.from_json(json.loads(json.dumps(stored.to_json())))
    assert again.find("tiled", 4096, 64, False).extra_mib == 16.0
    left, right = bench_report.plot_benchmark(Figure(), stored)
    assert len(left.lines) >= 3 and len(right.lines) == 3


def test_the_stored_cpu_results_still_load():
    """benchmarks/attention_cpu.json is read as lesson 08 reads it, and holds what the lesson prints from it: both
    modes, causal and not, and every CPU target."""
    stored = bench.Benchmark.load(ROOT / "benchmarks" / "attention_cpu.json")
    assert {(r.mode, r.causal) for r in stored.results} == {(m, c) for m in bench.MODES for c in (False, True)}
    assert len(bench_report.cpu_targets(stored)) == 4
    assert all("naive / tiled time" in row for row in stored.ratios())
    bench_report.plot_benchmark(Figure(), stored)
    assert "| N | head_dim |" in bench_report.markdown(stored)


def test_a_method_that_runs_out_of_memory_is_recorded_not_fatal():
    def too_big():
        raise MemoryError("naive attention at this length")

    times, errors = bench.time_methods({"fine": lambda: None, "naive": too_big}, "cpu", repeats=2, warmup=1,
                                       min_run_time=0.001)  # fmt: skip
    assert errors == {"naive": "out of memory"} and len(times["fine"]) == 2 and "naive" not in times
    ok = measurements.Measurement("tiled", "tiled", 8192, 64, False, [5.0], 5.0, 5.0, 5.0, 1.0, 4.0)
    sdpa = measurements.Measurement("sdpa", "SDPA-flash", 8192, 64, False, [2.0], 2.0, 2.0, 2.0, 2.0, 1.0)
    failed = measurements.Measurement(
        "naive", "naive", 8192, 64, False, [], None, None, None, None, error="out of memory"
    )
    stored = bench.Benchmark({"dtype": "bfloat16", "device_kind": "cuda", "device": "GPU", "methods": {}},
                             [failed, ok, sdpa])  # fmt: skip
    shape = {"mode": "forward", "dtype": None, "n": 8192, "head_dim": 64, "causal": False}
    assert stored.ratios() == [{**shape, "tiled / sdpa time": 2.5}]
    assert "| naive | out of memory |" in bench_report.markdown(stored)
    left, _ = bench_report.plot_benchmark(Figure(), stored)
    assert len(left.lines) >= 2


# ------------------------------------------------------------------------------------------------------------
# the GPU suite's logic, on the CPU: its dry run (stand-in methods, timer, memory and nvidia-smi)
# ------------------------------------------------------------------------------------------------------------


class RecordingDevice(bench_gpu.StandInDevice):
    """A stand-in device that records what the protocol asks of it, in order."""

    def __init__(self):
        super().__init__()
        self.events = []

    def synchronize(self):
        self.events.append("sync")

    def before_call(self):
        self.events.append("flush")


def test_rounds_time_every_method_once_each_in_a_changing_order():
    """After the untimed rounds, each timed round calls every key once, each call after a flush; the order rotates
    and reverses, so that each key is first equally often; one synchronize per round; a key's context is entered
    around each of its calls."""
    device, calls, entered = RecordingDevice(), [], []

    def call(key):
        return lambda: calls.append(key)

    @contextlib.contextmanager
    def context():
        entered.append(1)
        yield

    keys = ["a", "b", "c"]
    times = bench_gpu.time_interleaved({k: call(k) for k in keys}, device, rounds=6, warmup=2, contexts={"b": context})
    assert {k: len(v) for k, v in times.items()} == {"a": 6, "b": 6, "c": 6} and len(entered) == 8
    rounds = [calls[i : i + 3] for i in range(0, len(calls), 3)]
    assert all(sorted(r) == keys for r in rounds) and len({tuple(r) for r in rounds}) == 6  # no two rounds alike
    firsts = [r[0] for r in rounds[2:]]  # the timed rounds
    assert sorted(firsts) == ["a", "a", "b", "b", "c", "c"]
    assert device.events.count("sync") == 8 and device.events.count("flush") == 24
    assert bench_gpu.summarize([4.0, 1.0, 2.0, 3.0, 5.0]) == {"median": 3.0, "q20": 1.8, "q80": 4.2, "min": 1.0,
                                                              "max": 5.0}  # fmt: skip


def test_memory_is_measured_after_garbage_of_earlier_calls_is_collected():
    """The H100 run's -122 MiB: an earlier call's result held by a reference cycle is counted in ``before``, then
    collected inside the measured call, so peak - before - returned comes out negative. Collecting first gives the
    call's own working memory; the stand-in allocator reproduces the failure without the collection."""
    memory = bench_gpu.StandInMemory()
    device = bench_gpu.StandInDevice(memory)
    work = bench_gpu.MiB

    def method():  # a garbage collection inside the call (as Python may run one), 1 MiB of work, a 2 MiB result
        gc.collect()
        memory.alloc(work)
        out = memory.track(torch.zeros(2 * 2**20 // 4))
        memory.free(work)
        return out

    def leave_garbage():  # a result kept alive by a reference cycle: freed only when the collector runs
        cycle = {"result": method()}
        cycle["self"] = cycle

    gc.disable()
    try:
        leave_garbage()
        before = memory.allocated
        memory.peak = before
        returned = method()
        assert (memory.peak - before - memory.held(returned)) / bench_gpu.MiB < 0  # the bug, reproduced
        del returned
        leave_garbage()
        returned, fields = bench_gpu.measure_memory(method, device, inputs_bytes=bench_gpu.MiB)
    finally:
        gc.enable()
    assert fields["extra_mib"] == 1.0 and fields["retained_mib"] == 0.0 and fields["gc_freed_mib"] == 2.0
    assert fields["memory_mib"] == 1.0 + 2.0 + 1.0  # inputs + returned + extra


def test_a_call_that_frees_what_it_did_not_allocate_is_measured_again():
    """A method that frees a cache left by its previous call (memory ``before`` counted) is flagged and measured
    once more: the recorded extra memory is the second call's, never negative."""
    memory = bench_gpu.StandInMemory()
    device = bench_gpu.StandInDevice(memory)
    cache = {}

    def fn(q, k, v, *, is_causal=False):
        if "old" in cache:
            memory.free(cache.pop("old"))  # the previous call's cache goes, once
            cache["gone"] = True
        elif "gone" not in cache:
            memory.alloc(4 * bench_gpu.MiB)
            cache["old"] = 4 * bench_gpu.MiB
        return memory.track(q * 1.0)

    q = torch.zeros(2**18)  # 1 MiB
    result = bench_gpu._prepare(measurements.Method("m", "m", fn), lambda: fn(q, q, q), device, 0, True)
    assert result["memory_note"].startswith("measured twice") and result["extra_mib"] == 0.0
    assert result["retained_mib"] == 0.0


def run_dry_suite(**overrides):
    options = {"lengths": (64, 128, 256), "head_dims": (16,), "dtypes": ("bfloat16",), "causal": (False, True),
               "modes": bench.MODES, "methods": ("triton", "sdpa_flash", "sdpa_cudnn", "naive"), "tokens": 512,
               "hidden": 64, "rounds": 3, "warmup": 1, "log": None, "dry_run": True}  # fmt: skip
    options.update(overrides)
    return bench_gpu.run_gpu_suite(**options)


def test_gpu_suite_dry_run_records_rounds_configuration_state_memory_and_out_of_memory(tmp_path):
    lines, saved = [], []
    suite = run_dry_suite(log=lines.append, on_shape=lambda b: saved.append(len(b.results)))
    assert len(lines) == 2 * 2 * 3 and lines[0].startswith("[1/12")  # progress: one line per shape
    assert saved == [4 * i for i in range(1, 13)]  # after every shape, what was measured so far
    assert len(suite.results) == 2 * 2 * 3 * 4  # (causal, mode, N, method)
    for r in suite.results:
        assert (r.batch, r.heads, r.dtype) == (512 // r.n, 64 // 16, "bfloat16")  # constant tokens and width
        if r.error:
            continue
        flops = attention_flops(r.batch, r.heads, r.n, r.n, 16, r.causal) * (3.5 if r.mode != "forward" else 1)
        assert r.tflops == pytest.approx(flops / (r.median_ms / 1e3) / 1e12) and r.first_call_ms > 0
        assert r.rounds == len(r.times_ms) == 3 and r.min_ms <= r.q20_ms <= r.median_ms <= r.q80_ms <= r.max_ms
        assert r.extra_mib >= 0 and r.memory_mib > r.extra_mib and r.retained_mib == 0
        assert r.gpu_state["samples"] >= 1 and len(r.gpu_state["sm_mhz"]) == 3 and "throttle" in r.gpu_state
        assert (r.config is not None) == (r.method == "triton")
    naive = {(r.mode, r.causal, r.n): r.error for r in suite.results if r.method == "naive"}
    assert naive[("forward", False, 128)] is None and naive[("forward", False, 256)] == "out of memory"
    oom = suite.out_of_memory()
    assert len(oom) == 4 and all(o["first_n_out_of_memory"] == 256 and o["longest_n_that_ran"] == 128 for o in oom)
    ratios = {(row["mode"], row["causal"], row["n"]): row for row in suite.ratios()}
    row = ratios[("forward", False, 128)]
    naive_128 = suite.find("naive", 128, 16, False)
    assert row["naive / triton memory"] == naive_128.memory_mib / suite.find("triton", 128, 16, False).memory_mib
    assert not any("naive / triton extra memory" in r for r in ratios.values())
    assert suite.provenance["finished"] and suite.provenance["dry_run"] and suite.provenance["rounds"] == 3
    text = bench_report.markdown(suite)
    for part in ("## forward, bfloat16", "## Out of memory", "## Ratios", "memory MiB |", "naive / triton memory",
                 "## Per shape: Triton's configuration", "forward M256 N512"):  # fmt: skip
        assert part in text, part
    paths = bench_report.write(suite, tmp_path / "suite")
    assert paths[2].stat().st_size > 1000 and bench.Benchmark.load(paths[0]).results == suite.results
    axes = bench_gpu.plot_throughput(Figure(), suite)
    marked = [line for ax in axes.flat for line in ax.lines if line.get_color() == "red"]
    assert len(marked) == 4 * 2  # a vertical line and a cross per series where naive ran out of memory


def test_gpu_suite_command_dry_run_writes_as_it_goes_and_stops_at_a_time_limit(tmp_path, capsys):
    out = tmp_path / "dry" / "attention_cuda"
    bench.main(["--gpu-suite", "--dry-run", "--lengths", "64", "128", "--head-dims", "16", "--causal", "no",
                "--rounds", "2", "--time-limit", "0", "--out", str(out)])  # fmt: skip
    stored = bench.Benchmark.load(out.with_suffix(".json"))
    assert {r.n for r in stored.results} == {64} and not stored.provenance["finished"]
    assert "time limit" in stored.provenance["stopped"] and "--time-limit 0" in stored.provenance["command"]
    assert "**Unfinished run**" in out.with_suffix(".md").read_text() and out.with_suffix(".png").exists()


def test_compare_two_runs_fails_above_the_tolerance(tmp_path, capsys):
    suite = run_dry_suite(lengths=(64, 128), causal=(False,), modes=("forward",))
    first = tmp_path / "a.json"
    first.write_text(json.dumps(suite.to_json()))
    data = suite.to_json()
    for r in data["results"]:
        if r["method"] == "triton" and r["n"] == 128:
            r["median_ms"] *= 1.05
            r["config"] = {"forward": {"BLOCK_M": 64}}
    second = tmp_path / "b.json"
    second.write_text(json.dumps(data))
    result = bench_report.compare(bench.Benchmark.load(first), bench.Benchmark.load(second), 0.03)
    assert [row["key"][:4] for row in result["failed"]] == [("triton", "forward", "bfloat16", 128)]
    assert result["failed"][0]["difference"] == pytest.approx(0.05) and result["failed"][0]["config_changed"]
    with pytest.raises(SystemExit) as same:
        bench.main(["--compare", str(first), str(first)])
    assert same.value.code == 0 and "largest relative difference of medians 0.0%" in capsys.readouterr().out
    with pytest.raises(SystemExit) as apart:
        bench.main(["--compare", str(first), str(second)])
    assert apart.value.code == 1 and "+5.0% **over**" in capsys.readouterr().out


def test_the_gpu_monitor_summarises_nvidia_smi_samples_over_a_window():
    with bench_gpu.GpuMonitor(bench_gpu.stand_in_smi_command(), interval_ms=20) as monitor:
        start = time.perf_counter()
        time.sleep(0.3)
        state = monitor.window(start, time.perf_counter())
    assert state["samples"] >= 3 and 1900 <= state["sm_mhz"][0] <= state["sm_mhz"][2] <= 1980
    assert state["mem_mhz"] == [2619.0, 2619.0] and 650 <= state["power_w"][0] <= state["power_w"][1]
    assert set(state["throttle"]) <= {"SwPowerCap"}
    assert bench_gpu.GpuMonitor(None).window(0, 1) is None  # no nvidia-smi: nothing recorded, nothing fails


def test_triton_configs_reads_what_the_autotuner_chose_for_this_call(monkeypatch):
    """Triton's Autotuner sets best_config at each launch: cleared first, so a kernel this call did not launch
    (the backward's, in a forward) is not reported with a stale choice."""
    from attnedu import triton_attention as ta

    config = types.SimpleNamespace(kwargs={"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=3)
    tuners = {"forward": types.SimpleNamespace(best_config=None), "dq": types.SimpleNamespace(best_config=config)}
    monkeypatch.setattr(ta, "_get_kernels", lambda: types.SimpleNamespace(tuned=tuners))
    monkeypatch.setenv(ta.AUTOTUNE_ENV, "1")

    def forward():
        tuners["forward"].best_config = config
        return "out"

    returned, chosen = measurements.triton_configs(forward)
    assert returned == "out"
    assert chosen == {"forward": {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}}
    monkeypatch.setenv(ta.AUTOTUNE_ENV, "0")
    assert measurements.triton_configs(forward)[1]["autotune"].startswith("off")


def test_the_suite_fits_the_device_budget_by_the_stored_run():
    """The run-time estimate from the stored H100 run: the default suite, twice, within ~8 minutes of device
    time (the GPU session's 10 for the suite and the tuning check, less start-up); every (method, shape) found."""
    stored = bench.Benchmark.load(ROOT / "benchmarks" / "attention_cuda.json")
    plan = {k: bench_gpu.GPU_SUITE[k] for k in ("lengths", "head_dims", "dtypes", "causal", "modes", "methods",
                                                "rounds", "warmup")}  # fmt: skip
    cold = bench_gpu.estimate_seconds(stored, **plan)
    warm = bench_gpu.estimate_seconds(stored, **plan, runs_before=1)
    assert not cold["missing"] and cold["calls_per_method_and_shape"] >= 2 + 20
    assert warm["total_s"] < cold["total_s"] and cold["total_s"] + warm["total_s"] < 8 * 60


def test_the_stored_gpu_results_still_load():
    """benchmarks/attention_cuda*.json, written before the memory column and the rounds: read, tabled, drawn."""
    for name in ("attention_cuda.json", "attention_cuda_32k.json"):
        stored = bench.Benchmark.load(ROOT / "benchmarks" / name)
        assert stored.results and "| N | head_dim |" in bench_report.markdown(stored)
        bench_gpu.plot_throughput(Figure(), stored)


def test_gpu_provenance_records_the_machine(monkeypatch):
    props = types.SimpleNamespace(name="Fake H100", major=9, minor=0, multi_processor_count=132, total_memory=80 << 30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=None: props)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: props.name)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(measurements, "_nvidia_smi", lambda: {"driver_version": "999.1", "clocks.sm": "1980"})
    info = bench.provenance("cuda", "bfloat16", 1, 8, 1, 1, 0)
    for key in ("device", "gpu", "nvidia_smi", "cuda", "cudnn", "torch", "triton", "tf32_matmul", "l2",
                "first_call", "triton_autotune", "timing", "memory"):  # fmt: skip
        assert key in info, key
    assert info["gpu"]["capability"] == "9.0" and info["nvidia_smi"]["driver_version"] == "999.1"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_the_gpu_suite_refuses_to_run_without_a_gpu(capsys):
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        bench_gpu.run_gpu_suite(lengths=[1024])
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--gpu-suite", "--lengths", "1024"])
    assert "--gpu-suite" in str(exit_info.value.code) and "CUDA GPU" in str(exit_info.value.code)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: bench.run_benchmark(methods=["naive", "flash"]), ValueError, r"methods\[1\] should be one of"),
        (lambda: bench.run_benchmark(repeats=0), ValueError, r"repeats \(rounds of timing\) should be an int with 1"),
        (lambda: bench.run_benchmark(lengths=[1024, -1]), ValueError, r"lengths\[1\] \(sequence length N\)"),
        (lambda: bench.run_benchmark(head_dims=[0]), ValueError, r"head_dims\[0\] \(head size\)"),
        (lambda: bench.run_benchmark(head_dims=[64.0]), TypeError, r"head_dims\[0\] should be one of positive ints"),
        (lambda: bench.run_benchmark(device="gpu"), ValueError, r"device should be one of .* 'cuda'"),
        (lambda: bench.run_benchmark(causal=True), TypeError, r"causal should be a list of bools .* \[causal\]"),
        (lambda: bench.run_benchmark(lengths=1024), TypeError, r"lengths should be a list of positive ints"),
        (lambda: bench.run_benchmark(lengths=True), TypeError, r"lengths should be a list"),
        (lambda: bench.run_benchmark(modes=["backward"]), ValueError, r"modes\[0\] should be one of"),
        (lambda: bench.run_benchmark(dtype="fp16"), ValueError, r"dtype should be one of"),
        (lambda: bench.run_benchmark(threads=0), ValueError, r"threads"),
        (lambda: bench_gpu.run_gpu_suite(dtypes="bfloat16"), TypeError, r"dtypes should be a list of names"),
        (lambda: bench_gpu.run_gpu_suite(head_dims=[64, 96], hidden=2048), ValueError, r"hidden=2048 .* head_dim=96"),
        (lambda: bench_gpu.run_gpu_suite(rounds=0), ValueError, r"rounds"),
        (lambda: bench_gpu.run_gpu_suite(methods=["triton", "sdpa-flash"]), ValueError, r"did you mean 'sdpa_flash'"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")
def test_gpu_suite_runs_on_a_real_gpu(tmp_path):
    """A one-shape suite on the GPU: every method measured (or refused/out of memory, recorded), files written."""
    suite = bench_gpu.run_gpu_suite(lengths=[1024], head_dims=[64], dtypes=["bfloat16"], causal=[True], rounds=5,
                                    warmup=1, log=print)  # fmt: skip
    found = {(r.method, r.mode): r for r in suite.results}
    assert len(found) == len(bench_gpu.GPU_SUITE["methods"]) * 2
    for mode in bench.MODES:
        triton = found[("triton", mode)]
        assert triton.error is None and triton.tflops > 0 and triton.extra_mib is not None and triton.config
        assert triton.first_call_ms >= triton.median_ms and triton.rounds == 5 and triton.memory_mib > 0
    for key in ("gpu", "nvidia_smi", "cuda", "cudnn", "tf32_matmul", "l2", "triton_autotune"):
        assert key in suite.provenance, key
    paths = bench_report.write(suite, tmp_path / "attention_cuda")
    assert all(p.exists() for p in paths)


def test_steady_medians_drop_each_shapes_first_call():
    """Each shape's first call is dropped wherever it comes (interleaved or not), then the median of the rest, the
    mean of the two middle values for an even count; the arguments are checked."""
    steady_medians = bench.steady_medians
    ids = torch.tensor([0, 1, 0, 1, 1, 0, 1])
    times = torch.tensor([90.0, 80.0, 3.0, 2.0, 4.0, 5.0, 7.0])
    # shape 0: 90 dropped -> median(3, 5) = 4; shape 1: 80 dropped -> median(2, 4, 7) = 4
    assert steady_medians(ids, times).tolist() == [4.0, 4.0]
    assert steady_medians(torch.tensor([1, 1, 1, 0, 0]), torch.tensor([9.0, 1.0, 2.0, 9.0, 6.0])).tolist() == [6.0, 1.5]
    assert steady_medians(ids, times, warmup=0).tolist() == [5.0, 5.5]
    with pytest.raises(ValueError, match="each run more than warmup = 1 times"):
        steady_medians(torch.tensor([0, 1, 0]), torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="shape_ids should be a 1-D integer tensor"):
        steady_medians(torch.tensor([0.0, 0.0]), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="one time per call"):
        steady_medians(torch.tensor([0, 0]), torch.tensor([1.0]))


def test_the_tuning_script_checks_the_suites_configurations_with_the_same_timer(tmp_path, monkeypatch):
    """benchmarks/tune_triton.py --against: each Triton forward row of a suite's JSON that recorded its
    configuration is timed again at that configuration (by the suite's timing function on a GPU; a fake one here)
    and compared with the suite's median; rows over 3% apart are flagged."""
    spec = importlib.util.spec_from_file_location("tune_triton", ROOT / "benchmarks" / "tune_triton.py")
    tune_triton = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tune_triton)
    suite = run_dry_suite(lengths=(64, 128), causal=(False,), modes=bench.MODES, methods=("triton", "naive"))
    for r in suite.results:
        if r.method == "triton":
            r.config = {"forward": {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}}
            r.median_ms = {64: 1.0, 128: 2.0}[r.n]
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(suite.to_json()))
    launched = []
    monkeypatch.setattr(tune_triton.ta, "_forward", lambda q, k, v, causal, config: launched.append(config))
    rows = tune_triton.check_against(
        path, timer=lambda fn: 1.02 if fn() is None else 0, device="cpu", log=lambda line: None
    )
    assert [(row["n"], round(row["difference"], 3), row["failed"]) for row in rows] == [(64, 0.02, False),
                                                                                        (128, -0.49, True)]  # fmt: skip
    assert launched[0] == {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
    assert (
        tune_triton.check_against(path, [128], timer=lambda fn: 2.0, device="cpu", log=lambda line: None)[0][
            "difference"
        ]
        == 0.0
    )


def test_where_naive_attention_never_ran_out_a_probe_finds_where_it_does():
    suite = run_dry_suite(lengths=(64, 128), head_dims=(32,), causal=(False,), modes=("forward",),
                          methods=("triton", "naive"))  # fmt: skip
    naive = {r.n: r.error for r in suite.results if r.method == "naive"}
    assert naive == {64: None, 128: None, 512: "out of memory (probe: one call)"}
    expected = {"method": "naive", "mode": "forward", "dtype": "bfloat16", "head_dim": 32, "causal": False,
                "first_n_out_of_memory": 512, "longest_n_that_ran": 128}  # fmt: skip
    assert suite.out_of_memory() == [expected]
    axes = bench_gpu.plot_throughput(Figure(), suite)
    assert 512 in axes[0][0].get_xticks() and "naive: out of memory, ran to N=128" in axes[0][0].texts[0].get_text()


def test_a_method_that_runs_out_of_memory_in_the_rounds_is_dropped_not_fatal():
    state = {"calls": 0}

    def flaky():
        state["calls"] += 1
        if state["calls"] == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")

    errors = {}
    times = bench_gpu.time_interleaved({"a": lambda: None, "b": flaky}, bench_gpu.StandInDevice(), 4, 0, None, errors)
    assert errors == {"b": "out of memory (in the timed rounds)"} and list(times) == ["a"] and len(times["a"]) == 4
    with pytest.raises(torch.OutOfMemoryError):
        state["calls"] = 2
        bench_gpu.time_interleaved({"b": flaky}, bench_gpu.StandInDevice(), 2)


def test_the_cuda_device_calls_what_torch_cuda_offers(monkeypatch):
    """CudaDevice's methods, run against stand-ins of torch.cuda's (no GPU here): the flush buffer zeroed and the
    spin queued before each call, events recorded and read, the allocator's counters and cache."""
    seen = []

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.at = None

        def record(self):
            self.at = len(seen)
            seen.append("record")

        def elapsed_time(self, end):
            return float(end.at - self.at)

    for name, value in {"Event": Event, "synchronize": lambda: seen.append("sync"),
                        "_sleep": lambda cycles: seen.append(f"sleep {cycles}"),
                        "memory_allocated": lambda: 7, "max_memory_allocated": lambda: 9,
                        "reset_peak_memory_stats": lambda: seen.append("reset"),
                        "empty_cache": lambda: seen.append("empty")}.items():  # fmt: skip
        monkeypatch.setattr(torch.cuda, name, value, raising=False)
    device = object.__new__(bench_gpu.CudaDevice)
    device._flush, device.spin = torch.ones(4, dtype=torch.int32), True
    times = bench_gpu.time_interleaved({"a": lambda: seen.append("call")}, device, rounds=2)
    assert device._flush.sum() == 0 and times == {"a": [2.0, 2.0]}  # record, call, record
    assert seen[:5] == [f"sleep {bench_gpu.SPIN_CYCLES}", "record", "call", "record", "sync"]
    returned, fields = bench_gpu.measure_memory(lambda: torch.zeros(2), device, inputs_bytes=0)
    assert "reset" in seen and fields["peak_mib"] == 9 / bench_gpu.MiB and fields["retained_mib"] == -8 / bench_gpu.MiB
    device.free_cache()
    assert seen[-1] == "empty" and "CUDA events" in device.describe()


def test_the_nvidia_smi_query_falls_back_to_the_renamed_field(tmp_path, monkeypatch):
    """Newer drivers call the throttle reasons clocks_event_reasons: the query tries the old name, then the new, and
    the monitor runs what worked, sampling every -lms milliseconds."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        "query = [a for a in sys.argv if a.startswith('--query-gpu=')][0]\n"
        "if 'throttle' in query: sys.exit(2)\n"
        "loop = '-lms' in sys.argv\n"
        "while True:\n"
        "    print('1755, 2619, 690.10, 61, 0x0000000000000004', flush=True)\n"
        "    if not loop: break\n"
        "    time.sleep(0.02)\n"
    )  # fmt: skip
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    command = bench_gpu.smi_command(index=0)
    assert command[-1].endswith("clocks_event_reasons.active") and "-i" in command
    with bench_gpu.GpuMonitor(command, interval_ms=20) as monitor:
        start = time.perf_counter()
        time.sleep(0.2)
        state = monitor.window(start, time.perf_counter())
    assert state["sm_mhz"] == [1755.0] * 3 and state["throttle"] == ["SwPowerCap"] and state["temperature_c"][1] == 61


def test_the_gpu_goals_read_from_the_stored_run_match_issue_32s_figures():
    """Issue 32 read from the stored H100 run, by hand: forward 473 TFLOP/s at head_dim 128, 16k; backward 388
    counted TFLOP/s there (forward+backward minus forward); forward 0.74-0.87 of cuDNN at head_dim 128;
    forward+backward 0.71-0.78. gpu_goals computes the same from the JSON, and says which goals are met."""
    stored = bench.Benchmark.load(ROOT / "benchmarks" / "attention_cuda.json")
    goals = bench_report.gpu_goals(stored)
    found = {g["goal"].split(",")[0] + (" 128" if "head_dim 128 (min)" in g["goal"] else ""): g for g in goals}
    assert round(found["forward TFLOP/s"]["value"]) == 473 and round(found["backward TFLOP/s"]["value"]) == 388
    assert round(found["forward 128"]["value"], 2) == 0.74 and round(found["forward+backward"]["value"], 2) == 0.71
    assert [g["met"] for g in goals] == [True, False, False, False, False, False]
    assert "## Goals (issue 32), bfloat16" in bench_report.markdown(stored)
