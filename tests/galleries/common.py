"""What the lesson galleries share: a constant, the marker of a bug with no specific diagnosis, and the
batch-of-one mistake that every exercise gets."""

from __future__ import annotations

from attnedu.checks.exercise import ONE

NEG_INF = float("-inf")

# In BUGS, in place of a diagnosis: no specific diagnosis is expected (then no known-wrong variant may be named)
GENERIC = "generic"


def squeezed(fn):
    """The correct function, with the classic `.squeeze()` that drops the batch axis of a batch of one."""

    def squeezed_fn(*args):
        result = fn(*args)
        return tuple(r.squeeze() for r in result) if isinstance(result, tuple) else result.squeeze()

    squeezed_fn.__name__ = f"{fn.__name__}_squeezed"
    return squeezed_fn


def batch_of_one(correct):
    """KIND_MUTANTS entries for a lesson's CORRECT: each exercise's first correct version, squeezed, fails on a
    batch of one only."""
    return [(name, squeezed(fns[0]), ONE, "batch of one") for name, fns in correct.items()]
