"""`kvprobe gate TRACE...` for CI, and `kvprobe baseline TRACE... -o baseline.json` to compare against later."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from kvprobe.cli.common import Force, err, out, output_path, print_json, user_errors
from kvprobe.compare import load_baseline
from kvprobe.economics.tasks import load_outcomes
from kvprobe.errors import InputError, KvprobeError
from kvprobe.gate.causes import baseline_bytes, without_content
from kvprobe.gate.check import GateResult, missing_baseline_check, run_gate
from kvprobe.gate.config import GateConfig, find_config, load_config_file, parse_setting
from kvprobe.gate.formats import annotations, cause_groups, to_junit, to_markdown
from kvprobe.gate.inputs import expand_traces, require_baseline_requests, summary_target
from kvprobe.gate.wording import shown_path, usd
from kvprobe.output import check_output
from kvprobe.pricing import PriceBook
from kvprobe.report import Report, build_report
from kvprobe.trace.writer import write_atomic
from kvprobe.wording import plural

Traces = Annotated[list[str], typer.Argument(help="Traces or agent logs (JSONL files, folders, or globs such as "
                                             "'traces/*.jsonl')", metavar="TRACES")]


def gate(
    traces: Traces,
    config: Annotated[Path | None, typer.Option("--config", metavar="PATH", help="Gate settings file (default: "
                                                "the nearest kvprobe.toml [gate] or pyproject.toml "
                                                "[tool.kvprobe.gate] at or above this folder)")] = None,
    max_cost_usd: Annotated[str | None, typer.Option("--max-cost-usd", metavar="USD",
                                                     help="Total cost limit")] = None,
    max_cost_per_task: Annotated[str | None, typer.Option("--max-cost-per-task", metavar="USD",
                                                          help="Limit for any one task")] = None,
    min_hit_ratio: Annotated[str | None, typer.Option("--min-hit-ratio", metavar="RATIO",
                                                      help="Token hit ratio floor: 0.8 or 80%")] = None,
    max_input_equivalent: Annotated[str | None, typer.Option("--max-input-equivalent", metavar="TOKENS",
                                                             help="Input-token-equivalent limit")] = None,
    baseline: Annotated[str | None, typer.Option("--baseline", metavar="PATH",
                                                 help="baseline.json from `kvprobe baseline`")] = None,
    max_regression: Annotated[str | None, typer.Option("--max-regression", metavar="RATIO",
                                                       help="Allowed regression of cost and input-equivalents "
                                                            "against --baseline: 0.1 or 10% (default 10%)")] = None,
    max_hit_ratio_drop: Annotated[str | None, typer.Option("--max-hit-ratio-drop", metavar="POINTS",
                                                           help="Allowed hit-ratio drop against --baseline in "
                                                                "percentage points: 5% (default: --max-regression)")] = None,
    max_failed_requests: Annotated[str | None, typer.Option("--max-failed-requests", metavar="N",
                                                            help="Requests that may fail without usage (default 0)")] = None,
    price_file: Annotated[str | None, typer.Option("--price-file", metavar="PATH",
                                                   help="TOML/JSON prices for models kvprobe cannot price "
                                                        "(`kvprobe schema price-file`)")] = None,
    outcomes: Annotated[Path | None, typer.Option("--outcomes", metavar="PATH", help="Task outcomes JSONL")] = None,
    predicted: Annotated[bool, typer.Option("--predicted", help="Gate on the simulation when no usage was logged")] = False,
    undecided: Annotated[str | None, typer.Option("--undecided", metavar="fail|warn",
                                                  help="fail: exit 3 when a check cannot be decided (default); warn: "
                                                       "exit 0 with a warning if every decided check held")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the Markdown summary instead of the text "
                                                                "log")] = False,
    markdown_file: Annotated[Path | None, typer.Option("--markdown-file", metavar="PATH",
                                                       help="Also write the Markdown summary to PATH (replaced); "
                                                            "it is appended to $GITHUB_STEP_SUMMARY whenever that "
                                                            "is set")] = None,
    junit_xml: Annotated[Path | None, typer.Option("--junit-xml", metavar="PATH",
                                                   help="Write JUnit XML, one test case per check (replaced)")] = None,
    content: Annotated[bool | None, typer.Option("--content/--no-content",
                                                 help="Prompt text (a fix's example of the changing line): in the "
                                                      "log and --json by default, in the summary and JUnit only "
                                                      "with --content; --no-content leaves it out everywhere")] = None,
    write_baseline: Annotated[Path | None, typer.Option("--write-baseline", metavar="PATH",
                                                        help="Write this run's baseline to PATH (replaced) when "
                                                             "no check failed: the file to commit as the "
                                                             "baseline")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable result (`kvprobe schema gate`)")] = False,
) -> None:
    """Fail CI (exit 1) when cost or cache reuse crosses a threshold; exit 3 when it cannot decide.

    Thresholds come from flags, else the config (`kvprobe schema gate-config` lists its keys). A request
    that failed without usage fails the gate; a cost threshold over requests kvprobe cannot price, or a
    baseline task the traces lack, is undecided (exit 3) unless --undecided warn. An empty trace or
    baseline is refused (exit 2). A baseline file that does not exist yet (a first run) leaves the
    comparison undecided and says what to commit (--write-baseline writes it). Under GitHub Actions the
    summary goes to $GITHUB_STEP_SUMMARY and failed checks become annotations, in every outcome, bad input
    included; the log stays plain text.

    Example: kvprobe gate trace.jsonl --min-hit-ratio 80% --baseline baseline.json --max-regression 10%
    """
    flags = {"max_cost_usd": max_cost_usd, "max_cost_per_task": max_cost_per_task, "min_hit_ratio": min_hit_ratio,
             "max_input_equivalent": max_input_equivalent, "baseline": baseline, "max_regression": max_regression,
             "max_hit_ratio_drop": max_hit_ratio_drop, "max_failed_requests": max_failed_requests,
             "price_file": price_file, "undecided": undecided}
    with user_errors():  # where the CI formats go: checked first, since every outcome is written there
        summary = summary_target()
        for path, flag in ((junit_xml, "--junit-xml"), (markdown_file, "--markdown-file"),
                           (write_baseline, "--write-baseline")):
            if path is not None:
                check_output(path, _named_files(traces), force=True, field=flag)
    cfg = GateConfig()
    try:
        result, cfg = _decide(traces, config, flags, outcomes, predicted, write_baseline)
    except KvprobeError as exc:  # bad input: still a true summary, JUnit and annotation for CI (exit 2)
        err.print(Text.assemble(("error:", "bold red"), " ", str(exc)), soft_wrap=True)
        result = _error_result(exc)
    if not result.errored:
        _emit(result, cfg, json_out, markdown, content)
    else:
        _annotate(result, cfg)
    with user_errors():
        _write_files(result, summary, markdown_file, junit_xml, content is True)
    raise typer.Exit(result.exit_code)


def _named_files(traces: list[str]) -> list[Path]:
    """The traces named as they are (globs left out): an output may not be one of them."""
    return [Path(t) for t in traces if not (set("*?[") & set(t))]


def _error_result(exc: KvprobeError) -> GateResult:
    if isinstance(exc, InputError):
        shown = InputError(exc.message, file=shown_path(exc.file) if exc.file else None, line=exc.line,
                           field=exc.field)
        return GateResult.of_error(str(shown), exc.file, exc.line)
    return GateResult.of_error(str(exc))


def _decide(traces: list[str], config: Path | None, flags: dict[str, str | None], outcomes: Path | None,
            predicted: bool, write_baseline: Path | None) -> tuple[GateResult, GateConfig]:
    """Read the settings, baseline and traces, run every check, and write this run's baseline when asked."""
    paths = expand_traces(traces)
    cfg = load_config_file(config) if config else find_config(Path.cwd())
    t = cfg.thresholds.merged(None, **{name: parse_setting(name, value, "--" + name.replace("_", "-"))
                                       for name, value in flags.items() if value is not None})
    t.check_complete()
    missing = t.baseline is not None and not Path(t.baseline).exists()  # a first run: nothing committed yet
    base = require_baseline_requests(load_baseline(Path(t.baseline)), t.baseline) if t.baseline and not missing \
        else None
    prices = PriceBook.from_file(t.price_file)
    report = build_report(paths, outcomes=load_outcomes(outcomes) if outcomes else None, top=0,
                          predicted_only=predicted, prices=prices)
    _require_requests(report, paths)
    result = run_gate(report, t, base, allow_predicted=predicted)
    writes = write_baseline is not None and bool(report.results) and not result.failed and not result.reason
    if missing and not result.reason:
        result.checks.append(missing_baseline_check(t.baseline, _baseline_place(write_baseline) if writes else None))
    if writes:
        write_atomic(write_baseline, baseline_bytes(report))
        result.baseline_written = str(write_baseline)
    result.inputs = {"traces": [str(p) for p in paths], "requests": len(report.results) + len(report.failed),
                     "failed_requests": len(report.failed), "config": cfg.path, "baseline": t.baseline}
    result.notes = cfg.warnings + [n for n in report.notes if n != report.failed_note]  # a check says it
    return result, cfg


