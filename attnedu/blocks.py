"""The Transformer blocks of lesson 09, and a decoder-only language model made of them (vectors are rows: x W;
positions and heads count from 0):

PostNormEncoderBlock      Vaswani et al. 2017: x = LN(x + MultiHead(x)); x = LN(x + FFN(x))
CrossAttentionDecoderBlock   the 2017 decoder block: masked self-attention, cross-attention (queries from the
                          decoder, keys and values from the encoder), FFN, each followed by Add & Norm
PreNormDecoderBlock       today's decoder block (Llama): x = x + Attn(RMSNorm(x)) with RoPE and a causal mask;
                          x = x + SwiGLU(RMSNorm(x)); no biases; optionally grouped-query attention
pre_norm_block            the same forward from weight matrices, without RoPE (the exercise's reference)
DecoderLM                 a decoder-only language model of PreNormDecoderBlocks, with sampling (lessons 09-10)
*_parameters              parameter counts by formula, for every block above

Every block attends through ``attnedu.multihead.MultiHeadAttention``; the pre-norm block of lessons 06-07 with
LayerNorm is ``attnedu.transformer.Block``; RMSNorm and SwiGLU are in ``attnedu.block_parts``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validate import (
    check_bool,
    check_bool_mask,
    check_float,
    check_ids,
    check_instance,
    check_int,
    check_number,
    check_positive_int,
    check_same_dtype,
    check_size,
    check_tensor,
    describe,
)
from .block_parts import (
    _ROWS_FIX,
    RMSNorm,
    SwiGLU,
    _check_input_rows,
    _check_matrix,
    _check_norm_args,
    _check_swiglu_args,
    _rms_norm,
    _swiglu,
    swiglu_hidden,
)
from .masks import causal_mask
from .multihead import MultiHeadAttention, _grouped_query_attention
from .runtime import seeded
from .transformer import Block, attention_parameters, block_parameters


def _check_sequence(name: str, x, d_model: int, like: torch.Tensor) -> None:
    check_tensor(name, x, 3, "(batch, seq_len, d_model)")
    check_float(name, x)
    check_size(name, x, 2, d_model, "d_model of this block")
    check_same_dtype(**{name: x}, weights=like)


@torch.no_grad()
def _copy_linear(ours: nn.Linear, theirs: nn.Linear) -> None:
    ours.weight.copy_(theirs.weight)
    if ours.bias is not None:
        ours.bias.copy_(theirs.bias)


@torch.no_grad()
def _copy_norm(ours: nn.LayerNorm, theirs: nn.LayerNorm) -> None:
    if theirs.eps != ours.eps:
        raise ValueError(f"torch's layer norm has eps={theirs.eps}, this one {ours.eps}: build both with the same eps")
    ours.weight.copy_(theirs.weight)
    ours.bias.copy_(theirs.bias)


def _check_torch_layer(name: str, layer, kind: type, d_model: int, num_heads: int, d_ff: int) -> None:
    check_instance(name, layer, kind, f"a torch.nn.{kind.__name__}")
    attention = layer.self_attn
    sizes = (attention.embed_dim, attention.num_heads, layer.linear1.out_features)
    if sizes != (d_model, num_heads, d_ff):
        raise ValueError(
            f"{name} should have d_model, nhead, dim_feedforward = {(d_model, num_heads, d_ff)} as this block, got "
            f"{sizes}; build both with the same sizes"
        )
    if layer.norm_first:
        raise ValueError(
            f"{name} should be post-norm (norm_first=False), as this block is, got norm_first=True; the pre-norm "
            "arrangement is attnedu.transformer.Block"
        )
    if layer.activation not in (nn.functional.relu, "relu") and not isinstance(layer.activation, nn.ReLU):
        raise ValueError(f"{name} should use activation='relu', as this block does (the 2017 feed-forward layer)")


class PostNormEncoderBlock(Block):
    """The encoder block of Vaswani et al. (2017), Sec. 3.1: each sublayer is followed by "Add & Norm",

        x = LayerNorm(x + MultiHead(x, x, x))
        x = LayerNorm(x + FFN(x)),    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

    the post-norm arrangement. Same parameters as ``Block`` (the pre-norm arrangement, x = x + MultiHead(LN(x)),
    ...), so one's weights load into the other: only where the norms sit differs. Equal to
    ``torch.nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout=0.0, batch_first=True)`` after
    ``copy_from_torch``.

    forward(x (batch, seq_len, d_model), mask=None) -> (batch, seq_len, d_model), weights (batch, heads, seq_len,
    seq_len); mask: bool, True = may attend, e.g. (batch, 1, 1, seq_len) for padding.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int):
        super().__init__(d_model, num_heads, d_ff)
        self.d_ff = d_ff

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None):
        _check_sequence("x", x, self.attention.d_model, self.norm1.weight)
        attended, weights = self.attention._attend(x, x, x, mask)  # x checked above
        x = self.norm1(x + attended)  # Add & Norm
        return self.norm2(x + self.feed_forward(x)), weights

    def copy_from_torch(self, layer: nn.TransformerEncoderLayer) -> PostNormEncoderBlock:
        """Take the weights of a post-norm ``torch.nn.TransformerEncoderLayer`` of the same sizes."""
        _check_torch_layer("layer", layer, nn.TransformerEncoderLayer, self.attention.d_model,
                           self.attention.num_heads, self.d_ff)  # fmt: skip
        self.attention.copy_from_torch(layer.self_attn)
        _copy_linear(self.feed_forward[0], layer.linear1)
        _copy_linear(self.feed_forward[2], layer.linear2)
        _copy_norm(self.norm1, layer.norm1)
        _copy_norm(self.norm2, layer.norm2)
        return self


