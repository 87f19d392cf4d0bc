"""Which fleets get the longer lifetime on their shared prefix (whatif/propose_fleet.py), in logs of several
products, each product a fleet of its own.

The rule (docs/caching-rules.md, providers/anthropic.toml's `longer_lifetime`): where sessions start further
apart than entries live (gone at exactly their lifetime), the breakpoint that ends their shared prefix gets the
provider's longer lifetime (Anthropic: "ttl": "1h", 3,600 s, writes at 2x input) when that outlives the gap, so
each session's first request reads the entry the one before kept alive. Not for a provider with no such
breakpoint setting, nor for what a lifetime does not fix: tools in another order or an identity parameter
(per-session fixes), a volatile span no move can take out.

Each product's session sends its own 6 tools (1,800 tokens by the usage below) and a 1,400-token system text
that names the customer ("You are the support agent of Quill."), marked at its end, then a 100-token question:
the first request writes 3,200 tokens and sends 100 fresh (4,100 input equivalents); a second request 10 s
later reads the 3,200 and sends 250 fresh. Product "y" is smaller: no tools, a 1,200-token system text, three
sessions 600 s apart (each writes the 1,200 again). With the 1h lifetime its first session writes them at 2x
instead of 1.25x (+900) and the other two read them at 0.1x (-1,380 each): 2 x 1,380 - 900 = 1,860 saved.
"""
from __future__ import annotations

import pytest

from kvprobe.pricing import PriceBook
from kvprobe.report import build_report
from kvprobe.trace import TraceRecord

EPH = {"type": "ephemeral"}
T0 = 1_790_000_000.0
NAMES = ["Quill", "Birch", "Ferrox", "Lumen", "Otter", "Piston", "Cobalt", "Marrow", "Sable", "Tundra", "Vesper",
         "Wicket"]
VOCAB = ("reply politely check the order history before you answer and never promise a refund that the policy "
         "does not allow").split()
Y_SAVING = 2 * 1_380 - 900  # product y's fleet lifetime, by hand (module docstring)


def words(n: int, tag: str) -> str:
    return " ".join([tag] + [VOCAB[(i * 5 + len(tag)) % len(VOCAB)] for i in range(n - 1)])


