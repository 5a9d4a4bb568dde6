"""Training with teacher forcing, greedy decoding, and accuracy by source length; training and scoring a character
language model (lesson 09)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from ._validate import (
    check_bool,
    check_float,
    check_instance,
    check_int,
    check_items,
    check_number,
    check_positive_int,
    check_tensor,
    describe,
)
from .data import PAD_ID, TARGET_VOCAB, BatchSampler, Pair, make_batch
from .models import Seq2Seq
from .runtime import progress, training_seed
from .tasks import CharCorpus

# The training recipe of the translation models of lessons 01-03, calibrated over training seeds
# in benchmarks/calibration.md: every model gets the same budget, so comparisons are fair.
STEPS = 300
BATCH_SIZE = 64
LR = 1e-2
# Lesson 03 trains six models at once: 225 steps each keeps it within its minute on the slow machine, and every
# effect it asserts holds at 225 steps over the calibration seeds (benchmarks/calibration.md).
STEPS_LESSON_03 = 225


@dataclass
class TrainLog:
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the training steps (batches, forward, backward, update)
    lrs: list[float] = field(default_factory=list)  # the learning rate of each step

    @property
    def ms_per_step(self) -> float:
        return 1000 * self.seconds / max(len(self.losses), 1)

    @property
    def final_loss(self) -> float:
        """Mean loss over the last 50 steps (less noisy than the last step alone)."""
        if not self.losses:
            raise ValueError("losses should hold at least one step, got none; train(...) fills the log")
        tail = self.losses[-50:]
        return sum(tail) / len(tail)


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per target word, ignoring padding. logits (batch, len, vocab), targets (batch, len).

    A batch whose targets are all padding has no word to score: that raises rather than returning NaN.
    NaN or infinite logits are not hidden: the loss is then NaN or infinite too."""
    check_tensor("logits", logits, 3, "(batch, tgt_len, vocab)")
    check_float("logits", logits)
    check_tensor("targets", targets, 2, "(batch, tgt_len) of token ids")
    if targets.dtype == torch.bool or targets.is_floating_point() or targets.is_complex():
        raise TypeError(
            f"targets should be token ids (an integer dtype such as torch.long), got dtype {targets.dtype}; "
            "pass batch.tgt_out"
        )
    if logits.shape[:2] != targets.shape:
        raise ValueError(
            f"logits should have (batch, tgt_len) = {tuple(targets.shape)} as the targets, got shape "
            f"{tuple(logits.shape)}; score the model's output for batch.tgt_in against batch.tgt_out"
        )
    real = targets != PAD_ID
    if not bool(real.any()):
        raise ValueError(
            f"targets should hold at least one word that is not padding (id {PAD_ID}), got only padding: the mean "
            "loss over no words is undefined (NaN); leave all-padding batches out"
        )
    if int(targets[real].min()) < 0 or int(targets[real].max()) >= logits.shape[2]:
        raise ValueError(
            f"targets should be ids in 0..{logits.shape[2] - 1} (the logits' vocabulary), got ids from "
            f"{int(targets[real].min())} to {int(targets[real].max())}; use the target vocabulary's ids"
        )
    return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD_ID)


def train(
    model: Seq2Seq,
    pairs: Sequence[Pair],
    steps: int = STEPS,
    batch_size: int = BATCH_SIZE,
    lr: float = LR,
    clip: float = 5.0,
    seed: int = 0,
    desc: str = "training",
    cosine: bool = True,
) -> TrainLog:
    """Adam with gradient clipping on random batches of ``pairs``; shows a progress bar.

    With ``cosine`` the learning rate decays from ``lr`` to 0 along a half cosine, which lets a
    short run settle instead of ending mid-bounce. ``seed`` fixes the order of the batches
    (through ``attnedu.runtime.training_seed``, so the test command's perturbed run moves it).
    """
    check_instance("model", model, nn.Module, "a model (an nn.Module such as Seq2Seq.build(...))")
    steps = check_positive_int("steps", steps, "training steps")
    lr = check_number("lr", lr, "the learning rate", 0.0, strict=True)
    clip = check_number("clip", clip, "the largest gradient norm", 0.0, strict=True)
    check_bool("cosine", cosine, "whether the learning rate decays")
    sampler = BatchSampler(pairs, batch_size, seed=training_seed(seed))
    # fused: one C++ call updates every parameter (measured 8-9% faster per step on these small models)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=True)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps) if cosine else None

    def batch_loss() -> torch.Tensor:
        batch = sampler.next()
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
        return sequence_loss(logits, batch.tgt_out)

    return _fit(model, batch_loss, optimizer, schedule, steps, clip, desc, show_every=25)


