"""Additive (Bahdanau) attention, one step at a time.

Notation of lesson 02 (Bahdanau et al. 2015, Sec. 3.1 and Appendix A.1.2):

    e_tj     = v_a^T tanh(W_a s_{t-1} + U_a h_j)     score of source position j at step t
    alpha_tj = exp(e_tj) / sum_k exp(e_tk)            softmax over source positions
    c_t      = sum_j alpha_tj h_j                     context vector

Padded source positions get exactly zero weight.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_size, check_tensor


def additive_score(
    query: torch.Tensor, keys: torch.Tensor, W_a: torch.Tensor, U_a: torch.Tensor, v_a: torch.Tensor
) -> torch.Tensor:
    """e_j = v_a^T tanh(W_a s + U_a h_j) for every source position j.

    query: (batch, dec_dim)            the previous decoder state s_{t-1}
    keys:  (batch, src_len, enc_dim)   the encoder annotations h_j
    W_a:   (attn_dim, dec_dim)
    U_a:   (attn_dim, enc_dim)
    v_a:   (attn_dim,)
    returns scores: (batch, src_len)
    """
    check_tensor("query", query, 2, "(batch, dec_dim)")
    check_tensor("keys", keys, 3, "(batch, src_len, enc_dim)")
    check_size("keys", keys, 0, query.shape[0], "the batch size of query")
    check_size("W_a", W_a, 1, query.shape[1], "dec_dim, the size of the decoder state", "W_a is (attn_dim, dec_dim)")
    check_size("U_a", U_a, 1, keys.shape[2], "enc_dim, the size of an annotation", "U_a is (attn_dim, enc_dim)")
    check_size("U_a", U_a, 0, W_a.shape[0], "attn_dim, the rows of W_a")
    check_size("v_a", v_a.reshape(-1), 0, W_a.shape[0], "attn_dim, the rows of W_a")
    projected_keys = keys @ U_a.T  # (batch, src_len, attn_dim)
    return additive_score_projected(query @ W_a.T, projected_keys, v_a)


def additive_score_projected(
    projected_query: torch.Tensor, projected_keys: torch.Tensor, v_a: torch.Tensor
) -> torch.Tensor:
    """The same score when W_a s and U_a h_j are already computed.

    U_a h_j does not depend on t, so a decoder computes it once per sentence.
    projected_query: (batch, attn_dim), projected_keys: (batch, src_len, attn_dim) -> (batch, src_len)
    """
    return torch.tanh(projected_query[:, None, :] + projected_keys) @ v_a.reshape(-1)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last axis (source positions), with masked positions at exactly zero.

    scores: (batch, src_len); mask: (batch, src_len) bool, True = may attend (or None).
    A row with no position allowed gives all zeros, not NaN.
    """
    check_tensor("scores", scores, 2, "(batch, src_len)")
    if mask is None:
        return torch.softmax(scores, dim=-1)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
    if mask.shape != scores.shape:
        raise ValueError(
            f"mask has shape {tuple(mask.shape)} but scores have shape {tuple(scores.shape)}; "
            "they must match exactly (no broadcasting), one entry per source position"
        )
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return weights.nan_to_num(0.0)  # fully masked rows: softmax of all -inf is NaN


def context_vector(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """c = sum_j alpha_j h_j.  weights: (batch, src_len), values: (batch, src_len, enc_dim) -> (batch, enc_dim)."""
    check_tensor("weights", weights, 2, "(batch, src_len)")
    check_tensor("values", values, 3, "(batch, src_len, enc_dim)")
    if weights.shape != values.shape[:2]:
        raise ValueError(
            f"weights have shape {tuple(weights.shape)} but values have (batch, src_len) = "
            f"{tuple(values.shape[:2])}; there must be one weight per source position"
        )
    return (weights[:, :, None] * values).sum(dim=1)


class AdditiveAttention(nn.Module):
    """Bahdanau attention with learned W_a, U_a, v_a.

    v_a starts at zero, as in Bahdanau et al. (Appendix B.2), so attention starts uniform;
    W_a and U_a use the usual 1/sqrt(fan_in) scale rather than the paper's N(0, 0.001^2).
    """

    def __init__(self, dec_dim: int, enc_dim: int, attn_dim: int):
        super().__init__()
        self.dec_dim, self.enc_dim, self.attn_dim = dec_dim, enc_dim, attn_dim
        self.W_a = nn.Parameter(torch.randn(attn_dim, dec_dim) * dec_dim**-0.5)
        self.U_a = nn.Parameter(torch.randn(attn_dim, enc_dim) * enc_dim**-0.5)
        self.v_a = nn.Parameter(torch.zeros(attn_dim))

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """(batch, src_len, enc_dim) -> U_a h_j: (batch, src_len, attn_dim), once per sentence."""
        check_tensor("keys", keys, 3, "(batch, src_len, enc_dim)")
        check_size("keys", keys, 2, self.enc_dim, "enc_dim this attention was built with")
        return keys @ self.U_a.T

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        mask: torch.Tensor | None = None,
        projected_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query (batch, dec_dim), keys (batch, src_len, enc_dim), mask (batch, src_len)
        -> context (batch, enc_dim), weights (batch, src_len)."""
        check_tensor("query", query, 2, "(batch, dec_dim)")
        check_size("query", query, 1, self.dec_dim, "dec_dim this attention was built with")
        if projected_keys is None:
            projected_keys = self.project_keys(keys)
        scores = additive_score_projected(query @ self.W_a.T, projected_keys, self.v_a)
        weights = masked_softmax(scores, mask)
        return context_vector(weights, keys), weights
