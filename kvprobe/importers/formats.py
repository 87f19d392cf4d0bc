"""Which importer reads a file: each format's test of the first JSON value the file holds, in one table.

`detect_format` reads a bounded prefix (`sniff`) and asks the tests in order; each importer module takes its
own test from here (`sniff = formats.SNIFFERS[NAME]`). This module imports no importer: a command that only
asks what a file is (`diff` of two request bodies, which must not be an agent log) does not load them.
"""
from __future__ import annotations

from pathlib import Path

from kvprobe.importers.sniff import Sniffed, sniff

TYPE_CHECKING = False  # (typing is not imported on `diff`'s path: ~2 ms of its start)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

OPENCODE_DATABASE = "opencode.db"  # OpenCode's SQLite store: no JSON to sniff
OPENCODE_DATABASES = (OPENCODE_DATABASE, "kilo.db")  # Kilo Code's CLI (built on OpenCode) keeps the same store
KIMI_WIRE = "wire.jsonl"
KIMI_SIDE_FILES = ("context.jsonl", "state.json", "metadata.json")  # beside wire.jsonl: no usage in them
COPILOT_SIDE_FILES = ("config.json", "command-history-state.json", "mcp-config.json")  # beside session-state/
QWEN_SIDE_FILES = ("meta.json", "extract-cursor.json")  # a Qwen Code project folder's, beside chats/: no usage
CLINE_UI_FILES = ("ui_messages.json", "claude_messages.json")  # a Cline task folder's log (the oldest name second)
# beside it: the conversation sent, the task's metadata, the context manager's state (no usage in them)
CLINE_SIDE_FILES = ("api_conversation_history.json", "task_metadata.json", "context_history.json")
CLINE_SDK_SUFFIX = ".messages.json"
VIBE_JOURNAL = "journal"  # a Mistral Vibe session folder's journal/<generation>.jsonl; its state files beside
OPENHANDS_STATE = "base_state.json"  # an OpenHands conversation's state; its events/event-*.json beside it

# Line types only Claude Code writes that carry no session id or chain (a transcript can start with, or be, one:
# a session teleported from the web is a one-line `teleported-from` stub until its history arrives)
_CLAUDE_OWN_LINE_TYPES = ("file-history-snapshot", "teleported-from", "pr-link", "custom-title", "agent-name",
                          "last-prompt", "api-request-route")
_QWEN_SYSTEM_SUBTYPES = ("chat_compression", "notification", "background_task_completed", "slash_command",
                         "session_model", "ui_telemetry", "session_source", "custom_title", "at_command")
_COPILOT_KINDS = ("span", "metric", "log")


def _har(first: Any) -> bool:
    return isinstance(first, dict) and isinstance(first.get("log"), dict)


def _otel(first: Any) -> bool:
    return isinstance(first, dict) and ("resourceSpans" in first or "resource_spans" in first)


def _gemini_cli(first: Any) -> bool:
    return isinstance(first, dict) and "sessionId" in first and "projectHash" in first


def _qwen_code(first: Any) -> bool:
    """A Qwen Code record: Claude Code's chaining keys, but Gemini-shaped content or Qwen's own payloads."""
    if not isinstance(first, dict) or "sessionId" not in first or "uuid" not in first:
        return False
    message = first.get("message")
    return (isinstance(message, dict) and "parts" in message) or "usageMetadata" in first or \
        "systemPayload" in first or first.get("subtype") in _QWEN_SYSTEM_SUBTYPES


def _opencode(first: Any) -> bool:
    """A storage file of OpenCode's: a message, a part or a session (ids carry OpenCode's prefixes)."""
    if not isinstance(first, dict):
        return False
    ident = first.get("id")
    return isinstance(ident, str) and ident.startswith(("msg_", "prt_", "ses_")) and \
        ("sessionID" in first or "projectID" in first)


def _claude_code(first: Any) -> bool:
    if not isinstance(first, dict):
        return False
    keys = first.keys()
    return ("sessionId" in keys and ("uuid" in keys or "type" in keys)) or "parentUuid" in keys or \
        ("leafUuid" in keys and first.get("type") == "summary") or first.get("type") in _CLAUDE_OWN_LINE_TYPES


def _codex(first: Any) -> bool:
    return isinstance(first, dict) and "payload" in first and "type" in first and "timestamp" in first


