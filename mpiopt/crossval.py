"""k-fold cross-validation of a `model` objective (`objective.folds`): one trial trains K times.

Each fold trains on K-1 parts of the training data and validates on the remaining part
(`learn.fold_source` cuts them, the same way for every trial). A group of at least K ranks
splits into K sub-groups, as even as possible, that train their folds at once; a smaller group
trains them in turn, all its ranks together. Each fold is a normal training job on its own
failure-aware communicator, writing to `trials/<id>/fold_<k>/`; a fold that completes leaves its
result there (`fold.json`), so that a trial re-run after a kill trains only the folds it lacks.
Every rank learns every fold's outcome and merges them the same way: the figure of merit is the
mean over the folds, with their standard deviation beside it, or the first bad fold decides.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ._errors import TrialTimeout, storage_failure
from ._files import atomic_write
from .journal import drop_checkpoint
from .trial import Report, TrialResult, TrialStatus

FOLD_FILE = "fold.json"


# -- who trains which fold -----------------------------------------------------------------------
@dataclass(frozen=True)
class FoldPlan:
    """The sub-groups ("teams") of a group's ranks and the folds each trains, in turn."""

    teams: tuple[tuple[int, ...], ...]  # group ranks of each team
    folds: tuple[tuple[int, ...], ...]  # the folds (0-based) each team trains

    @property
    def parallel(self) -> bool:
        return len(self.teams) > 1

    def team_of(self, rank: int) -> int:
        return next(t for t, ranks in enumerate(self.teams) if rank in ranks)

    def describe(self) -> str:
        if self.parallel:
            sizes = ", ".join(str(len(t)) for t in self.teams)
            return f"trained at once on sub-groups of {sizes} rank{'s' if len(self.teams[0]) > 1 else ''}"
        n = len(self.teams[0])
        return f"trained in turn by the whole group of {n} rank{'s' if n > 1 else ''}"


def plan_folds(group_size: int, folds: int) -> FoldPlan:
    """At least `folds` ranks: one team a fold, sizes as even as possible (4 ranks, 3 folds: 2, 1, 1).
    Fewer: one team of every rank trains the folds one after another."""
    if group_size < folds:
        return FoldPlan((tuple(range(group_size)),), (tuple(range(folds)),))
    base, extra = divmod(group_size, folds)
    teams, start = [], 0
    for k in range(folds):
        size = base + (1 if k < extra else 0)
        teams.append(tuple(range(start, start + size)))
        start += size
    return FoldPlan(tuple(teams), tuple((k,) for k in range(folds)))


# -- a fold's result on disk ---------------------------------------------------------------------
def fold_dir(trial_dir: Path, fold: int) -> Path:
    """The folder of fold `fold` (0-based): trials/<id>/fold_1 ... fold_K, as people count folds."""
    return trial_dir / f"fold_{fold + 1}"


def save_fold(folder: Path, result: TrialResult, history: list[dict[str, float]], trained_s: float) -> None:
    """Keep a completed fold's result for a re-run of its trial (written whole or not at all)."""
    record = {"result": result.to_json(), "history": history, "trained_s": trained_s}
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / FOLD_FILE, json.dumps(record, allow_nan=False).encode("utf-8"))


def fold_progress(trial_dir: Path, folds: int) -> str:
    """'folds: 1 done, 2 at epoch 5, 3 not started', from the folds' folders: a k-fold trial
    reports its epochs only once every fold is done, so `mpiopt status` reads how far each got."""
    parts = []
    for k in range(folds):
        folder = fold_dir(trial_dir, k)
        if (folder / FOLD_FILE).exists():
            parts.append(f"{k + 1} done")
            continue
        try:  # the header, then a line an epoch, written as each ends
            epochs = (folder / "history.csv").read_text("utf-8").count("\n") - 1
        except OSError:
            epochs = 0
        parts.append(f"{k + 1} at epoch {epochs}" if epochs > 0 else f"{k + 1} not started")
    return "folds: " + ", ".join(parts)


