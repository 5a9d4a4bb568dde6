"""Lesson 10's calibration: the lesson's language model (``attnedu.train.train_lm``), converted from multi-head to
grouped-query and multi-query attention by pooling its K/V heads (``attnedu.kv_sharing.to_grouped_query``) and
uptrained; streaming with a window cache, a rolling buffer and attention sinks. The lesson reads the record
``benchmarks/calibration10.json`` (``RECORD``) that ``--json`` writes, in its own format (``write_record``: one set
of kernels, the recipe and every run).

    python benchmarks/calibrate.py --lesson 10 --json benchmarks/calibration10.json
"""

from __future__ import annotations

import json

from .common import printed
from .common import span as _span

LESSONS = ("10",)
EXPERIMENTS = ("lm10",)  # MHA -> GQA by pooling, streaming with a window cache and sinks
SEEDS = (0, 1, 2, 1000, 1001)
RECORD = "calibration10.json"

# Lesson 10, as the lesson runs it
CONTEXT_10, STEPS_10, BATCH_10, LR_10, UPTRAIN_10 = 64, 150, 8, 6e-3, 30
STREAM_10, WINDOW_10, SINKS_10 = 256, 32, 4
# the recipe the record states, which the lesson checks against its own
RECIPE = {"steps": STEPS_10, "batch": BATCH_10, "context": CONTEXT_10, "lr": LR_10, "uptrain": UPTRAIN_10}


def run(experiment: str, seed: int) -> dict:
    """Lesson 10's experiment at seed offset ``seed`` (``ATTNEDU_SEED_OFFSET``, which the driver set)."""
    if experiment != "lm10":
        raise ValueError(f"lesson 10's experiment is 'lm10', got {experiment!r}")
    return {"model": experiment, "seed": seed, **_lesson10()}


