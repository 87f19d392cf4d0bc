"""Traces as tables: DuckDB (`kvprobe db load`, `kvprobe sql`) and pandas (`kvprobe.load`). Schema: schema.py."""
from kvprobe.db.data import Loaded, load
from kvprobe.db.schema import SCHEMA_VERSION, TABLES, describe
from kvprobe.db.store import DatabaseError, LoadResult, connect, load_traces, query

__all__ = ["DatabaseError", "LoadResult", "Loaded", "SCHEMA_VERSION", "TABLES", "connect", "describe", "load",
           "load_traces", "query"]
