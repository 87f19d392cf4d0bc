"""Gemini CLI sessions: ~/.gemini/tmp/<project hash>/chats/session-<time>-<id>.json(l).

Quirks:
* Two formats. Older versions write one JSON document per session ({sessionId, projectHash, startTime,
  lastUpdated, messages: [...]}), rewritten as it grows. Newer ones append JSON Lines: a metadata line
  ({sessionId, projectHash, startTime, ...}), message records, `{"$set": {...}}` metadata updates (which can
  carry the whole `messages` list again) and `{"$rewindTo": id}` marks. A message is written again each time
  it changes (its tokens arrive after its tool calls): the last version of each id wins, at the time it was
  first written (a resumed session lists its whole history again, stamped with the resume's time).
* One model call = one message of `type: "gemini"` with `tokens` {input (promptTokenCount, cached tokens
  included), output (candidatesTokenCount), cached (cachedContentTokenCount), thoughts (thoughtsTokenCount,
  billed as output), tool (toolUsePromptTokenCount, input the prompt count leaves out), total}. Messages
  without tokens (user turns, info lines, a response still streaming) are not requests.
* A rewound message was still a billed call: it is kept.
* Only the response is timed: `started_at` is the previous message's time (or its last tool call's), the
  moment the request could be sent; `finished_at` the message's own timestamp.
* Subagents (newer versions) write `<parent session id>/<session id>.jsonl` beside the chats: their records
  carry `agent = "subagent-<id8>"`.
* No working directory is logged, only its SHA-256 (`projectHash`, the hash folder's name): the project is
  the directory with that hash among the ancestors of the absolute paths the session's tool calls name or
  report (`extra["cwd"]`, `project_directory`); a session that names none is its hash folder's project.
"""
from __future__ import annotations

import ntpath
import os
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path

import orjson

from kvprobe.importers.base import BadCount, Progress, SourceStats, as_str, first_count, iter_objects, time_or_none
from kvprobe.importers.formats import SNIFFERS
from kvprobe.trace import TraceRecord

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any
    from kvprobe.importers.history import Sequence

NAME = "gemini_cli"
ENDPOINT = "/v1beta/models:generateContent"


def default_paths() -> list[Path]:
    env = os.environ.get("GEMINI_DATA_DIR")
    roots = [Path(p).expanduser() for p in env.split(",") if p] if env else [Path("~/.gemini/tmp").expanduser()]
    return [r for r in roots if r.is_dir()]


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


def usage_metadata(tokens: dict[str, Any]) -> dict[str, Any]:
    """Gemini CLI's token summary as the API's usageMetadata (what normalize_usage reads); BadCount for a
    count that is none (the message is then a counted skip)."""
    prefix = "tokens."
    return {"promptTokenCount": first_count(tokens, "input", prefix=prefix),
            "cachedContentTokenCount": first_count(tokens, "cached", prefix=prefix),
            "candidatesTokenCount": first_count(tokens, "output", prefix=prefix),
            "thoughtsTokenCount": first_count(tokens, "thoughts", prefix=prefix),
            "toolUsePromptTokenCount": first_count(tokens, "tool", prefix=prefix),
            "totalTokenCount": first_count(tokens, "total", prefix=prefix)}


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    from kvprobe.importers.history import Sequence  # (here: diff only asks this module about a file's format)

    meta, messages = _document(path, stats, progress)
    session = as_str(meta.get("sessionId")) or path.stem
    project = as_str(meta.get("projectHash"))
    where = {"project_hash": project}
    if (directory := project_directory(project, messages)) is not None:
        where["cwd"] = directory
    agent = f"subagent-{path.stem[:8]}" if meta.get("kind") == "subagent" else "main"
    previous: float | None = time_or_none(meta.get("startTime"))
    conversation, places = Sequence(), {}  # each request's turns, rebuilt (kvprobe.importers.history)
    for message in messages:
        if message.get("type") == _REWIND:
            at = places.get(message.get("to"))
            if at is not None:
                conversation.cut(at)
            continue
        stamp = time_or_none(message.get("timestamp"))
        tokens = message.get("tokens")
        if message.get("type") != "gemini" or not isinstance(tokens, dict):
            stats.ignored += 1
            previous = _last_time(message, stamp) or previous
            _turn(conversation, places, message)
            continue
        rid = f"{session}:{message['id']}"
        try:
            usage = usage_metadata(tokens)
        except BadCount as exc:
            stats.skip("invalid usage", message.get("_line"), str(exc))
            previous = _last_time(message, stamp) or previous
            continue
        history = conversation.request()
        _turn(conversation, places, message)
        if stats.first_time(rid, seen):
            model = as_str(message.get("model"))
            yield TraceRecord(id=rid, provider="gemini", started_at=previous if previous is not None else stamp,
                              response={"id": message["id"], "model": model, "usageMetadata": usage},
                              session=session, agent=agent, endpoint=ENDPOINT, finished_at=stamp,
                              extra={"source_format": NAME, **where, "history": history},
                              source=str(path), line=message.get("_line"))
        previous = _last_time(message, stamp) or previous


# An absolute path in a tool call's arguments or result: POSIX, or a Windows drive's (Gemini CLI hashes the
# directory as the system writes it)
_ABSOLUTE = re.compile(r"(?:/|[A-Za-z]:\\)[^\s\"'`<>|;,()]*")
SCANNED_CHARS = 1 << 18  # of a session's tool call texts looked through for paths: the cost stays bounded


