"""Cline (and its forks Roo Code and Kilo Code): task folders and SDK sessions.

Two layouts, both under the agent's data folder:

* **Task folders** (the VS Code extensions, and Cline before its SDK; Roo Code's `condense_context` and Cline's
  summarize_task call mark a summary where the history was replaced): `tasks/<task id>/ui_messages.json`
  (`claude_messages.json` in the oldest versions), a JSON array of the messages the user saw. One model call =
  one `"say": "api_req_started"` entry: `ts` (ms) is when it was sent, `text` a JSON string {request,
  tokensIn, tokensOut, cacheWrites, cacheReads, cost, cancelReason?, apiProtocol? (Roo)}, `modelInfo`
  {providerId, modelId, mode} (older files: the task's `task_metadata.json` `model_usage` names the model by
  time). Beside it `api_conversation_history.json` holds the messages sent (Anthropic-shaped), and
  `conversationHistoryIndex` on each entry the index of the last one when it was written: a request was sent
  with the first `index + 2` of them, less `conversationHistoryDeletedRange` [start, end] — the messages
  Cline's context manager dropped to fit the window (a truncation: the prompt changes at `start`).
* **SDK sessions** (Cline CLI 3 and the extension since its SDK): `sessions/<id>/<id>.messages.json`, an
  object {version, sessionId, agent, messages, system_prompt?}; each assistant message a model call answered,
  its `metrics` {inputTokens, outputTokens, cacheReadTokens, cacheWriteTokens, cost} and `modelInfo` {id,
  provider}, `ts` (ms) when it ended. Beside it `<id>.json` (the manifest: cwd, title, started_at).

What `tokensIn` / `inputTokens` counts depends on the provider handler that wrote it: the uncached input
(Anthropic, Bedrock, Vertex, Cline's and OpenRouter's gateways, DeepSeek, OpenAI's native API) or the whole
prompt, cached tokens included (OpenAI-compatible endpoints and most others; the SDK always). A log says
which where it can: Roo's `apiProtocol` ("openai": whole prompt); a request whose input is smaller than its
cache reads and writes cannot have counted them. Otherwise the provider table in providers/agents/cline.toml
(`[usage]`, from each handler's source) decides.

Other quirks: a request that failed before its first token logs zeros and a `cancelReason` (a counted skip,
never a $0 request); `deleted_api_reqs` entries sum the usage of requests a checkpoint restore removed, and
`subagent_usage` a subagent batch's (each one record counted as a total, `SourceStats.totals`: the bill holds,
no cause is inferred from it); the conversation's task text is the session's title.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import orjson

from kvprobe.importers.base import (BadCount, Progress, SourceStats, as_str, local_server, read_document,
                                   served_locally, split_usage, time_or_none, token_count, token_counts)
from kvprobe.importers.events import Events
from kvprobe.importers.formats import CLINE_UI_FILES, SNIFFERS
from kvprobe.trace import TraceRecord

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

NAME = "cline"
SDK_SUFFIX = ".messages.json"
ENDPOINT = "/v1/messages"
# the extensions' folders under VS Code's globalStorage (and its forks'), by the agent that writes them
_EXTENSIONS = {"saoudrizwan.claude-dev": "Cline", "rooveterinaryinc.roo-cline": "Roo Code",
               "kilocode.kilo-code": "Kilo Code"}
_EDITORS = ("Code", "Code - Insiders", "Cursor", "Windsurf", "VSCodium")
_PLATFORMS = {"bedrock": "bedrock", "vertex": "vertex", "awsbedrock": "bedrock"}
_PROVIDERS = {"anthropic": "anthropic", "openai-native": "openai", "gemini": "gemini", "deepseek": "deepseek",
              "xai": "xai", "mistral": "mistral", "moonshot": "moonshot", "qwen": "qwen", "bedrock": "anthropic",
              "vertex": "anthropic"}
# the entries that sum requests logged together, and the stream each sum is
_SUMS = {"deleted_api_reqs": "deleted-requests", "subagent_usage": "subagents"}
# the entries that are not the model's answer: a request's answer ends before the first of them
_NOT_ANSWER = frozenset({"api_req_started", "api_req_retried", "error_retry", "user_feedback", "user_feedback_diff",
                         "checkpoint_created", "resume_task", "resume_completed_task", "deleted_api_reqs",
                         "task_progress", "command_output", "mcp_server_response", "api_req_failed", "subagent_usage",
                         "browser_action_result", "hook_status", "hook_output_stream"})


def default_paths() -> list[Path]:
    """~/.cline/data (or $CLINE_DIR/data) and the extensions' globalStorage folders that hold tasks."""
    roots: list[Path] = []
    env = os.environ.get("CLINE_DATA_DIR")
    if env:
        roots += [Path(p).expanduser() for p in env.split(",") if p]
    else:
        roots.append(Path(os.environ.get("CLINE_DIR") or "~/.cline").expanduser() / "data")
        home = Path("~").expanduser()
        bases = [home / ".config", home / "Library" / "Application Support"]
        if os.environ.get("APPDATA"):
            bases.append(Path(os.environ["APPDATA"]))
        roots += [base / editor / "User" / "globalStorage" / ext
                  for base in bases for editor in _EDITORS for ext in _EXTENSIONS]
    found = []
    for root in roots:
        found += [root / sub for sub in ("tasks", "sessions") if (root / sub).is_dir()]
    return found


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


