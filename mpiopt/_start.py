"""The `mpiopt` command, as installed and as `python -m mpiopt`. mpiopt's modules load with
Ctrl-C and SIGTERM held: a stop in the first fraction of a second (mpiexec forwards it to every
rank) ends with rank 0's one line, where it raised inside an import, a traceback on every rank."""
from __future__ import annotations

# the interpreter's own module, loaded with it: `signal` builds its enums as it imports, a
# tenth of a second in which a Ctrl-C would still land in an import
import _signal


def main() -> int:
    stops: list[int] = []
    held = (_signal.SIGINT, _signal.SIGTERM)
    before = {sig: _signal.signal(sig, lambda signum, frame: stops.append(signum)) for sig in held}
    from .cli import main as run_command
    from .launch import INTERRUPTED_AT_START, interrupted_outside_a_command

    for sig, handler in before.items():
        _signal.signal(sig, handler)
    if stops:
        return interrupted_outside_a_command(INTERRUPTED_AT_START)
    return run_command()
