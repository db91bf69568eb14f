"""The one module that talks MPI.

Messages between the coordinator and the groups are small JSON documents carried as raw bytes
(never pickled state). Waiting is done on MPI requests with a short exponential back-off (at most
`MPIOPT_MAX_BACKOFF` seconds, the way `mpi4py.futures` waits), so an idle rank costs no CPU: MPICH's own
blocking calls spin a core at 100%, which starves the training ranks on a shared node.

The coordinator sees groups through its `Transport` protocol: `MPITransport` here, and
`InProcessTransport`, which implements it without MPI for a one-process search and for the tests.
Tasks and results travel as `Task` and `TrialResult` JSON.
"""
from __future__ import annotations

import functools
import json
import os
import pickle
import threading
import time
from dataclasses import dataclass, replace
from typing import Any
from collections.abc import Callable, Sequence

from . import _env
from ._errors import GroupPeerFailed, GroupPeerReturned
from .trial import Report, Task, TrialResult

TAG_TASK, TAG_RESULT, TAG_STOP, TAG_OUTCOME, TAG_FAIL, TAG_USER = 11, 12, 13, 14, 15, 16
TAG_REPORT, TAG_DECISION = 17, 18  # a trial's epoch report to the coordinator, and the scheduler's word on it
TAG_PULSE = 19  # "this rank lives": a group's ranks to the coordinator, every PULSE_S

# A group whose watched ranks stayed silent this long is lost (its node died): a dead node is
# noticed LOST_AFTER_S after the last word from it (a pulse every PULSE_S, or a result), looked
# for every `watch_s`. A rank that is alive but slow still pulses (from a thread), so a long
# trial never looks dead.
PULSE_S = 2.0
LOST_AFTER_S = 8.0
NOTICE_FAILED, NOTICE_RETURNED = 0, 1  # a notice's kind; the number of collective calls comes with it
RETURNED_GRACE_S = 5.0  # a receive of what a returned peer sent before it returned arrives well within this
# A rank's last pulse to a peer is this one byte (the others are empty). MPI_Finalize must find no
# pulse unreceived (MPICH kills the sender of one), so at the end each side takes in its peers'
# pulses up to their last one.
LAST_PULSE = b"\x01"


@dataclass
class WaitSettings:
    """How a waiting rank waits: it spins for `spin` seconds (`collective_spin` in a collective of
    its group), then sleeps 10 µs, 20 µs ... up to `max_backoff` between tests of its request."""

    max_backoff: float
    spin: float
    collective_spin: float


@functools.cache
def waits() -> WaitSettings:
    """The settings of this process: MPIOPT_MAX_BACKOFF, MPIOPT_SPIN and MPIOPT_COLLECTIVE_SPIN,
    read when first needed; `configure_waits` turns the spins off on an oversubscribed node."""
    return WaitSettings(_env.get("MPIOPT_MAX_BACKOFF"), _env.get("MPIOPT_SPIN"), _env.get("MPIOPT_COLLECTIVE_SPIN"))


def _mpi():
    from mpi4py import MPI

    return MPI


def world():
    """COMM_WORLD (initialises MPI)."""
    return _mpi().COMM_WORLD


def highest(comm, value: int) -> int:
    """The highest of every rank's `value`, waited for without spinning."""
    import numpy as np

    MPI = _mpi()
    mine, out = np.array([value], dtype=np.int64), np.zeros(1, dtype=np.int64)
    wait(comm.Iallreduce([mine, MPI.INT64_T], [out, MPI.INT64_T], op=MPI.MAX))
    return int(out[0])


def encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")


def decode(data: bytes | bytearray) -> Any:
    return json.loads(bytes(data).decode("utf-8"))


class Backoff:
    """Between tests of a request: spin a while, then sleep 10 µs, 20 µs ... up to a maximum (`waits()`).

    The short spin keeps a reply that is on its way (a master's weights, a rendezvous send that
    needs the peer's progress) from paying a sleep's wake-up latency; the sleeps keep a long wait
    from burning a core.
    """

    def __init__(self, maximum: float | None = None, spin: float | None = None) -> None:
        settings = waits()
        spin = settings.spin if spin is None else spin
        self.delay = 1e-5
        self.maximum = settings.max_backoff if maximum is None else maximum
        self.spin_until = time.perf_counter() + spin
        self.spinning = spin > 0

    def sleep(self) -> None:
        if self.spinning and time.perf_counter() < self.spin_until:
            return
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, self.maximum)


def wait(req, *, interrupt=None, spin: float | None = None) -> None:
    """Wait for one request without spinning long; `interrupt()` may raise to abandon the wait."""
    backoff = Backoff(spin=spin)
    while not req.Test():
        if interrupt is not None:
            interrupt()
        backoff.sleep()


def cancel(req) -> None:
    """Cancel a posted receive unless it completed (then it is simply completed)."""
    if not req.Test():
        req.Cancel()
        req.Wait()


def probe(comm, source: int, tag: int, *, interrupt=None, timeout: float | None = None):
    """Wait for a message and return its status (source, size); None once `timeout` s passed."""
    MPI = _mpi()
    status = MPI.Status()
    backoff = Backoff()
    end = None if timeout is None else time.monotonic() + timeout
    while not comm.Iprobe(source=source, tag=tag, status=status):
        if interrupt is not None:
            interrupt()
        if end is not None and time.monotonic() >= end:
            return None
        backoff.sleep()
    return status


def recv_bytes(comm, source: int, tag: int, *, interrupt=None, timeout: float | None = None, with_tag: bool = False):
    """(bytes, source) of the next message (with its tag: (bytes, source, tag)), or None once
    `timeout` seconds passed."""
    MPI = _mpi()
    status = probe(comm, source, tag, interrupt=interrupt, timeout=timeout)
    if status is None:
        return None
    buf = bytearray(status.Get_count(MPI.BYTE))
    comm.Recv([buf, MPI.BYTE], source=status.Get_source(), tag=status.Get_tag())
    return (buf, status.Get_source(), status.Get_tag()) if with_tag else (buf, status.Get_source())


