"""Cache simulators per provider, each imported when first used (`kvprobe diff` of two requests needs one)."""
from __future__ import annotations

import importlib

from kvprobe.sim.result import Evidence, Prediction

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any
    from kvprobe.sim.anthropic import AnthropicCache
    from kvprobe.sim.implicit import PrefixCache
    from kvprobe.sim.openai import BreakpointCache

__all__ = ["AnthropicCache", "BreakpointCache", "PrefixCache", "Evidence", "Prediction", "cache_for", "cache_name"]

_CACHES = {"AnthropicCache": "kvprobe.sim.anthropic", "BreakpointCache": "kvprobe.sim.openai",
           "PrefixCache": "kvprobe.sim.implicit"}


def __getattr__(name: str) -> Any:
    if name in _CACHES:
        return getattr(importlib.import_module(_CACHES[name]), name)
    raise AttributeError(f"module 'kvprobe.sim' has no attribute {name!r}")


OPENAI_MODES = ("managed", "explicit")  # GPT-5.6+: breakpoints it reads as `prompt_cache_breakpoint`


def cache_for(mode: str) -> AnthropicCache | BreakpointCache | PrefixCache:
    """The cache model a request's cache mode uses: entries at breakpoints within a lookback window (Anthropic's
    and `local`'s every request, Qwen's explicit cache), entries at breakpoints read without a window (OpenAI
    GPT-5.6+, implicit and explicit modes), or an implicit prefix cache (OpenAI before 5.6, DeepSeek, Gemini,
    xAI, Mistral, ...)."""
    if mode in OPENAI_MODES:
        from kvprobe.sim.openai import BreakpointCache

        return BreakpointCache()
    if mode == "breakpoints":
        from kvprobe.sim.anthropic import AnthropicCache

        return AnthropicCache()
    from kvprobe.sim.implicit import PrefixCache

    return PrefixCache()


def cache_name(provider: str, platform: str | None, mode: str) -> str:
    """Which simulated cache a request reads and writes: one per provider, platform (a Bedrock organisation
    never shares entries with a Claude API workspace) and kind of cache (GPT-5.6+'s implicit and explicit
    modes share their entries)."""
    kind = "openai-breakpoints" if mode in OPENAI_MODES else mode
    return f"{provider}/{platform or provider}/{kind}"
