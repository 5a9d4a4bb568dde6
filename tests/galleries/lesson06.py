"""The mutant gallery of lessons 06 and 07, in the format of tests/test_checks.py, which merges these tables
into its own: correct versions written as a learner would (CORRECT), known mistakes with the diagnosis each
must get (MUTANTS), an off-by-one in both directions (OFF_BY_ONE), and a mistake that shows only on each
kind of test case (KIND_MUTANTS).

Where a kind of test case does not apply, KINDS_NOT_APPLICABLE says why: RoPE has no padding (it rotates
whatever vectors it is given), and a boolean-to-float conversion has no value that could overflow, so no
mistake shows on large inputs only. Those exercises still have large test cases.
"""

from __future__ import annotations

import math

import torch

from attnedu.checks.exercise import LARGE, PADDED, UNPADDED
from attnedu.masks import causal_padding_mask, to_additive
from attnedu.positional import apply_rope

NEG_INF = float("-inf")

# --------------------------------------------------------------------------------------------
# Lesson 06: correct versions
# --------------------------------------------------------------------------------------------


def learner_causal_padding_mask(lengths, max_len):
    causal = torch.ones(max_len, max_len, dtype=torch.bool).tril()
    padding = torch.arange(max_len)[None, :] < lengths[:, None]
    return causal[None, :, :] & padding[:, None, :]


def learner_causal_padding_mask_loop(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, max_len, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        for i in range(max_len):
            mask[b, i, : min(i + 1, n)] = True
    return mask


def learner_to_additive(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, NEG_INF)


def learner_to_additive_where(mask, dtype):
    return torch.where(mask, 0.0, NEG_INF).to(dtype)


def learner_to_additive_log(mask, dtype):
    return mask.to(dtype).log()  # log 1 = 0, log 0 = -inf


def learner_prefix_lm_mask(prefix_lengths, lengths, max_len):
    i = torch.arange(max_len)[:, None]
    j = torch.arange(max_len)[None, :]
    visible = (j <= i)[None] | (j[None] < prefix_lengths[:, None, None])
    real = torch.arange(max_len)[None, :] < lengths[:, None]
    return visible & real[:, None, :]


def learner_prefix_lm_mask_blocks(prefix_lengths, lengths, max_len):
    """The prefix as a block: queries and keys both in the prefix see each other; the rest is causal."""
    positions = torch.arange(max_len)
    in_prefix = positions[None, :] < prefix_lengths[:, None]  # (batch, max_len)
    block = in_prefix[:, :, None] & in_prefix[:, None, :]
    causal = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
    real = positions[None, :] < lengths[:, None]
    return (block | causal) & real[:, None, :]


CORRECT = {
    "causal_padding_mask": [learner_causal_padding_mask, learner_causal_padding_mask_loop, causal_padding_mask],
    "to_additive": [learner_to_additive, learner_to_additive_where, learner_to_additive_log, to_additive],
    "prefix_lm_mask": [learner_prefix_lm_mask, learner_prefix_lm_mask_blocks],
}

# --------------------------------------------------------------------------------------------
# Lesson 06: mutants
# --------------------------------------------------------------------------------------------


def _padding(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None]


# causal_padding_mask
def cpm_inverted(lengths, max_len):
    return ~learner_causal_padding_mask(lengths, max_len)


def cpm_sees_next(lengths, max_len):
    causal = torch.ones(max_len, max_len, dtype=torch.bool).tril(1)
    return causal[None] & _padding(lengths, max_len)[:, None, :]


def cpm_not_itself(lengths, max_len):
    causal = torch.ones(max_len, max_len, dtype=torch.bool).tril(-1)
    return causal[None] & _padding(lengths, max_len)[:, None, :]


def cpm_upper_triangle(lengths, max_len):
    causal = torch.ones(max_len, max_len, dtype=torch.bool).triu()
    return causal[None] & _padding(lengths, max_len)[:, None, :]


def cpm_no_padding(lengths, max_len):
    return torch.ones(max_len, max_len, dtype=torch.bool).tril().repeat(len(lengths), 1, 1)


def cpm_no_causal(lengths, max_len):
    return _padding(lengths, max_len)[:, None, :].repeat(1, max_len, 1)


def cpm_or(lengths, max_len):
    return torch.ones(max_len, max_len, dtype=torch.bool).tril()[None] | _padding(lengths, max_len)[:, None, :]


def cpm_pads_queries(lengths, max_len):
    return torch.ones(max_len, max_len, dtype=torch.bool).tril()[None] & _padding(lengths, max_len)[:, :, None]


def cpm_pads_both(lengths, max_len):
    pad = _padding(lengths, max_len)
    return learner_causal_padding_mask(lengths, max_len) & pad[:, :, None]


def cpm_transposed(lengths, max_len):
    return learner_causal_padding_mask(lengths, max_len).transpose(-1, -2)


def cpm_padding_one_long(lengths, max_len):
    return learner_causal_padding_mask(lengths + 1, max_len)


def cpm_padding_one_short(lengths, max_len):
    return learner_causal_padding_mask(lengths - 1, max_len)


def cpm_longest(lengths, max_len):
    return learner_causal_padding_mask(lengths, int(lengths.max()))


def cpm_as_int(lengths, max_len):
    return learner_causal_padding_mask(lengths, max_len).long()


def cpm_two_dims(lengths, max_len):
    return torch.ones(max_len, max_len, dtype=torch.bool).tril() & _padding(lengths, max_len)


# to_additive
def ta_inverted(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, NEG_INF)


def ta_minus_1e9(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, -1e9)


def ta_bert(mask, dtype):
    return (1.0 - mask.to(dtype)) * -10000.0


def ta_finfo_min(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)


def ta_as_floats(mask, dtype):
    return mask.to(dtype)


def ta_minus_one(mask, dtype):
    return mask.to(dtype) - 1


def ta_plus_inf(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("inf"))


def ta_times_inf(mask, dtype):
    return (1 - mask.to(dtype)) * NEG_INF


def ta_float32(mask, dtype):
    return torch.zeros(mask.shape).masked_fill(~mask, NEG_INF)


def ta_in_place(mask, dtype):
    mask.logical_not_()
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, NEG_INF)


