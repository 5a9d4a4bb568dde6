"""The batch grader, against a class with honest, careless and hostile submissions, in one run.

One grader run (``--jobs 2``) over a folder of:

* honest work: each lesson's solution (full marks) and three lessons' exercise notebooks as handed out (all "not
  attempted"; ``STUB_LESSONS``, one of each kind of exercise), a kernel that dies in its first cell, a cell that
  loops until interrupted, a file that is not a notebook; graded predictions partly right (lessons 07, 10 and 11),
  and one of lesson 10's measured with the course's code;
* forgeries: patching ``attnedu.checks.run_check`` and printing a forged grade line from a
  ``pre_run_cell`` hook (over stubs); the course's reference functions, imported plainly and
  through an obfuscated ``__import__`` (beside a careless mistake: softmax over the wrong axis);
* hangs and crashes: a function that ignores SIGALRM and loops, one that calls ``os._exit`` (the
  kernel stops the child process that calls them); a cell whose loop swallows KeyboardInterrupt,
  and a function that ignores SIGALRM in a kernel without ``os.fork`` (the worker stops the kernel);
  Triton kernels (lesson 08, under the interpreter) that loop forever, read far out of bounds (stopped by
  the launcher's memory check and reported), and read far out of bounds with that check sabotaged
  (the process running it dies);
* an attacker that tries to delete and overwrite its neighbours, plant a notebook, write the
  output files, start a detached process that writes after grading, use 64 GiB, start 200
  processes and reach the network, and reports what it saw through its function's printing
  (and has a failing import, which costs nothing). Where there is no bwrap it is left out.

The tests then check every promise: honest scores, forgeries flagged and worth nothing, partial
credit around hangs and crashes within the time budget, the submissions folder byte for byte
unchanged, no process left, no network, an unprivileged user, and the reports.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from attnedu.checks import EXERCISES, LESSONS
from attnedu.grading import sandbox

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS, EXERCISE_DIR = ROOT / "solutions", ROOT / "exercises"
TIMEOUT = 30  # seconds for a submission's own cells: a hang's cost; solution 11 trains its model again for exercise 5's
# comparison (about 8 s alone here, more with two submissions graded at once and a suite beside them)
TIME_LIMIT = 2  # seconds per call of a learner's function: a call of an exercise notebook's Triton kernel, as handed
# out, took over 1 s under the interpreter once in CI (stub_08's causal_attention_kernel, test case 1), with the
# checks' galleries running beside the class; a hang costs this much
# in the command line of the attacker's detached process (`sleep MARKER`): a number of this test run's own, so that
# another test run on the same machine (another worktree, CI) cannot be mistaken for a survivor of this one
MARKER = f"987.{os.getpid():07d}"
BWRAP = sandbox.find_bwrap() is not None
L01, L02, L07 = "01_rnn_bottleneck", "02_bahdanau_attention", "07_positional_encoding"
L08 = "08a_flash_attention_forward"  # lesson 08a: the Triton kernels
# The exercise notebooks graded as handed out: one lesson of each kind of exercise (plain functions; Triton kernels,
# which the kernel launches; graded predictions, in the lesson whose notebook trains models). For every lesson, make
# test runs each exercise notebook top to bottom (its lax run), test_exercises checks that every solution is replaced
# by `raise NotImplementedError()`, and test_checks that every exercise's function so written is not attempted; what
# grading all twelve added was the same path twelve times, about 40 s of sandboxes.
STUB_LESSONS = (L01, L08, "11_real_attention_heads")
L10 = "10_attention_at_inference"
L11 = "11_real_attention_heads"
L12 = "12_attention_across_devices"


def read(path: Path):
    return nbformat.read(path, as_version=4)


def solution(lesson: str):
    return read(SOLUTIONS / f"{lesson}.ipynb")


def stub(lesson: str):
    return read(EXERCISE_DIR / f"{lesson}.ipynb")


def insert_after(nb, after_source: str, source: str):
    index = next(i for i, c in enumerate(nb.cells) if after_source in c.source)
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source))
    return nb


def replace_solution(nb, name: str, source: str):
    cell = next(c for c in nb.cells if f"def {name}(" in c.source)
    cell.source = source
    return nb


def prepend_to_body(nb, name: str, lines: str):
    """Put ``lines`` (indented) first in the body of the learner's ``name``."""
    cell = next(c for c in nb.cells if f"def {name}(" in c.source)
    cell.source = cell.source.replace("    ### BEGIN SOLUTION\n", "    ### BEGIN SOLUTION\n" + lines, 1)
    return nb


FORGER = """\
import json

import attnedu.checks as C
from attnedu.checks import CheckResult

# 1. every check passes
C.run_check = lambda exercise, fn, *args, **kwargs: CheckResult(exercise.name, "passed", "forged")
attnedu.checks.diagnosis.run_check = C.run_check

# 2. a grade line printed before every cell, as the old grader's cell printed it
FULL = {"lesson": "01_rnn_bottleneck", "results": [
    {"exercise": n, "status": "passed", "score": 1, "message": ""}
    for n in ("padding_mask", "last_real_state", "reverse_padded")]}
get_ipython().events.register("pre_run_cell", lambda info: print("ATTNEDU-GRADE " + json.dumps(FULL)))
"""

SWALLOW_INTERRUPT = """\
import time

while True:  # a loop that will not be interrupted
    try:
        time.sleep(0.05)
    except KeyboardInterrupt:
        pass
"""

ATTACK = """\
import os, resource, socket, subprocess

import torch

SUBMISSIONS, OUT, REPORT, TARGET = {submissions!r}, {out!r}, {report!r}, {target!r}
seen = {{}}

def attempt(key, action):
    try:
        action()
        seen[key] = "ok"
    except BaseException as error:
        seen[key] = type(error).__name__

def overwrite(path, text):
    with open(path, "w") as f:
        f.write(text)

attempt("delete", lambda: os.remove(SUBMISSIONS + "/solution_01_rnn_bottleneck.ipynb"))
attempt("overwrite", lambda: overwrite(SUBMISSIONS + "/solution_02_bahdanau_attention.ipynb", "{{}}"))
attempt("plant", lambda: overwrite(SUBMISSIONS + "/zz_planted.ipynb", "{{}}"))
attempt("out", lambda: overwrite(OUT, "ATTACKER-ROW"))
attempt("report", lambda: overwrite(REPORT + "/summary.md", "ATTACKER-ROW"))
seen["visible"] = [os.path.exists(path) for path in (SUBMISSIONS, os.path.dirname(OUT), REPORT)]
attempt("system", lambda: overwrite("/usr/attacked", "x"))
seen["uid"] = os.getuid()
seen["nnp"] = open("/proc/self/status").read().split("NoNewPrivs:")[1].split()[0]
seen["limits"] = [resource.getrlimit(getattr(resource, n))[0] for n in ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE")]
# besides its work folder, /tmp may hold only the read-only mount points of what the grader runs on (when the
# course itself lives under /tmp, e.g. a clone in /tmp/course)
seen["others"] = [name for name in os.listdir("/tmp") if name not in {mounts!r} and not name.endswith(".json")]
seen["pids"] = sum(p.isdigit() for p in os.listdir("/proc"))
seen["interfaces"] = sorted(name for _, name in socket.if_nameindex())
attempt("net", lambda: socket.create_connection(TARGET, timeout=3).close())

# a detached process that would write to the score table after the grader has finished
subprocess.Popen(["sh", "-c", f"sleep 2; echo ATTACKER-ROW >> {{OUT}}; sleep {marker}"], start_new_session=True)

# memory: ask for 64 GiB, 1 GiB at a time (untouched: the cap is on what a process maps)
hog = []
try:
    for _ in range(64):
        hog.append(torch.empty(1 << 28))
except (MemoryError, RuntimeError):
    pass
seen["hog_gib"] = len(hog)
del hog

# processes: ask for 200
children = []
try:
    for _ in range(200):
        children.append(subprocess.Popen(["sleep", "30"]))
except OSError as error:
    seen["spawn_error"] = type(error).__name__
seen["spawned"] = len(children)
for child in children:
    child.kill()
    child.wait()
"""

