"""`kvprobe plot TRACE... -o timeline.png`: the report's timeline chart as a PNG (or SVG)."""
from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from kvprobe.cli.common import Force, out, output_path, print_json, user_errors
from kvprobe.cli.html_cmd import Agent, JsonOut, PriceFile, Session, Since, Title, Traces, load_report
from kvprobe.pricing import PriceBook


class Unit(str, enum.Enum):
    tokens = "tokens"
    usd = "usd"


def plot(
    traces: Traces,
    output: Annotated[Path, typer.Option("--output", "-o", help="Image to write: .png or .svg")] = Path("timeline.png"),
    session: Session = None, agent: Agent = None, since: Since = None, price_file: PriceFile = None,
    title: Title = None,
    scale: Annotated[float, typer.Option("--scale", min=0.5, max=4.0, help="PNG pixels per CSS pixel")] = 2.0,
    unit: Annotated[Unit, typer.Option("--unit", help="Bar heights: tokens (read / write / fresh) or usd (what "
                                       "each class and the output cost)")] = Unit.tokens,
    json_out: JsonOut = False,
    force: Force = False,
) -> None:
    """Draw the timeline chart of `kvprobe html` as a PNG or SVG image.

    One stacked bar per request (cache read / write / fresh; with --unit usd what each of them and the
    output cost), misses marked with their cause, idle gaps, TTL
    expiries, concurrent starts, a lane per agent.

    A .png is drawn by headless Chromium (apt-get install chromium, or set KVPROBE_CHROMIUM); a .svg needs
    nothing.

    Example: kvprobe plot traces/sample_session.jsonl -o timeline.png
    """
    from kvprobe.render import write_chart
    from kvprobe.render.page import chart_title

    with user_errors():
        output = output_path(output, [*traces, *([price_file] if price_file else [])], force=force)
        prices = PriceBook.from_file(price_file)
        rep = load_report(traces, session, agent, since, prices, fixes=False)
        width, height = write_chart(rep, output, title=chart_title(rep) if title is None else title, scale=scale,
                                    unit=unit.value, prices=prices)
    info = {"output": str(output), "requests": len(rep.results), "width": width, "height": height,
            "format": output.suffix.lower().lstrip(".")}
    if json_out:
        print_json(info)
    else:
        out.print(f"wrote {output} ({len(rep.results):,} requests, {width}x{height} px chart)")
