"""Reading named files and folders of logs: discovery, detection, the importers in parallel, usage checks
and scrubbing (`load_any`; the package's names, `kvprobe.importers`, come from here)."""
from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType

from kvprobe.cpus import usable_cpus
from kvprobe.errors import InputError, not_a_file
from kvprobe.importers import (claude_code, cline, codex, copilot_cli, gemini_cli, har, kimi_cli, litellm, opencode,
                               openhands, otel, qwen_code, vibe)
from kvprobe.importers.base import ImportReport, Progress, SourceStats, first_part, log_bytes
from kvprobe.importers.formats import agent_home_file, format_of, side_format
from kvprobe.importers.row_cache import RowCache, kept_alone
from kvprobe.importers.sniff import Sniffed, max_document_bytes, sniff
from kvprobe.trace import TraceRecord
from kvprobe.trace.validate import response_usage_problem
from kvprobe.wording import show

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

IMPORTERS: dict[str, ModuleType] = {m.NAME: m for m in (har, claude_code, codex, gemini_cli, qwen_code, opencode, cline,
                                                         openhands, vibe, otel, litellm, kimi_cli, copilot_cli)}
FORMATS = ("kvprobe", *IMPORTERS)
_SUFFIXES = (".jsonl", ".json", ".har", ".ndjson")
# read as one document whatever their first line looks like
_WHOLE_FORMATS = (har.NAME, opencode.NAME, cline.NAME, openhands.NAME)
# a broken whole-file document is given to its importer only where that importer counts it as a skip (an
# OpenCode message file cut short); a broken HAR is said by _broken_har; any other is "no known format"
_COUNTS_BROKEN = (opencode.NAME, gemini_cli.NAME, claude_code.NAME, cline.NAME, openhands.NAME)
# readers that can leave out each request's rebuilt message list and events (`history=False`: what `usage` reads)
_HISTORY_OPTIONAL = (claude_code.NAME, codex.NAME)

FORMAT_NAMES = {"har": "a HAR recording", "claude_code": "a Claude Code transcript", "codex": "a Codex rollout",
                "gemini_cli": "a Gemini CLI session", "qwen_code": "a Qwen Code session",
                "opencode": "an OpenCode session", "cline": "a Cline task log",
                "openhands": "an OpenHands conversation", "vibe": "a Mistral Vibe session",
                "otel": "OpenTelemetry spans", "litellm": "a LiteLLM log",
                "kimi_cli": "a Kimi CLI session", "copilot_cli": "a Copilot CLI OpenTelemetry export"}


def bodies_of(path: str | Path, kind: str, command: str) -> Iterator[TraceRecord]:
    """The records of an agent log that carry request bodies (HAR, LiteLLM); an InputError saying so plainly
    when the log has usage only (Claude Code, Codex, …), which `command` cannot work on."""
    found = False
    for record in load_any(path, fmt=kind):
        if record.request is not None:
            found = True
            yield record
    if not found:
        raise InputError(f"{FORMAT_NAMES.get(kind, kind)} logs usage, not request bodies, so there is nothing to "
                         f"{command}: `kvprobe report` explains its misses from the usage it logs, and "
                         "`kvprobe capture` records the bodies", file=str(path))


def default_sources() -> list[Path]:
    """Where agents keep their logs on this machine: Claude Code projects, Codex sessions (and Gemini CLI,
    Qwen Code, OpenCode, Cline, Kimi and Copilot data where they exist)."""
    return (claude_code.default_paths() + codex.default_paths() + gemini_cli.default_paths()
            + qwen_code.default_paths() + opencode.default_paths() + kimi_cli.default_paths()
            + copilot_cli.default_paths() + cline.default_paths() + openhands.default_paths()
            + vibe.default_paths())


