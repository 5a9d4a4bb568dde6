"""Lesson 11, 11_real_attention_heads: the galleries of ``previous_token_score``, ``attention_entropy``,
``prefix_matching_score``, ``gpt2_attention_weights`` and ``repeat_loss_without`` (CORRECT, MUTANTS, OFF_BY_ONE,
KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as tests/galleries/__init__.py describes them); REFERENCE_USE: functions that
are, or call, the package's own ``attnedu.head_scores``, ``attnedu.induction`` or ``attnedu.pretrained``, or the
checks' own helpers, which the exercises forbid; and PREDICTIONS: the graded predictions ``predicted_causal_entropy``
and ``predicted_repeat_losses``.

The correct versions are written as a learner would: with diagonals, gathers, loops or einsum. Exercises 1 to 3 run
on a decoder's padded batches (causal weights, padding before or after the tokens). GPT-2's layout and the repeat's
loss have neither padded nor unpadded test cases (KINDS_NOT_APPLICABLE): a weight matrix and a sequence of repeated
tokens have no padding. Only the repeat's loss has a mistake that only large inputs show (a window of the lesson's 15
predictions typed in, which only blocks longer than 16 show): attention weights lie in [0, 1] and nothing is
exponentiated, so for the other exercises a long sentence shows nothing a short one does not.
"""

from __future__ import annotations

import math

import torch

from attnedu import head_scores, induction, pretrained
from attnedu.checks import lesson11
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED

from .common import GENERIC, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions
# --------------------------------------------------------------------------------------------


def learner_previous_token_score(weights, real):
    below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)  # (batch, heads, seq_len - 1): A[i, i - 1]
    counted = (real[:, 1:] & real[:, :-1]).float()  # query i and key i - 1 both real, padding on either side
    return (below * counted[:, None]).sum(-1) / counted.sum(-1)[:, None]


def learner_previous_token_score_loop(weights, real):
    batch, num_heads, seq_len, _ = weights.shape
    out = torch.zeros(batch, num_heads)
    for b in range(batch):
        queries = [i for i in range(1, seq_len) if real[b, i] and real[b, i - 1]]
        for h in range(num_heads):
            out[b, h] = sum(weights[b, h, i, i - 1] for i in queries) / len(queries)
    return out


def learner_previous_token_score_gather(weights, real):
    seq_len = weights.shape[-1]
    keys = (torch.arange(seq_len) - 1).clamp(min=0)
    picked = weights.gather(-1, keys.expand(*weights.shape[:-1])[..., None])[..., 0]  # (batch, heads, seq_len)
    use = real & real.roll(1, dims=1)  # the token before is real too
    use[:, 0] = False
    return (picked * use[:, None]).sum(-1) / use.sum(-1, keepdim=True)


def learner_attention_entropy(weights, real):
    terms = torch.where(weights > 0, weights * torch.log(weights), torch.zeros_like(weights))
    per_query = -terms.sum(-1)
    counted = real.float()[:, None, :]
    return (per_query * counted).sum(-1) / counted.sum(-1)


def learner_attention_entropy_xlogy(weights, real):
    per_query = -torch.special.xlogy(weights, weights).sum(-1)  # xlogy(0, 0) = 0
    return torch.stack([per_query[b][:, real[b]].mean(-1) for b in range(len(real))])


def learner_attention_entropy_nan_to_zero(weights, real):
    """Computes 0 * log(0) = NaN, then replaces exactly those terms (a learner who knows where they come from)."""
    terms = weights * weights.log()
    terms = torch.where(weights == 0, torch.zeros_like(terms), terms)
    h = -terms.sum(3)
    return torch.einsum("bhq,bq->bh", h, real.float()) / real.sum(1, keepdim=True)


def learner_prefix_matching_score(weights, tokens, real):
    n = tokens.shape[1]
    same = (tokens[:, :, None] == tokens[:, None, :]) & real[:, :, None] & real[:, None, :]
    same &= torch.ones(n, n, dtype=torch.bool).tril(-1)  # an earlier position
    targets = torch.zeros_like(same)
    targets[:, :, 1:] = same[:, :, :-1] & real[:, None, 1:]  # the key after it
    on = (weights * targets[:, None]).sum(-1)
    counted = targets.any(-1).float()[:, None]
    return (on * counted).sum(-1) / counted.sum(-1)


def learner_prefix_matching_score_loop(weights, tokens, real):
    batch, num_heads, n, _ = weights.shape
    out = torch.zeros(batch, num_heads)
    for b in range(batch):
        scores, count = torch.zeros(num_heads), 0
        for i in range(n):
            keys = [s + 1 for s in range(i) if real[b, i] and real[b, s] and tokens[b, s] == tokens[b, i]]
            if keys:
                scores += weights[b, :, i, keys].sum(-1)
                count += 1
        out[b] = scores / count
    return out


def learner_prefix_matching_score_einsum(weights, tokens, real):
    shifted = torch.cat([torch.full_like(tokens[:, :1], -1), tokens[:, :-1]], 1)  # the token before each key
    key_ok = torch.cat([torch.zeros_like(real[:, :1]), real[:, :-1]], 1) & real
    match = (tokens[:, :, None] == shifted[:, None, :]) & key_ok[:, None, :] & real[:, :, None]
    match = match & torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool).tril()  # key j <= i
    on = torch.einsum("bhij,bij->bhi", weights, match.float())
    has = match.any(-1).float()
    return torch.einsum("bhi,bi->bh", on, has) / has.sum(-1)[:, None]


def learner_gpt2_attention_weights(c_attn_weight, c_proj_weight):
    d_model = c_proj_weight.shape[-1]
    W_q, W_k, W_v = c_attn_weight.split(d_model, dim=-1)
    return W_q.transpose(-2, -1), W_k.transpose(-2, -1), W_v.transpose(-2, -1), c_proj_weight.transpose(-2, -1)


