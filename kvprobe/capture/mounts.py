"""Where the capture proxy sends what: one mount per provider API, and the variables that point clients at it.

A client reaches a provider through its mount, ``http://127.0.0.1:PORT/<mount>/...``; the rest of the path is
appended to that mount's upstream. Nothing outside a mount is forwarded: a request whose path names no mount
is answered 502 by the proxy (a guess could send one provider's key and prompt to another provider).

Each mount lists the base-URL variables that clients read (checked in each client's source or docs, 2026-12):

* anthropic: ``ANTHROPIC_BASE_URL`` (the Anthropic SDKs, Claude Code; OpenCode and Kilo Code through the AI
  SDK, which leave the ``/v1`` out of their paths: the proxy puts it back).
* openai: ``OPENAI_BASE_URL`` (the OpenAI SDKs, Qwen Code, Codex's built-in provider in the versions that read
  it), ``OPENAI_API_BASE`` (LiteLLM, aider). Codex otherwise takes a ``config.toml`` model provider
  (docs/capture.md).
* deepseek: ``DEEPSEEK_BASE_URL``.
* gemini: ``GOOGLE_GEMINI_BASE_URL`` (google-genai for Python, JS and Java; Gemini CLI). The value is the
  host root: the SDK appends ``/v1beta/models/MODEL:generateContent``.
* vertex: ``GOOGLE_VERTEX_BASE_URL`` (google-genai with ``vertexai=True``, Gemini CLI with
  ``GOOGLE_GENAI_USE_VERTEXAI``; host root, the SDK appends ``/v1beta1/projects/...``) and
  ``ANTHROPIC_VERTEX_BASE_URL`` (``AnthropicVertex``, Claude Code on Vertex; it includes ``/v1``). The public
  upstream is regional: it is chosen from the request path's ``locations/REGION``, as the SDKs choose it.
* bedrock: ``ANTHROPIC_BEDROCK_BASE_URL`` (``AnthropicBedrock``, Claude Code on Bedrock) and
  ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME`` (boto3 and the AWS SDKs). Set only when requests carry a bearer token
  (``AWS_BEARER_TOKEN_BEDROCK``) or no signature (``CLAUDE_CODE_SKIP_BEDROCK_AUTH``, a gateway signs): a SigV4
  signature covers the host it was made for, so a signed request sent through a proxy is refused by AWS.

A base URL already in the environment (a gateway the user relies on) becomes that mount's upstream, the
variable's suffix (``/v1``) taken off, so the request still reaches the gateway after the proxy.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote


@dataclass(frozen=True, slots=True)
class BaseUrlVar:
    name: str
    suffix: str = ""  # what the variable's value has after the mount's root (ANTHROPIC_VERTEX_BASE_URL: /v1)


@dataclass(frozen=True, slots=True)
class Mount:
    name: str  # the path prefix (/gemini) and the --NAME-upstream option
    upstream: str  # the public API: {location} / {region} are filled per request / from the environment
    variables: tuple[BaseUrlVar, ...]
    hosts: tuple[str, ...]  # what the public API's host names hold (the in-process hook sees hosts, not mounts)
    # where the API sits on a server that speaks every API at its own paths (`capture --upstream`, kvprobe
    # serve): the OpenAI-style APIs' base URLs end in /v1, the others are at the root
    under_root: str = ""
    # the variables are set in a child command only when one of these is in its environment (empty: always)
    only_with: tuple[str, ...] = ()
    # the API's version, under which every path of it sits: a client that takes the base URL to end in it (the
    # AI SDK's @ai-sdk/anthropic, whose default is https://api.anthropic.com/v1: OpenCode, Kilo Code) sends
    # /messages where the Anthropic SDKs send /v1/messages, reading the same variable; both are forwarded there
    version: str = ""

    def versioned(self, path: str) -> str:
        """The upstream path of what followed the mount: under the API's version, where a client left it out."""
        if not self.version or not path or path == self.version or path.startswith((self.version + "/",
                                                                                    self.version + "?")):
            return path
        return self.version + path


