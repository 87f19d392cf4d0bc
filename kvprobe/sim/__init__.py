"""Cache simulators per provider."""
from __future__ import annotations

from kvprobe.sim.anthropic import AnthropicCache
from kvprobe.sim.implicit import PrefixCache
from kvprobe.sim.result import Evidence, Prediction

__all__ = ["AnthropicCache", "PrefixCache", "Evidence", "Prediction", "cache_for"]


def cache_for(provider: str, mode: str = "implicit") -> AnthropicCache | PrefixCache:
    """The cache model a request uses: entries at breakpoints (Anthropic, OpenAI explicit mode) or an
    implicit prefix cache (OpenAI, DeepSeek, Gemini)."""
    if provider in ("anthropic", "local") or mode in ("breakpoints", "explicit"):
        return AnthropicCache()
    return PrefixCache()