UNCHECKED = """\
import contextlib

import attnedu.triton_basics as unchecked

_launch = unchecked._launch


def launch_unchecked(kernel, *args, **kwargs):  # the causal kernel runs without the memory check
    if "causal" in kernel.fn.__name__:
        unchecked.checked_memory = lambda *args, **kwargs: contextlib.nullcontext()
    return _launch(kernel, *args, **kwargs)


unchecked._launch = launch_unchecked
"""

PREDICTED_WITH_THE_COURSE_CODE = """\
from attnedu.kv_cache import rolling_cache_step


def predicted_slots():
    k = v = torch.zeros(1, 1, 5, 16)
    for p in range(9):
        x = torch.eye(16)[p].view(1, 1, 1, 16)
        out, k, v = rolling_cache_step(torch.zeros(1, 1, 1, 16), x, x, k, v, p)
    return 5, int(v[0, 0, 9 % 5].argmax())
"""

REPORT_PROBE = '    print("PROBE " + json.dumps(seen, separators=(",", ":")))\n'


GRADER_ENV = {**os.environ, "ATTNEDU_PROGRESS": "0", "PYTHONPATH": str(ROOT)}  # this tree's grader and package


def write_submissions(folder: Path, out: Path, report: Path, target: tuple[str, int]) -> None:
    for lesson in LESSONS:
        nbformat.write(solution(lesson), folder / f"solution_{lesson}.ipynb")
    for lesson in STUB_LESSONS:
        nbformat.write(stub(lesson), folder / f"stub_{lesson}.ipynb")

    dies = solution(L02)  # the kernel process exits before the first cell
    dies.cells.insert(1, nbformat.v4.new_code_cell("import os\n\nos._exit(1)"))
    nbformat.write(dies, folder / "02_dies.ipynb")

    hangs = insert_after(solution(L01), "check_padding_mask(padding_mask)", "while True:\n    pass")
    nbformat.write(hangs, folder / "01_hangs.ipynb")

    (folder / "broken.ipynb").write_text("{not a notebook", encoding="utf-8")

    # a graded prediction half right: partial credit in the table (and the other exercises full marks)
    halfway = solution(L07)
    replace_solution(halfway, "wrong_layout_prediction", "def wrong_layout_prediction():\n    return True, True\n")
    nbformat.write(halfway, folder / "07_half_prediction.ipynb")
    # lesson 10's three: one part of two right, a number within twice its margin (GB for GiB), and one measured with
    # the course's code in a cell that imports it (flagged: 0)
    predictions = solution(L10)
    replace_solution(predictions, "chunk_prediction", "def chunk_prediction():\n    return [0], True\n")
    replace_solution(predictions, "server_cache_gib", "def server_cache_gib():\n    return 6.44\n")
    replace_solution(predictions, "predicted_slots", PREDICTED_WITH_THE_COURSE_CODE)
    nbformat.write(predictions, folder / "10_predictions.ipynb")
    # lesson 11's two: an encoder's ln 8 for the causal head (0, its slip named), and the removal's (a) back to the
    # one-layer model's loss (half credit, a reasoned route) with (b) right (1): 0.75
    removal = solution(L11)
    replace_solution(removal, "predicted_causal_entropy", "def predicted_causal_entropy():\n    return 2.079\n")
    replace_solution(removal, "predicted_repeat_losses", "def predicted_repeat_losses():\n    return 2.53, 1.8\n")
    nbformat.write(removal, folder / "11_predictions.ipynb")
    # lesson 12's ring cell starts two processes (run_ranks) that talk over the sandbox's loopback; the cell reports a
    # ring that stopped without raising, so a cell after it asserts that the ring ran and gave full attention
    ring = insert_after(solution(L12), "run_ranks(ring_with_step, 2", "assert same, 'the ring is not full attention'")
    nbformat.write(ring, folder / "12_ring.ipynb")

    # forgeries
    nbformat.write(insert_after(stub(L01), "from attnedu.checks import", FORGER), folder / "01_forger.ipynb")
    reference = solution(L02)  # and a careless mistake: softmax over the batch axis
    replace_solution(reference, "additive_score", "from attnedu.attention import additive_score  # noqa: F401")
    cell = next(c for c in reference.cells if "def masked_softmax(" in c.source)
    cell.source = cell.source.replace("dim=-1", "dim=0")
    replace_solution(
        reference,
        "context_vector",
        'context_vector = getattr(__import__("attn" + "edu.attention", fromlist=["x"]), "context_vector")',
    )
    nbformat.write(reference, folder / "02_reference.ipynb")

    # hangs and crashes inside functions
    hang = solution(L02)
    ignore_alarm = "    import signal\n\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
    prepend_to_body(hang, "additive_score", ignore_alarm + "    while True:\n        pass\n")
    prepend_to_body(hang, "context_vector", "    import os\n\n    os._exit(1)\n")
    nbformat.write(hang, folder / "02_hang_and_exit.ipynb")
    swallow = solution(L01)  # and a hang that the kernel cannot stop: it has no os.fork for its calls
    swallow.cells.insert(1, nbformat.v4.new_code_cell("import os\n\nos.fork = None"))
    prepend_to_body(swallow, "padding_mask", ignore_alarm + "    while True:\n        pass\n")
    swallow.cells.append(nbformat.v4.new_code_cell(SWALLOW_INTERRUPT))
    nbformat.write(swallow, folder / "00_swallow.ipynb")  # the longest: graded first, so the two jobs end together

    kernels = solution(L08)  # Triton kernels: one loops forever, one reads far away, one does with the check off
    prepend_to_body(kernels, "softmax_kernel", "    while row >= 0:\n        row = row + 0\n")
    prepend_to_body(kernels, "attention_kernel", f"    q = tl.load(Q + rows[:, None] * stride_q * {10**8})\n")
    far = f"    q = tl.load(Q + (rows[:, None] * stride_q).to(tl.int64) * {2**40})\n"  # 4 TiB away: SIGSEGV
    prepend_to_body(kernels, "causal_attention_kernel", far)
    insert_after(kernels, "import triton.language as tl", UNCHECKED)
    nbformat.write(kernels, folder / "08a_kernels.ipynb")

    # the attacker (only where a sandbox will hold it: never run it loose on a machine)
    mounts = {"work"} | {p.relative_to("/tmp").parts[0] for p in sandbox.needed_paths() if Path("/tmp") in p.parents}
    attack = ATTACK.format(
        submissions=str(folder), out=str(out), report=str(report), target=target, marker=MARKER, mounts=mounts
    )
    attacker = insert_after(solution(L01), "setup_notebook", "import json\n\n" + (attack if BWRAP else ""))
    insert_after(attacker, "import json", "import nonexistent_module")  # and a careless error, which costs nothing
    prepend_to_body(attacker, "padding_mask", REPORT_PROBE)
    nbformat.write(attacker, folder / "01_attacker.ipynb")


