"""Run every benchmark in this folder and print their figures. Usage: uv run python benchmarks/run.py [NAME...]"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main() -> int:
    wanted = sys.argv[1:]
    scripts = sorted(p for p in HERE.glob("*.py") if p.stem.startswith(("bench_", "engine_")))
    failed = 0
    for script in scripts:
        if wanted and not any(w in script.stem for w in wanted):
            continue
        print(f"== {script.stem}", flush=True)
        failed += subprocess.run([sys.executable, str(script)]).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
