"""The lint rule catalogue (`rules.toml` beside this file): ids, severities, messages, fixes, patterns."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvprobe.errors import CatalogError

SEVERITIES = ("note", "warning", "error")  # ascending; also the SARIF levels
RULES_FILE = Path(__file__).with_name("rules.toml")


@dataclass(frozen=True, slots=True)
class LintRule:
    id: str
    name: str
    severity: str
    summary: str
    message: str
    fix: str


@dataclass(frozen=True, slots=True)
class VolatilePattern:
    label: str
    regex: re.Pattern[str]
    by_nature: bool = False  # a shape that changes by nature (clock, id, counter): reported on one request too


@dataclass(frozen=True, slots=True)
class LintCatalog:
    rules: dict[str, LintRule]  # by name
    identity_params: tuple[str, ...]
    volatile: tuple[VolatilePattern, ...]

    def rule(self, name: str) -> LintRule:
        return self.rules[name]

    def by_nature(self, label: str) -> bool:
        return any(p.by_nature for p in self.volatile if p.label == label)


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)


def _rule(rule_id: str, raw: dict[str, Any]) -> LintRule:
    try:
        rule = LintRule(rule_id, raw["name"], raw["severity"], raw["summary"], raw["message"], raw["fix"])
    except KeyError as exc:
        raise CatalogError(f"{RULES_FILE}: rule {rule_id} has no {exc.args[0]!r}") from None
    if rule.severity not in SEVERITIES:
        raise CatalogError(f"{RULES_FILE}: rule {rule_id} field 'severity': expected one of {', '.join(SEVERITIES)}")
    return rule


def _pattern(raw: dict[str, Any]) -> VolatilePattern:
    try:
        by_nature = raw.get("by_nature", False)
        if not isinstance(by_nature, bool):
            raise CatalogError(f"{RULES_FILE}: volatile pattern {raw.get('label')!r} field 'by_nature': expected "
                               "true or false")
        return VolatilePattern(raw["label"], re.compile(raw["pattern"]), by_nature)
    except (KeyError, re.error) as exc:
        raise CatalogError(f"{RULES_FILE}: volatile pattern {raw.get('label')!r}: {exc}") from None


@lru_cache(maxsize=1)
def load_lint_catalog() -> LintCatalog:
    data = tomllib.loads(RULES_FILE.read_text(encoding="utf-8"))
    rules = [_rule(rid, raw) for rid, raw in data.get("rules", {}).items()]
    return LintCatalog({r.name: r for r in rules}, tuple(data.get("identity", {}).get("params", ())),
                       tuple(_pattern(p) for p in data.get("volatile", ())))


def volatile_spans(text: str, catalog: LintCatalog) -> list[tuple[int, int, str]]:
    """(start, end, label) of every volatile-looking span, earliest first; overlaps keep the first label."""
    if catalog is load_lint_catalog():  # the same system prompt and tools come back in every request
        return list(_default_spans(text))
    return _spans(text, catalog)


@lru_cache(maxsize=4096)
def _default_spans(text: str) -> tuple[tuple[int, int, str], ...]:
    return tuple(_spans(text, load_lint_catalog()))


def _spans(text: str, catalog: LintCatalog) -> list[tuple[int, int, str]]:
    found: list[tuple[int, int, str]] = []
    for pattern in catalog.volatile:
        for m in pattern.regex.finditer(text):
            if m.end() > m.start() and not any(s < m.end() and m.start() < e for s, e, _ in found):
                found.append((m.start(), m.end(), pattern.label))
    return sorted(found)
