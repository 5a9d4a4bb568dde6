"""Multi-head attention (lesson 05; Vaswani et al. 2017, Sec. 3.2.2):

    head_i   = Attention(Q W_i^Q, K W_i^K, V W_i^V)        i = 0..h-1, each of size head_dim = d_model / h
    MultiHead(Q, K, V) = Concat(head_0, ..., head_{h-1}) W^O

The h projections W_i^Q are one (d_model, d_model) matrix whose output is cut into h slices of
head_dim: ``split_heads`` does the cutting, ``merge_heads`` the concatenation. ``head_dim`` is the
paper's d_k. Heads are counted from 0 in code.

    multi_head_attention(...)     the formula above with the weights passed in (vectors are rows: Q = X W_q)
    grouped_query_attention(...)  fewer key/value heads than query heads, each shared by a group (Ainslie et al. 2023)
    per_head_weights(...)         torch.nn.MultiheadAttention's stacked in_proj_weight as h separate W_i^Q, W_i^K, W_i^V
    MultiHeadAttention            the module, with nn.Linear projections; equal to torch.nn.MultiheadAttention
                                  (num_kv_heads < num_heads: grouped-query, as today's decoder blocks use, lesson 09).
                                  Every model of the course attends through it: its ``head_gate`` scales each head
                                  before W^O (ablation, lesson 11), and the models' own forward passes call its
                                  unchecked ``_attend``, which can also read and fill a KV cache (lesson 10)
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import (
    check_bool,
    check_finite,
    check_float,
    check_instance,
    check_positive_int,
    check_same_dtype,
    check_size,
    check_tensor,
    describe,
)
from .attention import scaled_dot_product_attention
from .positional import apply_rope


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(batch, seq_len, d_model) -> (batch, num_heads, seq_len, head_dim), head h = features h*head_dim ... ."""
    check_tensor("x", x, 3, "(batch, seq_len, d_model)")
    num_heads = check_positive_int("num_heads", num_heads, "the number of heads")
    batch, seq_len, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(
            f"num_heads should divide d_model, got num_heads={num_heads}, which does not divide "
            f"d_model={d_model}: head_dim would not be an integer; "
            "choose a number of heads that divides d_model"
        )
    return _split_heads(x, num_heads)


def _split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, num_heads, d_model // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(batch, num_heads, seq_len, head_dim) -> (batch, seq_len, num_heads * head_dim): the heads side by side."""
    check_tensor("x", x, 4, "(batch, num_heads, seq_len, head_dim)")
    return _merge_heads(x)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, num_heads, seq_len, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, num_heads * head_dim)


def _grouped_attention(q, k, v, mask=None, bias=None):
    """Attention of H query heads over H_kv key/value heads, H_kv dividing H: query head h reads key/value head
    h // (H / H_kv), the pairing of ``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``.
    q (batch, H, query_len, head_dim); k, v (batch, H_kv, key_len, head_dim); mask and bias as
    ``scaled_dot_product_attention`` takes them -> heads (batch, H, query_len, head_dim), weights (batch, H,
    query_len, key_len). The one home of grouped-query attention: the functions and modules here, the decoder blocks
    and ``attnedu.kv_cache``'s caches all call it (unchecked; their public callers check)."""
    group = q.shape[1] // k.shape[1]  # query heads per key/value head (1: multi-head attention)
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (batch, H, key_len, head_dim)
    return scaled_dot_product_attention(q, k, v, mask, bias=bias)


def multi_head_attention(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads: int):
    """MultiHead(Q, K, V) = Concat(head_0, ..., head_{h-1}) W_o, head_i = Attention(Q W_q^i, K W_k^i, V W_v^i).

    query (batch, query_len, d_model), key and value (batch, key_len, d_model), mask None or (batch, query_len,
    key_len) bool (True = may attend), the same for every head; W_q, W_k, W_v, W_o (d_model, d_model), applied as
    x @ W (vectors are rows). -> output (batch, query_len, d_model), weights (batch, num_heads, query_len, key_len).
    """
    return grouped_query_attention(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_heads)


