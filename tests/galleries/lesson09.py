"""Lesson 09, 09_transformer_block: the galleries of ``group_rms_norm``, ``clamped_swiglu``, ``pre_norm_block``,
``qk_norm_scores`` and ``largest_qk_score`` (CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as
tests/galleries/__init__.py describes them), REFERENCE_USE: functions that are, or call, the package's own
``attnedu.block_parts`` and ``attnedu.blocks``, which the exercises forbid, and PREDICTIONS: the graded prediction
``largest_score_prediction``.

The correct versions are written as a learner would: with torch's functions (F.rms_norm, F.silu,
F.scaled_dot_product_attention with enable_gqa), by hand, with einsum or loops. Every exercise but the bound takes part
in training, so its check also compares the gradients that flow back; the mutants include versions with the right
values that cut the gradient (a detached scale, a trip through NumPy, a block run under no_grad). The feed-forward
layer, the causal block and the QK-norm scores have neither padded nor unpadded test cases (KINDS_NOT_APPLICABLE):
padding at the end of a sentence changes nothing in a position-wise layer or under a causal mask.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from attnedu import block_parts, blocks
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED

from .common import GENERIC, batch_of_one

EPS = 1e-6

# --------------------------------------------------------------------------------------------
# Correct versions
# --------------------------------------------------------------------------------------------


def learner_rms_norm(x, weight, eps):
    """A helper the versions below share: RMSNorm over the last axis."""
    rms = torch.sqrt((x**2).mean(dim=-1, keepdim=True) + eps)
    return x / rms * weight


def learner_group_rms_norm(x, weight, groups, eps):
    batch, seq_len, d_model = x.shape
    g = x.reshape(batch, seq_len, groups, d_model // groups)
    g = g / torch.sqrt(g.pow(2).mean(dim=-1, keepdim=True) + eps)
    return g.reshape(batch, seq_len, d_model) * weight


def learner_group_rms_norm_torch(x, weight, groups, eps):
    size = x.shape[-1] // groups
    return F.rms_norm(x.unflatten(-1, (groups, size)), (size,), eps=eps).flatten(-2) * weight


def learner_group_rms_norm_loop(x, weight, groups, eps):
    size = x.shape[-1] // groups
    pieces = []
    for j in range(groups):  # one group at a time
        part = x[..., j * size : (j + 1) * size]
        pieces.append(part * torch.rsqrt(part.pow(2).mean(-1, keepdim=True) + eps))
    return torch.cat(pieces, dim=-1) * weight


def learner_group_rms_norm_einsum(x, weight, groups, eps):
    g = x.unflatten(-1, (groups, -1))
    ms = torch.einsum("btgs,btgs->btg", g, g) / g.shape[-1]
    return (g / (ms[..., None] + eps).sqrt()).flatten(2) * weight


def learner_clamped_swiglu(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate = both[..., ::2].clamp(max=limit)
    linear = both[..., 1::2].clamp(min=-limit, max=limit)
    return (gate * torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down


def learner_clamped_swiglu_split_weights(x, W_in, W_down, alpha, limit):
    """The weights split first, the clamps written with minimum and maximum."""
    W_gate, W_lin = W_in[:, 0::2], W_in[:, 1::2]
    gate = torch.minimum(x @ W_gate, torch.tensor(limit))
    linear = torch.maximum(torch.minimum(x @ W_lin, torch.tensor(limit)), torch.tensor(-limit))
    swish = gate * torch.sigmoid(alpha * gate)
    return (swish * (1 + linear)) @ W_down


def learner_clamped_swiglu_view(x, W_in, W_down, alpha, limit):
    """Columns read as (d_ff, 2) pairs: gate then linear."""
    both = (x @ W_in).unflatten(-1, (-1, 2))
    gate, linear = both[..., 0].clamp(max=limit), both[..., 1].clamp(-limit, limit)
    return torch.einsum("bsf,fd->bsd", F.silu(alpha * gate) / alpha * (linear + 1), W_down)


def _heads(t, head_dim):
    """(batch, seq_len, count * head_dim) -> (batch, count, seq_len, head_dim)."""
    batch, seq_len, _ = t.shape
    return t.view(batch, seq_len, -1, head_dim).transpose(1, 2)


def learner_pre_norm_block(x, attention_norm, W_q, W_k, W_v, W_o, ffn_norm, W_gate, W_up, W_down, num_heads):
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    h = learner_rms_norm(x, attention_norm, EPS)
    q, k, v = _heads(h @ W_q, head_dim), _heads(h @ W_k, head_dim), _heads(h @ W_v, head_dim)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + heads.transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o
    h = learner_rms_norm(x, ffn_norm, EPS)
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def learner_pre_norm_block_by_hand(x, attention_norm, W_q, W_k, W_v, W_o, ffn_norm, W_gate, W_up, W_down, num_heads):
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    group = num_heads // (W_k.shape[1] // head_dim)
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * attention_norm
    outputs = []
    for i in range(num_heads):  # one head at a time; query head i reads key/value head i // group
        cols, kv = slice(i * head_dim, (i + 1) * head_dim), slice((i // group) * head_dim, (i // group + 1) * head_dim)
        q, k, v = h @ W_q[:, cols], h @ W_k[:, kv], h @ W_v[:, kv]
        scores = q @ k.transpose(1, 2) / math.sqrt(head_dim)
        future = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        outputs.append(torch.softmax(scores, dim=-1) @ v)
    x = x + torch.cat(outputs, dim=-1) @ W_o
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * ffn_norm
    gate = h @ W_gate
    return x + (gate * torch.sigmoid(gate) * (h @ W_up)) @ W_down


def learner_pre_norm_block_repeat(x, attention_norm, W_q, W_k, W_v, W_o, ffn_norm, W_gate, W_up, W_down, num_heads):
    """The key/value heads repeated by hand (repeat_interleave), the heads split with einops-like reshapes."""
    B, T, D = x.shape
    hd = D // num_heads
    h = learner_group_rms_norm(x, attention_norm, 1, EPS)
    q = (h @ W_q).reshape(B, T, num_heads, hd).permute(0, 2, 1, 3)
    k = (h @ W_k).reshape(B, T, -1, hd).permute(0, 2, 1, 3)
    v = (h @ W_v).reshape(B, T, -1, hd).permute(0, 2, 1, 3)
    k, v = k.repeat_interleave(num_heads // k.shape[1], dim=1), v.repeat_interleave(num_heads // v.shape[1], dim=1)
    scores = q @ k.mT / hd**0.5 + torch.full((T, T), float("-inf")).triu(1)
    o = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(B, T, D)
    x = x + o @ W_o
    h = learner_group_rms_norm(x, ffn_norm, 1, EPS)
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def learner_qk_norm_scores(q, k, q_weight, k_weight):
    qn = learner_rms_norm(q, q_weight, EPS)
    kn = learner_rms_norm(k, k_weight, EPS)
    return qn @ kn.transpose(-2, -1) / math.sqrt(q.shape[-1])


def learner_qk_norm_scores_gains_last(q, k, q_weight, k_weight):
    """Normalise, then put both gains into one weighted dot product."""
    qn = q / q.pow(2).mean(-1, keepdim=True).add(EPS).sqrt()
    kn = k / k.pow(2).mean(-1, keepdim=True).add(EPS).sqrt()
    return torch.einsum("bhqd,bhkd,d->bhqk", qn, kn, q_weight * k_weight) / q.shape[-1] ** 0.5


def learner_largest_qk_score(q_weight, k_weight):
    return math.sqrt(q_weight.shape[-1]) * (q_weight * k_weight).abs().amax(dim=-1)


def learner_largest_qk_score_loop(q_weight, k_weight):
    """Layer by layer: the feature with the largest product, and the one-feature vectors that reach it."""
    layers, head_dim = q_weight.shape
    out = torch.zeros(layers)
    for layer in range(layers):
        best = max(abs(q_weight[layer, i].item() * k_weight[layer, i].item()) for i in range(head_dim))
        out[layer] = head_dim * best / head_dim**0.5  # q_hat . k_hat = head_dim on that feature
    return out


CORRECT = {
    "group_rms_norm": [learner_group_rms_norm, learner_group_rms_norm_torch, learner_group_rms_norm_loop,
                       learner_group_rms_norm_einsum],
    "clamped_swiglu": [learner_clamped_swiglu, learner_clamped_swiglu_split_weights, learner_clamped_swiglu_view],
    "pre_norm_block": [learner_pre_norm_block, learner_pre_norm_block_by_hand, learner_pre_norm_block_repeat],
    "qk_norm_scores": [learner_qk_norm_scores, learner_qk_norm_scores_gains_last],
    "largest_qk_score": [learner_largest_qk_score, learner_largest_qk_score_loop],
}  # fmt: skip


def _block_with_the_packages_rms_norm(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    batch, seq_len, d_model = x.shape
    h = block_parts.rms_norm(x, g_a)
    head_dim = d_model // num_heads
    q, k, v = _heads(h @ W_q, head_dim), _heads(h @ W_k, head_dim), _heads(h @ W_v, head_dim)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + heads.transpose(1, 2).reshape(batch, seq_len, -1) @ W_o
    h = block_parts.rms_norm(x, g_f)
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


REFERENCE_USE = [
    ("group_rms_norm", block_parts.group_rms_norm),
    ("group_rms_norm", lambda x, w, groups, eps: block_parts.rms_norm(x.unflatten(-1, (groups, -1)), torch.ones(
        x.shape[-1] // groups), eps).flatten(-2) * w),
    ("clamped_swiglu", block_parts.clamped_swiglu),
    ("pre_norm_block", _block_with_the_packages_rms_norm),
    ("pre_norm_block", lambda *args: blocks.pre_norm_block(*args)),
    ("qk_norm_scores", lambda q, k, gq, gk: block_parts.qk_norm_scores(q, k, gq, gk)),
    ("largest_qk_score", block_parts.qk_score_bound),
]  # fmt: skip


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------


def gr_one_group(x, weight, groups, eps):
    return learner_rms_norm(x, weight, eps)  # the lesson's RMSNorm, whatever groups says


def gr_strided(x, weight, groups, eps):
    batch, seq_len, d_model = x.shape
    g = x.reshape(batch, seq_len, d_model // groups, groups)  # (group_size, groups): feature i in group i % groups
    g = g / torch.sqrt(g.pow(2).mean(dim=-2, keepdim=True) + eps)
    return g.reshape(batch, seq_len, d_model) * weight


def gr_sizes_swapped(x, weight, groups, eps):
    batch, seq_len, d_model = x.shape
    g = x.reshape(batch, seq_len, d_model // groups, groups)  # groups of `groups` features
    g = g / torch.sqrt(g.pow(2).mean(dim=-1, keepdim=True) + eps)
    return g.reshape(batch, seq_len, d_model) * weight


def gr_group_norm(x, weight, groups, eps):
    batch, seq_len, d_model = x.shape
    return F.group_norm(x.reshape(-1, d_model), groups, eps=eps).reshape(batch, seq_len, d_model) * weight


def gr_mean_not_squares(x, weight, groups, eps):
    g = x.unflatten(-1, (groups, -1))
    return (g / torch.sqrt(g.mean(-1, keepdim=True) + eps)).flatten(-2) * weight


def gr_eps_outside(x, weight, groups, eps):
    g = x.unflatten(-1, (groups, -1))
    return (g / (g.pow(2).mean(-1, keepdim=True).sqrt() + eps)).flatten(-2) * weight


def gr_no_eps(x, weight, groups, eps):
    return learner_group_rms_norm(x, weight, groups, 0.0)


def gr_no_sqrt(x, weight, groups, eps):
    g = x.unflatten(-1, (groups, -1))
    return (g / (g.pow(2).mean(-1, keepdim=True) + eps)).flatten(-2) * weight


def gr_over_groups(x, weight, groups, eps):
    g = x.unflatten(-1, (groups, -1))
    return (g / torch.sqrt(g.pow(2).mean(-2, keepdim=True) + eps)).flatten(-2) * weight


def gr_size_minus_one(x, weight, groups, eps):
    g = x.unflatten(-1, (groups, -1))
    return (g / torch.sqrt(g.pow(2).sum(-1, keepdim=True) / (g.shape[-1] - 1) + eps)).flatten(-2) * weight


def gr_size_plus_one(x, weight, groups, eps):
    g = x.unflatten(-1, (groups, -1))
    return (g / torch.sqrt(g.pow(2).sum(-1, keepdim=True) / (g.shape[-1] + 1) + eps)).flatten(-2) * weight


def gr_sum_of_squares(x, weight, groups, eps):
    g = x.unflatten(-1, (groups, -1))
    return (g / torch.sqrt(g.pow(2).sum(-1, keepdim=True) + eps)).flatten(-2) * weight


def gr_l2_norm(x, weight, groups, eps):
    g = x.unflatten(-1, (groups, -1))
    return (g / (torch.linalg.vector_norm(g, dim=-1, keepdim=True) + eps)).flatten(-2) * weight


def gr_gain_first(x, weight, groups, eps):
    return learner_group_rms_norm(x * weight, torch.ones_like(weight), groups, eps)


def gr_no_gain(x, weight, groups, eps):
    return learner_group_rms_norm(x, torch.ones_like(weight), groups, eps)


def gr_gain_added(x, weight, groups, eps):
    return learner_group_rms_norm(x, torch.ones_like(weight), groups, eps) + weight


def gr_in_place(x, weight, groups, eps):
    g = x.view(*x.shape[:-1], groups, -1)
    g /= torch.sqrt(g.pow(2).mean(-1, keepdim=True) + eps)
    return x * weight


def gr_in_place_on_a_copy(x, weight, groups, eps):
    """The input left alone, but its copy divided in place after the square was taken from it: autograd saved the
    copy for the backward pass, and raises there."""
    g = x.clone().unflatten(-1, (groups, -1))
    g.mul_(torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps))
    return g.flatten(-2) * weight


def gr_first_groups_gains(x, weight, groups, eps):
    """The gain sliced to one group's size and reused for every group."""
    g = x.unflatten(-1, (groups, -1))
    g = g / torch.sqrt(g.pow(2).mean(-1, keepdim=True) + eps) * weight[: g.shape[-1]]
    return g.flatten(-2)


