"""A report as table rows (schema.py): pure, no DuckDB and no pandas here."""
from __future__ import annotations

from typing import Any

import orjson

from kvprobe.analysis.diagnosis import advice_for
from kvprobe.analysis.simulate import RequestResult
from kvprobe.economics.bill import project_of
from kvprobe.economics.token_costs import token_class_usd
from kvprobe.report import Report

Rows = dict[str, list[dict[str, Any]]]


def _hex(value: int) -> str:
    return f"{value:032x}"


def _class_usd(r: RequestResult, prices: Any) -> dict[str, float | None]:
    """The request's cost by token class (economics.token_costs), NULL each when it is unpriced."""
    usd = token_class_usd(r, prices)
    if usd is None:
        return {"cache_read_usd": None, "cache_write_usd": None, "cache_write_5m_usd": None,
                "cache_write_1h_usd": None, "fresh_input_usd": None, "output_usd": None}
    return {"cache_read_usd": usd["read"], "cache_write_usd": usd["write_5m"] + usd["write_1h"],
            "cache_write_5m_usd": usd["write_5m"], "cache_write_1h_usd": usd["write_1h"],
            "fresh_input_usd": usd["fresh"], "output_usd": usd["output"]}


def request_row(trace_id: str, seq: int, r: RequestResult, prices: Any = None) -> dict[str, Any]:
    u, p, sk = r.usage, r.predicted, r.sk
    req = sk.request
    return {
        "trace_id": trace_id, "request_id": sk.id, "seq": seq, "line": sk.line, "session": sk.session,
        "agent": sk.agent, "project": project_of(r), "provider": sk.provider, "model": sk.model,
        "model_known": r.rules.known_model,
        "started_at": sk.started_at, "readable_at": sk.readable_at, "finished_at": sk.finished_at,
        "input_tokens": u.input_tokens, "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens, "cache_write_5m_tokens": u.cache_write_5m_tokens,
        "cache_write_1h_tokens": u.cache_write_1h_tokens, "fresh_input_tokens": u.fresh_input_tokens,
        "output_tokens": u.output_tokens,
        "token_hit_ratio": u.cache_read_tokens / u.input_tokens if u.input_tokens else None,
        "cost_usd": r.cost_usd, **_class_usd(r, prices), "cost_source": r.cost_source, "input_equivalent_tokens": r.input_equivalent,
        "observed": r.observed, "tokens_source": r.tokens_source, "write_kind": r.write_kind,
        "reusable_tokens": r.reusable_tokens, "missed_read_tokens": r.missed_tokens,
        "predicted_cache_read_tokens": p.cache_read_tokens if p else None,
        "predicted_cache_write_tokens": p.cache_write_tokens if p else None,
        "predicted_fresh_input_tokens": p.fresh_input_tokens if p else None,
        "miss_kind": r.diagnoses[0].kind if r.diagnoses else None,
        "n_blocks": len(req.blocks) if req else None, "n_breakpoints": len(req.breakpoints) if req else None,
        "error": sk.error,
    }


def block_rows(trace_id: str, r: RequestResult) -> list[dict[str, Any]]:
    req = r.sk.request
    if req is None:
        return []
    ttl = dict(req.breakpoints)  # block index -> TTL: this request's own markers (blocks are shared)
    rows, start = [], 0
    for i, b in enumerate(req.blocks):
        rows.append({"trace_id": trace_id, "request_id": r.sk.id, "block_index": i, "path": b.path,
                     "level": b.level, "kind": b.kind, "role": b.role, "tokens": b.tokens, "start_token": start,
                     "content_hash": _hex(b.content_hash), "cache_key": _hex(b.cache_key),
                     "breakpoint_ttl": ttl.get(i)})
        start += b.tokens
    return rows


def diagnosis_rows(trace_id: str, r: RequestResult) -> list[dict[str, Any]]:
    rows = []
    for i, d in enumerate(r.diagnoses):
        rows.append({"trace_id": trace_id, "request_id": r.sk.id, "diagnosis_index": i, "kind": d.kind,
                     "inferred": d.inferred, "detail": d.detail, "advice": advice_for(d), "path": d.path,
                     "token_position": d.token_position, "seconds_past": d.seconds_past, "writer_id": d.writer_id,
                     "param": d.param, "missed_read_tokens": d.missed_tokens,
                     "details": orjson.dumps(d.to_json(), default=str).decode()})
    return rows


def fix_rows(trace_id: str, fixes: list[dict[str, Any]],
             alternatives: list[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The chosen fixes, largest saving first, then the alternatives (numbered on)."""
    by_saving = lambda f: -(f.get("saving_input_equivalent_tokens") or 0)  # noqa: E731
    ordered = [(f, True) for f in sorted(fixes, key=by_saving)] + [(f, False) for f in sorted(alternatives,
                                                                                            key=by_saving)]
    return [{"trace_id": trace_id, "fix_index": i, "kind": f["kind"], "chosen": chosen,
             "requests": [str(x) for x in f["requests"]],
             "saving_input_equivalent_tokens": f.get("saving_input_equivalent_tokens"),
             "saving_usd": f.get("saving_usd"), "detail": f.get("detail", "")}
            for i, (f, chosen) in enumerate(ordered)]


def block_cost_rows(trace_id: str, blocks: list[Any]) -> list[dict[str, Any]]:
    return [{"trace_id": trace_id, "block_hash": b.hash or "unattributed", "path": b.path, "kind": b.kind,
             "first_request": b.first_request, "tokens": b.tokens, "requests": b.requests,
             "cache_write_usd": b.write_usd, "cache_read_usd": b.read_usd, "fresh_input_usd": b.fresh_usd,
             "cost_usd": b.total_usd,
             "input_equivalent_tokens": b.input_equivalent} for b in blocks]


def session_rows(trace_id: str, rep: Report) -> list[dict[str, Any]]:
    """The report's per-session totals (the same computation as its JSON `sessions`)."""
    return [{"trace_id": trace_id, "session": name, **totals}
            for name, totals in rep.groups(lambda r: r.sk.session).items()]


def bill_rows(trace_id: str, rep: Report) -> list[dict[str, Any]]:
    """The report's bill (economics.bill) as rows: one per grouping (model, project, session, agent) and key,
    costliest first within each, with the bill's JSON fields (`report --json` `bill.by_*`)."""
    if rep.bill is None:
        return []
    return [{"trace_id": trace_id, "grouping": grouping, "key": key,
             "title": rep.bill.titles.get(key) if grouping == "session" else None, **split.to_json()}
            for grouping, rows in rep.bill.groups.items() for key, split in rows]


def report_rows(trace_id: str, rep: Report) -> Rows:
    """Rows of requests, blocks, block costs, diagnoses and fixes for one trace's report."""
    ordered = sorted(rep.results, key=lambda r: (r.sk.started_at, r.sk.order))
    rows: Rows = {"requests": [], "sessions": session_rows(trace_id, rep), "blocks": [],
                  "block_costs": block_cost_rows(trace_id, rep.blocks), "diagnoses": [],
                  "fixes": fix_rows(trace_id, rep.fixes, rep.alternatives)}
    for seq, r in enumerate(ordered):
        rows["requests"].append(request_row(trace_id, seq, r, rep.prices))
        rows["blocks"] += block_rows(trace_id, r)
        rows["diagnoses"] += diagnosis_rows(trace_id, r)
    return rows
