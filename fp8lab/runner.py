"""Run the notebooks headless with papermill, from a manifest.

- Executed copies go to a run folder (``runs/<time>-<mode>/`` by default, ignored by git).
- A timeout per notebook: each notebook runs in its own process group, killed on timeout.
- Nothing outlives the run: Ctrl-C, SIGTERM and SIGHUP stop the runner cleanly (the running
  notebooks are killed, exit status 128 + the signal); the executor kills its kernel when
  it is stopped or finds the runner gone (even after a SIGKILL). A clock lock taken in a
  notebook (``fp8lab.clocks.locked_clocks``) is recorded in a state file the runner names,
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
- ``cluster=``: the same notebooks as Dask tasks on several hosts (``fp8lab.cluster``).
- A manifest entry's ``after`` (``all``, or a list of ids listed before it) holds that
  notebook until the notebooks it names that are in this run have finished, passed or
  failed: 07 places the others' results on its roofline, so with several workers it
  must not start before them.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import datetime as _dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from . import clocks, provenance, results
from . import progress as progress_lines
from .paths import notebooks_dir, repo_root

KINDS = {
    "host": "runs for real on any machine (compile-time, emulators, SASS, arithmetic)",
    "gpu": "measures on a GPU; without one, redraws its figures from committed data/",
}


class UsageError(ValueError):
    """Bad command line: unknown notebook or parameter, bad value."""


class Stopped(KeyboardInterrupt):
    """The runner was told to stop (Ctrl-C, SIGTERM, SIGHUP); the running notebooks have
    been killed and their clock locks reset by the time it leaves ``run``. A
    KeyboardInterrupt, so no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