def send_bytes(comm, data: bytes, dest: int, tag: int) -> None:
    MPI = _mpi()
    comm.Send([data, MPI.BYTE], dest=dest, tag=tag)


def bcast_bytes(comm, data: bytes | None, root: int = 0, *, wait=wait) -> bytearray:
    """Broadcast bytes of unknown length without spinning the waiting ranks (`wait` waits for
    each request)."""
    import numpy as np

    MPI = _mpi()
    n = np.array([len(data) if data is not None else 0], dtype=np.int64)
    wait(comm.Ibcast([n, MPI.INT64_T], root=root))
    buf = bytearray(data) if comm.Get_rank() == root else bytearray(int(n[0]))
    if n[0]:
        wait(comm.Ibcast([buf, MPI.BYTE], root=root))
    return buf


def ranks_on_this_node(comm) -> int:
    """How many ranks of `comm` run on this node (same processor name), found without spinning.

    A non-blocking allgather of a hash of the node's name, waited on with back-off: at start-up,
    ranks that arrive first sleep instead of spinning in a blocking `Split_type` while the others
    are still importing (which takes long where ranks outnumber cores)."""
    import hashlib

    import numpy as np

    MPI = _mpi()
    digest = hashlib.blake2b(MPI.Get_processor_name().encode("utf-8"), digest_size=8).digest()
    mine = np.array([int.from_bytes(digest, "little", signed=True)], dtype=np.int64)
    every = np.empty(comm.Get_size(), dtype=np.int64)
    wait(comm.Iallgather([mine, MPI.INT64_T], [every, MPI.INT64_T]))
    return int((every == mine[0]).sum())


def configure_waits(comm) -> str:
    """Spin briefly while waiting only where each rank on this node has a core of its own.

    With more ranks on a node than cores, a spinning rank takes the core a computing rank needs;
    there mpiopt only sleeps between tests. MPIOPT_SPIN / MPIOPT_COLLECTIVE_SPIN override this.
    Also finds whether world rank 0 has a core no other rank runs on (`coordinator_has_a_core`).
    """
    ranks_here = ranks_on_this_node(comm)
    cores = _affinity()
    _node_cores.update(coordinator_has_a_core=_has_a_core(share_with_node(comm, sorted(cores))))
    if ranks_here > len(cores):
        if not _env.is_set("MPIOPT_SPIN"):
            waits().spin = 0.0
        if not _env.is_set("MPIOPT_COLLECTIVE_SPIN"):
            waits().collective_spin = 0.0
        return f"{ranks_here} ranks on {len(cores)} cores: waiting ranks sleep"
    return f"{ranks_here} ranks on {len(cores)} cores"


# filled in by `configure_waits`; a single process has its core
_node_cores = {"coordinator_has_a_core": True}


def coordinator_has_a_core() -> bool:
    """Whether world rank 0 (the coordinator) shares its cores with no other rank of its node,
    or the node has a core for every rank; known on world rank 0 once `configure_waits` ran."""
    return _node_cores["coordinator_has_a_core"]


def _affinity() -> set[int]:
    """The cores this process may run on."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def _has_a_core(node: dict[int, list[int]]) -> bool:
    """From every rank's cores on rank 0's node (by world rank): whether rank 0 has a core."""
    if 0 not in node:
        return True  # not rank 0's node: nobody asks
    mine = set(node[0])
    others = [set(cores) for rank, cores in node.items() if rank != 0]
    return not any(mine & theirs for theirs in others) or len(node) <= len(mine.union(*others))


def share_with_node(comm, mine: Any) -> dict[int, Any]:
    """Every value `mine` of the ranks that share this rank's node (MPI's shared-memory split), by
    world rank, in node-local order.

    Called once at start-up, after `configure_waits` has seen every rank arrive, so the blocking
    split and gather below do not keep early ranks spinning."""
    node = comm.Split_type(_mpi().COMM_TYPE_SHARED)
    try:
        return dict(node.allgather((comm.Get_rank(), mine)))
    finally:
        node.Free()


def node_layout(comm) -> tuple[int, ...]:
    """Each rank's node, named by the lowest rank on it: the launcher's idea of a node (MPI's
    shared-memory split), which is a host name given to `mpiexec -hosts` or a batch system."""
    node = comm.Split_type(_mpi().COMM_TYPE_SHARED)
    try:
        lowest = min(node.allgather(comm.Get_rank()))
    finally:
        node.Free()
    return tuple(comm.allgather(lowest))


def host_name() -> str:
    """This rank's host (MPI's processor name): what a message about a node names for people."""
    return _mpi().Get_processor_name()


def host_names(comm) -> tuple[str, ...]:
    """Each rank's host name."""
    return tuple(comm.allgather(host_name()))


NO_MPI_HINT = 'pip install "mpiopt[mpich]" for an MPI of its own, or load your site\'s MPI (e.g. module load openmpi)'


def why_no_mpi(exc: BaseException) -> str:
    """One line for an MPI library that would not load, with what to do about it."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{first}: {NO_MPI_HINT}"


def library_or_why() -> str:
    """The MPI library mpi4py loads (starting MPI in this process), or why there is none."""
    try:
        return library()
    except Exception as exc:  # mpi4py found no libmpi
        return f"none found ({why_no_mpi(exc)})"


def library() -> str:
    """The MPI library in use, in one line (e.g. 'MPICH 4.2.0', 'Open MPI v5.0.3')."""
    text = _mpi().Get_library_version().strip()
    first = text.splitlines()[0].split(",")[0] if text else "unknown"
    return " ".join(first.replace("Version:", "").split())[:80]


def gather_text(comm, text: str | None, root: int = 0) -> list[str | None] | None:
    """Every rank's `text` on `root` (in rank order), None elsewhere; a start-up report."""
    return comm.gather(text, root=root)


