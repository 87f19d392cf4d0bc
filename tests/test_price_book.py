"""What a request costs (kvprobe/pricing.py), in process, with every figure worked out by hand from the
published list prices or from the price file written here:

* a price file's prices per token class, and a missing cache price derived from the provider's multipliers
  (providers/*.toml) with a note that says so, once;
* the dataset's list prices for Claude Sonnet 4.5 (anthropic.com/pricing: $3 input, $0.30 cache read,
  $3.75 / $6 for 5-minute / 1-hour writes, $15 output per million tokens; prompts over 200,000 tokens
  $6 / $0.60 / $7.50 / $12 / $22.50), at the tier's edge;
* the on-disk cache of dataset look-ups, where it lives and what a broken one costs;
* a price file that is not one: the file and the field named.
"""
from __future__ import annotations

import datetime as dt
import json
import shutil
from importlib.metadata import version

import pytest

from conftest import ROOT
from kvprobe.errors import InputError
from kvprobe.pricing import DatasetCache, PriceBook, load_price_file
from kvprobe.usage import Usage

NOV = dt.datetime(2026, 11, 2, 15, 0, tzinfo=dt.timezone.utc).timestamp()
SONNET = "claude-sonnet-4-5"


def _file(tmp_path, text: str, name: str = "prices.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- a price file ----------------------------------------------------------------------------------------------

FULL = """[models."acme-model-1"]
input_mtok = 2.0
output_mtok = 10.0
cache_read_mtok = 0.2
cache_write_mtok = 2.5
cache_write_1h_mtok = 4.0
"""


def test_a_price_file_prices_each_token_class(tmp_path):
    book = PriceBook.from_file(_file(tmp_path, FULL))
    # 10,000 input: 4,000 read, 2,000 written for 5 minutes, 1,000 for an hour, so 3,000 fresh; 500 output
    # 3,000 × 2 + 4,000 × 0.2 + 2,000 × 2.5 + 1,000 × 4 + 500 × 10 = 20,800 USD per million = $0.0208
    cost = book.cost("anthropic", "acme-model-1", Usage(10_000, 4_000, 2_000, 1_000, 500), NOV)
    assert cost.source == "price-file" and cost.usd == pytest.approx(0.0208, rel=1e-12)
    units = book.unit_prices("anthropic", "acme-model-1", NOV, 10_000)
    assert units == pytest.approx({"fresh": 2e-6, "read": 2e-7, "write_5m": 2.5e-6, "write_1h": 4e-6,
                                   "output": 1e-5}, rel=1e-12)
    assert book.notes == []  # every price given: nothing derived


def test_a_price_file_wins_over_the_dataset_for_the_model_it_names(tmp_path):
    text = FULL.replace("acme-model-1", SONNET)
    cost = PriceBook.from_file(_file(tmp_path, text)).cost("anthropic", SONNET, Usage(1_000_000, 0, 0, 0, 0), NOV)
    assert (cost.usd, cost.source) == (pytest.approx(2.0), "price-file")  # not the list's $3


# provider: the multipliers of its rules (providers/<provider>.toml) as the note prints them, and the cost of
# 10,000 input (5,000 read, 2,000 written 5m, 1,000 written 1h: 2,000 fresh) and 100 output at $4 / $20
DERIVED = [
    # anthropic: read 0.1, 5m 1.25, 1h 2: 2,000 × 4 + 5,000 × 0.4 + 2,000 × 5 + 1,000 × 8 + 100 × 20 = 30,000
    ("anthropic", "cache_read_mtok = 0.1 × input_mtok, cache_write_mtok = 1.25 × input_mtok, "
                  "cache_write_1h_mtok = 2 × input_mtok", 0.030),
    # openai: read 0.1, no 5m write: the explicit 1.25, and no 1h either: the 5m one
    # 8,000 + 2,000 + 2,000 × 5 + 1,000 × 5 + 2,000 = 27,000
    ("openai", "cache_read_mtok = 0.1 × input_mtok, cache_write_mtok = 1.25 × input_mtok, "
               "cache_write_1h_mtok = 1.25 × input_mtok", 0.027),
    # deepseek: read 0.033, only an implicit write of 1: 8,000 + 5,000 × 0.132 + 2,000 × 4 + 1,000 × 4 + 2,000
    ("deepseek", "cache_read_mtok = 0.033 × input_mtok, cache_write_mtok = 1 × input_mtok, "
                 "cache_write_1h_mtok = 1 × input_mtok", 0.02266),
]


@pytest.mark.parametrize("provider, shown, usd", DERIVED, ids=[d[0] for d in DERIVED])
def test_missing_cache_prices_are_the_providers_multipliers_of_input_and_a_note_says_so(tmp_path, provider,
                                                                                          shown, usd):
    path = _file(tmp_path, '[models."acme-model-1"]\ninput_mtok = 4.0\noutput_mtok = 20.0\n')
    book = PriceBook.from_file(path)
    usage = Usage(10_000, 5_000, 2_000, 1_000, 100)
    assert book.cost(provider, "acme-model-1", usage, NOV).usd == pytest.approx(usd, rel=1e-12)
    assert book.cost(provider, "acme-model-1", usage, NOV).usd == pytest.approx(usd, rel=1e-12)
    assert book.notes == [
        f"{path}: acme-model-1 has no cache_read_mtok, cache_write_mtok, cache_write_1h_mtok: priced at "
        f"{provider}'s cache multipliers ({shown}; `kvprobe providers acme-model-1` shows their source)"]


def test_only_the_missing_cache_prices_are_derived_and_no_provider_means_anthropics(tmp_path):
    path = _file(tmp_path, '[models."acme-model-1"]\ninput_mtok = 4.0\noutput_mtok = 20.0\ncache_read_mtok = 1.0\n')
    book = PriceBook.from_file(path)
    # read at the file's $1 (not 0.1 × 4): 2,000 × 4 + 5,000 × 1 + 2,000 × 5 + 1,000 × 8 + 100 × 20 = 33,000
    assert book.cost(None, "acme-model-1", Usage(10_000, 5_000, 2_000, 1_000, 100), NOV).usd == \
        pytest.approx(0.033, rel=1e-12)
    assert book.notes == [
        f"{path}: acme-model-1 has no cache_write_mtok, cache_write_1h_mtok: priced at anthropic's cache "
        "multipliers (cache_write_mtok = 1.25 × input_mtok, cache_write_1h_mtok = 2 × input_mtok; "
        "`kvprobe providers acme-model-1` shows their source)"]


def test_each_model_of_a_price_file_has_its_own_prices_and_rules(tmp_path):
    """Two models in one book: each priced at its own row; a model the rules know (Fable 5.1's cache reads
    are 0.025 of input, providers/anthropic.toml) gets its own multiplier, not the provider's 0.1."""
    path = _file(tmp_path, FULL + '[models."claude-fable-5-1"]\ninput_mtok = 10.0\noutput_mtok = 50.0\n')
    book = PriceBook.from_file(path)
    usage = Usage(1_000_000, 1_000_000, 0, 0, 0)  # a million tokens read
    assert book.cost("anthropic", "acme-model-1", usage, NOV).usd == pytest.approx(0.2, rel=1e-12)
    assert book.cost("anthropic", "claude-fable-5-1", usage, NOV).usd == pytest.approx(0.25, rel=1e-12)
    assert book.cost("anthropic", "acme-model-1", usage, NOV).usd == pytest.approx(0.2, rel=1e-12)
    assert "cache_read_mtok = 0.025 × input_mtok" in book.notes[0]


def test_prices_given_without_a_file_are_noted_as_the_price_files():
    book = PriceBook(overrides={"acme-model-1": {"input_mtok": 4.0, "output_mtok": 20.0}})
    book.cost("anthropic", "acme-model-1", Usage(10, 0, 0, 0, 0), NOV)
    assert book.notes[0].startswith("price file: acme-model-1 has no cache_read_mtok, ")


def test_a_json_price_file_may_leave_out_the_models_table(tmp_path):
    path = _file(tmp_path, json.dumps({"acme-model-1": {"input_mtok": 1, "output_mtok": 5}}), "prices.json")
    assert load_price_file(path) == {"acme-model-1": {"input_mtok": 1.0, "output_mtok": 5.0}}
    assert PriceBook.from_file(None).overrides == {}


# (what is wrong, the file's text, the field named, the message)
MODELS = "expected a table of models (`kvprobe schema price-file`)"
MISSING = ("missing: every model needs input_mtok and output_mtok (cache prices may be left to the provider's "
           "multipliers)")
BAD = [
    ("not a table of models", "models = 3\n", "models", MODELS),
    ("no models at all", "", "models", MODELS),
    ("a model that is no table", 'models = { "m" = 3 }\n', "models.m", "expected a table of prices"),
    ("an unknown price", '[models.m]\ninput_mtok = 1\noutput_mtok = 1\ninput = 2\n', "models.m.input",
     "unknown price; expected one of input_mtok, output_mtok, cache_read_mtok, cache_write_mtok, "
     "cache_write_1h_mtok"),
    ("no input price", "[models.m]\noutput_mtok = 1\n", "models.m.input_mtok", MISSING),
    ("no output price", "[models.m]\ninput_mtok = 1\n", "models.m.output_mtok", MISSING),
    ("a price as text", '[models.m]\ninput_mtok = "3"\noutput_mtok = 1\n', "models.m.input_mtok",
     'expected a price in USD per million tokens (a number), got "3"'),
    ("a price as true", "[models.m]\ninput_mtok = 1\noutput_mtok = true\n", "models.m.output_mtok",
     "expected a price in USD per million tokens (a number), got true"),
    ("a negative price", "[models.m]\ninput_mtok = 1\noutput_mtok = 1\ncache_read_mtok = -0.5\n",
     "models.m.cache_read_mtok", "expected a finite price of at least 0, got -0.5"),
    ("a price of nan", "[models.m]\ninput_mtok = nan\noutput_mtok = 1\n", "models.m.input_mtok",
     "expected a finite price of at least 0, got nan"),
    ("a price of inf", "[models.m]\ninput_mtok = 1\noutput_mtok = inf\n", "models.m.output_mtok",
     "expected a finite price of at least 0, got inf"),
]


@pytest.mark.parametrize("case, text, field, message", BAD, ids=[b[0] for b in BAD])
def test_a_price_file_that_is_not_one_is_refused_with_its_field(tmp_path, case, text, field, message):
    path = _file(tmp_path, text)
    with pytest.raises(InputError) as raised:
        PriceBook.from_file(path)
    assert (raised.value.file, raised.value.field, raised.value.message) == (str(path), field, message)


@pytest.mark.parametrize("text", ["[1, 2]", '"prices"', "{}"])
def test_a_json_price_file_that_is_no_table_of_models_is_refused(tmp_path, text):
    path = _file(tmp_path, text, "prices.json")
    with pytest.raises(InputError) as raised:
        PriceBook.from_file(path)
    assert (raised.value.file, raised.value.field, raised.value.message) == (str(path), "models", MODELS)


def test_a_price_of_zero_is_a_price(tmp_path):
    # the edge of "at least 0" (-0.5 is refused above): a free model is priced, at nothing, not unknown
    path = _file(tmp_path, '[models."free-model"]\ninput_mtok = 0\noutput_mtok = 0.0\n')
    cost = PriceBook.from_file(path).cost("anthropic", "free-model", Usage(1_000, 0, 0, 0, 10), NOV)
    assert (cost.usd, cost.source) == (0.0, "price-file")


def test_an_unreadable_price_file_is_refused_with_what_is_wrong(tmp_path):
    with pytest.raises(InputError) as raised:
        PriceBook.from_file(tmp_path / "missing.toml")
    assert str(raised.value) == f"{tmp_path / 'missing.toml'}: price file does not exist"
    (tmp_path / "latin1.toml").write_bytes(b'[models."caf\xe9"]\n')
    with pytest.raises(InputError) as raised:
        PriceBook.from_file(tmp_path / "latin1.toml")
    assert str(raised.value) == f"{tmp_path / 'latin1.toml'}: not UTF-8 text (byte 0xe9 at offset 12)"
    for name, text in (("broken.toml", "[models\n"), ("broken.json", '{"m": ')):
        with pytest.raises(InputError) as raised:
            PriceBook.from_file(_file(tmp_path, text, name))
        assert str(raised.value).startswith(f"{tmp_path / name}: cannot parse price file: ")


# --- the dataset's list prices ---------------------------------------------------------------------------------

# per token, from the list: $3 / $0.30 / $3.75 / $6 / $15 per million, and over 200,000 tokens of prompt
# $6 / $0.60 / $7.50 / $12 / $22.50
BASE = {"fresh": 3e-6, "read": 3e-7, "write_5m": 3.75e-6, "write_1h": 6e-6, "output": 1.5e-5}
LONG = {"fresh": 6e-6, "read": 6e-7, "write_5m": 7.5e-6, "write_1h": 1.2e-5, "output": 2.25e-5}


@pytest.mark.parametrize("prompt, expected", [(199_999, BASE), (200_000, BASE), (200_001, LONG), (250_000, LONG)])
def test_the_long_context_tier_starts_above_200000_tokens_of_prompt(prompt, expected):
    units = PriceBook().unit_prices("anthropic", SONNET, NOV, prompt)
    assert units == pytest.approx(expected, rel=1e-9)


def test_a_request_costs_each_class_at_its_tiers_list_price():
    book = PriceBook()
    # 250,000 of prompt (long tier): 100,000 read, 50,000 written 5m, 20,000 written 1h, 80,000 fresh; 1,000 out
    # 80,000 × 6 + 100,000 × 0.6 + 50,000 × 7.5 + 20,000 × 12 + 1,000 × 22.5 = 1,177,500 per million
    cost = book.cost("anthropic", SONNET, Usage(250_000, 100_000, 50_000, 20_000, 1_000), NOV)
    assert (cost.usd, cost.source) == (pytest.approx(1.1775, rel=1e-9), "genai-prices")
    # 12,000 of prompt (base tier): 2,000 read, 1,000 written 1h, 9,000 fresh; 300 out
    # 9,000 × 3 + 2,000 × 0.3 + 1,000 × 6 + 300 × 15 = 38,100 per million
    assert book.cost("anthropic", SONNET, Usage(12_000, 2_000, 0, 1_000, 300), NOV).usd == \
        pytest.approx(0.0381, rel=1e-9)
    assert book.tier_starts("anthropic", SONNET, int(NOV // 86400)) == [200_000]


def test_local_models_are_free_and_a_request_with_no_model_is_unpriced():
    book = PriceBook()
    assert (book.cost("local", "qwen2.5-7b", Usage(10, 0, 0, 0, 5)).usd, book.cost("local", None, Usage()).source) \
        == (0.0, "local")
    assert book.unit_prices("local", "qwen2.5-7b", NOV, 10) == dict.fromkeys(
        ("fresh", "read", "write_5m", "write_1h", "output"), 0.0)
    assert (book.cost("anthropic", None, Usage(10, 0, 0, 0, 5)).usd, book.cost("anthropic", "", Usage()).source) \
        == (None, "unknown")
    assert book.unit_prices("anthropic", None, NOV, 10) is None
    assert book.unknown_models == set()  # (no model is not an unknown model)


def test_a_model_no_list_prices_is_unknown_and_named():
    book = PriceBook()
    assert book.cost("anthropic", "claude-never-released", Usage(10, 0, 0, 0, 5), NOV) == \
        type(book.cost("local", "x", Usage()))(None, "unknown")
    assert book.unit_prices("anthropic", "claude-never-released-2", NOV, 10) is None
    assert book.tier_starts("anthropic", "claude-never-released-3", int(NOV // 86400)) is None
    assert book.unknown_models == {"claude-never-released", "claude-never-released-2", "claude-never-released-3"}


# --- the on-disk cache of look-ups -----------------------------------------------------------------------------

def _cache_files(folder):
    return sorted(p.name for p in folder.glob("*.json"))


@pytest.mark.parametrize("where", ["KVPROBE_CACHE_DIR", "XDG_CACHE_HOME", "HOME"])
def test_the_lookup_cache_lives_in_the_first_folder_the_environment_names(tmp_path, monkeypatch, where):
    for name in ("KVPROBE_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(where, str(tmp_path))
    book = PriceBook(dataset=DatasetCache())
    assert book.cost("anthropic", SONNET, Usage(12_000, 2_000, 0, 1_000, 300), NOV).usd == \
        pytest.approx(0.0381, rel=1e-9)
    folder = {"KVPROBE_CACHE_DIR": tmp_path, "XDG_CACHE_HOME": tmp_path / "kvprobe",
              "HOME": tmp_path / ".cache" / "kvprobe"}[where]
    assert _cache_files(folder) == [f"genai-prices-{version('genai-prices')}.json"]


def test_a_broken_cache_file_is_rebuilt_and_an_unwritable_one_only_costs_time(tmp_path):
    name = f"genai-prices-{version('genai-prices')}.json"
    (tmp_path / name).write_text("{not json")
    usage = Usage(12_000, 2_000, 0, 1_000, 300)
    assert PriceBook(dataset=DatasetCache(tmp_path)).cost("anthropic", SONNET, usage, NOV).usd == \
        pytest.approx(0.0381, rel=1e-9)
    kept = json.loads((tmp_path / name).read_text())
    assert kept and all(key.split("|")[0] in ("starts", "tiers", "units") for key in kept)
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    assert PriceBook(dataset=DatasetCache(blocked / "sub")).cost("anthropic", SONNET, usage, NOV).usd == \
        pytest.approx(0.0381, rel=1e-9)


def test_a_warm_cache_answers_without_the_dataset_and_remembers_what_is_unknown(tmp_path):
    cold = PriceBook(dataset=DatasetCache(tmp_path))
    usage = Usage(12_000, 2_000, 0, 1_000, 300)
    assert cold.cost("anthropic", SONNET, usage, NOV).usd == pytest.approx(0.0381, rel=1e-9)
    assert cold.cost("anthropic", "claude-never-released", usage, NOV).usd is None
    name = f"genai-prices-{version('genai-prices')}.json"
    kept = json.loads((tmp_path / name).read_text())
    assert kept["starts|anthropic|claude-never-released"] is None  # "not priced" is kept too
    # a cache whose figures were changed by hand is what a warm run prices with: the dataset is not read again
    for key in kept:
        if key.startswith("units|anthropic|" + SONNET):
            kept[key] = {k: v * 2 for k, v in kept[key].items()}
    (tmp_path / name).write_text(json.dumps(kept))
    warm = PriceBook(dataset=DatasetCache(tmp_path))
    assert warm.cost("anthropic", SONNET, usage, NOV).usd == pytest.approx(0.0762, rel=1e-9)


# --- prices on the day of the request --------------------------------------------------------------------------

def _at(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp).replace(tzinfo=dt.timezone.utc).timestamp()


# The dataset (genai-prices, as uv.lock pins it) ends Claude Sonnet 4.6's long-context premium on 2026-03-13
# (UTC): until then a prompt over 200,000 tokens costs the long tier's $6 / $0.60 / $7.50 / $12 / $22.50,
# from then on the base $3 / $0.30 / $3.75 / $6 / $15 at any length.
@pytest.mark.parametrize("stamp, prompt, expected, tiers", [
    ("2026-03-12T12:00:00", 200_000, BASE, [200_000]),  # at the tier's edge: base
    ("2026-03-12T23:59:59", 300_000, LONG, [200_000]),  # the last second of the premium
    ("2026-03-13T00:00:00", 300_000, BASE, []),  # the first second without it
    ("2026-03-13T00:30:00", 300_000, BASE, []),
    ("2026-11-02T15:00:00", 900_000, BASE, []),
])
def test_prices_and_tiers_are_the_lists_on_the_day_of_the_request(stamp, prompt, expected, tiers):
    book = PriceBook()
    when = _at(stamp)
    assert book.unit_prices("anthropic", "claude-sonnet-4-6", when, prompt) == pytest.approx(expected, rel=1e-9)
    assert book.tier_starts("anthropic", "claude-sonnet-4-6", int(when // 86400)) == tiers
    # one book asked about both days keeps them apart (its memos are per price period)
    assert book.unit_prices("anthropic", "claude-sonnet-4-6", _at("2026-03-12T08:00:00"), 300_000) == \
        pytest.approx(LONG, rel=1e-9)


def test_a_request_with_no_time_is_priced_at_the_current_list():
    assert PriceBook().unit_prices("anthropic", "claude-sonnet-4-6", None, 300_000) == pytest.approx(BASE, rel=1e-9)
    cost = PriceBook().cost("anthropic", SONNET, Usage(12_000, 2_000, 0, 1_000, 300))
    assert cost.usd == pytest.approx(0.0381, rel=1e-9)


# providers/prices.toml: Sonnet 5.5's cache reads were $0.20 until 2026-10-07 (an override row the dataset
# lacks), $0.10 from then (the dataset); Mythos 5.1 is priced by a plain row from 2026-09-01 ($10 input, $0.25
# reads, $12.50 / $20 writes, $50 output) and by nothing before
@pytest.mark.parametrize("model, stamp, read, source", [
    ("claude-sonnet-5-5", "2026-10-06T23:59:59", 2e-7, "kvprobe-overlay"),
    ("claude-sonnet-5-5", "2026-10-07T00:00:00", 1e-7, "genai-prices"),
    ("claude-sonnet-5-5", "2026-10-07T00:30:00", 1e-7, "genai-prices"),
    ("claude-mythos-5-1", "2026-09-01T00:00:00", 2.5e-7, "kvprobe-overlay"),
    ("claude-mythos-5-1", "2026-08-31T23:59:59", None, "unknown"),
])
def test_a_dated_overlay_row_prices_from_its_first_day_to_before_its_last(model, stamp, read, source):
    book = PriceBook()
    when = _at(stamp)
    cost = book.cost("anthropic", model, Usage(1_000_000, 1_000_000), when)  # a million tokens read
    assert cost.source == source and cost.usd == (None if read is None else pytest.approx(read * 1e6, rel=1e-9))
    units = book.unit_prices("anthropic", model, when, 1_000_000)
    assert (units and units["read"]) == (None if read is None else pytest.approx(read, rel=1e-9))


def test_a_model_only_the_overlay_prices_has_one_tier_and_its_rows_prices():
    book = PriceBook()
    day = int(_at("2026-11-02T15:00:00") // 86400)
    assert book.tier_starts("anthropic", "claude-mythos-5-1", day) == []
    assert book.unit_prices("anthropic", "claude-mythos-5-1", _at("2026-11-02T15:00:00"), 500_000) == pytest.approx(
        {"fresh": 1e-5, "read": 2.5e-7, "write_5m": 1.25e-5, "write_1h": 2e-5, "output": 5e-5}, rel=1e-9)
    assert book.tier_starts("anthropic", "claude-mythos-5-1", day - 90) is None  # before its row's first day
    assert book.tier_starts("openai", "claude-mythos-5-1", day) is None  # another provider's id


def test_per_token_prices_of_a_price_file_use_the_requests_provider(tmp_path):
    book = PriceBook.from_file(_file(tmp_path, '[models."acme-model-1"]\ninput_mtok = 4.0\noutput_mtok = 20.0\n'))
    # openai: read 0.1, 5m write 1.25 (explicit), 1h as 5m: $0.40, $5, $5 per million
    assert book.unit_prices("openai", "acme-model-1", NOV, 10) == pytest.approx(
        {"fresh": 4e-6, "read": 4e-7, "write_5m": 5e-6, "write_1h": 5e-6, "output": 2e-5}, rel=1e-12)


# --- the rules and the overlay as data: a providers folder of one's own ---------------------------------------

def _providers(tmp_path, monkeypatch, edit) -> None:
    """A copy of the shipped providers/ with `edit(folder)` applied, used for the rest of the test."""
    folder = tmp_path / "providers"
    shutil.copytree(ROOT / "providers", folder)
    edit(folder)
    monkeypatch.setenv("KVPROBE_PROVIDERS_DIR", str(folder))


def _replace(path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def test_a_missing_5m_write_price_is_the_explicit_multiplier_then_the_implicit_then_one(tmp_path, monkeypatch):
    def edit(folder):
        _replace(folder / "openai.toml", 'value = { "implicit" = 1.25, "explicit" = 1.25 }',
                 'value = { "implicit" = 1.1, "explicit" = 1.5 }')
        _replace(folder / "xai.toml", 'value = { "implicit" = 1.0 }', 'value = { "implicit" = 1.2 }')
        for gone in ("[rules.write_multipliers]", "[rules.read_multiplier]"):  # mistral gives neither now
            _replace(folder / "mistral.toml", gone, gone.replace("[rules.", "[rules.unused_"))
    _providers(tmp_path, monkeypatch, edit)
    path = _file(tmp_path, '[models."acme-model-1"]\ninput_mtok = 10.0\noutput_mtok = 20.0\n')
    book = PriceBook.from_file(path)
    # per token of a $10 input: read, 5m write, 1h write (as the 5m one when the rules give no 1h multiplier)
    for provider, read, write in (("openai", 1e-6, 1.5e-5), ("xai", None, 1.2e-5), ("mistral", 1e-5, 1e-5)):
        units = book.unit_prices(provider, "acme-model-1", NOV, 10)
        assert (units["write_5m"], units["write_1h"]) == (pytest.approx(write), pytest.approx(write)), provider
        if read is not None:
            assert units["read"] == pytest.approx(read), provider  # mistral: no read multiplier, so 1


OVERLAY_ROWS = """
[[models]]
provider = "anthropic"
model = "acme-override-1"
override = true
from = "2026-01-01"
until = "2026-12-01"
input_mtok = 3.0
output_mtok = 6.0
source = "a row of this test"
checked = "2026-12-01"

[[models]]
provider = "openai"
model = "acme-openai-only-1"
from = "2026-01-01"
input_mtok = 1.0
output_mtok = 2.0
source = "a row of this test"
checked = "2026-12-01"
"""


def test_an_overlay_row_prices_only_its_providers_model_in_its_dates(tmp_path, monkeypatch):
    _providers(tmp_path, monkeypatch, lambda folder: (folder / "prices.toml").write_text(
        (ROOT / "providers" / "prices.toml").read_text() + OVERLAY_ROWS))
    book = PriceBook()
    day = int(NOV // 86400)
    # an override row for an id no list has: one tier, its prices (a million fresh tokens: $3)
    assert book.tier_starts("anthropic", "acme-override-1", day) == []
    assert book.cost("anthropic", "acme-override-1", Usage(1_000_000), NOV).usd == pytest.approx(3.0)
    assert book.tier_starts("anthropic", "acme-override-1", int(_at("2026-12-01T00:00:00") // 86400)) is None
    # openai's row is no price of anthropic's id of the same name
    assert book.tier_starts("openai", "acme-openai-only-1", day) == []
    assert book.tier_starts("anthropic", "acme-openai-only-1", day) is None
    assert book.cost("anthropic", "acme-openai-only-1", Usage(1_000_000), NOV).usd is None
    assert book.cost("openai", "acme-override-1", Usage(1_000_000), NOV).usd is None  # nor an override row
    assert book.tier_starts("openai", "acme-override-1", day) is None
    assert book.unknown_models == {"acme-override-1", "acme-openai-only-1"}


def test_an_id_priced_through_a_sourced_alias_is_noted_once():
    """providers/prices.toml: Gemini CLI logs 'gemini-3-pro', priced as gemini-3-pro-preview ($2.00 input per
    million up to 200,000 tokens of prompt)."""
    book = PriceBook()
    for _ in range(2):
        assert book.cost("gemini", "gemini-3-pro", Usage(1_000_000 // 10), NOV).usd == pytest.approx(0.2, rel=1e-9)
    assert book.notes == ["gemini-3-pro priced as gemini-3-pro-preview: a sourced alias in providers/prices.toml "
                          "(checked 2026-12-06); ids that no price list or alias names stay unpriced"]
    book.cost("gemini", "gemini-3-pro-preview", Usage(100_000), NOV)  # its own id: nothing to say
    assert len(book.notes) == 1


def test_a_day_is_priced_by_its_utc_date_whatever_the_machines_zone(tmp_path, monkeypatch):
    """A dated price applies from 00:00 UTC: a machine 14 hours ahead (Kiribati) prices Sonnet 4.6's last day
    of the long-context premium as that day, not the next."""
    import time

    monkeypatch.setenv("TZ", "Etc/GMT-14")  # (POSIX sign: 14 hours east of UTC)
    time.tzset()
    try:
        book = PriceBook(dataset=DatasetCache(tmp_path))  # (priced here, under this zone: not from a cache)
        units = book.unit_prices("anthropic", "claude-sonnet-4-6", _at("2026-03-12T20:00:00"), 300_000)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert units == pytest.approx(LONG, rel=1e-9)


# The dataset's AWS Bedrock list for Sonnet 4.6: $3.30 input, $0.33 read, $4.125 / $6.60 writes, $16.50 output
# per million, at any prompt length and on 2026-03-12 too (the first-party list still had its long tier then)
BEDROCK = {"fresh": 3.3e-6, "read": 3.3e-7, "write_5m": 4.125e-6, "write_1h": 6.6e-6, "output": 1.65e-5}


@pytest.mark.parametrize("stamp", ["2026-03-12T15:00:00", "2026-11-02T15:00:00"])
def test_a_request_bedrock_served_is_priced_and_tiered_by_bedrocks_list(stamp):
    book = PriceBook()
    when = _at(stamp)
    assert book.unit_prices("anthropic", "claude-sonnet-4-6", when, 300_000, "bedrock") == pytest.approx(
        BEDROCK, rel=1e-9)
    assert book.tier_starts("anthropic", "claude-sonnet-4-6", int(when // 86400), "bedrock") == []
    # 300,000 fresh at $3.30 per million
    assert book.cost("anthropic", "claude-sonnet-4-6", Usage(300_000), when, "bedrock").usd == \
        pytest.approx(0.99, rel=1e-9)
    first_party = book.unit_prices("anthropic", "claude-sonnet-4-6", when, 300_000)
    assert first_party == pytest.approx(LONG if stamp.startswith("2026-03-12") else BASE, rel=1e-9)


def test_an_id_only_its_providers_list_spells_is_priced_under_that_provider():
    """OpenAI's codex-mini ($1.50 input, $0.375 cached, $6 output per million) is on OpenAI's list under an id
    no other list matches: asked of the dataset without its provider it is found nowhere."""
    book = PriceBook()
    # 1,000,000 input of which 200,000 cached, 100,000 output: 800,000 × 1.5 + 200,000 × 0.375 + 100,000 × 6
    cost = book.cost("openai", "codex-mini", Usage(1_000_000, 200_000, 0, 0, 100_000), NOV)
    assert (cost.usd, cost.source) == (pytest.approx(1.875, rel=1e-9), "genai-prices")
    assert book.unit_prices("openai", "codex-mini", NOV, 1_000) == pytest.approx(
        {"fresh": 1.5e-6, "read": 3.75e-7, "write_5m": 1.5e-6, "write_1h": 1.5e-6, "output": 6e-6}, rel=1e-9)
    assert book.tier_starts("openai", "codex-mini", int(NOV // 86400)) == []


def test_a_platforms_model_id_without_the_platform_is_priced_as_its_first_party_id():
    # a Bedrock inference-profile id logged with no platform: priced as claude-sonnet-4-5 (100,000 at $3 per million)
    cost = PriceBook().cost("anthropic", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", Usage(100_000), NOV)
    assert (cost.usd, cost.source) == (pytest.approx(0.3, rel=1e-9), "genai-prices")


def test_one_book_follows_the_providers_folder_it_is_asked_under(tmp_path, monkeypatch):
    """A book's choice of price list is kept per providers folder: Mythos 5.1 at the shipped row's $10 input,
    then at $20 under a folder whose row says so."""
    book = PriceBook()
    assert book.cost("anthropic", "claude-mythos-5-1", Usage(1_000_000), NOV).usd == pytest.approx(10.0)
    _providers(tmp_path, monkeypatch, lambda folder: _replace(
        folder / "prices.toml", 'model = "claude-mythos-5-1"\nfrom = "2026-09-01"\ninput_mtok = 10.0',
        'model = "claude-mythos-5-1"\nfrom = "2026-09-01"\ninput_mtok = 20.0'))
    assert book.cost("anthropic", "claude-mythos-5-1", Usage(1_000_000), NOV).usd == pytest.approx(20.0)


def test_a_request_with_no_time_is_priced_from_the_cache_on_disk_only_the_same_day(tmp_path):
    """The on-disk look-ups are per price period; a request with no time is priced at today's list, which a
    later day of the same dataset may find changed: it is kept under today's day, and what was kept on
    another day (or under no day) is not read."""
    name = f"genai-prices-{version('genai-prices')}.json"
    yesterday = int(dt.datetime.now(dt.timezone.utc).timestamp() // 86400) - 1
    planted = {}
    for day in ("None", f"now{yesterday}"):
        planted |= {f"tiers|anthropic|{SONNET}|{day}": [],
                    f"units|anthropic|{SONNET}|{day}|0": {k: 2 * v for k, v in BASE.items()},
                    f"units|anthropic|{SONNET}|{day}|1": {k: 2 * v for k, v in LONG.items()}}
    (tmp_path / name).write_text(json.dumps(planted))
    book = PriceBook(dataset=DatasetCache(tmp_path))
    assert book.unit_prices("anthropic", SONNET, None, 300_000) == pytest.approx(LONG, rel=1e-9)
    assert book.unit_prices("anthropic", SONNET, None, 10_000) == pytest.approx(BASE, rel=1e-9)
    kept = json.loads((tmp_path / name).read_text())
    today = {k: v for k, v in kept.items() if k not in planted}
    assert {k.rsplit("|now", 1)[1].split("|")[0] for k in today} == {str(yesterday + 1)}
    # the next run, the same day, reads today's entries: change them and it prices from them
    (tmp_path / name).write_text(json.dumps({**kept, **{k: {u: 3 * x for u, x in v.items()} for k, v in today.items()
                                                         if k.startswith("units")}}))
    again = PriceBook(dataset=DatasetCache(tmp_path))
    assert again.unit_prices("anthropic", SONNET, None, 10_000) == pytest.approx(
        {k: 3 * v for k, v in BASE.items()}, rel=1e-9)


# The dataset's Mistral Large 4 list changes twice: $0.68 input / $0.07 read / $2.09 output per million until
# 2026-10-19, $1.36 / $0.14 / $4.18 from 2026-10-20, $0.70 / $0.07 / $2.10 from 2026-10-29
@pytest.mark.parametrize("stamp, fresh, read, output", [
    ("2026-10-19T23:59:59", 6.8e-7, 7e-8, 2.09e-6),
    ("2026-10-20T00:00:00", 1.36e-6, 1.4e-7, 4.18e-6),
    ("2026-10-28T23:59:59", 1.36e-6, 1.4e-7, 4.18e-6),
    ("2026-10-29T00:00:00", 7e-7, 7e-8, 2.1e-6),
    ("2026-11-02T12:00:00", 7e-7, 7e-8, 2.1e-6),
])
def test_a_list_that_changes_twice_prices_each_day_in_its_own_period(stamp, fresh, read, output):
    book = PriceBook()
    for when in (_at("2026-10-10T12:00:00"), _at(stamp)):  # (an earlier period asked first, in the same book)
        units = book.unit_prices("mistral", "mistral-large-4", when, 1_000)
    assert (units["fresh"], units["read"], units["output"]) == (
        pytest.approx(fresh, rel=1e-9), pytest.approx(read, rel=1e-9), pytest.approx(output, rel=1e-9))


def test_a_list_with_a_time_of_day_rule_is_priced_on_each_day():
    """DeepSeek's list has an off-peak rule (a time-of-day constraint): each day is priced apart, at the
    list's day rate ($0.27 input, $0.07 cache hit, $1.10 output per million)."""
    units = PriceBook().unit_prices("deepseek", "deepseek-chat", NOV, 1_000)
    assert (units["fresh"], units["read"], units["output"]) == (
        pytest.approx(2.7e-7, rel=1e-9), pytest.approx(7e-8, rel=1e-9), pytest.approx(1.1e-6, rel=1e-9))
