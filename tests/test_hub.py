"""The class hub (jupyterhub_config.py, `make hub`) must really serve a class: JupyterHub with configurable-http-proxy
from hub/node_modules, started on a free loopback port with three system users of their own (removed afterwards, also
after a failure), two of whom log in through Chromium, run lesson 01 to the end and an exercise check in their own
work/ copy, with none of nbgrader's extensions (the instructor's tools) in their server or their JupyterLab; one
learner's kernel must get PermissionError on the other's work/ and on the course's files; stopping the hub must leave
no process behind. The course's solutions/ is closed to other users during the test, as docs/instructors.md tells an
instructor to do for a graded class (mode as before afterwards): the lesson and the exercise run without it, and a
learner's kernel cannot read it.

It needs root (it creates system users, and the hub starts each learner's server as that user), Chromium, Node with
hub/node_modules installed (`make test` runs `npm ci` in hub/), and a course and Python that every user can run (a
learner's server runs this repository's .venv as the learner): where one lies under a folder closed to other users
(pyenv's Python under /root, mode 700), the test lets its own three users pass through that folder with an ACL entry
(setfacl, from the acl package), and takes it back afterwards. Without one of them it is skipped on a contributor's
machine with the reason, and fails in CI (CI=true), where all of them are there.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from test_lab import free_port, run_all

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / ".venv" / "bin" / "python"
PROXY = ROOT / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
LESSON = "notebooks/01_rnn_bottleneck.ipynb"
EXERCISE = "work/01_rnn_bottleneck.ipynb"
SOLVED = "01-04"  # the exercise cell (padding_mask) the test answers in each learner's copy, from solutions/
LEARNER_DIR = "attnedu"  # under each learner's home (hub/singleuser.py)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")  # as tests/conftest.py finds it
TOOLS = ("useradd", "groupadd", "chpasswd", "userdel", "groupdel")


def _cannot_run() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return (
            "the class hub test needs root: it creates system users, and JupyterHub starts each learner's server as "
            "the learner's own user"
        )
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"the class hub test creates system users with {', '.join(missing)}, which this machine lacks"
    if CHROMIUM is None:
        return "the class hub test needs Chromium (Debian/Ubuntu: apt-get install chromium)"
    if shutil.which("node") is None:
        return "the class hub test needs Node for configurable-http-proxy (Debian/Ubuntu: apt-get install nodejs npm)"
    if not PROXY.exists():
        return f"configurable-http-proxy is not installed at {PROXY.relative_to(ROOT)}: run `cd hub && npm ci`"
    return None


def _skip_or_fail(reason: str):
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _closed_ancestor(path: Path) -> str:
    """The first folder on the way to ``path`` (symbolic links followed) that other users cannot enter."""
    for folder in [*reversed(Path(os.path.realpath(path)).parents)]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            return f"{folder} is mode {stat.filemode(mode)}"
    return "no folder on the way is closed to other users"


def _as_user(user: str, command: list[str]) -> subprocess.CompletedProcess:
    entry = pwd.getpwnam(user)
    return subprocess.run(
        command, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], cwd=entry.pw_dir,
        env={"PATH": os.environ["PATH"], "HOME": entry.pw_dir}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _processes_of(uids: set[int]) -> list[str]:
    """'pid command' of every live process whose real user is one of ``uids``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid in uids:
                    command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{entry.name} {command[:200]}")
            except OSError:
                continue  # gone meanwhile
    return found


def _files_of(uids: set[int]) -> list[str]:
    """What belongs to one of ``uids`` directly in the machine's shared temporary folders."""
    found = []
    for folder in (Path("/tmp"), Path("/dev/shm")):
        for entry in folder.iterdir() if folder.is_dir() else []:
            try:
                if entry.lstat().st_uid in uids:
                    found.append(str(entry))
            except OSError:
                continue
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


