"""Small Triton kernels run on the CPU, for lesson 08's practice: a learner's ``@triton.jit`` kernel, launched on
tensors by a launcher that owns the grid, the strides and the memory, under Triton's interpreter.

    triton_state()                                   "interpreted", "compiled" or "not imported"
    launch_softmax(kernel, x, block)                 a row-softmax kernel on x (rows, n_cols) -> (rows, n_cols)
    launch_attention(kernel, q, k, v, block_m, block_n)  an attention kernel for one head -> (n_queries, head_dim)
    reference_kernel(name)                           the course's kernels: "softmax", "attention", "causal_attention"
    compare_on_gpu({kind: kernel, ...})              on a CUDA GPU: the kernels compiled, timed against PyTorch

The kernels' signatures (every tensor row-major, each with its own row stride, in elements):

    softmax_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr)                one program per row
    attention_kernel(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr)
                                                     one program per block of BLOCK_M queries; so is the causal one

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
replacing the interpreter's native ``load``/``store`` for the time of one launch (Triton 3.6 to 3.9).
"""

from __future__ import annotations

import contextlib
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

from ._validate import check_positive_int, check_tensor, describe

GUARD = 4096  # NaN elements before and after each tensor's rows: a missing mask reads them, not another tensor
KERNEL_TYPES = ("InterpretedFunction", "JITFunction")
RESTART = (
    "Restart the notebook's kernel (Kernel > Restart Kernel) and run the notebook from its first cell, which switches "
    "the interpreter on before anything imports triton."
)


class KernelError(RuntimeError):
    """The kernel cannot be launched as it is; the message says why and what to do."""


class TritonMissingError(KernelError):
    """Triton is not installed here (it has no build for macOS or Windows): the exercise cannot be attempted."""


class TritonModeError(KernelError):
    """Triton was imported in the wrong mode for this launch (compiled, where the interpreter is needed)."""


class KernelMemoryError(KernelError):
    """A load or store of the kernel touched memory that is not an element of the tensor it points into."""


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


# ------------------------------------------------------------------------------------------------------------
# memory: each tensor in an allocation of its own, every address checked
# ------------------------------------------------------------------------------------------------------------


@dataclass
class _Buffer:
    """One tensor the kernel sees: ``rows`` rows of ``cols`` float32 numbers, ``stride`` apart, in the middle of a
    NaN allocation (GUARD, rows * stride, GUARD). The words are for messages."""

    name: str  # as the kernel's signature names it, "X" or "K"
    stride_name: str  # "stride_x"
    rows: int
    cols: int
    stride: int
    output: bool = False
    row_word: str = "row"  # what a row is: "row", "key", "query"
    rows_name: str = ""  # how the kernel knows the number of rows ("n_keys"); "" if each program has its own row
    cols_name: str = "n_cols"  # how it knows the number of columns ("n_cols", "HEAD_DIM")
    cols_partial: bool = False  # a block of columns may run past the last column (a row longer than the block)
    own_row: bool = False  # program i works on row i

    def __post_init__(self) -> None:
        self.alloc = torch.full((GUARD + self.rows * self.stride + GUARD,), float("nan"), dtype=torch.float32)
        self.base = self.alloc.data_ptr()
        self.end = self.base + self.alloc.numel() * 4
        self.first = self.base + GUARD * 4  # the address of element (0, 0)

    @property
    def view(self) -> torch.Tensor:
        return self.alloc[GUARD : GUARD + self.rows * self.stride].view(self.rows, self.stride)[:, : self.cols]

    @classmethod
    def holding(cls, x: torch.Tensor, pad: int, **words) -> _Buffer:
        buffer = cls(rows=x.shape[0], cols=x.shape[1], stride=x.shape[1] + pad, **words)
        buffer.view.copy_(x)
        return buffer


def _span(values: np.ndarray) -> str:
    low, high = int(values.min()), int(values.max())
    return f"{low}" if low == high else f"{low} to {high}"


