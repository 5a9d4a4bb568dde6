"""Each trained experiment exists once: every lesson's calibration (a module of benchmarks/calibration/, which
benchmarks/calibrate.py drives) trains with the same package function and the same recipe as the lesson, so that the
calibration measures the lesson's experiment and not a copy of it (docs/style.md, experiment rules, "one experiment,
one function"). Lessons 04-07 pass their recipe, a dict of attnedu.transformer, by name; lesson 11's function takes
its recipe (attnedu.induction.INDUCTION) as its default, which neither may override. The records the lessons read
(benchmarks/calibrationNN.json) state their recipe and margins: both must follow from the calibration module."""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest
import torch

from attnedu import transformer
from attnedu.tasks import CharCorpus

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
CALIBRATION = BENCHMARKS / "calibration"

# (lesson's notebook, a function of attnedu.transformer it calls, the recipe it passes): the lesson's calibration
# module must call the same function with the same recipe
EXPERIMENTS = [
    ("04_query_key_value", "recall_held_out", "RECALL_04"),
    ("04_query_key_value", "train_recall", "RECALL_04"),
    ("05_multi_head_attention", "neighbour_held_out", "NEIGHBOURS_05"),
    ("05_multi_head_attention", "neighbour_classifier", "NEIGHBOURS_05"),
    ("05_multi_head_attention", "train_neighbours", "NEIGHBOURS_05"),
    ("06_masking", "train_leak", "LEAK_06"),
    ("07_positional_encoding", "neighbour_held_out", "PREVIOUS_07"),
    ("07_positional_encoding", "train_previous_token", "PREVIOUS_07"),
    ("07_positional_encoding", "train_extrapolation", "EXTRAPOLATION_07"),
]
# (lesson's notebook, the module, its training function, the recipe that function takes as its default): the lesson
# and its calibration call it and override no key of the recipe
DEFAULT_RECIPES = [
    ("11_real_attention_heads", "attnedu.induction", "train_induction", "INDUCTION"),
    ("13a_sinks_and_gates", "attnedu.sinks_gates", "train_marker", "MARKER"),
]
LESSONS = sorted({notebook for notebook, _, _ in EXPERIMENTS} | {notebook for notebook, *_ in DEFAULT_RECIPES})
RECIPES = sorted({recipe for _, _, recipe in EXPERIMENTS})


def module_constant(path: Path, name: str):
    """A calibration module's constant ``name`` (``LESSONS``, ``RECORD``), read from its source (no import); None
    where it has none."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def module_lessons(path: Path) -> tuple[str, ...]:
    return module_constant(path, "LESSONS") or ()


# the calibration modules that write a record their lesson reads
RECORDED = [path.stem for path in sorted(CALIBRATION.glob("lesson*.py")) if module_constant(path, "RECORD")]


def calibration_of(notebook: str) -> Path:
    """The module of benchmarks/calibration/ that calibrates ``notebook``'s lesson (the one whose ``LESSONS`` holds
    its number)."""
    found = [path for path in sorted(CALIBRATION.glob("lesson*.py")) if notebook[:2] in module_lessons(path)]
    assert len(found) == 1, f"lesson {notebook[:2]}: one calibration module should name it in LESSONS, got {found}"
    return found[0]


def calibration_module(name: str, monkeypatch):
    """benchmarks/calibration/<name>.py, imported as the driver imports it."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module(f"calibration.{name}")


def notebook_code(name: str) -> str:
    """The code cells of notebooks/<name>.ipynb, as one module (IPython's ! and % lines left out)."""
    cells = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"]
    lines = [
        line
        for cell in cells
        if cell["cell_type"] == "code"
        for line in "".join(cell["source"]).splitlines()
        if not line.lstrip().startswith(("%", "!"))
    ]
    return "\n".join(lines)


def calls_of(tree: ast.AST, function: str) -> list[ast.Call]:
    """Every call of ``function`` (by its bare name or as an attribute) in ``tree``."""

    def named(call: ast.Call) -> bool:
        return function in (getattr(call.func, "id", None), getattr(call.func, "attr", None))

    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and named(node)]


