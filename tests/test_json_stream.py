"""`report --json` is written as it is encoded (a fleet's request rows are never held whole): the bytes are
orjson's indented layout exactly, as `print_json` wrote the whole document before."""
from __future__ import annotations

import json
from pathlib import Path

from kvprobe.cli.jsonout import print_json_items

SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "sample_session.jsonl"


def test_streamed_rows_have_the_layout_of_one_document(capsysbinary):
    rows = iter([{"x": [1, 2], "t": "l1\nl2\u009b\u007f"}, {}])
    print_json_items([("a", 1), ("rows", rows), ("none", iter([])), ("m", {3: None}), ("empty", [])])
    # written by hand: two-space indent, an empty list as [], C1 and DEL escaped for terminals, int keys quoted
    assert capsysbinary.readouterr().out == (
        b'{\n  "a": 1,\n  "rows": [\n    {\n      "x": [\n        1,\n        2\n      ],\n'
        b'      "t": "l1\\nl2\\u009b\\u007f"\n    },\n    {}\n  ],\n  "none": [],\n  "m": {\n    "3": null\n  },\n'
        b'  "empty": []\n}\n')


def test_no_items_is_an_empty_object(capsysbinary):
    print_json_items([])
    assert capsysbinary.readouterr().out == b"{}\n"


def test_report_json_lists_every_request_and_miss(cli):
    result = cli("report", SAMPLE, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    # the sample session: six requests, four of them with a miss kvprobe explains
    assert [r["id"] for r in data["requests"]] == ["req_1", "req_2", "req_3", "req_4", "req_5", "req_6"]
    assert len(data["misses"]) == 4
    assert list(data)[:5] == ["totals", "requests", "sessions", "agents", "misses"]
    assert data["failed_requests"] == [] and data["blocks"]  # the keys after the rows are all there
