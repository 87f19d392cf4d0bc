"""The dated, sourced price overlay (`providers/prices.toml`): models the genai-prices dataset lacks, and the
dated corrections it needs. Each row: provider, model, `from` (and optional `until`) date, per-million-token
prices, source and checked date; `override = true` makes a row win over genai-prices inside its dates."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kvprobe.catalog import PROVIDERS, providers_dir
from kvprobe.errors import CatalogError
from kvprobe.model_ids import canonical_model

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

OVERLAY_FILE = "prices.toml"
PRICE_KEYS = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok", "cache_write_1h_mtok")
_EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True, slots=True)
class PriceRow:
    provider: str
    model: str
    start: dt.date
    until: dt.date | None
    prices: dict[str, float]
    override: bool
    source: str
    checked: dt.date

    def covers(self, day: int | None) -> bool:
        """Whether the row applies on an epoch day (None: no date known, the newest row applies)."""
        if day is None:
            return self.until is None
        date = _EPOCH + dt.timedelta(days=day)
        return self.start <= date and (self.until is None or date < self.until)

    def units(self) -> dict[str, float]:
        """USD per token of each class, as `PriceBook.unit_prices` gives them."""
        return per_token(self.prices)


def per_token(p: dict[str, float]) -> dict[str, float]:
    """USD per token of each class (fresh, read, write_5m, write_1h, output) from USD per million tokens: an
    overlay row's missing cache read or 5m write is priced as input, a 1h write as the 5m one, output as 0 (a
    price file's prices come with every cache price filled in: `PriceBook.override`)."""
    per = 1_000_000
    base = p["input_mtok"]
    write = p.get("cache_write_mtok", base)
    return {"fresh": base / per, "read": p.get("cache_read_mtok", base) / per, "write_5m": write / per,
            "write_1h": p.get("cache_write_1h_mtok", write) / per, "output": p.get("output_mtok", 0.0) / per}


def parse_date(raw: Any, where: str, name: str) -> dt.date:
    """A provider data file's date field (TOML date or YYYY-MM-DD text); CatalogError naming it."""
    if isinstance(raw, dt.date):
        return raw
    try:
        return dt.date.fromisoformat(str(raw))
    except ValueError:
        raise CatalogError(f"{where}: field '{name}': expected YYYY-MM-DD, got {raw!r}") from None


def _row(raw: Any, where: str) -> PriceRow:
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: each [[models]] entry must be a table")
    for key in ("provider", "model", "from", "input_mtok", "source", "checked"):
        if key not in raw:
            raise CatalogError(f"{where}: a price row has no '{key}'")
    if raw["provider"] not in PROVIDERS:
        raise CatalogError(f"{where} [{raw['model']}]: field 'provider' must be one of {', '.join(PROVIDERS)}")
    prices = {k: raw[k] for k in PRICE_KEYS if k in raw}
    bad = [k for k, v in prices.items() if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0]
    if bad:
        raise CatalogError(f"{where} [{raw['model']}]: field '{bad[0]}': expected a price of 0 or more")
    until = parse_date(raw["until"], where, "until") if "until" in raw else None
    return PriceRow(str(raw["provider"]), canonical_model(str(raw["model"])), parse_date(raw["from"], where, "from"),
                    until, {k: float(v) for k, v in prices.items()}, bool(raw.get("override", False)),
                    str(raw["source"]), parse_date(raw["checked"], where, "checked"))


@dataclass(frozen=True, slots=True)
class ModelAlias:
    """A model id an agent logs that no price list spells so, and the id it is priced as (sourced)."""

    provider: str
    logged: str
    priced_as: str
    source: str
    checked: dt.date


def _alias(raw: Any, where: str) -> ModelAlias:
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: each [[aliases]] entry must be a table")
    for key in ("provider", "logged", "priced_as", "source", "checked"):
        if not isinstance(raw.get(key), (str, dt.date)) or not raw.get(key):
            raise CatalogError(f"{where}: an [[aliases]] entry has no '{key}'")
    if raw["provider"] not in PROVIDERS:
        raise CatalogError(f"{where} [{raw['logged']}]: field 'provider' must be one of {', '.join(PROVIDERS)}")
    return ModelAlias(str(raw["provider"]), canonical_model(str(raw["logged"])), str(raw["priced_as"]),
                      str(raw["source"]), parse_date(raw["checked"], where, "checked"))


@lru_cache(maxsize=4)
def _load(directory: str) -> tuple[tuple[PriceRow, ...], tuple[ModelAlias, ...]]:
    from kvprobe import toml_cache

    path = Path(directory) / OVERLAY_FILE
    if not path.is_file():
        return (), ()
    try:  # kept parsed between runs (kvprobe.toml_cache): tomllib and typing are ~7 ms of a `usage` start
        [data] = toml_cache.read_all([path], toml_cache.parse)
    except (OSError, ValueError) as exc:  # (a TOML error and a bad encoding are ValueErrors)
        raise CatalogError(f"{path}: cannot read the price overlay: {exc}") from exc
    return (tuple(_row(raw, str(path)) for raw in data.get("models", [])),
            tuple(_alias(raw, str(path)) for raw in data.get("aliases", [])))


def overlay_rows(directory: Path | None = None) -> tuple[PriceRow, ...]:
    return _load(str(directory or providers_dir()))[0]


def overlay_aliases(directory: Path | None = None) -> tuple[ModelAlias, ...]:
    return _load(str(directory or providers_dir()))[1]


def alias_of(provider: str | None, model: str) -> ModelAlias | None:
    """The alias that prices a logged model id under another one, where `providers/prices.toml` lists one."""
    name = canonical_model(model)
    for alias in overlay_aliases():
        if alias.logged == name and alias.provider == (provider or alias.provider):
            return alias
    return None


def overlay_row(provider: str | None, model: str, day: int | None, override: bool) -> PriceRow | None:
    """The overlay row pricing a model on a day: among the override rows, or the plain ones."""
    name = canonical_model(model)
    for row in overlay_rows():
        if row.override == override and row.model == name and row.provider == (provider or row.provider) \
                and row.covers(day):
            return row
    return None
