"""Claude Code transcripts: ~/.claude/projects/<cwd with / as ->/<sessionId>.jsonl.

Quirks:
* One API response is written as several lines (one per content block) repeating the same usage; later
  lines can carry a larger output count. Lines are merged by `message.id` + `requestId` (the last usage
  wins), and a request already seen in another file (resumed sessions copy history) is a duplicate (of a
  copy whose usage was usable: one skipped for its usage hides none read later).
* `<synthetic>` model lines are written by Claude Code itself (interruptions, errors): no API call, skipped.
* Subagents: `<sessionId>/subagents/agent-<id>.jsonl` (older: `agent-*.jsonl` beside the sessions, or
  `isSidechain` lines inline); their records carry `agent = "agent-<id>"`, the main thread `agent = "main"`.
  Inline lines without an agentId (parallel subagents interleave there) are told apart by the first line of
  their chain: `agent = "sidechain-<its uuid's first 8 characters>"`.
* Only one timestamp per line. `started_at` is the timestamp of the line the response answers
  (`parentUuid`: the user turn or tool result, written when the request was sent), `first_token_at` the first
  line of the response and `finished_at` its last line.
* Subagent calls also appear in the parent transcript as `progress` lines (`data.type = "agent_progress"`)
  whose `data.message` is the subagent's assistant line (message with usage, requestId, timestamp). They
  are the same billed calls as the subagent's own transcript, so they are only provisional here (marked
  `extra.via = "agent_progress"`): `load_any` keeps one only when no transcript line of the same request
  was read, and counts how many came from there.
* What happened between two requests travels on the next request of the stream as `extra["events"]`
  (kvprobe.importers.events): `compact_boundary` system lines (with `compactMetadata.preTokens`), slash
  commands (`/mcp` reconnects change the tool list), `<task-notification>` user lines, "[Request interrupted
  by user" lines, and the first use of an MCP tool not used before in the stream.
* Compaction summaries are requests of their own, in `subagents/agent-acompact-*.jsonl`.
* Bedrock and Vertex serve Claude with their own message ids (`msg_bdrk_…`, `msg_vrtx_…`): such records
  carry `extra["platform"]` (`bedrock` / `vertex`).
* Hook-written copies: some projects commit `logs/chat.json`, a hook's dump of the transcript as one JSON
  array (each element one transcript line's object). It is read as the same lines (`line` is then the
  element's number); the same request in several copies or versions of it, or in the JSON Lines transcript,
  is read once (by message id and request id, as across transcripts).
* A `summary` or `file-history-snapshot` line appended to a transcript whose last line has no newline (a
  write cut short of it) arrives joined to that line: both are read (`importers.base.joined_objects`).
* Usage-only: `request` is absent; `response` holds id, model, stop_reason and usage (cache fields and any
  provider-reported `cache_miss_reason` included), and `message.diagnostics` (the API's cache diagnostics:
  `cache_miss_reason` {type, cache_missed_input_tokens}) when the client asked for it.
* What caching the request asked for: since 2.1.33x an assistant line says it (`promptCacheRequested`: `5m`,
  `1h`, or `off` where caching was switched off): `extra["cache_requested"]`.
* The way requests went: 2.1.337 writes `api-request-route` lines (`provider`: anthropic, customEndpoint,
  bedrock, vertex, foundry, anthropicAws, mantle, gateway; `credential`: login, key, token, …), session state
  it writes into the session's own transcript (not a subagent's) when a route is first used and again as the
  file is written on; the latest one before a response line is its `extra["route"]` (a session takes one
  route in practice), and a route that names a platform (`_ROUTE_PLATFORMS`) is its `extra["platform"]` where
  the message id names none. A subagent's own transcript has no route line: its requests carry no route. A
  file with a `login` credential (a Claude.ai plan pays, not an API key) says so (`SourceStats.login`).
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from kvprobe.importers.base import (Progress, SourceStats, as_int, as_str, iter_lines, objects_of_bad_line,
                                   time_or_none)
from kvprobe.importers.events import Events, event
from kvprobe.importers.formats import SNIFFERS
from kvprobe.trace import TraceRecord
from kvprobe.trace.validate import usage_problem

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any
    from kvprobe.importers.history import Chains

NAME = "claude_code"
SYNTHETIC_MODEL = "<synthetic>"
VIA_PROGRESS = "agent_progress"  # extra["via"] of a record read from a parent's progress line
PROVIDER, ENDPOINT = "anthropic", "/v1/messages"  # every record's


def default_paths() -> list[Path]:
    """Where Claude Code keeps transcripts: $CLAUDE_CONFIG_DIR (comma-separated) or ~/.claude, ~/.config/claude."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    roots = [Path(p).expanduser() for p in env.split(",")] if env else \
        [Path("~/.claude").expanduser(), Path("~/.config/claude").expanduser()]
    return [r / "projects" for r in roots if (r / "projects").is_dir()]


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


