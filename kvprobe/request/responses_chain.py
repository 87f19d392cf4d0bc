"""Stateful OpenAI Responses requests: `previous_response_id` has the API put a stored response's input and
output before the request's own input, so the prompt the model sees (and the cache keys) is that whole
conversation, not the few items the client sent. Instructions are the request's own (the API does not carry
them over). `serve` does the same for the agents it answers; this is the trace side, where the earlier
request and its response are records of the same trace.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

# responses remembered for a later previous_response_id, oldest forgotten first: each holds its conversation's
# items, so a trace of long sessions that resend their history (and never chain) keeps this many bodies alive
KEPT = 256


def input_items(value: Any) -> list[Any] | None:
    """A Responses `input` as a list of items (a string is one user message); None when it is neither."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    return list(value) if isinstance(value, list) else None


class ResponseChain:
    """The conversations behind the responses of a trace read in order, by response id."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._conversations: OrderedDict[str, list[Any]] = OrderedDict()
        self.unresolved = 0  # requests whose previous response is not among those read (rendered as sent)

    def effective(self, body: Any, response: Any) -> tuple[Any, int]:
        """The body the model saw, and how many of its leading input items the API carried over: with the
        conversation of its `previous_response_id` before its input when that response is in the trace (else
        as sent: the history it names is unknown here). Its own conversation is remembered under its
        response's id."""
        if not isinstance(body, dict) or ("input" not in body and "previous_response_id" not in body):
            return body, 0
        items = input_items(body.get("input", []))
        previous = body.get("previous_response_id")
        earlier = self._conversations.get(previous) if isinstance(previous, str) else None
        carried = 0
        if items is not None and earlier is not None:
            items, carried = [*earlier, *items], len(earlier)
            body = {**body, "input": items}
        elif isinstance(previous, str):
            self.unresolved += 1
        rid = response.get("id") if isinstance(response, dict) else None
        output = response.get("output") if isinstance(response, dict) else None
        # (a response made with `store: false`, as Codex sends, cannot be named by a later request)
        if isinstance(rid, str) and isinstance(output, list) and items is not None and body.get("store") is not False:
            self._conversations[rid] = [*items, *output]
            self._conversations.move_to_end(rid)
            if len(self._conversations) > self.kept:
                self._conversations.popitem(last=False)
        return body, carried
