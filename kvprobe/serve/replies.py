"""A recorded answer (cassette) read in its own API's words: its output token counts, its text.

Each API module streams a recorded response in its own shape; what the server needs beside that, whatever the
API, is here: how many output tokens the answer cost (as the provider's usage said when it said it: the bill
of the recorded answer, since the same answer is served), and its plain text (for counting when no usage).
"""
from __future__ import annotations

from typing import Any

from kvprobe.serve.cassette import Recorded

# (usage holder key, output tokens, reasoning tokens within them) of each API's response
_OUTPUT_FIELDS = {
    "anthropic": ("usage", ("output_tokens",), None),
    "openai_chat": ("usage", ("completion_tokens",), ("completion_tokens_details", "reasoning_tokens")),
    "openai_responses": ("usage", ("output_tokens",), ("output_tokens_details", "reasoning_tokens")),
    "gemini": ("usageMetadata", ("candidatesTokenCount", "thoughtsTokenCount"), ("thoughtsTokenCount",)),
}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _dig(holder: Any, path: tuple[str, ...]) -> int | None:
    for key in path:
        holder = holder.get(key) if isinstance(holder, dict) else None
    return _int(holder)


def output_counts(recorded: Recorded, tokenizer: Any) -> tuple[int, int]:
    """(output tokens, of which reasoning) of a recorded answer; counted with the local tokenizer when the
    record has no usage for them."""
    holder, outputs, reasoning = _OUTPUT_FIELDS[recorded.api]
    usage = recorded.response.get(holder)
    counts = [_dig(usage, (name,)) for name in outputs]
    if isinstance(usage, dict) and counts[0] is not None:
        total = sum(c or 0 for c in counts)
        return total, (_dig(usage, reasoning) or 0) if reasoning else 0
    text = text_of(recorded)
    return (len(tokenizer.encode(text)) if text else 0), 0


def text_of(recorded: Recorded) -> str:
    """The answer's text parts, joined (tool calls and other items left out)."""
    r, api = recorded.response, recorded.api
    if api == "anthropic":
        blocks = r.get("content")
        return "".join(b.get("text", "") for b in blocks if isinstance(b, dict)) if isinstance(blocks, list) else ""
    if api == "openai_chat":
        choices = r.get("choices") or [{}]
        msg = choices[0].get("message") if isinstance(choices[0], dict) else None
        return msg.get("content") or "" if isinstance(msg, dict) and isinstance(msg.get("content"), str) else ""
    if api == "openai_responses":
        return "".join(part.get("text", "") for item in r.get("output") or [] if isinstance(item, dict)
                       for part in item.get("content") or [] if isinstance(part, dict))
    parts = gemini_parts(r)
    return "".join(p.get("text", "") for p in parts if isinstance(p.get("text"), str) and not p.get("thought"))


# the keys of a part that is text and nothing else (a thought's text too): parts a client joins into one
_PLAIN_TEXT = ({"text"}, {"text", "thought"})


def gemini_parts(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A recorded answer's parts as a client holds them: a captured stream is the parts of every chunk in a row
    (one text part a chunk, the last one often empty), which a client joins; sent back in one response, an
    empty text part makes Gemini CLI drop the answer as invalid and ask again. Runs of plain text parts are
    joined, empty ones left out; a part with anything more (a function call, a thought signature) stays."""
    candidates = response.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict) else {}
    content = first.get("content") if isinstance(first.get("content"), dict) else {}
    out: list[dict[str, Any]] = []
    for part in content.get("parts") or []:
        if not isinstance(part, dict):
            continue
        plain = set(part) in _PLAIN_TEXT and isinstance(part.get("text"), str)
        if plain and not part["text"]:
            continue
        last = out[-1] if out else None
        if plain and last is not None and set(last) == set(part) and last.get("thought") == part.get("thought") \
                and isinstance(last.get("text"), str):
            out[-1] = {**last, "text": last["text"] + part["text"]}
            continue
        out.append(dict(part))
    return out
