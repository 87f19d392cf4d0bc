"""Model ids an agent logs in a spelling no price list uses are priced only through a sourced alias
(`[[aliases]]` in providers/prices.toml), and say so; any other unknown id stays unpriced and is named.

Gemini CLI logs Gemini 3 Pro as `gemini-3-pro`; its API id, `gemini-3-pro-preview`, costs $2.00 per million
input tokens, $0.20 cached, $12.00 output (up to 200k of input). Figures below are worked out by hand."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvprobe.errors import CatalogError
from kvprobe.price_overlay import alias_of
from kvprobe.report import build_report

ROOT = Path(__file__).resolve().parent.parent


def _gemini_session(tmp_path: Path) -> Path:
    doc = {"sessionId": "33333333-aaaa-bbbb-cccc-000000000003", "projectHash": "abc123",
           "startTime": "2026-02-10T10:00:00.000Z", "lastUpdated": "2026-02-10T10:05:00.000Z",
           "messages": [
               {"id": "m1", "timestamp": "2026-02-10T10:00:00.000Z", "type": "user", "content": "hi"},
               {"id": "m2", "timestamp": "2026-02-10T10:00:05.000Z", "type": "gemini", "content": "ok",
                "model": "gemini-3-pro",
                "tokens": {"input": 10_000, "output": 100, "cached": 2_000, "thoughts": 0, "tool": 0,
                           "total": 10_100}},
               {"id": "m3", "timestamp": "2026-02-10T10:01:00.000Z", "type": "gemini", "content": "ok",
                "model": "gemini-3-ultra",
                "tokens": {"input": 5_000, "output": 10, "cached": 0, "thoughts": 0, "tool": 0, "total": 5_010}}]}
    chats = tmp_path / "tmp" / "abc123" / "chats"
    chats.mkdir(parents=True)
    path = chats / "session-2026-02-10T10-00-33333333.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_logged_alias_is_priced_as_its_api_id_and_says_so(tmp_path):
    rep = build_report([_gemini_session(tmp_path)], fixes=False)
    by_id = {r.sk.model: r for r in rep.results}
    # 8,000 fresh x $2.00/M + 2,000 cached x $0.20/M + 100 output x $12.00/M = $0.016 + $0.0004 + $0.0012
    assert by_id["gemini-3-pro"].cost_usd == pytest.approx(0.0176)
    assert any(n.startswith("gemini-3-pro priced as gemini-3-pro-preview: a sourced alias in "
                            "providers/prices.toml") for n in rep.notes)
    # an id no price list or alias names is not guessed: unpriced and named
    assert by_id["gemini-3-ultra"].cost_usd is None and rep.unpriced_models == ["gemini-3-ultra"]


def test_usage_prices_the_alias_and_names_the_unpriced_id(cli, tmp_path):
    _gemini_session(tmp_path)
    data = json.loads(cli("usage", tmp_path / "tmp", "--json").stdout)
    models = {row["model"]: row["cost_usd"] for row in data["by_model"]}
    assert models["gemini-3-pro"] == pytest.approx(0.0176)
    assert data["unknown_models"] == ["gemini-3-ultra"]
    assert [n.split(":")[0] for n in data["price_notes"]] == ["gemini-3-pro priced as gemini-3-pro-preview"]
    text = cli("usage", tmp_path / "tmp").stdout
    assert "* gemini-3-pro priced as gemini-3-pro-preview" in text and "no price known for: gemini-3-ultra" in text


def test_an_alias_without_a_source_is_refused_naming_the_file(tmp_path, monkeypatch):
    copy = tmp_path / "providers"
    shutil.copytree(ROOT / "providers", copy)
    prices = copy / "prices.toml"
    prices.write_text(prices.read_text() + '\n[[aliases]]\nprovider = "gemini"\nlogged = "x"\npriced_as = "y"\n'
                      'checked = "2026-12-06"\n')
    monkeypatch.setenv("KVPROBE_PROVIDERS_DIR", str(copy))
    with pytest.raises(CatalogError, match=r"prices\.toml: an \[\[aliases\]\] entry has no 'source'"):
        alias_of("gemini", "x")
