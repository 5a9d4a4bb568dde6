"""Training with teacher forcing, greedy decoding, and accuracy by source length."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from .data import PAD_ID, TARGET_VOCAB, BatchSampler, Pair, make_batch
from .models import Seq2Seq
from .runtime import progress, training_seed

# The training recipe of the translation models of lessons 01-03, calibrated over training seeds
# in benchmarks/calibration.md: every model gets the same budget, so comparisons are fair.
STEPS = 300
BATCH_SIZE = 64
LR = 1e-2


@dataclass
class TrainLog:
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the training steps (batches, forward, backward, update)

    @property
    def ms_per_step(self) -> float:
        return 1000 * self.seconds / max(len(self.losses), 1)

    @property
    def final_loss(self) -> float:
        """Mean loss over the last 50 steps (less noisy than the last step alone)."""
        tail = self.losses[-50:]
        return sum(tail) / len(tail)


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per target word, ignoring padding. logits (batch, len, vocab), targets (batch, len)."""
    return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD_ID)


def train(
    model: Seq2Seq,
    pairs: Sequence[Pair],
    steps: int = STEPS,
    batch_size: int = BATCH_SIZE,
    lr: float = LR,
    clip: float = 5.0,
    seed: int = 0,
    desc: str = "training",
    cosine: bool = True,
) -> TrainLog:
    """Adam with gradient clipping on random batches of ``pairs``; shows a progress bar.

    With ``cosine`` the learning rate decays from ``lr`` to 0 along a half cosine, which lets a
    short run settle instead of ending mid-bounce. ``seed`` fixes the order of the batches
    (through ``attnedu.runtime.training_seed``, so the test command's perturbed run moves it).
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    sampler = BatchSampler(pairs, batch_size, seed=training_seed(seed))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps) if cosine else None
    log = TrainLog()
    model.train()
    bar = progress(steps, desc)
    start = time.perf_counter()
    for step in range(steps):
        batch = sampler.next()
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
        loss = sequence_loss(logits, batch.tgt_out)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if schedule is not None:
            schedule.step()
        log.losses.append(loss.item())
        bar.update()
        if step % 25 == 0:
            bar.set_postfix(loss=f"{log.losses[-1]:.3f}")
    log.seconds = time.perf_counter() - start
    bar.close()
    model.eval()
    return log


@dataclass
class Translations:
    """Greedy translations of a list of pairs."""

    pairs: list[Pair]
    predictions: list[list[str]]

    @property
    def exact_match(self) -> float:
        """Fraction of sentences translated exactly (every word, nothing extra)."""
        hits = sum(list(p.target) == pred for p, pred in zip(self.pairs, self.predictions))
        return hits / len(self.pairs)


def translate_pairs(model: Seq2Seq, pairs: Sequence[Pair], batch_size: int = 500) -> Translations:
    """Greedy-decode every pair's source (at most target length + 5 steps)."""
    model.eval()
    predictions: list[list[str]] = []
    for start in range(0, len(pairs), batch_size):
        batch = make_batch(pairs[start : start + batch_size])
        tokens, _ = model.greedy_decode(batch.src, batch.src_lengths, max_len=batch.tgt_out.shape[1] + 5)
        predictions += [TARGET_VOCAB.decode(row.tolist()) for row in tokens]
    return Translations(list(pairs), predictions)


def accuracy_by_length(model: Seq2Seq, test: Mapping[tuple[int, int], Sequence[Pair]]) -> dict[tuple[int, int], float]:
    """Exact-match accuracy per source-length bucket."""
    return {bucket: translate_pairs(model, pairs).exact_match for bucket, pairs in test.items()}


def accuracy_table(curves: Mapping[str, Mapping[tuple[int, int], float]]) -> str:
    """Text table: one row per model, one column per length bucket."""
    buckets = list(next(iter(curves.values())))
    width = max(len(label) for label in curves) + 2
    lines = ["".ljust(width) + "".join(f"{lo}-{hi}".rjust(8) for lo, hi in buckets)]
    for label, by_bucket in curves.items():
        lines.append(label.ljust(width) + "".join(f"{by_bucket[b]:8.3f}" for b in buckets))
    return "\n".join(lines)
