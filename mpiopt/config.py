"""Reading and validating a search-space file (SPEC §2).

Every problem becomes one `ConfigError` line that names the file, the field and what was expected.
"""
from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import math
import numbers
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from ._errors import ConfigError
from ._log import quiet_tensorflow
from .pareto import MEASURED, PARAM_GOAL, reported_goal
from .scheduler import SCHEDULERS as SCHEDULER_TYPES
from .space import Space, parse_space, refuse_unspaced_colons

TOP_KEYS = ("name", "objective", "parameters", "search", "training")
OBJECTIVE_KEYS = ("model", "data", "loss", "metrics", "minimize", "maximize", "pareto", "function", "folds")
SEARCH_DEFAULTS: dict[str, Any] = {
    "algorithm": "bayesian",
    "surrogate": "GP",
    "acquisition": "gp_hedge",
    "initial_points": 10,
    "trials": 50,
    "seed": 0,
    "target": None,
    "max_failures": None,  # stop the search once this many trials failed (a bug in the model, usually)
    "grace_period": 60.0,  # seconds past training.time_limit before a silent group is retired
    "scheduler": "none",  # none | asha | hyperband | median: stop or pause unpromising trials early
    "min_epochs": 1,  # the first rung (asha, hyperband); epochs before the median rule judges
    "reduction_factor": 3,  # keep the best 1/reduction_factor at each rung (asha, hyperband)
    "population": 20,  # evolution: the most recent results that parents are drawn from
    "sample": 5,  # evolution: members drawn for each tournament (the best is the parent)
}
ALGORITHMS = ("bayesian", "random", "evolution")
SCHEDULERS = tuple(SCHEDULER_TYPES)  # "none", "asha", "hyperband", "median": the names scheduler.py defines
SURROGATES = ("GP", "RF", "ET", "GBRT")
ACQUISITIONS = ("EI", "PI", "LCB", "gp_hedge")
MODES = ("downpour", "easgd", "gem", "allreduce")
OPTIMIZERS = ("sgd", "rmsprop", "adadelta", "adam", "adamw", "adagrad", "adamax", "nadam")
TRAINING_DEFAULTS: dict[str, Any] = {
    "group_size": 1,
    "mode": "downpour",
    "epochs": 10,
    "batch_size": 32,
    "optimizer": "adam",
    "learning_rate": 0.001,
    "sync_every": 1,
    "early_stopping": None,
    "time_limit": None,
    "target": None,  # {monitor: val_accuracy, value: 0.9}: stop training once reached
    "elastic_force": None,  # easgd: alpha; default 0.9 / workers (Zhang et al. 2015)
    "momentum": None,  # sgd's and rmsprop's momentum option (None: the optimizer's own, 0 for both)
    "kappa": 1.0,  # gem: energy matching factor
    "warmup_epochs": 0.0,  # linear warm-up to the scaled learning rate (Goyal et al. 2017)
    "lr_scaling": "none",  # none | linear | sqrt in the number of workers
    "checkpoint_every": 1,  # epochs; 0 = never
    "trace": False,  # Chrome trace of the group's ranks in trials/<id>/trace.json
    "tensorboard": False,  # per-epoch scalars and an HParams summary in trials/<id>/tensorboard/
    "ranks_per_gpu": 1,  # ranks of a node dealt each of its GPUs (more than 1: small trials share one)
    "mixed_precision": False,  # Keras mixed_float16: float16 compute, float32 weights, dynamic loss scaling
    "jit_compile": False,  # XLA-compile the training step and the validation
}
LR_SCALINGS = ("none", "linear", "sqrt")
EARLY_STOPPING_KEYS = ("monitor", "patience", "min_delta", "mode")


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, line: int) -> None:
        super().__init__(f"duplicate key {key!r} (line {line})")


class _StrictLoader(yaml.SafeLoader):
    """The safe loader, refusing a key given twice (plain YAML keeps the last one silently)."""


def _mapping_no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, f"a key must be a plain value, got {key!r}",
                                                    key_node.start_mark) from None
        if duplicate:
            raise _DuplicateKey(key, key_node.start_mark.line + 1)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_no_duplicates)
# YAML 1.2 reads `1e-4` as a number; PyYAML (YAML 1.1) wants a dot (`1.0e-4`) and reads it as text
_FLOAT_WITHOUT_DOT = ("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
                      list("-+0123456789"))
_StrictLoader.add_implicit_resolver(*_FLOAT_WITHOUT_DOT)


@functools.cache
def yaml_dumper(fast: bool = False) -> type:
    """PyYAML's safe dumper (libyaml's where `fast` and PyYAML has it) that quotes a string mpiopt
    reads as a number: the text '1e-3' must come back as text from config.yaml or `results --best`."""
    base = yaml.SafeDumper
    if fast:
        base = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # absent where PyYAML lacks libyaml

    class Dumper(base):
        pass

    Dumper.add_implicit_resolver(*_FLOAT_WITHOUT_DOT)
    return Dumper


def dump_yaml(value: Any, **options: Any) -> str:
    """`value` as YAML that `load_value` and the search-space file read back as it was."""
    return yaml.dump(value, Dumper=yaml_dumper(), **options)


def load_value(text: str) -> Any:
    """One value as the search-space file would read it (`--set NAME=VALUE`); text if it is no YAML."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError:
        return text


def did_you_mean(word: str, allowed: Iterable[str]) -> str:
    """A `(did you mean 'x'?)` suffix for a misspelt key, or ''."""
    match = difflib.get_close_matches(word, [str(a) for a in allowed], n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


@dataclass(frozen=True)
class Objective:
    """What one trial is."""

    kind: str  # "model" | "function"
    direction: str  # "minimize" | "maximize"
    metric: str  # the figure of merit's name
    function: str | None = None
    model: str | None = None
    data: Any = None  # "file.py:load_data" or {train, val, features, labels}
    loss: Any = None
    metrics: tuple = ()
    takes_comm: bool = False  # function(params, comm)
    takes_trial: bool = False  # function(params, ..., trial): reports steps and may be stopped
    model_params: frozenset[str] | None = None  # what build_model accepts by name; None = **kwargs
    pareto: tuple[tuple[str, str], ...] = ()  # a Pareto search's (metric, direction) goals
    folds: int | None = None  # k-fold cross-validation on the training data (a model objective)

    def misuse_where(self, field: str) -> str:
        """Where a trial's misuse (`TrialResult.misuse_field`) stops a search or a training:
        unreadable data under their own field, the objective's code by its callable."""
        return field if field == "objective.data" else f"objective: {self.function or self.model}"


@dataclass(frozen=True)
class SearchSettings:
    algorithm: str
    surrogate: str
    acquisition: str
    initial_points: int
    trials: int
    seed: int
    target: float | None
    max_failures: int | None = None
    grace_period: float = 60.0
    scheduler: str = "none"
    min_epochs: int = 1
    reduction_factor: int = 3
    population: int = 20
    sample: int = 5