class CrossAttentionDecoderBlock(nn.Module):
    """The decoder block of Vaswani et al. (2017), Sec. 3.1, post-norm:

        x = LayerNorm(x + MultiHead(x, x, x, causal mask))         masked self-attention
        x = LayerNorm(x + MultiHead(x, memory, memory))            cross-attention
        x = LayerNorm(x + FFN(x))

    In the cross-attention the queries come from the decoder (one per target position) and the keys and values
    from the encoder's output ``memory`` (one per source position), so each target position reads the source.
    Equal to ``torch.nn.TransformerDecoderLayer(d_model, num_heads, d_ff, dropout=0.0, batch_first=True)`` after
    ``copy_from_torch``.

    forward(x (batch, tgt_len, d_model), memory (batch, src_len, d_model), memory_mask=None (batch, src_len) bool,
    True at real source tokens) -> x (batch, tgt_len, d_model), self-attention weights (batch, heads, tgt_len,
    tgt_len), cross-attention weights (batch, heads, tgt_len, src_len).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        check_positive_int("d_model", d_model, "the model width")
        self.d_ff = check_positive_int("d_ff", d_ff, "the feed-forward width")
        self.self_attention = MultiHeadAttention(d_model, num_heads)
        self.cross_attention = MultiHeadAttention(d_model, num_heads)
        self.feed_forward = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None = None):
        d_model = self.self_attention.d_model
        _check_sequence("x", x, d_model, self.norm1.weight)
        _check_sequence("memory", memory, d_model, self.norm1.weight)
        check_size("memory", memory, 0, x.shape[0], "the batch size of x: one source sentence per target sentence")
        if memory_mask is not None:
            check_bool_mask("memory_mask", memory_mask)
            check_tensor("memory_mask", memory_mask, 2, "(batch, src_len), True at real source tokens")
            if tuple(memory_mask.shape) != tuple(memory.shape[:2]):
                raise ValueError(
                    f"memory_mask should be (batch, src_len) = {tuple(memory.shape[:2])}, got {describe(memory_mask)}; "
                    "build it with padding_mask(src_lengths, src_len)"
                )
            memory_mask = memory_mask[:, None, None, :]  # (batch, 1, 1, src_len): every head, every query
        causal = causal_mask(x.shape[1], device=x.device)[None, None]
        attended, self_weights = self.self_attention._attend(x, x, x, causal)  # x and memory checked above
        x = self.norm1(x + attended)
        read, cross_weights = self.cross_attention._attend(x, memory, memory, memory_mask)  # Q: decoder; K, V: encoder
        x = self.norm2(x + read)
        return self.norm3(x + self.feed_forward(x)), self_weights, cross_weights

    def copy_from_torch(self, layer: nn.TransformerDecoderLayer) -> CrossAttentionDecoderBlock:
        """Take the weights of a post-norm ``torch.nn.TransformerDecoderLayer`` of the same sizes."""
        _check_torch_layer("layer", layer, nn.TransformerDecoderLayer, self.self_attention.d_model,
                           self.self_attention.num_heads, self.d_ff)  # fmt: skip
        self.self_attention.copy_from_torch(layer.self_attn)
        self.cross_attention.copy_from_torch(layer.multihead_attn)
        _copy_linear(self.feed_forward[0], layer.linear1)
        _copy_linear(self.feed_forward[2], layer.linear2)
        for ours, theirs in ((self.norm1, layer.norm1), (self.norm2, layer.norm2), (self.norm3, layer.norm3)):
            _copy_norm(ours, theirs)
        return self


class PreNormDecoderBlock(nn.Module):
    """The block of today's decoder-only models (Llama and most since): pre-norm, RMSNorm, SwiGLU, RoPE, no biases,

        x = x + Attention(RMSNorm(x))      causal, queries and keys rotated by their positions (RoPE)
        x = x + SwiGLU(RMSNorm(x))

    The residual stream x is never normalised in place: each sublayer reads a normalised copy and adds its output
    back. With ``num_kv_heads`` < num_heads the attention is grouped-query (lesson 05's exercise).

    forward(x (batch, seq_len, d_model), rope_positions=None (seq_len,)) -> (batch, seq_len, d_model), weights
    (batch, heads, seq_len, seq_len); without rope_positions no position enters (as in ``pre_norm_block``).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, num_kv_heads: int | None = None, eps: float = 1e-6):
        super().__init__()
        self.attention_norm = RMSNorm(d_model, eps)
        self.attention = MultiHeadAttention(d_model, num_heads, bias=False, num_kv_heads=num_kv_heads)
        self.ffn_norm = RMSNorm(d_model, eps)
        self.feed_forward = SwiGLU(d_model, d_ff)

    def forward(self, x: torch.Tensor, rope_positions: torch.Tensor | None = None):
        _check_sequence("x", x, self.attention.d_model, self.ffn_norm.weight)
        return self._forward(x, rope_positions)

    def _forward(self, x, rope_positions=None, mask=None, cache=None, layer=0):
        """``forward`` unchecked. mask (None: causal) 4-D as ``MultiHeadAttention`` takes it; ``cache`` and ``layer``:
        the keys and values go through ``cache`` (``MultiHeadAttention._attend``; ``attnedu.decoding.lm_forward``)."""
        normed = _rms_norm(x, self.attention_norm.weight, self.attention_norm.eps)
        if mask is None and cache is None:
            mask = causal_mask(x.shape[1], device=x.device)[None, None]
        attended, weights = self.attention._attend(normed, normed, normed, mask, rope_positions=rope_positions,
                                                   cache=cache, layer=layer)  # fmt: skip
        x = x + attended
        ffn = self.feed_forward
        normed = _rms_norm(x, self.ffn_norm.weight, self.ffn_norm.eps)
        return x + _swiglu(normed, ffn.gate.weight.T, ffn.up.weight.T, ffn.down.weight.T), weights


