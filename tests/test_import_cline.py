"""Cline task folders (kvprobe.importers.cline): ui_messages.json written here in the extension's own shape
(`say` entries with ms `ts`, `api_req_started` text as a JSON string, `modelInfo`, `conversationHistoryIndex`,
`conversationHistoryDeletedRange`), with the api_conversation_history.json and task_metadata.json beside it,
as the public task logs read for this importer show them (Cline 3.3x-3.8x, Anthropic, Z.ai, DeepSeek). Every
expected figure is worked out by hand from the entries the test writes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.importers import ImportReport, detect_format, load_any

T0 = 1_770_800_000_000  # ms: 2026-02-11 08:53:20 UTC, the task's id and its first message's time
SONNET = {"providerId": "anthropic", "modelId": "claude-sonnet-4-5-20250929", "mode": "act"}


def _say(t: float, say: str, text: str | None = None, **more) -> dict:
    entry = {"ts": T0 + int(t * 1000), "type": "say", "say": say, **more}
    if text is not None:
        entry["text"] = text
    return entry


def _request(t: float, index: int, tokens_in: int, out: int, writes: int, reads: int, model: dict | None = SONNET,
             **more) -> dict:
    usage = {"request": "<task>...</task>", "tokensIn": tokens_in, "tokensOut": out, "cacheWrites": writes,
             "cacheReads": reads, "cost": 0.01, **more}
    entry = _say(t, "api_req_started", json.dumps(usage), conversationHistoryIndex=index)
    if model is not None:
        entry["modelInfo"] = model
    return entry


def _write(folder: Path, entries: list[dict], history: list[dict] | None = None, meta: dict | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "ui_messages.json").write_text(json.dumps(entries))
    if history is not None:
        (folder / "api_conversation_history.json").write_text(json.dumps(history))
    if meta is not None:
        (folder / "task_metadata.json").write_text(json.dumps(meta, indent=2))
    return folder


def _shifted(entries: list[dict], ms: int) -> list[dict]:
    """The same entries, a task begun `ms` later."""
    return [{**e, "ts": e["ts"] + ms} for e in entries]


def _turns(n: int, size: int) -> list[dict]:
    """n alternating messages, each of `size` characters of text."""
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": chr(97 + i) * size}]}
            for i in range(n)]


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    """VS Code's globalStorage for Cline: one task with every kind of entry."""
    tasks = tmp_path / "globalStorage" / "saoudrizwan.claude-dev" / "tasks"
    entries = [
        _say(0, "task", "fix the login bug"),
        _request(1, -1, tokens_in=10, out=300, writes=20_000, reads=0),
        _say(4, "text", "Let me read the file."),
        _say(6, "tool", json.dumps({"tool": "readFile", "path": "login.py"})),
        _say(7, "checkpoint_created"),
        _request(8, 1, tokens_in=12, out=200, writes=1_500, reads=20_000),
        _say(11, "text", "Found it."),
        _say(12, "error_retry", json.dumps({"attempt": 1, "maxAttempts": 3, "delaySeconds": 2})),
        {"ts": T0 + 13_000, "type": "say", "say": "api_req_retried"},  # no text at all, as Cline writes it
        _request(14, 3, tokens_in=0, out=0, writes=0, reads=0, cancelReason="streaming_failed"),  # failed: no usage
        _request(20, 3, tokens_in=9, out=50, writes=800, reads=21_500,
                 model={**SONNET, "mode": "plan"}),  # the user switched to Plan mode
        _say(22, "text", "Plan: ..."),
        _say(30, "deleted_api_reqs", json.dumps({"tokensIn": 40, "tokensOut": 900, "cacheWrites": 3_000,
                                                 "cacheReads": 50_000, "cost": 0.05})),
    ]
    _write(tasks / str(T0), entries)
    return tmp_path / "globalStorage"


