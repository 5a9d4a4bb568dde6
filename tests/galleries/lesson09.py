"""Lesson 09, 09_transformer_block: the galleries of ``rms_norm``, ``swiglu``, ``pre_norm_block`` and
``qk_norm_scores``, ``largest_qk_score`` (CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as
tests/galleries/__init__.py describes them), and REFERENCE_USE: functions that are, or call, the package's own
``attnedu.transformer``, which the exercises forbid.

The correct versions are written as a learner would: with torch's functions (F.silu, F.rms_norm,
F.scaled_dot_product_attention), by hand, with einsum or loops. The feed-forward layer, the causal block and the
QK-norm scores have neither padded nor unpadded test cases (KINDS_NOT_APPLICABLE): padding at the end of a sentence
changes nothing in a position-wise layer or under a causal mask.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnedu import transformer
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED

from .common import GENERIC, batch_of_one

EPS = 1e-6

# --------------------------------------------------------------------------------------------
# Correct versions
# --------------------------------------------------------------------------------------------


def learner_rms_norm(x, weight, eps):
    rms = torch.sqrt((x**2).mean(dim=-1, keepdim=True) + eps)
    return x / rms * weight


def learner_rms_norm_rsqrt(x, weight, eps):
    """As Llama's code writes it."""
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def learner_rms_norm_torch(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def learner_rms_norm_loop(x, weight, eps):
    out = torch.empty_like(x)
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            v = x[b, t]
            out[b, t] = v / math.sqrt(float((v * v).sum()) / v.numel() + eps) * weight
    return out


def learner_swiglu(x, W_gate, W_up, W_down):
    return (F.silu(x @ W_gate) * (x @ W_up)) @ W_down


def learner_swiglu_by_hand(x, W_gate, W_up, W_down):
    gate = x @ W_gate
    return (gate * torch.sigmoid(gate) * (x @ W_up)) @ W_down


def learner_swiglu_einsum(x, W_gate, W_up, W_down):
    g = torch.einsum("bsd,df->bsf", x, W_gate)
    u = torch.einsum("bsd,df->bsf", x, W_up)
    return torch.einsum("bsf,fd->bsd", F.silu(g) * u, W_down)


def _heads(t, num_heads):
    batch, seq_len, d_model = t.shape
    return t.view(batch, seq_len, num_heads, d_model // num_heads).transpose(1, 2)


def learner_pre_norm_block(x, attention_norm, W_q, W_k, W_v, W_o, ffn_norm, W_gate, W_up, W_down, num_heads):
    batch, seq_len, d_model = x.shape
    h = learner_rms_norm(x, attention_norm, EPS)
    q, k, v = _heads(h @ W_q, num_heads), _heads(h @ W_k, num_heads), _heads(h @ W_v, num_heads)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + heads.transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o
    return x + learner_swiglu(learner_rms_norm(x, ffn_norm, EPS), W_gate, W_up, W_down)


def learner_pre_norm_block_by_hand(x, attention_norm, W_q, W_k, W_v, W_o, ffn_norm, W_gate, W_up, W_down, num_heads):
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * attention_norm
    outputs = []
    for i in range(num_heads):  # one head at a time
        cols = slice(i * head_dim, (i + 1) * head_dim)
        q, k, v = h @ W_q[:, cols], h @ W_k[:, cols], h @ W_v[:, cols]
        scores = q @ k.transpose(1, 2) / math.sqrt(head_dim)
        future = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        outputs.append(torch.softmax(scores, dim=-1) @ v)
    x = x + torch.cat(outputs, dim=-1) @ W_o
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * ffn_norm
    gate = h @ W_gate
    return x + (gate * torch.sigmoid(gate) * (h @ W_up)) @ W_down


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
    "rms_norm": [learner_rms_norm, learner_rms_norm_rsqrt, learner_rms_norm_torch, learner_rms_norm_loop],
    "swiglu": [learner_swiglu, learner_swiglu_by_hand, learner_swiglu_einsum],
    "pre_norm_block": [learner_pre_norm_block, learner_pre_norm_block_by_hand],
    "qk_norm_scores": [learner_qk_norm_scores, learner_qk_norm_scores_gains_last],
    "largest_qk_score": [learner_largest_qk_score, learner_largest_qk_score_loop],
}


def _block_with_the_packages_swiglu(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    batch, seq_len, d_model = x.shape
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = _heads(h @ W_q, num_heads), _heads(h @ W_k, num_heads), _heads(h @ W_v, num_heads)
    x = x + F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, seq_len, -1) @ W_o
    return x + transformer.swiglu(learner_rms_norm(x, g_f, EPS), W_gate, W_up, W_down)


REFERENCE_USE = [
    ("rms_norm", transformer.rms_norm),
    ("swiglu", transformer.swiglu),
    ("pre_norm_block", _block_with_the_packages_swiglu),
    ("pre_norm_block", lambda *args: transformer.pre_norm_block(*args)),
    ("qk_norm_scores", lambda q, k, gq, gk: transformer.qk_norm_scores(q, k, gq, gk)),
    ("largest_qk_score", transformer.qk_score_bound),
]


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------


def rms_mean_not_squares(x, weight, eps):
    return x / torch.sqrt(x.mean(-1, keepdim=True) + eps) * weight


def rms_eps_outside(x, weight, eps):
    return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weight


def rms_no_eps(x, weight, eps):
    return x / x.pow(2).mean(-1, keepdim=True).sqrt() * weight


def rms_batch_axis(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * weight


def rms_positions_axis(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(1, keepdim=True) + eps) * weight


def rms_whole_sentence(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean((1, 2), keepdim=True) + eps) * weight


def rms_d_minus_one(x, weight, eps):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) / (x.shape[-1] - 1) + eps) * weight


