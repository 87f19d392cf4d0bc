"""A pricing replay drops the cache entries no later request can read, and every figure stays the same.

Rule (docs/caching-rules.md; providers/anthropic.toml, providers/gemini.toml): an entry is gone at exactly its
lifetime after the last request that used it (Anthropic's default 5 minutes; Gemini's implicit cache, as
kvprobe assumes it, 1 hour), and a request that finds none writes again. The what-if's replay
(`analysis.simulate.replay`) steps the log in start order and now forgets expired entries as it goes (every
`SWEEP_EVERY` requests; here before every request), so its memory holds the entries alive, not every entry
the log ever wrote. Each case is a session written by hand, with block sizes set on the rendered requests,
and its expected reads and writes are arithmetic on the rule above: the replay that forgets and the
simulation that keeps everything must both give them.
"""
from __future__ import annotations

import pytest

from kvprobe.analysis import simulate as simulate_module
from kvprobe.analysis.simulate import replay, simulate
from kvprobe.analysis.skeleton import Skeleton
from test_openai_breakpoints import sized

EPH = {"type": "ephemeral"}
FLASH = "/v1beta/models/gemini-2.5-flash:generateContent"


def claude(question: str):
    """A marked system prompt of 2,000 tokens and a marked question of 100 (Sonnet 4.5's minimum: 1,024)."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100,
            "system": [{"type": "text", "text": "You review pull requests.", "cache_control": EPH}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": question, "cache_control": EPH}]}]}
    return sized(body, [2_000, 100])


def gemini(question: str):
    """A system instruction of 2,048 tokens (Gemini 2.5 Flash's minimum) and a question of 10."""
    body = {"systemInstruction": {"parts": [{"text": "You review pull requests."}]},
            "contents": [{"role": "user", "parts": [{"text": question}]}]}
    return sized(body, [2_048, 10], endpoint=FLASH)


def log(requests: list[tuple[float, object]]) -> list[Skeleton]:
    out = []
    for order, (at, req) in enumerate(requests):
        out.append(Skeleton(f"r{order + 1}", order, "s1", "main", req.provider, req.model, at, at + 1.0, at + 2.0,
                            None, req))
    return out


# (start, request) -> (read, written) of each request
CLAUDE = [
    (0, claude("Q1"), 0, 2_100),       # cold: both breakpoints written
    (400, claude("Q2"), 0, 2_100),     # the system entry expired at 300: written again
    (500, claude("Q3"), 2_000, 100),   # r2's system entry lives until 700
    (800, claude("Q1"), 0, 2_100),     # refreshed by r3 until 800: gone at exactly 800; Q1's since 300
    (1_000, claude("Q1"), 2_100, 0),   # everything r4 wrote lives until 1,100
]
GEMINI = [
    (0, gemini("Q1"), 0, 0),           # an implicit cache reads and stores; nothing is billed as written
    (3_600, gemini("Q2"), 0, 0),       # stored at 0, kept 1 hour: gone at exactly 3,600
    (3_700, gemini("Q3"), 2_048, 0),   # stored again by r2 at 3,600
    (7_400, gemini("Q3"), 0, 0),       # last used at 3,700: gone at 7,300
]


@pytest.mark.parametrize("case", [CLAUDE, GEMINI], ids=["anthropic", "gemini-implicit"])
def test_a_replay_that_forgets_expired_entries_reads_and_writes_as_one_that_keeps_them(monkeypatch, case):
    expected = [(read, written) for _, _, read, written in case]
    kept = simulate(log([(at, req) for at, req, _, _ in case]), presized=True, ideal=False)
    monkeypatch.setattr(simulate_module, "SWEEP_EVERY", 1)
    forgot = list(replay(log([(at, req) for at, req, _, _ in case])))
    for results in (kept, forgot):
        assert [(r.usage.cache_read_tokens, r.usage.cache_write_tokens) for r in results] == expected


def test_the_replay_keeps_only_the_entries_still_alive(monkeypatch):
    """At 800 s, r2's question entry (until 700) and r3's (written at 500: gone at exactly 800) are dropped; the
    two entries r4 wrote at 800 (the system prompt and Q1, until 1,100) are all the cache holds."""
    monkeypatch.setattr(simulate_module, "SWEEP_EVERY", 1)
    sim = simulate_module.Simulator(presized=True, ideal=False)
    for sk in log([(at, req) for at, req, _, _ in CLAUDE[:4]]):
        sim.forget_expired(sk.started_at)
        sim.step(sk)
    sim.forget_expired(800.0)
    (cache,) = sim.caches.values()
    assert sorted(e.expires_at for e in cache.entries.values()) == [1_100.0, 1_100.0]


def test_an_implicit_cache_forgets_a_prefix_at_exactly_its_retention():
    """Gemini: r1 stores its two prefixes at 0 (kept until 3,600), r2 stores the system prefix again and its own
    question at 3,600 (until 7,200). At 3,600 r1's question prefix is gone at exactly its retention."""
    sim = simulate_module.Simulator(presized=True, ideal=False)
    for sk in log([(at, req) for at, req, _, _ in GEMINI[:2]]):
        sim.step(sk)
    sim.forget_expired(3_600.0)
    (cache,) = sim.caches.values()
    assert sorted(e.expires_at for e in cache.entries.values()) == [7_200.0, 7_200.0]
