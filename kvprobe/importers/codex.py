"""Codex CLI sessions: ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl, lines {timestamp, type, payload}.

Quirks:
* One model request = one `event_msg` whose `payload.type == "token_count"`; its `info.last_token_usage`
  is that request's usage: `input_tokens` includes `cached_input_tokens` (OpenAI semantics) and, from GPT-5.6
  on (whose writes cost 1.25x input), `cache_write_input_tokens`; `reasoning_output_tokens` is part of
  `output_tokens`. `info` is null on rate-limit-only updates (skipped).
* Codex repeats a token_count event when only rate limits change: an event whose `total_token_usage`
  equals the previous one's is a duplicate.
* The model comes from the latest `turn_context` (or `session_meta`); the session id from `session_meta`
  (else the rollout file name). Inside a turn, `started_at` is the first line after the previous request
  ended (the tool outputs it sends); the first request of a turn starts when the user's turn does
  (`task_started`, or the user message): after `task_complete` the session is idle, however long, and the
  lines of the next turn can be written hours later. `finished_at` is the token_count event.
* What happened between two requests travels on the next one as `extra["events"]` (kvprobe.importers.events):
  `compacted` / `context_compacted` (the history was replaced by a summary; the summarising call itself
  logs no usage), `turn_aborted` (an interrupt), and `turn_context` settings that change the prompt
  (reasoning effort, instructions, sandbox and approval policy, working directory).
* Record ids are `<session id>#<turn>`: local, since a resumed session writes a new rollout under the same
  session id. A turn is a duplicate only when its token_count line equals one already read (history copied).
* Forks and subagents (Codex Desktop's explorer agents, `/fork`): the rollout's first `session_meta` names its
  parent (`forked_from_id`, or `source.subagent.thread_spawn.parent_thread_id`), a second `session_meta`
  carries the parent's id, and the parent's history follows, its `token_count` events included, re-stamped at
  the fork time (or, in some versions, with their original times). Those calls were billed once, in the
  parent's rollout: everything from the parent's `session_meta` up to the fork's own first turn is replayed
  history, counted as `SourceStats.replayed` and never read as requests. The fork's own first turn is the
  first `task_started` whose `started_at` (epoch seconds; a replayed one keeps the parent's) is at or after
  the fork's creation, the first `session_meta`'s `timestamp`; a turn start without `started_at` is the fork's
  own when its `turn_id` (a UUIDv7: the time it was made) is not older than the fork (a subagent's first turn
  starts within milliseconds of it), else from a second after its creation on. A `token_count` stamped before
  the fork existed is replayed too.
  The fork's records keep its own session id and carry `extra["forked_from"]`.
* Reasoning items and turns: models before GPT-5.6 use only the current turn's reasoning, so the API drops
  the reasoning items sent before the latest user message (the rule is `reasoning_context` in providers/).
  The first request of a turn carries `extra["history"]["reasoning_dropped"]`: the request whose response
  held the previous turn's first reasoning item, its prompt's size (from its usage: exact), the message that
  item sits at, and whether the item opened that response (then the prompt changes exactly where that
  request's prompt ended). `analysis.rebuilt` compares the read with it.
* Older rollouts (no {type, payload} wrapper) carry no token counts: counted as skipped lines.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from kvprobe.importers.base import (BadCount, Progress, SourceStats, as_str, first_count, iter_raw_objects,
                                   local_server, served_locally, time_or_none)
from kvprobe.importers.events import Events
from kvprobe.importers.formats import SNIFFERS
from kvprobe.request.detect import infer_provider
from kvprobe.trace import TraceRecord

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any
    from kvprobe.importers.history import Sequence
from kvprobe.trace.record import content_key
from kvprobe.trace.validate import MAX_TOKENS

NAME = "codex"


def default_paths() -> list[Path]:
    home = Path(os.environ.get("CODEX_HOME", "~/.codex")).expanduser()
    return [home / "sessions"] if (home / "sessions").is_dir() else []


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


_COUNTS = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens",
           "reasoning_output_tokens", "total_tokens")


def _usage(last: dict[str, Any]) -> dict[str, Any]:
    """Codex token counts in the OpenAI Responses usage shape (what normalize_usage reads); BadCount for a
    count that is none (the line is then a counted skip)."""
    counts = []
    for key in _COUNTS:  # plain counts (or none) as token_count takes them, read inline: this runs per request
        value = last.get(key)
        if value.__class__ is not int or not 0 <= value <= MAX_TOKENS:
            if value is not None:  # anything else read by token_count (a BadCount names the first bad one)
                counts = [first_count(last, name, prefix="last_token_usage.") for name in _COUNTS]
                break
            value = 0
        counts.append(value)
    fresh, cached, written, output, reasoning, total = counts
    return {"input_tokens": fresh, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": total}


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None,
         history: bool = True) -> Iterator[TraceRecord]:
    """Records of one rollout. history=False: no `extra["history"]` and no `extra["events"]` (what `usage` reads
    needs neither; rebuilding each request's items was a fifth of reading a rollout, and a nested `extra` is
    scrubbed of credentials string by string on every record)."""
    from kvprobe.importers.history import Sequence  # (here: diff only asks this module about a file's format)

    state = _State(path.stem.removeprefix("rollout-"))
    turn = _Turn()
    events = Events() if history else None  # (what happened between requests: only a history carries it)
    conversation = Sequence() if history else None  # each request's items, rebuilt (kvprobe.importers.history)
    turns = _Reasoning()
    for lineno, raw, line in iter_raw_objects(path, stats, progress):  # (a line holding two, joined: each)
        payload = line.get("payload")
        if not isinstance(payload, dict):
            stats.skip("not a {timestamp, type, payload} line (older rollout format has no token counts)", lineno)
            continue
        kind = line.get("type")
        # a line's time as written, read as a number only where one is used (most lines are not requests:
        # reading each line's time was a sixth of reading a rollout for `usage`)
        written = line.get("timestamp")
        if conversation is not None:
            _converse(conversation, kind, payload)  # a fork's replayed history is its context too
            turns.saw(kind, payload, conversation)
        if state.fork is not None and state.fork.replayed(kind, payload, time_or_none(written)):
            state.replay(kind, payload, stats)
            turns.replayed(kind, payload)
            continue
        if not (kind == "event_msg" and payload.get("type") == "token_count"):
            stats.ignored += 1
            if events is None:  # (no history: whose session, which model and folder, nothing else)
                if kind == "session_meta" or kind == "turn_context":
                    state.note(kind, payload, time_or_none(written) if kind == "session_meta" else None, events)
            elif kind != "response_item":  # (session_meta, turn_context, events: what is said of the next request)
                stamp = time_or_none(written)
                state.note(kind, payload, stamp, events)
                _event_of(kind, payload, stamp, events)
            if turn.start is None or turn.idle or kind == "event_msg":  # (else a turn under way: nothing to note)
                turn.saw(kind, payload, written)
            continue
        stamp = time_or_none(written)
        usage = _counted_usage(payload, state, stats, lineno)
        if usage is None:
            continue
        state.count += 1
        key = content_key(state.session, raw.strip())  # a turn number is local: the same event copied is the same turn
        if not stats.first_time(key, seen):
            continue
        extra = state.extra(events)
        if conversation is not None:
            extra["history"] = conversation.request()
            turns.request(f"{state.session}#{state.count}", usage, extra["history"])
        yield TraceRecord(id=f"{state.session}#{state.count}", provider=state.provider_of(),
                          started_at=turn.start or stamp, response={"model": state.model, "usage": usage},
                          session=state.session, agent="main", endpoint="/v1/responses", finished_at=stamp,
                          extra=extra, source=str(path), line=lineno, key=key)
        turn.start = None


def _converse(conversation: Sequence, kind: Any, payload: dict[str, Any]) -> None:
    """A response item joins the conversation; a compaction replaces it with its replacement history."""
    if kind == "response_item":
        conversation.add(_role(payload), payload)
    elif kind == "compacted":
        kept = payload.get("replacement_history")
        items = [i for i in kept if isinstance(i, dict)] if isinstance(kept, list) else []
        conversation.replace([(_role(i), i) for i in items], "compacted")


class _Reasoning:
    """Where each turn's reasoning starts: the first request of the turn whose response held a reasoning item
    (its id, its prompt's input tokens, the message the item sits at, whether the item opened the response).
    A user message ends the turn: the next request is sent without that turn's reasoning (models before
    GPT-5.6), and carries where it was."""

    __slots__ = ("window", "opened", "turn", "pending")

    def __init__(self) -> None:
        self.window: dict[str, Any] | None = None  # the response being written: its first reasoning item
        self.opened: bool | None = None  # whether the response's first output item was reasoning
        self.turn: dict[str, Any] | None = None  # the current turn's first reasoning, once a request held one
        self.pending: dict[str, Any] | None = None  # the turn just ended: for the next request

    def saw(self, kind: Any, payload: dict[str, Any], conversation: Sequence) -> None:
        if kind == "compacted":  # the history was replaced: its own change says where
            self.turn = self.pending = self.window = None
            return
        if kind != "response_item":
            return
        role = _role(payload)
        if payload.get("type") == "message" and payload.get("role") == "user":  # a turn (not a developer note)
            if self.turn is not None:
                self.pending = self.turn
            self.turn = None
        elif role == "assistant":
            reasoning = payload.get("type") == "reasoning"
            if self.opened is None:
                self.opened = reasoning
            if reasoning and self.window is None:
                self.window = {"index": conversation.items.message[-1] if conversation.items.message else 0}

    def replayed(self, kind: Any, payload: dict[str, Any]) -> None:
        """A fork's replayed request ends its response: its items are not a request of this rollout."""
        if kind == "event_msg" and payload.get("type") == "token_count":
            self.window, self.opened = None, None

    def request(self, record_id: str, usage: dict[str, Any], history: dict[str, Any]) -> None:
        if self.pending is not None:
            history["reasoning_dropped"] = self.pending
            self.pending = None
        if self.window is not None and self.turn is None:
            self.turn = {"request": record_id, "tokens": usage["input_tokens"], "index": self.window["index"],
                         "opened": bool(self.opened)}
        self.window, self.opened = None, None


