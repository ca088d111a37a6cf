"""Compile a Triton-autotuned peer's configs on all of the box's cores before its sweep.

A peer such as torchao's blockwise FP8 GEMM (48 configs, compiled again for every (N, K) its
constexprs specialise on) or gemlite's kernels autotunes at its first call per shape: Triton
compiles and benchmarks the configs one after another, so on a fresh box notebook 05 spent
minutes of its wall time in the compiler on one core (366 s on the H200 at 1eedaca, ~19 s of
it fp8lab's own sweep).

:func:`ahead` starts ``workers`` processes (spawned, each with its own CUDA context); worker
``i`` of ``n`` runs the peer's own calls on the sweep's own shapes, dtypes and Ms with Triton's
``Autotuner.run`` replaced by a compile-only one that takes the pruned config list exactly as
the autotuner would and compiles configs ``i, i + n, ...`` (``JITFunction.run(warmup=True)``:
no launch, no benchmark). The compiled kernels land in Triton's own on-disk cache, keyed as the
real launch keys them, so when the sweep then calls the peer, its autotuner benchmarks every
config as before (the same list, the same benchmarker: the choice is the peer's own), loading
each kernel from the cache instead of compiling it. Nothing here is written into a table.

A peer with a JIT of its own (catalog ``jit``: DeepGEMM runs nvcc on a kernel generated for each
shape at its first call, into its own on-disk cache) is compiled ahead the same way, its points
shared out instead of configs: worker ``i`` makes the calls of points ``i, i + n, ...``, and the
sweep's first call loads each kernel from that cache.

Best effort: a worker that fails, or a pool past ``timeout_s``, is reported in one line and
the sweep compiles what is missing itself, as it did before.

Once per box: :func:`ensure` (what the sweeps call) leaves a marker keyed by the call (kind,
peers, points, Triton, torch, GPU, Triton's cache folder) in ``<cache>/peers_ahead`` and skips
the pool when the marker is there. ``python -m fp8lab build`` runs the same calls up front,
from the notebooks' own parameters (:func:`plan`; ``--smoke``: their smoke parameters), beside
the CUDA builds and before any notebook measures, its workers at a lower priority than the
compilers: on a fresh box the compiling is done while nvcc runs, and the sweeps find the markers.
A notebook run with other parameters (``-p``) finds none and compiles ahead itself.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..arms import peer_catalog

__all__ = ["ahead", "compile_only", "worker_count", "autotuned", "ahead_peers", "ensure", "plan", "prebuild", "prebuild_ready",
           "NOTEBOOKS", "decode_ahead", "prefill_ahead", "blockwise_ahead"]

#: the pool is stopped (SIGTERM to its workers) after this long; the sweep compiles the rest
TIMEOUT_S = 900.0


def autotuned(peers: Sequence[str]) -> list:
    """The peers among ``peers`` whose kernels Triton autotunes (catalog ``autotunes``)."""
    return [p for p in peers if peer_catalog.get(p).autotunes]


def ahead_peers(peers: Sequence[str]) -> list:
    """The peers among ``peers`` that compile at their first call per shape: Triton-autotuned
    ones and those with a JIT of their own (catalog ``jit``)."""
    return [p for p in peers if peer_catalog.get(p).autotunes or peer_catalog.get(p).jit]


def worker_count(n_configs_hint: int = 64) -> int:
    """Processes to compile with: the cores this process may use (at most 16, each worker
    holds a CUDA context), never more than the configs there are to share."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 16, n_configs_hint))


def compile_only(slot: int, n: int, autotuner_cls=None) -> list:
    """Replace ``Autotuner.run`` in this process by one that compiles configs ``slot::n`` of the
    list the autotuner would benchmark (after its own pruning) and launches nothing. Returns a
    one-element list counting the compiles (read it after the peer's calls)."""
    if autotuner_cls is None:
        from triton.runtime.autotuner import Autotuner as autotuner_cls
    count = [0]

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        try:
            try:
                configs = list(self.prune_configs(kwargs))
            except Exception:  # noqa: BLE001 - a pruner this Triton calls differently: all configs
                configs = list(self.configs)
            kw = dict(kwargs)
            kw["warmup"] = True
            kw.setdefault("grid", (1,))
            for cfg in configs[slot::n]:
                self.fn.run(*args, **kw, **cfg.all_kwargs())
                count[0] += 1
        finally:
            self.nargs = None

    autotuner_cls.run = run
    return count


def _blockwise_point(peer, shape, M, seed, with_quant):
    from . import adapters, harness

    s0, w = harness.blockwise_operands(M, shape.N, shape.K, seed)
    x = s0.x
    prep = adapters.BLOCKWISE[peer](x, w)
    prep.call(prep.state, None, None)
    if with_quant and prep.extra.get("with_quant") is not None:
        prep.extra["with_quant"](prep.state, x)


