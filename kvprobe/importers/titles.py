"""A session's name as its user knows it, read from the agent's own log: for rows a person recognises.

Claude Code (and Qwen Code, which writes the same lines): the latest `/rename` (`custom-title` lines,
`customTitle`), else the latest title the agent generated (`ai-title`, `aiTitle`), else the latest
`summary` line, else the first prompt the user typed (a slash command as `/name args`). Codex: the first
`user_message` event (the prompt as typed; the `response_item` user messages start with the environment and
AGENTS.md text). Cline: a task's first message (without its <task> tags), an SDK session's manifest title.
Vibe: the first turn's prompt. Other logs have none: callers show the session id.

Only the lines that can hold a title are parsed, found by one search of the memory-mapped file (about
1 GB/s; the first prompt is near the start), and only for the sessions an output names: the terminal
shows a few, the JSON all.
"""
from __future__ import annotations

import mmap
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

TITLE_CHARS = 40  # a title in a table cell: the rest is in --json
# line types that name a session, most authoritative first: type -> its field
_NAMED = {"custom-title": "customTitle", "ai-title": "aiTitle", "summary": "summary"}
# the lines that may name a session or hold the first prompt (Claude Code writes them compactly; a JSON
# writer may put a space after the colon); inside a message's text the quotes are escaped and never match
_NAMED_LINE = re.compile(rb'"type": ?"(custom-title|ai-title|summary)"')
_USER_LINE = re.compile(rb'"type": ?"user"')
_CODEX_PROMPT = re.compile(rb'"user_message"')
_COMMAND = re.compile(r"<command-name>\s*(/?[^<]*?)\s*</command-name>")
_ARGS = re.compile(r"<command-args>\s*([^<]*?)\s*</command-args>")
# commands that name no task (the session's first prompt is the one after them: many sessions start with /clear)
_HOUSEKEEPING = frozenset({"/clear", "/compact", "/resume", "/continue", "/model", "/mcp", "/permissions", "/cost",
                           "/usage", "/status", "/help", "/config", "/context", "/login", "/logout", "/exit"})
_NOT_A_PROMPT = ("<local-command", "Caveat:", "[Request interrupted", "<bash-", "<system-reminder>",
                 "<task-notification>")


