"""Lesson 11's calibration: induction heads. Each seed trains the lesson's 1-layer and 2-layer models with
``attnedu.induction.train_induction`` exactly as the lesson does (the recipe ``INDUCTION``) and measures what the
lesson asserts. One table per set of CPU kernels (``attnedu.induction.CALIBRATION_FILES``; the lesson reads all
three and asserts against their union):

    python benchmarks/calibrate.py --lesson 11 --json benchmarks/calibration11.json > benchmarks/calibration11.md
    ATEN_CPU_CAPABILITY=avx2 python benchmarks/calibrate.py --lesson 11 > benchmarks/calibration11_avx2.md
    MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default python benchmarks/calibrate.py --lesson 11 \
        > benchmarks/calibration11_compatible.md

``--json`` also writes every run's curves (losses and head scores every 25 steps), from which the phase-change
columns are computed (``write_record``: the record's own format; the lesson reads the tables).
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys

from .common import printed

LESSONS = ("11",)
EXPERIMENTS = ("induction",)  # one seed: the 1-layer and the 2-layer model (the 2-layer rows use the 1-layer model's)
SEEDS = (0, 1, 2, 3, 4, 1000, 1001, 1002)

# the phase change: the fractions of each curve's change whose first crossing is recorded
FRACTIONS = (0.1, 0.25, 0.5, 0.75, 0.9)
# the induction head's weight on the keys after earlier copies, by distance back (lo, hi), as lesson 11 bins it
BINS = ((1, 4), (5, 8), (9, 16), (17, 31))


def run(experiment: str, seed: int) -> dict:
    """Lesson 11's two models at seed offset ``seed`` (``ATTNEDU_SEED_OFFSET``, which the driver set): a row of
    measurements and the curves of each."""
    if experiment != "induction":
        raise ValueError(f"lesson 11's experiment is 'induction', got {experiment!r}")
    from math import nan

    import torch

    from attnedu import setup_notebook
    from attnedu.head_scores import induction_targets, target_weight_by_distance
    from attnedu.induction import (
        EVAL_PERIOD,
        INDUCTION,
        ablated_forward,
        crossing_steps,
        held_out_repeats,
        held_out_varied,
        induction_ablation,
        induction_rule_losses,
        induction_scores,
        rate_while,
        train_induction,
    )

    setup_notebook(seed=0)
    held_out = held_out_repeats()
    varied, periods = held_out_varied()
    targets = induction_targets(varied)
    position = torch.arange(varied.shape[1])[None, :]
    copies = position // periods[:, None]  # (n, length): how many earlier blocks hold a copy of the query's token
    latest = (position - periods[:, None] + 1).clamp(min=0)  # the key after the copy one block back
    oldest = (position % periods[:, None] + 1).clamp(max=varied.shape[1] - 1)  # after the copy in the first block
    rows, curves = [], []
    for layers in (1, 2):
        run = train_induction(layers, held_out, seed=0, scored=varied)
        fixed_prefix, _ = induction_scores(run.model, held_out)
        prefix, previous = induction_scores(run.model, varied)
        row = dict(seed=seed, layers=layers, first=run.first[-1], second=run.second[-1],
                   prefix=prefix[-1].max().item(), prefix_fixed=fixed_prefix[-1].max().item(),
                   previous=previous[0].max().item(),
                   prefix_below=prefix[0].max().item() if layers > 1 else nan, seconds=run.seconds)  # fmt: skip
        # the phase change: the first steps at which the repeat's loss, the saving (the one-layer model's repeat
        # loss minus this one's, same seed, measured at the same steps: what the second layer buys) and the last
        # layer's best prefix-matching score have made 10 % .. 90 % of their change
        top = [p[-1].max().item() for p in run.prefix]
        previous_curve = [p[0].max().item() for p in run.previous]
        if layers == 1:
            one_layer, one_top = run.second, top
        series = {"loss": run.second, "head": top}
        if layers == 2:
            series["saving"] = saving = [o - t for o, t in zip(one_layer, run.second)]
            series["previous"] = previous_curve
        for name, values in series.items():
            for f, step in zip(FRACTIONS, crossing_steps(run.steps, values, FRACTIONS)):
                row[f"{name}_{round(100 * f)}"] = step
        if layers == 2:
            # the phase-change test: how fast the saving rises (its fraction per 100 steps) while each curve makes
            # the middle half (25 % .. 75 %) of its change: the induction head, and curves that share no
            # mechanism with it (the one-layer model's best prefix-matching score and repeat loss, this model's
            # layer-0 previous-token score), and this model's first-block loss for scale
            for name, values in (("head", top), ("prefix_one", one_top), ("repeat_one", one_layer),
                                 ("previous", previous_curve), ("first", run.first)):  # fmt: skip
                row[f"rate_{name}"] = rate_while(run.steps, saving, values)
        curves.append(dict(seed=seed, layers=layers, steps=run.steps, first=run.first, second=run.second,
                           head=top, previous=[p[0].max().item() for p in run.previous]))  # fmt: skip
        ablation = dict(n_previous=nan, cut_previous=nan, cut_control=nan, prefix_cut_previous=nan,
                        prefix_cut_control=nan, cut_layer1=nan, cut_one_layer1=[nan], unsure_minus_certain=nan,
                        unsure_loss_share=nan, excess_certain_share=nan,
                        one_copy=nan, two_copies=nan, three_plus=nan, latest_two=nan, latest_three_plus=nan,
                        oldest_two=nan, oldest_three_plus=nan, **{f"distance_{lo}_{hi}": nan for lo, hi in BINS},
                        **{f"{kind}_cut_{name}": nan for kind in ("mean", "keys", "queries", "values")
                           for name in ("previous", "control")},
                        **{f"prefix_{kind}_cut_{name}": nan for kind in ("mean", "keys", "queries", "values")
                           for name in ("previous", "control")},
                        mean_cut_layer1=nan, seen_without_layer1=nan, seen_share=nan)  # fmt: skip
        if layers == 2:
            # ablations, as the lesson and exercise 5 compute them: the layer-0 heads the lesson calls
            # previous-token heads (previous-token score >= 0.35 on the varied periods) removed; the other
            # layer-0 heads removed (the control; none in a run where every layer-0 head is a previous-token
            # head); both layer-1 heads removed; each layer-1 head removed alone
            previous_heads = [h for h, v in enumerate(previous[0].tolist()) if v >= 0.35]
            others = [h for h in range(previous.shape[1]) if h not in previous_heads]
            ablation["n_previous"] = len(previous_heads)
            for name, chosen in (("previous", previous_heads), ("control", others)):
                if chosen:
                    removed = [(0, h) for h in chosen]
                    second, cut_prefix = induction_ablation(run.model, held_out, varied, removed)
                    ablation[f"cut_{name}"], ablation[f"prefix_cut_{name}"] = second, cut_prefix[1].max().item()
                    # the same heads replaced by their mean output (per position, over the varied sequences), and
                    # removed from the keys, the queries or the values of layer 1 only (K-composition)
                    for kind, options in (("mean", dict(mean=True)), ("keys", dict(paths=("keys",))),
                                          ("queries", dict(paths=("queries",))),
                                          ("values", dict(paths=("values",)))):  # fmt: skip
                        second, cut_prefix = induction_ablation(run.model, held_out, varied, removed, **options)
                        ablation[f"{kind}_cut_{name}"] = second
                        ablation[f"prefix_{kind}_cut_{name}"] = cut_prefix[1].max().item()
            heads1 = range(prefix.shape[1])
            ablation["cut_layer1"] = induction_ablation(run.model, held_out, varied, [(1, h) for h in heads1])[0]
            ablation["mean_cut_layer1"] = induction_ablation(run.model, held_out, varied,
                                                             [(1, h) for h in heads1], mean=True)[0]  # fmt: skip
            # without layer 1: the probability on tokens already in the context, at the repeat's predictions,
            # and those tokens' share of the vocabulary (what an even spread would put on them)
            seen = torch.nn.functional.one_hot(held_out, INDUCTION["vocab"]).cumsum(1) > 0
            logits, _ = ablated_forward(run.model, held_out, [(1, h) for h in heads1])
            P = EVAL_PERIOD
            ablation["seen_without_layer1"] = (logits.softmax(-1) * seen).sum(-1)[:, P:-1].mean().item()
            ablation["seen_share"] = seen[:, P:-1].float().mean().item()
            ablation["cut_one_layer1"] = [induction_ablation(run.model, held_out, varied, [(1, h)])[0]
                                          for h in heads1]  # fmt: skip
            # the repeat's loss where the one-token rule is certain or unsure (the lesson's split)
            P = EVAL_PERIOD
            certain = induction_rule_losses(held_out, P) == 0  # (n, P - 1): the one-token rule is certain
            with torch.no_grad():
                logits = run.model(held_out)[0]
                weights = run.model(varied)[1][1]  # layer 1
            per_position = torch.nn.functional.cross_entropy(logits[:, P:-1].transpose(1, 2), held_out[:, P + 1 :],
                                                             reduction="none")  # fmt: skip
            ablation["unsure_minus_certain"] = (per_position[~certain].mean() - per_position[certain].mean()).item()
            # the share of the model's loss on the repeat that sits where the rule is unsure, and the share of its
            # excess over the rule's loss that sits where the rule is certain (the rule's loss is 0 there)
            rule = induction_rule_losses(held_out, P).float()
            ablation["unsure_loss_share"] = (per_position[~certain].sum() / per_position.sum()).item()
            ablation["excess_certain_share"] = (per_position[certain].sum() / (per_position.sum() - rule.sum())).item()
            # the induction head (best in layer 1) at the queries of the repeats, by how many earlier blocks hold
            # a copy of the query's token: its weight on the keys after every earlier copy, and the share of that
            # weight on the key after the copy one block back (the most recent block's)
            head = int(prefix[1].argmax())
            w = weights[:, head]  # (n, length, length)
            on_all = (w * targets).sum(-1)
            on_latest = w.gather(-1, latest[..., None])[..., 0]
            on_oldest = w.gather(-1, oldest[..., None])[..., 0]
            for key, chosen in (("one_copy", copies == 1), ("two_copies", copies == 2),
                                ("three_plus", copies >= 3)):  # fmt: skip
                ablation[key] = on_all[chosen].mean().item()
            ablation["latest_two"] = (on_latest[copies == 2] / on_all[copies == 2]).mean().item()
            ablation["latest_three_plus"] = (on_latest[copies >= 3] / on_all[copies >= 3]).mean().item()
            ablation["oldest_two"] = (on_oldest[copies == 2] / on_all[copies == 2]).mean().item()
            ablation["oldest_three_plus"] = (on_oldest[copies >= 3] / on_all[copies >= 3]).mean().item()
            # the mean weight on a key after an earlier copy, by its distance back, at the queries that have two
            # or more such keys (a choice between copies)
            by_distance = target_weight_by_distance(weights, varied, BINS)[head]
            for (lo, hi), value in zip(BINS, by_distance.tolist()):
                ablation[f"distance_{lo}_{hi}"] = value
        row.update(ablation)
        rows.append(row)
        print(f"seed {seed} layers {layers}: {row}", file=sys.stderr)
    return {"model": experiment, "seed": seed, "rows": rows, "curves": curves}


def _machine() -> str:
    import torch

    return (f"{platform.machine()}, {os.cpu_count()} cores, torch's CPU kernels for "
               f"{torch.backends.cpu.get_cpu_capability()}" + (f", MKL_CBWR={os.environ['MKL_CBWR']}"
                                                                if os.environ.get("MKL_CBWR") else ""))  # fmt: skip


def report(results: list[dict], info) -> str:
    """Lesson 11's table and the ranges over the seeds of the margins it asserts."""
    return printed(_report, results, info)


