"""Small attention models for the Transformer lessons, and the parameter counts of big ones.

RecallHead            lesson 04: one head of dot-product attention from a question to key-value pairs, with or
                      without the division by sqrt(head_dim)
AttentionClassifier   lesson 05: embeddings + learned positions, one multi-head attention, a linear
                      readout per output slot (no feed-forward layer, so the attention alone must
                      carry what the readout needs)
attention_parameters, block_parameters   counts from the formulas, checked against real modules
Block, TinyTransformer   lessons 06-07: pre-norm LayerNorm blocks and a small language model or encoder

Lesson 09, the Transformer block (vectors are rows: x W; positions and heads count from 0):

rms_norm, RMSNorm         Zhang & Sennrich 2019: x / sqrt(mean(x^2) + eps) * g, no centring, no shift
swiglu, SwiGLU            Shazeer 2020: (SiLU(x W_gate) * (x W_up)) W_down, three matrices, no biases
PostNormEncoderBlock      Vaswani et al. 2017: x = LN(x + MultiHead(x)); x = LN(x + FFN(x))
CrossAttentionDecoderBlock   the 2017 decoder block: masked self-attention, cross-attention (queries from the
                          decoder, keys and values from the encoder), FFN, each followed by Add & Norm
PreNormDecoderBlock       today's decoder block (Llama): x = x + Attn(RMSNorm(x)) with RoPE and a causal mask;
                          x = x + SwiGLU(RMSNorm(x)); no biases; optionally grouped-query attention
pre_norm_block            the same forward from weight matrices, without RoPE (the exercise's reference)
qk_norm_scores            RMSNorm on each head's queries and keys before the scores (QK-norm)
qk_score_bound            the largest score QK-norm allows: sqrt(head_dim) * max_i |g_q,i g_k,i|
BlockStack                a causal LM of LayerNorm blocks, post-norm or pre-norm, with identical weights
DecoderLM                 a decoder-only language model of PreNormDecoderBlocks, with sampling
*_parameters              parameter counts by formula, for every block above

Lesson 11, real attention heads:

BertLayer, BertEncoder   lesson 11: BERT's post-norm encoder (GELU), to load a pretrained model into
AttentionOnlyTransformer   lesson 11: attention layers only, causal; where induction heads form
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validate import (
    check_bool,
    check_bool_mask,
    check_choice,
    check_float,
    check_ids,
    check_instance,
    check_int,
    check_min_dims,
    check_number,
    check_positive_int,
    check_same_dtype,
    check_size,
    check_tensor,
    describe,
)
from .attention import scaled_dot_product_attention
from .masks import causal_mask, sliding_window_mask
from .multihead import MultiHeadAttention, merge_heads, multi_head_attention, split_heads
from .positional import LearnedPositions, alibi_bias, sinusoidal_encoding
from .runtime import seeded

POSITIONS = ("none", "sinusoidal", "learned", "rope", "alibi")


def attention_parameters(d_model: int, bias: bool = True) -> int:
    """W_Q, W_K, W_V, W_O, each d_model x d_model (+ d_model biases). The number of heads does not appear:
    h heads of head_dim = d_model / h share the same four matrices, cut into slices."""
    check_positive_int("d_model", d_model, "the model width")
    check_bool("bias", bias, "whether the projections have biases")
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


def block_parameters(d_model: int, d_ff: int) -> int:
    """One Transformer encoder block: multi-head attention, a feed-forward layer d_model -> d_ff -> d_model
    (weights and biases), and two layer norms (a scale and a shift of d_model each)."""
    check_positive_int("d_model", d_model, "the model width")
    check_positive_int("d_ff", d_ff, "the feed-forward width")
    feed_forward = d_model * d_ff + d_ff + d_ff * d_model + d_model
    return attention_parameters(d_model) + feed_forward + 2 * 2 * d_model


class RecallHead(nn.Module):
    """One head of attention answering ``attnedu.tasks.recall_task`` (lesson 04's sqrt(d_k) experiment).

    x_j = E_key k_j + E_value v_j for each pair, q = E_key question; with vectors as rows,
    scores_j = (q W_Q) . (x_j W_K) / sqrt(head_dim) (or without the division when ``scaled`` is False),
    a = softmax(scores), logits = (sum_j a_j x_j W_V) W_out.
    Embeddings have standard normal entries and W_Q, W_K, W_V standard deviation 1 / sqrt(d_model), so that the
    query and key components have variance about 1 and 2 at initialisation; W_out has 1 / sqrt(head_dim).
    ``qk_init_scale`` multiplies the initial W_Q and W_K (the same draws otherwise): head_dim ** -0.25 with
    ``scaled=False`` starts the raw scores with the spread of the divided ones (lesson 04's control arm).
    forward(keys (batch, pairs), values (batch, pairs), question (batch,)) -> logits (batch, vocab),
    scores (batch, pairs) before the softmax.
    """

    def __init__(
        self, vocab: int, d_model: int, head_dim: int, scaled: bool, seed: int = 0, qk_init_scale: float = 1.0
    ):
        super().__init__()
        for name, value in (("vocab", vocab), ("d_model", d_model), ("head_dim", head_dim)):
            check_positive_int(name, value, "a size")
        qk_init_scale = check_number(
            "qk_init_scale", qk_init_scale, "a factor on the initial W_Q and W_K", 0, strict=True
        )
        self.scale = (
            1 / math.sqrt(head_dim) if check_bool("scaled", scaled, "whether to divide by sqrt(head_dim)") else 1.0
        )
        with seeded(seed):
            self.key_embedding = nn.Parameter(torch.randn(vocab, d_model))
            self.value_embedding = nn.Parameter(torch.randn(vocab, d_model))
            self.W_Q, self.W_K, self.W_V = (nn.Parameter(torch.randn(d_model, head_dim) / math.sqrt(d_model))
                                            for _ in range(3))  # fmt: skip
            with torch.no_grad():
                self.W_Q.mul_(qk_init_scale)
                self.W_K.mul_(qk_init_scale)
            self.W_out = nn.Parameter(torch.randn(head_dim, vocab) / math.sqrt(head_dim))

    def forward(self, keys: torch.Tensor, values: torch.Tensor, question: torch.Tensor):
        vocab = self.key_embedding.shape[0]
        check_ids("keys", keys, vocab, 2, "(batch, pairs) of token ids")
        check_ids("values", values, vocab, 2, "(batch, pairs) of token ids")
        check_ids("question", question, vocab, 1, "(batch,) of token ids")
        pairs = self.key_embedding[keys] + self.value_embedding[values]  # (batch, pairs, d_model)
        query = self.key_embedding[question] @ self.W_Q  # (batch, head_dim)
        scores = (pairs @ self.W_K @ query[:, :, None])[..., 0] * self.scale  # (batch, pairs)
        weights = torch.softmax(scores, dim=-1)
        answer = (weights[:, None, :] @ (pairs @ self.W_V))[:, 0]  # (batch, head_dim)
        return answer @ self.W_out, scores


class AttentionClassifier(nn.Module):
    """tokens (batch, seq_len) -> logits (batch, seq_len, n_outputs, n_classes),
    weights (batch, heads, seq_len, seq_len).

    z = E x + P (learned positions); a = MultiHeadAttention(z, z, z); logits = W a, cut into n_outputs
    groups of n_classes. Everything after the attention is linear.
    """

    def __init__(
        self, vocab_size: int, seq_len: int, d_model: int, num_heads: int, n_outputs: int, n_classes: int,
        seed: int = 0,
    ):  # fmt: skip
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("seq_len", seq_len), ("n_outputs", n_outputs),
                            ("n_classes", n_classes)):  # fmt: skip
            check_positive_int(name, value, "a size")
        self.seq_len, self.n_outputs, self.n_classes = seq_len, n_outputs, n_classes
        with seeded(seed):
            self.embedding = nn.Embedding(vocab_size, d_model)
            self.positions = nn.Parameter(0.5 * torch.randn(seq_len, d_model))
            self.attention = MultiHeadAttention(d_model, num_heads)
            self.readout = nn.Linear(d_model, n_outputs * n_classes)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_ids("tokens", tokens, self.embedding.num_embeddings, 2, "(batch, seq_len) of token ids")
        if tokens.shape[1] != self.seq_len:
            raise ValueError(
                f"tokens should be sequences of seq_len={self.seq_len}, got sequences of {tokens.shape[1]}: this model "
                f"has positions for {self.seq_len} tokens"
            )
        z = self.embedding(tokens) + self.positions
        attended, weights = self.attention(z, z, z)
        logits = self.readout(attended).view(*tokens.shape, self.n_outputs, self.n_classes)
        return logits, weights


class Block(nn.Module):
    """Pre-norm Transformer block (the arrangement of GPT-2 and most models since):
    x = x + MultiHeadAttention(LN(x)); x = x + W_2 relu(W_1 LN(x))."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        check_positive_int("d_model", d_model, "the model width")
        check_positive_int("d_ff", d_ff, "the feed-forward width")
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = MultiHeadAttention(d_model, num_heads)
        self.feed_forward = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor, mask=None, bias=None, rope_positions=None, rope_base: float = 10000.0):
        """x (batch, seq_len, d_model) -> (batch, seq_len, d_model), weights (batch, heads, seq_len, seq_len)."""
        normed = self.norm1(x)
        attended, weights = self.attention(
            normed, normed, normed, mask, bias=bias, rope_positions=rope_positions, rope_base=rope_base
        )
        x = x + attended
        return x + self.feed_forward(self.norm2(x)), weights


class TinyTransformer(nn.Module):
    """tokens (batch, seq_len) -> logits (batch, seq_len, n_out): embeddings, positions, blocks, LN, head.

    positions: "none" (nothing), "sinusoidal" or "learned" (added to the embeddings, up to
    ``max_positions`` for the learned table), "rope" (queries and keys rotated in every block), or "alibi"
    (a distance penalty on every head's scores). causal=True makes a language model (no looking ahead);
    ``forward(tokens, causal=...)`` can override it, which lesson 06 uses to show the leak.
    """

    def __init__(
        self, vocab_size: int, n_out: int, d_model: int = 64, num_heads: int = 4, num_layers: int = 2,
        d_ff: int | None = None, positions: str = "learned", max_positions: int = 64, causal: bool = True,
        seed: int = 0,
    ):  # fmt: skip
        super().__init__()
        check_choice("positions", positions, POSITIONS)
        for name, value in (("vocab_size", vocab_size), ("n_out", n_out), ("d_model", d_model),
                            ("num_heads", num_heads), ("max_positions", max_positions)):  # fmt: skip
            check_positive_int(name, value, "a size")
        check_int("num_layers", num_layers, "Transformer blocks", minimum=0)
        if d_ff is not None:
            check_positive_int("d_ff", d_ff, "the feed-forward width")
        check_bool("causal", causal, "whether position i may only attend positions j <= i")
        self.positions, self.causal, self.num_heads = positions, causal, num_heads
        with seeded(seed):
            self.embedding = nn.Embedding(vocab_size, d_model)
            self.learned = LearnedPositions(max_positions, d_model) if positions == "learned" else None
            self.blocks = nn.ModuleList(Block(d_model, num_heads, d_ff or 4 * d_model) for _ in range(num_layers))
            self.norm = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, n_out)

    def forward(
        self, tokens: torch.Tensor, causal: bool | None = None, return_weights: bool = False,
        rope_positions: torch.Tensor | None = None, rope_base: float = 10000.0, window: int | None = None,
    ):  # fmt: skip
        """-> logits (batch, seq_len, n_out); with ``return_weights``, also each block's attention weights.

        ``window`` (causal models only): query i sees only keys i - window .. i, a causal sliding window
        (``attnedu.masks.sliding_window_mask(seq_len, window, causal=True)``): how lesson 07 reads long texts while
        keeping every query's view to the distances it was trained on.

        For a "rope" model, ``rope_positions`` (seq_len,) and ``rope_base`` replace the positions 0..seq_len-1 and
        the base 10000 it was trained with: how lesson 07 stretches RoPE past the trained length (fractional
        positions: position interpolation; a larger base: NTK-aware scaling, see ``attnedu.positional``)."""
        check_ids("tokens", tokens, self.embedding.num_embeddings, 2, "(batch, seq_len) of token ids")
        seq_len = tokens.shape[1]
        causal = self.causal if causal is None else check_bool("causal", causal, "whether to mask the future")
        check_bool("return_weights", return_weights, "whether to return each block's weights")
        x = self.embedding(tokens)
        if self.positions == "sinusoidal":
            x = x + sinusoidal_encoding(seq_len, x.shape[-1])
        elif self.positions == "learned":
            x = x + self.learned(seq_len)
        mask = causal_mask(seq_len)[None, None] if causal else None
        if window is not None:
            check_int("window", window, "how many keys back each query may see", minimum=0)
            if not causal:
                raise ValueError(
                    f"window={window} applies to a causal model only (a causal sliding window), got causal=False; "
                    "leave window out or run with causal=True"
                )
            mask = sliding_window_mask(seq_len, window, causal=True)[None, None]
        bias = alibi_bias(self.num_heads, seq_len)[None] if self.positions == "alibi" else None
        if (rope_positions is not None or rope_base != 10000.0) and self.positions != "rope":
            raise ValueError(
                f"rope_positions and rope_base should be left out for a model with positions={self.positions!r}, got "
                f"{describe(rope_positions)} and rope_base={rope_base!r}; they apply to positions='rope' only"
            )
        rope = None
        if self.positions == "rope":
            rope = torch.arange(seq_len) if rope_positions is None else rope_positions
            check_number("rope_base", rope_base, "the base of RoPE's frequencies", 1.0, strict=True)
        all_weights = []
        for block in self.blocks:
            x, weights = block(x, mask, bias, rope, rope_base)
            all_weights.append(weights)
        logits = self.head(self.norm(x))
        return (logits, all_weights) if return_weights else logits


