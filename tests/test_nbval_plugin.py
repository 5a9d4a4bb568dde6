"""attnedu.nbval_plugin: a kernel given a port another process holds dies while starting and is started again with
new ports; one that dies for another reason is not, and the error says what it printed."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import nbval.kernel
import pytest
from jupyter_client.manager import KernelManager

from attnedu import nbval_plugin

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def held_port():
    """A port on the loopback address that this process holds, as another process might."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def managers_given(monkeypatch, port: int, collide: int) -> list[KernelManager]:
    """nbval's kernel managers, the first ``collide`` of them told to bind ``port``; the list of those made."""
    made: list[KernelManager] = []

    def manager(**kwargs):
        km = KernelManager(**kwargs)
        if len(made) < collide:
            km.cache_ports = False  # else jupyter_client draws the ports itself
            km.shell_port = port
        made.append(km)
        return km

    monkeypatch.setattr(nbval.kernel, "KernelManager", manager)
    return made


def test_a_kernel_whose_port_is_taken_is_started_again_with_new_ports(monkeypatch, held_port):
    made = managers_given(monkeypatch, held_port, collide=1)
    km, kc = nbval_plugin.start_new_kernel(kernel_name=nbval.kernel.CURRENT_ENV_KERNEL_NAME, startup_timeout=60)
    try:
        reply = kc.execute_interactive("6 * 7", timeout=30)
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert len(made) == 2
    assert made[0].shell_port == held_port and made[1].shell_port != held_port


def test_nbvals_own_start_fails_on_the_same_taken_port(monkeypatch, held_port):
    """The case above is a real failure: without the plugin, the same kernel dies."""
    managers_given(monkeypatch, held_port, collide=1)
    with pytest.raises(RuntimeError, match="Kernel died before replying to kernel_info"):
        nbval_plugin._nbval_start(kernel_name=nbval.kernel.CURRENT_ENV_KERNEL_NAME, startup_timeout=60)


def test_a_port_taken_every_time_gives_up_and_shows_the_kernels_error(monkeypatch, held_port):
    made = managers_given(monkeypatch, held_port, collide=nbval_plugin.ATTEMPTS)
    with pytest.raises(RuntimeError) as raised:
        nbval_plugin.start_new_kernel(kernel_name=nbval.kernel.CURRENT_ENV_KERNEL_NAME, startup_timeout=60)
    message = str(raised.value)
    assert len(made) == nbval_plugin.ATTEMPTS
    assert f"started {nbval_plugin.ATTEMPTS} times" in message and "Address already in use" in message
    assert nbval_plugin.WHY not in message  # the cause is the port, not a file in the folder


def test_a_kernel_that_dies_for_another_reason_is_started_once_and_says_why(monkeypatch, tmp_path):
    """A notebook's folder with a file named like a module the kernel imports: the kernel dies at once."""
    (tmp_path / "ipykernel_launcher.py").write_text("raise SystemExit('a broken install, in the notebook folder')\n")
    made = managers_given(monkeypatch, 0, collide=0)
    with pytest.raises(RuntimeError) as raised:
        nbval_plugin.start_new_kernel(kernel_name=nbval.kernel.CURRENT_ENV_KERNEL_NAME, cwd=tmp_path)
    assert len(made) == 1
    message = str(raised.value)
    assert "started once" in message and "a broken install, in the notebook folder" in message
    assert message.endswith(nbval_plugin.WHY)


def test_every_notebook_run_loads_the_plugin(request, monkeypatch):
    """make test (through conftest.py) and make check (through its pytest command) both load it."""
    assert request.config.pluginmanager.has_plugin("attnedu.nbval_plugin")
    assert nbval.kernel.start_new_kernel is nbval_plugin.start_new_kernel

    import importlib.util
    import subprocess

    spec = importlib.util.spec_from_file_location("check_tool", ROOT / "tools" / "check.py")
    tool = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    monkeypatch.setitem(sys.modules, "check_tool", tool)
    spec.loader.exec_module(tool)
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(tool.subprocess, "run", run)
    tool.run_notebook(ROOT / "exercises" / "01_rnn_bottleneck.ipynb", cell_timeout=60)
    (command,) = commands
    assert ["-p", "attnedu.nbval_plugin"] == command[command.index("attnedu.nbval_plugin") - 1 :][:2]
