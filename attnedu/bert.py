"""BERT's encoder (lesson 11; Devlin et al. 2019), the network ``attnedu.pretrained`` loads a pretrained model into.

BertLayer                 the post-norm encoder block of lesson 09 with GELU and LayerNorm's eps from the checkpoint
BertEncoder               the embeddings (words, positions, token types) and a stack of BertLayers
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import (
    check_bool_mask,
    check_finite,
    check_float,
    check_ids,
    check_number,
    check_positive_int,
    check_same_dtype,
    check_size,
    check_tensor,
    describe,
)
from .multihead import MultiHeadAttention


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
        if head_gate is not None:
            check_tensor("head_gate", head_gate, 1, "(heads,): 1 keeps a head, 0 removes it")
            check_size("head_gate", head_gate, 0, attention.num_heads, "one gate per head")
        return self._forward(x, mask, head_gate)

    def _forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, head_gate: torch.Tensor | None = None):
        attended, weights = self.attention._attend(x, x, x, mask, head_gate=head_gate)  # heads gated before W_O
        x = self.norm1(x + attended)  # Add & Norm
        return self.norm2(x + self.feed_forward(x)), weights


class BertEncoder(nn.Module):
    """BERT's encoder: embeddings, then ``num_layers`` ``BertLayer``s.

        x_0 = LayerNorm(E_word[ids] + E_position[0 .. seq_len-1] + E_type[types])
        x_l = BertLayer_l(x_{l-1}),  l = 0 .. num_layers - 1 (layers count from 0)

    forward(ids (batch, seq_len), real=None (batch, seq_len) bool, True at real tokens (False at padding),
    head_gates=None (num_layers, heads), types=None (batch, seq_len) token types: 0 for a first segment, 1 for a
    second, all 0 when None) -> hidden states (batch, seq_len, d_model), and the attention weights
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

    def forward(
        self, ids: torch.Tensor, real: torch.Tensor | None = None, head_gates: torch.Tensor | None = None,
        types: torch.Tensor | None = None,
    ):  # fmt: skip
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
            check_float("head_gates", head_gates)
            if tuple(head_gates.shape) != (len(self.layers), self.num_heads):
                raise ValueError(f"head_gates should be (num_layers, heads) = {(len(self.layers), self.num_heads)}, "
                                 f"got {describe(head_gates)}")  # fmt: skip
            check_finite("head_gates", head_gates, "1 keeps a head, 0 removes it")
        if types is None:
            types = torch.zeros_like(ids)
        else:
            check_ids("types", types, self.token_type.num_embeddings, 2, "(batch, seq_len) of token types")
            if tuple(types.shape) != (batch, seq_len):
                raise ValueError(f"types should be (batch, seq_len) = {(batch, seq_len)} like ids, got "
                                 f"{describe(types)}")  # fmt: skip
        positions = torch.arange(seq_len, device=ids.device)
        x = self.norm(self.word(ids) + self.position(positions) + self.token_type(types))
        all_weights = []
        for index, layer in enumerate(self.layers):
            x, weights = layer(x, mask, None if head_gates is None else head_gates[index])
            all_weights.append(weights)
        return x, all_weights
