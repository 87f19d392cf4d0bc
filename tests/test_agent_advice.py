"""Advice in the knobs of the agent that wrote the log (providers/agents/*.toml, kvprobe.analysis.agent_advice).

Logs are written here in the agents' real formats (tests/agent_logs.py). Every price below is worked out by
hand from the usage the test writes and Claude Sonnet 4.5's list prices: input $3.00, 5m write $3.75, 1h write
$6.00, read $0.30 per million tokens (write multipliers 1.25 and 2, read 0.1)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from agent_logs import ClaudeTranscript, CodexRollout
from kvprobe.agents import advice_keys, profiles
from kvprobe.errors import CatalogError
from kvprobe.report import build_report

ROOT = Path(__file__).resolve().parent.parent


def _report(*paths):
    rep = build_report(list(paths), fixes=False)
    return rep, {r.sk.id: r for r in rep.results}


def _versioned(t: ClaudeTranscript, version: str) -> ClaudeTranscript:
    for line in t.lines:
        line["version"] = version
    return t


def test_a_1h_lifetime_that_pays_on_the_log_is_advised_with_its_price(tmp_path):
    s = ClaudeTranscript("p")
    s.turn(0, "p1", read=0, write=50_000)
    s.turn(600, "p2", read=0, write=50_000)  # 10 min later: the 5m entry expired, all 50,000 rebuilt
    s.turn(1_200, "p3", read=0, write=50_000)
    rep, by_id = _report(_versioned(s, "2.1.250").write(tmp_path / "p.jsonl"))
    [d] = by_id["p2"].diagnoses
    assert (d.kind, d.agent) == ("ttl_expired", "Claude Code")
    # 150,000 tokens written at 5m: at the 1h price +150,000 x $2.25/M = $0.3375; the two rebuilds (100,000
    # tokens) read instead: 100,000 x ($6.00 - $0.30)/M = $0.57 saved; net $0.2325
    assert d.advice.startswith("use ENABLE_PROMPT_CACHING_1H=1") and "promptCacheTtl" in d.advice
    assert "entries then live 1 hour, long enough for this 10m00s pause" in d.advice and "predates" not in d.advice
    assert "the 1 hour price on its 150,000 5m-written tokens adds $0.34" in d.advice
    assert "spares 2 rebuilds (100,000 tokens, after pauses under 1 hour), saving $0.57" in d.advice
    assert d.advice.endswith("it saves $0.23 net")
    assert "keep-alive" in d.api_advice  # the API's advice stays beside it, for SDK users
    [trade] = rep.to_json()["lifetime_trades"]
    assert (trade["agent"], trade["scope"], trade["written_tokens"], trade["rebuilds"], trade["rebuilt_tokens"]) == \
        ("Claude Code", "main", 150_000, 2, 100_000)
    # input-equivalents: 150,000 x (2 - 1.25) = 112,500 more; 100,000 x (2 - 0.1) = 190,000 saved
    assert (trade["extra_input_equivalent_tokens"], trade["saved_input_equivalent_tokens"],
            trade["net_input_equivalent_tokens"]) == (112_500.0, 190_000.0, 77_500.0)
    assert trade["extra_usd"] == pytest.approx(0.3375) and trade["saved_usd"] == pytest.approx(0.57)
    assert trade["net_usd"] == pytest.approx(0.2325)


def test_a_session_that_writes_1h_entries_is_not_told_to_choose_them(tmp_path):
    """Two sessions of one log: `p` writes 5m entries and pays for the 1h setting (as above); `h` already writes
    1h entries, and its entry expired after a 1h37m pause. Before, `h` was told "use ENABLE_PROMPT_CACHING_1H=1:
    entries then live 1 hour, long enough for this 42m16s pause" (37m16s past the hour, plus the 5m default):
    the setting it has, for a pause it did not take. It gets the agent's own advice for a long break."""
    s = ClaudeTranscript("p")
    s.turn(0, "p1", read=0, write=50_000)
    s.turn(600, "p2", read=0, write=50_000)
    s.turn(1_200, "p3", read=0, write=50_000)
    h = ClaudeTranscript("h")
    h.turn(0, "h1", read=0, write=40_000, ttl="1h")
    h.turn(5_820, "h2", read=0, write=40_000, ttl="1h")  # 1h37m later: past the hour
    _, by_id = _report(_versioned(s, "2.1.250").write(tmp_path / "p.jsonl"),
                       _versioned(h, "2.1.250").write(tmp_path / "h.jsonl"))
    [d] = by_id["h2"].diagnoses
    assert (d.kind, d.seconds_past) == ("ttl_expired", 5_820 - 3_600)
    assert d.advice.startswith("the entry expired during the pause: /clear or /compact before a long break")
    assert "ENABLE_PROMPT_CACHING_1H" not in d.advice and "pause;" not in d.advice
    assert by_id["p2"].diagnoses[0].advice.startswith("use ENABLE_PROMPT_CACHING_1H=1")  # still, where it pays


