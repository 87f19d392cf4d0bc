"""HAR 1.2 archives (browser devtools, mitmproxy, Charles, Proxyman exports).

Quirks:
* Only POSTs to model endpoints become records (`/messages`, `/chat/completions`, `/responses`,
  `/completions`, Gemini `:generateContent`); other entries are ignored.
* `response.content.text` may be base64 (`encoding: "base64"`, mitmproxy does this for binary-looking
  bodies); streamed responses are the whole SSE text and are reassembled like the proxy does.
* Headers (API keys included) are never copied; only a few harmless ones (anthropic-beta, ...) are kept, and
  the exact values of the credential headers (x-api-key, Authorization, cookies) and of key parameters in the
  URL are scrubbed from the bodies and the error text, where an upstream may echo them.
* Timings: `started_at` = `startedDateTime`; `first_token_at` adds blocked+dns+connect+send+wait;
  `finished_at` adds `time`. Missing timings (-1) count as 0.
* Ids: the provider's `request-id` header, else `<file stem>#<entry>`. An entry number is no identity across
  files (two exports named session.har): without the header, an entry is a duplicate only when its request,
  response and start equal one already read.
* A HAR file is one JSON document: invalid JSON is an input error (file and line); a malformed entry is a
  counted skip named `entries[i]`.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import orjson

from kvprobe.errors import InputError
from kvprobe.importers.base import Progress, SourceStats, as_str, time_or_none
from kvprobe.importers.formats import SNIFFERS
from kvprobe.request.detect import infer_provider
from kvprobe.trace import TraceRecord
from kvprobe.trace.record import content_key

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

NAME = "har"
_MODEL_PATHS = ("/messages", "/chat/completions", "/responses", "/completions")


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


def _is_model_call(method: str, path: str) -> bool:
    return method.upper() == "POST" and (path.rstrip("/").endswith(_MODEL_PATHS) or "generateContent" in path)


def _headers(raw: Any) -> dict[str, str]:
    out = {}
    for h in raw if isinstance(raw, list) else []:
        if isinstance(h, dict) and isinstance(h.get("name"), str) and isinstance(h.get("value"), str):
            out[h["name"].lower()] = h["value"]
    return out


def _text(holder: Any) -> bytes | None:
    if not isinstance(holder, dict) or not isinstance(holder.get("text"), str):
        return None
    text = holder["text"]
    if holder.get("encoding") == "base64":
        import base64
        import binascii

        try:
            return base64.b64decode(text, validate=False)
        except (binascii.Error, ValueError):
            return None
    return text.encode("utf-8", "surrogatepass")


def _ms(timings: dict[str, Any], *keys: str) -> float:
    total = 0.0
    for k in keys:
        v = timings.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e12:
            total += float(v)
    return total / 1000.0


def _entry(entry: Any, index: int, path: Path, stats: SourceStats) -> TraceRecord | None:
    where = f"entries[{index}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("request"), dict):
        stats.skip("entry without a request object", where)
        return None
    req, resp = entry["request"], entry.get("response") if isinstance(entry.get("response"), dict) else {}
    url, method = as_str(req.get("url")), as_str(req.get("method")) or ""
    if not url:
        stats.skip("entry without request.url", where)
        return None
    parts = urlsplit(url)
    if not _is_model_call(method, parts.path):
        stats.ignored += 1
        return None
    body = _text(req.get("postData"))
    try:
        request = orjson.loads(body) if body else None
    except orjson.JSONDecodeError as exc:
        stats.skip("request body is not JSON", where, str(exc))
        return None
    if not isinstance(request, dict):
        stats.skip("model request without a JSON object body", where)
        return None
    # imported here: `kvprobe usage` and `report` load the importers without the capture proxy's stack
    from kvprobe.capture.assemble import assemble
    from kvprobe.capture.recorder import AGENT_HEADER, KEPT_REQUEST_HEADERS, SESSION_HEADER

    content = resp.get("content") if isinstance(resp.get("content"), dict) else {}
    status = resp.get("status") if isinstance(resp.get("status"), int) else None
    text = _text(content) or b""  # (a base64 body decoded once: assembled here, and keyed below)
    result = assemble(text, as_str(content.get("mimeType")), status)
    started = time_or_none(entry.get("startedDateTime"))
    if started is None:
        stats.skip("entry without a valid startedDateTime", where)
        return None
    timings = entry.get("timings") if isinstance(entry.get("timings"), dict) else {}
    total = entry.get("time") if isinstance(entry.get("time"), (int, float)) else None
    headers, rheaders = _headers(req.get("headers")), _headers(resp.get("headers"))
    error = (f"HTTP {status}" + (f": {result.error}" if result.error else "")) if status and status >= 400 \
        else result.error
    if status == 0:
        error = "no response (request failed or was aborted)"
    endpoint = parts.path
    # the exact credentials this exchange carried (any shape) are scrubbed wherever the response echoes them;
    # and, as capture does, every credential-shaped string of the response: a browser's HAR export drops
    # Authorization and cookies, so a key a 4xx body echoes has no exact value to match
    from kvprobe.secrets import Credentials, redact_secrets, redact_text  # (here: diff asks only the format)

    creds = Credentials().add_headers(headers).add_headers(rheaders).add_url(url)
    request, response = creds.scrub(request), redact_secrets(creds.scrub(result.response or {}))
    error = redact_text(creds.text(error)) if error else error
    extra: dict[str, Any] = {"source_format": NAME, "http_status": status, "stream": result.stream}
    kept = {k: headers[k] for k in KEPT_REQUEST_HEADERS if k in headers}
    if kept:
        extra["request_headers"] = kept
    provider_id = rheaders.get("request-id") or rheaders.get("x-request-id")
    rid = provider_id or f"{path.stem}#{index}"
    # an entry number is local (another export named alike is another session): without the provider's id,
    # the same exchange (request, response and start) in two exports is the same request
    key = None if provider_id else content_key(NAME, b"\0".join([body or b"", text,
                                                                  str(entry.get("startedDateTime")).encode()]))
    first = time_or_none(started + _ms(timings, "blocked", "dns", "connect", "send", "wait"))
    finished = time_or_none(started + total / 1000.0) if total and total > 0 else None
    return TraceRecord(id=rid, provider=infer_provider(request, endpoint, response), started_at=started,
                       request=request, response=response, session=headers.get(SESSION_HEADER),
                       agent=headers.get(AGENT_HEADER), endpoint=endpoint, first_token_at=first,
                       finished_at=finished, error=error,
                       extra=extra, source=str(path), line=index, key=key)


def parse(path: Path, data: bytes | None = None) -> Any:
    """A HAR file's document; InputError naming the line where its JSON breaks (a truncated export)."""
    data = path.read_bytes() if data is None else data
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        body = data.rstrip()
        if exc.pos >= len(body):  # the document just stops: name its last line, not the empty one after it
            raise InputError(f"not valid HAR JSON (cut short? {exc.msg})", file=str(path),
                             line=body.count(b"\n") + 1) from None
        raise InputError(f"not valid HAR JSON ({exc.msg})", file=str(path), line=exc.lineno) from None


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    data = path.read_bytes()
    if progress:
        progress(len(data))
    doc = parse(path, data)
    log = doc.get("log") if isinstance(doc, dict) else None
    entries = log.get("entries") if isinstance(log, dict) else None
    if not isinstance(entries, list):
        raise InputError("expected a HAR 1.2 document with log.entries", file=str(path), field="log.entries")
    for index, entry in enumerate(entries):
        stats.lines += 1
        record = _entry(entry, index, path, stats)
        if record is None:
            continue
        if stats.first_time(record.identity, seen):
            yield record
