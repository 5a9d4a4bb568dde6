"""Lesson 07, 07_positional_encoding: the galleries of ``sinusoidal_queries_keys``, ``apply_rope_interleaved``,
``rope_scores`` and ``alibi_bias`` (CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as
tests/galleries/__init__.py describes them), and REFERENCE_USE: functions that are, or call, the package's own
``attnedu.positional``, which the exercises forbid.

The correct versions are all in float32, as a learner writes them. RoPE rotates whatever vectors it is given
and ALiBi's bias depends on positions only, so ``apply_rope_interleaved``, ``rope_scores`` and ``alibi_bias``
have neither padded nor unpadded test cases (KINDS_NOT_APPLICABLE); they still have large ones.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from attnedu import positional
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED

from .common import GENERIC, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions, all in float32 as a learner writes them
# --------------------------------------------------------------------------------------------


def _pe(seq_len, d_model):
    positions = torch.arange(seq_len).float()[:, None]
    frequencies = 10000 ** (-torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(seq_len, d_model)
    pe[:, 0::2] = torch.sin(positions * frequencies)
    pe[:, 1::2] = torch.cos(positions * frequencies)
    return pe


def learner_sinusoidal_queries_keys(embeddings, W_q, W_k):
    encoded = embeddings + _pe(embeddings.shape[1], embeddings.shape[2])
    return encoded @ W_q, encoded @ W_k


def learner_sinusoidal_queries_keys_exp_log(embeddings, W_q, W_k):
    """The form of PyTorch's tutorial and the annotated Transformer: exp(2i * -log(10000) / d), and einsum."""
    seq_len, d_model = embeddings.shape[1], embeddings.shape[2]
    position = torch.arange(0, seq_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe = torch.zeros(seq_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    x = embeddings + pe.unsqueeze(0)
    return torch.einsum("bsd,dh->bsh", x, W_q), torch.einsum("bsd,dh->bsh", x, W_k)


def learner_sinusoidal_queries_keys_loop(embeddings, W_q, W_k):
    _, seq_len, d_model = embeddings.shape
    pe = torch.zeros(seq_len, d_model)
    for pos in range(seq_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d_model))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    x = embeddings + pe
    return torch.matmul(x, W_q), torch.matmul(x, W_k)


def learner_rope_interleaved(x, positions):
    head_dim = x.shape[-1]
    angles = positions.float()[:, None] * 10000.0 ** (-torch.arange(0, head_dim, 2).float() / head_dim)
    cos, sin = angles.cos(), angles.sin()
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


def learner_rope_interleaved_complex(x, positions):
    """Meta's Llama: pairs as complex numbers, multiplied by e^(i theta)."""
    head_dim = x.shape[-1]
    freqs = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs_cis = torch.polar(torch.ones(len(positions), head_dim // 2), torch.outer(positions.float(), freqs))
    x_complex = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(x_complex * freqs_cis).flatten(-2)


def learner_rope_interleaved_gptj(x, positions):
    """GPT-J: each frequency repeated in place (repeat_interleave) and rotate_every_two."""
    head_dim = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    sinusoid = torch.einsum("i,j->ij", positions.float(), inv_freq)
    sin, cos = sinusoid.sin().repeat_interleave(2, dim=-1), sinusoid.cos().repeat_interleave(2, dim=-1)
    rotated = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    return x * cos + rotated * sin


def learner_rope_scores(q, k, q_positions, k_positions):
    rq, rk = learner_rope_interleaved(q, q_positions), learner_rope_interleaved(k, k_positions)
    return rq @ rk.transpose(-2, -1) / math.sqrt(q.shape[-1])


def learner_rope_scores_relative(q, k, q_positions, k_positions):
    """Only the offset matters: rotate each key by n - m for every query m (a loop over queries)."""
    rows = []
    for t, m in enumerate(q_positions.tolist()):
        rk = learner_rope_interleaved_gptj(k, k_positions - m)  # (batch, heads, key_len, head_dim)
        rows.append((q[..., t : t + 1, :] @ rk.transpose(-2, -1)).squeeze(-2))
    return torch.stack(rows, dim=-2) / q.shape[-1] ** 0.5


def _get_slopes(n):
    """Press et al.'s get_slopes, as in their repository."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (
        get_slopes_power_of_2(closest_power_of_2) + _get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
    )


def learner_alibi_bias(num_heads, query_len, key_len):
    slopes = torch.tensor(_get_slopes(num_heads))
    i = torch.arange(key_len - query_len, key_len)[:, None]
    j = torch.arange(key_len)[None, :]
    return -slopes[:, None, None] * (i - j)


def learner_alibi_bias_loops(num_heads, query_len, key_len):
    lower = 1
    while lower * 2 <= num_heads:
        lower *= 2
    slopes = [2 ** (-8 * k / lower) for k in range(1, lower + 1)]
    extra = [2 ** (-8 * k / (2 * lower)) for k in range(1, 2 * lower + 1, 2)]
    slopes = (slopes + extra)[:num_heads]
    bias = torch.zeros(num_heads, query_len, key_len)
    distance = torch.arange(key_len - query_len, key_len)[:, None] - torch.arange(key_len)[None, :]
    for h in range(num_heads):
        bias[h] = -slopes[h] * distance
    return bias


CORRECT = {
    "sinusoidal_queries_keys": [learner_sinusoidal_queries_keys, learner_sinusoidal_queries_keys_exp_log,
                                learner_sinusoidal_queries_keys_loop],
    "apply_rope_interleaved": [learner_rope_interleaved, learner_rope_interleaved_complex,
                               learner_rope_interleaved_gptj],
    "rope_scores": [learner_rope_scores, learner_rope_scores_relative],
    "alibi_bias": [learner_alibi_bias, learner_alibi_bias_loops],
}  # fmt: skip


# Functions that are, or call, the package's own positional code: the exercises ask for the learner's own.
def _calls_sinusoidal_encoding(embeddings, W_q, W_k):
    encoded = embeddings + positional.sinusoidal_encoding(embeddings.shape[1], embeddings.shape[2])
    return encoded @ W_q, encoded @ W_k


def _calls_apply_rope(q, k, q_positions, k_positions):
    rq = positional.apply_rope(q, q_positions, "interleaved")
    rk = positional.apply_rope(k, k_positions, "interleaved")
    return rq @ rk.transpose(-2, -1) / math.sqrt(q.shape[-1])


REFERENCE_USE = [
    ("sinusoidal_queries_keys", _calls_sinusoidal_encoding),
    ("apply_rope_interleaved", functools.partial(positional.apply_rope, layout="interleaved")),
    ("rope_scores", _calls_apply_rope),
    ("alibi_bias", positional.alibi_bias),
    ("alibi_bias", lambda h, q, k: -positional.alibi_slopes(h)[:, None, None] * learner_alibi_bias(1, q, k)[0] * 256),
]


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------


def _table(seq_len, d_model, positions=None, exponent=2.0, base=10000.0, swap=False, halves=False):
    position = (torch.arange(seq_len) if positions is None else positions).double()[:, None]
    i = torch.arange(d_model // 2).double()
    angles = position / base ** (exponent * i / d_model)
    first, second = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    if halves:
        return torch.cat([first, second], dim=1).float()
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = first, second
    return pe.float()


def _project(encoded, W_q, W_k):
    return encoded @ W_q, encoded @ W_k


def sin_after_projections(embeddings, W_q, W_k):
    q, k = embeddings @ W_q, embeddings @ W_k
    return q + _table(q.shape[1], q.shape[2]), k + _table(k.shape[1], k.shape[2])


def sin_queries_only(embeddings, W_q, W_k):
    return (embeddings + _table(embeddings.shape[1], embeddings.shape[2])) @ W_q, embeddings @ W_k


def sin_keys_only(embeddings, W_q, W_k):
    return embeddings @ W_q, (embeddings + _table(embeddings.shape[1], embeddings.shape[2])) @ W_k


def sin_swapped_outputs(embeddings, W_q, W_k):
    q, k = learner_sinusoidal_queries_keys(embeddings, W_q, W_k)
    return k, q


def sin_no_positions(embeddings, W_q, W_k):
    return _project(embeddings, W_q, W_k)


def sin_batch_axis(embeddings, W_q, W_k):
    pe = _table(embeddings.shape[0], embeddings.shape[2])
    return _project(embeddings + pe.unsqueeze(1), W_q, W_k)  # (batch, 1, d_model): PE(b) for sentence b


def sin_from_one(embeddings, W_q, W_k):
    n = embeddings.shape[1]
    return _project(embeddings + _table(n, embeddings.shape[2], positions=torch.arange(1, n + 1)), W_q, W_k)


def sin_swapped(embeddings, W_q, W_k):
    return _project(embeddings + _table(embeddings.shape[1], embeddings.shape[2], swap=True), W_q, W_k)


def sin_concatenated(embeddings, W_q, W_k):
    return _project(embeddings + _table(embeddings.shape[1], embeddings.shape[2], halves=True), W_q, W_k)


def sin_pair_exponent(embeddings, W_q, W_k):
    return _project(embeddings + _table(embeddings.shape[1], embeddings.shape[2], exponent=1.0), W_q, W_k)


def sin_double_exponent(embeddings, W_q, W_k):
    return _project(embeddings + _table(embeddings.shape[1], embeddings.shape[2], exponent=4.0), W_q, W_k)


def sin_base_1000(embeddings, W_q, W_k):
    return _project(embeddings + _table(embeddings.shape[1], embeddings.shape[2], base=1000.0), W_q, W_k)


def sin_encoding_only(embeddings, W_q, W_k):
    pe = _table(embeddings.shape[1], embeddings.shape[2]).repeat(embeddings.shape[0], 1, 1)
    return _project(pe, W_q, W_k)


def sin_skips_padding(embeddings, W_q, W_k):
    real = (embeddings != 0).any(dim=-1, keepdim=True)
    return _project(embeddings + _table(embeddings.shape[1], embeddings.shape[2]) * real, W_q, W_k)


def sin_in_place(embeddings, W_q, W_k):
    embeddings += _table(embeddings.shape[1], embeddings.shape[2])
    return _project(embeddings, W_q, W_k)


def sin_float64(embeddings, W_q, W_k):
    encoded = embeddings.double() + _table(embeddings.shape[1], embeddings.shape[2]).double()
    return encoded @ W_q.double(), encoded @ W_k.double()


def _rotate(x, positions, pair_shift=0, sign=1.0, exponent=2.0, swap=False, base=10000.0, halves=False, back="same"):
    head_dim = x.shape[-1]
    frequencies = base ** (-exponent * (torch.arange(head_dim // 2).double() + pair_shift) / head_dim)
    angles = sign * positions.double()[:, None] * frequencies
    cos, sin = angles.cos().float(), angles.sin().float()
    if swap:
        cos, sin = sin, cos
    a, b = (x[..., : head_dim // 2], x[..., head_dim // 2 :]) if halves else (x[..., 0::2], x[..., 1::2])
    first, second = a * cos - b * sin, a * sin + b * cos
    if (halves and back == "same") or back == "halves":
        return torch.cat([first, second], dim=-1)
    return torch.stack([first, second], dim=-1).flatten(-2)


def rope_halves(x, positions):
    return _rotate(x, positions, halves=True)


def rope_back_as_halves(x, positions):
    return _rotate(x, positions, back="halves")


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


def rope_base_1000(x, positions):
    return _rotate(x, positions, base=1000.0)


def rope_frequencies_for_halves(x, positions):
    head_dim = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).double() / head_dim))
    emb = torch.cat([positions.double()[:, None] * inv_freq] * 2, dim=-1)
    rotated = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    return x * emb.cos().float() + rotated * emb.sin().float()


def rope_identity(x, positions):
    return x.clone()


def rope_in_place(x, positions):
    x.copy_(learner_rope_interleaved(x, positions))
    return x


def rope_float64(x, positions):
    return learner_rope_interleaved(x.double(), positions)


def _scores(q, k, qp, kp, rope=learner_rope_interleaved, scale=None):
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
    return learner_rope_interleaved(q, q_positions) @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def rs_keys_only(q, k, q_positions, k_positions):
    return q @ learner_rope_interleaved(k, k_positions).transpose(-2, -1) / math.sqrt(q.shape[-1])


def rs_halves(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, k_positions, rope=rope_halves)


def rs_backwards(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, k_positions, rope=rope_backwards)


def rs_pair_one_high(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, k_positions, rope=rope_pair_one_high)


def rs_pair_one_low(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, k_positions, rope=rope_pair_one_low)


def rs_transposed(q, k, q_positions, k_positions):
    rk, rq = learner_rope_interleaved(k, k_positions), learner_rope_interleaved(q, q_positions)
    return rk @ rq.transpose(-2, -1) / math.sqrt(q.shape[-1])


def rs_softmax(q, k, q_positions, k_positions):
    return _scores(q, k, q_positions, k_positions).softmax(dim=-1)


def rs_unrotated(q, k, q_positions, k_positions):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def rs_positions_mixed_up(q, k, q_positions, k_positions):
    return _scores(q, k, k_positions[-q.shape[-2] :], q_positions[: k.shape[-2]])


def _bias(num_heads, query_len, key_len, slopes, top_left=False, sign=-1.0, distance=lambda d: d):
    first = 0 if top_left else key_len - query_len
    i = torch.arange(first, first + query_len)[:, None]
    j = torch.arange(key_len)[None, :]
    return sign * torch.tensor(slopes)[:, None, None] * distance(i - j)


def ab_plain_formula(num_heads, query_len, key_len):
    return _bias(num_heads, query_len, key_len, [2 ** (-8 * k / num_heads) for k in range(1, num_heads + 1)])


def ab_next_power(num_heads, query_len, key_len):
    upper = 2 ** math.ceil(math.log2(num_heads))
    return _bias(num_heads, query_len, key_len, _get_slopes(upper)[:num_heads])


def ab_sorted(num_heads, query_len, key_len):
    return _bias(num_heads, query_len, key_len, sorted(_get_slopes(num_heads), reverse=True))


def _slopes_from(start):
    def slopes(n):
        if n & (n - 1) == 0:
            return [2 ** (-8 * k / n) for k in range(start, n + start)]
        lower = 2 ** math.floor(math.log2(n))
        return slopes(lower) + slopes(2 * lower)[0::2][: n - lower]

    return slopes


def ab_from_zero(num_heads, query_len, key_len):
    return _bias(num_heads, query_len, key_len, _slopes_from(0)(num_heads))


def ab_from_two(num_heads, query_len, key_len):
    return _bias(num_heads, query_len, key_len, _slopes_from(2)(num_heads))


def ab_positive(num_heads, query_len, key_len):
    return _bias(num_heads, query_len, key_len, _get_slopes(num_heads), sign=1.0)


def ab_top_left(num_heads, query_len, key_len):
    return _bias(num_heads, query_len, key_len, _get_slopes(num_heads), top_left=True)


def ab_absolute(num_heads, query_len, key_len):
    return _bias(num_heads, query_len, key_len, _get_slopes(num_heads), distance=torch.abs)


def ab_clamped(num_heads, query_len, key_len):
    return _bias(num_heads, query_len, key_len, _get_slopes(num_heads), distance=lambda d: d.clamp(min=0))


def ab_float64(num_heads, query_len, key_len):
    return learner_alibi_bias(num_heads, query_len, key_len).double()


def ab_heads_last(num_heads, query_len, key_len):
    return learner_alibi_bias(num_heads, query_len, key_len).permute(1, 2, 0)


def ri_hf_rotate_half(x, positions):
    """Hugging Face's rotate_half (the halves layout) with the frequencies laid out for interleaved pairs."""
    d = x.shape[-1]
    angles = positions.float()[:, None] * 10000.0 ** (-torch.arange(0, d, 2).float() / d)
    angles = angles.repeat_interleave(2, dim=-1)  # f0 f0 f1 f1 ...
    rotate_half = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)
    return x * angles.cos() + rotate_half * angles.sin()


MUTANTS = [
    ("apply_rope_interleaved", ri_hf_rotate_half, "Hugging Face's rotate_half"),
    ("sinusoidal_queries_keys", sin_after_projections, "added after the projections"),
    ("sinusoidal_queries_keys", sin_queries_only, "only the queries got positions"),
    ("sinusoidal_queries_keys", sin_keys_only, "only the keys got positions"),
    ("sinusoidal_queries_keys", sin_swapped_outputs, "returned (keys, queries)"),
    ("sinusoidal_queries_keys", sin_no_positions, "no positions at all"),
    ("sinusoidal_queries_keys", sin_batch_axis, "taken from the batch axis"),
    ("sinusoidal_queries_keys", sin_from_one, "the positions count from 1"),
    ("sinusoidal_queries_keys", sin_swapped, "sin and cos are swapped"),
    ("sinusoidal_queries_keys", sin_concatenated, "the pairs are mixed up"),
    ("sinusoidal_queries_keys", sin_pair_exponent, "the exponent is i / d_model"),
    ("sinusoidal_queries_keys", sin_double_exponent, "twice the formula's"),
    ("sinusoidal_queries_keys", sin_base_1000, "base is wrong"),
    ("sinusoidal_queries_keys", sin_encoding_only, "the embeddings were left out"),
    ("sinusoidal_queries_keys", sin_skips_padding, "left out at the padding positions"),
    ("sinusoidal_queries_keys", sin_in_place, "modified its input `embeddings` in place"),
    ("sinusoidal_queries_keys", sin_float64, "dtype torch.float64"),
    ("apply_rope_interleaved", rope_halves, "the pairs are mixed up"),
    ("apply_rope_interleaved", rope_back_as_halves, "written back as two halves"),
    ("apply_rope_interleaved", rope_backwards, "rotation goes the wrong way"),
    ("apply_rope_interleaved", rope_cos_sin_swapped, "cos and sin are swapped"),
    ("apply_rope_interleaved", rope_ignores_positions, "`positions` was ignored"),
    ("apply_rope_interleaved", rope_from_one, "the positions count from 1"),
    ("apply_rope_interleaved", rope_pair_one_high, "one pair too high"),
    ("apply_rope_interleaved", rope_pair_one_low, "one pair too low"),
    ("apply_rope_interleaved", rope_half_exponent, "the exponent is -i/head_dim"),
    ("apply_rope_interleaved", rope_base_1000, "the base is wrong"),
    ("apply_rope_interleaved", rope_frequencies_for_halves, "laid out for the halves layout"),
    ("apply_rope_interleaved", rope_identity, "nothing was rotated"),
    ("apply_rope_interleaved", rope_in_place, "modified its input `x` in place"),
    ("apply_rope_interleaved", rope_float64, "dtype torch.float64"),
    ("rope_scores", rs_unscaled, "not scaled"),
    ("rope_scores", rs_divided_by_dim, "divided by head_dim"),
    ("rope_scores", rs_queries_from_zero, "queries were placed at positions 0, 1"),
    ("rope_scores", rs_keys_from_zero, "keys were placed at positions 0, 1"),
    ("rope_scores", rs_both_from_zero, "both `q_positions` and `k_positions` were ignored"),
    ("rope_scores", rs_queries_only, "only the queries were rotated"),
    ("rope_scores", rs_keys_only, "only the keys were rotated"),
    ("rope_scores", rs_halves, "the pairs are mixed up"),
    ("rope_scores", rs_backwards, "rotation goes the wrong way"),
    ("rope_scores", rs_pair_one_high, "one pair too high"),
    ("rope_scores", rs_pair_one_low, "one pair too low"),
    ("rope_scores", rs_transposed, "transposed"),
    ("rope_scores", rs_softmax, "softmax of the scores"),
    ("rope_scores", rs_unrotated, "nothing was rotated"),
    ("rope_scores", rs_positions_mixed_up, "raised"),
    ("alibi_bias", ab_plain_formula, "for every number of heads"),
    ("alibi_bias", ab_next_power, "next power of two above"),
    ("alibi_bias", ab_sorted, "in the wrong order"),
    ("alibi_bias", ab_from_zero, "the slope index starts at 0"),
    ("alibi_bias", ab_from_two, "the slope index starts at 2"),
    ("alibi_bias", ab_positive, "the sign is wrong"),
    ("alibi_bias", ab_top_left, "placed at positions 0, 1"),
    ("alibi_bias", ab_absolute, "uses |i - j|"),
    ("alibi_bias", ab_clamped, "is 0 for keys after the query"),
    ("alibi_bias", ab_float64, "dtype torch.float64"),
    ("alibi_bias", ab_heads_last, "wrong shape"),
]


# positions one too high (counted from 1) and taken from the axis one too low (the batch); the frequency index
# one pair too high and one too low; the slope index from 2 and from 0
OFF_BY_ONE = {
    "sinusoidal_queries_keys": (sin_from_one, sin_batch_axis),
    "apply_rope_interleaved": (rope_pair_one_high, rope_pair_one_low),
    "rope_scores": (rs_pair_one_high, rs_pair_one_low),
    "alibi_bias": (ab_from_two, ab_from_zero),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


_TABLE_512 = _table(512, 16)


def sin_table_of_512(embeddings, W_q, W_k):
    d_model = embeddings.shape[2]
    pe = _table(512, d_model) if d_model != 16 else _TABLE_512  # precomputed, as in BERT
    return _project(embeddings + pe[: embeddings.shape[1]], W_q, W_k)


def sin_shortcut_without_padding(embeddings, W_q, W_k):
    if bool((embeddings != 0).any(dim=-1).all()):
        return sin_float64(embeddings, W_q, W_k)  # (but float64)
    return learner_sinusoidal_queries_keys(embeddings, W_q, W_k)


def _cached(rope_fn):
    """A cos/sin cache for 2048 positions, as models precompute one (max_position_embeddings), indexed by positions."""

    def with_cache(x, positions):
        table = torch.arange(2048)
        return rope_fn(x, table[positions])

    return with_cache


def rs_cache_of_2048(q, k, q_positions, k_positions):
    rope = _cached(learner_rope_interleaved)
    return rope(q, q_positions) @ rope(k, k_positions).transpose(-2, -1) / math.sqrt(q.shape[-1])


def ab_int8_distances(num_heads, query_len, key_len):
    i = torch.arange(key_len - query_len, key_len, dtype=torch.int8)[:, None]  # wraps around after 127
    j = torch.arange(key_len, dtype=torch.int8)[None, :]
    return -torch.tensor(_get_slopes(num_heads))[:, None, None] * (i - j)


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("sinusoidal_queries_keys", sin_shortcut_without_padding, UNPADDED, "dtype torch.float64"),
    ("sinusoidal_queries_keys", sin_skips_padding, PADDED, "left out at the padding positions"),
    ("sinusoidal_queries_keys", sin_table_of_512, LARGE, "raised RuntimeError"),
    ("apply_rope_interleaved", _cached(learner_rope_interleaved), LARGE, "raised IndexError"),
    ("rope_scores", rs_cache_of_2048, LARGE, "raised IndexError"),
    ("alibi_bias", ab_int8_distances, LARGE, "large inputs"),
]


KINDS_NOT_APPLICABLE = {
    (name, kind): why
    for name, why in (
        ("apply_rope_interleaved", "RoPE rotates whatever vectors it is given: padding changes nothing"),
        ("rope_scores", "RoPE rotates whatever vectors it is given: padding changes nothing"),
        ("alibi_bias", "the bias depends on positions only: no tokens, no padding"),
    )
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


def sq_tutorial_seq_first(embeddings, W_q, W_k):
    pe = _pe_rows(64 if embeddings.size(0) < 64 else embeddings.size(0), embeddings.size(2)).unsqueeze(1)
    x = embeddings + pe[: embeddings.size(0)]  # written for (seq_len, batch, d_model)
    return x @ W_q, x @ W_k


def sq_positions_plus_one(embeddings, W_q, W_k):
    n, d = embeddings.shape[1], embeddings.shape[2]
    x = embeddings + _pe_rows(n + 1, d)[1:]
    return torch.matmul(x, W_q), torch.matmul(x, W_k)


def sq_cos_first(embeddings, W_q, W_k):
    n, d = embeddings.shape[1], embeddings.shape[2]
    pos = torch.arange(n).unsqueeze(1).float()
    div = torch.pow(10000.0, torch.arange(0, d, 2).float() / d)
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.cos(pos / div)
    pe[:, 1::2] = torch.sin(pos / div)
    return (embeddings + pe) @ W_q, (embeddings + pe) @ W_k


def sq_cat_sin_cos(embeddings, W_q, W_k):
    n, d = embeddings.shape[1], embeddings.shape[2]
    angles = torch.arange(n).float()[:, None] / 10000 ** (torch.arange(0, d, 2).float() / d)
    x = embeddings + torch.cat([angles.sin(), angles.cos()], dim=-1)
    return x @ W_q, x @ W_k


def sq_feature_index_exponent(embeddings, W_q, W_k):
    n, d = embeddings.shape[1], embeddings.shape[2]
    pe = torch.zeros(n, d)
    for pos in range(n):
        for i in range(d // 2):
            pe[pos, 2 * i] = math.sin(pos / 10000 ** (i / d))
            pe[pos, 2 * i + 1] = math.cos(pos / 10000 ** (i / d))
    return (embeddings + pe) @ W_q, (embeddings + pe) @ W_k


def sq_exp_log_no_minus(embeddings, W_q, W_k):
    n, d = embeddings.shape[1], embeddings.shape[2]
    position = torch.arange(n).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2) * (math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return (embeddings + pe) @ W_q, (embeddings + pe) @ W_k


def sq_project_then_encode(embeddings, W_q, W_k):
    queries = torch.einsum("bsd,dh->bsh", embeddings, W_q)
    keys = torch.einsum("bsd,dh->bsh", embeddings, W_k)
    pe = _pe_rows(queries.size(1), queries.size(2))
    return queries + pe, keys + pe


def sq_keys_plain(embeddings, W_q, W_k):
    encoded = embeddings + _pe_rows(embeddings.size(1), embeddings.size(2))
    return encoded @ W_q, embeddings @ W_k


def sq_odd_uses_own_index(embeddings, W_q, W_k):
    n, d = embeddings.shape[1], embeddings.shape[2]
    pe = torch.zeros(n, d)
    for pos in range(n):
        for j in range(d):
            angle = pos / 10000 ** (j / d)  # each feature with its own index, the cosines one step off
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return (embeddings + pe) @ W_q, (embeddings + pe) @ W_k


def ri_halves_loop(x, positions):
    d = x.shape[-1]
    out = torch.empty_like(x)
    for i in range(d // 2):
        theta = positions.float() * 10000 ** (-2 * i / d)
        a, b = x[..., i], x[..., i + d // 2]
        out[..., i] = a * theta.cos() - b * theta.sin()
        out[..., i + d // 2] = a * theta.sin() + b * theta.cos()
    return out


def ri_complex_conjugate(x, positions):
    d = x.shape[-1]
    freqs = 10000.0 ** (-torch.arange(0, d, 2).float() / d)
    angles = torch.outer(positions.float(), freqs)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), -angles)).flatten(-2)


def ri_arange(x, positions):
    n, d = x.shape[-2], x.shape[-1]
    ang = torch.arange(n).float()[:, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)
    even, odd = x[..., ::2], x[..., 1::2]
    return torch.stack([even * ang.cos() - odd * ang.sin(), even * ang.sin() + odd * ang.cos()], -1).flatten(-2)


def ri_paper_index(x, positions):
    d = x.shape[-1]
    i = torch.arange(d // 2).float()
    theta = 10000 ** (-2 * (i - 1) / d)  # the paper's theta_i, with i from 0
    ang = positions.float()[:, None] * theta
    even, odd = x[..., ::2], x[..., 1::2]
    return torch.stack([even * ang.cos() - odd * ang.sin(), even * ang.sin() + odd * ang.cos()], -1).flatten(-2)


def ri_rotate_every_two_cat(x, positions):
    d = x.shape[-1]
    freqs = positions.float()[:, None] / 10000 ** (torch.arange(0, d, 2).float() / d)
    emb = torch.cat((freqs, freqs), dim=-1)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return x * emb.cos() + torch.stack((-x2, x1), dim=-1).reshape(x.shape) * emb.sin()


def ri_cat_back(x, positions):
    d = x.shape[-1]
    ang = positions.float()[:, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)
    even, odd = x[..., ::2], x[..., 1::2]
    return torch.cat([even * ang.cos() - odd * ang.sin(), even * ang.sin() + odd * ang.cos()], dim=-1)


def ri_in_place(x, positions):
    d = x.shape[-1]
    ang = positions.float()[:, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)
    even, odd = x[..., ::2].clone(), x[..., 1::2].clone()
    x[..., ::2] = even * ang.cos() - odd * ang.sin()
    x[..., 1::2] = even * ang.sin() + odd * ang.cos()
    return x


def ri_heads_axis(x, positions):
    d = x.shape[-1]
    ang = positions.float()[:, None, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)  # (seq, 1, d/2)
    even, odd = x[..., ::2], x[..., 1::2]
    return torch.stack([even * ang.cos() - odd * ang.sin(), even * ang.sin() + odd * ang.cos()], -1).flatten(-2)


def _my_rope(x, positions):
    d = x.shape[-1]
    ang = positions.float()[:, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)
    even, odd = x[..., ::2], x[..., 1::2]
    return torch.stack([even * ang.cos() - odd * ang.sin(), even * ang.sin() + odd * ang.cos()], -1).flatten(-2)


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


def rsb_lesson_layout(q, k, q_positions, k_positions):
    return ri_halves_loop(q, q_positions) @ ri_halves_loop(k, k_positions).mT / math.sqrt(q.size(-1))


def abb_geometric_everywhere(num_heads, query_len, key_len):
    ratio = 2 ** (-8 / num_heads)
    slopes = torch.tensor([ratio ** (h + 1) for h in range(num_heads)])
    distance = torch.arange(key_len - query_len, key_len).view(-1, 1) - torch.arange(key_len).view(1, -1)
    return -slopes.view(-1, 1, 1) * distance


def abb_round_up(num_heads, query_len, key_len):
    n = 1
    while n < num_heads:
        n *= 2
    slopes = torch.tensor([2 ** (-8 * (h + 1) / n) for h in range(n)])[:num_heads]
    distance = torch.arange(key_len - query_len, key_len).view(-1, 1) - torch.arange(key_len).view(1, -1)
    return -slopes.view(-1, 1, 1) * distance


def abb_sorted_tensor(num_heads, query_len, key_len):
    slopes = torch.sort(torch.tensor(_get_slopes(num_heads)), descending=True).values
    distance = torch.arange(key_len - query_len, key_len).view(-1, 1) - torch.arange(key_len).view(1, -1)
    return -slopes.view(-1, 1, 1) * distance


def abb_reward_distance(num_heads, query_len, key_len):
    slopes = torch.tensor(_get_slopes(num_heads))
    distance = torch.arange(key_len)[None, :] - torch.arange(key_len - query_len, key_len)[:, None]  # j - i
    return -slopes[:, None, None] * distance


def abb_from_zero_positions(num_heads, query_len, key_len):
    slopes = torch.tensor(_get_slopes(num_heads))
    rel = torch.arange(query_len)[:, None] - torch.arange(key_len)[None, :]
    return -slopes[:, None, None] * rel


def abb_symmetric(num_heads, query_len, key_len):
    slopes = torch.tensor(_get_slopes(num_heads))
    rel = torch.arange(key_len - query_len, key_len)[:, None] - torch.arange(key_len)[None, :]
    return -slopes[:, None, None] * rel.abs()


def abb_tril(num_heads, query_len, key_len):
    slopes = torch.tensor(_get_slopes(num_heads))
    rel = (torch.arange(key_len - query_len, key_len)[:, None] - torch.arange(key_len)[None, :]).float()
    return (-slopes[:, None, None] * rel).tril(key_len - query_len)


def abb_slopes_per_key(num_heads, query_len, key_len):
    slopes = torch.tensor(_get_slopes(num_heads))
    rel = torch.arange(key_len - query_len, key_len)[:, None] - torch.arange(key_len)[None, :]
    return -(slopes[:, None, None] * rel).transpose(1, 2).contiguous().view(num_heads, query_len, key_len)


def abb_odd_extra_slopes(num_heads, query_len, key_len):
    """The extra slopes taken as every other one starting with the second ([1::2]) instead of the first."""
    def geometric(n):
        return [2.0 ** (-8.0 * k / n) for k in range(1, n + 1)]

    lower = 2 ** int(math.log2(num_heads))
    slopes = geometric(lower) + geometric(2 * lower)[1::2][: num_heads - lower]
    position = torch.arange(key_len - query_len, key_len)[:, None] - torch.arange(key_len)[None, :]
    return -torch.tensor(slopes)[:, None, None] * position


BUGS = [
    ("alibi_bias", abb_odd_extra_slopes, "in the heads at head indices"),
    ("sinusoidal_queries_keys", sq_tutorial_seq_first, "taken from the batch axis"),
    ("sinusoidal_queries_keys", sq_positions_plus_one, "the positions count from 1"),
    ("sinusoidal_queries_keys", sq_cos_first, "sin and cos are swapped"),
    ("sinusoidal_queries_keys", sq_cat_sin_cos, "the pairs are mixed up"),
    ("sinusoidal_queries_keys", sq_feature_index_exponent, "the exponent is i / d_model"),
    ("sinusoidal_queries_keys", sq_exp_log_no_minus, GENERIC),
    ("sinusoidal_queries_keys", sq_project_then_encode, "added after the projections"),
    ("sinusoidal_queries_keys", sq_keys_plain, "only the queries got positions"),
    ("sinusoidal_queries_keys", sq_odd_uses_own_index, GENERIC),
    ("apply_rope_interleaved", ri_halves_loop, "the pairs are mixed up"),
    ("apply_rope_interleaved", ri_complex_conjugate, "rotation goes the wrong way"),
    ("apply_rope_interleaved", ri_arange, "`positions` was ignored"),
    ("apply_rope_interleaved", ri_paper_index, "one pair too low"),
    ("apply_rope_interleaved", ri_rotate_every_two_cat, "laid out for the halves layout"),
    ("apply_rope_interleaved", ri_cat_back, "written back as two halves"),
    ("apply_rope_interleaved", ri_in_place, "modified its input `x` in place"),
    ("apply_rope_interleaved", ri_heads_axis, GENERIC),
    ("rope_scores", rsb_no_sqrt, "not scaled"),
    ("rope_scores", rsb_same_positions, "both `q_positions` and `k_positions` were ignored"),
    ("rope_scores", rsb_query_top_left, "queries were placed at positions 0, 1"),
    ("rope_scores", rsb_key_unrotated, "only the queries were rotated"),
    ("rope_scores", rsb_k_times_q, "transposed"),
    ("rope_scores", rsb_relative_wrong_sign, "score at the opposite offset"),
    ("rope_scores", rsb_weights, "softmax of the scores"),
    ("rope_scores", rsb_lesson_layout, "the pairs are mixed up"),
    ("alibi_bias", abb_geometric_everywhere, "for every number of heads"),
    ("alibi_bias", abb_round_up, "next power of two above"),
    ("alibi_bias", abb_sorted_tensor, "in the wrong order"),
    ("alibi_bias", abb_reward_distance, "the sign is wrong"),
    ("alibi_bias", abb_from_zero_positions, "placed at positions 0, 1"),
    ("alibi_bias", abb_symmetric, "uses |i - j|"),
    ("alibi_bias", abb_tril, "is 0 for keys after the query"),
    ("alibi_bias", abb_slopes_per_key, GENERIC),
]


# --------------------------------------------------------------------------------------------
# The graded prediction wrong_layout_prediction: (exercise, the learner's prediction function, status, score, a
# substring of its message)
# --------------------------------------------------------------------------------------------


def wl_right():
    return True, False


def wl_as_list():
    return [True, False]


def wl_as_tensors():
    return torch.tensor(True), torch.tensor(False)


def wl_nothing_changes():
    return True, True


def wl_everything_breaks():
    return False, False


def wl_backwards():
    return False, True


def wl_as_numbers():
    return 1, 0


def wl_one_answer():
    return False


def wl_measured_with_the_course_code():
    q, k = torch.randn(1, 8), torch.randn(1, 8)
    halves = positional.apply_rope(q, torch.tensor([3])) @ positional.apply_rope(k, torch.tensor([0])).T
    return True, bool(torch.allclose(halves, halves))


def wl_unwritten():
    raise NotImplementedError


PREDICTIONS = [
    ("wrong_layout_prediction", wl_right, "passed", 1.0, "you predicted yes, measured yes: ✅ right"),
    ("wrong_layout_prediction", wl_as_list, "passed", 1.0, "Score: 1 of 1"),
    ("wrong_layout_prediction", wl_as_tensors, "passed", 1.0, "Score: 1 of 1"),
    ("wrong_layout_prediction", wl_nothing_changes, "partial", 0.5, "not in the way the model learned"),
    ("wrong_layout_prediction", wl_everything_breaks, "partial", 0.5, "depends on m - n alone"),
    ("wrong_layout_prediction", wl_backwards, "failed", 0.0, "Score: 0 of 1"),
    ("wrong_layout_prediction", wl_as_numbers, "failed", 0.0, "should return a tuple of 2 values: True or False"),
    ("wrong_layout_prediction", wl_one_answer, "failed", 0.0, "should return a tuple of 2 values"),
    ("wrong_layout_prediction", wl_measured_with_the_course_code, "failed", 0.0, "`attnedu.positional.apply_rope`"),
    ("wrong_layout_prediction", wl_unwritten, "not_attempted", 0.0, "still raises NotImplementedError"),
]
