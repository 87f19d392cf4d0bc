"""Anthropic cache diagnostics: `diagnostics.previous_message_id` in, `diagnostics.cache_miss_reason` out.

As the API documents it (providers/anthropic.toml, rule `cache_diagnostics`, with source and date):
the server keeps a fingerprint (hashes and token counts, no text) of each answered request *that carried the
`diagnostics` object*; a request naming one of those gets the first difference in the rule's order: model
(or speed), tools, system, messages (an earlier entry changed rather than entries being appended). Other
prompt-affecting parameters (thinking, tool_choice, ...) give `unavailable`; an id never stored (or forgotten)
gives `previous_message_not_found`; no difference gives a `null` diagnostics object. The comparison is
about request structure, whether or not the cache actually hit.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from kvprobe.catalog import rules_for
from kvprobe.request.model import RenderedRequest

REMEMBERED = 4096  # fingerprints kept (oldest forgotten first): "previous_message_not_found" beyond that


def _rule() -> dict[str, Any]:
    return rules_for("anthropic", None).get("cache_diagnostics") or {}


def _values(body: dict[str, Any], names: list[str]) -> tuple[str, ...]:
    return tuple(repr(body.get(n)) for n in names)


@dataclass(frozen=True, slots=True)
class Fingerprint:
    model: tuple[str, ...]  # the model and the other parameters the API counts as the model (speed)
    tools: tuple[int, ...]
    system: tuple[int, ...]
    messages: tuple[int, ...]
    params: tuple[str, ...]  # other prompt-affecting parameters: a change is "unavailable"
    cacheable_tokens: int  # prompt tokens through the last breakpoint

    @classmethod
    def of(cls, req: RenderedRequest, body: dict[str, Any]) -> Fingerprint:
        rule = _rule()

        def level(name: str) -> tuple[int, ...]:
            return tuple(b.body_hash for b in req.blocks if b.level == name)
        last = req.breakpoint_indices[-1] if req.breakpoints else -1
        return cls(_values(body, rule.get("model_identity", ["model"])), level("tools"), level("system"),
                   level("messages"), _values(body, rule.get("unavailable_params", [])),
                   sum(b.tokens for b in req.blocks[: last + 1]))

    def first_divergence(self, now: Fingerprint) -> str | None:
        """The first level (in the rule's order) at which `now` no longer starts like this request."""
        for name in _rule().get("order", ["model", "tools", "system", "messages"]):
            before, after = getattr(self, name), getattr(now, name)
            changed = after[: len(before)] != before if name == "messages" else before != after
            if changed:
                return name
        return None


class CacheDiagnostics:
    def __init__(self) -> None:
        self._seen: OrderedDict[str, Fingerprint] = OrderedDict()

    def remember(self, message_id: str, req: RenderedRequest, body: dict[str, Any]) -> None:
        """Keep a request's fingerprint for later comparisons (only requests that asked for diagnostics)."""
        self._seen[message_id] = Fingerprint.of(req, body)
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)

    def reason(self, previous_id: str | None, req: RenderedRequest, read_tokens: int,
               body: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The `cache_miss_reason` object for this request, or None (no divergence, nothing to compare)."""
        if previous_id is None:
            return None
        prev = self._seen.get(previous_id)
        if prev is None:
            return {"type": "previous_message_not_found"}
        now = Fingerprint.of(req, body if body is not None else {"model": req.model})
        level = prev.first_divergence(now)
        if level is not None:
            # what the previous request left cacheable and this one could not read
            missed = max(prev.cacheable_tokens - read_tokens, 0)
            return {"type": f"{level}_changed", "cache_missed_input_tokens": missed}
        if prev.params != now.params:
            return {"type": "unavailable"}
        return None