@dataclass(frozen=True)
class Config:
    """A validated search-space file."""

    name: str
    path: Path
    objective: Objective
    space: Space
    search: SearchSettings
    training: dict[str, Any]
    raw: dict[str, Any] = field(repr=False)
    source: str = ""  # the file as the user named it, for messages
    # choices and condition values YAML 1.1 read as booleans from yes/no/on/off, e.g. 'parameters.c.choices: NO'
    yes_no_words: tuple[str, ...] = ()

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def resolved(self) -> dict[str, Any]:
        """The configuration that runs, with every default filled in (written to config.yaml)."""
        obj: dict[str, Any] = {}
        o = self.objective
        if o.kind == "model":
            obj["model"] = o.model
            obj["data"] = o.data
            if o.loss is not None:
                obj["loss"] = o.loss
            if o.metrics:
                obj["metrics"] = list(o.metrics)
            if o.folds is not None:  # only when given: the objective of an older run must read the same on --resume
                obj["folds"] = o.folds
        else:
            obj["function"] = o.function
        if o.pareto:
            obj["pareto"] = dict(o.pareto)
        else:
            obj[o.direction] = o.metric
        return {
            "name": self.name,
            "source": str(self.path),
            "objective": obj,
            "parameters": self.space.to_dict(),
            "search": dict(self.search.__dict__),
            "training": self.training_read(),
        }

    def training_read(self) -> dict[str, Any]:
        """The training settings the trials read: a function's few, or all of a model's."""
        if self.objective.kind == "function":
            return {k: self.training[k] for k in function_training_keys(self.search.scheduler)}
        return dict(self.training)

    def with_search(self, **changes: Any) -> Config:
        return replace(self, search=replace(self.search, **changes))

    def trial_training(self, params: dict[str, Any]) -> dict[str, Any]:
        """The training settings of one trial: a parameter named like a training key sets it."""
        out = dict(self.training)
        for k, v in params.items():
            if k in TRAINING_DEFAULTS:
                out[k] = v
        return out

    def model_kwargs(self, params: dict[str, Any]) -> dict[str, Any]:
        """The parameters passed to `build_model`."""
        accepted = self.objective.model_params
        return {k: v for k, v in params.items() if accepted is None or k in accepted}


def load_config(path: str | os.PathLike, *, resolve: bool = True) -> Config:
    """Read, validate and (with `resolve`) import the objective of a search-space file."""
    p = Path(path)
    src = str(path)
    if not p.exists():
        raise ConfigError("a link to no file (a broken or looping symbolic link)" if p.is_symlink() else
                          "no such file", source=src)
    if p.is_dir():
        raise ConfigError("is a directory, expected a search-space YAML file", source=src)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=src) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}); expected a YAML file",
                          source=src) from None
    try:
        root, raw = _read_yaml(text)
    except _DuplicateKey as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=src) from None
    except yaml.constructor.ConstructorError as exc:
        if exc.problem and exc.problem.startswith("a key must be"):
            raise ConfigError(f"invalid YAML: {exc.problem}", source=src) from None
        mark = exc.problem_mark
        where = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"YAML tag not allowed{where}: {exc.problem}; only plain YAML is read (safe loader)",
                          source=src) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"invalid YAML: {where}{problem}{_yaml_hint(problem)}{_yaml_context(exc, mark)}",
                          source=src) from None
    except RecursionError:
        raise ConfigError("invalid YAML: nested too deep to read (hundreds of levels)", source=src) from None
    except ValueError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=src) from None
    cfg = parse_config(raw, path=p.resolve(), source=src, resolve=False)
    # The user's file only: a run's config.yaml of an older mpiopt spells out every training key.
    _check_unread_training_keys(cfg.objective, cfg.search, raw.get("training"), src)
    cfg = replace(cfg, yes_no_words=_yes_no_words(root))
    return resolve_objective(cfg, src) if resolve else cfg


def _read_yaml(text: str) -> tuple[Any, Any]:
    """The file's node tree and its value, read once (what `yaml.load` does, the tree kept)."""
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        return root, (loader.construct_document(root) if root is not None else None)
    finally:
        loader.dispose()


def _yes_no_words(root: Any) -> tuple[str, ...]:
    """The choices and condition values written yes, no, on or off, which YAML 1.1 reads as
    booleans: `{choices: [NO, SE, DK]}` gives False for Norway, which is seldom what was meant."""
    found = []
    for name, spec in _entries(_entry(root, "parameters")):
        for key in ("choices", "when"):
            values = _entry(spec, key)
            if isinstance(values, yaml.MappingNode):  # when: {parent: value or [values]}
                values = [v for _, v in _entries(values)]
            for node in _scalars(values):
                if node.tag == "tag:yaml.org,2002:bool" and node.style is None and node.value.lower() not in (
                        "true", "false"):
                    found.append(f"parameters.{name}.{key}: {node.value}")
    return tuple(found)


def _entry(node: Any, key: str) -> Any:
    """The value node of `key` in a mapping node (None if it is not one, or lacks the key)."""
    return next((v for k, v in _entries(node) if k == key), None)


def _entries(node: Any) -> list[tuple[str, Any]]:
    if not isinstance(node, yaml.MappingNode):
        return []
    return [(k.value, v) for k, v in node.value if isinstance(k, yaml.ScalarNode)]


def _scalars(node: Any) -> list[yaml.ScalarNode]:
    """The scalar nodes of a scalar, a sequence, or a list of either."""
    if isinstance(node, list):
        return [s for n in node for s in _scalars(n)]
    if isinstance(node, yaml.SequenceNode):
        return [n for n in node.value if isinstance(n, yaml.ScalarNode)]
    return [node] if isinstance(node, yaml.ScalarNode) else []


def _yaml_hint(problem: str) -> str:
    """PyYAML's words for a second ': ' in a value, or a value ending in ':' (`obj.py:`), name
    neither; the fix is the same for both."""
    if problem == "mapping values are not allowed here":
        return " (a value that holds ': ' or ends in ':' must be in quotes)"
    return ""


def _yaml_context(exc, mark) -> str:
    """Where what the parser was reading began, when that is another line than the problem's: an
    unclosed bracket is found only on a later line."""
    context, at = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if not context or at is None or (mark is not None and at.line == mark.line):
        return ""
    return f" ({context} at line {at.line + 1}, column {at.column + 1})"


def parse_config(raw: Any, *, path: Path, source: str, resolve: bool = True) -> Config:
    if raw is None:
        raise ConfigError("the file is empty; expected a mapping with `objective` and `parameters`", source=source)
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping with `objective` and `parameters` at the top, got {type(raw).__name__}",
                          source=source)
    _check_keys(raw, TOP_KEYS, source, "")
    name = raw.get("name", path.stem)
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise ConfigError(f"expected a non-empty string without '/', got {name!r}", source=source, field="name")
    if "objective" not in raw:
        raise ConfigError("missing: every search needs an `objective` (a `model` with `data`, or a `function`)",
                          source=source, field="objective")
    if "parameters" not in raw:
        raise ConfigError("missing: a search needs at least one parameter", source=source, field="parameters")
    space = parse_space(raw["parameters"], source=source, did_you_mean=did_you_mean)
    search = _parse_search(raw.get("search"), source)
    objective = _parse_objective(raw["objective"], source)
    keys_read = _training_keys_read(objective, search)
    training = _parse_training(raw.get("training"), source, keys_read)
    _check_searched_training_keys(space, source, keys_read)
    if objective.kind == "model":  # a function's own parameters may have these names
        _check_searched_mode_keys(training, space, source)
        _check_momentum(training, space, source)
        _check_gem_optimizer(training, space, source)
    _check_unread_search_keys(search, source)
    _check_scheduler(search, training, space, source)
    _check_pareto(objective, search, source)
    _check_folds(objective, search, source)
    _check_metric_names(objective, training, source)
    cfg = Config(name=name, path=path, objective=objective, space=space, search=search, training=training, raw=raw,
                 source=source)
    if resolve:
        cfg = resolve_objective(cfg, source)
    return cfg


