"""Attention across devices (lesson 12): the sequence split over P processes, each holding its shard of Q, K and V,
and attention computed exactly as if one process held it all.

Ring attention (Liu, Zaharia and Abbeel 2023). Rank r holds the queries Q_r and the keys and values K_r, V_r of its
shard. Every query needs every key, so the K/V blocks travel around a ring: at step t = 0 .. P-1 rank r holds the
block of rank (r - t) mod P, computes its queries against it while sending it on to rank r + 1 and receiving the
next from rank r - 1 (P - 1 transfers). Each step gives a partial attention over one block of keys, as a softmax
state (out_t, lse_t) with lse_t = log sum_{j in block t} exp(s_ij); lesson 08a's merge combines them exactly:

    lse = log(exp(lse_a) + exp(lse_b)),    out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b

(``merge_softmax_states`` with m = lse, l = 1, o = out), so after P steps out = softmax(Q_r K^T / sqrt(d)) V over
all N keys and lse is each query's log-sum-exp over all of them.

The backward carries gradients home around the same ring: with the global out and lse (from the forward),
P_ij = exp(s_ij - lse_i) is rebuilt exactly for any block of keys (lesson 08b's recomputation), so each step adds the
block's share to dQ_r (kept at home) and to dK, dV of the block it holds, which travel with the block; after P
steps and P transfers each dK_s, dV_s arrives back at rank s complete. P transfers are this schedule's choice, not a
necessity: the travelling dK_s, dV_s start at their owner, so they need P hops to come back; an owner that kept its
own share at home and started the accumulator at rank s + 1 would need P - 1. ring-flash-attention (zhuzilin) and
PyTorch's context parallelism send P, as this one does, and they accumulate and send dK, dV in float32 for
half-precision inputs: so does this one (float64 stays float64), while dQ, kept at home, is accumulated likewise.

Causal attention (query i sees keys j <= i, positions counted in the whole sequence): the sequence is cut into
chunks of equal length; a (query chunk a, key chunk b) pair is computed in full when b < a, with the causal mask
when b == a (the diagonal block), and skipped when b > a (wholly in the future). Two layouts:

    contiguous  P chunks; rank r holds chunk r. Rank r computes r full blocks and one diagonal block: the work
                grows with r (rank 0 does one diagonal block, rank P - 1 does P - 1 blocks and a diagonal).
    zigzag      2P chunks; rank r holds chunks r and 2P - 1 - r (Llama 3's context parallelism; Brandon et al.
                2023 stripe finer). Every rank computes 2P - 1 full chunk pairs and 2 diagonal ones.

All-to-all sequence parallelism (Jacobs et al. 2023, DeepSpeed-Ulysses) moves heads instead of keys: one
all-to-all turns "my N/P tokens, all H heads" into "all N tokens, my H/P heads" for Q, K and V, each rank runs
ordinary attention for its heads over the whole sequence, and a second all-to-all turns the output back
(``ulysses_attention``; H must be divisible by P).

Measured here, and modelled for many GPUs (L layers, H query heads, H_kv key/value heads of d numbers, s bytes per
number, b sequences of N tokens, chunk c = N / P per rank, F FLOP/s per GPU):

    memory    K/V of all layers 2 L H_kv d s N bytes; one layer's Q, K, V and O (2 H + 2 H_kv) d s N; each / P when
              the sequence is sharded (``memory_per_device``)
    time      each rank's wall time of the ring call and its time inside the tile computations (``time_ring``, or
              ``time_ring_rank`` in each rank of a launch of your own, gathered by ``RingTiming.from_ranks``; a
              transfer to the next rank: ``time_transfer_rank``): the compute times show each rank's work; the wall
              times when each finished (a rank waits only for its predecessor's blocks); with more processes than
              cores they also take turns on the cores (``oversubscription_cost``)
    model     a transfer of B bytes takes alpha + B / beta (``transfer_time``). A ring step computes one block pair,
              4 b H c^2 d FLOPs (half of that per step for causal zigzag), while one K/V block, 2 b H_kv c d s bytes,
              travels: step = max(compute, transfer), so computation hides communication for c >= c*
              (``ring_overlap_chunk``; c* = F / beta for multi-head attention in bfloat16, Liu et al. 2023's
              condition); Ulysses: two all-to-alls, then 4 b (H / P) N^2 d FLOPs, not overlapped (``ring_model``,
              ``ulysses_model``, ``scaling_model``: published H100 / NVLink / InfiniBand figures, assumed latencies)

PyTorch's own ``torch.distributed.tensor.experimental.context_parallel`` refuses the CPU (its SDPA kernel has no
sharding rule): ``try_torch_context_parallel`` shows it.

Bytes each rank sends per layer (``ring_bytes``, ``ulysses_bytes``; both functions also count what they send into a
``sent`` list): with S = batch * H * (N/P) * head_dim * bytes per number the size of one shard of Q (or K, V),

    ring      forward 2 (P - 1) S (K and V, P - 1 times);  backward 2 (P - 1) S + 2 P S_g (dK and dV travel home,
              in float32 unless the inputs are float64: S_g is S at max(bytes per number, 4))
    Ulysses   forward 4 (P - 1) / P S (Q, K, V and the output);  backward the same (their gradients)

so the ring's traffic per rank approaches 2 N tokens of K/V as P grows, while Ulysses' falls as 1 / P.

Processes are started by ``run_ranks``: ``torch.distributed`` with the gloo backend on the loopback interface
(127.0.0.1), the same API that runs on NCCL across GPUs. Shapes: query, key, value as lesson 08's
(batch, heads, seq_len, head_dim), each rank passing its own shard (seq_len = N / P, the same on every rank).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue as queue_module
import socket
import sys
import time
import traceback
import warnings
from datetime import timedelta

import cloudpickle
import torch
import torch.distributed as dist

from ._validate import check_bool, check_choice, check_int, check_number, check_tensor, describe
from ._validate_flash import check_qkv
from .flash import merge_softmax_states, tiled_attention_backward, tiled_attention_forward

LAYOUTS = ("contiguous", "zigzag")
LOOPBACK = "127.0.0.1"
# gloo picks its network interface from the host name unless told: on the loopback interface nothing leaves the machine
LOOPBACK_INTERFACE = {"linux": "lo", "darwin": "lo0"}
DEFAULT_TIMEOUT_S = 120.0
# How run_ranks starts its processes: "forkserver" (a server process with torch and this module imported forks each
# rank: no import per launch) where the platform has it, else "spawn" (a fresh interpreter per rank, importing torch)
START_METHOD = "forkserver"
_PRELOAD = ["attnedu.context_parallel"]  # imported by the fork server before its first fork: torch with it
_forkserver_failed: str | None = None  # why the fork server could not start ranks in this process, once it failed


# ------------------------------------------------------------------------------------------------------------
# The launcher: P processes on one machine, one torch.distributed rank each
# ------------------------------------------------------------------------------------------------------------


class RankError(RuntimeError):
    """A rank of ``run_ranks`` raised, died, or did not finish in time. ``ranks``: which; ``pids``: the processes,
    all of them ended (killed where needed) before this is raised."""

    def __init__(self, message: str, ranks: list[int], pids: list[int]):
        super().__init__(message)
        self.ranks, self.pids = ranks, pids


def free_port() -> int:
    """A TCP port of the loopback interface that no one listens on now (the operating system's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def _rank_main(payload: bytes, rank: int, world_size: int, port: int, results, timeout_s: float,
               environ: dict[str, str]) -> None:  # fmt: skip
    """What each rank's process runs: take the caller's environment (a rank forked by the fork server starts with the
    server's, from when it started), load (fn, args) (pickled by value with cloudpickle in the parent), join the
    process group, call fn, report (rank, ok, pickled result or the traceback) on the queue, leave the group."""
    for name in set(os.environ) - set(environ):
        del os.environ[name]
    os.environ.update(environ)
    torch.set_num_threads(1)
    try:
        fn, args = pickle.loads(payload)  # cloudpickle's output is read by pickle (cloudpickle is imported as needed)
        dist.init_process_group("gloo", init_method=f"tcp://{LOOPBACK}:{port}", rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s))  # fmt: skip
        result = pickle.dumps(fn(rank, world_size, *args))
    except BaseException:  # noqa: BLE001 - every failure goes back to the caller, named by its rank
        # reported before this process leaves the group: the peers it strands fail after it (their errors come second)
        results.put((rank, False, traceback.format_exc()))
        return
    results.put((rank, True, result))
    dist.destroy_process_group()


def _by_value(fn, args: tuple) -> bytes:
    """(fn, args) pickled for the ranks' processes with cloudpickle: a function defined in a notebook cell, a lambda
    or a closure (and such a function passed in args) travels by value, its code and the globals it uses; a function
    of an importable module travels by name, as pickle sends it. What cannot be pickled at all (an open file, a lock,
    a generator, ...) is refused here, naming fn or the argument and why."""
    try:
        return cloudpickle.dumps((fn, args))
    except Exception:  # which part, and why: below
        pass
    try:
        cloudpickle.dumps(fn)
    except Exception as exc:
        raise ValueError(f"fn should be a function each new process can receive (pickled with cloudpickle), got "
                         f"{fn!r}, which cannot be pickled: {type(exc).__name__}: {exc}; a function that uses an "
                         "open file, a lock, a generator or a process group cannot travel: create such things "
                         "inside fn") from None  # fmt: skip
    for i, arg in enumerate(args):
        try:
            cloudpickle.dumps(arg)
        except Exception as exc:
            raise ValueError(f"args[{i}] (passed to fn after rank and world_size) should be picklable (each process "
                             f"receives a copy), got {describe(arg)}, which cannot be pickled: {type(exc).__name__}: "
                             f"{exc}; pass the data it is made from and build it inside fn") from None  # fmt: skip
    return cloudpickle.dumps((fn, args))  # each part pickles alone: let the error of the whole show


def _failure(results, processes, done: dict, first, grace_s: float = 0.5) -> RankError | None:
    """The error to raise once a rank has raised (``first`` = (rank, traceback)) or ended without a result: the reports
    that arrive within ``grace_s`` are read too, since one failure strands its peers (they raise a connection error
    soon after). A rank that died without a word is the cause named first; otherwise the first rank that raised, with
    its traceback; the others follow, one line each. None if every rank that ended turns out to have reported."""
    errors = [first] if first is not None else []
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            rank, ok, payload = results.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue_module.Empty:
            break
        if ok:
            done[rank] = pickle.loads(payload)
        else:
            errors.append((rank, payload))
    world_size = len(processes)
    raised = [rank for rank, _ in errors]
    dead = [r for r, p in enumerate(processes) if r not in done and r not in raised and p.exitcode is not None]
    lines = [f"rank {r} of {world_size} died without a result (exit code {processes[r].exitcode})" for r in dead]
    if not lines and errors:
        rank, payload = errors.pop(0)
        lines.append(f"rank {rank} of {world_size} raised; its traceback:\n{payload.rstrip()}")
    elif not lines:
        return None
    for rank, payload in errors:
        last = payload.strip().splitlines()[-1]
        lines.append(f"rank {rank} raised after it: {last if len(last) <= 200 else last[:197] + '...'}")
    return RankError("\n".join(lines), dead or [raised[0]], [])


def _start_method() -> str:
    """START_METHOD where this platform has it and it has not failed in this process; "spawn" otherwise."""
    unavailable = _forkserver_failed or "forkserver" not in multiprocessing.get_all_start_methods()
    if START_METHOD == "forkserver" and unavailable:
        return "spawn"
    return START_METHOD


