"""The search space: typed parameters parsed from YAML, and their scikit-optimize dimensions.

A parameter may be conditional (`when: {parent: value or [values]}`): it is active only while
every named categorical parent is active and takes one of the listed values. A parameter dict
holds the active parameters only (`Space.active` drops the rest), so an inactive parameter is
never passed to the objective and is empty in the results table.

This module is pure Python (scikit-optimize is imported lazily by `to_skopt`).
"""
from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from ._errors import ConfigError

PRIORS = ("uniform", "log-uniform")
TYPES = ("real", "integer", "categorical")
_KEYS = {
    "real": {"type", "low", "high", "prior", "when"},
    "integer": {"type", "low", "high", "prior", "when"},
    "categorical": {"type", "choices", "when"},
}

# A parameter's condition: (parent name, the parent's values that make it active) pairs, all of
# which must hold.
Condition = tuple[tuple[str, tuple], ...]


@dataclass(frozen=True)
class Real:
    name: str
    low: float
    high: float
    prior: str = "uniform"
    when: Condition = ()

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
    when: Condition = ()

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
    when: Condition = ()

    def middle(self) -> Any:
        return self.choices[0]

    def contains(self, value: Any) -> bool:
        return any(c == value and type(c) is type(value) for c in self.choices)


Parameter = Real | Integer | Categorical


class ConditionCycle(ValueError):
    """Conditions that lead from parameter `name` back to it, through `loop`."""

    def __init__(self, name: str, loop: list[str]) -> None:
        super().__init__(" -> ".join(loop))
        self.name, self.loop = name, loop