def check_trained_values(objective: Objective, training: dict[str, Any], source: str) -> None:
    """The checks across training keys, on one trial's own values (`mpiopt train --set`), as
    the file's are checked with nothing searched."""
    from .space import Space

    if objective.kind == "model":
        _check_momentum(training, Space(()), source)
        _check_gem_optimizer(training, Space(()), source)
    _check_metric_names(objective, training, source)


def _check_pareto(objective: Objective, search: SearchSettings, source: str) -> None:
    """A Pareto search has no single figure of merit: nothing to rank trials at a rung by, nor to reach."""
    if not objective.pareto:
        return
    if search.scheduler != "none":
        raise ConfigError(f"the {search.scheduler} scheduler ranks trials by one figure of merit; a Pareto search "
                          "(objective.pareto) runs with scheduler: none", source=source, field="search.scheduler")
    if search.target is not None:
        raise ConfigError("a Pareto search (objective.pareto) has no single figure of merit to reach; remove "
                          "search.target", source=source, field="search.target")
    from .journal import column_clash

    clash = column_clash(m for m, _ in objective.pareto if m not in MEASURED)
    if clash is not None:
        raise ConfigError(f"{clash!r} names a column of the results table, not a metric: name the metric otherwise",
                          source=source, field=f"objective.pareto.{clash}")
    if objective.kind == "function" and PARAM_GOAL in dict(objective.pareto):
        raise ConfigError(f"mpiopt counts a model's weights; a function's trials have no {PARAM_GOAL}: return the "
                          "size as a metric of another name", source=source, field=f"objective.pareto.{PARAM_GOAL}")


def _check_scheduler(search: SearchSettings, training: dict[str, Any], space: Space, source: str) -> None:
    """A scheduler judges trials before their last epoch: it needs a first rung below it. ASHA's
    and Hyperband's rungs climb to training.epochs, which every trial must be able to reach, and
    the median rule judges every epoch up to it (a function's trial.should_stop ends there)."""
    if search.scheduler != "none" and "epochs" in space.names:
        what = "rungs climb" if search.scheduler in ("asha", "hyperband") else "rule judges each epoch up"
        raise ConfigError(f"the {search.scheduler} scheduler's {what} to training.epochs "
                          f"({training['epochs']}), so epochs cannot be searched as well: set training.epochs to "
                          "the most a trial may train and let the scheduler stop the others early (or search "
                          "epochs with scheduler: none)", source=source, field="parameters.epochs")
    if search.scheduler != "none" and search.min_epochs >= int(training["epochs"]):
        raise ConfigError(f"{search.min_epochs} is not below training.epochs ({training['epochs']}): the "
                          f"{search.scheduler} scheduler would never judge a trial before its end",
                          source=source, field="search.min_epochs")


def _check_unread_search_keys(search: SearchSettings, source: str) -> None:
    """A scheduler's or evolution's setting given another value than its default where the search
    does not read it is a mistake (most likely the scheduler or the algorithm forgotten). The GP's
    settings are left alone: the example files spell them out, and a baseline run switches only
    the algorithm."""
    readers = {"min_epochs": ("scheduler", ("asha", "hyperband", "median")),
               "reduction_factor": ("scheduler", ("asha", "hyperband")),
               "population": ("algorithm", ("evolution",)), "sample": ("algorithm", ("evolution",))}
    settings = asdict(search)
    for key, (kind, users) in readers.items():
        if settings[kind] in users or settings[key] == SEARCH_DEFAULTS[key]:
            continue
        readers_text = f"{', '.join(users[:-1])} and {users[-1]}" if len(users) > 1 else users[0]
        raise ConfigError(f"{settings[key]} has no effect with {kind}: {settings[kind]} (it is read by "
                          f"{readers_text})", source=source, field=f"search.{key}")


def function_training_keys(scheduler: str) -> tuple[str, ...]:
    """What a `function` objective's trials read of `training`: the group, the time limit and, under
    a scheduler, the epochs that set the top rung. Everything else shapes a model's training."""
    return ("group_size", "ranks_per_gpu", "time_limit") + (("epochs",) if scheduler != "none" else ())


def unread_training_keys(objective: Objective, scheduler: str, keys) -> list[str]:
    """The training keys among `keys` that the objective's trials never read (a `function`'s)."""
    if objective.kind != "function":
        return []
    return [k for k in keys if k not in function_training_keys(scheduler)]


def _check_unread_training_keys(objective: Objective, search: SearchSettings, raw_training: Any,
                                source: str) -> None:
    """A training key given for a `function` objective that it never reads is a mistake: early
    stopping that never stops, TensorBoard files never written."""
    unread = unread_training_keys(objective, search.scheduler, raw_training) if isinstance(raw_training, dict) else []
    if not unread:
        return
    key = unread[0]
    what = ("has no effect on a `function` objective without search.scheduler (it sets the top rung)"
            if key == "epochs" else "shapes a `model` objective's training, and has no effect on a `function`")
    raise ConfigError(f"{what}; a function's trials read {', '.join(function_training_keys(search.scheduler))}",
                      source=source, field=f"training.{key}")


def training_keys_also_searched(cfg: Config) -> list[str]:
    """The `training` keys the file gives that a parameter always active also searches: every
    trial overrides them, so the value in `training` (pasted from `mpiopt results --best`, most
    likely) does nothing. Under a `when:` condition it is the value of the trials where the
    parameter is inactive."""
    raw = cfg.raw.get("training")
    return [key for key in raw if key in cfg.space.names and not cfg.space[key].when] if isinstance(raw, dict) else []


def metric_names_read(objective: Objective, training: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, field) of every metric a model trial reads from its epochs: the figure of merit (each
    Pareto goal that training reports), early stopping's monitor and the training target's."""
    if objective.pareto:
        names = [(m, f"objective.pareto.{m}") for m, _ in objective.pareto if m not in MEASURED]
    else:
        names = [(objective.metric, f"objective.{objective.direction}")]
    for key in ("early_stopping", "target"):
        if training.get(key):
            names.append((training[key]["monitor"], f"training.{key}.monitor"))
    return names


def _check_metric_names(objective: Objective, training: dict[str, Any], source: str) -> None:
    """With a `loss` in the file the metrics a model reports are known before it is built: every
    name a trial reads must be one of them (a misspelt monitor would never stop anything). Without
    one, the preflight's training step tells."""
    if objective.kind != "model" or objective.loss is None:
        return
    known = {"loss", *objective.metrics}
    known |= {f"val_{k}" for k in known}
    for name, where in metric_names_read(objective, training):
        if name in known:
            continue
        typo = _misspelt_metric(name, objective.metrics)
        if typo is not None:
            raise ConfigError(f"Keras knows no metric {typo!r} (did you mean {name.removeprefix('val_')!r}? {where} "
                              f"reads {name!r})", source=source, field="objective.metrics")
        # the names are those of the model mpiopt compiles: said, since build_model may compile its own
        raise ConfigError(f"{name!r} is not a metric this model reports (it has: {', '.join(sorted(known))}, as "
                          "mpiopt compiles it with objective.loss and objective.metrics: if build_model compiles "
                          "it, remove those from the file)"
                          f"{_which_is_misspelt(name, known, objective.metrics)}", source=source, field=where)