def fingerprint(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def run_users(stdout: str) -> range:
    """The sandbox users a grader run says were its own (run as root), else an empty range."""
    found = re.search(r"as sandbox users (\d+)-(\d+) \(this run's own\)", stdout)
    return range(int(found.group(1)), int(found.group(2)) + 1) if found else range(0)


def sandbox_processes(uids: range) -> list[str]:
    """Command lines of live processes that belong to one grading run's sandboxes: its users ``uids``, or this
    test run's marker. Another grading run's processes on the same machine are not counted."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            uid = int((entry / "status").read_text().split("\nUid:")[1].split()[0])
        except (OSError, IndexError, ValueError):
            continue
        if MARKER in cmdline or uid in uids:
            found.append(f"{entry.name} uid={uid}: {cmdline}")
    return found


def host_address() -> str:
    """An address of this machine other than loopback, reachable from here but not from a sandbox."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


@pytest.fixture(scope="module")
def listener():
    """A TCP server on this machine that the attacker tries to reach."""
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.5)
    address = (host_address(), server.getsockname()[1])
    socket.create_connection(address, timeout=3).close()  # reachable from outside a sandbox
    yield address
    server.close()


@pytest.fixture(scope="module")
def graded(tmp_path_factory, listener):
    folder = tmp_path_factory.mktemp("submissions")
    results = tmp_path_factory.mktemp("results")
    out, report = results / "scores.csv", results / "scores_report"
    write_submissions(folder, out, report, listener)
    before = fingerprint(folder)
    command = [sys.executable, "-m", "attnedu.grade", str(folder), "--out", str(out), "--jobs", "2"]
    command += ["--timeout", str(TIMEOUT), "--time-limit", str(TIME_LIMIT), "--feedback", "full"]
    # A guard against a grader that hangs, not a budget (test_grader_time checks each submission's): the class took
    # 107 s alone and over 300 s under ``pytest -n 2`` (the other worker's tests on the same two cores); 900 s leaves
    # room for that while a hang still ends well within CI's time.
    start = time.monotonic()
    run = subprocess.run(command, capture_output=True, text=True, env=GRADER_ENV, timeout=900)
    seconds = time.monotonic() - start
    survivors = sandbox_processes(run_users(run.stdout))
    assert run.returncode == 0, run.stdout + run.stderr
    with open(out, newline="", encoding="utf-8") as f:
        table = {row["submission"]: row for row in csv.DictReader(f)}
    return {
        "table": table,
        "stdout": run.stdout,
        "stderr": run.stderr,
        "seconds": seconds,
        "folder": folder,
        "before": before,
        "after": fingerprint(folder),
        "out": out,
        "report": report,
        "survivors": survivors,
    }


def budget(lesson: str) -> float:
    """The most a submission of ``lesson`` may take before its sandbox is killed (plus its start, a second)."""
    from attnedu.grading.grader import Settings, budget

    cases = {name: exercise.make_cases() for name, exercise in EXERCISES.items()}
    return budget(Settings(timeout=TIMEOUT, time_limit=TIME_LIMIT), cases, LESSONS[lesson]) + 1


def statuses(row: dict, lesson: str) -> list[str]:
    return [row[f"{name}_status"] for name in LESSONS[lesson]]


def probe_of(graded) -> dict:
    text = (graded["report"] / "feedback" / "01_attacker.md").read_text(encoding="utf-8")
    return json.loads(re.search(r"PROBE (\{.*\})", text).group(1))


# --------------------------------------------------------------------------------------------
# Honest and careless submissions
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_solutions_full_marks(graded, lesson):
    row = graded["table"][f"solution_{lesson}.ipynb"]
    assert row["notebook"] == "ok", row
    assert statuses(row, lesson) == ["passed"] * len(LESSONS[lesson]), row
    assert int(row["total"]) == int(row["max_total"]) == len(LESSONS[lesson])
    assert row["notes"] == "" or not BWRAP, row


@pytest.mark.parametrize("lesson", STUB_LESSONS)
def test_stubs_score_zero(graded, lesson):
    row = graded["table"][f"stub_{lesson}.ipynb"]
    assert row["notebook"] == "ok", row  # the checks never raise, so Run All reaches the end
    assert statuses(row, lesson) == ["not_attempted"] * len(LESSONS[lesson]), row
    assert row["total"] == "0"


def test_table_layout_and_careless_submissions(graded):
    table = graded["table"]
    header = list(next(iter(table.values())))
    for name in EXERCISES:
        assert {name, f"{name}_status", f"{name}_message"} <= set(header)

    mutant = table["02_reference.ipynb"]  # among its forgeries, softmax over the wrong axis
    assert mutant["lesson"] == L02 and mutant["notebook"] == "ok"
    assert mutant["masked_softmax_status"] == "failed" and mutant["max_total"] == "5"
    assert "softmax over the wrong axis" in mutant["masked_softmax_message"]  # the diagnosis is in the CSV
    assert mutant["padding_mask"] == ""  # lesson 01's columns stay empty for a lesson 02 notebook

    crash = table["01_attacker.ipynb"]  # allow_errors: its failing import does not stop the notebook
    assert crash["notebook"] == "cell errors" and "ModuleNotFoundError" in crash["notes"]
    assert crash["total"] == "4"

    dies = table["02_dies.ipynb"]  # as Run All: nothing after the dead kernel runs, so nothing is defined
    assert dies["notebook"] == "kernel died" and "kernel died in cell 1" in dies["notes"]
    assert statuses(dies, L02) == ["not_attempted"] * 5 and dies["total"] == "0"

    hangs = table["01_hangs.ipynb"]  # interrupted; what was defined before the hang is still graded
    assert hangs["notebook"] == "timeout" and "interrupted" in hangs["notes"]
    assert statuses(hangs, L01) == ["passed", "not_attempted", "not_attempted", "not_attempted"]

    broken = table["broken.ipynb"]
    assert broken["notebook"] == "unreadable" and broken["total"] == "0"


