"""Lessons 01-03's calibration: the translation models, trained with ``attnedu.train.train`` and the lessons'
``STEPS``, ``STEPS_LESSON_03`` and ``LR``. Lesson 01's fixed-context model (normal and reversed source), lesson 02's
attention model (Bahdanau's), and lesson 03's six models: the four Luong scores, the ablation (the dot decoder asking
with s_{t-1}) and Bahdanau's model at lesson 03's budget. ``run`` measures each as its lesson does: exact match and
per-word accuracy by source length, the gradients reaching the source words (lessons 01-02), the alignment and the
crossing rate of an attention model, its alignment by word class.

    python benchmarks/calibrate.py --lesson 01 02 03 > benchmarks/calibration.md
    python benchmarks/calibrate.py --experiments fixed attention --seeds 0 --steps 20  # a short run: --steps
"""

from __future__ import annotations

import os
import platform

from .common import printed
from .common import span as _span

LESSONS = ("01", "02", "03")

LUONG = ("dot", "general", "concat", "location")
MODELS = ("fixed", "fixed_reversed", "attention")  # lessons 01-02, STEPS each
# lesson 03's six models, STEPS_LESSON_03 each: the four scores, the ablation (the dot decoder asking with s_{t-1})
# and Bahdanau's model
LESSON_03 = (*LUONG, "dot_previous", "bahdanau")
EXPERIMENTS = MODELS + LESSON_03
SEEDS = (0, 1, 2, 1000, 1001)


def run(experiment: str, seed: int, steps: int | None = None) -> dict:
    """Train one model of lessons 01-03 with seed offset ``seed`` (``ATTNEDU_SEED_OFFSET``, which the driver set);
    measure it here. ``steps``: its training steps (default: its lesson's)."""
    model = experiment
    import attnedu
    from attnedu.analysis import (
        alignment_accuracy,
        alignment_by_word_class,
        attention_maps,
        crossing_rate,
        word_accuracy_by_length,
    )
    from attnedu.data import LENGTH_BUCKETS, SOURCE_VOCAB, TARGET_VOCAB, ToyTranslation
    from attnedu.models import Seq2Seq
    from attnedu.train import LR, STEPS, STEPS_LESSON_03, accuracy_by_length, train

    attnedu.setup_notebook(seed=0)
    data = ToyTranslation.generate(seed=0)
    if model == "fixed_reversed":
        data = data.reversed_source()
    lesson_03 = model in LESSON_03
    score = "dot" if model == "dot_previous" else model
    kind = score if score in LUONG else model in ("attention", "bahdanau")
    attn_dim = 32 if model == "concat" else 64  # as lesson 03 builds it
    net = Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), attention=kind, bidirectional=False, attn_dim=attn_dim,
                        attend_from="previous" if model == "dot_previous" else "updated")  # fmt: skip
    long_pair = data.test[LENGTH_BUCKETS[-1]][0]
    gradients = {} if lesson_03 else {"init": _gradient_summary(net, long_pair)}
    log = train(net, data.train, steps=steps or (STEPS_LESSON_03 if lesson_03 else STEPS), lr=LR)
    if not lesson_03:
        gradients["trained"] = _gradient_summary(net, long_pair)
        gradients["shares"] = _gradient_shares(net, data)
    result = {
        "model": model,
        "seed": seed,
        "final_loss": round(log.final_loss, 4),
        "accuracy": {f"{lo}-{hi}": a for (lo, hi), a in accuracy_by_length(net, data.test).items()},
        "per_word": {f"{lo}-{hi}": w.per_word for (lo, hi), w in word_accuracy_by_length(net, data.test).items()},
        "gradients": gradients,
    }
    if kind:
        pairs = [p for bucket in data.test.values() for p in bucket]
        maps = attention_maps(net, pairs)
        result["alignment"] = alignment_accuracy(maps, pairs)
        result["crossing"] = crossing_rate(maps, pairs)[0]
        result["by_class"] = {
            name: [c.words, c.hits, {str(k): v for k, v in c.offsets.most_common(3)}]
            for name, c in alignment_by_word_class(maps, pairs).items()
        }
    return result


