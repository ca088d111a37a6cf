"""``python -m fp8lab build``: every CUDA extension and cubin the GPU notebooks use, built up front
in parallel, so a cold ``make run`` compiles on all of the box's cores at once instead of one
notebook at a time.

Each target is built in its own process by the very function a notebook calls (``load_extension``
and friends), so the content hash, the build folder (``<cache>/torch_ext/<name>_<hash>``) and the
cubin cache are the notebooks' own: a notebook that runs afterwards imports in a second.

Cores: ``--jobs`` (default: the cores this process may use) is the number of compiler processes
running at once, in total. A target gets ``MAX_JOBS`` = as many ninja jobs as it has translation
units, or what is free; targets start slowest first (the CUTLASS kernels, minutes each, set the
wall time), the others fill the remaining cores, and a target whose cores are not free waits
for a running one to finish. So the box is never oversubscribed.

A notebook started while this runs (JupyterLab, a second shell) does not build twice: torch's
``cpp_extension.load`` takes ``<build folder>/lock`` with ``FileBaton.try_acquire``
(``os.open(O_CREAT | O_EXCL)``, atomic), and a process that finds the lock taken calls
``baton.wait()``, which polls until the file is gone and then imports the finished ``.so``
without building (``_jit_compile`` in torch/utils/cpp_extension.py, read in PyTorch's current
source; older releases have the same lock-or-wait shape). Two consequences handled here: a
build killed with SIGKILL leaves its lock behind and every later load of that extension waits
for ever (so a timed-out build is stopped with SIGTERM first, which lets torch's
``finally: baton.release()`` run, and lock files found at start are named); and a process that
waited on a failed build gets an ImportError, not the compiler's message (that is in this
command's log). The weight-only cubins need no lock: the cubin cache (``toolchain.cubin``)
compiles into a per-process temporary folder and renames the result into place.

The original Marlin (a peer) is built here too when its source is unpacked, one target per
variant (``peer_marlin_*``), each probed in its own process after its build.

The Triton-autotuned peers' configs (torchao, gemlite; notebooks 05, 08, 11) are compiled here
too, for the notebooks' own parameters (``peer_triton_*``, fp8lab.peers.precompile), beside the
CUDA builds and at a lower priority than them; the sweeps then find them compiled.

Not built here: fp8lab's own Triton kernels (compiled at the first launch of each autotuned
shape, cached by Triton itself) and ``three_arms.b9_compile_check`` (five one-kernel nvcc runs
into a temporary folder, on purpose: it shows what nvcc says for each pad).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Sequence

from ..peers.discover import DEEPGEMM_OWN_BUILD, MARLIN_VARIANTS

#: How long a stopped build gets to release torch's lock before it is killed.
_TERM_GRACE_S = 10.0


@dataclasses.dataclass(frozen=True)
class Target:
    """One thing to build: ``loader`` ("module:function") is called with ``args`` in a fresh process."""
    name: str
    kind: str                 # "extension" (torch cpp_extension, ninja) or "cubin" (one nvcc run)
    loader: str
    args: tuple = ()
    units: str | int = 1      # translation units (ninja jobs it can use): an int, or the loader
    #                           module's attribute holding its sources (len), or "cutlass"
    slow_s: float = 0.0       # rough seconds the whole target takes: start order only (longest first)
    what: str = ""
    needs: str = ""           # "module:function" -> (ok, why): when not ok the target is skipped,
    #                           as the notebooks skip what it serves (e.g. CUTLASS headers missing)
    needs_args: bool = False  # call ``needs`` with ``args`` too


#: the loader of the peers' Triton compile-ahead targets
AHEAD_LOADER = "fp8lab.peers.precompile:prebuild"

# Every torch extension (each function that calls _build.load_torch_extension; a test scans the
# sources for them) and every cached nvcc cubin a GPU notebook compiles (notebooks 08 and 10 read
# the weight-only SASS for sm_90, their default `arch` parameter). slow_s: each target's wall
# seconds in `make build` on the H200 box (16 cores, 065b701; the Triton compile-ahead targets run
# beside the compilers). The scheduler starts the longest first and a target waits until its units
# are free: with the older guesses (per-TU times; CUTLASS ahead of vLLM's Marlin) the 12-job Marlin
# build, the longest at 172 s, waited while shorter ones took the freed jobs and ended last, at
# 354 s (309 s in test-gpu's build); replayed with these, 311 s (264 s) against a 294 s (243 s)
# bound of compile-seconds over 16 jobs.
TARGETS: tuple[Target, ...] = (
    Target("cutlass_sm90", "extension", "fp8lab.kernels.cutlass_blockwise_sm90:load_extension",
           units="cutlass", slow_s=78, what="CUTLASS 3.x blockwise FP8 GEMM (sm_90a), one TU per kernel",
           needs="fp8lab.kernels.cutlass_blockwise_sm90:available"),
    Target("mma_blockwise", "extension", "fp8lab.kernels.mma_blockwise:load_extension",
           units="EXT_SOURCES", slow_s=28, what="blockwise FP8 mma.sync GEMM: 16 configs x 5 kernels"),
    Target("gemv_w16", "extension", "fp8lab.kernels.weight_only:load_extension",
           units="EXT_SOURCES", slow_s=39, what="weight-only decode GEMV: 4 formats x 2 dtypes x 4 tiles"),
    Target("seed001", "extension", "fp8lab.kernels.seed001:load_extension",
           units="EXT_SOURCES", slow_s=31, what="seed 001: scalar, WMMA W8A16, activation quantisers, dequant"),
    Target("gemv_w16_xalu", "extension", "fp8lab.kernels.weight_only:load_xalu_extension",
           units="XALU_EXT_SOURCES", slow_s=37, what="weight-only GEMV with EXTRA_ALU chains"),
    Target("hmma_peak", "extension", "fp8lab.kernels.hmma_peak:load_extension",
           units="EXT_SOURCES", slow_s=41, what="bf16 HMMA peak probe"),
    Target("wgmma_blockwise", "extension", "fp8lab.kernels.wgmma_blockwise:load_extension",
           units="EXT_SOURCES", slow_s=20, what="fp8lab's TMA + wgmma blockwise FP8 GEMM (sm_90a), two variants",
           needs="fp8lab.kernels.wgmma_blockwise:available"),
    Target("gemv_pattern", "extension", "fp8lab.kernels.weight_only:load_pattern_extension",
           units="PATTERN_EXT_SOURCES", slow_s=20,
           what="the weight-only GEMVs' access patterns alone (notebook 08's ceiling): 60 small kernels"),
    # (slow_s an estimate until the H200 times it: its torch binding's g++ dominates)
    Target("gemv_rows", "extension", "fp8lab.kernels.gemv_rows:load_extension",
           units="EXT_SOURCES", slow_s=20,
           what="row-major 8-bit / 4-bit decode GEMV (weight-only schedule 'rows', CUDA-core and tensor-core forms) and its loads-only twins: 164 kernels"),
    # (slow_s an estimate until the H200 times it)
    Target("gemv_w8a8", "extension", "fp8lab.kernels.gemv_w8a8:load_extension",
           units="EXT_SOURCES", slow_s=30, what="W8A8 blockwise decode GEMV (gemv_w16.cuh's kFp8A8): 4 tiles"),
    # (slow_s not yet timed on the H200: its torch binding's g++ dominates, as gemv_w16_xalu's 37 s)
    Target("wo_sass_gemv", "cubin", "fp8lab.kernels.weight_only:gemv_cubin", ("sm_90", 1),
           slow_s=5, what="gemv_w16.cu, NT = 1, sm_90 (notebook 08's static SASS)", needs=f"{__name__}:sass_tools"),
    Target("wo_sass_xalu", "cubin", "fp8lab.kernels.weight_only:xalu_cubin", ("sm_90",),
           slow_s=4, what="gemv_w16.cu EXTRA_ALU kernels, sm_90 (notebook 10's static SASS)",
           needs=f"{__name__}:sass_tools"),
    Target("wo_sass_dequant", "cubin", "fp8lab.kernels.weight_only:dequant_cubin", ("sm_90",),
           slow_s=2, what="gemv_w16_check.cu dequant probes, sm_90 (notebook 08)", needs=f"{__name__}:sass_tools"),
    # the original Marlin (a peer, notebooks 08 and 11), built from its own source where it has
    # been unpacked (scripts/peers_offline.py --sources), each variant in its own process (torch
    # renames a second extension of one module name in one process), then probed
    *(Target(f"peer_marlin_{v.replace('-', '_')}", "peer", "fp8lab.peers.build:prebuild", (v,), units=2,
             slow_s=37, what=f"Marlin INT4 from its source ({v}), then its separate-process probe",
             needs="fp8lab.peers.build:prebuild_ready") for v in MARLIN_VARIANTS),
    # vLLM's Marlin GEMMs (peers of notebooks 08 and 11; FP8 Marlin is seed 003's subject), built
    # from kernels-community's copy of their source where it has been unpacked, then probed
    Target("peer_vllm_marlin", "peer", "fp8lab.peers.vllm_marlin:prebuild", units="CU_SOURCES", slow_s=172,
           what="vLLM's Marlin GEMMs (FP8, INT8, INT4) from their source, then the separate-process probe",
           needs="fp8lab.peers.vllm_marlin:prebuild_ready"),
    # DeepGEMM (a peer of notebooks 05 and 06), built from its own source where it has been unpacked:
    # its source as it is (imported as is, or with RTLD_DEEPBIND) and with libstdc++ linked in
    # statically, each in its own process, then every variant probed
    *(Target(f"peer_deepgemm_{v.replace('-', '_')}", "peer", "fp8lab.peers.build:prebuild_deepgemm", (v,),
             units=1, slow_s=105, what=f"DeepGEMM's binding from its source ({v}), then its separate-process probes",
             needs="fp8lab.peers.build:deepgemm_prebuild_ready") for v in ("as-is", *DEEPGEMM_OWN_BUILD)),
    # vLLM's CUTLASS blockwise FP8 GEMM for Hopper (a peer of notebooks 05 and 06), built from the
    # same unpack against the nvidia-cutlass wheel's headers, then probed
    Target("peer_vllm_cutlass", "peer", "fp8lab.peers.vllm_cutlass:prebuild", units=2, slow_s=117,
           what="vLLM's CUTLASS blockwise FP8 GEMM (sm_90a) from its source, then the separate-process probe",
           needs="fp8lab.peers.vllm_cutlass:prebuild_ready"),
    # vLLM's CUDA per-token-group FP8 quantiser (a peer of notebook 06b), built from the files of
    # vLLM's sdist that it compiles from, then probed
    Target("peer_vllm_quant", "peer", "fp8lab.peers.vllm_quant:prebuild", units=2, slow_s=46,
           what="vLLM's CUDA per-token-group FP8 quantiser from its source, then the separate-process probe",
           needs="fp8lab.peers.vllm_quant:prebuild_ready"),
    # SGLang's per-token-group FP8 quantiser (a peer of notebook 06b), built from sglang's wheel's
    # kernel header and tvm-ffi's headers and library, then probed
    Target("peer_sglang_quant", "peer", "fp8lab.peers.sglang_quant:prebuild", units=1, slow_s=30,
           what="SGLang's per-token-group FP8 quantiser (sm_90a) from sglang's wheel, then the separate-process probe",
           needs="fp8lab.peers.sglang_quant:prebuild_ready"),
    # the Triton-autotuned peers' configs (torchao, gemlite) of notebooks 05, 08 and 11, compiled
    # ahead with the notebooks' own parameters (cli fills them in; --smoke: the smoke ones) by
    # worker processes at a lower priority than the compilers: units counts what they take from
    # the compilers' share, not the workers (half the cores, niceness 10), so they start at once
    # and fill the cores the builds leave idle
    *(Target(f"peer_triton_{nb}", "peer", AHEAD_LOADER, (nb, "{}"), units=2,
             slow_s=slow, what=f"notebook {nb}'s Triton-autotuned peers' configs, compiled ahead",
             needs="fp8lab.peers.precompile:prebuild_ready", needs_args=True)
      for nb, slow in (("08", 188), ("05", 134), ("11", 85))),
)


def sass_tools() -> tuple[bool, str]:
    """What notebooks 08 and 10 check before they compile their SASS tables."""
    from ..toolchain.tools import have_tool
    missing = [t for t in ("nvcc", "cuobjdump") if not have_tool(t)]
    return (not missing, f"{' and '.join(missing)} not found" if missing else "")


def _module(loader: str):
    return importlib.import_module(loader.split(":", 1)[0])


def _resolve(loader: str) -> Callable:
    mod, fn = loader.split(":", 1)
    return getattr(importlib.import_module(mod), fn)


def unit_count(t: Target) -> int:
    """Translation units of ``t``: the most ninja jobs it can use (no torch needed)."""
    if isinstance(t.units, int):
        return max(1, t.units)
    mod = _module(t.loader)
    if t.units == "cutlass":
        return len(mod.built_kernels()) + 1     # one wrapper TU per kernel + the binding
    return max(1, len(getattr(mod, t.units)))


def _units_or_one(t: Target) -> int:
    # A module that cannot say (e.g. a bad $FP8LAB_CUTLASS_KERNELS) fails again in its build,
    # which reports the error; here it just gets one job.
    try:
        return unit_count(t)
    except Exception:  # noqa: BLE001
        return 1


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def log_dir() -> Path:
    from ..paths import cache_dir
    return cache_dir("prebuild")


# ---------------------------------------------------------------------------------------------
# The child: one target, in its own process (group), output into its log
# ---------------------------------------------------------------------------------------------
def _artifact(result) -> Path | None:
    """The file a loader produced: a cubin path, or an extension module's .so."""
    if isinstance(result, (str, os.PathLike)):
        return Path(result)
    f = getattr(result, "__file__", None)
    return Path(f) if f else None


