"""What every importer shares: per-source counts of records, duplicates and skipped lines (with reasons)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import math
import os
import re
from datetime import datetime

import orjson

from kvprobe.trace.record import READ_BUFFER, parse_time
from kvprobe.trace.validate import MAX_TOKENS
from kvprobe.wording import plural, show

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

MAX_EXAMPLES = 5
_fromisoformat = datetime.fromisoformat  # accepts a trailing Z from Python 3.11
Progress = Callable[[int], None]  # called with bytes just read


@dataclass(slots=True)
class SourceStats:
    """One file read by one importer."""

    path: str
    format: str
    lines: int = 0  # lines (or entries/spans) looked at
    records: int = 0
    duplicates: int = 0  # the same request seen again (repeated lines, resumed sessions, other files)
    skipped: Counter = field(default_factory=Counter)  # reason -> count
    examples: list[str] = field(default_factory=list)  # first few "path:line: reason (detail)"
    ignored: int = 0  # well-formed lines that are not requests (user turns, tool results, metadata)
    from_progress: int = 0  # records (in `records`) known only from a parent's agent_progress line
    platforms: Counter = field(default_factory=Counter)  # records served through a cloud platform (bedrock, vertex)
    sessionless: int = 0  # spans with no conversation or session id (OpenTelemetry): each trace its own session
    replayed: int = 0  # a fork's copy of its parent's requests (Codex forks and subagents): billed in the parent
    totals: int = 0  # records (in `records`) that sum a process's calls, not one request (Copilot CLI sessions)
    joined: int = 0  # lines that held several objects written with no newline between them (each one read)
    # the file says its requests went with a Claude account login (a Claude Code route line's credential `login`):
    # a Claude.ai plan, not an API key, pays for them. A flag of the file, not a count of requests: a request
    # several files hold is kept from the first one read, and a count made per file as it is read counts it in each
    login: bool = False

    def skip(self, reason: str, line: int | str | None = None, detail: str | None = None) -> None:
        self.skipped[reason] += 1
        if len(self.examples) < MAX_EXAMPLES:
            where = f"{self.path}:{line}" if line is not None else self.path
            self.examples.append(f"{where}: {reason}" + (f" ({detail[:120]})" if detail else ""))

    def first_time(self, record_id: str, seen: set[str]) -> bool:
        """Count a record once: False (a duplicate counted) when its id was already seen."""
        if record_id in seen:
            self.duplicates += 1
            return False
        seen.add(record_id)
        self.records += 1
        return True

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "lines": self.lines, "records": self.records,
                "duplicates": self.duplicates, "ignored": self.ignored, "from_agent_progress": self.from_progress,
                "replayed_from_parent": self.replayed, "process_totals": self.totals, "joined_lines": self.joined,
                "account_login": self.login, "skipped": self.skipped_total,
                "skipped_reasons": dict(self.skipped.most_common()), "examples": self.examples}


@dataclass(slots=True)
class ImportReport:
    """Everything `load_any` read: one entry per source file."""

    sources: list[SourceStats] = field(default_factory=list)
    # files whose rows came from an earlier run (importers.row_cache), not read again: said in the terminal
    # only (the JSON is the same whichever files were read)
    kept: int = 0

    @property
    def records(self) -> int:
        return sum(s.records for s in self.sources)

    @property
    def skipped(self) -> int:
        return sum(s.skipped_total for s in self.sources)

    @property
    def duplicates(self) -> int:
        return sum(s.duplicates for s in self.sources)

    @property
    def from_progress(self) -> int:
        return sum(s.from_progress for s in self.sources)

    @property
    def replayed(self) -> int:
        return sum(s.replayed for s in self.sources)

    @property
    def joined(self) -> int:
        return sum(s.joined for s in self.sources)

    @property
    def login_files(self) -> int:
        return sum(1 for s in self.sources if s.login)

    def reasons(self) -> Counter:
        total: Counter = Counter()
        for s in self.sources:
            total.update(s.skipped)
        return total

    def to_json(self) -> dict[str, Any]:
        return {"records": self.records, "duplicates": self.duplicates, "from_agent_progress": self.from_progress,
                "replayed_from_parent": self.replayed, "joined_lines": self.joined,
                "account_login_files": self.login_files, "skipped": self.skipped,
                "skipped_reasons": dict(self.reasons().most_common()),
                "sources": [s.to_json() for s in self.sources]}

    def summary(self) -> list[str]:
        """Human lines: what was read, and every kind of skip with its count."""
        formats = Counter(s.format for s in self.sources)
        lines = [f"read {self.records:,} requests from {len(self.sources)} file(s) "
                 f"({', '.join(f'{n} {f}' for f, n in formats.most_common())})"]
        if self.kept:
            lines.append(f"{self.kept:,} of the files unchanged since an earlier run: their rows were kept, not "
                         "read again (--no-cache reads every file)")
        if self.from_progress:
            lines.append(f"{self.from_progress:,} subagent requests read from the parent's progress lines "
                         "(their own transcripts are absent)")
        if self.duplicates:
            lines.append(f"{self.duplicates:,} duplicate lines merged (same request logged more than once)")
        if self.joined:
            lines.append(f"{plural(self.joined, 'line')} held two or more lines written with no newline "
                         "between them (an agent appending to a file whose last line was cut short of its "
                         "newline): each was read")
        if self.replayed:
            forks = sum(1 for s in self.sources if s.replayed)
            lines.append(f"{self.replayed:,} replayed requests skipped in {forks} forked rollout(s): the parent's "
                         "history a fork copies before its own first turn (billed once, in the parent's rollout)")
        for reason, count in self.reasons().most_common():
            lines.append(f"skipped {count:,}: {reason}")
        for fmt in sorted({s.format for s in self.sources if s.records} & set(UNLOGGED_CALLS)):
            lines.append(UNLOGGED_CALLS[fmt])
        platforms: Counter = Counter()
        for s in self.sources:
            platforms.update(s.platforms)
        lines += [platform_note(name, count) for name, count in platforms.most_common()]
        if self.login_files:
            verb = "says" if self.login_files == 1 else "say"
            lines.append(f"{plural(self.login_files, 'file')} {verb} requests went with a Claude account login (a "
                         "Claude.ai plan pays for them, not an API key): their dollars are what the API would charge "
                         "at list prices, not what the plan bills")
        totals = sum(s.totals for s in self.sources if s.format != "cline")
        if totals:
            lines.append(f"{totals:,} records are a Copilot CLI process's token totals (its session files keep no "
                         "per-call usage): costs and hit ratios hold, causes cannot be found; its OpenTelemetry "
                         "export (COPILOT_OTEL_FILE_EXPORTER_PATH) has each call")
        summed = sum(s.totals for s in self.sources if s.format == "cline")
        if summed:
            lines.append(f"{plural(summed, 'record')} each sum requests a Cline task logged together (those a "
                         "checkpoint restore deleted, a subagent batch's): costs hold, causes cannot be found")
        sessionless = sum(s.sessionless for s in self.sources)
        if sessionless:
            lines.append(f"{sessionless:,} spans carry no gen_ai.conversation.id (nor session.id): each trace is its "
                         "own session, so requests of different traces cannot be compared (set gen_ai.conversation.id "
                         "to group an agent's calls)")
        return lines


# calls an agent makes but does not write to its own log (found by running it through capture): said once per
# format read, so a total from the log is known to leave them out
UNLOGGED_CALLS = {
    "gemini_cli": "Gemini CLI logs its main model's calls only: its router's calls (flash-lite, one a turn, small) "
                  "and attempts it retried are not in the log (capture them: `kvprobe capture -- gemini`)",
    "opencode": "OpenCode (and Kilo's CLI) log no usage for their title calls on the small model (a few hundred "
                "tokens a session): not in the log (capture them: `kvprobe capture -- opencode`)",
}

PLATFORM_NAMES = {"bedrock": "Amazon Bedrock", "vertex": "Google Vertex AI", "ollama": "Ollama",
                  "lmstudio": "LM Studio", "github-copilot": "GitHub Copilot", "foundry": "Microsoft Foundry"}


def platform_note(platform: str, count: int) -> str:
    """What the output can say about requests a cloud platform served: its own rules where `providers/` has a
    platform file for it (bedrock.toml, vertex.toml, openrouter.toml), else a caveat; a local model server
    (Ollama, LM Studio): which rules and prices its models were given."""
    from kvprobe.catalog import load_platforms

    name = PLATFORM_NAMES.get(platform, platform)
    if platform in LOCAL_SERVERS.values():
        return (f"{plural(count, 'request')} served through {name}: the models it runs here are ruled as kvprobe's "
                "local engine and cost $0; its cloud models (…:cloud) are ruled and priced as their maker's API — "
                f"a caveat: {name}'s own cache and billing are not in providers/")
    if platform in load_platforms():
        return (f"{plural(count, 'request')} served through {name}: ruled by providers/{platform}.toml and priced "
                "at its list prices where the price data has them")
    return (f"{plural(count, 'request')} served through {name}: priced and ruled as the provider's own API — a "
            f"caveat: {name}'s prices and cache rules are not in providers/")


def iter_lines(path: Path, progress: Progress | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes with their line break) of each non-blank line, reporting bytes read; the chunks that
    continue the file (`parts_of`) are read on, their lines numbered on."""
    lineno = 0
    for part in parts_of(path):
        with part.open("rb", buffering=READ_BUFFER) as fh:
            if progress is None:  # (no bytes to count: the loop alone, as it runs for every line of a log)
                for lineno, raw in enumerate(fh, start=lineno + 1):
                    if not raw.isspace():
                        yield lineno, raw
                continue
            pending = 0
            for lineno, raw in enumerate(fh, start=lineno + 1):
                pending += len(raw)
                if pending > 1 << 20:
                    progress(pending)
                    pending = 0
                if not raw.isspace():  # orjson ignores the line break: no copy of a multi-KB line to strip it
                    yield lineno, raw
            if pending:
                progress(pending)


