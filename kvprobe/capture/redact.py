"""Keep secrets and, on request, all prompt text out of traces.

* `redact_secrets` (kvprobe.secrets) scrubs credentials that agents paste into prompts or tool output:
  provider API keys, bearer tokens, cloud and VCS credentials, private keys. Equal secrets get equal
  placeholders, so cache identity (what diff/report compare) is unchanged by redaction.
* `hash_only` replaces every piece of text by one-token symbols spelling a digest of the text, as many as
  the text had tokens (with the encoding kvprobe counts that model with). Prefix identity, block
  structure, cache markers and token counts survive, so diff, report and what-if still work; the text
  does not. Inline media payloads become `#kvprobe-hash:<digest>`.

HTTP headers never reach a trace at all: the recorder keeps only an allowlist of harmless ones.
"""
from __future__ import annotations

import re
from typing import Any

import xxhash

from kvprobe.catalog import rules_for
from kvprobe.secrets import redact_secrets, redact_text
from kvprobe.tokens import counter_for

__all__ = ["redact_secrets", "redact_text", "HashOnly", "hash_error", "hash_only", "scrub"]

# Strings under these keys are structure, not text: they stay so requests still render and compare.
STRUCTURAL_KEYS = frozenset({
    "model", "role", "type", "id", "tool_use_id", "call_id", "tool_call_id", "name", "ttl", "media_type",
    "stop_reason", "finish_reason", "stop_sequence", "object", "status", "format", "mode", "detail",
    "tool_choice", "cache_control", "prompt_cache_breakpoint", "prompt_cache_key", "prompt_cache_retention",
    "service_tier", "reasoning_effort", "effort", "budget_tokens", "encoding_format", "signature", "usage",
    "stream_options", "response_format", "thinking", "metadata",
})
# Thinking text lives under "thinking" too, but as a string inside a content block, not the parameter.
_TEXT_UNDER_STRUCTURAL = frozenset({"thinking"})
_PAYLOAD_KEYS = frozenset({"data", "image_url", "file_data", "url"})
MARKER_PREFIX = "#kvprobe-hash:"


_SYMBOLS = tuple(" " + c for c in "abcdefghijklmnopqrstuvwxyz")  # one token each in every BPE kvprobe uses
_HASH_SYMBOLS = 14  # 26**14 > 2**64: a text of 14+ tokens keeps its whole 64-bit digest


class HashOnly:
    """Replaces text by digest symbols with the same token count, for one provider and model.

    A text of n tokens becomes n one-token symbols (" k q z ..."): the first ones spell the text's xxh3
    digest in base 26, the rest are " x". Token counts are exact for the encoding kvprobe counts this
    model with; texts of fewer than 14 tokens keep a shorter digest (equal texts always map alike).
    """

    def __init__(self, provider: str | None, model: str | None) -> None:
        self._counter = counter_for(rules_for(provider or "anthropic", model))
        self._memo: dict[str, str] = {}

    def text(self, text: str) -> str:
        if not text:
            return text
        cached = self._memo.get(text)
        if cached is not None:
            return cached
        n = max(self._counter.raw_count(text), 1)
        digest = xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass"))
        symbols = []
        for _ in range(min(n, _HASH_SYMBOLS)):
            digest, rest = divmod(digest, 26)
            symbols.append(_SYMBOLS[rest])
        out = "".join(symbols) + " x" * (n - len(symbols))
        if len(text) > 32:
            self._memo[text] = out
        return out

    def value(self, value: Any, key: str | None = None) -> Any:
        if isinstance(value, str):
            if key in _PAYLOAD_KEYS:
                return f"{MARKER_PREFIX}{xxhash.xxh3_64_hexdigest(value.encode('utf-8', 'surrogatepass'))}"
            return value if key in STRUCTURAL_KEYS and key not in _TEXT_UNDER_STRUCTURAL else self.text(value)
        if isinstance(value, dict):
            if key in STRUCTURAL_KEYS and key != "thinking":
                return value
            return {k: self.value(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, key if key in ("content", "input", "system") else None) for v in value]
        return value


_HTTP_PREFIX = re.compile(r"^HTTP \d{3}\b:?\s*")


def hash_error(error: str | None, hasher: HashOnly) -> str | None:
    """Error text under --hash-only: the status stays readable, the provider's words (which may echo the
    prompt or a key) become digest symbols like any other text."""
    if not error:
        return error
    match = _HTTP_PREFIX.match(error)
    keep = match.group(0) if match else ""
    rest = error[len(keep):]
    return keep + (hasher.text(rest) if rest else "")


def hash_only(body: Any, provider: str | None, model: str | None) -> Any:
    """A request or response body with every text replaced by a same-length-in-tokens digest marker."""
    return HashOnly(provider, model).value(body)


def scrub(record: Any, *, redact: bool = False, hash_only: bool = False) -> None:
    """Apply --redact / --hash-only to a TraceRecord's bodies and error text, in place."""
    if redact:
        record.request, record.response = redact_secrets(record.request), redact_secrets(record.response)
    record.error = redact_text(record.error) if record.error else record.error  # echoed keys: always
    if hash_only:
        hasher = HashOnly(record.provider, record.model)
        record.request = hasher.value(record.request) if record.request is not None else None
        record.response = hasher.value(record.response) if record.response is not None else None
        record.error = hash_error(record.error, hasher)
    if redact or hash_only:
        record.extra["capture"] = {"hash_only": hash_only, "redact": redact}
