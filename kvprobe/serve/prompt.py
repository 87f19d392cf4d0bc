"""Provider request blocks -> the engine's prompt tokens, with the exact token count of every block.

A request is first rendered into cacheable blocks (`kvprobe.request`: tools -> system -> messages, the same
blocks the provider simulators use). Each block becomes text inside a chat message (tools and tool results in
the Hermes-style tags small instruct models know), the model's own chat template lays the messages out, and
a private-use marker after each block's text splits the templated prompt back into one segment per block.
Each segment is tokenized on its own, so

* a block's token count is exact for the prompt the engine serves (emulated usage is exact), and
* the tokens of a prefix depend only on the blocks in it: a later change never re-tokenizes earlier blocks,
  as with a provider's prefix cache.

Template text between blocks (role headers, the closing of the previous message) belongs to the block after
it. What follows the last block (the assistant prompt) belongs to no block: like the provider's own turn
markers after the last breakpoint, it is always fresh input.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kvprobe.request.model import Block, RenderedRequest

_OPEN, _CLOSE = "\ue000", "\ue001"
_MARKER = re.compile(f"{_OPEN}(\\d+){_CLOSE}")
_SCRUB = str.maketrans({_OPEN: "\ufffd", _CLOSE: "\ufffd"})
TOOLS_HEADER = ("You can call the tools below. To call one, answer with "
                "<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.\n")
_ROLE = {"developer": "system"}


class PromptError(ValueError):
    """The request cannot be laid out as a prompt for this model (e.g. its chat template rejects it)."""


@dataclass(slots=True)
class Prompt:
    token_ids: list[int]
    block_tokens: list[int]  # tokens of each rendered block, in order
    request: RenderedRequest
    tail_tokens: int = 0  # the assistant prompt after the last block; block_tokens + tail = all tokens

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def block_text(block: Block) -> str:
    """How one block reads inside its chat message."""
    text = block.text.translate(_SCRUB)
    kind = block.kind
    if kind == "tool_definition":
        return f"<tool>{text}</tool>\n"
    if kind == "tool_use":
        return f"<tool_call>\n{text}\n</tool_call>"
    if kind == "tool_result":
        meta = f"{block.meta.translate(_SCRUB)}\n" if block.meta else ""
        return f"<tool_response>\n{meta}{text}\n</tool_response>"
    if kind in ("thinking", "redacted_thinking", "reasoning"):
        return f"<think>\n{text}\n</think>"
    if kind in ("text", "input_text", "output_text"):
        return text
    return f"[{kind}: {text}]"  # images, documents, ...: what identifies them (media as digests)


def chat_messages(blocks: list[Block]) -> list[dict[str, str]]:
    """Chat messages whose contents hold every block's text followed by its marker, in block order.

    Tools, system blocks and leading system/developer messages form one system message (the prefix order
    is tools -> system -> messages); every other message keeps its role.
    """
    messages: list[dict[str, Any]] = []
    keys: list[object] = []
    prelude_open = True
    for i, block in enumerate(blocks):
        if block.level != "messages" or (prelude_open and block.role in ("system", "developer")):
            key, role = "prelude", "system"
        else:
            key, role = ("message", block.message_index), _ROLE.get(block.role, block.role or "user")
            prelude_open = False
        if not keys or keys[-1] != key:
            messages.append({"role": role, "parts": []})
            keys.append(key)
        parts = messages[-1]["parts"]
        if block.kind == "tool_definition" and not any(b.kind == "tool_definition" for b in blocks[:i]):
            sep = TOOLS_HEADER
        else:
            sep = "" if not parts or parts[-1][1].endswith("\n") else "\n"
        parts.append((i, sep + block_text(block)))
    return [{"role": m["role"], "content": "".join(f"{t}{_OPEN}{i}{_CLOSE}" for i, t in m["parts"])}
            for m in messages]


def max_token_bytes(tokenizer: Any) -> int | None:
    """The longest token of a byte-level vocabulary, in bytes: a text of n bytes has at least n / this tokens."""
    backend = getattr(tokenizer, "backend", None)
    try:
        return max(len(t) for t in backend.get_vocab(with_added_tokens=True))
    except (AttributeError, TypeError, ValueError):
        return None


def build_prompt(request: RenderedRequest, tokenizer: Any, limit: int | None = None,
                 max_token_bytes: int | None = None) -> Prompt:
    """Token ids of the whole prompt and exact per-block token counts (also set on the blocks).

    With `limit`, a prompt longer than `limit` tokens is refused as soon as that is certain: before any
    tokenizing when its size alone proves it (`max_token_bytes`), else as soon as the count passes it.
    """
    blocks = request.blocks
    if not blocks:
        raise PromptError("the request has no content to send to the model")
    try:
        text = tokenizer.render_chat(chat_messages(blocks), add_generation_prompt=True)
    except Exception as exc:  # jinja errors, raise_exception() in templates
        raise PromptError(f"the model's chat template rejected the messages: {exc}") from None
    if limit is not None and max_token_bytes:
        least = len(text.encode("utf-8", "surrogatepass")) // max_token_bytes
        if least > limit:
            raise PromptError(f"prompt is too long: at least {least} tokens > {limit} maximum")
    pieces = _MARKER.split(text)
    segments = pieces[0::2]
    order = [int(i) for i in pieces[1::2]]
    if order != list(range(len(blocks))):
        raise PromptError("the model's chat template reordered or dropped message content")
    ids: list[int] = []
    counts: list[int] = []
    for block, segment in zip(blocks, segments[:-1]):
        seg_ids = tokenizer.encode(segment) if segment else []
        ids += seg_ids
        if limit is not None and len(ids) > limit:
            raise PromptError(f"prompt is too long: {len(ids)}+ tokens > {limit} maximum")
        counts.append(len(seg_ids))
        block.tokens, block.tokens_exact = len(seg_ids), True
    tail = tokenizer.encode(segments[-1]) if segments[-1] else []
    return Prompt(ids + tail, counts, request, len(tail))
