"""Codex forks and subagents (Codex Desktop's explorer agents): a fork's rollout replays its parent's history,
token counts included, before its own first turn. Those calls were billed once, in the parent's rollout; they
are skipped, and counted as replayed. Rollouts written here in the shape real forks have (first session_meta
with forked_from_id or a thread_spawn parent, the parent's session_meta, the parent's lines, then the fork's
own task_started), every figure set by hand."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from kvprobe.importers import ImportReport, load_any

PARENT, FORK_A, FORK_B = ("019d0000-0000-7000-8000-0000000000aa", "019d0000-0000-7000-8000-0000000000bb",
                          "019d0000-0000-7000-8000-0000000000cc")
T0 = dt.datetime(2026, 4, 24, 6, 0, 0, tzinfo=dt.timezone.utc)
# (input, cached, output, reasoning) of each request, by hand
PARENT_CALLS = [(20_000, 0, 400, 100), (24_000, 19_000, 300, 50), (30_000, 23_000, 500, 200)]
FORK_A_CALLS = [(31_000, 29_000, 200, 40), (33_000, 30_000, 100, 10)]
FORK_B_CALLS = [(32_000, 0, 150, 0)]


def _at(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Rollout:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.total = [0, 0, 0, 0]

    def add(self, t: float, kind: str, **payload: Any) -> None:
        self.lines.append({"timestamp": _at(t), "type": kind, "payload": payload})

    def turn(self, t: float, model: str, started_at: float | None = None) -> None:
        extra = {} if started_at is None else {"started_at": int((T0 + dt.timedelta(seconds=started_at)).timestamp())}
        self.add(t, "event_msg", type="task_started", turn_id=f"turn-{len(self.lines)}", **extra)
        self.add(t, "turn_context", turn_id="t", cwd="/repo", model=model, effort="medium")
        self.add(t, "event_msg", type="user_message", message="go")

    def count(self, t: float, call: tuple[int, int, int, int]) -> None:
        self.total = [a + b for a, b in zip(self.total, call)]
        names = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
        last = dict(zip(names, call), total_tokens=call[0] + call[2])
        total = dict(zip(names, self.total), total_tokens=self.total[0] + self.total[2])
        self.add(t, "event_msg", type="token_count", info={"last_token_usage": last, "total_token_usage": total},
                 rate_limits=None)

    def write(self, root: Path, session: str) -> Path:
        path = root / "2026" / "04" / "24" / f"rollout-2026-04-24T06-00-00-{session}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        # compact, as Codex writes it (ccusage looks for `"type":"event_msg"` byte for byte)
        path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in self.lines))
        return path


def _parent(times: dict[int, float] | None = None) -> Rollout:
    """The parent's lines; `times` re-stamps every line (a fork's copy) or keeps them (None)."""
    r = Rollout()
    r.add(0, "session_meta", id=PARENT, timestamp=_at(0), cwd="/repo", model_provider="openai")
    r.turn(1, "gpt-5.4", started_at=1)
    for i, call in enumerate(PARENT_CALLS):
        r.count(10 + 10 * i, call)
    return r


def _fork(session: str, created: float, restamp: bool, spawn_only: bool, own: list, started_at: bool) -> Rollout:
    r = Rollout()
    link = {"source": {"subagent": {"thread_spawn": {"parent_thread_id": PARENT, "depth": 1,
                                                      "agent_role": "explorer"}}}}
    if not spawn_only:
        link["forked_from_id"] = PARENT
    r.add(created, "session_meta", id=session, timestamp=_at(created), cwd="/repo", model_provider="openai", **link)
    copy = _parent()
    for line in copy.lines:  # the parent's history, its token counts with their running totals
        stamped = _at(created + 0.003) if restamp else line["timestamp"]
        r.lines.append({**line, "timestamp": stamped})
    r.total = copy.total
    r.turn(created + 2, "gpt-5.4-mini", started_at=created + 2 if started_at else None)
    for i, call in enumerate(own):
        r.count(created + 10 + 5 * i, call)
    return r


@pytest.fixture
def sessions(tmp_path):
    root = tmp_path / "sessions"
    _parent().write(root, PARENT)
    # fork A: forked_from_id, replay re-stamped at the fork time, task_started with started_at
    _fork(FORK_A, 100, restamp=True, spawn_only=False, own=FORK_A_CALLS, started_at=True).write(root, FORK_A)
    # fork B: a thread_spawn subagent, replay with the original times, task_started without started_at
    _fork(FORK_B, 200, restamp=False, spawn_only=True, own=FORK_B_CALLS, started_at=False).write(root, FORK_B)
    return root


def _sums(calls):
    return [sum(c[i] for c in calls) for i in range(4)]


def test_forks_count_only_their_own_turns(sessions):
    report = ImportReport()
    records = list(load_any(sessions, report=report))
    by_session = {}
    for r in records:
        by_session.setdefault(r.session, []).append(r)
    assert {s: len(rs) for s, rs in by_session.items()} == {PARENT: 3, FORK_A: 2, FORK_B: 1}
    assert {r.model for r in by_session[FORK_A] + by_session[FORK_B]} == {"gpt-5.4-mini"}
    assert {r.extra.get("forked_from") for r in by_session[FORK_A]} == {PARENT}
    # each fork replayed the parent's 3 token counts: skipped, counted, said
    assert report.replayed == 6 and report.records == 6
    assert any("6 replayed requests skipped in 2 forked rollout(s)" in line for line in report.summary())


def test_usage_totals_are_the_parent_plus_the_forks_own_turns(cli, sessions):
    result = cli("usage", sessions, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    inp, cached, out, reasoning = (a + b + c for a, b, c in zip(_sums(PARENT_CALLS), _sums(FORK_A_CALLS),
                                                                _sums(FORK_B_CALLS)))
    assert (inp, cached, out, reasoning) == (170_000, 101_000, 1_650, 400)  # by hand
    t = data["totals"]
    assert (t["requests"], t["input_tokens"], t["cache_read_tokens"], t["output_tokens"],
            t["reasoning_output_tokens"]) == (6, inp, cached, out, reasoning)
    # gpt-5.4 $2.50 / $0.25 / $15 per MTok; gpt-5.4-mini $0.75 / $0.075 / $4.50 (the bundled price data)
    parent_usd = ((74_000 - 42_000) * 2.50 + 42_000 * 0.25 + 1_200 * 15.0) / 1e6
    forks_usd = ((96_000 - 59_000) * 0.75 + 59_000 * 0.075 + 450 * 4.50) / 1e6
    assert t["cost_usd"] == pytest.approx(parent_usd + forks_usd, abs=1e-6)
    # ccusage 20.0.24 (`ccusage codex daily --offline --json`, CODEX_HOME at these files) gives the same day:
    # $0.1427, 101,000 cache reads, 69,000 uncached input, 1,650 output
    assert round(t["cost_usd"], 4) == 0.1427 and t["fresh_input_tokens"] == 69_000
    by_model = {r["model"]: r["requests"] for r in data["by_model"]}
    assert by_model == {"gpt-5.4": 3, "gpt-5.4-mini": 3}
    assert data["import"]["replayed_from_parent"] == 6


def test_a_fork_whose_parent_file_is_absent_still_skips_the_replay(sessions):
    (next(sessions.rglob(f"*{PARENT}.jsonl"))).unlink()
    report = ImportReport()
    records = list(load_any(sessions, report=report))
    assert sorted(r.session for r in records) == [FORK_A, FORK_A, FORK_B]
    assert report.replayed == 6


def test_report_reads_no_replayed_request(cli, sessions):
    result = cli("report", sessions, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["totals"]["requests"] == 6


def _uuid7(seconds: float, n: int) -> str:
    """A UUIDv7 made `seconds` after T0 (its first 48 bits: milliseconds since the epoch), as Codex's turn ids."""
    ms = f"{int((T0 + dt.timedelta(seconds=seconds)).timestamp() * 1000):012x}"
    return f"{ms[:8]}-{ms[8:]}-7000-8000-{n:012x}"


