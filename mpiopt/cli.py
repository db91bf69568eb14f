"""The `mpiopt` command line (SPEC §3): its arguments, `main`, and the commands.

Exit codes: 0 the command did its work (failed trials included); 2 the input is wrong; 1 anything
else. A wrong input is one line on stderr, printed by rank 0 only, and every rank exits.
`search` and `train` run on every rank of the MPI job (started by `mpiopt.launch`); `check` and
`results` run in this process only.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import __version__, _env
from . import _results_view as view
from ._errors import ConfigError, file_error, storage_text
from ._files import refuse_a_file_in_the_way
from ._log import FILE_ONLY, STATS, HeldLines, log_to_file, set_rank_tag, setup_logging, stop_logging_to
from .launch import (ABORT_GRACE_S, END_GRACE_S, INTERRUPTED_AT_START, abort_job, agree_or_raise, catch_sigterm,
                     env_size, hold_warnings, interrupted_line, interrupted_outside_a_command,
                     interrupts_at_safe_points, mpi_main, prepare_threads, raise_if_interrupted, ranks_on_hosts,
                     relaunch, release_stops, say_error, start_mpi, starting, warn_once)
from .space import Categorical, distinct_points
from .trial import TrialRecord, TrialResult, TrialStatus

log = logging.getLogger("mpiopt.cli")
TOP_DEFAULT = 10  # trials `mpiopt results` shows without --top


# -- arguments ---------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    commands: dict[str, argparse.ArgumentParser] = {}  # the top parser's: each command's parser

    def error(self, message: str):  # one line, exit 2, rank 0 only
        from .config import did_you_mean

        # argparse's "invalid choice: 'serch' (choose from ...)" of a misspelt command: name the one meant
        wrong = re.search(r"invalid choice: '([^']*)'", message)
        hint = did_you_mean(wrong.group(1), list(self.commands)) if wrong and self.commands else ""
        raise ConfigError(f"{message}{hint} (see `{self.prog} --help`)")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, with a misspelt option of the command named (did you mean ...?)."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            from .config import did_you_mean

            command = self.commands.get(ns.command or "")
            options = [o for a in command._actions for o in a.option_strings] if command is not None else []
            hint = next((did_you_mean(x.split("=")[0], options) for x in extras if x.startswith("--")), "")
            (command or self).error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return ns


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command. Each command declares the options that `main` and `_load` read
    of any command (trials, seed, np, top, trace): those it has no flag for are set by set_defaults."""
    p = _Parser(prog="mpiopt", description="Hyperparameter search and distributed Keras training on MPI.")
    p.add_argument("--version", action="version", version=f"mpiopt {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    s = sub.add_parser("search", help="run (or --resume) a search")
    s.add_argument("space", metavar="SPACE.yaml")
    s.add_argument("--out", metavar="DIR", help="run directory (default runs/<name>)")
    s.add_argument("--resume", action="store_true", help="continue the search in --out from its journal")
    s.add_argument("--trials", type=int, metavar="N", help="override search.trials")
    s.add_argument("--seed", type=int, metavar="S", help="override search.seed")
    s.add_argument("--np", type=int, metavar="N", help="launch N ranks with this environment's mpiexec")
    s.add_argument("--trace", action="store_true", help="write a Chrome trace of each trial's ranks")
    s.set_defaults(top=None)
    c = sub.add_parser("check", help="validate a search space and print the plan; run nothing")
    c.add_argument("space", metavar="SPACE.yaml")
    c.add_argument("--np", type=int, metavar="N", help="plan for N ranks (default: this job's size)")
    c.add_argument("--out", metavar="DIR", help="the run directory to report on: new, or holding a search (default "
                   "runs/<name>)")
    c.set_defaults(trials=None, seed=None, top=None, trace=False)
    t = sub.add_parser("train", help="train one model with given values on all ranks")
    t.add_argument("space", metavar="SPACE.yaml")
    t.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="sets",
                   help="a parameter's or training key's value (repeatable; others: the middle of their range, or "
                        "--trial's)")
    t.add_argument("--trial", metavar="N", help="train with trial N's values and seed (N, or 'best') from the search "
                                                "in --from")
    t.add_argument("--from", metavar="DIR", dest="from_dir",
                   help="the run directory of --trial (default runs/<name>); alone, it means --trial best")
    t.add_argument("--out", metavar="DIR",
                   help="where history.csv goes (default runs/<name>/train, or DIR/train-trial-N with --trial)")
    t.add_argument("--np", type=int, metavar="N", help="launch N ranks with this environment's mpiexec")
    t.add_argument("--trace", action="store_true", help="write a Chrome trace (trace.json) of every rank")
    t.set_defaults(trials=None, seed=None, top=None)
    r = sub.add_parser("results", help="print the best trials of a run directory")
    r.add_argument("dir", metavar="DIR")
    r.add_argument("--top", type=int, metavar="K",
                   help=f"show K trials, the completed best first, then the others (default: {TOP_DEFAULT} in the "
                        "table, every trial in csv, json and yaml)")
    r.add_argument("--format", choices=("table", "csv", "json", "yaml"), default="table")
    r.add_argument("--best", action="store_true",
                   help="the best trial only (not with --top); with --format yaml, its parameters and training "
                        "settings")
    r.add_argument("--timeline", action="store_true",
                   help="group utilization and dispatch latency; with --format csv or json, every stretch of "
                        "training (not with --top, --best or --format yaml)")
    r.set_defaults(trials=None, seed=None, np=None, trace=False)
    st = sub.add_parser("status", help="a running or stopped search at a glance (reads only)")
    st.add_argument("dir", metavar="DIR")
    st.set_defaults(trials=None, seed=None, np=None, top=None, trace=False)
    rp = sub.add_parser("report", help="plots and a self-contained report.html of a search")
    rp.add_argument("dir", metavar="DIR")
    rp.add_argument("--out", metavar="PATH",
                    help="the folder of report.html and its plots (default DIR/report), or the page alone (*.html)")
    rp.set_defaults(trials=None, seed=None, np=None, top=None, trace=False)
    p.commands = sub.choices
    return p


# more ranks than any machine has: --np builds a plan of every rank (mpiopt check --np N)
MAX_NP = 2**20


def _power_of_two(n: int) -> str:
    """2**31 as the YAML's errors write it."""
    return f"2**{n.bit_length() - 1}" if n > 1024 and n & (n - 1) == 0 else str(n)


def _check_args(args: argparse.Namespace) -> None:
    """What argparse does not check: a command was given, and the numbers are in range."""
    if args.command is None:
        raise ConfigError("missing COMMAND: one of search, check, train, results, status, report (see `mpiopt --help`)")
    for flag, value, low, high in (("trials", args.trials, 1, 2**31), ("np", args.np, 1, MAX_NP),
                                   ("top", args.top, 1, 2**31), ("seed", args.seed, 0, 2**31)):
        if value is not None and not low <= value <= high:
            raise ConfigError(f"--{flag}: expected an integer from {low} to {_power_of_two(high)}, got {value}")
    if args.command == "results":
        _check_results_args(args)


def _check_results_args(args: argparse.Namespace) -> None:
    """`mpiopt results` shows one thing: the best trial, the top K, or the timeline."""
    if args.best and args.top is not None:
        raise ConfigError("--best and --top: give one (--best is the best trial alone)")
    if args.timeline and (args.best or args.top is not None):
        raise ConfigError(f"--timeline and {'--best' if args.best else '--top'}: give one (the timeline covers "
                          "every trial)")
    if args.timeline and args.format == "yaml":
        raise ConfigError("--timeline: --format table, csv or json (yaml is for trials' settings)")


# -- main --------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        under_mpi = env_size() > 1 and args.command in ("search", "train", "check")
        if under_mpi:
            _env.defer_check()  # agreed on by every rank once MPI started (launch.mpi_main, _check_under_mpi)
        else:
            release_stops()  # no MPI start to wait for: a Ctrl-C or SIGTERM noted so far acts now
            _env.check()
        _check_args(args)
        if args.command in ("search", "train", "check"):
            # before the space file is read: a user module that imports keras at its top loads
            # TensorFlow there, which reads its log level and thread counts once, as it loads
            prepare_threads()
        if args.command in ("search", "train", "check") and not under_mpi:
            catch_sigterm()  # a SIGTERM while the space file's modules import ends as Ctrl-C does
        setup_logging()
        # under --np the relaunched job's rank 0 says the warnings: once, not twice
        hold_warnings(bool(args.np) and args.command in ("search", "train"))
        job = _prepare_or_defer(args)
        if args.np and args.command in ("search", "train"):
            return relaunch(argv, args.np)
    except ConfigError as exc:
        say_error(str(exc))
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the space file's modules import
        return interrupted_outside_a_command(INTERRUPTED_AT_START)
    finally:
        hold_warnings(False)  # reached only where this process did not relaunch itself
    if args.command in ("search", "train", "check"):  # the commands the variables tune
        for note in _env.misspelt():
            warn_once(note)
    if args.command == "results":
        return _guard(lambda: cmd_results(args))
    if args.command == "check":
        return _guard(lambda: cmd_check(args))
    if args.command == "status":
        return _guard(lambda: cmd_status(args))
    if args.command == "report":
        return _guard(lambda: cmd_report(args))
    if job is None:  # this rank's start-up error: every rank learns it once MPI started
        return mpi_main(None, lambda comm, placement: 2, coordinator=False, interrupted=lambda: "")
    command, stopped = (_search, _search_not_begun) if args.command == "search" else (_train, _training_stopped)
    return mpi_main(job.cfg, lambda comm, placement: command(args, job, comm, placement),
                    coordinator=args.command == "search", interrupted=lambda: stopped(job))


def _search_stopped(job: _Job) -> str:
    """The interrupted line of `mpiopt search`: whether its journal is there to resume."""
    from .journal import JOURNAL

    journal = job.out / JOURNAL
    try:
        journal.stat()
    except FileNotFoundError:
        return f"{journal} is gone: there is nothing to resume"
    except OSError as exc:  # a lost permission, a stale NFS handle: said, never raised here
        return f"{journal} cannot be read ({exc.strerror or exc}): fix that, then continue with --resume"
    return "the journal is intact: continue with --resume"


