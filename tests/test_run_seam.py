"""The executor seam (`kvprobe.run`): the same results in unit order from the in-process backend and both local
ones (the standard pool, and the forked workers used where the system forks), a unit that raises raised in the
caller with the unit named, and a worker that dies or stops costs time, not answers.

Unit functions are top-level here, as a stage's are: the pool's workers are forked from this process and find
them by name. Each worker that must fail leaves a file behind first, so that it fails once and the run again
succeeds (or not at all, for the caller's own run of it). The unit that fails is the first: the caller takes
units from the end of the list, and the first is always a worker's.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import pytest

from kvprobe.cpus import usable_cpus
from kvprobe.run import InProcess
from kvprobe.run.forks import ForkPool
from kvprobe.run.pool import LocalPool

UNITS = [3, 1, 4, 1, 5, 9, 2, 6]
SHARED = 10
EXPECTED = [19, 11, 26, 11, 35, 91, 14, 46]  # unit * unit + SHARED, by hand
PARENT = os.getpid()

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or usable_cpus() < 2,
                                reason="needs a system that forks and two usable CPUs")


def square_plus(shared: int, unit: int) -> int:
    return unit * unit + shared


def raises_on_four(shared: int, unit: int) -> int:
    if unit == 4:
        raise ValueError("four is not allowed")
    return unit * unit + shared


def _first_time(marks: Path, unit: int) -> bool:
    """True for the first worker (never this process) to reach this unit."""
    if os.getpid() == PARENT:
        return False
    try:
        (marks / str(unit)).touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def dies_on_three(shared: tuple[int, Path], unit: int) -> int:
    if unit == 3 and _first_time(shared[1], unit):
        os._exit(7)  # killed mid-run, as by the OOM killer
    return unit * unit + shared[0]


def stops_on_three(shared: tuple[int, Path], unit: int) -> int:
    if unit == 3 and _first_time(shared[1], unit):
        os.kill(os.getpid(), signal.SIGSTOP)  # stopped, as by a debugger or ^Z: it never answers
    return unit * unit + shared[0]


def dies_every_time_in_a_worker(shared: int, unit: int) -> int:
    if unit == 3 and os.getpid() != PARENT:
        os._exit(9)
    return unit * unit + shared


def records_pid(shared: Path, unit: int) -> int:
    import time

    (shared / f"{unit}-{os.getpid()}").touch()
    time.sleep(0.002)  # (long enough that the caller and the worker both get units)
    return unit * 2


class Hung(BaseException):
    """Past any `except Exception` or `except OSError` of the code that waits."""


@pytest.fixture
def deadline():
    def hung(signum, frame):
        raise Hung("the map waited over a minute for a stopped worker")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


LOCAL = [LocalPool, ForkPool]


@pytest.mark.parametrize("executor", [InProcess(), *(kind(n) for kind in LOCAL for n in (1, 2, 3))],
                         ids=["in-process", *(f"{kind.name} {n}" for kind in LOCAL for n in (1, 2, 3))])
def test_results_come_back_in_unit_order(executor):
    assert executor.start(square_plus, UNITS, shared=SHARED).results() == EXPECTED


@pytest.mark.parametrize("executor", [InProcess(), LocalPool(2), ForkPool(2)], ids=lambda e: e.name)
def test_a_unit_that_raises_raises_in_the_caller_naming_it(executor):
    with pytest.raises(ValueError, match="four is not allowed") as caught:
        executor.start(raises_on_four, UNITS, shared=SHARED).results()
    assert "in unit 2 of 8 (4)" in caught.value.__notes__


@pytest.mark.parametrize("kind", LOCAL, ids=lambda k: k.name)
def test_a_worker_that_dies_costs_time_not_answers(kind, tmp_path):
    assert kind(2).start(dies_on_three, UNITS, shared=(SHARED, tmp_path)).results() == EXPECTED
    assert (tmp_path / "3").exists(), "a worker did die on unit 3"


@pytest.mark.parametrize("kind", LOCAL, ids=lambda k: k.name)
def test_a_unit_that_kills_every_worker_is_computed_in_the_caller(kind):
    assert kind(2).start(dies_every_time_in_a_worker, UNITS, shared=SHARED).results() == EXPECTED


def _children() -> set[int]:
    """This process's child processes, whatever forked them (/proc: the pids whose parent is this one)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid():
            out.add(int(stat.parent.name))
    return out