def agree(comm, error: str | None) -> str | None:
    """Every rank learns the first error any rank had (lowest rank first), or None.

    Non-blocking with back-off: ranks that arrive early sleep instead of spinning in a blocking
    collective, which on a node with more ranks than cores slows the ranks still working.
    """
    import numpy as np

    MPI = _mpi()
    size = comm.Get_size()
    mine = np.array([comm.Get_rank() if error else size], dtype=np.int64)
    first = np.empty_like(mine)
    wait(comm.Iallreduce([mine, MPI.INT64_T], [first, MPI.INT64_T], op=MPI.MIN))
    who = int(first[0])
    if who == size:
        return None
    data = bcast_bytes(comm, error.encode("utf-8") if comm.Get_rank() == who else None, root=who)
    return bytes(data).decode("utf-8")


def group_comm(comm, ranks: tuple[int, ...]):
    """The communicator of one group (its world ranks in order), made by those ranks alone.

    `MPI_Comm_create_group` involves only the group's members, so no rank waits for the whole
    world (a world-wide split would keep every group spinning until the last rank arrived).
    """
    return comm.Create_group(comm.Get_group().Incl(list(ranks)))


# -- the group plan ----------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupPlan:
    """How COMM_WORLD is split: world rank 0 coordinates, the rest form groups."""

    world_size: int
    groups: tuple[tuple[int, ...], ...]  # world ranks of each group; the first is its leader
    requested_size: int
    nodes: tuple[int, ...] | None = None  # each world rank's node (the lowest world rank on it); None: not known
    hosts: tuple[str, ...] | None = None  # each world rank's host name; None: not known

    @property
    def shared(self) -> bool:
        """One process: the coordinator and a one-rank group take turns."""
        return self.world_size == 1

    @property
    def n_nodes(self) -> int:
        return len(set(self.nodes)) if self.nodes is not None else 1

    def group_of(self, world_rank: int) -> int | None:
        for g, ranks in enumerate(self.groups):
            if world_rank in ranks:
                return g
        return None

    def nodes_of(self, group: int) -> list[int]:
        """The nodes (by their index in order of appearance) that group `group` runs on."""
        if self.nodes is None:
            return [0]
        index = self._node_index()
        return sorted({index[self.nodes[r]] for r in self.groups[group]})

    def node_name(self, rank: int) -> str:
        """How messages name a world rank's node: its index, as `mpiopt check` numbers the
        nodes, and its host, e.g. 'node 3 (gpu017)'."""
        index = self._node_index()[self.nodes[rank]] if self.nodes is not None else 0
        return f"node {index}" + (f" ({self.hosts[rank]})" if self.hosts is not None else "")

    def _node_index(self) -> dict[int, int]:
        return {n: i for i, n in enumerate(dict.fromkeys(self.nodes or (0,)))}

    def describe(self) -> str:
        if self.shared:
            return "1 process: the coordinator and one 1-rank group take turns"
        sizes: dict[int, int] = {}
        for ranks in self.groups:
            sizes[len(ranks)] = sizes.get(len(ranks), 0) + 1
        parts = ", ".join(f"{n} group{'s' if n > 1 else ''} of {s} rank{'s' if s > 1 else ''}"
                          for s, n in sorted(sizes.items(), reverse=True))
        where = f" on {self.n_nodes} nodes" if self.n_nodes > 1 else ""
        return f"{self.world_size} ranks{where}: 1 coordinator (rank 0) + {parts}"


def pulsing_ranks(plan: GroupPlan) -> dict[int, int]:
    """The ranks that pulse, each with its group: the lowest rank of each group on each node.
    A node dies whole, so one rank a group and node shows whether the group lost a node."""
    out: dict[int, int] = {}
    seen: set[tuple[int, int]] = set()
    for g, ranks in enumerate(plan.groups):
        for rank in ranks:
            key = (g, plan.nodes[rank] if plan.nodes is not None else 0)
            if key not in seen:
                seen.add(key)
                out[rank] = g
    return out


def speaking_order(plan: GroupPlan) -> list[int]:
    """The pulsing ranks in the order they take turns to say the coordinator is lost: those off
    its node first (when it falls silent, its node is the one likely lost), each set by rank."""
    def on_coordinator_node(rank: int) -> bool:
        return plan.nodes is not None and plan.nodes[rank] == plan.nodes[0]

    return sorted(pulsing_ranks(plan), key=lambda rank: (on_coordinator_node(rank), rank))


