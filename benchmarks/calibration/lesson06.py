"""Lesson 06's calibration: ``attnedu.transformer.train_leak`` with ``LEAK_06``, as the lesson calls it: a character
model trained with and without the causal mask.

    python benchmarks/calibrate.py --lesson 06 --seeds 0 1 2 1000 1001 1002
"""

from __future__ import annotations

from .common import measured, printed

LESSONS = ("06",)
EXPERIMENTS = ("leak",)
SEEDS = (0, 1, 2, 1000, 1001)


def run(experiment: str, seed: int) -> dict:
    """Lesson 06's experiment at seed offset ``seed`` (``ATTNEDU_SEED_OFFSET``, which the driver set): the training
    loss over the last 50 steps of the masked and the unmasked model, their held-out loss with the causal mask, and
    the final masked model's loss on 1024 windows of each split."""
    if experiment != "leak":
        raise ValueError(f"lesson 06's experiment is 'leak', got {experiment!r}")
    import torch

    from attnedu.tasks import CharCorpus
    from attnedu.transformer import LEAK_06, train_leak

    torch.set_num_threads(1)
    loss = torch.nn.functional.cross_entropy
    corpus = CharCorpus.load()
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
    return {"model": experiment, "seed": seed, "train_loss": train_loss, "honest": honest, "final": final}


def report(results: list[dict], info) -> str:
    """Lesson 06's table."""
    return printed(_report, results, info)


def _report(leak: list[dict], info) -> None:
    print("\n## Lesson 06: the leak (training loss over the last 50 steps; held-out loss with the causal mask)\n")
    print(measured(info))
    print("final: the final masked model on 1024 windows of 32 of each split\n")
    print("| seed | masked: train | unmasked: train | masked: honest | unmasked: honest | final: train "
          "| final: valid |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in leak:
        t, h, f = r["train_loss"], r["honest"], r.get("final", {})
        print(f"| {r['seed']} | {t['masked']:.3f} | {t['unmasked']:.3f} | {h['masked']:.3f} | {h['unmasked']:.3f} "
              f"| {f.get('train', float('nan')):.3f} | {f.get('valid', float('nan')):.3f} |")  # fmt: skip