@pytest.mark.parametrize("kind", LOCAL, ids=lambda k: k.name)
def test_a_stopped_worker_costs_time_not_answers(kind, tmp_path, deadline):
    before = _children() | {p.pid for p in multiprocessing.active_children()}
    assert kind(2).start(stops_on_three, UNITS, shared=(SHARED, tmp_path)).results() == EXPECTED
    assert (tmp_path / "3").exists(), "a worker did stop on unit 3"
    left = (_children() | {p.pid for p in multiprocessing.active_children()}) - before
    assert left == set(), "no stopped worker is left behind"


def test_forked_workers_share_the_units_with_the_caller(tmp_path):
    """Where the system forks, the caller computes too (from the end of the list) while the workers take units
    from its front: every unit's process is recorded, each unit computed, and once (twice at most for the one
    unit where the two meet, should both claim it at the same instant)."""
    units = list(range(40))
    got = ForkPool(1).start(records_pid, units, shared=tmp_path).results()
    assert got == [u * 2 for u in units]
    marks = sorted(tmp_path.iterdir())
    by_unit = {int(m.name.split("-")[0]) for m in marks}
    assert by_unit == set(units) and len(marks) <= len(units) + 1
    pids = {m.name.split("-")[1] for m in marks}
    assert str(os.getpid()) in pids and len(pids) == 2, "both the worker and the caller computed"
    assert int(next(m for m in marks if m.name.startswith("0-")).name.split("-")[1]) != os.getpid()


def large_answer(shared: float, unit: int) -> tuple[int, float, bytes]:
    """Who computed the unit and when, and 3 MB (more than a pipe holds); the caller's units take `shared` s."""
    if os.getpid() == PARENT:
        import time

        time.sleep(shared)
    return os.getpid(), time_now(), bytes([unit]) * (3 << 20)


def time_now() -> float:
    import time

    return time.monotonic()


def test_a_worker_keeps_computing_while_its_answers_wait_for_the_caller():
    """Answers larger than the pipe: the worker keeps them and goes on to its next unit instead of waiting
    for the caller, which reads its pipe only between the units it computes itself (here one slow unit)."""
    import time

    units = list(range(6))
    began = time.monotonic()
    got = ForkPool(1).start(large_answer, units, shared=2.0).results()
    assert [answer[2][:1] for answer in got] == [bytes([u]) for u in units]
    assert all(len(answer[2]) == 3 << 20 for answer in got)
    # the caller took the last unit; the worker computed the others during its 2 s, not one per 2 s
    workers = [computed for pid, computed, _ in got if pid != PARENT]
    assert len(workers) >= 4 and all(computed < began + 2.0 for computed in workers)


def test_more_units_than_the_queue_holds_are_all_computed():
    units = list(range(300_000))  # 1.2 MB of indices: more than a pipe holds; the rest are the caller's
    assert ForkPool(2).start(square_plus, units, shared=1).results() == [u * u + 1 for u in units]


@pytest.mark.parametrize(("wanted", "resident_kb", "available_kb", "workers"), [
    (1, 536_000, 20_000_000, 1),  # a 31,500-request report on a 24 GB machine: its worker fits
    (7, 536_000, 20_000_000, 7),  # eight cores: all seven
    (7, 4_000_000, 20_000_000, 2),  # half of 20 GB holds two copies of 4 GB
    (1, 15_000_000, 8_000_000, 0),  # a 1M-request fleet: no copy fits, the stage runs in this process
    (1, 10_000_000, 20_000_000, 1),  # exactly half: fits
    (1, 10_000_001, 20_000_000, 0),  # a kilobyte over: does not
    (3, None, 20_000_000, 3), (3, 536_000, None, 3),  # no /proc: the CPUs decide
])
def test_workers_are_forked_only_where_their_copies_fit(wanted, resident_kb, available_kb, workers):
    from kvprobe.run.room import room_for

    assert room_for(wanted, resident_kb, available_kb, budget_kb=None) == workers


