"""A session's name as its user knows it, read from the agent's own log: for rows a person recognises.

Claude Code (and Qwen Code, which writes the same lines): the latest `/rename` (`custom-title` lines,
`customTitle`), else the latest title the agent generated (`ai-title`, `aiTitle`), else the latest
`summary` line, else the first prompt the user typed (a slash command as `/name args`). Codex: the first
`user_message` event (the prompt as typed; the `response_item` user messages start with the environment and
AGENTS.md text). Other logs have none: callers show the session id.

Only the lines that can hold a title are parsed (a substring test first), so a long transcript is read at
the speed of a byte scan.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import orjson

TITLE_CHARS = 40  # a title in a table cell: the rest is in --json
_NAMED = ((b'"custom-title"', "customTitle"), (b'"ai-title"', "aiTitle"), (b'"summary"', "summary"))
_COMMAND = re.compile(r"<command-name>\s*(/?[^<]*?)\s*</command-name>")
_ARGS = re.compile(r"<command-args>\s*([^<]*?)\s*</command-args>")
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
        return f"{command.group(1)} {args.group(1) if args else ''}".strip()
    return None if text.startswith(_NOT_A_PROMPT) else text


def _claude_title(lines: Iterable[bytes]) -> str | None:
    named: dict[str, str] = {}
    first: str | None = None
    for raw in lines:
        wanted = [(key, field) for key, field in _NAMED if key in raw]
        user = first is None and b'"user"' in raw
        if not wanted and not user:
            continue
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(line, dict):
            continue
        for _, field in wanted:
            value = line.get(field)
            if isinstance(value, str) and value.strip() and line.get("type") in ("custom-title", "ai-title", "summary"):
                named[field] = value  # the latest of each kind wins
        if user and line.get("type") == "user" and not line.get("isMeta") and not line.get("isSidechain"):
            message = line.get("message")
            # Claude Code: content; Qwen Code: Gemini-style parts
            first = _prompt_text(message.get("content", message.get("parts"))) if isinstance(message, dict) else None
    return next((named[f] for _, f in _NAMED if f in named), first)


def _codex_title(lines: Iterable[bytes]) -> str | None:
    for raw in lines:
        if b'"user_message"' not in raw:
            continue
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        payload = line.get("payload") if isinstance(line, dict) else None
        if isinstance(payload, dict) and payload.get("type") == "user_message":
            text = payload.get("message")
            if isinstance(text, str) and text.strip():
                return text
    return None


def session_title(path: Path) -> str | None:
    """The title of the session logged in `path` (a Claude Code or Qwen Code transcript, a Codex rollout), in
    full; None for any other log, one without a title, or one that cannot be read."""
    from kvprobe.importers import detect_format

    try:
        read = _READERS.get(detect_format(path) or "")
        if read is None or path.suffix == ".json":  # (a hook's JSON copy of a transcript: one line)
            return None
        with open(path, "rb") as fh:
            return read(fh)
    except (OSError, ValueError):
        return None


_READERS = {"claude_code": _claude_title, "qwen_code": _claude_title, "codex": _codex_title}


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
