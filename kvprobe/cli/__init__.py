"""The kvprobe command line: a thin layer over the library (one module per command)."""
from __future__ import annotations

import typer

from kvprobe.cli import (capture_cmd, compare_cmd, db_cmd, diff_cmd, fix_cmd, gate_cmd, html_cmd, import_cmd,
                         plot_cmd, probe_cmd, providers_cmd, replay_cmd, report_cmd, serve_cmd, usage_cmd)

app = typer.Typer(
    name="kvprobe",
    help="Profile and audit what AI agents pay for prompt caching.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("diff")(diff_cmd.diff)
app.command("providers")(providers_cmd.providers)
app.command("report")(report_cmd.report)
app.command("fix")(fix_cmd.fix)
app.command("compare")(compare_cmd.compare_cmd)
app.command("gate")(gate_cmd.gate)
app.command("baseline")(gate_cmd.baseline_cmd)
app.command("run-probe")(probe_cmd.run_probe_cmd)
app.command("capture", context_settings=capture_cmd.CONTEXT)(capture_cmd.capture)
app.command("import")(import_cmd.import_)
app.command("usage")(usage_cmd.usage)
app.command("serve")(serve_cmd.serve)
app.command("replay")(replay_cmd.replay)
app.command("html")(html_cmd.html)
app.command("plot")(plot_cmd.plot)
app.add_typer(db_cmd.app, name="db")
app.command("sql")(db_cmd.sql)


def main() -> None:
    app()