class _Stopper:
    """Ctrl-C, SIGTERM and SIGHUP raise ``Stopped`` in the main thread, once: a second
    signal while the notebooks are being stopped is noted, not raised, so the cleanup
    (kill, reset the clock locks) is not cut short. Inside ``critical()`` a signal waits
    until the block is done. A signal the caller ignores (``nohup``: SIGHUP) stays ignored."""
    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self.fired: int | None = None
        self.pending: int | None = None
        self.depth = 0

    def _handler(self, signum, frame):
        if self.fired is not None:
            sys.stderr.write(f"fp8lab: got {signal.Signals(signum).name} again: still stopping the "
                             "notebooks and resetting their clock locks\n")
            return
        if self.depth:
            self.pending = signum
            return
        self.fired = signum
        raise Stopped(signum)

    @contextlib.contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        prev = {}
        for sig in self.SIGNALS:
            h = signal.getsignal(sig)
            if h == signal.SIG_IGN:
                continue
            prev[sig] = h
            signal.signal(sig, self._handler)
        try:
            yield self
        finally:
            for sig, h in prev.items():
                signal.signal(sig, h if h is not None else signal.SIG_DFL)

    @contextlib.contextmanager
    def critical(self):
        """Defer a stop signal until the block is done (main thread only; elsewhere no
        Python signal handler ever runs)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if not self.depth and self.pending is not None and self.fired is None:
                self.fired, self.pending = self.pending, None
                raise Stopped(self.fired)


_STOPPER = _Stopper()


@dataclasses.dataclass(frozen=True)
class NotebookSpec:
    id: str
    name: str
    title: str
    kind: str
    claims: tuple
    timeout: int
    path: Path
    after: tuple = ()    # names of notebooks (listed earlier) it waits for, when they run too
    smoke: dict = dataclasses.field(default_factory=dict, compare=False, hash=False)  # --smoke parameters

    @property
    def label(self) -> str:
        return self.name


def manifest_path() -> Path:
    return notebooks_dir() / "manifest.yaml"


def load_manifest(path: Path | None = None) -> list[NotebookSpec]:
    path = Path(path or manifest_path())
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict) or not isinstance(raw.get("notebooks"), list):
        raise ValueError(f"{path}: expected a mapping with a 'notebooks' list")
    specs, seen = [], set()
    for i, e in enumerate(raw["notebooks"]):
        missing = {"id", "name", "title", "kind"} - set(e)
        if missing:
            raise ValueError(f"{path}: entry {i} lacks {sorted(missing)}")
        if e["kind"] not in KINDS:
            raise ValueError(f"{path}: {e['name']}: kind must be one of {list(KINDS)}, got {e['kind']!r}")
        nid = str(e["id"])
        if nid in seen or e["name"] in seen:
            raise ValueError(f"{path}: duplicate notebook {nid} / {e['name']}")
        seen |= {nid, e["name"]}
        nb = path.parent / f"{e['name']}.ipynb"
        smoke = e.get("smoke") or {}
        if not isinstance(smoke, dict):
            raise ValueError(f"{path}: {e['name']}: smoke must be a mapping of parameters, got {smoke!r}")
        specs.append(NotebookSpec(id=nid, name=e["name"], title=e["title"], kind=e["kind"],
                                  claims=tuple(e.get("claims", ())),
                                  timeout=int(e.get("timeout", 1800)), path=nb,
                                  after=_parse_after(path, e, specs), smoke=dict(smoke)))
    return specs


def _parse_after(path: Path, entry: dict, earlier: list[NotebookSpec]) -> tuple:
    """``after: all`` -> every notebook listed before this one; ``after: [ids]`` -> those.
    Only earlier entries may be named, so the manifest order is always a valid order
    (the one-process runner needs nothing more) and no cycle can be written."""
    raw = entry.get("after")
    if raw is None:
        return ()
    name = entry["name"]
    if isinstance(raw, str) and raw.strip().lower() == "all":
        return tuple(s.name for s in earlier)
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{path}: {name}: after must be 'all' or a non-empty list of notebook "
                         f"ids listed before it, got {raw!r}")
    known = {s.id: s.name for s in earlier} | {s.name: s.name for s in earlier}
    out = []
    for token in raw:
        t = str(token)
        if t in (str(entry["id"]), name):
            raise ValueError(f"{path}: {name}: after names the notebook itself")
        if t not in known:
            raise ValueError(f"{path}: {name}: after names {t!r}, which is not a notebook listed "
                             f"before it; ids listed before it: "
                             f"{', '.join(s.id for s in earlier) or 'none'}")
        if known[t] not in out:
            out.append(known[t])
    return tuple(out)


def waits_for(spec: NotebookSpec, specs: list[NotebookSpec]) -> list[str]:
    """The notebooks of this run that ``spec`` waits for (its ``after`` that were selected)."""
    names = {s.name for s in specs}
    return [n for n in spec.after if n in names]


def dependency_order(specs: list[NotebookSpec]) -> list[NotebookSpec]:
    """``specs`` in their given order, except that a notebook moves behind the notebooks
    it waits for (``--only 07,03`` runs 03 first)."""
    out, placed, pending = [], set(), list(specs)
    while pending:
        for s in pending:
            if all(d in placed for d in waits_for(s, specs)):
                out.append(s)
                placed.add(s.name)
                pending.remove(s)
                break
        else:  # pragma: no cover - load_manifest only accepts earlier entries
            raise ValueError("cycle in the manifest's after: " + ", ".join(s.name for s in pending))
    return out


def select(specs: list[NotebookSpec], only) -> list[NotebookSpec]:
    """Keep the notebooks named in ``only`` (ids like '01' or names like '01_formats')."""
    if only is None or (not isinstance(only, str) and len(only) == 0):
        return list(specs)
    wanted = []
    for token in ([only] if isinstance(only, str) else only):
        for t in str(token).split(","):
            t = t.strip()
            if t:
                wanted.append(t)
    if not wanted:
        raise UsageError(f"--only names no notebook (got {only!r}); give ids or names like 01,02")
    out = []
    for t in wanted:
        match = [s for s in specs if t in (s.id, s.name, s.path.name)]
        if not match:
            known = ", ".join(f"{s.id} ({s.name})" for s in specs)
            raise UsageError(f"unknown notebook {t!r}; the manifest has: {known}")
        if match[0] not in out:
            out.append(match[0])
    return out


def notebook_parameters(path: Path) -> dict:
    """Name -> {default, type} from the notebook's cell tagged 'parameters'.

    Parsed with Python's own parser rather than papermill's line regex, which drops a
    parameter whose comment holds an '=' (and then papermill only warns)."""
    import nbformat
    if not path.is_file():
        raise UsageError(f"notebook {path} does not exist")
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if not cells:
        raise UsageError(f"{path.name} has no cell tagged 'parameters'")
    src = cells[0].source
    try:
        tree = ast.parse(src)
    except SyntaxError as exc:
        raise UsageError(f"{path.name}: the parameters cell is not valid Python: {exc}") from None
    params = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, annotation = node.targets[0].id, None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, annotation = node.target.id, ast.unparse(node.annotation)
        else:
            continue
        default_src = ast.get_source_segment(src, node.value)
        params[name] = {"default": default_src, "type": _declared_type(annotation, default_src)}
    return params


def _declared_type(annotation, default_src):
    """The parameter's type: its annotation if it has one, else the type of its default
    when that is a literal (``n = 3`` -> int). None when it cannot be told."""
    if annotation and annotation in _TYPES:
        return annotation
    try:
        value = ast.literal_eval(default_src)
    except (ValueError, SyntaxError, TypeError):
        return None
    return None if value is None else type(value).__name__


def parse_value(text: str):
    """A -p value as YAML: 4096 -> int, 1e-3 -> float, [1, 2] -> list, true -> bool."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"cannot parse parameter value {text!r}: {exc}") from None


