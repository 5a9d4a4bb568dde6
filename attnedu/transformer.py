"""Small attention models for the Transformer lessons, and the parameter counts of big ones.

RecallHead            lesson 04: one head of dot-product attention from a question to key-value pairs, with or
                      without the division by sqrt(head_dim)
AttentionClassifier   lesson 05: embeddings + learned positions, one multi-head attention, a linear
                      readout per output slot (no feed-forward layer, so the attention alone must
                      carry what the readout needs)
attention_parameters, block_parameters   counts from the formulas, checked against real modules
Block, TinyTransformer   lessons 06-07: pre-norm LayerNorm blocks and a small language model or encoder

Lessons 04-07's experiments, each one function that the lesson and benchmarks/calibrate.py call with one recipe:

train_recall              lesson 04: one head on associative recall (RECALL_04), divided by sqrt(d_k) or not
neighbour_classifier, train_neighbours   lesson 05: 1, 2 or 4 heads on the neighbour task (NEIGHBOURS_05)
train_next_character      lessons 06-07: the loop that trains a character language model
train_leak                lesson 06: the language model with and without the causal mask (LEAK_06)
train_previous_token      lesson 07: an encoder with no or learned positions (PREVIOUS_07)
train_extrapolation       lesson 07: train short, test long (EXTRAPOLATION_07)

Lesson 09, the Transformer block (vectors are rows: x W; positions and heads count from 0):

rms_norm, RMSNorm         Zhang & Sennrich 2019: x / sqrt(mean(x^2) + eps) * g, no centring, no shift
group_rms_norm            the same within groups of consecutive features (Mamba-2; a head's output alone)
swiglu, SwiGLU            Shazeer 2020: (SiLU(x W_gate) * (x W_up)) W_down, three matrices, no biases
clamped_swiglu            gpt-oss's gated layer: Swish with a slope, clamped, the linear part shifted by 1
PostNormEncoderBlock      Vaswani et al. 2017: x = LN(x + MultiHead(x)); x = LN(x + FFN(x))
CrossAttentionDecoderBlock   the 2017 decoder block: masked self-attention, cross-attention (queries from the
                          decoder, keys and values from the encoder), FFN, each followed by Add & Norm
PreNormDecoderBlock       today's decoder block (Llama): x = x + Attn(RMSNorm(x)) with RoPE and a causal mask;
                          x = x + SwiGLU(RMSNorm(x)); no biases; optionally grouped-query attention
pre_norm_block            the same forward from weight matrices, without RoPE (the exercise's reference)
qk_norm_scores            RMSNorm on each head's queries and keys before the scores (QK-norm)
qk_score_bound            the largest score QK-norm allows: sqrt(head_dim) * max_i |g_q,i g_k,i|
BlockStack                a causal LM of LayerNorm blocks, post-norm or pre-norm, with identical weights
ffn_gradient_norms, init_gradient_experiment   the gradients at initialisation, per block (Xiong et al. 2020)
DecoderLM                 a decoder-only language model of PreNormDecoderBlocks, with sampling
*_parameters              parameter counts by formula, for every block above

Lesson 11, real attention heads:

BertLayer, BertEncoder   lesson 11: BERT's post-norm encoder (GELU), to load a pretrained model into
AttentionOnlyTransformer   lesson 11: attention layers only, causal; where induction heads form
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
    check_ids,
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
from .masks import causal_mask, sliding_window_mask
from .multihead import MultiHeadAttention, _grouped_query_attention
from .positional import LearnedPositions, alibi_bias, sinusoidal_encoding
from .runtime import in_parallel, progress, seeded, training_seed
from .tasks import neighbour_task, recall_task

POSITIONS = ("none", "sinusoidal", "learned", "rope", "alibi")


def attention_parameters(d_model: int, bias: bool = True) -> int:
    """W_Q, W_K, W_V, W_O, each d_model x d_model (+ d_model biases). The number of heads does not appear:
    h heads of head_dim = d_model / h share the same four matrices, cut into slices."""
    check_positive_int("d_model", d_model, "the model width")
    check_bool("bias", bias, "whether the projections have biases")
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


def block_parameters(d_model: int, d_ff: int) -> int:
    """One Transformer encoder block: multi-head attention, a feed-forward layer d_model -> d_ff -> d_model
    (weights and biases), and two layer norms (a scale and a shift of d_model each)."""
    check_positive_int("d_model", d_model, "the model width")
    check_positive_int("d_ff", d_ff, "the feed-forward width")
    feed_forward = d_model * d_ff + d_ff + d_ff * d_model + d_model
    return attention_parameters(d_model) + feed_forward + 2 * 2 * d_model


class RecallHead(nn.Module):
    """One head of attention answering ``attnedu.tasks.recall_task`` (lesson 04's sqrt(d_k) experiment).

    x_j = E_key k_j + E_value v_j for each pair, q = E_key question; with vectors as rows,
    scores_j = (q W_Q) . (x_j W_K) / sqrt(head_dim) (or without the division when ``scaled`` is False),
    a = softmax(scores), logits = (sum_j a_j x_j W_V) W_out.
    Embeddings have standard normal entries and W_Q, W_K, W_V standard deviation 1 / sqrt(d_model), so that the
    query and key components have variance about 1 and 2 at initialisation; W_out has 1 / sqrt(head_dim).
    ``qk_init_scale`` multiplies the initial W_Q and W_K (the same draws otherwise): head_dim ** -0.25 with
    ``scaled=False`` starts the raw scores with the spread of the divided ones (lesson 04's control arm).
    forward(keys (batch, pairs), values (batch, pairs), question (batch,)) -> logits (batch, vocab),
    scores (batch, pairs) before the softmax.
    """

    def __init__(
        self, vocab: int, d_model: int, head_dim: int, scaled: bool, seed: int = 0, qk_init_scale: float = 1.0
    ):
        super().__init__()
        for name, value in (("vocab", vocab), ("d_model", d_model), ("head_dim", head_dim)):
            check_positive_int(name, value, "a size")
        qk_init_scale = check_number(
            "qk_init_scale", qk_init_scale, "a factor on the initial W_Q and W_K", 0, strict=True
        )
        self.scale = (
            1 / math.sqrt(head_dim) if check_bool("scaled", scaled, "whether to divide by sqrt(head_dim)") else 1.0
        )
        with seeded(seed):
            self.key_embedding = nn.Parameter(torch.randn(vocab, d_model))
            self.value_embedding = nn.Parameter(torch.randn(vocab, d_model))
            self.W_Q, self.W_K, self.W_V = (nn.Parameter(torch.randn(d_model, head_dim) / math.sqrt(d_model))
                                            for _ in range(3))  # fmt: skip
            with torch.no_grad():
                self.W_Q.mul_(qk_init_scale)
                self.W_K.mul_(qk_init_scale)
            self.W_out = nn.Parameter(torch.randn(head_dim, vocab) / math.sqrt(head_dim))

    def forward(self, keys: torch.Tensor, values: torch.Tensor, question: torch.Tensor):
        vocab = self.key_embedding.shape[0]
        check_ids("keys", keys, vocab, 2, "(batch, pairs) of token ids")
        check_ids("values", values, vocab, 2, "(batch, pairs) of token ids")
        check_ids("question", question, vocab, 1, "(batch,) of token ids")
        pairs = self.key_embedding[keys] + self.value_embedding[values]  # (batch, pairs, d_model)
        query = self.key_embedding[question] @ self.W_Q  # (batch, head_dim)
        scores = (pairs @ self.W_K @ query[:, :, None])[..., 0] * self.scale  # (batch, pairs)
        weights = torch.softmax(scores, dim=-1)
        answer = (weights[:, None, :] @ (pairs @ self.W_V))[:, 0]  # (batch, head_dim)
        return answer @ self.W_out, scores


class AttentionClassifier(nn.Module):
    """tokens (batch, seq_len) -> logits (batch, seq_len, n_outputs, n_classes),
    weights (batch, heads, seq_len, seq_len).

    z = E x + P (learned positions); a = MultiHeadAttention(z, z, z); logits = W a, cut into n_outputs
    groups of n_classes. Everything after the attention is linear.
    """

    def __init__(
        self, vocab_size: int, seq_len: int, d_model: int, num_heads: int, n_outputs: int, n_classes: int,
        seed: int = 0,
    ):  # fmt: skip
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("seq_len", seq_len), ("n_outputs", n_outputs),
                            ("n_classes", n_classes)):  # fmt: skip
            check_positive_int(name, value, "a size")
        self.seq_len, self.n_outputs, self.n_classes = seq_len, n_outputs, n_classes
        with seeded(seed):
            self.embedding = nn.Embedding(vocab_size, d_model)
            self.positions = nn.Parameter(0.5 * torch.randn(seq_len, d_model))
            self.attention = MultiHeadAttention(d_model, num_heads)
            self.readout = nn.Linear(d_model, n_outputs * n_classes)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_ids("tokens", tokens, self.embedding.num_embeddings, 2, "(batch, seq_len) of token ids")
        if tokens.shape[1] != self.seq_len:
            raise ValueError(
                f"tokens should be sequences of seq_len={self.seq_len}, got sequences of {tokens.shape[1]}: this model "
                f"has positions for {self.seq_len} tokens"
            )
        z = self.embedding(tokens) + self.positions
        attended, weights = self.attention(z, z, z)
        logits = self.readout(attended).view(*tokens.shape, self.n_outputs, self.n_classes)
        return logits, weights


class Block(nn.Module):
    """Pre-norm Transformer block (the arrangement of GPT-2 and most models since):
    x = x + MultiHeadAttention(LN(x)); x = x + W_2 relu(W_1 LN(x))."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        check_positive_int("d_model", d_model, "the model width")
        check_positive_int("d_ff", d_ff, "the feed-forward width")
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = MultiHeadAttention(d_model, num_heads)
        self.feed_forward = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor, mask=None, bias=None, rope_positions=None, rope_base: float = 10000.0):
        """x (batch, seq_len, d_model) -> (batch, seq_len, d_model), weights (batch, heads, seq_len, seq_len)."""
        normed = self.norm1(x)
        attended, weights = self.attention(
            normed, normed, normed, mask, bias=bias, rope_positions=rope_positions, rope_base=rope_base
        )
        x = x + attended
        return x + self.feed_forward(self.norm2(x)), weights


class TinyTransformer(nn.Module):
    """tokens (batch, seq_len) -> logits (batch, seq_len, n_out): embeddings, positions, blocks, LN, head.

    positions: "none" (nothing), "sinusoidal" or "learned" (added to the embeddings, up to
    ``max_positions`` for the learned table), "rope" (queries and keys rotated in every block), or "alibi"
    (a distance penalty on every head's scores). causal=True makes a language model (no looking ahead);
    ``forward(tokens, causal=...)`` can override it, which lesson 06 uses to show the leak.
    """

    def __init__(
        self, vocab_size: int, n_out: int, d_model: int = 64, num_heads: int = 4, num_layers: int = 2,
        d_ff: int | None = None, positions: str = "learned", max_positions: int = 64, causal: bool = True,
        seed: int = 0,
    ):  # fmt: skip
        super().__init__()
        check_choice("positions", positions, POSITIONS)
        for name, value in (("vocab_size", vocab_size), ("n_out", n_out), ("d_model", d_model),
                            ("num_heads", num_heads), ("max_positions", max_positions)):  # fmt: skip
            check_positive_int(name, value, "a size")
        check_int("num_layers", num_layers, "Transformer blocks", minimum=0)
        if d_ff is not None:
            check_positive_int("d_ff", d_ff, "the feed-forward width")
        check_bool("causal", causal, "whether position i may only attend positions j <= i")
        self.positions, self.causal, self.num_heads = positions, causal, num_heads
        with seeded(seed):
            self.embedding = nn.Embedding(vocab_size, d_model)
            self.learned = LearnedPositions(max_positions, d_model) if positions == "learned" else None
            self.blocks = nn.ModuleList(Block(d_model, num_heads, d_ff or 4 * d_model) for _ in range(num_layers))
            self.norm = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, n_out)

    def forward(
        self, tokens: torch.Tensor, causal: bool | None = None, return_weights: bool = False,
        rope_positions: torch.Tensor | None = None, rope_base: float = 10000.0, window: int | None = None,
    ):  # fmt: skip
        """-> logits (batch, seq_len, n_out); with ``return_weights``, also each block's attention weights.

        ``window`` (causal models only): query i sees only keys i - window .. i, a causal sliding window
        (``attnedu.masks.sliding_window_mask(seq_len, window, causal=True)``): how lesson 07 reads long texts while
        keeping every query's view to the distances it was trained on.

        For a "rope" model, ``rope_positions`` (seq_len,) and ``rope_base`` replace the positions 0..seq_len-1 and
        the base 10000 it was trained with: how lesson 07 stretches RoPE past the trained length (fractional
        positions: position interpolation; a larger base: NTK-aware scaling, see ``attnedu.positional``)."""
        check_ids("tokens", tokens, self.embedding.num_embeddings, 2, "(batch, seq_len) of token ids")
        seq_len = tokens.shape[1]
        causal = self.causal if causal is None else check_bool("causal", causal, "whether to mask the future")
        check_bool("return_weights", return_weights, "whether to return each block's weights")
        x = self.embedding(tokens)
        if self.positions == "sinusoidal":
            x = x + sinusoidal_encoding(seq_len, x.shape[-1])
        elif self.positions == "learned":
            x = x + self.learned(seq_len)
        mask = causal_mask(seq_len)[None, None] if causal else None
        if window is not None:
            check_int("window", window, "how many keys back each query may see", minimum=0)
            if not causal:
                raise ValueError(
                    f"window={window} applies to a causal model only (a causal sliding window), got causal=False; "
                    "leave window out or run with causal=True"
                )
            mask = sliding_window_mask(seq_len, window, causal=True)[None, None]
        bias = alibi_bias(self.num_heads, seq_len)[None] if self.positions == "alibi" else None
        if (rope_positions is not None or rope_base != 10000.0) and self.positions != "rope":
            raise ValueError(
                f"rope_positions and rope_base should be left out for a model with positions={self.positions!r}, got "
                f"{describe(rope_positions)} and rope_base={rope_base!r}; they apply to positions='rope' only"
            )
        rope = None
        if self.positions == "rope":
            rope = torch.arange(seq_len) if rope_positions is None else rope_positions
            check_number("rope_base", rope_base, "the base of RoPE's frequencies", 1.0, strict=True)
        all_weights = []
        for block in self.blocks:
            x, weights = block(x, mask, bias, rope, rope_base)
            all_weights.append(weights)
        logits = self.head(self.norm(x))
        return (logits, all_weights) if return_weights else logits