def test_a_1h_lifetime_that_does_not_pay_says_so_after_the_agents_own_advice(tmp_path):
    s = ClaudeTranscript("s")
    s.turn(0, "s1", read=0, write=10_000)
    s.turn(700, "s2", read=0, write=10_000)  # 11m40s later: 10,000 rebuilt
    q = ClaudeTranscript("q")  # another session that only writes: 60,000 more 5m-written tokens
    q.turn(0, "q1", read=0, write=60_000)
    _, by_id = _report(_versioned(s, "2.1.39").write(tmp_path / "s.jsonl"), q.write(tmp_path / "q.jsonl"))
    [d] = by_id["s2"].diagnoses
    # 80,000 written at 5m: +80,000 x $2.25/M = $0.18; one rebuild of 10,000 saves 10,000 x $5.70/M = $0.057
    assert d.advice.startswith("the entry expired during the pause: /clear or /compact before a long break")
    assert "Setting ENABLE_PROMPT_CACHING_1H=1" in d.advice and "long enough for this 11m40s pause" in d.advice
    assert "80,000 5m-written tokens adds $0.18" in d.advice and "spares 1 rebuild (10,000 tokens" in d.advice
    assert "saving $0.06: it costs $0.12 more than it saves, so it does not pay here" in d.advice
    # promptCacheTtl came with Claude Code 2.1.243; this log's client is 2.1.39
    assert "this log's Claude Code 2.1.39 predates promptCacheTtl" in d.advice


def test_a_subagents_expiry_names_the_subagent_setting(tmp_path):
    root = tmp_path / "projects" / "-home-me-app"
    main = ClaudeTranscript("m")
    main.turn(0, "m1", read=0, write=5_000)
    main.write(root / "m.jsonl")
    sub = ClaudeTranscript("m")
    sub.turn(10, "a1", read=0, write=40_000)
    sub.turn(610, "a2", read=0, write=40_000)
    sub.write(root / "m" / "subagents" / "agent-a7.jsonl")
    rep, by_id = _report(root)
    [d] = by_id["a2"].diagnoses
    assert "subagentPromptCacheTtl" in d.advice and "ENABLE_PROMPT_CACHING_1H" not in d.advice
    scopes = {t["scope"]: t for t in rep.to_json()["lifetime_trades"]}
    # the main conversation's 5,000 and the subagent's 80,000 written tokens are priced apart
    assert (scopes["main"]["written_tokens"], scopes["subagents"]["written_tokens"]) == (5_000, 80_000)
    assert (scopes["main"]["rebuilds"], scopes["subagents"]["rebuilds"]) == (0, 1)


def test_an_mcp_reconnect_is_advised_in_claude_codes_own_terms(tmp_path):
    s = ClaudeTranscript("t")
    s.turn(0, "t1", read=0, write=10_000)
    s.turn(10, "t2", read=10_000, write=1_000)
    s.command(15, "/mcp", "Reconnected to srv.")
    s.turn(20, "t3", read=3_000, write=8_500)
    _, by_id = _report(s.write(tmp_path / "t.jsonl"))
    [d] = by_id["t3"].diagnoses
    assert d.triggers == ["tools_changed"] and d.agent == "Claude Code"
    assert ".mcp.json" in d.advice and "claude mcp add" in d.advice
    assert d.api_advice.startswith("connect tool (MCP) servers before the session starts")


