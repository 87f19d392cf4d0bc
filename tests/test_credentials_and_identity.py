"""The two scrubbers that work on values rather than shapes, called in process (mutation runs see them):

* `Credentials`: the exact values one exchange shows to be credentials (a request's auth headers, the parts
  of a Bearer or Basic value, each cookie, a URL's password and key parameters), scrubbed wherever an
  upstream echoes them, whatever their shape;
* `scrub_identity`: a trace record's identity fields (id, session, agent, endpoint, error) and every string
  of its `extra`, keys included, scrubbed by shape by the trace reader, the trace writer and the importers.

The values are made here by hand and are no one's credentials; a gateway token such as `corp-gw-...`
matches no shape, so only `Credentials` can catch it.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import re

import orjson
import pytest

from kvprobe.capture.recorder import Exchange, Recorder
from kvprobe.secrets import Credentials, scrub_identity
from kvprobe.trace.reader import read_trace
from kvprobe.trace.record import TraceRecord
from kvprobe.trace.writer import TraceWriter, write_trace

PLACEHOLDER = r"\[REDACTED:{kind}#[0-9a-f]{{8}}\]"
GATEWAY = "corp-gw-token-7f3a9c21e4b8d605"  # no shape: only the exchange that carried it says it is a key
XAI = "xai-" + "Qm7Rt2Vx9Lp4Zk8Wn3Hs6Jd1Fc5Bg0Ty" + "Ue4Ia7Ob2Pr9Sm6Ql3Nk8Mj1Wh5Xg0Zf"  # xai- + 64, digits inside


def placeholders(text: str, kind: str = "credential") -> list[str]:
    return re.findall(PLACEHOLDER.format(kind=kind), text)


# --- Credentials: which values an exchange shows to be credentials -------------------------------------------

def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# (header name, its value, values that must then be scrubbed from any text, text that must stay)
HEADERS = [
    ("x-api-key", GATEWAY, [GATEWAY], []),
    ("authorization", f"Bearer {GATEWAY}", [f"Bearer {GATEWAY}", GATEWAY], ["Bearer"]),
    ("proxy-authorization", _basic("svc-user", "hunter2-longer"), ["hunter2-longer", "svc-user:hunter2-longer"],
     ["svc-user "]),
    ("api-key", "a1b2c3d4e5f60718293a4b5c6d7e8f90", ["a1b2c3d4e5f60718293a4b5c6d7e8f90"], []),  # Azure OpenAI
    ("x-goog-api-key", "gemini-corp-key-001", ["gemini-corp-key-001"], []),
    ("ocp-apim-subscription-key", "apim-subscription-0042", ["apim-subscription-0042"], []),
    ("x-auth-token", "session-token-0099", ["session-token-0099"], []),
    ("x-corp-secret", "shared-secret-value", ["shared-secret-value"], []),
    ("x-db-password", "pa55word-long", ["pa55word-long"], []),
    ("x-credential", "credential-value-7", ["credential-value-7"], []),
    ("X-Api_Key", "mixed-case-name-key", ["mixed-case-name-key"], []),  # names in any case, - or _
    ("x-apikey", "no-separator-key-01", ["no-separator-key-01"], []),
    ("cookie", "session=cookie-session-123; theme=dark-mode-on", ["cookie-session-123", "dark-mode-on"],
     ["session=", "theme="]),
]


@pytest.mark.parametrize("name, value, gone, kept", HEADERS, ids=[h[0] for h in HEADERS])
def test_a_credential_header_value_and_its_parts_are_scrubbed_wherever_echoed(name, value, gone, kept):
    creds = Credentials().add_headers({"content-type": "application/json", name: value})
    for secret in gone:
        text = f"upstream said: {secret} is not valid"
        out = creds.text(text)
        assert secret not in out and out.startswith("upstream said: [REDACTED:credential#"), (secret, out)
        assert out.endswith("] is not valid")
    echoed = creds.text(f"{name}: {value}")
    for secret in gone:
        assert secret not in echoed
    for piece in kept:
        assert piece in creds.text(f"{piece} {value}")


def test_ordinary_headers_are_not_credentials():
    creds = Credentials().add_headers({"content-type": "application/json", "user-agent": "claude-cli/2.0.14",
                                       "x-request-id": "req_0123456789abcdef", "anthropic-version": "2023-06-01"})
    text = "application/json claude-cli/2.0.14 req_0123456789abcdef 2023-06-01"
    assert creds.text(text) == text and creds.values == set()


@pytest.mark.parametrize("value, scrubbed", [
    ("abcdefg", False),  # 7 characters: shorter than the rule's 8 (a local server's placeholder key)
    ("abcdefgh", True),  # exactly 8
    ("abcdefghi", True),  # 9
    ("   abcdefg   ", False),  # 7 once the spaces around it are gone
    ("  abcdefgh  ", True),
])
def test_a_value_needs_eight_characters_to_be_a_credential(value, scrubbed):
    creds = Credentials().add_headers({"x-api-key": value})
    out = creds.text("echo abcdefghi and abcdefgh end")
    if scrubbed:
        assert value.strip() not in out and "[REDACTED:credential#" in out
        assert out.startswith("echo ") and out.endswith(" end")  # the spaces of the header value are not secret
    else:
        assert out == "echo abcdefghi and abcdefgh end"


def test_a_one_letter_key_scrubs_nothing():
    creds = Credentials().add_headers({"x-api-key": "x", "authorization": "Bearer x"})
    assert creds.text("x marks the spot") == "x marks the spot"


def test_each_cookie_value_goes_but_a_short_one_stays():
    creds = Credentials().add_headers({"Cookie": "sid=0123456789abcdef;  lang=en; csrftoken=qwertyuiopasdf; "
                                                 "auth=dG9rZW4tdmFsdWU="})
    out = creds.text("sid 0123456789abcdef csrf qwertyuiopasdf auth dG9rZW4tdmFsdWU= lang en")
    assert "0123456789abcdef" not in out and "qwertyuiopasdf" not in out and "dG9rZW4tdmFsdWU" not in out
    assert out.endswith(" lang en") and len(placeholders(out)) == 3  # (a base64 value keeps its "=")


def test_the_credentials_after_a_scheme_go_as_one_value():
    value = 'Digest username="svc-account", response="6629fae49393a05397450978507c4ef1"'
    creds = Credentials().add_headers({"Authorization": value})
    out = creds.text('echo: username="svc-account", response="6629fae49393a05397450978507c4ef1"')
    assert re.fullmatch(r"echo: \[REDACTED:credential#[0-9a-f]{8}\]", out), out


def test_a_basic_pair_is_decoded_and_its_password_goes_while_its_user_stays():
    creds = Credentials().add_headers({"authorization": _basic("deploy-bot", "s3cr3t-passphrase")})
    out = creds.text("login deploy-bot with s3cr3t-passphrase; pair deploy-bot:s3cr3t-passphrase")
    assert "s3cr3t-passphrase" not in out and out.startswith("login deploy-bot with [REDACTED:credential#")
    assert "pair [REDACTED:credential#" in out  # the user:password pair is one value


@pytest.mark.parametrize("value", ["Basic not*base64!!", "Basic " + base64.b64encode(b"\xff\xfe:\xfd").decode(),
                                   "Basic " + base64.b64encode(b"no-colon-at-all-here").decode()])
def test_a_basic_value_that_does_not_decode_is_still_scrubbed_whole(value):
    creds = Credentials().add_headers({"authorization": value})
    rest = value.partition(" ")[2]
    out = creds.text(f"got {value} and {rest}")
    assert rest not in out and out.startswith("got [REDACTED:credential#")


def test_a_basic_password_may_hold_a_colon():
    # RFC 7617: the user-id holds no colon, the password may; the pair splits at the first one
    creds = Credentials().add_headers({"authorization": _basic("svc", "pass:word-long-1")})
    out = creds.text("bad password pass:word-long-1")
    assert re.fullmatch(r"bad password \[REDACTED:credential#[0-9a-f]{8}\]", out), out


def test_only_a_well_formed_basic_value_is_decoded():
    """RFC 7617's base64 is the standard alphabet: a value in another (base64url's "-") is not decoded, so
    nothing inside it is taken for a password that would then be scrubbed from every text; the value itself
    still goes whole."""
    encoded = base64.b64encode(b"user:password-long").decode()  # dXNlcjpwYXNzd29yZC1sb25n
    odd = encoded[:8] + "-" + encoded[8:]
    creds = Credentials().add_headers({"authorization": f"Basic {odd}"})
    assert creds.text(f"echo {odd}").startswith("echo [REDACTED:credential#")
    assert creds.text("the password-long field") == "the password-long field"


def test_a_key_sent_as_a_basic_user_with_no_password_is_scrubbed_bare():
    """Stripe and others take the key as the Basic user with an empty password (`-u sk_live_…:`): the key
    alone is what an upstream echoes."""
    creds = Credentials().add_headers({"authorization": _basic("corp-basic-key-0001", "")})
    out = creds.text("no such key: corp-basic-key-0001 (pair corp-basic-key-0001:)")
    assert "corp-basic-key-0001" not in out and len(placeholders(out)) == 2
    assert out.startswith("no such key: [REDACTED:credential#") and out.endswith("])")


def test_a_header_value_that_is_no_string_is_ignored():
    creds = Credentials().add_headers({"x-api-key": None, "authorization": 12345678901})  # type: ignore[dict-item]
    assert creds.values == set() and creds.text("12345678901") == "12345678901"


# (url, values that must be scrubbed, text that must stay)
URLS = [
    ("https://svc:hunter2-longer@llm.corp.example/v1", ["hunter2-longer"], ["svc", "llm.corp.example"]),
    ("https://svc:p%40ss%3Aw0rd-long@llm.corp.example/v1", ["p%40ss%3Aw0rd-long", "p@ss:w0rd-long"], []),
    ("/v1beta/models/gemini-2.5-flash:generateContent?key=AQ.gateway-key-0042&alt=sse",
     ["AQ.gateway-key-0042"], ["alt", "sse"]),
    ("/v1/chat?api_key=litellm-key-000123&model=gpt-4o-mini-2024", ["litellm-key-000123"], ["gpt-4o-mini-2024"]),
    ("/v1/chat?access_token=ya29-like-but-not-00&Token=second-token-0001",
     ["ya29-like-but-not-00", "second-token-0001"], []),
    ("/v1/chat?KEY=upper-case-name-key", ["upper-case-name-key"], []),
    ("/v1/chat?monkey=banana-split-long&keyword=abcdefghijkl", [], ["banana-split-long", "abcdefghijkl"]),
    ("https://svc@llm.corp.example/v1?x=1", [], ["svc"]),  # a user with no password
    ("https://llm.corp.example:8443/v1", [], ["8443"]),  # a port is no password
]


@pytest.mark.parametrize("url, gone, kept", URLS, ids=[u[0][:40] for u in URLS])
def test_a_urls_password_and_key_parameters_are_scrubbed_and_the_rest_stays(url, gone, kept):
    creds = Credentials().add_url(url)
    for secret in gone:
        out = creds.text(f"error from {secret} here")
        assert secret not in out and out == f"error from {placeholders(out)[0]} here"
    for text in kept:
        assert creds.text(f"see {text}") == f"see {text}"
    assert len(creds.values) == len(gone)


@pytest.mark.parametrize("url", [None, 42, "http://[::1/v1?key=abcdefghijkl"])
def test_a_url_that_is_no_string_or_does_not_parse_adds_nothing(url):
    assert Credentials().add_url(url).values == set()


def test_the_longest_value_is_scrubbed_first_so_no_tail_of_a_key_survives():
    # the x-api-key is a prefix of the bearer token: matched shortest first, "9c21e4b8" would stay on disk
    creds = Credentials().add_headers({"x-api-key": "corp-gw-token-7f3a",
                                       "authorization": f"Bearer {GATEWAY}"})
    out = creds.text(f"token {GATEWAY} rejected, and corp-gw-token-7f3a too")
    assert "9c21" not in out and "7f3a" not in out
    assert len(placeholders(out)) == 2 and out.startswith("token [REDACTED:") and out.endswith("] too")


def test_values_added_after_a_scrub_are_scrubbed_too():
    creds = Credentials()
    creds.add("first-secret-value")
    assert creds.text("a first-secret-value b second-secret-value").count("[REDACTED:") == 1
    creds.add("second-secret-value")
    out = creds.text("a first-secret-value b second-secret-value")
    assert "second-secret-value" not in out and len(placeholders(out)) == 2


def test_equal_values_get_equal_placeholders_and_different_ones_differ():
    creds = Credentials()
    creds.add("first-secret-value")
    creds.add("second-secret-value")
    one, two = creds.text("first-secret-value"), creds.text("second-secret-value")
    assert creds.text("first-secret-value") == one and one != two
    assert Credentials().add_headers({"x-api-key": "first-secret-value"}).text("first-secret-value") == one


def test_scrub_reaches_every_string_of_a_json_value_keys_included():
    creds = Credentials().add_headers({"x-api-key": GATEWAY})
    doc = {GATEWAY: [f"echo {GATEWAY}", {"n": 3, "ok": True, "none": None, "deep": [[GATEWAY]]}], "keep": "text"}
    out = creds.scrub(doc)
    dumped = json.dumps(out)
    assert GATEWAY not in dumped and dumped.count("[REDACTED:credential#") == 3
    assert out["keep"] == "text" and out[next(iter(out))][1]["n"] == 3 and out[next(iter(out))][1]["ok"] is True
    assert out[next(iter(out))][1]["none"] is None
    assert doc[GATEWAY][0] == f"echo {GATEWAY}"  # the value given is not changed in place


def test_with_no_credentials_text_and_values_come_back_as_they_were():
    creds = Credentials().add_headers({"content-type": "application/json"})
    doc = {"a": ["b"]}
    assert creds.scrub(doc) is doc and creds.text("abcdefghijkl") == "abcdefghijkl"


def test_capture_scrubs_what_the_request_carried_from_error_answer_and_transport_text(tmp_path):
    """The Recorder's use of Credentials: a gateway token in the key header and a key in the URL, echoed by
    the upstream in a 401 and in the answer, never reach the trace (without --redact: what the request
    carried goes whatever the flags)."""
    rec = Recorder(tmp_path / "trace.jsonl")
    body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    reply = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
             "stop_reason": "end_turn", "content": [{"type": "text", "text": f"key {GATEWAY} and url-key-00042"}],
             "usage": {"input_tokens": 5, "output_tokens": 2}}
    error = {"type": "error", "error": {"type": "authentication_error", "message": f"invalid {GATEWAY}"}}
    for status, answer in ((401, error), (200, reply)):
        rec.record(Exchange("POST", "/v1/messages?key=url-key-00042", {"x-api-key": GATEWAY}, orjson.dumps(body),
                            1.0, status=status, response_headers={"content-type": "application/json"},
                            response_body=bytearray(orjson.dumps(answer)), transport_error=f"reset after {GATEWAY}"))
    rec.close()
    text = (tmp_path / "trace.jsonl").read_text()
    assert GATEWAY not in text and "url-key-00042" not in text
    failed, answered = (json.loads(line) for line in text.splitlines())
    assert failed["error"].startswith("HTTP 401: authentication_error: invalid [REDACTED:credential#")
    assert re.fullmatch(r"key \[REDACTED:credential#[0-9a-f]{8}\] and \[REDACTED:credential#[0-9a-f]{8}\]",
                        answered["response"]["content"][0]["text"])


# --- scrub_identity: a record's identity fields and its extra -------------------------------------------------

def _record(**fields) -> TraceRecord:
    return TraceRecord(**{"id": "req_1", "provider": "anthropic", "started_at": 1_790_000_000.0,
                          "request": {"model": "claude-sonnet-4-5", "messages": []}, "session": "s-1",
                          "agent": "main", "endpoint": "/v1/messages", "error": None,
                          "extra": {"cwd": "/home/me/repo"}, **fields})


@pytest.mark.parametrize("name", ["id", "session", "agent", "endpoint", "error"])
def test_a_key_in_any_identity_field_is_scrubbed_and_the_rest_of_the_record_kept(name):
    plain = _record()
    record = dataclasses.replace(plain, **{name: f"before {XAI} after"})
    out = scrub_identity(record)
    assert re.fullmatch(r"before \[REDACTED:xai#[0-9a-f]{8}\] after", getattr(out, name))
    for other in ("id", "session", "agent", "endpoint", "error", "extra", "request", "provider", "started_at"):
        if other != name:
            assert getattr(out, other) == getattr(plain, other), other
    assert getattr(record, name) == f"before {XAI} after"  # the record given is not changed in place


def test_a_key_anywhere_in_extra_is_scrubbed_keys_and_nested_values_included():
    extra = {"cwd": f"/home/me/{XAI}/repo", "request_headers": {"x-kvprobe-session": f"run {XAI}"},
             "deep": [{"k": [1, None, True, f"x {XAI}"]}], XAI: "as a key", "n": 7}
    out = scrub_identity(_record(extra=extra))
    assert XAI not in json.dumps(out.extra)
    assert re.fullmatch(r"/home/me/\[REDACTED:xai#[0-9a-f]{8}\]/repo", out.extra["cwd"])
    assert out.extra["deep"][0]["k"][:3] == [1, None, True] and out.extra["n"] == 7
    assert out.session == "s-1" and out.id == "req_1"
    assert extra["cwd"] == f"/home/me/{XAI}/repo"  # the given dict is not changed in place


@pytest.mark.parametrize("where", ["extra value", "extra key", "nested list", "session"])
def test_a_key_only_in_one_place_is_still_found(where):
    extra = {"cwd": "/srv/app", "items": ["plain", {"inner": "plain"}]}
    fields: dict = {}
    if where == "extra value":
        extra["items"][1]["inner"] = XAI
    elif where == "extra key":
        extra["items"][1] = {XAI: 1}
    elif where == "nested list":
        extra["items"].append([["deeper", XAI]])
    else:
        fields["session"] = XAI
    out = scrub_identity(_record(extra=extra, **fields))
    assert XAI not in json.dumps(out.extra) + str(out.session)


def test_a_record_with_no_key_is_returned_as_it_is():
    record = _record(error="HTTP 429: rate limited; tokens per minute exceeded",
                     extra={"cwd": "/home/me/token-bucket", "api_key_source": "env", "tokens": 12})
    assert scrub_identity(record) is record  # (suspect words, no credential: nothing copied)
    bare = _record(session=None, agent=None, endpoint=None, extra={})
    assert scrub_identity(bare) is bare


def test_a_clean_record_seen_first_does_not_let_a_later_record_with_a_key_through(tmp_path, monkeypatch):
    """What scrub_identity remembers of one record's texts is kept per text: a record with suspect words and
    no key, then one whose agent holds a key, then the first again."""
    monkeypatch.setenv("KVPROBE_PROVIDERS_DIR", str(tmp_path))  # the shipped table, read afresh: nothing remembered
    clean = _record(agent="token-counter", extra={"api_key_source": "env"})
    assert scrub_identity(clean) is clean
    keyed = scrub_identity(_record(agent=f"token-counter {XAI}", extra={"api_key_source": "env"}))
    assert keyed.agent.startswith("token-counter [REDACTED:xai#") and XAI not in keyed.agent
    assert scrub_identity(clean) is clean


def test_records_sharing_a_flat_extra_each_get_its_own_verdict(tmp_path, monkeypatch):
    """What is remembered of a record's identity fields and flat `extra` is their values: the same key read
    again is scrubbed again, and values that differ from a clean record's in one string only are asked anew."""
    monkeypatch.setenv("KVPROBE_PROVIDERS_DIR", str(tmp_path))  # nothing remembered from other tests
    clean = {"cwd": "/srv/app", "git_branch": "main", "client_version": "2.0.14", "n": 1}
    for _ in range(2):
        assert scrub_identity(_record(extra=dict(clean))).extra == clean
        keyed = scrub_identity(_record(extra={**clean, "git_branch": f"fix-{XAI}"}))
        assert keyed.extra["git_branch"].startswith("fix-[REDACTED:xai#") and XAI not in json.dumps(keyed.extra)
        as_key = scrub_identity(_record(extra={**clean, XAI: "main"}))
        assert XAI not in json.dumps(as_key.extra)
        in_session = scrub_identity(_record(session=f"s {XAI}", extra=dict(clean)))
        assert in_session.session.startswith("s [REDACTED:xai#") and in_session.extra == clean
    assert scrub_identity(_record(extra={**clean, "n": True})).extra == {**clean, "n": True}


