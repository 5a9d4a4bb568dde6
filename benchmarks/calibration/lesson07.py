"""Lesson 07's calibration: ``attnedu.transformer.train_previous_token`` with ``PREVIOUS_07`` (naming the previous
token, with and without positions) and ``train_extrapolation`` with ``EXTRAPOLATION_07`` (train short, test long),
as the lesson calls them. The lesson trains seeds 0, 1, 2: run 1002 as well.

    python benchmarks/calibrate.py --lesson 07 --seeds 0 1 2 1000 1001 1002
"""

from __future__ import annotations

from .common import measured, printed
from .common import span as _span

LESSONS = ("07",)
EXPERIMENTS = ("positions", "extrapolation")
SEEDS = (0, 1, 2, 1000, 1001, 1002)


def run(experiment: str, seed: int) -> dict:
    """One of lesson 07's experiments at seed offset ``seed`` (``ATTNEDU_SEED_OFFSET``, which the driver set)."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"lesson 07's experiments are {EXPERIMENTS}, got {experiment!r}")
    import torch

    from attnedu.tasks import CharCorpus
    from attnedu.transformer import PREVIOUS_07, neighbour_held_out, train_previous_token

    torch.set_num_threads(1)
    if experiment == "positions":
        held_out = neighbour_held_out(PREVIOUS_07)
        accuracy = {p: train_previous_token(p, held_out, PREVIOUS_07) for p in ("none", "learned")}
        return {"model": experiment, "seed": seed, "accuracy": accuracy}
    return {"model": experiment, "seed": seed, **_extrapolation(CharCorpus.load())}


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


def report(results: list[dict], info) -> str:
    """Lesson 07's tables and the ranges over the seeds of the margins it asserts."""
    return printed(_report, results, info)


def _report(results: list[dict], info) -> None:
    later = {m: [r for r in results if r["model"] == m] for m in EXPERIMENTS}
    if later["positions"]:
        print("\n## Lesson 07: naming the previous token, bidirectional encoder, 300 steps\n")
        print(measured(info))
        print("| seed | no positions | learned positions |")
        print("|---|---|---|")
        for r in later["positions"]:
            print(f"| {r['seed']} | {r['accuracy']['none']:.3f} | {r['accuracy']['learned']:.3f} |")
    if later["extrapolation"]:
        from attnedu.transformer import EXTRAPOLATION_07

        lengths, train_length = EXTRAPOLATION_07["eval_lengths"], EXTRAPOLATION_07["length"]
        print(f"\n## Lesson 07: train at {train_length} characters, held-out loss at "
              f"{' / '.join(map(str, lengths))} (the same characters, cut into windows of each length)\n")  # fmt: skip
        if not later["positions"]:
            print(measured(info))
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
