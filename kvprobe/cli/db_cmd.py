"""`kvprobe db load|schema` and `kvprobe sql`: traces as DuckDB tables, for questions the CLI doesn't answer."""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from kvprobe.cli.common import out, print_json, user_errors
from kvprobe.cli.tables import Col, print_table
from kvprobe.errors import InputError
from kvprobe.output import check_output, written_in_place
from kvprobe.pricing import PriceBook

app = typer.Typer(name="db", help="Load traces into a DuckDB file (see `kvprobe db schema`); query it with "
                  "`kvprobe sql`.", no_args_is_help=True, add_completion=False)

DEFAULT_DB = Path("kvprobe.duckdb")
Db = Annotated[Path, typer.Option("--db", envvar="KVPROBE_DB", help="DuckDB file")]
JsonOut = Annotated[bool, typer.Option("--json", help="Machine-readable output")]


@app.command("load")
def load(
    traces: Annotated[list[Path], typer.Argument(help="Trace files (JSONL) or folders of agent logs; each is "
                                                 "analysed on its own, a folder as one trace")],
    db: Annotated[Path, typer.Option("--db", "--output", "-o", envvar="KVPROBE_DB",
                                     help="DuckDB file to create or update")] = DEFAULT_DB,
    price_file: Annotated[Path | None, typer.Option("--price-file", help="TOML/JSON price overrides")] = None,
    force: Annotated[bool, typer.Option("--force", help="Re-analyse traces whose content is unchanged")] = False,
    no_fixes: Annotated[bool, typer.Option("--no-fixes", help="Skip the what-if fixes (faster)")] = False,
    json_out: JsonOut = False,
) -> None:
    """Analyse traces and store requests, blocks, diagnoses and fixes in a DuckDB file (created if missing).

    Incremental: re-loading a file (even one that grew since, or moved) replaces its rows rather than
    duplicating them; an unchanged file is skipped; a different file that happens to start with the same
    record is a trace of its own. A folder (a Claude Code project, a Codex sessions tree) is one trace, its
    files deduplicated as `usage` reads them. All traces are read and checked before the database is
    written, in one transaction.

    Example: kvprobe db load traces/*.jsonl ~/.claude/projects/-home-me-app --db kvprobe.duckdb
    """
    from kvprobe.db import load_traces

    with user_errors():
        check_output(db, traces, force=True, field="--db")  # updated in place, in one transaction
        if written_in_place(db):
            raise InputError("is a device or a named pipe; a database is a file", file=str(db), field="--db")
        results = load_traces(db, traces, prices=PriceBook.from_file(price_file), force=force,
                              fixes=False if no_fixes else None)
    if json_out:
        print_json({"db": str(db), "traces": [r.to_json() for r in results]})
        return
    cols = [Col("trace", wrap=True), Col("id", drop=1), Col("status", wrap=True)] + [
        Col(name, "right", drop=drop) for name, drop in (("requests", None), ("blocks", 3), ("diagnoses", 2),
                                                         ("fixes", 4))]
    rows = []
    for r in results:
        counts = [f"{r.counts[k]:,}" if k in r.counts else "" for k in ("requests", "blocks", "diagnoses", "fixes")]
        status = r.status + (f" ({r.counts['same_as']})" if "same_as" in r.counts else "")
        rows.append([r.path, r.trace_id, status, *counts])
    print_table(f"Loaded into {db}", cols, rows)


@app.command("schema")
def schema(
    json_out: JsonOut = False,
    sql: Annotated[bool, typer.Option("--sql", help="Print the CREATE statements")] = False,
) -> None:
    """Describe the tables `kvprobe db load` writes: traces, requests, sessions, blocks, block_costs,
    diagnoses, fixes.

    Times are TIMESTAMPTZ (UTC). Every table carries trace_id; requests, blocks and diagnoses carry
    request_id: join on (trace_id, request_id).

    Example: kvprobe db schema
    """
    from kvprobe.db.schema import ddl, describe

    if json_out:
        print_json(describe())
        return
    if sql:
        out.print(";\n".join(ddl()) + ";", markup=False, highlight=False, soft_wrap=True)
        return
    for t in describe():
        print_table(f"{t['table']}: {t['doc']} (key: {', '.join(t['key'])})",
                    (Col("column"), Col("type", wrap=True), Col("meaning", wrap=True, least=24)),
                    [[c["name"], c["type"], c["doc"]] for c in t["columns"]])


def _cell(value: Any) -> Text:
    if value is None:
        return Text("NULL", style="dim")
    if isinstance(value, float):
        return Text(f"{value:,.6g}" if abs(value) >= 1e-4 or value == 0 else f"{value:.3e}")
    if isinstance(value, dt.datetime):
        return Text(value.isoformat(sep=" "))
    if isinstance(value, list):
        return Text(", ".join(map(str, value)))
    return Text(str(value))


_NUMERIC = ("INT", "DOUBLE", "FLOAT", "DECIMAL", "REAL", "HUGEINT")


def sql(
    query: Annotated[str, typer.Argument(help="SQL (DuckDB dialect); the last statement's rows are printed")],
    db: Db = DEFAULT_DB,
    trace: Annotated[list[Path] | None, typer.Option("--trace", help="Query these traces instead of --db "
                                                    "(loaded into a temporary in-memory database)")] = None,
    json_out: JsonOut = False,
    max_rows: Annotated[int, typer.Option("--max-rows", min=1, help="Rows shown in the table")] = 200,
) -> None:
    """Run SQL over the tables of `kvprobe db load` and print the rows as a table.

    Read-only: the query sees the database and nothing else (COPY ... TO, EXPORT, ATTACH and reading other
    files are refused).

    Tables: traces, requests, sessions, blocks, block_costs, diagnoses, fixes (`kvprobe db schema`
    describes every column).

    Example: kvprobe sql "SELECT agent, sum(cost_usd) AS usd FROM requests GROUP BY agent ORDER BY usd DESC"
    """
    from kvprobe.db import connect
    from kvprobe.db import query as run_query

    with user_errors():
        if trace:
            result = _query_traces(trace, query)
        else:
            with connect(db, read_only=True) as con:
                result = run_query(con, query)
    if json_out:
        print_json(result.records())
        return
    # a query's columns are the user's choice: none is dropped; long text wraps between words
    cols = [Col(name, "right") if any(k in type_.upper() for k in _NUMERIC) else Col(name, wrap=True)
            for name, type_ in zip(result.columns, result.types)]
    print_table(None, cols, [[_cell(v) for v in row] for row in result.rows[:max_rows]])
    shown = min(len(result.rows), max_rows)
    more = f" (showing {shown}; use --max-rows or --json)" if shown < len(result.rows) else ""
    out.print(Text(f"{len(result.rows):,} row(s){more}", style="dim"))


def _query_traces(traces: list[Path], sql_text: str):
    """Load traces into a throwaway database and run the query there (read-only, like --db)."""
    import tempfile

    from kvprobe.db import connect, load_traces
    from kvprobe.db import query as run_query

    with tempfile.TemporaryDirectory(prefix="kvprobe-sql-") as tmp:
        db = Path(tmp) / "traces.duckdb"
        load_traces(db, traces)
        with connect(db, read_only=True) as con:
            return run_query(con, sql_text)
