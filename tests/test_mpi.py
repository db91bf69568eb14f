"""Real `mpiexec` runs: groups, group communicators, a failing rank, kill -9 and resume, bad input."""
from __future__ import annotations

import ast
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mpiopt
from conftest import MPIEXEC, SPACES, run_cli, two_goals_space
from mpiopt.journal import is_live
from mpiopt.transport import RETURNED_GRACE_S

pytestmark = pytest.mark.mpi

SPACE = """
name: {name}
objective: {{function: objectives.py:{fn}}}
parameters:
  x: {{type: real, low: -5.0, high: 10.0}}
  y: {{type: real, low: 0.0, high: 15.0}}
search: {{initial_points: 4, trials: {trials}, seed: 0}}
training: {{group_size: {group_size}}}
"""


def space(write_yaml, name, fn="branin", trials=10, group_size=1):
    return write_yaml(SPACE.format(name=name, fn=fn, trials=trials, group_size=group_size), f"{name}.yaml")


def test_three_ranks_two_groups(write_yaml, tmp_path):
    # trials sent ahead whether it pays or not: they wait in the group's mailbox while it works
    p = run_cli(["search", space(write_yaml, "n3")], cwd=tmp_path, np=3,
                env={"MPIOPT_TEST_SLEEP": "0.1", "MPIOPT_SEND_AHEAD": "always", "MPIOPT_LOG_LEVEL": "DEBUG"})
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "n3")
    assert list(df.trial) == list(range(10)) and set(df.status) == {"completed"}
    assert (df.dispatch_ms < 0).any() and "sent ahead" in p.stderr
    assert set(df.group) == {0, 1} and set(df.ranks) == {1}
    assert "3 ranks: 1 coordinator (rank 0) + 2 groups of 1 rank" in p.stderr


