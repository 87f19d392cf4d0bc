"""kvprobe: profile and audit prompt-caching costs of AI agents."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvprobe.db.data import load as load

__all__ = ["load"]


def __getattr__(name: str) -> Any:
    # `kvprobe.load` pulls in the analysis and (when used) pandas: only on first use, not at `import kvprobe`.
    if name == "__version__":  # from the installed metadata (pyproject's version), read only when asked
        from importlib.metadata import version

        return version("kvprobe")
    if name == "load":
        from kvprobe.db.data import load

        return load
    raise AttributeError(f"module 'kvprobe' has no attribute {name!r}")
