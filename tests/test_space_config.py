"""Parsing search-space files: every validation error is one clear line naming file and field."""
from __future__ import annotations

import pytest

from mpiopt._errors import ConfigError
from mpiopt.config import load_config, training_keys_also_searched
from mpiopt.space import Categorical, Integer, Real, distinct_points, every_point, parse_space

GOOD = """
objective:
  function: objectives.py:branin
parameters:
  x: {type: real, low: -5.0, high: 10.0}
  y: {type: real, low: 0.0, high: 15.0}
"""


def test_good_file_fills_defaults(write_yaml):
    cfg = load_config(write_yaml(GOOD, "my-search.yaml"))
    assert cfg.name == "my-search"
    assert cfg.objective.kind == "function" and cfg.objective.metric == "objective"
    assert cfg.objective.direction == "minimize"
    assert cfg.search.trials == 50 and cfg.search.algorithm == "bayesian" and cfg.search.surrogate == "GP"
    assert cfg.training["group_size"] == 1
    assert cfg.space.names == ["x", "y"]
    assert cfg.objective.takes_comm is False


def test_all_parameter_kinds(write_yaml):
    cfg = load_config(write_yaml("""
        objective: {function: objectives.py:branin}
        parameters:
          lr: {type: real, low: 1.0e-4, high: 1.0e-1, prior: log-uniform}
          units: {type: integer, low: 16, high: 512, prior: log-uniform}
          act: {type: categorical, choices: [relu, tanh]}
          flag: {choices: [true, false]}
          bs: {type: categorical, choices: [32, 64, 0.5]}
    """))
    lr, units, act, flag, bs = cfg.space.params
    assert isinstance(lr, Real) and lr.prior == "log-uniform"
    assert isinstance(units, Integer) and units.middle() == 91
    assert isinstance(act, Categorical) and act.middle() == "relu"
    assert flag.choices == (True, False)
    assert bs.choices == (32, 64, 0.5)


def test_comm_function_detected(write_yaml):
    cfg = load_config(write_yaml("""
        objective: {function: objectives.py:with_comm}
        parameters: {x: {type: real, low: 0, high: 1}, y: {type: real, low: 0, high: 1}}
    """))
    assert cfg.objective.takes_comm


def test_model_objective_consumption(tmp_path):
    (tmp_path / "m.py").write_text("def build(units, layers=1):\n    pass\n\ndef data():\n    pass\n"
                                   "def build_kw(**kw):\n    pass\n")
    (tmp_path / "s.yaml").write_text("""
objective: {model: m.py:build, data: m.py:data, loss: mse, metrics: [mae], minimize: val_mae}
parameters:
  units: {type: integer, low: 1, high: 4}
  learning_rate: {type: real, low: 0.001, high: 0.1}
  epochs: {type: integer, low: 1, high: 3}
""")
    cfg = load_config(tmp_path / "s.yaml")
    p = {"units": 2, "learning_rate": 0.01, "epochs": 2}
    assert cfg.model_kwargs(p) == {"units": 2}
    t = cfg.trial_training(p)
    assert t["learning_rate"] == 0.01 and t["epochs"] == 2
    (tmp_path / "s2.yaml").write_text("""
objective: {model: m.py:build_kw, data: m.py:data}
parameters: {anything: {type: integer, low: 1, high: 4}}
""")
    cfg = load_config(tmp_path / "s2.yaml")
    assert cfg.model_kwargs({"anything": 3}) == {"anything": 3}
    assert cfg.objective.metric == "val_loss"


