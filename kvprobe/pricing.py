"""USD prices from the maintained, dated, offline `genai-prices` dataset, with `--price-file` overrides.

Covers base input, cache reads, 5m and 1h cache writes, output and long-context tiers (genai-prices applies
the tier from the request's total input). A price file (TOML or JSON) maps model ids to per-million-token
prices and wins over the dataset: ``[models."claude-sonnet-4-5"] input_mtok = 3.0 ...``.
"""
from __future__ import annotations

import datetime as dt
import json
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from kvprobe.errors import InputError
from kvprobe.usage import Usage

_PROVIDER_IDS = {"anthropic": "anthropic", "openai": "openai", "deepseek": "deepseek", "gemini": "google"}
_OVERRIDE_KEYS = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok", "cache_write_1h_mtok")


@dataclass(frozen=True, slots=True)
class Cost:
    usd: float | None  # None: no price known for this model
    source: str  # "genai-prices", "price-file", "local" or "unknown"


@dataclass(slots=True)
class PriceBook:
    overrides: dict[str, dict[str, float]] = field(default_factory=dict)
    _memo: dict[tuple, Cost] = field(default_factory=dict)
    unknown_models: set[str] = field(default_factory=set)

    @classmethod
    def from_file(cls, path: str | Path | None) -> "PriceBook":
        return cls(load_price_file(Path(path))) if path else cls()

    def cost(self, provider: str | None, model: str | None, usage: Usage, when: float | None = None) -> Cost:
        if provider == "local":
            return Cost(0.0, "local")
        if model and model in self.overrides:
            return Cost(_override_cost(self.overrides[model], usage), "price-file")
        key = (provider, model, usage.input_tokens, usage.cache_read_tokens, usage.cache_write_5m_tokens,
               usage.cache_write_1h_tokens, usage.output_tokens, int(when // 86400) if when else None)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._dataset_cost(provider, model, usage, when)
        return hit

    def _dataset_cost(self, provider: str | None, model: str | None, usage: Usage, when: float | None) -> Cost:
        from genai_prices import Usage as GUsage, calc_price  # imported lazily: ~0.15 s

        if not model:
            return Cost(None, "unknown")
        kwargs: dict[str, Any] = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                                  "cache_read_tokens": usage.cache_read_tokens}
        if usage.cache_write_tokens:
            kwargs["cache_write_tokens"] = usage.cache_write_tokens
            if usage.cache_write_1h_tokens:
                kwargs["cache_write_1h_tokens"] = usage.cache_write_1h_tokens
        stamp = dt.datetime.fromtimestamp(when, dt.timezone.utc) if when else None
        try:
            price = calc_price(GUsage(**kwargs), model_ref=model, provider_id=_PROVIDER_IDS.get(provider or ""),
                               genai_request_timestamp=stamp)
        except (LookupError, ValueError):
            self.unknown_models.add(model)
            return Cost(None, "unknown")
        return Cost(float(price.total_price), "genai-prices")


def _override_cost(prices: dict[str, float], usage: Usage) -> float:
    per = Decimal(1_000_000)
    base = Decimal(str(prices.get("input_mtok", 0)))
    write_5m = Decimal(str(prices.get("cache_write_mtok", prices.get("input_mtok", 0))))
    write_1h = Decimal(str(prices.get("cache_write_1h_mtok", prices.get("cache_write_mtok", 0))))
    read = Decimal(str(prices.get("cache_read_mtok", prices.get("input_mtok", 0))))
    total = (base * usage.fresh_input_tokens + read * usage.cache_read_tokens + write_5m * usage.cache_write_5m_tokens
             + write_1h * usage.cache_write_1h_tokens + Decimal(str(prices.get("output_mtok", 0))) * usage.output_tokens)
    return float(total / per)


def load_price_file(path: Path) -> dict[str, dict[str, float]]:
    if not path.is_file():
        raise InputError("price file does not exist", file=str(path))
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"cannot parse price file: {exc}", file=str(path)) from None
    models = data.get("models", data)
    if not isinstance(models, dict):
        raise InputError("expected a table of models", file=str(path), field="models")
    out: dict[str, dict[str, float]] = {}
    for model, prices in models.items():
        if not isinstance(prices, dict):
            raise InputError("expected a table of prices", file=str(path), field=f"models.{model}")
        for key, value in prices.items():
            if key not in _OVERRIDE_KEYS or not isinstance(value, (int, float)):
                raise InputError(f"expected one of {', '.join(_OVERRIDE_KEYS)} with a number",
                                 file=str(path), field=f"models.{model}.{key}")
        out[model] = {k: float(v) for k, v in prices.items()}
    return out
