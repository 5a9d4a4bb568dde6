"""Measure what a model does: attention maps, alignment against the gold alignment, and the
gradient that reaches each source word."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .data import Pair, make_batch
from .models import Seq2Seq


def attention_maps(model: Seq2Seq, pairs: Sequence[Pair]) -> list[torch.Tensor]:
    """Attention while the model reads the gold translation (teacher forcing).

    One (target_len, source_len) matrix per pair: row i holds the weights used to produce
    target word i (the row for ``<eos>`` is dropped), columns are the real source words.
    """
    if model.decoder.attention is None:
        raise ValueError("this model has no attention (it was built with attention=False)")
    batch = make_batch(pairs)
    model.eval()
    with torch.no_grad():
        _, weights = model(batch.src, batch.src_lengths, batch.tgt_in)
    return [weights[b, : len(p.target), : len(p.source)] for b, p in enumerate(pairs)]


def alignment_accuracy(maps: Sequence[torch.Tensor], pairs: Sequence[Pair]) -> float:
    """Fraction of target words whose most-attended source word is the gold one."""
    _check_maps(maps, pairs)
    hits = total = 0
    for weights, pair in zip(maps, pairs):
        hits += int((weights.argmax(dim=1) == torch.tensor(pair.alignment)).sum())
        total += len(pair.target)
    return hits / total


def crossing_pairs(alignment: Sequence[int]) -> list[tuple[int, int]]:
    """Target positions (i, k), i < k, whose source words come in the opposite order (a swap)."""
    return [(i, k) for i in range(len(alignment)) for k in range(i + 1, len(alignment)) if alignment[i] > alignment[k]]


def crossing_rate(maps: Sequence[torch.Tensor], pairs: Sequence[Pair]) -> tuple[float, int]:
    """Of the gold crossings (reordered word pairs), the fraction the model's argmax alignment
    also crosses. A purely diagonal (monotone) attention scores 0. Returns (rate, count)."""
    _check_maps(maps, pairs)
    crossed = total = 0
    for weights, pair in zip(maps, pairs):
        predicted = weights.argmax(dim=1).tolist()
        for i, k in crossing_pairs(pair.alignment):
            total += 1
            crossed += predicted[i] > predicted[k]
    if total == 0:
        raise ValueError("these pairs contain no reordering, so there is no crossing to measure")
    return crossed / total, total


def _check_maps(maps: Sequence[torch.Tensor], pairs: Sequence[Pair]) -> None:
    if len(maps) != len(pairs):
        raise ValueError(f"got {len(maps)} attention maps for {len(pairs)} pairs; need one per pair")
    for n, (weights, pair) in enumerate(zip(maps, pairs)):
        expected = (len(pair.target), len(pair.source))
        if tuple(weights.shape) != expected:
            raise ValueError(
                f"map {n} has shape {tuple(weights.shape)}, expected (target_len, source_len) = {expected}"
            )


def source_gradient_norms(model: Seq2Seq, pair: Pair, target_step: int) -> torch.Tensor:
    """||d loss_t / d E x_j|| for every source position j: how much the loss of target word
    ``target_step`` can reach back to each source word's embedding. Returns (source_len,)."""
    if not 0 <= target_step < len(pair.target):
        raise ValueError(f"target_step must be in 0..{len(pair.target) - 1} for this pair, got {target_step}")
    captured: list[torch.Tensor] = []

    def keep(_module, _inputs, output):
        output.retain_grad()
        captured.append(output)

    handle = model.encoder.embedding.register_forward_hook(keep)
    try:
        batch = make_batch([pair])
        model.zero_grad()
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
        loss = torch.nn.functional.cross_entropy(logits[0, target_step], batch.tgt_out[0, target_step])
        loss.backward()
    finally:
        handle.remove()
    return captured[0].grad[0].norm(dim=-1).detach()