def _search_not_begun(job: _Job) -> str:
    """The interrupted line before the run directory is open (`_search_stopped` after): a
    journal there is an earlier run's, to resume."""
    from .journal import JOURNAL

    return _search_stopped(job) if (job.out / JOURNAL).exists() else "before the search began: nothing was written"


def _training_stopped(job: _Job) -> str:
    """The interrupted line of `mpiopt train`: what is left of the training."""
    if job.cfg.objective.kind != "model":
        return f"training stopped (mpiopt train does not resume: what it wrote is in {job.out})"
    return (f"training stopped (mpiopt train does not resume; mpiopt.load_model({str(job.out)!r}) loads the best "
            "epoch its checkpoint holds)")


def _guard(fn) -> int:
    try:
        return fn()
    except ConfigError as exc:
        say_error(str(exc))
        return 2
    except KeyboardInterrupt:
        return interrupted_outside_a_command("")
    except BrokenPipeError:  # `mpiopt results DIR | head`
        _stdout_to_devnull()
        return 0
    except OSError as exc:  # a full disk under `report`'s plots, an unreadable file
        if not file_error(exc):
            raise
        say_error(storage_text(exc))
        return 1



def _load(path: str, args) -> Any:
    from .config import load_config

    cfg = load_config(path)
    if args.trace:
        if cfg.objective.kind == "function":
            raise ConfigError("--trace records a model's training steps; a `function` objective has none to trace")
        cfg = replace(cfg, training={**cfg.training, "trace": True})
    changes = {}
    if args.trials is not None:
        changes["trials"] = args.trials
    if args.seed is not None:
        changes["seed"] = args.seed
    return cfg.with_search(**changes) if changes else cfg


@dataclass(frozen=True)
class _Job:
    """A search or training job as read and checked before MPI starts (on every rank alike)."""

    cfg: Any
    out: Path
    params: dict[str, Any] = field(default_factory=dict)  # train: the values to train with
    trial: int | None = None  # train: the trial of --trial, whose seed it trains with (None: trial 0's)
    sets: tuple[str, ...] = ()  # train: the names --set gave


def _prepare_or_defer(args) -> _Job | None:
    """`_prepare_job` for search and train (else None). Under MPI a refusal is kept for every rank
    to learn once MPI started (None): one node's ranks may lack a file the others have, and a rank
    that ended alone would leave them waiting in MPI's start."""
    if args.command not in ("search", "train"):
        return None
    try:
        return _prepare_job(args)
    except ConfigError as exc:
        if env_size() == 1 or args.np:
            raise
        _env.defer(exc)
        return None


def _prepare_job(args) -> _Job:
    """Read the configuration and refuse a bad output folder before MPI and TensorFlow start.

    Every rank reads the files it finds (a node may have its own copies), and a refusal comes
    before the slow start of TensorFlow; under MPI the ranks then agree on it (`_prepare_or_defer`)."""
    cfg = _load(args.space, args)
    if args.command == "train":
        base, out, number = cfg.space.middle(), Path("runs") / cfg.name / "train", None
        if args.trial is not None or args.from_dir is not None:
            from_dir = Path(args.from_dir) if args.from_dir else Path("runs") / cfg.name
            number, base = trial_values(from_dir, args.trial, cfg)
            cfg = cfg.with_search(seed=_seed_of_run(from_dir, cfg.search.seed))
            out = from_dir / f"train-trial-{number}"
        params, training = parse_sets(cfg, args.sets, base)
        cfg = replace(cfg, training=training)
        if (note := _unread_mode_keys_in_training(cfg, params, args.sets)) is not None:
            warn_once(note)
        out = Path(args.out) if args.out else out
        _refuse_a_finished_training(out)
        changed = [item.partition("=")[0].strip() for item in args.sets]
        return _Job(cfg, out, params, number, tuple(name for name in changed if name != "group_size"))  # not read
    from .journal import RunDir

    out = Path(args.out) if args.out else Path("runs") / cfg.name
    RunDir(out).check(resume=args.resume, config_text=_config_text(cfg))
    return _Job(cfg, out)


def _config_text(cfg) -> str:
    """The resolved configuration as the run directory's config.yaml holds it; a --resume must
    find the same `parameters` and `objective` there."""
    from .config import dump_yaml

    return dump_yaml(cfg.resolved(), sort_keys=False)


# -- search ------------------------------------------------------------------------------------
def _search(args, job: _Job, comm, placement: str | None = None) -> int:
    """Every rank of a search: world rank 0 coordinates, the others serve in their group."""
    from . import transport

    cfg, size = job.cfg, comm.Get_size()
    nodes, hosts = (transport.node_layout(comm), transport.host_names(comm)) if size > 1 else (None, None)
    if size > 1:
        agree_on_space_and_data(comm, cfg, hosts)
    plan = transport.plan_groups(size, cfg.training["group_size"], nodes, hosts)
    return _search_as(args, job, comm, placement, plan)


def agree_on_space_and_data(comm, cfg, hosts: tuple[str, ...]) -> None:
    """Refuse, on every rank alike, a space file or HDF5 data that some ranks read otherwise than
    world rank 0 (node-local copies that differ, a glob that matches other files there): their
    groups would train otherwise, or an allreduce group wait for ever on a rank with other batches.
    A collective."""
    from .config import data_files_seen

    settings = comm.allgather({k: v for k, v in cfg.resolved().items() if k != "source"})
    if other := [r for r, s in enumerate(settings) if s != settings[0]]:
        key, ours, theirs = _first_difference(settings[0], settings[other[0]])
        raise ConfigError(f"{ranks_on_hosts({r: hosts[r] for r in other})} read{'s' if len(other) == 1 else ''} "
                          f"{key}: {theirs!r} where world rank 0 reads {ours!r}: give every node the same space file",
                          source=cfg.source or str(cfg.path))
    seen = comm.allgather(data_files_seen(cfg))
    for part in ("train", "val"):
        other = [r for r, files in enumerate(seen) if files.get(part) != seen[0].get(part)]
        if other:
            differ = _data_difference(seen[0][part], seen[other[0]][part])
            raise ConfigError(f"objective.data.{part}: {ranks_on_hosts({r: hosts[r] for r in other})}: {differ}: "
                              "give every node the same files", source=cfg.source or str(cfg.path))


def _first_difference(ours: Any, theirs: Any, key: str = "") -> tuple[str, Any, Any]:
    """The first key (dotted) where two resolved configurations differ, and its two values."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for k in [*ours, *(k for k in theirs if k not in ours)]:
            if ours.get(k) != theirs.get(k):
                return _first_difference(ours.get(k), theirs.get(k), f"{key}.{k}" if key else str(k))
    return key, ours, theirs


def _data_difference(ours: list[tuple[str, int]], theirs: list[tuple[str, int]]) -> str:
    """How the files `theirs` differ from world rank 0's (`ours`), as (name, bytes) pairs."""
    names, their_names = [n for n, _ in ours], [n for n, _ in theirs]
    if missing := [n for n in names if n not in their_names]:
        return f"no {view.first_few(missing, 3)}, which world rank 0 finds"
    if extra := [n for n in their_names if n not in names]:
        return f"also {view.first_few(extra, 3)}, which world rank 0 does not find"
    (name, size), (_, their_size) = next((a, b) for a, b in zip(ours, theirs, strict=True) if a != b)
    return f"{name} has {their_size:,} bytes, where world rank 0's has {size:,}"


# how long a pulsing rank waits for each before it in `speaking_order`: far longer than MPI_Abort
# takes to end a job that lost a node
COORDINATOR_LOST_TURN_S = 20.0


def _start_pulse(comm, plan):
    """From now on the coordinator tells a group that lost its node from a slow one (one rank of
    each group on each node pulses it), and those ranks see the coordinator's node die."""
    from . import transport

    if plan.shared:
        return None
    pulsing = transport.pulsing_ranks(plan)
    rank = comm.Get_rank()
    if rank == 0:
        return transport.Pulse(comm, sorted(pulsing)).start()
    if rank not in pulsing:
        return None
    # every pulsing rank hears the silence at once: the first in turn says it and ends the job, and
    # a later one, waiting longer, speaks only if those before it died too (the abort ends it first)
    turn = transport.speaking_order(plan).index(rank)

    def coordinator_lost(silent_s: float) -> None:
        print(f"mpiopt: error: world rank {rank}: no word from the coordinator (world rank 0) for {silent_s:.0f} s: "
              "its node is lost; ending the job (finished trials are in the journal: --resume)",
              file=sys.stderr, flush=True)
        # without the grace the launcher may tear the job down before it forwards this line
        abort_job(comm, 1, ABORT_GRACE_S)

    return transport.Pulse(comm, [0], watch=0, on_silence=coordinator_lost,
                           silent_s=_env.get("MPIOPT_COORDINATOR_SILENT_S") + turn * COORDINATOR_LOST_TURN_S).start()


def _search_as(args, job: _Job, comm, placement: str | None, plan) -> int:
    """This rank's part of the search: coordinate (world rank 0) or serve in its group."""
    cfg, rank, size = job.cfg, comm.Get_rank(), comm.Get_size()
    run_dir, journal, error, runner, opening = None, _Journal(), None, None, []
    if rank == 0:
        set_rank_tag("[coordinator]" if size > 1 else "")
        held = HeldLines()
        try:
            run_dir, journal, cfg, error = _open_run_dir(cfg, job.out, args.resume, plan, args.trials is not None)
            if error is None:
                interrupted_line(lambda: _search_stopped(job))
        finally:
            opening = held.stop()
    else:
        # a group rank loads the objective now, while the coordinator checks and opens the run
        # directory, so that every group is ready when the first trials go out
        from .objective import TrialRunner

        try:
            runner = TrialRunner(cfg)
        except ConfigError as exc:
            error = exc
    agree_or_raise(comm, error)
    # pulses only once the input is agreed good: a search ended by a bad input would leave pulses
    # unreceived at MPI_Finalize, where MPICH kills their sender (and the exit code is no longer 2)
    pulse = _start_pulse(comm, plan)
    try:
        code = _coordinate(cfg, plan, comm, run_dir, journal, placement, opening) if rank == 0 \
            else _serve(plan, comm, rank, runner)
    except BaseException:
        if pulse is not None:
            pulse.stop(last_word=False)
        raise
    if pulse is not None:
        pulse.stop()
    return code


