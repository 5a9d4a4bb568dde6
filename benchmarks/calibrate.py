"""Calibrate the trained effects of lessons 01-10 over several training seeds, so that the margins the
lessons assert rest on more than one run (docs/style.md, experiment rules: assert about half the
observed gap). Seeds go through ``ATTNEDU_SEED_OFFSET`` exactly as in the test command's perturbed
run, so seed 1000 here is the perturbed run's model.

    python benchmarks/calibrate.py [--seeds 0 1 2 1000 1001] [--jobs 2] > benchmarks/calibration.md
    python benchmarks/calibrate.py --models norms09 lm09 lm09_nowarmup width09 --json benchmarks/calibration09.json
    ATEN_CPU_CAPABILITY=avx2 python benchmarks/calibrate.py > benchmarks/calibration_avx2.md
    MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default python benchmarks/calibrate.py \
        --seeds 0 1 2 1000 1001 1002 > benchmarks/calibration_default.md

Every effect is calibrated on three paths through torch's CPU kernels, each giving other floating-point
results in the last bits, as other machines do: the machine's native kernels (AVX-512 for calibration.md),
torch's AVX2 kernels (on a CPU that has AVX-512; they change ATen's own vectorised operations such as the
softmax, not MKL's matrix products), and the third path, ATen's baseline kernels with MKL's compatible code
path (which changes the matrix products too, on any x86-64 CPU with AVX2 or AVX-512). The test command's
perturbed run uses the third path, with the seeds moved by 1000.

Each (model, seed) trains in its own process with one torch thread, ``--jobs`` at a time.

What is trained is the lessons' own code: lessons 01-03's models through ``attnedu.train.train`` with the lessons'
``STEPS``, ``STEPS_LESSON_03`` and ``LR``; lessons 04-07's experiments through their functions in
``attnedu.transformer`` with the recipes the lessons pass (``train_recall`` with ``RECALL_04``, ``train_neighbours``
with ``NEIGHBOURS_05``, ``train_leak`` with ``LEAK_06``, ``train_previous_token`` with ``PREVIOUS_07``,
``train_extrapolation`` with ``EXTRAPOLATION_07``; tests/test_experiments.py checks that the lessons and this script
call them alike); lesson 09's through ``attnedu.train.train_lm`` and
``attnedu.init_gradients.init_gradient_experiment``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
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
# lesson 09: gradients at initialisation; the language model against the bigram; the same without warm-up; and,
# not in the lesson, the gradients of stacks of Xiong et al.'s width
LESSON09 = ("norms09", "lm09", "lm09_nowarmup", "width09")
LESSON10 = ("lm10",)  # lesson 10: MHA -> GQA by pooling, streaming with a window cache and sinks
HEADS = ("heads",)  # lesson 05's experiment: 1, 2 and 4 heads on the neighbour task
TRANSFORMER = ("leak", "positions", "extrapolation")  # lessons 06 and 07 (07 runs seeds 0, 1, 2: add 1002)


def run_one(model: str, seed: int, steps: int | None = None) -> dict:
    """Train one model of lessons 01-03 (or run lesson 04's, 05's, 06's or 07's experiment) with seed offset
    ``seed``; measure it here. ``steps``: the training steps of a translation model (default: its lesson's)."""
    os.environ["ATTNEDU_SEED_OFFSET"] = str(seed)
    os.environ["ATTNEDU_PROGRESS"] = "0"
    if model in LESSON09:
        return {"model": model, "seed": seed, **_lesson09(model)}
    if model in LESSON10:
        return {"model": model, "seed": seed, **_lesson10()}
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
    """Lesson 04's experiment, ``attnedu.transformer.train_recall`` with ``RECALL_04`` as the lesson calls it: for
    d_k 16 and 256, each arm (divided by sqrt(d_k), raw, and raw with W_Q, W_K initialised smaller by d_k^(-1/4),
    the control), three models (training seeds 0, 1, 2, moved by the offset); per arm, the spread of the scores at
    initialisation and the held-out accuracy every ``every`` steps, averaged over the three models."""
    import torch

    from attnedu.transformer import RECALL_04, RECALL_KINDS, recall_held_out, train_recall

    torch.set_num_threads(1)
    held_out = recall_held_out(RECALL_04)
    names = {"divided": "scaled", "raw": "raw", "raw, small init": "raw small init"}  # the record's names
    arms = {}
    for head_dim in (16, 256):
        for kind in RECALL_KINDS:
            runs = [train_recall(head_dim, kind, seed, held_out, RECALL_04) for seed in (0, 1, 2)]
            arms[f"{head_dim} {names[kind]}"] = {
                "spread": sum(run.spread for run in runs) / 3,
                "curve": [sum(run.curve[i] for run in runs) / 3 for i in range(len(runs[0].curve))],
                "per_seed_at_50": [run.curve[1] for run in runs],
            }
    return {"arms": arms}


def _heads(seed: int) -> dict:
    """Lesson 05's experiment, ``attnedu.transformer.train_neighbours`` with ``NEIGHBOURS_05`` as the lesson calls
    it: final test accuracy of 1, 2 and 4 heads, and the offset each of the four heads attends to most."""
    import torch

    from attnedu.transformer import NEIGHBOURS_05, neighbour_classifier, neighbour_held_out, train_neighbours

    torch.set_num_threads(1)
    held_out = neighbour_held_out(NEIGHBOURS_05)
    test_tokens, test_targets = held_out
    vocab, length, offsets = NEIGHBOURS_05["vocab"], NEIGHBOURS_05["length"], NEIGHBOURS_05["offsets"]
    final = {}
    for h in (1, 2, 4):
        model = neighbour_classifier(h, NEIGHBOURS_05)
        final[str(h)] = train_neighbours(model, held_out, NEIGHBOURS_05)[-1][1]
        with torch.no_grad():
            logits, weights = model(test_tokens)
        if h == 1:
            right = logits.argmax(-1) == test_targets  # (500, length, offsets)
            edge = test_targets == vocab
            one_head = {
                "inside": [right[..., k][~edge[..., k]].float().mean().item() for k in range(len(offsets))],
                "edge": right[edge].float().mean().item(),
            }
        if h == 4:
            inner = torch.arange(2, length - 2)
            shares = torch.tensor(
                [[weights[:64, k, inner, inner + o].mean().item() for o in offsets] for k in range(4)]
            )
    return {
        "accuracy": final,
        "one_head": one_head,  # one head: accuracy per offset on answers inside the sequence, and on the edge answers
        "least_on_neighbours": shares.sum(dim=1).min().item(),  # every head: its share on the four neighbours
        "least_best_share": shares.max(dim=0).values.min().item(),  # every neighbour: its best head's share
    }


def _transformer(experiment: str) -> dict:
    """Lessons 06-07's experiments: ``attnedu.transformer.train_previous_token``, ``train_leak`` and
    ``train_extrapolation``, each with its lesson's recipe, as the lessons call them."""
    import torch

    from attnedu.tasks import CharCorpus
    from attnedu.transformer import LEAK_06, PREVIOUS_07, neighbour_held_out, train_leak, train_previous_token

    torch.set_num_threads(1)
    loss = torch.nn.functional.cross_entropy
    if experiment == "positions":
        held_out = neighbour_held_out(PREVIOUS_07)
        return {"accuracy": {p: train_previous_token(p, held_out, PREVIOUS_07) for p in ("none", "learned")}}
    corpus = CharCorpus.load()
    if experiment == "leak":
        length = LEAK_06["length"]
        valid = corpus.batch(64, length, torch.Generator().manual_seed(7), split="valid")
        train_loss, honest, final = {}, {}, {}
        splits = {s: corpus.batch(1024, length, torch.Generator().manual_seed(8), split=s) for s in ("train", "valid")}
        for name, causal in (("masked", True), ("unmasked", False)):
            model, train_loss[name] = train_leak(causal, corpus, LEAK_06)
            with torch.no_grad():
                honest[name] = loss(model(valid[0], causal=True).flatten(0, 1), valid[1].flatten()).item()
                if causal:  # the final masked model on 1024 windows of each split
                    final = {s: loss(model(x).flatten(0, 1), y.flatten()).item() for s, (x, y) in splits.items()}
        return {"train_loss": train_loss, "honest": honest, "final": final}
    return _extrapolation(corpus)


def _extrapolation(corpus) -> dict:
    """Lesson 07's train-short/test-long experiment, ``attnedu.transformer.train_extrapolation`` with
    ``EXTRAPOLATION_07`` as the lesson calls it (the lesson's seeds 1 and 2 are this script's offsets 1 and 2): train
    at its length, evaluate on the same held-out characters cut into windows of each of its evaluation lengths; RoPE
    stretched by position interpolation and the NTK-aware base; ALiBi at the longest length against the same model
    reading only the last training length of characters before each prediction."""
    import torch

    from attnedu.positional import interpolated_positions, ntk_aware_base
    from attnedu.transformer import EXTRAPOLATION_07, train_extrapolation

    loss = torch.nn.functional.cross_entropy
    train_length, eval_lengths = EXTRAPOLATION_07["length"], EXTRAPOLATION_07["eval_lengths"]
    text, following = corpus.batch(32, eval_lengths[-1], torch.Generator().manual_seed(7), split="valid")
    held_out = {n: (text.reshape(-1, n), following.reshape(-1, n)) for n in eval_lengths}
    by_length, extended, window, windowed = {}, {}, {}, {}
    for positions in ("none", "sinusoidal", "rope", "alibi"):
        model = train_extrapolation(positions, corpus, EXTRAPOLATION_07, seed=0)
        with torch.no_grad():
            by_length[positions] = {
                str(n): loss(model(x).flatten(0, 1), y.flatten()).item() for n, (x, y) in held_out.items()
            }
            x, y = held_out[eval_lengths[-1]]  # each query seeing only its last train_length keys
            windowed[positions] = loss(model(x, window=train_length - 1).flatten(0, 1), y.flatten()).item()
            if positions == "rope":
                head_dim = model.blocks[0].attention.head_dim
                for n, (x, y) in held_out.items():
                    if n > train_length:
                        pi = model(x, rope_positions=interpolated_positions(n, train_length))
                        ntk = model(x, rope_base=ntk_aware_base(head_dim, n / train_length))
                        extended[str(n)] = {
                            "interpolation": loss(pi.flatten(0, 1), y.flatten()).item(),
                            "ntk": loss(ntk.flatten(0, 1), y.flatten()).item(),
                        }
            if positions == "alibi":
                window = _window_losses(model, *held_out[eval_lengths[-1]], train_length)
    return {"by_length": by_length, "rope_extended": extended, "alibi_window": window, "windowed": windowed}


def _window_losses(model, x, y, width: int) -> dict:
    """The loss of each prediction from position width - 1 on: with the whole text before it, and with only the
    last ``width`` characters (the training length) before it."""
    import torch

    loss = torch.nn.functional.cross_entropy
    full = loss(model(x)[:, width - 1 :].flatten(0, 1), y[:, width - 1 :].flatten()).item()
    windows = x.unfold(1, width, 1).reshape(-1, width)  # every run of width characters
    last = model(windows)[:, -1]  # the prediction after each run
    return {"full": full, "window": loss(last, y[:, width - 1 :].flatten()).item()}


# Lesson 09, as the lesson runs it: its sizes, recipe and held-out windows. The gradient experiment itself is the
# package's (attnedu.init_gradients.init_gradient_experiment), so the lesson and this calibration run the same code.
CONTEXT_09, STEPS_09, BATCH_09, LR_09 = 64, 144, 8, 6e-3
CUTS_09 = (1, 2, 4, 64)  # characters the model may read, scored on every eighth of the lesson's held-out windows
TEMPERATURES_09 = (0.1, 1.0, 1.5)
WIDTH_09 = {"d_model": 512, "num_heads": 4, "d_ff": 1024}  # Xiong et al.'s translation model's sizes (their A.1)


def _lesson09(experiment: str) -> dict:
    import torch

    from attnedu.block_parts import swiglu_hidden
    from attnedu.blocks import DecoderLM
    from attnedu.init_gradients import GRADIENT_INIT_SEEDS, BlockStack, ffn_gradient_norms, init_gradient_experiment
    from attnedu.tasks import CharCorpus
    from attnedu.train import lm_loss, train_lm

    torch.set_num_threads(1)
    corpus = CharCorpus.load()
    if experiment in ("norms09", "width09"):  # the lesson's batch
        inputs, targets = corpus.batch(8, 64, torch.Generator().manual_seed(5))
    if experiment == "norms09":  # every arm of the lesson's experiment, as the lesson runs it
        measured = init_gradient_experiment(len(corpus.chars), inputs, targets)
        return {"gradients": {arm: {f"{'pre' if first else 'post'} {depth}": {
                    "profile": m.w2.tolist(), "rms": m.stream_rms, "sigma": m.stream_sigma,
                    "stream_gradient": m.stream_gradient, "coherence": m.coherence}
                                    for (first, depth), m in cells.items()}
                              for arm, cells in measured.items()}}  # fmt: skip
    if experiment == "width09":  # not in the lesson: the paper's width and initialisation, 6 blocks, all paths
        profiles = {}
        for first in (False, True):
            runs = [ffn_gradient_norms(BlockStack(len(corpus.chars), **WIDTH_09, num_layers=6, norm_first=first,
                                                  seed=seed, init="xavier"), inputs, targets).w2
                    for seed in GRADIENT_INIT_SEEDS]  # fmt: skip
            profiles["pre" if first else "post"] = torch.stack(runs).mean(0).tolist()
        return {"width": profiles}
    valid_inputs, valid_targets = (t[::4] for t in corpus.windows(CONTEXT_09, split="valid"))
    bigram = -corpus.bigram_log_probs()[valid_inputs, valid_targets].mean().item()
    lm = DecoderLM(len(corpus.chars), d_model=128, num_heads=4, num_layers=4, d_ff=swiglu_hidden(128), seed=0)
    warmup = 0 if experiment == "lm09_nowarmup" else STEPS_09 // 10
    log = train_lm(lm, corpus, STEPS_09, BATCH_09, CONTEXT_09, LR_09, warmup=warmup, seed=0)
    valid_loss = lm_loss(lm, valid_inputs, valid_targets)
    if experiment == "lm09_nowarmup":
        return {"bigram": bigram, "valid": valid_loss, "train": log.final_loss}
    cut_inputs, cut_targets = valid_inputs[::8], valid_targets[::8]
    cut = {str(k): lm_loss(lm, cut_inputs, cut_targets, context=k) for k in CUTS_09}
    bigram_cut = -corpus.bigram_log_probs()[cut_inputs, cut_targets].mean().item()
    prompt = corpus.encode("The for statement ")
    distinct = {}
    for temperature in TEMPERATURES_09:
        ids = lm.generate(prompt, 80, temperature, torch.Generator().manual_seed(0), context=CONTEXT_09)
        text = corpus.decode(ids[len(prompt) :])
        grams = [text[i : i + 4] for i in range(len(text) - 3)]
        distinct[str(temperature)] = len(set(grams)) / len(grams)
    with torch.no_grad():
        _, maps = lm(corpus.encode("The loop ends when its test fails.")[None], return_weights=True)
    previous = torch.stack([torch.diagonal(m[0], offset=-1, dim1=-2, dim2=-1).mean(-1) for m in maps])
    return {"bigram": bigram, "valid": valid_loss, "train": log.final_loss, "seconds": log.seconds,
            "distinct": distinct, "previous_max": previous.max().item(), "context": cut,
            "bigram_cut": bigram_cut}  # fmt: skip


def _kernels() -> str:
    """The CPU kernels this process computes with, as the lesson's record names them."""
    import torch

    mkl = os.environ.get("MKL_CBWR")
    return torch.backends.cpu.get_cpu_capability() + (f" (MKL_CBWR={mkl})" if mkl else "")


def _09_last(r: dict, arm: str, kind: str, depth: int) -> float:
    return r["gradients"][arm][f"{kind} {depth}"]["profile"][-1]


def _09_rms(r: dict, arm: str, depth: int, key: str = "rms") -> float:
    """A pre-norm stack's measurement ``key`` ("rms", "sigma", "stream_gradient", "coherence") at ``depth``."""
    return r["gradients"][arm][f"pre {depth}"][key]


def _09_factor(r: dict, arm: str, key: str) -> float:
    """From 2 to 12 blocks: how a pre-norm measurement changes (its value at 12 over its value at 2)."""
    return _09_rms(r, arm, 12, key) / _09_rms(r, arm, 2, key)


def lesson09_statistics(r: dict) -> dict:
    """The effects lesson 09 asserts, for one seed's ``norms09`` result (each arm averaged over three inits)."""
    stats = {}
    for depth in (2, 6, 12):
        stats[f"post/pre {depth}"] = _09_last(r, "pytorch", "post", depth) / _09_last(r, "pytorch", "pre", depth)
    stats["ratio growth"] = stats["post/pre 12"] - stats["post/pre 2"]
    stats["post factor"] = _09_last(r, "pytorch", "post", 12) / _09_last(r, "pytorch", "post", 2)
    for arm in ("pytorch", "xavier", "small embeddings"):
        shrink = _09_last(r, arm, "pre", 12) / _09_last(r, arm, "pre", 2)
        growth = _09_factor(r, arm, "rms")
        stats[f"{arm} shrink"], stats[f"{arm} growth"] = shrink, growth
        # step 1: the gradient reaching the stream falls as 1 / sigma grows; step 2: W_2's falls less than that
        stream = _09_factor(r, arm, "stream_gradient")
        stats[f"{arm} stream tracks"] = abs(stream * _09_factor(r, arm, "sigma") - 1)
        stats[f"{arm} w2 over stream"] = shrink / stream
        stats[f"{arm} coherence"] = _09_factor(r, arm, "coherence")
        # the squares of what the embeddings and each block add, fitted at 2 and 12 blocks, predict 6 blocks
        per_block = (_09_rms(r, arm, 12) ** 2 - _09_rms(r, arm, 2) ** 2) / 10
        start = _09_rms(r, arm, 2) ** 2 - 2 * per_block
        stats[f"{arm} pythagoras"] = abs((start + 6 * per_block) ** 0.5 / _09_rms(r, arm, 6) - 1)
    stats["xavier shrink gap"] = stats["pytorch shrink"] - stats["xavier shrink"]
    stats["embedding shrink gap"] = stats["pytorch shrink"] - stats["small embeddings shrink"]
    for depth in (6, 12):  # block by block: the last block's gradient over the first's
        pre = r["gradients"]["pytorch"][f"pre {depth}"]["profile"]
        post = r["gradients"]["pytorch"][f"post {depth}"]["profile"]
        cut_pre = r["gradients"]["identity path"][f"pre {depth}"]["profile"]
        cut_post = r["gradients"]["identity path"][f"post {depth}"]["profile"]
        stats[f"pre last/first {depth}"] = pre[-1] / pre[0]
        stats[f"post last/first {depth}"] = post[-1] / post[0]
        stats[f"identity pre last/first {depth}"] = cut_pre[-1] / cut_pre[0]
        stats[f"identity post last/first {depth}"] = cut_post[-1] / cut_post[0]
    return stats


def _floor(x: float) -> float:
    return math.floor(x * 100) / 100


def _ceil(x: float) -> float:
    return math.ceil(x * 100) / 100


MARGIN_RULES_09 = (
    "from every run of the record (each kernel set, each seed): a gap the lesson asserts gets half the smallest gap "
    "seen, rounded down to 0.01; a deviation it bounds gets twice the largest deviation seen, rounded up to 0.01; a "
    "ratio it asserts above a bound (1, or sqrt(6) for the stream's growth) gets the bound plus half the smallest "
    "excess, rounded down to 0.01; a ratio it asserts below 1 gets 1 minus half the smallest shortfall, rounded up "
    "to 0.01 (and the pre-norm stack's last/first ratio along the identity path only must stay above that threshold "
    "in every run)"
)


def lesson09_margins(runs: list[dict]) -> dict:
    """The margins lesson 09 asserts, by ``MARGIN_RULES_09``."""
    results = [r for run in runs for r in run["results"]]
    stats = [lesson09_statistics(r) for r in results if r["model"] == "norms09"]
    lms = [r for r in results if r["model"] == "lm09"]

    def smallest(*keys):
        return min(s[key] for s in stats for key in keys)

    def largest(*keys):
        return max(s[key] for s in stats for key in keys)

    def above(bound, *keys):  # asserted above bound
        return _floor(bound + (smallest(*keys) - bound) / 2)

    def below(*keys):  # asserted below 1
        return _ceil(1 - (1 - largest(*keys)) / 2)

    arms = ("pytorch", "xavier", "small embeddings")
    fall = below("pre last/first 6", "pre last/first 12")
    if smallest("identity pre last/first 6", "identity pre last/first 12") <= fall:
        raise ValueError("the identity path's last/first ratio reaches the fall's threshold: the lesson could not tell "
                         "the two apart")  # fmt: skip
    return {
        "post_over_pre": above(1, *(f"post/pre {d}" for d in (2, 6, 12))),
        "ratio_growth": _floor(smallest("ratio growth") / 2),
        "post_rise": above(1, "post factor"),
        "pre_shrink": below("pytorch shrink"),
        "stream_tracks": _ceil(2 * largest(*(f"{arm} stream tracks" for arm in arms))),
        # with the embeddings at full size (with small ones it goes either way from run to run)
        "w2_over_stream": above(1, "pytorch w2 over stream", "xavier w2 over stream"),
        "coherence_rise": above(1, "pytorch coherence", "xavier coherence"),
        "pythagoras": _ceil(2 * largest("pytorch pythagoras")),  # asserted where the sum of squares is assumed
        "fast_growth": above(math.sqrt(6), "small embeddings growth"),
        "xavier_shrink_gap": _floor(smallest("xavier shrink gap") / 2),
        "embedding_shrink_gap": _floor(smallest("embedding shrink gap") / 2),
        "pre_fall": fall,  # with every path the ratio is below it, along the identity path above
        "identity_rise": above(1, "identity post last/first 6", "identity post last/first 12"),
        "bigram_gap": _floor(min(r["bigram"] - r["valid"] for r in lms) / 2),
        "one_char_vs_whole": _floor(min(r["context"]["1"] - r["context"]["64"] for r in lms) / 2),
        "one_char_vs_bigram": _floor(min(r["context"]["1"] - r["bigram_cut"] for r in lms) / 2),
        "far_context_share": _ceil(
            2 * max((r["context"]["4"] - r["context"]["64"]) / (r["context"]["1"] - r["context"]["64"]) for r in lms)
        ),  # fmt: skip
        "distinct_gap": _floor(min(r["distinct"]["1.5"] - r["distinct"]["0.1"] for r in lms) / 2),
    }


def report_lesson09(results: list[dict], args) -> None:
    print("## Lesson 09: the Transformer block\n")
    kernels = _kernels()
    print(f"Measured {datetime.date.today()} by `benchmarks/calibrate.py --models {' '.join(args.models)}` "
          f"({args.jobs} processes at once, 1 torch thread each); torch's CPU kernels: {kernels}. A seed here is "
          "`ATTNEDU_SEED_OFFSET`: the lesson's seeds plus the seed, so 0 is the lesson's own run and 1000 the test "
          "command's perturbed run.\n")  # fmt: skip
    norms = [r for r in results if r["model"] == "norms09"]
    if norms:
        print("The gradients at initialisation (`attnedu.init_gradients.init_gradient_experiment`, each value the mean "
              "of three inits): the last block's W_2 gradient, post-norm / pre-norm; from 2 to 12 blocks, per arm of "
              "pre-norm stacks, the factors of the last W_2 gradient, of the gradient reaching the stream, of the "
              "stream's sigma and RMS, and of the coherence of the W_2 gradient's sum over positions; block by "
              "block, the last block's gradient over the first's, with every path and along the identity path "
              "only\n")  # fmt: skip
        print("| seed | post/pre at 2 / 6 / 12 | arm: W_2, stream gradient, sigma, RMS, coherence (x, 2 -> 12 blocks) "
              "| pre last/first 6 / 12 | post last/first 6 / 12 | identity path: pre 6 / 12 | identity path: post "
              "6 / 12 |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for r in norms:
            s = lesson09_statistics(r)
            arms = "<br>".join(
                f"{a}: {s[f'{a} shrink']:.3f}, {_09_factor(r, a, 'stream_gradient'):.3f}, "
                f"{_09_factor(r, a, 'sigma'):.3f}, {s[f'{a} growth']:.3f}, {s[f'{a} coherence']:.3f}"
                for a in ("pytorch", "xavier", "small embeddings")
            )
            ratios = " / ".join(f"{s[key]:.2f}" for key in ("post/pre 2", "post/pre 6", "post/pre 12"))
            pairs = " | ".join(
                f"{s[f'{kind} 6']:.3f} / {s[f'{kind} 12']:.3f}"
                for kind in ("pre last/first", "post last/first", "identity pre last/first", "identity post last/first")
            )
            print(f"| {r['seed']} | {ratios} | {arms} | {pairs} |")  # fmt: skip
    wide = [r for r in results if r["model"] == "width09"]
    if wide:
        print(f"\nNot in the lesson: stacks of Xiong et al.'s width ({WIDTH_09}), 6 blocks, Xavier init, every path: "
              "each block's W_2 gradient (mean of three inits), first block to last\n")  # fmt: skip
        print("| seed | post-norm | pre-norm | pre-norm first/last |")
        print("|---|---|---|---|")
        for r in wide:
            post, pre = r["width"]["post"], r["width"]["pre"]
            print(f"| {r['seed']} | {' '.join(f'{v:.2f}' for v in post)} | {' '.join(f'{v:.2f}' for v in pre)} | "
                  f"{pre[0] / pre[-1]:.2f} |")  # fmt: skip
    lms = [r for r in results if r["model"] == "lm09"]
    cuts = " / ".join(str(k) for k in CUTS_09)
    temps = " / ".join(str(t) for t in TEMPERATURES_09)
    if lms:
        print(f"\nThe language model ({STEPS_09} steps, batch {BATCH_09}, context {CONTEXT_09}): held-out loss "
              "against the bigram baseline (every fourth held-out window); the held-out loss when each prediction "
              f"may read only the last {cuts} characters (every eighth of those windows), and the bigram model's on "
              f"those windows; the share of distinct 4-grams in 80 sampled characters at temperatures {temps}; the "
              "largest mean weight any head puts on the previous character\n")  # fmt: skip
        print(f"| seed | bigram | model (held out) | gap | training loss | last {cuts} characters | bigram there | "
              f"distinct at {temps} | previous | seconds |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in lms:
            d, c = r["distinct"], r["context"]
            print(f"| {r['seed']} | {r['bigram']:.3f} | {r['valid']:.3f} | {r['bigram'] - r['valid']:.3f} | "
                  f"{r['train']:.3f} | {' / '.join(f'{c[str(k)]:.3f}' for k in CUTS_09)} | {r['bigram_cut']:.3f} | "
                  f"{' / '.join(f'{d[str(t)]:.2f}' for t in TEMPERATURES_09)} | {r['previous_max']:.2f} | "
                  f"{r['seconds']:.0f} |")  # fmt: skip
    cold = [r for r in results if r["model"] == "lm09_nowarmup"]
    if cold:
        print("\nThe same language model and recipe without the learning-rate warm-up (`warmup=0`): held-out loss\n")
        print("| seed | bigram | model (held out) | gap | training loss |")
        print("|---|---|---|---|---|")
        for r in cold:
            print(f"| {r['seed']} | {r['bigram']:.3f} | {r['valid']:.3f} | {r['bigram'] - r['valid']:.3f} | "
                  f"{r['train']:.3f} |")  # fmt: skip
    if args.json:
        _write_lesson09_record(results, args, kernels)


def _write_lesson09_record(results: list[dict], args, kernels: str) -> None:
    """Put this run into the lesson's record, replacing an earlier run with the same kernels and keeping the
    others, then recompute the margins from every run it holds (``lesson09_margins``)."""
    path = args.json
    record = {"runs": []}
    if os.path.exists(path):
        with open(path) as f:
            record = json.load(f)
    runs = [run for run in record.get("runs", []) if run["kernels"] != kernels]
    fresh = {key for r in results if r["model"] == "norms09" for key in r["gradients"]["pytorch"]["pre 2"]}
    stale = [run["kernels"] for run in runs for r in run["results"]
             if fresh and r["model"] == "norms09" and set(r["gradients"]["pytorch"]["pre 2"]) != fresh]  # fmt: skip
    if stale:  # the margins need every run's measurements: write this run alone, then re-run the other kernel sets
        print(f"\nThe record's runs on {', '.join(sorted(set(stale)))} measured other things than this one: they are "
              "dropped; run this command on those kernels again.")  # fmt: skip
        runs = [run for run in runs if run["kernels"] not in stale]
    runs.append({"kernels": kernels, "date": str(datetime.date.today()),
                 "command": f"benchmarks/calibrate.py --models {' '.join(args.models)} --seeds "
                            f"{' '.join(map(str, args.seeds))} --json {path}", "results": results})  # fmt: skip
    record = {
        "recipe": {"steps": STEPS_09, "batch": BATCH_09, "context": CONTEXT_09, "lr": LR_09},
        "runs": runs,
        "margins": lesson09_margins(runs),
        "margin_rules": MARGIN_RULES_09,
    }
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(f"\nMargins over {len(runs)} kernel set(s) ({', '.join(run['kernels'] for run in runs)}), written to {path}:")
    for name, value in record["margins"].items():
        print(f"- {name}: {value}")


# Lesson 10, as the lesson runs it
CONTEXT_10, STEPS_10, BATCH_10, LR_10, UPTRAIN_10 = 64, 150, 8, 6e-3, 30
STREAM_10, WINDOW_10, SINKS_10 = 256, 32, 4


def _lesson10() -> dict:
    import copy

    import torch

    from attnedu.blocks import DecoderLM
    from attnedu.inference import (
        KVCache,
        RollingKVCache,
        SinkCache,
        streaming_losses,
        to_grouped_query,
        window_recompute_losses,
    )
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


def report_lesson10(results: list[dict], args) -> None:
    import torch

    print("## Lesson 10: attention at inference\n")
    kernels = torch.backends.cpu.get_cpu_capability()
    print(f"Measured {datetime.date.today()} by `benchmarks/calibrate.py --models lm10` ({args.jobs} processes at "
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
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": f"benchmarks/calibrate.py --models lm10 --seeds {' '.join(map(str, args.seeds))} "
                       f"--json {args.json}", "date": str(datetime.date.today()), "kernels": kernels,
                       "recipe": {"steps": STEPS_10, "batch": BATCH_10, "context": CONTEXT_10, "lr": LR_10,
                       "uptrain": UPTRAIN_10}, "results": results}, f, indent=1)  # fmt: skip
            f.write("\n")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 1000, 1001])
    every = MODELS + LESSON_03 + SCALING + HEADS + TRANSFORMER + LESSON09 + LESSON10
    parser.add_argument("--models", nargs="+", default=list(every), choices=every)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", help="also write lesson 09's or lesson 10's results to this file (the lesson reads "
                        "them); run one of the two at a time")  # fmt: skip
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
    others = [r for r in results if r["model"] not in LESSON09 + LESSON10]
    if others:
        report(others, args)
    if any(r["model"] in LESSON09 for r in results):
        report_lesson09([r for r in results if r["model"] in LESSON09], args)
    if any(r["model"] in LESSON10 for r in results):
        report_lesson10([r for r in results if r["model"] in LESSON10], args)


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
    print("# Calibration of lessons 01-09\n")
    print(
        f"Measured {datetime.date.today()} by `benchmarks/calibrate.py` ({args.jobs} processes at once, 1 torch thread "
        f"each). Machine: {platform.machine()}, {os.cpu_count()} cores, torch's CPU kernels for "
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
        if all("one_head" in r for r in heads):
            print("\nOne head: accuracy on the answers inside the sequence, per offset (-2, -1, +1, +2), sorted; and")
            print("on the edge answers ('beyond the sequence')\n")
            print("| seed | best offset | second | third | fourth | edge |")
            print("|---|---|---|---|---|---|")
            for r in heads:
                inside = sorted(r["one_head"]["inside"], reverse=True)
                cells = " | ".join(f"{v:.3f}" for v in inside)
                print(f"| {r['seed']} | {cells} | {r['one_head']['edge']:.3f} |")
    if later["leak"]:
        print("\n## Lesson 06: the leak (training loss over the last 50 steps; held-out loss with the causal mask)\n")
        print("final: the final masked model on 1024 windows of 32 of each split\n")
        print("| seed | masked: train | unmasked: train | masked: honest | unmasked: honest | final: train "
              "| final: valid |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for r in later["leak"]:
            t, h, f = r["train_loss"], r["honest"], r.get("final", {})
            print(f"| {r['seed']} | {t['masked']:.3f} | {t['unmasked']:.3f} | {h['masked']:.3f} | {h['unmasked']:.3f} "
                  f"| {f.get('train', float('nan')):.3f} | {f.get('valid', float('nan')):.3f} |")  # fmt: skip
    if later["positions"]:
        print("\n## Lesson 07: naming the previous token, bidirectional encoder, 300 steps\n")
        print("| seed | no positions | learned positions |")
        print("|---|---|---|")
        for r in later["positions"]:
            print(f"| {r['seed']} | {r['accuracy']['none']:.3f} | {r['accuracy']['learned']:.3f} |")
    if later["extrapolation"]:
        from attnedu.transformer import EXTRAPOLATION_07

        lengths, train_length = EXTRAPOLATION_07["eval_lengths"], EXTRAPOLATION_07["length"]
        print(f"\n## Lesson 07: train at {train_length} characters, held-out loss at "
              f"{' / '.join(map(str, lengths))} (the same characters, cut into windows of each length)\n")  # fmt: skip
        print("| seed | none | sinusoidal | rope | alibi |")
        print("|---|---|---|---|---|")
        for r in later["extrapolation"]:
            cells = [
                " / ".join(f"{v:.3f}" for v in r["by_length"][p].values())
                for p in ("none", "sinusoidal", "rope", "alibi")
            ]
            print(f"| {r['seed']} | " + " | ".join(cells) + " |")
        longer = [n for n in lengths if n > train_length]
        print(f"\nRoPE past the trained length, held-out loss at {' / '.join(map(str, longer))}: as trained, with "
              "position interpolation, with the NTK-aware base (no fine-tuning); ALiBi: the loss of every prediction "
              f"from position {train_length - 1} of the {lengths[-1]}-character windows on, with the whole text "
              f"before it and with only the last {train_length} characters\n")  # fmt: skip
        print("| seed | rope | interpolation | NTK-aware | alibi: whole text | alibi: last 16 only |")
        print("|---|---|---|---|---|---|")
        for r in later["extrapolation"]:
            plain = " / ".join(f"{r['by_length']['rope'][str(n)]:.3f}" for n in longer)
            pi = " / ".join(f"{r['rope_extended'][str(n)]['interpolation']:.3f}" for n in longer)
            ntk = " / ".join(f"{r['rope_extended'][str(n)]['ntk']:.3f}" for n in longer)
            w = r["alibi_window"]
            print(f"| {r['seed']} | {plain} | {pi} | {ntk} | {w['full']:.3f} | {w['window']:.3f} |")
        rows = later["extrapolation"]
        first, last = str(lengths[0]), str(lengths[-1])
        print("\nOver the seeds (for the lesson's margins):\n")
        for p in ("sinusoidal", "rope", "alibi"):
            gap = _span(r["by_length"]["none"][first] - r["by_length"][p][first] for r in rows)
            print(f"- {p}: better than none at {first} by {gap}")
        for p in ("none", "sinusoidal", "rope", "alibi"):
            rise = _span(r["by_length"][p][last] - r["by_length"][p][first] for r in rows)
            print(f"- {p}: loss at {last} minus at {first}: {rise}")
        for n in map(str, longer):
            ntk = _span(r["by_length"]["rope"][n] - r["rope_extended"][n]["ntk"] for r in rows)
            pi = _span(r["by_length"]["rope"][n] - r["rope_extended"][n]["interpolation"] for r in rows)
            print(f"- RoPE at {n}: as trained minus NTK-aware {ntk}; as trained minus interpolation {pi}")
        top, mid = str(lengths[-1]), str(lengths[-2])
        w = {p: _span(r["windowed"][p] - r["by_length"][p][first] for r in rows) for p in r["windowed"]}
        print(f"- each query seeing only its last {train_length} keys at {top}, minus the loss at {first}: "
              + "; ".join(f"{p} {v}" for p, v in w.items()))  # fmt: skip
        by = [r["by_length"] for r in rows]
        win = [r["windowed"] for r in rows]
        none_back = _span((b["none"][top] - w["none"]) - (w["none"] - b["none"][first]) for b, w in zip(by, win))
        rope_back = _span(b["rope"][top] - w["rope"] for b, w in zip(by, win))
        print(f"- RoPE: whole window minus windowed at {top}: {rope_back}"
              f"; none: (whole minus windowed) minus (windowed minus at {first}): {none_back}")  # fmt: skip
        for n in map(str, longer):
            ntk_alibi = _span(r["rope_extended"][n]["ntk"] - r["by_length"]["alibi"][n] for r in rows)
            print(f"- NTK-aware minus ALiBi at {n}: {ntk_alibi}")
        second = str(lengths[1])
        print(f"- none minus sinusoidal at {second}: {_span(b['none'][second] - b['sinusoidal'][second] for b in by)}; "
              f"none minus rope at {mid}: {_span(b['none'][mid] - b['rope'][mid] for b in by)}; at {top}: "
              f"{_span(b['none'][top] - b['rope'][top] for b in by)}")  # fmt: skip
        print(f"- ALiBi: whole text minus last {train_length} only: "
              f"{_span(r['alibi_window']['full'] - r['alibi_window']['window'] for r in rows)}")  # fmt: skip
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
    controls = ("16 raw small init", "256 raw small init")
    if all(n in r["arms"] for r in rows for n in controls):
        print("\nThe control arm: raw scores, W_Q and W_K initialised smaller by d_k^(-1/4) (spread, at 50, at 150)\n")
        print("| seed | d_k 16 raw, small init | d_k 256 raw, small init |")
        print("|---|---|---|")
        for r in rows:
            cells = [
                f"{r['arms'][n]['spread']:.1f}, {r['arms'][n]['curve'][1]:.3f}, {r['arms'][n]['curve'][-1]:.3f}"
                for n in controls
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
    if all("256 raw small init" in r["arms"] for r in rows):
        for d in (16, 256):
            ranges[f"d_k {d}, small-init raw minus raw after 50 steps"] = [
                arm(r, f"{d} raw small init", 1) - arm(r, f"{d} raw", 1) for r in rows
            ]
            ranges[f"d_k {d}, divided minus small-init raw after 50 steps"] = [
                arm(r, f"{d} scaled", 1) - arm(r, f"{d} raw small init", 1) for r in rows
            ]
    print("\nRanges over the seeds, for the margins lesson 04 asserts:\n")
    for label, values in ranges.items():
        print(f"- {label}: {_span(values)}")


if __name__ == "__main__":
    main()