def writer_of(path: Path) -> str:
    """The agent that wrote a task folder: Roo Code's and Kilo Code's extensions keep theirs under their own
    globalStorage folder; everything else is Cline's."""
    for part in path.parts:
        if part.lower() in _EXTENSIONS:
            return _EXTENSIONS[part.lower()]
    return "Cline"


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    if path.name in CLINE_UI_FILES:
        entries = _document(path, stats, progress, list)
        if entries is not None:
            yield from _Task(path, stats).records(entries, seen)
    elif path.name.endswith(SDK_SUFFIX):
        session = _document(path, stats, progress, dict)
        if session is not None:
            yield from _sdk_records(path, session, stats, seen)
    else:  # api_conversation_history.json, task_metadata.json, a session's manifest: read with the log they go with
        stats.lines += 1
        stats.ignored += 1


def _document(path: Path, stats: SourceStats, progress: Progress | None, kind: type) -> Any:
    doc = read_document(path, stats, progress)
    if doc is None:
        return None
    if not isinstance(doc, kind):
        stats.skip("not a Cline message list" if kind is list else "not a Cline session", 1)
        return None
    return doc


def _side(path: Path) -> Any:
    """A JSON file beside the log (api_conversation_history.json, task_metadata.json, the manifest), parsed;
    None when absent or unreadable (the log is read without it)."""
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def usage_rule(name: str) -> frozenset[str]:
    """The Cline provider ids a rule of providers/agents/cline.toml's `[usage]` lists: `input_includes_cached`
    (handlers that log the whole prompt as input), `cache_writes_are_misses` (DeepSeek's misses as writes),
    `writes_logged_as_input` (gateways that logged no writes)."""
    from kvprobe.catalog import providers_dir

    return _usage_table(str(providers_dir())).get(name, frozenset())


@lru_cache(maxsize=4)
def _usage_table(directory: str) -> dict[str, frozenset[str]]:
    """The `[usage]` rules of the providers directory's Cline profile, parsed once per directory (each task
    asks them); a malformed file is a CatalogError naming it, as every provider file is."""
    import tomllib

    from kvprobe.errors import CatalogError

    path = Path(directory) / "agents" / "cline.toml"
    try:
        usage = tomllib.loads(path.read_text(encoding="utf-8")).get("usage", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"{path}: cannot read Cline's usage rules: {exc}") from exc
    if not isinstance(usage, dict):
        raise CatalogError(f"{path}: [usage] must be a table of provider id lists")
    return {k: frozenset(p for p in v if isinstance(p, str)) for k, v in usage.items() if isinstance(v, list)}