def _serve(plan, comm, rank: int, runner) -> int:
    """A group rank's part: train the trials its group is given until the search ends."""
    from . import transport
    from .group import serve

    g = plan.group_of(rank)
    group_comm = transport.group_comm(comm, plan.groups[g])
    set_rank_tag(f"[group {g} rank {group_comm.Get_rank()}]")
    serve(transport.GroupChannel(comm, group_comm), lambda: runner)
    return 0


@dataclass(frozen=True)
class _Journal:
    """The run directory's journal, read and replayed once: its events and the trials they make
    (none for a new search)."""

    events: list[dict] = field(default_factory=list)
    trials: dict[int, TrialRecord] = field(default_factory=dict)


def _open_run_dir(cfg, out: Path, resume: bool, plan,
                  budget_given: bool) -> tuple[Any, _Journal, Any, ConfigError | None]:
    """The coordinator's start: (run directory, its journal, the configuration it runs, the
    refusal if any); `budget_given`: --trials was given.

    The directory is claimed before the preflight starts TensorFlow, so that a refusal is quick;
    after a refusal it is left as it was found."""
    from .journal import RunDir, replay
    from .objective import preflight

    run_dir, journal = None, _Journal()
    try:
        run_dir = RunDir(out)
        run_dir.open(resume=resume, config_text=_config_text(cfg), space=cfg.path, ranks=plan.world_size,
                     nodes=plan.n_nodes)
        events, problems = run_dir.events()
        for msg in problems:
            log.warning(msg)
        journal = _Journal(events, replay(events))
        if resume and not journal.trials:
            log.info("resuming: no trial was recorded before the search stopped; it starts from its first")
        if resume:
            from .analysis import _run_info

            ran = _run_info(out)  # the configuration the search last ran with (its config.yaml)
            cfg = cfg if budget_given else _keep_a_raised_budget(cfg, ran)
            _refuse_a_budget_already_spent(cfg, journal.trials, out, budget_given)
            _note_a_spent_budget(cfg, journal.trials)
            _note_changed_settings(cfg, ran)
        if not _budget_spent(cfg, journal.trials):  # a spent one runs nothing: no model to check
            if cfg.objective.kind == "model":  # TensorFlow's start alone can take ten seconds: not in silence
                log.info("checking that %s trains on its data before the first trial", cfg.objective.model)
            preflight(cfg)
        if resume:  # once nothing refused it: a refused resume leaves the run's configuration as it was
            run_dir.write_config(_config_text(cfg))
    except ConfigError as exc:
        if run_dir is not None and resume:
            run_dir.close()
        elif run_dir is not None:
            run_dir.abandon()
        return run_dir, journal, cfg, exc
    return run_dir, journal, cfg, None


def _note_changed_settings(cfg, ran: dict) -> None:
    """A --resume may change the search's and the training's settings (not the space, the
    objective or the scheduler's rungs, refused before); it says which of those the search `ran`
    with differ, so that a changed seed or learning rate is never a surprise in the table. The
    budget has its own line."""
    import yaml

    now = yaml.safe_load(_config_text(cfg))
    changed = [f"name {ran['name']!r} -> {now.get('name')!r}"] if "name" in ran and ran["name"] != now.get("name") \
        else []
    changed += [f"{section}.{key} {old!r} -> {now[section].get(key)!r}"
                for section in ("search", "training") for key, old in (ran.get(section) or {}).items()
                if (section, key) != ("search", "trials") and key in now[section] and now[section][key] != old]
    if changed:
        log.info("changed since the search last ran: %s; the trials so far are kept", ", ".join(changed))


def _budget_spent(cfg, trials: dict[int, TrialRecord]) -> bool:
    return len(trials) >= cfg.search.trials and all(t.status.is_finished() for t in trials.values())


def _note_a_spent_budget(cfg, trials: dict[int, TrialRecord]) -> None:
    """A --resume of a search whose every trial of its budget finished has nothing to run: say
    how to run more (the same command after fixing the objective would repeat the old verdict)."""
    if not _budget_spent(cfg, trials):
        return
    log.warning("the budget of %d trials is spent (all %d finished): nothing is left to run; --resume --trials N "
                "runs more", cfg.search.trials, len(trials))


def _last_budget(ran: dict) -> int | None:
    """The budget a search `ran` with (its config.yaml), where it says one."""
    trials = (ran.get("search") or {}).get("trials")
    return trials if isinstance(trials, int) and not isinstance(trials, bool) else None


def _resumed_budget(cfg, ran: dict) -> int:
    """The budget a --resume without --trials runs to: the larger of the file's and the one the
    search `ran` with, so that a budget raised with --trials outlives a kill."""
    return max(cfg.search.trials, _last_budget(ran) or 0)


def _keep_a_raised_budget(cfg, ran: dict):
    """`cfg` with the budget a --resume without --trials runs to (`_resumed_budget`), said."""
    trials = _last_budget(ran)
    if trials is None or trials == cfg.search.trials:
        return cfg
    if trials < cfg.search.trials:
        log.info("budget: %d trials, as the file says (the search last ran with %d: --trials %d keeps that)",
                 cfg.search.trials, trials, trials)
        return cfg
    log.info("budget: %d trials, as the search last ran (the file says %d; --trials sets another)",
             trials, cfg.search.trials)
    return cfg.with_search(trials=trials)


def _started(trials: dict[int, TrialRecord]) -> tuple[int, int, int]:
    """(finished, interrupted, paused) trials of a journal: those a --resume counts as started
    (it runs the interrupted again, and a promotion may continue the paused)."""
    shown = [t.shown_status(live=False) for t in trials.values()]
    finished = sum(1 for t in trials.values() if t.status.is_finished())
    return finished, shown.count(TrialStatus.INTERRUPTED), shown.count(TrialStatus.PAUSED)


def _refuse_a_budget_already_spent(cfg, trials: dict[int, TrialRecord], out: Path, budget_given: bool) -> None:
    """A --resume whose `--trials` (`budget_given`) or search.trials is below the trials the
    journal started would stop past its budget at once."""
    finished, rerun, paused = _started(trials)
    started = finished + rerun + paused
    if cfg.search.trials >= started:
        return
    kinds = [f"{finished} finished"] + [f"{rerun} interrupted, which --resume runs again"] * bool(rerun) \
        + [f"{paused} paused"] * bool(paused)
    spent = (f"the {started} trials already started in {out} ({', '.join(kinds)})" if rerun or paused
             else f"the {finished} trials already finished in {out}")
    text = f"{cfg.search.trials} is fewer than {spent}; resume with a budget of at least {started}"
    if budget_given:
        raise ConfigError(f"--trials: {text}")
    raise ConfigError(f"{text} (--trials {started})", source=cfg.source or str(cfg.path), field="search.trials")


def _coordinate(cfg, plan, comm, run_dir, journal: _Journal, placement: str | None = None,
                opening: list[logging.LogRecord] | None = None) -> int:
    """The coordinator's part of a search, its lines also kept in the run's search.log, with
    those logged while the run directory opened (`opening`: a resume's notes)."""
    from .journal import LOG

    logfile = log_to_file(run_dir.path / LOG)
    for record in opening or ():
        logfile.handle(record)
    try:
        return _run_search(cfg, plan, comm, run_dir, journal, placement)
    finally:
        stop_logging_to(logfile)


def _run_search(cfg, plan, comm, run_dir, journal: _Journal, placement: str | None) -> int:
    if plan.shared:  # trials run in this process: Ctrl-C must stop the user's code where it is
        return _coordinate_here(cfg, plan, comm, run_dir, journal, placement)
    with interrupts_at_safe_points():  # the coordinator's rank: Ctrl-C waits for the loop's next wait
        return _coordinate_here(cfg, plan, comm, run_dir, journal, placement)


def _coordinate_here(cfg, plan, comm, run_dir, journal: _Journal, placement: str | None) -> int:
    began = time.perf_counter()  # the search's time includes the searcher's start (its imports take seconds)
    _announce(cfg, plan, run_dir, placement)
    link = _make_link(cfg, comm, plan)
    searcher = _make_searcher(cfg, link)
    # what start-up built (imported modules above all) stays: a full collection in the middle of
    # a hand-out would walk it all again, tens of milliseconds each time
    gc.freeze()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    summary = _run_coordinator(cfg, searcher, link, run_dir, journal)
    if _search_complete(cfg, summary):  # its results are final: a Ctrl-C from here stops nothing
        interrupted_line(lambda: f"the search had finished: its results are in {run_dir.shown / 'results.csv'}")
    code = _finish(cfg, summary, searcher, run_dir, cpu0, wall0, time.perf_counter() - began)
    if summary.retired:
        # their ranks are stuck in user code and would keep the job from ending: the journal and
        # table are complete, so end the MPI job here
        log.warning("%s; ending the MPI job (MPI_Abort) to free their ranks", _retired_text(summary))
        abort_job(comm, code, END_GRACE_S)
    return code


def _retired_text(summary) -> str:
    """'group 1 lost (a node died), group 3 did not come back (stuck)': which groups the search
    gave up on, and why."""
    def groups(numbers: list[int]) -> str:
        return f"group{'s' * (len(numbers) > 1)} {', '.join(map(str, numbers))}"

    stuck = [g for g in summary.retired if g not in summary.lost]
    parts = [f"{groups(summary.lost)} lost (a node died)"] if summary.lost else []
    parts += [f"{groups(stuck)} did not come back (stuck)"] if stuck else []
    return ", ".join(parts)


def _announce(cfg, plan, run_dir, placement: str | None) -> None:
    """The search's first lines: what runs where, and a group size the job cannot give."""
    scheduler = f", {cfg.search.scheduler} scheduler" if cfg.search.scheduler != "none" else ""
    log.info("search %r: %s; %s, %s search%s; run directory %s", cfg.name, plan.describe(),
             view.counted(cfg.search.trials, "trial"), cfg.search.algorithm, scheduler, run_dir.shown)
    if placement:
        log.info("devices: %s", placement)
    for note in _plan_notes(cfg, plan):
        log.warning("%s", note)


