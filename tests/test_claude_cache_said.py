"""What a Claude Code log says about its own caching, read as the cause it is: `promptCacheRequested` on each
response line (2.1.33x: "5m", "1h", or "off" where DISABLE_PROMPT_CACHING switched caching off) and the
`api-request-route` lines of 2.1.337 (`provider`: anthropic, customEndpoint, bedrock, vertex, foundry, …).

The transcripts are written here by hand, line for line as Claude Code 2.1.337 writes them (the field names and
values of a real run against `kvprobe serve`: tests/test_real_agents.py). Prices are Claude Sonnet 4.5's list
prices, worked out by hand: $3 / M input, $3.75 / M 5-minute writes, $15 / M output; Bedrock's list for it is
the same. Figures in the comments are the expected ones.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kvprobe.importers import ImportReport, load_any
from kvprobe.report import build_report

SONNET = "claude-sonnet-4-5"
T0 = 1_770_000_000.0
CACHING_OFF_ADVICE = ("DISABLE_PROMPT_CACHING (or DISABLE_PROMPT_CACHING_HAIKU / _SONNET / _OPUS) in the "
                      "environment or settings.json switches prompt caching off for every request or for one "
                      "model; unset it")


def _assistant(uuid: str, parent: str, msg_id: str, second: int, said: str | None = None) -> dict[str, Any]:
    line = {"parentUuid": parent, "isSidechain": False, "type": "assistant", "sessionId": "s1", "uuid": uuid,
            "timestamp": f"2026-12-01T10:00:{second:02d}.000Z", "requestId": f"req_{uuid}",
            "message": {"id": msg_id, "model": SONNET, "usage": {
                "input_tokens": 10, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 2_000,
                "output_tokens": 5}}}
    if said is not None:
        line["promptCacheRequested"] = said
    return line


def _route(provider: str, credential: str = "cloud") -> dict[str, Any]:
    return {"type": "api-request-route", "provider": provider, "credential": credential, "sessionId": "s1"}


def _folder(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    projects = tmp_path / "projects"
    (projects / "p").mkdir(parents=True)
    (projects / "p" / "s1.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return projects


ROUTED = [
    _route("bedrock"),
    {"parentUuid": None, "isSidechain": False, "type": "user", "sessionId": "s1", "uuid": "u1",
     "timestamp": "2026-12-01T10:00:00.000Z", "message": {"role": "user", "content": "hi"}},
    _assistant("a1", "u1", "msg_01A", 1, said="1h"),  # routed through Bedrock, an Anthropic-style id
    _assistant("a2", "a1", "msg_bdrk_01B", 2),  # Bedrock's own id (and still the bedrock route)
    _route("unrecorded"),  # Claude Code did not record the route: nothing is said from here on
    _assistant("a3", "a2", "msg_01C", 3, said="off"),
    _route("foundry"),
    _assistant("a4", "a3", "msg_01D", 4),
    _route("anthropic", "login"),  # signed in with a Claude.ai account: the plan pays, not an API key
    _assistant("a5", "a4", "msg_01E", 5),
    _assistant("a5", "a4", "msg_01E", 6),  # its second content block: the same request
]


def test_each_response_carries_the_caching_it_asked_for_and_the_route_its_request_took(tmp_path):
    report = ImportReport()
    records = {r.id: r for r in load_any(_folder(tmp_path, ROUTED), report=report)}
    said = {rid: (r.extra.get("cache_requested"), r.extra.get("route"), r.extra.get("platform"))
            for rid, r in records.items()}
    assert said == {"req_a1": ("1h", "bedrock", "bedrock"), "req_a2": (None, "bedrock", "bedrock"),
                    "req_a3": ("off", None, None), "req_a4": (None, "foundry", "foundry"),
                    "req_a5": (None, "anthropic", None)}
    # Foundry has no rules or prices in providers/: said, not hidden
    assert ("1 request served through Microsoft Foundry: priced and ruled as the provider's own API — a caveat: "
            "Microsoft Foundry's prices and cache rules are not in providers/") in report.summary()
    # the file says requests went with a Claude account login: their dollars are the API's, not the plan's
    assert report.to_json()["account_login_files"] == 1
    assert ("1 file says requests went with a Claude account login (a Claude.ai plan pays for them, not an API "
            "key): their dollars are what the API would charge at list prices, not what the plan bills") \
        in report.summary()


def test_a_login_is_said_per_file_whichever_way_the_files_are_read(tmp_path):
    """Two transcripts signed in with a Claude account, the second a resumed copy holding the first's request:
    two files say so, read in one process, in two, or with the rows an earlier run kept."""
    first = [_route("anthropic", "login"), _assistant("a1", "u0", "msg_01A", 1)]
    second = [_route("anthropic", "login"), _assistant("a1", "u0", "msg_01A", 1), _assistant("a2", "a1", "msg_01B", 2)]
    projects = tmp_path / "projects"
    (projects / "p").mkdir(parents=True)
    for name, lines in (("s1.jsonl", first), ("s2.jsonl", second)):
        (projects / "p" / name).write_text("".join(json.dumps(line) + "\n" for line in lines))
    said = []
    for args in (["--no-cache"], [], [], ["--no-cache", "--workers", "2"]):  # read, kept, read again, two processes
        done = subprocess.run([sys.executable, "-m", "kvprobe", "usage", str(projects), "--json", *args],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "KVPROBE_CACHE_DIR": str(tmp_path / "cache")})
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)["import"]
        said.append((got["records"], got["duplicates"], got["account_login_files"]))
    assert said == [(2, 1, 2)] * 4


def test_usage_prices_a_request_routed_through_bedrock_as_bedrock_serves_it(tmp_path):
    folder = _folder(tmp_path, ROUTED[:5] + [_assistant("a3", "a2", "msg_01C", 3)])
    done = subprocess.run([sys.executable, "-m", "kvprobe", "usage", str(folder), "--json", "--no-cache"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = {row["platform"]: (row["requests"], row["cost_usd"]) for row in json.loads(done.stdout)["by_model"]}
    # each request: 10 x $3/M + 2,000 x $3.75/M + 5 x $15/M = $0.007605; a1 and a2 on Bedrock, a3 first-party
    assert rows == {"bedrock": (2, 0.01521), None: (1, 0.007605)}


def _rec(rid: str, t: float, read: int, write: int, said: str | None = None, route: str | None = None,
         fresh: int = 3, w1h: int = 0) -> dict[str, Any]:
    """A usage-only record of a Claude Code log (kvprobe's trace format, as the importer writes it)."""
    usage = {"input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
             "cache_creation": {"ephemeral_5m_input_tokens": write - w1h, "ephemeral_1h_input_tokens": w1h},
             "output_tokens": 50}
    out = {"id": rid, "session": "s", "provider": "anthropic", "started_at": T0 + t, "source_format": "claude_code",
           "response": {"model": SONNET, "usage": usage}}
    if said is not None:
        out["cache_requested"] = said
    if route is not None:
        out["route"] = route
    return out


def _report(tmp_path: Path, *records: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "usage.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return build_report([str(path)], fixes=False).to_json()


def _causes(rep: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    return {row["id"]: [(d["kind"], d["detail"]) for d in row["diagnoses"]] for row in rep["requests"]}


def test_the_ttl_a_request_asked_for_is_the_lifetime_of_what_it_left(tmp_path):
    # r1 reads 20,000 another session wrote and writes nothing: its own writes show no lifetime. It asked for 1h,
    # so r2, 20 min later, is within the entry's life: reading nothing there is no expiry (nothing in the log
    # says why). r3, 1h10m after r2 (which asked for 1h too), is past it: an expiry of 10 min against 1h.
    rep = _report(tmp_path, _rec("r1", 0, read=20_000, write=0, said="1h"),
                  _rec("r2", 1_200, read=0, write=20_100, said="1h", w1h=20_100),
                  _rec("r3", 1_200 + 4_200, read=0, write=20_200, said="1h", w1h=20_200))
    causes = _causes(rep)
    assert [k for k, _ in causes["r2"]] == ["unexplained"]
    assert causes["r3"] == [("ttl_expired", "1h10m since r2 started; the entry lives 1h00m (the 1h TTL the log "
                                            "says the request asked for)")]
    # The same log saying nothing of what it asked for: r1's entry lives the default 5 minutes, so r2 is an expiry
    rep = _report(tmp_path, _rec("r1", 0, read=20_000, write=0),
                  _rec("r2", 1_200, read=0, write=20_100, w1h=20_100))
    assert _causes(rep)["r2"][0][0] == "ttl_expired"


def test_requests_the_log_says_went_with_caching_off_are_no_miss_but_a_bill_with_the_setting_named(tmp_path):
    # two requests of 20,003 input tokens each (3 fresh + 20,000 written by the first as a cold start, then both
    # off): the first cached; the second and third went with caching off, read and wrote nothing
    rep = _report(tmp_path, _rec("r1", 0, read=0, write=20_000, said="5m"),
                  _rec("r2", 10, read=0, write=0, fresh=20_003, said="off"),
                  _rec("r3", 20, read=0, write=0, fresh=20_003, said="off"))
    assert _causes(rep) == {"r1": [], "r2": [], "r3": []}
    assert (f"2 of 3 Claude Code requests to {SONNET} (40,006 input tokens), each long enough to cache, were sent "
            f"with prompt caching off (the log says so) and read and wrote no cache: {CACHING_OFF_ADVICE}") \
        in rep["notes"]
    # fresh input: 3 + 20,003 + 20,003 = 40,009 tokens at $3/M, $0.120027, of a bill of $0.120027 + 20,000 x
    # $3.75/M ($0.075) + 150 x $15/M ($0.00225) = $0.197277: most of it, and most of that went with caching off
    assert rep["bill"]["headline"] == (
        "Misses wasted $0.0000 of $0.1973 (0.0%); 61% is input sent without the cache: most of it was sent with "
        "prompt caching off (the log says so): the notes below name the setting.")


def test_a_request_sent_with_caching_off_changes_nothing_for_the_next_ones(tmp_path):
    """It neither left nor refreshed an entry: the next request of its stream is explained against the one
    before it, as if it were not there, with the events the log showed before it."""
    r1 = _rec("r1", 0, read=0, write=20_000, said="5m")
    # r3, 20 s after r1, reads nothing and writes it all again: a miss whether or not r2 went between
    off = _rec("r2", 10, read=0, write=0, fresh=20_003, said="off")
    r3 = _rec("r3", 20, read=0, write=20_000, said="5m")
    without, with_off = _causes(_report(tmp_path, r1, r3)), _causes(_report(tmp_path, r1, off, r3))
    assert [k for k, _ in with_off["r3"]] == ["unexplained"] and with_off["r3"] == without["r3"]
    assert with_off["r2"] == []
    # r3' 400 s after r1 (r2 off at 200 s): r1's entry expired, as it would have without r2
    late_off, late = dict(off, started_at=T0 + 200), dict(r3, started_at=T0 + 400)
    expired = _causes(_report(tmp_path, r1, late_off, late))["r3"]
    assert expired == _causes(_report(tmp_path, r1, late))["r3"]
    assert expired[0] == ("ttl_expired", "6m40s since r1 started; the entry lives 5m00s (the default)")
    # what the log showed before r2 is named for r3
    events = [{"kind": "tools_changed"}]
    named = _causes(_report(tmp_path, r1, dict(off, events=events), r3))["r3"]
    assert named[0][0] == "prefix_changed" and "the tool list changed" in named[0][1]


def test_the_bill_names_caching_off_only_where_a_note_does(tmp_path):
    """Requests said off but too short to cache (under Sonnet's 1,024-token minimum) went fresh for their size,
    not the setting: no note, and the bill's first line does not point at one."""
    short = [_rec(f"s{i}", 10 * i, read=0, write=0, fresh=800, said="off") for i in range(3)]
    rep = _report(tmp_path, *short)
    assert not [n for n in rep["notes"] if "caching off" in n]
    assert "caching off" not in rep["bill"]["headline"]


def test_caching_asked_for_through_a_gateway_that_cached_nothing_names_the_endpoint_not_the_setting(tmp_path):
    # three requests over the minimum asked for 5m caching through a custom endpoint and read and wrote nothing
    gateway = [_rec(f"g{i}", 10 * i, read=0, write=0, fresh=5_000, said="5m", route="customEndpoint")
               for i in range(3)]
    notes = _report(tmp_path, *gateway)["notes"]
    routed = [n for n in notes if "asked for caching (the log says so)" in n]
    assert routed == [f"3 of 3 Claude Code requests to {SONNET} (15,000 input tokens), each long enough to cache, "
                      "asked for caching (the log says so) but read and wrote no cache: the requests went through a "
                      "custom endpoint or LLM gateway (ANTHROPIC_BASE_URL) that cached nothing: check that it "
                      "forwards the body's cache_control and the anthropic-beta and anthropic-version headers to "
                      "the provider and keeps a session on one provider account and region, or point Claude Code "
                      "at the provider directly"]
    # the same straight to Anthropic's API: the log says caching was on, so it is not "looks switched off", and
    # nothing in it says why nothing was cached: no note claims a cause
    direct = [_rec(f"d{i}", 10 * i, read=0, write=0, fresh=5_000, said="5m", route="anthropic") for i in range(3)]
    assert not [n for n in _report(tmp_path, *direct)["notes"] if "no cache" in n]
    # and saying nothing, as logs before 2.1.33x: caching looks switched off (the inference, worded as one)
    silent = [_rec(f"q{i}", 10 * i, read=0, write=0, fresh=5_000) for i in range(3)]
    assert [n for n in _report(tmp_path, *silent)["notes"] if "looks switched off" in n]
