"""attnedu.triton_attention: the Triton kernels, forward and backward, under Triton's CPU interpreter at tiny sizes
(float32, float16, and bfloat16 computed in float32), and compiled on a CUDA GPU when there is one.

The GPU tests have "gpu" in their names and run alone with ``pytest tests/test_triton_attention.py -k gpu``; they
need only torch, triton, numpy and pytest.
"""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

from attnedu import triton_attention as ta
from attnedu import triton_inspect as ti
from attnedu.flash import naive_attention

HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_CUDA = torch.cuda.is_available()
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (Linux only)")
needs_gpu = pytest.mark.skipif(not (HAS_CUDA and HAS_TRITON), reason="no CUDA GPU here: the compiled kernel needs one")
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}
# Backward under the interpreter, relative to the largest reference gradient (at least 1). Measured: float32 about
# 2e-6 (exact float32 products), float16 2e-3, bfloat16 (computed in float32, rounded once) 4e-3.
GRAD_TOLERANCE = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 1e-2}
# (n_q, n_k, head_dim, value_dim): lengths off the 64-block, n_q != n_k both ways, head_dim not a power of two
SHAPES = [(37, 37, 16, 16), (70, 50, 32, 32), (20, 90, 64, 64), (65, 65, 24, 40)]
H100_SHARED = 232448 - 8 * 1024  # the limit _shared_memory_limit returns on an H100


def qkv(n_q, n_k, head_dim, value_dim, dtype, device="cpu", batch=2, heads=2, requires_grad=False):
    g = torch.Generator().manual_seed(n_q * 1000 + n_k + head_dim)
    q = torch.randn(batch, heads, n_q, head_dim, generator=g)
    k = torch.randn(batch, heads, n_k, head_dim, generator=g)
    v = torch.randn(batch, heads, n_k, value_dim, generator=g)
    return tuple(t.to(device, dtype).requires_grad_(requires_grad) for t in (q, k, v))


def reference_grads(q, k, v, grad_out, causal):
    """Output and (dq, dk, dv) of naive attention by PyTorch autograd in float64."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = naive_attention(q, k, v, is_causal=causal)
    out.backward(grad_out.double())
    return out.detach(), (q.grad, k.grad, v.grad)


def relative_error(got, expected) -> float:
    """Largest absolute difference, over the largest reference value (at least 1)."""
    return (got.double() - expected).abs().max().item() / max(1.0, expected.abs().max().item())


def check_grads(q, k, v, causal, tolerance, deterministic=None):
    grad_out = torch.randn(*q.shape[:-1], v.shape[-1], generator=torch.Generator().manual_seed(7)).to(q.dtype)
    out = ta.triton_attention(q, k, v, is_causal=causal, deterministic=deterministic)
    out.backward(grad_out.to(q.device))
    expected_out, expected = reference_grads(q, k, v, grad_out.to(q.device), causal)
    assert relative_error(out, expected_out) <= tolerance
    for name, x, e in zip(("dq", "dk", "dv"), (q, k, v), expected):
        assert x.grad.dtype == x.dtype and x.grad.shape == x.shape
        assert relative_error(x.grad, e) <= tolerance, name


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


# ------------------------------------------------------------------------------------------------------------
# forward, interpreted
# ------------------------------------------------------------------------------------------------------------


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
    if dtype == torch.float32:
        scores = q.double() @ k.double().transpose(-1, -2) / shape[2] ** 0.5
        if causal:
            scores = scores.masked_fill(torch.ones(shape[0], shape[1], dtype=torch.bool).triu(1), float("-inf"))
        torch.testing.assert_close(lse.double(), torch.logsumexp(scores, dim=-1), atol=1e-5, rtol=1e-5)


@needs_triton
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [*SHAPES, (33, 33, 128, 128)])
def test_interpreted_forward_through_tensor_descriptors_equals_sdpa(interpreter, shape, causal):
    """The forward's TMA path (tensor descriptors, what a Hopper GPU runs) under the interpreter: ragged lengths,
    n_q != n_k, head_dim and value_dim not powers of two (the descriptors zero-fill past the edges and clip the
    store), with the interpreter's configuration and with blocks of other shapes."""
    q, k, v = qkv(*shape, torch.float32)
    expected = sdpa(q.double(), k.double(), v.double(), is_causal=causal)
    for config in (None, {"BLOCK_M": 16, "BLOCK_N": 32}, {"BLOCK_M": 32, "BLOCK_N": 16}):
        out, lse = ta._forward(q, k, v, causal, config, tma=True)
        assert (out.double() - expected).abs().max().item() <= TOLERANCE[torch.float32], config
        pointers = ta._forward(q, k, v, causal, config, tma=False)
        torch.testing.assert_close(lse, pointers[1], rtol=0, atol=1e-6)


