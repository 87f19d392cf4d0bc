"""The README's regression demo (`AGENT_BUG=timestamp` in examples/agent.py) breaks the cache on every run.

The agent's five requests often fall within one second; a clock read to the second left most of them
identical, and the demo passed on some runs. Here an instant fake Messages API (the real SDK talks to it)
receives each run's requests as fast as the agent can send them, and every request's system prompt differs
from the one before, in its first line only, on every run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import ROOT

AGENT = ROOT / "examples" / "agent.py"
REPLY = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-opus-5",
         "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None,
         "usage": {"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 0,
                   "cache_creation_input_tokens": 0}}


class InstantMessages(BaseHTTPRequestHandler):
    systems: list[str] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.systems.append(body["system"][0]["text"])
        data = json.dumps(REPLY).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_the_timestamp_bug_changes_every_request_of_every_run():
    api = ThreadingHTTPServer(("127.0.0.1", 0), InstantMessages)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    env = {**os.environ, "AGENT_BUG": "timestamp", "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{api.server_port}"}
    try:
        for _ in range(3):
            InstantMessages.systems = []
            done = subprocess.run([sys.executable, str(AGENT)], env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            systems = InstantMessages.systems
            assert len(systems) == 5
            assert len(set(systems)) == 5, systems  # no two requests of a run share their cached prefix
            first_lines = [s.split("\n", 1)[0] for s in systems]
            assert all(line.startswith("Current time: ") for line in first_lines)
            assert len({s.split("\n", 1)[1] for s in systems}) == 1  # the rest of the prompt is unchanged
    finally:
        api.shutdown()


def test_without_the_bug_every_request_shares_the_system_prompt():
    api = ThreadingHTTPServer(("127.0.0.1", 0), InstantMessages)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if k != "AGENT_BUG"}
    env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{api.server_port}"
    InstantMessages.systems = []
    try:
        done = subprocess.run([sys.executable, str(AGENT)], env=env, capture_output=True, text=True, timeout=120)
    finally:
        api.shutdown()
    assert done.returncode == 0, done.stderr
    assert len(InstantMessages.systems) == 5 and len(set(InstantMessages.systems)) == 1
