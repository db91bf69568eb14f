"""Early-stopping schedulers: `none`, `asha`, `hyperband` and `median`.

Pure Python: no MPI, no TensorFlow. The coordinator drives a scheduler with `start`, `report`,
`promote` and `finished`; every other method only reads. A scheduler's state is a pure function of
the sequence of those four calls, so replaying a journal's calls in order rebuilds it exactly.

Everything works on losses (lower is better). The loss given to `report` is the trial's best so far;
`None` means not finite and ranks worse than any number.
"""
from __future__ import annotations

import bisect
import statistics
from enum import Enum
from fractions import Fraction
from itertools import pairwise

__all__ = ["SCHEDULERS", "Asha", "Decision", "Hyperband", "MedianStopping", "Scheduler", "ladder", "make_scheduler"]

MEDIAN_MIN_OTHERS = 5  # the median of fewer trials is too noisy to stop anyone on


class Decision(str, Enum):
    CONTINUE = "continue"
    PAUSE = "pause"  # stop at this rung and keep the checkpoint; the trial may be promoted later
    STOP = "stop"  # stopped for good: the trial becomes `pruned`


def _rank_key(loss: float | None, trial: int) -> tuple[bool, float, int]:
    """Best first; a non-finite loss after every number; ties go to the lower trial number."""
    return (loss is None, 0.0 if loss is None else loss, trial)


def _as_inf(loss: float | None) -> float:
    return float("inf") if loss is None else loss


def _check_min_epochs(name: str, epochs: int, min_epochs: int) -> None:
    if not 1 <= min_epochs < epochs:
        raise ValueError(f"`1 <= min_epochs < epochs` must hold for scheduler {name!r}, "
                         f"but got (min_epochs={min_epochs}, epochs={epochs}).")


def _check_ladder(name: str, epochs: int, min_epochs: int, reduction_factor: int) -> None:
    _check_min_epochs(name, epochs, min_epochs)
    if reduction_factor < 2:
        raise ValueError(f"`reduction_factor >= 2` must hold for scheduler {name!r}, "
                         f"but got (reduction_factor={reduction_factor}).")


def ladder(epochs: int, min_epochs: int, reduction_factor: int) -> list[int]:
    """ASHA's rung epochs: min_epochs * reduction_factor**k while below `epochs`, then `epochs`."""
    rungs = []
    rung = min_epochs
    while rung < epochs:
        rungs.append(rung)
        rung *= reduction_factor
    return rungs + [epochs]


class Scheduler:
    """Base class and scheduler `none`: never stops anything. Subclasses override."""

    name = "none"

    def __init__(self, *, epochs: int, min_epochs: int = 1, reduction_factor: int = 3, pausable: bool = True):
        self.epochs = epochs
        self.min_epochs = min_epochs
        self.reduction_factor = reduction_factor
        self.pausable = pausable

    def describe(self) -> str:
        """What the scheduler does with these settings, in a line (for `mpiopt check`)."""
        return "none: every trial runs to its end"

    def start(self, trial: int) -> None:
        """A new trial begins."""

    def decision_epochs(self, trial: int) -> list[int]:
        """Epochs (1-based) after which the trial's group waits for a decision."""
        return []

    def report(self, trial: int, epoch: int, loss: float | None) -> Decision:
        """Records the trial's best loss so far after `epoch` and decides whether it goes on."""
        return Decision.CONTINUE

    def promotable(self, closing: bool = False) -> list[int]:
        """Paused trials that may continue now, in the order they should.

        `closing`: no new trial will start (the budget is spent), so each rung's results are as
        many as it will get and its best ceil(n / reduction_factor) may go on, not floor(n / ...):
        with any number of trials, at least one of every bracket that has any reaches the top."""
        return []

    def promote(self, trial: int) -> None:
        """A group continues this paused trial, on to its next rung."""
        raise ValueError(f"only a paused trial can be promoted, but trial {trial} is not paused.")

    def finished(self, trial: int, cut_short: bool = False) -> None:
        """The trial ended for good: it is never promotable again. `cut_short`: it ended without a
        result of its own (failed, diverged, past its time limit), so it gives up its places among
        the leaders of the rungs it passed, which go to the next (it still counts as a result)."""

    def paused(self) -> list[int]:
        """Trials currently paused, ascending."""
        return []

    def rung(self, trial: int) -> int | None:
        """The highest rung epoch at which the trial has a recorded value."""
        return None

    def rung_epochs(self) -> list[int]:
        """Every rung epoch in use, ascending."""
        return []

    def rung_results(self, epochs: int) -> dict[int, float | None]:
        """Trial -> loss recorded at that rung epoch."""
        return {}

    def epochs_to_go(self, epoch: int = 0, paused: bool = False) -> float | None:
        """The epochs a trial that trained `epoch` so far (0: a new one; `paused`: waiting at that
        rung) trains on average from there when each rung passes on its best 1/reduction_factor:
        for the estimates of the time left. None where no ladder tells it (none and median: trials
        end when their training or the rule ends them)."""
        return None

    def epochs_left(self, new_trials: int, running: list[int], paused: list[int], finished: list[int]) -> float | None:
        """What the rest of the budget trains on average: `new_trials` not started yet, and the
        started trials given by the epochs each reached so far, running (`epochs_to_go`), paused
        (`paused_epochs_to_go`) or finished; None without a ladder."""
        per_trial = self.epochs_to_go()
        if per_trial is None:
            return None
        return (new_trials * per_trial + sum(self.epochs_to_go(epoch) for epoch in running)
                + self.paused_epochs_to_go(new_trials, running, paused, finished))

    def paused_epochs_to_go(self, new_trials: int, running: list[int], paused: list[int], finished: list[int]) -> float:
        """What the `paused` trials train on average (arguments as `epochs_left`): here, each
        `epochs_to_go` from its rung, paused."""
        return sum(self.epochs_to_go(epoch, paused=True) for epoch in paused)


