"""`kvprobe fix TRACE -o fixed.jsonl`: write the trace with the proposed fixes applied, to inspect or re-report."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from kvprobe.cli.common import Force, out, output_path, print_json, user_errors
from kvprobe.errors import InputError
from kvprobe.pricing import PriceBook
from kvprobe.report import records_from
from kvprobe.trace import write_trace
from kvprobe.whatif.evaluate import evaluate
from kvprobe.whatif.policies import APPLY_ORDER
from kvprobe.wording import show


def fix(
    trace: Annotated[Path, typer.Argument(help="Trace file (JSONL)")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the fixed trace")],
    kind: Annotated[list[str] | None, typer.Option("--kind", help=f"Only these fix kinds: {', '.join(APPLY_ORDER)}")] = None,
    price_file: Annotated[Path | None, typer.Option("--price-file", help="TOML/JSON price overrides")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable summary")] = False,
    force: Force = False,
) -> None:
    """Apply every fix that pays (or only --kind ones) and write the transformed trace.

    The output carries no logged usage (every record is now a prediction) and each record carries the block
    sizes it was priced on (`block_tokens`), so `kvprobe report FIXED` against `kvprobe report TRACE`
    reproduces the savings. Example: kvprobe fix traces/sample_session.jsonl -o fixed.jsonl
    """
    with user_errors():
        output = output_path(output, [trace, *([price_file] if price_file else [])], force=force)
        unknown = set(kind or ()) - set(APPLY_ORDER)
        if unknown:
            raise InputError(f"unknown fix kind {show(sorted(unknown)[0])}; expected one of {', '.join(APPLY_ORDER)}",
                             field="--kind")
        records = list(records_from([trace], []))
        if not any(r.request is not None for r in records):
            raise InputError(f"{len(records):,} records and none has a request body: there is nothing to fix (a "
                             "usage-only log such as a Claude Code transcript; `kvprobe report` explains its misses "
                             "from the usage alone)", file=str(trace))
        result = evaluate(records, PriceBook.from_file(price_file), set(kind) if kind else None)
        count = write_trace(output, result.written_records())
    base = sum(r.input_equivalent for r in result.baseline)
    after = sum(r.input_equivalent for r in result.fixed)
    usd = [sum(r.cost_usd for r in rs) if all(r.cost_usd is not None for r in rs) else None
           for rs in (result.baseline, result.fixed)]
    summary = {"output": str(output), "records": count, "fixes": [c.to_json() for c in result.fixes],
               "alternatives": [c.to_json() for c in result.alternatives],
               "input_equivalent_tokens": {"before": round(base, 1), "after": round(after, 1)},
               "cost_usd": {"before": None if usd[0] is None else round(usd[0], 6),
                            "after": None if usd[1] is None else round(usd[1], 6)}}
    if json_out:
        print_json(summary)
        return
    for c in result.fixes:
        out.print(Text.assemble((c.kind, "magenta"), f" ({c.reach}): {c.detail}"))
    for c in result.alternatives:
        out.print(Text(f"not written: {c.kind} would save {c.saving_input_equivalent_tokens:,.0f} alone, less than "
                       f"{' + '.join(c.extra.get('instead_of', []))} chosen for the same misses", style="dim"))
    out.print(f"wrote {count} records to {output}: {base:,.0f} → {after:,.0f} input-equivalents (predicted)")