class Hub:
    """A JupyterHub started by the course's own jupyterhub_config.py, with the test's class: three system users in a
    group of their own, with homes and passwords."""

    def __init__(self, tmp: Path):
        tag = f"at{os.getpid() % 100000}{secrets.token_hex(2)}"
        self.tmp, self.group = tmp, tag
        self.users = [f"{tag}{letter}" for letter in "abc"]
        self.password = secrets.token_urlsafe(12)
        self.made_users, self.made_group, self.answered, self.opened, self.closed = [], False, [], [], []
        self.process, self.proxy_pid, self.log = None, None, tmp / "hub.log"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"

    def home(self, user: str) -> Path:
        return Path(pwd.getpwnam(user).pw_dir)

    def learner_file(self, user: str, relative: str) -> Path:
        return self.home(user) / LEARNER_DIR / relative

    def create_class(self):
        subprocess.run(["groupadd", self.group], check=True, capture_output=True)
        self.made_group = True
        for user in self.users:
            subprocess.run(["useradd", "-m", "-G", self.group, "-s", "/bin/sh", user], check=True, capture_output=True)
            self.made_users.append(user)
        lines = "".join(f"{user}:{self.password}\n" for user in self.users)
        subprocess.run(["chpasswd"], input=lines, text=True, check=True, capture_output=True)

    def open_the_way(self):
        """Where the course or the Python its .venv was made from lies under a folder other users cannot enter (pyenv's
        Python under /root, mode 700, on this project's machines), let this test's users pass through that folder, and
        only pass (an ACL entry, x: no listing, no reading), until remove(). An instructor does the same for the class's
        group, or installs the course and Python where everyone can read them (docs/instructors.md)."""
        if shutil.which("setfacl") is None:
            return  # the check in the fixture then names the closed folder
        targets = [ROOT, Path(os.path.realpath(PYTHON)).parent]
        closed = {folder for target in targets for folder in (target, *target.parents)
                  if not folder.stat().st_mode & stat.S_IXOTH}  # fmt: skip
        entries = ",".join(f"u:{user}:x" for user in self.made_users)
        for folder in sorted(closed):
            extended = subprocess.run(["getfacl", "--skip-base", "-p", str(folder)], capture_output=True, text=True)
            subprocess.run(["setfacl", "-m", entries, str(folder)], check=True, capture_output=True)
            self.opened.append((folder, bool(extended.stdout.strip())))

    def close_solutions(self):
        """A graded class's clone (docs/instructors.md): solutions/ for its owner only (`chmod go-rwx solutions`),
        until remove() puts its mode back."""
        folder = ROOT / "solutions"
        mode = stat.S_IMODE(folder.stat().st_mode)
        self.closed.append((folder, mode))
        folder.chmod(mode & ~0o077)

    def start(self):
        config = self.tmp / "jupyterhub_config.py"
        config.write_text(
            f"load_subconfig({str(ROOT / 'jupyterhub_config.py')!r})\n"
            f"c.JupyterHub.hub_port = {free_port()}\n"
            f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{free_port()}'\n"
            "c.Spawner.args = ['--LabApp.expose_app_in_browser=True']  # window.jupyterapp, for the test's scripts\n"
        )
        env = {**os.environ, "ATTNEDU_HUB_STATE": str(self.tmp / "state"), "ATTNEDU_HUB_GROUP": self.group,
               "ATTNEDU_HUB_PORT": str(self.port)}  # fmt: skip
        self.process = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "jupyterhub"), "-f", str(config)], cwd=self.tmp, env=env,
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"), start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.base}/hub/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"JupyterHub did not start; its log ends:\n{self.log_tail()}")
        pid_file = self.tmp / "state" / "jupyterhub-proxy.pid"
        self.proxy_pid = int(pid_file.read_text()) if pid_file.exists() else None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"

    def stop(self) -> list[str]:
        """Stop the hub as an instructor does (Ctrl+C: SIGINT) and wait for it; returns what is still running."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        left = []
        if self.process is not None and self.proxy_pid and _alive(self.proxy_pid):
            left.append(f"the proxy, pid {self.proxy_pid}")
        uids = {pwd.getpwnam(user).pw_uid for user in self.made_users}
        deadline = time.monotonic() + 10  # a kernel's last moments after its server has gone
        while (found := _processes_of(uids)) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left + found + _files_of(uids)

    def remove(self):
        """Whatever happened: kill what the test started, take back the passages it opened, remove its users (homes
        included) and group."""
        for folder, mode in self.closed:  # the checkout's modes as they were
            folder.chmod(mode)
        for folder, extended in self.opened:  # as it was: its own ACL entries kept, or none at all
            entries = ",".join(f"u:{user}" for user in self.made_users)
            command = ["setfacl", "-x", entries] if extended else ["setfacl", "-b"]
            subprocess.run([*command, str(folder)], capture_output=True)
        if self.proxy_pid and _alive(self.proxy_pid):
            os.kill(self.proxy_pid, signal.SIGKILL)
        for process in _processes_of({pwd.getpwnam(user).pw_uid for user in self.made_users}):
            try:
                os.kill(int(process.split()[0]), signal.SIGKILL)  # this test's own users' processes, by pid
            except ProcessLookupError:
                pass
        for user in self.made_users:
            subprocess.run(["userdel", "-r", user], capture_output=True)
        if self.made_group:
            subprocess.run(["groupdel", self.group], capture_output=True)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    reason = _cannot_run()
    if reason:
        _skip_or_fail(reason)
    hub = Hub(tmp_path_factory.mktemp("hub"))
    try:
        hub.create_class()
        hub.open_the_way()
        hub.close_solutions()
        try:
            can = _as_user(hub.users[0], [str(PYTHON), "-c", "import attnedu, jupyterhub"])
            error = None if can.returncode == 0 else (can.stderr.strip().splitlines() or ["no output"])[-1]
        except OSError as exc:
            error = str(exc)
        if error:
            _skip_or_fail(
                f"a learner's server runs {PYTHON} as the learner's own user, and the test's user cannot ({error}): "
                f"{_closed_ancestor(PYTHON)}; "
                "a class hub needs the course and its Python where every user can read them (docs/instructors.md)"
            )
        hub.start()
        yield hub
    finally:
        hub.stop()
        hub.remove()


def _log_in(page, hub: Hub, user: str, password: str):
    page.goto(f"{hub.base}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", password)
    page.click("#login_submit")


def _answer_one_exercise(hub: Hub, user: str):
    """Put the solution of one exercise into the learner's own copy, as the learner would type it (the file stays
    theirs)."""
    solution = {cell.id: cell.source for cell in nbformat.read(ROOT / "solutions" / Path(EXERCISE).name, 4).cells}
    path = hub.learner_file(user, EXERCISE)
    notebook = nbformat.read(path, 4)
    (cell,) = [cell for cell in notebook.cells if cell.id == SOLVED]
    cell.source = solution[SOLVED]
    nbformat.write(notebook, path)
    hub.answered.append(user)


RAN_TO_THE_END = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const cells = panel.content.widgets.filter(cell => cell.model.type === 'code');
    const errors = cells.filter(cell => cell.model.outputs.toJSON().some(out => out.output_type === 'error'));
    if (errors.length) return 'error: ' + JSON.stringify(errors[0].model.outputs.toJSON()).slice(0, 2000);
    return cells.every(cell => cell.model.executionCount !== null)
        && panel.sessionContext.session.kernel.status === 'idle';
}"""