def test_each_api_request_is_one_record(storage):
    report = ImportReport()
    records = list(load_any(storage, report=report))
    calls = [r for r in records if r.agent == "main"]
    assert [r.id for r in calls] == [f"{T0}:{T0 + 1000}", f"{T0}:{T0 + 8000}", f"{T0}:{T0 + 20000}"]
    first, second, third = calls
    assert first.provider == "anthropic" and first.response["model"] == "claude-sonnet-4-5-20250929"
    # Anthropic's handler logs the uncached input: the usage is the API's, as it was
    assert first.response["usage"] == {"input_tokens": 10, "cache_read_input_tokens": 0,
                                       "cache_creation_input_tokens": 20_000, "output_tokens": 300}
    assert second.response["usage"]["cache_read_input_tokens"] == 20_000
    # sent at its entry's time; answered at the last entry of the answer (the tool call, not the checkpoint)
    assert (first.started_at, first.finished_at) == ((T0 + 1000) / 1000, (T0 + 6000) / 1000)
    assert first.session == str(T0) and first.extra["writer"] == "Cline"
    assert [e["settings"] for e in third.extra["events"]] == [["mode: act -> plan"]]
    # the failed request logged zeros: a counted skip, never a $0 request
    assert report.reasons() == {"request that logged no usage (failed or cancelled before its first token)": 1}
    # the checkpoint restore's deleted requests: one record of their sums, counted as a total
    deleted = [r for r in records if r.agent == "deleted-requests"]
    assert len(deleted) == 1 and deleted[0].extra["process_total"] is True
    assert deleted[0].response["usage"]["cache_read_input_tokens"] == 50_000
    assert detect_format(next(storage.rglob("ui_messages.json"))) == "cline"


def test_usage_adds_up_every_request_and_the_deleted_ones(cli, storage):
    data = json.loads(cli("usage", storage, "--json").stdout)
    totals = data["totals"]
    # requests: 3 calls + 1 record of deleted requests
    assert totals["requests"] == 4
    # input: (10 + 20,000) + (12 + 1,500 + 20,000) + (9 + 800 + 21,500) + (40 + 3,000 + 50,000)
    assert totals["input_tokens"] == 20_010 + 21_512 + 22_309 + 53_040
    assert totals["cache_read_tokens"] == 20_000 + 21_500 + 50_000
    assert totals["output_tokens"] == 300 + 200 + 50 + 900
    assert data["requests_without_model"] == 0


def test_a_copy_of_the_task_folder_is_the_same_task(tmp_path, storage):
    """An exported or snapshotted copy under another name: its requests are counted once."""
    src = next(storage.rglob("ui_messages.json"))
    copy = tmp_path / "export" / "my-task"
    copy.mkdir(parents=True)
    copy.joinpath("ui_messages.json").write_bytes(src.read_bytes())
    report = ImportReport()
    records = list(load_any([storage, tmp_path / "export"], report=report))
    assert len(records) == 4 and report.duplicates == 4


def test_whole_prompt_input_is_split_by_provider_and_by_what_the_log_shows(tmp_path):
    """OpenAI-compatible handlers log prompt_tokens (cached included); a log whose input is under its own cache
    reads cannot have counted them, whatever the provider table says."""
    compat = {"providerId": "openai", "modelId": "gpt-4.1", "mode": "act"}
    _write(tmp_path / "tasks" / "1770800000000", [
        _say(0, "text", "refactor"),
        _request(1, -1, tokens_in=30_000, out=100, writes=0, reads=0, model=compat),
        _request(5, 1, tokens_in=31_000, out=100, writes=0, reads=24_000, model=compat),
    ])
    _write(tmp_path / "tasks" / "1770900000000", _shifted([
        _say(0, "text", "again"),
        _request(1, -1, tokens_in=30_000, out=100, writes=0, reads=0, model=compat),
        _request(5, 1, tokens_in=2_000, out=100, writes=0, reads=29_000, model=compat),  # 2,000 < 29,000
    ], 100_000_000))
    by_id = {r.id: r.response["usage"] for r in load_any(tmp_path / "tasks")}
    # whole prompt: 31,000 of which 24,000 cached
    assert by_id["1770800000000:1770800005000"]["input_tokens"] == 31_000
    assert by_id["1770800000000:1770800005000"]["input_tokens_details"]["cached_tokens"] == 24_000
    # the second task's input was the uncached part: the prompt is 2,000 + 29,000
    assert by_id["1770900000000:1770900005000"]["input_tokens"] == 31_000


