"""`kvprobe.load(...)`: every table `kvprobe report --json` has, as pandas DataFrames and as dataclasses.

    import kvprobe
    data = kvprobe.load("trace.jsonl")        # or several traces, a DuckDB file, or kvprobe.analyse(...)
    data.tables                               # ('traces', 'requests', 'sessions', 'blocks', ...)
    data.to_pandas()                          # one row per request (columns: `kvprobe db schema`)
    data.to_pandas("diagnoses")               # any table by name; data.diagnoses() is the same
    data.records("fixes")                     # the same rows as frozen dataclasses
    data.bill()                               # the spend by token class, by model, project, session, agent
    data.reports[trace_id].totals             # the Report each trace's rows came from

The frames have exactly the columns and types of the DuckDB tables of the same names (`kvprobe db load`),
plus `bill` (the report's bill, not stored in DuckDB: there, group `requests` by model, project, session or
agent) and `fleet` (shared-prefix findings across sessions) when the report has them.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from kvprobe.db.frames import frame
from kvprobe.db.rows import Rows, bill_rows, report_rows
from kvprobe.db.schema import BY_NAME, TABLES, row_type
from kvprobe.db.store import TraceFile, analyse, assign_ids, connect, identify
from kvprobe.pricing import PriceBook
from kvprobe.report import Report

if TYPE_CHECKING:
    import pandas as pd

_DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of a DuckDB database file
FLEET = "fleet"  # findings across sessions that share a prefix: a table only when the report has them
BILL = "bill"  # the report's bill by grouping: a table only when loaded from reports (not from a database)
_FROM_REPORTS = (BILL, FLEET)  # tables outside the DuckDB schema, their columns the rows' own keys


class Loaded:
    """The tables of one or more analysed traces (or of a `kvprobe db load` database).

    Every table is a fresh pandas DataFrame from `to_pandas(name)` (or the method of the same name), or a
    list of frozen dataclasses from `records(name)`. `reports` maps each trace_id to the `Report` its rows
    came from (empty when read from a database)."""

    def __init__(self, rows: Rows, reports: dict[str, Report] | None = None) -> None:
        self._rows = rows
        self.reports: dict[str, Report] = reports or {}

    @property
    def tables(self) -> tuple[str, ...]:
        """The names of the tables held: `kvprobe db schema` describes each (fleet only when present)."""
        return tuple(name for name in self._rows if name not in _FROM_REPORTS or self._rows[name])

    def to_pandas(self, table: str = "requests") -> pd.DataFrame:
        """One table as a DataFrame: `requests` (the default: one row per request, in start order within
        each trace), `sessions`, `blocks`, `block_costs`, `diagnoses`, `fixes`, `traces`, `bill`, `fleet`."""
        if table not in self._rows:
            raise KeyError(f"no table {table!r}; tables: {', '.join(self.tables)}")
        if table not in BY_NAME:  # bill, fleet: their columns are the rows' own keys
            import pandas as pd

            return pd.DataFrame(self._rows[table])
        return frame(table, self._rows[table])

    table = to_pandas

    def records(self, table: str = "requests") -> list[Any]:
        """One table's rows as frozen dataclasses (`kvprobe.db.schema.row_type(table)`), times as UTC
        datetimes: for code that wants attributes and types rather than a DataFrame."""
        if table not in self._rows:
            raise KeyError(f"no table {table!r}; tables: {', '.join(self.tables)}")
        cls = row_type(table, self._rows[table])
        return [cls.from_row(row) for row in self._rows[table]]

    def requests(self) -> pd.DataFrame:
        """One row per request: usage logged, the simulation's prediction, cost, the main miss kind."""
        return self.to_pandas("requests")

    def sessions(self) -> pd.DataFrame:
        """One row per session of each trace: its totals, as `report --json` lists them under `sessions`."""
        return self.to_pandas("sessions")

    def blocks(self) -> pd.DataFrame:
        """One row per cacheable block of each request, in prefix order (path, kind, tokens, hashes)."""
        return self.to_pandas("blocks")

    def block_costs(self) -> pd.DataFrame:
        """One row per unique block with its write, read and fresh cost (rows add up to the input cost);
        `report --json` calls them `blocks`."""
        return self.to_pandas("block_costs")

    def diagnoses(self) -> pd.DataFrame:
        """Why each request read less than it could have: kind, detail, advice, missed tokens."""
        return self.to_pandas("diagnoses")

    def fixes(self) -> pd.DataFrame:
        """The fixes `kvprobe fix` writes (chosen) and their alternatives, each with its saving."""
        return self.to_pandas("fixes")

    def bill(self) -> pd.DataFrame:
        """The spend by token class: one row per `grouping` (model, project, session, agent) and `key`, with
        the session's `title`, `requests`, `cache_read_usd`, `cache_write_5m_usd`, `cache_write_1h_usd`,
        `cache_write_usd`, `fresh_input_usd`, `output_usd`, `cost_usd`, `unpriced_requests` (empty when
        read from a database)."""
        return self.to_pandas(BILL)

    def fleet(self) -> pd.DataFrame:
        """Findings across sessions that share a prefix (empty when the report has none)."""
        return self.to_pandas(FLEET)

    def traces(self) -> pd.DataFrame:
        """One row per trace file: its trace_id, path, size, content hash and records read."""
        return self.to_pandas("traces")

    def __len__(self) -> int:
        return len(self._rows["requests"])

    def __repr__(self) -> str:
        counts = ", ".join(f"{len(self._rows[k])} {k}" for k in self.tables)
        return f"<kvprobe.Loaded: {counts}>"