RUN_IN_KERNEL = """async code => {
    const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    const future = kernel.requestExecute({code});
    let text = '';
    future.onIOPub = msg => {
        if (msg.header.msg_type === 'stream') text += msg.content.text;
        if (msg.header.msg_type === 'error') text += msg.content.ename + ': ' + msg.content.evalue;
    };
    await future.done;
    return text;
}"""


def _run_to_the_end(page, base: str, notebook: str, timeout_s: float = 240):
    run_all(page, base, notebook)
    done = page.wait_for_function(RAN_TO_THE_END, timeout=timeout_s * 1000).json_value()
    assert done is True, f"{notebook}: {done}"


def _run_in_kernel(page, code: str) -> dict:
    text = page.evaluate(RUN_IN_KERNEL, code)
    try:
        return json.loads(text.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        pytest.fail(f"the kernel printed no result: {text}")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): _sha(path) for path in sorted(folder.rglob("*")) if path.is_file()}


PROBE = """
import json, os, pwd, resource, sys
import attnedu
other_work = {other_work!r}
course = {course!r}

def attempt(action):
    try:
        action()
        return "allowed"
    except OSError as error:
        return type(error).__name__

print(json.dumps({{
    "user": pwd.getpwuid(os.getuid()).pw_name,
    "python": os.path.realpath(sys.executable),
    "attnedu": os.path.realpath(attnedu.__file__),
    "address space limit": resource.getrlimit(resource.RLIMIT_AS),
    "process limit": resource.getrlimit(resource.RLIMIT_NPROC),
    "read the other's exercise": attempt(lambda: open(os.path.join(other_work, {exercise!r})).read()),
    "list the other's work": attempt(lambda: os.listdir(other_work)),
    "write the other's exercise": attempt(lambda: open(os.path.join(other_work, {exercise!r}), "a").close()),
    "create in the other's work": attempt(lambda: open(os.path.join(other_work, "intruder.txt"), "w").close()),
    "write the course's lesson": attempt(lambda: open(os.path.join(course, {lesson!r}), "a").close()),
    "create in the course": attempt(lambda: open(os.path.join(course, "notebooks", "intruder.txt"), "w").close()),
    "read the course's solutions": attempt(lambda: open(os.path.join(course, "solutions", {exercise!r})).read()),
    "list the course's solutions": attempt(lambda: os.listdir(os.path.join(course, "solutions"))),
}}))
"""


