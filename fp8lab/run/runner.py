"""Run the notebooks headless with papermill, from a manifest.

- Executed copies go to a run folder (``runs/<time>-<mode>/`` by default, ignored by git).
- A timeout per notebook: each notebook runs in its own process group, killed on timeout.
- Nothing outlives the run: Ctrl-C, SIGTERM and SIGHUP stop the runner cleanly (the running
  notebooks are killed, exit status 128 + the signal); the executor kills its kernel when
  it is stopped or finds the runner gone (even after a SIGKILL). A clock lock taken in a
  notebook (``fp8lab.measure.clocks.locked_clocks``) is recorded in a state file the runner names,
  and whatever ended the notebook the runner kills the lock's holder and resets it.
- A failing notebook does not stop the others; the exit status is non-zero and every
  failure is listed (notebook, cell, error).
- Parameters are validated against each notebook's ``parameters`` cell before anything
  runs: an unknown name or a value of the wrong type is an error (papermill only warns).
- The mode is ``measure`` when a GPU is present and ``replot`` otherwise; the runner
  says which it chose and why.
- ``gpus="all"`` or a list of ids: one worker per GPU, each pinned with
  ``CUDA_VISIBLE_DEVICES``, pulling notebooks from a shared queue; kernel starts are
  staggered and a kernel-port clash at start-up is retried. Executed copies go to
  ``<run>/gpu<id>/`` and each result names its GPU.
- ``cluster=``: the same notebooks as Dask tasks on several hosts (``fp8lab.run.cluster``).
- A manifest entry's ``after`` (``all``, or a list of ids listed before it) holds that
  notebook until the notebooks it names that are in this run have finished, passed or
  failed: 07 places the others' results on its roofline, so with several workers it
  must not start before them.

One notebook's manifest entry, parameters, mode, environment and execution are
:mod:`fp8lab.run.notebooks`' (the cluster's tasks use them too); this module schedules them.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import sys
import threading
import time
from pathlib import Path

from . import notebooks
from ..report import provenance, results
from .notebooks import (_STOPPER, NotebookSpec, Outcome, Stopped, UsageError, choose_mode, dependency_order,
    load_manifest, notebook_env, notebook_params, resolve_parameters, select, stop_live, waits_for)
from ..paths import repo_root


def default_run_dir(mode: str) -> Path:
    """A new folder ``runs/<time>-<mode>`` (``-2``, ``-3``... when a run started in the same
    second already has it): two runs never share executed copies, logs or run.json."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = repo_root() / "runs"
    base.mkdir(parents=True, exist_ok=True)
    for i in range(1, 1000):
        path = base / (f"{stamp}-{mode}" + (f"-{i}" if i > 1 else ""))
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"cannot make a new run folder under {base}")  # pragma: no cover


def parse_gpus(gpus) -> list[str] | None:
    """None -> None (one process, today's behaviour); "all" -> every GPU NVML sees;
    "0,1" or [0, 1] -> those ids. Ids are not checked against NVML, so fake ids let
    the multi-worker path run (and be tested) on a machine without a GPU."""
    if gpus is None:
        return None
    if isinstance(gpus, str) and gpus.strip().lower() == "all":
        n = provenance.gpu_count()
        if n == 0:
            raise UsageError("--gpus all needs an NVIDIA GPU and NVML sees none; "
                             "name the ids to use (e.g. --gpus 0,1)")
        return [str(i) for i in range(n)]
    tokens = gpus.split(",") if isinstance(gpus, str) else list(gpus)
    ids = []
    for t in tokens:
        t = str(t).strip()
        if not t.isdigit():
            raise UsageError(f"--gpus takes 'all' or non-negative integer ids like 0,1; got {t!r}")
        t = str(int(t))
        if t in ids:
            raise UsageError(f"--gpus names GPU {t} twice")
        ids.append(t)
    if not ids:
        raise UsageError("--gpus needs 'all' or at least one id (e.g. --gpus 0,1)")
    return ids