_TYPES = {"int": (int,), "float": (float, int), "str": (str,), "bool": (bool,),
          "list": (list,), "dict": (dict,)}


def _type_ok(declared: str | None, value) -> bool:
    if declared in (None, "None") or declared not in _TYPES:
        return True
    if declared in ("int", "float") and isinstance(value, bool):
        return False
    if declared == "float" and value is None:
        return True
    return isinstance(value, _TYPES[declared])


def resolve_parameters(specs: list[NotebookSpec], pairs, manifest: list[NotebookSpec] | None = None
                       ) -> dict[str, dict]:
    """Per notebook, the parameters to inject. ``NAME VALUE`` goes to every selected
    notebook and each must declare NAME; ``NN:NAME VALUE`` goes to notebook NN only, which
    must be selected (``manifest``, all the notebooks, lets the error tell an unselected
    notebook from an unknown one)."""
    declared = {s.name: notebook_parameters(s.path) for s in specs}
    per_nb: dict[str, dict] = {s.name: {} for s in specs}
    for name, text in pairs or []:
        value = parse_value(text) if isinstance(text, str) else text
        if ":" in name:
            nb_token, pname = name.split(":", 1)
            try:
                targets = select(specs, [nb_token])
            except UsageError:
                known = select(manifest, [nb_token]) if manifest else None   # unknown: raises
                if not known:
                    raise
                raise UsageError(f"-p {name}: notebook {known[0].id} ({known[0].name}) is not "
                                 "in this run; selected: "
                                 + ", ".join(f"{s.id} ({s.name})" for s in specs)) from None
        else:
            pname, targets = name, specs
        if pname == "mode":
            raise UsageError("choose the mode with --mode, not -p mode")
        for s in targets:
            known = declared[s.name]
            if pname not in known:
                raise UsageError(f"unknown parameter {pname!r} for {s.name}; its parameters "
                                 f"cell declares: {', '.join(sorted(known)) or 'nothing'}")
            if not _type_ok(known[pname]["type"], value):
                raise UsageError(f"parameter {pname!r} of {s.name} expects {known[pname]['type']}, "
                                 f"got {type(value).__name__} {value!r}")
            per_nb[s.name][pname] = value
    return per_nb


def choose_mode(requested: str = "auto") -> tuple[str, str]:
    """(mode, why)."""
    if requested not in ("auto", "measure", "replot"):
        raise UsageError(f"--mode must be auto, measure or replot, got {requested!r}")
    if requested == "replot":
        return "replot", "asked for with --mode replot"
    present = provenance.gpu_present()
    if requested == "measure":
        if not present:
            raise UsageError("--mode measure needs an NVIDIA GPU and none is visible")
        return "measure", "asked for with --mode measure"
    if present:
        return "measure", f"{provenance.gpu_count()} NVIDIA GPU(s) visible"
    return "replot", "no NVIDIA GPU found"