def _role(item: dict[str, Any]) -> str:
    """Who an item is from, as the API sees the conversation: the model's output items are the assistant's,
    everything else (messages in, tool outputs) is input."""
    kind = item.get("type")
    if kind == "message":
        return "assistant" if item.get("role") == "assistant" else "user"
    return "user" if isinstance(kind, str) and kind.endswith("_output") else "assistant"


def _counted_usage(payload: dict[str, Any], state: "_State", stats: SourceStats, lineno: int) -> dict[str, Any] | None:
    """The usage of a token_count event that is a request; None (counted by reason) for one that is not: no
    info (a rate-limit update), no last_token_usage, a repeat of the previous totals, or counts that are none."""
    info = payload.get("info")
    if not isinstance(info, dict):
        stats.skip("token_count event without info (rate-limit update only)", lineno)
        return None
    last, total = info.get("last_token_usage"), info.get("total_token_usage")
    if not isinstance(last, dict):
        stats.skip("token_count event without last_token_usage", lineno)
        return None
    if total is not None and total == state.previous_total:
        stats.duplicates += 1
        return None
    try:
        usage = _usage(last)
    except BadCount as exc:
        stats.skip("invalid usage", lineno, str(exc))
        return None
    state.previous_total = total
    return usage


class _State:
    """What a rollout's lines so far say about its next request: whose session, which model and provider, the
    working directory, the settings in force, and (a fork) the parent whose history it replays."""

    __slots__ = ("session", "model", "provider", "server", "cwd", "context", "fork", "meta_seen", "previous_total",
                 "count")

    def __init__(self, session: str) -> None:
        self.session = session
        self.model: str | None = None
        self.provider = "openai"
        self.server: str | None = None  # a local model server (model_provider ollama, oss, lmstudio)
        self.cwd: str | None = None
        self.context: dict[str, Any] | None = None
        self.fork: _Fork | None = None
        self.meta_seen = False
        self.previous_total: Any = None
        self.count = 0

    def note(self, kind: Any, payload: dict[str, Any], stamp: float | None, events: Events | None) -> None:
        """A session_meta (the first one says whose rollout this is; a later one is another session's, copied
        into a fork) or a turn_context (model, working directory, settings: a change of them is an event,
        where events are kept)."""
        if kind == "session_meta" and not self.meta_seen:
            self.meta_seen = True
            self.session = as_str(payload.get("id")) or self.session
            self.model = as_str(payload.get("model")) or self.model
            self.provider = _provider(payload.get("model_provider")) or self.provider
            self.server = local_server(payload.get("model_provider"))
            self.cwd = as_str(payload.get("cwd")) or self.cwd
            self.fork = _Fork.of(payload, stamp)
        elif kind == "turn_context":
            self.model = as_str(payload.get("model")) or self.model
            self.cwd = as_str(payload.get("cwd")) or self.cwd
            if events is not None:
                self.context = _settings_event(self.context, payload, stamp, events)

    def replay(self, kind: Any, payload: dict[str, Any], stats: SourceStats) -> None:
        """A line of the parent's history replayed in a fork: a token count is the parent's request (counted as
        replayed; its totals are where the fork's own counting starts), a turn_context still names the model."""
        if kind == "event_msg" and payload.get("type") == "token_count" and isinstance(payload.get("info"), dict):
            stats.replayed += 1
            self.previous_total = payload["info"].get("total_token_usage", self.previous_total)
        else:
            stats.ignored += 1
        if kind == "turn_context":
            self.model = as_str(payload.get("model")) or self.model

    def provider_of(self) -> str:
        """Whose rules and prices apply: a local server's own models are `local` ($0); a cloud model it
        forwards (Ollama's kimi-k2.5:cloud) is its maker's, from the model name."""
        if self.server is None:
            return self.provider
        if served_locally(self.server, self.model):
            return "local"
        return infer_provider({"model": self.model}) or "openai"

    def extra(self, events: Events | None) -> dict[str, Any]:
        extra: dict[str, Any] = {"source_format": NAME}
        if self.cwd:
            extra["cwd"] = self.cwd
        if self.server is not None:
            extra["platform"] = self.server
        if self.fork is not None:
            extra["forked_from"] = self.fork.parent
        if events is not None:
            events.attach(extra)
        return extra


