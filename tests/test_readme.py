"""The README speaks to learners: short (at most 12 KB), two commands for them (`make lab`, `make check`), and
`make test` once, for contributors, the command CI runs (.ci/run). Its figures are the record's
(benchmarks/learner_setup.json, made by benchmarks/learner_setup.py in a fresh clone), not typed from memory; every
lesson is in its table and in the instructors' detailed one; its links and theirs lead somewhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RECORD = json.loads((ROOT / "benchmarks" / "learner_setup.json").read_text(encoding="utf-8"))
LESSONS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
MAX_BYTES = 12_000


def section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_is_short():
    assert len(README.encode("utf-8")) <= MAX_BYTES, "instructors' material goes in docs/instructors.md, contributors'"


def test_learners_get_two_commands_and_contributors_the_one_ci_runs():
    start = section(README, "Start here")
    commands = re.findall(r"^(make \w+)", start.split("```bash\n")[1].split("```")[0], flags=re.M)
    assert commands == ["make lab", "make check"]
    assert README.count("make test") == 1 and "`make test`" in section(README, "Instructors and contributors")
    ci = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert ci[-1] == "make test", "CI runs exactly the README's test command"
    assert "test:" in (ROOT / "Makefile").read_text(encoding="utf-8")


def test_the_figures_are_the_records():
    setup, check = RECORD["setup"], RECORD["check"]
    expect = section(README, "What to expect")
    machine = setup["machine"]
    said = f"{machine['cores']}-core {setup['machine']['system'].split()[0]} machine ({machine['cpu']}, Python "
    assert f"{said}{setup['python']}) on {setup['date']}" in " ".join(expect.split())
    text = " ".join(expect.split())  # the figures, whatever the line breaks
    assert f"{round(setup['seconds'])} s and {setup['venv_bytes'] / 1e9:.1f} GB of disk" in text
    assert f"PyTorch {setup['torch_bytes'] / 1e9:.2f} GB of it" in text
    assert f"{setup['triton_bytes'] / 1e9:.2f} GB)" in text
    notebooks = sorted(p.stem for p in (ROOT / "exercises").glob("*.ipynb"))
    assert sorted(check["all"]["notebooks"]) == notebooks == sorted(check["finished"]["notebooks"])
    assert f"all {len(notebooks)} exercise notebooks" in text
    assert f"({round(check['all']['seconds'])} s untouched, {round(check['finished']['seconds'])} s with every" in text
    assert max(check["all"]["seconds"], check["finished"]["seconds"]) < 60  # "under a minute"
    alone = {lesson: figures["seconds"] for lesson, figures in check.items() if lesson not in ("all", "finished")}
    assert sorted(alone) == sorted(name.split("_")[0] for name in notebooks)  # every lesson measured alone
    slowest = max(alone, key=alone.get)
    others = [seconds for lesson, seconds in alone.items() if lesson != slowest]
    assert f"{round(min(others))} to {round(max(others))} s for one lesson's" in text
    assert f"lesson {slowest}'s: {round(alone[slowest])} s" in text
    assert {figures["commit"] for figures in [setup, *check.values()]} == {setup["commit"]}  # one commit measured


def test_every_lesson_is_in_the_readme_and_in_the_instructors_table():
    instructors = (ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")
    detailed = section(instructors, "The lessons and their exercises")
    for lesson in LESSONS:
        assert f"](notebooks/{lesson}.ipynb)" in section(README, "Lessons"), lesson
        assert f"](../notebooks/{lesson}.ipynb)" in detailed, lesson


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def test_the_links_lead_somewhere():
    """Every relative link of the README and of the docs it sends people to: the file exists, and an anchor into a
    Markdown file is one of its headings."""
    for page in ("README.md", "docs/instructors.md", "docs/contributors.md", "CONTRIBUTING.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (ROOT / page).parent / path if path else ROOT / page
            assert file.exists(), f"{page}: {target}"
            if anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", file.read_text(encoding="utf-8"), flags=re.M)
                assert anchor in {slug(h) for h in headings}, f"{page}: {target}"