def provider_of(provider_id: str, model: str | None) -> str:
    """kvprobe's provider for what served a call: Cline's provider id where it names one, else the model name
    (a gateway's `anthropic/claude-…` is Claude); a model Ollama or LM Studio runs here is `local`."""
    from kvprobe.request.detect import infer_provider

    server = local_server(provider_id)
    if server is not None and served_locally(server, model):
        return "local"
    return _PROVIDERS.get(provider_id) or infer_provider({"model": model.split("/")[-1]} if model else None) \
        or "openai"


# requests of one provider that all log no uncached input while writing: DeepSeek's handler, whose "writes" are
# its misses, even where the log names no provider (the oldest task folders); fewer prove nothing
MISSES_SIGNATURE_REQUESTS = 3


def _writes_are_misses(provider_id: str, counts: list[tuple[int, int, int]]) -> bool:
    """Whether a provider's `cacheWrites` are cache misses billed as input (DeepSeek's handler): the table says
    so, or every request logs no uncached input at all (a cache that writes always leaves some input after
    its last breakpoint)."""
    if provider_id in usage_rule("cache_writes_are_misses"):
        return True
    return len(counts) >= MISSES_SIGNATURE_REQUESTS and all(fresh == 0 for fresh, _, _ in counts) and \
        any(write for _, _, write in counts)


def _writes_hidden(provider_id: str, counts: list[tuple[int, int, int]]) -> bool:
    """Whether a gateway's handler logged no cache writes while Claude wrote them (Cline's and OpenRouter's, in
    the releases that set cacheWriteTokens to 0): the uncached input it logs for a Claude model, whose prompt
    Cline marks with cache_control up to its end, is what was written (the logged costs price it at the write
    rate). A task with any write logged is a release that logs them."""
    return provider_id in usage_rule("writes_logged_as_input") and not any(write for _, _, write in counts)


def _whole_prompt(provider_id: str, protocol: str | None, counts: list[tuple[int, int, int]]) -> bool:
    """Whether a provider's `tokensIn` counts the whole prompt (see the module docstring): the log's own word
    (Roo's apiProtocol), else its numbers (an input under its cache reads and writes counted none of them),
    else the provider table."""
    if protocol in ("openai", "anthropic"):
        return protocol == "openai"
    if any(fresh < read + write for fresh, read, write in counts if read + write):
        return False
    return provider_id in usage_rule("input_includes_cached")