def test_a_model_switch_is_advised_with_slash_model(tmp_path):
    s = ClaudeTranscript("w")
    s.turn(0, "w1", read=0, write=10_000)
    s.turn(10, "w2", read=0, write=10_300, model="claude-haiku-4-5-20251001")
    _, by_id = _report(s.write(tmp_path / "w.jsonl"))
    [d] = by_id["w2"].diagnoses
    assert (d.kind, d.param) == ("params_changed", "model")
    assert d.advice.startswith("switch with /model between tasks") and "Bash tool" in d.advice


def test_a_codex_effort_change_is_advised_in_codexs_setting(tmp_path):
    x = CodexRollout("ce")
    x.context(0)
    x.start_turn(1)
    x.request(5, input_tokens=10_000, cached=0)
    x.context(6)
    x.request(10, input_tokens=11_000, cached=9_984)
    x.context(11, effort="medium")
    x.request(15, input_tokens=12_000, cached=0)  # read nothing of the 9,984 cached, after the effort change
    x.write(tmp_path / "codex")
    _, by_id = _report(tmp_path / "codex")
    [d] = by_id["ce#3"].diagnoses
    assert (d.kind, d.param, d.agent) == ("params_changed", "reasoning effort", "Codex")
    assert "model_reasoning_effort" in d.advice and "returning to one already used" in d.advice


def test_a_log_without_bodies_says_fixes_cannot_be_simulated_and_how_to_capture(cli, tmp_path):
    s = ClaudeTranscript("n")
    s.turn(0, "n1", read=0, write=10_000)
    s.turn(700, "n2", read=0, write=10_000)
    log = s.write(tmp_path / "n.jsonl")
    text = cli("report", log, "--what-if")
    assert text.exit_code == 0, text.output
    assert "Fixes: no request bodies: fixes cannot be simulated; capture them to price fixes: `kvprobe capture -- " \
        "claude …` (Claude Code)." in text.stdout and "none pays" not in text.stdout
    data = json.loads(cli("report", log, "--what-if", "--json").stdout)
    assert data["fixes"] == [] and data["fixes_note"].startswith("no request bodies: fixes cannot be simulated")
    schema = json.loads(cli("schema", "report").stdout)  # the new keys are described
    assert not list(Draft202012Validator(schema).iter_errors(data))
    assert data["lifetime_trades"][0]["rebuilds"] == 1 and data["misses"][0]["what_to_do"].startswith("use ")


def test_a_trace_with_bodies_keeps_the_apis_advice(cli):
    data = json.loads(cli("report", ROOT / "traces" / "sample_session.jsonl", "--json").stdout)
    diagnoses = [d for r in data["requests"] for d in r["diagnoses"]]
    assert diagnoses and all("agent" not in d and "api_advice" not in d for d in diagnoses)
    assert data["lifetime_trades"] == []


def test_every_agent_log_kvprobe_reads_has_a_profile():
    assert set(profiles()) >= {"claude_code", "codex", "gemini_cli", "qwen_code", "opencode", "kimi_cli",
                               "copilot_cli"}
    for profile in profiles().values():  # how to capture it, or why it cannot be
        assert (profile.capture or "").startswith("kvprobe capture ") or profile.capture_note, profile.path
        assert profile.advice, profile.path
        assert all(a.source and a.checked for a in profile.advice.values()), profile.path


@pytest.mark.parametrize("kind", ["prefix_changed", "params_changed", "ttl_expired", "unexplained", "routing",
                                  "stale_read"])
def test_every_cause_a_usage_only_log_can_carry_is_advised_in_each_agents_words(kind):
    for profile in profiles().values():
        assert profile.advise(advice_keys(kind)) is not None, (profile.name, kind)


