"""A pytest plugin for every run of notebooks under nbval: a kernel that dies while starting because another
process took one of its ports is started again, and a kernel that dies for any other reason says why.

jupyter_client gives a new kernel its five TCP ports by asking the system for free ones, letting them go, and
writing them into the kernel's connection file; the kernel binds them a moment later. When many kernels start
at once (``make test`` runs notebooks two at a time beside other tests; ``make check`` runs two notebooks at
once), another process can take one of those ports in between: the kernel exits with ``ZMQError: Address
already in use`` before it answers, and nbval reports every cell of the notebook as an error, "Kernel died before
replying to kernel_info". Starting the kernel again draws new ports. nbval sends the kernel's own output
(``stderr``) to /dev/null; here it goes to a temporary file, so that the error it raises when the kernel cannot
start says what the kernel printed (a broken install, say).

Loaded by the root ``conftest.py`` (``make test``) and by ``tools/check.py`` (``make check``, ``-p``).
"""

from __future__ import annotations

import tempfile

import nbval.kernel

ATTEMPTS = 3  # starts of one kernel at most: one taken port is rare, and each start draws new ports
PORT_TAKEN = "Address already in use"  # what a kernel prints when a port it was given is taken
SHOWN_LINES = 20  # of the kernel's output, in the error

WHY = (
    "The kernel's last lines above say why it stopped. If they name a package that is missing or broken, set the "
    "course's environment up again: `rm -rf .venv && make lab`."
)

_nbval_start = nbval.kernel.start_new_kernel


def start_new_kernel(startup_timeout=60, kernel_name="python", **kwargs):
    """nbval's ``start_new_kernel``, tried again while the kernel dies of a taken port, up to ``ATTEMPTS`` times."""
    kwargs.pop("stderr", None)  # nbval's /dev/null: replaced by a file read when the kernel dies
    for attempt in range(1, ATTEMPTS + 1):
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stderr:
            try:
                return _nbval_start(startup_timeout=startup_timeout, kernel_name=kernel_name, stderr=stderr, **kwargs)
            except RuntimeError as error:
                stderr.seek(0)
                printed = stderr.read().strip()
                if PORT_TAKEN in printed and attempt < ATTEMPTS:
                    continue
                tries = "once" if attempt == 1 else f"{attempt} times, each with new ports"
                said = "\n".join(printed.splitlines()[-SHOWN_LINES:]) or "(nothing)"
                why = "" if PORT_TAKEN in printed else f"\n{WHY}"
                raise RuntimeError(f"{error}: the kernel was started {tries}; it last printed:\n{said}{why}") from error
    raise AssertionError("unreachable")  # pragma: no cover


def pytest_configure(config):
    nbval.kernel.start_new_kernel = start_new_kernel
