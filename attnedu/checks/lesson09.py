"""Checks for the exercises of lesson 09 (the Transformer block).

Vectors are rows and weights multiply on the right (``x @ W``), as in the lesson. The references are the package's own
(``attnedu.block_parts.group_rms_norm``, ``clamped_swiglu``, ``qk_norm_scores``, ``qk_score_bound`` and
``attnedu.blocks.pre_norm_block``). Exercises 1 and 2 are transfers, not the lesson's formulas retyped: RMSNorm within
groups of consecutive features (Mamba-2's grouped norm; one library call does not do it) and gpt-oss's gated layer
(interleaved columns, clamps, Swish with a slope, the linear part shifted by 1); exercise 3's block takes grouped-query
attention. Batch, length and widths differ from each other so that a reduction over the wrong axis shows.
``group_rms_norm`` has padded test cases, whose padding positions hold zero vectors (nn.Embedding's padding_idx): there
a group is 0 / sqrt(eps), so forgetting eps gives NaN exactly there; the cases where eps matters elsewhere (eps 0.01 and
0.1, inputs of size 0.001) are padded ones too, so that each kind of test case shows a mistake of its own, and the
eps-sensitive case comes first, so that a wrong value is seen before a NaN gradient the same mistake makes at padding.
The block and the QK-norm scores each have a case whose inputs are of size 0.001, where the mean of squares is about
eps: there eps outside the square root, another eps or none at all change the output. The feed-forward layer, the causal
block and the QK-norm scores act position by position or under a causal mask, so padding at the end of a sentence
changes nothing in them: they have neither padded nor unpadded cases. The known-wrong variants include an off-by-one in
both directions: a group's mean over one feature too many and too few; the Swish one step early (on the input) and one
step late (on the product); the causal diagonal shifted down (no query sees itself) and up (each sees the next one).
Every function a model is trained through is checked with ``gradients``: the gradients that flow back to its inputs must
equal the reference's. The learner's functions may not run anything from ``attnedu.block_parts`` or ``attnedu.blocks``
(``forbidden``): the exercises ask for their own code. Exercise 5 begins with a graded prediction,
``largest_score_prediction``: the largest score at head_dim 64 for three sets of gains, measured with the course's
``qk_norm_scores`` once the learner has predicted.
"""

from __future__ import annotations

import math

import torch

from ..block_parts import clamped_swiglu, group_rms_norm, qk_norm_scores, qk_score_bound, swiglu
from ..blocks import pre_norm_block
from ..masks import padding_mask
from .exercise import LARGE, ONE, PADDED, UNPADDED, Case, Exercise, Layout, Part, Variant, generator, kinds, randn
from .prediction import prediction_exercise

LESSON = "09_transformer_block"
# the exercises ask for the learner's own code: the package's earns nothing
OWN_CODE = ("attnedu.block_parts", "attnedu.blocks")
EPS = 1e-6  # the eps of the block and the QK-norm exercises

# --------------------------------------------------------------------------------------------
# group_rms_norm: RMSNorm within groups of features (a transfer: the lesson normalised whole vectors)
# --------------------------------------------------------------------------------------------


def _group_cases() -> list[Case]:
    g = generator(90)

    def case(shape, groups, eps, tags, lengths=None, scale=1.0, note=""):
        batch, seq_len, d_model = shape
        x = scale * randn(g, *shape)
        padded = ""
        if lengths is not None:  # the padding token's embedding is zeros
            x = x * padding_mask(torch.tensor(lengths), seq_len)[:, :, None]
            padded = f", lengths {lengths}, zero vectors at padding"
        weight = 0.5 + torch.rand(d_model, generator=g)
        description = f"batch {batch}, seq_len {seq_len}, d_model {d_model}, groups {groups}, eps {eps:g}{padded}"
        return Case(description + (f"; {note}" if note else ""), (x, weight, groups, eps), tags)

    return [
        case((3, 5, 8), 2, 1e-2, kinds(PADDED), lengths=[5, 2, 3]),
        case((2, 4, 12), 3, 1e-6, kinds(UNPADDED)),
        case((1, 3, 16), 4, 1e-6, kinds(ONE, UNPADDED)),
        case((1, 6, 8), 1, 0.1, kinds(ONE, PADDED), lengths=[4], note="one group (the lesson's RMSNorm), a large eps"),
        case(
            (4, 3, 12),
            12,
            1e-6,
            kinds(PADDED),
            lengths=[3, 1, 2, 3],
            scale=1e-3,
            note="one feature per group, inputs of size 0.001",
        ),  # fmt: skip
        case((5, 2, 12), 6, 1e-6, kinds(UNPADDED), note="more sentences than positions"),
        case(
            (2, 6, 64),
            8,
            1e-5,
            kinds(LARGE, PADDED),
            lengths=[6, 4],
            scale=1000.0,
            note="values around ±1000, as the outlier features of large models",
        ),  # fmt: skip
    ]


