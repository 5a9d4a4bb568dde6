"""The machine-speed reference: how long one training step of a small GRU encoder-decoder takes.

Lessons train small models whose speed is set by the CPU, so a notebook's run time means little
without knowing how fast the machine was. This step is the yardstick: the test command's notebook
benchmark measures it in the same run and scales every notebook's time to the slow reference
machine, where it takes ``SLOW_MACHINE_MS``.

The computation is frozen on purpose (the course's own models may change; this must not): the
fixed-context model of lesson 01 as it stood when the slow machine was measured, a GRU encoder
(embedding 32, hidden 64) and a GRUCell decoder fed the last encoder state at every step, batch 64,
20 source words, 21 decoder steps, cross-entropy, Adam, one torch thread. It is the "fixed
context, 1 thread, 1 process" row of benchmarks/threads.py.

    python benchmarks/reference_step.py      # prints the median ms of this machine
"""

from __future__ import annotations

import time

import torch
from torch import nn

# Issue 6: an Intel Xeon at 2.5 GHz with AVX-512, 2 cores, where lesson 01 took 113-115 s.
SLOW_MACHINE_MS = 45.0
VOCAB, EMB, HIDDEN, BATCH, SRC_LEN = 31, 32, 64, 64, 20


def step_ms(steps: int = 40, warmup: int = 5) -> float:
    """Median wall time of one training step, in ms (one torch thread; the caller's thread count is restored)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return _measure(steps, warmup)
    finally:
        torch.set_num_threads(threads)


def _measure(steps: int, warmup: int) -> float:
    src_embedding, tgt_embedding = nn.Embedding(VOCAB, EMB, padding_idx=0), nn.Embedding(VOCAB, EMB, padding_idx=0)
    encoder = nn.GRU(EMB, HIDDEN, batch_first=True)
    init_state, cell = nn.Linear(HIDDEN, HIDDEN), nn.GRUCell(EMB + HIDDEN, HIDDEN)
    readout = nn.Linear(HIDDEN + HIDDEN + EMB, VOCAB)
    modules = nn.ModuleList([src_embedding, tgt_embedding, encoder, init_state, cell, readout])
    optimizer = torch.optim.Adam(modules.parameters())
    times = []
    for i in range(warmup + steps):
        src = torch.randint(3, VOCAB, (BATCH, SRC_LEN))
        tgt_in = torch.randint(3, VOCAB, (BATCH, SRC_LEN + 1))
        tgt_out = torch.randint(3, VOCAB, (BATCH, SRC_LEN + 1))
        start = time.perf_counter()
        _, h_n = encoder(src_embedding(src))
        context = h_n[0]  # (batch, hidden): the fixed context vector
        state = torch.tanh(init_state(context))
        embedded = tgt_embedding(tgt_in)
        states = []
        for t in range(tgt_in.shape[1]):
            state = cell(torch.cat([embedded[:, t], context], dim=-1), state)
            states.append(state)
        steps_ = torch.stack(states, 1)
        logits = readout(torch.cat([steps_, context[:, None].expand(-1, steps_.shape[1], -1), embedded], dim=-1))
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[len(times) // 2]


if __name__ == "__main__":
    ms = step_ms()
    print(
        f"reference step: {ms:.1f} ms (slow reference machine: {SLOW_MACHINE_MS:.0f} ms; this machine is "
        f"{SLOW_MACHINE_MS / ms:.2f}x its speed)"
    )