# --------------------------------------------------------------------------------------------
# Lesson 09: the Transformer block
# --------------------------------------------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019) over the last axis, the features of each position:

        RMSNorm(x) = x / sqrt(mean_i(x_i^2) + eps) * g

    x (..., d_model), weight g (d_model,) -> (..., d_model). Unlike LayerNorm it neither subtracts the mean nor adds a
    shift: it only rescales each vector to a root mean square of 1, then multiplies feature i by g_i.
    """
    check_min_dims("x", x, 1, "(..., d_model)")
    check_float("x", x)
    check_tensor("weight", weight, 1, "(d_model,)")
    check_float("weight", weight)
    check_size("weight", weight, 0, x.shape[-1], "d_model, the last dimension of x: one gain per feature")
    check_same_dtype(x=x, weight=weight)
    eps = check_number("eps", eps, "added to the mean of squares", 0.0)
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


class RMSNorm(nn.Module):
    """``rms_norm`` with a trained gain g (d_model,), starting at ones; equal to ``torch.nn.RMSNorm(d_model, eps)``."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        check_positive_int("d_model", d_model, "the model width")
        self.eps = check_number("eps", eps, "added to the mean of squares", 0.0)
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def _check_matrix(name: str, W, shape: tuple[int, int], shape_doc: str, like: torch.Tensor, fix: str = "") -> None:
    check_tensor(name, W, 2, shape_doc)
    check_float(name, W)
    if tuple(W.shape) != shape:
        message = f"{name} should be {shape_doc} = {shape}, got {describe(W)}"
        raise ValueError(message + (f"; {fix}" if fix else ""))
    check_same_dtype(x=like, **{name: W})