def ta_bool(mask, dtype):
    return ~mask


# prefix_lm_mask
def _prefix(prefix_lengths, lengths, max_len, shift=0, diagonal=0):
    i = torch.arange(max_len)[:, None]
    j = torch.arange(max_len)[None, :]
    visible = (j <= i + diagonal)[None] | (j[None] < prefix_lengths[:, None, None] + shift)
    return visible & _padding(lengths, max_len)[:, None, :]


def plm_inverted(prefix_lengths, lengths, max_len):
    return ~learner_prefix_lm_mask(prefix_lengths, lengths, max_len)


def plm_prefix_on_queries(prefix_lengths, lengths, max_len):
    i = torch.arange(max_len)[:, None]
    j = torch.arange(max_len)[None, :]
    visible = (j <= i)[None] | (i[None] < prefix_lengths[:, None, None])
    return visible & _padding(lengths, max_len)[:, None, :]


def plm_prefix_one_long(prefix_lengths, lengths, max_len):
    return _prefix(prefix_lengths, lengths, max_len, shift=1)


def plm_prefix_one_short(prefix_lengths, lengths, max_len):
    return _prefix(prefix_lengths, lengths, max_len, shift=-1)


def plm_sees_next(prefix_lengths, lengths, max_len):
    return _prefix(prefix_lengths, lengths, max_len, diagonal=1)


def plm_not_itself(prefix_lengths, lengths, max_len):
    return _prefix(prefix_lengths, lengths, max_len, diagonal=-1)


def plm_no_prefix(prefix_lengths, lengths, max_len):
    return learner_causal_padding_mask(lengths, max_len)


def plm_bidirectional(prefix_lengths, lengths, max_len):
    return _padding(lengths, max_len)[:, None, :].expand(-1, max_len, -1)


def plm_no_padding(prefix_lengths, lengths, max_len):
    return _prefix(prefix_lengths, torch.full_like(lengths, max_len), max_len)


def plm_pads_queries_too(prefix_lengths, lengths, max_len):
    return learner_prefix_lm_mask(prefix_lengths, lengths, max_len) & _padding(lengths, max_len)[:, :, None]


