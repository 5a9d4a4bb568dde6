"""Linear attention (lesson 10, Katharopoulos et al. 2020): phi(x) = elu(x) + 1 and

    o_i = phi(q_i) S / (phi(q_i) z),   S = sum_j phi(k_j)^T v_j  (d x d_v),   z = sum_j phi(k_j)^T

so the cost grows like N d d_v instead of N^2 d, and what the keys held is squeezed into one d x d_v matrix.

Each public function checks its arguments in one call (the checks are at the end of this module), then the math.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_bool, check_float, check_same_dtype, check_tensor, describe


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1 > 0, the feature map of Katharopoulos et al."""
    _check_elu_feature_map(x)
    return nn.functional.elu(x) + 1.0


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Linear attention: o_i = phi(q_i) S / (phi(q_i) z), S = sum_j phi(k_j)^T v_j (d x d_v), z = sum_j phi(k_j),
    the sums over all keys, or over j <= i if ``causal`` (running sums: the "RNN" form, a state of d x d_v numbers
    however long the sequence). Time and memory grow like N d d_v, not N^2.

    q (..., N, d), k (..., M, d), v (..., M, d_v) -> (..., N, d_v); causal needs N == M."""
    _check_linear_attention(q, k, v, causal)
    fq, fk = nn.functional.elu(q) + 1.0, nn.functional.elu(k) + 1.0  # phi, elu_feature_map
    if not causal:
        state = fk.transpose(-2, -1) @ v  # (..., d, d_v)
        return (fq @ state) / (fq @ fk.sum(dim=-2)[..., None])
    states = torch.cumsum(fk[..., :, None] * v[..., None, :], dim=-3)  # (..., N, d, d_v): S after each key
    norms = torch.cumsum(fk, dim=-2)  # (..., N, d)
    numerator = (fq[..., None, :] @ states).squeeze(-2)
    return numerator / (fq * norms).sum(-1, keepdim=True)


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_elu_feature_map(x) -> None:
    check_tensor("x", x, (1, 2, 3, 4, 5), "(..., d)")
    check_float("x", x)


def _check_linear_attention(q, k, v, causal) -> None:
    check_tensor("q", q, (3, 4), "(..., N, d)")
    check_tensor("k", k, (3, 4), "(..., M, d)")
    check_tensor("v", v, (3, 4), "(..., M, d_v)")
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_float(name, x)
    check_same_dtype(q=q, k=k, v=v)
    check_bool("causal", causal, "whether query i reads keys j <= i only")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q, k, v should share leading dims, k and v their length, q and k head_dim; got q "
                         f"{describe(q)}, k {describe(k)}, v {describe(v)}")  # fmt: skip
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(f"causal linear attention needs as many queries as keys, got q {describe(q)}, k {describe(k)}")
