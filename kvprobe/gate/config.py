"""Gate settings from `kvprobe.toml` ([gate]) or `pyproject.toml` ([tool.kvprobe.gate]), overridden by flags.

The config is found as pytest and ruff find theirs: in the current directory, else the nearest folder above
it that has one (`--config PATH` names it instead). Where one folder holds both files with gate settings,
`kvprobe.toml` wins and a warning says so if they disagree. Paths in a config (`baseline`, `price_file`)
are relative to the file's folder, so the gate reads the same files from any subdirectory.

Every value goes through one parser per kind, whether it came from a flag or a config file: ratios are a
fraction from 0 to 1 (`0.8`) or a percentage (`80%`); amounts (USD, tokens) are numbers of at least 0.
`kvprobe schema gate-config` prints every key with its meaning.
"""
from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kvprobe.errors import InputError
from kvprobe.wording import show

# setting -> kind; "ratio_up_to_1": a share that cannot exceed 100 %; "ratio": may (a 150 % regression)
KINDS = {"max_cost_usd": "amount", "max_cost_per_task": "amount", "min_hit_ratio": "ratio_up_to_1",
         "max_input_equivalent": "amount", "baseline": "path", "max_regression": "ratio",
         "max_hit_ratio_drop": "ratio_up_to_1", "max_failed_requests": "count", "price_file": "path",
         "undecided": "choice"}
CHOICES = {"undecided": ("fail", "warn")}
THRESHOLDS = ("max_cost_usd", "max_cost_per_task", "min_hit_ratio", "max_input_equivalent", "baseline")
# (file name, keys to the gate table): the first of a folder wins
CONFIG_FILES = (("kvprobe.toml", ("gate",)), ("pyproject.toml", ("tool", "kvprobe", "gate")))
DEFAULT_MAX_REGRESSION = 0.1


@dataclass(slots=True)
class Thresholds:
    max_cost_usd: float | None = None
    max_cost_per_task: float | None = None
    min_hit_ratio: float | None = None
    max_input_equivalent: float | None = None
    baseline: str | None = None
    max_regression: float | None = None  # fraction: 0.1 = 10 %
    max_hit_ratio_drop: float | None = None  # percentage points as a fraction (0.05 = 5 points); default max_regression
    max_failed_requests: int | None = None  # default 0: any failed request fails the gate
    price_file: str | None = None
    undecided: str | None = None  # "fail" (default: exit 3) or "warn" (exit 0 with a warning)
    sources: dict[str, str] = field(default_factory=dict)  # setting -> "--flag" or the config file

    def merged(self, source: str | None = None, **values: Any) -> "Thresholds":
        """These settings with `values` (not None) on top; `source` names where those came from (None: the
        flag of each)."""
        merged = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sources"}
        sources = dict(self.sources)
        for name, value in values.items():
            if value is not None:
                merged[name] = value
                sources[name] = source or "--" + name.replace("_", "-")
        return Thresholds(**merged, sources=sources)

    @property
    def empty(self) -> bool:
        """No threshold to check (a regression limit, price file or mode alone checks nothing). The failed
        requests, always checked (0 by default), are a threshold where one was set: `--max-failed-requests 0`
        alone is a gate on them."""
        return all(getattr(self, name) is None for name in THRESHOLDS) and "max_failed_requests" not in self.sources

    @property
    def regression_limit(self) -> float:
        return self.max_regression if self.max_regression is not None else DEFAULT_MAX_REGRESSION

    @property
    def hit_ratio_drop_limit(self) -> float:
        return self.max_hit_ratio_drop if self.max_hit_ratio_drop is not None else self.regression_limit

    def check_complete(self) -> None:
        """Refuse a regression limit without a baseline, naming the flag or config file that set it."""
        for name in ("max_regression", "max_hit_ratio_drop"):
            if getattr(self, name) is not None and self.baseline is None:
                source = self.sources.get(name, "--" + name.replace("_", "-"))
                flag = source.startswith("--")
                raise InputError("a regression limit needs a baseline to compare with: pass --baseline "
                                 "baseline.json (written by `kvprobe baseline`)", file=None if flag else source,
                                 field=source if flag else name)


