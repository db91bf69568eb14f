"""Starting `search` and `train` on every rank: before MPI, MPI itself, and how a job ends.

Before MPI starts, a rank knows its rank and the job's size only from the launcher's environment
(`env_rank`, `env_size`): enough to print an error once, to relaunch under mpiexec for `--np`,
and to set the thread counts before TensorFlow loads. `mpi_main` then starts MPI, gives each rank
its device, and runs the command so that no rank is ever left waiting: an input error agreed by
every rank is exit code 2, Ctrl-C or SIGTERM 130, and anything else aborts the whole job.
"""
from __future__ import annotations

import contextlib
import logging
import os
import queue
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from . import _env
from ._errors import ConfigError, file_error, storage_text

log = logging.getLogger(__name__)

# A rank that ends the job pauses this long before MPI_Abort: mpiexec forwards its output through
# pipes that the abort tears down, and the line saying why the job failed must reach the user.
ABORT_GRACE_S = 1.0
# The same after a search's closing lines, which search.log keeps as well.
END_GRACE_S = 0.2
# a SIGTERM's KeyboardInterrupt can land where Python ignores exceptions (a finalizer, a weakref
# callback), and a rank may wait for a peer the signal killed (a shell wrapping each rank dies at
# once): a rank still alive this long after the signal exits anyway, with the same code. Under a
# batch system's default 30 s between SIGTERM and SIGKILL, so the job still ends as interrupted.
TERM_GRACE_S = 10.0
# what Ctrl-C or SIGTERM before any rank began its command says
INTERRUPTED_AT_START = "while starting; nothing was written"


# -- before MPI starts -------------------------------------------------------------------------
def env_rank() -> int:
    """This process's world rank, from the launcher's environment (0 without one)."""
    return _env.launcher_rank()


def env_size() -> int:
    """The job's world size, from the launcher's environment (1 without one)."""
    return _env.launcher_size()


def say_error(message: str) -> None:
    """One `mpiopt: error:` line on stderr, from rank 0 only."""
    if env_rank() == 0:
        print(f"mpiopt: error: {message}", file=sys.stderr, flush=True)


def interrupted_outside_a_command(what: str) -> int:
    """Ctrl-C or SIGTERM outside a search or a training: one line from rank 0, exit 130."""
    if env_rank() == 0:
        print(f"mpiopt: interrupted {what}".rstrip(), file=sys.stderr, flush=True)
    return 130


_held = [False]  # whether this process relaunches itself under mpiexec (--np), whose rank 0 warns instead


def hold_warnings(held: bool) -> None:
    """Whether `warn_once` says nothing in this command: it runs again under mpiexec, which says it."""
    _held[0] = held


def warn_once(message: str) -> None:
    """A warning before MPI starts, when every rank says the same: printed by rank 0 only."""
    if env_rank() == 0 and not _held[0]:
        log.warning("%s", message)


