"""$KVPROBE_PROVIDERS_DIR, read where it is read for every request (the rules a request is priced and
simulated under, its platform, the credential shapes scrubbed from its body).

`os.environ.get` encodes the name and passes through two Python-level calls on each read: ~2% of a fleet's
report, which reads it ~25 times a request. This reads the mapping `os.environ` keeps its values in
(`_data`, encoded), which every change made through `os.environ` updates (pytest's monkeypatch included),
and falls back to `os.environ.get` where an interpreter keeps none.
"""
from __future__ import annotations

import os

PROVIDERS_DIR = "KVPROBE_PROVIDERS_DIR"
_DATA = getattr(os.environ, "_data", None)
try:
    _KEY = os.environ.encodekey(PROVIDERS_DIR)  # type: ignore[attr-defined]
    _DECODE = os.environ.decodevalue  # type: ignore[attr-defined]
except AttributeError:
    _DATA = None


def providers_dir_override() -> str | None:
    """The folder $KVPROBE_PROVIDERS_DIR names; None where it is unset or empty."""
    if _DATA is None:
        return os.environ.get(PROVIDERS_DIR) or None
    raw = _DATA.get(_KEY)
    return _DECODE(raw) or None if raw is not None else None
