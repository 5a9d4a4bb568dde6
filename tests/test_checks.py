"""The graders are tested by their mutants: each check accepts a correct function and rejects the
wrong versions a learner is likely to write, with the right diagnosis. Pure Python, no notebooks.

* the mutant gallery (this file): each known mistake, an off-by-one in both directions for every exercise, and
  for every exercise a mistake that shows only on each kind of test case (a batch of one, no padding, padding,
  large inputs), which the check must still catch;
* the independent gallery (tests/learner_bugs.py): bugs written as a learner would, none copied from the
  checks' variants; none may get a wrong diagnosis, and few may get only a count of differing entries;
* the decision rule of the engine: every case is called, a variant is named only when established, what is
  observed is said without a guessed cause.

Also: a learner's function that raises, returns the wrong type, returns NaN, changes its inputs,
prints a flood or never returns gives a clean failed result, never an exception.
"""

from __future__ import annotations

import copy
import math
import sys
import threading
import time

import pytest
import torch
from galleries import lesson03 as lessons03_05
from galleries import lesson06 as mutants_06_07
from galleries.lesson01 import BUGS, GENERIC

from attnedu import checks
from attnedu.attention import additive_score, context_vector, masked_softmax
from attnedu.checks import FAILED, NOT_ATTEMPTED, PASSED, CheckResult
from attnedu.checks.diagnosis import same
from attnedu.checks.exercise import LARGE, ONE, PADDED, REQUIRED_TAGS, UNPADDED
from attnedu.flash import online_softmax
from attnedu.masks import padding_mask

# --------------------------------------------------------------------------------------------
# Correct versions, written as a learner would
# --------------------------------------------------------------------------------------------


def learner_padding_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None]


def learner_last_real_state(states, lengths):
    return states[torch.arange(states.shape[0]), lengths - 1]


def learner_reverse_padded(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        out[b, :n] = src[b, :n].flip(0)
    return out


def learner_bidirectional_summary(states, lengths):
    hidden = states.shape[-1] // 2
    forward = states[torch.arange(states.shape[0]), lengths - 1, :hidden]
    return torch.cat([forward, states[:, 0, hidden:]], dim=-1)


def learner_bidirectional_summary_loop(states, lengths):
    hidden = states.shape[-1] // 2
    rows = [torch.cat([states[b, n - 1, :hidden], states[b, 0, hidden:]]) for b, n in enumerate(lengths.tolist())]
    return torch.stack(rows)


def learner_additive_score(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a


def learner_masked_softmax(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)


def learner_masked_softmax_by_hand(scores, mask):
    shifted = scores - scores.masked_fill(~mask, float("-inf")).max(dim=-1, keepdim=True).values
    e = torch.exp(shifted.masked_fill(~mask, float("-inf")))
    total = e.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, e / total, torch.zeros_like(e))


def learner_context_vector(weights, values):
    return (weights[:, :, None] * values).sum(dim=1)


def learner_decoder_step(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    logits = out(torch.cat([new_state, context, embedded], dim=-1))
    return logits, new_state, weights


def learner_coverage(weights, src_lengths, tgt_lengths):
    steps = torch.arange(weights.shape[1])[None, :] < tgt_lengths[:, None]
    words = torch.arange(weights.shape[2])[None, :] < src_lengths[:, None]
    return weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=1).masked_fill(~words, 0.0)


def learner_coverage_loop(weights, src_lengths, tgt_lengths):
    out = torch.zeros(weights.shape[0], weights.shape[2])
    for b in range(weights.shape[0]):
        t, s = int(tgt_lengths[b]), int(src_lengths[b])
        out[b, :s] = weights[b, :t, :s].sum(dim=0)
    return out


def learner_online_softmax(scores, block_size):
    m = torch.full((scores.shape[0],), float("-inf"))
    l = torch.zeros(scores.shape[0])
    for start in range(0, scores.shape[1], block_size):
        block = scores[:, start : start + block_size]
        m_new = torch.maximum(m, block.max(dim=1).values)
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[:, None]).sum(dim=1)
        m = m_new
    return torch.exp(scores - m[:, None]) / l[:, None]


def learner_online_softmax_per_row(scores, block_size):
    out = torch.empty_like(scores)
    for r in range(scores.shape[0]):
        m, l = float("-inf"), 0.0
        for start in range(0, scores.shape[1], block_size):
            block = scores[r, start : start + block_size]
            m_new = max(m, block.max().item())
            l = l * math.exp(m - m_new) + torch.exp(block - m_new).sum().item()
            m = m_new
        out[r] = torch.exp(scores[r] - m) / l
    return out


def learner_block_update(m, l, acc, q_block, k_block, v_block, valid):
    s = q_block @ k_block.T / q_block.shape[1] ** 0.5
    s[:, ~valid] = float("-inf")
    m_new = torch.max(m, s.max(dim=1).values)
    p = torch.exp(s - m_new[:, None])
    alpha = torch.exp(m - m_new)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def learner_causal_tiles(n, block_q, block_k):
    q_first, k_first = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    q_last = torch.clamp(q_first + block_q, max=n) - 1
    k_last = torch.clamp(k_first + block_k, max=n) - 1
    compute = k_first[None, :] <= q_last[:, None]
    return compute, compute & (k_last[None, :] > q_first[:, None])


def learner_causal_tiles_loop(n, block_q, block_k):
    rows, columns = math.ceil(n / block_q), math.ceil(n / block_k)
    compute = torch.zeros(rows, columns, dtype=torch.bool)
    masked = torch.zeros(rows, columns, dtype=torch.bool)
    for i in range(rows):
        for j in range(columns):
            first_query, last_query = i * block_q, min((i + 1) * block_q, n) - 1
            first_key, last_key = j * block_k, min((j + 1) * block_k, n) - 1
            compute[i, j] = first_key <= last_query  # some key is not after some query
            masked[i, j] = compute[i, j] and last_key > first_query  # and some key is after some query
    return compute, masked


CORRECT = {
    "padding_mask": [learner_padding_mask, padding_mask],
    "last_real_state": [learner_last_real_state],
    "reverse_padded": [learner_reverse_padded],
    "bidirectional_summary": [learner_bidirectional_summary, learner_bidirectional_summary_loop],
    "additive_score": [learner_additive_score, additive_score],
    "masked_softmax": [learner_masked_softmax, learner_masked_softmax_by_hand, masked_softmax],
    "context_vector": [
        learner_context_vector,
        context_vector,
        lambda w, v: torch.einsum("bs,bse->be", w, v),
        lambda w, v: torch.bmm(w[:, None, :], v).squeeze(1),
    ],
    "decoder_step": [learner_decoder_step],
    "coverage": [learner_coverage, learner_coverage_loop],
    "online_softmax": [learner_online_softmax, learner_online_softmax_per_row, online_softmax],
    "block_update": [learner_block_update, checks.EXERCISES["block_update"].reference],
    "causal_tiles": [learner_causal_tiles, learner_causal_tiles_loop],
}
CORRECT.update(lessons03_05.CORRECT)  # lessons 03-05: tests/checks_lessons03_05.py
# lessons 06-07 (their galleries are in tests/mutants_06_07.py)
CORRECT |= mutants_06_07.CORRECT


@pytest.mark.parametrize(
    "name, fn", [(name, fn) for name, fns in CORRECT.items() for fn in fns], ids=lambda x: getattr(x, "__name__", x)
)
def test_correct_versions_pass(name, fn):
    result = checks.check(name, fn)
    assert result.status == PASSED, repr(result)
    assert result.score == 1


def test_every_exercise_has_a_correct_version_and_mutants():
    assert set(CORRECT) == set(checks.EXERCISES)
    counts = {name: sum(1 for m in MUTANTS if m[0] == name) for name in checks.EXERCISES}
    assert min(counts.values()) >= 5, counts


