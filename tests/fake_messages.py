"""A Messages API on 127.0.0.1 that answers every request at once with the usage a test sets, and keeps the
bodies it was sent: for running examples/agent.py (the real SDK) as fast as it can send."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Handler(BaseHTTPRequestHandler):
    usage: dict[str, int] = {}
    bodies: list[dict[str, Any]] = []

    def do_POST(self):  # noqa: N802
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        data = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-opus-5",
                           "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                           "stop_sequence": None, "usage": self.usage}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextmanager
def messages_api(read: int = 0, write: int = 0, fresh: int = 12) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(base URL, the bodies received so far) of a server reporting this usage for every request."""
    handler = type("Messages", (_Handler,), {"bodies": [], "usage": {
        "input_tokens": fresh, "output_tokens": 1, "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write}})
    api = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{api.server_port}", handler.bodies
    finally:
        api.shutdown()
