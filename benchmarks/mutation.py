"""Mutation testing of the rule core, one module at a time, with a report of survivors by file and line.

    uv sync --frozen --all-extras --group dev --group mutation      # once: mutmut is not in the default groups
    uv run --group mutation python benchmarks/mutation.py kvprobe/sim/anthropic.py
    uv run --group mutation python benchmarks/mutation.py --report-only kvprobe/sim kvprobe/secrets.py

mutmut (configured in pyproject.toml's [tool.mutmut]: the rule core, the in-process tests that exercise it)
makes every mutant of the modules named, runs each against only the tests that called its function, and
keeps the outcome in mutants/ (a module not changed since is not run again). The report lists, per file, the
mutants made, killed and surviving, and every survivor with its line and change, marked equivalent where
benchmarks/mutation_equivalent.toml says why the change cannot alter what a user sees. docs/testing.md
records the counts. Not a test: minutes to hours on 2 cores, so never in the default suite.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT = Path(__file__).with_name("mutation_equivalent.toml")
# The tests that state each module's rules; a mutant runs only those of them that called its function (the
# plugin narrows mutmut's own selection to these, see benchmarks/mutation_plugin.py).
FOCUS = {
    "kvprobe/sim": ["tests/test_rule_edges.py", "tests/test_simulator_rules.py", "tests/test_openai_breakpoints.py",
                    "tests/test_rules_2026.py", "tests/test_mixed_lineup.py", "tests/test_keep_alive.py", "tests/test_openai_edges.py",
                    "tests/test_implicit_edges.py", "tests/test_gemini_explicit_edges.py", "tests/test_cache_routing.py",
                    "tests/test_lookback_positions.py", "tests/test_local_engine_rules.py",
                    "tests/test_anthropic_evidence.py", "tests/test_replay_forgets.py",
                    "tests/test_openai_retention.py"],
    "kvprobe/secrets.py": ["tests/test_secret_shapes.py", "tests/test_secrets_on_disk.py", "tests/test_key_shapes.py",
                           "tests/test_credentials_and_identity.py", "tests/test_shape_edges.py"],
    "kvprobe/pricing.py": ["tests/test_rule_edges.py", "tests/test_catalog_usage.py", "tests/test_usage_cmd.py",
                           "tests/test_economics.py", "tests/test_rules_2026.py",
                           "tests/test_price_book.py"],
    "kvprobe/whatif": ["tests/test_whatif.py", "tests/test_fleet_names.py", "tests/test_fleet_policies.py",
                       "tests/test_multiagent_session.py", "tests/test_keep_alive.py",
                       "tests/test_whatif_edits.py", "tests/test_whatif_policies.py",
                       "tests/test_whatif_domains.py",
                       "tests/test_whatif_content.py",
                       "tests/test_openai_breakpoints.py", "tests/test_openai_edges.py", "tests/test_run_seam.py",
                       "tests/test_second_core.py",
                       "tests/test_whatif_timing.py", "tests/test_whatif_reshape.py",
                       "tests/test_whatif_evaluate.py",
                       "tests/test_whatif_marks.py",
                       "tests/test_whatif_baseline.py",
                       "tests/test_fleet_lifetime_rules.py",
                       "tests/test_span_candidates.py",
                       "tests/test_openai_retention.py"],
    "kvprobe/analysis/usage_only.py": ["tests/test_usage_only.py", "tests/test_usage_rule.py",
                                       "tests/test_rebuilt_history.py", "tests/test_streams_per_model.py",
                                       "tests/test_agent_advice.py", "tests/test_usage_only_causes.py",
                                       "tests/test_codex_turns.py"],
}
NAME = re.compile(r"^\s*(?P<name>[\w.ǁ]+__mutmut_\d+): (?P<status>.+)$")


@dataclass(slots=True)
class Mutant:
    name: str  # kvprobe.sim.anthropic.xǁAnthropicCacheǁprocess__mutmut_5
    status: str  # killed | survived | no tests | timeout | suspicious | not checked | ...
    file: str = ""
    line: int = 0
    before: str = ""
    after: str = ""
    why_equivalent: str | None = None

    @property
    def module(self) -> str:
        return self.name.split(".x", 1)[0] if ".x" in self.name else self.name.rsplit(".", 1)[0]

    @property
    def function(self) -> str:
        """The function as mutmut names it (xǁClassǁmethod or x_function), without the mutant number."""
        return self.name[len(self.module) + 1:].rsplit("__mutmut_", 1)[0]


def dotted(path: str) -> str:
    return str(Path(path).with_suffix("")).replace(os.sep, ".").removesuffix(".__init__")


def focus(module: str) -> list[str]:
    found = [tests for prefix, tests in FOCUS.items() if module.rstrip("/").startswith(prefix)]
    return found[0] if found else []


def run(modules: list[str], jobs: int, log: Path) -> None:
    """mutmut run over the mutants of the modules given (its progress to a log: it redraws a line)."""
    globs = [f"{dotted(m)}.*" for m in modules]
    tests = sorted({t for m in modules for t in focus(m)})
    env = {**os.environ, "KVPROBE_MUTATION_TESTS": ",".join(tests)} if all(focus(m) for m in modules) else None
    with log.open("w") as out:
        done = subprocess.run(["nice", "-n", "10", sys.executable, "-m", "mutmut", "run", "--max-children",
                               str(jobs), *globs], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    if done.returncode:
        sys.exit(f"mutmut run failed ({done.returncode}): see {log}")


def results() -> list[Mutant]:
    done = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return [Mutant(m["name"], m["status"].strip()) for m in map(NAME.match, done.stdout.splitlines()) if m]


def _spans(module: str) -> tuple[list[str], dict[str, list[int]]]:
    mutated = ROOT / "mutants" / (module.replace(".", os.sep) + ".py")
    if not mutated.exists():
        mutated = mutated.with_suffix("") / "__init__.py"
    spans = json.loads(Path(f"{mutated}.spans").read_text())["spans"]
    return mutated.read_text().splitlines(), spans


def _def_line(source: str, function: str) -> int | None:
    """The line of `def` of mutmut's function name in the original file (x_name, xǁClassǁname)."""
    parts = function[1:].split("ǁ")[1:] if function.startswith("xǁ") else [function[2:]]
    nodes: list[ast.AST] = ast.parse(source).body
    found = None
    for part in parts:
        found = next((n for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and n.name == part), None)
        if found is None:
            return None
        nodes = found.body
    return found.lineno if found is not None else None