def gr_detached_scale(x, weight, groups, eps):
    """The right values; the root mean square treated as a constant on the way back."""
    g = x.unflatten(-1, (groups, -1))
    rms = torch.sqrt(g.pow(2).mean(-1, keepdim=True) + eps).detach()
    return (g / rms).flatten(-2) * weight


def oss_halves(x, W_in, W_down, alpha, limit):
    gate, linear = (x @ W_in).chunk(2, dim=-1)
    gate, linear = gate.clamp(max=limit), linear.clamp(-limit, limit)
    return (gate * torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down


def oss_swapped(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate, linear = both[..., 1::2].clamp(max=limit), both[..., 0::2].clamp(-limit, limit)
    return (gate * torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down


def oss_silu(x, W_in, W_down, alpha, limit):
    return learner_clamped_swiglu(x, W_in, W_down, 1.0, limit)


def oss_alpha_outside(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate, linear = both[..., ::2].clamp(max=limit), both[..., 1::2].clamp(-limit, limit)
    return (alpha * F.silu(gate) * (linear + 1)) @ W_down


def oss_glu_gate(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate, linear = both[..., ::2].clamp(max=limit), both[..., 1::2].clamp(-limit, limit)
    return (torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down


def oss_gelu_tanh(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate, linear = both[..., ::2].clamp(max=limit), both[..., 1::2].clamp(-limit, limit)
    return (F.gelu(gate, approximate="tanh") * (linear + 1)) @ W_down


def oss_no_one(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate, linear = both[..., ::2].clamp(max=limit), both[..., 1::2].clamp(-limit, limit)
    return (gate * torch.sigmoid(alpha * gate) * linear) @ W_down


def oss_one_on_gate(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate, linear = both[..., ::2].clamp(max=limit), both[..., 1::2].clamp(-limit, limit)
    return ((gate * torch.sigmoid(alpha * gate) + 1) * linear) @ W_down


def oss_linear_unclamped(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate = both[..., ::2].clamp(max=limit)
    return (gate * torch.sigmoid(alpha * gate) * (both[..., 1::2] + 1)) @ W_down


def oss_linear_max_only(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate, linear = both[..., ::2].clamp(max=limit), both[..., 1::2].clamp(max=limit)
    return (gate * torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down


def oss_gate_unclamped(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate, linear = both[..., ::2], both[..., 1::2].clamp(-limit, limit)
    return (gate * torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down


def oss_no_clamps(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate, linear = both[..., ::2], both[..., 1::2]
    return (gate * torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down


def oss_gate_clamped_both_sides(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate, linear = both[..., ::2].clamp(-limit, limit), both[..., 1::2].clamp(-limit, limit)
    return (gate * torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down


def oss_gate_clamped_below(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate, linear = both[..., ::2].clamp(min=-limit), both[..., 1::2].clamp(-limit, limit)
    return (gate * torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down


def oss_clamps_swapped(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    gate, linear = both[..., ::2].clamp(-limit, limit), both[..., 1::2].clamp(max=limit)
    return (gate * torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down


def oss_swish_late(x, W_in, W_down, alpha, limit):
    both = x @ W_in
    hidden = both[..., ::2].clamp(max=limit) * (both[..., 1::2].clamp(-limit, limit) + 1)
    return (hidden * torch.sigmoid(alpha * hidden)) @ W_down


def oss_swish_early(x, W_in, W_down, alpha, limit):
    both = (x * torch.sigmoid(alpha * x)) @ W_in
    return (both[..., ::2].clamp(max=limit) * (both[..., 1::2].clamp(-limit, limit) + 1)) @ W_down


def oss_sigmoid_by_exp(x, W_in, W_down, alpha, limit):
    """The sigmoid written out: right values, but exp(-alpha g) overflows for a very negative gate, and the
    gradient through it is inf / inf = NaN."""
    both = x @ W_in
    gate, linear = both[..., ::2].clamp(max=limit), both[..., 1::2].clamp(-limit, limit)
    return (gate / (1 + torch.exp(-alpha * gate)) * (linear + 1)) @ W_down


def oss_through_numpy(x, W_in, W_down, alpha, limit):
    """The right values, computed in NumPy: nothing flows back."""
    both = x.detach().numpy() @ W_in.detach().numpy()
    gate, linear = np.minimum(both[..., ::2], limit), np.clip(both[..., 1::2], -limit, limit)
    hidden = gate / (1 + np.exp(-alpha * gate)) * (linear + 1)
    return torch.from_numpy(hidden @ W_down.detach().numpy())


def _block(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads, *, attend=None, step="pre", scale=None,
           mask=0, final=False):  # fmt: skip
    """A learner's block with one choice made differently."""
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads

    def attention(h):
        q, k, v = _heads(h @ W_q, head_dim), _heads(h @ W_k, head_dim), _heads(h @ W_v, head_dim)
        k, v = k.repeat_interleave(num_heads // k.shape[1], 1), v.repeat_interleave(num_heads // v.shape[1], 1)
        scores = q @ k.transpose(-2, -1) / (math.sqrt(head_dim) if scale is None else scale)
        if mask is not None:
            keep = torch.ones(seq_len, seq_len).tril(mask).bool()
            scores = scores.masked_fill(~keep, float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, -1))
        return (weights @ v).transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o

    def norm(t, g):
        return learner_rms_norm(t, g, EPS)

    def ffn(t):
        return (F.silu(t @ W_gate) * (t @ W_up)) @ W_down

    if step == "post":
        x = norm(x + attention(x), g_a)
        return norm(x + ffn(x), g_f)
    if step == "parallel":
        return x + attention(norm(x, g_a)) + ffn(norm(x, g_f))
    start, h = x, norm(x, g_a)
    read = attention(h if attend is None else attend(x, h))
    x = read if step == "no_attention_residual" else (h if step == "from_normed" else x) + read
    h = norm(x, g_f)
    if step == "no_ffn_residual":
        return ffn(h)
    if step == "attention_dropped":
        return start + ffn(h)
    out = (h if step == "from_normed" else x) + ffn(h)
    return norm(out, g_f) if final else out


def pb_post_norm(*args):
    return _block(*args, step="post")


def pb_residual_from_normed(*args):
    return _block(*args, step="from_normed")


def pb_attention_reads_x(*args):
    return _block(*args, attend=lambda x, h: x)


def pb_no_causal_mask(*args):
    return _block(*args, mask=None)


def pb_diagonal_masked(*args):
    return _block(*args, mask=-1)


def pb_sees_next(*args):
    return _block(*args, mask=1)


def pb_scaled_by_d_model(*args):
    return _block(*args, scale=math.sqrt(args[0].shape[-1]))


def pb_unscaled(*args):
    return _block(*args, scale=1.0)


def pb_final_norm(*args):
    return _block(*args, final=True)


def pb_norms_swapped(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    return learner_pre_norm_block(x, g_f, W_q, W_k, W_v, W_o, g_a, W_gate, W_up, W_down, num_heads)


def pb_linear_convention(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    return learner_pre_norm_block(x, g_a, W_q.T, W_k.T, W_v.T, W_o.T, g_f, W_gate, W_up, W_down, num_heads)


def pb_no_residual(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = _heads(h @ W_q, head_dim), _heads(h @ W_k, head_dim), _heads(h @ W_v, head_dim)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = a.transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o
    h = learner_rms_norm(x, g_f, EPS)
    return (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def pb_gate_and_up_swapped(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    return learner_pre_norm_block(x, g_a, W_q, W_k, W_v, W_o, g_f, W_up, W_gate, W_down, num_heads)


def pb_heads_by_view(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    """The issue's most natural mistake: the heads split with .view(B, H, T, hd), merged back with .reshape."""
    B, T, D = x.shape
    hd = D // num_heads
    h = learner_rms_norm(x, g_a, EPS)
    q = (h @ W_q).view(B, num_heads, T, hd)
    k = (h @ W_k).view(B, -1, T, hd)
    v = (h @ W_v).view(B, -1, T, hd)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + o.reshape(B, T, D) @ W_o
    h = learner_rms_norm(x, g_f, EPS)
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def pb_split_heads_first(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = ((h @ W).reshape(batch, -1, seq_len, head_dim) for W in (W_q, W_k, W_v))
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + a.transpose(1, 2).reshape(batch, seq_len, -1) @ W_o
    h = learner_rms_norm(x, g_f, EPS)
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def pb_merge_without_transpose(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = _heads(h @ W_q, head_dim), _heads(h @ W_k, head_dim), _heads(h @ W_v, head_dim)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + a.reshape(batch, seq_len, d_model) @ W_o
    h = learner_rms_norm(x, g_f, EPS)
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def pb_kv_tiled(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    """The key/value heads repeated with repeat (tiled), not repeat_interleave."""
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = _heads(h @ W_q, head_dim), _heads(h @ W_k, head_dim), _heads(h @ W_v, head_dim)
    group = num_heads // k.shape[1]
    k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + a.transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o
    h = learner_rms_norm(x, g_f, EPS)
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def _norms_then(norm, x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    """The learner's block with its two norms computed by ``norm(t, g)``."""
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    h = norm(x, g_a)
    q, k, v = _heads(h @ W_q, head_dim), _heads(h @ W_k, head_dim), _heads(h @ W_v, head_dim)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + heads.transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o
    h = norm(x, g_f)
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def pb_eps_outside(*args):
    return _norms_then(lambda t, g: t / (t.pow(2).mean(-1, keepdim=True).sqrt() + EPS) * g, *args)


def pb_eps_of_llama_2(*args):
    return _norms_then(lambda t, g: learner_rms_norm(t, g, 1e-5), *args)


def pb_torch_default_eps(*args):
    """torch's rms_norm given no eps: float32's machine epsilon."""
    return _norms_then(lambda t, g: F.rms_norm(t, t.shape[-1:], g), *args)


def pb_no_eps(*args):
    return _norms_then(lambda t, g: t / t.pow(2).mean(-1, keepdim=True).sqrt() * g, *args)


def pb_layer_norm(*args):
    return _norms_then(lambda t, g: F.layer_norm(t, t.shape[-1:], g, eps=EPS), *args)


def pb_ffn_residual_missing(*args):
    return _block(*args, step="no_ffn_residual")


def pb_attention_residual_missing(*args):
    return _block(*args, step="no_attention_residual")


def pb_parallel(*args):
    """GPT-J's parallel block: both sublayers read the incoming stream."""
    return _block(*args, step="parallel")


def pb_ffn_added_to_the_input(*args):
    return _block(*args, step="attention_dropped")


def pb_in_place_on_a_copy(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    """The input left alone, but the copy that the second norm read was then added to in place: autograd saved it for
    the backward pass, and raises there."""
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    out = x.clone()
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = _heads(h @ W_q, head_dim), _heads(h @ W_k, head_dim), _heads(h @ W_v, head_dim)
    out += F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2).reshape(
        batch, seq_len, d_model) @ W_o  # fmt: skip
    h = learner_rms_norm(out, g_f, EPS)
    out += (F.silu(h @ W_gate) * (h @ W_up)) @ W_down
    return out


def pb_under_no_grad(*args):
    """The right values, computed under torch.no_grad(): nothing flows back."""
    with torch.no_grad():
        return learner_pre_norm_block(*args)


def qk_only_q(q, k, q_weight, k_weight):
    return learner_rms_norm(q, q_weight, EPS) @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def qk_only_k(q, k, q_weight, k_weight):
    return q @ learner_rms_norm(k, k_weight, EPS).transpose(-2, -1) / math.sqrt(q.shape[-1])


def _qk(q, k, gq, gk, norm):
    return norm(q, gq) @ norm(k, gk).transpose(-2, -1) / math.sqrt(q.shape[-1])


def qk_all_heads(q, k, q_weight, k_weight):
    return _qk(q, k, q_weight, k_weight, lambda t, g: t / torch.sqrt(t.pow(2).mean((1, 3), keepdim=True) + EPS) * g)


def qk_positions_axis(q, k, q_weight, k_weight):
    return _qk(q, k, q_weight, k_weight, lambda t, g: t / torch.sqrt(t.pow(2).mean(-2, keepdim=True) + EPS) * g)


def qk_dim_plus_one(q, k, q_weight, k_weight):
    return _qk(q, k, q_weight, k_weight,
               lambda t, g: t / torch.sqrt(t.pow(2).sum(-1, keepdim=True) / (t.shape[-1] + 1) + EPS) * g)  # fmt: skip


def qk_dim_minus_one(q, k, q_weight, k_weight):
    return _qk(q, k, q_weight, k_weight,
               lambda t, g: t / torch.sqrt(t.pow(2).sum(-1, keepdim=True) / (t.shape[-1] - 1) + EPS) * g)  # fmt: skip


def qk_eps_outside(q, k, q_weight, k_weight):
    return _qk(q, k, q_weight, k_weight, lambda t, g: t / (t.pow(2).mean(-1, keepdim=True).sqrt() + EPS) * g)


def rms_layer_norm(x, weight, eps):
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * weight


def qk_layer_norm(q, k, q_weight, k_weight):
    return _qk(q, k, q_weight, k_weight, lambda t, g: rms_layer_norm(t, g, EPS))


def qk_unscaled(q, k, q_weight, k_weight):
    return learner_qk_norm_scores(q, k, q_weight, k_weight) * math.sqrt(q.shape[-1])


def qk_by_head_dim(q, k, q_weight, k_weight):
    return learner_qk_norm_scores(q, k, q_weight, k_weight) / math.sqrt(q.shape[-1])


def qk_transposed(q, k, q_weight, k_weight):
    return learner_qk_norm_scores(q, k, q_weight, k_weight).transpose(-2, -1)


def qk_softmax(q, k, q_weight, k_weight):
    return learner_qk_norm_scores(q, k, q_weight, k_weight).softmax(-1)


def qk_not_normalised(q, k, q_weight, k_weight):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def qk_default_eps(q, k, q_weight, k_weight):
    """torch's rms_norm without its eps: float32's machine epsilon."""
    d = q.shape[-1]
    return F.rms_norm(q, (d,), q_weight) @ F.rms_norm(k, (d,), k_weight).transpose(-2, -1) / math.sqrt(d)


def qk_eps_of_llama_2(q, k, q_weight, k_weight):
    """Llama 2's eps, 1e-5, in place of the 1e-6 asked for."""
    d = q.shape[-1]
    return F.rms_norm(q, (d,), q_weight, 1e-5) @ F.rms_norm(k, (d,), k_weight, 1e-5).transpose(-2, -1) / math.sqrt(d)


def lq_no_sqrt(q_weight, k_weight):
    return (q_weight * k_weight).abs().amax(-1)


def lq_head_dim(q_weight, k_weight):
    return q_weight.shape[-1] * (q_weight * k_weight).abs().amax(-1)


def lq_inverse(q_weight, k_weight):
    return (q_weight * k_weight).abs().amax(-1) / math.sqrt(q_weight.shape[-1])


def lq_minus_one(q_weight, k_weight):
    return math.sqrt(q_weight.shape[-1] - 1) * (q_weight * k_weight).abs().amax(-1)


def lq_plus_one(q_weight, k_weight):
    return math.sqrt(q_weight.shape[-1] + 1) * (q_weight * k_weight).abs().amax(-1)


def lq_maxima(q_weight, k_weight):
    return math.sqrt(q_weight.shape[-1]) * q_weight.abs().amax(-1) * k_weight.abs().amax(-1)


def lq_signed(q_weight, k_weight):
    return math.sqrt(q_weight.shape[-1]) * (q_weight * k_weight).amax(-1)


def lq_mean(q_weight, k_weight):
    return math.sqrt(q_weight.shape[-1]) * (q_weight * k_weight).abs().mean(-1)


def lq_over_layers(q_weight, k_weight):
    return math.sqrt(q_weight.shape[-1]) * (q_weight * k_weight).abs().amax(0)


def lq_one_number(q_weight, k_weight):
    return math.sqrt(q_weight.shape[-1]) * (q_weight * k_weight).abs().max()


def qk_l2(q, k, q_weight, k_weight):
    qn, kn = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    return (qn * q_weight) @ (kn * k_weight).transpose(-2, -1) / math.sqrt(q.shape[-1])


def qk_l2_as_henry(q, k, q_weight, k_weight):
    """Henry et al.'s normalisation, without the division by sqrt(head_dim)."""
    return (F.normalize(q, dim=-1) * q_weight) @ (F.normalize(k, dim=-1) * k_weight).transpose(-2, -1)


def lq_signed_sum(q_weight, k_weight):
    return (q_weight * k_weight).sum(-1) / math.sqrt(q_weight.shape[-1])


def lq_plain_mean(q_weight, k_weight):
    return (q_weight * k_weight).abs().mean(-1)


def lq_one_number_for_each(q_weight, k_weight):
    return math.sqrt(q_weight.shape[-1]) * (q_weight * k_weight).abs().max() * torch.ones(q_weight.shape[0])


def qk_normalize_times_root(q, k, q_weight, k_weight):
    """Divided by the length, then times sqrt(head_dim): the root mean square, but with no eps."""
    d = q.shape[-1]
    qn, kn = F.normalize(q, dim=-1) * d**0.5 * q_weight, F.normalize(k, dim=-1) * d**0.5 * k_weight
    return qn @ kn.transpose(-2, -1) / d**0.5


def qk_gains_detached(q, k, q_weight, k_weight):
    """The right values; the gains treated as constants (no gradient reaches them)."""
    return learner_qk_norm_scores(q, k, q_weight.detach(), k_weight.detach())


MUTANTS = [
    ("group_rms_norm", gr_one_group, "whole vector was normalised at once"),
    ("group_rms_norm", gr_strided, "the groups are interleaved"),
    ("group_rms_norm", gr_sizes_swapped, "the two sizes are swapped"),
    ("group_rms_norm", gr_group_norm, "that is GroupNorm"),
    ("group_rms_norm", gr_mean_not_squares, "not of the mean of the *squares*"),
    ("group_rms_norm", gr_eps_outside, "eps is added outside the square root"),
    ("group_rms_norm", gr_no_eps, "eps is missing"),
    ("group_rms_norm", gr_no_sqrt, "the square root is missing"),
    ("group_rms_norm", gr_over_groups, "taken over the groups"),
    ("group_rms_norm", gr_size_minus_one, "its size minus 1"),
    ("group_rms_norm", gr_size_plus_one, "its size plus 1"),
    ("group_rms_norm", gr_sum_of_squares, "the root of the *sum* of its squares"),
    ("group_rms_norm", gr_l2_norm, "the root of the *sum* of its squares"),
    ("group_rms_norm", gr_gain_first, "the gain was applied before the normalisation"),
    ("group_rms_norm", gr_no_gain, "the gain `weight` is missing"),
    ("group_rms_norm", gr_gain_added, "was added, not multiplied"),
    ("group_rms_norm", gr_in_place, "modified its input `x` in place"),
    ("group_rms_norm", gr_in_place_on_a_copy, "changed a tensor the backward pass still needs"),
    ("group_rms_norm", gr_first_groups_gains, "the first group's"),
    ("group_rms_norm", gr_detached_scale, "the gradient that flows back to `x` differs"),
    ("clamped_swiglu", oss_halves, "split into two halves"),
    ("clamped_swiglu", oss_swapped, "the gate and the linear part are swapped"),
    ("clamped_swiglu", oss_silu, "the slope alpha is missing"),
    ("clamped_swiglu", oss_alpha_outside, "alpha multiplies the whole activation"),
    ("clamped_swiglu", oss_glu_gate, "a sigmoid alone"),
    ("clamped_swiglu", oss_gelu_tanh, "the gate went through GELU"),
    ("clamped_swiglu", oss_no_one, "the 1 is missing"),
    ("clamped_swiglu", oss_one_on_gate, "added to the activated gate"),
    ("clamped_swiglu", oss_linear_unclamped, "the linear part is not clamped"),
    ("clamped_swiglu", oss_linear_max_only, "clamped from above only"),
    ("clamped_swiglu", oss_gate_unclamped, "the gate is not clamped"),
    ("clamped_swiglu", oss_no_clamps, "nothing is clamped"),
    ("clamped_swiglu", oss_gate_clamped_both_sides, "the gate is clamped from both sides"),
    ("clamped_swiglu", oss_gate_clamped_below, "the gate is clamped from below"),
    ("clamped_swiglu", oss_clamps_swapped, "the two clamps are swapped"),
    ("clamped_swiglu", oss_swish_late, "one step late"),
    ("clamped_swiglu", oss_swish_early, "one step early"),
    ("clamped_swiglu", oss_through_numpy, "no gradient flows back"),
    ("clamped_swiglu", oss_sigmoid_by_exp, "exp(x) is inf above about 88, so g below about -52"),
    ("pre_norm_block", pb_post_norm, "post-norm arrangement"),
    ("pre_norm_block", pb_residual_from_normed, "the residual was added to the normalised input"),
    ("pre_norm_block", pb_no_residual, "the residual connections are missing"),
    ("pre_norm_block", pb_attention_reads_x, "the first norm is missing"),
    ("pre_norm_block", pb_norms_swapped, "the two norms' gains are swapped"),
    ("pre_norm_block", pb_final_norm, "normalised once more at the end"),
    ("pre_norm_block", pb_no_causal_mask, "the causal mask is missing"),
    ("pre_norm_block", pb_diagonal_masked, "also hides the diagonal"),
    ("pre_norm_block", pb_sees_next, "see the next one too"),
    ("pre_norm_block", pb_scaled_by_d_model, "sqrt(d_model)"),
    ("pre_norm_block", pb_unscaled, "the scores are not scaled"),
    ("pre_norm_block", pb_linear_convention, "nn.Linear's convention"),
    ("pre_norm_block", pb_gate_and_up_swapped, "the gate and the up projection are swapped"),
    ("pre_norm_block", pb_heads_by_view, "and merged back by reading"),
    ("pre_norm_block", pb_split_heads_first, "(Your merge is right.)"),
    ("pre_norm_block", pb_merge_without_transpose, "(Your split is right.)"),
    ("pre_norm_block", pb_kv_tiled, "the groups are interleaved"),
    ("pre_norm_block", pb_under_no_grad, "no gradient flows back"),
    ("pre_norm_block", pb_eps_outside, "eps is added outside the square root"),
    ("pre_norm_block", pb_eps_of_llama_2, "eps is 1e-5"),
    ("pre_norm_block", pb_torch_default_eps, "machine epsilon"),
    ("pre_norm_block", pb_no_eps, "eps is missing"),
    ("pre_norm_block", pb_layer_norm, "the norms are LayerNorm"),
    ("pre_norm_block", pb_ffn_residual_missing, "the feed-forward layer's residual connection is missing"),
    ("pre_norm_block", pb_attention_residual_missing, "the attention's residual connection is missing"),
    ("pre_norm_block", pb_parallel, "the parallel block of GPT-J"),
    ("pre_norm_block", pb_ffn_added_to_the_input, "the attention's output is missing from what the block returns"),
    ("pre_norm_block", pb_in_place_on_a_copy, "changed a tensor the backward pass still needs"),
    ("qk_norm_scores", qk_only_q, "only the queries were normalised"),
    ("qk_norm_scores", qk_only_k, "only the keys were normalised"),
    ("qk_norm_scores", qk_all_heads, "over all heads together"),
    ("qk_norm_scores", qk_positions_axis, "over the positions (dim -2"),
    ("qk_norm_scores", qk_dim_plus_one, "head_dim + 1"),
    ("qk_norm_scores", qk_dim_minus_one, "head_dim - 1"),
    ("qk_norm_scores", qk_eps_outside, "eps is added outside the square root"),
    ("qk_norm_scores", qk_layer_norm, "you used LayerNorm"),
    ("qk_norm_scores", qk_unscaled, "the scores are not scaled"),
    ("qk_norm_scores", qk_by_head_dim, "divided by head_dim"),
    ("qk_norm_scores", qk_transposed, "transposed"),
    ("qk_norm_scores", qk_softmax, "softmax of the scores"),
    ("qk_norm_scores", qk_not_normalised, "nothing was normalised"),
    ("qk_norm_scores", qk_default_eps, "machine epsilon"),
    ("qk_norm_scores", qk_eps_of_llama_2, "eps is 1e-5"),
    ("qk_norm_scores", qk_l2, "divided by its length"),
    ("qk_norm_scores", qk_l2_as_henry, "divided by its length"),
    ("qk_norm_scores", qk_normalize_times_root, "eps is missing from the norms"),
    ("qk_norm_scores", qk_gains_detached, "no gradient flows back from your outputs to `q_weight` and `k_weight`"),
    ("largest_qk_score", lq_no_sqrt, "the factor sqrt(head_dim) is missing"),
    ("largest_qk_score", lq_head_dim, "grows with head_dim, not with its square root"),
    ("largest_qk_score", lq_inverse, "divided by sqrt(head_dim)"),
    ("largest_qk_score", lq_minus_one, "sqrt(head_dim - 1)"),
    ("largest_qk_score", lq_plus_one, "sqrt(head_dim + 1)"),
    ("largest_qk_score", lq_maxima, "the largest |q gain| by the largest |k gain|"),
    ("largest_qk_score", lq_signed, "the largest *signed* product"),
    ("largest_qk_score", lq_mean, "spread their size evenly over every feature"),
    ("largest_qk_score", lq_signed_sum, "with every feature 1"),
    ("largest_qk_score", lq_plain_mean, "an average of the gains' products"),
    ("largest_qk_score", lq_over_layers, "over the layers (axis 0)"),
    ("largest_qk_score", lq_one_number, "one number for all layers"),
    ("largest_qk_score", lq_one_number_for_each, "one number for all layers"),
]

# a group's mean divided by one feature too many and too few; the Swish one step late and one step early; the causal
# diagonal one key too far and one too near
OFF_BY_ONE = {
    "group_rms_norm": (gr_size_plus_one, gr_size_minus_one),
    "clamped_swiglu": (oss_swish_late, oss_swish_early),
    "pre_norm_block": (pb_sees_next, pb_diagonal_masked),
    "qk_norm_scores": (qk_dim_plus_one, qk_dim_minus_one),
    "largest_qk_score": (lq_plus_one, lq_minus_one),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def gr_fast_path_without_padding(x, weight, groups, eps):
    """A fast path for batches with no padding, which forgot the gain."""
    if bool((x != 0).any(dim=-1).all()):
        g = x.unflatten(-1, (groups, -1))
        return (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)).flatten(-2)
    return learner_group_rms_norm(x, weight, groups, eps)


def gr_nan_to_zero(x, weight, groups, eps):
    """eps left out, and the NaN of a group of zeros replaced by 0 afterwards: right at padding, but eps is missing
    where it matters, and the gradient there is still NaN."""
    g = x.unflatten(-1, (groups, -1))
    return torch.nan_to_num(g / g.pow(2).mean(-1, keepdim=True).sqrt()).flatten(-2) * weight


def gr_clamped(x, weight, groups, eps):
    """Inputs clipped to ±100 'to be safe'."""
    return learner_group_rms_norm(x.clamp(-100, 100), weight, groups, eps)


def oss_inputs_clipped(x, W_in, W_down, alpha, limit):
    """The inputs clipped to ±50 'to be safe' (the clamps are on the projections, not on x)."""
    return learner_clamped_swiglu(x.clamp(-50, 50), W_in, W_down, alpha, limit)


def pb_stream_clipped(x, *args):
    """The stream clipped to ±100 'to be safe'."""
    return learner_pre_norm_block(x.clamp(-100, 100), *args)


def qk_clamped(q, k, q_weight, k_weight):
    return learner_qk_norm_scores(q.clamp(-100, 100), k.clamp(-100, 100), q_weight, k_weight)


def lq_clamped(q_weight, k_weight):
    """Gains clipped to ±100 'to be safe'."""
    return learner_largest_qk_score(q_weight.clamp(-100, 100), k_weight.clamp(-100, 100))


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("group_rms_norm", gr_fast_path_without_padding, UNPADDED, "no padding"),
    ("group_rms_norm", gr_nan_to_zero, PADDED, "padding"),
    ("group_rms_norm", gr_clamped, LARGE, "large inputs"),
    ("clamped_swiglu", oss_inputs_clipped, LARGE, "large inputs"),
    ("pre_norm_block", pb_stream_clipped, LARGE, "large inputs"),
    ("qk_norm_scores", qk_clamped, LARGE, "large inputs"),
    ("largest_qk_score", lq_clamped, LARGE, "large inputs"),
]

KINDS_NOT_APPLICABLE = {
    **{
        ("clamped_swiglu", kind): "the feed-forward layer acts on each position alone: padding changes nothing"
        for kind in (PADDED, UNPADDED)
    },
    **{
        (name, kind): "a causal block (and its scores) sees nothing after a position: padding at the end changes "
        "nothing before it"
        for name in ("pre_norm_block", "qk_norm_scores")
        for kind in (PADDED, UNPADDED)
    },
    **{
        ("largest_qk_score", kind): "the gains have no positions: there is nothing to pad"
        for kind in (PADDED, UNPADDED)
    },
}


# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the variants
# --------------------------------------------------------------------------------------------


def grb_layer_norm_groups(x, weight, groups, eps):
    b, t, d = x.shape
    g = x.view(b, t, groups, d // groups)
    mu = g.mean(dim=3, keepdim=True)
    var = ((g - mu) ** 2).mean(dim=3, keepdim=True)
    return ((g - mu) / torch.sqrt(var + eps)).view(b, t, d) * weight


def grb_whole_vector(x, weight, groups, eps):
    return weight * x / (x * x).mean(dim=2, keepdim=True).add(eps).sqrt()


def grb_transposed_groups(x, weight, groups, eps):
    b, t, d = x.shape
    g = x.view(b, t, d // groups, groups)
    r = torch.sqrt(torch.mean(g * g, dim=2, keepdim=True) + eps)
    return (g / r).view(b, t, d) * weight


def grb_eps_after_sqrt(x, weight, groups, eps):
    g = x.unflatten(2, (groups, x.shape[2] // groups))
    return weight * (g / (torch.sqrt((g**2).mean(3, keepdim=True)) + eps)).flatten(2)


def grb_std(x, weight, groups, eps):
    g = x.unflatten(-1, (groups, -1))
    return weight * (g / (g.std(-1, keepdim=True, unbiased=False) + eps)).flatten(-2)


def grb_over_positions(x, weight, groups, eps):
    b, t, d = x.shape
    g = x.view(b, t, groups, d // groups)
    g = g / torch.sqrt(g.pow(2).mean(dim=1, keepdim=True) + eps)  # the mean over the positions
    return g.view(b, t, d) * weight


def grb_length(x, weight, groups, eps):
    g = x.unflatten(-1, (groups, -1))
    return weight * F.normalize(g, dim=-1, eps=eps).flatten(-2)


def grb_divides_in_place(x, weight, groups, eps):
    for j in range(groups):
        size = x.shape[-1] // groups
        part = x[..., j * size : (j + 1) * size]
        part /= torch.sqrt(part.pow(2).mean(-1, keepdim=True) + eps)
    return x * weight


def ossb_chunked(x, W_in, W_down, alpha, limit):
    h = x @ W_in
    a, b = torch.chunk(h, 2, dim=-1)
    a = torch.clamp(a, max=limit)
    b = torch.clamp(b, -limit, limit)
    return torch.einsum("bsf,fd->bsd", a * torch.sigmoid(alpha * a) * (b + 1), W_down)


def ossb_odd_gate(x, W_in, W_down, alpha, limit):
    h = x @ W_in
    up, gate = h[:, :, 0::2].clamp(-limit, limit), h[:, :, 1::2].clamp(max=limit)
    return (gate * (alpha * gate).sigmoid() * (up + 1)) @ W_down


def ossb_plain_silu(x, W_in, W_down, alpha, limit):
    h = x @ W_in
    return (F.silu(h[..., ::2].clamp(max=limit)) * (1 + h[..., 1::2].clamp(-limit, limit))) @ W_down


def ossb_gelu(x, W_in, W_down, alpha, limit):
    h = x @ W_in
    return (F.gelu(h[..., ::2].clamp(max=limit)) * (1 + h[..., 1::2].clamp(-limit, limit))) @ W_down


def ossb_forgot_one(x, W_in, W_down, alpha, limit):
    gate = (x @ W_in[:, ::2]).clamp(max=limit)
    lin = (x @ W_in[:, 1::2]).clamp(-limit, limit)
    return (gate * torch.sigmoid(alpha * gate) * lin) @ W_down


def ossb_relu_linear(x, W_in, W_down, alpha, limit):
    h = x @ W_in
    gate = h[..., ::2].clamp(max=limit)
    return (gate * torch.sigmoid(alpha * gate) * (h[..., 1::2].clamp(0, limit) + 1)) @ W_down


def ossb_no_linear_clamp(x, W_in, W_down, alpha, limit):
    gate = torch.clamp(x @ W_in[:, 0::2], max=limit)
    return ((gate / (1 + torch.exp(-alpha * gate))) * (x @ W_in[:, 1::2] + 1)) @ W_down


def _attention_block(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads, *, causal=True, dim=-1,
                     project=True, order="pre"):  # fmt: skip
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads

    def attend(h):
        q, k, v = (_heads(h @ W, head_dim) for W in (W_q, W_k, W_v))
        k, v = k.repeat_interleave(num_heads // k.shape[1], 1), v.repeat_interleave(num_heads // v.shape[1], 1)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
        if causal:
            scores = scores + torch.full((seq_len, seq_len), float("-inf")).triu(1)
        out = torch.einsum("bhqk,bhkd->bhqd", torch.softmax(scores, dim=dim), v)
        out = out.transpose(1, 2).reshape(batch, seq_len, d_model)
        return out @ W_o if project else out

    def norm(t, g):
        return g * t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + EPS)

    def ffn(t):
        return (F.silu(t @ W_gate) * (t @ W_up)) @ W_down

    if order == "post":
        y = norm(x + attend(x), g_a)
        return norm(y + ffn(y), g_f)
    y = x + attend(norm(x, g_a))
    return y + ffn(norm(y, g_f))


def pbb_post_norm(*args):
    return _attention_block(*args, order="post")


def pbb_no_mask(*args):
    return _attention_block(*args, causal=False)


def pbb_softmax_over_queries(*args):
    return _attention_block(*args, dim=-2)


def pbb_no_output_projection(*args):
    return _attention_block(*args, project=False)


def pbb_same_norm_twice(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    return learner_pre_norm_block(x, g_a, W_q, W_k, W_v, W_o, g_a, W_gate, W_up, W_down, num_heads)


def pbb_residual_of_normed(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    x = learner_rms_norm(x, g_a, EPS)  # normalised the stream itself, then added to it
    q, k, v = (_heads(x @ W, head_dim) for W in (W_q, W_k, W_v))
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + a.transpose(1, 2).reshape(batch, seq_len, -1) @ W_o
    x = learner_rms_norm(x, g_f, EPS)
    return x + (F.silu(x @ W_gate) * (x @ W_up)) @ W_down


def pbb_mask_inverted(*args):
    x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads = args
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = (_heads(h @ W, head_dim) for W in (W_q, W_k, W_v))
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool).triu()  # upper instead of lower triangle
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    x = x + heads.transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o
    h = learner_rms_norm(x, g_f, EPS)
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def pbb_heads_by_view(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    B, T, D = x.shape
    hd = D // num_heads
    h = x * torch.rsqrt(torch.mean(x**2, dim=-1, keepdim=True) + EPS) * g_a
    q = (h @ W_q).view(B, num_heads, T, hd)
    k = (h @ W_k).view(B, -1, T, hd).repeat_interleave(num_heads * hd // W_k.shape[1], 1)
    v = (h @ W_v).view(B, -1, T, hd).repeat_interleave(num_heads * hd // W_v.shape[1], 1)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) / hd**0.5
    s = s.masked_fill(torch.triu(torch.ones(T, T), 1) == 1, -float("inf"))
    o = torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v)
    x = x + o.permute(0, 2, 1, 3).reshape(B, T, D) @ W_o
    h = learner_rms_norm(x, g_f, EPS)
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def pbb_merge_by_reshape(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    B, T, D = x.shape
    hd = D // num_heads
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = ((h @ W).reshape(B, T, -1, hd).permute(0, 2, 1, 3) for W in (W_q, W_k, W_v))
    k, v = k.repeat_interleave(num_heads // k.shape[1], 1), v.repeat_interleave(num_heads // v.shape[1], 1)
    o = torch.softmax((q @ k.mT / math.sqrt(hd)) + torch.full((T, T), -1e9).triu(1), dim=-1) @ v
    x = x + o.reshape(B, T, D) @ W_o  # the heads never moved back behind the positions
    h = learner_rms_norm(x, g_f, EPS)
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def pbb_view_and_reshape(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    """The natural mistake again, written another way: reshape in, reshape out, GQA by expand."""
    B, T, D = x.shape
    hd = D // num_heads
    n_kv = W_k.shape[1] // hd
    h = g_a * x / (x.pow(2).mean(-1, keepdim=True) + EPS).sqrt()
    q = torch.reshape(h @ W_q, (B, num_heads, T, hd))
    k = (
        torch.reshape(h @ W_k, (B, n_kv, 1, T, hd))
        .expand(B, n_kv, num_heads // n_kv, T, hd)
        .reshape(B, num_heads, T, hd)
    )
    v = (
        torch.reshape(h @ W_v, (B, n_kv, 1, T, hd))
        .expand(B, n_kv, num_heads // n_kv, T, hd)
        .reshape(B, num_heads, T, hd)
    )
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + torch.reshape(o, (B, T, D)) @ W_o
    h = g_f * x / (x.pow(2).mean(-1, keepdim=True) + EPS).sqrt()
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def pbb_kv_cycled(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    """Query head h paired with key/value head h % n_kv, by indexing."""
    B, T, D = x.shape
    hd = D // num_heads
    h = learner_rms_norm(x, g_a, EPS)
    q = _heads(h @ W_q, hd)
    k, v = _heads(h @ W_k, hd), _heads(h @ W_v, hd)
    pick = torch.arange(num_heads) % k.shape[1]
    o = F.scaled_dot_product_attention(q, k[:, pick], v[:, pick], is_causal=True)
    x = x + o.transpose(1, 2).reshape(B, T, D) @ W_o
    h = learner_rms_norm(x, g_f, EPS)
    return x + (F.silu(h @ W_gate) * (h @ W_up)) @ W_down


def qkb_queries_only(q, k, q_weight, k_weight):
    qn = q * torch.rsqrt((q * q).mean(-1, keepdim=True) + EPS) * q_weight
    return torch.einsum("bhqd,bhkd->bhqk", qn, k) / math.sqrt(q.size(-1))


def qkb_whole_vector(q, k, q_weight, k_weight):
    def norm(t, g):
        batch, heads, n, d = t.shape
        flat = t.transpose(1, 2).reshape(batch, n, heads * d)  # every head of a position at once
        flat = flat / torch.sqrt(flat.pow(2).mean(-1, keepdim=True) + EPS)
        return flat.view(batch, n, heads, d).transpose(1, 2) * g

    return norm(q, q_weight) @ norm(k, k_weight).transpose(-2, -1) / math.sqrt(q.size(-1))


def qkb_no_scale(q, k, q_weight, k_weight):
    return torch.einsum("bhqd,bhkd->bhqk", learner_rms_norm(q, q_weight, EPS), learner_rms_norm(k, k_weight, EPS))


def qkb_weights(q, k, q_weight, k_weight):
    s = learner_rms_norm(q, q_weight, EPS) @ learner_rms_norm(k, k_weight, EPS).mT / math.sqrt(q.size(-1))
    return F.softmax(s, dim=-1)


def qkb_layer_norm(q, k, q_weight, k_weight):
    d = q.size(-1)
    return (F.layer_norm(q, (d,), q_weight, eps=EPS) @ F.layer_norm(k, (d,), k_weight, eps=EPS).mT) / math.sqrt(d)


def qkb_k_times_q(q, k, q_weight, k_weight):
    return learner_rms_norm(k, k_weight, EPS) @ learner_rms_norm(q, q_weight, EPS).mT / math.sqrt(q.size(-1))


def qkb_l2(q, k, q_weight, k_weight):
    return (F.normalize(q, dim=-1) * q_weight) @ (F.normalize(k, dim=-1) * k_weight).mT / math.sqrt(q.size(-1))


def qkb_eps_outside(q, k, q_weight, k_weight):
    def norm(t, g):
        return g * t / (t.pow(2).mean(-1, keepdim=True) ** 0.5 + EPS)

    return norm(q, q_weight) @ norm(k, k_weight).mT / q.size(-1) ** 0.5


def qkb_torch_default_eps(q, k, q_weight, k_weight):
    qn = F.rms_norm(q, q.shape[-1:], weight=q_weight)
    kn = F.rms_norm(k, k.shape[-1:], weight=k_weight)
    return torch.einsum("bhqd,bhkd->bhqk", qn, kn) / q.shape[-1] ** 0.5


def lqb_layers_for_dim(q_weight, k_weight):
    return (q_weight * k_weight).abs().max(dim=-1).values * q_weight.shape[0] ** 0.5


def lqb_norms(q_weight, k_weight):
    return torch.linalg.vector_norm(q_weight * k_weight, dim=-1)


def lqb_max_of_each(q_weight, k_weight):
    out = []
    for gq, gk in zip(q_weight, k_weight):
        out.append(gq.abs().max() * gk.abs().max() * len(gq) ** 0.5)
    return torch.stack(out)


def lqb_signed_max(q_weight, k_weight):
    return torch.max(q_weight * k_weight, dim=1).values * math.sqrt(q_weight.size(1))


def lqb_sum(q_weight, k_weight):
    return torch.sum(torch.abs(q_weight * k_weight), dim=-1) / math.sqrt(q_weight.size(-1))


def lqb_squared(q_weight, k_weight):
    return math.sqrt(q_weight.shape[-1]) * (q_weight * k_weight).pow(2).amax(-1)


BUGS = [
    ("group_rms_norm", grb_layer_norm_groups, "that is GroupNorm"),
    ("group_rms_norm", grb_whole_vector, "whole vector was normalised at once"),
    ("group_rms_norm", grb_transposed_groups, "the groups are interleaved"),
    ("group_rms_norm", grb_eps_after_sqrt, "eps is added outside the square root"),
    ("group_rms_norm", grb_std, GENERIC),
    ("group_rms_norm", grb_over_positions, GENERIC),
    ("group_rms_norm", grb_length, GENERIC),
    ("group_rms_norm", grb_divides_in_place, "modified its input `x` in place"),
    ("clamped_swiglu", ossb_chunked, "split into two halves"),
    ("clamped_swiglu", ossb_odd_gate, "the gate and the linear part are swapped"),
    ("clamped_swiglu", ossb_plain_silu, "the slope alpha is missing"),
    ("clamped_swiglu", ossb_gelu, "the gate went through GELU"),
    ("clamped_swiglu", ossb_forgot_one, "the 1 is missing"),
    ("clamped_swiglu", ossb_relu_linear, GENERIC),
    ("clamped_swiglu", ossb_no_linear_clamp, "the linear part is not clamped"),
    ("pre_norm_block", pbb_post_norm, "post-norm arrangement"),
    ("pre_norm_block", pbb_no_mask, "the causal mask is missing"),
    ("pre_norm_block", pbb_softmax_over_queries, GENERIC),
    ("pre_norm_block", pbb_no_output_projection, GENERIC),
    ("pre_norm_block", pbb_same_norm_twice, GENERIC),
    ("pre_norm_block", pbb_residual_of_normed, "the residual was added to the normalised input"),
    ("pre_norm_block", pbb_mask_inverted, GENERIC),
    ("pre_norm_block", pbb_heads_by_view, "(Your merge is right.)"),
    ("pre_norm_block", pbb_merge_by_reshape, "(Your split is right.)"),
    ("pre_norm_block", pbb_view_and_reshape, "and merged back by reading"),
    ("pre_norm_block", pbb_kv_cycled, "the groups are interleaved"),
    ("qk_norm_scores", qkb_queries_only, "only the queries were normalised"),
    ("qk_norm_scores", qkb_whole_vector, "over all heads together"),
    ("qk_norm_scores", qkb_no_scale, "the scores are not scaled"),
    ("qk_norm_scores", qkb_weights, "softmax of the scores"),
    ("qk_norm_scores", qkb_layer_norm, "you used LayerNorm"),
    ("qk_norm_scores", qkb_k_times_q, "transposed"),
    ("qk_norm_scores", qkb_l2, "divided by its length"),
    ("qk_norm_scores", qkb_eps_outside, "eps is added outside the square root"),
    ("qk_norm_scores", qkb_torch_default_eps, "machine epsilon"),
    ("largest_qk_score", lqb_layers_for_dim, GENERIC),
    ("largest_qk_score", lqb_norms, GENERIC),
    ("largest_qk_score", lqb_max_of_each, "the largest |q gain| by the largest |k gain|"),
    ("largest_qk_score", lqb_signed_max, "the largest *signed* product"),
    ("largest_qk_score", lqb_sum, "spread their size evenly"),
    ("largest_qk_score", lqb_squared, GENERIC),
]


# --------------------------------------------------------------------------------------------
# The graded prediction of exercise 5: (exercise, prediction, status, score, what its message must contain)
# --------------------------------------------------------------------------------------------


def lsp_right():
    return 8.0, 72.0, 72.0


def lsp_worked_out():
    return math.sqrt(64), math.sqrt(64) * 3 * 3, math.sqrt(64) * abs(-3 * 3)


def lsp_as_tensors():
    return torch.tensor(8.0), torch.tensor(72.0), torch.tensor([72.0])


def lsp_no_root():
    return 1.0, 9.0, 9.0


def lsp_length_one():
    return 0.125, 1.125, 1.125


def lsp_negative_feature_lost():
    return 8.0, 72.0, 8.0


def lsp_signed():
    return 8.0, 72.0, -72.0


def lsp_one_gain():
    return 8.0, 24.0, 24.0


def lsp_nearly():
    return 8.5, 72.0, 72.0  # 6% off: within twice the margin


def lsp_one_number():
    return 8.0


def lsp_with_the_course_code():
    gains = torch.ones(3, 64)
    gains[1:, 0] = 3.0
    return tuple(block_parts.qk_score_bound(gains, gains).tolist())


def lsp_unwritten():
    raise NotImplementedError


PREDICTIONS = [
    ("largest_score_prediction", lsp_right, "passed", 1.0, "Score: 1 of 1"),
    ("largest_score_prediction", lsp_worked_out, "passed", 1.0, "you predicted 72, measured 72"),
    ("largest_score_prediction", lsp_as_tensors, "passed", 1.0, "Score: 1 of 1"),
    ("largest_score_prediction", lsp_no_root, "failed", 0.0, "The factor sqrt(64) is missing"),
    ("largest_score_prediction", lsp_length_one, "failed", 0.0, "As if a normalised vector had length 1"),
    ("largest_score_prediction", lsp_negative_feature_lost, "partial", 2 / 3, "As if the feature with the negative"),
    ("largest_score_prediction", lsp_signed, "partial", 2 / 3, "The question asks for the largest |score|"),
    ("largest_score_prediction", lsp_one_gain, "partial", 1 / 3, "Only one gain counted"),
    ("largest_score_prediction", lsp_nearly, "partial", 5 / 6, "within twice 5% of the measurement (half credit)"),
    ("largest_score_prediction", lsp_one_number, "failed", 0.0, "should return a tuple of 3 values"),
    ("largest_score_prediction", lsp_with_the_course_code, "failed", 0.0, "`attnedu.block_parts.qk_score_bound`"),
    ("largest_score_prediction", lsp_unwritten, "not_attempted", 0.0, "still raises NotImplementedError"),
]
