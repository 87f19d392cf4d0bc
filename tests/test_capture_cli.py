"""`kvprobe capture` end to end (a real child process), and what --redact / --hash-only keep out of traces."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import anthropic
import pytest

import kvprobe.capture
from conftest import ROOT, anthropic_body
from kvprobe.trace import read_trace

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CHILD = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("ignore")
    import anthropic, openai
    a = anthropic.Anthropic(api_key="sk-ant-api03-CHILDSECRET-0123456789", max_retries=0)
    a.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    o = openai.OpenAI(api_key="sk-proj-CHILDSECRET-0123456789", max_retries=0)
    list(o.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True,
                                   stream_options={"include_usage": True}))
    sys.exit(int(sys.argv[1]))
""")


def _kvprobe(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvprobe", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, **kw)


def test_capture_runs_the_command_against_the_proxy_and_passes_its_exit_code(fake, tmp_path):
    out = tmp_path / "trace.jsonl"
    script = tmp_path / "agent.py"
    script.write_text(CHILD)
    done = _kvprobe("capture", "-o", str(out), "--session", "task-1", "--anthropic-upstream", fake.url,
                    "--openai-upstream", fake.url + "/v1", "--json", "--", sys.executable, str(script), "3")
    assert done.returncode == 3, done.stderr
    summary = json.loads(done.stdout)
    assert summary["recorded"] == 2 and summary["exit_code"] == 3
    records = list(read_trace(out))
    assert [r.provider for r in records] == ["anthropic", "openai"]
    assert all(r.session == "task-1" for r in records)
    assert records[1].usage["prompt_tokens_details"]["cached_tokens"] == 2048
    assert "CHILDSECRET" not in out.read_text()


def test_capture_without_a_command_is_a_usage_error(cli):
    result = cli("capture")
    assert result.exit_code == 2 and "no command given" in result.output


def test_capture_rejects_a_bad_upstream_url(cli, tmp_path):
    result = cli("capture", "-o", tmp_path / "t.jsonl", "--anthropic-upstream", "ftp://x", "--", "true")
    assert result.exit_code == 2 and "--anthropic-upstream" in result.output


def test_capture_serve_records_until_interrupted(fake, tmp_path):
    out = tmp_path / "trace.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "kvprobe", "capture", "serve", "--out", str(out), "--json",
                             "--anthropic-upstream", fake.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["url"].startswith("http://127.0.0.1:")
        client = anthropic.Anthropic(api_key="k", base_url=ready["env"]["ANTHROPIC_BASE_URL"], max_retries=0)
        client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["recorded"] == 1
    (record,) = read_trace(out)
    assert record.usage["cache_read_input_tokens"] == 2048


def test_redact_scrubs_secrets_inside_bodies(fake, tmp_path):
    out = tmp_path / "trace.jsonl"
    secret = "sk-ant-api03-PASTEDINTOPROMPT0123456789abcdef"
    client = anthropic.Anthropic(api_key="k", base_url=fake.url, max_retries=0,
                                 http_client=kvprobe.capture.http_client(out=out, redact=True))
    prompt = (f"my key is {secret}, aws AKIAIOSFODNN7EXAMPLE, "
              "header Authorization: Bearer abcdefghijklmnop1234567890 and password=hunter2hunter2")
    client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": prompt}])
    text = out.read_text()
    for leaked in (secret, "AKIAIOSFODNN7EXAMPLE", "abcdefghijklmnop1234567890", "hunter2hunter2"):
        assert leaked not in text
    (record,) = read_trace(out)
    content = record.request["messages"][0]["content"]
    assert content.startswith("my key is [REDACTED:anthropic#") and "password=[REDACTED:credential#" in content


def _hash_only_pair(fake, tmp_path, hash_only=True):
    out = tmp_path / ("trace.jsonl" if hash_only else "clear.jsonl")
    http = kvprobe.capture.http_client(out=out, hash_only=hash_only)
    a = anthropic_body()
    b = anthropic_body()
    b["messages"][2]["content"][0]["content"] = "def login(user): check(user)"
    with http:
        for body in (a, b):
            http.post(fake.url + "/v1/messages", json=body).raise_for_status()
    return out, a, b


def test_hash_only_keeps_text_out_but_diff_still_finds_the_change(fake, tmp_path, cli):
    out, a, b = _hash_only_pair(fake, tmp_path)
    text = out.read_text()
    assert "careful coding agent" not in text and "login" not in text and "Fix the" not in text
    first, second = read_trace(out)
    assert first.request["system"][0]["cache_control"] == {"type": "ephemeral"}  # structure survives
    assert first.request["tools"][0]["name"] == "read_file"
    clear = list(read_trace(_hash_only_pair(fake, tmp_path, hash_only=False)[0]))
    # trace records are diffed on the sizes their logged usage settles: compare with the same capture in clear
    plain = cli("diff", f"{clear[0].source}#{clear[0].id}", f"{clear[1].source}#{clear[1].id}", "--json")
    hashed = cli("diff", f"{out}#{first.id}", f"{out}#{second.id}", "--json")
    assert plain.exit_code == hashed.exit_code == 0, hashed.output
    p, h = json.loads(plain.output), json.loads(hashed.output)
    assert h["first_change"]["path"] == p["first_change"]["path"] == "messages[2].content[0]"
    # token positions survive (the block starts where it did; kvprobe cannot see inside a hashed block)
    assert abs(h["first_change"]["token_position"] - p["first_change"]["token_position"]) <= 16
    assert h["predicted"]["cache_read_tokens"] == p["predicted"]["cache_read_tokens"]


def test_report_and_what_if_give_the_same_answers_on_a_hash_only_trace(fake, tmp_path, cli):
    outputs = {}
    for hashed in (False, True):
        out = tmp_path / f"trace-{hashed}.jsonl"
        body = anthropic_body()
        with kvprobe.capture.http_client(out=out, hash_only=hashed, session="s") as http:
            for i in range(3):
                body["messages"].append({"role": "assistant", "content": [{"type": "text", "text": f"step {i} " * 40}]})
                body["messages"].append({"role": "user", "content": [
                    {"type": "text", "text": f"go on {i}", "cache_control": {"type": "ephemeral"}}]})
                http.post(fake.url + "/v1/messages", json=body).raise_for_status()
        result = cli("report", out, "--json")
        assert result.exit_code == 0, result.output
        outputs[hashed] = json.loads(result.output)
    plain, hashed = outputs[False], outputs[True]
    assert [r["predicted"] for r in hashed["requests"]] == [r["predicted"] for r in plain["requests"]]
    assert hashed["with_all_fixes"] == plain["with_all_fixes"]