# names keras.metrics.get resolves, for telling which of two close names is misspelt before
# TensorFlow loads (the preflight asks Keras itself of every name in objective.metrics)
KERAS_METRIC_NAMES = frozenset((
    "accuracy", "acc", "binary_accuracy", "categorical_accuracy", "sparse_categorical_accuracy",
    "top_k_categorical_accuracy", "sparse_top_k_categorical_accuracy", "auc", "precision", "recall",
    "mse", "mae", "mape", "msle", "mean_squared_error", "mean_absolute_error", "mean_absolute_percentage_error",
    "mean_squared_logarithmic_error", "root_mean_squared_error", "r2_score", "f1_score",
    "binary_crossentropy", "categorical_crossentropy", "sparse_categorical_crossentropy", "kl_divergence",
    "poisson", "cosine_similarity", "log_cosh_error", "hinge", "squared_hinge", "categorical_hinge"))


def _keras_knows(metric: str) -> bool:
    """Whether `metric` is one of Keras' own names, as a function's or a class's (BinaryAccuracy)."""
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", metric).lower()
    return metric.lower() in KERAS_METRIC_NAMES or snake in KERAS_METRIC_NAMES


def _misspelt_metric(name: str, metrics: list) -> str | None:
    """The entry of objective.metrics that is a misspelling of the metric read as `name` (metrics:
    [acuracy] with maximize: val_accuracy), where Keras knows the one and not the other."""
    wanted = name.removeprefix("val_")
    if wanted not in KERAS_METRIC_NAMES:
        return None
    close = difflib.get_close_matches(wanted, [m for m in metrics if isinstance(m, str)], n=1, cutoff=0.6)
    return close[0] if close and not _keras_knows(close[0]) else None


def _which_is_misspelt(name: str, known: set[str], metrics: list) -> str:
    """The hint for a metric read under a name close to one the model reports: where the close
    one comes from objective.metrics, that list may be the misspelt one (metrics: [acuracy])."""
    match = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    if not match:
        return ""
    listed = match[0].removeprefix("val_")
    if listed in metrics and listed != "loss" and not _keras_knows(listed):  # Keras' own names are spelt right
        return f" (did you mean {match[0]!r}? objective.metrics lists {listed!r}: one of the two is misspelt)"
    return f" (did you mean {match[0]!r}?)"


def _check_folds(objective: Objective, search: SearchSettings, source: str) -> None:
    """A scheduler judges a trial by its per-epoch reports, and the folds of a k-fold trial train
    their epochs apart (some at once, on sub-groups): no one report stands for the trial."""
    if objective.folds is not None and search.scheduler != "none":
        raise ConfigError(f"`objective.folds` cannot be used with the {search.scheduler} scheduler, which judges a "
                          "trial by its epochs while its folds train apart; set search.scheduler: none",
                          source=source, field="objective.folds")


def _parse_folds(raw: dict, has_fn: bool, source: str) -> int | None:
    """`objective.folds`: k-fold cross-validation of a model on its training data, k >= 2."""
    if "folds" not in raw:
        return None
    if has_fn:
        raise ConfigError("`folds` belongs to a `model` objective: mpiopt cuts a model's training data into folds, "
                          "a `function` gets only the parameters", source=source, field="objective.folds")
    return _int(raw["folds"], source, "objective.folds", minimum=2)


def _check_searched_training_keys(space: Space, source: str, keys_read: tuple[str, ...]) -> None:
    """A parameter named like a training key the trials read must only take values that key
    accepts (a function's parameter named like a key it does not read is its own)."""
    from .space import Categorical, Real

    for p in space.params:
        if p.name not in keys_read:
            continue
        field = f"parameters.{p.name}"
        if p.name in ("group_size", "ranks_per_gpu", "trace", "tensorboard", "checkpoint_every", "target",
                      "early_stopping"):
            raise ConfigError(f"`{p.name}` cannot be searched: it is fixed for the whole job", source=source,
                              field=field)
        if isinstance(p, Real) and p.name in INTEGER_TRAINING_KEYS:
            raise ConfigError(f"a real parameter, but training.{p.name} takes integers (a trial would train "
                              f"with {p.name} cut to an integer): make it `type: integer`", source=source,
                              field=f"{field}.type")
        values = list(p.choices) if isinstance(p, Categorical) else [p.low, p.high]
        for v in values:
            check_training_value(p.name, v, source, field)


# the training keys only some modes read, with a group of workers (group_size 2 or more)
MODE_KEYS = {"kappa": ("gem",), "elastic_force": ("easgd",), "sync_every": ("downpour", "easgd", "gem")}


def mode_key_unread(key: str, training: dict[str, Any], space: Space) -> str | None:
    """Why no trial reads the mode key `key` (`MODE_KEYS`), or None where one can: groups of one
    rank, or no trial's mode (the searched ones, or training.mode) among its readers."""
    from .space import Categorical

    if training["group_size"] == 1:
        return "training.group_size is 1"
    modes = [str(m).lower() for m in space["mode"].choices] if "mode" in space.names and \
        isinstance(space["mode"], Categorical) else [training["mode"]]
    if set(modes) & set(MODE_KEYS[key]):
        return None
    return f"training.mode is {modes[0]}" if len(modes) == 1 else f"the searched modes are {', '.join(modes)}"


# training keys that change nothing on groups of one rank: one process trains alone
GROUP_KEYS = ("mode", "lr_scaling")


def _check_searched_mode_keys(training: dict[str, Any], space: Space, source: str) -> None:
    """Refuse a searched key that no trial's mode reads: a dimension of the search that would
    change nothing (`kappa` under downpour, any of them on groups of one rank)."""
    def on_one_rank(key: str, readers: str) -> ConfigError:
        return ConfigError(f"read only by {readers}, but training.group_size is 1: each trial trains on one "
                           "process, so searching it would change nothing", source=source, field=f"parameters.{key}")

    for key in GROUP_KEYS:
        if key in space.names and training["group_size"] == 1:
            raise on_one_rank(key, "groups of several ranks")
    for key, readers in MODE_KEYS.items():
        why = mode_key_unread(key, training, space) if key in space.names else None
        if why == "training.group_size is 1":
            raise on_one_rank(key, f"groups of workers ({', '.join(readers)})")
        if why is not None:
            raise ConfigError(f"read only by mode {' and '.join(readers)}, but {why}: searching it would change "
                              "nothing", source=source, field=f"parameters.{key}")


