"""Attention across devices (lesson 12): the sequence split over P processes, each holding its shard of Q, K and V,
and attention computed exactly as if one process held it all.

Ring attention (Liu, Zaharia and Abbeel 2023). Rank r holds the queries Q_r and the keys and values K_r, V_r of its
shard. Every query needs every key, so the K/V blocks travel around a ring: at step t = 0 .. P-1 rank r holds the
block of rank (r - t) mod P, computes its queries against it while sending it on to rank r + 1 and receiving the
next from rank r - 1 (P - 1 transfers). Each step gives a partial attention over one block of keys, as a softmax
state (out_t, lse_t) with lse_t = log sum_{j in block t} exp(s_ij); lesson 08's merge combines them exactly:

    lse = log(exp(lse_a) + exp(lse_b)),    out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b

(``merge_softmax_states`` with m = lse, l = 1, o = out), so after P steps out = softmax(Q_r K^T / sqrt(d)) V over
all N keys and lse is each query's log-sum-exp over all of them.

The backward carries gradients home around the same ring: with the global out and lse (from the forward),
P_ij = exp(s_ij - lse_i) is rebuilt exactly for any block of keys (lesson 08's recomputation), so each step adds the
block's share to dQ_r (kept at home) and to dK, dV of the block it holds, which travel with the block; after P
steps and P transfers each dK_s, dV_s arrives back at rank s complete.

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

Bytes each rank sends per layer (``ring_bytes``, ``ulysses_bytes``; both functions also count what they send into a
``sent`` list): with S = batch * H * (N/P) * head_dim * bytes per number the size of one shard of Q (or K, V),

    ring      forward 2 (P - 1) S (K and V, P - 1 times);  backward 2 (P - 1) S + 2 P S (dK and dV travel home)
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


def _rank_main(payload: bytes, rank: int, world_size: int, port: int, results, timeout_s: float) -> None:
    """What each spawned process runs: load (fn, args) (pickled by value with cloudpickle in the parent), join the
    process group, call fn, report (rank, ok, pickled result or the traceback) on the queue, leave the group."""
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
    """(fn, args) pickled for the spawned processes with cloudpickle: a function defined in a notebook cell, a lambda
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