def _pre_norm_block(x, attention_norm, W_q, W_k, W_v, W_o, ffn_norm, W_gate, W_up, W_down, num_heads, eps):
    batch, seq_len, d_model = x.shape
    num_kv_heads = W_k.shape[1] // (d_model // num_heads)
    causal = causal_mask(seq_len, device=x.device)[None].expand(batch, seq_len, seq_len)
    h = _rms_norm(x, attention_norm, eps)
    attended, _ = _grouped_query_attention(h, h, h, causal, W_q, W_k, W_v, W_o, num_heads, num_kv_heads)
    x = x + attended
    return x + _swiglu(_rms_norm(x, ffn_norm, eps), W_gate, W_up, W_down)


def pre_norm_block(
    x: torch.Tensor, attention_norm: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor, W_v: torch.Tensor,
    W_o: torch.Tensor, ffn_norm: torch.Tensor, W_gate: torch.Tensor, W_up: torch.Tensor, W_down: torch.Tensor,
    num_heads: int, eps: float = 1e-6,
) -> torch.Tensor:  # fmt: skip
    """``PreNormDecoderBlock``'s forward from weight matrices (vectors are rows, so W_q is (d_model, d_model) and
    applied as h @ W_q), without RoPE:

        h = rms_norm(x, attention_norm);  x = x + MultiHead(h, h, h, causal mask)
        h = rms_norm(x, ffn_norm);        x = x + swiglu(h, W_gate, W_up, W_down)

    x (batch, seq_len, d_model); attention_norm, ffn_norm (d_model,); W_q, W_o (d_model, d_model); W_k, W_v
    (d_model, num_kv_heads * head_dim), head_dim = d_model // num_heads: with fewer columns than d_model the
    attention is grouped-query, each key/value head shared by num_heads // num_kv_heads consecutive query heads
    (``attnedu.multihead.grouped_query_attention``); W_gate, W_up (d_model, d_ff); W_down (d_ff, d_model)
    -> (batch, seq_len, d_model).
    """
    eps = _check_pre_norm_block_args(x, attention_norm, W_q, W_k, W_v, W_o, ffn_norm, W_gate, W_up, W_down,
                                     num_heads, eps)  # fmt: skip
    return _pre_norm_block(x, attention_norm, W_q, W_k, W_v, W_o, ffn_norm, W_gate, W_up, W_down, num_heads, eps)


