"""Which simulated cache a request reads and writes (kvprobe.sim.cache_for / cache_name), checked on traces.

Rules (docs/caching-rules.md):
- Claude's cache is isolated per workspace (the Claude API) or organisation (Bedrock, Vertex): a request
  served by one platform never reads what another platform's request wrote;
- GPT-5.6 and later write and read entries at breakpoints, in implicit (managed) and explicit mode alike, and
  the two modes share their entries; the models before GPT-5.6 keep the implicit prefix cache, with no write;
- a request of a single block is cached like any other: its breakpoint writes exactly its tokens.

Block sizes are kvprobe's estimate here (the figures asserted are relations between them, or a block's own
size), as in test_simulator_rules.
"""
from __future__ import annotations

from kvprobe.probe.cases import build_cases
from kvprobe.probe.runner import estimate
from kvprobe.trace import TraceRecord
from test_run_probe import NOTES
from test_simulator_rules import ant_usage, by_id, claude, rec, run, sizes, words


def served_by(platform: str, rid: str, start: float, body: dict, usage: dict) -> TraceRecord:
    record = rec(rid, start, body, usage)
    record.extra["platform"] = platform
    return record


def test_claude_served_by_bedrock_never_reads_what_vertex_wrote():
    body = claude()
    total = sizes(body)[1]
    report = run([served_by("vertex", "v1", 0, body, ant_usage(write=total)),
                  served_by("bedrock", "b1", 10, body, ant_usage(write=total)),
                  served_by("bedrock", "b2", 20, body, ant_usage(read=total))])
    v1, b1, b2 = (by_id(report)[rid].predicted for rid in ("v1", "b1", "b2"))
    assert (v1.cache_write_tokens, b1.cache_read_tokens, b1.cache_write_tokens) == (total, 0, total)
    assert b2.cache_read_tokens == total  # the same organisation reads its own entry


def responses(question: str, mode: str | None = None) -> dict:
    dev = {"type": "input_text", "text": words(2000), "prompt_cache_breakpoint": {"mode": "explicit"}}
    body = {"model": "gpt-5.6-sol", "input": [{"role": "developer", "content": [dev]},
                                              {"role": "user", "content": [{"type": "input_text", "text": question}]}]}
    if mode:
        body["prompt_cache_options"] = {"mode": mode}
    return body


def test_gpt_5_6_explicit_mode_reads_the_entry_an_implicit_mode_request_wrote_at_the_same_breakpoint():
    report = run([rec("m1", 0, responses("one?"), {"input_tokens": 10}),
                  rec("e1", 60, responses("two?", mode="explicit"), {"input_tokens": 10})])
    m1, e1 = by_id(report)["m1"], by_id(report)["e1"]
    developer = m1.sk.request.blocks[0].tokens
    assert e1.predicted.cache_read_tokens == developer > 1_024


def test_a_gpt_5_6_request_after_an_older_models_writes_at_its_breakpoint():
    """gpt-4.1's prefix cache has no write; the GPT-5.6 request after it writes its whole prompt at the
    managed breakpoint (the end of its last message), whichever cache the trace used first."""
    def chat(model: str) -> dict:
        return {"model": model, "messages": [{"role": "system", "content": words(2000)},
                                             {"role": "user", "content": "Fix the login bug."}]}
    report = run([rec("o1", 0, chat("gpt-4.1"), {"prompt_tokens": 10}),
                  rec("n1", 10, chat("gpt-5.6-sol"), {"prompt_tokens": 10})])
    o1, n1 = by_id(report)["o1"], by_id(report)["n1"]
    assert o1.predicted.cache_write_tokens == 0
    prompt = sum(b.tokens for b in n1.sk.request.blocks)
    assert n1.predicted.cache_write_tokens == prompt > 1_024


def test_a_request_of_one_block_writes_exactly_its_tokens():
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10,
            "messages": [{"role": "user", "content": [{"type": "text", "text": words(2000),
                                                       "cache_control": {"type": "ephemeral"}}]}]}
    total = sizes(body)[1]
    report = run([rec("a", 0, body, ant_usage(write=total)), rec("b", 10, body, ant_usage(read=total))])
    [block] = by_id(report)["a"].sk.request.blocks
    assert block.tokens == total > 1_024
    assert (by_id(report)["a"].predicted.cache_write_tokens, by_id(report)["b"].predicted.cache_read_tokens) == (
        total, total)


def test_the_probe_estimate_for_claude_reads_the_marked_document_not_the_whole_request():
    """run-probe's four requests mark the document (the system prompt) and not the question: request 2 and 3
    read the document, 4 (changed at its start) reads nothing; request 1 writes the document."""
    est = estimate(build_cases(NOTES.read_text(), "anthropic", "claude-sonnet-4-5", "run123"), "anthropic",
                   "claude-sonnet-4-5")
    document = est.prefix_tokens
    assert [p["cache_read_tokens"] for p in est.predicted] == [0, document, document, 0]
    assert est.predicted[0]["cache_write_tokens"] == document
    assert est.predicted[1]["fresh_input_tokens"] == est.predicted[0]["fresh_input_tokens"] > 0  # the question
