"""kvprobe: profile and audit what AI agents pay for prompt caching.

The same analysis as the command line, from Python:

    import kvprobe
    rep = kvprobe.analyse("trace.jsonl")      # what `kvprobe report` prints: rep.to_json() is its --json
    rep.totals["cost_usd"], rep.fixes          # totals, and the fixes with what each saves
    data = kvprobe.load(rep)                   # every table as DataFrames (or kvprobe.load("trace.jsonl"))
    data.to_pandas("diagnoses")                # requests, sessions, blocks, block_costs, diagnoses, fixes, ...
    data.records("fixes")                      # the same rows as dataclasses

Nothing heavy is imported until used: `import kvprobe` loads neither pandas nor the analysis.
"""

__all__ = ["InputError", "KvprobeError", "Loaded", "PriceBook", "Report", "__version__", "analyse", "load"]

_WHERE = {"load": "kvprobe.db.data", "Loaded": "kvprobe.db.data", "analyse": "kvprobe.api",
          "Report": "kvprobe.report", "PriceBook": "kvprobe.pricing", "InputError": "kvprobe.errors",
          "KvprobeError": "kvprobe.errors"}


def __getattr__(name: str):  # noqa: ANN202 - module attributes, imported on first use
    if name == "__version__":  # from the installed metadata (pyproject's version), read only when asked
        from importlib.metadata import version

        return version("kvprobe")
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'kvprobe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
