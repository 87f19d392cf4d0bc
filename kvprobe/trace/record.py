"""One request of a trace, as stored in a JSON Lines file (docs/contracts.md §1)."""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import xxhash

from kvprobe.errors import InputError
from kvprobe.wording import show

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

FORMAT_VERSION = 1
# Read buffer for JSON Lines logs (traces and agents' logs). Their lines run from KBs to MBs (each request
# resends its history), and with Python's default 8 KB buffer iterating a 1 GB trace took 1.0-2.5 s here,
# with 4 MB 0.3 s.
READ_BUFFER = 1 << 22
KNOWN_KEYS = frozenset(("kvprobe", "id", "session", "agent", "provider", "endpoint", "started_at",
                        "first_token_at", "finished_at", "request", "response", "error"))


@dataclass(slots=True)
class TraceRecord:
    """One request of a trace (docs/contracts.md §1): its body, response, timing and where it was read."""

    id: str
    provider: str | None
    started_at: float | None  # seconds since the epoch (UTC)
    request: dict[str, Any] | None = None
    response: dict[str, Any] | None = None
    session: str | None = None
    agent: str | None = None
    endpoint: str | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys: kept, ignored
    source: str | None = None  # file the record came from
    line: int | None = None  # line number in that file
    offset: int | None = None  # byte offset of that line (to re-read one record without a scan)
    # What tells this request from others across files when `id` is only local (a kvprobe trace's req_1, a
    # Codex turn number): the id with a digest of the record's content. None: `id` is the provider's own.
    key: str | None = None

    @property
    def usage(self) -> dict[str, Any] | None:
        resp = self.response
        if not isinstance(resp, dict):
            return None
        usage = resp.get("usage", resp.get("usageMetadata"))
        return usage if isinstance(usage, dict) else None

    @property
    def identity(self) -> str:
        """The same request logged twice has the same identity (see `key`); the same local id does not."""
        return self.key or self.id

    @property
    def via(self) -> str | None:
        """How an imported request was known when not from its own log line (e.g. a parent's progress line)."""
        via = self.extra.get("via")
        return via if isinstance(via, str) else None

    @property
    def platform(self) -> str | None:
        """Who served the request when not the provider's own API (bedrock, vertex, openrouter, azure, ...): the
        record's own `platform` key (importers and capture set it), else what the endpoint's host or path,
        the response id's prefix (msg_bdrk_, msg_vrtx_) or the model id's form show. None: first-party, or
        nothing says."""
        named = self.extra.get("platform")
        if isinstance(named, str) and named:
            return None if named == self.provider else named
        return _infer_platform()(self.endpoint, self.model, self.response)

    @property
    def model(self) -> str | None:
        """The model the body names; for Gemini, which names it in the URL, the response's `modelVersion` or
        the endpoint's `/models/<model>:…` (as the report renders the request)."""
        for holder in (self.request, self.response):
            if isinstance(holder, dict) and isinstance(holder.get("model"), str):
                return holder["model"]
        response = self.response
        if isinstance(response, dict) and isinstance(response.get("modelVersion"), str):
            return response["modelVersion"]
        endpoint = self.endpoint
        if isinstance(endpoint, str) and "/models/" in endpoint:
            named = endpoint.split("/models/", 1)[1].split("?", 1)[0]
            named = named.split(":", 1)[0].split("/", 1)[0]
            return named or None
        return None

    @property
    def readable_at(self) -> float | None:
        """When entries written by this request become readable: its response began."""
        return self.first_token_at or self.finished_at

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kvprobe": FORMAT_VERSION, "id": self.id}
        for key in ("session", "agent", "provider", "endpoint"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        for key in ("started_at", "first_token_at", "finished_at"):
            value = getattr(self, key)
            if value is not None:
                out[key] = format_time(value)
        if self.request is not None:
            out["request"] = self.request
        if self.response is not None:
            out["response"] = self.response
        if self.error is not None:
            out["error"] = self.error
        out.update(self.extra)
        return out


@lru_cache(maxsize=1)
def _infer_platform() -> Callable[..., str | None]:
    """kvprobe.request.detect's infer_platform (the catalog's `detect` tables, providers/), imported when first
    asked: an import statement in `platform` cost 0.5 us of each request `usage` reads."""
    from kvprobe.request.detect import infer_platform

    return infer_platform


_EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc).timestamp()
_LATEST = dt.datetime(9999, 12, 31, tzinfo=dt.timezone.utc).timestamp()



def content_key(local_id: str, content: bytes) -> str:
    """A local id made an identity across files: the id and a digest of what the record says."""
    return f"{local_id}#{xxhash.xxh3_64_hexdigest(content)}"

def parse_time(value: Any) -> float:
    """RFC 3339 text (or epoch seconds) to epoch seconds; ValueError when it is neither or out of range."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        parsed = dt.datetime.fromisoformat(value.replace("z", "Z"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.timezone.utc)
        seconds = parsed.timestamp()
    else:
        raise ValueError("expected an RFC 3339 timestamp string")
    if not _EARLIEST <= seconds <= _LATEST:  # NaN fails this too
        raise ValueError("timestamp out of range (1970 to 9999)")
    return seconds


def parse_since(value: str | None, field: str) -> float | None:
    """A --since value (RFC 3339) to epoch seconds, None when not given; InputError naming `field` else."""
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError:
        raise InputError(f"expected an RFC 3339 time, got {show(value)}", field=field) from None


def format_time(seconds: float) -> str:
    stamp = dt.datetime.fromtimestamp(seconds, dt.timezone.utc).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")
