"""Calibrate the trained effects of lessons 01-03 over several training seeds, so that the margins the
lessons assert rest on more than one run (experiments.md, section 0.1: assert about half the
observed gap). Seeds go through ``ATTNEDU_SEED_OFFSET`` exactly as in the test command's perturbed
run, so seed 1000 here is the perturbed run's model.

    python benchmarks/calibrate.py [--seeds 0 1 2 1000 1001] [--jobs 2] > benchmarks/calibration.md
    ATEN_CPU_CAPABILITY=avx2 python benchmarks/calibrate.py > benchmarks/calibration_avx2.md

The second run computes the same seeds with torch's AVX2 kernels instead of AVX-512 ones (on a CPU that
has AVX-512): other floating-point results in the last bits, as on another machine. The test command's
perturbed run does the same where it can.

Each (model, seed) trains in its own process with one torch thread, ``--jobs`` at a time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

LUONG = ("dot", "general", "concat", "location")
MODELS = ("fixed", "fixed_reversed", "attention")  # lessons 01-02, STEPS each
# lesson 03's six models, STEPS_LESSON_03 each: the four scores, the ablation (the dot decoder asking with s_{t-1})
# and Bahdanau's model
LESSON_03 = (*LUONG, "dot_previous", "bahdanau")
SCALING = ("scaling",)  # lesson 04's experiment: one head with and without 1/sqrt(d_k), d_k 16 and 256
HEADS = ("heads",)  # lesson 05's experiment: 1, 2 and 4 heads on the neighbour task
TRANSFORMER = ("leak", "positions", "extrapolation")  # lessons 06 and 07


def run_one(model: str, seed: int, steps: int | None = None) -> dict:
    """Train one model of lessons 01-03 (or run lesson 04's, 05's, 06's or 07's experiment) with seed offset
    ``seed``; measure it here. ``steps``: the training steps of a translation model (default: its lesson's)."""
    os.environ["ATTNEDU_SEED_OFFSET"] = str(seed)
    os.environ["ATTNEDU_PROGRESS"] = "0"
    if model == "heads":
        return {"model": model, "seed": seed, **_heads(seed)}
    if model == "scaling":
        return {"model": model, "seed": seed, **_scaling()}
    if model in TRANSFORMER:
        return {"model": model, "seed": seed, **_transformer(model)}
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


def _scaling() -> dict:
    """Lesson 04's experiment as the lesson runs it: for d_k 16 and 256, with and without the division by sqrt(d_k),
    three models (training seeds 0, 1, 2, moved by the offset), 150 Adam steps; per arm, the spread of the scores at
    initialisation and the held-out accuracy every 25 steps, averaged over the three models."""
    import torch

    from attnedu.runtime import training_seed
    from attnedu.tasks import recall_task
    from attnedu.transformer import RecallHead

    torch.set_num_threads(1)
    vocab, pairs, d_model, steps = 16, 8, 64, 150
    test = recall_task(500, pairs, vocab, torch.Generator().manual_seed(12345))
    arms = {}
    for head_dim in (16, 256):
        for scaled in (True, False):
            spreads, curves = [], []
            for seed in (0, 1, 2):
                model = RecallHead(vocab, d_model, head_dim, scaled, seed=seed)
                generator = torch.Generator().manual_seed(training_seed(seed))
                optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
                with torch.no_grad():
                    spreads.append(model(*test[:3])[1].std().item())
                curve = []
                for step in range(1, steps + 1):
                    keys, values, question, answer = recall_task(64, pairs, vocab, generator)
                    loss = torch.nn.functional.cross_entropy(model(keys, values, question)[0], answer)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    if step % 25 == 0:
                        with torch.no_grad():
                            curve.append((model(*test[:3])[0].argmax(-1) == test[3]).float().mean().item())
                curves.append(curve)
            arms[f"{head_dim} {'scaled' if scaled else 'raw'}"] = {
                "spread": sum(spreads) / 3,
                "curve": [sum(c[i] for c in curves) / 3 for i in range(len(curves[0]))],
                "per_seed_at_50": [c[1] for c in curves],
            }
    return {"arms": arms}


def _heads(seed: int) -> dict:
    """Lesson 05's experiment as the lesson runs it: final test accuracy of 1, 2 and 4 heads, and the offset
    each of the four heads attends to most."""
    import torch

    from attnedu.runtime import training_seed
    from attnedu.tasks import neighbour_task
    from attnedu.transformer import AttentionClassifier

    torch.set_num_threads(1)
    vocab, length, offsets, steps = 8, 12, (-2, -1, 1, 2), 500
    test_tokens, test_targets = neighbour_task(500, length, vocab, offsets, torch.Generator().manual_seed(12345))
    final = {}
    for h in (1, 2, 4):
        model = AttentionClassifier(vocab, length, 32, num_heads=h, n_outputs=4, n_classes=vocab + 1, seed=0)
        generator = torch.Generator().manual_seed(training_seed(0))
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        for _ in range(steps):
            tokens, targets = neighbour_task(64, length, vocab, offsets, generator)
            loss = torch.nn.functional.cross_entropy(model(tokens)[0].flatten(0, 2), targets.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            logits, weights = model(test_tokens)
        final[str(h)] = (logits.argmax(-1) == test_targets).float().mean().item()
        if h == 4:
            inner = torch.arange(2, length - 2)
            shares = torch.tensor(
                [[weights[:64, k, inner, inner + o].mean().item() for o in offsets] for k in range(4)]
            )
    return {
        "accuracy": final,
        "least_on_neighbours": shares.sum(dim=1).min().item(),  # every head: its share on the four neighbours
        "least_best_share": shares.max(dim=0).values.min().item(),  # every neighbour: its best head's share
    }


def _train_lm(model, corpus, steps: int, length: int) -> float:
    import torch

    from attnedu.runtime import training_seed

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(training_seed(0))
    losses = []
    for _ in range(steps):
        inputs, targets = corpus.batch(32, length, generator)
        loss = torch.nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses[-50:]) / 50


def _transformer(experiment: str) -> dict:
    """Lessons 06-07's experiments, as the lessons run them."""
    import torch

    from attnedu.runtime import training_seed
    from attnedu.tasks import CharCorpus, neighbour_task
    from attnedu.transformer import TinyTransformer

    torch.set_num_threads(1)
    loss = torch.nn.functional.cross_entropy
    if experiment == "positions":
        test_tokens, test_targets = neighbour_task(500, 12, 8, (-1,), torch.Generator().manual_seed(12345))
        accuracy = {}
        for positions in ("none", "learned"):
            model = TinyTransformer(8, 9, d_model=32, num_heads=2, num_layers=1, positions=positions, max_positions=12,
                                    causal=False, seed=0)  # fmt: skip
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
            generator = torch.Generator().manual_seed(training_seed(0))
            for _ in range(300):
                tokens, targets = neighbour_task(64, 12, 8, (-1,), generator)
                batch_loss = loss(model(tokens).flatten(0, 1), targets.flatten())
                optimizer.zero_grad()
                batch_loss.backward()
                optimizer.step()
            with torch.no_grad():
                accuracy[positions] = (model(test_tokens).argmax(-1) == test_targets[..., 0]).float().mean().item()
        return {"accuracy": accuracy}
    corpus = CharCorpus.load()
    if experiment == "leak":
        valid = corpus.batch(64, 32, torch.Generator().manual_seed(7), split="valid")
        train_loss, honest = {}, {}
        for name, causal in (("masked", True), ("unmasked", False)):
            model = TinyTransformer(len(corpus.chars), len(corpus.chars), positions="sinusoidal", causal=causal, seed=0)
            train_loss[name] = _train_lm(model, corpus, 300, 32)
            with torch.no_grad():
                honest[name] = loss(model(valid[0], causal=True).flatten(0, 1), valid[1].flatten()).item()
        return {"train_loss": train_loss, "honest": honest}
    held_out = {n: corpus.batch(32, n, torch.Generator().manual_seed(7), split="valid") for n in (32, 64, 128)}
    by_length = {}
    for positions in ("none", "sinusoidal", "rope", "alibi"):
        model = TinyTransformer(len(corpus.chars), len(corpus.chars), positions=positions, num_layers=1, seed=0)
        _train_lm(model, corpus, 300, 32)
        with torch.no_grad():
            by_length[positions] = {
                str(n): loss(model(x).flatten(0, 1), y.flatten()).item() for n, (x, y) in held_out.items()
            }
    return {"by_length": by_length}


def _gradient_shares(net, data) -> dict:
    """Lesson 02's measure: over the first 40 test sentences of every bucket, each target word's gold source word's
    share of the gradient reaching the source words (attnedu.analysis.gold_gradient_shares)."""
    from attnedu.analysis import gold_gradient_shares

    pairs = [p for bucket in data.test.values() for p in bucket[:40]]
    shares = gold_gradient_shares(net, pairs)
    return {"mean": shares.mean().item(), "over_half": (shares > 0.5).float().mean().item(), "words": len(shares)}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 1000, 1001])
    every = MODELS + LESSON_03 + SCALING + HEADS + TRANSFORMER
    parser.add_argument("--models", nargs="+", default=list(every), choices=every)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None, help="training steps of lessons 01-03's models (default: "
                        "their lessons')")  # fmt: skip
    args = parser.parse_args()
    jobs = [(m, s) for s in args.seeds for m in args.models]

    def launch(job):
        code = f"import calibrate, json; print(json.dumps(calibrate.run_one({job[0]!r}, {job[1]}, {args.steps})))"
        here = os.path.dirname(os.path.abspath(__file__))
        done = subprocess.run([sys.executable, "-c", code], cwd=here, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(done.stderr[-2000:])
        return json.loads(done.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(launch, jobs))
    report(results, args)


def _span(values) -> str:
    values = list(values)
    return f"{min(values):.3f} to {max(values):.3f}"


def report(results: list[dict], args) -> None:
    import torch

    from attnedu.train import LR, STEPS

    by_model = {m: [r for r in results if r["model"] == m] for m in MODELS + LESSON_03 + SCALING + HEADS + TRANSFORMER}
    heads = by_model.pop("heads")
    scaling = by_model.pop("scaling")
    later = {m: by_model.pop(m) for m in TRANSFORMER}
    lesson_03 = [r for r in results if r["model"] in LESSON_03]
    results = [r for r in results if r["model"] in MODELS]
    buckets = list(results[0]["accuracy"]) if results else []
    print("# Calibration of lessons 01-07\n")
    print(
        f"Measured {datetime.date.today()} by `benchmarks/calibrate.py` ({args.jobs} processes at once, 1 torch thread "
        f"each). Machine: {platform.machine()}, {os.cpu_count()} cores, torch's CPU kernels for "
        f"{torch.backends.cpu.get_cpu_capability()}; torch {torch.__version__}; Python "
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
        print("| model | seed | target words | mean share | share above one half |")
        print("|---|---|---|---|---|")
        for r in shares:
            g = r["gradients"]["shares"]
            print(f"| {r['model']} | {r['seed']} | {g['words']} | {g['mean']:.3f} | {g['over_half']:.3f} |")
    print("\n## Bahdanau attention: alignment by word class (target words, hits, commonest miss offsets)\n")
    for r in by_model["attention"]:
        print(f"- seed {r['seed']}: " + "; ".join(f"{k} {v[0]} words, {v[1]} hits, misses {v[2]}" for k, v in
                                                     r["by_class"].items()))  # fmt: skip
    if lesson_03:
        _report_lesson_03(lesson_03)
    if scaling:
        _report_scaling(scaling)
    if heads:
        print("\n## Lesson 05: heads on the neighbour task (test accuracy after 500 steps)\n")
        print("4 heads: the smallest share any head puts on the four neighbours, and the smallest best-head share any")
        print("neighbour gets (weights averaged over 64 test sequences)\n")
        print("| seed | 1 head | 2 heads | 4 heads | least on neighbours | least best share |")
        print("|---|---|---|---|---|---|")
        for r in heads:
            a = r["accuracy"]
            print(f"| {r['seed']} | {a['1']:.3f} | {a['2']:.3f} | {a['4']:.3f} | {r['least_on_neighbours']:.2f} "
                  f"| {r['least_best_share']:.2f} |")  # fmt: skip
    if later["leak"]:
        print("\n## Lesson 06: the leak (training loss over the last 50 steps; held-out loss with the causal mask)\n")
        print("| seed | masked: train | unmasked: train | masked: honest | unmasked: honest |")
        print("|---|---|---|---|---|")
        for r in later["leak"]:
            t, h = r["train_loss"], r["honest"]
            print(
                f"| {r['seed']} | {t['masked']:.3f} | {t['unmasked']:.3f} | {h['masked']:.3f} | {h['unmasked']:.3f} |"
            )
    if later["positions"]:
        print("\n## Lesson 07: naming the previous token, bidirectional encoder, 300 steps\n")
        print("| seed | no positions | learned positions |")
        print("|---|---|---|")
        for r in later["positions"]:
            print(f"| {r['seed']} | {r['accuracy']['none']:.3f} | {r['accuracy']['learned']:.3f} |")
    if later["extrapolation"]:
        print("\n## Lesson 07: train at 32 characters, held-out loss at 32 / 64 / 128\n")
        print("| seed | none | sinusoidal | rope | alibi |")
        print("|---|---|---|---|---|")
        for r in later["extrapolation"]:
            cells = [
                " / ".join(f"{v:.3f}" for v in r["by_length"][p].values())
                for p in ("none", "sinusoidal", "rope", "alibi")
            ]
            print(f"| {r['seed']} | " + " | ".join(cells) + " |")
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


def _report_scaling(rows: list[dict]) -> None:
    print("\n## Lesson 04: one head on associative recall, with and without the division by sqrt(d_k)\n")
    print("Each row: the mean of the lesson's three models (training seeds 0, 1, 2 moved by the offset) after 150 Adam")
    print("steps; spread: the scores' standard deviation at initialisation; accuracy on 500 held-out questions.\n")
    print("| seed | d_k 16 divided: spread, at 50, at 150 | d_k 16 raw | d_k 256 divided | d_k 256 raw |")
    print("|---|---|---|---|---|")
    names = ("16 scaled", "16 raw", "256 scaled", "256 raw")
    for r in rows:
        cells = [
            f"{r['arms'][n]['spread']:.1f}, {r['arms'][n]['curve'][1]:.3f}, {r['arms'][n]['curve'][-1]:.3f}"
            for n in names
        ]
        print(f"| {r['seed']} | " + " | ".join(cells) + " |")

    def arm(r, name, at):
        return r["arms"][name]["curve"][at]

    ranges = {
        "d_k 16, divided minus raw after 50 steps": [arm(r, "16 scaled", 1) - arm(r, "16 raw", 1) for r in rows],
        "d_k 256, divided minus raw after 50 steps": [arm(r, "256 scaled", 1) - arm(r, "256 raw", 1) for r in rows],
        "d_k 256, divided minus raw after 150 steps": [arm(r, "256 scaled", -1) - arm(r, "256 raw", -1) for r in rows],
        "divided, the lower of the two sizes after 150 steps": [
            min(arm(r, "16 scaled", -1), arm(r, "256 scaled", -1)) for r in rows
        ],
        "d_k 16 raw after 150 steps": [arm(r, "16 raw", -1) for r in rows],
    }
    print("\nRanges over the seeds, for the margins lesson 04 asserts:\n")
    for label, values in ranges.items():
        print(f"- {label}: {_span(values)}")


if __name__ == "__main__":
    main()
