"""Run the notebooks on several hosts through Dask distributed (``pip install 'fp8lab[cluster]'``).

``python -m fp8lab run --cluster tcp://scheduler:8786`` (or ``--cluster local[:N]``, a
cluster of N worker processes on this machine) makes each notebook one Dask task:

- a GPU notebook asks for one ``GPU`` worker resource, so a worker started with
  ``--resources GPU=1`` (and pinned to its GPU with CUDA_VISIBLE_DEVICES) runs one at a
  time; a host notebook asks for no resource, so any worker thread takes it (start workers
  with ``--nthreads 2`` to let host notebooks run beside a GPU notebook);
- the task runs the local runner's own per-notebook executor (``fp8lab.run.notebooks.execute_with_retries``)
  on the notebook in the worker's own checkout, after checking that the checkout is at
  the client's commit (a worker at another commit refuses the task);
- each worker chooses measure (it sees a GPU) or replot (it does not) for itself;
- the task returns the files the notebook wrote under ``data/*/<notebook>/`` and
  ``figures/*/<notebook>/``, its executed copy and log, and the worker's device key; the
  client writes a notebook's files into its own data/ and figures/ (each file atomically)
  only when the notebook passed and every table matches its sidecar's sha256;
- a notebook with ``after`` in the manifest is a Dask task that depends on the tasks of
  the notebooks it waits for; their data files travel with it and are written into the
  worker's checkout before it runs (07 on one host plots what 03 measured on another).

Worker start-up on each GPU host (one worker per GPU, from the checkout at the client's
commit, with fp8lab installed)::

    for i in $(seq 0 $(($(nvidia-smi -L | wc -l) - 1))); do
      CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=$i dask worker tcp://scheduler:8786 --nthreads 2 \\
          --resources GPU=1 --name "$(hostname)-gpu$i" &
    done
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path, PurePosixPath

from . import notebooks
from ..report import provenance
from .notebooks import NotebookSpec, Outcome, UsageError
from ..paths import repo_root

GPU_RESOURCE = "GPU"
_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@+-]*$")


def parse_target(text) -> tuple[str, object]:
    """``local`` -> ("local", None); ``local:3`` -> ("local", 3); a scheduler address
    (``tcp://host:8786``, ``tls://...``, ``host:8786``) -> ("address", text)."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError("--cluster takes a Dask scheduler address (tcp://host:8786) or local[:N]")
    t = text.strip()
    m = re.fullmatch(r"local(?::(\d+))?", t)
    if m:
        n = int(m.group(1)) if m.group(1) else None
        if n is not None and n < 1:
            raise UsageError(f"--cluster local:N needs N >= 1 workers, got {n}")
        return "local", n
    if re.fullmatch(r"(tcp|tls|inproc|ucx|ws|wss)://\S+", t) or re.fullmatch(r"[\w.-]+:\d+", t):
        return "address", t
    raise UsageError(f"--cluster takes a Dask scheduler address (tcp://host:8786) or "
                     f"local[:N], got {t!r}")


#: a Dask handshake is a few hundred bytes; a "length" beyond this is someone else's protocol
_MAX_HANDSHAKE = 1 << 20


def _recv_exact(sock, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def probe_scheduler(address: str, timeout: float) -> None:
    """Fail fast, in one line (UsageError), unless a Dask scheduler answers at ``address``
    within ``timeout`` seconds. A Dask listener speaks first (its handshake: a length-prefixed
    msgpack message), so a plain socket can tell a scheduler from a port that accepts and says
    nothing (Dask itself waits there forever) or answers in another protocol (Dask reads its
    first 8 bytes as a length and tries to allocate that much). tls:// is only checked for a
    TCP connection: its handshake needs Dask's certificates."""
    import struct

    scheme, _, hostport = address.rpartition("://")
    scheme = scheme or "tcp"
    if scheme not in ("tcp", "tls"):
        return
    host, _, port = hostport.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise UsageError(f"--cluster: {address!r} has no host:port")
    t_end = time.monotonic() + timeout
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except (socket.timeout, TimeoutError):
        raise UsageError(f"--cluster: nothing answered at {address} within {timeout:g} s "
                         "(--connect-timeout)") from None
    except OSError as exc:
        raise UsageError(f"--cluster: cannot reach {address}: {exc.strerror or exc}") from None
    with sock:
        if scheme == "tls":
            return
        try:
            sock.settimeout(max(0.05, t_end - time.monotonic()))
            head = _recv_exact(sock, 8)
            if len(head) < 8:
                raise UsageError(f"--cluster: {address} closed the connection without a Dask "
                                 "handshake: no Dask scheduler listens there")
            (n,) = struct.unpack("Q", head)
            if not 0 < n <= _MAX_HANDSHAKE:
                raise UsageError(f"--cluster: {address} answered, but not as a Dask scheduler "
                                 f"(its first bytes: {head!r})")
            sock.settimeout(max(0.05, t_end - time.monotonic()))
            body = _recv_exact(sock, n)
        except (socket.timeout, TimeoutError):
            raise UsageError(f"--cluster: {address} accepted the connection but sent no Dask "
                             f"handshake within {timeout:g} s: no Dask scheduler listens there (a "
                             "busy one: raise --connect-timeout)") from None
        except OSError as exc:
            raise UsageError(f"--cluster: {address} dropped the connection: {exc}") from None
    try:
        from distributed.protocol import loads
        from distributed.protocol.utils import unpack_frames
        frames, _ = unpack_frames(body, partial=True)
        msg = loads(frames)
        ok = isinstance(msg, dict) and "pickle-protocol" in msg
    except Exception:  # noqa: BLE001 - anything that does not decode is not a handshake
        ok = False
    if not ok:
        raise UsageError(f"--cluster: {address} answered, but not with a Dask handshake: no Dask "
                         "scheduler listens there")


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise UsageError("--cluster needs Dask distributed: pip install 'fp8lab[cluster]'") from None
    return distributed


def local_cluster(n_workers: int | None = None, *, gpu_ids: list[str] | None = None,
                  worker_env: list[dict] | None = None, threads: int = 1):
    """A Dask cluster of worker processes on this machine, each offering one GPU slot.

    With GPUs, worker i is pinned to GPU ``gpu_ids[i]`` (CUDA_VISIBLE_DEVICES; default:
    every GPU NVML sees) and N defaults to the number of GPUs; without any (or with
    ``gpu_ids=[]``) N defaults to 1 and the slots let GPU notebooks run in replot mode.
    ``worker_env``: extra environment per worker (tests give fake device keys)."""
    distributed = _import_distributed()
    if gpu_ids is None:
        gpu_ids = [str(i) for i in range(provenance.gpu_count())]
    gpus = len(gpu_ids)
    n = n_workers if n_workers is not None else (gpus or 1)
    if n < 1:
        raise UsageError(f"a local cluster needs at least one worker, got {n}")
    if gpus and n > gpus:
        raise UsageError(f"--cluster local:{n} asks for {n} workers, one per GPU, and NVML "
                         f"sees {gpus} GPU(s)")
    envs = list(worker_env) if worker_env is not None else [{} for _ in range(n)]
    if len(envs) != n:
        raise ValueError(f"worker_env must hold one dict per worker ({n}), got {len(envs)}")
    workers = {}
    for i, extra in enumerate(envs):
        env = dict(extra)
        if gpus:
            env.setdefault("CUDA_VISIBLE_DEVICES", gpu_ids[i])
            # the ids are NVML's; CUDA reads them the same way only in PCI bus order
            env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        workers[f"fp8lab-{i}"] = {"cls": distributed.Nanny, "options": {
            "nthreads": threads, "resources": {GPU_RESOURCE: 1}, "env": env,
            # The notebooks run in child processes: the worker itself holds only their
            # returned files, so Dask's memory-based pausing would only get in the way.
            "memory_limit": 0, "silence_logs": logging.WARNING}}
    return distributed.SpecCluster(
        workers=workers, name="fp8lab-local", silence_logs=logging.WARNING,
        scheduler={"cls": distributed.Scheduler,
                   "options": {"dashboard_address": None, "host": "127.0.0.1"}})


# ---------------------------------------------------------------- on the worker

def worker_device_key() -> str:
    """The device key of this worker: $FP8LAB_WORKER_DEVICE when set, else the key of
    the first GPU CUDA_VISIBLE_DEVICES shows (NVML's name, as data/ spells it), else 'cpu'."""
    key = os.environ.get("FP8LAB_WORKER_DEVICE")
    if key:
        return key
    if not provenance.gpu_present():
        return "cpu"
    nv = provenance._nvml()
    vis = [p.strip() for p in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if p.strip()]
    first = vis[0] if vis else "0"
    try:
        h = (nv.nvmlDeviceGetHandleByIndex(int(first)) if first.isdigit()
             else nv.nvmlDeviceGetHandleByUUID(first))
        return provenance.device_slug(provenance._str(nv.nvmlDeviceGetName(h)))
    except Exception:  # noqa: BLE001 - a MIG slice or an odd id: still a GPU worker
        return "gpu"


def _outputs(name: str, roots: dict[str, Path]) -> dict[str, tuple]:
    """'data/<dev>/<name>/<file>' -> (inode, mtime, size) for every file under a device's
    folder of this notebook. Results are written by rename, so a rewritten file has a new
    inode even when its bytes and its second are the same."""
    out = {}
    for top, base in roots.items():
        if not base.is_dir():
            continue
        for dev in base.iterdir():
            folder = dev / name
            if not folder.is_dir():
                continue
            for f in folder.rglob("*"):
                if f.is_file() and not f.name.startswith("."):   # ".x.tmp": a write in flight
                    st = f.stat()
                    out[f"{top}/{f.relative_to(base).as_posix()}"] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return out


def _read_tree(base: Path) -> list[tuple[str, bytes]]:
    return [(f.relative_to(base).as_posix(), f.read_bytes())
            for f in sorted(base.rglob("*")) if f.is_file() and not f.name.startswith(".")]


def run_notebook_task(job: dict, deps=()) -> dict:
    """One notebook on this worker (a Dask task). Expected failures (the notebook fails,
    the checkout is at another commit) are returned, not raised, so a notebook waiting
    for this one still runs, as it does in the local runner."""
    t0 = time.monotonic()
    root = repo_root()
    git = provenance.git_info(root)
    try:
        from distributed import get_worker
        wname = str(get_worker().name)
    except Exception:  # noqa: BLE001 - called outside a worker (a unit test)
        wname = None
    res = {"name": job["name"], "ok": False, "cell": None, "error": None,
           "seconds": 0.0, "attempts": 1, "mode": None, "device": worker_device_key(),
           "host": socket.gethostname(), "worker": wname, "commit": git.get("commit"),
           "files": [], "run_files": []}
    if git.get("commit") != job["commit"]:
        res["error"] = (f"worker checkout {root} is at commit {git.get('commit') or 'unknown'}, "
                        f"the client at {job['commit']}: check out the client's commit on "
                        "every worker (a copy without .git: set FP8LAB_GIT_COMMIT)")
        return res
    path = root / job["notebook"]
    if not path.is_file():
        res["error"] = f"worker checkout {root} has no {job['notebook']}"
        return res
    try:
        mode, _ = notebooks.choose_mode(job["mode"])
    except UsageError as exc:
        res["error"] = f"on this worker: {exc}"
        return res
    res["mode"] = mode
    spec = NotebookSpec(id=job["id"], name=job["name"], title=job["name"], kind=job["kind"],
                        claims=(), timeout=job["timeout"], path=path)
    stage = Path(tempfile.mkdtemp(prefix=f"fp8lab-{job['name']}-"))
    try:
        nb_env = notebooks.notebook_env(spec, mode, run_id=job["run_id"], run_dir=stage, root=root,
                                     env=job["env"])
        merged = {**os.environ, **nb_env}
        data_root = Path(merged.get("FP8LAB_DATA_DIR") or root / "data")
        fig_root = Path(merged.get("FP8LAB_FIGURES_DIR") or root / "figures")
        # What the notebooks it waits for wrote, possibly on other hosts, into this checkout.
        from ..report.results import atomic_write_bytes
        for dep in deps:
            for rel, data in dep.get("files", []):
                p = _safe_rel(rel, "a file of a notebook it waits for")
                if p.parts[0] == "data":
                    dest = data_root.joinpath(*p.parts[1:])
                    if not (dest.is_file() and dest.read_bytes() == data):
                        atomic_write_bytes(dest, data)
        # Redrawn figures of a replot run go to the stage and come back as run files.
        roots = {"data": data_root}
        if stage not in fig_root.parents:
            roots["figures"] = fig_root
        before = _outputs(job["name"], roots)
        params = notebooks.notebook_params(spec, job["params"], mode)
        o = notebooks.execute_with_retries(spec, params, stage, timeout=job["timeout"],
                                        kernel=job["kernel"], env=nb_env)
        res.update(ok=o.ok, cell=o.cell, error=o.error, attempts=o.attempts)
        if o.ok:
            after = _outputs(job["name"], roots)
            changed = sorted(k for k, sig in after.items() if before.get(k) != sig)
            res["files"] = [(k, (roots[k.split("/", 1)[0]] / k.split("/", 1)[1]).read_bytes())
                            for k in changed]
        res["run_files"] = _read_tree(stage)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    res["seconds"] = time.monotonic() - t0
    return res


# ---------------------------------------------------------------- on the client

def _safe_rel(rel: str, what: str) -> PurePosixPath:
    p = PurePosixPath(rel)
    if p.is_absolute() or not p.parts or any(not _PART_RE.match(x) for x in p.parts):
        raise ValueError(f"{what} {rel!r} is not a plain relative path")
    return p


def check_returned(name: str, files, commit: str) -> list[str]:
    """Why the files a task returned must not be written (empty: they may be): paths
    outside data/*/<name>/ and figures/*/<name>/, a table whose bytes do not match its
    sidecar's sha256, a sidecar from another commit."""
    problems = []
    by_rel = {}
    for rel, data in files:
        try:
            p = _safe_rel(rel, "returned file")
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if p.parts[0] not in ("data", "figures") or len(p.parts) < 4 or p.parts[2] != name:
            problems.append(f"{rel}: outside data/<device>/{name}/ and figures/<device>/{name}/")
            continue
        by_rel[rel] = data
    for rel in by_rel:
        # a new table with the old sidecar here would be a mixed pair
        if rel.startswith("data/") and rel.endswith(".csv") and rel[:-4] + ".meta.json" not in by_rel:
            problems.append(f"{rel}: returned without its sidecar")
    for rel, data in by_rel.items():
        if not (rel.startswith("data/") and rel.endswith(".meta.json")):
            continue
        csv = rel[: -len(".meta.json")] + ".csv"
        try:
            meta = json.loads(data)
        except ValueError:
            problems.append(f"{rel}: not JSON")
            continue
        if not isinstance(meta, dict):
            problems.append(f"{rel}: not a JSON object")
            continue
        table = meta.get("table")
        want = table.get("sha256") if isinstance(table, dict) else None
        if csv in by_rel and not isinstance(want, str):
            problems.append(f"{rel}: has no table.sha256, so {csv} cannot be checked")
        elif csv in by_rel and hashlib.sha256(by_rel[csv]).hexdigest() != want:
            problems.append(f"{csv}: does not match its sidecar's sha256")
        got = (meta.get("git") or {}).get("commit")
        if got and got != commit:
            problems.append(f"{rel}: written at commit {got}, the client is at {commit}")
    return problems


def _accept(spec: NotebookSpec, r: dict, run_dir: Path, commit: str) -> Outcome:
    """The task's result as an Outcome; its files written here when it passed."""
    from ..paths import data_dir, figures_dir
    from ..report.results import atomic_write_bytes
    sub = re.sub(r"[^A-Za-z0-9_.@+-]+", "_", f"{r['device']}-{r['worker'] or r['host']}")
    out_dir = run_dir / sub
    o = Outcome(spec.name, bool(r["ok"]), float(r["seconds"]), out_dir / spec.path.name,
                cell=r.get("cell"), error=r.get("error"), attempts=int(r.get("attempts", 1)),
                device=r["device"], worker=r.get("worker") or r["host"],
                # a host notebook runs for real whatever the worker chose for GPU notebooks
                mode=r.get("mode") if spec.kind == "gpu" or not r.get("mode") else "host")
    for rel, data in r.get("run_files", []):
        try:
            p = _safe_rel(rel, "run file")
            # redrawn figures beside the local runner's (run/figures), the rest per worker
            atomic_write_bytes((run_dir if p.parts[0] == "figures" else out_dir) / p, data)
        except ValueError:
            pass            # an odd name in the executed copies: the notebook's results matter
    if not o.ok:
        return o
    problems = check_returned(spec.name, r.get("files", []), commit)
    if problems:
        o.ok = False
        o.error = "refused the files it returned (nothing written): " + "; ".join(problems[:5])
        return o
    from ..report.results import write_pair
    roots = {"data": data_dir(), "figures": figures_dir()}
    files = dict(r["files"])
    # A table and its sidecar are written as a pair, as results.write_table does, so no
    # reader here gets the new CSV with the old sidecar.
    for rel in sorted(files):
        if rel.startswith("data/") and rel.endswith(".csv") and rel[:-4] + ".meta.json" in files:
            dest = roots["data"] / rel.partition("/")[2]
            write_pair(dest.parent, dest.name[:-4], files.pop(rel), files.pop(rel[:-4] + ".meta.json"))
    for rel, data in sorted(files.items()):
        top, _, rest = rel.partition("/")
        atomic_write_bytes(roots[top] / rest, data)
    return o


def _scheduler_workers(client) -> dict:
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:          # distributed before 2025 lists every worker without asking
        info = client.scheduler_info()
    return info.get("workers", {})


def run_on_cluster(specs: list[NotebookSpec], per_nb: dict, target, *, mode: str, run_dir: Path,
                   run_id: str, timeout, kernel: str, env, progress: bool, echo,
                   worker_wait_s: float = 60.0, connect_timeout: float = 30.0) -> list[Outcome]:
    """Submit one task per notebook, in dependency order; outcomes in ``specs`` order.
    ``connect_timeout``: seconds for the scheduler to answer (see :func:`probe_scheduler`)."""
    distributed = _import_distributed()
    root = repo_root()
    git = provenance.git_info(root)
    commit = git.get("commit")
    if not commit:
        raise UsageError("--cluster checks that every worker runs the client's commit, and this "
                         f"checkout ({root}) has none: commit it, or set FP8LAB_GIT_COMMIT")
    jobs = {}
    for s in specs:
        try:
            rel = s.path.resolve().relative_to(root.resolve())
        except ValueError:
            raise UsageError(f"--cluster: {s.path} is outside the checkout {root}; a worker finds "
                             "a notebook at the same path in its own checkout") from None
        jobs[s.name] = {"id": s.id, "name": s.name, "kind": s.kind, "notebook": rel.as_posix(),
                        "timeout": int(timeout or s.timeout), "kernel": kernel,
                        "params": per_nb[s.name], "mode": mode, "env": dict(env or {}),
                        "run_id": run_id, "commit": commit}
    kind, arg = target
    if kind == "address":
        probe_scheduler(arg, connect_timeout)
    cluster = local_cluster(arg) if kind == "local" else None
    try:
        try:
            client = distributed.Client(cluster if cluster is not None else arg,
                                        timeout=f"{connect_timeout:g}s")
        except Exception as exc:  # noqa: BLE001 - OSError, TimeoutError, a protocol error: one line
            raise UsageError(f"--cluster: cannot connect to the Dask scheduler at {arg}: "
                             f"{type(exc).__name__}: {exc}") from None
        with client:
            try:
                client.wait_for_workers(1, timeout=worker_wait_s)
            except TimeoutError:
                raise UsageError(f"--cluster: no worker joined the scheduler within "
                                 f"{worker_wait_s:g} s") from None
            workers = _scheduler_workers(client)
            slots = sum(w.get("resources", {}).get(GPU_RESOURCE, 0) for w in workers.values())
            gpu_nbs = [s.name for s in specs if s.kind == "gpu"]
            if gpu_nbs and slots < 1:
                raise UsageError(f"--cluster: no worker offers the {GPU_RESOURCE} resource, so the "
                                 f"GPU notebooks ({', '.join(gpu_nbs)}) would wait forever; start "
                                 f"workers with --resources {GPU_RESOURCE}=1")
            echo(f"  cluster {client.scheduler.address}: {len(workers)} worker(s), {slots:g} GPU "
                 f"slot(s); commit {commit[:10]}" + (" (this checkout has uncommitted changes, "
                                                     "which workers on other hosts do not have)"
                                                     if git.get("dirty") else ""))
            return _submit_and_collect(client, distributed, specs, jobs, run_dir, commit,
                                       progress=progress, echo=echo)
    finally:
        if cluster is not None:
            cluster.close()


def _submit_and_collect(client, distributed, specs, jobs, run_dir, commit, *, progress, echo):
    futs = {}
    for i, s in enumerate(specs):
        deps = [futs[d] for d in notebooks.waits_for(s, specs)]
        futs[s.name] = client.submit(
            run_notebook_task, jobs[s.name], deps, key=f"fp8lab-{s.name}-{jobs[s.name]['run_id']}",
            resources={GPU_RESOURCE: 1} if s.kind == "gpu" else None, pure=False, retries=0,
            priority=len(specs) - i)             # manifest order among the ready ones
    by_key = {f.key: s for s, f in zip(specs, futs.values())}
    try:
        import sys

        from tqdm.auto import tqdm
        bar = tqdm(total=len(specs), desc="notebooks", unit="nb", disable=not progress,
                   file=sys.stderr)
    except ImportError:  # pragma: no cover - tqdm is a dependency
        bar = None
    done: dict[str, Outcome] = {}
    try:
        for fut in distributed.as_completed(list(futs.values())):
            spec = by_key[fut.key]
            try:
                r = fut.result()
            except Exception as exc:  # noqa: BLE001 - a lost worker, a task that raised
                erred = [d for d in notebooks.waits_for(spec, specs) if futs[d].status == "error"]
                why = (f"not run: {', '.join(erred)} (which it waits for) failed on the cluster"
                       if erred else f"the Dask task failed: {type(exc).__name__}: {exc}")
                o = Outcome(spec.name, False, 0.0, run_dir / spec.path.name, error=why)
            else:
                o = _accept(spec, r, run_dir, commit)
            done[spec.name] = o
            if bar is not None:
                bar.update(1)
                bar.write(o.line())
            else:  # pragma: no cover
                echo(o.line())
    except BaseException:
        client.cancel(list(futs.values()))
        raise
    finally:
        if bar is not None:
            bar.close()
    return [done[s.name] for s in specs]
