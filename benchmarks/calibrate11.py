"""Calibrate lesson 11's trained effect (induction heads) over several training seeds, so that the margins the lesson
asserts rest on more than one run (about half the smallest observed gap). Seeds go through ``ATTNEDU_SEED_OFFSET``
as in the test command's perturbed run: seed 1000 here is the perturbed run's model.

    python benchmarks/calibrate11.py [--seeds 0 1 2 3 4 1000 1001 1002] > benchmarks/calibration11.md
    ATEN_CPU_CAPABILITY=avx2 python benchmarks/calibrate11.py > benchmarks/calibration11_avx2.md   # other kernels

Each seed trains the lesson's 1-layer and 2-layer models with ``attnedu.heads.train_induction`` exactly as the
lesson does (one torch thread), and measures what the lesson asserts.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 1000, 1001, 1002])
    args = parser.parse_args()
    os.environ["ATTNEDU_PROGRESS"] = "0"
    from math import nan

    import torch

    from attnedu import setup_notebook
    from attnedu.heads import (
        EVAL_PERIOD,
        INDUCTION,
        held_out_repeats,
        held_out_varied,
        induction_ablation,
        induction_scores,
        train_induction,
    )

    setup_notebook(seed=0)
    held_out = held_out_repeats()
    varied, periods = held_out_varied()
    rows = []
    for seed in args.seeds:
        os.environ["ATTNEDU_SEED_OFFSET"] = str(seed)
        for layers in (1, 2):
            run = train_induction(layers, held_out, seed=0, scored=(varied, periods))
            prefix, previous = induction_scores(run.model, held_out)
            varied_prefix, _ = induction_scores(run.model, varied, periods)
            # the step at which the repeat's loss first falls below half of ln vocab: the phase change
            half = 0.5 * math.log(INDUCTION["vocab"])
            drop = next((s for s, v in zip(run.steps, run.second) if v < half), None)
            # the step at which the last layer's best prefix-matching score (varied periods) first reaches 0.4
            formed = next((s for s, p in zip(run.steps, run.prefix) if p[-1].max() >= 0.4), None)
            # as the lesson computes them: the steps at which 10 % and 90 % of the repeat loss's fall are done, and
            # the step at which the last layer's best prefix-matching score reaches half its final value
            top = [p[-1].max().item() for p in run.prefix]
            high, low = run.second[0], run.second[-1]
            start = next(s for s, v in zip(run.steps, run.second) if v <= high - 0.1 * (high - low))
            end = next(s for s, v in zip(run.steps, run.second) if v <= low + 0.1 * (high - low))
            half_head = next(s for s, v in zip(run.steps, top) if v >= top[-1] / 2)
            # ablations, as the lesson and exercise 5 compute them (2 layers only): the layer-0 heads that the lesson
            # calls previous-token heads (previous-token score >= 0.35 on the varied periods) removed; the other
            # layer-0 heads removed (the control; none in a run where every layer-0 head is a previous-token head);
            # both layer-1 heads removed; the layer-1 head with the highest prefix-matching score removed
            ablation = dict(n_previous=nan, cut_previous=nan, cut_control=nan, prefix_cut_previous=nan,
                            prefix_cut_control=nan, cut_layer1=nan, cut_one_layer1=[nan])  # fmt: skip
            if layers == 2:
                _, varied_previous = induction_scores(run.model, varied, periods)
                previous_heads = [h for h, v in enumerate(varied_previous[0].tolist()) if v >= 0.35]
                others = [h for h in range(varied_previous.shape[1]) if h not in previous_heads]
                ablation["n_previous"] = len(previous_heads)
                for name, chosen in (("previous", previous_heads), ("control", others)):
                    if chosen:
                        second, cut_prefix = induction_ablation(run.model, held_out, (varied, periods),
                                                                [(0, h) for h in chosen])  # fmt: skip
                        ablation[f"cut_{name}"], ablation[f"prefix_cut_{name}"] = second, cut_prefix[1].max().item()
                heads1 = range(varied_prefix.shape[1])
                ablation["cut_layer1"] = induction_ablation(run.model, held_out, (varied, periods),
                                                            [(1, h) for h in heads1])[0]  # fmt: skip
                ablation["cut_one_layer1"] = [induction_ablation(run.model, held_out, (varied, periods), [(1, h)])[0]
                                              for h in heads1]  # fmt: skip
            if layers == 2:  # the lesson's split of the repeat's loss: where the one-token rule is certain or not
                P = EVAL_PERIOD
                certain = torch.tensor([[len({row[s + 1] for s in range(t) if row[s] == row[t]}) == 1
                                         for t in range(P, 2 * P - 1)] for row in held_out.tolist()])  # fmt: skip
                with torch.no_grad():
                    logits = run.model(held_out)[0]
                per_position = torch.nn.functional.cross_entropy(logits[:, P:-1].transpose(1, 2), held_out[:, P + 1 :],
                                                                 reduction="none")  # fmt: skip
                ablation["unsure_minus_certain"] = (per_position[~certain].mean() - per_position[certain].mean()).item()
            rows.append(dict(seed=seed, layers=layers, **ablation, first=run.first[-1], second=run.second[-1],
                             prefix=prefix[-1].max().item(), previous=previous[0].max().item(),
                             prefix_below=prefix[:-1].max().item() if layers > 1 else float("nan"),
                             varied=varied_prefix[-1].max().item(),
                             varied_below=varied_prefix[:-1].max().item() if layers > 1 else float("nan"),
                             drop=drop, formed=formed, start=start, end=end, half_head=half_head,
                             seconds=run.seconds))  # fmt: skip
            print(f"seed {seed} layers {layers}: {rows[-1]}", file=sys.stderr)
    print("# Calibration of lesson 11 (induction heads)\n")
    print(f"Measured {datetime.date.today().isoformat()} by `benchmarks/calibrate11.py` (one process, 1 torch thread). "
          f"Machine: {platform.machine()}, {os.cpu_count()} cores, torch's CPU kernels for "
          f"{torch.backends.cpu.get_cpu_capability()}; torch {torch.__version__}; Python {platform.python_version()}. "
          f"Recipe: `attnedu.heads.INDUCTION` = {INDUCTION}; held-out: 256 sequences of a 16-token block "
        "repeated once. "
          "Seed = `ATTNEDU_SEED_OFFSET`; 1000.. are what the perturbed run gives. Losses in nats on the held-out "
          "sequences at the end of training; prefix = the highest prefix-matching score in the last layer; "
          "previous = the highest previous-token score in layer 0; prefix below = the highest prefix-matching score "
          "in layer 0 of the 2-layer model; formed = the first measured step at which the last layer's best varied "
          "prefix-matching score is >= 0.4; varied = the same prefix-matching scores (last layer; layer 0 of the "
          "2-layer model) on 256 held-out sequences each with its own period (`held_out_varied`, 4..16, each row "
          "scored at its own period), where a head attending a fixed distance back cannot score; "
          "drop = the first measured step with the repeat's loss < ln(32)/2; fall 10 % .. 90 % = the steps at which "
          "10 % and 90 % of the repeat loss's fall (from step 0 to the end) are done; head at half = the first step "
          "at which the last layer's best varied prefix-matching score reaches half its final value (the lesson "
          "asserts that it lies in the fall; the line after the ranges counts the seeds where it does). Ablations "
          "(2 layers; `attnedu.heads.induction_ablation`, heads set to 0 before W_O): n previous = how many layer-0 "
          "heads have a previous-token score >= 0.35 (varied periods; the lesson's threshold); cut previous / cut "
          "control = the repeat's loss with those heads removed / with the other layer-0 heads removed (nan where "
          "there are none), and prefix cut previous / prefix cut control = the best layer-1 prefix-matching "
          "score (varied periods) then; cut layer1 = the repeat's loss with both layer-1 heads removed, cut one layer1 "
          "= with one layer-1 head removed, each head in turn (exercise 5).\n"
    )  # fmt: skip
    print(
        "| seed | layers | first block | repeat | prefix (last layer) | previous (layer 0) | prefix (layer 0) "
        "| varied (last layer) | varied (layer 0) | drop at step | head formed at step | fall 10 % .. 90 % "
        "| head at half | n previous | cut previous | cut control | prefix cut previous | prefix cut control "
        "| cut layer1 | cut one layer1 | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['seed']} | {r['layers']} | {r['first']:.3f} | {r['second']:.3f} | {r['prefix']:.3f} | "
            f"{r['previous']:.3f} | {r['prefix_below']:.3f} | {r['varied']:.3f} | {r['varied_below']:.3f} | "
            f"{r['drop']} | {r['formed']} | {r['start']} .. {r['end']} | {r['half_head']} | {r['n_previous']:.0f} | "
            f"{r['cut_previous']:.3f} | "
            f"{r['cut_control']:.3f} | {r['prefix_cut_previous']:.3f} | {r['prefix_cut_control']:.3f} | "
            f"{r['cut_layer1']:.3f} | {', '.join(f'{v:.3f}' for v in r['cut_one_layer1'])} | {r['seconds']:.1f} |"
        )
    print("\n## Ranges over the seeds, for the margins the lesson asserts\n")
    for layers in (1, 2):
        mine = [r for r in rows if r["layers"] == layers]
        for key in ("second", "prefix", "previous", "prefix_below", "varied", "varied_below"):
            values = [r[key] for r in mine]
            print(f"- {layers} layer(s), {key}: {min(values):.3f} .. {max(values):.3f}")
    two = [r for r in rows if r["layers"] == 2]
    for key in ("n_previous", "cut_previous", "cut_control", "prefix_cut_previous", "prefix_cut_control",
                "cut_layer1", "cut_one_layer1"):  # fmt: skip
        values = [v for r in two for v in (r[key] if isinstance(r[key], list) else [r[key]]) if not math.isnan(v)]
        print(f"- 2 layer(s), {key}: {min(values):.3f} .. {max(values):.3f} ({len(values)} runs)")
    values = [r["unsure_minus_certain"] for r in two]
    print(f"- 2 layer(s), the repeat's loss where the one-token rule is unsure minus where it is certain: "
          f"{min(values):.3f} .. {max(values):.3f} ({len(values)} runs)")
    for key, base in (("cut_previous", "second"), ("cut_control", "second")):  # the change from the intact model
        values = [r[key] - r[base] for r in two if not math.isnan(r[key])]
        print(f"- 2 layer(s), rise_{key[4:]}: {min(values):.3f} .. {max(values):.3f} ({len(values)} runs)")
    inside = [r for r in rows if r["start"] <= r["half_head"] <= r["end"]]
    print(f"- head at half within the fall: {sum(r['layers'] == 2 for r in inside)} of "
          f"{sum(r['layers'] == 2 for r in rows)} two-layer runs")
    for key in ("drop", "formed"):
        values = [r[key] for r in rows if r["layers"] == 2]
        if None not in values:
            print(f"- 2 layer(s), {key}: {min(values)} .. {max(values)}")


if __name__ == "__main__":
    main()
