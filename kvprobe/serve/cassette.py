"""`serve --responses-from TRACE`: answer each request with the recorded response of its matching request.

Record an agent once against the real API (`kvprobe capture`), keep the trace, and serve it back: the agent
gets the same answers (tool calls included, so it follows its recorded path) while the usage of each request
is computed for the request it really sent (emulated or by the engine). That makes a cost gate on a real agent
deterministic, keyless and free in CI.

How a request is matched:

1. Records are grouped into **lanes** by API and model (an agent's router or title model is its own lane);
   records that failed (an `error`, no response) are left out and counted.
2. Within its lane a request is compared with every record by its **conversation**: the message-level
   blocks (user and assistant turns, tool calls and results) as kvprobe renders them, each by its own content
   hash. Tools and the system prompt are left out on purpose, so a changed tool description or system prompt
   (what a CI gate is for) still finds its turn. The record sharing the longest run of leading messages wins;
   an unused record beats one already served, then the earlier record (turn order).
3. The kind of match: `exact` (the same messages), `diverged` (the best record differs from the request at
   `diverged_at`, the first message block it does not share: its answer is served anyway, so the agent stays
   on its recorded path as far as it can), or `unmatched` (no record in the lane is left: the engine's own
   output answers, as without a cassette). A record answers once, or again only the very same request (a
   client's retry).

Every answer says its match in the response's `kvprobe.cassette` object, which the trace (`-o`) keeps; the
counts are in `/health` and in the line `serve` prints when it stops.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.errors import InputError
from kvprobe.request import render_request
from kvprobe.request.detect import infer_api, infer_provider
from kvprobe.request.model import RenderedRequest
from kvprobe.trace import ReadStats, TraceRecord, read_trace

_APIS = {"anthropic_messages": "anthropic", "openai_chat": "openai_chat", "openai_responses": "openai_responses"}


@dataclass(slots=True)
class Recorded:
    """One recorded answer: the response body as the provider sent it (its API's shape)."""

    record_id: str
    api: str
    response: dict[str, Any]
    conversation: list[tuple[int, str]]  # (body hash, block path) of each message-level block
    turn: int  # its place in its lane
    served: int = 0  # times it answered a request


@dataclass(frozen=True, slots=True)
class Match:
    kind: str  # exact | diverged | unmatched
    lane: str
    record: str | None = None
    turn: int | None = None
    diverged_at: str | None = None
    repeat: bool = False  # the record had answered a request before

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"match": self.kind, "lane": self.lane, "record": self.record, "turn": self.turn}
        if self.kind == "diverged":
            out["diverged_at"] = self.diverged_at
        if self.repeat:
            out["repeat"] = True
        return out


@dataclass(slots=True)
class CassetteStats:
    records: int = 0
    skipped: int = 0  # failed or unreadable records: never served
    exact: int = 0
    diverged: int = 0
    unmatched: int = 0

    def count(self, kind: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)

    def to_json(self) -> dict[str, Any]:
        asked = self.exact + self.diverged + self.unmatched
        return {"records": self.records, "skipped": self.skipped, "exact": self.exact, "diverged": self.diverged,
                "unmatched": self.unmatched, "exact_rate": round(self.exact / asked, 4) if asked else None}


def conversation(request: RenderedRequest) -> list[tuple[int, str]]:
    """The message-level blocks of a request, each by its own (unchained) content hash."""
    return [(b.body_hash, b.path) for b in request.blocks if b.level == "messages"]


def api_of(provider: str | None, body: dict[str, Any], endpoint: str | None) -> str | None:
    """Which of serve's APIs a recorded request used."""
    if provider == "gemini" or (endpoint and "generateContent" in endpoint) or "contents" in body:
        return "gemini"
    return _APIS.get(infer_api(body, provider or "openai", endpoint))


def lane_of(api: str, model: str | None) -> str:
    return f"{api} {model or '?'}"


@dataclass(slots=True)
class Cassette:
    path: Path
    lanes: dict[str, list[Recorded]] = field(default_factory=dict)
    stats: CassetteStats = field(default_factory=CassetteStats)

    @classmethod
    def load(cls, path: str | Path) -> Cassette:
        """Read a trace's answered requests (InputError: not a readable trace, or nothing in it to serve)."""
        cassette, read = cls(Path(path)), ReadStats()
        for record in read_trace(path, strict=False, stats=read, check_duplicates=False):
            cassette._add(record)
        cassette.stats.skipped += read.skipped
        if not cassette.stats.records:
            raise InputError("holds no answered request to serve back (every record failed, or none has a "
                             "request and a response)", file=str(path), field="--responses-from")
        return cassette

    def _add(self, record: TraceRecord) -> None:
        body, response = record.request, record.response
        if not isinstance(body, dict) or not isinstance(response, dict) or record.error or response.get("error"):
            self.stats.skipped += 1
            return
        provider = record.provider or infer_provider(body, record.endpoint, response)
        api = api_of(provider, body, record.endpoint)
        try:
            rendered = render_request(body, provider, record.endpoint, response)
        except InputError:
            rendered = None
        if api is None or rendered is None:
            self.stats.skipped += 1
            return
        lane = self.lanes.setdefault(lane_of(api, rendered.model), [])
        lane.append(Recorded(record.id, api, response, conversation(rendered), len(lane)))
        self.stats.records += 1

    def match(self, api: str, request: RenderedRequest) -> tuple[Match, Recorded | None]:
        """The recorded answer for a request (see the module docstring), counted in `stats`."""
        lane = lane_of(api, request.model)
        asked = conversation(request)
        best, best_key = None, None
        for rec in self.lanes.get(lane, ()):
            shared = _shared(asked, rec.conversation)
            exact = shared == len(asked) == len(rec.conversation)
            if rec.served and not exact:
                continue  # an answer is served again only to the same request (a client's retry)
            key = (shared, exact, rec.served == 0, -rec.turn)
            if best_key is None or key > best_key:
                best, best_key = rec, key
        if best is None:
            self.stats.count("unmatched")
            return Match("unmatched", lane), None
        shared, exact = best_key[0], best_key[1]
        where = None if exact else (asked[shared][1] if shared < len(asked) else "(the end of the conversation)")
        match = Match("exact" if exact else "diverged", lane, best.record_id, best.turn, where, best.served > 0)
        best.served += 1
        self.stats.count(match.kind)
        return match, best


def _shared(a: list[tuple[int, str]], b: list[tuple[int, str]]) -> int:
    n = 0
    for (x, _), (y, _) in zip(a, b):
        if x != y:
            break
        n += 1
    return n