def test_lesson_12s_ring_of_processes_runs_in_the_sandbox(graded):
    """Two ranks started from the notebook (spawned processes, a queue whose locks live in /dev/shm, gloo over the
    loopback interface, the only one there: test_no_network_no_privileges_and_limits) within the sandbox's process
    limit: the cell after the ring finds it ran and equalled full attention, and the exercises score full marks."""
    row = graded["table"]["12_ring.ipynb"]
    assert row["lesson"] == L12 and row["notebook"] == "ok", row
    assert int(row["total"]) == int(row["max_total"]) == len(LESSONS[L12]), row


def test_a_prediction_half_right_scores_half_in_its_column(graded):
    """A graded prediction (checks.prediction) is scored by the grader like any exercise: its column holds the score,
    1/2 for one of its two answers right, with the status partial and the measurement in the message; the total
    adds it; the summary's mean score and the feedback count it."""
    row = graded["table"]["07_half_prediction.ipynb"]
    assert row["notebook"] == "ok", row
    assert row["wrong_layout_prediction"] == "0.5" and row["wrong_layout_prediction_status"] == "partial", row
    message = row["wrong_layout_prediction_message"]
    assert "you predicted yes, measured no" in message and "Score: 0.5 of 1" in message, message
    assert row["total"] == f"{len(LESSONS[L07]) - 1}.5" and row["max_total"] == str(len(LESSONS[L07])), row
    assert statuses(row, L07).count("passed") == len(LESSONS[L07]) - 1, row
    assert graded["table"][f"solution_{L07}.ipynb"]["wrong_layout_prediction"] == "1"
    feedback = (graded["report"] / "feedback" / "07_half_prediction.md").read_text(encoding="utf-8")
    assert f"**Score: {row['total']} / {row['max_total']}**" in feedback and "🟡" in feedback
    with open(graded["report"] / "summary.csv", newline="", encoding="utf-8") as f:
        summary = {entry["exercise"]: entry for entry in csv.DictReader(f)}
    prediction = summary["wrong_layout_prediction"]
    assert int(prediction["partial"]) == 1, prediction
    scores = [float(r["wrong_layout_prediction"]) for r in graded["table"].values() if r["lesson"] == L07]
    assert float(prediction["mean_score"]) == pytest.approx(sum(scores) / len(scores), abs=1e-3)


def test_lesson_10s_predictions_are_scored_by_the_grader(graded):
    """Lesson 10's three graded predictions, each in its column: half of chunk_prediction's two parts right (0.5), a
    cache within twice its margin and named as GB for GiB (0.5), and predicted_slots measured with the course's rolling
    cache in a cell that imports it (flagged: 0, noted), whatever it returns; the four functions full marks."""
    row = graded["table"]["10_predictions.ipynb"]
    assert row["notebook"] == "ok", row
    assert row["chunk_prediction"] == "0.5" and row["chunk_prediction_status"] == "partial", row
    assert "the causal mask sees to that" in row["chunk_prediction_message"], row
    assert row["server_cache_gib"] == "0.5" and row["server_cache_gib_status"] == "partial", row
    assert "GB (10^9 bytes), where the question asks GiB" in row["server_cache_gib_message"], row
    assert row["predicted_slots"] == "0" and row["predicted_slots_status"] != "passed", row
    assert "predicted_slots: flagged" in row["notes"], row
    assert float(row["total"]) == len(LESSONS[L10]) - 2 and row["max_total"] == str(len(LESSONS[L10])), row
    assert statuses(row, L10).count("passed") == len(LESSONS[L10]) - 3, row
    solution_row = graded["table"][f"solution_{L10}.ipynb"]
    assert [solution_row[n] for n in ("chunk_prediction", "server_cache_gib", "predicted_slots")] == ["1"] * 3


def test_lesson_11s_predictions_are_scored_by_the_grader(graded):
    """Lesson 11's two graded predictions: an encoder's ln 8 for a causal head (0, the slip named), and the removal's
    (a) at the one-layer model's loss (half credit, a reasoned route, the seen-token bet named), (b) right: 0.75,
    measured in the grader's process on the lesson's model; the five functions full marks."""
    row = graded["table"]["11_predictions.ipynb"]
    assert row["notebook"] == "ok", row
    assert row["predicted_causal_entropy"] == "0" and row["predicted_causal_entropy_status"] == "failed", row
    assert "an encoder's head" in row["predicted_causal_entropy_message"], row
    assert row["predicted_repeat_losses"] == "0.75" and row["predicted_repeat_losses_status"] == "partial", row
    assert "betting on tokens it has already seen" in row["predicted_repeat_losses_message"], row
    assert float(row["total"]) == len(LESSONS[L11]) - 1.25 and row["max_total"] == str(len(LESSONS[L11])), row
    assert statuses(row, L11).count("passed") == len(LESSONS[L11]) - 2, row


# --------------------------------------------------------------------------------------------
# Forgeries
# --------------------------------------------------------------------------------------------


def test_patched_checks_and_forged_grade_lines_earn_nothing_and_are_noted(graded):
    row = graded["table"]["01_forger.ipynb"]
    assert statuses(row, L01) == ["not_attempted"] * 4 and row["total"] == "0", row
    assert "tampers with the grading code: assigns `C.run_check`" in row["notes"]
    assert "events.register" in row["notes"] and "forged grade" in row["notes"]


def test_the_reference_implementation_is_flagged_and_scores_zero(graded):
    row = graded["table"]["02_reference.ipynb"]
    assert statuses(row, L02) == ["flagged", "failed", "flagged", "passed", "passed"], row
    assert row["total"] == "2"  # decoder_step and coverage are the learner's own
    assert "from attnedu.attention import additive_score" in row["notes"]
    # the obfuscated import is invisible to the scan: the function's own module gives it away
    own = "context_vector: flagged, the function is the course's own `attnedu.attention.context_vector`"
    assert own in row["notes"]
    assert "would have been passed" in row["context_vector_message"]


# --------------------------------------------------------------------------------------------
# Hangs and crashes cost one exercise, within the budget
# --------------------------------------------------------------------------------------------


