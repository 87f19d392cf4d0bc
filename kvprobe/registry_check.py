"""Is the rule registry current? Rules (and overlay prices) checked longer ago than a limit, and the models
a log uses that no rule covers (`kvprobe providers --check`).

A rule is stale when its `checked` date is more than `days` before `as_of`. A model is uncovered when no
family of its provider names it (its requests ran on provider defaults) or a platform served it that the
catalog has no rules for; both are named with what they fell back to.
"""
from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.catalog import Catalog, load_registry, rules_for
from kvprobe.agents import AGENTS_DIR, profiles
from kvprobe.price_overlay import OVERLAY_FILE, overlay_aliases, overlay_rows
from kvprobe.request import model_from_endpoint

DEFAULT_MAX_AGE_DAYS = 90


@dataclass(frozen=True, slots=True)
class StaleRule:
    file: str
    scope: str  # provider, platform, family (or "price" for an overlay row)
    rule: str
    checked: dt.date
    age_days: int

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "scope": self.scope, "rule": self.rule, "checked": self.checked.isoformat(),
                "age_days": self.age_days}


@dataclass(frozen=True, slots=True)
class Uncovered:
    provider: str
    platform: str | None
    model: str
    requests: int
    fell_back_to: str

    def to_json(self) -> dict[str, Any]:
        return {"provider": self.provider, "platform": self.platform, "model": self.model,
                "requests": self.requests, "fell_back_to": self.fell_back_to}


@dataclass(slots=True)
class RegistryCheck:
    as_of: dt.date
    max_age_days: int
    rules_checked: int = 0
    stale: list[StaleRule] = field(default_factory=list)
    models_seen: int = 0
    uncovered: list[Uncovered] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.stale and not self.uncovered

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "as_of": self.as_of.isoformat(), "max_age_days": self.max_age_days,
                "rules_checked": self.rules_checked, "stale_rules": [s.to_json() for s in self.stale],
                "models_seen": self.models_seen, "uncovered_models": [u.to_json() for u in self.uncovered]}


def _dated(catalog: Catalog) -> Iterable[tuple[str, str, str, dt.date]]:
    """(file, scope, rule, checked) of every rule and overlay price row."""
    for holder in [*catalog.providers.values(), *catalog.platforms.values()]:
        name = getattr(holder, "provider", None) or getattr(holder, "platform")
        for rule in holder.rules.values():
            yield holder.path.name, name, rule.name, rule.checked
        for fam in holder.models:
            for rule in fam.rules.values():
                yield holder.path.name, f"{name} / {fam.family}", rule.name, rule.checked
    for row in overlay_rows():
        yield OVERLAY_FILE, f"price / {row.provider}", row.model, row.checked
    for alias in overlay_aliases():
        yield OVERLAY_FILE, f"alias / {alias.provider}", alias.logged, alias.checked
    for profile in {p.path: p for p in profiles().values()}.values():  # the agents' knobs (kvprobe.agents)
        name = f"{AGENTS_DIR}/{Path(profile.path).name}"
        for key, advice in profile.advice.items():
            yield name, f"agent / {profile.name}", f"advice.{key}", advice.checked
        if profile.longer_lifetime is not None:
            yield name, f"agent / {profile.name}", "longer_lifetime", profile.longer_lifetime.checked


def stale_rules(max_age_days: int, as_of: dt.date, directory: Path | None = None) -> tuple[int, list[StaleRule]]:
    """(rules looked at, the stale ones: oldest first)."""
    catalog = load_registry(directory)
    dated = list(_dated(catalog))
    stale = [StaleRule(f, scope, rule, checked, (as_of - checked).days)
             for f, scope, rule, checked in dated if (as_of - checked).days > max_age_days]
    stale.sort(key=lambda s: (s.checked, s.file, s.scope, s.rule))
    return len(dated), stale


def uncovered_models(used: Counter[tuple[str, str | None, str]]) -> list[Uncovered]:
    """The (provider, platform, model) triples, with their request counts, that no rule covers."""
    out = []
    for (provider, platform, model), count in sorted(used.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2])):
        rules = rules_for(provider, model, platform)
        if rules.fallback:
            out.append(Uncovered(provider, platform, model, count, rules.fallback))
    return out


def models_in(records: Iterable[Any]) -> Counter[tuple[str, str | None, str]]:
    """(provider, platform, model) of every record that names a model, with counts."""
    used: Counter[tuple[str, str | None, str]] = Counter()
    for rec in records:
        model = rec.model or model_from_endpoint(rec.endpoint)
        if isinstance(model, str) and model and model != "<synthetic>":
            used[(rec.provider or "anthropic", rec.platform, model)] += 1
    return used


def check_registry(max_age_days: int = DEFAULT_MAX_AGE_DAYS, as_of: dt.date | None = None,
                   records: Iterable[Any] = ()) -> RegistryCheck:
    as_of = as_of or dt.date.today()
    result = RegistryCheck(as_of, max_age_days)
    result.rules_checked, result.stale = stale_rules(max_age_days, as_of)
    used = models_in(records)
    result.models_seen = len(used)
    result.uncovered = uncovered_models(used)
    return result