class Pulse:
    """A daemon thread that sends each rank of `to` an empty TAG_PULSE message every `every_s`,
    and, with `watch`, listens for that rank's pulses and calls `on_silence(seconds)` once it has
    been silent for `silent_s`.

    Group ranks pulse the coordinator (which notices a lost node) and watch it (a group whose
    coordinator died would otherwise wait for a task for ever). Only one send a destination is in
    flight: a busy receiver never finds a pile of pulses.

    On `stop` each rank of `to` gets LAST_PULSE, and the watched rank's pulses are taken in up to
    its own LAST_PULSE (for at most `silent_s`): no pulse is left for MPI_Finalize. The
    coordinator takes in the groups' last pulses itself (`MPITransport.shutdown`)."""

    def __init__(self, comm, to: Sequence[int], *, watch: int | None = None, silent_s: float = 0.0,
                 on_silence: Callable[[float], None] | None = None, every_s: float = PULSE_S) -> None:
        self.comm = comm
        self.to = list(to)
        self.watch, self.silent_s, self.on_silence = watch, silent_s, on_silence
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mpiopt-pulse", daemon=True)
        self._last_word_due = True  # False once stopped on a failing rank
        self._watched_ended = False  # the watched rank's LAST_PULSE came in
        self._buffer = bytearray(len(LAST_PULSE))  # of the one receive posted at a time

    def start(self) -> Pulse:
        self._thread.start()
        return self

    def stop(self, *, last_word: bool = True) -> None:
        """Stop pulsing; `last_word` False (the rank is failing, and the job will be aborted)
        skips the exchange of last pulses, which would wait for a peer."""
        self._last_word_due = last_word
        self._stop.set()
        self._thread.join(timeout=self.every_s + self.silent_s + 2.0)

    def _run(self) -> None:
        MPI = _mpi()
        sends: dict[int, Any] = {}
        heard, listening = time.monotonic(), None
        try:
            while not self._stop.is_set():
                for dest in self.to:
                    if dest not in sends or sends[dest].Test():
                        sends[dest] = self.comm.Isend([b"", MPI.BYTE], dest=dest, tag=TAG_PULSE)
                if self.watch is not None:
                    while not self._watched_ended and (listening is None or self._took_pulse(listening)):
                        if listening is not None:
                            heard = time.monotonic()
                        listening = None if self._watched_ended else self._listen()
                    silent = time.monotonic() - heard
                    if silent > self.silent_s and not self._watched_ended and self.on_silence is not None:
                        self.on_silence(silent)
                        return
                self._stop.wait(self.every_s)
            if self._last_word_due:
                listening = self._last_word(listening, list(sends.values()))
        finally:
            if listening is not None and not listening.Test():
                listening.Cancel()
                listening.Wait()

    def _listen(self):
        return self.comm.Irecv([self._buffer, _mpi().BYTE], source=self.watch, tag=TAG_PULSE)

    def _took_pulse(self, listening) -> bool:
        """Whether the posted receive got a pulse (noting a LAST_PULSE)."""
        status = _mpi().Status()
        if not listening.Test(status):
            return False
        self._watched_ended = status.Get_count(_mpi().BYTE) == len(LAST_PULSE)
        return True

    def _last_word(self, listening, sends: list):
        """LAST_PULSE to each rank of `to`; the watched rank's pulses up to its LAST_PULSE (for at
        most `silent_s`); then a moment for the sends (tiny, so sent eagerly) to complete. Returns
        the receive still posted, if the watched rank's LAST_PULSE never came."""
        MPI = _mpi()
        sends += [self.comm.Isend([LAST_PULSE, MPI.BYTE], dest=dest, tag=TAG_PULSE) for dest in self.to]
        end = time.monotonic() + self.silent_s
        while listening is not None and time.monotonic() < end:
            if self._took_pulse(listening):
                listening = None if self._watched_ended else self._listen()
            else:
                time.sleep(0.01)
        end = time.monotonic() + 1.0
        while sends and time.monotonic() < end:
            sends = [r for r in sends if not r.Test()]
            time.sleep(0.01)
        return listening


def plan_groups(world_size: int, group_size: int, nodes: Sequence[int] | None = None,
                hosts: Sequence[str] | None = None) -> GroupPlan:
    """Split ranks 1..world_size-1 into groups of about `group_size`; `nodes[r]` says which node
    world rank r runs on (None: all on one), `hosts[r]` its host's name (for messages).

    A group never straddles nodes when its node holds enough ranks: each node's ranks are cut
    into groups of their own, leftover ranks joining them (6 ranks in groups of 4 make one group
    of 6, 7 in groups of 2 make 3, 2 and 2), and a node with fewer ranks than `group_size` forms
    one smaller group. A group larger than every node spans whole nodes, the fullest first, so
    the coordinator's node (one rank short) is the one left with a smaller group.
    """
    plan = _plan_groups(world_size, group_size, nodes)
    return plan if hosts is None or plan.shared else replace(plan, hosts=tuple(hosts))


def _plan_groups(world_size: int, group_size: int, nodes: Sequence[int] | None) -> GroupPlan:
    if world_size <= 1:
        return GroupPlan(1, ((0,),), group_size)
    owner = list(nodes) if nodes is not None else [0] * world_size
    by_node: dict[int, list[int]] = {}
    for rank in range(1, world_size):
        by_node.setdefault(owner[rank], []).append(rank)
    per_node = list(by_node.values())
    if group_size > max(len(ranks) for ranks in per_node):
        groups = _span_nodes(per_node, group_size)
    else:
        groups = [g for ranks in per_node for g in _cut(ranks, group_size)]
    groups.sort(key=lambda g: g[0])
    return GroupPlan(world_size, tuple(groups), group_size, tuple(owner) if nodes is not None else None)


