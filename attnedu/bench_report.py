"""The benchmark's results as a reader sees them (lesson 08, ``python -m attnedu.bench``): the markdown tables, the
figure, and the files ``write`` leaves (``.json``, ``.md``, ``.png``). The measurements are ``attnedu.bench``'s and
``attnedu.bench_gpu``'s; their records, ``attnedu.measurements``' ``Benchmark`` and ``Measurement``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import bench_gpu
from .measurements import BACKWARD_FLOPS, MODES, Benchmark, Measurement, format_ms, format_tflops, mode_flops


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


def gpu_goals(bench: Benchmark, dtype: str = "bfloat16") -> list[dict]:
    """Issue 32's GPU goals, from a suite's rows in ``dtype`` (one row per goal the run measured): Triton's forward
    throughput over SDPA-cuDNN's at every N >= 2048 (the smallest, per head_dim), >= 0.85; its forward TFLOP/s at
    head_dim 128, N = 16384, not causal, >= 500; its causal over non-causal forward throughput at N = 16384 (the
    smaller of head_dim 64 and 128), >= 0.97; its backward's TFLOP/s at head_dim 128, N = 16384, not causal, >= 480
    (a backward counts 2.5 forwards of FLOPs, over forward+backward's median minus forward's: derived, not timed
    alone); its forward+backward throughput over cuDNN's at every N >= 2048, >= 0.85."""
    rows = []

    def find(method, n, head_dim, causal, mode):
        return bench.find(method, n, head_dim, causal, ran=True, mode=mode, dtype=dtype)

    def ratios(mode, head_dims):
        found = []
        for r in bench.results:
            if (r.method, r.mode, r.dtype) == ("triton", mode, dtype) and r.n >= 2048 and r.head_dim in head_dims:
                other = find("sdpa_cudnn", r.n, r.head_dim, r.causal, mode)
                if not r.error and other:
                    found.append(other.median_ms / r.median_ms)
        return found

    for head_dim in (64, 128):
        found = ratios("forward", (head_dim,))
        if found:
            rows.append({"goal": f"forward, Triton / SDPA-cuDNN throughput, every N >= 2k, head_dim {head_dim} (min)",
                         "value": min(found), "bound": ">= 0.85"})  # fmt: skip
    forward = find("triton", 16384, 128, False, "forward")
    if forward:
        rows.append({"goal": "forward TFLOP/s, head_dim 128, N = 16k, not causal", "value": forward.tflops,
                     "bound": ">= 500"})  # fmt: skip
    pairs = [(find("triton", 16384, d, True, "forward"), find("triton", 16384, d, False, "forward")) for d in (64, 128)]
    found = [c.tflops / f.tflops for c, f in pairs if c and f]
    if found:
        goal = "forward, causal / non-causal throughput, N = 16k (min over head_dim)"
        rows.append({"goal": goal, "value": min(found), "bound": ">= 0.97"})
    both = find("triton", 16384, 128, False, "forward+backward")
    if forward and both and both.median_ms > forward.median_ms:
        flops = mode_flops(both.batch, both.heads, 16384, 128, False, "forward") * BACKWARD_FLOPS
        seconds = (both.median_ms - forward.median_ms) / 1000
        goal = "backward TFLOP/s, head_dim 128, N = 16k, not causal (forward+backward - forward)"
        rows.append({"goal": goal, "value": flops / seconds / 1e12, "bound": ">= 480"})
    found = ratios("forward+backward", (64, 128))
    if found:
        rows.append({"goal": "forward+backward, Triton / SDPA-cuDNN throughput, every N >= 2k (min)",
                     "value": min(found), "bound": ">= 0.85"})  # fmt: skip
    for row in rows:
        row["met"] = row["value"] >= float(row["bound"].split()[1])
    return rows


def _spread(r: Measurement) -> str:
    if r.q20_ms is not None and r.q80_ms is not None:
        return f"{format_ms(r.q20_ms)}-{format_ms(r.q80_ms)}"
    return f"{format_ms(r.min_ms)}-{format_ms(r.max_ms)}"


