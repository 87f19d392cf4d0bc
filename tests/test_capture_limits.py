"""The capture proxy against clients that never finish a request (issue #39 item 13): a half-sent head, a body
shorter than its Content-Length, a chunk size no buffer could hold. Before, each held its connection open for
ever and buffered without end; now 408 after the read timeout, 413 at once past the body cap, nothing sent on."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from kvprobe.capture import CaptureProxy, ProxyThread, Recorder
from kvprobe.capture.proxy import ClientLimits

HEAD = b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@pytest.fixture
def limited(fake, tmp_path):
    proxy = CaptureProxy(Recorder(tmp_path / "trace.jsonl"), {"anthropic": fake.url},
                         limits=ClientLimits(idle=0.5, read=0.5, max_body=4096))
    with ProxyThread(proxy):
        yield proxy


def _exchange(port: int, data: bytes, wait: float = 5.0) -> tuple[bytes, float]:
    """Send `data` and read until the proxy closes (or `wait` passes: the test then fails on the answer)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(wait)
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return received, time.monotonic() - start


def _status(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:80]
    return int(answer[9:12])


def test_a_half_sent_head_is_answered_408_after_the_read_timeout(limited, fake):
    answer, took = _exchange(limited.port, HEAD)  # no blank line: the head never ends
    assert _status(answer) == 408 and took < 3
    assert fake.requests == []


def test_a_body_shorter_than_its_length_is_answered_408(limited, fake):
    answer, took = _exchange(limited.port, HEAD + b"Content-Length: 1000\r\n\r\n{\"model\":")
    assert _status(answer) == 408 and b"request body" in answer and took < 3
    assert fake.requests == []


def test_a_huge_content_length_is_refused_at_once_without_reading_it(limited, fake):
    answer, took = _exchange(limited.port, HEAD + b"Content-Length: 99999999999999\r\n\r\n{\"model\":")
    assert _status(answer) == 413 and b"99,999,999,999,999 bytes" in answer and took < 0.5
    assert fake.requests == []


def test_a_chunk_size_past_the_cap_is_refused_at_once(limited, fake):
    answer, took = _exchange(limited.port, HEAD + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\nab")
    assert _status(answer) == 413 and took < 0.5
    assert fake.requests == []


def test_small_chunks_past_the_cap_are_refused(limited, fake):
    chunks = b"".join(b"10\r\n" + b"x" * 16 + b"\r\n" for _ in range(400))  # 6,400 bytes of body
    answer, _ = _exchange(limited.port, HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunks)
    assert _status(answer) == 413
    assert fake.requests == []


def test_an_idle_kept_alive_connection_is_closed_quietly(limited):
    answer, took = _exchange(limited.port, b"")
    assert answer == b"" and took < 3


def test_a_request_within_the_limits_still_goes_through(limited, fake):
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    answer, _ = _exchange(limited.port, HEAD + b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    assert _status(answer) == 200 and len(fake.requests) == 1


def test_the_cli_takes_the_body_cap(fake, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "kvprobe", "capture", "serve", "--port", str(port), "-o",
                             str(tmp_path / "t.jsonl"), "--json", "--anthropic-upstream", fake.url,
                             "--max-request-mb", "0.001", "--client-timeout", "0.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        proc.stdout.readline()  # ready
        big, _ = _exchange(port, HEAD + b"Content-Length: 2000\r\n\r\n")
        stalled, took = _exchange(port, HEAD + b"Content-Length: 10\r\n\r\n{")
        proc.terminate()
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert _status(big) == 413 and _status(stalled) == 408 and took < 3
    assert fake.requests == []
