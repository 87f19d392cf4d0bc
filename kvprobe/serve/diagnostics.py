"""Anthropic cache diagnostics: `diagnostics.previous_message_id` in, `diagnostics.cache_miss_reason` out.

The server remembers a fingerprint of each answered request (model, the blocks of each level, the other
identity parameters, how far it made the prompt cacheable). A request naming a previous message gets the
first difference in the API's order: model, tools, system, messages (an earlier entry changed rather than
entries being appended); other identity parameters (thinking, tool_choice) give `unavailable`; none gives
`null`, as the API does when it sees no divergence.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from kvprobe.request.model import RenderedRequest

REMEMBERED = 4096  # fingerprints kept (oldest forgotten first): "previous_message_not_found" beyond that


@dataclass(frozen=True, slots=True)
class Fingerprint:
    model: str | None
    tools: tuple[int, ...]
    system: tuple[int, ...]
    messages: tuple[int, ...]
    params: tuple[tuple[str, str], ...]  # identity parameters other than the model
    cacheable_tokens: int  # prompt tokens through the last breakpoint

    @classmethod
    def of(cls, req: RenderedRequest) -> Fingerprint:
        def level(name: str) -> tuple[int, ...]:
            return tuple(b.body_hash for b in req.blocks if b.level == name)
        last = req.breakpoint_indices[-1] if req.breakpoints else -1
        params = tuple(sorted((n, repr(p.value)) for n, p in req.params.items() if n != "model"))
        return cls(req.model, level("tools"), level("system"), level("messages"), params,
                   sum(b.tokens for b in req.blocks[: last + 1]))


class CacheDiagnostics:
    def __init__(self) -> None:
        self._seen: OrderedDict[str, Fingerprint] = OrderedDict()

    def remember(self, message_id: str, req: RenderedRequest) -> None:
        self._seen[message_id] = Fingerprint.of(req)
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)

    def reason(self, previous_id: str | None, req: RenderedRequest, read_tokens: int) -> dict[str, Any] | None:
        if previous_id is None:
            return None
        prev = self._seen.get(previous_id)
        if prev is None:
            return {"type": "previous_message_not_found"}
        now = Fingerprint.of(req)
        missed = max(prev.cacheable_tokens - read_tokens, 0)
        for kind, changed in (("model_changed", prev.model != now.model), ("tools_changed", prev.tools != now.tools),
                              ("system_changed", prev.system != now.system),
                              ("messages_changed", now.messages[: len(prev.messages)] != prev.messages)):
            if changed:
                return {"type": kind, "cache_missed_input_tokens": missed}
        if prev.params != now.params:
            return {"type": "unavailable"}
        return None
