"""Codex CLI sessions: ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl, lines {timestamp, type, payload}.

Quirks:
* One model request = one `event_msg` whose `payload.type == "token_count"`; its `info.last_token_usage`
  is that request's usage: `input_tokens` includes `cached_input_tokens` (OpenAI semantics), and
  `reasoning_output_tokens` is part of `output_tokens`. `info` is null on rate-limit-only updates (skipped).
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
* Older rollouts (no {type, payload} wrapper) carry no token counts: counted as skipped lines.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvprobe.importers.base import (BadCount, Progress, SourceStats, as_str, first_count, iter_lines, loads_line,
                                   time_or_none)
from kvprobe.importers.events import Events
from kvprobe.trace import TraceRecord
from kvprobe.trace.reader import content_key

NAME = "codex"


def default_paths() -> list[Path]:
    home = Path(os.environ.get("CODEX_HOME", "~/.codex")).expanduser()
    return [home / "sessions"] if (home / "sessions").is_dir() else []


def sniff(first: Any) -> bool:
    return isinstance(first, dict) and "payload" in first and "type" in first and "timestamp" in first


def _usage(last: dict[str, Any]) -> dict[str, Any]:
    """Codex token counts in the OpenAI Responses usage shape (what normalize_usage reads); BadCount for a
    count that is none (the line is then a counted skip)."""
    prefix = "last_token_usage."
    return {"input_tokens": first_count(last, "input_tokens", prefix=prefix),
            "input_tokens_details": {"cached_tokens": first_count(last, "cached_input_tokens", prefix=prefix)},
            "output_tokens": first_count(last, "output_tokens", prefix=prefix),
            "output_tokens_details": {"reasoning_tokens": first_count(last, "reasoning_output_tokens", prefix=prefix)},
            "total_tokens": first_count(last, "total_tokens", prefix=prefix)}


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    session = path.stem.removeprefix("rollout-")
    model: str | None = None
    provider = "openai"
    turn = _Turn()
    previous_total: Any = None
    count = 0
    cwd: str | None = None
    events = Events()
    context: dict[str, Any] | None = None
    for lineno, raw in iter_lines(path, progress):
        stats.lines += 1
        line = loads_line(raw, stats, lineno)
        if line is None:
            continue
        if not isinstance(line, dict) or not isinstance(line.get("payload"), dict):
            stats.skip("not a {timestamp, type, payload} line (older rollout format has no token counts)", lineno)
            continue
        kind, payload = line.get("type"), line["payload"]
        stamp = time_or_none(line.get("timestamp"))
        if kind in ("session_meta", "turn_context"):
            cwd = as_str(payload.get("cwd")) or cwd
        if kind == "session_meta":
            session = as_str(payload.get("id")) or session
            model = as_str(payload.get("model")) or model
            provider = _provider(payload.get("model_provider")) or provider
        elif kind == "turn_context":
            model = as_str(payload.get("model")) or model
            context = _settings_event(context, payload, stamp, events)
        if not (kind == "event_msg" and payload.get("type") == "token_count"):
            stats.ignored += 1
            turn.saw(kind, payload, stamp)
            _event_of(kind, payload, stamp, events)
            continue
        info = payload.get("info")
        if not isinstance(info, dict):
            stats.skip("token_count event without info (rate-limit update only)", lineno)
            continue
        last, total = info.get("last_token_usage"), info.get("total_token_usage")
        if not isinstance(last, dict):
            stats.skip("token_count event without last_token_usage", lineno)
            continue
        if total is not None and total == previous_total:
            stats.duplicates += 1
            continue
        try:
            usage = _usage(last)
        except BadCount as exc:
            stats.skip("invalid usage", lineno, str(exc))
            continue
        previous_total = total
        count += 1
        rid = f"{session}#{count}"
        key = content_key(session, raw.strip())  # a turn number is local: the same event copied is the same turn
        if not stats.first_time(key, seen):
            continue
        extra: dict[str, Any] = {"source_format": NAME, **({"cwd": cwd} if cwd else {})}
        events.attach(extra)
        yield TraceRecord(id=rid, provider=provider, started_at=turn.start or stamp,
                          response={"model": model, "usage": usage}, session=session, agent="main",
                          endpoint="/v1/responses", finished_at=stamp, extra=extra,
                          source=str(path), line=lineno, key=key)
        turn.start = None


class _Turn:
    """When the next request was sent: the first line after the previous request ended, unless the session
    went idle (`task_complete`); then the next turn's start (`task_started`, or the user's message)."""

    __slots__ = ("start", "idle")

    def __init__(self) -> None:
        self.start: float | None = None
        self.idle = False

    def saw(self, kind: Any, payload: dict[str, Any], stamp: float | None) -> None:
        ptype = payload.get("type")
        if kind == "event_msg" and ptype == "task_complete":
            self.start, self.idle = None, True
        elif self.idle:
            if _starts_turn(kind, payload):
                self.start, self.idle = stamp, False
        elif self.start is None:
            self.start = stamp


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
    return "local" if value in ("ollama", "lmstudio", "oss") else None
