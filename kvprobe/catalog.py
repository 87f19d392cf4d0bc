"""The provider rules catalog: `providers/*.toml` loaded, validated and resolved per model.

Every rule is a table ``{value, source, checked[, alternatives]}``; per-model entries override the provider
defaults. Nothing about provider behaviour is hard-coded elsewhere: code asks ``rules.get("name")``.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from kvprobe import toml_cache
from kvprobe.environ import providers_dir_override
from kvprobe.errors import CatalogError
from kvprobe.model_ids import canonical_model, stem_matches

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

PROVIDERS = ("anthropic", "openai", "deepseek", "gemini", "xai", "mistral", "moonshot", "qwen", "local")


@dataclass(frozen=True, slots=True)
class Rule:
    """One provider fact with where it came from."""

    name: str
    value: Any
    source: str
    checked: dt.date
    alternatives: tuple[Any, ...] = ()
    scope: str = "provider"  # "provider", the model family that set it, or "<platform>" / "<platform>:<family>"


@dataclass(frozen=True, slots=True)
class ModelFamily:
    """A model family's rules (over the provider's defaults) and the model ids it names."""

    family: str
    patterns: tuple[str, ...]  # model stems (kvprobe.model_ids.stem_matches), or fnmatch globs
    rules: dict[str, Rule]
    provider: str | None = None  # in a platform file: the provider whose models the family names

    def matches(self, canonical: str) -> bool:
        return any(stem_matches(canonical, pattern) for pattern in self.patterns)


def _family_of(models: tuple[ModelFamily, ...], model: str | None, provider: str | None = None
               ) -> ModelFamily | None:
    if not model:
        return None
    canonical = canonical_model(model)
    for fam in models:
        if (provider is None or fam.provider in (None, provider)) and fam.matches(canonical):
            return fam
    return None


@dataclass(frozen=True, slots=True)
class PlatformCatalog:
    """A platform serving other providers' models (Bedrock, Vertex, OpenRouter): rules that replace the
    provider's for what it serves, and what tells a request served by it apart (`detect`)."""

    platform: str
    serves: tuple[str, ...]
    rules: dict[str, Rule]
    models: tuple[ModelFamily, ...]
    detect: dict[str, tuple[str, ...]]
    path: Path

    def family_for(self, provider: str, model: str | None) -> ModelFamily | None:
        return _family_of(self.models, model, provider)


@dataclass(frozen=True, slots=True)
class ProviderCatalog:
    """One provider's file: its API paths, model id prefixes, default rules and model families."""

    provider: str
    endpoints: tuple[str, ...]
    model_prefixes: tuple[str, ...]
    rules: dict[str, Rule]
    models: tuple[ModelFamily, ...]
    path: Path

    def family_for(self, model: str | None) -> ModelFamily | None:
        return _family_of(self.models, model)

    def for_model(self, model: str | None, platform: str | None = None,
                  serving: PlatformCatalog | None = None) -> "ModelRules":
        """The rules for a model: provider defaults, its family's, then (served by a platform) the platform's
        rules and the platform's family for the model. A model no family matches is flagged (`fallback`)."""
        fam = self.family_for(model)
        merged = dict(self.rules)
        if fam:
            merged.update(fam.rules)
        platform_family = None
        if serving is not None:
            merged.update(serving.rules)
            pfam = serving.family_for(self.provider, model)
            if pfam:
                merged.update(pfam.rules)
                platform_family = pfam.family
        return ModelRules(self.provider, model, fam.family if fam else None, merged, platform,
                          platform_family, platform_listed=serving is not None or _first_party(self.provider,
                                                                                               platform))


def _first_party(provider: str, platform: str | None) -> bool:
    return platform is None or platform == provider


@dataclass(frozen=True, slots=True)
class ModelRules:
    """The rules that apply to one model of one provider, on one platform."""

    provider: str
    model: str | None
    family: str | None  # None: the model is not listed; provider defaults apply (flag it: `fallback`)
    rules: dict[str, Rule] = field(default_factory=dict)
    platform: str | None = None  # who served it: None or the provider itself for the first-party API
    platform_family: str | None = None  # the platform's own entry for the model, when it has one
    platform_listed: bool = True  # False: a platform the catalog has no rules for (first-party rules used)
    # figures a hot path derives from the rules once (a simulator's settings, pricing multipliers), by name
    derived: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    @property
    def known_model(self) -> bool:
        return self.family is not None

    @property
    def fallback(self) -> str | None:
        """What the rules fell back to, in words, or None when nothing did: every output that used a default
        names the model with this."""
        parts = []
        if not self.known_model:
            parts.append(f"{self.provider} defaults (no rule names {self.model or 'an unnamed model'})")
        if not self.platform_listed:
            parts.append(f"{self.provider}'s own rules (no rules for the {self.platform} platform)")
        return "; ".join(parts) or None

    def get(self, name: str, default: Any = None) -> Any:
        rule = self.rules.get(name)
        return rule.value if rule is not None else default

    def rule(self, name: str) -> Rule | None:
        return self.rules.get(name)


