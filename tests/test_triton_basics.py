"""attnedu.triton_basics: the launchers of lesson 08's Triton exercises under Triton's CPU interpreter (switched on
by tests/conftest.py where there is no GPU): the reference kernels equal PyTorch, every load and store is checked
(and a wild one stopped before it ends the process), the learner's exceptions come out unwrapped, a kernel decorated
compiled or a triton imported compiled gets a message that says to restart, and on a CUDA GPU the same kernels
compile and are timed (tests with "gpu" in their names).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from attnedu import checks
from attnedu import triton_basics as tb
from attnedu.flash import naive_attention

HAS_TRITON = importlib.util.find_spec("triton") is not None
ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (Linux only)")

if HAS_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def unmasked_softmax(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x + cols)
        e = tl.exp(x - tl.max(x, 0))
        tl.store(Y + row * stride_y + cols, e / tl.sum(e, 0))

    @triton.jit
    def writes_its_input(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        tl.store(X + tl.program_id(0) * stride_x + cols, tl.zeros([BLOCK], tl.float32), mask=cols < n_cols)

    @triton.jit
    def reads_far_away(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK) + 1_000_000_000  # far past any tensor: unchecked, the process would die
        tl.store(Y + cols, tl.load(X + cols))

    @triton.jit
    def queries_unmasked(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + rows[:, None] * stride_q + dims[None, :])  # no mask: the last block of queries is partial
        tl.store(O + rows[:, None] * stride_o + dims[None, :], q, mask=rows[:, None] < n_queries)

    @triton.jit
    def unfinished(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)  # noqa: F841
        # YOUR CODE HERE
        raise NotImplementedError()

    @triton.jit
    def loops_forever(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        start = 0
        while start < n_cols:
            tl.store(Y + start + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32), mask=tl.arange(0, BLOCK) < 1)


def _interpreted() -> bool:
    return HAS_TRITON and tb.triton_state() == "interpreted"


needs_interpreter = pytest.mark.skipif(
    not _interpreted(), reason="triton was imported compiled here (a GPU machine): the interpreter cannot run"
)


@needs_interpreter
@pytest.mark.parametrize("rows, n_cols, block", [(3, 40, 16), (1, 10, 16), (2, 64, 32), (4, 7, 8), (2, 33, 4)])
def test_reference_softmax_kernel_equals_torch(rows, n_cols, block):
    x = 5 * torch.randn(rows, n_cols, generator=torch.Generator().manual_seed(n_cols))
    y = tb.launch_softmax(tb.reference_kernel("softmax"), x, block)
    torch.testing.assert_close(y, torch.softmax(x, dim=-1))


@needs_interpreter
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q, n_k, block_m, block_n", [(32, 64, 16, 32), (20, 20, 16, 16), (1, 1, 16, 32),
                                                        (48, 50, 16, 16), (37, 37, 32, 16)])  # fmt: skip
def test_reference_attention_kernels_equal_naive_attention(causal, n_q, n_k, block_m, block_n):
    if causal and n_q != n_k:
        pytest.skip("the causal kernel is for self-attention")
    g = torch.Generator().manual_seed(n_q + n_k)
    q, k, v = torch.randn(n_q, 16, generator=g), torch.randn(n_k, 16, generator=g), torch.randn(n_k, 16, generator=g)
    kernel = tb.reference_kernel("causal_attention" if causal else "attention")
    out = tb.launch_attention(kernel, q, k, v, block_m, block_n)
    torch.testing.assert_close(out, naive_attention(q, k, v, is_causal=causal), atol=1e-5, rtol=1e-4)


def _dv_by_autograd(q, k, d_out, causal):
    """dV = P^T dO, as the gradient that reaches V through naive attention (float64)."""
    v = torch.zeros(k.shape, dtype=torch.float64, requires_grad=True)
    naive_attention(q.double(), k.double(), v, is_causal=causal).backward(d_out.double())
    return v.grad.float()


@needs_interpreter
@pytest.mark.parametrize("n_q, n_k, block_m, block_n, causal", [
    (32, 32, 16, 16, False), (40, 24, 16, 16, False), (48, 48, 32, 16, True), (40, 40, 16, 32, True),
    (1, 1, 16, 16, True), (37, 37, 16, 16, True)])  # fmt: skip
def test_reference_dv_kernel_equals_autograd(n_q, n_k, block_m, block_n, causal):
    """The dV kernel, keys outside, P rebuilt from the saved log-sum-exp: equal to autograd's gradient of V, for
    ragged lengths, blocks of either size larger, causal or not."""
    g = torch.Generator().manual_seed(n_q + n_k)
    q, k, d_out = (torch.randn(n, 16, generator=g) for n in (n_q, n_k, n_q))
    s = q.double() @ k.double().T / 4
    if causal:
        s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=1).float()
    out = tb.launch_dv(tb.reference_kernel("dv"), q, k, d_out, lse, block_m, block_n, causal)
    torch.testing.assert_close(out, _dv_by_autograd(q, k, d_out, causal), atol=1e-5, rtol=1e-4)


@needs_interpreter
def test_every_load_and_store_is_checked():
    x = torch.randn(3, 10)
    with pytest.raises(tb.KernelMemoryError, match=r"columns 10 to 15: past the end of the row .*`mask=cols < n_cols`"):
        tb.launch_softmax(unmasked_softmax, x, 16)
    with pytest.raises(tb.KernelMemoryError, match="stored to X, an input"):
        tb.launch_softmax(writes_its_input, x, 16)
    with pytest.raises(tb.KernelMemoryError, match="far outside every tensor"):
        tb.launch_softmax(reads_far_away, x, 16)  # stopped before the read: this process lives on
    assert torch.isfinite(tb.launch_softmax(unmasked_softmax, torch.randn(3, 16), 16)).all()  # full rows: fine


@needs_interpreter
def test_memory_messages_name_rows_in_the_exercises_words():
    """The rows of Q are queries, in the singular and the plural (not "querys")."""
    q, k = torch.randn(20, 16), torch.randn(16, 16)
    with pytest.raises(tb.KernelMemoryError, match="at queries 20 to 31, past the last one") as error:
        tb.launch_attention(queries_unmasked, q, k, k, 16, 16)
    assert "The last block of queries is partial" in str(error.value) and "querys" not in str(error.value)
    with pytest.raises(tb.KernelMemoryError, match="at query 31, one past the last"):
        tb.launch_attention(queries_unmasked, torch.randn(31, 16), k, k, 32, 16)


@needs_interpreter
def test_the_learners_exceptions_come_out_unwrapped():
    with pytest.raises(NotImplementedError):
        tb.launch_softmax(unfinished, torch.randn(2, 8), 8)
    with pytest.raises(tb.KernelError, match=r"decorated with @triton.jit"):
        tb.launch_softmax(lambda *args: None, torch.randn(2, 8), 8)
    result = checks.check_softmax_kernel(unfinished)
    assert result.status == checks.NOT_ATTEMPTED, result


@needs_interpreter
def test_a_kernel_that_loops_forever_is_stopped():
    result = checks.check_softmax_kernel(loops_forever, time_limit=1.0)
    assert result.status == checks.FAILED and "did not finish within 1 s" in result.message


def test_launchers_check_their_arguments():
    with pytest.raises(ValueError, match="power of two"):
        tb.launch_softmax(None, torch.randn(2, 8), 6)
    with pytest.raises(ValueError, match="k and v should be"):
        tb.launch_attention(None, torch.randn(4, 16), torch.randn(5, 16), torch.randn(4, 16), 16, 16)
    with pytest.raises(TypeError, match="float tensor"):
        tb.launch_softmax(None, torch.ones(2, 8, dtype=torch.long), 8)
    with pytest.raises(ValueError, match="kernels should be a dict"):
        tb.compare_on_gpu({"matmul": None})
    q, lse = torch.randn(4, 16), torch.randn(4)
    with pytest.raises(ValueError, match="lse \\(n_queries,\\)"):
        tb.launch_dv(None, q, torch.randn(4, 16), q, torch.randn(5), 16, 16, False)
    with pytest.raises(ValueError, match="n_queries should equal n_keys"):
        tb.launch_dv(None, q, torch.randn(6, 16), q, lse, 16, 16, True)
    with pytest.raises(TypeError, match="causal should be True or False"):
        tb.launch_dv(None, q, q, q, lse, 16, 16, 1)
    with pytest.raises(ValueError, match="block_m should be a power of two"):
        tb.launch_dv(None, q, q, q, lse, 12, 16, False)


def test_a_triton_imported_compiled_gets_a_message_that_says_to_restart():
    """As in a notebook where something imported triton before the first cell switched the interpreter on: the
    check says what happened and what to do, instead of Triton's "Cannot call @triton.jit'd outside of the scope"."""
    script = textwrap.dedent(
        """
        import os
        import triton  # compiled: TRITON_INTERPRET is not set yet
        os.environ["TRITON_INTERPRET"] = "1"  # too late for triton's own functions
        import triton.language as tl
        from attnedu import checks
        from attnedu.triton_basics import triton_state

        @triton.jit
        def softmax_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
            pass

        print(triton_state())
        print(checks.check_softmax_kernel(softmax_kernel).message)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    state, message = run.stdout.strip().splitlines()[-2:]
    assert state == "compiled"
    assert "triton was imported before its CPU interpreter was switched on" in message
    assert "Restart the notebook's kernel" in message


def test_without_a_gpu_the_comparison_says_it_skipped():
    if torch.cuda.is_available():
        pytest.skip("there is a GPU here: test_compare_on_gpu runs instead")
    result = tb.compare_on_gpu({"softmax": None})
    assert repr(result).startswith("GPU timing: skipped, there is no CUDA GPU here")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")
def test_compare_on_gpu():
    """The reference kernels compiled (in a fresh process) on the GPU: each agrees with PyTorch to TF32 precision,
    and both are timed."""
    kernels = {kind: tb.reference_kernel(kind) for kind in ("softmax", "attention", "causal_attention")}
    lines = tb.compare_on_gpu(kernels).lines
    assert len(lines) == 3, lines
    for line in lines:
        assert line.startswith("GPU timing: ") and "your kernel" in line and "failed" not in line, line
        error = float(line.split("largest difference ")[1].split(" ")[0])
        assert error < 5e-2, line
