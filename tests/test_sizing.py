"""Block sizes anchored on logged usage: each request's blocks add up to what the provider counted, and the
blocks a request took over from the one before keep the sizes they were given there.

The figures below are the logged usage of a hand-written session, not anything kvprobe computed: request 1
counted 1,000 input tokens, request 2 1,500 and request 3 2,100, so the blocks new in request 2 must share
exactly 500 tokens and those new in request 3 exactly 600, whatever the estimator says of their text.
"""
from __future__ import annotations

from kvprobe.analysis.simulate import simulate
from kvprobe.analysis.skeleton import BlockStore, skeletons
from kvprobe.analysis.sizing import BlockSizer
from kvprobe.trace import TraceRecord

SYSTEM = " ".join(f"rule{i}" for i in range(300))
TURNS = [" ".join(f"{tag}{i}" for i in range(n)) for tag, n in
         (("ask", 150), ("answer", 180), ("again", 120), ("reply", 200), ("more", 160))]
INPUTS = (1_000, 1_500, 2_100)  # logged input tokens of requests 1, 2 and 3


def _messages(count: int, marked: bool) -> list[dict]:
    messages = []
    for i, text in enumerate(TURNS[:count]):
        block = {"type": "text", "text": text}
        if marked and i == count - 1:  # the breakpoint moves to the newest message each turn
            block["cache_control"] = {"type": "ephemeral"}
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": [block]})
    return messages


def _session(marked: bool) -> list[TraceRecord]:
    records = []
    for n, total in enumerate(INPUTS):
        body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": SYSTEM,
                "messages": _messages(2 * n + 1, marked)}
        if marked:  # all through the breakpoint is read or written; nothing after it
            read = INPUTS[n - 1] if n else 0
            usage = {"input_tokens": 0, "cache_read_input_tokens": read,
                     "cache_creation_input_tokens": total - read, "output_tokens": 10}
        else:
            usage = {"input_tokens": total, "output_tokens": 10}
        records.append(TraceRecord(id=f"r{n + 1}", provider="anthropic", started_at=1_760_000_000.0 + 60 * n,
                                   request=body, response={"usage": usage}, session="s"))
    return records


def _sizes(records: list[TraceRecord]) -> list[list[int]]:
    store = BlockStore()
    sks = list(skeletons(records, store))
    assert [sk.request.shared_prefix > 0 for sk in sks] == [False, True, True]  # requests 2, 3 take blocks over
    results = simulate(sks, store, BlockSizer())
    assert [r.tokens_source for r in results] == ["observed"] * 3  # anchored, not estimated
    return [[b.tokens for b in sk.request.blocks] for sk in sks]


def test_each_request_adds_up_to_its_logged_input_and_keeps_earlier_sizes():
    for marked in (False, True):
        sizes = _sizes(_session(marked))
        assert [sum(s) for s in sizes] == list(INPUTS)
        assert sizes[1][: len(sizes[0])] == sizes[0]  # taken over from request 1, unchanged
        assert sizes[2][: len(sizes[1])] == sizes[1]
        assert sum(sizes[1][len(sizes[0]):]) == 500 and sum(sizes[2][len(sizes[1]):]) == 600


def test_sizes_do_not_depend_on_a_request_taking_over_its_predecessors_blocks():
    # The same requests rendered each on its own (no stream to take blocks over from): the same sizes.
    together = _sizes(_session(marked=True))
    store = BlockStore()
    records = _session(marked=True)
    sks = [sk for rec in records for sk in skeletons([rec], store)]  # a fresh renderer per record
    assert all(sk.request.shared_prefix == 0 for sk in sks)
    simulate(sks, store, BlockSizer())
    assert [[b.tokens for b in sk.request.blocks] for sk in sks] == together
