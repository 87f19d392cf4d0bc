"""`kvprobe lint`: static checks that catch cache breakers in request bodies and traces before they cost.

    result = lint_paths(["traces/sample_session.jsonl"])
    for f in result.findings: print(f.rule.id, f.subject.id, f.path, f.span, f.message, f.fix)
    sarif = result.to_sarif()          # SARIF 2.1.0 for GitHub code scanning

Single-request checks (breakpoint count, minimum length) run on every request; with a trace, consecutive
requests of a stream are compared as well (what changed in the cached prefix, tools, identity parameters,
lookback). A stream is what the provider caches: a session and agent, per model (`analysis.streams`: a
router or side call to another model is its own stream, a model switch continues the conversation's).
Volatile-looking text before the last breakpoint is reported when the stream shows it changing, or, on a
stream of one request, when its shape changes by nature (clocks, ids, counters). A problem that repeats
through a stream is reported once, at its first request, with the number of repeats.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.errors import InputError
from kvprobe.lint.catalog import SEVERITIES, LintCatalog, load_lint_catalog, severity_rank
from kvprobe.lint.inputs import InputStats, iter_subjects
from kvprobe.lint.locate import locate, record_text, steps_for
from kvprobe.lint.model import Finding, Region, Subject
from kvprobe.analysis.streams import Seen, Streams
from kvprobe.lint.request_checks import check_request, tail_past_lookback, volatile_in_prefix
from kvprobe.lint.session_checks import BreakpointWatch, VolatileWatch, check_pair

__all__ = ["Finding", "LintResult", "lint_paths", "lint_subjects", "SEVERITIES"]


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


@dataclass(slots=True)
class _StreamState:
    """What lint keeps of one stream while reading on: the findings so far and what it watches."""

    watch: BreakpointWatch = field(default_factory=BreakpointWatch)
    volatile: VolatileWatch = field(default_factory=VolatileWatch)
    found: dict[tuple[Any, ...], Finding] = field(default_factory=dict)  # one per problem, first request
    estimate: list[Finding] = field(default_factory=list)  # lookback estimated on a request alone

    def add(self, findings: Iterable[Finding]) -> None:
        """A problem that repeats is reported once, at its first request; later ones count as repeats."""
        for f in findings:
            if f.key in self.found:
                self.found[f.key].repeats += 1
            else:
                self.found[f.key] = f


def _finish(state: _StreamState, cat: LintCatalog) -> list[Finding]:
    state.add(state.watch.findings(cat))
    state.add(state.volatile.findings(cat))
    if state.estimate:  # a lone request: nothing followed it to check the lookback exactly
        state.add(state.estimate)
    return list(state.found.values())


def lint_subjects(subjects: Iterable[Subject], catalog: LintCatalog | None = None) -> list[Finding]:
    """Findings of requests given in session order (streams interleaved freely)."""
    cat = catalog or load_lint_catalog()
    chains: Streams[tuple[_StreamState, Subject]] = Streams()  # each request's previous one, and its state
    states: list[_StreamState] = []
    for s in subjects:
        seen = Seen(None, s.request.model, s.request, 0)
        previous = chains.previous(s.ref.stream, seen)
        if previous is None:
            state = _StreamState()
            states.append(state)
            state.estimate = tail_past_lookback(s, cat)
        else:
            state, prev = previous
            state.estimate = []
            state.add(check_pair(prev, s, cat))
            state.watch.update(prev, s)
        state.add(check_request(s, cat))
        state.volatile.update(volatile_in_prefix(s, cat))
        seen.item = (state, s)
        chains.add(s.ref.stream, seen)
    found = [f for state in states for f in _finish(state, cat)]
    found.sort(key=lambda f: (f.subject.order, -severity_rank(f.severity), f.rule.id))
    return found


def _place(f: Finding, last: dict[tuple[str, int | None], str | None]) -> None:
    """Line and columns of a finding in its file (`last`: the record read for the previous finding)."""
    s = f.subject
    if s.source is None:
        return
    key = (s.source, s.offset)
    if key not in last:  # findings come in input order: keep one record's text, not the whole trace's
        last.clear()
        last[key] = record_text(s.source, s.offset)
    text = last[key]
    if text is not None:
        f.region = locate(text, steps_for(f.path, s.in_record), s.line or 1, f.block_text, f.span)
    if f.region is None and s.line is not None:
        f.region = Region(s.line)


def lint_paths(paths: list[str | Path], progress: Callable[[int], None] | None = None,
               skip_bad: bool | None = None) -> LintResult:
    """Lint request bodies (.json), trace records (.json) and traces (.jsonl); `progress` gets bytes read.

    `skip_bad`: a file that is not a request is named in `inputs[].skipped` and the others are linted.
    None (the default) skips when there are several paths and raises the first one's InputError when every
    file was skipped, as for a single bad file; True never raises for one (pre-commit's batches may hold
    only such files)."""
    if not paths:
        raise InputError("nothing to lint: give request bodies (.json) or traces (.jsonl)")
    skip = len(paths) > 1 if skip_bad is None else skip_bad
    stats: list[InputStats] = []
    findings = lint_subjects(iter_subjects(paths, stats, progress, skip_bad=skip))
    if skip_bad is None and stats and all(s.skipped and not s.requests for s in stats):
        raise InputError(f"no file could be linted; the first: {stats[0].skipped}", file=stats[0].file)
    last: dict[tuple[str, int | None], str | None] = {}
    for f in findings:
        _place(f, last)
    return LintResult(findings, sum(s.requests for s in stats), stats)
