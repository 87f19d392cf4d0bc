"""Keep secrets and, on request, all prompt text out of traces.

* `redact_secrets` scrubs credentials that agents paste into prompts or tool output: provider API keys,
  bearer tokens, cloud and VCS credentials, private keys. Equal secrets get equal placeholders, so cache
  identity (what diff/report compare) is unchanged by redaction.
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
from kvprobe.tokens import counter_for

_SECRET_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("anthropic", re.compile(r"sk-ant-[A-Za-z0-9_\-]{16,}")),
    ("openai", re.compile(r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}")),
    # short or masked keys echoed in error messages ("Incorrect API key provided: sk-abc1***")
    ("key", re.compile(r"\bsk-(?=[A-Za-z0-9_\-*]*\d)[A-Za-z0-9_\-*]{6,}")),
    ("aws-id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}\b")),
    ("aws-cred", re.compile(r"(?i)(aws_secret_access_key|aws_session_token)(\s*[=:]\s*[\"']?)[A-Za-z0-9/+=]{20,}")),
    ("google", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b")),
    ("github", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})\b")),
    ("slack", re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}\b")),
    ("stripe", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b")),
    ("private-key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    ("bearer", re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9_\-\.=~+/]{16,}")),
    # A value named as a credential (a header echoed in an error, key=... in a URL or log line) is scrubbed
    # whatever its length or shape: the name says what it is.
    ("header", re.compile(r"(?i)((?:\b|_)(?:x-api-key|api-key|x-goog-api-key|authorization|proxy-authorization|"
                          r"cookie|set-cookie)[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token)\s+)?)"
                          r"([^\s\"',;&]+)")),
    ("credential", re.compile(r"(?i)((?:\b|_)(?:password|passwd|api[_-]?key|secret|token|access[_-]?token)"
                              r"[\"']?\s*[=:]\s*[\"']?)([^\s\"',;&]+)")),
    ("credential", re.compile(r"(?i)((?:\b|_)key\s*=\s*[\"']?)([^\s\"',;&]+)")),  # ?key=... (Gemini-style)
]
_KEEP_GROUPS = {"aws-cred", "bearer", "credential", "header"}  # keep the "name = " part, scrub the value
_QUICK = re.compile(r"sk-|AKIA|ASIA|AGPA|AIDA|AROA|AIza|gh[pousr]_|github_pat_|xox|_live_|_test_|PRIVATE KEY|eyJ|"
                    r"(?i:bearer|secret|passw|key|token|aws_|authorization|cookie)")


def _placeholder(kind: str, secret: str) -> str:
    return f"[REDACTED:{kind}#{xxhash.xxh3_64_hexdigest(secret.encode('utf-8', 'surrogatepass'))[:8]}]"


def _scrub(kind: str, match: re.Match[str]) -> str:
    if kind in ("header", "credential"):  # keep "x-api-key: " / "key=", scrub the value
        value = match.group(2)
        if value.startswith("[REDACTED:"):  # already scrubbed by a more specific pattern
            return match.group(0)
        return match.group(1) + _placeholder(kind, value)
    if kind in _KEEP_GROUPS:  # keep "aws_secret_access_key = " / "Bearer ", scrub what follows
        keep = "".join(g or "" for g in match.groups())
        return keep + _placeholder(kind, match.group(0)[len(keep):])
    return _placeholder(kind, match.group(0))


def redact_text(text: str) -> str:
    """Scrub credentials from one string."""
    if not _QUICK.search(text):
        return text
    for kind, pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m, k=kind: _scrub(k, m), text)
    return text


def redact_secrets(value: Any) -> Any:
    """The same JSON value with credentials scrubbed from every string (keys included)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {redact_text(k) if isinstance(k, str) else k: redact_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_secrets(v) for v in value]
    return value


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
