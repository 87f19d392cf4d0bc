"""Gate thresholds from `kvprobe.toml` ([gate]) or `pyproject.toml` ([tool.kvprobe.gate]), overridden by flags.

Every value goes through one parser per kind, whether it came from a flag or a config file: ratios are a
fraction from 0 to 1 (`0.8`) or a percentage (`80%`); amounts (USD, tokens) are numbers of at least 0.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kvprobe.errors import InputError
from kvprobe.wording import show

# setting -> kind; "ratio_up_to_1": a share that cannot exceed 100 %; "ratio": may (a 150 % regression)
KINDS = {"max_cost_usd": "amount", "max_cost_per_task": "amount", "min_hit_ratio": "ratio_up_to_1",
         "max_input_equivalent": "amount", "baseline": "path", "max_regression": "ratio"}


@dataclass(slots=True)
class Thresholds:
    max_cost_usd: float | None = None
    max_cost_per_task: float | None = None
    min_hit_ratio: float | None = None
    max_input_equivalent: float | None = None
    baseline: str | None = None
    max_regression: float | None = None  # fraction: 0.1 = 10 %

    def merged(self, **flags: Any) -> "Thresholds":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update({k: v for k, v in flags.items() if v is not None})
        return Thresholds(**values)

    @property
    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self) if f.name != "max_regression")

    def check_complete(self, source: str | None = None) -> None:
        """Refuse a regression limit without a baseline (`source`: the config file that set it, if any)."""
        if self.max_regression is not None and self.baseline is None:
            raise InputError("a regression limit needs a baseline to compare with: pass --baseline "
                             "baseline.json (written by `kvprobe baseline`)", file=source,
                             field="max_regression" if source else "--max-regression")


def _given(value: Any) -> str:
    """The value as the user typed it: a flag's text as is, a config value as JSON."""
    return value if isinstance(value, str) else show(value)


def _number(value: Any, where: str, expected: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise InputError(f"expected {expected}, got {_given(value)}", field=where) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"expected {expected}, got {_given(value)}", field=where)
    return float(value)


def parse_ratio(value: Any, where: str, up_to_1: bool = True) -> float:
    """`0.8` or `80%` -> 0.8. A bare number above 1 is refused: `50` means neither 50 % nor 5000 %."""
    expected = ("a fraction from 0 to 1 like 0.8 or a percentage like 80%" if up_to_1 else
                "a fraction like 0.1 or a percentage like 10%")
    text = value.strip() if isinstance(value, str) else None
    if text and text.endswith("%"):
        fraction = _number(text[:-1], where, expected) / 100
        if fraction < 0 or (up_to_1 and fraction > 1):
            bound = "from 0% to 100%" if up_to_1 else "of at least 0%"
            raise InputError(f"expected a percentage {bound}, got {text}", field=where)
        return fraction
    fraction = _number(value, where, expected)
    if fraction < 0:
        raise InputError(f"expected {expected}, got {_given(value)}: a ratio cannot be negative", field=where)
    if fraction > 1:
        raise InputError(f"expected {expected}, got {_given(value)} (for {fraction:g} percent write "
                         f"{fraction:g}%)", field=where)
    return fraction


def parse_amount(value: Any, where: str) -> float:
    """A limit in USD or tokens: a number of at least 0."""
    amount = _number(value, where, "a number of at least 0")
    if amount < 0:
        raise InputError(f"expected a number of at least 0, got {amount:g}: a limit cannot be negative",
                         field=where)
    return amount


def parse_setting(name: str, value: Any, where: str) -> Any:
    kind = KINDS[name]
    if kind == "amount":
        return parse_amount(value, where)
    if kind == "path":
        if not isinstance(value, str):
            raise InputError(f"expected a file name, got {_given(value)}", field=where)
        return value
    return parse_ratio(value, where, up_to_1=kind == "ratio_up_to_1")


def _from_table(table: dict[str, Any], source: str) -> Thresholds:
    values: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in KINDS:
            raise InputError(f"unknown gate setting; expected one of {', '.join(sorted(KINDS))}", file=source,
                             field=key)
        try:
            values[name] = parse_setting(name, value, key)
        except InputError as exc:
            raise InputError(exc.message, file=source, field=key) from None
    return Thresholds(**values)


def load_thresholds(directory: Path) -> tuple[Thresholds, str | None]:
    """Thresholds from the first config found in `directory`; (empty, None) when there is none."""
    for name, path_keys in (("kvprobe.toml", ("gate",)), ("pyproject.toml", ("tool", "kvprobe", "gate"))):
        path = directory / name
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"invalid TOML: {exc}", file=str(path)) from None
        table: Any = data
        for key in path_keys:
            table = table.get(key, {}) if isinstance(table, dict) else {}
        if table:
            return _from_table(table, str(path)), str(path)
    return Thresholds(), None
