"""The diagnose stage: why each simulated request read less than it could have (docs/contracts.md §3 kinds).

Reads the simulate stage's results in start order: a request against the previous one of its stream (what
changed), the simulator's evidence (expiry, lookback, readability, minimum length), the provider's own
reported cause, then concurrent siblings across agents of a session. `Diagnoser.step` serves a live watch one
request at a time; `diagnose` a whole trace.
"""
from __future__ import annotations

from collections.abc import Callable

from kvprobe.analysis.diagnosis import Diagnosis, from_provider_reason
from kvprobe.analysis.explain import estimate_noise, explain_miss, from_evidence
from kvprobe.analysis.siblings import diagnose_siblings
from kvprobe.analysis.simulate import RequestResult, tolerance
from kvprobe.analysis.skeleton import Skeleton
from kvprobe.analysis.usage_only import UsageOnly
from kvprobe.economics.keep_alive import entry_lifetime_s, pause_advice
from kvprobe.sim import OPENAI_MODES
from kvprobe.wording import duration
from kvprobe.request import RenderedRequest
from kvprobe.sim import Prediction

Reread = Callable[[Skeleton], RenderedRequest | None]


class Diagnoser:
    """reread: the full text of a request (for the exact change inside a block), when its line can be read."""

    def __init__(self, reread: Reread | None = None) -> None:
        self.reread = reread
        self.usage_only = UsageOnly()  # requests without bodies: causes from the log's own evidence

    def step(self, result: RequestResult) -> RequestResult:
        sk = result.sk
        if sk.request is None:
            self.usage_only.step(result)  # its ideal read, write kind and diagnoses
            return result
        req = sk.request
        if req.cache_mode == "gemini_cached":  # the named cache is the whole reusable prefix
            # (or one the trace never created: its evidence says so though nothing counts as missed)
            result.diagnoses = from_evidence(result) if result.missed_tokens or result.predicted.evidence else []
        else:
            result.diagnoses = self._explain(result)
        if not result.diagnoses and result.raw_ideal_tokens > result.usage.cache_read_tokens \
                and not result.ideal_read_tokens and result.predicted is not None:
            # content was repeated but is too short to cache: say so, though no ideal cache could do better
            result.diagnoses = _below_minimum(result.predicted, req)
        return result

    def _explain(self, result: RequestResult) -> list[Diagnosis]:
        sk, tol = result.sk, tolerance(result.rules)
        reported = [from_provider_reason(sk.observed.miss_reason, sk.extra.get("reported_missed_tokens"))] \
            if result.observed and sk.observed.miss_reason else []
        short = result.usage.cache_read_tokens + tol < result.reusable_tokens
        mismatch = result.observed and result.predicted is not None and \
            abs(result.usage.cache_read_tokens - result.predicted.cache_read_tokens) > tol
        if not short and not mismatch and not reported:
            return []
        found = explain_miss(result, result.previous, result.ideal_content_tokens, self.reread) \
            if (short or mismatch) else []
        missed = result.missed_tokens
        for d in reported + found:
            d.missed_tokens = missed
            if d.kind == "ttl_expired" and d.advice is None:
                _pause_advice(result, d)
            elif d.kind == "missing_breakpoint" and sk.request.cache_mode in OPENAI_MODES:
                d.advice = ("mark the end of the shared prefix with `prompt_cache_breakpoint`: GPT-5.6+ reads only at "
                            "breakpoints, and its managed one sits after the part that changes")
        # beside a reported cause, kvprobe's own finding stays when it says more (the exact block changed)
        return reported + [d for d in found if not reported or d.kind != reported[0].kind or d.path]


def _pause_advice(result: RequestResult, d: Diagnosis) -> None:
    """The keep-alive or longer lifetime that pays for this pause; or that nothing does (a new start)."""
    prev = result.previous
    lifetime = entry_lifetime_s(result.rules)
    if prev is not None and prev.sk.request is not None:
        gap, cached = result.sk.started_at - prev.sk.started_at, result.stream_tokens
    elif d.seconds_past is not None and lifetime is not None:  # another stream's entry (another session's)
        gap, cached = d.seconds_past + lifetime, result.reusable_tokens
    else:
        return
    d.advice = pause_advice(result.rules, cached, gap, lifetime)
    if d.advice is None:
        d.detail += (f"; {duration(gap)} is past every lifetime the provider offers and every keep-alive that pays "
                     "for itself: a new start")
        d.advice = "nothing pays for a pause this long: the rebuild is what the gap costs"


def diagnose(results: list[RequestResult], reread: Reread | None = None) -> list[RequestResult]:
    """Diagnose a whole simulated trace (results in start order, as `simulate` returns them)."""
    diagnoser = Diagnoser(reread)
    for result in results:
        diagnoser.step(result)
    diagnose_siblings(results, estimate_noise)
    diagnoser.usage_only.revisit(results)  # with every cache level the whole trace shows
    return results


def _below_minimum(pred: Prediction, req: RenderedRequest) -> list[Diagnosis]:
    return [Diagnosis(e.kind, e.detail, path=req.blocks[e.block_index].path if e.block_index is not None else None,
                      prefix_tokens=e.prefix_tokens, minimum_tokens=e.minimum_tokens)
            for e in pred.evidence if e.kind == "below_minimum"][:1]
