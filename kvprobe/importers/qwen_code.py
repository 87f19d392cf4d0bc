"""Qwen Code sessions: ~/.qwen/projects/<cwd with / as ->/chats/<sessionId>.jsonl.

Quirks:
* One JSON record per line, chained by `uuid` / `parentUuid` (as Claude Code), typed `user`, `assistant`,
  `tool_result` or `system`. An assistant record with `usageMetadata` is one model call; its usage is in the
  Gemini API's shape whatever served it: `promptTokenCount` includes `cachedContentTokenCount` (Qwen Code
  adds the cached tokens in when it converts an OpenAI or Anthropic response), `thoughtsTokenCount` is output.
* Qwen Code talks to DashScope, OpenRouter, OpenAI or Anthropic: the provider comes from the model name, and
  is `openai` (the OpenAI-compatible API) for models no provider rule file lists, such as `qwen3-coder-*`.
* `started_at` is the time of the record the response answers (`parentUuid`), `finished_at` its own.
* Subagent records carry `isSidechain` and `agentId`: `agent = "agent-<id>"`. Managed subagents (the
  auto-memory extractor) write no assistant record: their calls are read from the `ui_telemetry`
  `qwen-code.api_response` events that name a `subagent_id` (`agent = "subagent-<id>"`).
* System records are the events between requests (kvprobe.importers.events): `chat_compression`
  (info.originalTokenCount), `notification` / `background_task_completed`, `slash_command` (an `/mcp`
  command changes the tool list).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from kvprobe.importers.base import Progress, SourceStats, as_int, as_str, iter_objects, time_or_none
from kvprobe.importers.claude_code import EXTRA_FIELDS
from kvprobe.importers.events import Events
from kvprobe.importers.formats import QWEN_SIDE_FILES, SNIFFERS
from kvprobe.request.detect import infer_provider
from kvprobe.trace import TraceRecord

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any
    from kvprobe.importers.history import Chains

NAME = "qwen_code"


def default_paths() -> list[Path]:
    env = os.environ.get("QWEN_DATA_DIR")
    roots = [Path(p).expanduser() for p in env.split(",") if p] if env else [Path("~/.qwen").expanduser()]
    return [r / "projects" for r in roots if (r / "projects").is_dir()]


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    from kvprobe.importers.history import Chains  # (here: diff only asks this module about a file's format)

    if path.name in QWEN_SIDE_FILES:  # the project folder's own state (formats.qwen_side_file): no usage
        stats.lines += 1
        stats.ignored += 1
        return
    times: dict[str, Any] = {}
    events: dict[str, Events] = {}
    chains = Chains()  # each request's message list, rebuilt (kvprobe.importers.history)
    for lineno, line in iter_objects(path, stats, progress):
        uuid = as_str(line.get("uuid"))
        if uuid:
            times[uuid] = line.get("timestamp")
        agent = f"agent-{line['agentId']}" if line.get("isSidechain") and as_str(line.get("agentId")) else "main"
        stream = events.setdefault(agent, Events())
        usage = line.get("usageMetadata")
        if line.get("type") != "assistant" or not isinstance(usage, dict):
            side = _side_call(line, path, lineno)
            if side is not None:  # a managed subagent's call: logged only as its telemetry
                if stats.first_time(side.id, seen):
                    yield side
                continue
            stats.ignored += 1
            if line.get("type") == "system":
                _event(line, stream)
            if uuid:
                _chain(chains, uuid, line)
            continue
        if not uuid:
            stats.skip("assistant record without a uuid", lineno)
            continue
        if not stats.first_time(uuid, seen):
            continue
        model = as_str(line.get("model"))
        parent = as_str(line.get("parentUuid"))
        stamp = time_or_none(line.get("timestamp"))
        started = time_or_none(times.get(parent)) if parent else None
        extra: dict[str, Any] = {"source_format": NAME}
        for src, dst in EXTRA_FIELDS:
            if as_str(line.get(src)):
                extra[dst] = line[src]
        stream.attach(extra)
        extra["history"] = chains.request(agent, parent)
        _chain(chains, uuid, line)
        yield TraceRecord(id=uuid, provider=infer_provider({"model": model} if model else None) or "openai",
                          started_at=started if started is not None else stamp,
                          response={"model": model, "usageMetadata": dict(usage)},
                          session=as_str(line.get("sessionId")) or path.stem, agent=agent, finished_at=stamp,
                          extra=extra, source=str(path), line=lineno)


_API_RESPONSE = "qwen-code.api_response"


def _side_call(line: dict[str, Any], path: Path, lineno: int) -> TraceRecord | None:
    """A call of one of Qwen Code's managed subagents (the auto-memory extractor and the like), which writes no
    assistant record of its own: its `ui_telemetry` `qwen-code.api_response` event, named by `subagent_id`
    (the main conversation's calls have the same event beside their assistant records: not read again).
    `input_token_count` is the whole prompt, the cached part included; answered at the event's time, sent
    `duration_ms` before."""
    if line.get("subtype") != "ui_telemetry":
        return None
    payload = line.get("systemPayload") if isinstance(line.get("systemPayload"), dict) else {}
    event = payload.get("uiEvent") if isinstance(payload.get("uiEvent"), dict) else {}
    sub = as_str(event.get("subagent_id"))
    if event.get("event.name") != _API_RESPONSE or sub is None:
        return None
    model = as_str(event.get("model"))
    stamp = time_or_none(event.get("event.timestamp")) or time_or_none(line.get("timestamp"))
    duration = event.get("duration_ms")
    started = stamp - duration / 1000 if stamp is not None and isinstance(duration, (int, float)) else stamp
    usage = {"promptTokenCount": as_int(event.get("input_token_count")),
             "cachedContentTokenCount": as_int(event.get("cached_content_token_count")),
             "candidatesTokenCount": as_int(event.get("output_token_count")),
             "thoughtsTokenCount": as_int(event.get("thoughts_token_count"))}
    rid = as_str(event.get("response_id")) or as_str(line.get("uuid")) or f"{path.stem}:{lineno}"
    extra: dict[str, Any] = {"source_format": NAME, "subagent": as_str(event.get("subagent_name")) or sub}
    if as_str(line.get("cwd")):
        extra["cwd"] = line["cwd"]
    return TraceRecord(id=rid, provider=infer_provider({"model": model} if model else None) or "openai",
                       started_at=started, response={"model": model, "usageMetadata": usage},
                       session=as_str(line.get("sessionId")) or path.stem, agent=f"subagent-{sub}",
                       finished_at=stamp, extra=extra, source=str(path), line=lineno)


def _chain(chains: Chains, uuid: str, line: dict[str, Any]) -> None:
    """Qwen Code chains its records as Claude Code does; user, assistant and tool results are sent, a
    compression's system record starts the history again from its summary."""
    kind = line.get("type")
    message = line.get("message")
    content = message.get("parts") if isinstance(message, dict) else None
    if kind in ("user", "assistant", "tool_result"):
        chains.add(uuid, line.get("parentUuid"), "assistant" if kind == "assistant" else "user", content,
                   tool_result=kind == "tool_result")
    else:
        chains.add(uuid, line.get("parentUuid"), None, boundary=line.get("subtype") == "chat_compression")


def _event(line: dict[str, Any], events: Events) -> None:
    subtype, stamp = line.get("subtype"), time_or_none(line.get("timestamp"))
    payload = line.get("systemPayload") if isinstance(line.get("systemPayload"), dict) else {}
    if subtype == "chat_compression":
        info = payload.get("info") if isinstance(payload.get("info"), dict) else {}
        events.add("compaction", stamp, pre_tokens=as_int(info.get("originalTokenCount")) or None)
    elif subtype in ("notification", "background_task_completed"):
        events.add("task_notification", stamp)
    elif subtype == "slash_command" and payload.get("phase") == "invocation":
        name = (as_str(payload.get("rawCommand")) or "").split(" ", 1)[0]
        if name == "/mcp":
            events.add("tools_changed", stamp, detail=name)
        elif name and name not in ("/stats", "/help", "/about", "/quit", "/compress"):
            events.add("command", stamp, name=name)