@dataclass(frozen=True)
class Space:
    """An ordered set of parameters."""

    params: tuple[Parameter, ...]

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    @cached_property
    def _by_name(self) -> dict[str, Parameter]:
        return {p.name: p for p in self.params}

    @property
    def conditional(self) -> bool:
        return any(p.when for p in self.params)

    @cached_property
    def parents_first(self) -> list[int]:
        """Parameter indices, each after the parents of its condition; a `ConditionCycle` where a
        chain of conditions comes back to where it started (it could never be active)."""
        order: list[int] = []
        done: set[str] = set()
        index = {p.name: k for k, p in enumerate(self.params)}

        def visit(name: str, path: list[str]) -> None:
            if name in path:
                raise ConditionCycle(name, path[path.index(name):] + [name])
            if name in done:
                return
            for parent, _ in self._by_name[name].when:
                visit(parent, path + [name])
            done.add(name)
            order.append(index[name])

        for p in self.params:
            visit(p.name, [])
        return order

    def __len__(self) -> int:
        return len(self.params)

    def __getitem__(self, name: str) -> Parameter:
        return self._by_name[name]

    def active(self, values: dict[str, Any]) -> dict[str, Any]:
        """The active parameters of `values` (which holds at least every active one), in order.

        A parameter is active when each parent of its condition is active and holds one of the
        listed values: settled parents first, in one pass.
        """
        on: dict[str, bool] = {}
        for k in self.parents_first:
            p = self.params[k]
            on[p.name] = all(on[parent] and is_choice(values.get(parent), allowed) for parent, allowed in p.when)
        return {p.name: values[p.name] for p in self.params if on[p.name]}

    def middle(self) -> dict[str, Any]:
        return self.complete({})

    def complete(self, values: dict[str, Any]) -> dict[str, Any]:
        """`values`, each parameter they leave out at its middle, then only the active ones."""
        return self.active({**{p.name: p.middle() for p in self.params}, **values})

    def condition_text(self, name: str) -> str:
        """A parameter's condition as the YAML wrote it, e.g. 'optimizer: sgd'."""
        return ", ".join(f"{parent}: {allowed[0] if len(allowed) == 1 else list(allowed)}"
                         for parent, allowed in self[name].when)

    def from_list(self, values: Sequence[Any]) -> dict[str, Any]:
        """The parameter dict of a scikit-optimize point (one value per parameter, in order),
        its inactive parameters dropped."""
        return self.active({p.name: native_value(p, v) for p, v in zip(self.params, values, strict=True)})

    def to_dict(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for p in self.params:
            if isinstance(p, Categorical):
                out[p.name] = {"type": "categorical", "choices": list(p.choices)}
            else:
                kind = "real" if isinstance(p, Real) else "integer"
                out[p.name] = {"type": kind, "low": p.low, "high": p.high, "prior": p.prior}
            if p.when:
                out[p.name]["when"] = {parent: list(allowed) for parent, allowed in p.when}
        return out


def is_choice(value: Any, allowed: tuple) -> bool:
    """Whether `value` is one of `allowed` (a categorical's choices: True is not 1)."""
    return any(c == value and type(c) is type(value) for c in allowed)


def native_value(p: Parameter, v: Any) -> Any:
    """Turn a numpy scalar from scikit-optimize back into the parameter's own Python value."""
    if isinstance(p, Real):
        return float(v)
    if isinstance(p, Integer):
        return int(v)
    return p.choices[int(v)]  # categoricals travel through scikit-optimize as their index


def _number(value: Any, *, integer: bool) -> bool:
    if isinstance(value, bool):
        return False
    if integer:  # at most 2**53 in size: the models compute in floats, which hold such integers exactly
        return (isinstance(value, numbers.Integral) or isinstance(value, float) and value.is_integer()) \
            and abs(value) <= 2**53
    return isinstance(value, numbers.Real) and math.isfinite(float(value))


def refuse_unspaced_colons(mapping: dict, source: str, where: str) -> None:
    """YAML reads `{name:value}` as the one key 'name:value' with no value: a flow mapping needs
    a space after each colon. Said as such, not as an unknown key."""
    for key, value in mapping.items():
        name, colon, rest = str(key).partition(":")
        if colon and name and value is None:
            raise ConfigError(f"YAML read {str(key)!r} as a key with no value: put a space after the colon "
                              f"({name}: {rest})", source=source, field=f"{where}.{key}" if where else str(key))


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
        refuse_unspaced_colons(spec, source, field)
        kind = spec.get("type")
        if kind is None:
            kind = "categorical" if "choices" in spec else None
        if kind is None and "type" not in spec:
            hint = next(filter(None, (did_you_mean(str(k), ("choices",)) for k in spec)), "")
            raise ConfigError("missing `type`: give type: real or type: integer with low and high, or choices: [...]"
                              f"{hint}", source=source, field=f"{field}.type")
        if kind not in TYPES:
            raise ConfigError(f"`type` must be one of {', '.join(TYPES)}, got {kind!r}{did_you_mean(str(kind), TYPES)}",
                              source=source, field=f"{field}.type")
        for key in spec:
            if key not in _KEYS[kind]:
                allowed = ", ".join(sorted(_KEYS[kind]))
                raise ConfigError(f"unknown key {key!r} for {_a(kind)} parameter (allowed: {allowed})"
                                  f"{did_you_mean(str(key), _KEYS[kind])}", source=source, field=f"{field}.{key}")
        if kind == "categorical":
            params.append(_categorical(name, spec, source=source, field=field))
        else:
            params.append(_numeric(name, spec, kind, source=source, field=field, did_you_mean=did_you_mean))
    return _with_conditions(params, raw, source=source, did_you_mean=did_you_mean)


def _with_conditions(params: list[Parameter], raw: dict, *, source: str, did_you_mean) -> Space:
    """The space with each parameter's `when:` parsed, checked, and free of cycles."""
    by_name = {p.name: p for p in params}
    out = []
    for p in params:
        spec = raw[p.name]
        when = _condition(p.name, spec["when"], by_name, source=source, did_you_mean=did_you_mean) \
            if "when" in spec else ()
        out.append(replace(p, when=when))
    space = Space(tuple(out))
    _refuse_cycles(space, source=source)
    _refuse_never_active(space, source=source)
    return space


def _condition(name: str, raw: Any, by_name: dict[str, Parameter], *, source: str, did_you_mean) -> Condition:
    """`when: {parent: value or [values], ...}`: each parent a categorical parameter, each value one
    of its choices."""
    field = f"parameters.{name}.when"
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"expected a mapping of a categorical parameter to its value(s), such as "
                          f"{{optimizer: sgd}}, got {_show(raw)}", source=source, field=field)
    pairs = []
    for parent, values in raw.items():
        where = f"{field}.{parent}"
        if parent not in by_name:
            raise ConfigError(f"no parameter named {parent!r} to depend on{did_you_mean(str(parent), by_name)}",
                              source=source, field=where)
        if parent == name:
            raise ConfigError("a parameter cannot depend on itself", source=source, field=where)
        owner = by_name[parent]
        if not isinstance(owner, Categorical):
            raise ConfigError(f"a condition needs a categorical parent, but {parent!r} is "
                              f"{type(owner).__name__.lower()} (make it categorical to depend on its values)",
                              source=source, field=where)
        allowed = tuple(values) if isinstance(values, list) else (values,)
        for v in allowed:
            if not owner.contains(v):
                raise ConfigError(f"{v!r} is not a choice of {parent!r} ({', '.join(repr(c) for c in owner.choices)})"
                                  f"{did_you_mean(str(v), [c for c in owner.choices if isinstance(c, str)])}",
                                  source=source, field=where)
        if not allowed:
            raise ConfigError("expected a value or a non-empty list of values", source=source, field=where)
        pairs.append((parent, allowed))
    return tuple(pairs)


