"""Read a submission's code, without running it, for the common ways to forge a grade.

The grader does not need the checks in the learner's kernel, so patching them, or printing a
fake grade line, earns nothing; this scan makes such attempts visible in the notes anyway.
Using the course's own reference implementation does earn marks, so it costs them:

* any cell that imports an ``attnedu`` module other than ``attnedu`` and ``attnedu.checks`` (or
  names one in a string, as ``importlib.import_module`` needs), or reaches past the public check
  API (``attnedu.checks.EXERCISES``, ``attnedu.attention.additive_score``) is noted;
* an exercise whose final definition is such an import, is assigned from one, uses one in its
  body, or sits in a cell that imports one, is *flagged*: it scores 0 with a note. (The grader
  also flags a function whose ``__module__`` turns out to be an ``attnedu`` module.)

A scratch cell that imports the reference to compare with is noted but costs nothing, as long
as the exercise's own definition does not use it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

SAFE_MODULES = {"attnedu", "attnedu.checks"}
SAFE_FROM_ATTNEDU = {"setup_notebook", "checks", "__version__"}
# Helpers of the course that exercises' notebooks use, which give no answer away (a reference kernel taken from
# attnedu.triton_basics is still flagged: by its module, when the grader describes the function it called;
# attnedu.runtime.rounded only prints a number the way the lessons do).
SAFE_HELPERS = {
    "attnedu.triton_basics": {"compare_on_gpu", "triton_state", "triton_stand_ins"},
    "attnedu.runtime": {"rounded"},
    # what a prediction exercise measures against (exercises 03 and 05): the check forbids running them inside
    # the learner's function (Exercise.forbidden), so using them in a measuring cell is fine
    "attnedu.attention": {"local_p_weights"},
    "attnedu.tasks": {"neighbour_task"},
    # exercise 12 plugs the learner's ring_step into a real ring of processes (the check forbids these, and all of
    # attnedu.context_parallel, inside the learner's functions)
    "attnedu.context_parallel": {
        "run_ranks",
        "RankError",
        "shard_sequence",
        "gather_sequence",
        "ring_attention_forward",
    },
    # exercise 13b loops the learner's gated_delta_step over a sequence and compares it with the lesson's recurrence
    # and its chunked form (the check forbids all of attnedu.delta_rule inside the learner's functions)
    "attnedu.delta_rule": {"delta_rule", "delta_rule_chunked"},
}
# (recorded_prediction: the learner's own first prediction of the session, which an exercise cell waits for before it
# shows a measurement; it gives nothing of the measurement away)
SAFE_FROM_CHECKS = {
    "check", "hint", "CheckResult", "Hint", "PASSED", "FAILED", "NOT_ATTEMPTED", "ICONS", "TIME_LIMIT", "MAX_PRINTED",
    "recorded_prediction",
}  # fmt: skip
HOOK_NAMES = {"pre_run_cell", "post_run_cell", "pre_execute", "post_execute", "shell_initialized"}
HOOK_ATTRS = {"ast_transformers", "input_transformers_post", "input_transformers_cleanup", "register_magic_function"}
TRACE_CALLS = {"sys.settrace", "sys.setprofile", "sys.addaudithook", "threading.settrace", "threading.setprofile"}
SIGNAL_CALLS = {"signal.signal", "signal.setitimer", "signal.alarm", "signal.pthread_sigmask", "signal.siginterrupt"}
PROCESS_CALLS = {
    "os._exit", "os.kill", "os.killpg", "os.fork", "os.system", "os.setsid", "os.remove", "os.unlink", "os.rmdir",
    "shutil.rmtree", "subprocess.Popen", "subprocess.run", "subprocess.call", "subprocess.check_call",
    "subprocess.check_output", "socket.socket", "socket.create_connection", "ctypes.CDLL",
}  # fmt: skip
OLD_GRADE_MARKER = "ATTNEDU-GRADE"


@dataclass
class Scan:
    notes: list[str] = field(default_factory=list)  # for the notes column, in cell order
    flagged: dict[str, str] = field(default_factory=dict)  # exercise -> why it scores 0

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def _safe_check_name(name: str) -> bool:
    return name in SAFE_FROM_CHECKS or name.startswith("check_")


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


class _Cell(ast.NodeVisitor):
    """One cell: what it imports from attnedu, what it does to it, and the exercises it defines."""

    def __init__(self, index: int, aliases: dict[str, str], tainted: set[str], exercises: set[str]):
        self.index, self.aliases, self.tainted, self.exercises = index, aliases, tainted, exercises
        self.reference: list[str] = []  # forbidden imports and references, as written
        self.tampering: list[str] = []
        self.hooks: list[str] = []
        self.signals: list[str] = []
        self.process: list[str] = []
        self.forged_line = False
        self.defines: dict[str, bool] = {}  # exercise -> whether its definition uses the reference

    # -- names --------------------------------------------------------------------------------
    def _resolve(self, dotted: str) -> str:
        """``C.run_check`` -> ``attnedu.checks.run_check`` when C is an alias of attnedu.checks."""
        head, _, rest = dotted.partition(".")
        if head in self.aliases:
            return self.aliases[head] + ("." + rest if rest else "")
        return dotted

    def _forbidden(self, resolved: str) -> bool:
        if resolved == "attnedu" or not resolved.startswith("attnedu."):
            return False
        rest = resolved[len("attnedu.") :].split(".")
        module = f"attnedu.{rest[0]}"
        if module in SAFE_HELPERS and len(rest) > 1 and rest[1] in SAFE_HELPERS[module]:
            return False
        if rest[0] != "checks":
            return rest[0] not in SAFE_FROM_ATTNEDU
        return len(rest) > 1 and not _safe_check_name(rest[1])

    def _uses_reference(self, node: ast.AST) -> bool:
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and inner.id in self.tainted:
                return True
            if isinstance(inner, ast.Attribute):
                dotted = _dotted(inner)
                if dotted and self._forbidden(self._resolve(dotted)):
                    return True
            if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and self._names_reference(inner.value):
                return True
        return False

    def _names_reference(self, text: str) -> bool:
        return text.startswith("attnedu.") and self._forbidden(text)

    # -- imports --------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            name = alias.name
            if name != "attnedu" and not name.startswith("attnedu."):
                continue
            bound = alias.asname or name.split(".")[0]
            if name in SAFE_MODULES:
                self.aliases[bound] = name if alias.asname else "attnedu"
            else:
                self.reference.append(f"import {name}")
                self.aliases[bound] = name if alias.asname else "attnedu"
                if alias.asname:
                    self.tainted.add(alias.asname)
                self._bind(bound, True)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or (module != "attnedu" and not module.startswith("attnedu.")):
            return
        for alias in node.names:
            bound = alias.asname or alias.name
            if module == "attnedu" and alias.name in SAFE_FROM_ATTNEDU:
                if alias.name == "checks":
                    self.aliases[bound] = "attnedu.checks"
                continue
            if module == "attnedu.checks" and _safe_check_name(alias.name):
                continue
            if alias.name in SAFE_HELPERS.get(module, ()):
                continue
            self.reference.append(f"from {module} import {alias.name}")
            self.tainted.add(bound)
            self.aliases[bound] = f"{module}.{alias.name}"
            self._bind(bound, True)

    # -- definitions of exercises ---------------------------------------------------------------
    def _bind(self, name: str, uses_reference: bool) -> None:
        if not uses_reference:  # rebound to the learner's own code: no longer the reference
            self.tainted.discard(name)
            self.aliases.pop(name, None)
        if name in self.exercises:
            self.defines[name] = uses_reference

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name in self.exercises:
            self._bind(node.name, self._uses_reference(node))
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node: ast.Assign) -> None:
        uses = self._uses_reference(node.value)
        for target in node.targets:
            self._target(target, uses)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._target(node.target, self._uses_reference(node.value))
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, False)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._target(target, False)
        self.generic_visit(node)

    def _target(self, target: ast.AST, uses: bool) -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id, uses)
            if uses:
                self.tainted.add(target.id)
        elif isinstance(target, ast.Attribute):
            dotted = _dotted(target)
            resolved = self._resolve(dotted) if dotted else ""
            if resolved.startswith("attnedu"):
                self.tampering.append(f"assigns `{dotted}`")
        elif isinstance(target, ast.Subscript):
            dotted = _dotted(target.value)
            if dotted in ("sys.modules",):
                self.tampering.append("replaces a module in `sys.modules`")
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._target(element, uses)

    # -- calls, attributes, strings --------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        dotted = _dotted(node.func) or ""
        resolved = self._resolve(dotted)
        if dotted in ("setattr", "delattr") and node.args:
            target = _dotted(node.args[0]) or ""
            if self._resolve(target).startswith("attnedu") or target == "sys.modules":
                self.tampering.append(f"calls `{dotted}` on `{target}`")
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in ("register", "unregister")
            and isinstance(func.value, ast.Attribute)
            and func.value.attr == "events"
        ):
            self.hooks.append("`events.register(...)`")
        if resolved in TRACE_CALLS:
            self.hooks.append(f"`{dotted}(...)`")
        if resolved in SIGNAL_CALLS:
            self.signals.append(f"`{dotted}(...)`")
        if resolved in PROCESS_CALLS:
            self.process.append(f"`{dotted}`")
        if dotted.startswith("sys.modules.") and dotted.rsplit(".", 1)[-1] in ("update", "pop", "__setitem__"):
            self.tampering.append("changes `sys.modules`")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in HOOK_ATTRS:
            self.hooks.append(f"`.{node.attr}`")
        dotted = _dotted(node)
        if dotted and isinstance(node.ctx, ast.Load) and self._forbidden(self._resolve(dotted)):
            self.reference.append(f"uses `{dotted}`")
            return  # not the inner parts of the same chain again
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            if OLD_GRADE_MARKER in node.value:
                self.forged_line = True
            if node.value in HOOK_NAMES:
                self.hooks.append(f"the `{node.value}` event")
            if self._names_reference(node.value):
                self.reference.append(f"names `{node.value}`")


def _parse(source: str) -> ast.AST | None:
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)  # %magics and !shell lines as Python
    except Exception:
        pass
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def scan(nb, exercises: list[str]) -> Scan:
    """Notes and flagged exercises for notebook ``nb`` (an nbformat NotebookNode)."""
    result = Scan()
    aliases: dict[str, str] = {}
    tainted: set[str] = set()
    final: dict[str, tuple[int, bool, list[str]]] = {}  # exercise -> (cell, uses the reference, cell's imports)
    for index, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        tree = _parse(cell.get("source", ""))
        if tree is None:
            continue
        visitor = _Cell(index, aliases, tainted, set(exercises))
        visitor.visit(tree)
        imports = [r for r in visitor.reference if r.startswith(("import ", "from "))]
        if visitor.reference:
            what = ", ".join(f"`{r}`" if r.startswith(("import ", "from ")) else r for r in _unique(visitor.reference))
            result.note(f"cell {index} uses the course's reference code ({what[:300]})")
        if visitor.tampering:
            result.note(f"cell {index} tampers with the grading code: {'; '.join(_unique(visitor.tampering))[:300]}")
        if visitor.hooks:
            hooks = ", ".join(_unique(visitor.hooks))
            result.note(f"cell {index} installs a hook that runs around other code: {hooks}")
        if visitor.forged_line:
            result.note(f"cell {index} contains a grade line ({OLD_GRADE_MARKER}) to print: a forged grade")
        if visitor.signals:
            result.note(f"cell {index} changes signal handling ({', '.join(_unique(visitor.signals))})")
        if visitor.process:
            result.note(f"cell {index} calls {', '.join(_unique(visitor.process))}")
        for name, uses in visitor.defines.items():
            final[name] = (index, uses, imports)
    for name, (index, uses, imports) in final.items():
        if uses:
            result.flagged[name] = f"its definition in cell {index} uses the course's reference implementation"
        elif imports:
            result.flagged[name] = (
                f"the cell that defines it (cell {index}) imports the course's reference code ({imports[0]})"
            )
    return result
