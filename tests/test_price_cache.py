"""What a run reads from the genai-prices dataset is kept on disk: the next run prices the same requests
identically without loading the dataset (its load costs more CPU than pricing a whole trace)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version

import pytest

from kvprobe.pricing import DatasetCache, PriceBook
from kvprobe.usage import Usage

DAY = 20_340 * 86400.0 + 3600  # 2025-09-10 01:00 UTC
CASES = [("anthropic", "claude-sonnet-4-5", Usage(250_000, 200_000, 30_000, 0, 900)),  # over the 200k tier
         ("anthropic", "claude-sonnet-4-5", Usage(12_000, 9_000, 2_000, 500, 300)),
         ("openai", "gpt-5", Usage(8_000, 4_096, 0, 0, 700)),
         ("anthropic", "no-such-model-x", Usage(10, 0, 0, 0, 1))]


def _costs(book: PriceBook) -> list[float | None]:
    return [book.cost(p, m, u, DAY).usd for p, m, u in CASES]


def test_warm_cache_prices_identically(tmp_path):
    cold = PriceBook(dataset=DatasetCache(tmp_path))
    first = _costs(cold)
    assert first[0] and first[1] and first[2] and first[3] is None
    assert cold.unknown_models == {"no-such-model-x"}
    files = list(tmp_path.glob("genai-prices-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())
    # named after the installed dataset: upgrading genai-prices starts a new file
    assert files[0].name == f"genai-prices-{version('genai-prices')}.json"
    warm = PriceBook(dataset=DatasetCache(tmp_path))
    assert _costs(warm) == first and warm.unknown_models == {"no-such-model-x"}
    # the long-context tier is priced apart: 250k input costs more per token than 12k
    assert first[0] / 250_000 > first[1] / 12_000


def test_warm_run_does_not_load_the_dataset(tmp_path):
    code = ("import sys; from kvprobe.pricing import PriceBook; from kvprobe.usage import Usage\n"
            f"print(PriceBook().cost('anthropic', 'claude-sonnet-4-5', Usage(5000, 1000, 0, 0, 10), {DAY}).usd)\n"
            "print('genai_prices' in sys.modules)")
    env = {**os.environ, "KVPROBE_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
            for _ in range(2)]
    (cost1, loaded1), (cost2, loaded2) = (r.stdout.split() for r in runs)
    assert cost1 == cost2 and loaded1 == "True" and loaded2 == "False"


def test_a_request_with_no_time_is_priced_as_of_today_and_kept_too(tmp_path):
    """A request whose log gives no time is priced at today's prices: that look-up is kept for the day (it
    loaded the dataset on every run)."""
    code = ("import sys; from kvprobe.pricing import PriceBook; from kvprobe.usage import Usage\n"
            "print(PriceBook().cost('anthropic', 'claude-sonnet-4-5', Usage(5000, 1000, 0, 0, 10), None).usd)\n"
            "print('genai_prices' in sys.modules)")
    env = {**os.environ, "KVPROBE_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
            for _ in range(2)]
    (cost1, loaded1), (cost2, loaded2) = (r.stdout.split() for r in runs)
    # claude-sonnet-4-5: $3 / $15 per MTok, reads $0.30: 4,000 fresh + 1,000 read + 10 output
    assert cost1 == cost2 and float(cost1) == pytest.approx((4_000 * 3 + 1_000 * 0.30 + 10 * 15) / 1e6, abs=1e-12)
    assert loaded1 == "True" and loaded2 == "False"