def rms_d_plus_one(x, weight, eps):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) / (x.shape[-1] + 1) + eps) * weight


def rms_sum(x, weight, eps):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * weight


def rms_layer_norm(x, weight, eps):
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * weight


def rms_no_sqrt(x, weight, eps):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rms_multiplied(x, weight, eps):
    return x * torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rms_no_gain(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_gain_added(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) + weight


def rms_in_place(x, weight, eps):
    x /= torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * weight


def rms_float64(x, weight, eps):
    return learner_rms_norm(x.double(), weight.double(), eps)


def sw_swapped(x, W_gate, W_up, W_down):
    return (F.silu(x @ W_up) * (x @ W_gate)) @ W_down


def sw_no_silu(x, W_gate, W_up, W_down):
    return ((x @ W_gate) * (x @ W_up)) @ W_down


def sw_sigmoid(x, W_gate, W_up, W_down):
    return (torch.sigmoid(x @ W_gate) * (x @ W_up)) @ W_down


def sw_relu(x, W_gate, W_up, W_down):
    return (F.relu(x @ W_gate) * (x @ W_up)) @ W_down


def sw_gelu(x, W_gate, W_up, W_down):
    return (F.gelu(x @ W_gate) * (x @ W_up)) @ W_down


def sw_both(x, W_gate, W_up, W_down):
    return (F.silu(x @ W_gate) * F.silu(x @ W_up)) @ W_down


def sw_late(x, W_gate, W_up, W_down):
    return F.silu((x @ W_gate) * (x @ W_up)) @ W_down


def sw_early(x, W_gate, W_up, W_down):
    return ((F.silu(x) @ W_gate) * (x @ W_up)) @ W_down


def sw_on_output(x, W_gate, W_up, W_down):
    return F.silu(((x @ W_gate) * (x @ W_up)) @ W_down)


def sw_added(x, W_gate, W_up, W_down):
    return (F.silu(x @ W_gate) + x @ W_up) @ W_down


def sw_no_down(x, W_gate, W_up, W_down):
    return F.silu(x @ W_gate) * (x @ W_up)


def _block(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads, *, attend=None, step="pre", scale=None,
           mask=0, final=False):  # fmt: skip
    """A learner's block with one choice made differently."""
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads

    def attention(h):
        q, k, v = _heads(h @ W_q, num_heads), _heads(h @ W_k, num_heads), _heads(h @ W_v, num_heads)
        scores = q @ k.transpose(-2, -1) / (math.sqrt(head_dim) if scale is None else scale)
        if mask is not None:
            keep = torch.ones(seq_len, seq_len).tril(mask).bool()
            scores = scores.masked_fill(~keep, float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, -1))
        return (weights @ v).transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o

    def norm(t, g):
        return learner_rms_norm(t, g, EPS)

    if step == "post":
        x = norm(x + attention(x), g_a)
        return norm(x + learner_swiglu(x, W_gate, W_up, W_down), g_f)
    h = norm(x, g_a)
    x = (h if step == "from_normed" else x) + attention(h if attend is None else attend(x, h))
    h = norm(x, g_f)
    out = (h if step == "from_normed" else x) + learner_swiglu(h, W_gate, W_up, W_down)
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
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = _heads(h @ W_q, num_heads), _heads(h @ W_k, num_heads), _heads(h @ W_v, num_heads)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, seq_len, d_model)
    x = a @ W_o
    return learner_swiglu(learner_rms_norm(x, g_f, EPS), W_gate, W_up, W_down)


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


