"""Each request's message list, rebuilt from an agent's log, and how it differs from the stream's last one.

Usage-only logs hold no request bodies, but most hold the conversation: Claude Code and Qwen Code write every
message as a line chained by `parentUuid` (the request an assistant line answers was sent with the chain that
ends at its parent), Codex writes its response items in order, Gemini CLI its turns. From them a request's
message list can be rebuilt cheaply: a digest of each message's content and an estimated size, never the text.
Diffing it against the stream's previous request tells what the cache saw:

* no change: the previous list is a prefix of this one (append-only): the content did not break the cache,
  so a read that falls short was the entry's routing, eviction or lifetime;
* `edited`: a message still in place has other content (a tool result rewritten or cleared);
* `branched`: the list leaves the previous one at a message and goes on elsewhere (a rewind, an edited prompt,
  a branch of the conversation);
* `compacted`: the history was replaced by a summary;
* `restarted`: nothing in common with the previous list (`/clear`, a new conversation in the same stream);
* `truncated`: the agent dropped older messages to fit the context window (Cline's context manager: the
  first messages stay, a range after them goes);
* `cleared`: the provider edited the prompt itself (Anthropic's context editing cleared old tool results; the
  response's `context_management.applied_edits` says so).

Importers put the result on the record as `extra["history"]` (docs/contracts.md §1):

    {"messages": 41, "tokens": 18230, "change": {"kind": "branched", "index": 12, "tokens_before": 5210}}

`index` is the API message (`messages[12]`: consecutive lines of one role are one message) where the two lists
part; `tokens_before` the estimated size of the messages before it. Sizes are estimates (bytes of the JSON
content / BYTES_PER_TOKEN); `analysis.usage_only` anchors them on the logged usage.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import orjson

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

BYTES_PER_TOKEN = 4  # a rough size of English and code in JSON; only the difference of two estimates is used
KINDS = ("edited", "branched", "compacted", "restarted", "cleared", "truncated")


def measure(content: Any) -> tuple[int, int]:
    """(digest, estimated tokens) of a message's content, whatever its shape."""
    try:
        raw = orjson.dumps(content)
    except TypeError:
        raw = repr(content).encode()
    return hash(raw), len(raw) // BYTES_PER_TOKEN


@dataclass(slots=True)
class _Line:
    """One line of a chained log: its parent, role and content digest and size."""

    parent: str | None
    role: str | None  # user | assistant | None (a line the API is not sent: system, progress)
    digest: int
    tokens: int
    boundary: bool = False  # a compaction boundary: what follows starts from the summary
    tool_result: bool = False


@dataclass(slots=True)
class Sent:
    """A request's message list as lines (or items), kept up to date by appending: where each line stands,
    the estimated tokens before it (`before`), the API message it belongs to (`message`: lines of one role in
    a row are one message)."""

    ids: list[Any] = field(default_factory=list)
    at: dict[Any, int] = field(default_factory=dict)
    before: list[int] = field(default_factory=list)
    message: list[int] = field(default_factory=list)
    digests: list[int] = field(default_factory=list)
    roles: list[str | None] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    tokens: int = 0
    messages: int = 0
    role: str | None = None
    replaced: str | None = None  # a list that replaced another (Sequence): why (compacted, branched)

    def append(self, key: Any, role: str | None, digest: int, tokens: int) -> None:
        self.at[key] = len(self.ids)
        self.ids.append(key)
        self.before.append(self.tokens)
        self.digests.append(digest)
        self.roles.append(role)
        self.sizes.append(tokens)
        if role is not None and role != self.role:
            self.messages += 1
            self.role = role
        self.message.append(max(self.messages - 1, 0))
        self.tokens += tokens

    def position(self, at: int) -> tuple[int, int]:
        """(API message index, estimated tokens before it) of the line at `at` (or just past the end)."""
        if at < len(self.ids):
            return self.message[at], self.before[at]
        return self.messages, self.tokens

    def summary(self, change: tuple[str, int] | None) -> dict[str, Any]:
        out: dict[str, Any] = {"messages": self.messages, "tokens": self.tokens}
        if change is not None:
            index, before = self.position(change[1])
            out["change"] = {"kind": change[0], "index": index, "tokens_before": before}
        return out


