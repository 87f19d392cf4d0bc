"""Codex reads that the OpenAI rules explain (issue #38, real logs): a new turn is sent without the turn before's
reasoning (models before GPT-5.6), and a cache that serves an earlier request's entry holds that request's prompt
and its response, read on the 128-token grid.

The rollout below is written by hand; every figure is worked out from OpenAI's rules:
* a read of the last entry is the previous prompt plus its response, floored to 128 (#2: 20,000 + 300 = 20,300
  → 20,224);
* #4 reads 20,096: within #1's entry (its prompt 20,000 → 19,968, with its response 20,300 → 20,224), not the
  21,120 #3 read: a cache holding #1's entry served it;
* #6 starts turn 2: turn 1's reasoning is dropped, its first reasoning item opened #1's response
  (messages[1]), so the prompt changed exactly where #1's prompt ended: 20,000 → 19,968 on the grid;
* #9 starts turn 3: turn 2's first reasoning opened #6's response (messages[11]): 25,000 → 24,960.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import kvprobe
from kvprobe.importers import load_any

T0 = dt.datetime(2026, 11, 20, 9, 0, 0, tzinfo=dt.timezone.utc)

# (turn's user message or None, output items, input, cached, output): one row per request; after each request
# but the last of its turn its function call's output follows
REQUESTS: list[tuple[str | None, str, int, int, int]] = [
    ("u1", "R M F", 20_000, 0, 300),  # #1  messages[0] user, [1] its output, [2] the call's output
    (None, "R F", 21_000, 20_224, 200),  # #2  [3], [4]
    (None, "R F", 22_000, 21_120, 100),  # #3  [5], [6]
    (None, "R F", 23_000, 20_096, 100),  # #4  [7], [8]: read within #1's entry
    (None, "M", 23_500, 23_040, 100),  # #5  [9]: the turn's answer
    ("u2", "R F", 25_000, 19_968, 200),  # #6  [10] user, [11], [12]: turn 1's reasoning dropped
    (None, "F", 30_000, 25_088, 100),  # #7  [13], [14]
    (None, "M", 31_000, 30_080, 100),  # #8  [15]
    ("u3", "R M", 32_000, 24_960, 100),  # #9  [16] user, [17]: turn 2's reasoning dropped
]


def write_rollout(folder: Path, model: str = "gpt-5.3-codex", last_read: int | None = None) -> Path:
    lines: list[dict[str, Any]] = []
    t = 0.0

    def add(kind: str, payload: dict[str, Any]) -> None:
        nonlocal t
        t += 1
        stamp = (T0 + dt.timedelta(seconds=t)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        lines.append({"timestamp": stamp, "type": kind, "payload": payload})

    total = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0, "reasoning_output_tokens": 0,
             "total_tokens": 0}
    add("session_meta", {"id": "cdx-turns", "timestamp": "2026-11-20T09:00:00.000Z", "cwd": "/work/app",
                         "model_provider": "openai"})
    rows = list(REQUESTS)
    if last_read is not None:
        rows[-1] = (*rows[-1][:3], last_read, rows[-1][4])
    for n, (user, items, input_tokens, cached, output) in enumerate(rows, 1):
        if user is not None:
            add("turn_context", {"cwd": "/work/app", "model": model, "effort": "high"})
            add("event_msg", {"type": "user_message", "message": user})
            add("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": user}]})
        for item in items.split():
            if item == "R":
                add("response_item", {"type": "reasoning", "summary": [], "encrypted_content": f"r{n}"})
            elif item == "M":
                add("response_item", {"type": "message", "role": "assistant",
                                       "content": [{"type": "output_text", "text": f"answer {n}"}]})
            else:
                add("response_item", {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": f"c{n}"})
        last = {"input_tokens": input_tokens, "cached_input_tokens": cached, "output_tokens": output,
                "reasoning_output_tokens": 0, "total_tokens": input_tokens + output}
        for k, v in last.items():
            total[k] += v
        add("event_msg", {"type": "token_count", "info": {"total_token_usage": dict(total), "last_token_usage": last}})
        if items.endswith("F"):
            add("response_item", {"type": "function_call_output", "call_id": f"c{n}", "output": f"out {n}"})
    path = folder / "sessions" / "2026" / "11" / "20" / "rollout-2026-11-20T09-00-00-cdx-turns.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def diagnoses(path: Path) -> dict[str, dict[str, Any]]:
    report = kvprobe.analyse([str(path)]).to_json()
    return {r["id"]: r["diagnoses"][0] for r in report["requests"] if r["missed_read_tokens"] > 0}


def test_a_new_turn_names_where_the_reasoning_it_was_sent_without_began(tmp_path: Path) -> None:
    path = write_rollout(tmp_path)
    records = list(load_any([path]))
    dropped = {r.id: r.extra["history"].get("reasoning_dropped") for r in records}
    assert dropped["cdx-turns#6"] == {"request": "cdx-turns#1", "tokens": 20_000, "index": 1, "opened": True}
    assert dropped["cdx-turns#9"] == {"request": "cdx-turns#6", "tokens": 25_000, "index": 11, "opened": True}
    assert [i for i, d in dropped.items() if d] == ["cdx-turns#6", "cdx-turns#9"]

    d = diagnoses(path)
    assert sorted(d) == ["cdx-turns#4", "cdx-turns#6", "cdx-turns#9"]  # the charged misses
    for rid, writer, at, path in (("cdx-turns#6", "cdx-turns#1", 19_968, "messages[1]"),
                                  ("cdx-turns#9", "cdx-turns#6", 24_960, "messages[11]")):
        assert (d[rid]["kind"], d[rid]["change"], d[rid]["evidence"]) == ("prefix_changed", "reasoning_dropped",
                                                                          "read_level")
        assert (d[rid]["writer_id"], d[rid]["token_position"], d[rid]["path"]) == (writer, at, path)
        assert f"({at:,} tokens)" in d[rid]["detail"] and "current turn's reasoning" in d[rid]["detail"]


def test_a_read_within_an_earlier_requests_prompt_and_response_is_a_replica_read(tmp_path: Path) -> None:
    d = diagnoses(write_rollout(tmp_path))
    replica = d["cdx-turns#4"]
    assert (replica["kind"], replica["evidence"], replica["writer_id"]) == ("stale_read", "read_level", "cdx-turns#1")
    assert "20,096" in replica["detail"] and "19,968 to 20,224" in replica["detail"]
    assert "21,120 tokens of cdx-turns#3" in replica["detail"]


def test_a_turn_start_read_short_of_the_dropped_reasoning_stays_unexplained(tmp_path: Path) -> None:
    # 24,832 is a step below where turn 2's reasoning began (24,960) and no entry left after the drop holds it
    d = diagnoses(write_rollout(tmp_path, last_read=24_832))
    assert d["cdx-turns#9"]["kind"] == "unexplained"


def test_models_that_keep_earlier_reasoning_are_not_said_to_drop_it(tmp_path: Path) -> None:
    # GPT-5.6 and later choose with reasoning.context: providers/ gives them no current-turn rule
    d = diagnoses(write_rollout(tmp_path, model="gpt-5.6-sol"))
    assert all(x.get("change") != "reasoning_dropped" for x in d.values())