def _baseline_place(path: Path | None) -> str | None:
    """Where this run's baseline is, in the words the user can follow: in the CI artifact when the action
    names it (KVPROBE_ARTIFACT), else the file."""
    artifact = os.environ.get("KVPROBE_ARTIFACT")
    if path is None:
        return None
    return f"{path.name} in this run's `{artifact}` artifact" if artifact else str(path)


def _require_requests(report: Report, paths: list[Path]) -> None:
    if report.results or report.failed:
        return
    skipped = sum(stats.skipped for _, stats in report.stats)
    why = f" ({skipped} malformed lines skipped)" if skipped else ""
    raise InputError(f"no requests found{why}: nothing to gate (an empty capture? check that the agent ran under "
                     "`kvprobe capture`)", file=", ".join(map(str, paths)))


def _emit(result: GateResult, cfg: GateConfig, json_out: bool, markdown: bool, content: bool | None) -> None:
    """The verdict on stdout (a full or closed stdout is exit 2, not a traceback), notes and annotations on
    stderr."""
    try:
        for note in result.notes:
            err.print(Text(f"warning: {note}", style="yellow"))
        if json_out:
            print_json(result.to_json(content is not False))
        elif markdown:
            out.print(to_markdown(result, content is True), markup=False, highlight=False, soft_wrap=True, end="")
        else:
            _render(result, content is not False)
        sys.stdout.flush()
    except OSError as exc:
        _stdout_failed(exc)
    _annotate(result, cfg)