@pytest.mark.parametrize(("wanted", "resident_kb", "available_kb", "workers"), [
    (1, 115_000, 20_000_000, 1),  # a 3,000-request fleet's report: 115 MB and a copy of it, far within 1 GiB
    (7, 115_000, 20_000_000, 7),  # eight cores: 8 x 115 MB = 920 MB, within it
    (15, 115_000, 20_000_000, 8),  # sixteen: ten processes (1,150,000 KB) are over 1,048,576 KB, nine fit
    (1, 400_000, 20_000_000, 1),  # 31,500 requests: 800 MB together
    (3, 400_000, 20_000_000, 1),  # a second worker would take the run to 1.2 GB
    (1, 524_288, 20_000_000, 1),  # exactly half the budget: this process and one copy fill it
    (1, 524_289, 20_000_000, 0),  # a kilobyte over: no worker
    (1, 710_000, 20_000_000, 0),  # 105,006 requests (~710 MB): priced in this process alone
    (1, 400_000, 600_000, 0),  # the budget has room, the machine has not (half of 600 MB holds no copy)
    (1, 1_500_000, None, 0),  # no memory figure from the machine: the budget still counts
])
def test_the_run_keeps_within_its_memory_budget(wanted, resident_kb, available_kb, workers):
    """A worker's copy (counted as this process's resident size) and this process fit in the 1 GiB budget
    (1,048,576 KB) together, and in half the memory available."""
    from kvprobe.run.room import room_for

    assert room_for(wanted, resident_kb, available_kb, budget_kb=1_048_576) == workers


def test_the_budget_is_read_from_the_environment(monkeypatch):
    from kvprobe.run.room import MEMORY_BUDGET_MB, budget_kb

    monkeypatch.delenv("KVPROBE_MEMORY_MB", raising=False)
    assert budget_kb() == MEMORY_BUDGET_MB * 1024
    monkeypatch.setenv("KVPROBE_MEMORY_MB", "4096")
    assert budget_kb() == 4096 * 1024
    monkeypatch.setenv("KVPROBE_MEMORY_MB", "0")  # no budget: the machine's memory alone decides
    assert budget_kb() is None


def test_a_stage_runs_here_when_no_worker_fits(monkeypatch):
    import kvprobe.run as run_module
    import kvprobe.run.room as room

    monkeypatch.setattr(run_module, "usable_cpus", lambda: 4)
    monkeypatch.setenv("KVPROBE_MEMORY_MB", "0")
    monkeypatch.setattr(room, "_kb", lambda path, field: 15_000_000 if field == "VmRSS:" else 8_000_000)
    assert isinstance(run_module.current(parallel=True), InProcess)
    monkeypatch.setattr(room, "_kb", lambda path, field: 500_000 if field == "VmRSS:" else 8_000_000)
    executor = run_module.current(parallel=True)
    assert isinstance(executor, ForkPool) and executor.workers == 3
    monkeypatch.setenv("KVPROBE_MEMORY_MB", "1024")  # 500 MB and a copy fit in 1 GiB; a second copy does not
    executor = run_module.current(parallel=True)
    assert isinstance(executor, ForkPool) and executor.workers == 1
    monkeypatch.setenv("KVPROBE_MEMORY_MB", "900")
    assert isinstance(run_module.current(parallel=True), InProcess)


WORKERS_LEFT = """
import os, sys, time
from kvprobe.run.forks import ForkPool

def slow(shared, unit):
    os.write(1, f"{os.getpid()}\\n".encode())  # each worker's pid, as it takes a unit (one write: two workers'
    # lines do not interleave, as print's may where PYTHONUNBUFFERED writes the pid and the newline apart)
    time.sleep(0.5)
    return unit

run = ForkPool(2).start(slow, list(range(400)))  # 100 s of work: far past the wait below
time.sleep(0.3)
os._exit(0)  # the caller dies (killed, out of memory) with units left: nobody reads the workers' answers
"""


