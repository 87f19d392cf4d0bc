"""Gate thresholds from `kvprobe.toml` ([gate]) or `pyproject.toml` ([tool.kvprobe.gate]), overridden by flags."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kvprobe.errors import InputError


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


def parse_fraction(value: Any, where: str) -> float:
    """`10%`, `0.1` or 10 (percent when > 1) -> 0.1."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text[:-1]) / 100 if text.endswith("%") else parse_fraction(float(text), where)
        except ValueError:
            raise InputError(f"expected a percentage like 10% or a fraction like 0.1, got {value!r}",
                             field=where) from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) / 100 if value > 1 else float(value)
    raise InputError(f"expected a percentage like 10%, got {value!r}", field=where)


def _from_table(table: dict[str, Any], source: str) -> Thresholds:
    known = {f.name for f in fields(Thresholds)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in known:
            raise InputError(f"unknown gate setting; expected one of {', '.join(sorted(known))}", file=source,
                             field=key)
        if name == "max_regression":
            value = parse_fraction(value, key)
        elif name == "baseline":
            value = str(value)
        elif not isinstance(value, (int, float)) or isinstance(value, bool):
            raise InputError("expected a number", file=source, field=key)
        values[name] = value
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