def swiglu(x: torch.Tensor, W_gate: torch.Tensor, W_up: torch.Tensor, W_down: torch.Tensor) -> torch.Tensor:
    """The SwiGLU feed-forward layer (Shazeer 2020), applied to every position alone:

        FFN(x) = (SiLU(x W_gate) * (x W_up)) W_down,   SiLU(z) = z * sigmoid(z)

    x (..., d_model); W_gate, W_up (d_model, d_ff); W_down (d_ff, d_model) -> (..., d_model). The gate decides, feature
    by feature, how much of the "up" projection passes. Three matrices instead of the 2017 layer's two, so models
    take d_ff about 2/3 of 4 d_model to keep the parameter count (``swiglu_hidden``).
    """
    check_min_dims("x", x, 1, "(..., d_model)")
    check_float("x", x)
    d_model = x.shape[-1]
    check_tensor("W_gate", W_gate, 2, "(d_model, d_ff)")
    d_ff = W_gate.shape[1]
    fix = "weights are applied as x @ W (vectors are rows); an nn.Linear's weight is the transpose: pass .weight.T"
    _check_matrix("W_gate", W_gate, (d_model, d_ff), "(d_model, d_ff)", x, fix)
    _check_matrix("W_up", W_up, (d_model, d_ff), "(d_model, d_ff)", x, fix)
    _check_matrix("W_down", W_down, (d_ff, d_model), "(d_ff, d_model)", x, fix)
    return (nn.functional.silu(x @ W_gate) * (x @ W_up)) @ W_down


def swiglu_hidden(d_model: int, multiple_of: int = 8) -> int:
    """The SwiGLU width that keeps the 2017 layer's parameter count: d_ff = 2/3 * 4 d_model = 8/3 d_model (three
    matrices of d_model x d_ff instead of two of d_model x 4 d_model), rounded up to a multiple of ``multiple_of``.

    This is Shazeer's (2020) and LLaMA-1's rule (LLaMA-1 7B: 8/3 * 4096 rounded up to a multiple of 256 = 11008).
    Later models choose d_ff freely and often wider (Llama 3 8B: 14336 = 3.5 d_model; Llama 3.2 1B: 8192 = 4
    d_model), so a real configuration's d_ff is read from it, not from this rule."""
    d_model = check_positive_int("d_model", d_model, "the model width")
    multiple_of = check_positive_int("multiple_of", multiple_of, "what d_ff is rounded up to")
    return multiple_of * math.ceil(8 * d_model / 3 / multiple_of)