def learner_gpt2_attention_weights_slices(c_attn_weight, c_proj_weight):
    d = c_attn_weight.shape[1]
    return tuple(c_attn_weight[:, :, k * d : (k + 1) * d].permute(0, 2, 1) for k in range(3)) + (
        c_proj_weight.permute(0, 2, 1),
    )


def learner_repeat_loss_without(model, tokens, removed):
    gates = torch.ones(len(model.layers), model.layers[0].num_heads)
    for layer, head in removed:
        gates[layer, head] = 0.0
    logits, _ = model(tokens, gates)
    period = tokens.shape[1] // 2
    losses = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
    return losses[:, period:].mean(-1)


def learner_repeat_loss_without_gather(model, tokens, removed):
    layers, per_layer = len(model.layers), model.layers[0].num_heads
    gates = torch.tensor([[0.0 if (l, h) in removed else 1.0 for h in range(per_layer)] for l in range(layers)])
    with torch.no_grad():
        log_p = model(tokens, gates)[0].log_softmax(-1)  # (n, 2 period, vocab)
    n = tokens.shape[1] // 2
    picked = log_p[:, n : 2 * n - 1].gather(-1, tokens[:, n + 1 :, None])[..., 0]  # token t + 1 at t
    return -picked.mean(-1)


CORRECT = {
    "previous_token_score": [
        learner_previous_token_score,
        learner_previous_token_score_loop,
        learner_previous_token_score_gather,
    ],
    "attention_entropy": [
        learner_attention_entropy,
        learner_attention_entropy_xlogy,
        learner_attention_entropy_nan_to_zero,
    ],
    "prefix_matching_score": [
        learner_prefix_matching_score,
        learner_prefix_matching_score_loop,
        learner_prefix_matching_score_einsum,
    ],
    "gpt2_attention_weights": [learner_gpt2_attention_weights, learner_gpt2_attention_weights_slices],
    "repeat_loss_without": [learner_repeat_loss_without, learner_repeat_loss_without_gather],
}

REFERENCE_USE = [
    ("previous_token_score", head_scores.previous_token_score),
    ("previous_token_score", lambda w, r: head_scores.offset_attention(w, -1, r)),
    ("attention_entropy", lambda w, r: head_scores.attention_entropy(w, r)),
    ("prefix_matching_score", head_scores.prefix_matching),
    ("prefix_matching_score", lambda w, t, r: (w * head_scores.induction_targets(t, r)[:, None]).sum(-1).mean(-1)),
    ("gpt2_attention_weights", pretrained.gpt2_attention_weights),
    ("repeat_loss_without", induction.repeat_losses),
    (
        "repeat_loss_without",
        lambda m, t, r: (
            learner_repeat_loss_without(m, t, [])  # the gates from the package
            if not r
            else _with_package_gates(m, t, r)
        ),
    ),
    # the checks' own variant helpers, which compute the reference with their default arguments
    ("previous_token_score", lambda w, r: lesson11._offset_score(w, r)),
    ("prefix_matching_score", lambda w, t, r: lesson11._prefix(w, t, r)),
    ("gpt2_attention_weights", lambda a, p: lesson11._gpt2(a, p)),
    ("repeat_loss_without", lambda m, t, r: lesson11._repeat(m, t, r)),
]


def _with_package_gates(model, tokens, removed):
    gates = head_scores.head_gates(len(model.layers), model.layers[0].num_heads, removed)
    period = tokens.shape[1] // 2
    logits, _ = model(tokens, gates)
    return induction.in_context_losses(logits, tokens, period)[1] * torch.ones(tokens.shape[0])


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------


def _diag_mean(weights, real, offset, first, shift=0):
    values = torch.diagonal(weights, offset=offset, dim1=-2, dim2=-1)
    n = values.shape[-1]
    counted = real[:, first : first + n].float()
    return (values * counted[:, None]).sum(-1) / (counted.sum(-1) + shift).clamp(min=1)[:, None]


def _pairs_mean(weights, real, back, shift=0):
    """A[i, i - back] over the queries i where i and i - back are both real (back 0: the real queries)."""
    values = torch.diagonal(weights, offset=-back, dim1=-2, dim2=-1)
    n = values.shape[-1]
    counted = (real[:, back : back + n] & real[:, :n]).float()
    return (values * counted[:, None]).sum(-1) / (counted.sum(-1) + shift).clamp(min=1)[:, None]


def pt_next_token(weights, real):
    return _diag_mean(weights, real, 1, 1)  # A[i, i + 1]: 0 in a causal model


def pt_itself(weights, real):
    return _pairs_mean(weights, real, 0)


def pt_two_back(weights, real):
    return _pairs_mean(weights, real, 2)


def pt_padding_counted(weights, real):
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(-1)


def pt_divided_by_length(weights, real):
    return _pairs_mean(weights, real, 1, shift=1)


def pt_summed(weights, real):
    return (torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1) * real[:, None, 1:]).sum(-1)


def pt_encoder_rule(weights, real):
    """The lesson's rule, real queries i >= 1, which holds for padding after the tokens only."""
    return _diag_mean(weights, real, -1, 1)


def en_bits(weights, real):
    return learner_attention_entropy(weights, real) / math.log(2)


def en_no_minus(weights, real):
    return -learner_attention_entropy(weights, real)


def en_padding_queries(weights, real):
    return -torch.special.xlogy(weights, weights).sum(-1).mean(-1)


def en_summed(weights, real):
    per_query = -torch.special.xlogy(weights, weights).sum(-1)
    return (per_query * real[:, None]).sum(-1)


def en_columns(weights, real):
    per_key = -torch.special.xlogy(weights, weights).sum(-2)
    return (per_key * real[:, None]).sum(-1) / real.sum(-1, keepdim=True)