class _Task:
    """One task folder's ui_messages.json, with the files beside it."""

    def __init__(self, path: Path, stats: SourceStats) -> None:
        self.path, self.stats = path, stats
        self.task = self.first = path.parent.name
        self.writer = writer_of(path)
        history = _side(path.parent / "api_conversation_history.json")
        self.history = history if isinstance(history, list) else None
        meta = _side(path.parent / "task_metadata.json")
        usage = meta.get("model_usage") if isinstance(meta, dict) else None
        self.models = sorted((u for u in usage if isinstance(u, dict) and isinstance(u.get("ts"), (int, float))),
                             key=lambda u: u["ts"]) if isinstance(usage, list) else []

    def records(self, entries: list[Any], seen: set[str]) -> Iterator[TraceRecord]:
        stats = self.stats
        stats.lines += len(entries) - 1
        # a task is known by its first message's time (Cline's task id is the time it began): a copy of the
        # folder under another name (a snapshot, an export) is the same task, its requests counted once
        first = next((e["ts"] for e in entries if isinstance(e, dict) and isinstance(e.get("ts"), int)), None)
        if first is not None:
            self.first = str(first)
            self.task = self.task if self.task.isdigit() else self.first
        calls = self._calls(entries)
        whole, misses, hidden = self._usage_kinds(calls)
        events, mode = Events(), None
        conversation = _Conversation(self.history) if self.history is not None else None
        dropped: tuple[int, int] | None = None
        since = 0  # the first entry after the previous request
        cwd: str | None = None
        for at, entry, info in calls:
            summarised = _between(entries[since:at], events)
            since = at + 1
            if info is None:  # a deleted_api_reqs sum, an event, or a line that is no request
                continue
            provider_id, model, mode_now = self._model(entry)
            if mode is not None and mode_now is not None and mode_now != mode:
                events.add("settings_changed", _seconds(entry.get("ts")), settings=[f"mode: {mode} -> {mode_now}"])
            mode = mode_now or mode
            cwd_now = _working_directory(info)
            if cwd is not None and cwd_now is not None and cwd_now != cwd:  # in the system prompt: a new prefix
                events.add("settings_changed", _seconds(entry.get("ts")),
                           settings=[f"working directory: {cwd} -> {cwd_now}"])
            cwd = cwd_now or cwd
            deleted = _deleted_range(entries, at)
            if deleted != dropped and deleted is not None and conversation is None:
                events.add("compaction", _seconds(entry.get("ts")), trigger="condense" if summarised else "truncation")
            dropped = deleted
            try:
                fresh, read, write, output = _counts(info)
            except BadCount as exc:
                stats.skip("invalid usage", at + 1, str(exc))
                continue
            if not (fresh or read or write or output):
                stats.skip("request that logged no usage (failed or cancelled before its first token)", at + 1,
                           as_str(info.get("cancelReason")))
                continue
            if whole.get(provider_id, False):
                fresh = max(fresh - read - write, 0)
            if misses.get(provider_id, False):
                fresh, write = fresh + write, 0
            provider = provider_of(provider_id, model)
            if hidden.get(provider_id, False) and provider == "anthropic":
                fresh, write = 0, fresh  # what Claude wrote, logged as input (see _writes_hidden)
            rid = f"{self.first}:{entry.get('ts')}"
            if not stats.first_time(rid, seen):
                events.attach({})  # a copy's request: what led to it went with the first one read
                continue
            extra = self._extra(provider_id, info)
            if cwd is not None:
                extra["cwd"] = cwd
            if conversation is not None:
                extra["history"] = conversation.request(entry.get("conversationHistoryIndex"), deleted,
                                                        "compacted" if summarised else "truncated")
            events.attach(extra)
            yield TraceRecord(id=rid, provider=provider, started_at=_seconds(entry.get("ts")),
                              response={"id": rid, "model": model,
                                        "usage": split_usage(provider, fresh, read, write, output)},
                              session=self.task, agent="main", endpoint=ENDPOINT,
                              finished_at=_answered(entries, at), extra=extra, source=str(self.path), line=at + 1)
        yield from self._deleted(entries, seen, whole, misses)

    def _calls(self, entries: list[Any]) -> list[tuple[int, dict[str, Any], dict[str, Any] | None]]:
        """Each api_req_started entry with its parsed text (None where the text is no JSON object, counted)."""
        calls = []
        for at, entry in enumerate(entries):
            if not isinstance(entry, dict) or entry.get("say") != "api_req_started":
                self.stats.ignored += 1
                continue
            info = _text_object(entry)
            if info is None:
                self.stats.skip("api_req_started without its usage object", at + 1)
            calls.append((at, entry, info))
        return calls

    def _usage_kinds(self, calls: list[tuple[int, dict[str, Any], dict[str, Any] | None]]
                     ) -> tuple[dict[str, bool], dict[str, bool], dict[str, bool]]:
        """Per provider id: whether its tokensIn counts the whole prompt; whether its cacheWrites are misses;
        whether its writes hide in tokensIn."""
        counts: dict[str, list[tuple[int, int, int]]] = {}
        protocols: dict[str, str | None] = {}
        for _, entry, info in calls:
            if info is None:
                continue
            provider_id = self._model(entry)[0]
            try:
                fresh, read, write, _ = _counts(info)
            except BadCount:
                continue
            counts.setdefault(provider_id, []).append((fresh, read, write))
            protocols[provider_id] = as_str(info.get("apiProtocol")) or protocols.get(provider_id)
        return ({p: _whole_prompt(p, protocols.get(p), c) for p, c in counts.items()},
                {p: _writes_are_misses(p, c) for p, c in counts.items()},
                {p: _writes_hidden(p, c) for p, c in counts.items()})

    def _model(self, entry: dict[str, Any]) -> tuple[str, str | None, str | None]:
        """(provider id, model, mode) of a request: its modelInfo, else the task metadata's latest model then."""
        info = entry.get("modelInfo")
        if isinstance(info, dict) and as_str(info.get("modelId")):
            return ((as_str(info.get("providerId")) or "").lower(), as_str(info.get("modelId")),
                    as_str(info.get("mode")))
        ts = entry.get("ts")
        used = None
        for u in self.models:
            if isinstance(ts, (int, float)) and u["ts"] > ts:
                break
            used = u
        if used is None:
            return "", None, None
        return ((as_str(used.get("model_provider_id")) or "").lower(), as_str(used.get("model_id")),
                as_str(used.get("mode")))

    def _extra(self, provider_id: str, info: dict[str, Any]) -> dict[str, Any]:
        return _extra_of(provider_id, self.writer, info.get("cost"))

    def _deleted(self, entries: list[Any], seen: set[str], whole: dict[str, bool],
                 misses: dict[str, bool]) -> Iterator[TraceRecord]:
        """The sums of requests logged together, billed, so counted, as totals: those a checkpoint restore removed
        (`deleted_api_reqs`), a subagent batch's (`subagent_usage`)."""
        for at, entry in enumerate(entries):
            kind = entry.get("say") if isinstance(entry, dict) else None
            if kind not in _SUMS:
                continue
            info = _text_object(entry)
            try:
                fresh, read, write, output = _counts(info or {})
            except BadCount as exc:
                self.stats.skip("invalid usage", at + 1, str(exc))
                continue
            rid = f"{self.first}:{_SUMS[kind]}:{entry.get('ts')}"
            if not (fresh or read or write or output) or not self.stats.first_time(rid, seen):
                continue
            self.stats.totals += 1
            provider_id, model, _ = self._model(entry)
            if model is None:  # the model of the requests before it (what the deleted ones were sent to)
                provider_id, model, _ = next((self._model(e) for e in reversed(entries[:at]) if isinstance(e, dict)
                                              and e.get("say") == "api_req_started" and self._model(e)[1]),
                                             (provider_id, model, None))
            if whole.get(provider_id, False):  # sums of the same handler's counts: read as its requests are
                fresh = max(fresh - read - write, 0)
            if misses.get(provider_id, False):
                fresh, write = fresh + write, 0
            provider = provider_of(provider_id, model)
            yield TraceRecord(id=rid, provider=provider, started_at=_seconds(entry.get("ts")),
                              response={"id": rid, "model": model,
                                        "usage": split_usage(provider, fresh, read, write, output)},
                              session=self.task, agent=_SUMS[kind], endpoint=ENDPOINT,
                              finished_at=_seconds(entry.get("ts")),
                              extra={**self._extra(provider_id, info or {}), "process_total": True},
                              source=str(self.path), line=at + 1)