def _litellm(first: Any) -> bool:
    if not isinstance(first, dict):
        return False
    if isinstance(first.get("standard_logging_object"), dict):
        return True
    return ("call_type" in first and ("startTime" in first or "response_cost" in first)) or \
        ("request_id" in first and "spend" in first)


def _kimi_cli(first: Any) -> bool:
    if not isinstance(first, dict):
        return False
    if first.get("type") == "metadata" and "protocol_version" in first:
        return True
    message = first.get("message")
    return isinstance(first.get("timestamp"), (int, float)) and isinstance(message, dict) \
        and isinstance(message.get("type"), str) and isinstance(message.get("payload"), dict)


def _vibe(first: Any) -> bool:
    """A record of a Mistral Vibe session's recovery journal."""
    return isinstance(first, dict) and "recovery_journal_record_version" in first and "payload" in first


def _openhands(first: Any) -> bool:
    """An OpenHands conversation's base_state.json: {id, agent, workspace, persistence_dir, ..., stats}."""
    return isinstance(first, dict) and "persistence_dir" in first and "agent" in first and "workspace" in first


def _cline(first: Any) -> bool:
    """A Cline SDK session ({version, sessionId, agent, messages}); a task folder's ui_messages.json is an array
    (`_cline_entry`)."""
    return isinstance(first, dict) and "sessionId" in first and "version" in first and \
        isinstance(first.get("messages"), list) and "projectHash" not in first


def _cline_entry(first: Any) -> bool:
    """The first entry of a Cline task's ui_messages.json: {ts, type: say | ask, say | ask, text}."""
    return isinstance(first, dict) and isinstance(first.get("ts"), int) and first.get("type") in ("say", "ask") \
        and ("say" in first or "ask" in first)


def _copilot_cli(first: Any) -> bool:
    if not isinstance(first, dict):
        return False
    kind = first.get("type")
    if isinstance(kind, str) and kind.startswith("session.") and isinstance(first.get("data"), dict) \
            and "parentId" in first:
        return True  # a session file's event
    if not isinstance(first.get("attributes"), dict | None):
        return False
    return (kind in _COPILOT_KINDS and ("spanId" in first or "name" in first)) or \
        ("hrTime" in first and "attributes" in first)


# In the order they are asked (after HAR and OTLP, whose keys no other format has): Qwen's lines look like
# Claude's, so Qwen is asked first.
SNIFFERS: dict[str, Callable[[Any], bool]] = {
    "har": _har, "otel": _otel, "gemini_cli": _gemini_cli, "qwen_code": _qwen_code, "opencode": _opencode,
    "cline": _cline, "openhands": _openhands, "vibe": _vibe, "claude_code": _claude_code, "codex": _codex, "litellm": _litellm, "kimi_cli": _kimi_cli,
    "copilot_cli": _copilot_cli}


def is_kvprobe(first: Any) -> bool:
    """A record of kvprobe's own trace format."""
    if not isinstance(first, dict):
        return False
    return "kvprobe" in first or ("id" in first and ("request" in first or isinstance(first.get("response"), dict)))


def kimi_side_file(path: Path) -> bool:
    """A file of a Kimi session folder that holds no usage (read as that format: nothing skipped)."""
    return path.name in KIMI_SIDE_FILES and (path.parent / KIMI_WIRE).is_file()


def copilot_side_file(path: Path) -> bool:
    """A file of the Copilot folder that holds no usage (read as that format: nothing skipped)."""
    return path.name in COPILOT_SIDE_FILES and (path.parent / "session-state").is_dir()


def cline_side_file(path: Path) -> bool:
    """A file of a Cline task folder or SDK session that holds no usage: the conversation and metadata beside
    ui_messages.json, a session's manifest (`<id>.json`), compaction state and hook log beside its messages."""
    if path.name in CLINE_SIDE_FILES:
        return any((path.parent / name).is_file() for name in CLINE_UI_FILES)
    stem = path.parent.name
    return path.name in (f"{stem}.json", f"{stem}.compaction.json", "hooks.jsonl") and \
        (path.parent / f"{stem}{CLINE_SDK_SUFFIX}").is_file()


def openhands_side_file(path: Path) -> bool:
    """An event of an OpenHands conversation (events/event-*.json beside its base_state.json): no usage."""
    return path.parent.name == "events" and path.name.startswith("event-") and \
        (path.parent.parent / OPENHANDS_STATE).is_file()