def _is_duckdb(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(12)[8:12] == _DUCKDB_MAGIC
    except OSError:
        return False


def _from_database(path: Path) -> Loaded:
    import datetime as dt

    rows: Rows = {}
    with connect(path, read_only=True) as con:
        for t in TABLES:
            cur = con.execute(f"SELECT * FROM {t.name}")
            names = [d[0] for d in cur.description]
            recs = [dict(zip(names, r)) for r in cur.fetchall()]
            for rec in recs:  # back to epoch seconds: `frame` types every column from the schema
                for k, v in rec.items():
                    if isinstance(v, dt.datetime):
                        rec[k] = v.timestamp()
            rows[t.name] = recs
    return Loaded(rows | {BILL: [], FLEET: []})


def _fleet_rows(trace_id: str, rep: Report) -> list[dict[str, Any]]:
    return [{"trace_id": trace_id, **f.to_json()} for f in rep.fleet]


def _trace_row(tf: TraceFile, records: int | None, skipped: int) -> dict[str, Any]:
    from kvprobe import __version__

    return {"trace_id": tf.trace_id, "path": str(tf.path), "size_bytes": tf.size, "content_hash": tf.content_hash,
            "records": records, "skipped_lines": skipped, "loaded_at": time.time(), "kvprobe_version": __version__}


def _from_report(rep: Report) -> Loaded:
    """One report (of any number of traces or agent-log folders, simulated together) as tables, keyed by its
    inputs' trace_ids joined: for one input, the very tables `load(path)` gives."""
    names = rep.inputs or [name for name, _ in rep.stats]
    files = [identify(name) for name in names if Path(name).exists()]
    assign_ids(files, [])
    trace_id = "+".join(tf.trace_id for tf in files) or "report"
    rows: Rows = {t.name: [] for t in TABLES}
    rows.update(report_rows(trace_id, rep))
    stats = dict(rep.stats)
    rows["traces"] = [_trace_row(tf, *_read_counts(tf, stats, rep, len(files))) for tf in files]
    rows[BILL] = bill_rows(trace_id, rep)
    rows[FLEET] = _fleet_rows(trace_id, rep)
    return Loaded(rows, {trace_id: rep})


def _read_counts(tf: TraceFile, stats: dict[str, Any], rep: Report, inputs: int) -> tuple[int | None, int]:
    """Records read and lines skipped of one input: from its read stats (a kvprobe trace), else (agent logs,
    read through the importers) the report's requests when it is the only input, else unknown (NULL)."""
    s = stats.get(tf.given) or stats.get(str(tf.path))
    if s is not None:
        return s.records, s.skipped
    return (rep.considered + len(rep.failed) if inputs == 1 else None), 0


def load(path: str | Path | Sequence[str | Path] | Report, *, prices: PriceBook | None = None,
         fixes: bool | None = None) -> Loaded:
    """The tables of trace file(s), of a DuckDB file written by `kvprobe db load`, or of a `Report`
    (`kvprobe.analyse(...)`: several traces simulated together, with its filters).

    Each trace file is simulated on its own, as `kvprobe db load` does, and identified by its trace_id (the
    hash of its first record line). `fixes`: True computes the what-if fixes, False skips them, None decides
    by input size. Raises kvprobe.InputError on bad input (its message names the file, line and field).
    """
    if isinstance(path, Report):
        return _from_report(path)
    paths = [Path(path)] if isinstance(path, (str, Path)) else [Path(p) for p in path]
    if len(paths) == 1 and _is_duckdb(paths[0]):
        return _from_database(paths[0])
    files = [identify(p) for p in paths]
    assign_ids(files, [])
    rows: Rows = {t.name: [] for t in TABLES} | {BILL: [], FLEET: []}
    reports: dict[str, Report] = {}
    for tf in files:
        a = analyse(tf, prices, fixes, keep_report=True)
        for name, table_rows in a.rows.items():
            rows[name] += table_rows
        rows["traces"].append(_trace_row(tf, a.records, a.skipped))
        rep = cast(Report, a.report)  # kept: keep_report
        rows[BILL] += bill_rows(tf.trace_id, rep)
        rows[FLEET] += _fleet_rows(tf.trace_id, rep)
        reports[tf.trace_id] = rep
    return Loaded(rows, reports)