def run(only=None, params=None, mode: str = "auto", run_dir: Path | None = None,
        timeout: int | None = None, kernel: str = "python3", manifest: Path | None = None,
        progress: bool = True, echo=print, env: dict | None = None, gpus=None,
        stagger_s: float = 2.0, cluster=None, smoke: bool = False, host_lane: bool = True,
        connect_timeout: float = 30.0, gpu_slots: int | None = None, gpu_turns: bool = True) -> int:
    """Execute the selected notebooks; returns the process exit status (0 when all pass).

    ``gpus``: None runs the notebooks one after another in this process's environment;
    "all" or ids run one worker per GPU (see ``parse_gpus``), worker i starting its first
    kernel ``i * stagger_s`` seconds after worker 0.
    ``cluster``: a Dask scheduler address (``tcp://host:8786``) or ``local[:N]``: each
    notebook is one Dask task on a worker's own checkout (see ``fp8lab.run.cluster``); each
    worker chooses measure or replot for itself; ``connect_timeout``: seconds for its scheduler
    to answer.
    ``smoke``: every selected notebook in measure mode with its manifest ``smoke`` parameters
    (the smallest sweep that still touches every arm, check and figure; ``params`` override
    them), its tables and figures written into the run folder, never data/ or figures/.
    ``host_lane``: on one GPU in measure mode, host notebooks (compile-time, census) run in a
    second lane beside the GPU notebooks instead of before them.
    ``gpu_turns``: in a measure run on one GPU, GPU notebooks take turns (GPU_TURN_LANES): the
    next one starts while one measures and waits for the GPU in ``results.start_run``.
    ``gpu_slots``: how many GPU notebooks share the one GPU at a time (default 1; a smoke
    2, see SMOKE_GPU_SLOTS). More than one only with ``smoke``: notebooks that share a GPU
    time each other's kernels, so their numbers are not results, and a smoke's never are.

    Ctrl-C, SIGTERM or SIGHUP stop the run: the running notebooks are killed, their clock
    locks reset, and ``Stopped`` (a KeyboardInterrupt) is raised."""
    with _STOPPER.installed():
        _STOPPER.fired = _STOPPER.pending = None
        return _run(only=only, params=params, mode=mode, run_dir=run_dir, timeout=timeout,
                    kernel=kernel, manifest=manifest, progress=progress, echo=echo, env=env,
                    gpus=gpus, stagger_s=stagger_s, cluster=cluster, smoke=smoke,
                    host_lane=host_lane, connect_timeout=connect_timeout, gpu_slots=gpu_slots,
                    gpu_turns=gpu_turns)


#: GPU lanes of a measure run on one GPU: GPU notebooks take turns (results.take_gpu_turn), so
#: while one measures the next one starts its kernel and imports, and measures after it ends.
#: Never two on the GPU at once: the turn is taken before a notebook first touches the GPU.
GPU_TURN_LANES = 2

#: GPU notebooks a smoke runs at once on one GPU. A smoke checks the path (every arm, check
#: and figure runs and passes), never the numbers, so two notebooks may share the GPU: most of
#: a smoke notebook's time is its kernel start, imports and CUDA context, not GPU work.
SMOKE_GPU_SLOTS = 2