def _check_gem_optimizer(training: dict[str, Any], space: Space, source: str) -> None:
    """Refuse `gem` with an optimizer that has no momentum.

    GEM's proxy is the user's optimizer (`GemWorker` in mpiopt/learn/_engine.py); a step without
    momentum is too noisy to pace the group, which then trains far behind one process
    (docs/training.md). Searched `mode` and `optimizer` choices are checked in every combination,
    each with the lowest `momentum` a trial can give it.
    """
    from .space import Categorical

    searched = {p.name: list(p.choices) for p in space.params if isinstance(p, Categorical)}
    if "gem" not in [str(m).lower() for m in searched.get("mode", [training["mode"]])]:
        return
    from .learn._engine import gem_optimizer_problem

    field = "parameters.optimizer" if "optimizer" in searched else "training.optimizer"
    for spec in _optimizer_choices(training, space):
        for momentum, where in _momenta_with(spec, training, space):
            problem = gem_optimizer_problem(_with_momentum(spec, momentum))
            if problem and momentum is None:
                raise ConfigError(problem, source=source, field=field)
            if problem:
                lowest = f"{momentum:g} (its lowest) leaves a trial without momentum: " \
                    if where == "parameters.momentum" else ""
                raise ConfigError(lowest + problem, source=source, field=where)


def _check_momentum(training: dict[str, Any], space: Space, source: str) -> None:
    """`momentum` sets the option of that name of sgd and rmsprop: refuse it where a trial could
    give it to an optimizer without that option, or to one whose spec sets it already."""
    for spec in _optimizer_choices(training, space):
        given = [where for momentum, where in _momenta_with(spec, training, space) if momentum is not None]
        name = spec if isinstance(spec, str) else spec.get("name") if isinstance(spec, dict) else None
        if not given or not isinstance(name, str):  # a bad optimizer spec has its own error
            continue
        if isinstance(spec, dict) and "momentum" in spec:
            raise ConfigError(f"optimizer {_flow(spec)} sets its own momentum: give it once, there or here",
                              source=source, field=given[0])
        if _takes_momentum(name):
            continue
        if given[0] == "training.momentum" and "momentum" in space.names:  # where the searched one is inactive
            raise ConfigError(f"the trials where parameters.momentum is inactive take it, and one could train with "
                              f"{name}, which has no momentum option (the Adam family's is beta_1): leave it out",
                              source=source, field=given[0])
        compiled = "" if "optimizer" in space.names else \
            "; where build_model compiles the model with an optimizer of its own, that one trains: leave momentum out"
        raise ConfigError(f"sets the momentum of sgd and rmsprop, but {_trains_with(name, space)}, which has no "
                          f"momentum option (the Adam family's is beta_1){_keep_to_takers(space)}{compiled}",
                          source=source, field=given[0])


def _takes_momentum(name: str) -> bool:
    """Whether the optimizer `name` has an option named `momentum` (sgd, rmsprop): the one
    training.momentum sets. Imported only where a momentum is given."""
    from .learn.optimizers import OPTIMIZERS

    cls = OPTIMIZERS.get(str(name).lower())
    return cls is not None and cls.momentum_option == "momentum"


def _trains_with(name: str, space: Space) -> str:
    return f"a trial could train with {name}" if "optimizer" in space.names else f"training.optimizer is {name}"


def _keep_to_takers(space: Space) -> str:
    """The condition that keeps a searched momentum to the searched optimizers that take it."""
    if "optimizer" not in space.names or "momentum" not in space.names:
        return ""
    takers = [c for c in space["optimizer"].choices if _takes_momentum(c)]  # a searched optimizer's choices are names
    return f": add when: {{optimizer: {_flow(takers if len(takers) > 1 else takers[0])}}} to it" if takers else ""


def _optimizer_choices(training: dict[str, Any], space: Space) -> list[Any]:
    """The optimizer specs a trial can train with: the searched choices, or training.optimizer."""
    from .space import Categorical

    if "optimizer" in space.names and isinstance(space["optimizer"], Categorical):
        return list(space["optimizer"].choices)
    return [training["optimizer"]]


def _momenta_with(spec: Any, training: dict[str, Any], space: Space) -> list[tuple[float | None, str]]:
    """The `momentum` values a trial training with `spec` can get (None: not set), each with the
    field it comes from: a searched momentum's lowest where it can be active, the training
    section's where it can be inactive."""
    from .space import Categorical, is_choice

    param = space["momentum"] if "momentum" in space.names else None
    given = training["momentum"]
    if param is None:
        return [(given, "training.momentum")]
    on_optimizer = [allowed for parent, allowed in param.when if parent == "optimizer"]
    can_be_active = all(is_choice(spec, allowed) for allowed in on_optimizer)
    always_active = can_be_active and len(on_optimizer) == len(param.when)
    low = min(param.choices) if isinstance(param, Categorical) else param.low
    return ([(low, "parameters.momentum")] if can_be_active else []) + \
        ([] if always_active else [(given, "training.momentum")])


def _with_momentum(spec: Any, momentum: float | None) -> Any:
    if momentum is None:
        return spec
    return {**({"name": spec} if isinstance(spec, str) else spec), "momentum": momentum}


def _flow(value: Any) -> str:
    """A YAML value on one line, as a file would give it."""
    return dump_yaml(value, default_flow_style=True, width=10**6, sort_keys=False).strip().removesuffix("\n...")


def _check_keys(mapping: dict, allowed: Iterable[str], source: str, where: str,
                offered: Iterable[str] | None = None) -> None:
    """Refuse a key not `allowed`; the error offers `offered` (default: all allowed), e.g. only the
    keys an objective reads where others are known but refused later with their own reason."""
    allowed = tuple(allowed)
    offered = allowed if offered is None else tuple(offered)
    refuse_unspaced_colons(mapping, source, where)
    for key in mapping:
        if key not in allowed:
            field = f"{where}.{key}" if where else str(key)
            home = _section_of(key)
            if home is not None and home != where:
                here = f"`{where}`" if where else "the top level"
                raise ConfigError(f"a key of `{home}`, not of {here}: move it to {home}.{key}", source=source,
                                  field=field)
            raise ConfigError(f"unknown key (allowed: {', '.join(offered)}){did_you_mean(str(key), offered)}",
                              source=source, field=field)


def _section_of(key: Any) -> str | None:
    """The section of the file a key belongs in (`scheduler` in `search`), or None."""
    sections = {"search": SEARCH_DEFAULTS, "training": TRAINING_DEFAULTS, "objective": OBJECTIVE_KEYS}
    return next((name for name, keys in sections.items() if key in keys), None)


def _mapping(value: Any, source: str, field: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"expected a mapping, got {type(value).__name__} {value!r}"[:200], source=source, field=field)
    return value


def _int(value: Any, source: str, field: str, *, minimum: int, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not ok and isinstance(value, float) and value.is_integer():
        value, ok = int(value), True
    if not ok or value < minimum:
        raise ConfigError(f"expected an integer >= {minimum}, got {value!r}", source=source, field=field)
    if value > 2**31:
        raise ConfigError(f"expected an integer <= 2**31, got {value!r}", source=source, field=field)
    return int(value)


def _real(value: Any, source: str, field: str, *, positive: bool = False, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)) \
            or (positive and value <= 0):
        want = "a positive number" if positive else "a finite number"
        raise ConfigError(f"expected {want}, got {value!r}", source=source, field=field)
    return float(value)


def _choice(value: Any, allowed: tuple, source: str, field: str, *, fold: bool = False) -> str:
    if isinstance(value, str):
        for a in allowed:
            if value == a or (fold and value.lower() == a.lower()):
                return a
    hint = " (YAML reads a bare on, off, yes, no, true or false as a boolean)" if isinstance(value, bool) else \
        did_you_mean(str(value), allowed)
    raise ConfigError(f"expected one of {', '.join(allowed)}, got {value!r}{hint}", source=source, field=field)


