"""Provider catalog validation, usage normalisation across providers, and pricing."""
from __future__ import annotations

import pytest

from kvprobe.catalog import load_catalog, load_provider_file, rules_for
from kvprobe.errors import CatalogError
from kvprobe.pricing import PriceBook
from kvprobe.usage import Usage, normalize_usage


def test_every_shipped_rule_has_source_and_date():
    catalogs = load_catalog()
    assert set(catalogs) >= {"anthropic", "openai", "deepseek", "gemini"}
    for cat in catalogs.values():
        for rule in cat.rules.values():
            assert rule.source and rule.checked.year >= 2024
        for fam in cat.models:
            assert fam.rules, fam.family


def test_conflicting_values_keep_alternatives_and_per_model_overrides():
    opus = rules_for("anthropic", "claude-opus-4-7-20260301")
    assert opus.get("min_cacheable_tokens") == 2048 and opus.rule("min_cacheable_tokens").alternatives == (4096,)
    assert rules_for("anthropic", "claude-haiku-4-5").get("min_cacheable_tokens") == 4096
    unknown = rules_for("anthropic", "claude-next")
    assert not unknown.known_model and unknown.get("min_cacheable_tokens") == 1024


@pytest.mark.parametrize("text, message", [
    ('provider = "acme"\n', "field 'provider'"),
    ('provider = "anthropic"\n[rules.ttl]\nvalue = 5\nchecked = "2026-01-01"\n', "rule 'ttl' has no 'source'"),
    ('provider = "anthropic"\n[rules.ttl]\nvalue = 5\nsource = "x"\nchecked = "soon"\n', "expected YYYY-MM-DD"),
    ('provider = "anthropic"\n[[models]]\nfamily = "x"\n', "non-empty 'match'"),
    ('provider = [\n', "cannot read provider rules"),
])
def test_invalid_rule_files_are_refused_with_the_file_named(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(CatalogError) as err:
        load_provider_file(path)
    assert message in str(err.value) and "bad.toml" in str(err.value)


@pytest.mark.parametrize("provider, usage, expect", [
    ("anthropic", {"input_tokens": 12, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 300,
                   "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
                   "output_tokens": 9}, Usage(1312, 1000, 100, 200, 9)),
    ("anthropic", {"input_tokens": 12, "cache_creation_input_tokens": 300, "output_tokens": 1},
     Usage(312, 0, 300, 0, 1)),
    ("openai", {"prompt_tokens": 2048, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1920}},
     Usage(2048, 1920, 0, 0, 5)),
    ("openai", {"input_tokens": 3000, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 2944}},
     Usage(3000, 2944, 0, 0, 7)),
    ("deepseek", {"prompt_tokens": 1200, "prompt_cache_hit_tokens": 960, "prompt_cache_miss_tokens": 240,
                  "completion_tokens": 3}, Usage(1200, 960, 0, 0, 3)),
    # DeepSeek's Anthropic-compatible endpoint: plain counts and no cache field (they read as zeros before)
    ("deepseek", {"input_tokens": 1200, "output_tokens": 80}, Usage(1200, 0, 0, 0, 80)),
    ("gemini", {"promptTokenCount": 5000, "cachedContentTokenCount": 4000, "candidatesTokenCount": 20},
     Usage(5000, 4000, 0, 0, 20)),
])
def test_usage_normalises_to_all_input_tokens(provider, usage, expect):
    got = normalize_usage(provider, usage)
    assert got == expect
    assert got.fresh_input_tokens == expect.input_tokens - expect.cache_read_tokens - expect.cache_write_tokens


def test_prices_cover_reads_writes_1h_and_tiers():
    book = PriceBook()
    base = book.cost("anthropic", "claude-sonnet-4-5", Usage(100_000, 0, 0, 0, 0)).usd
    read = book.cost("anthropic", "claude-sonnet-4-5", Usage(100_000, 100_000, 0, 0, 0)).usd
    w5m = book.cost("anthropic", "claude-sonnet-4-5", Usage(100_000, 0, 100_000, 0, 0)).usd
    w1h = book.cost("anthropic", "claude-sonnet-4-5", Usage(100_000, 0, 0, 100_000, 0)).usd
    assert (read / base, w5m / base, w1h / base) == pytest.approx((0.1, 1.25, 2.0))
    long = book.cost("anthropic", "claude-sonnet-4-5", Usage(300_000, 0, 0, 0, 0)).usd
    assert long > 3 * base  # the long-context tier costs more per token
    assert book.cost("anthropic", "claude-never-released", Usage(10, 0, 0, 0, 0)).usd is None
    assert "claude-never-released" in book.unknown_models


def test_gemini_shapes_from_the_api_from_cache_creation_and_from_importers():
    assert normalize_usage("gemini", {"totalTokenCount": 8000}) == Usage(8000, 0, 8000, 0, 0)  # cachedContents
    otel_style = {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 512}, "output_tokens": 7}
    assert normalize_usage("gemini", otel_style) == Usage(900, 512, 0, 0, 7)
