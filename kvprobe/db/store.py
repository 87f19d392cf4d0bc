"""Load analysed traces into a DuckDB file, incrementally, and run SQL over it.

A load reads and analyses every trace first (bad input: the database is not touched), then writes all of
them in one transaction. A database that does not exist yet is built as a temp file beside it and put in
place when complete: a full disk or SIGTERM leaves no file without tables, and an existing database that
cannot be written (a full disk at COMMIT) is as it was, with one clean error (exit 2) either way. A file that is a version of a trace already in the database (same path; same
content; or the stored file is gone and this one begins with its content: moved and grown) replaces that
trace's rows, or is skipped when unchanged, so loading a file twice never duplicates a row. Any other file
is a trace of its own, even when it starts with the same record as another.

A folder (of agent logs: a Claude Code project, a Codex sessions tree) is one trace: its files are read
together with the importers' dedupe, as `usage` reads them (a subagent call in its own transcript and in
its parent's progress lines, a resumed session's copied history: stored once). Re-loading the folder
replaces its rows; an unchanged folder is skipped.

Loads may run at once: DuckDB lets one process write a file at a time, so a load waits for the lock
(`LOCK_WAIT_S`), and chooses its trace ids inside its own write transaction, against what is stored then.
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import xxhash

from kvprobe import __version__
from kvprobe.db.rows import Rows, report_rows
from kvprobe.db.schema import SCHEMA_VERSION, TABLES, Table, ddl
from kvprobe.errors import InputError, not_a_file
from kvprobe.output import sigterm_raises, remove_stale_temps, temp_name
from kvprobe.pricing import PriceBook
from kvprobe.report import Report, build_report
from kvprobe.secrets import redact_text

if TYPE_CHECKING:
    import duckdb

_CHUNK = 1 << 20
_MEMO_CAP = 1 << 16  # scrubbed text cells remembered per load


@dataclass(slots=True)
class TraceFile:
    """A trace file: its first record line's hash (`key`), content hash and size, read without parsing it."""

    path: Path  # resolved
    given: str  # as the user named it
    key: str  # hash of the first record line: what a grown or moved copy of the file still shares
    content_hash: str
    size: int
    trace_id: str = ""  # assigned by `assign_ids`: the key, made unique when another file shares it


def identify(path: str | Path) -> TraceFile:
    path = Path(path)
    if path.is_dir():
        return _identify_folder(path)
    if not path.is_file():
        raise not_a_file(path)
    first, whole, size = None, xxhash.xxh3_128(), 0
    with path.open("rb") as fh:
        for line in fh:  # up to the first record line; the rest is hashed in blocks
            whole.update(line)
            size += len(line)
            if line.strip():
                first = xxhash.xxh3_64_hexdigest(line.rstrip(b"\r\n"))
                break
        while chunk := fh.read(_CHUNK):
            whole.update(chunk)
            size += len(chunk)
    if first is None:
        raise InputError("no records: the trace is empty", file=str(path))
    return TraceFile(path.resolve(), str(path), first, whole.hexdigest(), size)


def _identify_folder(path: Path) -> TraceFile:
    """A folder of logs as one trace: keyed by where it is, its content hash over every file it holds."""
    from kvprobe.importers import discover

    files = discover([path])
    if not files:
        raise InputError("no logs in this folder (.jsonl, .json, .har, .ndjson files)", file=str(path))
    whole, size = xxhash.xxh3_128(), 0
    for f in files:
        whole.update(str(f.relative_to(path)).encode() + b"\0")
        with f.open("rb") as fh:
            while chunk := fh.read(_CHUNK):
                whole.update(chunk)
                size += len(chunk)
    resolved = path.resolve()
    return TraceFile(resolved, str(path), xxhash.xxh3_64_hexdigest(f"folder:{resolved}".encode()),
                     whole.hexdigest(), size)


def _prefix_hash(path: Path, size: int) -> str | None:
    """The content hash of a file's first `size` bytes (None when it is shorter)."""
    digest, left = xxhash.xxh3_128(), size
    with path.open("rb") as fh:
        while left > 0:
            chunk = fh.read(min(left, _CHUNK))
            if not chunk:
                return None
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


@dataclass(slots=True)
class Stored:
    """A trace already in the database."""

    trace_id: str
    path: Path
    content_hash: str
    size: int


