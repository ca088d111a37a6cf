"""Is a peer here? Import probes, versions, and where a source build lives.

A peer is *available* when its module imports (pip-installed peers) or its extension has been
built from its own source into an ignored folder (``build/peers/<name>``; the original Marlin and
DeepGEMM).
Anything else -- not installed, the wrong GPU, an import that raises -- is an
:class:`Availability` with ``ok=False``, the reason in one line and the install line, which
the sweeps turn into a ``not-run`` row: never an exception, never a silent gap.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata as md
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from .. import paths
from ..arms import peer_catalog

__all__ = ["Availability", "PeerUnavailable", "availability", "marlin_src", "marlin_build_dir", "import_marlin",
           "deepgemm_src", "deepgemm_build_dir", "deepgemm_build_info", "deepgemm_env", "import_deepgemm",
           "probe_deepgemm", "choose_deepgemm_variant", "DEEPGEMM_VARIANTS", "reset"]

MARLIN_SRC_ENV = "FP8LAB_MARLIN_SRC"
MARLIN_BUILD_ENV = "FP8LAB_MARLIN_BUILD"
DEEPGEMM_SRC_ENV = "FP8LAB_DEEPGEMM_SRC"
DEEPGEMM_BUILD_ENV = "FP8LAB_DEEPGEMM_BUILD"


class PeerUnavailable(RuntimeError):
    """A peer that cannot run here (missing, unsupported GPU or shape): becomes a not-run row."""


@dataclass(frozen=True)
class Availability:
    peer: str
    ok: bool
    version: str = ""
    reason: str = ""        # why not (one line), "" when ok
    install: str = ""

    def status(self) -> str:
        """The table's status text of a peer that did not run."""
        return f"not-run: {self.reason}; install: {self.install}"


def marlin_src() -> Path:
    """Where Marlin's source is unpacked: $FP8LAB_MARLIN_SRC, else build/peers/src/marlin (ignored)."""
    env = os.environ.get(MARLIN_SRC_ENV)
    return Path(env) if env else paths.repo_root() / "build" / "peers" / "src" / "marlin"


#: Marlin builds, in the order they are tried: its source as it is, and the same source with the
#: L2 ``evict_first`` cache hint of its weight loads removed (``cp.async ... L2::cache_hint`` with a
#: ``createpolicy.fractional`` policy; Triton stopped emitting such fractional cp.async policies
#: because ptxas miscompiled them). The second is used only when the first fails its probe.
MARLIN_VARIANTS = ("as-is", "no-l2-hint")
MARLIN_VARIANT_ENV = "FP8LAB_MARLIN_VARIANT"


def marlin_build_dir(variant: str = "as-is") -> Path:
    """Where ``python -m fp8lab.peers build marlin`` puts the extension: $FP8LAB_MARLIN_BUILD, else
    build/peers/marlin (ignored); the ``no-l2-hint`` variant beside it, in marlin-no-l2-hint."""
    if variant not in MARLIN_VARIANTS:
        raise ValueError(f"Marlin variant must be one of {MARLIN_VARIANTS}, got {variant!r}")
    env = os.environ.get(MARLIN_BUILD_ENV)
    base = Path(env) if env else paths.repo_root() / "build" / "peers" / "marlin"
    return base if variant == "as-is" else base.with_name(base.name + "-" + variant)


#: what the variant in use was chosen by, for the peer's config column ("" until chosen)
MARLIN_CHOICE: dict = {}


#: part of every cached probe's stamp: raised when a probe's answer for the same build can change
#: (2: a DeepGEMM variant with its own build no longer needs the as-is build, whose absence the
#: prebuild's parallel builds could cache as that variant's failure)
PROBE_CACHE_VERSION = 2


