"""`mpiopt status DIR`: a running or stopped search at a glance, from any shell that sees its files.

It reads the journal, the resolved configuration, the coordinator's heartbeat file and the text
of the lock file (who took it), nothing else: no lock is taken or tested (a login node may not
even see the compute node's lock), so it never disturbs the search.
"""
from __future__ import annotations

import math
import socket
from collections import Counter
import time
from dataclasses import dataclass
from pathlib import Path

from ._errors import ConfigError
from .analysis import _run_info, direction_of, lost_intervals, run_directory
from ._results_view import format_hours, format_rate, params_text
from .journal import (HEARTBEAT, JOURNAL, finite_metric, gone_from_this_machine, lock_holder, read_heartbeat,
                      read_journal, recent, replay, too_little_room)
from .scheduler import Scheduler, make_scheduler
from .trial import NO_GROUP_LEFT, TrialRecord, TrialStatus, reached_by_state

RATE_WINDOW_S = 3600.0  # trials (epochs) per hour over the last hour (or the whole search, if shorter)
# no rate over less time than this: a few trials of milliseconds would read as thousands a second
MIN_RATE_SPAN_S = 1.0


@dataclass
class Liveness:
    state: str  # "starting", "never started", "running", "ended", "interrupted", "stopped" or "unknown"
    age_s: float | None  # seconds since the last heartbeat
    where: str = ""
    gone: bool = False  # stopped, seen at once: the coordinator's process on this machine is no more
    space: str | None = None  # the search-space file the search ran from
    ranks: int | None = None  # the ranks of its MPI job
    nodes: int | None = None  # the nodes they ran on
    since: float | None = None  # when it opened the run directory (a --resume: trials started before it were cut off)
    stopped: str | None = None  # why an ended search stopped before its budget, or failed


def liveness(run: Path, now: float) -> Liveness:
    """From the heartbeat file: running (recent), ended or interrupted (the search said so),
    stopped (stale, or its process gone); starting, before the first heartbeat of a search."""
    beat = read_heartbeat(run)
    starting = _starting(run, beat["time"] if beat else None)
    if starting is not None:
        return starting
    if beat is None:
        return Liveness("unknown", None)
    age = now - beat["time"]
    where = f"pid {beat.get('pid')} on {beat.get('host')}"
    space = beat.get("space") if isinstance(beat.get("space"), str) else None
    ranks = beat.get("ranks") if isinstance(beat.get("ranks"), int) else None
    nodes = beat.get("nodes") if isinstance(beat.get("nodes"), int) else None
    since = float(beat["since"]) if isinstance(beat.get("since"), (int, float)) else None
    if beat.get("state") in ("ended", "interrupted"):
        stopped = beat.get("stopped") if isinstance(beat.get("stopped"), str) else None
        return Liveness(beat["state"], age, where, space=space, ranks=ranks, nodes=nodes, since=since, stopped=stopped)
    if gone_from_this_machine(beat):
        return Liveness("stopped", age, where, gone=True, space=space, ranks=ranks, nodes=nodes, since=since)
    state = "running" if recent(beat["time"], now) else "stopped"
    return Liveness(state, age, where, space=space, ranks=ranks, nodes=nodes, since=since)


def runs_now(trial: TrialRecord, alive: Liveness) -> bool:
    """Whether a trial the journal leaves running is: the search runs, and started it (a trial a
    killed run had started waits for the resumed search to run it again)."""
    return alive.state == "running" and (alive.since is None or (trial.start or 0.0) >= alive.since)


def _starting(run: Path, last_beat: float | None) -> Liveness | None:
    """A search that holds the directory but has sent no heartbeat yet (the pre-flight check
    comes first): the lock file, read and not locked, names a coordinator that took it after the
    last heartbeat and lives on this host. From another host that cannot be told."""
    who = lock_holder(run)
    if who is None or (last_beat is not None and who["since"] <= last_beat):
        return None
    if who["host"] != socket.gethostname():
        return None
    where = f"pid {who['pid']} on {who['host']}"
    if gone_from_this_machine(who):  # killed in its pre-flight: a new search never started, a resumed one stands
        if last_beat is not None:
            return None
        # trials in the journal: the search ran and its heartbeat file is lost (deleted, or a copy
        # of the run without it); its coordinator is gone, so it stopped, whether ended or killed
        return Liveness("stopped", None, where, gone=True) if _holds_trials(run) else \
            Liveness("never started", None, where)
    return Liveness("starting", None, where)