def test_tensor_descriptors_are_used_only_where_they_can_address_the_tensors():
    """TMA copies need a unit stride along head_dim and every matrix and row on a 16-byte boundary; the forward
    falls back to pointers otherwise (and always on the CPU)."""
    x = torch.zeros(2, 3, 40, 64, dtype=torch.bfloat16)
    assert ta._tma_aligned(x, x)
    assert not ta._tma_aligned(torch.zeros(2, 3, 40, 20, dtype=torch.bfloat16))  # rows of 40 bytes
    assert ta._tma_aligned(torch.zeros(1, 1, 40, 24, dtype=torch.bfloat16))  # rows of 48 bytes
    assert not ta._tma_aligned(x.transpose(-1, -2))  # head_dim not contiguous
    assert not ta._tma_aligned(x[..., 1:])  # rows start 2 bytes past a boundary
    assert not ta._tma_aligned(torch.zeros(8 * 40 * 64 + 1, dtype=torch.bfloat16)[1:].view(2, 4, 40, 64))
    assert not ta._use_tma(x, x, x, x)  # not on the GPU


@needs_triton
def test_interpreted_kernel_equals_the_pytorch_tiled_version(interpreter):
    from attnedu.flash import tiled_attention

    q, k, v = qkv(50, 50, 16, 16, torch.float32)
    torch.testing.assert_close(ta.triton_attention(q, k, v, is_causal=True), tiled_attention(q, k, v, is_causal=True))


@needs_triton
@pytest.mark.parametrize("causal", [False, True])
def test_causal_output_ignores_future_keys(interpreter, causal):
    """Perturbing keys and values after position 40 changes nothing for queries up to 40 under the causal mask."""
    q, k, v = qkv(90, 90, 32, 32, torch.float32)
    k2, v2 = k.clone(), v.clone()
    k2[..., 41:, :] += 3.0
    v2[..., 41:, :] -= 2.0
    before = ta.triton_attention(q, k, v, is_causal=causal)[..., :41, :]
    after = ta.triton_attention(q, k2, v2, is_causal=causal)[..., :41, :]
    assert torch.equal(before, after) == causal


# ------------------------------------------------------------------------------------------------------------
# backward, interpreted
# ------------------------------------------------------------------------------------------------------------


