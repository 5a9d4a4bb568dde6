"""attnedu.bench: the benchmark command runs at small scale and writes its reports. No time is asserted."""

import json

import pytest
from matplotlib.figure import Figure

from attnedu import bench


def test_quick_benchmark_writes_json_markdown_and_plot(tmp_path):
    bench.main(["--quick", "--out", str(tmp_path / "quick")])
    data = json.loads((tmp_path / "quick.json").read_text())
    provenance = data["provenance"]
    for key in ("device", "torch", "dtype", "timing", "memory", "date", "load_average_before", "flops"):
        assert provenance[key] is not None, key
    assert provenance["methods"]["sdpa"].startswith("SDPA-")  # the backend is named
    methods = {r["method"] for r in data["results"]}
    assert {"naive", "tiled", "sdpa"} <= methods
    for r in data["results"]:
        assert len(r["times_ms"]) == 3 and r["min_ms"] <= r["median_ms"] <= r["max_ms"] and r["tflops"] > 0
    measured = [r for r in data["results"] if r["extra_mib"] is not None]
    assert {r["n"] for r in measured} == {256}  # quick mode measures memory at the largest length only
    assert data["ratios"] and "naive / tiled time" in data["ratios"][0]
    assert "| N | head_dim |" in (tmp_path / "quick.md").read_text()
    assert (tmp_path / "quick.png").stat().st_size > 1000


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
        return bench.Measurement(method, method, n, 64, False, [ms], ms, ms, ms, 1.0, mib)

    stored = bench.Benchmark({"dtype": "float32", "device_kind": "cpu", "device": "CPU: test", "methods": {}}, [
        m("naive", 4096, 900.0, 1024.0), m("tiled", 4096, 400.0, 16.0), m("sdpa", 4096, 300.0, 8.0),
    ])  # fmt: skip
    targets = {t["target"]: t for t in bench.cpu_targets(stored)}
    assert all(t["met"] for t in targets.values())
    assert targets["naive extra memory / tiled extra memory"]["value"] == 64
    again = bench.Benchmark.from_json(json.loads(json.dumps(stored.to_json())))
    assert again.find("tiled", 4096, 64, False).extra_mib == 16.0
    left, right = bench.plot_benchmark(Figure(), stored)
    assert len(left.lines) >= 3 and len(right.lines) == 3


def test_a_method_that_runs_out_of_memory_is_recorded_not_fatal():
    def too_big():
        raise MemoryError("naive attention at this length")

    times, errors = bench.time_methods({"fine": lambda: None, "naive": too_big}, "cpu", repeats=2, warmup=1)
    assert errors == {"naive": "out of memory"} and len(times["fine"]) == 2 and "naive" not in times
    ok = bench.Measurement("tiled", "tiled", 8192, 64, False, [5.0], 5.0, 5.0, 5.0, 1.0, 4.0)
    sdpa = bench.Measurement("sdpa", "SDPA-flash", 8192, 64, False, [2.0], 2.0, 2.0, 2.0, 2.0, 1.0)
    failed = bench.Measurement("naive", "naive", 8192, 64, False, [], None, None, None, None, error="out of memory")
    stored = bench.Benchmark({"dtype": "bfloat16", "device_kind": "cuda", "device": "GPU", "methods": {}},
                             [failed, ok, sdpa])  # fmt: skip
    assert stored.ratios() == [{"n": 8192, "head_dim": 64, "causal": False, "tiled / sdpa time": 2.5}]
    assert "| naive | out of memory |" in bench.markdown(stored)
    left, _ = bench.plot_benchmark(Figure(), stored)
    assert len(left.lines) >= 2