def test_the_bidirectional_summary_is_what_the_package_encoder_hands_its_decoder():
    """The exercise's reference equals attnedu.models.Encoder's summary (h_n of a bidirectional GRU)."""
    from attnedu.models import Encoder

    reference = checks.EXERCISES["bidirectional_summary"].reference
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        encoder = Encoder(vocab_size=20, emb_dim=4, hidden_dim=3, bidirectional=True)
        src = torch.randint(3, 20, (3, 6))
    lengths = torch.tensor([6, 2, 4])
    src = src.masked_fill(~padding_mask(lengths, 6), 0)
    with torch.no_grad():
        memory = encoder(src, lengths)
    assert torch.allclose(reference(memory.annotations, lengths), memory.summary, atol=1e-6)


def test_the_luong_references_are_what_the_package_decoder_computes():
    """attend_all_steps is LuongAttention("general") over every step; general_decoder_step is one step of
    attnedu.models.LuongDecoder with input feeding and the general score (same weights, same numbers)."""
    from attnedu.attention import LuongAttention
    from attnedu.models import EncoderOutput, LuongDecoder

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        decoder = LuongDecoder(vocab_size=9, emb_dim=3, hidden_dim=4, enc_dim=5, score="general", input_feeding=True)
        embedded, state, attentional = torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4)
        annotations, states = torch.randn(2, 6, 5), torch.randn(2, 3, 4)
    lengths = torch.tensor([6, 3])
    mask = padding_mask(lengths, 6)
    cell = torch.nn.GRUCell(7, 4)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, name).copy_(getattr(decoder.rnn, f"{name}_l0"))
        memory = EncoderOutput(annotations, summary=annotations[:, 0], mask=mask)
        logits, (new_state, new_attentional), weights = decoder._step(embedded, (state, attentional), memory)
        step = checks.EXERCISES["general_decoder_step"].reference
        args = (embedded, state, attentional, annotations, mask, decoder.attention.W_a, cell, decoder.combine)
        ours = step(*args, decoder.out)
        for a, b in zip(ours, (logits, new_state, new_attentional, weights), strict=True):
            assert torch.allclose(a, b, atol=1e-6)
        attention = LuongAttention("general", 4, 5)
        context, all_weights = attention(states, annotations, mask)
        attend = checks.EXERCISES["attend_all_steps"].reference
        for a, b in zip(attend(states, annotations, lengths, attention.W_a), (context, all_weights), strict=True):
            assert torch.allclose(a, b, atol=1e-6)


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------

NEG_INF = float("-inf")


# padding_mask
def mask_inverted(lengths, max_len):
    return torch.arange(max_len)[None, :] >= lengths[:, None]


def mask_off_by_one(lengths, max_len):
    return torch.arange(max_len)[None, :] <= lengths[:, None]


def mask_one_short(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None] - 1


def mask_transposed(lengths, max_len):
    return torch.arange(max_len)[:, None] < lengths[None, :]


def mask_ignores_max_len(lengths, max_len):
    return torch.arange(int(lengths.max()))[None, :] < lengths[:, None]


def mask_as_float(lengths, max_len):
    return (torch.arange(max_len)[None, :] < lengths[:, None]).float()


