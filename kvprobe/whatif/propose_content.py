"""Policies that change content: move volatile spans out of the cached prefix, send one stable tool list, hold
identity parameters at their first value. Each is proposed once for the whole log, from the diagnoses of its
baseline, and reaches every request (any session, any agent) that carries what it changes."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from kvprobe.analysis.skeleton import Skeleton
from kvprobe.request.content import split_part
from kvprobe.request.model import Block, IdentityParam, canonical_json, level_rank
from kvprobe.request.paths import text_at as body_text_at
from kvprobe.tokens import count_text, count_texts
from kvprobe.trace import TraceRecord
from kvprobe.whatif.edits import append_after_last_breakpoint, block_at, copy_record
from kvprobe.whatif.policies import Evidence, Policy, Records, Skeletons, map_records, map_skeletons, origin
from kvprobe.wording import plural
from kvprobe.whatif.reshape import Chainer, body_hash_of, index_of, salt_at, with_blocks, with_request
from kvprobe.analysis.spans import (MAX_VOLATILE_FRACTION, Template, common_prefix, common_suffix, template_of,
                                   version_id)
from kvprobe.wording import show

STABLE_PARAMS = ("tool_choice", "thinking")  # request fields a fix may hold constant
MAX_CLUSTERS = 64  # versions of one path compared with at most this many references
_SHARED_LEVELS = ("tools", "system")  # blocks sessions share: their versions are compared across sessions


# --- volatile spans --------------------------------------------------------------------------------------

def text_at(rec: TraceRecord | None, path: str) -> str | None:
    return body_text_at(rec.request, path) if rec is not None else None


def _similar(a: str, b: str) -> bool:
    p = common_prefix(a, b)
    q = common_suffix(a, b, p)
    return max(len(a), len(b)) - p - q <= MAX_VOLATILE_FRACTION * max(len(a), len(b), 1)


def _clusters(texts: _Texts) -> list[list[int]]:
    """Body hashes of versions grouped by similarity to a reference (greedy, bounded)."""
    groups: list[tuple[str, list[int]]] = []
    for body, text in texts.items():
        for ref, members in groups:
            if _similar(ref, text):
                members.append(body)
                break
        else:
            if len(groups) < MAX_CLUSTERS:
                groups.append((text, [body]))
    return [members for _, members in groups if len(members) > 1]


class _Texts:
    """The versions of one block's text by body hash, each held as what it changes of the first one seen (a
    fleet's versions of a system prompt differ in a date or a name: held whole, they were ~1.6 KB a request
    while the proposals ran, the what-if's high-water mark)."""

    def __init__(self) -> None:
        self._first = ""
        self._parts: dict[int, tuple[int, str, int]] = {}  # body -> (prefix kept, its own middle, suffix kept)

    def add(self, body: int, text: str) -> None:
        if not self._parts:
            self._first = text
        first = self._first
        p = common_prefix(first, text)
        q = common_suffix(first, text, p)
        self._parts[body] = (p, text[p:len(text) - q], q)

    def __getitem__(self, body: int) -> str:
        p, middle, q = self._parts[body]
        return self._first[:p] + middle + self._first[len(self._first) - q:]

    def __contains__(self, body: int) -> bool:
        return body in self._parts

    def items(self) -> Iterator[tuple[int, str]]:
        for body in self._parts:
            yield body, self[body]


@dataclass(slots=True)
class _Versions:
    path: str
    carriers: list[Skeleton]  # every request with a block at the path
    index: dict[int, int]  # skeleton order -> block index of the path
    texts: _Texts  # body hash -> text
    # body hash -> the block's other fields (a tool's definition, a text part's citations), cache mark left out:
    # they are part of the block's identity, beside its text
    fields: dict[int, dict] = field(default_factory=dict)