def _cut(ranks: list[int], group_size: int) -> list[tuple[int, ...]]:
    """One node's ranks in groups of `group_size`, as even as possible (leftovers join groups)."""
    n_groups = max(1, len(ranks) // group_size)
    base, extra = divmod(len(ranks), n_groups)
    groups, i = [], 0
    for g in range(n_groups):
        size = base + (1 if g < extra else 0)
        groups.append(tuple(ranks[i:i + size]))
        i += size
    return groups


def _span_nodes(per_node: list[list[int]], group_size: int) -> list[tuple[int, ...]]:
    """Whole nodes joined into groups of at least `group_size` ranks, the fullest nodes first;
    the nodes left over make one smaller group."""
    groups, current = [], []
    for ranks in sorted(per_node, key=len, reverse=True):
        current += ranks
        if len(current) >= group_size:
            groups.append(tuple(sorted(current)))
            current = []
    if current:
        groups.append(tuple(sorted(current)))
    return groups


# -- the coordinator's side --------------------------------------------------------------------
class MPITransport:
    """Coordinator (world rank 0) to group leaders, over COMM_WORLD.

    Tasks go out with non-blocking sends, so a task may be sent to a group that is still busy
    (`queues_tasks`): it waits in the group's mailbox, in order, and the send never holds up the
    coordinator whatever its size.
    """

    queues_tasks = True

    watch_s = 1.0  # how often the coordinator looks for lost groups

    def __init__(self, comm, plan: GroupPlan, interrupt: Callable[[], None] | None = None) -> None:
        self.comm = comm
        self.plan = plan
        self._interrupt = interrupt or (lambda: None)  # a safe point for a held Ctrl-C, while it waits
        self._leaders = {ranks[0]: g for g, ranks in enumerate(plan.groups)}
        self._sends: list[tuple[Any, bytes]] = []  # (request, buffer) of sends not known to be complete
        self._watched = pulsing_ranks(plan)
        self._heard = dict.fromkeys(self._watched, time.monotonic())  # each watched rank's last message
        self._pulses_ended: set[int] = set()  # the watched ranks whose LAST_PULSE came in

    @property
    def n_groups(self) -> int:
        return len(self.plan.groups)

    def group_ranks(self, group: int) -> int:
        return len(self.plan.groups[group])

    def send_task(self, group: int, task: Task) -> None:
        self._isend(encode(task.to_json()), self.plan.groups[group][0], TAG_TASK)

    def _isend(self, data: bytes, dest: int, tag: int) -> None:
        MPI = _mpi()
        if len(self._sends) >= 16:
            self._reap()
        self._sends.append((self.comm.Isend([data, MPI.BYTE], dest=dest, tag=tag), data))

    def _reap(self) -> None:
        """Forget the sends that completed (their buffers live until then); one MPI call for all."""
        MPI = _mpi()
        done = MPI.Request.Testsome([r for r, _ in self._sends]) or []
        if done:
            gone = set(done)
            self._sends = [s for i, s in enumerate(self._sends) if i not in gone]

    def recv_message(self, timeout: float | None = None) -> tuple[int, TrialResult | Report] | None:
        """Wait until any group sends a result or an epoch's report (the first to arrive is served
        first), or None after `timeout` s."""
        end = None if timeout is None else time.monotonic() + timeout
        self._interrupt()
        while True:
            left = None if end is None else max(0.0, end - time.monotonic())
            got = recv_bytes(self.comm, _mpi().ANY_SOURCE, _mpi().ANY_TAG, timeout=left, with_tag=True,
                             interrupt=self._interrupt)
            if got is None:
                return None
            data, source, tag = got
            if tag != TAG_PULSE:
                self._heard[source] = time.monotonic()
                break
            self._note_pulse(source, len(data))
        message = decode(data)
        if tag == TAG_REPORT:
            return self._leaders[source], Report.from_json(message)
        return self._leaders[source], TrialResult.from_json(message)

    def send_decision(self, group: int, decision: str) -> None:
        """The scheduler's word on a report that asked for one: `continue`, `pause` or `stop`."""
        self._isend(decision.encode("ascii"), self.plan.groups[group][0], TAG_DECISION)

    def lost_groups(self) -> dict[int, tuple[str, float]]:
        """The groups with a rank silent for LOST_AFTER_S, each with a line saying which and the
        seconds it has been silent."""
        now = time.monotonic()
        lost: dict[int, tuple[str, float]] = {}
        for rank, g in self._watched.items():
            silent = now - self._heard[rank]
            if silent > LOST_AFTER_S and silent > lost.get(g, ("", 0.0))[1]:  # its longest silence
                lost[g] = (f"no word from world rank {rank} on {self.plan.node_name(rank)} for {silent:.0f} s", silent)
        return lost

    def listen(self, on_report) -> None:
        """Reports come through `recv_message` here."""

    def has_result(self) -> bool:
        """Whether a group's result is already waiting to be received."""
        return bool(self.comm.Iprobe(source=_mpi().ANY_SOURCE, tag=TAG_RESULT))

    def shutdown(self, wait_s: float = 5.0) -> None:
        """Tell every group to stop (after any task it still holds), and take in the pulses of
        every live watched rank up to its LAST_PULSE. Waits at most `wait_s`: a group that never
        came back from a trial never receives the stop, and a lost one pulses no more."""
        for ranks in self.plan.groups:
            self._isend(b"", ranks[0], TAG_STOP)
        end = time.monotonic() + wait_s
        backoff = Backoff()
        while (self._sends or self._pulsing()) and time.monotonic() < end:
            self._reap()
            self._take_pulses()
            backoff.sleep()

    def _pulsing(self) -> list[int]:
        """The watched ranks heard from lately whose LAST_PULSE has not come in."""
        now = time.monotonic()
        return [r for r in self._watched if r not in self._pulses_ended and now - self._heard[r] <= LOST_AFTER_S]

    def _take_pulses(self) -> None:
        MPI = _mpi()
        status = MPI.Status()
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_PULSE, status=status):
            source, size = status.Get_source(), status.Get_count(MPI.BYTE)
            self.comm.Recv([bytearray(size), MPI.BYTE], source=source, tag=TAG_PULSE)
            self._note_pulse(source, size)

    def _note_pulse(self, source: int, size: int) -> None:
        """A pulse of `size` bytes came in from `source`: it lives, and a LAST_PULSE is its last."""
        self._heard[source] = time.monotonic()
        if size == len(LAST_PULSE):
            self._pulses_ended.add(source)