def _run(*, only, params, mode, run_dir, timeout, kernel, manifest, progress, echo, env, gpus,
         stagger_s, cluster, smoke, host_lane, connect_timeout, gpu_slots, gpu_turns) -> int:
    if gpu_slots is not None and (isinstance(gpu_slots, bool) or not isinstance(gpu_slots, int)
                                  or gpu_slots < 1):
        raise UsageError(f"--gpu-slots must be a whole number >= 1, got {gpu_slots!r}")
    if gpu_slots is not None and gpu_slots > 1 and not smoke:
        raise UsageError(f"--gpu-slots {gpu_slots} shares one GPU between notebooks, so each would "
                         "time the others' kernels: only a smoke (--smoke), whose numbers are "
                         "never results, may do that")
    if gpu_slots is not None and gpu_slots > 1 and (gpus is not None or cluster is not None):
        raise UsageError("--gpu-slots is for one GPU; with --gpus / --cluster each GPU runs one notebook")
    slots = gpu_slots or (SMOKE_GPU_SLOTS if smoke else 1)
    if stagger_s < 0:
        raise UsageError(f"stagger_s must be >= 0 seconds, got {stagger_s}")
    if not connect_timeout > 0:
        raise UsageError(f"--connect-timeout must be > 0 seconds, got {connect_timeout}")
    if gpus is not None and cluster is not None:
        raise UsageError("--gpus and --cluster exclude each other: on a cluster, each worker "
                         "is pinned to its GPU when it is started")
    gpu_ids = parse_gpus(gpus)
    if cluster is not None:
        from . import cluster as _cluster
        target = _cluster.parse_target(cluster)
    if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout!r}")
    all_specs = load_manifest(manifest)
    specs = select(all_specs, only)
    missing = [s for s in specs if not s.path.is_file()]
    if missing:
        raise UsageError("manifest names notebooks that do not exist: "
                         + ", ".join(str(s.path) for s in missing))
    specs = dependency_order(specs)
    if smoke:
        if cluster is not None:
            raise UsageError("--smoke runs on this machine's GPU; it does not go with --cluster")
        if mode not in ("auto", "measure"):
            raise UsageError(f"--smoke always measures; it does not go with --mode {mode}")
        if not provenance.gpu_present():
            raise UsageError("--smoke measures on a GPU and none is visible (make test runs the "
                             "CPU checks; the smoke parameters are checked there too)")
        params = smoke_pairs(specs) + list(params or [])
    per_nb = resolve_parameters(specs, params, all_specs)
    if smoke:
        chosen, why = "measure", "--smoke: every notebook measures with its smoke parameters"
    elif cluster is None:
        chosen, why = choose_mode(mode)
    else:
        if mode not in ("auto", "measure", "replot"):
            choose_mode(mode)                      # the same error as without --cluster
        chosen, why = mode, ("each worker measures when it has a GPU and redraws without"
                             if mode == "auto" else f"asked for with --mode {mode}")
    run_dir = Path(run_dir) if run_dir else default_run_dir(
        "cluster" if cluster is not None else ("smoke" if smoke else chosen))
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:          # a file where a folder must be, no permission, ...
        raise UsageError(f"--out {run_dir}: cannot make the run folder: "
                         f"{exc.strerror or exc}{f' ({exc.filename})' if exc.filename else ''}") from None
    guarded = _snapshot_outputs() if smoke else None
    if smoke:
        # A smoke run's tables and figures are for checking the path, never results:
        # they stay in the run folder (07 and the overlays read them back from there).
        # absolute: the notebooks run in notebooks/, so a relative --out would land there
        env = {**(env or {}), "FP8LAB_DATA_DIR": str(run_dir.absolute() / "data"),
               "FP8LAB_FIGURES_DIR": str(run_dir.absolute() / "figures")}
    run_id = run_dir.name
    started, t_start = provenance.utc_now(), time.time()
    echo(f"fp8lab run: mode {chosen} ({why}); {len(specs)} notebook(s); executed copies in {run_dir}")
    if cluster is None:
        logs = run_dir / "gpu<id>" if gpu_ids is not None else run_dir
        echo(f"  each notebook's sweeps report their progress as they run in {logs}/<notebook>.log")
    if chosen == "replot":
        gpu_nbs = [s.name for s in specs if s.kind == "gpu"]
        if gpu_nbs:
            echo("  replot: GPU notebooks measure nothing; they redraw their figures from "
                 f"committed data/ into {run_dir / 'figures'}: " + ", ".join(gpu_nbs))

    # one GPU, measuring for real: GPU notebooks take turns (GPU_TURN_LANES)
    turns = (chosen == "measure" and not smoke and gpu_ids is None and cluster is None and slots == 1
             and gpu_turns and sum(s.kind == "gpu" for s in specs) > 1)
    turn_lock = run_dir / ".gpu-turn"

    def prepare(spec):
        nb_env = notebook_env(spec, chosen, run_id=run_id, run_dir=run_dir, root=repo_root(), env=env)
        if turns and spec.kind == "gpu":
            nb_env[results.GPU_TURN_ENV] = str(turn_lock)
        return notebook_params(spec, per_nb[spec.name], chosen), nb_env

    outcomes: list[Outcome] = []
    if cluster is not None:
        outcomes = _cluster.run_on_cluster(specs, per_nb, target, mode=mode, run_dir=run_dir,
                                           run_id=run_id, timeout=timeout, kernel=kernel,
                                           env=env, progress=progress, echo=echo,
                                           connect_timeout=connect_timeout)
    elif gpu_ids is None and chosen == "measure" and \
            ((host_lane and len({s.kind for s in specs}) > 1) or slots > 1 or turns):
        lanes = [Lane("gpu" if i == 0 else f"gpu+{i}", lambda s: s.kind != "host", {}, run_dir)
                 for i in range(GPU_TURN_LANES if turns else slots)]
        if turns:
            echo(f"  GPU notebooks take turns: the next one starts (kernel, imports) while one measures, "
                 "and waits for the GPU until that one has ended")
        if host_lane and len({s.kind for s in specs}) > 1:
            echo("  two lanes: host notebooks run beside the GPU notebooks ("
                 + ", ".join(s.name for s in specs if s.kind == "host") + ")")
            lanes.append(Lane("host", lambda s: s.kind == "host", {}, run_dir))
        else:       # host notebooks queue with the GPU ones
            lanes = [dataclasses.replace(ln, takes=lambda s: True) for ln in lanes]
        if slots > 1:
            echo(f"  {slots} GPU notebooks at a time on the one GPU (a smoke checks the path, "
                 "not the numbers)")
        outcomes = _run_lanes(specs, prepare, lanes, timeout=timeout, kernel=kernel,
                              stagger_s=stagger_s, progress=progress, echo=echo)
        for o in outcomes:
            o.gpu = None
    elif gpu_ids is None:
        try:
            from tqdm.auto import tqdm
            bar = tqdm(specs, desc="notebooks", unit="nb", disable=not progress, file=sys.stderr)
        except ImportError:  # pragma: no cover - tqdm is a dependency
            bar = specs
        for spec in bar:
            if hasattr(bar, "set_postfix_str"):
                bar.set_postfix_str(spec.name)
            p, nb_env = prepare(spec)
            outcome = notebooks.execute_one(spec, p, run_dir, timeout=timeout, kernel=kernel, env=nb_env)
            outcomes.append(outcome)
            if hasattr(bar, "write"):
                bar.write(outcome.line())
            else:
                echo(outcome.line())
    else:
        echo(f"  {len(gpu_ids)} worker(s), one per GPU: " + ", ".join(gpu_ids)
             + f"; starts staggered by {stagger_s:g} s")
        # The ids are NVML's (--gpus all counts NVML's GPUs); CUDA reads them the same way
        # only in PCI bus order (its default is fastest first).
        lanes = [Lane(g, lambda s: True, {"CUDA_VISIBLE_DEVICES": g, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
                      run_dir / f"gpu{g}")
                 for g in gpu_ids]
        outcomes = _run_lanes(specs, prepare, lanes, timeout=timeout, kernel=kernel,
                              stagger_s=stagger_s, progress=progress, echo=echo)
    if turns:
        for o in outcomes:
            try:
                o.gpu_wait_s = round(float(Path(f"{turn_lock}.{o.name}.wait").read_text()), 1)
            except (OSError, ValueError):
                pass
    rows = []
    for o in outcomes:
        r = dataclasses.asdict(o) | {"output": str(o.output)}
        if r["gpu_wait_s"] is None:
            r.pop("gpu_wait_s")
        # run.json keeps its earlier shape: the fields of the other runners only where used.
        if gpu_ids is None:
            r.pop("gpu"), r.pop("attempts")
        if cluster is None:
            r.pop("device"), r.pop("worker"), r.pop("mode")
        rows.append(r)
    summary = {"run_id": run_id, "mode": chosen, "why": why, **({"smoke": True} if smoke else {}),
               **run_record(started, t_start, time.time()),
               **({"gpus": gpu_ids} if gpu_ids is not None else {}),
               **({"cluster": str(cluster)} if cluster is not None else {}),
               "notebooks": rows}
    (run_dir / "run.json").write_text(json.dumps(summary, indent=2) + "\n")
    failed = [o for o in outcomes if not o.ok]
    touched = _changed_outputs(guarded) if guarded is not None else []
    if touched:
        summary["touched_committed_outputs"] = touched[:50]
        (run_dir / "run.json").write_text(json.dumps(summary, indent=2) + "\n")
    echo(f"{len(outcomes) - len(failed)} passed, {len(failed)} failed  (mode {chosen}; {run_dir})")
    if touched:
        echo(f"FAIL  the smoke run changed {len(touched)} file(s) under data/ or figures/ "
             f"(it must write only into {run_dir}): " + ", ".join(touched[:5]))
        return 1
    for o in failed:
        echo("  " + o.line())
    return 1 if failed else 0


def _snapshot_outputs() -> dict:
    """(size, mtime) of every file under data/ and figures/: a smoke run must leave them be."""
    from ..paths import data_dir, figures_dir
    snap = {}
    for root in (data_dir(), figures_dir()):
        if root.is_dir():
            for p in root.rglob("*"):
                if p.is_file():
                    st = p.stat()
                    snap[str(p)] = (st.st_size, st.st_mtime_ns)
    return snap


def _changed_outputs(before: dict) -> list[str]:
    after = _snapshot_outputs()
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


def smoke_pairs(specs: list[NotebookSpec]) -> list[tuple[str, object]]:
    """The manifest's smoke parameters as ``-p NN:NAME VALUE`` pairs."""
    return [(f"{s.id}:{k}", v) for s in specs for k, v in s.smoke.items()]


@dataclasses.dataclass(frozen=True)
class Lane:
    """One worker of a run: which notebooks it takes, the environment it adds, where its
    executed copies go. ``--gpus``: one lane per GPU taking any notebook; one GPU in
    measure mode: a GPU lane and a host lane."""
    name: str
    takes: object          # NotebookSpec -> bool
    env: dict
    out_dir: Path


def run_record(started: str, t_start: float, t_end: float) -> dict:
    """What a run's wall time depends on, for run.json: when, where (host cores, GPUs by
    name), which commit, and the wall times. Under ``make run`` the Makefile passes the
    epoch seconds at which make started, finished installing and finished prebuilding
    (FP8LAB_MAKE_TIMES="t0 t_setup t_build"), whether it installed anything
    (FP8LAB_MAKE_FRESH_INSTALL=1) and the prebuild's JSON summary (FP8LAB_BUILD_SUMMARY), so
    the record covers the install and the kernel builds too (``fp8lab.report.walltimes``)."""
    rec = {"started": started, "wall_s": round(t_end - t_start, 1),
           "host": provenance.host_info(), "gpu_names": provenance.nvml_gpu_names(),
           "git": {k: v for k, v in provenance.git_info().items() if k in ("commit", "dirty", "source")},
           "sources": provenance.source_hash()}
    raw = os.environ.get("FP8LAB_MAKE_TIMES", "").split()
    try:
        t0, t_setup, t_build = (float(x) for x in raw)
    except ValueError:
        return rec
    if t0 <= t_setup <= t_build <= t_start:
        rec["make"] = {"setup_s": round(t_setup - t0, 1), "build_s": round(t_build - t_setup, 1),
                       "total_s": round(t_end - t0, 1),
                       "fresh_install": os.environ.get("FP8LAB_MAKE_FRESH_INSTALL") == "1"}
        summary = os.environ.get("FP8LAB_BUILD_SUMMARY")
        if summary and Path(summary).is_file() and Path(summary).stat().st_size:
            try:
                rec["make"]["build"] = json.loads(Path(summary).read_text())
            except json.JSONDecodeError:
                rec["make"]["build"] = {"error": f"{summary} is not JSON"}
    return rec


def _run_lanes(specs, prepare, lanes, *, timeout, kernel, stagger_s,
               progress, echo) -> list[Outcome]:
    """One thread per lane taking notebooks in order from a shared list; outcomes in
    manifest order. A lane takes the first pending notebook it accepts whose ``after``
    notebooks have all finished; GPU notebooks on a GPU lane see exactly one GPU through
    CUDA_VISIBLE_DEVICES."""
    pending = list(specs)
    deps = {s.name: set(waits_for(s, specs)) for s in specs}
    done: dict[str, Outcome] = {}
    lock = threading.Lock()
    changed = threading.Condition(lock)          # a notebook finished (or a worker stopped)
    stop = threading.Event()
    try:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(specs), desc="notebooks", unit="nb", disable=not progress,
                   file=sys.stderr)
    except ImportError:  # pragma: no cover - tqdm is a dependency
        bar = None
    errors: list[BaseException] = []

    def take(lane: Lane):
        """The lane's next notebook whose dependencies have finished; None when none is left."""
        with changed:
            while not stop.is_set():
                mine = [s for s in pending if lane.takes(s)]
                if not mine:
                    return None
                for s in mine:
                    if deps[s.name] <= done.keys():
                        pending.remove(s)
                        return s
                changed.wait(0.2)
            return None

    def worker(i: int, lane: Lane) -> None:
        # Kernels started in the same instant race for the same free ports.
        if stop.wait(i * stagger_s):
            return
        while not stop.is_set():
            spec = take(lane)
            if spec is None or stop.is_set():
                return
            p, nb_env = prepare(spec)
            nb_env = {**nb_env, **lane.env}
            try:
                o = notebooks.execute_with_retries(spec, p, lane.out_dir, timeout=timeout, kernel=kernel,
                                         env=nb_env, pause_s=stagger_s, stop=stop)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                with changed:
                    errors.append(exc)
                    stop.set()
                    changed.notify_all()
                return
            o.gpu = lane.name
            with changed:
                done[spec.name] = o
                changed.notify_all()
                if bar is not None:
                    bar.update(1)
                    bar.write(o.line())
                else:  # pragma: no cover
                    echo(o.line())

    threads = [threading.Thread(target=worker, args=(i, lane), name=f"fp8lab-{lane.name}", daemon=True)
               for i, lane in enumerate(lanes)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except BaseException:
        stop.set()
        for line in stop_live():
            sys.stderr.write(f"fp8lab: {line}\n")
        # The workers see their notebooks end and release them too; one may have started a
        # notebook in the instant before it saw ``stop``: wait for them, then stop again.
        t_end = time.monotonic() + 60
        for t in threads:
            t.join(max(0.0, t_end - time.monotonic()))
        for line in stop_live():
            sys.stderr.write(f"fp8lab: {line}\n")
        raise
    finally:
        if bar is not None:
            bar.close()
    if errors:
        raise errors[0]
    return [done[s.name] for s in specs if s.name in done]
