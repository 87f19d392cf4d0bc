"""`kvprobe gate TRACE` for CI, and `kvprobe baseline TRACE -o baseline.json` to compare against later."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.text import Text

from kvprobe.cli.common import Force, out, output_path, print_json, user_errors
from kvprobe.compare import load_baseline, summary_of
from kvprobe.economics.tasks import load_outcomes
from kvprobe.gate.check import GateResult, run_gate, to_markdown
from kvprobe.gate.config import Thresholds, load_thresholds, parse_setting
from kvprobe.pricing import PriceBook
from kvprobe.report import build_report
from kvprobe.trace.writer import write_atomic


def gate(
    trace: Annotated[Path, typer.Argument(help="Trace file (JSONL)", metavar="TRACE")],
    max_cost_usd: Annotated[str | None, typer.Option("--max-cost-usd", metavar="USD",
                                                     help="Total cost limit")] = None,
    max_cost_per_task: Annotated[str | None, typer.Option("--max-cost-per-task", metavar="USD",
                                                          help="Limit for any one task")] = None,
    min_hit_ratio: Annotated[str | None, typer.Option("--min-hit-ratio", metavar="RATIO",
                                                      help="Token hit ratio floor: 0.8 or 80%")] = None,
    max_input_equivalent: Annotated[str | None, typer.Option("--max-input-equivalent", metavar="TOKENS",
                                                             help="Input-token-equivalent limit")] = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", metavar="PATH",
                                                  help="baseline.json from `kvprobe baseline`")] = None,
    max_regression: Annotated[str | None, typer.Option("--max-regression", metavar="RATIO",
                                                       help="Allowed regression against --baseline: 0.1 or 10% "
                                                            "(default 10%)")] = None,
    price_file: Annotated[Path | None, typer.Option("--price-file", metavar="PATH",
                                                    help="TOML/JSON prices for models kvprobe cannot price")] = None,
    outcomes: Annotated[Path | None, typer.Option("--outcomes", metavar="PATH", help="Task outcomes JSONL")] = None,
    predicted: Annotated[bool, typer.Option("--predicted", help="Gate on the simulation when no usage was logged")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print a Markdown summary (also written to "
                                                                "$GITHUB_STEP_SUMMARY when set)")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable result")] = False,
) -> None:
    """Fail CI (exit 1) when cost or cache reuse crosses a threshold; exit 3 when it cannot decide.

    Thresholds come from flags, else `kvprobe.toml` [gate] or `pyproject.toml` [tool.kvprobe.gate].
    A cost threshold over requests kvprobe cannot price is undecidable (exit 3) unless --price-file
    prices them.

    Example: kvprobe gate trace.jsonl --min-hit-ratio 80% --baseline baseline.json --max-regression 10%
    """
    with user_errors():
        t = _thresholds(max_cost_usd=max_cost_usd, max_cost_per_task=max_cost_per_task,
                        min_hit_ratio=min_hit_ratio, max_input_equivalent=max_input_equivalent,
                        baseline=str(baseline) if baseline else None, max_regression=max_regression)
        base = load_baseline(Path(t.baseline)) if t.baseline else None
        report = build_report([trace], outcomes=load_outcomes(outcomes) if outcomes else None,
                              predicted_only=predicted, prices=PriceBook.from_file(price_file))
        result = run_gate(report, t, base, allow_predicted=predicted)
        if t.empty and result.decidable:
            result = GateResult([], decidable=False, reason="no thresholds: pass flags or set [tool.kvprobe.gate]")
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path and markdown:
        with open(summary_path, "a", encoding="utf-8") as fh:
            fh.write(to_markdown(result) + "\n")
    if json_out:
        print_json(result.to_json())
    elif markdown:
        out.print(to_markdown(result), markup=False, highlight=False, soft_wrap=True)
    else:
        _render(result)
    raise typer.Exit(result.exit_code)


def _thresholds(**flags: str | None) -> Thresholds:
    """Config thresholds overridden by the flags given, each parsed and range-checked like its config key."""
    config, source = load_thresholds(Path.cwd())
    parsed = {name: parse_setting(name, value, "--" + name.replace("_", "-"))
              for name, value in flags.items() if value is not None}
    merged = config.merged(**parsed)
    merged.check_complete(None if "max_regression" in parsed else source)
    return merged


_STATUS = {True: ("PASS ", "green"), False: ("FAIL ", "bold red"), None: ("UNDECIDED ", "yellow")}


def _render(result: GateResult) -> None:
    if not result.decidable:
        out.print(Text(f"could not decide: {result.reason}", style="yellow"))
        return
    for c in result.checks:
        out.print(Text.assemble(_STATUS[c.passed], (c.name, "bold"), f": {c.detail}"))
    if result.failed:
        for cause in result.causes:
            out.print(Text(f"  cause {cause['request']}: {cause['kind']} — {cause['why']}", style="yellow"))
            out.print(Text(f"    fix: {cause['fix']}", style="cyan"))


def baseline_cmd(
    trace: Annotated[Path, typer.Argument(help="Trace file (JSONL)")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the baseline JSON")],
    outcomes: Annotated[Path | None, typer.Option("--outcomes", help="Task outcomes JSONL")] = None,
    force: Force = False,
) -> None:
    """Write a baseline (totals and per-task figures) for `gate --baseline` and `compare`.

    Example: kvprobe baseline trace.jsonl -o baseline.json
    """
    with user_errors():
        output = output_path(output, [trace, *([outcomes] if outcomes else [])], force=force)
        report = build_report([trace], fixes=False, outcomes=load_outcomes(outcomes) if outcomes else None)
        write_atomic(output, orjson.dumps(summary_of(report), option=orjson.OPT_INDENT_2) + b"\n")
    out.print(f"wrote baseline of {report.totals['requests']} requests, {len(report.tasks)} tasks to {output}")
