"""USD prices from the maintained, dated, offline `genai-prices` dataset, with `--price-file` overrides.

Covers base input, cache reads, 5m and 1h cache writes, output and long-context tiers (genai-prices applies
the tier from the request's total input). Models the dataset lacks (and its dated mistakes) are priced from
the sourced overlay in `providers/prices.toml` (kvprobe.price_overlay). A request a platform served is priced
at that platform's list price where the dataset has it (Bedrock, Vertex, OpenRouter, Azure), else at the
provider's. A price file (TOML or JSON, UTF-8) maps model ids to USD per million tokens and wins over both
(`kvprobe schema price-file`)::

    [models."acme-model-1"]
    input_mtok = 3.0           # required, as is output_mtok
    output_mtok = 15.0
    cache_read_mtok = 0.3      # optional: missing cache prices are input_mtok times the provider's
    cache_write_mtok = 3.75    # multipliers (providers/*.toml), and the output says so
    cache_write_1h_mtok = 6.0

Prices are finite numbers of at least 0; anything else is refused with the file and field (exit 2).

Loading the dataset costs ~0.5 s of CPU, more than pricing a whole trace: what each run reads from it (per
model: the days its prices change, its tier thresholds and per-token rates) is kept in a small JSON file
named after the installed genai-prices version, under $KVPROBE_CACHE_DIR (default ~/.cache/kvprobe), so
later runs do not load the dataset at all. Delete the file to rebuild it; an unwritable folder only costs
the time.
"""
from __future__ import annotations

import datetime as dt
import json
import math
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

from kvprobe.catalog import ModelRules, providers_dir_key, rules_for
from kvprobe.errors import InputError
from kvprobe.model_ids import canonical_model
from kvprobe import user_cache
from kvprobe.price_overlay import PRICE_KEYS, alias_of, overlay_row, per_token
from kvprobe.usage import Usage
from kvprobe.wording import show

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

_PROVIDER_IDS = {"anthropic": "anthropic", "openai": "openai", "deepseek": "deepseek", "gemini": "google",
                 "xai": "x-ai", "mistral": "mistral", "moonshot": "moonshotai"}
# genai-prices' ids of the platforms that serve other providers' models: "<provider>@<platform>" price keys
_PLATFORM_IDS = {"bedrock": "aws", "vertex": "google", "openrouter": "openrouter", "azure": "azure"}
OVERLAY_SOURCE = "kvprobe-overlay"
_REQUIRED_KEYS = ("input_mtok", "output_mtok")  # no rule derives an output price, nor input from the rest
# a missing cache price is input_mtok times this multiplier of the provider's rules
_DERIVED = {"cache_read_mtok": "read", "cache_write_mtok": "write_5m", "cache_write_1h_mtok": "write_1h"}


@dataclass(frozen=True, slots=True)
class Cost:
    usd: float | None  # None: no price known for this model
    source: str  # "genai-prices", "price-file", "kvprobe-overlay" (providers/prices.toml), "local" or "unknown"


def _dataset_version() -> str:
    """The installed genai-prices version, from its dist-info folder's name beside the package: asking
    importlib.metadata costs ~30 ms (it reads every installed distribution's metadata), the longest step
    of pricing a trace once the look-ups are cached."""
    from importlib.util import find_spec

    spec = find_spec("genai_prices")
    if spec is not None and spec.origin:
        found = list(Path(spec.origin).parent.parent.glob("genai_prices-*.dist-info"))
        if len(found) == 1:
            return found[0].name[len("genai_prices-"):-len(".dist-info")]
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("genai-prices")
    except PackageNotFoundError:
        return "unknown"


