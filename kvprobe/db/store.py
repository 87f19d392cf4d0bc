"""Load analysed traces into a DuckDB file, incrementally, and run SQL over it.

A load reads and analyses every trace first (bad input: the database is not touched), then writes all of
them in one transaction. A trace already in the database under the same `trace_id` is replaced (or skipped
when its content is unchanged), so loading a file twice never duplicates a row.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import xxhash

from kvprobe import __version__
from kvprobe.db.rows import Rows, report_rows
from kvprobe.db.schema import SCHEMA_VERSION, TABLES, ddl
from kvprobe.errors import InputError
from kvprobe.pricing import PriceBook
from kvprobe.report import build_report

if TYPE_CHECKING:
    import duckdb

_CHUNK = 1 << 20


@dataclass(slots=True)
class TraceFile:
    """A trace file's identity (first record line) and content hash, read without parsing it."""

    path: Path  # resolved
    given: str  # as the user named it
    trace_id: str
    content_hash: str
    size: int


def identify(path: str | Path) -> TraceFile:
    path = Path(path)
    if not path.is_file():
        raise InputError("file does not exist" if not path.exists() else "not a file", file=str(path))
    first, whole, size = None, xxhash.xxh3_128(), 0
    with path.open("rb") as fh:
        for line in fh:
            whole.update(line)
            size += len(line)
            if first is None and line.strip():
                first = xxhash.xxh3_64_hexdigest(line.rstrip(b"\r\n"))
    if first is None:
        raise InputError("no records: the trace is empty", file=str(path))
    return TraceFile(path.resolve(), str(path), first, whole.hexdigest(), size)


@dataclass(slots=True)
class Analysed:
    file: TraceFile
    rows: Rows
    records: int
    skipped: int


def analyse(tf: TraceFile, prices: PriceBook | None = None, fixes: bool | None = None) -> Analysed:
    """Simulate one trace file on its own and turn its report into rows."""
    rep = build_report([tf.path], prices=prices or PriceBook(), fixes=fixes, top=0)
    stats = rep.stats[0][1] if rep.stats else None
    return Analysed(tf, report_rows(tf.trace_id, rep), stats.records if stats else 0,
                    stats.skipped if stats else 0)


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
    try:
        con = duckdb.connect(str(db), read_only=read_only)
    except duckdb.Error as exc:
        raise DatabaseError(f"cannot open the database: {exc}", file=str(db), field="--db") from None
    try:
        con.execute("SET TimeZone = 'UTC'")
        yield con
    finally:
        con.close()


def _existing(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    if "kvprobe_meta" not in tables:
        return {}
    row = con.execute("SELECT value FROM kvprobe_meta WHERE key = 'schema_version'").fetchone()
    if row and row[0] != str(SCHEMA_VERSION):
        raise DatabaseError(f"made by kvprobe schema version {row[0]}; this kvprobe writes version "
                            f"{SCHEMA_VERSION}: load into a new file", field="--db")
    return dict(con.execute("SELECT trace_id, content_hash FROM traces").fetchall())


def _write(con: duckdb.DuckDBPyConnection, a: Analysed, loaded_at: float) -> dict[str, int]:
    from kvprobe.db.frames import frame

    tf = a.file
    for t in TABLES:
        con.execute(f"DELETE FROM {t.name} WHERE trace_id = ?", [tf.trace_id])
    rows = dict(a.rows, traces=[{"trace_id": tf.trace_id, "path": str(tf.path), "size_bytes": tf.size,
                                 "content_hash": tf.content_hash, "records": a.records,
                                 "skipped_lines": a.skipped, "loaded_at": loaded_at,
                                 "kvprobe_version": __version__}])
    for t in TABLES:
        if rows[t.name]:
            con.register("kvprobe_rows", frame(t.name, rows[t.name]))
            con.execute(f"INSERT INTO {t.name} BY NAME SELECT * FROM kvprobe_rows")
            con.unregister("kvprobe_rows")
    return {name: len(rows[name]) for name in ("requests", "blocks", "diagnoses", "fixes")}


def load_traces(db: str | Path, paths: Iterable[str | Path], *, prices: PriceBook | None = None,
                force: bool = False, fixes: bool | None = None) -> list[LoadResult]:
    """Analyse `paths` and store them in the DuckDB file `db` (created if missing). See the module doc."""
    files: list[TraceFile] = []
    results: list[LoadResult] = []
    seen: dict[str, TraceFile] = {}
    for p in paths:
        tf = identify(p)
        twin = seen.get(tf.trace_id)
        if twin is not None and twin.content_hash == tf.content_hash:
            results.append(LoadResult(tf.given, tf.trace_id, "duplicate", {"same_as": twin.given}))
            continue
        if twin is not None:
            raise InputError(f"starts with the same record as {twin.given} but differs after it: two versions of "
                             "one trace; load one of them", file=str(p))
        seen[tf.trace_id] = tf
        files.append(tf)
    known: dict[str, str] = {}
    if Path(db).is_file() and not force:
        with connect(db, read_only=True) as con:
            known = _existing(con)
    todo = [tf for tf in files if force or known.get(tf.trace_id) != tf.content_hash]
    analysed = [analyse(tf, prices, fixes) for tf in todo]  # all input checked before the database is touched
    with connect(db) as con:
        known = _existing(con)
        con.execute("BEGIN TRANSACTION")
        try:
            for stmt in ddl():
                con.execute(stmt)
            con.execute("INSERT OR REPLACE INTO kvprobe_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
            now = time.time()
            written = {a.file.trace_id: (a.file.trace_id in known, _write(con, a, now)) for a in analysed}
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    for tf in files:
        if tf.trace_id in written:
            replaced, counts = written[tf.trace_id]
            results.append(LoadResult(tf.given, tf.trace_id, "replaced" if replaced else "loaded", counts))
        else:
            results.append(LoadResult(tf.given, tf.trace_id, "unchanged"))
    return results


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
