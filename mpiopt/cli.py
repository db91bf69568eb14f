"""The `mpiopt` command line (SPEC §3).

Exit codes: 0 the command did its work (failed trials included); 2 the input is wrong; 1 anything
else. A wrong input is one line on stderr, printed by rank 0 only, and every rank exits.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from . import __version__, _env
from ._errors import ConfigError, MpioptError
from ._log import FILE_ONLY, STATS, log_to_file, set_rank_tag, setup_logging, stop_logging_to

log = logging.getLogger("mpiopt.cli")
ABORT_GRACE_S = 1.0  # how long a failing rank lets its last words reach mpiexec before MPI_Abort


# -- ranks, before MPI is initialised ----------------------------------------------------------
def env_rank() -> int:
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MPI_LOCALRANKID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def env_size() -> int:
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


def _say(message: str) -> None:
    """One line on stderr, from rank 0 only."""
    if env_rank() == 0:
        print(f"mpiopt: error: {message}", file=sys.stderr, flush=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, rank 0 only
        raise ConfigError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
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
    c = sub.add_parser("check", help="validate a search space and print the plan; run nothing")
    c.add_argument("space", metavar="SPACE.yaml")
    c.add_argument("--np", type=int, metavar="N", help="plan for N ranks (default: this job's size)")
    c.add_argument("--out", metavar="DIR")
    t = sub.add_parser("train", help="train one model with given values on all ranks")
    t.add_argument("space", metavar="SPACE.yaml")
    t.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="sets")
    t.add_argument("--trial", metavar="N", help="start from trial N's values (or 'best') of the search --from DIR")
    t.add_argument("--from", metavar="DIR", dest="from_dir", help="the run directory of --trial (default runs/<name>)")
    t.add_argument("--out", metavar="DIR",
                   help="where history.csv goes (default runs/<name>/train, or DIR/train-trial-N with --trial)")
    t.add_argument("--np", type=int, metavar="N", help="launch N ranks with this environment's mpiexec")
    t.add_argument("--trace", action="store_true", help="write a Chrome trace (trace.json) of every rank")
    r = sub.add_parser("results", help="print the best trials of a run directory")
    r.add_argument("dir", metavar="DIR")
    r.add_argument("--top", type=int, default=10, metavar="K")
    r.add_argument("--format", choices=("table", "csv", "json", "yaml"), default="table")
    r.add_argument("--best", action="store_true",
                   help="the best trial only; with --format yaml, its parameters and training settings")
    r.add_argument("--timeline", action="store_true", help="group utilization and dispatch latency")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        _env.check()
        if args.command is None:
            raise ConfigError("missing COMMAND: one of search, check, train, results (see `mpiopt --help`)")
        for name in ("trials", "np", "top"):
            value = getattr(args, name, None)
            if value is not None and value < 1:
                raise ConfigError(f"--{name}: expected a positive integer, got {value}")
        if getattr(args, "seed", None) is not None and args.seed < 0:
            raise ConfigError(f"--seed: expected an integer >= 0, got {args.seed}")
        setup_logging()
        job = _prepare_job(args) if args.command in ("search", "train") else None
        if getattr(args, "np", None) and args.command in ("search", "train"):
            return _relaunch(argv, args.np)
    except ConfigError as exc:
        _say(str(exc))
        return 2
    if args.command == "results":
        return _guard(lambda: cmd_results(args))
    if args.command == "check":
        return _guard(lambda: cmd_check(args))
    _prepare_threads()
    return _mpi_main(args, job)


def _guard(fn) -> int:
    try:
        return fn()
    except ConfigError as exc:
        _say(str(exc))
        return 2
    except BrokenPipeError:  # `mpiopt results DIR | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _relaunch(argv: list[str], n: int) -> int:
    """`--np N`: run this same command under mpiexec with N ranks."""
    if env_size() > 1:
        raise ConfigError("--np: already running under mpiexec; give the rank count to mpiexec only")
    here = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(here) if here.exists() else shutil.which("mpiexec") or shutil.which("mpirun")
    if mpiexec is None:
        raise ConfigError("--np: no mpiexec found (pip install mpich, or put an MPI's mpiexec on PATH)")
    rest: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--np":
            skip = True
            continue
        if a.startswith("--np="):
            continue
        rest.append(a)
    cmd = [mpiexec, "-n", str(n), sys.executable, "-m", "mpiopt", *rest]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(mpiexec, cmd)
    return 1  # not reached


def _prepare_threads() -> None:
    """Several ranks on a node: one intra-op and one inter-op thread each, or they fight for cores."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # the CUDA probe on CPU nodes is noise
    if env_size() > 1:
        threads = str(_env.get("MPIOPT_THREADS"))
        for var in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
            os.environ.setdefault(var, threads)


