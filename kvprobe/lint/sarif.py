"""SARIF 2.1.0 output, as GitHub code scanning reads it: one run, the rule catalogue, one result a finding.

Locations are files relative to the repository's root (kvprobe.checkout: $GITHUB_WORKSPACE, else the
folder holding .git), from whichever folder lint runs in; a trace finding points at its record's line, and
where a character span is known, at its exact columns (code points). Code scanning places results on files
of the checkout only, so a finding in a file outside it (a trace captured under the runner's temp folder) is
left out of the SARIF and counted in the run's properties (`outside_repository`); --format json keeps it.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import xxhash

import kvprobe
from kvprobe.checkout import in_repository, repository_root

if TYPE_CHECKING:
    from kvprobe.lint import Finding, LintResult

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def outside(result: LintResult, base: Path | None = None) -> list[Finding]:
    """The findings whose file lies outside the repository: code scanning cannot place them."""
    root = base or repository_root()
    return [f for f in result.findings if f.subject.source is not None and in_repository(f.subject.source, root) is None]


def _rule_json(rule: Any) -> dict[str, Any]:
    return {"id": rule.id, "name": rule.name, "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.summary},
            "help": {"text": f"Fix: {rule.fix}", "markdown": f"**Fix:** {rule.fix}"},
            "defaultConfiguration": {"level": rule.severity},
            "properties": {"tags": ["prompt-caching", "cost"]}}


def _location(f: Finding, base: Path) -> dict[str, Any]:
    s = f.subject
    logical = {"fullyQualifiedName": f"{s.id}/{f.path}" if f.path else s.id, "kind": "element"}
    loc: dict[str, Any] = {"logicalLocations": [logical]}
    if s.source is None:
        return loc
    physical: dict[str, Any] = {"artifactLocation": {"uri": in_repository(s.source, base)}}
    if f.region is not None:
        r = f.region
        region: dict[str, int] = {"startLine": r.start_line}
        if r.start_column is not None:
            region["startColumn"] = r.start_column
        if r.end_line is not None and r.end_column is not None:
            region |= {"endLine": r.end_line, "endColumn": r.end_column}
        physical["region"] = region
    loc["physicalLocation"] = physical
    return loc


def _result(f: Finding, index: dict[str, int], base: Path) -> dict[str, Any]:
    s = f.subject
    text = f"{f.message}. Fix: {f.fix}."
    if f.repeats:
        text += f" (Repeats in {f.repeats} later request{'s' if f.repeats > 1 else ''} of {s.stream}.)"
    fingerprint = xxhash.xxh3_64_hexdigest("\0".join(map(str, (f.rule.id, s.stream, f.path, *f.key))).encode())
    result: dict[str, Any] = {
        "ruleId": f.rule.id, "ruleIndex": index[f.rule.id], "level": f.severity, "message": {"text": text},
        "locations": [_location(f, base)], "partialFingerprints": {"kvprobeFinding/v1": fingerprint},
        "properties": {"request": s.id, "requestIndex": s.index, "stream": s.stream, "path": f.path,
                       "repeats": f.repeats}}
    if f.span is not None:
        result["properties"]["span"] = {"start": f.span[0], "end": f.span[1]}
    return result


def to_sarif(result: LintResult, base: Path | None = None) -> dict[str, Any]:
    base = (base or repository_root()).resolve()
    rules = list(result.catalog.rules.values())
    index = {r.id: i for i, r in enumerate(rules)}
    left_out = {id(f) for f in outside(result, base)}
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [{
        "tool": {"driver": {"name": "kvprobe", "version": kvprobe.__version__,
                            "rules": [_rule_json(r) for r in rules]}},
        "columnKind": "unicodeCodePoints",
        "results": [_result(f, index, base) for f in result.findings if id(f) not in left_out],
        "properties": {"outside_repository": len(left_out)}}]}
