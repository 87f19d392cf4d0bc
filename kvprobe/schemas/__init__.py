"""JSON Schemas of kvprobe's stable formats, shipped inside the package (`kvprobe schema NAME`).

One file per format: the trace record, the `--json` output of diff, report, gate, compare, usage,
run-probe, watch and lint, and the files the gate reads: baselines, gate settings and price files, whose
descriptions carry an example (the wheel has no docs folder). Required keys and their types are pinned; objects stay open
(additional properties allowed) so that new fields are no breaking change.
"""
from __future__ import annotations

import json
from importlib import resources
from typing import Any

from kvprobe.errors import InputError

NAMES = ("trace", "diff", "report", "gate", "compare", "usage", "run-probe", "watch", "lint",
         "baseline", "gate-config", "price-file")  # the last three are files kvprobe reads (and baseline writes)


def schema_text(name: str) -> str:
    """The schema file's text, exactly as shipped."""
    if name not in NAMES:
        raise InputError(f"expected one of {', '.join(NAMES)}, got {name!r}", field="NAME")
    return resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8")


def load_schema(name: str) -> dict[str, Any]:
    return json.loads(schema_text(name))