def test_np_runs_the_installed_mpiopt_beside_a_folder_named_mpiopt(write_yaml, tmp_path):
    # a clone run from its parent: `python -m mpiopt` on the ranks would import the folder instead
    (tmp_path / "mpiopt").mkdir()
    (tmp_path / "mpiopt" / "__init__.py").write_text("")
    console = Path(sys.executable).parent / "mpiopt"
    p = subprocess.run([str(console), "search", str(space(write_yaml, "beside", trials=4)), "--np", "2"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert set(mpiopt.load_results(tmp_path / "runs" / "beside").status) == {"completed"}


ENV_AT_IMPORT = """
import json, os
from pathlib import Path

# what TensorFlow would read as it loads, were this module to import keras here
names = ("TF_CPP_MIN_LOG_LEVEL", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")
Path(f"env.{os.getpid()}.json").write_text(json.dumps({n: os.environ.get(n) for n in names}))


def f(params):
    return params["x"]
"""


def test_the_log_level_and_thread_counts_are_set_before_a_user_module_is_imported(write_yaml, tmp_path):
    (tmp_path / "at_import.py").write_text(ENV_AT_IMPORT)
    yaml = write_yaml("name: env\nobjective: {function: at_import.py:f}\n"
                      "parameters: {x: {type: real, low: 0, high: 1}}\nsearch: {trials: 2}\n", "env.yaml")
    unset = ("TF_CPP_MIN_LOG_LEVEL", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS",
             "MPIOPT_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    p = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "mpiopt", "search", str(yaml)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    seen = [json.loads(f.read_text()) for f in tmp_path.glob("env.*.json")]
    assert len(seen) >= 2 and all(s == {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_NUM_INTRAOP_THREADS": "1",
                                        "TF_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "1"} for s in seen), seen


STOPPED_AT_IMPORT = """
import os, signal

if os.environ["STOP_WITH"] == "SIGTERM":  # a batch system ending the job as it starts
    os.kill(os.getpid(), signal.SIGTERM)
raise KeyboardInterrupt  # Ctrl-C while the module imports (a SIGTERM raises it too, in mpiopt)


def f(params):
    return params["x"]
"""


@pytest.mark.parametrize("np_", [None, 2])
@pytest.mark.parametrize("signal_", ["SIGINT", "SIGTERM"])
def test_a_signal_while_the_space_files_module_imports_stops_every_rank_in_one_line(write_yaml, tmp_path, np_,
                                                                                      signal_):
    (tmp_path / "stops.py").write_text(STOPPED_AT_IMPORT)
    yaml = write_yaml("name: stops\nobjective: {function: stops.py:f}\n"
                      "parameters: {x: {type: real, low: 0, high: 1}}\nsearch: {trials: 2}\n", "stops.yaml")
    for command, said in ((["search", yaml], "mpiopt: interrupted while starting; nothing was written"),
                          (["check", yaml], "mpiopt: interrupted")):
        p = run_cli(command, cwd=tmp_path, np=np_, timeout=60, env={"STOP_WITH": signal_})
        assert p.returncode == 130 and p.stderr.splitlines()[-1] == said, (command, p.returncode, p.stderr)
        assert p.stderr.count("mpiopt:") == 1 and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "runs").exists()


STOPPED_ON_ONE_RANK = """
import os, signal

if os.environ["PMI_RANK"] == os.environ["STOPPED_RANK"]:  # mpiexec's Ctrl-C reached this rank first
    os.kill(os.getpid(), getattr(signal, os.environ["STOP_WITH"]))


def f(params):
    return params["x"]
"""


@pytest.mark.parametrize("command, stopped_rank, stop", [("search", "0", "SIGINT"), ("search", "2", "SIGTERM"),
                                                         ("check", "2", "SIGINT")])
def test_a_stop_one_rank_gets_as_the_job_starts_stops_every_rank_there(write_yaml, tmp_path, command, stopped_rank,
                                                                       stop):
    # a rank that left before MPI_Init, or before the ranks agreed how the start went, would hold
    # the others there for ever: it goes on, and every rank learns of the stop at that agreement
    # (search imports the space file's module before MPI starts, check after)
    (tmp_path / "stops.py").write_text(STOPPED_ON_ONE_RANK)
    yaml = write_yaml("name: stops\nobjective: {function: stops.py:f}\n"
                      "parameters: {x: {type: real, low: 0, high: 1}}\nsearch: {trials: 2}\n", "stops.yaml")
    p = run_cli([command, yaml], cwd=tmp_path, np=3, timeout=60, env={"STOPPED_RANK": stopped_rank, "STOP_WITH": stop})
    assert p.returncode == 130, p.stderr
    said = "mpiopt: interrupted while starting; nothing was written" if command == "search" else "mpiopt: interrupted"
    assert p.stderr == said + "\n" and p.stdout == "", p.stderr + p.stdout
    assert not (tmp_path / "runs").exists()


STOPPED_WHILE_PLACED = """
import os, signal
from mpiopt import launch
launch.hold_stops_until_mpi({sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}, [])
comm = launch.start_mpi()
launch.agree_at_start(comm)
if comm.Get_rank() == 1:
    os.kill(os.getpid(), signal.SIGTERM)  # a batch system's SIGTERM reaches rank 1 first, while
comm.Barrier()  # the others wait in a blocking call of MPI's, as when the ranks are placed on devices
try:
    launch.let_stops_go(comm)
    outcome = "went on"
except KeyboardInterrupt:
    outcome = "stopped"
every = comm.gather(outcome)  # printed by rank 0: lines printed by several ranks can interleave
if comm.Get_rank() == 0:
    print(*every, sep="\\n", flush=True)
"""


def test_a_stop_while_the_ranks_are_placed_stops_every_rank_after_the_placement():
    # rank 1 raised at once and left the others in the barrier for ever (the cluster audit's
    # SIGTERM 0.8-1 s into a job of 8: a 10 s hang, then exit 9)
    p = subprocess.run([str(MPIEXEC), "-n", "3", sys.executable, "-c", STOPPED_WHILE_PLACED], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["stopped"] * 3, p.stdout + p.stderr


def test_hand_outs_wait_for_a_fresh_round_under_mpi(write_yaml, tmp_path):
    # the rule for trials of minutes, forced on for 0.2 s trials: the background thread and the
    # dispatch loop under a real coordinator, with every model hand-out waiting for a round
    p = run_cli(["search", space(write_yaml, "fresh")], cwd=tmp_path, np=3,
                env={"MPIOPT_TEST_SLEEP": "0.2", "MPIOPT_FRESH_SHARE": "1000", "MPIOPT_LOG_LEVEL": "DEBUG"})
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "fresh")
    assert list(df.trial) == list(range(10)) and set(df.status) == {"completed"}
    line = next(ln for ln in p.stderr.splitlines() if "suggestions:" in ln)
    waits = int(line.split(" waits for a round with the latest result")[0].rsplit(" ", 1)[1])
    model = int(line.split("suggestions: ")[1].split(" ")[0])
    assert model >= 4 and waits >= model - 1, line  # the first model hand-out may find its round fresh


def test_every_rank_counts_the_ranks_on_its_node():
    # the non-blocking count behind configure_waits (all ranks here share this machine)
    # (gathered to rank 0 and printed there: lines printed by several ranks can interleave)
    code = ("from mpi4py import MPI; from mpiopt import transport; w = MPI.COMM_WORLD; "
            "mine = f'here {transport.ranks_on_this_node(w)} {transport.configure_waits(w)}'; "
            "every = w.gather(mine); w.Get_rank() or print(*every, sep='\\n')")
    p = subprocess.run([str(MPIEXEC), "-n", "3", sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    lines = sorted(line for line in p.stdout.splitlines() if line.startswith("here"))
    assert len(lines) == 3 and all(line.startswith("here 3 3 ranks on ") for line in lines), p.stdout


def test_a_job_that_ends_with_an_error_leaves_no_shared_memory_behind():
    # ranks that agree on an error end by MPI_Abort, which skips MPICH's removal of its /dev/shm files
    code = ("from mpi4py import MPI; from mpiopt import launch; w = MPI.COMM_WORLD; "
            "files = [l.split()[-1] for l in open('/proc/self/maps') if ' /dev/shm/mpich_shm_' in l "
            "and not l.endswith('(deleted)\\n')]; print('mapped', *files, flush=True); w.Barrier(); "
            "launch.abort_job(w, 2, 0.0, quiet=True) if w.Get_rank() == 0 else __import__('time').sleep(30)")
    p = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2, p.stderr
    mapped = {f for line in p.stdout.splitlines() if line.startswith("mapped") for f in line.split()[1:]}
    assert mapped, p.stdout  # MPICH of the wheel shares memory through /dev/shm files
    assert not [f for f in mapped if Path(f).exists()], mapped


def test_five_ranks_groups_of_two_get_their_own_communicator(write_yaml, tmp_path):
    p = run_cli(["search", space(write_yaml, "n5", fn="with_comm", trials=8, group_size=2)], cwd=tmp_path, np=5)
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "n5")
    assert set(df.status) == {"completed"} and len(df) == 8
    assert set(df["group_size"]) == {2.0}  # the function saw a 2-rank communicator, not COMM_WORLD
    assert set(df.ranks) == {2} and set(df.group) == {0, 1}
    assert (df.objective - (df.params_x + df.params_y)).abs().max() < 1e-9


def test_a_rank_running_long_after_its_groups_first_is_warned_of(write_yaml, tmp_path):
    space = write_yaml("""
        objective: {function: objectives.py:late_rank}
        parameters: {x: {type: real, low: 0.0, high: 1.0}}
        search: {trials: 1}
        training: {group_size: 2}
    """)
    p = run_cli(["search", space], cwd=tmp_path, np=3, env={"MPIOPT_TEST_SLEEP": "4", "MPIOPT_STRAGGLER_S": "1"})
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("trial 0: this rank's part ended 1 s ago, and another rank of the group is still running "
                          "its part") == 1, p.stderr


def test_a_failing_rank_does_not_hang_its_group(write_yaml, tmp_path):
    p = run_cli(["search", space(write_yaml, "fail", fn="failing_rank", trials=12, group_size=2)], cwd=tmp_path,
                np=3, timeout=120)
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "fail")
    assert len(df) == 12
    failed = df[df.status == "failed"]
    assert len(failed) > 0 and (failed.params_x > 0).all()
    for _, row in failed.iterrows():
        bad = 1 if row.params_y < 7.5 else 0
        assert row.error.startswith(f"group rank {bad}: RuntimeError: rank {bad} broke"), row.error
    assert (df[df.status == "completed"].params_x <= 0).all()


def test_a_rank_that_fails_before_a_collective_of_megabytes_harms_no_later_trial(write_yaml, tmp_path):
    # the others' sum, which rank 2 never joined, was left to MPICH, which crashed (SIGSEGV) or
    # failed a later, good trial a few trials on
    p = run_cli(["search", space(write_yaml, "big", fn="fails_before_a_large_sum", trials=30, group_size=4)],
                cwd=tmp_path, np=5, timeout=120)
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "big")
    assert len(df) == 30 and (df.status == "completed").eq(df.params_x <= 2.5).all()
    assert set(df[df.status == "failed"].error) == {"group rank 2: RuntimeError: rank 2 broke"}


def test_a_bcast_whose_root_returns_first_is_no_misuse(write_yaml, tmp_path):
    p = run_cli(["search", space(write_yaml, "bcast", fn="bcast_from_rank_0", trials=40, group_size=4)],
                cwd=tmp_path, np=5, timeout=120)
    assert p.returncode == 0, p.stderr
    assert set(mpiopt.load_results(tmp_path / "runs" / "bcast").status) == {"completed"}


@pytest.mark.parametrize("command", ["search", "train"])
def test_a_full_disk_on_a_group_rank_stops_the_job_in_one_line_and_resume_runs_its_trial(write_yaml, tmp_path,
                                                                                         command):
    (tmp_path / "full").touch()
    path = space(write_yaml, "full", fn="full_disk", trials=8, group_size=2)
    args = ["search", path] if command == "search" else ["train", path, "--set", "x=1"]
    p = run_cli(args, cwd=tmp_path, np=3, timeout=60)
    assert p.returncode == 1, p.stderr
    rank = 1 if command == "search" else 0  # the group's first rank: world rank 1 beside a coordinator
    assert p.stderr.strip().splitlines()[-1].startswith(
        f"mpiopt: error on world rank {rank}: No space left on device; the job stops: "), p.stderr
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr
    if command == "train":
        return
    # mpiexec can return while a killed rank still holds the run directory's lock (a trial reads running)
    deadline = time.monotonic() + 30
    while is_live(tmp_path / "runs" / "full") and time.monotonic() < deadline:
        time.sleep(0.1)
    df = mpiopt.load_results(tmp_path / "runs" / "full")
    assert "failed" not in set(df.status) and "interrupted" in set(df.status)  # the disk, not the trial
    (tmp_path / "full").unlink()
    p = run_cli(["search", path, "--resume"], cwd=tmp_path, np=3, timeout=60)
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "full")
    assert list(df.sort_values("trial").trial) == list(range(8)) and set(df.status) == {"completed"}


STALE_NOTICES = """
import time
from mpi4py import MPI
from mpiopt._errors import GroupPeerFailed
from mpiopt.transport import GroupComm
world = MPI.COMM_WORLD
seen = []
for trial in range(3):
    comm = GroupComm(world)  # a trial that both ranks fail, rank 1 after rank 0 has given up on it
    if world.Get_rank() == 1:
        time.sleep(0.3)
    comm.notify_failure()
    comm.close()
    comm = GroupComm(world)  # the next trial must not see the last one's failure notices
    try:
        comm.Barrier()
        seen.append("ok")
    except GroupPeerFailed as exc:
        seen.append(str(exc))
        comm.notify_failure()
    comm.close()
every = world.gather(seen)
if world.Get_rank() == 0:
    print(every, flush=True)
"""



def test_a_rank_that_returns_while_its_peer_waits_for_it_stops_the_search(write_yaml, tmp_path):
    p = run_cli(["search", space(write_yaml, "ret", fn="returning_rank", trials=4, group_size=2)], cwd=tmp_path,
                np=3, timeout=120)
    assert p.returncode == 2, p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("mpiopt: error:")]
    assert len(errors) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "returning_rank: group rank 0: rank 1 returned from the function while rank 0 waited for it" in errors[0]


RETURNED_PEER = """
import time
from mpi4py import MPI
from mpiopt._errors import GroupPeerReturned
from mpiopt.transport import GroupComm
world = MPI.COMM_WORLD
rank = world.Get_rank()
seen = []
for trial in range(3):  # every rank makes the same calls: a peer that returned first is no misuse
    comm = GroupComm(world)
    if rank == trial:
        time.sleep(0.3)
    seen.append(comm.allreduce(1))
    comm.notify_return()
    comm.close()
for value in range(3):  # a bcast's root returns once ranks 1 and 2 have its value, before rank 3,
    comm = GroupComm(world)  # which rank 2 passes it to, began its call: no misuse either
    if rank == 3:
        time.sleep(0.3)
    seen.append(comm.bcast(value if rank == 0 else None))
    comm.notify_return()
    comm.close()
comm = GroupComm(world)  # rank 1 returns without the call its peers wait in: they give up
began = time.monotonic()
try:
    if rank != 1:
        comm.allreduce(1)
    else:
        time.sleep(2.0)  # its peers are in the call when its notice comes: they give up then
    seen.append("returned")
except GroupPeerReturned as exc:
    seen.append((exc.line(), time.monotonic() - began))
comm.notify_return()
comm.close()
every = world.gather(seen)
if rank == 0:
    print(every, flush=True)
"""


def test_a_rank_waiting_for_a_peer_whose_function_returned_gives_up():
    p = subprocess.run([str(MPIEXEC), "-n", "4", sys.executable, "-c", RETURNED_PEER], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    every = ast.literal_eval(p.stdout.strip())
    assert [seen[:6] for seen in every] == [[4, 4, 4, 0, 1, 2]] * 4
    assert every[1][6] == "returned"
    for rank in (0, 2, 3):
        said, waited = every[rank][6]
        assert said == (f"rank 1 returned from the function while rank {rank} waited for it in a call of comm (or "
                        "trial.should_stop): every rank of the group must make the same calls")
        # in the call when the notice came (2 s in), a call rank 1 never began: it gave up then,
        # without the grace a receive of what the peer sent gets; that it gave up at all, and did
        # not hang, the subprocess's timeout guards
        assert 1.5 < waited < 2 + RETURNED_GRACE_S - 1, waited


RETURNED_POINT_TO_POINT = """
import time
from mpi4py import MPI
from mpiopt._errors import GroupPeerReturned
from mpiopt.transport import RETURNED_GRACE_S, GroupComm
world = MPI.COMM_WORLD
rank = world.Get_rank()
comm = GroupComm(world)
seen = []
if rank == 1:  # returns without sending what rank 0 waits for
    comm.notify_return()
elif rank == 2:  # a live, slow peer: its message comes after rank 1's grace ran out
    time.sleep(RETURNED_GRACE_S + 1.5)
    comm.send("late", dest=0)
    comm.notify_return()
else:
    began = time.monotonic()
    try:
        comm.recv_bytes(1, 77)
    except GroupPeerReturned as exc:
        seen.append((exc.line(), round(time.monotonic() - began)))
    seen.append(comm.recv(source=2))
    comm.notify_return()
comm.close()
every = world.gather(seen)
if rank == 0:
    print(every[0], flush=True)
"""


def test_a_receive_gives_up_on_the_peer_that_returned_and_waits_for_the_others():
    p = subprocess.run([str(MPIEXEC), "-n", "3", sys.executable, "-c", RETURNED_POINT_TO_POINT],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    (said, waited), late = ast.literal_eval(p.stdout.strip())
    assert said.startswith("rank 1 returned from the function while rank 0 waited for it") and late == "late"
    assert RETURNED_GRACE_S <= waited <= RETURNED_GRACE_S + 5  # waited out the grace, not for ever


def test_failure_notices_never_leak_into_the_next_trial():
    p = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-c", STALE_NOTICES], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str([["ok"] * 3] * 2), p.stdout


def test_bad_input_under_mpiexec_is_one_line_on_every_rank(write_yaml, tmp_path):
    bad = write_yaml("objective: {function: objectives.py:branin}\nparameters: {x: {type: real, low: 2, high: 1}}\n",
                     "bad.yaml")
    p = run_cli(["search", bad], cwd=tmp_path, np=3, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert lines == [f"mpiopt: error: {bad}: parameters.x: `low < high` must hold, but got (low=2.0, high=1.0)"]
    good = space(write_yaml, "again")
    assert run_cli(["search", good], cwd=tmp_path, np=3).returncode == 0
    p = run_cli(["search", good], cwd=tmp_path, np=3, timeout=60)  # only rank 0 sees the run dir problem
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "already holds a search" in p.stderr
    # a bad MPIOPT_* value on one rank only (mpiexec -env): the job agrees on it, no rank waits for ever
    one = [sys.executable, "-m", "mpiopt", "search", str(good), "--out", "other"]
    p = subprocess.run([str(MPIEXEC), "-n", "2", *one, ":", "-n", "1", "-env", "MPIOPT_THREADS", "0", *one],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        "mpiopt: error: environment: MPIOPT_THREADS: expected a whole number >= 1, got '0' "
        f"(world rank 2 on host {socket.gethostname()})"]
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize("command", ["search", "check"])
def test_a_file_one_node_lacks_is_one_line_on_every_rank_not_a_hang(write_yaml, tmp_path, command):
    # two "nodes" in their own folders (node-local copies): the second lacks the objective's module
    # (search) or the space file itself (check); its rank used to exit alone and leave the others
    # waiting in MPI's start for ever
    yaml = space(write_yaml, "staged", trials=2)
    here, there = tmp_path / "here", tmp_path / "there"
    for node in (here, there):
        node.mkdir()
        (node / yaml.name).write_text(yaml.read_text())
    (here / "objectives.py").write_text((tmp_path / "objectives.py").read_text())
    if command == "check":
        (there / yaml.name).unlink()
    rank = [sys.executable, "-m", "mpiopt", command, yaml.name]
    p = subprocess.run([str(MPIEXEC), "-n", "2", "-wdir", str(here), *rank, ":", "-n", "1", "-wdir", str(there), *rank],
                       capture_output=True, text=True, timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    where = f"(world rank 2 on host {socket.gethostname()})"
    assert lines[0].startswith("mpiopt: error: ") and lines[0].endswith(where), lines
    assert not (here / "runs").exists()


def test_hdf5_files_that_differ_between_nodes_are_refused_on_every_rank(tmp_path):
    # node-local copies of the data: a glob matches 2 files on the second "node", 3 on the first;
    # its groups would have trained on other data (an allreduce group waited for ever)
    import h5py
    import numpy as np

    here, there = tmp_path / "here", tmp_path / "there"
    for node, files in ((here, 3), (there, 2)):
        (node / "data").mkdir(parents=True)
        (node / "tiny_model.py").write_text((SPACES / "tiny_model.py").read_text())
        (node / "h5.yaml").write_text(
            "name: staged\nobjective: {model: tiny_model.py:build_model, data: {train: data/t_*.h5, val: data/v.h5}, "
            "loss: sparse_categorical_crossentropy, metrics: [accuracy]}\n"
            "parameters: {units: {type: integer, low: 2, high: 8}}\nsearch: {trials: 2}\ntraining: {epochs: 1}\n")
        for name in [f"t_{i}" for i in range(files)] + ["v"]:
            with h5py.File(node / "data" / f"{name}.h5", "w") as h:
                h["features"], h["labels"] = np.zeros((20, 8), np.float32), np.zeros(20, np.int64)
    rank = [sys.executable, "-m", "mpiopt", "search", "h5.yaml"]
    p = subprocess.run([str(MPIEXEC), "-n", "2", "-wdir", str(here), *rank, ":", "-n", "1", "-wdir", str(there), *rank],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        f"mpiopt: error: h5.yaml: objective.data.train: world rank 2 on host {socket.gethostname()}: no "
        "data/t_2.h5, which world rank 0 finds: give every node the same files"], p.stderr


def test_a_space_file_that_reads_otherwise_on_one_node_is_refused_on_every_rank(write_yaml, tmp_path):
    # node-local copies of the space file that differ: an allreduce group straddling the nodes
    # would have waited for ever on ranks with other batch sizes
    yaml = space(write_yaml, "copies", trials=2)
    here, there = tmp_path / "here", tmp_path / "there"
    for node, trials in ((here, 2), (there, 3)):
        node.mkdir()
        (node / yaml.name).write_text(yaml.read_text().replace("trials: 2", f"trials: {trials}"))
        (node / "objectives.py").write_text((tmp_path / "objectives.py").read_text())
    rank = [sys.executable, "-m", "mpiopt", "search", yaml.name]
    p = subprocess.run([str(MPIEXEC), "-n", "2", "-wdir", str(here), *rank, ":", "-n", "1", "-wdir", str(there), *rank],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        f"mpiopt: error: {yaml.name}: world rank 2 on host {socket.gethostname()} reads search.trials: 3 where world "
        "rank 0 reads 2: give every node the same space file"], p.stderr


def _finished(journal):
    if not journal.exists():
        return 0
    return sum(1 for line in journal.read_text().splitlines() if '"event":"finish"' in line)


def test_kill_the_whole_job_then_resume(write_yaml, tmp_path):
    path = space(write_yaml, "killed", trials=30)
    journal = tmp_path / "runs" / "killed" / "trials.jsonl"
    env = {**os.environ, "MPIOPT_TEST_SLEEP": "0.3"}
    job = subprocess.Popen([str(MPIEXEC), "-n", "3", sys.executable, "-m", "mpiopt", "search", str(path)],
                           cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    deadline = time.monotonic() + 60
    while _finished(journal) < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=30)
    time.sleep(0.5)
    before = mpiopt.load_results(tmp_path / "runs" / "killed")
    done_before = before[before.status == "completed"].set_index("trial")
    assert 8 <= len(done_before) < 30
    assert "interrupted" in set(before.status) or len(before) == len(done_before)

    p = run_cli(["search", path, "--resume"], cwd=tmp_path, np=3, timeout=120)
    assert p.returncode == 0, p.stderr
    after = mpiopt.load_results(tmp_path / "runs" / "killed")
    assert list(after.trial) == list(range(30))  # exactly the budget, nothing duplicated
    assert set(after.status) == {"completed"}
    kept = after.set_index("trial").loc[done_before.index]
    assert (kept.objective == done_before.objective).all()  # finished trials kept as they were
    for n in before[before.status == "interrupted"].trial:  # re-run with the same parameters
        assert after.loc[after.trial == n, "params_x"].item() == before.loc[before.trial == n, "params_x"].item()
    events = [json.loads(x) for x in journal.read_text().splitlines()]
    finishes = [e["trial"] for e in events if e["event"] == "finish"]
    assert sorted(finishes) == list(range(30))


def test_np_relaunches_under_mpiexec(write_yaml, tmp_path):
    p = run_cli(["search", space(write_yaml, "np", trials=6), "--np", "3"], cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "np")
    assert len(df) == 6 and set(df.group) == {0, 1}


@pytest.mark.parametrize("scheduled", [False, True], ids=["plain", "asha"])
def test_sigterm_to_mpiexec_stops_cleanly_and_resumes(write_yaml, tmp_path, scheduled):
    # under asha, reports and decisions are on their way when the signal comes: MPI_Finalize
    # would fail on them, and a rank that exits 130 first would have mpiexec kill the others
    path = space(write_yaml, "termed", trials=16)
    if scheduled:
        path.write_text(path.read_text().replace("branin}", "steady_curve}").replace(
            "seed: 0}", "seed: 0, scheduler: asha}").replace("group_size: 1}", "group_size: 1, epochs: 9}"))
    journal = tmp_path / "runs" / "termed" / "trials.jsonl"
    env = {**os.environ, "MPIOPT_TEST_SLEEP": "0.3"}
    n = 4 if scheduled else 3
    job = subprocess.Popen([str(MPIEXEC), "-n", str(n), sys.executable, "-m", "mpiopt", "search", str(path)],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while _finished(journal) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)
    _, err = job.communicate(timeout=60)
    assert job.returncode == 130, err
    assert "continue with --resume" in err and "Traceback" not in err and "BAD TERMINATION" not in err
    said = run_cli(["status", tmp_path / "runs" / "termed"], cwd=tmp_path).stdout
    space_file = re.escape(str(Path(path).resolve().relative_to(tmp_path.resolve())))  # the file it ran from
    assert re.search(rf"termed: interrupted \d+ s ago \(Ctrl-C or SIGTERM\); `mpiopt search {space_file} --out",
                     said), said
    assert f"--resume --np {n}` continues it on {n} ranks, as it ran (or `mpiexec -n {n} mpiopt search" in said, said
    p = run_cli(["search", path, "--resume"], cwd=tmp_path, np=n, timeout=120)
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "termed")
    assert list(df.trial) == list(range(16)) and set(df.status) <= ({"completed", "pruned"} if scheduled
                                                                    else {"completed"})


def test_a_stuck_group_is_retired_and_the_job_still_ends(write_yaml, tmp_path):
    """A trial that ignores its time limit (alarm blocked): the group is retired after the grace
    period, the others finish the search, and the job ends instead of hanging on the stuck rank."""
    text = SPACE.format(name="stuck", fn="stubborn", trials=8, group_size=1).replace(
        "seed: 0}", "seed: 0, grace_period: 1}").replace("training: {group_size: 1}",
                                                          "training: {group_size: 1, time_limit: 1}")
    path = write_yaml(text, "stuck.yaml")
    # with trials sent ahead, a stuck group holds one more: it must run elsewhere
    p = run_cli(["search", path], cwd=tmp_path, np=4, timeout=120,
                env={"MPIOPT_SEND_AHEAD": "always", "MPIOPT_TEST_SLEEP": "0.2"})
    df = mpiopt.load_results(tmp_path / "runs" / "stuck")
    retired = df[df.error.fillna("").str.contains("did not report back")]
    assert len(retired) >= 1 and set(retired.status) == {"timeout"}
    assert "is retired" in retired.error.iloc[0]
    assert list(df.trial) == list(range(len(df))) and set(df.status) <= {"completed", "timeout"}
    if len(df) == 8:  # some group survived and finished the budget; a lost group still fails the search
        assert p.returncode == 1 and "never came back from a trial and w" in p.stderr, p.stderr
    else:
        assert p.returncode == 1 and "every group was retired" in p.stderr
    assert "ending the MPI job" in p.stderr


def test_time_limit_interrupts_a_sleeping_function_under_mpi(write_yaml, tmp_path):
    text = SPACE.format(name="sleepy", fn="sleepy", trials=6, group_size=1).replace(
        "training: {group_size: 1}", "training: {group_size: 1, time_limit: 0.5}")
    p = run_cli(["search", write_yaml(text, "sleepy.yaml")], cwd=tmp_path, np=3, timeout=120)
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "sleepy")
    assert len(df) == 6
    slow = df[df.params_x > 5]
    assert len(slow) > 0 and set(slow.status) == {"timeout"}
    assert set(df[df.params_x <= 5].status) <= {"completed"}


def test_asha_with_a_function_on_groups_of_two_and_trials_sent_ahead(write_yaml, tmp_path):
    # every rank of a group reports, or rank 0 alone; the decision at a rung reaches both ranks
    # through should_stop; queued trials wait meanwhile
    path = write_yaml(SPACE.format(name="curve", fn="branin_curve", trials=14, group_size=2).replace(
        "seed: 0}", "seed: 0, scheduler: asha, min_epochs: 1, reduction_factor: 3}").replace(
        "training: {", "training: {epochs: 9, time_limit: 60, "), "curve.yaml")
    p = run_cli(["search", path], cwd=tmp_path, np=5, timeout=180,
                env={"MPIOPT_TEST_SLEEP": "0.3", "MPIOPT_SEND_AHEAD": "always"})
    assert p.returncode == 0, p.stderr[-3000:]
    df = mpiopt.load_results(tmp_path / "runs" / "curve").set_index("trial")
    assert len(df) == 14 and set(df.status) == {"completed", "pruned"}, df.status.tolist()
    assert set(df.epochs[df.status == "pruned"]) <= {1, 3} and set(df.epochs[df.status == "completed"]) == {9}
    assert (df.dispatch_ms < 0).any() and set(df.ranks) == {2}
    assert (df.params_x <= 2.5).any() and (df.params_x > 2.5).any()  # both ways of reporting ran
    assert set(df.status[df.params_x <= 2.5]) == {"completed", "pruned"}  # rank 0's reports decided alone
    history = mpiopt.load_history(tmp_path / "runs" / "curve")
    for trial, rows in history.groupby("trial"):
        assert rows.epoch.tolist() == list(range(1, int(df.epochs[trial]) + 1)), (trial, rows.epoch.tolist())


def test_status_of_a_live_mpiexec_search_then_of_the_ended_one(write_yaml, tmp_path):
    # `mpiopt status` from another shell while 3 groups train: running, each group's trial; then ended
    path = space(write_yaml, "watched", trials=12)
    cmd = [str(MPIEXEC), "-n", "4", sys.executable, "-m", "mpiopt", "search", str(path)]
    search = subprocess.Popen(cmd, cwd=tmp_path, env={**os.environ, "MPIOPT_TEST_SLEEP": "1.5"},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run = tmp_path / "runs" / "watched"
    try:
        deadline = time.monotonic() + 90
        while not (run / "heartbeat.json").exists() or '"status"' not in _read(run / "trials.jsonl"):
            assert time.monotonic() < deadline and search.poll() is None, "no finished trial within 90 s"
            time.sleep(0.2)
        live = run_cli(["status", run], cwd=tmp_path)
        assert live.returncode == 0, live.stderr
        lines = live.stdout.splitlines()
        assert lines[0].startswith(f"{run}: running (pid ") and "of 12 finished" in lines[1]
        assert "groups:" in lines and sum(line.startswith("  group ") for line in lines) >= 2, live.stdout
        assert search.wait(timeout=120) == 0
    finally:
        if search.poll() is None:
            search.kill()
    ended = run_cli(["status", run], cwd=tmp_path)
    assert " ended " in ended.stdout.splitlines()[0] and "12 of 12 finished (100%)" in ended.stdout


def _read(path) -> str:
    return path.read_text() if path.exists() else ""


def test_a_pareto_evolution_over_a_conditional_space_under_mpiexec(write_yaml, tmp_path):
    space = write_yaml(two_goals_space("more", "pareto: {loss: minimize, size: minimize}",
                                       "{trials: 24, algorithm: evolution, population: 6, sample: 3}"))
    p = run_cli(["search", space], cwd=tmp_path, np=3)
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "more")
    assert list(df.trial) == list(range(24)) and set(df.status) == {"completed"}  # no inactive value passed
    assert set(df.group) == {0, 1} and df.pareto.any()
    points = [tuple(str(v) for v in row) for row in df[[c for c in df.columns if c.startswith("params_")]].values]
    assert len(set(points)) == len(points)  # two groups never got the same point
