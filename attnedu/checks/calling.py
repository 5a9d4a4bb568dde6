"""Calling the learner's function safely: on a copy of each test case's inputs, with its printing captured and
truncated, under a time limit, never letting an exception (or SystemExit) escape. The batch grader makes the same
calls in a sandboxed kernel (attnedu.grading) and hands back what happened as a :class:`Call`.

For an exercise whose function takes part in training (``Exercise.gradients``), a second call on fresh copies, with
gradients on, measures what flows back from its outputs to its inputs (:func:`input_gradients`): a function that
computes the right numbers but cuts the computation (``.detach()``, ``.data``, ``torch.no_grad()``, a round trip
through Python numbers or NumPy) would stop training, and the check compares these gradients with the reference's.
A third call does the same in float64 (:func:`double_gradients`), where the function accepts float64: two
mathematically equal functions can differ in float32 by rounding (a softmax saturated on large scores, a tanh written
with a sigmoid), and float64 tells rounding from a different derivative (``diagnosis._gradient_problem``).
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .exercise import Case

TIME_LIMIT = 5.0  # seconds per call of the learner's function
MAX_PRINTED = 500  # characters of the learner's printing kept in a result
# Set by the batch grader in the kernels it starts: the check cells of a submission then return at once
# (the grader calls the functions itself, from outside, see attnedu.grading).
GRADING_ENV = "ATTNEDU_GRADING"
# Errors a launcher raises about the learner's kernel or the notebook's state (attnedu.triton_basics): their message
# is the diagnosis, shown as it is rather than as "your function raised ...".
REPORTED_AS_IS = ("KernelError", "TritonModeError", "KernelMemoryError", "TritonMissingError")


def grading_mode() -> bool:
    """True inside a kernel the batch grader started (where check cells must not call anything)."""
    return os.environ.get(GRADING_ENV) == "1"


class _Timeout(BaseException):
    """Raised by the alarm inside the learner's code (a BaseException, so `except Exception` misses it)."""


class _BoundedText(io.TextIOBase):
    """A stdout/stderr stand-in that keeps the first ``limit`` characters and counts the rest."""

    def __init__(self, limit: int):
        self.limit, self.parts, self.kept, self.dropped = limit, [], 0, 0

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        text = str(text)
        room = max(self.limit - self.kept, 0)
        if room:
            self.parts.append(text[:room])
            self.kept += min(len(text), room)
        self.dropped += max(len(text) - room, 0)
        return len(text)

    def getvalue(self) -> str:
        text = "".join(self.parts).rstrip("\n")
        if self.dropped:
            text += f"\n... ({self.dropped} more characters not shown)"
        return text


@dataclass
class Call:
    """What one call of the learner's function did. In-process calls fill it directly; the grader
    rebuilds it from what a sandboxed kernel sent back, so errors are described, not kept."""

    value: object = None
    error_name: str = ""  # the exception's type name if the function raised, else ""
    error_text: str = ""
    error_line: str = ""  # " (in the line `...`)" when raised in the learner's own code
    not_implemented: bool = False  # it raised NotImplementedError: a stub
    timed_out: bool = False  # it did not finish within the time limit
    stopped_outside: bool = False  # ... and ignored the alarm, so it was stopped from outside its process
    crashed: bool = False  # the process running it died (os._exit, a native crash, out of memory)
    printed: str = ""
    gradients: tuple | None = None  # with gradients requested: input_gradients of the second call
    gradient_error: str = ""  # ... or what went wrong in that call ("RuntimeError: ...")
    # ... and of a third call on the inputs in float64 (double_gradients): its output and its gradients, or both None
    # where the function does not run in float64
    value64: object = None
    gradients64: tuple | None = None
    used_reference: str = ""  # the first forbidden function of the course's own that ran during the call, if any


# How a check calls the learner's function: (case number from 1, the case, time limit) -> (what happened,
# the arguments as the function left them). In-process for the check cells; remote for the batch grader.
Caller = Callable[[int, Case, float], "tuple[Call, tuple]"]


def in_process(
    fn: Callable, gradients: bool = False, launch: Callable | None = None, forbidden: tuple[str, ...] = ()
) -> Caller:
    """Call ``fn`` (or ``launch(fn, ...)``) in this process, on a fresh copy of each case's arguments (and, with
    ``gradients``, once more on another copy to measure its input gradients); ``forbidden``: see call_learner."""

    def call(number: int, case: Case, time_limit: float) -> tuple[Call, tuple]:
        learner_args = copy.deepcopy(case.args)
        spare = copy.deepcopy(case.args) if gradients else None
        return call_learner(fn, learner_args, time_limit, spare, launch, forbidden), learner_args

    return call