# A chunk of a log split at lines: Entire's checkpoints (an `entire/checkpoints/v1` branch) write a transcript
# over 50 MB as full.jsonl, full.jsonl.001, full.jsonl.002, …
_CHUNK = re.compile(r"(.+\.(?:jsonl|ndjson))\.(\d{3})")


def parts_of(path: Path) -> list[Path]:
    """The file and the chunks that continue it, in order (a file split by no one: itself alone)."""
    text = str(path)
    if text.endswith((".jsonl", ".ndjson")):  # the usual case, a whole log: one look for a first chunk
        if not os.path.isfile(text + ".001"):
            return [path]
        base, number = path.name, 0
    else:
        found = _CHUNK.fullmatch(path.name)
        if found is None:
            return [path]  # (only JSON Lines are split at lines)
        base, number = found.group(1), int(found.group(2))
    parts = [path]
    while (after := path.with_name(f"{base}.{number + len(parts):03d}")).is_file():
        parts.append(after)
    return parts


def log_bytes(path: Path) -> int:
    """The bytes of a log, its chunks included."""
    return sum(part.stat().st_size for part in parts_of(path))


def first_part(path: Path) -> bool | None:
    """For a chunk (`full.jsonl.001`): whether it is where reading starts, its file and the chunks before it
    being absent (a copy that left the largest out); None for a file that is no chunk."""
    found = _CHUNK.fullmatch(path.name)
    if found is None:
        return None
    number = int(found.group(2))
    before = found.group(1) if number == 1 else f"{found.group(1)}.{number - 1:03d}"
    return not path.with_name(before).exists()