# (yaml text, substrings the one-line error must contain)
BAD = [
    ("objective: [unclosed", ["invalid YAML", "line 1"]),
    ("search:\n  trials: [12\n  seed: 0\n", ["invalid YAML: line 3, column 7", "flow sequence at line 2, column 11"]),
    ("objective:\n  function: obj.py:\n", ["invalid YAML: line 2, column 19", "ends in ':' must be in quotes"]),
    (GOOD + "search: {scheduler: off}\n", ["search.scheduler: expected one of none, asha, hyperband, median, got False "
                                           "(YAML reads a bare on, off, yes, no, true or false as a boolean)"]),
    ("- a\n- b\n", ["expected a mapping"]),
    ("", ["file is empty"]),
    ("objective: !!python/object/apply:os.system ['echo hacked']\n", ["YAML tag not allowed", "safe loader"]),
    (GOOD + "serach: {}\n", ["serach", "unknown key", "did you mean 'search'"]),
    (GOOD + "search: {trails: 3}\n", ["search.trails", "did you mean 'trials'"]),
    (GOOD + "search: {scheduler: asha}\ntraining: {epoch: 3}\n", ["training.epoch", "did you mean 'epochs'"]),
    # a key of another section says where it belongs, not what it may be misspelt for
    (GOOD + "training: {min_epochs: 2}\n",
     ["training.min_epochs: a key of `search`, not of `training`: move it to search.min_epochs"]),
    (GOOD + "scheduler: asha\n", ["scheduler: a key of `search`, not of the top level: move it to search.scheduler"]),
    (GOOD + "search: {epochs: 3}\n", ["search.epochs: a key of `training`, not of `search`"]),
    ("objective: {model: m.py:build, data: {train: t.h5}, folds: 3}\nparameters: {x: {type: real, low: 0, high: 1}}\n",
     ["objective.data.val: missing", "(with folds too: mpiopt train validates on them)"]),
    # a function's unknown key offers the few keys a function reads, not a model's
    (GOOD + "training: {epoch: 3}\n", ["training.epoch", "(allowed: group_size, ranks_per_gpu, time_limit)"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {low: 0, high: 1}}\n",
     ["parameters.x.type", "missing `type`: give type: real or type: integer"]),
    ("parameters: {x: {type: real, low: 0, high: 1}}\n", ["objective", "missing"]),
    ("objective: {function: objectives.py:branin}\n", ["parameters", "missing"]),
    ("objective: {function: objectives.py:branin, model: m.py:f, data: m.py:d}\n"
     "parameters: {x: {low: 0, high: 1, type: real}}\n",
     ["exactly one of `model` or `function`"]),
    ("objective: {model: objectives.py:branin}\nparameters: {x: {low: 0, high: 1, type: real}}\n",
     ["objective.data", "needs `data`"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: reel, low: 0, high: 1}}\n",
     ["parameters.x.type", "did you mean 'real'"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: real, low: 0, hihg: 1}}\n",
     ["parameters.x.hihg", "unknown key"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: real, low: 0}}\n",
     ["parameters.x.high", "missing `high`"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: real, low: 3, high: 1}}\n",
     ["parameters.x", "`low < high` must hold", "low=3.0, high=1.0"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: integer, low: 0.5, high: 4}}\n",
     ["parameters.x.low", "expected an integer"]),
    ("objective: {function: objectives.py:branin}\n"
     "parameters: {x: {type: real, low: 0, high: 1, prior: log-uniform}}\n",
     ["parameters.x.low", "log-uniform prior needs `low > 0`"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: real, low: 0.1, high: 1, prior: log}}\n",
     ["parameters.x.prior", "uniform, log-uniform"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: categorical, choices: []}}\n",
     ["parameters.x.choices", "non-empty list"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: categorical, choices: relu}}\n",
     ["parameters.x.choices", "non-empty list"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: real, low: '0', high: 1}}\n",
     ["parameters.x.low", "finite number"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: real, low: 0, high: .inf}}\n",
     ["parameters.x.high", "finite number"]),
    ("objective: {function: objectives.py:branin}\nparameters: []\n", ["parameters", "non-empty mapping"]),
    ("objective: {function: nowhere.py:branin}\nparameters: {x: {type: real, low: 0, high: 1}}\n",
     ["objective.function", "no such file", "nowhere.py"]),
    ("objective: {function: objectives.py:brainin}\nparameters: {x: {type: real, low: 0, high: 1}}\n",
     ["objective.function", "has no 'brainin'", "did you mean 'branin'"]),
    ("objective: {function: no_such_module_xyz:f}\nparameters: {x: {type: real, low: 0, high: 1}}\n",
     ["objective.function", "cannot import module"]),
    ("objective: {function: branin}\nparameters: {x: {type: real, low: 0, high: 1}}\n",
     ["objective.function", "file.py:name"]),
    (GOOD + "search: {trials: 0}\n", ["search.trials", "integer >= 1"]),
    (GOOD + "search: {trials: many}\n", ["search.trials", "integer >= 1"]),
    (GOOD + "search: {target: low}\n", ["search.target", "finite number"]),
    (GOOD + "search: {algorithm: genetic}\n", ["search.algorithm", "bayesian, random"]),
    (GOOD + "search: {surrogate: NN}\n", ["search.surrogate", "GP, RF, ET, GBRT"]),
    (GOOD + "search: {acquisition: UCB}\n", ["search.acquisition", "EI, PI, LCB, gp_hedge"]),
    (GOOD + "search: {initial_points: -1}\n", ["search.initial_points"]),
    (GOOD + "training: {group_size: 0}\n", ["training.group_size", "integer >= 1"]),
    (GOOD + "training: {epochs: 2.5}\n", ["training.epochs", "integer >= 1"]),
    (GOOD + "training: {mode: sync}\n", ["training.mode", "downpour, easgd, gem, allreduce"]),
    (GOOD + "training: {optimizer: adamm}\n", ["training.optimizer", "did you mean 'adam'"]),
    (GOOD + "training: {optimizer: {name: sgd, momentum: 2}}\n", ["training.optimizer", "must be a finite number in "
                                                                  "[0.0, 1.0], got 2"]),
    (GOOD + "training: {optimizer: {name: adam, beta_9: 0.3}}\n", ["training.optimizer", "unknown option 'beta_9'"]),
    (GOOD + "training: {early_stopping: {patience: -1}}\n", ["training.early_stopping.patience"]),
    (GOOD + "training: {early_stopping: {min_delta: -0.01}}\n", ["training.early_stopping.min_delta", ">= 0"]),
    # YAML reads a flow mapping's `key:value` with no space as one key with no value
    (GOOD + "training: {early_stopping: {monitor:val_loss}}\n",
     ["training.early_stopping.monitor:val_loss", "put a space after the colon (monitor: val_loss)"]),
    (GOOD + "training: {optimizer: {name:sgd}}\n", ["training.optimizer.name:sgd", "(name: sgd)"]),
    ("objective: {function: objectives.py:branin, minimize:objective}\n"
     "parameters: {x: {type: real, low: 0, high: 1}}\n",
     ["objective.minimize:objective", "(minimize: objective)"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type:real, low: 0, high: 1}}\n",
     ["parameters.x.type:real", "(type: real)"]),
    (GOOD + "training: {time_limit: 0}\n", ["training.time_limit", "positive number"]),
    (GOOD + "training: {lr_scaling: quadratic}\n", ["training.lr_scaling", "none, linear, sqrt"]),
    (GOOD + "training: {elastic_force: 1.5}\n", ["training.elastic_force", "(0, 1)"]),
    (GOOD + "training: {momentum: 1.0}\n", ["training.momentum", "[0, 1)"]),
    (GOOD + "training: {kappa: -1}\n", ["training.kappa", "positive number"]),
    (GOOD + "training: {target: {monitor: val_accuracy}}\n", ["training.target.value", "finite number"]),
    (GOOD + "training: {target: {metric: val_accuracy, value: 0.9}}\n", ["training.target.metric", "unknown key"]),
    (GOOD + "training: {trace: yes please}\n", ["training.trace", "true or false"]),
    (GOOD + "training: {checkpoint_every: -2}\n", ["training.checkpoint_every", "integer >= 0"]),
    (GOOD + "training: {verbose: 1}\n", ["training.verbose", "unknown key", "allowed"]),
    ("objective: {function: objectives.py:branin, minimize: a, maximize: b}\n"
     "parameters: {x: {type: real, low: 0, high: 1}}\n",
     ["one of `minimize` or `maximize`"]),
    ("objective: {model: objectives.py:branin, data: objectives.py:branin}\n"
     "parameters: {epochs: {type: integer, low: 0, high: 3}}\n",
     ["parameters.epochs", "integer >= 1"]),
    ("objective: {model: objectives.py:branin, data: objectives.py:branin}\n"
     "parameters: {batch_size: {type: real, low: 16, high: 64}}\n",
     ["parameters.batch_size.type", "a real parameter, but training.batch_size takes integers", "type: integer"]),
    ("objective: {model: objectives.py:branin, data: objectives.py:branin}\n"
     "parameters: {mode: {choices: [downpour, sync]}}\n",
     ["parameters.mode", "sync"]),
    ("objective: {function: objectives.py:branin}\nparameters: {group_size: {type: integer, low: 1, high: 3}}\n",
     ["parameters.group_size", "cannot be searched"]),
    ("name: a/b\n" + GOOD, ["name", "without '/'"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: integer, low: 1, high: 1.0e400}}\n",
     ["parameters.x.high"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: integer, low: 1, high: 1.0e+400}}\n",
     ["parameters.x.high", "expected an integer"]),
    ("objective: {function: objectives.py:branin}\n"
     "parameters: {x: {type: integer, low: 0, high: 18446744073709551616}}\n",
     ["parameters.x.high", "an integer of at most 2**53 in size, got int 18446744073709551616"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {choices: [1, null]}}\n",
     ["parameters.x.choices", "choices must be strings, numbers or booleans, got null"]),
    (GOOD + "search: {trials: 1000000000000}\n", ["search.trials", "integer <= 2**31"]),
    (GOOD + "search: {seed: 1}\nsearch: {seed: 2}\n", ["invalid YAML", "duplicate key 'search'", "line 8"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: real, low: 0, high: 1, low: 0.5}}\n",
     ["duplicate key 'low'"]),
    ("? [a, b]\n: 1\n", ["invalid YAML", "plain value"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: categorical, choices: [a, a]}}\n",
     ["parameters.x.choices", "appears twice"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: categorical, choices: [[1, 2]]}}\n",
     ["parameters.x.choices", "strings, numbers or booleans"]),
    ("objective: {function: objectives.py:branin}\nparameters: {1x: {type: real, low: 0, high: 1}}\n",
     ["parameters.1x", "Python identifier"]),
    *[(f"objective: {{model: objectives.py:branin, data: objectives.py:branin, folds: {k}}}\n"
       "parameters: {x: {type: real, low: 0, high: 1}}\n",
       ["objective.folds", "expected an integer >= 2", f"got {got}"])
      for k, got in [("1", 1), ("0", 0), ("2.5", 2.5), ("'3'", "'3'"), ("true", True), ("null", None),
                     ("[2, 3]", [2, 3])]],
    ("objective: {function: objectives.py:branin, folds: 3}\nparameters: {x: {type: real, low: 0, high: 1}}\n",
     ["objective.folds", "belongs to a `model` objective"]),
    # a condition no trial can meet: n is active only with opt a, x asks opt b and n
    ("objective: {function: objectives.py:branin}\nparameters: {opt: {choices: [a, b]}, "
     "n: {choices: [c, d], when: {opt: a}}, x: {type: real, low: 0, high: 1, when: {opt: b, n: c}}}\n",
     ["parameters.x.when: x could never be active: it needs opt: b (parameters.x.when) and opt: a "
      "(parameters.n.when)"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: real, low: -1.0e308, high: 1.0e308}}\n",
     ["parameters.x: the range from low=-1e+308 to high=1e+308 is beyond floating point"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {choice: [a, b]}}\n",
     ["parameters.x.type: missing `type`", "(did you mean 'choices'?)"]),
    ("objective: {function: objectives.py:branin}\nparameters: {x: {type: integer, low: 0}}\n",
     ["(an integer parameter needs `low` and `high`)"]),
    ("objective: {function: objectives.py:branin}\nparameters: {o: {choices: [sgd, adam]}, "
     "x: {type: real, low: 0, high: 1, when: {o: sdg}}}\n",
     ["parameters.x.when.o: 'sdg' is not a choice of 'o'", "(did you mean 'sgd'?)"]),
    (GOOD + "search: {algorithm: evolution, population: 4, sample: 5}\n",
     ["search.sample: a tournament of 5 cannot be drawn from a population of 4"]),
    ("objective: {model: objectives.py:branin, data: objectives.py:branin, folds: 3}\n"
     "parameters: {x: {type: real, low: 0, high: 1}}\nsearch: {scheduler: asha}\n",
     ["objective.folds", "asha scheduler", "search.scheduler: none"]),
]


