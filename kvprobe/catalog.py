"""The provider rules catalog: `providers/*.toml` loaded, validated and resolved per model.

Every rule is a table ``{value, source, checked[, alternatives]}``; per-model entries override the provider
defaults. Nothing about provider behaviour is hard-coded elsewhere: code asks ``rules.get("name")``.
"""
from __future__ import annotations

import datetime as dt
import fnmatch
import os
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvprobe.errors import CatalogError

PROVIDERS = ("anthropic", "openai", "deepseek", "gemini", "local")


@dataclass(frozen=True, slots=True)
class Rule:
    """One provider fact with where it came from."""

    name: str
    value: Any
    source: str
    checked: dt.date
    alternatives: tuple[Any, ...] = ()
    scope: str = "provider"  # "provider" or the model family that set it


@dataclass(frozen=True, slots=True)
class ModelFamily:
    family: str
    patterns: tuple[str, ...]
    rules: dict[str, Rule]


@dataclass(frozen=True, slots=True)
class ProviderCatalog:
    provider: str
    endpoints: tuple[str, ...]
    model_prefixes: tuple[str, ...]
    rules: dict[str, Rule]
    models: tuple[ModelFamily, ...]
    path: Path

    def family_for(self, model: str | None) -> ModelFamily | None:
        if not model:
            return None
        for fam in self.models:
            if any(fnmatch.fnmatchcase(model, pat) for pat in fam.patterns):
                return fam
        return None

    def for_model(self, model: str | None) -> "ModelRules":
        fam = self.family_for(model)
        merged = dict(self.rules)
        if fam:
            merged.update(fam.rules)
        return ModelRules(self.provider, model, fam.family if fam else None, merged)


@dataclass(frozen=True, slots=True)
class ModelRules:
    """The rules that apply to one model of one provider."""

    provider: str
    model: str | None
    family: str | None  # None: the model is not listed; provider defaults apply (flag it)
    rules: dict[str, Rule] = field(default_factory=dict)

    @property
    def known_model(self) -> bool:
        return self.family is not None

    def get(self, name: str, default: Any = None) -> Any:
        rule = self.rules.get(name)
        return rule.value if rule is not None else default

    def rule(self, name: str) -> Rule | None:
        return self.rules.get(name)


def providers_dir() -> Path:
    """Where the rule files are: $KVPROBE_PROVIDERS_DIR, the wheel's copy, or the repository's."""
    env = os.environ.get("KVPROBE_PROVIDERS_DIR")
    return Path(env) if env else _default_providers_dir()


@lru_cache(maxsize=1)
def _default_providers_dir() -> Path:
    packaged = Path(__file__).parent / "_providers"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "providers"


def _parse_rule(name: str, raw: Any, where: str, scope: str) -> Rule:
    if not isinstance(raw, dict) or "value" not in raw:
        raise CatalogError(f"{where}: rule '{name}' must be a table with value, source and checked")
    for key in ("source", "checked"):
        if key not in raw:
            raise CatalogError(f"{where}: rule '{name}' has no '{key}'")
    checked = raw["checked"]
    if isinstance(checked, str):
        try:
            checked = dt.date.fromisoformat(checked)
        except ValueError as exc:
            raise CatalogError(f"{where}: rule '{name}' field 'checked': expected YYYY-MM-DD, got {checked!r}") from exc
    if not isinstance(checked, dt.date):
        raise CatalogError(f"{where}: rule '{name}' field 'checked': expected a date")
    return Rule(name, raw["value"], str(raw["source"]), checked, tuple(raw.get("alternatives", ())), scope)


def _parse_model(raw: dict[str, Any], where: str) -> ModelFamily:
    family = raw.get("family")
    patterns = raw.get("match")
    if not isinstance(family, str) or not isinstance(patterns, list) or not patterns:
        raise CatalogError(f"{where}: each [[models]] entry needs 'family' and a non-empty 'match' list")
    rules = {k: _parse_rule(k, v, f"{where} [{family}]", family)
             for k, v in raw.items() if k not in ("family", "match")}
    return ModelFamily(family, tuple(patterns), rules)


def load_provider_file(path: Path) -> ProviderCatalog:
    where = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"{where}: cannot read provider rules: {exc}") from exc
    provider = data.get("provider")
    if provider not in PROVIDERS:
        raise CatalogError(f"{where}: field 'provider' must be one of {', '.join(PROVIDERS)}")
    rules_raw = data.get("rules", {})
    rules = {name: _parse_rule(name, raw, where, "provider") for name, raw in rules_raw.items()}
    models = tuple(_parse_model(m, where) for m in data.get("models", []))
    return ProviderCatalog(provider, tuple(data.get("endpoints", ())), tuple(data.get("model_prefixes", ())),
                           rules, models, path)


@lru_cache(maxsize=8)
def _load_all(directory: str) -> dict[str, ProviderCatalog]:
    root = Path(directory)
    files = sorted(root.glob("*.toml"))
    if not files:
        raise CatalogError(f"{root}: no provider rule files (*.toml) found")
    catalogs = {}
    for path in files:
        cat = load_provider_file(path)
        catalogs[cat.provider] = cat
    return catalogs


def load_catalog(directory: Path | None = None) -> dict[str, ProviderCatalog]:
    return _load_all(str(directory or providers_dir()))


def rules_for(provider: str, model: str | None) -> ModelRules:
    return _rules_for(str(providers_dir()), provider, model)


@lru_cache(maxsize=1024)
def _rules_for(directory: str, provider: str, model: str | None) -> ModelRules:
    cat = _load_all(directory).get(provider)
    if cat is None:
        return ModelRules(provider, model, None, {})
    return cat.for_model(model)
