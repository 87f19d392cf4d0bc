"""The analysis is a pipeline: parse -> size -> simulate -> diagnose -> propose -> price, each stage importing
only the stages before it, and no import circle through the analysis (imports inside functions count:
they are cycles all the same; only `if TYPE_CHECKING:` blocks, which never run, are left out)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kvprobe"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, known: set[str], own: str) -> set[str]:
    found: set[str] = set()
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for child in node.body for n in ast.walk(child)}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n in known and n != own}
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(files)
    return {name: _imports(ast.parse(path.read_text()), known, name) for name, path in files.items()}


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


PIPELINE = ("kvprobe.analysis", "kvprobe.whatif", "kvprobe.economics", "kvprobe.diff", "kvprobe.report",
            "kvprobe.sim", "kvprobe.request")


def test_no_import_circle_through_the_analysis(graph):
    circles = sorted(m for m in graph if m.startswith(PIPELINE) and m in _reachable(graph, m))
    assert circles == []


@pytest.mark.parametrize("stage, later", [
    ("kvprobe.analysis.skeleton", ("kvprobe.analysis.sizing", "kvprobe.analysis.simulate")),
    ("kvprobe.analysis.sizing", ("kvprobe.analysis.simulate", "kvprobe.analysis.diagnose")),
    ("kvprobe.analysis.simulate", ("kvprobe.analysis.diagnose", "kvprobe.analysis.explain",
                                   "kvprobe.analysis.siblings", "kvprobe.whatif")),
    ("kvprobe.analysis.diagnose", ("kvprobe.whatif", "kvprobe.report")),
    ("kvprobe.diff", ("kvprobe.analysis.simulate", "kvprobe.analysis.diagnose", "kvprobe.whatif")),
    ("kvprobe.whatif.policies", ("kvprobe.whatif.evaluate", "kvprobe.report", "kvprobe.cli")),
    ("kvprobe.whatif.evaluate", ("kvprobe.report", "kvprobe.cli")),
])
def test_each_stage_imports_only_the_stages_before_it(graph, stage, later):
    reached = _reachable(graph, stage)
    assert not [m for m in reached if m.startswith(later)], stage


def test_the_executor_seam_knows_nothing_of_the_analysis(graph):
    """kvprobe.run maps any function over any units: the stages import it, never the reverse (an executor that
    knew the what-if's types would close an import circle executor <-> what-if)."""
    seam = [m for m in graph if m == "kvprobe.run" or m.startswith("kvprobe.run.")]
    assert {"kvprobe.run.pool", "kvprobe.run.forks", "kvprobe.run.cluster"} <= set(seam)
    reached = set().union(*(_reachable(graph, m) for m in seam))
    assert sorted(m for m in reached if m.startswith(PIPELINE + ("kvprobe.cli", "kvprobe.importers",
                                                                 "kvprobe.trace"))) == []
