"""Test functions of bench/scale.py (minimised): Hartmann-6 on [0, 1]^6 (minimum -3.32237) and
Ackley-20 on [-5, 10]^20 (minimum 0 at the origin)."""
import math

ALPHA = [1.0, 1.2, 3.0, 3.2]
A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886], [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
     [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650], [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]


def hartmann6(params):
    x = [params[f"x{i}"] for i in range(1, 7)]
    return -sum(ALPHA[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j]) ** 2 for j in range(6))) for i in range(4))


def ackley20(params):
    x = [params[f"x{i}"] for i in range(1, 21)]
    d = len(x)
    s1 = sum(v * v for v in x) / d
    s2 = sum(math.cos(2 * math.pi * v) for v in x) / d
    return -20.0 * math.exp(-0.2 * math.sqrt(s1)) - math.exp(s2) + 20.0 + math.e


SPACES = {
    "hartmann6": (hartmann6, {f"x{i}": (0.0, 1.0) for i in range(1, 7)}),
    "ackley20": (ackley20, {f"x{i}": (-5.0, 10.0) for i in range(1, 21)}),
}
