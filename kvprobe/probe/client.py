"""One streamed request through the provider's official SDK, timed, with usage exactly as returned.

Unknown values stay None (never 0). An error stops the request and keeps whatever usage had arrived.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Outcome:
    case: str
    requested_model: str
    returned_model: str | None = None
    usage: dict[str, Any] | None = None
    first_text_s: float | None = None
    request_s: float | None = None
    stop_reason: str | None = None
    complete: bool = False
    error: str | None = None
    text: str = ""
    started_at: float = 0.0
    first_token_at: float | None = None
    finished_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _plain(obj: Any) -> Any:
    if obj is None or isinstance(obj, (int, float, str, bool)):
        return obj
    if hasattr(obj, "model_dump"):
        return obj.model_dump(exclude_none=True)
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items() if v is not None}
    return obj


def _merge(usage: dict[str, Any] | None, update: dict[str, Any]) -> dict[str, Any]:
    merged = dict(usage or {})
    merged.update({k: v for k, v in update.items() if v is not None})
    return merged


def run_anthropic(client: Any, case: str, body: dict[str, Any], secret: str | None) -> Outcome:
    out = Outcome(case, body["model"], started_at=time.time())
    t0 = time.perf_counter()
    kwargs = {k: v for k, v in body.items() if k != "stream"}
    try:
        with client.messages.stream(**kwargs) as stream:
            for event in stream:
                kind = getattr(event, "type", "")
                if kind == "message_start":
                    out.returned_model = event.message.model
                    out.usage = _merge(out.usage, _plain(event.message.usage))
                    _keep_diagnostics(out, event.message)
                elif kind == "content_block_delta" and getattr(event.delta, "type", "") == "text_delta":
                    if out.first_text_s is None:
                        out.first_text_s = time.perf_counter() - t0
                        out.first_token_at = time.time()
                    out.text += event.delta.text
                elif kind == "message_delta":
                    out.usage = _merge(out.usage, _plain(event.usage))
                    out.stop_reason = event.delta.stop_reason or out.stop_reason
            final = stream.get_final_message()
            out.usage = _merge(out.usage, _plain(final.usage))
            out.returned_model = final.model
            out.stop_reason = final.stop_reason
            out.complete = True
    except Exception as exc:  # an SDK or transport error ends this request; the probe stops
        out.error = scrub(f"{type(exc).__name__}: {exc}", secret)
    out.request_s = time.perf_counter() - t0
    out.finished_at = time.time()
    return out


def _keep_diagnostics(out: Outcome, message: Any) -> None:
    """The response id, and the API's cache diagnostics when the response carries them (sent with
    message_start; `null` means no divergence, so presence is what counts)."""
    out.extra["message_id"] = getattr(message, "id", None)
    if "diagnostics" in (getattr(message, "model_fields_set", None) or ()):
        diag = message.diagnostics
        out.extra["diagnostics"] = diag.model_dump() if hasattr(diag, "model_dump") else diag


def run_openai(client: Any, case: str, body: dict[str, Any], secret: str | None) -> Outcome:
    out = Outcome(case, body["model"], started_at=time.time())
    t0 = time.perf_counter()
    try:
        stream = client.chat.completions.create(**body)
        for chunk in stream:
            out.returned_model = chunk.model or out.returned_model
            if chunk.usage is not None:
                out.usage = _plain(chunk.usage)
            for choice in chunk.choices or []:
                text = getattr(choice.delta, "content", None)
                if text:
                    if out.first_text_s is None:
                        out.first_text_s = time.perf_counter() - t0
                        out.first_token_at = time.time()
                    out.text += text
                if choice.finish_reason:
                    out.stop_reason = choice.finish_reason
        out.complete = out.stop_reason is not None
        if not out.complete:
            out.error = "the stream ended without a finish reason"
    except Exception as exc:  # an SDK or transport error ends this request; the probe stops
        out.error = scrub(f"{type(exc).__name__}: {exc}", secret)
    out.request_s = time.perf_counter() - t0
    out.finished_at = time.time()
    return out


def scrub(text: str, secret: str | None) -> str:
    """Never let a key reach output or disk, even inside an error message."""
    return text.replace(secret, "[REDACTED]") if secret else text
