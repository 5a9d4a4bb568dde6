"""Lesson 13's calibration (13a, sinks and gates): the controlled setting (``attnedu.sinks_gates.train_marker``: a
head that has nothing to read for half its queries, whose answer there is the current token, a BOS token it could
park on), the lesson's three models side by side (plain, a sink logit per head, a headwise output gate, at equal
parameters) and two it does not train (``MORE_VARIANTS``: the sink fixed at 0, Miller's off by one; an elementwise
gate, Qwen3-Next's), and lesson 10's character language model (``attnedu.train.train_lm``, lesson 10's recipe)
measured for a sink. For every marker model: where the idle weight goes, the learned sink logits, and the accuracy
at the idle and busy queries with BOS's value vector zeroed in the last layer (the control that parking on BOS reads
nothing). The lesson reads the record
``benchmarks/calibration13.json`` (``RECORD``: every set of kernels' runs, ``common.write_record``).

    python benchmarks/calibrate.py --lesson 13 --json benchmarks/calibration13.json > benchmarks/calibration13.md
    MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default python benchmarks/calibrate.py --lesson 13 \\
        --json benchmarks/calibration13.json >> benchmarks/calibration13.md
"""

from __future__ import annotations

from .common import measured, printed
from .common import span as _span

LESSONS = ("13",)
EXPERIMENTS = ("marker13", "lm13")
SEEDS = (0, 1, 2, 3, 4, 1000, 1001, 1002, 1003, 1004)
RECORD = "calibration13.json"

# lesson 10's language model, as lesson 13a trains it
CONTEXT_13, STEPS_13, BATCH_13, LR_13 = 64, 150, 8, 6e-3
TEST_SEED_13, TEST_COUNT_13 = 13, 512  # the held-out marker sequences (the same for every seed)
IDLE_TARGET = "the current token"  # marker_task's target at the idle queries (it was a constant token NONE before)


def _recipe() -> dict:
    from attnedu.sinks_gates import MARKER

    return {"marker": dict(MARKER), "idle_target": IDLE_TARGET,
            "lm": {"steps": STEPS_13, "batch": BATCH_13, "context": CONTEXT_13, "lr": LR_13},
            "test": {"seed": TEST_SEED_13, "count": TEST_COUNT_13}}  # fmt: skip


def __getattr__(name):  # RECIPE, read from the package (the recipe the lesson trains with)
    if name == "RECIPE":
        return _recipe()
    raise AttributeError(name)


def run(experiment: str, seed: int) -> dict:
    """One experiment of lesson 13a at seed offset ``seed`` (``ATTNEDU_SEED_OFFSET``, which the driver set)."""
    if experiment == "marker13":
        return {"model": experiment, "seed": seed, **_marker()}
    if experiment == "lm13":
        return {"model": experiment, "seed": seed, **_lm()}
    raise ValueError(f"lesson 13's experiments are {EXPERIMENTS}, got {experiment!r}")


def _stream(hidden) -> dict:
    from attnedu.sinks_gates import is_massive, largest_activations

    stats = largest_activations(hidden[1:])  # the blocks' outputs
    return {"top": stats.top[:, 0].max().item(), "ratio": stats.ratio.max().item(),
            "massive": bool(is_massive(stats).any())}  # fmt: skip


def _marker() -> dict:
    import torch

    from attnedu.models import count_parameters
    from attnedu.sinks_gates import (
        MARKER,
        MORE_VARIANTS,
        VARIANTS,
        marker_reading,
        marker_task,
        residual_stream,
        train_marker,
    )

    torch.set_num_threads(1)
    test = marker_task(TEST_COUNT_13, MARKER["length"], MARKER["vocab"], torch.Generator().manual_seed(TEST_SEED_13))
    out = {}
    for variant in VARIANTS + MORE_VARIANTS:
        model, log = train_marker(variant, seed=0)
        r = marker_reading(model, test)
        hidden, _ = residual_stream(model, test.tokens)
        last = len(model.blocks) - 1
        readers = r.on_marker[last] >= 0.5  # the last layer's heads that read the marker
        out[variant] = {
            "parameters": count_parameters(model),
            "seconds": log.seconds,
            "loss": r.loss,
            "idle_first_last": r.idle_first[last].max().item(),  # the strongest first-token parking, last layer
            "idle_first_any": r.idle_first.max().item(),
            "idle_sink_last": r.idle_sink[last].max().item(),
            "readers": int(readers.sum()),
            # the last layer's reading heads (weight >= 0.5 on the marker when present), at the idle queries
            "readers_bos": r.idle_first[last][readers].mean().item(),
            "readers_sink": r.idle_sink[last][readers].mean().item(),
            "reader_on_marker": r.on_marker[r.reader].item(),
            "gate_idle": r.gate_idle[last][readers].mean().item() if "gate" in variant else None,
            "gate_busy": r.gate_busy[last][readers].mean().item() if "gate" in variant else None,
            # the largest |s_h| over every layer's heads: did training move the sink logits from 0?
            "sink_moved": r.sink_logits.abs().max().item() if "sink" in variant else None,
            "accuracy": r.accuracy,
            "heads": {name: getattr(r, name).tolist() for name in ("on_marker", "idle_first", "idle_sink")},
            "sink_logits": r.sink_logits.tolist() if "sink" in variant else None,
            **_stream(hidden),
        }
    return out