def _gradient_shares(net, data) -> dict:
    """Lesson 02's measure: over the first 40 test sentences of every bucket, each target word's gold source word's
    share of the gradient reaching the source words (attnedu.analysis.gold_gradient_shares)."""
    from attnedu.analysis import gold_gradient_shares

    pairs = [p for bucket in data.test.values() for p in bucket[:40]]
    shares = gold_gradient_shares(net, pairs)
    of_largest = gold_gradient_shares(net, pairs, relative_to="largest")  # 1 where the gold word gets the most
    return {
        "mean": shares.mean().item(),
        "over_half": (shares > 0.5).float().mean().item(),
        "words": len(shares),
        "largest_mean": of_largest.mean().item(),
        "gold_largest": (of_largest == 1).float().mean().item(),
    }


def _gradient_summary(net, pair) -> dict:
    """Gradient from target word t's loss to the source embeddings: for t = 1, min/max over source words;
    over all t, the gold source word's gradient relative to the largest (mean and smallest)."""
    from attnedu.analysis import source_gradient_norms

    first = source_gradient_norms(net, pair, 0)
    at_gold = []
    for t, gold in enumerate(pair.alignment):
        norms = source_gradient_norms(net, pair, t)
        at_gold.append((norms[gold] / norms.max()).item())
    return {
        "first_min_over_max": (first.min() / first.max()).item(),
        "gold_over_max_mean": sum(at_gold) / len(at_gold),
        "gold_over_max_min": min(at_gold),
    }


def report(results: list[dict], info) -> str:
    """Lessons 01-03's tables and the ranges over the seeds of the margins they assert."""
    return printed(_report, results, info)


