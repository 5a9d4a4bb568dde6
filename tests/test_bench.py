"""attnedu.bench (with attnedu.measurements and attnedu.bench_gpu): the benchmark command runs at small scale and
writes its reports; its GPU suite's logic runs on the CPU with a fake timer; its arguments are checked; every method
is called as fn(q, k, v, is_causal=...) and computes attention. No time is asserted.

``test_gpu_suite_runs_on_a_real_gpu`` runs only with a CUDA GPU (``pytest tests/test_bench.py -k gpu``)."""

import json
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
# the GPU suite's logic, on the CPU with a fake timer
# ------------------------------------------------------------------------------------------------------------

FAKE_MS = {"triton": 1.0, "sdpa_flash": 2.0, "naive": 4.0}


@pytest.fixture
def fake_gpu(monkeypatch):
    """Methods that say which of them ran, a naive attention that runs out of memory from N = 256 on, SDPA pinned
    to cuDNN (which refuses CPU tensors, as a backend refuses a shape), and a timer that returns a fixed time per
    method after calling it once."""
    last = {}

    def fake_method(name, out_of_memory_from=None):
        def fn(q, k, v, *, is_causal=False):
            if out_of_memory_from and q.shape[-2] >= out_of_memory_from:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")
            last["name"] = name
            return q * 1.0 + (k.sum() + v.sum()) * 0

        return measurements.Method(name, f"fake {name}", fn)

    real = measurements.make_methods

    def make_methods(device, dtype, names=measurements.METHODS):
        methods = {"triton": fake_method("triton"), "sdpa_flash": fake_method("sdpa_flash"),
                   "naive": fake_method("naive", out_of_memory_from=256)}  # fmt: skip
        methods.update(real(device, dtype, ["sdpa_cudnn"]))
        return {name: methods[name] for name in names if name in methods}

    def gpu_time(fn, warmup_ms=25, rep_ms=100):
        fn()
        ms = FAKE_MS[last["name"]]
        return {"median": ms, "q20": 0.9 * ms, "q80": 1.2 * ms, "min": 0.8 * ms, "max": 1.5 * ms}

    monkeypatch.setattr(measurements, "make_methods", make_methods)
    monkeypatch.setattr(bench_gpu, "gpu_time", gpu_time)


def run_fake_suite(**overrides):
    options = {"lengths": (128, 256, 512), "head_dims": (16,), "dtypes": ("bfloat16",), "causal": (False, True),
               "modes": bench.MODES, "methods": ("triton", "sdpa_flash", "sdpa_cudnn", "naive"), "tokens": 1024,
               "hidden": 64, "warmup_ms": 1, "rep_ms": 1, "log": None, "device": "cpu"}  # fmt: skip
    options.update(overrides)
    return bench_gpu._run_suite(**options)


def test_gpu_suite_table_ratios_and_throughput_with_a_fake_timer(fake_gpu, tmp_path):
    lines = []
    suite = run_fake_suite(log=lines.append)
    assert len(lines) == 2 * 2 * 3 and lines[0].startswith("[1/12")  # progress: one line per shape
    assert len(suite.results) == 2 * 2 * 3 * 4  # (causal, mode, N, method)
    for r in suite.results:
        assert (r.batch, r.heads, r.dtype) == (1024 // r.n, 64 // 16, "bfloat16")  # constant tokens and width
        if r.method in FAKE_MS and not r.error:
            flops = attention_flops(r.batch, r.heads, r.n, r.n, 16, r.causal) * (3.5 if r.mode != "forward" else 1)
            assert r.median_ms == FAKE_MS[r.method] and r.tflops == pytest.approx(flops / (r.median_ms / 1e3) / 1e12)
            assert (r.q20_ms, r.q80_ms) == (0.9 * r.median_ms, 1.2 * r.median_ms) and r.first_call_ms >= 0
    cudnn = [r for r in suite.results if r.method == "sdpa_cudnn"]
    assert cudnn and all(r.error.startswith("not supported") for r in cudnn)  # refused, recorded, not fatal
    naive = {(r.mode, r.causal, r.n): r.error for r in suite.results if r.method == "naive"}
    assert naive[("forward", False, 128)] is None and naive[("forward", False, 256)] == "out of memory"
    assert naive[("forward", False, 512)].startswith("out of memory (not run")  # not tried again at longer N
    oom = suite.out_of_memory()
    assert len(oom) == 4 and all(o["first_n_out_of_memory"] == 256 and o["longest_n_that_ran"] == 128 for o in oom)
    ratios = {(row["mode"], row["causal"], row["n"]): row for row in suite.ratios()}
    assert ratios[("forward", True, 128)]["triton / sdpa_flash throughput"] == 2.0
    assert ratios[("forward+backward", False, 128)]["naive / triton time"] == 4.0
    assert "naive / triton time" not in ratios[("forward", False, 256)]  # naive did not run there
    text = bench_report.markdown(suite)
    for part in ("## forward, bfloat16", "## forward+backward, bfloat16", "| 128 | 16 | no | 8 x 4 | fake triton |",
                 "TFLOP/s", "first call ms", "## Out of memory", "not supported", "## Ratios"):  # fmt: skip
        assert part in text, part
    for key in ("shapes", "timing", "flops", "batch", "heads", "dtypes", "date", "torch", "seconds", "methods"):
        assert suite.provenance[key] is not None, key
    paths = bench_report.write(suite, tmp_path / "suite")
    assert paths[2].stat().st_size > 1000 and bench.Benchmark.load(paths[0]).results == suite.results


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
        (lambda: bench_gpu.run_gpu_suite(rep_ms=0), ValueError, r"rep_ms"),
        (lambda: bench_gpu.run_gpu_suite(methods=["triton", "sdpa-flash"]), ValueError, r"did you mean 'sdpa_flash'"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")
def test_gpu_suite_runs_on_a_real_gpu(tmp_path):
    """A one-shape suite on the GPU: every method measured (or refused/out of memory, recorded), files written."""
    suite = bench_gpu.run_gpu_suite(lengths=[1024], head_dims=[64], dtypes=["bfloat16"], causal=[True], warmup_ms=5,
                                rep_ms=20, log=print)  # fmt: skip
    found = {(r.method, r.mode): r for r in suite.results}
    assert len(found) == len(bench_gpu.GPU_SUITE["methods"]) * 2
    for mode in bench.MODES:
        triton = found[("triton", mode)]
        assert triton.error is None and triton.tflops > 0 and triton.extra_mib is not None
        assert triton.first_call_ms >= triton.median_ms
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
