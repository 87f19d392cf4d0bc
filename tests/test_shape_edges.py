"""Every credential shape at the edge of its rule (the shortest value it takes: scrubbed as its kind; one
shorter: not that kind), the rules written in kvprobe/secrets.py itself (a value named by an AWS variable,
after Bearer, after a credential header or word, after key=), and the shape table's own errors.

The table's shapes (providers/key_shapes.toml) are read from their sources there: a prefix, an alphabet and a
floor on the length. The values are drawn here from those alphabets and are no one's credentials.
"""
from __future__ import annotations

import re
import string
import tomllib

import pytest

from conftest import ROOT
from kvprobe.errors import CatalogError
from kvprobe.secrets import map_strings, redact_secrets, redact_text

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
LOWER = string.ascii_lowercase + string.digits


def draw(n: int, alphabet: str = ALNUM, seed: int = 3) -> str:
    """n characters of the alphabet, a digit among the first ten where the alphabet has digits."""
    out = "".join(alphabet[(i * 7 + seed * 13 + i * i) % len(alphabet)] for i in range(n))
    digits = [c for c in alphabet if c.isdigit()]
    return (out[:2] + digits[seed % len(digits)] + out[3:]) if digits and n > 3 else out


def kinds(text: str) -> list[str]:
    """The kinds of the placeholders in a scrubbed text."""
    return re.findall(r"\[REDACTED:([a-z-]+)#[0-9a-f]{8}\]", text)


# kind: (shortest value the shape takes, one character shorter or one part less, a longer one)
EDGES = {
    "anthropic": ("sk-ant-" + draw(16, ALNUM + "-_"), None, "sk-ant-api03-" + draw(93, ALNUM + "-_") + "AA"),
    "openrouter": ("sk-or-v1-" + draw(32, HEX), "sk-or-v1-" + draw(31, HEX), "sk-or-v1-" + draw(64, HEX)),
    "langfuse": ("sk-lf-" + "-".join(draw(n, HEX, n) for n in (8, 4, 4, 4, 12)),
                 "sk-lf-" + "-".join(draw(n, HEX, n) for n in (8, 4, 4, 4, 11)), None),
    "openai": ("sk-" + draw(20), "sk-" + draw(19), "sk-proj-" + draw(156, ALNUM + "-_")),
    "key": ("sk-abc1**", "sk-ab1*", "sk-" + "*" * 10 + "1"),  # masked in a 401 message; a digit required
    "xai": ("xai-" + draw(20), "xai-" + draw(19), "xai-" + draw(80)),
    "groq": ("gsk_" + draw(20), "gsk_" + draw(19), "gsk_" + draw(52)),
    "together": ("tgp_v1_" + draw(20), "tgp_v1_" + draw(19), "tgp_v1_" + draw(43, ALNUM + "-_")),
    "fireworks": ("fw_" + draw(20), "fw_" + draw(19), "fw_" + draw(33)),
    "perplexity": ("pplx-" + draw(32), "pplx-" + draw(31), "pplx-" + draw(48)),
    "replicate": ("r8_" + draw(30, ALNUM + "-_"), "r8_" + draw(29), "r8_" + draw(37, ALNUM + "-_")),
    "huggingface": ("hf_" + draw(30), "hf_" + draw(29), "api_org_" + draw(34)),
    "nvidia": ("nvapi-" + draw(40, ALNUM + "-_"), "nvapi-" + draw(39), "nvapi-" + draw(64, ALNUM + "-_")),
    "cerebras": ("csk-" + draw(32, LOWER), "csk-" + draw(31, LOWER), "csk_" + draw(48, LOWER)),
    "langsmith": ("lsv2_pt_" + draw(32, HEX) + "_" + draw(10, HEX), "lsv2_sk_" + draw(32, HEX) + "_" + draw(9, HEX),
                  None),
    "google": ("AIza" + draw(35, ALNUM + "-_"), "AIza" + draw(34), None),
    "google-oauth": ("ya29." + draw(20, ALNUM + "-_"), "ya29." + draw(19), "ya29." + draw(180, ALNUM + "-_")),
    "bedrock": ("ABSK" + draw(40, ALNUM + "+/"), "ABSK" + draw(39), "bedrock-api-key-" + draw(20, ALNUM + "%=")),
    "aws-id": ("AKIA" + draw(16, string.ascii_uppercase + string.digits),
               "AKIA" + draw(15, string.ascii_uppercase + string.digits), None),
    "github": ("ghp_" + draw(30), "ghp_" + draw(29), "github_pat_" + draw(40, ALNUM + "_")),
    "slack": ("xoxb-" + draw(10, ALNUM + "-"), "xoxb-" + draw(9), "xoxp-" + draw(60, ALNUM + "-")),
    "stripe": ("sk_live_" + draw(16), "sk_live_" + draw(15), "rk_test_" + draw(99)),
    "private-key": ("-----BEGIN PRIVATE KEY-----\nMII\n-----END PRIVATE KEY-----",
                    "-----BEGIN PRIVATE KEY-----\nMII\n-----END PRIVATE KEY----", None),
    "jwt": ("eyJ" + draw(8) + ".eyJ" + draw(8) + "." + draw(8), "eyJ" + draw(8) + ".eyJ" + draw(7) + "." + draw(8),
            None),
}


