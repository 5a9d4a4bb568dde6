"""The sandbox users of one grading run, when the grader runs as root.

Run as root, the grader runs each sandbox as an unprivileged user of its own (``sandbox.py``): Linux
counts the process limit per user, so one submission's fork bomb cannot stop another's kernel from
starting. Two grading runs on one machine (two instructors, or a grading job beside the test suite)
must not share those users either, or they would share that limit, and a check that no sandbox
process outlived its run would see the other run's. So each run claims a block of its own:

* the pool, :data:`POOL` (64000-64999), is cut into blocks of :data:`BLOCK` users; a run takes the
  first free one and gives each sandbox that runs at the same time one user from it;
* a block is claimed by an exclusive ``flock`` on its lock file (``/run/lock/attnedu-grade-uids-64000.lock``,
  or under ``/tmp`` where ``/run/lock`` is not writable). The kernel drops the lock when the run's
  process ends, however it ends (finished, killed, crashed): no stale lock to clean up;
* a block whose lock is free but whose users still own processes (left by a run that could not clean
  up, or by an older grader without these locks) is skipped;
* at the end the run looks for processes of its own users that outlived their sandboxes (there should
  be none: each sandbox's process namespace dies with it), kills them and reports them, then releases
  its block.

As a normal user the grader needs none of this: each sandbox is ``nobody`` in a user namespace of its
own, and counts against the grader's own user outside it.
"""

from __future__ import annotations

import errno
import os
import signal
from dataclasses import dataclass
from pathlib import Path

POOL = range(64000, 65000)  # Debian reserves 60000-64999 for the project's own allocations: no login users there
BLOCK = 100  # users per run: at most 100 sandboxes at once (--jobs), at most 10 runs at once
LOCK_DIRS = (Path("/run/lock"), Path("/tmp"))


class UsersTaken(RuntimeError):
    """Every block of sandbox users is held by another grading run (or still owns processes)."""


@dataclass
class Claim:
    """A block of users held by this run until :meth:`release` (or until its process ends)."""

    uids: range
    lock_path: Path | None = None
    _fd: int | None = None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file drops the flock
            self._fd = None

    def __del__(self) -> None:
        self.release()

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    @property
    def text(self) -> str:
        return f"{self.uids.start}-{self.uids.stop - 1}"


def blocks(pool: range = POOL, size: int = BLOCK) -> list[range]:
    return [range(start, start + size) for start in range(pool.start, pool.stop - size + 1, size)]


def lock_dir() -> Path:
    for folder in LOCK_DIRS:
        if folder.is_dir() and os.access(folder, os.W_OK | os.X_OK):
            return folder
    raise UsersTaken(f"none of {', '.join(map(str, LOCK_DIRS))} is writable: cannot claim sandbox users")


def processes_of(uids: range) -> list[tuple[int, int, str]]:
    """(pid, uid, command line) of every live process whose real user is in ``uids`` (Linux: /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            uid = int((entry / "status").read_text().split("\nUid:")[1].split()[0])
            if uid not in uids:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError, ValueError):
            continue
        found.append((int(entry.name), uid, cmdline))
    return found


def claim(folder: Path | None = None, pool: range = POOL, size: int = BLOCK, live=processes_of) -> Claim:
    """Claim the first free block of ``pool``; UsersTaken if there is none."""
    folder = folder or lock_dir()
    busy = []
    for uids in blocks(pool, size):
        path = folder / f"attnedu-grade-uids-{uids.start}.lock"
        try:  # never through a link someone planted; the file itself may stay from an earlier run
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as err:
            busy.append(f"{uids.start}: {err.strerror or err}")
            continue
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                busy.append(f"{uids.start}: another grading run")
                continue
            raise
        if live(uids):
            os.close(fd)
            busy.append(f"{uids.start}: its users still own processes")
            continue
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())  # for a person who wonders who holds it
        return Claim(uids, path, fd)
    raise UsersTaken(
        f"every block of sandbox users ({pool.start}-{pool.stop - 1}, {size} per run) is in use ("
        + "; ".join(busy)
        + "). Wait for another grading run to finish, or look for leftover processes of those users."
    )


def kill_leftovers(uids: range, live=processes_of) -> list[str]:
    """Kill every process of ``uids`` still alive; describe each."""
    killed = []
    for pid, uid, cmdline in live(uids):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        killed.append(f"pid {pid} (user {uid}): {cmdline[:120]}")
    return killed
