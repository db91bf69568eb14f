"""Test objectives: Branin that takes a while, and objectives that misbehave."""
import math
import os
import time


def branin(params):
    time.sleep(float(os.environ.get("MPIOPT_TEST_SLEEP", "0.2")))
    x, y = params["x"], params["y"]
    b, c, t = 5.1 / (4 * math.pi**2), 5.0 / math.pi, 1.0 / (8 * math.pi)
    return (y - b * x**2 + c * x - 6.0) ** 2 + 10.0 * (1 - t) * math.cos(x) + 10.0


def with_comm(params, comm):
    """Every rank of the group computes a share; the group sums it."""
    share = (params["x"] + params["y"]) / comm.Get_size()
    total = comm.allreduce(share)
    ranks = comm.allgather(comm.Get_rank())
    return {"objective": total, "group_size": float(len(ranks))}


def takes_x_and_y(x, y):
    """Expects the parameters as arguments: a function gets them in one mapping."""
    return x * y


def takes_trial_first(params, trial, comm):
    """`trial` before `comm`: mpiopt passes (params, comm, trial=...)."""
    return branin(params)


def failing_rank(params, comm):
    """One rank raises while the other waits for it in a collective: the group must not hang."""
    bad = 1 if params["y"] < 7.5 else 0
    if comm.Get_rank() == bad and params["x"] > 0:
        raise RuntimeError(f"rank {bad} broke")
    return comm.allreduce(params["x"] + params["y"])


def fails_before_a_large_sum(params, comm):
    """Rank 2 of 4 raises where the others sum megabytes (the sum MPICH could not drop)."""
    import numpy as np

    if comm.Get_rank() == 2 and params["x"] > 2.5:
        raise RuntimeError("rank 2 broke")
    total = np.zeros(200_000)
    comm.Allreduce(np.full(200_000, 1.0), total)
    comm.Bcast(total, root=0)
    return float(total[0]) + params["x"] + params["y"]


def bcast_from_rank_0(params, comm):
    """Valid: rank 0 is done once it has sent, and may return before the last rank began."""
    return comm.bcast(params["x"] + params["y"] if comm.Get_rank() == 0 else None)


def full_disk(params, comm):
    """While a file `full` lies beside this module, rank 0 of the group meets a full disk at x > 0,
    with its peer waiting for it in a collective: the job must stop, not fail the trial or hang."""
    import errno
    from pathlib import Path

    if comm.Get_rank() == 0 and params["x"] > 0 and (Path(__file__).parent / "full").exists():
        raise OSError(errno.ENOSPC, "No space left on device")  # as a write() says it: naming no file
    return comm.allreduce(params["x"] + params["y"])


def unwritable(params):
    """Meets an OSError: x picks which (a full disk, a file of the run it may not write, one of its own)."""
    import errno

    if params["x"] < 0:
        raise OSError(errno.ENOSPC, "No space left on device")
    if params["x"] < 5:
        raise PermissionError(errno.EACCES, "Permission denied", os.environ["MPIOPT_TEST_UNWRITABLE"])
    raise PermissionError(errno.EACCES, "Permission denied", "/etc/shadow")


def moody(params):
    """Fails, diverges or returns a wrong type depending on x."""
    x = params["x"]
    if x < -2:
        raise ValueError("x is too small for this objective")
    if x < 0:
        return float("nan")
    if x < 2:
        return "not a number"
    return (x - 5.0) ** 2 + params["y"]


def stubborn(params):
    """Past x > 5 it blocks the alarm signal and sleeps: only the coordinator's grace period helps."""
    import signal

    if params["x"] > 5:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(3600)
    return branin(params)


def sleepy(params):
    """Sleeps past any time limit when x > 5 (an alarm interrupts it)."""
    if params["x"] > 5:
        time.sleep(3600)
    return branin(params)


def returns_string(params):
    return "0.5"


_CALLS = [0]


def returns_string_from_its_third_call(params):
    """Branin twice (in this process), then a string: a contract broken after trials completed."""
    _CALLS[0] += 1
    return "0.5" if _CALLS[0] >= 3 else branin(params)


def fails_then_returns_string(params):
    """Raises once (in this process), then a string: a contract broken after a failed trial only."""
    _CALLS[0] += 1
    if _CALLS[0] == 1:
        raise RuntimeError("the first call fails")
    return "0.5"


def returns_list(params):
    return [params["x"], params["y"]]


def returns_dict_without_metric(params):
    return {"loss": params["x"]}


def reads_a_parameter_not_in_the_space(params):
    return params["x"] + params["z"]


def looks_up_its_own_dict(params):
    return {"a": 1.0}["b"] + params["x"]


def takes_three(params, comm, extra):
    return 0.0


def picky(params):
    """Branin, but fails for x < 0."""
    if params["x"] < 0:
        raise ValueError("x is too small for this objective")
    return branin(params)


def always_fails(params):
    if params["y"] > 13:
        raise KeyError("a rarer error")
    raise ValueError("layer sizes do not match")


