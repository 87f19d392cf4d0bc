"""kvprobe from Python, cell by cell (Jupyter, VS Code and PyCharm run each `# %%` block as a cell).

    uv run python examples/notebook.py [TRACE]

The same figures as `kvprobe report TRACE`: totals, the costliest misses, what each fix saves, the costliest
blocks, per-session totals, then a question of your own with pandas.
"""
# %% Analyse a trace: the Report behind `kvprobe report` (its .to_json() is `kvprobe report --json`)
import sys
from pathlib import Path

import kvprobe

trace = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent.parent / "traces" / "sample_session.jsonl"
rep = kvprobe.analyse(trace)
t = rep.totals
print(f"{t['requests']} requests · hit ratio {t['token_hit_ratio']:.1%} · {t['input_equivalent_tokens']:,.0f} "
      f"input-equivalents · ${t['cost_usd']:.4f}")

# %% Every table as a DataFrame
data = kvprobe.load(rep)
print(data.tables)
requests = data.to_pandas()  # one row per request
print(requests[["request_id", "cache_read_tokens", "cache_write_tokens", "cost_usd", "miss_kind"]].to_string(index=False))

# %% Why each miss happened, and what it cost in tokens not read
diagnoses = data.to_pandas("diagnoses")
print(diagnoses[["request_id", "kind", "missed_read_tokens", "detail"]].to_string(index=False))

# %% What each fix saves (chosen fixes first, then alternatives)
fixes = data.fixes()
print(fixes[["kind", "requests", "saving_usd", "saving_input_equivalent_tokens"]].to_string(index=False))

# %% Where the money goes: the costliest blocks over the task
blocks = data.block_costs().nlargest(3, "cost_usd")
print(blocks[["path", "kind", "first_request", "cache_write_usd", "cache_read_usd", "cost_usd"]].to_string(index=False))

# %% Per session, and a question of your own: the cost of the requests that missed, by cause
print(data.sessions()[["session", "requests", "token_hit_ratio", "cost_usd", "missed_read_tokens"]].to_string(index=False))
by_cause = requests.dropna(subset=["miss_kind"]).groupby("miss_kind").cost_usd.sum().sort_values(ascending=False)
print(by_cause.round(4).to_string())

# %% Rows as dataclasses, for code that prefers attributes
best = max(data.records("fixes"), key=lambda f: f.saving_usd or 0)
print(f"largest saving: {best.kind} on {', '.join(best.requests)}: ${best.saving_usd:.4f} — {best.detail}")