def _weight_only_point(peer, N, K, Ms, seed):
    import torch

    from . import adapters, harness

    prep = adapters.WEIGHT_ONLY[peer](adapters.dense_weight(N, K, seed))
    tdt = harness.act_dtype(prep.act)
    for M in Ms:
        x = torch.randn(M, K, device="cuda").to(tdt)
        out = torch.empty(M, N, dtype=tdt, device="cuda") if prep.takes_out else None
        prep.call(prep.state, x, out)


def _worker(job) -> tuple:
    kind, peers, points, slot, n, nice = job
    if nice:
        os.nice(nice)
    t0 = time.monotonic()
    count = compile_only(slot, n)
    import torch

    errors = []
    for peer in peers:
        jit = peer_catalog.get(peer).jit          # its own JIT: this worker's share of the points
        for pt in (points[slot::n] if jit else points):
            try:
                if kind == "blockwise":
                    _blockwise_point(peer, *pt)
                else:
                    _weight_only_point(peer, *pt)
                torch.cuda.synchronize()
                count[0] += jit
            except Exception as e:  # noqa: BLE001 - best effort: the sweep compiles what is missing
                from .harness import error_text

                errors.append(f"{peer}: {error_text(e)}")
            torch.cuda.empty_cache()
    return count[0], errors, time.monotonic() - t0


def ahead(kind: str, peers: Sequence[str], points: Sequence[tuple], *, workers: Optional[int] = None,
          timeout_s: float = TIMEOUT_S, log: Optional[Callable[[str], None]] = print, nice: int = 0) -> dict:
    """Compile the autotuned ``peers``' configs (and the JIT peers' kernels) for ``points`` on ``workers`` processes.
    ``kind``: "blockwise" (points: (shape, M, seed, with_quant)) or "weight_only" (points:
    (N, K, Ms, seed)); ``nice``: the workers' added niceness. Returns dict(compiled, workers,
    seconds, errors); never raises."""
    peers = ahead_peers(peers)
    if not peers or not points:
        return dict(compiled=0, workers=0, seconds=0.0, errors=[])
    n = workers or worker_count()
    t0 = time.monotonic()
    errors: list = []
    compiled = 0
    ctx = mp.get_context("spawn")
    pool = ctx.Pool(n)
    try:
        res = pool.map_async(_worker, [(kind, list(peers), list(points), i, n, nice) for i in range(n)], chunksize=1)
        for c, errs, _ in res.get(timeout=timeout_s):
            compiled += c
            errors += errs
    except mp.TimeoutError:
        errors.append(f"stopped after {timeout_s:.0f} s: the sweep compiles the rest itself")
    except Exception as e:  # noqa: BLE001
        from .harness import error_text

        errors.append(f"pool: {error_text(e)}")
    finally:
        pool.terminate()
        pool.join()
    dt = time.monotonic() - t0
    uniq = sorted(set(errors))
    if log:
        line = (f"[peers] compiled {compiled} kernels (Triton configs, JIT kernels) of {', '.join(peers)} ahead on "
                f"{n} processes in {dt:.0f} s (autotuners then benchmark every config as usual)")
        if uniq:
            line += f"; {len(uniq)} problem(s), first: {uniq[0][:200]}"
        log(line)
    return dict(compiled=compiled, workers=n, seconds=dt, errors=uniq)


# ---------------------------------------------------------------------------------------------
# once per box: markers, and the build's share of the work
# ---------------------------------------------------------------------------------------------
def call_key(kind: str, peers: Sequence[str], points: Sequence[tuple]) -> str:
    """What a compile-ahead produced depends on: the call, the compilers, the GPU, the cache folder."""
    import torch
    import triton

    parts = [kind, sorted(peers), [[str(x) for x in pt] for pt in points], triton.__version__, torch.__version__,
             torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
             os.environ.get("TRITON_CACHE_DIR", "")]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def marker_path(key: str) -> Path:
    from ..paths import cache_dir

    return cache_dir("peers_ahead") / f"{key}.json"


def ensure(kind: str, points: Sequence[tuple], *, peers: Sequence[str], workers: Optional[int] = None,
           log: Optional[Callable[[str], None]] = print, nice: int = 0, by: str = "a sweep") -> dict:
    """:func:`ahead`, unless the same call has compiled on this box before (its marker): then
    one line and nothing else. A pool that ran to its end leaves the marker; one stopped by its
    timeout or broken does not (the next run tries again)."""
    peers = ahead_peers(peers)
    if not peers or not points:
        return dict(compiled=0, workers=0, seconds=0.0, errors=[])
    marker = marker_path(call_key(kind, peers, points))
    if marker.is_file():
        try:
            d = json.loads(marker.read_text())
            if log:
                log(f"[peers] the Triton configs of {', '.join(peers)} for these shapes were compiled ahead by "
                    f"{d.get('by', '?')} ({d.get('compiled', '?')} configs in {d.get('seconds', 0):.0f} s, "
                    f"{d.get('when', '?')}): their autotuners load them from Triton's cache")
            return dict(compiled=0, workers=0, seconds=0.0, errors=[], marker=str(marker))
        except (OSError, ValueError):
            pass                           # unreadable: compile again, and write it anew
    res = ahead(kind, peers, points, workers=workers, log=log, nice=nice)
    broken = any(e.startswith(("stopped after", "pool:")) for e in res["errors"])
    if res["workers"] and not broken:
        from ..report.results import atomic_write_bytes
        from ..report.provenance import utc_now

        doc = dict(by=by, when=utc_now(), compiled=res["compiled"], seconds=round(res["seconds"], 1),
                   workers=res["workers"], problems=res["errors"][:3])
        atomic_write_bytes(marker, (json.dumps(doc, indent=1) + "\n").encode())
    return dict(res, marker=str(marker))


