"""Why the norm moved (lesson 09): the gradients at initialisation of post-norm and pre-norm stacks, measured as
Xiong et al. (2020) analyse them.

BlockStack                a causal LM of LayerNorm blocks, post-norm or pre-norm, with identical weights
ffn_gradient_norms        one stack's W_2 gradients block by block, and the residual stream's size and gradient
init_gradient_experiment  every arm of GRADIENT_ARMS, averaged over three inits, as the lesson and its calibration
                          run it
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from ._validate import (
    check_bool,
    check_choice,
    check_ids,
    check_instance,
    check_number,
    check_positive_int,
    describe,
)
from .blocks import PostNormEncoderBlock
from .masks import causal_mask
from .positional import sinusoidal_encoding
from .runtime import in_parallel, seeded
from .transformer import Block

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