# --------------------------------------------------------------------------------------------
# Lessons 04-07's experiments: what each lesson trains, and how
#
# Each experiment is one function, which the lesson calls and benchmarks/calibrate.py calls, with the same recipe: a
# dict below (sizes, steps, batch, learning rate), passed by name (tests/test_experiments.py reads the notebooks'
# cells and calibrate.py to check that both do). Every run seeds its own generators (the model through ``seed``, the
# batches through ``runtime.training_seed(seed)``), so that several run at once (``runtime.in_parallel``) and the
# test command's perturbed run moves them all.
# --------------------------------------------------------------------------------------------

HELD_OUT_SEED = 12345  # the generator of every held-out set below: the same test items for every model and seed
# lesson 04: one head on associative recall (tasks.recall_task); held_out: questions in the held-out set
RECALL_04 = dict(vocab=16, pairs=8, d_model=64, steps=150, batch=64, lr=3e-3, every=25, held_out=500)
# the arms: scores divided by sqrt(d_k); raw; raw with W^Q and W^K started smaller by d_k^(-1/4) (the control)
RECALL_KINDS = ("divided", "raw", "raw, small init")
# lesson 05: the four neighbours of every position (tasks.neighbour_task), one model per number of heads
NEIGHBOURS_05 = dict(vocab=8, length=12, offsets=(-2, -1, 1, 2), d_model=32, steps=500, batch=64, lr=3e-3, every=50,
                     held_out=500)  # fmt: skip
