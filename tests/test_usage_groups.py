"""`kvprobe usage` groupings (week, month, project), per-model rows, --since/--until, Codex reasoning tokens,
and subagent calls known only from the parent's agent_progress lines. Every figure below is worked out by
hand from the transcript lines written here (see the comments), not by kvprobe's code."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

WEB, API = "/home/me/web", "/home/me/api"
SONNET, HAIKU, CODEX = "claude-sonnet-4-5", "claude-haiku-4-5-20251001", "gpt-5-codex"


def _cc(kind: str, ts: str, uuid: str, parent: str | None = None, **more) -> dict:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": WEB, "sessionId": "s1",
            "version": "2.0.14", "gitBranch": "main", "type": kind, "uuid": uuid, "timestamp": ts, **more}


def _msg(mid: str, model: str, fresh: int, write: int, read: int, out: int, text: str = "ok") -> dict:
    return {"id": mid, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": None,
            "usage": {"input_tokens": fresh, "cache_creation_input_tokens": write, "cache_read_input_tokens": read,
                      "output_tokens": out}}


def _progress(ts: str, uuid: str, agent: str, nested: dict | None, data_type: str = "agent_progress") -> dict:
    data = {"type": data_type, "agentId": agent, "prompt": "look around"}
    if nested is not None:
        data["message"] = nested
    return _cc("progress", ts, uuid, "u2", data=data, toolUseID=f"agent_msg_{uuid}", parentToolUseID="toolu_9")


def _write(path: Path, lines: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture()
def logs(tmp_path: Path) -> Path:
    project = tmp_path / "projects" / "-home-me-web"
    user = {"role": "user", "content": "go"}
    nested_p1 = {"type": "assistant", "timestamp": "2026-09-07T05:00:10.000Z", "requestId": "req_p1",
                 "uuid": "n1", "message": _msg("msg_p1", HAIKU, 20, 500, 0, 30)}
    nested_p2 = {"type": "assistant", "timestamp": "2026-09-07T05:00:12.000Z", "requestId": "req_p2",
                 "uuid": "n2", "message": _msg("msg_p2", HAIKU, 7, 0, 400, 9)}
    _write(project / "s1.jsonl", [
        _cc("user", "2026-09-06T23:50:00.000Z", "u1", message=user),
        # A1, written as two lines of one response; the later one carries the final output count (150)
        _cc("assistant", "2026-09-06T23:50:05.000Z", "a1", "u1", requestId="req_a1",
            message=_msg("msg_a1", SONNET, 10, 1000, 0, 100)),
        _cc("assistant", "2026-09-06T23:50:06.000Z", "a1b", "a1", requestId="req_a1",
            message=_msg("msg_a1", SONNET, 10, 1000, 0, 150)),
        _cc("user", "2026-09-07T05:00:00.000Z", "u2", "a1b", message=user),
        _cc("assistant", "2026-09-07T05:00:02.000Z", "a2", "u2", requestId="req_a2",
            message=_msg("msg_a2", SONNET, 5, 200, 1000, 50)),
        # P1: subagent x1 has no transcript of its own: counted once from here (its two progress lines merge)
        _progress("2026-09-07T05:00:10.100Z", "p1", "x1", nested_p1),
        _progress("2026-09-07T05:00:10.200Z", "p1b", "x1", nested_p1),
        # P2: subagent y2's own transcript holds the same request: counted once, from the transcript
        _progress("2026-09-07T05:00:12.100Z", "p2", "y2", nested_p2),
        _progress("2026-09-07T05:00:13.000Z", "p3", "y2", None, data_type="hook_progress"),
    ])
    _write(project / "s1" / "subagents" / "agent-y2.jsonl", [
        {**_cc("user", "2026-09-07T05:00:08.000Z", "y-u1", message=user), "isSidechain": True, "agentId": "y2"},
        {**_cc("assistant", "2026-09-07T05:00:12.000Z", "y-a1", "y-u1", requestId="req_p2",
               message=_msg("msg_p2", HAIKU, 7, 0, 400, 9)), "isSidechain": True, "agentId": "y2"},
    ])
    codex = tmp_path / "codex" / "2026" / "10" / "01" / "rollout-2026-10-01T12-00-00-cx1.jsonl"
    last = {"input_tokens": 3000, "cached_input_tokens": 1000, "output_tokens": 400,
            "reasoning_output_tokens": 250, "total_tokens": 3400}
    _write(codex, [
        {"timestamp": "2026-10-01T12:00:00.000Z", "type": "session_meta",
         "payload": {"id": "cx1", "cwd": API, "model_provider": "openai"}},
        {"timestamp": "2026-10-01T12:00:00.100Z", "type": "turn_context", "payload": {"cwd": API, "model": CODEX}},
        {"timestamp": "2026-10-01T12:00:05.000Z", "type": "event_msg",
         "payload": {"type": "token_count", "info": {"total_token_usage": last, "last_token_usage": last}}},
    ])
    prices = tmp_path / "prices.toml"
    prices.write_text(
        f'[models."{SONNET}"]\ninput_mtok = 3.0\ncache_write_mtok = 3.75\ncache_read_mtok = 0.3\noutput_mtok = 15.0\n'
        f'[models."{HAIKU}"]\ninput_mtok = 1.0\ncache_write_mtok = 1.25\ncache_read_mtok = 0.1\noutput_mtok = 5.0\n'
        f'[models."{CODEX}"]\ninput_mtok = 1.25\ncache_read_mtok = 0.125\noutput_mtok = 10.0\n')
    return tmp_path


# Hand-worked figures. All input = fresh + write + read (Anthropic); Codex input includes its cached tokens.
#        requests  input               read          write           output            reasoning  USD (price file)
# A1     1         10+1000+0 = 1010    0             1000            150 (last line)   0          30+3750+2250 = 6030e-6
# A2     1         5+200+1000 = 1205   1000          200             50                0          15+750+300+750 = 1815e-6
# P1     1         20+500+0 = 520      0             500             30                0          20+625+150 = 795e-6
# P2     1         7+0+400 = 407       400           0               9                 0          7+40+45 = 92e-6
# Codex  1         3000                1000          0               400               250        2500+125+4000 = 6625e-6
TOTALS = {"requests": 5, "input_tokens": 6142, "cache_read_tokens": 2400, "cache_write_tokens": 1700,
          "output_tokens": 639, "reasoning_output_tokens": 250, "cost_usd": 0.015357}


def _usage(cli, root: Path, *args: str) -> dict:
    res = cli("usage", root / "projects", root / "codex", "--price-file", root / "prices.toml", "--json", *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _pick(row: dict, keys) -> dict:
    return {k: row[k] for k in keys}


def test_totals_count_the_progress_only_subagent_once(cli, logs):
    data = _usage(cli, logs)
    assert _pick(data["totals"], TOTALS) == pytest.approx(TOTALS)
    assert data["import"]["from_agent_progress"] == 1
    agents = {row["agent"]: row["requests"] for row in data["by_agent"]}
    assert agents == {"main": 3, "agent-x1": 1, "agent-y2": 1}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_progress_dedup_holds_with_parallel_files(cli, logs, workers):
    data = _usage(cli, logs, "--workers", workers)
    assert data["totals"]["requests"] == 5 and data["import"]["from_agent_progress"] == 1


def test_week_month_and_project_rows(cli, logs):
    data = _usage(cli, logs)
    weeks = {r["week"]: (r["requests"], r["input_tokens"]) for r in data["by_week"]}
    # 2026-09-06 is a Sunday (week of Monday 08-31); 09-07 a Monday; 10-01 a Thursday (week of 09-28)
    assert weeks == {"2026-08-31": (1, 1010), "2026-09-07": (3, 1205 + 520 + 407), "2026-09-28": (1, 3000)}
    assert [r["week"] for r in data["by_week"]] == ["2026-08-31", "2026-09-07", "2026-09-28"]
    months = {r["month"]: r["requests"] for r in data["by_month"]}
    assert months == {"2026-09": 4, "2026-10": 1}
    projects = {r["project"]: (r["requests"], r["cost_usd"]) for r in data["by_project"]}
    assert projects == {WEB: (4, pytest.approx(0.008732)), API: (1, pytest.approx(0.006625))}


def test_each_row_has_its_models(cli, logs):
    day = {r["day"]: r for r in _usage(cli, logs)["by_day"]}["2026-09-07"]
    models = {m["model"]: _pick(m, ("requests", "input_tokens", "cache_read_tokens", "cost_usd"))
              for m in day["models"]}
    assert models == {SONNET: {"requests": 1, "input_tokens": 1205, "cache_read_tokens": 1000,
                               "cost_usd": pytest.approx(0.001815)},
                      HAIKU: {"requests": 2, "input_tokens": 927, "cache_read_tokens": 400,
                              "cost_usd": pytest.approx(0.000887)}}
    assert [m["model"] for m in day["models"]] == [SONNET, HAIKU]  # costliest first


def test_codex_reasoning_tokens_are_their_own_column(cli, logs):
    data = _usage(cli, logs)
    by_model = {r["model"]: r for r in data["by_model"]}
    assert by_model[CODEX]["reasoning_output_tokens"] == 250 and by_model[CODEX]["output_tokens"] == 400
    assert by_model[SONNET]["reasoning_output_tokens"] == 0
    res = cli("usage", logs / "codex", "--by", "month", "--price-file", logs / "prices.toml")
    assert res.exit_code == 0 and "reasoning" in res.output and "250" in res.output


def test_since_until_days_are_inclusive_and_in_the_time_zone(cli, logs):
    one_day = _usage(cli, logs, "--since", "2026-09-07", "--until", "2026-09-07")
    assert one_day["totals"]["requests"] == 3
    assert _usage(cli, logs, "--until", "20260930")["totals"]["requests"] == 4
    # In Los Angeles (UTC-7) the 05:00Z requests fall on the 6th: the whole Claude session is one Sunday.
    la = _usage(cli, logs, "--tz", "America/Los_Angeles")
    assert {r["day"]: r["requests"] for r in la["by_day"]} == {"2026-09-06": 4, "2026-10-01": 1}
    la_day = cli("usage", logs / "projects", logs / "codex", "--tz", "America/Los_Angeles", "--since", "2026-09-07",
                 "--until", "2026-09-07")
    assert la_day.exit_code == 2 and "none of the 5 requests read is in" in la_day.output  # an empty window


def test_breakdown_table_shows_a_sub_row_per_model(cli, logs):
    res = cli("usage", logs / "projects", "--by", "week", "--breakdown", "--price-file", logs / "prices.toml")
    assert res.exit_code == 0, res.output
    # not a terminal: the sub-rows are marked with a dash, no box-drawing character
    assert "Usage by week" in res.output and "  - claude-sonnet-4-5" in res.output and "  - claude-haiku" in res.output
    assert "└" not in res.output
    assert "1 subagent requests read from the parent's progress lines" in res.output


def test_long_context_tier_starts_above_200k_input_tokens(cli, tmp_path):
    # Anthropic's published Sonnet 4.5 prices (genai-prices data, no price file): input $3/MTok for a request of
    # up to 200k input tokens, $6/MTok above. Two requests on either side of the line, fresh input only:
    # 200,000 x $3/M = $0.600000 and 200,001 x $6/M = $1.200006, each priced at its own tier.
    lines = []
    for i, fresh in enumerate((200_000, 200_001)):
        lines.append(_cc("user", f"2026-09-0{i + 1}T10:00:00.000Z", f"u{i}", message={"role": "user", "content": "go"}))
        lines.append(_cc("assistant", f"2026-09-0{i + 1}T10:00:05.000Z", f"a{i}", f"u{i}", requestId=f"req_{i}",
                         message=_msg(f"msg_{i}", SONNET, fresh, 0, 0, 0)))
    _write(tmp_path / "projects" / "-home-me-web" / "s.jsonl", lines)
    res = cli("usage", tmp_path / "projects", "--by", "day", "--json")
    assert res.exit_code == 0, res.output
    days = {row["day"]: row["cost_usd"] for row in json.loads(res.stdout)["by_day"]}
    assert days == {"2026-09-01": pytest.approx(0.6), "2026-09-02": pytest.approx(1.200006)}
