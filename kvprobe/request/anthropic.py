"""Render an Anthropic Messages body into cacheable blocks: tools -> system -> messages."""
from __future__ import annotations

from kvprobe.catalog import ModelRules
from kvprobe.errors import InputError
from kvprobe.request.content import split_part
from kvprobe.request.model import Block, IdentityParam, RenderedRequest, canonical_json, chain_hashes

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

# Which field of a content block holds its diffable text.
_TEXT_KEY = {"text": "text", "thinking": "thinking", "redacted_thinking": "data", "tool_result": "content",
             "tool_use": "input", "server_tool_use": "input", "document": "source"}
_NOT_CACHEABLE = {"thinking", "redacted_thinking"}


def _ttl_of(marker: Any, where: str, default_ttl: str) -> str | None:
    if marker is None:
        return None
    if not isinstance(marker, dict):
        raise InputError("expected an object like {\"type\": \"ephemeral\"}", field=where)
    return str(marker.get("ttl") or default_ttl)


def _block(path: str, level: str, part: Any, role: str, msg_index: int | None, default_ttl: str) -> Block:
    if isinstance(part, str):
        return Block(path, level, "text", part, role=role, message_index=msg_index)
    if not isinstance(part, dict):
        raise InputError("expected a content block object or a string", field=path)
    kind = str(part.get("type", "text"))
    text, meta = split_part(part, _TEXT_KEY.get(kind))
    if kind == "document" and isinstance(part.get("source"), dict) and isinstance(part["source"].get("data"), str):
        src = part["source"]
        if src.get("type") == "text":
            text, meta = src["data"], canonical_json({k: v for k, v in part.items() if k not in ("source", "cache_control")})
    ttl = _ttl_of(part.get("cache_control"), f"{path}.cache_control", default_ttl)
    return Block(path, level, kind, text, meta, role, msg_index, breakpoint=ttl,
                 breakpoint_source="explicit" if ttl else None)


def _tool_blocks(tools: Any, default_ttl: str) -> list[Block]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InputError("expected a list of tool definitions", field="tools")
    blocks = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise InputError("expected a tool definition object", field=f"tools[{i}]")
        body = {k: v for k, v in tool.items() if k != "cache_control"}
        ttl = _ttl_of(tool.get("cache_control"), f"tools[{i}].cache_control", default_ttl)
        blocks.append(Block(f"tools[{i}]", "tools", "tool_definition", canonical_json(body),
                            breakpoint=ttl, breakpoint_source="explicit" if ttl else None))
    return blocks


def _system_blocks(system: Any, default_ttl: str) -> list[Block]:
    if system is None:
        return []
    if isinstance(system, str):
        return [Block("system", "system", "text", system, role="system")]
    if not isinstance(system, list):
        raise InputError("expected a string or a list of text blocks", field="system")
    return [_block(f"system[{i}]", "system", p, "system", None, default_ttl) for i, p in enumerate(system)]


def _message_blocks(messages: Any, default_ttl: str, start: int = 0) -> list[Block]:
    """Blocks of messages[start:] (the earlier ones may be reused from a previous request)."""
    if not isinstance(messages, list):
        raise InputError("expected a list of messages", field="messages")
    blocks: list[Block] = []
    for i in range(start, len(messages)):
        msg = messages[i]
        if not isinstance(msg, dict) or "role" not in msg:
            raise InputError("expected a message object with 'role' and 'content'", field=f"messages[{i}]")
        role, content = str(msg["role"]), msg.get("content")
        if isinstance(content, str):
            parts = [Block(f"messages[{i}]", "messages", "text", content, role=role, message_index=i)]
        elif isinstance(content, list):
            parts = [_block(f"messages[{i}].content[{j}]", "messages", p, role, i, default_ttl)
                     for j, p in enumerate(content)]
        else:
            raise InputError("expected a string or a list of content blocks", field=f"messages[{i}].content")
        if parts:
            parts[0].first_in_message = True
        blocks.extend(parts)
    return blocks


def _params(body: dict[str, Any], blocks: list[Block], rules: ModelRules,
            new_from: tuple[int, int] = (0, 0), betas: frozenset[str] = frozenset()) -> dict[str, IdentityParam]:
    """The identity parameters the rules name. `new_from` = (first block, first message) not known to be
    free of images and citation-enabled documents: only those are scanned (a long history is not walked
    again for every request that extends it). A beta the rules list in `cache_keeping_betas` takes the
    parameters it names out (a change of them keeps the cache)."""
    levels: dict[str, str] = rules.get("invalidation", {}) or {}
    kept: dict[str, list[str]] = rules.get("cache_keeping_betas", {}) or {}
    exempt = {name for beta in betas for name in kept.get(beta, ())}
    tools = body.get("tools") or []
    first_block, first_message = new_from
    values = {
        "model": lambda: body.get("model"),
        "tool_choice": lambda: body.get("tool_choice"),
        "thinking": lambda: body.get("thinking"),
        "images": lambda: sum(1 for b in blocks[first_block:] if b.level == "messages" and b.kind == "image"),
        "web_search": lambda: any(isinstance(t, dict) and str(t.get("type", "")).startswith("web_search")
                                  for t in tools),
        "citations": lambda: _citations_enabled(body.get("messages"), first_message),
        "speed": lambda: body.get("speed"),
        "effort": lambda: _effort(body, rules),
    }
    return {name: IdentityParam.of(name, value(), levels.get(name, "all")) for name, value in values.items()
            if name in levels and name not in exempt}


