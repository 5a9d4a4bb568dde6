"""Shared fixtures. ``page``: a fresh page in headless Chromium, for the browser tests.

Debian's chromium, driven by Playwright, started with flags that keep it off the network
(`playwright install` would download a browser; we never run it). Without a chromium the
browser tests are skipped on a learner's machine and fail in CI (CI=true), where .ci/run
installs it.
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch

# Triton decorates its own standard library (tl.sum, tl.max, ...) when it is first imported, reading TRITON_INTERPRET
# then, and torch.optim imports it (through torch._dynamo) as soon as a test trains a model. Once imported compiled,
# the CPU interpreter fails ("Cannot call @triton.jit'd outside of the scope of a kernel"), so on a machine without a
# GPU the interpreter is switched on before any test can import triton.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# One torch thread in every test process and what it starts (the grader, `make check`, kernels): make test runs two
# pytest workers on two cores beside the grader's sandboxes, and with torch's default, a thread per core, each
# process's threads wait on cores the others hold. One test took 15 s with one thread beside two busy processes and
# 47 s with the default (tests/test_checks.py::test_every_known_wrong_variant_gets_its_own_diagnosis; 12 s alone).
# The lessons' kernels compute with one thread too (attnedu.setup_notebook).
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def page():
    if CHROMIUM is None:
        message = "browser test needs Chromium (Debian/Ubuntu: apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser.new_page()
        finally:
            browser.close()


# The two longest modules first: under `pytest -n 2 --dist loadscope` (make test) a module runs on one worker, and
# modules are handed out in the order collected. The batch grader's class (tests/test_grading.py, its sandboxes two
# at a time, much of it waiting on hangs that are stopped at their time-outs) and the checks' galleries
# (tests/test_checks.py) run from the start, beside each other, and the short modules fill in after them, instead
# of one of the two starting last and running alone.
FIRST = ("tests/test_grading.py", "tests/test_checks.py")


def pytest_collection_modifyitems(items):
    def rank(item):
        path = item.nodeid.split("::")[0]
        return FIRST.index(path) if path in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: the order within each module, and of the other modules, stays as collected
