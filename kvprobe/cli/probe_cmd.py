"""`kvprobe run-probe DOCUMENT`: four requests that show how a provider's prompt cache really behaves."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Self

import typer
from rich.text import Text

from kvprobe.analysis.reported import side_by_side
from kvprobe.cli.common import Force, err, money, out, output_path, print_json, user_errors
from kvprobe.cli.tables import Col, print_table
from kvprobe.probe.cases import build_cases, new_run_id, read_document
from kvprobe.probe.runner import PROVIDERS, ProbeResult, check_length, check_provider, estimate, run_probe
from kvprobe.probe.verdict import usage_of


def run_probe_cmd(
    document: Annotated[Path, typer.Argument(help="A UTF-8 text long enough for the model's minimum")],
    provider: Annotated[str, typer.Option("--provider", help="local | anthropic | openai | deepseek")] = "local",
    model: Annotated[str | None, typer.Option("--model", help="Model id (default per provider)")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="API base URL (proxies, compatible APIs)")] = None,
    out_file: Annotated[Path | None, typer.Option("--output", "-o", help="Write the requests as a kvprobe trace "
                                                  "(JSONL, one record per request)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable result")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the four requests and their estimated cost")] = False,
    diagnostics: Annotated[bool, typer.Option(
        "--diagnostics", help="Ask the API to compare each request with the previous one (Anthropic cache "
        "diagnostics) and show its verdict beside kvprobe's")] = False,
    force: Force = False,
    out_alias: Annotated[Path | None, typer.Option("--out", hidden=True)] = None,
) -> None:
    """Send four requests (prepare, confirm, new question, changed beginning) and show what the cache did.

    With no key, `--provider local` runs them on the bundled engine behind the same SDK, in Anthropic emulation.
    Example: kvprobe run-probe examples/public_notes.txt
    """
    with user_errors():
        check_provider(provider)  # before anything is printed, written or started
        if out_file is not None or out_alias is not None:
            out_file = output_path(out_file, [document], force=force, alias=out_alias)
        if dry_run:
            _dry_run(document, provider, model, json_out)
            return
        if provider == "local" and base_url is None:
            from kvprobe.cli.engine_extra import require_engine

            require_engine("run-probe --provider local")
        if not json_out:
            err.print(f"running 4 requests on {provider}" + (" (starting the local engine)" if provider == "local"
                                                             else ""))
        with _Status(enabled=not json_out and err.is_terminal) as status:
            result = run_probe(document, provider, model, base_url, out_file, diagnostics=diagnostics,
                               on_outcome=None if json_out else status.outcome, on_status=status.update)
    if json_out:
        print_json(_to_json(result))
    else:
        _render(result)
    raise typer.Exit(result.exit_code)


class _Status:
    """A spinner with elapsed time on stderr while the engine loads and while a request waits for its reply
    (on a terminal); a line per finished step either way (unless --json)."""

    def __init__(self, enabled: bool) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                            console=err, transient=True) if enabled else None
        self.task = None
        self.started: float | None = None
        self.what: str | None = None

    def __enter__(self) -> Self:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, text: str) -> None:
        import time

        if self.what and self.what.startswith("loading") and self.started is not None:
            err.print(f"  engine loaded in {time.perf_counter() - self.started:.1f}s")
        self.started, self.what = time.perf_counter(), text
        if text.startswith("loading"):
            err.print(f"  {text} ...")
        if self.bar is None:
            return
        if self.task is not None:
            self.bar.remove_task(self.task)
        self.task = self.bar.add_task(text, total=None)

    def outcome(self, o) -> None:
        status = "error" if o.error else "done"
        err.print(f"  {o.case}: {status} in {o.request_s:.1f}s")


def _dry_run(document: Path, provider: str, model: str | None, json_out: bool) -> None:
    check_provider(provider)
    model = model or PROVIDERS[provider]["model"]
    cases = build_cases(read_document(document), provider, model, new_run_id())
    est = estimate(cases, provider, model)
    check_length(est, model, document)
    rows = []
    for case, pred, cost in zip(cases, est.predicted, est.costs):
        body = case.body
        rows.append({"case": case.name, "model": body["model"], "max_tokens": body["max_tokens"],
                     "prefix_start": f"Document version: {case.version}", "question": case.question,
                     "predicted": pred,
                     "estimated_cost_usd": None if cost is None else round(cost, 6)})
    if json_out:
        print_json({"provider": provider, "model": model, "prefix_tokens": est.prefix_tokens,
                    "minimum_tokens": est.minimum, "requests": rows})
        return
    cols = (Col("case", wrap=True), Col("prefix starts", wrap=True, drop=2), Col("question", wrap=True, drop=1),
            Col("read", "right"), Col("write", "right"), Col("fresh", "right"), Col("est. cost", "right"))
    table = [[r["case"], r["prefix_start"], r["question"], f"{r['predicted']['cache_read_tokens']:,}",
              f"{r['predicted']['cache_write_tokens']:,}", f"{r['predicted']['fresh_input_tokens']:,}",
              money(r["estimated_cost_usd"])] for r in rows]
    print_table(f"Dry run: {provider} · {model} · document prefix ≈{est.prefix_tokens:,} tokens "
                f"(minimum {est.minimum:,})", cols, table)


def _to_json(result: ProbeResult) -> dict:
    v = result.verdict
    return {"provider": result.provider, "model": result.model, "run_id": result.run_id,
            "requests": [{"case": o.case, "requested_model": o.requested_model, "returned_model": o.returned_model,
                          "usage": o.usage, "first_text_s": o.first_text_s, "request_s": o.request_s,
                          "stop_reason": o.stop_reason, "complete": o.complete, "error": o.error,
                          "cost_usd": c, **_diagnostics_json(result, i)}
                         for i, (o, c) in enumerate(zip(result.outcomes, result.costs))],
            "confirmed": v.confirmed if v else False, "supports": v.supports if v else [],
            "not_shown": v.not_shown if v else [], "advice": v.advice if v else None, "stopped": result.stopped}


def _render(result: ProbeResult) -> None:
    emulated = " (local engine, Anthropic emulation; prices as if on the API)" if result.provider == "local" else ""
    out.print(Text(f"run-probe {result.run_id}: {result.provider} · {result.model}{emulated}", style="bold"))
    cols = (Col("request", wrap=True),) + tuple(Col(name, "right", drop=drop) for name, drop in (
        ("read", None), ("write", None), ("fresh", 3), ("out", 2), ("1st text", 1), ("total", 4), ("cost", None))) \
        + (Col("stop", wrap=True, drop=5),)
    rows = []
    for i, (o, cost) in enumerate(zip(result.outcomes, result.costs), start=1):
        u = usage_of(result.provider, o)
        cells = [f"{u.cache_read_tokens:,}", f"{u.cache_write_tokens:,}", f"{u.fresh_input_tokens:,}",
                 f"{u.output_tokens:,}"] if u else ["–"] * 4
        rows.append([f"{i} {o.case.replace('_', ' ').replace('beginning', 'start')}", *cells,
                     "–" if o.first_text_s is None else f"{o.first_text_s:.1f}s",
                     "–" if o.request_s is None else f"{o.request_s:.1f}s",
                     "–" if cost is None else money(cost),
                     (o.stop_reason or ("error" if o.error else "–")).replace("_", " ")])
    print_table(None, cols, rows)
    _render_diagnostics(result)
    v = result.verdict
    if result.stopped:
        out.print(Text(f"stopped: {result.stopped}", style="bold red"))
    if v and v.advice:
        out.print(Text(v.advice, style="yellow"))
    if v and v.supports:
        out.print(Text("This run supports:", style="bold"))
        for line in v.supports:
            out.print(Text(f"  • {line}", style="green"))
        out.print(Text(f"It does not show: {'; '.join(v.not_shown)}.", style="dim"))


def _diagnostics_json(result: ProbeResult, index: int) -> dict:
    """With --diagnostics: what the API said about this request against the previous one, and kvprobe's view."""
    outcome = result.outcomes[index]
    if "diagnostics" not in outcome.extra:
        return {}
    previous = result.cases[index - 1].body if index else None
    response = {"diagnostics": outcome.extra["diagnostics"]}
    return {"diagnostics": outcome.extra["diagnostics"],
            "diagnostics_compared": side_by_side(previous, result.cases[index].body, response)}


def _render_diagnostics(result: ProbeResult) -> None:
    """With --diagnostics: each request against the previous one, as the API and as kvprobe see it."""
    if not any("diagnostics" in o.extra for o in result.outcomes):
        if result.cases and "diagnostics" in result.cases[0].body:
            out.print(Text("--diagnostics: the API returned no diagnostics object (not supported there?)",
                           style="yellow"))
        return
    rows: list[list[str | Text]] = []
    for i, o in enumerate(result.outcomes):
        compared = _diagnostics_json(result, i).get("diagnostics_compared")
        if compared is None:
            rows.append([f"{i + 1} {o.case}", Text("–", style="dim"), "", ""])
            continue
        ours = compared["kvprobe_reason"] or ("no divergence" if i else "nothing to compare")
        api = compared["api"] if i or compared["api_reason"] else "nothing to compare"
        rows.append([f"{i + 1} {o.case}", api, ours,
                     Text("agree", style="green") if compared["agree"] else Text("differ", style="bold yellow")])
    cols = (Col("request", wrap=True), Col("the API reports", wrap=True), Col("kvprobe expects", wrap=True),
            Col(""))
    print_table("Cache diagnostics: each request against the previous one", cols, rows)