def _probe_child(build: Path, so: Path, args: list, env: dict, timeout: float,
                 cmd: Optional[list] = None, stem: str = "probe") -> tuple[bool, str]:
    """Run ``python -m fp8lab.peers <args>`` (or ``cmd``) in its own process (a kernel that faults, or a binding
    that crashes, must not take this process's CUDA context with it): (ok, one line). Its whole
    output goes to ``<stem>.log`` beside the build; (ok, line) is cached in ``<stem>.json`` against
    the extension's name and mtime, so a box probes each build once."""
    import signal
    import subprocess
    import sys as _sys

    cache = build / f"{stem}.json"
    stamp = f"{so.name}:{so.stat().st_mtime_ns}:{PROBE_CACHE_VERSION}"
    if cache.exists():
        try:
            d = json.loads(cache.read_text())
            if d.get("stamp") == stamp:
                return bool(d["ok"]), str(d["line"])
        except (ValueError, KeyError):
            pass
    cmd = cmd or [_sys.executable, "-m", "fp8lab.peers", *args]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(paths.repo_root()),
                           env={**os.environ, "PYTHONFAULTHANDLER": "1", **env})
        out = r.stdout + r.stderr
        lines = [ln for ln in out.strip().splitlines() if ln.strip()]
        ok = r.returncode == 0 and bool(lines) and lines[-1].startswith("ok")
        line = lines[-1][:240] if lines else f"exit status {r.returncode}, no output"
        if not ok and r.returncode < 0:     # killed by a signal: what it printed before the crash
            name = signal.Signals(-r.returncode).name if -r.returncode in signal.Signals._value2member_map_ \
                else str(-r.returncode)
            before = [ln for ln in out[:out.find("Fatal Python error")].splitlines() if ln.strip()]
            line = f"the probe died of {name}" + (f" after: {before[-1].strip()}" if before else "")
            line = line[:240]
        elif not ok:
            err = [ln for ln in lines if "Error" in ln or "error" in ln]
            line = (err[-1] if err else line)[:240]
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        ok, line = False, f"the probe did not finish in {timeout:g} s"
    (build / f"{stem}.log").write_text(f"$ {' '.join(cmd)}\n{out}")
    cache.write_text(json.dumps(dict(stamp=stamp, ok=ok, line=line)))
    return ok, line


def read_json(path: Path) -> dict:
    """A build's or a source unpack's JSON record (build_info.json, .fp8lab-source.json); {} when it
    is missing or does not parse."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def probe_extension(build: Path, namespace: str, command: str, probing_env: str,
                    timeout: float = 300.0) -> tuple[bool, str]:
    """``python -m fp8lab.peers <command>`` in its own process (:func:`_probe_child`) for the
    extension ``<namespace>*.so`` in ``build`` (a peer built from source: vLLM's Marlin, CUTLASS
    and quantiser), with ``probing_env`` set so that the probe's own import does not probe again."""
    so = next(Path(build).glob(f"{namespace}*.so"), None)
    if so is None:
        return False, f"not built (no {namespace}*.so in {build})"
    return _probe_child(Path(build), so, [command], {probing_env: "1"}, timeout)


def load_ops(so: Path, namespace: str, op: str):
    """torch.ops.<namespace> with ``op`` registered, loading ``so`` unless it is there already."""
    import torch

    if not hasattr(torch.ops, namespace) or not hasattr(getattr(torch.ops, namespace), op):
        torch.ops.load_library(str(so))
    return getattr(torch.ops, namespace)


def probe_marlin(variant: str, timeout: float = 180.0) -> tuple[bool, str]:
    """Run one small Marlin multiply, checked, in a separate process (:func:`_probe_child`)."""
    build = marlin_build_dir(variant)
    so = next(build.glob("marlin_cuda*.so"), None)
    if so is None:
        return False, f"not built (no marlin_cuda*.so in {build})"
    return _probe_child(build, so, ["probe-marlin", "--variant", variant], {MARLIN_VARIANT_ENV: variant}, timeout)


def _choose_variant(what: str, variants: tuple, env_name: str, choice: dict,
                    probe: Callable[[str], tuple]) -> str:
    """The build of a peer this process uses: ``$env_name``, else the first of ``variants`` whose
    separate-process probe passes (``choice`` keeps it and every probe's line, for the config
    column); PeerUnavailable with every probe's line when none does."""
    forced = os.environ.get(env_name)
    if forced:
        if forced not in variants:
            raise PeerUnavailable(f"${env_name}={forced!r}: must be one of {variants}")
        choice.setdefault("variant", forced)
        choice.setdefault("why", f"${env_name}")
        return forced
    if "variant" in choice:
        return choice["variant"]
    tried = []
    for v in variants:
        ok, line = probe(v)
        if ok:
            choice.update(variant=v, why="; ".join(tried + [f"{v}: {line}"]))
            return v
        tried.append(f"{v}: {line}")
    raise PeerUnavailable(f"no {what} build passed its separate-process probe: " + "; ".join(tried))