def _same_trace(tf: TraceFile, stored: list[Stored]) -> Stored | None:
    """The stored trace this file is a version of, if any.

    Same path: the file was re-captured or edited. Same content elsewhere: a copy or a move. A stored trace
    whose file is gone and whose content this file begins with: it moved and grew (capture appends).
    Anything else is a different trace, even when it starts with the same record.
    """
    for s in stored:
        if s.path == tf.path:
            return s
    for s in stored:
        if s.content_hash == tf.content_hash:
            return s
    for s in stored:
        if tf.path.is_file() and s.trace_id.split("-")[0] == tf.key and not s.path.exists() and s.size < tf.size \
                and _prefix_hash(tf.path, s.size) == s.content_hash:
            return s
    return None


def assign_ids(files: list[TraceFile], stored: list[Stored]) -> dict[str, Stored]:
    """Give each file its trace_id (kept from the stored trace it is a version of); the matches by id."""
    taken = {s.trace_id for s in stored}
    matches: dict[str, Stored] = {}
    for tf in files:
        match = _same_trace(tf, stored)
        if match is not None:
            tf.trace_id = match.trace_id
            matches[tf.trace_id] = match
            continue
        tf.trace_id = tf.key
        salt = 0
        while tf.trace_id in taken:  # another file starts with the same record: tell them apart by path
            tf.trace_id = f"{tf.key}-{xxhash.xxh3_64_hexdigest(f'{tf.path}#{salt}'.encode())[:8]}"
            salt += 1
        taken.add(tf.trace_id)
    return matches


@dataclass(slots=True)
class Analysed:
    file: TraceFile
    rows: Rows
    records: int
    skipped: int
    report: Report | None = None  # kept only when asked (kvprobe.load): db load writes rows and lets it go


def analyse(tf: TraceFile, prices: PriceBook | None = None, fixes: bool | None = None,
            keep_report: bool = False) -> Analysed:
    """Simulate one trace file on its own and turn its report into rows."""
    rep = build_report([tf.path], prices=prices or PriceBook(), fixes=fixes, top=0)
    stats = rep.stats[0][1] if rep.stats else None  # none for agent logs (read through the importers)
    return Analysed(tf, report_rows(tf.trace_id, rep), stats.records if stats else rep.considered,
                    stats.skipped if stats else 0, rep if keep_report else None)


@dataclass(slots=True)
class LoadResult:
    path: str
    trace_id: str
    status: str  # loaded | replaced | unchanged | duplicate
    counts: dict[str, Any] = field(default_factory=dict)  # rows written per table (or same_as)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "trace_id": self.trace_id, "status": self.status, **self.counts}


class DatabaseError(InputError):
    """The database cannot be opened, has another schema, or a query failed."""