class _Origin:
    """What a transcript's path says about its lines, worked out once per file (not per line)."""

    __slots__ = ("source", "stem", "default_session", "agent_file", "route")

    def __init__(self, path: Path) -> None:
        self.source = str(path)
        self.route: str | None = None  # the provider of the file's latest `api-request-route` line
        self.stem = path.name[:-6] if path.name.endswith(".jsonl") else path.stem
        self.default_session = path.parent.parent.name if path.parent.name == "subagents" else path.stem
        # a subagent's own transcript (agent-<id>.jsonl): the id its name gives, else None
        self.agent_file = self.stem[6:] if self.stem.startswith("agent-") else None

    def agent(self, line: dict[str, Any]) -> str:
        if self.agent_file is not None:
            return f"agent-{as_str(line.get('agentId')) or self.agent_file}"
        if line.get("isSidechain") is True:  # inline: each subagent's lines chain back to its own first line
            agent_id = as_str(line.get("agentId"))
            if agent_id:
                return f"agent-{agent_id}"
            root = line.get(_ROOT)
            return f"sidechain-{root[:8]}" if root.__class__ is str else "sidechain"
        return "main"

    def session(self, line: dict[str, Any]) -> str:
        return as_str(line.get("sessionId")) or self.default_session


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None,
         history: bool = True) -> Iterator[TraceRecord]:
    """Records of one transcript file, merged per request, in the order requests first appear.
    history=False: no `extra["history"]` and no `extra["events"]` (what `usage` reads needs neither; rebuilding
    the history is a third of reading, the events a twentieth)."""
    for record, _ in _read(path, stats, seen, progress, history, _assistant_line):
        yield record  # (its usage is checked where it is read: `loading._valid_usage`)


