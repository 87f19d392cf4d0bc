"""Keep-alive break-even from the provider rules: pings only while they cost less than the rebuild.

An entry is gone at exactly its lifetime (the simulators' `start >= expires_at`, tests/test_rule_edges.py): a
pause of exactly the lifetime needs a ping, and ping k (at k x interval) keeps the entry only until just before
k x interval + lifetime.
"""
import pytest

from kvprobe.catalog import rules_for
from kvprobe.economics.keep_alive import longer_lifetime, pause_advice, plan

SONNET = ("anthropic", "claude-sonnet-4-5")  # 5m TTL (300 s), pings every 300 - 30 = 270 s, writes 1.25x, reads 0.1x


def test_a_four_hour_pause_needs_55_pings_and_does_not_pay():
    rules = rules_for("anthropic", "claude-sonnet-4-5")  # 5m TTL, writes 1.25x, reads 0.1x
    p = plan(rules, cached_tokens=82_000, pause_s=15_076)
    # by hand: pings every 300 - 30 = 270 s; the entry must outlive 15,076 s: the first k with 300 + 270 k >
    # 15,076 is floor(14,776 / 270) + 1 = 55
    assert (p.interval_s, p.pings) == (270.0, 55)
    # each ping reads 82,000 x 0.1 = 8,200 plus one output token (5); the rebuild costs (1.25 - 0.1) x 82,000
    assert round(p.ping_cost) == 8_205 and round(p.rebuild_cost) == 94_300
    # 94,300 / 8,205 = 11.49: 11 pings pay, and they bridge pauses shorter than 300 + 11 x 270 = 3,270 s
    assert p.break_even_s == 3_270.0
    assert not p.pays


def test_a_pause_under_the_break_even_pays():
    p = plan(rules_for("anthropic", "claude-sonnet-4-5"), cached_tokens=82_000, pause_s=900)
    assert p.pings == 3  # floor((900 - 300) / 270) + 1
    assert p.pays and round(p.saving) == 94_300 - 3 * 8_205


def test_no_pings_inside_the_lifetime_and_no_plan_without_a_prefix():
    rules = rules_for("anthropic", "claude-sonnet-4-5")
    assert plan(rules, 10_000, 200).pings == 0 and not plan(rules, 10_000, 200).pays
    assert plan(rules, 0, 900) is None


def test_each_provider_names_its_own_longer_lifetime_setting():
    assert "1h" in longer_lifetime(rules_for("anthropic", "claude-sonnet-4-5"))["setting"]
    openai = longer_lifetime(rules_for("openai", "gpt-5"))["setting"]
    assert "prompt_cache_retention" in openai and "1h" not in openai


@pytest.mark.parametrize("pause, pings", [
    (299, 0),  # within the lifetime: nothing to bridge
    (300, 1),  # exactly the lifetime: the entry is gone, one ping (at 270 s) keeps it until just before 570 s
    (301, 1),
    (569, 1),
    (570, 2),  # exactly 270 + 300: the first ping's entry is gone, a second (at 540 s) is needed
    (571, 2),
])
def test_pings_counted_on_the_simulators_edge_an_entry_is_gone_at_exactly_its_lifetime(pause, pings):
    p = plan(rules_for(*SONNET), cached_tokens=10_000, pause_s=pause)
    assert (p.pings, p.needed) == (pings, pings > 0)


@pytest.mark.parametrize("pause, pings, pays", [
    # 82,000 cached: a ping costs 0.1 x 82,000 + 5 = 8,205, the rebuild (1.25 - 0.1) x 82,000 = 94,300
    (3_269, 11, True),  # floor(2,969 / 270) + 1 = 11 pings: 90,255 < 94,300
    (3_270, 12, False),  # exactly 300 + 11 x 270: 11 pings keep the entry only until just before it; 12 cost 98,460
])
def test_the_break_even_pause_itself_needs_one_ping_more_than_pays(pause, pings, pays):
    p = plan(rules_for(*SONNET), cached_tokens=82_000, pause_s=pause)
    assert (p.pings, p.pays, p.break_even_s) == (pings, pays, 3_270.0)


@pytest.mark.parametrize("pause, advice", [
    # 13 pings (floor(3,299 / 270) + 1) of 8,205 cost more than the 94,300 rebuild; a 1h entry outlives 3,599 s
    (3_599, "keep-alive pings would cost more than the rebuild for a 59m59s pause (they pay up to 54m30s); use "
            "\"ttl\": \"1h\" on the cache_control breakpoints: entries live 1h00m, long enough for this pause "
            "(writes at 2× input)"),
    (3_600, None),  # a 1h entry is gone at exactly 3,600 s: nothing pays for the pause, a new start
    (3_601, None),
])
def test_the_longer_lifetime_covers_a_pause_only_shorter_than_itself(pause, advice):
    assert pause_advice(rules_for(*SONNET), 82_000, pause) == advice


@pytest.mark.parametrize("pause, pings", [(569, 1), (570, 2)])
def test_the_pings_proposed_keep_the_entry_through_a_pause_of_lifetime_plus_one_interval(pause, pings):
    """Simulated with pings: at 570 s one ping (at 270 s) would leave r1 to find its entry gone at exactly
    270 + 300 s; two (at 270 and 540 s) keep it, so r1 reads the whole prompt."""
    from test_simulator_rules import claude, sizes
    from test_whatif import fixes_of, rec

    body = claude()
    _, total = sizes(body)
    [fix] = fixes_of([rec("r0", 0, body), rec("r1", pause, body)], "keep_alive")
    # before: r1 writes the prompt again (1.25x); after: each ping and r1 read it (0.1x apiece)
    assert fix.extra["pings"] == pings
    assert fix.saving_input_equivalent_tokens == pytest.approx(total * (1.25 - 0.1 - pings * 0.1), abs=0.2)
