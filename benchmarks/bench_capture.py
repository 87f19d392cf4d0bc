"""Capture proxy overhead: added latency vs direct calls, stream first-byte overhead, and 200 concurrent
streams, against a local upstream (kvprobe.capture.testing), with a plain forwarding proxy (the same proxy,
recording off) as the reference measured in the same run. Each party runs in its own process.

Usage: uv run python benchmarks/bench_capture.py [--requests 2000] [--seconds 5]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvprobe.capture.wire import ChunkedDecoder
from kvprobe.trace import read_trace

PROXY = """
import sys
from kvprobe.capture.proxy import CaptureProxy
from kvprobe.capture.recorder import Recorder
from kvprobe.capture.runner import serve
upstream, out = sys.argv[1], sys.argv[2]
recorder = Recorder(out) if out != "-" else None
proxy = CaptureProxy(recorder, {"anthropic": upstream, "openai": upstream + "/v1"})
serve(proxy, lambda p: print(p.port, flush=True))
"""
BODY = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 64, "system": "You are terse. " * 200,
                   "messages": [{"role": "user", "content": "Fix the login bug."}]}).encode()


def _spawn(args: list[str]) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def _request(path: str, stream: bool) -> bytes:
    body = BODY if not stream else BODY[:-1] + b', "stream": true}'
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-api-key: sk-bench\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _exchange(sock: socket.socket, request: bytes) -> tuple[float, float]:
    """Send one request on a keep-alive socket; seconds to the first body byte and to the end."""
    t0 = time.perf_counter()
    sock.sendall(request)
    buf, first = b"", None
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(65536)
    head, rest = buf.split(b"\r\n\r\n", 1)
    chunked = b"chunked" in head.lower()
    length = None if chunked else int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    decoder = ChunkedDecoder()
    got = 0
    while True:
        if rest:
            first = first or time.perf_counter()
            if chunked:
                decoder.feed(rest)
                if decoder.done:
                    break
            else:
                got += len(rest)
                if got >= length:
                    break
        rest = sock.recv(65536)
    return first - t0, time.perf_counter() - t0


def latency(ports: dict[str, int], n: int, stream: bool) -> dict[str, list[float]]:
    socks = {name: socket.create_connection(("127.0.0.1", port)) for name, port in ports.items()}
    paths = {"direct": "/v1/messages", "plain proxy": "/anthropic/v1/messages",
             "recording proxy": "/anthropic/v1/messages"}
    results: dict[str, list[float]] = {name: [] for name in ports}
    for i in range(n + 50):
        for name, sock in socks.items():  # interleaved: drift hits every party alike
            first, total = _exchange(sock, _request(paths[name], stream))
            if i >= 50:  # warm-up
                results[name].append(first if stream else total)
    for sock in socks.values():
        sock.close()
    return results


async def _stream_worker(port: int, path: str, deadline: float, done: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = _request(path, True)
    while time.perf_counter() < deadline:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        assert b" 200 " in head.split(b"\r\n")[0]
        decoder = ChunkedDecoder()
        while not decoder.done:
            decoder.feed(await reader.read(65536))
        assert b"message_stop" in decoder.body
        done[0] += 1
    writer.close()


def concurrent(port: int, path: str, seconds: float, clients: int = 200) -> tuple[int, float]:
    done = [0]

    async def main() -> float:
        t0 = time.perf_counter()
        await asyncio.gather(*(_stream_worker(port, path, t0 + seconds, done) for _ in range(clients)))
        return time.perf_counter() - t0

    elapsed = asyncio.run(main())
    return done[0], elapsed


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000 if q < 100 else max(values) * 1000


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        try:
            upstream, up_port = _spawn(["-m", "kvprobe.capture.testing", "0"])
            procs.append(upstream)
            url = f"http://127.0.0.1:{up_port}"
            plain, plain_port = _spawn(["-c", PROXY, url, "-"])
            recording, rec_port = _spawn(["-c", PROXY, url, str(trace)])
            procs += [plain, recording]
            ports = {"direct": up_port, "plain proxy": plain_port, "recording proxy": rec_port}
            ok = _report_latency(ports, args.requests)
            base = sum(1 for _ in read_trace(trace))
            ok &= _report_concurrency(plain_port, rec_port, trace, base, args.seconds)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=10)
    return 0 if ok else 1


def _report_latency(ports: dict[str, int], n: int) -> bool:
    ok = True
    for stream, label, target50, target99 in ((False, "request latency", 1.0, 5.0),
                                              (True, "stream first byte", 2.0, 2.0)):
        res = latency(ports, n, stream)
        d50, d99 = pct(res["direct"], 50), pct(res["direct"], 99)
        print(f"{label} over {n} sequential requests (ms):")
        for name, values in res.items():
            print(f"  {name:16s} p50 {pct(values, 50):6.3f}  p99 {pct(values, 99):6.3f}")
        add50 = pct(res["recording proxy"], 50) - d50
        add99 = pct(res["recording proxy"], 99) - d99
        plain50 = pct(res["plain proxy"], 50) - d50
        print(f"  added by recording proxy: p50 {add50:+.3f} ms, p99 {add99:+.3f} ms "
              f"(plain forwarding proxy: p50 {plain50:+.3f} ms); target p50 < {target50} ms"
              + (f", p99 < {target99} ms" if not stream else ""))
        ok &= add50 < target50 and (stream or add99 < target99)
    return ok


def _report_concurrency(plain_port: int, rec_port: int, trace: Path, base: int, seconds: float) -> bool:
    n_plain, t_plain = concurrent(plain_port, "/anthropic/v1/messages", seconds)
    n_rec, t_rec = concurrent(rec_port, "/anthropic/v1/messages", seconds)
    time.sleep(0.5)  # let the proxy append the last records (it writes after the client's last byte)
    records = list(read_trace(trace))[base:]  # strict: a corrupted line raises
    lost = n_rec - len(records)
    bad = sum(1 for r in records if (r.usage or {}).get("output_tokens") != 9 or r.error)
    print(f"200 concurrent streams for {seconds:g} s: plain proxy {n_plain / t_plain:,.0f} req/s, "
          f"recording proxy {n_rec / t_rec:,.0f} req/s ({n_rec} streams; target >= 500 req/s)")
    print(f"  records: {len(records)} written, {lost} lost, {bad} corrupted or wrong (target 0 and 0)")
    return lost == 0 and bad == 0 and n_rec / t_rec >= 500


if __name__ == "__main__":
    raise SystemExit(main())
