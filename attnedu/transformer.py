"""Small attention models for the Transformer lessons, and the parameter counts of big ones.

RecallHead            lesson 04: one head of dot-product attention from a question to key-value pairs, with or
                      without the division by sqrt(head_dim)
AttentionClassifier   lesson 05: embeddings + learned positions, one multi-head attention, a linear
                      readout per output slot (no feed-forward layer, so the attention alone must
                      carry what the readout needs)
attention_parameters, block_parameters   counts from the formulas, checked against real modules
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validate import check_bool, check_choice, check_ids, check_int, check_positive_int
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


class RecallHead(nn.Module):
    """One head of attention answering ``attnedu.tasks.recall_task`` (lesson 04's sqrt(d_k) experiment).

    x_j = E_key k_j + E_value v_j for each pair, q = E_key question; with vectors as rows,
    scores_j = (q W_Q) . (x_j W_K) / sqrt(head_dim) (or without the division when ``scaled`` is False),
    a = softmax(scores), logits = (sum_j a_j x_j W_V) W_out.
    Embeddings have standard normal entries and W_Q, W_K, W_V standard deviation 1 / sqrt(d_model), so that the
    query and key components have variance about 1 and 2 at initialisation; W_out has 1 / sqrt(head_dim).
    forward(keys (batch, pairs), values (batch, pairs), question (batch,)) -> logits (batch, vocab),
    scores (batch, pairs) before the softmax.
    """

    def __init__(self, vocab: int, d_model: int, head_dim: int, scaled: bool, seed: int = 0):
        super().__init__()
        for name, value in (("vocab", vocab), ("d_model", d_model), ("head_dim", head_dim)):
            check_positive_int(name, value, "a size")
        self.scale = (
            1 / math.sqrt(head_dim) if check_bool("scaled", scaled, "whether to divide by sqrt(head_dim)") else 1.0
        )
        with seeded(seed):
            self.key_embedding = nn.Parameter(torch.randn(vocab, d_model))
            self.value_embedding = nn.Parameter(torch.randn(vocab, d_model))
            self.W_Q, self.W_K, self.W_V = (nn.Parameter(torch.randn(d_model, head_dim) / math.sqrt(d_model))
                                            for _ in range(3))  # fmt: skip
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

    def forward(self, x: torch.Tensor, mask=None, bias=None, rope_positions=None):
        """x (batch, seq_len, d_model) -> (batch, seq_len, d_model), weights (batch, heads, seq_len, seq_len)."""
        normed = self.norm1(x)
        attended, weights = self.attention(normed, normed, normed, mask, bias=bias, rope_positions=rope_positions)
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

    def forward(self, tokens: torch.Tensor, causal: bool | None = None, return_weights: bool = False):
        """-> logits (batch, seq_len, n_out); with ``return_weights``, also each block's attention weights."""
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
        rope = torch.arange(seq_len) if self.positions == "rope" else None
        all_weights = []
        for block in self.blocks:
            x, weights = block(x, mask, bias, rope)
            all_weights.append(weights)
        logits = self.head(self.norm(x))
        return (logits, all_weights) if return_weights else logits