def _parse_search(raw: Any, source: str) -> SearchSettings:
    raw = _mapping(raw, source, "search")
    _check_keys(raw, SEARCH_DEFAULTS, source, "search")
    s = {**SEARCH_DEFAULTS, **raw}
    settings = _search_settings(s, source)
    if "sample" not in raw:  # the default tournament fits any population
        settings = replace(settings, sample=min(settings.sample, settings.population))
    if settings.sample > settings.population:
        raise ConfigError(f"a tournament of {settings.sample} cannot be drawn from a population of "
                          f"{settings.population} (search.population)", source=source, field="search.sample")
    return settings


def _search_settings(s: dict[str, Any], source: str) -> SearchSettings:
    return SearchSettings(
        algorithm=_choice(s["algorithm"], ALGORITHMS, source, "search.algorithm", fold=True),
        surrogate=_choice(s["surrogate"], SURROGATES, source, "search.surrogate", fold=True),
        acquisition=_choice(s["acquisition"], ACQUISITIONS, source, "search.acquisition", fold=True),
        initial_points=_int(s["initial_points"], source, "search.initial_points", minimum=1),
        trials=_int(s["trials"], source, "search.trials", minimum=1),
        seed=_int(s["seed"], source, "search.seed", minimum=0),
        target=_real(s["target"], source, "search.target", allow_none=True),
        max_failures=_int(s["max_failures"], source, "search.max_failures", minimum=1, allow_none=True),
        grace_period=_real(s["grace_period"], source, "search.grace_period", positive=True),
        scheduler=_choice(s["scheduler"], SCHEDULERS, source, "search.scheduler", fold=True),
        min_epochs=_int(s["min_epochs"], source, "search.min_epochs", minimum=1),
        reduction_factor=_int(s["reduction_factor"], source, "search.reduction_factor", minimum=2),
        population=_int(s["population"], source, "search.population", minimum=2),
        sample=_int(s["sample"], source, "search.sample", minimum=1),
    )


def check_training_value(key: str, value: Any, source: str, field: str) -> Any:
    """Validate one `training` value (also used for `--set` and for searched training keys)."""
    check = _TRAINING_CHECKS.get(key)
    if check is None:
        raise ConfigError(f"unknown training key (allowed: {', '.join(TRAINING_DEFAULTS)})"
                          f"{did_you_mean(key, TRAINING_DEFAULTS)}", source=source, field=field)
    return check(value, source, field)


def _flag(value: Any, source: str, field: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"expected true or false, got {value!r}", source=source, field=field)
    return value


def _momentum(value: Any, source: str, field: str) -> float | None:
    if value is None:
        return None
    v = _real(value, source, field)
    if not 0 <= v < 1:
        raise ConfigError(f"expected a number in [0, 1), got {value!r}", source=source, field=field)
    return v


def _warmup_epochs(value: Any, source: str, field: str) -> float:
    v = _real(value, source, field)
    if v < 0:
        raise ConfigError(f"expected a number in [0, inf), got {value!r}", source=source, field=field)
    return v


def _elastic_force(value: Any, source: str, field: str) -> float | None:
    v = _real(value, source, field, allow_none=True)
    if v is not None and not 0 < v < 1:
        raise ConfigError(f"expected a number in (0, 1), got {value!r}", source=source, field=field)
    return v


def _target(value: Any, source: str, field: str) -> dict[str, Any] | None:
    if value is None:
        return None
    value = _mapping(value, source, field)
    _check_keys(value, ("monitor", "value", "mode"), source, field)
    if not isinstance(value.get("monitor"), str):
        raise ConfigError("expected {monitor: val_accuracy, value: 0.9}", source=source, field=f"{field}.monitor")
    return {"monitor": value["monitor"], "value": _real(value.get("value"), source, f"{field}.value"),
            "mode": _choice(value.get("mode", "auto"), ("auto", "min", "max"), source, f"{field}.mode")}


def _optimizer(value: Any, source: str, field: str) -> str | dict[str, Any]:
    if isinstance(value, str):
        return _choice(value, OPTIMIZERS, source, field, fold=True)
    if not isinstance(value, dict):
        raise ConfigError(f"expected an optimizer name ({', '.join(OPTIMIZERS)}) or a mapping with `name`, "
                          f"got {value!r}", source=source, field=field)
    refuse_unspaced_colons(value, source, field)
    if "name" not in value:
        raise ConfigError("an optimizer mapping needs `name`, e.g. {name: adam, beta_1: 0.9}",
                          source=source, field=field)
    out = {"name": _choice(value["name"], OPTIMIZERS, source, f"{field}.name", fold=True)}
    for k, v in value.items():
        if k == "name":
            continue
        if not isinstance(k, str) or not k.isidentifier() or isinstance(v, (dict, list)):
            raise ConfigError(f"expected `option: number` pairs, got {k!r}: {v!r}", source=source,
                              field=f"{field}.{k}")
        out[k] = v
    return _master_can_take(out, source, field)


def _master_can_take(spec: dict[str, Any], source: str, field: str) -> dict[str, Any]:
    """The optimizer spec, once the master's own optimizer takes its options (names, ranges):
    refused here, in its field, not at the first training step."""
    from .learn.optimizers import make_master_optimizer

    try:
        make_master_optimizer(spec, 1)
    except ValueError as exc:
        raise ConfigError(str(exc), source=source, field=field) from None
    return spec


def _early_stopping(value: Any, source: str, field: str) -> dict[str, Any] | None:
    if value in (None, False):
        return None
    if value is True:
        value = {}
    value = _mapping(value, source, field)
    _check_keys(value, EARLY_STOPPING_KEYS, source, field)
    es = {"monitor": "val_loss", "patience": 3, "min_delta": 0.0, "mode": "auto", **value}
    if not isinstance(es["monitor"], str):
        raise ConfigError(f"expected a metric name, got {es['monitor']!r}", source=source, field=f"{field}.monitor")
    es["patience"] = _int(es["patience"], source, f"{field}.patience", minimum=0)
    es["min_delta"] = _real(es["min_delta"], source, f"{field}.min_delta")
    if es["min_delta"] < 0:  # Keras would take its absolute value: a sign the user meant something else
        raise ConfigError(f"expected a number >= 0 (the least change that counts as an improvement), "
                          f"got {es['min_delta']:g}", source=source, field=f"{field}.min_delta")
    es["mode"] = _choice(es["mode"], ("auto", "min", "max"), source, f"{field}.mode")
    return es


