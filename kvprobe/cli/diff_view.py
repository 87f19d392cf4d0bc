"""What `kvprobe diff` prints and reads beside its two requests, without Typer: the full command
(cli/diff_cmd.py) and the one answered before Typer loads (cli/fastdiff.py) share it, byte for byte.

The text is made as lines of styled pieces (cli/plainout.py's `Line`), written without rich where that gives
the bytes rich would print (cli/plainout.py), else printed through rich."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvprobe.cli import plainout
from kvprobe.cli.plainout import Line
from kvprobe.cli.jsonout import print_json
from kvprobe.diff import DiffResult, diff_requests
from kvprobe.inputs import load_request
from kvprobe.wording import show


@dataclass(slots=True)
class Compared:
    """The diff of the two requests named on the command line, with their labels."""

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


def _line(*pieces: str | tuple[str, str], style: str = "", cut: bool = False) -> Line:
    return Line([(p, None) if isinstance(p, str) else p for p in pieces], style, cut)


def _trace_sizes(args: list[str]):
    """The sizes `report` gives named trace records; the analysis is imported only when a record is named."""
    if not any("#" in arg for arg in args):
        return None
    from kvprobe.analysis.trace_sizes import trace_sizes

    return trace_sizes(args)


def _fmt_value(value: object) -> str:
    return show(value)


def _snippet_line(sign: str, snippet: str, mark: int, style: str) -> Line:
    return _line(f"  {sign} ", (snippet[:mark], "dim"), (snippet[mark:], f"bold {style}"), style=style, cut=True)


def title(a: str, b: str) -> str:
    """What is compared, by name: two files, two records (`file#id`) of one trace, or records of two."""
    (fa, _, ia), (fb, _, ib) = a.partition("#"), b.partition("#")
    na, nb = Path(fa).name, Path(fb).name
    if ia and ib and fa == fb:
        return f"{ia} → {ib} in {na}"
    return f"{na}{'#' + ia if ia else ''} → {nb}{'#' + ib if ib else ''}"


def render(result: DiffResult, a: str, b: str, show_content: bool = True) -> None:
    """`a` and `b`: the requests' labels (`body.json`, `trace.jsonl#ID`)."""
    text = lines(result, a, b, show_content)
    if not plainout.write(text):
        _print_rich(text)


def _print_rich(text: list[Line]) -> None:
    from rich.text import Text

    from kvprobe.cli.console import out

    for line in text:
        styled = Text(style=line.style)
        for piece, style in line.pieces:
            styled.append(piece, style)
        if line.cut:
            out.print(styled, no_wrap=True, overflow="ellipsis")
        else:
            out.print(styled)


def lines(result: DiffResult, a: str, b: str, show_content: bool = True) -> list[Line]:
    """The text's lines; `a` and `b`: the requests' labels (`body.json`, `trace.jsonl#ID`)."""
    model = result.model or "model not named"
    flag = f" (not in the catalog: {result.rules.fallback})" if result.rules.fallback else ""
    text = [_line(("kvprobe diff ", "bold"), f"{title(a, b)}  ", (f"{result.provider} · {model}{flag}", "cyan"))]
    est = {"anchored": "sized on the trace's logged usage"}.get(result.tokens_source, result.tokens_source)
    text.append(_line(f"A: {result.a_tokens:,} tokens   B: {result.b_tokens:,} tokens ({est})"))
    if not result.shared_cache:
        text.append(_line(f"A goes to {result.a_provider} and B to {result.provider}: providers do not share a "
                          "cache, so B can reuse nothing of A. Content compared only.", style="yellow"))
    text += _change_lines(result, show_content)
    text += _param_lines(result)
    text += _breakpoint_lines(result)
    p = result.predicted
    head = "Predicted for B if A was cached: " if result.shared_cache else "Predicted for B (a cold cache): "
    text.append(_line((head, "bold"), (f"read {p.cache_read_tokens:,}", "green"), " · ",
                      (f"write {p.cache_write_tokens:,}", "yellow"), " · ",
                      (f"fresh {p.fresh_input_tokens:,}", "red"), " tokens"))
    text += [_line(f"warning: {warning}", style="yellow") for warning in result.warnings]
    return text


def _change_lines(result: DiffResult, show_content: bool) -> list[Line]:
    fc = result.first_change
    if fc is None and not result.shared_cache:
        return [_line("Same content." if not result.extends else "B's content extends A's (append-only).")]
    if result.identical:
        return [_line("Identical: B reuses all of A.", style="green")]
    if fc is None:
        msg = "B extends A (append-only): A's whole prefix is reusable." if result.extends else \
            "Content identical; only parameters changed."
        return [_line(msg, style="green")]
    approx = "" if fc.token_position_exact else "≈"
    text = [_line(("First change: ", "bold"), (fc.path, "bold magenta"),
                  f"  char {fc.char_offset:,}  token {approx}{fc.token_position:,}")]
    if show_content:
        for sign, snippet, style in (("-", fc.a_snippet, "red"), ("+", fc.b_snippet, "green")):
            text.append(_snippet_line(sign, snippet or "(nothing)", fc.snippet_mark if snippet else 0, style))
    text.append(_line(f"  {fc.detail}", style="italic"))
    return text


def _param_lines(result: DiffResult) -> list[Line]:
    return [_line(("Parameter changed: ", "bold"), (p["name"], "magenta"),
                  f" {_fmt_value(p['a'])} → {_fmt_value(p['b'])} ", (f"(invalidates {p['invalidates']})", "yellow"))
            for p in result.params_changed]


def _breakpoint_lines(result: DiffResult) -> list[Line]:
    if not result.breakpoints:
        return [_line("B has no cache breakpoints: nothing in it can be written or read from cache.",
                      style="yellow") if result.provider == "anthropic" else _line()]
    text = [_line("Breakpoints in B:", style="bold")]
    for bp in result.breakpoints:
        mark = ("reusable", "green") if bp.reusable else ("not reusable", "red")
        text.append(_line(f"  {bp.path} ({bp.ttl}) through {bp.prefix_tokens:,} tokens: ", mark))
    return text