# lesson 06: a character language model with and without the causal mask (windows of ``length`` characters)
LEAK_06 = dict(length=32, batch=32, steps=300, lr=3e-3)
# lesson 07: the token before every position, a bidirectional encoder with no or learned positions
PREVIOUS_07 = dict(vocab=8, length=12, offsets=(-1,), d_model=32, num_heads=2, steps=300, batch=64, lr=3e-3,
                   held_out=500)  # fmt: skip
# lesson 07: train at ``length`` characters, read held-out text in windows of ``eval_lengths``
EXTRAPOLATION_07 = dict(length=16, eval_lengths=(16, 32, 64, 128), d_model=32, batch=32, steps=300, lr=3e-3)


_RECIPES = {"RECALL_04": RECALL_04, "NEIGHBOURS_05": NEIGHBOURS_05, "LEAK_06": LEAK_06, "PREVIOUS_07": PREVIOUS_07,
            "EXTRAPOLATION_07": EXTRAPOLATION_07}  # fmt: skip


def _check_recipe(recipe, *names: str) -> dict:
    """Raise unless ``recipe`` is a dict with the keys of one of the recipes ``names`` (the constants above)."""
    expected = " or ".join(names)
    check_instance("recipe", recipe, dict, f"a dict with the keys of {expected}")
    if not any(set(recipe) == set(_RECIPES[name]) for name in names):
        keys = " or ".join(str(sorted(_RECIPES[name])) for name in names)
        raise ValueError(f"recipe should have the keys of {expected}, {keys}, got {sorted(recipe)}; pass {expected} "
                         f"(or a copy with some values changed)")  # fmt: skip
    return recipe


class RecallRun(NamedTuple):
    """One head trained on associative recall: at initialisation, the spread (standard deviation) of its scores and
    its rows' mean largest weight on the held-out questions; its held-out accuracy every ``every`` steps."""

    spread: float
    peak: float
    curve: list[float]


def recall_held_out(recipe: dict) -> tuple[torch.Tensor, ...]:
    """The held-out questions of lesson 04's experiment: keys, values, question, answer (``tasks.recall_task``)."""
    r = _check_recipe(recipe, "RECALL_04")
    return recall_task(r["held_out"], r["pairs"], r["vocab"], torch.Generator().manual_seed(HELD_OUT_SEED))


def train_recall(head_dim: int, kind: str, seed: int, held_out, recipe: dict, desc: str | None = None) -> RecallRun:
    """Lesson 04: train one ``RecallHead`` of size ``head_dim`` of arm ``kind`` (``RECALL_KINDS``) with Adam.

    loss = cross-entropy of the head's guess against the value paired with the question, on a fresh batch of
    ``recipe["batch"]`` questions each step; the accuracy on ``held_out`` (``recall_held_out``) every
    ``recipe["every"]`` steps. ``seed``: the initial weights and the batches (the same batches in every arm)."""
    check_choice("kind", kind, RECALL_KINDS)
    r = _check_recipe(recipe, "RECALL_04")
    small = head_dim**-0.25 if kind == "raw, small init" else 1.0  # the same draws, scaled
    model = RecallHead(r["vocab"], r["d_model"], head_dim, kind == "divided", seed=seed, qk_init_scale=small)

    def accuracy() -> float:
        with torch.no_grad():
            return (model(*held_out[:3])[0].argmax(-1) == held_out[3]).float().mean().item()

    with torch.no_grad():
        scores = model(*held_out[:3])[1]
        spread = scores.std().item()
        peak = scores.softmax(-1).max(-1).values.mean().item()  # the largest weight of a row, on average
    generator = torch.Generator().manual_seed(training_seed(seed))
    optimizer = torch.optim.Adam(model.parameters(), lr=r["lr"])
    curve, bar = [], progress(r["steps"], desc or f"d_k {head_dim}, {kind}, seed {seed}")
    for step in range(1, r["steps"] + 1):
        keys, values, question, answer = recall_task(r["batch"], r["pairs"], r["vocab"], generator)
        loss = nn.functional.cross_entropy(model(keys, values, question)[0], answer)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        bar.update()
        if step % r["every"] == 0:
            curve.append(accuracy())
    bar.close()
    return RecallRun(spread, peak, curve)


def neighbour_held_out(recipe: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out sequences of lesson 05's (``NEIGHBOURS_05``) or lesson 07's (``PREVIOUS_07``) neighbour task:
    tokens (n, length) and targets (n, length, offsets)."""
    r = _check_recipe(recipe, "NEIGHBOURS_05", "PREVIOUS_07")
    return neighbour_task(r["held_out"], r["length"], r["vocab"], r["offsets"],
                          torch.Generator().manual_seed(HELD_OUT_SEED))  # fmt: skip


def neighbour_classifier(num_heads: int, recipe: dict, seed: int = 0) -> AttentionClassifier:
    """Lesson 05's model: an ``AttentionClassifier`` with ``num_heads`` heads of width d_model / num_heads, one
    readout per offset, each choosing among the vocabulary and "beyond the edge"."""
    r = _check_recipe(recipe, "NEIGHBOURS_05")
    return AttentionClassifier(r["vocab"], r["length"], r["d_model"], num_heads=num_heads, n_outputs=len(r["offsets"]),
                               n_classes=r["vocab"] + 1, seed=seed)  # fmt: skip


def train_neighbours(model: AttentionClassifier, held_out, recipe: dict, seed: int = 0, desc: str = "training"):
    """Lesson 05: train ``model`` (``neighbour_classifier``) with Adam; return its accuracy on ``held_out``
    (``neighbour_held_out``) every ``recipe["every"]`` steps, as (step, accuracy) pairs.

    loss = cross-entropy of every position's four readouts against the tokens at those offsets (or the edge), on a
    fresh batch each step; ``seed`` fixes the batches (the same for every model)."""
    check_instance("model", model, AttentionClassifier, "neighbour_classifier(num_heads, NEIGHBOURS_05)")
    r = _check_recipe(recipe, "NEIGHBOURS_05")
    test_tokens, test_targets = held_out

    def accuracy() -> float:
        with torch.no_grad():
            return (model(test_tokens)[0].argmax(-1) == test_targets).float().mean().item()

    generator = torch.Generator().manual_seed(training_seed(seed))
    optimizer = torch.optim.Adam(model.parameters(), lr=r["lr"])
    curve, bar = [], progress(r["steps"], desc)
    for step in range(1, r["steps"] + 1):
        tokens, targets = neighbour_task(r["batch"], r["length"], r["vocab"], r["offsets"], generator)
        logits, _ = model(tokens)
        loss = nn.functional.cross_entropy(logits.flatten(0, 2), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        bar.update()
        if step % r["every"] == 0:
            curve.append((step, accuracy()))
    bar.close()
    return curve


def train_next_character(model: nn.Module, corpus, recipe: dict, seed: int = 0, desc: str = "training") -> list[float]:
    """Lessons 06-07: train ``model`` (tokens -> logits) to predict the next character of random windows of
    ``recipe["length"]`` characters of ``corpus``'s training text, ``recipe["batch"]`` windows a step, with AdamW;
    return the loss of every step.

    loss = mean over positions t of -ln p(x[t + 1] | what the model lets position t see)"""
    check_instance("model", model, nn.Module, "a model (an nn.Module such as TinyTransformer(...))")
    _check_recipe(recipe, "LEAK_06", "EXTRAPOLATION_07")
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe["lr"])
    generator = torch.Generator().manual_seed(training_seed(seed))  # the same batches for every model of one seed
    losses, bar = [], progress(recipe["steps"], desc)
    for _ in range(recipe["steps"]):
        inputs, targets = corpus.batch(recipe["batch"], recipe["length"], generator)
        loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        bar.update()
    bar.close()
    return losses


class LeakRun(NamedTuple):
    """Lesson 06's model after training, and its mean training loss over the last 50 steps."""

    model: TinyTransformer
    train_loss: float


def train_leak(causal: bool, corpus, recipe: dict, desc: str = "training") -> LeakRun:
    """Lesson 06: a ``TinyTransformer`` (sinusoidal positions, its default sizes) trained to predict the next
    character with the causal mask (``causal=True``) or without it (``train_next_character``, seed 0: the same
    batches for both)."""
    r = _check_recipe(recipe, "LEAK_06")
    check_bool("causal", causal, "whether the model trains with the causal mask")
    model = TinyTransformer(len(corpus.chars), len(corpus.chars), positions="sinusoidal", causal=causal, seed=0)
    losses = train_next_character(model, corpus, r, seed=0, desc=desc)
    last = losses[-50:]
    return LeakRun(model, sum(last) / len(last))


def train_previous_token(positions: str, held_out, recipe: dict) -> float:
    """Lesson 07: a one-block bidirectional ``TinyTransformer`` with ``positions`` ("none" or "learned") trained
    with AdamW to name the token before every position (``neighbour_task`` with offset -1; position 0's answer is
    "beyond the edge"); return its accuracy on ``held_out`` (``neighbour_held_out(PREVIOUS_07)``)."""
    r = _check_recipe(recipe, "PREVIOUS_07")
    model = TinyTransformer(r["vocab"], r["vocab"] + 1, d_model=r["d_model"], num_heads=r["num_heads"], num_layers=1,
                            positions=positions, max_positions=r["length"], causal=False, seed=0)  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=r["lr"])
    generator = torch.Generator().manual_seed(training_seed(0))
    bar = progress(r["steps"], f"{positions} positions")
    for _ in range(r["steps"]):
        tokens, targets = neighbour_task(r["batch"], r["length"], r["vocab"], r["offsets"], generator)
        loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        bar.update()
    bar.close()
    test_tokens, test_targets = held_out
    with torch.no_grad():
        return (model(test_tokens).argmax(-1) == test_targets[..., 0]).float().mean().item()


