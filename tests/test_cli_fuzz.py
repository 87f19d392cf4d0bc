"""Hypothesis fuzzing of every reader, through the CLI: whatever the input, an exit code of 0/1/2/3 and a
message, never a traceback.

Readers: traces (report, gate, usage, fix, baseline, html, diff, compare, import, db load), request bodies
(diff), baselines (gate --baseline, compare), task outcomes (--outcomes). Mutations favour what broke
before: negative, huge and non-finite usage, a model that is not a string, lists nested hundreds deep;
usage whose parts exceed their whole (cached above all input, a 5m/1h split above the writes, DeepSeek hits
above the prompt, reasoning above output); ids repeated across files; markup and terminal control
characters in every string field; values nested up to the 1024 levels orjson reads.
The default run is small (a few seconds); `pytest -m slow` runs over 10,000 cases: the library readers take
most of them (a case costs milliseconds there), the CLI a few thousand.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner

from conftest import ROOT, json_spots
from kvprobe.cli import app
from kvprobe.errors import InputError
from kvprobe.importers import ImportReport, load_any
from kvprobe.nesting import allow_deep_json
from kvprobe.trace import read_trace
from kvprobe.usage import normalize_usage

allow_deep_json()  # as the CLI sets it: set before hypothesis notes the limit (it warns when it changes)


SAMPLE_LINES = (ROOT / "traces" / "sample_session.jsonl").read_bytes().splitlines()
REQUEST_A = (ROOT / "examples" / "request_a.json").read_bytes()
BASELINE = (ROOT / "examples" / "agent-baseline.json").read_bytes()
OUTCOMES = [b'{"task": "fix-login-bug", "passed": true, "duration_s": 30}', b'{"task": "t2", "passed": false}']
NASTY = [-50000, -1, 1e308, 2**63 - 1, 2**64, 10**30, 0.5, -0.0, 1e-300, "12", "", True, None, [], {},
         "claude-sonnet-4-5", 12345, "2026-09-10T10:00:00Z", "9999-12-31T23:59:59Z", "x" * 300]
ALLOWED = {0, 1, 2, 3}
# Examples under -m slow (environment overrides for a shorter or longer soak): the library readers' cases
# cost milliseconds, the CLI's a second or so (each runs every reading command)
SOAK_READS = int(os.environ.get("KVPROBE_FUZZ_READS", 10_000))
SOAK_CLI = int(os.environ.get("KVPROBE_FUZZ_CLI", 300))


def _deep(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


leaf = st.sampled_from(NASTY) | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=10)
values = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                          max_size=3), max_leaves=8)
class _Nested:
    """A list nested `depth` deep, written into the JSON text as it is dumped: neither the harness's own
    walks (json_spots) nor the stdlib's encoder recurse a thousand levels."""

    def __init__(self, depth: int) -> None:
        self.depth = depth


def _dumps(value: object) -> bytes:
    """JSON text (the stdlib writes what orjson refuses: nesting > 255, ints > 64 bits), nests spliced in."""
    text = json.dumps(value, default=lambda n: f"@@nested{n.depth}@@")
    return re.sub(r'"@@nested(\d+)@@"', lambda m: "[" * int(m[1]) + "1" + "]" * int(m[1]), text).encode()


values = values | st.integers(200, 400).map(_deep) | st.sampled_from([990, 1000, 1020]).map(_Nested)

# Text a trace may carry into a table: rich markup, emoji codes, terminal escapes (colour, title, clear
# screen, C1 CSI), bidi overrides, carriage returns, NUL, a lone surrogate.
HOSTILE = ["x[/]", "[/]", "[bold]b[/bold]", "[link=http://x]l[/link]", ":thumbs_up:", "\x1b[31mred\x1b[0m",
           "\x1b]0;title\x07", "\x1b[2J", "\x9b2J", "\u202etxt", "a\rb", "\x00", "%s{0}", "\ud800", "[old]/t"]


@st.composite
def mutated(draw, raw: bytes) -> bytes:
    """One JSON document with 1-3 values replaced or removed (usage values are picked more often)."""
    value = orjson.loads(raw)
    for _ in range(draw(st.integers(1, 3))):
        spots = list(json_spots(value))
        usage = [s for s in spots if isinstance(s[0], dict) and "tokens" in str(s[1])]
        pool = usage if usage and draw(st.booleans()) else spots
        if not pool:
            break
        container, key = draw(st.sampled_from(pool))
        if isinstance(container, dict) and draw(st.integers(0, 4)) == 0:
            del container[key]
        else:
            container[key] = draw(values)
    return _dumps(value)


