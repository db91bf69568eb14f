"""Groups placed by node, and a lost node: the plan over many layouts, the coordinator in-process,
and real `mpiexec` runs on simulated nodes (`-launcher fork -hosts`)."""
from __future__ import annotations

import heapq
import itertools
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import mpiopt
from conftest import MPIEXEC, mpiexec, run_cli
from mpiopt.analysis import timeline
from mpiopt.coordinator import Coordinator
from mpiopt.search import make_searcher
from mpiopt.transport import plan_groups, pulsing_ranks, speaking_order
from mpiopt.trial import TrialStatus
from test_coordinator import SimTransport, cfg  # noqa: F401  (the fixture)


def layout(sizes: list[int]) -> list[int]:
    """Each world rank's node (its lowest world rank), for nodes holding `sizes` ranks in turn."""
    out, start = [], 0
    for n in sizes:
        out += [start] * n
        start += n
    return out


LAYOUTS = [[n] * k for n, k in itertools.product([1, 2, 3, 4, 5, 8], [1, 2, 3, 4, 7])] + \
          [[5, 4, 4, 4], [3, 4, 4], [2, 8, 3], [9, 1, 1], [4, 4, 2, 6]]


@pytest.mark.parametrize("sizes", LAYOUTS, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("group_size", [1, 2, 3, 4, 6, 8])
def test_every_layout_gets_groups_that_respect_its_nodes(sizes, group_size):
    nodes = layout(sizes)
    if len(nodes) < 2:
        return
    plan = plan_groups(len(nodes), group_size, nodes)
    members = sorted(r for g in plan.groups for r in g)
    assert members == list(range(1, len(nodes)))  # every rank but the coordinator, once
    per_node = {}
    for rank in range(1, len(nodes)):
        per_node.setdefault(nodes[rank], []).append(rank)
    if group_size <= max(len(r) for r in per_node.values()):
        for g in plan.groups:  # no group straddles nodes, and each node has as many groups as fit
            assert len({nodes[r] for r in g}) == 1, (plan.groups, nodes)
        for node, ranks in per_node.items():
            mine = [g for g in plan.groups if nodes[g[0]] == node]
            assert len(mine) == max(1, len(ranks) // group_size)
            assert all(len(g) >= group_size for g in mine) or len(mine) == 1
    else:
        for g in plan.groups:  # a group larger than any node is made of whole nodes
            assert sorted(g) == sorted(r for n in {nodes[r] for r in g} for r in per_node[n])
        assert sum(len(g) < group_size for g in plan.groups) <= 1
    for g in plan.groups:  # the leader is the group's lowest rank
        assert g[0] == min(g)
    assert set(pulsing_ranks(plan).values()) == set(range(len(plan.groups)))


def test_the_usual_gpu_layout_and_one_node_as_before():
    # 16 nodes of 4 GPUs, the coordinator a fifth rank on the first node: one group a node
    plan = plan_groups(65, 4, [0] * 5 + [5 + 4 * (i // 4) for i in range(60)])
    assert plan.groups[0] == (1, 2, 3, 4) and len(plan.groups) == 16
    assert all(len(g) == 4 and len({plan.nodes[r] for r in g}) == 1 for g in plan.groups)
    # the case: 4 ranks a node, -n 12, groups of 4: no group straddles any more
    assert plan_groups(12, 4, layout([4, 4, 4])).groups == ((1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11))
    assert plan_groups(12, 4).groups == ((1, 2, 3, 4, 5, 6), (7, 8, 9, 10, 11))  # no layout: one node
    assert plan_groups(12, 8, layout([4, 4, 4])).groups == ((1, 2, 3), (4, 5, 6, 7, 8, 9, 10, 11))
    assert pulsing_ranks(plan_groups(12, 8, layout([4, 4, 4]))) == {1: 0, 4: 1, 8: 1}


def test_the_ranks_off_the_coordinator_s_node_speak_first_of_its_loss():
    # one line says the coordinator is lost: those on its node died with it
    assert speaking_order(plan_groups(5, 1, layout([3, 2]))) == [3, 4, 1, 2]
    assert speaking_order(plan_groups(12, 8, layout([4, 4, 4]))) == [4, 8, 1]
    assert speaking_order(plan_groups(5, 1)) == [1, 2, 3, 4]  # one node: the coordinator's process alone died


def test_messages_name_a_node_by_its_number_and_its_host():
    hosts = ["gpu001"] * 4 + ["gpu007"] * 4
    plan = plan_groups(8, 4, layout([4, 4]), hosts)
    assert plan.groups == ((1, 2, 3), (4, 5, 6, 7)) and plan.nodes_of(1) == [1]
    assert plan.node_name(5) == "node 1 (gpu007)" and plan.node_name(0) == "node 0 (gpu001)"
    assert plan_groups(8, 4, layout([4, 4])).node_name(5) == "node 1"  # no host names: the number alone
    assert plan_groups(1, 4, None, ["gpu001"]).hosts is None  # one process: no MPI, no layout


class NodeLoss(SimTransport):
    """Group `dead` stops answering at simulated time `at`, as a group on a node that died."""

    watch_s = 0.0  # its groups can be lost: the coordinator looks at every message

    def __init__(self, durations, dead: int, at: float):
        super().__init__(durations)
        self.dead, self.at, self.gone = dead, at, False

    def recv_message(self, timeout=None):
        while self.heap and self.heap[0][2] == self.dead and self.heap[0][0] > self.at:
            heapq.heappop(self.heap)  # the dead group's result never arrives
            self.gone = True
        return super().recv_message(timeout) if self.heap else None  # every group dead: nothing comes

    def lost_groups(self):
        return {self.dead: ("no word from world rank 3 for 8 s", 8.0)} if self.gone else {}


def test_a_lost_group_s_trials_run_again_on_the_others(cfg):  # noqa: F811
    t = NodeLoss([1.0, 1.3, 0.7], dead=1, at=5.0)
    c = cfg()
    summary = Coordinator(c, make_searcher(c.space, c.search), t).run()
    assert sorted(summary.trials) == list(range(20))  # the budget, every trial once
    assert all(r.status == TrialStatus.COMPLETED for r in summary.trials.values())
    assert summary.retired == [1] and summary.lost == [1] and summary.exit_code == 1
    assert summary.stopped.startswith("group 1 lost its ranks (a node died?) and its trials ran again")
    lost_trial = next(n for k, g, n in t.log if k == "send" and g == 1 and (("recv", 1, n) not in t.log))
    assert summary.trials[lost_trial].group != 1  # another group ran it


def test_a_search_whose_every_group_was_lost_says_so(cfg):  # noqa: F811
    c = cfg()
    summary = Coordinator(c, make_searcher(c.space, c.search), NodeLoss([1.0], dead=0, at=5.0)).run()
    assert summary.lost == [0] and summary.exit_code == 1
    assert summary.stopped == "every group was lost with its node (their ranks went silent)"


# -- real mpiexec runs on simulated nodes ----------------------------------------------------------
MPIOPT = str(MPIEXEC.parent / "mpiopt")  # the proxies do not search the venv's PATH

SLEEPY = """
name: {name}
objective: {{function: objectives.py:branin}}
parameters:
  x: {{type: real, low: -5.0, high: 10.0}}
  y: {{type: real, low: 0.0, high: 15.0}}
search: {{initial_points: 4, trials: {trials}, seed: 0}}
training: {{group_size: {group_size}}}
"""


def on_nodes(hosts: str, n: int, args, *, cwd, extra=(), env=None, **kw) -> subprocess.Popen:
    """`mpiexec -launcher fork -hosts HOSTS -n N mpiopt ARGS`, started (not waited for)."""
    cmd = [*mpiexec(n, hosts, extra), MPIOPT, *map(str, args)]
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True, **kw)


def kill_node(job: subprocess.Popen, proxy: int) -> list[int]:
    """SIGKILL the ranks of the `proxy`-th host (its proxy stays, as a node's kernel would not)."""
    out = subprocess.run(["pgrep", "-P", str(job.pid), "-f", f"hydra_pmi_proxy.*--proxy-id {proxy}$"],
                         capture_output=True, text=True)
    proxies = [int(p) for p in out.stdout.split()]
    ranks = [int(p) for q in proxies
             for p in subprocess.run(["pgrep", "-P", str(q)], capture_output=True, text=True).stdout.split()]
    for pid in ranks:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # gone already: the job may tear down as soon as one rank dies
            pass
    return ranks


def finished(run) -> int:
    journal = run / "trials.jsonl"
    return journal.read_text().count('"event":"finish"') if journal.exists() else 0


def wait_until(test, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.2)


def search_then_lose_a_node(space, run, cwd, node: int, after: int) -> tuple[subprocess.Popen, float, list[int]]:
    """A search on nodes A (3 ranks: the coordinator and groups 0, 1) and B (groups 2, 3), survivors
    kept alive, whose node number `node` loses its ranks once `after` trials finished: (the job,
    when, the ranks killed). Groups give up on a silent coordinator after 10 s, not 30."""
    job = on_nodes("nodeA:3,nodeB:2", 5, ["search", space], cwd=cwd, extra=["-disable-auto-cleanup"],
                   env={"MPIOPT_TEST_SLEEP": "0.3", "MPIOPT_COORDINATOR_SILENT_S": "10"})
    wait_until(lambda: finished(run) >= after, 120)
    return job, time.monotonic(), kill_node(job, node)


def ended_within(job: subprocess.Popen, since: float, limit_s: float) -> tuple[str, str]:
    """The job's output once it has ended, at most `limit_s` after `since`: a hang guard (the wait
    gives up there and the test fails, the job's session killed), not a speed target."""
    try:
        return job.communicate(timeout=max(0.0, limit_s - (time.monotonic() - since)))
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
        raise AssertionError(f"the job had not ended {limit_s:g} s after its node was lost: it hangs") from None


@pytest.mark.mpi
def test_check_under_mpiexec_shows_groups_that_keep_to_their_nodes(write_yaml, tmp_path):
    space = write_yaml(SLEEPY.format(name="layout", trials=4, group_size=4))
    job = on_nodes("nodeA:4,nodeB:4,nodeC:4", 12, ["check", space], cwd=tmp_path)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    assert "12 ranks on 3 nodes: 1 coordinator (rank 0) + 2 groups of 4 ranks, 1 group of 3 ranks" in out
    assert "group 0: world ranks 1-3 on node 0" in out and "group 2: world ranks 8-11 on node 2" in out
    assert re.search(r"node 1 \(\S+\): world ranks 4-7", out) and "MPI         MPICH" in out  # the host named
    assert out.count("space.yaml: OK") == 1  # printed once, by world rank 0
    # GPUs: every node deals its own, as the search does
    job = on_nodes("nodeA:4,nodeB:4,nodeC:4", 12, ["check", write_yaml(SLEEPY.format(name="gpus", trials=4,
                                                                                        group_size=1))],
                   cwd=tmp_path, extra=["-genv", "CUDA_VISIBLE_DEVICES", "0,1,2,3"])
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    assert "the node of world rank 0 (" in out and "GPU 0: rank 1; GPU 1: rank 2; GPU 2: rank 3; " in out
    assert "GPU 0: rank 8; GPU 1: rank 9; GPU 2: rank 10; GPU 3: rank 11" in out


@pytest.mark.mpi
def test_a_function_with_comm_on_a_group_that_spans_nodes(write_yaml, tmp_path):
    # groups of 3 on nodes of 2 take whole nodes: 4 ranks on nodes 1 and 2. Its failure notices
    # were received from any source, which MPICH over UCX lost between nodes: the group waited
    # for them for ever
    space = write_yaml(SLEEPY.format(name="span", trials=8, group_size=3).replace(":branin}", ":with_comm}"))
    p = run_cli(["search", space], cwd=tmp_path, np=6, hosts="nodeA:2,nodeB:2,nodeC:2", timeout=120)
    assert p.returncode == 0, p.stderr
    assert "6 ranks on 3 nodes: 1 coordinator (rank 0) + 1 group of 4 ranks" in p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "span")
    assert set(df.status) == {"completed"} and 4 in set(df.ranks)


@pytest.mark.mpi
def test_a_job_that_ends_with_an_error_leaves_no_shared_memory_on_any_node():
    # rank 0's MPI_Abort kills the other nodes' ranks before MPICH removes their /dev/shm files
    code = ("from mpi4py import MPI; from mpiopt import launch; w = MPI.COMM_WORLD; "
            "files = [l.split()[-1] for l in open('/proc/self/maps') if ' /dev/shm/mpich_shm_' in l "
            "and not l.endswith('(deleted)\\n')]; print('mapped', *files, flush=True); "
            "raise SystemExit(launch.end_rank(w, 2))")
    p = subprocess.run([*mpiexec(4, "nodeA:2,nodeB:2"), sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    mapped = {f for line in p.stdout.splitlines() if line.startswith("mapped") for f in line.split()[1:]}
    assert len(mapped) == 2, p.stdout  # one file a node
    assert not [f for f in mapped if os.path.exists(f)], mapped


@pytest.mark.mpi
def test_a_lost_node_costs_only_its_groups(write_yaml, tmp_path):
    space = write_yaml(SLEEPY.format(name="lost", trials=80, group_size=1))
    run = tmp_path / "runs" / "lost"
    job, killed_at, killed = search_then_lose_a_node(space, run, tmp_path, node=1, after=10)
    assert len(killed) == 2
    out, err = ended_within(job, killed_at, 170)  # the end does not hang on the dead ranks
    assert job.returncode == 1, err
    lost = [line for line in err.splitlines() if "lost: no word from world rank" in line]
    assert len(lost) == 2 and "group 2 lost" in lost[0] and "group 3 lost" in lost[1]
    assert all(re.search(r"no word from world rank \d+ on node 1 \(\S+\) for \d+ s", line) for line in lost), lost
    assert "error: groups 2, 3 lost their ranks (a node died?) and their trials ran again on other groups" in err
    assert timeline(mpiopt.load_timeline(run))[1]["lost"] == [2, 3]  # their time counted while they lived
    df = mpiopt.load_results(run)
    assert sorted(df.trial) == list(range(80)) and set(df.status) == {"completed"}  # every trial, once
    assert set(df[df.end > df.end.min()].group) >= {0, 1}


@pytest.mark.mpi
def test_without_survivors_the_job_ends_and_resume_loses_nothing(write_yaml, tmp_path):
    space = write_yaml(SLEEPY.format(name="gone", trials=40, group_size=2))
    run = tmp_path / "runs" / "gone"
    job = on_nodes("nodeA:3,nodeB:2", 5, ["search", space], cwd=tmp_path, env={"MPIOPT_TEST_SLEEP": "0.3"})
    wait_until(lambda: finished(run) >= 6, 120)
    kill_node(job, 1)
    job.communicate(timeout=60)
    assert job.returncode != 0
    before = mpiopt.load_results(run)
    done = set(before.trial[before.status == "completed"])
    job = on_nodes("nodeA:3,nodeB:2", 5, ["search", space, "--resume"], cwd=tmp_path,
                   env={"MPIOPT_TEST_SLEEP": "0.05"})
    _, err = job.communicate(timeout=180)
    assert job.returncode == 0, err
    df = mpiopt.load_results(run)
    assert sorted(df.trial) == list(range(40)) and set(df.status) == {"completed"}
    assert done <= set(df.trial)  # nothing finished was lost


@pytest.mark.mpi
def test_a_search_under_open_mpi(write_yaml, tmp_path):
    """Open MPI's own mpiexec and library (scripts/openmpi_env.sh makes the environment; CI sets
    MPIOPT_OPENMPI to it): no MPICH involved, every trial recorded, the library named by check."""
    env_dir = os.environ.get("MPIOPT_OPENMPI")
    if not env_dir:
        pytest.skip("no Open MPI environment (scripts/openmpi_env.sh DIR; MPIOPT_OPENMPI=DIR)")
    bin_dir = os.path.join(env_dir, "bin")
    space = write_yaml(SLEEPY.format(name="ompi", trials=12, group_size=1))
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"], "MPIOPT_TEST_SLEEP": "0.05"}
    env.pop("VIRTUAL_ENV", None)
    mpiexec = [os.path.join(bin_dir, "mpiexec"), "--oversubscribe", "-n", "3"]
    if os.geteuid() == 0:
        mpiexec.insert(1, "--allow-run-as-root")
    check = subprocess.run([*mpiexec, os.path.join(bin_dir, "mpiopt"), "check", str(space)], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr
    assert "MPI         Open MPI v" in check.stdout
    p = subprocess.run([*mpiexec, os.path.join(bin_dir, "mpiopt"), "search", str(space)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "ompi")
    assert sorted(df.trial) == list(range(12)) and set(df.status) == {"completed"} and set(df.group) == {0, 1}


@pytest.mark.mpi
def test_the_coordinator_s_node_lost_ends_the_job_and_resume_covers_it(write_yaml, tmp_path):
    space = write_yaml(SLEEPY.format(name="head", trials=60, group_size=1))
    run = tmp_path / "runs" / "head"
    # the coordinator's node: the survivors must not wait for a task for ever
    job, killed_at, _ = search_then_lose_a_node(space, run, tmp_path, node=0, after=6)
    _, err = ended_within(job, killed_at, 40)
    assert job.returncode != 0
    assert err.count("no word from the coordinator (world rank 0) for 10 s") == 1 and "--resume" in err, err
    done = set(mpiopt.load_results(run).query("status == 'completed'").trial)
    again = on_nodes("nodeA:3,nodeB:2", 5, ["search", space, "--resume"], cwd=tmp_path,
                     env={"MPIOPT_TEST_SLEEP": "0.05"})
    _, err = again.communicate(timeout=180)
    assert again.returncode == 0, err
    df = mpiopt.load_results(run)
    assert sorted(df.trial) == list(range(60)) and set(df.status) == {"completed"} and done <= set(df.trial)


@pytest.mark.mpi
def test_the_end_of_a_search_leaves_no_pulse_unreceived(tmp_path):
    """MPICH kills a rank whose message is still unreceived at MPI_Finalize: a search that
    finished would end its job with exit code 9."""
    script = os.path.join(os.path.dirname(__file__), "last_pulse.py")
    p = subprocess.run([str(MPIEXEC), "-n", "3", sys.executable, script], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    left = dict(re.findall(r"rank (\d): (\d+) pulses left", p.stdout))  # lines of ranks may interleave
    assert left == {"0": "0", "1": "0", "2": "0"}, p.stdout
