"""Cache simulators per provider."""
from __future__ import annotations

from kvprobe.sim.anthropic import AnthropicCache
from kvprobe.sim.implicit import PrefixCache
from kvprobe.sim.result import Evidence, Prediction

__all__ = ["AnthropicCache", "PrefixCache", "Evidence", "Prediction", "cache_for"]


def cache_for(provider: str) -> AnthropicCache | PrefixCache:
    """The cache model a provider uses (Anthropic-style breakpoints, or an implicit prefix cache)."""
    return AnthropicCache() if provider in ("anthropic", "local") else PrefixCache()