# how each `training` key is checked: (value, source, field) -> the value to use
INTEGER_TRAINING_KEYS = ("epochs", "batch_size", "sync_every")  # of those a search may search
_TRAINING_CHECKS: dict[str, Callable[[Any, str, str], Any]] = {
    "group_size": partial(_int, minimum=1),
    "mode": lambda value, source, field: _choice(value, MODES, source, field, fold=True),
    "epochs": partial(_int, minimum=1),
    "batch_size": partial(_int, minimum=1),
    "optimizer": _optimizer,
    "learning_rate": partial(_real, positive=True),
    "sync_every": partial(_int, minimum=1),
    "early_stopping": _early_stopping,
    "time_limit": partial(_real, positive=True, allow_none=True),
    "target": _target,
    "elastic_force": _elastic_force,
    "momentum": _momentum,
    "kappa": partial(_real, positive=True),
    "warmup_epochs": _warmup_epochs,
    "lr_scaling": lambda value, source, field: _choice(value, LR_SCALINGS, source, field),
    "checkpoint_every": partial(_int, minimum=0),
    "trace": _flag,
    "tensorboard": _flag,
    "ranks_per_gpu": partial(_int, minimum=1),
    "mixed_precision": _flag,
    "jit_compile": _flag,
}


def _training_keys_read(objective: Objective, search: SearchSettings) -> tuple[str, ...]:
    """The training keys an unknown key's error offers: a function's own few, not a model's 21."""
    return function_training_keys(search.scheduler) if objective.kind == "function" else tuple(TRAINING_DEFAULTS)


def _parse_training(raw: Any, source: str, keys_read: tuple[str, ...]) -> dict[str, Any]:
    raw = _mapping(raw, source, "training")
    _check_keys(raw, TRAINING_DEFAULTS, source, "training", offered=keys_read)
    out = dict(TRAINING_DEFAULTS)
    for key, value in raw.items():
        out[key] = check_training_value(key, value, source, f"training.{key}")
    return out


def _parse_objective(raw: Any, source: str) -> Objective:
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping with `model` and `data`, or `function`, got {raw!r}"[:200],
                          source=source, field="objective")
    _check_keys(raw, OBJECTIVE_KEYS, source, "objective")
    has_model, has_fn = "model" in raw, "function" in raw
    if has_model and has_fn:
        raise ConfigError("give exactly one of `model` or `function`, not both", source=source, field="objective")
    if not has_model and not has_fn:
        raise ConfigError("missing: give `model` (with `data`) or `function`", source=source, field="objective")
    goals = _pareto_goals(raw, source)
    direction, metric = _figure_of_merit(raw, goals, has_model, source)
    folds = _parse_folds(raw, has_fn, source)
    for key in ("model", "function"):
        if key in raw and not (isinstance(raw[key], str) and ":" in raw[key]):
            raise ConfigError(f"expected 'file.py:name' or 'package.module:name', got {raw[key]!r}",
                              source=source, field=f"objective.{key}")
    if has_fn:
        for key in ("data", "loss", "metrics"):
            if key in raw:
                raise ConfigError(f"`{key}` belongs to a `model` objective; a `function` gets only the parameters",
                                  source=source, field=f"objective.{key}")
        return Objective(kind="function", direction=direction, metric=metric, function=raw["function"], pareto=goals)
    if "data" not in raw:
        raise ConfigError("a `model` objective needs `data` ('file.py:load_data' or {train: ..., val: ...})",
                          source=source, field="objective.data")
    data = raw["data"]
    if isinstance(data, dict):
        _check_keys(data, ("train", "val", "features", "labels"), source, "objective.data")
        for key in ("train", "val"):
            if key not in data:
                # k-fold trials validate on their folds, but `mpiopt train` of the best on the validation data
                why = " (with folds too: mpiopt train validates on them)" if key == "val" and "folds" in raw else ""
                raise ConfigError(f"missing: HDF5 data needs `train` and `val` (a glob, a list, or a .txt list){why}",
                                  source=source, field=f"objective.data.{key}")
            v = data[key]
            if not (isinstance(v, str) or (isinstance(v, list) and v and all(isinstance(x, str) for x in v))):
                raise ConfigError(f"expected a glob, a list of paths or a .txt file, got {v!r}",
                                  source=source, field=f"objective.data.{key}")
        data = {"features": "features", "labels": "labels", **data}
    elif not (isinstance(data, str) and ":" in data):
        raise ConfigError(f"expected 'file.py:load_data' or a mapping {{train: ..., val: ...}}, got {data!r}",
                          source=source, field="objective.data")
    metrics = raw.get("metrics", [])
    if isinstance(metrics, str):
        metrics = [metrics]
    if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        raise ConfigError(f"expected a list of metric names, got {metrics!r}", source=source, field="objective.metrics")
    loss = raw.get("loss")
    if loss is not None and not isinstance(loss, str):
        raise ConfigError(f"expected a Keras loss name, got {loss!r}", source=source, field="objective.loss")
    return Objective(kind="model", direction=direction, metric=metric, model=raw["model"], data=data, loss=loss,
                     metrics=tuple(metrics), pareto=goals, folds=folds)


def _pareto_goals(raw: dict, source: str) -> tuple[tuple[str, str], ...]:
    """`pareto: {metric: minimize|maximize, ...}`, two goals or more, instead of minimize/maximize."""
    if "pareto" not in raw:
        if "minimize" in raw and "maximize" in raw:
            raise ConfigError("give one of `minimize` or `maximize`, not both", source=source, field="objective")
        return ()
    for key in ("minimize", "maximize"):
        if key in raw:
            raise ConfigError(f"give `pareto` or `{key}`, not both (a Pareto search names every goal in `pareto`)",
                              source=source, field=f"objective.{key}")
    goals = raw["pareto"]
    if not isinstance(goals, dict) or len(goals) < 2:
        raise ConfigError(f"expected a mapping of two metrics or more to minimize or maximize, such as "
                          f"{{val_accuracy: maximize, params: minimize}}, got {goals!r}"[:200],
                          source=source, field="objective.pareto")
    for name, direction in goals.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"expected a metric name, got {name!r}", source=source, field="objective.pareto")
        if direction not in ("minimize", "maximize"):
            raise ConfigError(f"expected minimize or maximize, got {direction!r}"
                              f"{did_you_mean(str(direction), ('minimize', 'maximize'))}",
                              source=source, field=f"objective.pareto.{name}")
    return tuple(goals.items())


def _figure_of_merit(raw: dict, goals: tuple[tuple[str, str], ...], has_model: bool, source: str) -> tuple[str, str]:
    """(direction, metric) of the `objective` column: the configured one, or in a Pareto search
    its first goal that training reports (params and duration_s are measured, not trained)."""
    if goals:
        first = reported_goal(goals)
        if first is None:
            raise ConfigError(f"needs a goal besides {' and '.join(MEASURED)}: a metric the trial reports",
                              source=source, field="objective.pareto")
        return first[1], first[0]
    direction = "maximize" if "maximize" in raw else "minimize"
    metric = raw.get(direction, "val_loss" if has_model else "objective")
    if not isinstance(metric, str) or not metric:
        raise ConfigError(f"expected a metric name, got {metric!r}", source=source, field=f"objective.{direction}")
    return direction, metric


def _refuse_missing_data_files(data: dict, base_dir: Path, source: str) -> None:
    """HDF5 files that are not there are told before the model's module is imported: one that
    imports Keras takes seconds. (Their contents are checked by the preflight.)"""
    from ._errors import DataError
    from .learn._data import file_list

    for part in ("train", "val"):
        try:
            file_list(data[part], base_dir, part)
        except DataError as exc:
            raise ConfigError(str(exc), source=source) from None