def _fit(
    model: nn.Module,
    batch_loss: Callable[[], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler | None,
    steps: int,
    clip: float,
    desc: str,
    show_every: int,
) -> TrainLog:
    """The loop every recipe here shares, ``steps`` times: the loss of the next batch (``batch_loss()``), its
    gradients, their norm clipped to ``clip``, an optimizer step, then a schedule step. The log holds each step's
    loss and learning rate; a progress bar shows the loss every ``show_every`` steps. The model is in training mode
    meanwhile and in eval mode after."""
    log = TrainLog()
    model.train()
    bar = progress(steps, desc)
    start = time.perf_counter()
    for step in range(steps):
        loss = batch_loss()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        log.lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if schedule is not None:
            schedule.step()
        log.losses.append(loss.item())
        bar.update()
        if step % show_every == 0:
            bar.set_postfix(loss=f"{log.losses[-1]:.3f}")
    log.seconds = time.perf_counter() - start
    bar.close()
    model.eval()
    return log


@dataclass
class Translations:
    """Greedy translations of a list of pairs."""

    pairs: list[Pair]
    predictions: list[list[str]]

    @property
    def exact_match(self) -> float:
        """Fraction of sentences translated exactly (every word, nothing extra)."""
        if not self.pairs:
            raise ValueError("pairs should hold at least one pair, got none: the exact match of nothing is undefined")
        hits = sum(list(p.target) == pred for p, pred in zip(self.pairs, self.predictions))
        return hits / len(self.pairs)


def translate_pairs(model: Seq2Seq, pairs: Sequence[Pair], batch_size: int = 500) -> Translations:
    """Greedy-decode every pair's source (at most target length + 5 steps)."""
    check_instance("model", model, nn.Module, "a model such as Seq2Seq.build(...)")
    pairs = check_items("pairs", pairs, Pair, "Pairs (from make_pairs)")
    batch_size = check_positive_int("batch_size", batch_size, "sentences decoded at once")
    model.eval()
    predictions: list[list[str]] = []
    for start in range(0, len(pairs), batch_size):
        batch = make_batch(pairs[start : start + batch_size])
        tokens, _ = model.greedy_decode(batch.src, batch.src_lengths, max_len=batch.tgt_out.shape[1] + 5)
        predictions += [TARGET_VOCAB.decode(row.tolist()) for row in tokens]
    return Translations(list(pairs), predictions)


def accuracy_by_length(model: Seq2Seq, test: Mapping[tuple[int, int], Sequence[Pair]]) -> dict[tuple[int, int], float]:
    """Exact-match accuracy per source-length bucket."""
    check_buckets("test", test)
    return {bucket: translate_pairs(model, pairs).exact_match for bucket, pairs in test.items()}


def accuracy_table(curves: Mapping[str, Mapping[tuple[int, int], float]]) -> str:
    """Text table: one row per model, one column per length bucket; every model needs the same buckets."""
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError(
            f"curves should be a non-empty dict {{model name: {{(lo, hi): accuracy}}}}, got {describe(curves)}; "
            "e.g. {'attention': accuracy_by_length(model, data.test)}"
        )
    buckets = None
    for label, by_bucket in curves.items():
        if not isinstance(label, str) or not isinstance(by_bucket, Mapping) or not by_bucket:
            raise TypeError(
                f"curves should map a model name (str) to a non-empty dict {{(lo, hi): accuracy}}, got "
                f"{describe(label)} -> {describe(by_bucket)}"
            )
        if buckets is None:
            buckets = list(by_bucket)
        elif list(by_bucket) != buckets:
            raise ValueError(
                f"curves should all have the same buckets, got {list(by_bucket)} for {label!r} and {buckets} for "
                "the first; measure every model on the same test set"
            )
        for bucket, value in by_bucket.items():
            check_number(f"curves[{label!r}][{bucket}]", value, "an accuracy")
    width = max(len(label) for label in curves) + 2
    lines = ["".ljust(width) + "".join(f"{lo}-{hi}".rjust(8) for lo, hi in buckets)]
    for label, by_bucket in curves.items():
        lines.append(label.ljust(width) + "".join(f"{by_bucket[b]:8.3f}" for b in buckets))
    return "\n".join(lines)


def check_buckets(name: str, test) -> None:
    """Refuse anything but the dict of length buckets that ToyTranslation.generate().test holds."""
    if not isinstance(test, Mapping):
        raise TypeError(
            f"{name} should be a dict {{(lo, hi): list of Pairs}}, such as ToyTranslation.generate().test, got "
            f"{describe(test)}; for one list of pairs use translate_pairs(model, pairs)"
        )
    for bucket, pairs in test.items():
        check_items(f"{name}[{bucket}]", pairs, Pair, "Pairs (from make_pairs)")


# --------------------------------------------------------------------------------------------
# Language models (lesson 09): next-character prediction on a CharCorpus
# --------------------------------------------------------------------------------------------


def train_lm(
    model: nn.Module, corpus: CharCorpus, steps: int, batch_size: int, length: int, lr: float, warmup: int = 0,
    clip: float = 1.0, seed: int = 0, desc: str = "training",
) -> TrainLog:  # fmt: skip
    """Train ``model`` (tokens (batch, length) -> logits (batch, length, vocab)) to predict the next character of
    random windows of ``corpus``'s training split; shows a progress bar.

    AdamW (betas 0.9, 0.95) with gradient clipping; the learning rate rises linearly from 0 to ``lr`` over ``warmup``
    steps, then decays to 0 along a half cosine. ``seed`` fixes the order of the windows (through
    ``attnedu.runtime.training_seed``, so the test command's perturbed run moves it).
    """
    check_instance("model", model, nn.Module, "a model (an nn.Module such as DecoderLM(...))")
    check_instance("corpus", corpus, CharCorpus, "a CharCorpus (CharCorpus.load())")
    steps = check_positive_int("steps", steps, "training steps")
    warmup = check_int("warmup", warmup, "steps of learning-rate warm-up", minimum=0, maximum=steps - 1)
    lr = check_number("lr", lr, "the learning rate", 0.0, strict=True)
    clip = check_number("clip", clip, "the largest gradient norm", 0.0, strict=True)
    generator = torch.Generator().manual_seed(training_seed(seed))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), fused=True)

    def factor(step: int) -> float:  # of lr: warm-up, then half a cosine
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / (steps - warmup)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)

    def batch_loss() -> torch.Tensor:
        inputs, targets = corpus.batch(batch_size, length, generator)
        return nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())

    return _fit(model, batch_loss, optimizer, schedule, steps, clip, desc, show_every=10)


