"""The book (Jupyter Book 1) builds from the stored notebook outputs with warnings as errors,
its pages need nothing from outside the site, and in a browser its math and figures render."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


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
    pages = [site / "intro.html"] + [site / "notebooks" / f"{lesson}.html" for lesson in LESSONS]
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
    page.on("request", lambda r: None if r.url.startswith(served) else outside.append(r.url))
    page.goto(f"{served}/notebooks/{lesson}.html", wait_until="networkidle")
    page.wait_for_selector("mjx-container", timeout=30_000)
    assert page.locator("mjx-merror").count() == 0, "MathJax could not typeset some formula"
    images = page.evaluate(
        "Array.from(document.images).map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0])"
    )
    assert len(images) >= 2, "the lesson's figures should be on the page"
    assert all(ok for _, ok in images), [src for src, ok in images if not ok]
    assert not outside, f"the page requested {outside[:3]} outside the site"
