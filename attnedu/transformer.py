"""Small attention models of lessons 04-07, their training experiments, and the parameter counts of big ones.

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

Lesson 09's blocks are in ``attnedu.block_parts`` (RMSNorm, SwiGLU, QK-norm), ``attnedu.blocks`` (the blocks, a
decoder-only LM) and ``attnedu.init_gradients``; lesson 11's models in ``attnedu.bert`` and ``attnedu.attention_only``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from ._validate import (
    check_bool,
    check_choice,
    check_ids,
    check_instance,
    check_int,
    check_number,
    check_positive_int,
    describe,
)
from .masks import causal_mask, sliding_window_mask
from .multihead import MultiHeadAttention
from .positional import LearnedPositions, alibi_bias, sinusoidal_encoding
from .runtime import progress, seeded, training_seed
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