def test_a_subagents_first_turn_moments_after_its_fork_is_its_own(tmp_path):
    """Codex Desktop spawns a subagent whose replay is re-stamped at the fork time and whose own first turn
    starts 37 ms later, its task_started without `started_at` (a public rollout: 108 requests read as replay).
    The turn ids tell them apart: the replayed turn's id was made with the parent's turn (T0 + 1 s), the
    subagent's own 37 ms after the fork. By hand: its own calls are FORK_B_CALLS, one request."""
    created = 300.0
    r = Rollout()
    r.add(created, "session_meta", id=FORK_B, timestamp=_at(created), cwd="/repo", model_provider="openai",
          source={"subagent": {"thread_spawn": {"parent_thread_id": PARENT, "depth": 1}}})
    r.add(created + 0.02, "session_meta", id=PARENT, timestamp=_at(0), cwd="/repo", model_provider="openai")
    r.add(created + 0.02, "event_msg", type="task_started", turn_id=_uuid7(1, 1))  # the parent's turn, replayed
    r.add(created + 0.02, "turn_context", turn_id=_uuid7(1, 1), cwd="/repo", model="gpt-5.4", effort="medium")
    r.count(created + 0.021, PARENT_CALLS[0])
    r.add(created + 0.022, "event_msg", type="task_complete", turn_id=_uuid7(1, 1))
    r.add(created + 0.037, "event_msg", type="task_started", turn_id=_uuid7(created + 0.037, 2))  # its own
    r.add(created + 0.9, "turn_context", turn_id=_uuid7(created + 0.037, 2), cwd="/repo", model="gpt-5.4-mini",
          effort="medium")
    r.count(created + 200, FORK_B_CALLS[0])
    report = ImportReport()
    records = list(load_any(r.write(tmp_path / "sessions", FORK_B), report=report))
    assert [(rec.usage["input_tokens"], rec.usage["input_tokens_details"]["cached_tokens"]) for rec in records] == \
        [(32_000, 0)]
    assert report.replayed == 1