# where Cline's environment details name the folder it works in (in its system prompt too): "# Current Working
# Directory (c:/Users/alex/app) Files"
_CWD = re.compile(r"# Current Working Directory \(([^)\n]+)\)")
# the MCP settings files Cline and Roo Code write their servers to: an edit connects or drops a server, and the
# server's tools join or leave the next request's tool list (its system prompt, in Cline)
_MCP_SETTINGS = ("cline_mcp_settings.json", "mcp_settings.json")


def _working_directory(info: dict[str, Any]) -> str | None:
    request = info.get("request")
    found = _CWD.search(request) if isinstance(request, str) else None
    return found.group(1).strip() if found else None


def _between(between: list[Any], events: Events) -> bool:
    """What the entries between two requests say of the context: Roo Code's and Kilo Code's `condense_context`
    (a summary replaced the history: a compaction event, with the tokens before it), an edit of the MCP
    settings (the tool list changes), and Cline's summarize_task tool call or `condense` ask (the range dropped
    next is a summary's, not a truncation: True)."""
    summarised = False
    for entry in between:
        if not isinstance(entry, dict):
            continue
        kind = entry.get("say") or entry.get("ask")
        text = entry.get("text")
        if kind == "tool" and isinstance(text, str) and text.endswith("}") and any(n in text for n in _MCP_SETTINGS):
            tool = _text_object(entry) or {}
            path = str(tool.get("path") or "")
            if path.endswith(_MCP_SETTINGS) and tool.get("tool") in ("editedExistingFile", "newFileCreated"):
                events.add("tools_changed", _seconds(entry.get("ts")), detail="the MCP settings were edited", once=True)
        if kind == "condense_context":
            condense = entry.get("contextCondense") if isinstance(entry.get("contextCondense"), dict) else {}
            before = condense.get("prevContextTokens")
            events.add("compaction", _seconds(entry.get("ts")), trigger="condense",
                       pre_tokens=before if isinstance(before, int) and before > 0 else None)
        elif kind == "condense" or (kind == "tool" and "summarizeTask" in str(entry.get("text") or "")):
            summarised = True
    return summarised