def mask_loop_of_ones(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    return mask


def mask_unsqueeze_in_place(lengths, max_len):
    lengths.unsqueeze_(1)
    return torch.arange(max_len)[None, :] < lengths


# last_real_state
def last_takes_padding(states, lengths):
    return states[:, -1]


def last_off_by_one(states, lengths):
    return states[torch.arange(states.shape[0]), lengths]


def last_one_early(states, lengths):
    return states[torch.arange(states.shape[0]), lengths - 2]


def last_time_major(states, lengths):
    return states[lengths - 1, torch.arange(states.shape[0])]


def last_all_pairs(states, lengths):
    return states[:, lengths - 1]


def last_keeps_dim(states, lengths):
    index = (lengths - 1)[:, None, None].expand(-1, 1, states.shape[2])
    return states.gather(1, index)


def last_decrements_lengths(states, lengths):
    lengths -= 1
    return states[torch.arange(states.shape[0]), lengths]


# reverse_padded
def reverse_whole_rows(src, lengths):
    return src.flip(1)


def reverse_batch(src, lengths):
    return src.flip(0)


def reverse_all_but_last(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        out[b, : n - 1] = src[b, : n - 1].flip(0)
    return out


def reverse_one_too_many(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        out[b, : n + 1] = src[b, : n + 1].flip(0)
    return out


def reverse_index_n_minus_j(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        for j in range(n):
            out[b, j] = src[b, n - j]
    return out


def reverse_in_place(src, lengths):
    for b in range(src.shape[0]):
        n = int(lengths[b])
        src[b, :n] = src[b, :n].flip(0)
    return src


def reverse_into_floats(src, lengths):
    out = torch.zeros(src.shape)
    for b in range(src.shape[0]):
        n = int(lengths[b])
        out[b, :n] = src[b, :n].flip(0)
    return out


# bidirectional_summary
def _bi(states, forward_positions, backward_positions):
    hidden = states.shape[-1] // 2
    rows = torch.arange(states.shape[0])
    return torch.cat([states[rows, forward_positions, :hidden], states[rows, backward_positions, hidden:]], dim=-1)


def bi_last_padded(states, lengths):
    return states[:, -1]


def bi_forward_at_end(states, lengths):
    return _bi(states, states.shape[1] - 1, 0)


def bi_backward_at_end(states, lengths):
    return _bi(states, lengths - 1, states.shape[1] - 1)


def bi_one_late(states, lengths):
    return _bi(states, lengths, 0)


def bi_one_early(states, lengths):
    return _bi(states, lengths - 2, 0)


def bi_backward_at_last_word(states, lengths):
    return states[torch.arange(states.shape[0]), lengths - 1]


def bi_halves_swapped(states, lengths):
    return _bi(states, lengths - 1, 0).roll(states.shape[-1] // 2, dims=-1)


def bi_positions_swapped(states, lengths):
    return _bi(states, 0, lengths - 1)


def bi_forward_only(states, lengths):
    return states[torch.arange(states.shape[0]), lengths - 1, : states.shape[-1] // 2]


# additive_score
def score_no_tanh(query, keys, W_a, U_a, v_a):
    return ((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a


def score_with_softmax(query, keys, W_a, U_a, v_a):
    return torch.softmax(torch.tanh((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a, dim=-1)


def score_sum_not_v(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ W_a.T)[:, None, :] + keys @ U_a.T).sum(dim=-1)


def score_w_u_swapped(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ U_a.T)[:, None, :] + keys @ W_a.T) @ v_a


def score_transposed(query, keys, W_a, U_a, v_a):
    return (torch.tanh((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a).T


def score_no_weight_transpose(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ W_a)[:, None, :] + keys @ U_a) @ v_a


def score_tanh_last(query, keys, W_a, U_a, v_a):
    return torch.tanh(((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a)


def score_forgets_source_axis(query, keys, W_a, U_a, v_a):
    return torch.tanh(query @ W_a.T + keys @ U_a.T) @ v_a  # broadcasts only when batch == src_len


def score_batch_axis_one_late(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ W_a.T)[None, :, :] + keys @ U_a.T) @ v_a


def score_features_one_early(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ W_a.T)[:, :, None] + keys @ U_a.T) @ v_a


def score_hand_written_tanh(query, keys, W_a, U_a, v_a):
    x = (query @ W_a.T)[:, None, :] + keys @ U_a.T
    return ((torch.exp(x) - torch.exp(-x)) / (torch.exp(x) + torch.exp(-x))) @ v_a


# masked_softmax
def softmax_wrong_axis(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=0).nan_to_num(0.0)


def softmax_sum_without_keepdim(scores, mask):
    e = torch.exp(scores).masked_fill(~mask, 0.0)
    return (e / e.sum(dim=-1)).nan_to_num(0.0)


def softmax_mask_inverted(scores, mask):
    return torch.softmax(scores.masked_fill(mask, NEG_INF), dim=-1)


def softmax_mask_ignored(scores, mask):
    return torch.softmax(scores, dim=-1)


def softmax_zero_fill(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, 0.0), dim=-1)


def softmax_zeroed_after(scores, mask):
    return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)


def softmax_nan_row(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)


def softmax_renormalised_by_hand(scores, mask):
    weights = torch.softmax(scores, dim=-1) * mask
    return weights / weights.sum(dim=-1, keepdim=True)


def softmax_in_place(scores, mask):
    scores.masked_fill_(~mask, NEG_INF)
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


def softmax_large_negative(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)


def softmax_naive_exp(scores, mask):
    e = torch.exp(scores).masked_fill(~mask, 0.0)
    total = e.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, e / total, torch.zeros_like(e))


# context_vector
def context_mean(weights, values):
    return values.mean(dim=1)


def context_sum(weights, values):
    return values.sum(dim=1)


def context_wrong_axis(weights, values):
    return (weights[:, :, None] * values).sum(dim=2)


def context_batch_axis(weights, values):
    return (weights[:, :, None] * values).sum(dim=0)


def context_transposed(weights, values):
    return torch.einsum("bs,bse->eb", weights, values)


def context_broadcast_matmul(weights, values):
    return weights @ values


def context_keeps_dim(weights, values):
    return weights[:, None, :] @ values


def context_argmax(weights, values):
    return values[torch.arange(values.shape[0]), weights.argmax(dim=1)]


# decoder_step
def step_luong(embedded, state, annotations, mask, attention, cell, out):
    context, _ = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    context, weights = attention(new_state, annotations, mask)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state, weights


def step_gru_input_order(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([context, embedded], dim=-1), state)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state, weights


def step_readout_order(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([embedded, new_state, context], dim=-1)), new_state, weights


def step_readout_old_state(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([state, context, embedded], dim=-1)), new_state, weights


def step_returns_old_state(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([new_state, context, embedded], dim=-1)), state, weights


def step_no_mask(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state, weights


def step_state_for_context(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, state], dim=-1), state)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state, weights


def step_two_outputs(embedded, state, annotations, mask, attention, cell, out):
    context, _ = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state


def step_overwrites_state(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    state.copy_(cell(torch.cat([embedded, context], dim=-1), state))
    return out(torch.cat([state, context, embedded], dim=-1)), state, weights


# coverage
def coverage_all_rows(weights, src_lengths, tgt_lengths):
    return weights.sum(dim=1)


def coverage_source_axis(weights, src_lengths, tgt_lengths):
    steps = torch.arange(weights.shape[1])[None, :] < tgt_lengths[:, None]
    return weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=2)


def coverage_one_row_too_many(weights, src_lengths, tgt_lengths):
    steps = torch.arange(weights.shape[1])[None, :] <= tgt_lengths[:, None]
    words = padding_mask(src_lengths, weights.shape[2])
    return weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=1).masked_fill(~words, 0.0)


def coverage_one_row_short(weights, src_lengths, tgt_lengths):
    steps = padding_mask(tgt_lengths, weights.shape[1])
    steps = steps & (torch.arange(weights.shape[1])[None, :] < tgt_lengths[:, None] - 1)
    words = padding_mask(src_lengths, weights.shape[2])
    return weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=1).masked_fill(~words, 0.0)


def coverage_mean(weights, src_lengths, tgt_lengths):
    return learner_coverage(weights, src_lengths, tgt_lengths) / tgt_lengths[:, None]


def coverage_mean_all_rows(weights, src_lengths, tgt_lengths):
    return weights.mean(dim=1)


def coverage_keeps_source_padding(weights, src_lengths, tgt_lengths):
    steps = padding_mask(tgt_lengths, weights.shape[1])
    return weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=1)


def coverage_lengths_swapped(weights, src_lengths, tgt_lengths):
    steps = torch.arange(weights.shape[1])[None, :] < src_lengths[:, None]
    words = torch.arange(weights.shape[2])[None, :] < tgt_lengths[:, None]
    return weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=1).masked_fill(~words, 0.0)


def coverage_zeroes_in_place(weights, src_lengths, tgt_lengths):
    for b, n in enumerate(tgt_lengths.tolist()):
        weights[b, n:] = 0.0
    return learner_coverage(weights, src_lengths, tgt_lengths)


# online_softmax
def online_no_rescale(scores, block_size):
    m, l = torch.full((scores.shape[0],), float("-inf")), torch.zeros(scores.shape[0])
    for start in range(0, scores.shape[1], block_size):
        block = scores[:, start : start + block_size]
        m = torch.maximum(m, block.max(dim=1).values)
        l = l + torch.exp(block - m[:, None]).sum(dim=1)  # the old terms keep the old maximum
    return torch.exp(scores - m[:, None]) / l[:, None]


def online_rescale_inverted(scores, block_size):
    m, l = torch.full((scores.shape[0],), float("-inf")), torch.zeros(scores.shape[0])
    for start in range(0, scores.shape[1], block_size):
        block = scores[:, start : start + block_size]
        m_new = torch.maximum(m, block.max(dim=1).values)
        l = l * torch.exp(m_new - m).nan_to_num(0.0) + torch.exp(block - m_new[:, None]).sum(dim=1)
        m = m_new
    return torch.exp(scores - m[:, None]) / l[:, None]


def online_per_block(scores, block_size):
    blocks = [scores[:, s : s + block_size] for s in range(0, scores.shape[1], block_size)]
    return torch.cat([torch.exp(b - b.max(dim=1, keepdim=True).values) / torch.exp(
        b - b.max(dim=1, keepdim=True).values).sum(dim=1, keepdim=True) for b in blocks], dim=1)  # fmt: skip


def _online_blocks(scores, block_size, width, stop):
    m, l = torch.full((scores.shape[0],), float("-inf")), torch.zeros(scores.shape[0])
    for start in range(0, stop, block_size):
        block = scores[:, start : start + width]
        if block.shape[1] == 0:
            continue
        m_new = torch.maximum(m, block.max(dim=1).values)
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[:, None]).sum(dim=1)
        m = m_new
    return torch.exp(scores - m[:, None]) / l[:, None]


def online_block_one_short(scores, block_size):
    return _online_blocks(scores, block_size, block_size - 1, scores.shape[1])


def online_block_one_long(scores, block_size):
    return _online_blocks(scores, block_size, block_size + 1, scores.shape[1])


def online_skips_partial_block(scores, block_size):
    return _online_blocks(scores, block_size, block_size, scores.shape[1] - block_size + 1)


def online_naive_exp(scores, block_size):
    l = torch.zeros(scores.shape[0])
    for start in range(0, scores.shape[1], block_size):
        l = l + torch.exp(scores[:, start : start + block_size]).sum(dim=1)  # no maximum: overflows
    return torch.exp(scores) / l[:, None]


def online_in_place(scores, block_size):
    scores -= scores.max(dim=1, keepdim=True).values  # "to be safe"
    return learner_online_softmax(scores, block_size)


def os_shortcut_without_padding(scores, block_size):
    if scores.shape[1] % block_size == 0:  # whole blocks: softmax each block (but the row is one distribution)
        return torch.softmax(scores.view(scores.shape[0], -1, block_size), dim=-1).flatten(1)
    return learner_online_softmax(scores, block_size)


# block_update
def _scores(q_block, k_block, valid):
    return (q_block @ k_block.T / math.sqrt(q_block.shape[1])).masked_fill(~valid, float("-inf"))


def update_acc_not_rescaled(m, l, acc, q_block, k_block, v_block, valid):
    s = _scores(q_block, k_block, valid)
    m_new = torch.maximum(m, s.amax(dim=1))
    p = torch.exp(s - m_new[:, None])
    return m_new, torch.exp(m - m_new) * l + p.sum(dim=1), acc + p @ v_block


def update_nothing_rescaled(m, l, acc, q_block, k_block, v_block, valid):
    s = _scores(q_block, k_block, valid)
    m_new = torch.maximum(m, s.amax(dim=1))
    p = torch.exp(s - m_new[:, None])
    return m_new, l + p.sum(dim=1), acc + p @ v_block


