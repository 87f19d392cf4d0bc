"""Every credential shape kvprobe promises to scrub (kvprobe/secrets.py's docstring: provider API keys, bearer
tokens, cloud and VCS credentials, private keys, any value named as a credential), written from each issuer's
published format, scrubbed by `redact_text` at the edge of its rule and by every writer that puts text from a
provider or a log on disk: `capture`, `import`, `fix`, `db load` (DuckDB), and `report`/`usage` output.

The values are made here, in the published shapes, and are no one's credentials.
"""
from __future__ import annotations

import json
import string

import duckdb
import orjson
import pytest

from kvprobe.capture.recorder import Exchange, Recorder
from kvprobe.secrets import redact_secrets, redact_text

ALNUM = string.ascii_letters + string.digits


def chars(n: int, alphabet: str = ALNUM, seed: int = 7) -> str:
    """n characters of the alphabet, spread so no run repeats (a stand-in for a random key)."""
    return "".join(alphabet[(i * 31 + seed * 17 + i * i) % len(alphabet)] for i in range(n))


def pem(kind: str, lines: int = 6) -> str:
    body = "\n".join(chars(64, ALNUM + "+/", seed=s) for s in range(lines))
    return f"-----BEGIN {kind}-----\n{body}\n{chars(20, ALNUM, 99)}==\n-----END {kind}-----"


# (shape, secret, what must survive of the text around it): realistic lengths, one per published format.
SHAPES = [
    ("anthropic key", "sk-ant-api03-" + chars(93, ALNUM + "-_"), ""),
    ("anthropic oauth token", "sk-ant-oat01-" + chars(95, ALNUM + "-_"), ""),
    ("openai project key", "sk-proj-" + chars(156, ALNUM + "-_"), ""),
    ("openai service-account key", "sk-svcacct-" + chars(74, ALNUM + "-_"), ""),
    ("openai legacy key", "sk-" + chars(48), ""),
    ("aws access key id", "AKIA" + chars(16, string.ascii_uppercase + string.digits), ""),
    ("aws temporary key id", "ASIA" + chars(16, string.ascii_uppercase + string.digits, 3), ""),
    ("aws secret access key", "aws_secret_access_key = " + chars(40, ALNUM + "/+"), "aws_secret_access_key = "),
    ("aws session token", "AWS_SESSION_TOKEN=" + chars(120, ALNUM + "/+"), "AWS_SESSION_TOKEN="),
    ("google api key", "AIza" + chars(35, ALNUM + "-_"), ""),
    ("github classic token", "ghp_" + chars(36), ""),
    ("github oauth token", "gho_" + chars(36, seed=1), ""),
    ("github user-to-server token", "ghu_" + chars(36, seed=2), ""),
    ("github server-to-server token", "ghs_" + chars(36, seed=3), ""),
    ("github refresh token", "ghr_" + chars(76, seed=4), ""),
    ("github fine-grained token", "github_pat_" + chars(22) + "_" + chars(59, seed=5), ""),
    ("slack bot token", "xoxb-" + chars(12, string.digits) + "-" + chars(13, string.digits, 2) + "-" + chars(24), ""),
    ("slack user token", "xoxp-" + chars(12, string.digits) + "-" + chars(12, string.digits, 3) + "-" + chars(32), ""),
    ("stripe live secret key", "sk_live_" + chars(99), ""),
    ("stripe test secret key", "sk_test_" + chars(24), ""),
    ("stripe restricted key", "rk_live_" + chars(99, seed=2), ""),
    ("rsa private key", pem("RSA PRIVATE KEY"), ""),
    ("pkcs8 private key", pem("PRIVATE KEY"), ""),
    ("openssh private key", pem("OPENSSH PRIVATE KEY", 10), ""),
    ("ec private key", pem("EC PRIVATE KEY", 3), ""),
    ("jwt", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLTQyIiwiaWF0IjoxNzkwMDAwMDAwfQ."
            + chars(43, ALNUM + "-_"), ""),
    ("bearer token", "Bearer " + chars(32, ALNUM + "-._~+/"), "Bearer "),
    ("api key header", "x-api-key: " + chars(24), "x-api-key: "),
    ("google key header", "x-goog-api-key: " + chars(24, seed=2), "x-goog-api-key: "),
    ("authorization header", "Authorization: Basic " + chars(28, ALNUM + "+/"), "Authorization: Basic "),
    ("cookie", "Cookie: session=" + chars(30), "Cookie: "),
    ("key query parameter", "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?key="
                            + chars(30, seed=6), "generateContent?key="),
    ("password", "password=" + chars(14, seed=8), "password="),
    ("api_key field", '"api_key": "' + chars(26, seed=9) + '"', '"api_key": "'),
]
IDS = [s for s, _, _ in SHAPES]


