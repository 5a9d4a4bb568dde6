"""The book (Jupyter Book 1) builds from the stored notebook outputs with warnings as errors,
and its pages need nothing from outside the site: no CDN scripts, styles or images."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_book_builds_offline_with_every_lesson(tmp_path):
    jupyter_book = Path(sys.executable).with_name("jupyter-book")  # the venv's own, beside its python
    command = [str(jupyter_book), "build", "-W", "--keep-going", "--path-output", str(tmp_path)]
    done = subprocess.run([*command, str(ROOT / "book")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"jupyter-book build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    html = tmp_path / "_build" / "html"
    pages = [html / "intro.html"] + [html / "notebooks" / f"{lesson}.html" for lesson in LESSONS]
    for page in pages:
        assert page.exists(), f"{page.name} is missing: is the lesson listed in book/_toc.yml?"
        text = page.read_text(encoding="utf-8")
        external = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(https?://[^"]+)"', text)
        assert not external, f"{page.name} loads {external[:3]} from outside the site"
        for src in re.findall(r'<img[^>]+src="([^"]+)"', text):
            assert (page.parent / src).resolve().exists(), f"{page.name}: image {src} is missing"
    lesson_02 = (html / "notebooks" / "02_bahdanau_attention.html").read_text(encoding="utf-8")
    assert re.search(r'src="[^"]*_static/mathjax/[^"]+\.js"', lesson_02), "MathJax should come from the site"
    assert lesson_02.count("<img") >= 3, "the lesson's figures should be in the page"
