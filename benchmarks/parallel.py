"""Train lesson 03's five models (four Luong scores and Bahdanau, 300 steps each) one after another,
then with ``attnedu.runtime.in_parallel`` (one thread per core), and check that both ways give every
model the same losses bit for bit. Writes a Markdown report.

    python benchmarks/parallel.py > benchmarks/parallel.md

Why threads: each training step spends most of its time inside PyTorch's C++ operations (and the
autograd engine), which release Python's interpreter lock, so two Python threads keep two cores busy.
With one torch thread each, every operation of a model runs on its own thread, so the numbers cannot
depend on what the other thread does.
"""

from __future__ import annotations

import datetime
import os
import platform
import time

import torch

os.environ.setdefault("ATTNEDU_PROGRESS", "0")

import attnedu  # noqa: E402
from attnedu.data import SOURCE_VOCAB, TARGET_VOCAB, ToyTranslation  # noqa: E402
from attnedu.models import Seq2Seq  # noqa: E402
from attnedu.runtime import available_cores, in_parallel  # noqa: E402
from attnedu.train import STEPS, train  # noqa: E402

KINDS = {"Bahdanau": "bahdanau", "concat": "concat", "general": "general", "dot": "dot", "location": "location"}


def build() -> dict[str, Seq2Seq]:
    return {
        name: Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), attention=kind, bidirectional=False, seed=0,
                            attn_dim=32 if kind == "concat" else 64)  # fmt: skip
        for name, kind in KINDS.items()
    }


def main() -> None:
    attnedu.setup_notebook(seed=0)
    data = ToyTranslation.generate(seed=0)
    rows = []
    for label, workers in (("one after another", 1), (f"in_parallel, {available_cores()} threads", None)):
        models = build()
        start = time.perf_counter()
        logs = in_parallel(lambda model: train(model, data.train, steps=STEPS, seed=0), list(models.values()), workers)
        rows.append((label, time.perf_counter() - start, [log.losses for log in logs], logs))
    same = rows[0][2] == rows[1][2]
    print("# Training several models at once: `attnedu.runtime.in_parallel`\n")
    print(
        f"Measured {datetime.date.today()} by `benchmarks/parallel.py`. Machine: {platform.machine()}, "
        f"{available_cores()} cores available; torch {torch.__version__}; Python {platform.python_version()}; "
        "one torch thread. Lesson 03's five models (four Luong scores and Bahdanau's), "
        f"{STEPS} training steps each, batch 64.\n"
    )
    print("| how | wall time (s) | " + " | ".join(f"{name} ms/step" for name in KINDS) + " |")
    print("|---|---|" + "---|" * len(KINDS))
    for label, seconds, _, logs in rows:
        print(f"| {label} | {seconds:.1f} | " + " | ".join(f"{log.ms_per_step:.1f}" for log in logs) + " |")
    print(
        f"\nSpeed-up: {rows[0][1] / rows[1][1]:.2f}x. Every model's {STEPS} training losses are "
        f"{'identical, bit for bit,' if same else 'NOT identical'} in the two runs. The per-step times in the "
        "parallel run include sharing the machine with the other thread. The wall time of the parallel run "
        "is bounded below by the slowest model (Bahdanau's, which steps through the target one word at a "
        "time) and by the total divided by the cores."
    )
    if not same:
        raise SystemExit("in_parallel changed a model's losses")


if __name__ == "__main__":
    main()