def providers_dir() -> Path:
    """Where the rule files are: $KVPROBE_PROVIDERS_DIR, the wheel's copy, or the repository's."""
    env = providers_dir_override()
    return Path(env) if env else _default_providers_dir()


def providers_dir_key() -> str | None:
    """What names the rules folder in a memo's key (None: the default one): `providers_dir` without making
    a path, for look-ups made once per request (a price is resolved ~14 times a request of a fleet)."""
    return providers_dir_override()


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


def _parse_model(raw: dict[str, Any], where: str, scope_prefix: str = "") -> ModelFamily:
    family = raw.get("family")
    patterns = raw.get("match")
    if not isinstance(family, str) or not isinstance(patterns, list) or not patterns:
        raise CatalogError(f"{where}: each [[models]] entry needs 'family' and a non-empty 'match' list")
    provider = raw.get("provider")
    if provider is not None and provider not in PROVIDERS:
        raise CatalogError(f"{where} [{family}]: field 'provider' must be one of {', '.join(PROVIDERS)}")
    rules = {k: _parse_rule(k, v, f"{where} [{family}]", scope_prefix + family)
             for k, v in raw.items() if k not in ("family", "match", "provider")}
    return ModelFamily(family, tuple(str(p).lower() for p in patterns), rules, provider)


def _read_toml(path: Path) -> dict[str, Any]:
    import tomllib  # here: a run whose rule files are all in the parsed cache (kvprobe.toml_cache) needs none

    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"{path}: cannot read provider rules: {exc}") from exc


def load_provider_file(path: Path, data: dict[str, Any] | None = None) -> ProviderCatalog:
    """`data`: the file's parsed TOML, when the caller has read it already."""
    where = str(path)
    data = _read_toml(path) if data is None else data
    provider = data.get("provider")
    if provider not in PROVIDERS:
        raise CatalogError(f"{where}: field 'provider' must be one of {', '.join(PROVIDERS)}")
    rules_raw = data.get("rules", {})
    rules = {name: _parse_rule(name, raw, where, "provider") for name, raw in rules_raw.items()}
    models = tuple(_parse_model(m, where) for m in data.get("models", []))
    return ProviderCatalog(provider, tuple(data.get("endpoints", ())), tuple(data.get("model_prefixes", ())),
                           rules, models, path)


_DETECT_KEYS = ("hosts", "endpoint_markers", "model_markers", "response_id_prefixes")


def load_platform_file(path: Path, data: dict[str, Any] | None = None) -> PlatformCatalog:
    where = str(path)
    data = _read_toml(path) if data is None else data
    platform = data.get("platform")
    if not isinstance(platform, str) or not platform or platform in PROVIDERS:
        raise CatalogError(f"{where}: field 'platform' must name a platform other than a provider")
    serves = data.get("serves")
    if not isinstance(serves, list) or not serves or any(p not in PROVIDERS for p in serves):
        raise CatalogError(f"{where}: field 'serves' must list providers among {', '.join(PROVIDERS)}")
    detect = data.get("detect", {})
    if not isinstance(detect, dict) or any(k not in _DETECT_KEYS or not isinstance(v, list) for k, v in detect.items()):
        raise CatalogError(f"{where}: table 'detect' takes lists named {', '.join(_DETECT_KEYS)}")
    rules = {name: _parse_rule(name, raw, where, platform) for name, raw in data.get("rules", {}).items()}
    models = tuple(_parse_model(m, where, f"{platform}:") for m in data.get("models", []))
    if any(m.provider is None for m in models):
        raise CatalogError(f"{where}: each [[models]] entry of a platform file names its 'provider'")
    return PlatformCatalog(platform, tuple(serves), rules, models,
                           {k: tuple(str(x).lower() for x in v) for k, v in detect.items()}, path)


@dataclass(frozen=True, slots=True)
class Catalog:
    """Every provider and platform file of a rules folder, by name."""

    providers: dict[str, ProviderCatalog]
    platforms: dict[str, PlatformCatalog]