def choose_marlin_variant() -> str:
    """The Marlin build this process imports: $FP8LAB_MARLIN_VARIANT, else the first of
    MARLIN_VARIANTS whose separate-process probe passes."""
    return _choose_variant("Marlin", MARLIN_VARIANTS, MARLIN_VARIANT_ENV, MARLIN_CHOICE, probe_marlin)


def _marlin_version() -> str:
    info = marlin_build_dir() / "build_info.json"
    if info.exists():
        try:
            d = json.loads(info.read_text())
            return f"{d.get('version', '?')} (source {d.get('source_commit', '?')[:12]}, built with {d.get('nvcc', '?')})"
        except (OSError, ValueError):
            pass
    try:
        return md.version("marlin")
    except md.PackageNotFoundError:
        return "source build"


def _need_torch() -> None:
    """torch loads first (a peer's extension links against libtorch); PeerUnavailable without it."""
    try:
        importlib.import_module("torch")
    except ImportError as e:
        raise PeerUnavailable(f"torch is not importable ({e})") from e


def import_marlin():
    """Marlin's Python package (``mul``, ``Layer``): installed, or its source beside the
    extension built here. PeerUnavailable saying which part is missing."""
    _need_torch()
    try:
        return importlib.import_module("marlin")
    except ImportError:
        pass
    build, src = marlin_build_dir(choose_marlin_variant()), marlin_src()
    if not any(build.glob("marlin_cuda*.so")):
        raise PeerUnavailable(f"Marlin's extension is not built (no marlin_cuda*.so in {build})")
    if not (src / "marlin" / "__init__.py").exists():
        raise PeerUnavailable(f"Marlin's source is not at {src} (set ${MARLIN_SRC_ENV})")
    for p in (str(build), str(src)):
        if p not in sys.path:
            sys.path.insert(0, p)
    try:
        return importlib.import_module("marlin")
    except ImportError as e:
        raise PeerUnavailable(f"Marlin does not import: {str(e).splitlines()[0][:200]}") from e


def deepgemm_src() -> Path:
    """Where DeepGEMM's source is unpacked: $FP8LAB_DEEPGEMM_SRC, else build/peers/src/deepgemm (ignored)."""
    env = os.environ.get(DEEPGEMM_SRC_ENV)
    return Path(env) if env else paths.repo_root() / "build" / "peers" / "src" / "deepgemm"


#: DeepGEMM on one box, in the order they are tried (each must pass its own separate-process
#: probe): its build as it is; the same build imported with RTLD_DEEPBIND (its binding looks up
#: symbols in its own dependencies first); and a second build with libstdc++ linked into it,
#: statically, its symbols bound inside it and not exported. On the shared H200 the first two die
#: of SIGSEGV at the first JIT call (its std::filesystem calls bind to copies torch's libraries
#: export, and those precede libstdc++ among its dependencies too: scripts/probes/deepgemm_bindings.py);
#: the third passes.
DEEPGEMM_VARIANTS = ("as-is", "deepbind", "static-libstdcxx")
DEEPGEMM_VARIANT_ENV = "FP8LAB_DEEPGEMM_VARIANT"
#: the variant that needs a build of its own (the others import build/peers/deepgemm)
DEEPGEMM_OWN_BUILD = ("static-libstdcxx",)
#: what the variant in use was chosen by, for the peer's config column ("" until chosen)
DEEPGEMM_CHOICE: dict = {}


def deepgemm_build_dir(variant: str = "as-is") -> Path:
    """Where ``python -m fp8lab.peers build deepgemm`` puts the ``deep_gemm`` package with its
    extension: $FP8LAB_DEEPGEMM_BUILD, else build/peers/deepgemm (ignored); a variant with a build
    of its own beside it (build/peers/deepgemm-static-libstdcxx)."""
    if variant not in DEEPGEMM_VARIANTS:
        raise ValueError(f"DeepGEMM variant must be one of {DEEPGEMM_VARIANTS}, got {variant!r}")
    env = os.environ.get(DEEPGEMM_BUILD_ENV)
    base = Path(env) if env else paths.repo_root() / "build" / "peers" / "deepgemm"
    return base.with_name(base.name + "-" + variant) if variant in DEEPGEMM_OWN_BUILD else base