def relaunch(argv: list[str], n: int) -> int:
    """`--np N`: run this same command under mpiexec with N ranks (replaces this process)."""
    if env_size() > 1:
        raise ConfigError("--np: already running under mpiexec; give the rank count to mpiexec only")
    here = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(here) if here.exists() else shutil.which("mpiexec") or shutil.which("mpirun")
    if mpiexec is None:
        raise ConfigError("--np: no mpiexec found (pip install mpich, or put an MPI's mpiexec on PATH)")
    cmd = [mpiexec, "-n", str(n), *_python_running_mpiopt(), *_without_np(argv)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(mpiexec, cmd)
    return 1  # not reached


def _python_running_mpiopt() -> list[str]:
    """This Python, running the installed mpiopt: `-m` alone would put the working directory first
    on the import path, where a folder named mpiopt (a clone's, run from its parent) would shadow it."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", "mpiopt"]
    return [sys.executable, "-c", "import runpy, sys; sys.path.pop(0); runpy.run_module('mpiopt', run_name='__main__', "
            "alter_sys=True)"]


def _without_np(argv: list[str]) -> list[str]:
    """`argv` less `--np N` and `--np=N`."""
    rest: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--np":
            skip = True
        elif not a.startswith("--np="):
            rest.append(a)
    return rest


def prepare_threads() -> None:
    """Set TensorFlow's and OpenMP's thread counts before TensorFlow loads; a value the user set wins.

    Several ranks on a node get one intra-op and one inter-op thread each (MPIOPT_THREADS), or
    they fight for the cores. These are writes to the environment, for TensorFlow to read."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # the CUDA probe on CPU nodes is noise
    if env_size() > 1:
        threads = str(_env.get("MPIOPT_THREADS"))
        for var in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
            os.environ.setdefault(var, threads)


def hold_stops_until_mpi(handlers: dict[int, Any], stops: list[int]) -> None:
    """Under a launcher, note a Ctrl-C or SIGTERM until every rank has started MPI and agreed on
    how the start went (`agree_at_start`), then act on it on every rank together: a rank that
    leaves before MPI_Init holds the others there for ever (MPICH waits in it for every rank).
    `handlers`: the signals' own, for after; `stops`: the signals that came already, read once
    the note is in place, so that none falls between."""
    def note(signum, frame):
        _interrupts.stopped_before_mpi = True

    _interrupts.before_mpi = dict(handlers)
    for sig in handlers:
        signal.signal(sig, note)
    if stops:
        _interrupts.stopped_before_mpi = True


def release_stops() -> None:
    """No MPI after all (a command without it): the held signals act as usual from here, and a
    Ctrl-C or SIGTERM already noted raises KeyboardInterrupt now."""
    if _restore_held_signals():
        raise KeyboardInterrupt


def _restore_held_signals() -> bool:
    """The held signals' own handlers back; whether a stop was noted while they were held."""
    for sig, handler in _interrupts.before_mpi.items():
        signal.signal(sig, handler)
    _interrupts.before_mpi = {}
    stopped, _interrupts.stopped_before_mpi = _interrupts.stopped_before_mpi, False
    return stopped


def start_mpi():
    """COMM_WORLD, MPI started. Signals held before stay held until `let_stops_go`."""
    from . import transport

    return transport.world()


# -- under MPI ---------------------------------------------------------------------------------
def mpi_main(cfg, command: Callable[[Any, str | None], int], *, coordinator: bool,
             interrupted: Callable[[], str]) -> int:
    """Start MPI and run `command(comm, placement)` on every rank; returns this rank's exit code.

    `placement` is the device plan, on world rank 0 only. `coordinator`: world rank 0 coordinates
    (a search) and gets no device when there are several ranks. A ConfigError that `command`
    raises must be raised on every rank alike (see `agree_or_raise`). `interrupted`: what rank 0
    says after Ctrl-C, SIGTERM or a file error, asked when said (the run directory may be gone)."""
    from . import transport

    try:
        comm = start_mpi()
    except KeyboardInterrupt:  # while mpi4py loads the MPI library of one process: no command began
        return interrupted_outside_a_command(INTERRUPTED_AT_START)
    except Exception as exc:  # no MPI library at all
        say_error(f"cannot initialise MPI: {transport.why_no_mpi(exc)}")
        return 1
    if comm.Get_size() > 1:
        log.debug("waits: %s", transport.configure_waits(comm))
    if comm.Get_rank() == 0:
        _interrupts.line = interrupted
    code = _run_rank(comm, cfg, command, coordinator, interrupted)
    return end_rank(comm, code) if comm.Get_size() > 1 else code


def _run_rank(comm, cfg, command: Callable[[Any, str | None], int], coordinator: bool,
              interrupted: Callable[[], str]) -> int:
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        with starting(comm):  # a start-up error some ranks met before MPI started (cli.main)
            placement = place_devices(comm, cfg, coordinator=0 if coordinator and size > 1 else None)
        return command(comm, placement)
    except ConfigError as exc:  # raised on every rank alike (agreed before)
        if rank == 0:
            print(f"mpiopt: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        say_interrupted()
        return 130
    except Exception as exc:  # a bug, a full disk, a lost file: never leave the other ranks blocked
        if file_error(exc):
            _file_error(comm, exc, interrupted)
        else:
            _internal_error(comm, exc)
        return 1


def end_rank(comm, code: int) -> int:
    """End this rank of a job of several so that the job ends with world rank 0's code (else the
    highest code of a rank), and without MPICH's BAD TERMINATION banner.

    mpiexec kills every rank still running once one exits with a code other than 0, and ranks
    that agreed on 2 or 130 leave Python at different speeds (a stopped search also leaves
    messages no one received, on which MPI_Finalize fails). So the ranks first agree on the
    highest code, which also waits until each is done with its files; 0 leaves Python as usual,
    and any other ends the job from rank 0 with MPI_Abort, whose own line is not shown."""
    from . import transport

    rank = comm.Get_rank()
    try:
        worst = transport.highest(comm, code)
    except KeyboardInterrupt:  # a Ctrl-C or SIGTERM while ending
        say_interrupted()
        worst = code = 130
    if worst == 0:
        with contextlib.suppress(KeyboardInterrupt):  # the job is done: a signal from now on would only kill
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Python's finalization, which restores their defaults
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (exit 2 or 15 for a finished search)
        return code
    remove_mpich_shared_memory()  # on every node: the abort kills the other nodes' ranks before MPICH can
    if rank == 0:
        abort_job(comm, code or worst, END_GRACE_S, quiet=True)
    time.sleep(TERM_GRACE_S)  # until rank 0's MPI_Abort ends this rank
    os._exit(code or worst)


@dataclass
class _Interrupts:
    """This process's Ctrl-C and SIGTERM: held for a safe point (`interrupts_at_safe_points`) or
    raised at once as KeyboardInterrupt, and what rank 0 says once interrupted."""

    held: bool = False  # within interrupts_at_safe_points
    pending: bool = False  # one came there and was not raised yet
    line: Callable[[], str] | None = None  # rank 0's `mpiopt: interrupted` line, until it is said
    # the watchdog's alarm: SimpleQueue.put is reentrant, safe in a signal handler (a thread's
    # start is not: it takes locks the interrupted code may hold)
    alarm: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    watchdog: threading.Thread | None = None
    raised: bool = False  # a KeyboardInterrupt of a signal was raised in this process
    pending_at: float = 0.0  # time.monotonic() of the held one
    # Ctrl-C and SIGTERM of a rank under a launcher before MPI started (`hold_stops_until_mpi`)
    before_mpi: dict[int, Any] = field(default_factory=dict)  # the handlers held signals had
    stopped_before_mpi: bool = False


_interrupts = _Interrupts()
DUPLICATE_S = 0.5  # a held signal's twin within this is one stop delivered twice


def catch_sigterm() -> None:
    """From here on a SIGTERM (a batch system's, or mpiexec's) stops this process as Ctrl-C does,
    and ends it for sure TERM_GRACE_S after."""
    if _interrupts.watchdog is None:
        _interrupts.watchdog = threading.Thread(target=_watch, name="mpiopt-sigterm-watchdog", daemon=True)
        _interrupts.watchdog.start()
    signal.signal(signal.SIGTERM, _terminate)


def _terminate(signum, frame):
    """A batch system's SIGTERM (or a Ctrl-C where interrupts are held): stop as cleanly as
    Ctrl-C, now or at the next safe point. Once a KeyboardInterrupt was raised here, later
    signals only arm the watchdog: a batch system signals every process and mpiexec forwards the
    signal again, and a second KeyboardInterrupt would land in the cleanup the first began."""
    _interrupts.alarm.put(signum)
    if _interrupts.raised:
        return
    if _interrupts.held and not _interrupts.pending:
        _interrupts.pending, _interrupts.pending_at = True, time.monotonic()
        return
    if _interrupts.held and time.monotonic() - _interrupts.pending_at < DUPLICATE_S:
        return  # the same stop delivered twice (to this process and through mpiexec), not a second Ctrl-C
    _raise_interrupt()  # a second one while the first waits for its safe point: at once, for both


def _watch() -> None:
    """TERM_GRACE_S after a signal, end this process with 130 (rank 0 saying it was interrupted,
    if it has not yet), wherever it is stuck."""
    _interrupts.alarm.get()
    time.sleep(TERM_GRACE_S)
    say_interrupted()
    os._exit(130)


def interrupted_line(line: Callable[[], str]) -> None:
    """From now on rank 0 says `line()` if interrupted (as the search's outcome changes)."""
    if _interrupts.line is not None:  # rank 0, its line not said yet
        _interrupts.line = line


def say_interrupted() -> None:
    """Rank 0's `mpiopt: interrupted; ...` line, once."""
    line, _interrupts.line = _interrupts.line, None
    if line is None:
        return
    try:
        text = line()
    except Exception:  # the watchdog's thread must reach its exit whatever the line's own checks meet
        text = "see the run directory"
    print(f"mpiopt: interrupted; {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def interrupts_at_safe_points():
    """Within, Ctrl-C and SIGTERM raise KeyboardInterrupt only at `raise_if_interrupted` (or at
    the end, where none was): raised between any two bytecodes, it can leave a lock of the
    threading module held (a Condition's __enter__ is Python code), and cleanup then waits on
    it. For the coordinator, which waits often and runs no user code; a second signal raises at
    once."""
    before = signal.signal(signal.SIGINT, _terminate)
    _interrupts.held = True
    try:
        yield
    finally:
        _interrupts.held = False
        signal.signal(signal.SIGINT, before)
        pending, _interrupts.pending = _interrupts.pending, False
    if pending:
        _raise_interrupt()


def raise_if_interrupted() -> None:
    """A safe point: raise the KeyboardInterrupt of a signal held since the last one."""
    if _interrupts.pending:
        _raise_interrupt()


def _raise_interrupt() -> NoReturn:
    """Raise the KeyboardInterrupt of the signals taken so far; later ones only arm the watchdog."""
    _interrupts.pending, _interrupts.raised = False, True
    raise KeyboardInterrupt


def _file_error(comm, exc: OSError, interrupted: Callable[[], str]) -> None:
    """Say which file failed and why (a full disk, a lost permission), on this rank's stderr, and
    end the job."""
    log.debug("traceback of the file error", exc_info=exc)
    print(f"mpiopt: error on world rank {comm.Get_rank()}: {storage_text(exc)}; the job stops: {interrupted()}",
          file=sys.stderr, flush=True)
    _end_job(comm, quiet=True)


def _internal_error(comm, exc: Exception) -> None:
    """Say where `exc` happened, on this rank's stderr; with several ranks, abort the job."""
    log.debug("traceback of the internal error", exc_info=exc)
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" ({tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    print(f"mpiopt: internal error on world rank {comm.Get_rank()}{where}: {type(exc).__name__}: {exc}; stopping "
          "the whole job (finished trials are in the journal: fix the cause, then --resume; "
          "MPIOPT_LOG_LEVEL=DEBUG shows the traceback)", file=sys.stderr, flush=True)
    _end_job(comm, quiet=False)


def _end_job(comm, *, quiet: bool) -> None:
    """After an error's line: with several ranks, abort the job (exit 1); alone, close the logs."""
    if comm.Get_size() > 1:
        abort_job(comm, 1, ABORT_GRACE_S, quiet=quiet)
    else:
        logging.shutdown()


def abort_job(comm, code: int, grace_s: float, *, quiet: bool = False) -> None:
    """End every rank of the MPI job with `code`, once this rank's last lines had `grace_s` to
    reach the console; `quiet`: without MPI's own line on the abort (the job's end is said)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed console must not stop the abort
            stream.flush()
    time.sleep(grace_s)
    if quiet:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
    remove_mpich_shared_memory()
    comm.Abort(code)


def remove_mpich_shared_memory() -> None:
    """Unlink the /dev/shm files MPICH maps into this process. MPICH removes them at MPI_Finalize,
    which MPI_Abort skips, and each left behind holds megabytes of the node's memory until reboot.
    The ranks keep their mappings, so the job's last messages are not disturbed."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:  # not Linux
        return
    for path in {line.split(maxsplit=5)[-1] for line in maps if " /dev/shm/mpich_shm_" in line
                 and not line.endswith("(deleted)")}:
        with contextlib.suppress(OSError):  # another rank of the node was first
            os.unlink(path)


def place_devices(comm, cfg, *, coordinator: int | None) -> str | None:
    """Give this rank its GPU before TensorFlow starts (SPEC §2, GPUs); the job's plan on rank 0.

    The ranks of each node are dealt its GPUs; a bad device list or more ranks than places on a
    node is a ConfigError on every rank. Returns, on world rank 0, one line per node."""
    from . import devices, transport

    rank, size = comm.Get_rank(), comm.Get_size()
    plan, found, error = None, (), None
    try:
        found = devices.node_devices()
    except ConfigError as exc:
        error = exc
    seen = transport.share_with_node(comm, found) if size > 1 else {rank: found}
    first = next(iter(seen))
    if error is None:
        try:
            plan = devices.plan_node(seen, cfg.training["ranks_per_gpu"], coordinator=coordinator,
                                     node=f"the node of world rank {first} ({transport.host_name()})"
                                     if size > 1 else "this machine",
                                     source=cfg.source or str(cfg.path))
        except ConfigError as exc:
            error = exc
    agree_or_raise(comm, error)
    devices.narrow(plan.assigned[rank], shared=plan.shares_devices(), devices=found)
    lines = transport.gather_text(comm, plan.describe() if rank == first else None) if size > 1 \
        else [plan.describe()]
    return "; ".join(line for line in lines if line) if rank == 0 else None


@contextlib.contextmanager
def starting(comm) -> Iterator[None]:
    """The start of a job under MPI: `agree_at_start`, then the body (placing the ranks, in MPI's
    blocking calls) with signals still held, then `let_stops_go`. A body that raises lets them go
    on this rank only: its error is agreed on every rank, or ends the job."""
    agree_at_start(comm)
    try:
        yield
    except BaseException:
        _release_held_signals()
        raise
    let_stops_go(comm)


def agree_at_start(comm) -> None:
    """Raise, on every rank, the KeyboardInterrupt of a Ctrl-C or SIGTERM any rank noted before
    (`hold_stops_until_mpi`), else the first start-up error any rank met before MPI started
    (`_env.deferred`), saying which ranks and hosts met it where not all did; a collective.
    Signals stay held, as the ranks go on into MPI's blocking calls of the start (placing them on
    nodes and devices), until `let_stops_go` (or until this raises)."""
    from .transport import agree, host_name

    error = _env.deferred()
    several = comm.Get_size() > 1
    try:
        stopped = _any_rank_stopped(comm)
        message = agree(comm, str(error) if error else None) if several and not stopped else None
        if stopped:
            let_stops_go(comm, agreed=True)
        if error is not None and not several:
            raise error
        if message is None:
            return
        seen = comm.allgather(host_name() if error else None)
        failed = {rank: host for rank, host in enumerate(seen) if host is not None}
        raise ConfigError(message if len(failed) == len(seen) else f"{message} ({ranks_on_hosts(failed)})")
    except BaseException:
        _release_held_signals()
        raise


def let_stops_go(comm, *, agreed: bool = False) -> None:
    """The end of the start: raise, on every rank, the KeyboardInterrupt of a stop any rank noted
    while signals were held (a collective, unless `agreed` already), then let Ctrl-C and SIGTERM
    raise KeyboardInterrupt (`catch_sigterm`). A rank that had raised alone would have left the
    others in a blocking call of MPI's for ever (a batch system's SIGTERM, which every rank gets,
    found some ranks in it and others not). One noted during this agreement is this rank's, as
    any later one."""
    try:
        stopped = agreed or _any_rank_stopped(comm)
    finally:
        stopped |= _release_held_signals()
    if stopped:
        _stopped_at_start()


def _any_rank_stopped(comm) -> bool:
    """Whether any rank noted a Ctrl-C or SIGTERM while signals were held; a collective."""
    from .transport import highest

    if comm.Get_size() == 1:
        return _interrupts.stopped_before_mpi
    return bool(highest(comm, int(_interrupts.stopped_before_mpi)))


def _release_held_signals() -> bool:
    """The held signals' handlers back, and SIGTERM caught; whether one was noted meanwhile."""
    stopped = _restore_held_signals()
    catch_sigterm()
    return stopped


def _stopped_at_start() -> NoReturn:
    """The KeyboardInterrupt of a stop noted before MPI started, with the watchdog armed; rank 0
    says that nothing was written."""
    if _interrupts.line is not None:
        _interrupts.line = None
        interrupted_outside_a_command(INTERRUPTED_AT_START)
    _interrupts.alarm.put(signal.SIGINT)
    _raise_interrupt()


def ranks_on_hosts(ranks: dict[int, str], shown: int = 8) -> str:
    """'world rank 3 on host a' / 'world ranks 3, 4, 5 and 9 more on hosts a, b' (rank: its host)."""
    from ._results_view import first_few

    hosts = sorted(set(ranks.values()))
    return (f"world rank{'s' if len(ranks) > 1 else ''} {first_few(sorted(ranks), shown)} "
            f"on host{'s' if len(hosts) > 1 else ''} {', '.join(hosts)}")


def agree_or_raise(comm, error: ConfigError | None) -> None:
    """Raise, on every rank, the first error any rank had (lowest rank first); a collective."""
    from .transport import agree

    message = agree(comm, str(error) if error else None) if comm.Get_size() > 1 else (str(error) if error else None)
    if message:
        raise ConfigError(message)