class _Fork:
    """A forked or subagent rollout: the parent it names, when it was created, and where the replay of the
    parent's history stands (it starts at the parent's session_meta and ends at the fork's own first turn)."""

    __slots__ = ("parent", "created", "replaying")

    def __init__(self, parent: str, created: float | None) -> None:
        self.parent, self.created, self.replaying = parent, created, False

    @classmethod
    def of(cls, meta: dict[str, Any], stamp: float | None) -> "_Fork | None":
        source = meta.get("source")
        spawn = source.get("subagent") if isinstance(source, dict) else None
        spawn = spawn.get("thread_spawn") if isinstance(spawn, dict) else None
        parent = as_str(meta.get("forked_from_id")) or (as_str(spawn.get("parent_thread_id"))
                                                         if isinstance(spawn, dict) else None)
        if parent is None:
            return None
        return cls(parent, time_or_none(meta.get("timestamp")) or stamp)

    def replayed(self, kind: Any, payload: dict[str, Any], stamp: float | None) -> bool:
        if kind == "session_meta" and payload.get("id") == self.parent:
            self.replaying = True
            return True
        ptype = payload.get("type")
        if self.replaying and kind == "event_msg" and ptype == "task_started" and self._own_turn(payload, stamp):
            self.replaying = False
        if self.replaying:
            return True
        # a token count from before the fork existed (replayed with its original time) is the parent's
        return kind == "event_msg" and ptype == "token_count" and None not in (stamp, self.created) and \
            stamp < self.created - 1.0

    def _own_turn(self, payload: dict[str, Any], stamp: float | None) -> bool:
        if self.created is None:
            return True  # nothing to tell the fork's turns from its parent's: its first turn start ends the replay
        started = payload.get("started_at")
        if isinstance(started, (int, float)) and not isinstance(started, bool):
            return started >= int(self.created)  # epoch seconds; a replayed start keeps the parent's time
        made = _uuid7_time(payload.get("turn_id"))
        if made is not None:  # the turn's id was made when it started: a replayed one keeps the parent's
            return made >= self.created - 1.0
        return stamp is not None and stamp >= self.created + 1.0