def loads_line(raw: bytes, stats: SourceStats, lineno: int) -> dict[str, Any] | None:
    """Decode one JSON Lines object; a malformed line or a non-object value is a counted skip (None)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raw = raw.strip()
        truncated = raw.startswith((b"{", b"[")) and not raw.endswith((b"}", b"]"))
        stats.skip("truncated JSON line" if truncated else "invalid JSON line", lineno, str(exc))
        return None
    if not isinstance(value, dict):
        stats.skip("line is not a JSON object", lineno)
        return None
    return value


def iter_objects(path: Path, stats: SourceStats, progress: Progress | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each JSON Lines object, every line counted and each bad one a counted skip; a
    line that holds several objects written together (`joined_objects`) gives each, under its number."""
    for lineno, _, value in iter_raw_objects(path, stats, progress):
        yield lineno, value


def iter_raw_objects(path: Path, stats: SourceStats, progress: Progress | None = None
                     ) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
    """`iter_objects` with each object's own bytes (a joined line's objects: each one's, written again)."""
    for lineno, raw in iter_lines(path, progress):
        stats.lines += 1
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = None
        if value.__class__ is dict:
            yield lineno, raw, value
            continue
        for part in objects_of_bad_line(raw, stats, lineno):
            yield lineno, orjson.dumps(part), part


