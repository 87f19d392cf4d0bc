"""Turn one observed HTTP exchange into a trace record and append it (one atomic line).

Shared by the proxy and the in-process httpx hook. Only an allowlist of headers is ever kept, so API keys
and auth headers cannot reach a trace; `redact` and `hash_only` scrub bodies before they are written.
"""
from __future__ import annotations

import itertools
import logging
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kvprobe.capture.assemble import assemble, decode_body
from kvprobe.capture.redact import HashOnly, hash_error, redact_secrets, redact_text
from kvprobe.request import model_from_endpoint
from kvprobe.request.detect import infer_provider
from kvprobe.secrets import Credentials
from kvprobe.errors import InputError
from kvprobe.trace import TraceRecord, TraceWriter
from kvprobe.trace.writer import line_of
from kvprobe.trace.validate import response_usage_problem

log = logging.getLogger("kvprobe.capture")
SESSION_HEADER = "x-kvprobe-session"
AGENT_HEADER = "x-kvprobe-agent"
SESSION_ENV, AGENT_ENV = "KVPROBE_SESSION", "KVPROBE_AGENT"
# Request headers worth keeping: they change what the provider caches or bills. Nothing else is stored.
KEPT_REQUEST_HEADERS = ("anthropic-version", "anthropic-beta", "openai-beta", "x-grok-conv-id")
REQUEST_ID_HEADERS = ("request-id", "x-request-id", "x-amzn-requestid")
# The calls that reach a model (and so its cache), by how their path ends: Anthropic Messages, OpenAI Chat and
# Responses, Gemini (and Vertex's publishers/google), Vertex's Claude (rawPredict), Bedrock's InvokeModel, a
# Gemini context cache's creation. Everything else (model lists, token counts, embeddings, batches, files) is
# forwarded and counted, not recorded: it writes no cache entry and no trace reader could render its body.
MODEL_CALL_ENDS = ("/messages", "/chat/completions", "/responses", ":generateContent", ":streamGenerateContent",
                   ":rawPredict", ":streamRawPredict", "/invoke", "/invoke-with-response-stream", "/cachedContents")


# A client that left while the upstream was answering: the upstream had read the prompt (its answer had begun),
# so the call reached the model and wrote its cache, as `serve` records one (`client_disconnected`, no error)
CLIENT_LEFT = "client disconnected before the response ended"


@dataclass(slots=True)
class Exchange:
    """What one request/response looked like on the wire."""

    method: str
    path: str  # upstream path, e.g. /v1/messages
    request_headers: dict[str, str]  # lower-case names
    request_body: bytes
    started_at: float
    provider_hint: str | None = None
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: bytearray = field(default_factory=bytearray)  # as received (content-encoded)
    first_byte_at: float | None = None
    finished_at: float | None = None
    transport_error: str | None = None  # timeout, reset, client gone, interrupted
    platform: str | None = None  # who serves it when not the provider's own API (vertex, bedrock)


@dataclass(slots=True)
class CaptureStats:
    recorded: int = 0  # written to the trace
    not_recorded: int = 0  # not a JSON model request (GET /v1/models, count_tokens, ...)
    errors: int = 0  # recorded with an error
    lost: list[str] = field(default_factory=list)  # ids of records the trace could not take (a full disk)
    lost_reason: str | None = None  # the first write error


class Recorder:
    """Appends one record per model request to a JSONL trace; thread-safe."""

    def __init__(self, out: str | Path, *, session: str | None = None, agent: str | None = None,
                 redact: bool = False, hash_only: bool = False, replace: bool = False,
                 client: str | None = None) -> None:
        self.path = Path(out)
        self.client = client  # the program capture runs (`claude`): whose knobs a miss is advised in
        self.session = session if session is not None else os.environ.get(SESSION_ENV) or None
        self.agent = agent if agent is not None else os.environ.get(AGENT_ENV) or None
        self.redact, self.hash_only = redact, hash_only
        self.stats = CaptureStats()
        self._run = secrets.token_hex(3)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._writer = TraceWriter(self.path, replace=replace)
        self._closed = False

    def close(self) -> None:
        """Close the trace file (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._writer.close()

    def next_id(self) -> str:
        with self._lock:
            return f"req_{self._run}_{next(self._ids):04d}"

    def record(self, ex: Exchange) -> TraceRecord | None:
        """Build the exchange's record and append it; None when it is not a model request."""
        line = b""
        try:
            record = build_record(ex, self)
            if record is not None:
                line = line_of(record)  # an unwritable body (nested too deep) fails here, before writing
        except Exception as exc:  # never lose a request to a body kvprobe cannot make sense of
            record = _fallback_record(ex, self, exc)
            try:
                line = line_of(record) if record is not None else b""
            except InputError as unwritable:  # the request body itself cannot be written: keep its model only
                record = _fallback_record(ex, self, unwritable)
                line = line_of(record) if record is not None else b""
        with self._lock:
            if record is None:
                self.stats.not_recorded += 1
                return None
        try:
            self._writer.append_line(line)  # whole or not at all
        except OSError as exc:  # a full disk: counted and named, never a traceback in the proxy
            self._lost(record, exc)
            return None
        with self._lock:
            self.stats.recorded += 1
            self.stats.errors += record.error is not None
        return record

    def _lost(self, record: TraceRecord, exc: OSError) -> None:
        with self._lock:
            self.stats.lost.append(record.id)
            first = self.stats.lost_reason is None
            if first:
                self.stats.lost_reason = exc.strerror or str(exc)
        if first:  # once: the agent goes on, and so does the proxy
            log.warning("kvprobe capture: cannot write %s to %s (%s): the request was forwarded but not "
                        "recorded; the trace stays valid, and the lost records are named at the end",
                        record.id, self.path, exc.strerror or exc)


