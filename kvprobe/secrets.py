"""Keep credentials out of everything kvprobe writes or prints.

* `redact_text` / `redact_secrets` scrub credentials by their shape: provider API keys, bearer tokens, cloud
  and VCS credentials, private keys, and any value named as a credential (`x-api-key: …`, `password=…`).
* `Credentials` scrubs the exact values a source itself shows to be credentials — what a request carried in
  `x-api-key`, `Authorization`, a cookie, a URL's password, a LiteLLM `api_key` — whatever their shape: a
  gateway token such as `corp-gw-token-…` matches no pattern, but an upstream that echoes it back must not
  put it on disk.

Equal secrets get equal placeholders (`[REDACTED:kind#digest]`), so cache identity (what diff and report
compare) is unchanged by redaction. The shapes are data: providers/key_shapes.toml, one dated, sourced table
(read once, on the first scrub, and each shape's expression compiled when a text first holds its words).
Light on purpose (re and xxhash; tomllib when the table is read): the trace reader, the trace writer and
every importer use it.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

import xxhash

from kvprobe.environ import providers_dir_override
from kvprobe.errors import CatalogError

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any, TypeVar

    R = TypeVar("R")

SHAPES_FILE = "key_shapes.toml"  # in providers/: the one table of credential shapes (dated, sourced)
# kinds whose match keeps its first group(s) ("x-api-key: ", "Bearer ", "aws_secret_access_key = ") and
# scrubs only the value after it
_KEEP_GROUPS = {"aws-cred", "bearer", "credential", "header"}


# What a shape's leading \b means: not inside a word, where a JSON escape written out (`\n`, `\t`, `\r`: an
# error body quoted in a log's string) counts as a boundary ("...\\nr8_abc" still begins a key at r8_)
_WORD_START = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt]))"


@dataclass(frozen=True, slots=True)
class _Shape:
    """One shape of credential: its kind, its expression and the words its every match holds."""

    kind: str
    source: str  # the regular expression, compiled when a text first holds one of `words` (below)
    words: tuple[str, ...]  # every match's lower-cased text holds one of these: without one, it is not run

    @property
    def pattern(self) -> re.Pattern[str]:
        """Compiled on first use and kept by `re`'s own cache: compiling all 62 shapes cost ~5 ms of every
        command's start (`usage` of a small folder, `diff`), while most runs meet a shape's words rarely."""
        return re.compile(self.source)


@dataclass(frozen=True, slots=True)
class _Scrubber:
    """The credential shapes, in the order they are tried, and the words that let a text skip them."""

    shapes: tuple[_Shape, ...]  # tried in order
    words: tuple[str, ...]  # a text whose lower-cased form holds none of these holds no credential
    # texts `clean` was asked about, with its answer (the identity fields of one log repeat on every request)
    _verdicts: dict[str, bool] = field(default_factory=dict, compare=False, hash=False, repr=False)
    _unchanged: dict[str, bool] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # a record's identity fields and flat `extra` (as one tuple), with whether they are all left as they are
    _identities: dict[tuple, bool] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def clean(self, text: str) -> bool:
        """`text` holds none of the words, so no credential (remembered for the last few thousand texts)."""
        return _remembered(self._verdicts, text, lambda: not self.suspects(text))

    def unchanged(self, text: str) -> bool:
        """Redacting `text` would leave it as it is (remembered like `clean`): a suspect word ("tokens", a
        rebuilt history's key) is no credential, and the same few strings repeat on every request."""
        return _remembered(self._unchanged, text, lambda: self.clean(text) or redact_text(text) == text)

    def scrub(self, text: str) -> str:
        """`text` with its credentials scrubbed (`redact_text`), one that repeats asked about once."""
        return text if self.unchanged(text) else redact_text(text)

    def scrub_id(self, text: str) -> str:
        """`scrub` of a text that differs every time (a request's id): nothing remembered of it."""
        return redact_text(text) if self.suspects(text) else text

    def suspects(self, text: str) -> list[_Shape]:
        """The shapes `text` may hold, by substring tests rather than one regular expression: Python's re
        tries each of 39 alternatives at every position (16 ms on 100 KB of prose; a loop of `in`, 6.5 ms),
        and running only the shapes whose words occur spares 30 needless passes over a text that says
        "key" or "token" in passing."""
        low = text.lower()
        for word in self.words:
            if word in low:
                return [s for s in self.shapes if any(w in low for w in s.words)]
        return []


def _remembered(memo: dict[Any, bool], text: Any, verdict: Callable[[], bool]) -> bool:
    """`verdict()` for `text`, kept in `memo` (emptied past a few thousand texts: bounded memory)."""
    found = memo.get(text)
    if found is None:
        if len(memo) >= 4096:
            memo.clear()
        found = memo[text] = verdict()
    return found


def shapes_path() -> Path:
    """The table: $KVPROBE_PROVIDERS_DIR's when that folder has one, else the one kvprobe ships."""
    override = os.environ.get("KVPROBE_PROVIDERS_DIR")
    if override and (Path(override) / SHAPES_FILE).is_file():
        return Path(override) / SHAPES_FILE
    return _packaged_shapes()


def _packaged_shapes() -> Path:
    """The table kvprobe ships: the wheel's copy, else the repository's."""
    packaged = Path(__file__).parent / "_providers" / SHAPES_FILE
    return packaged if packaged.is_file() else Path(__file__).resolve().parent.parent / "providers" / SHAPES_FILE


def shapes_table() -> _Scrubber:
    """The credential shapes in force ($KVPROBE_PROVIDERS_DIR's table, else the shipped one)."""
    return _scrubber(providers_dir_override() or "")


@lru_cache(maxsize=4)
def _scrubber(override: str) -> _Scrubber:
    """The compiled table, once per $KVPROBE_PROVIDERS_DIR value (`override`, the cache key): every string
    kvprobe writes passes through redact_text, which must not stat or parse anything per call."""
    from kvprobe import toml_cache

    where = shapes_path()
    try:  # kept parsed between runs: tomllib, and typing behind it, were ~8 ms of every `usage` start
        [data] = toml_cache.read_all([where], toml_cache.parse)
    except (OSError, ValueError) as exc:  # (a TOML error and a bad encoding are ValueErrors)
        raise CatalogError(f"{where}: cannot read the credential shapes: {exc}") from None
    # the table kvprobe ships is compiled by its tests (tests/test_key_shapes.py); a user's own, at once, so
    # that a pattern that does not compile is an error naming its row, not a failure at its first match
    check = where != _packaged_shapes()
    shapes = [_shape_row(row, f"{where}: shapes[{i}]", check) for i, row in enumerate(data.get("shapes") or [])]
    named = data.get("named")
    if not isinstance(named, dict) or not all(isinstance(named.get(k), list) and named[k]
                                              for k in ("headers", "words")):
        raise CatalogError(f"{where}: [named] needs non-empty lists 'headers' and 'words'")
    shapes += _named_shapes(named["headers"], named["words"])
    return _Scrubber(tuple(shapes), _minimal([w for shape in shapes for w in shape.words]))


def _named_shapes(headers: list[str], words: list[str]) -> list[_Shape]:
    """A value named as a credential (a header echoed in an error, key=... in a URL or log line) is scrubbed
    whatever its length or shape: the name says what it is."""
    header, word = "|".join(map(re.escape, headers)), "|".join(map(re.escape, words))
    return [
        _Shape("aws-cred", r"(?i)(aws_secret_access_key|aws_session_token)(\s*[=:]\s*[\"']?)[A-Za-z0-9/+=]{20,}",
               ("aws_",)),
        _Shape("bearer", r"(?i)\b(bearer\s+)[A-Za-z0-9_\-\.=~+/]{16,}", ("bearer",)),
        _Shape("header", rf"(?i)((?:\b|_)(?:{header})[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token)\s+)?)"
                         r"([^\s\"',;&]+)", _minimal(headers)),
        _Shape("credential", rf"(?i)((?:\b|_)(?:{word})[\"']?\s*[=:]\s*[\"']?)([^\s\"',;&]+)", _minimal(words)),
        _Shape("credential", r"(?i)((?:\b|_)key\s*=\s*[\"']?)([^\s\"',;&]+)", ("key",)),  # ?key=...
    ]


def _minimal(words: list[str]) -> tuple[str, ...]:
    """The lower-cased words, each kept only when no shorter one is inside it ("sk-" covers "sk-ant-" and
    "csk-", "key" covers "x-api-key"): a text holds one of these exactly when it holds one of `words`, in any
    case. (Lower-casing lets "akia" in a word through to a shape's expression, which then finds nothing.)"""
    kept: list[str] = []
    for word in sorted({w.lower() for w in words}, key=len):
        if not any(k in word for k in kept):
            kept.append(word)
    return tuple(kept)


def _shape_row(row: Any, where: str, check: bool = True) -> _Shape:
    if not isinstance(row, dict):
        raise CatalogError(f"{where}: expected a table")
    missing = [k for k in ("kind", "pattern", "prefixes", "source", "checked") if k not in row]
    if missing:
        raise CatalogError(f"{where}: missing {', '.join(missing)}")
    prefixes = row["prefixes"]
    if not isinstance(prefixes, list) or not prefixes or not all(isinstance(p, str) and p for p in prefixes):
        raise CatalogError(f"{where} ({row['kind']}): prefixes must be a non-empty list of literals")
    pattern = str(row["pattern"])
    if pattern.startswith(r"\b"):
        pattern = _WORD_START + pattern[2:]
    try:
        if check:
            re.compile(pattern)
    except (re.error, TypeError) as exc:
        raise CatalogError(f"{where} ({row['kind']}): pattern does not compile: {exc}") from None
    return _Shape(str(row["kind"]), pattern, _minimal(prefixes))


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
    for shape in shapes_table().suspects(text):
        text = shape.pattern.sub(lambda m, k=shape.kind: _scrub(k, m), text)
    return text


# A trace record's fields that name it or say where it came from: scrubbed by shape wherever a record is read
# or written (the trace reader, the importers, the trace writer; DuckDB's rows come from those records). An
# importer's cwd, service, operation, Gemini's project_hash and the request headers kept are in `extra`, all
# of whose strings are scrubbed. The request and response bodies follow their source's policy instead
# (capture --redact; responses are always pattern-scrubbed by capture and import).
IDENTITY_FIELDS = ("id", "session", "agent", "endpoint", "error")
_OTHER_IDENTITY_FIELDS = attrgetter(*IDENTITY_FIELDS[1:])  # all but the id, as one tuple


def scrub_identity(record: R, table: _Scrubber | None = None) -> R:
    """The record with credentials scrubbed from its identity fields and `extra`; the record itself (not a
    copy) when none holds one, which one search over them all tells for most records. `table`: the shapes
    (`shapes_table()`), looked up once by a caller that scrubs many records (the look-up reads the
    environment: 0.6 us of each record `usage` reads)."""
    # the id apart from the rest: every request has its own id, while its session, agent, endpoint and extra
    # (cwd, branch, client version) repeat from request to request, so their verdict is remembered
    # (this runs for every record read: the fields in one call, the table looked up once)
    fields, extra = _OTHER_IDENTITY_FIELDS(record), getattr(record, "extra")
    scrubber, rid = table or shapes_table(), getattr(record, IDENTITY_FIELDS[0])
    # an id holding none of the shapes' words is left as it is by redact_text: asked of the table in hand
    if not (isinstance(rid, str) and scrubber.suspects(rid) and redact_text(rid) != rid) and \
            _left_as_is(scrubber, fields, extra):
        return record
    changes: dict[str, Any] = {}
    for name in IDENTITY_FIELDS:
        value = getattr(record, name)
        if isinstance(value, str) and (clean := redact_text(value)) != value:
            changes[name] = clean
    if extra and (clean_extra := redact_secrets(extra)) != extra:
        changes["extra"] = clean_extra
    return dataclasses.replace(record, **changes) if changes else record  # type: ignore[type-var]


def _left_as_is(scrubber: _Scrubber, fields: tuple[Any, ...], extra: dict[str, Any]) -> bool:
    """Whether scrubbing would leave the identity fields but the id (`fields`) and `extra` as they are.
    Remembered by their values where `extra` is flat (an agent log's cwd, branch, client version: the same
    few on every request of a session), which spares listing and joining their texts again per record."""
    try:
        key = (fields, *extra.items())
        known = scrubber._identities.get(key)
    except (TypeError, AttributeError):  # a nested value (a rebuilt history, headers), or no dict: asked each time
        return _texts_left_as_is(scrubber, fields, extra)
    if known is None:
        known = _remembered(scrubber._identities, key, lambda: _texts_left_as_is(scrubber, fields, extra))
    return known


def _texts_left_as_is(scrubber: _Scrubber, fields: tuple[Any, ...], extra: dict[str, Any]) -> bool:
    texts = [v for v in fields if isinstance(v, str)]
    _strings_of(extra, texts)  # (keys and values, nested ones too: a rebuilt history's few keys repeat)
    return scrubber.clean("\0".join(texts)) or all(scrubber.unchanged(t) for t in texts)


def _strings_of(value: Any, out: list[str]) -> None:
    """Append every string of a JSON value (keys included) to `out`, iteratively (any depth)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for key, inner in item.items():  # (a string value, the usual case, appended without the stack)
                out.append(key if key.__class__ is str else str(key))
                if inner.__class__ is str:
                    out.append(inner)
                else:
                    stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)


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
# proxy-authorization, x-auth-token, Azure API Management's ocp-apim-subscription-key, ...).
_CREDENTIAL_HEADER = re.compile(r"(?i)auth|api[-_]?key|subscription[-_]?key|token|secret|cookie|password|credential")
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
        # user:password, or a key sent as the user with no password (Stripe's `sk_live_…:`): the key itself
        self.add(password or user)
        self.add(f"{user}:{password}")

    def add_url(self, url: Any) -> "Credentials":
        """The password of a URL's user-info (https://user:password@host/) and credential query parameters
        (`?key=…`, `?api_key=…`, `?token=…`)."""
        if not isinstance(url, str):
            return self
        try:
            parts = urlsplit(url)
            password = parts.password  # (None without user-info: a host:port is no password)
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
