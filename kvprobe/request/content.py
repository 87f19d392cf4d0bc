"""Canonical text and identity bytes of individual content parts, shared by all request formats."""
from __future__ import annotations

from kvprobe.request.model import canonical_json, digest

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

# Keys that are cache markers, never content.
MARKER_KEYS = frozenset({"cache_control", "prompt_cache_breakpoint"})
# Inline payloads that are replaced by a digest: identity without holding megabytes in memory or output.
_PAYLOAD_KEYS = ("data", "image_url", "file_data", "url")


def _digest_payloads(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in MARKER_KEYS:
                continue
            if k in _PAYLOAD_KEYS and isinstance(v, str) and len(v) > 256:
                out[k] = f"<{len(v)} chars xxh3:{digest(v)}>"
            else:
                out[k] = _digest_payloads(v)
        return out
    if isinstance(value, list):
        return [_digest_payloads(v) for v in value]
    return value


def text_of_parts(parts: Any) -> str:
    """The text of a string or of a list of content parts (text parts joined; media as digests)."""
    if parts is None:
        return ""
    if isinstance(parts, str):
        return parts
    if isinstance(parts, list):
        pieces = []
        for p in parts:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                pieces.append(p["text"])
            else:
                pieces.append(canonical_json(_digest_payloads(p)))
        return "\n".join(pieces)
    return canonical_json(_digest_payloads(parts))


def split_part(part: dict[str, Any], text_key: str | None) -> tuple[str, str]:
    """(text, meta) of one content part: the diffable text and the other identity fields."""
    if text_key and isinstance(part.get(text_key), (str, list)):
        text = text_of_parts(part[text_key])
        rest = {k: v for k, v in part.items() if k != text_key and k not in MARKER_KEYS}
        if set(rest) <= {"type"}:  # a plain text part renders like a string: no extra identity
            return text, ""
        return text, canonical_json(_digest_payloads(rest))
    return canonical_json(_digest_payloads(part)), ""