def test_a_hang_and_a_crash_cost_only_their_own_exercises(graded):
    row = graded["table"]["02_hang_and_exit.ipynb"]
    assert statuses(row, L02) == ["timeout", "passed", "crashed", "passed", "passed"], row
    assert row["total"] == "3" and row["notebook"] == "ok"
    assert "additive_score: hung (ignored its time limit; stopped from outside)" in row["notes"]
    assert "context_vector: crashed (the process running it died)" in row["notes"]
    assert "would not stop when asked" in row["additive_score_message"]
    assert float(row["seconds"]) < budget(L02) and "ran past the budget" not in row["notes"], row


def test_triton_kernels_that_hang_or_read_far_away_cost_only_their_own_exercises(graded):
    """Under the interpreter, in the sandbox: a kernel that loops forever is stopped by its time limit; one that
    reads far out of bounds is stopped before the read, and told where; with that check sabotaged, the read ends the
    process running the calls, and the grader goes on."""
    row = graded["table"]["08a_kernels.ipynb"]
    assert row["notebook"] == "ok", row
    statuses = dict(zip(LESSONS[L08], [row[f"{name}_status"] for name in LESSONS[L08]], strict=True))
    assert statuses.pop("softmax_kernel") == "timeout", row
    assert statuses.pop("attention_kernel") == "failed", row
    assert statuses.pop("causal_attention_kernel") == "crashed", row
    assert set(statuses.values()) == {"passed"} and row["total"] == str(len(LESSONS[L08]) - 3), row
    assert "far outside every tensor" in row["attention_kernel_message"]
    assert "in the line `q = tl.load(Q + rows[:, None] * stride_q * 100000000)`" in row["attention_kernel_message"]
    assert "softmax_kernel: hung" in row["notes"] and "causal_attention_kernel: crashed" in row["notes"], row
    assert float(row["seconds"]) < budget(L08) and "ran past the budget" not in row["notes"], row


def test_a_cell_that_swallows_interrupts_and_a_kernel_that_hangs_are_stopped_from_outside(graded):
    row = graded["table"]["00_swallow.ipynb"]  # its last cell: stopped from outside, restarted, re-run
    assert row["notebook"] == "timeout" and "ignored the interrupt" in row["notes"], row
    assert statuses(row, L01) == ["timeout", "passed", "passed", "passed"], row
    # without os.fork the calls run in the kernel itself: the worker stops and restarts it
    assert (
        "padding_mask: hung (ignored its time limit; its kernel was stopped from outside and restarted)" in row["notes"]
    )
    assert float(row["seconds"]) < budget(L01) and "ran past the budget" not in row["notes"], row


# --------------------------------------------------------------------------------------------
# The sandbox
# --------------------------------------------------------------------------------------------

# Without bwrap the attacker is left out (never run it loose) and these are skipped; in CI they fail instead.
needs_bwrap = pytest.mark.skipif(
    not BWRAP and not os.environ.get("CI"), reason="needs bubblewrap (bwrap): apt-get install bubblewrap"
)


@needs_bwrap
def test_nothing_outside_the_sandbox_changes(graded):
    assert graded["before"] == graded["after"], "a submission changed the submissions folder"
    assert "ATTACKER-ROW" not in graded["out"].read_text(encoding="utf-8")
    assert sorted(p.name for p in graded["report"].iterdir()) == ["feedback", "scores.png", "summary.csv", "summary.md"]
    row = graded["table"]["01_attacker.ipynb"]
    assert statuses(row, L01) == ["passed"] * 4, row  # its own work is graded as usual
    seen = probe_of(graded)
    assert seen["visible"] == [False, False, False], seen  # not there at all
    for attempt in ("delete", "overwrite", "plant", "out", "report", "system"):
        assert seen[attempt] in ("FileNotFoundError", "OSError", "PermissionError"), seen  # the rest is read-only
    assert seen["others"] == [], seen  # no other submission's work folder in its /tmp


@needs_bwrap
def test_no_process_survives(graded):
    assert graded["survivors"] == []


@needs_bwrap
def test_no_network_no_privileges_and_limits(graded):
    seen = probe_of(graded)
    assert seen["interfaces"] == ["lo"] and seen["net"] != "ok", seen
    assert seen["uid"] != 0 and seen["nnp"] == "1"  # and no setuid program gives root back
    assert seen["limits"] == [4 << 30, sandbox.Limits().processes, sandbox.Limits().file_bytes], seen
    assert seen["pids"] < 10  # its own process tree only: the grader's command line is not in its /proc
    assert seen["hog_gib"] < 4  # 64 GiB asked for, stopped under the 4 GB cap
    assert seen["spawned"] < sandbox.Limits().processes and seen["spawn_error"] == "BlockingIOError", seen


# --------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------