def test_deepseek_misses_logged_as_writes_are_input(tmp_path):
    """Cline's DeepSeek handler logs tokensIn 0 and the cache misses as cacheWrites; an old task names no
    model at all: the misses are read as uncached input, and the requests as unpriced, said."""
    _write(tmp_path / "tasks" / "1760500000000", [
        _say(0, "text", "add a tool"),
        _request(1, -1, tokens_in=0, out=100, writes=12_000, reads=0, model=None),
        _request(5, 1, tokens_in=0, out=100, writes=600, reads=12_160, model=None),
        _request(9, 3, tokens_in=0, out=100, writes=900, reads=12_800, model=None),
    ])
    records = list(load_any(tmp_path / "tasks"))
    assert [r.response["usage"]["input_tokens_details"].get("cache_write_tokens") for r in records] == [None] * 3
    assert [r.response["usage"]["input_tokens"] for r in records] == [12_000, 12_760, 13_700]


def test_the_model_of_an_older_task_comes_from_its_metadata(cli, tmp_path):
    """Before modelInfo, task_metadata.json's model_usage names the model by time (a Plan/Act switch too)."""
    meta = {"files_in_context": [], "model_usage": [
        {"ts": T0, "model_id": "glm-4.6", "model_provider_id": "zai", "mode": "act"},
        {"ts": T0 + 4_000, "model_id": "claude-sonnet-4-5-20250929", "model_provider_id": "anthropic",
         "mode": "plan"}]}
    _write(tmp_path / "tasks" / str(T0), [
        _say(0, "text", "hello"),
        _request(1, -1, tokens_in=8_000, out=10, writes=0, reads=0, model=None),
        _request(5, 1, tokens_in=5, out=10, writes=100, reads=8_000, model=None),
    ], meta=meta)
    records = list(load_any(tmp_path / "tasks"))
    assert [r.response["model"] for r in records] == ["glm-4.6", "claude-sonnet-4-5-20250929"]
    assert [r.provider for r in records] == ["openai", "anthropic"]
    data = json.loads(cli("usage", tmp_path / "tasks", "--json").stdout)
    assert data["import"]["skipped"] == 0  # task_metadata.json is the task's own file, read with it
    # kvprobe has no price for glm-4.6: the $0.01 Cline logged for it is said beside the table, not added to it
    assert data["logged_cost_of_unpriced_usd"] == 0.01 and data["unknown_models"] == ["glm-4.6"]
    text = cli("usage", tmp_path / "tasks", "--by", "model").stdout
    assert "the logs' own cost for the requests not priced: $0.01" in text
    assert [line.split()[-1] for line in text.splitlines() if line.startswith("glm-4.6")] == ["n/a*"]


def test_truncation_is_where_the_prompt_changed(tmp_path):
    """Cline's context manager drops a range of messages after the task's first pair: the range the request was
    sent with is on the entries after its api_req_started. With the conversation beside the log, the history
    says where the prompt changed; without it, the request carries a compaction event (a truncation)."""
    history = _turns(8, 4_000)  # 8 messages of ~1,000 estimated tokens each (4,000 characters / 4)
    entries = [
        _say(0, "text", "long task"),
        _request(1, 3, tokens_in=10, out=10, writes=5_000, reads=0),
        _say(2, "text", "ok", conversationHistoryDeletedRange=None),
        _request(10, 5, tokens_in=10, out=10, writes=2_000, reads=5_000),
        _say(11, "text", "ok"),
        # the next request is sent with messages 2..3 dropped: [2, 3] on what follows its entry
        _request(20, 5, tokens_in=10, out=10, writes=3_000, reads=1_000),
        _say(21, "text", "ok", conversationHistoryDeletedRange=[2, 3]),
    ]
    with_history = _write(tmp_path / "a" / "tasks" / str(T0), entries, history=history)
    records = list(load_any(with_history))
    change = records[2].extra["history"]["change"]
    # sent: messages 0, 1, 4..6 (index 5 + 2 = 7 messages, less 2 and 3): the first two are as before
    assert change["kind"] == "truncated" and change["index"] == 2
    assert records[2].extra["history"]["messages"] == 5
    assert "events" not in records[2].extra

    bare = _write(tmp_path / "b" / "tasks" / str(T0), entries)
    records = list(load_any(bare))
    assert [e["trigger"] for e in records[2].extra["events"]] == ["truncation"]
    assert "history" not in records[2].extra


