"""`kvprobe compare BASE CANDIDATE`: the same tasks before and after a change, task by task."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from kvprobe.cli.common import money, out, print_json, user_errors
from kvprobe.cli.tables import Col, print_table
from kvprobe.compare import compare, load_baseline, shown, summary_of, to_markdown
from kvprobe.economics.tasks import load_outcomes
from kvprobe.report import build_report


def summary_for(path: Path, outcomes: Path | None = None) -> dict:
    """A baseline JSON file as is, or the summary of a trace."""
    if path.suffix == ".json":
        return load_baseline(path)
    rep = build_report([path], fixes=False, outcomes=load_outcomes(outcomes) if outcomes else None)
    return summary_of(rep)


def _cell(row: dict, metric: str) -> str:
    return f"{shown(metric, row[metric]['base'])} → {shown(metric, row[metric]['candidate'])}"


def _yes_no(value: bool | None) -> str:
    return "–" if value is None else ("pass" if value else "fail")


def compare_cmd(
    base: Annotated[Path, typer.Argument(help="Base trace (JSONL) or baseline (JSON)")],
    candidate: Annotated[Path, typer.Argument(help="Candidate trace (JSONL) or baseline (JSON)")],
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Markdown for a PR comment")] = False,
    tolerance: Annotated[float, typer.Option("--tolerance", help="Relative change that counts as a regression")] = 0.05,
    base_outcomes: Annotated[Path | None, typer.Option("--base-outcomes", help="Outcomes JSONL for BASE")] = None,
    outcomes: Annotated[Path | None, typer.Option("--outcomes", help="Outcomes JSONL for CANDIDATE")] = None,
) -> None:
    """Compare two trace sets of the same tasks: cost, input-equivalents, hit ratio, pass rate, duration.

    Example: kvprobe compare before.jsonl after.jsonl --markdown
    """
    with user_errors():
        result = compare(summary_for(base, base_outcomes), summary_for(candidate, outcomes), tolerance)
    if json_out:
        print_json(result.to_json())
        return
    if markdown:
        out.print(to_markdown(result), markup=False, highlight=False, soft_wrap=True)
        return
    # "base → candidate" cells never wrap at their arrow; narrow, input-equivalents (cost says it in
    # dollars) and pass/fail go first, the new diagnoses (why it got worse) last
    cols = (Col("task", wrap=True), Col("cost"), Col("input-equiv.", drop=1), Col("hit ratio"),
            Col("passed", drop=2), Col("worse", wrap=True), Col("new diagnoses", wrap=True, drop=3))
    rows = []
    for t in result.tasks:
        row = t.to_json()
        rows.append([t.task, _cell(row, "cost_usd"), _cell(row, "input_equivalent_tokens"),
                     _cell(row, "token_hit_ratio"), f"{_yes_no(row['passed']['base'])} → "
                                                           f"{_yes_no(row['passed']['candidate'])}",
                     Text(", ".join(t.regressed), style="red"), ", ".join(t.new_diagnoses)])
    print_table("Tasks: base → candidate", cols, rows)
    totals = result.totals()
    cost = totals["cost_usd"]
    out.print(f"Total cost: {money(cost['base'])} → {money(cost['candidate'])}; "
              f"regressed: {', '.join(t.task for t in result.regressed) or 'none'}; "
              f"cheaper: {', '.join(t.task for t in result.improved) or 'none'}")