def _versions(ev: Evidence, path: str, streams: set[tuple[str, str]] | None) -> _Versions:
    carriers, index, texts, unread, fields = [], {}, _Texts(), set(), {}
    for r in ev.results:
        sk = r.sk
        if sk.request is None or (streams is not None and (sk.session, sk.agent) not in streams):
            continue
        i = index_of(sk.request, path)
        if i is None:
            continue
        carriers.append(sk)
        index[sk.order] = i
        body = sk.request.blocks[i].body_hash
        if body not in texts and body not in unread:
            rec = ev.texts.record(sk)
            text = text_at(rec, path)
            if text is None:
                unread.add(body)
            else:
                texts.add(body, text)
                # (the text itself left out, its key kept in place: every use puts a new text there)
                fields[body] = {k: None if v is text else v for k, v in block_at(rec.request, path)[1].items()
                                if k != "cache_control"}
    return _Versions(path, carriers, index, texts, fields)


def _split_tokens(orig: int, stable: int, moved: int) -> int:
    """Tokens of the moved part: the block's own size shared by the estimates of its two parts (their counts)."""
    share = moved / max(moved + stable, 1)
    return round(orig * share)


@dataclass(frozen=True, slots=True)
class _Parts:
    """What a version of the block becomes, without its texts: body hashes and token counts of its parts."""

    stable_hash: int
    moved_hash: int
    stable_count: int
    moved_count: int


def _tail_path(sk: Skeleton) -> tuple[str, bool]:
    """Where a block appended after the last breakpoint goes (as `append_after_last_breakpoint` puts it), and
    whether it starts a new message."""
    last = sk.request.blocks[-1]  # type: ignore[union-attr]
    if last.level != "messages" or last.message_index is None:
        return "messages[0].content[0]", True
    if last.role != "user":
        return f"messages[{last.message_index + 1}].content[0]", True
    part = last.path.rsplit(".content[", 1)
    j = int(part[1].rstrip("]")) + 1 if len(part) == 2 else 1
    return f"messages[{last.message_index}].content[{j}]", False


class _SpanMove:
    """One template's edit, in both forms. The skeleton edit keeps no text (a version's parts are known by
    their hashes and counts); the record edit (`fix`) splits each record's text as it comes."""

    def __init__(self, v: _Versions, template: Template, bodies: list[int]) -> None:
        self.path, self.template = v.path, template
        self.index = v.index
        self.sizes: dict[str, int] = {}  # request id -> the baseline size of the block (for record edits)
        self.counts: dict[str, int] = {}  # texts of the record edit's parts -> their counts
        blocks: dict[int, Block] = {}
        for sk in v.carriers:
            block = sk.request.blocks[v.index[sk.order]]  # type: ignore[union-attr]
            blocks.setdefault(block.body_hash, block)
        self.parts: dict[int, _Parts] = {}  # body hash -> its parts
        splits = [(body, split) for body in bodies if (split := template.split(v.texts[body])) is not None]
        # (counted together: one round trip to the process that counts, `tokens.count_texts`)
        counts = count_texts([text for _, split in splits for text in (split.stable, split.moved)])
        for k, (body, split) in enumerate(splits):
            old = blocks[body]
            # the stable part's content as the parse renders it: a tool's whole definition, a text part's text
            # beside its other fields (the skeleton's block keeps neither)
            if v.path.startswith("tools"):
                stable, meta = canonical_json({**v.fields[body], "description": split.stable}), ""
            else:
                stable, meta = split.stable, split_part({**v.fields[body], "text": split.stable}, "text")[1]
            self.parts[body] = _Parts(body_hash_of(stable, old.kind, old.role, meta),
                                      body_hash_of(split.moved, "text", "user"), counts[2 * k], counts[2 * k + 1])
        self.chainer = Chainer()
        self.variant = ("span", v.path, id(self))
        self.templates: dict[tuple[str, bool], Block] = {}  # the moved part's block, by where it goes

    def reshape(self, sks: Skeletons) -> Skeletons:
        return self.chainer.scoped(lambda: map_skeletons(sks, self._skeleton))

    def _skeleton(self, sk: Skeleton) -> Skeleton | None:
        i = self.index.get(sk.order)
        req = sk.request
        if req is None:
            return None
        if i is None or i >= len(req.blocks) or req.blocks[i].path != self.path:
            i = index_of(req, self.path)  # an earlier edit moved it (a tool list made stable), or a copy
            if i is None:
                return None
        old = req.blocks[i]
        parts = self.parts.get(old.body_hash)
        if parts is None:
            return None
        moved = _split_tokens(old.tokens, parts.stable_count, parts.moved_count)
        ch = self.chainer
        stable = ch.chain(old, req.blocks[i - 1] if i else None, salt_at(req, i), self.variant,
                          body_hash=parts.stable_hash, tokens=old.tokens - moved)
        blocks = ch.rechain(req.blocks[:i] + [stable] + req.blocks[i + 1:], i + 1, req.params, self.variant)
        path, new_message = _tail_path(sk)
        template = self.templates.get((path, new_message))
        if template is None:  # (one per place the moved part goes: `fresh` copies it)
            template = self.templates[(path, new_message)] = Block(
                path, "messages", "text", "", role="user", first_in_message=new_message,
                message_index=int(path[9:path.index("]")]))
        blocks.append(ch.fresh(template, blocks[-1], parts.moved_hash, moved, path, self.variant))
        return with_request(sk, with_blocks(req, blocks))

    def rewrite(self, records: Records) -> Records:
        return map_records(records, None, self._record)

    def _count(self, text: str) -> int:
        if text not in self.counts:
            self.counts[text] = count_text(text)
        return self.counts[text]

    def _record(self, rec: TraceRecord) -> TraceRecord | None:
        text = text_at(rec, self.path)
        split = self.template.split(text) if text is not None else None
        if split is None:
            return None
        new = copy_record(rec)
        _, block = block_at(new.request, self.path, writable=True)
        block["description" if self.path.startswith("tools") else "text"] = split.stable
        append_after_last_breakpoint(new.request, split.moved)
        orig = self.sizes.get(origin(rec.id))
        if orig:
            msgs = new.request["messages"]
            moved_path = f"messages[{len(msgs) - 1}].content[{len(msgs[-1]['content']) - 1}]"
            moved = _split_tokens(orig, self._count(split.stable), self._count(split.moved))
            new.extra["size_hints"] = {**new.extra.get("size_hints", {}), self.path: orig - moved,
                                       moved_path: moved}
        return new


