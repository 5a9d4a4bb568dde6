"""FlashAttention-2 in Triton (lesson 08), forward and backward: the tiled loop of ``attnedu.flash``, with one
program per (block of queries, batch x head) in the forward, the score tile held on chip.

Forward, per block of queries Q_i (scores in base 2, s = Q_i K_j^T / sqrt(head_dim) * log2(e)):
    m_new = max(m, rowmax(s));  P = exp2(s - m_new);  alpha = exp2(m - m_new)
    l = alpha * l + rowsum(P);  O = alpha * O + P V_j;  m = m_new;   then O / l, and lse = (m + log2 l) * ln 2.
With a causal mask it runs in two stages, as the Triton tutorial (``python/tutorials/06-fused-attention.py``) and
FlashAttention-2 do: first the key blocks wholly below the diagonal, with no mask at all, then the blocks the
diagonal crosses (and a last, partial block of keys), with the mask. Blocks wholly above the diagonal are skipped.

Backward, by recomputation from the saved log-sum-exp (P_ij = exp(s_ij - lse_i)). First D_i = rowsum(dO_i * O_i),
one number per query (a small kernel); then one of two schedules, chosen by ``triton_attention(..., deterministic=)``:

* one pass (``deterministic=False``; the default, unless ``torch.use_deterministic_algorithms(True)``, as in
  FlashAttention-2 and PyTorch's flash SDPA): one program per block of keys K_j, V_j, looping over the blocks of
  queries that see them:
      dV_j += P^T dO_i;   dS = P * (dO_i V_j^T - D_i);   dK_j += dS^T Q_i / sqrt(head_dim);
      dQ_i += dS K_j / sqrt(head_dim), added into a float32 dQ with atomic adds (``tl.atomic_add``),
  5 matrix products per tile. Programs of different key blocks add into the same rows of dQ in whatever order they
  run, and float32 addition is not associative: dQ may differ in its last bits from run to run (dK and dV do not).
* deterministic (``deterministic=True``): the same dK/dV kernel without the dQ product, then a second kernel, one
  program per block of queries, looping over the blocks of keys they see:  dQ_i += dS K_j / sqrt(head_dim).
  No float atomics, so the gradients are bitwise the same every run, at the cost of computing S and dP twice:
  7 matrix products per tile (``matrix_products()`` counts them in the kernels' source). "Every run" includes runs in
  other processes: the block sizes set the order of the sums, and the autotuner picks them by timing (near-ties can
  go either way in a fresh process), so a deterministic call launches every kernel, its forward too, with a fixed
  configuration (the first candidate that fits), never the autotuner's.

Causal tiles above the diagonal are skipped and the diagonal ones masked, in every kernel. Causal programs are
launched heaviest first: the forward's and dQ's programs of the last query blocks (which loop over the most key
blocks) first, and the dK/dV programs of the first key blocks, which meet the most query blocks, come first already.

Written with plain pointer arithmetic (``tl.arange`` offsets, masked ``tl.load``/``tl.store``, ``tl.dot``,
``tl.exp2``, ``tl.where``), not block pointers (Triton 3.9 removed ``tl.make_block_ptr``), so it compiles on the
Triton this course pins (3.9) and on older releases a GPU machine may carry (3.6 with torch 2.11). On a Hopper GPU
(compute capability 9.0: H100, H200) the forward reads Q, K, V and writes O through tensor descriptors instead
(``tl.make_tensor_descriptor``: the tensor memory accelerator, TMA, copies whole tiles between global and shared
memory), where the tensors' strides and alignment allow it (``_use_tma``; ``ATTNEDU_TRITON_TMA=0`` turns it off).

Block sizes, warps and pipeline stages are chosen by ``triton.autotune`` among a few candidates per head_dim
(``FORWARD_CONFIGS``, ``DKDV_CONFIGS``, ``DKDV_ATOMIC_CONFIGS``, ``DQ_CONFIGS``), after dropping those whose tiles would
not fit the GPU's shared memory or registers (float32 at head_dim 128, bfloat16 at 256); the choice is remembered per
sequence-length bucket (powers of two up to 64k), head_dim, causal and dtype. ``ATTNEDU_TRITON_AUTOTUNE=0`` takes the
first candidate that fits instead, as a deterministic call always does. The autotuner zeroes the one-pass backward's
dQ accumulator around its timing launches (``RESET_TO_ZERO``), which would otherwise stay added into it. Every
launch sets FMA fusion explicitly (``COMPILE_OPTIONS``).
``attnedu.triton_inspect`` reads these kernels without a GPU: compiled for an H100 (sm_90a) on the CPU (registers,
spill bytes, Hopper's ``wgmma`` and TMA instructions in the PTX), and their matrix products per tile counted.

Where it runs:
* on a CUDA GPU, compiled;
* on the CPU under Triton's interpreter, when ``TRITON_INTERPRET=1`` is set *before* triton is imported (it is
  read when a kernel is decorated), with one small configuration and no autotuning. The interpreter runs each
  program with NumPy, hundreds of times slower than PyTorch: use it at tiny sizes, to check the kernel. Its
  bfloat16 is wrong without an error, so bfloat16 inputs are computed in float32 there.
``unavailable_reason()`` says why neither is possible, or returns None.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
from pathlib import Path

import torch

from ._validate import check_bool, describe
from ._validate_flash import check_qkv

LOG2_E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)): exp2 is the faster instruction on a GPU
SHAPE_DOC = "(batch, heads, seq_len, head_dim)"
GPU_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256
AUTOTUNE_ENV = "ATTNEDU_TRITON_AUTOTUNE"

# Candidate launch configurations (BLOCK_M queries, BLOCK_N keys, num_warps, num_stages), per head_dim class (the
# padded head_dim: <= 64, <= 128, <= 256), fastest first, three each at head_dim 64 and 128 (every one costs the
# autotuner a compile and a timing on the GPU, and tests/test_triton_attention.py a compile on the CPU). Head_dim 64
# and 128 are ordered by what benchmarks/tune_triton.py measured (benchmarks/triton_tuning.txt: an H100, Triton 3.6,
# bfloat16, N 4096 and 16384, causal and not), keeping the candidates that came first for some shape, and none that
# spills registers when compiled for sm_90a (compile_kernel; the test compiles them all): autotuning times them again
# on the GPU at hand and keeps the fastest. Head_dim 256 was not measured: its lists are guesses sized to fit the
# shared memory.
FORWARD_CONFIGS = {
    64: [(128, 64, 4, 3), (128, 64, 4, 4), (64, 64, 4, 3)],
    128: [(128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3)],
    256: [(128, 32, 8, 2), (64, 64, 4, 2), (64, 32, 4, 2)],
}
# At head_dim 128 every tile of 64 queries compiled spills (with Triton 3.9's ptxas flags: 16-392 bytes) except
# (64, 64, 8, 3), among them the two fastest measured, (64, 64, 4, 2) and (64, 128, 8, 2) (causal: 392 and 352 bytes;
# dK and dV, 64 x 128 float32 each, alone take 128 registers a thread at 4 warps). They are replaced by the fastest
# measured tiles of 32 queries (in benchmarks/triton_tuning.txt, 1% slower than the spilling ones without a mask,
# 11-13% causal) and by (64, 64, 8, 3), not yet timed (with 2 stages it measured twice as slow). Every tile's
# registers and spills: benchmarks/triton_registers.txt.
DKDV_CONFIGS = {
    64: [(32, 128, 4, 5), (32, 64, 4, 3), (64, 64, 4, 2)],
    128: [(32, 64, 4, 3), (32, 128, 8, 3), (64, 64, 8, 3)],
    256: [(16, 64, 8, 2), (32, 64, 8, 2), (16, 32, 4, 2)],
}
# The one-pass backward's dK/dV kernel, which also adds dS K_j into a float32 dQ with atomics (deterministic=False):
# one more product per tile and a (BLOCK_M x head_dim) float32 tile more to hold. Not yet timed on a GPU: chosen
# among the tiles that do not spill (at head_dim 128, the tiles of 64 queries compiled spill, and 32 x 64 at 4 warps).
DKDV_ATOMIC_CONFIGS = {
    64: [(64, 128, 8, 2), (32, 64, 4, 3), (64, 64, 4, 2)],
    128: [(32, 128, 8, 2), (32, 128, 8, 3), (16, 64, 4, 2)],
    256: [(16, 64, 8, 2), (32, 64, 8, 2), (16, 32, 4, 2)],
}
DQ_CONFIGS = {
    64: [(128, 64, 8, 3), (64, 64, 4, 3), (64, 64, 4, 2)],
    128: [(64, 64, 4, 2), (128, 32, 8, 3), (128, 64, 8, 2)],
    256: [(64, 32, 8, 2), (32, 32, 4, 2), (64, 16, 4, 2)],
}
# Smaller configurations, added (those that fit) when fewer than two candidates fit, e.g. float32 at head_dim 128; the
# last fits any head_dim and dtype on any GPU Triton supports.
FALLBACK_CONFIGS = [(64, 64, 4, 2), (64, 32, 4, 2), (32, 32, 4, 1), (16, 16, 4, 1)]
# Under the interpreter: one configuration, no autotuning (each program costs NumPy calls, so few big tiles).
INTERPRETER_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64}
DELTA_BLOCK = 128  # rows per program of the D = rowsum(dO * O) kernel (memory-bound, nothing to tune)
MAX_SEQ_BUCKET = 65536  # the longest sequence-length bucket of the autotuning key (_seq_bucket)
# Options passed to every compiled launch. FMA fusion (a * b + c in one instruction, rounded once) on: it is what
# Triton did by default up to 3.9 (3.9 warns that 3.10 will stop) and what nvcc does (--fmad=true), so the kernels
# compared against (FlashAttention, cuDNN) fuse too; it is faster and, one rounding instead of two, no less accurate.
COMPILE_OPTIONS = {"enable_fp_fusion": True}
TMA_ENV = "ATTNEDU_TRITON_TMA"  # 0: the forward uses pointers even where tensor descriptors (TMA) could run


def interpreting() -> bool:
    """True when Triton's CPU interpreter is requested (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def autotuning() -> bool:
    """True unless ``ATTNEDU_TRITON_AUTOTUNE=0`` (then the first candidate configuration that fits is used)."""
    return os.environ.get(AUTOTUNE_ENV, "1") not in ("", "0")


