"""Running objectives in-process: figures of merit, failures, divergence, wrong types, time limits."""
from __future__ import annotations

import math

import pytest

from mpiopt.config import load_config
from mpiopt.group import merge
from mpiopt.objective import TrialRunner, judge, judge_history


def test_judge_values():
    assert judge(1.5, "minimize", "objective").objective == 1.5
    assert judge(3, "minimize", "objective").status == "completed"
    d = judge({"acc": 0.9, "loss": 0.1, "note": "x"}, "maximize", "acc")
    assert d.objective == 0.9 and d.metrics == {"acc": 0.9, "loss": 0.1}
    assert judge(float("nan"), "minimize", "objective").status == "diverged"
    assert judge({"acc": math.inf}, "maximize", "acc").status == "diverged"
    bad = judge("0.5", "minimize", "objective")
    assert bad.status == "failed" and "returned str" in bad.error
    assert judge([1.0], "minimize", "objective").status == "failed"
    assert judge(True, "minimize", "objective").status == "failed"
    missing = judge({"loss": 1.0}, "maximize", "acc")
    assert missing.status == "failed" and "without 'acc'" in missing.error


def test_judge_history_takes_the_best_epoch():
    h = [{"epoch": 1, "val_loss": 0.9, "loss": 1.0}, {"epoch": 2, "val_loss": 0.5, "loss": 0.7},
         {"epoch": 3, "val_loss": 0.6, "loss": 0.6}]
    o = judge_history(h, "minimize", "val_loss", None)
    assert o.objective == 0.5 and o.metrics["loss"] == 0.7 and o.epochs == 3
    assert judge_history(h, "minimize", "val_acc", None).status == "failed"
    assert judge_history(h, "minimize", "val_loss", "diverged").status == "diverged"
    t = judge_history(h, "minimize", "val_loss", "timeout")
    assert t.status == "timeout" and t.objective is None
    assert judge_history([], "minimize", "val_loss", None).status == "failed"


@pytest.fixture
def runner(write_yaml):
    def make(fn, extra=""):
        return TrialRunner(load_config(write_yaml(f"""
            objective: {{function: objectives.py:{fn}}}
            parameters: {{x: {{type: real, low: -5.0, high: 10.0}}, y: {{type: real, low: 0.0, high: 15.0}}}}
            {extra}
        """)))
    return make


def test_runner_statuses(runner):
    r = runner("moody")
    failed = r.run({"x": -3.0, "y": 1.0}, None)
    assert failed.status == "failed" and failed.error.startswith("ValueError: x is too small")
    assert "Traceback" in failed.error and "moody" in failed.error
    assert r.run({"x": -1.0, "y": 1.0}, None).status == "diverged"
    wrong = r.run({"x": 1.0, "y": 1.0}, None)
    assert wrong.status == "failed" and "returned str" in wrong.error
    ok = r.run({"x": 5.0, "y": 2.0}, None)
    assert ok.status == "completed" and ok.objective == 2.0


def test_time_limit_interrupts_a_sleeping_function(runner, monkeypatch):
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "30")
    r = runner("branin", "training: {time_limit: 0.3}")
    out = r.run({"x": 1.0, "y": 1.0}, None)
    assert out.status == "timeout" and "time_limit" in out.error


def test_merge_names_the_rank_that_failed():
    ok = {"status": "completed", "objective": 1.0, "metrics": {"objective": 1.0}, "epochs": None, "error": None}
    own = {"status": "failed", "objective": None, "metrics": {}, "epochs": None, "error": "RuntimeError: rank 1 broke"}
    echo = {"status": "failed", "objective": None, "metrics": {}, "epochs": None,
            "error": "GroupPeerFailed: rank 1 of the group failed this trial"}
    assert merge([ok, ok]).status == "completed"
    m = merge([echo, own, ok])
    assert m.status == "failed" and m.error.startswith("group rank 1: RuntimeError: rank 1 broke")
