"""Sinks and gates (lesson 13, "Attention in 2025 models"): where a head puts the mass it does not need.

Vectors are rows; positions, heads and layers count from 0. Shapes: batch B, query heads H, key/value heads H_kv
(H_kv divides H), queries n, keys m, head_dim d.

Softmax must give each query row weights that sum to 1, so a head with nothing to read parks its mass somewhere,
most often on the first token (an "attention sink", Xiao et al. 2024). Two 2025 fixes:

**A learned sink logit per head** (gpt-oss; "softmax off by one", Miller 2023, is the sink fixed at 0). Each head h
has one number s_h that joins every row's softmax denominator as if it were one more key with no value:

    w_ij = exp(z_ij) / (exp(s_h) + sum_k exp(z_ik))          z = q k^T / sqrt(d) (+ bias), masked keys left out
    sink weight_i = exp(s_h) / (exp(s_h) + sum_k exp(z_ik)) = 1 - sum_j w_ij
    out_i = sum_j w_ij v_j                                    (the sink brings no value: its mass is simply dropped)

It equals the softmax over the scores with the column s_h appended, then that column removed: the form of gpt-oss's
reference ``sdpa(Q, K, V, S, sm_scale, sliding_window)`` (openai/gpt-oss, gpt_oss/torch/model.py: ``QK =
torch.cat([QK, S], dim=-1); W = torch.softmax(QK, dim=-1); W = W[..., :-1]``), whose attention block holds
``sinks``, one logit per query head. The sink's weight is a column of the softmax, not a token: ``softmax_with_sink``
returns the weights of the real keys only, and ``sink_weight`` the rest. A row whose keys are all masked gives its
whole mass to the sink (zero weights, zero output), never NaN.

**An output gate** (Qiu et al. 2025, "Gated Attention for Large Language Models", position G1: after SDPA, before
the output projection). The gate is a sigmoid of the layer's input x (the hidden state the queries come from)
projected by its own W_g, and multiplies each head's output, elementwise (one gate per feature: W_g is
(d_model, H d)) or headwise (one gate per head and query: W_g is (d_model, H)):

    head_i  = Attention(x W_q^i, x W_k^i, x W_v^i)            (B, H, n, d)
    g       = sigmoid(x W_g + b_g)                            (B, n, H, d) elementwise or (B, n, H, 1) headwise
    output  = Concat(g_0 * head_0, ..., g_{H-1} * head_{H-1}) W_o

as qiuzh20/gated_attention's ``Qwen3Attention.forward`` (modeling_qwen3.py) does: its ``q_proj`` emits the gate
scores next to the queries (``headwise_attn_output_gate``: H more outputs; ``elementwise_attn_output_gate``: H d more)
and ``attn_output * torch.sigmoid(gate_score)`` comes before ``o_proj``. The gate can close a head (g near 0) for one
query without moving the softmax's mass anywhere: the head need not park it on a sink.

    softmax_with_sink(scores, sink, mask)          the weights of the real keys, (..., H, n, m)
    sink_weight(scores, sink, mask)                what the sink takes from each row, (..., H, n)
    softmax_off_by_one(scores, mask)               the sink fixed at 0 for every head
    sink_attention(q, k, v, sink, mask, ...)       attention with a sink logit per head, causal / sliding window
    output_gate(heads, gate_scores)                heads * sigmoid(gate_scores) (elementwise or headwise)
    SinkGateAttention(d_model, H, sink=, gate=)    the course's MultiHeadAttention with a sink logit and/or a gate;
                                                   ``extra_parameters`` counts what each adds (to arrange equal
                                                   parameters for a side-by-side comparison)
    add_sinks_gates(model, sink=, gate=)           a DecoderLM's attentions swapped for SinkGateAttention, same weights

Measurements (on tensors, so they work for any model's attention maps and hidden states; ``residual_stream(model,
tokens)`` reads both from a DecoderLM):

    first_token_mass(maps)       the mean weight each head puts on key 0 (the first token), per layer and head
    largest_activations(hidden)  per layer: the largest |h| in the residual stream, where it sits, and the median |h|
                                 (Sun et al. 2024, "Massive Activations in Large Language Models", Sec. 2: an
                                 activation is massive if its magnitude exceeds 100 and is about 1,000 times the
                                 median magnitude of its hidden state; ``is_massive`` applies those two thresholds)

A controlled setting (the lesson's experiment: a head that has nothing to read for some queries, and a fixed first
token it could park on). ``marker_task`` draws sequences of ``vocab`` ordinary tokens after a BOS token; half of them
hold one *marked* token (id ``vocab + x`` for the ordinary token x) at a random position p. At every position t the
target is x once the marker has been seen (t >= p), else the current token itself (a label per position, not the next
token). The queries before the marker, or of a sequence without one, are *idle*: their answer is already in the
residual stream (the token's own embedding), so a head has nothing to copy there; the one thing attention must still
tell an idle query is that no marker came before it (the tokens after a marker are ordinary tokens), which a head
with a sink or a gate can say with an empty output and a plain softmax head only with some value. A constant target
(a token "none" at every idle query) would not do: BOS could carry that whole answer in its value, and a head parking
on it would be reading the answer itself. ``marker_reading`` tests this: it zeroes BOS's value vector in the
last layer and measures the accuracy at the idle and at the busy queries again.

    marker_task(batch, length, vocab, generator)   tokens (BOS = 2 vocab), targets, seen
    marker_model(variant, seed, **recipe)          a DecoderLM, "plain", "sink" or "gate" (headwise) -- the lesson's
                                                   ``VARIANTS`` -- or "off_by_one" (a sink fixed at 0) or
                                                   "gate_elementwise" (``MORE_VARIANTS``, trained by the
                                                   calibration), at equal parameters (the SwiGLU width reduced by
                                                   what the sink or the gate adds)
    train_marker(variant, seed, **recipe)          the model trained on marker_task with the recipe ``MARKER``
    marker_reading(model, batch)                   per layer and head: the weight on the marker when present, and
                                                   where the mass goes when there is nothing to read (the first
                                                   token, the sink), the gates, the sink logits; the reader head;
                                                   the loss; the accuracy at the idle and busy queries, intact and
                                                   with BOS's value zeroed in the last layer

Each public function checks its arguments in one call (the checks are at the end of this module), then computes;
``_softmax_with_sink`` and ``_sink_attention`` are the unchecked versions the module uses.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from ._validate import (
    check_bool,
    check_bool_mask,
    check_choice,
    check_finite,
    check_float,
    check_instance,
    check_int,
    check_min_dims,
    check_number,
    check_positive_int,
    check_same_dtype,
    check_size,
    check_tensor,
    describe,
)
from .blocks import DecoderLM
from .masks import _sliding_window_mask
from .multihead import MultiHeadAttention
from .runtime import seeded

GATES = ("elementwise", "headwise")
VARIANTS = ("plain", "sink", "gate")  # the lesson's models: no fix, a sink logit per head, a headwise output gate
# two more the calibration trains: the sink fixed at 0 (Miller's off by one), an elementwise gate (Qwen3-Next's)
MORE_VARIANTS = ("off_by_one", "gate_elementwise")
# the lesson's controlled setting (marker_task, train_marker): its sizes and its training
MARKER = {"vocab": 16, "length": 32, "present": 0.5, "d_model": 32, "num_heads": 4, "num_layers": 2, "steps": 200,
          "batch": 32, "lr": 6e-3}  # fmt: skip


# --------------------------------------------------------------------------------------------
# Softmax with a sink logit per head
# --------------------------------------------------------------------------------------------


def softmax_with_sink(scores: torch.Tensor, sink: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """w_ij = exp(z_ij) / (exp(s_h) + sum_k exp(z_ik)): the softmax of each row with head h's sink logit s_h in the
    denominator, the sink's own weight left out (rows sum to 1 - sink weight).

    scores (..., H, n, m) floats; sink (H,) one logit per head (dim -3 of the scores); mask None or bool
    broadcastable to the scores, True = may attend. -> weights (..., H, n, m). A fully masked row gives zeros.
    """
    mask = _check_softmax_with_sink(scores, sink, mask)
    return _softmax_with_sink(scores, sink, mask)


def _softmax_with_sink(scores, sink, mask=None):
    """The denominator form (the tests compare it with gpt-oss's append-a-column form): shift every row by
    c = max(s_h, max_j z_ij) so that no exponential overflows, then divide by exp(s_h - c) + sum_j exp(z_ij - c)."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    sink = sink.to(scores.dtype)[:, None, None].expand(scores.shape[:-1] + (1,))  # (..., H, n, 1)
    shift = torch.maximum(scores.amax(dim=-1, keepdim=True), sink).detach()  # finite, as the sink is
    exps = torch.exp(scores - shift)  # masked keys: exp(-inf) = 0
    return exps / (exps.sum(dim=-1, keepdim=True) + torch.exp(sink - shift))


def sink_weight(scores: torch.Tensor, sink: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """exp(s_h) / (exp(s_h) + sum_k exp(z_ik)): the mass the sink takes from each row, 1 - the row's weights.

    scores (..., H, n, m), sink (H,), mask as ``softmax_with_sink`` -> (..., H, n)."""
    mask = _check_softmax_with_sink(scores, sink, mask)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    rows = torch.logsumexp(scores, dim=-1)  # log sum_k exp(z_ik); -inf for a fully masked row
    return torch.sigmoid(sink.to(scores.dtype)[:, None] - rows)  # e^s / (e^s + e^r) = sigmoid(s - r)


def softmax_off_by_one(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """exp(z_ij) / (1 + sum_k exp(z_ik)) (Miller 2023, "Attention is off by one"): the sink logit fixed at 0.

    scores (..., n, m); mask None or bool broadcastable to the scores -> weights (..., n, m)."""
    check_min_dims("scores", scores, 1, "(..., m)")
    check_float("scores", scores)
    mask = _check_mask(mask, scores.shape)
    flat = scores.reshape(-1, 1, 1, scores.shape[-1])  # every row a "head" with sink 0
    flat_mask = None if mask is None else mask.expand(scores.shape).reshape(flat.shape)
    return _softmax_with_sink(flat, flat.new_zeros(1), flat_mask).reshape(scores.shape)


# --------------------------------------------------------------------------------------------
# Attention with a sink logit per head (gpt-oss)
# --------------------------------------------------------------------------------------------


def sink_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    sink: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    window: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax_with_sink(q k^T / sqrt(d), sink, mask) v, for every head: gpt-oss's attention.

    q (B, H, n, d); k, v (B, H_kv, m, d), H_kv dividing H: query head h reads key/value head h // (H / H_kv), as
    gpt-oss groups its query heads (``Q.view(n, H_kv, H / H_kv, d)``); sink (H,) one logit per query head.
    mask None or bool broadcastable to (B, H, n, m), True = may attend; ``is_causal``: query i reads keys j <= i;
    ``window`` (self-attention, n = m): query i reads keys i - window <= j <= i only (the course's
    ``attnedu.masks.sliding_window_mask(n, window, causal=True)``: window + 1 keys; gpt-oss's ``sliding_window=W``
    is window = W - 1). -> output (B, H, n, d), weights (B, H, n, m) of the real keys (rows sum to 1 - sink weight).
    """
    window = _check_sink_attention(q, k, v, sink, mask, is_causal, window)
    n, m = q.shape[-2], k.shape[-2]
    if is_causal or window is not None:
        allowed = torch.ones(n, m, dtype=torch.bool, device=q.device).tril()  # top-left aligned, as torch's
        if window is not None:
            allowed = _sliding_window_mask(n, window, True).to(q.device)
        mask = allowed if mask is None else mask & allowed
    return _sink_attention(q, k, v, sink, mask)


def _sink_attention(q, k, v, sink, mask=None, bias=None):
    group = q.shape[1] // k.shape[1]  # query heads per key/value head
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, n, m)
    if bias is not None:
        scores = scores + bias
    weights = _softmax_with_sink(scores, sink, None if mask is None else mask.expand_as(scores))
    return weights @ v, weights


# --------------------------------------------------------------------------------------------
# The output gate (Qiu et al. 2025, G1)
# --------------------------------------------------------------------------------------------


def output_gate(heads: torch.Tensor, gate_scores: torch.Tensor) -> torch.Tensor:
    """heads * sigmoid(gate_scores): each head's output scaled, before the output projection (Qiu et al.'s G1).

    heads (B, H, n, d), the heads' outputs of SDPA; gate_scores (B, H, n, d) elementwise (one gate per feature) or
    (B, H, n, 1) headwise (one per head and query), the gate's logits x W_g + b_g. -> (B, H, n, d)."""
    _check_output_gate(heads, gate_scores)
    return heads * torch.sigmoid(gate_scores)


class SinkGateAttention(MultiHeadAttention):
    """The course's MultiHeadAttention with a learned sink logit per head and/or an output gate.

    sink=True: a parameter ``sink_logits`` (num_heads,), started at 0 (softmax off by one), joins each row's softmax
    denominator (``softmax_with_sink``); gate="elementwise" or "headwise": ``W_g`` (a Linear d_model -> num_heads *
    head_dim, or d_model -> num_heads, with a bias if ``bias``) and output = Concat(sigmoid(query W_g) * heads) W_o
    (``output_gate``; the gate reads the same input as the queries, as Qiu et al.'s q_proj does). sink=False,
    gate=None is MultiHeadAttention itself. forward is MultiHeadAttention's (mask, bias, RoPE, head_gate); the
    weights it returns are the real keys' (rows sum to 1 - sink weight). A KV cache is refused with a sink (the
    caches attend with the plain softmax).

    ``extra_parameters(d_model, num_heads, sink, gate, bias)`` counts what the sink and the gate add to
    MultiHeadAttention's 4 d_model^2 (+ 4 d_model biases): num_heads for the sink; d_model num_heads (+ num_heads)
    headwise; d_model^2 (+ d_model) elementwise.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True, num_kv_heads: int | None = None, *,
                 sink: bool = False, gate: str | None = None):  # fmt: skip
        super().__init__(d_model, num_heads, bias, num_kv_heads)
        check_bool("sink", sink, "whether each head has a learned sink logit")
        if gate is not None:
            check_choice("gate", gate, (*GATES, None))
        self.sink, self.gate = sink, gate
        self.sink_logits = nn.Parameter(torch.zeros(num_heads)) if sink else None
        self.W_g = None
        if gate is not None:
            width = num_heads * self.head_dim if gate == "elementwise" else num_heads
            self.W_g = nn.Linear(d_model, width, bias=bias)

    @staticmethod
    def extra_parameters(d_model: int, num_heads: int, sink: bool = False, gate: str | None = None,
                         bias: bool = True) -> int:  # fmt: skip
        """How many parameters the sink and the gate add to a MultiHeadAttention(d_model, num_heads, bias)."""
        d_model = check_positive_int("d_model", d_model, "the model width")
        num_heads = check_positive_int("num_heads", num_heads, "the number of heads")
        check_bool("sink", sink, "whether each head has a learned sink logit")
        check_bool("bias", bias, "whether the projections have biases")
        if gate is not None:
            check_choice("gate", gate, (*GATES, None))
        width = {None: 0, "headwise": num_heads, "elementwise": d_model}[gate]
        return (num_heads if sink else 0) + width * (d_model + (1 if bias else 0))

    def _attention(self, q, k, v, mask=None, bias=None):
        if self.sink_logits is None:
            return super()._attention(q, k, v, mask, bias)
        return _sink_attention(q, k, v, self.sink_logits, mask, bias)

    def _attend(self, query, key, value, mask=None, bias=None, rope_positions=None, rope_layout="halves",
                rope_base=10000.0, head_gate=None, cache=None, layer=0):  # fmt: skip
        if cache is not None and self.sink_logits is not None:
            raise ValueError(
                f"cache should be None for an attention with a sink logit, got {describe(cache)}: the KV caches "
                "attend with the plain softmax and would drop the sink; run the model without a cache"
            )
        heads, weights = self._heads(query, key, value, mask, bias, rope_positions, rope_layout, rope_base, cache,
                                     layer)  # fmt: skip
        if self.W_g is not None:
            batch, n, _ = query.shape
            scores = self.W_g(query).view(batch, n, self.num_heads, -1).transpose(1, 2)  # (B, H, n, d or 1)
            heads = heads * torch.sigmoid(scores)
        return self._merge(heads, head_gate), weights


def add_sinks_gates(model: DecoderLM, sink: bool = False, gate: str | None = None, seed: int = 0) -> DecoderLM:
    """Replace, in place, each block's attention of a ``DecoderLM`` (lessons 09-10) by a ``SinkGateAttention`` with
    the same weights, plus a sink logit per head (started at 0) and/or a gate (``W_g`` drawn under ``seed``, as
    nn.Linear draws it): models built with one seed then differ only by what was added. -> the model."""
    check_instance("model", model, DecoderLM, "an attnedu.blocks.DecoderLM")
    check_bool("sink", sink, "whether each head has a learned sink logit")
    if gate is not None:
        check_choice("gate", gate, (*GATES, None))
    check_int("seed", seed, "the seed of the gate's weights")
    for block in model.blocks:
        old = block.attention
        if type(old) is not MultiHeadAttention:
            raise ValueError(f"model should have plain MultiHeadAttention blocks, got {describe(old)} in a block; "
                             "add sinks and gates to a model once, right after building it")  # fmt: skip
        with seeded(seed):
            new = SinkGateAttention(old.d_model, old.num_heads, old.W_q.bias is not None, old.num_kv_heads,
                                    sink=sink, gate=gate)  # fmt: skip
        new.load_state_dict(old.state_dict(), strict=False)  # W_q, W_k, W_v, W_o; the sink and W_g stay new
        block.attention = new.to(old.W_q.weight)
    return model


@torch.no_grad()
def residual_stream(model: DecoderLM, tokens: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The residual stream of a ``DecoderLM`` layer by layer, for ``largest_activations``: the embeddings, then each
    block's output (before the final norm; Sun et al. measure the blocks' outputs, hidden[1:]), and each block's
    attention weights, for ``first_token_mass``.

    tokens (B, n) ids -> hidden states (layers + 1 tensors (B, n, d_model)), weights (layers tensors (B, H, n, n))."""
    check_instance("model", model, DecoderLM, "an attnedu.blocks.DecoderLM")
    model._check_tokens("tokens", tokens, 2, "(batch, seq_len) of token ids")
    positions = torch.arange(tokens.shape[1], device=tokens.device)
    hidden, weights = [model.embedding(tokens)], []
    for block in model.blocks:  # DecoderLM._forward's loop, keeping each block's output
        x, w = block._forward(hidden[-1], positions)
        hidden.append(x)
        weights.append(w)
    return hidden, weights


# --------------------------------------------------------------------------------------------
# Measurements: the first token's attention mass, the largest activation
# --------------------------------------------------------------------------------------------


def first_token_mass(maps, first_query: int = 1) -> torch.Tensor:
    """The mean attention weight on key 0 (the first token), per layer and head.

    maps: a list of per-layer attention weights, each (B, H, n, m), or one such tensor (one layer); first_query:
    average over queries first_query .. n-1 and the batch (default 1: under a causal mask query 0 can only read
    key 0, a weight of 1 that says nothing about a sink; pass 0 for a bidirectional encoder such as MiniLM).
    -> (layers, H), or (H,) for one tensor. With a sink logit the rows sum to less than 1: this is the mass the
    first token gets, not a share of the row.
    """
    single, maps, first_query = _check_first_token_mass(maps, first_query)
    mass = torch.stack([w[..., first_query:, 0].mean(dim=(0, 2)) for w in maps])
    return mass[0] if single else mass


class ActivationStats(NamedTuple):
    """Per layer (L layers): ``top`` (L, k) the k largest |h|; ``median`` (L,) the median |h|; ``ratio`` (L,)
    top / median; ``where`` (L, 3) the (batch, token, feature) index of the largest."""

    top: torch.Tensor
    median: torch.Tensor
    ratio: torch.Tensor
    where: torch.Tensor


def largest_activations(hidden_states, k: int = 3) -> ActivationStats:
    """The largest magnitudes |h| in the residual stream, layer by layer (Sun et al. 2024's figures: the top 3 and
    the median of each layer's hidden states).

    hidden_states: a list of per-layer residual streams, each (B, n, d_model) (e.g. the embeddings, then each
    block's output), or one (L, B, n, d_model) tensor; k: how many of the largest to keep. The top values and the
    median are over all the layer's activations (every batch row, token and feature), as Sun et al.'s code does
    for one sequence (locuslab/massive-activations, gpt-2/analyze.py: each block's output x after both residual
    adds, ``torch.sort(feat_abs.flatten())`` and ``torch.median(feat_abs)``; it then averages these over 3
    sequences, so pass B = 1 and average to reproduce that exactly). -> ActivationStats.
    """
    stacked, k = _check_largest_activations(hidden_states, k)
    flat = stacked.detach().abs().flatten(1)  # (L, B n d)
    top, index = flat.topk(k, dim=1)
    median = flat.median(dim=1).values
    where = torch.stack(torch.unravel_index(index[:, 0], stacked.shape[1:]), dim=1)
    return ActivationStats(top, median, top[:, 0] / median, where)


def is_massive(stats: ActivationStats, magnitude: float = 100.0, ratio: float = 1000.0) -> torch.Tensor:
    """Sun et al. 2024, Sec. 2: the largest activation is massive if it exceeds ``magnitude`` and is at least
    ``ratio`` times the median magnitude. stats: from ``largest_activations`` -> bool (L,), one per layer."""
    check_instance("stats", stats, ActivationStats, "what largest_activations returned (an ActivationStats)")
    magnitude = check_number("magnitude", magnitude, "the absolute threshold", 0.0)
    ratio = check_number("ratio", ratio, "times the median magnitude", 0.0)
    return (stats.top[:, 0] > magnitude) & (stats.ratio >= ratio)


# --------------------------------------------------------------------------------------------
# A controlled setting: a head with nothing to read for some queries (the lesson's experiment)
# --------------------------------------------------------------------------------------------


class MarkerBatch(NamedTuple):
    """``marker_task``'s sequences: ``tokens`` (B, n) ids, BOS = 2 vocab at position 0; ``targets`` (B, n) the marked
    token's value x where it has been seen, else the token at that position; ``seen`` (B, n) bool, True where it has
    been seen (those queries have something to read); ``position`` (B,) where the marker is, -1 in a sequence
    without."""

    tokens: torch.Tensor
    targets: torch.Tensor
    seen: torch.Tensor
    position: torch.Tensor


def marker_task(batch: int, length: int, vocab: int, generator: torch.Generator, present: float = 0.5) -> MarkerBatch:
    """``batch`` sequences of ``length`` tokens: BOS (id 2 vocab), then ordinary tokens drawn uniformly from 0..vocab-1;
    with probability ``present`` one of them, at a position p drawn from 1..length-1, is marked (its id x becomes
    vocab + x). Target at position t: x if the sequence has a marker and t >= p, else the token at t itself (the idle
    queries need nothing copied, only the fact that no marker came); a model needs a vocabulary of 2 vocab + 1.
    -> MarkerBatch(tokens, targets, seen, position)."""
    for name, value, meaning in (("batch", batch, "sequences"), ("vocab", vocab, "ordinary tokens")):
        check_positive_int(name, value, meaning)
    length = check_int("length", length, "tokens per sequence, BOS included", 2)
    present = check_number("present", present, "the share of sequences with a marker", 0.0)
    if present > 1:
        raise ValueError(f"present should be a probability in [0, 1], got {present}")
    check_instance("generator", generator, torch.Generator, "a torch.Generator",
                   "pass torch.Generator().manual_seed(seed), not the seed itself")  # fmt: skip
    tokens = torch.randint(0, vocab, (batch, length), generator=generator)
    tokens[:, 0] = 2 * vocab  # BOS
    has = torch.rand(batch, generator=generator) < present
    position = torch.randint(1, length, (batch,), generator=generator)
    rows = torch.arange(batch)
    value = tokens[rows, position]
    tokens[rows[has], position[has]] += vocab
    seen = has[:, None] & (torch.arange(length)[None, :] >= position[:, None])
    targets = torch.where(seen, value[:, None].expand(-1, length), tokens)
    return MarkerBatch(tokens, targets, seen, torch.where(has, position, -1))


def _recipe(recipe: dict) -> dict:
    unknown = sorted(set(recipe) - set(MARKER))
    if unknown:
        raise TypeError(f"recipe should hold keys of MARKER {sorted(MARKER)}, got {unknown}")
    return {**MARKER, **recipe}


def marker_model(variant: str, seed: int = 0, **recipe) -> DecoderLM:
    """The DecoderLM of the controlled setting (``MARKER``'s sizes, any key overridable): "plain"; "sink" (a sink
    logit per head, ``add_sinks_gates(sink=True)``); "gate" (a headwise output gate, ``gate="headwise"``);
    "off_by_one" (the sink logits fixed at 0: not trained); "gate_elementwise" (``gate="elementwise"``). Equal
    parameters: the SwiGLU width d_ff is reduced by round(extra / (3 d_model)) units, where extra is what the sink or
    the gate adds to each block (``SinkGateAttention.extra_parameters``; one unit of d_ff is 3 d_model weights), so
    the counts differ by less than 3 d_model / 2 per block. Built under ``seed`` (the plain weights are the same
    draws in all three where the widths agree)."""
    check_choice("variant", variant, VARIANTS + MORE_VARIANTS)
    check_int("seed", seed, "the seed of the initialisation")
    r = _recipe(recipe)
    from .block_parts import swiglu_hidden

    sink = variant in ("sink", "off_by_one")
    gate = {"gate": "headwise", "gate_elementwise": "elementwise"}.get(variant)
    extra = SinkGateAttention.extra_parameters(r["d_model"], r["num_heads"], variant == "sink", gate, bias=False)
    d_ff = swiglu_hidden(r["d_model"]) - round(extra / (3 * r["d_model"]))
    model = DecoderLM(2 * r["vocab"] + 1, r["d_model"], r["num_heads"], r["num_layers"], d_ff, seed=seed)
    if variant != "plain":
        add_sinks_gates(model, sink=sink, gate=gate, seed=seed)
    if variant == "off_by_one":
        for block in model.blocks:
            block.attention.sink_logits.requires_grad_(False)  # s_h = 0 for good: Miller's softmax off by one
    return model


def train_marker(variant: str, seed: int = 0, desc: str = "training", **recipe):
    """``marker_model(variant, seed)`` trained on ``marker_task`` batches with ``MARKER``'s recipe (any key
    overridable): AdamW (betas 0.9, 0.95), gradients clipped to norm 1, a constant learning rate, the cross-entropy
    of every position's target. ``seed`` fixes the initialisation and the batches (through
    ``runtime.training_seed``); nothing is drawn from the global generators, so several models can train at once
    (``runtime.in_parallel``). -> (model, TrainLog)."""
    from .runtime import training_seed
    from .train import _fit

    check_choice("variant", variant, VARIANTS + MORE_VARIANTS)
    check_int("seed", seed, "the seed of the initialisation and the batches")
    r = _recipe(recipe)
    model = marker_model(variant, seed, **recipe)
    generator = torch.Generator().manual_seed(training_seed(seed))
    trained = [p for p in model.parameters() if p.requires_grad]  # all but off_by_one's fixed sinks
    optimizer = torch.optim.AdamW(trained, lr=r["lr"], betas=(0.9, 0.95))

    def batch_loss() -> torch.Tensor:
        batch = marker_task(r["batch"], r["length"], r["vocab"], generator, r["present"])
        return nn.functional.cross_entropy(model(batch.tokens).flatten(0, 1), batch.targets.flatten())

    log = _fit(model, batch_loss, optimizer, None, r["steps"], 1.0, desc, show_every=25)
    return model, log


class MarkerReading(NamedTuple):
    """What ``marker_reading`` measured, per layer and head (L, H) unless said: ``on_marker`` the mean weight on the
    marked token at the queries that have seen it; ``idle_first`` the mean weight on the first token (BOS) at the
    queries with nothing to read (before the marker or without one; query 0 left out); ``idle_sink`` the mass the
    sink logit takes there (0 without a sink); ``gate_idle``, ``gate_busy`` the mean gate sigmoid(x W_g) at the idle
    and at the busy queries (nan without a gate); ``sink_logits`` the heads' sink logits s_h (nan without a sink);
    ``reader`` (layer, head) the head with the largest ``on_marker``; ``loss`` the mean cross-entropy over every
    position; ``accuracy`` a dict of the share of right answers (argmax) at the ``"idle"`` queries (query 0 left
    out) and at the ``"busy"`` ones (the marker seen), intact, and ``"idle, BOS value zeroed"``, ``"busy, BOS value
    zeroed"``: the same with the value vector of position 0 set to 0 in every head of the last layer's attention
    (if the rest of the model ignored what the heads parked on BOS write at the idle queries, the idle accuracy
    would not move)."""

    on_marker: torch.Tensor
    idle_first: torch.Tensor
    idle_sink: torch.Tensor
    gate_idle: torch.Tensor
    gate_busy: torch.Tensor
    sink_logits: torch.Tensor
    reader: tuple[int, int]
    loss: float
    accuracy: dict


@torch.no_grad()
def marker_reading(model: DecoderLM, batch: MarkerBatch) -> MarkerReading:
    """Where each head of ``model`` (a DecoderLM trained on ``marker_task``) puts its attention on ``batch``: on the
    marker when there is one to read, on the first token or the sink when there is nothing. -> MarkerReading."""
    from .block_parts import _rms_norm

    check_instance("model", model, DecoderLM, "an attnedu.blocks.DecoderLM (train_marker's model)")
    check_instance("batch", batch, MarkerBatch, "what marker_task returned (a MarkerBatch)")
    tokens, targets, seen, position = batch
    logits = model(tokens)
    if logits.shape[-1] <= int(targets.max()):
        raise ValueError(f"model should have a vocabulary of at least {int(targets.max()) + 1} (2 vocab + 2), got "
                         f"{logits.shape[-1]}")  # fmt: skip
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()
    hidden, maps = residual_stream(model, tokens)
    idle = ~seen
    idle[:, 0] = False  # query 0 can only read the first token
    marked = (torch.arange(tokens.shape[1])[None, :] == position[:, None]).to(maps[0].dtype)  # (B, m)

    def mean_over(values, where):  # values (B, H, n) -> (H,), the mean over the queries where `where` (B, n)
        where = where[:, None].to(values.dtype)
        return (values * where).sum(dim=(0, 2)) / where.sum(dim=(0, 2)).clamp(min=1)

    on_marker = torch.stack([mean_over((w * marked[:, None, None, :]).sum(-1), seen) for w in maps])
    idle_first = torch.stack([mean_over(w[..., 0], idle) for w in maps])
    idle_sink = torch.stack([mean_over(1 - w.sum(-1), idle) for w in maps])
    gate_idle, gate_busy = torch.full_like(on_marker, float("nan")), torch.full_like(on_marker, float("nan"))
    for layer, (block, x) in enumerate(zip(model.blocks, hidden, strict=False)):
        W_g = getattr(block.attention, "W_g", None)
        if W_g is not None:
            normed = _rms_norm(x, block.attention_norm.weight, block.attention_norm.eps)
            gates = torch.sigmoid(W_g(normed)).view(*x.shape[:2], block.attention.num_heads, -1).mean(-1)
            gate_idle[layer] = mean_over(gates.transpose(1, 2), idle)
            gate_busy[layer] = mean_over(gates.transpose(1, 2), seen)
    sink_logits = torch.full_like(on_marker, float("nan"))
    for layer, block in enumerate(model.blocks):
        if getattr(block.attention, "sink_logits", None) is not None:
            sink_logits[layer] = block.attention.sink_logits.detach()
    reader = divmod(int(on_marker.argmax()), on_marker.shape[1])
    right = logits.argmax(-1) == targets
    accuracy = {"idle": right[idle].float().mean().item(), "busy": right[seen].float().mean().item()}
    with _first_value_zeroed(model.blocks[-1].attention):
        right = model(tokens).argmax(-1) == targets
    accuracy["idle, BOS value zeroed"] = right[idle].float().mean().item()
    accuracy["busy, BOS value zeroed"] = right[seen].float().mean().item()
    return MarkerReading(on_marker, idle_first, idle_sink, gate_idle, gate_busy, sink_logits, reader, loss, accuracy)


class _first_value_zeroed:
    """Within ``with``: the attention's value projection returns 0 at position 0 (BOS's value vector v_0 = 0 in
    every head, bias included); the keys, and so the weights, are unchanged."""

    def __init__(self, attention):
        self.attention = attention

    def __enter__(self):
        def zero_first(module, inputs, output):
            output = output.clone()
            output[:, 0] = 0
            return output

        self.handle = self.attention.W_v.register_forward_hook(zero_first)

    def __exit__(self, *exc):
        self.handle.remove()


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_mask(mask, score_shape):
    """A bool mask broadcastable to the scores (each dim that size or 1, no more dims than the scores)."""
    if mask is None:
        return None
    check_bool_mask("mask", mask)
    if mask.dim() > len(score_shape) or any(
        a not in (1, b) for a, b in zip(mask.shape[::-1], score_shape[::-1], strict=False)
    ):
        raise ValueError(
            f"mask should be broadcastable to the scores' shape {tuple(score_shape)} (each dim that size or 1), got "
            f"{describe(mask)}; a causal mask for n queries and m keys is (n, m)"
        )
    return mask


def _check_sink(sink, x, head_dim: int, name: str) -> None:
    check_tensor("sink", sink, 1, "(heads,): one logit per head")
    check_float("sink", sink)
    check_size("sink", sink, 0, x.shape[head_dim], f"one logit per head (dim {head_dim} of {name})")
    check_finite("sink", sink, "a sink logit is a number; a very negative one switches the sink off")
    check_same_dtype(**{name: x, "sink": sink})


def _check_softmax_with_sink(scores, sink, mask):
    check_min_dims("scores", scores, 3, "(..., heads, n, m)")
    check_float("scores", scores)
    _check_sink(sink, scores, -3, "scores")
    return _check_mask(mask, scores.shape)


def _check_sink_attention(q, k, v, sink, mask, is_causal, window):
    for name, x, doc in (("q", q, "(B, H, n, d)"), ("k", k, "(B, H_kv, m, d)"), ("v", v, "(B, H_kv, m, d)")):
        check_tensor(name, x, 4, doc)
        check_float(name, x)
    check_same_dtype(q=q, k=k, v=v)
    if k.shape[:3] != v.shape[:3] or k.shape[0] != q.shape[0]:
        raise ValueError(f"k and v should be (B, H_kv, m, d) with q's batch, got q {describe(q)}, k {describe(k)}, "
                         f"v {describe(v)}")  # fmt: skip
    check_size("k", k, -1, q.shape[-1], "head_dim of q: q . k needs equal sizes")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"k should have a number of heads that divides q's {q.shape[1]}, got {describe(k)}: each "
                         "key/value head serves the same number of query heads")  # fmt: skip
    _check_sink(sink, q, 1, "q")
    check_bool("is_causal", is_causal, "whether query i may only attend keys j <= i")
    n, m = q.shape[2], k.shape[2]
    _check_mask(mask, (q.shape[0], q.shape[1], n, m))
    if window is not None:
        window = check_int("window", window, "how many earlier keys each query reads besides its own", minimum=0)
        if n != m:
            raise ValueError(f"window should be used with self-attention (n == m), got q {describe(q)} and k "
                             f"{describe(k)}; pass a mask instead")  # fmt: skip
    return window


def _check_output_gate(heads, gate_scores) -> None:
    check_tensor("heads", heads, 4, "(B, H, n, d)")
    check_tensor("gate_scores", gate_scores, 4, "(B, H, n, d) elementwise or (B, H, n, 1) headwise")
    check_float("heads", heads)
    check_float("gate_scores", gate_scores)
    check_same_dtype(heads=heads, gate_scores=gate_scores)
    if gate_scores.shape[:3] != heads.shape[:3] or gate_scores.shape[3] not in (1, heads.shape[3]):
        raise ValueError(
            f"gate_scores should be {tuple(heads.shape)} (elementwise) or {(*heads.shape[:3], 1)} (headwise), the "
            f"heads' shape, got {describe(gate_scores)}; reshape x @ W_g to (B, n, H, d or 1), then .transpose(1, 2)"
        )


def _check_first_token_mass(maps, first_query):
    single = isinstance(maps, torch.Tensor)
    if single:
        maps = [maps]
    elif not isinstance(maps, (list, tuple)) or not maps:
        raise TypeError(f"maps should be a non-empty list of per-layer attention weights (B, H, n, m), or one such "
                        f"tensor, got {describe(maps)}")  # fmt: skip
    for i, w in enumerate(maps):
        name = "maps" if single else f"maps[{i}]"
        check_tensor(name, w, 4, "(B, H, n, m): one layer's attention weights")
        check_float(name, w)
    if len({tuple(w.shape) for w in maps}) > 1:
        raise ValueError(f"maps should all have one shape (B, H, n, m), got {[tuple(w.shape) for w in maps]}")
    n = maps[0].shape[2]
    first_query = check_int("first_query", first_query, "the first query averaged over", 0, n - 1)
    return single, maps, first_query


def _check_largest_activations(hidden_states, k):
    if isinstance(hidden_states, torch.Tensor):
        check_tensor("hidden_states", hidden_states, 4, "(L, B, n, d_model): every layer's residual stream")
        stacked = hidden_states
    elif isinstance(hidden_states, (list, tuple)) and hidden_states:
        for i, h in enumerate(hidden_states):
            check_tensor(f"hidden_states[{i}]", h, 3, "(B, n, d_model): one layer's residual stream")
        if len({tuple(h.shape) for h in hidden_states}) > 1:
            raise ValueError(f"hidden_states should all have one shape (B, n, d_model), got "
                             f"{[tuple(h.shape) for h in hidden_states]}")  # fmt: skip
        stacked = torch.stack(list(hidden_states))
    else:
        raise TypeError(f"hidden_states should be a non-empty list of (B, n, d_model) tensors, or one (L, B, n, "
                        f"d_model) tensor, got {describe(hidden_states)}")  # fmt: skip
    check_float("hidden_states", stacked)
    size = stacked[0].numel()
    k = check_int("k", k, "how many of the largest activations to keep", 1, size)
    return stacked, k
