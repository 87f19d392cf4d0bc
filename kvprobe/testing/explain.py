"""The message of a failed cache assertion: each miss with its request, path, what changed and the fix."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvprobe.analysis.diagnosis import ADVICE

if TYPE_CHECKING:
    from kvprobe.analysis.simulate import RequestResult
    from kvprobe.testing.recording import CacheRecording

MAX_LISTED = 5


def _change_lines(rec: CacheRecording, result: RequestResult, previous: dict[str, str]) -> list[str]:
    """Before/after snippets of the first change, from `kvprobe diff` of the previous request and this one."""
    from kvprobe.diff import diff_requests
    from kvprobe.request import render_request

    prev_id = previous.get(result.sk.id)
    records = {r.id: r for r in rec.records}
    a, b = records.get(prev_id or ""), records.get(result.sk.id)
    if a is None or b is None or a.request is None or b.request is None:
        return []
    d = diff_requests(render_request(a.request, a.provider, a.endpoint), render_request(b.request, b.provider,
                                                                                            b.endpoint))
    lines = []
    if d.first_change is not None:
        fc = d.first_change
        lines += [f"      - {fc.a_snippet}", f"      + {fc.b_snippet}"]
    for p in d.params_changed:
        lines.append(f"      {p['name']}: {p['a']!r} -> {p['b']!r} (invalidates {p['invalidates']})")
    return lines


def _previous_ids(results: list[RequestResult]) -> dict[str, str]:
    last: dict[tuple[str, str], str] = {}
    out = {}
    for r in results:
        key = (r.sk.session, r.sk.agent)
        if key in last:
            out[r.sk.id] = last[key]
        last[key] = r.sk.id
    return out


def _where(d: Any) -> str:
    where = f" at {d.path}" if d.path else ""
    if d.token_position is not None:
        where += f" (token ~{d.token_position:,})"
    return where


def describe_failure(headline: str, rec: CacheRecording, found: list[tuple[RequestResult, Any]]) -> str:
    results = rec.results
    number = {r.sk.id: i for i, r in enumerate(results, start=1)}
    previous = _previous_ids(results)
    total_in = sum(r.usage.input_tokens for r in results)
    total_read = sum(r.usage.cache_read_tokens for r in results)
    lines = [f"kvprobe: {headline}",
             f"  {len(results)} requests, {total_read:,} of {total_in:,} input tokens read from cache"]
    for result, d in found[:MAX_LISTED]:
        lines.append(f"  request {number[result.sk.id]} ({result.sk.id}): {d.kind}{_where(d)}: {d.detail}"
                     + (f"; {d.missed_tokens:,} tokens not read" if d.missed_tokens else ""))
        if d.kind in ("prefix_changed", "params_changed"):
            lines += _change_lines(rec, result, previous)
    if len(found) > MAX_LISTED:
        lines.append(f"  ... and {len(found) - MAX_LISTED} more")
    for kind in dict.fromkeys(d.kind for _, d in found):
        lines.append(f"  what to do ({kind}): {ADVICE.get(kind, '')}")
    lines.append(f"  trace: {rec.trace_path} (run `kvprobe report` on it for the full analysis)")
    return "\n".join(lines)
