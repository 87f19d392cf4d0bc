"""`kvprobe providers [MODEL]`: the caching rules that apply, and where each came from; `--check`: whether
the registry is current (rules older than N days, models in a log that no rule covers)."""
from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer

from kvprobe.catalog import ModelRules, ProviderCatalog, load_catalog, load_platforms
from kvprobe.cli.common import fail, out, print_json, user_errors
from kvprobe.cli.tables import Col, print_table
from kvprobe.errors import InputError
from kvprobe.registry_check import DEFAULT_MAX_AGE_DAYS, RegistryCheck, check_registry
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


def _views(model: str | None, provider: str | None, platform: str | None) -> list[ModelRules]:
    platforms = load_platforms()
    if platform is not None and platform not in platforms:
        raise InputError(f"unknown platform {show(platform)}: expected one of {', '.join(platforms)}",
                         field="--platform")
    serving = platforms.get(platform) if platform else None
    return [cat.for_model(model, platform, serving if serving and cat.provider in serving.serves else None)
            for cat in _select(model, provider)]


def _title(view: ModelRules, model: str | None) -> str:
    where = f" on {view.platform}" if view.platform and view.platform != view.provider else ""
    if not model:
        return view.provider + where
    family = view.family or f"not listed: {view.fallback}"
    extra = f" + {view.platform_family}" if view.platform_family else ""
    return f"{view.provider}{where} · {model} → {family}{extra}"


def providers(
    model: Annotated[str | None, typer.Argument(help="A model id, e.g. claude-sonnet-4-5",
                                                                      metavar="MODEL")] = None,
    provider: Annotated[str | None, typer.Option("--provider", metavar="NAME",
                                                                           help="Provider, when the model name is ambiguous")] = None,
    platform: Annotated[str | None, typer.Option("--platform", metavar="NAME",
                                                 help="Show the rules as served by a platform: bedrock, vertex, "
                                                      "openrouter")] = None,
    check: Annotated[bool, typer.Option("--check", help="Check the registry instead: rules older than --days "
                                        "and models in --log that no rule covers; exit 1 when any")] = False,
    days: Annotated[int, typer.Option("--days", metavar="N", help="With --check: the age in days past which "
                                      "a rule is stale")] = DEFAULT_MAX_AGE_DAYS,
    logs: Annotated[list[str] | None, typer.Option("--log", metavar="PATH", help="With --check: a trace or "
                                                   "agent log (file or directory) whose models must be "
                                                   "covered; repeatable")] = None,
    as_of: Annotated[str | None, typer.Option("--as-of", metavar="DATE", help="With --check: the day ages "
                                              "are counted to (YYYY-MM-DD) [default: today]")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Show the provider caching rules that apply to a model, with source and date.

    Example: kvprobe providers claude-sonnet-4-5
             kvprobe providers --check --log traces/ --days 90
    """
    if check:
        _check(days, logs or [], as_of, json_out)
        return
    with user_errors():
        views = _views(model, provider, platform)
    if json_out:
        print_json([{"provider": v.provider, "platform": v.platform, "model": v.model, "family": v.family,
                     "platform_family": v.platform_family, "known_model": v.known_model, "fallback": v.fallback,
                     "rules": {r.name: {"value": r.value, "source": r.source, "checked": r.checked.isoformat(),
                                        "alternatives": list(r.alternatives), "scope": r.scope}
                               for r in v.rules.values()}} for v in views])
        return
    cols = (Col("rule"), Col("value", wrap=True), Col("alternatives", wrap=True, drop=1), Col("checked", drop=2),
            Col("source", wrap=True, least=24))
    for view in views:
        rows = [[rule.name, show(rule.value, None, quote=False),
                 ", ".join(show(a, None, quote=False) for a in rule.alternatives), rule.checked.isoformat(),
                 rule.source] for rule in view.rules.values()]
        print_table(_title(view, model), cols, rows)


def _check(days: int, logs: list[str], as_of: str | None, json_out: bool) -> None:
    if days < 0:
        fail(f"field '--days': expected 0 or more, got {days}")
    try:
        day = dt.date.fromisoformat(as_of) if as_of else None
    except ValueError:
        fail(f"field '--as-of': expected YYYY-MM-DD, got {show(as_of)}")
    with user_errors():
        records = _records(logs) if logs else []
        result = check_registry(days, day, records)
    if json_out:
        print_json(result.to_json())
    else:
        _render_check(result)
    if not result.ok:
        raise typer.Exit(1)


def _records(logs: list[str]) -> list:
    from kvprobe.importers import load_any

    return list(load_any(logs))


def _render_check(result: RegistryCheck) -> None:
    if result.stale:
        print_table(f"rules checked more than {result.max_age_days} days before {result.as_of}",
                    (Col("file"), Col("scope", wrap=True), Col("rule"), Col("checked"),
                     Col("age", justify="right")),
                    [[s.file, s.scope, s.rule, s.checked.isoformat(), f"{s.age_days} d"] for s in result.stale])
    if result.uncovered:
        print_table("models no rule covers", (Col("provider"), Col("platform"), Col("model"),
                                              Col("requests", justify="right"), Col("fell back to", wrap=True)),
                    [[u.provider, u.platform or "-", u.model, f"{u.requests:,}", u.fell_back_to]
                     for u in result.uncovered])
    verdict = "ok" if result.ok else "out of date"
    out.print(f"registry {verdict}: {len(result.stale)} of {result.rules_checked} rules older than "
              f"{result.max_age_days} days; {len(result.uncovered)} of {result.models_seen} models in the logs "
              "not covered")