class SwiGLU(nn.Module):
    """``swiglu`` with trained matrices: gate, up (d_model -> d_ff) and down (d_ff -> d_model), no biases."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        check_positive_int("d_model", d_model, "the model width")
        check_positive_int("d_ff", d_ff, "the feed-forward width")
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swiglu(x, self.gate.weight.T, self.up.weight.T, self.down.weight.T)


def _check_sequence(name: str, x, d_model: int, like: torch.Tensor) -> None:
    check_tensor(name, x, 3, "(batch, seq_len, d_model)")
    check_float(name, x)
    check_size(name, x, 2, d_model, "d_model of this block")
    check_same_dtype(**{name: x}, weights=like)


@torch.no_grad()
def _copy_linear(ours: nn.Linear, theirs: nn.Linear) -> None:
    ours.weight.copy_(theirs.weight)
    if ours.bias is not None:
        ours.bias.copy_(theirs.bias)


@torch.no_grad()
def _copy_norm(ours: nn.LayerNorm, theirs: nn.LayerNorm) -> None:
    if theirs.eps != ours.eps:
        raise ValueError(f"torch's layer norm has eps={theirs.eps}, this one {ours.eps}: build both with the same eps")
    ours.weight.copy_(theirs.weight)
    ours.bias.copy_(theirs.bias)


def _check_torch_layer(name: str, layer, kind: type, d_model: int, num_heads: int, d_ff: int) -> None:
    check_instance(name, layer, kind, f"a torch.nn.{kind.__name__}")
    attention = layer.self_attn
    sizes = (attention.embed_dim, attention.num_heads, layer.linear1.out_features)
    if sizes != (d_model, num_heads, d_ff):
        raise ValueError(
            f"{name} should have d_model, nhead, dim_feedforward = {(d_model, num_heads, d_ff)} as this block, got "
            f"{sizes}; build both with the same sizes"
        )
    if layer.norm_first:
        raise ValueError(
            f"{name} should be post-norm (norm_first=False), as this block is, got norm_first=True; the pre-norm "
            "arrangement is attnedu.transformer.Block"
        )
    if layer.activation not in (nn.functional.relu, "relu") and not isinstance(layer.activation, nn.ReLU):
        raise ValueError(f"{name} should use activation='relu', as this block does (the 2017 feed-forward layer)")


class PostNormEncoderBlock(Block):
    """The encoder block of Vaswani et al. (2017), Sec. 3.1: each sublayer is followed by "Add & Norm",

        x = LayerNorm(x + MultiHead(x, x, x))
        x = LayerNorm(x + FFN(x)),    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

    the post-norm arrangement. Same parameters as ``Block`` (the pre-norm arrangement, x = x + MultiHead(LN(x)),
    ...), so one's weights load into the other: only where the norms sit differs. Equal to
    ``torch.nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout=0.0, batch_first=True)`` after
    ``copy_from_torch``.

    forward(x (batch, seq_len, d_model), mask=None) -> (batch, seq_len, d_model), weights (batch, heads, seq_len,
    seq_len); mask: bool, True = may attend, e.g. (batch, 1, 1, seq_len) for padding.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int):
        super().__init__(d_model, num_heads, d_ff)
        self.d_ff = d_ff

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None):
        _check_sequence("x", x, self.attention.d_model, self.norm1.weight)
        attended, weights = self.attention(x, x, x, mask)
        x = self.norm1(x + attended)  # Add & Norm
        return self.norm2(x + self.feed_forward(x)), weights

    def copy_from_torch(self, layer: nn.TransformerEncoderLayer) -> PostNormEncoderBlock:
        """Take the weights of a post-norm ``torch.nn.TransformerEncoderLayer`` of the same sizes."""
        _check_torch_layer("layer", layer, nn.TransformerEncoderLayer, self.attention.d_model,
                           self.attention.num_heads, self.d_ff)  # fmt: skip
        self.attention.copy_from_torch(layer.self_attn)
        _copy_linear(self.feed_forward[0], layer.linear1)
        _copy_linear(self.feed_forward[2], layer.linear2)
        _copy_norm(self.norm1, layer.norm1)
        _copy_norm(self.norm2, layer.norm2)
        return self