def _extra_of(provider_id: str, writer: str, cost: Any) -> dict[str, Any]:
    """What a Cline record carries beside its usage: its format, provider id, writer, the platform that served it
    and the cost the log gives it."""
    extra: dict[str, Any] = {"source_format": NAME, "writer": writer}
    if provider_id:
        extra["provider_id"] = provider_id
    platform = _PLATFORMS.get(provider_id) or local_server(provider_id)
    if platform:
        extra["platform"] = platform
    if isinstance(cost, (int, float)) and cost > 0:
        extra["logged_cost_usd"] = cost
    return extra


def _text_object(entry: dict[str, Any]) -> dict[str, Any] | None:
    text = entry.get("text")
    if not isinstance(text, str):
        return None
    try:
        info = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return info if isinstance(info, dict) else None


def _counts(info: dict[str, Any]) -> tuple[int, int, int, int]:
    return (token_count(info.get("tokensIn"), "tokensIn"), token_count(info.get("cacheReads"), "cacheReads"),
            token_count(info.get("cacheWrites"), "cacheWrites"), token_count(info.get("tokensOut"), "tokensOut"))


def _seconds(ms: Any) -> float | None:
    return time_or_none(ms / 1000) if isinstance(ms, (int, float)) and not isinstance(ms, bool) else None


def _answered(entries: list[Any], at: int) -> float | None:
    """When a request's answer ended: the last entry of the answer (text, reasoning, a tool call) before anything
    that is not (the next request, the user's feedback, a checkpoint)."""
    end = None
    for entry in entries[at + 1:]:
        if not isinstance(entry, dict):
            continue
        if (entry.get("say") or entry.get("ask")) in _NOT_ANSWER:
            break
        end = entry.get("ts")
    return _seconds(end)


def _deleted_range(entries: list[Any], at: int) -> tuple[int, int] | None:
    """The messages dropped from the request at `at`. The entry is written before the request's truncation is
    decided: the range the request was sent with is the one on the entries that follow it, up to the next
    request."""
    found = entries[at].get("conversationHistoryDeletedRange")
    for entry in entries[at + 1:]:
        if not isinstance(entry, dict) or entry.get("say") == "api_req_started":
            break
        if "conversationHistoryDeletedRange" in entry:
            found = entry.get("conversationHistoryDeletedRange")
            break
    if isinstance(found, list) and len(found) == 2 and all(isinstance(i, int) for i in found):
        return found[0], found[1]
    return None


