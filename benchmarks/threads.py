"""Measure training-step time with 1 and 2 torch threads, alone and with two processes
sharing the machine (as under `pytest -n 2` or `grade --jobs 2`). Writes a Markdown table.

    python benchmarks/threads.py > benchmarks/threads.md
"""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
import sys
import time

import torch

STEPS, WARMUP = 40, 5


def step_ms(attention: bool, threads: int) -> float:
    from attnedu.data import SOURCE_VOCAB, TARGET_VOCAB, BatchSampler, make_pairs
    from attnedu.models import Seq2Seq
    from attnedu.train import sequence_loss

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), attention=attention, bidirectional=False)
    sampler = BatchSampler(make_pairs(640, 20, 20, seed=0), batch_size=64)  # length-20 batches
    optimizer = torch.optim.Adam(model.parameters())
    times = []
    for i in range(WARMUP + STEPS):
        batch = sampler.next()
        start = time.perf_counter()
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
        loss = sequence_loss(logits, batch.tgt_out)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[len(times) // 2]  # median


def measure(attention: bool, threads: int, processes: int) -> float:
    """Median ms/step of one process while ``processes`` identical ones run at once."""
    code = f"import sys;sys.path.insert(0, 'benchmarks'); import threads as b; print(b.step_ms({attention}, {threads}))"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(processes)
    ]
    return max(float(p.communicate()[0]) for p in procs)


if __name__ == "__main__":
    rows = []
    for attention in (False, True):
        for threads, processes in ((1, 1), (2, 1), (1, 2), (2, 2)):
            rows.append((attention, threads, processes, measure(attention, threads, processes)))
    print("# Torch threads for the course's small models\n")
    print(
        f"Measured {datetime.date.today()}. Machine: {platform.machine()}, "
        f"{platform.processor() or 'cpu'}, {torch.get_num_threads()} cores visible; "
        f"torch {torch.__version__}; Python {platform.python_version()}."
    )
    print(
        f"Training step (Adam, forward + backward), GRU encoder-decoder, emb 32, hidden 64, batch 64, "
        f"source length 20; median of {STEPS} steps after {WARMUP} warm-up steps, in ms.\n"
    )
    print("| model | threads per process | processes at once | ms/step (slowest process) |")
    print("|---|---|---|---|")
    for attention, threads, processes, ms in rows:
        print(f"| {'attention' if attention else 'fixed context'} | {threads} | {processes} | {ms:.1f} |")
    ms = {(a, t, p): m for a, t, p, m in rows}
    alone = [ms[(a, 1, 1)] / ms[(a, 2, 1)] for a in (False, True)]
    shared = [ms[(a, 2, 2)] / ms[(a, 1, 2)] for a in (False, True)]
    print(
        f"\nAlone, 2 threads run {alone[0]:.1f}x (fixed) and {alone[1]:.1f}x (attention) as fast as 1 thread. "
        f"With two processes at once, as under `make test` (pytest -n 2) or `grade --jobs 2`, 2 threads each "
        f"are {shared[0]:.1f}x and {shared[1]:.1f}x slower than 1 thread each. So `setup_notebook` uses 1 thread."
    )
    print(
        json.dumps([dict(attention=a, threads=t, processes=p, ms=round(m, 2)) for a, t, p, m in rows]), file=sys.stderr
    )