class InProcessTransport:
    """Groups as plain callables in this process: `run_task(group, task) -> result`.

    Tasks run when the coordinator asks for a result, in the order they were sent, so a
    one-process search alternates between coordinating and training.
    """

    queues_tasks = False  # a task runs only when the coordinator waits for a result
    watch_s = None  # a group in this process cannot be lost

    def __init__(self, run_task: Callable[[int, Task, Callable[[Report], str | None]], TrialResult],
                 n_groups: int = 1, ranks: int = 1) -> None:
        self.run_task = run_task
        self._on_report: Callable[[int, Report], str | None] | None = None
        self._n = n_groups
        self._ranks = ranks
        self._queue: list[tuple[int, Task]] = []

    @property
    def n_groups(self) -> int:
        return self._n

    def group_ranks(self, group: int) -> int:
        return self._ranks

    def send_task(self, group: int, task: Task) -> None:
        self._queue.append((group, task))

    def send_decision(self, group: int, decision: str) -> None:
        raise AssertionError("in one process, a decision is what the report's call returns")

    def listen(self, on_report: Callable[[int, Report], str | None]) -> None:
        """The task's reports reach the coordinator through a call, made while it waits in `recv_message`."""
        self._on_report = on_report

    def recv_message(self, timeout: float | None = None) -> tuple[int, TrialResult]:
        group, task = self._queue.pop(0)  # runs now: a trial here is bounded by its own time limit

        def send(report: Report) -> str | None:
            return self._on_report(group, report) if self._on_report is not None else None

        return group, self.run_task(group, task, send)

    def has_result(self) -> bool:
        return False  # nothing is ever waiting: tasks run when their result is asked for

    def lost_groups(self) -> dict[int, tuple[str, float]]:
        return {}

    def shutdown(self) -> None:
        self._queue.clear()


# -- the group's side --------------------------------------------------------------------------
class GroupChannel:
    """A group's link to the coordinator: the leader receives, every rank of the group learns."""

    def __init__(self, world_comm, group_comm) -> None:
        self.world = world_comm
        self.comm = group_comm
        self.rank = group_comm.Get_rank()

    def next_task(self) -> Task | None:
        """The next task, on every rank of the group; None when the search is over."""
        data: bytes | None = None
        if self.rank == 0:
            MPI = _mpi()
            status = MPI.Status()
            backoff = Backoff()
            while data is None:
                # by tag, a task before a stop: the coordinator's pulses (another thread takes
                # them) must not stand in front of either
                for tag in (TAG_TASK, TAG_STOP):
                    if self.world.Iprobe(source=0, tag=tag, status=status):
                        buf = bytearray(status.Get_count(MPI.BYTE))
                        self.world.Recv([buf, MPI.BYTE], source=0, tag=tag)
                        data = bytes(buf) if tag == TAG_TASK else b""
                        break
                else:
                    backoff.sleep()
        data = bcast_bytes(self.comm, data)
        return Task.from_json(decode(data)) if data else None

    def gather_results(self, result: TrialResult) -> list[TrialResult] | None:
        """Every rank's result of a trial, on the leader (in rank order); None elsewhere."""
        if self.rank != 0:
            send_bytes(self.comm, encode(result.to_json()), 0, TAG_OUTCOME)
            return None
        out = [result]
        for r in range(1, self.comm.Get_size()):
            data, _ = recv_bytes(self.comm, r, TAG_OUTCOME)
            out.append(TrialResult.from_json(decode(data)))
        return out

    def send_result(self, result: TrialResult) -> None:
        send_bytes(self.world, encode(result.to_json()), 0, TAG_RESULT)

    def report(self, report: Report) -> str | None:
        """Send an epoch's report (the leader only); with `report.decide`, wait for and return the
        scheduler's decision."""
        send_bytes(self.world, encode(report.to_json()), 0, TAG_REPORT)
        if not report.decide:
            return None
        data, _ = recv_bytes(self.world, 0, TAG_DECISION)
        return bytes(data).decode("ascii")


def one_rank_group() -> GroupComm:
    """The communicator of a group of one rank in a process that has no group communicator (a
    one-process search, `mpiopt train` on one rank): a `function(params, comm)` gets one of size 1
    there, as it does in a group of one rank under mpiexec."""
    return GroupComm(_mpi().COMM_SELF)