def test_reports(graded):
    report, table = graded["report"], graded["table"]
    assert (report / "scores.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    feedback = sorted(p.name for p in (report / "feedback").iterdir())
    assert feedback == sorted(name.replace(".ipynb", ".md") for name in table)
    mutant = (report / "feedback" / "02_reference.md").read_text(encoding="utf-8")
    assert "**Score: 2 / 5**" in mutant and "softmax over the wrong axis" in mutant
    # masked_softmax's hint comes in three steps, all written out in the feedback, the code last
    assert "💡 Hints, one step at a time" in mutant
    assert "3. `weights = torch.softmax(scores.masked_fill(~mask" in mutant
    with open(report / "summary.csv", newline="", encoding="utf-8") as f:
        summary = {row["exercise"]: row for row in csv.DictReader(f)}
    assert set(summary) == set(EXERCISES)
    softmax = summary["masked_softmax"]
    assert "softmax over the wrong axis" in softmax["common_diagnoses"]
    passed = sum(row.get("masked_softmax_status") == "passed" for row in table.values())
    assert int(softmax["passed"]) == passed and float(softmax["pass_rate"]) == pytest.approx(
        passed / int(softmax["submissions"]), abs=1e-3
    )
    assert "| `masked_softmax` |" in (report / "summary.md").read_text(encoding="utf-8")
    for name in table:
        assert name in graded["stdout"]  # the score table
    assert "pass rate" in graded["stdout"]  # the per-exercise summary


def test_grader_time(graded):
    """Not a benchmark: every submission within its budget (past it, its sandbox is killed), and the class graded
    side by side (``--jobs 2``) with almost nothing after the last sandbox. The grader prints where its time went.
    Lesson 11's prediction was measured (two models trained) in the main thread when its first submission was
    compared, and the comparisons of every later submission waited for it: 52 s of a class's 116 s alone (profiled;
    alone, the sandboxes went on meanwhile, and the run ended with them). Under ``pytest -n 2`` (the other worker's
    tests on the same two cores) two runs took 258 and 284 s against 207 s of sandboxes added up: time outside the
    sandboxes, most likely those comparisons waiting on the measurement under load (not measured there). Now the
    measurements are made beside the sandboxes, which the line names (the old grader fails here on that, alone);
    the shares bound any time outside the sandboxes. Shares, not seconds: under load every part takes longer."""
    for name, row in graded["table"].items():
        if row["lesson"]:
            assert float(row["seconds"]) < budget(row["lesson"]), (name, row["seconds"])
    line = re.search(
        r"time: (\d+) s: (\d+) s before the first sandbox, (\d+) s of sandboxes \((\d+) s added up, up to 2 at a "
        r"time\), (\d+) s after the last; comparing (\d+) s(.*)",
        graded["stdout"],
    )
    assert line, graded["stdout"][-2000:]
    total, before, during, own, after = map(int, line.groups()[:5])
    print(line.group(0))
    assert "predicted_repeat_losses" in line.group(7)  # lesson 11's measurement, made beside the sandboxes
    assert during < 0.75 * own, line.group(0)  # side by side
    assert before + after < 0.2 * total, line.group(0)  # nearly all of the run is its sandboxes


# --------------------------------------------------------------------------------------------
# Two grading runs on one machine
# --------------------------------------------------------------------------------------------


def test_two_grading_runs_at_once_each_with_its_own_sandbox_users(tmp_path):
    """Two graders started together on small folders (two instructors on one machine): both finish, each with
    full marks, each run's sandboxes as users of its own, and each run's survivor check counts its own
    processes only: when the quick run ends, the slow one's sandbox is still running, under other users."""
    runs = {}
    for name, pause in (("slow", 20), ("quick", 0)):  # the slow one first: its sandbox outlives the quick run
        folder, results = tmp_path / name, tmp_path / f"{name}_results"
        folder.mkdir()
        nb = solution(L01)
        if pause:
            insert_after(nb, "setup_notebook", f"import time\n\ntime.sleep({pause})")
        nbformat.write(nb, folder / f"{name}.ipynb")
        command = [sys.executable, "-m", "attnedu.grade", str(folder), "--out", str(results / "scores.csv")]
        command += ["--timeout", "60", "--time-limit", str(TIME_LIMIT)]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=GRADER_ENV)
        runs[name] = (process, results / "scores.csv")
        time.sleep(1)
    quick, slow = runs["quick"][0], runs["slow"][0]
    quick_out, quick_err = quick.communicate(timeout=240)
    quick_survivors = sandbox_processes(run_users(quick_out))
    others = [line for line in sandbox_processes(sandbox.ROOT_MODE_UIDS) if MARKER not in line]
    slow_running = slow.poll() is None
    slow_out, slow_err = slow.communicate(timeout=240)
    assert quick.returncode == 0, quick_out + quick_err
    assert slow.returncode == 0, slow_out + slow_err
    for name, (_, scores) in runs.items():
        with open(scores, newline="", encoding="utf-8") as f:
            (row,) = csv.DictReader(f)
        assert statuses(row, L01) == ["passed"] * 4, (name, row)
    assert quick_survivors == []  # its own check passes, whatever the other run is doing
    assert sandbox_processes(run_users(slow_out)) == []
    if os.geteuid() == 0 and BWRAP:  # as root each run's sandboxes are users of its own
        mine, theirs = run_users(quick_out), run_users(slow_out)
        assert len(mine) and len(theirs) and not set(mine) & set(theirs), (quick_out, slow_out)
        assert slow_running and others, "the slow run's sandbox should still have been running"
        # the old check (any sandbox user) would have counted these as the quick run's survivors
        assert any(int(line.split("uid=")[1].split(":")[0]) in theirs for line in others), others


def test_each_run_claims_a_block_of_users_released_however_it_ends(tmp_path):
    from attnedu.grading import users

    nobody = lambda uids: []  # noqa: E731  (no process owns any of these users)
    first, second = users.claim(tmp_path, live=nobody), users.claim(tmp_path, live=nobody)
    assert first.uids == range(64000, 64100) and second.uids == range(64100, 64200)
    first.release()
    again = users.claim(tmp_path, live=nobody)
    assert again.uids == first.uids  # released at the end of a run: free again

    # a run that is killed never releases its block: the kernel drops its lock with the process
    holder = (
        "import pathlib, sys, time\nfrom attnedu.grading import users\n"
        "claim = users.claim(pathlib.Path(sys.argv[1]), live=lambda uids: [])\nprint(claim.uids.start, flush=True)\n"
        "time.sleep(120)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", holder, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=GRADER_ENV
    )
    held = int(child.stdout.readline())
    assert held == 64200
    while_alive = users.claim(tmp_path, live=nobody)
    assert while_alive.uids.start == 64300  # taken while its run lives
    child.kill()
    child.wait()
    after_crash = users.claim(tmp_path, live=nobody)
    assert after_crash.uids.start == 64200  # free once it is gone

    # a free block whose users still own processes (a run that could not clean up) is passed over
    leftover = users.claim(tmp_path, live=lambda uids: [(1, 64400, "sleep")] if 64400 in uids else [])
    assert leftover.uids.start == 64500
    # every block taken: an error that says why
    with pytest.raises(users.UsersTaken, match="every block of sandbox users") as taken:
        users.claim(tmp_path, pool=range(64000, 64200), live=nobody)
    assert "another grading run" in str(taken.value)
    for claim in (second, again, while_alive, after_crash, leftover):
        claim.release()


# --------------------------------------------------------------------------------------------
# Feedback levels
# --------------------------------------------------------------------------------------------


def feedback_case(hint):
    from attnedu.grading.grader import ExerciseResult, Graded
    from attnedu.grading.reports import rows

    results = [
        ExerciseResult("additive_score", "passed"),
        ExerciseResult("masked_softmax", "failed", "on test case 1 of 6 (x): softmax over the wrong axis", hint, "hi"),
        ExerciseResult("context_vector", "not_attempted", "no function named `context_vector` was defined."),
        ExerciseResult("decoder_step", "flagged", "scored 0: the function is the course's own `attnedu.x`"),
        ExerciseResult("coverage", "passed"),
    ]
    graded = Graded("student.ipynb", L02, "cell errors", ["cell 3: ZeroDivisionError: division by zero"], results)
    _, (row,) = rows([graded])
    return graded, row