class _Watch:
    """A profile function (``sys.setprofile``) that notes the first function to run whose code is in one of the
    given files: the course's own modules that an exercise forbids (``Exercise.forbidden``)."""

    def __init__(self, files: dict[str, str]):
        self.files, self.found = files, ""

    def __call__(self, frame, event, arg) -> None:
        if event == "call" and not self.found:
            module = self.files.get(frame.f_code.co_filename)
            if module is not None:
                self.found = f"{module}.{getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)}"


def module_files(modules: tuple[str, ...]) -> dict[str, str]:
    """{source file: module name} for the given modules, as their functions' code objects name their files."""
    files = {}
    for name in modules:
        module = sys.modules.get(name)
        if module is None:
            import importlib

            module = importlib.import_module(name)
        path = getattr(module, "__file__", None)
        if path:
            files[path] = name
            files[os.path.realpath(path)] = name
    return files


def call_learner(
    fn: Callable,
    args: tuple,
    time_limit: float,
    gradient_args: tuple | None = None,
    launch: Callable | None = None,
    forbidden: tuple[str, ...] = (),
) -> Call:
    """Call ``fn(*args)`` (or, for an answer that is not called directly, such as a Triton kernel,
    ``launch(fn, *args)``) without letting it crash, flood the output or hang the caller.

    ``forbidden`` names modules of the course (e.g. ``("attnedu.positional",)``) whose code the function must not
    run: an exercise that asks the learner to write something themselves. If any of their functions runs during
    the call (``fn`` is one, or calls one, however it got hold of it), ``Call.used_reference`` names the first.

    With ``gradient_args`` (another copy of the inputs), call ``fn`` again on those with gradients on, within the
    same time limit, and record :func:`input_gradients` (or what went wrong) in ``gradients`` (``gradient_error``);
    then once more on them in float64, recording :func:`double_gradients` in ``value64`` and ``gradients64``."""
    call = Call()
    sink = _BoundedText(MAX_PRINTED)
    raised: list[BaseException] = []
    watch = _Watch(module_files(forbidden)) if forbidden else None

    def run() -> None:
        previous = sys.getprofile() if watch is not None else None
        try:
            if watch is not None:
                sys.setprofile(watch)  # this thread only, for this call only
            with torch.no_grad():
                call.value = fn(*args) if launch is None else launch(fn, *args)
        except (_Timeout, KeyboardInterrupt):
            raise
        except BaseException as err:  # SystemExit too: a check must not end the kernel
            raised.append(err)
        finally:
            if watch is not None:
                sys.setprofile(previous)
                call.used_reference = watch.found
        if raised or gradient_args is None:
            return
        double_args = copy.deepcopy(gradient_args)  # before the float32 call can change them
        try:
            call.gradients = input_gradients(fn, gradient_args)
        except (_Timeout, KeyboardInterrupt):
            raise
        except BaseException as err:
            call.gradient_error = f"{type(err).__name__}: {_message(err)}"[:500]
            return
        try:
            call.value64, call.gradients64 = double_gradients(fn, double_args)
        except (_Timeout, KeyboardInterrupt):
            raise
        except BaseException:  # it does not run in float64: the check then decides in float32 alone
            call.value64, call.gradients64 = None, None

    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
            call.timed_out = _run_with_alarm(run, time_limit)
        else:
            worker = threading.Thread(target=run, daemon=True, name="attnedu-check")
            worker.start()
            worker.join(time_limit)
            call.timed_out = worker.is_alive()  # it keeps running: threads cannot be stopped
    call.printed = sink.getvalue()
    if raised and not call.timed_out:
        err = raised[0]
        call.error_name, call.error_text = type(err).__name__, _message(err)
        call.error_line = _learner_line(err, fn)
        call.not_implemented = isinstance(err, NotImplementedError)
    return call


def _message(err: BaseException) -> str:
    try:
        return str(err)
    except Exception:  # an exception whose message itself fails
        return "(its message could not be shown)"


def _probe(output: torch.Tensor, number: int) -> torch.Tensor:
    """Fixed random weights for output number ``number``: the loss sum(output * probe) reaches every entry. Drawn in
    float32 whatever the output's dtype, so that the float64 call's loss is the float32 call's."""
    weights = torch.randn(output.shape, generator=torch.Generator().manual_seed(7919 + number), dtype=torch.float32)
    return weights.to(output.dtype)


def gradient_leaves(args: tuple) -> list[tuple[int, str]]:
    """What input_gradients differentiates with respect to, in order: (argument index, "" for a float tensor or the
    parameter's name for a module's parameter)."""
    leaves = []
    for index, arg in enumerate(args):
        if isinstance(arg, torch.Tensor) and arg.is_floating_point():
            leaves.append((index, ""))
        elif isinstance(arg, nn.Module):
            leaves += [(index, name) for name, p in arg.named_parameters() if p.is_floating_point()]
    return leaves