def plm_lengths_swapped(prefix_lengths, lengths, max_len):
    return learner_prefix_lm_mask(lengths, prefix_lengths, max_len)


def plm_transposed(prefix_lengths, lengths, max_len):
    return learner_prefix_lm_mask(prefix_lengths, lengths, max_len).mT


def plm_as_float(prefix_lengths, lengths, max_len):
    return learner_prefix_lm_mask(prefix_lengths, lengths, max_len).float()


MUTANTS = [
    ("causal_padding_mask", cpm_inverted, "inverted"),
    ("causal_padding_mask", cpm_sees_next, "the next key, j = i + 1"),
    ("causal_padding_mask", cpm_not_itself, "may not attend to its own position"),
    ("causal_padding_mask", cpm_upper_triangle, "triangle is the wrong one"),
    ("causal_padding_mask", cpm_no_padding, "padding is not masked"),
    ("causal_padding_mask", cpm_no_causal, "causal part is missing"),
    ("causal_padding_mask", cpm_or, "combined with OR"),
    ("causal_padding_mask", cpm_pads_queries, "rows of padding queries are all False"),
    ("causal_padding_mask", cpm_pads_both, "rows of padding queries are all False"),
    ("causal_padding_mask", cpm_transposed, "query and key axes are swapped"),
    ("causal_padding_mask", cpm_padding_one_long, "one key too many"),
    ("causal_padding_mask", cpm_padding_one_short, "last real word"),
    ("causal_padding_mask", cpm_longest, "not max_len"),
    ("causal_padding_mask", cpm_as_int, "dtype torch.int64, expected torch.bool"),
    ("causal_padding_mask", cpm_two_dims, "raised RuntimeError"),
    ("to_additive", ta_inverted, "inverted"),
    ("to_additive", ta_minus_1e9, "hold -1e9 instead of -inf"),
    ("to_additive", ta_bert, "hold -10000 instead of -inf"),
    ("to_additive", ta_finfo_min, "torch.finfo(dtype).min"),
    ("to_additive", ta_as_floats, "0/1 numbers"),
    ("to_additive", ta_minus_one, "blocked entries hold -1"),
    ("to_additive", ta_plus_inf, "+inf instead of -inf"),
    ("to_additive", ta_times_inf, "0 * -inf is NaN"),
    ("to_additive", ta_float32, "always float32"),
    ("to_additive", ta_in_place, "modified its input `mask` in place"),
    ("to_additive", ta_bool, "still a boolean tensor"),
    ("prefix_lm_mask", plm_inverted, "inverted"),
    ("prefix_lm_mask", plm_prefix_on_queries, "applied to the queries"),
    ("prefix_lm_mask", plm_prefix_one_long, "one key too long"),
    ("prefix_lm_mask", plm_prefix_one_short, "one key too short"),
    ("prefix_lm_mask", plm_sees_next, "the next key, j = i + 1"),
    ("prefix_lm_mask", plm_not_itself, "may not see its own position"),
    ("prefix_lm_mask", plm_no_prefix, "the prefix is ignored"),
    ("prefix_lm_mask", plm_bidirectional, "causal part is missing"),
    ("prefix_lm_mask", plm_no_padding, "padding is not masked"),
    ("prefix_lm_mask", plm_pads_queries_too, "rows of padding queries are all False"),
    ("prefix_lm_mask", plm_lengths_swapped, "swapped"),
    ("prefix_lm_mask", plm_transposed, "query and key axes are swapped"),
    ("prefix_lm_mask", plm_as_float, "dtype torch.float32, expected torch.bool"),
]

# causal diagonal shifted up and down; blocked value one too high (1 where allowed, from `mask.to(dtype)`) and one
# too low (-1, not -inf); the end of the prefix one key too far and one too short
OFF_BY_ONE = {
    "causal_padding_mask": (cpm_sees_next, cpm_not_itself),
    "to_additive": (ta_as_floats, ta_minus_one),
    "prefix_lm_mask": (plm_prefix_one_long, plm_prefix_one_short),
}

# --------------------------------------------------------------------------------------------
# Lesson 06: a mistake that shows on one kind of test case only
# --------------------------------------------------------------------------------------------


