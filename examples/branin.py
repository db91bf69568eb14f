"""The Branin function: a standard test of search algorithms.

Three global minima, all at 0.397887: (-pi, 12.275), (pi, 2.275), (9.42478, 2.475).
"""
import math


def branin(params):
    x, y = params["x"], params["y"]
    a, b, c = 1.0, 5.1 / (4 * math.pi**2), 5.0 / math.pi
    r, s, t = 6.0, 10.0, 1.0 / (8 * math.pi)
    return a * (y - b * x**2 + c * x - r) ** 2 + s * (1 - t) * math.cos(x) + s
