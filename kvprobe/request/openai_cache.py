"""What an OpenAI-format body (Chat Completions, Responses, and the compatible APIs) says about caching.

* markers: `prompt_cache_breakpoint` on a content block (GPT-5.6 and later); `cache_control` where the
  provider reads it in this format (a Claude model through a gateway, Qwen's explicit cache, OpenRouter
  translating it into a breakpoint for an OpenAI model);
* the cache mode: `managed` (GPT-5.6+ implicit mode: one breakpoint OpenAI places at the end of the newest
  eligible message, plus the explicit ones), `explicit` (only the marked ones), `breakpoints` (Claude's or
  Qwen's entries at markers) or `implicit` (a prefix cache: everything before GPT-5.6, DeepSeek, xAI, ...);
* the identity parameters the rules name (`invalidation`), from the body and the kept request headers.
"""
from __future__ import annotations

from kvprobe.catalog import ModelRules
from kvprobe.request.model import Block, IdentityParam, RenderedRequest

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

MANAGED = "managed"
# the value of the marker GPT-5.6+ reads on a content block (the prompt-caching guide's prompt cache breakpoints;
# langchain4j OpenAiOfficialPromptCacheBreakpoint.MODE_EXPLICIT): what `fix`, `lint` and run-probe write
BREAKPOINT_MARKER = {"mode": "explicit"}


def marker_ttl(part: dict[str, Any], rules: ModelRules, provider: str) -> str | None:
    """The lifetime label of a cache marker on a content part, or None (no marker this provider reads)."""
    if rules.get("breakpoint_caching", False):
        bp = part.get("prompt_cache_breakpoint")
        if bp is not None and bp is not False:
            return "explicit"
        if "cache_control" in part and rules.get("translates_cache_control", False):
            return "explicit"  # OpenRouter: cache_control becomes a breakpoint, its ttl dropped (one 30-min life)
        return None
    marker = part.get("cache_control")
    if not isinstance(marker, dict):
        return None
    if provider in ("anthropic", "local"):
        return str(marker.get("ttl") or rules.get("default_ttl", "5m"))
    explicit = (rules.get("mode_rules") or {}).get("breakpoints") if isinstance(rules.get("mode_rules"), dict) \
        else None
    if isinstance(explicit, dict):  # Qwen: cache_control switches the request to the explicit cache
        return str(marker.get("ttl") or explicit.get("default_ttl", "5m"))
    return None


def cache_mode(body: dict[str, Any], rules: ModelRules, provider: str, blocks: list[Block]) -> str:
    if provider in ("anthropic", "local"):
        return "breakpoints"
    if rules.get("breakpoint_caching", False):
        options = body.get("prompt_cache_options")
        return "explicit" if isinstance(options, dict) and options.get("mode") == "explicit" else MANAGED
    if any(b.breakpoint for b in blocks):
        return "breakpoints"  # only set where the provider reads markers (marker_ttl)
    return "implicit"


RETENTION_FIELD = "prompt_cache_retention"  # the body field that asks for a retention (models before GPT-5.6)


def retention(body: dict[str, Any]) -> str | None:
    """The cache retention the body asks for (`prompt_cache_retention`), or None."""
    value = body.get(RETENTION_FIELD)
    return value if isinstance(value, str) and value else None


def breakpoint_roles(rules: ModelRules) -> set[str]:
    """The roles of the messages GPT-5.6+ takes a breakpoint in (providers/openai.toml)."""
    return set(rules.get("managed_breakpoint_roles", ("user", "developer", "system", "tool")))


def takes_breakpoint(block: Block, roles: set[str]) -> bool:
    """Whether GPT-5.6+ takes a breakpoint on this block: content of a message of those roles (or a tool
    result); never the model's own output, a tool definition or the `instructions` string."""
    eligible = block.role in roles or (not block.role and block.kind == "tool_result")
    return block.level == "messages" and eligible and block.kind not in ("thinking", "tool_use")


def managed_breakpoint(blocks: list[Block], rules: ModelRules) -> int | None:
    """Where GPT-5.6+ implicit mode places its breakpoint: the last block of the newest eligible message."""
    roles = breakpoint_roles(rules)
    for i in range(len(blocks) - 1, -1, -1):
        if takes_breakpoint(blocks[i], roles):
            return i
    return None


def place_managed(req: RenderedRequest, rules: ModelRules) -> RenderedRequest:
    """Add the managed breakpoint to a `managed` request's breakpoints (kept apart from the blocks, which
    may be shared with other requests)."""
    if req.cache_mode != MANAGED:
        return req
    at = managed_breakpoint(req.blocks, rules)
    if at is not None and at not in req.breakpoint_indices:
        req.breakpoints = sorted(req.breakpoints + [(at, MANAGED)])
    req.managed_breakpoint = at
    return req


def _nested(body: dict[str, Any], outer: str, inner: str) -> Any:
    value = body.get(outer)
    return value.get(inner) if isinstance(value, dict) else None


def openai_params(body: dict[str, Any], rules: ModelRules, headers: dict[str, str] | None = None
                  ) -> dict[str, IdentityParam]:
    """The identity parameters the rules name, read where each API puts them (Responses nests text.format
    and reasoning.effort; Chat Completions has response_format, reasoning_effort, verbosity)."""
    levels: dict[str, str] = rules.get("invalidation", {}) or {}
    heads = headers if isinstance(headers, dict) else {}
    values = {
        "model": lambda: body.get("model"),
        "prompt_cache_key": lambda: body.get("prompt_cache_key"),
        "parallel_tool_calls": lambda: body.get("parallel_tool_calls"),
        "text.format": lambda: _nested(body, "text", "format") or body.get("response_format"),
        "reasoning.effort": lambda: _nested(body, "reasoning", "effort") or body.get("reasoning_effort"),
        "text.verbosity": lambda: _nested(body, "text", "verbosity") or body.get("verbosity"),
        "context_management": lambda: body.get("context_management"),
        "service_tier": lambda: body.get("service_tier"),
        "user_id": lambda: body.get("user_id"),
        "x-grok-conv-id": lambda: heads.get("x-grok-conv-id"),
    }
    return {name: IdentityParam.of(name, value(), levels.get(name, "all")) for name, value in values.items()
            if name in levels}