@st.composite
def hostile(draw, raw: bytes) -> bytes:
    """The document with hostile text put into some of its strings (ids, models, sessions, paths, text)."""
    value = orjson.loads(raw)
    for container, key in list(json_spots(value)):
        if isinstance(container[key], str) and draw(st.integers(0, 3)) == 0:
            token = draw(st.sampled_from(HOSTILE))
            container[key] = token if draw(st.booleans()) else container[key] + token
    return _dumps(value)


def _count() -> st.SearchStrategy[int]:
    return st.integers(0, 60000) | st.sampled_from([0, 1, 10, 4096, 10**10])


@st.composite
def usage_parts(draw) -> tuple[str, str, dict]:
    """(provider, usage key, usage) with parts and wholes drawn apart: a part is often more than its whole."""
    shape = draw(st.sampled_from(["anthropic", "chat", "responses", "deepseek", "gemini", "interactions",
                                  "converse"]))
    c = [draw(_count()) for _ in range(4)]
    if shape == "anthropic":
        return "anthropic", "usage", {"input_tokens": c[0], "cache_read_input_tokens": c[1],
                                      "cache_creation_input_tokens": c[2], "output_tokens": 5, "cache_creation": {
                                          "ephemeral_5m_input_tokens": c[3], "ephemeral_1h_input_tokens": c[1]}}
    if shape == "chat":
        return "openai", "usage", {"prompt_tokens": c[0], "completion_tokens": c[1],
                                   "prompt_tokens_details": {"cached_tokens": c[2]},
                                   "completion_tokens_details": {"reasoning_tokens": c[3]}}
    if shape == "responses":
        return "openai", "usage", {"input_tokens": c[0], "output_tokens": c[1],
                                   "input_tokens_details": {"cached_tokens": c[2], "cache_write_tokens": c[3]}}
    if shape == "deepseek":
        return "deepseek", "usage", {"prompt_tokens": c[0], "prompt_cache_hit_tokens": c[1],
                                     "prompt_cache_miss_tokens": c[2], "completion_tokens": c[3]}
    if shape == "interactions":
        return "gemini", "usage", {"total_input_tokens": c[0], "total_cached_tokens": c[1],
                                   "total_output_tokens": c[2]}
    if shape == "converse":
        return "anthropic", "usage", {"inputTokens": c[0], "cacheReadInputTokens": c[1],
                                      "cacheWriteInputTokens": c[2], "outputTokens": c[3]}
    spelling = draw(st.sampled_from([("promptTokenCount", "cachedContentTokenCount"),
                                     ("prompt_token_count", "cached_content_token_count"),
                                     ("promptTokenCount", "cached_content_token_count")]))
    return "gemini", "usageMetadata", {spelling[0]: c[0], spelling[1]: c[1], "candidatesTokenCount": c[2]}


@st.composite
def usage_record(draw, raw: bytes) -> bytes:
    record = orjson.loads(raw)
    provider, key, usage = draw(usage_parts())
    record["provider"] = provider
    record["response"] = {key: usage, "model": draw(st.sampled_from(["gpt-4o", "claude-sonnet-4-5", "x"]))}
    if provider != "anthropic" or draw(st.booleans()):
        record.pop("request", None)  # usage only: no body of another provider's shape to render
    return json.dumps(record).encode()


@st.composite
def broken_bytes(draw, raw: bytes) -> bytes:
    at = draw(st.integers(0, max(len(raw) - 1, 0)))
    kind = draw(st.sampled_from(["cut", "flip", "insert"]))
    if kind == "cut":
        return raw[:at]
    if kind == "flip":
        return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1:]
    return raw[:at] + draw(st.binary(max_size=6)) + raw[at:]


def _lines(lines: list[bytes]) -> st.SearchStrategy[bytes]:
    one = st.sampled_from(lines)
    line = st.one_of(one, one.flatmap(mutated), one.flatmap(mutated), one.flatmap(broken_bytes),
                     one.flatmap(hostile), one.flatmap(usage_record))
    return st.lists(line, min_size=1, max_size=6).map(lambda ls: b"\n".join(ls) + b"\n")


def _document(raw: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(mutated(raw), mutated(raw), broken_bytes(raw))


def _run(args: list[str]):
    result = CliRunner().invoke(app, args)
    assert result.exit_code in ALLOWED, (args, result.exit_code, result.output)
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), (args, repr(result.exception))
    assert "Traceback" not in result.output, (args, result.output)
    assert "\x1b" not in result.output and "\x9b" not in result.output, (args, result.output)  # escapes shown
    return result


