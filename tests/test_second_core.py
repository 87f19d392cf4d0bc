"""The report on two cores: diagnoses computed in a forked child and policy prices on the local pool
(`kvprobe.run`) give the report one process computes alone, to the byte, and a child or worker that dies,
fails or stops costs only time.

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
    return _report_json(records)


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
    assert len(forks) >= 2  # the diagnoses and the policy prices each ran beside this process
    assert json.loads(one_process)["fixes"], "the fleet has policies to price"
    assert all(_reaped(pid) for pid in forks)


def test_a_child_that_dies_or_fails_changes_nothing(records, one_process, forks, monkeypatch):
    parent = os.getpid()
    real_summarize, real_diagnosed = parallel.summarize, report_module._diagnosed

    def dies_in_child(pricer, policies):
        if os.getpid() != parent:
            os._exit(3)  # killed in the middle of its share: its sets are priced here
        return real_summarize(pricer, policies)

    def fails_in_child(results):
        if os.getpid() != parent:
            raise RuntimeError("diagnosis failed in the child")
        return real_diagnosed(results)
    monkeypatch.setattr(parallel, "summarize", dies_in_child)
    monkeypatch.setattr(report_module, "_diagnosed", fails_in_child)
    assert _report_json(records) == one_process
    assert len(forks) >= 2 and all(_reaped(pid) for pid in forks)


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


def test_a_stopped_child_costs_time_not_the_report(records, one_process, forks, monkeypatch, deadline):
    """SIGSTOP on the child that diagnoses and on the workers that price: the report completes, computed here,
    and equals the one-process one; no stopped process is left behind."""
    parent = os.getpid()
    real_summarize, real_diagnosed = parallel.summarize, report_module._diagnosed

    def stops_in_child(real):
        def stopped(*args):
            if os.getpid() != parent:
                os.kill(os.getpid(), signal.SIGSTOP)
            return real(*args)
        return stopped
    monkeypatch.setattr(parallel, "summarize", stops_in_child(real_summarize))
    monkeypatch.setattr(report_module, "_diagnosed", stops_in_child(real_diagnosed))
    assert _report_json(records) == one_process
    assert len(forks) >= 2 and all(_reaped(pid) for pid in forks)