def _plan_notes(cfg, plan) -> list[str]:
    """What `check` notes and a search warns of before it starts: settings that the ranks or the
    budget make do something else than they seem to."""
    notes = [_group_size_note(cfg.training["group_size"], plan), _idle_ranks_note(cfg, plan),
             _yes_no_note(cfg), _initial_points_note(cfg), _direction_note(cfg), _accuracy_of_a_regression_note(cfg),
             _uneven_groups_note(cfg, plan) or _no_group_of_the_size_note(cfg, plan), _searched_training_keys_note(cfg),
             _training_metric_note(cfg),
             _unread_mode_keys_note(cfg), _warmup_note(cfg), _more_trials_than_points_note(cfg),
             _sync_every_note(cfg, _fewest_workers(cfg, plan))]
    return [n for n in notes if n is not None]


def _fewest_workers(cfg, plan) -> int:
    """The workers of the smallest group's training job (a k-fold group of K ranks or more trains
    each fold on a sub-group of its own)."""
    from .crossval import plan_folds

    size = min((len(g) for g in plan.groups), default=1)
    folds = cfg.objective.folds
    if folds:
        size = min(len(team) for team in plan_folds(size, int(folds)).teams)
    return size - 1


def _sync_every_note(cfg, workers: int) -> str | None:
    """A training.sync_every past the batches a worker trains an epoch, which sends once an epoch
    whatever it says (from the data the preflight read: none where it did not run); None where
    the file fixes none of it (searched mode, sync_every or batch_size) or no worker reads it."""
    from .config import MODE_KEYS
    from .learn import loaded_source

    t, o = cfg.training, cfg.objective
    searched = {"mode", "sync_every", "batch_size"} & set(cfg.space.names)
    if o.kind != "model" or searched or workers < 1 or t["mode"] not in MODE_KEYS["sync_every"]:
        return None
    source = loaded_source(o.data, cfg.base_dir)
    if source is None:
        return None
    n = source.n_train()
    n -= n // o.folds if o.folds else 0  # a fold trains on the others
    batches = math.ceil(n / workers / int(t["batch_size"]))
    if int(t["sync_every"]) <= batches:
        return None
    return (f"training.sync_every {t['sync_every']} is more than the {batches} batches a worker trains an epoch "
            f"({n:,} samples over {view.counted(workers, 'worker')} in batches of {t['batch_size']}): each worker "
            "sends its update once an epoch")


def _searched_training_keys_note(cfg) -> str | None:
    """Training keys the file gives that every trial's own value overrides, or None."""
    from .config import training_keys_also_searched

    keys = training_keys_also_searched(cfg)
    if not keys:
        return None
    given = ", ".join(f"training.{k}" for k in keys)
    return (f"{given}: also searched (parameters.{', parameters.'.join(keys)}), which every trial sets: the value"
            f"{'s' * (len(keys) > 1)} in training {'are' if len(keys) > 1 else 'is'} not used")


def _group_size_note(size: int, plan) -> str | None:
    """What a search makes of a `training.group_size` its ranks cannot give, or None."""
    if plan.shared and size > 1:
        return (f"training.group_size {size} needs at least {size + 1} ranks (a coordinator and one group); with 1 "
                f"process each trial trains on 1 rank (mpiexec -n {size + 1}, or --np {size + 1})")
    if not plan.shared and plan.requested_size > plan.world_size - 1:
        beside = "the 1 rank" if plan.world_size == 2 else f"the {plan.world_size - 1} ranks"
        return (f"training.group_size {plan.requested_size} is more than {beside} beside the "
                f"coordinator: one group of {plan.world_size - 1}")
    return None


def _data_text(data) -> str:
    """`objective.data` as the file gives it: a loader, or its files and keys."""
    if isinstance(data, dict):
        return ", ".join(f"{k} {v}" for k, v in data.items())
    return str(data)


def _function_call(o) -> str:
    """How mpiopt calls a function objective, as `mpiopt check` says it."""
    args = ", ".join(["params"] + ["comm"] * o.takes_comm + ["trial"] * o.takes_trial)
    return f" ({args})" + (" on every rank of its group" if o.takes_comm else " on its group's first rank")


def _idle_ranks_note(cfg, plan) -> str | None:
    """A function without `comm` runs on its group's first rank only: the group's others idle."""
    o, size = cfg.objective, cfg.training["group_size"]
    if o.kind != "function" or o.takes_comm:
        return None
    fix = "(fn(params, comm) puts them to work; training.group_size: 1 makes each rank a group)"
    if plan.shared:  # one process: say what its ranks would do under mpiexec
        return None if size == 1 else (f"{o.function} takes no comm: under mpiexec it runs on each group's first "
                                       f"rank, and the other {size - 1} of each group of {size} idle {fix}")
    idle = sum(len(ranks) - 1 for ranks in plan.groups)
    if not idle:
        return None
    ranks = f"{idle} rank{'s' * (idle != 1)}"
    return f"{o.function} takes no comm, so it runs on each group's first rank: {ranks} idle {fix}"


def _uneven_groups_note(cfg, plan) -> str | None:
    """Under a scheduler, groups of several sizes judge at one rung trials trained differently
    (a model's distributed training depends on its ranks), and a paused trial goes on only on
    a group of its own size. The fix: ranks in multiples of the group size, on each node where
    groups follow nodes."""
    sizes = sorted({len(ranks) for ranks in plan.groups}, reverse=True) if not plan.shared else []
    if cfg.search.scheduler == "none" or len(sizes) < 2 or cfg.objective.kind != "model":
        return None
    return (f"groups of {' and '.join(map(str, sizes))} ranks: the {cfg.search.scheduler} rungs compare trials trained "
            f"on groups of different sizes, and a paused trial goes on only on a group of its own size "
            f"({_ranks_for_groups_of(plan.requested_size, plan)})")


def _no_group_of_the_size_note(cfg, plan) -> str | None:
    """The ranks make no group of `training.group_size` (a node's leftover ranks join its groups:
    5 ranks in groups of 3 make one of 5), where they are enough for one."""
    size = plan.requested_size
    sizes = sorted({len(ranks) for ranks in plan.groups}, reverse=True)
    if plan.shared or size in sizes or size > plan.world_size - 1:  # too few ranks: _group_size_note
        return None
    made = " and ".join(map(str, sizes))
    return (f"training.group_size {size}: no group has {size} ranks, the ranks make groups of {made} "
            f"({_ranks_for_groups_of(size, plan)})")


def _ranks_for_groups_of(size: int, plan) -> str:
    """How to launch so that every group has `size` ranks."""
    if plan.n_nodes > 1:
        return f"a multiple of {size} ranks on each node, one more on the coordinator's, make groups of {size}"
    world = (plan.world_size - 1) // size * size + 1
    return f"mpiexec -n {world} makes groups of {size}"


def _direction_note(cfg) -> str | None:
    """A loss maximized or an accuracy minimized is most likely a slip of the objective's key."""
    o = cfg.objective
    name = o.metric.lower()
    expected = "minimize" if "loss" in name or "error" in name else \
        "maximize" if "accuracy" in name or "auc" in name else None
    if o.pareto or expected is None or o.direction == expected:
        return None
    best = "highest" if o.direction == "maximize" else "lowest"
    return (f"objective: {o.direction} {o.metric}: the search takes its {best} value as the best (did you mean "
            f"{expected}?)")


def _unread_mode_keys_note(cfg) -> str | None:
    """Keys of `training` the file gives that no trial's mode reads (kappa under downpour, any of
    them on groups of one rank): as searched they are refused, given once they only do nothing."""
    from .config import MODE_KEYS, mode_key_unread

    given = _training_given(cfg) - set(cfg.space.names)
    unread = {key: mode_key_unread(key, cfg.training, cfg.space) for key in MODE_KEYS if key in given}
    unread = {key: why for key, why in unread.items() if why is not None}
    if cfg.objective.kind != "model" or not unread:
        return None
    return _change_nothing(list(unread), next(iter(unread.values())))  # one reason for all: group size, or modes


def _training_given(cfg) -> set[str]:
    """The keys the file's `training` gives (its defaults left out)."""
    raw = cfg.raw.get("training")
    return set(raw) if isinstance(raw, dict) else set()


def _change_nothing(keys: list[str], why: str) -> str:
    """The note of mode keys that no one reads, and why."""
    they = "they change" if len(keys) > 1 else "it changes"
    return f"{', '.join(f'training.{k}' for k in keys)}: not read where {why}, so {they} nothing"


def _warmup_note(cfg) -> str | None:
    """A warm-up (from the base learning rate to the one lr_scaling gives) without a scaling, so
    with nothing to ramp up to, or as long as training, so the rate never reaches its scaled value."""
    t = cfg.training
    if cfg.objective.kind != "model" or {"warmup_epochs", "epochs", "lr_scaling"} & set(cfg.space.names):
        return None
    if not t["warmup_epochs"]:
        return None
    if t["lr_scaling"] == "none":
        return (f"training.warmup_epochs {t['warmup_epochs']:g}: ramps the learning rate up to the one "
                "training.lr_scaling gives, and lr_scaling is none, so it changes nothing")
    if t["warmup_epochs"] < t["epochs"]:
        return None
    return (f"training.warmup_epochs {t['warmup_epochs']:g} is not below training.epochs {t['epochs']}: the "
            "learning rate is still ramping up when training ends")


def _training_metric_note(cfg) -> str | None:
    """A model judged by a metric of its training data (accuracy, loss) is most likely a slip
    for the validation one: it rewards models that memorise."""
    o = cfg.objective
    if o.kind != "model" or o.pareto or o.metric.startswith("val_") or o.metric not in ("loss", *o.metrics):
        return None
    return (f"objective: {o.direction} {o.metric}: a metric of the training data, which rewards a model that "
            f"memorises it (val_{o.metric} judges the model on the validation data)")


# Keras losses of a regression, whose continuous labels an accuracy counts as exact matches only
REGRESSION_LOSSES = ("mse", "mae", "mape", "msle", "mean_squared_error", "mean_absolute_error",
                     "mean_absolute_percentage_error", "mean_squared_logarithmic_error", "huber", "log_cosh")


def _accuracy_of_a_regression_note(cfg) -> str | None:
    """An accuracy under a regression loss is nearly always 0: most likely a metric copied from a classifier."""
    o = cfg.objective
    if o.kind != "model" or str(o.loss).lower() not in REGRESSION_LOSSES:
        return None
    named = [m for m in (o.metric, *o.metrics) if "accuracy" in str(m).lower()]
    if not named:
        return None
    return (f"objective: {named[0]} under loss {o.loss}: an accuracy counts exact matches of continuous labels, "
            "nearly always none (a regression is judged by val_loss or val_mae)")