def train_extrapolation(positions: str, corpus, recipe: dict, seed: int = 0, desc: str | None = None):
    """Lesson 07: a one-block causal ``TinyTransformer`` with ``positions`` ("none", "sinusoidal", "rope" or
    "alibi") trained to predict the next character in windows of ``recipe["length"]`` characters
    (``train_next_character``); ``seed``: the initial weights and the batches. Returns the model."""
    r = _check_recipe(recipe, "EXTRAPOLATION_07")
    model = TinyTransformer(len(corpus.chars), len(corpus.chars), d_model=r["d_model"], positions=positions,
                            num_layers=1, causal=True, seed=seed)  # fmt: skip
    train_next_character(model, corpus, r, seed=seed, desc=desc or f"{positions}, seed {seed}")
    return model


# --------------------------------------------------------------------------------------------
# Lesson 09: the Transformer block
#
# Each public function shows its math in two places: the docstring (the equation, in the lesson's notation) and a
# private function just above it (the same equation as code, unchecked). The public function checks what it was
# given (the checks are at the end of this section) and calls the private one; the modules and the other functions
# here call the private ones directly, with inputs they built themselves.
# --------------------------------------------------------------------------------------------


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019) over the last axis, the features of each position:

        RMSNorm(x) = x / sqrt(mean_i(x_i^2) + eps) * g

    x (..., d_model), weight g (d_model,) -> (..., d_model). Unlike LayerNorm it neither subtracts the mean nor adds a
    shift: it only rescales each vector to a root mean square of 1, then multiplies feature i by g_i.
    """
    eps = _check_norm_args("x", x, "weight", weight, eps, "d_model")
    return _rms_norm(x, weight, eps)


def _group_rms_norm(x: torch.Tensor, weight: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
    grouped = x.unflatten(-1, (groups, x.shape[-1] // groups))  # (..., groups, group_size)
    normed = grouped * torch.rsqrt(grouped.pow(2).mean(dim=-1, keepdim=True) + eps)
    return normed.flatten(-2) * weight


def group_rms_norm(x: torch.Tensor, weight: torch.Tensor, groups: int, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm within groups of features: the d_model features of each position are cut into ``groups`` groups of
    s = d_model // groups consecutive features, and each group is divided by its own root mean square:

        y[j s : (j+1) s] = x[j s : (j+1) s] / sqrt(mean_{i in group j}(x_i^2) + eps) * g[j s : (j+1) s]

    x (..., d_model), weight g (d_model,), one gain per feature -> (..., d_model). ``groups=1`` is ``rms_norm``.
    Mamba-2's output norm works this way (``group_size`` in its RMSNormGated), and with one group per head it
    normalises each head's output alone, as the Differential Transformer does before merging its heads.
    """
    eps = _check_norm_args("x", x, "weight", weight, eps, "d_model")
    groups = check_positive_int("groups", groups, "how many groups the features are cut into")
    if x.shape[-1] % groups:
        raise ValueError(
            f"groups should divide d_model = {x.shape[-1]} (the last dimension of x), got groups={groups}: every "
            "group holds the same number of consecutive features"
        )
    return _group_rms_norm(x, weight, groups, eps)