def discover(paths: Iterable[str | Path], unreadable: list[tuple[Path, str]] | None = None) -> list[Path]:
    """Files named directly, plus every .jsonl/.json/.har/.ndjson file under named directories (sorted).
    Sub-folders that cannot be listed are added to `unreadable` (path, why), when given."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            files.extend(sorted(_walk(path, unreadable)))
        elif path.is_file():
            files.append(path)
        elif path.exists():
            raise not_a_file(raw)
        elif path.is_symlink():
            raise InputError(_bad_link(path), file=str(raw))
        else:
            raise InputError("file or directory does not exist", file=str(raw))
    return files


def _bad_link(path: Path) -> str:
    """Why a symbolic link leads nowhere: a loop (ELOOP) or a target that does not exist."""
    try:
        path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop: it leads back to itself"
        return f"symbolic link to nothing: {os.readlink(path)} does not exist"
    return "symbolic link cannot be followed"


def _walk(root: Path, unreadable: list[tuple[Path, str]] | None) -> Iterator[Path]:
    def failed(exc: OSError) -> None:
        if exc.filename is not None and unreadable is not None:
            unreadable.append((Path(exc.filename), exc.strerror or str(exc)))
    for folder, _dirs, names in os.walk(root, onerror=failed):
        for name in names:  # (a link that loops is listed here: following it finds no folder)
            path = Path(folder) / name
            log = path.suffix in _SUFFIXES or name in opencode.DATABASES or bool(first_part(path))
            if log and path.is_file():
                yield path
            elif unreadable is not None and path.is_symlink() and not path.exists():
                why = _bad_link(path)  # a loop, whatever its name (it may have been a folder of logs); a
                if log or "loop" in why:  # dangling link only where it would have been a log
                    unreadable.append((path, why))


def _times_in_range(record: TraceRecord) -> bool:
    return all(t is None or 0 <= t < 253402300800 for t in (record.started_at, record.first_token_at,
                                                            record.finished_at))  # up to year 9999


def _read_kvprobe(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None,
                  strict: bool) -> Iterator[TraceRecord]:
    from kvprobe.trace.reader import ReadStats, read_trace  # (here: a folder of agent logs holds no trace)

    read_stats = ReadStats()
    last = 0
    for record in read_trace(path, strict=strict, stats=read_stats, check_duplicates=False, keyed=True):
        stats.lines += 1
        if progress is not None and read_stats.bytes_read - last > 1 << 20:
            progress(read_stats.bytes_read - last)
            last = read_stats.bytes_read
        if not _times_in_range(record):  # parse_time accepts any epoch number; format_time does not
            stats.skip("timestamp out of range", record.line)
            continue
        if stats.first_time(record.identity, seen):  # the same line in another file: read once
            yield record
    if progress is not None:
        progress(read_stats.bytes_read - last)
    for message in read_stats.errors:
        stats.examples.append(message) if len(stats.examples) < 5 else None
    if read_stats.skipped:
        stats.skipped["malformed trace record"] += read_stats.skipped
        stats.lines += read_stats.skipped


def _read_one(path: Path, kind: str, stats: SourceStats, seen: set[str], progress: Progress | None,
              strict: bool, history: bool = True) -> Iterator[TraceRecord]:
    if kind == "kvprobe":
        return _read_kvprobe(path, stats, seen, progress, strict)  # read_trace checks usage itself
    if agent_home_file(path):  # the agent's settings beside its logs: read as its files, nothing in them
        stats.lines += 1
        stats.ignored += 1
        return iter(())
    read = IMPORTERS[kind].read
    records = read(path, stats, seen, progress) if history or kind not in _HISTORY_OPTIONAL else \
        read(path, stats, seen, progress, history=False)
    return _valid_usage(records, stats)


def _rows_of(path: Path, kind: str, stats: SourceStats, seen: set[str], progress: Progress | None, strict: bool,
             history: bool, reduce: Callable[[TraceRecord], Any] | None) -> Iterator[Any]:
    """A file's records (`_read_one`), through `reduce` where given: `usage`'s rows are read straight from the
    lines by an importer that can (its `usage_rows`: the same rows, without building each record)."""
    if reduce is not None and not history and reduce is _usage_row() and not agent_home_file(path):
        direct = getattr(IMPORTERS[kind], "usage_rows", None) if kind in IMPORTERS else None
        if direct is not None:
            return direct(path, stats, seen, progress)
    records = _read_one(path, kind, stats, seen, progress, strict, history)
    return records if reduce is None else map(reduce, records)


def _usage_row() -> Callable[[TraceRecord], Any]:
    from kvprobe.importers.summary import usage_row  # (here: summary reads the records loading gives)

    return usage_row


def _valid_usage(records: Iterator[TraceRecord], stats: SourceStats) -> Iterator[TraceRecord]:
    """Records whose usage passes the one usage check; the others are counted skips naming the field. Error
    texts, where logs keep what a provider echoed (keys included), and the identity fields (session, agent,
    cwd, project_hash, ...) are scrubbed of credentials. The records a cloud platform served (importers label
    them `extra["platform"]`) are counted, valid or not. (One loop: it runs for every record read.)"""
    from kvprobe.secrets import scrub_identity, shapes_table  # (here: an option list naming FORMATS reads no log)

    platforms, table = stats.platforms, shapes_table()
    for record in records:
        platform = record.extra.get("platform")
        if isinstance(platform, str):
            platforms[platform] += 1
        problem = response_usage_problem(record.response)
        if problem is None:
            yield scrub_identity(record, table)
            continue
        if record.via != claude_code.VIA_PROGRESS:  # (a progress copy is counted only once it is kept: `_settle`)
            stats.records -= 1
        stats.skip("invalid usage", record.line, f"{problem[0]}: {problem[1]}")


class Folded:
    """A unit's rows summed where they were read (`load_any`'s `fold`), with what taking the sum in the place
    of its rows needs: the ids of the rows summed (a duplicate of an earlier unit's row makes the caller meet
    the rows instead), its provisional rows (settled once every file is read), and each file's stats and
    duplicates within the unit. `rows` is the unit as `_read_batch` returns it (each file's stats, rows and
    row class), made to travel and pickled only when the sum travels from a worker (unpickled only when
    needed, `batch`); where this process read the unit, the rows as they were read."""

    __slots__ = ("partial", "ids", "provisional", "stats", "duplicates", "rows")

    def __init__(self, partial: Any, ids: list[str], provisional: list[tuple[int, Any]], stats: list[SourceStats],
                 duplicates: list[int], rows: Any) -> None:
        self.partial, self.ids, self.provisional = partial, ids, provisional
        self.stats, self.duplicates, self.rows = stats, duplicates, rows

    def __reduce__(self) -> tuple[Any, ...]:
        import pickle

        rows = self.rows if isinstance(self.rows, bytes) else \
            pickle.dumps([_travelling(stats, rows) for stats, rows, _ in self.rows], pickle.HIGHEST_PROTOCOL)
        return Folded, (self.partial, self.ids, self.provisional, self.stats, self.duplicates, rows)

    def batch(self) -> list[tuple[SourceStats, list[Any], type | None]]:
        import pickle

        return pickle.loads(self.rows) if isinstance(self.rows, bytes) else self.rows


def _fold_batch(batch: list[tuple[str, str]], strict: bool, reduce: Callable[[TraceRecord], Any],
                history: bool, fold: Callable[[], Any], cache: RowCache | None = None,
                progress: Progress | None = None) -> Folded:
    """`_read_batch`, its rows summed here (`fold`): the caller, which meets every unit's rows in file order,
    then adds one sum instead of each row (203 MB of Claude Code logs: ~24 ms)."""
    out = []
    sums, seen = fold(), set()
    ids: list[str] = []
    provisional: list[tuple[int, Any]] = []
    duplicates: list[int] = []
    kept: list[Any] = []
    for k, (stats, rows) in enumerate(_read_rows(batch, strict, reduce, history, cache, progress)):
        out.append((stats, rows, None))  # (made to travel only if it does: `Folded.__reduce__`)
        twice = 0
        for row in rows:
            if row.via == claude_code.VIA_PROGRESS:
                provisional.append((k, row))
                continue
            identity = _identity(row)
            if identity in seen:  # (as `_dedupe` counts it)
                twice += 1
                continue
            seen.add(identity)
            ids.append(identity)
            kept.append(row)
        duplicates.append(twice)
    sums.add(kept)
    return Folded(sums.partial(), ids, provisional, [stats for stats, _, _ in out], duplicates, out)


def _read_batch(batch: list[tuple[str, str]], strict: bool, reduce: Callable[[TraceRecord], Any] | None = None,
                history: bool = True, cache: RowCache | None = None, progress: Progress | None = None
                ) -> list[tuple[SourceStats, list[Any], type | None]]:
    """Worker side of a parallel load: every file of one batch, with its own stats; each record passed
    through `reduce` here, when given (what travels back is then only what the caller needs). Named tuples
    travel as plain tuples with their class beside them: pickle rebuilds a named tuple through a Python-level
    `__new__`, which made unpickling 100k of them ~4x slower than plain tuples in the parent."""
    return [_travelling(stats, rows) for stats, rows in _read_rows(batch, strict, reduce, history, cache, progress)]


def _read_rows(batch: list[tuple[str, str]], strict: bool, reduce: Callable[[TraceRecord], Any] | None,
               history: bool, cache: RowCache | None = None, progress: Progress | None = None
               ) -> Iterator[tuple[SourceStats, list[Any]]]:
    """Each file of a batch with its stats and its records (through `reduce`, when given); with `cache`, each
    file it keeps is read alone and kept (`_kept_rows`)."""
    seen: set[str] = set()
    for name, kind in batch:
        if cache is not None:
            yield _kept_rows(Path(name), kind, strict, reduce, history, cache, progress, seen)
            continue
        stats = SourceStats(name, kind)
        yield stats, list(_rows_of(Path(name), kind, stats, seen, progress, strict, history, reduce))


def _kept_rows(path: Path, kind: str, strict: bool, reduce: Callable[[TraceRecord], Any] | None, history: bool,
               cache: RowCache, progress: Progress | None, seen: set[str]) -> tuple[SourceStats, list[Any]]:
    """A file's stats and rows, kept in `cache` where its format is: such a file is read alone (its own set of
    requests seen: the same request in another file is merged where all files' rows meet, `_dedupe`); one of
    another format with the run's `seen`, as without a cache."""
    stats = SourceStats(str(path), kind)
    stamp = cache.stamp(path, kind)  # (before reading: a file appended to meanwhile is not kept as read)
    rows = list(_rows_of(path, kind, stats, set() if kept_alone(path, kind) else seen, progress, strict, history,
                         reduce))
    cache.put(path, kind, stats, rows, stamp)
    return stats, rows


