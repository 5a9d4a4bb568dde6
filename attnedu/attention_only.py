"""An attention-only language model (lesson 11; Elhage et al. 2021, Olsson et al. 2022), where induction heads form
(``attnedu.induction.train_induction`` trains it, ``attnedu.head_scores`` and ``induction`` measure and
ablate its heads)."""

from __future__ import annotations

import torch
from torch import nn

from ._validate import (
    check_float,
    check_ids,
    check_positive_int,
    check_tensor,
    describe,
)
from .masks import causal_mask
from .multihead import MultiHeadAttention
from .positional import LearnedPositions
from .runtime import seeded


class AttentionOnlyTransformer(nn.Module):
    """A causal language model with attention layers only (Elhage et al. 2021; Olsson et al. 2022): no feed-forward
    layers, no layer norms, so everything it computes is attention, added to the residual stream:

        x_0 = E[tokens] + P[0 .. seq_len-1]
        x_l = x_{l-1} + MultiHead_l(x_{l-1}, causal mask),   l = 0 .. num_layers - 1
        logits = x_L W_U

    forward(tokens (batch, seq_len), head_gates=None (num_layers, num_heads)) -> logits (batch, seq_len,
    vocab_size), and each layer's attention weights (batch, heads, seq_len, seq_len). ``head_gates`` multiplies each
    head's output before the heads are concatenated and projected by W_O, as in ``BertEncoder``: 0 removes a head
    (ablation, ``attnedu.head_scores.head_gates``), 1 keeps it:

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
        for index, attention in enumerate(self.layers):  # each head scaled by its gate before W_O
            gate = None if head_gates is None else head_gates[index]
            attended, weights = attention._attend(x, x, x, mask, head_gate=gate)
            x = x + attended
            all_weights.append(weights)
        return self.unembedding(x), all_weights