def shorten(text: str, limit: int = TITLE_CHARS) -> str:
    """One line of at most `limit` characters, cut at a word with "…" when longer."""
    one = " ".join(text.split())
    if len(one) <= limit:
        return one
    cut = one[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,.;:") + "…"


def _prompt_text(content: object) -> str | None:
    """The text a user typed, from a user line's content (None: a tool result, a meta or command output)."""
    if isinstance(content, list):
        texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type", "text") == "text"]
        content = next((t for t in texts if isinstance(t, str) and t.strip()), None)
    if not isinstance(content, str) or not content.strip():
        return None
    text = content.strip()
    command = _COMMAND.search(text)
    if command:
        args = _ARGS.search(text)
        typed = f"{command.group(1)} {args.group(1) if args else ''}".strip()
        return None if typed in _HOUSEKEEPING or command.group(1) in ("/clear", "/compact") else typed
    return None if text.startswith(_NOT_A_PROMPT) else _HEADING.sub("", text)


_HEADING = re.compile(r"^#{1,6}[ \t]+")  # a prompt pasted as a markdown document ("# Fix: …"): its title, bare


def _line_at(data: mmap.mmap, pos: int) -> tuple[Any, int]:
    """The JSON line holding byte `pos` (None when it does not parse) and where that line starts."""
    start = data.rfind(b"\n", 0, pos) + 1
    end = data.find(b"\n", pos)
    try:
        return orjson.loads(data[start:end if end != -1 else len(data)]), start
    except orjson.JSONDecodeError:
        return None, start


def _first(data: mmap.mmap, pattern: re.Pattern[bytes], pick: Callable[[Any], str | None]) -> str | None:
    """The first line matching `pattern` that `pick` takes a text from (only those lines are parsed)."""
    found = pattern.search(data)
    while found is not None:
        line, _ = _line_at(data, found.start())
        text = pick(line) if isinstance(line, dict) else None
        if text:
            return text
        end = data.find(b"\n", found.end())
        found = pattern.search(data, end) if end != -1 else None
    return None


def _claude_prompt(line: dict) -> str | None:
    if line.get("type") != "user" or line.get("isMeta") or line.get("isSidechain"):
        return None
    message = line.get("message")
    # Claude Code: content; Qwen Code: Gemini-style parts
    return _prompt_text(message.get("content", message.get("parts"))) if isinstance(message, dict) else None


def _claude_title(data: mmap.mmap) -> str | None:
    latest: dict[str, str] = {}
    for found in _NAMED_LINE.finditer(data):  # one pass: the latest line of each kind wins
        kind = found.group(1).decode()
        line, _ = _line_at(data, found.start())
        value = line.get(_NAMED[kind]) if isinstance(line, dict) and line.get("type") == kind else None
        if isinstance(value, str) and value.strip():
            latest[kind] = value
    named = next((latest[kind] for kind in _NAMED if kind in latest), None)
    return named or _first(data, _USER_LINE, _claude_prompt)


def _codex_prompt(line: dict) -> str | None:
    payload = line.get("payload")
    if isinstance(payload, dict) and payload.get("type") == "user_message":
        text = payload.get("message")
        return text if isinstance(text, str) and text.strip() else None
    return None


def _codex_title(data: mmap.mmap) -> str | None:
    return _first(data, _CODEX_PROMPT, _codex_prompt)


_CLINE_TASK = re.compile(r"^\s*<task>\s*(.*?)\s*(?:</task>|$)", re.S)
_CLINE_INPUT = re.compile(r"^\s*<user_input[^>]*>\s*(.*?)\s*(?:</user_input>|$)", re.S)


def _cline_title(path: Path) -> str | None:
    """A Cline task's: its first message (the task as typed); an SDK session's: its manifest's title, else its
    first prompt (without the <user_input> wrapper Cline stores it in)."""
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if isinstance(doc, list):  # ui_messages.json
        first = next((e for e in doc if isinstance(e, dict) and e.get("say") in ("task", "text")), None)
        text = first.get("text") if first else None
        return _bare(text, _CLINE_TASK)
    if not isinstance(doc, dict):
        return None
    manifest = path.parent / (path.name[: -len(".messages.json")] + ".json")
    try:
        meta = orjson.loads(manifest.read_bytes()).get("metadata") or {}
        title = meta.get("title") if isinstance(meta, dict) else None
    except (OSError, orjson.JSONDecodeError, AttributeError):
        title = None
    if isinstance(title, str) and title.strip():
        return title.strip()
    for message in doc.get("messages") or ():
        if isinstance(message, dict) and message.get("role") == "user":
            return _bare(_prompt_text(message.get("content")), _CLINE_INPUT)
    return None


def _bare(text: Any, wrapper: re.Pattern[str]) -> str | None:
    if not isinstance(text, str) or not text.strip():
        return None
    found = wrapper.match(text)
    return (found.group(1) if found else text).strip() or None


def _vibe_prompt(line: dict) -> str | None:
    params = (line.get("payload") or {}).get("params") if isinstance(line.get("payload"), dict) else None
    message = params.get("message") if isinstance(params, dict) else None
    if isinstance(message, list):
        texts = [p.get("text") for p in message if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return next((t for t in texts if t.strip()), None)
    return None


_VIBE_TURN = re.compile(rb'"method": ?"turn/start"')


def _vibe_title(data: mmap.mmap) -> str | None:
    return _first(data, _VIBE_TURN, _vibe_prompt)


def session_title(path: Path) -> str | None:
    """The title of the session logged in `path` (a Claude Code or Qwen Code transcript, a Codex rollout, a
    Cline task or session, a Vibe journal), in full; None for any other log, one without a title, or one that
    cannot be read."""
    from kvprobe.importers import detect_format

    if path.name in ("ui_messages.json", "claude_messages.json") or path.name.endswith(".messages.json"):
        return _cline_title(path) if detect_format(path) == "cline" else None
    if path.suffix == ".json":  # a hook's JSON copy: one line, no title to find (and no sniff needed)
        return None
    try:
        read = _READERS.get(detect_format(path) or "")
        if read is None or not path.stat().st_size:
            return None
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return read(data)
    except (OSError, ValueError):
        return None


_READERS = {"claude_code": _claude_title, "qwen_code": _claude_title, "codex": _codex_title, "vibe": _vibe_title}


class SessionTitles:
    """Sessions' titles, each read from its log the first time it is asked for (a report shows a few; its
    JSON names them all): session -> the files its requests came from."""

    def __init__(self, sources: dict[str, list[str]] | None = None) -> None:
        self._sources = sources or {}
        self._by_file: dict[str, str | None] = {}  # a trace of many sessions is one file: sniffed once
        self._by_session: dict[str, str | None] = {}  # each output asks for each row: found once

    def get(self, session: str, default: str | None = None) -> str | None:
        if session not in self._by_session:
            source = main_transcript(self._sources.get(session, ()))
            if source is not None and source not in self._by_file:
                self._by_file[source] = session_title(Path(source))
            self._by_session[session] = None if source is None else self._by_file[source]
        found = self._by_session[session]
        return found if found is not None else default


def main_transcript(sources: Iterable[str]) -> str | None:
    """Of the files a session's requests came from, the one that holds its title: the main transcript
    (`<session>.jsonl`, the parent of `<session>/subagents/…`), else the first."""
    sources = [s for s in sources if s]
    for source in sources:
        path = Path(source)
        if path.parent.name == "subagents":
            parent = path.parent.parent.with_suffix(".jsonl")
            if parent.is_file():
                return str(parent)
        else:
            return source
    return sources[0] if sources else None
