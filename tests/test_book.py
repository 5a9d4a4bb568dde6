"""The book (Jupyter Book 1) builds from the stored notebook outputs with warnings as errors,
its pages need nothing from outside the site, and in a browser its math and figures render."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "book" / "_config.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The built HTML folder (built once for this module)."""
    out = tmp_path_factory.mktemp("book")
    jupyter_book = Path(sys.executable).with_name("jupyter-book")  # the venv's own, beside its python
    command = [str(jupyter_book), "build", "-W", "--keep-going", "--path-output", str(out), str(ROOT / "book")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"jupyter-book build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return out / "_build" / "html"


def test_book_builds_offline_with_every_lesson(site):
    pages = [site / "intro.html", site / "notebooks" / "bibliography.html"]
    pages += [site / "notebooks" / f"{lesson}.html" for lesson in LESSONS]
    for page in pages:
        assert page.exists(), f"{page.name} is missing: is the lesson listed in book/_toc.yml?"
        text = page.read_text(encoding="utf-8")
        external = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(https?://[^"]+)"', text)
        assert not external, f"{page.name} loads {external[:3]} from outside the site"
        for src in re.findall(r'<img[^>]+src="([^"]+)"', text):
            assert (page.parent / src).resolve().exists(), f"{page.name}: image {src} is missing"
    lesson_02 = (site / "notebooks" / "02_bahdanau_attention.html").read_text(encoding="utf-8")
    assert re.search(r'src="[^"]*_static/mathjax/[^"]+\.js"', lesson_02), "MathJax should come from the site"
    assert "AttentionStepper" not in lesson_02, "the widget cell is tagged remove-cell: the book shows figures"
    front = (site / "intro.html").read_text(encoding="utf-8")
    for lesson in LESSONS:
        assert f'href="notebooks/{lesson}.html"' in front, f"the front page should link lesson {lesson}"
    assert 'href="notebooks/bibliography.html"' in front
    assert f"Copyright {CONFIG['copyright']}." in front


def _names(tree: ast.AST, context: type) -> set[str]:
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, context)}
    if context is ast.Store:
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
    return names


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_book_shows_where_every_name_it_uses_comes_from(lesson):
    """A shown cell must not use a value that a cell removed from the book (remove-cell) bound last."""
    nb = nbformat.read(ROOT / "notebooks" / f"{lesson}.ipynb", as_version=4)
    assert _hidden_dependencies(nb) == []


def _hidden_dependencies(nb) -> list[str]:
    last_bound_by_removed_cell: dict[str, bool] = {}
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        removed = "remove-cell" in cell.metadata.get("tags", [])
        if not removed:
            used = _names(tree, ast.Load) - _names(tree, ast.Store)
            problems += [f"cell {index} uses {name!r}" for name in sorted(used) if last_bound_by_removed_cell.get(name)]
        for name in _names(tree, ast.Store):
            last_bound_by_removed_cell[name] = removed
    return problems


def test_hidden_dependencies_are_found():
    """The check above catches what lesson 02's first edition did: a removed cell re-binding shown names."""
    cells = [
        nbformat.v4.new_code_cell("pair, weights = 1, 2"),
        nbformat.v4.new_code_cell("pair, weights = 3, 4", metadata={"tags": ["remove-cell"]}),
        nbformat.v4.new_code_cell("print(pair + weights)"),
    ]
    found = _hidden_dependencies(nbformat.v4.new_notebook(cells=cells))
    assert found == ["cell 2 uses 'pair'", "cell 2 uses 'weights'"]


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_page_renders_math_and_figures_without_leaving_the_site(served, page, lesson):
    outside: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(served) else outside.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{served}/notebooks/{lesson}.html", wait_until="networkidle")
    # A heading with math also appears, hidden, in the page's collapsed table of contents: wait for a shown one.
    page.wait_for_selector("mjx-container >> visible=true", timeout=30_000)
    assert page.locator("mjx-merror").count() == 0, "MathJax could not typeset some formula"
    images = page.evaluate(
        "Array.from(document.images).map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0])"
    )
    assert len(images) >= 2, "the lesson's figures should be on the page"
    assert all(ok for _, ok in images), [src for src, ok in images if not ok]
    assert not outside, f"the page requested {outside[:3]} outside the site"
    assert not errors, f"the browser console logged errors: {errors[:3]}"


def test_front_page_loads_without_console_errors(served, page):
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{served}/intro.html", wait_until="networkidle")
    assert page.locator("table a").count() >= len(LESSONS)
    assert not errors, f"the browser console logged errors: {errors[:3]}"