def recipe_problems(source: str, function: str, recipe: str) -> list[str]:
    """What keeps ``source`` from training with attnedu.transformer's ``function`` and ``recipe``: no call of it with
    ``recipe`` passed by name; a call of it with no recipe of the course passed by name (a copy with other values);
    ``function`` or ``recipe`` defined here instead of imported from attnedu.transformer; a recipe changed here (an
    item assigned)."""
    tree = ast.parse(source)
    problems = []
    passed = [{a.id for a in (*call.args, *(k.value for k in call.keywords)) if isinstance(a, ast.Name)}
              for call in calls_of(tree, function)]  # fmt: skip
    if not any(recipe in names for names in passed):
        problems.append(f"never calls {function} with {recipe}")
    if not all(names & set(RECIPES) for names in passed):
        problems.append(f"calls {function} without one of the recipes {RECIPES} passed by name")
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "attnedu.transformer" for alias in node.names}  # fmt: skip
    for name in (function, recipe):
        if name not in imported:
            problems.append(f"does not import {name} from attnedu.transformer")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in (function, recipe):
            problems.append(f"defines its own {node.name} (line {node.lineno})")
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            base = target.value if isinstance(target, ast.Subscript) else target
            if isinstance(base, ast.Name) and base.id == recipe and isinstance(node, (ast.Assign, ast.AugAssign)):
                problems.append(f"assigns to {recipe} (line {node.lineno})")
    return problems


@pytest.mark.parametrize(("notebook", "function", "recipe"), EXPERIMENTS)
def test_lesson_and_calibration_run_one_function_with_one_recipe(notebook, function, recipe):
    assert isinstance(getattr(transformer, recipe), dict) and callable(getattr(transformer, function))
    assert recipe_problems(notebook_code(notebook), function, recipe) == [], notebook
    module = calibration_of(notebook)
    assert recipe_problems(module.read_text(), function, recipe) == [], module.relative_to(ROOT)


def override_problems(source: str, module: str, function: str, recipe: str) -> list[str]:
    """What keeps ``source`` from training with ``module``'s ``function`` and the recipe it takes as its default: no
    call of it; a call that overrides a key of ``recipe`` or passes ``**`` keywords; ``function`` defined here instead
    of imported from ``module``."""
    tree = ast.parse(source)
    calls = calls_of(tree, function)
    keys = set(getattr(importlib.import_module(module), recipe))
    problems = [] if calls else [f"never calls {function}"]
    for call in calls:
        overridden = sorted(k.arg or "**" for k in call.keywords if k.arg is None or k.arg in keys)
        if overridden:
            problems.append(f"calls {function} with {overridden} (line {call.lineno}): {recipe} changed")
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == module for alias in node.names}  # fmt: skip
    if function not in imported:
        problems.append(f"does not import {function} from {module}")
    problems += [f"defines its own {node.name} (line {node.lineno})" for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == function]  # fmt: skip
    return problems


@pytest.mark.parametrize(("notebook", "module", "function", "recipe"), DEFAULT_RECIPES)
def test_lesson_and_calibration_run_one_function_with_its_own_recipe(notebook, module, function, recipe):
    assert override_problems(notebook_code(notebook), module, function, recipe) == [], notebook
    path = calibration_of(notebook)
    assert override_problems(path.read_text(), module, function, recipe) == [], path.relative_to(ROOT)