def pb_split_heads_first(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    batch, seq_len, d_model = x.shape
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = ((h @ W).reshape(batch, num_heads, seq_len, d_model // num_heads) for W in (W_q, W_k, W_v))
    x = x + F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, seq_len, -1) @ W_o
    return x + learner_swiglu(learner_rms_norm(x, g_f, EPS), W_gate, W_up, W_down)


def pb_merge_without_transpose(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    batch, seq_len, d_model = x.shape
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = _heads(h @ W_q, num_heads), _heads(h @ W_k, num_heads), _heads(h @ W_v, num_heads)
    x = x + F.scaled_dot_product_attention(q, k, v, is_causal=True).reshape(batch, seq_len, d_model) @ W_o
    return x + learner_swiglu(learner_rms_norm(x, g_f, EPS), W_gate, W_up, W_down)


def qk_default_eps(q, k, q_weight, k_weight):
    """torch's rms_norm without its eps: float32's machine epsilon."""
    d = q.shape[-1]
    return F.rms_norm(q, (d,), q_weight) @ F.rms_norm(k, (d,), k_weight).transpose(-2, -1) / math.sqrt(d)


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


MUTANTS = [
    ("rms_norm", rms_mean_not_squares, "not of the mean of the *squares*"),
    ("rms_norm", rms_eps_outside, "eps is added outside the square root"),
    ("rms_norm", rms_no_eps, "eps is missing"),
    ("rms_norm", rms_batch_axis, "over the batch (dim 0)"),
    ("rms_norm", rms_positions_axis, "over the positions (dim 1, one axis too low)"),
    ("rms_norm", rms_whole_sentence, "positions and features together"),
    ("rms_norm", rms_d_minus_one, "d_model - 1"),
    ("rms_norm", rms_d_plus_one, "d_model + 1"),
    ("rms_norm", rms_sum, "the length of the vector"),
    ("rms_norm", rms_layer_norm, "LayerNorm's"),
    ("rms_norm", rms_no_sqrt, "the square root is missing"),
    ("rms_norm", rms_multiplied, "multiplied by the root mean square"),
    ("rms_norm", rms_no_gain, "the gain `weight` is missing"),
    ("rms_norm", rms_gain_added, "was added, not multiplied"),
    ("rms_norm", rms_in_place, "modified its input `x` in place"),
    ("rms_norm", rms_float64, "dtype torch.float64"),
    ("swiglu", sw_swapped, "the gate and the up projection are swapped"),
    ("swiglu", sw_no_silu, "SiLU is missing"),
    ("swiglu", sw_sigmoid, "the original GLU"),
    ("swiglu", sw_relu, "ReGLU"),
    ("swiglu", sw_gelu, "GEGLU"),
    ("swiglu", sw_both, "SiLU went on both projections"),
    ("swiglu", sw_late, "SiLU came one step late"),
    ("swiglu", sw_early, "SiLU came one step early"),
    ("swiglu", sw_on_output, "SiLU went on the output"),
    ("swiglu", sw_added, "added, not multiplied"),
    ("swiglu", sw_no_down, "wrong shape"),
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
    ("pre_norm_block", pb_split_heads_first, "the heads were split by reading"),
    ("pre_norm_block", pb_merge_without_transpose, "the heads were merged by reading"),
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
    ("largest_qk_score", lq_no_sqrt, "the factor sqrt(head_dim) is missing"),
    ("largest_qk_score", lq_head_dim, "grows with head_dim, not with its square root"),
    ("largest_qk_score", lq_inverse, "divided by sqrt(head_dim)"),
    ("largest_qk_score", lq_minus_one, "sqrt(head_dim - 1)"),
    ("largest_qk_score", lq_plus_one, "sqrt(head_dim + 1)"),
    ("largest_qk_score", lq_maxima, "the largest |q gain| by the largest |k gain|"),
    ("largest_qk_score", lq_signed, "the largest *signed* product"),
    ("largest_qk_score", lq_mean, "the mean of the products"),
    ("largest_qk_score", lq_over_layers, "over the layers (axis 0)"),
    ("largest_qk_score", lq_one_number, "one number for all layers"),
]

# the mean's divisor one feature too many and too few; SiLU one step late and one step early; the causal diagonal
# one key too far and one too near
OFF_BY_ONE = {
    "rms_norm": (rms_d_plus_one, rms_d_minus_one),
    "swiglu": (sw_late, sw_early),
    "pre_norm_block": (pb_sees_next, pb_diagonal_masked),
    "qk_norm_scores": (qk_dim_plus_one, qk_dim_minus_one),
    "largest_qk_score": (lq_plus_one, lq_minus_one),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def rms_fast_path_without_padding(x, weight, eps):
    """A fast path for batches with no padding, which forgot the gain."""
    if bool((x != 0).any(dim=-1).all()):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return learner_rms_norm(x, weight, eps)


def rms_clamped(x, weight, eps):
    """Inputs clipped to ±100 'to be safe'."""
    return learner_rms_norm(x.clamp(-100, 100), weight, eps)


def sw_sigmoid_by_exp(x, W_gate, W_up, W_down):
    gate = x @ W_gate
    return (gate * torch.exp(gate) / (1 + torch.exp(gate)) * (x @ W_up)) @ W_down


def pb_softmax_by_exp(*args):
    def softmax(scores):
        e = torch.exp(scores)
        return e / e.sum(-1, keepdim=True)

    x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads = args
    batch, seq_len, d_model = x.shape
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = _heads(h @ W_q, num_heads), _heads(h @ W_k, num_heads), _heads(h @ W_v, num_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_model // num_heads)
    scores = scores.masked_fill(torch.ones(seq_len, seq_len).triu(1).bool(), float("-inf"))
    x = x + (softmax(scores) @ v).transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o
    return x + learner_swiglu(learner_rms_norm(x, g_f, EPS), W_gate, W_up, W_down)


def qk_clamped(q, k, q_weight, k_weight):
    return learner_qk_norm_scores(q.clamp(-100, 100), k.clamp(-100, 100), q_weight, k_weight)


def lq_clamped(q_weight, k_weight):
    """Gains clipped to ±100 'to be safe'."""
    return learner_largest_qk_score(q_weight.clamp(-100, 100), k_weight.clamp(-100, 100))


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("rms_norm", rms_fast_path_without_padding, UNPADDED, "no padding"),
    ("rms_norm", rms_no_eps, PADDED, "eps is missing"),
    ("rms_norm", rms_clamped, LARGE, "large inputs"),
    ("swiglu", sw_sigmoid_by_exp, LARGE, "This test case has large inputs"),
    ("pre_norm_block", pb_softmax_by_exp, LARGE, "This test case has large inputs"),
    ("qk_norm_scores", qk_clamped, LARGE, "large inputs"),
    ("largest_qk_score", lq_clamped, LARGE, "large inputs"),
]

KINDS_NOT_APPLICABLE = {
    **{
        ("swiglu", kind): "the feed-forward layer acts on each position alone: padding changes nothing"
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


def rb_mean_no_square(x, weight, eps):
    m = torch.mean(x, dim=2, keepdim=True)
    return weight * x / (m + eps) ** 0.5


def rb_eps_after_root(x, weight, eps):
    return weight * x / ((x * x).mean(dim=2, keepdim=True) ** 0.5 + eps)


def rb_batch_dim(x, weight, eps):
    return weight * x * torch.rsqrt(torch.mean(x * x, dim=0) + eps)  # (seq_len, d) broadcasts silently


def rb_layer_norm_var(x, weight, eps):
    mu = x.mean(-1, keepdim=True)
    return weight * (x - mu) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps)


def rb_unbiased_sum(x, weight, eps):
    n = x.size(-1)
    return weight * x / torch.sqrt(torch.sum(x * x, -1, keepdim=True) / (n - 1) + eps)


def rb_forgot_gain(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1) + eps).unsqueeze(-1)


def rb_l2_normalize(x, weight, eps):
    return F.normalize(x, dim=-1) * weight


def rb_std(x, weight, eps):
    return weight * x / torch.sqrt(x.std(-1, keepdim=True) ** 2 + eps)


def rb_divides_in_place(x, weight, eps):
    x.div_(torch.sqrt((x**2).mean(-1, keepdim=True) + eps))
    return x.mul(weight)


def swb_gate_on_up(x, W_gate, W_up, W_down):
    u = x @ W_up
    return (u * torch.sigmoid(u) * (x @ W_gate)) @ W_down


def swb_glu_sigmoid(x, W_gate, W_up, W_down):
    gate = 1 / (1 + torch.exp(-(x @ W_gate)))
    return (gate * (x @ W_up)) @ W_down


def swb_relu(x, W_gate, W_up, W_down):
    return (torch.clamp(x @ W_gate, min=0) * (x @ W_up)) @ W_down


def swb_silu_of_product(x, W_gate, W_up, W_down):
    hidden = torch.einsum("bsd,df->bsf", x, W_gate) * torch.einsum("bsd,df->bsf", x, W_up)
    return F.silu(hidden) @ W_down


def swb_bilinear(x, W_gate, W_up, W_down):
    return torch.einsum("bsf,fd->bsd", (x @ W_gate) * (x @ W_up), W_down)


def swb_plus(x, W_gate, W_up, W_down):
    hidden = x @ W_up
    hidden = hidden + F.silu(x @ W_gate)
    return hidden @ W_down


def swb_tanh_gelu(x, W_gate, W_up, W_down):
    return (F.gelu(x @ W_gate, approximate="tanh") * (x @ W_up)) @ W_down


def swb_down_transposed(x, W_gate, W_up, W_down):
    return (F.silu(x @ W_gate) * (x @ W_up)) @ W_down.T


def _attention_block(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads, *, causal=True, dim=-1,
                     project=True, order="pre"):  # fmt: skip
    batch, seq_len, d_model = x.shape

    def attend(h):
        q, k, v = (_heads(h @ W, num_heads) for W in (W_q, W_k, W_v))
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
        if causal:
            scores = scores + torch.full((seq_len, seq_len), float("-inf")).triu(1)
        out = torch.einsum("bhqk,bhkd->bhqd", torch.softmax(scores, dim=dim), v)
        out = out.transpose(1, 2).reshape(batch, seq_len, d_model)
        return out @ W_o if project else out

    def norm(t, g):
        return g * t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + EPS)

    if order == "post":
        y = norm(x + attend(x), g_a)
        return norm(y + learner_swiglu(y, W_gate, W_up, W_down), g_f)
    y = x + attend(norm(x, g_a))
    return y + learner_swiglu(norm(y, g_f), W_gate, W_up, W_down)


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
    x = learner_rms_norm(x, g_a, EPS)  # normalised the stream itself, then added to it
    q, k, v = (_heads(x @ W, num_heads) for W in (W_q, W_k, W_v))
    x = x + F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, seq_len, -1) @ W_o
    x = learner_rms_norm(x, g_f, EPS)
    return x + learner_swiglu(x, W_gate, W_up, W_down)


def pbb_mask_inverted(*args):
    x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads = args
    batch, seq_len, d_model = x.shape
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = (_heads(h @ W, num_heads) for W in (W_q, W_k, W_v))
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool).triu()  # upper instead of lower triangle
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    x = x + heads.transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o
    return x + learner_swiglu(learner_rms_norm(x, g_f, EPS), W_gate, W_up, W_down)


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


def pbb_heads_by_view(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    B, T, D = x.shape
    hd = D // num_heads
    h = x * torch.rsqrt(torch.mean(x**2, dim=-1, keepdim=True) + EPS) * g_a
    q = (h @ W_q).view(B, num_heads, T, hd)
    k = (h @ W_k).view(B, num_heads, T, hd)
    v = (h @ W_v).view(B, num_heads, T, hd)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) / hd**0.5
    s = s.masked_fill(torch.triu(torch.ones(T, T), 1) == 1, -float("inf"))
    o = torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v)
    x = x + o.permute(0, 2, 1, 3).reshape(B, T, D) @ W_o
    return x + learner_swiglu(learner_rms_norm(x, g_f, EPS), W_gate, W_up, W_down)