@pytest.mark.parametrize("text,expected", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_files(write_yaml, text, expected):
    path = write_yaml(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(str(path)), msg
    for part in expected:
        assert part in msg, msg


def test_a_training_key_searched_under_a_condition_keeps_its_value_for_the_other_trials(write_yaml):
    cfg = load_config(write_yaml(
        "objective: {model: m.py:build, data: m.py:load}\n"
        "parameters:\n  optimizer: {choices: [sgd, adam]}\n"
        "  learning_rate: {type: real, low: 0.001, high: 0.1, when: {optimizer: sgd}}\n"
        "training: {learning_rate: 0.0005}\n"), resolve=False)
    assert cfg.training["learning_rate"] == 0.0005
    assert training_keys_also_searched(cfg) == []


def test_a_training_key_always_searched_is_accepted_and_named_as_unused(write_yaml):
    """As SPEC §2's example gives batch_size and learning_rate in both places: every trial's
    own value wins, and `check` and the search note that the value in training is not used."""
    cfg = load_config(write_yaml(
        "objective: {model: m.py:build, data: m.py:load}\n"
        "parameters:\n  learning_rate: {type: real, low: 0.001, high: 0.1, prior: log-uniform}\n"
        "  batch_size: {choices: [32, 64]}\n"
        "training: {learning_rate: 0.01, batch_size: 64, epochs: 3}\n"), resolve=False)
    assert training_keys_also_searched(cfg) == ["learning_rate", "batch_size"]
    trial = cfg.trial_training({"learning_rate": 0.05, "batch_size": 32})
    assert (trial["learning_rate"], trial["batch_size"], trial["epochs"]) == (0.05, 32, 3)
    from mpiopt.cli import _searched_training_keys_note

    assert _searched_training_keys_note(cfg) == (
        "training.learning_rate, training.batch_size: also searched (parameters.learning_rate, parameters.batch_size), "
        "which every trial sets: the values in training are not used")


MODEL = "objective: {model: m.py:build, data: m.py:load}\n"
WHEN_SGD = "  momentum: {type: real, low: 0.0, high: 0.99, when: {optimizer: sgd}}\n"


def test_a_searched_momentum_is_the_momentum_the_trials_train_with(write_yaml):
    from mpiopt.learn._engine import training_optimizer

    cfg = load_config(write_yaml(MODEL + "parameters:\n  optimizer: {choices: [sgd, adam]}\n" + WHEN_SGD),
                      resolve=False)
    sgd = training_optimizer(cfg.trial_training({"optimizer": "sgd", "momentum": 0.8}))
    assert sgd == {"name": "sgd", "learning_rate": 0.001, "momentum": 0.8}
    assert training_optimizer(cfg.trial_training({"optimizer": "adam"})) == {"name": "adam", "learning_rate": 0.001}
    fixed = load_config(write_yaml(MODEL + "parameters: {units: {type: integer, low: 1, high: 9}}\n"
                                   "training: {optimizer: rmsprop, momentum: 0.5}\n"), resolve=False)
    assert training_optimizer(fixed.trial_training({"units": 3}))["momentum"] == 0.5


@pytest.mark.parametrize("parameters,training,expected", [
    ("  units: {type: integer, low: 1, high: 9}\n", "{momentum: 0.5}",
     "training.momentum: sets the momentum of sgd and rmsprop, but training.optimizer is adam, which has no "
     "momentum option (the Adam family's is beta_1); where build_model compiles the model with an optimizer of its "
     "own, that one trains: leave momentum out"),
    ("  optimizer: {choices: [sgd, adam]}\n  momentum: {type: real, low: 0.0, high: 0.99}\n", "{}",
     "parameters.momentum: sets the momentum of sgd and rmsprop, but a trial could train with adam, which has no "
     "momentum option (the Adam family's is beta_1): add when: {optimizer: sgd} to it"),
    # the trials where the searched momentum is inactive take the training section's
    ("  optimizer: {choices: [sgd, adam]}\n" + WHEN_SGD, "{momentum: 0.9}",
     "training.momentum: the trials where parameters.momentum is inactive take it, and one could train with adam, "
     "which has no momentum option (the Adam family's is beta_1): leave it out"),
    ("  units: {type: integer, low: 1, high: 9}\n", "{optimizer: {name: sgd, momentum: 0.9}, momentum: 0.5}",
     "training.momentum: optimizer {name: sgd, momentum: 0.9} sets its own momentum: give it once, there or here"),
])
def test_a_momentum_no_trial_optimizer_could_take_is_refused(write_yaml, parameters, training, expected):
    path = write_yaml(MODEL + "parameters:\n" + parameters + f"training: {training}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, resolve=False)
    assert str(info.value).startswith(f"{path}: {expected}"), info.value


@pytest.mark.parametrize("parameters,training,expected", [
    ("kappa: {type: real, low: 0.5, high: 2}", "{group_size: 3}",
     "parameters.kappa: read only by mode gem, but training.mode is downpour: searching it would change nothing"),
    ("elastic_force: {type: real, low: 0.1, high: 0.5}", "{group_size: 3}\n  mode: {choices: [downpour, gem]}",
     "parameters.elastic_force: read only by mode easgd, but the searched modes are downpour, gem"),
    ("sync_every: {type: integer, low: 1, high: 8}", "{mode: gem}",
     "parameters.sync_every: read only by groups of workers (downpour, easgd, gem), but training.group_size is 1"),
    ("mode: {choices: [downpour, allreduce]}", "{}",
     "parameters.mode: read only by groups of several ranks, but training.group_size is 1: each trial trains on one "
     "process"),
    ("lr_scaling: {choices: [none, linear]}", "{mode: allreduce}",
     "parameters.lr_scaling: read only by groups of several ranks, but training.group_size is 1"),
])
def test_a_searched_key_no_trial_mode_reads_is_refused(write_yaml, parameters, training, expected):
    head, _, searched = training.partition("\n")
    path = write_yaml(MODEL + "parameters:\n  " + parameters + "\n" + (searched + "\n" if searched else "")
                      + f"training: {head}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, resolve=False)
    assert str(info.value).startswith(f"{path}: {expected}"), info.value
    ok = MODEL + "parameters:\n  kappa: {type: real, low: 0.5, high: 2}\n  mode: {choices: [downpour, gem]}\n" \
        "training: {group_size: 3}\n"
    load_config(write_yaml(ok), resolve=False)  # some trials read it


def test_a_functions_parameters_named_like_training_keys_it_does_not_read_are_its_own(write_yaml):
    cfg = load_config(write_yaml("objective: {function: objectives.py:branin}\n"
                                 "parameters: {momentum: {type: real, low: 0, high: 2},"
                                 " kappa: {type: real, low: 0, high: 2}, mode: {choices: [up, down]}}\n"),
                      resolve=False)
    assert list(cfg.space.names) == ["momentum", "kappa", "mode"]


def test_a_functions_pareto_search_cannot_count_params(write_yaml):
    path = write_yaml("objective: {function: objectives.py:two_goals, pareto: {loss: minimize, params: minimize}}\n"
                      "parameters: {x: {type: real, low: 0, high: 1}}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, resolve=False)
    assert str(info.value) == (f"{path}: objective.pareto.params: mpiopt counts a model's weights; a function's "
                               "trials have no params: return the size as a metric of another name")


def test_python_tag_is_never_executed(write_yaml, tmp_path):
    marker = tmp_path / "pwned"
    path = write_yaml(f"objective: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError):
        load_config(path)
    assert not marker.exists()


def test_model_param_nothing_consumes(tmp_path):
    (tmp_path / "m.py").write_text("def build(units):\n    pass\n\ndef data():\n    pass\n")
    (tmp_path / "s.yaml").write_text("""
objective: {model: m.py:build, data: m.py:data}
parameters:
  units: {type: integer, low: 1, high: 4}
  unitz: {type: integer, low: 1, high: 4}
""")
    with pytest.raises(ConfigError, match=r"parameters\.unitz: nothing consumes this parameter.*did you mean 'units'"):
        load_config(tmp_path / "s.yaml")
    (tmp_path / "s.yaml").write_text("""
objective: {model: m.py:build, data: m.py:data}
parameters:
  units: {type: integer, low: 1, high: 4}
  min_epochs: {type: integer, low: 1, high: 4}
""")
    with pytest.raises(ConfigError, match=r"parameters\.min_epochs: search\.min_epochs is a setting of the search "
                       r"itself, which no trial reads, so it cannot be searched; set it in `search`$"):
        load_config(tmp_path / "s.yaml")


def test_model_metric_must_exist(tmp_path):
    (tmp_path / "m.py").write_text("def build(units):\n    pass\n\ndef data():\n    pass\n")
    (tmp_path / "s.yaml").write_text("""
objective: {model: m.py:build, data: m.py:data, loss: mse, metrics: [accuracy], maximize: val_acc}
parameters: {units: {type: integer, low: 1, high: 4}}
""")
    with pytest.raises(ConfigError,
                       match=r"objective.maximize: 'val_acc' is not a metric.*did you mean 'val_accuracy'"):
        load_config(tmp_path / "s.yaml")


@pytest.mark.parametrize("training, field", [("{early_stopping: {monitor: val_acc}}", "early_stopping"),
                                             ("{target: {monitor: val_acc, value: 0.9}}", "target")])
def test_a_monitor_must_be_a_metric_the_model_reports(tmp_path, training, field):
    (tmp_path / "m.py").write_text("def build(units):\n    pass\n\ndef data():\n    pass\n")
    (tmp_path / "s.yaml").write_text(f"""
objective: {{model: m.py:build, data: m.py:data, loss: mse, metrics: [accuracy], maximize: val_accuracy}}
parameters: {{units: {{type: integer, low: 1, high: 4}}}}
training: {training}
""")
    with pytest.raises(ConfigError,
                       match=rf"training\.{field}\.monitor: 'val_acc' is not a metric.*did you mean 'val_accuracy'"):
        load_config(tmp_path / "s.yaml")


def test_missing_file_binary_file_and_directory(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    with pytest.raises(ConfigError, match=r"a.yaml: a link to no file \(a broken or looping symbolic link\)$"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match=r"deep.yaml: invalid YAML: nested too deep to read \(hundreds of levels\)$"):
        load_config(tmp_path / "deep.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(tmp_path / "bin.yaml")


def test_import_error_in_user_module(tmp_path):
    (tmp_path / "broken.py").write_text("import not_a_real_package_xyz\n")
    (tmp_path / "s.yaml").write_text("objective: {function: broken.py:f}\n"
                                     "parameters: {x: {type: real, low: 0, high: 1}}\n")
    with pytest.raises(ConfigError, match="cannot import broken.py: ModuleNotFoundError"):
        load_config(tmp_path / "s.yaml")


def test_notes_of_a_training_metric_judged_and_of_mode_keys_no_mode_reads(write_yaml):
    from mpiopt.cli import _training_metric_note, _unread_mode_keys_note

    def cfg(objective="maximize: val_accuracy", training="group_size: 2, mode: allreduce, sync_every: 2, kappa: 1.5",
            params=""):
        return load_config(write_yaml(
            f"objective: {{model: m.py:build, data: m.py:load, loss: mse, metrics: [accuracy], {objective}}}\n"
            f"parameters:\n  units: {{type: integer, low: 2, high: 8}}\n{params}training: {{{training}}}\n"),
            resolve=False)

    assert _training_metric_note(cfg("maximize: accuracy")) == (
        "objective: maximize accuracy: a metric of the training data, which rewards a model that memorises it "
        "(val_accuracy judges the model on the validation data)")
    assert _training_metric_note(cfg()) is None and _training_metric_note(cfg("minimize: val_loss")) is None
    assert _unread_mode_keys_note(cfg()) == ("training.kappa, training.sync_every: not read where training.mode is "
                                             "allreduce, so they change nothing")
    assert _unread_mode_keys_note(cfg(training="group_size: 1, kappa: 1.5")) == (
        "training.kappa: not read where training.group_size is 1, so it changes nothing")
    assert _unread_mode_keys_note(cfg(training="group_size: 2, mode: gem, kappa: 1.5, "
                                               "optimizer: {name: sgd, momentum: 0.9}")) is None
    searched = cfg(training="group_size: 2, kappa: 1.5", params="  mode: {choices: [downpour, gem]}\n")
    assert _unread_mode_keys_note(searched) is None  # a gem trial reads it
    from mpiopt.cli import _warmup_note

    assert _warmup_note(cfg(training="epochs: 2, warmup_epochs: 3, lr_scaling: linear")) == (
        "training.warmup_epochs 3 is not below training.epochs 2: the learning rate is still ramping up when "
        "training ends")
    assert _warmup_note(cfg(training="epochs: 4, warmup_epochs: 1, lr_scaling: linear")) is None
    assert _warmup_note(cfg(training="epochs: 4, warmup_epochs: 1")) == (
        "training.warmup_epochs 1: ramps the learning rate up to the one training.lr_scaling gives, and lr_scaling "
        "is none, so it changes nothing")
    assert _warmup_note(cfg(training="epochs: 4, warmup_epochs: 1, group_size: 2",
                            params="  lr_scaling: {choices: [none, linear]}\n")) is None  # a linear trial ramps


def test_every_point_of_a_discrete_space_counts_inactive_values_once():
    space = parse_space({"opt": {"choices": ["sgd", "adam"]},
                         "momentum": {"choices": [0.0, 0.9], "when": {"opt": "sgd"}},
                         "layers": {"type": "integer", "low": 1, "high": 3}}, source="s", did_you_mean=lambda *_: "")
    points = every_point(space, limit=100)
    assert len(points) == 9  # (sgd, 2 momenta, 3 depths) and (adam, 3 depths)
    assert {"opt": "adam", "layers": 2} in points and {"opt": "sgd", "momentum": 0.9, "layers": 2} in points
    assert every_point(space, limit=11) is None  # 12 combinations to list
    real = parse_space({"lr": {"type": "real", "low": 0.1, "high": 1.0}}, source="s", did_you_mean=lambda *_: "")
    assert every_point(real, limit=100) is None
    # counted before listed: a seed over the whole int32 range would be a list of 2**31 values
    wide = parse_space({"seed": {"type": "integer", "low": 0, "high": 2**31 - 1}, "opt": {"choices": ["a", "b"]}},
                       source="s", did_you_mean=lambda *_: "")
    assert every_point(wide, limit=100_000) is None
    # the count behind check's note: listed where conditions merge points, multiplied where none can
    assert distinct_points(space, limit=100) == 9 and distinct_points(wide) is None and distinct_points(real) is None
    plain = parse_space({"a": {"type": "integer", "low": 1, "high": 5}, "b": {"choices": ["x", "y"]}}, source="s",
                        did_you_mean=lambda *_: "")
    assert distinct_points(plain) == 10 == len(every_point(plain))


def test_conditions_that_narrow_one_another_but_can_hold_are_accepted(write_yaml):
    cfg = load_config(write_yaml("objective: {function: objectives.py:branin}\nparameters: {opt: {choices: [a, b, c]}, "
                                 "n: {choices: [c, d], when: {opt: [a, b]}}, "
                                 "x: {type: real, low: 0, high: 1, when: {opt: [b, c], n: c}}}\n"))
    assert cfg.space.active({"opt": "b", "n": "c", "x": 0.5}) == {"opt": "b", "n": "c", "x": 0.5}


def test_evolutions_default_tournament_fits_a_small_population(write_yaml):
    cfg = load_config(write_yaml(GOOD + "search: {algorithm: evolution, population: 3}\n"))
    assert (cfg.search.population, cfg.search.sample) == (3, 3)


def test_yes_no_on_and_off_in_choices_and_conditions_are_named(write_yaml):
    cfg = load_config(write_yaml("objective: {function: objectives.py:branin}\nparameters:\n"
                                 "  country: {choices: [NO, SE, 'no', true]}\n  gate: {choices: [on, false]}\n"
                                 "  x: {type: real, low: 0, high: 1, when: {gate: on}}\n"))
    assert cfg.space["country"].choices == (False, "SE", "no", True)
    assert cfg.yes_no_words == ("parameters.country.choices: NO", "parameters.gate.choices: on",
                                "parameters.x.when: on")
    assert load_config(write_yaml(GOOD)).yes_no_words == ()


def test_text_that_reads_as_a_number_comes_back_as_text_from_mpiopts_yaml():
    from mpiopt.config import dump_yaml, load_value

    value = {"c": "1e-3", "d": 1e-7, "e": "1", "f": 0.001}
    assert load_value(dump_yaml(value)) == value