@contextmanager
def connect(db: str | Path, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    import duckdb

    if read_only and str(db) != ":memory:" and not Path(db).is_file():
        raise DatabaseError("no database here: run `kvprobe db load TRACE --db PATH` first", file=str(db),
                            field="--db")
    # read-only means the database file alone: a query's COPY ... TO, EXPORT, ATTACH or read_csv would write
    # or read other files (DuckDB refuses them with a permission error, shown as any other query error)
    config = {"enable_external_access": False} if read_only else {}
    con = _open(duckdb, db, read_only, config)
    try:
        con.execute("SET TimeZone = 'UTC'")
        yield con
    finally:
        con.close()


LOCK_WAIT_S = 60.0  # how long a load or a query waits for another process's load to finish


def _open(duckdb: Any, db: str | Path, read_only: bool, config: dict[str, Any]) -> Any:
    """A connection; while another process holds the file (one writer at a time, DuckDB locks it), wait."""
    deadline, pause = time.monotonic() + LOCK_WAIT_S, 0.02
    while True:
        try:
            return duckdb.connect(str(db), read_only=read_only, config=config)
        except duckdb.Error as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise DatabaseError(f"cannot open the database: {exc}", file=str(db), field="--db") from None
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def _existing(con: duckdb.DuckDBPyConnection) -> list[Stored]:
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    if "kvprobe_meta" not in tables:
        return []
    row = con.execute("SELECT value FROM kvprobe_meta WHERE key = 'schema_version'").fetchone()
    if row and row[0] != str(SCHEMA_VERSION):
        raise DatabaseError(f"made by kvprobe schema version {row[0]}; this kvprobe writes version "
                            f"{SCHEMA_VERSION}: load into a new file", field="--db")
    rows = con.execute("SELECT trace_id, path, content_hash, size_bytes FROM traces").fetchall()
    return [Stored(tid, Path(path), digest, size) for tid, path, digest, size in rows]


def _write(con: duckdb.DuckDBPyConnection, a: Analysed, loaded_at: float) -> dict[str, int]:
    from kvprobe.db.frames import frame

    tf = a.file
    for t in TABLES:
        con.execute(f"DELETE FROM {t.name} WHERE trace_id = ?", [tf.trace_id])
    rows = dict(a.rows, traces=[{"trace_id": tf.trace_id, "path": str(tf.path), "size_bytes": tf.size,
                                 "content_hash": tf.content_hash, "records": a.records,
                                 "skipped_lines": a.skipped, "loaded_at": loaded_at,
                                 "kvprobe_version": __version__}])
    memo: dict[str, str] = {}
    for t in TABLES:
        if rows[t.name]:
            _scrub_text_cells(t, rows[t.name], memo)
            con.register("kvprobe_rows", frame(t.name, rows[t.name]))
            con.execute(f"INSERT INTO {t.name} BY NAME SELECT * FROM kvprobe_rows")
            con.unregister("kvprobe_rows")
    counts = {name: len(rows[name]) for name in ("requests", "blocks", "diagnoses")}
    return counts | {"fixes": sum(1 for f in rows["fixes"] if f["chosen"])}  # alternatives are not fixes


def _scrub_text_cells(table: Table, rows: list[dict[str, Any]], memo: dict[str, str]) -> None:
    """Every text cell DuckDB is given is scrubbed of credentials (kvprobe.secrets), in place: the records
    were scrubbed when read, and this is the one place every row is written (a path, a diagnosis quoting a
    request). `memo`: block paths, kinds and ids repeat in every row, each is scrubbed once per load."""
    columns = [c.name for c in table.columns if c.type.startswith("VARCHAR")]

    def clean(value: str) -> str:
        if value not in memo:
            if len(memo) >= _MEMO_CAP:  # (millions of distinct request ids: bounded memory)
                memo.clear()
            memo[value] = redact_text(value)
        return memo[value]

    for row in rows:
        for name in columns:
            value = row.get(name)
            if isinstance(value, str):
                row[name] = clean(value)
            elif isinstance(value, list):
                row[name] = [clean(v) if isinstance(v, str) else v for v in value]


def load_traces(db: str | Path, paths: Iterable[str | Path], *, prices: PriceBook | None = None,
                force: bool = False, fixes: bool | None = None) -> list[LoadResult]:
    """Analyse `paths` and store them in the DuckDB file `db` (created if missing). See the module doc.

    Trace ids are chosen inside the write transaction, against the traces stored then: another `db load`
    that committed meanwhile (even of a file sharing this one's first record) is seen, never overwritten."""
    files: list[TraceFile] = []
    duplicates: list[tuple[TraceFile, TraceFile]] = []
    by_content: dict[str, TraceFile] = {}
    for p in paths:
        tf = identify(p)
        twin = by_content.get(tf.content_hash)
        if twin is not None:  # the same content named twice (or a copy): load it once
            duplicates.append((tf, twin))
            continue
        by_content[tf.content_hash] = tf
        files.append(tf)
    stored: list[Stored] = []
    if Path(db).is_file():
        with connect(db, read_only=True) as con:
            stored = _existing(con)
    # all input is analysed and checked before the database is touched (the ids are provisional until then)
    analysed = {tf.path: analyse(tf, prices, fixes) for tf in _todo(files, stored, force)}

    def write(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, Stored], dict[str, dict[str, int]]]:
        return _write_all(con, files, analysed, force, prices, fixes)

    matches, written = _into_new_file(db, write) if _is_new(db) else _in_transaction(db, write)
    results = []
    for tf in files:
        if tf.trace_id in written:
            status = "replaced" if tf.trace_id in matches else "loaded"
            results.append(LoadResult(tf.given, tf.trace_id, status, written[tf.trace_id]))
        else:
            results.append(LoadResult(tf.given, tf.trace_id, "unchanged"))
    return results + [LoadResult(tf.given, twin.trace_id, "duplicate", {"same_as": twin.given})
                      for tf, twin in duplicates]