def update_without_sqrt(m, l, acc, q_block, k_block, v_block, valid):
    s = (q_block @ k_block.T).masked_fill(~valid, float("-inf"))
    m_new = torch.maximum(m, s.amax(dim=1))
    p, alpha = torch.exp(s - m_new[:, None]), torch.exp(m - m_new)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def update_ignores_valid(m, l, acc, q_block, k_block, v_block, valid):
    s = q_block @ k_block.T / math.sqrt(q_block.shape[1])
    m_new = torch.maximum(m, s.amax(dim=1))
    p, alpha = torch.exp(s - m_new[:, None]), torch.exp(m - m_new)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def update_p_one_step_late(m, l, acc, q_block, k_block, v_block, valid):
    s = _scores(q_block, k_block, valid)
    m_new = torch.maximum(m, s.amax(dim=1))
    p, alpha = torch.exp(s - m[:, None]), torch.exp(m - m_new)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def update_m_one_step_early(m, l, acc, q_block, k_block, v_block, valid):
    s = _scores(q_block, k_block, valid)
    m_new = torch.maximum(m, s.amax(dim=1))
    p, alpha = torch.exp(s - m_new[:, None]), torch.exp(m - m_new)
    return m, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def update_softmax_tile(m, l, acc, q_block, k_block, v_block, valid):
    s = _scores(q_block, k_block, valid)
    m_new = torch.maximum(m, s.amax(dim=1))
    p, alpha = torch.exp(s - m_new[:, None]), torch.exp(m - m_new)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + torch.softmax(s, dim=1) @ v_block


def update_exp_then_divide(m, l, acc, q_block, k_block, v_block, valid):
    s = _scores(q_block, k_block, valid)
    m_new = torch.maximum(m, s.amax(dim=1))
    p = torch.exp(s) / torch.exp(m_new)[:, None]  # exp of scores in the hundreds overflows
    alpha = torch.exp(m - m_new)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def update_shortcut_without_padding(m, l, acc, q_block, k_block, v_block, valid):
    if bool(valid.all()):  # no padding: a plain softmax of the tile (but the running state is not a softmax)
        return update_softmax_tile(m, l, acc, q_block, k_block, v_block, valid)
    return learner_block_update(m, l, acc, q_block, k_block, v_block, valid)


# causal_tiles
def tiles_by_block_number(n, block_q, block_k):
    i = torch.arange(math.ceil(n / block_q))[:, None]
    j = torch.arange(math.ceil(n / block_k))[None, :]
    return j <= i, j == i


def tiles_one_too_many(n, block_q, block_k):
    q_first, k_first = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    q_end = torch.clamp(q_first + block_q, max=n)  # one past the last query, compared as if it were the last
    k_last = torch.clamp(k_first + block_k, max=n) - 1
    compute = k_first[None, :] <= q_end[:, None]
    return compute, compute & (k_last[None, :] > q_first[:, None])


def tiles_one_too_few(n, block_q, block_k):
    q_first, k_first = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    q_last = torch.clamp(q_first + block_q, max=n) - 1
    k_last = torch.clamp(k_first + block_k, max=n) - 1
    compute = k_first[None, :] < q_last[:, None]
    return compute, compute & (k_last[None, :] > q_first[:, None])


def tiles_mask_everything(n, block_q, block_k):
    compute, _ = learner_causal_tiles(n, block_q, block_k)
    return compute, compute.clone()


def tiles_mask_touching(n, block_q, block_k):
    q_first, k_first = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    q_last = torch.clamp(q_first + block_q, max=n) - 1
    k_last = torch.clamp(k_first + block_k, max=n) - 1
    compute = k_first[None, :] <= q_last[:, None]
    return compute, compute & (k_last[None, :] >= q_first[:, None])


def tiles_unclamped(n, block_q, block_k):
    q_first, k_first = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    compute = k_first[None, :] <= (q_first + block_q - 1)[:, None]
    return compute, compute & ((k_first + block_k - 1)[None, :] > q_first[:, None])


def tiles_int16_positions(n, block_q, block_k):
    q_first = torch.arange(0, n, block_q).to(torch.int16)
    k_first = torch.arange(0, n, block_k).to(torch.int16)
    q_last = torch.clamp(q_first + block_q, max=n) - 1
    k_last = torch.clamp(k_first + block_k, max=n) - 1
    compute = k_first[None, :] <= q_last[:, None]
    return compute, compute & (k_last[None, :] > q_first[:, None])


def tiles_shortcut_without_padding(n, block_q, block_k):
    if n % block_q == 0 and n % block_k == 0:  # whole blocks: compare block numbers (right only if sizes match)
        return tiles_by_block_number(n, block_q, block_k)
    return learner_causal_tiles(n, block_q, block_k)


