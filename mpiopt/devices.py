"""Which GPU each rank gets, decided before TensorFlow starts (pure Python: no MPI, no TensorFlow).

The GPUs of a node are those listed in `CUDA_VISIBLE_DEVICES` when it is set (batch systems set
it), otherwise those the NVIDIA driver shows. The node's training ranks, in node-local order, are
dealt them like cards, `ranks_per_gpu` to a device; the coordinator (world rank 0) gets none.
Each rank then sees only its own device: its `CUDA_VISIBLE_DEVICES` is narrowed to it, so that
TensorFlow, CuPy or PyTorch in the user's code all see the same one GPU.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ._errors import ConfigError

VISIBLE = "CUDA_VISIBLE_DEVICES"
GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"  # TensorFlow reserves memory as it needs it, not all at once
# an index, or a GPU/MIG UUID as nvidia-smi -L prints it
_DEVICE = re.compile(r"^(\d+|GPU-[0-9A-Fa-f-]+|MIG-[0-9A-Za-z/-]+)$")
_NONE = ("", "NoDevFiles", "none", "-1")  # what batch systems set when a job has no GPU


def parse_visible(text: str | None) -> tuple[str, ...] | None:
    """The devices a `CUDA_VISIBLE_DEVICES` value lists; None when it is unset."""
    if text is None:
        return None
    text = text.strip()
    if text in _NONE:
        return ()
    devices = tuple(part.strip() for part in text.split(","))
    for d in devices:
        if not _DEVICE.match(d):
            raise ConfigError(f"{text!r}: {d!r} is not a GPU index or UUID (expected e.g. 0,1,2,3 or GPU-<uuid>)",
                              source="environment", field=VISIBLE)
    if len(set(devices)) != len(devices):
        raise ConfigError(f"{text!r}: a device is listed twice", source="environment", field=VISIBLE)
    return devices


def detect(driver: Path = Path("/proc/driver/nvidia/gpus")) -> tuple[str, ...]:
    """The GPUs the NVIDIA driver shows on this node, as indices ('0', '1', ...); none without it."""
    try:
        count = sum(1 for _ in driver.iterdir())
    except OSError:
        return ()
    return tuple(str(i) for i in range(count))


def node_devices(env: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The GPUs of this node: `CUDA_VISIBLE_DEVICES` when set, otherwise those detected."""
    listed = parse_visible(env.get(VISIBLE))
    return detect() if listed is None else listed


@dataclass(frozen=True)
class NodePlan:
    """One node's ranks and the device each gets (None: the CPU)."""

    node: str  # how messages name the node, e.g. "the node of world rank 4"
    devices: tuple[str, ...]
    assigned: dict[int, str | None]  # world rank -> device

    def shares_devices(self) -> bool:
        used = [d for d in self.assigned.values() if d is not None]
        return len(used) != len(set(used))

    def describe(self) -> str:
        if not self.devices:
            return f"{self.node}: no GPU (CUDA_VISIBLE_DEVICES empty or none detected): every rank on the CPU"
        by_device: dict[str, list[int]] = {d: [] for d in self.devices}
        cpu = []
        for rank, device in sorted(self.assigned.items()):
            (by_device[device] if device is not None else cpu).append(rank)
        parts = [f"{_name(d)}: rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))}" if r else f"{_name(d)}: idle"
                 for d, r in by_device.items()]
        if cpu:
            parts.append(f"no GPU: rank{'s' if len(cpu) > 1 else ''} {', '.join(map(str, cpu))} (coordinator)")
        return f"{self.node}: " + "; ".join(parts)


def _name(device: str) -> str:
    return device if device.startswith(("GPU-", "MIG-")) else f"GPU {device}"


def deal(node_ranks: list[int], devices: tuple[str, ...], ranks_per_gpu: int, *, coordinator: int | None = 0,
         node: str = "this node", source: str | None = None) -> NodePlan:
    """Deal a node's GPUs to its ranks (world ranks, in node-local order).

    The training ranks take the devices in turn, so that fewer ranks than places spread over
    every device, and no device gets more than `ranks_per_gpu`; the coordinator gets none. More
    training ranks than `devices x ranks_per_gpu` is a `ConfigError`.
    """
    if not devices:
        return NodePlan(node, (), {r: None for r in node_ranks})
    training = [r for r in node_ranks if r != coordinator]
    places = len(devices) * ranks_per_gpu
    if len(training) > places:
        raise ConfigError(f"{node}: {len(training)} training ranks for {len(devices)} GPU"
                          f"{'s' if len(devices) > 1 else ''} x ranks_per_gpu {ranks_per_gpu} = {places} "
                          f"place{'s' * (places != 1)}; "
                          "raise ranks_per_gpu to pack small trials, or start fewer ranks per node",
                          source=source, field="training.ranks_per_gpu")
    assigned: dict[int, str | None] = {r: None for r in node_ranks if r == coordinator}
    for i, rank in enumerate(training):
        assigned[rank] = devices[i % len(devices)]
    return NodePlan(node, devices, assigned)


def plan_node(seen: dict[int, tuple[str, ...]], ranks_per_gpu: int, *, coordinator: int | None = 0,
              node: str = "this node", source: str | None = None) -> NodePlan:
    """The plan of a node from the devices each of its ranks sees (world rank -> devices).

    Training ranks that all see the same devices share them out (`deal`), the coordinator seeing
    them too or none (a launch that keeps it off the GPUs). Where they see different ones, the
    batch system already bound devices to each task (e.g. `srun --gpus-per-task=1` without
    device cgroups): every training rank keeps the first device it was given."""
    lists = list(dict.fromkeys(d for r, d in seen.items() if r != coordinator))
    own = seen.get(coordinator, ())
    if len(lists) <= 1 and (not own or own in lists or not lists):
        return deal(list(seen), lists[0] if lists else own, ranks_per_gpu, coordinator=coordinator, node=node,
                    source=source)
    lists = list(dict.fromkeys(seen.values()))
    assigned = {r: (d[0] if d and r != coordinator else None) for r, d in seen.items()}
    every = tuple(dict.fromkeys(d for devices in lists for d in devices))
    return NodePlan(node, every, assigned)


def narrow(device: str | None, *, shared: bool, devices: tuple[str, ...], env=os.environ) -> None:
    """Make this process see only `device` (none at all for None), before TensorFlow starts.

    A machine without GPUs is left exactly as it was. Where ranks share a device, TensorFlow
    grows its memory as needed instead of reserving nearly all of it for the first rank."""
    if not devices:
        return
    env[VISIBLE] = device if device is not None else ""
    if shared and device is not None:
        env.setdefault(GROWTH, "true")
