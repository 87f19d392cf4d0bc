"""pytest plugin for mutation runs (benchmarks/mutation.py loads it; the default suite never does).

mutmut forks each mutant's test process from the process that ran the whole selection once unmutated. What
kvprobe memoises from the rules (`ModelRules.derived`: TTL tables, multipliers, simulator settings), its rule
look-ups (`catalog._rules_for`), the compiled credential shapes (`secrets._scrubber`), the per-token prices
it keeps on disk (`pricing.DatasetCache`) and the what-if's constructor and salt memos (`whatif.reshape`) would
then come from the unmutated code, and every mutant of the code that fills them would survive unseen. Before a
mutant's tests run, all of them start empty.

KVPROBE_MUTATION_TESTS (test files, comma-separated; benchmarks/mutation.py sets it per module) narrows what
a mutant runs to those of its covering tests: every test that reports a trace calls the simulators, and a
surviving mutant would otherwise run them all.
"""
from __future__ import annotations

import gc
import os
import shutil
import tempfile
from pathlib import Path

import pytest


def _under_a_mutant() -> bool:
    return "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", "")


def pytest_collection_modifyitems(config, items):
    focus = [f for f in os.environ.get("KVPROBE_MUTATION_TESTS", "").split(",") if f]
    if not focus or not _under_a_mutant():
        return
    kept = [item for item in items if item.nodeid.split("::", 1)[0] in focus]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


@pytest.fixture(autouse=True, scope="session")
def _memos_start_empty():
    if _under_a_mutant():
        from kvprobe import catalog, pricing, secrets

        for obj in gc.get_objects():
            if type(obj) is catalog.ModelRules:
                obj.derived.clear()
        catalog._rules_for.cache_clear()
        secrets._scrubber.cache_clear()
        folder = pricing._DATASET.folder = Path(tempfile.mkdtemp(prefix="kvprobe-mutant-prices-"))
        pricing._DATASET._data, pricing._DATASET._path = None, None
        from kvprobe.whatif import reshape

        reshape._SLOTS.clear()  # clone's constructor per class
        reshape._SALTS.clear()  # level salts per parameter set
        yield
        shutil.rmtree(folder, ignore_errors=True)  # (one per mutant run: 26,000 were left behind)
        return
    yield


@pytest.fixture(autouse=True)
def _caches_start_empty_for_each_test_while_callers_are_recorded():
    """While mutmut records which tests call which function ("stats"), a cache filled by the first test hides
    every later caller: secrets._scrubber's lru_cache sits outside the trampoline (only the first test to scrub
    was seen calling _named_shapes, _shape_row, _minimal), and the on-disk price cache answers later PriceBooks
    without _period_starts, _tiers, _rates (their mutants then ran only the first pricing test, often outside
    the module's focus: "no tests"). Each test starts with both empty then."""
    if os.environ.get("MUTANT_UNDER_TEST") != "stats":
        yield
        return
    from kvprobe import pricing, secrets

    secrets._scrubber.cache_clear()
    before = pricing._DATASET.folder
    with tempfile.TemporaryDirectory(prefix="kvprobe-stats-prices-") as folder:
        pricing._DATASET.folder = Path(folder)
        pricing._DATASET._data, pricing._DATASET._path = None, None
        yield
    pricing._DATASET.folder, pricing._DATASET._data, pricing._DATASET._path = before, None, None


# Functions reached while a fixture wider than one test was set up (a module's report of a whole fleet), by
# fixture: mutmut credits them to the test being set up then, the first of the module to use it, so a mutant
# of them ran that test alone and every later test's assertions on the same report never saw it.
_REACHED_BY_FIXTURE: dict[int, set[str]] = {}


def _recording_callers() -> bool:
    return os.environ.get("MUTANT_UNDER_TEST") == "stats"


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if not _recording_callers() or fixturedef.scope == "function":
        yield
        return
    from mutmut.state import state

    outer, state()._stats = state()._stats, set()
    try:
        yield
    finally:
        reached = state()._stats
        _REACHED_BY_FIXTURE[id(fixturedef)] = set(reached)
        outer |= reached
        state()._stats = outer


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """Before mutmut credits this test with what it reached: what the wider fixtures it uses reached when
    they were set up, for whichever test that was."""
    if not _recording_callers():
        return
    from mutmut.state import state

    for defs in getattr(item, "_fixtureinfo").name2fixturedefs.values():
        for fixturedef in defs:
            state()._stats |= _REACHED_BY_FIXTURE.get(id(fixturedef), set())
