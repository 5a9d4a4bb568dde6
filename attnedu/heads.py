"""What attention heads do, measured (lesson 11): statistics per head as Clark et al. (2019) computed them for BERT,
the scores that find induction heads (Olsson et al. 2022), and head ablation.

Every statistic takes one layer's attention weights, (batch, heads, query_len, key_len), each row a softmax over
keys, and returns one number per sentence and head, (batch, heads), the mean over that sentence's real queries
(``real`` (batch, seq_len) bool, True at real tokens, False at padding); ``per_head`` averages over sentences,
weighting each query alike. Positions, heads and layers count from 0.

    attention_to(weights, targets, real)     sum_j A[i, j] over the keys j in ``targets`` ([CLS], [SEP], punctuation)
    offset_attention(weights, offset, real)  A[i, i + offset]: -1 the previous token, +1 the next one
    previous_token_score(weights, real)      offset -1, over the queries that have a previous token
    attention_entropy(weights, real)         -sum_j A[i, j] ln A[i, j], in nats (0 ln 0 = 0)
    per_head(scores, real)                   (batch, heads) -> (heads,), each real query counted once
    induction_targets(tokens)                the keys j that follow an earlier occurrence of query i's token:
                                             x[j - 1] = x[i], j - 1 < i (every earlier occurrence)
    prefix_matching(weights, tokens)         sum_j A[i, j] over those keys, the mean over the queries that have one
                                             (Olsson et al.'s prefix matching: an induction head scores near 1)
    target_weight_by_distance(w, tokens, bins)  the mean weight on a key after an earlier copy, by how far back
    best_positional_score(tokens)            the most a head that looks by position alone could score on ``tokens``
    in_context_losses(logits, tokens, period)   the loss on the first and the second repeat
    induction_rule_losses(tokens, period)    the induction rule's own loss at each position of the repeat (one token
                                             matched, or more); induction_rule_loss: their mean
    head_gates(num_layers, num_heads, removed)  (layers, heads) of ones with 0 at each removed (layer, head)
    strongest(scores, k)                     the k (layer, head) pairs with the highest score
    train_induction(num_layers, held_out)    an attention-only model trained on repeated random tokens, with its
                                             in-context losses over training (the phase change)
    induction_scores(model, tokens)          prefix-matching and previous-token scores of every head
    crossing_steps(steps, values)            the steps at which a training curve made 10 %, 50 %, 90 % of its change
    rate_while(steps, reference, values)     how fast one curve changes while another makes the middle of its change
    repeat_losses(model, tokens, removed)    each sequence's loss on the repeat, with heads removed
    head_means, ablated_forward              a head replaced by 0 or by its mean output, seen by the later queries,
                                             keys, values or readout only (K-composition)
    induction_ablation(model, ..., removed)  the repeat's loss and the prefix-matching scores with heads removed
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from torch import nn

from ._validate import (
    check_bool_mask,
    check_float,
    check_int,
    check_number,
    check_positive_int,
    check_tensor,
    describe,
)
from .runtime import progress, training_seed
from .tasks import repeated_tokens

ROW_SUM_TOLERANCE = 1e-3  # how far from 1 a real query's row of weights may sum (float32 rounding is far below it)


def _check_weights(weights, real=None) -> torch.Tensor:
    check_tensor("weights", weights, 4, "(batch, heads, query_len, key_len)")
    check_float("weights", weights)
    batch, _, query_len, key_len = weights.shape
    if real is not None:
        check_bool_mask("real", real)
        if tuple(real.shape) != (batch, key_len) or query_len != key_len:
            raise ValueError(
                f"real should be (batch, seq_len) = {(batch, key_len)} for self-attention weights (query_len = "
                f"key_len = seq_len), True at real tokens, got {describe(real)} for weights {describe(weights)}"
            )
    else:
        real = torch.ones(batch, key_len, dtype=torch.bool, device=weights.device)
    _check_real_rows(weights, real if query_len == key_len else torch.ones(batch, query_len, dtype=torch.bool))
    return real


def _check_real_rows(weights: torch.Tensor, real: torch.Tensor) -> None:
    """Refuse rows of real queries that are not attention weights: each must be a distribution over the keys, its
    entries >= 0 and summing to 1 (within ``ROW_SUM_TOLERANCE``), as a softmax gives; NaN or infinity is refused too. A
    padding query's row may hold anything: it is left out. Log-weights (``log_softmax``), raw scores and weights
    stored (key, query) are what this catches; each gets its likely cause in the message."""
    sums = weights.sum(-1)  # (batch, heads, query_len): one reduction for both checks of the sum
    bad = ~torch.isfinite(sums) & real[:, None, :]  # a NaN or inf row sum
    if bool(bad.any()):
        b, h, i = (int(v) for v in bad.nonzero()[0])
        row = weights[b, h, i].double()
        if not bool(row.isnan().any()) and bool((row <= 0).all()) and abs(float(row.exp().sum()) - 1) <= 1e-3:
            raise ValueError(
                f"weights should be attention weights, each real query's row >= 0 and summing to 1 over the keys, got "
                f"-inf and no entry above 0 at sentence {b}, head {h}, query {i}: they are log-weights (their "
                "exponentials sum to 1): pass the softmax, not the log_softmax"
            )
        raise ValueError(
            f"weights should be finite in the rows of real queries, got NaN or infinity at sentence {b}, head {h}, "
            f"query {i} ({int(bad.sum())} such rows): a row whose every key was masked gives NaN in a softmax; mark "
            "that query as padding in real, or find where the NaN comes from"
        )
    tolerance = ROW_SUM_TOLERANCE if weights.element_size() >= 4 else 10 * ROW_SUM_TOLERANCE  # 16-bit: coarser
    off = ((sums - 1).abs() > tolerance) & real[:, None, :]
    negative = None if bool(off.any()) else (weights.amin(-1) < 0) & real[:, None, :]  # a second pass, when needed
    if bool(off.any()) or bool(negative.any()):
        b, h, i = (int(v) for v in (off if bool(off.any()) else negative).nonzero()[0])
        row = weights[b, h, i]
        if bool((row <= 0).all()) and abs(float(row.double().exp().sum()) - 1) <= tolerance:
            cause = "they are log-weights (their exponentials sum to 1): pass the softmax, not the log_softmax"
        elif bool((row < 0).any()):
            cause = "a weight is negative: scores before the softmax (or a sign flipped); apply softmax over the keys"
        elif bool(off.any()) and float(weights[b, h].sum(-2).sub(1).abs().max()) <= tolerance:
            cause = (
                "its columns sum to 1, not its rows: the weights look stored (key, query); transpose the last two axes"
            )
        else:
            cause = "each row should be a softmax over the keys; scaled or raw scores do not sum to 1"
        count = int((off if bool(off.any()) else negative).sum())
        raise ValueError(
            f"weights should be attention weights, each real query's row >= 0 and summing to 1 over the keys, got a "
            f"row summing to {float(sums[b, h, i]):.4g} with smallest entry {float(row.min()):.4g} at sentence {b}, "
            f"head {h}, query {i} ({count} such rows): {cause}"
        )


def _mean_over(values: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
    """values (batch, heads, query_len), counted (batch, query_len) bool -> (batch, heads): the mean over counted
    queries (0 for a sentence with none)."""
    counted = counted[:, None, :]
    kept = torch.where(counted, values, torch.zeros((), dtype=values.dtype))  # a left-out row may hold NaN
    return kept.sum(-1) / counted.sum(-1).clamp(min=1).to(values.dtype)


def attention_to(weights: torch.Tensor, targets: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """How much of its attention each real query gives to the keys in ``targets`` (batch, key_len) bool, e.g.
    [SEP] tokens: the mean over real queries i of sum_{j in targets} A[i, j]. -> (batch, heads)."""
    real = _check_weights(weights, real)
    check_bool_mask("targets", targets)
    if tuple(targets.shape) != (weights.shape[0], weights.shape[3]):
        raise ValueError(f"targets should be (batch, key_len) = {(weights.shape[0], weights.shape[3])}, got "
                         f"{describe(targets)}")  # fmt: skip
    on_targets = (weights * targets[:, None, None, :].to(weights.dtype)).sum(-1)  # (batch, heads, query_len)
    return _mean_over(on_targets, real)


def offset_attention(weights: torch.Tensor, offset: int, real: torch.Tensor | None = None) -> torch.Tensor:
    """The weight each query i puts on the key at i + offset (offset -1: the previous token, +1: the next), the mean
    over the real queries whose i + offset is a real position. -> (batch, heads)."""
    real = _check_weights(weights, real)
    seq_len = weights.shape[-1]
    offset = check_int("offset", offset, "how far from the query the key is", -(seq_len - 1), seq_len - 1)
    on_offset = torch.diagonal(weights, offset=offset, dim1=-2, dim2=-1)  # A[i, i + offset], (batch, heads, n)
    first = max(0, -offset)  # the first query that has a key at i + offset
    queries = real[:, first : first + on_offset.shape[-1]]
    keys = real[:, first + offset : first + offset + on_offset.shape[-1]]
    return _mean_over(on_offset, queries & keys)


def previous_token_score(weights: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """The mean weight each real query i >= 1 puts on the token just before it, A[i, i - 1] (position 0 has no
    previous token and is left out). -> (batch, heads); 1 for a head that always looks one token back."""
    return offset_attention(weights, -1, real)


def attention_entropy(weights: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """The entropy of each real query's weights, H_i = -sum_j A[i, j] ln A[i, j] in nats (0 ln 0 = 0), the mean over
    real queries. -> (batch, heads). 0 for a head that puts all its weight on one key; ln n for uniform weights
    over n keys (padding keys, with weight 0, add nothing)."""
    real = _check_weights(weights, real)
    terms = torch.where(weights > 0, weights * torch.log(weights.clamp(min=torch.finfo(weights.dtype).tiny)), 0.0)
    return _mean_over(-terms.sum(-1), real)


def per_head(scores: torch.Tensor, real: torch.Tensor | None = None, offset: int = 0) -> torch.Tensor:
    """(batch, heads) scores, each the mean over one sentence's queries, -> (heads,), the mean over all the queries
    of all the sentences (a sentence counts by its number of queries: ``real``'s True entries, less |offset| for
    ``offset_attention``)."""
    check_tensor("scores", scores, 2, "(batch, heads)")
    check_float("scores", scores)
    if real is None:
        return scores.mean(0)
    check_bool_mask("real", real)
    if real.dim() != 2 or real.shape[0] != scores.shape[0]:
        raise ValueError(f"real should be (batch, seq_len) with batch = {scores.shape[0]}, the sentences of scores, "
                         f"got {describe(real)} for scores {describe(scores)}")  # fmt: skip
    offset = check_int("offset", offset, "the offset the scores were measured at", -real.shape[1], real.shape[1])
    counts = (real.sum(1) - abs(offset)).clamp(min=0).to(scores.dtype)  # (batch,)
    if counts.sum() == 0:
        raise ValueError(f"no sentence has a query to count: every sentence of real has at most |offset| = "
                         f"{abs(offset)} real tokens, so there is no mean")  # fmt: skip
    return (scores * counts[:, None]).sum(0) / counts.sum()


def _check_tokens(tokens, real=None) -> torch.Tensor:
    check_tensor("tokens", tokens, 2, "(batch, seq_len) of token ids")
    if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
        raise TypeError(f"tokens should hold integer token ids (e.g. torch.long), got {describe(tokens)}")
    if real is None:
        return torch.ones(tokens.shape, dtype=torch.bool, device=tokens.device)
    check_bool_mask("real", real)
    if tuple(real.shape) != tuple(tokens.shape):
        raise ValueError(f"real should be (batch, seq_len) = {tuple(tokens.shape)} like tokens, True at real tokens, "
                         f"got {describe(real)}")  # fmt: skip
    return real


def induction_targets(tokens: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """Where an induction head looks: the keys that follow an earlier occurrence of the query's token. For a query i
    and a key j,

        target[i, j]  <=>  1 <= j <= i  and  x[j - 1] = x[i]          (x[j - 1] is an earlier copy: j - 1 < i)

    every earlier copy counts, not only the most recent one (TransformerLens's induction detection pattern: the
    duplicate-token pattern shifted one key to the right). tokens (batch, seq_len) of ids -> (batch, seq_len,
    seq_len) bool, [b, i, j]. With ``real`` (batch, seq_len) bool, True at real tokens, a target needs a real
    query, a real copy and a real key (padding never counts as a copy)."""
    real = _check_tokens(tokens, real)
    seq_len = tokens.shape[1]
    copies = (tokens[:, :, None] == tokens[:, None, :]) & real[:, :, None] & real[:, None, :]  # [b, i, s]: x[s] = x[i]
    copies &= torch.ones(seq_len, seq_len, dtype=torch.bool, device=tokens.device).tril(-1)  # s < i: earlier
    targets = torch.zeros_like(copies)
    targets[:, :, 1:] = copies[:, :, :-1] & real[:, None, 1:]  # key j = s + 1, the token after the copy
    return targets


def prefix_matching(weights: torch.Tensor, tokens: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """Olsson et al.'s prefix-matching score: how much of its attention a head puts, at a query whose token occurred
    before, on the keys that follow the earlier occurrences of that token (``induction_targets``), summed over every
    earlier occurrence, averaged over those queries:

        score = mean over {i : some target[i, j]} of  sum_j A[i, j] target[i, j]

    weights (batch, heads, seq_len, seq_len), tokens (batch, seq_len) -> (batch, heads). An induction head scores
    near 1 however many earlier copies there are, and however far back they lie (it finds them by their content);
    a head that attends a fixed distance back, or evenly over its past, scores low on sequences whose repeats lie
    at different distances. Queries whose token is new are left out (TransformerLens's head detector divides by
    every query instead). ``real`` (batch, seq_len) bool: only real queries, copies and keys count. A sequence
    with no repeated token has no score: refused."""
    check_tensor("weights", weights, 4, "(batch, heads, seq_len, seq_len)")
    check_float("weights", weights)
    targets = induction_targets(tokens, real)
    batch, seq_len = tokens.shape
    if weights.shape[0] != batch or tuple(weights.shape[2:]) != (seq_len, seq_len):
        raise ValueError(
            f"weights should be self-attention weights (batch, heads, seq_len, seq_len) = ({batch}, heads, {seq_len}, "
            f"{seq_len}) for tokens {describe(tokens)}, got {describe(weights)}"
        )
    counted = targets.any(-1)  # (batch, seq_len): the queries whose token occurred before
    _check_real_rows(weights, counted)
    empty = ~counted.any(-1)
    if bool(empty.any()):
        row = int(empty.nonzero()[0])
        raise ValueError(f"tokens row {row} has no token that occurred before (no query with an earlier copy), so "
                         f"it has no prefix-matching score; got {tokens[row].tolist()}")  # fmt: skip
    on_targets = (weights * targets[:, None].to(weights.dtype)).sum(-1)  # (batch, heads, seq_len)
    return _mean_over(on_targets, counted)


def target_weight_by_distance(
    weights: torch.Tensor, tokens: torch.Tensor, bins, min_targets: int = 2, real: torch.Tensor | None = None
) -> torch.Tensor:
    """How a head shares its weight between the earlier copies of a query's token, by how far back they lie. For
    each bin (lo, hi) of distances, the mean weight on a target key at that distance,

        mean of A[i, j]  over the pairs with  target[i, j] (``induction_targets``),  lo <= i - j <= hi,
                         and query i having at least ``min_targets`` targets (a choice between copies),

    pooled over the sequences. weights (batch, heads, seq_len, seq_len), tokens (batch, seq_len), ``bins`` a list of
    (lo, hi) whole numbers -> (heads, len(bins)); NaN for a bin that holds no pair. An induction head that favoured
    the most recent copy would put most on the shortest distances, one that favoured the oldest on the longest."""
    check_tensor("weights", weights, 4, "(batch, heads, seq_len, seq_len)")
    check_float("weights", weights)
    targets = induction_targets(tokens, real)  # (batch, seq_len, seq_len)
    if tuple(weights.shape[2:]) != tuple(targets.shape[1:]) or weights.shape[0] != targets.shape[0]:
        raise ValueError(f"weights should be (batch, heads, seq_len, seq_len) for tokens {describe(tokens)}, got "
                         f"{describe(weights)}")  # fmt: skip
    min_targets = check_positive_int("min_targets", min_targets, "the fewest targets a counted query has")
    _check_real_rows(weights, targets.any(-1))
    chosen = targets & (targets.sum(-1, keepdim=True) >= min_targets)  # (batch, i, j)
    position = torch.arange(tokens.shape[1], device=tokens.device)
    distance = position[:, None] - position[None, :]  # i - j
    result = []
    for pair in bins:
        lo, hi = (check_int("bins", v, "a distance i - j >= 0", 0) for v in pair)
        if hi < lo:
            raise ValueError(f"bins should be (lo, hi) pairs with lo <= hi, got {tuple(pair)}")
        pairs = chosen & ((distance >= lo) & (distance <= hi))[None]
        count = int(pairs.sum())
        summed = (weights * pairs[:, None].to(weights.dtype)).sum((0, 2, 3))  # (heads,)
        result.append(summed / count if count else torch.full_like(summed, float("nan")))
    return torch.stack(result, dim=-1)


def best_positional_score(tokens: torch.Tensor, real: torch.Tensor | None = None) -> float:
    """The highest mean prefix-matching score (``prefix_matching`` averaged over the sequences) that a head whose
    weights depend on positions alone could reach on ``tokens`` (batch, seq_len): one causal pattern A[i, j], the
    same for every sequence, blind to the tokens (a fixed offset, an even spread over the past, any mixture). The mean
    score is linear in A,

        mean_b score_b = sum_{i, j} A[i, j] S[i, j],    S[i, j] = mean_b target_b[i, j] / (queries of b with a copy)

    so the best such head puts each query's whole weight on the key with the largest S[i, j]: the bound is
    sum_i max_j S[i, j], exact. On sequences that all repeat at one distance it is near 1; where each sequence
    repeats at its own distance it is far lower. ``real`` (batch, seq_len) bool, True at real tokens: padding is
    never a copy, a query or a key (without it, padding that repeats one id counts as repeated tokens)."""
    targets = induction_targets(tokens, real).to(torch.float64)
    counted = targets.amax(-1).sum(-1)  # (batch,)
    if bool((counted == 0).any()):
        row = int((counted == 0).nonzero()[0])
        raise ValueError(f"tokens row {row} has no token that occurred before, so it has no prefix-matching score")
    share = (targets / counted[:, None, None]).mean(0)  # S, (seq_len, seq_len)
    return share.amax(-1).sum().item()


def in_context_losses(logits: torch.Tensor, tokens: torch.Tensor, period: int) -> tuple[float, float]:
    """Next-token cross-entropy (nats) on sequences of a block of ``period`` tokens repeated twice: the mean over the
    predictions of the first repeat's tokens 1 .. period-1 (made from earlier tokens of the block only: random, so
    about ln vocab) and over the second repeat's tokens period+1 .. 2 period - 1 (each seen before: a model that reads
    its context copies it). logits (batch, 2 period, vocab), tokens (batch, 2 period) -> (first, second)."""
    check_tensor("logits", logits, 3, "(batch, seq_len, vocab)")
    check_tensor("tokens", tokens, 2, "(batch, seq_len)")
    period = check_positive_int("period", period, "the length of the repeated block")
    if tuple(tokens.shape) != (logits.shape[0], 2 * period) or logits.shape[1] != 2 * period:
        raise ValueError(f"logits and tokens should cover two repeats, 2 * period = {2 * period} positions, got "
                         f"{describe(logits)} and {describe(tokens)}")  # fmt: skip
    losses = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
    # losses[:, t] is the loss on token t + 1, predicted at position t
    return losses[:, : period - 1].mean().item(), losses[:, period:].mean().item()


def induction_rule_losses(tokens: torch.Tensor, period: int, context: int = 1) -> torch.Tensor:
    """The loss of the induction rule itself, applied exactly, at each position where ``in_context_losses`` measures
    the repeat: at each position t of the second block (t = period .. 2 period - 2), find every earlier position s < t
    whose last ``context`` tokens equal those before and at t, and predict the tokens that followed them, x[s + 1],
    each occurrence with equal weight (with ``context`` 1, the one-token rule: s holds the current token):

        loss_t = -ln( #{s < t : match(s, t), x[s + 1] = x[t + 1]} / #{s < t : match(s, t)} ),
        match(s, t): x[s - k] = x[t - k] for k = 0 .. min(context, s + 1) - 1

    (a context reaching before the sequence's start matches there: the copy at s = t - period always matches). With
    tokens drawn with replacement a block can hold a token twice, followed by different tokens: then the one-token
    rule is unsure, and a longer context can often tell the two apart. loss_t = 0 exactly where the rule is certain
    (every match was followed by the same token).
    tokens (n, 2 period) -> (n, period - 1), in nats, column k for t = period + k."""
    check_tensor("tokens", tokens, 2, "(n, 2 * period) of token ids")
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise TypeError(f"tokens should hold integer token ids, got {describe(tokens)}")
    period = check_positive_int("period", period, "the length of the repeated block")
    context = check_int("context", context, "how many tokens the rule matches", 1, period)
    if tokens.shape[1] != 2 * period or tokens.shape[0] == 0:
        raise ValueError(f"tokens should be (n, 2 * period) = (n, {2 * period}) with n >= 1, a block repeated once, "
                         f"got {describe(tokens)}")  # fmt: skip
    losses = []
    for row in tokens.tolist():
        for t in range(period, 2 * period - 1):
            earlier = [s for s in range(t) if all(row[s - k] == row[t - k] for k in range(min(context, s + 1)))]
            right = sum(row[s + 1] == row[t + 1] for s in earlier)
            if not earlier or not right:
                raise ValueError(f"tokens should be a block of {period} tokens repeated once: in row {row}, position "
                                 f"{t} has no earlier occurrence followed by its next token")  # fmt: skip
            losses.append(0.0 if right == len(earlier) else -math.log(right / len(earlier)))
    return torch.tensor(losses, dtype=torch.float64).view(tokens.shape[0], period - 1)


def induction_rule_loss(tokens: torch.Tensor, period: int, context: int = 1) -> float:
    """The induction rule's own loss on the repeat (``induction_rule_losses``), the mean over sequences and
    positions, in nats (0 when every block's tokens are distinct)."""
    return induction_rule_losses(tokens, period, context).mean().item()


def head_gates(num_layers: int, num_heads: int, removed=()) -> torch.Tensor:
    """(num_layers, num_heads) of ones, with 0 at each (layer, head) in ``removed``: for
    ``BertEncoder(..., head_gates=...)``."""
    num_layers = check_positive_int("num_layers", num_layers, "the number of layers")
    num_heads = check_positive_int("num_heads", num_heads, "heads per layer")
    gates = torch.ones(num_layers, num_heads)
    for layer, head in _pairs(removed):
        check_int("layer", layer, "a layer, counted from 0", 0, num_layers - 1)
        check_int("head", head, "a head, counted from 0", 0, num_heads - 1)
        gates[layer, head] = 0.0
    return gates


def _pairs(removed) -> list[tuple]:
    """``removed`` as a list of (layer, head) pairs, or a ValueError saying what came (a bare pair, a flat list)."""
    try:
        pairs = [tuple(pair) for pair in removed]
    except TypeError:
        pairs = None
    if pairs is None or any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"removed should be a list of (layer, head) pairs, e.g. [(1, 0)] or [(1, 0), (1, 1)], got "
                         f"{removed!r}; a single head is a list of one pair")  # fmt: skip
    return pairs


def strongest(scores: torch.Tensor, k: int = 1) -> list[tuple[int, int]]:
    """The (layer, head) pairs of the k highest entries of ``scores`` (num_layers, num_heads), highest first."""
    check_tensor("scores", scores, 2, "(num_layers, num_heads)")
    check_float("scores", scores)
    if bool(scores.isnan().any()):
        layer, head = (int(v) for v in scores.isnan().nonzero()[0])
        raise ValueError(
            f"scores should hold no NaN (it would rank first), got NaN at layer {layer}, head {head}; "
            "a head whose statistic had nothing to average gives NaN: find out why, or leave it out"
        )
    k = check_int("k", k, "how many heads", 1, scores.numel())
    return [divmod(int(i), scores.shape[1]) for i in scores.flatten().topk(k).indices]


def max_entropy(n: int) -> float:
    """ln n: the entropy of uniform weights over n keys."""
    return math.log(check_positive_int("n", n, "the number of keys"))


# --------------------------------------------------------------------------------------------
# Induction heads, trained live (Olsson et al. 2022)
# --------------------------------------------------------------------------------------------

# The recipe lesson 11 trains with, calibrated by benchmarks/calibration/lesson11.py: random tokens from 32, sequences
# of 32 tokens made of a block of 4..16 tokens repeated, 2 heads of width 16, AdamW lr 0.01, batch 32, 800 steps.
INDUCTION = dict(vocab=32, d_model=32, num_heads=2, length=32, periods=(4, 16), steps=800, batch=32, lr=0.01)
EVAL_PERIOD = 16  # held-out sequences: one block of 16 tokens, repeated once (32 tokens)


@dataclass
class InductionRun:
    """A model trained on repeated random tokens, and its in-context losses on the held-out sequences measured every
    ``every`` steps: ``steps[k]`` steps done, ``first[k]`` the loss on the first block (nothing to copy: about
    ln vocab or worse), ``second[k]`` on the repeat (copyable)."""

    model: nn.Module
    steps: list = field(default_factory=list)
    first: list = field(default_factory=list)
    second: list = field(default_factory=list)
    prefix: list = field(default_factory=list)
    previous: list = field(default_factory=list)
    seconds: float = 0.0


def held_out_repeats(count: int = 256, period: int = EVAL_PERIOD, vocab: int = INDUCTION["vocab"], seed: int = 12345):
    """``count`` sequences of one block of ``period`` random tokens repeated once, -> (count, 2 period). The data
    seed is not a training seed: the perturbed run leaves it alone."""
    return repeated_tokens(count, period, 2 * period, vocab, torch.Generator().manual_seed(seed))[0]


def held_out_varied(
    count: int = 256,
    periods=INDUCTION["periods"],
    length: int = INDUCTION["length"],
    vocab: int = INDUCTION["vocab"],
    seed: int = 54321,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` held-out sequences like the training data: each its own block length drawn from ``periods``,
    repeated to ``length`` -> tokens (count, length), periods (count,). On these a head that attends a fixed
    distance back cannot score as an induction head (``best_positional_score`` says how much it could)."""
    return repeated_tokens(count, periods, length, vocab, torch.Generator().manual_seed(seed))


def train_induction(
    num_layers: int,
    held_out: torch.Tensor,
    seed: int = 0,
    every: int = 25,
    desc: str = "training",
    scored: torch.Tensor | None = None,
    **recipe,
) -> InductionRun:
    """Train ``AttentionOnlyTransformer(vocab, d_model, num_heads, num_layers)`` to predict the next token of
    sequences of a random block repeated (``tasks.repeated_tokens``, each sequence with its own period, so that no
    fixed distance finds the earlier copy), with ``INDUCTION``'s recipe (any of its keys can be overridden).

    loss = mean over positions t of -ln p(token[t + 1] | tokens[0 .. t])  (causal: position t sees 0 .. t)

    ``held_out`` (n, 2 period): sequences of one block repeated once; ``in_context_losses`` on them every ``every``
    steps; given ``scored`` (m, seq_len) token ids (``held_out_varied``'s tokens), also ``induction_scores`` on them,
    in ``run.prefix`` and ``run.previous`` ((num_layers, num_heads) each). ``seed`` fixes the
    initialisation and the batches (through ``runtime.training_seed``); nothing is drawn
    from the global generators, so several runs can train at once (``runtime.in_parallel``).
    """
    from .attention_only import AttentionOnlyTransformer

    unknown = set(recipe) - set(INDUCTION)
    if unknown:
        raise TypeError(f"train_induction got unknown recipe keys {sorted(unknown)}; known: {sorted(INDUCTION)}")
    r = {**INDUCTION, **recipe}
    num_layers = check_int("num_layers", num_layers, "attention layers", 1, 8)
    every = check_positive_int("every", every, "steps between two measurements")
    check_tensor("held_out", held_out, 2, "(n, 2 * period) of token ids")
    if held_out.shape[1] % 2 or held_out.shape[1] > r["length"]:
        raise ValueError(f"held_out should be (n, 2 * period) with 2 * period <= length = {r['length']}, got "
                         f"{describe(held_out)}")  # fmt: skip
    model = AttentionOnlyTransformer(r["vocab"], r["d_model"], r["num_heads"], num_layers, r["length"], seed=seed)
    generator = torch.Generator().manual_seed(training_seed(seed))
    optimizer = torch.optim.AdamW(model.parameters(), lr=r["lr"], betas=(0.9, 0.95), weight_decay=0.0)
    run = InductionRun(model)
    period = held_out.shape[1] // 2
    if scored is not None:
        check_tensor("scored", scored, 2, "(m, seq_len) token ids: held_out_varied()[0], the tokens, not the pair")

    def measure(step: int) -> None:
        with torch.no_grad():
            first, second = in_context_losses(model(held_out)[0], held_out, period)
        run.steps.append(step)
        run.first.append(first)
        run.second.append(second)
        if scored is not None:
            prefix, previous = induction_scores(model, scored)
            run.prefix.append(prefix)
            run.previous.append(previous)

    bar = progress(r["steps"], desc)
    start = time.perf_counter()
    measure(0)
    for step in range(r["steps"]):
        tokens, _ = repeated_tokens(r["batch"], r["periods"], r["length"], r["vocab"], generator)
        logits, _ = model(tokens)
        loss = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        bar.update()
        if (step + 1) % every == 0 or step + 1 == r["steps"]:
            measure(step + 1)
    run.seconds = time.perf_counter() - start
    bar.close()
    model.eval()
    return run


def _check_attention_only(model) -> None:
    layers = getattr(model, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers) or not hasattr(layers[0], "num_heads"):
        raise TypeError(f"model should be an AttentionOnlyTransformer (attention layers in .layers), got "
                        f"{type(model).__name__}")  # fmt: skip


@torch.no_grad()
def induction_scores(
    model: nn.Module, tokens: torch.Tensor, head_gates: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefix-matching score (``prefix_matching``) and the previous-token score of every head of an
    ``AttentionOnlyTransformer`` on ``tokens`` (n, seq_len), each the mean over the sequences: -> two (num_layers,
    num_heads) tensors. ``head_gates`` (num_layers, num_heads): the model run with the heads gated 0 removed
    (``head_gates``)."""
    check_tensor("tokens", tokens, 2, "(n, seq_len) of token ids")
    _check_attention_only(model)
    _, weights = model(tokens) if head_gates is None else model(tokens, head_gates)
    prefix = torch.stack([prefix_matching(w, tokens).mean(0) for w in weights])
    previous = torch.stack([previous_token_score(w).mean(0) for w in weights])
    return prefix, previous


def crossing_steps(steps, values, fractions=(0.1, 0.5, 0.9)) -> list[int]:
    """When a quantity measured during training has made each fraction of its change from the first measurement to
    the last: for each f in ``fractions``, the first ``steps[k]`` with

        (values[k] - values[0]) / (values[-1] - values[0]) >= f

    (a falling loss and a rising score alike). ``steps`` and ``values``: sequences of equal length >= 2, the values
    numbers whose first and last differ. -> one step per fraction (the quantity may cross back later: this is the
    first crossing)."""
    steps, values = [check_int("steps", s, "a training step") for s in steps], [float(v) for v in values]
    if len(steps) != len(values) or len(values) < 2:
        raise ValueError(f"steps and values should be two sequences of one equal length >= 2, got {len(steps)} "
                         f"steps and {len(values)} values")  # fmt: skip
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"steps should increase from one measurement to the next, got {steps[:8]}"
                         f"{' ...' if len(steps) > 8 else ''}; sort the steps and their values together")  # fmt: skip
    if not all(math.isfinite(v) for v in values):
        k = next(k for k, v in enumerate(values) if not math.isfinite(v))
        raise ValueError(f"values should be finite, got {values[k]} at step {steps[k]}: a curve with a NaN has no "
                         "first crossing to trust")  # fmt: skip
    change = values[-1] - values[0]
    if not math.isfinite(change) or change == 0:
        raise ValueError(f"values should change from the first measurement to the last, got {values[0]} .. "
                         f"{values[-1]}")  # fmt: skip
    found = []
    for f in fractions:
        f = check_number("fractions", f, "a fraction of the change, 0 < f <= 1", 0.0, strict=True)
        if f > 1:
            raise ValueError(f"fractions should lie in (0, 1], got {f}")
        found.append(next(s for s, v in zip(steps, values) if (v - values[0]) / change >= f))
    return found


def rate_while(steps, reference, values, fractions=(0.25, 0.75), per: int = 100) -> float:
    """How fast ``reference`` changes while ``values`` makes the middle of its change (the phase-change test of
    lesson 11: the saving while the head forms). With s_a, s_b the steps at which ``values`` first made
    ``fractions[0]`` and ``fractions[1]`` of its change (``crossing_steps``) and r the reference curve,

        rate = (r(s_b) - r(s_a)) / (r[-1] - r[0])  /  ((s_b - s_a) / per)

    the fraction of the reference's whole change (first measurement to last) made in that window, per ``per`` steps
    (a window of zero steps counts as one interval between measurements). A curve that changes when the reference
    changes fastest gets a high rate; one that changes slowly over the whole run gets about the reference's average
    rate. ``steps``, ``reference``, ``values``: sequences of equal length, as for ``crossing_steps``. -> float."""
    reference = [float(v) for v in reference]
    if len(reference) != len(list(steps)):
        raise ValueError(f"reference should have one value per step, {len(list(steps))}, got {len(reference)}")
    crossing_steps(steps, reference, (1.0,))  # the same checks for the reference: finite, changing, steps in order
    low, high = (check_number("fractions", f, "a fraction of the change, 0 < f <= 1", 0.0, strict=True)
                 for f in fractions)  # fmt: skip
    if not low < high <= 1:
        raise ValueError(f"fractions should be two fractions 0 < low < high <= 1, got {tuple(fractions)}")
    per = check_positive_int("per", per, "the steps the rate is given per")
    steps = list(steps)
    start, end = crossing_steps(steps, values, (low, high))
    interval = min(b - a for a, b in zip(steps, steps[1:]))
    made = (reference[steps.index(end)] - reference[steps.index(start)]) / (reference[-1] - reference[0])
    return made / (max(end - start, interval) / per)


# The files lesson 11's calibration wrote, one per set of CPU kernels: the default (AVX-512 on the machine that made
# them), torch's AVX2 kernels, and MKL's compatible path with torch's default (no vector extension) kernels
CALIBRATION_FILES = ("calibration11.md", "calibration11_avx2.md", "calibration11_compatible.md")


def calibration_ranges(paths=None) -> dict:
    """The ranges over training seeds that lesson 11's calibration (``benchmarks/calibrate.py --lesson 11``) wrote,
    merged over its files (by default ``CALIBRATION_FILES`` in ``benchmarks/``, each the same seeds on another set of
    CPU kernels): lines
    ``- 2 layer(s), prefix: 0.675 .. 0.737`` -> {(2, "prefix"): (0.675, 0.737), ...}, the lowest low and the highest
    high over the files, so that a lesson quotes the calibration it asserts against instead of typing it. A key a
    file lacks is refused (the files come from different versions of the script)."""
    import re
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    if paths is None:
        paths = [folder / name for name in CALIBRATION_FILES]
    paths = [Path(p) for p in (paths if isinstance(paths, (list, tuple)) else [paths])]
    line = re.compile(r"^- (\d+) layer\(s\), (\w+): ([-\d.]+) \.\. ([-\d.]+)(?: \(\d+ runs\))?$", re.M)
    merged, keys = {}, None
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"calibration_ranges: no file {path}; make it: benchmarks/calibrate.py --lesson 11")
        found = {}
        for match in line.finditer(path.read_text()):
            layers, key, low, high = match.groups()
            found[(int(layers), key)] = (float(low), float(high))
        if keys is not None and set(found) != keys:
            raise ValueError(
                f"calibration_ranges: {path.name} holds other keys than {paths[0].name} ({sorted(set(found) ^ keys)}); "
                "re-run benchmarks/calibrate.py --lesson 11 for every file"
            )
        keys = set(found)
        for key, (low, high) in found.items():
            old = merged.get(key, (low, high))
            merged[key] = (min(old[0], low), max(old[1], high))
    return merged


def _repeat_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(n,): each sequence's mean next-token loss over the repeat's predictions, t = period .. 2 period - 2."""
    period = tokens.shape[1] // 2
    losses = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
    return losses[:, period:].mean(-1)  # losses[:, t]: the loss on token t + 1, predicted at t


def _check_repeats(tokens: torch.Tensor) -> None:
    check_tensor("tokens", tokens, 2, "(n, 2 * period) of token ids")
    if tokens.shape[1] % 2 or tokens.shape[1] < 4:
        raise ValueError(f"tokens should be (n, 2 * period) with period >= 2, a block repeated once, got "
                         f"{describe(tokens)}")  # fmt: skip
    period = tokens.shape[1] // 2
    differs = (tokens[:, :period] != tokens[:, period:]).any(-1)
    if bool(differs.any()):
        row = int(differs.nonzero()[0])
        raise ValueError(f"tokens should be blocks repeated once, each row's second half equal to its first (the loss "
                         f"on the repeat means nothing otherwise), got row {row}: {tokens[row].tolist()}; "
                         "held_out_repeats() makes such rows")  # fmt: skip


@torch.no_grad()
def repeat_losses(model: nn.Module, tokens: torch.Tensor, removed=()) -> torch.Tensor:
    """The next-token loss on the repeat of each sequence, with the heads in ``removed`` ((layer, head) pairs) set to
    0 before W_O (``head_gates``). ``model``: an ``AttentionOnlyTransformer``; tokens (n, 2 period), a block repeated
    once. For sequence b, the mean over the repeat's positions t = period .. 2 period - 2 (the predictions of its
    tokens 1 .. period - 1, as in ``in_context_losses``) of

        -ln softmax(logits[b, t])[tokens[b, t + 1]]

    -> (n,), in nats."""
    _check_repeats(tokens)
    _check_attention_only(model)
    gates = head_gates(len(model.layers), model.layers[0].num_heads, removed)
    logits, _ = model(tokens, gates)
    return _repeat_loss(logits, tokens)


# Where a removed head's output may be seen: the queries, keys and values of the layers above it, and the readout
PATHS = ("queries", "keys", "values", "readout")


@torch.no_grad()
def head_means(model: nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Each head's output before W_O, averaged over the sequences of ``tokens`` (n, seq_len) at each position: the
    values that mean ablation puts in place of a head (``ablated_forward``). -> one (heads, seq_len, head_dim) per
    layer."""
    _check_attention_only(model)
    check_tensor("tokens", tokens, 2, "(n, seq_len) of token ids")
    from .masks import causal_mask

    seq_len = tokens.shape[1]
    x = model.embedding(tokens) + model.positions(seq_len)
    mask = causal_mask(seq_len, device=tokens.device)[None, None]
    means = []
    for attention in model.layers:
        heads, _ = attention._heads(x, x, x, mask)  # (n, heads, seq_len, head_dim), before W_O
        means.append(heads.mean(0))
        x = x + attention._merge(heads)
    return means


@torch.no_grad()
def ablated_forward(model: nn.Module, tokens: torch.Tensor, removed, means=None, paths=PATHS):
    """An ``AttentionOnlyTransformer``'s forward pass with the heads in ``removed`` ((layer, head) pairs) replaced, the
    replacement seen only through ``paths``. Head i of layer l, before W_O, becomes

        0                    (``means`` None: zero ablation, what ``head_gates`` does), or
        m_{l,i}[t]           its mean output at position t (``means`` = ``head_means(model, some_tokens)``: mean
                             ablation, which keeps what the head writes on average and removes what it reads),

    and the model keeps two residual streams: x, the intact one, and x~, the one with the replacement. A layer above
    reads its queries from x~ if "queries" is in ``paths`` (else from x), its keys and its values likewise, and adds
    its output to both streams; the readout reads x~ if "readout" is in ``paths``. All four paths: an ordinary
    ablation (with zeros, ``model(tokens, head_gates)``). ("keys",) alone: only the keys of the layers above miss
    the head, the test of K-composition (Elhage et al. 2021: a layer-1 head whose keys are built from a layer-0
    head's output). -> logits (n, seq_len, vocab), and each layer's attention weights."""
    _check_attention_only(model)
    check_tensor("tokens", tokens, 2, "(n, seq_len) of token ids")
    num_layers, num_heads = len(model.layers), model.layers[0].num_heads
    removed = [
        (check_int("layer", layer, "a layer, counted from 0", 0, num_layers - 1),
         check_int("head", head, "a head, counted from 0", 0, num_heads - 1))
        for layer, head in _pairs(removed)
    ]  # fmt: skip
    paths = tuple(paths)
    for path in paths:
        if path not in PATHS:
            raise ValueError(f"paths should name some of {PATHS}, got {path!r}")
    if set(paths) != set(PATHS) and len({layer for layer, _ in removed}) > 1:
        raise ValueError(
            f"removed should hold heads of one layer when paths leave some out, got {removed} with "
            f"paths {paths}: with removals in two layers, which stream a later layer reads is ambiguous"
        )
    if means is not None:
        if len(means) != num_layers or any(tuple(m.shape[:2]) != (num_heads, tokens.shape[1]) for m in means):
            raise ValueError(
                f"means should be head_means(model, tokens) for tokens of {tokens.shape[1]} positions: "
                f"one (heads, seq_len, head_dim) = ({num_heads}, {tokens.shape[1]}, head_dim) per layer"
            )
    from .masks import causal_mask

    seq_len = tokens.shape[1]
    x = model.embedding(tokens) + model.positions(seq_len)
    mask = causal_mask(seq_len, device=tokens.device)[None, None]
    cut = x  # the stream that carries the replacement (the same as x until a removed head)
    all_weights = []
    for index, attention in enumerate(model.layers):
        queries, keys, values = (cut if path in paths else x for path in ("queries", "keys", "values"))
        heads, weights = attention._heads(queries, keys, values, mask)  # before W_O
        replaced = heads.clone()
        for layer, head in removed:
            if layer == index:
                replaced[:, head] = 0.0 if means is None else means[index][head]
        out, out_cut = attention._merge(heads), attention._merge(replaced)
        if any(layer == index for layer, _ in removed):  # the removal starts here: x~ gets the replaced heads
            x, cut = x + out, cut + out_cut
        else:  # a layer above it (or below): its output, computed from its chosen inputs, goes to both streams
            x, cut = x + out_cut, cut + out_cut
        all_weights.append(weights)
    return model.unembedding(cut if "readout" in paths else x), all_weights


@torch.no_grad()
def induction_ablation(
    model: nn.Module, held_out: torch.Tensor, scored: torch.Tensor, removed=(), mean: bool = False, paths=PATHS
) -> tuple[float, torch.Tensor]:
    """What an ``AttentionOnlyTransformer`` does with the heads in ``removed`` ((layer, head) pairs) replaced
    (``ablated_forward``): by 0 before W_O, or with ``mean`` by their mean output at each position over ``scored``
    (the training-like sequences), seen through ``paths`` only (by default everywhere). -> the loss on the repeat of
    ``held_out`` (n, 2 period), the mean of ``repeat_losses``'s per-sequence losses, and the prefix-matching score
    of every head on ``scored`` (m, seq_len) token ids (``held_out_varied``'s), (num_layers, num_heads). With
    ``removed`` empty, the trained model as it is."""
    _check_repeats(held_out)
    check_tensor("scored", scored, 2, "(m, seq_len) token ids: held_out_varied()[0], the tokens, not the pair")
    means = head_means(model, scored) if mean else None
    if means is not None and held_out.shape[1] != scored.shape[1]:
        raise ValueError(f"held_out and scored should have one length for mean ablation (the means are per position), "
                         f"got {describe(held_out)} and {describe(scored)}")  # fmt: skip
    logits, _ = ablated_forward(model, held_out, removed, means, paths)
    second = _repeat_loss(logits, held_out).mean().item()
    _, weights = ablated_forward(model, scored, removed, means, paths)
    prefix = torch.stack([prefix_matching(w, scored).mean(0) for w in weights])
    return second, prefix