def run_ranks(fn, world_size: int, *args, timeout: float = DEFAULT_TIMEOUT_S) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` new processes, one ``torch.distributed`` rank each
    (gloo backend, 127.0.0.1 on a free port, one torch thread per process), and return their results in rank order.

    The processes are started with "spawn" (fresh interpreters): fn and args reach them pickled with cloudpickle, by
    value where they cannot be imported (a function defined in a notebook cell, a lambda, a closure, and such a
    function passed in args), by name otherwise; the results come back with pickle.

    If a rank raises, every process is ended and a ``RankError`` names the rank and shows its traceback; if a rank
    dies without a word, the error gives its exit code; if the ranks have not all finished ``timeout`` seconds after
    the call (starting them included), all are killed and the error names those that did not finish. No
    process started here outlives the call.
    """
    if not callable(fn):
        raise TypeError(f"fn should be a function fn(rank, world_size, *args), got {describe(fn)}")
    world_size = check_int("world_size", world_size, "how many processes to start", minimum=1)
    timeout = check_number("timeout", timeout, "seconds before the processes are killed", 0.0, strict=True)
    payload = _by_value(fn, args)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    interface = LOOPBACK_INTERFACE.get(sys.platform)
    saved = os.environ.get("GLOO_SOCKET_IFNAME")
    if interface and saved is None:
        os.environ["GLOO_SOCKET_IFNAME"] = interface  # inherited by the spawned processes
    processes = [context.Process(target=_rank_main, args=(payload, rank, world_size, port, results, timeout),
                                 name=f"attnedu-rank-{rank}", daemon=True) for rank in range(world_size)]  # fmt: skip
    try:
        for process in processes:
            process.start()
    finally:
        if interface and saved is None:
            del os.environ["GLOO_SOCKET_IFNAME"]
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
    own positions, is masked); it returns the state over the keys seen so far and these. Its tensors are in float32
    (float64 for float64 inputs), and so must its results be, of the state's shapes, without NaN (every pair gives
    each query at least one key). The state after the last pair is what this returns (lse as the step computed it).
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
                    kv = (block[0][..., ks, :].to(work), block[1][..., ks, :].to(work))
                    states[i] = _hook_step(step, states[i], query[..., qs, :].to(work), *kv, kind == "diagonal",
                                           (rank, t, a, b))  # fmt: skip
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
                             "the state after it is finite (the state over no keys has lse = -inf and out = 0: "
                             "exp(-inf) is 0, but -inf - (-inf) is NaN)")  # fmt: skip
    return result[0], result[1]


def ring_attention_backward(query, key, value, out, lse, grad_out, *, is_causal: bool = False,
                            layout: str = "contiguous", sent: list | None = None):  # fmt: skip
    """Ring attention's backward, called by every rank with its shard: ``(d_query, d_key, d_value)`` of its shard.

    out and lse are what ``ring_attention_forward`` returned on this rank (the global softmax state of its queries),
    grad_out has out's shape. Rank r keeps dQ_r at home; the K/V block of rank s travels the ring as in the forward,
    and with it the partial dK_s, dV_s. At each step, each computed (query chunk, key chunk) pair adds its share with
    ``tiled_attention_backward`` (P rebuilt from the global lse, D_i = rowsum(dO_i * O_i) from the global out):

        dV_s += P^T dO_r;   dS = P * (dO_r V_s^T - D);   dQ_r += dS K_s / sqrt(d);   dK_s += dS^T Q_r / sqrt(d)

    The next K/V block travels while the step computes; the block's dK, dV are sent on after it (they are not ready
    before), P transfers in all, so that the last one brings each dK_s, dV_s home to rank s. ``sent`` counts the
    bytes sent as in ``ring_attention_forward``.
    """
    is_causal, rank, world_size = _check_ring(query, key, value, is_causal, layout, (out, lse, grad_out))
    if out.shape != (*query.shape[:-1], value.shape[-1]) or grad_out.shape != out.shape:
        raise ValueError(f"out and grad_out should have shape {(*query.shape[:-1], value.shape[-1])} (the forward's "
                         f"output), got out {describe(out)} and grad_out {describe(grad_out)}")  # fmt: skip
    if lse.shape != query.shape[:-1]:
        raise ValueError(f"lse should have shape {tuple(query.shape[:-1])} (one per query, from the forward), "
                         f"got {describe(lse)}")  # fmt: skip
    q_chunks = _chunk_slices(query.shape[-2], rank, world_size, layout)
    d_query = torch.zeros_like(query)
    block = (key.contiguous(), value.contiguous())
    grads = (torch.zeros_like(block[0]), torch.zeros_like(block[1]))  # dK_s, dV_s of the block held, travelling
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
    return d_query, grads[0], grads[1]


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
    head_dim. A K (or V) block is B = batch * heads * (seq_len / P) * head_dim * bytes_per_number bytes.

        forward   (P - 1) transfers of K and V:                          2 (P - 1) B
        backward  (P - 1) transfers of K and V, then P of dK and dV:     2 (P - 1) B + 2 P B     (0 for P = 1)

    The same for both layouts, and for every rank; it does not shrink as P grows (about 2 N/P * P = 2 N tokens of
    K/V pass through each rank): only the time to compute each block, (N/P)^2, does."""
    batch, heads, seq_len, head_dim, world_size, size = _check_sizes(batch, heads, seq_len, head_dim, world_size,
                                                                     bytes_per_number)  # fmt: skip
    block = batch * heads * (seq_len // world_size) * head_dim * size
    forward = 2 * (world_size - 1) * block
    return {"forward": forward, "backward": forward + (2 * world_size * block if world_size > 1 else 0)}


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
