"""The `mpiopt` command, as installed and as `python -m mpiopt`. mpiopt's modules load with
Ctrl-C and SIGTERM held (`launch.hold_stops_until_mpi`): a stop in the first fraction of a
second (mpiexec forwards it to every rank) ends with rank 0's one line, where it raised inside
an import, a traceback on every rank, and where a rank left before MPI started, a hang."""
from __future__ import annotations

# the interpreter's own module, loaded with it: `signal` builds its enums as it imports, a
# tenth of a second in which a Ctrl-C would still land in an import
import _signal


def main() -> int:
    stops: list[int] = []
    # a signal the process was started to ignore (a background job's SIGINT) stays ignored
    held = [sig for sig in (_signal.SIGINT, _signal.SIGTERM) if _signal.getsignal(sig) != _signal.SIG_IGN]
    before = {sig: _signal.signal(sig, lambda signum, frame: stops.append(signum)) for sig in held}
    try:
        from .cli import main as run_command
        from .launch import hold_stops_until_mpi
    except BaseException:
        for sig, handler in before.items():
            _signal.signal(sig, handler)
        raise
    hold_stops_until_mpi(before, stops)  # until the command releases them, or MPI has started
    return run_command()