def _grms(x, weight, groups, eps, *, order="consecutive", over=-1, size=None, eps_outside=False, root=True,
          square=True, centre=False, gain="after"):  # fmt: skip
    """A variant of the grouped RMSNorm. ``order``: "consecutive" groups, "strided" (feature i in group i % groups)
    or "sized" (groups of ``groups`` features); ``size``: the divisor of the mean (default the group's size)."""
    d_model = x.shape[-1]
    if gain == "before":
        x = x * weight
    if order == "strided":
        grouped = x.unflatten(-1, (d_model // groups, groups)).transpose(-1, -2)
    elif order == "sized":
        grouped = x.unflatten(-1, (d_model // groups, groups))
    else:
        grouped = x.unflatten(-1, (groups, d_model // groups))
    if centre:
        grouped = grouped - grouped.mean(dim=-1, keepdim=True)
    powered = grouped.pow(2) if square else grouped
    if size is None:
        ms = powered.mean(dim=over, keepdim=True)
    else:
        ms = powered.sum(dim=-1, keepdim=True) / size(grouped.shape[-1])
    scale = ms.sqrt() + eps if eps_outside else ((ms + eps).sqrt() if root else ms + eps)
    normed = grouped / scale
    if order == "strided":
        normed = normed.transpose(-1, -2)
    normed = normed.flatten(-2)
    if gain == "first_group":  # the first group's gains, reused for every group
        return (normed.unflatten(-1, (groups, d_model // groups)) * weight[: d_model // groups]).flatten(-2)
    return {"after": normed * weight, "before": normed, "none": normed, "plus": normed + weight}[gain]


def _group_variant(diagnosis: str, **changes) -> Variant:
    return Variant.with_changes(_grms, diagnosis, **changes)


def _group_layout(args: tuple) -> tuple[Layout]:
    x = args[0]
    real = x.abs().sum(dim=-1) > 0
    return (Layout(positions=1, real=real, words=("real tokens", "padding positions")),)


GROUP_RMS_NORM = Exercise(
    name="group_rms_norm",
    lesson=LESSON,
    params=("x", "weight", "groups", "eps"),
    returns=(("batch", "seq_len", "d_model"),),
    reference=group_rms_norm,
    make_cases=_group_cases,
    layout=_group_layout,
    variants=(
        _group_variant(
            "each position's whole vector was normalised at once, as the lesson's RMSNorm does: one group. Here each "
            "of the `groups` groups of consecutive features is divided by its own root mean square. It shows "
            "wherever groups is more than 1.",
            order="consecutive",
            over=(-2, -1),  # fmt: skip
        ),
        _group_variant(
            "the groups are interleaved: feature i went into group i % groups (the features read as (group_size, "
            "groups)). A group is a run of d_model // groups *consecutive* features: features 0 .. s-1 form the "
            "first, s .. 2s-1 the second.",
            order="strided",
        ),
        _group_variant(
            "the features were cut into groups of `groups` features each (d_model // groups of them), not into "
            "`groups` groups: the two sizes are swapped. There are `groups` groups, each of d_model // groups "
            "consecutive features.",
            order="sized",
        ),
        _group_variant(
            "each group's mean was subtracted first: that is GroupNorm, LayerNorm per group. RMSNorm does not "
            "centre: it divides each group by its root mean square as it is.",
            centre=True,
        ),
        _group_variant(
            "you divided by the square root of the mean, not of the mean of the *squares*: negative means give NaN, "
            "and the rest is not the root mean square.",
            square=False,
        ),
        _group_variant(
            "eps is added outside the square root, after it. RMSNorm adds it inside, to the mean of squares, which "
            "differs wherever that mean is not much larger than eps (small inputs, a large eps, a group of zeros).",
            eps_outside=True,
        ),
        Variant(
            "eps is missing: a group of zeros (at padding) gives 0 / 0 = NaN, and a large eps changes nothing in "
            "yours. It belongs inside the square root, added to the mean "
            "of squares.",
            lambda x, w, groups, eps: _grms(x, w, groups, 0.0),
        ),
        _group_variant(
            "the square root is missing: you divided by the mean square (plus eps), not by its root.",
            root=False,
        ),
        _group_variant(
            "the mean of squares was taken over the groups (one axis too low) instead of within each group: each "
            "feature was divided by a number pooled from the same feature place of every group.",
            over=-2,
        ),
        _group_variant(
            "off by one: the mean of squares divides each group's sum by its size minus 1. The mean divides by the "
            "number of features in the group, d_model // groups.",
            size=lambda s: s - 1,
        ),
        _group_variant(
            "off by one: the mean of squares divides each group's sum by its size plus 1. The mean divides by the "
            "number of features in the group, d_model // groups.",
            size=lambda s: s + 1,
        ),
        Variant(
            "each group was divided by the root of the *sum* of its squares (its length, an L2 norm), not of their "
            "mean: that is sqrt(d_model // groups) times the group's root mean square, so every output is that many "
            "times too small wherever eps is small next to the mean square (with one feature per group the two "
            "agree). RMSNorm divides by the root of the mean of the squares, whatever the group's size.",
            lambda x, w, groups, eps: _grms(x, w, groups, eps, size=lambda s: 1),
            lambda x, w, groups, eps: _grms(x, w, groups, eps, size=lambda s: 1, eps_outside=True),
        ),
        _group_variant(
            "the gain was applied before the normalisation (x times weight, then normalised), so it mostly cancels "
            "out. The gain multiplies the normalised groups, feature by feature, last.",
            gain="before",
        ),
        _group_variant(
            "the gain `weight` is missing: multiply the normalised vector by it, feature by feature.", gain="none"
        ),  # fmt: skip
        _group_variant(
            "the gain `weight` was added, not multiplied: it scales each feature, and there is no shift.", gain="plus"
        ),  # fmt: skip
        _group_variant(
            "every group was multiplied by the same d_model // groups gains, the first group's (the first entries of "
            "`weight`): the gain has one entry per feature of the whole vector, d_model of them, and feature i of "
            "group j is multiplied by the gain of its place in the whole vector. It shows wherever groups is more "
            "than 1.",
            gain="first_group",
        ),
    ),
    hint=(
        "Give the groups an axis of their own first: which shape of x lets you take a mean over one group's "
        "features, and only those? And which features belong to group 0?",
        "(..., d_model) -> (..., groups, d_model // groups), consecutive features together (group j holds features "
        "j s .. (j+1) s - 1, s = d_model // groups); the mean of squares over the last axis, kept as a size-1 axis, "
        "plus eps inside the square root; divide; back to (..., d_model); then multiply feature i by weight[i].",
        "`g = x.unflatten(-1, (groups, x.shape[-1] // groups))`; `g = g / torch.sqrt(g.pow(2).mean(-1, keepdim=True) "
        "+ eps)`; `return g.flatten(-2) * weight`.",
    ),
    gradients=True,  # a norm is trained through: gradients must flow through it
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# clamped_swiglu: gpt-oss's gated layer (a transfer: the lesson's SwiGLU with another gate and another layout)
# --------------------------------------------------------------------------------------------


def _clamped_cases() -> list[Case]:
    g = generator(91)

    def case(batch, seq_len, d_model, d_ff, alpha, limit, tags, scale=1.0, note=""):
        x = scale * randn(g, batch, seq_len, d_model)
        W_in = randn(g, d_model, 2 * d_ff) / math.sqrt(d_model)
        W_down = randn(g, d_ff, d_model) / math.sqrt(d_ff)
        description = (
            f"batch {batch}, seq_len {seq_len}, d_model {d_model}, d_ff {d_ff}, alpha {alpha:g}, limit {limit:g}"
        )
        return Case(description + (f"; {note}" if note else ""), (x, W_in, W_down, alpha, limit), tags)

    return [
        case(2, 5, 8, 12, 1.702, 7.0, kinds(), scale=4.0, note="inputs around ±4, some pre-activations past ±7"),
        case(1, 4, 6, 16, 1.702, 7.0, kinds(ONE), scale=6.0, note="inputs around ±6"),
        case(3, 2, 10, 10, 1.702, 1.5, kinds(), note="d_ff = d_model, a small limit: much is clamped"),
        case(4, 3, 4, 20, 1.0, 2.0, kinds(), note="alpha 1 (the gate is SiLU), more sentences than positions"),
        case(1, 7, 12, 8, 1.702, 7.0, kinds(ONE), scale=0.5, note="d_ff smaller than d_model, small inputs"),
        case(
            2, 3, 8, 16, 1.702, 7.0, kinds(LARGE), scale=60.0, note="inputs around ±60, pre-activations in the hundreds"
        ),
    ]


def _oss(x, W_in, W_down, alpha, limit, *, layout="interleaved", swap=False, slope="inside", gate_clamp="max",
         linear_clamp="both", shift="linear", gate_act="swish", act_at="gate"):  # fmt: skip
    """A known-wrong version of gpt-oss's gated layer, one choice changed. ``act_at``: where the Swish goes, on the
    gate (right), one step early (on x, before W_in) or one step late (on the product)."""

    def swish(z):
        return z * torch.sigmoid(alpha * z)

    if act_at == "input":
        x = swish(x)
    both = x @ W_in
    if layout == "halves":
        gate, linear = both.chunk(2, dim=-1)
    else:
        gate, linear = both[..., 0::2], both[..., 1::2]
    if swap:
        gate, linear = linear, gate
    if gate_clamp == "max":
        gate = gate.clamp(max=limit)
    elif gate_clamp == "both":
        gate = gate.clamp(-limit, limit)
    elif gate_clamp == "min":
        gate = gate.clamp(min=-limit)
    if linear_clamp == "both":
        linear = linear.clamp(-limit, limit)
    elif linear_clamp == "max":
        linear = linear.clamp(max=limit)
    if act_at != "gate":
        activated = gate
    elif gate_act == "gelu":
        activated = torch.nn.functional.gelu(gate)
    elif gate_act == "gelu_tanh":
        activated = torch.nn.functional.gelu(gate, approximate="tanh")
    elif gate_act == "sigmoid":
        activated = torch.sigmoid(alpha * gate)
    elif slope == "inside":
        activated = gate * torch.sigmoid(alpha * gate)
    elif slope == "outside":
        activated = alpha * gate * torch.sigmoid(gate)
    else:  # no slope: SiLU
        activated = gate * torch.sigmoid(gate)
    if shift == "linear":
        hidden = activated * (linear + 1)
    elif shift == "gate":
        hidden = (activated + 1) * linear
    else:
        hidden = activated * linear
    if act_at == "product":
        hidden = swish(hidden)
    return hidden @ W_down


def _oss_variant(diagnosis: str, **changes) -> Variant:
    return Variant.with_changes(_oss, diagnosis, **changes)


CLAMPED_SWIGLU = Exercise(
    name="clamped_swiglu",
    lesson=LESSON,
    params=("x", "W_in", "W_down", "alpha", "limit"),
    returns=(("batch", "seq_len", "d_model"),),
    reference=clamped_swiglu,
    make_cases=_clamped_cases,
    variants=(
        _oss_variant(
            "the columns of x @ W_in were split into two halves (the first d_ff the gate, the last d_ff the linear "
            "part), as in a layer that stores W_gate and W_up side by side. gpt-oss stores them interleaved: the "
            "even columns (0, 2, 4, ...) are the gate, the odd ones the linear part.",
            layout="halves",
        ),
        _oss_variant(
            "the gate and the linear part are swapped: the odd columns went through the activation. The even "
            "columns are the gate, the odd ones the linear part, which is clamped and shifted but not activated.",
            swap=True,
        ),
        _oss_variant(
            "the slope alpha is missing: your gate is SiLU, z * sigmoid(z). gpt-oss's is Swish with slope alpha, "
            "z * sigmoid(alpha z) (alpha = 1.702 makes it the sigmoid approximation of GELU). It shows wherever "
            "alpha is not 1.",
            slope="none",
        ),
        _oss_variant(
            "alpha multiplies the whole activation, alpha * z * sigmoid(z). The slope goes inside the sigmoid: "
            "z * sigmoid(alpha z).",
            slope="outside",
        ),
        _oss_variant(
            "the gate went through a sigmoid alone, without the factor z: that is the original GLU's gate. gpt-oss's "
            "gate is Swish, z * sigmoid(alpha z).",
            gate_act="sigmoid",
        ),
        Variant(
            "the gate went through GELU. Swish with slope 1.702, z * sigmoid(1.702 z), is an approximation of GELU, "
            "close but not equal, and gpt-oss uses the approximation itself, with the slope it is given (alpha).",
            lambda x, W_in, W_down, alpha, limit: _oss(x, W_in, W_down, alpha, limit, gate_act="gelu"),
            lambda x, W_in, W_down, alpha, limit: _oss(x, W_in, W_down, alpha, limit, gate_act="gelu_tanh"),
        ),
        _oss_variant(
            "the 1 is missing: the linear part multiplies the gate as it is. gpt-oss adds 1 to the (clamped) linear "
            "part, so the layer starts near the gate's own output rather than near 0.",
            shift="none",
        ),
        _oss_variant(
            "the 1 was added to the activated gate instead of to the linear part. The gate stays z * sigmoid(alpha z); "
            "the linear part, once clamped, gets the + 1.",
            shift="gate",
        ),
        _oss_variant(
            "the linear part is not clamped: it is clamped to [-limit, limit] before the + 1, so very large "
            "pre-activations cannot blow the product up.",
            linear_clamp="none",
        ),
        _oss_variant(
            "the linear part is clamped from above only. It is clamped from both sides, to [-limit, limit]: unlike "
            "the gate's activation, (u + 1) has no lower bound of its own.",
            linear_clamp="max",
        ),
        _oss_variant(
            "the gate is not clamped: clamp it from above at limit before the activation.",
            gate_clamp="none",
        ),
        _oss_variant(
            "the gate is clamped from both sides, to [-limit, limit]; it is clamped from above only. Below -limit the "
            "clamp changes the gate's values, and no gradient flows back through it there. The gate's activation has "
            "a lower bound of its own (the exercise's puzzle), so it needs no clamp from below.",
            gate_clamp="both",
        ),
        _oss_variant(
            "the gate is clamped from below, at -limit; it is clamped from above, at limit, before the activation.",
            gate_clamp="min",
        ),
        _oss_variant(
            "the two clamps are swapped: the gate got the linear part's clamp, to [-limit, limit], and the linear part "
            "the gate's, from above only. The gate is clamped from above at limit; the linear part from both sides.",
            gate_clamp="both",
            linear_clamp="max",
        ),
        _oss_variant(
            "the Swish came one step late: on the product of the gate and the linear part. It belongs on the "
            "(clamped) gate alone, before the product.",
            act_at="product",
        ),
        _oss_variant(
            "the Swish came one step early: on x, before the projection by W_in. It belongs on the gate, the even "
            "columns of x @ W_in, once clamped.",
            act_at="input",
        ),
        _oss_variant(
            "nothing is clamped: the gate is clamped from above at limit, and the linear part to [-limit, limit], "
            "before anything else.",
            gate_clamp="none",
            linear_clamp="none",  # fmt: skip
        ),
    ),
    hint=(
        "Three things differ from the lesson's SwiGLU: where the gate and the linear part sit in x @ W_in, what "
        "each is clamped to, and what the gate's activation and the linear part become. Take them in that order.",
        "both = x @ W_in, (..., 2 d_ff); gate = its even columns (0, 2, 4, ...), clamped from above at limit; "
        "linear = its odd columns, clamped to [-limit, limit]; hidden = gate * sigmoid(alpha * gate) * (linear + 1), "
        "(..., d_ff); then multiply by W_down.",
        "`both = x @ W_in`; `gate = both[..., 0::2].clamp(max=limit)`; `linear = both[..., 1::2].clamp(-limit, "
        "limit)`; `return (gate * torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down`.",
    ),
    gradients=True,  # a feed-forward layer is trained through: gradients must flow through it
    forbidden=OWN_CODE,
    gradient_nan_note=(
        "This layer has no mask and divides by nothing, so the usual cause here is an exp written out by hand: a "
        "sigmoid computed as 1 / (1 + exp(-alpha * g)) overflows to inf when the gate g is very negative (in float32, "
        "exp(x) is inf above about 88, so g below about -52 with alpha 1.702), and the value still comes out finite "
        "while the gradient through it is inf / inf, NaN. torch's own sigmoid and silu are stable there."
    ),
)


# --------------------------------------------------------------------------------------------
# pre_norm_block
# --------------------------------------------------------------------------------------------


def _block_cases() -> list[Case]:
    g = generator(92)

    def case(batch, seq_len, d_model, num_heads, d_ff, tags, scale=1.0, gain=1.0, kv_heads=None, note=""):
        x = scale * randn(g, batch, seq_len, d_model)
        norm_a, norm_f = gain * (0.5 + torch.rand(d_model, generator=g)), 0.5 + torch.rand(d_model, generator=g)
        kv_dim = d_model if kv_heads is None else kv_heads * (d_model // num_heads)
        W_q, W_o = (randn(g, d_model, d_model) / math.sqrt(d_model) for _ in range(2))
        W_k, W_v = (randn(g, d_model, kv_dim) / math.sqrt(d_model) for _ in range(2))
        W_gate, W_up = randn(g, d_model, d_ff) / math.sqrt(d_model), randn(g, d_model, d_ff) / math.sqrt(d_model)
        W_down = randn(g, d_ff, d_model) / math.sqrt(d_ff)
        args = (x, norm_a, W_q, W_k, W_v, W_o, norm_f, W_gate, W_up, W_down, num_heads)
        description = f"batch {batch}, seq_len {seq_len}, d_model {d_model}, num_heads {num_heads}, d_ff {d_ff}"
        if kv_heads is not None:
            description += f", {kv_heads} key/value head{'s' if kv_heads > 1 else ''} (W_k, W_v {tuple(W_k.shape)})"
        return Case(description + (f"; {note}" if note else ""), args, tags)

    return [
        case(2, 5, 8, 2, 12, kinds()),
        case(1, 4, 12, 3, 16, kinds(ONE)),
        case(3, 6, 8, 4, 8, kinds(), note="d_ff = d_model"),
        case(4, 3, 6, 1, 10, kinds(), note="one head, more sentences than positions"),
        case(1, 1, 8, 2, 12, kinds(ONE), note="a single position"),
        case(2, 5, 8, 4, 12, kinds(), kv_heads=2, note="grouped-query: each key/value head serves 2 query heads"),
        case(1, 6, 12, 6, 16, kinds(ONE), kv_heads=1, note="multi-query: one key/value head for all 6 query heads"),
        case(2, 5, 8, 2, 12, kinds(), scale=1e-3, note="a stream of size 0.001, whose mean square is about eps"),
        case(
            2,
            4,
            8,
            2,
            16,
            kinds(LARGE),
            scale=1000.0,
            gain=3.0,
            note="a stream around ±1000, attention norm gains around 3",
        ),  # fmt: skip
    ]


def _block_with(
    x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads, *, arrangement="pre", causal=0, scale="head_dim",
    attention_input="normed", ffn_input="normed", gains="right", final_norm=False, transpose=False, swap_ffn=False,
    split="right", merge="right", kv_order="grouped", norm="rms", eps=EPS, eps_outside=False,
):  # fmt: skip
    """A known-wrong pre-norm block, one choice changed. ``causal``: the diagonal's offset (0: keys up to the query);
    ``kv_order``: which key/value head query head h reads, "grouped" (h // group) or "interleaved" (h % kv heads);
    ``norm``: "rms" or "layer" (LayerNorm with the gain and no shift), with ``eps`` inside the square root or outside
    it."""
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads

    def block_norm(t, g):  # the block's norm, in the variant's form
        if norm == "layer":
            return torch.nn.functional.layer_norm(t, (d_model,), g, eps=eps)
        return _rms(t, g, eps, eps_outside=eps_outside)

    if gains == "swapped":
        g_a, g_f = g_f, g_a
    if transpose:
        W_q, W_k, W_v, W_o = W_q.T, W_k.T, W_v.T, W_o.T

    def heads(t, count):  # (batch, seq_len, count * head_dim) -> (batch, count, seq_len, head_dim)
        if split == "heads_first":  # the matrix read straight as (batch, count, seq_len, head_dim)
            return t.reshape(batch, count, seq_len, head_dim)
        return t.view(batch, seq_len, count, head_dim).transpose(1, 2)

    def attention(h):
        kv_heads = W_k.shape[1] // head_dim
        q, k, v = heads(h @ W_q, num_heads), heads(h @ W_k, kv_heads), heads(h @ W_v, kv_heads)
        group = num_heads // kv_heads
        if kv_order == "grouped":
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        else:
            k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
        divisor = {"head_dim": math.sqrt(head_dim), "d_model": math.sqrt(d_model), "none": 1.0}[scale]
        scores = q @ k.transpose(-2, -1) / divisor
        if causal is not None:
            allowed = torch.ones(seq_len, seq_len, dtype=torch.bool).tril(causal)
            scores = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        out = weights @ v  # (batch, num_heads, seq_len, head_dim)
        if merge == "no_transpose":  # read straight as (batch, seq_len, d_model)
            return out.reshape(batch, seq_len, d_model) @ W_o
        return out.transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o

    def ffn(h):
        gate, up = (W_up, W_gate) if swap_ffn else (W_gate, W_up)
        return swiglu(h, gate, up, W_down)

    if arrangement == "post":  # the 2017 arrangement with RMSNorm: normalise after the residual
        x = block_norm(x + attention(x), g_a)
        return block_norm(x + ffn(x), g_f)
    if arrangement == "parallel":  # GPT-J: both sublayers read the stream as it came in
        return x + attention(block_norm(x, g_a)) + ffn(block_norm(x, g_f))
    start = x
    h = block_norm(x, g_a)
    a = attention(h if attention_input == "normed" else x)
    if arrangement == "from_normed":
        x = h + a
    elif arrangement in ("no_residual", "no_attention_residual"):
        x = a
    else:
        x = x + a
    h = block_norm(x, g_f)
    f = ffn(h if ffn_input == "normed" else x)
    if arrangement == "from_normed":
        out = h + f
    elif arrangement in ("no_residual", "no_ffn_residual"):
        out = f
    elif arrangement == "attention_dropped":  # the feed-forward layer's output added to the stream as it came in
        out = start + f
    else:
        out = x + f
    return block_norm(out, g_f) if final_norm else out


def _block_variant(diagnosis: str, **changes) -> Variant:
    return Variant.with_changes(_block_with, diagnosis, **changes)


def _block_layout(args: tuple) -> tuple[Layout]:
    return (Layout(positions=1),)


_SHOWS_WITH_HEADS = "It shows with more than one head and more than one position."

PRE_NORM_BLOCK = Exercise(
    name="pre_norm_block",
    lesson=LESSON,
    params=("x", "attention_norm", "W_q", "W_k", "W_v", "W_o", "ffn_norm", "W_gate", "W_up", "W_down", "num_heads"),
    returns=(("batch", "seq_len", "d_model"),),
    reference=lambda *args: pre_norm_block(*args, eps=EPS),
    make_cases=_block_cases,
    layout=_block_layout,
    variants=(
        _block_variant(
            "the norms come after the residual additions (each sublayer's input and output summed, then "
            "normalised): that is the 2017 post-norm arrangement. In the pre-norm block each sublayer reads a "
            "normalised copy and its output is added to the untouched stream, which is never normalised itself.",
            arrangement="post",
        ),
        _block_variant(
            "the residual was added to the normalised input, the norm's output plus the sublayer's: the stream "
            "itself got normalised. The sublayer's output is added to the stream as it was before the norm.",
            arrangement="from_normed",
        ),
        _block_variant(
            "the residual connections are missing: each sublayer's output replaced the stream. Each sublayer's "
            "output is added to the stream, first the attention's, then the feed-forward layer's.",
            arrangement="no_residual",
        ),
        _block_variant(
            "the feed-forward layer's residual connection is missing: the block returns the feed-forward layer's "
            "output alone. Its output is added to the stream, as the attention's was.",
            arrangement="no_ffn_residual",
        ),
        _block_variant(
            "the attention's residual connection is missing: the stream became the attention's output, and the "
            "feed-forward layer's output was added to that. The attention's output is added to the stream.",
            arrangement="no_attention_residual",
        ),
        _block_variant(
            "the feed-forward layer read the stream as it came into the block, before the attention's output was "
            "added: the two sublayers ran side by side on the same input (the parallel block of GPT-J and PaLM). In "
            "the block asked for they run one after the other: the feed-forward layer reads the stream after the "
            "attention's output has been added to it.",
            arrangement="parallel",
        ),
        _block_variant(
            "the attention's output is missing from what the block returns: the feed-forward layer read the stream "
            "with it, but its own output was added to the stream as it came into the block. The block returns the "
            "stream with both outputs added.",
            arrangement="attention_dropped",
        ),
        _block_variant(
            "eps is added outside the square root, after it. RMSNorm adds it inside, to the mean of squares, which "
            "differs wherever that mean is not much larger than eps: here the stream of size 0.001.",
            eps_outside=True,
        ),
        _block_variant(
            "eps is 1e-5 (Llama 2's value), not the 1e-6 asked for: the two differ only where the stream's mean of "
            "squares is small, as for the stream of size 0.001.",
            eps=1e-5,
        ),
        _block_variant(
            "eps is float32's machine epsilon, about 1.2e-7 (what torch's own rms_norm uses when it is given no "
            "eps), not the 1e-6 asked for: the two differ only where the stream's mean of squares is small, as for "
            "the stream of size 0.001.",
            eps=torch.finfo(torch.float32).eps,
        ),
        _block_variant(
            "eps is missing from the norms: it belongs inside the square root, added to the mean of squares, and it "
            "matters where that mean is small, as for the stream of size 0.001.",
            eps=0.0,
        ),
        _block_variant(
            "the norms are LayerNorm: each vector's mean was subtracted first. The block's norms are RMSNorm, which "
            "divides by the root mean square of the vector as it is, nothing subtracted.",
            norm="layer",
        ),
        _block_variant(
            "the attention read x, not its normalised copy: the first norm is missing, so the attention sees the "
            "stream at its raw scale. The attention reads the stream normalised with `attention_norm`.",
            attention_input="raw",
        ),
        _block_variant(
            "the feed-forward layer read x, not its normalised copy: the second norm is missing, so the SwiGLU layer "
            "sees the stream at its raw scale. It reads the stream normalised with `ffn_norm`.",
            ffn_input="raw",
        ),
        _block_variant(
            "the two norms' gains are swapped: `attention_norm` belongs in front of the attention and `ffn_norm` in "
            "front of the feed-forward layer.",
            gains="swapped",
        ),
        _block_variant(
            "the block's output was normalised once more at the end. A pre-norm block returns the stream as it is "
            "(the model's one final norm comes after the last block).",
            final_norm=True,
        ),
        _block_variant(
            "the causal mask is missing: every position attends to later ones, so every position but the last reads "
            "its future. A position may attend only to itself and the positions before it.",
            causal=None,
        ),
        _block_variant(
            "off by one: the causal mask also hides the diagonal, so no position may attend to itself (and the "
            "first one to nothing). Position i attends to positions 0..i, itself included.",
            causal=-1,
        ),
        _block_variant(
            "off by one: the causal mask lets each position see the next one too. Position i attends to positions "
            "0..i, none after it.",
            causal=1,
        ),
        _block_variant(
            "the scores are divided by sqrt(d_model); each head's dot products have head_dim = d_model // num_heads "
            "terms, so divide by sqrt(head_dim).",
            scale="d_model",
        ),
        _block_variant(
            "the scores are not scaled: divide them by sqrt(head_dim) before the softmax.",
            scale="none",
        ),
        _block_variant(
            "the projections use the transposed matrices (nn.Linear's convention, which stores W transposed). Here "
            "vectors are rows and the weights multiply on the right as they are given, as in the lesson.",
            transpose=True,
        ),
        _block_variant(
            "in the feed-forward layer the gate and the up projection are swapped: SiLU went on the up projection; "
            "it belongs on the gate projection, `W_gate`.",
            swap_ffn=True,
        ),
        _block_variant(
            "the heads were split by reading each (seq_len, d_model) matrix straight as (num_heads, seq_len, "
            "head_dim), and merged back by reading (num_heads, seq_len, head_dim) straight as (seq_len, d_model). "
            "The merge undoes the split's memory order, so the output has the right shape, but in between each "
            "'head' held pieces of several positions and attended over those pieces. Splitting cuts each position's "
            "d_model features into num_heads groups of head_dim consecutive features, (batch, seq_len, num_heads, "
            "head_dim), and only then moves the heads in front of the positions; merging moves them back behind "
            f"the positions before joining each position's heads side by side. {_SHOWS_WITH_HEADS}",
            split="heads_first",
            merge="no_transpose",  # fmt: skip
        ),
        _block_variant(
            "the heads were split by reading each (seq_len, d_model) matrix straight as (num_heads, seq_len, "
            "head_dim): that cuts the memory in the wrong order, so a 'head' holds pieces of several positions. "
            "Splitting cuts each position's d_model features into num_heads groups of head_dim consecutive "
            "features, giving (batch, seq_len, num_heads, head_dim); only then do the heads move in front of the "
            f"positions. (Your merge is right.) {_SHOWS_WITH_HEADS}",
            split="heads_first",
        ),
        _block_variant(
            "the heads were merged by reading (batch, num_heads, seq_len, head_dim) straight as (batch, seq_len, "
            "d_model), without moving the heads back behind the positions first: each output row then holds "
            "pieces of several positions' results. Merging undoes the split: heads back behind the positions, "
            f"then each position's num_heads results of head_dim side by side. (Your split is right.) "
            f"{_SHOWS_WITH_HEADS}",
            merge="no_transpose",
        ),
        _block_variant(
            "with fewer key/value heads than query heads, query head h read key/value head h % num_kv_heads: the "
            "groups are interleaved. Each key/value head serves a group of num_heads // num_kv_heads *consecutive* "
            "query heads: query head h reads key/value head h // (num_heads // num_kv_heads). It shows where there "
            "are at least two key/value heads, each shared.",
            kv_order="interleaved",
        ),
    ),
    hint=(
        "Check two places in turn. The residual steps: what does each sublayer read (x or its normalised copy), and "
        "what is its output added to? And the heads: how does d_model become num_heads heads of head_dim, which axis "
        "holds them, and how do they come back?",
        "h = RMSNorm(x; attention_norm); x = x + W_o(merged heads of causal attention over h @ W_q, h @ W_k, "
        "h @ W_v, scores / sqrt(head_dim)); then h = RMSNorm(x; ffn_norm) and x = x + SwiGLU(h). eps = 1e-6 in both "
        "norms; nothing is normalised after the additions. Split: (batch, seq_len, d_model) -> (batch, seq_len, "
        "num_heads, head_dim) -> heads in front of positions, (batch, num_heads, seq_len, head_dim); keys and values "
        "the same with num_kv_heads = W_k's columns // head_dim, each of their heads repeated for its group of "
        "consecutive query heads. Merge: the same steps backwards, heads behind positions again before the reshape "
        "to d_model.",
        "`h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * attention_norm`; `split = lambda t: "
        "t.view(batch, seq_len, -1, head_dim).transpose(1, 2)`; `heads = F.scaled_dot_product_attention(split(h @ "
        "W_q), split(h @ W_k), split(h @ W_v), is_causal=True, enable_gqa=True)`; `x = x + heads.transpose(1, "
        "2).reshape(batch, seq_len, d_model) @ W_o`; then the same norm with ffn_norm and `x + (F.silu(h @ W_gate) * "
        "(h @ W_up)) @ W_down`.",
    ),
    gradients=True,  # the block is trained through: gradients must flow back to x and every weight
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# qk_norm_scores: RMSNorm where the lesson did not put it, on each head's queries and keys
# --------------------------------------------------------------------------------------------


def _qk_cases() -> list[Case]:
    g = generator(93)

    def case(batch, heads, query_len, key_len, head_dim, tags, scale=1.0, note=""):
        q = scale * randn(g, batch, heads, query_len, head_dim)
        k = scale * randn(g, batch, heads, key_len, head_dim)
        q_weight, k_weight = 0.5 + torch.rand(head_dim, generator=g), 0.5 + torch.rand(head_dim, generator=g)
        description = f"batch {batch}, heads {heads}, query_len {query_len}, key_len {key_len}, head_dim {head_dim}"
        return Case(description + (f"; {note}" if note else ""), (q, k, q_weight, k_weight), tags)

    return [
        case(2, 3, 4, 5, 8, kinds()),
        case(1, 2, 3, 3, 6, kinds(ONE), note="self-attention"),
        case(3, 2, 2, 6, 4, kinds(), note="more keys than queries"),
        case(2, 4, 5, 2, 10, kinds(), scale=1e-3, note="queries and keys of size 0.001"),
        case(1, 1, 6, 4, 12, kinds(ONE), note="one head"),
        case(
            2,
            2,
            3,
            4,
            8,
            kinds(LARGE),
            scale=1000.0,
            note="queries and keys around ±1000, where unnormalised scores would saturate the softmax",
        ),
    ]


def _rms(x, weight, eps, *, over=-1, denominator=None, eps_outside=False):
    """A variant of RMSNorm over the last axis: the mean over ``over``, dividing by ``denominator`` instead of the
    count, eps outside the square root."""
    if denominator is None:
        ms = x.pow(2).mean(dim=over, keepdim=True)
    else:
        ms = x.pow(2).sum(dim=over, keepdim=True) / denominator(x)
    scale = ms.sqrt() + eps if eps_outside else (ms + eps).sqrt()
    return x / scale * weight


def _qk_with(q, k, g_q, g_k, *, norm_q=True, norm_k=True, over=-1, denominator=None, eps_outside=False,
             divisor="sqrt", centre=False, eps=EPS):  # fmt: skip
    def norm(x, g):
        if centre:
            return torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps) * g
        return _rms(x, g, eps, over=over, denominator=denominator, eps_outside=eps_outside)

    q = norm(q, g_q) if norm_q else q
    k = norm(k, g_k) if norm_k else k
    scores = q @ k.transpose(-2, -1)
    return scores / {"sqrt": math.sqrt(q.shape[-1]), "dim": q.shape[-1], "none": 1.0}[divisor]


def _l2_scores(q, k, g_q, g_k):
    """The scores of queries and keys divided by their lengths (torch's normalize, eps 1e-12), unscaled."""
    unit_q, unit_k = (torch.nn.functional.normalize(t, dim=-1) for t in (q, k))
    return (unit_q * g_q) @ (unit_k * g_k).transpose(-2, -1)


def _qk_variant(diagnosis: str, **changes) -> Variant:
    return Variant.with_changes(_qk_with, diagnosis, **changes)


def _qk_layout(args: tuple) -> tuple[Layout]:
    return (Layout(positions=2),)


QK_NORM_SCORES = Exercise(
    name="qk_norm_scores",
    lesson=LESSON,
    params=("q", "k", "q_weight", "k_weight"),
    returns=(("batch", "heads", "query_len", "key_len"),),
    reference=lambda q, k, q_weight, k_weight: qk_norm_scores(q, k, q_weight, k_weight, EPS),
    make_cases=_qk_cases,
    layout=_qk_layout,
    variants=(
        _qk_variant("only the queries were normalised: normalise the keys too, with `k_weight`.", norm_k=False),
        _qk_variant("only the keys were normalised: normalise the queries too, with `q_weight`.", norm_q=False),
        _qk_variant(
            "each position's queries were normalised over all heads together (dims heads and head_dim: the whole "
            "d_model vector, as OLMo 2 does before splitting the heads). Here each head's vector is normalised "
            "alone, over its head_dim features (the last axis).",
            over=(1, 3),
        ),
        _qk_variant(
            "the mean of squares was taken over the positions (dim -2, one axis too low): each query and each key "
            "is normalised alone, over its head_dim features (the last axis).",
            over=-2,
        ),
        _qk_variant(
            "off by one: the mean of squares divides the sum by head_dim - 1; the mean divides by head_dim.",
            denominator=lambda x: x.shape[-1] - 1,
        ),
        _qk_variant(
            "off by one: the mean of squares divides the sum by head_dim + 1; the mean divides by head_dim.",
            denominator=lambda x: x.shape[-1] + 1,
        ),
        _qk_variant(
            "eps is added outside the square root: RMSNorm adds it inside, sqrt(mean(x ** 2) + eps), which matters "
            "for small queries and keys.",
            eps_outside=True,
        ),
        _qk_variant(
            "eps is 1e-5 (Llama 2's value), not the 1e-6 asked for: the two differ only where the mean of squares is "
            "small, as for the queries and keys of size 0.001.",
            eps=1e-5,
        ),
        _qk_variant(
            "eps is float32's machine epsilon, about 1.2e-7 (what torch's own rms_norm uses when it is given no "
            "eps), not the 1e-6 asked for: the two differ only where the mean of squares is small, as for the "
            "queries and keys of size 0.001.",
            eps=torch.finfo(torch.float32).eps,
        ),
        _qk_variant(
            "you used LayerNorm (centring each vector first); QK-norm here is RMSNorm: x / sqrt(mean(x ** 2) + eps) "
            "* weight, nothing subtracted.",
            centre=True,
        ),
        Variant(
            "each query and key was divided by its length (its l2 norm, as Henry et al.'s QK-norm does), not by its "
            "root mean square: the length is sqrt(head_dim) times the root mean square, so each of your normalised "
            "vectors is sqrt(head_dim) times too short. RMSNorm makes the root mean square 1, with eps inside the "
            "square root.",
            lambda q, k, gq, gk: _l2_scores(q, k, gq, gk) / math.sqrt(q.shape[-1]),
            _l2_scores,
        ),
        Variant(
            "eps is missing from the norms: each query and key was divided by its root mean square alone. eps (1e-6) "
            "belongs inside the square root, added to the mean of squares, and it matters where that mean is small, "
            "as for the queries and keys of size 0.001.",
            lambda q, k, gq, gk: _qk_with(q, k, gq, gk, eps=0.0),
            lambda q, k, gq, gk: _l2_scores(q, k, gq, gk) * math.sqrt(q.shape[-1]),
        ),
        _qk_variant("the scores are not scaled: divide them by sqrt(head_dim).", divisor="none"),
        _qk_variant("the scores are divided by head_dim; divide them by sqrt(head_dim).", divisor="dim"),
        Variant(
            "your output is the scores transposed, (batch, heads, key_len, query_len): keys against queries. Rows "
            "are queries and columns keys.",
            lambda q, k, gq, gk: qk_norm_scores(q, k, gq, gk, EPS).transpose(-2, -1),
        ),
        Variant(
            "your output is the softmax of the scores (attention weights). Return the scores themselves.",
            lambda q, k, gq, gk: torch.softmax(qk_norm_scores(q, k, gq, gk, EPS), dim=-1),
        ),
        _qk_variant(
            "nothing was normalised: these are the plain scaled scores of q and k. Apply RMSNorm (eps 1e-6) to "
            "each query and each key first.",
            norm_q=False,
            norm_k=False,
        ),
    ),
    hint=(
        "Normalise first, score second. Over which axis is each head's query vector normalised, and which gain goes "
        "with the queries?",
        "q_normed = RMSNorm(q; q_weight) and k_normed = RMSNorm(k; k_weight), each over head_dim (the last axis), "
        "eps 1e-6; scores = q_normed k_normed^T / sqrt(head_dim), (batch, heads, query_len, key_len).",
        "If your group_rms_norm from exercise 1 takes any leading axes, one group does it: `qn = group_rms_norm(q, "
        "q_weight, 1, 1e-6)`, `kn = group_rms_norm(k, k_weight, 1, 1e-6)`; otherwise `qn = q * torch.rsqrt(q.pow(2)"
        ".mean(-1, keepdim=True) + 1e-6) * q_weight`, and the same for k; `return qn @ kn.transpose(-2, -1) / "
        "math.sqrt(q.shape[-1])`.",
    ),
    gradients=True,  # the scores are trained through: gradients must flow back to q, k and both gains
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# largest_qk_score: predict, then compute, the largest score QK-norm allows (a prediction, not shown in the lesson)
# --------------------------------------------------------------------------------------------


def _bound_cases() -> list[Case]:
    g = generator(94)

    def case(gains_q, gains_k, tags, note=""):
        q_weight = torch.as_tensor(gains_q, dtype=torch.float32)
        k_weight = torch.as_tensor(gains_k, dtype=torch.float32)
        layers, head_dim = q_weight.shape
        description = f"{layers} layer{'s' if layers > 1 else ''}, head_dim {head_dim}"
        return Case(description + (f"; {note}" if note else ""), (q_weight, k_weight), tags)

    spread_q, spread_k = 0.5 + torch.rand(3, 8, generator=g), 0.5 + torch.rand(3, 8, generator=g)
    spread_q[0, 2], spread_k[0, 5] = 2.5, 2.5  # layer 0: the largest gains sit on different features
    spread_q[1, 4], spread_k[1, 4] = -2.0, 1.8  # layer 1: the largest product is negative
    return [
        case(spread_q, spread_k, kinds(), note="gains between 0.5 and 2.5, one of them negative"),
        case([[1.0, -3.0, 0.5, 2.0]], [[2.0, 1.0, 4.0, -1.5]], kinds(ONE), note="|g_q g_k| = 2, 3, 2, 3"),
        case(torch.ones(1, 64), torch.ones(1, 64), kinds(ONE), note="every gain 1"),
        case(randn(g, 2, 16), randn(g, 2, 16), kinds(), note="gains drawn around 0, half of them negative"),
        case(0.5 + torch.rand(4, 1, generator=g), 0.5 + torch.rand(4, 1, generator=g), kinds(), note="head_dim 1"),
        case(
            1000 * (0.5 + torch.rand(2, 32, generator=g)),
            1000 * (0.5 + torch.rand(2, 32, generator=g)),
            kinds(LARGE),
            note="gains around 1000, as after long training without weight decay on them",
        ),
    ]


def _bound_with(q_weight, k_weight, *, factor="sqrt", combine="product", magnitude=True, reduce="max", over=-1,
                broadcast=False):  # fmt: skip
    """A known-wrong bound: ``factor`` of head_dim, the gains combined and reduced another way (``broadcast``: one
    layer's number repeated for every layer)."""
    head_dim = q_weight.shape[-1]
    if combine == "maxima":
        largest = q_weight.abs().amax(over) * k_weight.abs().amax(over)
    else:
        product = q_weight * k_weight
        product = product.abs() if magnitude else product
        largest = {"max": product.amax(dim=over), "mean": product.mean(dim=over), "all": product.amax()}[reduce]
    scale = {"sqrt": math.sqrt(head_dim), "none": 1.0, "dim": float(head_dim), "inverse": 1 / math.sqrt(head_dim),
             "minus": math.sqrt(head_dim - 1), "plus": math.sqrt(head_dim + 1)}[factor]  # fmt: skip
    if broadcast:
        largest = largest.expand(q_weight.shape[:-1])
    return scale * largest


def _bound_variant(diagnosis: str, **changes) -> Variant:
    return Variant.with_changes(_bound_with, diagnosis, **changes)


LARGEST_QK_SCORE = Exercise(
    name="largest_qk_score",
    lesson=LESSON,
    params=("q_weight", "k_weight"),
    returns=(("layers",),),
    reference=qk_score_bound,
    make_cases=_bound_cases,
    units=(("layer", "layers", "layer index"),),
    variants=(
        _bound_variant(
            "the factor sqrt(head_dim) is missing. A normalised vector has a root mean square of 1, so its length is "
            "sqrt(head_dim), not 1: the dot product of two such vectors reaches head_dim, and the score divides "
            "that by sqrt(head_dim) once. It shows wherever head_dim is not 1.",
            factor="none",
        ),
        _bound_variant(
            "the bound grows with head_dim, not with its square root: the dot product of two normalised vectors "
            "reaches head_dim, but the score divides it by sqrt(head_dim).",
            factor="dim",
        ),
        _bound_variant(
            "the bound is divided by sqrt(head_dim), as if the normalised vectors had length 1. RMSNorm makes their "
            "root *mean* square 1, so their length is sqrt(head_dim).",
            factor="inverse",
        ),
        _bound_variant(
            "off by one: the factor is sqrt(head_dim - 1). A normalised vector's squares sum to head_dim.",
            factor="minus",
        ),
        _bound_variant(
            "off by one: the factor is sqrt(head_dim + 1). A normalised vector's squares sum to head_dim.",
            factor="plus",
        ),
        _bound_variant(
            "you multiplied the largest |q gain| by the largest |k gain|. The score weights feature i by the "
            "product g_q,i g_k,i of the two gains at the *same* feature, so the bound takes the largest product; "
            "the two differ where the largest gains sit on different features (layer 0 of the first case).",
            combine="maxima",
        ),
        _bound_variant(
            "you took the largest *signed* product g_q,i g_k,i, not the largest in size: a negative product is "
            "reached with a key pointing the other way, which makes the score just as large. It shows where the "
            "largest product is negative.",
            magnitude=False,
        ),
        _bound_variant(
            "you added up |g_q,i g_k,i| over the features and divided by sqrt(head_dim) (the same number as "
            "sqrt(head_dim) times their mean): that is the score when the query and the key spread their size evenly "
            "over every feature, with signs that make each product count. The largest score puts all of it on the one "
            "feature whose product is largest.",
            reduce="mean",
        ),
        _bound_variant(
            "you added up the products g_q,i g_k,i with their signs and divided by sqrt(head_dim): that is the score "
            "of a query and a key with every feature 1 (normalised already), where products of opposite signs cancel. "
            "The largest score puts all of the size on the one feature whose product is largest in size.",
            reduce="mean",
            magnitude=False,
        ),
        _bound_variant(
            "you took the mean of |g_q,i g_k,i| over the features: an average of the gains' products, with no query "
            "or key in it. A normalised query or key has length sqrt(head_dim), and the largest score puts all of it "
            "on the one feature whose product is largest.",
            reduce="mean",
            factor="none",
        ),
        _bound_variant(
            "the largest product was taken over the layers (axis 0) instead of over each layer's head_dim features "
            "(the last axis).",
            over=0,
        ),
        Variant(
            "one number for all layers: the largest product over every layer and feature at once. Each layer has "
            "its own gains and its own bound, one per row.",
            lambda q_weight, k_weight: _bound_with(q_weight, k_weight, reduce="all"),
            lambda q_weight, k_weight: _bound_with(q_weight, k_weight, reduce="all", broadcast=True),
        ),
    ),
    hint=(
        "Put all of the query's size on one feature i, and all of the key's on the same one: what does RMSNorm "
        "make of them, and what is the score? Which feature would you choose?",
        "A normalised vector has root mean square 1, so its squares sum to head_dim. The score is "
        "sum_i q_hat_i g_q,i k_hat_i g_k,i / sqrt(head_dim) <= max_i |g_q,i g_k,i| * |q_hat . k_hat| / "
        "sqrt(head_dim), and |q_hat . k_hat| <= head_dim (Cauchy-Schwarz); the one-feature vectors reach it.",
        "`return math.sqrt(q_weight.shape[-1]) * (q_weight * k_weight).abs().amax(dim=-1)`.",
    ),
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# largest_score_prediction: exercise 5's three numbers, predicted before largest_qk_score is written
# --------------------------------------------------------------------------------------------

SCORE_HEAD_DIM, SCORE_GAIN = 64, 3.0  # the question: head_dim 64, and one feature's gains grown to 3 (or -3 and 3)


def _largest_scores(q_weight: torch.Tensor, k_weight: torch.Tensor) -> tuple[float, float]:
    """The course's measurement for one pair of gains (head_dim,): (the largest |score| over the queries and keys
    tried, the largest over random ones alone). Tried: for every feature, the query and the key with all their size
    on it, both signs of the key; and 20,000 random pairs, drawn from a fixed seed. Scores by the course's
    ``qk_norm_scores`` (eps 1e-6, queries and keys of size 1000, where eps changes nothing)."""
    head_dim = q_weight.shape[0]
    one_hot = 1000.0 * torch.eye(head_dim)[None, None]  # (1, 1, head_dim, head_dim): query i has all on feature i
    both_signs = torch.cat([one_hot, -one_hot], dim=2)
    aligned = qk_norm_scores(one_hot, both_signs, q_weight, k_weight, EPS)[0, 0]  # (head_dim, 2 head_dim)
    g = generator(95)
    q, k = randn(g, 20_000, 1, 1, head_dim), randn(g, 20_000, 1, 1, head_dim)  # 20,000 pairs, one score each
    random = qk_norm_scores(q, k, q_weight, k_weight, EPS).abs().max().item()
    return max(aligned.abs().max().item(), random), random


def _score_gains() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The three questions' gains: every gain 1; then feature 0's grown to 3 and 3; then to -3 and 3."""
    ones = torch.ones(SCORE_HEAD_DIM)
    grown_q, grown_k, flipped_q = ones.clone(), ones.clone(), ones.clone()
    grown_q[0] = grown_k[0] = SCORE_GAIN
    flipped_q[0] = -SCORE_GAIN
    return [(ones, ones), (grown_q, grown_k), (flipped_q, grown_k)]


def _largest_score_prediction() -> tuple[float, float, float]:
    return tuple(_largest_scores(q_weight, k_weight)[0] for q_weight, k_weight in _score_gains())


def _largest_score_details(measured: tuple) -> str:
    random = [_largest_scores(q_weight, k_weight)[1] for q_weight, k_weight in _score_gains()]
    return (
        f"Measured with the course's qk_norm_scores, head_dim {SCORE_HEAD_DIM}: the largest |score| of a query and a "
        f"key with all their size on one feature (each feature tried, the key's sign both ways): "
        f"{', '.join(f'{m:.4g}' for m in measured)}. The largest of 20,000 random pairs comes nowhere near: "
        f"{', '.join(f'{r:.3g}' for r in random)}."
    )


_LENGTH_1 = (
    "as if a normalised vector had length 1, and the score were then divided by sqrt(64): RMSNorm makes its root mean "
    "square 1, so its length is sqrt(64)"
)
_NO_ROOT = (
    "the factor sqrt(64) is missing: a normalised vector has root mean square 1, so its length is sqrt(64), the dot "
    "product of two reaches 64 times the gains, and the score divides that by sqrt(64) once"
)
_UNDIVIDED = (
    "the dot product of two normalised vectors reaches 64 times the gains, but the score divides it by sqrt(64)"
)
_SPREAD = (
    "that is what a query and a key spread evenly over all 64 features give (or the bound without its sqrt(64)): all "
    "of their size on the feature whose gains grew gives more"
)


def _score_slips(index: int) -> list[tuple[float, str]]:
    """(a wrong answer to question ``index``, what it typically assumed)."""
    root, product = math.sqrt(SCORE_HEAD_DIM), (1.0, SCORE_GAIN**2, SCORE_GAIN**2)[index]
    slips = [(product / root, _LENGTH_1), (product * root**2, _UNDIVIDED)]
    if index > 0:
        rest = (SCORE_HEAD_DIM - 1 + (product if index == 1 else -product)) / root  # every feature at 1
        slips += [
            (abs(rest), _SPREAD),
            (product, _NO_ROOT),
            (root, "the gains were left out: the score weights that feature by the product of its two gains"),
            (SCORE_GAIN * root, "only one gain counted: both the query's gain and the key's multiply that feature"),
        ]
    if index == 2:  # first: with the gains' product negative there, the other features' best is sqrt(64)
        slips = [
            (
                root,
                "as if the feature with the negative product were lost, leaving the others' sqrt(64): a key pointing "
                "the other way on it turns the product's sign back, and it gives the largest score",
            ),
            (
                -product * root,
                "the question asks for the largest |score|: a key pointing the other way on that feature turns the "
                "product's sign back",
            ),
            *slips,
        ]
    return slips if index > 0 else [*slips, (product, _NO_ROOT)]


def _largest_score_diagnosis(index: int, guess: float, measured: tuple) -> str:
    for value, why in _score_slips(index):
        if math.isclose(guess, value, rel_tol=0.03):
            return why
    if index == 2 and abs(guess) < measured[2] / 2:
        return "the negative gain does not lose that feature: a key pointing the other way on it turns the sign back"
    return "put all of the query's size and all of the key's on the feature with the largest |g_q,i g_k,i|"


LARGEST_SCORE_PREDICTION = prediction_exercise(
    name="largest_score_prediction",
    lesson=LESSON,
    question=(
        "the largest |score| QK-norm allows at head_dim 64: with every gain 1; with one feature's gains grown to 3 and "
        "3; and with them -3 and 3"
    ),
    parts=(
        Part("every gain 1", margin=0.05, relative=True),
        Part("one feature's gains 3 and 3", margin=0.05, relative=True),
        Part("one feature's gains -3 and 3", margin=0.05, relative=True),
    ),
    measure=_largest_score_prediction,
    details=_largest_score_details,
    diagnose=_largest_score_diagnosis,
    forbidden=OWN_CODE,  # a prediction, not a measurement made with the course's code
    hint=(
        "How long is a vector after RMSNorm, before its gain? Then: which query and which key make the dot product "
        "as large as it can be, and what does the division by sqrt(head_dim) leave?",
        "RMSNorm makes the root mean square 1, so the squares sum to head_dim and the length is sqrt(head_dim). The "
        "score sums q_i k_i g_q,i g_k,i over the features, divided by sqrt(head_dim): put all of both vectors' size on "
        "the feature with the largest |g_q,i g_k,i|, and choose the key's sign to make the product positive.",
        "`return 8.0, 72.0, 72.0`: sqrt(64) * 1, sqrt(64) * 3 * 3, and the same with the key's sign flipped on that "
        "feature.",
    ),
)

EXERCISES = (
    GROUP_RMS_NORM, CLAMPED_SWIGLU, PRE_NORM_BLOCK, QK_NORM_SCORES, LARGEST_SCORE_PREDICTION, LARGEST_QK_SCORE
)  # fmt: skip