@needs_triton
@pytest.mark.parametrize("deterministic", [False, True], ids=["one-pass", "deterministic"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [*SHAPES, (33, 33, 128, 128), (90, 40, 16, 16)])
def test_interpreted_gradients_equal_autograd_of_naive_attention(interpreter, shape, causal, deterministic):
    """float32: dq, dk, dv equal PyTorch autograd of naive attention (float64) to 1e-5 (measured about 2e-6), for
    lengths off the block, n_q != n_k both ways (causal counted from the top left, as SDPA does), head_dim 16 to
    128 and not a power of two, value_dim != head_dim, batch x heads = 4; by both backwards (one pass with atomic dQ,
    and the separate dQ kernel)."""
    check_grads(*qkv(*shape, torch.float32, requires_grad=True), causal, GRAD_TOLERANCE[torch.float32], deterministic)


@needs_triton
@pytest.mark.parametrize("deterministic", [False, True], ids=["one-pass", "deterministic"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "shape, causal", [((37, 37, 16, 16), True), ((70, 50, 32, 32), False), ((64, 64, 64, 64), True)]
)
def test_interpreted_half_precision_gradients(interpreter, shape, causal, dtype, deterministic):
    """float16 runs in float16 (P and dS cast before their products; the one-pass dQ accumulates in float32);
    bfloat16 is computed in float32 by the interpreter and its gradients come back in bfloat16."""
    check_grads(*qkv(*shape, dtype, requires_grad=True), causal, GRAD_TOLERANCE[dtype], deterministic)


@needs_triton
def test_the_deterministic_backward_is_bitwise_repeatable(interpreter):
    """deterministic=True: two identical calls give bitwise the same gradients (no atomics: each dQ row is summed
    by one program, in one order). The one-pass backward need not (atomic adds land in the order programs run, which
    varies on a GPU); under the interpreter, which runs programs one after another, it happens to repeat too, so only
    the deterministic one is held to it here."""
    runs = []
    for _ in range(2):
        q, k, v = qkv(70, 70, 24, 24, torch.float32, requires_grad=True)
        ta.triton_attention(q, k, v, is_causal=True, deterministic=True).backward(torch.ones(2, 2, 70, 24))
        runs.append((q.grad, k.grad, v.grad))
    for first, second in zip(*runs):
        assert torch.equal(first, second)


@needs_triton
def test_deterministic_none_follows_pytorchs_switch(interpreter, monkeypatch):
    """The default (None) runs the one-pass backward, as FlashAttention-2 and PyTorch's flash SDPA do, unless
    torch.use_deterministic_algorithms(True) is set (with warn_only=True PyTorch's flash backward stays
    nondeterministic, and so does this one); True and False override it."""
    kinds = []
    launch = ta._launch
    monkeypatch.setattr(ta, "_launch", lambda kind, *args, **kw: (kinds.append(kind), launch(kind, *args, **kw)))
    q, k, v = qkv(20, 20, 16, 16, torch.float32, requires_grad=True)
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        for switch, warn_only, deterministic, expected in [
            (False, False, None, "dkdv_atomic"), (True, False, None, "dq"), (True, True, None, "dkdv_atomic"),
            (True, False, False, "dkdv_atomic"), (False, False, True, "dq"),
        ]:  # fmt: skip
            torch.use_deterministic_algorithms(switch, warn_only=warn_only)
            kinds.clear()
            ta.triton_attention(q, k, v, deterministic=deterministic).sum().backward()
            assert expected in kinds and ("dq" in kinds) != ("dkdv_atomic" in kinds), (switch, deterministic, kinds)
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@needs_triton
@pytest.mark.parametrize("config", [{"BLOCK_M": 16, "BLOCK_N": 32}, {"BLOCK_M": 32, "BLOCK_N": 16}])
@pytest.mark.parametrize("n_q, n_k", [(70, 70), (70, 45), (40, 70)])
def test_tiles_of_other_shapes_split_the_causal_stages_right(interpreter, config, n_q, n_k):
    """Blocks of queries and keys of different sizes, either way round, so that the unmasked and masked stages, the
    skipped tiles and the tail block meet at every kind of boundary: forward and backward still exact."""
    q, k, v = qkv(n_q, n_k, 32, 32, torch.float32, batch=1)
    grad_out = torch.randn(1, 2, n_q, 32, generator=torch.Generator().manual_seed(3))
    for causal in (False, True):
        expected_out, expected = reference_grads(q, k, v, grad_out, causal)
        out, lse = ta._forward(q, k, v, causal, config)
        assert relative_error(out, expected_out) <= 1e-5
        for deterministic in (False, True):
            grads = ta._backward(q, k, v, out, lse, grad_out, causal, config, config, deterministic)
            for got, e in zip(grads, expected):
                assert relative_error(got, e) <= 1e-5, (causal, deterministic)


@needs_triton
def test_gradients_through_views_and_partial_requires_grad(interpreter):
    """Inputs that are transposed views, a loss whose gradient has stride 0 (out.sum()), and only some inputs that
    require grad."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 40, 2, 32, generator=g).transpose(1, 2).requires_grad_()  # (batch, heads, n, d), a view
    k = torch.randn(2, 40, 2, 32, generator=g).transpose(1, 2)
    v = torch.randn(2, 2, 40, 32, generator=g).requires_grad_()
    ta.triton_attention(q, k, v, is_causal=True).sum().backward()
    _, (dq, _, dv) = reference_grads(q, k, v, torch.ones(2, 2, 40, 32), True)
    assert k.grad is None
    assert relative_error(q.grad, dq) <= 1e-5 and relative_error(v.grad, dv) <= 1e-5


@needs_triton
def test_lse_is_returned_but_not_differentiable(interpreter):
    q, k, v = qkv(30, 30, 16, 16, torch.float32, requires_grad=True)
    out, lse = ta.triton_attention(q, k, v, return_lse=True)
    assert out.requires_grad and not lse.requires_grad
    out.sum().backward()
    assert q.grad is not None


@needs_triton
def test_a_row_whose_first_tile_is_wholly_masked_stays_finite(interpreter, monkeypatch):
    """The guard of the running maximum. A row that has seen no valid key keeps m = -inf, and exp2(-inf - -inf) would
    be NaN. The kernels never visit such a tile first through the public function (a causal mask from the top left
    lets every query see key 0), so a probe kernel calls the forward's tile loop itself: first on keys 16..31, all
    after queries 0..15 (wholly masked), then on keys 0..15. The result must be causal attention, with no NaN."""
    import triton

    monkeypatch.setitem(globals(), "kernels", ta._get_kernels().module)
    probe = triton.jit(_first_tile_masked_probe)
    q, k, v = (t[0, 0].contiguous() for t in qkv(16, 32, 16, 16, torch.float32))
    out = torch.empty(16, 16)
    probe[(1,)](q, k, v, out, ta.LOG2_E / 4.0)
    assert not out.isnan().any()
    expected = sdpa(q.double(), k[:16].double(), v[:16].double(), is_causal=True)
    assert (out.double() - expected).abs().max().item() <= 1e-5


def _first_tile_masked_probe(Q, K, V, O, qk_scale):
    import triton.language as tl

    rows = tl.arange(0, 16)
    dims = tl.arange(0, 16)
    q = tl.load(Q + rows[:, None] * 16 + dims[None, :])
    m = tl.full([16], float("-inf"), dtype=tl.float32)
    l = tl.zeros([16], dtype=tl.float32)
    acc = tl.zeros([16, 16], dtype=tl.float32)
    # keys 16..31 first (all after every query: wholly masked), then keys 0..15; MASKED, IS_CAUSAL, pointers, no padding
    acc, l, m = kernels._forward_tiles(acc, l, m, q, K, V, 16, 1, 16, 1, rows, 16, 32, 32, 16, 16, qk_scale,  # noqa: F821
                                       True, True, False, False, False, 16, 16, 16)  # fmt: skip
    acc, l, m = kernels._forward_tiles(acc, l, m, q, K, V, 16, 1, 16, 1, rows, 0, 16, 32, 16, 16, qk_scale,  # noqa: F821
                                       True, True, False, False, False, 16, 16, 16)  # fmt: skip
    tl.store(O + rows[:, None] * 16 + dims[None, :], acc / l[:, None])


@needs_triton
def test_the_tuning_script_runs_every_candidate_under_the_interpreter(interpreter):
    """benchmarks/tune_triton.py, whose GPU run picks the candidate lists: its loop, checks and table, on the CPU
    with a fake timer. Every candidate must come out right (no "WRONG") and be timed."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "tune_triton.py"
    spec = importlib.util.spec_from_file_location("tune_triton", path)
    tune_triton = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tune_triton)
    lines = []
    totals = tune_triton.tune([40], [16], ["float32"], [True], tokens=40, hidden=32, device="cpu",
                              timer=lambda fn: 1.0, limit=H100_SHARED, log=lines.append)  # fmt: skip
    text = "\n".join(lines)
    assert "WRONG" not in text and "Error" not in text and "first candidate" in text
    for kind in tune_triton.KERNELS:
        assert len(totals[(kind, 16, "float32", True)]) == len(tune_triton.candidates(kind, 16, 4, H100_SHARED, False))


# ------------------------------------------------------------------------------------------------------------
# compiled for an H100 (sm_90a) on the CPU: no GPU needed, only triton's compiler and its bundled ptxas
# ------------------------------------------------------------------------------------------------------------


@needs_triton
def test_every_autotune_candidate_compiles_for_sm90a_without_spilling():
    """Every configuration the autotuner can pick on an H100 or H200 (``candidate_configs`` with its shared memory),
    for every kernel kind, at head_dim 64 and 128 in bfloat16, causal and not, the forward with tensor descriptors
    and with pointers: compiled for sm_90a, ptxas must report 0 spill bytes, and every kernel must use wgmma; the
    forward with descriptors must copy its tiles with TMA, and the one with pointers not. 60 compiles, in threads
    (Triton releases the GIL while it compiles), in a child process when this one imported triton for its
    interpreter (tests/conftest.py does)."""
    requests = [
        {"kind": kind, "config": config, "head_dim": head_dim, "dtype": torch.bfloat16, "is_causal": causal, "tma": tma}
        for head_dim in (64, 128)
        for kind in ta.KINDS
        for config in ta.candidate_configs(kind, head_dim, head_dim, 2, ta.H100_SHARED_MEMORY)
        for causal in (False, True)
        for tma in ((False, True) if kind == "forward" else (False,))
    ]
    reports = ti.compile_kernels(requests)
    spilled = [(r.kind, r.head_dim, r.is_causal, r.config, r.registers, r.spills) for r in reports if r.spills]
    assert not spilled
    assert all(r.arch == "sm_90a" and r.uses_wgmma and 0 < r.registers <= 255 for r in reports)
    assert all(r.uses_tma == r.tma for r in reports)
    # float atomics (red.global...add...f32, a reduction to global memory) in the one-pass dK/dV kernel, in no other
    atomic = re.compile(r"^(@%p\d+\s+)?red\.global\.\S*add\S*f32\s")
    assert all(any(map(atomic.match, r.ptx_lines("red."))) == (r.kind == "dkdv_atomic") for r in reports)


@needs_triton
def test_the_forward_uses_wgmma_and_fused_multiply_adds_on_sm90a():
    """The claim lesson 08 checks without a GPU: compiled for an H100, the forward's matrix products are Hopper's
    asynchronous warpgroup MMAs (wgmma.mma_async, not Ampere's mma.sync), and with FMA fusion set, its float32
    arithmetic has fused multiply-adds."""
    report = ti.compile_kernel("forward", head_dim=64)
    assert report.config == ta.candidate_configs("forward", 64, 64, 2, ta.H100_SHARED_MEMORY)[0]
    assert report.arch == "sm_90a" and ".target sm_90a" in report.ptx
    assert report.uses_wgmma and report.ptx_lines("wgmma.mma_async")[0].startswith("wgmma.mma_async.sync.aligned")
    assert not report.ptx_lines("mma.sync.aligned")
    assert report.ptx_lines("fma.rn.f32") and report.spills == 0


@needs_triton
def test_the_forward_through_tensor_descriptors_copies_tiles_with_tma_on_sm90a():
    """With tensor descriptors the forward's loads and its store are TMA bulk copies (cp.async.bulk.tensor, global
    to shared and back), which the pointer version, compiled the same way, does not have."""
    report = ti.compile_kernel("forward", head_dim=128, tma=True)
    copies = report.ptx_lines("cp.async.bulk.tensor")
    assert report.uses_tma and report.uses_wgmma and report.spills == 0
    assert any("shared::cta.global" in line for line in copies)  # loads: global memory to shared
    assert any("global.shared::cta" in line for line in copies)  # the store of O: shared to global


def test_every_launch_sets_fma_fusion(monkeypatch):
    """Triton 3.9 warns that 3.10 stops fusing a * b + c by default: every compiled launch passes the option
    itself (the forward, the three backward kernels, autotuned or with a configuration). Checked with stand-in
    kernels that record their keyword arguments."""
    calls = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append(kwargs)

    kernels = ta._Kernels(None, {kind: Recorder() for kind in (*ta.KINDS, "delta")}, {k: Recorder() for k in ta.KINDS})
    monkeypatch.setattr(ta, "_get_kernels", lambda interpret=None: kernels)
    monkeypatch.setattr(ta, "_shared_memory_limit", lambda index: H100_SHARED)  # deterministic: the first candidate
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q, k, v = qkv(40, 40, 16, 16, torch.float32)
    config = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2}
    for given in (None, config):
        out, lse = ta._forward(q, k, v, True, given)
        for deterministic in (False, True):
            ta._backward(q, k, v, out, lse, torch.ones_like(out), True, given, given, deterministic)
    assert len(calls) == 2 * (1 + 2 * 2) + 2 * 1  # forward; delta and dK/dV twice; dQ in the deterministic ones
    assert all(call.get("enable_fp_fusion") is True for call in calls)