class CrossAttentionDecoderBlock(nn.Module):
    """The decoder block of Vaswani et al. (2017), Sec. 3.1, post-norm:

        x = LayerNorm(x + MultiHead(x, x, x, causal mask))         masked self-attention
        x = LayerNorm(x + MultiHead(x, memory, memory))            cross-attention
        x = LayerNorm(x + FFN(x))

    In the cross-attention the queries come from the decoder (one per target position) and the keys and values
    from the encoder's output ``memory`` (one per source position), so each target position reads the source.
    Equal to ``torch.nn.TransformerDecoderLayer(d_model, num_heads, d_ff, dropout=0.0, batch_first=True)`` after
    ``copy_from_torch``.

    forward(x (batch, tgt_len, d_model), memory (batch, src_len, d_model), memory_mask=None (batch, src_len) bool,
    True at real source tokens) -> x (batch, tgt_len, d_model), self-attention weights (batch, heads, tgt_len,
    tgt_len), cross-attention weights (batch, heads, tgt_len, src_len).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        check_positive_int("d_model", d_model, "the model width")
        self.d_ff = check_positive_int("d_ff", d_ff, "the feed-forward width")
        self.self_attention = MultiHeadAttention(d_model, num_heads)
        self.cross_attention = MultiHeadAttention(d_model, num_heads)
        self.feed_forward = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None = None):
        d_model = self.self_attention.d_model
        _check_sequence("x", x, d_model, self.norm1.weight)
        _check_sequence("memory", memory, d_model, self.norm1.weight)
        check_size("memory", memory, 0, x.shape[0], "the batch size of x: one source sentence per target sentence")
        if memory_mask is not None:
            check_bool_mask("memory_mask", memory_mask)
            check_tensor("memory_mask", memory_mask, 2, "(batch, src_len), True at real source tokens")
            if tuple(memory_mask.shape) != tuple(memory.shape[:2]):
                raise ValueError(
                    f"memory_mask should be (batch, src_len) = {tuple(memory.shape[:2])}, got {describe(memory_mask)}; "
                    "build it with padding_mask(src_lengths, src_len)"
                )
            memory_mask = memory_mask[:, None, None, :]  # (batch, 1, 1, src_len): every head, every query
        causal = causal_mask(x.shape[1], device=x.device)[None, None]
        attended, self_weights = self.self_attention(x, x, x, causal)
        x = self.norm1(x + attended)
        read, cross_weights = self.cross_attention(x, memory, memory, memory_mask)  # Q: decoder; K, V: encoder
        x = self.norm2(x + read)
        return self.norm3(x + self.feed_forward(x)), self_weights, cross_weights

    def copy_from_torch(self, layer: nn.TransformerDecoderLayer) -> CrossAttentionDecoderBlock:
        """Take the weights of a post-norm ``torch.nn.TransformerDecoderLayer`` of the same sizes."""
        _check_torch_layer("layer", layer, nn.TransformerDecoderLayer, self.self_attention.d_model,
                           self.self_attention.num_heads, self.d_ff)  # fmt: skip
        self.self_attention.copy_from_torch(layer.self_attn)
        self.cross_attention.copy_from_torch(layer.multihead_attn)
        _copy_linear(self.feed_forward[0], layer.linear1)
        _copy_linear(self.feed_forward[2], layer.linear2)
        for ours, theirs in ((self.norm1, layer.norm1), (self.norm2, layer.norm2), (self.norm3, layer.norm3)):
            _copy_norm(ours, theirs)
        return self


class PreNormDecoderBlock(nn.Module):
    """The block of today's decoder-only models (Llama and most since): pre-norm, RMSNorm, SwiGLU, RoPE, no biases,

        x = x + Attention(RMSNorm(x))      causal, queries and keys rotated by their positions (RoPE)
        x = x + SwiGLU(RMSNorm(x))

    The residual stream x is never normalised in place: each sublayer reads a normalised copy and adds its output
    back. With ``num_kv_heads`` < num_heads the attention is grouped-query (lesson 05's exercise).

    forward(x (batch, seq_len, d_model), rope_positions=None (seq_len,)) -> (batch, seq_len, d_model), weights
    (batch, heads, seq_len, seq_len); without rope_positions no position enters (as in ``pre_norm_block``).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, num_kv_heads: int | None = None, eps: float = 1e-6):
        super().__init__()
        self.attention_norm = RMSNorm(d_model, eps)
        self.attention = MultiHeadAttention(d_model, num_heads, bias=False, num_kv_heads=num_kv_heads)
        self.ffn_norm = RMSNorm(d_model, eps)
        self.feed_forward = SwiGLU(d_model, d_ff)

    def forward(self, x: torch.Tensor, rope_positions: torch.Tensor | None = None):
        _check_sequence("x", x, self.attention.d_model, self.ffn_norm.weight)
        normed = self.attention_norm(x)
        causal = causal_mask(x.shape[1], device=x.device)[None, None]
        attended, weights = self.attention(normed, normed, normed, causal, rope_positions=rope_positions)
        x = x + attended
        return x + self.feed_forward(self.ffn_norm(x)), weights


def pre_norm_block(
    x: torch.Tensor, attention_norm: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor, W_v: torch.Tensor,
    W_o: torch.Tensor, ffn_norm: torch.Tensor, W_gate: torch.Tensor, W_up: torch.Tensor, W_down: torch.Tensor,
    num_heads: int, eps: float = 1e-6,
) -> torch.Tensor:  # fmt: skip
    """``PreNormDecoderBlock``'s forward from weight matrices (vectors are rows, so W_q is (d_model, d_model) and
    applied as h @ W_q), without RoPE:

        h = rms_norm(x, attention_norm);  x = x + MultiHead(h, h, h, causal mask)
        h = rms_norm(x, ffn_norm);        x = x + swiglu(h, W_gate, W_up, W_down)

    x (batch, seq_len, d_model); attention_norm, ffn_norm (d_model,); W_q, W_k, W_v, W_o (d_model, d_model);
    W_gate, W_up (d_model, d_ff); W_down (d_ff, d_model) -> (batch, seq_len, d_model).
    """
    check_tensor("x", x, 3, "(batch, seq_len, d_model)")
    check_float("x", x)
    batch, seq_len, _ = x.shape
    causal = causal_mask(seq_len, device=x.device)[None].expand(batch, seq_len, seq_len)
    h = rms_norm(x, attention_norm, eps)
    attended, _ = multi_head_attention(h, h, h, causal, W_q, W_k, W_v, W_o, num_heads)
    x = x + attended
    return x + swiglu(rms_norm(x, ffn_norm, eps), W_gate, W_up, W_down)