MOUNTS: tuple[Mount, ...] = (
    Mount("anthropic", "https://api.anthropic.com", (BaseUrlVar("ANTHROPIC_BASE_URL"),), ("api.anthropic.com",),
          version="/v1"),
    Mount("openai", "https://api.openai.com/v1", (BaseUrlVar("OPENAI_BASE_URL"), BaseUrlVar("OPENAI_API_BASE")),
          ("api.openai.com",), under_root="/v1"),
    Mount("deepseek", "https://api.deepseek.com", (BaseUrlVar("DEEPSEEK_BASE_URL"),), ("api.deepseek.com",),
          under_root="/v1"),
    Mount("gemini", "https://generativelanguage.googleapis.com", (BaseUrlVar("GOOGLE_GEMINI_BASE_URL"),),
          ("generativelanguage.googleapis.com",)),
    Mount("vertex", "https://{location}-aiplatform.googleapis.com",
          (BaseUrlVar("GOOGLE_VERTEX_BASE_URL"), BaseUrlVar("ANTHROPIC_VERTEX_BASE_URL", "/v1")),
          ("aiplatform.googleapis.com", "aiplatform.us.rep.googleapis.com", "aiplatform.eu.rep.googleapis.com")),
    Mount("bedrock", "https://bedrock-runtime.{region}.amazonaws.com",
          (BaseUrlVar("ANTHROPIC_BEDROCK_BASE_URL"), BaseUrlVar("AWS_ENDPOINT_URL_BEDROCK_RUNTIME")),
          ("bedrock-runtime.",), only_with=("AWS_BEARER_TOKEN_BEDROCK", "CLAUDE_CODE_SKIP_BEDROCK_AUTH")),
)
MOUNT_NAMES = tuple(m.name for m in MOUNTS)
BY_NAME = {m.name: m for m in MOUNTS}
DEFAULT_REGION = "us-east-1"  # the AWS SDKs' own fallback is none; Bedrock's first region
_LOCATION = re.compile(r"/locations/([a-z0-9-]+)/")


def env_upstream(mount: Mount, env: Mapping[str, str]) -> str | None:
    """A gateway the environment already points this mount's clients at (its variable's suffix dropped)."""
    for var in mount.variables:
        value = env.get(var.name, "").strip().rstrip("/")
        if value:
            return value[: -len(var.suffix)] if var.suffix and value.endswith(var.suffix) else value
    return None


def default_upstream(mount: Mount, env: Mapping[str, str]) -> str:
    """The public API of a mount; Bedrock's in the region the environment names (as the AWS SDKs read it)."""
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
    return mount.upstream.replace("{region}", region)


def vertex_host(path: str) -> str:
    """The Vertex AI host that serves a request path, as the SDKs pick it: `global` (and no location) on
    aiplatform.googleapis.com, the `us`/`eu` multi-regions on their rep hosts, a region on REGION-aiplatform."""
    found = _LOCATION.search(unquote(path))
    location = found.group(1) if found else "global"
    if location == "global":
        return "aiplatform.googleapis.com"
    if location in ("us", "eu"):
        return f"aiplatform.{location}.rep.googleapis.com"
    return f"{location}-aiplatform.googleapis.com"


def child_env(proxy_url: str, env: Mapping[str, str]) -> dict[str, str]:
    """The base-URL variables that point a child command's clients at the proxy (see the module doc)."""
    out = {"KVPROBE_CAPTURE_URL": proxy_url}
    for mount in MOUNTS:
        if mount.only_with and not any(env.get(name) for name in mount.only_with):
            continue
        for var in mount.variables:
            out[var.name] = f"{proxy_url}/{mount.name}{var.suffix}"
    return out


def mounts_line(proxy_url: str) -> str:
    """Named in the proxy's 502 for a path outside every mount."""
    return ", ".join(f"{proxy_url}/{name}" for name in MOUNT_NAMES)


def provider_of(mount: str, path: str) -> tuple[str | None, str | None]:
    """(provider, platform) of a request through a mount, for the record when its body does not say: Vertex
    serves Claude under publishers/anthropic and Gemini under publishers/google; Bedrock names the model (and
    so its vendor) in the path, which the recorder reads (`request.model_from_endpoint`)."""
    if mount == "vertex":
        return ("anthropic" if "/publishers/anthropic/" in path else "gemini"), "vertex"
    if mount == "bedrock":
        return None, "bedrock"
    return mount, None


def mount_of_host(host: str | None) -> str | None:
    """The mount whose public API a host belongs to (us-east5-aiplatform.googleapis.com: vertex), if any."""
    if not host:
        return None
    host = host.lower()
    for mount in MOUNTS:
        if any(host == h or host.endswith(("." + h, "-" + h)) or (h.endswith(".") and h in host)
               for h in mount.hosts):
            return mount.name
    return None
