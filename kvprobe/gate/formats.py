"""A gate result in the formats CI reads: a Markdown job summary, JUnit XML, GitHub Actions annotations.

All three are built from trace text (request ids, diagnoses, fixes), so each escapes for its own reader:
table cells cannot break out of their row, XML carries no character XML 1.0 forbids, and an annotation
cannot end early or start another workflow command. Prompt text (a fix's quoted example) stays out of the
summary unless asked for: job summaries and PR comments are often public.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from kvprobe.gate.causes import Cause, without_content
from kvprobe.gate.check import Check, GateResult
from kvprobe.gate.wording import annotation, shown_path, usd
from kvprobe.wording import plural

_MARK = {True: "✅", False: "❌", None: "❔"}
_HEAD = {"passed": "✅ passed", "passed with warnings": "⚠️ passed with warnings", "failed": "❌ failed",
         "could not decide": "❔ could not decide", "error": "❗ error: the gate could not run"}
SHOWN_CAUSES = 5


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell: no row break, no column break, no HTML."""
    text = " ".join(str(text).split())
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;") \
        .replace("`", "\\`")


def _source(check: Check) -> str:
    src = check.source or ""
    return cell(re.sub(r"/\S+", lambda m: shown_path(m.group(0)), src)) if src else "–"


def _cause_fix(cause: Cause, shown: set[str], content: bool) -> str:
    fix = cause.fix if content else without_content(cause.fix)
    if fix in shown:
        return "the same fix as above"
    shown.add(fix)
    saving = f" (saves {usd(cause.fix_saving_usd)})" if cause.fix_saving_usd else ""
    return fix + saving


def _money(cause: Cause) -> str:
    cost = "–" if cause.cost_usd is None else usd(cause.cost_usd)
    added = cause.added_usd
    if cause.new is False and added is not None:
        return f"{cost} ({'+' if added >= 0 else '−'}{usd(abs(added))} vs baseline)"
    return f"+{cost}" if cause.new else cost


def cause_groups(result: GateResult) -> list[tuple[str, list[Cause]]]:
    """The causes to show: with a baseline, new ones, then (when the gate failed) the old ones."""
    if not result.causes:
        return []
    if result.causes[0].new is None:
        return [("Top causes", result.causes[:SHOWN_CAUSES])] if result.failed else []
    new = [c for c in result.causes if c.new]
    old = [c for c in result.causes if c.new is False]
    groups = [("New since the baseline", new[:SHOWN_CAUSES])] if new else []
    if result.failed and old:
        groups.append(("Already in the baseline", old[:SHOWN_CAUSES]))
    return groups


def to_markdown(result: GateResult, content: bool = False) -> str:
    lines = [f"### kvprobe gate: {_HEAD[result.verdict]}", ""]
    inputs = result.inputs
    if inputs:
        said = [f"{plural(inputs.get('requests', 0), 'request')} in {plural(len(inputs.get('traces', [])), 'trace')}"]
        if inputs.get("config"):
            said.append(f"thresholds from `{cell(shown_path(inputs['config']))}`")
        if inputs.get("baseline"):
            said.append(f"baseline `{cell(shown_path(inputs['baseline']))}`")
        lines += [" · ".join(said), ""]
    if result.error:
        return "\n".join(lines + [f"**Error:** {cell(result.error)}", "", "Nothing was checked on this run: fix "
                                  "the input above and run again.", ""])
    if result.reason:
        lines += [f"**Could not decide:** {cell(result.reason)}", ""]
    lines += ["| | check | result | set by |", "|---|---|---|---|"]
    lines += [f"| {_MARK[c.passed]} | {cell(c.name)} | {cell(c.detail)} | {_source(c)} |" for c in result.checks]
    shown: set[str] = set()
    for title, group in cause_groups(result):
        lines += ["", f"**{title}**", "", "| cause | task | requests | cost | fix |", "|---|---|---:|---:|---|"]
        for c in group:
            lines.append(f"| {cell(c.label)}: {cell(c.why)} | {cell(c.task)} | {len(c.requests):,} | "
                         f"{cell(_money(c))} | {cell(_cause_fix(c, shown, content))} |")
    if result.notes:
        lines += ["", *(f"- {cell(note)}" for note in result.notes)]
    if result.baseline_written:
        lines += ["", f"This run's baseline: `{cell(shown_path(result.baseline_written))}`."]
    return "\n".join(lines) + "\n"