class RMSNorm(nn.Module):
    """``rms_norm`` with a trained gain g (d_model,), starting at ones; equal to ``torch.nn.RMSNorm(d_model, eps)``."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        check_positive_int("d_model", d_model, "the model width")
        self.eps = check_number("eps", eps, "added to the mean of squares", 0.0)
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features("x", x, self.weight, "d_model of this norm")
        return _rms_norm(x, self.weight, self.eps)


def _swiglu(x: torch.Tensor, W_gate: torch.Tensor, W_up: torch.Tensor, W_down: torch.Tensor) -> torch.Tensor:
    return (nn.functional.silu(x @ W_gate) * (x @ W_up)) @ W_down


def swiglu(x: torch.Tensor, W_gate: torch.Tensor, W_up: torch.Tensor, W_down: torch.Tensor) -> torch.Tensor:
    """The SwiGLU feed-forward layer (Shazeer 2020), applied to every position alone:

        FFN(x) = (SiLU(x W_gate) * (x W_up)) W_down,   SiLU(z) = z * sigmoid(z)

    x (..., d_model); W_gate, W_up (d_model, d_ff); W_down (d_ff, d_model) -> (..., d_model). The gate decides, feature
    by feature, how much of the "up" projection passes. Three matrices instead of the 2017 layer's two, so models
    take d_ff about 2/3 of 4 d_model to keep the parameter count (``swiglu_hidden``).
    """
    _check_swiglu_args(x, W_gate, W_up, W_down)
    return _swiglu(x, W_gate, W_up, W_down)


def _clamped_swiglu(x: torch.Tensor, W_in: torch.Tensor, W_down: torch.Tensor, alpha: float, limit: float):
    both = x @ W_in  # (..., 2 d_ff): the gate in the even columns, the linear part in the odd ones
    gate, linear = both[..., 0::2].clamp(max=limit), both[..., 1::2].clamp(-limit, limit)
    return (gate * torch.sigmoid(alpha * gate) * (linear + 1)) @ W_down


def clamped_swiglu(
    x: torch.Tensor, W_in: torch.Tensor, W_down: torch.Tensor, alpha: float = 1.702, limit: float = 7.0
) -> torch.Tensor:
    """gpt-oss's gated feed-forward layer (OpenAI 2025, ``gpt_oss/torch/model.py``: ``swiglu``), biases left out:

        [g, u] = x W_in            g the even columns of the product, u the odd ones (interleaved, as stored)
        g = min(g, limit);  u = clamp(u, -limit, limit)
        FFN(x) = (g * sigmoid(alpha g) * (u + 1)) W_down

    x (..., d_model); W_in (d_model, 2 d_ff); W_down (d_ff, d_model) -> (..., d_model). Against the lesson's SwiGLU:
    the gate's activation is Swish with slope ``alpha`` (alpha = 1 is SiLU; 1.702 makes it the sigmoid approximation
    of GELU), the gate is clamped from above only (g sigmoid(alpha g) is bounded below by itself, its least value
    about -0.28 / alpha), the linear part from both sides and shifted by 1, and the two projections share one matrix
    whose columns alternate gate, linear.
    """
    alpha, limit = _check_clamped_swiglu_args(x, W_in, W_down, alpha, limit)
    return _clamped_swiglu(x, W_in, W_down, alpha, limit)


def swiglu_hidden(d_model: int, multiple_of: int = 8) -> int:
    """The SwiGLU width that keeps the 2017 layer's parameter count: d_ff = 2/3 * 4 d_model = 8/3 d_model (three
    matrices of d_model x d_ff instead of two of d_model x 4 d_model), rounded up to a multiple of ``multiple_of``.

    This is Shazeer's (2020) and LLaMA-1's rule (LLaMA-1 7B: 8/3 * 4096 rounded up to a multiple of 256 = 11008).
    Later models choose d_ff freely and often wider (Llama 3 8B: 14336 = 3.5 d_model; Llama 3.2 1B: 8192 = 4
    d_model), so a real configuration's d_ff is read from it, not from this rule."""
    d_model = check_positive_int("d_model", d_model, "the model width")
    multiple_of = check_positive_int("multiple_of", multiple_of, "what d_ff is rounded up to")
    return multiple_of * math.ceil(8 * d_model / 3 / multiple_of)


class SwiGLU(nn.Module):
    """``swiglu`` with trained matrices: gate, up (d_model -> d_ff) and down (d_ff -> d_model), no biases."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        check_positive_int("d_model", d_model, "the model width")
        check_positive_int("d_ff", d_ff, "the feed-forward width")
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features("x", x, self.down.weight, "d_model of this layer")
        return _swiglu(x, self.gate.weight.T, self.up.weight.T, self.down.weight.T)


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
        attended, weights = self.attention(x, x, x, mask)
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
        attended, self_weights = self.self_attention(x, x, x, causal)
        x = self.norm1(x + attended)
        read, cross_weights = self.cross_attention(x, memory, memory, memory_mask)  # Q: decoder; K, V: encoder
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
        the keys and values go through ``cache`` (``MultiHeadAttention._attend``; ``attnedu.inference.lm_forward``)."""
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


def _qk_norm_scores(q, k, q_weight, k_weight, eps):
    return _rms_norm(q, q_weight, eps) @ _rms_norm(k, k_weight, eps).transpose(-2, -1) / math.sqrt(q.shape[-1])


