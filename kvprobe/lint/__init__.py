"""`kvprobe lint`: static checks that catch cache breakers in request bodies and traces before they cost.

    result = lint_paths(["traces/sample_session.jsonl"])
    for f in result.findings: print(f.rule.id, f.subject.id, f.path, f.span, f.message, f.fix)
    sarif = result.to_sarif()          # SARIF 2.1.0 for GitHub code scanning

Single-request checks (volatile text before the last breakpoint, breakpoint count, minimum length) run on
every request; with a trace, consecutive requests of a session are compared as well (what changed in the
cached prefix, tools, identity parameters, lookback). A problem that repeats through a session is reported
once, at its first request, with the number of repeats.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.errors import InputError
from kvprobe.lint.catalog import SEVERITIES, LintCatalog, load_lint_catalog, severity_rank
from kvprobe.lint.inputs import InputStats, load_subjects
from kvprobe.lint.locate import locate, record_text, steps_for
from kvprobe.lint.model import Finding, Subject
from kvprobe.lint.request_checks import check_request
from kvprobe.lint.session_checks import check_stream

__all__ = ["Finding", "LintResult", "lint_paths", "lint_streams", "SEVERITIES"]


@dataclass(slots=True)
class LintResult:
    findings: list[Finding]
    requests: int
    inputs: list[InputStats] = field(default_factory=list)
    catalog: LintCatalog = field(default_factory=load_lint_catalog)

    def counts(self) -> dict[str, int]:
        return {sev: sum(f.severity == sev for f in self.findings) for sev in reversed(SEVERITIES)}

    def at_or_above(self, severity: str) -> list[Finding]:
        rank = severity_rank(severity)
        return [f for f in self.findings if severity_rank(f.severity) >= rank]

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "counts": self.counts(),
                "findings": [f.to_json() for f in self.findings],
                "inputs": [s.to_json() for s in self.inputs],
                "rules": [{"id": r.id, "name": r.name, "severity": r.severity, "summary": r.summary}
                          for r in self.catalog.rules.values()]}

    def to_sarif(self, base: Path | None = None) -> dict[str, Any]:
        from kvprobe.lint.sarif import to_sarif

        return to_sarif(self, base)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    """One finding per (stream, problem): the first request that shows it; later ones counted as repeats."""
    first: dict[tuple[Any, ...], Finding] = {}
    for f in findings:
        key = (f.subject.stream, *f.key)
        if key in first:
            first[key].repeats += 1
        else:
            first[key] = f
    return list(first.values())


def _place(f: Finding, texts: dict[tuple[str, int | None], str | None]) -> None:
    s = f.subject
    if s.source is None:
        return
    key = (s.source, s.offset)
    if key not in texts:
        texts[key] = record_text(s.source, s.offset)
    text = texts[key]
    if text is not None:
        f.region = locate(text, steps_for(f.path, s.in_record), s.line or 1, f.block_text, f.span)
    if f.region is None and s.line is not None:
        from kvprobe.lint.model import Region

        f.region = Region(s.line)


def lint_streams(streams: Iterable[list[Subject]], catalog: LintCatalog | None = None) -> list[Finding]:
    """Findings of streams of subjects (each stream: one session's requests in start order)."""
    cat = catalog or load_lint_catalog()
    found: list[Finding] = []
    for stream in streams:
        per_stream = [f for s in stream for f in check_request(s, cat, alone=len(stream) == 1)]
        per_stream += check_stream(stream, cat)
        found += _dedupe(per_stream)
    found.sort(key=lambda f: (f.subject.order, -severity_rank(f.severity), f.rule.id))
    return found


def lint_paths(paths: list[str | Path]) -> LintResult:
    """Lint request bodies (.json), trace records (.json) and traces (.jsonl)."""
    if not paths:
        raise InputError("nothing to lint: give request bodies (.json) or traces (.jsonl)")
    streams, stats = load_subjects(paths)
    findings = lint_streams(streams)
    texts: dict[tuple[str, int | None], str | None] = {}
    for f in findings:
        _place(f, texts)
    return LintResult(findings, sum(len(s) for s in streams), stats)
