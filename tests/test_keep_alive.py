"""Keep-alive break-even from the provider rules: pings only while they cost less than the rebuild."""
from kvprobe.catalog import rules_for
from kvprobe.economics.keep_alive import longer_lifetime, plan


def test_a_four_hour_pause_needs_55_pings_and_does_not_pay():
    rules = rules_for("anthropic", "claude-sonnet-4-5")  # 5m TTL, writes 1.25x, reads 0.1x
    p = plan(rules, cached_tokens=82_000, pause_s=15_076)
    # by hand: pings every 300 - 30 = 270 s; the entry must reach 15,076 s: ceil((15,076 - 300) / 270) = 55
    assert (p.interval_s, p.pings) == (270.0, 55)
    # each ping reads 82,000 x 0.1 = 8,200 plus one output token (5); the rebuild costs (1.25 - 0.1) x 82,000
    assert round(p.ping_cost) == 8_205 and round(p.rebuild_cost) == 94_300
    # 94,300 / 8,205 = 11.49: 11 pings pay, so the longest pause worth bridging is 300 + 11 x 270 = 3,270 s
    assert p.break_even_s == 3_270.0
    assert not p.pays


def test_a_pause_under_the_break_even_pays():
    p = plan(rules_for("anthropic", "claude-sonnet-4-5"), cached_tokens=82_000, pause_s=900)
    assert p.pings == 3  # ceil((900 - 300) / 270)
    assert p.pays and round(p.saving) == 94_300 - 3 * 8_205


def test_no_pings_inside_the_lifetime_and_no_plan_without_a_prefix():
    rules = rules_for("anthropic", "claude-sonnet-4-5")
    assert plan(rules, 10_000, 200).pings == 0 and not plan(rules, 10_000, 200).pays
    assert plan(rules, 0, 900) is None


def test_each_provider_names_its_own_longer_lifetime_setting():
    assert "1h" in longer_lifetime(rules_for("anthropic", "claude-sonnet-4-5"))["setting"]
    openai = longer_lifetime(rules_for("openai", "gpt-5"))["setting"]
    assert "prompt_cache_retention" in openai and "1h" not in openai
