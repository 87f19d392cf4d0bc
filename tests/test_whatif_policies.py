"""A fix as a policy (kvprobe/whatif/policies.py): its JSON as docs/contracts.md lists `fixes[]` (savings to
0.1 input-equivalent and to the micro-dollar, null where unpriced, `requires` only when it has any, its reach
in words), its label, and how an edit reaches records and skeletons (a keep-alive copy takes the edits of the
request it copies; a record or skeleton without a body is left as it is). Figures are written by hand."""
from __future__ import annotations

from kvprobe.analysis.skeleton import BlockStore, skeletons
from kvprobe.trace import TraceRecord
from kvprobe.whatif.policies import Instance, Policy, map_records, map_skeletons, origin


def policy(kind: str = "ttl_1h", **changes) -> Policy:
    fields = dict(kind=kind, key="pauses of main", detail="use 1h entries", requests=["r2", "r5"],
                  sessions={"s1", "s2"}, reshape=lambda sks: sks, rewrite=lambda recs: recs)
    fields.update(changes)
    return Policy(**fields)


def test_an_instance_is_one_sessions_share_of_the_saving_rounded_as_the_contract_says():
    assert Instance("s1", 3, 1_234.56789, 0.123456789).to_json() == {
        "session": "s1", "edited_requests": 3, "saving_input_equivalent_tokens": 1_234.6, "saving_usd": 0.123457}
    assert Instance("s2", 0, 12.04, None).to_json() == {
        "session": "s2", "edited_requests": 0, "saving_input_equivalent_tokens": 12.0, "saving_usd": None}


def test_a_policys_json_lists_every_field_and_requires_only_when_it_has_any():
    base = policy("stabilize_prefix", key="system[0]", extra={"path": "system[0]"}, cause_sessions=3,
                  saving_input_equivalent_tokens=40_480.25, saving_usd=0.12144075, edited_requests=12,
                  instances=[Instance("s1", 6, 20_240.125, None)])
    assert base.to_json() == {
        "kind": "stabilize_prefix", "key": "system[0]", "requests": ["r2", "r5"],
        "saving_input_equivalent_tokens": 40_480.2, "saving_usd": 0.121441, "detail": "use 1h entries",
        "edited_requests": 12,
        "reach": {"sessions": 2, "sessions_with_cause": 3, "edited_requests": 12,
                  "text": "2 of 3 sessions, 12 requests edited"},
        "instances": [{"session": "s1", "edited_requests": 6, "saving_input_equivalent_tokens": 20_240.1,
                       "saving_usd": None}],
        "path": "system[0]"}
    on_top = policy("keep_alive", key="pauses of s1", requires=[base], saving_usd=None,
                    saving_input_equivalent_tokens=1_000.05, extra={"pings": 4})
    data = on_top.to_json()
    assert (data["requires"], data["saving_usd"], data["saving_input_equivalent_tokens"], data["pings"]) == (
        ["stabilize_prefix (system[0])"], None, 1_000.0, 4)
    assert data["reach"]["text"] == "2 of 2 sessions, 0 requests edited"


def test_a_label_names_the_variant_path_or_parameter_it_changes():
    assert policy("shared_breakpoint", extra={"variant": "stagger", "path": "messages[0]"}).label == \
        "shared_breakpoint (stagger)"
    assert policy("stable_params", extra={"param": "tool_choice"}).label == "stable_params (tool_choice)"
    assert policy("ttl_1h").label == "ttl_1h"


def test_a_keep_alive_copy_is_the_request_it_was_made_from():
    assert [origin(i) for i in ("r1", "r1+keepalive3", "r1+keepalive1+keepalive2", "a b+keepalive1")] == \
        ["r1", "r1", "r1", "a b"]


def rec(rid: str, session: str, body: dict | None) -> TraceRecord:
    return TraceRecord(id=rid, provider="anthropic", started_at=float(len(rid)), request=body, session=session,
                       response=None if body else {"usage": {"input_tokens": 5, "output_tokens": 1}})


BODY = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


def test_an_edit_reaches_the_named_requests_and_their_keep_alive_copies_only():
    records = [rec("r1", "s", BODY), rec("r1+keepalive1", "s", BODY), rec("r2", "s", BODY), rec("u1", "s", None)]
    seen: list[str] = []

    def edit(r: TraceRecord) -> TraceRecord | None:
        seen.append(r.id)
        return None if r.id == "r1+keepalive1" else TraceRecord(id=r.id + "!", provider="anthropic", started_at=0.0)

    out = map_records(records, {"r1"}, edit)
    assert seen == ["r1", "r1+keepalive1"]
    assert [r.id for r in out] == ["r1!", "r1+keepalive1", "r2", "u1"]  # None: the record as it was
    seen.clear()
    assert [r.id for r in map_records(records, None, edit)] == ["r1!", "r1+keepalive1", "r2!", "u1"]
    assert seen == ["r1", "r1+keepalive1", "r2"]  # a record without a body is never edited


def test_a_skeleton_edit_skips_requests_without_a_body_and_keeps_what_it_declines():
    sks = list(skeletons([rec("r1", "s1", BODY), rec("u1", "s1", None), rec("r2", "s2", BODY)], BlockStore()))
    seen: list[str] = []

    def edit(sk):
        seen.append(sk.id)
        return None

    out = map_skeletons(sks, edit)
    assert seen == ["r1", "r2"] and all(a is b for a, b in zip(out, sks)) and len(out) == 3
