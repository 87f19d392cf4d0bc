"""The four probe requests. Identical model and settings; each differs from its reference in one place only.

1 prepare         the document as a cached prefix, a unique run id and "Document version: A" at its start
2 confirm         exactly request 1
3 new question    request 1 with only the final question changed
4 changed start   request 3 with only the version marker changed from A to B

So 1 -> 2 shows reuse of an identical request, 1 -> 3 reuse under a new question, and 3 -> 4 isolates the early
change: request 4 differs from request 3 (whose prefix is now cached) in the version marker alone.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from kvprobe.catalog import rules_for
from kvprobe.errors import InputError, not_a_file
from kvprobe.request.openai_cache import BREAKPOINT_MARKER

MAX_OUTPUT_TOKENS = 96
SUMMARY_QUESTION = "Summarise the document above in one sentence."
OTHER_QUESTION = "Name the document's main topic in at most six words."
CASE_NAMES = ("prepare", "confirm", "new_question", "changed_beginning")


@dataclass(frozen=True, slots=True)
class ProbeCase:
    name: str
    body: dict[str, Any]
    version: str  # the marker at the document's start ("A", "B")
    question: str


def read_document(path: Path) -> str:
    if not path.is_file():
        raise not_a_file(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", file=str(path)) from None
    if not text.strip():
        raise InputError("the document is empty", file=str(path))
    return text


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def _prefix(run_id: str, version: str, document: str) -> str:
    return f"Probe run {run_id}\nDocument version: {version}\n\n{document}"


def _anthropic(model: str, prefix: str, question: str) -> dict[str, Any]:
    return {"model": model, "max_tokens": MAX_OUTPUT_TOKENS, "stream": True,
            "system": [{"type": "text", "text": prefix, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": question}]}


def _openai(model: str, prefix: str, question: str, marked: bool = False) -> dict[str, Any]:
    # prefix caching: the long document first, the question last; where the model reads only at breakpoints
    # (GPT-5.6+, whose managed breakpoint sits after the question), the document's end marked as well
    system: Any = [{"type": "text", "text": prefix, "prompt_cache_breakpoint": dict(BREAKPOINT_MARKER)}] \
        if marked else prefix
    return {"model": model, "max_tokens": MAX_OUTPUT_TOKENS, "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}


def build_cases(document: str, provider: str, model: str, run_id: str) -> list[ProbeCase]:
    if provider in ("anthropic", "local"):
        make = _anthropic
    else:
        marked = bool(rules_for(provider, model).get("breakpoint_caching", False))
        make = partial(_openai, marked=marked)

    def case(name: str, version: str, question: str) -> ProbeCase:
        return ProbeCase(name, make(model, _prefix(run_id, version, document), question), version, question)
    return [case("prepare", "A", SUMMARY_QUESTION), case("confirm", "A", SUMMARY_QUESTION),
            case("new_question", "A", OTHER_QUESTION), case("changed_beginning", "B", OTHER_QUESTION)]
