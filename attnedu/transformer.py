"""Small attention models for the Transformer lessons, and the parameter counts of big ones.

AttentionClassifier   lesson 05: embeddings + learned positions, one multi-head attention, a linear
                      readout per output slot (no feed-forward layer, so the attention alone must
                      carry what the readout needs)
attention_parameters, block_parameters   counts from the formulas, checked against real modules
BertLayer, BertEncoder   lesson 11: BERT's post-norm encoder (GELU), to load a pretrained model into
AttentionOnlyTransformer   lesson 11: attention layers only, causal; where induction heads form
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import (
    check_bool,
    check_bool_mask,
    check_choice,
    check_float,
    check_ids,
    check_int,
    check_number,
    check_positive_int,
    check_same_dtype,
    check_size,
    check_tensor,
    describe,
)
from .attention import scaled_dot_product_attention
from .masks import causal_mask
from .multihead import MultiHeadAttention, merge_heads, split_heads
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
        rope_positions: torch.Tensor | None = None, rope_base: float = 10000.0,
    ):  # fmt: skip
        """-> logits (batch, seq_len, n_out); with ``return_weights``, also each block's attention weights.

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

    forward(tokens (batch, seq_len)) -> logits (batch, seq_len, vocab_size), and each layer's attention weights
    (batch, heads, seq_len, seq_len).
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

    def forward(self, tokens: torch.Tensor):
        check_ids("tokens", tokens, self.embedding.num_embeddings, 2, "(batch, seq_len) of token ids")
        seq_len = tokens.shape[1]
        x = self.embedding(tokens) + self.positions(seq_len)
        mask = causal_mask(seq_len, device=tokens.device)[None, None]
        all_weights = []
        for attention in self.layers:
            attended, weights = attention(x, x, x, mask)
            x = x + attended
            all_weights.append(weights)
        return self.unembedding(x), all_weights