def deepgemm_build_info(build: Optional[Path] = None) -> dict:
    """The build's build_info.json ({} when there is none or it does not parse)."""
    return read_json((build or deepgemm_build_dir()) / "build_info.json")


def deepgemm_env(info: dict) -> dict:
    """What DeepGEMM's JIT reads at run time, for variables not already set: its kernel cache
    ($DG_JIT_CACHE_DIR, default ~/.deep_gemm: fp8lab's cache instead) and the CUDA toolkit whose
    nvcc it runs ($CUDA_HOME, as the build found it; its own guess is ``which nvcc``)."""
    env = {"DG_JIT_CACHE_DIR": str(paths.cache_dir("deepgemm"))}
    if info.get("cuda_home"):
        env["CUDA_HOME"] = info["cuda_home"]
    return {k: v for k, v in env.items() if not os.environ.get(k)}


def _deepgemm_missing(build: Path) -> Optional[str]:
    """Why the build in ``build`` cannot be imported, one line with what to run; None when it can."""
    if not any((build / "deep_gemm").glob("_C*.so")):
        if not (deepgemm_src() / "csrc" / "python_api.cpp").exists():
            return (f"DeepGEMM's source is not at {deepgemm_src()}: run `python scripts/peers_offline.py --sources` "
                    "then `python -m fp8lab.peers build deepgemm`")
        return f"DeepGEMM is not built (no deep_gemm/_C*.so in {build}): run `python -m fp8lab.peers build deepgemm`"
    for sub in ("deep_gemm", "cute", "cutlass"):
        if not (build / "deep_gemm" / "include" / sub).is_dir():
            return (f"DeepGEMM's JIT include {build / 'deep_gemm' / 'include' / sub} is missing (CUTLASS headers "
                    "moved?): run `python -m fp8lab.peers build deepgemm` again")
    return None


#: set in the probe's own process: its import of the build must not probe again
DEEPGEMM_PROBING_ENV = "FP8LAB_DEEPGEMM_PROBING"


def probe_deepgemm(variant: str = "as-is", timeout: float = 300.0) -> tuple[bool, str]:
    """One small checked DeepGEMM multiply (its JIT compiles the kernel first) with ``variant`` in
    a separate process (:func:`_probe_child`; probe-<variant>.json and .log beside the build), with
    its JIT's debug lines on."""
    build = deepgemm_build_dir(variant)
    so = next((build / "deep_gemm").glob("_C*.so"), None)
    if so is None:
        return False, f"not built (no deep_gemm/_C*.so in {build})"
    return _probe_child(build, so, ["probe-deepgemm", "--variant", variant],
                        {DEEPGEMM_PROBING_ENV: "1", DEEPGEMM_VARIANT_ENV: variant, "DG_JIT_DEBUG": "1"}, timeout,
                        stem=f"probe-{variant}")


def choose_deepgemm_variant() -> str:
    """The DeepGEMM build this process imports: $FP8LAB_DEEPGEMM_VARIANT, else the first of
    DEEPGEMM_VARIANTS whose separate-process probe passes on this GPU."""
    return _choose_variant("DeepGEMM", DEEPGEMM_VARIANTS, DEEPGEMM_VARIANT_ENV, DEEPGEMM_CHOICE, probe_deepgemm)


@contextlib.contextmanager
def _dlopen_flags(flags: Optional[int]):
    """sys.setdlopenflags(flags) for the imports inside (None: unchanged)."""
    if flags is None:
        yield
        return
    old = sys.getdlopenflags()
    sys.setdlopenflags(flags)
    try:
        yield
    finally:
        sys.setdlopenflags(old)


