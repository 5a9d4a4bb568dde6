"""attnedu.triton_attention: the Triton kernel under Triton's CPU interpreter at tiny sizes (float32, float16,
and bfloat16 computed in float32), and compiled on a CUDA GPU when there is one."""

import importlib.util

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

from attnedu import triton_attention as ta

HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (Linux only)")
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}
# (n_q, n_k, head_dim, value_dim): lengths off the 64-block, n_q != n_k both ways, head_dim not a power of two
SHAPES = [(37, 37, 16, 16), (70, 50, 32, 32), (20, 90, 64, 64), (65, 65, 24, 40)]


def qkv(n_q, n_k, head_dim, value_dim, dtype, device="cpu", batch=2, heads=2):
    g = torch.Generator().manual_seed(n_q * 1000 + n_k)
    q = torch.randn(batch, heads, n_q, head_dim, generator=g)
    k = torch.randn(batch, heads, n_k, head_dim, generator=g)
    v = torch.randn(batch, heads, n_k, value_dim, generator=g)
    return q.to(device, dtype), k.to(device, dtype), v.to(device, dtype)


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@needs_triton
@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_interpreted_kernel_equals_sdpa(interpreter, shape, causal, dtype):
    q, k, v = qkv(*shape, dtype)
    out, lse = ta.triton_attention(q, k, v, is_causal=causal, return_lse=True)
    assert out.dtype == dtype and out.shape == (2, 2, shape[0], shape[3])
    expected = sdpa(q.double(), k.double(), v.double(), is_causal=causal)
    assert (out.double() - expected).abs().max().item() <= TOLERANCE[dtype]
    if dtype == torch.float32 and not causal:
        scores = q.double() @ k.double().transpose(-1, -2) / shape[2] ** 0.5
        torch.testing.assert_close(lse.double(), torch.logsumexp(scores, dim=-1), atol=1e-5, rtol=1e-5)


@needs_triton
def test_interpreted_kernel_equals_the_pytorch_tiled_version(interpreter):
    from attnedu.flash import tiled_attention

    q, k, v = qkv(50, 50, 16, 16, torch.float32)
    torch.testing.assert_close(ta.triton_attention(q, k, v, is_causal=True), tiled_attention(q, k, v, is_causal=True))


def test_unavailable_reason_says_why(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    reason = ta.unavailable_reason()
    if not HAS_TRITON:
        assert "not installed" in reason
    elif not torch.cuda.is_available():
        assert "TRITON_INTERPRET=1" in reason
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
            ta.triton_attention(*qkv(4, 4, 16, 16, torch.float32))
    else:
        assert reason is None


@needs_triton
def test_bad_inputs_are_refused(interpreter):
    q, k, v = qkv(8, 8, 16, 16, torch.float32)
    with pytest.raises(ValueError, match="4 dimensions"):
        ta.triton_attention(q[0], k[0], v[0])
    with pytest.raises(TypeError, match="float16, bfloat16 or float32"):
        ta.triton_attention(q.double(), k.double(), v.double())
    with pytest.raises(ValueError, match="head_dim"):
        ta.triton_attention(q, k[..., :8], v)
    with pytest.raises(TypeError, match="is_causal"):
        ta.triton_attention(q, k, v, is_causal=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the compiled kernel needs one")
@needs_triton
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_compiled_kernel_on_gpu_equals_sdpa(monkeypatch, causal, dtype):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    for shape in [*SHAPES, (1000, 1000, 64, 64), (513, 1024, 128, 128)]:
        q, k, v = qkv(*shape, dtype, device="cuda")
        expected = sdpa(q.double(), k.double(), v.double(), is_causal=causal)
        out = ta.triton_attention(q, k, v, is_causal=causal)
        assert (out.double() - expected).abs().max().item() <= TOLERANCE[dtype]