def test_a_record_whose_id_is_no_string_is_scrubbed_like_any_other():
    record = _record(id=7)  # type: ignore[arg-type]
    assert scrub_identity(record) is record
    assert scrub_identity(_record(id=7, session=XAI)).session.startswith("[REDACTED:xai#")  # type: ignore[arg-type]


def test_records_with_different_keys_in_their_ids_stay_apart():
    a = scrub_identity(_record(id=f"req-{XAI}"))
    b = scrub_identity(_record(id="req-xai-" + "Zq8Wr3Ty6Ui1Op4As7Df0Gh2Jk5Lz9Xc4Vb7Nm1Qw3Er6"))
    assert a.id != b.id and a.id.startswith("req-[REDACTED:xai#") and b.id.startswith("req-[REDACTED:xai#")


def test_the_trace_writer_and_reader_scrub_identity_fields(tmp_path):
    """Whoever made the record (an importer, a library user), the trace writer scrubs it; a foreign trace's
    key is scrubbed as it is read."""
    record = _record(session=f"sess {XAI}", extra={"cwd": f"/w/{GATEWAY}", "project_hash": XAI})
    write_trace(tmp_path / "whole.jsonl", [record])
    with TraceWriter(tmp_path / "appended.jsonl") as writer:
        writer.append(record)
    for name in ("whole.jsonl", "appended.jsonl"):
        text = (tmp_path / name).read_text()
        assert XAI not in text and json.loads(text)["session"].startswith("sess [REDACTED:xai#")
        assert json.loads(text)["cwd"] == f"/w/{GATEWAY}"  # no shape, no exchange: nothing says it is a key
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text(json.dumps({"kvprobe": 1, "id": "r1", "provider": "anthropic", "agent": f"bot {XAI}",
                                   "request": {"model": "claude-sonnet-4-5", "messages": []},
                                   "response": {"usage": {"input_tokens": 5, "output_tokens": 1}}}) + "\n")
    (read,) = read_trace(foreign)
    assert read.agent.startswith("bot [REDACTED:xai#") and XAI not in read.agent
