"""Every provider's and gateway's key shape (providers/key_shapes.toml) is scrubbed wherever kvprobe writes:
the trace (import, fix, capture), the HTML page, DuckDB.

Seen before: no pattern for xAI keys or bare gateway tokens, so a LiteLLM `error_str` and an OTel status
message wrote an xAI key into `.error` and `db load` copied it; `import` of a browser's HAR (which drops
Authorization, so there is no exact value to match) kept a key its 4xx body echoed; and identity fields
(session, agent, cwd, service, operation, Gemini's project_hash, a record id, the X-Kvprobe-Session header)
were never scrubbed at all.

The example keys are built here by hand from each shape as its source gives it (prefix, alphabet, length),
never by the code under test, and assembled from pieces so that no literal here looks like a live key.
"""
from __future__ import annotations

import datetime as dt
import json
import random
import re
import string
import tomllib

import duckdb
import orjson
import pytest

from conftest import ROOT
from kvprobe.capture.recorder import Exchange, Recorder
from kvprobe.secrets import redact_secrets, redact_text

ALNUM = string.ascii_letters + string.digits


def _draw(alphabet: str, n: int, seed: str) -> str:
    rng = random.Random(seed)
    body = "".join(rng.choice(alphabet) for _ in range(n - 1))
    return body + rng.choice(string.digits)  # (random keys hold digits; the xai row asks for one)


HEX = "0123456789abcdef"
URLSAFE = ALNUM + "-_"
XAI_KEY = "xai-" + _draw(ALNUM, 80, "xai")
# provider: (what it was seen in, the key), the shapes from the sources the table cites
KEYS = {
    "xai": XAI_KEY,
    "openrouter": "sk-or-v1-" + _draw(HEX, 64, "or"),
    "groq (trufflehog, 52)": "gsk_" + _draw(ALNUM, 52, "groq"),
    "groq (gitleaks, 48)": "gsk_" + _draw(ALNUM, 48, "groq48"),
    "together": "tgp_v1_" + _draw(URLSAFE, 43, "together"),
    "fireworks": "fw_" + _draw(ALNUM, 24, "fireworks"),
    "perplexity": "pplx-" + _draw(ALNUM, 48, "pplx"),
    "replicate": "r8_" + _draw(URLSAFE, 37, "r8"),
    "huggingface": "hf_" + _draw(string.ascii_letters, 33, "hf") + "Q",
    "google": "AIza" + _draw(URLSAFE, 35, "google"),
    "nvidia": "nvapi-" + _draw(URLSAFE, 64, "nv"),
    "cerebras": "csk-" + _draw(string.ascii_lowercase + string.digits, 48, "csk"),
    "langsmith": "lsv2_pt_" + _draw(HEX, 32, "ls") + "_" + _draw(HEX, 10, "ls2"),
    "litellm virtual key": "sk-" + _draw(URLSAFE, 22, "litellm"),
    "deepseek": "sk-" + _draw(HEX, 32, "deepseek"),
    "anthropic": "sk-ant-api03-" + _draw(URLSAFE, 93, "ant") + "AA",
    "bedrock long-term": "ABSK" + _draw(ALNUM + "+/", 120, "absk"),
    "google oauth (vertex)": "ya29." + _draw(URLSAFE, 60, "ya29"),
}
# keys with no shape of their own, in the context that names them
AZURE_KEY, MISTRAL_KEY, COHERE_KEY = _draw(HEX, 32, "azure"), _draw(ALNUM, 32, "mistral"), _draw(ALNUM, 40, "co")
NAMED = {
    "azure header": (f"api-key: {AZURE_KEY}", AZURE_KEY),
    "azure env": (f"AZURE_OPENAI_API_KEY={AZURE_KEY}", AZURE_KEY),
    "azure apim": (f"Ocp-Apim-Subscription-Key: {AZURE_KEY}", AZURE_KEY),
    "mistral env": (f"export MISTRAL_API_KEY={MISTRAL_KEY}", MISTRAL_KEY),
    "cohere env": (f"CO_API_KEY={COHERE_KEY}", COHERE_KEY),
    "json api_key": (json.dumps({"api_key": MISTRAL_KEY}), MISTRAL_KEY),
}
# what must stay as it is: model ids, file names, hashes and ids of the same length as a bare key
KEPT = ["model xai-grok-4-fast-reasoning", "x-ai/grok-4 via openrouter", "fw_config.yaml", "hf_hub_download()",
        "content hash " + _draw(HEX, 32, "hash"), "session 3f0c2a9e-8d4b-4f1a-9c7e-2b5d6a8e1f03",
        "scikit: sk-learn", "gsk_ too short", "r8_x", "csk-1", "pplx-api", "the key idea is caching"]