def input_gradients(fn: Callable, args: tuple) -> tuple[torch.Tensor, ...]:
    """The gradient of sum_k sum(output_k * probe_k) (fixed random probes, one per float tensor ``fn`` returns)
    with respect to every float tensor in ``args`` and every parameter of a module in ``args``, in the order of
    :func:`gradient_leaves`; zeros where nothing flows back. ``args`` are used (a copy, made leaves), not restored."""
    return _gradients(fn, args)[1]


def in_double(args: tuple) -> tuple:
    """``args`` with every float tensor, and every module's floating-point parameters and buffers, in float64 (the
    modules in place: ``args`` is a copy)."""
    doubled = []
    for arg in args:
        if isinstance(arg, nn.Module) or (isinstance(arg, torch.Tensor) and arg.is_floating_point()):
            arg = arg.double()
        doubled.append(arg)
    return tuple(doubled)


def double_gradients(fn: Callable, args: tuple) -> tuple[object, tuple[torch.Tensor, ...]]:
    """(``fn``'s output, :func:`input_gradients`) with every float input in float64 (:func:`in_double`), the output
    detached. ``args`` are used (a copy), not restored."""
    value, gradients = _gradients(fn, in_double(args))
    return _detached(value), gradients


def _detached(value):
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (tuple, list)):
        return type(value)(_detached(v) for v in value)
    return value


def _gradients(fn: Callable, args: tuple) -> tuple[object, tuple[torch.Tensor, ...]]:
    """(``fn(*args)``, its input gradients): see :func:`input_gradients`."""
    leaves, prepared = [], list(args)
    for index, arg in enumerate(args):
        if isinstance(arg, torch.Tensor) and arg.is_floating_point():
            prepared[index] = arg.detach().requires_grad_(True)
            leaves.append(prepared[index])
        elif isinstance(arg, nn.Module):
            for p in arg.parameters():
                if p.is_floating_point():
                    p.requires_grad_(True)
                    leaves.append(p)
    with torch.enable_grad():
        value = fn(*prepared)
        outputs = value if isinstance(value, (tuple, list)) else (value,)
        terms = [
            (o * _probe(o, k)).sum()
            for k, o in enumerate(outputs)
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad
        ]
        if not terms or not leaves:
            return value, tuple(torch.zeros_like(leaf) for leaf in leaves)
        found = torch.autograd.grad(sum(terms), leaves, allow_unused=True)
    pairs = zip(leaves, found, strict=True)
    return value, tuple(torch.zeros_like(leaf) if g is None else g.detach() for leaf, g in pairs)


def _run_with_alarm(run: Callable[[], None], seconds: float) -> bool:
    """Run ``run()`` under a SIGALRM time limit; True if it was cut off. Restores any previous timer."""
    state = {"active": True, "fired": False}

    def on_alarm(signum, frame):
        if state["active"]:
            state["fired"] = True
            signal.setitimer(signal.ITIMER_REAL, 0.5)  # fire again if the learner's code swallows this one
            raise _Timeout

    started = time.monotonic()
    previous_handler = signal.signal(signal.SIGALRM, on_alarm)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        try:
            run()
        finally:
            state["active"] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Timeout:
        state["active"] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:
            remaining = max(previous_delay - (time.monotonic() - started), 0.001)
            signal.setitimer(signal.ITIMER_REAL, remaining, previous_interval)
    return state["fired"]


def inputs_unchanged(original, copied) -> bool:
    """True if the copy handed to the learner still equals the original (values, shape, dtype)."""
    if isinstance(original, torch.Tensor):
        return (
            isinstance(copied, torch.Tensor)
            and copied.shape == original.shape
            and copied.dtype == original.dtype
            and torch.equal(copied.nan_to_num(), original.nan_to_num())
        )
    if isinstance(original, nn.Module):
        before, after = original.state_dict(), copied.state_dict()
        return before.keys() == after.keys() and all(inputs_unchanged(before[k], after[k]) for k in before)
    return original == copied


def _learner_line(err: BaseException, fn: Callable) -> str:
    """The line of the learner's own code where ``err`` was raised, if it was raised there."""
    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "fn", None), "__code__", None)  # a Triton kernel
    filename = getattr(code, "co_filename", None)
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == filename and f.line]
    return f" (in the line `{frames[-1].line.strip()}`)" if frames else ""


def attempt(fn):
    """fn(), or None while the learner has not written it yet (it raises NotImplementedError); any other error is
    said in a line (the exercise's check names the mistake) and also gives None. For the prediction cells, which run
    the learner's code outside a check."""
    try:
        return fn()
    except NotImplementedError:
        return None
    except Exception as error:  # noqa: BLE001 - the learner's code may raise anything
        print(f"(your code raised {type(error).__name__}: {error}; the check above says more)")
        return None