def _effort(body: dict[str, Any], rules: ModelRules) -> Any:
    """output_config.effort as the cache sees it: the model's default effort is the same as none."""
    config = body.get("output_config")
    effort = config.get("effort") if isinstance(config, dict) else None
    return None if effort is None or effort == rules.get("default_effort") else effort


def _citations_enabled(messages: Any, start: int = 0) -> bool:
    for msg in messages[start:] if isinstance(messages, list) else []:
        content = msg.get("content") if isinstance(msg, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "document":
                if isinstance(part.get("citations"), dict) and part["citations"].get("enabled"):
                    return True
    return False


def _apply_automatic(body: dict[str, Any], blocks: list[Block], default_ttl: str) -> bool:
    marker = body.get("cache_control")
    if marker is None:
        return False
    ttl = _ttl_of(marker, "cache_control", default_ttl)
    for block in reversed(blocks):
        if block.kind not in _NOT_CACHEABLE and not (block.kind == "text" and not block.text):
            if not block.breakpoint:
                block.breakpoint, block.breakpoint_source = ttl, "automatic"
            return True
    return True


def render_anthropic(body: dict[str, Any], rules: ModelRules, betas: frozenset[str] = frozenset()) -> RenderedRequest:
    if "messages" not in body:
        raise InputError("expected an Anthropic Messages body with 'messages'", field="messages")
    default_ttl = rules.get("default_ttl", "5m")
    blocks = _tool_blocks(body.get("tools"), default_ttl) + _system_blocks(body.get("system"), default_ttl)
    blocks += _message_blocks(body["messages"], default_ttl)
    auto = _apply_automatic(body, blocks, default_ttl)
    params = _params(body, blocks, rules, betas=betas)
    chain_hashes(blocks, params)
    req = RenderedRequest("anthropic", "anthropic_messages", body.get("model"), blocks, params, auto,
                          cache_mode="breakpoints")
    check_breakpoints(req, rules)
    return req


def extend_anthropic(body: dict[str, Any], rules: ModelRules, reused: list[Block],
                     reused_breakpoints: list[tuple[int, str]], first_new: int,
                     params_before: dict[str, IdentityParam], betas: frozenset[str] = frozenset()
                     ) -> RenderedRequest | None:
    """Render a body whose blocks up to messages[first_new] are `reused` (already hashed, shared with a
    previous request of identical tools, system, model and leading messages); None when its identity
    parameters differ from `params_before` (every key changes then: render it whole)."""
    tail = _message_blocks(body["messages"], rules.get("default_ttl", "5m"), first_new)
    blocks = reused + tail
    # the reused blocks and messages[:first_new] belong to the previous request: when it had no image and no
    # citations, neither do they, and only the new ones need a look
    clean = all(p.value in (0, False) for name, p in params_before.items() if name in ("images", "citations"))
    params = _params(body, blocks, rules, (len(reused), first_new) if clean else (0, 0), betas)
    if params != params_before:
        return None
    if len(params) == len(params_before) and all(
            k == k0 and p is p0 for (k, p), (k0, p0) in zip(params.items(), params_before.items())):
        params = params_before  # the same (interned) parameters: one dict for the stream, not one a request
    chain_hashes(blocks, params, start=len(reused))
    marks = reused_breakpoints + [(len(reused) + j, b.breakpoint) for j, b in enumerate(tail) if b.breakpoint]
    req = RenderedRequest("anthropic", "anthropic_messages", body.get("model"), blocks, params, False,
                          breakpoints=marks, cache_mode="breakpoints", shared_prefix=len(reused))
    check_breakpoints(req, rules)
    return req


def check_breakpoints(req: RenderedRequest, rules: ModelRules) -> None:
    """Warn about breakpoints the API would reject."""
    limit = rules.get("max_breakpoints", 4)
    count = len(req.breakpoint_indices)
    if count > limit:
        req.warnings.append(f"{count} cache breakpoints; the API accepts at most {limit} (the request would fail)")
    _check_ttl_order(req)


def _check_ttl_order(req: RenderedRequest) -> None:
    ttls = [ttl for _, ttl in req.breakpoints]
    if "1h" in ttls and "5m" in ttls and ttls.index("5m") < len(ttls) - 1 - ttls[::-1].index("1h"):
        req.warnings.append("a 1h breakpoint follows a 5m one; 1h entries must come before 5m entries")
