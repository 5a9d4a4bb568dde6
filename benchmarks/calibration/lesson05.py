"""Lesson 05's calibration: ``attnedu.transformer.train_neighbours`` with ``NEIGHBOURS_05``, as the lesson calls
it: 1, 2 and 4 heads on the neighbour task.

    python benchmarks/calibrate.py --lesson 05
"""

from __future__ import annotations

from .common import measured, printed

LESSONS = ("05",)
EXPERIMENTS = ("heads",)  # 1, 2 and 4 heads on the neighbour task
SEEDS = (0, 1, 2, 1000, 1001)


def run(experiment: str, seed: int) -> dict:
    """Lesson 05's experiment at seed offset ``seed`` (``ATTNEDU_SEED_OFFSET``, which the driver set)."""
    if experiment != "heads":
        raise ValueError(f"lesson 05's experiment is 'heads', got {experiment!r}")
    return {"model": experiment, "seed": seed, **_heads(seed)}


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


def report(results: list[dict], info) -> str:
    """Lesson 05's tables."""
    return printed(_report, results, info)


def _report(heads: list[dict], info) -> None:
    print("\n## Lesson 05: heads on the neighbour task (test accuracy after 500 steps)\n")
    print(measured(info))
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