@dataclasses.dataclass
class Outcome:
    name: str
    ok: bool
    seconds: float
    output: Path
    cell: int | None = None
    error: str | None = None
    gpu: str | None = None       # the CUDA_VISIBLE_DEVICES id it ran on (None: no --gpus)
    attempts: int = 1            # > 1 when a kernel-port clash was retried
    device: str | None = None    # --cluster: the device key of the worker that ran it
    worker: str | None = None    # --cluster: that worker's name (or its host's)
    mode: str | None = None      # --cluster: the mode that worker chose (measure | replot)
    gpu_wait_s: float | None = None  # taking turns on one GPU: seconds it waited for its turn

    def line(self) -> str:
        on = f" on gpu {self.gpu}" if self.gpu is not None else ""
        if self.device is not None:
            how = ", ".join(x for x in (self.worker, self.mode) if x)
            on = f" on {self.device}" + (f" ({how})" if how else "")
        tries = f", {self.attempts} attempts" if self.attempts > 1 else ""
        if self.ok:
            return f"ok    {self.name}{on}  ({self.seconds:.1f} s{tries})"
        where = (f"cell {self.cell} of the executed copy" if self.cell is not None
                 else "before any cell")
        return (f"FAIL  {self.name}{on}  {where}: {self.error}  ({self.seconds:.1f} s{tries}; "
                f"executed copy {self.output})")


# Live executor processes and their clock-lock state files, so an interrupted run can stop
# them all: they run in their own sessions and so never see the terminal's Ctrl-C.
_LIVE: dict = {}
_LIVE_LOCK = threading.Lock()
_RELEASE_LOCK = threading.Lock()


def release_locks(state: Path) -> list[str]:
    """Kill the holder of every clock lock recorded in ``state`` and reset the lock (see
    ``fp8lab.clocks.release_recorded``); one line per lock. Nothing recorded: nothing done
    (NVML is not even loaded)."""
    with _RELEASE_LOCK, _STOPPER.critical():
        try:
            return clocks.release_recorded(state)
        except Exception as exc:  # noqa: BLE001 - say so; never hide a lock left behind
            return [f"could not release the clock locks recorded in {state}: "
                    f"{type(exc).__name__}: {exc}; reset them by hand: nvidia-smi -rgc -rmc"]


def stop_live() -> list[str]:
    """Kill every running notebook and release its clock locks (an interrupted run)."""
    with _LIVE_LOCK:
        live = list(_LIVE.items())
    lines = []
    for proc, state in live:
        _kill_group(proc)
        lines += release_locks(state)
    return lines


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def execute_one(spec: NotebookSpec, params: dict, out_dir: Path, *, timeout: int | None = None,
                kernel: str = "python3", env: dict | None = None) -> Outcome:
    """Execute one notebook in its own process group, enforcing the timeout."""
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / spec.path.name
    result_file = out_dir / f".{spec.name}.result.json"
    result_file.unlink(missing_ok=True)
    limit = timeout or spec.timeout
    # The notebook records every clock lock it takes here; the runner resets what is left.
    state = out_dir / f".{spec.name}.clocks.json"
    state.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "fp8lab._execute", "--input", str(spec.path), "--output",
           str(output), "--cwd", str(spec.path.parent), "--kernel", kernel,
           "--params", json.dumps(params), "--result", str(result_file),
           "--parent-pid", str(os.getpid())]
    log_path = out_dir / f"{spec.name}.log"
    log_path.write_text("")
    # Appending (O_APPEND): the kernel appends its sweeps' progress lines to the same file
    # ($FP8LAB_PROGRESS_LOG, fp8lab.progress) while the executor writes to it through this.
    log = open(log_path, "a")
    t0 = time.monotonic()
    timed_out = interrupted = False
    released: list[str] = []
    proc = None
    try:
        try:
            with _STOPPER.critical():     # a stop signal right here would leave it unlisted
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True,
                                        env={**os.environ, **(env or {}), clocks.STATE_ENV: str(state),
                                             progress_lines.LOG_ENV: str(log_path)})
                with _LIVE_LOCK:
                    _LIVE[proc] = state
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
        except BaseException:
            interrupted = True
            if proc is not None:
                _kill_group(proc)
            raise
    finally:
        # Whatever ended the notebook (its end, a timeout, a stop signal, a crash), no clock
        # lock it took outlives it: the kernel's own resets never run when it is killed.
        released = release_locks(state)
        with _LIVE_LOCK:
            _LIVE.pop(proc, None)
        for line in released:
            log.write(f"fp8lab runner: {line}\n")
            if interrupted:
                sys.stderr.write(f"fp8lab: {spec.name}: {line}\n")
        log.close()
    dt = time.monotonic() - t0
    note = ("; " + "; ".join(released)) if released else ""
    if timed_out:
        return Outcome(spec.name, False, dt, output, cell=running_cell(output),
                       error=f"timed out after {limit} s (killed){note}")
    if result_file.is_file():
        r = json.loads(result_file.read_text())
        result_file.unlink()
        return Outcome(spec.name, r["ok"], dt, output, cell=r.get("cell"),
                       error=(r.get("error") or "") + note if not r["ok"] else None)
    tail = log_path.read_text()[-800:].strip()
    return Outcome(spec.name, False, dt, output,
                   error=f"executor exited with status {proc.returncode}: {tail}")