def test_a_platforms_routing_is_named_only_for_requests_it_served():
    """A first-party Claude Code miss nothing explains was told "served through Bedrock or Vertex, requests can
    reach another region's cache"; that clause is for the requests those platforms served, in their settings."""
    claude = profiles()["claude_code"]
    first_party = claude.advise(advice_keys("unexplained")).text
    assert "Bedrock" not in first_party and "Vertex" not in first_party and "/usage" in first_party
    replica = claude.advise(advice_keys("stale_read")).text
    assert "Bedrock" not in replica and "Vertex" not in replica and "subagents" in replica
    assert "ANTHROPIC_MODEL" in claude.advise(advice_keys("stale_read", platform="bedrock")).text
    assert "ANTHROPIC_MODEL" in claude.advise(advice_keys("unexplained", platform="bedrock")).text
    assert "CLOUD_ML_REGION" in claude.advise(advice_keys("unexplained", platform="vertex")).text


def _providers_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "providers"
    shutil.copytree(ROOT / "providers", copy)
    return copy


def test_a_profile_without_a_capture_command_is_refused_naming_file_and_field(tmp_path):
    copy = _providers_copy(tmp_path)
    bad = copy / "agents" / "qwen_code.toml"
    bad.write_text(bad.read_text().replace('capture = "kvprobe capture -- qwen"\n', ""))
    with pytest.raises(CatalogError, match=r"qwen_code\.toml: field 'capture' \(the command that records the "
                                           r"agent's bodies\) or 'capture_note' \(why none can\) is required"):
        profiles(copy)


def test_two_profiles_claiming_one_log_format_are_refused(tmp_path):
    copy = _providers_copy(tmp_path)
    (copy / "agents" / "zz_other.toml").write_text((copy / "agents" / "codex.toml").read_text())
    with pytest.raises(CatalogError, match=r"zz_other\.toml: format 'codex' is already Codex's"):
        profiles(copy)


def test_watch_advises_in_the_agents_knobs_as_the_log_grows(cli, tmp_path):
    s = ClaudeTranscript("v")
    s.turn(0, "v1", read=0, write=10_000)
    s.turn(10, "v2", read=10_000, write=1_000)
    s.command(15, "/mcp", "Reconnected to srv.")
    s.turn(20, "v3", read=3_000, write=8_500)
    res = cli("watch", s.write(tmp_path / "v.jsonl"), "--once")
    assert res.exit_code == 0, res.output
    shown = " ".join(res.stdout.split())  # (a line wraps at the terminal's width)
    assert "miss v3" in shown and "what to do: connect MCP servers before the session starts (.mcp.json" in shown
    from kvprobe.schemas import load_schema

    lines = [json.loads(line) for line in cli("watch", tmp_path / "v.jsonl", "--once", "--json").stdout.splitlines()]
    diagnoses = [d for line in lines for d in (line.get("diagnoses") or [])]
    assert [d["agent"] for d in diagnoses] == ["Claude Code"] and diagnoses[0]["api_advice"]
    for line in lines:
        Draft202012Validator(load_schema("watch")).validate(line)


def test_providers_check_names_agent_advice_checked_too_long_ago(cli, tmp_path, monkeypatch):
    copy = _providers_copy(tmp_path)
    profile = copy / "agents" / "claude_code.toml"
    text = profile.read_text()
    head, tail = text.split("[advice.ttl_expired]", 1)
    profile.write_text(head + "[advice.ttl_expired]" + tail.replace('checked = "2026-12-01"', 'checked = "2025-01-01"', 1))
    monkeypatch.setenv("KVPROBE_PROVIDERS_DIR", str(copy))
    res = cli("providers", "--check", "--as-of", "2026-12-06", "--days", "400", "--json")
    assert res.exit_code == 1
    # 2025-01-01 -> 2026-12-06: 365 + 339 days; every other date in the copy is within 400 days
    assert json.loads(res.stdout)["stale_rules"] == [
        {"file": "agents/claude_code.toml", "scope": "agent / Claude Code", "rule": "advice.ttl_expired",
         "checked": "2025-01-01", "age_days": 704}]