def _travelling(stats: SourceStats, rows: list[Any]) -> tuple[SourceStats, list[Any], type | None]:
    """A file's rows as they travel to the parent: named tuples as plain ones, their class beside them."""
    row_class = type(rows[0]) if rows and isinstance(rows[0], tuple) and hasattr(rows[0], "_make") else None
    return stats, [tuple(r) for r in rows] if row_class is not None else rows, row_class


def _classify(files: list[Path], named: list[str | Path], fmt: str | None,
              report: ImportReport) -> list[tuple[Path, str]]:
    chosen = []
    named_files = {Path(p).expanduser() for p in named}  # (a file named itself, not found in a named folder)
    for path in files:
        try:
            kind, sniffed = _detect(path, fmt)
            if kind is not None and _too_large(path, kind, sniffed, path in named_files, report):
                continue
            if sniffed is not None and sniffed.broken and not fmt and kind not in _COUNTS_BROKEN:
                kind = None
        except OSError as exc:  # (an unreadable file named on the command line is an error: user_errors)
            if path in named_files:
                raise
            _unreadable(report, path, "file", exc.strerror or str(exc))
            continue
        if kind is None and path.suffix.lower() == ".har":
            kind = _broken_har(path, path in named_files, report)
            if kind is None:
                continue
        if kind is None:
            if path in named_files:
                raise InputError("not a recognised trace or log: expected a kvprobe trace, HAR 1.2, Claude Code, "
                                 "Codex, Gemini CLI, Qwen Code, OpenCode, Cline, OpenHands, Mistral Vibe, Kimi CLI "
                                 "or Copilot CLI logs, OTLP JSON spans or LiteLLM logs",
                                 file=str(path))
            stats = SourceStats(str(path), "unknown")
            stats.skip("file in a named directory is no known format", None)
            report.sources.append(stats)
            continue
        chosen.append((path, kind))
    return chosen


