"""Checks for the exercises of lesson 09 (the Transformer block).

Vectors are rows and weights multiply on the right (``x @ W``), as in the lesson. The references are the package's
own (``attnedu.transformer.rms_norm``, ``swiglu``, ``pre_norm_block``, ``qk_norm_scores``). Batch, length and widths
differ from each other so that a reduction over the wrong axis shows. ``rms_norm`` has padded test cases, whose
padding positions hold zero vectors (nn.Embedding's padding_idx): there RMSNorm is 0 / sqrt(eps), so forgetting eps
gives NaN exactly there; the cases where eps matters elsewhere (eps 0.1, inputs of size 0.001) are padded ones too,
so that each kind of test case shows a mistake of its own. The feed-forward layer, the causal block and the QK-norm
scores act position by position or under a causal mask, so padding at the end of a sentence changes nothing in
them: they have neither padded nor unpadded cases. The known-wrong variants include an off-by-one in both
directions: the mean of squares over d - 1 and d + 1 features; SiLU one step early (on the input) and one step late
(on the product); the causal diagonal shifted down (no query sees itself) and up (each sees the next one). The
learner's functions may not run anything from ``attnedu.transformer`` (``forbidden``): the exercises ask for their
own code.
"""

from __future__ import annotations

import math

import torch

from ..masks import padding_mask
from ..transformer import pre_norm_block, qk_norm_scores, qk_score_bound, rms_norm, swiglu
from .exercise import LARGE, ONE, PADDED, UNPADDED, Case, Exercise, Layout, Variant, generator, kinds, randn

LESSON = "09_transformer_block"
OWN_CODE = ("attnedu.transformer",)  # the exercises ask for the learner's own code: the package's earns nothing
EPS = 1e-6  # the eps of the block and the QK-norm exercises

# --------------------------------------------------------------------------------------------
# rms_norm
# --------------------------------------------------------------------------------------------


def _rms_norm_cases() -> list[Case]:
    g = generator(90)

    def case(shape, eps, tags, lengths=None, scale=1.0, note=""):
        batch, seq_len, d_model = shape
        x = scale * randn(g, *shape)
        padded = ""
        if lengths is not None:  # the padding token's embedding is zeros
            x = x * padding_mask(torch.tensor(lengths), seq_len)[:, :, None]
            padded = f", lengths {lengths}, zero vectors at padding"
        weight = 0.5 + torch.rand(d_model, generator=g)
        description = f"batch {batch}, seq_len {seq_len}, d_model {d_model}, eps {eps:g}{padded}"
        return Case(description + (f"; {note}" if note else ""), (x, weight, eps), tags)

    return [
        case((3, 5, 8), 1e-6, kinds(PADDED), lengths=[5, 2, 3]),
        case((2, 4, 6), 1e-5, kinds(UNPADDED)),
        case((1, 3, 16), 1e-6, kinds(ONE, UNPADDED)),
        case((1, 6, 4), 0.1, kinds(ONE, PADDED), lengths=[4], note="a large eps"),
        case((4, 3, 10), 1e-6, kinds(PADDED), lengths=[3, 1, 2, 3], scale=1e-3, note="inputs of size 0.001"),
        case((5, 2, 12), 1e-6, kinds(UNPADDED), note="more sentences than positions"),
        case(
            (2, 6, 64),
            1e-5,
            kinds(LARGE, PADDED),
            lengths=[6, 4],
            scale=1000.0,
            note="values around ±1000, as the outlier features of large models",
        ),
    ]


def _rms(x, weight, eps, *, over=-1, denominator=None, eps_outside=False, root=True, square=True, gain="times"):
    """A variant of RMSNorm: the mean over ``over``, dividing by ``denominator`` instead of the count."""
    powered = x.pow(2) if square else x
    if denominator is None:
        ms = powered.mean(dim=over, keepdim=True)
    else:
        ms = powered.sum(dim=over, keepdim=True) / denominator(x)
    if eps_outside:
        scale = ms.sqrt() + eps
    else:
        scale = (ms + eps).sqrt() if root else ms + eps
    normed = x / scale
    return {"times": normed * weight, "none": normed, "plus": normed + weight}[gain]