def _report(results: list[dict], info) -> None:
    from math import nan

    import torch

    from attnedu.head_scores import best_positional_score
    from attnedu.induction import INDUCTION, held_out_repeats, held_out_varied

    rows = [row for r in results for row in r["rows"]]
    held_out = held_out_repeats()
    varied, _ = held_out_varied()
    machine = _machine()
    print("# Calibration of lesson 11 (induction heads)\n")
    print(f"Measured {info.date} by `{info.command}` ({info.jobs} processes at once, 1 torch thread each). "
          f"Machine: {machine}; torch {torch.__version__}; Python {platform.python_version()}. "
          f"Recipe: `attnedu.induction.INDUCTION` = {INDUCTION}. Held-out: `held_out_repeats()`, 256 "
          "sequences of a "
          "16-token block repeated once (the losses; 'fixed'), and `held_out_varied()`, 256 sequences each with its "
          "own block length, 4..16, repeated to 32 tokens (the head scores, unless 'fixed'). "
          "Seed = `ATTNEDU_SEED_OFFSET`; 1000.. are what the perturbed run gives. Losses in nats at the end of "
          "training. Scores (`attnedu.induction.induction_scores`): prefix = the highest prefix-matching score "
          "(`prefix_matching`: the weight on the keys after every earlier copy of the query's token) in the last "
          "layer; prefix fixed = the same on the fixed blocks; prefix below = the highest in layer 0 of the 2-layer "
          "model; previous = the highest previous-token score in layer 0. "
          "The phase change (`attnedu.induction.crossing_steps`, measured every 25 steps): loss 10/50/90 = "
          "the first "
          "steps at which the repeat's loss has made 10 %, 50 %, 90 % of its fall from step 0 to the end (its 10 % "
          "falls in an early drop that the one-layer model makes too); saving = the same for the one-layer model's "
          "repeat loss minus the two-layer model's (same seed, same steps: what the second layer buys); head = the "
          "same for the last layer's best prefix-matching score (its rise); previous = the same for the layer-0 "
          "previous-token score; rate X (`attnedu.induction.rate_while`) = the fraction of the saving's "
          "whole rise that it "
          "makes, per 100 steps, while curve X makes the middle half (25 % .. 75 %) of its change: X = head, the "
          "one-layer model's best prefix-matching score (prefix one) and repeat loss (repeat one), the two-layer "
          "model's layer-0 previous-token score (previous) and first-block loss (first); rate gap = rate head minus "
          "the largest of rate prefix one, repeat one and previous (the curves that share no mechanism with the head). "
          "Ablations (2 layers; `induction_ablation`, heads set to 0 before W_O): n previous = how many layer-0 heads "
          "have a previous-token score >= 0.35 (the lesson's threshold); cut previous / cut control = the repeat's "
          "loss with those heads removed / with the other layer-0 heads removed (nan where there are none); prefix cut "
          "previous / control = the best layer-1 prefix-matching score then; cut layer1 = the repeat's loss with both "
          "layer-1 heads removed, cut one layer1 = with one removed, each in turn (exercise 5); mean cut X = the "
          "heads replaced by their mean output at each position over the varied sequences instead (mean ablation); "
          "keys / queries / values cut X = the heads removed from layer 1's keys, queries or values only, the "
          "readout and the other two still reading them (`ablated_forward`'s paths: K-composition); prefix ... = the "
          "best layer-1 prefix-matching score then; seen without layer1 = the probability the model puts on tokens "
          "already in the context at the repeat's predictions with both layer-1 heads removed, seen share = those "
          "tokens' share of the vocabulary; unsure loss share = the part of the repeat's loss at the positions where "
          "the one-token induction rule is unsure, excess certain share = the part of the model's loss above the "
          "rule's that sits where the rule is certain. "
          "By copies (2 layers, the best layer-1 head, varied blocks): its weight on the keys after every earlier "
          "copy, at the queries of the repeats whose token has a copy in 1, 2, 3 or more earlier blocks; latest share "
          "= the part of that weight on the key after the copy one block back, A[i, i - p + 1] (what a score of the "
          "most recent copy alone counts); oldest share = the part on the key after the copy in the first block; "
          "distance lo..hi (`target_weight_by_distance`) = the mean weight on a key after an earlier copy lying lo "
          "to hi positions back, at the queries with two or more such keys.\n"
    )  # fmt: skip
    print(f"Data only (no training): the best prefix-matching score a head that looks by position alone could reach "
          f"(`best_positional_score`): {best_positional_score(varied):.3f} on the varied blocks, "
          f"{best_positional_score(held_out):.3f} on the fixed blocks.\n")  # fmt: skip
    columns = [("seed", "seed", "{}"), ("layers", "layers", "{}"), ("first", "first block", "{:.3f}"),
               ("second", "repeat", "{:.3f}"), ("prefix", "prefix", "{:.3f}"),
               ("prefix_fixed", "prefix fixed", "{:.3f}"),
               ("prefix_below", "prefix below", "{:.3f}"), ("previous", "previous", "{:.3f}"),
               ("loss_10", "loss 10", "{}"), ("loss_50", "loss 50", "{}"), ("loss_90", "loss 90", "{}"),
               ("saving_10", "saving 10", "{}"), ("saving_50", "saving 50", "{}"), ("saving_90", "saving 90", "{}"),
               ("head_10", "head 10", "{}"), ("head_50", "head 50", "{}"), ("head_90", "head 90", "{}"),
               ("previous_10", "previous 10", "{}"), ("previous_50", "previous 50", "{}"),
               ("previous_90", "previous 90", "{}"), ("rate_head", "rate head", "{:.2f}"),
               ("rate_prefix_one", "rate prefix one", "{:.2f}"), ("rate_repeat_one", "rate repeat one", "{:.2f}"),
               ("rate_previous", "rate previous", "{:.2f}"), ("rate_first", "rate first", "{:.2f}"),
               ("n_previous", "n previous", "{:.0f}"), ("cut_previous", "cut previous", "{:.3f}"),
               ("cut_control", "cut control", "{:.3f}"), ("prefix_cut_previous", "prefix cut previous", "{:.3f}"),
               ("prefix_cut_control", "prefix cut control", "{:.3f}"), ("cut_layer1", "cut layer1", "{:.3f}"),
               ("cut_one_layer1", "cut one layer1", None), ("one_copy", "1 copy", "{:.3f}"),
               ("two_copies", "2 copies", "{:.3f}"), ("three_plus", "3+ copies", "{:.3f}"),
               ("latest_two", "latest share, 2", "{:.3f}"), ("latest_three_plus", "latest share, 3+", "{:.3f}"),
               ("oldest_two", "oldest share, 2", "{:.3f}"), ("oldest_three_plus", "oldest share, 3+", "{:.3f}"),
               *((f"distance_{lo}_{hi}", f"distance {lo}..{hi}", "{:.3f}") for lo, hi in BINS),
               *((f"{kind}_cut_{name}", f"{kind} cut {name}", "{:.3f}") for name in ("previous", "control")
                 for kind in ("mean", "keys", "queries", "values")),
               *((f"prefix_{kind}_cut_{name}", f"prefix {kind} cut {name}", "{:.3f}")
                 for name in ("previous", "control") for kind in ("mean", "keys", "queries", "values")),
               ("mean_cut_layer1", "mean cut layer1", "{:.3f}"),
               ("seen_without_layer1", "seen without layer1", "{:.3f}"),
               ("seen_share", "seen share", "{:.3f}"),
               ("seconds", "seconds", "{:.1f}")]  # fmt: skip
    print("| " + " | ".join(title for _, title, _ in columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        cells = [
            ", ".join(f"{v:.3f}" for v in r[key]) if form is None else form.format(r.get(key, nan))
            for key, _, form in columns
        ]
        print("| " + " | ".join(cells) + " |")
    print("\n## Ranges over the seeds, for the margins the lesson asserts\n")
    for layers in (1, 2):
        mine = [r for r in rows if r["layers"] == layers]
        for key in ("second", "prefix", "prefix_fixed", "previous") + (("prefix_below",) if layers == 2 else ()):
            values = [r[key] for r in mine]
            print(f"- {layers} layer(s), {key}: {min(values):.3f} .. {max(values):.3f}")
    two = [r for r in rows if r["layers"] == 2]
    for key in ("first_minus_second", "one_minus_two"):
        values = ([r["first"] - r["second"] for r in two] if key == "first_minus_second" else
                  [o["second"] - t["second"] for o, t in zip([r for r in rows if r["layers"] == 1], two)])  # fmt: skip
        print(f"- 2 layer(s), {key}: {min(values):.3f} .. {max(values):.3f} ({len(values)} runs)")
    for key in ("n_previous", "cut_previous", "cut_control", "prefix_cut_previous", "prefix_cut_control",
                "cut_layer1", "cut_one_layer1", "unsure_minus_certain", "unsure_loss_share",
                "excess_certain_share", "one_copy", "two_copies", "three_plus",
                "latest_two", "latest_three_plus", "oldest_two", "oldest_three_plus",
                *(f"distance_{lo}_{hi}" for lo, hi in BINS),
                *(f"{prefix}{kind}_cut_{name}" for prefix in ("", "prefix_") for name in ("previous", "control")
                  for kind in ("mean", "keys", "queries", "values")),
                "mean_cut_layer1", "seen_without_layer1", "seen_share",
                "rate_head", "rate_prefix_one", "rate_repeat_one", "rate_previous", "rate_first"):  # fmt: skip
        values = [v for r in two for v in (r[key] if isinstance(r[key], list) else [r[key]]) if not math.isnan(v)]
        print(f"- 2 layer(s), {key}: {min(values):.3f} .. {max(values):.3f} ({len(values)} runs)")
    for key, base in (("cut_previous", "second"), ("cut_control", "second")):  # the change from the intact model
        values = [r[key] - r[base] for r in two if not math.isnan(r[key])]
        print(f"- 2 layer(s), rise_{key[4:]}: {min(values):.3f} .. {max(values):.3f} ({len(values)} runs)")
    # the phase change, in steps: each event's 10 % .. 90 % window and midpoint, and how they lie to each other
    for key in ("loss_10", "loss_50", "loss_90", "saving_10", "saving_50", "saving_90", "head_10", "head_50",
                "head_90", "previous_10", "previous_50", "previous_90"):  # fmt: skip
        values = [r[key] for r in two]
        print(f"- 2 layer(s), {key}: {min(values)} .. {max(values)} ({len(values)} runs)")
    one = [r for r in rows if r["layers"] == 1]
    derived = {
        "saving_50_minus_head_50": [r["saving_50"] - r["head_50"] for r in two],
        "previous_50_minus_head_90": [r["previous_50"] - r["head_90"] for r in two],
        "head_window": [r["head_90"] - r["head_10"] for r in two],
        "saving_window": [r["saving_90"] - r["saving_10"] for r in two],
    }
    for key, values in derived.items():
        print(f"- 2 layer(s), {key}: {min(values)} .. {max(values)} ({len(values)} runs)")
    # within-run comparisons: the phase-change test; the induction head's preferred distances; exercise 5's answers
    # against the loss of a uniform guess (ln vocab) and the one-layer model's
    ln_vocab = math.log(INDUCTION["vocab"])
    others = [f"distance_{lo}_{hi}" for lo, hi in BINS if (lo, hi) != (9, 16)]
    within = {
        "rate_gap": [r["rate_head"] - max(r["rate_prefix_one"], r["rate_repeat_one"], r["rate_previous"]) for r in two],
        "distance_peak_margin": [r["distance_9_16"] - max(r[k] for k in others) for r in two],
        "layer1_minus_uniform": [r["cut_layer1"] - ln_vocab for r in two],
        "layer1_minus_one_layer": [t["cut_layer1"] - o["second"] for o, t in zip(one, two)],
        "one_layer1_mean": [sum(r["cut_one_layer1"]) / len(r["cut_one_layer1"]) for r in two],
        "one_layer_minus_one_layer1_mean": [
            o["second"] - sum(t["cut_one_layer1"]) / len(t["cut_one_layer1"]) for o, t in zip(one, two)
        ],  # fmt: skip
        "first_minus_layer1": [r["first"] - r["cut_layer1"] for r in two],
    }
    for key, values in within.items():
        print(f"- 2 layer(s), {key}: {min(values):.3f} .. {max(values):.3f} ({len(values)} runs)")


def write_record(results: list[dict], info, path: str) -> str:
    """Every run's row and curves (the phase-change columns are computed from the curves)."""
    import torch

    rows = [row for r in results for row in r["rows"]]
    curves = [curve for r in results for curve in r["curves"]]
    with open(path, "w") as file:
        json.dump(dict(machine=_machine(), torch=torch.__version__, date=info.date,
                       fractions=FRACTIONS, rows=rows, curves=curves), file, indent=1)  # fmt: skip
    return ""
