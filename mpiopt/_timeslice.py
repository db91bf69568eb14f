"""Ask Linux for a shorter time slice for the calling thread and the threads it starts later.

The coordinator's dispatch loop and its suggestion thread share a core. With the kernel's
default slice (about 3 ms) a message that wakes the loop can wait a slice or two for the thread
computing a round; with 0.1 ms slices the two interleave finely and the loop answers within
about that. Both keep their weight, so the round gets as much of the core as before.

Linux 6.12 and later (EEVDF) read `sched_attr.sched_runtime` of a normal task as its requested
slice; older kernels ignore it, and other systems have no such call: there this does nothing.
"""
from __future__ import annotations

import ctypes
import os
import platform

# sched_setattr's number in each architecture's system-call table
_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274, "ppc64le": 355, "riscv64": 274}
# the policies whose slice this may set (SCHED_OTHER, SCHED_BATCH); real-time ones are left alone
_FAIR_POLICIES = (0, 3)


class SchedAttr(ctypes.Structure):
    """`struct sched_attr` of sched_setattr(2), up to the fields every kernel since 3.14 knows."""

    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32), ("sched_flags", ctypes.c_uint64),
                ("sched_nice", ctypes.c_int32), ("sched_priority", ctypes.c_uint32),
                ("sched_runtime", ctypes.c_uint64), ("sched_deadline", ctypes.c_uint64),
                ("sched_period", ctypes.c_uint64)]


def request_time_slice(ms: float) -> bool:
    """Ask for `ms` milliseconds as the calling thread's slice (0: the kernel's default), keeping
    its policy and nice value; threads it starts afterwards inherit it. Returns whether the kernel
    took the request (an older kernel takes it and ignores it)."""
    number = _SCHED_SETATTR.get(platform.machine())
    if os.name != "posix" or number is None:
        return False
    policy = os.sched_getscheduler(0)
    if policy not in _FAIR_POLICIES:
        return False
    attr = SchedAttr(size=ctypes.sizeof(SchedAttr), sched_policy=policy,
                     sched_nice=os.getpriority(os.PRIO_PROCESS, 0), sched_runtime=round(ms * 1e6))
    try:
        return ctypes.CDLL(None, use_errno=True).syscall(number, 0, ctypes.byref(attr), 0) == 0
    except (OSError, AttributeError):  # no C library to call through
        return False
