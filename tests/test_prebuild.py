"""`python -m fp8lab build`: the target registry is complete, the command line, and the parallel
driver (fake loaders in real child processes: jobs budget, cache detection, failures, timeouts)."""

import dataclasses
import ast
import re
import time
from pathlib import Path

import pytest

from fp8lab.run import cli, prebuild
from fp8lab.kernels import (cutlass_blockwise_sm90, gemv_rows, gemv_w8a8, hmma_peak, mma_blockwise, seed001, weight_only,
                            wgmma_blockwise)
from fp8lab.experiments import gemv_sass

PKG = Path(prebuild.__file__).resolve().parents[1]
KERNELS = PKG / "kernels"


# ---------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------
def _functions_calling(name: str) -> set[str]:
    """'module:function' of every top-level function in fp8lab/ whose body calls ``name``."""
    found = set()
    for path in PKG.rglob("*.py"):
        mod = ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef) or node.name == name:
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and getattr(sub.func, "id", getattr(sub.func, "attr", None)) == name:
                    found.add(f"{mod}:{node.name}")
    return found


def test_every_extension_loader_is_a_target():
    # a loader builds through the shared, once-per-process builder or calls the torch build itself
    loaders = (_functions_calling("load_torch_extension") | _functions_calling("extension")) - {
        "fp8lab.kernels._build:extension"}
    assert len(loaders) >= 6, loaders          # the scan itself works
    ext_targets = {t.loader for t in prebuild.TARGETS if t.kind == "extension"}
    assert loaders == ext_targets


def test_every_notebook_cubin_is_a_target():
    """The weight-only SASS tables read cubins the notebooks compile: each through a function
    that prebuild calls with the notebooks' arch."""
    cubin_fns = {f for f in _functions_calling("_compile") if f.startswith("fp8lab.kernels.weight_only:")}
    assert cubin_fns == {t.loader for t in prebuild.TARGETS if t.kind == "cubin"}
    for t in prebuild.TARGETS:
        assert callable(prebuild._resolve(t.loader)), t.name
        assert not t.needs or callable(prebuild._resolve(t.needs)), t.name
    # the SASS-count functions the notebooks call go through those functions (same cache file)
    for fn, via in (("dequant_sass_counts", "dequant_cubin"), ("gemv_sass_counts", "gemv_cubin"),
                    ("xalu_sass_counts", "xalu_cubin")):
        text = Path(gemv_sass.__file__).read_text()
        src = ast.get_source_segment(text, next(n for n in ast.parse(text).body
                                                if isinstance(n, ast.FunctionDef) and n.name == fn))
        assert f"wo.{via}(" in src and "_compile(" not in src, fn
    nb = {p.stem: p.read_text() for p in (PKG.parent / "notebooks").glob("[0-9]*.py")}
    assert 'gs.gemv_sass_counts("sm_90", nt=1)' in nb["08_decode_bandwidth"]   # = wo_sass_gemv's args
    assert 'gs.xalu_sass_counts("sm_90")' in nb["10_clock_sweep"]


def test_names_unique_and_units_match_sources():
    names = [t.name for t in prebuild.TARGETS]
    assert len(set(names)) == len(names)
    assert prebuild.unit_count(prebuild.Target("x", "extension", "fp8lab.kernels.mma_blockwise:load_extension",
                                               units="EXT_SOURCES")) == len(mma_blockwise.EXT_SOURCES) == 7
    cut = next(t for t in prebuild.TARGETS if t.name == "cutlass_sm90")
    assert prebuild.unit_count(cut) == len(cutlass_blockwise_sm90.built_kernels()) + 1


def test_every_binding_source_is_built():
    """Every *_ext.cu / *_ext.cpp in fp8lab/kernels belongs to an extension's source list (a
    forgotten TU, e.g. one of mma_blockwise's kernel tables, would only show as a link error on
    a GPU box)."""
    listed = {*mma_blockwise.EXT_SOURCES, *weight_only.EXT_SOURCES, *weight_only.XALU_EXT_SOURCES,
              *weight_only.PATTERN_EXT_SOURCES,
              *seed001.EXT_SOURCES, *hmma_peak.EXT_SOURCES, cutlass_blockwise_sm90.EXT_SOURCE,
              *wgmma_blockwise.EXT_SOURCES, *gemv_w8a8.EXT_SOURCES, *gemv_rows.EXT_SOURCES}
    on_disk = {p for p in KERNELS.iterdir() if re.search(r"_ext\.(cu|cpp)$", p.name)}
    assert len(on_disk) >= 12 and not on_disk - {Path(p) for p in listed}, on_disk - set(listed)
    for p in listed:
        assert Path(p).is_file(), p