def test_a_cause_claude_code_logged_itself_is_advised_in_its_knobs(tmp_path):
    s = ClaudeTranscript("d")
    s.turn(0, "d1", read=0, write=20_000)
    s.turn(10, "d2", read=4_000, write=16_500)
    # the API's own diagnosis, as Claude Code writes it into the transcript's assistant line
    s.lines[-1]["message"]["diagnostics"] = {"cache_miss_reason": {"type": "system_changed",
                                                                   "cache_missed_input_tokens": 16_000}}
    _, by_id = _report(s.write(tmp_path / "d.jsonl"))
    d = by_id["d2"].diagnoses[0]
    assert (d.kind, d.path, d.inferred, d.agent) == ("prefix_changed", "system", False, "Claude Code")
    assert d.advice.startswith("the system prompt or project context changed: CLAUDE.md and output-style edits "
                               "take effect after /clear or /compact")


def _captured(path: Path, client: str | None) -> Path:
    """Two captured requests whose system prompt changed (a CLAUDE.md edit), as `kvprobe capture` records them
    (bodies, no usage: the simulation predicts the reads)."""
    from conftest import anthropic_body

    first = anthropic_body()
    second = anthropic_body()
    second["system"][0]["text"] = "# CLAUDE.md: use tabs.\n" + second["system"][0]["text"]
    lines = []
    for i, (t, body) in enumerate((("2026-12-01T10:00:00Z", first), ("2026-12-01T10:00:30Z", second))):
        record = {"kvprobe": 1, "id": f"c{i + 1}", "session": "s", "provider": "anthropic",
                  "endpoint": "/v1/messages", "started_at": t, "request": body}
        if client:
            record["client"] = client
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_captured_claude_code_trace_is_advised_in_claude_codes_knobs(tmp_path):
    rep, by_id = _report(_captured(tmp_path / "claude.jsonl", "claude"))
    d = by_id["c2"].diagnoses[0]
    assert (d.kind, d.path, d.agent) == ("prefix_changed", "system[0]", "Claude Code")
    assert "CLAUDE.md and output-style edits take effect after /clear or /compact" in d.advice
    sdk, by_id = _report(_captured(tmp_path / "sdk.jsonl", None))  # the same calls from an SDK: the API's words
    from kvprobe.analysis.diagnosis import advice_for
    assert by_id["c2"].diagnoses[0].agent is None and "/clear" not in advice_for(by_id["c2"].diagnoses[0])


def test_capture_records_the_program_it_ran(fake, tmp_path):
    import sys

    from test_capture_cli import CHILD, _kvprobe
    from kvprobe.trace import read_trace

    out, script = tmp_path / "trace.jsonl", tmp_path / "agent.py"
    script.write_text(CHILD)
    done = _kvprobe("capture", "-o", str(out), "--anthropic-upstream", fake.url, "--openai-upstream",
                    fake.url + "/v1", "--", sys.executable, str(script), "0")
    assert done.returncode == 0, done.stderr
    assert {r.extra.get("client") for r in read_trace(out)} == {Path(sys.executable).name}


def test_capture_names_the_agent_a_launcher_runs(fake, tmp_path):
    """`kvprobe capture -- bash -c "claude …"` (CI scripts, npx, env wrappers) recorded the client `bash`, and no
    advice named Claude Code's settings; the agent behind the launcher is the client."""
    import sys

    from test_capture_cli import CHILD, _kvprobe
    from kvprobe.agents import client_of
    from kvprobe.trace import read_trace

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text(f"#!{sys.executable}\n{CHILD}")  # a program named as Claude Code's is
    (bin_dir / "claude").chmod(0o755)
    out = tmp_path / "trace.jsonl"
    done = _kvprobe("capture", "-o", str(out), "--anthropic-upstream", fake.url, "--openai-upstream",
                    fake.url + "/v1", "--", "bash", "-c", f"{bin_dir / 'claude'} 0")
    assert done.returncode == 0, done.stderr
    assert {r.extra.get("client") for r in read_trace(out)} == {"claude"}
    assert client_of(["npx", "-y", "@anthropic-ai/claude-code@2.1.332", "-p", "hi"]) == "claude"
    assert client_of(["env", "CI=1", "npx", "opencode-ai@1.18.33", "run", "hi"]) == "opencode"
    assert client_of(["bash", "run-agent.sh"]) == "bash"  # nothing names an agent: the program itself


