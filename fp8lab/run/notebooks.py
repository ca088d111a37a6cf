"""The notebooks of a run, one at a time: the manifest, each notebook's parameters, the mode,
its environment, and its execution in a child process (papermill, ``fp8lab.run._execute``).

The local runner (:mod:`fp8lab.run.runner`: lanes, GPUs, smoke) and the cluster's tasks
(:mod:`fp8lab.run.cluster`) both run notebooks through these; neither imports the other's way of
scheduling them.

- The manifest (``notebooks/manifest.yaml``): :class:`NotebookSpec` per entry, ``after``
  dependencies (:func:`waits_for`, :func:`dependency_order`), ``--only`` (:func:`select`).
- Parameters are validated against each notebook's ``parameters`` cell before anything runs
  (:func:`resolve_parameters`): an unknown name or a value of the wrong type is an error
  (papermill only warns).
- :func:`choose_mode`: ``measure`` when a GPU is present, ``replot`` otherwise, and why.
- :func:`execute_one`: a notebook in its own process group, killed on timeout; a clock lock it
  took is reset whatever ended it; :func:`execute_with_retries` retries a kernel-port clash at
  start-up. Ctrl-C, SIGTERM and SIGHUP raise :class:`Stopped` once (``_STOPPER``), after the
  running notebooks have been killed (:func:`stop_live`).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
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

from ..measure import clocks, progress as progress_lines
from ..report import provenance
from ..paths import notebooks_dir


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
    ``fp8lab.measure.clocks.release_recorded``); one line per lock. Nothing recorded: nothing done
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
    cmd = [sys.executable, "-m", "fp8lab.run._execute", "--input", str(spec.path), "--output",
           str(output), "--cwd", str(spec.path.parent), "--kernel", kernel,
           "--params", json.dumps(params), "--result", str(result_file),
           "--parent-pid", str(os.getpid())]
    log_path = out_dir / f"{spec.name}.log"
    log_path.write_text("")
    # Appending (O_APPEND): the kernel appends its sweeps' progress lines to the same file
    # ($FP8LAB_PROGRESS_LOG, fp8lab.measure.progress) while the executor writes to it through this.
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
        # (unless the user named a figures folder). Absolute: the notebook runs in notebooks/,
        # where a relative --out would put the figures.
        nb_env["FP8LAB_FIGURES_DIR"] = str(Path(run_dir).absolute() / "figures")
    return nb_env


def notebook_params(spec: NotebookSpec, params: dict, mode: str) -> dict:
    """The parameters to inject: the user's, plus the chosen mode where the notebook declares it."""
    p = dict(params)
    if "mode" in notebook_parameters(spec.path):
        p["mode"] = mode
    return p


_PORT_CLASH = re.compile(r"address already in use|kernel died before replying|zmqerror", re.I)
PORT_RETRIES = 2


def is_port_clash(o: Outcome) -> bool:
    """A kernel that could not start because another kernel took its ZMQ port: it failed
    before any cell ran, so running it again is safe."""
    return (not o.ok) and o.cell is None and bool(_PORT_CLASH.search(o.error or ""))