def grouped_query_attention(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads: int, num_kv_heads: int):
    """Grouped-query attention (Ainslie et al. 2023): num_kv_heads key/value heads, each shared by a group of
    num_heads // num_kv_heads consecutive query heads: query head h uses key/value head h // group, as
    ``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)`` pairs them. num_kv_heads = num_heads
    is multi-head attention, num_kv_heads = 1 multi-query attention (Shazeer 2019).

    query (batch, query_len, d_model), key and value (batch, key_len, d_model), mask None or (batch, query_len,
    key_len) bool; W_q, W_o (d_model, d_model); W_k, W_v (d_model, num_kv_heads * head_dim) with
    head_dim = d_model // num_heads. -> output (batch, query_len, d_model), weights (batch, num_heads, query_len,
    key_len).
    """
    for name, x, length in (("query", query, "query_len"), ("key", key, "key_len"), ("value", value, "key_len")):
        check_tensor(name, x, 3, f"(batch, {length}, d_model)")
        check_float(name, x)
    batch, query_len, d_model = query.shape
    num_heads = check_positive_int("num_heads", num_heads, "the number of query heads")
    num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads, "the number of key/value heads")
    if d_model % num_heads or num_heads % num_kv_heads:
        raise ValueError(
            f"num_heads should divide d_model and num_kv_heads should divide num_heads, got d_model={d_model}, "
            f"num_heads={num_heads}, num_kv_heads={num_kv_heads}: every head needs head_dim = d_model // num_heads "
            "features, and every key/value head the same number of query heads"
        )
    kv_dim = num_kv_heads * (d_model // num_heads)
    for name, W, cols in (("W_q", W_q, d_model), ("W_k", W_k, kv_dim), ("W_v", W_v, kv_dim), ("W_o", W_o, d_model)):
        check_tensor(name, W, 2, f"(d_model, {cols})")
        if tuple(W.shape) != (d_model, cols):
            raise ValueError(f"{name} should be (d_model, {cols}) = {(d_model, cols)}, applied as x @ {name}, got "
                             f"{describe(W)}")  # fmt: skip
    check_same_dtype(query=query, key=key, value=value, W_q=W_q, W_k=W_k, W_v=W_v, W_o=W_o)
    if (
        key.shape[0] != batch
        or value.shape[:2] != key.shape[:2]
        or key.shape[2] != d_model
        or value.shape[2] != d_model
    ):
        raise ValueError(f"key and value should be (batch, key_len, d_model) with query's batch and d_model, got "
                         f"query {describe(query)}, key {describe(key)}, value {describe(value)}")  # fmt: skip
    if mask is not None:
        check_tensor("mask", mask, 3, "(batch, query_len, key_len)")
        if tuple(mask.shape) != (batch, query_len, key.shape[1]):
            raise ValueError(f"mask should be (batch, query_len, key_len) = {(batch, query_len, key.shape[1])}, "
                             f"the same for every head, got {describe(mask)}")  # fmt: skip
    return _grouped_query_attention(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads)


def _grouped_query_attention(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    q = _split_heads(query @ W_q, num_heads)  # (batch, num_heads, query_len, head_dim)
    k = _split_heads(key @ W_k, num_kv_heads)  # (batch, num_kv_heads, key_len, head_dim)
    v = _split_heads(value @ W_v, num_kv_heads)
    mask = None if mask is None else mask[:, None]  # (batch, 1, query_len, key_len): one mask for every head
    heads, weights = _grouped_attention(q, k, v, mask)
    return _merge_heads(heads) @ W_o, weights


def per_head_weights(in_proj_weight: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``torch.nn.MultiheadAttention``'s ``in_proj_weight`` as h separate projections per head.

    in_proj_weight: (3 d_model, d_model), the query, key and value projections stacked in that order, each in
    nn.Linear's layout (out_features, in_features): q = x @ in_proj_weight[:d_model].T. Head i owns the output
    features i * head_dim .. (i + 1) * head_dim - 1, so its own matrix is a slice of rows, transposed:

        W_i^Q = in_proj_weight[i * head_dim : (i + 1) * head_dim].T        (d_model, head_dim), x @ W_i^Q

    and likewise for the keys and values (offset by d_model and 2 d_model).
    Returns (W_q, W_k, W_v), each (num_heads, d_model, head_dim): head i's queries are ``x @ W_q[i]``.
    """
    check_tensor("in_proj_weight", in_proj_weight, 2, "(3 d_model, d_model)")
    check_float("in_proj_weight", in_proj_weight)
    num_heads = check_positive_int("num_heads", num_heads, "the number of heads")
    rows, d_model = in_proj_weight.shape
    if rows != 3 * d_model or d_model % num_heads:
        raise ValueError(
            f"in_proj_weight should be (3 d_model, d_model) with num_heads dividing d_model, got shape "
            f"{tuple(in_proj_weight.shape)} and num_heads={num_heads}; pass torch.nn.MultiheadAttention's "
            "in_proj_weight (its query, key and value projections stacked)"
        )
    per_head = in_proj_weight.reshape(3, num_heads, d_model // num_heads, d_model).transpose(-2, -1)
    return per_head[0], per_head[1], per_head[2]


class MultiHeadAttention(nn.Module):
    """h heads of scaled dot-product attention in parallel, with input and output projections.

    forward(query (batch, query_len, d_model), key (batch, key_len, d_model), value (batch, key_len, d_model),
            mask=None) -> output (batch, query_len, d_model), weights (batch, num_heads, query_len, key_len)

    mask: bool, True = may attend, 4-D with each dim the score's size or 1: (batch, 1, 1, key_len) for
    padding, (1, 1, query_len, key_len) for a causal mask; see ``attnedu.attention.scaled_dot_product_attention``.

    num_kv_heads (default num_heads): fewer key/value heads, each shared by num_heads // num_kv_heads consecutive
    query heads, as ``grouped_query_attention``; then W_k and W_v project to num_kv_heads * head_dim features.

        q, k, v = split(query W_q), split(key W_k), split(value W_v)      (batch, heads, len, head_dim)
        head_i  = softmax(q_i k_i^T / sqrt(head_dim) + bias, mask) v_i    (``_grouped_attention``)
        output  = Concat(g_0 head_0, ..., g_{h-1} head_{h-1}) W_o        g = head_gate, all 1 by default
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True, num_kv_heads: int | None = None):
        super().__init__()
        check_positive_int("d_model", d_model, "the model width")
        check_positive_int("num_heads", num_heads, "the number of heads")
        check_bool("bias", bias, "whether the projections have biases")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_positive_int("num_kv_heads", num_kv_heads, "the number of key/value heads")
        if d_model % num_heads:
            raise ValueError(
                f"num_heads should divide d_model, got num_heads={num_heads}, which does not divide "
                f"d_model={d_model}: head_dim would not be an integer; choose a number of heads that divides d_model"
            )
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_kv_heads should divide num_heads={num_heads}, got num_kv_heads={num_kv_heads}: every key/value "
                "head serves the same number of query heads"
            )
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads
        self.num_kv_heads = num_kv_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=bias)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        bias: torch.Tensor | None = None,
        rope_positions: torch.Tensor | None = None,
        rope_layout: str = "halves",
        rope_base: float = 10000.0,
        head_gate: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """bias: added to every head's scores (ALiBi); rope_positions (seq_len,): rotate queries and keys by
        their positions (RoPE, self-attention only), with the frequencies of ``rope_base``; see
        ``attnedu.positional``. head_gate (num_heads,): multiplies each head's output before W_o, 0 removes a head
        (ablation, lesson 11), 1 keeps it."""
        self._check_inputs(query, key, value, rope_positions, head_gate)
        return self._attend(query, key, value, mask, bias, rope_positions, rope_layout, rope_base, head_gate)

    def _attend(self, query, key, value, mask=None, bias=None, rope_positions=None, rope_layout="halves",
                rope_base=10000.0, head_gate=None, cache=None, layer=0):  # fmt: skip
        """``forward`` without its checks, for the models that call it in their own forward pass.

        ``cache`` (an ``attnedu.kv_cache`` KV cache) and ``layer``: the keys and values of this call, rotated by
        ``rope_positions``, are appended to the cache's ``layer``, and the queries attend over all it holds there
        (the cache decides what each query may read; ``mask`` is not used). -> output, and weights (None with a
        cache)."""
        heads, weights = self._heads(query, key, value, mask, bias, rope_positions, rope_layout, rope_base, cache,
                                     layer)  # fmt: skip
        return self._merge(heads, head_gate), weights

    def _heads(self, query, key, value, mask=None, bias=None, rope_positions=None, rope_layout="halves",
               rope_base=10000.0, cache=None, layer=0):  # fmt: skip
        """Each head's output before W_o, (batch, num_heads, query_len, head_dim), and the weights."""
        q = _split_heads(self.W_q(query), self.num_heads)  # (batch, heads, query_len, head_dim)
        k = _split_heads(self.W_k(key), self.num_kv_heads)  # (batch, kv_heads, key_len, head_dim)
        v = _split_heads(self.W_v(value), self.num_kv_heads)
        if cache is not None:  # the cache rotates q and k, stores k and v, and attends over what it holds
            return cache._attend(layer, q, k, v, rope_positions), None
        if rope_positions is not None:
            q = apply_rope(q, rope_positions, rope_layout, rope_base)
            k = apply_rope(k, rope_positions, rope_layout, rope_base)
        return self._attention(q, k, v, mask, bias)

    def _attention(self, q, k, v, mask=None, bias=None):
        """The heads' attention on projected (and rotated) q (batch, heads, query_len, head_dim) and k, v (batch,
        kv_heads, key_len, head_dim) -> heads, weights. A subclass that changes the softmax overrides this one
        (``attnedu.sinks_gates.SinkGateAttention``: a sink logit per head)."""
        return _grouped_attention(q, k, v, mask, bias)

    def _merge(self, heads: torch.Tensor, head_gate: torch.Tensor | None = None) -> torch.Tensor:
        """Concat(g_0 head_0, ..., g_{h-1} head_{h-1}) W_o: heads (batch, num_heads, query_len, head_dim), each
        scaled by its gate g_i (all 1 when ``head_gate`` is None) -> (batch, query_len, d_model)."""
        if head_gate is not None:
            heads = heads * head_gate.to(device=heads.device, dtype=heads.dtype)[None, :, None, None]
        return self.W_o(_merge_heads(heads))

    def _check_inputs(self, query, key, value, rope_positions=None, head_gate=None) -> None:
        for name, x, length in (("query", query, "query_len"), ("key", key, "key_len"), ("value", value, "key_len")):
            check_tensor(name, x, 3, f"(batch, {length}, d_model)")
            check_float(name, x)
            check_size(name, x, 2, self.d_model, "d_model of this attention")
        check_same_dtype(query=query, key=key, value=value, weights=self.W_q.weight)
        if not (query.shape[0] == key.shape[0] == value.shape[0]):
            raise ValueError(
                f"query, key and value should hold the same batch, got {describe(query)}, {describe(key)}, "
                f"{describe(value)}; a batch of one is not stretched to fit"
            )
        check_size("value", value, 1, key.shape[1], "key_len: one value per key")
        if rope_positions is not None and query.shape[1] != key.shape[1]:
            raise ValueError(
                f"rope_positions should be used with self-attention (query_len == key_len), got query_len "
                f"{query.shape[1]} and key_len {key.shape[1]}; rope_positions applies to self-attention, where "
                "queries and keys are the same positions"
            )
        if head_gate is not None:
            check_tensor("head_gate", head_gate, 1, "(heads,): 1 keeps a head, 0 removes it")
            check_float("head_gate", head_gate)
            check_size("head_gate", head_gate, 0, self.num_heads, "one gate per head")
            check_finite("head_gate", head_gate, "1 keeps a head, 0 removes it")

    @torch.no_grad()
    def copy_from_torch(self, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Take the weights of a ``torch.nn.MultiheadAttention`` of the same size (weights in, numbers out)."""
        check_instance("mha", mha, nn.MultiheadAttention, "a torch.nn.MultiheadAttention")
        if (mha.embed_dim, mha.num_heads) != (self.d_model, self.num_heads):
            raise ValueError(
                f"torch's module has embed_dim={mha.embed_dim}, num_heads={mha.num_heads}; this one has "
                f"d_model={self.d_model}, num_heads={self.num_heads}"
            )
        if self.num_kv_heads != self.num_heads:
            raise ValueError(
                f"num_kv_heads should equal num_heads={self.num_heads} to copy torch.nn.MultiheadAttention (one "
                f"key/value head per query head), got num_kv_heads={self.num_kv_heads}; build this one with "
                "num_kv_heads=None"
            )
        if not mha._qkv_same_embed_dim:
            raise ValueError("torch's module has kdim/vdim different from embed_dim; this one projects d_model only")
        if (mha.in_proj_bias is None) != (self.W_q.bias is None) or mha.bias_k is not None:
            raise ValueError("bias settings differ (bias=..., add_bias_kv=False): build both the same way")
        for ours, theirs in zip((self.W_q, self.W_k, self.W_v), mha.in_proj_weight.chunk(3)):
            ours.weight.copy_(theirs)
        if mha.in_proj_bias is not None:
            for ours, theirs in zip((self.W_q, self.W_k, self.W_v), mha.in_proj_bias.chunk(3)):
                ours.bias.copy_(theirs)
            self.W_o.bias.copy_(mha.out_proj.bias)
        self.W_o.weight.copy_(mha.out_proj.weight)
        return self
