"""The delta rule (lesson 13): linear attention as a memory that can overwrite what it holds.

Causal linear attention (lesson 10, without its feature map and normaliser) keeps one matrix, the state
S (d_v x d_k), written by each key-value pair and read by each query:

    S_t = S_{t-1} + v_t k_t^T                                            (additive memory)
    o_t = S_t q_t

Reading with a stored key k_i gives o = sum_j v_j (k_j . k_i): v_i exactly when the keys are orthonormal, so at
most d_k pairs fit; past d_k (or with keys that are merely random) every other value leaks in, and a key written
twice returns the sum of both values: an additive memory cannot overwrite. The delta rule (Widrow-Hoff; Schlag et
al. 2021, "Linear Transformers Are Secretly Fast Weight Programmers"; Yang et al. 2024, DeltaNet) first reads what
the memory holds for k_t, then writes a fraction beta_t of the correction:

    S_t = S_{t-1} + beta_t (v_t - S_{t-1} k_t) k_t^T  =  S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T

With unit keys and beta_t = 1 the new pair replaces the old value of k_t (S_t k_t = v_t exactly); the update is
stable for beta_t ||k_t||^2 in [0, 2], which is why DeltaNet L2-normalises q and k (here ``normalize=True``) and
takes beta_t = sigmoid(...) in (0, 1). Gated DeltaNet (Yang et al. 2025, used in Qwen3-Next's linear layers)
adds a decay alpha_t in (0, 1] that fades the whole memory before the write:

    S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T

The loops above cost N sequential steps. The chunked form (Yang et al. 2024, Sec. 3: the WY representation,
computed with the UT transform) cuts the sequence into chunks of C tokens; inside a chunk, with
K, V, Q (C x d), D = diag(beta), G_i = prod_{s <= i} alpha_s (from the chunk's start), Gam_ij = G_i / G_j (i >= j)
and S the state at the chunk's start (fla's layout: H = S^T, d_k x d_v):

    T = (I + strict_lower(D K K^T * Gam))^{-1}         (a C x C lower-triangular solve, the UT transform)
    W = T D (G * K),  U = T D V                         (the WY factors: every write of the chunk at once)
    U' = U - W H                                        (the corrections v - S k, as matrices)
    O = (G * Q) H + lower(Q K^T * Gam) U'               (the state's part, and the chunk's own writes)
    H <- G_C H + ((G_C / G) * K)^T U'

so the work is matrix products of C x C and C x d blocks, N / C sequential steps instead of N. This follows
flash-linear-attention's reference code (fla-org/flash-linear-attention, fla/ops/delta_rule/naive.py:
``delta_rule_recurrence``, ``delta_rule_chunkwise``; fla/ops/gated_delta_rule/naive.py:
``naive_recurrent_gated_delta_rule``, ``naive_chunk_gated_delta_rule``, which pads N to a multiple of C as here),
with two differences: the state is stored as S = H^T (d_v x d_k, the papers' S_t) and the readout is o = S q,
without fla's q * d_k^-0.5 (pass a scaled q for that); T is computed by ``torch.linalg.solve_triangular``
instead of fla's row-by-row substitution (the same matrix). Checked once against those four functions (float32,
q scaled as fla does, keys already unit): equal to float32 rounding; fla is not a dependency, so the tests assert
the chunked form against the loop here and one step against numbers worked by hand.

Finally the recall task: store n key-value pairs, read each key back, and count the keys whose read-out is
nearest to the value last written with that key (``recall``; key by key ``recall_hits``; against n
``recall_curve``; by the age of the pair ``recall_by_age``), for three memories: softmax attention over the
stored pairs, the additive memory and the delta rule.

Each public function checks its arguments in one call (the checks are at the end of this module), then the math.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._validate import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_number,
    check_positive_int,
    check_positive_ints,
    check_same_dtype,
    check_tensor,
    describe,
)

MEMORIES = ("softmax", "additive", "delta")
"""The memories ``recall`` compares: softmax attention over every stored pair, the additive memory, the delta rule."""

TIE = 1e-6
"""A read-out nearer to the right value than to every other by no more than this (in squared distance) is a tie,
and a tie is a miss: the memory cannot say which of the two it holds."""


def additive_memory(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    normalize: bool = False,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal linear attention as a recurrent memory: S_t = S_{t-1} + v_t k_t^T, o_t = S_t q_t (a loop over t).

    With ``normalize`` the read-out is divided by q_t . z_t, z_t = sum_{j <= t} k_j (lesson 10's normaliser, for
    positive features): additive_memory(phi(q), phi(k), v, normalize=True) with phi = elu_feature_map is lesson
    10's linear_attention(q, k, v, causal=True).

    q, k (..., N, d_k), v (..., N, d_v), initial_state (..., d_v, d_k) or None (zeros; with ``normalize`` it
    must be None) -> (o (..., N, d_v), the final state S_N (..., d_v, d_k))."""
    _check_memory_inputs(q, k, v, None, None, initial_state)
    check_bool("normalize", normalize, "divide each read-out by q_t . sum_{j<=t} k_j, as lesson 10 does")
    if normalize and initial_state is not None:
        raise ValueError("initial_state should be None when normalize=True (the normaliser z starts at zero), got "
                         f"{describe(initial_state)}")  # fmt: skip
    state = _initial(k, v, initial_state)
    z = torch.zeros_like(k[..., 0, :])
    outputs = []
    for t in range(k.shape[-2]):
        state = state + v[..., t, :, None] * k[..., t, None, :]
        o = (state @ q[..., t, :, None])[..., 0]
        if normalize:
            z = z + k[..., t, :]
            o = o / (q[..., t, :] * z).sum(-1, keepdim=True)
        outputs.append(o)
    return torch.stack(outputs, dim=-2), state


