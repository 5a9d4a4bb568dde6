"""Each trained experiment exists once: lessons 04-07 and their calibration (benchmarks/calibrate.py) train with the
same package function (attnedu.transformer) and the same recipe, a dict passed by name, so that the calibration
measures the lesson's experiment and not a copy of it (docs/style.md, experiment rules, "one experiment, one
function"). Lessons 09 and 11 are tied to their calibrations by tests of their own (tests/test_transformer_blocks.py,
tests/test_heads.py)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from attnedu import transformer
from attnedu.tasks import CharCorpus

ROOT = Path(__file__).resolve().parents[1]
CALIBRATE = ROOT / "benchmarks" / "calibrate.py"

# (lesson's notebook, a function of attnedu.transformer it calls, the recipe it passes): the calibration must call the
# same function with the same recipe
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
LESSONS = sorted({notebook for notebook, _, _ in EXPERIMENTS})
RECIPES = sorted({recipe for _, _, recipe in EXPERIMENTS})


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
    assert recipe_problems(CALIBRATE.read_text(), function, recipe) == [], "benchmarks/calibrate.py"


def uses_an_optimiser(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").startswith("torch.optim")
    return isinstance(node, ast.Attribute) and node.attr == "optim"


@pytest.mark.parametrize("notebook", LESSONS)
def test_no_training_loop_is_written_twice(notebook):
    """The loops live in attnedu.transformer only: no optimiser (torch.optim) in the lessons' cells or in
    calibrate.py (a gradient shown by hand, as lesson 06 shows one, is no training)."""
    for where, source in ((notebook, notebook_code(notebook)), ("benchmarks/calibrate.py", CALIBRATE.read_text())):
        optimisers = [node.lineno for node in ast.walk(ast.parse(source)) if uses_an_optimiser(node)]
        assert optimisers == [], f"{where} trains by itself (lines {optimisers}); call attnedu.transformer's function"


def test_the_checks_catch_a_copy():
    """The checks above fail on a calibration that copies the recipe or passes another one."""
    good = "from attnedu.transformer import RECALL_04, train_recall\ntrain_recall(16, 'raw', 0, h, RECALL_04)\n"
    assert recipe_problems(good, "train_recall", "RECALL_04") == []
    assert recipe_problems(good.replace(", RECALL_04)", ", dict(RECALL_04, steps=10))"), "train_recall", "RECALL_04")
    assert recipe_problems(good + "RECALL_04['lr'] = 1e-2\n", "train_recall", "RECALL_04")
    assert recipe_problems(good.replace("import RECALL_04, ", "import "), "train_recall", "RECALL_04")
    assert recipe_problems(good + "def train_recall(*args):\n    pass\n", "train_recall", "RECALL_04")
    assert recipe_problems("x = 1\n", "train_recall", "RECALL_04")


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