def _refuse_cycles(space: Space, *, source: str) -> None:
    try:
        space.parents_first  # noqa: B018 - ordering the parameters finds any cycle
    except ConditionCycle as cycle:
        raise ConfigError(f"the conditions form a cycle ({' -> '.join(cycle.loop)})", source=source,
                          field=f"parameters.{cycle.name}.when") from None


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def _refuse_never_active(space: Space, *, source: str) -> None:
    """A parameter is active only where its parents are: the values its condition asks of each
    ancestor, its own and those of its parents' conditions, must have one in common, or the
    parameter is never searched (`{opt: b, n: c}` where n is active only with opt: a)."""
    asks: dict[str, dict[str, tuple[tuple, str]]] = {}  # name -> ancestor -> (values, whose `when` asks them)
    for k in space.parents_first:
        p = space.params[k]
        mine: dict[str, tuple[tuple, str]] = {}
        for parent, allowed in p.when:
            for ancestor, (values, whose) in [*asks[parent].items(), (parent, (allowed, p.name))]:
                if ancestor not in mine:
                    mine[ancestor] = (values, whose)
                    continue
                both = tuple(v for v in mine[ancestor][0] if is_choice(v, values))
                if not both:
                    raise ConfigError(f"{p.name} could never be active: it needs {_asked(ancestor, *mine[ancestor])} "
                                      f"and {_asked(ancestor, values, whose)}", source=source,
                                      field=f"parameters.{p.name}.when")
                mine[ancestor] = (both, mine[ancestor][1])
        asks[p.name] = mine


def _asked(ancestor: str, values: tuple, whose: str) -> str:
    """'opt: b (parameters.x.when)'."""
    return f"{ancestor}: {values[0] if len(values) == 1 else list(values)} (parameters.{whose}.when)"


def _categorical(name: str, spec: dict, *, source: str, field: str) -> Categorical:
    """A categorical parameter: a non-empty list of distinct, finite strings, numbers or booleans."""
    choices = spec.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ConfigError(f"`choices` must be a non-empty list, got {_show(choices)}",
                          source=source, field=f"{field}.choices")
    for c in choices:
        if not isinstance(c, (str, bool, int, float)):
            raise ConfigError(f"choices must be strings, numbers or booleans, got {_show(c, null='null')}",
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
            raise ConfigError(f"missing `{key}` ({_a(kind)} parameter needs `low` and `high`)",
                              source=source, field=f"{field}.{key}")
        if not _number(spec[key], integer=integer):
            want = "an integer of at most 2**53 in size" if integer else "a finite number"
            raise ConfigError(f"expected {want}, got {_show(spec[key])}", source=source, field=f"{field}.{key}")
    low, high = spec["low"], spec["high"]
    low, high = (int(low), int(high)) if integer else (float(low), float(high))
    if not low < high:
        raise ConfigError(f"`low < high` must hold, but got (low={low}, high={high})", source=source, field=field)
    if not math.isfinite(high - low):  # the draws scale a unit interval by the range
        raise ConfigError(f"the range from low={low} to high={high} is beyond floating point (high - low overflows)",
                          source=source, field=field)
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


def encode(space: Space, params: dict[str, Any], *, fill: bool = False) -> list[Any]:
    """The scikit-optimize point of a parameter dict (categoricals as their index); an inactive
    parameter is None, or with `fill` the middle of its range (scikit-optimize's models want a
    number everywhere, and one constant keeps inactive values from looking like noise)."""
    out = []
    for p in space.params:
        if p.name not in params:
            out.append(_filler(p) if fill else None)
        elif isinstance(p, Categorical):
            v = params[p.name]
            out.append(next(i for i, c in enumerate(p.choices) if c == v and type(c) is type(v)))
        else:
            out.append(params[p.name])
    return out


MAX_LISTED_POINTS = 100_000  # a discrete space's points listed at most (about 0.7 s to list them all)


def distinct_points(space: Space, limit: int = MAX_LISTED_POINTS) -> int | None:
    """How many distinct points a discrete space of at most `limit` combinations has (None as
    `every_point`); listed only where conditions can make combinations one point."""
    if not space.conditional:
        points = _combinations(space)
        return int(points) if points is not None and points <= limit else None
    every = every_point(space, limit)
    return len(every) if every is not None else None


def _combinations(space: Space) -> float | None:
    """The number of combinations of values of a discrete space (None with a real parameter)."""
    if any(isinstance(p, Real) for p in space.params):
        return None
    return math.prod(float(len(p.choices) if isinstance(p, Categorical) else p.high - p.low + 1)
                     for p in space.params)


def every_point(space: Space, limit: int = MAX_LISTED_POINTS) -> list[dict[str, Any]] | None:
    """Every distinct point of a discrete space of at most `limit` combinations of values, or None
    for a space with a real parameter or a larger one. Values of inactive parameters make no other
    point: (optimizer sgd, momentum 0.9) and (optimizer adam) are two points, not one per momentum."""
    combinations = _combinations(space)  # counted before listed: an integer of a million values is a long list
    if combinations is None or combinations > limit:
        return None
    values = [list(p.choices) if isinstance(p, Categorical) else list(range(p.low, p.high + 1)) for p in space.params]
    every = (space.active(dict(zip(space.names, combo, strict=True))) for combo in itertools.product(*values))
    return list({tuple(encode(space, q)): q for q in every}.values())


def _filler(p: Parameter) -> Any:
    return 0 if isinstance(p, Categorical) else p.middle()


def _show(value: Any, *, null: str = "nothing") -> str:
    """A value as an error shows it: its type and (the start of) its repr; None as `null`."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}" if value is not None else null