def delta_step(state: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta, alpha=None) -> torch.Tensor:
    """One write of the (gated) delta rule: alpha S (I - beta k k^T) + beta v k^T = alpha S + beta (v - alpha S k) k^T.

    state (..., d_v, d_k), k (..., d_k), v (..., d_v), beta and alpha numbers or tensors of shape (...) (alpha
    None: no decay, the plain delta rule). The key is used as given (normalise it first for a stable update)."""
    beta, alpha = _check_delta_step(state, k, v, beta, alpha)
    return _step(state, k, v, beta, alpha)


def delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta,
    alpha=None,
    *,
    normalize: bool = True,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (gated) delta rule, recurrent: S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,
    o_t = S_t q_t, a loop over t of ``delta_step``. alpha None is DeltaNet, a tensor Gated DeltaNet.

    q, k (..., N, d_k), v (..., N, d_v); beta a number in [0, 2] or a tensor (..., N) of them; alpha None, a
    number in (0, 1] or a tensor (..., N); ``normalize`` L2-normalises q and k first (DeltaNet's and Gated
    DeltaNet's qk norm); initial_state (..., d_v, d_k) or None (zeros) -> (o (..., N, d_v), S_N (..., d_v, d_k))."""
    beta, alpha = _check_memory_inputs(q, k, v, beta, alpha, initial_state)
    check_bool("normalize", normalize, "L2-normalise q and k first, as DeltaNet does")
    if normalize:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    state = _initial(k, v, initial_state)
    outputs = []
    for t in range(k.shape[-2]):
        state = _step(state, k[..., t, :], v[..., t, :], beta[..., t], None if alpha is None else alpha[..., t])
        outputs.append((state @ q[..., t, :, None])[..., 0])
    return torch.stack(outputs, dim=-2), state


def delta_rule_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta,
    alpha=None,
    *,
    chunk_size: int = 16,
    normalize: bool = True,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same outputs and final state as ``delta_rule``, computed chunk by chunk (the WY representation and the
    UT transform: see the module docstring), N / chunk_size sequential steps of matrix products. A length that
    chunk_size does not divide is padded with writes that change nothing (k = 0, beta = 0, alpha = 1).

    Arguments as ``delta_rule``, plus chunk_size (tokens per chunk, >= 1)."""
    beta, alpha = _check_memory_inputs(q, k, v, beta, alpha, initial_state)
    chunk_size = check_positive_int("chunk_size", chunk_size, "tokens per chunk")
    check_bool("normalize", normalize, "L2-normalise q and k first, as DeltaNet does")
    if normalize:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    n = k.shape[-2]
    log_alpha = torch.zeros_like(beta) if alpha is None else torch.log(alpha)
    pad = -n % chunk_size
    if pad:  # writes with k = 0 and beta = 0 leave the state as it is; their outputs are cut off below
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        beta, log_alpha = F.pad(beta, (0, pad)), F.pad(log_alpha, (0, pad))
    chunks = (n + pad) // chunk_size

    def split(x):  # (..., N, d) -> (..., chunks, C, d)
        return x.reshape(*x.shape[:-2], chunks, chunk_size, x.shape[-1])

    q, k, v = split(q), split(k), split(v)
    beta, log_g = split(beta[..., None])[..., 0], split(log_alpha[..., None])[..., 0].cumsum(-1)  # log G_i
    gamma = torch.exp((log_g[..., :, None] - log_g[..., None, :]).tril()).tril()  # G_i / G_j for i >= j, else 0
    eye = torch.eye(chunk_size, dtype=k.dtype, device=k.device)
    a = (beta[..., :, None] * (k @ k.transpose(-1, -2)) * gamma).tril(-1)
    t = torch.linalg.solve_triangular(eye + a, eye.expand_as(a), upper=False)  # the UT transform
    g = torch.exp(log_g)[..., None]
    w = t @ (beta[..., None] * g * k)  # (..., chunks, C, d_k)
    u = t @ (beta[..., None] * v)  # (..., chunks, C, d_v)
    inside = (q @ k.transpose(-1, -2)) * gamma  # lower triangle with its diagonal: causal within the chunk
    h = _initial(k[..., 0, :, :], v[..., 0, :, :], initial_state).transpose(-1, -2)  # H = S^T (d_k x d_v)
    outputs = []
    for c in range(chunks):
        corrected = u[..., c, :, :] - w[..., c, :, :] @ h  # v - S k for every write of the chunk
        outputs.append((g[..., c, :, :] * q[..., c, :, :]) @ h + inside[..., c, :, :] @ corrected)
        g_last = g[..., c, -1:, :]  # G_C, (..., 1, 1)
        h = g_last * h + ((g_last / g[..., c, :, :]) * k[..., c, :, :]).transpose(-1, -2) @ corrected
    o = torch.cat(outputs, dim=-2)[..., :n, :]
    return o, h.transpose(-1, -2)


def recall(keys: torch.Tensor, values: torch.Tensor, memory: str, *, beta: float = 1.0) -> float:
    """Write the pairs (keys[i], values[i]) in order into ``memory``, read every distinct key back, and return the
    fraction of distinct keys whose read-out is nearest (Euclidean) to the value written LAST with that key, among
    all the values written (an overwritten value counts as a wrong answer); a tie within TIE is a miss.

    memory: "softmax" reads softmax(sqrt(d_k) q K^T) V over every stored pair (scaled dot-product attention on keys
    of norm sqrt(d_k), a standard normal vector's; it has no notion of order, so a rewritten key is a tie between its
    two values unless other keys tip it), "additive" reads S q with S = sum_i v_i k_i^T, "delta" the delta rule
    with this beta (constant, no decay, keys used as given).

    keys (n, d_k) (use unit keys: the additive memory and the delta rule read k . k), values (n, d_v) -> float.
    ``recall_hits`` gives the same answer key by key."""
    return float(recall_hits(keys, values, memory, beta=beta).double().mean())


def recall_hits(keys: torch.Tensor, values: torch.Tensor, memory: str, *, beta: float = 1.0) -> torch.Tensor:
    """``recall`` key by key: a bool tensor (distinct keys,), in the order of each key's first write, True where the
    read-out of that key is nearest to the value written last with it (arguments as ``recall``). Without rewritten
    keys, entry i is the pair written i-th, so hits can be sorted by the age of the pair."""
    _check_recall(keys, values, memory, beta)
    distinct, last = _last_writes(keys)
    if memory == "softmax":
        weights = torch.softmax(math.sqrt(keys.shape[-1]) * distinct @ keys.T, dim=-1)
        read = weights @ values
    elif memory == "additive":  # S = sum_i v_i k_i^T, all the writes at once
        read = distinct @ (values.T @ keys).T
    else:
        state = keys.new_zeros(values.shape[-1], keys.shape[-1])
        for key, value in zip(keys, values):
            state = _step(state, key, value, keys.new_tensor(beta), None)
        read = distinct @ state.T
    squared = torch.cdist(read, values) ** 2  # (distinct keys, writes)
    right = squared.gather(1, last[:, None])
    others = squared.scatter(1, last[:, None], math.inf)
    return others.min(dim=1).values - right[:, 0] > TIE


def recall_curve(
    n_pairs,
    d_k: int,
    *,
    d_v: int | None = None,
    memories=MEMORIES,
    rewrites: int = 0,
    orthonormal: bool = False,
    beta: float = 1.0,
    trials: int = 1,
    seed: int = 0,
) -> dict[str, list[float]]:
    """Recall as the number of stored pairs grows: for each n in ``n_pairs``, draw n keys (random unit vectors, or
    orthonormal ones if ``orthonormal``, which needs n <= d_k) and n + ``rewrites`` random unit values (d_v, default
    d_k), write the n pairs, then write the first ``rewrites`` keys again with new values, and measure ``recall``
    (the newest value must come back) for each memory, averaged over ``trials`` draws.

    Deterministic per seed (one torch.Generator, float64). Returns {memory: [recall for each n]}."""
    n_pairs, d_k, d_v, memories = _check_recall_curve(n_pairs, d_k, d_v, memories, rewrites, orthonormal, beta,
                                                      trials, seed)  # fmt: skip
    generator = torch.Generator().manual_seed(seed)
    result = {memory: [] for memory in memories}
    for n in n_pairs:
        totals = dict.fromkeys(memories, 0.0)
        for _ in range(trials):
            if orthonormal:  # the rows of a random orthogonal matrix
                keys = torch.linalg.qr(torch.randn(d_k, d_k, generator=generator, dtype=torch.float64))[0][:n]
            else:
                keys = F.normalize(torch.randn(n, d_k, generator=generator, dtype=torch.float64), dim=-1)
            keys = torch.cat([keys, keys[:rewrites]])
            values = F.normalize(torch.randn(n + rewrites, d_v, generator=generator, dtype=torch.float64), dim=-1)
            for memory in memories:
                totals[memory] += recall(keys, values, memory, beta=beta)
        for memory in memories:
            result[memory].append(totals[memory] / trials)
    return result


def recall_by_age(
    n_pairs: int,
    d_k: int,
    *,
    d_v: int | None = None,
    memories=MEMORIES,
    beta: float = 1.0,
    trials: int = 1,
    seed: int = 0,
) -> dict[str, list[float]]:
    """Recall by the age of the pair: write ``n_pairs`` pairs (random unit keys and values, drawn as
    ``recall_curve`` draws them, no rewrites), read every key back (``recall_hits``), and return, for each memory,
    the fraction of the ``trials`` draws in which the pair written i-th was recalled, for i = 0 .. n_pairs - 1
    (the last entry is the newest pair). Deterministic per seed: the same seed draws the same pairs whatever
    ``memories`` and ``beta`` are, so calls with different betas compare the same draws."""
    n_pairs = check_positive_int("n_pairs", n_pairs, "pairs to store")
    _, d_k, d_v, memories = _check_recall_curve([n_pairs], d_k, d_v, memories, 0, False, beta, trials, seed)
    generator = torch.Generator().manual_seed(seed)
    hits = {memory: torch.zeros(n_pairs, dtype=torch.float64) for memory in memories}
    for _ in range(trials):
        keys = F.normalize(torch.randn(n_pairs, d_k, generator=generator, dtype=torch.float64), dim=-1)
        values = F.normalize(torch.randn(n_pairs, d_v, generator=generator, dtype=torch.float64), dim=-1)
        for memory in memories:
            hits[memory] += recall_hits(keys, values, memory, beta=beta).double()
    return {memory: (hits[memory] / trials).tolist() for memory in memories}


# --------------------------------------------------------------------------------------------
# Helpers (no checks: the public functions above checked their arguments)
# --------------------------------------------------------------------------------------------


def _initial(k, v, initial_state):
    shape = (*k.shape[:-2], v.shape[-1], k.shape[-1])
    return k.new_zeros(shape) if initial_state is None else initial_state


def _step(state, k, v, beta, alpha):
    if alpha is not None:
        state = alpha[..., None, None] * state
    correction = v - (state @ k[..., :, None])[..., 0]  # v - S k: what the memory gets wrong for this key
    return state + beta[..., None, None] * correction[..., :, None] * k[..., None, :]


def _last_writes(keys):
    """The distinct keys (in order of first write) and, for each, the index of its last write."""
    _, key_of = torch.unique(keys, dim=0, return_inverse=True)  # write i used key number key_of[i]
    writes = torch.arange(keys.shape[0], device=keys.device)
    first = torch.full_like(writes, keys.shape[0])[: int(key_of.max()) + 1].scatter_reduce(0, key_of, writes, "amin")
    last = torch.full_like(first, -1).scatter_reduce(0, key_of, writes, "amax")
    order = first.argsort()  # the distinct keys in the order of their first write
    return keys[first[order]], last[order]


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _as_rate(name, value, like, shape, meaning, low, high, low_open):
    """A number or a tensor of ``shape`` in [low, high] ((low, high] if low_open), as a tensor like ``like``."""
    interval = f"{'(' if low_open else '['}{low}, {high}]"
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        check_float(name, value)
        if tuple(value.shape) != tuple(shape):
            raise ValueError(f"{name} ({meaning}) should be a number or a tensor of shape {tuple(shape)} (one per "
                             f"token), got {describe(value)}")  # fmt: skip
        bad = ~((value > low) if low_open else (value >= low)) | (value > high) | ~torch.isfinite(value)
        if bool(bad.any()):
            first = tuple(int(i) for i in torch.nonzero(bad)[0])
            raise ValueError(f"{name} ({meaning}) should hold numbers in {interval}, got {value[first].item()} at "
                             f"index {first}")  # fmt: skip
        return value.to(like.dtype)
    number = check_number(name, value, meaning)
    if (number <= low if low_open else number < low) or number > high:
        raise ValueError(f"{name} ({meaning}) should be a number in {interval}, got {number}")
    return like.new_full(tuple(shape), number)


def _check_memory_inputs(q, k, v, beta, alpha, initial_state):
    check_tensor("q", q, (2, 3, 4, 5), "(..., N, d_k)")
    check_tensor("k", k, (2, 3, 4, 5), "(..., N, d_k)")
    check_tensor("v", v, (2, 3, 4, 5), "(..., N, d_v)")
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_float(name, x)
    check_same_dtype(q=q, k=k, v=v)
    if q.shape != k.shape or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"q and k should have one shape (..., N, d_k) and v (..., N, d_v) the same leading dims, got "
                         f"q {describe(q)}, k {describe(k)}, v {describe(v)}")  # fmt: skip
    if initial_state is not None:
        shape = (*k.shape[:-2], v.shape[-1], k.shape[-1])
        check_tensor("initial_state", initial_state, k.dim(), "(..., d_v, d_k)")
        check_float("initial_state", initial_state)
        if tuple(initial_state.shape) != shape:
            raise ValueError(f"initial_state should be of shape {shape} (..., d_v, d_k), got {describe(initial_state)}")
        check_same_dtype(k=k, initial_state=initial_state)
    if beta is None:
        return None, None
    beta = _as_rate("beta", beta, k, k.shape[:-1], "the write strength", 0, 2, False)
    if alpha is not None:
        alpha = _as_rate("alpha", alpha, k, k.shape[:-1], "the decay per token", 0, 1, True)
    return beta, alpha


def _check_delta_step(state, k, v, beta, alpha):
    check_tensor("k", k, (1, 2, 3, 4), "(..., d_k)")
    check_tensor("v", v, (1, 2, 3, 4), "(..., d_v)")
    check_tensor("state", state, k.dim() + 1, "(..., d_v, d_k)")
    for name, x in (("state", state), ("k", k), ("v", v)):
        check_float(name, x)
    check_same_dtype(state=state, k=k, v=v)
    expected = (*k.shape[:-1], v.shape[-1], k.shape[-1])
    if k.shape[:-1] != v.shape[:-1] or tuple(state.shape) != expected:
        raise ValueError(f"state should be of shape {expected} (..., d_v, d_k) for k {describe(k)} and v "
                         f"{describe(v)}, got {describe(state)}")  # fmt: skip
    beta = _as_rate("beta", beta, k, k.shape[:-1], "the write strength", 0, 2, False)
    if alpha is not None:
        alpha = _as_rate("alpha", alpha, k, k.shape[:-1], "the decay", 0, 1, True)
    return beta, alpha


def _check_recall(keys, values, memory, beta):
    check_tensor("keys", keys, 2, "(n, d_k)")
    check_tensor("values", values, 2, "(n, d_v)")
    check_float("keys", keys)
    check_float("values", values)
    check_same_dtype(keys=keys, values=values)
    if keys.shape[0] != values.shape[0]:
        raise ValueError(f"values should hold one value per key ({keys.shape[0]} rows), got {describe(values)}")
    check_choice("memory", memory, MEMORIES)
    beta = check_number("beta", beta, "the write strength")
    if not 0 <= beta <= 2:
        raise ValueError(f"beta (the write strength) should be a number in [0, 2], got {beta}")


def _check_recall_curve(n_pairs, d_k, d_v, memories, rewrites, orthonormal, beta, trials, seed):
    n_pairs = check_positive_ints("n_pairs", n_pairs, "pairs to store")
    d_k = check_positive_int("d_k", d_k, "the key dimension")
    d_v = d_k if d_v is None else check_positive_int("d_v", d_v, "the value dimension")
    if isinstance(memories, str):
        raise TypeError(f"memories should be a list of names from {MEMORIES}, got {describe(memories)}; wrap one "
                        f"in a list: [{memories!r}]")  # fmt: skip
    memories = list(memories)
    for memory in memories:
        check_choice("memories", memory, MEMORIES)
    check_bool("orthonormal", orthonormal, "draw orthonormal keys instead of random unit keys")
    if orthonormal and max(n_pairs) > d_k:
        raise ValueError(f"n_pairs should be at most d_k = {d_k} with orthonormal keys (only d_k orthonormal "
                         f"vectors exist), got {max(n_pairs)}")  # fmt: skip
    check_int("rewrites", rewrites, "keys written a second time", minimum=0, maximum=min(n_pairs))
    check_number("beta", beta, "the write strength")
    if not 0 <= beta <= 2:
        raise ValueError(f"beta (the write strength) should be a number in [0, 2], got {beta}")
    trials = check_positive_int("trials", trials, "draws per n")
    check_int("seed", seed, "the random seed", minimum=0)
    return n_pairs, d_k, d_v, memories
