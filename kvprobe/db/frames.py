"""Rows as pandas DataFrames typed by the schema (nullable integers, UTC timestamps), for DuckDB and users."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvprobe.db.schema import BY_NAME, Table

if TYPE_CHECKING:
    import pandas as pd

_DTYPES = {"BIGINT": "Int64", "INTEGER": "Int64", "DOUBLE": "Float64", "BOOLEAN": "boolean"}


def _series(table: Table, name: str, values: list[Any]) -> pd.Series:
    import pandas as pd

    type_ = next(c.type for c in table.columns if c.name == name)
    if type_ == "TIMESTAMPTZ":
        micros = pd.Series(values, dtype="Float64").mul(1e6).round().astype("Int64")  # DuckDB's resolution
        return pd.to_datetime(micros, unit="us", utc=True).astype("datetime64[us, UTC]")
    if type_ in _DTYPES:
        return pd.Series(values, dtype=_DTYPES[type_])
    return pd.Series(values, dtype=object)


def frame(table_name: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One table's rows as a DataFrame with every schema column, in schema order."""
    import pandas as pd

    table = BY_NAME[table_name]
    return pd.DataFrame({c: _series(table, c, [r.get(c) for r in rows]) for c in table.names})