# XML 1.0 allows tab, newline, carriage return and everything from U+0020 except surrogates and U+FFFE/F
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def to_junit(result: GateResult, content: bool = False) -> bytes:
    """One test case per check (a failure, or in fail mode an error, when it did not hold)."""
    if result.error:
        return _junit_error(result.error)
    checks = result.checks + ([Check("gate", 0, None, None, result.reason)] if result.reason else [])
    failures = sum(c.passed is False for c in checks)
    undecided = [c for c in checks if c.passed is None]
    errors = 0 if result.undecided_warns else len(undecided)
    skipped = len(undecided) - errors
    counts = {"tests": str(len(checks)), "failures": str(failures), "errors": str(errors), "skipped": str(skipped)}
    suites = ET.Element("testsuites", name="kvprobe gate", **counts)
    suite = ET.SubElement(suites, "testsuite", name="kvprobe gate", **counts)
    props = ET.SubElement(suite, "properties")
    for name, value in (("traces", " ".join(result.inputs.get("traces", []))),
                        ("config", result.inputs.get("config") or ""), ("baseline", result.inputs.get("baseline") or "")):
        if value:
            ET.SubElement(props, "property", name=name, value=_xml(value))
    text = _causes_text(result, content)
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname="kvprobe.gate", name=_xml(c.name))
        if c.passed is False:
            ET.SubElement(case, "failure", message=_xml(c.detail), type="threshold").text = _xml(
                c.detail + (f"\nset by: {c.source}" if c.source else "") + text)
        elif c.passed is None:
            tag = "skipped" if result.undecided_warns else "error"
            ET.SubElement(case, tag, message=_xml("undecided: " + c.detail))
        else:
            ET.SubElement(case, "system-out").text = _xml(c.detail)
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def _junit_error(message: str) -> bytes:
    """One test case, in error: the gate could not run (bad input)."""
    counts = {"tests": "1", "failures": "0", "errors": "1", "skipped": "0"}
    suites = ET.Element("testsuites", name="kvprobe gate", **counts)
    suite = ET.SubElement(suites, "testsuite", name="kvprobe gate", **counts)
    case = ET.SubElement(suite, "testcase", classname="kvprobe.gate", name="gate")
    ET.SubElement(case, "error", message=_xml(message), type="input")
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def _causes_text(result: GateResult, content: bool) -> str:
    shown: set[str] = set()
    out = []
    for title, group in cause_groups(result):
        out.append(f"\n{title}:")
        for c in group:
            out.append(f"  {c.label} in {c.task} ({plural(len(c.requests), 'request')}, {_money(c)}): {c.why}")
            out.append(f"    fix: {_cause_fix(c, shown, content)}")
    return "\n".join(out)


def _config_key(check: Check, lines: dict[str, int]) -> str | None:
    """The config key that set a check's limit (for its annotation's line), when the config has it."""
    name = check.name.split(":", 1)[0]
    if check.name == "regression:token_hit_ratio":
        keys = ["max_hit_ratio_drop", "max_regression", "baseline"]
    elif check.name in ("regression:baseline", "regression:tasks"):  # about the baseline itself, not a limit
        keys = ["baseline"]
    elif name == "regression":
        keys = ["max_regression", "baseline"]
    else:
        keys = ["max_failed_requests" if name == "failed_requests" else name]
    return next((k for k in keys if k in lines), None)


def annotations(result: GateResult, lines: dict[str, int] | None = None) -> list[str]:
    """An error for each failed check (a warning for an undecided one in warn mode), at the config line that
    set its limit when the config set it; a warning for each note; the error itself when the gate could not
    run. Files are named relative to the repository (`repo_path`), from any working directory."""
    if result.error:
        return [annotation("error", "kvprobe gate: error", result.error, result.error_file, result.error_line)]
    out = []
    undecided_level = "warning" if result.undecided_warns else "error"
    config, lines = result.inputs.get("config"), lines or {}
    for c in result.checks:
        if c.passed:
            continue
        level = "error" if c.passed is False else undecided_level
        key = _config_key(c, lines) if config else None
        out.append(annotation(level, f"kvprobe gate: {c.name}", c.detail, config if key else None,
                              lines.get(key) if key else None))
    if result.reason:
        out.append(annotation("error", "kvprobe gate: could not decide", result.reason))
    out += [annotation("warning", "kvprobe gate", note) for note in result.notes]
    return out