def objects_of_bad_line(raw: bytes, stats: SourceStats, lineno: int) -> list[dict[str, Any]]:
    """A line that is no JSON object: the objects it holds when several were written together (counted as
    joined: `joined_objects`), else none (a skip counted by its reason)."""
    parts = joined_objects(raw)
    if parts is None:
        loads_line(raw, stats, lineno)
        return []
    stats.joined += 1
    return parts


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity, which orjson refuses too


def joined_objects(raw: bytes) -> list[dict[str, Any]] | None:
    """The objects of a line that is two or more JSON objects with no newline between them, else None. Claude
    Code appends its `summary` and `file-history-snapshot` lines to a transcript whose last line has no newline
    (a write cut short of it), so the line before and the appended one arrive as one (public transcripts show
    it after assistant lines, whose usage would otherwise be lost)."""
    import json  # (the standard library's decoder: orjson reads no value that is followed by another)

    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return None
    decoder, parts, at, end = json.JSONDecoder(parse_constant=_not_json), [], 0, len(text.rstrip())
    while True:
        while at < end and text[at] in " \t\r\ufeff":
            at += 1
        if at >= end:
            return parts if len(parts) > 1 else None
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:
            return None
        if value.__class__ is not dict:
            return None
        parts.append(value)


def _fast_utc(text: str) -> float | None:
    """'2026-09-10T10:00:03.123Z' (the shape agents write) by the C parser; None for any other shape."""
    if len(text) < 20 or text[-1] != "Z" or text[10] != "T":
        return None
    try:
        return _fromisoformat(text).timestamp()
    except ValueError:
        return None


def time_or_none(value: Any) -> float | None:
    """Epoch seconds from RFC 3339 text or epoch (s/ms/µs/ns guessed by size); None when unusable."""
    if isinstance(value, str):
        # the shape agents write, inline (this runs for every line of a log): _fast_utc, then the range check
        if len(value) >= 20 and value[-1] == "Z" and value[10] == "T":
            try:
                stamp = _fromisoformat(value).timestamp()
            except ValueError:
                return _time_of_text(value)
            return stamp if 0 < stamp < 1e11 else None
        return _time_of_text(value)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            v = float(value)
        except OverflowError:  # an integer past any float (a line JSON's own parser read): no time
            return None
        if not math.isfinite(v) or v <= 0:
            return None
        while v > 1e11:  # ms, µs or ns since the epoch
            v /= 1000.0
        return v
    return None


def _time_of_text(value: str) -> float | None:
    """Text that is not the common shape as it stands (time_or_none tried that): padded, epoch digits, or any
    other RFC 3339 form."""
    text = value.strip()
    stamp = _fast_utc(text) if len(text) != len(value) else None
    if stamp is None:
        if text.isascii() and text.replace(".", "", 1).isdigit():
            return time_or_none(float(text))
        try:
            stamp = parse_time(text.replace(" ", "T", 1) if len(text) > 10 and text[10] == " " else text)
        except (ValueError, OverflowError):
            return None
    return stamp if 0 < stamp < 1e11 else None


class BadCount(ValueError):
    """A token count in a source log that is no count: negative, fractional, non-finite, absurdly large, or not
    a number. The record is a counted skip ("invalid usage"), never a 0 that makes the figures wrong."""

    def __init__(self, field: str, value: Any) -> None:
        self.field = field
        super().__init__(f"{field}: expected a token count, got {show(value)}")