@functools.cache
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None  # looked up once: it costs tens of microseconds


def unavailable_reason() -> str | None:
    """None when ``triton_attention`` can run here; otherwise one sentence saying why not."""
    if not _triton_installed():
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


# ------------------------------------------------------------------------------------------------------------
# launch configurations
# ------------------------------------------------------------------------------------------------------------


def _dim_class(block_d: int) -> int:
    return 64 if block_d <= 64 else 128 if block_d <= 128 else 256


def _as_dict(config: tuple[int, int, int, int]) -> dict:
    block_m, block_n, warps, stages = config
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}


def _resources(kind: str, config: dict, block_d: int, block_dv: int, element_size: int) -> tuple[int, float]:
    """Estimated (shared memory in bytes, float32 accumulator registers per thread) of one program. Shared memory:
    the tile a program keeps (Q in the forward and dQ, K and V in dK/dV) plus ``num_stages`` buffers of the tiles it
    streams; registers: the float32 accumulators and score tiles spread over the program's threads."""
    bm, bn, threads, stages = config["BLOCK_M"], config["BLOCK_N"], 32 * config["num_warps"], config["num_stages"]
    both = block_d + block_dv
    if kind == "forward":  # keeps Q, streams K and V; acc (bm x dv), S and P (bm x bn)
        return element_size * (bm * block_d + stages * bn * both), (bm * block_dv + bm * bn) / threads
    if kind == "dkdv":  # keeps K and V, streams Q and dO; dK and dV (bn x (d + dv)), P^T and dP^T (bn x bm)
        return element_size * (bn * both + stages * bm * both), (bn * both + 2 * bn * bm) / threads
    if kind == "dkdv_atomic":  # the same, and the dQ tile it adds into the float32 dQ (bm x d)
        return element_size * (bn * both + stages * bm * both), (bn * both + 2 * bn * bm + bm * block_d) / threads
    # dq: keeps Q and dO, streams K and V; dQ (bm x d), P and dP (bm x bn)
    return element_size * (bm * both + stages * bn * both), (bm * block_d + 2 * bm * bn) / threads