class DecoderLM(nn.Module):
    """A decoder-only language model of ``PreNormDecoderBlock``s: token embeddings, blocks (RoPE inside each), a
    final RMSNorm and a linear readout to next-token logits (with ``tie_embeddings`` the readout is the embedding
    matrix itself, as in GPT-2 and Llama 3.2 1B). No biases anywhere, no position table.

    forward(tokens (batch, seq_len), return_weights=False) -> logits (batch, seq_len, vocab_size); with
    ``return_weights`` also each block's attention weights (batch, heads, seq_len, seq_len), blocks counted from 0.
    """

    def __init__(
        self, vocab_size: int, d_model: int = 128, num_heads: int = 4, num_layers: int = 4, d_ff: int | None = None,
        num_kv_heads: int | None = None, tie_embeddings: bool = False, eps: float = 1e-6, seed: int = 0,
    ):  # fmt: skip
        super().__init__()
        check_positive_int("vocab_size", vocab_size, "a size")
        check_positive_int("d_model", d_model, "the model width")
        check_int("num_layers", num_layers, "Transformer blocks", minimum=0)
        d_ff = swiglu_hidden(d_model) if d_ff is None else check_positive_int("d_ff", d_ff, "the SwiGLU width")
        self.tie_embeddings = check_bool("tie_embeddings", tie_embeddings, "whether the readout is the embedding")
        with seeded(seed):
            # unit variance as nn.Embedding's N(0, 1), drawn uniformly: uniform_ also works on the meta device, where
            # the notebooks count big models without allocating them (normal_ there first imports torch._dynamo)
            table = torch.empty(vocab_size, d_model).uniform_(-math.sqrt(3.0), math.sqrt(3.0))
            self.embedding = nn.Embedding(vocab_size, d_model, _weight=table)
            self.blocks = nn.ModuleList(
                PreNormDecoderBlock(d_model, num_heads, d_ff, num_kv_heads, eps) for _ in range(num_layers)
            )
            self.norm = RMSNorm(d_model, eps)
            self.head = None if tie_embeddings else nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor, return_weights: bool = False):
        self._check_tokens("tokens", tokens, 2, "(batch, seq_len) of token ids")
        check_bool("return_weights", return_weights, "whether to return each block's weights")
        return self._forward(tokens, return_weights)

    def _forward(self, tokens: torch.Tensor, return_weights: bool = False, mask=None, cache=None):
        """``forward`` unchecked; ``attnedu.decoding.lm_forward`` passes a mask (1, 1, n, n) other than the causal
        one, or a KV cache: the tokens are then at positions cache.seen .. cache.seen + n - 1, and each block's keys
        and values go through the cache (its layer ``i`` for block ``i``)."""
        start = 0 if cache is None else cache.seen
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        x = self.embedding(tokens)
        all_weights = []
        for layer, block in enumerate(self.blocks):
            x, weights = block._forward(x, positions, mask, cache, layer)
            all_weights.append(weights)
        x = _rms_norm(x, self.norm.weight, self.norm.eps)
        logits = x @ self.embedding.weight.T if self.head is None else self.head(x)
        return (logits, all_weights) if return_weights else logits

    def _check_tokens(self, name: str, tokens, dims: int, shape_doc: str) -> None:
        check_tensor(name, tokens, dims, shape_doc)
        if tokens.device != self.embedding.weight.device:
            device = self.embedding.weight.device
            raise ValueError(
                f"{name} should be on the model's device, {device}, got {tokens.device}; move them with "
                f"{name}.to({str(device)!r})"
            )
        check_ids(name, tokens, self.embedding.num_embeddings, dims, shape_doc)

    @torch.no_grad()
    def generate(
        self, prompt: torch.Tensor, steps: int, temperature: float, generator: torch.Generator, context: int = 64
    ) -> torch.Tensor:
        """Continue ``prompt`` (1-D token ids) by ``steps`` tokens, each drawn from softmax(logits / temperature) of
        the last position, reading at most the last ``context`` tokens. Low temperatures sharpen the distribution
        towards the likeliest token, high ones flatten it. -> 1-D ids, the prompt included."""
        self._check_tokens("prompt", prompt, 1, "(prompt_len,) of token ids")
        steps = check_int("steps", steps, "tokens to add", minimum=0)
        temperature = check_number("temperature", temperature, "the softmax temperature", 0.0, strict=True)
        check_instance("generator", generator, torch.Generator, "a torch.Generator",
                       "pass torch.Generator().manual_seed(seed), not the seed itself")  # fmt: skip
        context = check_positive_int("context", context, "how many tokens the model reads")
        ids = prompt
        for _ in range(steps):
            logits = self._forward(ids[None, -context:])[0, -1]
            probabilities = torch.softmax(logits / temperature, dim=-1)
            ids = torch.cat([ids, torch.multinomial(probabilities, 1, generator=generator)])
        return ids


