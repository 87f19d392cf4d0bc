"""`kvprobe.load(path)`: a trace (or a database made by `kvprobe db load`) as pandas DataFrames.

    import kvprobe
    data = kvprobe.load("trace.jsonl")
    df = data.to_pandas()                     # one row per request (schema: `kvprobe db schema`)
    df.groupby("agent").cost_usd.sum()
    data.blocks(), data.block_costs(), data.diagnoses(), data.fixes(), data.traces()

The frames have exactly the columns and types of the DuckDB tables of the same names.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kvprobe.db.frames import frame
from kvprobe.db.rows import Rows
from kvprobe.db.schema import TABLES
from kvprobe.db.store import analyse, connect, identify
from kvprobe.pricing import PriceBook

if TYPE_CHECKING:
    import pandas as pd

_DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of a DuckDB database file


class Loaded:
    """Tables of one or more traces; each method returns a fresh DataFrame."""

    def __init__(self, rows: Rows) -> None:
        self._rows = rows

    def table(self, name: str) -> pd.DataFrame:
        if name not in self._rows:
            raise KeyError(f"no table {name!r}; tables: {', '.join(self._rows)}")
        return frame(name, self._rows[name])

    def to_pandas(self) -> pd.DataFrame:
        """One row per request, in start order within each trace."""
        return self.table("requests")

    def blocks(self) -> pd.DataFrame:
        return self.table("blocks")

    def block_costs(self) -> pd.DataFrame:
        """One row per unique block with its write, read and fresh cost (rows add up to the input cost)."""
        return self.table("block_costs")

    def diagnoses(self) -> pd.DataFrame:
        return self.table("diagnoses")

    def fixes(self) -> pd.DataFrame:
        return self.table("fixes")

    def traces(self) -> pd.DataFrame:
        return self.table("traces")

    def __len__(self) -> int:
        return len(self._rows["requests"])

    def __repr__(self) -> str:
        counts = ", ".join(f"{len(v)} {k}" for k, v in self._rows.items())
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
    return Loaded(rows)


def load(path: str | Path | Sequence[str | Path], *, prices: PriceBook | None = None,
         fixes: bool | None = None) -> Loaded:
    """Analyse trace file(s) (each simulated on its own, as `kvprobe db load` does) or open a DuckDB file
    written by `kvprobe db load`. Raises kvprobe.errors.InputError on bad input."""
    import time

    from kvprobe import __version__

    paths = [Path(path)] if isinstance(path, (str, Path)) else [Path(p) for p in path]
    if len(paths) == 1 and _is_duckdb(paths[0]):
        return _from_database(paths[0])
    rows: Rows = {t.name: [] for t in TABLES}
    for p in paths:
        a = analyse(identify(p), prices, fixes)
        for name, table_rows in a.rows.items():
            rows[name] += table_rows
        rows["traces"].append({"trace_id": a.file.trace_id, "path": str(a.file.path), "size_bytes": a.file.size,
                               "content_hash": a.file.content_hash, "records": a.records,
                               "skipped_lines": a.skipped, "loaded_at": time.time(),
                               "kvprobe_version": __version__})
    return Loaded(rows)