def _rms_layout(args: tuple) -> tuple[Layout]:
    x = args[0]
    real = x.abs().sum(dim=-1) > 0
    return (Layout(positions=1, real=real, words=("real tokens", "padding positions")),)


RMS_NORM = Exercise(
    name="rms_norm",
    lesson=LESSON,
    params=("x", "weight", "eps"),
    returns=(("batch", "seq_len", "d_model"),),
    reference=rms_norm,
    make_cases=_rms_norm_cases,
    layout=_rms_layout,
    variants=(
        Variant(
            "you divided by the square root of the mean, not of the mean of the *squares*: negative means give NaN, "
            "and the rest is not the root mean square. RMS = sqrt(mean(x ** 2) + eps).",
            lambda x, w, e: _rms(x, w, e, square=False),
        ),
        Variant(
            "eps is added outside the square root, x / (sqrt(mean(x ** 2)) + eps). RMSNorm adds it inside: "
            "x / sqrt(mean(x ** 2) + eps), which differs wherever mean(x ** 2) is not much larger than eps (small "
            "inputs, a large eps, a vector of zeros).",
            lambda x, w, e: _rms(x, w, e, eps_outside=True),
        ),
        Variant(
            "eps is missing: a vector of zeros (a padding position) gives 0 / 0 = NaN, and a large eps changes "
            "nothing in yours. Add it inside the square root: sqrt(mean(x ** 2) + eps).",
            lambda x, w, e: _rms(x, w, 0.0),
        ),
        Variant(
            "the mean of squares was taken over the batch (dim 0): each feature of each position was divided by a "
            "number pooled from every sentence. RMSNorm normalises each position's vector alone, over its d_model "
            "features (the last axis).",
            lambda x, w, e: _rms(x, w, e, over=0),
        ),
        Variant(
            "the mean of squares was taken over the positions (dim 1, one axis too low), so each feature was divided "
            "by a number pooled over the sentence. RMSNorm normalises each position's vector alone, over its "
            "features (the last axis).",
            lambda x, w, e: _rms(x, w, e, over=1),
        ),
        Variant(
            "the mean of squares was taken over positions and features together (the whole sentence), one number "
            "per sentence. RMSNorm normalises each position's vector alone, over its features (the last axis).",
            lambda x, w, e: _rms(x, w, e, over=(1, 2)),
        ),
        Variant(
            "off by one: the mean of squares divides the sum by d_model - 1 (as an unbiased variance would). The mean "
            "divides by the number of features, d_model.",
            lambda x, w, e: _rms(x, w, e, denominator=lambda x: x.shape[-1] - 1),
        ),
        Variant(
            "off by one: the mean of squares divides the sum by d_model + 1. The mean divides by the number of "
            "features, d_model.",
            lambda x, w, e: _rms(x, w, e, denominator=lambda x: x.shape[-1] + 1),
        ),
        Variant(
            "you divided by the length of the vector, sqrt(sum(x ** 2)), not by its root *mean* square: your "
            "output is smaller by about sqrt(d_model). Take the mean over the features, not the sum.",
            lambda x, w, e: _rms(x, w, e, denominator=lambda x: 1),
        ),
        Variant(
            "your output is LayerNorm's: you subtracted each vector's mean first. RMSNorm does not centre: it divides "
            "x itself by sqrt(mean(x ** 2) + eps).",
            lambda x, w, e: torch.nn.functional.layer_norm(x, x.shape[-1:], eps=e) * w,
        ),
        Variant(
            "the square root is missing: you divided by mean(x ** 2) + eps, the mean square, not its root.",
            lambda x, w, e: _rms(x, w, e, root=False),
        ),
        Variant(
            "you multiplied by the root mean square instead of dividing by it. RMSNorm rescales each vector to a "
            "root mean square of 1: x / sqrt(mean(x ** 2) + eps).",
            lambda x, w, e: x * (x.pow(2).mean(-1, keepdim=True) + e).sqrt() * w,
        ),
        Variant(
            "the gain `weight` is missing: multiply the normalised vector by it, feature by feature.",
            lambda x, w, e: _rms(x, w, e, gain="none"),
        ),
        Variant(
            "the gain `weight` was added, not multiplied: RMSNorm scales each feature, x / rms * weight, and has "
            "no shift.",
            lambda x, w, e: _rms(x, w, e, gain="plus"),
        ),
    ),
    hint=(
        "Each position's vector is normalised on its own: over which axis of x do you take the mean? And where "
        "does eps go?",
        "rms = sqrt(mean over the d_model features of x ** 2, plus eps), one number per position, kept as a size-1 "
        "axis so that it divides every feature; then multiply feature i by weight[i]. Nothing is subtracted, "
        "nothing added.",
        "`rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)`, shape (batch, seq_len, 1); "
        "`return x / rms * weight`.",
    ),
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# swiglu
# --------------------------------------------------------------------------------------------


def _swiglu_cases() -> list[Case]:
    g = generator(91)

    def case(batch, seq_len, d_model, d_ff, tags, scale=1.0, note=""):
        x = scale * randn(g, batch, seq_len, d_model)
        W_gate, W_up = randn(g, d_model, d_ff) / math.sqrt(d_model), randn(g, d_model, d_ff) / math.sqrt(d_model)
        W_down = randn(g, d_ff, d_model) / math.sqrt(d_ff)
        description = f"batch {batch}, seq_len {seq_len}, d_model {d_model}, d_ff {d_ff}"
        return Case(description + (f"; {note}" if note else ""), (x, W_gate, W_up, W_down), tags)

    return [
        case(2, 5, 8, 12, kinds()),
        case(1, 4, 6, 16, kinds(ONE)),
        case(3, 2, 10, 10, kinds(), note="d_ff = d_model"),
        case(4, 3, 4, 20, kinds(), note="more sentences than positions"),
        case(1, 7, 12, 8, kinds(ONE), note="d_ff smaller than d_model"),
        case(2, 3, 8, 16, kinds(LARGE), scale=60.0, note="inputs around ±60, pre-activations in the hundreds"),
    ]


def _glu(x, W_gate, W_up, W_down, *, act=torch.nn.functional.silu, where="gate", combine="product"):
    """A variant of the gated layer: ``act`` applied at ``where`` (the gate, both projections, the input, the
    product or the output); the projections multiplied or added."""
    if where == "input":
        gate, up = act(x) @ W_gate, x @ W_up
    else:
        gate, up = x @ W_gate, x @ W_up
        if where == "gate":
            gate = act(gate)
        elif where == "both":
            gate, up = act(gate), act(up)
    hidden = gate * up if combine == "product" else gate + up
    if where == "product":
        hidden = act(hidden)
    out = hidden @ W_down
    return act(out) if where == "output" else out


def _no_activation(z):
    return z


SWIGLU = Exercise(
    name="swiglu",
    lesson=LESSON,
    params=("x", "W_gate", "W_up", "W_down"),
    returns=(("batch", "seq_len", "d_model"),),
    reference=swiglu,
    make_cases=_swiglu_cases,
    variants=(
        Variant(
            "the gate and the up projection are swapped: SiLU went on the up projection (W_up). SwiGLU passes the "
            "*gate* projection (W_gate) through SiLU and keeps the up projection linear. Weights trained one way give "
            "wrong outputs the other way.",
            lambda x, Wg, Wu, Wd: _glu(x, Wu, Wg, Wd),
        ),
        Variant(
            "SiLU is missing: the product of the two projections alone is a bilinear layer. The gate passes through "
            "SiLU(z) = z * sigmoid(z) before the product.",
            lambda x, Wg, Wu, Wd: _glu(x, Wg, Wu, Wd, act=_no_activation),
        ),
        Variant(
            "the gate went through a sigmoid, not SiLU: that is the original GLU. SwiGLU uses SiLU(z) = z * "
            "sigmoid(z), the sigmoid times its input.",
            lambda x, Wg, Wu, Wd: _glu(x, Wg, Wu, Wd, act=torch.sigmoid),
        ),
        Variant(
            "the gate went through ReLU (that is ReGLU). SwiGLU uses SiLU(z) = z * sigmoid(z), which is smooth and "
            "lets small negative values through.",
            lambda x, Wg, Wu, Wd: _glu(x, Wg, Wu, Wd, act=torch.relu),
        ),
        Variant(
            "the gate went through GELU (that is GEGLU). SwiGLU uses SiLU(z) = z * sigmoid(z), close to GELU but not "
            "equal.",
            lambda x, Wg, Wu, Wd: _glu(x, Wg, Wu, Wd, act=torch.nn.functional.gelu),
        ),
        Variant(
            "SiLU went on both projections. Only the gate passes through it; the up projection stays linear.",
            lambda x, Wg, Wu, Wd: _glu(x, Wg, Wu, Wd, where="both"),
        ),
        Variant(
            "SiLU came one step late: on the product of the two projections. It belongs on the gate projection "
            "alone, before the product.",
            lambda x, Wg, Wu, Wd: _glu(x, Wg, Wu, Wd, where="product"),
        ),
        Variant(
            "SiLU came one step early: on the input x, before the gate's projection. It belongs on the gate after "
            "its projection by W_gate.",
            lambda x, Wg, Wu, Wd: _glu(x, Wg, Wu, Wd, where="input"),
        ),
        Variant(
            "SiLU went on the output, after W_down. The layer ends with the down projection: only the gate passes "
            "through SiLU.",
            lambda x, Wg, Wu, Wd: _glu(x, Wg, Wu, Wd, where="output"),
        ),
        Variant(
            "the gate and the up projection were added, not multiplied. The gate scales the up projection feature by "
            "feature: a product, not a sum.",
            lambda x, Wg, Wu, Wd: _glu(x, Wg, Wu, Wd, combine="sum"),
        ),
    ),
    hint=(
        "Three matrix products and one activation. Which of the two projections passes through SiLU?",
        "gate = SiLU(x @ W_gate) and up = x @ W_up, both (batch, seq_len, d_ff); multiply them feature by feature, "
        "then project back with W_down to (batch, seq_len, d_model). No biases.",
        "`gate = torch.nn.functional.silu(x @ W_gate)`; `up = x @ W_up`; `return (gate * up) @ W_down`.",
    ),
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# pre_norm_block
# --------------------------------------------------------------------------------------------


def _block_cases() -> list[Case]:
    g = generator(92)

    def case(batch, seq_len, d_model, num_heads, d_ff, tags, scale=1.0, gain=1.0, note=""):
        x = scale * randn(g, batch, seq_len, d_model)
        norm_a, norm_f = gain * (0.5 + torch.rand(d_model, generator=g)), 0.5 + torch.rand(d_model, generator=g)
        square = [randn(g, d_model, d_model) / math.sqrt(d_model) for _ in range(4)]
        W_gate, W_up = randn(g, d_model, d_ff) / math.sqrt(d_model), randn(g, d_model, d_ff) / math.sqrt(d_model)
        W_down = randn(g, d_ff, d_model) / math.sqrt(d_ff)
        args = (x, norm_a, *square, norm_f, W_gate, W_up, W_down, num_heads)
        description = f"batch {batch}, seq_len {seq_len}, d_model {d_model}, num_heads {num_heads}, d_ff {d_ff}"
        return Case(description + (f"; {note}" if note else ""), args, tags)

    return [
        case(2, 5, 8, 2, 12, kinds()),
        case(1, 4, 12, 3, 16, kinds(ONE)),
        case(3, 6, 8, 4, 8, kinds(), note="d_ff = d_model"),
        case(4, 3, 6, 1, 10, kinds(), note="one head, more sentences than positions"),
        case(1, 1, 8, 2, 12, kinds(ONE), note="a single position"),
        case(
            2,
            4,
            8,
            2,
            16,
            kinds(LARGE),
            scale=1000.0,
            gain=12.0,
            note="a stream around ±1000, attention norm gains around 12: scores in the hundreds",
        ),
    ]


def _block_with(
    x, g_a, W_q, W_k, W_v, W_o, g_f, W_gate, W_up, W_down, num_heads, *, arrangement="pre", causal=0, scale="head_dim",
    attention_input="normed", ffn_input="normed", gains="right", final_norm=False, transpose=False, swap_ffn=False,
    split="right", merge="right",
):  # fmt: skip
    """A known-wrong pre-norm block, one choice changed. ``causal``: the diagonal's offset (0: keys up to the query)."""
    batch, seq_len, d_model = x.shape
    head_dim = d_model // num_heads
    if gains == "swapped":
        g_a, g_f = g_f, g_a
    if transpose:
        W_q, W_k, W_v, W_o = W_q.T, W_k.T, W_v.T, W_o.T

    def attention(h):
        if split == "heads_first":  # (batch, seq_len, d_model) read straight as (batch, num_heads, seq_len, head_dim)
            q, k, v = ((h @ W).reshape(batch, num_heads, seq_len, head_dim) for W in (W_q, W_k, W_v))
        else:
            q, k, v = ((h @ W).view(batch, seq_len, num_heads, head_dim).transpose(1, 2) for W in (W_q, W_k, W_v))
        divisor = {"head_dim": math.sqrt(head_dim), "d_model": math.sqrt(d_model), "none": 1.0}[scale]
        scores = q @ k.transpose(-2, -1) / divisor
        if causal is not None:
            allowed = torch.ones(seq_len, seq_len, dtype=torch.bool).tril(causal)
            scores = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        heads = weights @ v  # (batch, num_heads, seq_len, head_dim)
        if merge == "no_transpose":  # read straight as (batch, seq_len, d_model)
            return heads.reshape(batch, seq_len, d_model) @ W_o
        return heads.transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o

    def ffn(h):
        gate, up = (W_up, W_gate) if swap_ffn else (W_gate, W_up)
        return swiglu(h, gate, up, W_down)

    if arrangement == "post":  # the 2017 arrangement with RMSNorm: normalise after the residual
        x = rms_norm(x + attention(x), g_a, EPS)
        return rms_norm(x + ffn(x), g_f, EPS)
    h = rms_norm(x, g_a, EPS)
    a = attention(h if attention_input == "normed" else x)
    if arrangement == "from_normed":
        x = h + a
    elif arrangement == "no_residual":
        x = a
    else:
        x = x + a
    h = rms_norm(x, g_f, EPS)
    f = ffn(h if ffn_input == "normed" else x)
    if arrangement == "from_normed":
        out = h + f
    elif arrangement == "no_residual":
        out = f
    else:
        out = x + f
    return rms_norm(out, g_f, EPS) if final_norm else out


def _block_variant(diagnosis: str, **changes) -> Variant:
    def fn(*args):
        return _block_with(*args, **changes)

    return Variant(diagnosis, fn)


def _block_layout(args: tuple) -> tuple[Layout]:
    return (Layout(positions=1),)


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
            "head_dim): that cuts the memory in the wrong order, so a 'head' holds pieces of several positions. "
            "Splitting cuts each position's d_model features into num_heads groups of head_dim consecutive "
            "features, giving (batch, seq_len, num_heads, head_dim); only then do the heads move in front of the "
            "positions. It shows with more than one head and more than one position.",
            split="heads_first",
        ),
        _block_variant(
            "the heads were merged by reading (batch, num_heads, seq_len, head_dim) straight as (batch, seq_len, "
            "d_model), without moving the heads back behind the positions first: each output row then holds "
            "pieces of several positions' results. Merging undoes the split: heads back behind the positions, "
            "then each position's num_heads results of head_dim side by side. It shows with more than one head "
            "and more than one position.",
            merge="no_transpose",
        ),
    ),
    hint=(
        "Two residual steps. In each, the sublayer reads a normalised copy of x; what does its output get added to: "
        "x, or the copy?",
        "h = RMSNorm(x; attention_norm); x = x + W_o(merged heads of causal attention over h @ W_q, h @ W_k, "
        "h @ W_v, scores / sqrt(head_dim)); then h = RMSNorm(x; ffn_norm) and x = x + SwiGLU(h). eps = 1e-6 in both "
        "norms; nothing is normalised after the additions. Split: (batch, seq_len, d_model) -> (batch, seq_len, "
        "num_heads, head_dim) -> heads in front of positions, (batch, num_heads, seq_len, head_dim). Merge: the "
        "same steps backwards, heads behind positions again before the reshape to d_model.",
        "`h = rms_norm(x, attention_norm, 1e-6)`; `split = lambda t: t.view(batch, seq_len, num_heads, "
        "head_dim).transpose(1, 2)`; `heads = F.scaled_dot_product_attention(split(h @ W_q), split(h @ W_k), "
        "split(h @ W_v), is_causal=True)`; `x = x + heads.transpose(1, 2).reshape(batch, seq_len, d_model) @ W_o`; "
        "`return x + swiglu(rms_norm(x, ffn_norm, 1e-6), W_gate, W_up, W_down)`.",
    ),
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