def cpm_shortcut_without_padding(lengths, max_len):
    if bool((lengths == max_len).all()):
        return torch.ones(max_len, max_len, dtype=torch.bool).tril()  # nothing is padded (but the batch axis?)
    return learner_causal_padding_mask(lengths, max_len)


def cpm_int8_positions(lengths, max_len):
    positions = torch.arange(max_len).to(torch.int8)  # wraps around after 127
    causal = positions[None, :] <= positions[:, None]
    return causal[None] & (positions[None, :] < lengths[:, None])[:, None, :]


def ta_shortcut_without_padding(mask, dtype):
    if bool(mask.any(dim=-2).all()):  # every key is allowed somewhere: "no padding, nothing to block"
        return torch.zeros(mask.shape, dtype=dtype)
    return learner_to_additive(mask, dtype)


def ta_assumes_causal(mask, dtype):
    return torch.full(mask.shape, NEG_INF, dtype=dtype).triu(1)  # the mask itself is never read


def plm_shortcut_without_padding(prefix_lengths, lengths, max_len):
    if bool((lengths == max_len).all()):
        return learner_prefix_lm_mask(prefix_lengths, lengths, max_len).float()  # (but a mask is bool)
    return learner_prefix_lm_mask(prefix_lengths, lengths, max_len)


def plm_int8_positions(prefix_lengths, lengths, max_len):
    positions = torch.arange(max_len).to(torch.int8)
    causal = positions[None, :] <= positions[:, None]
    visible = causal[None] | (positions[None, None, :] < prefix_lengths[:, None, None])
    return visible & (positions[None, :] < lengths[:, None])[:, None, :]


KIND_MUTANTS = [
    ("causal_padding_mask", cpm_shortcut_without_padding, UNPADDED, "no padding"),
    ("causal_padding_mask", cpm_no_padding, PADDED, "padding is not masked"),
    ("causal_padding_mask", cpm_int8_positions, LARGE, "large inputs"),
    ("to_additive", ta_shortcut_without_padding, UNPADDED, "expected -inf, got 0"),
    ("to_additive", ta_assumes_causal, PADDED, "differ"),
    ("prefix_lm_mask", plm_shortcut_without_padding, UNPADDED, "dtype torch.float32"),
    ("prefix_lm_mask", plm_no_padding, PADDED, "padding is not masked"),
    ("prefix_lm_mask", plm_int8_positions, LARGE, "large inputs"),
]

KINDS_NOT_APPLICABLE = {
    ("to_additive", LARGE): "a conversion of booleans has no value that could overflow",
}

# --------------------------------------------------------------------------------------------
# Lesson 07: correct versions, all in float32 as a learner writes them
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


CORRECT |= {
    "add_sinusoidal": [learner_add_sinusoidal, learner_add_sinusoidal_exp_log, learner_add_sinusoidal_loop],
    "apply_rope": [learner_apply_rope, learner_apply_rope_rotate_half, learner_apply_rope_complex, apply_rope],
    "rope_scores": [learner_rope_scores, learner_rope_scores_relative],
}

# --------------------------------------------------------------------------------------------
# Lesson 07: mutants
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


MUTANTS += [
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
OFF_BY_ONE |= {
    "add_sinusoidal": (sin_from_one, sin_batch_axis),
    "apply_rope": (rope_pair_one_high, rope_pair_one_low),
    "rope_scores": (rs_pair_one_high, rs_pair_one_low),
}

# --------------------------------------------------------------------------------------------
# Lesson 07: a mistake that shows on one kind of test case only
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


KIND_MUTANTS += [
    ("add_sinusoidal", sin_shortcut_without_padding, UNPADDED, "dtype torch.float64"),
    ("add_sinusoidal", sin_skips_padding, PADDED, "left out at the padding positions"),
    ("add_sinusoidal", sin_table_of_512, LARGE, "raised RuntimeError"),
    ("apply_rope", _cached(learner_apply_rope), LARGE, "raised IndexError"),
    ("rope_scores", rs_cache_of_2048, LARGE, "raised IndexError"),
]

KINDS_NOT_APPLICABLE |= {
    (name, kind): "RoPE rotates whatever vectors it is given: padding changes nothing"
    for name in ("apply_rope", "rope_scores")
    for kind in (PADDED, UNPADDED)
}