def _write_all(con: duckdb.DuckDBPyConnection, files: list[TraceFile], analysed: dict[Path, Analysed],
               force: bool, prices: PriceBook | None, fixes: bool | None,
               ) -> tuple[dict[str, Stored], dict[str, dict[str, int]]]:
    """Inside the open transaction: the schema, then each file to (re)write under the id chosen now."""
    for stmt in ddl():
        con.execute(stmt)
    con.execute("INSERT OR REPLACE INTO kvprobe_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    stored = _existing(con)  # as of now, in this transaction: what other loads wrote is here
    matches = assign_ids(files, stored)
    now = time.time()
    written = {}
    for tf in _todo(files, stored, force, matches):
        a = analysed.get(tf.path) or analyse(tf, prices, fixes)  # (changed since it was first looked at)
        written[tf.trace_id] = _write(con, _with_trace_id(a, tf.trace_id), now)
    return matches, written


Writer = Callable[["duckdb.DuckDBPyConnection"], tuple[dict[str, Stored], dict[str, dict[str, int]]]]


def _is_new(db: str | Path) -> bool:
    return str(db) != ":memory:" and not Path(db).exists()


def _in_transaction(db: str | Path, write: Writer) -> tuple[dict[str, Stored], dict[str, dict[str, int]]]:
    """Into an existing database, in one transaction: a failure (a full disk at COMMIT, SIGTERM) leaves it
    as it was. A commit that failed on the disk ends the transaction (DuckDB then refuses ROLLBACK, "no
    transaction is active"), so that refusal is not what the user is told: the write's own error is."""
    import duckdb

    with sigterm_raises(), connect(db) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            result = write(con)
            con.execute("COMMIT")
            return result
        except BaseException as exc:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            if isinstance(exc, duckdb.Error):
                raise _write_failed(db, exc, "it is as it was before this load") from None
            raise


def _into_new_file(db: str | Path, write: Writer) -> tuple[dict[str, Stored], dict[str, dict[str, int]]]:
    """A database that does not exist yet is built as a temp file beside it and put in place when complete:
    a full disk or a SIGTERM leaves no table-less file, and the next run starts afresh. The temp file (and
    DuckDB's .wal beside it) is removed on every exit path; after a SIGKILL, by the next load (its name
    carries the dead writer's pid, as kvprobe.output's temp files do). If another load created the database
    meanwhile, this one is written into it instead, in a transaction, as any later load is."""
    import duckdb

    target = Path(db)
    tmp = temp_name(target)
    remove_stale_temps(target)
    with sigterm_raises():
        try:
            with connect(tmp) as con:
                con.execute("BEGIN TRANSACTION")
                result = write(con)
                con.execute("COMMIT")
                con.execute("CHECKPOINT")  # everything in the file itself: its .wal is not renamed with it
            if _place(tmp, target):
                return result
        except duckdb.Error as exc:
            raise _write_failed(db, exc, "no database file was made") from None
        except DatabaseError as exc:  # (it named the temp file: the user named the database)
            raise _write_failed(db, exc.message.removeprefix("cannot open the database: "),
                                "no database file was made") from None
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                with contextlib.suppress(OSError):
                    leftover.unlink()
    return _in_transaction(db, write)


def _place(tmp: Path, target: Path) -> bool:
    """Put the finished file at `target` unless one appeared there meanwhile (then False). A hard link
    creates the name only if it is free (atomically); where links are not supported, a rename."""
    try:
        os.link(tmp, target)
    except FileExistsError:
        return False
    except OSError:
        if target.exists():
            return False
        os.replace(tmp, target)
    return True


def _write_failed(db: str | Path, exc: Exception | str, state: str) -> DatabaseError:
    text = str(exc).strip()
    reason = text.splitlines()[0] if text else type(exc).__name__
    return DatabaseError(f"cannot write the database ({reason}); {state}", file=str(db), field="--db")


def _todo(files: list[TraceFile], stored: list[Stored], force: bool,
          matches: dict[str, Stored] | None = None) -> list[TraceFile]:
    """The files to (re)write: new ones, and versions of stored traces whose content or path changed."""
    if matches is None:
        matches = assign_ids(files, stored)
    return [tf for tf in files if force or tf.trace_id not in matches
            or matches[tf.trace_id].content_hash != tf.content_hash or matches[tf.trace_id].path != tf.path]


def _with_trace_id(a: Analysed, trace_id: str) -> Analysed:
    """The analysis's rows under the id chosen in the transaction (the provisional one may be taken now)."""
    if all(row["trace_id"] == trace_id for table in a.rows.values() for row in table[:1]):
        return a
    rows = {name: [{**row, "trace_id": trace_id} for row in table] for name, table in a.rows.items()}
    return Analysed(a.file, rows, a.records, a.skipped)


@dataclass(slots=True)
class QueryResult:
    columns: list[str]
    types: list[str]
    rows: list[tuple[Any, ...]]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row)) for row in self.rows]


def query(con: duckdb.DuckDBPyConnection, sql: str) -> QueryResult:
    """Run SQL (the last statement's result is returned); errors become DatabaseError naming the query."""
    import duckdb

    try:
        rel = con.execute(sql)
        if rel.description is None:
            return QueryResult([], [], [])
        columns = [d[0] for d in rel.description]
        types = [str(d[1]) for d in rel.description]
        return QueryResult(columns, types, rel.fetchall())
    except duckdb.Error as exc:
        raise DatabaseError(str(exc).strip(), field="SQL") from None
