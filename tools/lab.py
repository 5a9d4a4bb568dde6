"""Open the course in JupyterLab. What `make lab` runs.

    python tools/lab.py [extra jupyter lab options, e.g. --no-browser --port=8890]
    python tools/lab.py --prepare-only     # only fill work/ (what binder/start runs at start-up)

1. The learner's own folder, ``work/`` (git-ignored): every exercise notebook of ``exercises/`` that
   ``work/`` does not have yet is copied there. A notebook already in ``work/`` is never overwritten,
   so a learner's answers survive a ``git pull`` and a new version of the course; exercises that a
   later version adds appear on the next start.
2. JupyterLab, served from the repository root with lesson 01 open, so that the lessons
   (``notebooks/``) and the learner's exercises (``work/``) are both in the file browser. The
   generated originals in ``exercises/`` are hidden there (``--ContentsManager.hide_globs``): they
   are rewritten from ``solutions/`` when the course changes, so work done in them would be in the
   way of the next update.

As root (common in containers) JupyterLab refuses to start without --allow-root; this adds it.
Standard library only: it starts before JupyterLab, in the course's virtual environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_LESSON = "notebooks/01_rnn_bottleneck.ipynb"
WORK, EXERCISES = "work", "exercises"
# JupyterLab's default hidden names, plus attnedu.egg-info (pip's record of the course's editable install, made by
# the set-up) and exercises/ (the learner's copies are in work/)
HIDE = ["__pycache__", "*.pyc", "*.pyo", ".DS_Store", "*~", "*.egg-info", EXERCISES]
# JupyterLab's defaults for the course (overrides.json): no "Would you like to get notified about official Jupyter
# news?" prompt at the first start, and no check for JupyterLab updates (the course pins its version); nothing is
# fetched from the internet. A learner's own choice in Settings still wins over these defaults.
SETTINGS = Path("tools") / "lab_settings"
# Exercise notebooks the course has split or renamed: old name -> (new names, what changed). A learner's copy under
# the old name stays in work/ as it is; the new notebooks are copied in beside it, and the first start that copies
# them says what changed. (tests/test_lab.py checks the function names below against the exercise registry.)
RENAMED = {
    "08_flash_attention.ipynb": (
        ("08a_flash_attention_forward.ipynb", "08b_flash_attention_backward.ipynb"),
        "lesson 08 is now two lessons: 08a, FlashAttention's forward, and 08b, its backward and the GPU. Your "
        "work/08_flash_attention.ipynb is kept as it was, and `make check` still checks it. Its exercises are now in "
        "the new notebooks, under the same function names: merge_softmax_states, causal_tiles, causal_block_update, "
        "softmax_kernel, attention_kernel and causal_attention_kernel in 08a; tile_backward and benchmark_median in "
        "08b, which adds a Triton exercise on the backward (dv_kernel). To carry on in the new notebooks, copy your "
        "functions across.",
    ),
}


def edited_exercises(root: Path = ROOT) -> set[str]:
    """Names of the notebooks in ``exercises/`` that differ from the course's committed version (a learner who
    worked there before ``work/`` existed); empty where git cannot tell."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", f"{EXERCISES}/"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    if done.returncode != 0:
        return set()
    names = set()
    for line in done.stdout.splitlines():
        path = line[3:].strip().strip('"')
        if line[:2].strip() in ("M", "MM", "AM") and path.endswith(".ipynb"):
            names.add(Path(path).name)
    return names


def prepare_work(root: Path = ROOT) -> list[str]:
    """Copy every exercise notebook missing from ``root/work`` into it; never overwrite one. Returns what was
    done, one line per notebook copied."""
    source, work = root / EXERCISES, root / WORK
    work.mkdir(exist_ok=True)
    edited = edited_exercises(root)
    done, copied = [], set()
    for notebook in sorted(source.glob("*.ipynb")):
        target = work / notebook.name
        if target.exists():
            continue
        shutil.copyfile(notebook, target)
        copied.add(notebook.name)
        if notebook.name in edited:
            done.append(
                f"copied {EXERCISES}/{notebook.name} to {WORK}/ with the changes you made in it: carry on in "
                f"{WORK}/{notebook.name}. Once you have checked it is all there, `git checkout {EXERCISES}/` "
                "restores the course's copy, so that `git pull` has nothing of yours to overwrite."
            )
        else:
            done.append(f"new exercise: {WORK}/{notebook.name}")
    for old, (new, what) in RENAMED.items():
        if (work / old).exists() and copied & set(new):
            done.append(f"note: {what}")
    return done


def command(extra: list[str] | None = None, root: Path = ROOT) -> list[str]:
    """The `jupyter lab` command line for the course rooted at ``root``."""
    args = [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.default_url=/lab/tree/{FIRST_LESSON}",
        *(f"--ContentsManager.hide_globs={pattern}" for pattern in HIDE),
        f"--LabApp.app_settings_dir={root / SETTINGS}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")
    return args + list(extra or [])


def main(argv: list[str]) -> int:
    if not (ROOT / FIRST_LESSON).exists():
        print(f"{FIRST_LESSON} is missing under {ROOT}; run this from a clone of the course", file=sys.stderr)
        return 2
    for line in prepare_work(ROOT):
        print(line)
    if argv[:1] == ["--prepare-only"]:
        return 0
    print(
        f"Your exercise notebooks are in {WORK}/: yours to edit, never overwritten (`make check` runs them).\n"
        "Stop JupyterLab with Ctrl+C twice in this terminal (or File > Shut Down in the browser).",
        flush=True,
    )
    args = command(argv)
    if os.name == "posix":  # JupyterLab takes this process's place: Ctrl+C reaches it alone, and it shuts down cleanly
        os.execv(args[0], args)
    return subprocess.call(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
