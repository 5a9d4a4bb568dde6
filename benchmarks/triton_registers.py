"""Registers and spill bytes of the Triton attention kernels compiled for an H100 (sm_90a), on a machine with no GPU:
every candidate launch configuration of attnedu.triton_attention and a grid around them, bfloat16, head_dim 64 and
128, causal and not, the forward with tensor descriptors (TMA) and with pointers. Writes
benchmarks/triton_registers.txt, from which the candidate lists were chosen to spill nothing. From the repository
root (a few minutes on two cores):

    python3 benchmarks/triton_registers.py
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # attnedu from this checkout, installed or not

import torch  # noqa: E402
import triton  # noqa: E402

from attnedu import triton_attention as ta  # noqa: E402
from attnedu import triton_inspect as ti  # noqa: E402

GRIDS = {
    "forward": [(m, n, w, s) for m in (64, 128) for n in (32, 64, 128) for w in (4, 8) for s in (2, 3)],
    "dkdv": [(m, n, w, s) for m in (16, 32, 64) for n in (64, 128) for w in (4, 8) for s in (2, 3)],
    "dq": [(m, n, w, s) for m in (64, 128) for n in (32, 64) for w in (4, 8) for s in (2, 3)],
}
GRIDS["dkdv_atomic"] = GRIDS["dkdv"]


OUTPUT = Path(__file__).with_name("triton_registers.txt")


def main(path: Path = OUTPUT) -> None:
    requests = []
    for head_dim in (64, 128):
        for kind in ta.KINDS:
            for config in map(ta._as_dict, dict.fromkeys(ta.CONFIG_TABLES[kind][head_dim] + GRIDS[kind])):
                smem, registers = ta._resources(kind, config, head_dim, head_dim, 2)
                if smem > ta.H100_SHARED_MEMORY or registers > ta.MAX_REGISTERS:
                    continue  # pruned before compiling, as the autotuner does
                for causal in (True, False):
                    for tma in (False, True) if kind == "forward" else (False,):
                        requests.append({"kind": kind, "config": config, "head_dim": head_dim,
                                         "dtype": torch.bfloat16, "is_causal": causal, "tma": tma})  # fmt: skip
    table = defaultdict(dict)
    for r in ti.compile_kernels(requests):
        table[(r.kind, r.head_dim, tuple(r.config.values()), r.tma)][r.is_causal] = r
    lines = [f"Triton {triton.__version__}, sm_90a, bfloat16; registers / spill bytes (stores + loads) per thread, "
             "causal and not. '*': a candidate of attnedu.triton_attention. Written by benchmarks/triton_registers.py",
             f"{'kernel':<12}{'head_dim':>9}  {'(BLOCK_M, BLOCK_N, warps, stages)':<36}{'tma':>4}"
             f"{'causal':>14}{'not causal':>14}"]  # fmt: skip
    for (kind, head_dim, config, tma), by_causal in table.items():
        mark = "*" if config in ta.CONFIG_TABLES[kind][head_dim] else " "
        cells = [f"{by_causal[c].registers:>4} / {by_causal[c].spills:<5}" for c in (True, False)]
        lines.append(
            f"{kind:<12}{head_dim:>9}  {mark}{config!s:<35}{'yes' if tma else '':>4}{cells[0]:>14}{cells[1]:>14}"
        )
    path.write_text("\n".join(lines) + "\n")
    print(f"{len(requests)} compiles; wrote {path}")


if __name__ == "__main__":
    main()