def markdown(bench: Benchmark, note: str = "") -> str:
    p = bench.provenance
    lines = [f"# Attention benchmark: {p['device']}", ""]
    if p.get("finished") is False:
        lines += ["**Unfinished run**: the results below are those measured before it stopped.", ""]
    lines += [f"- **{key}**: {value}" for key, value in p.items() if key not in ("methods",)]
    lines += ["- **methods**: " + "; ".join(f"`{k}` = {v}" for k, v in p.get("methods", {}).items())]
    spread = p.get("spread", "min-max over rounds")
    for mode, dtype in dict.fromkeys((r.mode, r.dtype) for r in bench.results):
        rows = [r for r in bench.results if (r.mode, r.dtype) == (mode, dtype)]
        lines += ["", f"## {mode}, {dtype or p.get('dtype')}", ""]
        lines += [f"| N | head_dim | causal | batch x heads | method | median ms | spread ms ({spread}) | TFLOP/s "
                  "| first call ms | extra memory MiB | memory MiB |", "|---" * 11 + "|"]  # fmt: skip
        for r in rows:
            shape = f"| {r.n} | {r.head_dim} | {'yes' if r.causal else 'no'} | "
            shape += f"{r.batch} x {r.heads} | " if r.batch else "- | "
            shape += f"{r.label} | "
            if r.error:
                lines.append(shape + f"{r.error} | - | - | - | - | - |")
                continue
            first = "-" if r.first_call_ms is None else format_ms(r.first_call_ms)
            extra = "-" if r.extra_mib is None else f"{r.extra_mib:,.1f}"
            memory = "-" if r.memory_mib is None else f"{r.memory_mib:,.1f}"
            timing = f"{format_ms(r.median_ms)} | {_spread(r)} | {format_tflops(r.tflops)}"
            lines.append(shape + f"{timing} | {first} | {extra} | {memory} |")
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
    goals = gpu_goals(bench) if p.get("suite") else []
    if goals:
        lines += ["", "## Goals (issue 32), bfloat16", "", "| goal | measured | bound | met |", "|---|---|---|---|"]
        lines += [f"| {g['goal']} | {g['value']:.2f} | {g['bound']} | {'yes' if g['met'] else 'no'} |" for g in goals]
    lines += _gpu_details(bench)
    targets = cpu_targets(bench)
    if targets and p["device_kind"] == "cpu":
        lines += ["", "## CPU targets (N = 4096, head_dim = 64, not causal)", "", "| target | measured | bound | met |",
                  "|---|---|---|---|"]  # fmt: skip
        lines += [f"| {t['target']} | {t['value']:.2f} | {t['bound']} | {'yes' if t['met'] else 'no'} |"
                  for t in targets]  # fmt: skip
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def _config_text(config: dict | None) -> str:
    if not config:
        return "-"
    short = {"BLOCK_M": "M", "BLOCK_N": "N", "num_warps": "w", "num_stages": "s"}
    return "; ".join(f"{kind} " + (" ".join(f"{short.get(k, k)}{v}" for k, v in c.items()) if isinstance(c, dict)
                                   else str(c)) for kind, c in config.items())  # fmt: skip


def _gpu_details(bench: Benchmark) -> list[str]:
    """The suite's per-shape records: Triton's configurations, the GPU's state, memory notes (absent in old runs)."""
    rows = [r for r in bench.results if r.config or r.gpu_state or r.memory_note]
    if not rows:
        return []
    lines = ["", "## Per shape: Triton's configuration and the GPU's state", "",
             "Configuration: the autotuned choice per kernel (M = BLOCK_M, N = BLOCK_N, w = warps, s = stages). GPU: "
             "SM clock min-max MHz, memory clock MHz, power median/max W, temperature max C, throttle reasons, over "
             "the shape's timing (nvidia-smi samples).", "",
             "| mode | dtype | N | head_dim | causal | timed calls | Triton configuration | SM MHz | memory MHz | "
             "power W | temperature C | throttle reasons |", "|---" * 12 + "|"]  # fmt: skip
    seen = set()
    for r in bench.results:
        shape = (r.mode, r.dtype, r.n, r.head_dim, r.causal)
        if shape in seen or r.error:
            continue
        seen.add(shape)
        triton = bench.find("triton", r.n, r.head_dim, r.causal, ran=True, mode=r.mode, dtype=r.dtype)
        state = r.gpu_state or {}
        sm = "-" if "sm_mhz" not in state else f"{state['sm_mhz'][0]:.0f}-{state['sm_mhz'][2]:.0f}"
        mem = "-" if "mem_mhz" not in state else f"{state['mem_mhz'][0]:.0f}-{state['mem_mhz'][1]:.0f}"
        power = "-" if "power_w" not in state else f"{state['power_w'][0]:.0f}/{state['power_w'][1]:.0f}"
        temperature = "-" if "temperature_c" not in state else f"{state['temperature_c'][1]:.0f}"
        throttle = ", ".join(state.get("throttle", [])) or ("none" if "throttle" in state else "-")
        lines.append(f"| {r.mode} | {r.dtype} | {r.n} | {r.head_dim} | {'yes' if r.causal else 'no'} | "
                     f"{r.rounds or '-'} | {_config_text(triton.config if triton else None)} | {sm} | {mem} | "
                     f"{power} | {temperature} | {throttle} |")  # fmt: skip
    notes = [r for r in bench.results if r.memory_note or (r.retained_mib is not None and abs(r.retained_mib) > 1)]
    if notes:
        lines += ["", "Memory notes: " + "; ".join(
            f"{r.method} {r.mode} {r.dtype} N={r.n} head_dim={r.head_dim}{' causal' if r.causal else ''}: retained "
            f"{r.retained_mib:,.1f} MiB, garbage collected before {r.gc_freed_mib or 0:,.1f} MiB"
            + (f" ({r.memory_note})" if r.memory_note else "") for r in notes)]  # fmt: skip
    return lines


