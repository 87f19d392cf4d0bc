"""`kvprobe providers [MODEL]`: the caching rules that apply, and where each came from."""
from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from kvprobe.catalog import load_catalog
from kvprobe.cli.common import out, print_json, user_errors
from kvprobe.request.detect import _by_model


def providers(
    model: Annotated[str | None, typer.Argument(help="A model id, e.g. claude-sonnet-4-5")] = None,
    provider: Annotated[str | None, typer.Option("--provider", help="Provider, when the model name is ambiguous")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Show the provider caching rules that apply to a model, with source and date.

    Example: kvprobe providers claude-sonnet-4-5
    """
    with user_errors():
        catalogs = load_catalog()
        name = provider or (_by_model(model) if model else None)
        selected = [catalogs[name]] if name in catalogs else list(catalogs.values())
        views = [cat.for_model(model) for cat in selected]
    if json_out:
        print_json([{"provider": v.provider, "model": v.model, "family": v.family, "known_model": v.known_model,
                     "rules": {r.name: {"value": r.value, "source": r.source, "checked": r.checked.isoformat(),
                                        "alternatives": list(r.alternatives), "scope": r.scope}
                               for r in v.rules.values()}} for v in views])
        return
    for view in views:
        title = f"{view.provider}" + (f" · {model} → {view.family or 'not listed: provider defaults'}" if model else "")
        table = Table(title=title, title_justify="left")
        for col in ("rule", "value", "alternatives", "checked", "source"):
            table.add_column(col, overflow="fold")
        for rule in view.rules.values():
            table.add_row(rule.name, str(rule.value), ", ".join(map(str, rule.alternatives)),
                          rule.checked.isoformat(), rule.source)
        out.print(table)
