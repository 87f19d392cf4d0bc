"""Capture traces: a recording reverse proxy and an in-process httpx hook (one trace record per request)."""
from kvprobe.capture.hook import async_http_client, http_client, transports
from kvprobe.capture.proxy import CaptureProxy
from kvprobe.capture.recorder import Exchange, Recorder
from kvprobe.capture.runner import ProxyThread, run_command, serve

__all__ = ["http_client", "async_http_client", "transports", "CaptureProxy", "Recorder", "Exchange",
           "ProxyThread", "run_command", "serve"]