def interpreted_autotuned_kernels(monkeypatch, bench):
    """The interpreted kernels wrapped as the compiled ones are (``ta._autotune``: the course's configurations,
    pruning, key and ``reset_to_zero``), with ``bench`` standing in for Triton's ``do_bench`` (which on a GPU
    launches the kernel for ~125 ms per configuration), installed as the kernels ``triton_attention`` launches."""
    monkeypatch.setattr(ta, "_shared_memory_limit", lambda index: H100_SHARED)  # the pruning asks the GPU otherwise
    monkeypatch.setenv(ta.AUTOTUNE_ENV, "1")
    base = ta._get_kernels(interpret=True)
    tuned = {kind: ta._autotune(kind, base.raw[kind]) for kind in ta.KINDS}
    for autotuner in tuned.values():
        autotuner._do_bench = bench
    monkeypatch.setitem(ta._kernels, True, ta._Kernels(base.module, base.raw, tuned))
    return tuned


@needs_triton
def test_autotuning_leaves_no_timing_launch_in_the_one_pass_dq(interpreter, monkeypatch):
    """The one-pass backward adds into a float32 dQ with atomics. On a GPU, the first call for each autotuning key
    times every candidate configuration by launching the kernel many times on the call's own arguments; unless the
    autotuner zeroes dQ before each of those launches and before the one it keeps (``RESET_TO_ZERO``), they all
    stay summed into dQ (the expert review of 08a/08b: 11 x the right dQ with 2 configurations and 5 launches
    each). Simulated on the CPU: the interpreted kernels in the course's autotune wrapping, timed by 3 launches."""
    launches = []

    def bench(kernel_call, quantiles=None):
        for _ in range(3):
            kernel_call()
            launches.append(1)
        return [1.0, 1.0, 1.0]

    tuned = interpreted_autotuned_kernels(monkeypatch, bench)
    q, k, v = qkv(64, 64, 16, 16, torch.float32, batch=1, heads=1)
    grad_out = torch.randn(1, 1, 64, 16, generator=torch.Generator().manual_seed(3))
    _, expected = reference_grads(q, k, v, grad_out, False)
    for call in range(2):  # the first call tunes (a cache miss), the second takes the cached choice
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = ta.triton_attention(*leaves, deterministic=False)
        grads = torch.autograd.grad(out, leaves, grad_out)
        if call == 0:
            assert launches and len(tuned["dkdv_atomic"].cache) == 1  # the autotuner did time several candidates
        for name, got, e in zip(("dq", "dk", "dv"), grads, expected):
            assert relative_error(got, e) <= GRAD_TOLERANCE[torch.float32], (call, name)


