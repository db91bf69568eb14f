"""The search space: typed parameters parsed from YAML, and their scikit-optimize dimensions.

This module is pure Python (scikit-optimize is imported lazily by `to_skopt`).
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._errors import ConfigError

PRIORS = ("uniform", "log-uniform")
TYPES = ("real", "integer", "categorical")
_KEYS = {
    "real": {"type", "low", "high", "prior"},
    "integer": {"type", "low", "high", "prior"},
    "categorical": {"type", "choices"},
}


@dataclass(frozen=True)
class Real:
    name: str
    low: float
    high: float
    prior: str = "uniform"

    def middle(self) -> float:
        if self.prior == "log-uniform":
            return math.sqrt(self.low * self.high)
        return (self.low + self.high) / 2.0

    def contains(self, value: Any) -> bool:
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and self.low <= value <= self.high


@dataclass(frozen=True)
class Integer:
    name: str
    low: int
    high: int
    prior: str = "uniform"

    def middle(self) -> int:
        if self.prior == "log-uniform":
            return int(round(math.sqrt(self.low * self.high)))
        return (self.low + self.high) // 2

    def contains(self, value: Any) -> bool:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool) and self.low <= value <= self.high


@dataclass(frozen=True)
class Categorical:
    name: str
    choices: tuple

    def middle(self) -> Any:
        return self.choices[0]

    def contains(self, value: Any) -> bool:
        return any(c == value and type(c) is type(value) for c in self.choices)


Parameter = Real | Integer | Categorical


@dataclass(frozen=True)
class Space:
    """An ordered set of parameters."""

    params: tuple[Parameter, ...]

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def __len__(self) -> int:
        return len(self.params)

    def __getitem__(self, name: str) -> Parameter:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def middle(self) -> dict[str, Any]:
        return {p.name: p.middle() for p in self.params}

    def from_list(self, values: Sequence[Any]) -> dict[str, Any]:
        """The parameter dict of a scikit-optimize point (one value per parameter, in order)."""
        return {p.name: _native(p, v) for p, v in zip(self.params, values, strict=True)}

    def to_dict(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for p in self.params:
            if isinstance(p, Categorical):
                out[p.name] = {"type": "categorical", "choices": list(p.choices)}
            else:
                kind = "real" if isinstance(p, Real) else "integer"
                out[p.name] = {"type": kind, "low": p.low, "high": p.high, "prior": p.prior}
        return out


def _native(p: Parameter, v: Any) -> Any:
    """Turn a numpy scalar from scikit-optimize back into the parameter's own Python value."""
    if isinstance(p, Real):
        return float(v)
    if isinstance(p, Integer):
        return int(v)
    return p.choices[int(v)]  # categoricals travel through scikit-optimize as their index


def _number(value: Any, *, integer: bool) -> bool:
    if isinstance(value, bool):
        return False
    if integer:
        return isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer()
                                                       and abs(value) < 2**53)
    return isinstance(value, numbers.Real) and math.isfinite(float(value))


def parse_space(raw: Any, *, source: str, did_you_mean) -> Space:
    """Parse the `parameters:` mapping of a search-space file.

    Args:
        raw: the YAML value.
        source: the file name, for error messages.
        did_you_mean: a function (key, allowed) -> hint suffix.
    """
    where = "parameters"
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"expected a non-empty mapping of parameter names to definitions, got {_show(raw)}",
                          source=source, field=where)
    params: list[Parameter] = []
    for name, spec in raw.items():
        field = f"parameters.{name}"
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"a parameter name must be a Python identifier, got {name!r}", source=source, field=field)
        if not isinstance(spec, dict):
            raise ConfigError(f"expected a mapping such as {{type: real, low: 0.0, high: 1.0}}, got {_show(spec)}",
                              source=source, field=field)
        kind = spec.get("type")
        if kind is None:
            kind = "categorical" if "choices" in spec else None
        if kind not in TYPES:
            raise ConfigError(f"`type` must be one of {', '.join(TYPES)}, got {kind!r}{did_you_mean(str(kind), TYPES)}",
                              source=source, field=f"{field}.type")
        for key in spec:
            if key not in _KEYS[kind]:
                allowed = ", ".join(sorted(_KEYS[kind]))
                raise ConfigError(f"unknown key {key!r} for a {kind} parameter (allowed: {allowed})"
                                  f"{did_you_mean(str(key), _KEYS[kind])}", source=source, field=f"{field}.{key}")
        if kind == "categorical":
            params.append(_categorical(name, spec, source=source, field=field))
        else:
            params.append(_numeric(name, spec, kind, source=source, field=field, did_you_mean=did_you_mean))
    return Space(tuple(params))