class _MemoryCheck:
    """Stands in for the interpreter's native module during one launch: every address a load or store touches (where
    its mask is True) must be an element of one of ``buffers`` (and, for a store, of an output)."""

    def __init__(self, native, buffers: list[_Buffer]):
        self._native, self._buffers = native, buffers

    def __getattr__(self, name):  # fma, the enums, ...: the native ones
        return getattr(self._native, name)

    def load(self, ptrs, mask, other, dtype):
        self._check("load", ptrs, mask)
        return self._native.load(ptrs, mask, other, dtype)

    def store(self, ptrs, value, mask):
        self._check("store", ptrs, mask)
        return self._native.store(ptrs, value, mask)

    def atomic_rmw(self, *args, **kwargs):
        raise KernelMemoryError("this exercise needs no atomic operations (tl.atomic_*): use tl.load and tl.store")

    atomic_cas = atomic_rmw

    def _check(self, kind: str, ptrs, mask) -> None:
        addresses = np.asarray(ptrs)
        if np.asarray(mask).dtype == bool and np.asarray(mask).shape == addresses.shape:
            addresses = addresses[np.asarray(mask)]
        addresses = addresses.astype(np.int64).ravel()
        if addresses.size == 0:
            return
        found = np.zeros(addresses.shape, dtype=bool)
        for buffer in self._buffers:
            inside = (addresses >= buffer.base) & (addresses < buffer.end)
            found |= inside
            if inside.any():
                self._check_buffer(kind, buffer, addresses[inside])
        if not found.all():
            raise KernelMemoryError(self._far(kind, addresses[~found]))

    def _check_buffer(self, kind: str, buffer: _Buffer, addresses: np.ndarray) -> None:
        offsets = addresses - buffer.first
        if (offsets % 4).any():
            raise KernelMemoryError(f"{self._who()} {_verb(kind)} {buffer.name} at an address that is not the start "
                                    "of a float32 number: offsets count elements, not bytes")  # fmt: skip
        index = offsets // 4
        rows, cols = index // buffer.stride, index % buffer.stride  # floor division: rows < 0 before the start
        bad = (rows < 0) | (rows >= buffer.rows) | (cols >= buffer.cols)
        if kind == "store" and not buffer.output:
            raise KernelMemoryError(f"{self._who()} stored to {buffer.name}, an input: store only to the output")
        if bad.any():
            raise KernelMemoryError(self._explain(kind, buffer, rows[bad], cols[bad]))

    @staticmethod
    def _program():
        from triton.runtime import interpreter

        builder = getattr(interpreter, "interpreter_builder", None)
        index = getattr(builder, "grid_idx", None)
        return tuple(int(i) for i in index) if index is not None else None

    def _who(self) -> str:
        program = self._program()
        return "your kernel" if program is None else f"your kernel (program {program[0]})"

    def _explain(self, kind: str, buffer: _Buffer, rows: np.ndarray, cols: np.ndarray) -> str:
        verb, who = _verb(kind), self._who()
        op = "tl.load" if kind == "load" else "tl.store"
        if (rows < 0).any():
            return (f"{who} {verb} {buffer.name} before its first element ({buffer.name} + a negative offset): "
                    "check the signs of the offsets")  # fmt: skip
        past = rows >= buffer.rows
        if past.any() and (rows[past] == buffer.rows).all():
            return (
                f"{who} {verb} {buffer.name} at {buffer.row_word} {buffer.rows}, one past the last "
                f"({buffer.rows_name} = {buffer.rows}, so the last is {buffer.rows - 1}): is the mask "
                f"`<= {buffer.rows_name}` where `< {buffer.rows_name}` was meant?"
            )
        if past.any():
            last = buffer.rows - 1
            return (
                f"{who} {verb} {buffer.name} at {buffer.row_word}s {_span(rows[past])}, past the last one "
                f"({buffer.rows_name} = {buffer.rows}, so the last is {last}): that memory is not part of "
                f"{buffer.name}. The last block of {buffer.row_word}s is partial when {buffer.rows_name} is not a "
                f"multiple of the block size, so its {op} needs a mask: `mask=... < {buffer.rows_name}`"
                + (", and other= a value that does no harm" if kind == "load" else "")
                + "."
            )
        program = self._program()
        if buffer.own_row and program is not None and (rows != program[0]).any():
            p = program[0]
            return (
                f"your kernel's program {p}, which works on row {p}, {verb} {buffer.name} in row "
                f"{_span(rows[rows != p])}, at columns {_span(cols)}: rows are {buffer.stride_name} = {buffer.stride} "
                f"numbers apart, more than the {buffer.cols} of a row ({buffer.cols_name}) when the tensor is a slice "
                f"of a wider one. Row {p} starts at {buffer.name} + {p} * {buffer.stride_name}."
            )
        if buffer.cols_partial and (cols == buffer.cols).all():
            return (
                f"{who} {verb} {buffer.name} at row {_span(rows)}, column {buffer.cols}, one past the last "
                f"({buffer.cols_name} = {buffer.cols}, so the last column is {buffer.cols - 1}): is the mask "
                f"`cols <= {buffer.cols_name}` where `cols < {buffer.cols_name}` was meant?"
            )
        if buffer.cols_partial:
            return (
                f"{who} {verb} {buffer.name} at row {_span(rows)}, columns {_span(cols)}: past the end of the row "
                f"({buffer.cols_name} = {buffer.cols}), in memory that is not part of {buffer.name}. A row longer "
                f"than the block ends in a partial block, so each {op} needs a mask: `mask=cols < {buffer.cols_name}`"
                + (" (and other= a value that changes nothing: -inf before a maximum)" if kind == "load" else "")
                + "."
            )
        return (
            f"{who} {verb} {buffer.name} at {buffer.row_word} {_span(rows)}, positions {_span(cols)}: past the "
            f"{buffer.cols} numbers of a {buffer.row_word} ({buffer.cols_name} = {buffer.cols}), in memory that is not "
            f"part of {buffer.name}. {buffer.row_word.capitalize()} j, dimension d is at {buffer.name} + j * "
            f"{buffer.stride_name} + d: is a stride used for the wrong axis (the {buffer.row_word} and dimension "
            "offsets swapped, as in a transposed read), or another tensor's stride?"
        )

    def _far(self, kind: str, addresses: np.ndarray) -> str:
        nearest = min(self._buffers, key=lambda b: abs(int(addresses[0]) - b.first))
        distance = (int(addresses[0]) - nearest.first) // 4
        return (
            f"{self._who()} {_verb(kind)} memory far outside every tensor ({distance:+d} elements from the start of "
            f"{nearest.name}, which holds {nearest.rows * nearest.stride}). Stopped before it happened: on a GPU, or "
            "in the interpreter unchecked, that ends the process. Is an offset multiplied twice, or a count of "
            "blocks used where a position was meant?"
        )