def _detect(path: Path, fmt: str | None) -> tuple[str | None, Sniffed | None]:
    """The file's format (`fmt` when forced) and what its bounded prefix showed (None: a database)."""
    if path.name in opencode.DATABASES and fmt in (None, opencode.NAME):
        return opencode.NAME, None
    side = side_format(path)
    if side is not None and fmt in (None, side):
        return side, None
    sniffed = sniff(path)
    return fmt or format_of(sniffed), sniffed


def _too_large(path: Path, kind: str, sniffed: Sniffed | None, named: bool, report: ImportReport) -> bool:
    """A file its importer would parse as one JSON document, over the size kvprobe holds in memory at once:
    refused (named: an error; in a folder: a counted skip), never read in part."""
    if sniffed is None or not (sniffed.document or kind in _WHOLE_FORMATS):
        return False
    size, limit = path.stat().st_size, max_document_bytes()
    if size <= limit:
        return False
    why = (f"{size / (1 << 20):,.0f} MB to parse as one JSON document, over the {limit >> 20:,} MB kvprobe reads "
           "whole (KVPROBE_MAX_DOCUMENT_MB raises it)")
    if named:
        raise InputError(f"file too large: {why}", file=str(path))
    stats = SourceStats(str(path), kind)
    stats.skip("file too large to read as one JSON document", None, why)
    report.sources.append(stats)
    return True