def usage_rows(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[Any]:
    """`usage`'s rows of one transcript file (`summary.UsageRow`): those `summary.usage_row` makes of `read`'s
    records (history=False) once `loading` has checked their usage and scrubbed their identity, in the same
    order with the same counts, made straight from each request's few fields instead (`_Response`): no
    record, response or `extra` is built for a row that needs a dozen values of them (a third of `usage`'s
    time on a large folder went there)."""
    from kvprobe.importers.summary import logged_cost, project_from, row_of
    from kvprobe.request.detect import platform_of
    from kvprobe.secrets import shapes_table
    table, platforms, source = shapes_table(), stats.platforms, str(path)
    named: dict[tuple[str, str, str | None], tuple[str, str, str]] = {}  # (session, agent, cwd) -> scrubbed
    for r, problem in _read(path, stats, seen, progress, False, _assistant_response):
        if r.platform is not None:  # (counted valid or not, as `loading` counts a record's)
            platforms[r.platform] += 1
        if problem is not None:
            if r.via is None:  # (a progress copy is counted only once it is kept: `loading._settle`)
                stats.records -= 1
            stats.skip("invalid usage", r.line, f"{problem[0]}: {problem[1]}")
            continue
        who = (r.session, r.agent, r.cwd)  # (the same few on every request of a file: scrubbed once each)
        clean = named.get(who)
        if clean is None:
            session, agent, cwd = who
            clean = named[who] = (table.scrub(session), table.scrub(agent),
                                  project_from(table.scrub(cwd) if cwd is not None else None, source))
        yield row_of(table.scrub_id(r.id), r.via, r.when, PROVIDER, r.model,
                     r.platform or platform_of(ENDPOINT, r.model, r.message_id or ""), clean[2], clean[0], clean[1],
                     r.usage, False, logged_cost(r.cost))


def _read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None, history: bool,
          respond: Callable[..., None]) -> Iterator[tuple[Any, tuple[str, str] | None]]:
    """`read`, each request's lines taken by `respond` (`_assistant_line`: a record; `_assistant_response`: what
    a usage row needs of it), each given with what is wrong with its usage (`usage_problem`; None: nothing).
    A request goes into `seen` (its copies in files read later are duplicates) once its file is read, and only
    where its usage is usable: a copy skipped for its usage hides no later one (as when each file is read
    apart: `usage`'s kept rows, several processes)."""
    times: dict[str, Any] = {}  # uuid -> raw timestamp, to find when each request was sent (parsed if used)
    pending: dict[str, Any] = {}  # each request read, by message id and request id, in first-line order
    provisional: dict[str, Any] = {}  # from progress lines: kept only if no transcript has the request
    origin = _Origin(path)
    streams = _Streams() if history else None  # the events between each stream's requests
    chains = _chains() if history else None  # each request's message list, rebuilt (kvprobe.importers.history)
    bodies = _Bodies() if history else None  # the requests as sent, where Claude Code logs them (2.1.33x)
    roots: dict[str, str] = {}  # inline sidechain line -> the first line of its chain (which subagent it is)
    ignored = 0
    lines = _array_lines(path, stats, progress) if _is_array(path) else _jsonl_lines(path, stats, progress)
    try:
        for lineno, line in lines:
            uuid = line.get("uuid")
            if uuid.__class__ is str:
                times[uuid] = line.get("timestamp")
                if line.get("isSidechain") is True and not line.get("agentId"):
                    _sidechain_root(roots, uuid, line)
            kind = line.get("type")
            if kind == "assistant":
                if bodies is not None:
                    bodies.said(line, "assistant")
                respond(origin, line, lineno, times, pending, stats, seen, streams=streams, chains=chains,
                        bodies=bodies)
            elif bodies is not None and kind in _Bodies.KINDS:
                ignored += 1
                bodies.line(kind, line)
            elif kind == "progress" and (nested := _progress_assistant(line)) is not None:
                respond(origin, nested, lineno, times, provisional, stats, seen, provisional=True)
            elif kind == ROUTE_LINE:
                ignored += 1
                route = line.get("provider")
                origin.route = route if route.__class__ is str and route not in _NO_ROUTE else None
                if line.get("credential") == LOGIN:
                    stats.login = True
            else:
                ignored += 1
                if streams is not None and (kind == "user" or kind == "system"):
                    streams.note(origin, line, kind)
                if bodies is not None and kind == "user":
                    bodies.said(line, "user")
            if uuid.__class__ is str and chains is not None:
                _chain(chains, uuid, line, kind)
    finally:
        stats.ignored += ignored
    for key, entry in pending.items():
        problem = usage_problem(entry.usage, "response.usage")
        if problem is None:  # later files' copies are duplicates: not those of a request skipped for its usage
            seen.add(key)
        stats.records += 1
        yield entry, problem
    for entry in provisional.values():  # counted by load_any once it knows whether a transcript had them
        yield entry, usage_problem(entry.usage, "response.usage")


def _chains() -> Chains:
    from kvprobe.importers.history import Chains  # (here: diff only asks this module about a file's format)

    return Chains()