@pytest.mark.parametrize("hint", ["Sum over the source positions.", ("A nudge.", "The formula.", "The code.")])
def test_feedback_levels(hint):
    from attnedu.grading.reports import feedback

    graded, row = feedback_case(hint)
    steps = [hint] if isinstance(hint, str) else list(hint)
    full = feedback(graded, row, "full")
    assert "**Score: 2 / 5**" in full and "softmax over the wrong axis" in full and "hi" in full
    assert all(step in full for step in steps) and "ZeroDivisionError" in full
    if len(steps) > 1:
        assert "1. A nudge." in full and "3. The code." in full  # every step, in order
    else:
        assert f"Hint: {hint}" in full

    diagnosis = feedback(graded, row, "diagnosis")
    assert "softmax over the wrong axis" in diagnosis and "ZeroDivisionError" in diagnosis
    assert not any(step in diagnosis for step in steps) and 'hint("name")' not in diagnosis
    # the call that shows the hint, for the exercise that needs it, under that exercise; none for the others
    section = diagnosis.split("`masked_softmax`: failed")[1].split("\n## ")[0]
    assert '`hint("masked_softmax")`' in section and "code cell of your exercise notebook" in diagnosis
    assert diagnosis.count("`hint(") == 2  # the call, and the closing line's `hint("...")`
    for name in ("additive_score", "decoder_step", "coverage"):  # passed, or flagged: no hint offered
        assert f'hint("{name}")' not in diagnosis

    score = feedback(graded, row, "score")
    assert "**Score: 2 / 5**" in score and "`masked_softmax`: failed" in score and "`coverage`: passed" in score
    assert "wrong axis" not in score and "ZeroDivisionError" not in score and "Your function printed" not in score
    assert not any(step in score for step in steps)
    assert "the course's own" in score  # why an exercise scored 0 for conduct is not a hint
    with pytest.raises(ValueError, match="feedback level"):
        feedback(graded, row, "everything")


def test_feedback_option(tmp_path, capsys, monkeypatch):
    from attnedu.grading.cli import parse

    assert parse(["subs"]).feedback == "diagnosis"  # the default gives no hint away
    assert parse(["subs", "--feedback", "score"]).feedback == "score"
    with pytest.raises(SystemExit):
        parse(["subs", "--feedback", "everything"])
    nb = nbformat.v4.new_notebook(metadata={"attnedu": {"lesson": L01}})  # nothing defined: quick
    nbformat.write(nb, tmp_path / "empty.ipynb")
    monkeypatch.setenv("PATH", "/nonexistent")  # no bwrap: no kernel sandbox needed for an empty notebook
    monkeypatch.setenv("ATTNEDU_PROGRESS", "0")
    code, out, _ = grade_in_process(capsys, str(tmp_path / "empty.ipynb"), "--out", str(tmp_path / "s.csv"))
    assert code == 0 and "feedback: diagnosis" in out
    summary = (tmp_path / "s_report" / "summary.md").read_text(encoding="utf-8")
    assert "at level `diagnosis`" in summary


# --------------------------------------------------------------------------------------------
# Command-line errors and the unsandboxed fallback (no grading of real notebooks: fast)
# --------------------------------------------------------------------------------------------


def grade_in_process(capsys, *args: str) -> tuple[int, str, str]:
    from attnedu.grading.cli import main

    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_errors_that_teach(tmp_path, capsys):
    code, _, err = grade_in_process(capsys, str(tmp_path / "nope"), "--out", str(tmp_path / "s.csv"))
    assert code == 2 and "does not exist" in err and "folder of submitted" in err
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "notes.txt").write_text("x")
    code, _, err = grade_in_process(capsys, str(tmp_path / "subs"), "--out", str(tmp_path / "s.csv"))
    assert code == 2 and "no .ipynb files" in err and "notes.txt" in err
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "subs" / "a.ipynb")
    code, _, err = grade_in_process(capsys, str(tmp_path / "subs"), "--out", str(tmp_path / "subs" / "s.csv"))
    assert code == 2 and "inside the submissions folder" in err
    code, _, err = grade_in_process(capsys, str(tmp_path / "subs"), "--jobs", "0")
    assert code == 2 and "--jobs must be positive" in err
    code, _, err = grade_in_process(capsys, str(tmp_path / "subs"), "--jobs", "101")
    assert code == 2 and "at once" in err


def test_bwrap_that_fails_is_an_error_with_the_fix(tmp_path, capsys, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "a.ipynb")
    code, _, err = grade_in_process(capsys, str(tmp_path / "a.ipynb"), "--out", str(tmp_path / "s.csv"))
    assert code == 2, err
    assert "cannot start a sandbox" in err and "uid map" in err and "--no-sandbox" in err
    assert not (tmp_path / "s.csv").exists()


def test_without_bwrap_it_grades_and_says_so_loudly(tmp_path, capsys, monkeypatch):
    nb = nbformat.v4.new_notebook(metadata={"attnedu": {"lesson": L01}})  # nothing defined: quick
    nbformat.write(nb, tmp_path / "empty.ipynb")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("ATTNEDU_PROGRESS", "0")
    code, out, err = grade_in_process(capsys, str(tmp_path / "empty.ipynb"), "--out", str(tmp_path / "s.csv"))
    assert code == 0, err
    assert "NOT ISOLATED" in err and "NOT ISOLATED" in out
    with open(tmp_path / "s.csv", newline="", encoding="utf-8") as f:
        (row,) = csv.DictReader(f)
    assert row["sandbox"] == "none" and "NOT ISOLATED" in row["notes"]
    assert statuses(row, L01) == ["not_attempted"] * 4
    assert "NOT ISOLATED" in (tmp_path / "s_report" / "summary.md").read_text(encoding="utf-8")


def test_changes_to_the_originals_are_reported():
    from attnedu.grading.cli import changes

    before = {"a.ipynb": "1", "b.ipynb": "2", "c.ipynb": "3"}
    after = {"a.ipynb": "1", "b.ipynb": "x", "d.ipynb": "4"}
    assert changes(before, after) == ["b.ipynb was changed", "c.ipynb was deleted", "d.ipynb appeared"]


# --------------------------------------------------------------------------------------------
# The parts, without a kernel
# --------------------------------------------------------------------------------------------

MS = "masked_softmax"
BY_HAND = "def masked_softmax(s, m):\n    return s"
USES = "def masked_softmax(s, m):\n    return {}.masked_softmax(s, m)"
SCAN_CASES = [
    # (cells, flagged exercises, a substring of the notes or "")
    (["from attnedu.checks import check_masked_softmax, hint", BY_HAND], "", ""),
    (["from attnedu.attention import masked_softmax"], MS, "from attnedu.attention import"),
    (["import attnedu.attention as A\n" + USES.format("A")], MS, ""),
    (["import attnedu", USES.format("attnedu.attention")], MS, ""),
    (["from attnedu.checks import EXERCISES\nmasked_softmax = EXERCISES['masked_softmax'].reference"], MS, ""),
    (["import importlib\nm = importlib.import_module('attnedu.attention')\n" + USES.format("m")], MS, "names `attnedu"),
    # a scratch cell comparing with the reference is noted, but the learner's own definition is not flagged
    (["from attnedu.attention import masked_softmax as ref", BY_HAND, "ref(1, 2)"], "", "the course's reference"),
    # a solution cell that imports the reference is flagged, even if the function does not use it
    (["from attnedu.attention import context_vector as c\n" + BY_HAND], MS, ""),
    (
        ["import attnedu\nimport attnedu.checks\nattnedu.checks.run_check = None"],
        "",
        "assigns `attnedu.checks.run_check`",
    ),
    (
        ["from attnedu.checks import diagnosis\nsetattr(diagnosis, 'run_check', None)"],
        "",
        "calls `setattr` on `diagnosis`",
    ),
    (["import sys\nsys.modules['attnedu.checks'] = None"], "", "replaces a module in `sys.modules`"),
    (["get_ipython().events.register('post_run_cell', print)"], "", "installs a hook"),
    (["%time x = 1\nprint('ATTNEDU-GRADE {}')"], "", "forged grade"),
]