def _trace_commands(trace: Path, out: Path) -> list[list[str]]:
    t = str(trace)
    return [["report", t, "--json"], ["report", t], ["gate", t, "--min-hit-ratio", "0.5", "--max-cost-usd", "1"],
            ["usage", t, "--json"], ["fix", t, "-o", str(out / "fixed.jsonl"), "--force"],
            ["baseline", t, "-o", str(out / "b.json"), "--force"],
            ["html", t, "-o", str(out / "r.html"), "--force", "--no-fixes"],
            ["diff", t, str(ROOT / "examples" / "request_b.json"), "--json"],
            ["import", t, "-o", str(out / "i.jsonl"), "--force"]]


def _check_trace(content: bytes, tmp: Path) -> None:
    trace = tmp / "fuzz.jsonl"
    trace.write_bytes(content)
    for args in _trace_commands(trace, tmp):
        _run(args)


def _check_other(kind: str, content: bytes, tmp: Path) -> None:
    sample = str(ROOT / "traces" / "sample_session.jsonl")
    if kind == "request":
        path = tmp / "body.json"
        path.write_bytes(content)
        _run(["diff", str(path), str(ROOT / "examples" / "request_b.json"), "--json"])
        _run(["diff", str(ROOT / "examples" / "request_b.json"), str(path)])
    elif kind == "baseline":
        path = tmp / "base.json"
        path.write_bytes(content)
        _run(["gate", sample, "--baseline", str(path), "--max-regression", "10%"])
        _run(["compare", str(path), sample, "--json"])
    else:
        path = tmp / "outcomes.jsonl"
        path.write_bytes(content)
        _run(["gate", sample, "--outcomes", str(path), "--max-cost-per-task", "1"])
        _run(["compare", sample, sample, "--outcomes", str(path)])


def _fuzz(examples: int) -> dict:
    return {"max_examples": examples, "deadline": None, "database": None,
            "suppress_health_check": list(HealthCheck)}


@pytest.mark.parametrize("examples", [pytest.param(6, id="default"),
                                      pytest.param(SOAK_CLI * 2, id="soak", marks=pytest.mark.slow)])
def test_trace_readers_never_crash(examples, tmp_path_factory):
    @settings(**_fuzz(examples))
    @given(_lines(SAMPLE_LINES))
    def run(content):
        _check_trace(content, tmp_path_factory.mktemp("fuzz"))
    run()


@pytest.mark.parametrize("examples", [pytest.param(4, id="default"),
                                      pytest.param(300, id="soak", marks=pytest.mark.slow)])
@pytest.mark.parametrize("kind", ["request", "baseline", "outcomes"])
def test_other_readers_never_crash(kind, examples, tmp_path_factory):
    source = {"request": _document(REQUEST_A), "baseline": _document(BASELINE), "outcomes": _lines(OUTCOMES)}[kind]

    @settings(**_fuzz(examples))
    @given(source)
    def run(content):
        _check_other(kind, content, tmp_path_factory.mktemp("fuzz"))
    run()


def _possible(usage) -> bool:
    """What every figure is computed from: no class negative, no part above its whole."""
    return (usage.input_tokens >= 0 and usage.cache_read_tokens >= 0 and usage.cache_write_5m_tokens >= 0
            and usage.cache_write_1h_tokens >= 0 and usage.fresh_input_tokens >= 0 and usage.output_tokens >= 0
            and 0 <= usage.reasoning_output_tokens <= usage.output_tokens)


def _check_readers(content: bytes, tmp: Path) -> None:
    """The library readers on one file: strict (an InputError or records) and lenient (records and counted
    skips); whatever they let through has usage that adds up."""
    trace = tmp / "fuzz.jsonl"
    trace.write_bytes(content)
    try:
        strict = list(read_trace(trace))
    except InputError:
        strict = []
    report = ImportReport()
    try:
        lenient = list(load_any([trace], report=report))
    except InputError:
        lenient = []
    for record in strict + lenient:
        usage = normalize_usage(record.provider, record.usage)
        assert usage is None or _possible(usage), (record.provider, record.usage, usage)


@pytest.mark.parametrize("examples", [pytest.param(25, id="default"),
                                      pytest.param(SOAK_READS, id="soak", marks=pytest.mark.slow)])
def test_impossible_usage_never_passes_a_reader(examples, tmp_path_factory):
    @settings(**_fuzz(examples))
    @given(_lines(SAMPLE_LINES))
    def run(content):
        _check_readers(content, tmp_path_factory.mktemp("read"))
    run()


