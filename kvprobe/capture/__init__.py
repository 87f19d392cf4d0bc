"""Capture traces: a recording reverse proxy and an in-process httpx hook (one trace record per request).

Proxy (what `kvprobe capture` runs)::

    proxy = CaptureProxy(Recorder("trace.jsonl", session="fix-login"))
    with ProxyThread(proxy):                     # or: await proxy.start() ... await proxy.stop()
        env = proxy.base_urls()                  # every mount's base-URL variables (kvprobe.capture.mounts)

In-process hook, for agents whose base URL cannot change::

    client = anthropic.Anthropic(http_client=kvprobe.capture.http_client(out="trace.jsonl"))
    client = openai.AsyncOpenAI(http_client=kvprobe.capture.async_http_client(out="trace.jsonl"))

Both write docs/contracts.md §1 records: the request body, the response (reassembled from SSE), timings,
session/agent, `error` for anything that went wrong. API keys and auth headers are never written;
`Recorder(redact=True)` scrubs secrets inside bodies, `Recorder(hash_only=True)` keeps digests and token
counts instead of text.
"""
from kvprobe.capture.hook import async_http_client, http_client, transports
from kvprobe.capture.proxy import CaptureProxy
from kvprobe.capture.recorder import Exchange, Recorder
from kvprobe.capture.runner import ProxyThread, run_command, serve

__all__ = ["http_client", "async_http_client", "transports", "CaptureProxy", "Recorder", "Exchange",
           "ProxyThread", "run_command", "serve"]