def _jsonl_lines(path: Path, stats: SourceStats, progress: Progress | None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of a JSON Lines transcript, every line counted, a bad one a counted skip."""
    # this loop runs for every line of every transcript: the count in a local, the JSON parsed inline (a line
    # that is not a JSON object goes through objects_of_bad_line, which counts it by reason)
    loads = orjson.loads
    lines = 0
    try:
        for lineno, raw in iter_lines(path, progress):
            lines += 1
            try:
                line = loads(raw)
            except orjson.JSONDecodeError:
                line = None
            if line.__class__ is dict:
                yield lineno, line
                continue
            for part in objects_of_bad_line(raw, stats, lineno):
                yield lineno, part
    finally:
        stats.lines += lines


def _is_array(path: Path) -> bool:
    """A transcript written as one JSON array of its lines (a hook's `logs/chat.json`), not JSON Lines."""
    with path.open("rb") as fh:
        head = fh.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head[:1] == b"["


def _array_lines(path: Path, stats: SourceStats, progress: Progress | None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(element number, object) of a transcript a hook wrote as one JSON array (`logs/chat.json`: each element
    one transcript line's object); load_any has refused one too large to hold. A broken array is one counted
    skip naming where it breaks; an element that is no object, a counted skip."""
    data = path.read_bytes()
    if progress is not None:
        progress(len(data))
    try:
        elements = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        stats.lines += 1
        cut = exc.pos >= len(data.rstrip())
        stats.skip("JSON array cut short (a transcript still being written?)" if cut else "invalid JSON array",
                   exc.lineno, str(exc))
        return
    if not isinstance(elements, list):
        stats.lines += 1
        stats.skip("JSON document is not an array of transcript lines", 1)
        return
    for number, element in enumerate(elements, start=1):
        stats.lines += 1
        if element.__class__ is dict:
            yield number, element
        else:
            stats.skip("array element is not a JSON object", number)


def _progress_assistant(line: dict[str, Any]) -> dict[str, Any] | None:
    """The subagent's assistant line nested in a parent's agent_progress line, with the parent's session and
    working directory and the subagent's id; None for any other progress line."""
    data = line.get("data")
    nested = data.get("message") if isinstance(data, dict) else None
    if not isinstance(nested, dict) or nested.get("type") != "assistant":
        return None
    agent_id = as_str(data.get("agentId"))
    context = {k: line[k] for k in ("sessionId", "cwd", "gitBranch", "version") if k in line}
    return {**context, **nested, "isSidechain": True, "agentId": agent_id or nested.get("agentId")}


def _request_of(line: dict[str, Any], lineno: int, stats: SourceStats
                ) -> tuple[dict[str, Any], Any, dict[str, Any], str | None, str | None] | None:
    """(message, model, usage, message id, request id) of a response line that is an API call's; None (a counted
    skip saying why) for one that is not. The checks are written inline: this runs for every response line."""
    message = line.get("message")
    if not isinstance(message, dict):
        stats.skip("assistant line without a message object", lineno)
        return None
    model = message.get("model")
    if model == SYNTHETIC_MODEL:
        stats.skip("synthetic message written by Claude Code (no API call)", lineno)
        return None
    usage = message.get("usage")
    if not isinstance(usage, dict):
        stats.skip("assistant message without usage", lineno)
        return None
    message_id, request_id = message.get("id"), line.get("requestId")
    if not (isinstance(message_id, str) and message_id):
        message_id = None
    if not (isinstance(request_id, str) and request_id):
        request_id = None
    if message_id is None and request_id is None:
        stats.skip("no message.id or requestId to identify the request", lineno)
        return None
    return message, model, usage, message_id, request_id


class _Response:
    """What a usage row needs of one request (`usage_rows`): its record's values, without the record. `when` is
    the record's start (its parent line's time, else its first line's), else, while `timed` is false, the
    latest of its lines' times (the record's `finished_at`): a usage row's time."""

    __slots__ = ("id", "message_id", "when", "timed", "usage", "model", "session", "agent", "cwd", "cost", "via",
                 "platform", "line")

    def __init__(self, rid: str, message_id: str | None, when: float | None, usage: dict[str, Any],
                 model: str | None, session: str, agent: str, cwd: str | None, cost: object, via: str | None,
                 platform: str | None, line: int) -> None:
        self.id, self.message_id, self.when, self.timed = rid, message_id, when, when is not None
        self.usage, self.model, self.session, self.agent, self.cwd = usage, model, session, agent, cwd
        self.cost, self.via, self.platform, self.line = cost, via, platform, line


def _assistant_response(origin: _Origin, line: dict[str, Any], lineno: int, times: dict[str, Any],
                        pending: dict[str, _Response], stats: SourceStats, seen: set[str], provisional: bool = False,
                        **_: None) -> None:
    """`_assistant_line` for `usage_rows`: the same requests, merged, counted and timed the same way."""
    said = _request_of(line, lineno, stats)
    if said is None:
        return
    _, model, usage, message_id, request_id = said
    key = f"{message_id}:{request_id}"
    held = pending.get(key)
    if held is not None:
        if _later_usage(held.usage, usage):
            held.usage = usage
        if not held.timed:  # (a line's time is read only where the row's time is still open)
            stamp = time_or_none(line.get("timestamp"))
            if stamp is not None:
                held.when = max(held.when or stamp, stamp)
        stats.duplicates += 1
        return
    if key in seen:
        stats.duplicates += 1
        return
    parent = line.get("parentUuid")
    when = time_or_none(times.get(parent)) if parent.__class__ is str else None
    if when is None:
        when = time_or_none(line.get("timestamp"))
    cwd, cost = line.get("cwd"), line.get("costUSD")
    pending[key] = _Response(
        request_id or message_id or key, message_id, when, usage, model if isinstance(model, str) else None,
        origin.session(line), origin.agent(line), cwd if cwd.__class__ is str and cwd else None,
        cost if isinstance(cost, (int, float)) else None,  # (what the record keeps of it: `_assistant_line`)
        VIA_PROGRESS if provisional else None,
        _platform(message_id) or _ROUTE_PLATFORMS.get(origin.route),  # type: ignore[arg-type]
        lineno)


def _assistant_line(origin: _Origin, line: dict[str, Any], lineno: int, times: dict[str, Any],
                    pending: dict[str, TraceRecord], stats: SourceStats, seen: set[str],
                    provisional: bool = False, streams: "_Streams | None" = None,
                    chains: Chains | None = None, bodies: "_Bodies | None" = None) -> None:
    # Runs for every response line (several per request)
    said = _request_of(line, lineno, stats)
    if said is None:
        return
    message, model, usage, message_id, request_id = said
    key = f"{message_id}:{request_id}"
    stamp = time_or_none(line.get("timestamp"))
    held = pending.get(key)
    if held is not None:
        _merge(held, message, usage, stamp)
        if streams is not None:
            streams.tools_used(origin, line, message, held.extra, stamp)
        stats.duplicates += 1
        return
    if key in seen:  # read in another file (a resumed session's copy, a checkpoint's copy of a growing one)
        stats.duplicates += 1
        if streams is not None:  # what happened before it went with it there: no later request of this copy's
            streams.attach(origin.agent(line), {})
        return
    parent = line.get("parentUuid")
    started = time_or_none(times.get(parent)) if parent.__class__ is str else None
    response = {"id": message_id, "model": model if isinstance(model, str) else None,
                "stop_reason": message.get("stop_reason"), "usage": dict(usage)}
    if "diagnostics" in message:  # the API's own cache diagnostics, when Claude Code asked for them
        response["diagnostics"] = message["diagnostics"]
    extra: dict[str, Any] = {"source_format": NAME}
    for src, dst in EXTRA_FIELDS:
        value = line.get(src)
        if value.__class__ is str and value:
            extra[dst] = value
    cost = line.get("costUSD")
    if isinstance(cost, (int, float)):
        extra["logged_cost_usd"] = cost
    if provisional:
        extra["via"] = VIA_PROGRESS
    route = origin.route
    if route is not None:
        extra["route"] = route
    platform = _platform(message_id) or _ROUTE_PLATFORMS.get(route)  # type: ignore[arg-type]
    if platform:
        extra["platform"] = platform
    agent = origin.agent(line)
    if streams is not None:
        streams.attach(agent, extra)
        streams.tools_used(origin, line, message, extra, stamp)
    if chains is not None:
        extra["history"] = chains.request(agent, parent, _cleared(message))
    body = bodies.take(model) if bodies is not None and not provisional else None
    if body is not None and bodies is not None and bodies.betas:
        extra["request_headers"] = {"anthropic-beta": bodies.betas}
    # positional, in TraceRecord's field order (a keyword call costs more, once per request)
    record = TraceRecord(request_id or message_id or key, PROVIDER, started if started is not None else stamp,
                         body, response, origin.session(line), agent, ENDPOINT, stamp, stamp,
                         None, extra, origin.source, lineno)
    pending[key] = record


class _Bodies:
    """The requests Claude Code sent, where it logs them (2.1.33x), rebuilt for the next response line.

    Three line types, content-addressed: `api-request-shape` (`shapeHash`, `shape`: the system blocks and
    tools), `api-request-blob` (`hash`, `message`: one message as sent) and `api-request` (`id`, `shapeHash`,
    `params`: model, max_tokens, thinking, betas, …; the messages as `keep` of those of the request `base` then
    the blobs of `tail`, in order; `cacheControl`: [{path, value}], where the breakpoints were). The request is
    answered by the next assistant line: its record carries the body (a request whose shape or a blob is
    missing, or whose response names another model, carries none)."""

    KINDS = ("api-request-shape", "api-request-blob", "api-request")
    _PARAMS = ("max_tokens", "thinking", "context_management", "output_config", "temperature", "top_p", "top_k",
               "tool_choice", "stop_sequences", "metadata", "service_tier")

    __slots__ = ("shapes", "blobs", "sent", "next", "betas", "said_messages", "assistants", "hashed", "active")

    def __init__(self) -> None:
        self.shapes: dict[str, dict[str, Any]] = {}
        self.blobs: dict[str, Any] = {}
        self.sent: dict[str, list[Any]] = {}  # request id -> its messages (a later request keeps some of them)
        self.next: dict[str, Any] | None = None  # the body awaiting its response
        self.betas: str | None = None
        # the transcript's own messages as sent, hashed only when a request names a hash no blob line holds
        # (Claude Code writes blob lines for what the transcript does not already hold)
        self.said_messages: list[dict[str, Any]] = []
        self.assistants: dict[str, dict[str, Any]] = {}  # message id -> the message, its lines' blocks joined
        self.hashed = 0  # said_messages[:hashed] are in blobs
        # from a file's first shape line on: a transcript that logs no requests (every one before 2.1.33x) holds
        # none of its messages here (a folder's worth of them would stay in memory for nothing)
        self.active = False

    def said(self, line: dict[str, Any], role: str) -> None:
        """A user or assistant line: the message as a later request sends it (a string content as one text block;
        an answer's blocks, one per line, joined)."""
        if not self.active:
            return
        message = line.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if role == "user":
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if isinstance(content, list):
                self.said_messages.append({"role": "user", "content": content})
            return
        ident = message.get("id") if isinstance(message, dict) else None
        if not isinstance(content, list) or not isinstance(ident, str):
            return
        held = self.assistants.get(ident)
        if held is None:
            held = self.assistants[ident] = {"role": "assistant", "content": []}
            self.said_messages.append(held)
        held["content"].extend(content)

    def _known(self, wanted: list[Any]) -> bool:
        """Whether every hash is a blob, hashing the transcript's messages said since the last time if not."""
        if all(h in self.blobs for h in wanted):
            return True
        import hashlib

        for message in self.said_messages[self.hashed:]:
            raw = json.dumps(message, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
            self.blobs.setdefault(hashlib.sha256(raw).hexdigest(), message)
        self.hashed = len(self.said_messages)
        return all(h in self.blobs for h in wanted)

    def line(self, kind: str, line: dict[str, Any]) -> None:
        if kind == "api-request-blob":
            if isinstance(line.get("hash"), str) and isinstance(line.get("message"), dict):
                self.blobs[line["hash"]] = line["message"]
        elif kind == "api-request-shape":
            self.active = True
            if isinstance(line.get("shapeHash"), str) and isinstance(line.get("shape"), dict):
                self.shapes[line["shapeHash"]] = line["shape"]
        else:
            self.next = self._body(line)

    def take(self, model: Any) -> dict[str, Any] | None:
        body, self.next = self.next, None
        return body if body is not None and body.get("model") == model else None

    def _body(self, line: dict[str, Any]) -> dict[str, Any] | None:
        params, shape = line.get("params"), self.shapes.get(line.get("shapeHash"))  # type: ignore[arg-type]
        tail, keep = line.get("tail"), line.get("keep")
        if not isinstance(params, dict) or not isinstance(params.get("model"), str) or shape is None \
                or not isinstance(tail, list) or not isinstance(keep, int) or keep < 0:
            return None
        kept = self.sent.get(line.get("base"), []) if keep else []  # type: ignore[arg-type]
        if len(kept) < keep or not self._known(tail):
            return None  # a base or a blob this file does not hold: no body rather than a wrong one
        messages = kept[:keep] + [self.blobs[h] for h in tail]
        if isinstance(line.get("id"), str):
            self.sent[line["id"]] = messages
        body: dict[str, Any] = {"model": params["model"]}
        body.update((k, params[k]) for k in self._PARAMS if k in params)
        if "system" in shape:
            body["system"] = shape["system"]
        if "tools" in shape:
            body["tools"] = shape["tools"]
        body["messages"] = messages
        betas = params.get("betas")
        self.betas = ",".join(b for b in betas if isinstance(b, str)) if isinstance(betas, list) else None
        for mark in line.get("cacheControl") or ():
            if isinstance(mark, dict) and isinstance(mark.get("path"), list) and isinstance(mark.get("value"), dict):
                body = _marked(body, mark["path"], mark["value"])
        return body


def _marked(body: dict[str, Any], path: list[Any], value: dict[str, Any]) -> dict[str, Any]:
    """The body with `cache_control` set on the block at `path` (["messages", 5, "content", 0]), every container
    on the way copied (blobs and shapes are shared by the requests that send them)."""
    out = dict(body)
    holder: Any = out
    for i, step in enumerate(path):
        child = holder[step] if isinstance(holder, dict) and step in holder else \
            holder[step] if isinstance(holder, list) and isinstance(step, int) and -len(holder) <= step < len(holder) \
            else None
        if child is None:
            return body  # a path the body does not have: left unmarked
        if isinstance(child, str) and (i == len(path) - 1 or path[i + 1] == 0):
            # a string content marked: the one text block it is sent as (the API reads them alike)
            child = [{"type": "text", "text": child}]
            if i == len(path) - 1:
                holder[step] = child
                holder = child[0]
                break
        copy = dict(child) if isinstance(child, dict) else list(child) if isinstance(child, list) else child
        holder[step] = copy
        holder = copy
    if isinstance(holder, dict):
        holder["cache_control"] = value
    return out


_ROOT = "_sidechain_root"  # set on an inline sidechain line without agentId: its subagent's first line


def _sidechain_root(roots: dict[str, str], uuid: str, line: dict[str, Any]) -> None:
    """Older transcripts write subagents inline (isSidechain, no agentId), several at once when they run in
    parallel: each one's lines chain back to its own first line, which tells them apart."""
    parent = line.get("parentUuid")
    root = roots.get(parent, uuid) if parent.__class__ is str else uuid
    roots[uuid] = line[_ROOT] = root


def _chain(chains: Chains, uuid: str, line: dict[str, Any], kind: Any) -> None:
    """Every line with a uuid is a link of the chain; user and assistant lines are what the API is sent."""
    parent = line.get("parentUuid")
    if kind == "user" or kind == "assistant":
        message = line.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        result = content.__class__ is list and bool(content) and isinstance(content[0], dict) and \
            content[0].get("type") == "tool_result"
        chains.add(uuid, parent, kind, content, tool_result=result)
    else:
        chains.add(uuid, parent, None, boundary=kind == "system" and line.get("subtype") == "compact_boundary")


def _cleared(message: dict[str, Any]) -> bool:
    """The API cleared old tool results of this request's prompt (context editing: `clear_tool_uses`)."""
    managed = message.get("context_management")
    edits = managed.get("applied_edits") if isinstance(managed, dict) else None
    return isinstance(edits, list) and any(isinstance(e, dict) and "clear" in str(e.get("type", "")) and
                                           (e.get("cleared_tool_uses") or e.get("cleared_input_tokens"))
                                           for e in edits)


# the line's fields copied into extra (source name, kvprobe name); Qwen Code's records carry the same ones
EXTRA_FIELDS = (("cwd", "cwd"), ("gitBranch", "git_branch"), ("version", "client_version"),
                ("promptCacheRequested", "cache_requested"))


def _merge(record: TraceRecord, message: dict[str, Any], usage: dict[str, Any], stamp: float | None) -> None:
    """A later line of the same response: its usage is at least as complete; it ends later."""
    response = record.response or {}
    if _later_usage(response.get("usage") or {}, usage):
        response["usage"] = dict(usage)
    if message.get("stop_reason"):
        response["stop_reason"] = message["stop_reason"]
    if message.get("diagnostics") is not None:
        response["diagnostics"] = message["diagnostics"]
    if stamp is not None:
        record.finished_at = max(record.finished_at or stamp, stamp)


def _later_usage(old: Any, usage: dict[str, Any]) -> bool:
    """Whether a later line's usage replaces the one held: its output count is at least as large."""
    new_out = usage.get("output_tokens")
    old_out = old.get("output_tokens") if isinstance(old, dict) else 0
    plain = new_out.__class__ is int and old_out.__class__ is int and 0 <= new_out < 10**15 and 0 <= old_out < 10**15
    if not plain:  # plain counts (the usual case) compare as they are; anything else as as_int reads it
        new_out, old_out = as_int(new_out), as_int(old_out)
    return new_out >= old_out


_PLATFORM_ID_PREFIXES = (("msg_bdrk_", "bedrock"), ("msg_vrtx_", "vertex"))

ROUTE_LINE = "api-request-route"
# The routes whose name is a platform of providers/ (bedrock.toml, vertex.toml) or one kvprobe names without
# rules of its own (Microsoft Foundry: priced and ruled as Anthropic's API, with that caveat), as Claude Code
# 2.1.337 names them; anthropic, customEndpoint (ANTHROPIC_BASE_URL: a gateway or proxy) and gateway name none
_ROUTE_PLATFORMS = {"bedrock": "bedrock", "vertex": "vertex", "foundry": "foundry"}
_NO_ROUTE = ("", "unrecorded", "other")  # what it writes where the route was not recorded
LOGIN = "login"  # the route's credential where a Claude.ai account signed in (OAuth), not an API key or token


def _platform(message_id: str | None) -> str | None:
    """Bedrock and Vertex AI write their own message ids for the Claude responses they serve."""
    if message_id is not None and not message_id.startswith("msg_0"):
        for prefix, platform in _PLATFORM_ID_PREFIXES:
            if message_id.startswith(prefix):
                return platform
    return None


class _Streams:
    """Events of each stream (main thread, inline sidechains) waiting for that stream's next request."""

    __slots__ = ("events", "tools")

    def __init__(self) -> None:
        self.events: dict[str, Events] = {}
        self.tools: dict[str, set[str]] = {}  # MCP servers whose tools each stream has used

    def _of(self, origin: _Origin, line: dict[str, Any]) -> Events:
        agent = origin.agent(line)
        found = self.events.get(agent)
        if found is None:
            found = self.events[agent] = Events()
        return found

    def note(self, origin: _Origin, line: dict[str, Any], kind: str) -> None:
        """A user or system line: the events it records, if any (most lines are tool results: none)."""
        if kind == "system":
            subtype = line.get("subtype")
            if subtype == "compact_boundary":
                meta = line.get("compactMetadata") if isinstance(line.get("compactMetadata"), dict) else {}
                self._of(origin, line).add("compaction", time_or_none(line.get("timestamp")),
                                           pre_tokens=as_int(meta.get("preTokens")) or None,
                                           trigger=as_str(meta.get("trigger")))
            elif subtype == "local_command":
                self._text(origin, line, line.get("content"))
            return
        message = line.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if content.__class__ is str:
            self._text(origin, line, content)
        elif content.__class__ is list and content and isinstance(content[0], dict) and \
                content[0].get("type") == "text":
            text = content[0].get("text")
            if text.__class__ is str and text.startswith("[Request interrupted by user"):
                self._of(origin, line).add("interrupt", time_or_none(line.get("timestamp")), once=True)

    def _text(self, origin: _Origin, line: dict[str, Any], text: Any) -> None:
        if text.__class__ is not str or not text.startswith("<"):
            return
        stamp = time_or_none(line.get("timestamp"))
        if text.startswith("<task-notification>"):
            self._of(origin, line).add("task_notification", stamp)
        elif text.startswith("<command-name>"):
            name = text[len("<command-name>"):].split("</command-name>", 1)[0].strip()
            if name in _TOOL_COMMANDS:
                self._of(origin, line).add("tools_changed", stamp, detail=name)
            elif name and name not in _HARMLESS_COMMANDS:
                self._of(origin, line).add("command", stamp, name=name)
        elif text.startswith("<local-command-stdout>"):
            events = self._of(origin, line)
            said = text[len("<local-command-stdout>"):].split("</local-command-stdout>", 1)[0].strip()
            last = events.pending[-1] if events.pending else None
            if last is not None and last["kind"] == "tools_changed" and said:
                if said.endswith("dismissed"):  # the dialog closed with nothing changed ("MCP dialog dismissed")
                    events.pending.pop()
                else:
                    last["detail"] = f"{last.get('detail', '')}: {said[:120]}"

    def attach(self, agent: str, extra: dict[str, Any]) -> None:
        """The events waiting for this stream (`agent`, as _Origin.agent names it) go on its request."""
        events = self.events.get(agent)
        if events is not None:
            events.attach(extra)

    def tools_used(self, origin: _Origin, line: dict[str, Any], message: dict[str, Any], extra: dict[str, Any],
                   stamp: float | None) -> None:
        """An MCP server whose tools the stream had not used before: its tools were in this request's list
        (evidence, not proof, that the tool list changed at or before it)."""
        content = message.get("content")
        if content.__class__ is not list:
            return
        for block in content:
            if block.__class__ is dict and block.get("type") == "tool_use":
                name = block.get("name")
                if name.__class__ is str and name.startswith("mcp__"):
                    server = name.split("__")[1] if name.count("__") >= 2 else name
                    used = self.tools.setdefault(origin.agent(line), set())
                    if server not in used:
                        if used:  # the first MCP server of a stream tells nothing about a change
                            extra.setdefault("events", []).append(event("tool_first_used", stamp, name=name))
                        used.add(server)


_TOOL_COMMANDS = ("/mcp",)  # commands that connect, reconnect or drop tool servers
# commands that change nothing the model is sent (shown to the user only)
_HARMLESS_COMMANDS = ("/cost", "/usage", "/help", "/status", "/doctor", "/exit", "/context", "/resume",
                      "/statusline", "/ide", "/login", "/logout", "/bug", "/release-notes", "/compact")
