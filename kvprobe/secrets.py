"""Keep credentials out of everything kvprobe writes or prints.

* `redact_text` / `redact_secrets` scrub credentials by their shape: provider API keys, bearer tokens, cloud
  and VCS credentials, private keys, and any value named as a credential (`x-api-key: …`, `password=…`).
* `Credentials` scrubs the exact values a source itself shows to be credentials — what a request carried in
  `x-api-key`, `Authorization`, a cookie, a URL's password, a LiteLLM `api_key` — whatever their shape: a
  gateway token such as `corp-gw-token-…` matches no pattern, but an upstream that echoes it back must not
  put it on disk.

Equal secrets get equal placeholders (`[REDACTED:kind#digest]`), so cache identity (what diff and report
compare) is unchanged by redaction. Light on purpose (re and xxhash only): the trace reader and every
importer use it.
"""
from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import xxhash

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
    return map_strings(value, redact_text)


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """A copy of a JSON value with `fn` applied to every string, keys included. Iterative: a body nested a
    thousand deep (orjson reads up to 1024) is no RecursionError."""
    if isinstance(value, str):
        return fn(value)
    if not isinstance(value, (dict, list)):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        source, parent, slot = stack.pop()
        if isinstance(source, dict):
            copy: Any = {}
            items: Iterable[tuple[Any, Any]] = ((fn(k) if isinstance(k, str) else k, v) for k, v in source.items())
        else:
            copy = [None] * len(source)
            items = enumerate(source)
        parent[slot] = copy
        for key, item in items:
            if isinstance(item, (dict, list)):
                copy[key] = None
                stack.append((item, copy, key))
            else:
                copy[key] = fn(item) if isinstance(item, str) else item
    return root[0]


# Request headers whose values are credentials (x-api-key, authorization, api-key, x-goog-api-key, cookie,
# proxy-authorization, x-auth-token, ...).
_CREDENTIAL_HEADER = re.compile(r"(?i)auth|api[-_]?key|token|secret|cookie|password|credential")
MIN_SECRET = 8  # shorter values ("x", the local server's placeholder key) would scrub ordinary text


class Credentials:
    """Exact credential values seen in one exchange, scrubbed wherever they appear."""

    def __init__(self) -> None:
        self.values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None

    def add(self, value: Any) -> None:
        if isinstance(value, str) and len(value.strip()) >= MIN_SECRET:
            self.values.add(value.strip())
            self._pattern = None

    def add_headers(self, headers: Mapping[str, str]) -> "Credentials":
        """Every credential header's value, and its parts: the token after `Bearer `, a Basic pair decoded,
        each cookie's value."""
        for name, value in headers.items():
            if not isinstance(value, str) or not _CREDENTIAL_HEADER.search(name):
                continue
            self.add(value)
            scheme, _, rest = value.strip().partition(" ")
            if rest:
                self.add(rest)
                if scheme.lower() == "basic":
                    self._add_basic(rest)
            if "cookie" in name.lower():
                for part in value.split(";"):
                    self.add(part.partition("=")[2])
        return self

    def _add_basic(self, encoded: str) -> None:
        try:
            user, _, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return
        self.add(password)
        self.add(f"{user}:{password}")

    def add_url(self, url: Any) -> "Credentials":
        """The password of a URL's user-info (https://user:password@host/) and credential query parameters
        (`?key=…`, `?api_key=…`, `?token=…`)."""
        if not isinstance(url, str):
            return self
        try:
            parts = urlsplit(url)
            password = parts.password if "@" in parts.netloc else None
        except ValueError:
            return self
        if password:
            self.add(password)
            self.add(unquote(password))
        for name, value in parse_qsl(parts.query):
            if name.lower() == "key" or _CREDENTIAL_HEADER.search(name):
                self.add(value)
        return self

    def text(self, text: str) -> str:
        if not self.values:
            return text
        if self._pattern is None:  # longest first: a token inside a longer header value is its own match
            self._pattern = re.compile("|".join(map(re.escape, sorted(self.values, key=len, reverse=True))))
        return self._pattern.sub(lambda m: _placeholder("credential", m.group(0)), text)

    def scrub(self, value: Any) -> Any:
        """A JSON value (or text) with every exact credential value replaced; the value itself when none."""
        return map_strings(value, self.text) if self.values else value
