"""Measure what a model does: how accurate each word is, attention maps, alignment against the gold
alignment (overall and by word class), and the gradient that reaches each source word."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from ._validate import check_finite, check_float, check_instance, check_int, check_items, describe
from .data import ADJECTIVES, CONJUNCTIONS, DETERMINERS, NOUNS, Pair, make_batch
from .models import Seq2Seq
from .train import check_buckets


def word_correct(model: Seq2Seq, pairs: Sequence[Pair]) -> list[torch.Tensor]:
    """Teacher forcing: for each pair, whether the model's most likely next word is right at each step.

    One bool tensor per pair, of length ``len(target) + 1`` (every target word, then ``<eos>``): step i
    is predicted from the *gold* words before it, so one mistake does not cause the next. Greedy
    decoding reproduces a sentence exactly if and only if every entry is True, so the exact-match
    accuracy of ``attnedu.train.translate_pairs`` is the fraction of all-True rows.
    """
    _check_model(model)
    pairs = check_items("pairs", pairs, Pair, "Pairs (from make_pairs)")
    batch = make_batch(pairs)
    model.eval()
    with torch.no_grad():
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
    correct = logits.argmax(dim=-1) == batch.tgt_out
    return [correct[b, : len(p.target) + 1] for b, p in enumerate(pairs)]


@dataclass(frozen=True)
class WordAccuracy:
    """Per-word and exact-match accuracy of one group of sentences, under teacher forcing."""

    per_word: float  # fraction of all predicted words (and <eos>) that are right
    exact: float  # fraction of sentences with every word right
    mean_steps: float  # average number of predictions per sentence (target length + 1)


def word_accuracy_by_length(
    model: Seq2Seq, test: Mapping[tuple[int, int], Sequence[Pair]]
) -> dict[tuple[int, int], WordAccuracy]:
    """Per-word and exact-match accuracy in each source-length bucket (teacher forcing, see word_correct)."""
    check_buckets("test", test)
    result = {}
    for bucket, pairs in test.items():
        if not pairs:
            raise ValueError(f"bucket {bucket} has no sentences")
        rows = word_correct(model, pairs)
        words = torch.cat(rows)
        result[bucket] = WordAccuracy(
            per_word=words.float().mean().item(),
            exact=sum(bool(r.all()) for r in rows) / len(rows),
            mean_steps=len(words) / len(rows),
        )
    return result


def attention_maps(model: Seq2Seq, pairs: Sequence[Pair]) -> list[torch.Tensor]:
    """Attention while the model reads the gold translation (teacher forcing).

    One (target_len, source_len) matrix per pair: row i holds the weights used to produce
    target word i (the row for ``<eos>`` is dropped), columns are the real source words.
    """
    pairs = _check_attention_maps(model, pairs)
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
    alignment = _check_alignment(alignment)
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


WORD_CLASSES = {
    "determiner": set(DETERMINERS),
    "noun": set(NOUNS),
    "adjective": set(ADJECTIVES),
    "conjunction": set(CONJUNCTIONS),
}


@dataclass(frozen=True)
class ClassAlignment:
    """How the argmax attention of one word class (by its source word) compares with the gold alignment."""

    words: int  # target words of this class
    hits: int  # whose most-attended source word is the gold one
    offsets: Counter  # for the misses: most-attended position minus gold position, e.g. {+1: 40, -1: 3}

    @property
    def accuracy(self) -> float:
        return self.hits / self.words if self.words else float("nan")


def alignment_by_word_class(maps: Sequence[torch.Tensor], pairs: Sequence[Pair]) -> dict[str, ClassAlignment]:
    """Alignment accuracy per word class (determiner, noun, adjective, conjunction), and where the misses land."""
    _check_maps(maps, pairs)
    words, hits, offsets = Counter(), Counter(), {name: Counter() for name in WORD_CLASSES}
    for weights, pair in zip(maps, pairs):
        predicted = weights.argmax(dim=1).tolist()
        for guess, gold in zip(predicted, pair.alignment):
            kind = next(name for name, members in WORD_CLASSES.items() if pair.source[gold] in members)
            words[kind] += 1
            if guess == gold:
                hits[kind] += 1
            else:
                offsets[kind][guess - gold] += 1
    return {name: ClassAlignment(words[name], hits[name], offsets[name]) for name in WORD_CLASSES}


def source_gradient_norms(model: Seq2Seq, pair: Pair, target_step: int) -> torch.Tensor:
    """||d loss_t / d E x_j|| for every source position j: how much the loss of target word
    ``target_step`` can reach back to each source word's embedding. Returns (source_len,)."""
    target_step = _check_source_gradient_norms(model, pair, target_step)
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


