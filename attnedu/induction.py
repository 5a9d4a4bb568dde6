"""Induction heads, trained live (lesson 11, Part 2; Olsson et al. 2022): an attention-only model trained on
repeated random tokens, its in-context losses and head scores over training (the phase change), and what removing
its heads does (ablation).

    in_context_losses(logits, tokens, period)   the loss on the first and the second repeat
    induction_rule_losses(tokens, period)    the induction rule's own loss at each position of the repeat (one token
                                             matched, or more); induction_rule_loss: their mean
    INDUCTION, held_out_repeats, held_out_varied   the recipe lesson 11 trains with, and its held-out sequences
    train_induction(num_layers, held_out)    an attention-only model trained on repeated random tokens, with its
                                             in-context losses over training (the phase change)
    induction_scores(model, tokens)          prefix-matching and previous-token scores of every head
    crossing_steps(steps, values)            the steps at which a training curve made 10 %, 50 %, 90 % of its change
    rate_while(steps, reference, values)     how fast one curve changes while another makes the middle of its change
    calibration_ranges()                     the ranges over seeds lesson 11's calibration wrote
    repeat_losses(model, tokens, removed)    each sequence's loss on the repeat, with heads removed
    head_means, ablated_forward              a head replaced by 0 or by its mean output, seen by the later queries,
                                             keys, values or readout only (K-composition)
    induction_ablation(model, ..., removed)  the repeat's loss and the prefix-matching scores with heads removed

The scores on attention maps (prefix matching, previous token, head gates) are ``attnedu.head_scores``'. Each public
function checks its arguments in one call (the checks are in ``attnedu._validate_induction``), then the math;
the private ``_in_context_losses``, ``_induction_scores``, ``_head_means``, ``_ablated_forward`` and
``_crossing_steps`` are the unchecked versions the functions of this module call.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from torch import nn

from ._validate_induction import (
    check_ablated_forward,
    check_ablation_of,
    check_crossing_steps,
    check_head_means,
    check_in_context_losses,
    check_induction_ablation,
    check_induction_rule_losses,
    check_induction_scores,
    check_rate_while,
    check_repeat_losses,
    check_train_induction,
)
from .head_scores import _head_gates, _prefix_matching_layers, previous_token_score
from .runtime import progress, training_seed
from .tasks import repeated_tokens


def in_context_losses(logits: torch.Tensor, tokens: torch.Tensor, period: int) -> tuple[float, float]:
    """Next-token cross-entropy (nats) on sequences of a block of ``period`` tokens repeated twice: the mean over the
    predictions of the first repeat's tokens 1 .. period-1 (made from earlier tokens of the block only: random, so
    about ln vocab) and over the second repeat's tokens period+1 .. 2 period - 1 (each seen before: a model that reads
    its context copies it). logits (batch, 2 period, vocab), tokens (batch, 2 period) -> (first, second)."""
    period = check_in_context_losses(logits, tokens, period)
    return _in_context_losses(logits, tokens, period)


def _in_context_losses(logits, tokens, period):
    losses = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
    # losses[:, t] is the loss on token t + 1, predicted at position t
    return losses[:, : period - 1].mean().item(), losses[:, period:].mean().item()


def induction_rule_losses(tokens: torch.Tensor, period: int, context: int = 1) -> torch.Tensor:
    """The loss of the induction rule itself, applied exactly, at each position where ``in_context_losses`` measures
    the repeat: at each position t of the second block (t = period .. 2 period - 2), find every earlier position s < t
    whose last ``context`` tokens equal those before and at t, and predict the tokens that followed them, x[s + 1],
    each occurrence with equal weight (with ``context`` 1, the one-token rule: s holds the current token):

        loss_t = -ln( #{s < t : match(s, t), x[s + 1] = x[t + 1]} / #{s < t : match(s, t)} ),
        match(s, t): x[s - k] = x[t - k] for k = 0 .. min(context, s + 1) - 1

    (a context reaching before the sequence's start matches there: the copy at s = t - period always matches). With
    tokens drawn with replacement a block can hold a token twice, followed by different tokens: then the one-token
    rule is unsure, and a longer context can often tell the two apart. loss_t = 0 exactly where the rule is certain
    (every match was followed by the same token).
    tokens (n, 2 period) -> (n, period - 1), in nats, column k for t = period + k."""
    period, context = check_induction_rule_losses(tokens, period, context)
    losses = []
    for row in tokens.tolist():
        for t in range(period, 2 * period - 1):
            earlier = [s for s in range(t) if all(row[s - k] == row[t - k] for k in range(min(context, s + 1)))]
            right = sum(row[s + 1] == row[t + 1] for s in earlier)
            if not earlier or not right:
                raise ValueError(f"tokens should be a block of {period} tokens repeated once: in row {row}, position "
                                 f"{t} has no earlier occurrence followed by its next token")  # fmt: skip
            losses.append(0.0 if right == len(earlier) else -math.log(right / len(earlier)))
    return torch.tensor(losses, dtype=torch.float64).view(tokens.shape[0], period - 1)


def induction_rule_loss(tokens: torch.Tensor, period: int, context: int = 1) -> float:
    """The induction rule's own loss on the repeat (``induction_rule_losses``), the mean over sequences and
    positions, in nats (0 when every block's tokens are distinct)."""
    return induction_rule_losses(tokens, period, context).mean().item()


# --------------------------------------------------------------------------------------------
# Induction heads, trained live (Olsson et al. 2022)
# --------------------------------------------------------------------------------------------

# The recipe lesson 11 trains with, calibrated by benchmarks/calibration/lesson11.py: random tokens from 32, sequences
# of 32 tokens made of a block of 4..16 tokens repeated, 2 heads of width 16, AdamW lr 0.01, batch 32, 800 steps.
INDUCTION = dict(vocab=32, d_model=32, num_heads=2, length=32, periods=(4, 16), steps=800, batch=32, lr=0.01)
EVAL_PERIOD = 16  # held-out sequences: one block of 16 tokens, repeated once (32 tokens)


@dataclass
class InductionRun:
    """A model trained on repeated random tokens, and its in-context losses on the held-out sequences measured every
    ``every`` steps: ``steps[k]`` steps done, ``first[k]`` the loss on the first block (nothing to copy: about
    ln vocab or worse), ``second[k]`` on the repeat (copyable)."""

    model: nn.Module
    steps: list = field(default_factory=list)
    first: list = field(default_factory=list)
    second: list = field(default_factory=list)
    prefix: list = field(default_factory=list)
    previous: list = field(default_factory=list)
    seconds: float = 0.0


def held_out_repeats(count: int = 256, period: int = EVAL_PERIOD, vocab: int = INDUCTION["vocab"], seed: int = 12345):
    """``count`` sequences of one block of ``period`` random tokens repeated once, -> (count, 2 period). The data
    seed is not a training seed: the perturbed run leaves it alone."""
    return repeated_tokens(count, period, 2 * period, vocab, torch.Generator().manual_seed(seed))[0]


def held_out_varied(
    count: int = 256,
    periods=INDUCTION["periods"],
    length: int = INDUCTION["length"],
    vocab: int = INDUCTION["vocab"],
    seed: int = 54321,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` held-out sequences like the training data: each its own block length drawn from ``periods``,
    repeated to ``length`` -> tokens (count, length), periods (count,). On these a head that attends a fixed
    distance back cannot score as an induction head (``best_positional_score`` says how much it could)."""
    return repeated_tokens(count, periods, length, vocab, torch.Generator().manual_seed(seed))


def train_induction(
    num_layers: int,
    held_out: torch.Tensor,
    seed: int = 0,
    every: int = 25,
    desc: str = "training",
    scored: torch.Tensor | None = None,
    **recipe,
) -> InductionRun:
    """Train ``AttentionOnlyTransformer(vocab, d_model, num_heads, num_layers)`` to predict the next token of
    sequences of a random block repeated (``tasks.repeated_tokens``, each sequence with its own period, so that no
    fixed distance finds the earlier copy), with ``INDUCTION``'s recipe (any of its keys can be overridden).

    loss = mean over positions t of -ln p(token[t + 1] | tokens[0 .. t])  (causal: position t sees 0 .. t)

    ``held_out`` (n, 2 period): sequences of one block repeated once; ``in_context_losses`` on them every ``every``
    steps; given ``scored`` (m, seq_len) token ids (``held_out_varied``'s tokens), also ``induction_scores`` on them,
    in ``run.prefix`` and ``run.previous`` ((num_layers, num_heads) each). ``seed`` fixes the
    initialisation and the batches (through ``runtime.training_seed``); nothing is drawn
    from the global generators, so several runs can train at once (``runtime.in_parallel``).
    """
    from .attention_only import AttentionOnlyTransformer

    r, num_layers, every = check_train_induction(num_layers, held_out, every, scored, recipe, INDUCTION)
    model = AttentionOnlyTransformer(r["vocab"], r["d_model"], r["num_heads"], num_layers, r["length"], seed=seed)
    generator = torch.Generator().manual_seed(training_seed(seed))
    optimizer = torch.optim.AdamW(model.parameters(), lr=r["lr"], betas=(0.9, 0.95), weight_decay=0.0)
    run = InductionRun(model)
    period = held_out.shape[1] // 2

    def measure(step: int) -> None:
        with torch.no_grad():
            first, second = _in_context_losses(model(held_out)[0], held_out, period)
        run.steps.append(step)
        run.first.append(first)
        run.second.append(second)
        if scored is not None:
            prefix, previous = _induction_scores(model, scored)
            run.prefix.append(prefix)
            run.previous.append(previous)

    bar = progress(r["steps"], desc)
    start = time.perf_counter()
    measure(0)
    for step in range(r["steps"]):
        tokens, _ = repeated_tokens(r["batch"], r["periods"], r["length"], r["vocab"], generator)
        logits, _ = model(tokens)
        loss = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        bar.update()
        if (step + 1) % every == 0 or step + 1 == r["steps"]:
            measure(step + 1)
    run.seconds = time.perf_counter() - start
    bar.close()
    model.eval()
    return run


@torch.no_grad()
def induction_scores(
    model: nn.Module, tokens: torch.Tensor, head_gates: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefix-matching score (``prefix_matching``) and the previous-token score of every head of an
    ``AttentionOnlyTransformer`` on ``tokens`` (n, seq_len), each the mean over the sequences: -> two (num_layers,
    num_heads) tensors. ``head_gates`` (num_layers, num_heads): the model run with the heads gated 0 removed
    (``head_gates``)."""
    check_induction_scores(model, tokens)
    return _induction_scores(model, tokens, head_gates)


@torch.no_grad()
def _induction_scores(model, tokens, head_gates=None):
    _, weights = model(tokens) if head_gates is None else model(tokens, head_gates)
    prefix = _prefix_matching_layers(weights, tokens)
    previous = torch.stack([previous_token_score(w).mean(0) for w in weights])
    return prefix, previous


def crossing_steps(steps, values, fractions=(0.1, 0.5, 0.9)) -> list[int]:
    """When a quantity measured during training has made each fraction of its change from the first measurement to
    the last: for each f in ``fractions``, the first ``steps[k]`` with

        (values[k] - values[0]) / (values[-1] - values[0]) >= f

    (a falling loss and a rising score alike). ``steps`` and ``values``: sequences of equal length >= 2, the values
    numbers whose first and last differ. -> one step per fraction (the quantity may cross back later: this is the
    first crossing)."""
    steps, values, fractions = check_crossing_steps(steps, values, fractions)
    return _crossing_steps(steps, values, fractions)


def _crossing_steps(steps, values, fractions):
    change = values[-1] - values[0]
    return [next(s for s, v in zip(steps, values) if (v - values[0]) / change >= f) for f in fractions]


def rate_while(steps, reference, values, fractions=(0.25, 0.75), per: int = 100) -> float:
    """How fast ``reference`` changes while ``values`` makes the middle of its change (the phase-change test of
    lesson 11: the saving while the head forms). With s_a, s_b the steps at which ``values`` first made
    ``fractions[0]`` and ``fractions[1]`` of its change (``crossing_steps``) and r the reference curve,

        rate = (r(s_b) - r(s_a)) / (r[-1] - r[0])  /  ((s_b - s_a) / per)

    the fraction of the reference's whole change (first measurement to last) made in that window, per ``per`` steps
    (a window of zero steps counts as one interval between measurements). A curve that changes when the reference
    changes fastest gets a high rate; one that changes slowly over the whole run gets about the reference's average
    rate. ``steps``, ``reference``, ``values``: sequences of equal length, as for ``crossing_steps``. -> float."""
    reference, low, high, per, checked = check_rate_while(steps, reference, values, fractions, per)
    steps = list(steps)
    start, end = _crossing_steps(*checked)
    interval = min(b - a for a, b in zip(steps, steps[1:]))
    made = (reference[steps.index(end)] - reference[steps.index(start)]) / (reference[-1] - reference[0])
    return made / (max(end - start, interval) / per)


# The files lesson 11's calibration wrote, one per set of CPU kernels: the default (AVX-512 on the machine that made
# them), torch's AVX2 kernels, and MKL's compatible path with torch's default (no vector extension) kernels
CALIBRATION_FILES = ("calibration11.md", "calibration11_avx2.md", "calibration11_compatible.md")


def calibration_ranges(paths=None) -> dict:
    """The ranges over training seeds that lesson 11's calibration (``benchmarks/calibrate.py --lesson 11``) wrote,
    merged over its files (by default ``CALIBRATION_FILES`` in ``benchmarks/``, each the same seeds on another set of
    CPU kernels): lines
    ``- 2 layer(s), prefix: 0.675 .. 0.737`` -> {(2, "prefix"): (0.675, 0.737), ...}, the lowest low and the highest
    high over the files, so that a lesson quotes the calibration it asserts against instead of typing it. A key a
    file lacks is refused (the files come from different versions of the script)."""
    import re
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    if paths is None:
        paths = [folder / name for name in CALIBRATION_FILES]
    paths = [Path(p) for p in (paths if isinstance(paths, (list, tuple)) else [paths])]
    line = re.compile(r"^- (\d+) layer\(s\), (\w+): ([-\d.]+) \.\. ([-\d.]+)(?: \(\d+ runs\))?$", re.M)
    merged, keys = {}, None
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"calibration_ranges: no file {path}; make it: benchmarks/calibrate.py --lesson 11")
        found = {}
        for match in line.finditer(path.read_text()):
            layers, key, low, high = match.groups()
            found[(int(layers), key)] = (float(low), float(high))
        if keys is not None and set(found) != keys:
            raise ValueError(
                f"calibration_ranges: {path.name} holds other keys than {paths[0].name} ({sorted(set(found) ^ keys)}); "
                "re-run benchmarks/calibrate.py --lesson 11 for every file"
            )
        keys = set(found)
        for key, (low, high) in found.items():
            old = merged.get(key, (low, high))
            merged[key] = (min(old[0], low), max(old[1], high))
    return merged


def _repeat_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(n,): each sequence's mean next-token loss over the repeat's predictions, t = period .. 2 period - 2."""
    period = tokens.shape[1] // 2
    losses = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
    return losses[:, period:].mean(-1)  # losses[:, t]: the loss on token t + 1, predicted at t


@torch.no_grad()
def repeat_losses(model: nn.Module, tokens: torch.Tensor, removed=()) -> torch.Tensor:
    """The next-token loss on the repeat of each sequence, with the heads in ``removed`` ((layer, head) pairs) set to
    0 before W_O (``head_gates``). ``model``: an ``AttentionOnlyTransformer``; tokens (n, 2 period), a block repeated
    once. For sequence b, the mean over the repeat's positions t = period .. 2 period - 2 (the predictions of its
    tokens 1 .. period - 1, as in ``in_context_losses``) of

        -ln softmax(logits[b, t])[tokens[b, t + 1]]

    -> (n,), in nats."""
    pairs = check_repeat_losses(model, tokens, removed)
    logits, _ = model(tokens, _head_gates(len(model.layers), model.layers[0].num_heads, pairs))
    return _repeat_loss(logits, tokens)


# Where a removed head's output may be seen: the queries, keys and values of the layers above it, and the readout
PATHS = ("queries", "keys", "values", "readout")


@torch.no_grad()
def head_means(model: nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Each head's output before W_O, averaged over the sequences of ``tokens`` (n, seq_len) at each position: the
    values that mean ablation puts in place of a head (``ablated_forward``). -> one (heads, seq_len, head_dim) per
    layer."""
    check_head_means(model, tokens)
    return _head_means(model, tokens)


def _head_means(model, tokens):
    from .masks import causal_mask

    seq_len = tokens.shape[1]
    x = model.embedding(tokens) + model.positions(seq_len)
    mask = causal_mask(seq_len, device=tokens.device)[None, None]
    means = []
    for attention in model.layers:
        heads, _ = attention._heads(x, x, x, mask)  # (n, heads, seq_len, head_dim), before W_O
        means.append(heads.mean(0))
        x = x + attention._merge(heads)
    return means


@torch.no_grad()
def ablated_forward(model: nn.Module, tokens: torch.Tensor, removed, means=None, paths=PATHS):
    """An ``AttentionOnlyTransformer``'s forward pass with the heads in ``removed`` ((layer, head) pairs) replaced, the
    replacement seen only through ``paths``. Head i of layer l, before W_O, becomes

        0                    (``means`` None: zero ablation, what ``head_gates`` does), or
        m_{l,i}[t]           its mean output at position t (``means`` = ``head_means(model, some_tokens)``: mean
                             ablation, which keeps what the head writes on average and removes what it reads),

    and the model keeps two residual streams: x, the intact one, and x~, the one with the replacement. A layer above
    reads its queries from x~ if "queries" is in ``paths`` (else from x), its keys and its values likewise, and adds
    its output to both streams; the readout reads x~ if "readout" is in ``paths``. All four paths: an ordinary
    ablation (with zeros, ``model(tokens, head_gates)``). ("keys",) alone: only the keys of the layers above miss
    the head, the test of K-composition (Elhage et al. 2021: a layer-1 head whose keys are built from a layer-0
    head's output). -> logits (n, seq_len, vocab), and each layer's attention weights."""
    removed, paths = check_ablated_forward(model, tokens, removed, means, paths, PATHS)
    return _ablated_forward(model, tokens, removed, means, paths)


def _ablated_forward(model, tokens, removed, means, paths):
    from .masks import causal_mask

    seq_len = tokens.shape[1]
    x = model.embedding(tokens) + model.positions(seq_len)
    mask = causal_mask(seq_len, device=tokens.device)[None, None]
    cut = x  # the stream that carries the replacement (the same as x until a removed head)
    all_weights = []
    for index, attention in enumerate(model.layers):
        queries, keys, values = (cut if path in paths else x for path in ("queries", "keys", "values"))
        heads, weights = attention._heads(queries, keys, values, mask)  # before W_O
        replaced = heads.clone()
        for layer, head in removed:
            if layer == index:
                replaced[:, head] = 0.0 if means is None else means[index][head]
        out, out_cut = attention._merge(heads), attention._merge(replaced)
        if any(layer == index for layer, _ in removed):  # the removal starts here: x~ gets the replaced heads
            x, cut = x + out, cut + out_cut
        else:  # a layer above it (or below): its output, computed from its chosen inputs, goes to both streams
            x, cut = x + out_cut, cut + out_cut
        all_weights.append(weights)
    return model.unembedding(cut if "readout" in paths else x), all_weights


@torch.no_grad()
def induction_ablation(
    model: nn.Module, held_out: torch.Tensor, scored: torch.Tensor, removed=(), mean: bool = False, paths=PATHS
) -> tuple[float, torch.Tensor]:
    """What an ``AttentionOnlyTransformer`` does with the heads in ``removed`` ((layer, head) pairs) replaced
    (``ablated_forward``): by 0 before W_O, or with ``mean`` by their mean output at each position over ``scored``
    (the training-like sequences), seen through ``paths`` only (by default everywhere). -> the loss on the repeat of
    ``held_out`` (n, 2 period), the mean of ``repeat_losses``'s per-sequence losses, and the prefix-matching score
    of every head on ``scored`` (m, seq_len) token ids (``held_out_varied``'s), (num_layers, num_heads). With
    ``removed`` empty, the trained model as it is."""
    check_induction_ablation(model, held_out, scored, mean)
    means = _head_means(model, scored) if mean else None  # measured before the rest is checked
    removed, paths = check_ablation_of(model, held_out, scored, removed, means, paths, PATHS)
    logits, _ = _ablated_forward(model, held_out, removed, means, paths)
    second = _repeat_loss(logits, held_out).mean().item()
    _, weights = _ablated_forward(model, scored, removed, means, paths)
    return second, _prefix_matching_layers(weights, scored)