def token_count(value: Any, field: str) -> int:
    """A source's token count as an int (absent: 0); BadCount otherwise. Digit strings are counts: OTLP JSON
    writes 64-bit integers as strings."""
    if value is None:
        return 0
    if value.__class__ is int and 0 <= value <= MAX_TOKENS:
        return value
    if isinstance(value, float) and value.is_integer() and 0 <= value <= MAX_TOKENS:
        return int(value)
    if isinstance(value, str) and value.isascii() and value.strip().isdigit() and int(value) <= MAX_TOKENS:
        return int(value)
    raise BadCount(field, value)


def split_usage(provider: str, fresh: int, read: int, write: int, output: int, reasoning: int = 0) -> dict[str, Any]:
    """A log's usage given apart (uncached input, cache reads, cache writes, output, reasoning billed as output)
    as the provider's response reports it: Anthropic's fields for Claude, the Responses API's (the whole prompt
    as input, the cached part in its details) for every other."""
    output += reasoning
    if provider == "anthropic":
        return {"input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
                "output_tokens": output}
    details: dict[str, Any] = {"cached_tokens": read}
    if write:
        details["cache_write_tokens"] = write
    return {"input_tokens": fresh + read + write, "input_tokens_details": details, "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": reasoning}}


def token_counts(holder: dict[str, Any], keys: tuple[str, ...], prefix: str = "") -> list[int]:
    """Each key's token count (absent: 0); BadCount naming the first that is no count (`prefix` + key)."""
    return [token_count(holder.get(key), prefix + key) for key in keys]


def read_document(path: Path, stats: SourceStats, progress: Progress | None) -> Any:
    """A file read as one JSON document (a Cline task log, an OpenHands state, an OpenCode message file): its
    value, or None when it does not parse (a counted skip: cut short while its agent was stopped, or broken)."""
    data = path.read_bytes()
    if progress is not None:
        progress(len(data))
    stats.lines += 1
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        cut = exc.pos >= len(data.rstrip())  # the file just stops: written while the agent was stopped
        stats.skip("truncated JSON file" if cut else "invalid JSON file", exc.lineno, str(exc))
        return None


def first_count(holder: dict[str, Any], *keys: str, prefix: str = "") -> int:
    """The token count under the first of `keys` present (sources spell some counts two ways, newer first),
    named `prefix` + that key in a BadCount; the first key names it when none is present (a count of 0)."""
    key = keys[0]
    for name in keys:
        if name in holder:
            key = name
            break
    return token_count(holder.get(key), prefix + key)


def as_int(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, (int, float)) and value == value and abs(value) < 1e15:
        return max(int(value), 0)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value) < 16:
        return int(value.strip())
    return 0


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# Servers that run open models for an agent (Codex `--oss` and `model_provider = "ollama"`, OpenCode's
# `ollama` / `lmstudio` providers): what `extra["platform"]` calls them.
LOCAL_SERVERS = {"ollama": "ollama", "lmstudio": "lmstudio", "lm-studio": "lmstudio"}
_CLOUD_TAGS = (":cloud", "-cloud")  # Ollama's cloud models (kimi-k2.5:cloud, gpt-oss:120b-cloud)


def local_server(name: Any) -> str | None:
    """The local model server a provider name denotes (ollama, lmstudio), else None."""
    if not isinstance(name, str):
        return None
    low = name.lower()
    if low == "oss":  # Codex --oss: Ollama unless configured otherwise
        return "ollama"
    return next((server for key, server in LOCAL_SERVERS.items() if key in low), None)


def served_locally(server: str, model: str | None) -> bool:
    """Whether a model a local server names runs on this machine (no per-token bill: the `local` provider's
    rules and $0) or is a cloud model the server forwards (Ollama's `…:cloud`), which is ruled and priced as
    its maker's API (a platform caveat says so)."""
    return not (server == "ollama" and isinstance(model, str) and model.lower().endswith(_CLOUD_TAGS))