def device_of(params):
    """Branin, with the GPU this rank was given (CUDA_VISIBLE_DEVICES) and whether memory grows."""
    import os

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return {"objective": branin(params), "device": float(visible) if visible else -1.0,
            "growth": 1.0 if os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true" else 0.0}


def branin_curve(params, comm, trial):
    """Every rank of the group trains 9 steps towards Branin's value and asks whether to stop after
    each; every rank reports (x > 2.5), or rank 0 alone (x <= 2.5). A scheduler may stop it."""
    final = branin(params)
    for step in range(1, 10):
        time.sleep(float(os.environ.get("MPIOPT_TEST_SLEEP", "0.2")) / 9)
        value = comm.allreduce(final + 30.0 / step) / comm.Get_size()
        if params["x"] > 2.5 or comm.Get_rank() == 0:
            trial.report(step, objective=value)
        if trial.should_stop():
            break
    return final + 30.0 / step


def curve_or_fail(params, trial):
    """A learning curve towards Branin's value, reported each step; fails for x > 9 (a broken model)."""
    final = branin(params)
    for step in range(1, 10):
        time.sleep(float(os.environ.get("MPIOPT_TEST_SLEEP", "0.2")) / 9)
        if params["x"] > 9 and step == 2:
            raise ValueError("the model broke at step 2")
        trial.report(step, objective=final + 30.0 / step, loss=final / 10 + 3.0 / step)
        if trial.should_stop():
            break
    return {"objective": final + 30.0 / step, "loss": final / 10 + 3.0 / step}


def two_goals(params):
    """A loss and a size that pull apart, over a conditional space: fails if an inactive
    parameter is passed (momentum without sgd, width2 without two layers)."""
    if ("momentum" in params) != (params["optimizer"] == "sgd"):
        raise ValueError(f"momentum passed wrongly: {params}")
    if ("width2" in params) != (params["layers"] == 2):
        raise ValueError(f"width2 passed wrongly: {params}")
    size = params["width1"] + params.get("width2", 0)
    loss = 1.0 / size + (params.get("momentum", 0.5) - 0.9) ** 2
    return {"loss": loss, "size": float(size)}


def reports_as_told(params, trial):
    """Reports the (step, metrics) pairs of params['reports'] and returns 1.0: the report's contract, tried."""
    for step, metrics in params["reports"]:
        trial.report(**metrics) if step is None else trial.report(step, **metrics)
        if trial.should_stop():
            break
    return 1.0


def swallows_a_bad_report(params, trial):
    """Catches the error of a report against the contract, and returns all the same."""
    try:
        trial.report(1, accuracy=0.5)
    except Exception:
        pass
    return 1.0


def never_asks_to_stop(params, trial):
    """Reports twice training.epochs (9) steps and never calls trial.should_stop()."""
    for step in range(1, 19):
        trial.report(step, objective=branin(params) + 30.0 / step)
    return branin(params)


def reports_accuracy_only(params, trial):
    """Reports a metric, but not the figure of merit (`objective`)."""
    for step in range(1, 4):
        trial.report(step, accuracy=1.0 / (1.0 + branin(params)))
    return branin(params)


def steady_curve(params, trial):
    """A learning curve towards Branin's value, a step every MPIOPT_TEST_SLEEP / 4 seconds, each
    reported: a search under a scheduler always has reports and decisions on their way."""
    x, y = params["x"], params["y"]
    b, c, t = 5.1 / (4 * math.pi**2), 5.0 / math.pi, 1.0 / (8 * math.pi)
    final = (y - b * x**2 + c * x - 6.0) ** 2 + 10.0 * (1 - t) * math.cos(x) + 10.0
    for step in range(1, 10):
        time.sleep(float(os.environ.get("MPIOPT_TEST_SLEEP", "0.2")) / 4)
        trial.report(step, objective=final + 30.0 / step)
        if trial.should_stop():
            break
    return final + 30.0 / step


def until_told(params, trial):
    """Trains until the scheduler says stop, however many steps that takes."""
    step = 0
    while True:
        step += 1
        trial.report(step, objective=100.0 / step)
        if trial.should_stop():
            return 100.0 / step


def returning_rank(params, comm):
    """Rank 1 returns while rank 0 waits for it in a collective: the objective's misuse, not a hang."""
    if comm.Get_rank() == 1:
        return 0.0
    return comm.allreduce(params["x"] + params["y"])


def exits(params):
    """Calls sys.exit as a script would."""
    import sys

    sys.exit(3)


def swallows_every_exception(params):
    """Loops for MPIOPT_TEST_SLEEP seconds, catching every exception (a retry loop)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < float(os.environ.get("MPIOPT_TEST_SLEEP", "0")):
        try:
            time.sleep(0.05)
        except Exception:
            pass
    return 1.0


def changes_directory(params, trial):
    """Reports a step from a folder of its own (os.chdir), then returns branin's value."""
    os.makedirs("elsewhere", exist_ok=True)
    os.chdir("elsewhere")
    trial.report(1, objective=1.0)
    return branin(params)


def late_rank(params, comm):
    """Rank 1 goes on for MPIOPT_TEST_SLEEP seconds after rank 0 returned."""
    if comm.Get_rank() == 1:
        time.sleep(float(os.environ.get("MPIOPT_TEST_SLEEP", "0")))
    return params["x"]


def with_a_note(params):
    """Returns its value with entries that are no numbers."""
    return {"objective": branin(params), "note": "fine", "where": {"host": "n1"}}
