"""`make lab` must really start JupyterLab, and the course must work in it: a server runs
headless on 127.0.0.1 over a temporary copy of the notebooks (so autosave can never touch the
stored outputs), and Chromium drives it where a browser is needed."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
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


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Base URL of a running JupyterLab whose root holds copies of the lessons and exercises."""
    root = tmp_path_factory.mktemp("lab")
    for folder in ("notebooks", "exercises"):
        shutil.copytree(ROOT / folder, root / folder)
    widget = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(WIDGET_CELL)])
    widget.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(widget, root / "widget.ipynb")
    port, log = free_port(), root / "lab.log"
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--ServerApp.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True", "--allow-root",
        f"--ServerApp.root_dir={root}", f"--LabApp.workspaces_dir={root}", "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    base = f"http://127.0.0.1:{port}"
    try:
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
    expect(readout).to_have_text("0", timeout=60_000)
    before = image.get_attribute("src")
    page.locator(".widget-slider .noUi-handle").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    expect(readout).to_have_text("2")
    expect(image).not_to_have_attribute("src", before)  # the kernel sent a new picture


def test_exercise_checks_render_in_jupyterlab(lab, page):
    """An untouched exercise notebook runs to the end and each check renders as 'not attempted'."""
    run_all(page, lab[0], "exercises/02_bahdanau_attention.ipynb")
    # textContent, not the visible text: JupyterLab skips rendering cells scrolled out of view
    outputs = "Array.from(document.querySelectorAll('.jp-OutputArea-output')).map(e => e.textContent)"
    page.wait_for_function(f"{outputs}.filter(t => t.includes('not attempted yet')).length === 4", timeout=60_000)
    assert page.locator(".jp-RenderedMarkdown.jp-OutputArea-output").count() == 4  # the ⏳ Markdown result
    assert page.evaluate(f"{outputs}.filter(t => t.includes('Traceback')).length") == 0
