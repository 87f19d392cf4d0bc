"""OpenCode sessions: ~/.local/share/opencode/ — `opencode.db` (SQLite, OpenCode 1.2 and later: a `message`
table whose `data` column holds each message as JSON) or, before that, one JSON file per message
(`storage/message/<sessionID>/msg_<id>.json`). Kilo Code's CLI, built on OpenCode, keeps the same store as
~/.local/share/kilo/kilo.db: its records are marked `writer = "Kilo Code"` (advised in its own knobs).

Quirks:
* One model call = one `role: "assistant"` message with `tokens` {input, output, reasoning, cache: {read,
  write}}. OpenCode has already taken the cached tokens out of `input`, whatever the provider, and counts
  `reasoning` apart from `output`: reasoning is billed as output, so it is added to it here (and shown apart).
* `providerID` / `modelID` name what served it; Bedrock and Vertex serving Claude (`amazon-bedrock`,
  `google-vertex-anthropic`) are labelled `extra["platform"]`; gateways (OpenRouter and the like) go by the
  model name (`anthropic/claude-…` is Claude).
* `time.created` is when the step started (the request was sent), `time.completed` when it ended (ms epoch).
* Each session is a stream per agent (`build`, `plan`, subagents' own sessions); OpenCode's summaries run as
  the `compaction` agent, and the next request of the session then starts from the summary (an
  `extra["events"]` compaction, kvprobe.importers.events).
* `storage/session`, `storage/part` and other storage files are read as ignored lines, not as errors.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import orjson

from kvprobe.importers.base import (BadCount, Progress, SourceStats, as_str, local_server, read_document,
                                   served_locally, split_usage, time_or_none, token_count)
from kvprobe.importers.events import Events
from kvprobe.importers.formats import OPENCODE_DATABASE as DATABASE, OPENCODE_DATABASES as DATABASES, SNIFFERS
from kvprobe.request.detect import infer_provider
from kvprobe.trace import TraceRecord

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:  # imported where a database is read: every `usage` and `import` run imports this module
    from typing import Any
    import sqlite3

    from kvprobe.importers.history import Sequence

NAME = "opencode"
KILO = "Kilo Code"
SUMMARY_AGENT = "compaction"
_PLATFORMS = {"amazon-bedrock": "bedrock", "google-vertex-anthropic": "vertex", "google-vertex": "vertex"}
_PROVIDERS = {"anthropic": "anthropic", "openai": "openai", "google": "gemini", "deepseek": "deepseek"}


def default_paths() -> list[Path]:
    env = os.environ.get("OPENCODE_DATA_DIR")
    share = Path(os.environ.get("XDG_DATA_HOME", "~/.local/share")).expanduser()
    roots = [Path(p).expanduser() for p in env.split(",") if p] if env else [share / "opencode", share / "kilo"]
    return [r for r in roots if any((r / name).is_file() for name in DATABASES) or (r / "storage" / "message").is_dir()]


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    if path.name in DATABASES:
        records = _records(_database_messages(path, stats), str(path), stats, seen, _database_parts(path))
        if path.name == DATABASE:
            yield from records
            return
        for record in records:  # kilo.db: Kilo Code's CLI, whose knobs are its own (kvprobe.agents: the writer)
            record.extra["writer"] = KILO
            yield record
        return
    message = read_document(path, stats, progress)  # a message file: cut short when OpenCode was killed
    yield from _records([message] if isinstance(message, dict) else [], str(path), stats, seen)


LOCK_WAIT_S = 5.0  # OpenCode writes while it runs: a locked database is waited for this long, then skipped


def _database_messages(path: Path, stats: SourceStats) -> list[dict[str, Any]]:
    """Every message of the database, in the order they were written. A database that cannot be read
    (corrupt, cut short, locked past LOCK_WAIT_S, another program's schema) is one counted skip saying why,
    as an unreadable JSON Lines file is: nothing of it is read, the other logs are."""
    import sqlite3

    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=LOCK_WAIT_S)
        try:
            rows = db.execute("SELECT id, session_id, data FROM message ORDER BY time_created, id").fetchall()
        finally:
            db.close()
    except sqlite3.Error as exc:
        stats.lines += 1
        stats.skip("OpenCode database cannot be read", None, _why(exc))
        return []
    out = []
    for ident, session, data in rows:
        stats.lines += 1
        try:
            message = orjson.loads(data)
        except (orjson.JSONDecodeError, TypeError) as exc:
            stats.skip("message row whose data is not JSON", ident, str(exc))
            continue
        if isinstance(message, dict):
            out.append({**message, "id": message.get("id") or ident, "sessionID": message.get("sessionID") or session})
    return out


def _database_parts(path: Path) -> dict[str, tuple[int, int]] | None:
    """Each message's parts (its text, tool calls and their outputs) as one digest and an estimated size, for
    the rebuilt history (kvprobe.importers.history); None where the database has no readable part table (the
    usage is read all the same)."""
    import sqlite3

    from kvprobe.importers.history import BYTES_PER_TOKEN

    out: dict[str, tuple[int, int]] = {}
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=LOCK_WAIT_S)
        try:
            for message, data in db.execute("SELECT message_id, data FROM part ORDER BY time_created, id"):
                digest, size = out.get(message, (0, 0))
                raw = data if isinstance(data, (str, bytes)) else str(data)
                out[message] = (hash((digest, raw)), size + len(raw) // BYTES_PER_TOKEN)
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return out


def _why(exc: sqlite3.Error) -> str:
    text = str(exc)
    if "no such table" in text or "no such column" in text:
        return f"not OpenCode's schema ({text})"
    if "locked" in text:
        return f"locked by another process for over {LOCK_WAIT_S:g} s ({text})"
    return text


def _records(messages: list[dict[str, Any]], source: str, stats: SourceStats,
             seen: set[str], parts: dict[str, tuple[int, int]] | None = None) -> Iterator[TraceRecord]:
    from kvprobe.importers.history import Sequence  # (here: diff only asks this module about a file's format)

    events: dict[str, Events] = {}
    conversations: dict[str, Sequence] = {}  # per session, when the parts were read
    for message in messages:
        tokens = message.get("tokens")
        conversation = None if parts is None else \
            conversations.setdefault(as_str(message.get("sessionID")) or "-", Sequence())
        if message.get("role") != "assistant" or not isinstance(tokens, dict):
            stats.ignored += 1
            _said(conversation, parts, message)
            continue
        ident = as_str(message.get("id"))
        if ident is None:
            stats.skip("assistant message without an id")
            continue
        session = as_str(message.get("sessionID")) or "-"
        agent = as_str(message.get("agent")) or as_str(message.get("mode")) or "main"
        stream = events.setdefault(session, Events())
        provider = _provider(message)
        try:
            usage = _usage(provider, tokens)  # its counts are counts (BadCount: a counted skip, never a silent 0)
        except BadCount as exc:
            stats.skip("invalid usage", None, str(exc))
            continue
        history = conversation.request(agent) if conversation is not None else None
        if agent == SUMMARY_AGENT and conversation is not None:  # what follows starts from its summary
            conversation.replace([], "compacted")
        _said(conversation, parts, message)
        if not stats.first_time(ident, seen):
            continue
        record = _record(message, provider, usage, ident, session, agent, stream, source)
        if history is not None:
            record.extra["history"] = history
        yield record
        if agent == SUMMARY_AGENT:
            stream.add("compaction", _time(message, "completed"))


def _said(conversation: Sequence | None, parts: dict[str, tuple[int, int]] | None, message: dict[str, Any]) -> None:
    """A message joins its session's conversation with its parts' digest and size."""
    if conversation is None or parts is None:
        return
    digest, size = parts.get(as_str(message.get("id")) or "", (0, 0))
    role = "assistant" if message.get("role") == "assistant" else "user"
    conversation.items.append(len(conversation.items.ids), role, digest, size)


def _provider(message: dict[str, Any]) -> str:
    """What served the message: OpenCode's provider id, else the model name (a gateway's `anthropic/claude-…`)."""
    model = as_str(message.get("modelID"))
    provider_id = (as_str(message.get("providerID")) or "").lower()
    server = local_server(provider_id)
    if server is not None and served_locally(server, model):
        return "local"  # a model Ollama or LM Studio runs on this machine: no per-token bill
    return _PROVIDERS.get(provider_id) or infer_provider({"model": model.split("/")[-1]} if model else None) \
        or "openai"


def _record(message: dict[str, Any], provider: str, usage: dict[str, Any], ident: str, session: str, agent: str,
            stream: Events, source: str) -> TraceRecord:
    model = as_str(message.get("modelID"))
    provider_id = (as_str(message.get("providerID")) or "").lower()
    extra: dict[str, Any] = {"source_format": NAME, "provider_id": provider_id or None}
    platform = _PLATFORMS.get(provider_id) or local_server(provider_id)
    if platform:
        extra["platform"] = platform
    path = message.get("path")
    if isinstance(path, dict) and as_str(path.get("cwd")):
        extra["cwd"] = path["cwd"]
    if isinstance(message.get("cost"), (int, float)) and message["cost"] > 0:
        extra["logged_cost_usd"] = message["cost"]
    if agent != SUMMARY_AGENT:
        stream.attach(extra)
    return TraceRecord(id=ident, provider=provider, started_at=_time(message, "created"),
                       response={"id": ident, "model": model, "usage": usage},
                       session=session, agent=agent, finished_at=_time(message, "completed"),
                       extra={k: v for k, v in extra.items() if v is not None}, source=source)


def _time(message: dict[str, Any], key: str) -> float | None:
    times = message.get("time")
    return time_or_none(times.get(key)) if isinstance(times, dict) else None


def _usage(provider: str, tokens: dict[str, Any]) -> dict[str, Any]:
    cache = tokens.get("cache")
    if cache is None:
        cache = {}
    elif not isinstance(cache, dict):  # `"cache": "x"` is no count of anything: a counted skip, never a 0
        raise BadCount("tokens.cache", cache)
    fresh, read = token_count(tokens.get("input"), "tokens.input"), token_count(cache.get("read"), "tokens.cache.read")
    write = token_count(cache.get("write"), "tokens.cache.write")
    reasoning = token_count(tokens.get("reasoning"), "tokens.reasoning")
    output = token_count(tokens.get("output"), "tokens.output")
    return split_usage(provider, fresh, read, write, output, reasoning)
