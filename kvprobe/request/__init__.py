"""Provider request bodies rendered into ordered, hashed, cacheable blocks."""
from __future__ import annotations

from typing import Any

from kvprobe.catalog import rules_for
from kvprobe.errors import InputError
from kvprobe.request.anthropic import render_anthropic
from kvprobe.request.detect import infer_api, infer_provider
from kvprobe.request.gemini import render_gemini
from kvprobe.request.model import LEVELS, Block, IdentityParam, RenderedRequest
from kvprobe.request.openai_chat import render_openai_chat
from kvprobe.request.openai_responses import render_openai_responses

__all__ = ["Block", "IdentityParam", "LEVELS", "RenderedRequest", "render_request", "infer_provider"]


def render_request(body: Any, provider: str | None = None, endpoint: str | None = None,
                   response: Any = None) -> RenderedRequest:
    """Render a provider request body into the ordered cacheable blocks the provider sees."""
    if not isinstance(body, dict):
        raise InputError("expected a request body (a JSON object)")
    provider = provider or infer_provider(body, endpoint, response)
    if provider is None:
        raise InputError("not a known request format: expected an Anthropic Messages, OpenAI Chat "
                         "Completions, OpenAI Responses, DeepSeek or Gemini body ('messages', 'input' or "
                         "'contents')")
    model = body.get("model") or _model_from_endpoint(endpoint)
    if isinstance(model, str) and model.startswith("models/"):  # Gemini names models as resources
        model = model[len("models/"):]
    rules = rules_for(provider, model)
    if provider in ("anthropic", "local") and "input" not in body:
        req = render_anthropic(body, rules)
        req.provider = provider
        return req
    if provider == "gemini":
        return render_gemini(body, rules, model, endpoint)
    api = infer_api(body, provider, endpoint)
    if api == "openai_responses":
        return render_openai_responses(body, rules)
    return render_openai_chat(body, rules, provider)


def _model_from_endpoint(endpoint: str | None) -> str | None:
    """Gemini names the model in the URL: /v1beta/models/gemini-2.5-pro:generateContent."""
    if endpoint and "/models/" in endpoint:
        return endpoint.split("/models/", 1)[1].split(":", 1)[0]
    return None