def _load(path: str, args) -> Any:
    from .config import load_config

    cfg = load_config(path)
    if getattr(args, "trace", False):
        from dataclasses import replace

        cfg = replace(cfg, training={**cfg.training, "trace": True})
    changes = {}
    if getattr(args, "trials", None) is not None:
        changes["trials"] = args.trials
    if getattr(args, "seed", None) is not None:
        changes["seed"] = args.seed
    return cfg.with_search(**changes) if changes else cfg


@dataclass(frozen=True)
class _Job:
    """A search or training job as read and checked before MPI starts (on every rank alike)."""

    cfg: Any
    out: Path
    params: dict[str, Any] = field(default_factory=dict)  # train: the values to train with


def _prepare_job(args) -> _Job:
    """Read the configuration and refuse a bad output folder before MPI and TensorFlow start.

    Every rank reads the same files, so each reaches the same verdict on its own and a refusal
    takes a second instead of the time every rank needs to start and import TensorFlow."""
    cfg = _load(args.space, args)
    if args.command == "train":
        base, out = cfg.space.middle(), Path("runs") / cfg.name / "train"
        if args.trial is not None or args.from_dir is not None:
            from_dir = Path(args.from_dir) if args.from_dir else Path("runs") / cfg.name
            number, base = trial_values(from_dir, args.trial, cfg)
            out = from_dir / f"train-trial-{number}"
        params, training = parse_sets(cfg, args.sets, base)
        cfg = replace(cfg, training=training)
        out = Path(args.out) if args.out else out
        _refuse_a_finished_training(out)
        return _Job(cfg, out, params)
    from .journal import RunDir

    out = Path(args.out) if args.out else Path("runs") / cfg.name
    RunDir(out).check(resume=args.resume, config_text=_config_text(cfg))
    return _Job(cfg, out)


def _config_text(cfg) -> str:
    import yaml

    return yaml.safe_dump(cfg.resolved(), sort_keys=False)


TRAIN_OUTPUTS = ("history.csv", "best.weights.h5")


