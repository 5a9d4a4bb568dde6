"""A learner's server on the class hub (jupyterhub_config.py): what the hub starts, as the learner's own system user.

    python hub/singleuser.py [jupyterhub-singleuser options]     # the hub passes its own

1. The learner's course folder, ``~/attnedu`` (``ATTNEDU_LEARNER_DIR`` moves it), private to the learner (mode 700,
   and every file the server or a kernel creates is private too: umask 077). In it:
   - ``notebooks`` and ``exercises``: links to the course's own folders, shared by every learner and read-only to
     them (the course belongs to the instructor's account). A learner opens and runs a lesson there; JupyterLab shows
     it read-only and saves nothing into it (a learner who wants to keep notes saves a copy into work/). A lesson's
     kernel writes nothing into its folder: it reads ``../benchmarks/`` (the course's, through the link) and keeps
     its caches under the learner's home (matplotlib, torch).
   - ``work``: the learner's own exercise notebooks, filled as ``make lab`` fills work/ (tools/lab.py): a copy of
     each exercise it lacks, never one overwritten, so answers survive restarts and new versions of the course.
2. A temporary folder of the learner's own, ``~/.attnedu-tmp`` (TMPDIR, for the server and its kernels): the system's
   /tmp is shared by every learner, and what the server and torch put there would otherwise be one learner's in
   everyone's way (Jupyter keeps the checkpoints of a notebook in a read-only folder, such as the lessons, in
   ``$TMPDIR/jupyter_checkpoints``: the first learner's would shut every other learner out of theirs).
3. Then it becomes ``jupyterhub-singleuser`` from the course's install (with the course's kernel), rooted at that
   folder, with make lab's settings: exercises/ hidden, no news prompt and no update check.
   That install is the instructor's (``make instructor``: nbgrader too), so the learner's server gets the course's
   Jupyter configuration for learners first on its ``JUPYTER_CONFIG_PATH``: ``hub/jupyter/``, whose
   ``jupyter_server_config.json`` turns nbgrader's server extensions off (Formgrader, Assignments, Courses,
   Validate: the instructor's tools; ``/user/NAME/formgrader`` is then 404) and whose ``labconfig/page_config.json``
   turns its JupyterLab extension off (``@jupyter/nbgrader``: its menu and panels). Settings in the learner's own
   ``~/.jupyter`` still come first, as Jupyter always reads them first.

Standard library only, and run by the course's Python.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

COURSE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(COURSE / "tools"))
import lab  # noqa: E402  (tools/lab.py: what make lab does)

SHARED = (lab.EXERCISES, "notebooks")  # linked from the course, read-only to the learner
LEARNER_DIR = "~/attnedu"
CONFIG = COURSE / "hub" / "jupyter"  # Jupyter's configuration for learners: nbgrader's extensions off
TMP = ".attnedu-tmp"  # under the learner's home


def prepare(learner: Path, course: Path = COURSE) -> list[str]:
    """Make ``learner`` (private: mode 700), link the course's shared folders into it and fill its work/ from the
    course's exercises; returns what was copied, one line per notebook. A learner's own file or folder under a
    shared folder's name is left alone (and said so)."""
    os.umask(0o077)
    learner.mkdir(mode=0o700, parents=True, exist_ok=True)
    learner.chmod(0o700)  # also when it existed with a looser mode
    done = []
    for name in SHARED:
        link, target = learner / name, course / name
        if link.is_symlink() and os.readlink(link) != str(target):
            link.unlink()  # the course moved
        if not link.exists() and not link.is_symlink():
            link.symlink_to(target, target_is_directory=True)
        elif not link.is_symlink():
            done.append(f"{link} is not the course's folder; the course's {name} is at {target}")
    work = learner / lab.WORK
    work.mkdir(mode=0o700, exist_ok=True)
    work.chmod(0o700)
    return done + lab.prepare_work(learner)


def private_tmp(home: Path) -> Path:
    """The learner's own temporary folder (mode 700), for TMPDIR."""
    folder = home / TMP
    folder.mkdir(mode=0o700, exist_ok=True)
    folder.chmod(0o700)
    return folder


def command(learner: Path, argv: list[str]) -> list[str]:
    """The jupyterhub-singleuser command line: the course's install, rooted at the learner's folder."""
    return [
        str(Path(sys.executable).with_name("jupyterhub-singleuser")),
        f"--ServerApp.root_dir={learner}",
        *(f"--ContentsManager.hide_globs={pattern}" for pattern in lab.HIDE),
        f"--LabApp.app_settings_dir={COURSE / lab.SETTINGS}",
        *argv,
    ]


def config_path(existing: str | None) -> str:
    """``JUPYTER_CONFIG_PATH`` for the learner's server: the course's configuration for learners first, then any the
    environment had."""
    return os.pathsep.join([str(CONFIG), *([existing] if existing else [])])


def main(argv: list[str]) -> int:
    learner = Path(os.environ.get("ATTNEDU_LEARNER_DIR", LEARNER_DIR)).expanduser()
    for line in prepare(learner):
        print(f"attnedu: {line}", file=sys.stderr, flush=True)
    os.environ["TMPDIR"] = str(private_tmp(Path.home()))
    os.environ["JUPYTER_CONFIG_PATH"] = config_path(os.environ.get("JUPYTER_CONFIG_PATH"))
    args = command(learner, argv)
    os.execv(args[0], args)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
