"""Sessions served by different platforms share no cache entry, whatever their prompts share: Bedrock keeps
its own entries apart from Claude's API (docs/caching-rules.md; `sim.cache_name`). Six sessions of one
product send the same 3,200-token prefix (test_fleet_names' support agent, one customer), three to the
Claude API and three through Bedrock: two fleets of three, each writing its prefix once per session, not
one fleet of six."""
from __future__ import annotations

from dataclasses import replace

import kvprobe
from kvprobe.trace import write_trace
from test_fleet_names import session


def test_a_fleet_is_found_per_platform(tmp_path):
    records = []
    for k in range(6):
        for rec in session(k, name="Quill"):
            records.append(replace(rec, extra={**rec.extra, "platform": "bedrock"}) if k >= 3 else rec)
    path = tmp_path / "two_platforms.jsonl"
    write_trace(path, records)
    found = kvprobe.analyse(path).to_json()["fleet"]
    assert sorted((f["sessions"], f["shared_tokens"], f["all_sessions"]) for f in found) == [(3, 3_200, 6),
                                                                                           (3, 3_200, 6)]