def qk_norm_scores(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """QK-norm: RMSNorm on each head's queries and keys before the scores (Dehghani et al. 2023 used LayerNorm; Qwen3
    uses RMSNorm per head), so that no score can grow without bound however large the projections become:

        scores = rms_norm(q, g_q) rms_norm(k, g_k)^T / sqrt(head_dim)

    q (batch, heads, query_len, head_dim), k (batch, heads, key_len, head_dim); q_weight, k_weight (head_dim,), one
    gain shared by every head -> (batch, heads, query_len, key_len).
    """
    check_tensor("q", q, 4, "(batch, heads, query_len, head_dim)")
    check_tensor("k", k, 4, "(batch, heads, key_len, head_dim)")
    if q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k should share batch, heads and head_dim, got q {describe(q)} and k {describe(k)}")
    scores = rms_norm(q, q_weight, eps) @ rms_norm(k, k_weight, eps).transpose(-2, -1)
    return scores / math.sqrt(q.shape[-1])


def qk_score_bound(q_weight: torch.Tensor, k_weight: torch.Tensor) -> torch.Tensor:
    """The largest score QK-norm allows (``qk_norm_scores``), whatever the queries and keys:

        |s| <= sqrt(head_dim) * max_i |g_q,i g_k,i|

    A normalised vector q_hat has sum_i q_hat_i^2 = head_dim (less a little for eps), so the score
    sum_i q_hat_i g_q,i k_hat_i g_k,i / sqrt(head_dim) is at most max_i |g_q,i g_k,i| * |q_hat . k_hat| / sqrt(head_dim)
    <= max_i |g_q,i g_k,i| * head_dim / sqrt(head_dim) (Cauchy-Schwarz). Queries and keys with all their size on the
    feature i of the largest |g_q,i g_k,i| come as close as eps allows: the bound is the least one. The gains are
    trained, so the bound is not fixed: it grows as they do.

    q_weight, k_weight (..., head_dim): the gains, with any leading axes (one pair per layer, say) -> (...).
    """
    check_min_dims("q_weight", q_weight, 1, "(..., head_dim)")
    check_float("q_weight", q_weight)
    check_min_dims("k_weight", k_weight, 1, "(..., head_dim)")
    check_same_dtype(q_weight=q_weight, k_weight=k_weight)
    if k_weight.shape != q_weight.shape:
        raise ValueError(
            f"k_weight should have the shape of q_weight, {tuple(q_weight.shape)}, got {describe(k_weight)}"
        )
    return math.sqrt(q_weight.shape[-1]) * (q_weight * k_weight).abs().amax(dim=-1)


class BlockStack(nn.Module):
    """A causal character LM of ``num_layers`` LayerNorm blocks in one of the two arrangements, for comparing them:

    * ``norm_first=False``: ``PostNormEncoderBlock`` (2017), whose last block already ends in a LayerNorm;
    * ``norm_first=True``: ``Block`` (pre-norm), with a final LayerNorm before the readout (GPT-2; Xiong et al. 2020's
      Pre-LN Transformer).

    Sinusoidal positions are added to the embeddings. With the same seed both arrangements start from the same
    weights (the final LayerNorm starts at ones and zeros, the identity up to the normalisation).

    forward(tokens (batch, seq_len), return_stream=False) -> logits (batch, seq_len, vocab_size); with
    ``return_stream`` also the residual stream after the last block, (batch, seq_len, d_model): what the final
    LayerNorm reads in the pre-norm arrangement (in the post-norm one the last block's own LayerNorm has already
    normalised it).
    """

    def __init__(
        self, vocab_size: int, d_model: int, num_heads: int, d_ff: int, num_layers: int, norm_first: bool,
        seed: int = 0,
    ):  # fmt: skip
        super().__init__()
        check_positive_int("vocab_size", vocab_size, "a size")
        check_positive_int("num_layers", num_layers, "Transformer blocks")
        self.norm_first = check_bool("norm_first", norm_first, "pre-norm (True) or post-norm (False)")
        kind = Block if norm_first else PostNormEncoderBlock
        with seeded(seed):
            self.embedding = nn.Embedding(vocab_size, d_model)
            self.blocks = nn.ModuleList(kind(d_model, num_heads, d_ff) for _ in range(num_layers))
            self.head = nn.Linear(d_model, vocab_size)
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, tokens: torch.Tensor, return_stream: bool = False):
        check_ids("tokens", tokens, self.embedding.num_embeddings, 2, "(batch, seq_len) of token ids")
        check_bool("return_stream", return_stream, "whether to return the stream after the last block")
        seq_len = tokens.shape[1]
        x = self.embedding(tokens) + sinusoidal_encoding(seq_len, self.embedding.embedding_dim)
        mask = causal_mask(seq_len, device=tokens.device)[None, None]
        for block in self.blocks:
            x, _ = block(x, mask)
        logits = self.head(self.norm(x))
        return (logits, x) if return_stream else logits


class DecoderLM(nn.Module):
    """A decoder-only language model of ``PreNormDecoderBlock``s: token embeddings, blocks (RoPE inside each), a
    final RMSNorm and a linear readout to next-token logits (with ``tie_embeddings`` the readout is the embedding
    matrix itself, as in GPT-2 and Llama 3.2 1B). No biases anywhere, no position table.

    forward(tokens (batch, seq_len), return_weights=False) -> logits (batch, seq_len, vocab_size); with
    ``return_weights`` also each block's attention weights (batch, heads, seq_len, seq_len), blocks counted from 0.
    """

    def __init__(
        self, vocab_size: int, d_model: int = 128, num_heads: int = 4, num_layers: int = 4, d_ff: int | None = None,
        num_kv_heads: int | None = None, tie_embeddings: bool = False, eps: float = 1e-6, seed: int = 0,
    ):  # fmt: skip
        super().__init__()
        check_positive_int("vocab_size", vocab_size, "a size")
        check_positive_int("d_model", d_model, "the model width")
        check_int("num_layers", num_layers, "Transformer blocks", minimum=0)
        d_ff = swiglu_hidden(d_model) if d_ff is None else check_positive_int("d_ff", d_ff, "the SwiGLU width")
        self.tie_embeddings = check_bool("tie_embeddings", tie_embeddings, "whether the readout is the embedding")
        with seeded(seed):
            # unit variance as nn.Embedding's N(0, 1), drawn uniformly: uniform_ also works on the meta device, where
            # the notebooks count big models without allocating them (normal_ there first imports torch._dynamo)
            table = torch.empty(vocab_size, d_model).uniform_(-math.sqrt(3.0), math.sqrt(3.0))
            self.embedding = nn.Embedding(vocab_size, d_model, _weight=table)
            self.blocks = nn.ModuleList(
                PreNormDecoderBlock(d_model, num_heads, d_ff, num_kv_heads, eps) for _ in range(num_layers)
            )
            self.norm = RMSNorm(d_model, eps)
            self.head = None if tie_embeddings else nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor, return_weights: bool = False):
        check_tensor("tokens", tokens, 2, "(batch, seq_len) of token ids")
        if tokens.device != self.embedding.weight.device:
            device = self.embedding.weight.device
            raise ValueError(
                f"tokens should be on the model's device, {device}, got {tokens.device}; move them with "
                f"tokens.to({str(device)!r})"
            )
        check_ids("tokens", tokens, self.embedding.num_embeddings, 2, "(batch, seq_len) of token ids")
        check_bool("return_weights", return_weights, "whether to return each block's weights")
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embedding(tokens)
        all_weights = []
        for block in self.blocks:
            x, weights = block(x, positions)
            all_weights.append(weights)
        x = self.norm(x)
        logits = x @ self.embedding.weight.T if self.head is None else self.head(x)
        return (logits, all_weights) if return_weights else logits

    @torch.no_grad()
    def generate(
        self, prompt: torch.Tensor, steps: int, temperature: float, generator: torch.Generator, context: int = 64
    ) -> torch.Tensor:
        """Continue ``prompt`` (1-D token ids) by ``steps`` tokens, each drawn from softmax(logits / temperature) of
        the last position, reading at most the last ``context`` tokens. Low temperatures sharpen the distribution
        towards the likeliest token, high ones flatten it. -> 1-D ids, the prompt included."""
        check_tensor("prompt", prompt, 1, "(prompt_len,) of token ids")
        steps = check_int("steps", steps, "tokens to add", minimum=0)
        temperature = check_number("temperature", temperature, "the softmax temperature", 0.0, strict=True)
        check_instance("generator", generator, torch.Generator, "a torch.Generator",
                       "pass torch.Generator().manual_seed(seed), not the seed itself")  # fmt: skip
        context = check_positive_int("context", context, "how many tokens the model reads")
        ids = prompt
        for _ in range(steps):
            logits = self(ids[None, -context:])[0, -1]
            probabilities = torch.softmax(logits / temperature, dim=-1)
            ids = torch.cat([ids, torch.multinomial(probabilities, 1, generator=generator)])
        return ids


