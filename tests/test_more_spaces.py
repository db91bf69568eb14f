"""Conditional parameters, evolution and Pareto searches, in-process (SPEC §2 "More of §2")."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import run_cli, two_goals_space
from mpiopt import load_results
from mpiopt._errors import ConfigError
from mpiopt.config import load_config
from mpiopt.pareto import front_mask, hypervolume_2d, losses, scalarise
from mpiopt.search import BayesianSearch, EvolutionSearch, ParetoSearch, RandomSearch
from mpiopt.search._gp import UnitCoder
from mpiopt.space import parse_space

TREE = {
    "optimizer": {"choices": ["sgd", "adam", "rmsprop"]},
    "lr": {"type": "real", "low": 1e-4, "high": 1.0, "prior": "log-uniform"},
    "momentum": {"type": "real", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}},
    "nesterov": {"choices": [True, False], "when": {"optimizer": "sgd"}},
    "dampening": {"type": "real", "low": 0.0, "high": 1.0, "when": {"nesterov": False}},  # a child of a child
    "rho": {"type": "real", "low": 0.5, "high": 0.99, "when": {"optimizer": ["rmsprop"]}},
    "layers": {"choices": [1, 2]},
    "width2": {"type": "integer", "low": 4, "high": 64, "when": {"layers": 2}},
}


def tree_space(raw=None):
    return parse_space(raw or TREE, source="s.yaml", did_you_mean=lambda *_: "")


def tree_loss(p: dict) -> float:
    v = (math.log10(p["lr"]) + 2) ** 2 + {"sgd": 0.0, "adam": 0.2, "rmsprop": 0.3}[p["optimizer"]]
    if p["optimizer"] == "sgd":
        v += (p["momentum"] - 0.9) ** 2 + (p["dampening"] if not p["nesterov"] else 0.0)
    if p["optimizer"] == "rmsprop":
        v += (p["rho"] - 0.9) ** 2
    return v + (0.1 if p["layers"] == 1 else abs(p["width2"] - 32) / 100)


# -- the space -------------------------------------------------------------------------------------
def test_active_follows_chains_of_conditions():
    s = tree_space()
    full = {"optimizer": "sgd", "lr": 0.1, "momentum": 0.5, "nesterov": False, "dampening": 0.2, "rho": 0.9,
            "layers": 1, "width2": 8}
    assert s.active(full) == {"optimizer": "sgd", "lr": 0.1, "momentum": 0.5, "nesterov": False,
                              "dampening": 0.2, "layers": 1}
    assert s.active({**full, "nesterov": True}).keys() == {"optimizer", "lr", "momentum", "nesterov", "layers"}
    # the grandchild goes with its parent: nesterov inactive, so dampening is too
    assert s.active({**full, "optimizer": "rmsprop", "layers": 2}) == {
        "optimizer": "rmsprop", "lr": 0.1, "rho": 0.9, "layers": 2, "width2": 8}
    assert s.middle() == {"optimizer": "sgd", "lr": 0.01, "momentum": 0.495, "nesterov": True, "layers": 1}
    assert s.to_dict()["rho"]["when"] == {"optimizer": ["rmsprop"]}


@pytest.mark.parametrize("when, message", [
    ({"optimiser": "sgd"}, "parameters.momentum.when.optimiser: no parameter named 'optimiser' to depend on "
                           "(did you mean 'optimizer'?)"),
    ({"lr": 0.1}, "parameters.momentum.when.lr: a condition needs a categorical parent, but 'lr' is real"),
    ({"optimizer": "sdg"}, "parameters.momentum.when.optimizer: 'sdg' is not a choice of 'optimizer'"),
    ({"momentum": 0.5}, "parameters.momentum.when.momentum: a parameter cannot depend on itself"),
    ("sgd", "parameters.momentum.when: expected a mapping of a categorical parameter to its value(s)"),
])
def test_bad_conditions_are_one_line_naming_the_field(write_yaml, when, message):
    text = ("objective: {function: objectives.py:branin}\nparameters:\n"
            "  optimizer: {choices: [sgd, adam]}\n  lr: {type: real, low: 0.001, high: 1}\n"
            f"  momentum: {{type: real, low: 0, high: 1, when: {_flow(when)}}}\n")
    with pytest.raises(ConfigError) as e:
        load_config(write_yaml(text), resolve=False)
    assert str(e.value).split(": ", 1)[1].startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def test_a_cycle_of_conditions_is_refused(write_yaml):
    text = """
        objective: {function: objectives.py:branin}
        parameters:
          a: {choices: [x, y], when: {c: u}}
          b: {choices: [x, y], when: {a: x}}
          c: {choices: [u, v], when: {b: y}}
    """
    with pytest.raises(ConfigError, match=r"parameters\.a\.when: the conditions form a cycle \(a -> c -> b -> a\)"):
        load_config(write_yaml(text), resolve=False)


def test_build_model_needs_a_default_for_a_conditional_parameter(tmp_path):
    (tmp_path / "m.py").write_text("def build(optimizer, momentum):\n    pass\n\ndef data():\n    pass\n")
    (tmp_path / "s.yaml").write_text(
        "objective: {model: m.py:build, data: m.py:data}\nparameters:\n  optimizer: {choices: [sgd, adam]}\n"
        "  momentum: {type: real, low: 0, high: 0.9, when: {optimizer: sgd}}\n")
    with pytest.raises(ConfigError, match=r"parameters\.momentum\.when: m\.py:build requires momentum, which is "
                                          r"only passed when optimizer: sgd: give it a default"):
        load_config(tmp_path / "s.yaml")


# -- every algorithm on a conditional space ------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda s: RandomSearch(s, seed=3),
    lambda s: BayesianSearch(s, seed=3, initial_points=6),
    lambda s: BayesianSearch(s, seed=3, initial_points=6, surrogate="ET"),
    lambda s: EvolutionSearch(s, seed=3, population=8, sample=3),
])
def test_suggestions_hold_exactly_the_active_parameters_and_never_repeat(make):
    s = tree_space()
    searcher = make(s)
    seen = set()
    for n in range(20):
        p = searcher.ask(n)
        assert p == s.complete(p), p  # every parameter its values make active, and no other
        key = tuple(sorted(p.items()))
        assert key not in seen
        seen.add(key)
        if n % 3 != 2:  # a third stay pending, as in a parallel search
            searcher.tell(n, p, tree_loss(p))


def test_the_gp_encodes_an_inactive_parameter_as_one_constant():
    s = tree_space()
    coder = UnitCoder(s)
    a = coder.encode({"optimizer": "adam", "lr": 0.01, "layers": 1})
    # decoded points of any inactive values re-encode to the same point: no invented dimension
    for momentum in (0.0, 0.3, 0.9):
        x = coder.encode({"optimizer": "sgd", "lr": 0.01, "momentum": momentum, "nesterov": True, "layers": 1})
        x[coder.cols[0]] = [0, 1, 0]  # switch the parent to adam in the unit cube
        assert np.array_equal(coder.canonical(x[None, :].copy())[0], a)
    assert coder.free_at(a) == [coder.cols[1].start]  # only lr may move: momentum and the others are off
    assert coder.decode(a) == {"optimizer": "adam", "lr": pytest.approx(0.01), "layers": 1}


def test_the_gp_finds_the_best_branch_of_a_conditional_space():
    s = tree_space()
    best: dict[str, list[float]] = {"gp": [], "random": []}
    for seed in range(3):
        for name, searcher in [("gp", BayesianSearch(s, seed=seed, initial_points=6)),
                               ("random", RandomSearch(s, seed=seed))]:
            values = []
            for n in range(30):
                p = searcher.ask(n)
                values.append(tree_loss(p))
                searcher.tell(n, p, values[-1])
            best[name].append(min(values))
    assert np.median(best["gp"]) < np.median(best["random"]) / 2, best


def test_a_search_table_leaves_inactive_parameters_empty(write_yaml, tmp_path):
    space = write_yaml(two_goals_space("cond", "minimize: loss",
                                       "{trials: 12, algorithm: evolution, population: 4, sample: 2}"))
    p = run_cli(["search", space], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    df = load_results(tmp_path / "runs" / "cond")
    assert set(df.status) == {"completed"}  # two_goals fails a trial given an inactive parameter
    assert df.params_momentum.isna().tolist() == (df.params_optimizer != "sgd").tolist()
    assert df.params_width2.isna().tolist() == (df.params_layers != 2).tolist()
    assert str(df.params_width2.dtype) == "Int64" and str(df.params_width1.dtype) == "Int64"  # integers, gaps or not
    shown = run_cli(["results", str(tmp_path / "runs" / "cond")], cwd=tmp_path).stdout
    assert "None" not in shown and "nan" not in shown.lower() and "<NA>" not in shown
    rows = [line.split(",") for line in
            run_cli(["results", str(tmp_path / "runs" / "cond"), "--format", "csv"], cwd=tmp_path).stdout.splitlines()]
    width2 = [row[rows[0].index("params_width2")] for row in rows[1:]]
    assert "" in width2 and all(v == "" or v.isdigit() for v in width2), width2  # 12, not 12.0


# -- evolution -------------------------------------------------------------------------------------
def test_evolution_is_reproducible_from_its_seed_and_mutates_one_parameter():
    space = parse_space({f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(4)} |
                        {"k": {"type": "integer", "low": 1, "high": 9}, "c": {"choices": ["a", "b", "c"]}},
                        source="s", did_you_mean=lambda *_: "")

    def run(seed):
        s = EvolutionSearch(space, seed=seed, population=10, sample=3)
        out = []
        for n in range(40):
            p = s.ask(n)
            s.tell(n, p, sum(v for k, v in p.items() if k.startswith("x")) + p["k"] / 9)
            out.append(p)
        return out

    a, b = run(1), run(1)
    assert a == b and a != run(2)
    told = a[:10]
    for child in a[10:]:  # after the first `population` random points, each a parent plus one change
        assert min(sum(child[k] != parent[k] for k in child) for parent in told) == 1
        told.append(child)


def test_evolution_tournaments_pick_from_the_most_recent_results_only():
    space = parse_space({"x": {"type": "real", "low": 0.0, "high": 1.0}}, source="s", did_you_mean=lambda *_: "")
    s = EvolutionSearch(space, seed=0, population=4, sample=4)
    for n in range(4):
        p = s.ask(n)
        s.tell(n, p, 0.0 if n == 0 else 1.0)  # trial 0 is the best, then ages out below
    s.tell(4, {"x": 0.9}, 0.5)
    s.tell(5, {"x": 0.1}, 0.5)
    assert [s.observed[t][1] for t in s._members] == [1.0, 1.0, 0.5, 0.5]
    parents = {s._tournament()["x"] for _ in range(20)}
    assert parents <= {0.9, 0.1}  # the best two of the population, never the aged-out trial 0


def test_evolution_settings_are_checked(write_yaml):
    with pytest.raises(ConfigError, match=r"search\.sample: a tournament of 9 cannot be drawn from a population of 4"):
        load_config(write_yaml("objective: {function: objectives.py:branin}\nparameters: {x: {type: real, low: 0, "
                               "high: 1}}\nsearch: {algorithm: evolution, population: 4, sample: 9}\n"), resolve=False)
    with pytest.raises(ConfigError, match=r"search\.population: "):
        load_config(write_yaml("objective: {function: objectives.py:branin}\nparameters: {x: {type: real, low: 0, "
                               "high: 1}}\nsearch: {algorithm: evolution, population: 1}\n"), resolve=False)


# -- Pareto ----------------------------------------------------------------------------------------
def test_front_and_hypervolume():
    pts = [(1.0, 5.0), (2.0, 3.0), (3.0, 4.0), (4.0, 1.0), (2.0, 3.0), (5.0, 5.0)]
    assert front_mask(pts).tolist() == [True, True, False, True, True, False]
    # rectangles to (6, 6): 5x1 + 4x2 + 2x2 = 17
    assert hypervolume_2d(pts, (6.0, 6.0)) == pytest.approx(17.0)
    assert hypervolume_2d([(7.0, 1.0)], (6.0, 6.0)) == 0.0
    goals = (("val_accuracy", "maximize"), ("params", "minimize"), ("duration_s", "minimize"))
    assert losses(goals, {"val_accuracy": 0.9, "params": 100.0}, 3.0) == (-0.9, 100.0, 3.0)
    assert losses(goals, {"val_accuracy": float("nan"), "params": 100.0}, 3.0) is None


def test_scalarisation_reaches_every_point_of_a_concave_front():
    # a weighted sum never prefers the middle of a concave front; the Chebyshev scalarisation does
    front = np.array([(0.0, 1.0), (0.6, 0.6), (1.0, 0.0)])
    assert int(np.argmin(scalarise(front, np.array([0.5, 0.5])))) == 1


def test_pareto_search_spreads_over_the_front():
    space = parse_space({"x": {"type": "real", "low": 0.0, "high": 1.0},
                         "y": {"type": "real", "low": 0.0, "high": 1.0}}, source="s", did_you_mean=lambda *_: "")
    s = ParetoSearch(BayesianSearch(space, seed=0, acquisition="EI"), 2, seed=0)
    f = []
    for n in range(30):
        p = s.ask(n)
        f.append((p["x"], (1 + 4 * p["y"]) * (1 - math.sqrt(p["x"] / (1 + 4 * p["y"])))))
        s.tell(n, p, f[-1] if n != 3 else None)  # a failed trial is told None
    on = np.array(f)[front_mask(f)]
    assert len(on) >= 5 and on[:, 0].max() - on[:, 0].min() > 0.5  # several points, across the front
    assert hypervolume_2d(f, (1.1, 1.1)) > 0.55  # random search: ~0.4 here; the front's best 0.77


def test_pareto_config_errors(write_yaml):
    head = "objective:\n  function: objectives.py:branin\n"
    cases = [
        ("  pareto: {loss: minimize}\n", "", "objective.pareto: expected a mapping of two metrics or more"),
        ("  pareto: {loss: minimize, size: smallest}\n", "", "objective.pareto.size: expected minimize or maximize"),
        ("  pareto: {loss: minimize, size: minimize}\n  minimize: loss\n", "",
         "objective.minimize: give `pareto` or `minimize`, not both"),
        ("  pareto: {params: minimize, duration_s: minimize}\n", "",
         "objective.pareto: needs a goal besides params and duration_s"),
        ("  pareto: {loss: minimize, size: minimize}\n", "search: {scheduler: asha}\ntraining: {epochs: 9}\n",
         "search.scheduler: the asha scheduler ranks trials by one figure of merit"),
        ("  pareto: {loss: minimize, size: minimize}\n", "search: {target: 0.1}\n",
         "search.target: a Pareto search (objective.pareto) has no single figure of merit"),
        ("  pareto: {loss: minimize, error: minimize}\n", "",
         "objective.pareto.error: 'error' names a column of the results table, not a metric"),
        ("  pareto: {loss: minimize, params: minimize}\n", "",
         "objective.pareto.params: mpiopt counts a model's weights; a function's trials have no params"),
    ]
    for objective, rest, message in cases:
        text = head + objective + "parameters: {x: {type: real, low: 0, high: 1}}\n" + rest
        with pytest.raises(ConfigError) as e:
            load_config(write_yaml(text), resolve=False)
        assert message in str(e.value) and "\n" not in str(e.value)


def test_a_pareto_search_marks_and_prints_its_front(write_yaml, tmp_path):
    space = write_yaml(two_goals_space("front", "pareto: {loss: minimize, size: minimize}",
                                       "{trials: 16, initial_points: 6}"))
    p = run_cli(["search", space], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    df = load_results(tmp_path / "runs" / "front")
    assert set(df.status) == {"completed"}
    done = list(zip(df.loss, df["size"], strict=True))
    assert df.pareto.tolist() == front_mask(done).tolist()
    assert (df.objective == df.loss).all()  # the first goal that the trial reports
    assert "Pareto front:" in p.stderr + p.stdout
    shown = run_cli(["results", str(tmp_path / "runs" / "front")], cwd=tmp_path).stdout
    assert f"Pareto front of minimize loss, minimize size: {int(df.pareto.sum())} trials" in shown
    body = shown.splitlines()[2:]
    assert sorted(int(line.split()[0]) for line in body) == sorted(df.trial[df.pareto].tolist())
    # for programs, every trial: the front first
    rows = json.loads(run_cli(["results", str(tmp_path / "runs" / "front"), "--format", "json"], cwd=tmp_path).stdout)
    front = int(df.pareto.sum())
    assert len(rows) == len(df) and [r["pareto"] for r in rows] == [True] * front + [False] * (len(df) - front)
    best = run_cli(["results", str(tmp_path / "runs" / "front"), "--best"], cwd=tmp_path)
    assert "note: a Pareto search has no single best: --best is the best by its first goal that training " \
        "reports, loss" in best.stderr
    assert "(--top K)" not in best.stdout
    assert run_cli(["report", str(tmp_path / "runs" / "front")], cwd=tmp_path).returncode == 0
    page = (tmp_path / "runs" / "front" / "report" / "report.html").read_text()
    assert (tmp_path / "runs" / "front" / "report" / "pareto.png").stat().st_size > 5000
    assert f"{int(df.pareto.sum())} trials (the table" in page and "<th>pareto</th>" in page


# -- helpers ---------------------------------------------------------------------------------------
def _flow(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value)

