"""The DuckDB schema of `kvprobe db load`: one row per trace file, request, block, diagnosis and fix.

This table list is the single source of truth: the DDL (with column comments), `kvprobe db schema`, and the
pandas frames of `kvprobe.load()` are all generated from it. Times are TIMESTAMPTZ (UTC); token counts BIGINT.

Keys: a trace file is identified by `trace_id`, the hash of its first record line (with a suffix when another
loaded file starts with the same record), kept when the file grows (capture appends) or moves; re-loading it
replaces that trace's rows instead of adding duplicates. Every other table is keyed by (trace_id,
request_id, ...).

One name for one quantity, in every table: token counts
are `<class>_tokens` (input, cache_read, cache_write, cache_write_5m, cache_write_1h, fresh_input, output,
missed_read), their dollars `<class>_usd` (cache_read, cache_write, fresh_input, output) adding up to
`cost_usd`, the share of input read from the cache `token_hit_ratio`, and the same cost in fresh-input tokens
`input_equivalent_tokens`. (`report --json` keeps its own names: its `blocks` say write_usd, read_usd,
fresh_usd and total_usd, docs/contracts.md §3.)
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

SCHEMA_VERSION = 5  # 2: fixes.chosen (alternatives stored too); 3: sessions; 4: one naming (token_hit_ratio,
# missed_read_tokens, cache_read_usd/cache_write_usd/fresh_input_usd/cost_usd in block_costs) and the requests'
# dollars by token class; 5: the requests' project and their cache writes' dollars by lifetime (the bill)


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str  # DuckDB type
    doc: str


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    doc: str
    key: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]


def _c(name: str, type_: str, doc: str) -> Column:
    return Column(name, type_, doc)


_TRACE = _c("trace_id", "VARCHAR", "the trace file's identity: hash of its first record line (suffixed when "
            "another file starts alike)")
_REQ = _c("request_id", "VARCHAR", "the record's id (unique within its trace)")
_TOKENS = (  # a request's usage, and the sums of a session's
    _c("input_tokens", "BIGINT", "ALL input tokens (cached or not)"),
    _c("cache_read_tokens", "BIGINT", "input tokens read from the cache"),
    _c("cache_write_tokens", "BIGINT", "input tokens written to the cache (5m + 1h)"),
    _c("cache_write_5m_tokens", "BIGINT", "cache writes with a 5-minute TTL"),
    _c("cache_write_1h_tokens", "BIGINT", "cache writes with a 1-hour TTL"),
    _c("fresh_input_tokens", "BIGINT", "input tokens neither read nor written"),
    _c("output_tokens", "BIGINT", "output tokens"),
)

TABLES: tuple[Table, ...] = (
    Table("traces", "one row per loaded trace file", ("trace_id",), (
        _TRACE,
        _c("path", "VARCHAR", "absolute path the trace was last loaded from"),
        _c("size_bytes", "BIGINT", "file size when loaded"),
        _c("content_hash", "VARCHAR", "hash of the whole file: an unchanged file is not re-analysed"),
        _c("records", "INTEGER", "records read"),
        _c("skipped_lines", "INTEGER", "malformed lines skipped"),
        _c("loaded_at", "TIMESTAMPTZ", "when it was loaded"),
        _c("kvprobe_version", "VARCHAR", "kvprobe version that analysed it"),
    )),
    Table("requests", "one row per request: observed usage, the simulation's prediction, cost",
          ("trace_id", "request_id"), (
        _TRACE, _REQ,
        _c("seq", "INTEGER", "position in start order within the trace (0-based)"),
        _c("line", "INTEGER", "line of the record in the trace file"),
        _c("session", "VARCHAR", "session ('-' when the record has none)"),
        _c("agent", "VARCHAR", "agent ('main' when the record has none)"),
        _c("project", "VARCHAR", "the working directory logged with the request, else its Claude Code project "
                                 "folder ('(none)')"),
        _c("provider", "VARCHAR", "anthropic | openai | deepseek | gemini | local"),
        _c("model", "VARCHAR", "model name from the request"),
        _c("model_known", "BOOLEAN", "the model is in kvprobe's provider catalog"),
        _c("started_at", "TIMESTAMPTZ", "when the request was sent"),
        _c("readable_at", "TIMESTAMPTZ", "first response byte: from then on its cache entry can be read"),
        _c("finished_at", "TIMESTAMPTZ", "when the response ended (NULL if not logged)"),
        *_TOKENS,
        _c("token_hit_ratio", "DOUBLE", "cache_read_tokens / input_tokens (NULL when no input)"),
        _c("cost_usd", "DOUBLE", "price of the request (NULL when the model has no price): the four below added"),
        _c("cache_read_usd", "DOUBLE", "USD of its cache reads (NULL when unpriced)"),
        _c("cache_write_usd", "DOUBLE", "USD of its cache writes, 5m and 1h"),
        _c("cache_write_5m_usd", "DOUBLE", "USD of its 5-minute cache writes"),
        _c("cache_write_1h_usd", "DOUBLE", "USD of its 1-hour cache writes"),
        _c("fresh_input_usd", "DOUBLE", "USD of its input neither read nor written"),
        _c("output_usd", "DOUBLE", "USD of its output"),
        _c("cost_source", "VARCHAR", "where the price came from"),
        _c("input_equivalent_tokens", "DOUBLE", "cost in fresh-input tokens (writes and reads weighted)"),
        _c("observed", "BOOLEAN", "usage came from the provider (else it is the simulation's)"),
        _c("tokens_source", "VARCHAR", "observed | exact | estimated | usage-only"),
        _c("write_kind", "VARCHAR", "cold_start | rebuild | extension | none"),
        _c("reusable_tokens", "BIGINT", "the most an ideal prefix cache could have read"),
        _c("missed_read_tokens", "BIGINT", "reusable tokens that were not read"),
        _c("predicted_cache_read_tokens", "BIGINT", "simulated cache read (NULL for usage-only records)"),
        _c("predicted_cache_write_tokens", "BIGINT", "simulated cache write"),
        _c("predicted_fresh_input_tokens", "BIGINT", "simulated fresh input"),
        _c("miss_kind", "VARCHAR", "kind of the first diagnosis (NULL when none)"),
        _c("n_blocks", "INTEGER", "cacheable blocks in the request (NULL for usage-only records)"),
        _c("n_breakpoints", "INTEGER", "cache breakpoints in the request"),
        _c("error", "VARCHAR", "transport/API error logged with the record"),
    )),
    Table("sessions", "one row per session of each trace: the totals `kvprobe report --json` lists under "
                      "sessions", ("trace_id", "session"), (
        _TRACE,
        _c("session", "VARCHAR", "session ('-' when the records have none)"),
        _c("requests", "INTEGER", "requests in the session"),
        *_TOKENS,
        _c("token_hit_ratio", "DOUBLE", "cache_read_tokens / input_tokens (0 when no input)"),
        _c("input_equivalent_tokens", "DOUBLE", "cost in fresh-input tokens (writes and reads weighted)"),
        _c("cost_usd", "DOUBLE", "price of its requests (NULL when none could be priced)"),
        _c("unpriced_requests", "INTEGER", "requests whose model has no price"),
        _c("cold_start_write_tokens", "BIGINT", "cache writes of requests that found nothing to read"),
        _c("rebuild_write_tokens", "BIGINT", "cache writes that rebuilt what was cached before"),
        _c("extension_write_tokens", "BIGINT", "cache writes of content new to the cache (the rest of the writes)"),
        _c("missed_read_tokens", "BIGINT", "tokens an ideal prefix cache would have read that were not"),
    )),
    Table("blocks", "one row per cacheable block of each request, in prefix order",
          ("trace_id", "request_id", "block_index"), (
        _TRACE, _REQ,
        _c("block_index", "INTEGER", "position in the request's prefix order (0-based)"),
        _c("path", "VARCHAR", "where it sits: tools[i] | system[i] | messages[i].content[j] | input[i] ..."),
        _c("level", "VARCHAR", "tools | system | messages"),
        _c("kind", "VARCHAR", "tool_definition | text | image | tool_use | tool_result | thinking ..."),
        _c("role", "VARCHAR", "message role ('' outside messages)"),
        _c("tokens", "BIGINT", "tokens of this block"),
        _c("start_token", "BIGINT", "tokens before this block in the prompt"),
        _c("content_hash", "VARCHAR", "chained content hash (32 hex digits): equal => same prefix content"),
        _c("cache_key", "VARCHAR", "chained cache key (content + identity params, 32 hex digits)"),
        _c("breakpoint_ttl", "VARCHAR", "5m | 1h when a cache breakpoint ends at this block, else NULL"),
    )),
    Table("block_costs", "what each unique block cost over the trace: its write, reads and fresh resends "
          "(rows add up to the input cost; one row per block content, first sent by first_request)",
          ("trace_id", "block_hash"), (
        _TRACE,
        _c("block_hash", "VARCHAR", "the block's own content hash (16 hex digits; 'unattributed' for input the "
                                    "provider counted beyond the sized blocks)"),
        _c("path", "VARCHAR", "where it was first sent"),
        _c("kind", "VARCHAR", "system text | tool definition | tool result | tool call | message text | file ..."),
        _c("first_request", "VARCHAR", "the first request that sent it"),
        _c("tokens", "BIGINT", "tokens of the block"),
        _c("requests", "INTEGER", "requests that carried it"),
        _c("cache_write_usd", "DOUBLE", "USD of its cache writes"),
        _c("cache_read_usd", "DOUBLE", "USD of its cache reads"),
        _c("fresh_input_usd", "DOUBLE", "USD of it sent uncached"),
        _c("cost_usd", "DOUBLE", "cache_write_usd + cache_read_usd + fresh_input_usd"),
        _c("input_equivalent_tokens", "DOUBLE", "the same in input-token equivalents"),
    )),
    Table("diagnoses", "why a request read less than it could have (docs/contracts.md §3 kinds)",
          ("trace_id", "request_id", "diagnosis_index"), (
        _TRACE, _REQ,
        _c("diagnosis_index", "INTEGER", "order among the request's diagnoses (0 = main cause)"),
        _c("kind", "VARCHAR", "prefix_changed | params_changed | ttl_expired | lookback_exceeded | below_minimum "
                              "| not_yet_readable | missing_breakpoint | stale_read | routing | unexplained"),
        _c("inferred", "BOOLEAN", "kvprobe's analysis (false: reported by the provider)"),
        _c("detail", "VARCHAR", "the cause in words"),
        _c("advice", "VARCHAR", "what to do about this kind"),
        _c("path", "VARCHAR", "block path of the earliest change, when known"),
        _c("token_position", "BIGINT", "tokens before the change, when known"),
        _c("seconds_past", "DOUBLE", "ttl_expired: how long before the request the entry expired"),
        _c("writer_id", "VARCHAR", "request that wrote (or was writing) the entry"),
        _c("param", "VARCHAR", "params_changed: the parameter"),
        _c("missed_read_tokens", "BIGINT", "tokens an ideal cache would have read, by this cause"),
        _c("details", "JSON", "every field of the diagnosis"),
    )),
    Table("fixes", "what-if fixes `kvprobe fix` writes, then their alternatives: each saving re-simulates the "
                   "requests it changes",
          ("trace_id", "fix_index"), (
        _TRACE,
        _c("fix_index", "INTEGER", "order (largest saving first)"),
        _c("kind", "VARCHAR", "stabilize_prefix | stable_params | keep_alive | ttl_1h | lookback_breakpoint "
                              "| shared_breakpoint"),
        _c("chosen", "BOOLEAN", "true: part of what `kvprobe fix` writes; false: an alternative for the same "
                                "miss that a chosen fix does better than"),
        _c("requests", "VARCHAR[]", "request ids the fix is about (unnest() to join with requests)"),
        _c("saving_input_equivalent_tokens", "DOUBLE", "input-equivalent tokens saved"),
        _c("saving_usd", "DOUBLE", "USD saved (NULL when unpriced)"),
        _c("detail", "VARCHAR", "what to change"),
    )),
)

BY_NAME = {t.name: t for t in TABLES}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def ddl() -> list[str]:
    """CREATE statements (idempotent) with table and column comments."""
    stmts = ["CREATE TABLE IF NOT EXISTS kvprobe_meta (key VARCHAR PRIMARY KEY, value VARCHAR)"]
    for t in TABLES:
        cols = ", ".join(f"{c.name} {c.type}" for c in t.columns)
        stmts.append(f"CREATE TABLE IF NOT EXISTS {t.name} ({cols}, PRIMARY KEY ({', '.join(t.key)}))")
        stmts.append(f"COMMENT ON TABLE {t.name} IS {_quote(t.doc)}")
        stmts += [f"COMMENT ON COLUMN {t.name}.{c.name} IS {_quote(c.doc)}" for c in t.columns]
    return stmts


def describe() -> list[dict[str, object]]:
    """The schema as data (what `kvprobe db schema --json` prints)."""
    return [{"table": t.name, "doc": t.doc, "key": list(t.key),
             "columns": [{"name": c.name, "type": c.type, "doc": c.doc} for c in t.columns]} for t in TABLES]


_PY_TYPES: dict[str, Any] = {"BIGINT": int, "INTEGER": int, "DOUBLE": float, "BOOLEAN": bool, "VARCHAR": str,
                             "JSON": str, "TIMESTAMPTZ": dt.datetime, "VARCHAR[]": list[str]}


def _from_row(cls: Any, row: dict[str, Any]) -> Any:
    """An instance from a row dict: missing columns are None, epoch seconds become UTC datetimes."""
    values = {}
    for f in dataclasses.fields(cls):
        v = row.get(f.name)
        if isinstance(v, (int, float)) and f.metadata.get("type") == "TIMESTAMPTZ":
            v = dt.datetime.fromtimestamp(v, dt.timezone.utc)
        values[f.name] = v
    return cls(**values)


@lru_cache(maxsize=None)
def _schema_row_type(name: str) -> type:
    t = BY_NAME[name]
    fields = [(c.name, _PY_TYPES.get(c.type, Any) | None, dataclasses.field(metadata={"type": c.type, "doc": c.doc}))
              for c in t.columns]
    doc = f"A row of `{name}`: {t.doc}.\n\n" + "\n".join(f"{c.name}: {c.doc}" for c in t.columns)
    cls = dataclasses.make_dataclass(_class_name(name), fields, frozen=True, slots=True,
                                     namespace={"__doc__": doc, "from_row": classmethod(_from_row)})
    cls.__module__ = __name__
    return cls


def _class_name(table: str) -> str:
    singular = {"traces": "trace", "requests": "request", "sessions": "session", "blocks": "block",
                "block_costs": "block_cost", "diagnoses": "diagnosis", "fixes": "fix"}.get(table, table)
    return "".join(part.title() for part in singular.split("_")) + "Row"


def row_type(name: str, rows: list[dict[str, Any]] = ()) -> type:  # type: ignore[assignment]
    """The frozen dataclass of one table's rows, its fields the table's columns (typed from the schema, each
    documented). A table outside the schema (fleet findings) gets one from its rows' keys."""
    if name in BY_NAME:
        return _schema_row_type(name)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    cls = dataclasses.make_dataclass(_class_name(name), [(k, Any, dataclasses.field(default=None)) for k in keys],
                                     frozen=True, namespace={"from_row": classmethod(_from_row)})
    cls.__module__ = __name__
    return cls