# --------------------------------------------------------------------------------------------
# Parameter counts by formula (lesson 09); each is checked against the modules above in tests/
# --------------------------------------------------------------------------------------------


def cross_attention_block_parameters(d_model: int, d_ff: int) -> int:
    """The 2017 decoder block: two attentions (self and cross, with biases), the feed-forward layer and three layer
    norms: ``block_parameters`` plus one attention and one more LayerNorm."""
    return block_parameters(d_model, d_ff) + attention_parameters(d_model) + 2 * d_model


def pre_norm_block_parameters(d_model: int, d_ff: int, num_heads: int, num_kv_heads: int | None = None) -> int:
    """``PreNormDecoderBlock``: W_q and W_o (d_model x d_model), W_k and W_v (d_model x num_kv_heads * head_dim), no
    biases; SwiGLU's three matrices (3 d_model d_ff); two RMSNorm gains (d_model each)."""
    check_positive_int("d_model", d_model, "the model width")
    check_positive_int("d_ff", d_ff, "the feed-forward width")
    num_heads = check_positive_int("num_heads", num_heads, "the number of heads")
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    check_positive_int("num_kv_heads", num_kv_heads, "the number of key/value heads")
    kv_dim = num_kv_heads * (d_model // num_heads)
    return 2 * d_model * d_model + 2 * d_model * kv_dim + 3 * d_model * d_ff + 2 * d_model


def decoder_lm_parameters(
    vocab_size: int, d_model: int, num_layers: int, d_ff: int, num_heads: int, num_kv_heads: int | None = None,
    tie_embeddings: bool = False,
) -> int:  # fmt: skip
    """``DecoderLM``: the embedding (vocab_size x d_model), the blocks, the final RMSNorm, and the readout (another
    vocab_size x d_model, unless tied to the embedding)."""
    check_positive_int("vocab_size", vocab_size, "a size")
    check_int("num_layers", num_layers, "Transformer blocks", minimum=0)
    check_bool("tie_embeddings", tie_embeddings, "whether the readout is the embedding")
    embeddings = vocab_size * d_model * (1 if tie_embeddings else 2)
    return embeddings + num_layers * pre_norm_block_parameters(d_model, d_ff, num_heads, num_kv_heads) + d_model


# --------------------------------------------------------------------------------------------
# Lesson 11: a BERT encoder, to load a pretrained model's weights (attnedu.pretrained)
# --------------------------------------------------------------------------------------------


class BertLayer(nn.Module):
    """One BERT encoder layer (Devlin et al. 2019): the post-norm block of Vaswani et al. (2017), Sec. 3.1, with
    GELU in the feed-forward layer and LayerNorm's eps from the checkpoint (1e-12):

        a = MultiHead(x, x, x, padding mask) W_O           (heads gated by ``head_gate`` before W_O, below)
        x = LayerNorm(x + a)                               Add & Norm
        x = LayerNorm(x + GELU(x W_1 + b_1) W_2 + b_2)     Add & Norm

    The arrangement of lesson 09's post-norm encoder block; only the activation and eps differ.

    forward(x (batch, seq_len, d_model), mask=None (batch, 1, 1, seq_len) bool, True at real tokens,
    head_gate=None (heads,)) -> (batch, seq_len, d_model), weights (batch, heads, seq_len, seq_len).
    ``head_gate`` multiplies each head's output before the heads are concatenated and projected by W_O: 0 removes
    a head (ablation), 1 keeps it.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, eps: float = 1e-12):
        super().__init__()
        check_positive_int("d_ff", d_ff, "the feed-forward width")
        eps = check_number("eps", eps, "LayerNorm's epsilon", 0.0, strict=True)
        self.attention = MultiHeadAttention(d_model, num_heads)
        self.norm1, self.norm2 = nn.LayerNorm(d_model, eps=eps), nn.LayerNorm(d_model, eps=eps)
        self.feed_forward = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, head_gate: torch.Tensor | None = None):
        attention = self.attention
        check_tensor("x", x, 3, "(batch, seq_len, d_model)")
        check_float("x", x)
        check_size("x", x, 2, attention.d_model, "d_model of this layer")
        check_same_dtype(x=x, weights=attention.W_q.weight)
        q = split_heads(attention.W_q(x), attention.num_heads)  # (batch, heads, seq_len, head_dim)
        k = split_heads(attention.W_k(x), attention.num_heads)
        v = split_heads(attention.W_v(x), attention.num_heads)
        heads, weights = scaled_dot_product_attention(q, k, v, mask)
        if head_gate is not None:
            check_tensor("head_gate", head_gate, 1, "(heads,): 1 keeps a head, 0 removes it")
            check_size("head_gate", head_gate, 0, attention.num_heads, "one gate per head")
            heads = heads * head_gate.to(heads.dtype)[None, :, None, None]
        x = self.norm1(x + attention.W_o(merge_heads(heads)))  # Add & Norm
        return self.norm2(x + self.feed_forward(x)), weights


class BertEncoder(nn.Module):
    """BERT's encoder: embeddings, then ``num_layers`` ``BertLayer``s.

        x_0 = LayerNorm(E_word[ids] + E_position[0 .. seq_len-1] + E_type[0])
        x_l = BertLayer_l(x_{l-1}),  l = 0 .. num_layers - 1 (layers count from 0)

    forward(ids (batch, seq_len), real=None (batch, seq_len) bool, True at real tokens (False at padding),
    head_gates=None (num_layers, heads)) -> hidden states (batch, seq_len, d_model), and the attention weights
    of every layer, a list of (batch, heads, seq_len, seq_len). Padding keys get weight 0 in every head; the
    hidden states at padding positions are computed but mean nothing. Load pretrained weights with
    ``attnedu.pretrained.load_bert_weights``.
    """

    def __init__(
        self, vocab_size: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, max_positions: int = 512,
        type_vocab_size: int = 2, eps: float = 1e-12,
    ):  # fmt: skip
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model), ("num_heads", num_heads),
                            ("num_layers", num_layers), ("max_positions", max_positions),
                            ("type_vocab_size", type_vocab_size)):  # fmt: skip
            check_positive_int(name, value, "a size")
        self.num_heads = num_heads
        self.word = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_positions, d_model)
        self.token_type = nn.Embedding(type_vocab_size, d_model)
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.layers = nn.ModuleList(BertLayer(d_model, num_heads, d_ff, eps) for _ in range(num_layers))

    def forward(self, ids: torch.Tensor, real: torch.Tensor | None = None, head_gates: torch.Tensor | None = None):
        check_ids("ids", ids, self.word.num_embeddings, 2, "(batch, seq_len) of token ids")
        batch, seq_len = ids.shape
        if seq_len > self.position.num_embeddings:
            raise ValueError(
                f"ids should be at most {self.position.num_embeddings} tokens long (the learned position table), got "
                f"{seq_len}; truncate the text"
            )
        mask = None
        if real is not None:
            check_bool_mask("real", real)
            if tuple(real.shape) != (batch, seq_len):
                raise ValueError(f"real should be (batch, seq_len) = {(batch, seq_len)}, True at real tokens, got "
                                 f"{describe(real)}")  # fmt: skip
            mask = real[:, None, None, :]  # (batch, 1, 1, seq_len): every head, every query
        if head_gates is not None:
            check_tensor("head_gates", head_gates, 2, "(num_layers, heads)")
            if tuple(head_gates.shape) != (len(self.layers), self.num_heads):
                raise ValueError(f"head_gates should be (num_layers, heads) = {(len(self.layers), self.num_heads)}, "
                                 f"got {describe(head_gates)}")  # fmt: skip
        positions = torch.arange(seq_len, device=ids.device)
        x = self.norm(self.word(ids) + self.position(positions) + self.token_type(torch.zeros_like(ids)))
        all_weights = []
        for index, layer in enumerate(self.layers):
            x, weights = layer(x, mask, None if head_gates is None else head_gates[index])
            all_weights.append(weights)
        return x, all_weights


class AttentionOnlyTransformer(nn.Module):
    """A causal language model with attention layers only (Elhage et al. 2021; Olsson et al. 2022): no feed-forward
    layers, no layer norms, so everything it computes is attention, added to the residual stream:

        x_0 = E[tokens] + P[0 .. seq_len-1]
        x_l = x_{l-1} + MultiHead_l(x_{l-1}, causal mask),   l = 0 .. num_layers - 1
        logits = x_L W_U

    forward(tokens (batch, seq_len), head_gates=None (num_layers, num_heads)) -> logits (batch, seq_len,
    vocab_size), and each layer's attention weights (batch, heads, seq_len, seq_len). ``head_gates`` multiplies each
    head's output before the heads are concatenated and projected by W_O, as in ``BertEncoder``: 0 removes a head
    (ablation, ``attnedu.heads.head_gates``), 1 keeps it:

        MultiHead_l(x) = concat_h(g_{l,h} * softmax(q_h k_h^T / sqrt(d_h) + causal) v_h) W_O
    """

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, num_layers: int, max_positions: int,
                 seed: int = 0):  # fmt: skip
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model), ("num_heads", num_heads),
                            ("num_layers", num_layers), ("max_positions", max_positions)):  # fmt: skip
            check_positive_int(name, value, "a size")
        with seeded(seed):
            self.embedding = nn.Embedding(vocab_size, d_model)
            self.positions = LearnedPositions(max_positions, d_model)
            self.layers = nn.ModuleList(MultiHeadAttention(d_model, num_heads) for _ in range(num_layers))
            self.unembedding = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor, head_gates: torch.Tensor | None = None):
        check_ids("tokens", tokens, self.embedding.num_embeddings, 2, "(batch, seq_len) of token ids")
        num_heads = self.layers[0].num_heads
        if head_gates is not None:
            check_tensor("head_gates", head_gates, 2, "(num_layers, num_heads): 1 keeps a head, 0 removes it")
            check_float("head_gates", head_gates)
            if tuple(head_gates.shape) != (len(self.layers), num_heads):
                raise ValueError(f"head_gates should be (num_layers, num_heads) = {(len(self.layers), num_heads)}, "
                                 f"got {describe(head_gates)}")  # fmt: skip
        seq_len = tokens.shape[1]
        x = self.embedding(tokens) + self.positions(seq_len)
        mask = causal_mask(seq_len, device=tokens.device)[None, None]
        all_weights = []
        for index, attention in enumerate(self.layers):
            if head_gates is None:
                attended, weights = attention(x, x, x, mask)
            else:  # the heads of MultiHeadAttention.forward, each scaled by its gate before W_O
                q, k, v = (split_heads(proj(x), num_heads) for proj in (attention.W_q, attention.W_k, attention.W_v))
                heads, weights = scaled_dot_product_attention(q, k, v, mask)
                gate = head_gates[index].to(device=heads.device, dtype=heads.dtype)
                attended = attention.W_o(merge_heads(heads * gate[None, :, None, None]))
            x = x + attended
            all_weights.append(weights)
        return self.unembedding(x), all_weights