def test_the_table_is_dated_and_sourced():
    data = tomllib.loads((ROOT / "providers" / "key_shapes.toml").read_text())
    for row in data["shapes"] + [data["named"]]:
        assert row["source"].strip() and dt.date.fromisoformat(row["checked"]) <= dt.date.today()
    kinds = [row["kind"] for row in data["shapes"]]
    assert len(kinds) == len(set(kinds))
    for provider in ("xai", "openrouter", "groq", "together", "fireworks", "perplexity", "replicate",
                     "huggingface", "google", "anthropic", "openai"):
        assert provider in kinds


def test_every_shipped_pattern_compiles():
    # kvprobe compiles the shipped table's patterns when a text first holds their words, not when it loads
    # the table (a user's own table is compiled at once): a broken row would otherwise surface mid-run
    from kvprobe.secrets import _scrubber

    table = _scrubber("")
    rows = tomllib.loads((ROOT / "providers" / "key_shapes.toml").read_text())["shapes"]
    assert len(table.shapes) == len(rows) + 5  # and the five shapes of a value named as a credential
    for shape in table.shapes:
        assert isinstance(shape.pattern, re.Pattern), shape.kind


@pytest.mark.parametrize("name", KEYS)
def test_every_key_shape_is_scrubbed_in_error_text(name):
    key = KEYS[name]
    for text in (f"HTTP 401: Incorrect API key provided: {key}", f'{{"error": "bad key \'{key}\'"}}', key,
                 f"upstream 403 ({key}); retry"):
        out = redact_text(text)
        assert key not in out and key[:14] not in out and "[REDACTED:" in out, (name, out)
    assert redact_text(key) == redact_text(key)  # equal secrets, equal placeholders


def test_a_key_cut_short_in_a_message_is_still_scrubbed():
    for key in (XAI_KEY[:30], KEYS["groq (trufflehog, 52)"][:28], KEYS["perplexity"][:40]):
        assert key not in redact_text(f"invalid key {key}...")


@pytest.mark.parametrize("name", NAMED)
def test_shapeless_keys_are_scrubbed_where_they_are_named(name):
    text, key = NAMED[name]
    out = redact_text(text)
    assert key not in out and "[REDACTED:" in out


@pytest.mark.parametrize("text", KEPT)
def test_ordinary_text_is_left_alone(text):
    assert redact_text(text) == text


def _import(cli, tmp_path, name: str, doc: str):
    src = tmp_path / name
    src.write_text(doc)
    out = tmp_path / f"{name}.jsonl"
    done = cli("import", src, "-o", out)
    assert done.exit_code == 0, done.output
    return out


def _db_text(cli, tmp_path, trace) -> str:
    db = tmp_path / "k.duckdb"
    assert cli("db", "load", trace, "--db", db).exit_code == 0
    with duckdb.connect(str(db), read_only=True) as con:
        return "\n".join(str(row) for table in ("traces", "requests", "sessions")
                         for row in con.execute(f"SELECT * FROM {table}").fetchall())


def test_litellm_error_str_with_an_xai_key_never_reaches_the_trace_or_duckdb(cli, tmp_path):
    payload = {"id": "chatcmpl-x1", "call_type": "acompletion", "model": "xai/grok-4", "custom_llm_provider": "xai",
               "startTime": 1757498400, "endTime": 1757498401, "status": "failure",
               "error_str": f"litellm.AuthenticationError: XaiException - Incorrect API key provided: {XAI_KEY}",
               "response": {"usage": {"prompt_tokens": 10, "completion_tokens": 2}}}
    out = _import(cli, tmp_path, "litellm.jsonl", json.dumps(payload) + "\n")
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["error"].startswith("litellm.AuthenticationError: XaiException - Incorrect API key provided: "
                                      "[REDACTED:xai#")
    assert XAI_KEY not in out.read_text() and XAI_KEY[:16] not in _db_text(cli, tmp_path, out)