def _lesson10() -> dict:
    import copy

    import torch

    from attnedu.blocks import DecoderLM
    from attnedu.decoding import streaming_losses, window_recompute_losses
    from attnedu.kv_cache import KVCache, RollingKVCache, SinkCache
    from attnedu.kv_sharing import to_grouped_query
    from attnedu.tasks import CharCorpus
    from attnedu.train import lm_loss, train_lm

    torch.set_num_threads(1)
    corpus = CharCorpus.load()
    valid_inputs, valid_targets = (t[::4] for t in corpus.windows(CONTEXT_10, split="valid"))
    lm = DecoderLM(len(corpus.chars), d_model=64, num_heads=4, num_layers=4, seed=0)
    log = train_lm(lm, corpus, STEPS_10, BATCH_10, CONTEXT_10, LR_10, warmup=STEPS_10 // 10, seed=0)
    losses = {"mha": lm_loss(lm, valid_inputs, valid_targets)}
    for name, kv, pool in (
        ("gqa2", 2, "mean"),
        ("gqa2_first", 2, "first"),
        ("mqa", 1, "mean"),
        ("mqa_first", 1, "first"),
    ):
        losses[name] = lm_loss(to_grouped_query(lm, kv, pool), valid_inputs, valid_targets)
    for name, kv, pool in (("mha_up", 4, "mean"), ("gqa2_up", 2, "mean"), ("gqa2_first_up", 2, "first"),
                           ("mqa_up", 1, "mean"), ("mqa_first_up", 1, "first")):  # fmt: skip
        # MHA: the same training, a control
        converted = copy.deepcopy(lm) if kv == 4 else to_grouped_query(lm, kv, pool)
        train_lm(converted, corpus, UPTRAIN_10, BATCH_10, CONTEXT_10, LR_10 / 3, warmup=3, seed=1)
        losses[name] = lm_loss(converted, valid_inputs, valid_targets)
    ids = corpus.valid[:STREAM_10]
    past = slice(CONTEXT_10 - 1, None)  # predictions of tokens 64.. (past the trained length and the window)
    stream = {
        "full": streaming_losses(lm, ids, KVCache(4))[past].mean().item(),
        "window": streaming_losses(lm, ids, SinkCache(4, WINDOW_10))[past].mean().item(),
        "rolling": streaming_losses(lm, ids, RollingKVCache(4, WINDOW_10))[past].mean().item(),
        "sinks": streaming_losses(lm, ids, SinkCache(4, WINDOW_10 - SINKS_10, SINKS_10))[past].mean().item(),
        "recompute": window_recompute_losses(lm, ids, WINDOW_10)[CONTEXT_10 - WINDOW_10 :].mean().item(),
    }
    with torch.no_grad():
        _, maps = lm(valid_inputs[:32], return_weights=True)
    first = torch.stack([m[:, :, WINDOW_10:, 0].mean(dim=(0, 2)) for m in maps])  # (layers, heads)
    return {"train": log.final_loss, "seconds": log.seconds, "losses": losses, "stream": stream,
            "first_max": first.max().item()}  # fmt: skip


def report(results: list[dict], info) -> str:
    """Lesson 10's table and the ranges over the seeds of the margins it asserts."""
    return printed(_report, results, info)


def _report(results: list[dict], info) -> None:
    import torch

    print("## Lesson 10: attention at inference\n")
    kernels = torch.backends.cpu.get_cpu_capability()
    print(f"Measured {info.date} by `{info.command}` ({info.jobs} processes at "
          f"once, 1 torch thread each); torch's CPU kernels for {kernels}. The model: {STEPS_10} steps, batch "
          f"{BATCH_10}, context {CONTEXT_10}; held-out loss (every fourth window) of the MHA model and of its "
          f"conversions (K/V heads mean-pooled or the first head of each group kept; then uptrained {UPTRAIN_10} "
          f"steps); streaming {STREAM_10} held-out characters one at a time, mean loss on the characters from "
          f"{CONTEXT_10} on: full cache, window {WINDOW_10} (StreamingLLM positions), rolling buffer {WINDOW_10} "
          f"(positions in the text), {SINKS_10} sinks + window {WINDOW_10 - SINKS_10}, "
          f"window recomputed; the largest mean weight a head puts on character 0 "
          f"(queries {WINDOW_10}..63)\n")  # fmt: skip
    print("| seed | MHA / uptrained | GQA-2 mean / first / uptrained mean / first | MQA mean / first / uptrained mean "
          "/ first | full | window | rolling | sinks | recompute | on char 0 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        lo, st = r["losses"], r["stream"]
        print(f"| {r['seed']} | {lo['mha']:.3f} / {lo['mha_up']:.3f} | {lo['gqa2']:.3f} / {lo['gqa2_first']:.3f} / "
              f"{lo['gqa2_up']:.3f} / {lo['gqa2_first_up']:.3f} | {lo['mqa']:.3f} / {lo['mqa_first']:.3f} / "
              f"{lo['mqa_up']:.3f} / {lo['mqa_first_up']:.3f} | {st['full']:.3f} | {st['window']:.3f} | "
              f"{st['rolling']:.3f} | {st['sinks']:.3f} | {st['recompute']:.3f} | {r['first_max']:.2f} |")  # fmt: skip
    print("\nRanges over the seeds, for the margins the lesson asserts:\n")
    print(f"- GQA-2 pooled minus MHA: {_span(r['losses']['gqa2'] - r['losses']['mha'] for r in results)}")
    print(f"- MQA pooled minus GQA-2 pooled: {_span(r['losses']['mqa'] - r['losses']['gqa2'] for r in results)}")
    print(f"- first head minus mean (GQA-2): "
          f"{_span(r['losses']['gqa2_first'] - r['losses']['gqa2'] for r in results)}")  # fmt: skip
    print(f"- first head minus mean (MQA): "
          f"{_span(r['losses']['mqa_first'] - r['losses']['mqa'] for r in results)}")  # fmt: skip
    print(f"- GQA-2 pooled minus uptrained: {_span(r['losses']['gqa2'] - r['losses']['gqa2_up'] for r in results)}")
    print(f"- MHA minus MHA trained the same steps (the control): "
          f"{_span(r['losses']['mha'] - r['losses']['mha_up'] for r in results)}")  # fmt: skip
    recovery = [(r["losses"]["gqa2"] - r["losses"]["gqa2_up"]) - (r["losses"]["mha"] - r["losses"]["mha_up"])
                for r in results]  # fmt: skip
    print(f"- GQA-2 recovery minus the control's gain: {_span(recovery)}")
    print(f"- uptrained GQA-2, first head minus mean: "
          f"{_span(r['losses']['gqa2_first_up'] - r['losses']['gqa2_up'] for r in results)}")  # fmt: skip
    print(f"- uptrained MQA, first head minus mean: "
          f"{_span(r['losses']['mqa_first_up'] - r['losses']['mqa_up'] for r in results)}")  # fmt: skip
    print(f"- rolling buffer minus window with cache positions: "
          f"{_span(r['stream']['rolling'] - r['stream']['window'] for r in results)}")  # fmt: skip
    print(f"- full cache minus window: {_span(r['stream']['full'] - r['stream']['window'] for r in results)}")
    print(f"- window minus sinks: {_span(r['stream']['window'] - r['stream']['sinks'] for r in results)}")
    print(f"- window minus recompute: {_span(r['stream']['window'] - r['stream']['recompute'] for r in results)}")
    print(f"- largest weight on character 0: {_span(r['first_max'] for r in results)}")


def write_record(results: list[dict], info, path: str) -> str:
    """The record lesson 10 reads: this run's kernels, recipe and results (one set of kernels per file)."""
    import torch

    kernels = torch.backends.cpu.get_cpu_capability()
    with open(path, "w") as f:
        json.dump({"command": info.command, "date": info.date, "kernels": kernels,
                   "recipe": RECIPE, "results": results}, f, indent=1)  # fmt: skip
        f.write("\n")
    return ""
