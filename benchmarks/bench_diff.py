"""`kvprobe diff` of two 200k-token requests, including process start (target < 1 s; team target < 0.5 s)."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def body(change: str) -> dict:
    turns = []
    for i in range(40):
        text = " ".join(WORDS[(i * 7 + j) % len(WORDS)] + str(j % 97) for j in range(2300))
        if i == 25:
            text = text[: len(text) // 2] + change + text[len(text) // 2:]
        turns.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return {"model": "claude-sonnet-4-5", "max_tokens": 100,
            "system": [{"type": "text", "text": "You help. " * 500, "cache_control": {"type": "ephemeral"}}],
            "messages": turns}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a.json", Path(tmp) / "b.json"
        a.write_text(json.dumps(body("X")))
        b.write_text(json.dumps(body("Y")))
        cmd = [sys.executable, "-m", "kvprobe", "diff", str(a), str(b), "--json"]
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            runs.append(time.perf_counter() - t0)
        data = json.loads(out.stdout)
    print(f"diff of two {data['tokens']['b']:,}-token requests: best {min(runs):.2f} s, "
          f"median {sorted(runs)[1]:.2f} s including process start (target < 1 s; team target < 0.5 s)")
    print(f"  first change {data['first_change']['path']} at token {data['first_change']['token_position']:,}")


if __name__ == "__main__":
    main()