def _uuid7_time(value: Any) -> float | None:
    """When a UUIDv7 was made (its first 48 bits: milliseconds since the epoch), else None. Codex's turn ids
    are UUIDv7: a subagent's own first turn starts within milliseconds of its fork, where a replayed turn's id
    is as old as the parent's turn."""
    if not isinstance(value, str) or len(value) != 36 or value[14:15] != "7":
        return None
    try:
        return int(value[:8] + value[9:13], 16) / 1000
    except ValueError:
        return None


class _Turn:
    """When the next request was sent: the first line after the previous request ended, unless the session
    went idle (`task_complete`); then the next turn's start (`task_started`, or the user's message)."""

    __slots__ = ("start", "idle")

    def __init__(self) -> None:
        self.start: float | None = None
        self.idle = False

    def saw(self, kind: Any, payload: dict[str, Any], written: Any) -> None:
        """A line that is no request, with its time as written (read as a number only where it starts a turn)."""
        ptype = payload.get("type")
        if kind == "event_msg" and ptype == "task_complete":
            self.start, self.idle = None, True
        elif self.idle:
            if _starts_turn(kind, payload):
                self.start, self.idle = time_or_none(written), False
        elif self.start is None:
            self.start = time_or_none(written)


def _starts_turn(kind: Any, payload: dict[str, Any]) -> bool:
    ptype = payload.get("type")
    if kind == "event_msg":
        return ptype in ("task_started", "user_message")
    return kind == "response_item" and ptype == "message" and payload.get("role") == "user"


