"""What a sandboxed submission sent back, read as untrusted data, and turned into check results.

Everything in a work folder may have been written by the learner's code: a file may be a
symbolic link to somewhere else, a FIFO, huge, or a crafted pickle. So files are opened below the
work folder without following any link, only regular files of bounded size are read, JSON is
parsed as JSON, and tensors are loaded with ``torch.load(weights_only=True)``, which builds
tensors and plain containers and nothing else. What came back is then compared with the
references here, in the grader's process, by the same :func:`attnedu.checks.diagnosis.run_check`
that learners use in their notebooks.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import stat
from pathlib import Path

import torch
from torch import nn

from ..checks.calling import MAX_PRINTED, Call
from ..checks.diagnosis import run_check
from ..checks.exercise import Case, Exercise
from ..checks.results import FAILED, NOT_ATTEMPTED, CheckResult

MAX_RECORD_BYTES = 64 << 20
MAX_JSON_BYTES = 1 << 20
MAX_ELEMENTS = 1 << 22
OUTCOMES = ("done", "timeout", "crashed", "error", "not_run")


def read_inside(root: Path, relative: str, max_bytes: int) -> bytes | None:
    """The bytes of ``root/relative`` if it is a regular file of at most ``max_bytes``, reached without
    following any symbolic link below ``root``; else None."""
    parts = Path(relative).parts
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is then rejected as not a regular file
        file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        try:
            info = os.fstat(file_fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
                return None
            with os.fdopen(os.dup(file_fd), "rb") as f:
                data = f.read(max_bytes + 1)
            return data if len(data) <= max_bytes else None
        finally:
            os.close(file_fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def load_json(root: Path, relative: str) -> dict | None:
    data = read_inside(root, relative, MAX_JSON_BYTES)
    try:
        value = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def load_record(root: Path, relative: str):
    """A tensor file from the sandbox, or None if it is missing or not plain data."""
    data = read_inside(root, relative, MAX_RECORD_BYTES)
    if data is None:
        return None
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception:
        return None


class Opaque:
    """Something a learner's function returned that is not plain data: only its type's name came back.
    Each instance's class is named after that type, so messages say "got a ndarray"."""


def _opaque(name) -> Opaque:
    clean = re.sub(r"\W", "_", str(name))[:60] or "object"
    return type(clean, (Opaque,), {})()


def decode(value, depth: int = 0):
    """Check what came back: tensors, numbers, strings, tuples and lists of them; the rest becomes Opaque."""
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.numel() > MAX_ELEMENTS:
            return _opaque("tensor_too_large_to_compare")
        return value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)) and depth < 6:
        items = [decode(v, depth + 1) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict) and set(value) == {"__opaque__"}:
        return _opaque(value["__opaque__"])
    return _opaque(type(value).__name__)


def rebuild_args(original: tuple, sent) -> tuple:
    """The arguments as the learner's function left them. Unusable data counts as "unchanged": claiming
    that only spares a learner a message, never earns a mark."""
    if not isinstance(sent, tuple) or len(sent) != len(original):
        return copy.deepcopy(original)
    rebuilt = []
    for before, after in zip(original, sent, strict=True):
        if isinstance(before, nn.Module):
            module = copy.deepcopy(before)
            state = after.get("__state_dict__") if isinstance(after, dict) else None
            if isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values()):
                try:
                    module.load_state_dict(state, strict=True)
                except Exception:
                    pass
            rebuilt.append(module)
        elif isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor) and after.numel() <= MAX_ELEMENTS:
            rebuilt.append(after)
        else:
            rebuilt.append(copy.deepcopy(before))
    return tuple(rebuilt)


def _text(value, limit: int = 500) -> str:
    return value[:limit] if isinstance(value, str) else ""


def remote_call(records: dict[int, dict], outcome: str):
    """A caller for run_check that replays what the kernel recorded, case by case (numbered from 1)."""

    def call(number: int, case: Case, time_limit: float) -> tuple[Call, tuple]:
        record = records.get(number - 1)
        if record is None:
            if outcome == "timeout":
                return Call(timed_out=True, stopped_outside=True), copy.deepcopy(case.args)
            if outcome == "crashed":
                return Call(crashed=True), copy.deepcopy(case.args)
            missing = Call(error_name="RuntimeError", error_text="no result came back from the kernel")
            return missing, copy.deepcopy(case.args)
        result = Call(
            value=decode(record.get("value")),
            error_name=_text(record.get("error_name"), 100),
            error_text=_text(record.get("error_text")),
            error_line=_text(record.get("error_line")),
            not_implemented=record.get("not_implemented") is True,
            timed_out=record.get("timed_out") is True,
            printed=_text(record.get("printed"), MAX_PRINTED + 100),
            gradients=decode(record.get("gradients")),
            gradient_error=_text(record.get("gradient_error")),
            value64=decode(record.get("value64")),
            gradients64=decode(record.get("gradients64")),
            used_reference=_text(record.get("used_reference")),
        )
        return result, rebuild_args(case.args, record.get("args"))

    return call


def check_remote(exercise: Exercise, cases: list[Case], work: Path, outcome: str, note: str, time_limit: float):
    """(the CheckResult for ``exercise`` from ``work/out/NAME/``, the function's meta data, the outcome).

    ``outcome`` is the worker's ("timeout" and "crashed" there mean it restarted the kernel); a kernel
    that stopped its own child reports "timeout" or "crashed" in ``outcome.json``, returned as
    "child timeout" or "child crashed"."""
    name = exercise.name
    meta = load_json(work, f"out/{name}/meta.json") or {}
    if outcome == "error":
        message = f"the grader could not call `{name}` in your notebook's kernel ({note or 'no reason given'})."
        return CheckResult(name, FAILED, message, hint_text=exercise.hint), meta, outcome
    if outcome == "not_run":
        return None, meta, outcome  # the caller says why
    if meta.get("defined") is False:
        return CheckResult(name, NOT_ATTEMPTED, f"no function named `{name}` was defined."), meta, outcome
    if meta.get("callable") is False:
        kind = _text(meta.get("type"), 60) or "something else"
        message = f"`{name}` is not a function: it is a {kind}. Define it with `def {name}(...):`."
        return CheckResult(name, FAILED, message, hint_text=exercise.hint), meta, outcome
    child = (load_json(work, f"out/{name}/outcome.json") or {}).get("outcome")
    if outcome == "done" and child in ("timeout", "crashed"):
        outcome = f"child {child}"
    records = {}
    for index in range(len(cases)):
        record = load_record(work, f"out/{name}/{index}.pt")
        if isinstance(record, dict):
            records[index] = record
    if not meta and not records and outcome == "done":
        outcome = "crashed"  # nothing came back at all
    missing = outcome.removeprefix("child ")
    result = run_check(exercise, name, time_limit, caller=remote_call(records, missing), cases=cases)
    return result, meta, outcome
