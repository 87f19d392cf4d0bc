"""A provider request body rendered into its ordered cacheable blocks (`render_request`), and what the
rendering reads of a URL and of the request headers."""
from __future__ import annotations

from urllib.parse import unquote

from kvprobe.catalog import rules_for
from kvprobe.errors import InputError
from kvprobe.request.anthropic import render_anthropic
from kvprobe.request.detect import infer_api, infer_platform, infer_provider
from kvprobe.request.gemini import render_gemini
from kvprobe.request.model import RenderedRequest
from kvprobe.request.openai_chat import render_openai_chat
from kvprobe.request.openai_responses import render_openai_responses

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any


def render_request(body: Any, provider: str | None = None, endpoint: str | None = None,
                   response: Any = None, headers: dict[str, str] | None = None,
                   platform: str | None = None) -> RenderedRequest:
    """Render a provider request body into the ordered cacheable blocks the provider sees.

    The wire format (Anthropic Messages, OpenAI Chat or Responses, Gemini) decides how the body is read; the
    provider (and the platform serving it) decides what is cached: a Claude model reached through an
    OpenAI-compatible gateway keeps Claude's breakpoints, DeepSeek's Anthropic-compatible endpoint ignores
    them. `headers` are the request headers a trace kept (betas, routing ids)."""
    if not isinstance(body, dict):
        raise InputError("expected a request body (a JSON object)")
    provider = provider or infer_provider(body, endpoint, response)
    if provider is None:
        raise InputError("not a known request format: expected an Anthropic Messages, OpenAI Chat "
                         "Completions, OpenAI Responses, DeepSeek or Gemini body ('messages', 'input' or "
                         "'contents')")
    model = body.get("model") or model_from_endpoint(endpoint)
    if isinstance(model, str) and model.startswith("models/"):  # Gemini names models as resources
        model = model[len("models/"):]
    if isinstance(model, str) and "model" not in body and provider != "gemini":
        body = {**body, "model": model}  # Vertex and Bedrock name it in the URL only: the cache keys by it
    platform = platform or infer_platform(endpoint, model, response)
    rules = rules_for(provider, model, platform)
    betas = betas_of(headers)
    if provider == "local" and "input" not in body:
        req = render_anthropic(body, rules, betas)
        req.provider = provider
        return req
    if provider == "gemini" and "input" not in body:
        return render_gemini(body, rules, model, endpoint)
    api = infer_api(body, provider, endpoint)
    if api == "anthropic_messages":
        return _anthropic_wire(body, provider, rules, betas)
    if api == "openai_responses":
        req = render_openai_responses(body, rules, provider, headers)
    else:
        req = render_openai_chat(body, rules, provider, headers)
    if provider == "gemini":  # the Interactions API: implicit caching only
        req.api, req.cache_mode, req.breakpoints = "gemini_interactions", "implicit", []
    return req


def _anthropic_wire(body: dict[str, Any], provider: str, rules: Any, betas: frozenset[str]) -> RenderedRequest:
    """An Anthropic Messages body: Claude's breakpoint cache, or (another provider's compatible endpoint)
    that provider's cache, which reads the markers only where it has a breakpoint mode (Qwen)."""
    req = render_anthropic(body, rules, betas)
    if provider == "anthropic":
        return req
    req.provider = provider
    honours = isinstance(rules.get("mode_rules"), dict) and "breakpoints" in rules.get("mode_rules") \
        and not rules.get("anthropic_endpoint_ignores_cache_control", False)
    if not (honours and req.breakpoints):
        req.cache_mode, req.breakpoints, req.automatic_breakpoint = "implicit", [], False
    return req


def betas_of(headers: dict[str, str] | None) -> frozenset[str]:
    value = (headers or {}).get("anthropic-beta") if isinstance(headers, dict) else None
    return frozenset(b.strip() for b in value.split(",") if b.strip()) if isinstance(value, str) else frozenset()


def model_from_endpoint(endpoint: str | None) -> str | None:
    """The model a URL names: Gemini and Vertex `/models/gemini-2.5-pro:generateContent` (and Vertex's
    `.../publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict`), Bedrock
    `/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke` (its `:` escaped by the SDKs)."""
    if not endpoint:
        return None
    if "/models/" in endpoint:
        return endpoint.split("/models/", 1)[1].split(":", 1)[0]
    if endpoint.startswith("/model/"):
        model = unquote(endpoint[len("/model/"):].split("/", 1)[0])
        return model or None
    return None