def _error_line(exc: BaseException) -> str:
    """One line for the failure report: the first compiler error in the message if there is one
    (torch puts ninja's whole output into the RuntimeError), else the message's first line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    # ninja's "[3/8] nvcc ..." command lines can contain "error" in a flag: skip them.
    pick = next((ln for ln in lines[1:] if not ln.startswith("[") and re.search(r"\berror\b", ln, re.I)), None)
    line = pick or (lines[0] if lines else "")
    line = f"{type(exc).__name__}: {line}" if line else type(exc).__name__
    return line if len(line) <= 240 else line[:237] + "..."


def _child(target: Target, jobs: int, conn, log_path: str) -> None:
    # Own process group: a stop signal reaches ninja and nvcc too, not just this process.
    os.setpgrp()
    # SIGTERM -> SystemExit, so torch's `finally: baton.release()` removes the build lock.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ["MAX_JOBS"] = str(jobs)   # torch's ninja -j (cutlass_blockwise_sm90 reads it too)
    t0 = time.time()
    try:
        if target.needs:
            ok, why = _resolve(target.needs)(*(target.args if target.needs_args else ()))
            if not ok:
                conn.send({"ok": True, "skipped": str(why).splitlines()[0] if why else "not available"})
                return
        art = _artifact(_resolve(target.loader)(*target.args))
        # From cache when the loader handed back a file that existed before it was called.
        cached = art is not None and art.stat().st_mtime < t0
        conn.send({"ok": True, "cached": bool(cached), "artifact": str(art) if art else ""})
    except BaseException as exc:  # noqa: BLE001 - report every failure, SystemExit included
        traceback.print_exc()
        conn.send({"ok": False, "error": _error_line(exc)})
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        conn.close()


# ---------------------------------------------------------------------------------------------
# The parent: schedule targets on a budget of compile jobs
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Result:
    name: str
    ok: bool
    cached: bool
    seconds: float
    jobs: int
    error: str = ""
    log: str = ""
    skipped: str = ""         # why, when the target's `needs` said no


def _stop(proc) -> None:
    """SIGTERM the child's process group, SIGKILL what is left after the grace period."""
    for sig, wait_s in ((signal.SIGTERM, _TERM_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        proc.join(wait_s)
        if not proc.is_alive():
            return


def run_targets(targets: Sequence[Target], jobs: int, *, timeout_s: float = 1800.0,
                report: Callable[[Result], None] = lambda r: None, logs: Path | None = None) -> list[Result]:
    """Build ``targets`` in child processes, at most ``jobs`` compiler jobs at once in total.

    Slowest first (``slow_s``); a target starts with MAX_JOBS = min(its units, free jobs) once
    all its units are free, or with what is free when nothing else runs. ``report`` is called as
    each one ends."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")   # a clean interpreter: no inherited CUDA or torch state
    logs = logs or log_dir()
    jobs = max(1, int(jobs))
    pending = sorted(targets, key=lambda t: -t.slow_s)
    units = {t.name: _units_or_one(t) for t in pending}
    running: dict = {}            # name -> (proc, conn, start, jobs, log)
    results: list[Result] = []
    free = jobs

    def finish(name, ok, cached=False, error="", skipped=""):
        nonlocal free
        proc, conn, start, j, log = running.pop(name)
        free += j
        conn.close()
        r = Result(name, ok, cached, time.perf_counter() - start, j, error, str(log), skipped)
        results.append(r)
        report(r)

    try:
        while pending or running:
            for t in list(pending):
                want = units[t.name]
                if want <= free or (not running and free > 0):
                    j = min(want, free)
                    pending.remove(t)
                    free -= j
                    log = logs / f"{t.name}.log"
                    recv, send = ctx.Pipe(duplex=False)
                    proc = ctx.Process(target=_child, args=(t, j, send, str(log)), name=f"fp8lab-build-{t.name}")
                    proc.start()
                    send.close()
                    running[t.name] = (proc, recv, time.perf_counter(), j, log)
            now = time.perf_counter()
            left = min(s + timeout_s - now for _, _, s, _, _ in running.values())
            ready = wait([c for _, c, *_ in running.values()] + [p.sentinel for p, *_ in running.values()],
                         timeout=max(0.0, left))
            for name, (proc, conn, start, j, log) in list(running.items()):
                if conn in ready or proc.sentinel in ready:
                    try:
                        msg = conn.recv() if conn.poll() else None
                    except (EOFError, OSError):
                        msg = None
                    proc.join(30)
                    if proc.is_alive():     # answered but does not exit: leave nothing behind
                        _stop(proc)
                    if msg is None:
                        finish(name, False, error=f"build process died (exit code {proc.exitcode})")
                    else:
                        finish(name, msg["ok"], msg.get("cached", False), msg.get("error", ""),
                               msg.get("skipped", ""))
                elif time.perf_counter() - start > timeout_s:
                    _stop(proc)
                    finish(name, False, error=f"timed out after {timeout_s:.0f} s (stopped)")
    finally:
        for name, (proc, *_rest) in list(running.items()):   # interrupted: leave no compiler running
            _stop(proc)
    return results


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------
def add_arguments(p) -> None:
    p.add_argument("--jobs", "-j", type=int, metavar="N",
                   help="compiler processes at once, all targets together (default: the cores "
                        f"this process may use, {available_cores()} here)")
    p.add_argument("--only", action="append", metavar="NAME[,NAME...]",
                   help="build only these targets (repeatable, or comma-separated; see --list)")
    p.add_argument("--list", action="store_true", help="list the targets and exit")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                   help="seconds per target before it is stopped (default 1800)")
    p.add_argument("--smoke", action="store_true",
                   help="compile the peers' Triton configs for the notebooks' smoke parameters "
                        "(make smoke), not their defaults")
    p.add_argument("--no-ahead", action="store_true",
                   help="leave out the peers' Triton compile-ahead (peer_triton_*; make test-gpu)")
    p.add_argument("--summary", metavar="FILE",
                   help="also write the counts and per-target seconds as JSON here (make run "
                        "passes it to the runner for the wall-time record)")


def notebook_params(notebook_id: str, smoke: bool = False) -> dict:
    """A notebook's parameters as a run gives them: its parameters cell's defaults (literals),
    with the manifest's smoke parameters over them for ``smoke``."""
    import ast

    from . import notebooks

    spec = next(s for s in notebooks.load_manifest() if s.id == notebook_id)
    params = {}
    for name, d in notebooks.notebook_parameters(spec.path).items():
        try:
            params[name] = ast.literal_eval(d["default"])
        except (ValueError, SyntaxError, TypeError):
            continue
    return {**params, **(spec.smoke if smoke else {})}


def with_params(targets: Sequence[Target], smoke: bool = False) -> list[Target]:
    """The peer compile-ahead targets with their notebook's parameters in ``args``."""
    import json

    return [dataclasses.replace(t, args=(t.args[0], json.dumps(notebook_params(t.args[0], smoke))))
            if t.loader == AHEAD_LOADER else t for t in targets]


def _selected(only) -> list[Target] | str:
    """The targets --only names (all without it), or the one-line complaint."""
    if not only:
        return list(TARGETS)
    names = [n.strip() for arg in only for n in arg.split(",") if n.strip()]
    known = {t.name: t for t in TARGETS}
    bad = [n for n in names if n not in known]
    if bad or not names:
        return (f"fp8lab build: unknown target {', '.join(repr(b) for b in bad) or '(none given)'}; "
                f"known: {', '.join(known)}")
    return [known[n] for n in dict.fromkeys(names)]


def _stale_locks() -> list[Path]:
    from ..paths import cache_dir
    return sorted(cache_dir("torch_ext").glob("*/lock"))


def cli(a) -> int:
    sel = _selected(a.only)
    if isinstance(sel, str):
        print(sel, file=sys.stderr)
        return 2
    if getattr(a, "no_ahead", False):
        sel = [t for t in sel if t.loader != AHEAD_LOADER]
    if a.list:
        for t in sel:
            print(f"{t.name:<22} {t.kind:<9} {unit_count(t):>2} TU  {t.what}")
        return 0
    if a.jobs is not None and a.jobs < 1:
        print(f"fp8lab build: --jobs must be at least 1, got {a.jobs}", file=sys.stderr)
        return 2
    from ..report import provenance
    # The extension hashes include the visible GPUs' compute capabilities (kernels/_build.py):
    # built without a GPU they would land in folders no notebook on a GPU opens.
    if not provenance.gpu_present():
        print("fp8lab build: no GPU visible; nothing to build")
        return 0
    jobs = a.jobs or available_cores()
    sel = with_params(sel, smoke=getattr(a, "smoke", False))
    logs = log_dir()
    for lock in _stale_locks():
        print(f"fp8lab build: note: {lock} exists: a build is running there, or a killed one left it "
              f"(delete it if none is running, or that extension waits for ever)")
    print(f"fp8lab build: {len(sel)} targets, at most {jobs} compiler jobs at once; logs in {logs}")
    sys.stdout.flush()

    def report(r: Result) -> None:
        if r.skipped:
            print(f"  skipped {r.name:<16} {r.seconds:7.1f} s  {r.skipped}")
        elif r.ok:
            how = "cached" if r.cached else "built "
            print(f"  {how}  {r.name:<16} {r.seconds:7.1f} s" + ("" if r.cached else f"  ({r.jobs} jobs)"))
        else:
            print(f"  FAILED  {r.name:<16} {r.seconds:7.1f} s  {r.error}  (log: {r.log})", file=sys.stderr)
        sys.stdout.flush()

    t0 = time.perf_counter()
    results = run_targets(sel, jobs, timeout_s=a.timeout, report=report, logs=logs)
    n_fail = sum(not r.ok for r in results)
    n_cached = sum(r.ok and r.cached for r in results)
    n_skip = sum(bool(r.skipped) for r in results)
    n_built = len(results) - n_fail - n_cached - n_skip
    wall = time.perf_counter() - t0
    print(f"fp8lab build: {n_built} built, {n_cached} cached, {n_skip} skipped, {n_fail} failed "
          f"in {wall:.1f} s ({jobs} jobs)")
    if getattr(a, "summary", None):
        write_summary(a.summary, results, wall, jobs)
    # a peer that does not build is a not-run row in its notebooks, not a failed make run
    kinds = {t.name: t.kind for t in sel}
    peer_fail = [r.name for r in results if not r.ok and kinds.get(r.name) == "peer"]
    if peer_fail:
        print(f"fp8lab build: {', '.join(peer_fail)} failed: a peer (other people's code); its notebook rows "
              "will say not-run, the run goes on")
    return 1 if n_fail > len(peer_fail) else 0


def write_summary(path, results, wall_s: float, jobs: int) -> None:
    """The build's counts and per-target seconds as JSON (atomically)."""
    import json

    from ..report.results import atomic_write_bytes
    n_fail = sum(not r.ok for r in results)
    n_cached = sum(r.ok and r.cached for r in results)
    n_skip = sum(bool(r.skipped) for r in results)
    doc = {"built": len(results) - n_fail - n_cached - n_skip, "cached": n_cached, "skipped": n_skip,
           "failed": n_fail, "wall_s": round(wall_s, 1), "jobs": jobs,
           "targets": {r.name: {"ok": r.ok, "cached": r.cached, "seconds": round(r.seconds, 1),
                                **({"skipped": r.skipped} if r.skipped else {})} for r in results}}
    atomic_write_bytes(Path(path), (json.dumps(doc, indent=2) + "\n").encode())