MUTANTS = [
    ("padding_mask", mask_inverted, "inverted"),
    ("padding_mask", mask_off_by_one, "one True too many"),
    ("padding_mask", mask_one_short, "one True too few"),
    ("padding_mask", mask_transposed, "transposed"),
    ("padding_mask", mask_ignores_max_len, "not max_len"),
    ("padding_mask", mask_as_float, "dtype torch.float32, expected torch.bool"),
    ("padding_mask", mask_loop_of_ones, "dtype torch.int64, expected torch.bool"),
    ("padding_mask", mask_unsqueeze_in_place, "modified its input `lengths` in place"),
    ("last_real_state", last_takes_padding, "`states[:, -1]`"),
    ("last_real_state", last_off_by_one, "one after the last real word"),
    ("last_real_state", last_one_early, "one before the last real word"),
    ("last_real_state", last_time_major, "axes are used in the wrong order"),
    ("last_real_state", last_all_pairs, "every sentence's state at every sentence's last position"),
    ("last_real_state", last_keeps_dim, "extra dimension of size 1"),
    ("last_real_state", last_decrements_lengths, "modified its input `lengths` in place"),
    ("reverse_padded", reverse_whole_rows, "padding moved to the front"),
    ("reverse_padded", reverse_batch, "sentences of the batch in reverse order"),
    ("reverse_padded", reverse_all_but_last, "the last real word stayed"),
    ("reverse_padded", reverse_one_too_many, "one token too many"),
    ("reverse_padded", reverse_index_n_minus_j, "`n - j`"),
    ("reverse_padded", reverse_in_place, "modified its input `src` in place"),
    ("reverse_padded", reverse_into_floats, "expected torch.int64"),
    ("bidirectional_summary", bi_last_padded, "both halves from the last position"),
    ("bidirectional_summary", bi_forward_at_end, "forward half comes from the last position"),
    ("bidirectional_summary", bi_backward_at_end, "backward half comes from the last position"),
    ("bidirectional_summary", bi_one_late, "one after the last real word"),
    ("bidirectional_summary", bi_one_early, "one before the last real word"),
    ("bidirectional_summary", bi_backward_at_last_word, "backward half was taken at the last real word"),
    ("bidirectional_summary", bi_halves_swapped, "two halves are swapped"),
    ("bidirectional_summary", bi_positions_swapped, "positions of the two directions are swapped"),
    ("bidirectional_summary", bi_forward_only, "only the forward half"),
    ("additive_score", score_no_tanh, "tanh is missing"),
    ("additive_score", score_with_softmax, "softmax of the scores"),
    ("additive_score", score_sum_not_v, "not their dot product with v_a"),
    ("additive_score", score_w_u_swapped, "W_a and U_a are swapped"),
    ("additive_score", score_transposed, "transposed"),
    ("additive_score", score_no_weight_transpose, "W_a^T"),
    ("additive_score", score_tanh_last, "tanh is applied after v_a"),
    ("additive_score", score_forgets_source_axis, "one axis too late"),
    ("additive_score", score_batch_axis_one_late, "one axis too late"),
    ("additive_score", score_features_one_early, "one axis too early"),
    ("additive_score", score_hand_written_tanh, "a tanh written with exp, overflows"),
    ("masked_softmax", softmax_wrong_axis, "wrong axis"),
    ("masked_softmax", softmax_sum_without_keepdim, "divided by the wrong row's sum"),
    ("masked_softmax", softmax_mask_inverted, "mask is inverted"),
    ("masked_softmax", softmax_mask_ignored, "softmax without the mask"),
    ("masked_softmax", softmax_zero_fill, "became 0 instead of -inf"),
    ("masked_softmax", softmax_zeroed_after, "without renormalising"),
    ("masked_softmax", softmax_nan_row, "fully masked row gives NaN"),
    ("masked_softmax", softmax_renormalised_by_hand, "fully masked row gives NaN"),
    ("masked_softmax", softmax_in_place, "modified its input `scores` in place"),
    ("masked_softmax", softmax_large_negative, "uniform weights"),
    ("masked_softmax", softmax_naive_exp, "subtract each row's maximum"),
    ("context_vector", context_mean, "plain mean"),
    ("context_vector", context_sum, "plain sum"),
    ("context_vector", context_wrong_axis, "dim 2, one too high"),
    ("context_vector", context_batch_axis, "dim 0, one too low"),
    ("context_vector", context_transposed, "transposed"),
    ("context_vector", context_broadcast_matmul, "broadcasts over the batch"),
    ("context_vector", context_keeps_dim, "extra dimension of size 1"),
    ("context_vector", context_argmax, "largest weight"),
    ("decoder_step", step_luong, "one step late"),
    ("decoder_step", step_gru_input_order, "GRU input is concatenated in the wrong order"),
    ("decoder_step", step_readout_order, "output layer's input is concatenated in the wrong order"),
    ("decoder_step", step_readout_old_state, "one step early"),
    ("decoder_step", step_returns_old_state, "the state you returned is the previous state"),
    ("decoder_step", step_no_mask, "weight to padding"),
    ("decoder_step", step_state_for_context, "previous state where the context"),
    ("decoder_step", step_two_outputs, "should return 3 values"),
    ("decoder_step", step_overwrites_state, "modified its input `state` in place"),
    ("coverage", coverage_all_rows, "padded target rows were counted"),
    ("coverage", coverage_source_axis, "sums over the source axis"),
    ("coverage", coverage_one_row_too_many, "first padded target row"),
    ("coverage", coverage_one_row_short, "last real target step"),
    ("coverage", coverage_mean, "mean over the real target steps"),
    ("coverage", coverage_mean_all_rows, "mean over all target steps"),
    ("coverage", coverage_keeps_source_padding, "padded source positions are not 0"),
    ("coverage", coverage_lengths_swapped, "swapped"),
    ("coverage", coverage_zeroes_in_place, "modified its input `weights` in place"),
    ("online_softmax", online_no_rescale, "running sum was not rescaled"),
    ("online_softmax", online_rescale_inverted, "rescaled the wrong way round"),
    ("online_softmax", online_per_block, "each block was normalised on its own"),
    ("online_softmax", online_block_one_short, "stops one score short"),
    ("online_softmax", online_block_one_long, "reaches one score too far"),
    ("online_softmax", online_skips_partial_block, "partial block was never read"),
    ("online_softmax", online_naive_exp, "subtract each row's maximum"),
    ("online_softmax", online_in_place, "modified its input `scores` in place"),
    ("block_update", update_acc_not_rescaled, "running output acc was not rescaled"),
    ("block_update", update_nothing_rescaled, "neither the running sum l nor the running output acc"),
    ("block_update", update_without_sqrt, "not divided by sqrt(head_dim)"),
    ("block_update", update_ignores_valid, "keys marked invalid"),
    ("block_update", update_p_one_step_late, "one step late"),
    ("block_update", update_m_one_step_early, "one step early"),
    ("block_update", update_softmax_tile, "normalised within the tile"),
    ("block_update", update_exp_then_divide, "subtract each row's maximum"),
    ("causal_tiles", tiles_by_block_number, "comparing block numbers"),
    ("causal_tiles", tiles_one_too_many, "one tile too many"),
    ("causal_tiles", tiles_one_too_few, "one tile too few"),
    ("causal_tiles", tiles_mask_everything, "every computed tile is marked"),
    ("causal_tiles", tiles_mask_touching, "last key is exactly its first query"),
    ("causal_tiles", tiles_unclamped, "not clamped to n"),
]
MUTANTS += lessons03_05.MUTANTS  # lessons 03-05
# lessons 06-07
MUTANTS += mutants_06_07.MUTANTS

# An off-by-one in both directions, for every exercise: an index or length one too high and one too low, or the
# axis of a reduction one too high and one too low, or (decoder_step) a state one step late and one step early.
OFF_BY_ONE = {
    "padding_mask": (mask_off_by_one, mask_one_short),
    "last_real_state": (last_off_by_one, last_one_early),
    "reverse_padded": (reverse_one_too_many, reverse_all_but_last),
    "bidirectional_summary": (bi_one_late, bi_one_early),
    "additive_score": (score_batch_axis_one_late, score_features_one_early),
    "masked_softmax": (softmax_sum_without_keepdim, softmax_wrong_axis),
    "context_vector": (context_wrong_axis, context_batch_axis),
    "decoder_step": (step_luong, step_readout_old_state),
    "coverage": (coverage_one_row_too_many, coverage_one_row_short),
    "online_softmax": (online_block_one_long, online_block_one_short),
    "block_update": (update_p_one_step_late, update_m_one_step_early),
    "causal_tiles": (tiles_one_too_many, tiles_one_too_few),
}
OFF_BY_ONE.update(lessons03_05.OFF_BY_ONE)  # lessons 03-05
# lessons 06-07
OFF_BY_ONE |= mutants_06_07.OFF_BY_ONE


@pytest.mark.parametrize("name, mutant, diagnosis", MUTANTS, ids=[m[1].__name__ for m in MUTANTS])
def test_mutant_is_rejected_with_its_diagnosis(name, mutant, diagnosis):
    result = checks.check(name, mutant)
    assert result.status == FAILED, repr(result)
    assert result.score == 0
    assert diagnosis in result.message, repr(result)


def test_every_exercise_has_an_off_by_one_in_both_directions():
    assert set(OFF_BY_ONE) == set(checks.EXERCISES)
    in_gallery = {m[1] for m in MUTANTS}
    for name, pair in OFF_BY_ONE.items():
        assert set(pair) <= in_gallery, name
        assert {m[0] for m in MUTANTS if m[1] in pair} == {name}


def test_every_known_wrong_variant_gets_its_own_diagnosis():
    """Each variant inside a check, submitted as is, is recognised (none is shadowed by an earlier one)."""
    for name, exercise in checks.EXERCISES.items():
        for variant in exercise.variants:
            for fn in variant.fns:
                result = checks.check(name, fn)
                assert result.status == FAILED and variant.diagnosis in result.message, (
                    name,
                    variant.diagnosis,
                    result,
                )


def _outputs(fn, cases):
    """fn's output on each case, or None where it raises."""
    outputs = []
    for case in cases:
        try:
            with torch.no_grad():
                outputs.append(fn(*copy.deepcopy(case.args)))
        except Exception:
            outputs.append(None)
    return outputs


def test_distinct_mistakes_give_distinct_outputs():
    """No variant would be named for another variant with a different diagnosis: the inputs tell them apart (a
    variant is named when it equals the output on every case where it runs), and each differs from the reference."""
    for name, exercise in checks.EXERCISES.items():
        cases = exercise.make_cases()
        reference = _outputs(exercise.reference, cases)
        versions = [(v, fn) for v in exercise.variants for fn in v.fns]
        outputs = [_outputs(fn, cases) for _, fn in versions]
        for (variant, _), mine in zip(versions, outputs, strict=True):
            assert any(o is not None and not same(r, o) for o, r in zip(mine, reference, strict=True)), variant
            for (other, _), theirs in zip(versions, outputs, strict=True):
                if other.diagnosis == variant.diagnosis:
                    continue
                shadowed = all(t is None or (m is not None and same(t, m)) for m, t in zip(mine, theirs, strict=True))
                assert not shadowed, (name, variant.diagnosis, "would also be", other.diagnosis)


# --------------------------------------------------------------------------------------------
# Each kind of test case catches a mistake the others miss
# --------------------------------------------------------------------------------------------


def _squeezed(fn):
    """The correct function, with the classic `.squeeze()` that drops the batch axis of a batch of one."""

    def squeezed(*args):
        result = fn(*args)
        return tuple(r.squeeze() for r in result) if isinstance(result, tuple) else result.squeeze()

    squeezed.__name__ = f"{fn.__name__}_squeezed"
    return squeezed


