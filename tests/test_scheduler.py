"""Early-stopping schedulers: ASHA's rungs and promotions, Hyperband's brackets, the median rule, and
state rebuilt exactly by replaying the same calls."""
from __future__ import annotations

import json
import random

import pytest

from mpiopt.scheduler import Asha, Decision, Hyperband, MedianStopping, Scheduler, _Rung, make_scheduler

C, P, S = Decision.CONTINUE, Decision.PAUSE, Decision.STOP


def asha(epochs=27, min_epochs=1, reduction_factor=3, pausable=True):
    return make_scheduler("asha", epochs=epochs, min_epochs=min_epochs, reduction_factor=reduction_factor,
                          pausable=pausable)


def report_all(scheduler, epoch, losses):
    """Starts and reports trials 0, 1, ... in order at `epoch`; their decisions."""
    decisions = []
    for trial, loss in enumerate(losses):
        scheduler.start(trial)
        decisions.append(scheduler.report(trial, epoch, loss))
    return decisions


@pytest.mark.parametrize("epochs, min_epochs, rf, rungs", [
    (27, 1, 3, [1, 3, 9, 27]), (20, 1, 3, [1, 3, 9, 20]), (10, 2, 2, [2, 4, 8, 10]), (2, 1, 3, [1, 2]),
])
def test_asha_rung_epochs(epochs, min_epochs, rf, rungs):
    s = asha(epochs, min_epochs, rf)
    s.start(0)
    assert s.rung_epochs() == rungs
    assert s.decision_epochs(0) == rungs[:-1]


def test_asha_first_trials_pause_until_the_rung_has_rf_results():
    # n = 1, 2: floor(n / 3) = 0 leaders, so both pause; n = 3: the best of three leads.
    assert report_all(asha(), 1, [5.0, 4.0, 3.0]) == [P, P, C]
    s = asha()
    assert report_all(s, 1, [3.0, 4.0, 5.0]) == [P, P, P]
    assert s.paused() == [0, 1, 2]
    assert s.promotable() == [0]


def test_asha_decisions_by_hand():
    s = asha()
    # n=1..3: 0 leaders, then [2]; n=4,5: [2]; n=6: [2, 1] with 2 promoted, so 1 is promotable.
    assert report_all(s, 1, [5.0, 4.0, 3.0, 6.0, 7.0, 8.0]) == [P, P, C, P, P, P]
    assert s.promotable() == [1]
    s.promote(1)
    assert s.paused() == [0, 3, 4, 5]
    assert s.promotable() == []
    # n=7: leaders [6, 2]; trial 6 was never promoted, so it goes on.
    s.start(6)
    assert s.report(6, 1, 1.0) is C
    # n=9: leaders [6, 2, 1], all promoted already: nothing is promotable.
    for trial, loss in ((7, 9.0), (8, 10.0)):
        s.start(trial)
        assert s.report(trial, 1, loss) is P
    assert s.promotable() == []
    assert s.rung_results(1) == {0: 5.0, 1: 4.0, 2: 3.0, 3: 6.0, 4: 7.0, 5: 8.0, 6: 1.0, 7: 9.0, 8: 10.0}


def test_closing_rungs_promote_their_best_third_rounded_up():
    # no new trial will come: a rung of 4 promotes ceil(4 / 3) = 2, a rung of 1 its only trial
    s = asha()
    assert report_all(s, 1, [5.0, 4.0, 3.0, 6.0]) == [P, P, C, P]
    assert s.promotable() == [] and s.promotable(closing=True) == [1]
    s.promote(1)
    assert s.report(1, 3, 2.0) is P  # alone at rung 3: no leader, unless closing
    assert s.promotable() == [] and s.promotable(closing=True) == [1]