def _report(results: list[dict], info) -> None:
    import torch

    from attnedu.train import LR, STEPS

    by_model = {m: [r for r in results if r["model"] == m] for m in MODELS + LESSON_03}
    lesson_03 = [r for r in results if r["model"] in LESSON_03]
    results = [r for r in results if r["model"] in MODELS]
    buckets = list(results[0]["accuracy"]) if results else []
    print("# Calibration of lessons 01-03\n")
    print(
        f"Measured {info.date} by `{info.command}` ({info.jobs} processes at once, 1 torch thread each). "
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, torch's CPU kernels for "
        f"{torch.backends.cpu.get_cpu_capability()}"
        + (f" with `MKL_CBWR={os.environ['MKL_CBWR']}`" if os.environ.get("MKL_CBWR") else "")
        + f"; torch {torch.__version__}; Python "
        f"{platform.python_version()}. Recipe: {STEPS} steps, batch 64, Adam (fused) lr {LR} with cosine decay, "
        "batches drawn in proportion to target words (`attnedu.data.BatchSampler`). Seed = `ATTNEDU_SEED_OFFSET` "
        "(model initialisation and batch order; the data are the same); 1000 and 1001 are what the test command's "
        "perturbed run gives seeds 0 and 1. Models: lesson 01's fixed context (normal and reversed source), "
        "lesson 02's attention (Bahdanau); lesson 03's six models have a section of their own below. Times are not "
        "recorded here: see notebooks.md.\n"
    )
    print("## Exact match by source length\n")
    print("| model | seed | " + " | ".join(buckets) + " | final loss |")
    print("|---|---|" + "---|" * len(buckets) + "---|")
    for r in results:
        row = " | ".join(f"{r['accuracy'][b]:.3f}" for b in buckets)
        print(f"| {r['model']} | {r['seed']} | {row} | {r['final_loss']:.4f} |")
    print("\n## Per-word accuracy (teacher forcing) by source length\n")
    print("| model | seed | " + " | ".join(buckets) + " |")
    print("|---|---|" + "---|" * len(buckets))
    for r in results:
        print(f"| {r['model']} | {r['seed']} | " + " | ".join(f"{r['per_word'][b]:.3f}" for b in buckets) + " |")
    print("\n## Attention models: alignment\n")
    print("| model | seed | alignment accuracy | crossing rate |")
    print("|---|---|---|---|")
    for r in (r for r in results if "alignment" in r):
        print(f"| {r['model']} | {r['seed']} | {r['alignment']:.3f} | {r['crossing']:.3f} |")
    print("\n## Gradient from target word t's loss to the source embeddings (first sentence of the longest bucket)\n")
    print("first: min/max over source words for t = 1; gold: the gold source word's gradient / the largest, over t\n")
    keys = ("first_min_over_max", "gold_over_max_mean", "gold_over_max_min")
    print("| model | seed | init: first | init: gold mean | init: gold min | trained: first | trained: gold mean "
          "| trained: gold min |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in (r for r in results if r["gradients"]):
        cells = [r["gradients"][when][k] for when in ("init", "trained") for k in keys]
        print(f"| {r['model']} | {r['seed']} | " + " | ".join(f"{c:.3g}" for c in cells) + " |")
    shares = [r for r in results if "shares" in r["gradients"]]
    if shares:
        print("\n## Lesson 02: the gold source word's share of the gradient reaching the source, per target word\n")
        print("Trained models; the first 40 test sentences of every bucket (`attnedu.analysis.gold_gradient_shares`)\n")
        print("Also the gold word's gradient relative to the largest (`relative_to=\"largest\"`): its mean, and how "
              "often the gold word gets the largest\n")  # fmt: skip
        print("| model | seed | target words | mean share | share above one half | relative to the largest: mean "
              "| gold the largest |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for r in shares:
            g = r["gradients"]["shares"]
            print(f"| {r['model']} | {r['seed']} | {g['words']} | {g['mean']:.3f} | {g['over_half']:.3f} | "
                  f"{g['largest_mean']:.3f} | {g['gold_largest']:.3f} |")  # fmt: skip
    print("\n## Bahdanau attention: alignment by word class (target words, hits, commonest miss offsets)\n")
    for r in by_model["attention"]:
        print(f"- seed {r['seed']}: " + "; ".join(f"{k} {v[0]} words, {v[1]} hits, misses {v[2]}" for k, v in
                                                     r["by_class"].items()))  # fmt: skip
    if lesson_03:
        _report_lesson_03(lesson_03)
    print("\n## Ranges over the seeds, for the margins the lessons assert\n")
    if not results:
        return
    first, last = buckets[0], buckets[-1]
    for model in ("fixed", "fixed_reversed"):
        rows = by_model[model]
        if rows:
            drop = _span(r["accuracy"][first] - r["accuracy"][last] for r in rows)
            word_drop = _span(r["per_word"][first] - r["per_word"][last] for r in rows)
            trained = _span(r["gradients"]["trained"]["first_min_over_max"] for r in rows)
            print(f"- {model}: shortest minus longest {drop}; per-word {word_drop}; trained first min/max {trained}")
    pairs = [(n, r) for n in by_model["fixed"] for r in by_model["fixed_reversed"] if n["seed"] == r["seed"]]
    if pairs:
        gaps = [r["accuracy"][first] - n["accuracy"][first] for n, r in pairs]
        print(f"- reversed minus normal, shortest bucket, per seed: {_span(gaps)}")
    for model in ("attention",):
        rows = by_model[model]
        if rows:
            worst = _span(min(r["accuracy"].values()) for r in rows)
            word_worst = _span(min(r["per_word"].values()) for r in rows)
            align, cross = _span(r["alignment"] for r in rows), _span(r["crossing"] for r in rows)
            print(f"- {model}: worst bucket {worst}; per-word worst {word_worst}; alignment {align}; crossing {cross}")


def _class_accuracy(r: dict, name: str) -> float:
    words, hits, _ = r["by_class"][name]
    return hits / words


def _late_share(r: dict) -> tuple[int, float]:
    """(misses among the commonest three offsets of every word class, the share of them one or more words late)."""
    offsets = [(int(k), n) for _, _, top in r["by_class"].values() for k, n in top.items()]
    total = sum(n for _, n in offsets)
    return total, sum(n for k, n in offsets if k > 0) / max(total, 1)


def _report_lesson_03(rows: list[dict]) -> None:
    from attnedu.train import STEPS_LESSON_03

    print(f"\n## Lesson 03: four Luong scores, the ablation and Bahdanau, {STEPS_LESSON_03} steps each\n")
    print("dot_previous is the ablation (Luong's dot decoder asking with s_{t-1}); bahdanau is lesson 02's model at ")
    print("this lesson's budget; concat with attn_dim 32. Exact match by source length:\n")
    buckets = list(rows[0]["accuracy"])
    print("| model | seed | " + " | ".join(buckets) + " | worst per-word |")
    print("|---|---|" + "---|" * len(buckets) + "---|")
    for r in rows:
        cells = " | ".join(f"{r['accuracy'][b]:.3f}" for b in buckets)
        print(f"| {r['model']} | {r['seed']} | {cells} | {min(r['per_word'].values()):.3f} |")
    print("\nAlignment (misses: among each word class's three commonest miss offsets; late: the share past the gold")
    print("word)\n")
    print("| model | seed | alignment | crossing | determiners | conjunctions | misses | late |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        misses, late = _late_share(r)
        print(f"| {r['model']} | {r['seed']} | {r['alignment']:.3f} | {r['crossing']:.3f} | "
              f"{_class_accuracy(r, 'determiner'):.3f} | {_class_accuracy(r, 'conjunction'):.3f} | {misses} | "
              f"{late:.2f} |")  # fmt: skip
    by = {m: {r["seed"]: r for r in rows if r["model"] == m} for m in LESSON_03}
    seeds = sorted(set.intersection(*(set(v) for v in by.values())))
    if not seeds:
        return
    translators = ("dot", "general", "concat", "bahdanau", "dot_previous")
    content = ("dot", "general", "concat")

    def span(values):
        return _span(list(values))

    def conjunctions(r):
        return _class_accuracy(r, "conjunction")

    def determiners(r):
        return _class_accuracy(r, "determiner")

    ranges = {
        "worst per-word accuracy of the translators": [
            min(min(by[m][s]["per_word"].values()) for m in translators) for s in seeds
        ],
        "worst exact match of the translators": [
            min(min(by[m][s]["accuracy"].values()) for m in translators) for s in seeds
        ],
        "worst content score minus location, alignment": [
            min(by[m][s]["alignment"] for m in content) - by["location"][s]["alignment"] for s in seeds
        ],
        "worst content score minus location, crossing": [
            min(by[m][s]["crossing"] for m in content) - by["location"][s]["crossing"] for s in seeds
        ],
        "worst content score minus Bahdanau, alignment": [
            min(by[m][s]["alignment"] for m in content) - by["bahdanau"][s]["alignment"] for s in seeds
        ],
        "dot minus the ablation, alignment": [
            by["dot"][s]["alignment"] - by["dot_previous"][s]["alignment"] for s in seeds
        ],
        "dot minus the ablation, conjunctions": [
            conjunctions(by["dot"][s]) - conjunctions(by["dot_previous"][s]) for s in seeds
        ],
        "the ablation's misses that land late": [_late_share(by["dot_previous"][s])[1] for s in seeds],
        "the ablation minus Bahdanau, determiners": [
            determiners(by["dot_previous"][s]) - determiners(by["bahdanau"][s]) for s in seeds
        ],
    }
    print("\nRanges over the seeds, for the margins lesson 03 asserts:\n")
    for label, values in ranges.items():
        print(f"- {label}: {_span(values)}")