def en_one_more(weights, real):
    per_query = -torch.special.xlogy(weights, weights).sum(-1)
    return (per_query * real[:, None]).sum(-1) / (real.sum(-1, keepdim=True) + 1)


def en_one_fewer(weights, real):
    per_query = -torch.special.xlogy(weights, weights).sum(-1)
    return (per_query * real[:, None]).sum(-1) / (real.sum(-1, keepdim=True) - 1)


def _copies(tokens, real, own=False):
    """[b, i, s]: position s < i (s <= i with ``own``) holds query i's token, both real."""
    n = tokens.shape[1]
    same = (tokens[:, :, None] == tokens[:, None, :]) & real[:, :, None] & real[:, None, :]
    return same & torch.ones(n, n, dtype=torch.bool).tril(0 if own else -1)


def _after(weights, copies, shift=1):
    """(batch, heads, n): the weight on key s + shift for every copy s of each query."""
    n = copies.shape[-1]
    keys = torch.zeros_like(copies)
    if shift < n:
        keys[:, :, shift:] = copies[:, :, : n - shift]
    return (weights * keys[:, None]).sum(-1)


def _mean_over_found(on, found, every=None):
    counted = (found if every is None else every).float()[:, None]
    return (on * counted).sum(-1) / counted.sum(-1).clamp(min=1)


def _one_occurrence(weights, tokens, real, which):
    """The weight after one earlier occurrence per query (``which`` -1: the most recent, 0: the first), looped."""
    out = torch.zeros(weights.shape[:2])
    for b in range(tokens.shape[0]):
        values = []
        for i in range(tokens.shape[1]):
            earlier = [s for s in range(i) if real[b, i] and real[b, s] and tokens[b, s] == tokens[b, i]]
            if earlier:
                values.append(weights[b, :, i, earlier[which] + 1])
        out[b] = torch.stack(values).mean(0)
    return out


def pm_latest_only(weights, tokens, real):
    return _one_occurrence(weights, tokens, real, -1)


def pm_first_only(weights, tokens, real):
    return _one_occurrence(weights, tokens, real, 0)


def pm_the_duplicates(weights, tokens, real):
    copies = _copies(tokens, real)
    return _mean_over_found(_after(weights, copies, shift=0), copies.any(-1))


def pm_keys_before_the_query(weights, tokens, real):
    """The targets j < i only: a token that follows itself (key j = i) left out."""
    n = tokens.shape[1]
    same = (tokens[:, :, None] == tokens[:, None, :]) & real[:, :, None] & real[:, None, :]
    targets = torch.zeros_like(same)
    targets[:, :, 1:] = same[:, :, :-1] & real[:, None, 1:]  # key j after an occurrence at j - 1
    targets &= torch.ones(n, n, dtype=torch.bool).tril(-1)  # j < i
    counted = targets.any(-1).float()[:, None]
    return ((weights * targets[:, None]).sum(-1) * counted).sum(-1) / counted.sum(-1).clamp(min=1)


def pm_two_after(weights, tokens, real):
    copies = _copies(tokens, real)
    return _mean_over_found(_after(weights, copies, shift=2), copies.any(-1))


def pm_every_real_query(weights, tokens, real):
    copies = _copies(tokens, real)
    return _mean_over_found(_after(weights, copies), copies.any(-1), every=real)


def pm_own_position(weights, tokens, real):
    copies = _copies(tokens, real, own=True)  # s <= i: the query is its own copy
    return _mean_over_found(_after(weights, copies), copies.any(-1))


def pm_padding_as_tokens(weights, tokens, real):
    everything = torch.ones_like(real)
    copies = _copies(tokens, everything)
    return _mean_over_found(_after(weights, copies), copies.any(-1))


def pm_mean_over_copies(weights, tokens, real):
    copies = _copies(tokens, real)
    on = _after(weights, copies) / copies.sum(-1).clamp(min=1)[:, None]
    return _mean_over_found(on, copies.any(-1))


def pm_summed(weights, tokens, real):
    copies = _copies(tokens, real)
    return (_after(weights, copies) * copies.any(-1)[:, None]).sum(-1)


def pm_padding_by_id(weights, tokens, real):
    """Padding found by its id (0), not by real: right until a batch pads with an id its sentences use."""
    return learner_prefix_matching_score(weights, tokens, tokens != 0)


def pm_rolled(weights, tokens, real):
    """The token before each key by torch.roll, which wraps: key 0 is compared with the last position."""
    n = tokens.shape[1]
    before = torch.roll(tokens, shifts=1, dims=1)
    targets = (before[:, None, :] == tokens[:, :, None]) & real[:, :, None] & real[:, None, :]
    targets &= torch.ones(n, n, dtype=torch.bool).tril()
    on = (weights * targets[:, None]).sum(-1)
    has = targets.any(-1).float()[:, None]
    return (on * has).sum(-1) / has.sum(-1)


def pm_rolled_both_masks(weights, tokens, real):
    """torch.roll for the tokens and for real: key 0 is compared with the last position when that one is real."""
    n = tokens.shape[1]
    before, before_real = tokens.roll(1, 1), real.roll(1, 1)
    targets = (before[:, None, :] == tokens[:, :, None]) & real[:, :, None] & (real & before_real)[:, None, :]
    targets &= torch.ones(n, n, dtype=torch.bool).tril()
    has = targets.any(-1).float()[:, None]
    return ((weights * targets[:, None]).sum(-1) * has).sum(-1) / has.sum(-1)


def g2_no_transpose(c_attn, c_proj):
    d = c_proj.shape[-1]
    return (*c_attn.split(d, -1), c_proj)


def g2_proj_kept(c_attn, c_proj):
    return (*learner_gpt2_attention_weights(c_attn, c_proj)[:3], c_proj)