def load_fold(folder: Path) -> dict[str, Any] | None:
    """The record `save_fold` left in `folder`, or None (none, or unreadable: the fold trains again)."""
    try:
        record = json.loads((folder / FOLD_FILE).read_text("utf-8"))
        TrialResult.from_json(record["result"])
        return {"result": record["result"], "history": list(record["history"]),
                "trained_s": float(record["trained_s"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


# -- merging the folds ---------------------------------------------------------------------------
@dataclass(frozen=True)
class FoldRun:
    """What one rank made of one fold."""

    fold: int
    rank: int  # in the trial's group
    result: TrialResult
    history: list[dict[str, float]] | None = None  # the fold's epochs (its team's first rank)
    earlier_s: float = 0.0  # training time of earlier attempts: a fold read back whole, or its checkpoint's


def merge_folds(runs: list[FoldRun], folds: int, parallel: bool) -> TrialResult:
    """The trial's result from its folds': the mean figure of merit and its standard deviation
    over the folds, and the mean of each final metric; or, where a fold did not complete, the
    first such fold's status and error. The standard deviation is the population one (numpy's
    default, as scikit-learn's cross-validation scores are usually summarised)."""
    from .group import merge

    several = len({r.rank for r in runs}) > 1
    per_fold = {}
    for k in sorted({r.fold for r in runs}):
        mine = sorted((r for r in runs if r.fold == k), key=lambda r: r.rank)
        res = merge([r.result for r in mine], [r.rank for r in mine])
        if len(mine) == 1 and several and res.status != TrialStatus.COMPLETED:  # a sub-group of one rank
            res = replace(res, error=f"group rank {mine[0].rank}: {res.error}")
        per_fold[k] = res
    earlier = [max(r.earlier_s for r in runs if r.fold == k) for k in per_fold]
    # folds trained at once spent the time of the longest; folds in turn, the time of them all
    resumed = (max(earlier) if parallel else sum(earlier)) or None
    bad = next((k for k, res in per_fold.items() if res.status != TrialStatus.COMPLETED), None)
    if bad is not None:
        res = per_fold[bad]
        return TrialResult(status=res.status, metrics=res.metrics, epochs=res.epochs, misuse=res.misuse,
                           misuse_field=res.misuse_field, error=f"fold {bad + 1} of {folds}: {res.error}",
                           detail=res.detail, resumed_s=resumed)
    results = list(per_fold.values())
    values = [res.objective for res in results]
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return TrialResult(objective=mean, objective_std=std, metrics=_mean_rows([res.metrics for res in results]),
                       epochs=max(res.epochs or 0 for res in results), resumed_s=resumed)


def _mean_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    """The mean of each metric that every row has."""
    keys = [k for k in rows[0] if all(k in row for row in rows)]
    return {k: sum(row[k] for row in rows) / len(rows) for k in keys}


def mean_curve(histories: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    """The folds' mean at each epoch up to the longest fold's last (the trial's `epochs`): a fold
    that stopped early counts with its last epoch's values from there on."""
    longest = max(histories, key=len)
    return [{**_mean_rows([h[min(i, len(h) - 1)] for h in histories]), "epoch": longest[i]["epoch"]}
            for i in range(len(longest))]


# -- running the folds ---------------------------------------------------------------------------
def cross_validate(runner, source, params: dict[str, Any], training: dict[str, Any], comm, trial: int,
                   trial_dir: Path | None, reporter) -> TrialResult:
    """One k-fold trial on this rank of its group `comm` (None: alone); every rank returns the
    merged result. Group rank 0 sends the folds' mean curve as the trial's epoch reports."""
    cfg = runner.cfg
    folds = int(cfg.objective.folds)
    size, rank = (comm.Get_size(), comm.Get_rank()) if comm is not None else (1, 0)
    plan = plan_folds(size, folds)
    team = plan.team_of(rank)
    began = time.monotonic()
    mine: list[FoldRun] = []
    for k in plan.folds[team]:
        run = _train_fold(runner, source, params, training, comm, team, k, trial, trial_dir, reporter, began)
        mine.append(replace(run, rank=rank))
        if run.result.status != TrialStatus.COMPLETED:
            break  # the trial is decided; the folds left would be trained for nothing
    runs = [r for part in (comm.allgather(mine) if comm is not None else [mine]) for r in part]
    result = merge_folds(runs, folds, plan.parallel)
    if rank == 0 and result.status == TrialStatus.COMPLETED:
        _report_curve(reporter, trial, _histories(runs))
    return result


def _histories(runs: list[FoldRun]) -> list[list[dict[str, float]]]:
    """Each fold's epochs, as its team's first rank kept them."""
    first: dict[int, FoldRun] = {}
    for r in sorted(runs, key=lambda r: (r.fold, r.rank)):
        if r.history and r.fold not in first:
            first[r.fold] = r
    return [r.history for r in first.values()]


def _train_fold(runner, source, params, training, comm, team: int, k: int, trial: int, trial_dir: Path | None,
                reporter, began: float) -> FoldRun:
    """Fold `k` on this rank of its team. Every rank of the team ends with the same verdict on
    whether the fold completed: a rank whose part failed tells the others (`notify_failure`)."""
    sub = comm.split(team) if comm is not None else None
    t0 = time.monotonic()
    try:
        lead = sub is None or sub.Get_rank() == 0
        folder = fold_dir(trial_dir, k) if trial_dir is not None else None
        # the team's first rank decides, and tells the others, so the team never disagrees
        start = _fold_start(folder, training.get("time_limit"), began) if lead else None
        if sub is not None and sub.Get_size() > 1:
            start = sub.bcast(start)
        if start["done"] is not None:
            done = start["done"]
            return FoldRun(k, 0, TrialResult.from_json(done["result"]), done["history"], done["trained_s"])
        run = _fit_fold(runner, source, params, {**training, "time_limit": start["left"]}, sub, k, trial, folder,
                        reporter, lead)
        if run.result.status != TrialStatus.COMPLETED and sub is not None and sub.failed_peer is None:
            sub.notify_failure()
    finally:
        if sub is not None:
            sub.close()
    if sub is not None and sub.failed_peer is not None and run.result.status == TrialStatus.COMPLETED:
        # another rank of the team failed this fold after this rank's part was done
        run = replace(run, result=TrialResult(status=TrialStatus.FAILED, error=f"GroupPeerFailed: rank "
                                              f"{sub.failed_peer} of fold {k + 1}'s sub-group failed"))
    if lead and folder is not None and run.result.status == TrialStatus.COMPLETED:
        save_fold(folder, run.result, run.history or [], run.earlier_s + (time.monotonic() - t0))
        drop_checkpoint(folder)  # fold.json stands for it now: a re-run of the trial skips the fold
    return run


def _fold_start(folder: Path | None, time_limit: float | None, began: float) -> dict[str, Any]:
    """Whether the fold completed in an earlier attempt of its trial, and the trial's time left."""
    left = None if not time_limit else float(time_limit) - (time.monotonic() - began)
    return {"done": load_fold(folder) if folder is not None else None, "left": left}


def _fit_fold(runner, source, params, training, sub, k: int, trial: int, folder: Path | None, reporter,
              lead: bool) -> FoldRun:
    """Train fold `k`: this rank's result, and on the team's first rank the fold's epochs."""
    from .learn import fold_source
    from .objective import error_detail, error_text

    left = training["time_limit"]
    try:
        if left is not None and left <= 0:
            raise TrialTimeout(f"stopped by training.time_limit before fold {k + 1}")
        data = fold_source(source, int(runner.cfg.objective.folds), k, runner.cfg.search.seed)
        on_epoch = _progress(reporter) if lead else None
        result = runner.fit(data, params, training, sub, trial, folder, on_epoch)
    except TrialTimeout as exc:
        return FoldRun(k, 0, TrialResult(status=TrialStatus.TIMEOUT, epochs=0, error=str(exc)))
    except Exception as exc:  # user code: a failing fold fails its trial, never the search
        if storage_failure(exc, folder.parent if folder is not None else None):  # a full disk stops the search
            raise
        return FoldRun(k, 0, TrialResult(status=TrialStatus.FAILED, error=error_text(exc), detail=error_detail(exc)))
    outcome = runner.last_training if lead else None
    return FoldRun(k, 0, result, outcome.history if outcome is not None else None, result.resumed_s or 0.0)


def _progress(reporter):
    """A fold's epochs go to the trial's progress lines only: the scheduler sees no fold alone."""
    if reporter is None:
        return None

    def on_epoch(epoch: int, row: dict[str, float]) -> None:
        reporter.progress(epoch, row)

    return on_epoch


def _report_curve(reporter, trial: int, histories: list[list[dict[str, float]]]) -> None:
    """The trial's epoch reports (what `load_history` and the learning curves show): the folds'
    mean curve, sent once every fold is done."""
    if reporter is None or reporter.send is None or not histories:
        return
    for row in mean_curve(histories):
        reporter.send(Report(trial, int(row["epoch"]), {m: v for m, v in row.items() if m != "epoch"}))
