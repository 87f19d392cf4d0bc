"""Render the requests of a trace without re-rendering the history each one repeats.

An agent resends its tools, system prompt and whole conversation on every turn, so a session of n turns
holds O(n²) message blocks while only O(n) of them are new. `StreamRenderer` keeps the previous request of
each stream (session + agent): when a request has the same tools, system and model and starts with the
same messages, the blocks of those messages are taken over as they are (hashes included, already
interned by the caller) and only the rest is rendered and chained on. The result is what `render_request`
returns for the body; anything unusual (another API, an automatic breakpoint, changed identity
parameters, nothing in common) is simply rendered whole.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from kvprobe.catalog import rules_for
from kvprobe.request import betas_of, infer_platform, render_request
from kvprobe.request.anthropic import extend_anthropic
from kvprobe.request.model import RenderedRequest
from kvprobe.request.responses_chain import ResponseChain


@dataclass(slots=True)
class _Previous:
    body: dict[str, Any]
    provider: str
    request: RenderedRequest  # its `blocks` may since have been swapped for shared (interned) ones
    message_ends: list[int]  # index in request.blocks just after messages[i]
    head: int  # blocks before the first message (tools, system)
    platform: str | None = None
    betas: frozenset[str] = frozenset()


def _message_ends(req: RenderedRequest, count: int, known: tuple[int, list[int], int] | None = None
                  ) -> tuple[int, list[int]]:
    """Where the blocks of each message end. `known` = (head, ends of the first messages, block where the
    rest starts) when a request extends the previous one: only its new blocks are walked."""
    if known is None:
        head = next((i for i, b in enumerate(req.blocks) if b.level == "messages"), len(req.blocks))
        ends, first_block, first_message = [head] * count, 0, 0
    else:
        head, kept, first_block = known
        ends, first_message = kept + [head] * (count - len(kept)), len(kept)
    blocks = req.blocks
    for i in range(first_block, len(blocks)):
        block = blocks[i]
        if block.level == "messages" and block.message_index is not None and block.message_index < count:
            ends[block.message_index] = i + 1
    for i in range(max(first_message, 1), count):  # a message with no blocks ends where the one before did
        ends[i] = max(ends[i], ends[i - 1])
    return head, ends


def _common_messages(new: list[Any], old: list[Any], share: bool) -> int:
    k = 0
    for a, b in zip(new, old):
        if a is not b and a != b:
            break
        if share:
            new[k] = b  # the same value: keep one object, so kept records share their repeated history
        k += 1
    return k


class StreamRenderer:
    """`render_request` for the requests of a trace in order, reusing each stream's previous rendering.

    Only the `streams` most recently seen streams are remembered (a finished session's last body would
    otherwise stay in memory to the end of a long trace); an older one is rendered whole when it resumes.
    """

    def __init__(self, share: bool = False, streams: int = 64, chain: ResponseChain | None = None) -> None:
        """share=True replaces a body's leading messages equal to the previous request's by those objects.
        chain: the stateful Responses conversations read so far (a parse that goes on from another's)."""
        self.share = share
        self.streams = streams
        self._previous: OrderedDict[Hashable, _Previous] = OrderedDict()
        self.chain = chain if chain is not None else ResponseChain()

    def render(self, body: Any, provider: str | None = None, endpoint: str | None = None, response: Any = None,
               stream: Hashable = None, headers: dict[str, str] | None = None,
               platform: str | None = None) -> RenderedRequest:
        body = self.chain.effective(body, response)  # a `previous_response_id`'s conversation first
        prev = self._previous.get(stream)
        betas = betas_of(headers)
        if platform is None and isinstance(body, dict):
            platform = infer_platform(endpoint, body.get("model"), response)
        same = prev is not None and prev.platform == platform and prev.betas == betas
        req, known = self._extend(prev, body, provider) if same and prev is not None else (None, None)
        if req is None:
            req, known = render_request(body, provider, endpoint, response, headers, platform), None
        self._previous.pop(stream, None)
        if req.api == "anthropic_messages" and req.provider in ("anthropic", "local") \
                and isinstance(body.get("messages"), list):
            head, ends = _message_ends(req, len(body["messages"]), known)
            self._previous[stream] = _Previous(body, req.provider, req, ends, head, platform, betas)
            if len(self._previous) > self.streams:
                self._previous.popitem(last=False)  # the stream seen least recently
        return req

    def _extend(self, prev: _Previous, body: Any, provider: str | None
                ) -> tuple[RenderedRequest | None, tuple[int, list[int], int] | None]:
        """The request rendered on the previous one's blocks, and (head, ends of the reused messages, first
        new block); (None, None) when it must be rendered whole."""
        old = prev.body
        if not isinstance(body, dict) or provider != prev.provider or "input" in body \
                or "cache_control" in body or "cache_control" in old:
            return None, None
        messages = body.get("messages")
        if not isinstance(messages, list) or body.get("model") != old.get("model") \
                or body.get("tools") != old.get("tools") or body.get("system") != old.get("system"):
            return None, None
        k = _common_messages(messages, old["messages"], self.share)
        cut = prev.message_ends[k - 1] if k else prev.head
        if cut == 0:
            return None, None
        model = body.get("model")
        if not isinstance(model, str) or model.startswith("models/"):
            return None, None
        reused = prev.request.blocks[:cut]
        marks = [(i, ttl) for i, ttl in prev.request.breakpoints if i < cut]
        req = extend_anthropic(body, rules_for(provider, model, prev.platform), reused, marks, k, prev.request.params,
                               prev.betas)
        if req is None:
            return None, None
        req.provider = provider  # type: ignore[assignment]
        return req, (prev.head, prev.message_ends[:k], cut)