def g2_only_proj(c_attn, c_proj):
    d = c_proj.shape[-1]
    return (*c_attn.split(d, -1), c_proj.mT)


def g2_kqv(c_attn, c_proj):
    W_q, W_k, W_v, W_o = learner_gpt2_attention_weights(c_attn, c_proj)
    return W_k, W_q, W_v, W_o


def g2_one_late(c_attn, c_proj):
    return learner_gpt2_attention_weights(torch.roll(c_attn, -1, -1), c_proj)


def g2_one_early(c_attn, c_proj):
    return learner_gpt2_attention_weights(torch.roll(c_attn, 1, -1), c_proj)


def pt_mask_from_keys(weights, real):
    below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)
    counted = real[:, :-1].float()  # the mask of the keys i - 1, not of the queries i
    return (below * counted[:, None]).sum(-1) / counted.sum(-1)[:, None]


def en_mean_over_keys(weights, real):
    per_query = -torch.special.xlogy(weights, weights).mean(-1)
    return (per_query * real[:, None]).sum(-1) / real.sum(-1, keepdim=True)


def g2_reshape_three(c_attn, c_proj):
    layers, d = c_proj.shape[0], c_proj.shape[-1]
    W = c_attn.reshape(layers, 3, d, d)
    return W[:, 0].mT, W[:, 1].mT, W[:, 2].mT, c_proj.mT


def _losses(model, tokens, gates):
    logits, _ = model(tokens, gates)
    return torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")


def _gates(model, removed, swap=False):
    gates = torch.ones(len(model.layers), model.layers[0].num_heads)
    for layer, head in removed:
        gates[(head, layer) if swap else (layer, head)] = 0.0
    return gates