def test_two_learners_run_the_course_in_their_own_servers_and_cannot_touch_each_others_work(hub, page):
    first, second, third = hub.users
    started = time.monotonic()

    # PAM checks the password: the third learner, with a wrong one, stays out
    _log_in(page, hub, third, hub.password + "x")
    page.wait_for_selector("text=Invalid username or password", timeout=30_000)

    for user in (first, second):
        page.context.clear_cookies()
        _log_in(page, hub, user, hub.password)
        page.wait_for_url(f"**/user/{user}/lab/tree/{LESSON}**", timeout=180_000)  # spawned, lesson 01 opens first
        base = f"{hub.base}/user/{user}"
        page.wait_for_function("window.jupyterapp !== undefined", timeout=60_000)
        listing = page.evaluate("async () => (await window.jupyterapp.serviceManager.contents.get('')).content"
                                ".map(entry => entry.name)")  # fmt: skip
        assert {"notebooks", "work"} <= set(listing) and "exercises" not in listing, listing
        # nbgrader (in the instructor install the learners' servers run) is off for learners (hub/jupyter/): no
        # Formgrader page, no plugin of its JupyterLab extension
        status = page.evaluate(
            "url => fetch(url, {redirect: 'manual'}).then(reply => reply.status, error => String(error))",
            f"/user/{user}/formgrader",
        )
        plugins = page.evaluate("() => window.jupyterapp.listPlugins().filter(id => id.includes('nbgrader'))")
        assert (status, plugins) == (404, []), (status, plugins)
        # make lab's defaults (tools/lab_settings): the settings API serves them as the schema's defaults
        schema = page.evaluate(
            "async () => (await window.jupyterapp.serviceManager.settings.fetch("
            "'@jupyterlab/apputils-extension:notification')).schema.properties"
        )
        defaults = {key: schema[key].get("default") for key in ("fetchNews", "checkForUpdates")}
        assert defaults == {"fetchNews": "false", "checkForUpdates": False}, defaults
        lesson_started = time.monotonic()
        _run_to_the_end(page, base, LESSON)
        print(f"{user}: lesson 01 ran to the end in {time.monotonic() - lesson_started:.1f} s", flush=True)

        own = hub.learner_file(user, EXERCISE)
        info = own.stat()
        assert info.st_uid == pwd.getpwnam(user).pw_uid and not info.st_mode & 0o077, stat.filemode(info.st_mode)
        _answer_one_exercise(hub, user)
        run_all(page, base, EXERCISE)
        outputs = "Array.from(document.querySelectorAll('.jp-OutputArea-output')).map(e => e.textContent)"
        page.wait_for_function(
            f"{outputs}.filter(t => t.includes('padding_mask passed')).length === 1 && "
            f"{outputs}.filter(t => t.includes('not attempted yet')).length === 3",
            timeout=120_000,
        )

    # The second learner's kernel (the page is theirs now) against the first learner's work/ and the course
    other_work = hub.learner_file(first, "work")
    before = _snapshot(other_work)
    lesson_before = _sha(ROOT / LESSON)
    probe = PROBE.format(other_work=str(other_work), course=str(ROOT), exercise=Path(EXERCISE).name, lesson=LESSON)
    found = _run_in_kernel(page, probe)
    assert found["user"] == second, found
    assert found["python"] == os.path.realpath(PYTHON), found  # the course's install, as the learner's kernel
    assert found["attnedu"] == str(ROOT / "attnedu" / "__init__.py"), found  # the course's own package
    assert found["address space limit"][1] > 0 and found["process limit"][1] > 0, found  # hub/spawner.py's limits
    refused = {key: value for key, value in found.items() if key.startswith(("read", "list", "write", "create"))}
    assert set(refused.values()) == {"PermissionError"} and len(refused) == 8, refused
    assert _snapshot(other_work) == before
    assert _sha(ROOT / LESSON) == lesson_before and not (ROOT / "notebooks" / "intruder.txt").exists()
    log = hub.log.read_text(errors="replace")
    assert "Permission denied" not in log, "a learner's server met a permission error:\n" + "\n".join(
        line for line in log.splitlines() if "Permission denied" in line
    )
    print(f"two learners logged in and ran lesson 01 and an exercise in {time.monotonic() - started:.1f} s")