def _lm() -> dict:
    import torch

    from attnedu.blocks import DecoderLM
    from attnedu.sinks_gates import first_token_mass, residual_stream
    from attnedu.tasks import CharCorpus
    from attnedu.train import lm_loss, train_lm

    torch.set_num_threads(1)
    corpus = CharCorpus.load()
    valid_inputs, valid_targets = (t[::4] for t in corpus.windows(CONTEXT_13, split="valid"))
    lm = DecoderLM(len(corpus.chars), d_model=64, num_heads=4, num_layers=4, seed=0)
    log = train_lm(lm, corpus, STEPS_13, BATCH_13, CONTEXT_13, LR_13, warmup=STEPS_13 // 10, seed=0)
    hidden, maps = residual_stream(lm, valid_inputs[:32])
    mass = first_token_mass(maps)
    return {"loss": lm_loss(lm, valid_inputs, valid_targets), "seconds": log.seconds,
            "first_max": mass.max().item(), "first_mean": mass.mean().item(), **_stream(hidden)}  # fmt: skip


def report(results: list[dict], info) -> str:
    """Lesson 13a's tables and the ranges over the seeds of the margins it asserts."""
    return printed(_report, results, info)


def _report(results: list[dict], info) -> None:
    from attnedu.sinks_gates import MARKER

    print("## Lesson 13a: sinks and gates\n")
    print(measured(info))
    print(f"The controlled setting (`attnedu.sinks_gates.train_marker`, recipe `MARKER` = {MARKER}), measured on "
          f"{TEST_COUNT_13} held-out sequences (`marker_task`, generator seed {TEST_SEED_13}; the target at an idle "
          f"query is {IDLE_TARGET}). Idle = the queries "
          "with nothing to read (before the marker, or no marker), query 0 left out. BOS last / any = the largest "
          "mean weight a head of the last layer / of any layer puts on the first token (BOS) at the idle queries; "
          "sink last = the largest mass the sink logit takes there, last layer; readers = heads of the last layer "
          "with weight >= 0.5 on the marker when present; readers: BOS / sink = their mean weight on BOS and mean "
        "share to the sink at the idle queries; gate idle / busy = their mean gate; |s| = the largest |sink logit| "
          "(started at 0; fixed at 0 in off_by_one); acc idle / busy = accuracy (argmax) at the idle / busy queries; "
          "BOS v = 0: the same with BOS's value vector zeroed in every head of the last layer; top / ratio = the "
          "largest |h| in the blocks' outputs and its ratio to the median (Sun et al.: massive if > 100 and ~1000x)."
          "\n")  # fmt: skip
    print("| seed | model | parameters | loss | BOS last | BOS any | sink last | readers | readers: BOS / sink | "
          "gate idle / busy | abs s | acc idle / busy | BOS v = 0: idle / busy | top | ratio | massive | "
          "seconds |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    marker = [r for r in results if r["model"] == "marker13"]
    for r in marker:
        for variant, m in ((k, v) for k, v in r.items() if isinstance(v, dict)):
            gate = "" if m["gate_idle"] is None else f"{m['gate_idle']:.2f} / {m['gate_busy']:.2f}"
            moved = "" if m["sink_moved"] is None else f"{m['sink_moved']:.2f}"
            a = m["accuracy"]
            print(f"| {r['seed']} | {variant} | {m['parameters']} | {m['loss']:.4f} | {m['idle_first_last']:.2f} | "
                  f"{m['idle_first_any']:.2f} | {m['idle_sink_last']:.2f} | {m['readers']} | "
                  f"{m['readers_bos']:.2f} / {m['readers_sink']:.2f} | {gate} | {moved} | "
                  f"{a['idle']:.3f} / {a['busy']:.3f} | "
                  f"{a['idle, BOS value zeroed']:.3f} / {a['busy, BOS value zeroed']:.3f} | "
                  f"{m['top']:.1f} | {m['ratio']:.1f} | {m['massive']} | {m['seconds']:.1f} |")  # fmt: skip
    lm = [r for r in results if r["model"] == "lm13"]
    if lm:
        print(f"\nLesson 10's language model ({STEPS_13} steps, batch {BATCH_13}, context {CONTEXT_13}, lr {LR_13}): "
              "held-out loss (every fourth window), the largest and the mean over heads of the mean weight on "
              "character 0 (queries 1..63, 32 held-out windows; an even spread gives about 0.059), the largest "
              "|h| and its ratio to the median.\n")  # fmt: skip
        print("| seed | loss | first max | first mean | top | ratio | massive | seconds |")
        print("|---|---|---|---|---|---|---|---|")
        for r in lm:
            print(f"| {r['seed']} | {r['loss']:.3f} | {r['first_max']:.3f} | {r['first_mean']:.3f} | {r['top']:.1f} "
                  f"| {r['ratio']:.1f} | {r['massive']} | {r['seconds']:.1f} |")  # fmt: skip
    print(
        "\nRanges over the seeds (observations of these trainings, not bounds), for the margins the lesson asserts:\n"
    )
    if marker:
        variants = [k for k, v in marker[0].items() if isinstance(v, dict)]
        for variant in variants:
            acc = [r[variant]["accuracy"] for r in marker]
            print(f"- {variant}, idle accuracy: {_span(a['idle'] for a in acc)}, with BOS's value zeroed: "
                  f"{_span(a['idle, BOS value zeroed'] for a in acc)}; drop: "
                  f"{_span(a['idle'] - a['idle, BOS value zeroed'] for a in acc)}; busy accuracy: "
                  f"{_span(a['busy'] for a in acc)}, with BOS's value zeroed: "
                  f"{_span(a['busy, BOS value zeroed'] for a in acc)}")  # fmt: skip

        def drop(m):
            return m["accuracy"]["idle"] - m["accuracy"]["idle, BOS value zeroed"]

        print(f"- plain minus sink, idle accuracy drop with BOS's value zeroed: "
              f"{_span(drop(r['plain']) - drop(r['sink']) for r in marker)}")  # fmt: skip
        print(f"- sink, largest |sink logit|: {_span(r['sink']['sink_moved'] for r in marker)}")
        if "off_by_one" in variants:
            print(f"- off_by_one, sink last: {_span(r['off_by_one']['idle_sink_last'] for r in marker)}; BOS last: "
                  f"{_span(r['off_by_one']['idle_first_last'] for r in marker)}")  # fmt: skip
        if "gate_elementwise" in variants:
            print(f"- gate_elementwise, BOS last: {_span(r['gate_elementwise']['idle_first_last'] for r in marker)}; "
                  "idle minus busy gate: "
                  f"{_span(r['gate_elementwise']['gate_idle'] - r['gate_elementwise']['gate_busy'] for r in marker)}"
                  )  # fmt: skip
        print(f"- plain, BOS last: {_span(r['plain']['idle_first_last'] for r in marker)}")
        print(f"- sink, BOS last: {_span(r['sink']['idle_first_last'] for r in marker)}")
        print(f"- gate, BOS last: {_span(r['gate']['idle_first_last'] for r in marker)}")
        print(f"- plain minus sink, BOS last: "
              f"{_span(r['plain']['idle_first_last'] - r['sink']['idle_first_last'] for r in marker)}")  # fmt: skip
        print(f"- sink, sink last: {_span(r['sink']['idle_sink_last'] for r in marker)}")
        for variant in ("plain", "sink", "gate"):
            print(f"- {variant}, readers' BOS: {_span(r[variant]['readers_bos'] for r in marker)}; readers' sink: "
                  f"{_span(r[variant]['readers_sink'] for r in marker)}")  # fmt: skip
        print(f"- plain minus sink, readers' BOS: "
              f"{_span(r['plain']['readers_bos'] - r['sink']['readers_bos'] for r in marker)}")  # fmt: skip
        print(f"- gate, idle minus busy gate: {_span(r['gate']['gate_idle'] - r['gate']['gate_busy'] for r in marker)}")
        for variant in ("plain", "sink", "gate"):
            print(
                f"- {variant}, loss: {_span(r[variant]['loss'] for r in marker)}; ratio: "
                f"{_span(r[variant]['ratio'] for r in marker)}; top: {_span(r[variant]['top'] for r in marker)}"
            )
    if lm:
        print(f"- language model, first max: {_span(r['first_max'] for r in lm)}; loss: "
              f"{_span(r['loss'] for r in lm)}; ratio: {_span(r['ratio'] for r in lm)}; top: "
              f"{_span(r['top'] for r in lm)}")  # fmt: skip
