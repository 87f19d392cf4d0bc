"""Large traces are parsed on two cores (kvprobe.analysis.split_parse): the result must be exactly what one
pass gives. $KVPROBE_SPLIT_MIN_BYTES lowers the size from which a second process helps, so small hand-made
traces take the two-process path here (the helper counts this process's texts), and $KVPROBE_CUT_MIN_BYTES
the size from which files are cut in two instead; the same command without them reads them in one pass, and
the outputs must match.
"""
from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from kvprobe.analysis import helper, split_parse
from kvprobe.analysis.skeleton import BlockStore, skeletons
from kvprobe.trace import read_trace

SYSTEM = "You are a patient build agent working in a monorepo. " * 120


def _body(session: str, turn: int) -> dict:
    messages = []
    for t in range(turn + 1):
        messages.append({"role": "user", "content": f"{session} step {t}: run the tests in package {t}."})
        if t < turn:
            messages.append({"role": "assistant", "content": f"Ran package {t}: {t * 7} passed, {t % 3} failed."})
    return {"model": "claude-sonnet-4-5", "max_tokens": 512,
            "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "messages": messages}


def _records(prefix: str = "r", sessions: int = 3, turns: int = 7) -> list[dict]:
    """Interleaved sessions; every third record has no start time (inferred from the record before)."""
    out = []
    for turn in range(turns):
        for s in range(sessions):
            n = len(out)
            rec = {"id": f"{prefix}{n}", "session": f"s{s}", "provider": "anthropic",
                   "request": _body(f"s{s}", turn),
                   "response": {"usage": {"input_tokens": 40 + 30 * turn,
                                          "cache_read_input_tokens": 1400 if turn else 0,
                                          "cache_creation_input_tokens": 0 if turn else 1400,
                                          "output_tokens": 25}}}
            if n % 3 != 1:
                rec["started_at"] = f"2026-11-02T10:{turn:02d}:{s * 10:02d}Z"
            out.append(rec)
    return out


def _write(path: Path, records: list[dict], blank_at: int | None = None) -> Path:
    lines = [json.dumps(r) for r in records]
    if blank_at is not None:
        lines.insert(blank_at, "")
    path.write_text("\n".join(lines) + "\n")
    return path


WAYS = ("count", "cut")  # the helper counts this process's texts / the file is cut in two


def _way(monkeypatch, way: str | None) -> None:
    """None: one pass in this process; "count" or "cut": the two-process way on any size."""
    for name, on in (("KVPROBE_SPLIT_MIN_BYTES", way is not None), ("KVPROBE_CUT_MIN_BYTES", way == "cut")):
        if on:
            monkeypatch.setenv(name, "1")
        else:
            monkeypatch.delenv(name, raising=False)


def _env(way: str) -> dict[str, str]:
    return {**os.environ, "KVPROBE_SPLIT_MIN_BYTES": "1", **({"KVPROBE_CUT_MIN_BYTES": "1"} if way == "cut" else {})}


def _report(cli, monkeypatch, *args: str, split: str | None) -> tuple[int, str]:
    _way(monkeypatch, split)
    result = cli("report", *args, "--json")
    return result.exit_code, result.output


@pytest.mark.parametrize("fixes, way", [("--what-if", "count"), ("--no-fixes", "count"), ("--no-fixes", "cut")])
def test_report_on_two_cores_equals_one_pass(cli, monkeypatch, tmp_path, fixes, way):
    trace = _write(tmp_path / "t.jsonl", _records(), blank_at=11)
    monkeypatch.setenv("KVPROBE_SPLIT_MIN_BYTES", "1")
    assert split_parse._cut(trace) is not None  # the file is really cut in two
    one_code, one = _report(cli, monkeypatch, str(trace), fixes, split=None)
    two_code, two = _report(cli, monkeypatch, str(trace), fixes, split=way)
    assert one_code == two_code == 0, one + two
    assert json.loads(two) == json.loads(one)
    assert json.loads(two)["totals"]["requests"] == 21


@pytest.mark.parametrize("fixes, way", [("--what-if", "count"), ("--no-fixes", "cut")])
def test_two_files_keep_ids_unique_and_order(cli, monkeypatch, tmp_path, fixes, way):
    a = _write(tmp_path / "a.jsonl", _records("r", turns=5))
    b = _write(tmp_path / "b.jsonl", _records("r", turns=4))  # same ids as a.jsonl: made unique by file
    one_code, one = _report(cli, monkeypatch, str(a), str(b), fixes, split=None)
    two_code, two = _report(cli, monkeypatch, str(a), str(b), fixes, split=way)
    assert one_code == two_code == 0
    assert json.loads(two) == json.loads(one)
    ids = [r["id"] for r in json.loads(two)["requests"]]
    assert len(ids) == len(set(ids)) == 27 and "b:r0" in ids


@pytest.mark.parametrize("keep_records, way", [(True, "count"), (False, "count"), (False, "cut")])
def test_skeletons_match_a_single_pass_and_share_blocks(monkeypatch, tmp_path, keep_records, way):
    trace = _write(tmp_path / "t.jsonl", _records(turns=8), blank_at=3)
    _way(monkeypatch, way)
    seq_store, par_store = BlockStore(), BlockStore()
    seq = list(skeletons(read_trace(trace), seq_store))
    par, kept = split_parse.parse([trace], par_store, [], keep_records=keep_records)
    def fields(sks, store):
        return [(s.id, s.order, s.line, s.offset, s.started_at, s.readable_at,
                 [store.raw[b.cache_key] for b in s.request.blocks]) for s in sks]

    assert fields(par, par_store) == fields(seq, seq_store)
    if keep_records:
        assert [r.id for r in kept] == [s.id for s in seq] and [r.line for r in kept] == [s.line for s in seq]
    else:
        assert kept is None
    # one object per chained key on both sides of the cut (sizing sizes each shared block once)
    objects = {}
    for sk in par:
        for block in sk.request.blocks:
            assert objects.setdefault(block.cache_key, block) is block
    assert set(objects) == set(seq_store.blocks)


def test_few_texts_are_counted_here_while_the_helper_still_loads(monkeypatch, tmp_path):
    """A trace over the split size whose texts fit the shipped table's budget (kvprobe.tokentable): when the
    parse ends before the helper has loaded its tokenizer, this process counts them from the table instead of
    waiting, to the same counts, and the helper still counts the single texts asked of it afterwards (it
    answers the parse's counts first, which are passed over)."""
    from kvprobe import tokens

    trace = _write(tmp_path / "t.jsonl", _records(turns=4))  # ~20,000 characters of distinct texts
    seq_store, par_store = BlockStore(), BlockStore()
    seq = list(skeletons(read_trace(trace), seq_store))
    monkeypatch.setattr(tokens, "_LOADED", set())  # as in a fresh process: no tokenizer loaded, no table spent
    monkeypatch.setattr(tokens, "_spent", {})
    # its tokenizer takes 1.5 s to load
    monkeypatch.setattr(helper, "_preload", lambda paths, input_bytes: time.sleep(1.5))
    _way(monkeypatch, "count")
    start = time.monotonic()
    par, _ = split_parse.parse([trace], par_store, [])
    waited = time.monotonic() - start
    try:
        assert waited < 1.0  # the helper was not waited for
        assert [[par_store.raw[b.cache_key] for b in s.request.blocks] for s in par] == \
            [[seq_store.raw[b.cache_key] for b in s.request.blocks] for s in seq]
        [lent] = split_parse._lent
        text = " ".join(f"module{i} returned {i * 7} rows" for i in range(40_000))  # past any table's budget
        short = "a moved span"
        assert lent.count([text, short], "cl100k_base") == [tokens._encoding("cl100k_base").count(t)
                                                            for t in (text, short)]
    finally:
        split_parse.end_counting()


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_the_helpers_share_sent_in_batches_equals_one_pass(cli, monkeypatch, tmp_path, batch):
    """The helper sends its skeletons a batch at a time, each pickled apart: a block two batches share arrives
    twice, and the join must still hold one object per chained key, sized as one pass sizes it."""
    from kvprobe.analysis import split_piece

    trace = _write(tmp_path / "t.jsonl", _records(sessions=2, turns=12))
    monkeypatch.setattr(split_piece, "SEND_BATCH", batch)  # the forked helper inherits it
    _way(monkeypatch, "cut")
    seq_store, par_store = BlockStore(), BlockStore()
    seq = list(skeletons(read_trace(trace), seq_store))
    par, _ = split_parse.parse([trace], par_store, [])
    assert [(s.id, s.line, [seq_store.raw[b.cache_key] for b in s.request.blocks]) for s in seq] == \
        [(s.id, s.line, [par_store.raw[b.cache_key] for b in s.request.blocks]) for s in par]
    objects: dict = {}
    for sk in par:
        for block in sk.request.blocks:
            assert objects.setdefault(block.cache_key, block) is block
    assert set(objects) == set(seq_store.blocks)
    one_code, one = _report(cli, monkeypatch, str(trace), "--what-if", split=None)
    two_code, two = _report(cli, monkeypatch, str(trace), "--what-if", split="cut")
    assert one_code == two_code == 0, one + two
    assert json.loads(two) == json.loads(one)
    assert json.loads(two)["totals"]["requests"] == 24


@pytest.mark.parametrize("way", WAYS)
def test_progress_adds_up_to_the_file(monkeypatch, tmp_path, way):
    trace = _write(tmp_path / "t.jsonl", _records())
    _way(monkeypatch, way)
    seen = []
    split_parse.parse([trace], BlockStore(), [], progress=seen.append)
    assert sum(seen) == trace.stat().st_size


@pytest.mark.parametrize("fixes", ["--what-if", "--no-fixes"])  # read whole here / cut in two
def test_bad_line_after_the_cut_is_named_by_its_line_in_the_file(cli, monkeypatch, tmp_path, fixes):
    trace = _write(tmp_path / "t.jsonl", _records())
    lines = trace.read_text().splitlines()
    lines[17] = lines[17][: len(lines[17]) // 2]  # line 18, well after the middle: cut short
    trace.write_text("\n".join(lines) + "\n")
    for split in (None, *WAYS):
        code, out = _report(cli, monkeypatch, str(trace), fixes, split=split)
        assert code == 2
        assert f"{trace}:18" in out and "truncated line" in out, out


@pytest.mark.parametrize("fixes", ["--what-if", "--no-fixes"])
def test_duplicate_id_across_the_cut(cli, monkeypatch, tmp_path, fixes):
    records = _records()
    records[19]["id"] = records[2]["id"]
    trace = _write(tmp_path / "t.jsonl", records)
    for split in (None, *WAYS):
        code, out = _report(cli, monkeypatch, str(trace), fixes, split=split)
        assert code == 2
        assert f"{trace}:20" in out and "duplicate id 'r2' (first seen on line 3)" in out, out


def test_a_trace_out_of_time_order_across_the_cut_equals_one_pass(cli, monkeypatch, tmp_path):
    """This process simulates its share while the other reads the rest; when the rest holds requests that
    started earlier (the first turns written last here), the whole trace is simulated again in start order."""
    records = _records()
    late_written = records[:6] + [records[9]]  # the first two turns, and one of turn 3 without a start time
    trace = _write(tmp_path / "t.jsonl", [r for r in records if r not in late_written] + late_written)
    monkeypatch.setenv("KVPROBE_SPLIT_MIN_BYTES", "1")
    assert split_parse._cut(trace) is not None
    one_code, one = _report(cli, monkeypatch, str(trace), "--no-fixes", split=None)
    two_code, two = _report(cli, monkeypatch, str(trace), "--no-fixes", split="cut")
    assert one_code == two_code == 0, one + two
    assert json.loads(two) == json.loads(one)
    writes = [r["id"] for r in json.loads(two)["requests"] if r["predicted"]["cache_write_tokens"]]
    assert writes == ["r0"]  # the first request in time, written last: the shared system prompt's one write


@pytest.mark.parametrize("fixes, way", [("--what-if", "count"), ("--no-fixes", "count"), ("--no-fixes", "cut")])
def test_command_line_starts_the_helper_early_and_equals_one_pass(cli, monkeypatch, tmp_path, fixes, way):
    """`kvprobe report` starts the second process before its imports when a large trace is named; run as a
    user runs it (a new process), the output is what one pass in this process gives."""
    trace = _write(tmp_path / "t.jsonl", _records(turns=8), blank_at=5)
    one_code, one = _report(cli, monkeypatch, str(trace), fixes, split=None)
    run = subprocess.run([sys.executable, "-m", "kvprobe", "report", str(trace), fixes, "--json"],
                         capture_output=True, text=True, env=_env(way), timeout=120)
    assert one_code == run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == json.loads(one)


def test_an_unused_early_helper_does_not_hold_the_command(tmp_path):
    """A large .jsonl that is not a kvprobe trace (a Claude Code transcript) goes through the importers: the
    helper started for it is never used, and the command still ends, with its result."""
    lines = [{"type": "user", "sessionId": "s1", "uuid": "u1", "timestamp": "2026-11-02T10:00:00Z",
              "message": {"role": "user", "content": "hello"}},
             {"type": "assistant", "sessionId": "s1", "uuid": "a1", "parentUuid": "u1",
              "timestamp": "2026-11-02T10:00:05Z", "requestId": "req_1",
              "message": {"id": "msg_1", "role": "assistant", "model": "claude-sonnet-4-5",
                          "content": [{"type": "text", "text": "hi"}],
                          "usage": {"input_tokens": 10, "cache_read_input_tokens": 3000,
                                    "cache_creation_input_tokens": 200, "output_tokens": 5}}}]
    transcript = tmp_path / "session.jsonl"
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
    run = subprocess.run([sys.executable, "-m", "kvprobe", "report", str(transcript), "--json"],
                         capture_output=True, text=True, env=_env("count"), timeout=60)
    assert run.returncode == 0, run.stderr
    totals = json.loads(run.stdout)["totals"]
    assert (totals["requests"], totals["cache_read_tokens"], totals["input_tokens"]) == (1, 3000, 3210)


@pytest.mark.parametrize("keep_records, way", [(True, "count"), (False, "cut")])
def test_without_fork(monkeypatch, tmp_path, keep_records, way):
    """Where processes are spawned, not forked (Windows): texts are counted in this process, and a cut file's
    second part is parsed by a spawned helper."""
    monkeypatch.setattr(helper, "_forks", lambda: False)
    trace = _write(tmp_path / "t.jsonl", _records(turns=4))
    _way(monkeypatch, way)
    seq_store, par_store = BlockStore(), BlockStore()
    seq = list(skeletons(read_trace(trace), seq_store))
    par, _ = split_parse.parse([trace], par_store, [], keep_records=keep_records)
    assert [[par_store.raw[b.cache_key] for b in s.request.blocks] for s in par] == \
        [[seq_store.raw[b.cache_key] for b in s.request.blocks] for s in seq]


def test_a_trace_whose_first_record_needs_another_tokenizer_than_the_rest(cli, monkeypatch, tmp_path):
    """The helper preloads the tokenizer the first record needs (Claude: an estimate on cl100k); OpenAI records
    after it are counted exactly with o200k, loaded when their first text arrives."""
    openai = []
    history = [{"role": "system", "content": "You review pull requests for a payments service. " * 80}]
    for turn in range(5):
        history = history + [{"role": "user", "content": f"Review change {turn}: rename the ledger field {turn}."}]
        openai.append({"id": f"o{turn}", "session": "review", "provider": "openai",
                       "started_at": f"2026-11-02T11:{turn:02d}:00Z",
                       "request": {"model": "gpt-4o", "messages": history},
                       "response": {"usage": {"prompt_tokens": 900 + 20 * turn, "completion_tokens": 30,
                                              "prompt_tokens_details": {"cached_tokens": 896 if turn else 0}}}})
        history = history + [{"role": "assistant", "content": f"Change {turn} looks right."}]
    trace = _write(tmp_path / "t.jsonl", _records(turns=3) + openai)
    one_code, one = _report(cli, monkeypatch, str(trace), "--what-if", split=None)
    run = subprocess.run([sys.executable, "-m", "kvprobe", "report", str(trace), "--what-if", "--json"],
                         capture_output=True, text=True, env=_env("count"), timeout=120)
    assert one_code == run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == json.loads(one)
    assert {r["provider"] for r in json.loads(one)["requests"]} == {"anthropic", "openai"}


def test_the_helper_empties_its_scratch_file_once_everything_in_it_is_counted():
    """Memory stays flat in the trace's size: texts wait in the scratch file only until the helper reads them.
    (" hello" is one cl100k token, so a text of it repeated n times is n tokens.)"""
    h = helper.Helper([], [])
    try:
        h.start([], counting=True)
        first = pickle.dumps([(1, "cl100k_base", " hello" * 3000, ""), (2, "cl100k_base", " hello" * 5, " hello")])
        h.send_texts(first)
        h.send_texts(pickle.dumps([(3, "cl100k_base", " hello" * 2, "")]))  # most often before the first is read
        deadline = time.monotonic() + 60
        while h.unread_bytes:
            assert time.monotonic() < deadline, "the helper never read the first batches"
            time.sleep(0.01)
        last = pickle.dumps([(4, "cl100k_base", " hello" * 7, "")])
        h.send_texts(last)
        assert h.scratch_bytes == len(last)  # emptied first: it holds the last batch alone
        assert h.counts() == {1: 3000, 2: 6, 3: 2, 4: 7}
    finally:
        h.close()


def test_a_helper_that_dies_is_named_at_once_not_at_the_end():
    h = helper.Helper([], [])
    try:
        h.start([], counting=True)
        assert h.pid is not None
        os.kill(h.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match=r"second process counting tokens ended \(killed by signal 9\)"):
            for _ in range(100):  # the first send after its end fails (one may still fit in the pipe)
                h.send_texts(pickle.dumps([(1, "cl100k_base", " hello", "")]))
                time.sleep(0.01)
    finally:
        h.close()


def test_the_command_line_hands_its_early_helper_to_the_parse(monkeypatch, tmp_path):
    trace = _write(tmp_path / "t.jsonl", _records(turns=2))
    monkeypatch.setenv("KVPROBE_SPLIT_MIN_BYTES", "1")
    helper.prestart(["--json", str(trace), "no-such-file.jsonl", "3"])
    early = helper._prestarted
    try:
        assert early is not None and early.alive()
        assert helper.take([trace], counting=True) is early and helper._prestarted is None
    finally:
        early.close()


def test_texts_counted_here_while_the_helper_is_behind_give_the_same_sizes(monkeypatch, tmp_path):
    """With texts that are nearly all unique, counting outweighs reading and the helper falls behind: this
    process then counts every other batch itself. Forced here from the first batch on."""
    monkeypatch.setattr(split_parse, "BATCH_CHARS", 2_000)
    monkeypatch.setattr(split_parse, "BEHIND_BYTES", -1)
    trace = _write(tmp_path / "t.jsonl", _records(turns=6))
    _way(monkeypatch, "count")
    seq_store, par_store = BlockStore(), BlockStore()
    seq = list(skeletons(read_trace(trace), seq_store))
    par, _ = split_parse.parse([trace], par_store, [], keep_records=True)
    assert [[par_store.raw[b.cache_key] for b in s.request.blocks] for s in par] == \
        [[seq_store.raw[b.cache_key] for b in s.request.blocks] for s in seq]


_COUNTED_AFTER = """
import json, sys
import kvprobe.tokens as tokens
tokens._from_table = lambda text, encoding: None  # the shipped tables off: the texts need the tokenizer
from kvprobe.report import build_report
from kvprobe.analysis import split_parse
rep = build_report([sys.argv[1]], fixes=True)
changes = [(r.sk.id, d.path, d.char_offset, d.token_position) for r in rep.results for d in r.diagnoses
           if d.kind == "prefix_changed"]
print(json.dumps({"changes": changes, "fixes": rep.fixes, "loaded": sorted(tokens._LOADED),
                  "lent": len(split_parse._lent)}))
"""


def test_texts_counted_after_the_parse_are_counted_by_the_helper(tmp_path):
    """The diagnoses (the token position of a change inside a block) and the what-if (a moved span's size)
    count a few texts after the parse: the helper counts them, so this process loads no tokenizer, with
    the figures one process gives; and the helper ends with the report."""
    records = _records(sessions=3, turns=6)
    for rec in records:  # a clock in the system text that moves on at turn 3: a prefix change in every session
        turn = int(rec["request"]["messages"][-1]["content"].split("step ")[1].split(":")[0])
        rec["request"]["system"][0]["text"] = f"The time is 10:{0 if turn < 3 else 5}0. " + SYSTEM
        if turn == 3:
            rec["response"]["usage"].update(cache_read_input_tokens=0, cache_creation_input_tokens=1400)
    trace = _write(tmp_path / "t.jsonl", records)
    runs = {}
    for way in ("one", "count"):
        env = {**os.environ, "KVPROBE_SPLIT_MIN_BYTES": "1"} if way == "count" else \
            {k: v for k, v in os.environ.items() if k != "KVPROBE_SPLIT_MIN_BYTES"}
        out = subprocess.run([sys.executable, "-c", _COUNTED_AFTER, str(trace)], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        runs[way] = json.loads(out.stdout)
    one, two = runs["one"], runs["count"]
    assert len(one["changes"]) == 3 and all(c[1] == "system[0]" and c[3] > 0 for c in one["changes"])
    assert two["changes"] == one["changes"] and two["fixes"] == one["fixes"]
    assert one["loaded"] == ["cl100k_base"] and two["loaded"] == []  # counted there, not loaded here
    assert two["lent"] == 0  # ended with the report


def test_a_stopped_helper_is_named_not_waited_for(monkeypatch):
    """A helper stopped mid-count (SIGSTOP: a debugger, job control) is ended and named at once, where the
    parse waited for it for ever; the few texts counted after the parse are then counted here (None)."""
    h = helper.Helper([], [])
    try:
        h.start([], counting=True)
        h.send_texts(pickle.dumps([(1, "cl100k_base", " hello" * 3, "")]))
        os.kill(h.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match=r"second process counting tokens ended .*it was stopped"):
            h.counts()
        assert time.monotonic() - started < 10
        assert h.count([" hello"], "cl100k_base") is None  # ended: the caller counts it itself
    finally:
        h.close()


def test_the_helpers_share_taken_while_this_process_simulates_its_own_equals_one_pass(cli, monkeypatch, tmp_path):
    """The helper's share is taken as soon as it is ready, in the middle of this process's simulation of its own
    share (the helper then ends, with what it held): the report is the one a single process makes."""
    from kvprobe.analysis.simulate import LeadingSimulation

    trace = _write(tmp_path / "t.jsonl", _records(sessions=4))
    taken_during_lead: list[bool] = []
    inside = [False]
    real_lead, real_result = LeadingSimulation.lead, helper.Helper.result

    def lead(self, leading, now_and_then=None):
        inside[0] = True
        deadline = time.monotonic() + 30
        while not taken_during_lead and time.monotonic() < deadline:  # the helper's share is small: soon ready
            now_and_then()
            time.sleep(0.01)
        real_lead(self, leading, now_and_then)
        inside[0] = False

    def result(self, path, progress):
        taken_during_lead.append(inside[0])
        return real_result(self, path, progress)
    one_code, one = _report(cli, monkeypatch, str(trace), "--what-if", split=None)
    monkeypatch.setattr(LeadingSimulation, "lead", lead)
    monkeypatch.setattr(helper.Helper, "result", result)
    two_code, two = _report(cli, monkeypatch, str(trace), "--what-if", split="cut")
    assert one_code == two_code == 0, one + two
    assert taken_during_lead == [True]  # once, and while this process simulated its share
    assert json.loads(two) == json.loads(one)


def test_a_long_text_asked_of_the_helper_while_its_counts_wait_unread_does_not_hang(tmp_path):
    """The parse ends while the helper still loads its tokenizer (quicktok: ~0.25 s), so its texts are counted here
    and its counts are left to pass over; then the diagnoses ask it for a long text (a 75,000-character system
    prompt changed at its end). Its counts (thousands of texts: more than a pipe holds) and that text were each
    written while the other side wrote too, and both processes waited for ever."""
    words = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta")
    system = " ".join(words[i % 6] + str(i % 7) for i in range(11_000))[:75_000]
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{i:x}"} for i in range(6_000)]
    records = [{"id": f"r{k}", "session": "s", "provider": "openai", "started_at": f"2026-11-02T10:00:0{k}Z",
                "request": {"model": "gpt-4o", "messages": [{"role": "system", "content": prompt}, *history]},
                "response": {}} for k, prompt in enumerate((system, system[:-10] + "CHANGED!!!"))]
    trace = _write(tmp_path / "t.jsonl", records)
    outputs = {}
    for way, split in (("one", "1000000000"), ("helper", "1")):
        run = subprocess.run([sys.executable, "-m", "kvprobe", "report", str(trace), "--json"], capture_output=True,
                             text=True, timeout=90, cwd=ROOT,
                             env={**os.environ, "KVPROBE_TOKENIZER": "quicktok", "KVPROBE_SPLIT_MIN_BYTES": split})
        assert run.returncode == 0, run.stderr
        outputs[way] = run.stdout
    assert outputs["helper"] == outputs["one"]
    assert json.loads(outputs["one"])["requests"][1]["diagnoses"]


@pytest.mark.parametrize("fork", [True, False])
def test_a_helper_stopped_when_the_report_closes_it_is_ended_not_waited_for(monkeypatch, fork):
    """SIGTERM waits on a stopped process until it is continued: closing one (the report's end, with a debugger
    or job control holding the helper) waited for ever. It is killed after a second's grace."""
    monkeypatch.setattr(helper, "_forks", lambda: fork)
    h = helper.Helper([], [])
    pid = h.pid
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    h.close()
    assert time.monotonic() - started < 5
    assert not h.alive()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # ended and reaped


@pytest.mark.parametrize("fork", [True, False])
@pytest.mark.parametrize("stopped", [False, True])
def test_the_helper_is_dismissed_at_the_reports_end_without_a_wait(monkeypatch, fork, stopped):
    """Its work done, the helper that counted for the report is killed, not waited for (the wait was ~13 ms of
    a small report's end), even when stopped; it is reaped by the next report's end or at this process's exit,
    so none is left behind."""
    monkeypatch.setattr(helper, "_forks", lambda: fork)
    h = helper.Helper([], [])
    pid = h.pid
    if stopped:
        os.kill(pid, signal.SIGSTOP)
    split_parse._lend(h)
    started = time.monotonic()
    split_parse.end_counting()
    assert time.monotonic() - started < 0.5
    deadline = time.monotonic() + 10
    while helper._dismissed and time.monotonic() < deadline:
        helper.reap_dismissed()
        time.sleep(0.01)
    assert not helper._dismissed
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # ended and reaped