def _start_ranks(payload: bytes, world_size: int, port: int, timeout: float, environ: dict):
    """Start the ranks' processes (and their result queue) from the fork server, or spawned (see _start_method); if
    the fork server cannot start them, end what was started, warn once, and spawn them instead."""
    global _forkserver_failed
    method = _start_method()
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(_PRELOAD)  # read when the server starts: at the first launch of this process
    results = context.Queue()
    processes = [context.Process(target=_rank_main, args=(payload, rank, world_size, port, results, timeout, environ),
                                 name=f"attnedu-rank-{rank}", daemon=True) for rank in range(world_size)]  # fmt: skip
    try:
        for process in processes:
            process.start()
    except Exception as exc:
        for process in processes:
            if process.pid is not None:
                process.kill()
                process.join()
        results.close()
        results.join_thread()
        if method != "forkserver":
            raise
        _forkserver_failed = f"{type(exc).__name__}: {exc}"
        warnings.warn(f"run_ranks: the fork server could not start the ranks ({_forkserver_failed}); they are "
                      "spawned instead, each importing torch, in this process from now on", RuntimeWarning,
                      stacklevel=3)  # fmt: skip
        return _start_ranks(payload, world_size, port, timeout, environ)
    return processes, results


def run_ranks(fn, world_size: int, *args, timeout: float = DEFAULT_TIMEOUT_S) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` new processes, one ``torch.distributed`` rank each
    (gloo backend, 127.0.0.1 on a free port, one torch thread per process), and return their results in rank order.

    The processes are forked from multiprocessing's fork server ("forkserver"), which the first call starts: a fresh
    interpreter that imports torch and this module once, so a later call starts its ranks without importing torch
    again (on this project's 2-core machine about 0.05 s for 4 ranks instead of about 2 s). Where there is no fork
    server (Windows) or it cannot start the ranks, they are spawned: fresh interpreters, each importing torch. Each
    rank takes the caller's environment of the moment (os.environ as this call finds it); what the server imported
    (torch, this module and the attnedu modules it uses) stays as it was at the first call, and so does what they
    read from the environment on import: an edit to those modules reaches the ranks after a restart of the kernel.
    fn and args reach the ranks pickled with cloudpickle, by value where they cannot be imported (a function defined
    in a notebook cell, a lambda, a closure, and such a function passed in args), by name otherwise; the results come
    back with pickle.

    If a rank raises, every process is ended and a ``RankError`` names the rank and shows its traceback; if a rank
    dies without a word, the error gives its exit code; if the ranks have not all finished ``timeout`` seconds after
    the call (starting them included), all are killed and the error names those that did not finish. No rank
    outlives the call. What stays are two helper processes of multiprocessing, idle until the next call, that end when
    the process that started them (the notebook's kernel) ends: the fork server, holding about 230 MB (torch
    imported; its pages shared with the ranks it forks), and multiprocessing's resource tracker (about 13 MB; spawned
    ranks start it too).

    In a script (a .py file run with ``python``), call run_ranks under ``if __name__ == "__main__":``. Each rank's
    process first imports the script as a module (multiprocessing does so for the fork server and for spawn alike),
    so code outside that guard runs again in every rank: a run_ranks there is refused in the rank (a process may not
    start processes while it is starting), and the call fails with a ``RankError``, each rank "died without a result
    (exit code 1)". A notebook needs no guard: its cells are not a module the ranks import.
    """
    if not callable(fn):
        raise TypeError(f"fn should be a function fn(rank, world_size, *args), got {describe(fn)}")
    world_size = check_int("world_size", world_size, "how many processes to start", minimum=1)
    timeout = check_number("timeout", timeout, "seconds before the processes are killed", 0.0, strict=True)
    payload = _by_value(fn, args)
    environ = dict(os.environ)
    interface = LOOPBACK_INTERFACE.get(sys.platform)
    if interface and "GLOO_SOCKET_IFNAME" not in environ:
        environ["GLOO_SOCKET_IFNAME"] = interface  # the ranks' environment only; the caller's stays as it is
    port = free_port()
    processes, results = _start_ranks(payload, world_size, port, timeout, environ)
    deadline = time.monotonic() + timeout
    done: dict[int, object] = {}
    failure = None
    try:
        while len(done) < world_size and failure is None:
            try:
                rank, ok, payload = results.get(timeout=0.05)
            except queue_module.Empty:
                if any(r not in done and p.exitcode is not None for r, p in enumerate(processes)):
                    failure = _failure(results, processes, done, None)  # a rank ended without a word
                elif time.monotonic() > deadline:
                    late = [r for r in range(world_size) if r not in done]
                    names = ", ".join(str(r) for r in late)
                    failure = RankError(f"rank{'s' if len(late) > 1 else ''} {names} of {world_size} did not finish "
                                        f"within timeout={timeout:g} s; all {world_size} processes were killed", late,
                                        [])  # fmt: skip
                continue
            if ok:
                done[rank] = pickle.loads(payload)
            else:
                failure = _failure(results, processes, done, (rank, payload))
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
        for process in processes:
            process.join()
        results.close()
        results.join_thread()
    if failure is not None:
        failure.pids = [p.pid for p in processes]
        raise failure
    return [done[rank] for rank in range(world_size)]


# ------------------------------------------------------------------------------------------------------------
# Layouts: which positions of the sequence each rank holds
# ------------------------------------------------------------------------------------------------------------


def _check_layout(layout: str, world_size: int) -> int:
    check_choice("layout", layout, LAYOUTS)
    return world_size if layout == "contiguous" else 2 * world_size


def rank_chunks(rank: int, world_size: int, layout: str = "contiguous") -> list[int]:
    """The chunks of the sequence rank ``rank`` holds, in order: contiguous [r] of P chunks, zigzag [r, 2P-1-r]
    of 2P."""
    world_size = check_int("world_size", world_size, "how many processes share the sequence", minimum=1)
    rank = check_int("rank", rank, "which process", minimum=0, maximum=world_size - 1)
    _check_layout(layout, world_size)
    return [rank] if layout == "contiguous" else [rank, 2 * world_size - 1 - rank]


def shard_positions(seq_len: int, rank: int, world_size: int, layout: str = "contiguous") -> torch.Tensor:
    """The positions (0 .. seq_len - 1, in the whole sequence) of the shard rank ``rank`` holds, in its order. seq_len
    must split into equal chunks: a multiple of P (contiguous) or of 2P (zigzag)."""
    chunks = rank_chunks(rank, world_size, layout)
    n_chunks = _check_layout(layout, world_size)
    seq_len = check_int("seq_len", seq_len, "the length of the whole sequence", minimum=1)
    if seq_len % n_chunks:
        raise ValueError(f"seq_len should be a multiple of {n_chunks} (the {layout} layout cuts the sequence into "
                         f"{n_chunks} equal chunks for world_size={world_size}), got {seq_len}; pad the sequence "
                         "(and mask the padding) or choose another length")  # fmt: skip
    size = seq_len // n_chunks
    return torch.cat([torch.arange(c * size, (c + 1) * size) for c in chunks])


def shard_sequence(x: torch.Tensor, rank: int, world_size: int, layout: str = "contiguous") -> torch.Tensor:
    """Rank ``rank``'s shard of x (..., seq_len, dim) along the sequence (dimension -2), by ``shard_positions``."""
    check_tensor("x", x, range(2, 9), "(..., seq_len, dim)")
    return x[..., shard_positions(x.shape[-2], rank, world_size, layout), :]


def gather_sequence(shards, layout: str = "contiguous") -> torch.Tensor:
    """The inverse of ``shard_sequence``: the shards of ranks 0 .. P-1 (a list, in rank order) put back in sequence
    order along dimension -2."""
    if not isinstance(shards, (list, tuple)) or not shards:
        raise TypeError(f"shards should be a non-empty list of tensors in rank order, got {describe(shards)}")
    for i, s in enumerate(shards):
        check_tensor(f"shards[{i}]", s, range(2, 9), "(..., shard_len, dim)")
    world_size = len(shards)
    seq_len = sum(s.shape[-2] for s in shards)
    out = torch.empty(*shards[0].shape[:-2], seq_len, shards[0].shape[-1], dtype=shards[0].dtype)
    for rank, s in enumerate(shards):
        positions = shard_positions(seq_len, rank, world_size, layout)
        if s.shape[-2] != len(positions) or s.shape[:-2] != shards[0].shape[:-2] or s.shape[-1] != out.shape[-1]:
            raise ValueError(f"shards[{rank}] should have shape {(*out.shape[:-2], len(positions), out.shape[-1])} "
                             f"(its part of a {layout} sequence of {seq_len}), got {describe(s)}")  # fmt: skip
        out[..., positions, :] = s
    return out


def _pair(query_chunk: int, key_chunk: int, is_causal: bool) -> str:
    """What a (query chunk, key chunk) pair costs: 'full', 'diagonal' (masked) or 'skip' (wholly in the future)."""
    if not is_causal or key_chunk < query_chunk:
        return "full"
    return "diagonal" if key_chunk == query_chunk else "skip"


def score_blocks(world_size: int, layout: str = "contiguous", is_causal: bool = True) -> list[dict[str, int]]:
    """Work per rank in a ring pass: for each rank, how many (query chunk, key chunk) score blocks it computes in full
    and how many on the diagonal (with the mask: about half a block of work), counted from the same rule the ring
    follows. A block is (N / C) x (N / C) scores for C chunks (C = P contiguous, 2P zigzag)."""
    world_size = check_int("world_size", world_size, "how many processes share the sequence", minimum=1)
    is_causal = check_bool("is_causal", is_causal, "whether query i may only attend keys j <= i")
    counts = []
    for rank in range(world_size):
        count = {"full": 0, "diagonal": 0, "skip": 0}
        for step in range(world_size):
            source = (rank - step) % world_size
            for a in rank_chunks(rank, world_size, layout):
                for b in rank_chunks(source, world_size, layout):
                    count[_pair(a, b, is_causal)] += 1
        counts.append({"full": count["full"], "diagonal": count["diagonal"]})
    return counts


# ------------------------------------------------------------------------------------------------------------
# Ring attention, run inside a rank
# ------------------------------------------------------------------------------------------------------------


def _check_ring(query, key, value, is_causal, layout, extra=(), name="ring attention"):
    """Inputs one rank can honour, and the same contract on every rank (one small all_gather_object)."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"{name} runs inside a torch.distributed process group: start the ranks with "
                           "attnedu.context_parallel.run_ranks (or call dist.init_process_group first)")  # fmt: skip
    check_qkv(query, key, value)
    is_causal = check_bool("is_causal", is_causal, "whether query i may only attend keys j <= i")
    world_size, rank = dist.get_world_size(), dist.get_rank()
    n_chunks = _check_layout(layout, world_size)
    if query.shape[-2] != key.shape[-2]:
        raise ValueError(f"query and key should hold the same positions of the sequence (the rank's shard), got "
                         f"{query.shape[-2]} queries and {key.shape[-2]} keys")  # fmt: skip
    chunks = n_chunks // world_size
    if query.shape[-2] % chunks:
        raise ValueError(f"query should hold {chunks} equal chunks of the sequence in the {layout} layout (an even "
                         f"shard length), got {query.shape[-2]} positions; shard with shard_sequence")  # fmt: skip
    contract = (tuple(query.shape), tuple(key.shape), tuple(value.shape), str(query.dtype), is_causal, layout,
                *(tuple(t.shape) for t in extra))  # fmt: skip
    everyone = [None] * world_size
    dist.all_gather_object(everyone, contract)
    for other, theirs in enumerate(everyone):
        if theirs != contract:
            raise ValueError(f"every rank should call {name} with the same shapes, dtype, is_causal and layout "
                             f"(equal shards), got {contract} on rank {rank} and {theirs} on rank {other}; shard the "
                             "sequence with shard_sequence")  # fmt: skip
    return is_causal, rank, world_size


def _exchange(tensors, rank: int, world_size: int, sent=None):
    """Post the ring's transfer: send each tensor to rank + 1, receive its counterpart from rank - 1. Returns the
    requests to wait on and the buffers the received tensors land in. ``sent``: a list each sent tensor's nbytes is
    appended to (None: not counted)."""
    if sent is not None:
        sent.extend(t.nbytes for t in tensors)
    received = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % world_size) for t in tensors]
    ops += [dist.P2POp(dist.irecv, b, (rank - 1) % world_size) for b in received]
    return dist.batch_isend_irecv(ops), received


def _chunk_slices(length: int, rank: int, world_size: int, layout: str):
    ids = rank_chunks(rank, world_size, layout)
    size = length // len(ids)
    return [(c, slice(i * size, (i + 1) * size)) for i, c in enumerate(ids)]


def ring_attention_forward(query, key, value, *, is_causal: bool = False, layout: str = "contiguous",
                           sent: list | None = None, step=None):  # fmt: skip
    """Ring attention's forward, called by every rank with its shard: ``(out, lse)`` of its queries against all N
    keys, as ``tiled_attention_forward`` over the whole sequence would give for these positions.

    For t = 0 .. P-1, rank r holds the K/V block of rank s = (r - t) mod P; it posts the transfer of that block to
    r + 1 (and the receipt of the next from r - 1) with ``dist.batch_isend_irecv``, computes each
    (query chunk, key chunk) pair of the block with ``tiled_attention_forward`` (full, with the causal mask on the
    diagonal, or not at all when wholly in the future; see the module's docstring), merges the partial (out, lse)
    into its running state with ``merge_softmax_states``, then waits for the transfer. P - 1 transfers in all.

    query, key (batch, heads, shard_len, head_dim), value (batch, heads, shard_len, value_dim): this rank's shard
    (``shard_sequence``), the same shapes on every rank -> out (batch, heads, shard_len, value_dim) in query's dtype,
    lse (batch, heads, shard_len) in float32 (float64 for float64 inputs). ``sent``: a list each tensor this rank
    sends is counted into (its nbytes appended; ``ring_bytes`` gives the total by formula).

    ``step``: None (the computation above), or a function that replaces it, one (query chunk, key chunk) pair at a
    time: ``step(out, lse, query, key, value, diagonal) -> (out, lse)``. out (..., n, value_dim) and lse (..., n) are
    the running state of the query chunk (its output normalised over the keys seen so far and their log-sum-exp; the
    state over no keys is out = 0, lse = -inf), query (..., n, head_dim) the chunk's queries, key and value the chunk
    of keys just received, diagonal whether this is the causal diagonal pair (key j after query i, in the chunk's
    own positions, is masked); it returns the state over the keys seen so far and these. Its tensors are copies, in
    float32 (float64 for float64 inputs), and so must its results be, of the state's shapes, without NaN (every pair
    gives each query at least one key). The state after the last pair is what this returns (lse as the step computed
    it).
    """
    is_causal, rank, world_size = _check_ring(query, key, value, is_causal, layout)
    if step is not None and not callable(step):
        raise TypeError(f"step should be None or a function step(out, lse, query, key, value, diagonal) -> (out, lse), "
                        f"got {describe(step)}")  # fmt: skip
    q_chunks = _chunk_slices(query.shape[-2], rank, world_size, layout)
    work = torch.float64 if query.dtype == torch.float64 else torch.float32
    states = []  # one (m, l, o) per query chunk; m = -inf, l = 0, o = 0: the state over no keys
    for _, qs in q_chunks:
        m = torch.full((*query.shape[:-2], qs.stop - qs.start), float("-inf"), dtype=work)
        states.append((m, torch.zeros_like(m), torch.zeros(*m.shape, value.shape[-1], dtype=work)))
    if step is not None:  # the hook's state: (out, lse), from out = 0, lse = -inf
        states = [(o, m) for m, _, o in states]
    block = (key.contiguous(), value.contiguous())
    for t in range(world_size):
        source = (rank - t) % world_size
        pending = _exchange(block, rank, world_size, sent) if t < world_size - 1 else None
        for i, (a, qs) in enumerate(q_chunks):
            for b, ks in _chunk_slices(key.shape[-2], source, world_size, layout):
                kind = _pair(a, b, is_causal)
                if kind == "skip":
                    continue
                if step is not None:
                    # copies: a step that changes its inputs in place cannot touch the block the ring is sending
                    q, k, v = (x.to(work, copy=True) for x in (query[..., qs, :], block[0][..., ks, :],
                                                               block[1][..., ks, :]))  # fmt: skip
                    states[i] = _hook_step(step, states[i], q, k, v, kind == "diagonal", (rank, t, a, b))
                    continue
                out, lse = tiled_attention_forward(query[..., qs, :], block[0][..., ks, :], block[1][..., ks, :],
                                                   is_causal=kind == "diagonal")  # fmt: skip
                # a finished (out, lse) is the state m = lse, l = 1, o = out: o / l = out, m + log l = lse
                states[i] = merge_softmax_states(*states[i], lse.to(work), torch.ones_like(lse, dtype=work),
                                                 out.to(work))  # fmt: skip
        if pending is not None:
            requests, received = pending
            for request in requests:
                request.wait()
            block = tuple(received)
    if step is not None:
        out = torch.cat([o for o, _ in states], dim=-2)
        lse = torch.cat([lse for _, lse in states], dim=-1)
        return out.to(query.dtype), lse
    out = torch.cat([o / l[..., None] for m, l, o in states], dim=-2)
    lse = torch.cat([m + torch.log(l) for m, l, o in states], dim=-1)
    return out.to(query.dtype), lse


def _hook_step(step, state, query, key, value, diagonal: bool, where) -> tuple[torch.Tensor, torch.Tensor]:
    """One call of ring_attention_forward's ``step`` hook, its result checked: a clear error naming step (and where in
    the ring it was called) instead of a wrong number further on."""
    out, lse = state
    rank, t, a, b = where
    place = (f"on rank {rank}, ring step {t}, query chunk {a} against key chunk {b}"
             f"{' (the diagonal pair)' if diagonal else ''}")  # fmt: skip
    result = step(out.clone(), lse.clone(), query, key, value, diagonal)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise TypeError(f"step should return the new state (out, lse), two tensors, got {describe(result)} {place}")
    for name, new, old in (("out", result[0], out), ("lse", result[1], lse)):
        if not isinstance(new, torch.Tensor):
            raise TypeError(f"step should return (out, lse) as tensors, got {name} = {describe(new)} {place}")
        if new.shape != old.shape or new.dtype != old.dtype:
            raise ValueError(f"step should return {name} of shape {tuple(old.shape)} and dtype {old.dtype} (the "
                             f"state's), got {describe(new)} {place}")  # fmt: skip
        if torch.isnan(new).any():
            raise ValueError(f"step returned NaN in {name} {place}: every pair gives each query at least one key, so "
                             f"the state after it is finite. {_nan_cause(new, lse, diagonal)}")  # fmt: skip
    return result[0], result[1]


def _nan_cause(new: torch.Tensor, lse: torch.Tensor, diagonal: bool) -> str:
    """Where a step's NaN is (which queries of the chunk), and the cause those places point to: the first query alone
    on the diagonal pair is the strict mask's (it leaves query 0 no key); a step from the empty state, the -inf of
    its lse; else both are possible."""
    nan = torch.isnan(new) if new.dim() == lse.dim() else torch.isnan(new).any(dim=-1)  # lse, or out: per query
    queries = sorted({int(i) for i in nan.nonzero()[:, -1]})
    shown = ", ".join(map(str, queries[:8])) + (", ..." if len(queries) > 8 else "")
    where = f"The NaN is at quer{'y' if len(queries) == 1 else 'ies'} {shown} of the chunk."
    no_key = "a query whose scores are all masked reads no key, and a softmax over no key is 0/0"
    empty = "the state over no keys has lse = -inf and out = 0: exp(-inf) is 0, but -inf - (-inf) is NaN"
    if diagonal and queries == [0]:
        return (
            f"{where} Only the chunk's first query, on the diagonal pair: the query that a mask one off (j < i) "
            "leaves with no key at all; a softmax over no key is 0/0. Query i must read key i: keys j <= i, itself "
            "included."
        )
    if bool(torch.isneginf(lse).all()):
        return f"{where} This step starts from the empty state: {empty}. Or {no_key}."
    return f"{where} Either {no_key}, or {empty}."


def ring_attention_backward(query, key, value, out, lse, grad_out, *, is_causal: bool = False,
                            layout: str = "contiguous", sent: list | None = None):  # fmt: skip
    """Ring attention's backward, called by every rank with its shard: ``(d_query, d_key, d_value)`` of its shard.

    out and lse are what ``ring_attention_forward`` returned on this rank (the global softmax state of its queries),
    grad_out has out's shape. Rank r keeps dQ_r at home; the K/V block of rank s travels the ring as in the forward,
    and with it the partial dK_s, dV_s. At each step, each computed (query chunk, key chunk) pair adds its share with
    ``tiled_attention_backward`` (P rebuilt from the global lse, D_i = rowsum(dO_i * O_i) from the global out):

        dV_s += P^T dO_r;   dS = P * (dO_r V_s^T - D);   dQ_r += dS K_s / sqrt(d);   dK_s += dS^T Q_r / sqrt(d)

    The next K/V block travels while the step computes; the block's dK, dV are sent on after it (they are not ready
    before), P transfers in all, so that the last one brings each dK_s, dV_s home to rank s. That is the schedule
    ring-flash-attention and PyTorch's context parallelism use; it is not the fewest: rank s could keep its own
    block's share at home and start the travelling dK_s, dV_s at rank s + 1, and P - 1 transfers would bring them
    back (one transfer of dK and dV fewer).

    The travelling dK, dV and the dQ kept at home are accumulated in float32 for half-precision inputs (float64 for
    float64 inputs: in float32 or float64, as the inputs), as those implementations do: each pair's share is what
    ``tiled_attention_backward`` returns, in the inputs' dtype, added into the float32 sum, so bfloat16 rounding
    happens once per pair rather than once per addition; dK and dV therefore travel in float32 (``ring_bytes``
    counts them so). The results are returned in the inputs' dtypes. ``sent`` counts the bytes sent as in
    ``ring_attention_forward``.
    """
    is_causal, rank, world_size = _check_ring(query, key, value, is_causal, layout, (out, lse, grad_out))
    if out.shape != (*query.shape[:-1], value.shape[-1]) or grad_out.shape != out.shape:
        raise ValueError(f"out and grad_out should have shape {(*query.shape[:-1], value.shape[-1])} (the forward's "
                         f"output), got out {describe(out)} and grad_out {describe(grad_out)}")  # fmt: skip
    if lse.shape != query.shape[:-1]:
        raise ValueError(f"lse should have shape {tuple(query.shape[:-1])} (one per query, from the forward), "
                         f"got {describe(lse)}")  # fmt: skip
    q_chunks = _chunk_slices(query.shape[-2], rank, world_size, layout)
    work = torch.float64 if query.dtype == torch.float64 else torch.float32  # the sums' (and dK, dV's sent) dtype
    d_query = torch.zeros_like(query, dtype=work)
    block = (key.contiguous(), value.contiguous())
    grads = (torch.zeros_like(block[0], dtype=work), torch.zeros_like(block[1], dtype=work))  # dK_s, dV_s, travelling
    for step in range(world_size):
        source = (rank - step) % world_size
        pending = _exchange(block, rank, world_size, sent) if step < world_size - 1 else None
        for a, qs in q_chunks:
            for b, ks in _chunk_slices(key.shape[-2], source, world_size, layout):
                kind = _pair(a, b, is_causal)
                if kind == "skip":
                    continue
                dq, dk, dv = tiled_attention_backward(query[..., qs, :], block[0][..., ks, :], block[1][..., ks, :],
                                                      out[..., qs, :], lse[..., qs], grad_out[..., qs, :],
                                                      is_causal=kind == "diagonal")  # fmt: skip
                d_query[..., qs, :] += dq
                grads[0][..., ks, :] += dk
                grads[1][..., ks, :] += dv
        if world_size > 1:  # to rank + 1, which holds this block next (with one process it is already home)
            requests, received = _exchange(grads, rank, world_size, sent)
            for request in requests:
                request.wait()
            grads = tuple(received)
        if pending is not None:
            requests, received = pending
            for request in requests:
                request.wait()
            block = tuple(received)
    return d_query.to(query.dtype), grads[0].to(key.dtype), grads[1].to(value.dtype)


class RingAttention(torch.autograd.Function):
    """Ring attention with its ring backward: saves the shard's inputs, out and lse (no score matrix)."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal, layout, sent, step):
        out, lse = ring_attention_forward(query, key, value, is_causal=is_causal, layout=layout, sent=sent, step=step)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.options = (is_causal, layout, sent)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, out, lse = ctx.saved_tensors
        is_causal, layout, sent = ctx.options
        grads = ring_attention_backward(query, key, value, out, lse, grad_out.contiguous(), is_causal=is_causal,
                                        layout=layout, sent=sent)  # fmt: skip
        return (*grads, None, None, None, None)


def ring_attention(query, key, value, *, is_causal: bool = False, layout: str = "contiguous",
                   sent: list | None = None, step=None):  # fmt: skip
    """softmax(Q K^T / sqrt(head_dim)) V for this rank's shard of queries against the whole sequence's keys, the
    sequence sharded over the ranks (``ring_attention_forward``); differentiable, by ``ring_attention_backward``.
    Every rank must call it (it communicates), and every rank must call backward on its output. ``sent``: a list the
    nbytes of each tensor sent are appended to, forward and backward. ``step``: the forward's hook
    (``ring_attention_forward``); the backward is the package's, from the out and lse the forward returned."""
    return RingAttention.apply(query, key, value, is_causal, layout, sent, step)


# ------------------------------------------------------------------------------------------------------------
# All-to-all sequence parallelism (DeepSpeed-Ulysses), run inside a rank
# ------------------------------------------------------------------------------------------------------------


class _AllToAll(torch.autograd.Function):
    """x (P, ...) on every rank -> y with y[p] = rank p's x[my rank]: chunk p goes to rank p. With equal chunks this
    exchange is its own inverse (applied twice, every chunk is back where it started) and, being a permutation of the
    numbers across ranks, its own transpose: the backward is the same all-to-all of the gradient."""

    @staticmethod
    def forward(ctx, x, sent):
        ctx.sent = sent
        return _all_to_all(x, sent)

    @staticmethod
    def backward(ctx, grad):
        return _all_to_all(grad, ctx.sent), None


def _all_to_all(x, sent):
    x = x.contiguous()
    y = torch.empty_like(x)
    dist.all_to_all_single(y, x)
    if sent is not None:  # the chunk for this rank itself stays here: (P - 1) / P of x leaves
        sent.append(x.nbytes // x.shape[0] * (x.shape[0] - 1))
    return y


def ulysses_attention(query, key, value, *, is_causal: bool = False, layout: str = "contiguous",
                      sent: list | None = None):  # fmt: skip
    """All-to-all sequence parallelism (Jacobs et al. 2023, DeepSpeed-Ulysses), called by every rank with its shard:
    this rank's queries' softmax(Q K^T / sqrt(head_dim)) V over the whole sequence; differentiable.

    Rank r holds its tokens for all H heads, (batch, H, N/P, d). One all-to-all (``dist.all_to_all_single``) sends
    head group g (heads g H/P .. (g + 1) H/P - 1) of its tokens to rank g, so that rank r then holds all N tokens of
    its H/P heads, (batch, H/P, N, d), for q, k and v; ordinary attention (SDPA) runs per head over the whole sequence
    (causal as well: every position is at home); a second all-to-all sends each head group's output back to the ranks
    that own the tokens. The backward is the same two all-to-alls of the gradients, in reverse order.

    heads must be divisible by P (each rank takes a whole group of heads), so P can never exceed the number of heads
    (ring attention has no such limit). Query, key and value have the same heads here: with grouped-query attention
    (H_kv < H key/value heads) repeat the K/V heads first (``key.repeat_interleave(H // H_kv, dim=1)``, likewise
    value), which sends H heads of K/V, so GQA's saving on communication is lost. An exchange that knows GQA sends the
    H_kv heads as they are when P divides H_kv, and must still repeat them up to P heads when H_kv < P (each rank needs
    the K/V head of its query heads): K/V traffic P / H_kv times GQA's own.

    query, key (batch, heads, shard_len, head_dim), value (batch, heads, shard_len, value_dim): this rank's shard
    (``shard_sequence`` with ``layout``), the same shapes on every rank -> (batch, heads, shard_len, value_dim).
    ``sent``: a list the bytes each all-to-all sends to other ranks are appended to (``ulysses_bytes``: by formula).
    """
    is_causal, rank, world_size = _check_ring(query, key, value, is_causal, layout, name="ulysses_attention")
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.dim() != 4:
            raise ValueError(f"{name} should have 4 dimensions (batch, heads, shard_len, dim), got {describe(x)}")
    batch, heads, shard_len, _ = query.shape
    if heads % world_size:
        raise ValueError(f"heads (dimension 1 of query, key and value) should be divisible by world_size="
                         f"{world_size}: each rank takes heads / world_size whole heads, got {heads} heads; use "
                         "ring_attention, or a world size that divides the heads")  # fmt: skip
    group = heads // world_size
    seq_len = shard_len * world_size
    positions = torch.cat([shard_positions(seq_len, r, world_size, layout) for r in range(world_size)])
    order = torch.argsort(positions)  # rank order -> sequence order

    def to_heads(x):  # (batch, H, n, d), my tokens -> (batch, H/P, N, d), my heads, in sequence order
        x = x.reshape(batch, world_size, group, shard_len, x.shape[-1]).transpose(0, 1)
        y = _AllToAll.apply(x, sent)  # y[p]: rank p's tokens of my heads
        return y.permute(1, 2, 0, 3, 4).reshape(batch, group, seq_len, x.shape[-1])[..., order, :]

    out = torch.nn.functional.scaled_dot_product_attention(to_heads(query), to_heads(key), to_heads(value),
                                                           is_causal=is_causal)  # fmt: skip
    dim = out.shape[-1]
    out = out[..., positions, :].reshape(batch, group, world_size, shard_len, dim).permute(2, 0, 1, 3, 4)
    back = _AllToAll.apply(out, sent)  # back[g]: head group g of my tokens
    return back.transpose(0, 1).reshape(batch, heads, shard_len, dim)


# ------------------------------------------------------------------------------------------------------------
# Communication by formula: bytes each rank sends per attention layer
# ------------------------------------------------------------------------------------------------------------


def _check_sizes(batch, heads, seq_len, head_dim, world_size, bytes_per_number):
    sizes = [check_int(name, value, what, minimum=1) for name, value, what in (
        ("batch", batch, "sequences per batch"), ("heads", heads, "attention heads"),
        ("seq_len", seq_len, "the length of the whole sequence"), ("head_dim", head_dim, "numbers per head"),
        ("world_size", world_size, "how many processes share the sequence"),
        ("bytes_per_number", bytes_per_number, "2 for bfloat16, 4 for float32"))]  # fmt: skip
    if sizes[2] % sizes[4]:
        raise ValueError(f"seq_len should be a multiple of world_size={world_size} (equal shards), got {seq_len}")
    return sizes


def ring_bytes(batch: int, heads: int, seq_len: int, head_dim: int, world_size: int,
               bytes_per_number: int) -> dict[str, int]:  # fmt: skip
    """Bytes one rank sends per layer in ring attention (``ring_attention_forward`` and ``_backward``), value_dim =
    head_dim. A K (or V) block is B = batch * heads * (seq_len / P) * head_dim * bytes_per_number bytes; its gradient
    travels in float32 unless the inputs are float64 (as in ring-flash-attention and PyTorch's context parallelism),
    so a dK (or dV) block is B_g = batch * heads * (seq_len / P) * head_dim * max(bytes_per_number, 4) bytes.

        forward   (P - 1) transfers of K and V:                          2 (P - 1) B
        backward  (P - 1) transfers of K and V, then P of dK and dV:     2 (P - 1) B + 2 P B_g     (0 for P = 1)

    In bfloat16 (2 bytes) B_g = 2 B. P transfers of dK and dV are this schedule's (see ``ring_attention_backward``);
    keeping each owner's share at home would make it P - 1. The same for both layouts, and for every rank; it does
    not shrink as P grows (about 2 N/P * P = 2 N tokens of K/V pass through each rank): only the time to compute each
    block, (N/P)^2, does."""
    batch, heads, seq_len, head_dim, world_size, size = _check_sizes(batch, heads, seq_len, head_dim, world_size,
                                                                     bytes_per_number)  # fmt: skip
    numbers = batch * heads * (seq_len // world_size) * head_dim
    block, grad_block = numbers * size, numbers * max(size, 4)
    forward = 2 * (world_size - 1) * block
    return {"forward": forward, "backward": forward + (2 * world_size * grad_block if world_size > 1 else 0)}


def ulysses_bytes(batch: int, heads: int, seq_len: int, head_dim: int, world_size: int,
                  bytes_per_number: int) -> dict[str, int]:  # fmt: skip
    """Bytes one rank sends per layer in ``ulysses_attention``, value_dim = head_dim. A shard of q (or k, v, out) is
    S = batch * heads * (seq_len / P) * head_dim * bytes_per_number bytes, of which an all-to-all sends (P - 1) / P
    (the part for this rank itself stays):

        forward   all-to-alls of q, k, v, then of out:                   4 (P - 1) / P S
        backward  all-to-alls of d_out, then of dq, dk, dv:              4 (P - 1) / P S

    S falls as 1 / P, so each rank sends less as P grows (unlike the ring), while heads % P == 0 bounds P."""
    batch, heads, seq_len, head_dim, world_size, size = _check_sizes(batch, heads, seq_len, head_dim, world_size,
                                                                     bytes_per_number)  # fmt: skip
    if heads % world_size:
        raise ValueError(f"heads should be divisible by world_size={world_size} (Ulysses splits the heads), got "
                         f"{heads}")  # fmt: skip
    per_tensor = batch * (heads // world_size) * (seq_len // world_size) * head_dim * size * (world_size - 1)
    return {"forward": 4 * per_tensor, "backward": 4 * per_tensor}


# ------------------------------------------------------------------------------------------------------------
# Time per rank: the work each rank computes, counted, beside the time it takes, measured
# ------------------------------------------------------------------------------------------------------------

# this section's imports stay with it (the sections above are edited by others at the same time)
import math  # noqa: E402
import statistics  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402

from ._validate import check_instance, check_items, check_positive_int  # noqa: E402


def _counts(name: str, values, meaning: str) -> list[int]:
    """A non-empty list of whole numbers >= 1 (a list, a tuple or a NumPy array of them), or the error naming it."""
    values = check_items(name, values.tolist() if isinstance(values, np.ndarray) else values, int, meaning)
    return [check_int(f"{name}[{i}]", v, meaning, minimum=1) for i, v in enumerate(values)]


def score_entries(world_size: int, seq_len: int, layout: str = "contiguous", is_causal: bool = True) -> list[float]:
    """Work per rank as a share of the N x N score matrix: the scores each rank computes in a ring pass (counted from
    ``score_blocks``), divided by N^2. A full block is c^2 scores and a diagonal (masked) block c (c + 1) / 2, for the
    chunk length c = N / C (C = P contiguous, 2P zigzag); the ranks' shares sum to 1 (not causal) or N (N + 1) / 2 / N^2
    (causal)."""
    counts = score_blocks(world_size, layout, is_causal)
    n_chunks = _check_layout(layout, world_size)
    seq_len = check_int("seq_len", seq_len, "the length of the whole sequence", minimum=1)
    if seq_len % n_chunks:
        raise ValueError(f"seq_len should be a multiple of {n_chunks} (the {layout} layout's chunks for world_size="
                         f"{world_size}), got {seq_len}")  # fmt: skip
    c = seq_len // n_chunks
    return [(r["full"] * c * c + r["diagonal"] * c * (c + 1) / 2) / seq_len**2 for r in counts]


@dataclass(frozen=True)
class RankTimes:
    """One layout's measurements (``time_ring_rank`` on every rank, gathered by ``RingTiming.from_ranks``), per rank
    (lists in rank order; times in seconds, one per timed repeat):

        blocks         score blocks by rule (``score_blocks``): {"full": ..., "diagonal": ...} per rank
        tiles          the tile calls each rank made in the forward, counted by the timing hook (equal to blocks)
        backward_tiles the same in the backward (all 0 when the backward was not timed)
        work           the scores each rank computes as a share of N^2 (``score_entries``)
        wall_s         the ring call on each rank: from the barrier that starts the repeat to its return
        compute_s      the part of it spent inside the tile computations (wall clock)
        compute_cpu_s  the same as CPU time of the rank's thread (``time.thread_time``): what the rank itself
                       computed, whether or not another process held its core meanwhile
        tile_calls     every tile call of every timed repeat, per rank: (pass, query rows, diagonal, wall seconds,
                       CPU seconds) with pass "forward" or "backward" and diagonal True for a masked block
    """

    layout: str
    blocks: list
    tiles: list
    backward_tiles: list
    work: list
    wall_s: list
    compute_s: list
    compute_cpu_s: list
    tile_calls: list

    def median(self, kind: str = "compute") -> list[float]:
        """Each rank's median over the repeats of ``kind``: 'wall', 'compute' or 'compute_cpu'."""
        return [statistics.median(times) for times in self._times(kind)]

    def quartiles(self, kind: str = "compute") -> list[tuple[float, float]]:
        """Each rank's (first, third) quartile over the repeats of ``kind`` (the spread; both equal the value for a
        single repeat)."""
        return [(float(np.quantile(t, 0.25)), float(np.quantile(t, 0.75))) for t in self._times(kind)]

    def _times(self, kind: str) -> list:
        check_choice("kind", kind, TIME_KINDS)
        return {"wall": self.wall_s, "compute": self.compute_s, "compute_cpu": self.compute_cpu_s}[kind]


TIME_KINDS = ("wall", "compute", "compute_cpu")
_RING_RECORD = "attnedu ring timing"  # the kind of record time_ring_rank returns (checked by RingTiming.from_ranks)


@dataclass(frozen=True)
class RingTiming:
    """Per-rank ring timings of every rank: the configuration, one ``RankTimes`` per layout (``layouts[name]``), and,
    when ``time_ring`` made the launch, ``launch_s`` seconds from the call until the last rank had started (the
    processes started, by the fork server or spawned, and joined into the group) and ``total_s`` for the whole call
    (both None for records gathered from a launch made elsewhere: ``from_ranks``)."""

    world_size: int
    seq_len: int
    batch: int
    heads: int
    head_dim: int
    is_causal: bool
    backward: bool
    repeats: int
    warmup: int
    layouts: dict
    launch_s: float | None = None
    total_s: float | None = None

    @classmethod
    def from_ranks(cls, records, *, started: float | None = None, finished: float | None = None) -> RingTiming:
        """The timing of a whole ring from what ``time_ring_rank`` returned on each rank, in rank order (the list
        ``run_ranks`` returns when each rank returns its record). ``started`` and ``finished``: the launcher's
        ``time.time()`` before the launch and after it, for ``launch_s`` and ``total_s`` (left None without them)."""
        records = check_items("records", records, dict, "time_ring_rank's records, one per rank in rank order")
        for rank, record in enumerate(records):
            if record.get("kind") != _RING_RECORD:
                raise ValueError(f"records[{rank}] should be what time_ring_rank returned, got a dict with keys "
                                 f"{sorted(record)}")  # fmt: skip
            if record["rank"] != rank or record["world_size"] != len(records):
                raise ValueError(f"records should hold one record per rank, in rank order: records[{rank}] came from "
                                 f"rank {record['rank']} of {record['world_size']}, and there are {len(records)} "
                                 "records")  # fmt: skip
            if record["config"] != records[0]["config"]:
                raise ValueError(f"records should come from one ring (the same arguments on every rank): records"
                                 f"[{rank}] has {record['config']}, records[0] {records[0]['config']}")  # fmt: skip
        config, world_size = records[0]["config"], len(records)
        layouts = {}
        for layout in config["layouts"]:
            mine = [r["layouts"][layout] for r in records]
            layouts[layout] = RankTimes(
                layout=layout, blocks=score_blocks(world_size, layout, config["is_causal"]),
                tiles=[m["tiles"] for m in mine], backward_tiles=[m["backward_tiles"] for m in mine],
                work=score_entries(world_size, config["seq_len"], layout, config["is_causal"]),
                wall_s=[m["wall_s"] for m in mine], compute_s=[m["compute_s"] for m in mine],
                compute_cpu_s=[m["compute_cpu_s"] for m in mine],
                tile_calls=[m["tile_calls"] for m in mine])  # fmt: skip
        launch = None if started is None else max(r["entered"] for r in records) - started
        total = None if started is None or finished is None else finished - started
        return cls(world_size=world_size, layouts=layouts, launch_s=launch, total_s=total,
                   **{k: config[k] for k in ("seq_len", "batch", "heads", "head_dim", "is_causal", "backward",
                                             "repeats", "warmup")})  # fmt: skip

    def block_seconds(self, kind: str = "compute_cpu", *, rows: int, diagonal: bool = False,
                      backward: bool = False) -> list[float]:  # fmt: skip
        """The seconds of every single tile call with ``rows`` query rows (a block of rows x rows scores: a chunk
        against a chunk of the same length), masked (``diagonal=True``) or full, in the forward (or the backward),
        over every layout, rank and timed repeat; ``kind`` 'compute' (wall clock) or 'compute_cpu' (the rank's CPU
        time). Empty if no such block was computed."""
        check_choice("kind", kind, ("compute", "compute_cpu"))
        rows = check_positive_int("rows", rows, "query rows of the block")
        check_bool("diagonal", diagonal, "whether the block is masked")
        check_bool("backward", backward, "whether the backward's tile calls are meant")
        where, column = "backward" if backward else "forward", 3 if kind == "compute" else 4
        return [call[column] for times in self.layouts.values() for per_rank in times.tile_calls
                for repeat in per_rank for call in repeat
                if call[0] == where and call[1] == rows and call[2] == diagonal]  # fmt: skip


def _timed_tile(tile, clock: dict, name: str):
    """tile wrapped so that each call adds its wall and thread CPU time to clock, counts itself and is recorded."""

    def timed(*args, is_causal, **kwargs):
        start, start_cpu = time.perf_counter(), time.thread_time()
        try:
            return tile(*args, is_causal=is_causal, **kwargs)
        finally:
            wall, cpu = time.perf_counter() - start, time.thread_time() - start_cpu
            clock["compute"] += wall
            clock["compute_cpu"] += cpu
            clock[name]["diagonal" if is_causal else "full"] += 1
            clock["calls"].append((name, args[0].shape[-2], bool(is_causal), wall, cpu))

    return timed


def _timing_config(world_size, seq_len, batch, heads, head_dim, is_causal, layouts, repeats, warmup, backward,
                   seed) -> dict:  # fmt: skip
    """The arguments of ``time_ring`` and ``time_ring_rank``, checked, as the dict every rank receives."""
    world_size = check_int("world_size", world_size, "how many processes", minimum=1)
    layouts = check_items("layouts", layouts, str, "layout names")
    for layout in layouts:
        check_choice("layouts[...]", layout, LAYOUTS)
    if len(set(layouts)) != len(layouts):
        raise ValueError(f"layouts should name each layout once, got {layouts}")
    seq_len = check_int("seq_len", seq_len, "the length of the whole sequence", minimum=1)
    for layout in layouts:
        shard_positions(seq_len, 0, world_size, layout)  # refuses a length the layout cannot split
    return {
        "seq_len": seq_len, "layouts": tuple(layouts), "seed": check_int("seed", seed, "the inputs' seed", minimum=0),
        "batch": check_positive_int("batch", batch, "sequences"), "heads": check_positive_int("heads", heads, "heads"),
        "head_dim": check_positive_int("head_dim", head_dim, "numbers per head"),
        "is_causal": check_bool("is_causal", is_causal, "whether query i may only attend keys j <= i"),
        "repeats": check_positive_int("repeats", repeats, "timed repeats of each layout"),
        "warmup": check_int("warmup", warmup, "untimed repeats first", minimum=0),
        "backward": check_bool("backward", backward, "whether the backward is timed with the forward"),
    }  # fmt: skip


def time_ring_rank(rank: int, world_size: int, seq_len: int, *, batch: int = 1, heads: int = 2, head_dim: int = 32,
                   is_causal: bool = True, layouts=LAYOUTS, repeats: int = 5, warmup: int = 1, backward: bool = False,
                   seed: int = 0) -> dict:  # fmt: skip
    """Time ring attention on this rank: called inside a rank of a launch (``run_ranks``; ``time_ring`` makes its own),
    by every rank with the same arguments. Every layout runs ``warmup + repeats`` times, the layouts interleaved
    (alternating which goes first), each repeat started together (``dist.barrier()``); the first ``warmup`` repeats
    are not kept.

    The rank measures its own wall time of the ring call (forward, and backward with ``backward=True``) and, with a
    hook around the tile computations (``tiled_attention_forward`` and ``_backward``, wrapped in this process only
    while it runs: the ring's numerics are untouched), the time it spends computing: wall clock and its thread's CPU
    time (``time.thread_time``), per repeat and per tile call. The compute times show each rank's work. The wall
    times show when each rank finished, which is not the busiest rank's time on every rank: a rank waits only for the
    blocks its predecessor sends, each posted at the start of the predecessor's step, so a lightly loaded rank may
    finish before the busiest (a layer ends when the busiest does: the next collective operation waits for it). The
    hook also counts the tiles computed, which must equal ``score_blocks``.

    Inputs: float32 (batch, heads, seq_len, head_dim) standard normal from ``seed`` (q, k, v and the output's
    gradient, drawn in that order), the same on every rank, each rank taking its shard. seq_len must split into each
    layout's chunks (a multiple of 2P for zigzag). -> this rank's record (a picklable dict): return it from the rank
    and pass the ranks' records, in rank order, to ``RingTiming.from_ranks``.
    """
    entered = time.time()
    config = _timing_config(world_size, seq_len, batch, heads, head_dim, is_causal, layouts, repeats, warmup,
                            backward, seed)  # fmt: skip
    rank = check_int("rank", rank, "which process", minimum=0, maximum=world_size - 1)
    generator = torch.Generator().manual_seed(config["seed"])
    shape = (config["batch"], config["heads"], config["seq_len"], config["head_dim"])
    tensors = [torch.randn(shape, generator=generator) for _ in range(4)]  # q, k, v, d_out: the same on every rank
    shards = {layout: [shard_sequence(x, rank, world_size, layout) for x in tensors] for layout in config["layouts"]}
    results = {layout: {"wall_s": [], "compute_s": [], "compute_cpu_s": [], "tile_calls": []}
               for layout in config["layouts"]}  # fmt: skip
    clock = {}
    module = globals()  # the ring looks its tile functions up here: wrap them for the timing (this process only)
    saved = module["tiled_attention_forward"], module["tiled_attention_backward"]
    module["tiled_attention_forward"] = _timed_tile(saved[0], clock, "forward")
    module["tiled_attention_backward"] = _timed_tile(saved[1], clock, "backward")
    try:
        for repeat in range(config["warmup"] + config["repeats"]):
            order = config["layouts"] if repeat % 2 == 0 else config["layouts"][::-1]  # neither always goes first
            for layout in order:
                q, k, v, d_out = shards[layout]
                clock.update(compute=0.0, compute_cpu=0.0, forward={"full": 0, "diagonal": 0},
                             backward={"full": 0, "diagonal": 0}, calls=[])  # fmt: skip
                dist.barrier()
                start = time.perf_counter()
                out, lse = ring_attention_forward(q, k, v, is_causal=config["is_causal"], layout=layout)
                if config["backward"]:
                    ring_attention_backward(q, k, v, out, lse, d_out, is_causal=config["is_causal"], layout=layout)
                wall = time.perf_counter() - start
                if repeat >= config["warmup"]:
                    results[layout]["wall_s"].append(wall)
                    results[layout]["compute_s"].append(clock["compute"])
                    results[layout]["compute_cpu_s"].append(clock["compute_cpu"])
                    results[layout]["tile_calls"].append(clock["calls"])
                results[layout]["tiles"] = dict(clock["forward"])
                results[layout]["backward_tiles"] = dict(clock["backward"])
    finally:
        module["tiled_attention_forward"], module["tiled_attention_backward"] = saved
    return {"kind": _RING_RECORD, "rank": rank, "world_size": world_size, "config": config, "entered": entered,
            "layouts": results}  # fmt: skip


def _time_ring_rank(rank: int, world_size: int, config: dict) -> dict:
    """What each rank of ``time_ring`` runs: ``time_ring_rank`` with time_ring's checked arguments."""
    return time_ring_rank(rank, world_size, **config)


def time_ring(world_size: int, seq_len: int, *, batch: int = 1, heads: int = 2, head_dim: int = 32,
              is_causal: bool = True, layouts=LAYOUTS, repeats: int = 5, warmup: int = 1, backward: bool = False,
              seed: int = 0, timeout: float = DEFAULT_TIMEOUT_S) -> RingTiming:  # fmt: skip
    """Time ring attention on each rank in one launch of ``world_size`` processes (``run_ranks``): every rank runs
    ``time_ring_rank`` with these arguments (see it for what is measured and how), and their records make the
    ``RingTiming`` (``RingTiming.from_ranks``), with the launch's own times: ``launch_s`` until the last rank had
    started, ``total_s`` for the whole call. Inside a launch of your own, call ``time_ring_rank`` in each rank instead.
    Timings vary from run to run and machine to machine: they are shown, never asserted.
    """
    config = _timing_config(world_size, seq_len, batch, heads, head_dim, is_causal, layouts, repeats, warmup,
                            backward, seed)  # fmt: skip
    start = time.time()
    per_rank = run_ranks(_time_ring_rank, world_size, config, timeout=timeout)
    return RingTiming.from_ranks(per_rank, started=start, finished=time.time())


def time_transfer_rank(rank: int, world_size: int, *, numbers: int = 2**20, tensors: int = 1, repeats: int = 3,
                       warmup: int = 1) -> dict:  # fmt: skip
    """Time the ring's transfer on this rank: called inside a rank of a launch, by every rank with the same
    arguments. Each repeat, started together (``dist.barrier()``), sends ``tensors`` float32 blocks of ``numbers``
    numbers each to rank + 1 while receiving as many from rank - 1, posted together as a ring step posts them
    (``batch_isend_irecv``; a ring step sends K and V: ``tensors=2``, ``numbers`` the numbers of one shard of K), and
    times them to the last completion; the first ``warmup`` repeats are not kept. Needs at least 2 ranks.
    -> {"bytes": the bytes sent per repeat (all the blocks), "seconds": one per timed repeat, "median_s": their
    median}."""
    world_size = check_int("world_size", world_size, "processes in the ring, at least 2", minimum=2)
    rank = check_int("rank", rank, "which process", minimum=0, maximum=world_size - 1)
    numbers = check_positive_int("numbers", numbers, "float32 numbers in each block sent")
    tensors = check_positive_int("tensors", tensors, "blocks sent together (2 for a ring step's K and V)")
    repeats = check_positive_int("repeats", repeats, "timed transfers")
    warmup = check_int("warmup", warmup, "untimed transfers first", minimum=0)
    blocks = [torch.ones(numbers) for _ in range(tensors)]
    received = [torch.empty(numbers) for _ in range(tensors)]
    seconds = []
    for _ in range(warmup + repeats):
        dist.barrier()
        start = time.perf_counter()
        ops = [dist.P2POp(dist.isend, block, (rank + 1) % world_size) for block in blocks]
        ops += [dist.P2POp(dist.irecv, buffer, (rank - 1) % world_size) for buffer in received]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        seconds.append(time.perf_counter() - start)
    seconds = seconds[warmup:]
    return {"bytes": sum(b.nbytes for b in blocks), "seconds": seconds, "median_s": statistics.median(seconds)}


def plot_rank_timing(fig, timing: RingTiming, kinds=("compute", "wall")):
    """Counted work beside measured time, per rank: one column per layout; top, the scores each rank computes as a
    share of N^2 (counted: full blocks and diagonal blocks stacked); bottom, the median milliseconds of each of
    ``kinds`` ('compute', 'compute_cpu', 'wall') per rank, with bars from the first to the third quartile of the
    repeats. Rows share their scale across layouts, so the layouts compare by eye. ``timing``: what ``time_ring`` or
    ``RingTiming.from_ranks`` returns. Returns the axes (2, layouts)."""
    import matplotlib.pyplot as plt  # only where a picture is drawn (the ranks never import it)

    check_instance("timing", timing, RingTiming, "a RingTiming (what time_ring or RingTiming.from_ranks returns)")
    kinds = check_items("kinds", kinds, str, "time kinds")
    for kind in kinds:
        check_choice("kinds[...]", kind, TIME_KINDS)
    layouts = list(timing.layouts)
    axes = fig.subplots(2, len(layouts), squeeze=False, sharey="row")
    highest = {"work": 0.0, "time": 0.0}  # room above the tallest bar of each row for its labels and the legend
    colours = {"compute": "tab:blue", "compute_cpu": "tab:cyan", "wall": "tab:grey"}
    labels = {"compute": "computing (wall clock)", "compute_cpu": "computing (CPU time)", "wall": "whole ring call"}
    ranks = np.arange(timing.world_size)
    for column, layout in enumerate(layouts):
        times = timing.layouts[layout]
        c = timing.seq_len / (timing.world_size if layout == "contiguous" else 2 * timing.world_size)
        full = np.array([b["full"] * c * c for b in times.blocks]) / timing.seq_len**2
        diagonal = np.array(times.work) - full
        top = axes[0, column]
        top.bar(ranks, full, color="tab:orange", label="full blocks")
        top.bar(ranks, diagonal, bottom=full, color="tab:orange", alpha=0.45, hatch="//", label="diagonal blocks")
        for r, b in enumerate(times.blocks):
            top.annotate(f"{b['full']}+{b['diagonal']}d", (r, full[r] + diagonal[r]), ha="center", va="bottom",
                         fontsize=8)  # fmt: skip
        highest["work"] = max(highest["work"], max(times.work))
        top.set_title(f"{layout}: work counted", fontsize=10)
        top.set_xticks(ranks)
        bottom = axes[1, column]
        width = 0.8 / len(kinds)
        for i, kind in enumerate(kinds):
            median = 1e3 * np.array(times.median(kind))
            low, high = (1e3 * np.array(q) for q in zip(*times.quartiles(kind)))
            x = ranks - 0.4 + width * (i + 0.5)
            bottom.bar(x, median, width, color=colours[kind], label=labels[kind])
            bottom.errorbar(x, median, yerr=[median - low, high - median], fmt="none", ecolor="black", capsize=2)
            highest["time"] = max(highest["time"], float(high.max()))
        bottom.set_title(f"{layout}: time measured", fontsize=10)
        bottom.set_xticks(ranks)
        bottom.set_xlabel("rank")
    axes[0, 0].set_ylabel("scores computed / N²")
    axes[1, 0].set_ylabel(f"ms (median of {timing.repeats} repeats)")
    axes[0, 0].set_ylim(0, 1.3 * highest["work"])
    axes[1, 0].set_ylim(0, 1.3 * highest["time"])
    axes[0, -1].legend(fontsize=8, ncols=2, loc="upper left")
    axes[1, -1].legend(fontsize=8, ncols=len(kinds), loc="upper left")
    what = "forward and backward" if timing.backward else "forward"
    fig.suptitle(f"Ring attention {what}, P = {timing.world_size}, N = {timing.seq_len}"
                 f"{', causal' if timing.is_causal else ''}", fontsize=11)  # fmt: skip
    plt.setp([ax.get_xticklabels() for ax in axes.flat], fontsize=8)
    return axes


# ------------------------------------------------------------------------------------------------------------
# What oversubscription costs: more processes than cores
# ------------------------------------------------------------------------------------------------------------


def usable_cpus() -> int:
    """The cores this process may run on (its affinity where the system reports one, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no sched_getaffinity
        return os.cpu_count() or 1


def oversubscription_cost(chunk: int = 512, *, world_sizes=(2, 4), heads: int = 2, head_dim: int = 32,
                          repeats: int = 5, warmup: int = 1, timeout: float = DEFAULT_TIMEOUT_S) -> dict:  # fmt: skip
    """The same work per score block at each of ``world_sizes`` processes on this machine: one ``time_ring`` launch
    per world size P, not causal, contiguous, sequence P * chunk, so every rank computes P blocks of chunk x chunk
    scores, the same block at every P. Per P (medians over ranks of each rank's median over repeats):

        block_s       seconds inside the tile computations per block (wall clock: includes waiting for a core)
        block_cpu_s   CPU seconds per block (the work itself; the same at every P if nothing else changes)
        ring_s        the ring call (the slowest rank's median)
        ring_block_s  ring_s / P: the ring's wall time per block each rank computes (computing and waiting)
        cores_s       the least time the P * P blocks could take on this machine's cores: P * P * block_cpu_s /
                      min(P, usable cores), transfers left out
        launch_s      from the call until the last rank had started (processes started and joined into the group:
                      seconds at the first launch, which starts the fork server and imports torch; far less after)

    Processes take turns on the cores: with more processes than cores a rank waits for a core as well as for its
    neighbour's block, so ring_s grows faster than the work per rank (P blocks) while block_cpu_s stays put.
    -> {"cpu_count", "usable_cpus", "world_sizes": {P: {...}}, "timings": {P: RingTiming}}. Timings vary: shown,
    never asserted.
    """
    chunk = check_positive_int("chunk", chunk, "positions per rank (one block is chunk x chunk scores)")
    world_sizes = _counts("world_sizes", world_sizes, "how many processes to start")
    per_size, timings = {}, {}
    for p in world_sizes:
        timing = time_ring(p, p * chunk, heads=heads, head_dim=head_dim, is_causal=False, layouts=("contiguous",),
                           repeats=repeats, warmup=warmup, timeout=timeout)  # fmt: skip
        times = timing.layouts["contiguous"]
        blocks = [b["full"] for b in times.blocks]  # P on every rank
        per_size[p] = {
            "block_s": statistics.median(t / n for t, n in zip(times.median("compute"), blocks)),
            "block_cpu_s": statistics.median(t / n for t, n in zip(times.median("compute_cpu"), blocks)),
            "ring_s": max(times.median("wall")),
            "launch_s": timing.launch_s,
        }
        per_size[p].update({
            "ring_block_s": per_size[p]["ring_s"] / p,
            "cores_s": p * p * per_size[p]["block_cpu_s"] / min(p, usable_cpus()),
        })  # fmt: skip
        timings[p] = timing
    return {"cpu_count": os.cpu_count(), "usable_cpus": usable_cpus(), "world_sizes": per_size, "timings": timings}


# ------------------------------------------------------------------------------------------------------------
# An alpha-beta model of scaling to many GPUs (a model: nothing here is measured)
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """A link in the alpha-beta model: a transfer of b bytes takes ``latency + b / bandwidth`` seconds
    (``bandwidth`` in bytes per second, one direction, per GPU)."""

    name: str
    bandwidth: float
    latency: float


# Published figures (checked against the sources named; the latencies are assumptions of the model, not published):
# - NVIDIA H100 product page (nvidia.com/en-us/data-center/h100, Product Specifications, H100 SXM): "FP16/BF16 Tensor
#   Core 1,979 teraFLOPS" with the footnote "with sparsity": dense BF16 is half, 989 teraFLOP/s; "NVIDIA NVLink
#   900GB/s", the sum over both directions: 450 GB/s each way (NVIDIA/nccl issue #1264 measures 380 GB/s one way
#   with NVIDIA's p2pBandwidthLatencyTest on H100 SXM: a peak is an upper bound); "GPU Memory 80GB".
# - InfiniBand NDR: 400 Gb/s per port (NVIDIA's ConnectX-7 / Quantum-2 documentation) = 50 GB/s each way; one such
#   NIC per GPU, as in 8-GPU H100 nodes (DGX H100), is the model's assumption.
# - Latency (alpha) per transfer: 5 us on NVLink, 10 us over InfiniBand: assumed orders of magnitude, not measured.
H100_BF16_DENSE_FLOPS = 989e12
H100_MEMORY_BYTES = 80 * 10**9
GPUS_PER_NODE = 8
NVLINK4 = Link("NVLink 4 (H100 SXM)", bandwidth=450e9, latency=5e-6)
INFINIBAND_NDR = Link("InfiniBand NDR (400 Gb/s per GPU)", bandwidth=50e9, latency=10e-6)


def transfer_time(nbytes, link: Link):
    """alpha + bytes / beta: the model's seconds to send ``nbytes`` (a number or an array) over ``link``."""
    check_instance("link", link, Link, "a Link (NVLINK4, INFINIBAND_NDR or your own)")
    nbytes = np.asarray(nbytes, dtype=float)
    if np.any(nbytes < 0) or not np.all(np.isfinite(nbytes)):
        raise ValueError(f"nbytes should be finite numbers >= 0, got {nbytes}")
    return link.latency + nbytes / link.bandwidth


def _model_args(seq_len, world_size, batch, heads, kv_heads, head_dim, bytes_per_number, flops):
    seq_len = np.asarray(seq_len, dtype=float)
    world_size = np.asarray(world_size)
    for name, value in (("seq_len", seq_len), ("world_size", world_size)):
        if value.size == 0 or not np.all(np.isfinite(value)) or np.any(value < 1):
            raise ValueError(f"{name} should be a number >= 1 or an array of them, got {value}")
    if not np.issubdtype(world_size.dtype, np.integer) and np.any(world_size != np.round(world_size)):
        raise ValueError(f"world_size should be whole numbers of GPUs, got {world_size}")
    world_size = world_size.astype(np.int64)
    sizes = [check_positive_int(name, value, what) for name, value, what in (
        ("batch", batch, "sequences"), ("heads", heads, "query heads"), ("kv_heads", kv_heads, "key/value heads"),
        ("head_dim", head_dim, "numbers per head"), ("bytes_per_number", bytes_per_number, "2 for bf16"))]  # fmt: skip
    if sizes[1] % sizes[2]:
        raise ValueError(f"kv_heads should divide heads (each K/V head serves heads / kv_heads query heads), got "
                         f"heads={heads}, kv_heads={kv_heads}")  # fmt: skip
    flops = check_number("flops", flops, "floating-point operations per second of one GPU", 0.0, strict=True)
    return seq_len, world_size, *sizes, flops


def _step_work(is_causal: bool, layout: str) -> tuple[float, float]:
    """Ring compute at the first step and at each later one, as a fraction of a full block pair, on the busiest rank:
    not causal 1, 1; causal zigzag 1/2, 1/2 (every rank, every step); causal contiguous 1/2 (the diagonal), then 1
    (the last rank computes a whole block at every later step, and the others wait for it)."""
    is_causal = check_bool("is_causal", is_causal, "whether query i may only attend keys j <= i")
    check_choice("layout", layout, LAYOUTS)
    if not is_causal:
        return 1.0, 1.0
    return (0.5, 0.5) if layout == "zigzag" else (0.5, 1.0)


def ring_model(seq_len, world_size, *, batch: int = 1, heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
               bytes_per_number: int = 2, is_causal: bool = True, layout: str = "zigzag",
               flops: float = H100_BF16_DENSE_FLOPS, nvlink: Link = NVLINK4, network: Link = INFINIBAND_NDR,
               gpus_per_node: int = GPUS_PER_NODE) -> dict:  # fmt: skip
    """A model (not a measurement) of one layer's ring attention forward on P GPUs, per rank, in seconds; seq_len N
    and world_size P may be arrays (broadcast). Chunk c = N / P tokens per rank.

        compute of one full block pair   4 b H c^2 d / F          (Q K^T and P V: 2 c^2 d multiply-adds per head)
        one K/V block's transfer         alpha + 2 b H_kv c d s / beta     (K and V, s bytes per number)

    At step t a rank computes on the block it holds while that block travels on: step time = max(compute_t, comm),
    the last step computing only; ring = the sum over the P steps, compute = the sum of the compute terms alone (the
    time with free communication). compute_t is a full block pair (not causal), half of one (causal zigzag: every
    rank computes half a block at every step) or, causal contiguous, half at step 0 and a whole block afterwards on
    the busiest rank, which sets the pace. The link: NVLink while the ring stays in one node (P <= gpus_per_node),
    else InfiniBand, whose hop is the slowest in the ring. -> dict of arrays: chunk, compute_step (the later steps'),
    comm_step, ring, compute, hidden (comm_step <= compute_step: the transfers cost nothing extra), link_bandwidth.
    """
    seq_len, world_size, batch, heads, kv_heads, head_dim, size, flops = _model_args(
        seq_len, world_size, batch, heads, kv_heads, head_dim, bytes_per_number, flops)  # fmt: skip
    check_instance("nvlink", nvlink, Link, "a Link")
    check_instance("network", network, Link, "a Link")
    gpus_per_node = check_positive_int("gpus_per_node", gpus_per_node, "GPUs joined by NVLink")
    first, later = _step_work(is_causal, layout)
    seq_len, world_size = np.broadcast_arrays(seq_len, world_size)
    chunk = seq_len / world_size
    full = 4 * batch * heads * chunk**2 * head_dim / flops
    in_node = world_size <= gpus_per_node
    bandwidth = np.where(in_node, nvlink.bandwidth, network.bandwidth)
    latency = np.where(in_node, nvlink.latency, network.latency)
    comm = np.where(world_size > 1, latency + 2 * batch * kv_heads * chunk * head_dim * size / bandwidth, 0.0)
    compute_first, compute_later = first * full, later * full
    ring = np.where(world_size > 1, np.maximum(compute_first, comm) + (world_size - 2).clip(0) *
                    np.maximum(compute_later, comm) + compute_later, compute_first)  # fmt: skip
    compute = compute_first + (world_size - 1) * compute_later
    return {"chunk": chunk, "compute_step": compute_later, "comm_step": comm, "ring": ring, "compute": compute,
            "hidden": comm <= compute_later, "link_bandwidth": bandwidth}  # fmt: skip


def ring_overlap_chunk(*, batch: int = 1, heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
                       bytes_per_number: int = 2, is_causal: bool = True, layout: str = "zigzag",
                       flops: float = H100_BF16_DENSE_FLOPS, link: Link = INFINIBAND_NDR) -> float:  # fmt: skip
    """c*, the chunk (tokens per rank) at which a ring step's compute equals its transfer in ``ring_model``:

        w 4 b H c^2 d / F = alpha + 2 b H_kv c d s / beta     ->   c* = (k1 + sqrt(k1^2 + 4 k2 alpha)) / (2 k2)

    with k2 = w 4 b H d / F, k1 = 2 b H_kv d s / beta, w the fraction of a block computed per step (``ring_model``).
    Above c* computation hides communication; a sequence of N tokens keeps it hidden up to P = N / c* GPUs. With no
    latency, c* = w^-1 (H_kv / H) (s / 2) F / beta: for multi-head attention (H_kv = H) in bfloat16 (s = 2), not
    causal, c* = F / beta, Liu et al. 2023's condition (section 3.2: block size c >= F / B, F the FLOPS and B the
    bandwidth of a host)."""
    _, _, batch, heads, kv_heads, head_dim, size, flops = _model_args(1, 1, batch, heads, kv_heads, head_dim,
                                                                      bytes_per_number, flops)  # fmt: skip
    check_instance("link", link, Link, "a Link")
    _, work = _step_work(is_causal, layout)
    k2 = work * 4 * batch * heads * head_dim / flops
    k1 = 2 * batch * kv_heads * head_dim * size / link.bandwidth
    return (k1 + math.sqrt(k1 * k1 + 4 * k2 * link.latency)) / (2 * k2)


def ulysses_model(seq_len, world_size, *, batch: int = 1, heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
                  bytes_per_number: int = 2, is_causal: bool = True, flops: float = H100_BF16_DENSE_FLOPS,
                  nvlink: Link = NVLINK4, network: Link = INFINIBAND_NDR,
                  gpus_per_node: int = GPUS_PER_NODE) -> dict:  # fmt: skip
    """A model (not a measurement) of one layer's Ulysses (all-to-all) attention forward on P GPUs, per rank, in
    seconds; arrays broadcast as in ``ring_model``. NaN where P does not divide the heads (Ulysses cannot run).

    Two all-to-alls, not overlapped with compute in the simple scheme: q, k, v in, the output back. Each rank holds
    S = b h (N / P) d s bytes of a tensor with h heads and sends (P - 1) / P of it (``ulysses_bytes`` for h_kv = H).
    K and V go with H_kv heads when P divides H_kv, else repeated up to P heads (P divides H_kv ... H: each rank
    needs the K/V head of its query heads), else H. An all-to-all takes alpha + its bytes / beta on NVLink within a
    node (P <= gpus_per_node); across nodes, (gpus_per_node - 1) / P of S stays on NVLink and (P - gpus_per_node) / P
    crosses InfiniBand, both at once: alpha_IB + max(NVLink part, InfiniBand part). Compute: ordinary attention for
    H / P heads over all N tokens, 4 b (H / P) N^2 d / F (halved when causal: all positions are at home).
    -> dict of arrays: comm, compute, ulysses (comm + compute), bytes (sent per rank, both all-to-alls).
    """
    seq_len, world_size, batch, heads, kv_heads, head_dim, size, flops = _model_args(
        seq_len, world_size, batch, heads, kv_heads, head_dim, bytes_per_number, flops)  # fmt: skip
    check_instance("nvlink", nvlink, Link, "a Link")
    check_instance("network", network, Link, "a Link")
    gpus_per_node = check_positive_int("gpus_per_node", gpus_per_node, "GPUs joined by NVLink")
    is_causal = check_bool("is_causal", is_causal, "whether query i may only attend keys j <= i")
    seq_len, world_size = np.broadcast_arrays(seq_len, world_size)
    p = world_size.astype(float)
    valid = heads % world_size == 0
    kv_sent = np.where(kv_heads % world_size == 0, kv_heads, np.where(world_size % kv_heads == 0, world_size, heads))
    per_head = batch * (seq_len / p) * head_dim * size  # one head of one tensor, this rank's tokens
    shards = [(heads + 2 * kv_sent) * per_head, heads * per_head]  # q, k, v; then out

    def all_to_all(shard):
        sent = shard * (p - 1) / p
        in_node = nvlink.latency + sent / nvlink.bandwidth
        crossing = network.latency + np.maximum(shard * (gpus_per_node - 1) / p / nvlink.bandwidth,
                                                shard * (p - gpus_per_node) / p / network.bandwidth)  # fmt: skip
        seconds = np.where(world_size <= gpus_per_node, in_node, crossing)
        return np.where(world_size > 1, seconds, 0.0), sent

    (t_in, b_in), (t_out, b_out) = all_to_all(shards[0]), all_to_all(shards[1])
    compute = 4 * batch * (heads / p) * seq_len**2 * head_dim / flops * (0.5 if is_causal else 1.0)
    comm = t_in + t_out
    nan = np.full(seq_len.shape, np.nan)
    return {"comm": np.where(valid, comm, nan), "compute": np.where(valid, compute, nan),
            "ulysses": np.where(valid, comm + compute, nan), "bytes": np.where(valid, b_in + b_out, nan)}  # fmt: skip


def scaling_model(seq_len: int, world_sizes=(8, 16, 32, 64, 128, 256, 512, 1024), **config) -> dict:
    """Ring vs Ulysses vs compute alone, one layer's forward per rank, over ``world_sizes`` at a fixed sequence of N
    tokens: ``ring_model`` and ``ulysses_model`` with the same ``config`` (batch, heads, kv_heads, head_dim,
    bytes_per_number, is_causal, flops, nvlink, network, gpus_per_node; ``layout`` for the ring). A model, labelled
    as one wherever it is shown. -> dict of arrays over world_size: world_size, chunk, compute (the ring's busiest
    rank computing with free communication), ring, ring_comm_step, ring_compute_step, ring_hidden, ulysses,
    ulysses_comm (NaN where P does not divide the heads); and crossover, the P (a real number) beyond which the
    ring's transfers are no longer hidden: the ring hides them while c = N / P >= c* of its link
    (``ring_overlap_chunk``), NVLink up to gpus_per_node GPUs, InfiniBand beyond, so crossover = N / c*_NVLink if
    that is below gpus_per_node, else N / c*_InfiniBand if that is above it, else gpus_per_node (the transfers stop
    being hidden where the ring leaves the node)."""
    world_sizes = np.asarray(_counts("world_sizes", world_sizes, "GPU counts"))
    layout = config.pop("layout", "zigzag")
    ring = ring_model(seq_len, world_sizes, layout=layout, **config)
    ulysses = ulysses_model(seq_len, world_sizes, **config)
    keys = ("batch", "heads", "kv_heads", "head_dim", "bytes_per_number", "is_causal", "flops")
    chunk_config = {k: config[k] for k in keys if k in config}
    in_node = float(seq_len) / ring_overlap_chunk(layout=layout, link=config.get("nvlink", NVLINK4), **chunk_config)
    across = float(seq_len) / ring_overlap_chunk(layout=layout, link=config.get("network", INFINIBAND_NDR),
                                                 **chunk_config)  # fmt: skip
    node = config.get("gpus_per_node", GPUS_PER_NODE)
    crossover = in_node if in_node < node else across if across > node else float(node)
    return {"world_size": world_sizes, "chunk": ring["chunk"], "compute": ring["compute"], "ring": ring["ring"],
            "ring_comm_step": ring["comm_step"], "ring_compute_step": ring["compute_step"],
            "ring_hidden": ring["hidden"], "ulysses": ulysses["ulysses"], "ulysses_comm": ulysses["comm"],
            "crossover": crossover}  # fmt: skip


# ------------------------------------------------------------------------------------------------------------
# Memory per device, by formula
# ------------------------------------------------------------------------------------------------------------


def memory_per_device(model="Llama-3-8B (GQA-8)", seq_len: int = 2**20, world_sizes=(1, 2, 4, 8, 16, 32, 64), *,
                      bytes_per_number: int = 2, device_bytes: float = H100_MEMORY_BYTES) -> dict:  # fmt: skip
    """What a long context needs, by formula, whole and divided over P devices (sequence sharded: each holds N / P
    tokens). ``model``: a name of ``cache_sizes.MODEL_CONFIGS`` or a dict with num_layers, num_heads, num_kv_heads,
    head_dim. With L layers, H query heads, H_kv K/V heads of d numbers, s bytes per number, N tokens:

        kv_all_layers     2 L H_kv d s N        (``cache_sizes.kv_cache_bytes``: K and V of every layer)
        qkvo_one_layer    (2 H + 2 H_kv) d s N  (one layer's Q, K, V and attention output O)

    -> {"config", "seq_len", "device_bytes", "kv_all_layers", "qkvo_one_layer", "world_size" (array), and per P:
    "kv_per_device", "qkvo_per_device", "fits" (kv_per_device + qkvo_per_device <= device_bytes)}. Weights, the
    other activations and the optimizer are left out: a device needs more than this."""
    from .cache_sizes import MODEL_CONFIGS, kv_cache_bytes

    if isinstance(model, str):
        if model not in MODEL_CONFIGS:
            check_choice("model", model, tuple(MODEL_CONFIGS))
        config = MODEL_CONFIGS[model]
    elif isinstance(model, dict):
        config = model
        missing = [k for k in ("num_layers", "num_heads", "num_kv_heads", "head_dim") if k not in config]
        if missing:
            raise ValueError(f"model should have num_layers, num_heads, num_kv_heads and head_dim, got a dict "
                             f"without {', '.join(missing)}")  # fmt: skip
    else:
        raise TypeError(f"model should be a name of cache_sizes.MODEL_CONFIGS or a dict, got {describe(model)}")
    seq_len = check_positive_int("seq_len", seq_len, "tokens of context")
    world_sizes = _counts("world_sizes", world_sizes, "devices")
    device_bytes = check_number("device_bytes", device_bytes, "bytes of one device's memory", 0.0, strict=True)
    kv = kv_cache_bytes(config["num_layers"], config["num_kv_heads"], config["head_dim"], bytes_per_number, seq_len)
    qkvo = (2 * config["num_heads"] + 2 * config["num_kv_heads"]) * config["head_dim"] * bytes_per_number * seq_len
    p = np.asarray(world_sizes)
    return {"config": dict(config), "seq_len": seq_len, "device_bytes": device_bytes, "kv_all_layers": kv,
            "qkvo_one_layer": qkvo, "world_size": p, "kv_per_device": kv / p, "qkvo_per_device": qkvo / p,
            "fits": (kv + qkvo) / p <= device_bytes}  # fmt: skip


# ------------------------------------------------------------------------------------------------------------
# PyTorch's own context parallelism, tried on the CPU
# ------------------------------------------------------------------------------------------------------------


def torch_context_parallel_rank(rank: int, world_size: int, is_causal: bool = True) -> dict:
    """Run inside a rank (``run_ranks``): F.scaled_dot_product_attention under PyTorch's
    ``torch.distributed.tensor.experimental.context_parallel`` on a CPU DeviceMesh over all ranks, q, k, v of shape
    (1, 2, 8 P, 4) sharded along the sequence by it. -> {"ok": True, "shape": ...} if it ran, else {"ok": False,
    "error": the exception's type, "message": its first line}. Every failure is caught: the caller shows it."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8 * world_size, 4, generator=generator) for _ in range(3))
    try:
        mesh = init_device_mesh("cpu", (world_size,))
        with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        return {"ok": True, "shape": tuple(out.shape), "rank": rank}
    except Exception as error:  # noqa: BLE001 - what PyTorch raises is the result
        lines = str(error).strip().splitlines()
        return {"ok": False, "error": type(error).__name__, "message": lines[0] if lines else "", "rank": rank}


def try_torch_context_parallel(world_size: int = 2, *, is_causal: bool = True,
                               timeout: float = DEFAULT_TIMEOUT_S) -> list[dict]:  # fmt: skip
    """PyTorch's ``context_parallel`` tried on ``world_size`` gloo ranks on the CPU (``torch_context_parallel_rank``
    in each): what each rank got, in rank order. On torch 2.13's CPU build every rank gets NotImplementedError
    ("Operator aten._scaled_dot_product_flash_attention_for_cpu.default does not have a sharding strategy
    registered."): the CPU's SDPA kernel has no context-parallel rule; on CUDA it dispatches the flash, efficient or
    cuDNN kernel to a ring."""
    world_size = check_int("world_size", world_size, "how many processes to start", minimum=1)
    is_causal = check_bool("is_causal", is_causal, "whether query i may only attend keys j <= i")
    return run_ranks(torch_context_parallel_rank, world_size, is_causal, timeout=timeout)