def test_a_claude_code_log_that_caches_nothing_is_told_which_setting_does_that(tmp_path):
    s = ClaudeTranscript("u")
    for i in range(4):  # 20,000-token prompts, far over Sonnet 4.5's 1,024 minimum, neither read nor written
        s.turn(10 * i, f"u{i}", read=0, write=0, fresh=20_000 + 500 * i)
    rep, by_id = _report(s.write(tmp_path / "u.jsonl"))
    assert all(not r.diagnoses for r in by_id.values())  # nothing was cached, so nothing was missed
    # 20,000 + 20,500 + 21,000 + 21,500 input tokens
    assert ("4 of 4 Claude Code requests to claude-sonnet-4-5 (83,000 input tokens), each long enough to cache, "
            "read and wrote no cache: prompt caching looks switched off: DISABLE_PROMPT_CACHING") in " ".join(rep.notes)
    ok = ClaudeTranscript("k")
    ok.turn(0, "k1", read=0, write=20_000)
    ok.turn(10, "k2", read=20_000, write=500)
    rep, _ = _report(ok.write(tmp_path / "k.jsonl"))
    assert not any("switched off" in n for n in rep.notes)


def test_a_trace_that_names_its_agent_is_the_main_conversation_not_a_subagent(tmp_path):
    """`kvprobe capture --agent claude-code` names every request's agent `claude-code`: its expiries are the main
    conversation's (promptCacheTtl), not subagents' (subagentPromptCacheTtl); only the importers' subagent
    streams (agent-<id>, sidechain, subagent-<id>) are subagents."""
    from kvprobe.importers import load_any
    from kvprobe.trace import write_trace

    s = ClaudeTranscript("p")
    s.turn(0, "p1", read=0, write=50_000)
    s.turn(600, "p2", read=0, write=50_000)
    records = list(load_any(_versioned(s, "2.1.250").write(tmp_path / "p.jsonl")))
    for r in records:
        r.agent = "claude-code"
    write_trace(tmp_path / "named.jsonl", records)
    rep, _ = _report(tmp_path / "named.jsonl")
    assert [t["scope"] for t in rep.to_json()["lifetime_trades"]] == ["main"]


def test_an_agent_profile_is_read_again_when_it_changes_and_a_broken_one_is_named(tmp_path, monkeypatch):
    """Profiles are kept parsed between runs (kvprobe.toml_cache): an edit is seen on the next run, and a profile
    that is not TOML is an error naming its file (exit 2), not a stale answer from the cache."""
    import os
    import subprocess
    import sys

    providers = tmp_path / "providers"
    shutil.copytree(Path(__file__).resolve().parent.parent / "providers", providers)
    env = {**os.environ, "KVPROBE_PROVIDERS_DIR": str(providers), "KVPROBE_CACHE_DIR": str(tmp_path / "cache")}
    profile = providers / "agents" / "claude_code.toml"
    trace = tmp_path / "off.jsonl"  # two long Claude Code requests its log says went with caching off
    trace.write_text("".join(json.dumps({
        "id": f"r{i}", "session": "s", "provider": "anthropic", "started_at": 1_770_000_000 + 10 * i,
        "source_format": "claude_code", "cache_requested": "off",
        "response": {"model": "claude-sonnet-4-5", "usage": {"input_tokens": 20_000, "output_tokens": 5}}}) + "\n"
        for i in range(2)))

    def notes() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kvprobe", "report", str(trace), "--json", "--no-fixes"],
                              capture_output=True, text=True, timeout=120, env=env)

    first = notes()
    assert first.returncode == 0, first.stderr
    assert "DISABLE_PROMPT_CACHING" in " ".join(json.loads(first.stdout)["notes"])
    profile.write_text(profile.read_text().replace("switches prompt caching off for every request",
                                                   "turns caching off (edited)"))
    edited = notes()
    assert "turns caching off (edited)" in " ".join(json.loads(edited.stdout)["notes"])
    profile.write_text(profile.read_text() + "\n[advice.broken\n")
    broken = notes()
    assert broken.returncode == 2 and broken.stdout == ""
    assert f"{profile}: cannot read the agent profile" in broken.stderr