def _refuse_a_finished_training(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError("exists and is not a directory", source=str(out))
    kept = [name for name in TRAIN_OUTPUTS if (out / name).exists()]
    if kept:
        raise ConfigError(f"already holds a training run ({', '.join(kept)}); choose another --out or remove them",
                          source=str(out))


def _mpi_main(args, job: _Job) -> int:
    """search and train: every rank runs this."""
    from . import transport

    try:
        comm = transport.world()
    except Exception as exc:  # no MPI library at all
        _say(f"cannot initialise MPI: {exc}")
        return 1
    rank, size = comm.Get_rank(), comm.Get_size()
    if size > 1:
        log.debug("waits: %s", transport.configure_waits(comm))

    def _terminate(signum, frame):  # a batch system's SIGTERM: stop as cleanly as Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        placement = _place_devices(comm, job.cfg, coordinator=0 if args.command == "search" and size > 1 else None)
        if args.command == "search":
            return _search(args, job, comm, rank, size, placement)
        return _train(args, job, comm, rank, size, placement)
    except ConfigError as exc:  # raised on every rank alike (agreed before)
        if rank == 0:
            print(f"mpiopt: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        if rank == 0:
            print("mpiopt: interrupted; the journal is intact: continue with --resume", file=sys.stderr, flush=True)
        return 130
    except Exception as exc:  # a bug, a full disk, a lost file: never leave the other ranks blocked
        log.debug("traceback of the internal error", exc_info=True)
        import traceback

        tb = traceback.extract_tb(exc.__traceback__)
        where = f" ({tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
        print(f"mpiopt: internal error on world rank {rank}{where}: {type(exc).__name__}: {exc}; stopping the "
              "whole job (finished trials are in the journal: fix the cause, then --resume; "
              "MPIOPT_LOG_LEVEL=DEBUG shows the traceback)", file=sys.stderr, flush=True)
        logging.shutdown()
        if size > 1:
            # mpiexec's I/O forwarder may still hold the line above in its pipe: an immediate
            # Abort can make hydra drop it (seen once in CI under load), leaving the user with
            # no reason for the failure. A pause costs nothing in a job that is ending anyway.
            time.sleep(ABORT_GRACE_S)
            comm.Abort(1)
        return 1


def _place_devices(comm, cfg, *, coordinator: int | None) -> str | None:
    """Give this rank its GPU before TensorFlow starts (SPEC §2, GPUs); the job's plan on rank 0.

    The ranks of each node are dealt its GPUs; a bad device list or more ranks than places on a
    node is a ConfigError on every rank. Returns, on world rank 0, one line per node."""
    from . import devices, transport

    rank, size = comm.Get_rank(), comm.Get_size()
    plan, found, error = None, (), None
    try:
        found = devices.node_devices()
    except ConfigError as exc:
        error = exc
    seen = transport.share_with_node(comm, found) if size > 1 else {rank: found}
    first = next(iter(seen))
    if error is None:
        try:
            plan = devices.plan_node(seen, cfg.training["ranks_per_gpu"], coordinator=coordinator,
                                     node=f"the node of world rank {first}" if size > 1 else "this machine",
                                     source=cfg.source or str(cfg.path))
        except ConfigError as exc:
            error = exc
    _agree_or_raise(comm, error)
    devices.narrow(plan.assigned[rank], shared=plan.shares_devices(), devices=found)
    lines = transport.gather_text(comm, plan.describe() if rank == first else None) if size > 1 \
        else [plan.describe()]
    return "; ".join(line for line in lines if line) if rank == 0 else None


def _agree_or_raise(comm, error: ConfigError | None) -> None:
    from .transport import agree

    message = agree(comm, str(error) if error else None) if comm.Get_size() > 1 else (str(error) if error else None)
    if message:
        raise ConfigError(message)


def _search(args, job: _Job, comm, rank: int, size: int, placement: str | None = None) -> int:
    from . import transport
    from .journal import RunDir

    cfg, out = job.cfg, job.out
    plan = transport.plan_groups(size, cfg.training["group_size"])
    run_dir, trials, error = None, {}, None
    if rank == 0:
        set_rank_tag("[coordinator]" if size > 1 else "")
        try:
            # the directory is claimed before the preflight starts TensorFlow: a refusal is quick
            run_dir = RunDir(out)
            run_dir.open(resume=args.resume, config_text=_config_text(cfg))
            from .objective import preflight

            preflight(cfg)
            trials, problems = run_dir.load()
            for msg in problems:
                log.warning(msg)
        except ConfigError as exc:
            error = exc
            if run_dir is not None and args.resume:
                run_dir.close()
            elif run_dir is not None:
                run_dir.abandon()
    else:
        # a group rank loads the objective now, while the coordinator checks and opens the run
        # directory, so that every group is ready when the first trials go out
        from .objective import TrialRunner

        try:
            runner = TrialRunner(cfg)
        except ConfigError as exc:
            error = exc
    _agree_or_raise(comm, error)

    if rank == 0:
        return _coordinate(cfg, plan, comm, run_dir, trials, placement)
    from .group import serve

    g = plan.group_of(rank)
    group_comm = transport.group_comm(comm, plan.groups[g])
    set_rank_tag(f"[group {g} rank {group_comm.Get_rank()}]")
    serve(transport.GroupChannel(comm, group_comm), lambda: runner)
    return 0


def _coordinate(cfg, plan, comm, run_dir, trials, placement: str | None = None) -> int:
    """The coordinator's part of a search, its lines also kept in the run's search.log."""
    from .journal import LOG

    logfile = log_to_file(run_dir.path / LOG)
    try:
        return _run_search(cfg, plan, comm, run_dir, trials, placement)
    finally:
        stop_logging_to(logfile)


def _say_and_log(line: str, *, error: bool = False) -> None:
    """A closing line of the search: on the console, and in the run's search.log."""
    print(line, file=sys.stderr if error else sys.stdout, flush=True)
    log.log(logging.ERROR if error else logging.INFO, "%s", line, extra=FILE_ONLY)


def _run_search(cfg, plan, comm, run_dir, trials, placement: str | None) -> int:
    from . import transport
    from .coordinator import Coordinator, dispatch_stats
    from .group import result_of, run_task
    from .objective import TrialRunner
    from .search import make_searcher

    log.info("search %r: %s; %d trials, %s search; run directory %s", cfg.name, plan.describe(), cfg.search.trials,
             cfg.search.algorithm, run_dir.path)
    if placement:
        log.info("devices: %s", placement)
    if plan.shared and cfg.training["group_size"] > 1:
        log.warning("training.group_size %d needs at least %d ranks (a coordinator and one group); with 1 process "
                    "each trial trains on 1 rank (mpiexec -n %d, or --np %d)", cfg.training["group_size"],
                    cfg.training["group_size"] + 1, cfg.training["group_size"] + 1, cfg.training["group_size"] + 1)
    elif not plan.shared and plan.requested_size > plan.world_size - 1:
        log.warning("training.group_size %d is more than the %d ranks beside the coordinator: one group of %d",
                    plan.requested_size, plan.world_size - 1, plan.world_size - 1)
    if plan.shared:
        runner = TrialRunner(cfg)

        returned: list[float] = []  # when the previous result went back to the coordinator

        def run_here(group: int, task: dict) -> dict:
            wait = time.perf_counter() - returned[0] if returned else None
            outcome, start, end = run_task(runner, task, None)
            result = result_of(task, outcome, start, end, wait)
            returned[:] = [time.perf_counter()]
            return result

        link = transport.InProcessTransport(run_here)
    else:
        link = transport.MPITransport(comm, plan)
    # several groups: suggestions are computed ahead in a background thread, so that no group
    # waits for a surrogate fit; one group: suggested on demand, so that a sequential search is
    # exactly reproducible. MPIOPT_PREFETCH=0 asks on demand with any number of groups (the
    # synchronous baseline of bench/coordinator.py).
    ahead = link.n_groups > 1 and _env.get("MPIOPT_PREFETCH") != "0"
    searcher = make_searcher(cfg.space, cfg.search, prefetch=link.n_groups if ahead else 0)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    coordinator = Coordinator(cfg, searcher, link, run_dir, trials)
    try:
        summary = coordinator.run()
    finally:
        if hasattr(searcher, "close"):
            searcher.close()
        try:
            run_dir.write_results(coordinator.trials.values(), cfg.space.names, live=False)
        except OSError as exc:  # keep the original error in view; the journal has everything
            log.error("could not write %s: %s", run_dir.path / "results.csv", exc)
        run_dir.close()
    code = 0
    if summary.stopped:
        _say_and_log(f"mpiopt: error: {summary.stopped}", error=True)
        code = summary.exit_code or 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(summary.counts().items()))
    stats = logging.getLogger(STATS)
    if hasattr(searcher, "report"):
        stats.info("%s", searcher.report())
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    log.info("search finished in %.1f s: %d trials (%s)", summary.wall_s, len(summary.trials), counts)
    stats.info("%s; coordinator CPU %.1f s (%.0f%% of one core)", dispatch_stats(summary.dispatch_s), cpu,
               100.0 * cpu / max(wall, 1e-9))
    best = summary.best
    if best is not None:
        params = ", ".join(f"{k}={v!r}" for k, v in best.params.items())
        _say_and_log(f"best {cfg.objective.metric} = {best.objective:.6g} at trial {best.trial}: {params}")
    else:
        _say_and_log(f"no trial completed; see `mpiopt results {run_dir.path}` and trials/<id>/error.txt")
    _say_and_log(f"results: {run_dir.path / 'results.csv'}")
    if summary.retired:
        # their ranks are stuck in user code and would keep the job from ending: the journal and
        # table are complete, so end the MPI job here
        log.warning("group%s %s never came back; ending the MPI job (MPI_Abort) to free their ranks",
                    "s" if len(summary.retired) > 1 else "", ", ".join(map(str, summary.retired)))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(0.2)  # let mpiexec forward those lines before the abort tears its pipes down
        comm.Abort(code)
    return code


def trial_values(run_dir: Path, which: str | None, cfg) -> tuple[int, dict[str, Any]]:
    """(number, parameters) of trial `which` (a number or 'best') of the search in `run_dir`."""
    from .analysis import trial_params

    params, number = trial_params(run_dir, which or "best")
    unknown = [k for k in params if k not in cfg.space.names]
    if unknown:
        raise ConfigError(f"--trial {number}: its parameter {unknown[0]!r} is not in {cfg.source or cfg.path} "
                          f"({', '.join(cfg.space.names)}); train with the space that ran that search")
    for name in cfg.space.names:
        if name not in params:
            _warn_once(f"--trial {number}: {name} was not searched then; it takes {cfg.space.middle()[name]!r}")
    return number, {**cfg.space.middle(), **params}


def parse_sets(cfg, sets: list[str], base: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """`--set NAME=VALUE` pairs into (parameters, training) over `base` (default: every
    parameter's middle); values that parameters set for `training` keys are in both."""
    from .config import TRAINING_DEFAULTS, check_training_value, did_you_mean, load_value

    params = dict(cfg.space.middle() if base is None else base)
    training = {**cfg.training, **{k: v for k, v in params.items() if k in TRAINING_DEFAULTS}}
    for item in sets:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name:
            raise ConfigError(f"--set: expected NAME=VALUE, got {item!r}")
        value = load_value(text)
        if name in cfg.space.names:
            p = cfg.space[name]
            value = _as_parameter_value(name, value, p)
            if not p.contains(value):
                if hasattr(p, "choices"):
                    raise ConfigError(f"--set {name}: {value!r} is not one of {list(p.choices)}")
                _warn_once(f"--set {name}={value!r} is outside the search space [{p.low}, {p.high}]; trained as given")
            params[name] = value
            if name in TRAINING_DEFAULTS:
                training[name] = value
        elif name in TRAINING_DEFAULTS:
            training[name] = check_training_value(name, value, "--set", name)
        else:
            raise ConfigError(f"--set {name}: not a parameter ({', '.join(cfg.space.names)}) nor a training key"
                              f"{did_you_mean(name, cfg.space.names + list(TRAINING_DEFAULTS))}")
    return params, training


def _as_parameter_value(name: str, value: Any, p) -> Any:
    """`value` as parameter `p` holds it: 1e2 is 100 for an integer, 3 is 3.0 for a real."""
    if hasattr(p, "choices"):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigError(f"--set {name}: expected a number, got {value!r}")
    if isinstance(p.middle(), int):
        if float(value).is_integer():
            return int(value)
        raise ConfigError(f"--set {name}: expected an integer, got {value!r}")
    return float(value)


def _warn_once(message: str) -> None:
    """A warning before MPI starts, when every rank says the same: printed by rank 0 only."""
    if env_rank() == 0:
        log.warning("%s", message)


def _train(args, job: _Job, comm, rank: int, size: int, placement: str | None = None) -> int:
    from dataclasses import asdict

    from .group import merge
    from .objective import TrialRunner
    from .transport import GroupComm

    cfg, out, params = job.cfg, job.out, job.params
    error = None
    if rank == 0:
        try:
            out.mkdir(parents=True, exist_ok=True)
            _write_train_info(out, cfg, params)
        except OSError as exc:
            error = ConfigError(f"cannot create: {exc.strerror or exc}", source=str(out))
    _agree_or_raise(comm, error)
    set_rank_tag(f"[rank {rank}]" if size > 1 else "")
    if rank == 0:
        how = f"{size} ranks, {cfg.training['mode']}" if size > 1 else "1 rank"
        log.info("training %r on %s with %s", cfg.name, how, params)
        log.info("devices: %s", placement)
    runner = TrialRunner(cfg, resume_checkpoints=False)
    t0 = time.time()
    group = GroupComm(comm) if size > 1 else None
    on_epoch = (lambda e, row: log.info("epoch %d: %s", e, "  ".join(
        f"{k}={v:.4g}" for k, v in row.items() if k != "epoch"))) if rank == 0 else None
    try:
        outcome = runner.run(params, group, trial_dir=out, on_epoch=on_epoch)
        if group is not None and outcome.status != "completed" and group.failed_peer is None:
            group.notify_failure()  # the others stop waiting for this rank
    finally:
        if group is not None:
            group.close()
    if size > 1:
        outcome = merge(comm.allgather(asdict(outcome)))
    if rank == 0:
        if outcome.status == "completed":
            extra = ""
            tr = runner.last_training
            if tr is not None and tr.wall_s > 0:
                extra = f", {tr.samples / tr.wall_s:.0f} samples/s"
            print(f"{cfg.objective.metric} = {outcome.objective:.6g} after {outcome.epochs or 1} epoch(s), "
                  f"{time.time() - t0:.1f} s{extra}; history in {out / 'history.csv'}", flush=True)
        else:
            where = ""
            if outcome.detail:
                (out / "error.txt").write_text(outcome.detail, encoding="utf-8")
                where = f" (the whole text in {out / 'error.txt'})"
            print(f"training {outcome.status}: {outcome.error}{where}", file=sys.stderr, flush=True)
            return 1
    return 0


def _write_train_info(out: Path, cfg, params: dict[str, Any]) -> None:
    """What `mpiopt.load_model(out)` needs to rebuild the model: the configuration and the values."""
    import yaml

    from ._files import atomic_write
    from .journal import TRAIN_INFO

    text = yaml.safe_dump({"config": cfg.resolved(), "params": params}, sort_keys=False)
    atomic_write(out / TRAIN_INFO, text.encode("utf-8"))


def cmd_check(args) -> int:
    from . import devices, transport
    from .journal import RunDir
    from .objective import preflight

    _prepare_threads()
    cfg = _load(args.space, args)
    n = args.np or env_size()
    found = devices.node_devices()
    placement = devices.deal(list(range(n)), found, cfg.training["ranks_per_gpu"], coordinator=0 if n > 1 else None,
                             node=f"this machine ({n} rank{'s' if n > 1 else ''})", source=cfg.source or str(cfg.path))
    devices.narrow(None, shared=False, devices=found)  # the preflight runs on the CPU, as the coordinator's does
    preflight(cfg)
    plan = transport.plan_groups(n, cfg.training["group_size"])
    out = Path(args.out) if args.out else Path("runs") / cfg.name
    o = cfg.objective
    what = f"function {o.function}" + (" (params, comm) on every rank of its group" if o.takes_comm else "") \
        if o.kind == "function" else f"model {o.model} trained on {o.data}"
    lines = [
        f"{args.space}: OK",
        f"  name        {cfg.name}",
        f"  objective   {what}; {o.direction} {o.metric}",
        f"  parameters  {len(cfg.space)}: " + ", ".join(_describe_param(p) for p in cfg.space.params),
        f"  search      {cfg.search.algorithm}" + (f" ({cfg.search.surrogate}, {cfg.search.acquisition}, "
                                                  f"{cfg.search.initial_points} initial points)"
                                                  if cfg.search.algorithm == "bayesian" else "")
        + f", budget {cfg.search.trials} trials, seed {cfg.search.seed}"
        + (f", target {cfg.search.target}" if cfg.search.target is not None else ""),
        f"  training    " + ", ".join(f"{k}={v}" for k, v in cfg.training.items() if v is not None),
        f"  plan        {plan.describe()}",
    ]
    if not plan.shared:
        for g, ranks in enumerate(plan.groups):
            lines.append(f"              group {g}: world ranks {', '.join(map(str, ranks))}")
        if plan.requested_size > n - 1:
            lines.append(f"  note        group_size {plan.requested_size} > {n - 1} ranks available: one smaller group")
    state = "holds a search (use --resume)" if RunDir(out).holds_search() else "new"
    lines.append(f"  devices     {placement.describe()}"
                 + ("; on a cluster every node deals its own GPUs the same way" if found else ""))
    lines.append(f"  run dir     {out} ({state})")
    print("\n".join(lines))
    return 0


def _describe_param(p) -> str:
    if hasattr(p, "choices"):
        return f"{p.name} in {list(p.choices)}"
    prior = " log" if p.prior == "log-uniform" else ""
    return f"{p.name} in [{p.low}, {p.high}]{prior}"


def _records(df) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts: floats exact (pandas' to_json keeps 15 digits), times ISO 8601,
    missing values null."""
    import math

    def value(v):
        if type(v).__name__ == "NaTType":
            return None
        if hasattr(v, "isoformat"):
            return v.isoformat()
        if hasattr(v, "item"):
            v = v.item()
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return None
        try:
            if v != v:  # pandas' NA and NaT
                return None
        except TypeError:
            return None
        return v

    return [{k: value(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


def cmd_results(args) -> int:
    import json

    from .analysis import best_trials, direction_of, load_results

    df = load_results(args.dir)
    if args.timeline:
        from .analysis import timeline

        per, summary = timeline(df)
        if not summary:
            print(f"{args.dir}: no finished trial yet")
            return 0
        line = (f"{args.dir}: {summary['groups']} groups, {summary['trials']} trials, active "
                f"{summary['active_s']:.1f} s; group utilization {summary['utilization']:.3f}")
        if "dispatch_p50_ms" in summary:
            line += f"; dispatch latency p50 {summary['dispatch_p50_ms']:.2f} ms, p99 {summary['dispatch_p99_ms']:.2f} ms"
        if summary.get("sent_ahead"):
            line += (f"; {summary['sent_ahead']} trials sent ahead (p50 {summary['ahead_p50_ms']:.1f} ms before the "
                     f"group's previous result)")
        if "first_wave_ms" in summary:
            line += f"; every group's first trial out within {summary['first_wave_ms']:.2f} ms"
        if "wait_p50_ms" in summary:
            line += f"; group wait p50 {summary['wait_p50_ms']:.2f} ms, p99 {summary['wait_p99_ms']:.2f} ms"
        print(line)
        print(per.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        return 0
    direction, metric = direction_of(args.dir)
    top = best_trials(df, direction, 1 if args.best else args.top)
    if args.best:
        top = top[top.status == "completed"]
        if top.empty:
            raise ConfigError("no completed trial yet", source=args.dir)
    if args.format == "csv":
        sys.stdout.write(top.to_csv(index=False))
    elif args.format == "json":
        sys.stdout.write(json.dumps(_records(top), indent=1, allow_nan=False) + "\n")
    elif args.format == "yaml":
        sys.stdout.write(_best_yaml(args.dir, top, direction, metric) if args.best else _yaml(_records(top)))
    else:
        counts = df["status"].value_counts().to_dict()
        print(f"{args.dir}: {len(df)} trials (" + ", ".join(f"{n} {s}" for s, n in counts.items())
              + f"); {direction} {metric}")
        print(_table_view(top) if len(top) else "(no trials)")
    return 0


ERROR_WIDTH = 70  # characters of the error column in the table view (the whole line: --format csv)


def _table_view(top) -> str:
    cols = ["trial", "status", "objective"] + [c for c in top.columns if c.startswith("params_")] + \
        ["epochs", "duration_s", "group"]
    view = top[[c for c in cols if c in top.columns]].rename(columns=lambda c: c.removeprefix("params_"))
    if "error" in top and top["error"].notna().any():
        errors = top["error"].fillna("").astype(str)
        view = view.assign(error=errors.map(lambda e: e if len(e) <= ERROR_WIDTH else e[:ERROR_WIDTH - 3] + "..."))
    return view.to_string(index=False, justify="left")


def _yaml(value) -> str:
    import yaml

    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True)


def _best_yaml(run_dir: str, top, direction: str, metric: str) -> str:
    """The best trial as YAML: its parameters and the training settings it ran with."""
    from .analysis import run_config, trial_params

    number = int(top.iloc[0]["trial"])
    params, _ = trial_params(run_dir, number)
    cfg = run_config(run_dir)
    head = f"# the best trial of {run_dir}: {direction} {metric} = {float(top.iloc[0]['objective']):.6g}\n"
    return head + _yaml({"trial": number, metric: float(top.iloc[0]["objective"]), "parameters": params,
                         "training": cfg.trial_training(params)})


if __name__ == "__main__":
    sys.exit(main())
