"""`make lab` must really start JupyterLab, and the course must work in it: a server runs
headless on 127.0.0.1 over a temporary copy of the notebooks (so autosave can never touch the
stored outputs, and the course's own work/ is never touched), with work/ filled as `make lab` fills
it, and Chromium drives it where a browser is needed."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]

WIDGET_CELL = """\
import torch
from attnedu.widgets import AttentionStepper

AttentionStepper(torch.eye(3), ["a", "b", "c"], ["x", "y", "z"])"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served_port(log: Path, server: subprocess.Popen, asked: int, seconds: float = 90) -> int:
    """The port the server says it runs at. ``asked`` came from ``free_port()``, which lets the port go before the
    server binds it: if another process (a kernel starting elsewhere in the test run) took it meanwhile, Jupyter
    Server moves on to another port and says so in its log ("is running at: http://127.0.0.1:PORT/...")."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and server.poll() is None:
        said = log.read_text(errors="replace").partition("is running at")[2]
        running = re.search(r"http://127\.0\.0\.1:(\d+)/", said)
        if running:
            return int(running.group(1))
        time.sleep(0.5)
    return asked  # the server stopped or never said: the first request then fails with its log


def _lab_module():
    """tools/lab.py, whose ``command()`` is what ``make lab`` runs: this test starts what a learner starts."""
    spec = importlib.util.spec_from_file_location("lab", ROOT / "tools" / "lab.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Base URL of a running JupyterLab, started by make lab's own command over a copy of the course
    (lessons and exercises, and work/ filled from them; autosave must never touch the stored outputs)."""
    root = tmp_path_factory.mktemp("lab")
    for folder in ("notebooks", "exercises"):
        shutil.copytree(ROOT / folder, root / folder)
    _lab_module().prepare_work(root)
    widget = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(WIDGET_CELL)])
    widget.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(widget, root / "widget.ipynb")
    port, log = free_port(), root / "lab.log"
    headless = [
        "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--ServerApp.token=", "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True", f"--LabApp.workspaces_dir={root}",
        "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    command = _lab_module().command(headless, root=root)
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        base = f"http://127.0.0.1:{served_port(log, server, port)}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"{base}/api/status", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        yield base, log
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def test_jupyterlab_starts_and_serves_lesson_01(lab):
    base, log = lab
    try:
        with urllib.request.urlopen(f"{base}/api/status", timeout=5) as reply:
            status = json.load(reply)
    except OSError as err:
        pytest.fail(f"JupyterLab did not answer /api/status ({err}); its log ends:\n{log.read_text()[-2000:]}")
    assert "started" in status
    with urllib.request.urlopen(f"{base}/lab/tree/notebooks/01_rnn_bottleneck.ipynb", timeout=10) as reply:
        assert reply.status == 200 and b"JupyterLab" in reply.read()


def test_lab_is_rooted_at_the_course_and_opens_lesson_01(lab):
    """The file browser reaches the lessons and the learner's own exercises in work/ (the generated originals
    in exercises/ are hidden, so that no one works in them), and / opens lesson 01."""
    base, _ = lab
    with urllib.request.urlopen(f"{base}/api/contents", timeout=10) as reply:
        names = {entry["name"] for entry in json.load(reply)["content"]}
    assert {"notebooks", "work"} <= names and "exercises" not in names, names
    with urllib.request.urlopen(f"{base}/api/contents/work", timeout=10) as reply:
        work = {entry["name"] for entry in json.load(reply)["content"]}
    assert work == {p.name for p in (ROOT / "exercises").glob("*.ipynb")}, work
    opener = urllib.request.build_opener(_NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as redirect:
        opener.open(f"{base}/", timeout=10)
    location = redirect.value.headers["Location"]
    assert location.split("?")[0].endswith("/lab/tree/notebooks/01_rnn_bottleneck.ipynb"), location


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_a_server_whose_port_was_taken_is_found_where_it_moved(tmp_path):
    """free_port() lets its port go before the server binds it; the fixtures find the server all the same."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken, log = held.getsockname()[1], tmp_path / "server.log"
        command = [sys.executable, "-m", "jupyter_server", "--no-browser", "--ip=127.0.0.1", f"--port={taken}"]
        command += ["--ServerApp.token=", f"--ServerApp.root_dir={tmp_path}", f"--ServerApp.runtime_dir={tmp_path}"]
        command += ["--allow-root"] if os.geteuid() == 0 else []
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        try:
            port = served_port(log, server, taken)
            assert port != taken, log.read_text()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=10) as reply:
                assert "started" in json.load(reply)
        finally:
            server.terminate()
            server.wait(timeout=30)


def test_lab_command_allows_root_exactly_when_run_as_root():
    """JupyterLab refuses to start as root without --allow-root (containers often run as root)."""
    assert ("--allow-root" in _lab_module().command()) == (os.geteuid() == 0)


def run_all(page, base: str, notebook: str) -> None:
    """Open ``notebook`` alone in JupyterLab (``?reset`` drops tabs restored from the workspace),
    wait until it is the current tab with an idle kernel, and run every cell."""
    page.goto(f"{base}/lab/tree/{notebook}?reset")
    current = "window.jupyterapp?.shell.currentWidget"
    page.wait_for_function(
        f"{current}?.context?.path === {json.dumps(notebook)} "
        f"&& {current}?.sessionContext?.session?.kernel?.status === 'idle'",
        timeout=60_000,
    )
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")


def test_attention_stepper_slider_redraws_in_jupyterlab(lab, page):
    """nbval runs no widget callbacks; here the real frontend moves the slider and the map follows."""
    from playwright.sync_api import expect

    run_all(page, lab[0], "widget.ipynb")
    readout, image = page.locator(".widget-readout"), page.locator("img.widget-image")
    expect(readout).to_have_text("0", timeout=60_000)  # steps count from 0, as t in the lessons
    before = image.get_attribute("src")
    page.locator(".widget-slider .noUi-handle").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    expect(readout).to_have_text("2")
    expect(image).not_to_have_attribute("src", before)  # the kernel sent a new picture


def test_exercise_checks_render_in_jupyterlab(lab, page):
    """An untouched exercise notebook (the learner's copy in work/) runs to the end and each check renders as
    'not attempted'."""
    run_all(page, lab[0], "work/02_bahdanau_attention.ipynb")
    # textContent, not the visible text: JupyterLab skips rendering cells scrolled out of view
    outputs = "Array.from(document.querySelectorAll('.jp-OutputArea-output')).map(e => e.textContent)"
    page.wait_for_function(f"{outputs}.filter(t => t.includes('not attempted yet')).length === 5", timeout=60_000)
    assert page.locator(".jp-RenderedMarkdown.jp-OutputArea-output").count() == 5  # the ⏳ Markdown result
    assert page.evaluate(f"{outputs}.filter(t => t.includes('Traceback')).length") == 0


def test_make_lab_passes_args_to_jupyterlab():
    """`make lab ARGS="--no-browser --port=8890"` (headless, another port) reaches JupyterLab's command line."""
    done = subprocess.run(
        ["make", "-n", "lab", "ARGS=--no-browser --port=8890"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert "tools/lab.py --no-browser --port=8890" in done.stdout, done.stdout + done.stderr
    assert _lab_module().command(["--no-browser", "--port=8890"])[-2:] == ["--no-browser", "--port=8890"]