@functools.cache
def _shared_memory_limit(device_index: int) -> int:
    """Bytes of shared memory one program may use on this GPU (227 KiB on an H100), less a margin for what the
    compiler adds (layout conversions, reductions)."""
    limit = None
    try:
        from triton.runtime import driver

        limit = driver.active.utils.get_device_properties(device_index)["max_shared_mem"]
    except Exception:  # an older or newer triton without this helper: ask torch
        props = torch.cuda.get_device_properties(device_index)
        limit = getattr(props, "shared_memory_per_block_optin", None)
        if not limit:
            limit = {9: 232448, 8: 166912 if props.minor == 0 else 101376}.get(props.major, 101376)
    return int(limit) - 8 * 1024


H100_SHARED_MEMORY = 232448 - 8 * 1024  # what _shared_memory_limit returns on an H100 or H200 (227 KiB less 8)
MAX_REGISTERS = 192  # float32 accumulator values per thread (of 255 registers) above which a program would spill


CONFIG_TABLES = {"forward": FORWARD_CONFIGS, "dkdv": DKDV_CONFIGS, "dkdv_atomic": DKDV_ATOMIC_CONFIGS, "dq": DQ_CONFIGS}
KINDS = tuple(CONFIG_TABLES)  # the kernels launched with a tuned configuration (the D = rowsum(dO * O) kernel is not)