def vibe_file(path: Path) -> bool:
    """A file of a Vibe session folder: its journal (a generation not yet written is empty: nothing to sniff) or
    its state (meta.json, chunks/, generations/<n>/: no usage); or a plugin's manifest under logs/session."""
    parts = path.parts
    # (asked of every file a folder holds: only a path with Vibe's folder names costs a look at the disk)
    if "unified" in parts[-5:-1] or VIBE_JOURNAL in parts[-2:-1]:
        for folder in (path.parent, path.parent.parent, path.parent.parent.parent):
            if (folder / VIBE_JOURNAL).is_dir() and (folder / "meta.json").is_file():
                return True
    return "plugins" in parts and parts.index("plugins") >= 2 and parts[parts.index("plugins") - 1] == "session"


def opencode_side_file(path: Path) -> bool:
    """A file of OpenCode's (or Kilo's) storage/ folder beside its database (session diffs and the like): no
    usage of its own (the database has every message)."""
    parts = path.parts
    if "storage" not in parts[-4:-1]:
        return False
    root = Path(*parts[:len(parts) - 1 - parts[::-1].index("storage")])
    return any((root / name).is_file() for name in OPENCODE_DATABASES)


def qwen_side_file(path: Path) -> bool:
    """A Qwen Code project folder's own state (its memory extractor's cursor, its metadata), beside chats/."""
    return path.name in QWEN_SIDE_FILES and (path.parent / "chats").is_dir() and path.parent.parent.name == "projects"


# an agent's home folder: the .json files directly in it are its settings and state (settings.json,
# projects.json, trustedFolders.json, …), never its logs: read as its format, ignored, not "no known format"
_AGENT_HOMES = {".claude": "claude_code", ".codex": "codex", ".gemini": "gemini_cli", ".qwen": "qwen_code",
                ".kimi": "kimi_cli", ".cline": "cline", ".vibe": "vibe", ".openhands": "openhands"}


def _agent_home_format(path: Path) -> str | None:
    return _AGENT_HOMES.get(path.parent.name, "claude_code") if agent_home_file(path) else None


def side_format(path: Path) -> str | None:
    """The format whose folder holds this file of settings or conversation without usage (a Kimi session's
    context.jsonl, Copilot's config.json, a Cline task's api_conversation_history.json): read as that format,
    so a named folder skips none of them."""
    for test, fmt in _SIDE_FILES:
        if test(path):
            return fmt
    return _agent_home_format(path)


# each format's test of a file beside its logs, in the order they are asked
_SIDE_FILES = ((kimi_side_file, "kimi_cli"), (copilot_side_file, "copilot_cli"), (cline_side_file, "cline"),
               (openhands_side_file, "openhands"), (vibe_file, "vibe"), (opencode_side_file, "opencode"),
               (qwen_side_file, "qwen_code"))


def agent_home_file(path: Path) -> bool:
    """A .json file directly in an agent's home folder (~/.gemini/settings.json): its settings, no log; or a
    Claude Code subagent's description beside its transcript (subagents/agent-<id>.meta.json)."""
    if path.name.endswith(".meta.json") and path.parent.name == "subagents":
        return path.with_name(path.name[: -len(".meta.json")] + ".jsonl").is_file()
    return path.suffix == ".json" and path.parent.name in _AGENT_HOMES


def format_of(sniffed: Sniffed) -> str | None:
    """The format of a file whose bounded prefix showed this: an importer's name, "kvprobe", or None."""
    first = sniffed.value
    if sniffed.array:  # Claude Code's lines as a transcript hook writes them (logs/chat.json); a Cline task's log
        return "claude_code" if _claude_code(first) else "cline" if _cline_entry(first) else None
    for name, test in SNIFFERS.items():
        if test(first):
            return name
    return "kvprobe" if is_kvprobe(first) else None


def detect_format(path: str | Path) -> str | None:
    """kvprobe | har | claude_code | codex | gemini_cli | qwen_code | opencode | cline | openhands | vibe |
    otel | litellm | kimi_cli | copilot_cli, or None when no importer knows the file (sniffed from a bounded prefix: importers.sniff)."""
    path = Path(path)
    if path.name in OPENCODE_DATABASES:
        return "opencode"
    side = side_format(path)
    return side if side is not None else format_of(sniff(path))


def agent_log(path: str | Path) -> str | None:
    """The importer format of a file that is not a kvprobe trace (an agent log, HAR, spans), else None."""
    path = Path(path)
    kind = detect_format(path) if path.is_file() else None
    return kind if kind in SNIFFERS else None
