"""What each head looks at, measured (lesson 11): statistics per head as Clark et al. (2019) computed them for BERT,
the scores that find induction heads (Olsson et al. 2022), and the gates that remove heads.

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
    head_gates(num_layers, num_heads, removed)  (layers, heads) of ones with 0 at each removed (layer, head)
    strongest(scores, k)                     the k (layer, head) pairs with the highest score
    max_entropy(n)                           ln n, the entropy of uniform weights over n keys

The induction experiment of lesson 11 (training, held-out data, the phase change, ablation) is in
``attnedu.induction``. Each public function checks its arguments in one call (the checks are at the end of this
module), then the math; ``_induction_targets``, ``_prefix_matching`` and ``_head_gates`` are the unchecked versions
the package's own callers use.
"""

from __future__ import annotations

import math

import torch

from ._validate import (
    check_bool_mask,
    check_float,
    check_int,
    check_positive_int,
    check_tensor,
    describe,
)

ROW_SUM_TOLERANCE = 1e-3  # how far from 1 a real query's row of weights may sum (float32 rounding is far below it)


def _mean_over(values: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
    """values (batch, heads, query_len), counted (batch, query_len) bool -> (batch, heads): the mean over counted
    queries (0 for a sentence with none)."""
    counted = counted[:, None, :]
    kept = torch.where(counted, values, torch.zeros((), dtype=values.dtype))  # a left-out row may hold NaN
    return kept.sum(-1) / counted.sum(-1).clamp(min=1).to(values.dtype)


def attention_to(weights: torch.Tensor, targets: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """How much of its attention each real query gives to the keys in ``targets`` (batch, key_len) bool, e.g.
    [SEP] tokens: the mean over real queries i of sum_{j in targets} A[i, j]. -> (batch, heads)."""
    real = _check_attention_to(weights, targets, real)
    on_targets = (weights * targets[:, None, None, :].to(weights.dtype)).sum(-1)  # (batch, heads, query_len)
    return _mean_over(on_targets, real)


def offset_attention(weights: torch.Tensor, offset: int, real: torch.Tensor | None = None) -> torch.Tensor:
    """The weight each query i puts on the key at i + offset (offset -1: the previous token, +1: the next), the mean
    over the real queries whose i + offset is a real position. -> (batch, heads)."""
    real, offset = _check_offset_attention(weights, offset, real)
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
    offset = _check_per_head(scores, real, offset)
    if real is None:
        return scores.mean(0)
    counts = (real.sum(1) - abs(offset)).clamp(min=0).to(scores.dtype)  # (batch,)
    return (scores * counts[:, None]).sum(0) / counts.sum()


def induction_targets(tokens: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """Where an induction head looks: the keys that follow an earlier occurrence of the query's token. For a query i
    and a key j,

        target[i, j]  <=>  1 <= j <= i  and  x[j - 1] = x[i]          (x[j - 1] is an earlier copy: j - 1 < i)

    every earlier copy counts, not only the most recent one (TransformerLens's induction detection pattern: the
    duplicate-token pattern shifted one key to the right). tokens (batch, seq_len) of ids -> (batch, seq_len,
    seq_len) bool, [b, i, j]. With ``real`` (batch, seq_len) bool, True at real tokens, a target needs a real
    query, a real copy and a real key (padding never counts as a copy)."""
    real = _check_tokens(tokens, real)
    return _induction_targets(tokens, real)


def _induction_targets(tokens, real):
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
    real = _check_prefix_matching(weights, tokens, real)
    return _prefix_matching(weights, _induction_targets(tokens, real))


def _prefix_matching(weights, targets):
    counted = targets.any(-1)  # (batch, seq_len): the queries whose token occurred before
    on_targets = (weights * targets[:, None].to(weights.dtype)).sum(-1)  # (batch, heads, seq_len)
    return _mean_over(on_targets, counted)


def _prefix_matching_layers(weights: list, tokens: torch.Tensor) -> torch.Tensor:
    """``prefix_matching`` of every layer's weights (a model's, on the same ``tokens``), each the mean over the
    sequences -> (num_layers, num_heads): the tokens checked once, each layer's rows as ``prefix_matching`` checks
    them."""
    real = _check_prefix_matching(weights[0], tokens, None)
    targets = _induction_targets(tokens, real)
    for w in weights[1:]:
        _check_real_rows(w, targets.any(-1))
    return torch.stack([_prefix_matching(w, targets).mean(0) for w in weights])


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
    real, min_targets, bins = _check_target_weight_by_distance(weights, tokens, bins, min_targets, real)
    targets = _induction_targets(tokens, real)  # (batch, seq_len, seq_len)
    chosen = targets & (targets.sum(-1, keepdim=True) >= min_targets)  # (batch, i, j)
    position = torch.arange(tokens.shape[1], device=tokens.device)
    distance = position[:, None] - position[None, :]  # i - j
    result = []
    for lo, hi in bins:
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
    real = _check_best_positional_score(tokens, real)
    targets = _induction_targets(tokens, real).to(torch.float64)
    counted = targets.amax(-1).sum(-1)  # (batch,)
    share = (targets / counted[:, None, None]).mean(0)  # S, (seq_len, seq_len)
    return share.amax(-1).sum().item()


def head_gates(num_layers: int, num_heads: int, removed=()) -> torch.Tensor:
    """(num_layers, num_heads) of ones, with 0 at each (layer, head) in ``removed``: for
    ``BertEncoder(..., head_gates=...)``."""
    num_layers, num_heads, pairs = _check_head_gates(num_layers, num_heads, removed)
    return _head_gates(num_layers, num_heads, pairs)


def _head_gates(num_layers, num_heads, pairs):
    gates = torch.ones(num_layers, num_heads)
    for layer, head in pairs:
        gates[layer, head] = 0.0
    return gates


def strongest(scores: torch.Tensor, k: int = 1) -> list[tuple[int, int]]:
    """The (layer, head) pairs of the k highest entries of ``scores`` (num_layers, num_heads), highest first."""
    k = _check_strongest(scores, k)
    return [divmod(int(i), scores.shape[1]) for i in scores.flatten().topk(k).indices]


def max_entropy(n: int) -> float:
    """ln n: the entropy of uniform weights over n keys."""
    return math.log(check_positive_int("n", n, "the number of keys"))


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


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


def _check_attention_to(weights, targets, real) -> torch.Tensor:
    real = _check_weights(weights, real)
    check_bool_mask("targets", targets)
    if tuple(targets.shape) != (weights.shape[0], weights.shape[3]):
        raise ValueError(f"targets should be (batch, key_len) = {(weights.shape[0], weights.shape[3])}, got "
                         f"{describe(targets)}")  # fmt: skip
    return real


def _check_offset_attention(weights, offset, real) -> tuple[torch.Tensor, int]:
    real = _check_weights(weights, real)
    seq_len = weights.shape[-1]
    offset = check_int("offset", offset, "how far from the query the key is", -(seq_len - 1), seq_len - 1)
    return real, offset


def _check_per_head(scores, real, offset):
    check_tensor("scores", scores, 2, "(batch, heads)")
    check_float("scores", scores)
    if real is None:
        return offset
    check_bool_mask("real", real)
    if real.dim() != 2 or real.shape[0] != scores.shape[0]:
        raise ValueError(f"real should be (batch, seq_len) with batch = {scores.shape[0]}, the sentences of scores, "
                         f"got {describe(real)} for scores {describe(scores)}")  # fmt: skip
    offset = check_int("offset", offset, "the offset the scores were measured at", -real.shape[1], real.shape[1])
    if (real.sum(1) - abs(offset)).clamp(min=0).sum() == 0:
        raise ValueError(f"no sentence has a query to count: every sentence of real has at most |offset| = "
                         f"{abs(offset)} real tokens, so there is no mean")  # fmt: skip
    return offset


def _check_prefix_matching(weights, tokens, real) -> torch.Tensor:
    """-> real (all True when None): the weights, the tokens, and rows of weights where a query has a copy."""
    check_tensor("weights", weights, 4, "(batch, heads, seq_len, seq_len)")
    check_float("weights", weights)
    real = _check_tokens(tokens, real)
    targets = _induction_targets(tokens, real)
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
    return real


def _check_target_weight_by_distance(weights, tokens, bins, min_targets, real) -> tuple:
    """-> real (all True when None), min_targets, bins as a list of (lo, hi) whole numbers."""
    check_tensor("weights", weights, 4, "(batch, heads, seq_len, seq_len)")
    check_float("weights", weights)
    real = _check_tokens(tokens, real)
    targets = _induction_targets(tokens, real)  # (batch, seq_len, seq_len)
    if tuple(weights.shape[2:]) != tuple(targets.shape[1:]) or weights.shape[0] != targets.shape[0]:
        raise ValueError(f"weights should be (batch, heads, seq_len, seq_len) for tokens {describe(tokens)}, got "
                         f"{describe(weights)}")  # fmt: skip
    min_targets = check_positive_int("min_targets", min_targets, "the fewest targets a counted query has")
    _check_real_rows(weights, targets.any(-1))
    checked = []
    for pair in bins:
        lo, hi = (check_int("bins", v, "a distance i - j >= 0", 0) for v in pair)
        if hi < lo:
            raise ValueError(f"bins should be (lo, hi) pairs with lo <= hi, got {tuple(pair)}")
        checked.append((lo, hi))
    return real, min_targets, checked


def _check_best_positional_score(tokens, real) -> torch.Tensor:
    real = _check_tokens(tokens, real)
    counted = _induction_targets(tokens, real).amax(-1).sum(-1)  # (batch,)
    if bool((counted == 0).any()):
        row = int((counted == 0).nonzero()[0])
        raise ValueError(f"tokens row {row} has no token that occurred before, so it has no prefix-matching score")
    return real


def _check_head_gates(num_layers, num_heads, removed) -> tuple[int, int, list[tuple]]:
    num_layers = check_positive_int("num_layers", num_layers, "the number of layers")
    num_heads = check_positive_int("num_heads", num_heads, "heads per layer")
    pairs = _pairs(removed)
    for layer, head in pairs:
        check_int("layer", layer, "a layer, counted from 0", 0, num_layers - 1)
        check_int("head", head, "a head, counted from 0", 0, num_heads - 1)
    return num_layers, num_heads, pairs


def _check_strongest(scores, k) -> int:
    check_tensor("scores", scores, 2, "(num_layers, num_heads)")
    check_float("scores", scores)
    if bool(scores.isnan().any()):
        layer, head = (int(v) for v in scores.isnan().nonzero()[0])
        raise ValueError(
            f"scores should hold no NaN (it would rank first), got NaN at layer {layer}, head {head}; "
            "a head whose statistic had nothing to average gives NaN: find out why, or leave it out"
        )
    return check_int("k", k, "how many heads", 1, scores.numel())
