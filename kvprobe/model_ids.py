"""Model ids as a catalog looks them up: the platform's wrapping taken off, and families matched by version.

The same model has a different id on each platform that serves it: `claude-sonnet-4-5-20250929` on the
Claude API, `us.anthropic.claude-sonnet-4-5-20250929-v1:0` (or an inference-profile ARN) on Bedrock,
`claude-sonnet-4-5@20250929` on Vertex, `anthropic/claude-sonnet-4.5` on OpenRouter, `claude-sonnet-4-5[1m]`
in Claude Code. `canonical_model` maps all of them onto the first-party id the rules are written for.

A family names model stems (`claude-sonnet-5`, `gpt-6.1`). A stem matches the model itself and its dated or
named variants (`claude-sonnet-5-20260630`, `gpt-6.1-sol`), never a newer version of the line: after the stem
a `.6` or a `-5` (one or two digits, not a date) is a later version (`claude-sonnet-5-5`, `gpt-5.6`).
"""
from __future__ import annotations

import fnmatch
import re
from functools import lru_cache

# Bedrock: cross-region and regional inference-profile prefixes in front of "<vendor>.<model>"
_BEDROCK_GEO = re.compile(r"^(?:(?:us|eu|apac|ap|jp|au|ca|us-gov|global|regional)\.)?"
                          r"(?:anthropic|openai|meta|amazon|mistral|deepseek|moonshotai|qwen|cohere|ai21|writer|zai)\.")
_BEDROCK_VERSION = re.compile(r"-v\d+(?::\d+)?$|:\d+$")
_VERTEX_DATE = re.compile(r"@(\d{8})$")
_VERTEX_LATEST = re.compile(r"@(latest|default)$")
_SUFFIXES = re.compile(r"(\[[^\]]*\]|:thinking|:batch|:free|:extended|:nitro|:floor|:online)$")
_CLAUDE_DOTTED = re.compile(r"(?<=\d)\.(?=\d)")  # OpenRouter writes claude-sonnet-4.5 for claude-sonnet-4-5
# after a stem: a later version of the same line, not a dated or named variant
_NEWER_VERSION = re.compile(r"^(?:\.\d|-\d{1,2}(?:$|[-.@:\[]))")
_VARIANT_START = frozenset("-@:[")


def canonical_model(model: str) -> str:
    """The first-party model id of a platform-specific one (lower case)."""
    return _canonical(model)


@lru_cache(maxsize=4096)  # called for every request of a trace; a trace names a handful of models
def _canonical(model: str) -> str:
    name = model.strip().lower()
    if name.startswith("arn:"):  # arn:aws:bedrock:<region>:<account>:inference-profile/<profile id>
        name = name.rsplit("/", 1)[-1]
    if "/publishers/" in name and "/models/" in name:  # Vertex resource names
        name = name.rsplit("/models/", 1)[-1].split(":", 1)[0]
    elif name.startswith("models/"):  # Gemini resource names
        name = name[len("models/"):]
    elif "/" in name:  # OpenRouter, LiteLLM: "<vendor>/<model>"
        name = name.rsplit("/", 1)[-1]
    if name.startswith("~"):  # OpenRouter's moving aliases (~openai/gpt-latest)
        name = name[1:]
    geo = _BEDROCK_GEO.match(name)
    if geo:
        name = _BEDROCK_VERSION.sub("", name[geo.end():])
    name = _VERTEX_DATE.sub(r"-\1", name)
    name = _VERTEX_LATEST.sub("", name)
    while _SUFFIXES.search(name):
        name = _SUFFIXES.sub("", name)
    if name.startswith("claude"):
        name = _CLAUDE_DOTTED.sub("-", name)
    return name


def stem_matches(model: str, stem: str) -> bool:
    """Whether a canonical model id is `stem` or one of its dated or named variants (not a newer version).

    A stem holding glob characters (`*`, `?`, `[`) is an fnmatch pattern (older rule files, or "every model of
    a line" such as `gemini-*`); the version its literal head ends with is protected the same way."""
    if any(c in stem for c in "*?["):
        head = re.split(r"[*?\[]", stem, maxsplit=1)[0].rstrip("-._")
        return fnmatch.fnmatchcase(model, stem) and not _newer(model, head)
    if model == stem:
        return True
    if not model.startswith(stem):
        return False
    return model[len(stem)] in _VARIANT_START and not _newer(model, stem)


def _newer(model: str, head: str) -> bool:
    """Whether `model` continues the version number `head` ends with (claude-sonnet-5 -> claude-sonnet-5-5,
    gpt-5 -> gpt-5.6). A head that ends with no number names no version to protect."""
    return bool(head) and head[-1].isdigit() and model.startswith(head) \
        and _NEWER_VERSION.match(model[len(head):]) is not None
