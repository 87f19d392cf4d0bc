"""Kimi Code CLI sessions: ${KIMI_SHARE_DIR:-~/.kimi}/sessions/<md5 of the work dir>/<session id>/wire.jsonl.

Quirks:
* `wire.jsonl` is the CLI's wire protocol as it ran: a `{"type": "metadata", "protocol_version": ...}` first
  line (absent in the oldest files), then `{"timestamp": <epoch seconds>, "message": {"type", "payload"}}`.
* One model call = one agent step: `StepBegin` ({n}) when it is sent, then a `StatusUpdate` whose `token_usage`
  is {input_other (uncached input), input_cache_read, input_cache_creation, output} and whose `message_id` is
  the provider's response id. StatusUpdates without token_usage (context size, plan mode, MCP status) are
  not requests.
* A subagent's events arrive wrapped in `SubagentEvent` ({agent_id, subagent_type, event}): its records carry
  `agent = "subagent-<agent_id>"` and their own steps.
* `CompactionBegin` and `StepInterrupted` are the events between requests (kvprobe.importers.events).
* The wire names no model (the CLI's config chooses it): records carry none and stay unpriced unless a price
  file names them; the provider is Moonshot, the CLI's own. The session folder's siblings (`context.jsonl`,
  `state.json`, `metadata.json`) hold no usage: read as this format, their lines ignored.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from kvprobe.importers.base import BadCount, Progress, SourceStats, as_str, first_count, iter_objects, time_or_none
from kvprobe.importers.events import Events
from kvprobe.importers.formats import KIMI_WIRE as WIRE, SNIFFERS
from kvprobe.trace import TraceRecord

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

NAME = "kimi_cli"
PROVIDER = "moonshot"


def default_paths() -> list[Path]:
    share = Path(os.environ.get("KIMI_SHARE_DIR") or "~/.kimi").expanduser()
    return [share / "sessions"] if (share / "sessions").is_dir() else []


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


class _Stream:
    """One agent's steps: when the pending step was sent, and the events since the last request."""

    __slots__ = ("sent", "events")

    def __init__(self) -> None:
        self.sent: float | None = None
        self.events = Events()


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    if path.name != WIRE:  # context.jsonl and the rest: conversation and metadata, no usage (not parsed)
        stats.lines += 1
        stats.ignored += 1
        return
    session = path.parent.name
    project = path.parent.parent.name
    streams: dict[str, _Stream] = {}
    for lineno, line in iter_objects(path, stats, progress):
        stamp = time_or_none(line.get("timestamp"))
        message = line.get("message")
        if not isinstance(message, dict):
            stats.ignored += 1  # the metadata line
            continue
        record = _message(message, stamp, "main", streams, stats, lineno)
        if record is None:
            continue
        rid, agent, usage, sent, extra = record
        rid = rid or f"{session}:{agent}:{lineno}"  # a step the wire gave no message id
        if not stats.first_time(rid, seen):
            continue
        extra.update(source_format=NAME, project_hash=project)
        yield TraceRecord(id=rid, provider=PROVIDER, started_at=sent if sent is not None else stamp,
                          response={"id": rid, "model": None, "usage": usage}, session=session, agent=agent,
                          finished_at=stamp, extra=extra, source=str(path), line=lineno)


def _message(message: dict[str, Any], stamp: float | None, agent: str, streams: dict[str, _Stream],
             stats: SourceStats, lineno: int) -> tuple[str | None, str, dict[str, Any], float | None, dict] | None:
    """(response id, agent, usage, sent at, extra) of a message that is a model call's usage; None otherwise."""
    kind, payload = message.get("type"), message.get("payload")
    payload = payload if isinstance(payload, dict) else {}
    if kind == "SubagentEvent":
        inner = payload.get("event")
        sub = as_str(payload.get("agent_id")) or as_str(payload.get("parent_tool_call_id")) or "unknown"
        if isinstance(inner, dict):
            return _message(inner, stamp, f"subagent-{sub}", streams, stats, lineno)
        stats.ignored += 1
        return None
    stream = streams.setdefault(agent, _Stream())
    if kind == "StepBegin":
        stream.sent = stamp
    elif kind == "CompactionBegin":
        stream.events.add("compaction", stamp)
    elif kind == "StepInterrupted":
        stream.events.add("interrupt", stamp)
    usage = payload.get("token_usage") if kind == "StatusUpdate" else None
    if not isinstance(usage, dict):
        stats.ignored += 1
        return None
    try:
        shaped = {"input_tokens": first_count(usage, "input_other"),
                  "cache_read_input_tokens": first_count(usage, "input_cache_read"),
                  "cache_creation_input_tokens": first_count(usage, "input_cache_creation"),
                  "output_tokens": first_count(usage, "output")}
    except BadCount as exc:
        stats.skip("invalid usage", lineno, str(exc))
        return None
    rid = as_str(payload.get("message_id"))
    extra: dict[str, Any] = {}
    stream.events.attach(extra)
    sent, stream.sent = stream.sent, None
    return rid, agent, shaped, sent, extra