def candidate_configs(kind: str, block_d: int, block_dv: int, element_size: int, shared_memory: int) -> list[dict]:
    """The launch configurations autotuning chooses among for one kernel (``kind``: one of ``KINDS``):
    the candidates for this head_dim that fit ``shared_memory`` bytes and the register budget, in order of
    preference; small fallbacks are added so that at least two fit (the estimate is rough: a candidate that still
    runs out of resources when compiled is skipped by the autotuner, so the fallback must be there)."""
    table = CONFIG_TABLES[kind]

    def fits(config: dict) -> bool:
        smem, registers = _resources(kind, config, block_d, block_dv, element_size)
        return smem <= shared_memory and registers <= MAX_REGISTERS

    chosen = [c for c in map(_as_dict, table[_dim_class(max(block_d, block_dv))]) if fits(c)]
    for fallback in map(_as_dict, FALLBACK_CONFIGS):
        if len(chosen) >= 2:
            break
        if fallback not in chosen and fits(fallback):
            chosen.append(fallback)
    return chosen or [_as_dict(FALLBACK_CONFIGS[-1])]


def _seq_bucket(n: int) -> int:
    """The sequence-length bucket autotuning is keyed on: the next power of two, from 128 up to 65536 (longer
    sequences share the last bucket). benchmarks/triton_tuning.txt showed the best tile changing between 4096 and
    16384 at head_dim 64, so long sequences are not one bucket."""
    return min(max(1 << (max(n, 1) - 1).bit_length(), 128), MAX_SEQ_BUCKET)


# ------------------------------------------------------------------------------------------------------------
# the kernels, defined on first use (importing this module never needs triton)
# ------------------------------------------------------------------------------------------------------------


class _Kernels:
    """The jitted kernels of one mode (compiled or interpreted), raw and, when compiled, autotuned, and the module
    that defines them."""

    def __init__(self, module, raw: dict, tuned: dict | None):
        self.module, self.raw, self.tuned = module, raw, tuned


_kernels: dict[bool, _Kernels] = {}  # built on first use, once compiled and once interpreted


def _build_kernels(interpret: bool) -> _Kernels:
    """Load ``_triton_kernels.py`` as a module of its own for this mode: Triton reads ``TRITON_INTERPRET`` when
    ``@triton.jit`` decorates a function, i.e. when that module runs; the interpreter runs a kernel's source in its
    module's globals, so the kernels and their helpers must be module-level functions."""
    import importlib.util
    import sys

    name = f"{__package__}._triton_kernels_{'interpreted' if interpret else 'compiled'}"
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_triton_kernels.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"  # this mode, whatever the caller's setting
    try:
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = saved
    raw = {
        "forward": module.attention_forward_kernel,
        "delta": module.attention_backward_delta_kernel,
        "dkdv": module.attention_backward_dkdv_kernel,
        "dkdv_atomic": module.attention_backward_dkdv_kernel,  # the same kernel, with ATOMIC_DQ=True
        "dq": module.attention_backward_dq_kernel,
    }
    if interpret:
        return _Kernels(module, raw, None)
    return _Kernels(module, raw, {kind: _autotune(kind, raw[kind]) for kind in KINDS})


AUTOTUNE_KEY = ["SEQ_BUCKET", "BLOCK_D", "BLOCK_DV", "IS_CAUSAL"]  # and the tensors' dtype, which Triton adds itself
# Arguments the autotuner zeroes before each of its timing launches and once more before the launch it keeps (Triton's
# ``reset_to_zero``): the one-pass backward adds into the float32 dQ with atomics, so without this every timing launch
# (hundreds, on a cache miss) would stay summed into the dQ of the call that triggered the tuning.
RESET_TO_ZERO = {"dkdv_atomic": ["DQ"]}


