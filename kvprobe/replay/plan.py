"""Which recorded requests to replay, when each may start, and which it must wait for.

Requests are replayed in recorded start order with their concurrency: a request waits for every request
that had *finished* before it started in the recording (its turn depended on them), and for its scheduled
time (`real`: the recorded offset, `scaled:X`: the offset times X, `fast`: no waiting). Requests that
overlapped in the recording are in flight together. Records without timestamps run one after another.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kvprobe.errors import InputError
from kvprobe.request import RenderedRequest, render_request
from kvprobe.trace import TraceRecord
from kvprobe.wording import show


@dataclass(frozen=True, slots=True)
class Timing:
    mode: str  # real | scaled | fast
    scale: float  # multiplier on recorded offsets (0 for fast)

    @classmethod
    def parse(cls, value: str) -> Timing:
        text = value.strip().lower()
        if text == "real":
            return cls("real", 1.0)
        if text == "fast":
            return cls("fast", 0.0)
        if text.startswith("scaled:"):
            try:
                scale = float(text.split(":", 1)[1])
            except ValueError:
                scale = -1.0
            if scale >= 0:
                return cls("scaled", scale)
        raise InputError(f"expected real, fast or scaled:X (X >= 0 multiplies recorded gaps), got {show(value)}",
                         field="--timing")

    def __str__(self) -> str:
        return f"scaled:{self.scale:g}" if self.mode == "scaled" else self.mode


@dataclass(slots=True)
class Item:
    index: int
    record: TraceRecord
    rendered: RenderedRequest | None
    api: str  # anthropic_messages | openai_chat | openai_responses
    offset: float  # seconds after the first recorded start
    depends_on: list[int] = field(default_factory=list)  # indices that must finish first
    skip_reason: str | None = None
    max_tokens: int | None = None  # what the recorded request asked for

    @property
    def id(self) -> str:
        return self.record.id


def _requested_max_tokens(body: dict) -> int | None:
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _render(record: TraceRecord) -> tuple[RenderedRequest | None, str | None]:
    if record.request is None:
        return None, "no request body (usage-only record)"
    if record.provider == "gemini":
        return None, "Gemini request bodies are not rendered"
    try:
        return render_request(record.request, record.provider, record.endpoint, record.response), None
    except InputError as exc:
        return None, f"cannot render the request: {exc.message}"


def plan(records: list[TraceRecord]) -> list[Item]:
    """Items in recorded start order (file order breaks ties and orders untimed records)."""
    ordered = sorted(enumerate(records), key=lambda p: (p[1].started_at is None, p[1].started_at or 0.0, p[0]))
    first = next((r.started_at for _, r in ordered if r.started_at is not None), 0.0)
    items: list[Item] = []
    for index, (_, rec) in enumerate(ordered):
        rendered, reason = _render(rec)
        offset = (rec.started_at - first) if rec.started_at is not None else (items[-1].offset if items else 0.0)
        item = Item(index, rec, rendered, rendered.api if rendered else "", max(offset, 0.0), skip_reason=reason,
                    max_tokens=_requested_max_tokens(rec.request) if rec.request else None)
        item.depends_on = _dependencies(items, rec)
        items.append(item)
    return items


def _dependencies(earlier: list[Item], rec: TraceRecord) -> list[int]:
    if rec.started_at is None:
        return [i.index for i in earlier[-1:]]  # untimed: one after another
    deps = []
    for item in earlier:
        done = item.record.finished_at or item.record.first_token_at
        if item.record.started_at is None or done is None or done <= rec.started_at:
            deps.append(item.index)
    return deps