def _unreadable(report: ImportReport, path: Path, what: str, why: str) -> None:
    """A file or sub-folder of a named folder that cannot be read: a counted skip naming it, never silence."""
    stats = SourceStats(str(path), "unknown")
    stats.skip(f"{what} cannot be read ({why})", None)
    report.sources.append(stats)


def _broken_har(path: Path, named: bool, report: ImportReport) -> str | None:
    """A .har file no importer recognised: its JSON broken (named: the error, with its line; in a folder: a
    counted skip saying where), or "har" when it parses after all (har.read then says what is missing)."""
    try:
        har.parse(path)
    except InputError as exc:
        if named:
            raise
        stats = SourceStats(str(path), har.NAME)
        stats.skip("HAR file is not valid JSON (cut short?)" if "cut short" in exc.message
                   else "HAR file is not valid JSON", exc.line)
        report.sources.append(stats)
        return None
    return har.NAME


def _batches(files: list[tuple[Path, str]], parts: int, sizes: list[int] | None = None
             ) -> list[list[tuple[str, str]]]:
    """Contiguous runs of files of about equal size (order kept, so output order is stable): each file goes to
    the part its middle byte falls in, so a file larger than a part is a run of its own instead of taking the
    small files before it along (up to `parts` runs, fewer where a file spans several). `sizes`: the files'
    sizes, where known."""
    sizes = sizes if sizes is not None else [log_bytes(p) for p, _ in files]
    target = max(sum(sizes) / parts, 1)
    batches: list[list[tuple[str, str]]] = []
    at, last = 0, -1
    for (path, kind), size in zip(files, sizes):
        part = min(int((at + size / 2) // target), parts - 1)
        if part != last:
            batches.append([])
            last = part
        batches[-1].append((str(path), kind))
        at += size
    return batches


def _settle(pairs: Iterator[tuple[SourceStats, TraceRecord]]) -> Iterator[TraceRecord]:
    """Pass records through, holding back the provisional ones (a subagent call known from its parent's
    progress line) until every file is read: one is kept only when no transcript had the same request."""
    seen: set[str] = set()
    held: dict[str, tuple[SourceStats, TraceRecord]] = {}
    for stats, record in pairs:
        if record.__class__ is Folded:  # a unit's sum: its rows are known, none provisional
            seen.update(record.ids)
            yield record.partial
            continue
        identity = _identity(record)
        if record.via == claude_code.VIA_PROGRESS:
            if identity in held:
                stats.duplicates += 1
            else:
                held[identity] = (stats, record)
            continue
        seen.add(identity)
        yield record
    for rid, (stats, record) in held.items():
        if rid in seen:
            stats.duplicates += 1
            continue
        stats.records += 1
        stats.from_progress += 1
        yield record


def _identity(record: Any) -> str:
    """What tells requests apart across files (TraceRecord.identity); a `reduce` row carries it as its id."""
    return record.identity if isinstance(record, TraceRecord) else record.id


def _unique_ids(records: Iterator[TraceRecord]) -> Iterator[TraceRecord]:
    """Different requests that reuse a local id (req_1 in two traces, one Codex session id in two rollouts)
    both stay; the later one's id gets its file's name in front (`b:req_1`), as `report` does."""
    taken: set[str] = set()
    for record in records:
        if record.id in taken:
            stem = Path(record.source).stem if record.source else "input"
            base = f"{stem}:{record.id}"
            record.id, n = base, 1
            while record.id in taken:
                n += 1
                record.id = f"{base}~{n}"
        taken.add(record.id)
        yield record


def _dedupe(stats: SourceStats, records: Iterable[Any], seen: set[str]) -> Iterator[tuple[SourceStats, Any]]:
    """The same request in files read by different processes: the first one read (in file order) counts."""
    for record in records:
        if record.via == claude_code.VIA_PROGRESS:
            yield stats, record  # provisional: settled once every file is read
            continue
        identity = _identity(record)
        if identity in seen:
            stats.duplicates += 1
            stats.records -= 1
            continue
        seen.add(identity)
        yield stats, record


class _Reading:
    """What every unit of a parallel read shares (`_read_unit`): how to read, and this process's id, so that
    only the units this process reads itself report progress as they go (a worker's bytes are counted when its
    answers come back)."""

    __slots__ = ("strict", "reduce", "history", "fold", "cache", "progress", "pid")

    def __init__(self, strict: bool, reduce: Callable[[TraceRecord], Any] | None, history: bool,
                 fold: Callable[[], Any] | None, cache: RowCache | None, progress: Progress | None) -> None:
        self.strict, self.reduce, self.history, self.fold, self.cache = strict, reduce, history, fold, cache
        self.progress, self.pid = progress, os.getpid()


def _read_unit(job: _Reading, batch: list[tuple[str, str]]) -> tuple[Any, dict[Any, Any] | None]:
    """One unit of a parallel read: (its files' rows or, with `fold`, their sum, or the exception reading them
    raised; the cache entries a worker made of them). An exception is raised where the units meet, in file
    order (`_units_read`): the first bad file is the one named, as in one process, whichever unit failed first.
    A worker's entries travel to this process, which writes every entry of the run as one pack: a pack a
    unit would be dozens a run."""
    here = os.getpid() == job.pid
    progress = job.progress if here else None
    try:
        if job.fold is not None and job.reduce is not None:
            result = _fold_batch(batch, job.strict, job.reduce, job.history, job.fold, job.cache, progress)
        else:
            result = _read_batch(batch, job.strict, job.reduce, job.history, job.cache, progress)
    except Exception as exc:  # noqa: BLE001 - raised where the units meet (`_units_read`)
        if not here:
            from kvprobe.run.forks import with_worker_traceback

            with_worker_traceback(exc)
        result = exc
    entries = None
    if job.cache is not None and not here:
        entries, job.cache.fresh = job.cache.fresh, {}
    return result, entries


def _load_parallel(files: list[tuple[Path, str]], workers: int, report: ImportReport, progress: Progress | None,
                   strict: bool, reduce: Callable[[TraceRecord], Any] | None = None, history: bool = True,
                   fold: Callable[[], Any] | None = None, cache: RowCache | None = None
                   ) -> Iterator[tuple[SourceStats | None, Any]]:
    """The files in contiguous units of about equal size (`_unit_count`), read by `workers - 1` forked workers
    taking units from the front while this process takes them from the back (`run.forks.ForkPool`), then met
    in file order. Whichever process reads faster reads more: a fixed share each (this process's run and a
    forked child's, before) left one waiting ~0.1 s of 0.9 s for the other on a 202 MB folder. A worker that
    dies or stalls costs time, not answers: its units are read here."""
    seen: set[str] = set()
    for result in _units_read(files, workers, _Reading(strict, reduce, history, fold, cache, progress)):
        if isinstance(result, Folded):
            if not any(i in seen for i in result.ids):  # no row of an earlier unit again: the sum stands
                yield from _take_folded(result, report, seen)
                continue
            result = result.batch()  # (the rows, read one by one as without `fold`)
        for stats, records, row_class in result:
            report.sources.append(stats)
            yield from _dedupe(stats, records if row_class is None else map(row_class._make, records), seen)


def _units_read(files: list[tuple[Path, str]], workers: int, job: _Reading) -> list[Any]:
    """Every unit's result (`_read_unit`, units of `_batches`), in file order, read by `workers - 1` forked
    workers and this process; the first unit's exception in file order raised; a worker's cache entries added
    to the run's. The progress of a unit this process reads is said as it reads; a worker's, as its answer
    arrives."""
    from kvprobe.run.forks import ForkPool

    sizes = [log_bytes(path) for path, _ in files]  # (once: the units, their count and the progress use them)
    units = _batches(files, _unit_count(files, workers, sizes), sizes)
    size_of = {str(path): size for (path, _), size in zip(files, sizes)}

    def arrived(i: int, _: Any) -> None:
        if job.progress is not None:
            job.progress(sum(size_of[name] for name, _ in units[i]))
    pending = ForkPool(workers - 1).start(_read_unit, units, job, arrived=arrived)
    try:
        answers = pending.results()
    finally:
        pending.close()
    for result, entries in answers:
        if isinstance(result, BaseException):
            raise result
        if job.cache is not None and entries:
            job.cache.fresh.update(entries)
    return [result for result, _ in answers]


def _unit_count(files: list[tuple[Path, str]], workers: int, sizes: list[int] | None = None) -> int:
    """Units for a parallel read: enough that the processes end close together (UNITS_PER_PROCESS each), none
    under UNIT_BYTES where the files allow (each unit is one sum, or one message, to meet). `sizes`: the
    files' sizes, where known."""
    total = sum(sizes if sizes is not None else (log_bytes(path) for path, _ in files))
    return max(workers, min(len(files), UNITS_PER_PROCESS * workers, total // UNIT_BYTES))


def _take_folded(folded: Folded, report: ImportReport, seen: set[str]) -> Iterator[tuple[SourceStats | None, Any]]:
    """A unit's sum in the place of its rows, counted as `_dedupe` would have counted them one by one."""
    for stats, twice in zip(folded.stats, folded.duplicates):
        stats.duplicates += twice
        stats.records -= twice
        report.sources.append(stats)
    seen.update(folded.ids)
    for k, row in folded.provisional:
        yield folded.stats[k], row
    yield None, folded


def load_any(paths: str | Path | Iterable[str | Path], *, fmt: str | None = None,
             report: ImportReport | None = None, progress: Progress | None = None,
             strict_traces: bool = False, workers: int = 1,
             reduce: Callable[[TraceRecord], Any] | None = None, history: bool = True,
             fold: Callable[[], Any] | None = None, cache: RowCache | None = None) -> Iterator[Any]:
    """Yield trace records from traces and agent logs, whatever their format.

    `paths`: files and/or directories. `fmt` forces one format for every file. `report` collects per-file
    counts (records, duplicates, skipped lines by reason). `progress` is called with bytes read.
    `strict_traces=True` makes a malformed line in a kvprobe trace an InputError (as `read_trace` does)
    instead of a counted skip; agent logs are always read leniently. `workers > 1` parses files in that
    many processes (same records, same order); 0 chooses: one per core (up to 4) from 64 MB of files on,
    from 12 MB with a `reduce`. `reduce` (a module-level function, with `id` and `via` on what it returns)
    maps each record where it is read: the caller gets its results instead of records. `fold` (with `reduce`,
    where files are read in several processes): `fold()` is an empty sum (`.add(rows)`, `.partial()`) that each
    unit of files adds its rows to; the caller gets the unit's `partial()` in the place of its rows, unless one
    of them is a request an earlier unit read too (then the rows, as without `fold`). `history=False`
    leaves out each request's rebuilt message list and the events before it (`extra["history"]` and
    `extra["events"]`, Claude Code's): faster where only usage is read. `cache` (with `reduce`: the rows it
    makes): each file's rows kept between runs (`importers.row_cache`), a file unchanged since not read again.
    Records are deduplicated across all files: the same request logged twice (the same provider id, or the
    same local id with the same content) is read once; different requests that reuse a local id are both
    kept, the later one's id prefixed with its file's name (`b:req_1`).
    Raises InputError for a missing path, an unknown format, or an unparseable HAR/OTLP document.
    """
    if fmt is not None and fmt not in FORMATS:
        raise InputError(f"unknown format {show(fmt)}: expected one of {', '.join(FORMATS)}", field="--format")
    report = report if report is not None else ImportReport()
    named = [paths] if isinstance(paths, (str, Path)) else list(paths)
    unreadable: list[tuple[Path, str]] = []
    found = discover(named, unreadable)
    for where, why in unreadable:
        _unreadable(report, where, "file" if where.is_symlink() else "folder", why)
    if workers == 0:
        workers = _auto_workers(found, reduced=reduce is not None)
    files = _classify(found, named, fmt, report)
    if cache is not None and (reduce is None or not any(kept_alone(path, kind) for path, kind in files)):
        cache = None  # (no file it keeps: read as without it)
    kept = _kept(files, cache) if cache is not None else None
    if kept:  # rows kept from an earlier run: the other files read, then all met in file order
        settled = _settle(_load_kept(files, kept, workers, report, progress, strict_traces, reduce, history, cache))
    elif workers > 1 and len(files) > 1 and hasattr(os, "fork"):
        settled = _settle(_load_parallel(files, workers, report, progress, strict_traces, reduce, history, fold,
                                         cache))
    elif kept is not None:  # (nothing kept yet: each file read here, and kept)
        settled = _settle(_load_kept(files, {}, workers, report, progress, strict_traces, reduce, history, cache))
    else:
        settled = _settle(_load_sequential(files, report, progress, strict_traces, history, reduce))
    yield from settled if reduce is not None else _unique_ids(settled)
    if kept is not None and cache is not None:
        cache.flush()


def _kept(files: list[tuple[Path, str]], cache: RowCache) -> dict[int, tuple[SourceStats, list[Any]]]:
    """The files (by their place in `files`) whose rows `cache` kept and which have not changed since."""
    kept = {}
    for at, (path, kind) in enumerate(files):
        hit = cache.get(path, kind)
        if hit is not None:
            kept[at] = hit
    return kept


def _load_kept(files: list[tuple[Path, str]], kept: dict[int, tuple[SourceStats, list[Any]]], workers: int,
               report: ImportReport, progress: Progress | None, strict: bool,
               reduce: Callable[[TraceRecord], Any] | None, history: bool, cache: RowCache | None
               ) -> Iterator[tuple[SourceStats, Any]]:
    """Every file's rows, kept or read now (and kept), met in file order: the first file to hold a request
    counts it (`_dedupe`), as when every file is read."""
    assert cache is not None
    missing = [(at, path, kind) for at, (path, kind) in enumerate(files) if at not in kept]
    read = _read_missing(missing, workers, strict, reduce, history, cache, progress)
    seen: set[str] = set()
    read_here: set[str] = set()  # (requests seen by the importers of files of other formats read here)
    for at, (path, _) in enumerate(files):
        if at in kept:
            stats, rows = kept[at]
            report.kept += 1
            if progress is not None:
                progress(log_bytes(path))
        else:
            stats, rows = read[at] if at in read else _kept_rows(path, files[at][1], strict, reduce, history,
                                                                  cache, progress, read_here)
        report.sources.append(stats)
        yield from _dedupe(stats, rows, seen)


def _read_missing(missing: list[tuple[int, Path, str]], workers: int, strict: bool,
                  reduce: Callable[[TraceRecord], Any] | None, history: bool, cache: RowCache,
                  progress: Progress | None) -> dict[int, tuple[SourceStats, list[Any]]]:
    """The files the cache lacks, read ahead in units (`_load_parallel`'s) where they are enough bytes for
    several processes: {place in the files: (stats, rows)}. Those left out (fewer bytes) are read by
    `_load_kept` in file order."""
    if workers < 2 or len(missing) < 2 or not hasattr(os, "fork"):
        return {}
    workers = min(workers, _auto_workers([path for _, path, _ in missing], reduced=True))
    if workers < 2:
        return {}
    places = {str(path): at for at, path, _ in missing}
    files = [(path, kind) for _, path, kind in missing]
    read: dict[int, tuple[SourceStats, list[Any]]] = {}
    for result in _units_read(files, workers, _Reading(strict, reduce, history, None, cache, progress)):
        for stats, rows, row_class in result:
            read[places[stats.path]] = (stats, rows if row_class is None else list(map(row_class._make, rows)))
    return read


def _load_sequential(files: list[tuple[Path, str]], report: ImportReport, progress: Progress | None,
                     strict: bool, history: bool = True, reduce: Callable[[TraceRecord], Any] | None = None
                     ) -> Iterator[tuple[SourceStats, Any]]:
    """Every file's records read here; through `reduce`, its rows merged as they are wherever they were read
    (`_dedupe`): one request counts once whichever process, or earlier run, read its files."""
    seen: set[str] = set()
    counted: set[str] = set()
    for path, kind in files:
        stats = SourceStats(str(path), kind)
        report.sources.append(stats)
        rows = _rows_of(path, kind, stats, seen, progress, strict, history, reduce)
        if reduce is None:
            for record in rows:
                yield stats, record
        else:
            yield from _dedupe(stats, rows, counted)


# From how many bytes of files a second process pays for its start and for sending back what it read: whole
# records (`import`: bodies, rebuilt histories) from 64 MB; a `reduce`'s small rows (`usage`) from 12 MB (Claude
# Code folders, 12 interleaved runs each, one process / two: 5 MB 0.067 / 0.072 s, 10 MB 0.079 / 0.078 s,
# 14 MB 0.087 / 0.085 s, 21 MB 0.102 / 0.089 s)
# A parallel read's units (`_unit_count`): per process, so that the last ones to end end close together (a unit
# of a 202 MB folder read on two processes, ~6 MB, takes ~35 ms); at least this many bytes each, where the
# files allow: each unit is a sum or a message to meet
UNITS_PER_PROCESS = 16
UNIT_BYTES = 2 << 20
PARALLEL_MIN_BYTES = 64 << 20
PARALLEL_MIN_BYTES_REDUCED = 12 << 20


def _auto_workers(files: list[Path], reduced: bool = False) -> int:
    """Processes worth using for these files: one per core (up to 4) from PARALLEL_MIN_BYTES on (records
    reduced where they are read: PARALLEL_MIN_BYTES_REDUCED)."""
    try:
        total = sum(map(log_bytes, files))
    except OSError:
        return 1
    least = PARALLEL_MIN_BYTES_REDUCED if reduced else PARALLEL_MIN_BYTES
    return min(usable_cpus(), 4) if total > least else 1