class _Rung:
    """The losses recorded at one rung epoch of a bracket, and the trials promoted from it.

    The results are also kept in rank order as they arrive, and so are the trials paused here:
    the coordinator asks whether a trial leads on every report at a rung and for the paused
    leaders on every hand-out, and a sort or a pass over the leaders of a rung of thousands each
    time would cost the dispatch loop milliseconds.
    """

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.results: dict[int, float | None] = {}
        self.ranked: list[tuple[bool, float, int]] = []  # _rank_key of each result still in the running, best first
        self.waiting: list[tuple[bool, float, int]] = []  # _rank_key of each trial paused here, best first
        self.promoted: set[int] = set()

    def add(self, trial: int, loss: float | None) -> None:
        """A trial's loss here; a trial re-run after a crash re-trains an epoch: its first value stands."""
        if trial not in self.results:
            self.results[trial] = loss
            bisect.insort(self.ranked, _rank_key(loss, trial))

    def _leader_count(self, reduction_factor: int, closing: bool) -> int:
        """How many lead: the best floor(n / reduction_factor) (closing: ceil) of the n results,
        a withdrawn trial's included; a non-finite loss never leads."""
        n = len(self.results)
        return -(-n // reduction_factor) if closing else n // reduction_factor

    def leads(self, trial: int, reduction_factor: int) -> bool:
        """Whether `trial` is among the best floor(n / reduction_factor) results here (see `_leader_count`)."""
        key = _rank_key(self.results[trial], trial)
        return not key[0] and bisect.bisect_left(self.ranked, key) < self._leader_count(reduction_factor, False)

    def leads_the_few(self, trial: int, reduction_factor: int) -> bool:
        """Whether `trial` is the best of fewer than `reduction_factor` results here (none lead yet)."""
        key = _rank_key(self.results[trial], trial)
        return len(self.results) < reduction_factor and not key[0] and self.ranked[0] == key

    def withdraw(self, trial: int) -> None:
        """A trial that can go no further gives up its place in the ranking: the leaders' places
        it held go to the trials behind it. Its result stays (the searcher learns from it)."""
        if trial in self.results:
            key = _rank_key(self.results[trial], trial)
            i = bisect.bisect_left(self.ranked, key)
            if i < len(self.ranked) and self.ranked[i] == key:
                del self.ranked[i]

    def wait(self, trial: int) -> None:
        """The trial (with a result here) is paused at this rung."""
        bisect.insort(self.waiting, _rank_key(self.results[trial], trial))

    def stop_waiting(self, trial: int) -> None:
        key = _rank_key(self.results[trial], trial)
        i = bisect.bisect_left(self.waiting, key)
        if i < len(self.waiting) and self.waiting[i] == key:
            del self.waiting[i]

    def candidates(self, reduction_factor: int, closing: bool = False) -> list[int]:
        """ASHA's get_job rule: the trials paused here that are among the leaders (a promoted
        one waits here no more). The paused are in rank order, so they lead up to the first that
        does not: a few bisections, however many results the rung holds."""
        count = self._leader_count(reduction_factor, closing)
        found = []
        for key in self.waiting:
            if key[0] or bisect.bisect_left(self.ranked, key) >= count:
                break
            found.append(key[2])
        return found


class _Bracket:
    """One ASHA ladder: its rungs, and the trials paused at them."""

    def __init__(self, rung_epochs: list[int], reduction_factor: int, pausable: bool):
        self.rungs = {epoch: _Rung(epoch) for epoch in rung_epochs}
        self.top = rung_epochs[-1]
        self.reduction_factor = reduction_factor
        self.pausable = pausable
        self.paused: dict[int, int] = {}  # trial -> the rung epoch it waits at

    def decision_epochs(self) -> list[int]:
        return [epoch for epoch in self.rungs if epoch < self.top]

    def record(self, trial: int, epoch: int, loss: float | None) -> _Rung | None:
        """Records the loss if `epoch` is a rung; that rung, or None."""
        rung = self.rungs.get(epoch)
        if rung is not None:
            rung.add(trial, loss)
        return rung

    def report(self, trial: int, epoch: int, loss: float | None) -> Decision:
        rung = self.record(trial, epoch, loss)
        if rung is None:
            return Decision.CONTINUE
        if epoch == self.top:
            self.unpause(trial)
            return Decision.CONTINUE
        # A trial already promoted from this rung keeps its promotion when it reports it again. A
        # trial that cannot wait for company goes on while it is the best of the few here, as in
        # Optuna's successive halving: otherwise a small search would train no trial to the end.
        if (trial in rung.promoted or rung.leads(trial, self.reduction_factor)
                or (not self.pausable and rung.leads_the_few(trial, self.reduction_factor))):
            rung.promoted.add(trial)
            self.unpause(trial)
            return Decision.CONTINUE
        if not self.pausable:
            return Decision.STOP
        self.unpause(trial)  # a re-run reporting again where it was paused: paused once
        self.paused[trial] = epoch
        rung.wait(trial)
        return Decision.PAUSE

    def unpause(self, trial: int) -> None:
        """The trial waits at no rung any more (if it did)."""
        epoch = self.paused.pop(trial, None)
        if epoch is not None:
            self.rungs[epoch].stop_waiting(trial)

    def promotable(self, closing: bool = False) -> list[tuple[int, float | None, int]]:
        """(rung epoch, loss, trial) of each paused trial that ASHA's get_job rule would pick."""
        return [(rung.epoch, rung.results[trial], trial)
                for rung in self.rungs.values()
                for trial in rung.candidates(self.reduction_factor, closing)]

    def promote(self, trial: int) -> None:
        epoch = self.paused[trial]
        self.unpause(trial)
        self.rungs[epoch].promoted.add(trial)

    def rung(self, trial: int) -> int | None:
        reached = [epoch for epoch, rung in self.rungs.items() if trial in rung.results]
        return max(reached, default=None)

    def epochs_to_go(self, epoch: int, paused: bool) -> float:
        """A trial goes on to the next rung (paused at a rung: 1/reduction_factor of them), then
        1/reduction_factor of those to the one after, and so on."""
        share = 1 / self.reduction_factor if paused else 1.0
        total = 0.0
        for below, rung in pairwise([epoch, *(r for r in sorted(self.rungs) if r > epoch)]):
            total += share * (rung - below)
            share /= self.reduction_factor
        return total


class _Laddered(Scheduler):
    """Brackets of ASHA rungs; each trial belongs to one bracket, chosen at `start`."""

    def __init__(self, *, epochs: int, min_epochs: int = 1, reduction_factor: int = 3, pausable: bool = True):
        _check_ladder(self.name, epochs, min_epochs, reduction_factor)
        super().__init__(epochs=epochs, min_epochs=min_epochs, reduction_factor=reduction_factor,
                         pausable=pausable)
        rungs = ladder(epochs, min_epochs, reduction_factor)
        self._brackets = [_Bracket(b, reduction_factor, pausable) for b in self._bracket_rungs(rungs)]
        self._bracket_of: dict[int, int] = {}
        self._finished: set[int] = set()
        self._cut_short: set[int] = set()

    def _bracket_rungs(self, rungs: list[int]) -> list[list[int]]:
        """The rung epochs of each bracket, given ASHA's whole ladder."""
        raise NotImplementedError

    def _choose_bracket(self) -> int:
        """The bracket of the next new trial."""
        raise NotImplementedError

    def _bracket(self, trial: int) -> _Bracket:
        return self._brackets[self._bracket_of[trial]]

    def start(self, trial: int) -> None:
        # A trial started again (re-run after a crash) keeps its bracket.
        if trial not in self._bracket_of:
            self._bracket_of[trial] = self._choose_bracket()

    def decision_epochs(self, trial: int) -> list[int]:
        if trial not in self._bracket_of:
            raise ValueError(f"trial {trial} was never started.")
        return self._bracket(trial).decision_epochs()

    def report(self, trial: int, epoch: int, loss: float | None) -> Decision:
        self.start(trial)
        bracket = self._bracket(trial)
        # A late report of a finished trial still counts in its rung, but cannot take a promotion.
        if trial in self._finished:
            rung = bracket.record(trial, epoch, loss)
            if rung is not None and trial in self._cut_short:
                rung.withdraw(trial)
            return Decision.STOP
        decision = bracket.report(trial, epoch, loss)
        if decision is Decision.STOP:
            self.finished(trial)
        return decision

    def promotable(self, closing: bool = False) -> list[int]:
        found = [entry for bracket in self._brackets for entry in bracket.promotable(closing)]
        found.sort(key=lambda e: (-e[0], _rank_key(e[1], e[2])))
        return [trial for _, _, trial in found]

    def promote(self, trial: int) -> None:
        if trial not in self._bracket_of or trial not in self._bracket(trial).paused:
            super().promote(trial)
        self._bracket(trial).promote(trial)

    def finished(self, trial: int, cut_short: bool = False) -> None:
        self._finished.add(trial)
        if trial in self._bracket_of:
            bracket = self._bracket(trial)
            bracket.unpause(trial)
            if cut_short:
                self._cut_short.add(trial)
                for rung in bracket.rungs.values():
                    rung.withdraw(trial)

    def paused(self) -> list[int]:
        return sorted(trial for bracket in self._brackets for trial in bracket.paused)

    def rung(self, trial: int) -> int | None:
        if trial not in self._bracket_of:
            return None
        return self._bracket(trial).rung(trial)

    def rung_epochs(self) -> list[int]:
        return sorted({epoch for bracket in self._brackets for epoch in bracket.rungs})

    def rung_results(self, epochs: int) -> dict[int, float | None]:
        merged: dict[int, float | None] = {}
        for bracket in self._brackets:
            if epochs in bracket.rungs:
                merged.update(bracket.rungs[epochs].results)
        return merged


class Asha(_Laddered):
    """Asynchronous successive halving: one bracket, rungs from `min_epochs` up to `epochs`."""

    name = "asha"

    def _bracket_rungs(self, rungs: list[int]) -> list[list[int]]:
        return [rungs]

    def _choose_bracket(self) -> int:
        return 0

    def describe(self) -> str:
        rungs = list(self._brackets[0].rungs)
        stopped = "paused" if self.pausable else "stopped"
        return (f"asha: rungs at epochs {', '.join(map(str, rungs))}; a trial not among the best "
                f"1/{self.reduction_factor} at a rung is {stopped} there")

    def decision_epochs(self, trial: int) -> list[int]:
        # Every trial is in the one bracket, started or not.
        return self._brackets[0].decision_epochs()

    def epochs_to_go(self, epoch: int = 0, paused: bool = False) -> float:
        return self._brackets[0].epochs_to_go(epoch, paused)

    def paused_epochs_to_go(self, new_trials: int, running: list[int], paused: list[int], finished: list[int]) -> float:
        """A paused trial goes on only by a promotion still to come at its rung. A rung passes on
        1/reduction_factor of the results it will hold (those there now, and those the trials
        below bring on the same terms), less the trials it let through already; the paused trials
        share those promotions with the trials yet to arrive. (Asynchronous ASHA lets more through
        early on, so a paused trial's chance falls as its rung fills: a flat 1/reduction_factor
        would have paused trials train on long after the budget ran out.)"""
        ladder = sorted(self._brackets[0].rungs)
        reached = [*running, *paused, *finished]
        expect = float(len(reached) + new_trials)  # the results each rung will hold, lowest first
        chance = []
        for k, rung in enumerate(ladder[:-1]):
            here = sum(1 for epoch in reached if epoch >= rung)
            expect = max(float(here), expect / self.reduction_factor if k else expect)
            through = sum(1 for epoch in reached if epoch > rung) + running.count(rung)
            waiting = paused.count(rung) + expect - here
            still = max(0.0, expect / self.reduction_factor - through)
            chance.append(min(1.0, still / waiting) if waiting > 0 else 0.0)
        to_go, value = {}, 0.0  # per rung: what a trial paused there trains on average
        for k in reversed(range(len(ladder) - 1)):
            value = chance[k] * (ladder[k + 1] - ladder[k] + value)
            to_go[ladder[k]] = value
        return sum(to_go.get(epoch, 0.0) for epoch in paused)


class Hyperband(_Laddered):
    """Several ASHA brackets: bracket s starts at ASHA's rung s; the last one never stops anything."""

    name = "hyperband"

    def _bracket_rungs(self, rungs: list[int]) -> list[list[int]]:
        return [rungs[s:] for s in range(len(rungs))]

    def _weights(self) -> list[Fraction]:
        """Hyperband's share of trials per bracket: rf**(s_max - s) / (s_max - s + 1)."""
        s_max = len(self._brackets) - 1
        return [Fraction(self.reduction_factor ** (s_max - s), s_max - s + 1) for s in range(s_max + 1)]

    def _choose_bracket(self) -> int:
        # The bracket furthest below its share; exact fractions so that ties go to the lower s.
        counts = [0] * len(self._brackets)
        for s in self._bracket_of.values():
            counts[s] += 1
        lag = [(counts[s] + 1) / w for s, w in enumerate(self._weights())]
        return lag.index(min(lag))

    def describe(self) -> str:
        firsts = [min(b.rungs) for b in self._brackets]
        return (f"hyperband: {len(firsts)} ASHA brackets, their first rungs at epochs {', '.join(map(str, firsts))} "
                f"(rungs x {self.reduction_factor} up to {self.epochs})")

    def bracket(self, trial: int) -> int | None:
        """The bracket the trial was assigned to at `start`; None if it never started."""
        return self._bracket_of.get(trial)

    def epochs_to_go(self, epoch: int = 0, paused: bool = False) -> float:
        # Averaged over the brackets by their shares of trials: a caller reading the journal does
        # not know which bracket a trial is in.
        weights = self._weights()
        return float(sum(w * b.epochs_to_go(epoch, paused) for w, b in zip(weights, self._brackets, strict=True))
                     / sum(weights))


class MedianStopping(Scheduler):
    """Stops a trial whose best loss so far is worse than the median of the others' at that epoch."""

    name = "median"

    def __init__(self, *, epochs: int, min_epochs: int = 1, reduction_factor: int = 3, pausable: bool = True):
        _check_min_epochs(self.name, epochs, min_epochs)
        super().__init__(epochs=epochs, min_epochs=min_epochs, reduction_factor=reduction_factor,
                         pausable=pausable)
        self._values: dict[int, dict[int, float | None]] = {}  # epoch -> trial -> loss
        self._judged: dict[int, int] = {}  # trial -> the highest epoch the rule judged it at

    def decision_epochs(self, trial: int) -> list[int]:
        return list(range(self.min_epochs, self.epochs))

    def describe(self) -> str:
        return (f"median: from epoch {self.min_epochs}, a trial worse than the median of at least "
                f"{MEDIAN_MIN_OTHERS} others at the same epoch is stopped")

    def report(self, trial: int, epoch: int, loss: float | None) -> Decision:
        at_epoch = self._values.setdefault(epoch, {})
        # A trial re-run after a crash re-trains an epoch: its first value stands.
        at_epoch.setdefault(trial, loss)
        others = [_as_inf(v) for t, v in at_epoch.items() if t != trial]
        if not self.min_epochs <= epoch < self.epochs or len(others) < MEDIAN_MIN_OTHERS:
            return Decision.CONTINUE
        self._judged[trial] = max(epoch, self._judged.get(trial, epoch))
        loss = at_epoch[trial]
        # A non-finite loss is worse than anything, even than a median that is itself non-finite.
        return Decision.STOP if loss is None or loss > statistics.median(others) else Decision.CONTINUE

    def rung(self, trial: int) -> int | None:
        """The last epoch the rule judged the trial at: from `min_epochs`, below the last (where
        the trial is complete), with at least MEDIAN_MIN_OTHERS others there to judge it by."""
        return self._judged.get(trial)

    def rung_results(self, epochs: int) -> dict[int, float | None]:
        return dict(self._values.get(epochs, {}))


SCHEDULERS: dict[str, type[Scheduler]] = {cls.name: cls for cls in (Scheduler, Asha, Hyperband, MedianStopping)}


def make_scheduler(name: str, *, epochs: int, min_epochs: int, reduction_factor: int, pausable: bool) -> Scheduler:
    """The scheduler called `name`; ValueError for an unknown name or settings it cannot use."""
    if name not in SCHEDULERS:
        raise ValueError(f"scheduler must be one of {', '.join(sorted(SCHEDULERS))}, but got {name!r}.")
    return SCHEDULERS[name](epochs=epochs, min_epochs=min_epochs, reduction_factor=reduction_factor,
                            pausable=pausable)