def secret_part(secret: str, kept: str) -> str:
    """The part that must not survive: the value after the name that is kept."""
    return secret[len(kept):].strip('"')


def assert_scrubbed(text: str, secret: str, kept: str) -> None:
    value = secret_part(secret, kept)
    for piece in value.splitlines():  # each line of a private key on its own: none may survive
        if len(piece) >= 8:
            assert piece not in text, f"{piece[:24]}... survived in {text[:200]!r}"
    assert "[REDACTED:" in text and kept in text


@pytest.mark.parametrize("shape, secret, kept", SHAPES, ids=IDS)
def test_redact_text_scrubs_every_shape_and_keeps_the_text_around_it(shape, secret, kept):
    text = f"upstream said: {secret} (request 7)"
    out = redact_text(text)
    assert_scrubbed(out, secret, kept)
    assert out.startswith("upstream said: ") and out.endswith(" (request 7)")
    assert redact_text(text) == out  # equal secrets, equal placeholders: cache identity is kept


def test_different_secrets_get_different_placeholders_and_json_keys_are_scrubbed_too():
    a, b = "ghp_" + chars(36, seed=1), "ghp_" + chars(36, seed=2)
    assert redact_text(a) != redact_text(b)
    value = redact_secrets({a: [b, {"k": f"Bearer {b}"}], "n": 3})
    dumped = json.dumps(value)
    assert a not in dumped and b not in dumped and value["n"] == 3


# --- each rule at its edge: the shortest value the rule takes, one shorter, and one longer -------------------

def _bearer(n: int) -> str:
    return "sent Bearer " + chars(n)


EDGES = [
    # (rule, shortest match, one shorter, longer), the lengths from kvprobe/secrets.py's rules
    ("bearer: 16 or more", _bearer(16), _bearer(15), _bearer(200)),
    ("google: AIza + exactly 35", "AIza" + chars(35), "AIza" + chars(34), None),
    ("github: 30 or more after the prefix", "ghs_" + chars(30), "ghs_" + chars(29), "ghs_" + chars(255)),
    ("github fine-grained: 40 or more", "github_pat_" + chars(40), "github_pat_" + chars(39), "github_pat_" + chars(93)),
    ("slack: 10 or more", "xoxa-" + chars(10), "xoxa-" + chars(9), "xoxa-" + chars(60)),
    ("stripe: 16 or more", "rk_test_" + chars(16), "rk_test_" + chars(15), "rk_test_" + chars(99)),
    ("aws key id: exactly 16 after the prefix", "AROA" + chars(16, string.ascii_uppercase), "AROA"
     + chars(15, string.ascii_uppercase), None),
    ("aws secret: 20 or more", "aws_session_token: " + chars(20), None, "aws_session_token: " + chars(400)),
    ("jwt: three parts of 8 or more", "eyJ" + chars(8) + ".eyJ" + chars(8) + "." + chars(8),
     "eyJ" + chars(8) + ".eyJ" + chars(8) + "." + chars(7), None),
    ("anthropic: 16 or more", "sk-ant-" + chars(16, string.ascii_letters), None, "sk-ant-" + chars(300)),
]


@pytest.mark.parametrize("rule, at, below, above", EDGES, ids=[e[0] for e in EDGES])
def test_each_rule_at_its_edge(rule, at, below, above):
    for value in (at, above):
        if value is not None:
            out = redact_text(f"x {value} y")
            assert "[REDACTED:" in out and value[-8:] not in out, (rule, value)
    if below is not None:
        assert redact_text(f"x {below} y") == f"x {below} y", rule  # ordinary text is left as it is


def test_a_private_key_spanning_lines_goes_whole_and_a_public_key_stays():
    key = pem("RSA PRIVATE KEY", 25)
    out = redact_text(f"key file:\n{key}\nend of file")
    assert "BEGIN" not in out and "END RSA" not in out and out.startswith("key file:\n[REDACTED:")
    assert out.endswith("]\nend of file")
    public = pem("PUBLIC KEY").replace("PRIVATE", "PUBLIC")
    assert redact_text(public) == public