def locate(mutant: Mutant, cache: dict) -> None:
    """File, line and change of a mutant: its function beside the original in mutants/, diffed."""
    if mutant.module not in cache:
        cache[mutant.module] = _spans(mutant.module)
    lines, spans = cache[mutant.module]
    short = mutant.name[len(mutant.module) + 1:]
    orig, new = spans.get(f"{mutant.function}__mutmut_orig"), spans.get(short)
    if orig is None or new is None:
        return
    a = lines[orig[0] - 1:orig[1]]
    b = [line.replace(short, f"{mutant.function}__mutmut_orig") for line in lines[new[0] - 1:new[1]]]
    ops = [op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if not ops:
        return
    _, i1, i2, j1, j2 = ops[0]
    mutant.before = " / ".join(s.strip() for s in a[i1:i2]) or "(nothing)"
    mutant.after = " / ".join(s.strip() for s in b[j1:j2]) or "(deleted)"
    path = mutant.module.replace(".", os.sep) + ".py"
    if not (ROOT / path).exists():
        path = path.removesuffix(".py") + "/__init__.py"
    mutant.file = path
    start = _def_line((ROOT / path).read_text(), mutant.function)
    mutant.line = (start + i1) if start else 0  # the spans start at the def line, as the original does


def equivalents() -> list[dict]:
    return tomllib.loads(EQUIVALENT.read_text())["equivalent"] if EQUIVALENT.exists() else []


def _changed(before: str, after: str) -> tuple[int, int]:
    """The span of `before` that the mutation changed (what its common prefix and suffix with `after` leave)."""
    head = 0
    while head < min(len(before), len(after)) and before[head] == after[head]:
        head += 1
    tail = 0
    while tail < min(len(before), len(after)) - head and before[-1 - tail] == after[-1 - tail]:
        tail += 1
    return head, len(before) - tail


def classify(mutant: Mutant, known: list[dict]) -> None:
    """Equivalent when an entry names its file and function and the change lies inside the entry's `before`."""
    lo, hi = _changed(mutant.before, mutant.after)
    for entry in known:
        at = mutant.before.find(entry["before"])
        if entry["file"] == mutant.file and entry["function"] == mutant.function.split("ǁ")[-1].removeprefix("x_") \
                and at >= 0 and at <= lo and hi <= at + len(entry["before"]) and entry["after"] in mutant.after:
            mutant.why_equivalent = entry["why"]
            return


def report(mutants: list[Mutant]) -> str:
    by_file: dict[str, list[Mutant]] = {}
    for m in mutants:
        by_file.setdefault(m.file or m.module, []).append(m)
    out = ["| file | mutants | killed | survived (equivalent) | no tests | timeout | not checked |", "|---|---|---|---|---|---|---|"]
    rows = []
    for file, ms in sorted(by_file.items()):
        count = lambda status: sum(m.status == status for m in ms)  # noqa: E731
        equivalent = sum(m.status == "survived" and m.why_equivalent is not None for m in ms)
        out.append(f"| {file} | {len(ms)} | {count('killed')} | {count('survived')} ({equivalent}) | "
                   f"{count('no tests')} | {count('timeout')} | {count('not checked')} |")
        for m in sorted(ms, key=lambda m: m.line):
            if m.status in ("survived", "no tests", "timeout", "suspicious"):
                tag = f"equivalent: {m.why_equivalent}" if m.why_equivalent else m.status.upper()
                rows.append(f"{m.file}:{m.line}  `{m.before}` -> `{m.after}`  [{tag}]  ({m.name.rsplit('.', 1)[1]})")
    return "\n".join(out + ["", "Survivors by file and line:", *rows]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="+", help="files or folders under kvprobe/ (one run each is best)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants tested at once (default 2: the cores)")
    parser.add_argument("--report-only", action="store_true", help="report what mutants/ holds, run nothing")
    parser.add_argument("--out", type=Path, default=ROOT / "mutants" / "report.md")
    args = parser.parse_args()
    if not args.report_only:
        run(args.modules, args.jobs, ROOT / "mutants-run.log")
    prefixes = tuple(f"{dotted(m)}." for m in args.modules)
    mutants = [m for m in results() if m.name.startswith(prefixes)]
    cache: dict = {}
    known = equivalents()
    for m in mutants:
        locate(m, cache)
        classify(m, known)
    text = report(mutants)
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