def data_files_seen(cfg) -> dict[str, list[tuple[str, int]]]:
    """The HDF5 files of a model objective's `train` and `val` as this process finds them: per
    part, (name relative to the space file's folder, size in bytes); {} for other data. Ranks of
    one job compare them: node-local copies must be the same files."""
    data = cfg.objective.data
    if cfg.objective.kind != "model" or not isinstance(data, dict):
        return {}
    from .learn._data import file_list

    base = Path(cfg.base_dir).resolve()

    def name(f: Path) -> str:  # a node-local copy beside the space file by its place there; others as they are
        return str(f.relative_to(base)) if f.is_relative_to(base) else str(f)

    def seen(part: str) -> list[tuple[str, int]]:
        return [(name(f), f.stat().st_size) for f in file_list(data[part], cfg.base_dir, part)]

    return {part: seen(part) for part in ("train", "val")}


def import_callable(ref: str, base_dir: Path, *, source: str, field: str) -> Callable:
    """Resolve 'path/to/file.py:name' (relative to the YAML's folder) or 'package.module:name'."""
    target, _, attr = ref.rpartition(":")
    if not target or not attr:
        raise ConfigError(f"expected 'file.py:name' or 'package.module:name', got {ref!r}", source=source, field=field)
    if target.endswith(".py") or "/" in target or os.sep in target:
        file = (base_dir / os.path.expanduser(target)).resolve()
        if not file.is_file():
            raise ConfigError(f"no such file {str(file)!r} (paths are relative to the YAML file's folder)",
                              source=source, field=field)
        mod_name = f"_mpiopt_user_{file.stem}_{hashlib.sha1(str(file).encode()).hexdigest()[:8]}"
        module = sys.modules.get(mod_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(mod_name, file)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            folder = str(file.parent)
            if folder not in sys.path:
                sys.path.append(folder)  # after installed packages: examples/mnist1d.py must not hide `mnist1d`
            sys.modules[mod_name] = module
            try:
                with quiet_tensorflow():  # a user module that imports keras at its top
                    spec.loader.exec_module(module)
            except KeyboardInterrupt:  # Ctrl-C while it imports: the user stops mpiopt, not a bad file
                del sys.modules[mod_name]
                raise
            except BaseException as exc:  # the user's module may raise anything, SystemExit included
                del sys.modules[mod_name]
                raise ConfigError(f"cannot import {target}: {type(exc).__name__}: {exc}".splitlines()[0],
                                  source=source, field=field) from None
    else:
        try:
            with quiet_tensorflow():
                module = importlib.import_module(target)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            raise ConfigError(f"cannot import module {target!r}: {type(exc).__name__}: {exc}".splitlines()[0],
                              source=source, field=field) from None
    fn = getattr(module, attr, None)
    if fn is None:
        names = [n for n in dir(module) if not n.startswith("_")]
        raise ConfigError(f"{target} has no {attr!r}{did_you_mean(attr, names)}", source=source, field=field)
    if not callable(fn):
        kind = type(fn).__name__
        raise ConfigError(f"{target}:{attr} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, expected a function",
                          source=source, field=field)
    return fn


def takes_comm(fn: Callable) -> bool:
    """Whether a function objective wants the group communicator: fn(params, comm)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    params = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
              and p.name != "trial"]
    return "comm" in sig.parameters or len(params) >= 2


def takes_trial(fn: Callable) -> bool:
    """Whether a function objective reports its steps: it has a parameter named `trial`."""
    try:
        return "trial" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _refuse_required_conditionals(space: Space, sig: inspect.Signature, model: str, source: str) -> None:
    """An inactive parameter is not passed, so `build_model` needs a default for each conditional one."""
    for name, p in sig.parameters.items():
        if name in space.names and space[name].when and p.default is p.empty:
            raise ConfigError(f"{model} requires {name}, which is only passed when {space.condition_text(name)}: "
                              f"give it a default (e.g. {name}=None)", source=source, field=f"parameters.{name}.when")


def resolve_objective(cfg: Config, source: str) -> Config:
    """Import the objective's callables and check that every parameter is consumed."""
    o = cfg.objective
    if o.kind == "function":
        fn = import_callable(o.function, cfg.base_dir, source=source, field="objective.function")
        try:
            sig = inspect.signature(fn)
            required = [p for p in sig.parameters.values()
                        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            positional = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            varargs = any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values())
            if len([p for p in required if p.name != "trial"]) > 2 or (not positional and not varargs):
                raise ConfigError(f"{o.function} must take (params) or (params, comm), and `trial` if it reports "
                                  f"steps, but its signature is {sig}", source=source, field="objective.function")
            if "trial" in [p.name for p in positional[:-1]]:
                raise ConfigError(f"{o.function}{sig} takes `trial` before another argument; `trial` comes last: "
                                  f"def {fn.__name__}(params, trial) or def {fn.__name__}(params, comm, trial)",
                                  source=source, field="objective.function")
            named = [p.name for p in positional[:2] if p.name in cfg.space.names and p.name != "params"]
            if named:
                raise ConfigError(f"{o.function}{sig} names the parameter {named[0]!r} as an argument, but a function "
                                  f"gets every parameter in one mapping: def {fn.__name__}(params) and read "
                                  f"params[{named[0]!r}]", source=source, field="objective.function")
        except (TypeError, ValueError):
            pass
        if cfg.search.scheduler != "none" and not takes_trial(fn):
            raise ConfigError(f"{o.function} takes no `trial` argument, so it never reports a step and the "
                              f"{cfg.search.scheduler} scheduler could never judge it (add `trial` and call "
                              "trial.report(step, **metrics) and trial.should_stop())",
                              source=source, field="search.scheduler")
        return replace(cfg, objective=replace(o, takes_comm=takes_comm(fn), takes_trial=takes_trial(fn)))
    if isinstance(o.data, dict):
        _refuse_missing_data_files(o.data, cfg.base_dir, source)
    build = import_callable(o.model, cfg.base_dir, source=source, field="objective.model")
    if isinstance(o.data, str):
        import_callable(o.data, cfg.base_dir, source=source, field="objective.data")
    accepted: frozenset[str] | None
    try:
        sig = inspect.signature(build)
        if any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
            accepted = None
        else:
            accepted = frozenset(n for n, p in sig.parameters.items()
                                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
            missing = [n for n, p in sig.parameters.items()
                       if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                       and n not in cfg.space.names]
            if missing:
                raise ConfigError(f"{o.model} requires {', '.join(missing)}, which no parameter gives",
                                  source=source, field="objective.model")
            _refuse_required_conditionals(cfg.space, sig, o.model, source)
    except (TypeError, ValueError):
        accepted = None
    for name in cfg.space.names:
        if name in TRAINING_DEFAULTS:
            continue
        if accepted is not None and name not in accepted and name in SEARCH_DEFAULTS:
            raise ConfigError(f"search.{name} is a setting of the search itself, which no trial reads, so it cannot "
                              f"be searched; set it in `search`", source=source, field=f"parameters.{name}")
        if accepted is not None and name not in accepted:
            raise ConfigError(f"nothing consumes this parameter: it is not a training key and {o.model} does not "
                              f"accept it (it takes: {', '.join(sorted(accepted)) or 'nothing'})"
                              f"{did_you_mean(name, list(accepted) + list(TRAINING_DEFAULTS))}",
                              source=source, field=f"parameters.{name}")
    return replace(cfg, objective=replace(o, model_params=accepted))