# turn_context settings that are part of the prompt (instructions, permissions text) or of the cache identity
# (reasoning effort); a change between two requests is evidence for a miss after it
_PROMPT_SETTINGS = ("effort", "user_instructions", "developer_instructions", "base_instructions",
                    "approval_policy", "sandbox_policy", "cwd", "collaboration_mode", "personality", "summary")


def _settings_event(previous: dict[str, Any] | None, payload: dict[str, Any], stamp: float | None,
                    events: Events) -> dict[str, Any]:
    settings = {k: payload.get(k) for k in _PROMPT_SETTINGS}
    if previous is not None and settings != previous:
        changed = [k for k in _PROMPT_SETTINGS if settings[k] != previous[k]]
        events.add("settings_changed", stamp, settings=changed)
    return settings


def _event_of(kind: Any, payload: dict[str, Any], stamp: float | None, events: Events) -> None:
    ptype = payload.get("type")
    if kind == "compacted" or (kind == "event_msg" and ptype == "context_compacted"):
        events.add("compaction", stamp, once=True)  # Codex writes both lines for one compaction
    elif kind == "event_msg" and ptype == "turn_aborted":
        events.add("interrupt", stamp, reason=as_str(payload.get("reason")))


def _provider(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.lower()
    for name in ("openai", "anthropic", "deepseek", "gemini"):
        if name in value:
            return name
    return None  # a local server (State.server) or a provider kvprobe cannot name: the default stands
