"""Test functions of bench/scale.py (minimised): Hartmann-6 on [0, 1]^6 (minimum -3.32237, the
one bench/coordinator.py sleeps in front of) and Ackley-20 on [-5, 10]^20 (minimum 0 at the origin)."""
import math
from pathlib import Path

from sleepy_hartmann6 import hartmann6_value as hartmann6


def ackley20(params):
    x = [params[f"x{i}"] for i in range(1, 21)]
    d = len(x)
    s1 = sum(v * v for v in x) / d
    s2 = sum(math.cos(2 * math.pi * v) for v in x) / d
    return -20.0 * math.exp(-0.2 * math.sqrt(s1)) - math.exp(s2) + 20.0 + math.e


FILE = Path(__file__).resolve()  # what a space's `function:` names, from any folder

SPACES = {
    "hartmann6": (hartmann6, {f"x{i}": (0.0, 1.0) for i in range(1, 7)}),
    "ackley20": (ackley20, {f"x{i}": (-5.0, 10.0) for i in range(1, 21)}),
}
