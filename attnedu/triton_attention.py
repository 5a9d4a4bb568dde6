"""The FlashAttention-2 forward as a Triton kernel (lesson 08): the tiled loop of ``attnedu.flash``, with one
program per (block of queries, batch x head), the score tile held in registers/SRAM.

Written with plain pointer arithmetic (``tl.arange`` offsets, masked ``tl.load``/``tl.store``, ``tl.dot``,
``tl.exp2``, ``tl.where``), not block pointers or tensor descriptors, so it compiles on the Triton this course
pins and on older releases a GPU machine may carry (torch 2.11 with Triton 3.6): Triton 3.9 removed
``tl.make_block_ptr``.

Where it runs:
* on a CUDA GPU, compiled;
* on the CPU under Triton's interpreter, when ``TRITON_INTERPRET=1`` is set *before* triton is imported (it is
  read when a kernel is decorated). The interpreter runs each program with NumPy, hundreds of times slower than
  PyTorch: use it at tiny sizes, to check the kernel. Its bfloat16 is wrong without an error, so bfloat16 inputs
  are computed in float32 there.
``unavailable_reason()`` says why neither is possible, or returns None.
"""

from __future__ import annotations

import importlib.util
import math
import os

import torch

from ._validate import describe
from .flash import check_qkv

LOG2_E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)): exp2 is the faster instruction on a GPU
SHAPE_DOC = "(batch, heads, seq_len, head_dim)"
GPU_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def interpreting() -> bool:
    """True when Triton's CPU interpreter is requested (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def unavailable_reason() -> str | None:
    """None when ``triton_attention`` can run here; otherwise one sentence saying why not."""
    if importlib.util.find_spec("triton") is None:
        return (
            "triton is not installed (it installs on Linux only: pip install -r requirements.txt), "
            "so the Triton kernel cannot run here"
        )
    if not torch.cuda.is_available() and not interpreting():
        return (
            "there is no CUDA GPU, and Triton's CPU interpreter is off: set TRITON_INTERPRET=1 before importing "
            "triton (and attnedu.triton_attention) to run the kernel on the CPU, slowly"
        )
    return None


_kernels: dict[bool, object] = {}  # built on first use, once compiled and once interpreted


def _build_kernel():
    """Define the kernel on first use, so that importing this module never needs triton. Triton reads
    ``TRITON_INTERPRET`` here, when ``@triton.jit`` decorates the function."""
    import triton
    import triton.language as tl

    @triton.jit
    def attention_forward_kernel(
        Q, K, V, O, LSE,  # Q (batch, heads, n_q, head_dim), K and V (batch, heads, n_k, dim), LSE (batch, heads, n_q)
        stride_qb, stride_qh, stride_qm, stride_qd,
        stride_kb, stride_kh, stride_kn, stride_kd,
        stride_vb, stride_vh, stride_vn, stride_vd,
        stride_ob, stride_oh, stride_om, stride_od,
        heads, n_q, n_k, head_dim, value_dim,
        qk_scale,  # 1 / sqrt(head_dim) * log2(e): scores in base 2
        IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    ):  # fmt: skip
        block_m = tl.program_id(0)  # which block of queries
        batch_head = tl.program_id(1)  # which (batch, head)
        batch, head = batch_head // heads, batch_head % heads
        rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)  # query indices of this program
        cols = tl.arange(0, BLOCK_N)  # key offsets inside a key block
        dims = tl.arange(0, BLOCK_D)  # head_dim, padded to a power of two
        vdims = tl.arange(0, BLOCK_DV)

        q_ptrs = Q + batch * stride_qb + head * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd
        q = tl.load(q_ptrs, mask=(rows[:, None] < n_q) & (dims[None, :] < head_dim), other=0.0)
        k_base = K + batch * stride_kb + head * stride_kh
        v_base = V + batch * stride_vb + head * stride_vh

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max (base 2)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum
        acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)  # unnormalised output
        hi = n_k
        if IS_CAUSAL:  # key blocks wholly above the diagonal are never visited
            hi = tl.minimum((block_m + 1) * BLOCK_M, n_k)
        for start_n in range(0, hi, BLOCK_N):
            keys = start_n + cols
            k_t = tl.load(  # K^T tile: (BLOCK_D, BLOCK_N)
                k_base + keys[None, :] * stride_kn + dims[:, None] * stride_kd,
                mask=(keys[None, :] < n_k) & (dims[:, None] < head_dim), other=0.0,
            )  # fmt: skip
            s = tl.dot(q, k_t) * qk_scale  # (BLOCK_M, BLOCK_N), float32
            valid = keys[None, :] < n_k
            if IS_CAUSAL:
                valid = valid & (keys[None, :] <= rows[:, None])
            s = tl.where(valid, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)  # rescale of the old sum and output
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(
                v_base + keys[:, None] * stride_vn + vdims[None, :] * stride_vd,
                mask=(keys[:, None] < n_k) & (vdims[None, :] < value_dim), other=0.0,
            )  # fmt: skip
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        acc = acc / l_i[:, None]
        o_ptrs = O + batch * stride_ob + head * stride_oh + rows[:, None] * stride_om + vdims[None, :] * stride_od
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=(rows[:, None] < n_q) & (vdims[None, :] < value_dim))
        # natural-log log-sum-exp per query, what a backward pass would need: (m + log2 l) / log2(e)
        tl.store(LSE + batch_head * n_q + rows, (m_i + tl.log2(l_i)) / 1.4426950408889634, mask=rows < n_q)

    return attention_forward_kernel


def _check(query, key, value) -> None:
    check_qkv(query, key, value)  # tensors, floating point, one dtype and device, matching sizes
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.dim() != 4:
            raise ValueError(f"{name} must have shape {SHAPE_DOC} (4 dimensions) for the kernel, got {describe(x)}")
    if query.dtype not in GPU_DTYPES:
        raise TypeError(f"triton_attention takes float16, bfloat16 or float32, got {query.dtype}; convert with .half()")
    if max(query.shape[-1], value.shape[-1]) > 256:
        raise ValueError(f"head_dim and value_dim must be at most 256 for this kernel, got {describe(query)}")
    if query.is_cuda and interpreting():
        raise RuntimeError(
            "TRITON_INTERPRET=1 is set while the tensors are on the GPU: the kernel would run on the CPU "
            "(triton#5995). Unset it before importing triton to compile for the GPU"
        )
    if not query.is_cuda and not interpreting():
        raise RuntimeError(unavailable_reason() or "CPU tensors need TRITON_INTERPRET=1 set before importing triton")


def _config(head_dim: int, on_gpu: bool) -> dict:
    """Block sizes and launch options. On a GPU: 128 queries x 64 keys per program (the Triton tutorial's
    choice for these head sizes); under the interpreter, where each program costs NumPy calls, the same."""
    if not on_gpu:
        return {"BLOCK_M": 64, "BLOCK_N": 64}
    return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4 if head_dim <= 64 else 8, "num_stages": 3}


def triton_attention(query, key, value, *, is_causal: bool = False, return_lse: bool = False):
    """softmax(Q K^T / sqrt(head_dim)) V by a Triton kernel, equal to
    ``torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=is_causal)``.

    query (batch, heads, query_len, head_dim), key (batch, heads, key_len, head_dim),
    value (batch, heads, key_len, value_dim) -> (batch, heads, query_len, value_dim) in query's dtype, and with
    ``return_lse`` the log-sum-exp of each query's scores, (batch, heads, query_len) float32.
    Scores and sums are accumulated in float32; P is cast to the input's dtype before P V, as FlashAttention-2 does
    (on a GPU, float32 inputs go through TF32 in ``tl.dot``, so expect about 1e-3 error there).
    """
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    _check(query, key, value)
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be True or False, got {is_causal!r}")
    import triton

    kernel = _kernels.get(interpreting()) or _kernels.setdefault(interpreting(), _build_kernel())

    dtype = query.dtype
    if not query.is_cuda and dtype == torch.bfloat16:  # the interpreter's bfloat16 is silently wrong
        query, key, value = query.float(), key.float(), value.float()
    batch, heads, n_q, head_dim = query.shape
    n_k, value_dim = value.shape[-2:]
    out = torch.empty(batch, heads, n_q, value_dim, dtype=query.dtype, device=query.device)
    lse = torch.empty(batch, heads, n_q, dtype=torch.float32, device=query.device)
    config = _config(head_dim, query.is_cuda)
    grid = (triton.cdiv(n_q, config["BLOCK_M"]), batch * heads)
    kernel[grid](
        query, key, value, out, lse,
        *query.stride(), *key.stride(), *value.stride(), *out.stride(),
        heads, n_q, n_k, head_dim, value_dim,
        LOG2_E / math.sqrt(head_dim),
        IS_CAUSAL=is_causal,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)), BLOCK_DV=max(16, triton.next_power_of_2(value_dim)),
        **config,
    )  # fmt: skip
    out = out.to(dtype)
    return (out, lse) if return_lse else out
