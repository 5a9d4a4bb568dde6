"""The workflow that publishes the book (.github/workflows/book.yml) is valid for GitHub Actions: check-jsonschema
(the contributor install) checks it against GitHub's own schema for workflow files, the copy vendored in the package,
so nothing is fetched; a broken copy is refused, so the check can fail. And it publishes what `make book` builds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BOOK = ROOT / ".github" / "workflows" / "book.yml"


def lint(*paths: Path) -> subprocess.CompletedProcess:
    linter = Path(sys.executable).with_name("check-jsonschema")
    assert linter.exists(), "check-jsonschema is missing: `make test` installs it with requirements-dev.txt"
    command = [str(linter), "--builtin-schema", "vendor.github-workflows", *map(str, paths)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_every_workflow_is_valid():
    assert BOOK in WORKFLOWS
    done = lint(*WORKFLOWS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_broken_workflow_is_refused(tmp_path):
    text = BOOK.read_text(encoding="utf-8")
    broken = {
        "runs-on misspelled": text.replace("runs-on:", "run-on:", 1),
        "a permission that does not exist": text.replace("pages: write", "pages: publish", 1),
        "no steps": text.replace("    steps:\n      - uses: actions/checkout@v4", "    stages:\n      - uses: x", 1),
    }
    for name, copy in broken.items():
        assert copy != text, name
        path = tmp_path / "book.yml"
        path.write_text(copy, encoding="utf-8")
        done = lint(path)
        assert done.returncode != 0 and "validation error" in done.stdout.lower(), (name, done.stdout + done.stderr)


def test_the_book_workflow_publishes_what_make_book_builds():
    workflow = yaml.safe_load(BOOK.read_text(encoding="utf-8"))
    build, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    runs = [step.get("run", "") for step in build["steps"]]
    uses = {step["uses"].split("@")[0]: step for step in build["steps"] if "uses" in step}
    assert "make book" in runs  # the offline build, the contributor install first, warnings as errors
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "jupyter-book build -W --keep-going book/" in makefile  # whose site is book/_build/html
    assert uses["actions/upload-pages-artifact"]["with"]["path"] == "book/_build/html"
    assert uses["actions/setup-python"]["with"]["python-version"] == "3.11"  # the version CI tests
    assert [step["uses"].split("@")[0] for step in deploy["steps"]] == ["actions/deploy-pages"]
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}  # only the job that publishes
    assert workflow["permissions"] == {"contents": "read"} and workflow["concurrency"]["cancel-in-progress"] is False
    assert deploy["if"] == "github.event_name != 'pull_request'"  # a pull request builds, never publishes
