"""The Triton kernels of ``attnedu.triton_attention`` (lessons 08a and 08b) read without a GPU.

* ``compile_kernel`` / ``compile_kernels``: a kernel and launch configuration compiled for a CUDA GPU that need not
  be here (compute capability 9.0: the H100/H200, sm_90a): Triton lowers it to PTX and runs NVIDIA's assembler, both
  on the CPU. What comes back (``CompiledKernel``): registers per thread, bytes spilled to local memory when the 255
  registers run out, shared memory, and the PTX, in which one can look for Hopper's instructions (``wgmma.mma_async``
  for the matrix products, ``cp.async.bulk.tensor`` for the tensor memory accelerator's copies).
* ``matrix_products``: the matrix products (``tl.dot``) each path runs per tile, counted in the kernels' source with
  the comment that says what each computes: the forward 2, the one-pass backward 5, the deterministic backward 7.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from .triton_attention import (
    COMPILE_OPTIONS,
    CONFIG_TABLES,
    GPU_DTYPES,
    H100_SHARED_MEMORY,
    KINDS,
    _BackwardLaunch,
    _forward_args,
    _get_kernels,
    candidate_configs,
)


@dataclass(frozen=True)
class CompiledKernel:
    """One kernel compiled for a GPU that need not be here: what ptxas reports, and the PTX."""

    kind: str  # one of KINDS
    config: dict  # BLOCK_M, BLOCK_N, num_warps, num_stages
    head_dim: int
    dtype: torch.dtype
    is_causal: bool
    tma: bool  # the forward compiled to read and write through tensor descriptors
    arch: str  # e.g. "sm_90a"
    registers: int  # per thread, of at most 255
    spill_stores: int  # bytes per thread written to local memory because the registers ran out
    spill_loads: int
    shared_memory: int  # bytes per program, as the compiler laid it out
    ptx: str

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads

    @property
    def uses_wgmma(self) -> bool:
        """Whether the matrix products use Hopper's asynchronous warpgroup instruction (``wgmma.mma_async``),
        rather than Ampere's ``mma.sync``."""
        return "wgmma.mma_async" in self.ptx

    @property
    def uses_tma(self) -> bool:
        """Whether tiles are copied by Hopper's tensor memory accelerator (``cp.async.bulk.tensor``)."""
        return "cp.async.bulk.tensor" in self.ptx

    def ptx_lines(self, text: str) -> list[str]:
        """The PTX lines that contain ``text`` (e.g. "wgmma.mma_async"), stripped."""
        return [line.strip() for line in self.ptx.splitlines() if text in line]


def compile_kernel(kind: str, config: dict | None = None, *, head_dim: int = 64, dtype: torch.dtype = torch.bfloat16,
                   is_causal: bool = True, capability: int = 90, seq_len: int = 4096, tma: bool = False,
                   ) -> CompiledKernel:  # fmt: skip
    """Compile kernel ``kind`` (one of ``KINDS``; the forward with tensor descriptors when ``tma``, as it runs on a
    Hopper GPU, else with pointers) with launch configuration ``config`` (a dict as
    ``candidate_configs`` returns; default: the first candidate on an H100) for a CUDA GPU of compute capability
    ``capability`` (90: the H100/H200, for which Triton targets sm_90a, the architecture with wgmma and TMA), here,
    with no GPU: Triton lowers the kernel to PTX and runs ptxas, both on the CPU. The arguments are specialized as a
    launch on contiguous (1, 2, seq_len, head_dim) tensors would be (unit strides as constants, the others marked
    divisible by 16), with the options every launch passes (``COMPILE_OPTIONS``). Registers and spill bytes are
    those of the binary Triton made (``_resource_usage``). About a second, plus a few seconds to start a Python
    process where triton was imported for its interpreter (``compile_kernels``)."""
    request = {"kind": kind, "config": config, "head_dim": head_dim, "dtype": dtype, "is_causal": is_causal,
               "capability": capability, "seq_len": seq_len, "tma": tma}  # fmt: skip
    return compile_kernels([request])[0]


def _can_compile_here() -> bool:
    """False when triton was imported for its interpreter (TRITON_INTERPRET=1 then): its own jitted library (tl.sum,
    tl.max, ...) is interpreted for good, and a kernel that calls it cannot be compiled in this process."""
    import triton.language.standard as standard
    from triton.runtime.jit import JITFunction

    return isinstance(getattr(standard, "sum", None), JITFunction)


