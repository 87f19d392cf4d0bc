"""`report --cluster`: a real Dask scheduler and two workers on 127.0.0.1 (the `dask scheduler` and `dask worker`
commands the `cluster` extra installs, as a team would start them) price the fixes, and the report equals the
local one byte for byte; a worker killed or stopped mid-run costs time, not answers.

Inputs: a gen_fleet fleet (benchmarks/gen_fleet.py: its own cache model, not kvprobe's) and the Claude Code
folder fixture. The local report runs in a process with another string hash seed than the cluster's workers:
a result that depended on set order (it did, in the last digit of a saving) differs here.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed", reason="the `cluster` extra is not installed")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))
from gen_fleet import generate  # noqa: E402

pytestmark = pytest.mark.cluster
CLAUDE = HERE / "fixtures" / "importers" / "claude" / "projects"
DASK = Path(sys.executable).with_name("dask")


class Cluster:
    def __init__(self, folder: Path) -> None:
        info = folder / "scheduler.json"
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        self.procs = [subprocess.Popen([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                        "--no-dashboard", "--scheduler-file", str(info)], **quiet)]
        for _ in range(2):
            self.procs.append(subprocess.Popen([str(DASK), "worker", "--scheduler-file", str(info), "--nthreads", "1",
                                                "--no-nanny", "--no-dashboard"], **quiet))
        deadline = time.monotonic() + 60
        while not (info.exists() and info.read_text().strip().endswith("}")):
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.1)
        self.address = json.loads(info.read_text())["address"]
        self.client = distributed.Client(self.address, timeout=60)
        self.client.wait_for_workers(2, timeout=120)

    def workers(self) -> dict[str, int]:
        """address -> pid of each worker (asked of them all: call it while none is stopped)."""
        return self.client.run(os.getpid)

    def add_worker(self) -> None:
        count = len(self.client.scheduler_info(n_workers=-1)["workers"])
        self.procs.append(subprocess.Popen([str(DASK), "worker", self.address, "--nthreads", "1", "--no-nanny",
                                            "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.client.wait_for_workers(count + 1, timeout=120)

    def tasks_run(self) -> int:
        """Units of kvprobe's seam the cluster has computed (tasks named kvprobe_unit-…)."""
        def count(dask_scheduler) -> int:
            prefix = dask_scheduler.task_prefixes.get("kvprobe_unit")
            return 0 if prefix is None else prefix.state_counts.get("memory", 0)
        return self.client.run_on_scheduler(count)

    def close(self) -> None:
        self.client.close()
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    made = Cluster(tmp_path_factory.mktemp("dask"))
    yield made
    made.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fleet") / "fleet.jsonl"
    generate(path, 1000)  # 1,000 main-agent requests: 8 policies priced alone, the seam's units
    return path


def _report(*args: str, env: dict[str, str] | None = None) -> bytes:
    done = subprocess.run([sys.executable, "-m", "kvprobe", "report", *args, "--json", "--what-if"],
                          capture_output=True, timeout=600, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def local_fleet(fleet) -> bytes:
    return _report(str(fleet), env={"PYTHONHASHSEED": "1"})


def test_a_fleet_on_the_cluster_equals_the_local_report(cluster, fleet, local_fleet):
    before = cluster.tasks_run()
    on_cluster = _report(str(fleet), "--cluster", cluster.address, env={"PYTHONHASHSEED": "2"})
    assert json.loads(local_fleet)["fixes"], "the fleet has fixes to price"
    assert on_cluster == local_fleet
    assert cluster.tasks_run() - before >= 5, "the policies were priced on the cluster's workers"


def test_a_claude_code_folder_on_the_cluster_equals_the_local_report(cluster):
    local = _report(str(CLAUDE))
    before = cluster.tasks_run()
    assert _report(str(CLAUDE), env={"KVPROBE_CLUSTER": cluster.address}) == local
    assert json.loads(local)["requests"], "the folder's requests were read"
    assert cluster.tasks_run() >= before  # the folder's few policies, if any, went there


def test_a_worker_killed_mid_run_costs_time_not_answers(cluster, fleet, local_fleet):
    """The first worker seen pricing a policy is killed (SIGKILL, as by the OOM killer); the scheduler gives its
    task to the other worker, and the report is the same."""
    killed: list[int] = []
    seen_tasks, pids = cluster.tasks_run(), cluster.workers()

    def kill_first_busy() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for address, keys in cluster.client.processing().items():
                if any(str(k).startswith("kvprobe_unit") for k in keys) and address in pids:
                    os.kill(pids[address], signal.SIGKILL)
                    killed.append(pids[address])
                    return
            time.sleep(0.01)
    watcher = threading.Thread(target=kill_first_busy)
    watcher.start()
    try:
        assert _report(str(fleet), "--cluster", cluster.address) == local_fleet
    finally:
        watcher.join()
    assert killed, "a worker was killed while it priced a policy"
    assert cluster.tasks_run() > seen_tasks
    cluster.add_worker()  # for the tests after this one


def test_a_stopped_worker_costs_time_not_answers(cluster, fleet, local_fleet):
    """A worker stopped mid-task (SIGSTOP) keeps its connection: the scheduler would wait minutes before
    giving its task away. Its heartbeat stops moving; past the stall window the report computes that unit."""
    stopped: list[int] = []
    pids = cluster.workers()

    def stop_first_busy() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not stopped:
            for address, keys in cluster.client.processing().items():
                if any(str(k).startswith("kvprobe_unit") for k in keys) and address in pids:
                    os.kill(pids[address], signal.SIGSTOP)
                    stopped.append(pids[address])
                    return
            time.sleep(0.01)
    watcher = threading.Thread(target=stop_first_busy)
    watcher.start()
    try:
        assert _report(str(fleet), "--cluster", cluster.address, env={"KVPROBE_STALL_S": "3"}) == local_fleet
    finally:
        watcher.join()
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    assert stopped, "a worker was stopped while it priced a policy"


def test_an_unreachable_scheduler_is_a_usage_error_naming_the_option(fleet, tmp_path):
    """No scheduler listens there: exit 2, one line naming --cluster and the address, no report written."""
    done = subprocess.run([sys.executable, "-m", "kvprobe", "report", str(fleet), "--json", "--cluster",
                           "tcp://127.0.0.1:9"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "--cluster" in done.stderr and "tcp://127.0.0.1:9" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_scheduler_killed_mid_run_costs_time_not_answers(fleet, local_fleet, tmp_path):
    """The scheduler itself dies while the policies are priced (a cluster of its own: it does not come back):
    the report computes what is left here and is the same."""
    own = Cluster(tmp_path)
    killed: list[int] = []

    def kill_scheduler_once_busy() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(str(k).startswith("kvprobe_unit") for keys in own.client.processing().values() for k in keys):
                own.procs[0].kill()
                killed.append(own.procs[0].pid)
                return
            time.sleep(0.01)
    watcher = threading.Thread(target=kill_scheduler_once_busy)
    watcher.start()
    try:
        assert _report(str(fleet), "--cluster", own.address, env={"KVPROBE_STALL_S": "3"}) == local_fleet
    finally:
        watcher.join()
        own.close()
    assert killed, "the scheduler was killed while a policy was priced"