def _span_paths(ev: Evidence) -> dict[str, set[tuple[str, str]]]:
    """Changed text blocks, with the streams where the change was diagnosed; and blocks whose volatile span
    breaks a prefix the sessions of a fleet share (a per-session value: no stream sees it change)."""
    out: dict[str, set[tuple[str, str]]] = {f.breaks_at: set() for f in ev.fleet
                                             if f.breaker == "volatile span" and f.breaks_at}
    for r in ev.with_kind("prefix_changed"):
        for d in r.diagnoses:
            if d.kind == "prefix_changed" and d.path and _is_text_path(d.path):
                out.setdefault(d.path, set()).add((r.sk.session, r.sk.agent))
    return out


def _is_text_path(path: str) -> bool:
    return path.startswith(("system", "messages")) or (path.startswith("tools[") and path.endswith("]"))


def propose_spans(ev: Evidence) -> list[Policy]:
    out = []
    diagnosed = {r.sk.id: r for r in ev.with_kind("prefix_changed")}
    for path, streams in sorted(_span_paths(ev).items()):
        shared = path.startswith(_SHARED_LEVELS)  # compared across sessions: a fleet's shared prompt
        v = _versions(ev, path, None if shared else streams)
        counts = Counter(sk.request.blocks[v.index[sk.order]].body_hash for sk in v.carriers)  # type: ignore
        for bodies in _clusters(v.texts):
            template = _template(v.texts, bodies, counts)
            if template is None:
                continue
            out.append(_span_policy(v, template, bodies, diagnosed, path, ev.fleet))
    return out