def _holds_trials(run: Path) -> bool:
    try:
        events, _ = read_journal(run / JOURNAL)
    except ConfigError:  # unreadable: as good as empty
        return False
    return any(e.get("event") == "start" for e in events)


def last_signs(events: list[dict]) -> dict[int, float]:
    """Each trial's latest sign of life in the journal: its start or its latest report."""
    out: dict[int, float] = {}
    for e in events:
        if e.get("event") in ("start", "report") and isinstance(e.get("trial"), int):
            out[e["trial"]] = max(out.get(e["trial"], 0.0), float(e.get("time") or 0.0))
    return out


def event_time(event: dict) -> float:
    return float(event.get("time") or event.get("end") or 0.0)


def dead_time(events: list[dict], alive: Liveness, now: float) -> tuple[float, float] | None:
    """From a killed run's last record to the first of the --resume that goes on with it (its
    pre-flight check included): no group trained then, so the rates leave it out."""
    if alive.since is None:
        return None
    times = [t for t in map(event_time, events) if t > 0.0]
    before = [t for t in times if t < alive.since]
    after = [t for t in times if t >= alive.since]
    return (max(before), min(after, default=now)) if before else None


def trials_per_hour(trials: list[TrialRecord], now: float, dead: tuple[float, float] | None) -> float:
    """Finished trials per hour over the last RATE_WINDOW_S (or since the first start), `dead` time left out."""
    starts = [t.start for t in trials if t.start is not None]
    ends = [t.end for t in trials if t.end is not None and t.status.is_finished()]
    return _per_hour(ends, starts, now, dead)


def epoch_reports(events: list[dict]) -> dict[tuple[int, int], float]:
    """(trial, epoch) -> when it was first reported: an epoch trained again after a crash counts once."""
    first: dict[tuple[int, int], float] = {}
    for e in events:
        if e.get("event") == "report" and isinstance(e.get("trial"), int) and isinstance(e.get("epoch"), int):
            first.setdefault((e["trial"], e["epoch"]), float(e.get("time") or 0.0))
    return first


def epochs_per_hour(events: list[dict], reports: dict[tuple[int, int], float], now: float,
                    dead: tuple[float, float] | None) -> float:
    """Epochs reported per hour over the last RATE_WINDOW_S (or since the first start), `dead` time left out."""
    starts = [float(e["time"]) for e in events if e.get("event") == "start" and isinstance(e.get("time"), (int, float))]
    return _per_hour(list(reports.values()), starts, now, dead)


def _per_hour(times: list[float], starts: list[float], now: float, dead: tuple[float, float] | None) -> float:
    if not starts or not times:
        return 0.0
    window = min(RATE_WINDOW_S, now - min(starts))
    recent = sum(1 for t in times if t >= now - window)
    idle = max(0.0, min(now, dead[1]) - max(now - window, dead[0])) if dead else 0.0
    active = window - idle
    return recent / active * 3600.0 if active >= MIN_RATE_SPAN_S else 0.0


def ladder_of(info: dict) -> Scheduler | None:
    """The run's scheduler where it is asha or hyperband: there paused trials finish only when
    promoted to the top or when the search ends, so that finished trials say little of the work
    done, and its rungs tell the epochs left (`Scheduler.epochs_left`); None otherwise."""
    search, training = info.get("search") or {}, info.get("training") or {}
    try:
        scheduler = make_scheduler(str(search.get("scheduler", "none")), epochs=int(training["epochs"]),
                                   min_epochs=int(search["min_epochs"]),
                                   reduction_factor=int(search["reduction_factor"]), pausable=True)
    except (KeyError, TypeError, ValueError):  # an older or hand-edited config.yaml: no estimate from epochs
        return None
    return scheduler if scheduler.epochs_to_go() is not None else None


