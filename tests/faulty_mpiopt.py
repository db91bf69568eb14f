"""`mpiopt` with a fault outside trial code, for the error-path tests: `python faulty_mpiopt.py
TRIAL ARGS...` runs `mpiopt ARGS...`, and the group rank that receives trial TRIAL raises the
moment the task arrives (before any trial code runs)."""
import sys

from mpiopt import cli, transport


def inject(trial: int) -> None:
    receive = transport.GroupChannel.next_task

    def next_task(self):
        task = receive(self)
        if task is not None and task.trial == trial:
            raise RuntimeError(f"fault injected outside trial code at trial {trial}")
        return task

    transport.GroupChannel.next_task = next_task


if __name__ == "__main__":
    inject(int(sys.argv[1]))
    sys.exit(cli.main(sys.argv[2:]))
