"""Which earlier request a request continues (its stream), as the provider's cache sees it (docs/streams.md).

A provider keeps a cache per model, so requests of one session and agent to different models are separate
streams: Gemini CLI's flash-lite router call and its pro main call, Claude Code's haiku side calls and its
opus/sonnet turns. Chaining them as one stream diagnosed "model changed" and "tool set changed" where
nothing was lost. A genuine model switch (the user picks another model mid-session) must stay visible,
though, and it differs by what is sent: the new model gets the conversation so far, a side call gets a
prompt of its own. So a request continues:

1. the latest request of its session, agent and model, when the latest request of its session and agent is
   of the same model or it sends that request's prompt again (the usual case, and a switch back);
2. else the latest request of another model in its session and agent that it sends the prompt of again (the
   most recent model first, so that a side call in between is passed over): a model switch, diagnosed as one;
3. else the latest request of its own model (a router/side call and the main call interleaving), or none.

"Sends the prompt again" (`resends`): its leading content (content hashes, the model left out) covers at
least half of the earlier prompt's tokens; or, where the agent rewrites its instructions for the new model
(Codex's per-model instructions, Qwen Code's system prompt naming the model), it carries one of the earlier
prompt's user messages and is about as long (sizes within a factor of two). Without bodies (usage-only logs),
the two prompts' sizes are within a factor of two of each other: a history resent is about as long, a side
call's prompt is not.
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kvprobe.request import RenderedRequest

T = TypeVar("T")
RESENT_SHARE = 0.5  # of the earlier prompt a request must send again to continue another model's stream


@dataclass(slots=True)
class Seen(Generic[T]):
    """What the rule needs of an earlier request, and the caller's own object for it."""

    item: T
    model: str | None
    request: RenderedRequest | None
    size: int  # its prompt's tokens (usage-only requests: the logged input)


def resends(new: Seen, old: Seen) -> bool:
    """Whether `new` sends `old`'s prompt again (see the module doc)."""
    if new.request is not None and old.request is not None:
        blocks = old.request.blocks
        total = sum(b.tokens for b in blocks)
        shared = 0
        for a, b in zip(new.request.blocks, blocks):
            if a.content_hash != b.content_hash:
                break
            shared += b.tokens if total else 1
        return shared >= RESENT_SHARE * (total or len(blocks)) > 0 or _carries_conversation(new.request,
                                                                                              old.request)
    if new.request is None and old.request is None:
        return _about_as_long(new.size, old.size)
    return False  # one with a body, one without: nothing to compare


def _about_as_long(a: int, b: int) -> bool:
    return min(a, b) >= RESENT_SHARE * max(a, b) > 0


def _carries_conversation(new: RenderedRequest, old: RenderedRequest) -> bool:
    """About as long as `old` and holding one of its user messages, wherever (body hashes: not chained)."""
    if not _about_as_long(sum(b.tokens for b in new.blocks), sum(b.tokens for b in old.blocks)):
        return False
    users = {b.body_hash for b in old.blocks if b.level == "messages" and b.role == "user"}
    return any(b.body_hash in users for b in new.blocks if b.level == "messages" and b.role == "user")


class Streams(Generic[T]):
    """Feed requests in start order: `previous` before `add` for each."""

    def __init__(self) -> None:
        # by stream (session, agent): each model's latest request, the least recent model first
        self._models: dict[Hashable, dict[str | None, Seen[T]]] = {}

    def previous(self, stream: Hashable, seen: Seen[T]) -> T | None:
        models = self._models.get(stream)
        if not models:
            return None
        latest = next(reversed(models.values()))
        own = models.get(seen.model)
        if latest.model == seen.model or (own is not None and resends(seen, own)):
            return own.item if own is not None else None
        for other in reversed(models.values()):  # the most recent first: a side call between is passed over
            if other.model != seen.model and resends(seen, other):
                return other.item  # a model switch: the change of model is a cause
        return own.item if own is not None else None

    def add(self, stream: Hashable, seen: Seen[T]) -> None:
        models = self._models.setdefault(stream, {})
        models.pop(seen.model, None)  # (re-inserted last: the most recent)
        models[seen.model] = seen
