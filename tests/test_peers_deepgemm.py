"""DeepGEMM as a peer built from its own source, on CPU: a missing source or build is a not-run
line naming what to run (never a traceback), build_info.json round trip, the offline gatherer's
file selection (tiny fake git trees), the build's package staging, and -- where the source,
nvcc and CUTLASS's headers are here -- one of its JIT's sm_90a kernels and its binding compiling."""

import importlib.util
import json
import os
import shutil
import sys
import subprocess
from pathlib import Path

import pytest

from fp8lab import peers
from fp8lab.arms import peer_catalog
from fp8lab.peers import build, discover
from fp8lab.peers.__main__ import main

ROOT = Path(__file__).resolve().parent.parent


def _offline():
    spec = importlib.util.spec_from_file_location("peers_offline", ROOT / "scripts" / "peers_offline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def no_deepgemm(tmp_path, monkeypatch):
    """No DeepGEMM source, build or installed package: (src, build) folders, both empty."""
    src, out = tmp_path / "src", tmp_path / "build"
    monkeypatch.setenv(discover.DEEPGEMM_SRC_ENV, str(src))
    monkeypatch.setenv(discover.DEEPGEMM_BUILD_ENV, str(out))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deep_gemm" else real(name, *a))
    discover.reset()
    yield src, out
    discover.reset()


def _fake_source(src: Path) -> Path:
    (src / "csrc").mkdir(parents=True)
    (src / "csrc" / "python_api.cpp").write_text("// fake\n")
    (src / "deep_gemm" / "include" / "deep_gemm").mkdir(parents=True)
    (src / "deep_gemm" / "__init__.py").write_text("__version__ = '9.8.7'\n")
    return src


def test_missing_source_is_a_not_run_line_with_the_commands(no_deepgemm):
    a = discover.availability("peer_deepgemm", sm=90)
    assert not a.ok and "python scripts/peers_offline.py --sources" in a.reason
    assert "python -m fp8lab.peers build deepgemm" in a.reason and "\n" not in a.reason
    assert a.status().startswith("not-run: DeepGEMM's source is not at ")
    assert a.install == peer_catalog.get("peer_deepgemm").install and "build deepgemm" in a.install
    row = peers.table(["peer_deepgemm"]).iloc[0]
    assert row["here"] == "no" and "peers_offline.py --sources" in row["reason"]


def test_source_without_a_build_says_build_it(no_deepgemm):
    _fake_source(no_deepgemm[0])
    a = discover.availability("peer_deepgemm", sm=90)
    assert not a.ok and a.reason.startswith("DeepGEMM is not built (no deep_gemm/_C*.so in ")
    assert a.reason.endswith("run `python -m fp8lab.peers build deepgemm`")


def test_the_cli_says_what_is_missing_without_a_traceback(no_deepgemm, capsys):
    assert main(["build", "deepgemm"]) == 2
    assert main(["check-compile", "deepgemm"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 2


def test_a_build_missing_its_cutlass_links_says_rebuild(tmp_path):
    pkg = tmp_path / "deep_gemm"
    for sub in ("deep_gemm", "cute", "cutlass"):
        (pkg / "include" / sub).mkdir(parents=True)
    (pkg / "_C.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    assert discover._deepgemm_missing(tmp_path) is None
    (pkg / "include" / "cute").rmdir()
    assert "build deepgemm` again" in discover._deepgemm_missing(tmp_path)


def test_build_info_round_trip(tmp_path, monkeypatch):
    info = dict(version="2.6.1", source_commit="54e22612409371d6364144b69086735beb54e98b", cutlass_version="4.2.0",
                nvcc="Build cuda_13.0", cuda_home="/opt/cuda-13", cxx_flags=list(build.DG_CXX_FLAGS))
    build.write_deepgemm_build_info(tmp_path, info)
    assert discover.deepgemm_build_info(tmp_path) == info
    monkeypatch.setenv(discover.DEEPGEMM_BUILD_ENV, str(tmp_path))
    assert discover._deepgemm_version() == ("2.6.1 (source 54e226124093, CUTLASS 4.2.0 headers, "
                                            "built with Build cuda_13.0)")
    for k in ("CUDA_HOME", "DG_JIT_CACHE_DIR"):
        monkeypatch.delenv(k, raising=False)
    env = discover.deepgemm_env(info)
    assert env["CUDA_HOME"] == "/opt/cuda-13" and env["DG_JIT_CACHE_DIR"].endswith("deepgemm")
    monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda")
    assert "CUDA_HOME" not in discover.deepgemm_env(info)         # what the caller set stays
    (tmp_path / "build_info.json").write_text("{not json")
    assert discover.deepgemm_build_info(tmp_path) == {}


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def _repo(path: Path, files: dict) -> str:
    path.mkdir()
    _git(path, "init", "-q")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "x")
    return _git(path, "rev-parse", "HEAD")


def _files(root: Path) -> set:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_gatherer_takes_what_the_build_and_jit_need(tmp_path):
    fmt = _repo(tmp_path / "fmt", {"include/fmt/base.h": "", "include/fmt/format.h": "", "LICENSE": "",
                                   "src/format.cc": "", "test/t.cc": "", "README.md": ""})
    dg = tmp_path / "dg"
    _repo(dg, {"csrc/python_api.cpp": "", "csrc/jit/compiler.hpp": "", "deep_gemm/__init__.py": "",
               "deep_gemm/include/deep_gemm/impls/k.cuh": "", "tests/test_x.py": "", "figures/f.png": "",
               "setup.py": "", "LICENSE": "", "README.md": ""})
    cutlass = "c" * 40
    _git(dg, "update-index", "--add", "--cacheinfo", f"160000,{fmt},third-party/fmt")
    _git(dg, "update-index", "--add", "--cacheinfo", f"160000,{cutlass},third-party/cutlass")
    _git(dg, "commit", "-q", "-m", "submodules")
    off = _offline()
    dest = tmp_path / "out" / "deepgemm"
    commit = off.deepgemm_source(dest, str(dg / ".git"), str(tmp_path / "fmt" / ".git"))
    assert commit == _git(dg, "rev-parse", "HEAD")
    assert _files(dest) == {"csrc/python_api.cpp", "csrc/jit/compiler.hpp", "deep_gemm/__init__.py",
                            "deep_gemm/include/deep_gemm/impls/k.cuh", "LICENSE", "third-party/fmt/LICENSE",
                            "third-party/fmt/include/fmt/base.h", "third-party/fmt/include/fmt/format.h",
                            ".fp8lab-source.json"}
    stamp = json.loads((dest / ".fp8lab-source.json").read_text())
    assert stamp["commit"] == commit and stamp["fmt"]["commit"] == fmt
    assert stamp["cutlass_pinned"] == dict(stamp["cutlass_pinned"], commit=cutlass, carried=False)
    (dest / "stale.txt").write_text("")                              # a second run replaces the tree
    off.deepgemm_source(dest, str(dg / ".git"), str(tmp_path / "fmt" / ".git"))
    assert not (dest / "stale.txt").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "mine.txt").write_text("")
    with pytest.raises(FileExistsError):                              # never a folder it did not fill
        off.deepgemm_source(other, str(dg / ".git"), str(tmp_path / "fmt" / ".git"))


def test_the_build_stages_the_package_with_cutlass_links(tmp_path):
    src = _fake_source(tmp_path / "src")
    inc = tmp_path / "cutlass_include"
    (inc / "cute").mkdir(parents=True)
    (inc / "cutlass").mkdir()
    out = tmp_path / "out"
    for _ in range(2):                                               # re-staging replaces the links
        pkg = build._stage_deepgemm(src, out, inc)
    assert (pkg / "__init__.py").exists() and (pkg / "include" / "deep_gemm").is_dir()
    assert not (pkg / "include" / "deep_gemm").is_symlink()
    assert (pkg / "include" / "cute").resolve() == (inc / "cute").resolve()
    assert (pkg / "include" / "cutlass").is_symlink()
    assert build.deepgemm_version(src) == "9.8.7"
    assert build.deepgemm_include_dirs(src, "/cuda", inc) == [
        "/cuda/include", "/cuda/include/cccl", str(src / "deep_gemm" / "include"), str(inc),
        str(src / "third-party" / "fmt" / "include")]


def _source_and_cutlass_or_skip():
    from fp8lab.kernels.cutlass_blockwise_sm90 import CutlassNotFound, cutlass_include_dir

    try:
        build.deepgemm_binding()
        cutlass_include_dir()
    except (FileNotFoundError, CutlassNotFound) as e:
        pytest.skip(str(e).splitlines()[0])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_deepgemm_jit_kernel_compiles_for_sm90a():
    """One kernel DeepGEMM's JIT builds for fp8_gemm_nt on Hopper compiles with its JIT's flags
    against the nvidia-cutlass wheel's headers (needs the unpacked source and those headers)."""
    _source_and_cutlass_or_skip()
    r = build.deepgemm_jit_check("sm_90a")
    assert r["ok"], r["errors"]


@pytest.mark.skipif(not os.environ.get("FP8LAB_TORCH_INCLUDE"), reason="needs $FP8LAB_TORCH_INCLUDE (about 1 min)")
def test_deepgemm_binding_compiles():
    """DeepGEMM's binding compiles (g++ -c) with its setup.py flags; $FP8LAB_DEEPGEMM_EXTRA_INCLUDE
    names a folder with the cuBLAS / cuSPARSE / cuSOLVER / NVRTC headers a CPU toolkit lacks."""
    _source_and_cutlass_or_skip()
    extra = [os.environ["FP8LAB_DEEPGEMM_EXTRA_INCLUDE"]] if os.environ.get("FP8LAB_DEEPGEMM_EXTRA_INCLUDE") else []
    r = build.deepgemm_compile_check(extra_includes=extra)
    assert r["ok"], r["errors"]


# ------------------------------------------------------------------------ the separate-process probe
def _fake_build(root: Path) -> Path:
    pkg = root / "deep_gemm"
    for sub in ("deep_gemm", "cute", "cutlass"):
        (pkg / "include" / sub).mkdir(parents=True)
    so = pkg / "_C.cpython-311-x86_64-linux-gnu.so"
    so.write_bytes(b"")
    return so


def test_a_probe_that_crashes_is_one_line_with_what_it_printed_last(tmp_path):
    import sys

    so = _fake_build(tmp_path)
    crash = [sys.executable, "-c", "import ctypes; print('Running NVCC command: nvcc x.cu', flush=True); "
             "ctypes.string_at(0)"]
    ok, line = discover._probe_child(tmp_path, so, [], {}, 60, cmd=crash)
    assert not ok and line == "the probe died of SIGSEGV after: Running NVCC command: nvcc x.cu"
    log = (tmp_path / "probe.log").read_text()
    assert "Fatal Python error: Segmentation fault" in log          # faulthandler's stack, for the reader
    # cached against the extension: the same build is not probed again ...
    assert discover._probe_child(tmp_path, so, [], {}, 60, cmd=[sys.executable, "-c", "print('ok')"]) == (ok, line)
    # ... a rebuilt one is
    os.utime(so, ns=(1, 1))
    assert discover._probe_child(tmp_path, so, [], {}, 60, cmd=[sys.executable, "-c", "print('ok: fine')"]) == \
        (True, "ok: fine")
    os.utime(so, ns=(2, 2))
    ok, line = discover._probe_child(tmp_path, so, [], {}, 60,
                                     cmd=[sys.executable, "-c", "print('RuntimeError: no kernel image'); exit(1)"])
    assert not ok and line == "RuntimeError: no kernel image"


@pytest.fixture
def built_on_a_gpu(tmp_path, monkeypatch):
    """A (fake) DeepGEMM build on a (pretended) sm_90 box, no variant chosen yet."""
    _fake_build(tmp_path)
    monkeypatch.setenv(discover.DEEPGEMM_BUILD_ENV, str(tmp_path))
    monkeypatch.delenv(discover.DEEPGEMM_PROBING_ENV, raising=False)
    monkeypatch.delenv(discover.DEEPGEMM_VARIANT_ENV, raising=False)
    monkeypatch.setattr(discover, "DEEPGEMM_CHOICE", {})
    monkeypatch.setattr(discover, "_need_torch", lambda: None)
    monkeypatch.setattr(discover, "_gpu_sm", lambda: 90)
    return tmp_path


def test_a_build_that_fails_its_probe_is_not_run_with_the_probes_line(built_on_a_gpu, monkeypatch):
    probed = []

    def probe(variant, timeout=300.0):
        probed.append(variant)
        return False, f"the probe died of SIGSEGV after: {variant}"
    monkeypatch.setattr(discover, "probe_deepgemm", probe)
    with pytest.raises(discover.PeerUnavailable, match=r"^no DeepGEMM build passed its separate-process probe: "
                       r"as-is: .*SIGSEGV after: as-is; deepbind: .*; static-libstdcxx: .*static-libstdcxx$"):
        discover.import_deepgemm()
    assert probed == list(discover.DEEPGEMM_VARIANTS)
    # the probe's own process does not probe again (it would never end)
    monkeypatch.setenv(discover.DEEPGEMM_PROBING_ENV, "1")
    monkeypatch.setattr(importlib, "import_module", lambda name: "the module")
    assert discover.import_deepgemm() == "the module"
    assert probed == list(discover.DEEPGEMM_VARIANTS)


def test_the_first_variant_that_passes_is_imported_the_way_it_was_probed(built_on_a_gpu, monkeypatch):
    import sys

    monkeypatch.setattr(discover, "probe_deepgemm", lambda v, timeout=300.0: (v == "deepbind", f"{v} said so"))
    flags = []
    monkeypatch.setattr(importlib, "import_module", lambda name: flags.append(sys.getdlopenflags()) or "the module")
    before = sys.getdlopenflags()
    assert discover.import_deepgemm() == "the module"
    assert flags == [os.RTLD_NOW | os.RTLD_DEEPBIND] and sys.getdlopenflags() == before
    assert discover.DEEPGEMM_CHOICE == {"variant": "deepbind", "why": "as-is: as-is said so; deepbind: deepbind said so"}
    from fp8lab.peers import adapters
    assert adapters._deepgemm_build_note().startswith("; build deepbind (imported with RTLD_DEEPBIND), probes: as-is:")


def test_the_static_variant_has_a_build_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv(discover.DEEPGEMM_BUILD_ENV, str(tmp_path / "deepgemm"))
    assert discover.deepgemm_build_dir() == discover.deepgemm_build_dir("deepbind") == tmp_path / "deepgemm"
    assert discover.deepgemm_build_dir("static-libstdcxx") == tmp_path / "deepgemm-static-libstdcxx"
    with pytest.raises(ValueError, match="must be one of"):
        discover.deepgemm_build_dir("nope")
    # chosen but never built: a reason that says what to run, not an import error (with the source
    # there: without it, the reason says to unpack the source first)
    _fake_build(tmp_path / "deepgemm")
    monkeypatch.setenv(discover.DEEPGEMM_SRC_ENV, str(_fake_source(tmp_path / "src")))
    monkeypatch.setenv(discover.DEEPGEMM_VARIANT_ENV, "static-libstdcxx")
    monkeypatch.setenv(discover.DEEPGEMM_PROBING_ENV, "1")
    monkeypatch.setattr(discover, "_need_torch", lambda: None)
    with pytest.raises(discover.PeerUnavailable, match=r"DeepGEMM is not built .*deepgemm-static-libstdcxx"):
        discover.import_deepgemm()
    monkeypatch.setenv(discover.DEEPGEMM_VARIANT_ENV, "bogus")
    with pytest.raises(discover.PeerUnavailable, match=r"FP8LAB_DEEPGEMM_VARIANT='bogus': must be one of"):
        discover.import_deepgemm()


def test_make_build_builds_deepgemm_only_from_an_unpacked_source_and_rebuilds_a_new_commit(no_deepgemm, monkeypatch):
    """`python -m fp8lab build`'s DeepGEMM targets: skipped with one line while the source is missing;
    a build counts as done only when its build_info names the unpacked source's commit and variant."""
    src, out = no_deepgemm
    ok, why = build.deepgemm_prebuild_ready()
    assert not ok and "peers_offline.py --sources" in why and "\n" not in why
    _fake_source(src)
    (src / ".fp8lab-source.json").write_text(json.dumps({"commit": "a" * 40}))
    assert build._deepgemm_built("as-is") is None                            # nothing built yet
    (out / "deep_gemm").mkdir(parents=True)
    (out / "deep_gemm" / "_C.cpython-312-x86_64-linux-gnu.so").write_text("")
    build.write_deepgemm_build_info(out, dict(source_commit="a" * 40, source=str(src), variant="as-is"))
    assert build._deepgemm_built("as-is") is not None
    (src / ".fp8lab-source.json").write_text(json.dumps({"commit": "b" * 40}))   # a new source commit
    assert build._deepgemm_built("as-is") is None
    assert build._deepgemm_built("static-libstdcxx") is None                 # a build of its own
    from fp8lab.run import prebuild
    names = {t.name for t in prebuild.TARGETS}
    assert {"peer_deepgemm_as_is", "peer_deepgemm_static_libstdcxx"} <= names


def test_the_static_variant_imports_without_the_as_is_build(tmp_path, monkeypatch):
    # the prebuild builds as-is and static-libstdcxx at once and probes each when it is built: the
    # H200 (065b701) probed static-libstdcxx before as-is was built, and its probe's import failed on
    # the as-is build's absence (cached, so notebook 05 ran without DeepGEMM)
    monkeypatch.setenv(discover.DEEPGEMM_BUILD_ENV, str(tmp_path / "deepgemm"))
    _fake_build(tmp_path / "deepgemm-static-libstdcxx")
    monkeypatch.setattr(discover, "DEEPGEMM_CHOICE", {})
    monkeypatch.setattr(discover, "_need_torch", lambda: None)
    monkeypatch.setattr(importlib, "import_module", lambda name: "the module")
    monkeypatch.setenv(discover.DEEPGEMM_VARIANT_ENV, "static-libstdcxx")
    monkeypatch.setenv(discover.DEEPGEMM_PROBING_ENV, "1")
    assert discover.import_deepgemm() == "the module"
    assert str(tmp_path / "deepgemm-static-libstdcxx") in sys.path
    sys.path.remove(str(tmp_path / "deepgemm-static-libstdcxx"))
    # chosen by the probes on a GPU: as-is says it is not built, static-libstdcxx passes
    monkeypatch.delenv(discover.DEEPGEMM_VARIANT_ENV)
    monkeypatch.delenv(discover.DEEPGEMM_PROBING_ENV)
    monkeypatch.setattr(discover, "_gpu_sm", lambda: 90)
    monkeypatch.setattr(discover, "probe_deepgemm",
                        lambda v, timeout=300.0: (v == "static-libstdcxx", "ok" if v == "static-libstdcxx" else "not built"))
    assert discover.import_deepgemm() == "the module"
    assert discover.DEEPGEMM_CHOICE["variant"] == "static-libstdcxx"
    sys.path.remove(str(tmp_path / "deepgemm-static-libstdcxx"))


def test_the_shared_build_helpers(tmp_path):
    # read_json: {} for a missing or broken record; probe_extension: one line when nothing is built
    assert discover.read_json(tmp_path / "build_info.json") == {}
    (tmp_path / "build_info.json").write_text("{not json")
    assert discover.read_json(tmp_path / "build_info.json") == {}
    (tmp_path / "build_info.json").write_text('{"sha256": "ab"}')
    assert discover.read_json(tmp_path / "build_info.json") == {"sha256": "ab"}
    assert discover.probe_extension(tmp_path, "_fp8lab_x", "probe-x", "X_PROBING") == \
        (False, f"not built (no _fp8lab_x*.so in {tmp_path})")