def anthropic_usage(read: int, write: int, fresh: int) -> dict:
    return {"type": "message", "usage": {
        "input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
        "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0}, "output_tokens": 20}}


def session(product: str, k: int, gap: float, *, name: str = "Quill", date: str | None = None,
            order: list[int] | None = None, thinking: int | None = None, requests: int = 1,
            offset: float = 0.0, clock: bool = False, end_unmarked: bool = False) -> list[TraceRecord]:
    """Session k of `product`, started `gap` s after its session k - 1. `name`: the customer in the system
    text; `date`: a date at its end too; `order`: the tools in this order; `thinking`: a thinking budget (and
    the same question in every session, so the sessions differ in the parameter only); `clock`: the question
    opens with the time, marked in the first request, and the second request sends it with the time moved on
    (r1 writes 3,300, r2 reads the 3,200 before it and writes 250); `end_unmarked`: the system text is not
    marked, the question is (one request: it writes 3,300)."""
    tools = [{"name": f"{product}{j}", "description": words(290, f"{product}tool{j}"),
              "input_schema": {"type": "object"}} for j in range(6)]
    tools = [tools[j] for j in order] if order else tools
    text = f"You are the support agent of {name}. " + words(1_390, f"{product}policy") \
        + (f" Today is {date}." if date else "")
    system = [{"type": "text", "text": text, "cache_control": EPH}]
    first = [{"role": "user", "content": words(100, f"{product}question{0 if thinking else k}")}]
    second = first + [{"role": "assistant", "content": words(50, f"{product}answer{k}")},
                      {"role": "user", "content": words(100, f"{product}again{k}")}]
    start = T0 + offset + gap * k
    turns = [(first, anthropic_usage(0, 3_200, 100)), (second, anthropic_usage(3_200, 0, 250))]
    if clock:
        asked = [{"type": "text", "text": f"It is 10:0{t} now. " + words(95, f"{product}question{k}")}
                 for t in (0, 1)]
        again = {"role": "user", "content": [{"type": "text", "text": words(100, f"{product}again{k}"),
                                              "cache_control": EPH}]}
        turns = [([{"role": "user", "content": [{**asked[0], "cache_control": EPH}]}], anthropic_usage(0, 3_300, 0)),
                 ([{"role": "user", "content": [asked[1]]}, second[1], again], anthropic_usage(3_200, 250, 0))]
    if end_unmarked:
        system = [{"type": "text", "text": text}]
        turns = [([{"role": "user", "content": [{"type": "text", "text": first[0]["content"], "cache_control": EPH}]}],
                  anthropic_usage(0, 3_300, 0))]
    out = []
    for i, (messages, usage) in enumerate(turns[:requests]):
        body = {"model": "claude-sonnet-4-5", "max_tokens": 512, "tools": tools, "system": system,
                "messages": messages, **({"thinking": {"type": "enabled", "budget_tokens": thinking + k}}
                                         if thinking else {})}
        out.append(TraceRecord(id=f"{product}{k:02d}-r{i + 1}", provider="anthropic", started_at=start + 10 * i,
                               request=body, response=usage, session=f"{product}{k:02d}", agent="main",
                               endpoint="/v1/messages", first_token_at=start + 10 * i + 1.5))
    return out


def small_session(k: int) -> TraceRecord:
    """Product y's session k: a 1,200-token system text (marked) and a 100-token question, 600 s apart."""
    start = T0 + 50 + 600 * k
    body = {"model": "claude-sonnet-4-5", "max_tokens": 512,
            "system": [{"type": "text", "text": words(1_200, "ypolicy"), "cache_control": EPH}],
            "messages": [{"role": "user", "content": words(100, f"yquestion{k}")}]}
    return TraceRecord(id=f"y{k:02d}-r1", provider="anthropic", started_at=start, request=body,
                       response=anthropic_usage(0, 1_200, 100), session=f"y{k:02d}", agent="main",
                       endpoint="/v1/messages", first_token_at=start + 1.5)


def openai_session(product: str, k: int, gap: float, provider: str = "openai", model: str = "gpt-4o"
                   ) -> TraceRecord:
    """One chat-completions request: a 1,400-word system message the sessions share, a question of its own."""
    start = T0 + gap * k
    body = {"model": model, "messages": [{"role": "system", "content": words(1_400, f"{product}policy")},
                                         {"role": "user", "content": words(100, f"{product}question{k}")}]}
    usage = {"prompt_tokens": 1_500, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 0}}
    return TraceRecord(id=f"{product}{k:02d}-r1", provider=provider, started_at=start, request=body,
                       response={"usage": usage} if provider != "local" else None, session=f"{product}{k:02d}",
                       agent="main", endpoint="/v1/chat/completions", first_token_at=start + 1.5)


def report(records: list[TraceRecord]) -> dict:
    return build_report([], records=records, fixes=True, prices=PriceBook()).to_json()


def test_the_lifetime_names_each_later_sessions_first_request_in_a_log_that_starts_with_another_provider():
    """An OpenAI request (whose longer lifetime is a retention setting, not a breakpoint's ttl) opens the log;
    the Anthropic fleet after it, 12 sessions 10 minutes apart, two requests each, gets the 1h lifetime from its
    own rules: session 1's r1 writes the 3,200 at 2x (+2,400), the other 11 first requests read them
    (-3,680 each), the r2s read either way: 11 x 3,680 - 2,400 = 38,080. The misses it answers are the first
    requests of sessions 2 to 12, in start order: not session 1's (nothing to read), not the r2s, not the
    other provider's."""
    records = [openai_session("o", 0, 0.0)] + [r for k in range(12) for r in session("q", k, 600, requests=2)]
    rep = report(records)
    [fix] = [f for f in rep["fixes"] if f["kind"] == "ttl_1h"]
    assert (fix["scope"], fix["path"], fix["shared_tokens"]) == ("fleet", "system[0]", 3_200)
    assert fix["saving_input_equivalent_tokens"] == pytest.approx(38_080, abs=0.5)
    assert fix["requests"] == [f"q{k:02d}-r1" for k in range(1, 12)]
    assert fix["reach"]["sessions"] == 12 and fix["edited_requests"] == 24


@pytest.mark.parametrize("provider, model, lifetime", [
    ("local", "smollm2-135m", None),  # kvprobe's own engine: the rules give no lifetime
    ("deepseek", "deepseek-chat", 3_600),  # an entry kept about an hour, no longer-lived setting
    ("openai", "gpt-4o", 600),  # a longer retention (24 h), but no breakpoint ttl to write
], ids=["no-lifetime", "no-longer-lifetime", "retention-not-ttl"])
def test_a_fleet_of_a_provider_without_a_breakpoint_lifetime_gets_none(provider, model, lifetime):
    """12 sessions two hours apart share a 1,400-word system message: a fleet, and every entry is gone when
    the next session starts, but there is no breakpoint ttl to lengthen: no lifetime fix."""
    rep = report([openai_session("p", k, 7_200, provider, model) for k in range(12)])
    [found] = rep["fleet"]
    assert found["sessions"] == 12 and found["median_gap_s"] == 7_200
    assert found["lifetime_s"] == lifetime
    assert found["fixes"] == [] and not [f for f in rep["fixes"] if f["kind"] == "ttl_1h"]


# Fleets of product x that get no lifetime, each in a log with product y after it (y's sessions start 50 s after
# x's, so the two interleave; x's sessions wrote more again than y's: its finding comes first): (sessions, gap,
# what each session of x is, the breaker the fleet finding names).
NO_LIFETIME = {
    # entries outlive the gaps (30 s): moving the name out is enough
    "within-the-lifetime": (12, 30, lambda k: {"name": NAMES[k]}, "volatile span"),
    # gone after 5 minutes, but the 1h entry is gone before the next session too (4,000 s apart)
    "longer-than-the-hour": (12, 4_000, lambda k: {}, "per-session content"),
    # the same tools, the last two swapped in every other session: the fix is one stable tool list
    "tool-list": (4, 600, lambda k: {"order": [0, 1, 2, 3] + ([4, 5] if k % 2 == 0 else [5, 4])}, "tool list"),
    # the same content, a thinking budget of the session's own: the fix is to hold the parameter
    "parameter": (4, 600, lambda k: {"thinking": 1_024}, "parameter"),
    # the customer's name at the start and a date at the end: two changing spans, a whole text apart, which
    # no move of one span takes out, so no session could read another's entry even for an hour
    "two-spans": (4, 600, lambda k: {"name": NAMES[k], "date": f"2026-12-{k + 1:02d}"}, "volatile span"),
}


@pytest.mark.parametrize("case", NO_LIFETIME)
def test_each_fleet_gets_the_lifetime_on_its_own_whatever_the_fleet_before_it(case):
    sessions, gap, each, breaker = NO_LIFETIME[case]
    records = [r for k in range(sessions) for r in session("x", k, gap, **each(k))] + \
        [small_session(k) for k in range(3)]
    rep = report(sorted(records, key=lambda r: r.started_at))
    x, y = rep["fleet"]
    assert (x["sessions"], x["median_gap_s"], x["breaker"]) == (sessions, gap, breaker)
    assert not [label for label in x["fixes"] if label.startswith("ttl_1h")]
    assert (y["sessions"], y["shared_tokens"], y["median_gap_s"]) == (3, 1_200, 600)
    assert y["fixes"] == ["ttl_1h (system[0])"]
    [fix] = [f for f in rep["fixes"] if f["kind"] == "ttl_1h"]
    assert fix["saving_input_equivalent_tokens"] == pytest.approx(Y_SAVING, abs=0.5)
    assert fix["requests"] == ["y01-r1", "y02-r1"] and fix["shared_tokens"] == 1_200


def test_a_fleet_whose_names_break_the_prefix_gets_the_move_and_the_lifetime_on_top_of_it():
    """12 sessions 10 minutes apart, one request each, each naming its own customer at the start of the system
    text (49,200 input equivalents). Moving the name (n tokens) out alone saves only what it no longer writes:
    every r1 writes 3,200 - n and sends n fresh, 0.25 n each, 3 n in all (no session can read another's entry:
    they start past its 5 minutes). With the 1h lifetime on top, session 1 writes 3,200 - n at 2x and sends
    100 + n fresh (6,500 - n), the other 11 read them (420 + 0.9 n each): 11,120 + 8.9 n in all, 38,080 -
    8.9 n saved, of which the lifetime's part is 38,080 - 11.9 n. Neither pays without the other's help but
    together they do: both are fixes."""
    rep = report([r for k in range(12) for r in session("x", k, 600, name=NAMES[k])])
    fixes = {f["kind"]: f for f in rep["fixes"]}
    assert sorted(fixes) == ["stabilize_prefix", "ttl_1h"]
    move, lifetime = fixes["stabilize_prefix"], fixes["ttl_1h"]
    assert move["path"] == lifetime["path"] == "system[0]" and lifetime["requires"] == ["stabilize_prefix (system[0])"]
    # n: the name and its full stop, 1 to 5 tokens
    assert 3 * 1 <= move["saving_input_equivalent_tokens"] <= 3 * 5
    assert 38_080 - 11.9 * 5 <= lifetime["saving_input_equivalent_tokens"] <= 38_080 - 11.9
    assert 11_120 + 8.9 <= rep["with_all_fixes"]["input_equivalent_tokens"] <= 11_120 + 8.9 * 5
    [found] = rep["fleet"]
    assert found["fixes"] == ["ttl_1h (system[0])"]


@pytest.mark.parametrize("names, requires", [
    (False, None),  # one customer: the sessions part at their own question, nothing to move first
    (True, ["stabilize_prefix (system[0])"]),  # the name moved out first, and only that
], ids=["per-session-content", "volatile-span"])
def test_the_lifetime_is_priced_on_top_of_the_move_that_ends_the_shared_prefix_and_no_other(names, requires):
    """12 sessions 10 minutes apart whose first user message opens with the time, which each second request
    moves on: each session has its own move of that time out of its question (messages[0]), besides the
    fleet's lifetime on the system text. The lifetime requires the move of what breaks the shared prefix (the
    customer's name in the system text, where names differ), never the moves inside a session's own content."""
    rep = report([r for k in range(12) for r in session("x", k, 600, name=NAMES[k] if names else "Quill",
                                                         requests=2, clock=True)])
    own = [f for f in rep["fixes"] if f["kind"] == "stabilize_prefix" and f["path"] == "messages[0].content[0]"]
    assert own  # the sessions' own moves are fixes too
    [lifetime] = [f for f in rep["fixes"] if f["kind"] == "ttl_1h"]
    assert lifetime.get("requires") == requires
    moves = [f for f in rep["fixes"] if f["kind"] == "stabilize_prefix" and f["path"] == "system[0]"]
    assert len(moves) == names  # the move it requires is a fix too (it saves nothing alone: sessions are apart)
    assert ("volatile span moved out first" in lifetime["detail"]) == names


DETAIL = ('the 12 sessions start 600s apart and entries live 300s: give the breakpoint that ends their shared '
          '{tokens}-token prefix (system[0]) the longer lifetime ("ttl": "1h"{marking}), so each session reads the '
          'entry the one before kept alive{moved}')


@pytest.mark.parametrize("each, marking, moved", [
    (lambda k: {}, "", ""),  # one customer, the system text marked: only its lifetime changes
    (lambda k: {"end_unmarked": True}, ", marking it", ""),  # the shared end has no breakpoint yet
    (lambda k: {"name": NAMES[k]}, "", " (with the volatile span moved out first)"),
], ids=["marked", "unmarked", "after-the-move"])
def test_the_fleets_lifetime_says_what_to_set_where_and_why(each, marking, moved):
    """12 sessions 10 minutes apart sharing tools and a system text (3,200 tokens): the fix names the gap, the
    lifetime, the shared prefix's end and size, the setting (providers/anthropic.toml), whether the breakpoint
    is to be added, and the move it comes after."""
    rep = report([r for k in range(12) for r in session("x", k, 600, **each(k))])
    [fix] = [f for f in rep["fixes"] if f["kind"] == "ttl_1h"]
    if marking:  # the 3,300 written through the question split by kvprobe's estimate: 3,200 within 1%
        tokens = fix["shared_tokens"]
        assert tokens == pytest.approx(3_200, rel=0.01)
    else:
        tokens = 3_200
    assert fix["detail"] == DETAIL.format(tokens=f"{tokens:,}", marking=marking, moved=moved)


def profile_session(k: int, model: str = "claude-sonnet-4-5", requests: int = 20) -> list[TraceRecord]:
    """Product p's session k (3 sessions, 600 s apart): 4 tools (1,200 tokens), a system text of a customer
    profile of the session's own (150 words such as "qu17": s tokens, 150 at least) followed by 1,000 tokens of
    policy (marked), and one 100-token question, resent every 10 s (a poller): r1 writes the 2,400 tokens
    before it and sends 100 fresh, each later request reads the 2,400."""
    start = T0 + 600 * k
    profile = " ".join(f"{NAMES[k][:2].lower()}{j}" for j in range(150))
    tools = [{"name": f"p{j}", "description": words(290, f"ptool{j}"), "input_schema": {"type": "object"}}
             for j in range(4)]
    body = {"model": model, "max_tokens": 512, "tools": tools,
            "system": [{"type": "text", "text": profile + " " + words(1_000, "ppolicy"), "cache_control": EPH}],
            "messages": [{"role": "user", "content": words(100, "pquestion")}]}
    return [TraceRecord(id=f"p{k:02d}-r{i + 1:02d}", provider="anthropic", started_at=start + 10 * i, request=body,
                        response=anthropic_usage(0, 2_400, 100) if i == 0 else anthropic_usage(2_400, 0, 100),
                        session=f"p{k:02d}", agent="main", endpoint="/v1/messages",
                        first_token_at=start + 10 * i + 1.5)
            for i in range(requests)]


@pytest.mark.parametrize("model", [
    "claude-sonnet-4-5",
    "claude-sonnet-9-9",  # no price for it (its cost is unknown): the input equivalents alone decide
])
def test_a_lifetime_whose_required_move_costs_more_than_it_saves_is_no_fix(model):
    """Three sessions 10 minutes apart, each with its own s-token profile opening the system text. Moving the
    profile out alone costs: every request sends the s tokens fresh instead of reading them, 19 resends a
    session at 0.9 s, less the 0.25 s its first request no longer writes: 3 x (0.25 - 17.1) s = -50.55 s. The
    1h lifetime on top lets the sessions share the other 2,400 - s: 2 x 1.15 x (2,400 - s) - 0.75 x (2,400 - s)
    = 1.55 x (2,400 - s). Together 3,720 - 52.1 s, a loss for any profile over 72 tokens: neither is a fix."""
    rep = report([r for k in range(3) for r in profile_session(k, model)])
    [found] = rep["fleet"]
    assert (found["breaker"], found["breaks_at"], found["median_gap_s"]) == ("volatile span", "system[0]", 600)
    assert found["fixes"] == ["ttl_1h (system[0])"]  # proposed and priced, not chosen
    assert not [f for f in rep["fixes"] if f["kind"] in ("ttl_1h", "stabilize_prefix")]


def test_the_lifetime_and_its_move_are_chosen_beside_another_products_alternatives():
    """The 12 named sessions 10 minutes apart (the move saves 3 n, the lifetime on top 38,080 - 11.9 n) in one
    log with a session of tests/test_fleet_policies.py's fleet 2, whose three subagents are fixed by a stagger
    (46,115 by hand there) with a warm-up as its alternative (43,470): another fix's alternative does not stop
    this package, whose move is nobody's alternative."""
    from test_fleet_policies import fleet2_session

    rep = report(sorted(fleet2_session(0) + [r for k in range(12) for r in session("x", k, 600, name=NAMES[k])],
                        key=lambda r: r.started_at))
    [warm] = rep["alternatives"]
    assert (warm["variant"], warm["instead_of"]) == ("warm_up", ["shared_breakpoint (stagger)"])
    fixes = {(f["kind"], f["path"]): f for f in rep["fixes"]}
    assert 3 * 1 <= fixes["stabilize_prefix", "system[0]"]["saving_input_equivalent_tokens"] <= 3 * 5
    lifetime = fixes["ttl_1h", "system[0]"]
    assert 38_080 - 11.9 * 5 <= lifetime["saving_input_equivalent_tokens"] <= 38_080 - 11.9
    assert lifetime["requires"] == ["stabilize_prefix (system[0])"]


def test_the_lifetimes_reach_is_the_requests_it_edits_not_those_only_its_move_edits():
    """The 12 named sessions 10 minutes apart and a 13th of the same product that sends the tools in reverse
    order (so it shares no prefix with the fleet), with a name of its own: the move takes the name out of all 13
    system texts; the lifetime marks the fleet's 12 only, and says so."""
    records = [r for k in range(12) for r in session("x", k, 600, name=NAMES[k])] + \
        session("x", 12, 600, name="Zephyr", order=[5, 4, 3, 2, 1, 0])
    rep = report(sorted(records, key=lambda r: r.started_at))
    fixes = {f["kind"]: f for f in rep["fixes"]}
    assert fixes["stabilize_prefix"]["reach"]["text"] == "13 of 13 sessions, 13 requests edited"
    assert fixes["ttl_1h"]["reach"]["text"] == "12 of 12 sessions, 12 requests edited"
    # the cause it removes, the shared prefix written anew, is in each of the fleet's 12 (its rewrote_sessions)
    assert fixes["ttl_1h"]["reach"]["sessions_with_cause"] == 12 == rep["fleet"][0]["rewrote_sessions"]
    assert [i["edited_requests"] for i in fixes["ttl_1h"]["instances"]] == [1] * 12


def template_session(product: str, k: int, model: str, profile_words: int, requests: int, tools: bool,
                     offset: float) -> list[TraceRecord]:
    """A session of the profile template: (4 tools, 1,200 tokens, if `tools`), a system text of a profile of
    the session's own (`profile_words` words such as "qu17") and 1,000 tokens of policy (marked), a 100-token
    question resent every 10 s; r1 writes everything before the question, the resends read it."""
    start = T0 + offset + 600 * k
    profile = " ".join(f"{NAMES[k][:2].lower()}{j}" for j in range(profile_words))
    body = {"model": model, "max_tokens": 512,
            "system": [{"type": "text", "text": profile + " " + words(1_500, "tpolicy"), "cache_control": EPH}],
            "messages": [{"role": "user", "content": words(100, "tquestion")}]}
    if tools:
        body["tools"] = [{"name": f"t{j}", "description": words(290, f"ttool{j}"), "input_schema": {"type": "object"}}
                         for j in range(4)]
    written = 1_200 * tools + 1_500 + profile_words
    return [TraceRecord(id=f"{product}{k:02d}-r{i + 1:02d}", provider="anthropic", started_at=start + 10 * i,
                        request=body, response=anthropic_usage(0, written, 100) if i == 0 else
                        anthropic_usage(written, 0, 100), session=f"{product}{k:02d}", agent="main",
                        endpoint="/v1/messages", first_token_at=start + 10 * i + 1.5)
            for i in range(requests)]


def test_a_lifetime_and_move_that_save_tokens_but_lose_money_are_no_fix():
    """A fleet of 3 Sonnet sessions ($3/M input) 10 minutes apart, one request each, with tools and a profile
    of s tokens (75 words) before 1,500 tokens of policy; and two Opus 4.1 sessions ($15/M) without tools (no
    fleet: they share nothing with it) whose system text follows the same template with a longer profile (s'
    tokens, 250 words: s' >= 250), each sending its question 4 times. The move takes every profile out: the
    fleet's first requests each write s less (+0.25 s each), each Opus session sends s' fresh in its 3 resends
    (0.25 s' - 3 x 0.9 s' = -2.45 s'). The lifetime on top saves the fleet what the other two no longer write
    of the 2,775 - s left shared: 2 x 1.15 x (2,775 - s) - 0.75 x (2,775 - s) = 1.55 (2,775 - s). Together:
    4,301 - 0.8 s - 4.9 s' input equivalents, positive for s' under 878 - 0.16 s (kvprobe's split of the 1,750
    the Opus sessions write gives their profile about 440); in millionths of a dollar
    3 x (1.55 (2,775 - s) + 0.75 s) - 15 x 4.9 s' <= 12,904 - 73.5 s', a loss for any s' over 176. The money
    decides: neither is a fix."""
    records = [r for k in range(3) for r in template_session("t", k, "claude-sonnet-4-5", 75, 1, True, 0.0)] + \
        [r for k in (10, 11) for r in template_session("o", k, "claude-opus-4-1", 250, 4, False, 300.0)]
    rep = report(sorted(records, key=lambda r: r.started_at))
    [found] = rep["fleet"]
    assert (found["sessions"], found["breaker"], found["fixes"]) == (3, "volatile span", ["ttl_1h (system[0])"])
    assert not [f for f in rep["fixes"] if f["kind"] in ("ttl_1h", "stabilize_prefix")]