def qk_norm_scores(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """QK-norm: each head's queries and keys normalised before the scores, so that no score can grow without bound
    however large the projections become. Henry et al. (2020) proposed it with the l2 norm and one learned scale in
    place of 1/sqrt(head_dim); Dehghani et al. (2023) used LayerNorm; OLMo 2, Gemma 3 and Qwen3 use RMSNorm, as here:

        scores = rms_norm(q, g_q) rms_norm(k, g_k)^T / sqrt(head_dim)

    q (batch, heads, query_len, head_dim), k (batch, heads, key_len, head_dim); q_weight, k_weight (head_dim,), one
    gain shared by every head -> (batch, heads, query_len, key_len). (Real models then rotate the normalised queries
    and keys by RoPE before the product; ``qk_score_bound`` says what that changes.)
    """
    eps = _check_qk_args(q, k, q_weight, k_weight, eps)
    return _qk_norm_scores(q, k, q_weight, k_weight, eps)


def qk_score_bound(q_weight: torch.Tensor, k_weight: torch.Tensor) -> torch.Tensor:
    """The largest score QK-norm allows (``qk_norm_scores``), whatever the queries and keys:

        |s| <= sqrt(head_dim) * max_i |g_q,i g_k,i|

    A normalised vector q_hat has sum_i q_hat_i^2 = head_dim (less a little for eps), so the score
    sum_i q_hat_i g_q,i k_hat_i g_k,i / sqrt(head_dim) is at most max_i |g_q,i g_k,i| * |q_hat . k_hat| / sqrt(head_dim)
    <= max_i |g_q,i g_k,i| * head_dim / sqrt(head_dim) (Cauchy-Schwarz). Queries and keys with all their size on the
    feature i of the largest |g_q,i g_k,i| come as close as eps allows: the bound is the least one. The gains are
    trained, so the bound is not fixed: it grows as they do.

    Not covered: RoPE applied after the norm (OLMo 2, Gemma 3, Qwen3 rotate the normalised, gained queries and keys).
    A rotation keeps a vector's length but turns feature i into a mix of i and its partner, so the gains of a pair
    no longer meet feature by feature: the bound becomes sqrt(head_dim) times the largest product of a q gain and a k
    gain within one rotated pair, which can exceed the one here.

    q_weight, k_weight (..., head_dim): the gains, with any leading axes (one pair per layer, say) -> (...).
    """
    check_min_dims("q_weight", q_weight, 1, "(..., head_dim)")
    check_float("q_weight", q_weight)
    check_min_dims("k_weight", k_weight, 1, "(..., head_dim)")
    check_same_dtype(q_weight=q_weight, k_weight=k_weight)
    if k_weight.shape != q_weight.shape:
        raise ValueError(
            f"k_weight should have the shape of q_weight, {tuple(q_weight.shape)}, got {describe(k_weight)}"
        )
    check_finite("q_weight", q_weight, "a NaN or infinite gain has no bound")
    check_finite("k_weight", k_weight, "a NaN or infinite gain has no bound")
    return math.sqrt(q_weight.shape[-1]) * (q_weight * k_weight).abs().amax(dim=-1)


# --------------------------------------------------------------------------------------------
# Why the norm moved: the gradients at initialisation (Xiong et al. 2020), measured
# --------------------------------------------------------------------------------------------

INITS = ("pytorch", "xavier")


class BlockStack(nn.Module):
    """A causal character LM of ``num_layers`` LayerNorm blocks in one of the two arrangements, for comparing them:

    * ``norm_first=False``: ``PostNormEncoderBlock`` (2017), whose last block already ends in a LayerNorm;
    * ``norm_first=True``: ``Block`` (pre-norm), with a final LayerNorm before the readout (GPT-2; Xiong et al. 2020's
      Pre-LN Transformer).

        x_0 = embedding_scale * (E[tokens] + P)          P: sinusoidal positions
        x_l = Block_l(x_{l-1}),   logits = W_out LN_final(x_L) + b   (LN_final: pre-norm only)

    With the same seed both arrangements start from the same weights (the final LayerNorm starts at ones and zeros,
    the identity up to the normalisation). ``init``: "pytorch" keeps ``nn.Linear``'s default (weights uniform with
    variance 1 / (3 fan_in)); "xavier" redraws every weight matrix of the blocks from N(0, 2 / (fan_in + fan_out))
    with zero biases, the initialisation Xiong et al. analyse. ``embedding_scale`` multiplies what the first block
    reads (the embeddings and positions), to change their share of the residual stream.

    forward(tokens (batch, seq_len), return_stream=False, branch_gradients=True) -> logits (batch, seq_len,
    vocab_size); with ``return_stream`` also the residual stream after the last block, (batch, seq_len, d_model): what
    the final LayerNorm reads in the pre-norm arrangement (in the post-norm one the last block's own LayerNorm has
    already normalised it). ``branch_gradients=False`` computes the same values, but every sublayer reads a detached
    copy of its input, so the backward pass keeps only the path along the residual stream (and, post-norm, through the
    LayerNorms on it): the part of the gradient that does not pass through any attention or feed-forward layer.
    """

    def __init__(
        self, vocab_size: int, d_model: int, num_heads: int, d_ff: int, num_layers: int, norm_first: bool,
        seed: int = 0, init: str = "pytorch", embedding_scale: float = 1.0,
    ):  # fmt: skip
        super().__init__()
        check_positive_int("vocab_size", vocab_size, "a size")
        check_positive_int("num_layers", num_layers, "Transformer blocks")
        self.norm_first = check_bool("norm_first", norm_first, "pre-norm (True) or post-norm (False)")
        check_choice("init", init, INITS)
        self.embedding_scale = check_number("embedding_scale", embedding_scale, "a factor on the embeddings", 0.0,
                                            strict=True)  # fmt: skip
        kind = Block if norm_first else PostNormEncoderBlock
        with seeded(seed):  # the readout before the blocks: stacks of every depth share it (and the embedding)
            self.embedding = nn.Embedding(vocab_size, d_model)
            self.head = nn.Linear(d_model, vocab_size)
            self.blocks = nn.ModuleList(kind(d_model, num_heads, d_ff) for _ in range(num_layers))
            if init == "xavier":
                for layer in (m for m in self.blocks.modules() if isinstance(m, nn.Linear)):
                    nn.init.xavier_normal_(layer.weight)
                    nn.init.zeros_(layer.bias)
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, tokens: torch.Tensor, return_stream: bool = False, branch_gradients: bool = True):
        check_ids("tokens", tokens, self.embedding.num_embeddings, 2, "(batch, seq_len) of token ids")
        check_bool("return_stream", return_stream, "whether to return the stream after the last block")
        check_bool("branch_gradients", branch_gradients, "whether gradients flow back through the sublayers")
        seq_len = tokens.shape[1]
        x = self.embedding_scale * (self.embedding(tokens) + sinusoidal_encoding(seq_len, self.embedding.embedding_dim))
        mask = causal_mask(seq_len, device=tokens.device)[None, None]
        for block in self.blocks:
            x = block(x, mask)[0] if branch_gradients else self._identity_path(block, x, mask)
        logits = self.head(self.norm(x))
        return (logits, x) if return_stream else logits

    def _identity_path(self, block: Block, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``block(x, mask)``'s output, each sublayer reading ``x`` detached (the same numbers; no gradient flows back
        through the sublayers, only along the stream)."""
        if self.norm_first:
            normed = block.norm1(x.detach())
            x = x + block.attention(normed, normed, normed, mask)[0]
            return x + block.feed_forward(block.norm2(x.detach()))
        read = x.detach()
        x = block.norm1(x + block.attention(read, read, read, mask)[0])
        return block.norm2(x + block.feed_forward(x.detach()))


class InitGradients(NamedTuple):
    """What :func:`ffn_gradient_norms` measures in one stack (or, from :func:`init_gradient_experiment`, the mean over
    three). With x the residual stream after the last block, (batch, seq_len, d_model), and the last block's
    feed-forward layer h_t -> h_t W_2 + b_2 at each position t (h_t its hidden vector, g_t the gradient reaching its
    output):

    * ``w2`` (num_layers,): ||dl/dW_2||, the Frobenius norm of each block's W_2 gradient, from the input up;
    * ``stream_rms``: sqrt(mean of x^2 over every entry), the stream's size;
    * ``stream_sigma``: sqrt(mean over positions of sigma_t^2), sigma_t the standard deviation of x_t's features:
      what a pre-norm stack's final LayerNorm divides the gradient by, position by position;
    * ``stream_gradient``: ||dl/dx||, the Frobenius norm of the gradient reaching the stream;
    * ``coherence``: ||sum_t h_t^T g_t|| / sqrt(sum_t ||h_t||^2 ||g_t||^2), how the last W_2 gradient's terms add
      up over the positions: about 1 when they point every which way (their squared sizes add, as in Pythagoras),
      up to sqrt(batch * seq_len) when they all point the same way, less than 1 when they cancel.
    """

    w2: torch.Tensor
    stream_rms: float
    stream_sigma: float
    stream_gradient: float
    coherence: float


def ffn_gradient_norms(
    stack: BlockStack, inputs: torch.Tensor, targets: torch.Tensor, branch_gradients: bool = True
) -> InitGradients:
    """One batch, one backward pass of the next-character loss at initialisation. -> :class:`InitGradients`: the
    Frobenius norm of the gradient of each block's W_2 (the feed-forward layer's output matrix; Xiong et al.'s
    W^{2,l}), blocks counted from the input; the size of the residual stream after the last block (its root mean
    square, and sigma, what a pre-norm stack's final LayerNorm divides the gradient by); the gradient that reaches it;
    and how coherently the last W_2 gradient's terms add up over the positions.

    inputs, targets (batch, seq_len) token ids, the targets the inputs shifted by one."""
    check_instance("stack", stack, BlockStack, "a BlockStack")
    check_ids("targets", targets, stack.embedding.num_embeddings, 2, "(batch, seq_len) of token ids")
    if targets.shape != inputs.shape:
        raise ValueError(f"targets should have the shape of inputs, {tuple(inputs.shape)}, got {describe(targets)}")
    stack.zero_grad()
    last: dict = {}

    def keep(module, args, output):  # the last W_2's input, and its output (whose gradient is g)
        last["h"] = args[0].detach()
        if output.requires_grad:
            output.retain_grad()
        last["out"] = output

    hook = stack.blocks[-1].feed_forward[2].register_forward_hook(keep)
    try:
        logits, stream = stack(inputs, return_stream=True, branch_gradients=branch_gradients)
    finally:
        hook.remove()
    stream.retain_grad()
    nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    norms = torch.stack([block.feed_forward[2].weight.grad.norm() for block in stack.blocks])
    h, g = last["h"], last["out"].grad
    scattered = (h.pow(2).sum(-1) * g.pow(2).sum(-1)).sum().sqrt()  # the sum's size if the terms were orthogonal
    x = stream.detach()
    return InitGradients(
        norms,
        x.pow(2).mean().sqrt().item(),
        x.var(-1, unbiased=False).mean().sqrt().item(),
        stream.grad.norm().item(),
        (norms[-1] / scattered).item(),
    )


# The lesson's experiment, as lesson 09 runs it and benchmarks/calibrate.py calibrates it: stacks of width 64, 4
# heads, d_ff 256, each measured on one batch of 8 windows of 64 characters and averaged over three inits.
GRADIENT_ARMS = {  # name: (BlockStack's options, arrangements measured, depths, branch_gradients)
    "pytorch": ({}, (False, True), (2, 6, 12), True),
    "xavier": ({"init": "xavier"}, (True,), (2, 6, 12), True),
    "small embeddings": ({"embedding_scale": 0.1}, (True,), (2, 6, 12), True),
    "identity path": ({}, (False, True), (6, 12), False),
}
GRADIENT_SIZES = {"d_model": 64, "num_heads": 4, "d_ff": 256}
GRADIENT_INIT_SEEDS = (0, 1, 2)


def init_gradient_experiment(vocab_size: int, inputs: torch.Tensor, targets: torch.Tensor) -> dict:
    """Every arm of ``GRADIENT_ARMS``: for each arrangement (norm_first) and depth, ``ffn_gradient_norms`` of three
    stacks (seeds ``GRADIENT_INIT_SEEDS``, plus ATTNEDU_SEED_OFFSET), each measurement averaged over the three, the
    stacks measured in parallel (``attnedu.runtime.in_parallel``). -> {arm: {(norm_first, depth): InitGradients}},
    its ``w2`` the mean profile (depth,)."""
    vocab_size = check_positive_int("vocab_size", vocab_size, "a size")
    check_ids("inputs", inputs, vocab_size, 2, "(batch, seq_len) of token ids")
    jobs = [(arm, first, depth, seed) for arm, (_, firsts, depths, _) in GRADIENT_ARMS.items()
            for first in firsts for depth in depths for seed in GRADIENT_INIT_SEEDS]  # fmt: skip

    def measure(job):
        arm, first, depth, seed = job
        options, _, _, through_branches = GRADIENT_ARMS[arm]
        stack = BlockStack(vocab_size, **GRADIENT_SIZES, num_layers=depth, norm_first=first, seed=seed, **options)
        return ffn_gradient_norms(stack, inputs, targets, through_branches)

    measured = dict(zip(jobs, in_parallel(measure, jobs)))
    results: dict = {arm: {} for arm in GRADIENT_ARMS}
    for arm, (_, firsts, depths, _) in GRADIENT_ARMS.items():
        for first in firsts:
            for depth in depths:
                runs = [measured[arm, first, depth, seed] for seed in GRADIENT_INIT_SEEDS]
                results[arm][first, depth] = InitGradients(
                    torch.stack([run.w2 for run in runs]).mean(0),
                    *(sum(run[i] for run in runs) / len(runs) for i in range(1, len(InitGradients._fields))),
                )
    return results


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
        """``forward`` unchecked; ``attnedu.inference.lm_forward`` passes a mask (1, 1, n, n) other than the causal
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
# Input checks of lesson 09's public functions (one form of message: attnedu._validate)
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


def _check_features(name: str, x, weight: torch.Tensor, meaning: str) -> None:
    """``x`` (..., d_model): a float tensor whose last dimension is ``weight``'s first (its rows as nn.Linear stores
    them, or a norm's gains), of ``weight``'s dtype."""
    check_min_dims(name, x, 1, "(..., d_model)")
    check_float(name, x)
    check_size(name, x, x.dim() - 1, weight.shape[0], meaning)
    check_same_dtype(**{name: x}, weights=weight)


def _check_norm_args(name: str, x, weight_name: str, weight, eps, features: str) -> float:
    check_min_dims(name, x, 1, f"(..., {features})")
    check_float(name, x)
    check_tensor(weight_name, weight, 1, f"({features},)")
    check_float(weight_name, weight)
    check_size(weight_name, weight, 0, x.shape[-1], f"{features}, the last dimension of {name}: one gain per feature")
    check_same_dtype(**{name: x, weight_name: weight})
    return check_number("eps", eps, "added to the mean of squares", 0.0)


def _check_matrix(name: str, W, shape: tuple[int, int], shape_doc: str, like: torch.Tensor, fix: str = "") -> None:
    check_tensor(name, W, 2, shape_doc)
    check_float(name, W)
    if tuple(W.shape) != shape:
        message = f"{name} should be {shape_doc} = {shape}, got {describe(W)}"
        raise ValueError(message + (f"; {fix}" if fix else ""))
    check_same_dtype(x=like, **{name: W})


_ROWS_FIX = "weights are applied as x @ W (vectors are rows); an nn.Linear's weight is the transpose: pass .weight.T"


def _check_input_rows(x, name: str, W, shape_doc: str) -> None:
    """The first matrix's rows meet x's features: a mismatch names both, and the likely cause."""
    check_tensor(name, W, 2, shape_doc)
    d_model = x.shape[-1]
    if W.shape[0] != d_model:
        fix = (f"it looks transposed: {_ROWS_FIX}" if W.shape[1] == d_model else
               f"x has {d_model} features in its last dimension: check x, or the matrix")  # fmt: skip
        raise ValueError(f"{name} should be {shape_doc} with d_model = {d_model} rows, one per feature of x, got "
                         f"{describe(W)}; {fix}")  # fmt: skip


def _check_swiglu_args(x, W_gate, W_up, W_down) -> None:
    check_min_dims("x", x, 1, "(..., d_model)")
    check_float("x", x)
    d_model = x.shape[-1]
    _check_input_rows(x, "W_gate", W_gate, "(d_model, d_ff)")
    d_ff = W_gate.shape[1]
    _check_matrix("W_gate", W_gate, (d_model, d_ff), "(d_model, d_ff)", x, _ROWS_FIX)
    _check_matrix("W_up", W_up, (d_model, d_ff), "(d_model, d_ff)", x, _ROWS_FIX)
    _check_matrix("W_down", W_down, (d_ff, d_model), "(d_ff, d_model)", x, _ROWS_FIX)


def _check_clamped_swiglu_args(x, W_in, W_down, alpha, limit) -> tuple[float, float]:
    check_min_dims("x", x, 1, "(..., d_model)")
    check_float("x", x)
    _check_input_rows(x, "W_in", W_in, "(d_model, 2 d_ff)")
    d_model, columns = W_in.shape
    if columns % 2:
        raise ValueError(
            f"W_in should have an even number of columns, 2 d_ff (gate and linear part alternating), got "
            f"{describe(W_in)}"
        )
    _check_matrix("W_in", W_in, (d_model, columns), "(d_model, 2 d_ff)", x)
    _check_matrix("W_down", W_down, (columns // 2, d_model), "(d_ff, d_model)", x, _ROWS_FIX)
    alpha = check_number("alpha", alpha, "the slope of the gate's Swish", 0.0, strict=True)
    limit = check_number("limit", limit, "where the gate and the linear part are clamped", 0.0, strict=True)
    return alpha, limit


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


def _check_qk_args(q, k, q_weight, k_weight, eps) -> float:
    check_tensor("q", q, 4, "(batch, heads, query_len, head_dim)")
    check_float("q", q)
    check_tensor("k", k, 4, "(batch, heads, key_len, head_dim)")
    check_float("k", k)
    if q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k should share batch, heads and head_dim, got q {describe(q)} and k {describe(k)}")
    _check_norm_args("q", q, "q_weight", q_weight, eps, "head_dim")
    _check_norm_args("k", k, "k_weight", k_weight, eps, "head_dim")
    return check_number("eps", eps, "added to the mean of squares", 0.0)


# --------------------------------------------------------------------------------------------
# Lesson 11: a BERT encoder, to load a pretrained model's weights (attnedu.pretrained)
# --------------------------------------------------------------------------------------------


class BertLayer(nn.Module):
    """One BERT encoder layer (Devlin et al. 2019): the post-norm block of Vaswani et al. (2017), Sec. 3.1, with
    GELU in the feed-forward layer and LayerNorm's eps from the checkpoint (1e-12):

        a = MultiHead(x, x, x, padding mask) W_O           (heads gated by ``head_gate`` before W_O, below)
        x = LayerNorm(x + a)                               Add & Norm
        x = LayerNorm(x + GELU(x W_1 + b_1) W_2 + b_2)     Add & Norm

    The arrangement of lesson 09's post-norm encoder block; only the activation and eps differ.

    forward(x (batch, seq_len, d_model), mask=None (batch, 1, 1, seq_len) bool, True at real tokens,
    head_gate=None (heads,)) -> (batch, seq_len, d_model), weights (batch, heads, seq_len, seq_len).
    ``head_gate`` multiplies each head's output before the heads are concatenated and projected by W_O: 0 removes
    a head (ablation), 1 keeps it.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, eps: float = 1e-12):
        super().__init__()
        check_positive_int("d_ff", d_ff, "the feed-forward width")
        eps = check_number("eps", eps, "LayerNorm's epsilon", 0.0, strict=True)
        self.attention = MultiHeadAttention(d_model, num_heads)
        self.norm1, self.norm2 = nn.LayerNorm(d_model, eps=eps), nn.LayerNorm(d_model, eps=eps)
        self.feed_forward = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, head_gate: torch.Tensor | None = None):
        attention = self.attention
        check_tensor("x", x, 3, "(batch, seq_len, d_model)")
        check_float("x", x)
        check_size("x", x, 2, attention.d_model, "d_model of this layer")
        check_same_dtype(x=x, weights=attention.W_q.weight)
        if head_gate is not None:
            check_tensor("head_gate", head_gate, 1, "(heads,): 1 keeps a head, 0 removes it")
            check_size("head_gate", head_gate, 0, attention.num_heads, "one gate per head")
        return self._forward(x, mask, head_gate)

    def _forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, head_gate: torch.Tensor | None = None):
        attended, weights = self.attention._attend(x, x, x, mask, head_gate=head_gate)  # heads gated before W_O
        x = self.norm1(x + attended)  # Add & Norm
        return self.norm2(x + self.feed_forward(x)), weights


class BertEncoder(nn.Module):
    """BERT's encoder: embeddings, then ``num_layers`` ``BertLayer``s.

        x_0 = LayerNorm(E_word[ids] + E_position[0 .. seq_len-1] + E_type[types])
        x_l = BertLayer_l(x_{l-1}),  l = 0 .. num_layers - 1 (layers count from 0)

    forward(ids (batch, seq_len), real=None (batch, seq_len) bool, True at real tokens (False at padding),
    head_gates=None (num_layers, heads), types=None (batch, seq_len) token types: 0 for a first segment, 1 for a
    second, all 0 when None) -> hidden states (batch, seq_len, d_model), and the attention weights
    of every layer, a list of (batch, heads, seq_len, seq_len). Padding keys get weight 0 in every head; the
    hidden states at padding positions are computed but mean nothing. Load pretrained weights with
    ``attnedu.pretrained.load_bert_weights``.
    """

    def __init__(
        self, vocab_size: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, max_positions: int = 512,
        type_vocab_size: int = 2, eps: float = 1e-12,
    ):  # fmt: skip
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model), ("num_heads", num_heads),
                            ("num_layers", num_layers), ("max_positions", max_positions),
                            ("type_vocab_size", type_vocab_size)):  # fmt: skip
            check_positive_int(name, value, "a size")
        self.num_heads = num_heads
        self.word = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_positions, d_model)
        self.token_type = nn.Embedding(type_vocab_size, d_model)
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.layers = nn.ModuleList(BertLayer(d_model, num_heads, d_ff, eps) for _ in range(num_layers))

    def forward(
        self, ids: torch.Tensor, real: torch.Tensor | None = None, head_gates: torch.Tensor | None = None,
        types: torch.Tensor | None = None,
    ):  # fmt: skip
        check_ids("ids", ids, self.word.num_embeddings, 2, "(batch, seq_len) of token ids")
        batch, seq_len = ids.shape
        if seq_len > self.position.num_embeddings:
            raise ValueError(
                f"ids should be at most {self.position.num_embeddings} tokens long (the learned position table), got "
                f"{seq_len}; truncate the text"
            )
        mask = None
        if real is not None:
            check_bool_mask("real", real)
            if tuple(real.shape) != (batch, seq_len):
                raise ValueError(f"real should be (batch, seq_len) = {(batch, seq_len)}, True at real tokens, got "
                                 f"{describe(real)}")  # fmt: skip
            mask = real[:, None, None, :]  # (batch, 1, 1, seq_len): every head, every query
        if head_gates is not None:
            check_tensor("head_gates", head_gates, 2, "(num_layers, heads)")
            check_float("head_gates", head_gates)
            if tuple(head_gates.shape) != (len(self.layers), self.num_heads):
                raise ValueError(f"head_gates should be (num_layers, heads) = {(len(self.layers), self.num_heads)}, "
                                 f"got {describe(head_gates)}")  # fmt: skip
            check_finite("head_gates", head_gates, "1 keeps a head, 0 removes it")
        if types is None:
            types = torch.zeros_like(ids)
        else:
            check_ids("types", types, self.token_type.num_embeddings, 2, "(batch, seq_len) of token types")
            if tuple(types.shape) != (batch, seq_len):
                raise ValueError(f"types should be (batch, seq_len) = {(batch, seq_len)} like ids, got "
                                 f"{describe(types)}")  # fmt: skip
        positions = torch.arange(seq_len, device=ids.device)
        x = self.norm(self.word(ids) + self.position(positions) + self.token_type(types))
        all_weights = []
        for index, layer in enumerate(self.layers):
            x, weights = layer(x, mask, None if head_gates is None else head_gates[index])
            all_weights.append(weights)
        return x, all_weights


class AttentionOnlyTransformer(nn.Module):
    """A causal language model with attention layers only (Elhage et al. 2021; Olsson et al. 2022): no feed-forward
    layers, no layer norms, so everything it computes is attention, added to the residual stream:

        x_0 = E[tokens] + P[0 .. seq_len-1]
        x_l = x_{l-1} + MultiHead_l(x_{l-1}, causal mask),   l = 0 .. num_layers - 1
        logits = x_L W_U

    forward(tokens (batch, seq_len), head_gates=None (num_layers, num_heads)) -> logits (batch, seq_len,
    vocab_size), and each layer's attention weights (batch, heads, seq_len, seq_len). ``head_gates`` multiplies each
    head's output before the heads are concatenated and projected by W_O, as in ``BertEncoder``: 0 removes a head
    (ablation, ``attnedu.heads.head_gates``), 1 keeps it:

        MultiHead_l(x) = concat_h(g_{l,h} * softmax(q_h k_h^T / sqrt(d_h) + causal) v_h) W_O
    """

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, num_layers: int, max_positions: int,
                 seed: int = 0):  # fmt: skip
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model), ("num_heads", num_heads),
                            ("num_layers", num_layers), ("max_positions", max_positions)):  # fmt: skip
            check_positive_int(name, value, "a size")
        with seeded(seed):
            self.embedding = nn.Embedding(vocab_size, d_model)
            self.positions = LearnedPositions(max_positions, d_model)
            self.layers = nn.ModuleList(MultiHeadAttention(d_model, num_heads) for _ in range(num_layers))
            self.unembedding = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor, head_gates: torch.Tensor | None = None):
        check_ids("tokens", tokens, self.embedding.num_embeddings, 2, "(batch, seq_len) of token ids")
        num_heads = self.layers[0].num_heads
        if head_gates is not None:
            check_tensor("head_gates", head_gates, 2, "(num_layers, num_heads): 1 keeps a head, 0 removes it")
            check_float("head_gates", head_gates)
            if tuple(head_gates.shape) != (len(self.layers), num_heads):
                raise ValueError(f"head_gates should be (num_layers, num_heads) = {(len(self.layers), num_heads)}, "
                                 f"got {describe(head_gates)}")  # fmt: skip
        seq_len = tokens.shape[1]
        x = self.embedding(tokens) + self.positions(seq_len)
        mask = causal_mask(seq_len, device=tokens.device)[None, None]
        all_weights = []
        for index, attention in enumerate(self.layers):  # each head scaled by its gate before W_O
            gate = None if head_gates is None else head_gates[index]
            attended, weights = attention._attend(x, x, x, mask, head_gate=gate)
            x = x + attended
            all_weights.append(weights)
        return self.unembedding(x), all_weights