def _fallback_record(ex: Exchange, rec: Recorder, exc: Exception) -> TraceRecord | None:
    request = _request_json(ex)
    if request is None:
        return None
    if rec.hash_only or rec.redact or isinstance(exc, InputError):  # InputError: the body cannot be written
        request = {"model": request.get("model")} if isinstance(request.get("model"), str) else {}
    creds = credentials_of(ex)
    return TraceRecord(id=rec.next_id(), provider=ex.provider_hint, started_at=ex.started_at,
                       request=creds.scrub(request),
                       response={}, session=ex.request_headers.get(SESSION_HEADER) or rec.session,
                       agent=ex.request_headers.get(AGENT_HEADER) or rec.agent, endpoint=ex.path.split("?")[0],
                       first_token_at=ex.first_byte_at, finished_at=ex.finished_at,
                       error=redact_text(creds.text(
                           f"kvprobe could not record this exchange: {type(exc).__name__}: {exc}")),
                       extra={"http_status": ex.status})


def credentials_of(ex: Exchange) -> Credentials:
    """The credential values the request carried: its auth headers' values and its URL's key parameters."""
    return Credentials().add_headers(ex.request_headers).add_url(ex.path)


def is_model_call(method: str, path: str) -> bool:
    return method.upper() == "POST" and path.split("?", 1)[0].rstrip("/").endswith(MODEL_CALL_ENDS)


def _request_json(ex: Exchange) -> dict[str, Any] | None:
    if not is_model_call(ex.method, ex.path):
        return None
    try:
        body = orjson.loads(decode_body(ex.request_body, ex.request_headers.get("content-encoding")))
    except (orjson.JSONDecodeError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def _response_part(ex: Exchange) -> tuple[dict[str, Any] | None, str | None, bool]:
    """The reassembled response, and the provider's error (HTTP status and its message), if any."""
    headers = ex.response_headers
    try:
        body = decode_body(bytes(ex.response_body), headers.get("content-encoding"))
    except (ValueError, Exception) as exc:  # zlib.error on a cut gzip stream
        return None, f"response body could not be decoded: {exc}", False
    result = assemble(body, headers.get("content-type"), ex.status)
    if ex.status is not None and ex.status >= 400:
        return result.response, f"HTTP {ex.status}" + (f": {result.error}" if result.error else ""), result.stream
    return result.response, result.error, result.stream


def _checked_usage(response: dict[str, Any] | None, extra: dict[str, Any]) -> str | None:
    """Keep a malformed upstream usage out of the record's usage (kept aside, with the reason as error)."""
    problem = response_usage_problem(response)
    if problem is None or response is None:
        return None
    for key in ("usage", "usageMetadata"):
        if key in response:
            extra.setdefault("upstream_invalid_usage", {})[key] = response.pop(key)
    return f"upstream sent invalid usage: {problem[0]}: {problem[1]}"


def _error_text(parts: list[str | None]) -> str | None:
    return "; ".join(p for p in parts if p) or None


def build_record(ex: Exchange, rec: Recorder) -> TraceRecord | None:
    request = _request_json(ex)
    if request is None:
        return None
    response, upstream_error, stream = _response_part(ex)
    extra: dict[str, Any] = {"http_status": ex.status, "stream": stream}
    if rec.client:
        extra["client"] = rec.client
    usage_error = _checked_usage(response, extra)
    endpoint = ex.path.split("?")[0]
    model = request.get("model") if isinstance(request.get("model"), str) else model_from_endpoint(endpoint)
    provider = infer_provider(request if "model" in request else {**request, "model": model}, endpoint,
                              response) or ex.provider_hint
    if ex.provider_hint == "deepseek" and provider == "openai":
        provider = "deepseek"
    # the exact key this request carried, whatever its shape, goes nowhere: an upstream may echo it anywhere
    creds = credentials_of(ex)
    request, response, extra = creds.scrub(request), creds.scrub(response), creds.scrub(extra)
    upstream_error = redact_text(creds.text(upstream_error)) if upstream_error else None  # echoed keys: always
    if rec.redact or (ex.status or 0) >= 400:  # an error body can echo a key too
        request, response = (redact_secrets(request) if rec.redact else request), redact_secrets(response)
    if rec.hash_only:
        hasher = HashOnly(provider, model)
        request = hasher.value(request)
        response = hasher.value(response) if response is not None else None
        upstream_error = hash_error(upstream_error, hasher)
    if response is None:
        response = {}
    transport = ex.transport_error
    if transport == CLIENT_LEFT and ex.response_body and (ex.status or 0) < 400:
        extra["client_disconnected"], transport = True, None  # (CLIENT_LEFT: a call that reached the model)
    error = _error_text([upstream_error, usage_error, creds.text(transport or "")])
    kept = {k: ex.request_headers[k] for k in KEPT_REQUEST_HEADERS if k in ex.request_headers}
    if kept:
        extra["request_headers"] = kept
    for name in REQUEST_ID_HEADERS:
        if name in ex.response_headers:
            extra["upstream_request_id"] = ex.response_headers[name]
            break
    if rec.hash_only or rec.redact:
        extra["capture"] = {"hash_only": rec.hash_only, "redact": rec.redact}
    if ex.platform is not None:
        extra["platform"] = ex.platform
    return TraceRecord(
        id=rec.next_id(), provider=provider, started_at=ex.started_at, request=request, response=response,
        session=ex.request_headers.get(SESSION_HEADER) or rec.session,
        agent=ex.request_headers.get(AGENT_HEADER) or rec.agent, endpoint=endpoint,
        first_token_at=ex.first_byte_at, finished_at=ex.finished_at, error=error, extra=extra)
