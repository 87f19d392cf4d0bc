"""A cache recording: the model calls made while it is active, kvprobe's analysis of them, and assertions.

    with CacheRecording("trace.jsonl", session="test_agent") as cache:
        run_agent()                       # any Anthropic / OpenAI SDK client, sync or async
    cache.assert_stable(min_hit_ratio=0.8)
    cache.assert_no_miss(kinds=["prefix_changed"])

The analysis is `kvprobe report`'s (simulation and diagnosis of every request); a failed assertion says
which request missed, at which path, what changed there (before/after snippets) and what to do about it.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvprobe.analysis.diagnosis import ADVICE, KINDS
from kvprobe.analysis.simulate import RequestResult
from kvprobe.capture.recorder import Recorder
from kvprobe.report import Report, build_report
from kvprobe.testing.explain import describe_failure
from kvprobe.testing.intercept import Interceptor
from kvprobe.trace import TraceRecord, read_trace

# What `assert_stable` treats as instability: the request's own code changed what the cache needed.
UNSTABLE_KINDS = ("prefix_changed", "params_changed", "missing_breakpoint", "lookback_exceeded")


class CacheAssertionError(AssertionError):
    """A cache assertion failed; the message is kvprobe's diagnosis."""


class CacheRecording:
    def __init__(self, trace: str | Path, *, session: str | None = None, agent: str | None = None) -> None:
        self.trace_path = Path(trace)
        self.session, self.agent = session, agent
        self._recorder: Recorder | None = None
        self._interceptor: Interceptor | None = None
        self._report: tuple[int, Report] | None = None

    def __enter__(self) -> CacheRecording:
        self._recorder = Recorder(self.trace_path, session=self.session, agent=self.agent)
        self._interceptor = Interceptor(self._recorder).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._interceptor is not None:
            self._interceptor.__exit__(*exc)
        if self._recorder is not None:
            self._recorder.close()

    # --- what was recorded -------------------------------------------------------------------------
    @property
    def records(self) -> list[TraceRecord]:
        if not self.trace_path.exists():
            return []
        return list(read_trace(self.trace_path, check_duplicates=False))

    def report(self) -> Report:
        """kvprobe's report over the calls recorded so far (recomputed when new calls arrive)."""
        size = self.trace_path.stat().st_size if self.trace_path.exists() else 0
        if self._report is None or self._report[0] != size:
            rep = build_report([self.trace_path], fixes=False) if size else Report([], [])
            self._report = (size, rep)
        return self._report[1]

    @property
    def results(self) -> list[RequestResult]:
        return self.report().results

    @property
    def hit_ratio(self) -> float:
        """Cache-read tokens over all input tokens of the warm requests: every request but the first of
        each session/agent and cold starts (nothing was cached before them that they could have read, e.g.
        the prompt only now grew past the model's minimum cacheable length)."""
        warm = _warm(self.results)
        total = sum(r.usage.input_tokens for r in warm)
        return sum(r.usage.cache_read_tokens for r in warm) / total if total else 0.0

    def misses(self, kinds: Sequence[str] | None = None) -> list[tuple[RequestResult, Any]]:
        """(request, diagnosis) of every diagnosed miss, optionally only of the given kinds."""
        _check_kinds(kinds)
        return [(r, d) for r in self.results for d in r.diagnoses if kinds is None or d.kind in kinds]

    # --- assertions --------------------------------------------------------------------------------
    def assert_stable(self, min_hit_ratio: float = 0.8) -> None:
        """Fail unless warm requests read at least `min_hit_ratio` of their input from cache and no request
        lost reads to a change in its prefix or parameters."""
        __tracebackhide__ = True
        self._require_calls()
        unstable = self.misses(UNSTABLE_KINDS)
        ratio = self.hit_ratio
        if ratio + 1e-9 >= min_hit_ratio and not unstable:
            return
        headline = f"warm hit ratio {ratio:.1%}" + (f" < {min_hit_ratio:.0%}" if ratio < min_hit_ratio else "")
        self._fail(f"prompt cache not stable: {headline}", unstable or self.misses())

    def assert_no_miss(self, kinds: Sequence[str] | None = None) -> None:
        """Fail if any request has a diagnosed miss (of the given kinds: see kvprobe.analysis.diagnosis.KINDS)."""
        __tracebackhide__ = True
        self._require_calls()
        found = self.misses(kinds)
        if found:
            which = ", ".join(kinds) if kinds else "any kind"
            self._fail(f"{len({id(r) for r, _ in found})} request(s) missed the cache ({which})", found)

    def _require_calls(self) -> None:
        __tracebackhide__ = True
        if not self.results:
            raise CacheAssertionError("kvprobe recorded no model call during this test: nothing to check "
                                      "(calls must go through an Anthropic/OpenAI SDK or httpx in this process)")

    def _fail(self, headline: str, found: list[tuple[RequestResult, Any]]) -> None:
        __tracebackhide__ = True
        raise CacheAssertionError(describe_failure(headline, self, found))


def _warm(results: list[RequestResult]) -> list[RequestResult]:
    seen: set[tuple[str, str]] = set()
    warm = []
    for r in results:
        key = (r.sk.session, r.sk.agent)
        if key in seen and r.write_kind != "cold_start":
            warm.append(r)
        seen.add(key)
    return warm


def _check_kinds(kinds: Sequence[str] | None) -> None:
    if isinstance(kinds, str):
        raise TypeError("kinds must be a list of diagnosis kinds, e.g. kinds=['prefix_changed']")
    unknown = [k for k in kinds or () if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown diagnosis kind(s) {', '.join(unknown)}; expected some of {', '.join(KINDS)}")


__all__ = ["ADVICE", "CacheAssertionError", "CacheRecording", "UNSTABLE_KINDS"]
