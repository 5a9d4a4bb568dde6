"""Small Triton kernels run on the CPU, for lesson 08's practice: a learner's ``@triton.jit`` kernel, launched on
tensors by a launcher that owns the grid, the strides and the memory, under Triton's interpreter.

    triton_state()                                   "interpreted", "compiled" or "not imported"
    launch_softmax(kernel, x, block)                 a row-softmax kernel on x (rows, n_cols) -> (rows, n_cols)
    launch_attention(kernel, q, k, v, block_m, block_n)  an attention kernel for one head -> (n_queries, head_dim)
    launch_dv(kernel, q, k, d_out, lse, block_m, block_n, causal)  a dV kernel for one head -> (n_keys, head_dim)
    reference_kernel(name)                           the course's kernels: "softmax", "attention", "causal_attention",
                                                     "dv"
    compare_on_gpu({kind: kernel, ...})              on a CUDA GPU: the kernels compiled, timed against PyTorch

The kernels' signatures (every tensor row-major, each with its own row stride, in elements):

    softmax_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr)                one program per row
    attention_kernel(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr)
                                                     one program per block of BLOCK_M queries; so is the causal one
    dv_kernel(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr)
                                                     one program per block of BLOCK_N keys; LSE holds one number per
                                                     query (n_queries of them, one apart), the natural log-sum-exp

The interpreter. ``TRITON_INTERPRET=1`` makes ``@triton.jit`` return a function that runs each program in turn with
NumPy, on CPU tensors: no GPU needed, ``print`` works, and it is hundreds of times slower (tiny sizes only). Triton
reads the setting when it decorates a function, and it decorates its own standard library (``tl.sum``, ``tl.max``,
...) once, when triton is first imported: so the setting must come before that import, which ``torch.optim`` or
``torch.compile`` may make behind the scenes (through ``torch._dynamo``). Once triton was imported compiled, an
interpreted kernel fails ("Cannot call @triton.jit'd outside of the scope of a kernel"); the launchers check that
first (``triton_state``) and say to restart the kernel instead.

Memory. The interpreter reads and writes raw addresses: a load past the end of a tensor reads whatever lies there,
a store corrupts it, and a load far away ends the process. So the launchers copy each tensor into an allocation of
its own, with padding after every row and a guard region before and after (both NaN), and check every address a
``tl.load`` or ``tl.store`` touches (where its mask is True) before it happens: touching anything that is not an
element of the tensor stops the kernel with a ``KernelMemoryError`` that says where, and what that usually means (a
missing mask on the last, partial block; a stride used for the wrong axis; another row's offset). Checked by
replacing the interpreter's native ``load``/``store`` for the time of one launch (Triton 3.6 to 3.9), in
``attnedu._triton_memory``. The launchers check their own arguments in one call at their top (the checks are at the
end of this module).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ._triton_memory import Buffer, KernelError, checked_memory, index_as_int
from ._triton_memory import KernelMemoryError as KernelMemoryError  # raised by the launchers, caught by name
from ._validate import check_positive_int, check_tensor, describe

KERNEL_TYPES = ("InterpretedFunction", "JITFunction")
RESTART = (
    "Restart the notebook's kernel (Kernel > Restart Kernel) and run the notebook from its first cell, which switches "
    "the interpreter on before anything imports triton."
)


class TritonMissingError(KernelError):
    """Triton is not installed here (it has no build for macOS or Windows): the exercise cannot be attempted."""


class TritonModeError(KernelError):
    """Triton was imported in the wrong mode for this launch (compiled, where the interpreter is needed)."""


# ------------------------------------------------------------------------------------------------------------
# the interpreter's state
# ------------------------------------------------------------------------------------------------------------


def triton_state() -> str:
    """How triton's standard library was decorated when triton was first imported in this process: "interpreted",
    "compiled", or "not imported" yet (then setting ``TRITON_INTERPRET=1`` now still takes effect)."""
    if "triton" not in sys.modules:
        return "not imported"
    import triton.language as tl

    standard = getattr(tl, "standard", None)
    reduce_sum = getattr(standard, "sum", None) or tl.sum
    return "interpreted" if type(reduce_sum).__name__ == "InterpretedFunction" else "compiled"


def _ready(kernel, name: str) -> None:
    """Raise a KernelError that says what to do unless ``kernel`` can run here under the interpreter."""
    if importlib.util.find_spec("triton") is None:
        raise TritonMissingError(
            "triton is not installed here, so no kernel can run: it installs on Linux only (pip install -r "
            "requirements.txt); on macOS or Windows, do Part B on Binder or in WSL."
        )
    kind = type(kernel).__name__
    if kind not in KERNEL_TYPES:
        raise KernelError(
            f"{name} should be a Triton kernel: a function decorated with @triton.jit, got {describe(kernel)}. Put "
            "`@triton.jit` on the line above `def`, run that cell again, and pass the kernel itself."
        )
    state = triton_state()
    if state == "compiled":
        raise TritonModeError(
            "triton was imported before its CPU interpreter was switched on (something imported it first, e.g. "
            "torch.optim or torch.compile), so its own functions (tl.sum, tl.max, ...) were compiled for a GPU and "
            f"your kernel cannot run on the CPU in this process. {RESTART}"
        )
    if kind == "JITFunction":
        raise TritonModeError(
            f"{name} was compiled for a GPU: TRITON_INTERPRET was not 1 when its cell ran. Set "
            f"os.environ['TRITON_INTERPRET'] = '1' before importing triton. {RESTART}"
        )


def _launch(kernel, name: str, grid: tuple, buffers: list[Buffer], *args, **constants) -> None:
    """``kernel[grid](*args, **constants)`` under the interpreter, memory checked; the learner's own exceptions come
    out as they were raised in the kernel (not wrapped), NotImplementedError included."""
    _ready(kernel, name)
    try:
        # inf, NaN: the check reports them
        with checked_memory(buffers, kernel), index_as_int(), np.errstate(all="ignore"):
            kernel[grid](*args, **constants)
    except Exception as error:
        cause = error
        while type(cause).__name__ == "InterpreterError" and cause.__cause__ is not None:
            cause = cause.__cause__
        if isinstance(cause, TypeError) and "0-dimensional arrays can be converted" in str(cause):
            import triton

            raise KernelError(
                f"Triton {triton.__version__}'s interpreter cannot run kernels with NumPy {np.__version__}: it turns a "
                "number argument into an array of one element, which this NumPy refuses to convert to an int (fixed in "
                "later Triton releases). The course pins triton 3.9 and numpy 2.4: pip install -r requirements.txt"
            ) from None
        if cause is error:
            raise
        raise cause.with_traceback(cause.__traceback__) from None


# ------------------------------------------------------------------------------------------------------------
# launchers
# ------------------------------------------------------------------------------------------------------------


def launch_softmax(kernel, x: torch.Tensor, block: int) -> torch.Tensor:
    """Run a row-softmax ``kernel`` (the signature in the module's docstring) on x (rows, n_cols): one program per
    row, ``BLOCK=block``; -> (rows, n_cols) float32. X and Y have rows of different, padded strides; the entries of Y
    the kernel never stores stay NaN."""
    x, block = _check_launch_softmax(x, block)
    rows, n_cols = x.shape
    pad = block + 3  # wide enough that a block read past the end of a row lands in the row's own padding
    words = {"own_row": True, "cols_partial": True, "cols_name": "n_cols"}
    source = Buffer.holding(x, pad, name="X", stride_name="stride_x", **words)
    out = Buffer(name="Y", stride_name="stride_y", rows=rows, cols=n_cols, stride=n_cols + pad + 2, output=True,
                 **words)  # fmt: skip
    _launch(kernel, "softmax_kernel", (rows,), [source, out], source.view, out.view, n_cols, source.stride,
            out.stride, BLOCK=block)  # fmt: skip
    return out.view.clone()


# what a row of each tensor is, for the memory check's messages
_QUERIES = {"row_word": "query", "row_plural": "queries", "rows_name": "n_queries", "cols_name": "HEAD_DIM"}
_KEYS = {"row_word": "key", "rows_name": "n_keys", "cols_name": "HEAD_DIM"}


def _query_and_key_buffers(q: torch.Tensor, k: torch.Tensor) -> list[Buffer]:
    """Q and K, each in memory of its own with a row stride of its own (3 and 5 past the row's end)."""
    return [Buffer.holding(q, 3, name="Q", stride_name="stride_q", **_QUERIES),
            Buffer.holding(k, 5, name="K", stride_name="stride_k", **_KEYS)]  # fmt: skip


def launch_attention(kernel, q, k, v, block_m: int, block_n: int) -> torch.Tensor:
    """Run an attention ``kernel`` (the signature in the module's docstring) for one head: q (n_queries, head_dim),
    k and v (n_keys, head_dim), one program per block of ``block_m`` queries, ``sm_scale = 1 / sqrt(head_dim)``;
    -> (n_queries, head_dim) float32. Each tensor has its own padded row stride."""
    q, k, v = _check_launch_attention(q, k, v, block_m, block_n)
    (n_q, head_dim), n_k = q.shape, k.shape[0]
    buffers = [
        *_query_and_key_buffers(q, k),
        Buffer.holding(v, 7, name="V", stride_name="stride_v", **_KEYS),
        Buffer(name="O", stride_name="stride_o", rows=n_q, cols=head_dim, stride=head_dim + 9, output=True, **_QUERIES),
    ]
    views = [b.view for b in buffers]
    strides = [b.stride for b in buffers]
    grid = (-(-n_q // block_m),)
    name = getattr(getattr(kernel, "fn", None), "__name__", "the kernel")
    _launch(kernel, name, grid, buffers, *views, n_q, n_k, *strides, 1.0 / math.sqrt(head_dim),
            BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=head_dim)  # fmt: skip
    return buffers[-1].view.clone()


def launch_dv(kernel, q, k, d_out, lse, block_m: int, block_n: int, causal: bool) -> torch.Tensor:
    """Run a dV ``kernel`` (the signature in the module's docstring) for one head: q (n_queries, head_dim), k
    (n_keys, head_dim), d_out (n_queries, head_dim) the gradient of the output, lse (n_queries,) each query's
    log-sum-exp of its scaled scores (natural log, over the keys it may see); one program per block of ``block_n``
    keys, ``sm_scale = 1 / sqrt(head_dim)``, ``CAUSAL=causal``; -> dV (n_keys, head_dim) float32. Q, K, DO and DV have
    their own padded row strides; LSE is contiguous."""
    q, k, d_out, lse, causal = _check_launch_dv(q, k, d_out, lse, block_m, block_n, causal)
    (n_q, head_dim), n_k = q.shape, k.shape[0]
    lse_words = {
        "row_word": "query",
        "row_plural": "queries",
        "rows_name": "n_queries",
        "cols_name": "one number per query",
    }
    buffers = [
        *_query_and_key_buffers(q, k),
        Buffer.holding(d_out, 7, name="DO", stride_name="stride_do", **_QUERIES),
        Buffer.holding(lse[:, None], 0, name="LSE", stride_name="1", **lse_words),
        Buffer(name="DV", stride_name="stride_dv", rows=n_k, cols=head_dim, stride=head_dim + 9, output=True, **_KEYS),
    ]
    views = [b.view for b in buffers]
    strides = [buffers[i].stride for i in (0, 1, 2, 4)]
    grid = (-(-n_k // block_n),)
    name = getattr(getattr(kernel, "fn", None), "__name__", "the kernel")
    _launch(kernel, name, grid, buffers, *views, n_q, n_k, *strides, 1.0 / math.sqrt(head_dim),
            BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=head_dim, CAUSAL=causal)  # fmt: skip
    return buffers[-1].view.clone()


# the launchers' input checks (one form of message: attnedu._validate)


def _float_matrix(name: str, x) -> torch.Tensor:
    """x as a float32 CPU copy the launcher owns, once checked to be a 2-D float tensor."""
    check_tensor(name, x, 2, f"({name}_rows, {name}_cols)")
    if not x.is_floating_point():
        raise TypeError(f"{name} should be a float tensor, got {describe(x)}")
    return x.detach().to("cpu", torch.float32)


def _check_launch_softmax(x, block) -> tuple[torch.Tensor, int]:
    """x as float32 on the CPU, and block, once checked."""
    x = _float_matrix("x", x)
    block = check_positive_int("block", block, "numbers per block, a power of two")
    if block & (block - 1):
        raise ValueError(f"block should be a power of two (tl.arange needs one), got {block}")
    return x, block


def _check_launch_attention(q, k, v, block_m, block_n) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v as float32 on the CPU, once checked."""
    q, k, v = _float_matrix("q", q), _float_matrix("k", k), _float_matrix("v", v)
    head_dim = q.shape[1]
    if k.shape[1] != head_dim or v.shape != k.shape:
        raise ValueError(f"k and v should be (n_keys, head_dim) with q's head_dim, got q {describe(q)}, "
                         f"k {describe(k)}, v {describe(v)}")  # fmt: skip
    for name, value in (("block_m", block_m), ("block_n", block_n), ("head_dim", head_dim)):
        check_positive_int(name, value, "a block size")
        if value & (value - 1):
            raise ValueError(f"{name} should be a power of two (tl.arange needs one), got {value}")
    return q, k, v


def _check_launch_dv(q, k, d_out, lse, block_m, block_n, causal):
    """q, k, d_out, lse as float32 on the CPU, and causal as a bool, once checked."""
    q, k, d_out = _float_matrix("q", q), _float_matrix("k", k), _float_matrix("d_out", d_out)
    check_tensor("lse", lse, 1, "(n_queries,)")
    if not lse.is_floating_point():
        raise TypeError(f"lse should be a float tensor, got {describe(lse)}")
    if k.shape[1] != q.shape[1] or d_out.shape != q.shape or lse.shape != q.shape[:1]:
        raise ValueError(f"k should be (n_keys, head_dim) with q's head_dim, d_out q's shape and lse (n_queries,), got "
                         f"q {describe(q)}, k {describe(k)}, d_out {describe(d_out)}, lse {describe(lse)}")  # fmt: skip
    if not isinstance(causal, bool):
        raise TypeError(f"causal should be True or False, got {describe(causal)}")
    if causal and q.shape[0] != k.shape[0]:
        raise ValueError(f"a causal kernel is for self-attention: n_queries should equal n_keys, got q {describe(q)} "
                         f"and k {describe(k)}")  # fmt: skip
    for name, value in (("block_m", block_m), ("block_n", block_n), ("head_dim", q.shape[1])):
        check_positive_int(name, value, "a block size")
        if value & (value - 1):
            raise ValueError(f"{name} should be a power of two (tl.arange needs one), got {value}")
    return q, k, d_out, lse.detach().to("cpu", torch.float32), causal


# ------------------------------------------------------------------------------------------------------------
# the reference kernels
# ------------------------------------------------------------------------------------------------------------

REFERENCE_NAMES = {"softmax": "softmax_kernel", "attention": "attention_kernel",
                   "causal_attention": "causal_attention_kernel", "dv": "dv_kernel"}  # fmt: skip


@functools.cache
def _kernels_module(mode: str):
    """``_triton_basics_kernels.py`` loaded as a module of its own for this mode (Triton decorates when it runs)."""
    name = f"{__package__}._triton_basics_kernels_{mode}"
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_triton_basics_kernels.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def reference_kernel(name: str):
    """The course's kernel ``name`` ("softmax", "attention", "causal_attention" or "dv"), decorated in the mode triton
    runs in here (interpreted where ``TRITON_INTERPRET=1`` was set before triton's first import)."""
    if name not in REFERENCE_NAMES:
        raise ValueError(f"name should be one of {tuple(REFERENCE_NAMES)}, got {name!r}")
    mode = "interpreted" if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") else "compiled"
    return getattr(_kernels_module(mode), REFERENCE_NAMES[name])


# ------------------------------------------------------------------------------------------------------------
# on a GPU: the same kernel compiled, in a fresh process, timed against PyTorch
# ------------------------------------------------------------------------------------------------------------

GPU_SIZES = {"softmax": {"rows": 4096, "n_cols": 4096, "block": 1024},
             "attention": {"n": 4096, "head_dim": 64, "block_m": 64, "block_n": 64}}  # fmt: skip
GPU_SIZES["causal_attention"] = GPU_SIZES["attention"]


@dataclass
class GpuComparison:
    """What ``compare_on_gpu`` found: one line per kernel, each starting "GPU timing:", in a notebook's output."""

    lines: list[str]

    def __repr__(self) -> str:
        return "\n".join(self.lines)


def compare_on_gpu(kernels: dict, timeout: float = 300.0) -> GpuComparison:
    """Where there is a CUDA GPU: compile each kernel of ``kernels`` ({"softmax": kernel, "attention": kernel,
    "causal_attention": kernel}, any of them), from its source, in a fresh Python process where triton is not
    interpreted; check it against PyTorch, and time both with ``triton.testing.do_bench`` (the median). On a CPU, one
    line saying that it was skipped. A kernel may use triton, tl and math only, not other names of the notebook."""
    if not isinstance(kernels, dict) or not set(kernels) <= set(GPU_SIZES):
        raise ValueError(f"kernels should be a dict with keys among {tuple(GPU_SIZES)}, got {describe(kernels)}")
    if not torch.cuda.is_available():
        return GpuComparison([
            "GPU timing: skipped, there is no CUDA GPU here. Your kernels ran on the CPU under the interpreter; on a "
            "machine with one, this cell compiles them and times them against PyTorch."
        ])  # fmt: skip
    return GpuComparison([_compare_one(kernel, kind, timeout) for kind, kernel in kernels.items()])


def _compare_one(kernel, kind: str, timeout: float) -> str:
    if type(kernel).__name__ not in KERNEL_TYPES:
        return f"GPU timing: {kind}: not run, the kernel should be a @triton.jit function: {describe(kernel)}"
    try:
        source = textwrap.dedent(inspect.getsource(kernel.fn))
    except (OSError, TypeError) as error:
        return f"GPU timing: {kind}: not run, the kernel's source could not be read ({error})"
    with tempfile.TemporaryDirectory(prefix="attnedu-gpu-") as folder:
        path = Path(folder) / "learner_kernel.py"
        path.write_text("import math\n\nimport triton\nimport triton.language as tl\n\n" + source, encoding="utf-8")
        env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
        command = [sys.executable, "-m", "attnedu.triton_basics", kind, str(path), kernel.fn.__name__]
        try:
            run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"GPU timing: {kind}: stopped after {timeout:g} s (does the kernel loop forever?)"
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if run.returncode != 0 or not lines:
        tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"GPU timing: {kind}: the compiled kernel failed: {tail[0][:300]}"
    found = json.loads(lines[-1])
    return (
        f"GPU timing: {found['what']} on {found['device']}, median of do_bench: your kernel {found['kernel_ms']:.3f} "
        f"ms, {found['torch']} {found['torch_ms']:.3f} ms ({found['kernel_ms'] / found['torch_ms']:.2f} x its time); "
        f"largest difference {found['max_error']:.1e} (tl.dot rounds float32 to TF32 on the GPU)"
    )


def _time_on_gpu(kind: str, path: str, name: str) -> dict:
    """In the fresh process: import the kernel from ``path`` (compiled), run it on CUDA tensors, time it."""
    import triton
    import triton.testing

    spec = importlib.util.spec_from_file_location("learner_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = getattr(module, name)
    sizes = GPU_SIZES[kind]
    g = torch.Generator(device="cuda").manual_seed(0)
    if kind == "softmax":
        x = torch.randn(sizes["rows"], sizes["n_cols"], device="cuda", generator=g)
        y = torch.empty_like(x)

        def run():
            kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0), BLOCK=sizes["block"])

        def baseline():
            return torch.softmax(x, dim=-1)

        what, torch_name = f"softmax of {sizes['rows']} rows of {sizes['n_cols']} (float32)", "torch.softmax"
        run()
        expected, got = baseline(), y
    else:
        causal = kind == "causal_attention"
        n, head_dim = sizes["n"], sizes["head_dim"]
        q, k, v = (torch.randn(n, head_dim, device="cuda", generator=g) for _ in range(3))
        o = torch.empty_like(q)
        grid = (triton.cdiv(n, sizes["block_m"]),)

        def run():
            kernel[grid](q, k, v, o, n, n, q.stride(0), k.stride(0), v.stride(0), o.stride(0), head_dim**-0.5,
                         BLOCK_M=sizes["block_m"], BLOCK_N=sizes["block_n"], HEAD_DIM=head_dim)  # fmt: skip

        def baseline():
            return torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal)[0]

        what = f"{'causal ' if causal else ''}attention, one head, N = {n}, head_dim {head_dim} (float32)"
        torch_name = "PyTorch's scaled_dot_product_attention"
        run()
        expected, got = baseline(), o
    torch.cuda.synchronize()
    return {
        "what": what,
        "device": torch.cuda.get_device_name(),
        "torch": torch_name,
        "max_error": float((got - expected).abs().max()),
        "kernel_ms": float(triton.testing.do_bench(run, return_mode="median")),
        "torch_ms": float(triton.testing.do_bench(baseline, return_mode="median")),
    }


if __name__ == "__main__":
    print(json.dumps(_time_on_gpu(*sys.argv[1:4])))


class _Anything:
    """Stands in for triton and triton.language where triton is not installed: any attribute is another stand-in,
    and ``jit`` returns the function it decorates unchanged, so that the cells defining kernels still run."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args, **kwargs):
        return _Anything()

    @staticmethod
    def jit(fn=None, **kwargs):
        return fn if fn is not None else (lambda f: f)


def triton_stand_ins():
    """(triton, triton.language) stand-ins for a machine without triton (macOS, Windows): an exercise notebook's
    kernel cells still define their functions, and each check answers "not attempted: triton is not installed"."""
    return _Anything(), _Anything()