def test_workers_end_soon_after_their_caller_dies(tmp_path):
    """A caller that dies mid-run leaves no worker computing for long: each ends on writing its next answer."""
    import subprocess
    import sys
    import time

    script = tmp_path / "caller.py"
    script.write_text(WORKERS_LEFT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    pids = {int(p) for p in done.stdout.split()}
    assert len(pids) == 2, done.stderr
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in pids) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


class NeedsTwo(Exception):
    """Pickles, but cannot be made again from what it pickles (its constructor wants two arguments)."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(what)
        self.code = code


class HoldsALock(Exception):
    def __init__(self, what: str) -> None:
        import threading

        super().__init__(what)
        self.lock = threading.Lock()  # cannot be pickled


def raises_oddly(shared: type, unit: int) -> int:
    if unit == 3:
        raise NeedsTwo("unit three failed for a reason", 2) if shared is NeedsTwo else HoldsALock("the real reason")
    return unit


def unpicklable_on_three(shared: None, unit: int) -> object:
    import threading

    return threading.Lock() if unit == 3 and os.getpid() != PARENT else unit


@pytest.mark.parametrize("kind", [NeedsTwo, HoldsALock])
def test_an_exception_that_cannot_travel_is_raised_as_in_one_process(kind):
    """A worker's exception that cannot be pickled, or made again from its pickle, is raised by the caller's own
    run of the unit: its type and message, the unit named (not a TypeError from unpickling)."""
    with pytest.raises(kind) as caught:
        ForkPool(2).start(raises_oddly, UNITS, shared=kind).results()
    assert "in unit 0 of 8 (3)" in caught.value.__notes__


def test_a_result_that_cannot_travel_is_computed_in_the_caller():
    got = ForkPool(2).start(unpicklable_on_three, UNITS).results()
    assert got == UNITS  # unit 3 computed here, where it returns the unit


def test_a_workers_exception_says_where_it_was_raised():
    with pytest.raises(ValueError) as caught:
        ForkPool(2).start(raises_on_four, [4, 1, 1, 1, 1, 1, 1, 1], shared=SHARED).results()
    notes = "\n".join(caught.value.__notes__)
    assert "in unit 0 of 8 (4)" in notes
    assert "in a forked worker" in notes and "raises_on_four" in notes  # the worker's traceback, to the line


def forks_a_sleeper_then_dies(shared: None, unit: int) -> int:
    if unit == 3 and os.getpid() != PARENT:
        if os.fork() == 0:  # a process of the unit's own, holding the worker's pipe open
            import time

            time.sleep(20)
            os._exit(0)
        os._exit(9)
    return unit


def test_a_worker_that_dies_while_its_pipe_stays_open_costs_no_wait():
    """The worker's pipe is held open by a process it started: its end is seen by the worker's exit, not by the
    pipe's (which would come after 20 s, or the stall window)."""
    import time

    start = time.monotonic()
    assert ForkPool(2).start(forks_a_sleeper_then_dies, UNITS).results() == UNITS
    assert time.monotonic() - start < 5


def test_a_stage_kept_off_the_cluster_runs_in_this_process():
    """`current(cluster=False)` where a cluster was chosen: this process (no fork beside the cluster client's
    threads); every other stage still gets the cluster."""
    import kvprobe.run as run_module

    class Remote:
        name, remote = "a cluster", True
    cluster = Remote()
    with run_module.using(cluster):
        assert run_module.current(parallel=True) is cluster
        assert isinstance(run_module.current(parallel=True, cluster=False), InProcess)
    pool = ForkPool(1)
    with run_module.using(pool):  # a local executor chosen is kept for either kind of stage
        assert run_module.current(parallel=True, cluster=False) is pool