def test_a_deterministic_call_never_asks_the_autotuner(monkeypatch):
    """The autotuner picks block sizes by timing, so two processes can pick differently, and the block sizes set
    the order of the sums: a deterministic call (the argument, or torch.use_deterministic_algorithms) launches its
    forward and backward kernels with the first candidate that fits, as ATTNEDU_TRITON_AUTOTUNE=0 does, whatever
    the autotuner would choose. Checked with stand-in kernels that record their launches."""
    calls = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append(
                (self.name, {k: v for k, v in kwargs.items() if k != "enable_fp_fusion"})
            )

    kernels = ta._Kernels(None, {kind: Recorder(("raw", kind)) for kind in (*ta.KINDS, "delta")},
                          {kind: Recorder(("tuned", kind)) for kind in ta.KINDS})  # fmt: skip
    monkeypatch.setattr(ta, "_get_kernels", lambda interpret=None: kernels)
    monkeypatch.setattr(ta, "_check_triton_attention", lambda *args: None)  # CPU tensors, not interpreted
    monkeypatch.setattr(ta, "_shared_memory_limit", lambda index: H100_SHARED)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv(ta.AUTOTUNE_ENV, "1")
    first = {kind: ta.candidate_configs(kind, 128, 128, 2, H100_SHARED)[0] for kind in ta.KINDS}
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        for switch, deterministic, expected in [
            (False, True, [("forward", True), ("dkdv", True), ("dq", True)]),
            (True, None, [("forward", True), ("dkdv", True), ("dq", True)]),
            (False, False, [("forward", False), ("dkdv_atomic", False)]),  # the contrast: autotuned
        ]:
            torch.use_deterministic_algorithms(switch)
            calls.clear()
            q, k, v = qkv(300, 300, 128, 128, torch.float16, requires_grad=True, batch=1, heads=1)
            ta.triton_attention(q, k, v, is_causal=True, deterministic=deterministic).sum().backward()
            launched = [(name, config) for name, config in calls if name[1] != "delta"]
            assert [(kind, where == "raw") for (where, kind), _ in launched] == expected, (switch, deterministic)
            for (where, kind), config in launched:
                assert config == (first[kind] if where == "raw" else {}), (kind, config)
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@needs_triton
def test_compile_kernel_refuses_what_it_cannot_compile():
    with pytest.raises(ValueError, match="kind must be one of"):
        ti.compile_kernel("backward")
    with pytest.raises(TypeError, match="dtype must be one of"):
        ti.compile_kernel("forward", dtype=torch.float64)