# the price overlay (kvprobe.price_overlay) and the credential shapes (kvprobe.secrets): their modules read them
# by these names, and the rules never need them (key_shapes.toml alone was half the parse of providers/)
_READ_BY_NAME = frozenset(("prices.toml", "key_shapes.toml"))


@lru_cache(maxsize=8)
def _load_all(directory: str) -> Catalog:
    root = Path(directory)
    files = sorted(root.glob("*.toml"))
    if not files:
        raise CatalogError(f"{root}: no provider rule files (*.toml) found")
    providers: dict[str, ProviderCatalog] = {}
    platforms: dict[str, PlatformCatalog] = {}
    files = [path for path in files if path.name not in _READ_BY_NAME]
    # parsed once, and kept parsed between runs (tomllib is pure Python: ~7 ms for all of providers/)
    for path, head in zip(files, toml_cache.read_all(files, _read_toml)):
        if "platform" in head:
            plat = load_platform_file(path, head)
            platforms[plat.platform] = plat
        elif "provider" in head or not {"prices", "key_shapes"} & head.keys():
            # prices.toml is the price overlay (kvprobe.pricing), key_shapes.toml the credential shapes
            # (kvprobe.secrets)
            cat = load_provider_file(path, head)
            providers[cat.provider] = cat
    return Catalog(providers, platforms)


def load_registry(directory: Path | None = None) -> Catalog:
    """Every provider and platform file."""
    return _load_all(str(directory or providers_dir()))


def load_catalog(directory: Path | None = None) -> dict[str, ProviderCatalog]:
    return _load_all(str(directory or providers_dir())).providers


def load_platforms(directory: Path | None = None) -> dict[str, PlatformCatalog]:
    return _load_all(str(directory or providers_dir())).platforms


def rules_for(provider: str, model: str | None, platform: str | None = None, mode: str | None = None,
              retention: str | None = None) -> ModelRules:
    """The rules for a model of a provider, served by `platform` (None: the provider's own API), for a request
    cached in `mode` (a request's `cache_mode`: where a provider has two modes, `mode_rules` says what
    differs in each) that asks for the cache `retention` it names (a request's own setting, OpenAI's
    `prompt_cache_retention`: one of the rules' `retention_seconds`, which its entries then live)."""
    return _rules_for(str(providers_dir()), provider, model, platform, mode, retention)


@lru_cache(maxsize=1024)
def _rules_for(directory: str, provider: str, model: str | None, platform: str | None,
               mode: str | None = None, retention: str | None = None) -> ModelRules:
    if retention is not None:
        return _retained(_rules_for(directory, provider, model, platform, mode), retention)
    if mode is not None:
        return _in_mode(_rules_for(directory, provider, model, platform), mode)
    catalog = _load_all(directory)
    cat = catalog.providers.get(provider)
    serving = catalog.platforms.get(platform) if platform else None
    if serving is not None and provider not in serving.serves:
        serving = None
    if cat is None:
        return ModelRules(provider, model, None, {}, platform, None, _first_party(provider, platform))
    return cat.for_model(model, platform, serving)


def _retained(rules: ModelRules, asked: str) -> ModelRules:
    """The rules with the retention a request asks for in force (its `default_retention`), where the rules'
    table of retentions names it (spelled with `-` or `_`: SDKs send both `in_memory` and `in-memory`); any
    other value leaves the rules as they are (the provider refuses it, or does not read it)."""
    table = rules.rule("retention_seconds")
    if table is None or not isinstance(table.value, dict):
        return rules
    wanted = asked.replace("-", "_")
    name = next((k for k in table.value if str(k).replace("-", "_") == wanted), None)
    if name is None or name == rules.get("default_retention"):
        return rules
    merged = dict(rules.rules)
    merged["default_retention"] = Rule("default_retention", name, table.source, table.checked, (),
                                       f"{table.scope} (the request asks for {name})")
    return replace(rules, rules=merged)


def _in_mode(rules: ModelRules, mode: str) -> ModelRules:
    base = rules.rule("mode_rules")
    overrides = base.value.get(mode) if base is not None and isinstance(base.value, dict) else None
    if not isinstance(overrides, dict):
        return rules
    merged = dict(rules.rules)
    for name, value in overrides.items():
        merged[name] = Rule(name, value, base.source, base.checked, (), f"{base.scope} ({mode} mode)")
    return replace(rules, rules=merged)