@torch.no_grad()
def lm_loss(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int = 128, context: int | None = None
) -> float:
    """Mean cross-entropy (nats per character) of ``model`` on windows ``inputs`` -> ``targets`` (n, length), such as
    ``CharCorpus.windows``: every window scored, ``batch_size`` at a time.

    ``context``: if given, the prediction of ``targets[:, t]`` may read only the last ``context`` characters,
    ``inputs[:, max(0, t - context + 1) : t + 1]``, instead of the whole window up to t: each position from
    ``context - 1`` on is scored as the last position of its own window of ``context`` characters (a causal model
    at the positions before that sees fewer than ``context`` characters anyway). ``context >= length`` is the plain
    loss. How much worse the loss gets as ``context`` shrinks says how much of the context the model uses."""
    check_instance("model", model, nn.Module, "a model (an nn.Module such as DecoderLM(...))")
    check_tensor("inputs", inputs, 2, "(n, length) of token ids")
    check_tensor("targets", targets, 2, "(n, length) of token ids")
    if inputs.shape != targets.shape:
        raise ValueError(f"targets should have the shape of inputs, {tuple(inputs.shape)}, got {describe(targets)}")
    batch_size = check_positive_int("batch_size", batch_size, "windows scored at once")
    length = inputs.shape[1]
    if context is not None:
        context = check_positive_int("context", context, "how many characters each prediction may read")
    model.eval()
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(inputs), batch_size):
            chunk_in, chunk = inputs[start : start + batch_size], targets[start : start + batch_size]
            logits = model(chunk_in)  # (b, length, vocab): position t reads positions 0..t
            if context is not None and context < length:
                cut = chunk_in.unfold(1, context, 1)  # (b, length - context + 1, context): the windows ending at t
                last = model(cut.reshape(-1, context))[:, -1]  # the prediction at each window's last position
                logits = torch.cat([logits[:, : context - 1], last.view(len(chunk_in), -1, last.shape[-1])], dim=1)
            total += nn.functional.cross_entropy(logits.flatten(0, 1), chunk.flatten(), reduction="sum").item()
    return total / targets.numel()