class _Conversation:
    """A task's requests' messages, from api_conversation_history.json: a request was sent with the messages up
    to its `conversationHistoryIndex` + 2, less the range Cline dropped."""

    def __init__(self, messages: list[Any]) -> None:
        from kvprobe.importers.history import Sequence, measure

        self.measured = [(m.get("role") if isinstance(m, dict) else None,
                          measure(m.get("content") if isinstance(m, dict) else m)) for m in messages]
        self.sequence = Sequence()
        self.sent: list[int] = []  # the indexes of the last request's messages

    def request(self, index: Any, deleted: tuple[int, int] | None, why: str = "truncated") -> dict[str, Any]:
        """The request's history; `why` the messages were dropped: `truncated` (the context manager's rule) or
        `compacted` (a summary took their place)."""
        from kvprobe.importers.history import Sent

        end = min(index + 2, len(self.measured)) if isinstance(index, int) else len(self.measured)
        keep = [i for i in range(max(end, 0)) if deleted is None or not deleted[0] <= i <= deleted[1]]
        sequence = self.sequence
        if keep[:len(self.sent)] != self.sent:  # not only appended since: a list of its own
            sequence.items = Sent(replaced=why if deleted is not None else "branched")
            self.sent = []
        for i in keep[len(self.sent):]:
            role, (digest, tokens) = self.measured[i]
            sequence.items.append(i, role if role in ("user", "assistant") else "user", digest, tokens)
        self.sent = keep
        return sequence.request()


def _sdk_records(path: Path, session: dict[str, Any], stats: SourceStats, seen: set[str]) -> Iterator[TraceRecord]:
    """An SDK session's messages.json: each assistant message with metrics is a call."""
    from kvprobe.importers.history import Sequence

    messages = session.get("messages")
    if not isinstance(messages, list):
        stats.skip("not a Cline session", 1, "no messages list")
        return
    stats.lines += len(messages)
    sid = as_str(session.get("sessionId")) or path.name[: -len(SDK_SUFFIX)]
    manifest = _side(path.parent / f"{sid}.json")
    manifest = manifest if isinstance(manifest, dict) else {}
    agent = as_str(session.get("agent")) or "lead"
    agent = "main" if agent == "lead" else f"{agent}-{path.name[: -len(SDK_SUFFIX)]}" \
        if path.name[: -len(SDK_SUFFIX)] != sid else agent
    previous = time_or_none(manifest.get("started_at"))
    cwd = as_str(manifest.get("cwd")) or as_str(manifest.get("workspace_root"))
    conversation = Sequence()
    for at, message in enumerate(messages):
        if not isinstance(message, dict):
            stats.skip("message that is not an object", at + 1)
            continue
        role = message.get("role")
        metrics = message.get("metrics")
        stamp = _seconds(message.get("ts"))
        if role != "assistant" or not isinstance(metrics, dict):
            stats.ignored += 1
            conversation.add("assistant" if role == "assistant" else "user", message.get("content"))
            previous = stamp or previous
            continue
        try:
            total, read, write, output = token_counts(
                metrics, ("inputTokens", "cacheReadTokens", "cacheWriteTokens", "outputTokens"), "metrics.")
        except BadCount as exc:
            stats.skip("invalid usage", at + 1, str(exc))
            continue
        history = conversation.request()
        conversation.add("assistant", message.get("content"))
        fresh = total if total < read + write else total - read - write  # the SDK logs the whole prompt
        info = message.get("modelInfo") if isinstance(message.get("modelInfo"), dict) else {}
        model, provider_id = as_str(info.get("id")), (as_str(info.get("provider")) or "").lower()
        rid = as_str(message.get("id")) or f"{sid}:{at}"
        if not (fresh or read or write or output) or not stats.first_time(rid, seen):
            previous = stamp or previous
            continue
        provider = provider_of(provider_id, model)
        extra = {**_extra_of(provider_id, "Cline", metrics.get("cost")), "history": history}
        if cwd:
            extra["cwd"] = cwd
        yield TraceRecord(id=rid, provider=provider, started_at=previous if previous is not None else stamp,
                          response={"id": rid, "model": model,
                                    "usage": split_usage(provider, fresh, read, write, output)},
                          session=sid, agent=agent, endpoint=ENDPOINT, finished_at=stamp, extra=extra,
                          source=str(path), line=at + 1)
        previous = stamp or previous
