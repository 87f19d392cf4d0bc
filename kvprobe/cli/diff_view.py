"""What `kvprobe diff` prints and reads beside its two requests, without Typer: the full command
(cli/diff_cmd.py) and the one answered before Typer loads (cli/fastdiff.py) share it, byte for byte."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text

from kvprobe.cli.console import out
from kvprobe.cli.jsonout import print_json
from kvprobe.diff import DiffResult, diff_requests
from kvprobe.inputs import load_request
from kvprobe.wording import show


@dataclass(slots=True)
class Compared:
    result: DiffResult
    a: str  # the requests' labels (`body.json`, `trace.jsonl#ID`)
    b: str


def compare(a: str, b: str) -> Compared:
    """The two requests named on the command line, loaded and diffed (errors are the library's: nothing is
    printed before they are raised)."""
    la, lb = load_request(a), load_request(b)
    return Compared(diff_requests(la.render(), lb.render(), _trace_sizes([a, b])), la.label, lb.label)


def answer(done: Compared, json_out: bool, no_content: bool) -> None:
    """Print the diff: the contract JSON, or the text."""
    if json_out:
        data = done.result.to_json()
        if no_content and data["first_change"]:
            data["first_change"]["a_snippet"] = data["first_change"]["b_snippet"] = None
        print_json(data)
    else:
        render(done.result, done.a, done.b, show_content=not no_content)


def _trace_sizes(args: list[str]):
    """The sizes `report` gives named trace records; the analysis is imported only when a record is named."""
    if not any("#" in arg for arg in args):
        return None
    from kvprobe.analysis.trace_sizes import trace_sizes

    return trace_sizes(args)


def _fmt_value(value: object) -> str:
    return show(value)


def _snippet_line(sign: str, snippet: str, mark: int, style: str) -> Text:
    line = Text(f"  {sign} ", style=style)
    line.append(snippet[:mark], style="dim")
    line.append(snippet[mark:], style=f"bold {style}")
    return line


def title(a: str, b: str) -> str:
    """What is compared, by name: two files, two records (`file#id`) of one trace, or records of two."""
    (fa, _, ia), (fb, _, ib) = a.partition("#"), b.partition("#")
    na, nb = Path(fa).name, Path(fb).name
    if ia and ib and fa == fb:
        return f"{ia} → {ib} in {na}"
    return f"{na}{'#' + ia if ia else ''} → {nb}{'#' + ib if ib else ''}"


def render(result: DiffResult, a: str, b: str, show_content: bool = True) -> None:
    """`a` and `b`: the requests' labels (`body.json`, `trace.jsonl#ID`)."""
    model = result.model or "model not named"
    flag = f" (not in the catalog: {result.rules.fallback})" if result.rules.fallback else ""
    out.print(Text.assemble(("kvprobe diff ", "bold"), f"{title(a, b)}  ",
                            (f"{result.provider} · {model}{flag}", "cyan")))
    est = {"anchored": "sized on the trace's logged usage"}.get(result.tokens_source, result.tokens_source)
    out.print(f"A: {result.a_tokens:,} tokens   B: {result.b_tokens:,} tokens ({est})")
    if not result.shared_cache:
        out.print(Text(f"A goes to {result.a_provider} and B to {result.provider}: providers do not share a "
                       "cache, so B can reuse nothing of A. Content compared only.", style="yellow"))
    _render_change(result, show_content)
    _render_params(result)
    _render_breakpoints(result)
    p = result.predicted
    head = "Predicted for B if A was cached: " if result.shared_cache else "Predicted for B (a cold cache): "
    out.print(Text.assemble((head, "bold"),
                            (f"read {p.cache_read_tokens:,}", "green"), " · ",
                            (f"write {p.cache_write_tokens:,}", "yellow"), " · ",
                            (f"fresh {p.fresh_input_tokens:,}", "red"), " tokens"))
    for warning in result.warnings:
        out.print(Text(f"warning: {warning}", style="yellow"))


def _render_change(result: DiffResult, show_content: bool) -> None:
    fc = result.first_change
    if fc is None and not result.shared_cache:
        out.print("Same content." if not result.extends else "B's content extends A's (append-only).")
        return
    if result.identical:
        out.print(Text("Identical: B reuses all of A.", style="green"))
        return
    if fc is None:
        msg = "B extends A (append-only): A's whole prefix is reusable." if result.extends else \
            "Content identical; only parameters changed."
        out.print(Text(msg, style="green"))
        return
    approx = "" if fc.token_position_exact else "≈"
    out.print(Text.assemble(("First change: ", "bold"), (fc.path, "bold magenta"),
                            f"  char {fc.char_offset:,}  token {approx}{fc.token_position:,}"))
    if show_content:
        for sign, snippet, style in (("-", fc.a_snippet, "red"), ("+", fc.b_snippet, "green")):
            out.print(_snippet_line(sign, snippet or "(nothing)", fc.snippet_mark if snippet else 0, style),
                      no_wrap=True, overflow="ellipsis")
    out.print(Text(f"  {fc.detail}", style="italic"))


def _render_params(result: DiffResult) -> None:
    for p in result.params_changed:
        out.print(Text.assemble(("Parameter changed: ", "bold"), (p["name"], "magenta"),
                                f" {_fmt_value(p['a'])} → {_fmt_value(p['b'])} ",
                                (f"(invalidates {p['invalidates']})", "yellow")))


def _render_breakpoints(result: DiffResult) -> None:
    if not result.breakpoints:
        out.print(Text("B has no cache breakpoints: nothing in it can be written or read from cache.",
                       style="yellow") if result.provider == "anthropic" else "")
        return
    out.print(Text("Breakpoints in B:", style="bold"))
    for bp in result.breakpoints:
        mark = Text("reusable", style="green") if bp.reusable else Text("not reusable", style="red")
        out.print(Text.assemble(f"  {bp.path} ({bp.ttl}) through {bp.prefix_tokens:,} tokens: ", mark))