def project_directory(project_hash: str | None, messages: list[dict[str, Any]]) -> str | None:
    """The working directory whose SHA-256 is `project_hash`: an ancestor of an absolute path the session's tool
    calls name (`file_path`, `absolute_path`, `directory`) or report ("wrote to new file: /home/…"). None when
    none of them is under it."""
    if not project_hash or len(project_hash) != 64:
        return None
    import hashlib

    tried: set[str] = set()
    budget = SCANNED_CHARS
    for text in _tool_texts(messages):
        for found in _ABSOLUTE.finditer(text[:budget]):
            step = ntpath if found.group()[1:2] == ":" else posixpath
            directory = found.group().rstrip(".:/\\") or found.group()
            while directory not in tried:
                tried.add(directory)
                if hashlib.sha256(directory.encode()).hexdigest() == project_hash:
                    return directory
                directory = step.dirname(directory)
        budget -= len(text)
        if budget <= 0:
            return None
    return None


def _tool_texts(messages: list[dict[str, Any]]) -> Iterator[str]:
    """Every string in the messages' tool calls (their arguments and results), depth first."""
    stack: list[Any] = [m.get("toolCalls") for m in reversed(messages) if m.get("toolCalls")]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list):
            stack.extend(reversed(value))


_REWIND = "$rewind"  # a `{"$rewindTo": id}` mark, kept in order among the messages
_SENT_TYPES = ("user", "gemini")  # info, error and warning lines are shown to the user only


def _turn(conversation: Sequence, places: dict[str, int], message: dict[str, Any]) -> None:
    """A user turn or a model turn (its tool calls and their results included) joins the conversation."""
    kind = message.get("type")
    if kind in _SENT_TYPES:
        places[message["id"]] = len(conversation.items.ids)
        conversation.add("user" if kind == "user" else "assistant",
                         [message.get("content"), message.get("toolCalls")])


def _last_time(message: dict[str, Any], stamp: float | None) -> float | None:
    """When a message was done: its last tool call's time, else its own."""
    calls = message.get("toolCalls")
    times = [time_or_none(c.get("timestamp")) for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    times = [t for t in times if t is not None]
    return max(times + ([stamp] if stamp is not None else [])) if times or stamp is not None else None


def _document(path: Path, stats: SourceStats, progress: Progress | None) -> tuple[dict[str, Any], list[dict]]:
    """(metadata, messages in order, last version of each) of either format."""
    # a JSON Lines session is read once, line by line: not whole first, only to fail as one document
    data = b"" if _lines_file(path) else path.read_bytes()
    try:
        whole = orjson.loads(data)
    except orjson.JSONDecodeError:
        whole = None
    if isinstance(whole, dict) and isinstance(whole.get("messages"), list):  # the older single document
        if progress is not None:
            progress(len(data))
        stats.lines += 1
        return whole, [m for m in whole["messages"] if _is_message(m, stats)]
    meta: dict[str, Any] = {}
    messages: dict[str, dict] = {}
    for lineno, record in iter_objects(path, stats, progress):
        if "$set" in record:
            _update(record["$set"], meta, messages, lineno, stats)
        elif "$rewindTo" in record:
            stats.ignored += 1  # the rewound calls were billed all the same; the history goes back
            if isinstance(record["$rewindTo"], str):
                messages[f"{_REWIND}:{lineno}"] = {"id": f"{_REWIND}:{lineno}", "type": _REWIND,
                                                   "to": record["$rewindTo"], "_line": lineno}
        elif "id" in record:
            _keep(messages, record, lineno, stats)
        elif "sessionId" in record:
            stats.ignored += 1  # the session's metadata: no request
            meta.update(record)
        else:
            stats.skip("line is neither a message, metadata nor an update", lineno)
    return meta, list(messages.values())


def _update(update: Any, meta: dict[str, Any], messages: dict[str, dict], lineno: int, stats: SourceStats) -> None:
    """A `{"$set": {...}}` line: metadata, and possibly the whole message list again. Anything else in it (a
    `$set` that is no object, a `messages` that is no list) is a counted skip, the rest of the file read."""
    if not isinstance(update, dict):
        stats.skip("metadata update ($set) is not an object", lineno)
        return
    listed = update.get("messages")
    if listed is not None and not isinstance(listed, list):
        stats.skip("metadata update ($set) whose messages is not a list", lineno)
    elif listed:
        for m in listed:
            _keep(messages, m, lineno, stats)
    else:
        stats.ignored += 1
    meta.update({k: v for k, v in update.items() if k != "messages"})


def _lines_file(path: Path) -> bool:
    """True when the first non-blank line is an object without a `messages` list: JSON Lines, read once, line
    by line (a whole document starting with that line could only be that object, which reads the same)."""
    with path.open("rb") as fh:
        for raw in fh:
            if raw.isspace():
                continue
            try:
                first = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return False  # a pretty-printed document (or a broken line): read whole, as it always was
            return isinstance(first, dict) and not isinstance(first.get("messages"), list)
    return False


def _keep(messages: dict[str, dict], record: Any, lineno: int, stats: SourceStats) -> None:
    if not _is_message(record, stats, lineno):
        return
    old = messages.get(record["id"])
    if old is not None:
        stats.duplicates += 1
        if isinstance(old.get("tokens"), dict) and not isinstance(record.get("tokens"), dict):
            return  # a later copy without tokens (a history rewrite) keeps the counts already logged
        first, again = time_or_none(old.get("timestamp")), time_or_none(record.get("timestamp"))
        if first is not None and (again is None or first < again):
            # a resumed session writes its whole history again, each message stamped with the resume's time:
            # a message was sent when it was first written
            record = {**record, "timestamp": old["timestamp"]}
    messages[record["id"]] = {**record, "_line": lineno}


def _is_message(record: Any, stats: SourceStats, lineno: int | None = None) -> bool:
    if isinstance(record, dict) and isinstance(record.get("id"), str) and record["id"]:
        return True
    stats.skip("message without a string id", lineno)
    return False