# ------------------------------------------------------------------------------------------------------------
# two runs compared (repeatability)
# ------------------------------------------------------------------------------------------------------------


def _key(r: Measurement) -> tuple:
    return (r.method, r.mode, r.dtype, r.n, r.head_dim, r.causal)


def compare(first: Benchmark, second: Benchmark, tolerance: float = 0.03) -> dict:
    """Per (method, mode, dtype, N, head_dim, causal) measured in both runs: the relative difference of medians
    (second / first - 1), whether Triton's configuration changed, and the throttle reasons either run saw there.
    ``failed``: the rows over ``tolerance``, and every shape that ran in one run and not in the other."""
    theirs = {_key(r): r for r in second.results}
    rows, changed = [], []
    for mine in first.results:
        other = theirs.get(_key(mine))
        if other is None:
            continue
        if bool(mine.error) != bool(other.error):
            changed.append({"key": _key(mine), "first": mine.error or "ran", "second": other.error or "ran"})
            continue
        if mine.error:
            continue
        throttle = set()
        for r in (mine, other):
            throttle |= set((r.gpu_state or {}).get("throttle", [])) - {"GpuIdle"}
        rows.append({"key": _key(mine), "first_ms": mine.median_ms, "second_ms": other.median_ms,
                     "difference": other.median_ms / mine.median_ms - 1, "config_changed": mine.config != other.config,
                     "throttle": sorted(throttle)})  # fmt: skip
    rows.sort(key=lambda row: -abs(row["difference"]))
    failed = [row for row in rows if abs(row["difference"]) > tolerance]
    only = sorted({_key(r) for r in first.results} ^ set(theirs))
    return {"rows": rows, "failed": failed + changed, "changed": changed, "only_in_one": only, "tolerance": tolerance}


def compare_markdown(result: dict, first_name: str = "first", second_name: str = "second") -> str:
    rows, tolerance = result["rows"], result["tolerance"]
    worst = max((abs(row["difference"]) for row in rows), default=0.0)
    over = [row for row in rows if abs(row["difference"]) > tolerance]
    lines = [f"# {first_name} vs {second_name}", "",
             f"{len(rows)} (method, shape) measured in both; largest relative difference of medians {worst:.1%}; "
             f"{len(over)} over {tolerance:.0%}; {len(result['changed'])} ran in one run only; "
             f"{len(result['only_in_one'])} measured in one run only.", "",
             "| method | mode | dtype | N | head_dim | causal | first ms | second ms | difference "
             "| Triton config changed | throttle reasons |", "|---" * 11 + "|"]  # fmt: skip
    for row in rows:
        method, mode, dtype, n, head_dim, causal = row["key"]
        mark = " **over**" if abs(row["difference"]) > tolerance else ""
        lines.append(f"| {method} | {mode} | {dtype} | {n} | {head_dim} | {'yes' if causal else 'no'} | "
                     f"{format_ms(row['first_ms'])} | {format_ms(row['second_ms'])} | {row['difference']:+.1%}{mark} | "
                     f"{'yes' if row['config_changed'] else 'no'} | {', '.join(row['throttle']) or '-'} |")  # fmt: skip
    for change in result["changed"]:
        lines.append(f"\n- {change['key']}: {change['first']} in the first run, {change['second']} in the second")
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
        bench_gpu.plot_throughput(fig, bench)
    else:
        fig = Figure(figsize=(11, 4), layout="constrained")
        plot_benchmark(fig, bench)
    fig.savefig(paths[2], dpi=100)
    return paths
