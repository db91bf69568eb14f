"""Hartmann-6 (minimum -3.32237) that sleeps MPIOPT_BENCH_SLEEP seconds first: a stand-in for a
training run of known length, for bench/coordinator.py; `hartmann6_curve` reports its steps."""
import math
import os
import time

A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886], [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
     [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650], [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]
ALPHA = [1.0, 1.2, 3.0, 3.2]


STEPS = 9  # the epochs of a trial that reports (training.epochs of bench/coordinator.py --scheduler)


def hartmann6(params):
    time.sleep(float(os.environ.get("MPIOPT_BENCH_SLEEP", "0")))
    return hartmann6_value(params)


def hartmann6_curve(params, trial):
    """The same sleep in STEPS steps, each reporting a value that falls towards Hartmann-6's: a
    learning curve for a scheduler to judge."""
    final = hartmann6_value(params)
    for step in range(1, STEPS + 1):
        time.sleep(float(os.environ.get("MPIOPT_BENCH_SLEEP", "0")) / STEPS)
        trial.report(step, objective=final + 1.0 / step)
        if trial.should_stop():
            break
    return final + 1.0 / step


def hartmann6_value(params):
    x = [params[f"x{i}"] for i in range(1, 7)]
    return -sum(ALPHA[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j]) ** 2 for j in range(6))) for i in range(4))