def _verb(kind: str) -> str:
    return "loaded from" if kind == "load" else "stored to"


@contextlib.contextmanager
def _checked(buffers: list[_Buffer]):
    """Check every load and store of the kernels launched inside, against ``buffers``."""
    from triton.runtime import interpreter

    native = getattr(interpreter, "_interpreter", None)
    if native is None or not hasattr(native, "load"):  # a Triton that does it otherwise: the guards alone protect
        yield
        return
    interpreter._interpreter = _MemoryCheck(native, buffers)
    try:
        yield
    finally:
        interpreter._interpreter = native


@contextlib.contextmanager
def _index_as_int():
    """Triton 3.6's interpreter turns a tensor of one number into an int with ``int(array)``, which NumPy 2.5
    refuses for an array of shape (1,) (so ``range(0, n_cols, BLOCK)`` fails); Triton 3.9 squeezes it first. Do what
    3.9 does, for the time of one launch."""
    from triton.runtime import interpreter

    patch_tensor = getattr(interpreter, "_patch_lang_tensor", None)
    if patch_tensor is None:
        yield
        return

    def patched(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched
    try:
        yield
    finally:
        interpreter._patch_lang_tensor = patch_tensor


def _launch(kernel, name: str, grid: tuple, buffers: list[_Buffer], *args, **constants) -> None:
    """``kernel[grid](*args, **constants)`` under the interpreter, memory checked; the learner's own exceptions come
    out as they were raised in the kernel (not wrapped), NotImplementedError included."""
    _ready(kernel, name)
    try:
        with _checked(buffers), _index_as_int(), np.errstate(all="ignore"):  # inf, NaN: the check reports them
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


def _float_matrix(name: str, x) -> torch.Tensor:
    check_tensor(name, x, 2, f"({name}_rows, {name}_cols)")
    if not x.is_floating_point():
        raise TypeError(f"{name} should be a float tensor, got {describe(x)}")
    return x.detach().to("cpu", torch.float32)


def launch_softmax(kernel, x: torch.Tensor, block: int) -> torch.Tensor:
    """Run a row-softmax ``kernel`` (the signature in the module's docstring) on x (rows, n_cols): one program per
    row, ``BLOCK=block``; -> (rows, n_cols) float32. X and Y have rows of different, padded strides; the entries of Y
    the kernel never stores stay NaN."""
    x = _float_matrix("x", x)
    block = check_positive_int("block", block, "numbers per block, a power of two")
    if block & (block - 1):
        raise ValueError(f"block should be a power of two (tl.arange needs one), got {block}")
    rows, n_cols = x.shape
    pad = block + 3  # wide enough that a block read past the end of a row lands in the row's own padding
    words = {"own_row": True, "cols_partial": True, "cols_name": "n_cols"}
    source = _Buffer.holding(x, pad, name="X", stride_name="stride_x", **words)
    out = _Buffer(name="Y", stride_name="stride_y", rows=rows, cols=n_cols, stride=n_cols + pad + 2, output=True,
                  **words)  # fmt: skip
    _launch(kernel, "softmax_kernel", (rows,), [source, out], source.view, out.view, n_cols, source.stride,
            out.stride, BLOCK=block)  # fmt: skip
    return out.view.clone()


def launch_attention(kernel, q, k, v, block_m: int, block_n: int) -> torch.Tensor:
    """Run an attention ``kernel`` (the signature in the module's docstring) for one head: q (n_queries, head_dim),
    k and v (n_keys, head_dim), one program per block of ``block_m`` queries, ``sm_scale = 1 / sqrt(head_dim)``;
    -> (n_queries, head_dim) float32. Each tensor has its own padded row stride."""
    q, k, v = _float_matrix("q", q), _float_matrix("k", k), _float_matrix("v", v)
    (n_q, head_dim), n_k = q.shape, k.shape[0]
    if k.shape[1] != head_dim or v.shape != k.shape:
        raise ValueError(f"k and v should be (n_keys, head_dim) with q's head_dim, got q {describe(q)}, "
                         f"k {describe(k)}, v {describe(v)}")  # fmt: skip
    for name, value in (("block_m", block_m), ("block_n", block_n), ("head_dim", head_dim)):
        check_positive_int(name, value, "a block size")
        if value & (value - 1):
            raise ValueError(f"{name} should be a power of two (tl.arange needs one), got {value}")
    queries = {"row_word": "query", "rows_name": "n_queries", "cols_name": "HEAD_DIM"}
    keys = {"row_word": "key", "rows_name": "n_keys", "cols_name": "HEAD_DIM"}
    buffers = [
        _Buffer.holding(q, 3, name="Q", stride_name="stride_q", **queries),
        _Buffer.holding(k, 5, name="K", stride_name="stride_k", **keys),
        _Buffer.holding(v, 7, name="V", stride_name="stride_v", **keys),
        _Buffer(name="O", stride_name="stride_o", rows=n_q, cols=head_dim, stride=head_dim + 9, output=True, **queries),
    ]
    views = [b.view for b in buffers]
    strides = [b.stride for b in buffers]
    grid = (-(-n_q // block_m),)
    name = getattr(getattr(kernel, "fn", None), "__name__", "the kernel")
    _launch(kernel, name, grid, buffers, *views, n_q, n_k, *strides, 1.0 / math.sqrt(head_dim),
            BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=head_dim)  # fmt: skip
    return buffers[-1].view.clone()


# ------------------------------------------------------------------------------------------------------------
# the reference kernels
# ------------------------------------------------------------------------------------------------------------

REFERENCE_NAMES = {"softmax": "softmax_kernel", "attention": "attention_kernel",
                   "causal_attention": "causal_attention_kernel"}  # fmt: skip


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
    """The course's kernel ``name`` ("softmax", "attention" or "causal_attention"), decorated in the mode triton
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
