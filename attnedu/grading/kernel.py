"""Runs inside the learner's kernel, one line at a time, sent by the grading worker:

    call_exercise(globals(), "additive_score", "cases/additive_score.pt", "out/additive_score", 5.0)

calls the learner's function on the inputs the grader wrote (under the kernel's own alarm, on
its own copies; an answer that is not called directly, such as a Triton kernel, through its
exercise's ``launch``) and saves what happened, one file per case, for the grader to compare in its
own process. Nothing is compared here, and nothing here is trusted: a submission can replace
this module, and all it gains is to choose the outputs its "function" returns.

On Linux the calls run in a child process forked from the kernel, which the kernel kills once a
call runs past its time limit: a function that ignores the alarm, or calls ``os._exit``, costs
that child, not the kernel, and the next exercise needs no restart. ``outcome.json`` then says
"timeout" or "crashed". Elsewhere, or if ``os.fork`` is gone, the calls run in the kernel
itself, and the worker's own deadline (outside the kernel) restarts it when needed.

What is saved is plain data that ``torch.load(weights_only=True)`` accepts: tensors, tuples,
lists, numbers, strings; anything else is described by its type name, a module by its state.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import nn

from ..checks import EXERCISES
from ..checks.calling import call_learner

MAX_ELEMENTS = 1 << 22  # a larger tensor is described, not sent
MAX_ITEMS = 64  # of a tuple or list
MAX_TEXT = 500  # characters of an error message or a string
MAX_DEPTH = 4
CHILD_GRACE = 0.5  # seconds past a call's time limit before its child is killed (the alarm comes first)
CHILD_SETUP = 3.0  # for the child to load the inputs, before the first call


def call_exercise(namespace: Mapping, name: str, cases_path: str, out_dir: str, time_limit: float) -> None:
    """For an exercise whose function takes part in training (``Exercise.gradients``), each case is also called a
    second time with gradients on, and a third in float64, and the gradients that flow back to its inputs are saved
    too (with the float64 call's output)."""
    out = Path(out_dir)
    fn = namespace.get(name)
    _write_json(out / "meta.json", describe(fn))
    if not callable(fn):
        return
    exercise = EXERCISES.get(name)
    launch = exercise.launch if exercise is not None else None  # e.g. a Triton kernel, run by the course's launcher
    forbidden = exercise.forbidden if exercise is not None else ()  # the course's modules the answer may not run
    gradients = bool(exercise is not None and exercise.gradients)  # it takes part in training: measure them too
    fork = getattr(os, "fork", None)
    if sys.platform.startswith("linux") and callable(fork):
        _call_in_child(fork, fn, cases_path, out, time_limit, gradients, launch, forbidden)
    else:
        _call_cases(fn, cases_path, out, time_limit, gradients, launch, forbidden)


def _call_cases(
    fn: Callable,
    cases_path: str,
    out: Path,
    time_limit: float,
    gradients: bool = False,
    launch: Callable | None = None,
    forbidden: tuple = (),
) -> None:
    cases = torch.load(cases_path, weights_only=False)  # written by the grader: modules included
    for index, args in enumerate(cases):
        spare = copy.deepcopy(tuple(args)) if gradients else None
        call = call_learner(fn, args, time_limit, spare, launch, forbidden)
        record = {
            "value": encode(call.value),
            "args": encode(tuple(args)),  # as the function left them: a change in place shows
            "error_name": call.error_name[:100],
            "error_text": call.error_text[:MAX_TEXT],
            "error_line": call.error_line[:MAX_TEXT],
            "not_implemented": call.not_implemented,
            "timed_out": call.timed_out,
            "printed": call.printed,
            "gradients": encode(call.gradients),
            "gradient_error": call.gradient_error[:MAX_TEXT],
            "value64": encode(call.value64),  # the same in float64, where the function runs in float64
            "gradients64": encode(call.gradients64),
            "used_reference": call.used_reference[:MAX_TEXT],  # the course's own code it ran, where forbidden
        }
        _save(out / f"{index}.pt", record)
        if call.timed_out:
            break  # the check calls no further case after a time-out (each could cost the time limit again)


def _call_in_child(
    fork: Callable,
    fn: Callable,
    cases_path: str,
    out: Path,
    time_limit: float,
    gradients: bool = False,
    launch=None,
    forbidden: tuple = (),
) -> None:
    try:
        pid = fork()
    except OSError:  # e.g. the process limit: call here instead
        _call_cases(fn, cases_path, out, time_limit, gradients, launch, forbidden)
        return
    if pid == 0:  # the child: call, save, and leave without running any of the kernel's exit handlers
        try:
            _call_cases(fn, cases_path, out, time_limit, gradients, launch, forbidden)
            (out / "finished").touch()
        finally:
            os._exit(0)
    deadline, seen = time.monotonic() + CHILD_SETUP + time_limit + CHILD_GRACE, 0
    while not os.waitpid(pid, os.WNOHANG)[0]:
        now, done = time.monotonic(), _count(out)
        if done != seen:
            deadline, seen = now + time_limit + CHILD_GRACE, done
        if now > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            _write_json(out / "outcome.json", {"outcome": "timeout"})
            return
        time.sleep(0.005)
    if not (out / "finished").exists():
        _write_json(out / "outcome.json", {"outcome": "crashed"})


def _count(out: Path) -> int:
    return sum(1 for name in os.listdir(out) if name.endswith(".pt") and name[:-3].isdigit())


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def describe(fn) -> dict:
    """Where the function comes from: the grader flags one that is the course's own reference."""
    info = {"defined": fn is not None, "callable": callable(fn), "type": "", "module": "", "qualname": "", "file": ""}
    try:
        target = fn
        for attr in ("__wrapped__", "func", "fn"):  # functools.wraps, functools.partial, @triton.jit
            inner = getattr(target, attr, None)
            if callable(inner):
                target = inner
        code = getattr(target, "__code__", None)
        info.update(
            type=type(fn).__name__,
            module=str(getattr(target, "__module__", "") or ""),
            qualname=str(getattr(target, "__qualname__", "") or ""),
            file=str(getattr(code, "co_filename", "") or ""),
        )
    except Exception:
        pass
    return info


def encode(value, depth: int = 0):
    """``value`` as plain data (see the module's docstring)."""
    try:
        return _encode(value, depth)
    except Exception:  # a learner's object that will not be described
        return {"__opaque__": type(value).__name__}


def _encode(value, depth: int):
    if isinstance(value, nn.Module):
        return {"__state_dict__": {str(k): encode(v, depth + 1) for k, v in value.state_dict().items()}}
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.device.type != "cpu" or value.is_quantized:
            return {"__opaque__": "Tensor"}
        if value.numel() > MAX_ELEMENTS:
            return {"__opaque__": "tensor_too_large_to_compare"}
        return value.detach().as_subclass(torch.Tensor).clone()
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():  # a NumPy scalar: as Python's
        return _encode(value.item(), depth)
    if isinstance(value, str):
        return str(value)[:MAX_TEXT]
    if isinstance(value, (tuple, list)) and depth < MAX_DEPTH:
        items = [encode(v, depth + 1) for v in list(value)[:MAX_ITEMS]]
        return tuple(items) if isinstance(value, tuple) else items
    return {"__opaque__": type(value).__name__}


def _save(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)