# --------------------------------------------------------------------------------------------
# Parameter counts by formula (lesson 09); each is checked against the modules above in tests/
# --------------------------------------------------------------------------------------------


def cross_attention_block_parameters(d_model: int, d_ff: int) -> int:
    """The 2017 decoder block: two attentions (self and cross, with biases), the feed-forward layer and three layer
    norms: ``block_parameters`` plus one attention and one more LayerNorm."""
    return block_parameters(d_model, d_ff) + attention_parameters(d_model) + 2 * d_model


def pre_norm_block_parameters(d_model: int, d_ff: int, num_heads: int, num_kv_heads: int | None = None) -> int:
    """``PreNormDecoderBlock``: W_q and W_o (d_model x d_model), W_k and W_v (d_model x num_kv_heads * head_dim), no
    biases; SwiGLU's three matrices (3 d_model d_ff); two RMSNorm gains (d_model each). Refuses the configurations
    the block itself refuses (heads that do not divide d_model, key/value heads that do not divide the heads)."""
    d_model = check_positive_int("d_model", d_model, "the model width")
    check_positive_int("d_ff", d_ff, "the feed-forward width")
    num_heads = check_positive_int("num_heads", num_heads, "the number of heads")
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads, "the number of key/value heads")
    _check_heads(d_model, num_heads, num_kv_heads)
    kv_dim = num_kv_heads * (d_model // num_heads)
    return 2 * d_model * d_model + 2 * d_model * kv_dim + 3 * d_model * d_ff + 2 * d_model


def decoder_lm_parameters(
    vocab_size: int, d_model: int, num_layers: int, d_ff: int, num_heads: int, num_kv_heads: int | None = None,
    tie_embeddings: bool = False,
) -> int:  # fmt: skip
    """``DecoderLM``: the embedding (vocab_size x d_model), the blocks, the final RMSNorm, and the readout (another
    vocab_size x d_model, unless tied to the embedding)."""
    check_positive_int("vocab_size", vocab_size, "a size")
    num_layers = check_int("num_layers", num_layers, "Transformer blocks", minimum=0)
    check_bool("tie_embeddings", tie_embeddings, "whether the readout is the embedding")
    block = pre_norm_block_parameters(d_model, d_ff, num_heads, num_kv_heads)  # checked even for 0 blocks
    embeddings = vocab_size * d_model * (1 if tie_embeddings else 2)
    return embeddings + num_layers * block + d_model


# --------------------------------------------------------------------------------------------
# Input checks of the public functions above (one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_heads(d_model: int, num_heads: int, num_kv_heads: int) -> None:
    if d_model % num_heads:
        raise ValueError(
            f"num_heads should divide d_model={d_model}, got num_heads={num_heads}: head_dim would not be an integer; "
            "choose a number of heads that divides d_model"
        )
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_kv_heads should divide num_heads={num_heads}, got num_kv_heads={num_kv_heads}: every key/value head "
            "serves the same number of query heads"
        )


