"""Lesson 07, 07_positional_encoding: the galleries of ``add_sinusoidal``, ``apply_rope`` and ``rope_scores``
(CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as tests/galleries/__init__.py
describes them).

The correct versions are all in float32, as a learner writes them. RoPE rotates whatever vectors it is
given, so padding changes nothing: ``apply_rope`` and ``rope_scores`` have neither padded nor unpadded
test cases (KINDS_NOT_APPLICABLE); they still have large ones.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnedu.checks.exercise import LARGE, PADDED, UNPADDED
from attnedu.positional import apply_rope

from .common import GENERIC, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions, all in float32 as a learner writes them
# --------------------------------------------------------------------------------------------


def learner_add_sinusoidal(embeddings):
    _, seq_len, d_model = embeddings.shape
    positions = torch.arange(seq_len).float()[:, None]
    frequencies = 10000 ** (-torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(seq_len, d_model)
    pe[:, 0::2] = torch.sin(positions * frequencies)
    pe[:, 1::2] = torch.cos(positions * frequencies)
    return embeddings + pe


def learner_add_sinusoidal_exp_log(embeddings):
    """The form of PyTorch's tutorial and the annotated Transformer: exp(2i * -log(10000) / d)."""
    seq_len, d_model = embeddings.shape[1], embeddings.shape[2]
    position = torch.arange(0, seq_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe = torch.zeros(seq_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return embeddings + pe.unsqueeze(0)


def learner_add_sinusoidal_loop(embeddings):
    _, seq_len, d_model = embeddings.shape
    pe = torch.zeros(seq_len, d_model)
    for pos in range(seq_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d_model))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    return embeddings + pe


def learner_apply_rope(x, positions):
    half = x.shape[-1] // 2
    frequencies = 10000.0 ** (-torch.arange(half).float() * 2 / x.shape[-1])
    angles = positions.float()[:, None] * frequencies
    cos, sin = torch.cos(angles), torch.sin(angles)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def learner_apply_rope_rotate_half(x, positions):
    """Hugging Face's Llama: inv_freq, cat(freqs, freqs), x * cos + rotate_half(x) * sin."""
    dim = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    freqs = torch.outer(positions.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    x1, x2 = x[..., : dim // 2], x[..., dim // 2 :]
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def learner_apply_rope_complex(x, positions):
    half = x.shape[-1] // 2
    angles = positions.float()[:, None] * torch.exp(-math.log(10000.0) * torch.arange(half).float() * 2 / (2 * half))
    z = torch.complex(x[..., :half].contiguous(), x[..., half:].contiguous()) * torch.polar(
        torch.ones_like(angles), angles
    )
    return torch.cat([z.real, z.imag], dim=-1)


def learner_rope_scores(q, k, q_positions, k_positions):
    rq, rk = learner_apply_rope(q, q_positions), learner_apply_rope(k, k_positions)
    return rq @ rk.transpose(-2, -1) / math.sqrt(q.shape[-1])


def learner_rope_scores_relative(q, k, q_positions, k_positions):
    """Only the offset matters: rotate each key by n - m for every query m (a loop over queries)."""
    rows = []
    for t, m in enumerate(q_positions.tolist()):
        rk = learner_apply_rope_rotate_half(k, k_positions - m)  # (batch, heads, key_len, head_dim)
        rows.append((q[..., t : t + 1, :] @ rk.transpose(-2, -1)).squeeze(-2))
    return torch.stack(rows, dim=-2) / q.shape[-1] ** 0.5


CORRECT = {
    "add_sinusoidal": [learner_add_sinusoidal, learner_add_sinusoidal_exp_log, learner_add_sinusoidal_loop],
    "apply_rope": [learner_apply_rope, learner_apply_rope_rotate_half, learner_apply_rope_complex, apply_rope],
    "rope_scores": [learner_rope_scores, learner_rope_scores_relative],
}


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------


def _table(seq_len, d_model, positions=None, exponent=2.0, base=10000.0, swap=False, halves=False):
    position = (torch.arange(seq_len) if positions is None else positions).double()[:, None]
    i = torch.arange(d_model // 2).double()
    scale = base ** (exponent * i / d_model)
    angles = position / scale
    first, second = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    if halves:
        return torch.cat([first, second], dim=1).float()
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = first, second
    return pe.float()


def sin_batch_axis(embeddings):
    pe = _table(embeddings.shape[0], embeddings.shape[2])
    return embeddings + pe.unsqueeze(1)  # (batch, 1, d_model): PE(b) for sentence b


def sin_from_one(embeddings):
    return embeddings + _table(
        embeddings.shape[1], embeddings.shape[2], positions=torch.arange(1, embeddings.shape[1] + 1)
    )


def sin_swapped(embeddings):
    return embeddings + _table(embeddings.shape[1], embeddings.shape[2], swap=True)


def sin_concatenated(embeddings):
    return embeddings + _table(embeddings.shape[1], embeddings.shape[2], halves=True)


def sin_pair_exponent(embeddings):
    return embeddings + _table(embeddings.shape[1], embeddings.shape[2], exponent=1.0)


def sin_double_exponent(embeddings):
    return embeddings + _table(embeddings.shape[1], embeddings.shape[2], exponent=4.0)


def sin_base_1000(embeddings):
    return embeddings + _table(embeddings.shape[1], embeddings.shape[2], base=1000.0)


def sin_encoding_only(embeddings):
    return _table(embeddings.shape[1], embeddings.shape[2]).repeat(embeddings.shape[0], 1, 1)


def sin_skips_padding(embeddings):
    real = (embeddings != 0).any(dim=-1, keepdim=True)
    return embeddings + _table(embeddings.shape[1], embeddings.shape[2]) * real


def sin_in_place(embeddings):
    embeddings += _table(embeddings.shape[1], embeddings.shape[2])
    return embeddings


def sin_float64(embeddings):
    return embeddings + _table(embeddings.shape[1], embeddings.shape[2]).double()


def sin_concatenates(embeddings):
    pe = _table(embeddings.shape[1], embeddings.shape[2])
    return torch.cat([embeddings, pe.expand_as(embeddings)], dim=-1)


def _rotate(x, positions, pair_shift=0, sign=1.0, exponent=2.0, swap=False):
    half = x.shape[-1] // 2
    frequencies = 10000.0 ** (-exponent * (torch.arange(half).double() + pair_shift) / x.shape[-1])
    angles = sign * positions.double()[:, None] * frequencies
    cos, sin = angles.cos().float(), angles.sin().float()
    if swap:
        cos, sin = sin, cos
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def rope_interleaved(x, positions):
    half = x.shape[-1] // 2
    angles = positions.double()[:, None] * 10000.0 ** (-2 * torch.arange(half).double() / x.shape[-1])
    cos, sin = angles.cos().float(), angles.sin().float()
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


def rope_backwards(x, positions):
    return _rotate(x, positions, sign=-1.0)


def rope_cos_sin_swapped(x, positions):
    return _rotate(x, positions, swap=True)


def rope_ignores_positions(x, positions):
    return _rotate(x, torch.arange(x.shape[-2]))


def rope_from_one(x, positions):
    return _rotate(x, torch.arange(1, x.shape[-2] + 1))


def rope_pair_one_high(x, positions):
    return _rotate(x, positions, pair_shift=1)


def rope_pair_one_low(x, positions):
    return _rotate(x, positions, pair_shift=-1)


def rope_half_exponent(x, positions):
    return _rotate(x, positions, exponent=1.0)


def rope_frequencies_interleaved(x, positions):
    dim = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).double() / dim))
    emb = (positions.double()[:, None] * inv_freq).repeat_interleave(2, dim=-1)
    rotated = torch.cat((-x[..., dim // 2 :], x[..., : dim // 2]), dim=-1)
    return x * emb.cos().float() + rotated * emb.sin().float()


def rope_identity(x, positions):
    return x.clone()


def rope_in_place(x, positions):
    x.copy_(apply_rope(x, positions))
    return x


def rope_float64(x, positions):
    return apply_rope(x.double(), positions)


def _scores(q, k, qp, kp, rope=apply_rope, scale=None):
    s = rope(q, qp) @ rope(k, kp).transpose(-2, -1)
    return s / (math.sqrt(q.shape[-1]) if scale is None else scale)


def rs_unscaled(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, k_positions, scale=1.0)


def rs_divided_by_dim(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, k_positions, scale=q.shape[-1])


def rs_queries_from_zero(q, k, q_positions, k_positions):
    return _scores(q, k, torch.arange(q.shape[-2]), k_positions)


def rs_keys_from_zero(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, torch.arange(k.shape[-2]))


def rs_both_from_zero(q, k, q_positions, k_positions):
    return _scores(q, k, torch.arange(q.shape[-2]), torch.arange(k.shape[-2]))


def rs_queries_only(q, k, q_positions, k_positions):
    return apply_rope(q, q_positions) @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def rs_keys_only(q, k, q_positions, k_positions):
    return q @ apply_rope(k, k_positions).transpose(-2, -1) / math.sqrt(q.shape[-1])


def rs_interleaved(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, k_positions, rope=rope_interleaved)


def rs_backwards(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, k_positions, rope=rope_backwards)


def rs_pair_one_high(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, k_positions, rope=rope_pair_one_high)


def rs_pair_one_low(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, k_positions, rope=rope_pair_one_low)


def rs_transposed(q, k, q_positions, k_positions):
    return apply_rope(k, k_positions) @ apply_rope(q, q_positions).transpose(-2, -1) / math.sqrt(q.shape[-1])


def rs_softmax(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, k_positions).softmax(dim=-1)


def rs_unrotated(q, k, q_positions, k_positions):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def rs_positions_mixed_up(q, k, q_positions, k_positions):
    return _scores(q, k, k_positions[-q.shape[-2] :], q_positions[: k.shape[-2]])


MUTANTS = [
    ("add_sinusoidal", sin_batch_axis, "taken from the batch axis"),
    ("add_sinusoidal", sin_from_one, "the positions count from 1"),
    ("add_sinusoidal", sin_swapped, "sin and cos are swapped"),
    ("add_sinusoidal", sin_concatenated, "first half of the features"),
    ("add_sinusoidal", sin_pair_exponent, "the exponent is i / d_model"),
    ("add_sinusoidal", sin_double_exponent, "twice the formula's"),
    ("add_sinusoidal", sin_base_1000, "base is 1000"),
    ("add_sinusoidal", sin_encoding_only, "the encoding alone"),
    ("add_sinusoidal", sin_skips_padding, "left out at the padding positions"),
    ("add_sinusoidal", sin_in_place, "modified its input `embeddings` in place"),
    ("add_sinusoidal", sin_float64, "dtype torch.float64"),
    ("add_sinusoidal", sin_concatenates, "wrong shape"),
    ("apply_rope", rope_interleaved, "interleaved layout"),
    ("apply_rope", rope_backwards, "rotation goes the wrong way"),
    ("apply_rope", rope_cos_sin_swapped, "cos and sin are swapped"),
    ("apply_rope", rope_ignores_positions, "`positions` was ignored"),
    ("apply_rope", rope_from_one, "the positions count from 1"),
    ("apply_rope", rope_pair_one_high, "one pair too high"),
    ("apply_rope", rope_pair_one_low, "one pair too low"),
    ("apply_rope", rope_half_exponent, "the exponent is -i/head_dim"),
    ("apply_rope", rope_frequencies_interleaved, "laid out for interleaved pairs"),
    ("apply_rope", rope_identity, "nothing was rotated"),
    ("apply_rope", rope_in_place, "modified its input `x` in place"),
    ("apply_rope", rope_float64, "dtype torch.float64"),
    ("rope_scores", rs_unscaled, "not scaled"),
    ("rope_scores", rs_divided_by_dim, "divided by head_dim"),
    ("rope_scores", rs_queries_from_zero, "queries were placed at positions 0, 1"),
    ("rope_scores", rs_keys_from_zero, "keys were placed at positions 0, 1"),
    ("rope_scores", rs_both_from_zero, "both `q_positions` and `k_positions` were ignored"),
    ("rope_scores", rs_queries_only, "only the queries were rotated"),
    ("rope_scores", rs_keys_only, "only the keys were rotated"),
    ("rope_scores", rs_interleaved, "interleaved layout"),
    ("rope_scores", rs_backwards, "rotation goes the wrong way"),
    ("rope_scores", rs_pair_one_high, "one pair too high"),
    ("rope_scores", rs_pair_one_low, "one pair too low"),
    ("rope_scores", rs_transposed, "transposed"),
    ("rope_scores", rs_softmax, "softmax of the scores"),
    ("rope_scores", rs_unrotated, "nothing was rotated"),
    ("rope_scores", rs_positions_mixed_up, "raised"),
]


# positions one too high (counted from 1) and taken from the axis one too low (the batch); the frequency index
# one pair too high and one too low
OFF_BY_ONE = {
    "add_sinusoidal": (sin_from_one, sin_batch_axis),
    "apply_rope": (rope_pair_one_high, rope_pair_one_low),
    "rope_scores": (rs_pair_one_high, rs_pair_one_low),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


_TABLE_512 = _table(512, 16)


def sin_table_of_512(embeddings):
    pe = _table(512, embeddings.shape[2]) if embeddings.shape[2] != 16 else _TABLE_512  # precomputed, as in BERT
    return embeddings + pe[: embeddings.shape[1]]


def sin_shortcut_without_padding(embeddings):
    if bool((embeddings != 0).any(dim=-1).all()):
        return embeddings.double() + _table(embeddings.shape[1], embeddings.shape[2]).double()  # (but float64)
    return learner_add_sinusoidal(embeddings)


def _cached(rope_fn):
    """A cos/sin cache for 2048 positions, as models precompute one (max_position_embeddings), indexed by positions."""

    def with_cache(x, positions):
        table = torch.arange(2048)
        return rope_fn(x, table[positions])

    return with_cache


def rs_cache_of_2048(q, k, q_positions, k_positions):
    rope = _cached(learner_apply_rope)
    return rope(q, q_positions) @ rope(k, k_positions).transpose(-2, -1) / math.sqrt(q.shape[-1])


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("add_sinusoidal", sin_shortcut_without_padding, UNPADDED, "dtype torch.float64"),
    ("add_sinusoidal", sin_skips_padding, PADDED, "left out at the padding positions"),
    ("add_sinusoidal", sin_table_of_512, LARGE, "raised RuntimeError"),
    ("apply_rope", _cached(learner_apply_rope), LARGE, "raised IndexError"),
    ("rope_scores", rs_cache_of_2048, LARGE, "raised IndexError"),
]


KINDS_NOT_APPLICABLE = {
    (name, kind): "RoPE rotates whatever vectors it is given: padding changes nothing"
    for name in ("apply_rope", "rope_scores")
    for kind in (PADDED, UNPADDED)
}


# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the checks' variants
# --------------------------------------------------------------------------------------------


def _pe_rows(n, d):
    pe = torch.zeros(n, d)
    for pos in range(n):
        for i in range(0, d, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d))
    return pe


def as_tutorial_seq_first(embeddings):
    pe = _pe_rows(64 if embeddings.size(0) < 64 else embeddings.size(0), embeddings.size(2)).unsqueeze(1)
    return embeddings + pe[: embeddings.size(0)]  # written for (seq_len, batch, d_model)


def as_positions_plus_one(embeddings):
    n, d = embeddings.shape[1], embeddings.shape[2]
    return embeddings + _pe_rows(n + 1, d)[1:]


def as_cos_first(embeddings):
    n, d = embeddings.shape[1], embeddings.shape[2]
    pos = torch.arange(n).unsqueeze(1).float()
    div = torch.pow(10000.0, torch.arange(0, d, 2).float() / d)
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.cos(pos / div)
    pe[:, 1::2] = torch.sin(pos / div)
    return embeddings + pe


def as_cat_sin_cos(embeddings):
    n, d = embeddings.shape[1], embeddings.shape[2]
    angles = torch.arange(n).float()[:, None] / 10000 ** (torch.arange(0, d, 2).float() / d)
    return embeddings + torch.cat([angles.sin(), angles.cos()], dim=-1)


def as_feature_index_exponent(embeddings):
    n, d = embeddings.shape[1], embeddings.shape[2]
    pe = torch.zeros(n, d)
    for pos in range(n):
        for i in range(d // 2):
            pe[pos, 2 * i] = math.sin(pos / 10000 ** (i / d))
            pe[pos, 2 * i + 1] = math.cos(pos / 10000 ** (i / d))
    return embeddings + pe


def as_exp_log_no_minus(embeddings):
    n, d = embeddings.shape[1], embeddings.shape[2]
    position = torch.arange(n).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2) * (math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return embeddings + pe


def as_plus_equals(embeddings):
    embeddings += _pe_rows(embeddings.shape[1], embeddings.shape[2])
    return embeddings


def as_odd_uses_own_index(embeddings):
    n, d = embeddings.shape[1], embeddings.shape[2]
    pe = torch.zeros(n, d)
    for pos in range(n):
        for j in range(d):
            angle = pos / 10000 ** (j / d)  # each feature with its own index, the cosines one step off
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return embeddings + pe


def ar_adjacent_pairs(x, positions):
    d = x.shape[-1]
    theta = 10000 ** (-torch.arange(0, d, 2).float() / d)
    ang = positions[:, None].float() * theta
    even, odd = x[..., ::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., ::2] = even * ang.cos() - odd * ang.sin()
    out[..., 1::2] = even * ang.sin() + odd * ang.cos()
    return out


def ar_rotate_half_wrong_sign(x, positions):
    d = x.shape[-1]
    inv_freq = 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d)
    emb = torch.cat([positions.float()[:, None] * inv_freq] * 2, dim=-1)
    rotated = torch.cat([x[..., d // 2 :], -x[..., : d // 2]], dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def ar_arange_positions(x, positions):
    d, n = x.shape[-1], x.shape[-2]
    ang = torch.arange(n).float()[:, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], dim=-1)


def ar_paper_index(x, positions):
    d = x.shape[-1]
    i = torch.arange(d // 2).float()
    theta = 10000 ** (-2 * (i - 1) / d)  # the paper's theta_i, with i from 0
    ang = positions.float()[:, None] * theta
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], dim=-1)


def ar_repeat_interleave(x, positions):
    d = x.shape[-1]
    freqs = positions.float()[:, None] / 10000 ** (torch.arange(0, d, 2).float() / d)
    emb = freqs.repeat_interleave(2, dim=-1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()


def ar_heads_axis(x, positions):
    d = x.shape[-1]
    ang = positions.float()[:, None, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)  # (seq, 1, d/2)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], dim=-1)


def ar_rotates_in_place(x, positions):
    d = x.shape[-1]
    ang = positions.float()[:, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)
    a, b = x[..., : d // 2].clone(), x[..., d // 2 :].clone()
    x[..., : d // 2] = a * ang.cos() - b * ang.sin()
    x[..., d // 2 :] = a * ang.sin() + b * ang.cos()
    return x


def _my_rope(x, positions):
    d = x.shape[-1]
    ang = positions.float()[:, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], dim=-1)


def rsb_no_sqrt(q, k, q_positions, k_positions):
    return torch.einsum("bhqd,bhkd->bhqk", _my_rope(q, q_positions), _my_rope(k, k_positions))


def rsb_same_positions(q, k, q_positions, k_positions):
    positions = torch.arange(max(q.shape[-2], k.shape[-2]))
    return _my_rope(q, positions[: q.shape[-2]]) @ _my_rope(k, positions[: k.shape[-2]]).mT / q.shape[-1] ** 0.5


def rsb_query_top_left(q, k, q_positions, k_positions):
    rq = _my_rope(q, torch.arange(q.shape[-2]))
    return rq @ _my_rope(k, k_positions).transpose(2, 3) / math.sqrt(q.size(-1))


def rsb_key_unrotated(q, k, q_positions, k_positions):
    return _my_rope(q, q_positions) @ k.transpose(-1, -2) / math.sqrt(q.size(-1))


def rsb_k_times_q(q, k, q_positions, k_positions):
    return _my_rope(k, k_positions) @ _my_rope(q, q_positions).transpose(-1, -2) / math.sqrt(q.size(-1))


def rsb_relative_wrong_sign(q, k, q_positions, k_positions):
    rows = []
    for t, m in enumerate(q_positions.tolist()):
        rk = _my_rope(k, m - k_positions)
        rows.append(q[:, :, t : t + 1] @ rk.transpose(-1, -2))  # (batch, heads, 1, key)
    return torch.cat(rows, dim=2) / math.sqrt(q.size(-1))


def rsb_weights(q, k, q_positions, k_positions):
    scores = _my_rope(q, q_positions) @ _my_rope(k, k_positions).mT / math.sqrt(q.size(-1))
    return F.softmax(scores, dim=-1)


def rsb_adjacent_pairs(q, k, q_positions, k_positions):
    return ar_adjacent_pairs(q, q_positions) @ ar_adjacent_pairs(k, k_positions).mT / math.sqrt(q.size(-1))


BUGS = [
    ("add_sinusoidal", as_tutorial_seq_first, "taken from the batch axis"),
    ("add_sinusoidal", as_positions_plus_one, "the positions count from 1"),
    ("add_sinusoidal", as_cos_first, "sin and cos are swapped"),
    ("add_sinusoidal", as_cat_sin_cos, "first half of the features"),
    ("add_sinusoidal", as_feature_index_exponent, "the exponent is i / d_model"),
    ("add_sinusoidal", as_exp_log_no_minus, GENERIC),
    ("add_sinusoidal", as_plus_equals, "modified its input `embeddings` in place"),
    ("add_sinusoidal", as_odd_uses_own_index, GENERIC),
    ("apply_rope", ar_adjacent_pairs, "interleaved layout"),
    ("apply_rope", ar_rotate_half_wrong_sign, "rotation goes the wrong way"),
    ("apply_rope", ar_arange_positions, "`positions` was ignored"),
    ("apply_rope", ar_paper_index, "one pair too low"),
    ("apply_rope", ar_repeat_interleave, "laid out for interleaved pairs"),
    ("apply_rope", ar_heads_axis, GENERIC),
    ("apply_rope", ar_rotates_in_place, "modified its input `x` in place"),
    ("rope_scores", rsb_no_sqrt, "not scaled"),
    ("rope_scores", rsb_same_positions, "both `q_positions` and `k_positions` were ignored"),
    ("rope_scores", rsb_query_top_left, "queries were placed at positions 0, 1"),
    ("rope_scores", rsb_key_unrotated, "only the queries were rotated"),
    ("rope_scores", rsb_k_times_q, "transposed"),
    ("rope_scores", rsb_relative_wrong_sign, "score at the opposite offset"),
    ("rope_scores", rsb_weights, "softmax of the scores"),
    ("rope_scores", rsb_adjacent_pairs, "interleaved layout"),
]
