"""`make lab` must really start JupyterLab: launch it headless on 127.0.0.1, wait for
/api/status, open lesson 01's page, stop it."""

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_jupyterlab_starts_and_serves_lesson_01(tmp_path):
    port = free_port()
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--ServerApp.token=", "--ServerApp.password=", "--allow-root", f"--ServerApp.root_dir={ROOT}",
        "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "lab.log", "w"))
    try:
        status, deadline = None, time.monotonic() + 90
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2) as reply:
                    status = json.load(reply)
                break
            except OSError:
                time.sleep(0.5)
        log = (tmp_path / "lab.log").read_text()[-2000:]
        assert status is not None, f"JupyterLab did not answer /api/status within 90 s; its log ends:\n{log}"
        assert "started" in status
        url = f"http://127.0.0.1:{port}/lab/tree/notebooks/01_rnn_bottleneck.ipynb"
        with urllib.request.urlopen(url, timeout=10) as reply:
            assert reply.status == 200 and b"JupyterLab" in reply.read()
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