def _yes_no_note(cfg) -> str | None:
    """YAML 1.1 (PyYAML's) reads a bare yes, no, on or off as a boolean, a surprise in a choice."""
    if not cfg.yes_no_words:
        return None
    first, more = cfg.yes_no_words[0], len(cfg.yes_no_words) - 1
    word = first.rpartition(": ")[2]
    return (f"{first} is read as the boolean {word.lower() in ('yes', 'on')}"
            f"{f' (and {more} more such value' + ('s' if more > 1 else '') + ')' if more else ''}: YAML reads a bare "
            f"yes, no, on or off as a boolean; quote it ('{word}') where you mean the text")


def _initial_points_note(cfg) -> str | None:
    s = cfg.search
    if s.algorithm == "evolution" and s.population >= s.trials:
        return (f"search.population {s.population} is not below search.trials {s.trials}: evolution draws at random "
                "until the population is full, so every trial is a random one")
    if s.algorithm != "bayesian" or s.initial_points < s.trials:
        return None
    return (f"search.initial_points {s.initial_points} is not below search.trials {s.trials}: every trial is one "
            "of the initial design's points and the model never suggests one")


def _more_trials_than_points_note(cfg) -> str | None:
    """A discrete space with fewer distinct points than trials: the searchers never repeat a point
    while one is left, so the rest repeat, and a user who did not count should hear of it first."""
    points = distinct_points(cfg.space)
    if points is None or points >= cfg.search.trials:
        return None
    extra = cfg.search.trials - points
    return (f"search.trials {cfg.search.trials} is more than the {points} distinct points of the space: "
            f"{view.counted(extra, 'trial')} will repeat a point already tried")


def _make_link(cfg, comm, plan):
    """How the coordinator reaches its groups: over MPI, or one group in this same process."""
    from . import transport

    if not plan.shared:
        return transport.MPITransport(comm, plan, interrupt=raise_if_interrupted)
    from .group import run_task
    from .objective import TrialRunner

    runner = TrialRunner(cfg)
    returned: list[float] = []  # when the previous result went back to the coordinator

    def run_here(group: int, task, send):
        wait = time.perf_counter() - returned[0] if returned else None
        mine, start, end = run_task(runner, task, None, send)
        result = mine.reported(task.trial, start, end, wait)
        returned[:] = [time.perf_counter()]
        return result

    return transport.InProcessTransport(run_here)


def _make_searcher(cfg, link):
    """Several groups: suggestions are computed ahead in a background thread, so that no group
    waits for a surrogate fit. One group: suggested on demand, so that a sequential search is
    exactly reproducible. MPIOPT_PREFETCH=0 asks on demand with any number of groups."""
    from .search import RungModel, Searcher, make_searcher
    from .transport import coordinator_has_a_core

    ahead = link.n_groups > 1 and _env.get("MPIOPT_PREFETCH") != "0"

    def make() -> Searcher:
        return make_searcher(cfg.space, cfg.search, prefetch=link.n_groups if ahead else 0,
                             goals=max(1, len(cfg.objective.pareto)), own_core=coordinator_has_a_core())

    if cfg.search.scheduler not in ("asha", "hyperband"):
        return make()
    # BOHB's rule: the model is fitted on the highest rung with enough results to be ready
    return RungModel(make, cfg.space, top=int(cfg.training["epochs"]), enough=cfg.search.initial_points,
                     seed=cfg.search.seed)


def _make_scheduler(cfg):
    from .scheduler import make_scheduler

    s = cfg.search
    return make_scheduler(s.scheduler, epochs=int(cfg.training["epochs"]), min_epochs=s.min_epochs,
                          reduction_factor=s.reduction_factor, pausable=cfg.objective.kind == "model")


def _run_coordinator(cfg, searcher, link, run_dir, journal: _Journal):
    """Run the search (resumed from its `journal`) to its end; whatever happens, the
    results table is written and the run directory closed (or discarded: `Summary.discard`).
    Returns the coordinator's summary."""
    from .coordinator import Coordinator

    coordinator = Coordinator(cfg, searcher, link, run_dir, journal.trials, scheduler=_make_scheduler(cfg),
                              history=journal.events)
    summary = None
    try:
        summary = coordinator.run()
    finally:
        searcher.close()
        if summary is not None and summary.discard:
            run_dir.discard()
        else:
            _close_run_dir(cfg, run_dir, coordinator.trials)
    return summary


def _close_run_dir(cfg, run_dir, trials) -> None:
    stopping = sys.exc_info()[1]  # the error that stops the search, if one does (called from `finally`)
    try:
        run_dir.write_results(trials.values(), cfg.space.names, live=False, goals=cfg.objective.pareto,
                              merit=(cfg.objective.metric, cfg.objective.direction))
    except OSError as exc:  # keep the original error in view; the journal has everything
        if not file_error(stopping):  # a full disk's stop line says it already
            log.error("could not write %s: %s", run_dir.path / "results.csv", exc)
    run_dir.close()


def _finish(cfg, summary, searcher, run_dir, cpu0: float, wall0: float, took_s: float) -> int:
    """The search's closing lines (why it stopped, the best trial, where the results are) and the
    coordinator's own figures in search.log; returns the exit code."""
    from .coordinator import dispatch_stats

    counts = view.by_status(summary.statuses())
    stats = logging.getLogger(STATS)
    report = searcher.report()
    if report is not None:
        stats.info("%s", report)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    n = len(summary.trials)
    ended = "finished in" if _search_complete(cfg, summary) else "stopped after"
    log.info("search %s %.1f s: %d trial%s (%s)", ended, took_s, n, "s" * (n != 1), counts)
    stats.info("%s; coordinator CPU %.1f s (%.0f%% of one core)",
               dispatch_stats(summary.dispatch_s, summary.first_wave_s), cpu, 100.0 * cpu / max(wall, 1e-9))
    code = 0
    if summary.stopped:  # after the log's last line: the console ends with why, then where
        _say_and_log(summary.stopped, error=True)
        code = summary.exit_code or 1
    best = summary.best
    on = _front_of(cfg, summary)
    if on:
        _say_and_log(f"Pareto front: {len(on)} trials ({', '.join(map(str, sorted(on)))}); "
                     f"mpiopt results {run_dir.shown} lists them")
    elif best is not None and not cfg.objective.pareto:
        _say_and_log(f"best {cfg.objective.metric} = {best.objective:.6g} at trial {best.trial}: "
                     f"{view.params_text(best.params)}")
    elif not summary.stopped:  # a search stopped early has said why
        _say_and_log(f"no trial completed; see `mpiopt results {run_dir.shown}` and trials/<id>/error.txt")
    if not summary.discard:
        _say_and_log(f"results: {run_dir.shown / 'results.csv'}")
    return code


def _search_complete(cfg, summary) -> bool:
    """Whether the search spent its budget or reached its target (not cut short by max_failures,
    the objective's misuse or the loss of every group), and kept its run directory."""
    finished = sum(t.shown_status(live=False).is_finished() for t in summary.trials.values())
    return (finished >= cfg.search.trials or summary.target_reached) and not summary.discard


def _front_of(cfg, summary) -> list[int]:
    """The trials on a Pareto search's front (none in another search)."""
    from .journal import front

    return sorted(front(list(summary.trials.values()), cfg.objective.pareto)) if cfg.objective.pareto else []


def _say_and_log(line: str, *, error: bool = False) -> None:
    """A closing line of the search: on the console (an error as `mpiopt: error: ...` on stderr),
    and in the run's search.log, where the level says it is an error."""
    if error:
        print(f"mpiopt: error: {line}", file=sys.stderr, flush=True)
    else:
        _print_out(line)
    logging.getLogger(FILE_ONLY).log(logging.ERROR if error else logging.INFO, "%s", line)


def _print_out(line: str) -> None:
    """A line of a command's outcome on stdout, which a reader may have closed (`mpiopt search
    ... | head -1`): the command still ends as it would have, its outcome being on file."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        _stdout_to_devnull()


def _stdout_to_devnull() -> None:
    """stdout's reader is gone: what is still written to it (and Python's flush at exit) goes nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


# -- train -------------------------------------------------------------------------------------
# train.yaml is written once the model passed its check, and again with the outcome: the only one a
# function that reports no steps leaves
TRAIN_OUTPUTS = ("history.csv", "best.weights.h5", "train.yaml")


def _refuse_a_finished_training(out: Path) -> None:
    """A folder that holds a training run, or a search (whose best.weights.h5 would stand for its
    best trial's to `load_model`), is not trained into."""
    from .journal import CONFIG, JOURNAL, is_live

    refuse_a_file_in_the_way(out)
    search = [name for name in (JOURNAL, CONFIG) if (out / name).exists()]
    if search:
        raise ConfigError(f"holds a search ({search[0]}); train into another --out (by default runs/<name>/train, or "
                          "DIR/train-trial-N with --from DIR)", source=str(out))
    if is_live(out):  # its train.yaml records no outcome yet
        raise ConfigError("another training is running in this directory", source=str(out))
    kept = [name for name in TRAIN_OUTPUTS if (out / name).exists()]
    if kept == ["train.yaml"] and not _completed_training(out):
        return  # failed or stopped before its first epoch: nothing to keep but what this run writes again
    if kept:
        raise ConfigError(f"already holds a training run ({', '.join(kept)}); choose another --out or remove "
                          f"{'them' if len(kept) > 1 else 'it'}",
                          source=str(out))