def test_mma_blockwise_tables_each_defined_once():
    """The kernel tables declared in mma_blockwise_ext_tables.h: each defined in exactly one
    compiled TU, and the dispatch uses every one."""
    header = (KERNELS / "mma_blockwise_ext_tables.h").read_text()
    tables = re.findall(r"extern const MmaLaunchFn (\w+)\[", header)
    assert len(tables) == 5
    srcs = {p.name: p.read_text() for p in mma_blockwise.EXT_SOURCES}
    for t in tables:
        defs = [n for n, s in srcs.items() if re.search(rf"^const MmaLaunchFn {t}\[", s, re.M)]
        assert len(defs) == 1, (t, defs)
        assert t in srcs["mma_blockwise_ext.cu"]
    assert mma_blockwise.EXT_HEADERS[0].name == "mma_blockwise_ext_tables.h"


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------
def test_list(capsys):
    assert cli.main(["build", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in out] == [t.name for t in prebuild.TARGETS]
    assert cli.main(["build", "--list", "--only", "hmma_peak"]) == 0
    assert capsys.readouterr().out.split()[0] == "hmma_peak"


@pytest.mark.parametrize("only", [["nope"], ["hmma_peak,nope"], [","]])
def test_only_refuses_unknown_names(capsys, only):
    args = ["build"] + [a for o in only for a in ("--only", o)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fp8lab build: unknown target")
    assert "hmma_peak" in err[0]                 # the known names are listed


def test_no_gpu_builds_nothing(capsys, monkeypatch):
    from fp8lab.report import provenance
    monkeypatch.setattr(provenance, "gpu_present", lambda: False)
    monkeypatch.setattr(prebuild, "run_targets", lambda *a, **k: pytest.fail("built without a GPU"))
    assert cli.main(["build"]) == 0
    assert capsys.readouterr().out.strip() == "fp8lab build: no GPU visible; nothing to build"


def test_bad_jobs(capsys, monkeypatch):
    from fp8lab.report import provenance
    monkeypatch.setattr(provenance, "gpu_present", lambda: True)
    assert cli.main(["build", "--jobs", "0"]) == 2
    assert "--jobs" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The driver, with fake loaders (prebuild_fakes.py, light to import) run in child processes
# ---------------------------------------------------------------------------------------------
def _t(name, fn, *args, units=1, slow_s=0.0, needs=""):
    return prebuild.Target(name, "extension", f"prebuild_fakes:{fn}", args, units=units, slow_s=slow_s,
                           needs=needs and f"prebuild_fakes:{needs}")


def test_driver_respects_the_jobs_budget_and_detects_cache(tmp_path):
    budget = 4
    targets = [_t(f"t{i}", "fake_build", str(tmp_path / f"t{i}"), units=u, slow_s=s)
               for i, (u, s) in enumerate([(3, 9), (2, 5), (2, 4), (1, 1), (6, 0)])]
    seen = []
    res = prebuild.run_targets(targets, budget, report=seen.append, logs=tmp_path)
    assert len(res) == len(seen) == 5 and all(r.ok and not r.cached for r in res), res
    spans = []
    for r in res:
        t0, t1, jobs = (tmp_path / r.name).read_text().split()
        assert int(jobs) == r.jobs
        spans.append((float(t0), float(t1), int(jobs)))
    # the MAX_JOBS of the builds running at any moment never add up to more than the budget
    for t0, _, _ in spans:
        assert sum(j for a, b, j in spans if a <= t0 < b) <= budget
    units = {t.name: prebuild.unit_count(t) for t in targets}
    assert {r.name: r.jobs for r in res} == {n: min(u, budget) for n, u in units.items()}
    # the second run finds every file: all from cache
    res2 = prebuild.run_targets(targets, budget, logs=tmp_path)
    assert all(r.ok and r.cached for r in res2)


def test_driver_reports_failures_and_keeps_going(tmp_path):
    targets = [_t("bad", "fake_fail"), _t("dies", "fake_crash"), _t("good", "fake_build", str(tmp_path / "g"))]
    res = {r.name: r for r in prebuild.run_targets(targets, 2, logs=tmp_path)}
    assert res["good"].ok
    assert not res["bad"].ok and res["bad"].error == 'RuntimeError: x.cu(3): error: expected a ";"'
    assert "Traceback" in (tmp_path / "bad.log").read_text()    # the whole story is in the log
    assert not res["dies"].ok and "exit code 3" in res["dies"].error


def test_driver_stops_a_build_past_its_timeout_and_the_lock_goes(tmp_path):
    """A stopped build must release its build lock (torch's FileBaton, released in a finally),
    or every later load of that extension waits for ever: SIGTERM first, not SIGKILL."""
    lock = tmp_path / "lock"
    t0 = time.perf_counter()
    (r,) = prebuild.run_targets([_t("slow", "fake_hang", str(lock))], 1, timeout_s=1.5, logs=tmp_path)
    assert not r.ok and r.error.startswith("timed out after 2 s")
    assert not lock.exists()
    assert time.perf_counter() - t0 < 30


def test_cli_one_line_per_target_and_failure_exit(tmp_path, capsys, monkeypatch):
    from fp8lab.report import provenance
    monkeypatch.setattr(provenance, "gpu_present", lambda: True)
    monkeypatch.setenv("FP8LAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(prebuild, "TARGETS", (_t("ok", "fake_build", str(tmp_path / "ok")), _t("bad", "fake_fail"),
                                              _t("nope", "fake_fail", needs="not_here")))
    assert cli.main(["build", "--jobs", "2"]) == 1
    cap = capsys.readouterr()
    out = cap.out.splitlines()
    assert len(out) == 4                         # header, one line per target that did not fail, summary
    assert any(re.fullmatch(r"  built   ok +\d+\.\d s  \(1 jobs\)", ln) for ln in out)
    assert "  skipped nope" in cap.out and cap.out.count("CUTLASS headers not found: install them") == 1
    assert re.fullmatch(r"fp8lab build: 1 built, 0 cached, 1 skipped, 1 failed in \d+\.\d s \(2 jobs\)", out[-1])
    (fail,) = cap.err.splitlines()
    assert fail.startswith("  FAILED  bad") and "error: expected" in fail and "bad.log" in fail
    assert cli.main(["build", "--only", "ok"]) == 0
    assert "  cached  ok" in capsys.readouterr().out


def test_a_peer_that_fails_to_build_does_not_fail_the_run(tmp_path, capsys, monkeypatch):
    """The original Marlin (a peer) builds as a target of its own kind: when it fails, its
    notebooks' rows say not-run; fp8lab's own targets failing still fail make run."""
    from fp8lab.report import provenance
    monkeypatch.setattr(provenance, "gpu_present", lambda: True)
    monkeypatch.setenv("FP8LAB_CACHE_DIR", str(tmp_path))
    peer = dataclasses.replace(_t("peer_x", "fake_fail"), kind="peer")
    monkeypatch.setattr(prebuild, "TARGETS", (_t("ok", "fake_build", str(tmp_path / "ok")), peer))
    assert cli.main(["build", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "peer_x failed: a peer" in out and "the run goes on" in out
    monkeypatch.setattr(prebuild, "TARGETS", (peer, _t("bad", "fake_fail")))
    assert cli.main(["build", "--jobs", "2"]) == 1


def test_marlin_targets_one_per_variant():
    from fp8lab.peers import discover
    ts = [t for t in prebuild.TARGETS if t.kind == "peer" and t.loader == "fp8lab.peers.build:prebuild"]
    assert [t.args for t in ts] == [(v,) for v in discover.MARLIN_VARIANTS]
    assert all(t.needs == "fp8lab.peers.build:prebuild_ready" for t in ts)


def test_vllm_marlin_is_a_target_of_its_own_sized_by_its_sources():
    from fp8lab.peers import vllm_marlin
    t = next(t for t in prebuild.TARGETS if t.name == "peer_vllm_marlin")
    assert (t.kind, t.loader, t.needs) == ("peer", "fp8lab.peers.vllm_marlin:prebuild",
                                           "fp8lab.peers.vllm_marlin:prebuild_ready")
    assert t.units == "CU_SOURCES" and len(vllm_marlin.CU_SOURCES) == 12
    # no source here: the target is skipped with the line that says what to run
    ok, why = vllm_marlin.prebuild_ready()
    assert ok or "peers_offline.py" in why or why in ("no torch", "no CUDA GPU")


def test_peer_compile_ahead_targets_take_the_notebooks_parameters():
    """peer_triton_<nb> compiles what notebook nb's sweep will ask for: the notebook's parameter
    defaults, or its manifest smoke parameters under --smoke."""
    import json

    from fp8lab.peers import precompile

    ts = [t for t in prebuild.TARGETS if t.loader == prebuild.AHEAD_LOADER]
    assert sorted(t.args[0] for t in ts) == sorted(precompile.NOTEBOOKS)
    assert all(t.kind == "peer" and t.needs_args for t in ts)      # a failure never fails make run
    full = {t.args[0]: json.loads(t.args[1]) for t in prebuild.with_params(ts)}
    smoke = {t.args[0]: json.loads(t.args[1]) for t in prebuild.with_params(ts, smoke=True)}
    assert full["05"]["Ms"] == [1, 16, 128, 1024, 4096] and smoke["05"]["Ms"] == [1, 128, 1024]
    assert full["08"]["shape_names"] == ["llama3-70b:down_proj", "qwen3-8b:gate_up", "llama3-8b:gate_up",
                                      "llama3-8b:down_proj", "llama3-70b:qkv"]
    assert smoke["08"]["shape_names"] == ["qwen3-8b:gate_up"] and smoke["11"]["Ms"] == [1, 1024]
    for nb, params in (*full.items(), *smoke.items()):
        kind, points = precompile.plan(nb, params)
        assert kind in ("blockwise", "weight_only") and points


def test_no_ahead_leaves_the_compile_ahead_out(capsys):
    assert cli.main(["build", "--list", "--no-ahead"]) == 0
    names = [ln.split()[0] for ln in capsys.readouterr().out.splitlines()]
    assert names == [t.name for t in prebuild.TARGETS if t.loader != prebuild.AHEAD_LOADER]
    assert "peer_marlin_as_is" in names and not any(n.startswith("peer_triton_") for n in names)