def test_every_shape_of_the_table_has_its_edge_here():
    table = tomllib.loads((ROOT / "providers" / "key_shapes.toml").read_text())
    assert sorted(row["kind"] for row in table["shapes"]) == sorted(EDGES)


@pytest.mark.parametrize("kind", EDGES)
def test_each_shape_at_its_edge(kind):
    at, below, above = EDGES[kind]
    for value in (at, above):
        if value is not None:
            out = redact_text(f"said {value} here")
            assert kinds(out) == [kind] and re.fullmatch(r"said \[REDACTED:[a-z-]+#[0-9a-f]{8}\] here", out), out
    if below is not None:
        assert kind not in kinds(redact_text(f"said {below} here")), below


WORD_START = [k for k in EDGES if not k.startswith(("anthropic", "openrouter", "langfuse", "openai", "private"))]


@pytest.mark.parametrize("kind", WORD_START)
def test_a_shape_glued_to_a_word_is_no_key_but_one_after_a_written_out_escape_is(kind):
    """`\\b` before a prefix means not inside a word; `\\n`, `\\t`, `\\r` written out (an error body quoted in
    a log's string) count as a boundary."""
    value = EDGES[kind][0]
    assert kind not in kinds(redact_text(f"Q{value} here")), value
    for escape in ("\\n", "\\t", "\\r"):
        out = redact_text(f'"error": "{escape}{value}"')
        assert kind in kinds(out) and value not in out, (escape, out)


# --- the rules in kvprobe/secrets.py: values named by what precedes them ---------------------------------------

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # AWS's documented example secret access key (40)