def test_paused_trial_becomes_promotable_when_worse_results_arrive():
    s = asha()
    assert report_all(s, 1, [1.0, 2.0]) == [P, P]
    assert s.promotable() == []
    s.start(2)
    assert s.report(2, 1, 9.0) is P
    assert s.promotable() == [0]
    s.promote(0)
    assert 0 not in s.paused() and s.promotable() == []
    assert s.report(0, 2, 1.0) is C  # not a rung: nothing recorded, nothing decided
    assert s.report(0, 3, 1.0) is P  # alone at rung 3
    assert s.rung(0) == 3 and s.rung(1) == 1 and s.rung(5) is None


def test_no_trial_is_promoted_twice_from_a_rung():
    s = asha()
    report_all(s, 1, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert s.promotable() == [0, 1]
    s.promote(0)
    with pytest.raises(ValueError, match="not paused"):
        s.promote(0)
    # Trial 0 pauses at rung 3; ever more worse results at rung 1 never make it promotable from rung 1.
    assert s.report(0, 3, 1.0) is P
    for trial in range(6, 30):
        s.start(trial)
        s.report(trial, 1, 100.0 + trial)
    assert s.promotable() == list(range(1, 10))  # 30 results: the top 10 less trial 0


def test_re_reported_rung_keeps_first_value_and_promotion():
    s = asha()
    report_all(s, 1, [5.0, 4.0, 3.0])
    assert s.report(0, 1, 0.5) is P  # the re-run's better value does not replace the first one
    assert s.rung_results(1) == {0: 5.0, 1: 4.0, 2: 3.0}
    assert s.report(2, 1, 99.0) is C  # trial 2 was promoted from rung 1: that promotion stands
    assert s.rung_results(1)[2] == 3.0
    assert s.promotable() == []


def test_promotable_order_highest_rung_first_then_loss():
    s = asha(epochs=4, reduction_factor=2)  # rungs 1, 2, 4
    assert report_all(s, 1, [5.0, 1.0]) == [P, C]
    assert s.report(1, 2, 9.0) is P
    s.start(2)
    assert s.report(2, 1, 2.0) is P
    s.start(3)
    assert s.report(3, 1, 3.0) is P
    assert s.promotable() == [2]
    s.promote(2)
    assert s.report(2, 2, 10.0) is P  # rung 2 now leads with trial 1
    for trial, loss in ((4, 4.0), (5, 4.5)):
        s.start(trial)
        assert s.report(trial, 1, loss) is P
    # Trial 1 waits at rung 2 with a worse loss than trial 3 at rung 1: the higher rung goes first.
    assert s.promotable() == [1, 3]


def test_none_loss_ranks_worst_and_is_never_promoted():
    s = asha()
    assert report_all(s, 1, [None, None, None]) == [P, P, P]
    assert s.promotable() == []
    assert report_all(s, 1, [None, None, None, 7.0, 8.0, 9.0])[3:] == [C, P, P]
    assert s.promotable() == [4]


def test_not_pausable_stops_instead_of_pausing():
    # the best of fewer than reduction_factor results goes on (4.0 after 5.0; not 6.0 after 5.0),
    # then the best third
    s = asha(pausable=False)
    assert report_all(s, 1, [5.0, 4.0, 3.0, 6.0, 7.0, 8.0]) == [C, C, C, S, S, S]
    assert report_all(asha(pausable=False), 1, [5.0, 6.0, 7.0, 4.0]) == [C, S, S, C]
    assert s.paused() == [] and s.promotable() == []
    with pytest.raises(ValueError):
        s.promote(1)


def test_finished_trial_is_never_promotable():
    s = asha()
    report_all(s, 1, [1.0, 2.0, 3.0])
    assert s.promotable() == [0]
    s.finished(0)
    assert s.paused() == [1, 2] and s.promotable() == []
    with pytest.raises(ValueError):
        s.promote(0)
    # A late report is recorded but does not bring the trial back.
    assert s.report(0, 3, 1.0) is S
    assert s.paused() == [1, 2] and s.promotable() == [] and s.rung(0) == 3


def test_trial_cut_short_gives_its_leaders_place_to_the_next():
    # 6 results at rung 1: the best 2 (trials 2, 1) lead. Trial 2 went on and failed: its place
    # goes to trial 1 and then, once 1 is promoted, to trial 0; its result still counts.
    s = asha()
    assert report_all(s, 1, [3.0, 2.0, 1.0, 4.0, 5.0, 6.0]) == [P, P, C, P, P, P]
    s.promote(1)
    assert s.promotable() == []
    s.finished(2, cut_short=True)
    assert s.promotable() == [0]
    assert s.rung_results(1)[2] == 1.0 and s.rung(2) == 1
    # closing: ceil(6 / 3) = 2 places, one each for trials 1 and 0
    assert s.promotable(closing=True) == [0]
    # a trial that ended with a result of its own (completed, pruned) keeps its place
    t = asha()
    report_all(t, 1, [3.0, 2.0, 1.0, 4.0, 5.0, 6.0])
    t.finished(2)
    assert t.promotable() == [1]
    t.promote(1)
    assert t.promotable() == []


def test_late_report_of_a_trial_cut_short_takes_no_place():
    # rung 3 gets trial 2's late report (0.5, the best) after it failed, then 0, 1 and 3 pause
    # there: of ceil(4 / 3) = 2 places at the close, trial 2 takes none
    s = asha()
    report_all(s, 1, [3.0, 2.0, 1.0])
    s.finished(2, cut_short=True)
    assert s.report(2, 3, 0.5) is S
    for trial, loss in ((0, 2.0), (1, 3.0)):
        s.promote(trial)
        assert s.report(trial, 3, loss) is P
    s.start(3)
    assert s.report(3, 3, 4.0) is P
    assert s.promotable(closing=True) == [0, 1]


def test_top_rung_only_records():
    s = asha(epochs=9)
    assert report_all(s, 9, [3.0, 2.0, 1.0, 4.0]) == [C, C, C, C]
    assert s.rung_results(9) == {0: 3.0, 1: 2.0, 2: 1.0, 3: 4.0}
    assert s.paused() == []


def test_unknown_trial_reports_into_asha_bracket():
    s = asha()
    assert s.decision_epochs(7) == [1, 3, 9]
    assert s.report(7, 1, 1.0) is P
    assert s.rung(7) == 1


def hyperband(epochs=27, min_epochs=1, rf=3, pausable=True):
    return make_scheduler("hyperband", epochs=epochs, min_epochs=min_epochs, reduction_factor=rf,
                          pausable=pausable)


def start_in_bracket(scheduler, bracket, trials):
    """Starts each of `trials`; those that went to `bracket`."""
    chosen = []
    for trial in trials:
        scheduler.start(trial)
        if scheduler.bracket(trial) == bracket:
            chosen.append(trial)
    return chosen


def test_hyperband_brackets_and_proportions():
    s = hyperband()
    for trial in range(100):
        s.start(trial)
    assert [s.bracket(t) for t in range(4)] == [0, 0, 1, 0]
    counts = [sum(s.bracket(t) == b for t in range(100)) for b in range(4)]
    # Weights 27/4 : 9/3 : 3/2 : 1/1 of 12.25 give 55.1, 24.5, 12.2 and 8.2 trials.
    assert counts == [56, 24, 12, 8]
    assert all(abs(n - 100 * w / 12.25) < 1.5 for n, w in zip(counts, (6.75, 3, 1.5, 1), strict=True))
    assert s.rung_epochs() == [1, 3, 9, 27]
    first_of = {b: next(t for t in range(100) if s.bracket(t) == b) for b in range(4)}
    assert [s.decision_epochs(first_of[b]) for b in range(4)] == [[1, 3, 9], [3, 9], [9], []]


def test_hyperband_last_bracket_never_stops():
    s = hyperband(pausable=False)
    last = start_in_bracket(s, 3, range(100))
    for trial in last:
        for epoch in range(1, 28):
            assert s.report(trial, epoch, 1000.0 - trial) is C
        s.finished(trial)
    assert s.rung_results(1) == {} and len(s.rung_results(27)) == len(last)
    assert all(s.rung(t) == 27 for t in last)


def test_hyperband_brackets_rank_apart_and_merge_results():
    s = hyperband()
    trials = list(range(12))
    for trial in trials:
        s.start(trial)
    by_bracket = {b: [t for t in trials if s.bracket(t) == b] for b in range(4)}
    assert by_bracket[0][:3] == [0, 1, 3] and by_bracket[2][:1] == [6]
    # A trial of bracket 2 first decides at epoch 9, against its own bracket only.
    assert s.report(6, 1, 0.0) is C and s.rung(6) is None
    assert [s.report(t, 1, 5.0 - t) for t in (0, 1, 3)] == [P, P, C]
    assert s.report(3, 3, 1.0) is P and s.report(3, 9, 1.0) is P
    assert s.report(6, 9, 7.0) is P
    assert s.rung_results(9) == {3: 1.0, 6: 7.0}
    assert s.paused() == [0, 1, 3, 6]
    assert s.promotable() == []  # rung 1 of bracket 0: its one leader, trial 3, went on already
    # Three more bracket-0 trials with worse losses make six results at rung 1: leaders 3 and 1.
    more = start_in_bracket(s, 0, range(12, 20))[:3]
    assert [s.report(t, 1, 9.0) for t in more] == [P, P, P]
    assert s.promotable() == [1]


def test_hyperband_unknown_trial_starts_implicitly():
    s = hyperband()
    with pytest.raises(ValueError, match="never started"):
        s.decision_epochs(5)
    s.report(5, 1, 1.0)
    assert s.bracket(5) == 0 and s.decision_epochs(5) == [1, 3, 9]


def median(epochs=10, min_epochs=1):
    return make_scheduler("median", epochs=epochs, min_epochs=min_epochs, reduction_factor=3, pausable=True)


def test_median_rule():
    s = median()
    assert s.decision_epochs(0) == list(range(1, 10))
    assert report_all(s, 1, [1.0, 2.0, 3.0, 4.0, 5.0]) == [C] * 5  # fewer than 5 others each
    assert s.report(5, 1, 3.5) is S  # others' median 3.0
    assert s.report(6, 1, 3.0) is C  # others' median 3.25
    assert s.report(7, 1, 3.0) is C  # others' median 3.0: not strictly worse
    assert s.report(8, 1, None) is S
    assert s.report(9, 10, 100.0) is C  # the last epoch decides nothing
    assert s.rung_results(1) == {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0, 4: 5.0, 5: 3.5, 6: 3.0, 7: 3.0, 8: None}
    # the rung is the last epoch judged: not with fewer than 5 others there, nor the last epoch
    assert s.rung(5) == 1 and s.rung(0) is None and s.rung(9) is None and s.rung(42) is None
    assert s.paused() == [] and s.promotable() == [] and s.rung_epochs() == []


def test_median_before_min_epochs_and_against_none():
    s = median(min_epochs=3)
    assert report_all(s, 2, [1.0] * 5 + [50.0]) == [C] * 6
    assert s.decision_epochs(0) == [3, 4, 5, 6, 7, 8, 9]
    # Others [1, None, None, None, None]: their median is non-finite, any number is better.
    assert report_all(s, 3, [1.0, None, None, None, None, 1e9]) == [C] * 5 + [C]
    assert s.report(6, 3, None) is S
    assert s.report(0, 3, 99.0) is C  # a re-run: the first value stands and decides
    assert s.rung_results(3)[0] == 1.0
    s.report(7, 2, 1.0)
    assert s.rung(7) is None and s.rung(0) == 3  # not judged before min_epochs


def test_none_scheduler_never_stops():
    s = make_scheduler("none", epochs=1, min_epochs=1, reduction_factor=1, pausable=True)
    assert type(s) is Scheduler and s.name == "none"
    s.start(0)
    assert s.decision_epochs(0) == [] and s.report(0, 1, None) is C
    assert s.rung(0) is None and s.rung_epochs() == [] and s.rung_results(1) == {}
    assert s.paused() == [] and s.promotable() == []


@pytest.mark.parametrize("name, epochs, min_epochs, rf, match", [
    ("sha", 10, 1, 3, "one of asha, hyperband, median, none"),
    ("asha", 10, 10, 3, "min_epochs < epochs"),
    ("hyperband", 10, 0, 3, "1 <= min_epochs"),
    ("asha", 10, 1, 1, "reduction_factor >= 2"),
    ("hyperband", 10, 1, 1, "reduction_factor >= 2"),
    ("median", 5, 5, 3, "min_epochs < epochs"),
    ("median", 5, 0, 3, "1 <= min_epochs"),
])
def test_make_scheduler_rejects(name, epochs, min_epochs, rf, match):
    with pytest.raises(ValueError, match=match):
        make_scheduler(name, epochs=epochs, min_epochs=min_epochs, reduction_factor=rf, pausable=True)


def test_make_scheduler_classes():
    settings = dict(epochs=9, min_epochs=1, reduction_factor=3, pausable=True)
    assert type(make_scheduler("asha", **settings)) is Asha
    assert type(make_scheduler("hyperband", **settings)) is Hyperband
    assert type(make_scheduler("median", reduction_factor=1, **{k: v for k, v in settings.items()
                                                              if k != "reduction_factor"})) is MedianStopping


EPOCHS = 9


def drive(scheduler, seed, n_trials=40):
    """A coordinator's random interleaving of calls; the log of them and each call's answer."""
    rng = random.Random(seed)
    log, answers = [], []
    running: dict[int, int] = {}  # trial -> next epoch
    best: dict[int, float] = {}
    continued: set[tuple[int, int]] = set()  # (trial, rung) it went on from

    def call(method, *args):
        log.append([method, list(args)])
        answers.append(getattr(scheduler, method)(*args))
        return answers[-1]

    def go_on_from(trial, epoch):
        assert (trial, epoch) not in continued, "promoted twice from one rung"
        continued.add((trial, epoch))

    started = 0
    for _ in range(3000):
        if started < n_trials and (len(running) < 4 or rng.random() < 0.05):
            call("start", started)
            running[started], best[started] = 1, float("inf")
            started += 1
        elif scheduler.promotable() and rng.random() < 0.3:
            trial = rng.choice(scheduler.promotable())
            call("promote", trial)
            go_on_from(trial, scheduler.rung(trial))
            running[trial] = scheduler.rung(trial) + 1
        elif running and rng.random() < 0.03:
            trial = rng.choice(sorted(running))
            call("finished", trial)
            del running[trial]
        elif running:
            trial = rng.choice(sorted(running))
            epoch = running[trial]
            if epoch > 1 and rng.random() < 0.1:  # a re-run re-trains the last epoch
                epoch -= 1
            else:
                best[trial] = min(best[trial], rng.random())
            loss = None if rng.random() < 0.05 else best[trial]
            decision = call("report", trial, epoch, loss)
            if decision is C and epoch in scheduler.decision_epochs(trial) and epoch == running[trial]:
                go_on_from(trial, epoch)
            if decision is C and epoch < EPOCHS:
                running[trial] = epoch + 1
            elif decision is P:
                del running[trial]
            else:
                call("finished", trial)
                del running[trial]
        else:
            break
    return log, answers


def snapshot(scheduler, started):
    return {
        "paused": scheduler.paused(),
        "promotable": scheduler.promotable(),
        "rungs": {t: scheduler.rung(t) for t in range(max(started) + 2)},
        "decision_epochs": {t: scheduler.decision_epochs(t) for t in started},
        "results": {e: scheduler.rung_results(e) for e in range(1, EPOCHS + 1)},
    }


@pytest.mark.parametrize("name, pausable", [("asha", True), ("asha", False), ("hyperband", True),
                                            ("median", True)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_replay_rebuilds_the_same_state(name, pausable, seed):
    settings = dict(epochs=EPOCHS, min_epochs=1, reduction_factor=3, pausable=pausable)
    live = make_scheduler(name, **settings)
    log, answers = drive(live, seed)
    # The log goes through JSON as a journal would.
    replayed = make_scheduler(name, **settings)
    replayed_answers = [getattr(replayed, method)(*args) for method, args in json.loads(json.dumps(log))]
    assert replayed_answers == answers
    started = sorted({args[0] for method, args in log if method == "start"})
    assert snapshot(replayed, started) == snapshot(live, started)
    # The interleaving exercised the scheduler rather than letting everything through.
    decisions = {a for a in answers if isinstance(a, Decision)}
    assert decisions == ({C, P} if pausable and name != "median" else {C, S})
    if decisions == {C, P}:
        assert any(method == "promote" for method, _ in log)


def leaders_by_sorting(results, reduction_factor, closing=False):
    """A rung's leaders by definition: its best floor(n / rf) results (closing: ceil), sorted
    afresh (ties to the lower trial), without the non-finite ones."""
    ranked = sorted(results, key=lambda t: (results[t] is None, results[t] or 0.0, t))
    count = -(-len(ranked) // reduction_factor) if closing else len(ranked) // reduction_factor
    return [t for t in ranked[:count] if results[t] is not None]


def promotable_by_definition(scheduler, closing):
    """ASHA's get_job rule read off every rung: its leaders not promoted from it and paused there,
    highest rung first, then best first."""
    found = []
    for bracket in scheduler._brackets:
        for rung in bracket.rungs.values():
            found += [(rung.epoch, rung.results[t], t)
                      for t in leaders_by_sorting(rung.results, bracket.reduction_factor, closing)
                      if t not in rung.promoted and bracket.paused.get(t) == rung.epoch]
    found.sort(key=lambda e: (-e[0], e[1] is None, e[1] or 0.0, e[2]))
    return [t for *_, t in found]


@pytest.mark.parametrize("name", ["asha", "hyperband"])
@pytest.mark.parametrize("seed", range(4))
def test_promotable_is_the_rule_read_off_every_rung_after_every_call(name, seed):
    settings = dict(epochs=EPOCHS, min_epochs=1, reduction_factor=3, pausable=True)
    driven = make_scheduler(name, **settings)
    log, _ = drive(driven, seed)
    # then the search ends early (a target, max_failures): its paused trials are pruned one by one
    log += [("finished", (t,)) for t in random.Random(seed).sample(driven.paused(), k=len(driven.paused()))]
    scheduler = make_scheduler(name, **settings)
    checked = 0
    for method, args in log:
        getattr(scheduler, method)(*args)
        for closing in (False, True):
            expected = promotable_by_definition(scheduler, closing)
            assert scheduler.promotable(closing) == expected, (method, args, closing)
            checked += bool(expected)
    assert checked > 10 and scheduler.paused() == []  # it had paused leaders to find, and none is left


def test_each_scheduler_describes_itself_in_a_line():
    assert asha().describe() == ("asha: rungs at epochs 1, 3, 9, 27; a trial not among the best 1/3 at a rung "
                                 "is paused there")
    made = make_scheduler("hyperband", epochs=27, min_epochs=1, reduction_factor=3, pausable=False)
    assert made.describe() == "hyperband: 4 ASHA brackets, their first rungs at epochs 1, 3, 9, 27 (rungs x 3 up to 27)"
    made = make_scheduler("median", epochs=27, min_epochs=2, reduction_factor=3, pausable=False)
    assert made.describe().startswith("median: from epoch 2, a trial worse than the median of at least 5 others")


@pytest.mark.parametrize("seed", range(5))
def test_a_trial_leads_a_rung_when_it_is_in_the_best_share_of_its_results(seed):
    rng = random.Random(seed)
    rung = _Rung(1)
    for trial in rng.sample(range(200), 120):
        # ties, non-finite losses and a repeated report (its first value stands) included
        rung.add(trial, rng.choice([None, *(float(v) for v in range(8))]) if rng.random() < 0.9 else rng.random())
        rung.add(trial, -1.0)
        leaders = leaders_by_sorting(rung.results, 3)
        assert {t for t in rung.results if rung.leads(t, 3)} == set(leaders)


@pytest.mark.parametrize("name, epochs, min_epochs, rf, mean", [
    ("asha", 27, 1, 3, 1 + 2 / 3 + 6 / 9 + 18 / 27),  # rungs 1, 3, 9, 27: a third goes on from each
    ("asha", 20, 2, 2, 2 + 2 / 2 + 4 / 4 + 8 / 8 + 4 / 16),  # rungs 2, 4, 8, 16, 20
    ("asha", 9, 1, 3, 1 + 2 / 3 + 6 / 9),
    # brackets from rungs 1, 3, 9 and 27 (3, 7, 15 and 27 epochs a trial), in shares 27/4 : 9/3 : 3/2 : 1
    ("hyperband", 27, 1, 3, (27 / 4 * 3 + 3 * 7 + 1.5 * 15 + 27) / (27 / 4 + 3 + 1.5 + 1)),
    ("median", 27, 1, 3, None), ("none", 27, 1, 3, None),
])
def test_a_new_trial_trains_on_average_what_each_rung_passing_on_its_best_share_gives(name, epochs, min_epochs,
                                                                                       rf, mean):
    s = make_scheduler(name, epochs=epochs, min_epochs=min_epochs, reduction_factor=rf, pausable=True)
    assert s.epochs_to_go() == (None if mean is None else pytest.approx(mean))
    assert s.epochs_left(4, [], [], []) == (None if mean is None else pytest.approx(4 * mean))


def test_a_started_trial_has_its_own_epochs_to_go():
    s = asha()  # rungs 1, 3, 9, 27
    assert s.epochs_to_go(2) == pytest.approx(1 + 6 / 3 + 18 / 9)  # on to rung 3 for sure, a third on from there
    assert s.epochs_to_go(3, paused=True) == pytest.approx(6 / 3 + 18 / 9)  # a third of those paused at 3 go on
    assert s.epochs_to_go(3) == pytest.approx(6 + 18 / 3)  # promoted from 3 (or leading there): on to 9
    assert s.epochs_to_go(27) == 0
    # new and running trials as above; paused ones by the promotions still to come (below)
    assert s.epochs_left(2, [2], [], [27]) == pytest.approx(2 * 3 + 5)


def test_a_paused_asha_trial_goes_on_only_by_a_promotion_still_to_come_at_its_rung():
    s = asha()  # rungs 1, 3, 9, 27
    # 9 trials reached rung 1 and 3 of them rung 3, where they wait: rung 1 let its third through,
    # so the 6 paused there stay; rung 3 holds all it will and lets 1 of its 3 through (to 9, and
    # a third of those to 27): 3 x 1/3 x (6 + 1/3 x 18)
    assert s.epochs_left(0, [], [1] * 6 + [3] * 3, []) == pytest.approx(12)
    # 9 new trials to come: rung 1 will hold 18 and let 3 more through, shared by its 6 paused
    # trials and 9 arrivals (1/5 each, then 1/3 at each rung above); rung 3 will hold 6 and let 2
    # through, shared by its 3 paused trials and 3 arrivals
    paused = 6 * 0.2 * (2 + 1 / 3 * (6 + 1 / 3 * 18)) + 3 * 1 / 3 * (6 + 1 / 3 * 18)
    assert s.epochs_left(9, [], [1] * 6 + [3] * 3, []) == pytest.approx(9 * 3 + paused)
    # a flat third for each paused trial would count 24 epochs to go in the first case, not 12
    assert 6 * s.epochs_to_go(1, paused=True) + 3 * s.epochs_to_go(3, paused=True) == pytest.approx(24)


def test_hyperband_counts_each_paused_trial_a_flat_share():
    s = hyperband()  # a trial's bracket is not known from its epochs
    assert s.epochs_left(0, [], [3], []) == pytest.approx(s.epochs_to_go(3, paused=True))
