"""Lesson 09's calibration: the gradients at initialisation (``attnedu.init_gradients.init_gradient_experiment``, every
arm of the lesson's experiment), the language model against the bigram baseline (``attnedu.train.train_lm``), the same
without the learning-rate warm-up, and, not in the lesson, the gradients of stacks of Xiong et al.'s width. The lesson
reads its margins from ``benchmarks/calibration09.json`` (``RECORD``), which ``--json`` writes: run it once per set of
CPU kernels (as is, with ``ATEN_CPU_CAPABILITY=avx2``, and with ``MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default``);
the margins come from every run it holds (``margins``, by ``MARGIN_RULES``).

    python benchmarks/calibrate.py --lesson 09 --json benchmarks/calibration09.json
"""

from __future__ import annotations

import math

from .common import kernels as _kernels
from .common import printed

LESSONS = ("09",)
# the gradients at initialisation; the language model against the bigram; the same without warm-up; and, not in the
# lesson, the gradients of stacks of Xiong et al.'s width
EXPERIMENTS = ("norms09", "lm09", "lm09_nowarmup", "width09")
SEEDS = (0, 1, 2, 1000, 1001)
RECORD = "calibration09.json"

# Lesson 09, as the lesson runs it: its sizes, recipe and held-out windows. The gradient experiment itself is the
# package's (attnedu.init_gradients.init_gradient_experiment), so the lesson and this calibration run the same code.
CONTEXT_09, STEPS_09, BATCH_09, LR_09 = 64, 144, 8, 6e-3
CUTS_09 = (1, 2, 4, 64)  # characters the model may read, scored on every eighth of the lesson's held-out windows
TEMPERATURES_09 = (0.1, 1.0, 1.5)
WIDTH_09 = {"d_model": 512, "num_heads": 4, "d_ff": 1024}  # Xiong et al.'s translation model's sizes (their A.1)
# the recipe the record states, which the lesson checks against its own
RECIPE = {"steps": STEPS_09, "batch": BATCH_09, "context": CONTEXT_09, "lr": LR_09}


def run(experiment: str, seed: int) -> dict:
    """One of lesson 09's experiments at seed offset ``seed`` (``ATTNEDU_SEED_OFFSET``, which the driver set)."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"lesson 09's experiments are {EXPERIMENTS}, got {experiment!r}")
    return {"model": experiment, "seed": seed, **_lesson09(experiment)}


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


MARGIN_RULES = MARGIN_RULES_09
margins = lesson09_margins


def stale(runs: list[dict], results: list[dict]) -> list[str]:
    """The kernel sets of the record's ``runs`` whose gradients at initialisation measured other things than
    ``results``' (the margins need every run's measurements)."""
    fresh = {key for r in results if r["model"] == "norms09" for key in r["gradients"]["pytorch"]["pre 2"]}
    return [run["kernels"] for run in runs for r in run["results"]
            if fresh and r["model"] == "norms09" and set(r["gradients"]["pytorch"]["pre 2"]) != fresh]  # fmt: skip


def report(results: list[dict], info) -> str:
    """Lesson 09's tables."""
    return printed(_report, results, info)


def _report(results: list[dict], info) -> None:
    print("## Lesson 09: the Transformer block\n")
    kernels = _kernels()
    print(f"Measured {info.date} by `{info.command}` "
          f"({info.jobs} processes at once, 1 torch thread each); torch's CPU kernels: {kernels}. A seed here is "
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