# ------------------------------------------------------------------------------------------
# what each sweep compiles ahead (ensure), from its own arguments: the sweeps call these, and
# so does ``python -m fp8lab build`` with a notebook's parameters (plan)
# ------------------------------------------------------------------------------------------
def decode_ahead(shape_names: Sequence[str], Ms: Sequence[int], *, seed: int = 0, check_m: int = 4) -> tuple:
    """(kind, points) of :func:`fp8lab.peers.sweeps.decode`'s compile-ahead: every shape at its Ms and check M."""
    from ..experiments import decode as dx

    ms = sorted(set(Ms) | {check_m})
    return "weight_only", [(dx._shape(n).N, dx._shape(n).K, ms, seed) for n in shape_names]


def prefill_ahead(shape_name: str, Ms: Sequence[int], *, seed: int = 0) -> tuple:
    """(kind, points) of :func:`fp8lab.peers.sweeps.prefill`'s compile-ahead."""
    from ..facts import shapes

    sh = shapes.get(shape_name)
    return "weight_only", [(sh.N, sh.K, sorted(set(Ms)), seed)]


def blockwise_ahead(shapes, Ms: Sequence[int], *, seed: int = 0, with_quant: bool = True) -> tuple:
    """(kind, points) of :func:`fp8lab.peers.sweeps.blockwise`'s compile-ahead: its own operands' seeds (seed + M)."""
    from ..experiments import blockwise as bw

    return "blockwise", [(sh, M, seed + M, with_quant) for sh in bw.resolve_shapes(shapes) for M in Ms]


#: the notebooks whose sweeps compile autotuned peers ahead
NOTEBOOKS = ("05", "08", "11")


def plan(notebook: str, params: dict) -> tuple:
    """(kind, points) the notebook's peer sweep compiles ahead with these parameters: the
    arguments the notebook passes its sweep (and the sweep's defaults for the rest)."""
    if notebook == "05":
        return blockwise_ahead(params["shapes"], params["Ms"], with_quant=params.get("with_quant", True))
    if notebook == "08":
        return decode_ahead(params["shape_names"], params["Ms"], seed=params.get("seed", 0))
    if notebook == "11":
        return prefill_ahead(params["shape_name"], params["Ms"], seed=params.get("seed", 0))
    raise ValueError(f"notebook {notebook!r} compiles no peer ahead; those that do: {', '.join(NOTEBOOKS)}")


def _live_autotuned(notebook: str, params: dict) -> list:
    from . import discover

    return [p for p in ahead_peers(peer_catalog.resolve(params.get("peers", "all"), notebook))
            if discover.availability(p).ok]


def prebuild_ready(notebook: str, params_json: str) -> tuple:
    """(ok, why not) for ``fp8lab build``'s target: a CUDA GPU, and an autotuned peer installed."""
    try:
        import torch
    except ImportError:
        return False, "no torch"
    if not torch.cuda.is_available():
        return False, "no CUDA GPU"
    if not _live_autotuned(notebook, json.loads(params_json)):
        names = sorted({peer_catalog.get(p).library for p in ahead_peers(peer_catalog.ids_for(notebook))})
        return False, f"none of notebook {notebook}'s autotuned or JIT peers is installed ({', '.join(names)})"
    return True, ""


def prebuild(notebook: str, params_json: str) -> Optional[Path]:
    """``fp8lab build``'s target: the notebook's peer compile-ahead, at a lower priority than the
    compilers beside it (half the cores' worth of workers, niceness 10)."""
    params = json.loads(params_json)
    kind, points = plan(notebook, params)
    res = ensure(kind, points, peers=_live_autotuned(notebook, params), workers=max(1, worker_count() // 2),
                 nice=10, by="fp8lab build")
    if res.get("errors"):
        print(f"notebook {notebook}: {len(res['errors'])} problem(s) while compiling ahead (the sweep reports them "
              f"again): {res['errors'][0][:300]}")
    # the marker: older than the call when an earlier build compiled these (prebuild: "cached")
    marker = Path(res.get("marker", ""))
    return marker if res.get("marker") and marker.is_file() else None
