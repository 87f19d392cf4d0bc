"""Bundled local inference engine with a paged, prefix-cached KV store.

See `localengine.engine` for the API: `Engine`, `GenerationResult`, `LogitsResult`, `EngineStats`.
Torch is imported lazily so the plain-Python control plane (`block_manager`, `scheduler`, `sequence`)
works without it.
"""

from __future__ import annotations

__all__ = ["Engine", "EngineStats", "GenerationResult", "LogitsResult", "RequestUpdate"]


def __getattr__(name: str):
    if name in __all__:
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'localengine' has no attribute {name!r}")