@pytest.mark.parametrize("cells, flagged, note", SCAN_CASES)
def test_scan(cells, flagged, note):
    from attnedu.grading.scan import scan

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    found = scan(nb, list(EXERCISES))
    assert set(found.flagged) == set(flagged.split()), found
    assert note in " ".join(found.notes), found.notes
    if not flagged and not note:
        assert found.notes == []


def test_files_from_the_sandbox_are_read_without_following_links(tmp_path):
    from attnedu.grading.results import load_record, read_inside

    secret = tmp_path / "secret.txt"
    secret.write_text("the grader's secret")
    work = tmp_path / "work"
    (work / "out").mkdir(parents=True)
    (work / "out" / "plain").write_bytes(b"data")
    (work / "out" / "link").symlink_to(secret)
    (work / "outside").symlink_to(tmp_path)
    os.mkfifo(work / "out" / "fifo")
    (work / "out" / "big").write_bytes(b"x" * 2000)
    assert read_inside(work, "out/plain", 100) == b"data"
    assert read_inside(work, "out/link", 100) is None
    assert read_inside(work, "outside/secret.txt", 100) is None  # a link in the middle of the path
    assert read_inside(work, "out/fifo", 100) is None  # and no wait for a writer
    assert read_inside(work, "out/big", 100) is None

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    import torch

    torch.save({"value": Evil()}, work / "out" / "evil.pt")
    assert load_record(work, "out/evil.pt") is None and not (tmp_path / "pwned").exists()


def test_what_comes_back_is_diagnosed_like_a_local_call():
    from attnedu.checks.diagnosis import run_check
    from attnedu.grading.results import remote_call

    exercise = EXERCISES["masked_softmax"]
    records = {0: {"value": {"__opaque__": "ndarray"}, "args": None, "printed": "hello"}}
    result = run_check(exercise, "masked_softmax", caller=remote_call(records, "done"))
    assert (
        result.status == "failed" and "should be a torch.Tensor" in result.message and "got a ndarray" in result.message
    )
    assert result.printed == "hello"
    hung = run_check(exercise, "masked_softmax", caller=remote_call({}, "timeout"))
    assert hung.reason == "timeout" and "would not stop when asked" in hung.message
    crashed = run_check(exercise, "masked_softmax", caller=remote_call({}, "crashed"))
    assert crashed.reason == "crashed" and "died" in crashed.message


def test_csv_fields_are_not_formulas(tmp_path):
    from attnedu.grading.reports import write_csv

    write_csv(tmp_path / "s.csv", ["a", "b", "c"], [{"a": "=HYPERLINK(1)", "b": "-2.5", "c": "+x"}])
    with open(tmp_path / "s.csv", newline="", encoding="utf-8") as f:
        (row,) = csv.DictReader(f)
    assert row == {"a": "'=HYPERLINK(1)", "b": "-2.5", "c": "'+x"}
    assert [p.name for p in tmp_path.iterdir()] == ["s.csv"]  # no temporary file left


def test_sandbox_hides_outputs_that_lie_inside_what_it_shows(tmp_path):
    venv = Path(sys.prefix).resolve()
    hidden_inside, hidden_outside = venv / "share", tmp_path / "submissions"
    hidden_outside.mkdir()
    box = sandbox.Sandbox("bwrap", [hidden_inside, hidden_outside], "/usr/bin/bwrap")
    argv = box.launch(tmp_path, uid=sandbox.ROOT_MODE_UIDS[0]).argv
    assert ["--tmpfs", str(hidden_inside)] == argv[
        argv.index(str(hidden_inside)) - 1 : argv.index(str(hidden_inside)) + 1
    ]
    assert str(hidden_outside) not in argv  # not in the sandbox at all: nothing to hide
    assert "--unshare-net" in argv and "--unshare-pid" in argv and "--die-with-parent" in argv
    assert argv[argv.index("/dev/shm") - 1] == "--tmpfs"  # its own, for multiprocessing's semaphores (lesson 12)
    assert argv[argv.index("--bind") + 1 : argv.index("--bind") + 3] == [str(tmp_path), sandbox.WORK]


def test_the_kernel_calls_every_case_after_an_error_and_none_after_a_time_out(tmp_path):
    """The check decides after seeing every case (an exception on one case does not hide the others), so the
    kernel calls them all; after a time-out it stops, as the check does."""
    import torch

    from attnedu.grading.kernel import _call_cases
    from attnedu.grading.results import load_record

    torch.save([(1,), (2,), (3,)], tmp_path / "cases.pt")

    def raises_on_two(x):
        if x == 2:
            raise ValueError("two")
        return torch.tensor([x])

    (tmp_path / "errors").mkdir()
    _call_cases(raises_on_two, str(tmp_path / "cases.pt"), tmp_path / "errors", 1.0)
    records = [load_record(tmp_path, f"errors/{i}.pt") for i in range(3)]
    assert [r["error_name"] for r in records] == ["", "ValueError", ""]
    assert torch.equal(records[2]["value"], torch.tensor([3]))

    def hangs_on_two(x):
        if x == 2:
            time.sleep(5)
        return torch.tensor([x])

    (tmp_path / "hangs").mkdir()
    _call_cases(hangs_on_two, str(tmp_path / "cases.pt"), tmp_path / "hangs", 0.2)
    assert sorted(p.name for p in (tmp_path / "hangs").iterdir()) == ["0.pt", "1.pt"]
    assert load_record(tmp_path, "hangs/1.pt")["timed_out"] is True


def test_scan_lets_the_lessons_printing_helper_through():
    """`attnedu.runtime.rounded` prints a number as the lessons do and gives no answer away; the rest of the module
    is still the course's own code."""
    from attnedu.grading.scan import scan

    helper = ["from attnedu.runtime import rounded\nprint(rounded(torch.ones(2)))", BY_HAND]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in helper])
    found = scan(nb, list(EXERCISES))
    assert not found.flagged and not found.notes, found.notes
    other = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("from attnedu.runtime import in_parallel")])
    assert "the course's reference code" in " ".join(scan(other, list(EXERCISES)).notes)