class Chains:
    """Claude Code / Qwen Code: lines chained by uuid → parentUuid; one instance per file."""

    __slots__ = ("lines", "sent", "dirty")

    def __init__(self) -> None:
        self.lines: dict[str, _Line] = {}
        self.sent: dict[str, Sent] = {}  # stream -> the last request's lines
        self.dirty: set[str] = set()  # lines written again with other content

    def add(self, uuid: str, parent: Any, role: str | None, content: Any = None, boundary: bool = False,
            tool_result: bool = False) -> None:
        digest, tokens = measure(content) if role is not None else (0, 0)
        old = self.lines.get(uuid)
        if old is not None and old.role is not None and old.digest != digest:
            self.dirty.add(uuid)
        self.lines[uuid] = _Line(parent if parent.__class__ is str else None, role, digest, tokens, boundary,
                                 tool_result)

    def request(self, stream: str, parent: Any, cleared: bool = False) -> dict[str, Any]:
        """The history of a request sent with the chain that ends at `parent`, against the stream's last one.
        cleared: the provider cleared old tool results of this very prompt (context editing)."""
        sent = self.sent.get(stream)
        first = sent is None
        if sent is None:
            sent = self.sent[stream] = Sent()
        walked: list[str] = []
        node = parent if parent.__class__ is str else None
        seen: set[str] = set()
        while node is not None and node not in seen and node not in sent.at:
            seen.add(node)
            walked.append(node)
            line = self.lines.get(node)
            node = line.parent if line is not None else None
        keep = sent.at[node] + 1 if node is not None and node in sent.at else 0  # (a loop in the chain: none)
        edited = min((sent.at[u] for u in self.dirty if u in sent.at), default=None)
        self.dirty.clear()
        change = None if first else self._change(len(sent.ids), keep, edited, walked)
        cut = min(keep, edited) if edited is not None else keep
        again = sent.ids[cut:keep]  # kept lines after an edited one: appended again with their new content
        if cut < len(sent.ids):
            sent = self.sent[stream] = self._kept(sent, cut)
        for u in again + walked[::-1]:
            line = self.lines.get(u)
            sent.append(u, line.role if line else None, line.digest if line else 0, line.tokens if line else 0)
        if cleared:  # the oldest tool results go first: the first one in the list is where the prompt changed
            at = next((i for i, u in enumerate(sent.ids) if u in self.lines and self.lines[u].tool_result), None)
            if at is not None and (change is None or change[1] > at):
                change = ("cleared", at)
        return sent.summary(change)

    def _kept(self, sent: Sent, cut: int) -> Sent:
        """The list cut back to its first `cut` lines (counted again from the start: rare, a change)."""
        fresh = Sent()
        for u in sent.ids[:cut]:
            line = self.lines.get(u)
            fresh.append(u, line.role if line else None, line.digest if line else 0, line.tokens if line else 0)
        return fresh

    def _change(self, old_len: int, keep: int, edited: int | None, walked: list[str]) -> tuple[str, int] | None:
        if any(self.lines[u].boundary for u in walked if u in self.lines):
            return "compacted", 0  # a summary replaces the history from its start (Qwen's chain runs on past it)
        if edited is not None and edited < keep:
            return "edited", edited
        if keep == old_len:
            return None  # the previous list is a prefix of this one
        return ("branched" if keep else "restarted"), keep


class Sequence:
    """Codex, Gemini CLI, OpenCode: the conversation as items in order; a request is sent with every item so far.
    Requests of several streams (OpenCode's agents) can share one conversation: each is diffed against the
    last request of its own stream."""

    __slots__ = ("items", "sent")

    def __init__(self) -> None:
        self.items = Sent()  # the conversation now
        self.sent: dict[str, tuple[Sent, int]] = {}  # stream -> the items its last request was sent, how many

    def add(self, role: str, content: Any) -> None:
        digest, tokens = measure(content)
        self.items.append(len(self.items.ids), role, digest, tokens)

    def replace(self, items: list[tuple[str, Any]], kind: str) -> None:
        """The history replaced (`compacted`: a summary) or cut back (`branched`: a rewind). The old items stay
        as they were (a new list), so the last requests' can still be compared."""
        self.items = Sent(replaced=kind)
        for role, content in items:
            self.add(role, content)

    def cut(self, count: int) -> None:
        """The history rewound to its first `count` items."""
        old, self.items = self.items, Sent(replaced="branched")
        for i in range(min(count, len(old.ids))):
            self.items.append(i, old.roles[i], old.digests[i], old.sizes[i])

    def request(self, stream: str = "") -> dict[str, Any]:
        items, sent = self.items, self.sent.get(stream)
        self.sent[stream] = (items, len(items.ids))
        if sent is None or sent[0] is items:
            return items.summary(None)  # only appended since: the last request's items are a prefix
        old = sent[0].digests[:sent[1]]
        keep = 0
        for a, b in zip(old, items.digests):
            if a != b:
                break
            keep += 1
        return items.summary((items.replaced or "branched", keep) if keep < len(old) else None)