def _check_pre_norm_block_args(x, attention_norm, W_q, W_k, W_v, W_o, ffn_norm, W_gate, W_up, W_down, num_heads,
                               eps) -> float:  # fmt: skip
    check_tensor("x", x, 3, "(batch, seq_len, d_model)")
    check_float("x", x)
    d_model = x.shape[-1]
    num_heads = check_positive_int("num_heads", num_heads, "the number of query heads")
    if d_model % num_heads:
        raise ValueError(
            f"num_heads should divide d_model={d_model} (the last dimension of x), got num_heads={num_heads}: "
            "head_dim would not be an integer"
        )
    head_dim = d_model // num_heads
    for name, gain in (("attention_norm", attention_norm), ("ffn_norm", ffn_norm)):
        _check_norm_args("x", x, name, gain, eps, "d_model")
    for name, W in (("W_q", W_q), ("W_o", W_o)):
        _check_matrix(name, W, (d_model, d_model), "(d_model, d_model)", x, _ROWS_FIX)
    _check_input_rows(x, "W_k", W_k, "(d_model, num_kv_heads * head_dim)")
    kv_dim = W_k.shape[1]
    num_kv_heads = kv_dim // head_dim
    if kv_dim % head_dim or num_kv_heads == 0 or num_heads % num_kv_heads:
        raise ValueError(
            f"W_k should have num_kv_heads * head_dim columns, num_kv_heads dividing num_heads={num_heads} and "
            f"head_dim = d_model // num_heads = {head_dim}, got {describe(W_k)}; {_ROWS_FIX}"
        )
    _check_matrix("W_k", W_k, (d_model, kv_dim), "(d_model, num_kv_heads * head_dim)", x, _ROWS_FIX)
    _check_matrix("W_v", W_v, (d_model, kv_dim), "(d_model, num_kv_heads * head_dim), as W_k", x, _ROWS_FIX)
    _check_swiglu_args(x, W_gate, W_up, W_down)
    return check_number("eps", eps, "added to the mean of squares", 0.0)
