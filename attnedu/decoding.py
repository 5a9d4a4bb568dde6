"""Decoding with a cache (lesson 10, "The KV cache", "Attention sinks"): a ``DecoderLM`` (``attnedu.blocks``) run on
new tokens, each block's attention reading and filling a KV cache (``attnedu.kv_cache``).

    lm_forward(model, tokens, cache)   a DecoderLM run on new tokens, reading and filling a cache; with cache=None,
                          the whole sequence under ``mask`` (a check against model(tokens))
    generate_greedy(model, prompt, steps, cache)   greedy decoding, recomputing the prefix or with a cache
    streaming_losses(model, ids, cache)  next-token losses of a stream fed one token at a time through a cache
    window_recompute_losses(model, ids, window)   the same losses, each token read from the last ``window`` tokens
                          recomputed from scratch (what a window cache aims for)

Each public function checks its arguments in one call (the checks are at the end of this module), then runs the
model's own unchecked forward (``DecoderLM._forward``, through ``_lm_forward``): the tokens, the cache and the mask are
checked once, here.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import (
    check_bool_mask,
    check_ids,
    check_instance,
    check_int,
    check_positive_int,
    check_tensor,
    describe,
)
from ._validate_kv_cache import check_batch
from .kv_cache import KVCache, PagedSequence, PreallocatedKVCache, SinkCache


def lm_forward(model, tokens: torch.Tensor, cache: KVCache | None = None, mask: torch.Tensor | None = None):
    """``DecoderLM``'s forward, block by block, on ``tokens`` (B, n) at positions cache.seen .. cache.seen + n - 1.

    With a cache: each block's attention goes through the cache (which stores the new keys and values) and the
    cache advances by n. Without one: the whole sequence at positions 0..n-1 under ``mask`` (n, n) bool (default
    causal), which must equal ``model(tokens)`` for the causal mask. -> logits (B, n, vocab_size)."""
    _check_lm_forward(model, tokens, cache, mask)
    return _lm_forward(model, tokens, cache, mask)


def _lm_forward(model, tokens, cache=None, mask=None):
    """The model's own forward pass (``DecoderLM._forward``), each block's attention reading and filling ``cache``
    (``MultiHeadAttention._attend``), or under ``mask`` (n, n)."""
    return model._forward(tokens, mask=None if mask is None else mask[None, None], cache=cache)


@torch.no_grad()
def generate_greedy(model, prompt: torch.Tensor, steps: int, cache: KVCache | None = None) -> torch.Tensor:
    """Greedy decoding of ``steps`` tokens after ``prompt`` (1-D ids). Without a cache every step recomputes the
    whole sequence (``model(ids)``: cost ~ t^2 at step t, so ~ T^3 in all for the attention, T^2 for the rest); with
    one, the prompt is processed once (prefill) and each step feeds the one new token (decode). -> 1-D ids, the
    prompt included."""
    steps = _check_generate_greedy(model, prompt, steps, cache)
    model.eval()
    ids = prompt
    if cache is None:
        for _ in range(steps):
            ids = torch.cat([ids, model(ids[None])[0, -1].argmax()[None]])
        return ids
    if isinstance(cache, SinkCache):  # filled one token at a time
        for t in range(len(prompt)):
            logits = _lm_forward(model, prompt[None, t : t + 1], cache)
    else:
        logits = _lm_forward(model, prompt[None], cache)
    for step in range(steps):
        token = logits[0, -1].argmax()[None]
        ids = torch.cat([ids, token])
        if step < steps - 1:  # the last token's keys and values would never be read
            logits = _lm_forward(model, token[None], cache)
    return ids


@torch.no_grad()
def streaming_losses(model, ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Feed the stream ``ids`` (1-D) through ``cache`` (empty) one token at a time; -> (len - 1,) the loss (nats) of
    predicting ids[t + 1] after ids[0..t], t = 0..len-2, as far as the cache lets the model see."""
    _check_streaming_losses(model, ids, cache)
    model.eval()
    losses = []
    for t in range(len(ids) - 1):
        logits = _lm_forward(model, ids[None, t : t + 1], cache)[0, -1]
        losses.append(nn.functional.cross_entropy(logits, ids[t + 1]))
    return torch.stack(losses)


@torch.no_grad()
def window_recompute_losses(model, ids: torch.Tensor, window: int) -> torch.Tensor:
    """The quality a window cache aims for: each token predicted from the last ``window`` tokens, recomputed from
    scratch at positions 0..window-1 (StreamingLLM's "sliding window with re-computation", too slow to serve).
    -> (len - window,) losses of ids[window..], comparable with ``streaming_losses(...)[window - 1:]``."""
    window = _check_window_recompute_losses(model, ids, window)
    windows = ids.unfold(0, window, 1)[: len(ids) - window]  # (len - window, window)
    logits = model(windows)[:, -1]
    return nn.functional.cross_entropy(logits, ids[window:], reduction="none")


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_model(model) -> None:
    from .blocks import DecoderLM

    check_instance("model", model, DecoderLM, "an attnedu.blocks.DecoderLM")