def _completed_training(out: Path) -> bool:
    """Whether the train.yaml in `out` records a training that completed (a function that reports
    no steps leaves nothing else)."""
    import yaml

    from .journal import TRAIN_INFO

    try:
        info = yaml.safe_load((out / TRAIN_INFO).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    outcome = info.get("outcome") if isinstance(info, dict) else None
    return isinstance(outcome, dict) and outcome.get("status") == TrialStatus.COMPLETED.value


def trial_values(run_dir: Path, which: str | None, cfg) -> tuple[int, dict[str, Any]]:
    """(number, parameters) of trial `which` (a number or 'best') of the search in `run_dir`."""
    from .analysis import goals_of, trial_params

    params, number = trial_params(run_dir, which or "best")
    goals = goals_of(run_dir)
    if goals and str(which or "best").strip().lower() == "best":
        warn_once(_pareto_best_note(run_dir, goals, f"trial {number}"))
    unknown = [k for k in params if k not in cfg.space.names]
    if unknown:
        raise ConfigError(f"--trial {number}: its parameter {unknown[0]!r} is not in {cfg.source or cfg.path} "
                          f"({', '.join(cfg.space.names)}); train with the space that ran that search")
    values = cfg.space.complete(params)
    for name in values:
        if name not in params:
            warn_once(f"--trial {number}: {name} was not searched then; it takes {values[name]!r}")
    _note_another_objective(run_dir, number, cfg)
    _note_a_trial_that_did_not_complete(run_dir, number)
    if cfg.objective.kind == "model":  # a function runs on its group's first rank, whatever the group
        _note_other_ranks(run_dir, number)
    return number, values


def _note_other_ranks(run_dir: Path, number: int) -> None:
    """A trial trained by a group of another size: the same values and seed train otherwise (each
    rank's shard, the updates' order), so the figure of merit can differ from the search's."""
    from .analysis import _trials

    ranks, here = _trials(run_dir)[number].ranks, env_size()
    if ranks is not None and ranks != here:
        warn_once(f"--trial {number}: the search trained it on {view.counted(ranks, 'rank')}, this on "
                  f"{view.counted(here, 'rank')}: its figure of merit can differ (mpiexec -n {ranks} trains it as "
                  "the search did)")


def _note_a_trial_that_did_not_complete(run_dir: Path, number: int) -> None:
    """Training a trial that the search stopped (a scheduler's pruned or paused one, a failed one)
    trains it to the end all the same: say how far the search took it."""
    from .analysis import _trials, is_live

    trial = _trials(run_dir)[number]
    status = trial.shown_status(live=is_live(run_dir)).value
    if status != "completed":
        got = f" at epoch {trial.epochs}" if trial.epochs else ""
        warn_once(f"--trial {number}: the search left it {status}{got}; this trains it to the end of its training")


def _note_another_objective(run_dir: Path, number: int, cfg) -> None:
    """Warn where the search of `run_dir` ran another objective than the one `train` trains now
    (the same file named from another folder is the same objective)."""
    from .analysis import _run_info

    info = _run_info(run_dir)
    then = info.get("objective") if isinstance(info.get("objective"), dict) else {}
    was = then.get("function") or then.get("model")
    source = info.get("source")
    now = cfg.objective.function or cfg.objective.model
    if not isinstance(was, str) or not isinstance(source, str):
        return
    if _callable_place(was, Path(source).parent) != _callable_place(now, cfg.base_dir):
        warn_once(f"--trial {number}: the search in {run_dir} ran {was}, not {now}: {now} trains with its values")


def _callable_place(spec: str, base: Path) -> tuple[str, str]:
    """`file.py:name` as (the file's full path, name) from the folder `base`; a module's as written."""
    where, _, name = spec.rpartition(":")
    return (str((base / where).resolve()) if where.endswith(".py") else where), name


def _seed_of_run(run_dir: Path, default: int) -> int:
    """The search.seed a run's trials trained with (each trial's seed derives from it and its
    number), so that `train --trial N` trains with trial N's seed."""
    from .analysis import _run_info

    seed = (_run_info(run_dir).get("search") or {}).get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else default


def parse_sets(cfg, sets: list[str], base: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """`--set NAME=VALUE` pairs into (parameters, training) over `base` (default: every
    parameter's middle); values that parameters set for `training` keys are in both."""
    from .config import TRAINING_DEFAULTS, check_trained_values, check_training_value, did_you_mean, load_value

    params = dict(cfg.space.middle() if base is None else base)
    training = {**cfg.training, **{k: v for k, v in params.items() if k in TRAINING_DEFAULTS}}
    given: set[str] = set()
    for item in sets:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name:
            raise ConfigError(f"--set: expected NAME=VALUE, got {item!r}")
        if name in given:
            raise ConfigError(f"--set {name}: given twice; give each name once")
        given.add(name)
        value = load_value(text)
        if name == "group_size":
            warn_once("--set group_size: not read by mpiopt train, which trains as one group of all its ranks "
                      "(mpiexec -n N, or --np N)")
        if name in cfg.space.names:
            p = cfg.space[name]
            value = _as_parameter_value(name, value, p)
            if name in TRAINING_DEFAULTS:  # a training key's value is checked as in the file
                training[name] = value = check_training_value(name, value, "--set", name)
            if not p.contains(value):
                if isinstance(p, Categorical):
                    raise ConfigError(f"--set {name}: {value!r} is not one of {list(p.choices)}"
                                      f"{_quote_hint(name, text, value, p.choices)}")
                warn_once(f"--set {name}={value!r} is outside the search space [{p.low}, {p.high}]; trained as given")
            params[name] = value
        elif name in TRAINING_DEFAULTS:
            _refuse_a_key_a_function_never_reads(cfg, name)
            training[name] = check_training_value(name, value, "--set", name)
        else:
            raise ConfigError(f"--set {name}: not a parameter ({', '.join(cfg.space.names)}) nor a training key"
                              f"{did_you_mean(name, cfg.space.names + list(TRAINING_DEFAULTS))}")
    params, training = _active_only(cfg, params, training, sets)
    check_trained_values(cfg.objective, training, "--set" if sets else cfg.source or str(cfg.path))
    return params, training


def _quote_hint(name: str, text: str, value: Any, choices: tuple) -> str:
    """YAML reads `1e-3` or `no` as a number or a boolean; where the choice is that text, the
    shell's quotes around --set are not YAML's."""
    text = text.strip()
    if isinstance(value, str) or text not in choices:
        return ""
    return f" (the choice {text!r} is text: quote it for YAML, --set \"{name}='{text}'\")"


def _unread_mode_keys_in_training(cfg, params: dict[str, Any], sets: list[str]) -> str | None:
    """`mpiopt train`'s note of the mode keys it is given (in the file's training or a --set) that
    its one group does not read: on one rank, or under another mode. As `check` notes them for a
    search. A searched one is no one's choice here (a trial's value, or the middle of its range)."""
    from .config import MODE_KEYS

    if cfg.objective.kind != "model":
        return None
    given = _training_given(cfg) | {item.partition("=")[0].strip() for item in sets}
    mode, ranks = cfg.training["mode"], env_size()
    unread = [key for key in MODE_KEYS if key in given and (ranks == 1 or mode not in MODE_KEYS[key])]
    if not unread:
        return None
    return _change_nothing(unread, "mpiopt train runs on 1 rank" if ranks == 1 else f"training.mode is {mode}")


def _refuse_a_key_a_function_never_reads(cfg, name: str) -> None:
    """`--set` on a training key a `function` objective never reads, refused as in its file."""
    from .config import function_training_keys, unread_training_keys

    if unread_training_keys(cfg.objective, cfg.search.scheduler, [name]):
        raise ConfigError(f"--set {name}: a training key a `function` objective never reads; it reads "
                          f"{', '.join(function_training_keys(cfg.search.scheduler))}")


def _active_only(cfg, params: dict[str, Any], training: dict[str, Any], sets: list[str]):
    """(parameters, training) with the parameters their conditions leave inactive dropped (and the
    ones the --set values make active at their middle); a --set that ends up inactive is warned of."""
    from .config import TRAINING_DEFAULTS

    active = cfg.space.complete(params)
    for name in params.keys() - active.keys():
        if any(item.partition("=")[0].strip() == name for item in sets):
            warn_once(f"--set {name}: inactive here ({cfg.space.condition_text(name)} does not hold); not passed")
        if name in TRAINING_DEFAULTS:
            training[name] = cfg.training[name]
    for name in active.keys() - params.keys():
        if name in TRAINING_DEFAULTS:
            training[name] = active[name]
    return active, training


def _as_parameter_value(name: str, value: Any, p) -> Any:
    """`value` as parameter `p` holds it: 1e2 is 100 for an integer, 3 is 3.0 for a real."""
    if isinstance(p, Categorical):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"--set {name}: expected a finite number, got {'nothing' if value is None else repr(value)}")
    if isinstance(p.middle(), int):
        if float(value).is_integer():
            return int(value)
        raise ConfigError(f"--set {name}: expected an integer, got {value!r}")
    return float(value)


def _origin_of_values(job: _Job) -> str:
    """Where `train --trial N` took its values: the trial's, but for those --set gave."""
    if job.trial is None:
        return ""
    if not job.sets:
        return f" (trial {job.trial}: its values and seed)"
    return f" (trial {job.trial}: its values and seed, {', '.join(job.sets)} as --set)"


def _train(args, job: _Job, comm, placement: str | None = None) -> int:
    """Every rank of `mpiopt train`: one group of all ranks trains the job's values once."""
    with contextlib.ExitStack() as lock:  # rank 0's lock on the folder, released as the training ends
        return _train_in_the_folder(job, comm, placement, lock)


def _train_in_the_folder(job: _Job, comm, placement: str | None, lock) -> int:
    from .group import Reporter, merge
    from .journal import TRAIN_INFO, hold_the_lock, let_go
    from .learn._engine import history_columns
    from .objective import TrialRunner, preflight
    from .transport import GroupComm
    from .trial import Task

    cfg, out, params = job.cfg, job.out, job.params
    folder = out.absolute()  # written by its absolute path: a chdir in the user's code moves nothing
    rank, size = comm.Get_rank(), comm.Get_size()
    if size > 1:
        from .transport import host_names

        agree_on_space_and_data(comm, cfg, host_names(comm))
    error = None
    if rank == 0:
        try:
            preflight(cfg, params, job.sets)  # a model that cannot train on its data: one line and exit 2, as a search
            folder.mkdir(parents=True, exist_ok=True)
            lock.callback(let_go, hold_the_lock(folder, "training", str(out)))
            (folder / "error.txt").unlink(missing_ok=True)  # an earlier failed training's
            _write_train_info(folder, cfg, params)
        except ConfigError as exc:
            error = exc
        except OSError as exc:
            error = ConfigError(f"cannot create: {exc.strerror or exc}", source=str(out))
    agree_or_raise(comm, error)
    set_rank_tag(f"[rank {rank}]" if size > 1 else "")
    if rank == 0:
        mode = f", {cfg.training['mode']}" if cfg.objective.kind == "model" else ""
        how = f"{size} ranks{mode}" if size > 1 else "1 rank"
        log.info("training %r on %s with %s%s", cfg.name, how, params, _origin_of_values(job))
        log.info("devices: %s", placement)
    runner = TrialRunner(cfg, resume_checkpoints=False, cross_validate=False)  # one model, on all the training data
    t0 = time.time()
    group = GroupComm(comm) if size > 1 else None
    steps: list[dict[str, float]] = []  # a function's reports (a model's training writes its own history.csv)

    def progress(epoch: int, row: dict[str, float]) -> None:
        log.info("epoch %d: %s", epoch, "  ".join(f"{k}={row[k]:.4g}" for k in history_columns(row) if k != "epoch"))
        steps.append(row)

    trial = job.trial or 0
    reporter = Reporter(Task(trial, params), progress, send=None) if rank == 0 else None
    outcome = None  # stays None where run raises (a full disk)
    try:
        outcome = runner.run(params, group, trial=trial, trial_dir=folder, reporter=reporter)
    except KeyboardInterrupt:  # Ctrl-C, or a batch job's end: train.yaml says how far it got
        if rank == 0:
            with contextlib.suppress(OSError):  # a full disk: the interrupt is what to say
                _write_train_info(folder, cfg, params, TrialResult(TrialStatus.INTERRUPTED,
                                                                   epochs=_epochs_so_far(folder, steps)))
        raise
    finally:
        if group is not None:
            if (outcome is None or outcome.status != TrialStatus.COMPLETED) and group.failed_peer is None:
                group.notify_failure()  # the others stop waiting for this rank
            group.close()
        if cfg.objective.kind == "function" and steps:
            _write_function_history(folder / "history.csv", steps)
    if size > 1:
        # results travel between ranks as plain data (JSON-ready dicts), as a group's do
        outcome = merge([TrialResult.from_json(d) for d in comm.allgather(outcome.to_json())])
    if rank != 0:
        return 0
    try:
        _write_train_info(folder, cfg, params, outcome)
    except OSError as exc:  # a full disk: the closing line still says how the training ended
        log.warning("%s: the outcome not recorded: %s", out / TRAIN_INFO, storage_text(exc))
    return _say_training_outcome(cfg, out, folder, outcome, runner, time.time() - t0)


def _epochs_so_far(folder: Path, steps: list[dict[str, float]]) -> int | None:
    """The epochs a stopped training finished: the rows of the history.csv a model's training
    writes as each ends (its report to this rank may come a moment later), or a function's steps."""
    try:
        rows = (folder / "history.csv").read_text("utf-8").count("\n") - 1
    except OSError:
        rows = 0
    return max(rows, len(steps)) or None


def _write_function_history(path: Path, steps: list[dict[str, float]]) -> None:
    """A function's reported steps as history.csv: a row a step, `epoch` and one column a metric."""
    import csv
    import io

    from ._files import atomic_write

    columns = list(dict.fromkeys(k for row in steps for k in row))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(steps)
    atomic_write(path, text.getvalue().encode("utf-8"))


# why a model's training ended before its epochs, as the closing line of `mpiopt train` says it
EARLY_STOPS = {"early_stopping": "stopped early: training.early_stopping", "target": "stopped early: training.target "
               "reached"}


def _say_training_outcome(cfg, out: Path, folder: Path, outcome, runner, wall_s: float) -> int:
    """Rank 0's closing line of `mpiopt train` (`out` as the user named it, `folder` the same
    absolute); returns the exit code."""
    if outcome.status == TrialStatus.COMPLETED:
        extra = ""
        tr = runner.last_training
        if tr is not None and tr.wall_s > 0:
            extra = f" ({tr.wall_s:.1f} s of them training, {tr.samples / tr.wall_s:.0f} samples/s)"
        why = EARLY_STOPS.get(tr.stopped) if tr is not None else None
        epochs = (f" after {outcome.epochs} epoch{'s' * (outcome.epochs != 1)}{f' ({why})' if why else ''},"
                  if outcome.epochs else " in")
        # a function that reports no step writes no history
        where = f"; history in {out / 'history.csv'}" if (folder / "history.csv").exists() else ""
        _print_out(f"{cfg.objective.metric} = {outcome.objective:.6g}{epochs} {wall_s:.1f} s{extra}{where}")
        return 0
    where = ""
    if outcome.detail:
        (folder / "error.txt").write_text(outcome.detail, encoding="utf-8")
        where = f" (the whole text in {out / 'error.txt'})"
    if outcome.misuse:  # data it cannot read, or a function that breaks its contract: the input's fault
        print(f"mpiopt: error: {cfg.source or cfg.path}: {cfg.objective.misuse_where(outcome.misuse_field)}: "
              f"{outcome.error}{where}", file=sys.stderr, flush=True)
        return 2
    print(f"training {outcome.status.value}: {outcome.error}{where}", file=sys.stderr, flush=True)
    return 1


def _write_train_info(out: Path, cfg, params: dict[str, Any], outcome: TrialResult | None = None) -> None:
    """What `mpiopt.load_model(out)` needs to rebuild the model: the configuration and the values;
    once the training ended, also how it ended (what a function that reports no steps leaves)."""
    from ._files import atomic_write
    from .config import dump_yaml
    from .journal import TRAIN_INFO
    from .trial import clean

    info: dict[str, Any] = {"config": cfg.resolved(), "params": params, "ranks": env_size()}
    if outcome is not None:
        ended = clean({"status": outcome.status, "objective": outcome.objective, "epochs": outcome.epochs,
                       "metrics": outcome.metrics, "error": outcome.error})
        info["outcome"] = {key: value for key, value in ended.items() if value not in (None, {})}
    text = dump_yaml(info, sort_keys=False)
    atomic_write(out / TRAIN_INFO, text.encode("utf-8"))


# -- check -------------------------------------------------------------------------------------
def cmd_check(args) -> int:
    """Validate and print the plan; under mpiexec (without --np) the plan of the real layout,
    each group's nodes included, printed once by world rank 0."""
    if env_size() > 1:
        if args.np is not None:  # as search and train: one rank count, mpiexec's
            raise ConfigError("--np: already running under mpiexec; give the rank count to mpiexec only")
        return _check_under_mpi(args)
    from .transport import library_or_why

    print("\n".join(_check_lines(args, args.np or 1, library=library_or_why())))
    return 0


def _check_under_mpi(args) -> int:
    from . import transport
    from .launch import place_devices

    comm = start_mpi()
    nodes, hosts = transport.node_layout(comm), transport.host_names(comm)
    try:
        cfg = _load(args.space, args)  # every rank reads the same file, where its node has it
    except ConfigError as exc:
        cfg = None
        _env.defer(exc)
    with starting(comm):
        agree_on_space_and_data(comm, cfg, hosts)
        placement = place_devices(comm, cfg, coordinator=0)  # every node deals its own GPUs, as the search does
    lines, error = None, None
    if comm.Get_rank() == 0:  # the preflight trains a model: once, not on every rank
        try:
            lines = _check_lines(args, comm.Get_size(), nodes, transport.library(), hosts, placement, cfg)
        except ConfigError as exc:
            error = exc
    agree_or_raise(comm, error)
    if lines is not None:
        print("\n".join(lines), flush=True)
    return 0


def _check_lines(args, n: int, nodes: tuple[int, ...] | None = None, library: str | None = None,
                 hosts: tuple[str, ...] | None = None, placement: str | None = None, cfg=None) -> list[str]:
    """What `mpiopt check` prints for `n` ranks on `nodes` (None: one node, MPI not started),
    their `hosts` named; `placement`: the devices each node dealt (under MPI), else dealt here
    as one machine of `n` ranks would; `cfg`: the configuration, where already read."""
    from . import devices, transport
    from .objective import preflight

    prepare_threads()
    cfg = _load(args.space, args) if cfg is None else cfg
    found = devices.node_devices()
    if placement is None:
        machine = f"this machine ({n} rank{'s' if n > 1 else ''})"
        placement = devices.deal(list(range(n)), found, cfg.training["ranks_per_gpu"],
                                 coordinator=0 if n > 1 else None, node=machine,
                                 source=cfg.source or str(cfg.path)).describe()
        devices.narrow(None, shared=False, devices=found)  # the preflight runs on the CPU, as the coordinator's does
    preflight(cfg)
    plan = transport.plan_groups(n, cfg.training["group_size"], nodes, hosts)
    out = Path(args.out) if args.out else Path("runs") / cfg.name
    o = cfg.objective
    what = f"function {o.function}{_function_call(o)}" if o.kind == "function" else \
        f"model {o.model} trained on {_data_text(o.data)}"
    tried = " (the model, built at the middle of the space, took a training step on its data)" \
        if o.kind == "model" else ""
    lines = [
        f"{args.space}: OK{tried}",
        f"  name        {cfg.name}",
        f"  objective   {what}; " + (f"Pareto front of {', '.join(f'{d} {m}' for m, d in o.pareto)}" if o.pareto
                                         else f"{o.direction} {o.metric}"),
        f"  parameters  {len(cfg.space)}: " + ", ".join(_describe_param(p) for p in cfg.space.params),
        f"  search      {cfg.search.algorithm}{_algorithm_settings(cfg.search, bool(cfg.objective.pareto))}"
        + f", budget {view.counted(cfg.search.trials, 'trial')}, seed {cfg.search.seed}"
        + (f", target {cfg.search.target}" if cfg.search.target is not None else ""),
        f"  scheduler   {_make_scheduler(cfg).describe()}",
        f"  training    {_training_line(cfg)}",
        f"  plan        {plan.describe()}",
    ]
    lines += _layout_lines(plan, library)
    if o.folds:
        lines.append(f"  folds       {_describe_folds(o.folds, plan)}; {_fold_cut(cfg)}")
    lines += [f"  note        {note}" for note in _plan_notes(cfg, plan)]
    state = _run_dir_state(out, cfg)
    lines.append(f"  devices     {placement}"
                 + ("; on a cluster every node deals its own GPUs the same way" if found and nodes is None else ""))
    lines.append(f"  run dir     {out} ({state})")
    return lines


def _run_dir_state(out: Path, cfg) -> str:
    """What a search of `cfg` would find in the run directory `out`; a ConfigError where it cannot write."""
    from .journal import RunDir, is_live, refuse_an_unwritable_place

    refuse_a_file_in_the_way(out)
    refuse_an_unwritable_place(out)
    run = RunDir(out)
    run.refuse_a_journal_that_is_no_file()
    if run.holds_search() and is_live(out):
        return "a search is running there now"
    if run.holds_search():
        return _held_search_state(run, cfg)
    if found := run.files_a_new_search_would_overwrite():
        return f"{found}, so it would be refused; choose another --out"
    return "stopped before its first trial (a search starts there, with or without --resume)" \
        if run.started_here() else "new"


def _held_search_state(run, cfg) -> str:
    """What a --resume without --trials would do with the search in `run`: continue it, find its
    budget spent, or be refused (a changed space; a budget below the trials it started)."""
    from .analysis import _run_info
    from .journal import CONFIG

    mismatch = run.journal_space_mismatch(_config_text(cfg))
    if mismatch is not None:
        return (f"holds another search (no readable {CONFIG}, and its trials' parameters differ: {mismatch}), so "
                "--resume would be refused; choose another --out")
    changed = run.setting_a_resume_may_not_change(_config_text(cfg))
    if changed is not None:
        return (f"holds another search: its `{changed[0]}` differs ({changed[1]}), so --resume would be refused; "
                "choose another --out")
    try:
        trials, _ = run.load()
    except ConfigError as exc:  # a journal of a newer mpiopt
        return f"holds a search whose journal this mpiopt cannot read: {exc}"
    budget = _resumed_budget(cfg, _run_info(run.path))
    finished, rerun, paused = _started(trials)
    started = finished + rerun + paused
    if budget < started:
        return (f"holds a search that started {started} trials, more than its budget of {budget}: --resume --trials "
                f"{started} or more continues it")
    if len(trials) >= budget and finished == len(trials):  # as _note_a_spent_budget judges it
        return (f"holds a finished search of {view.counted(finished, 'trial')}: --resume --trials N, N above "
                f"{finished}, runs more")
    return f"holds a search, {finished} of {budget} trials finished: --resume continues it"


def _training_line(cfg) -> str:
    """The training settings the trials read; a searched one is named, not its unused default."""
    return ", ".join(f"{k} searched" if k in cfg.space.names else f"{k}={v}"
                     for k, v in cfg.training_read().items() if v is not None or k in cfg.space.names)


def _layout_lines(plan, library: str | None) -> list[str]:
    """Each group's world ranks and nodes, the nodes, and the MPI library."""
    if plan.shared:
        return [f"  MPI         {library}"]
    lines = []
    for g, ranks in enumerate(plan.groups):
        on = plan.nodes_of(g)
        where = f" on node{'s' if len(on) > 1 else ''} {', '.join(map(str, on))}" if plan.nodes is not None else ""
        lines.append(f"              group {g}: {_world_ranks(ranks)}{where}")
    if plan.nodes is None:
        lines.append("              (one node assumed: under mpiexec, without --np, check shows the real layout)")
        return lines + [f"  MPI         {library}"]
    by_node: dict[int, list[int]] = {}
    for rank, node in enumerate(plan.nodes):
        by_node.setdefault(node, []).append(rank)
    lines.append(f"  nodes       {len(by_node)}: " + "; ".join(f"{plan.node_name(r[0])}: {_world_ranks(r)}"
                                                            for r in by_node.values()))
    lines.append(f"  MPI         {library}")
    return lines


def _world_ranks(ranks) -> str:
    return f"world rank{'s' * (len(ranks) > 1)} {_ranges(ranks)}"


def _ranges(ranks) -> str:
    """1, 2, 3, 5 as '1-3, 5'."""
    out, ranks = [], sorted(ranks)
    start = prev = ranks[0]
    for r in ranks[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(f"{start}-{prev}" if prev > start + 1 else (f"{start}, {prev}" if prev == start + 1 else str(start)))
        if r is not None:
            start = prev = r
    return ", ".join(out)


def _algorithm_settings(search, pareto: bool) -> str:
    if search.algorithm == "bayesian":
        acquisition = "EI" if pareto and search.acquisition == "gp_hedge" else search.acquisition
        return f" ({search.surrogate}, {acquisition}, {search.initial_points} initial points)" + \
            (", each hand-out on a new random weighting of the goals" if pareto else "")
    if search.algorithm == "evolution":
        return f" (population {search.population}, tournaments of {search.sample})"
    return ""


def _describe_folds(folds: int, plan) -> str:
    """`folds: 3, trained at once on sub-groups of 1, 1, 1 rank` (per group size where groups differ)."""
    from .crossval import plan_folds

    sizes = sorted({len(ranks) for ranks in plan.groups}, reverse=True)
    ways = [plan_folds(n, folds).describe() for n in sizes]
    if len(sizes) > 1:
        ways = [f"groups of {n}: {way}" for n, way in zip(sizes, ways, strict=True)]
    return f"{folds}, " + "; ".join(ways) + " (the figure of merit: the mean over the folds)"


def _fold_cut(cfg) -> str:
    """'cut by file: 2,000, 1,000 and 1,000 samples' (the data the preflight read, cached)."""
    from .learn import fold_sizes, loaded_source

    source = loaded_source(cfg.objective.data, cfg.base_dir)
    if source is None:  # the preflight read none (not reached: check always runs it)
        return "cut as the data allow"
    by, sizes = fold_sizes(source, int(cfg.objective.folds), cfg.search.seed)
    shown = [f"{n:,}" for n in sizes]
    return f"cut by {by}: {', '.join(shown[:-1])} and {shown[-1]} samples"


def _describe_param(p) -> str:
    if isinstance(p, Categorical):
        text = f"{p.name} in {list(p.choices)}"
    else:
        prior = " log" if p.prior == "log-uniform" else ""
        text = f"{p.name} in [{p.low}, {p.high}]{prior}"
    condition = ", ".join(f"{parent}={'|'.join(map(str, allowed))}" for parent, allowed in p.when)
    return f"{text} when {condition}" if condition else text


# -- results -----------------------------------------------------------------------------------
def cmd_results(args) -> int:
    import json

    from .analysis import best_trials, direction_of, goals_of, judged_column, load_results, refresh_results_csv

    if args.timeline:
        return _print_timeline(args.dir, args.format)
    df = load_results(args.dir)
    refresh_results_csv(args.dir)
    direction, metric = direction_of(args.dir)
    goals = goals_of(args.dir)
    if goals and not args.best:
        return _print_front(args, df, goals)
    if goals:
        print(f"note: {_pareto_best_note(args.dir, goals, '--best')}", file=sys.stderr)
    top = best_trials(df, direction, 1 if args.best else _top_count(args, len(df)))
    if args.best:
        top = top[top.status == "completed"]
        if top.empty:
            so_far = view.by_status(df["status"]) or "none has started"
            raise ConfigError(f"no trial has completed ({so_far})", source=args.dir)
    if args.format == "csv":
        sys.stdout.write(view.as_csv(top))
    elif args.format == "json":
        sys.stdout.write(json.dumps(view.records(top), indent=1, allow_nan=False) + "\n")
    elif args.format == "yaml":
        sys.stdout.write(view.best_yaml(args.dir, top, direction, metric) if args.best
                         else view.as_yaml(view.records(top)))
    else:
        counts = f" ({view.by_status(df['status'])})" if len(df) else ""
        print(f"{args.dir}: {view.counted(len(df), 'trial')}{counts}; {direction} {metric}"
              + (f"; the first {len(top)} shown (--top K)" if len(top) < len(df) and not args.best else ""))
        print(view.table(top, judged=judged_column(df)) if len(top) else "(no trials)")
    return 0


def _top_count(args, rows: int) -> int:
    """--top K, else the first TOP_DEFAULT in the table for people and every row for programs."""
    return args.top or (TOP_DEFAULT if args.format == "table" else rows)


def _pareto_best_note(run_dir, goals, what: str) -> str:
    from .pareto import reported_goal

    first, _ = reported_goal(goals)  # a Pareto search's configuration requires one
    return (f"a Pareto search has no single best: {what} is the best by its first goal that training reports, "
            f"{first} (`mpiopt results {run_dir}` lists the front)")


def _print_front(args, df, goals) -> int:
    """A Pareto search's results: its front by its first goal in the table; every trial, the
    front first (its `pareto` column true), in csv, json and yaml."""
    import json

    from .analysis import front_first

    every = front_first(df, goals)
    on = every[every["pareto"].eq(True)]
    top = every.head(_top_count(args, len(every)))
    if args.format == "csv":
        sys.stdout.write(view.as_csv(top))
    elif args.format == "json":
        sys.stdout.write(json.dumps(view.records(top), indent=1, allow_nan=False) + "\n")
    elif args.format == "yaml":
        sys.stdout.write(view.as_yaml(view.records(top)))
    else:
        top = on.head(_top_count(args, len(on)))
        counts = f" ({view.by_status(df['status'])})" if len(df) else ""
        print(f"{args.dir}: {view.counted(len(df), 'trial')}{counts}; Pareto front of "
              + ", ".join(f"{d} {m}" for m, d in goals) + f": {len(on)} trials"
              + (f", the first {len(top)} shown (--top)" if len(top) < len(on) else ""))
        print(view.table(top, [m for m, _ in goals]) if len(top) else "(no trial has completed)")
    return 0


def cmd_report(args) -> int:
    from .analysis import refresh_results_csv
    from .report import write_report

    page = write_report(args.dir, args.out)
    refresh_results_csv(args.dir)
    print(f"report: {page}")
    return 0


def cmd_status(args) -> int:
    from .status import status_text

    print(status_text(args.dir))
    return 0


def _print_timeline(run_dir: str, form: str) -> int:
    import json

    from .analysis import load_timeline, timeline

    stretches = load_timeline(run_dir)
    if form == "csv":
        sys.stdout.write(view.as_csv(stretches))
        return 0
    if form == "json":
        sys.stdout.write(json.dumps(view.records(stretches), indent=1, allow_nan=False) + "\n")
        return 0
    per, summary = timeline(stretches)
    if not summary:
        print(f"{run_dir}: no finished trial yet")
        return 0
    print(view.timeline_line(run_dir, summary))
    print(per.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