def test_stopping_the_hub_stops_everything_it_started_and_keeps_the_work(hub):
    """Ctrl+C on `make hub`: the hub stops every learner's server (and so their kernels) and its proxy, and no
    learner left anything in the machine's shared /tmp or /dev/shm."""
    assert hub.process is not None and hub.process.poll() is None, hub.log_tail()
    left = hub.stop()
    assert hub.process.returncode is not None
    assert not left, f"still running after the hub stopped: {left}\n{hub.log_tail()}"
    assert hub.answered, "no learner answered an exercise (the test before this one failed)"
    for user in hub.answered:  # what a learner wrote stays in their work/
        notebook = nbformat.read(hub.learner_file(user, EXERCISE), 4)
        assert "### BEGIN SOLUTION" in next(cell for cell in notebook.cells if cell.id == SOLVED).source


# Zero to JupyterHub, for a class too big for one server: hub/z2jh-values.yaml against the chart's own values schema
CHART = ROOT / "hub" / "z2jh-chart-4.4.0"
Z2JH_VALUES = ROOT / "hub" / "z2jh-values.yaml"


def _helm_merge(defaults: dict, values: dict) -> dict:
    """``values`` over ``defaults`` as helm coalesces them: maps merge key by key, anything else replaces the default,
    and a null removes it."""
    merged = dict(defaults)
    for key, value in values.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _helm_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _chart_errors(values: dict) -> list[str]:
    """What the chart's schema refuses in ``values`` merged over the chart's defaults (empty: helm would accept it)."""
    import jsonschema
    import yaml

    schema = yaml.safe_load((CHART / "values.schema.yaml").read_text(encoding="utf-8"))
    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema)
    merged = _helm_merge(defaults, values)
    return [f"{'.'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(merged)]


def _z2jh_values() -> dict:
    import yaml

    return yaml.safe_load(Z2JH_VALUES.read_text(encoding="utf-8"))


def _lets_in(config: dict, user: str) -> bool:
    """Whether JupyterHub's Authenticator, configured by the values' ``hub.config``, lets ``user`` in once the password
    is checked (the chart's schema cannot see inside hub.config). NativeAuthenticator adds no allow rule of its own:
    since JupyterHub 5, without one, no one gets in."""
    from jupyterhub.auth import Authenticator
    from traitlets.config import Config

    return Authenticator(config=Config(config)).check_allowed(user)


def test_z2jh_values_let_in_whom_the_authenticator_admits():
    config = _z2jh_values()["hub"]["config"]
    assert config["JupyterHub"]["authenticator_class"] == "nativeauthenticator.NativeAuthenticator"
    assert _lets_in(config, "alice") and _lets_in(config, config["Authenticator"]["admin_users"][0])
    del config["Authenticator"]["allow_all"]  # what the values said before: no one, not even the instructor
    assert not _lets_in(config, "alice") and not _lets_in(config, config["Authenticator"]["admin_users"][0])


def test_z2jh_values_pass_the_charts_own_schema():
    import jsonschema
    import yaml

    schema = yaml.safe_load((CHART / "values.schema.yaml").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    assert _chart_errors({}) == []  # the chart's own defaults
    assert _chart_errors(_z2jh_values()) == []
    values = _z2jh_values()
    single = values["singleuser"]
    assert single["defaultUrl"] == "/lab/tree/notebooks/01_rnn_bottleneck.ipynb" and (ROOT / LESSON).exists()
    # the learner's volume at work/, not over the home folder that holds the course (binder/start fills it)
    assert single["storage"]["homeMountPath"] == "/home/jovyan/work"
    assert values["hub"]["config"]["JupyterHub"]["authenticator_class"] != "dummy"  # the chart's default lets anyone in
    settings = values["hub"]["config"]["KubeSpawner"]["args"][0].split("=", 1)[1]
    assert Path(settings).relative_to("/home/jovyan") == Path("tools/lab_settings")  # the course's, in the image
    assert (ROOT / "tools" / "lab_settings").is_dir()


@pytest.mark.parametrize(
    "broken, refused",
    [
        (("singleuser", "storage", "homeMountpath"), "Additional properties are not allowed ('homeMountpath'"),
        (("singleuser", "cpu", "limit"), "'two' is not of type 'number', 'null'"),
        (("singleuser", "storage", "type"), "'persistent' is not one of"),
    ],
)
def test_the_charts_schema_refuses_a_wrong_key_or_type(broken, refused):
    values = _z2jh_values()
    *parents, key = broken
    folder = values
    for name in parents:
        folder = folder[name]
    if key == "homeMountpath":  # a misspelt key, beside the right one
        folder[key] = folder["homeMountPath"]
    else:
        folder[key] = {"limit": "two", "type": "persistent"}[key]
    errors = _chart_errors(values)
    assert any(refused in error for error in errors), errors