def pm_shortcut_without_padding(lengths, max_len):
    if bool((lengths == max_len).all()):
        return torch.ones(len(lengths), max_len)  # nothing is padded: all ones (but floats)
    return torch.arange(max_len)[None, :] < lengths[:, None]


def pm_int8_positions(lengths, max_len):
    return torch.arange(max_len).to(torch.int8)[None, :] < lengths[:, None]


def lrs_slice_without_padding(states, lengths):
    if bool((lengths == states.shape[1]).all()):
        return states[:, -1:]  # nothing is padded: the last state (but a slice keeps the axis)
    return states[torch.arange(states.shape[0]), lengths - 1]


def lrs_uint8_lengths(states, lengths):
    return states[torch.arange(states.shape[0]), lengths.to(torch.uint8).long() - 1]


def rp_shortcut_without_padding(src, lengths):
    if bool((lengths == src.shape[1]).all()):
        return src.flip(0)  # nothing is padded: flip (but along the batch)
    return learner_reverse_padded(src, lengths)


def rp_int16_ids(src, lengths):
    return learner_reverse_padded(src.to(torch.int16), lengths).long()


def bs_shortcut_without_padding(states, lengths):
    if bool((lengths == states.shape[1]).all()):
        return states[:, -1]  # nothing is padded: the last state (but that is not where the backward one ends)
    return learner_bidirectional_summary(states, lengths)


def bs_uint8_lengths(states, lengths):
    return learner_bidirectional_summary(states, lengths.to(torch.uint8).long())


def as_masks_zero_keys(query, keys, W_a, U_a, v_a):
    scores = learner_additive_score(query, keys, W_a, U_a, v_a)
    return scores.masked_fill(keys.abs().sum(dim=-1) == 0, NEG_INF)  # padding is for masked_softmax to handle