def test_truncation_reads_as_dropped_messages_in_the_report(cli, tmp_path):
    entries = [
        _say(0, "text", "long task"),
        _request(1, -1, tokens_in=10, out=10, writes=150_000, reads=0),
        _say(2, "text", "ok"),
        _request(10, 1, tokens_in=10, out=10, writes=2_000, reads=150_000),
        _say(11, "text", "ok"),
        _request(20, 3, tokens_in=10, out=10, writes=60_000, reads=4_000),
        _say(21, "text", "ok", conversationHistoryDeletedRange=[2, 3]),
        _request(30, 5, tokens_in=10, out=10, writes=1_000, reads=64_000),
    ]
    _write(tmp_path / "tasks" / str(T0), entries)
    data = json.loads(cli("report", tmp_path / "tasks", "--json").stdout)
    (dropped,) = data["compactions"]
    assert dropped["kind"] == "truncation" and dropped["summary_request"] is None
    # before: the request before it, 10 + 2,000 + 150,000; after: 10 + 60,000 + 4,000
    assert (dropped["tokens_before"], dropped["tokens_after"]) == (152_010, 64_010)
    text = cli("report", tmp_path / "tasks").stdout
    assert "Older messages dropped at" in text and "summarising call" not in text
    # the request that wrote the shorter history again says why in its row (no blank "nothing to explain")
    assert "older messages dropped" in text.split("Older messages dropped at")[0]


def test_broken_and_foreign_files(tmp_path):
    folder = tmp_path / "tasks" / str(T0)
    folder.mkdir(parents=True)
    (folder / "ui_messages.json").write_text('[{"ts": 1770800000000, "type": "say", "say": "text", "text": "hi"},')
    (folder / "api_conversation_history.json").write_text("[]")
    report = ImportReport()
    assert list(load_any(tmp_path / "tasks", report=report)) == []
    assert report.reasons() == {"truncated JSON file": 1}  # the conversation beside it: read with it, not skipped


def _sdk_session(root: Path, sid: str, messages: list[dict], cwd: str = "/home/dev/app") -> Path:
    """A Cline CLI 3 session as it writes one: <sid>.messages.json (version 1, agent lead, Anthropic-shaped
    content, metrics on each assistant message) and the <sid>.json manifest beside it."""
    folder = root / "sessions" / sid
    folder.mkdir(parents=True)
    (folder / f"{sid}.messages.json").write_text(json.dumps({
        "version": 1, "updated_at": "2026-12-07T08:19:50.000Z", "agent": "lead", "sessionId": sid,
        "origin": {"source": "cli", "mode": "act", "sessionId": sid, "version": "3.0.65"},
        "messages": messages, "system_prompt": "You are Cline, a highly skilled software engineer..."}, indent=1))
    (folder / f"{sid}.json").write_text(json.dumps({
        "version": 1, "session_id": sid, "source": "cli", "started_at": "2026-12-07T08:19:30.000Z",
        "status": "completed", "provider": "anthropic", "model": "claude-sonnet-4-6", "cwd": cwd,
        "metadata": {"title": "Read notes.txt and write a short summary", "totalCost": 0.03}}))
    return folder


def _assistant(mid: str, at_s: float, total: int, read: int, write: int, out: int, provider: str = "anthropic",
               model: str = "claude-sonnet-4-6") -> dict:
    return {"id": mid, "role": "assistant", "ts": 1_796_631_580_000 + int(at_s * 1000),
            "content": [{"type": "tool_use", "id": f"t-{mid}", "name": "read_files", "input": {"paths": ["notes.txt"]}}],
            "modelInfo": {"id": model, "provider": provider},
            "metrics": {"inputTokens": total, "outputTokens": out, "cacheReadTokens": read, "cacheWriteTokens": write}}


def _user(text: str) -> dict:
    return {"id": f"u-{len(text)}", "role": "user", "content": [{"type": "text", "text": text}]}


