"""Where a submission runs: a bubblewrap (``bwrap``) sandbox on Linux, or, where there is none, a
plain subprocess with a loud warning.

The sandbox builds a new root from a short list of paths instead of hiding things from the real
one: the system directories (``/usr``, ``/etc``, ...) and the Python, virtual environment and
``attnedu`` package the grader itself runs on, all read-only; a private ``/tmp`` and ``/dev/shm`` (where
multiprocessing keeps its semaphores: lesson 12 starts processes from the notebook); and one
writable folder, the submission's work folder, at :data:`WORK`. Nothing else of the machine is
there: not the submissions folder, not the output files, not the grader's other work folders,
not ``/root`` or ``/home``, not ``/run`` (with its sockets). Should one of those lie inside a path
that is there (say, the submissions inside the virtual environment), it is hidden again.

It also gets new PID, network, IPC and UTS namespaces: no network but its own loopback (the
kernel and its client talk over it, and lesson 12's ranks, gloo on ``lo``), and its own process
tree, which dies with its first process, so nothing outlives it. And an unprivileged user:

* grader run by a normal user: a new user namespace maps that user to ``nobody`` (65534) inside,
  with no capabilities outside (``--unshare-user --uid 65534 --disable-userns``);
* grader run as root: ``bwrap`` builds the sandbox as root (so it can reach a Python under
  ``/root``), then the worker, before anything else, becomes an unprivileged user of its own
  (one per sandbox running at the same time, from a block of :data:`ROOT_MODE_UIDS` that the run
  claims for itself: ``users.py``). Not a user namespace: in one, the kernel would still be root
  outside it, where the process limit does not apply.

``bwrap`` sets ``no_new_privs`` and mounts everything ``nosuid``: no setuid program gives root
back. Memory, processes, file size and CPU time are capped with ``setrlimit`` by the worker
before any learner code runs (see ``worker.py``).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import attnedu

from .users import POOL

SANDBOX_UID = SANDBOX_GID = 65534  # nobody, as the sandbox's processes see themselves
# When the grader runs as root, each sandbox graded at the same time gets its own user from here, so that
# the process limit (which Linux counts per user) is per submission; each grading run claims a block of them of
# its own (users.py), so that two runs on one machine share no user either. The sandbox sees none of the
# machine's files but its system folders and Python, so whose files these numbers own elsewhere does not matter.
ROOT_MODE_UIDS = POOL
WORK = "/tmp/work"  # the submission's work folder, inside the sandbox
TMP_BYTES = 256 << 20  # the private /tmp
SHM_BYTES = 16 << 20  # the private /dev/shm: semaphores, a few bytes each (run_ranks sends no tensor through it)
WORKER = Path(__file__).with_name("worker.py")
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")


@dataclass(frozen=True)
class Limits:
    """Caps applied by the worker to itself and so to the kernel it starts (setrlimit, per process)."""

    memory_bytes: int = 4 << 30  # RLIMIT_AS: a kernel with torch imported maps about 1.4 GiB
    # RLIMIT_NPROC, threads included: a kernel and its client use about 20; lesson 12's ring cell, two ranks started
    # from the notebook (run_ranks: torch, gloo) by multiprocessing's fork server (one process more, idle), passed from
    # 31 up and failed at 30, and with four ranks passed at 39 and 40 and failed at 38 (spawned, before the fork
    # server: passed at 30 and failed at 29; four passed at 38 and 40, failed at 36 and 39: the threads' count varies
    # from run to run by a few; solution 12 graded as root, 2026-11-29): 64 leaves room for both, so it stays
    processes: int = 64
    file_bytes: int = 256 << 20  # RLIMIT_FSIZE: the largest file it may write
    cpu_seconds: int = 600  # RLIMIT_CPU, per process: stops processes that spin on in the background

    def to_json(self) -> dict:
        return {
            "memory_bytes": self.memory_bytes,
            "processes": self.processes,
            "file_bytes": self.file_bytes,
            "cpu_seconds": self.cpu_seconds,
        }


class SandboxError(RuntimeError):
    """bwrap is there but cannot start a sandbox on this machine."""


@dataclass
class Launch:
    """How to start the worker for one work folder."""

    argv: list[str]
    env: dict[str, str] | None

    def popen(self, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(self.argv, env=self.env, start_new_session=True, **kwargs)


def worker_env(home: str, package_parent: str) -> dict[str, str]:
    """The environment of the worker and the kernel: nothing inherited but what they need."""
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "PYTHONPATH": package_parent,  # only for an attnedu that is not installed (then found beside it)
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLCONFIGDIR": f"{home}/.matplotlib",
        "JUPYTER_PLATFORM_DIRS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "ATTNEDU_GRADING": "1",
        "ATTNEDU_PROGRESS": "0",
    }


class Sandbox:
    """Start the worker isolated by bwrap (``kind == "bwrap"``) or not at all (``kind == "none"``)."""

    def __init__(self, kind: str, hidden: list[Path] = (), bwrap: str | None = None):
        self.kind, self.bwrap = kind, bwrap
        self.hidden = [Path(os.path.realpath(p)) for p in hidden]
        self.needed = needed_paths()
        self._help = ""
        if kind == "bwrap":
            result = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30)
            self._help = result.stdout + result.stderr

    @property
    def isolated(self) -> bool:
        return self.kind == "bwrap"

    def launch(self, workdir: Path, probe: bool = False, uid: int = SANDBOX_UID) -> Launch:
        """The command that runs the worker on ``workdir`` (a folder the grader made and filled)."""
        package_parent = str(Path(os.path.realpath(attnedu.__file__)).parent.parent)
        extra = ["--probe"] if probe else []
        if self.kind == "none":
            env = {**worker_env(str(workdir / "home"), package_parent), "TMPDIR": str(workdir / "tmp")}
            return Launch([sys.executable, "-I", str(WORKER), str(workdir), *extra], env)
        launch = self._bwrap(workdir, package_parent, uid)
        launch.argv += extra
        return launch

    def _supports(self, flag: str) -> bool:
        return flag in self._help

    def _bwrap(self, workdir: Path, package_parent: str, uid: int) -> Launch:
        argv = [self.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if os.geteuid() != 0:  # a user namespace maps the grader's user to nobody, without its capabilities
            argv += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
            if self._supports("--disable-userns"):
                argv.append("--disable-userns")
        argv += ["--die-with-parent", "--new-session", "--clearenv"]
        for name in SYSTEM_DIRS:
            path = Path("/", name)
            if path.is_symlink():
                argv += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                argv += ["--ro-bind", str(path), str(path)]
        argv += ["--dev", "/dev", "--proc", "/proc"]
        # a private /dev/shm, writable by the sandbox's user: multiprocessing's locks and queues are POSIX semaphores
        # there (lesson 12 starts its ranks from the notebook with run_ranks); bwrap's own /dev/shm is root's
        if self._supports("--size"):
            argv += ["--perms", "1777", "--size", str(SHM_BYTES)]
        argv += ["--tmpfs", "/dev/shm"]
        if self._supports("--size"):
            argv += ["--perms", "1777", "--size", str(TMP_BYTES)]
        argv += ["--tmpfs", "/tmp"]
        made: set[Path] = {Path("/"), Path("/tmp")}
        for path in self.needed:
            for parent in reversed(path.parents):
                if parent not in made:  # traversable by the sandbox's user, whatever the real folder's mode
                    argv += ["--perms", "0755", "--dir", str(parent)]
                    made.add(parent)
            argv += ["--ro-bind", str(path), str(path)]
            made.add(path)
        for path in self.hidden:  # only what is inside a path the sandbox has; the rest is absent anyway
            if any(path == p or p in path.parents for p in self.needed) and path.exists():
                argv += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
        argv += ["--bind", str(workdir), WORK, "--chdir", WORK]
        for key, value in worker_env(f"{WORK}/home", package_parent).items():
            argv += ["--setenv", key, value]
        argv += ["--", sys.executable, "-I", str(WORKER), WORK]
        if os.geteuid() == 0:  # bwrap runs as root (no user namespace); the worker then becomes ``uid``
            argv += ["--user", str(uid)]
        return Launch(argv, None)

    def prepare(self, workdir: Path, uid: int = SANDBOX_UID) -> None:
        """Hand the work folder to the sandbox's user (when the grader is root)."""
        if self.kind == "bwrap" and os.geteuid() == 0:
            for path in [workdir, *workdir.rglob("*")]:
                os.chown(path, uid, uid, follow_symlinks=False)


def needed_paths() -> list[Path]:
    """What the sandbox must see besides the system directories: Python, the venv, the package (outermost only)."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages()}
    candidates.add(str(Path(attnedu.__file__).parent))
    real = {Path(os.path.realpath(p)) for p in candidates if os.path.isdir(p)}
    system = [Path("/", name) for name in SYSTEM_DIRS]
    real = {p for p in real if not any(p == s or s in p.parents for s in system)}
    return sorted(p for p in real if not any(q in p.parents for q in real))


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


def choose(no_sandbox: bool, hidden: list[Path]) -> Sandbox:
    """bwrap when it is installed (it must then work), else none; ``--no-sandbox`` forces none."""
    if no_sandbox:
        return Sandbox("none", hidden)
    if sys.platform != "linux":
        return Sandbox("none", hidden)
    bwrap = find_bwrap()
    return Sandbox("bwrap", hidden, bwrap) if bwrap else Sandbox("none", hidden)