class DatasetCache:
    """Look-ups in the genai-prices dataset, kept on disk between runs (one file per dataset version)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self._data: dict[str, Any] | None = None
        self._path: Path | None = None

    def _load(self) -> dict[str, Any]:
        if self._data is None:
            tag = _dataset_version()
            folder = self.folder or user_cache.folder()
            self._path = folder / f"genai-prices-{tag}.json"
            try:
                self._data = json.loads(self._path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self._data = {}
        return self._data

    def get(self, key: str, compute: Any) -> Any:
        """The cached value of key, else compute() (stored; a None result is stored too)."""
        data = self._load()
        if key in data:
            return data[key]
        value = data[key] = compute()
        self._save()
        return value

    def _save(self) -> None:
        if self._path is None:
            return
        # (unwritten, a read-only home: the dataset is loaded again next run)
        user_cache.write(self._path, json.dumps(self._data, sort_keys=True).encode())


_DATASET = DatasetCache()


@dataclass(slots=True)
class PriceBook:
    overrides: dict[str, dict[str, float]] = field(default_factory=dict)
    _memo: dict[tuple, Any] = field(default_factory=dict)
    unknown_models: set[str] = field(default_factory=set)
    dataset: DatasetCache = field(default_factory=lambda: _DATASET)
    source: str | None = None  # the price file, for notes
    notes: list[str] = field(default_factory=list)  # prices the file did not give and how they were derived

    @classmethod
    def from_file(cls, path: str | Path | None) -> "PriceBook":
        return cls(load_price_file(Path(path)), source=str(path)) if path else cls()

    def override(self, provider: str | None, model: str) -> dict[str, float]:
        """The price file's prices of `model` (USD per million tokens), every cache price filled in: a missing
        one is input_mtok times the provider's multiplier for that class, and a note says so (once)."""
        key = ("override", provider, model)
        if key not in self._memo:
            given = self.overrides[model]
            missing = [k for k in _DERIVED if k not in given]
            full = dict(given)
            if missing:
                factors = cache_multipliers(provider or "anthropic", model)
                full.update({k: given["input_mtok"] * factors[_DERIVED[k]] for k in missing})
                self.notes.append(_derived_note(self.source, provider, model, missing, factors))
            self._memo[key] = full
        return self._memo[key]

    def cost(self, provider: str | None, model: str | None, usage: Usage, when: float | None = None,
             platform: str | None = None) -> Cost:
        if provider == "local":
            return Cost(0.0, "local")
        if model and model in self.overrides:
            return Cost(_override_cost(self.override(provider, model), usage), "price-file")
        if not model:
            return Cost(None, "unknown")
        units, source = self._resolve(provider, model, int(when // 86400) if when else None, usage.input_tokens,
                                      platform)
        if units is None:
            return Cost(None, "unknown")
        total = (units["fresh"] * usage.fresh_input_tokens + units["read"] * usage.cache_read_tokens
                 + units["write_5m"] * usage.cache_write_5m_tokens + units["write_1h"] * usage.cache_write_1h_tokens
                 + units["output"] * usage.output_tokens)
        return Cost(total, source)

    def unit_prices(self, provider: str | None, model: str | None, when: float | None,
                    input_tokens: int, platform: str | None = None) -> dict[str, float] | None:
        """USD per token of each class (fresh, read, write_5m, write_1h, output) for one request's tier."""
        if provider == "local":
            return dict.fromkeys(("fresh", "read", "write_5m", "write_1h", "output"), 0.0)
        if model and model in self.overrides:
            return per_token(self.override(provider, model))
        if not model:
            return None
        return self._resolve(provider, model, int(when // 86400) if when else None, input_tokens, platform)[0]

    def _resolve(self, provider: str | None, model: str, day: int | None, input_tokens: int,
                 platform: str | None) -> tuple[dict[str, float] | None, str]:
        """(per-token prices, where from): an overlay correction, the dataset (the platform's price, then the
        provider's, under the model's own id and then its first-party one), an overlay row, or nothing.

        What is chosen is kept per model, day and platform (every request asks): overlay prices as they are,
        a dataset look-up as its (price key, model id), since the tier, and so the prices, follow each
        request's input (whether a look-up prices the model does not: `_unit_prices`' day memo)."""
        memo = ("resolve", provider, model, day, platform, providers_dir_key())  # whose prices.toml was read
        chosen = self._memo.get(memo)
        if chosen is None:
            chosen = self._memo[memo] = self._choose(provider, model, day, input_tokens, platform)
        units, source = chosen
        if source == "genai-prices":
            key, ref = units
            return self._unit_prices(key, ref, day, input_tokens), source
        if units is None:
            self.unknown_models.add(model)
        return units, source

    def _choose(self, provider: str | None, model: str, day: int | None, input_tokens: int,
                platform: str | None) -> tuple[Any, str]:
        """What `_resolve` prices a model with: (overlay per-token prices, its source), ((price key, model id),
        "genai-prices") or (None, "unknown"), tried in that order."""
        row = overlay_row(provider, model, day, override=True)
        if row is not None:
            return row.units(), OVERLAY_SOURCE
        for key, ref in _lookups(provider, model, platform):
            if self._unit_prices(key, ref, day, input_tokens) is not None:
                self._note_alias(provider, model, ref)
                return (key, ref), "genai-prices"
        row = overlay_row(provider, model, day, override=False)
        if row is not None:
            return row.units(), OVERLAY_SOURCE
        return None, "unknown"

    def _note_alias(self, provider: str | None, model: str, ref: str) -> None:
        """Say (once per model) that a logged id was priced as another through a sourced alias."""
        alias = alias_of(provider, model)
        if alias is None or ref != alias.priced_as:
            return
        note = (f"{model} priced as {alias.priced_as}: a sourced alias in providers/prices.toml (checked "
                f"{alias.checked}); ids that no price list or alias names stay unpriced")
        if note not in self.notes:
            self.notes.append(note)

    def period_day(self, provider: str | None, model: str, day: int | None,
                   platform: str | None = None) -> int | None:
        """A representative day of the price period `day` falls in.

        The dataset's prices change only at dated starts (a time-of-day rule, as for off-peak rates, keeps
        every day apart), so all days of one period share one memo entry: a month of logs is priced with
        a few dataset look-ups, not one per day. A request a platform served may be priced at the platform's
        list (`_lookups`), whose prices change on their own dates: its period is where both lists' periods
        overlap (the later of the two starts).
        """
        if day is None:
            return None
        if platform and platform != provider and platform in _PLATFORM_IDS:
            return max(self.period_day(provider, model, day), self.period_day(f"{provider}@{platform}", model, day))
        key = (provider, model, "starts")
        if key not in self._memo:
            self._memo[key] = self.dataset.get(f"starts|{provider}|{model}", lambda: _period_starts(provider, model))
        starts = self._memo[key]
        if starts is None:
            return day
        if not starts:
            return 0
        i = bisect_right(starts, day)
        return starts[i - 1] if i else starts[0] - 1

    def _unit_prices(self, provider: str | None, model: str, day: int | None, input_tokens: int) -> dict | None:
        """Per-token prices for one model, day and long-context tier (cost is linear inside a tier); None where
        this list does not price the model (its caller tries the next, and names the model when none does)."""
        settled = self._memo.get((provider, model, day, "day"))  # every request of a day asks the same
        if settled is None:
            pday = self.period_day(provider, model, day)
            settled = self._memo[(provider, model, day, "day")] = (pday, self._tier_starts(provider, model, pday))
        day, tiers = settled
        if tiers is None:
            return None
        tier = sum(1 for start in tiers if input_tokens > start)
        key = (provider, model, day, tier)
        if key not in self._memo:
            # a total input inside the tier (rates are linear there), large enough to keep float precision
            n = tiers[tier - 1] + 1 if tier else (tiers[0] if tiers else 1_000_000)
            compute = lambda: self._rates(provider, model, day, n)  # noqa: E731
            self._memo[key] = self.dataset.get(f"units|{provider}|{model}|{_day_key(day)}|{tier}", compute)
        return self._memo[key]

    def _rates(self, provider: str | None, model: str, day: int | None, n: int) -> dict[str, float]:
        calc = lambda **kw: self._calc(provider, model, day, n, kw)  # noqa: E731
        base = calc()
        return {"fresh": base / n, "read": calc(cache_read_tokens=n) / n,
                "write_5m": calc(cache_write_tokens=n) / n,
                "write_1h": calc(cache_write_tokens=n, cache_write_1h_tokens=n) / n,
                "output": (calc(output_tokens=n) - base) / n}

    def tier_starts(self, provider: str | None, model: str, day: int | None,
                    platform: str | None = None) -> list[int] | None:
        """Total-input thresholds of the model's long-context price tiers (None: model not priced), from the
        price list `_resolve` uses: the platform's where it prices the model, else the provider's."""
        for key, ref in _lookups(provider, model, platform):  # then the model's first-party id
            found = self._tier_starts(key, ref, day)
            if found is not None:
                return found
        if overlay_row(provider, model, day, override=False) or overlay_row(provider, model, day, True):
            return []
        self.unknown_models.add(model)
        return None

    def _tier_starts(self, provider: str | None, model: str, day: int | None) -> list[int] | None:
        day = self.period_day(provider, model, day)
        key = (provider, model, day, "tiers")
        if key not in self._memo:
            compute = lambda: self._tiers(provider, model, day)  # noqa: E731
            self._memo[key] = self.dataset.get(f"tiers|{provider}|{model}|{_day_key(day)}", compute)
        return self._memo[key]

    def _tiers(self, provider: str | None, model: str, day: int | None) -> list[int] | None:
        from genai_prices.types import TieredPrices  # imported lazily: ~0.3 s

        try:
            price = self._price(provider, model, day, {"input_tokens": 1})
        except (LookupError, ValueError):
            return None
        return sorted({t.start for v in vars(price.model_price).values()
                       if isinstance(v, TieredPrices) for t in v.tiers})

    def _calc(self, provider: str | None, model: str, day: int | None, n: int, kw: dict[str, int]) -> float:
        return float(self._price(provider, model, day, {"input_tokens": n, **kw}).total_price)

    @staticmethod
    def _price(provider: str | None, model: str, day: int | None, usage: dict[str, Any]):
        from genai_prices import Usage as GUsage, calc_price

        stamp = dt.datetime.fromtimestamp(day * 86400 + 43200, dt.timezone.utc) if day is not None else None
        return calc_price(GUsage(**usage), model_ref=model, provider_id=_genai_id(provider),
                          genai_request_timestamp=stamp)


def _day_key(day: int | None) -> int | str:
    """A look-up's day in the dataset cache's keys: the day's number; without one (a request with no time is
    priced as of now), today's, so a price that changes on a dated start is looked up again from that day
    (the look-up was made anew every run: ~0.25 s of loading the dataset for one request with no time)."""
    return day if day is not None else f"now{int(dt.datetime.now(dt.timezone.utc).timestamp() // 86400)}"


def _genai_id(key: str | None) -> str | None:
    """genai-prices' provider id of a price key ("anthropic", or "anthropic@bedrock": Bedrock's price)."""
    if key and "@" in key:
        return _PLATFORM_IDS.get(key.split("@", 1)[1])
    return _PROVIDER_IDS.get(key or "")


def _lookups(provider: str | None, model: str, platform: str | None) -> list[tuple[str | None, str]]:
    """(price key, model id) pairs to try in order: the platform's list, the provider's under the model's
    own id, the provider's under its first-party id (us.anthropic.claude-...-v1:0 -> claude-...)."""
    out: list[tuple[str | None, str]] = []
    if platform and platform != provider and platform in _PLATFORM_IDS:
        out.append((f"{provider}@{platform}", model))
    out.append((provider, model))
    canonical = canonical_model(model)
    if canonical != model:
        out.append((provider, canonical))
    alias = alias_of(provider, model)  # last: a sourced alias for an id no price list spells so
    if alias is not None:
        out.append((provider, alias.priced_as))
    return out


def _period_starts(provider: str | None, model: str) -> list[int] | None:
    """Epoch days on which the model's prices change ([] : never; None: a time-of-day rule or unknown)."""
    from genai_prices import data_snapshot
    from genai_prices.types import StartDateConstraint

    try:
        _, info = data_snapshot.get_snapshot().find_provider_model(model, None, _genai_id(provider), None)
    except (LookupError, ValueError):
        return None
    conditions = list(info.prices) if isinstance(info.prices, list) else []
    constraints = [c.constraint for c in conditions + list(info.price_variants or ()) if c.constraint is not None]
    if any(not isinstance(c, StartDateConstraint) for c in constraints):
        return None
    epoch = dt.date(1970, 1, 1)
    return sorted({(c.start_date - epoch).days for c in constraints})


def multipliers(rules: ModelRules) -> tuple[float, float, float]:
    """(5m write, 1h write, read) prices relative to fresh input, from the rules (`providers/*.toml`): the 5m
    write multiplier, else the explicit, else the implicit one (else 1); the 1h one, else the 5m one. Once per
    rules object: input equivalents ask on every request."""
    found = rules.derived.get("input_equivalent")
    if found is None:
        writes = rules.get("write_multipliers", {}) or {}
        w5m = float(writes.get("5m", writes.get("explicit", writes.get("implicit", 1.0))))
        found = rules.derived["input_equivalent"] = (w5m, float(writes.get("1h", w5m)),
                                                     float(rules.get("read_multiplier", 1.0)))
    return found


def cache_multipliers(provider: str, model: str | None) -> dict[str, float]:
    """Cache read and write prices relative to fresh input, from the provider's rules (`multipliers`)."""
    w5m, w1h, read = multipliers(rules_for(provider, model))
    return {"read": read, "write_5m": w5m, "write_1h": w1h}


def _derived_note(source: str | None, provider: str | None, model: str, missing: list[str],
                  factors: dict[str, float]) -> str:
    shown = ", ".join(f"{k} = {factors[_DERIVED[k]]:g} × input_mtok" for k in missing)
    return (f"{source or 'price file'}: {model} has no {', '.join(missing)}: priced at {provider or 'anthropic'}'s "
            f"cache multipliers ({shown}; `kvprobe providers {model}` shows their source)")


def _override_cost(prices: dict[str, float], usage: Usage) -> float:
    from decimal import Decimal  # (here: only a price file's rows are summed in decimal; ~1 ms of every start)

    per = Decimal(1_000_000)
    price = {k: Decimal(str(v)) for k, v in prices.items()}
    total = (price["input_mtok"] * usage.fresh_input_tokens + price["cache_read_mtok"] * usage.cache_read_tokens
             + price["cache_write_mtok"] * usage.cache_write_5m_tokens
             + price["cache_write_1h_mtok"] * usage.cache_write_1h_tokens + price["output_mtok"] * usage.output_tokens)
    return float(total / per)


def _decode(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                         file=str(path)) from None


def _price(value: Any, path: Path, where: str) -> float:
    """A price: a finite number of at least 0 (TOML and JSON both spell nan and inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"expected a price in USD per million tokens (a number), got {show(value)}",
                         file=str(path), field=where)
    if not math.isfinite(value) or value < 0:
        raise InputError(f"expected a finite price of at least 0, got {value:g}", file=str(path), field=where)
    return float(value)


def load_price_file(path: Path) -> dict[str, dict[str, float]]:
    if not path.is_file():
        raise InputError("price file does not exist", file=str(path))
    import tomllib  # (here: a price file is rare, and tomllib ~1.5 ms of every `usage` start)

    text = _decode(path)
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"cannot parse price file: {exc}", file=str(path)) from None
    models = data.get("models", data) if isinstance(data, dict) else data
    if not isinstance(models, dict) or not models:
        raise InputError("expected a table of models (`kvprobe schema price-file`)", file=str(path), field="models")
    out: dict[str, dict[str, float]] = {}
    for model, prices in models.items():
        where = f"models.{model}"
        if not isinstance(prices, dict):
            raise InputError("expected a table of prices", file=str(path), field=where)
        for key in prices:
            if key not in PRICE_KEYS:
                raise InputError(f"unknown price; expected one of {', '.join(PRICE_KEYS)}", file=str(path),
                                 field=f"{where}.{key}")
        for key in _REQUIRED_KEYS:
            if key not in prices:
                raise InputError(f"missing: every model needs {' and '.join(_REQUIRED_KEYS)} (cache prices may "
                                 "be left to the provider's multipliers)", file=str(path), field=f"{where}.{key}")
        out[model] = {k: _price(v, path, f"{where}.{k}") for k, v in prices.items()}
    return out