def _autotune(kind: str, kernel):
    """``kernel`` wrapped in ``triton.autotune``: every configuration of ``CONFIG_TABLES[kind]`` and the fallbacks,
    pruned at each launch to ``candidate_configs(kind, ...)`` for the arguments at hand, keyed on ``AUTOTUNE_KEY``,
    zeroing ``RESET_TO_ZERO[kind]`` before each timing launch and before the launch it keeps."""
    import triton

    table = CONFIG_TABLES[kind]
    every = list(dict.fromkeys([c for configs in table.values() for c in configs] + FALLBACK_CONFIGS))
    configs = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)
        for bm, bn, warps, stages in every
    ]

    def prune(configs, named_args, **kwargs):
        # every argument is passed by position, so named_args holds them all (the prune hook's keyword arguments
        # differ between Triton releases)
        args = {**named_args, **kwargs}
        allowed = candidate_configs(kind, args["BLOCK_D"], args["BLOCK_DV"], args["Q"].element_size(),
                                    _shared_memory_limit(args["Q"].device.index or 0))  # fmt: skip
        kept = [c for c in configs if {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages} in allowed]
        return kept or configs[:1]

    return triton.autotune(
        configs, key=AUTOTUNE_KEY, reset_to_zero=RESET_TO_ZERO.get(kind), prune_configs_by={"early_config_prune": prune}
    )(kernel)


def _get_kernels(interpret: bool | None = None) -> _Kernels:
    """The kernels of one mode: interpreted or compiled, by default as ``TRITON_INTERPRET`` says."""
    mode = interpreting() if interpret is None else interpret
    if mode not in _kernels:
        _kernels[mode] = _build_kernels(mode)
    return _kernels[mode]


# ------------------------------------------------------------------------------------------------------------
# launching
# ------------------------------------------------------------------------------------------------------------


def _dims(head_dim: int, value_dim: int) -> tuple:
    """(PAD_D, PAD_DV, BLOCK_D, BLOCK_DV): head_dim and value_dim padded to a power of two, at least 16 (tl.dot)."""
    block_d = max(16, 1 << (head_dim - 1).bit_length())
    block_dv = max(16, 1 << (value_dim - 1).bit_length())
    return head_dim != block_d, value_dim != block_dv, block_d, block_dv


