"""Stateful OpenAI Responses requests: `previous_response_id` has the API put a stored response's input and
output before the request's own input, and `conversation` the items of a conversation object (every earlier
request's input and output in it), so the prompt the model sees (and the cache keys) is that whole
conversation, not the few items the client sent. Instructions are the request's own (the API does not carry
them over). `serve` does the same for the agents it answers; this is the trace side, where the earlier
requests and their responses are records of the same trace.
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
    """The conversations behind the responses of a trace read in order: by response id, and by conversation
    object."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._conversations: OrderedDict[Any, list[Any]] = OrderedDict()  # by response id, and by
        # ("conversation", id) for a conversation object's items so far
        self.unresolved = 0  # requests whose earlier state is not among those read (rendered as sent)

    def effective(self, body: Any, response: Any) -> Any:
        """The body the model saw: with the conversation of its `previous_response_id` (or its `conversation`
        object's items) before its input when the trace holds them (else as sent: the history it names is
        unknown here). Its own conversation is remembered under its response's id and added to its
        conversation object."""
        if not isinstance(body, dict) or ("input" not in body and "previous_response_id" not in body):
            return body
        items = input_items(body.get("input", []))
        previous, conversation = body.get("previous_response_id"), _conversation_id(body)
        state = previous if isinstance(previous, str) else conversation
        earlier = self._conversations.get(state) if state is not None else None
        if items is not None and earlier is not None:
            items = [*earlier, *items]
            body = {**body, "input": items}
        elif state is not None:
            self.unresolved += 1
        output = response.get("output") if isinstance(response, dict) else None
        if items is None or not isinstance(output, list):
            return body
        if conversation is not None:  # the conversation object holds this exchange from now on
            self._remember(conversation, [*items, *output])
        rid = response.get("id") if isinstance(response, dict) else None
        # (a response made with `store: false`, as Codex sends, cannot be named by a later request)
        if isinstance(rid, str) and body.get("store") is not False:
            self._remember(rid, [*items, *output])
        return body

    def _remember(self, key: str | tuple[str, str], conversation: list[Any]) -> None:
        self._conversations[key] = conversation
        self._conversations.move_to_end(key)
        if len(self._conversations) > self.kept:
            self._conversations.popitem(last=False)


def _conversation_id(body: dict[str, Any]) -> tuple[str, str] | None:
    """The conversation object a request adds to (`conversation`: its id, or {"id": ...}), as a chain key."""
    value = body.get("conversation")
    cid = value.get("id") if isinstance(value, dict) else value
    return ("conversation", cid) if isinstance(cid, str) and cid else None
