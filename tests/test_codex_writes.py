"""Codex rollouts of GPT-5.6+ count cache writes (`last_token_usage.cache_write_input_tokens`, part of
`input_tokens` as the cached tokens are): GPT-5.6+ bills them at 1.25x input (providers/openai.toml), so a write
read as fresh input under-prices the turn and hides the write from the bill.

One hand-written turn: 10,000 input tokens of which 6,000 read and 3,000 written, 100 output. In input
equivalents: 1,000 fresh + 3,000 x 1.25 + 6,000 x 0.1 = 5,350 (read as fresh, the writes would give 4,600).
"""
from __future__ import annotations

import json
from pathlib import Path

import kvprobe


def rollout(folder: Path, last: dict[str, int]) -> Path:
    lines = [
        {"timestamp": "2026-11-20T09:00:00.000Z", "type": "session_meta",
         "payload": {"id": "cdx-writes", "timestamp": "2026-11-20T09:00:00.000Z", "cwd": "/work/app",
                     "model_provider": "openai"}},
        {"timestamp": "2026-11-20T09:00:01.000Z", "type": "turn_context",
         "payload": {"cwd": "/work/app", "model": "gpt-5.6-sol", "effort": "high"}},
        {"timestamp": "2026-11-20T09:00:02.000Z", "type": "event_msg",
         "payload": {"type": "user_message", "message": "fix the build"}},
        {"timestamp": "2026-11-20T09:00:09.000Z", "type": "event_msg",
         "payload": {"type": "token_count", "info": {"total_token_usage": dict(last), "last_token_usage": last}}},
    ]
    path = folder / "rollout-2026-11-20T09-00-00-cdx-writes.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_gpt_5_6_turn_s_cache_writes_are_writes_priced_at_1_25x(tmp_path: Path) -> None:
    last = {"input_tokens": 10_000, "cached_input_tokens": 6_000, "cache_write_input_tokens": 3_000,
            "output_tokens": 100, "reasoning_output_tokens": 0, "total_tokens": 10_100}
    [row] = kvprobe.analyse([str(rollout(tmp_path, last))]).to_json()["requests"]
    assert (row["cache_read_tokens"], row["cache_write_tokens"], row["fresh_input_tokens"]) == (6_000, 3_000, 1_000)
    assert row["input_equivalent_tokens"] == 5_350.0


def test_a_rollout_without_the_write_count_reads_none(tmp_path: Path) -> None:
    """Rollouts before GPT-5.6 carry no write count: nothing is written (writes were free and unreported)."""
    last = {"input_tokens": 10_000, "cached_input_tokens": 6_000, "output_tokens": 100,
            "reasoning_output_tokens": 0, "total_tokens": 10_100}
    [row] = kvprobe.analyse([str(rollout(tmp_path, last))]).to_json()["requests"]
    assert (row["cache_read_tokens"], row["cache_write_tokens"], row["fresh_input_tokens"]) == (6_000, 0, 4_000)