def _template(texts: _Texts, bodies: list[int], counts: Counter) -> Template | None:
    """`find_template` of these versions, one text at a time: versions are told apart by their texts (two
    bodies of one text are one version, sent as often as the last of them)."""
    first: dict[str, int] = {}  # version id -> its first body
    sent: dict[str, int] = {}
    for body in bodies:
        version = version_id(texts[body])
        first.setdefault(version, body)
        sent[version] = counts[body]
    by_body = {body: sent[version] for version, body in first.items()}
    return template_of(list(first.values()), texts.__getitem__, by_body.__getitem__)


def _span_policy(v: _Versions, template: Template, bodies: list[int], diagnosed: dict, path: str,
                 fleet: list) -> Policy:
    move = _SpanMove(v, template, bodies)
    members = set(bodies)
    scope = [sk for sk in v.carriers if sk.request.blocks[v.index[sk.order]].body_hash in members]  # type: ignore
    move.sizes = {sk.id: sk.request.blocks[v.index[sk.order]].tokens for sk in scope}  # type: ignore[union-attr]
    addressed = [sk.id for sk in scope if sk.id in diagnosed and any(
        d.kind == "prefix_changed" and d.path == path for d in diagnosed[sk.id].diagnoses)]
    sessions = {sk.session for sk in scope}
    addressed_set = set(addressed)  # (a list's `in` made this quadratic: hours at a million requests)
    for f in fleet:  # across sessions: each session's first request wrote what the others' entries held
        if f.breaks_at == path and f.breaker == "volatile span":
            for i in _first_requests(v.carriers, set(f.sessions))[1:]:
                if i not in addressed_set:
                    addressed_set.add(i)
                    addressed.append(i)
    agents = sorted({sk.agent for sk in scope})
    unit = "line(s)" if any("\n" in template.reference[lo:hi] or lo == 0 for lo, hi in template.spans) \
        and all(_whole_line(template.reference, lo, hi) for lo, hi in template.spans) else "span(s)"
    detail = (f"move the changing {unit} of {path} (e.g. {show(template.sample[:80])}) out of the cached prefix, "
              f"to after the last breakpoint (the end of the last user message), in all "
              f"{plural(len(scope), 'request')} that carry it ({plural(len(members), 'version')}"
              f"; agents: {', '.join(agents)})")
    policy = Policy("stabilize_prefix", f"{path}#{min(members)}", detail, addressed, sessions, move.reshape,
                    move.rewrite, cause_sessions=len({sk.session for sk in scope if sk.id in addressed_set}),
                    extra={"path": path, "unit": "line" if unit == "line(s)" else "span",
                           "spans": [template.reference[lo:hi].strip() for lo, hi in template.spans][:8],
                           "versions": len(members)})
    return policy


def _first_requests(carriers: list[Skeleton], sessions: set[str]) -> list[str]:
    seen, out = set(), []
    for sk in sorted(carriers, key=lambda s: (s.started_at, s.order)):
        if sk.session in sessions and sk.session not in seen:
            seen.add(sk.session)
            out.append(sk.id)
    return out


def _whole_line(text: str, lo: int, hi: int) -> bool:
    return (lo == 0 or text[lo - 1] == "\n" or text[lo] == "\n") and (hi >= len(text) or text[hi - 1] == "\n"
                                                                        or text[hi] == "\n")


# --- stable tool lists -----------------------------------------------------------------------------------

def _tool_name(tool: dict) -> str | None:
    """The tool's name, as a key: a name that is not a string (a malformed log) is compared by its JSON."""
    function = tool.get("function")
    name = tool.get("name") or (function.get("name") if isinstance(function, dict) else None)
    return name if name is None or isinstance(name, str) else canonical_json(name)


def _plain(tool: dict) -> dict:
    return {k: v for k, v in tool.items() if k != "cache_control"}


def _tool_blocks(req) -> list[Block]:
    return [b for b in req.blocks if b.level == "tools"]