def _otel(status_message: str, **attrs: str) -> dict:
    attributes = {"gen_ai.system": "xai", "gen_ai.request.model": "grok-4", "gen_ai.usage.input_tokens": 10,
                  "gen_ai.usage.output_tokens": 2, "gen_ai.conversation.id": "conv-1", **attrs}
    span = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
            "name": "chat grok-4", "startTimeUnixNano": "1757498400000000000",
            "endTimeUnixNano": "1757498401000000000", "status": {"code": 2, "message": status_message},
            "attributes": [{"key": k, "value": {"intValue": v} if isinstance(v, int) else {"stringValue": v}}
                           for k, v in attributes.items()]}
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name",
                                                            "value": {"stringValue": "agent"}}]},
                               "scopeSpans": [{"spans": [span]}]}]}


def test_an_otel_status_message_with_an_xai_key_never_reaches_the_trace_or_duckdb(cli, tmp_path):
    doc = _otel(f"401 Unauthorized: invalid api key {XAI_KEY}")
    out = _import(cli, tmp_path, "spans.json", json.dumps(doc))
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["error"] == f"401 Unauthorized: invalid api key {redact_text(XAI_KEY)}"
    assert record["error"].endswith("]") and "[REDACTED:xai#" in record["error"]
    assert XAI_KEY not in out.read_text() and XAI_KEY[:16] not in _db_text(cli, tmp_path, out)


def test_a_browser_har_with_no_auth_header_has_its_echoed_key_scrubbed(cli, tmp_path):
    """A browser's HAR export drops Authorization: the key a 401 body echoes matches no exact value."""
    key = KEYS["groq (trufflehog, 52)"]
    body = {"error": {"message": f"Invalid API Key: {key}", "type": "invalid_request_error",
                      "code": "invalid_api_key"}}
    entry = {"startedDateTime": "2026-09-10T10:00:00.000Z", "time": 90,
             "request": {"method": "POST", "url": "https://api.groq.com/openai/v1/chat/completions",
                         "headers": [{"name": "content-type", "value": "application/json"}],
                         "postData": {"mimeType": "application/json", "text": json.dumps(
                             {"model": "llama-3.3-70b-versatile", "messages": [{"role": "user", "content": "hi"}]})}},
             "response": {"status": 401, "headers": [],
                          "content": {"mimeType": "application/json", "text": json.dumps(body)}}}
    out = _import(cli, tmp_path, "browser.har", json.dumps({"log": {"version": "1.2", "entries": [entry]}}))
    text = out.read_text()
    assert key not in text and key[:12] not in text and "[REDACTED:groq#" in text
    (record,) = [json.loads(line) for line in text.splitlines()]
    assert record["error"].startswith("HTTP 401")


SECRET_SESSION = "sess-" + KEYS["anthropic"]  # a key pasted where a session id goes (--session $KEY)


def test_identity_fields_are_scrubbed_in_traces_html_and_duckdb(cli, tmp_path):
    """A key in a foreign trace's session, agent, id and extra (cwd) never reaches what kvprobe writes."""
    usage = {"input_tokens": 1200, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
             "output_tokens": 5}
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "Fix it."}]}
    records = [{"kvprobe": 1, "id": f"req-{i}-{KEYS['openrouter']}", "provider": "anthropic",
                "started_at": f"2026-09-10T10:00:0{i}Z", "session": SECRET_SESSION,
                "agent": f"worker {XAI_KEY}", "cwd": f"/home/me/{KEYS['replicate']}/repo",
                "request": body, "response": {"usage": usage}} for i in range(2)]
    trace = tmp_path / "foreign.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    keys = [KEYS["anthropic"], XAI_KEY, KEYS["openrouter"], KEYS["replicate"]]
    assert cli("import", trace, "-o", tmp_path / "imported.jsonl").exit_code == 0
    assert cli("fix", trace, "-o", tmp_path / "fixed.jsonl").exit_code == 0
    assert cli("html", trace, "-o", tmp_path / "page.html").exit_code == 0
    written = "\n".join((tmp_path / f).read_text() for f in ("imported.jsonl", "fixed.jsonl", "page.html"))
    written += _db_text(cli, tmp_path, trace)
    for key in keys:
        assert key[:16] not in written
    imported = [json.loads(line) for line in (tmp_path / "imported.jsonl").read_text().splitlines()]
    assert imported[0]["session"] == "sess-" + redact_text(KEYS["anthropic"])
    assert imported[0]["agent"].startswith("worker [REDACTED:xai#") and "[REDACTED:replicate#" in imported[0]["cwd"]
    assert len({r["id"] for r in imported}) == 2  # still two requests, told apart