def import_deepgemm():
    """DeepGEMM's ``deep_gemm`` package: a build here (build/peers/deepgemm, or a variant's own build
    beside it; its JIT's variables set from its build_info.json) in the first variant whose
    separate-process probe passed on this GPU, else an installed one. PeerUnavailable naming what
    to run, or what every probe saw. A variant with a build of its own needs nothing of the as-is
    build: the prebuild builds the two at once and probes each as soon as it is built."""
    why = _deepgemm_missing(deepgemm_build_dir())
    own = [v for v in DEEPGEMM_OWN_BUILD if _deepgemm_missing(deepgemm_build_dir(v)) is None]
    installed = importlib.util.find_spec("deep_gemm") is not None
    if why is not None and not own and not installed:
        raise PeerUnavailable(why)          # what to run comes before what else is missing
    _need_torch()
    flags = None
    if why is None or own:
        if os.environ.get(DEEPGEMM_PROBING_ENV) or _gpu_sm() is None:
            variant = os.environ.get(DEEPGEMM_VARIANT_ENV) or ("as-is" if why is None else own[0])
        else:
            variant = choose_deepgemm_variant()
        if variant not in DEEPGEMM_VARIANTS:
            raise PeerUnavailable(f"${DEEPGEMM_VARIANT_ENV}={variant!r}: must be one of {DEEPGEMM_VARIANTS}")
        build = deepgemm_build_dir(variant)
        if miss := _deepgemm_missing(build):
            raise PeerUnavailable(miss)
        if variant == "deepbind":
            flags = os.RTLD_NOW | os.RTLD_DEEPBIND
        os.environ.update(deepgemm_env(deepgemm_build_info(build)))
        if str(build) not in sys.path:
            sys.path.insert(0, str(build))
    try:
        with _dlopen_flags(flags):
            return importlib.import_module("deep_gemm")
    except Exception as e:  # noqa: BLE001 - an extension that breaks at import (ABI, CUDA) is a reason
        raise PeerUnavailable(f"deep_gemm fails at import: {type(e).__name__}: {str(e).splitlines()[0][:160]}") from e


def _deepgemm_version() -> str:
    chosen = DEEPGEMM_CHOICE.get("variant", "as-is")
    d = next((i for v in (chosen, *DEEPGEMM_VARIANTS) if (i := deepgemm_build_info(deepgemm_build_dir(v)))), {})
    if d:
        return (f"{d.get('version', '?')} (source {str(d.get('source_commit', '?'))[:12]}, CUTLASS "
                f"{d.get('cutlass_version', '?')} headers, built with {d.get('nvcc', '?')})")
    try:
        return md.version("deep_gemm")
    except md.PackageNotFoundError:
        return "source build"


def _by_name(spec: str) -> Callable:
    """``module:function`` -> the function (peers whose modules import this one are named so)."""
    mod, fn = spec.split(":", 1)
    return getattr(importlib.import_module(mod), fn)


#: the import of each peer built from its own source (catalog ``discover == "build"``), by module:
#: a function here, or ``module:function`` for a peer module of its own (vLLM's Marlin GEMMs)
BUILD_IMPORTS = {"marlin_cuda": import_marlin, "deep_gemm": import_deepgemm,
                 "fp8lab_vllm_marlin": "fp8lab.peers.vllm_marlin:package",
                 "fp8lab_vllm_cutlass": "fp8lab.peers.vllm_cutlass:ops",
                 "fp8lab_vllm_quant": "fp8lab.peers.vllm_quant:ops",
                 "fp8lab_sglang_quant": "fp8lab.peers.sglang_quant:ops",
                 "fp8lab_vllm_triton": "fp8lab.peers.vllm_triton:kernel"}
BUILD_VERSIONS = {"marlin_cuda": _marlin_version, "deep_gemm": _deepgemm_version,
                  "fp8lab_vllm_marlin": "fp8lab.peers.vllm_marlin:version",
                  "fp8lab_vllm_cutlass": "fp8lab.peers.vllm_cutlass:version",
                  "fp8lab_vllm_quant": "fp8lab.peers.vllm_quant:version",
                  "fp8lab_sglang_quant": "fp8lab.peers.sglang_quant:version",
                  "fp8lab_vllm_triton": "fp8lab.peers.vllm_triton:version"}


