"""Agent profiles (`providers/agents/*.toml`): the settings and habits of an agent CLI that change its cache.

A miss found in an agent's own log is advised in that agent's knobs (`/compact`, `promptCacheTtl`, ...), not in
API parameters its user never sets. Each profile names the importer formats whose records the agent wrote
(`extra["source_format"]`), how to capture its request bodies, the longer lifetime its settings can choose, and
advice keyed by cause (`advice_keys`), each piece with a source and a date. The SDKs keep the API's advice.
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvprobe import toml_cache
from kvprobe.catalog import providers_dir
from kvprobe.errors import CatalogError
from kvprobe.price_overlay import parse_date

AGENTS_DIR = "agents"
_VERSION = re.compile(r"\d+(?:\.\d+)*")


@dataclass(frozen=True, slots=True)
class Advice:
    text: str
    source: str
    checked: dt.date


@dataclass(frozen=True, slots=True)
class LongerLifetime:
    """The longer cache lifetime an agent's settings choose, for the main conversation and for subagents."""

    seconds: float
    main: str
    subagents: str | None
    since: dict[str, str]  # setting name -> the first version that has it
    source: str
    checked: dt.date


@dataclass(frozen=True, slots=True)
class AgentProfile:
    name: str
    formats: tuple[str, ...]
    commands: tuple[str, ...]  # the program names `kvprobe capture -- COMMAND` runs it as (`claude`)
    capture: str | None  # the command that records the agent's request bodies (None: capture cannot)
    source: str
    checked: dt.date
    advice: dict[str, Advice] = field(default_factory=dict)
    longer_lifetime: LongerLifetime | None = None
    capture_note: str | None = None  # what capturing this agent takes beyond the command (or why it cannot)
    path: str = ""

    def advise(self, keys: list[str]) -> Advice | None:
        """The advice of the first key the profile has (most specific first)."""
        for key in keys:
            found = self.advice.get(key)
            if found is not None:
                return found
        return None

    def missing_settings(self, version: str | None) -> list[str]:
        """The lifetime settings a logged client version predates (nothing when the version is unknown)."""
        if self.longer_lifetime is None or not version:
            return []
        have = _version(version)
        return [name for name, since in self.longer_lifetime.since.items() if have is not None
                and have < (_version(since) or ())]


def _version(text: str) -> tuple[int, ...] | None:
    found = _VERSION.search(text)
    return tuple(int(p) for p in found.group().split(".")) if found else None


def advice_keys(kind: str, param: str | None = None, path: str | None = None,
                triggers: list[str] | None = None, platform: str | None = None) -> list[str]:
    """The keys a cause's advice is looked up by, most specific first: `<kind>@<platform>` (the platform that
    served the request: Bedrock and Vertex route and are configured differently), `<kind>:<param>` (the
    parameter that changed), each event the log shows just before the miss (`trigger:<event kind>`),
    `<kind>:<path>` (its top level), then `<kind>`. A new cause kind plugs in by adding `[advice.<kind>]` to
    the profiles."""
    keys = [f"{kind}@{platform}"] if platform else []
    keys += [f"{kind}:{param}"] if param else []
    keys += [f"trigger:{t}" for t in triggers or ()]
    if path:
        keys.append(f"{kind}:{path.split('[', 1)[0].split('.', 1)[0]}")
    keys.append(kind)
    return keys