def as_no_tanh_without_padding(query, keys, W_a, U_a, v_a):
    if bool((keys.abs().sum(dim=-1) > 0).all()):
        return ((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a
    return learner_additive_score(query, keys, W_a, U_a, v_a)


def ms_shortcut_without_padding(scores, mask):
    if bool(mask.all()):
        return torch.softmax(scores, dim=0)  # nothing is masked: a plain softmax (but over the batch)
    return learner_masked_softmax(scores, mask)


def ms_plain_when_padded(scores, mask):
    if bool(mask.all()):
        return torch.softmax(scores, dim=-1)
    return torch.softmax(scores, dim=-1) * mask


def cv_weights_renormalised_over_nonzero(weights, values):
    mean_nonzero = weights.sum(dim=1, keepdim=True) / (weights > 0).sum(dim=1, keepdim=True)
    spread = torch.where(weights > 0, weights, mean_nonzero)  # padding gets the average weight
    return learner_context_vector(spread / spread.sum(dim=1, keepdim=True), values)


def cv_shortcut_without_padding(weights, values):
    if bool((weights > 0).all()):
        return values.mean(dim=1)  # nothing is padded: the average (but the weights are not uniform)
    return learner_context_vector(weights, values)


def cv_clamped_values(weights, values):
    return learner_context_vector(weights, values.clamp(-100, 100))  # "to be safe from overflow"


def ds_attention_by_hand(embedded, state, annotations, mask, attention, cell, out):
    scores = torch.tanh((state @ attention.W_a.T)[:, None, :] + annotations @ attention.U_a.T) @ attention.v_a
    e = torch.exp(scores).masked_fill(~mask, 0.0)
    weights = e / e.sum(dim=-1, keepdim=True)
    context = (weights[:, :, None] * annotations).sum(dim=1)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state, weights


def ds_shortcut_without_padding(embedded, state, annotations, mask, attention, cell, out):
    if bool(mask.all()):
        mask = mask.float()  # nothing is padded (but a float mask is not a mask)
        mask = mask > 1
    return learner_decoder_step(embedded, state, annotations, mask, attention, cell, out)


def cov_shortcut_without_padding(weights, src_lengths, tgt_lengths):
    if bool((tgt_lengths == weights.shape[1]).all()):
        return weights.mean(dim=1)  # nothing is padded (but coverage is a sum, not a mean)
    return learner_coverage(weights, src_lengths, tgt_lengths)


def cov_int8_lengths(weights, src_lengths, tgt_lengths):
    return learner_coverage_loop(weights, src_lengths.to(torch.int8), tgt_lengths.to(torch.int8))


# (exercise, mutant, the kind of test case it fails on and only there, what its message must contain)
KIND_MUTANTS = [
    *((name, _squeezed(CORRECT[name][0]), ONE, "batch of one") for name in CORRECT),
    ("padding_mask", pm_shortcut_without_padding, UNPADDED, "dtype torch.float32"),
    ("padding_mask", mask_off_by_one, PADDED, "one True too many"),
    ("padding_mask", pm_int8_positions, LARGE, "large inputs"),
    ("last_real_state", lrs_slice_without_padding, UNPADDED, "extra dimension of size 1"),
    ("last_real_state", last_takes_padding, PADDED, "`states[:, -1]`"),
    ("last_real_state", lrs_uint8_lengths, LARGE, "large inputs"),
    ("reverse_padded", rp_shortcut_without_padding, UNPADDED, "no padding"),
    ("reverse_padded", reverse_whole_rows, PADDED, "padding moved to the front"),
    ("reverse_padded", rp_int16_ids, LARGE, "large inputs"),
    ("bidirectional_summary", bs_shortcut_without_padding, UNPADDED, "no padding"),
    ("bidirectional_summary", bi_forward_at_end, PADDED, "forward half comes from the last position"),
    ("bidirectional_summary", bs_uint8_lengths, LARGE, "large inputs"),
    ("additive_score", as_no_tanh_without_padding, UNPADDED, "no padding"),
    ("additive_score", as_masks_zero_keys, PADDED, "contains -inf"),
    ("additive_score", score_hand_written_tanh, LARGE, "large inputs"),
    ("masked_softmax", ms_shortcut_without_padding, UNPADDED, "no padding"),
    ("masked_softmax", ms_plain_when_padded, PADDED, "without renormalising"),
    ("masked_softmax", softmax_naive_exp, LARGE, "large inputs"),
    ("context_vector", cv_shortcut_without_padding, UNPADDED, "differ"),
    ("context_vector", cv_weights_renormalised_over_nonzero, PADDED, "padding"),
    ("context_vector", cv_clamped_values, LARGE, "large inputs"),
    ("decoder_step", ds_shortcut_without_padding, UNPADDED, "no padding"),
    ("decoder_step", step_no_mask, PADDED, "weight to padding"),
    ("decoder_step", ds_attention_by_hand, LARGE, "large inputs"),
    ("coverage", cov_shortcut_without_padding, UNPADDED, "no padding"),
    ("coverage", coverage_all_rows, PADDED, "padded target rows were counted"),
    ("coverage", cov_int8_lengths, LARGE, "large inputs"),
    ("online_softmax", os_shortcut_without_padding, UNPADDED, "no padding"),
    ("online_softmax", online_skips_partial_block, PADDED, "partial block was never read"),
    ("online_softmax", online_naive_exp, LARGE, "large inputs"),
    ("block_update", update_shortcut_without_padding, UNPADDED, "no padding"),
    ("block_update", update_ignores_valid, PADDED, "keys marked invalid"),
    ("block_update", update_exp_then_divide, LARGE, "large inputs"),
    ("causal_tiles", tiles_shortcut_without_padding, UNPADDED, "differ"),
    ("causal_tiles", tiles_unclamped, PADDED, "not clamped to n"),
    ("causal_tiles", tiles_int16_positions, LARGE, "int16_t without overflow"),
]
KIND_MUTANTS += lessons03_05.KIND_MUTANTS  # lessons 03-05
# lessons 06-07
KIND_MUTANTS += mutants_06_07.KIND_MUTANTS
# (exercise, kind of test case) with no mistake that shows there only, and why
KINDS_NOT_APPLICABLE = {**mutants_06_07.KINDS_NOT_APPLICABLE}


def test_every_exercise_has_every_kind_of_test_case():
    """Every kind of test case, and a mistake that shows there only; where padding does not apply (RoPE rotates
    whatever it is given), the exercise has neither padded nor unpadded cases, and KINDS_NOT_APPLICABLE says so."""
    for name, exercise in checks.EXERCISES.items():
        tags = set().union(*(case.tags for case in exercise.make_cases()))
        without_padding = {(name, PADDED), (name, UNPADDED)} <= set(KINDS_NOT_APPLICABLE)
        required = set(REQUIRED_TAGS) - ({PADDED, UNPADDED} if without_padding else set())
        assert required <= tags, (name, required - tags)
    covered = {(name, tag) for name, _, tag, _ in KIND_MUTANTS}
    assert covered == {(name, tag) for name in checks.EXERCISES for tag in REQUIRED_TAGS} - set(KINDS_NOT_APPLICABLE)


@pytest.mark.parametrize(
    "name, mutant, tag, diagnosis", KIND_MUTANTS, ids=[f"{m[0]}-{m[2].replace(' ', '_')}" for m in KIND_MUTANTS]
)
def test_each_kind_of_case_catches_a_mistake_the_others_miss(name, mutant, tag, diagnosis):
    exercise = checks.EXERCISES[name]
    cases = exercise.make_cases()
    failing = [
        case
        for case, got, expected in zip(cases, _outputs(mutant, cases), _outputs(exercise.reference, cases), strict=True)
        if got is None or not same(expected, got)
    ]
    assert failing and all(tag in case.tags for case in failing), [c.description for c in failing]
    result = checks.check(name, mutant)
    assert result.status == FAILED and diagnosis in result.message, repr(result)


# --------------------------------------------------------------------------------------------
# The independent gallery: no wrong diagnosis, few messages that say only how many entries differ
# --------------------------------------------------------------------------------------------

_SPECIFIC = {"variant", "where", "cases", "scale", "nonfinite", "type", "dtype", "shape", "property"}
_SPECIFIC |= {"error", "inplace", "timeout", "crashed", "also"}


def _gallery_results():
    return [(name, fn, expected, checks.check(name, fn)) for name, fn, expected in BUGS]


@pytest.fixture(scope="module")
def gallery():
    return _gallery_results()


def test_the_independent_gallery_is_large_enough():
    counts = {name: sum(1 for b in BUGS if b[0] == name) for name in checks.EXERCISES}
    assert min(counts.values()) >= 6, counts

    def code(fn):
        return fn.__code__.co_code, fn.__code__.co_names, fn.__code__.co_consts[1:]  # [0]: the docstring

    ours = {code(m[1]) for m in MUTANTS} | {
        code(fn) for e in checks.EXERCISES.values() for v in e.variants for fn in v.fns
    }
    assert not [fn.__name__ for _, fn, _ in BUGS if code(fn) in ours]  # none copied


def test_no_bug_of_the_independent_gallery_gets_a_wrong_diagnosis(gallery):
    wrong = []
    for name, fn, expected, result in gallery:
        named = [v.diagnosis for v in checks.EXERCISES[name].variants if v.diagnosis in result.message]
        if result.status != FAILED:
            wrong.append((fn.__name__, "not failed", result.status))
        elif expected == GENERIC and named:
            wrong.append((fn.__name__, "named a variant", named[0]))
        elif expected != GENERIC and (expected not in result.message or any(expected not in d for d in named)):
            wrong.append((fn.__name__, expected, result.message))
    assert not wrong, wrong


def test_few_bugs_get_only_a_count_of_differing_entries(gallery):
    only_count = [fn.__name__ for _, fn, _, result in gallery if not set(result.findings) & _SPECIFIC]
    fraction = len(only_count) / len(gallery)
    print(f"\ngeneric-only messages: {len(only_count)} of {len(gallery)} bugs ({fraction:.1%}): {only_count}")
    assert fraction <= 0.15, only_count


# --------------------------------------------------------------------------------------------
# The decision rule
# --------------------------------------------------------------------------------------------


def _counting(fn):
    calls = []

    def counted(*args):
        calls.append(1)
        return fn(*args)

    return counted, calls


def test_every_case_is_called_even_after_a_mismatch():
    counted, calls = _counting(mask_inverted)
    result = checks.check_padding_mask(counted)
    assert result.status == FAILED and len(calls) == len(checks.EXERCISES["padding_mask"].make_cases())


def test_a_hard_problem_is_reported_at_its_case_unless_values_failed_before():
    def raises_on_case_3(lengths, max_len):
        if len(lengths) == 1:
            raise ValueError("a batch of one confuses me")
        return torch.arange(max_len)[None, :] < lengths[:, None]

    result = checks.check_padding_mask(raises_on_case_3)
    assert result.where.startswith("test case 3 of 6") and "raised ValueError" in result.message

    def wrong_then_raises(lengths, max_len):
        if len(lengths) == 1:
            raise ValueError("a batch of one confuses me")
        return torch.arange(max_len)[None, :] <= lengths[:, None]

    result = checks.check_padding_mask(wrong_then_raises)
    assert result.where.startswith("test case 1 of 6") and "one True too many" not in result.message
    assert "Also, on test case 3 of 6" in result.message and "raised ValueError" in result.message


def test_a_variant_is_named_only_when_every_case_where_it_runs_agrees():
    def off_by_one_on_the_first_case_only(lengths, max_len):
        mask = torch.arange(max_len)[None, :] < lengths[:, None]
        if lengths.tolist() == [3, 5, 1]:
            mask = torch.arange(max_len)[None, :] <= lengths[:, None]
        return mask

    result = checks.check_padding_mask(off_by_one_on_the_first_case_only)
    assert result.status == FAILED and "variant" not in result.findings
    assert not [v for v in checks.EXERCISES["padding_mask"].variants if v.diagnosis in result.message]
    # what was observed instead: where, and on which cases
    assert "only at the first padding position after a sentence (index length)" in result.message


def test_no_call_after_a_time_out():
    _needs_main_thread()
    counted, calls = _counting(lambda lengths, max_len: time.sleep(5))
    result = checks.check_padding_mask(counted, time_limit=0.1)
    assert result.status == FAILED and len(calls) == 1 and "did not finish" in result.message


def test_overflow_is_named_only_on_large_inputs():
    def naive(scores, mask):
        e = torch.exp(scores).masked_fill(~mask, 0.0)
        return e / e.sum(dim=-1, keepdim=True)

    result = checks.check_masked_softmax(naive)  # NaN first in the fully masked row: 0/0, no overflow claimed
    assert "NaN" in result.message and "only in row 1" in result.message and "large inputs" not in result.message
    result = checks.check_masked_softmax(softmax_naive_exp)  # NaN only with scores around ±500
    assert (
        "This test case has large inputs" in result.message
        and "If your function computes one by hand" in result.message
    )
    assert "except the ones with large inputs" in result.message


@pytest.mark.parametrize(
    "name, fn, observed",
    [
        (
            "reverse_padded",
            lambda src, lengths: torch.where(
                padding_mask(lengths, src.shape[1]), learner_reverse_padded(src, lengths), 1
            ),
            "only at padding positions; every one of the real tokens matches",
        ),
        (
            "last_real_state",
            lambda s, n: torch.cat([learner_last_real_state(s, n)[:-1], s[-1:, 0]]),
            "all in one sentence, batch index 3",
        ),
        (
            "masked_softmax",
            lambda s, m: learner_masked_softmax(s, m).masked_fill(~m.any(-1, keepdim=True), 0.5),
            "only in row 1, which has no positions the mask allows at all",
        ),
        (
            "additive_score",
            lambda q, k, W, U, v: torch.cat([additive_score(q, k, W, U, v)[:, :-1], q[:, :1]], dim=1),
            "only at the last position",
        ),
        (
            "bidirectional_summary",
            lambda s, n: torch.cat([s[:, -1, : s.shape[-1] // 2], s[:, 0, s.shape[-1] // 2 :]], dim=-1) * 1.0001,
            "",
        ),
        (
            "context_vector",
            lambda w, v: 2 * learner_context_vector(w, v),
            "every entry of yours is the reference's times 2",
        ),
    ],
    ids=["padding", "one-sentence", "empty-row", "last-position", "no-false-claim", "scale"],
)
def test_what_is_observed_is_said(name, fn, observed):
    result = checks.check(name, fn)
    assert result.status == FAILED and observed.lower() in result.message.lower(), repr(result)


def test_local_and_remote_calls_give_the_same_result():
    """The grader's caller replays what a kernel recorded for every case; the decision is the same."""
    from attnedu.grading.results import remote_call

    exercise = checks.EXERCISES["last_real_state"]
    cases = exercise.make_cases()
    for fn in (last_off_by_one, last_one_early, lambda s, n: s.sum(1), learner_last_real_state):
        local = checks.check("last_real_state", fn)
        records = {}
        for index, case in enumerate(cases):
            args = copy.deepcopy(case.args)
            call = checks.calling.call_learner(fn, args, 5.0)
            records[index] = {"value": call.value, "args": args, "error_name": call.error_name,
                              "error_text": call.error_text, "error_line": call.error_line}  # fmt: skip
        remote = checks.diagnosis.run_check(
            exercise, "last_real_state", caller=remote_call(records, "done"), cases=cases
        )
        assert (remote.status, remote.message, remote.where) == (local.status, local.message, local.where)


def test_the_fraction_of_generic_messages_is_reported(gallery, capsys):
    only_count = sum(1 for *_, result in gallery if not set(result.findings) & _SPECIFIC)
    with capsys.disabled():
        print(f"\n[independent gallery] {len(gallery)} bugs, {only_count} with a generic-only message")


# --------------------------------------------------------------------------------------------
# Bad submissions give a clean result
# --------------------------------------------------------------------------------------------


def test_not_implemented_is_not_attempted():
    def stub(scores, mask):
        # YOUR CODE HERE
        raise NotImplementedError()

    result = checks.check_masked_softmax(stub)
    assert result.status == NOT_ATTEMPTED and result.score == 0
    assert "⏳" in repr(result) and "⏳" in result._repr_markdown_()


def test_exception_names_the_error_and_the_learners_line():
    def broken(scores, mask):
        weights = torch.softmax(scores, dim=-1)
        raise ValueError("something I did not expect")
        return weights

    result = checks.check_masked_softmax(broken)
    assert result.status == FAILED
    assert "raised ValueError" in result.message and "something I did not expect" in result.message
    assert 'raise ValueError("something I did not expect")' in result.message


def test_sys_exit_does_not_end_the_process():
    result = checks.check_masked_softmax(lambda scores, mask: sys.exit(1))
    assert result.status == FAILED and "raised SystemExit" in result.message


@pytest.mark.parametrize(
    "returned, expected",
    [
        (lambda s, m: None, "None (is a `return` missing?)"),
        (lambda s, m: s.tolist(), "should be a torch.Tensor"),
        (lambda s, m: s.numpy(), "should be a torch.Tensor"),
        (lambda s, m: torch.full_like(s, float("nan")), "NaN"),
        (lambda s, m: torch.softmax(s.double(), dim=-1), "dtype torch.float64"),
        (lambda s, m: torch.zeros(3), "wrong shape"),
    ],
    ids=["none", "list", "numpy", "nan", "float64", "shape"],
)
def test_wrong_type_dtype_shape_or_nan(returned, expected):
    result = checks.check_masked_softmax(returned)
    assert result.status == FAILED and expected in result.message, repr(result)


def test_the_function_itself_must_be_passed():
    result = checks.check_padding_mask(torch.ones(2))
    assert result.status == FAILED and "check_padding_mask(padding_mask)" in result.message


def test_printing_is_captured_and_truncated():
    def chatty(lengths, max_len):
        for i in range(20_000):
            print("debug line", i)
        print("to stderr", file=sys.stderr)
        return torch.arange(max_len)[None, :] < lengths[:, None]

    result = checks.check_padding_mask(chatty)
    assert result.status == PASSED
    assert result.printed.startswith("debug line 0") and "more characters not shown" in result.printed
    assert len(repr(result)) < 3 * checks.MAX_PRINTED


def _needs_main_thread():
    """Busy loops are only stoppable by the alarm; in a helper thread they would spin on after the test."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("the time limit by SIGALRM works in the main thread only")


def test_infinite_loop_times_out():
    _needs_main_thread()

    def forever(lengths, max_len):
        while True:
            pass

    start = time.monotonic()
    result = checks.check_padding_mask(forever, time_limit=0.2)
    assert time.monotonic() - start < 3
    assert result.status == FAILED and "did not finish within 0.2 s" in result.message


def test_infinite_printing_loop_times_out_with_bounded_output():
    _needs_main_thread()

    def flood(lengths, max_len):
        while True:
            print("x" * 100)

    result = checks.check_padding_mask(flood, time_limit=0.2)
    assert result.status == FAILED and "did not finish" in result.message
    assert len(result.printed) < 2 * checks.MAX_PRINTED


def test_loop_that_catches_exceptions_is_still_stopped():
    _needs_main_thread()

    def stubborn(lengths, max_len):
        while True:
            try:
                time.sleep(0.01)
            except Exception:
                pass

    result = checks.check_padding_mask(stubborn, time_limit=0.2)
    assert result.status == FAILED and "did not finish" in result.message


def test_time_limit_outside_the_main_thread():
    stop = threading.Event()

    def slow(lengths, max_len):
        while not stop.is_set():  # ends when the test is over, so no thread keeps spinning
            time.sleep(0.01)

    results: list[CheckResult] = []
    thread = threading.Thread(target=lambda: results.append(checks.check_padding_mask(slow, time_limit=0.2)))
    thread.start()
    thread.join(5)
    stop.set()
    assert results and results[0].status == FAILED and "did not finish" in results[0].message


def test_alarm_state_is_restored():
    import signal

    _needs_main_thread()
    before = signal.getsignal(signal.SIGALRM)
    checks.check_padding_mask(learner_padding_mask)
    checks.check_padding_mask(lambda lengths, max_len: time.sleep(5), time_limit=0.1)
    assert signal.getsignal(signal.SIGALRM) == before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    for name, fns in CORRECT.items():
        checks.check(name, fns[0])
    assert torch.equal(torch.rand(3), expected)


# --------------------------------------------------------------------------------------------
# Rendering, hints, grading a namespace
# --------------------------------------------------------------------------------------------


def test_results_render_with_icons():
    passed = checks.check_padding_mask(learner_padding_mask)
    failed = checks.check_padding_mask(mask_inverted)
    assert repr(passed).startswith("✅ padding_mask passed")
    assert passed._repr_markdown_().startswith("✅ **`padding_mask`** passed")
    assert repr(failed).startswith("❌ padding_mask failed") and 'hint("padding_mask")' in repr(failed)
    assert failed._repr_markdown_().startswith("❌")
    assert repr(failed).startswith("❌ padding_mask failed on test case 1 of 6 (lengths [3, 5, 1], max_len 5): ")
    assert failed.to_dict() == {
        "exercise": "padding_mask",
        "status": "failed",
        "score": 0,
        "message": f"on {failed.where}: {failed.message}",
    }


def test_hints():
    failed = checks.check_padding_mask(mask_inverted)
    assert failed.hint() == checks.hint("padding_mask")
    assert "torch.arange(max_len)" in repr(checks.hint("padding_mask"))
    assert checks.hint("padding_mask")._repr_markdown_().startswith("💡")
    with pytest.raises(ValueError, match="no exercise named 'padding'"):
        checks.hint("padding")


def test_grade_namespace():
    namespace = {"padding_mask": learner_padding_mask, "last_real_state": last_takes_padding}
    report = checks.grade_namespace(namespace, lesson="01_rnn_bottleneck")
    assert report["lesson"] == "01_rnn_bottleneck"
    statuses = {r["exercise"]: r["status"] for r in report["results"]}
    assert statuses == {
        "padding_mask": PASSED,
        "last_real_state": FAILED,
        "reverse_padded": NOT_ATTEMPTED,
        "bidirectional_summary": NOT_ATTEMPTED,
    }
    with pytest.raises(ValueError, match="no lesson named"):
        checks.grade_namespace(namespace, lesson="99_nothing")