def test_an_sdk_sessions_assistant_messages_are_its_requests(cli, tmp_path):
    """Cline CLI 3.0.65's metrics count the whole prompt as inputTokens (its usage equals the API's input + cache
    writes + cache reads, checked against the usage a local server returned): the uncached part is the rest."""
    _sdk_session(tmp_path, "1796631042093_00xqf", [
        _user("<user_input mode=\"act\">Read notes.txt and write a short summary of it to summary.txt</user_input>"),
        _assistant("a1", 0, total=5_417, read=0, write=5_411, out=40),
        {"id": "u2", "role": "user", "content": [{"type": "tool_result", "tool_use_id": "t-a1", "content": "notes"}]},
        _assistant("a2", 3, total=5_578, read=5_411, write=0, out=30),
        _user("Also add a title line at the top of summary.txt"),
        _assistant("a3", 60, total=5_793, read=5_411, write=376, out=20),
    ])
    _sdk_session(tmp_path, "1796631298683_86ste", [
        _user("Read notes.txt"),
        _assistant("o1", 100, total=5_412, read=5_248, write=0, out=25, provider="openai-compatible", model="gpt-5"),
    ])
    records = {r.id: r for r in load_any(tmp_path / "sessions")}
    assert list(records) == ["a1", "a2", "a3", "o1"]
    usage = [records[k].response["usage"] for k in ("a1", "a2", "a3")]
    assert [(u["input_tokens"], u["cache_read_input_tokens"], u["cache_creation_input_tokens"]) for u in usage] == \
        [(6, 0, 5_411), (167, 5_411, 0), (6, 5_411, 376)]
    a2 = records["a2"]
    # sent when the previous answer ended (the log keeps when each answer ended); the first at the session's start
    assert (a2.started_at, a2.finished_at) == (1_796_631_580.0, 1_796_631_583.0)
    assert records["a1"].started_at == 1_796_631_570.0  # the manifest's start, 08:19:30
    assert a2.extra["cwd"] == "/home/dev/app" and a2.agent == "main" and a2.session == "1796631042093_00xqf"
    assert a2.extra["history"]["messages"] == 3  # the prompt, the first answer, its tool result
    gpt = records["o1"]
    assert gpt.provider == "openai" and gpt.response["usage"]["input_tokens"] == 5_412
    assert gpt.response["usage"]["input_tokens_details"]["cached_tokens"] == 5_248
    data = json.loads(cli("usage", tmp_path / "sessions", "--json").stdout)
    # the manifests are the sessions' own files: read with them, nothing skipped
    assert data["import"]["skipped"] == 0 and data["totals"]["requests"] == 4
    assert data["totals"]["input_tokens"] == 5_417 + 5_578 + 5_793 + 5_412


def test_a_task_is_named_by_what_was_asked(cli, storage, tmp_path):
    """The bill names a task by its first message (its <task> tags off) and an SDK session by its manifest's
    title: what the user typed, not a millisecond id."""
    data = json.loads(cli("report", storage, "--json").stdout)
    assert [s["title"] for s in data["bill"]["by_session"]] == ["fix the login bug"]
    _sdk_session(tmp_path, "1796631042093_00xqf", [
        _user("<user_input mode=\"act\">Read notes.txt</user_input>"),
        _assistant("a1", 0, total=5_417, read=0, write=5_411, out=40)])
    data = json.loads(cli("report", tmp_path / "sessions", "--json").stdout)
    assert [s["title"] for s in data["bill"]["by_session"]] == ["Read notes.txt and write a short summary"]


def test_a_summary_is_told_from_a_truncation(tmp_path):
    """Roo Code writes `condense_context` (with the context's size before) when a summary replaces the history;
    Cline calls its summarize_task tool before it drops the summarised range. Both are compactions by a
    summary ("condense"); a range dropped with neither is the context manager's truncation."""
    roo = tmp_path / "rooveterinaryinc.roo-cline" / "tasks" / str(T0)
    _write(roo, [
        _say(0, "text", "long task"),
        _request(1, -1, tokens_in=10, out=10, writes=90_000, reads=0, apiProtocol="anthropic"),
        {**_say(5, "condense_context"), "contextCondense": {"cost": 0.02, "prevContextTokens": 90_010,
                                                            "newContextTokens": 3_000, "summary": "…"}},
        _request(9, 1, tokens_in=10, out=10, writes=3_000, reads=0, apiProtocol="anthropic"),
    ])
    cline = tmp_path / "cline" / "tasks" / str(T0 + 1)
    _write(cline, _shifted([
        _say(0, "text", "long task"),
        _request(1, -1, tokens_in=10, out=10, writes=90_000, reads=0),
        _say(3, "tool", json.dumps({"tool": "summarizeTask", "content": "…"})),
        _request(9, 3, tokens_in=10, out=10, writes=3_000, reads=0),
        _say(10, "text", "ok", conversationHistoryDeletedRange=[1, 2]),
    ], 1))
    records = {r.session: r for r in load_any(tmp_path) if r.started_at - T0 / 1000 > 5}
    roo_event = records[str(T0)].extra["events"]
    assert [(e["kind"], e["trigger"], e["pre_tokens"]) for e in roo_event] == [("compaction", "condense", 90_010)]
    assert records[str(T0)].extra["writer"] == "Roo Code"
    assert [e["trigger"] for e in records[str(T0 + 1)].extra["events"]] == ["condense"]