def _text(data: dict[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise CatalogError(f"{where}: field '{key}' must be a non-empty string")
    return value


def _advice(name: str, raw: Any, where: str) -> Advice:
    at = f"{where} [advice.{name}]"
    if not isinstance(raw, dict):
        raise CatalogError(f"{at}: expected a table with text, source and checked")
    return Advice(_text(raw, "text", at), _text(raw, "source", at), parse_date(raw.get("checked"), at, "checked"))


def _lifetime(raw: Any, where: str) -> LongerLifetime | None:
    if raw is None:
        return None
    at = f"{where} [longer_lifetime]"
    if not isinstance(raw, dict) or not isinstance(raw.get("seconds"), (int, float)) or raw["seconds"] <= 0:
        raise CatalogError(f"{at}: field 'seconds' must be a number of seconds above 0")
    since = raw.get("since", {})
    if not isinstance(since, dict) or not all(isinstance(v, str) for v in since.values()):
        raise CatalogError(f"{at}: field 'since' must map setting names to versions")
    sub = raw.get("subagents")
    return LongerLifetime(float(raw["seconds"]), _text(raw, "main", at), sub if isinstance(sub, str) else None,
                          dict(since), _text(raw, "source", at), parse_date(raw.get("checked"), at, "checked"))


def load_profile(path: Path, data: dict[str, Any] | None = None) -> AgentProfile:
    """The profile in `path` (`data`: its TOML already parsed)."""
    where = str(path)
    if data is None:
        data = _parse(path)
    formats = data.get("formats")
    if not isinstance(formats, list) or not formats or not all(isinstance(f, str) for f in formats):
        raise CatalogError(f"{where}: field 'formats' must list the importer formats the agent writes")
    advice = data.get("advice", {})
    if not isinstance(advice, dict):
        raise CatalogError(f"{where}: [advice] must be a table of causes")
    commands = data.get("commands", [])
    if not isinstance(commands, list) or not all(isinstance(c, str) and c for c in commands):
        raise CatalogError(f"{where}: field 'commands' must list the program names the agent runs as")
    capture = _text(data, "capture", where) if "capture" in data else None
    if capture is None and not isinstance(data.get("capture_note"), str):
        raise CatalogError(f"{where}: field 'capture' (the command that records the agent's bodies) or "
                           "'capture_note' (why none can) is required")
    return AgentProfile(_text(data, "agent", where), tuple(formats), tuple(commands), capture,
                        _text(data, "source", where), parse_date(data.get("checked"), where, "checked"),
                        {k: _advice(k, v, where) for k, v in advice.items()},
                        _lifetime(data.get("longer_lifetime"), where), _optional(data, "capture_note", where), where)


def _parse(path: Path) -> dict[str, Any]:
    """A profile's TOML (tomllib imported here: a run that finds every profile kept parsed needs none of it)."""
    import tomllib

    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"{path}: cannot read the agent profile: {exc}") from exc


def _optional(data: dict[str, Any], key: str, where: str) -> str | None:
    if key in data and not isinstance(data[key], str):
        raise CatalogError(f"{where}: field '{key}' must be a string")
    return data.get(key)


@lru_cache(maxsize=4)
def _profiles(directory: str) -> tuple[dict[str, AgentProfile], dict[str, AgentProfile]]:
    """(profiles by importer format, by command name), each key claimed by one profile only."""
    by_format: dict[str, AgentProfile] = {}
    by_command: dict[str, AgentProfile] = {}
    paths = sorted((Path(directory) / AGENTS_DIR).glob("*.toml"))
    # kept parsed between runs as the provider rules are (kvprobe.toml_cache): 13 profiles parsed by tomllib were
    # ~10 ms of every report of an agent's log
    for path, data in zip(paths, toml_cache.read_all(paths, _parse)):
        profile = load_profile(path, data)
        for table, keys, what in ((by_format, profile.formats, "format"), (by_command, profile.commands, "command")):
            for key in keys:
                if key in table:
                    raise CatalogError(f"{path}: {what} '{key}' is already {table[key].name}'s ({table[key].path})")
                table[key] = profile
    return by_format, by_command


def profiles(directory: Path | None = None) -> dict[str, AgentProfile]:
    """Every agent profile, by the importer format its logs are read with."""
    return _profiles(str(directory or providers_dir()))[0]


# Programs that run another: the agent behind them is the client (`kvprobe capture -- bash -c "claude -p …"`,
# `-- npx @openai/codex exec …`, `-- env FOO=1 gemini …`)
_LAUNCHERS = frozenset({"bash", "sh", "zsh", "dash", "fish", "env", "npx", "bunx", "pnpx", "node", "bun", "uv", "uvx",
                        "nice", "nohup", "time", "timeout", "stdbuf", "sudo", "script", "xvfb-run"})
_PACKAGE_TAILS = ("-cli", "-code", "-ai")  # npm package names of agents: @anthropic-ai/claude-code, opencode-ai


def client_of(args: list[str]) -> str | None:
    """The program `kvprobe capture -- COMMAND` runs, by the name whose advice applies: past a launcher (a shell's
    script, npx, env) the first word that is an agent's command or npm package, else the command's own name."""
    if not args:
        return None
    first = Path(args[0]).name
    if first not in _LAUNCHERS:
        return first
    import shlex

    known = _profiles(str(providers_dir()))[1]
    for arg in args[1:]:
        try:
            words = shlex.split(arg)
        except ValueError:  # an unbalanced quote: the words as they are
            words = arg.split()
        for word in words:
            name = Path(word).name.split("@")[0]  # (an npm package's version: opencode-ai@1.18.33)
            for candidate in (name, *(name[: -len(t)] for t in _PACKAGE_TAILS if name.endswith(t))):
                if candidate in known:
                    return candidate
    return first


def profile_for(extra: dict[str, Any]) -> AgentProfile | None:
    """The profile of the agent that wrote a record: the importer format of its log (`source_format`), else the
    program `kvprobe capture` ran (`client`). None: an SDK, a HAR, a trace of unknown origin."""
    by_format, by_command = _profiles(str(providers_dir()))
    fmt, client, writer = extra.get("source_format"), extra.get("client"), extra.get("writer")
    # a format several agents write (Cline's task folders: Roo Code's, Kilo Code's) names its writer:
    # `<format>:<writer>` in a profile's formats claims that writer's records
    found = by_format.get(f"{fmt}:{writer}") if isinstance(fmt, str) and isinstance(writer, str) else None
    found = found or (by_format.get(fmt) if isinstance(fmt, str) else None)
    return found or (by_command.get(client) if isinstance(client, str) else None)