def gold_gradient_shares(model: Seq2Seq, pairs: Sequence[Pair], relative_to: str = "total") -> torch.Tensor:
    """For every target word t of every pair, the gold source word's share of the gradient that reaches the
    source: ||d loss_t / d E x_gold|| / sum_j ||d loss_t / d E x_j|| over the pair's real source words.
    With ``relative_to="largest"``, the gold word's gradient relative to the largest one instead,
    ||d loss_t / d E x_gold|| / max_j ||d loss_t / d E x_j|| (lesson 01's measure): 1 where the gold word gets the
    largest gradient.

    One share per target word (its gold alignment), all pairs' words in order: a 1-D tensor. 1 / (source length)
    is what a gradient spread evenly over the source would give. The pairs are run as one padded batch; their
    sentences do not interact, so the gradient of the summed losses of step t is each sentence's own.
    """
    pairs = _check_gold_gradient_shares(model, pairs, relative_to)
    captured: list[torch.Tensor] = []
    handle = model.encoder.embedding.register_forward_hook(lambda _m, _i, output: captured.append(output))
    try:
        batch = make_batch(pairs)
        model.eval()
        with torch.enable_grad():
            logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
            losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.tgt_out, reduction="none")
            shares: list[list[float]] = [[] for _ in pairs]
            for t in range(max(len(p.target) for p in pairs)):
                rows = [b for b, p in enumerate(pairs) if t < len(p.target)]
                (grad,) = torch.autograd.grad(losses[rows, t].sum(), captured[0], retain_graph=True)
                norms = grad.norm(dim=-1)  # (batch, src_len)
                for b in rows:
                    pair = pairs[b]
                    real = norms[b, : len(pair.source)]
                    whole = real.sum() if relative_to == "total" else real.max()
                    shares[b].append((norms[b, pair.alignment[t]] / whole).item())
    finally:
        handle.remove()
    return torch.tensor([share for row in shares for share in row])


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_attention_maps(model, pairs) -> list[Pair]:
    _check_model(model)
    if model.decoder.attention is None:
        raise ValueError(
            "model should have attention, got a model built with attention=False: this model has no attention "
            "(it was built with attention=False); build one with attention=True or a Luong score"
        )
    return check_items("pairs", pairs, Pair, "Pairs (from make_pairs)")


def _check_alignment(alignment) -> list[int]:
    if isinstance(alignment, (str, bytes)) or not isinstance(alignment, Sequence):
        raise TypeError(f"alignment should be a list of source positions (pair.alignment), got {describe(alignment)}")
    return [check_int(f"alignment[{i}]", a, "a source position") for i, a in enumerate(alignment)]


def _check_source_gradient_norms(model, pair, target_step) -> int:
    _check_model(model)
    check_instance("pair", pair, Pair, "one Pair")
    target_step = check_int("target_step", target_step, "a target position counted from 0")
    if not 0 <= target_step < len(pair.target):
        raise ValueError(
            f"target_step should be in 0..{len(pair.target) - 1} for this pair, got {target_step}; it counts "
            "target words from 0"
        )
    return target_step


def _check_gold_gradient_shares(model, pairs, relative_to) -> list[Pair]:
    _check_model(model)
    pairs = check_items("pairs", pairs, Pair, "Pairs (from make_pairs)")
    if relative_to not in ("total", "largest"):
        raise ValueError(f"relative_to should be 'total' or 'largest', got {relative_to!r}")
    return pairs


def _check_model(model) -> None:
    check_instance("model", model, Seq2Seq, "a Seq2Seq model", "build one with Seq2Seq.build(...)")


def _check_maps(maps: Sequence[torch.Tensor], pairs: Sequence[Pair]) -> None:
    pairs = check_items("pairs", pairs, Pair, "Pairs (from make_pairs)")
    maps = check_items("maps", maps, torch.Tensor, "attention maps (tensors, from attention_maps)")
    if len(maps) != len(pairs):
        raise ValueError(
            f"maps should hold one attention map per pair ({len(pairs)}), got {len(maps)} attention maps for "
            f"{len(pairs)} pairs; need one per pair"
        )
    for n, (weights, pair) in enumerate(zip(maps, pairs)):
        expected = (len(pair.target), len(pair.source))
        if tuple(weights.shape) != expected:
            raise ValueError(
                f"map {n} should have shape {expected}, expected (target_len, source_len) for pair {n}, got shape "
                f"{tuple(weights.shape)}; compute the maps with attention_maps(model, pairs) for the same pairs"
            )
        check_float(f"maps[{n}]", weights)
        check_finite(
            f"maps[{n}]",
            weights,
            "a NaN map (a model whose training diverged) has no most-attended position: scored, it would count as "
            "attending to an arbitrary one",
        )