class _ToolLists:
    """Per session: the union of the tool lists it sends (first-seen order), in both forms."""

    def __init__(self) -> None:
        self.union: dict[str, list[dict]] = {}  # session -> tool definitions
        self.blocks: dict[str, list[Block]] = {}  # session -> their blocks (sized)
        self.chainer = Chainer()

    def reshape(self, sks: Skeletons) -> Skeletons:
        return self.chainer.scoped(lambda: map_skeletons(sks, self._skeleton))

    def _skeleton(self, sk: Skeleton) -> Skeleton | None:
        target = self.blocks.get(sk.session)
        req = sk.request
        if target is None or req is None:
            return None
        old = _tool_blocks(req)
        if [b.body_hash for b in old] == [b.body_hash for b in target]:
            return None
        ch, variant = self.chainer, ("tools", sk.session)
        salt = salt_at(req, 0)
        new: list[Block] = []
        for k, b in enumerate(target):
            new.append(ch.fresh(b, new[-1] if new else None, b.body_hash, b.tokens, f"tools[{k}]", variant,
                                salt if not k else b""))
        n_old, shift = len(old), len(target) - len(old)
        marked = any(i < n_old for i, _ in req.breakpoints)
        marks = [(i + shift, ttl) for i, ttl in req.breakpoints if i >= n_old]
        if marked:
            marks.insert(0, (len(target) - 1, next(t for i, t in req.breakpoints if i < n_old)))
        blocks = ch.rechain(new + req.blocks[n_old:], len(new), req.params, variant)
        return with_request(sk, with_blocks(req, blocks, marks))

    def rewrite(self, records: Records) -> Records:
        return map_records(records, None, self._record)

    def _record(self, rec: TraceRecord) -> TraceRecord | None:
        tools = self.union.get(rec.session or "-")
        if tools is None:
            return None
        old = rec.request.get("tools") or []
        # the request's own mark on its tools, lifetime and all (the skeleton edit keeps its ttl), moved to the end
        mark = next((t["cache_control"] for t in old if isinstance(t, dict) and t.get("cache_control")), None)
        target = [dict(t) for t in tools]
        if mark is not None:
            target[-1]["cache_control"] = dict(mark)
        if old == target:
            return None
        new = copy_record(rec)
        new.request["tools"] = target
        return new


def propose_tools(ev: Evidence) -> list[Policy]:
    changed = [r for r in ev.with_kind("prefix_changed")
               if any(d.kind == "prefix_changed" and d.path and d.path.startswith("tools") for d in r.diagnoses)]
    if not changed:
        return []
    lists = _ToolLists()
    sessions = ev.sessions()
    known: dict[str, dict] = {}  # one object per distinct definition, however many sessions send it
    for name in sorted({r.sk.session for r in changed}):
        union, blocks = _session_union(ev, sessions[name], known)
        if union is not None:
            lists.union[name], lists.blocks[name] = union, blocks
    if not lists.union:
        return []
    addressed = [r.sk.id for r in changed if r.sk.session in lists.union]
    sizes = sorted({len(u) for u in lists.union.values()})
    agents = sorted({r.sk.agent for s in lists.union for r in sessions[s] if r.sk.request is not None})
    detail = (f"send each session's full tool list ({'/'.join(map(str, sizes))} definitions), in one fixed order, "
              f"from its first request in every agent ({', '.join(agents)}): load tools through a stable list "
              f"instead of adding or reordering them mid-task ({plural(len(lists.union), 'session')} changed it)")
    return [Policy("stabilize_prefix", "tools", detail, addressed, set(lists.union), lists.reshape, lists.rewrite,
                   cause_sessions=len(lists.union), extra={"path": "tools"})]