# ------------------------------------------------------------------------------------------------------------
# configurations, inputs, availability (no kernel runs)
# ------------------------------------------------------------------------------------------------------------


def test_the_pre_autotuning_configuration_stays_first_among_the_candidates():
    """128 x 64, 3 stages, 4 warps at head_dim 64 and 8 at 128: measured on an H100 before autotuning, it must stay
    a candidate (autotuning can then only match or beat it), and be what ATTNEDU_TRITON_AUTOTUNE=0 uses."""
    for head_dim, warps in ((64, 4), (128, 8)):
        for element_size in (2,):  # float16, bfloat16
            first = ta.candidate_configs("forward", head_dim, head_dim, element_size, H100_SHARED)[0]
            assert first == {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": warps, "num_stages": 3}


@pytest.mark.parametrize("kind", ta.KINDS)
@pytest.mark.parametrize("head_dim, element_size", [(128, 4), (256, 2), (256, 4), (16, 2)])
def test_candidates_that_cannot_fit_shared_memory_are_pruned(kind, head_dim, element_size):
    """float32 at head_dim 128 and bfloat16 at 256 would not fit 128 x 64 tiles in 3 stages: every remaining
    candidate fits the estimate, on an H100 and on a GPU with 99 KiB, and at least one always remains."""
    for limit in (H100_SHARED, 101376 - 8 * 1024):
        configs = ta.candidate_configs(kind, head_dim, head_dim, element_size, limit)
        assert configs
        for config in configs:
            smem, registers = ta._resources(kind, config, max(16, head_dim), max(16, head_dim), element_size)
            assert smem <= limit and registers <= ta.MAX_REGISTERS, config
    if kind == "forward" and (head_dim, element_size) in ((128, 4), (256, 2)):
        old = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
        assert old not in ta.candidate_configs(kind, head_dim, head_dim, element_size, H100_SHARED)


def test_matrix_products_per_tile_match_a_hand_count():
    """Counted by hand in _triton_kernels.py: the forward's tile loop runs S = Q K^T and P V (2); the one-pass
    backward's dK/dV loop runs S^T, P^T dO, dP^T, dS^T Q and, with ATOMIC_DQ, dS K (5); the deterministic backward runs
    that loop without the last and the dQ loop's S, dP, dS K (4 + 3 = 7). Each comes with the comment that says what
    it computes."""
    meanings = {
        path: [p.meaning.split(":")[0].split(",")[0] for p in ti.matrix_products(path)] for path in ti.TILE_LOOPS
    }
    assert meanings == {
        "forward": ["S = Q_i K_j^T", "O_i += P V_j"],
        "one-pass backward": ["S^T = K_j Q_i^T", "dV_j += P^T dO_i", "dP^T = V_j dO_i^T", "dK_j += dS^T Q_i",
                              "dQ_i += dS K_j"],
        "deterministic backward": ["S^T = K_j Q_i^T", "dV_j += P^T dO_i", "dP^T = V_j dO_i^T", "dK_j += dS^T Q_i",
                                   "S = Q_i K_j^T", "dP = dO_i V_j^T", "dQ_i += dS K_j"],
    }  # fmt: skip
    products = ti.matrix_products("deterministic backward")
    assert [p.function for p in products] == ["_dkdv_tiles"] * 4 + ["_dq_tiles"] * 3
    assert all("tl.dot(" in p.code for p in products)


def test_matrix_products_are_read_from_the_source_given():
    """The count follows the source: a product added to the dK/dV loop counts in both backwards, one added under
    ``if ATOMIC_DQ:`` only in the one-pass one, and a tl.dot outside the tile loops in neither."""
    source = (Path(ta.__file__).with_name("_triton_kernels.py")).read_text()
    line = "        dk += tl.dot(ds_t, q)  # dK_j += dS^T Q_i\n"
    assert line in source
    extra = source.replace(line, line + "        dv += tl.dot(p_t.to(do.dtype), do)  # again\n")
    atomic = source.replace(
        "        if ATOMIC_DQ:\n", "        if ATOMIC_DQ:\n            dq = tl.dot(ds_t, q)  # more\n"
    )
    outside = source + "\n\n@triton.jit\ndef _other(a, b):\n    return tl.dot(a, b)\n"
    counts = {
        name: [len(ti.matrix_products(path, text)) for path in ("one-pass backward", "deterministic backward")]
        for name, text in (("source", source), ("extra", extra), ("atomic", atomic), ("outside", outside))
    }
    assert counts == {"source": [5, 7], "extra": [6, 8], "atomic": [6, 7], "outside": [5, 7]}
    with pytest.raises(ValueError, match="path must be one of"):
        ti.matrix_products("backward")


def test_sequence_buckets():
    """Powers of two from 128 to 65536: 4096, 8192 and 16384 are three buckets (the tuning data at head_dim 64 pick
    different tiles at 4k and 16k)."""
    assert [ta._seq_bucket(n) for n in (1, 100, 129, 1000, 1024, 1025, 4096, 4097, 16384, 32768, 65536, 10**6)] == [
        128, 128, 256, 1024, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 65536]  # fmt: skip


def test_unavailable_reason_says_why(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    reason = ta.unavailable_reason()
    if not HAS_TRITON:
        assert "not installed" in reason
    elif not HAS_CUDA:
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
    with pytest.raises(ValueError, match="at most 256"):
        big = torch.zeros(1, 1, 4, 320)
        ta.triton_attention(big, big, big)
    with pytest.raises(TypeError, match="is_causal .* should be True or False, got 1 \\(an int\\)"):
        ta.triton_attention(q, k, v, is_causal=1)
    with pytest.raises(TypeError, match="return_lse .* should be True or False, got 'yes'"):
        ta.triton_attention(q, k, v, return_lse="yes")
    with pytest.raises(TypeError, match="deterministic .* should be True or False, got 'no'"):
        ta.triton_attention(q, k, v, deterministic="no")
    with pytest.raises(TypeError, match="query should be a torch.Tensor"):
        ta.triton_attention(q.tolist(), k, v)


def test_importing_the_kernel_and_the_benchmark_needs_no_notebook_packages():
    """The GPU machine has torch, triton, numpy, pytest, matplotlib and tqdm only: no ipywidgets, no nbformat."""
    code = (
        "import sys\n"
        "for name in ('ipywidgets', 'nbformat', 'nbclient', 'IPython'):\n"
        "    sys.modules[name] = None  # importing it now raises ImportError\n"
        "import attnedu.triton_attention, attnedu.bench, attnedu.bench_gpu\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


# ------------------------------------------------------------------------------------------------------------
# compiled, on a CUDA GPU (pytest tests/test_triton_attention.py -k gpu)
# ------------------------------------------------------------------------------------------------------------

# On a GPU, float32 goes through TF32 in tl.dot: about 1e-3 relative error, so float32 is held to 1e-2 there.
GPU_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-2}
GPU_GRAD_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 3e-2, torch.float32: 1e-2}


@pytest.fixture
def compiled(monkeypatch):
    """The compiled kernels with the first candidate configuration (no autotuning: compiling every candidate of
    every dtype and head_dim would take minutes)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv(ta.AUTOTUNE_ENV, "0")


@needs_gpu
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_compiled_forward_equals_sdpa(compiled, causal, dtype, head_dim):
    for shape in [(37, 37), (1000, 1000), (513, 1024), (1024, 300)]:
        q, k, v = qkv(*shape, head_dim, head_dim, dtype, device="cuda")
        expected = sdpa(q.double(), k.double(), v.double(), is_causal=causal)
        out, lse = ta.triton_attention(q, k, v, is_causal=causal, return_lse=True)
        assert relative_error(out, expected) <= GPU_TOLERANCE[dtype], shape
        assert torch.isfinite(lse).all()


@needs_gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_forward_at_16k(compiled, causal):
    q, k, v = qkv(16384, 16384, 64, 64, torch.bfloat16, device="cuda", batch=1, heads=2)
    out = ta.triton_attention(q, k, v, is_causal=causal)
    expected = sdpa(q.float(), k.float(), v.float(), is_causal=causal)  # float32 accumulation as a reference
    assert relative_error(out, expected.double()) <= GPU_TOLERANCE[torch.bfloat16]


@needs_gpu
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_compiled_gradients_equal_autograd(compiled, causal, dtype, head_dim):
    for shape in [(1000, 1000), (300, 700), (700, 300)]:
        check_grads(*qkv(*shape, head_dim, head_dim, dtype, device="cuda", requires_grad=True), causal,
                    GPU_GRAD_TOLERANCE[dtype])  # fmt: skip


@needs_gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_gradients_at_head_dim_256_and_at_4k(compiled, causal):
    check_grads(*qkv(500, 500, 256, 256, torch.bfloat16, device="cuda", requires_grad=True), causal,
                GPU_GRAD_TOLERANCE[torch.bfloat16])  # fmt: skip
    q, k, v = qkv(4096, 4096, 64, 64, torch.bfloat16, device="cuda", batch=1, heads=2, requires_grad=True)
    grad_out = torch.randn(1, 2, 4096, 64, device="cuda", dtype=torch.bfloat16)
    out = ta.triton_attention(q, k, v, is_causal=causal)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    reference = [t.detach().float().requires_grad_() for t in (q, k, v)]
    expected = torch.autograd.grad(sdpa(*reference, is_causal=causal), reference, grad_out.float())
    for got, e in zip(grads, expected):
        assert relative_error(got, e.double()) <= GPU_GRAD_TOLERANCE[torch.bfloat16]


@needs_gpu
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpu_every_candidate_configuration_is_correct(compiled, head_dim):
    """Each launch configuration autotuning may choose, run on its own: the forward (with tensor descriptors where
    the GPU has TMA, and with pointers), the dK/dV and dQ kernels of the deterministic backward, and the one-pass
    dK/dV kernel."""
    limit = ta._shared_memory_limit(torch.cuda.current_device())
    q, k, v = qkv(300, 300, head_dim, head_dim, torch.bfloat16, device="cuda")
    grad_out = torch.randn(2, 2, 300, head_dim, device="cuda", dtype=torch.bfloat16)
    expected_out, expected = reference_grads(q, k, v, grad_out, True)
    forward, dkdv, atomic, dq = (ta.candidate_configs(kind, head_dim, head_dim, 2, limit) for kind in ta.KINDS)
    tma_values = (False, True) if torch.cuda.get_device_capability()[0] >= 9 else (False,)
    for config in forward:
        for tma in tma_values:
            assert relative_error(ta._forward(q, k, v, True, config, tma)[0], expected_out) <= 2e-2, (config, tma)
    out, lse = ta._forward(q, k, v, True, forward[0])
    for i in range(max(len(dkdv), len(dq))):
        a, b = dkdv[min(i, len(dkdv) - 1)], dq[min(i, len(dq) - 1)]
        for got, e in zip(ta._backward(q, k, v, out, lse, grad_out, True, a, b, True), expected):
            assert relative_error(got, e) <= 3e-2, (a, b)
    for config in atomic:
        for got, e in zip(ta._backward(q, k, v, out, lse, grad_out, True, config, None, False), expected):
            assert relative_error(got, e) <= 3e-2, config


@needs_gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_backwards_agree_and_the_deterministic_one_repeats_bitwise(compiled, causal):
    """On a GPU, where programs add into dQ in an order that varies: deterministic=True gives bitwise the same
    gradients twice; the one-pass backward agrees with it to rounding (its dK and dV are computed the same way)."""
    q, k, v = qkv(2048, 2048, 64, 64, torch.bfloat16, device="cuda", batch=1, heads=4)
    grad_out = torch.randn(1, 4, 2048, 64, device="cuda", dtype=torch.bfloat16)
    out, lse = ta._forward(q, k, v, causal)
    first, second = (ta._backward(q, k, v, out, lse, grad_out, causal, deterministic=True) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    one_pass = ta._backward(q, k, v, out, lse, grad_out, causal, deterministic=False)
    for got, e in zip(one_pass, first):
        assert relative_error(got, e.double()) <= 1e-2


@needs_gpu
@pytest.mark.parametrize("dtype, head_dim", [(torch.bfloat16, 64), (torch.float32, 128), (torch.bfloat16, 256)])
def test_gpu_autotuned_kernels_run_and_are_correct(monkeypatch, dtype, head_dim):
    """The autotuned path, with its pruning: float32 at head_dim 128 and bfloat16 at 256 must not run out of
    shared memory. Each parameter set is the first call of its autotuning key in this process (no other test
    autotunes), so the autotuner times its candidates on this call's arguments: the one-pass dQ must come out right
    all the same (its accumulator is zeroed around the timing launches)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv(ta.AUTOTUNE_ENV, "1")
    for deterministic in (False, True):
        check_grads(*qkv(1000, 1000, head_dim, head_dim, dtype, device="cuda", requires_grad=True), True,
                    GPU_GRAD_TOLERANCE[dtype], deterministic)  # fmt: skip
