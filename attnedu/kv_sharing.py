"""Sharing keys and values (lesson 10, "Sharing keys and values: MQA and GQA", "Multi-head latent attention"): fewer
numbers per token in the cache.

Vectors are rows (q = x W_q); positions and heads count from 0. Shapes: batch B, query heads H, key/value heads H_kv
(H_kv divides H), queries n, keys m, head_dim d.

    grouped_attention(q, k, v, mask)   query head h reads key/value head h // (H / H_kv), as
                          torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)
    mean_pool_kv_heads(W, H, H_kv), to_grouped_query(model, H_kv)   MHA -> GQA by averaging the K/V projections of
                          each group of heads (Ainslie et al. 2023)
    mla_attention(...)    multi-head latent attention (DeepSeek-V2): c = x W_dkv (B, n, d_c) is cached, k = c W_uk,
                          v = c W_uv; ``absorbed=True`` folds W_uk into the queries and W_uv into W_o; W_qr, W_kr add
                          the decoupled RoPE part, one rotated key of d_r numbers per token, shared by the heads

What each variant stores per token is counted in ``attnedu.cache_sizes``. Each public function checks its arguments in
one call (the checks are at the end of this module), then runs the math; ``_grouped_attention`` and
``_mean_pool_kv_heads`` are the unchecked versions the package's own callers (``attnedu.kv_cache``) use.
"""

from __future__ import annotations

import math

import torch

from ._validate import (
    check_bool,
    check_bool_mask,
    check_choice,
    check_float,
    check_instance,
    check_positive_int,
    check_same_dtype,
    check_size,
    check_tensor,
    describe,
)
from ._validate_kv_cache import check_heads
from .attention import masked_softmax, scaled_dot_product_attention
from .multihead import _grouped_attention as _heads_attention
from .multihead import merge_heads, split_heads
from .positional import apply_rope