def compile_kernels(requests: list[dict], threads: int | None = None) -> list[CompiledKernel]:
    """``compile_kernel(**request)`` for each request, in ``threads`` threads (default: one per CPU, at most 8;
    Triton releases the GIL while it compiles): in this process if it can compile (``_can_compile_here``), else in
    one child process, with TRITON_INTERPRET=0, which sends back the results."""
    import pickle
    import subprocess
    import sys

    for request in requests:
        if request["kind"] not in CONFIG_TABLES:
            raise ValueError(f"kind must be one of {KINDS}, got {request['kind']!r}")
        if request.get("dtype", torch.bfloat16) not in GPU_DTYPES:
            raise TypeError(f"dtype must be one of {GPU_DTYPES}, got {request['dtype']}")
        if request.get("tma") and request["kind"] != "forward":
            raise ValueError(
                f"tma=True is for the forward only (the backward kernels use pointers), got {request['kind']!r}"
            )
    threads = threads or max(1, min(8, os.cpu_count() or 1))
    if _can_compile_here():
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(lambda request: _compile_here(**request), requests))
    root = str(Path(__file__).resolve().parent.parent)  # this checkout's attnedu, installed or not
    env = {
        **os.environ,
        "TRITON_INTERPRET": "0",
        "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
    }
    code = "import sys, pickle; from attnedu import triton_inspect as ti; " \
           "sys.stdout.buffer.write(pickle.dumps(ti.compile_kernels(*pickle.load(sys.stdin.buffer))))"  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps((requests, threads)), capture_output=True,
                          env=env, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"compiling in a child process failed: {done.stderr.decode(errors='replace')[-3000:]}")
    return pickle.loads(done.stdout)


def _compile_here(kind: str, config: dict | None = None, *, head_dim: int = 64, dtype: torch.dtype = torch.bfloat16,
                  is_causal: bool = True, capability: int = 90, seq_len: int = 4096, tma: bool = False,
                  ) -> CompiledKernel:  # fmt: skip
    """compile_kernel, in this process (which must be able to: ``_can_compile_here``)."""

    import triton
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia import compiler as nvidia
    from triton.compiler import ASTSource

    if config is None:
        config = candidate_configs(kind, head_dim, head_dim, dtype.itemsize, H100_SHARED_MEMORY)[0]
    q = torch.empty(1, 2, seq_len, head_dim, dtype=dtype)  # stand-ins: only their dtype, strides, alignment count
    if kind == "forward":
        args = _forward_args(q, q, q, q, torch.empty(1, 2, seq_len), is_causal, tma)
    else:
        launch = _BackwardLaunch(q, q, q, q, torch.empty(1, 2, seq_len), q, is_causal, kind == "dq" or kind == "dkdv")
        args = launch.dq_args if kind == "dq" else launch.dkdv_args
    kernel = _get_kernels(interpret=False).raw[kind]
    signature, constexprs, attrs = {}, {"BLOCK_M": config["BLOCK_M"], "BLOCK_N": config["BLOCK_N"]}, {}
    for i, (name, value) in enumerate(zip(kernel.arg_names, args)):
        if kernel.params[i].is_constexpr:
            signature[name], constexprs[name] = "constexpr", value
            continue
        kind_of, attribute = native_specialize_impl(nvidia.CUDABackend, value, False, True, True)  # as a launch does
        if kind_of == "constexpr":  # an integer equal to 1
            signature[name], constexprs[name] = "constexpr", attribute
        else:
            signature[name] = kind_of
            if attribute:
                attrs[(i,)] = nvidia.CUDABackend.parse_attr(attribute)
    signature.update(BLOCK_M="constexpr", BLOCK_N="constexpr")
    options = {"num_warps": config["num_warps"], "num_stages": config["num_stages"], **COMPILE_OPTIONS}
    compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=GPUTarget("cuda", capability, 32),
                              options=options)  # fmt: skip
    ptx = compiled.asm["ptx"]
    arch = nvidia.sm_arch_from_capability(capability)
    registers, spills = _resource_usage(compiled.asm["cubin"], ptx, arch, capability)
    return CompiledKernel(kind, dict(config), head_dim, dtype, is_causal, tma, arch, registers, *spills,
                          int(compiled.metadata.shared), ptx)  # fmt: skip


def _resource_usage(cubin: bytes, ptx: str, arch: str, capability: int) -> tuple[int, tuple[int, int]]:
    """(registers, (spill store bytes, spill load bytes)) of a kernel Triton compiled. The registers and the stack
    frame are read from the binary Triton made (``cuobjdump -res-usage``: milliseconds); spills live in the stack
    frame, so a frame of 0 bytes means no spill. Otherwise (or without cuobjdump), ptxas -v is run again on the PTX
    with the flags Triton gives it, for the spill bytes (Triton does not keep its log)."""
    import subprocess
    import tempfile

    from triton import knobs
    from triton.backends.nvidia import compiler as nvidia

    with tempfile.TemporaryDirectory() as folder:
        binary = Path(folder) / "kernel.cubin"
        binary.write_bytes(cubin)
        try:
            usage = subprocess.run([knobs.nvidia.cuobjdump.path, "-res-usage", str(binary)], capture_output=True,
                                   text=True, check=True).stdout  # fmt: skip
            found = re.search(r"REG:(\d+) STACK:(\d+)", usage)
        except Exception:  # no cuobjdump with this triton
            found = None
        if found and int(found.group(2)) == 0:
            return int(found.group(1)), (0, 0)
        try:
            ptxas = nvidia.get_ptxas(capability).path
        except TypeError:  # older Triton: get_ptxas() takes no architecture
            ptxas = nvidia.get_ptxas().path
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        fmad = [] if COMPILE_OPTIONS["enable_fp_fusion"] else ["--fmad=false"]
        flags = ["-lineinfo", *fmad, "-v", "--regAllocOptLevel=2", f"--gpu-name={arch}"]  # as Triton 3.9 runs it
        done = subprocess.run([ptxas, *flags, str(source), "-o", str(source) + ".o"], capture_output=True, text=True,
                              check=True)  # fmt: skip
    log = done.stdout + done.stderr
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    registers = re.search(r"Used (\d+) registers", log)
    if not (spills and registers):
        raise RuntimeError(f"could not read registers and spills from ptxas -v: {log[-500:]}")
    return int(registers.group(1)), (int(spills.group(1)), int(spills.group(2)))


