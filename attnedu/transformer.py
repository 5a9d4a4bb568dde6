"""Small attention models for the Transformer lessons, and the parameter counts of big ones.

AttentionClassifier   lesson 05: embeddings + learned positions, one multi-head attention, a linear
                      readout per output slot (no feed-forward layer, so the attention alone must
                      carry what the readout needs)
attention_parameters, block_parameters   counts from the formulas, checked against real modules
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_bool, check_choice, check_ids, check_int, check_number, check_positive_int, describe
from .masks import causal_mask
from .multihead import MultiHeadAttention
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
