"""Structured outputs: a request that demands JSON of a schema gets JSON of that schema.

Agents route and classify with such calls (Gemini CLI's model router asks for `{"complexity_score": ...}`
under `responseJsonSchema` and retries until it parses). The bundled model rarely writes valid JSON, so its
text is kept when it parses and is otherwise replaced by the schema's smallest instance (required fields, the
first enum value, a number's minimum): an answer kvprobe wrote, not the model, which the response's `kvprobe`
object says (`"answer": "schema"`). The request's usage and cache are unchanged by this.
"""
from __future__ import annotations

from typing import Any

import orjson

_DEPTH = 12  # a schema nested deeper than this is answered with null there


def requested_schema(api: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a request's answer must follow (an empty one for plain JSON mode), else None."""
    if api == "gemini":
        config = body.get("generationConfig", body.get("generation_config")) or {}
        if not isinstance(config, dict) or config.get("responseMimeType", config.get("response_mime_type")) \
                != "application/json":
            return None
        schema = next((config[k] for k in ("responseJsonSchema", "responseSchema", "response_json_schema",
                                           "response_schema") if isinstance(config.get(k), dict)), {})
        return schema
    if api == "openai_chat":
        fmt = body.get("response_format")
        return _openai_format(fmt)
    if api == "openai_responses":
        text = body.get("text")
        return _openai_format(text.get("format") if isinstance(text, dict) else None)
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        return fmt["schema"]
    return None


def _openai_format(fmt: Any) -> dict[str, Any] | None:
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_object":
        return {}
    if fmt.get("type") == "json_schema":
        inner = fmt.get("json_schema") if isinstance(fmt.get("json_schema"), dict) else fmt
        return inner.get("schema") if isinstance(inner.get("schema"), dict) else {}
    return None


def parses(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


def instance(schema: Any, depth: int = 0) -> Any:
    """The smallest value of a JSON schema (OpenAPI's upper-case types too)."""
    if not isinstance(schema, dict) or depth > _DEPTH:
        return None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return instance(schema[key][0], depth + 1)
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
    kind = kind.lower() if isinstance(kind, str) else ("object" if "properties" in schema else None)
    if kind == "object":
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else list(props)
        return {name: instance(props.get(name), depth + 1) for name in required if isinstance(name, str)}
    if kind == "array":
        least = schema.get("minItems", 0)
        return [instance(schema.get("items"), depth + 1) for _ in range(least if isinstance(least, int) else 0)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        value = low if isinstance(low, (int, float)) and not isinstance(low, bool) else 0
        return int(value) + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0) \
            if kind == "integer" else value
    if kind == "boolean":
        return False
    if kind == "string":
        return "x" * schema["minLength"] if isinstance(schema.get("minLength"), int) else ""
    return None


def answer_text(schema: dict[str, Any], model_text: str) -> tuple[str, bool]:
    """(the text to answer, whether kvprobe wrote it): the model's when it parses, else the instance."""
    if parses(model_text.strip()):
        return model_text, False
    return orjson.dumps(instance(schema)).decode(), True