def _annotate(result: GateResult, cfg: GateConfig) -> None:
    if os.environ.get("GITHUB_ACTIONS") == "true":  # workflow commands are read from stderr too
        for line in annotations(result, cfg.lines):
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _stdout_failed(exc: OSError) -> None:
    try:  # what is still buffered goes nowhere, so the exit does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    err.print(f"error: cannot write the output: {exc.strerror or exc}", markup=False, highlight=False)
    raise typer.Exit(2)


def _write_files(result: GateResult, summary: Path | None, markdown_file: Path | None, junit_xml: Path | None,
                 content: bool) -> None:
    text = to_markdown(result, content)
    if markdown_file is not None:
        write_atomic(markdown_file, text.encode())
    if junit_xml is not None:
        write_atomic(junit_xml, to_junit(result, content))
    if summary is not None:
        try:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(text + "\n")
        except OSError as exc:
            raise InputError(f"cannot write the job summary: {exc.strerror or exc}", file=str(summary),
                             field="$GITHUB_STEP_SUMMARY") from None


_STATUS = {True: ("PASS ", "green"), False: ("FAIL ", "bold red"), None: ("UNDECIDED ", "yellow")}


def _render(result: GateResult, content: bool) -> None:
    inputs = result.inputs
    said = [f"{plural(inputs['requests'], 'request')} in {plural(len(inputs['traces']), 'trace')}"]
    if inputs.get("config"):
        said.append(f"settings from {shown_path(inputs['config'])}")
    if inputs.get("baseline"):
        said.append(f"baseline {shown_path(inputs['baseline'])}")
    out.print(Text("kvprobe gate: " + "; ".join(said), style="dim"))
    for c in result.checks:
        source = f"  [{_source_words(c.source)}]" if c.source else ""
        out.print(Text.assemble(_STATUS[c.passed], (c.name, "bold"), f": {c.detail}", (source, "dim")))
    shown: set[str] = set()
    for title, group in cause_groups(result):
        out.print(Text(f"{title}:", style="bold"))
        for cause in group:
            money = "n/a" if cause.cost_usd is None else usd(cause.cost_usd)
            added = cause.added_usd
            if cause.new is False and added is not None:
                money += f", {'+' if added >= 0 else '-'}{usd(abs(added))} vs the baseline"
            out.print(Text(f"  {cause.label} in {cause.task}: {plural(len(cause.requests), 'request')} from "
                           f"{cause.requests[0]}, {money} — {cause.why}",
                           style="yellow"))
            fix = cause.fix if content else without_content(cause.fix)
            saving = f" (saves {usd(cause.fix_saving_usd)})" if cause.fix_saving_usd else ""
            out.print(Text("    fix: " + ("the same as above" if fix in shown else fix + saving), style="cyan"))
            shown.add(fix)
    if result.reason:
        out.print(Text(f"could not decide: {result.reason}", style="yellow"))
    out.print(Text(f"kvprobe gate {result.verdict} (exit {result.exit_code})",
                   style="bold red" if result.failed else "green" if result.exit_code == 0 else "yellow"))


