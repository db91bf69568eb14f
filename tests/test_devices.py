"""GPUs dealt to ranks: the rule alone (no MPI, no GPU), and under mpiexec with a fake device list."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

import mpiopt
from conftest import MPIEXEC, run_cli
from mpiopt import devices
from mpiopt._errors import ConfigError


def test_a_device_list_is_parsed_or_refused_in_one_line():
    assert devices.parse_visible(None) is None
    assert devices.parse_visible("0,1, 3") == ("0", "1", "3")
    assert devices.parse_visible("GPU-8f6e2a1b-0c,MIG-GPU-1/2/0") == ("GPU-8f6e2a1b-0c", "MIG-GPU-1/2/0")
    for none in ("", "NoDevFiles", "-1"):
        assert devices.parse_visible(none) == ()
    for bad, why in (("0,x", "'x' is not a GPU index or UUID"), ("1,1", "listed twice")):
        with pytest.raises(ConfigError, match=why) as info:
            devices.parse_visible(bad)
        assert str(info.value).startswith("environment: CUDA_VISIBLE_DEVICES: ")


def test_the_node_list_wins_over_detection(tmp_path):
    driver = tmp_path / "gpus"
    driver.mkdir()
    for bus in ("0000:01:00.0", "0000:41:00.0"):
        (driver / bus).mkdir()
    assert devices.detect(driver) == ("0", "1")
    assert devices.detect(tmp_path / "none") == ()
    assert devices.node_devices({"CUDA_VISIBLE_DEVICES": "2,3"}) == ("2", "3")


def test_ranks_are_dealt_the_node_gpus_in_turn_the_coordinator_none():
    plan = devices.deal([0, 1, 2, 3, 4], ("3", "5"), 2)
    assert plan.assigned == {0: None, 1: "3", 2: "5", 3: "3", 4: "5"} and plan.shares_devices()
    # fewer ranks than places spread over every device
    assert devices.deal([0, 1, 2], ("0", "1", "2", "3"), 4).assigned == {0: None, 1: "0", 2: "1"}
    assert not devices.deal([0, 1, 2], ("0", "1", "2", "3"), 4).shares_devices()
    # a node without the coordinator, and `mpiopt train` (every rank trains)
    assert devices.deal([5, 6, 7, 8], ("0", "1"), 2).assigned == {5: "0", 6: "1", 7: "0", 8: "1"}
    assert devices.deal([0, 1], ("0", "1"), 1, coordinator=None).assigned == {0: "0", 1: "1"}
    # no GPU: every rank on the CPU, as before
    assert devices.deal([0, 1, 2], (), 1).assigned == {0: None, 1: None, 2: None}


def test_more_ranks_than_places_is_one_line():
    with pytest.raises(ConfigError) as info:
        devices.deal([4, 5, 6, 7], ("0", "1"), 1, node="the node of world rank 4", source="s.yaml")
    assert str(info.value) == ("s.yaml: training.ranks_per_gpu: the node of world rank 4: 4 training ranks for 2 GPUs "
                               "x ranks_per_gpu 1 = 2 places; raise ranks_per_gpu to pack small trials, or start "
                               "fewer ranks per node")


def test_narrowing_leaves_a_machine_without_gpus_as_it_was():
    env = {}
    devices.narrow(None, shared=False, devices=(), env=env)
    assert env == {}
    devices.narrow(None, shared=False, devices=("0", "1"), env=env)
    assert env == {"CUDA_VISIBLE_DEVICES": ""}  # the coordinator sees no GPU
    env = {}
    devices.narrow("1", shared=True, devices=("0", "1"), env=env)
    assert env == {"CUDA_VISIBLE_DEVICES": "1", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}


SPACE = """
name: gpus
objective: {function: objectives.py:device_of}
parameters:
  x: {type: real, low: -5.0, high: 10.0}
  y: {type: real, low: 0.0, high: 15.0}
search: {initial_points: 8, trials: 8, seed: 0}
training: {group_size: 1, ranks_per_gpu: RPG}
"""


@pytest.mark.mpi
def test_each_group_gets_its_device_and_the_coordinator_none(write_yaml, tmp_path):
    path = write_yaml(SPACE.replace("RPG", "2"))
    p = run_cli(["search", path], cwd=tmp_path, np=5, timeout=120, env={"CUDA_VISIBLE_DEVICES": "3,5"})
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "gpus")
    assert len(df) == 8
    for group, device in df.groupby("group").device.unique().items():
        assert list(device) == [[3.0, 5.0, 3.0, 5.0][group]], (group, device)
    assert set(df.growth) == {1.0}  # two ranks on each device: memory grows as needed
    assert re.search(r"devices: the node of world rank 0 \(\S+\): GPU 3: ranks 1, 3; GPU 5: ranks 2, 4; no GPU: rank 0 "
                     r"\(coordinator\)", p.stderr), p.stderr  # its host named


@pytest.mark.mpi
def test_every_node_deals_its_own_gpus(write_yaml, tmp_path):
    # one GPU place a device: 4 training ranks on one node with 2 GPUs do not fit ...
    path = write_yaml(SPACE.replace("RPG", "1"))
    p = run_cli(["search", path], cwd=tmp_path, np=5, timeout=120, env={"CUDA_VISIBLE_DEVICES": "3,5"})
    assert p.returncode == 2 and p.stderr.count("mpiopt: error:") == 1, p.stderr
    assert re.search(r"the node of world rank 0 \(\S+\): 4 training ranks for 2 GPUs x ranks_per_gpu 1 = 2 places",
                     p.stderr), p.stderr
    # ... but on two simulated nodes of 2 GPUs each they do: nodeA holds the coordinator and 2 groups
    cmd = [str(MPIEXEC), "-launcher", "fork", "-hosts", "nodeA:3,nodeB:2", "-n", "5", sys.executable, "-m", "mpiopt",
           "search", str(path)]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": "3,5", "MPIOPT_TEST_SLEEP": "0"})
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "gpus")
    assert {g: list(d) for g, d in df.groupby("group").device.unique().items()} == \
        {0: [3.0], 1: [5.0], 2: [3.0], 3: [5.0]}
    assert set(df.growth) == {0.0}  # one rank a device
    assert re.search(r"the node of world rank 3 \(\S+\): GPU 3: rank 3; GPU 5: rank 4", p.stderr), p.stderr


def test_devices_the_batch_system_bound_to_each_task_are_kept():
    # every rank of the node sees a different list: srun --gpus-per-task=1 already chose
    seen = {0: ("0",), 1: ("1",), 2: ("2",), 3: ("3",)}
    assert devices.plan_node(seen, 1).assigned == {0: None, 1: "1", 2: "2", 3: "3"}
    # the same list everywhere is dealt as usual
    assert devices.plan_node({4: ("0", "1"), 5: ("0", "1")}, 1).assigned == {4: "0", 5: "1"}
    # a coordinator launched without GPUs (mpiexec -n 1 -env CUDA_VISIBLE_DEVICES "" : -n 4 ...):
    # the training ranks' one list is dealt, ranks_per_gpu and all
    assert devices.plan_node({0: (), 1: ("0", "1"), 2: ("0", "1")}, 1).assigned == {0: None, 1: "0", 2: "1"}
    with pytest.raises(ConfigError, match="4 training ranks for 2 GPUs"):
        devices.plan_node({0: (), 1: ("0", "1"), 2: ("0", "1"), 3: ("0", "1"), 4: ("0", "1")}, 1)
