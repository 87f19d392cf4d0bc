"""Values in sentences a user reads: JSON or words, never Python reprs (`None`, `{'type': 'any'}`)."""
from __future__ import annotations

import json
from typing import Any

MAX_CHARS = 60


def show(value: Any, limit: int | None = MAX_CHARS, quote: bool = True) -> str:
    """`"auto"`, `{"type": "any"}`, `3`, `true` — or "not set" for a missing value.

    quote=False prints a string as it is (a table cell); limit=None never shortens.
    """
    if value is None:
        return "not set"
    if isinstance(value, str):  # shorten inside the quotes, so a cut string still reads as one
        if limit is not None and len(value) > limit - 2:
            value = value[: limit - 3] + "…"
        return value if not quote else json.dumps(value, ensure_ascii=False)
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"
