"""The bfloat16 ring's gradients against float64 (lesson 12; tests/test_context_parallel.py's bfloat16 test calibrates
its factor here): causal zigzag ring attention at P = 2 and 4, N = 64 and 256, 2 heads of 16, seeds 0-4; for dQ, dK
and dV, the largest absolute difference from float64 attention on the same bfloat16 inputs, beside single-process
bfloat16 SDPA's, and the bytes each rank sent against ``ring_bytes``. One JSON line per case on stdout.

    PYTHONPATH=. python benchmarks/ring_bfloat16.py > out.jsonl    (about 10 s; starts the ranks with run_ranks)
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

import attnedu.context_parallel as cp

SHAPES = ((1, 2, 64, 16), (1, 2, 256, 16))
SEEDS = range(5)


def _rank(rank, world_size, batches):
    rows = []
    for inputs in batches:
        q, k, v, d_out = (cp.shard_sequence(x, rank, world_size, "zigzag") for x in inputs)
        sent = []
        out, lse = cp.ring_attention_forward(q, k, v, is_causal=True, layout="zigzag", sent=sent)
        forward = sum(sent)
        grads = cp.ring_attention_backward(q, k, v, out, lse, d_out, is_causal=True, layout="zigzag", sent=sent)
        rows.append((grads, {"forward": forward, "backward": sum(sent) - forward}))
    return rows


def _largest_errors(grads, inputs):
    exact = [x.double().requires_grad_() for x in inputs[:3]]
    F.scaled_dot_product_attention(*exact, is_causal=True).backward(inputs[3].double())
    return [float((g.double() - x.grad).abs().max()) for g, x in zip(grads, exact, strict=True)]


def main() -> None:
    for shape in SHAPES:
        batches = []
        for seed in SEEDS:
            generator = torch.Generator().manual_seed(seed)  # as tests/test_context_parallel.py's _inputs
            batches.append([torch.randn(shape, generator=generator, dtype=torch.float64).bfloat16() for _ in range(4)])
        for world_size in (2, 4):
            per_rank = cp.run_ranks(_rank, world_size, batches, timeout=300)
            for seed, inputs in zip(SEEDS, batches, strict=True):
                mine = [r[seed] for r in per_rank]
                ring = [cp.gather_sequence([m[0][i] for m in mine], "zigzag") for i in range(3)]
                single = [x.clone().requires_grad_() for x in inputs[:3]]
                F.scaled_dot_product_attention(*single, is_causal=True).backward(inputs[3])
                ring_errors, single_errors = (
                    _largest_errors(ring, inputs),
                    _largest_errors([x.grad for x in single], inputs),
                )
                row = {"shape": shape, "P": world_size, "seed": seed, "ring": ring_errors, "single": single_errors,
                       "ratio": [a / b for a, b in zip(ring_errors, single_errors, strict=True)],
                       "sent": [m[1] for m in mine],
                       "ring_bytes": cp.ring_bytes(*shape, world_size, 2)}  # fmt: skip
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