def rl_not_removed(model, tokens, removed):
    return _losses(model, tokens, None)[:, tokens.shape[1] // 2 :].mean(-1)


def rl_swapped(model, tokens, removed):
    return _losses(model, tokens, _gates(model, removed, swap=True))[:, tokens.shape[1] // 2 :].mean(-1)


def rl_inverted_gates(model, tokens, removed):
    gates = torch.zeros(len(model.layers), model.layers[0].num_heads)
    for layer, head in removed:
        gates[layer, head] = 1.0  # only the heads in removed kept
    return _losses(model, tokens, gates)[:, tokens.shape[1] // 2 :].mean(-1)


def rl_one_early(model, tokens, removed):
    return _losses(model, tokens, _gates(model, removed))[:, tokens.shape[1] // 2 - 1 :].mean(-1)


def rl_one_late(model, tokens, removed):
    return _losses(model, tokens, _gates(model, removed))[:, tokens.shape[1] // 2 + 1 :].mean(-1)


def rl_everywhere(model, tokens, removed):
    return _losses(model, tokens, _gates(model, removed)).mean(-1)


def rl_first_block(model, tokens, removed):
    return _losses(model, tokens, _gates(model, removed))[:, : tokens.shape[1] // 2 - 1].mean(-1)


def rl_same_position(model, tokens, removed):
    logits, _ = model(tokens, _gates(model, removed))
    p = tokens.shape[1] // 2
    losses = torch.nn.functional.cross_entropy(logits[:, p + 1 :].transpose(1, 2), tokens[:, p + 1 :], reduction="none")
    return losses.mean(-1)


def rl_bits(model, tokens, removed):
    return learner_repeat_loss_without(model, tokens, removed) / math.log(2)


def g2_dot_T(c_attn, c_proj):
    """``.T`` on the (layers, d, d) slices reverses all three axes: every output has the same wrong shape."""
    d = c_proj.shape[-1]
    return tuple(w.permute(2, 1, 0) for w in c_attn.split(d, -1)) + (c_proj.permute(2, 1, 0),)


MUTANTS = [
    ("previous_token_score", pt_next_token, "the *next* token"),
    ("previous_token_score", pt_itself, "on itself"),
    ("previous_token_score", pt_two_back, "two tokens back"),
    ("previous_token_score", pt_padding_counted, "padding queries were counted"),
    ("previous_token_score", pt_divided_by_length, "one more than the number of queries that have a previous"),
    ("previous_token_score", pt_summed, "summed over the queries"),
    ("attention_entropy", en_bits, "in bits"),
    ("attention_entropy", en_no_minus, "minus sign"),
    ("attention_entropy", en_padding_queries, "padding queries were counted"),
    ("attention_entropy", en_summed, "summed the entropies"),
    ("attention_entropy", en_columns, "over the queries (dim -2)"),
    ("attention_entropy", en_one_more, "one more than the number of real queries"),
    ("attention_entropy", en_one_fewer, "one fewer than the number of real queries"),
    ("prefix_matching_score", pm_latest_only, "only the most recent earlier occurrence"),
    ("prefix_matching_score", pm_first_only, "only the first occurrence"),
    ("prefix_matching_score", pm_the_duplicates, "the earlier occurrences themselves"),
    ("prefix_matching_score", pm_two_after, "two tokens after each earlier occurrence"),
    ("prefix_matching_score", pm_keys_before_the_query, "left out j = i"),
    ("prefix_matching_score", pm_every_real_query, "you divided by every real query"),
    ("prefix_matching_score", pm_own_position, "own position as an earlier occurrence"),
    ("prefix_matching_score", pm_padding_as_tokens, "padding was counted as tokens"),
    ("prefix_matching_score", pm_mean_over_copies, "averaged the weight over a query's earlier occurrences"),
    ("prefix_matching_score", pm_summed, "summed over the queries"),
    ("prefix_matching_score", pm_padding_by_id, "you told padding from tokens by its id"),
    ("prefix_matching_score", pm_rolled, "your shift wrapped around"),
    ("prefix_matching_score", pm_rolled_both_masks, "your shift wrapped around"),
    ("previous_token_score", pt_encoder_rule, "the encoder's rule for padding *after* the tokens"),
    ("gpt2_attention_weights", g2_no_transpose, "nothing is transposed"),
    ("gpt2_attention_weights", g2_proj_kept, "W_o is not transposed"),
    ("gpt2_attention_weights", g2_only_proj, "W_q, W_k and W_v are not transposed"),
    ("gpt2_attention_weights", g2_kqv, "wrong order"),
    ("gpt2_attention_weights", g2_one_late, "one column too late"),
    ("gpt2_attention_weights", g2_one_early, "one column too early"),
    ("gpt2_attention_weights", g2_dot_T, "`W_q`, `W_k`, `W_v` and `W_o` each has the wrong shape"),
    ("previous_token_score", pt_mask_from_keys, "previous *key* is real"),
    ("attention_entropy", en_mean_over_keys, "averaged the terms A ln A over the keys"),
    ("gpt2_attention_weights", g2_reshape_three, "by reshaping it to (layers, 3, d_model, d_model)"),
    ("repeat_loss_without", rl_not_removed, "the heads were not removed"),
    ("repeat_loss_without", rl_swapped, "read as (head, layer)"),
    ("repeat_loss_without", rl_inverted_gates, "your gates are the wrong way round"),
    ("repeat_loss_without", rl_one_early, "starts one position early"),
    ("repeat_loss_without", rl_one_late, "starts one position late"),
    ("repeat_loss_without", rl_everywhere, "every position of the sequence"),
    ("repeat_loss_without", rl_first_block, "the first block, not the repeat"),
    ("repeat_loss_without", rl_same_position, "token at that same position"),
    ("repeat_loss_without", rl_bits, "in bits"),
]

# the key one too far back and one too near; the count one too high and one too low; the first query of the repeat
# one too early and one too late; GPT-2's columns shifted one either way
OFF_BY_ONE = {
    "previous_token_score": (pt_itself, pt_two_back),
    "attention_entropy": (en_one_more, en_one_fewer),
    "prefix_matching_score": (pm_two_after, pm_the_duplicates),
    "gpt2_attention_weights": (g2_one_late, g2_one_early),
    "repeat_loss_without": (rl_one_early, rl_one_late),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def pt_fast_path_without_padding(weights, real):
    """A fast path for batches with no padding, which forgot that query 0 has no previous token."""
    if bool(real.all()):
        return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).sum(-1) / weights.shape[-1]
    return learner_previous_token_score(weights, real)


def pt_lengths_from_the_first_sentence(weights, real):
    """Every sentence cut to the first one's length."""
    n = int(real[0].sum())
    return torch.diagonal(weights[..., :n, :n], offset=-1, dim1=-2, dim2=-1).mean(-1)


def en_padded_shortcut(weights, real):
    """With padding, every query's entropy averaged, padding queries included (a shortcut for padded batches)."""
    if bool(real.all()):
        return learner_attention_entropy(weights, real)
    return -torch.special.xlogy(weights, weights).sum(-1).mean(-1)


def pm_without_the_mask(weights, tokens, real):
    """The score written without `real`: padding ids repeat each other, and their queries count."""
    return learner_prefix_matching_score(weights, tokens, torch.ones_like(real))


def pm_fast_path_without_padding(weights, tokens, real):
    """A fast path for batches with no padding that keeps only the most recent earlier occurrence."""
    if not bool(real.all()):
        return learner_prefix_matching_score(weights, tokens, real)
    n = tokens.shape[1]
    same = (tokens[:, :, None] == tokens[:, None, :]) & torch.ones(n, n, dtype=torch.bool).tril(-1)
    latest = torch.where(same, torch.arange(n), -1).amax(-1)  # (batch, n), -1 where none
    found = latest >= 0
    picked = weights.gather(-1, (latest + 1).clamp(max=n - 1)[:, None, :, None].expand(-1, weights.shape[1], -1, 1))
    return (picked[..., 0] * found[:, None]).sum(-1) / found.sum(-1, keepdim=True)


def en_fast_path_without_padding(weights, real):
    if bool(real.all()):
        return (-torch.special.xlogy(weights, weights).sum(-1)).mean(-1) / math.log(2)
    return learner_attention_entropy(weights, real)


def rl_fifteen_predictions(model, tokens, removed):
    """The lesson's blocks of 16 make 15 predictions on the repeat: typed in, right for any block up to 16 tokens."""
    p = tokens.shape[1] // 2
    return _losses(model, tokens, _gates(model, removed))[:, p : p + 15].mean(-1)


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("previous_token_score", pt_lengths_from_the_first_sentence, PADDED, "the sentences at batch indices"),
    ("previous_token_score", pt_fast_path_without_padding, UNPADDED, "no padding"),
    ("attention_entropy", en_padded_shortcut, PADDED, "padding queries were counted"),
    ("prefix_matching_score", pm_without_the_mask, PADDED, "padding was counted as tokens"),
    ("prefix_matching_score", pm_fast_path_without_padding, UNPADDED, "no padding"),
    ("attention_entropy", en_fast_path_without_padding, UNPADDED, "no padding"),
    ("repeat_loss_without", rl_fifteen_predictions, LARGE, "large inputs"),
]

_NO_LARGE = (
    "attention weights lie in [0, 1] and nothing is exponentiated: a long sentence shows no mistake a short one hides"
)
KINDS_NOT_APPLICABLE = {
    **{(name, LARGE): _NO_LARGE for name in CORRECT if name != "repeat_loss_without"},
    **{("repeat_loss_without", kind): "sequences of a block repeated have no padding" for kind in (PADDED, UNPADDED)},
    **{("gpt2_attention_weights", kind): "weight matrices have no padding" for kind in (PADDED, UNPADDED)},
}


# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the variants
# --------------------------------------------------------------------------------------------


def ptb_superdiagonal_loop(weights, real):
    out = torch.zeros(weights.shape[:2])
    for b in range(weights.shape[0]):
        n = int(real[b].sum())
        out[b] = torch.stack([weights[b, :, i, i + 1] for i in range(n - 1)], -1).mean(-1)
    return out


def ptb_eye_shift(weights, real):
    seq_len = weights.shape[-1]
    mask = torch.eye(seq_len).roll(1, dims=1)  # ones at (i, i + 1) and (seq_len - 1, 0)
    return (weights * mask).sum(-1).mean(-1)


def ptb_max_weight(weights, real):
    return torch.diagonal(weights, -1, -2, -1).amax(-1)


def ptb_mean_over_heads(weights, real):
    scores = torch.diagonal(weights, -1, -2, -1)
    return scores.mean(1, keepdim=True).expand(-1, weights.shape[1], -1).mean(-1)


def ptb_with_first_row(weights, real):
    picked = torch.cat([weights[..., :1, 0], torch.diagonal(weights, -1, -2, -1)], -1)
    return (picked * real[:, None]).sum(-1) / real.sum(-1, keepdim=True)


def ptb_argmax_share(weights, real):
    looks_back = weights.argmax(-1) == torch.arange(weights.shape[-1]) - 1
    use = real.clone()
    use[:, 0] = False
    return (looks_back & use[:, None]).sum(-1) / use.sum(-1, keepdim=True)


def enb_log10(weights, real):
    h = -(weights * torch.log10(weights.clamp_min(1e-30))).sum(-1)
    return (h * real[:, None]).sum(-1) / real.sum(-1, keepdim=True)


def enb_epsilon_inside(weights, real):
    h = -(weights * torch.log(weights + 1e-3)).sum(-1)
    return (h * real[:, None]).sum(-1) / real.sum(-1, keepdim=True)


def enb_max_entropy_normalised(weights, real):
    h = -torch.special.xlogy(weights, weights).sum(-1)
    h = h / torch.log(real.sum(-1).float())[:, None, None]
    return (h * real[:, None]).sum(-1) / real.sum(-1, keepdim=True)


def enb_entropy_of_mean_row(weights, real):
    mean_row = (weights * real[:, None, :, None]).sum(-2) / real.sum(-1)[:, None, None]
    return -torch.special.xlogy(mean_row, mean_row).sum(-1)


def enb_squared(weights, real):
    h = -(weights**2 * torch.log(weights.clamp_min(1e-30))).sum(-1)
    return (h * real[:, None]).sum(-1) / real.sum(-1, keepdim=True)


def enb_nan_to_num(weights, real):
    h = torch.nan_to_num(-(weights * weights.log()), nan=0.0).sum(-1)
    return h.mean(-1)


def pmb_period_from_latest(weights, tokens, real):
    """The lesson's blocks' formula, A[i, i - p + 1], with p the distance back to the most recent copy."""
    out = torch.zeros(weights.shape[:2])
    for b in range(len(tokens)):
        rows = []
        for i in range(tokens.shape[1]):
            copies = [d for d in range(1, i + 1) if real[b, i] and real[b, i - d] and tokens[b, i - d] == tokens[b, i]]
            back = copies[0] if copies else None
            if back is not None:
                rows.append(weights[b, :, i, i - back + 1])
        out[b] = sum(rows) / len(rows)
    return out


def pmb_max_over_targets(weights, tokens, real):
    n = tokens.shape[1]
    same = (tokens[:, :, None] == tokens[:, None, :]) & real[:, :, None] & real[:, None, :]
    same &= torch.ones(n, n, dtype=torch.bool).tril(-1)
    targets = torch.cat([torch.zeros_like(same[..., :1]), same[..., :-1]], -1)
    best = (weights * targets[:, None]).amax(-1)
    has = targets.any(-1)[:, None].float()
    return (best * has).sum(-1) / has.sum(-1)


def pmb_matches_previous_token(weights, tokens, real):
    n = tokens.shape[1]
    before = torch.cat([torch.full_like(tokens[:, :1], -1), tokens[:, :-1]], 1)  # the token before each position
    match = (before[:, :, None] == before[:, None, :]) & real[:, :, None] & real[:, None, :]
    match &= torch.ones(n, n, dtype=torch.bool).tril(-1)
    has = match.any(-1)[:, None].float()
    return ((weights * match[:, None]).sum(-1) * has).sum(-1) / has.sum(-1).clamp(min=1)


def pmb_transposed(weights, tokens, real):
    return learner_prefix_matching_score(weights.transpose(-1, -2), tokens, real)


def pmb_mean_over_batch(weights, tokens, real):
    return learner_prefix_matching_score(weights, tokens, real).mean(0, keepdim=True).expand(len(tokens), -1)


def pmb_any_other_copy(weights, tokens, real):
    """Copies anywhere in the sentence, later ones too (their keys lie in the future, with weight 0)."""
    n = tokens.shape[1]
    same = (tokens[:, :, None] == tokens[:, None, :]) & real[:, :, None] & real[:, None, :]
    same &= ~torch.eye(n, dtype=torch.bool)
    targets = torch.zeros_like(same)
    targets[:, :, 1:] = same[:, :, :-1]
    has = same.any(-1)[:, None].float()
    return ((weights * targets[:, None]).sum(-1) * has).sum(-1) / has.sum(-1)


def g2b_dot_T(c_attn, c_proj):
    d = c_proj.shape[-1]
    return tuple(w.permute(2, 1, 0) for w in c_attn.split(d, -1)) + (c_proj.permute(2, 1, 0),)


def g2b_chunk_rows(c_attn, c_proj):
    q, k, v = c_attn.transpose(-2, -1).chunk(3, dim=-2)
    return q.transpose(-2, -1), k.transpose(-2, -1), v.transpose(-2, -1), c_proj.transpose(-2, -1)


def g2b_reshape(c_attn, c_proj):
    layers, d, _ = c_attn.shape
    qkv = c_attn.reshape(layers, d, d, 3)  # interleaved, not side by side
    return qkv[..., 0].mT, qkv[..., 1].mT, qkv[..., 2].mT, c_proj.mT


def g2b_v_first(c_attn, c_proj):
    d = c_proj.shape[-1]
    v, q, k = c_attn.split(d, -1)
    return q.mT, k.mT, v.mT, c_proj.mT


def g2b_proj_from_attn(c_attn, c_proj):
    d = c_proj.shape[-1]
    q, k, v = c_attn.split(d, -1)
    return q.mT, k.mT, v.mT, v.mT


def g2b_contiguous_view(c_attn, c_proj):
    d = c_proj.shape[-1]
    return tuple(w.contiguous().view(w.shape[0], d, d) for w in c_attn.split(d, -1)) + (c_proj.mT,)


def rlb_inverted_gates(model, tokens, removed):
    gates = torch.zeros(len(model.layers), model.layers[0].num_heads)  # 1 at the removed heads: the others removed
    for layer, head in removed:
        gates[layer, head] = 1.0
    return (
        learner_repeat_loss_without(model, tokens, [])
        if not removed
        else _losses(model, tokens, gates)[:, tokens.shape[1] // 2 :].mean(-1)
    )


def rlb_probability(model, tokens, removed):
    logits, _ = model(tokens, _gates(model, removed))
    p = tokens.shape[1] // 2
    right = logits[:, :-1].softmax(-1).gather(-1, tokens[:, 1:, None])[..., 0]
    return 1 - right[:, p:].mean(-1)


def rlb_batch_mean(model, tokens, removed):
    return learner_repeat_loss_without(model, tokens, removed).mean()


def rlb_whole_repeat_same_position(model, tokens, removed):
    logits, _ = model(tokens, _gates(model, removed))
    p = tokens.shape[1] // 2
    return torch.stack([torch.nn.functional.cross_entropy(logits[b, p:], tokens[b, p:]) for b in range(len(tokens))])


def rlb_whole_layer(model, tokens, removed):
    gates = torch.ones(len(model.layers), model.layers[0].num_heads)
    for layer, _ in removed:
        gates[layer] = 0.0  # every head of the layer, not the one named
    return _losses(model, tokens, gates)[:, tokens.shape[1] // 2 :].mean(-1)


def rlb_softmax_over_positions(model, tokens, removed):
    logits, _ = model(tokens, _gates(model, removed))
    log_p = logits.log_softmax(1)  # over the positions, not the vocabulary
    p = tokens.shape[1] // 2
    return -log_p[:, p:-1].gather(-1, tokens[:, p + 1 :, None])[..., 0].mean(-1)


def rlb_error_rate(model, tokens, removed):
    logits, _ = model(tokens, _gates(model, removed))
    p = tokens.shape[1] // 2
    return (logits[:, p:-1].argmax(-1) != tokens[:, p + 1 :]).float().mean(-1)


BUGS = [
    ("previous_token_score", ptb_superdiagonal_loop, "the *next* token"),
    ("previous_token_score", ptb_eye_shift, GENERIC),
    ("previous_token_score", ptb_max_weight, GENERIC),
    ("previous_token_score", ptb_mean_over_heads, GENERIC),
    ("previous_token_score", ptb_with_first_row, GENERIC),
    ("previous_token_score", ptb_argmax_share, GENERIC),
    ("attention_entropy", enb_log10, GENERIC),
    ("attention_entropy", enb_epsilon_inside, GENERIC),
    ("attention_entropy", enb_max_entropy_normalised, GENERIC),
    ("attention_entropy", enb_entropy_of_mean_row, GENERIC),
    ("attention_entropy", enb_squared, GENERIC),
    ("attention_entropy", enb_nan_to_num, "padding queries were counted"),
    ("prefix_matching_score", pmb_period_from_latest, "only the most recent earlier occurrence"),
    ("prefix_matching_score", pmb_max_over_targets, GENERIC),
    ("prefix_matching_score", pmb_matches_previous_token, GENERIC),
    ("prefix_matching_score", pmb_transposed, GENERIC),
    ("prefix_matching_score", pmb_mean_over_batch, GENERIC),
    ("prefix_matching_score", pmb_any_other_copy, GENERIC),
    ("gpt2_attention_weights", g2b_dot_T, GENERIC),
    ("gpt2_attention_weights", g2b_chunk_rows, "W_q, W_k and W_v are not transposed"),
    ("gpt2_attention_weights", g2b_reshape, GENERIC),
    ("gpt2_attention_weights", g2b_v_first, "wrong order"),
    ("gpt2_attention_weights", g2b_proj_from_attn, GENERIC),
    ("gpt2_attention_weights", g2b_contiguous_view, "not transposed"),
    ("repeat_loss_without", rlb_inverted_gates, GENERIC),
    ("repeat_loss_without", rlb_probability, GENERIC),
    ("repeat_loss_without", rlb_batch_mean, GENERIC),
    ("repeat_loss_without", rlb_whole_repeat_same_position, GENERIC),
    ("repeat_loss_without", rlb_whole_layer, GENERIC),
    ("repeat_loss_without", rlb_softmax_over_positions, GENERIC),
    ("repeat_loss_without", rlb_error_rate, GENERIC),
]


# --------------------------------------------------------------------------------------------
# The graded predictions: predicted_causal_entropy (exercise 2) and predicted_repeat_losses (exercise 5)
# --------------------------------------------------------------------------------------------


def ce_by_formula():
    return sum(math.log(i + 1) for i in range(8)) / 8  # query i sees i + 1 keys


def ce_rounded():
    return 1.33


def ce_as_tensor():
    return torch.tensor(math.lgamma(9) / 8)


def ce_encoder():
    return math.log(8)


def ce_one_key_too_many():
    return math.lgamma(10) / 8  # query i seeing i + 2 keys: ln 2 .. ln 9


def ce_one_key_too_few():
    return math.lgamma(8) / 8  # query i seeing i keys: ln 1 .. ln 7 (and ln 0 taken as 0)


def ce_query_zero_left_out():
    return math.lgamma(9) / 7


def ce_in_bits():
    return sum(math.log2(i + 1) for i in range(8)) / 8


def ce_log_of_the_mean_count():
    return math.log(4.5)  # the mean number of keys, 4.5


def ce_certain():
    return 0.0


def ce_nearly():
    return 1.40  # within twice the margin of 1.326, no known slip


def ce_as_text():
    return "1.33 nats"


def ce_with_the_course_code():
    causal = torch.ones(8, 8).tril()
    return head_scores.attention_entropy((causal / causal.sum(-1, keepdim=True))[None, None]).item()


def ce_unwritten():
    raise NotImplementedError


def rp_reasoned():
    return math.log(32), 1.8  # (a) a uniform guess; (b) the other head still copies


def rp_as_list():
    return [3.5, 1.7]


def rp_as_tensors():
    return torch.tensor(3.5), torch.tensor(1.75)


def rp_halfway():
    return 3.5, (0.45 + 3.5) / 2  # (b) halfway between intact and both removed


def rp_back_to_one_layer():
    return 2.53, 1.8  # (a) the one-layer model's loss on the repeat


def rp_near_one_layer():
    return 2.4, 1.8  # (a) the one-layer model's loss, rounded: the same reasoned route


def rp_between():
    return 2.9, 1.8  # (a) between the one-layer model's loss and the measurement, no route: no credit


def rp_like_the_first_block():
    return 4.07, 1.8  # (a) the intact model's first-block loss: half credit


def rp_no_change():
    return 0.45, 0.45


def rp_all_gone():
    return 3.5, 3.5  # (b) one head's removal loses everything


def rp_one_layer_for_b():
    return 3.5, 2.53  # (b) no known slip: no credit, no named cause


def rp_one_number():
    return 3.5


def rp_with_the_course_code():
    induction.held_out_repeats(2)  # any of the course's induction code: a measurement, not a prediction
    return math.log(32), 1.8


def rp_unwritten():
    raise NotImplementedError


PREDICTIONS = [
    ("predicted_causal_entropy", ce_by_formula, "passed", 1.0, "within 0.05 nats (full credit)"),
    ("predicted_causal_entropy", ce_rounded, "passed", 1.0, "you predicted 1.33 nats, measured 1.326 nats"),
    ("predicted_causal_entropy", ce_as_tensor, "passed", 1.0, "full credit"),
    ("predicted_causal_entropy", ce_encoder, "failed", 0.0, "an encoder's head spreading over all 8 tokens"),
    ("predicted_causal_entropy", ce_one_key_too_many, "failed", 0.0, "not i + 2"),
    ("predicted_causal_entropy", ce_one_key_too_few, "failed", 0.0, "itself included, not i"),
    ("predicted_causal_entropy", ce_query_zero_left_out, "failed", 0.0, "query 0 too"),
    ("predicted_causal_entropy", ce_in_bits, "failed", 0.0, "in bits"),
    ("predicted_causal_entropy", ce_log_of_the_mean_count, "failed", 0.0, "of the mean number of keys"),
    ("predicted_causal_entropy", ce_certain, "failed", 0.0, "query that sees one key is certain"),
    ("predicted_causal_entropy", ce_nearly, "partial", 0.5, "within twice 0.05 nats"),
    ("predicted_causal_entropy", ce_as_text, "failed", 0.0, "should return a number"),
    ("predicted_causal_entropy", ce_with_the_course_code, "failed", 0.0, "`attnedu.head_scores.attention_entropy`"),
    ("predicted_causal_entropy", ce_unwritten, "not_attempted", 0.0, "still raises NotImplementedError"),
    ("predicted_repeat_losses", rp_reasoned, "passed", 1.0, "Score: 1 of 1"),
    ("predicted_repeat_losses", rp_as_list, "passed", 1.0, "Score: 1 of 1"),
    ("predicted_repeat_losses", rp_as_tensors, "passed", 1.0, "Score: 1 of 1"),
    ("predicted_repeat_losses", rp_halfway, "passed", 1.0, "Score: 1 of 1"),
    ("predicted_repeat_losses", rp_back_to_one_layer, "partial", 0.75, "a reasoned route's value (half credit)"),
    ("predicted_repeat_losses", rp_near_one_layer, "partial", 0.75, "betting on tokens it has already seen"),
    ("predicted_repeat_losses", rp_between, "partial", 0.5, "further than twice 0.3 nats (no credit)"),
    ("predicted_repeat_losses", rp_like_the_first_block, "partial", 0.75, "first block's loss is above ln 32"),
    ("predicted_repeat_losses", rp_no_change, "failed", 0.0, "make up for the removed one (nearly) completely"),
    ("predicted_repeat_losses", rp_all_gone, "partial", 0.5, "the other head still copies"),
    ("predicted_repeat_losses", rp_one_layer_for_b, "partial", 0.5, "further than twice 0.3 nats (no credit)"),
    ("predicted_repeat_losses", rp_one_number, "failed", 0.0, "should return a tuple of 2 values"),
    ("predicted_repeat_losses", rp_with_the_course_code, "failed", 0.0, "`attnedu.induction.held_out_repeats`"),
    ("predicted_repeat_losses", rp_unwritten, "not_attempted", 0.0, "still raises NotImplementedError"),
]
