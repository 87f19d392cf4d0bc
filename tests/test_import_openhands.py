"""OpenHands conversations (kvprobe.importers.openhands): base_state.json written here in the CLI 1.16 shape
(`stats.usage_to_metrics` per usage id with token_usages, costs and response_latencies), beside its
events/event-*.json files. LiteLLM's prompt_tokens is the whole prompt (checked against the usage a local
server returned: 8,493 = 6 uncached + 8,487 written). Every expected figure is worked out by hand."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.importers import ImportReport, detect_format, load_any

T0 = 1_796_631_420.0  # 2026-12-07 08:17:00 UTC
MODEL = "anthropic/claude-sonnet-4-5-20250929"


def _usage(rid: str, prompt: int, read: int, write: int, out: int, model: str = MODEL) -> dict:
    return {"model": model, "prompt_tokens": prompt, "completion_tokens": out, "cache_read_tokens": read,
            "cache_write_tokens": write, "reasoning_tokens": 0, "context_window": 200_000,
            "per_turn_token": prompt + out, "response_id": rid}


def _llm(model: str, calls: list[tuple[dict, float, float, float]]) -> dict:
    """An LLM's metrics: (usage, cost, answered at (s after T0), latency) per call."""
    return {"model_name": model, "accumulated_cost": sum(c for _, c, _, _ in calls),
            "costs": [{"model": model, "cost": c, "timestamp": T0 + at} for _, c, at, _ in calls],
            "response_latencies": [{"model": model, "latency": lat, "response_id": u["response_id"]}
                                   for u, _, _, lat in calls],
            "token_usages": [u for u, _, _, _ in calls]}


@pytest.fixture
def conversations(tmp_path: Path) -> Path:
    folder = tmp_path / "conversations" / "49313727337f453798660275680b1cc2"
    (folder / "events").mkdir(parents=True)
    state = {
        "id": "49313727-337f-4537-9866-0275680b1cc2",
        "agent": {"llm": {"model": MODEL, "api_key": "**********", "caching_prompt": True}},
        "workspace": {"working_dir": "/home/dev/app", "kind": "LocalWorkspace"},
        "persistence_dir": str(folder), "max_iterations": 500, "execution_status": "finished",
        "stats": {"usage_to_metrics": {
            "agent": _llm(MODEL, [
                (_usage("chatcmpl-1", 8_493, 0, 8_487, 20), 0.0321, 7.0, 2.0),
                (_usage("chatcmpl-2", 8_755, 8_487, 262, 20), 0.0038, 9.5, 0.5),
                (_usage("chatcmpl-4", 3_100, 0, 3_090, 40), 0.0120, 30.0, 1.0),  # after the summary
            ]),
            "condenser": _llm(MODEL, [(_usage("chatcmpl-3", 9_000, 8_749, 200, 400), 0.0094, 20.0, 4.0)]),
        }},
    }
    (folder / "base_state.json").write_text(json.dumps(state, indent=2))
    for n in range(3):
        (folder / "events" / f"event-0000{n}-a1b2.json").write_text(json.dumps({"kind": "MessageEvent", "id": n}))
    return tmp_path / "conversations"


def test_each_token_usage_is_one_request(conversations):
    report = ImportReport()
    records = {r.id: r for r in load_any(conversations, report=report)}
    assert sorted(records) == ["chatcmpl-1", "chatcmpl-2", "chatcmpl-3", "chatcmpl-4"]
    first = records["chatcmpl-1"]
    # the whole prompt less what was read and written is the uncached part: 8,493 - 8,487 = 6
    assert first.response["usage"] == {"input_tokens": 6, "cache_read_input_tokens": 0,
                                       "cache_creation_input_tokens": 8_487, "output_tokens": 20}
    assert first.provider == "anthropic" and first.response["model"] == "claude-sonnet-4-5-20250929"
    # answered at its cost's time, sent its latency before
    assert (first.started_at, first.finished_at) == (T0 + 5.0, T0 + 7.0)
    assert first.session == "49313727-337f-4537-9866-0275680b1cc2" and first.extra["cwd"] == "/home/dev/app"
    assert [records[k].agent for k in ("chatcmpl-1", "chatcmpl-3", "chatcmpl-4")] == ["main", "condenser", "main"]
    # the agent's first call after the condenser's summary starts from it
    assert [e["kind"] for e in records["chatcmpl-4"].extra["events"]] == ["compaction"]
    assert "events" not in records["chatcmpl-2"].extra
    # the events beside the state are the conversation's own files: nothing skipped
    assert report.skipped == 0 and {s.format for s in report.sources} == {"openhands"}
    assert detect_format(next(conversations.rglob("base_state.json"))) == "openhands"


def test_usage_totals_and_cost_equal_the_conversations_own(cli, conversations):
    data = json.loads(cli("usage", conversations, "--json").stdout)
    totals = data["totals"]
    assert totals["requests"] == 4
    assert totals["input_tokens"] == 8_493 + 8_755 + 3_100 + 9_000
    assert totals["cache_read_tokens"] == 8_487 + 8_749
    assert totals["cache_write_tokens"] == 8_487 + 262 + 3_090 + 200
    # Sonnet 4.5 list prices (USD per million: fresh 3, 5m write 3.75, read 0.30, output 15), by hand:
    # fresh 6 + 6 + 10 + 51 = 73; writes 12,039; reads 17,236; output 480
    # (the JSON rounds dollars to 6 places)
    assert totals["cost_usd"] == round((73 * 3 + 12_039 * 3.75 + 17_236 * 0.30 + 480 * 15) / 1e6, 6)


def test_a_state_without_metrics_and_a_broken_one_are_counted(tmp_path):
    a = tmp_path / "c" / "a"
    a.mkdir(parents=True)
    (a / "base_state.json").write_text(json.dumps({"id": "a", "agent": {}, "workspace": {}, "persistence_dir": "x"}))
    b = tmp_path / "c" / "b"
    b.mkdir()
    (b / "base_state.json").write_text('{"id": "b", "agent": {}, "workspace": {}, "persistence_dir": "x", "stats": {')
    report = ImportReport()
    assert list(load_any(tmp_path / "c", report=report)) == []
    assert report.reasons() == {"conversation state without usage metrics": 1, "truncated JSON file": 1}