def _session_union(ev: Evidence, session, known: dict[str, dict]) -> tuple[list[dict] | None, list[Block]]:
    """Every tool the session sends, in the order of the last list it sent (so its later requests stay as
    they are) with tools that list lacks after them, first seen first; None when a definition changed (no
    stable list keeps both versions)."""
    union: dict[str, dict] = {}
    blocks: dict[str, Block] = {}
    last: list[str] = []
    seen_lists: set[tuple[int, ...]] = set()
    for r in session:
        req = r.sk.request
        if req is None:
            continue
        tool_blocks = _tool_blocks(req)
        signature = tuple(b.body_hash for b in tool_blocks)
        if signature in seen_lists:
            continue
        seen_lists.add(signature)
        rec = ev.texts.record(r.sk)
        tools = [t for t in (rec.request.get("tools") or []) if isinstance(t, dict)] if rec and rec.request else None
        if tools is None or len(tools) != len(tool_blocks):
            return None, []
        last = []
        for tool, block in zip(tools, tool_blocks):
            name = _tool_name(tool)
            if name in union and _plain(union[name]) != _plain(tool):
                return None, []  # a definition changed: that is a span or a new tool, not an order
            if name not in union:  # (a fleet's sessions send the same definitions: held once, not per session)
                plain = _plain(tool)
                union[name] = known.setdefault(canonical_json(plain), plain)
            blocks.setdefault(name, block)
            last.append(name)
    order = list(dict.fromkeys(last + list(union)))
    return [union[n] for n in order], [blocks[n] for n in order]


# --- stable parameters -----------------------------------------------------------------------------------

class _HeldParam:
    def __init__(self, name: str) -> None:
        self.name = name
        self.first: dict[tuple[str, str], IdentityParam] = {}  # stream -> its first value
        self.first_body: dict[tuple[str, str], object] = {}
        # request id -> its stream, for the requests held: those whose rules take the parameter (in a stream
        # that also sends another provider's requests, those have no such field to hold)
        self.held: dict[str, tuple[str, str]] = {}
        self.chainer = Chainer()

    def reshape(self, sks: Skeletons) -> Skeletons:
        return self.chainer.scoped(lambda: map_skeletons(sks, self._skeleton))

    def _skeleton(self, sk: Skeleton) -> Skeleton | None:
        stream = (sk.session, sk.agent)
        if stream not in self.first or sk.request is None:
            return None
        req, want = sk.request, self.first[stream]
        have = req.params.get(self.name)
        if have is None or have.value == want.value:
            return None
        params = {**req.params, self.name: want}
        start = next((i for i, b in enumerate(req.blocks) if level_rank(b.level) >= level_rank(want.invalidates)),
                     len(req.blocks))
        blocks = self.chainer.rechain(req.blocks, start, params, (self.name, canonical_json(want.value)))
        return with_request(sk, with_blocks(req, blocks, params=params))

    def rewrite(self, records: Records) -> Records:
        return map_records(records, None, self._record)

    def _record(self, rec: TraceRecord) -> TraceRecord | None:
        stream = self.held.get(origin(rec.id))
        if stream is None:
            return None
        first = self.first_body[stream]
        if rec.request.get(self.name) == first:
            return None
        new = copy_record(rec)
        if first is None:
            new.request.pop(self.name, None)
        else:
            new.request[self.name] = first
        return new


def propose_params(ev: Evidence) -> list[Policy]:
    out = []
    streams = ev.streams()
    for name in STABLE_PARAMS:
        held = _HeldParam(name)
        addressed: list[str] = []
        for stream, results in streams.items():
            flips = [r for r in results if any(d.kind == "params_changed" and d.param == name for d in r.diagnoses)]
            bodies = [r for r in results if r.sk.request is not None and name in r.sk.request.params]
            if not flips:  # a flip is a request that takes the parameter: it is among the bodies
                continue
            rec = ev.texts.record(bodies[0].sk)
            if rec is None or rec.request is None:
                continue
            held.first[stream] = bodies[0].sk.request.params[name]  # type: ignore[union-attr]
            held.first_body[stream] = rec.request.get(name)
            held.held.update((r.sk.id, stream) for r in bodies)
            addressed += [r.sk.id for r in flips]
        if not held.first:
            continue
        values = {show(v) if v is not None else "unset" for v in held.first_body.values()}
        shown = "unset" if values == {"unset"} else f"at {' / '.join(sorted(values))}"
        sessions = {s for s, _ in held.first}
        detail = (f"keep {name} {shown} for the whole task (each agent's first value) instead of changing it "
                  f"mid-session ({plural(len(held.first), 'agent stream')} changed it)")
        out.append(Policy("stable_params", name, detail, addressed, sessions, held.reshape, held.rewrite,
                          cause_sessions=len(sessions), extra={"param": name}))
    return out