def _categorical(name: str, spec: dict, *, source: str, field: str) -> Categorical:
    """A categorical parameter: a non-empty list of distinct, finite strings, numbers or booleans."""
    choices = spec.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ConfigError(f"`choices` must be a non-empty list, got {_show(choices)}",
                          source=source, field=f"{field}.choices")
    for c in choices:
        if not isinstance(c, (str, bool, int, float)):
            raise ConfigError(f"choices must be strings, numbers or booleans, got {_show(c)}",
                              source=source, field=f"{field}.choices")
        if isinstance(c, float) and not math.isfinite(c):
            raise ConfigError(f"choices must be finite, got {c!r}", source=source, field=f"{field}.choices")
    seen: list[Any] = []
    for c in choices:
        if any(c == s and type(c) is type(s) for s in seen):
            raise ConfigError(f"choice {c!r} appears twice", source=source, field=f"{field}.choices")
        seen.append(c)
    return Categorical(name, tuple(choices))


def _numeric(name: str, spec: dict, kind: str, *, source: str, field: str, did_you_mean) -> Real | Integer:
    """A real or integer parameter: `low < high`, and a known prior (log-uniform needs `low > 0`)."""
    integer = kind == "integer"
    for key in ("low", "high"):
        if key not in spec:
            raise ConfigError(f"missing `{key}` (a {kind} parameter needs `low` and `high`)",
                              source=source, field=f"{field}.{key}")
        if not _number(spec[key], integer=integer):
            want = "an integer" if integer else "a finite number"
            raise ConfigError(f"expected {want}, got {_show(spec[key])}", source=source, field=f"{field}.{key}")
    low, high = spec["low"], spec["high"]
    low, high = (int(low), int(high)) if integer else (float(low), float(high))
    if not low < high:
        raise ConfigError(f"`low < high` must hold, but got (low={low}, high={high})", source=source, field=field)
    prior = spec.get("prior", "uniform")
    if prior not in PRIORS:
        raise ConfigError(f"`prior` must be one of {', '.join(PRIORS)}, got {prior!r}"
                          f"{did_you_mean(str(prior), PRIORS)}", source=source, field=f"{field}.prior")
    if prior == "log-uniform" and low <= 0:
        raise ConfigError(f"a log-uniform prior needs `low > 0`, got low={low}", source=source, field=f"{field}.low")
    return Integer(name, low, high, prior) if integer else Real(name, low, high, prior)


def to_skopt(space: Space) -> list:
    """The scikit-optimize dimensions of a space (categoricals as their choice index)."""
    from skopt import space as sk

    dims = []
    for p in space.params:
        if isinstance(p, Real):
            dims.append(sk.Real(p.low, p.high, prior=p.prior, name=p.name))
        elif isinstance(p, Integer):
            dims.append(sk.Integer(p.low, p.high, prior=p.prior, name=p.name))
        else:
            dims.append(sk.Categorical(list(range(len(p.choices))), name=p.name, transform="onehot"))
    return dims


def encode(space: Space, params: dict[str, Any]) -> list[Any]:
    """The scikit-optimize point of a parameter dict (categoricals as their index)."""
    out = []
    for p in space.params:
        v = params[p.name]
        if isinstance(p, Categorical):
            out.append(next(i for i, c in enumerate(p.choices) if c == v and type(c) is type(v)))
        else:
            out.append(v)
    return out


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}" if value is not None else "nothing"
