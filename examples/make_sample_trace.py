"""Regenerate traces/sample_session.jsonl: one agent task of six Anthropic requests.

The story: a cold start (write), an append-only turn (read), a turn whose system prompt timestamp changed
(miss), a 7-minute pause (TTL expiry), a tool_choice flip (messages invalidated) and a normal turn. Usage is
what Anthropic's documented rules give for these requests, as the provider would report it.
Run: uv run python examples/make_sample_trace.py
"""
from __future__ import annotations

import copy
from pathlib import Path

from make_examples import request

from kvprobe.catalog import rules_for
from kvprobe.request import render_request
from kvprobe.sim import AnthropicCache
from kvprobe.tokens import TokenCounter
from kvprobe.trace import TraceRecord, write_trace

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_757_498_875.0  # 2025-09-10T10:07:55Z


def _turn(i: int) -> list[dict]:
    call = f"toolu_1{i}"
    return [{"role": "assistant", "content": [{"type": "tool_use", "id": call, "name": "grep",
                                               "input": {"pattern": f"close_all {i}"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                          "content": f"src/app/session.py:{10 + i}: self.close_all(user)\n" * 20}]}]


def bodies() -> list[tuple[float, dict]]:
    stamp = "2025-09-10T10:07:55Z"
    out, extra = [], []
    for i, (offset, new_stamp) in enumerate([(0, None), (30, None), (75, "2025-09-10T10:09:10Z"),
                                             (75 + 420, None), (75 + 450, None), (75 + 480, None)]):
        stamp = new_stamp or stamp
        if i:
            extra = extra + _turn(i)
        body = request(stamp, copy.deepcopy(extra))
        if i == 4:
            body["tool_choice"] = {"type": "any"}
        out.append((T0 + offset, body))
    return out


def main() -> None:
    cache, records = AnthropicCache(), []
    for i, (start, body) in enumerate(bodies()):
        req = render_request(body)
        rules = rules_for("anthropic", body["model"])
        TokenCounter(rules).count_request(req)
        pred = cache.process(req, rules, f"req_{i + 1}", start, start + 1.8)
        usage = {"input_tokens": pred.fresh_input_tokens, "cache_creation_input_tokens": pred.cache_write_tokens,
                 "cache_read_input_tokens": pred.cache_read_tokens, "output_tokens": 120 + 7 * i,
                 "cache_creation": {"ephemeral_5m_input_tokens": pred.cache_write_5m_tokens,
                                    "ephemeral_1h_input_tokens": pred.cache_write_1h_tokens}}
        records.append(TraceRecord(id=f"req_{i + 1}", provider="anthropic", started_at=start,
                                   first_token_at=start + 1.8, finished_at=start + 6.5, request=body,
                                   response={"id": f"msg_{i + 1}", "model": body["model"], "usage": usage},
                                   session="fix-login-bug", agent="main", endpoint="/v1/messages"))
    (ROOT / "traces").mkdir(exist_ok=True)
    write_trace(ROOT / "traces" / "sample_session.jsonl", records)


if __name__ == "__main__":
    main()
