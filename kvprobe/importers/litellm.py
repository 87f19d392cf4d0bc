"""LiteLLM request logs: StandardLoggingPayload objects (custom callbacks, s3/gcs/file loggers; bare or
under `standard_logging_object`), one per line, or rows of the proxy's spend logs table exported as JSON
Lines (`request_id`, `spend`, `startTime`, ...).

Quirks:
* Usage is LiteLLM's OpenAI-shaped object: `prompt_tokens` includes cached tokens; Anthropic calls add
  `cache_read_input_tokens` / `cache_creation_input_tokens`. Older LiteLLM versions left cache writes out
  of `prompt_tokens`: when prompt < read + write the prompt figure is taken as the uncached part.
* `cache_hit` is LiteLLM's own response cache, not the provider's prompt cache: such calls never reached the
  provider and are skipped. Failed calls without usage are skipped; embeddings and other non-chat calls are
  ignored.
* `messages` + `model_parameters` become the request body only for OpenAI-format providers (LiteLLM logs
  the OpenAI-format input, not what it sent to Anthropic); otherwise the record is usage-only. Parameters of
  LiteLLM's client (`api_key`, `api_base`, `extra_headers`, ...) are never copied, and their credential
  values (a key, a URL's password) are scrubbed from the messages, the response and the error text.
* Spend-log rows keep usage in `metadata.usage_object` (newer) or only top-level token counts (no cache split).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import orjson

from kvprobe.importers.base import BadCount, Progress, SourceStats, as_str, first_count, iter_objects, time_or_none
from kvprobe.importers.formats import SNIFFERS
from kvprobe.request.detect import infer_provider
from kvprobe.trace import TraceRecord

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any
    from kvprobe.secrets import Credentials

NAME = "litellm"
_CHAT_CALLS = {"completion": "/v1/chat/completions", "acompletion": "/v1/chat/completions",
               "text_completion": "/v1/completions", "atext_completion": "/v1/completions",
               "responses": "/v1/responses", "aresponses": "/v1/responses",
               "anthropic_messages": "/v1/messages", "aanthropic_messages": "/v1/messages"}
_LITELLM_PROVIDERS = {"openai": "openai", "azure": "openai", "text-completion-openai": "openai",
                      "anthropic": "anthropic", "deepseek": "deepseek", "gemini": "gemini"}


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


def _json_field(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    return value


def _native_usage(provider: str | None, u: dict[str, Any]) -> dict[str, Any]:
    """LiteLLM's usage in the provider's own shape; BadCount for a count that is none."""
    prompt = first_count(u, "prompt_tokens", "input_tokens", prefix="usage.")  # LiteLLM spells some two ways
    details = u.get("prompt_tokens_details") if isinstance(u.get("prompt_tokens_details"), dict) else {}
    read = first_count(u, "cache_read_input_tokens", prefix="usage.") or \
        first_count(details, "cached_tokens", prefix="usage.prompt_tokens_details.")
    write = first_count(u, "cache_creation_input_tokens", prefix="usage.") or \
        first_count(details, "cache_creation_tokens", prefix="usage.prompt_tokens_details.")
    out = first_count(u, "completion_tokens", "output_tokens", prefix="usage.")
    if provider == "anthropic":
        usage = {"input_tokens": prompt - read - write if prompt >= read + write else prompt,
                 "cache_read_input_tokens": read, "cache_creation_input_tokens": write, "output_tokens": out}
        if isinstance(u.get("cache_creation"), dict):
            usage["cache_creation"] = u["cache_creation"]
        return usage
    if provider == "deepseek" and "prompt_cache_hit_tokens" in u:
        hit = first_count(u, "prompt_cache_hit_tokens", prefix="usage.")
        miss = first_count(u, "prompt_cache_miss_tokens", prefix="usage.")
        return {"prompt_tokens": prompt, "prompt_cache_hit_tokens": hit, "prompt_cache_miss_tokens": miss,
                "completion_tokens": out}
    total = prompt if prompt >= read + write else prompt + read + write
    details_out: dict[str, Any] = {"cached_tokens": read}
    if write:
        details_out["cache_write_tokens"] = write
    return {"prompt_tokens": total, "completion_tokens": out, "prompt_tokens_details": details_out}


# model_parameters that configure LiteLLM's client, not the provider's request body: never copied (a key, a
# base URL with a password, auth headers), and their values scrubbed wherever else they appear
_CLIENT_PARAMS = frozenset({"api_key", "api_base", "base_url", "api_version", "extra_headers", "headers",
                            "organization", "aws_access_key_id", "aws_secret_access_key", "aws_session_token",
                            "vertex_credentials", "azure_ad_token"})
_SECRET_PARAM = re.compile(r"(?i)api_?key|secret|password|credential|access_token|auth")


def _body_params(params: dict[str, Any]) -> tuple[dict[str, Any], Credentials]:
    """The request-body parameters of model_parameters, and the credentials found among the others."""
    from kvprobe.secrets import Credentials  # (here: diff only asks this module about a file's format)

    creds = Credentials()
    body = {}
    for name, value in params.items():
        if name not in _CLIENT_PARAMS and not _SECRET_PARAM.search(name):
            body[name] = value
            continue
        if isinstance(value, dict):
            creds.add_headers({str(k): v for k, v in value.items()})
        elif name in ("api_base", "base_url"):
            creds.add_url(value)
        else:
            creds.add(value)
    return body, creds


def _provider(p: dict[str, Any], model: str | None) -> str | None:
    by_model = infer_provider({"model": model}) if model else None
    named = _LITELLM_PROVIDERS.get(str(p.get("custom_llm_provider") or "").lower())
    return by_model or named or ("openai" if model else None)


def _usage_of(p: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any] | None:
    response = _json_field(p.get("response"))
    if isinstance(response, dict) and isinstance(response.get("usage"), dict):
        return response["usage"]
    if isinstance(metadata.get("usage_object"), dict):
        return metadata["usage_object"]
    if any(p.get(k) not in (None, 0) for k in ("prompt_tokens", "completion_tokens")):  # 0 and 0: a failed call
        return {"prompt_tokens": p.get("prompt_tokens"), "completion_tokens": p.get("completion_tokens")}
    return None


def _record(p: dict[str, Any], stats: SourceStats, lineno: int) -> TraceRecord | None:
    call_type = str(p.get("call_type") or "acompletion")
    endpoint = _CHAT_CALLS.get(call_type)
    if endpoint is None:
        stats.ignored += 1
        return None
    if p.get("cache_hit") is True:
        stats.skip("served from LiteLLM's own response cache (no provider call)", lineno)
        return None
    rid = as_str(p.get("id")) or as_str(p.get("request_id"))
    if not rid:
        stats.skip("no id / request_id", lineno)
        return None
    metadata = _json_field(p.get("metadata"))
    metadata = metadata if isinstance(metadata, dict) else {}
    usage = _usage_of(p, metadata)
    error = as_str(p.get("error_str")) or (f"status {p['status']}" if p.get("status") == "failure" else None)
    if usage is None:
        stats.skip("failed call without usage" if error else "no usage", lineno)
        return None
    model = as_str(p.get("model")) or as_str(p.get("model_group"))
    provider = _provider(p, model)
    try:
        response = {"model": model, "usage": _native_usage(provider, usage)}
    except BadCount as exc:
        stats.skip("invalid usage", lineno, str(exc))
        return None
    request = None
    messages = _json_field(p.get("messages"))
    params = _json_field(p.get("model_parameters"))
    params, creds = _body_params(params if isinstance(params, dict) else {})
    if provider in ("openai", "deepseek") and endpoint == "/v1/chat/completions" and isinstance(messages, list):
        request = creds.scrub({"model": model, "messages": messages, **params})
    from kvprobe.secrets import redact_text

    response, error = creds.scrub(response), redact_text(creds.text(error)) if error else error
    session = as_str(p.get("session_id")) or as_str(metadata.get("session_id")) or as_str(p.get("trace_id"))
    extra: dict[str, Any] = {"source_format": NAME}
    cost = p.get("response_cost", p.get("spend"))
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        extra["logged_cost_usd"] = cost
    return TraceRecord(id=rid, provider=provider, started_at=time_or_none(p.get("startTime")),
                       request=request, response=response, session=session,
                       agent=as_str(metadata.get("agent")) or as_str(p.get("end_user")), endpoint=endpoint,
                       first_token_at=time_or_none(p.get("completionStartTime")),
                       finished_at=time_or_none(p.get("endTime")), error=error, extra=extra)


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    for lineno, line in iter_objects(path, stats, progress):
        payload = line.get("standard_logging_object") if isinstance(line, dict) else None
        payload = payload if isinstance(payload, dict) else line
        if not isinstance(payload, dict):
            stats.skip("line is not a JSON object", lineno)
            continue
        record = _record(payload, stats, lineno)
        if record is None:
            continue
        if not stats.first_time(record.id, seen):
            continue
        record.source, record.line = str(path), lineno
        yield record