def status_text(path: str, now: float | None = None) -> str:
    run = run_directory(path)
    if not (run / JOURNAL).exists():
        raise ConfigError(f"holds no search (no {JOURNAL})", source=str(path))
    events, problems = read_journal(run / JOURNAL)
    trials = replay(events)
    info = _run_info(run)
    budget = int((info.get("search") or {}).get("trials") or 0)
    limit = (info.get("training") or {}).get("time_limit")
    alive = liveness(run, time.time())
    last_event = max(map(event_time, events), default=0.0)
    now = now if now is not None else (time.time() if alive.state == "running" else last_event)
    dead = dead_time(events, alive, now)
    lines = [_state_line(run, alive, budget)]
    lines += _count_lines(list(trials.values()), budget, alive)
    lines += _best_lines(run, list(trials.values()), events, info)
    epoch_lines = _epoch_lines(events, trials, budget, ladder_of(info), now, alive, dead)
    lines += _rate_lines(list(trials.values()), budget, now, alive, dead, eta=not epoch_lines)
    lines += epoch_lines
    folds = (info.get("objective") or {}).get("folds")
    lines += _group_lines(trials, last_signs(events), now, limit, alive,
                          folds=(run, int(folds)) if isinstance(folds, int) and folds > 1 else None)
    lines += _lost_group_lines(events, now, alive, has_header=any(line == "groups:" for line in lines))
    lines += [f"warning: {problem}" for problem in problems]  # a torn or corrupt line, as `mpiopt results` says
    return "\n".join(lines)


def _lost_group_lines(events: list[dict], now: float, alive: Liveness, has_header: bool) -> list[str]:
    """The groups this run of a running search has lost (their ranks went silent) and not got back."""
    if alive.state != "running":
        return []
    lost = sorted((group, spans[-1][0]) for group, spans in lost_intervals(events).items()
                  if spans[-1][1] is None and (alive.since is None or spans[-1][0] >= alive.since))
    out = [f"  group {group}: lost {format_hours((now - at) / 3600)} ago (its ranks went silent: a node lost?); "
           "the search goes on without it" for group, at in lost]
    return out if has_header or not out else ["groups:", *out]


def _file_budget(space: str) -> int | None:
    """The budget a --resume without --trials reads from the space file (its search.trials or the
    default), or None where the file cannot tell."""
    import yaml

    from .config import SEARCH_DEFAULTS

    try:
        search = (yaml.safe_load(Path(space).read_text("utf-8")) or {}).get("search") or {}
        trials = search.get("trials", SEARCH_DEFAULTS["trials"])
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        return None
    return trials if isinstance(trials, int) and not isinstance(trials, bool) else None


def _state_line(run: Path, alive: Liveness, budget: int) -> str:
    if alive.state == "running":
        return f"{run}: running ({alive.where}, heartbeat {alive.age_s:.0f} s ago)"
    if alive.state == "starting":
        return f"{run}: starting ({alive.where}): the pre-flight check runs before the first trial"
    if alive.state == "never started":
        return (f"{run}: never started: its coordinator ({alive.where}) is gone, stopped before its first trial; "
                "run the search again (--resume starts it too)")
    ended = f"{run}: ended {format_hours(alive.age_s / 3600)} ago" if alive.state == "ended" else ""
    if ended and not _short_of_groups(alive):
        return ended + (f": {alive.stopped}" if alive.stopped else "")
    command = f"mpiopt search {_shown_path(alive.space) if alive.space else 'SPACE'} --out {run} --resume"
    in_file = _file_budget(alive.space) if alive.space else None
    if budget and in_file is not None and budget < in_file:  # a plain --resume keeps only a raised --trials
        command += f" --trials {budget}"
    go_on = f"`{command}` continues it"
    if alive.nodes and alive.nodes > 1:  # groups follow nodes: --np, all on this machine, would make others
        go_on = (f"`mpiexec -n {alive.ranks} {command}` continues it on {alive.ranks} ranks on the {alive.nodes} "
                 "nodes it ran on, as it ran (or your batch system's launcher; --np starts every rank here)")
    elif alive.ranks and alive.ranks > 1:  # the job's size, whatever launched it: --np, mpirun -n or srun
        go_on = (f"`{command} --np {alive.ranks}` continues it on {alive.ranks} ranks, as it ran (or "
                 f"`mpiexec -n {alive.ranks} {command}`, or your batch system's launcher)")
    if ended:  # its groups lost with their nodes, or retired: the trials left wait for a --resume
        return f"{ended}: {alive.stopped}; {go_on}"
    if alive.state == "interrupted":
        return f"{run}: interrupted {format_hours(alive.age_s / 3600)} ago (Ctrl-C or SIGTERM); {go_on}"
    if alive.gone:
        how = "killed" if alive.age_s is not None else f"ended or killed: {_no_heartbeat(run)} tells which"
        return f"{run}: not running: its coordinator ({alive.where}) is gone ({how}{_full_disk(run)}); {go_on}"
    if alive.state == "stopped":
        return (f"{run}: not running: no heartbeat for {format_hours(alive.age_s / 3600)} (killed, or its node "
                f"lost{_full_disk(run)}); {go_on}")
    if (run / HEARTBEAT).exists():
        return f"{run}: its {HEARTBEAT} is unreadable: whether it runs is unknown"
    return f"{run}: no heartbeat file (a search of an older mpiopt): whether it runs is unknown"