@dataclass(frozen=True)
class MatrixProduct:
    """One ``tl.dot`` in a kernel's loop over tiles: where it is, its code, and what it computes (its comment)."""

    function: str  # the jitted function whose loop body holds it
    line: int  # in _triton_kernels.py
    code: str
    meaning: str


# Which tile loops each path runs, once per (query block, key block) tile, with the constexpr flags they get.
TILE_LOOPS = {
    "forward": [("_forward_tiles", {})],
    "one-pass backward": [("_dkdv_tiles", {"ATOMIC_DQ": True})],
    "deterministic backward": [("_dkdv_tiles", {"ATOMIC_DQ": False}), ("_dq_tiles", {})],
}


def matrix_products(path: str, source: str | None = None) -> list[MatrixProduct]:
    """The matrix products per tile of ``path`` ("forward", "one-pass backward" or "deterministic backward"),
    counted in the kernels' source (``_triton_kernels.py``, or ``source``): each ``tl.dot`` call in the tile loops
    that path runs (``TILE_LOOPS``), skipping the branches of ``if FLAG:`` that a constexpr flag turns off, each with
    the comment on its line, which says what it computes. The one-pass backward has 5 per tile, the deterministic one
    7 (its dQ kernel recomputes S and dP), the forward 2."""
    import ast

    if path not in TILE_LOOPS:
        raise ValueError(f"path must be one of {tuple(TILE_LOOPS)}, got {path!r}")
    if source is None:
        source = Path(__file__).with_name("_triton_kernels.py").read_text()
    lines = source.splitlines()
    functions = {node.name: node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
    found = []

    def visit(node, function: str, flags: dict) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id in flags:
            for child in node.body if flags[node.test.id] else node.orelse:
                visit(child, function, flags)
            return
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "dot"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "tl"):  # fmt: skip
            text = lines[node.lineno - 1]
            code, _, comment = text.partition("#")
            found.append(MatrixProduct(function, node.lineno, code.strip(), comment.strip()))
        for child in ast.iter_child_nodes(node):
            visit(child, function, flags)

    for name, flags in TILE_LOOPS[path]:
        visit(functions[name], name, flags)
    return found  # in the order they run: functions as listed, calls in source order


def kernel_source(name: str, first: str | None = None, until: str | None = None, through: str | None = None) -> str:
    """Lines of function ``name`` of ``_triton_kernels.py`` as the lessons print them, headed by the file's line
    numbers: from the first line that contains ``first`` (default: the ``def`` line) up to, not including, the next
    that contains ``until``, or including the next that contains ``through``, or to the end; dedented. Read from the
    file, so it needs no triton (the same text ``inspect.getsource`` gives where triton imports). A marker no line
    holds raises ``ValueError``: the kernel has changed, and so must the lesson that prints it."""
    import ast
    import textwrap

    if until is not None and through is not None:
        raise ValueError("give until or through, not both")
    path = Path(__file__).with_name("_triton_kernels.py")
    text = path.read_text()
    node = next((n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if node is None:
        raise ValueError(f"{path.name} has no function {name!r}")
    lines = text.splitlines()[node.lineno - 1 : node.end_lineno]
    begin = 0 if first is None else next((i for i, line in enumerate(lines) if first in line), None)
    if begin is None:
        raise ValueError(f"{name}: no line holds {first!r}: has the kernel changed?")
    marker = until if until is not None else through
    end = len(lines)
    if marker is not None:
        found = next((i for i in range(begin + 1, len(lines)) if marker in lines[i]), None)
        if found is None:
            raise ValueError(f"{name}: no line after {first!r} holds {marker!r}: has the kernel changed?")
        end = found if until is not None else found + 1
    body = textwrap.dedent("\n".join(lines[begin:end])).rstrip()
    return f"# {path.name}, {name}, lines {node.lineno + begin}-{node.lineno + end - 1}\n{body}"