@contextlib.contextmanager
def triton_autotune_cache():
    """Triton autotuners created inside (at a peer module's import) keep their results on disk
    (TRITON_CACHE_AUTOTUNING; Triton's cache folder): a peer such as torchao's blockwise GEMM
    tunes 48 configs per (N, K, log2 M) bucket, minutes per notebook, and with the cache a box
    tunes each bucket once (a deployment keeps its tuning too). Scoped to the peers' imports:
    fp8lab's own autotuners are built later, outside it, and tune in every run."""
    old_env = os.environ.get("TRITON_CACHE_AUTOTUNING")
    os.environ["TRITON_CACHE_AUTOTUNING"] = "1"
    knobs, old = None, None
    try:
        import triton
        knobs = getattr(getattr(triton, "knobs", None), "autotuning", None)
        if knobs is not None:
            old = knobs.cache
            knobs.cache = True
    except Exception:  # noqa: BLE001 - no Triton, or one without knobs: the variable is enough
        knobs = None
    try:
        yield
    finally:
        if knobs is not None:
            knobs.cache = old
        if old_env is None:
            os.environ.pop("TRITON_CACHE_AUTOTUNING", None)
        else:
            os.environ["TRITON_CACHE_AUTOTUNING"] = old_env


#: (warmup, rep) milliseconds a peer's Triton autotuner times each of its configs for before it
#: picks one. Triton's default is (25, 100): torchao's blockwise GEMM times 48 configs per
#: (N, K, log2 M) bucket, ~6 s a bucket, 89 of notebook 05's 162 s on a fresh H200 (2412793).
#: At (5, 20) a 10 us kernel still runs ~2000 times per config and a 1 ms one ~20 times; the
#: list, the pruning and the choice stay the peer's own, and the chosen kernel is then timed by
#: fp8lab's harness like every arm. fp8lab's own autotuners keep Triton's default.
PEER_AUTOTUNE_MS = (5, 20)
#: top-level modules imported through import_peer_module: their autotuners get PEER_AUTOTUNE_MS
_PEER_MODULES: set = set()
_BENCH = {"installed": False}


def _install_peer_bench() -> bool:
    """Give the autotuners of the peer modules (``_PEER_MODULES``, by their kernel's module)
    PEER_AUTOTUNE_MS, by wrapping Triton's ``Autotuner.do_bench`` (a cached property that, when
    the autotuner was given no benchmarker, returns the driver's: ``triton.testing.do_bench``).
    False where this Triton has no such property: the peers then tune with Triton's default."""
    if _BENCH["installed"]:
        return True
    try:
        import functools

        import triton.testing
        from triton.runtime import autotuner as at
    except Exception:  # noqa: BLE001 - no Triton: nothing autotunes
        return False
    orig = at.Autotuner.__dict__.get("do_bench")
    getter = orig.func if isinstance(orig, functools.cached_property) else None
    if getter is None:
        return False

    def do_bench(self):
        if getattr(self, "_do_bench", None) is None and _is_peer_autotuner(self):
            w, r = PEER_AUTOTUNE_MS
            return functools.partial(triton.testing.do_bench, warmup=w, rep=r)
        return getter(self)

    prop = functools.cached_property(do_bench)
    prop.__set_name__(at.Autotuner, "do_bench")
    at.Autotuner.do_bench = prop
    _BENCH["installed"] = True
    return True


#: what autotune_choices blocks collect: kernel name -> the config it ran with
_CHOICES: list = []


def _is_peer_autotuner(tuner) -> bool:
    mod = getattr(getattr(tuner, "base_fn", None), "__module__", "") or ""
    return mod.split(".")[0] in _PEER_MODULES


def config_text(cfg) -> str:
    """A Triton config in a row's words: its kwargs, warps and stages (``num_ctas: 1`` and
    ``maxnreg: None``, Triton's defaults, left out)."""
    kw = ", ".join(f"{k}={v}" for k, v in (getattr(cfg, "kwargs", None) or {}).items())
    rest = [f"num_warps={cfg.num_warps}", f"num_stages={cfg.num_stages}"] if hasattr(cfg, "num_warps") else [str(cfg)]
    if getattr(cfg, "num_ctas", 1) not in (1, None):
        rest.append(f"num_ctas={cfg.num_ctas}")
    if getattr(cfg, "maxnreg", None) is not None:
        rest.append(f"maxnreg={cfg.maxnreg}")
    return ", ".join(x for x in (kw, *rest) if x)


def record_choice(tuner) -> None:
    """Note the config a peer's autotuner just ran with in every open autotune_choices block."""
    cfg = getattr(tuner, "best_config", None)
    if cfg is None or not _is_peer_autotuner(tuner):
        return
    for d in _CHOICES:
        d[tuner.base_fn.__name__] = config_text(cfg)


