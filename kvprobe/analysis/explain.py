"""Evidence -> diagnoses: compare a request with the previous one of its stream and with the simulator."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from kvprobe.analysis.diagnosis import Diagnosis
from kvprobe.changes import describe_change
from kvprobe.request import RenderedRequest
from kvprobe.sim.positions import cumulative_tokens
from kvprobe.tokens import count_texts
from kvprobe.wording import show

if TYPE_CHECKING:
    from kvprobe.analysis.simulate import RequestResult

Reread = Callable[..., RenderedRequest | None]


# Block sizes are anchored on a request's totals, but a split within the total (and any block a fix moved) is
# an estimate: a shortfall this small is the estimate's error, not evidence of eviction or routing.
ESTIMATE_ERROR_FRACTION = 0.01


def _tol(result: "RequestResult") -> int:
    rules = result.rules
    return int(rules.get("cached_token_step", rules.get("unit_tokens", 0)) or 0)


def estimate_noise(result: "RequestResult") -> int:
    """The most a read can differ from the prediction before calling it unexplained."""
    return max(_tol(result), round(ESTIMATE_ERROR_FRACTION * result.usage.input_tokens))


def _param_changes(a: RenderedRequest, b: RenderedRequest) -> list[Diagnosis]:
    out = []
    for name, pb in b.params.items():
        pa = a.params.get(name)
        if pa is not None and pa.value != pb.value:
            out.append(Diagnosis("params_changed", f"{name} changed from {show(pa.value)} to {show(pb.value)}; this "
                                 f"invalidates {pb.invalidates}", param=name, a=pa.value, b=pb.value,
                                 invalidates=pb.invalidates))
    return out


def _first_difference(a: RenderedRequest, b: RenderedRequest) -> int:
    for i, (x, y) in enumerate(zip(a.blocks, b.blocks)):
        if x.content_hash != y.content_hash:
            return i
    return min(len(a.blocks), len(b.blocks))


def _cached_extent(req: RenderedRequest, provider: str) -> int:
    """Blocks of a request that its cache entries cover (through the last breakpoint, or all)."""
    if req.cache_mode != "implicit":
        return req.breakpoint_indices[-1] + 1 if req.breakpoints else 0
    return len(req.blocks)


def _prefix_change(prev: "RequestResult", result: "RequestResult", reread: Reread | None) -> Diagnosis | None:
    a, b = prev.sk.request, result.sk.request
    assert a is not None and b is not None
    i = _first_difference(a, b)
    if i >= len(a.blocks) or i >= _cached_extent(a, prev.sk.provider):
        return None
    cum = cumulative_tokens(b.blocks)
    before = cum[i - 1] if i else 0
    block = b.blocks[i] if i < len(b.blocks) else a.blocks[i]
    diag = Diagnosis("prefix_changed", f"{block.path} changed since {prev.sk.id}", path=block.path,
                     token_position=before)
    full_a, full_b = (reread(prev.sk), reread(result.sk)) if reread else (None, None)
    if full_a is not None and full_b is not None and i < len(full_b.blocks) and i < len(full_a.blocks):
        ta, tb = full_a.blocks[i], full_b.blocks[i]
        offset = len(os.path.commonprefix([ta.text, tb.text])) if ta.kind == tb.kind and ta.meta == tb.meta else 0
        raw_all, raw_head = count_texts([tb.text, tb.text[:offset]])  # (one round trip where counted elsewhere)
        if raw_all and i < len(b.blocks):
            diag.token_position = before + round(b.blocks[i].tokens * raw_head / raw_all)
        diag.char_offset = offset
        diag.detail = describe_change(full_a.blocks, full_b.blocks, i, offset) + f" (since {prev.sk.id})"
    if _new_conversation(a, b, i):
        diag.change = "restarted"
        diag.detail = (f"the first message differs from {prev.sk.id}'s and the history does not go on from it: "
                       "another conversation began or resumed (or its first message was edited); only what precedes "
                       f"it, {before:,} tokens of tools and system, could be read")
        diag.advice = ("mark the end of the system prompt (the last tool, or the system text) with cache_control: "
                       "each new conversation then reads the tools and system the last one wrote")
    return diag


def _new_conversation(a: "RenderedRequest", b: "RenderedRequest", i: int) -> bool:
    """The prompts part at the first message while the earlier one had a history: a new conversation in the
    same stream (a trace that names no session: an agent's tasks captured one after another)."""
    block = b.blocks[i] if i < len(b.blocks) else None
    if block is None or block.level != "messages" or block.message_index != 0:
        return False
    earlier = max((x.message_index or 0 for x in a.blocks if x.level == "messages"), default=0)
    later = max((x.message_index or 0 for x in b.blocks if x.level == "messages"), default=0)
    if earlier < 1:
        return False
    if later < earlier:
        return True
    # as long or longer: another conversation if its second message differs too (a first message that changes
    # on every request, a date in it, keeps the rest of the history: that is a change, not a new conversation)
    second = [[x.body_hash for x in r.blocks if x.level == "messages" and x.message_index == 1] for r in (a, b)]
    return second[0] != second[1]


def from_evidence(result: "RequestResult") -> list[Diagnosis]:
    pred, req = result.predicted, result.sk.request
    assert pred is not None and req is not None
    out, seen = [], set()
    for ev in pred.evidence:
        if ev.kind in seen:
            continue
        seen.add(ev.kind)
        path = req.blocks[ev.block_index].path if ev.block_index is not None else None
        out.append(Diagnosis(ev.kind, ev.detail, path=path, seconds_past=ev.seconds_past, writer_id=ev.writer_id,
                             positions_back=ev.positions_back,
                             limit=int(result.rules.get("lookback_positions", 0)) if ev.positions_back else None,
                             prefix_tokens=ev.prefix_tokens, minimum_tokens=ev.minimum_tokens))
    return out


def _missing_breakpoint(result: "RequestResult") -> Diagnosis:
    req = result.sk.request
    assert req is not None
    if not req.breakpoints:
        return Diagnosis("missing_breakpoint", f"no cache breakpoint in this request: the {result.reusable_tokens:,} "
                         "reusable tokens cannot be read")
    read = result.usage.cache_read_tokens
    if read > 0:
        return Diagnosis("missing_breakpoint", f"{result.reusable_tokens - read:,} of the {result.reusable_tokens:,} "
                         f"tokens sent before lie past the last breakpoint written (read {read:,}), so no entry covers "
                         "them; mark the end of the shared prefix")
    return Diagnosis("missing_breakpoint", f"{result.reusable_tokens:,} tokens were sent before but never written at "
                     "a breakpoint, so no entry covers them; mark the end of the shared prefix")


def worth_a_breakpoint(result: "RequestResult") -> bool:
    """A breakpoint only pays for a sizeable unread span (tails after the last marker are normal)."""
    assert result.predicted is not None
    missed = result.reusable_tokens - result.predicted.cache_read_tokens
    minimum = int(result.rules.get("min_cacheable_tokens", 0))
    return missed > _tol(result) and (missed >= minimum or missed >= 0.05 * result.usage.input_tokens)


def _mismatch(result: "RequestResult") -> Diagnosis | None:
    pred = result.predicted
    if not result.observed or pred is None:
        return None
    obs, exp = result.usage.cache_read_tokens, pred.cache_read_tokens
    if abs(obs - exp) <= estimate_noise(result):
        return None
    if obs < exp:
        why = "the provider read less than its rules allow (eviction, routing overflow or a provider-side change)"
    else:
        why = "the provider read more than kvprobe's rules predict (token estimate or a rule out of date)"
    return Diagnosis("unexplained", f"observed read {obs:,} tokens, predicted {exp:,}: {why}")


def explain_miss(result: "RequestResult", prev: "RequestResult | None", ideal_content: int,
                 reread: Reread | None) -> list[Diagnosis]:
    req = result.sk.request
    assert req is not None and result.predicted is not None
    out: list[Diagnosis] = []
    if prev is not None and prev.sk.request is not None:
        out += _param_changes(prev.sk.request, req)
        change = _prefix_change(prev, result, reread)
        if change:
            out.append(change)
    out += from_evidence(result)
    short = result.usage.cache_read_tokens + _tol(result) < result.reusable_tokens
    if not out and short and req.cache_mode != "implicit" and worth_a_breakpoint(result):
        out.append(_missing_breakpoint(result))
    mismatch = _mismatch(result)
    if mismatch and (not out or result.usage.cache_read_tokens < result.predicted.cache_read_tokens):
        out.append(mismatch)
    if not out and short and result.missed_tokens > estimate_noise(result):
        if req.cache_mode != "implicit" and req.breakpoints and mismatch is None:
            # the rules read what the provider read: the span past the last breakpoint is what went unread (an
            # agent that marks the prompt but not the tool results after it), however small
            out.append(_missing_breakpoint(result))
            return out
        out.append(Diagnosis("unexplained", f"read {result.usage.cache_read_tokens:,} of "
                             f"{result.reusable_tokens:,} reusable tokens and no rule explains it"))
    return out