def _short_of_groups(alive: Liveness) -> bool:
    """Whether an ended search stopped for want of groups (`Coordinator._why_no_group_is_left`)."""
    return bool(alive.stopped) and alive.stopped.startswith(NO_GROUP_LEFT)


def _no_heartbeat(run: Path) -> str:
    return f"no readable {HEARTBEAT}" if (run / HEARTBEAT).exists() else "no heartbeat file"


def _full_disk(run: Path) -> str:
    """', or stopped on its full file system (...)' where the run's file system is full now: a
    search that cannot write stops, and cannot write its heartbeat to say so."""
    try:
        free = too_little_room(run)
    except OSError:
        return ""
    return "" if free is None else f", or stopped on its full file system ({free / 2**20:.1f} MiB free)"


def _shown_path(path: str) -> str:
    """`path` relative to the working directory where it lies below it, as a user would type it."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def _count_lines(trials: list[TrialRecord], budget: int, alive: Liveness) -> list[str]:
    counts = Counter(t.shown_status(runs_now(t, alive)) for t in trials)
    finished = sum(n for s, n in counts.items() if s.is_finished())  # a trial stopped as the search was cut off too
    share = f" ({finished / budget:.0%})" if budget else ""
    done = ", ".join(f"{n} {s.value}" for s, n in sorted(counts.items()) if s.is_finished())
    again = "this search runs them again" if alive.state in ("running", "starting") else "run again on --resume"
    ahead = _sent_ahead(trials, alive)  # running as the journal has it, but waiting behind a group's trial
    counts[TrialStatus.RUNNING] -= ahead
    labels = {TrialStatus.RUNNING: "running", TrialStatus.INTERRUPTED: f"interrupted ({again})",
              TrialStatus.PAUSED: "paused"}
    extra = [f"{counts[s]} {label}" for s, label in labels.items() if counts.get(s)]
    extra += [f"{ahead} sent ahead"] if ahead else []
    told = f"{finished} of {budget} finished{share}" if budget else \
        f"{finished} finished (the budget is unknown: no readable config.yaml)"
    return [f"trials: {told}" + (f": {done}" if done else "")
            + ("; " + ", ".join(extra) if extra else "")]


def _sent_ahead(trials: list[TrialRecord], alive: Liveness) -> int:
    """The running trials sent ahead: those of a group beyond the one it trains now."""
    running = [t for t in trials if t.status == TrialStatus.RUNNING and runs_now(t, alive)]
    return len(running) - len({t.group for t in running})


def _best_lines(run: Path, trials: list[TrialRecord], events: list[dict], info: dict) -> list[str]:
    direction, metric = direction_of(run)
    done = [t for t in trials if t.status == TrialStatus.COMPLETED and t.objective is not None]
    pick = min if direction == "minimize" else max
    if not done:
        step = "step" if "function" in (info.get("objective") or {}) else "epoch"
        return ["best: no trial has completed" + _best_report_text(events, metric, pick, step)]
    best = pick(done, key=lambda t: t.objective)
    return [f"best {metric}: {best.objective:.6g} at trial {best.trial} ({params_text(best.params)})"]


def _best_report_text(events: list[dict], metric: str, pick, step: str) -> str:
    """The best epoch (a function's step) any trial has reported: under a scheduler, or with
    trials of hours, the first trial completes long after the search has learnt something."""
    reported = [(float(e["metrics"][metric]), e["trial"], e["epoch"]) for e in events
                if e.get("event") == "report" and finite_metric(e.get("metrics") or {}, metric)]
    if not reported:
        return ""
    value, trial, epoch = pick(reported, key=lambda r: r[0])
    return f"; the best {step} so far: {metric} {value:.6g} at trial {trial}, {step} {epoch}"


def _rate_lines(trials: list[TrialRecord], budget: int, now: float, alive: Liveness, dead: tuple[float, float] | None,
                eta: bool) -> list[str]:
    rate = trials_per_hour(trials, now, dead)
    if rate <= 0:
        return []
    left = budget - sum(1 for t in trials if t.status.is_finished())
    line = f"rate: {format_rate(rate, 'trials')}"
    if left > 0 and alive.state == "running" and eta:
        line += f"; about {format_hours(left / rate)} left"
    return [line]


def _epoch_lines(events: list[dict], trials: dict[int, TrialRecord], budget: int, ladder: Scheduler | None,
                 now: float, alive: Liveness, dead: tuple[float, float] | None) -> list[str]:
    """Under asha or hyperband, once trials report epochs: the epochs trained, the epochs the rest
    of the budget trains on average, and the time left from those at the epoch rate, in place of
    the time left from finished trials (most trials wait paused until promoted or the end)."""
    if ladder is None:
        return []
    reports = epoch_reports(events)
    if not reports:
        return []
    rate = epochs_per_hour(events, reports, now, dead)
    reached: dict[int, int] = {}
    for n, epoch in reports:
        reached[n] = max(epoch, reached.get(n, 0))
    paused = {n for n, t in trials.items() if t.status == TrialStatus.PAUSED or t.pause_decided}
    left = ladder.epochs_left(max(0, budget - len(trials)), **reached_by_state(trials, reached, paused))
    parts = [f"epochs: {len(reports)} trained"]
    if alive.state != "ended":  # an ended search trains no more; a resume of an interrupted one trains them
        parts.append(f"about {left:.0f} to go")
    if rate > 0:  # none yet from a search of under MIN_RATE_SPAN_S
        parts.append(format_rate(rate, "epochs"))
    line = ", ".join(parts)
    if alive.state == "running" and left >= 0.5 and rate > 0:
        line += f"; about {format_hours(left / rate)} left"
    return [line]


def _group_lines(trials: dict[int, TrialRecord], signs: dict[int, float], now: float, limit, alive: Liveness,
                 folds: tuple[Path, int] | None = None):
    """Each busy group's trial, how long it has run and whether it has been silent too long; a
    trial sent ahead to a group waits behind the group's running one (its start is when it was sent).
    `folds`: the run directory and K of a k-fold search, whose trials' folds say how far they got."""
    from .crossval import fold_progress

    if alive.state != "running":
        return []
    unfinished: dict[int, list[TrialRecord]] = {}
    last_end: dict[int, float] = {}
    for t in trials.values():
        if t.group is None:
            continue
        if t.status == TrialStatus.RUNNING and runs_now(t, alive):
            unfinished.setdefault(t.group, []).append(t)
        elif t.end is not None:
            last_end[t.group] = max(last_end.get(t.group, t.end), t.end)
    out = []
    for group in sorted(unfinished):
        running, *queued = sorted(unfinished[group], key=lambda t: (t.start or now, t.trial))
        began = max(running.start or now, last_end.get(group, -math.inf))
        line = f"  group {group}: trial {running.trial}, {format_hours((now - began) / 3600)}"
        if folds is not None:
            line += f" ({fold_progress(folds[0] / 'trials' / str(running.trial), folds[1])})"
        silent = now - max(signs.get(running.trial, began), began)
        if limit and silent > float(limit):
            line += f"  WARNING: silent for {format_hours(silent / 3600)}, past its time limit of {limit:g} s"
        if queued:
            line += f"; next: trial{'s' * (len(queued) > 1)} {', '.join(str(t.trial) for t in queued)} (sent ahead)"
        out.append(line)
    return ["groups:", *out] if out else []