def uses_an_optimiser(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").startswith("torch.optim")
    return isinstance(node, ast.Attribute) and node.attr == "optim"


@pytest.mark.parametrize("notebook", LESSONS)
def test_no_training_loop_is_written_twice(notebook):
    """The loops live in the package only: no optimiser (torch.optim) in the lessons' cells or in their calibration
    (a gradient shown by hand, as lesson 06 shows one, is no training)."""
    module = calibration_of(notebook)
    for where, source in ((notebook, notebook_code(notebook)), (module.name, module.read_text())):
        optimisers = [node.lineno for node in ast.walk(ast.parse(source)) if uses_an_optimiser(node)]
        assert optimisers == [], f"{where} trains by itself (lines {optimisers}); call the package's function"


def test_no_calibration_trains_by_itself():
    """Nor in any calibration module or the driver: what they train is the lessons' package functions."""
    for path in (BENCHMARKS / "calibrate.py", *sorted(CALIBRATION.glob("*.py"))):
        optimisers = [node.lineno for node in ast.walk(ast.parse(path.read_text())) if uses_an_optimiser(node)]
        assert optimisers == [], f"{path.relative_to(ROOT)} trains by itself (lines {optimisers})"


def test_the_checks_catch_a_copy():
    """The checks above fail on a calibration that copies the recipe or passes another one."""
    good = "from attnedu.transformer import RECALL_04, train_recall\ntrain_recall(16, 'raw', 0, h, RECALL_04)\n"
    assert recipe_problems(good, "train_recall", "RECALL_04") == []
    assert recipe_problems(good.replace(", RECALL_04)", ", dict(RECALL_04, steps=10))"), "train_recall", "RECALL_04")
    assert recipe_problems(good.replace(", RECALL_04)", ", NEIGHBOURS_05)"), "train_recall", "RECALL_04")
    assert recipe_problems(good + "RECALL_04['lr'] = 1e-2\n", "train_recall", "RECALL_04")
    assert recipe_problems(good.replace("import RECALL_04, ", "import "), "train_recall", "RECALL_04")
    assert recipe_problems(good + "def train_recall(*args):\n    pass\n", "train_recall", "RECALL_04")
    assert recipe_problems("x = 1\n", "train_recall", "RECALL_04")
    good = "from attnedu.induction import train_induction\ntrain_induction(2, held_out, seed=0, scored=varied)\n"
    args = ("attnedu.induction", "train_induction", "INDUCTION")
    assert override_problems(good, *args) == []
    assert override_problems(good.replace("seed=0", "seed=0, steps=10"), *args)
    assert override_problems(good.replace("seed=0", "seed=0, **faster"), *args)
    assert override_problems(good.replace("attnedu.induction", "my_heads", 1), *args)
    assert override_problems(good + "def train_induction(*args):\n    pass\n", *args)
    assert override_problems("x = 1\n", *args)


def test_every_lesson_module_has_the_interface(monkeypatch):
    """benchmarks/calibration/: every module the driver runs has the same small interface, and no two modules share
    a lesson or an experiment's name (the driver finds a lesson's module, and an experiment's, by them)."""
    package = calibration_module("common", monkeypatch)  # the package, through one of its modules
    names = importlib.import_module("calibration").MODULES
    assert sorted(names) == sorted(p.stem for p in CALIBRATION.glob("lesson*.py")), "calibration.MODULES"
    lessons, experiments = [], []
    for name in names:
        module = calibration_module(name, monkeypatch)
        for attribute in ("LESSONS", "EXPERIMENTS", "SEEDS", "run", "report"):
            assert hasattr(module, attribute), f"calibration/{name}.py has no {attribute}"
        assert {0, 1000} <= set(module.SEEDS), f"{name}: the lesson's own seed and the perturbed run's"
        lessons += module.LESSONS
        experiments += module.EXPERIMENTS
        if hasattr(module, "margins"):
            assert hasattr(module, "RECORD") and hasattr(module, "MARGIN_RULES"), name
    assert len(lessons) == len(set(lessons)) and len(experiments) == len(set(experiments))
    assert package.RunInfo("c", (0,), 1, "2026-01-01").command == "c"


@pytest.mark.parametrize("name", RECORDED)
def test_the_records_follow_from_their_calibration(name, monkeypatch):
    """benchmarks/calibrationNN.json, which the lesson reads: its recipe is the calibration's (and the lesson checks
    it against its own), and its margins are its runs put through the module's rules (so that no margin can be typed
    in to make a lesson pass); it holds the lesson's own seed and the perturbed run's."""
    module = calibration_module(name, monkeypatch)
    record = json.loads((BENCHMARKS / module.RECORD).read_text())
    assert record["recipe"] == module.RECIPE
    if "runs" in record:  # the common format: one entry per set of CPU kernels
        if hasattr(module, "margins"):
            assert record["margins"] == module.margins(record["runs"])
            assert record["margin_rules"] == module.MARGIN_RULES
        assert len(record["runs"]) >= 2
        seeds = [{r["seed"] for r in run["results"]} for run in record["runs"]]
    else:  # lesson 10's record, in its own format: one set of kernels
        seeds = [{r["seed"] for r in record["results"]}]
    assert all({0, 1000} <= found for found in seeds)


def test_the_records_are_found():
    assert {"lesson09", "lesson10", "lesson13"} <= set(RECORDED)


def short(recipe: dict, **changes) -> dict:
    return {**recipe, **changes}


def test_train_recall_is_seeded_and_moved_by_the_offset(monkeypatch):
    recipe = short(transformer.RECALL_04, steps=4, every=2, held_out=50)
    held_out = transformer.recall_held_out(recipe)
    first = transformer.train_recall(16, "raw, small init", 0, held_out, recipe)
    assert first == transformer.train_recall(16, "raw, small init", 0, held_out, recipe)
    assert len(first.curve) == 2 and all(0 <= a <= 1 for a in first.curve)
    seed_1 = transformer.train_recall(16, "raw, small init", 1, held_out, recipe)
    assert first != seed_1
    monkeypatch.setenv("ATTNEDU_SEED_OFFSET", "1")  # how the perturbed run moves the seeds
    assert transformer.train_recall(16, "raw, small init", 0, held_out, recipe) == seed_1


def test_the_arms_of_lesson_04_differ_only_where_they_should():
    recipe = short(transformer.RECALL_04, steps=2, every=1, held_out=200)
    held_out = transformer.recall_held_out(recipe)
    runs = {kind: transformer.train_recall(256, kind, 0, held_out, recipe) for kind in transformer.RECALL_KINDS}
    # raw scores start 16 times (sqrt(256)) as spread as divided ones; the control starts as spread as divided
    assert runs["raw"].spread == pytest.approx(16 * runs["divided"].spread, rel=1e-4)
    assert runs["raw, small init"].spread == pytest.approx(runs["divided"].spread, rel=1e-4)


def test_train_neighbours_trains_the_model_it_is_given():
    recipe = short(transformer.NEIGHBOURS_05, steps=4, every=2, held_out=20)
    held_out = transformer.neighbour_held_out(recipe)
    assert held_out[0].shape == (20, recipe["length"]) and held_out[1].shape == (20, recipe["length"], 4)
    model = transformer.neighbour_classifier(4, recipe)
    before = [p.detach().clone() for p in model.parameters()]
    curve = transformer.train_neighbours(model, held_out, recipe)
    assert [step for step, _ in curve] == [2, 4]
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    again = transformer.neighbour_classifier(4, recipe)
    assert transformer.train_neighbours(again, held_out, recipe) == curve


def test_lessons_06_and_07_train_with_one_loop():
    corpus = CharCorpus.load()
    run = transformer.train_leak(True, corpus, short(transformer.LEAK_06, steps=3))
    assert run.model.causal and 0 < run.train_loss < 10
    model = transformer.train_extrapolation("alibi", corpus, short(transformer.EXTRAPOLATION_07, steps=2), seed=1)
    same = transformer.TinyTransformer(len(corpus.chars), len(corpus.chars), d_model=32, positions="alibi",
                                       num_layers=1, seed=1)  # fmt: skip
    losses = transformer.train_next_character(same, corpus, short(transformer.EXTRAPOLATION_07, steps=2), seed=1)
    assert len(losses) == 2
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), same.parameters()))
    held_out = transformer.neighbour_held_out(short(transformer.PREVIOUS_07, held_out=20))
    assert 0 <= transformer.train_previous_token("none", held_out, short(transformer.PREVIOUS_07, steps=2)) <= 1


def test_the_experiments_refuse_what_they_cannot_run():
    held_out = transformer.recall_held_out(transformer.RECALL_04)
    with pytest.raises(ValueError, match="kind"):
        transformer.train_recall(16, "divided by sqrt", 0, held_out, transformer.RECALL_04)
    with pytest.raises(ValueError, match="RECALL_04"):
        transformer.train_recall(16, "raw", 0, held_out, transformer.NEIGHBOURS_05)
    with pytest.raises(ValueError, match="LEAK_06"):
        transformer.train_leak(True, CharCorpus.load(), transformer.EXTRAPOLATION_07)
    with pytest.raises(TypeError, match="causal"):
        transformer.train_leak("yes", CharCorpus.load(), transformer.LEAK_06)
    with pytest.raises(ValueError, match="LEAK_06 or EXTRAPOLATION_07"):
        transformer.train_next_character(torch.nn.Linear(2, 2), CharCorpus.load(), {"steps": 1})
    with pytest.raises(ValueError, match="NEIGHBOURS_05 or PREVIOUS_07"):
        transformer.neighbour_held_out(transformer.RECALL_04)