def running_cell(executed: Path) -> int | None:
    """The index of the cell that was running when the notebook was killed: papermill saves
    the executed copy as each cell starts, with that cell's status 'running'."""
    import nbformat
    try:
        nb = nbformat.read(executed, as_version=4)
    except Exception:  # noqa: BLE001 - no copy yet (killed before the first cell), or torn
        return None
    status = [(c.get("metadata", {}).get("papermill") or {}).get("status") for c in nb.cells]
    for i, st in enumerate(status):
        if st == "running":
            return i
    # papermill saves the copy on a timer too, so a kill can land between saves: then the cell
    # that was running is the first code cell after the last one the copy shows completed
    done = [i for i, st in enumerate(status) if st == "completed"]
    if not done:
        return None
    later = [i for i in range(done[-1] + 1, len(nb.cells)) if nb.cells[i].cell_type == "code"]
    return later[0] if later else done[-1]


def execute_with_retries(spec: NotebookSpec, params: dict, out_dir: Path, *, timeout=None,
                         kernel: str = "python3", env: dict | None = None, pause_s: float = 0.5,
                         stop: threading.Event | None = None) -> Outcome:
    """``execute_one``, run again (up to PORT_RETRIES times) when the kernel could not start
    because another kernel took its port; ``attempts`` says how many runs it took."""
    for attempt in range(1, PORT_RETRIES + 2):
        o = execute_one(spec, params, out_dir, timeout=timeout, kernel=kernel, env=env)
        if not is_port_clash(o) or attempt == PORT_RETRIES + 1 or (stop is not None and stop.is_set()):
            break
        if stop is not None:
            stop.wait(max(pause_s, 0.5))
        else:
            time.sleep(max(pause_s, 0.5))
    o.attempts = attempt
    return o


def notebook_env(spec: NotebookSpec, mode: str, *, run_id: str, run_dir: Path, root: Path,
                 env: dict | None = None) -> dict:
    """The environment one notebook's executor gets on top of the runner's own."""
    nb_env = {"FP8LAB_MODE": mode, "FP8LAB_RUN_ID": run_id, "FP8LAB_ROOT": str(root),
              "PYTHONUNBUFFERED": "1", **(env or {})}
    if mode == "replot" and spec.kind == "gpu" and "FP8LAB_FIGURES_DIR" not in {**os.environ, **nb_env}:
        # Committed figures stay the measured ones: a redraw goes to the run folder
        # (unless the user named a figures folder).
        nb_env["FP8LAB_FIGURES_DIR"] = str(run_dir / "figures")
    return nb_env


def notebook_params(spec: NotebookSpec, params: dict, mode: str) -> dict:
    """The parameters to inject: the user's, plus the chosen mode where the notebook declares it."""
    p = dict(params)
    if "mode" in notebook_parameters(spec.path):
        p["mode"] = mode
    return p


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


_PORT_CLASH = re.compile(r"address already in use|kernel died before replying|zmqerror", re.I)
PORT_RETRIES = 2


def is_port_clash(o: Outcome) -> bool:
    """A kernel that could not start because another kernel took its ZMQ port: it failed
    before any cell ran, so running it again is safe."""
    return (not o.ok) and o.cell is None and bool(_PORT_CLASH.search(o.error or ""))


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
    notebook is one Dask task on a worker's own checkout (see ``fp8lab.cluster``); each
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
        env = {**(env or {}), "FP8LAB_DATA_DIR": str(run_dir / "data"),
               "FP8LAB_FIGURES_DIR": str(run_dir / "figures")}
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
            outcome = execute_one(spec, p, run_dir, timeout=timeout, kernel=kernel, env=nb_env)
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
    from .paths import data_dir, figures_dir
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
    the record covers the install and the kernel builds too (``fp8lab.walltimes``)."""
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
                o = execute_with_retries(spec, p, lane.out_dir, timeout=timeout, kernel=kernel,
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