NEAR_MISSES = ["Bearer of bad news", "the skeleton key=", "a github_pat_ is a token", "AIza",
               "ghp_ tokens start with ghp_", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
               "sk-learn is a library", "eyJ alone", "xoxb-", "AKIA is a prefix"]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_ordinary_text_that_looks_like_a_prefix_is_left_alone(text):
    assert redact_text(text) == text


# --- every writer ----------------------------------------------------------------------------------------------

BODY = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "Fix the bug."}]}


def _reply(text: str) -> dict:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "stop_reason": "end_turn", "content": [{"type": "text", "text": text}],
            "usage": {"input_tokens": 5, "output_tokens": 2}}


def _all_scrubbed(text: str) -> None:
    for _, secret, kept in SHAPES:
        for piece in secret_part(secret, kept).splitlines():
            if len(piece) >= 8:
                assert piece not in text, f"{piece[:24]}... reached the output"


@pytest.mark.parametrize("redact", [False, True])
def test_capture_scrubs_every_shape_an_upstream_echoes(tmp_path, redact):
    """Each shape echoed in a 401's message: always scrubbed (an error body echoes keys). Echoed in a 200's
    answer (a model repeating a pasted key): scrubbed with --redact, which scrubs bodies (without it the
    trace keeps the prompt and answer as they were, the key the user pasted included)."""
    rec = Recorder(tmp_path / "trace.jsonl", redact=redact)
    for i, (_, secret, _) in enumerate(SHAPES):
        error = {"type": "error", "error": {"type": "authentication_error", "message": f"invalid: {secret}"}}
        for status, body in ((401, error), (200, _reply(f"your key is {secret}"))):
            rec.record(Exchange("POST", "/v1/messages", {"x-api-key": "x"}, orjson.dumps(BODY), 1.0 + i,
                                status=status, response_headers={"content-type": "application/json"},
                                response_body=bytearray(orjson.dumps(body))))
    rec.close()
    lines = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert len(lines) == 2 * len(SHAPES)
    errors, answers = lines[::2], lines[1::2]
    for (_, secret, kept), failed, answered in zip(SHAPES, errors, answers):
        assert failed["error"].startswith("HTTP 401: authentication_error: invalid: ")
        assert_scrubbed(failed["error"], secret, kept)
        if redact:
            assert_scrubbed(answered["response"]["content"][0]["text"], secret, kept)


@pytest.fixture
def trace_with_every_shape(tmp_path):
    """A trace (as another tool, or an older kvprobe, wrote it) whose errors carry every shape."""
    path = tmp_path / "foreign.jsonl"
    with path.open("w") as fh:
        for i, (_, secret, _) in enumerate(SHAPES):
            fh.write(json.dumps({"kvprobe": 1, "id": f"r{i}", "provider": "anthropic", "session": "s",
                                 "started_at": 1_790_000_000 + 10 * i, "request": BODY,
                                 "error": f"HTTP 401: upstream said {secret}",
                                 "response": {"usage": {"input_tokens": 5, "output_tokens": 1}}}) + "\n")
    return path


def test_import_fix_db_and_reports_scrub_every_shape(cli, tmp_path, trace_with_every_shape):
    out = tmp_path / "out"
    out.mkdir()
    assert cli("import", trace_with_every_shape, "-o", out / "imported.jsonl").exit_code == 0
    assert cli("fix", trace_with_every_shape, "-o", out / "fixed.jsonl").exit_code == 0
    db = out / "k.duckdb"
    assert cli("db", "load", trace_with_every_shape, "--db", db).exit_code == 0
    with duckdb.connect(str(db), read_only=True) as con:
        errors = [row[0] for row in con.execute("SELECT error FROM requests ORDER BY line").fetchall()]
    printed = [cli("report", trace_with_every_shape, "--json").stdout, cli("usage", trace_with_every_shape,
                                                                             "--json").stdout]
    imported = [json.loads(line) for line in (out / "imported.jsonl").read_text().splitlines()]
    assert len(imported) == len(SHAPES) and len(errors) == len(SHAPES)
    for (_, secret, kept), record, error in zip(SHAPES, imported, errors):
        for written in (record["error"], error):
            assert written.startswith("HTTP 401: upstream said ")
            assert_scrubbed(written, secret, kept)
    for text in [(out / "imported.jsonl").read_text(), (out / "fixed.jsonl").read_text(), "\n".join(errors),
                 *printed]:
        _all_scrubbed(text)