class GroupComm:
    """The communicator a `function(params, comm)` objective gets: its group, failure-aware.

    A private duplicate of the group communicator. Its operations wait without spinning and give
    up with `GroupPeerFailed` when another rank of the group failed the trial, so one failing
    rank never leaves the others blocked in a collective. Common operations are covered
    (barrier, bcast, allreduce, reduce, gather, allgather, send, recv, and the buffer forms
    Barrier, Bcast, Allreduce, Reduce, Allgather, Send, Recv); anything else is passed to the
    underlying mpi4py communicator and does not get that protection.

    Notices (a rank failed, or its function returned after N collective calls) travel on a
    second duplicate, each rank posting one receive per peer: MPICH over UCX loses messages
    received from any source on a duplicated communicator between nodes.
    """

    def __init__(self, group_comm) -> None:
        import numpy as np

        MPI = _mpi()
        self._MPI = MPI
        self._comm = group_comm.Dup()
        self._ctrl = group_comm.Dup()
        self.rank = self._comm.Get_rank()
        self.size = self._comm.Get_size()
        self._peers = [r for r in range(self.size) if r != self.rank]
        self._notice_bufs = {r: np.zeros(2, dtype=np.int64) for r in self._peers}  # kind, collective calls
        self._notices = {r: self._post_notice(r) for r in self._peers}
        self._received = dict.fromkeys(self._peers, 0)
        self._sent: list = []
        self._notified: list[int] = []  # the ranks this rank sent a notice
        self._calls = 0  # the group's collective operations this rank began
        self.failed_peer: int | None = None
        self._returned: dict[int, tuple[int, float]] = {}  # peer whose function returned -> (its collectives, when)

    # -- failure notices ---------------------------------------------------------------------
    def _check(self) -> None:
        """Before a point-to-point operation: give up if a peer failed."""
        self._look()

    def _begin_collective(self, *, joined: bool = False) -> None:
        """Before a collective operation: give up if a peer failed, or returned before it; then,
        unless the caller knows every rank `joined` it, wait until every rank has begun it. A
        collective is posted only once all will join it: MPICH goes on progressing one that a
        failed rank never joined, and can crash doing so (seen with sums of megabytes; a pending
        barrier, which carries no data, is harmless)."""
        self._calls += 1
        self._interrupt_collective()
        if not joined:
            self._wait_collective(self._comm.Ibarrier())

    def _interrupt_collective(self) -> None:
        """While a collective waits: give up if a peer failed, or returned before it began this
        call (it will never join); a peer that began it and returned completed its part."""
        self._look()
        gone = [peer for peer, (calls, _) in self._returned.items() if calls < self._calls]
        if gone:
            raise GroupPeerReturned(gone[0], self.rank)

    def _interrupt(self, peer: int | None = None) -> None:
        """While a point-to-point operation with `peer` waits (None or ANY_SOURCE: any peer): give
        up if a peer failed, or if that peer returned RETURNED_GRACE_S ago (what it sent before it
        returned arrives meanwhile)."""
        self._look()
        now = time.monotonic()
        for other, (_, at) in self._returned.items():
            if peer in (None, other, self._MPI.ANY_SOURCE) and now - at > RETURNED_GRACE_S:
                raise GroupPeerReturned(other, self.rank)

    def _look(self) -> None:
        for peer, req in self._notices.items():
            if req.Test():
                self._take_notice(peer)
        if self.failed_peer is not None:
            raise GroupPeerFailed(f"rank {self.failed_peer} of the group failed this trial")

    def _post_notice(self, peer: int):
        return self._ctrl.Irecv([self._notice_bufs[peer], self._MPI.INT64_T], source=peer, tag=TAG_FAIL)

    def _take_notice(self, peer: int) -> None:
        """Note the notice `peer` sent, and post the receive of its next."""
        kind, calls = (int(v) for v in self._notice_bufs[peer])
        self._received[peer] += 1
        self._notices[peer] = self._post_notice(peer)
        if kind == NOTICE_RETURNED:
            self._returned.setdefault(peer, (calls, time.monotonic()))
        elif self.failed_peer is None:
            self.failed_peer = peer

    def notify_failure(self) -> None:
        """Tell the other ranks of the group that this rank failed the trial."""
        self._notify(NOTICE_FAILED)

    def notify_return(self) -> None:
        """Tell the other ranks that this rank's function returned: one still waiting in an
        operation of the group that this rank never began then gives up instead of hanging."""
        self._notify(NOTICE_RETURNED)

    def _notify(self, kind: int) -> None:
        import numpy as np

        notice = np.array([kind, self._calls], dtype=np.int64)
        for r in self._peers:
            self._sent.append(self._ctrl.Isend([notice, self._MPI.INT64_T], dest=r, tag=TAG_FAIL))
            self._notified.append(r)

    def close(self) -> None:
        """End the trial on this rank; every rank of the group calls it (their waits all give up
        on a failure notice, so none stays blocked).

        Every notice sent to this rank is received before the control communicator is freed:
        MPI reuses a freed communicator's context id, and a notice left unmatched would be taken
        by the next trial's communicator for a failure of that trial. Receives that a failure left
        pending are cancelled where they gave up (`_wait_recv`); a collective that a failure left
        pending cannot be, and keeps its communicator alive after the free (its context id is not
        reused while it waits): `_begin_collective` makes it a barrier, never a transfer of data."""
        import numpy as np

        MPI = self._MPI
        sent = np.zeros(self.size, dtype=np.int64)
        for dest in self._notified:
            sent[dest] += 1
        every = np.empty((self.size, self.size), dtype=np.int64)  # row s: the notices rank s sent to each rank
        wait(self._ctrl.Iallgather([sent, MPI.INT64_T], [every, MPI.INT64_T]))
        due = every[:, self.rank]
        for peer in self._peers:
            while self._received[peer] < due[peer]:
                wait(self._notices[peer])
                self._take_notice(peer)
            cancel(self._notices[peer])
        if self._sent:
            MPI.Request.Waitall(self._sent)
        self._ctrl.Free()
        self._comm.Free()

    def _wait(self, req, peer: int | None = None) -> None:
        """Wait for a point-to-point request with `peer` (None: any)."""
        wait(req, interrupt=lambda: self._interrupt(peer))

    def _wait_collective(self, req, spin: float | None = None) -> None:
        wait(req, interrupt=self._interrupt_collective, spin=spin)

    def _wait_recv(self, req, source: int) -> None:
        """Wait for a receive; one given up on a peer's failure is cancelled, not left posted."""
        try:
            self._wait(req, source)
        except GroupPeerFailed:
            cancel(req)
            raise

    def split(self, color: int) -> GroupComm:
        """The ranks of this group that give the same `color`, as a failure-aware communicator of
        their own (ranked in this group's order); every rank of the group calls it.

        A k-fold trial trains its folds at once on such sub-groups: a fold that fails notifies
        the ranks of its own sub-group only, and the others go on with theirs."""
        # MPI's split blocks until every rank calls it: a failure-aware barrier first, so that a
        # rank that failed before it (reading its data, say) is noticed here instead of hanging the rest
        self.Barrier()
        part = self._comm.Split(color, self.rank)
        try:
            return GroupComm(part)
        finally:
            part.Free()

    # -- mpi4py-like API ---------------------------------------------------------------------
    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    def Barrier(self) -> None:
        self._begin_collective()

    barrier = Barrier

    def Bcast(self, buf, root: int = 0) -> None:
        self._begin_collective()
        self._wait_collective(self._comm.Ibcast(buf, root=root))

    def Allreduce(self, sendbuf, recvbuf, op=None) -> None:
        self._begin_collective()
        self._wait_collective(self._comm.Iallreduce(sendbuf, recvbuf, op=op or self._MPI.SUM))

    def Reduce(self, sendbuf, recvbuf, op=None, root: int = 0) -> None:
        self._begin_collective()
        self._wait_collective(self._comm.Ireduce(sendbuf, recvbuf, op=op or self._MPI.SUM, root=root))

    def Allgather(self, sendbuf, recvbuf) -> None:
        self._begin_collective()
        self._wait_collective(self._comm.Iallgather(sendbuf, recvbuf))

    def Send(self, buf, dest: int, tag: int = 0) -> None:
        self._check()
        self._wait(self._comm.Isend(buf, dest=dest, tag=tag), dest)

    def Recv(self, buf, source: int = 0, tag: int = 0) -> None:
        self._check()
        self._wait_recv(self._comm.Irecv(buf, source=source, tag=tag), source)

    def Allreduce_inplace(self, buf) -> None:
        """Sum a float32 or float64 buffer over the group, in place, without a barrier first: for
        `mpiopt.learn` only, whose every rank joins each such sum (a step's carries a failure; the
        evaluation's follow an allgather of failures), not for user code."""
        self._begin_collective(joined=True)
        kind = self._MPI.DOUBLE if buf.dtype.itemsize == 8 else self._MPI.FLOAT
        # every rank of a synchronous step arrives within moments of the others, and each round of
        # the reduction needs every rank's progress: spin (up to COLLECTIVE_SPIN) rather than sleep
        self._wait_collective(self._comm.Iallreduce(self._MPI.IN_PLACE, [buf, kind], op=self._MPI.SUM),
                              spin=waits().collective_spin)

    # Python objects travel pickled here: they are the user's own in-memory values between the
    # ranks of one job, never state read back from disk.
    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        data = pickle.dumps(obj) if self.rank == root else None
        self._begin_collective()
        return pickle.loads(bcast_bytes(self._comm, data, root, wait=self._wait_collective))

    def allgather(self, obj: Any) -> list[Any]:
        import numpy as np

        MPI = self._MPI
        data = pickle.dumps(obj)
        self._begin_collective()
        sizes = np.zeros(self.size, dtype=np.int64)
        self._wait_collective(self._comm.Iallgather([np.array([len(data)], dtype=np.int64), MPI.INT64_T],
                                                    [sizes, MPI.INT64_T]))
        displs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        buf = bytearray(int(sizes.sum()))
        self._wait_collective(self._comm.Iallgatherv([data, MPI.BYTE], [buf, (sizes, displs), MPI.BYTE]))
        return [pickle.loads(bytes(buf[d:d + s])) for d, s in zip(displs, sizes, strict=True)]

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        out = self.allgather(obj)
        return out if self.rank == root else None

    def allreduce(self, obj: Any, op=None) -> Any:
        op = op or self._MPI.SUM
        values = self.allgather(obj)
        acc = values[0]
        for v in values[1:]:
            acc = op(acc, v)
        return acc

    def reduce(self, obj: Any, op=None, root: int = 0) -> Any:
        out = self.allreduce(obj, op)
        return out if self.rank == root else None

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        self._check()
        self._wait(self._comm.Isend([pickle.dumps(obj), self._MPI.BYTE], dest=dest, tag=TAG_USER + tag), dest)

    def recv(self, source: int = 0, tag: int = 0) -> Any:
        self._check()
        data, _ = recv_bytes(self._comm, source, TAG_USER + tag, interrupt=lambda: self._interrupt(source))
        return pickle.loads(bytes(data))

    # -- non-blocking pieces for mpiopt.learn's master loop -----------------------------------
    @property
    def ANY_SOURCE(self) -> int:
        return self._MPI.ANY_SOURCE

    def Irecv(self, buf, source: int, tag: int):
        """Post a receive of a float32 buffer; poll it with `test_any`."""
        return self._comm.Irecv([buf, self._MPI.FLOAT], source=source, tag=tag)

    def Isend(self, buf, dest: int, tag: int):
        return self._comm.Isend([buf, self._MPI.FLOAT], dest=dest, tag=tag)

    def wait(self, req) -> None:
        self._wait(req)

    def cancel(self, reqs: list) -> None:
        """Cancel receives posted with `Irecv` that will not be matched now."""
        for req in reqs:
            cancel(req)

    def test_any(self, reqs: list) -> int | None:
        """The index of a completed request, or None; raises if a peer failed, or returned a
        while ago."""
        self._interrupt()
        index, flag = self._MPI.Request.Testany(reqs)
        if flag and index != self._MPI.UNDEFINED:
            return index
        return None

    def probe_bytes(self, tag: int) -> tuple[int, bytes] | None:
        """A waiting byte message with `tag` from any rank, received, or None."""
        status = self._MPI.Status()
        if not self._comm.Iprobe(source=self._MPI.ANY_SOURCE, tag=tag, status=status):
            return None
        buf = bytearray(status.Get_count(self._MPI.BYTE))
        self._comm.Recv([buf, self._MPI.BYTE], source=status.Get_source(), tag=tag)
        return status.Get_source(), bytes(buf)

    def send_bytes(self, data: bytes, dest: int, tag: int) -> None:
        self._check()
        self._wait(self._comm.Isend([data, self._MPI.BYTE], dest=dest, tag=tag), dest)

    def recv_bytes(self, source: int, tag: int) -> bytes:
        """The next byte message from `source` with `tag`, waited for without spinning."""
        self._check()
        data, _ = recv_bytes(self._comm, source, tag, interrupt=lambda: self._interrupt(source))
        return bytes(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._comm, name)