# (text, the text scrubbed, with <kind> where one placeholder of that kind stands)
NAMED = [
    (f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_access_key = <aws-cred>"),
    (f'AWS_SECRET_ACCESS_KEY: "{AWS_SECRET}"', 'AWS_SECRET_ACCESS_KEY: "<aws-cred>"'),
    (f"aws_session_token='{AWS_SECRET[:20]}'", "aws_session_token='<aws-cred>'"),  # 20: the floor
    (f"aws_secret_access_key: {AWS_SECRET[:19]} x", f"aws_secret_access_key: {AWS_SECRET[:19]} x"),  # 19
    (f"aws_secret_access_key={AWS_SECRET[:19]}", "aws_secret_access_key=<credential>"),  # then key=... takes it
    ("Authorization: Bearer " + draw(16, ALNUM + "-._~+/="), "Authorization: Bearer <bearer>"),
    ("sent BEARER\t" + "abc-def.ghi_jkl~mno+pqr/stu=", "sent BEARER\t<bearer>"),
    ("Authorization: Bearer short-1", "Authorization: Bearer <header>"),  # under 16: the header's value still
    ("sent bearer " + draw(15), "sent bearer " + draw(15)),  # 15 after Bearer with no header: ordinary text
    ("xbearer " + draw(20), "xbearer " + draw(20)),  # not a word of its own
    ("x-api-key: x", "x-api-key: <header>"),  # a named header's value goes whatever its length
    ('{"Authorization": "Token abc123"}', '{"Authorization": "Token <header>"}'),
    ("Authorization: Basic dXNlcjpwYXNz, next", "Authorization: Basic <header>, next"),
    ("set-cookie: sid=abc; Path=/", "set-cookie: <header>; Path=/"),
    ("HTTP_PROXY_AUTHORIZATION=abc&n=1", "HTTP_PROXY_AUTHORIZATION=<header>&n=1"),
    ("Ocp-Apim-Subscription-Key : 'k-1'", "Ocp-Apim-Subscription-Key : '<header>'"),
    ("x-goog-api-key=g1", "x-goog-api-key=<header>"),
    ("password=hunter2&next=1", "password=<credential>&next=1"),
    ("PASSWD: 'p4ss'", "PASSWD: '<credential>'"),
    ('{"api_key": "abc", "n": 1}', '{"api_key": "<credential>", "n": 1}'),
    ("apikey=abc;", "apikey=<credential>;"),
    ("client_secret = s3", "client_secret = <credential>"),
    ("MISTRAL_API_KEY=abc", "MISTRAL_API_KEY=<credential>"),
    ("access-token: t0k", "access-token: <credential>"),
    ("subscription_key=s1 subscription-key=s2", "subscription_key=<credential> subscription-key=<credential>"),
    ("token : abc,", "token : <credential>,"),
    ("mypassword=abc", "mypassword=abc"),  # inside a word: not the word
    ("the password is long", "the password is long"),  # no = or : after it
    ("https://h/v1/m:generateContent?key=abc123&alt=sse", "https://h/v1/m:generateContent?key=<credential>&alt=sse"),
    ("KEY = 'abc'", "KEY = '<credential>'"),
    ("monkey=banana", "monkey=banana"),
    ("key: abc", "key: abc"),  # key= only: "key:" is ordinary prose
]


def _pattern(template: str) -> str:
    """The template as a regular expression: its text literal, each <kind> one placeholder of that kind."""
    parts = re.split(r"<([a-z-]+)>", template)
    return "".join(re.escape(p) if i % 2 == 0 else rf"\[REDACTED:{p}#[0-9a-f]{{8}}\]" for i, p in enumerate(parts))


# (ids without tabs: pytest writes one as \t in the id, and then cannot select the test by that name)
@pytest.mark.parametrize("text, scrubbed", NAMED, ids=[re.sub(r"\s", " ", t[:36]) for t, _ in NAMED])
def test_a_value_named_as_a_credential_goes_and_its_name_stays(text, scrubbed):
    out = redact_text(text)
    assert re.fullmatch(_pattern(scrubbed), out), out


def test_a_key_inside_a_named_value_keeps_its_own_kind_and_is_not_wrapped_twice():
    key = EDGES["anthropic"][2]
    for text in (f"x-api-key: {key}", f"api_key={key}", f"?key={key}", f"Authorization: Bearer {key}"):
        out = redact_text(text)
        assert kinds(out) == ["anthropic"] and key not in out and out.count("[REDACTED:") == 1, out


def test_a_named_value_with_a_lone_surrogate_is_scrubbed_not_an_error():
    # json.loads lets "\\ud800" through: a trace read from a foreign log may hold one
    out = redact_text("x-api-key: abc\ud800def rest")
    assert kinds(out) == ["header"] and out.endswith(" rest") and "\ud800" not in out


def test_equal_values_equal_placeholders_whatever_names_them():
    a, b = redact_text("password=hunter2"), redact_text("token: hunter2")
    assert a.removeprefix("password=") == b.removeprefix("token: ") != redact_text("password=hunter3")
    for name in ("aws_secret_access_key=", "Bearer "):  # the kinds that keep their name: the value is hashed
        one, two = redact_text(name + AWS_SECRET), redact_text(name + AWS_SECRET[::-1])
        assert one.startswith(name) and two.startswith(name) and one != two


def test_a_text_that_names_every_prefix_still_has_its_key_scrubbed():
    """Which shapes run is found by the words a text holds: a text holding all of them runs them all."""
    table = tomllib.loads((ROOT / "providers" / "key_shapes.toml").read_text())
    words = [p for row in table["shapes"] for p in row["prefixes"]] + table["named"]["headers"] \
        + table["named"]["words"] + ["aws_", "bearer", "key"]
    key = EDGES["groq"][2]
    out = redact_text(" ".join(words) + " then " + key)
    assert key not in out and out.rsplit(" then ", 1)[1] == redact_text(key) and kinds(out)[-1] == "groq"


def test_redact_secrets_reaches_any_depth_and_keeps_what_is_no_string():
    key = EDGES["groq"][0]
    deep: object = [key]
    for _ in range(1500):  # deeper than Python's recursion limit: scrubbed iteratively
        deep = [deep]
    out = redact_secrets({"a": deep, key: {1: key, "n": 2.5, "ok": False, "no": None}})
    inner = out["a"]
    for _ in range(1500):
        inner = inner[0]
    assert kinds(inner[0]) == ["groq"]
    ((name, value),) = [(k, v) for k, v in out.items() if k != "a"]
    assert kinds(name) == ["groq"] and kinds(value[1]) == ["groq"]
    assert value["n"] == 2.5 and value["ok"] is False and value["no"] is None
    assert redact_secrets(42) == 42 and redact_secrets(None) is None and redact_secrets(key) == value[1]


def test_map_strings_copies_and_leaves_the_value_given_as_it_was():
    doc = {"a": ["x", {"b": "y"}], "c": "z"}
    out = map_strings(doc, str.upper)
    assert out == {"A": ["X", {"B": "Y"}], "C": "Z"} and doc == {"a": ["x", {"b": "y"}], "c": "z"}
    assert map_strings([[], {}, [[]]], str.upper) == [[], {}, [[]]]


# --- the table's own errors: a clear message naming the file and the row ---------------------------------------

GOOD_ROW = ('kind = "corp"\npattern = \'\\bcorp-[a-z0-9]{10,}\'\nprefixes = ["corp-"]\nsource = "s"\n'
            'checked = "2026-12-01"\n')
GOOD_NAMED = '[named]\nheaders = ["x-corp-auth"]\nwords = ["corp_secret"]\n'


def _table(tmp_path, monkeypatch, text: str | bytes):
    folder = tmp_path / "providers"
    folder.mkdir()
    target = folder / "key_shapes.toml"
    target.write_bytes(text if isinstance(text, bytes) else text.encode())
    monkeypatch.setenv("KVPROBE_PROVIDERS_DIR", str(folder))
    return target


BROKEN = [
    ("not toml", "[[shapes]\n", "cannot read the credential shapes"),
    ("not utf-8", b"key_shapes = '\xff'\n", "cannot read the credential shapes"),
    ("a row that is no table", 'shapes = ["corp"]\n' + GOOD_NAMED, "shapes[0]: expected a table"),
    ("a row missing fields", '[[shapes]]\nkind = "corp"\npattern = "x"\n' + GOOD_NAMED,
     "shapes[0]: missing prefixes, source, checked"),
    ("empty prefixes", "[[shapes]]\n" + GOOD_ROW.replace('["corp-"]', "[]") + GOOD_NAMED,
     "shapes[0] (corp): prefixes must be a non-empty list of literals"),
    ("an empty prefix", "[[shapes]]\n" + GOOD_ROW.replace('["corp-"]', '["corp-", ""]') + GOOD_NAMED,
     "shapes[0] (corp): prefixes must be a non-empty list of literals"),
    ("a prefix that is no text", "[[shapes]]\n" + GOOD_ROW.replace('["corp-"]', '["corp-", 3]') + GOOD_NAMED,
     "shapes[0] (corp): prefixes must be a non-empty list of literals"),
    ("prefixes as one string", "[[shapes]]\n" + GOOD_ROW.replace('["corp-"]', '"corp-"') + GOOD_NAMED,
     "shapes[0] (corp): prefixes must be a non-empty list of literals"),
    ("a pattern that does not compile", "[[shapes]]\n" + GOOD_ROW.replace("{10,}", "{10,") + "[[shapes]]\n"
     + GOOD_ROW.replace("corp", "bad").replace("[a-z0-9]", "(") + GOOD_NAMED,
     "shapes[1] (bad): pattern does not compile"),
    ("no [named]", "[[shapes]]\n" + GOOD_ROW, "[named] needs non-empty lists 'headers' and 'words'"),
    ("empty headers", "[[shapes]]\n" + GOOD_ROW + GOOD_NAMED.replace('["x-corp-auth"]', "[]"),
     "[named] needs non-empty lists 'headers' and 'words'"),
    ("words as one string", "[[shapes]]\n" + GOOD_ROW + GOOD_NAMED.replace('["corp_secret"]', '"corp_secret"'),
     "[named] needs non-empty lists 'headers' and 'words'"),
    ("no words", "[[shapes]]\n" + GOOD_ROW + GOOD_NAMED.replace('words = ["corp_secret"]\n', ""),
     "[named] needs non-empty lists 'headers' and 'words'"),
]


@pytest.mark.parametrize("case, text, message", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_shape_table_is_named_with_its_row(tmp_path, monkeypatch, case, text, message):
    where = _table(tmp_path, monkeypatch, text)
    with pytest.raises(CatalogError) as raised:
        redact_text("anything at all")
    assert str(raised.value).startswith(f"{where}: ") and message in str(raised.value), str(raised.value)


def test_the_table_in_the_providers_folder_is_the_one_used(tmp_path, monkeypatch):
    _table(tmp_path, monkeypatch, "[[shapes]]\n" + GOOD_ROW + GOOD_NAMED)
    assert kinds(redact_text("got corp-abcdef1234 back")) == ["corp"]
    assert redact_text("got corp-abcdef123 back") == "got corp-abcdef123 back"  # 9: under the floor
    assert redact_text("got xcorp-abcdef1234") == "got xcorp-abcdef1234"  # inside a word
    assert kinds(redact_text("\\ncorp-abcdef1234")) == ["corp"]
    assert kinds(redact_text("CORP-ABCDEF1234 X-Corp-Auth: v CORP_SECRET=w")) == ["header", "credential"]
    assert redact_text("x-api-key: v") == "x-api-key: v"  # not a header of this table


def test_a_table_row_may_reuse_a_kind_that_keeps_its_name(tmp_path, monkeypatch):
    """A row of kind bearer keeps what its groups matched (a group that took no part counts as nothing) and
    scrubs the rest."""
    row = GOOD_ROW.replace('"corp"', '"bearer"').replace("\\bcorp-[a-z0-9]{10,}", "(?:(sent )|(got ))tkn-[a-z0-9]{10,}")
    _table(tmp_path, monkeypatch, "[[shapes]]\n" + row.replace('["corp-"]', '["tkn-"]') + GOOD_NAMED)
    out = redact_text("got tkn-abcdef1234 back")
    assert re.fullmatch(r"got \[REDACTED:bearer#[0-9a-f]{8}\] back", out), out


def test_a_providers_folder_without_the_table_falls_back_to_the_shipped_one(tmp_path, monkeypatch):
    (tmp_path / "providers").mkdir()
    monkeypatch.setenv("KVPROBE_PROVIDERS_DIR", str(tmp_path / "providers"))
    assert kinds(redact_text("key " + EDGES["google"][0])) == ["google"]