@dataclass(slots=True)
class GateConfig:
    """The settings a config file gave, where it is, where each key is in it, and what was worth a warning."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    path: str | None = None
    table: str | None = None  # "[gate]" or "[tool.kvprobe.gate]"
    lines: dict[str, int] = field(default_factory=dict)  # setting -> line in the file (for annotations)
    warnings: list[str] = field(default_factory=list)


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


def _parse_count(value: Any, where: str) -> int:
    number = _number(value, where, "a whole number of at least 0")
    if number < 0 or number != int(number):
        raise InputError(f"expected a whole number of at least 0, got {_given(value)}", field=where)
    return int(number)


def parse_setting(name: str, value: Any, where: str) -> Any:
    kind = KINDS[name]
    if kind == "amount":
        return parse_amount(value, where)
    if kind == "count":
        return _parse_count(value, where)
    if kind in ("path", "choice"):
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"expected {'a file name' if kind == 'path' else ' or '.join(CHOICES[name])}, "
                             f"got {_given(value)}", field=where)
        if kind == "choice" and value not in CHOICES[name]:
            raise InputError(f"expected {' or '.join(CHOICES[name])}, got {_given(value)}", field=where)
        return value
    return parse_ratio(value, where, up_to_1=kind == "ratio_up_to_1")


def _read_toml(path: Path) -> tuple[dict[str, Any], str]:
    """A TOML file's data and text; InputError (exit 2) for bytes that are not UTF-8 or text that is not TOML."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); TOML files "
                         "are UTF-8", file=str(path)) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"invalid TOML: {exc}", file=str(path)) from None


def _table(data: dict[str, Any], keys: tuple[str, ...], path: Path) -> dict[str, Any] | None:
    table: Any = data
    for key in keys:
        if not isinstance(table, dict) or key not in table:
            return None
        table = table[key]
    if not isinstance(table, dict):
        raise InputError("expected a table of gate settings", file=str(path), field=".".join(keys))
    return table


def _key_lines(text: str, header: str, keys: list[str]) -> dict[str, int]:
    """The line of each key inside the table `header` (for annotations that point at the setting)."""
    found: dict[str, int] = {}
    inside = False
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("["):  # a table header, maybe with a comment after it
            inside = stripped.split("#", 1)[0].replace(" ", "") == header
            continue
        match = re.match(r'["\']?([A-Za-z0-9_-]+)["\']?\s*=', stripped) if inside else None
        if match and match.group(1) in keys:
            found.setdefault(match.group(1), number)
    return found


def _from_table(table: dict[str, Any], path: Path, header: str, text: str = "") -> GateConfig:
    values: dict[str, Any] = {}
    lines = _key_lines(text, header, list(table))
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in KINDS:
            raise InputError(f"unknown gate setting; expected one of {', '.join(sorted(KINDS))} (`kvprobe schema "
                             "gate-config` describes them)", file=str(path), field=key)
        try:
            parsed = parse_setting(name, value, key)
        except InputError as exc:
            raise InputError(exc.message, file=str(path), field=key) from None
        if KINDS[name] == "path":  # relative to the config's folder, as pytest and ruff read theirs
            parsed = str(path.parent / parsed) if not Path(parsed).is_absolute() else parsed
        values[name] = parsed
    thresholds = Thresholds().merged(str(path), **values)
    return GateConfig(thresholds, str(path), header, {k.replace("-", "_"): n for k, n in lines.items()})


def _header(keys: tuple[str, ...]) -> str:
    return "[" + ".".join(keys) + "]"


def load_config_file(path: Path) -> GateConfig:
    """`--config PATH`: a pyproject.toml is read at [tool.kvprobe.gate], any other file at [gate]."""
    if not path.is_file():
        raise InputError("config file does not exist" if not path.exists() else "is not a file",
                         file=str(path), field="--config")
    keys = CONFIG_FILES[1][1] if path.name == "pyproject.toml" else CONFIG_FILES[0][1]
    data, text = _read_toml(path)
    table = _table(data, keys, path)
    if table is None:
        # (no brackets: the CLI's error line is read as rich markup)
        raise InputError(f"has no table of gate settings named {'.'.join(keys)}", file=str(path), field="--config")
    return _from_table(table, path, _header(keys), text)


def _disagreement(used: GateConfig, other: GateConfig) -> str | None:
    a, b = used.thresholds, other.thresholds
    differ = [f.name for f in fields(Thresholds) if f.name != "sources" and getattr(a, f.name) != getattr(b, f.name)]
    if not differ:
        return None
    said = "; ".join(f"{name}: {_setting(a, name)} in {Path(used.path or '').name}, {_setting(b, name)} in "
                     f"{Path(other.path or '').name}" for name in differ[:3])
    return (f"{used.path} {used.table} and {other.path} {other.table} both hold gate settings and disagree "
            f"({said}); using {Path(used.path or '').name}")


def _setting(t: Thresholds, name: str) -> str:
    value = getattr(t, name)
    return "not set" if value is None else show(value)


def find_config(start: Path) -> GateConfig:
    """The gate settings of the nearest folder at or above `start` that has any; empty when none does."""
    for folder in (start, *start.parents):
        found = []
        for name, keys in CONFIG_FILES:
            path = folder / name
            if not path.is_file():
                continue
            data, text = _read_toml(path)
            if (table := _table(data, keys, path)) is not None:
                found.append(_from_table(table, path, _header(keys), text))
        if found:
            used = found[0]
            used.warnings += [w for other in found[1:] if (w := _disagreement(used, other))]
            return used
    return GateConfig()