def _launch(kind: str, args: tuple, n_rows: int, grid_block: str, batch_heads: int, config: dict | None,
            fixed: bool = False) -> None:  # fmt: skip
    """Run kernel ``kind`` over ceil(n_rows / config[grid_block]) x batch_heads programs: autotuned when compiled
    and no ``config`` is given, else with ``config`` (BLOCK_M, BLOCK_N and, compiled, num_warps, num_stages).
    ``fixed`` (or ``ATTNEDU_TRITON_AUTOTUNE=0``) without a ``config``: the first candidate that compiles, never the
    autotuner, whose choice depends on timings. Every compiled launch passes ``COMPILE_OPTIONS`` (FMA fusion)."""
    kernels = _get_kernels()
    if kernels.tuned is None:  # the interpreter: one small configuration, launch options ignored
        config = {key: value for key, value in (config or INTERPRETER_CONFIG).items() if key.startswith("BLOCK")}
    elif config is None and (fixed or not autotuning()):  # the first candidate that compiles (the estimate is rough)
        q = args[0]
        limit = _shared_memory_limit(q.device.index or 0)
        candidates = candidate_configs(kind, args[-2], args[-1], q.element_size(), limit)
        for i, config in enumerate(candidates):
            try:
                kernels.raw[kind][(-(-n_rows // config[grid_block]), batch_heads)](*args, **config, **COMPILE_OPTIONS)
                return
            except Exception as error:  # triton.runtime.errors.OutOfResources: too much shared memory
                if type(error).__name__ != "OutOfResources" or i == len(candidates) - 1:
                    raise
    if config is None:
        kernels.tuned[kind][lambda meta: (-(-n_rows // meta[grid_block]), batch_heads)](*args, **COMPILE_OPTIONS)
    else:
        kernels.raw[kind][(-(-n_rows // config[grid_block]), batch_heads)](*args, **config, **COMPILE_OPTIONS)


def _forward_args(query, key, value, out, lse, is_causal: bool, use_tma: bool = False) -> tuple:
    """The forward kernel's arguments before its BLOCK_M and BLOCK_N, in order."""
    heads, n_q, head_dim = query.shape[1:]
    n_k, value_dim = value.shape[-2:]
    return (
        query, key, value, out, lse, *query.stride(), *key.stride(), *value.stride(), *out.stride(),
        heads, n_q, n_k, head_dim, value_dim, LOG2_E / math.sqrt(head_dim), _seq_bucket(max(n_q, n_k)),
        is_causal, use_tma, *_dims(head_dim, value_dim),
    )  # fmt: skip


def _tma_aligned(*tensors) -> bool:
    """Whether tensor descriptors can address these (batch, heads, n, dim) tensors, one (n, dim) matrix per batch
    and head: unit stride along dim, and the start of every matrix and of every row on a 16-byte boundary."""
    for x in tensors:
        size = x.element_size()
        if x.stride(-1) != 1 or x.data_ptr() % 16:
            return False
        if any(stride * size % 16 for stride, length in zip(x.stride()[:-1], x.shape[:-1]) if length > 1):
            return False
    return True


def _use_tma(query, key, value, out) -> bool:
    """The forward reads and writes through tensor descriptors (TMA) when compiled for a GPU of compute capability
    9.0 or more (Hopper: the H100, H200), with a Triton that has ``tl.make_tensor_descriptor``, on tensors they can
    address (``_tma_aligned``), unless ``ATTNEDU_TRITON_TMA=0``; otherwise by pointers, as under the interpreter."""
    if not query.is_cuda or os.environ.get(TMA_ENV, "1") in ("", "0"):
        return False
    if torch.cuda.get_device_capability(query.device)[0] < 9:
        return False
    import triton
    import triton.language as tl

    if not (hasattr(tl, "make_tensor_descriptor") and hasattr(triton, "set_allocator")):
        return False
    return _tma_aligned(query, key, value, out)


def _tma_scratch(size: int, alignment: int, stream):
    """Global memory in which the kernel writes its tensor descriptors (``triton.set_allocator``)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _forward(query, key, value, is_causal: bool, config: dict | None = None, tma: bool | None = None,
             fixed: bool = False):  # fmt: skip
    """(output, lse): the kernel's output in query's dtype and the natural-log log-sum-exp, float32. ``tma``: read
    and write through tensor descriptors; None: ``_use_tma`` decides (tests set it, to run both under the
    interpreter). ``fixed``: the first candidate configuration, not the autotuner's (``_launch``)."""
    batch, heads, n_q, head_dim = query.shape
    value_dim = value.shape[-1]
    out = torch.empty(batch, heads, n_q, value_dim, dtype=query.dtype, device=query.device)
    lse = torch.empty(batch, heads, n_q, dtype=torch.float32, device=query.device)
    use_tma = _use_tma(query, key, value, out) if tma is None else bool(tma)
    if use_tma and query.is_cuda:
        import triton

        triton.set_allocator(_tma_scratch)
    args = _forward_args(query, key, value, out, lse, is_causal, use_tma)
    _launch("forward", args, n_q, "BLOCK_M", batch * heads, config, fixed)
    return out, lse


def default_deterministic() -> bool:
    """What ``triton_attention(..., deterministic=None)`` uses, decided as PyTorch's flash attention backward decides
    (aten/src/ATen/native/transformers/cuda/attention_backward.cu): deterministic only after
    ``torch.use_deterministic_algorithms(True)``, not with ``warn_only=True`` and not by default."""
    return torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()


class _BackwardLaunch:
    """The backward kernels of one call, launchable one at a time (benchmarks/tune_triton.py times each):
    ``delta()`` first, then ``dkdv(config)`` and ``dq(config)`` in either order; ``grads`` holds the results.

    ``deterministic=True``: ``dkdv`` computes dK and dV, ``dq`` runs the separate dQ kernel, both with a fixed
    configuration when none is given (the first candidate that fits, not the autotuner's). ``deterministic=False``
    (one pass): ``dkdv`` zeroes a float32 dQ buffer and runs the dK/dV kernel that also adds dS K_j into it with
    atomics; ``dq`` (no configuration: nothing to tune) only scales that buffer by 1 / sqrt(head_dim) into dQ's
    dtype. ``deterministic=None``: ``default_deterministic()``."""

    def __init__(self, query, key, value, out, lse, grad_out, is_causal: bool, deterministic: bool | None = True):
        batch, heads, n_q, head_dim = query.shape
        n_k, value_dim = value.shape[-2:]
        grad_out = grad_out.contiguous()  # e.g. the stride-0 gradient of out.sum()
        self.deterministic = default_deterministic() if deterministic is None else bool(deterministic)
        self.out, self.grad_out, self.delta_rows = out, grad_out, torch.empty_like(lse)
        self.grads = torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)
        self.batch_heads, self.n_q, self.n_k, self.heads, self.value_dim = batch * heads, n_q, n_k, heads, value_dim
        pad_d, pad_dv, block_d, block_dv = _dims(head_dim, value_dim)
        self.block_dv = block_dv
        self.scale = scale = 1.0 / math.sqrt(head_dim)
        before = (heads, n_q, n_k, head_dim, value_dim, LOG2_E * scale, scale, _seq_bucket(max(n_q, n_k)), is_causal)
        after = (pad_d, pad_dv, block_d, block_dv)
        tensors = (query, key, value, grad_out, lse, self.delta_rows)
        strides = (*query.stride(), *key.stride(), *value.stride(), *grad_out.stride())
        d_query, d_key, d_value = self.grads
        # one pass: dQ accumulates in float32 (atomic adds of bfloat16 would lose most of the sum), unscaled
        self.dq_accumulator = None if self.deterministic else torch.empty(d_query.shape, dtype=torch.float32,
                                                                          device=query.device)  # fmt: skip
        dq_target = d_query if self.deterministic else self.dq_accumulator  # not touched when deterministic
        self.dkdv_args = (*tensors, d_key, d_value, dq_target, *strides, *d_key.stride(), *d_value.stride(),
                          *dq_target.stride(), *before, not self.deterministic, *after)  # fmt: skip
        self.dq_args = (*tensors, d_query, *strides, *d_query.stride(), *before, *after)

    def delta(self) -> None:
        """D = rowsum(dO * O), float32, one number per query."""
        block = INTERPRETER_CONFIG["BLOCK_M"] if interpreting() else DELTA_BLOCK
        _get_kernels().raw["delta"][(-(-self.n_q // block), self.batch_heads)](
            self.out, self.grad_out, self.delta_rows, *self.out.stride(), *self.grad_out.stride(), self.heads,
            self.n_q, self.value_dim, BLOCK_M=block, BLOCK_DV=self.block_dv, **COMPILE_OPTIONS,
        )  # fmt: skip

    def dkdv(self, config: dict | None = None) -> None:
        if self.deterministic:
            _launch("dkdv", self.dkdv_args, self.n_k, "BLOCK_N", self.batch_heads, config, fixed=True)
        else:
            self.dq_accumulator.zero_()
            _launch("dkdv_atomic", self.dkdv_args, self.n_k, "BLOCK_N", self.batch_heads, config)

    def dq(self, config: dict | None = None) -> None:
        if self.deterministic:
            _launch("dq", self.dq_args, self.n_q, "BLOCK_M", self.batch_heads, config, fixed=True)
        else:
            torch.mul(self.dq_accumulator, self.scale, out=self.dq_accumulator)
            self.grads[0].copy_(self.dq_accumulator)


def _backward(query, key, value, out, lse, grad_out, is_causal: bool, dkdv_config=None, dq_config=None,
              deterministic: bool | None = True):  # fmt: skip
    """(d_query, d_key, d_value), each in its input's dtype, from the saved output and log-sum-exp (for
    ``deterministic``, see ``_BackwardLaunch``; ``dq_config`` is not used by the one-pass backward)."""
    launch = _BackwardLaunch(query, key, value, out, lse, grad_out, is_causal, deterministic)
    launch.delta()
    launch.dkdv(dkdv_config)
    launch.dq(dq_config)
    return launch.grads


class TritonAttention(torch.autograd.Function):
    """The Triton forward, and the Triton backward by recomputation: saves the inputs, the output and one
    log-sum-exp per query, never a (query_len, key_len) matrix. Returns (output, lse); lse is not differentiable."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal, deterministic):
        out, lse = _forward(query, key, value, is_causal, fixed=deterministic)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.is_causal, ctx.deterministic = is_causal, deterministic
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, _grad_lse):
        query, key, value, out, lse = ctx.saved_tensors
        grads = _backward(query, key, value, out, lse, grad_out, ctx.is_causal, deterministic=ctx.deterministic)
        return (*grads, None, None)


def triton_attention(query, key, value, *, is_causal: bool = False, return_lse: bool = False,
                     deterministic: bool | None = None):  # fmt: skip
    """softmax(Q K^T / sqrt(head_dim)) V by the Triton kernels, equal to
    ``torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=is_causal)``, and
    differentiable: ``loss.backward()`` runs the Triton backward when an input requires grad.

    query (batch, heads, query_len, head_dim), key (batch, heads, key_len, head_dim),
    value (batch, heads, key_len, value_dim) -> (batch, heads, query_len, value_dim) in query's dtype, and with
    ``return_lse`` the natural-log log-sum-exp of each query's scores, (batch, heads, query_len) float32 (not
    differentiable). head_dim and value_dim up to 256, any lengths; ``is_causal`` counts from the top left (query i
    sees keys 0..i), as SDPA does, also when query_len != key_len.

    ``deterministic`` chooses the backward. False: one pass, the dK/dV kernel adding each tile's dS K_j into a
    float32 dQ with atomic adds (5 matrix products per tile); the order in which programs add differs from run to
    run, and float32 addition is not associative, so dQ may differ in its last bits between two identical calls
    (dK and dV do not). True: a separate dQ kernel, which recomputes the scores and dP (7 products per tile), and
    whose gradients are bitwise the same every run, in this process or another: a deterministic call launches its
    kernels (the forward's too) with a fixed configuration, the first candidate that fits, never the autotuner's,
    which picks by timing and so could pick other block sizes, another order of the sums, in another process
    (``ATTNEDU_TRITON_AUTOTUNE=0`` fixes every call's configuration). None (the default) decides as PyTorch's own
    flash attention backward does (``default_deterministic``): the one-pass backward, FlashAttention-2's default too
    (``flash_attn_func(..., deterministic=False)``), unless ``torch.use_deterministic_algorithms(True)`` was called
    (without ``warn_only``). Why the one pass by default: it runs 5/7 of the other's matrix products, and dQ's
    last bits changing from run to run do not matter to training; who needs bitwise repeatability (a test, a
    debugging session) asks for it, with the switch that makes the rest of PyTorch deterministic too. The forward
    has no atomics: the same every run either way once its configuration is chosen (fixed when deterministic).

    Scores and sums are accumulated in float32; P and dS are cast to the input's dtype before their matrix products,
    as FlashAttention-2 does (on a GPU, float32 inputs go through TF32 in ``tl.dot``, so expect about 1e-3 error
    there). Measured under the interpreter (exact float32 products), against PyTorch autograd of naive attention in
    float64: outputs and gradients agree to about 2e-6 in float32 (tests/test_triton_attention.py allows 1e-5).
    """
    _check_triton_attention(query, key, value, is_causal, return_lse, deterministic)
    deterministic = default_deterministic() if deterministic is None else deterministic
    dtype = query.dtype
    if not query.is_cuda and dtype == torch.bfloat16:  # the interpreter's bfloat16 is silently wrong
        query, key, value = query.float(), key.float(), value.float()  # differentiable: grads come back in bfloat16
    if torch.is_grad_enabled() and any(x.requires_grad for x in (query, key, value)):
        out, lse = TritonAttention.apply(query, key, value, bool(is_causal), deterministic)
    else:
        out, lse = _forward(query, key, value, bool(is_causal), fixed=deterministic)
    out = out.to(dtype)
    return (out, lse) if return_lse else out


# the input checks of triton_attention (one form of message: attnedu._validate)


def _check_triton_attention(query, key, value, is_causal, return_lse, deterministic) -> None:
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    check_qkv(query, key, value)  # tensors, floating point, one dtype and device, matching sizes
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.dim() != 4:
            raise ValueError(f"{name} must have shape {SHAPE_DOC} (4 dimensions) for the kernel, got {describe(x)}")
    if query.dtype not in GPU_DTYPES:
        raise TypeError(f"triton_attention takes float16, bfloat16 or float32, got {query.dtype}; convert with .half()")
    if max(query.shape[-1], value.shape[-1]) > MAX_HEAD_DIM:
        raise ValueError(
            f"head_dim and value_dim must be at most {MAX_HEAD_DIM} for this kernel (a tile of queries and one of "
            f"keys must fit on chip), got query {describe(query)} and value {describe(value)}"
        )
    if query.is_cuda and interpreting():
        raise RuntimeError(
            "TRITON_INTERPRET=1 is set while the tensors are on the GPU: the kernel would run on the CPU "
            "(triton#5995). Unset it before importing triton to compile for the GPU"
        )
    if not query.is_cuda and not interpreting():
        raise RuntimeError(unavailable_reason() or "CPU tensors need TRITON_INTERPRET=1 set before importing triton")
    check_bool("is_causal", is_causal, "whether query i may attend only to keys 0..i")
    check_bool("return_lse", return_lse, "whether to return the log-sum-exp of each query too")
    if deterministic is not None:
        check_bool(
            "deterministic",
            deterministic,
            "whether the backward must give bitwise the same gradients every "
            "run; None follows torch.use_deterministic_algorithms",
        )
