"""The default search at allocation scale (in-process, no MPI): the GP's bounded data and memory,
small searches unchanged, and a simulated 512-group search (bench/scale.py's groups, sped up)."""
from __future__ import annotations

import math
import sys
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from mpiopt.search import BayesianSearch
from mpiopt.search import _bayesian, _gp
from mpiopt.space import Categorical, Integer, Real, Space


def mixed_space() -> Space:
    return Space([Real(f"x{i}", 0.0, 1.0) for i in range(1, 5)]
                 + [Real("lr", 1e-4, 1e-1, prior="log-uniform"), Integer("units", 4, 64),
                    Categorical("act", ["relu", "tanh", "elu"])])


def loss(p: dict) -> float:
    x = np.array([p[f"x{i}"] for i in range(1, 5)])
    return float(((x - 0.3) ** 2).sum() + 0.1 * abs(math.log10(p["lr"]) + 2.5) + 0.002 * abs(p["units"] - 24)
                 + {"relu": 0.0, "tanh": 0.05, "elu": 0.1}[p["act"]])


def scripted_suggestions(n: int = 24, running: int = 3) -> list[dict]:
    """A small search's suggestions: `n` asked with `running` trials always pending (ask and tell
    in turn), then a round prepared and six hand-outs from it, one result learned in between."""
    s = BayesianSearch(mixed_space(), seed=7, initial_points=8)
    out, pending = [], deque()
    for trial in range(n):
        if len(pending) == running:
            t, p = pending.popleft()
            s.tell(t, p, loss(p))
        params = s.ask(trial)
        out.append(params)
        pending.append((trial, params))
    t, p = pending.popleft()
    r = s.prepare_round(polish=2)
    for i in range(6):
        out.append(r.hand_out(polish_s=0.0))
        if i == 2:
            s.tell(t, p, loss(p))
            r.learn(p, loss(p))
    return out


@pytest.mark.slow
def test_a_small_search_suggests_what_it_would_without_the_bounds(monkeypatch):
    """The bounds on the GP's data (MAX_TRAIN results, MAX_FANTASIES running trials, MAX_ROUND_GROWTH
    hand-outs a round) must leave a search this small exactly as it would be without them. Both
    runs are made here, not one against a stored file: through 24 kernel fits the suggestions
    carry the rounding of the installed numpy, SciPy and OpenBLAS, which a new release changes."""
    bounded = scripted_suggestions()
    for name in ("MAX_TRAIN", "MAX_FANTASIES", "MAX_ROUND_GROWTH"):
        monkeypatch.setattr(_bayesian, name, 1000)  # far past what 24 trials reach
    unbounded = scripted_suggestions()
    assert len(bounded) == 30 and bounded == unbounded


def random_params(space: Space, rng: np.random.Generator) -> dict:
    out = {f"x{i}": float(rng.random()) for i in range(1, 5)}
    out.update(lr=float(10 ** rng.uniform(-4, -1)), units=int(rng.integers(4, 65)),
               act=str(rng.choice(["relu", "tanh", "elu"])))
    return out


@pytest.mark.slow
def test_the_gp_s_data_and_memory_stay_bounded():
    rng = np.random.default_rng(0)
    s = BayesianSearch(mixed_space(), seed=1, initial_points=8)
    for trial in range(3000):
        p = random_params(s.space, rng)
        s.tell(trial, p, None if trial % 50 == 0 else loss(p))  # some failed
    for trial in range(3000, 4500):
        s.add_pending(trial, random_params(s.space, rng))
    X, y, n_done, _ = s._data()
    assert len(X) == _bayesian.MAX_TRAIN and 0 < n_done < len(X)
    best = sorted(v for _, v in s.completed)[:_bayesian.MAX_TRAIN // 2]
    assert np.allclose(np.sort(y[:n_done])[:len(best)], best)  # the best half is kept
    s.hyper = _gp.Hyper(np.full(s.coder.dim, 0.3), 1.0, 1e-3)  # a kernel fit is not what is tested here
    r = s.prepare_round(polish=0, defer_fit=True)
    bound = _bayesian.MAX_TRAIN + _bayesian.MAX_FANTASIES + _bayesian.MAX_ROUND_GROWTH + 8
    assert r.post.n == _bayesian.MAX_TRAIN + _bayesian.MAX_FANTASIES and r.post.Li.shape[0] <= bound
    handed = [r.hand_out(polish_s=0.0) for _ in range(_bayesian.MAX_ROUND_GROWTH + 200)]
    assert all(p is not None for p in handed)
    assert len({tuple(sorted(p.items())) for p in handed}) == len(handed)  # never the same point twice
    assert r.post.n == r.limit and r.post.Li.shape[0] <= bound  # hand-outs past the limit are not conditioned on


@pytest.mark.slow
def test_a_simulated_512_group_search_records_every_trial_once(tmp_path, write_yaml):
    """The default search (GP rounds in the background) over 512 simulated groups (bench/scale.py's,
    in real time, 1 s trials: results faster than the coordinator hands out), 3,000 trials, past
    the GP's bounds: each trial in the journal once, every one completed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from scale import SimulatedGroups

    import mpiopt
    from mpiopt.config import load_config
    from mpiopt.coordinator import Coordinator
    from mpiopt.journal import RunDir, read_journal
    from mpiopt.search import make_searcher

    space = write_yaml("""
        name: wide
        objective: {function: objectives.py:branin}
        parameters:
          x: {type: real, low: -5.0, high: 10.0}
          y: {type: real, low: 0.0, high: 15.0}
        search: {trials: 3000, seed: 0}
    """)
    cfg = load_config(space)
    transport = SimulatedGroups(512, 1.0, 0.2, lambda p: (p["x"] - 2.0) ** 2 + (p["y"] - 3.0) ** 2, 0, wall_s=300)
    searcher = make_searcher(cfg.space, cfg.search, prefetch=512)
    run = RunDir(tmp_path / "run")
    run.open(resume=False, config_text=Path(space).read_text())
    try:
        summary = Coordinator(cfg, searcher, transport, run).run()
    finally:
        searcher.close()
        run.close()
    # the background thread delivered rounds and hand-outs came from them (one that never delivers
    # leaves both at 0); how many depends on the machine's speed and load, down to one round in the
    # whole search beside another test's MPI job, so their share is bench/scale.py's to measure
    assert searcher.rounds >= 1 and searcher.counts["model"] > 0, searcher.report()
    events, problems = read_journal(tmp_path / "run" / "trials.jsonl")
    assert not problems
    for kind in ("start", "finish"):
        assert sorted(e["trial"] for e in events if e.get("event") == kind) == list(range(3000))
    df = mpiopt.load_results(tmp_path / "run")
    assert list(df.trial) == list(range(3000)) and set(df.status) == {"completed"}
    assert summary.best.objective == df.objective.min()

