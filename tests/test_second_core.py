"""The report on two cores: policy prices on the seam's forked workers (`kvprobe.run`) while this process
diagnoses, and the fixed log's totals simulated there while this process builds the rest of the report, give
the report one process computes alone, to the byte; a worker that dies, fails or stops costs only time.

The fleet is test_fleet_policies' first (40 sessions, three breakers, hand figures there); the threshold that
keeps small logs in one process is lowered so that this one forks.
"""
from __future__ import annotations

import json
import os
import signal

import pytest
from test_fleet_policies import N1, fleet1_session

import kvprobe.forked as forked
import kvprobe.report as report_module
import kvprobe.whatif.parallel as parallel
from kvprobe.cpus import usable_cpus
from kvprobe.pricing import PriceBook
from kvprobe.report import build_report

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or usable_cpus() < 2,
                                reason="needs a system that forks and two usable CPUs")


def _report_json(records) -> str:
    rep = build_report([], records=records, fixes=True, prices=PriceBook())
    return json.dumps(rep.to_json(), sort_keys=True, default=str)


@pytest.fixture(scope="module")
def records():
    return [r for k in range(N1) for r in fleet1_session(k)]


@pytest.fixture(scope="module")
def one_process(records) -> str:
    """The report one process makes alone (no fork at any size: the reference the forked runs must equal)."""
    real_fork = os.fork

    def no_fork() -> int:
        raise AssertionError("the reference report forked")
    os.fork = no_fork
    saved, forked.MIN_REQUESTS = forked.MIN_REQUESTS, 10**9
    try:
        return _report_json(records)
    finally:
        os.fork, forked.MIN_REQUESTS = real_fork, saved


@pytest.fixture
def forks(monkeypatch) -> list[int]:
    """The children forked (their pids), with small logs forking too."""
    pids: list[int] = []
    real_fork = os.fork

    def recording_fork() -> int:
        pid = real_fork()
        if pid:
            pids.append(pid)
        return pid
    monkeypatch.setattr(forked, "MIN_REQUESTS", 0)
    monkeypatch.setenv("KVPROBE_MEMORY_MB", "0")  # whatever this test process holds by now (run/room.py)
    monkeypatch.setattr(os, "fork", recording_fork)
    return pids


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_forked_stages_give_the_same_report(records, one_process, forks):
    assert _report_json(records) == one_process
    assert len(forks) >= 1  # the policy prices ran beside this process
    assert json.loads(one_process)["fixes"], "the fleet has policies to price"
    assert all(_reaped(pid) for pid in forks)


def test_a_worker_that_dies_changes_nothing(records, one_process, forks, monkeypatch, tmp_path):
    parent = os.getpid()
    real_summary_of = parallel.summary_of
    died = tmp_path / "died"

    def dies_in_child(pricer, priced):
        if os.getpid() != parent:
            died.touch()
            os._exit(3)  # killed in the middle of its share: its policies are priced here
        return real_summary_of(pricer, priced)
    monkeypatch.setattr(parallel, "summary_of", dies_in_child)
    assert _report_json(records) == one_process
    assert died.exists(), "a worker did die"
    assert len(forks) >= 1 and all(_reaped(pid) for pid in forks)


def test_the_diagnoses_run_here_while_the_workers_price(records, forks, monkeypatch):
    """The report's diagnoses are this process's work while the pool prices (no process of their own), and
    they are made once, before the policies' summaries are all in."""
    parent, calls = os.getpid(), []
    real_diagnose = report_module.diagnose

    def recorded(results, reread):
        calls.append(os.getpid())
        return real_diagnose(results, reread)
    monkeypatch.setattr(report_module, "diagnose", recorded)
    rep = build_report([], records=records, fixes=True, prices=PriceBook())
    assert calls == [parent]
    assert rep.fixes and rep.misses and all(m.result.diagnoses for m in rep.misses)


class Hung(BaseException):
    """Past any `except Exception` or `except OSError` of the code that waits."""


@pytest.fixture
def deadline():
    """A report that hangs fails the test after a minute instead of hanging the suite (the old code waited for
    a stopped child forever)."""
    def hung(signum, frame):
        raise Hung("the report waited over a minute for a stopped process")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_a_stopped_child_costs_time_not_the_report(records, one_process, forks, monkeypatch, deadline, tmp_path):
    """SIGSTOP on the workers that price: the report completes, computed here, and equals the one-process one;
    no stopped process is left behind."""
    parent = os.getpid()
    real_summary_of = parallel.summary_of
    stopped_once = tmp_path / "stopped"

    def stops_in_child(real):
        def stopped(*args):
            if os.getpid() != parent:
                stopped_once.touch()
                os.kill(os.getpid(), signal.SIGSTOP)
            return real(*args)
        return stopped
    monkeypatch.setattr(parallel, "summary_of", stops_in_child(real_summary_of))
    assert _report_json(records) == one_process
    assert stopped_once.exists(), "a worker was stopped"
    assert len(forks) >= 1 and all(_reaped(pid) for pid in forks)


def test_the_fixed_totals_are_simulated_beside_the_rest_of_the_report(records, one_process, forks, monkeypatch,
                                                                      tmp_path):
    """With fixes chosen, the log with all of them applied is simulated by a worker while this process builds
    the rest of the report (attribution, bill, tasks): the report is the one-process one, to the byte; a worker
    that dies there costs time (the totals are made here)."""
    parent, made = os.getpid(), tmp_path / "made"
    real = report_module._fixed_totals

    def recorded(what_if):
        (made / str(os.getpid())).touch()
        return real(what_if)
    made.mkdir()
    monkeypatch.setattr(report_module, "_fixed_totals", recorded)
    assert _report_json(records) == one_process
    assert [int(p.name) for p in made.iterdir()] != [parent], "made by a worker"

    died = tmp_path / "died"

    def dies(what_if):
        if os.getpid() != parent:
            died.touch()
            os._exit(3)
        return real(what_if)
    monkeypatch.setattr(report_module, "_fixed_totals", dies)
    assert _report_json(records) == one_process
    assert died.exists(), "the worker did die"
    assert all(_reaped(pid) for pid in forks)
