"""Import the logs people already have as trace records (docs/contracts.md §1).

    report = ImportReport()
    for record in load_any(["~/.claude/projects", "session.har"], report=report):
        ...
    report.summary()   # what was read, and each kind of skipped line with its count

One module per source, each owning its quirks (see each module's docstring): `har`, `claude_code`, `codex`,
`gemini_cli`, `qwen_code`, `opencode`, `cline`, `openhands`, `vibe`, `otel`, `litellm`, `kimi_cli`, `copilot_cli`; kvprobe's own JSONL traces
are read too. Formats are detected (`formats`) from the file's first JSON value; directories are walked.
Malformed lines are counted per reason, never dropped silently; a file that is no known format, or a
whole-document format (HAR, OTLP JSON) that does not parse, is an InputError naming the file and line.
"""
from __future__ import annotations

# The names below are imported on first use: `loading` imports every importer (~3 ms), which a command asking
# only what a file is (`detect_format`, `agent_log`: `diff`) does not need.
_DETECTING = ("detect_format", "agent_log")
_LOADED = ("load_any", "discover", "default_sources", "ImportReport", "SourceStats", "FORMATS", "IMPORTERS",
           "FORMAT_NAMES", "bodies_of")
__all__ = ["load_any", "detect_format", "discover", "default_sources", "ImportReport", "SourceStats", "FORMATS"]


def __getattr__(name: str) -> object:
    if name in _DETECTING:
        from kvprobe.importers import formats as module
    elif name in _LOADED:
        from kvprobe.importers import loading as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(module, name)  # kept: the next look-up does not come here
    return value