def _check_cache(model, cache, batch: int, n: int) -> None:
    """A cache ``lm_forward`` may feed ``batch`` sequences of n new tokens: one layer per block, every layer at the
    same position, the heads and sequences it already holds."""
    check_instance("cache", cache, KVCache, "a KVCache (or PreallocatedKVCache, PagedSequence, RollingKVCache, "
                   "SinkCache)", "make one with KVCache(len(model.blocks))")  # fmt: skip
    if cache.num_layers != len(model.blocks):
        raise ValueError(f"cache should have one layer per block, {len(model.blocks)}, got {cache.num_layers}")
    starts = [cache._next_position(layer) for layer in range(cache.num_layers)]
    if len(set(starts)) > 1:
        raise ValueError(f"cache should hold the same tokens in every layer, got layers at positions {starts}; it "
                         "was fed outside lm_forward: start a new cache")  # fmt: skip
    check_batch(cache, "tokens", batch)
    attention = model.blocks[0].attention
    dtype = model.embedding.weight.dtype
    for layer in range(cache.num_layers):
        stored = cache._stored(layer)
        if stored is None:
            continue
        wanted = (attention.num_kv_heads, attention.head_dim, dtype)
        if (stored.shape[1], stored.shape[3], stored.dtype) != wanted:
            raise ValueError(f"cache should hold {wanted[0]} K/V heads of {wanted[1]} in {dtype}, this model's, "
                             f"got layer {layer} holding {describe(stored)}: a cache serves the model that filled "
                             "it")  # fmt: skip
        if not isinstance(cache, PagedSequence) and stored.shape[0] != batch:
            raise ValueError(f"tokens should continue the {stored.shape[0]} sequence(s) the cache holds, got a batch "
                             f"of {batch}; start a new cache for other sequences")  # fmt: skip
    if isinstance(cache, PreallocatedKVCache) and starts[0] + n > cache.max_length:
        raise ValueError(f"tokens should fit in the cache: it holds {starts[0]} of max_length={cache.max_length} "
                         f"tokens, got {n} new ones; make the cache with a larger max_length")  # fmt: skip
    if isinstance(cache, SinkCache) and n != 1:
        raise ValueError(f"tokens should be one new token for a SinkCache (it is filled one token at a time), got "
                         f"{n}; feed the stream token by token")  # fmt: skip


def _check_empty(cache) -> None:
    """Refuse a cache that already holds tokens: a stream or a generation starts at position 0."""
    if cache.seen:
        raise ValueError(f"cache should be empty (a new cache per sequence), got one that has seen {cache.seen} "
                         "tokens")  # fmt: skip


def _check_lm_forward(model, tokens, cache, mask) -> None:
    """The model, its tokens, and either a cache they fit in or a mask (n, n) bool: each checked once."""
    _check_model(model)
    check_ids("tokens", tokens, model.embedding.num_embeddings, 2, "(batch, n) of token ids")
    n = tokens.shape[1]
    if cache is not None:
        _check_cache(model, cache, tokens.shape[0], n)
        if mask is not None:
            raise ValueError("mask should be None with a cache: the cache decides what each query reads")
    elif mask is not None:
        check_bool_mask("mask", mask)
        check_tensor("mask", mask, 2, "(n, n), True = may attend")
        if tuple(mask.shape) != (n, n):
            raise ValueError(f"mask should be (n, n) = {(n, n)}, got {describe(mask)}")


def _check_generate_greedy(model, prompt, steps, cache) -> int:
    _check_model(model)
    check_ids("prompt", prompt, model.embedding.num_embeddings, 1, "(prompt_len,) of token ids")
    steps = check_int("steps", steps, "tokens to add", minimum=0)
    if cache is not None:
        _check_cache(model, cache, 1, 1)
        _check_empty(cache)
        if isinstance(cache, PreallocatedKVCache) and len(prompt) + steps - 1 > cache.max_length:
            raise ValueError(f"cache should hold the prompt and the steps, {len(prompt) + steps - 1} tokens, got "
                             f"max_length={cache.max_length}")  # fmt: skip
    return steps


def _check_streaming_losses(model, ids, cache) -> None:
    _check_model(model)
    check_ids("ids", ids, model.embedding.num_embeddings, 1, "(length,) of token ids")
    _check_cache(model, cache, 1, 1)
    _check_empty(cache)
    if len(ids) < 2:
        raise ValueError(f"ids should hold at least 2 tokens (one to read, one to predict), got {describe(ids)}")
    if isinstance(cache, PreallocatedKVCache) and len(ids) - 1 > cache.max_length:
        raise ValueError(f"cache should hold {len(ids) - 1} tokens, got max_length={cache.max_length}")


def _check_window_recompute_losses(model, ids, window) -> int:
    _check_model(model)
    check_ids("ids", ids, model.embedding.num_embeddings, 1, "(length,) of token ids")
    window = check_positive_int("window", window, "tokens each prediction reads")
    if len(ids) <= window:
        raise ValueError(f"ids should be longer than window={window}, got {describe(ids)}")
    return window