def _source_words(source: str) -> str:
    return " ".join(shown_path(part) if part.startswith("/") else part for part in source.split(" "))


def baseline_cmd(
    traces: Traces,
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the baseline JSON")],
    outcomes: Annotated[Path | None, typer.Option("--outcomes", help="Task outcomes JSONL")] = None,
    price_file: Annotated[Path | None, typer.Option("--price-file", metavar="PATH",
                                                    help="TOML/JSON prices (`kvprobe schema price-file`)")] = None,
    force: Force = False,
) -> None:
    """Write a baseline (totals, per-task figures and causes) for `gate --baseline` and `compare`.

    An empty trace, or one whose every request failed, is refused (exit 2): a baseline of nothing would let
    every later run pass. Failed requests are left out, with a warning.

    Example: kvprobe baseline trace.jsonl -o baseline.json
    """
    with user_errors():
        paths = expand_traces(traces)
        output = output_path(output, [*paths, *([outcomes] if outcomes else [])], force=force)
        report = build_report(paths, fixes=False, outcomes=load_outcomes(outcomes) if outcomes else None, top=0,
                              prices=PriceBook.from_file(price_file))
        _require_requests(report, paths)
        if not report.results:
            raise InputError(f"all {len(report.failed)} requests failed ({report.failed[0][1][:120]}): a baseline of "
                             "a run that reached no model would let every later run pass", file=str(paths[0]))
        write_atomic(output, baseline_bytes(report))
    if report.failed:
        err.print(f"warning: {len(report.failed)} failed requests left out of the baseline", markup=False)
    out.print(f"wrote baseline of {report.totals['requests']} requests, {len(report.tasks)} tasks to {output}",
              markup=False, highlight=False)