@contextlib.contextmanager
def autotune_choices():
    """The configs the peers' Triton autotuners ran with inside the block, kernel -> config:
    what the row's ``config`` says the peer ran (its autotuner may pick another on another run).
    ``Autotuner.run`` notes them only while a block is open (the sweeps open one around a
    peer's checked call, never around its timing)."""
    d: dict = {}
    at = None
    if not _CHOICES:
        try:
            from triton.runtime import autotuner as at
        except Exception:  # noqa: BLE001 - no Triton: nothing autotunes, nothing to note
            at = None
    if at is not None:
        run = at.Autotuner.run

        def run_and_note(self, *args, **kwargs):
            out = run(self, *args, **kwargs)
            record_choice(self)
            return out

        at.Autotuner.run = run_and_note
    _CHOICES.append(d)
    try:
        yield d
    finally:
        _CHOICES.remove(d)
        if at is not None:
            at.Autotuner.run = run


def with_choices(config: str, chosen: dict) -> str:
    """A row's ``config``: the adapter's text, then each autotuned kernel and the config it ran."""
    ran = "; ".join(f"ran {k} [{v}]" for k, v in sorted(chosen.items()))
    return "; ".join(x for x in (config, ran) if x)


def autotune_note() -> str:
    """How a peer's autotuner times its configs here, for its rows' ``config``."""
    if _BENCH["installed"]:
        w, r = PEER_AUTOTUNE_MS
        return f"its autotuner timed each config {w} + {r} ms (Triton's default 25 + 100)"
    return "its autotuner timed each config with Triton's default (25 + 100 ms)"


def import_peer_module(module: str):
    """``importlib.import_module`` with the peer's Triton autotuners caching (triton_autotune_cache)
    and timing each config for PEER_AUTOTUNE_MS."""
    _PEER_MODULES.add(module.split(".")[0])
    _install_peer_bench()
    with triton_autotune_cache():
        return importlib.import_module(module)


def _probe_import(module: str) -> None:
    try:
        import_peer_module(module)
    except ImportError as e:
        raise PeerUnavailable(f"{module} is not installed ({str(e).splitlines()[0][:160]})") from e
    except Exception as e:  # noqa: BLE001 - a package that breaks at import (ABI, CUDA) is a reason, not a crash
        raise PeerUnavailable(f"{module} fails at import: {type(e).__name__}: {str(e).splitlines()[0][:160]}") from e


def _version(p: peer_catalog.Peer) -> str:
    if p.discover == "build":
        f = BUILD_VERSIONS[p.module]
        return (_by_name(f) if isinstance(f, str) else f)()
    for name in (p.dist, p.module):
        if not name:
            continue
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    mod = sys.modules.get(p.module)
    return str(getattr(mod, "__version__", "?"))


def _gpu_sm() -> Optional[int]:
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
        return 10 * major + minor
    except Exception:  # noqa: BLE001 - no torch, or no driver: not a GPU box
        return None


_CACHE: dict = {}


def reset() -> None:
    """Forget cached probes (tests; a build that just finished)."""
    _CACHE.clear()


def availability(peer_id: str, *, probe: Optional[Callable[[peer_catalog.Peer], None]] = None,
                 sm: Optional[int] = -1) -> Availability:
    """Can ``peer_id`` run here? ``probe`` replaces the import probe (tests); ``sm`` the
    device's compute capability as 10 * major + minor (-1: ask torch; None: no GPU)."""
    p = peer_catalog.get(peer_id)
    key = (peer_id, probe, sm)
    if key in _CACHE:
        return _CACHE[key]
    try:
        if probe is not None:
            probe(p)
        elif p.discover == "build":
            f = BUILD_IMPORTS[p.module]
            (_by_name(f) if isinstance(f, str) else f)()
        else:
            _probe_import(p.module)
        cap = _gpu_sm() if sm == -1 else sm
        if cap is not None and cap < p.min_sm:
            raise PeerUnavailable(f"needs sm_{p.min_sm}+, this GPU is sm_{cap}")
        a = Availability(peer_id, True, version=_version(p), install=p.install)
    except PeerUnavailable as e:
        a = Availability(peer_id, False, reason=str(e), install=p.install)
    _CACHE[key] = a
    return a