def _check_two_files(first: bytes, second: bytes, tmp: Path) -> None:
    """Two traces that number their requests alike (both start from the sample's req_1..req_6)."""
    a, b = tmp / "a.jsonl", tmp / "b.jsonl"
    a.write_bytes(first)
    b.write_bytes(second)
    for args in (["report", a, b, "--json"], ["usage", a, b, "--json"]):
        _run([str(x) for x in args])
    imported = _run(["import", str(a), str(b), "-o", str(tmp / "both.jsonl"), "--force"])
    if imported.exit_code == 0:  # every record it wrote reads back strictly: ids unique across the files
        records = list(read_trace(tmp / "both.jsonl"))
        assert len({r.id for r in records}) == len(records)


@pytest.mark.parametrize("examples", [pytest.param(3, id="default"),
                                      pytest.param(SOAK_CLI, id="soak", marks=pytest.mark.slow)])
def test_ids_repeated_across_files(examples, tmp_path_factory):
    @settings(**_fuzz(examples))
    @given(_lines(SAMPLE_LINES), _lines(SAMPLE_LINES))
    def run(first, second):
        _check_two_files(first, second, tmp_path_factory.mktemp("two"))
    run()


@pytest.mark.parametrize("value", [-50000, 1e308, 2**63 - 1, "many"])
def test_bad_usage_is_exit_2_naming_file_line_and_field(cli, tmp_path, value):
    """The gate never passes on impossible usage; strict readers say where it is, lenient ones count it."""
    record = json.loads(SAMPLE_LINES[1])
    record["response"]["usage"]["cache_read_input_tokens"] = value
    trace = tmp_path / "bad.jsonl"
    trace.write_bytes(SAMPLE_LINES[0] + b"\n" + json.dumps(record).encode() + b"\n")
    for args in (["gate", trace, "--min-hit-ratio", "0.5", "--max-cost-usd", "1"], ["report", trace, "--json"],
                 ["baseline", trace, "-o", tmp_path / "b.json"]):
        res = cli(*args)
        assert res.exit_code == 2, (args, res.output)
        assert "bad.jsonl:2" in res.output and "response.usage.cache_read_input_tokens" in res.output
    assert not (tmp_path / "b.json").exists()
    res = cli("usage", trace, "--json")  # lenient: the bad record is a counted skip
    assert res.exit_code == 0 and json.loads(res.stdout)["import"]["skipped"] == 1


@pytest.mark.parametrize(("usage_key", "nested", "field", "problem"), [
    ("usage", {"cache_creation": {"ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": -5}},
     "response.usage.cache_creation.ephemeral_1h_input_tokens", "expected a token count of 0 or more, got -5"),
    ("usage", {"prompt_tokens_details": {"cached_tokens": "lots"}},
     "response.usage.prompt_tokens_details.cached_tokens", "expected a token count, got str"),
    ("usageMetadata", {"promptTokenCount": 100, "promptTokensDetails": [
        {"modality": "TEXT", "tokenCount": 90}, {"modality": "IMAGE", "tokenCount": -10}]},
     "response.usageMetadata.promptTokensDetails[1].tokenCount", "expected a token count of 0 or more, got -10"),
])
def test_a_bad_nested_usage_count_is_named_by_its_full_path(cli, tmp_path, usage_key, nested, field, problem):
    """Details nested in usage (Anthropic's cache_creation split, OpenAI's prompt_tokens_details, Gemini's
    per-modality list) are checked too, and the error spells out the path down to the bad value."""
    record = json.loads(SAMPLE_LINES[1])
    record["response"].pop("usage")
    record["response"][usage_key] = nested
    trace = tmp_path / "nested.jsonl"
    trace.write_bytes(SAMPLE_LINES[0] + b"\n" + json.dumps(record).encode() + b"\n")
    res = cli("report", trace, "--json")
    assert res.exit_code == 2, res.output
    assert f"nested.jsonl:2 field '{field}': {problem}" in " ".join(res.output.split())


def test_a_model_that_is_not_a_string_and_deep_nesting_are_input_errors(cli, tmp_path):
    record = json.loads(SAMPLE_LINES[0])
    record["request"]["model"] = 12345
    trace = tmp_path / "m.jsonl"
    trace.write_text(json.dumps(record) + "\n")
    res = cli("report", trace)
    assert res.exit_code == 2 and "m.jsonl:1" in res.output and "request.model" in res.output
    record = json.loads(SAMPLE_LINES[0])
    record["metadata"] = _deep(300)  # an unknown key: kept, but no JSON writer goes that deep
    trace.write_text(json.dumps(record) + "\n")
    res = cli("import", trace, "-o", tmp_path / "out.jsonl")
    assert res.exit_code == 2 and "m.jsonl:1" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out.jsonl").exists()