def grouped_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Grouped-query attention on heads: query head h reads key/value head h // group, group = H / H_kv, the pairing
    of ``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``. H_kv = H is multi-head attention,
    H_kv = 1 multi-query attention (Shazeer 2019).

    q (B, H, n, d); k, v (B, H_kv, m, d); mask None or bool (n, m) or broadcastable to (B, H, n, m), True = may
    attend -> (B, H, n, d). The K/V heads are repeated with ``repeat_interleave`` (head 0, 0, ..., 1, 1, ...): the
    cache holds H_kv heads, the arithmetic reads them H / H_kv times.
    """
    _check_grouped_attention(q, k, v, mask)
    return _grouped_attention(q, k, v, mask)


def _grouped_attention(q, k, v, mask=None):
    """``attnedu.multihead``'s grouped-query attention (its one home), the heads only; a mask (n, m) serves every
    sequence and head."""
    if mask is not None and mask.dim() == 2:
        mask = mask[None, None]  # (1, 1, n, m): every sequence, every head
    return _heads_attention(q, k, v, mask)[0]


def mean_pool_kv_heads(W: torch.Tensor, num_heads: int, num_kv_heads: int, pool: str = "mean") -> torch.Tensor:
    """W (d_model, H * d), a key or value projection applied as x @ W, -> (d_model, H_kv * d): the columns of each
    group of H / H_kv consecutive heads averaged, so new K/V head g is the mean of old heads g*group .. g*group+group-1
    (the query heads that will share it). ``pool="first"`` keeps the first head of each group instead (the
    alternative Ainslie et al. compare mean-pooling with)."""
    num_heads, num_kv_heads = _check_mean_pool_kv_heads(W, num_heads, num_kv_heads, pool)
    return _mean_pool_kv_heads(W, num_heads, num_kv_heads, pool)


def _mean_pool_kv_heads(W, num_heads, num_kv_heads, pool="mean"):
    d_model, head_dim = W.shape[0], W.shape[1] // num_heads
    groups = W.view(d_model, num_kv_heads, num_heads // num_kv_heads, head_dim)
    return (groups.mean(dim=2) if pool == "mean" else groups[:, :, 0]).reshape(d_model, -1)


@torch.no_grad()
def to_grouped_query(model, num_kv_heads: int, pool: str = "mean"):
    """A copy of the DecoderLM ``model`` (multi-head) with ``num_kv_heads`` key/value heads per block, their W_k and
    W_v mean-pooled over each group (``mean_pool_kv_heads``; ``pool="first"``: the first head of each group kept);
    every other weight copied unchanged."""
    from .blocks import DecoderLM

    num_kv_heads = _check_to_grouped_query(model, num_kv_heads, pool)
    first = model.blocks[0].attention
    new = DecoderLM(model.embedding.num_embeddings, first.d_model, first.num_heads, len(model.blocks),
                    model.blocks[0].feed_forward.up.weight.shape[0], num_kv_heads, model.tie_embeddings,
                    model.norm.eps)  # fmt: skip
    state = dict(model.state_dict())
    for i in range(len(model.blocks)):
        for name in ("W_k", "W_v"):
            key = f"blocks.{i}.attention.{name}.weight"  # nn.Linear's weight is (out, in): pool its transpose
            state[key] = _mean_pool_kv_heads(state[key].T, first.num_heads, num_kv_heads, pool).T.contiguous()
    new.load_state_dict(state)
    return new.eval()


def mla_attention(
    x,
    W_q,
    W_dkv,
    W_uk,
    W_uv,
    W_o,
    num_heads: int,
    mask=None,
    absorbed: bool = False,
    W_qr=None,
    W_kr=None,
):
    """Multi-head latent attention (DeepSeek-V2, Sec. 2.1), with or without its decoupled RoPE part:

        c = x W_dkv (B, n, d_c)      cached: d_c numbers per token and layer, for all heads
        q = x W_q,  k = c W_uk,  v = c W_uv, each split into H heads of d
        o = Concat_h softmax(q_h k_h^T / sqrt(d)) v_h  W_o

    absorbed=True computes the same without ever forming k or v: q_h k_h^T = (q_h W_uk,h^T) c^T, so each head's query
    moves into the latent space (d_c), and softmax(...) v_h W_o,h = (softmax(...) c) (W_uv,h W_o,h), one folded
    matrix per head.

    Decoupled RoPE (W_qr and W_kr given). RoPE on k = c W_uk would break the first fold: the score would be
    q_h R_(i-j) W_uk,h^T c_j^T, with a rotation that depends on the pair (i, j) between the query and the latent, so
    no single matrix can be folded into the query. DeepSeek-V2 leaves the content part without positions and adds a
    small separate part that carries them:

        q^R = RoPE(x W_qr) (H heads of d_r),  k^R = RoPE(x W_kr) (B, n, d_r), one key shared by all heads
        score_h(i, j) = (q_h,i k_h,j^T + q^R_h,i k^R_j^T) / sqrt(d + d_r)

    so the cache holds c and k^R: d_c + d_r numbers per token and layer (``mla_cache_bytes``), and the absorbed form
    still works for the content part.

    x (B, n, d_model); W_q (d_model, H d); W_dkv (d_model, d_c); W_uk, W_uv (d_c, H d); W_o (H d, d_model); mask None
    or bool (n, n); W_qr (d_model, H d_r) and W_kr (d_model, d_r), both or neither, d_r even; positions 0..n-1.
    Returns output (B, n, d_model), latent c (B, n, d_c), and k^R (B, n, d_r) rotated (None without RoPE): the two
    tensors a cache would keep.
    """
    num_heads, rope_dim = _check_mla_attention(x, W_q, W_dkv, W_uk, W_uv, W_o, num_heads, mask, absorbed, W_qr, W_kr)
    n = x.shape[1]
    latent, head_dim = W_dkv.shape[1], W_q.shape[1] // num_heads
    rope = W_kr is not None
    c = x @ W_dkv  # (B, n, d_c)
    q = split_heads(x @ W_q, num_heads)  # (B, H, n, d)
    k_rope, q_rope, scale = None, None, head_dim
    if rope:
        positions = torch.arange(n)
        q_rope = apply_rope(split_heads(x @ W_qr, num_heads), positions)  # (B, H, n, d_r)
        k_rope = apply_rope(x @ W_kr, positions)  # (B, n, d_r): one key for all heads
        scale = head_dim + rope_dim
    if not absorbed:  # the paper's form: each head's query and key are [content; rope], concatenated
        k, v = split_heads(c @ W_uk, num_heads), split_heads(c @ W_uv, num_heads)
        if rope:
            q = torch.cat([q, q_rope], dim=-1)
            k = torch.cat([k, k_rope[:, None].expand(-1, num_heads, -1, -1)], dim=-1)
        heads, _ = scaled_dot_product_attention(q, k, v, None if mask is None else mask[None, None])
        return merge_heads(heads) @ W_o, c, k_rope
    W_uk_heads = W_uk.view(latent, num_heads, head_dim)  # (d_c, H, d)
    q_latent = torch.einsum("bhnd,chd->bhnc", q, W_uk_heads)  # each head's query in the latent space
    scores = q_latent @ c[:, None].transpose(-2, -1)  # (B, H, n, n), the content part
    if rope:
        scores = scores + q_rope @ k_rope[:, None].transpose(-2, -1)  # plus the position part, from the shared key
    weights = masked_softmax(scores / math.sqrt(scale), None if mask is None else mask.expand_as(scores))
    read = weights @ c[:, None]  # (B, H, n, d_c): each head reads the latents
    W_uv_o = torch.einsum("chd,hde->hce", W_uv.view(latent, num_heads, head_dim), W_o.view(num_heads, head_dim, -1))
    return torch.einsum("bhnc,hce->bne", read, W_uv_o), c, k_rope


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_grouped_attention(q, k, v, mask) -> None:
    check_heads(q, k, v)
    if mask is not None:
        check_bool_mask("mask", mask)


def _check_mean_pool_kv_heads(W, num_heads, num_kv_heads, pool) -> tuple[int, int]:
    check_tensor("W", W, 2, "(d_model, num_heads * head_dim)")
    check_float("W", W)
    num_heads = check_positive_int("num_heads", num_heads, "the heads of W")
    num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads, "the K/V heads to keep")
    if W.shape[1] % num_heads or num_heads % num_kv_heads:
        raise ValueError(f"num_heads should divide W's {W.shape[1]} columns and num_kv_heads should divide "
                         f"num_heads, got num_heads={num_heads}, num_kv_heads={num_kv_heads}")  # fmt: skip
    check_choice("pool", pool, ("mean", "first"))
    return num_heads, num_kv_heads


def _check_to_grouped_query(model, num_kv_heads, pool) -> int:
    from .blocks import DecoderLM

    check_instance("model", model, DecoderLM, "an attnedu.blocks.DecoderLM")
    first = model.blocks[0].attention
    if first.num_kv_heads != first.num_heads:
        raise ValueError(f"model should be multi-head (num_kv_heads == num_heads), got {first.num_kv_heads} K/V heads "
                         f"for {first.num_heads} query heads")  # fmt: skip
    num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads, "K/V heads to keep")
    check_choice("pool", pool, ("mean", "first"))
    if first.num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads should divide num_heads={first.num_heads}, got {num_kv_heads}")
    return num_kv_heads


def _check_mla_attention(x, W_q, W_dkv, W_uk, W_uv, W_o, num_heads, mask, absorbed, W_qr, W_kr) -> tuple[int, int]:
    """-> num_heads, rope_dim (0 without the decoupled RoPE part)."""
    check_tensor("x", x, 3, "(batch, n, d_model)")
    check_float("x", x)
    num_heads = check_positive_int("num_heads", num_heads, "query heads")
    check_bool("absorbed", absorbed, "whether to fold the up-projections into the queries and W_o")
    d_model = x.shape[-1]
    check_tensor("W_dkv", W_dkv, 2, "(d_model, latent_dim)")
    latent = W_dkv.shape[1]
    check_tensor("W_q", W_q, 2, "(d_model, num_heads * head_dim)")
    width = W_q.shape[1]
    if width % num_heads:
        raise ValueError(f"num_heads should divide W_q's {width} columns, got num_heads={num_heads}")
    shapes = [("W_q", W_q, (d_model, width)), ("W_dkv", W_dkv, (d_model, latent)), ("W_uk", W_uk, (latent, width)),
               ("W_uv", W_uv, (latent, width)), ("W_o", W_o, (width, d_model))]  # fmt: skip
    if (W_qr is None) != (W_kr is None):
        raise ValueError(
            "W_qr and W_kr should be given together (the decoupled RoPE query and key projections) or not at all, "
            f"got W_qr {describe(W_qr)} and W_kr {describe(W_kr)}"
        )
    rope = W_kr is not None
    if rope:
        check_tensor("W_kr", W_kr, 2, "(d_model, rope_dim)")
        rope_dim = W_kr.shape[1]
        if rope_dim % 2:
            raise ValueError(f"W_kr should have an even number of columns (RoPE turns pairs), got {describe(W_kr)}")
        shapes += [("W_qr", W_qr, (d_model, num_heads * rope_dim)), ("W_kr", W_kr, (d_model, rope_dim))]
    for name, W, shape in shapes:
        check_tensor(name, W, 2, str(shape))
        if tuple(W.shape) != shape:
            raise ValueError(f"{name} should be {shape} (applied as x @ {name}), got {describe(W)}")
    check_same_dtype(x=x, **{name: W for name, W, _ in shapes})
    n = x.shape[1]
    if mask is not None:
        check_bool_mask("mask", mask)
        check_tensor("mask", mask, 2, "(n, n)")
        check_size("mask", mask, 0, n, "n queries")
        check_size("mask", mask, 1, n, "n keys")
    return num_heads, W_kr.shape[1] if rope else 0