def test_a_roo_code_task_is_advised_in_roo_codes_settings(cli, tmp_path):
    """Roo Code writes Cline's task folders under its own extension folder: its misses are advised in its own
    knobs (modes, condensing), not Cline's. A 10-minute pause past the 5-minute lifetime: the second request
    writes the 20,000 tokens again."""
    tasks = tmp_path / "globalStorage" / "rooveterinaryinc.roo-cline" / "tasks"
    _write(tasks / str(T0), [
        _say(0, "text", "refactor the parser"),
        _request(1, -1, tokens_in=10, out=10, writes=20_000, reads=0, apiProtocol="anthropic"),
        _say(3, "text", "done"),
        _request(603, 1, tokens_in=10, out=10, writes=20_100, reads=0, apiProtocol="anthropic"),
    ])
    data = json.loads(cli("report", tasks, "--json").stdout)
    (cause,) = data["causes"]
    assert cause["kind"] == "ttl_expired"
    assert "Roo Code" in cause["what_to_do"] and "Cline" not in cause["what_to_do"]


def test_a_subagent_batchs_usage_is_one_summed_record_and_the_import_says_so(cli, storage):
    folder = next(storage.rglob("ui_messages.json"))
    entries = json.loads(folder.read_text())
    entries.append(_say(40, "subagent_usage", json.dumps({"source": "subagents", "tokensIn": 30, "tokensOut": 400,
                                                          "cacheWrites": 9_000, "cacheReads": 27_000, "cost": 0.04})))
    folder.write_text(json.dumps(entries))
    records = list(load_any(storage))
    sums = {r.agent: r.response["usage"] for r in records if r.extra.get("process_total")}
    assert sums["subagents"] == {"input_tokens": 30, "cache_read_input_tokens": 27_000,
                                 "cache_creation_input_tokens": 9_000, "output_tokens": 400}
    assert set(sums) == {"subagents", "deleted-requests"}
    said = cli("usage", storage).output
    assert "2 records each sum requests a Cline task logged together" in said and "Copilot" not in said


def test_claude_through_clines_gateway_wrote_what_it_logged_as_input(tmp_path):
    """Cline's own provider (and OpenRouter's handler) logged cacheWrites 0 in the releases a public task comes
    from, while Claude wrote the prompt Cline marks: each Sonnet 4.5 request's logged cost is its tokensIn at the
    5-minute write rate ($3.75 per million: 50,868 in, 614 out -> $0.1999575). Such input is read as written; a
    model that is not Claude through the same gateway keeps its input; a task that logs writes is read as is."""
    gateway = {"providerId": "cline", "modelId": "anthropic/claude-sonnet-4.5", "mode": "act"}
    grok = {"providerId": "cline", "modelId": "x-ai/grok-code-fast-1", "mode": "act"}
    _write(tmp_path / "a" / "tasks" / str(T0), [
        _say(0, "text", "yo"),
        _request(1, -1, tokens_in=11_495, out=16, writes=0, reads=512, model=grok),
        _request(9, 1, tokens_in=50_868, out=614, writes=0, reads=0, model=gateway),
        _request(30, 3, tokens_in=545, out=127, writes=0, reads=50_858, model=gateway),
    ])
    usage = [r.response["usage"] for r in load_any(tmp_path / "a")]
    assert usage[0]["input_tokens"] == 11_495 + 512  # grok: the gateway's input less its cached part, as logged
    assert [(u["input_tokens"], u["cache_creation_input_tokens"]) for u in usage[1:]] == [(0, 50_868), (0, 545)]
    _write(tmp_path / "b" / "tasks" / str(T0 + 5), _shifted([
        _say(0, "text", "yo"),
        _request(9, -1, tokens_in=12, out=614, writes=50_856, reads=0, model=gateway),
        _request(30, 1, tokens_in=545, out=127, writes=0, reads=50_858, model=gateway),
    ], 5))
    usage = [r.response["usage"] for r in load_any(tmp_path / "b")]
    assert [(u["input_tokens"], u["cache_creation_input_tokens"]) for u in usage] == [(12, 50_856), (545, 0)]