def pbb_merge_by_reshape(x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads):
    B, T, D = x.shape
    hd = D // num_heads
    h = learner_rms_norm(x, g_a, EPS)
    q, k, v = ((h @ W).reshape(B, T, num_heads, hd).permute(0, 2, 1, 3) for W in (W_q, W_k, W_v))
    o = torch.softmax((q @ k.mT / math.sqrt(hd)) + torch.full((T, T), -1e9).triu(1), dim=-1) @ v
    x = x + o.reshape(B, T, D) @ W_o  # the heads never moved back behind the positions
    return x + learner_swiglu(learner_rms_norm(x, g_f, EPS), W_gate, W_up, W_down)


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
    ("rms_norm", rb_mean_no_square, "not of the mean of the *squares*"),
    ("rms_norm", rb_eps_after_root, "eps is added outside the square root"),
    ("rms_norm", rb_batch_dim, "over the batch (dim 0)"),
    ("rms_norm", rb_layer_norm_var, "LayerNorm's"),
    ("rms_norm", rb_unbiased_sum, "d_model - 1"),
    ("rms_norm", rb_forgot_gain, "the gain `weight` is missing"),
    ("rms_norm", rb_l2_normalize, GENERIC),
    ("rms_norm", rb_std, GENERIC),
    ("rms_norm", rb_divides_in_place, "modified its input `x` in place"),
    ("swiglu", swb_gate_on_up, "the gate and the up projection are swapped"),
    ("swiglu", swb_glu_sigmoid, "the original GLU"),
    ("swiglu", swb_relu, "ReGLU"),
    ("swiglu", swb_silu_of_product, "SiLU came one step late"),
    ("swiglu", swb_bilinear, "SiLU is missing"),
    ("swiglu", swb_plus, "added, not multiplied"),
    ("swiglu", swb_tanh_gelu, GENERIC),
    ("swiglu", swb_down_transposed, GENERIC),
    ("pre_norm_block", pbb_post_norm, "post-norm arrangement"),
    ("pre_norm_block", pbb_no_mask, "the causal mask is missing"),
    ("pre_norm_block", pbb_softmax_over_queries, GENERIC),
    ("pre_norm_block", pbb_no_output_projection, GENERIC),
    ("pre_norm_block", pbb_same_norm_twice, GENERIC),
    ("pre_norm_block", pbb_residual_of_normed, "the residual was added to the normalised input"),
    ("pre_norm_block", pbb_mask_inverted, GENERIC),
    ("qk_norm_scores", qkb_queries_only, "only the queries were normalised"),
    ("qk_norm_scores", qkb_whole_vector, "over all heads together"),
    ("qk_norm_scores", qkb_no_scale, "the scores are not scaled"),
    ("qk_norm_scores", qkb_weights, "softmax of the scores"),
    ("qk_norm_scores", qkb_layer_norm, "you used LayerNorm"),
    ("qk_norm_scores", qkb_k_times_q, "transposed"),
    ("qk_norm_scores", qkb_l2, GENERIC),
    ("qk_norm_scores", qkb_eps_outside, "eps is added outside the square root"),
    ("pre_norm_block", pbb_heads_by_view, "the heads were split by reading"),
    ("pre_norm_block", pbb_merge_by_reshape, "the heads were merged by reading"),
    ("qk_norm_scores", qkb_torch_default_eps, "machine epsilon"),
    ("largest_qk_score", lqb_layers_for_dim, GENERIC),
    ("largest_qk_score", lqb_norms, GENERIC),
    ("largest_qk_score", lqb_max_of_each, "the largest |q gain| by the largest |k gain|"),
    ("largest_qk_score", lqb_signed_max, "the largest *signed* product"),
    ("largest_qk_score", lqb_sum, "the mean of the products"),
    ("largest_qk_score", lqb_squared, GENERIC),
]
