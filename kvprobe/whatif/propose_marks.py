"""Mark the end of a prefix requests share but no breakpoint ends: the fix for `missing_breakpoint`.

GPT-5.6+ reads only at breakpoints and places its own at the end of the newest message, so a stable prefix
before a changing suffix is never read (openai/codex#35300: 0% hits on real Codex bodies); a Claude request
whose only markers sit after content that changes has the same problem. The policy marks the block where
the shared prefix ends (`prompt_cache_breakpoint` for OpenAI, `cache_control` for Claude) in every request
that carries that prefix — the first one writes it, the later ones read it — and is priced like any other.
"""
from __future__ import annotations

import bisect

from kvprobe.analysis.explain import worth_a_breakpoint
from kvprobe.analysis.simulate import RequestResult
from kvprobe.analysis.skeleton import Skeleton
from kvprobe.catalog import rules_for
from kvprobe.request.openai_cache import BREAKPOINT_MARKER, breakpoint_roles, takes_breakpoint
from kvprobe.request.paths import part_at
from kvprobe.sim import OPENAI_MODES
from kvprobe.sim.positions import cumulative_tokens
from kvprobe.trace import TraceRecord
from kvprobe.whatif.edits import copy_record, mark_breakpoint
from kvprobe.whatif.policies import Evidence, Policy, Records, Skeletons, map_records, map_skeletons, origin
from kvprobe.wording import plural
from kvprobe.whatif.reshape import index_of, with_blocks, with_request


def _end_of(r: RequestResult) -> int | None:
    """The block that ends the prefix this request shares with an earlier one: the simulator's own answer
    (GPT-5.6+), else where the ideal read ends."""
    d = next(d for d in r.diagnoses if d.kind == "missing_breakpoint")
    req = r.sk.request
    if req is None:
        return None
    if d.path:
        return index_of(req, d.path)
    cum = cumulative_tokens(req.blocks)
    i = bisect.bisect_left(cum, r.raw_ideal_tokens or r.reusable_tokens)
    return i if i < len(cum) and cum[i] == (r.raw_ideal_tokens or r.reusable_tokens) else None


def _takes_mark(r: RequestResult, i: int) -> bool:
    """Whether the marker this request's cache reads can go on its block i: cache_control on any block;
    GPT-5.6+'s `prompt_cache_breakpoint` only where it takes a breakpoint (not on a Responses `instructions`
    string: a mark priced there could not be written)."""
    req = r.sk.request
    assert req is not None
    return req.cache_mode not in OPENAI_MODES or takes_breakpoint(req.blocks[i], breakpoint_roles(r.rules))


class _Marks:
    """A breakpoint at the block whose chained content is one of `ends`, in every request that has it."""

    def __init__(self, ends: set[int]) -> None:
        self.ends = ends  # content hashes of the blocks to mark (a content hash names the whole prefix)
        self.paths: dict[str, str] = {}  # request id -> path to mark (for the record edit)
        # of those, the requests GPT-5.6+ serves, which read `prompt_cache_breakpoint`; every other breakpoint
        # cache (Claude's, Qwen's explicit one) reads cache_control (kvprobe.request.openai_cache.marker_ttl)
        self.openai: set[str] = set()

    def _index(self, sk: Skeleton) -> int | None:
        for i, b in enumerate(sk.request.blocks):  # type: ignore[union-attr]
            if b.content_hash in self.ends:
                return i
        return None

    def reshape(self, sks: Skeletons) -> Skeletons:
        def edit(sk: Skeleton) -> Skeleton | None:
            req = sk.request
            i = self._index(sk)
            if i is None or i in req.breakpoint_indices:
                return None
            rules = rules_for(*sk.rules_key)
            if len([j for j in req.breakpoint_indices if j != req.managed_breakpoint]) >= \
                    int(rules.get("max_breakpoints", 4)) - (req.managed_breakpoint is not None):
                return None
            ttl = "explicit" if req.cache_mode in OPENAI_MODES else str(rules.get("default_ttl", "5m"))
            return with_request(sk, with_blocks(req, req.blocks, sorted([*req.breakpoints, (i, ttl)])))
        return map_skeletons(sks, edit)

    def rewrite(self, records: Records) -> Records:
        def edit(rec: TraceRecord) -> TraceRecord | None:
            path = self.paths.get(origin(rec.id))
            if path is None:
                return None
            new = copy_record(rec)
            if origin(rec.id) not in self.openai:
                return new if mark_breakpoint(new.request, path) else None
            part = part_at(new.request, path, writable=True)
            if not isinstance(part, dict):  # a block no marker goes on (a string `instructions`)
                return None
            part["prompt_cache_breakpoint"] = dict(BREAKPOINT_MARKER)
            return new
        return map_records(records, set(self.paths), edit)


def propose_marks(ev: Evidence) -> list[Policy]:
    # a small tail past the last breakpoint is named (the rules explain it) but not worth a fix of its own
    diagnosed = [r for r in ev.with_kind("missing_breakpoint") if worth_a_breakpoint(r)]
    ends: set[int] = set()
    addressed: list[str] = []
    for r in diagnosed:
        i = _end_of(r)
        if i is not None and _takes_mark(r, i):
            ends.add(r.sk.request.blocks[i].content_hash)  # type: ignore[union-attr]
            addressed.append(r.sk.id)
    if not ends:
        return []
    marks = _Marks(ends)
    for r in ev.results:
        if r.sk.request is not None:
            i = marks._index(r.sk)
            if i is not None and i not in r.sk.request.breakpoint_indices:
                marks.paths[r.sk.id] = r.sk.request.blocks[i].path
                if r.sk.request.cache_mode in OPENAI_MODES:
                    marks.openai.add(r.sk.id)
    if not marks.paths:
        return []
    sessions = {r.sk.session for r in ev.results if r.sk.id in marks.paths}
    openai = any(r.sk.request.cache_mode in OPENAI_MODES for r in diagnosed if r.sk.request)
    marker = "`prompt_cache_breakpoint`" if openai else "cache_control"
    example = next(iter(marks.paths.values()))
    detail = (f"mark the end of the prefix the requests share but no breakpoint ends (e.g. {example}) with {marker}, "
              f"in {plural(len(marks.paths), 'request')} that carry it: the first writes it, the later ones read it"
              + (" (GPT-5.6+ reads only at breakpoints; its managed one sits after the part that changes)"
                 if openai else ""))
    return [Policy("mark_breakpoint", "shared-end", detail, addressed, sessions, marks.reshape, marks.rewrite,
                   cause_sessions=len({r.sk.session for r in diagnosed}), extra={"path": example})]