def test_the_session_header_is_scrubbed_when_capture_writes_it(tmp_path):
    rec = Recorder(tmp_path / "trace.jsonl")
    reply = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
             "stop_reason": "end_turn", "content": [{"type": "text", "text": "ok"}],
             "usage": {"input_tokens": 5, "output_tokens": 1}}
    body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    rec.record(Exchange("POST", "/v1/messages", {"x-kvprobe-session": XAI_KEY, "x-kvprobe-agent": KEYS["fireworks"]},
                        orjson.dumps(body), 1.0, status=200, response_headers={"content-type": "application/json"},
                        response_body=bytearray(orjson.dumps(reply))))
    rec.close()
    text = (tmp_path / "trace.jsonl").read_text()
    (record,) = [json.loads(line) for line in text.splitlines()]
    assert XAI_KEY not in text and KEYS["fireworks"] not in text
    assert record["session"] == redact_text(XAI_KEY) and record["agent"].startswith("[REDACTED:fireworks#")


def _mixtures(rng: random.Random, count: int) -> list[tuple[str, str]]:
    """Keys of every shape inside random text: quotes, JSON escapes, URLs, headers, newlines."""
    wraps = ["{}", "'{}'", '"{}"', "Bearer {}", "key={}&x=1", "https://h/?key={}", "({})", "<{}>", "{}\n",
             "\\n{}\\n", "token: {}", "`{}`", "[{}]", "{},{}"]
    filler = string.ascii_letters + string.digits + " .,:;!?-_/\n\t"
    out = []
    for _ in range(count):
        key = rng.choice(list(KEYS.values()))
        text = "".join(rng.choice(filler) for _ in range(rng.randint(0, 40)))
        # a key is a word of its own (glued to the letters around it, it is part of another word)
        text += rng.choice(" .,:;!?/\n\t\"'(=") + rng.choice(wraps).format(key, key) + rng.choice(" .,;!?)\n\t\"'&")
        text += "".join(rng.choice(filler) for _ in range(rng.randint(0, 40)))
        out.append((text, key))
    return out


@pytest.mark.slow
def test_fuzz_the_scrubbers_with_keys_in_random_text():
    """5,000 random texts around keys of every shape, through redact_text and redact_secrets (as a JSON
    value, the key in a value and in a key): no key survives, and scrubbing twice changes nothing."""
    rng = random.Random("key-shapes")
    cases = _mixtures(rng, 5000)
    for text, key in cases:
        once = redact_text(text)
        assert key not in once, (text, once)
        assert redact_text(once) == once
        doc = redact_secrets({"a": [text, {text: 1}]})
        assert key not in json.dumps(doc)
    # a key's alphabet around it must not glue it to a neighbour that hides it (the prefix is at a word start)
    assert all(re.search(r"\[REDACTED:[a-z-]+#[0-9a-f]{8}\]", redact_text(k)) for k in KEYS.values())


def test_duckdb_is_given_no_credential_in_any_text_cell(cli, tmp_path):
    """The one place every row is written scrubs them all: here a key in the trace's folder name (path)."""
    folder = tmp_path / f"run-{KEYS['nvidia']}"
    folder.mkdir()
    trace = folder / "t.jsonl"
    trace.write_text(json.dumps({"kvprobe": 1, "id": "r1", "provider": "anthropic",
                                 "request": {"model": "claude-sonnet-4-5", "max_tokens": 8,
                                             "messages": [{"role": "user", "content": "hi"}]},
                                 "response": {"usage": {"input_tokens": 5, "output_tokens": 1}}}) + "\n")
    text = _db_text(cli, tmp_path, trace)
    assert KEYS["nvidia"][:16] not in text and "run-[REDACTED:nvidia#" in text
