"""The memory check of ``attnedu.triton_basics``'s launchers (lesson 08): under Triton's interpreter a kernel reads and
writes raw addresses, so each tensor a learner's kernel sees is copied into an allocation of its own (``Buffer``: NaN
padding after every row, a NaN guard region before and after), and every address a ``tl.load`` or ``tl.store`` touches
(where its mask is True) is checked before it happens (``MemoryCheck``, in place of the interpreter's native module
for the time of one launch, ``checked_memory``). Touching anything that is not an element of the tensor stops the kernel
with a ``KernelMemoryError`` that says where, and what that usually means.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import sys
import textwrap
from dataclasses import dataclass

import numpy as np
import torch

GUARD = 4096  # NaN elements before and after each tensor's rows: a missing mask reads them, not another tensor


class KernelError(RuntimeError):
    """The kernel cannot be launched as it is; the message says why and what to do."""


class KernelMemoryError(KernelError):
    """A load or store of the kernel touched memory that is not an element of the tensor it points into."""


@dataclass
class Buffer:
    """One tensor the kernel sees: ``rows`` rows of ``cols`` float32 numbers, ``stride`` apart, in the middle of a
    NaN allocation (GUARD, rows * stride, GUARD). The words are for messages."""

    name: str  # as the kernel's signature names it, "X" or "K"
    stride_name: str  # "stride_x"
    rows: int
    cols: int
    stride: int
    output: bool = False
    row_word: str = "row"  # what a row is: "row", "key", "query"
    row_plural: str = ""  # its plural where not row_word + "s" ("queries")
    rows_name: str = ""  # how the kernel knows the number of rows ("n_keys"); "" if each program has its own row
    cols_name: str = "n_cols"  # how it knows the number of columns ("n_cols", "HEAD_DIM")
    cols_partial: bool = False  # a block of columns may run past the last column (a row longer than the block)
    own_row: bool = False  # program i works on row i

    def __post_init__(self) -> None:
        self.alloc = torch.full((GUARD + self.rows * self.stride + GUARD,), float("nan"), dtype=torch.float32)
        self.base = self.alloc.data_ptr()
        self.end = self.base + self.alloc.numel() * 4
        self.first = self.base + GUARD * 4  # the address of element (0, 0)

    def rows_text(self, rows: np.ndarray) -> str:
        """ "key 5" or "keys 5 to 7": the rows (``row_word``) ``rows`` spans."""
        one = int(rows.min()) == int(rows.max())
        return f"{self.row_word if one else self.row_words} {_span(rows)}"

    @property
    def row_words(self) -> str:
        return self.row_plural or f"{self.row_word}s"

    @property
    def view(self) -> torch.Tensor:
        return self.alloc[GUARD : GUARD + self.rows * self.stride].view(self.rows, self.stride)[:, : self.cols]

    @classmethod
    def holding(cls, x: torch.Tensor, pad: int, **words) -> Buffer:
        buffer = cls(rows=x.shape[0], cols=x.shape[1], stride=x.shape[1] + pad, **words)
        buffer.view.copy_(x)
        return buffer


def _span(values: np.ndarray) -> str:
    low, high = int(values.min()), int(values.max())
    return f"{low}" if low == high else f"{low} to {high}"


class MemoryCheck:
    """Stands in for the interpreter's native module during one launch: every address a load or store touches (where
    its mask is True) must be an element of one of ``buffers`` (and, for a store, of an output)."""

    def __init__(self, native, buffers: list[Buffer], fn=None):
        self._native, self._buffers, self._fn = native, buffers, fn  # fn: the kernel's Python function, if known

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

    def _check_buffer(self, kind: str, buffer: Buffer, addresses: np.ndarray) -> None:
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

    def _explain(self, kind: str, buffer: Buffer, rows: np.ndarray, cols: np.ndarray) -> str:
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
                f"{who} {verb} {buffer.name} at {buffer.rows_text(rows[past])}, past the last one "
                f"({buffer.rows_name} = {buffer.rows}, so the last is {last}): that memory is not part of "
                f"{buffer.name}. The last block of {buffer.row_words} is partial when {buffer.rows_name} is not a "
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
        # A mask on the columns, and row 0's program ran the same line without this (row 0 starts at offset 0
        # whatever the stride): the columns are right, the row's start is not. A wrong mask fails in row 0 already.
        if buffer.cols_partial and program is not None and program[0] > 0 and self._mask_names(op, buffer.cols_name):
            return (
                f"{who} {verb} {buffer.name} at row {_span(rows)}, columns {_span(cols)}: past the end of the row "
                f"({buffer.cols_name} = {buffer.cols}), in memory that is not part of {buffer.name}, though this "
                f"{op} has a mask on {buffer.cols_name} and row 0 ran it without this: so it is where the row starts "
                f"that is off. Rows of {buffer.name} are {buffer.stride_name} = {buffer.stride} numbers apart (the "
                f"launcher gives each tensor its own, wider than a row, as a slice of a wider tensor has): is the row "
                f"offset computed with another tensor's stride, or with {buffer.cols_name}?"
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
            f"{who} {verb} {buffer.name} at {buffer.rows_text(rows)}, positions {_span(cols)}: past the "
            f"{buffer.cols} numbers of a {buffer.row_word} ({buffer.cols_name} = {buffer.cols}), in memory that is not "
            f"part of {buffer.name}. {buffer.row_word.capitalize()} j, dimension d is at {buffer.name} + j * "
            f"{buffer.stride_name} + d: is a stride used for the wrong axis (the {buffer.row_word} and dimension "
            "offsets swapped, as in a transposed read), or another tensor's stride?"
        )

    def _mask_names(self, op: str, name: str) -> bool:
        """Whether the kernel's statement being run holds a ``op`` (tl.load, tl.store) whose ``mask=`` mentions
        ``name``: read from the kernel's source, at the line its frame is on; False when that cannot be found."""
        code = getattr(self._fn, "__code__", None)
        frame = sys._getframe()
        while frame is not None and code is not None and not _same_code(frame.f_code, code):
            frame = frame.f_back
        if frame is None or code is None:
            return False
        try:
            lines, first = inspect.getsourcelines(self._fn)
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except (OSError, TypeError, SyntaxError):
            return False
        line = frame.f_lineno - first + 1
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and f"tl.{node.func.attr}" == op
                and node.lineno <= line <= node.end_lineno
            ):
                masks = [k.value for k in node.keywords if k.arg == "mask"]
                if any(isinstance(n, ast.Name) and n.id == name for m in masks for n in ast.walk(m)):
                    return True
        return False

    def _far(self, kind: str, addresses: np.ndarray) -> str:
        nearest = min(self._buffers, key=lambda b: abs(int(addresses[0]) - b.first))
        distance = (int(addresses[0]) - nearest.first) // 4
        return (
            f"{self._who()} {_verb(kind)} memory far outside every tensor ({distance:+d} elements from the start of "
            f"{nearest.name}, which holds {nearest.rows * nearest.stride}). Stopped before it happened: on a GPU, or "
            "in the interpreter unchecked, that ends the process. Is an offset multiplied twice, or a count of "
            "blocks used where a position was meant?"
        )


def _same_code(a, b) -> bool:
    """The same function's code: the interpreter runs a rewritten copy (its first line the ``def``, not the
    decorator), with the lines of the original file."""
    return a is b or (a.co_filename, a.co_name) == (b.co_filename, b.co_name)


def _verb(kind: str) -> str:
    return "loaded from" if kind == "load" else "stored to"


@contextlib.contextmanager
def checked_memory(buffers: list[Buffer], kernel=None):
    """Check every load and store of the kernels launched inside, against ``buffers`` (``kernel``: the one launched,
    whose source a message may read)."""
    from triton.runtime import interpreter

    native = getattr(interpreter, "_interpreter", None)
    if native is None or not hasattr(native, "load"):  # a Triton that does it otherwise: the guards alone protect
        yield
        return
    interpreter._interpreter = MemoryCheck(native, buffers, getattr(kernel, "fn", None))
    try:
        yield
    finally:
        interpreter._interpreter = native


@contextlib.contextmanager
def index_as_int():
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
