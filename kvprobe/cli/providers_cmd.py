"""`kvprobe providers [MODEL]`: the caching rules that apply, and where each came from."""
from __future__ import annotations

from typing import Annotated

import typer

from kvprobe.catalog import ProviderCatalog, load_catalog
from kvprobe.cli.common import print_json, user_errors
from kvprobe.cli.tables import Col, print_table
from kvprobe.errors import InputError
from kvprobe.request.detect import _by_model
from kvprobe.wording import show


def _select(model: str | None, provider: str | None) -> list[ProviderCatalog]:
    """The catalogs asked for: the named provider, the model's provider, or (neither given) all of them."""
    catalogs = load_catalog()
    if provider is not None and provider not in catalogs:
        raise InputError(f"unknown provider {show(provider)}: expected one of {', '.join(catalogs)}",
                         field="--provider")
    name = provider or (_by_model(model) if model else None)
    if model and name is None:
        prefixes = ", ".join(p for cat in catalogs.values() for p in cat.model_prefixes)
        raise InputError(f"no provider lists a model like {show(model)} (model names start with {prefixes}); "
                         "pass --provider to see that provider's defaults", field="MODEL")
    return [catalogs[name]] if name else list(catalogs.values())


def providers(
    model: Annotated[str | None, typer.Argument(help="A model id, e.g. claude-sonnet-4-5",
                                                                      metavar="MODEL")] = None,
    provider: Annotated[str | None, typer.Option("--provider", metavar="NAME",
                                                                           help="Provider, when the model name is ambiguous")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Show the provider caching rules that apply to a model, with source and date.

    Example: kvprobe providers claude-sonnet-4-5
    """
    with user_errors():
        views = [cat.for_model(model) for cat in _select(model, provider)]
    if json_out:
        print_json([{"provider": v.provider, "model": v.model, "family": v.family, "known_model": v.known_model,
                     "rules": {r.name: {"value": r.value, "source": r.source, "checked": r.checked.isoformat(),
                                        "alternatives": list(r.alternatives), "scope": r.scope}
                               for r in v.rules.values()}} for v in views])
        return
    cols = (Col("rule"), Col("value", wrap=True), Col("alternatives", wrap=True, drop=1), Col("checked", drop=2),
            Col("source", wrap=True, least=24))
    for view in views:
        title = f"{view.provider}" + (f" · {model} → {view.family or 'not listed: provider defaults'}" if model else "")
        rows = [[rule.name, show(rule.value, None, quote=False),
                 ", ".join(show(a, None, quote=False) for a in rule.alternatives), rule.checked.isoformat(),
                 rule.source] for rule in view.rules.values()]
        print_table(title, cols, rows)