def _qk_variant(diagnosis: str, **changes) -> Variant:
    def fn(*args):
        return _qk_with(*args, **changes)

    return Variant(diagnosis, fn)


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
        "Your rms_norm from exercise 1 works on any leading axes: `qn = rms_norm(q, q_weight, 1e-6)`, `kn = "
        "rms_norm(k, k_weight, 1e-6)`; `return qn @ kn.transpose(-2, -1) / math.sqrt(q.shape[-1])`.",
    ),
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


def _bound_with(q_weight, k_weight, *, factor="sqrt", combine="product", magnitude=True, reduce="max", over=-1):
    """A known-wrong bound: ``factor`` of head_dim, the gains combined and reduced another way."""
    head_dim = q_weight.shape[-1]
    if combine == "maxima":
        largest = q_weight.abs().amax(over) * k_weight.abs().amax(over)
    else:
        product = q_weight * k_weight
        product = product.abs() if magnitude else product
        largest = {"max": product.amax(dim=over), "mean": product.mean(dim=over), "all": product.amax()}[reduce]
    scale = {"sqrt": math.sqrt(head_dim), "none": 1.0, "dim": float(head_dim), "inverse": 1 / math.sqrt(head_dim),
             "minus": math.sqrt(head_dim - 1), "plus": math.sqrt(head_dim + 1)}[factor]  # fmt: skip
    return scale * largest


def _bound_variant(diagnosis: str, **changes) -> Variant:
    def fn(q_weight, k_weight):
        return _bound_with(q_weight, k_weight, **changes)

    return Variant(diagnosis, fn)


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
            "the largest *signed* product g_q,i g_k,i, not the largest in size: a negative product is reached with "
            "a key pointing the other way, which makes the score just as large. It shows where the largest product "
            "is negative.",
            magnitude=False,
        ),
        _bound_variant(
            "the mean of the products over the features (or their sum over sqrt(head_dim), the same number): that "
            "is the score when query and key spread their size evenly. The largest score puts all of it on the one "
            "feature whose product is largest.",
            reduce="mean",
        ),
        _bound_variant(
            "the largest product was taken over the layers (axis 0) instead of over each layer's head_dim features "
            "(the last axis).",
            over=0,
        ),
        _bound_variant(
            "one number for all layers: the largest product over every layer and feature at once. Each layer has "
            "its own gains and its own bound, one per row.",
            reduce="all",
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

EXERCISES = (RMS_NORM, SWIGLU, PRE_NORM_BLOCK, QK_NORM_SCORES, LARGEST_QK_SCORE)
