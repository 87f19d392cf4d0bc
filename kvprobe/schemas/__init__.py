"""JSON Schemas of kvprobe's stable formats (docs/contracts.md), shipped inside the package.

One file per format: the trace record and the `--json` output of diff, report, gate, compare, usage,
run-probe and watch (one line per request). Required keys and their types are pinned; objects stay open
(additional properties allowed) so that new fields are no breaking change.
"""
from __future__ import annotations

import json
from importlib import resources
from typing import Any

from kvprobe.errors import InputError

NAMES = ("trace", "diff", "report", "gate", "compare", "usage", "run-probe", "watch", "lint")


def schema_text(name: str) -> str:
    """The schema file's text, exactly as shipped."""
    if name not in NAMES:
        raise InputError(f"expected one of {', '.join(NAMES)}, got {name!r}", field="NAME")
    return resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8")


def load_schema(name: str) -> dict[str, Any]:
    return json.loads(schema_text(name))
