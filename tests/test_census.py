"""fp8lab.experiments.census: the ptxas type probe, the census of fp8lab-style kernel
sources, user binaries, and the C1 verdict logic (which must be able to say 'differs')."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from fp8lab.toolchain import sass
from fp8lab.experiments import census
from fp8lab.toolchain.tools import have_tool

FIX = Path(__file__).parent / "fixtures" / "sass"
needs_ptxas = pytest.mark.skipif(not (have_tool("ptxas") and have_tool("cuobjdump")),
                                 reason="ptxas and cuobjdump needed")
needs_nvcc = pytest.mark.skipif(not (have_tool("nvcc") and have_tool("cuobjdump")),
                                reason="nvcc and cuobjdump needed")


# ---------------------------------------------------------------------------------------
# The ptxas probe

@needs_ptxas
def test_probe_sm89_mma_sync():
    p = census.probe_mma_types(["sm_89"], ("bf16", "e4m3"), wgmma=False)
    assert len(p) == 4
    row = p.set_index(["a", "b"])
    assert bool(row.loc[("bf16", "bf16"), "accepted"])
    assert row.loc[("bf16", "bf16"), "sass_mma"] == "HMMA.16816.F32.BF16"
    assert bool(row.loc[("e4m3", "e4m3"), "accepted"])
    assert row.loc[("e4m3", "e4m3"), "sass_mma"] == "QMMA.16832.F32.E4M3.E4M3"
    for pair in (("bf16", "e4m3"), ("e4m3", "bf16")):
        assert not bool(row.loc[pair, "accepted"])
        assert row.loc[pair, "error"]  # ptxas said why
    c = census.probe_checks(p)
    assert c["n_mixed"] == 2 and c["n_mixed_accepted"] == 0 and c["controls_ok"]


@needs_ptxas
def test_probe_sm90_mma_sync_fp8_is_emulated_and_wgmma_is_not():
    p = census.probe_mma_types(["sm_90"], ("bf16", "e4m3"), wgmma=True)
    row = p.set_index(["instruction", "a", "b"])
    e4 = row.loc[("mma.sync", "e4m3", "e4m3")]
    assert bool(e4["accepted"])
    assert "QMMA" not in e4["sass_mma"] and e4["sass_mma"].startswith("HMMA")
    assert e4["sass_fp8_converts"] > 0
    wg = row.loc[("wgmma", "e4m3", "e4m3")]
    assert bool(wg["accepted"]) and wg["sass_mma"].startswith("QGMMA") and "E4M3" in wg["sass_mma"]
    assert row.loc[("wgmma", "bf16", "bf16"), "sass_mma"].startswith("HGMMA")
    assert not bool(row.loc[("wgmma", "bf16", "e4m3"), "accepted"])
    assert census.probe_checks(p)["n_mixed_accepted"] == 0


def test_probe_rejects_unknown_type():
    with pytest.raises(ValueError, match="probe types must be among"):
        census.probe_mma_types(["sm_89"], ("bf16", "fp4"))


# ---------------------------------------------------------------------------------------
# The verdict logic, on synthetic censuses (so every branch is exercised)

def _kernel(binary, kernel, opcodes, arch="sm_89"):
    return [dict(binary=binary, arch=arch, kernel=kernel, demangled=kernel, opcode=op,
                 family=sass.opcode_family(op), count=n) for op, n in opcodes.items()]


def _summary(rows):
    return census.kernel_summary(pd.DataFrame(rows).assign(arm=""))


def _probe(mixed_accepted=False, controls=True):
    rows = []
    for a, b in (("bf16", "bf16"), ("e4m3", "e4m3"), ("bf16", "e4m3"), ("e4m3", "bf16")):
        mixed = a != b
        acc = mixed_accepted if mixed else controls
        rows.append(dict(instruction="mma.sync", arch="sm_89", a=a, b=b, accepted=acc,
                         a_bits=16 if a == "bf16" else 8, b_bits=16 if b == "bf16" else 8,
                         mixed_16x8=mixed))
    return pd.DataFrame(rows)


A16_OK = _kernel("w.so", "gemm_w8a16_kernel", {"HMMA.16816.F32.BF16": 64, "LOP3.LUT": 200, "PRMT": 50})
A8_OK = _kernel("w.so", "gemm_w8a8_kernel", {"QMMA.16832.F32.E4M3.E4M3": 64})
A16_BAD = _kernel("w.so", "gemm_w4a16_kernel", {"QMMA.16832.F32.E4M3.E4M3": 8, "HMMA.16816.F32.BF16": 8})


def test_verdict_holds():
    v = census.c1_verdict(_summary(A16_OK + A8_OK), _probe())
    assert v["verdict"] == "holds", v
    assert "1/1 A16 kernels" in v["our_figure"]


def test_verdict_differs_when_a16_kernel_issues_qmma():
    v = census.c1_verdict(_summary(A16_OK + A8_OK + A16_BAD), _probe())
    assert v["verdict"] == "differs"
    assert "gemm_w4a16_kernel" in v["reason"]


def test_verdict_differs_when_ptxas_takes_a_mixed_pair():
    v = census.c1_verdict(_summary(A16_OK + A8_OK), _probe(mixed_accepted=True))
    assert v["verdict"] == "differs"


def test_verdict_holds_in_kind_without_a16_kernels():
    v = census.c1_verdict(_summary(A8_OK), _probe())
    assert v["verdict"] == "holds-in-kind"
    assert "A16 half was not observed" in v["reason"]


def test_verdict_broken_probe_is_not_evidence():
    v = census.c1_verdict(_summary(A8_OK), _probe(controls=False))
    assert v["verdict"] == "not-run"
    assert "probe controls" in v["reason"]


def test_verdict_not_run_with_nothing():
    v = census.c1_verdict(pd.DataFrame(), None)
    assert v["verdict"] == "not-run" and v["reason"]


def test_a8_emulated_noted():
    emul = _kernel("k.cubin", "gemm_w8a8_kernel",
                   {"HMMA.16816.F32": 16, "F2FP.F16.E4M3.UNPACK_B": 32}, arch="sm_90")
    s = _summary(A8_OK + emul)
    c = census.c1_checks(s)
    assert c["n_a8"] == 2 and c["n_a8_fp8_mma"] == 1
    assert c["a8_emulated"] == [{"label": "gemm_w8a8_kernel", "arch": "sm_90"}]
    assert "necessary for QMMA/QGMMA, not sufficient" in census.c1_verdict(s, _probe())["reason"]


# ---------------------------------------------------------------------------------------
# Census of kernel sources and binaries

@needs_nvcc
def test_census_fp8lab_sources(tmp_path):
    shutil.copy(FIX / "mma_pair.cu", tmp_path / "mma_pair.cu")
    (tmp_path / "mma_pair_ext.cu").write_text("#error a binding: the census must not compile me\n")
    (tmp_path / "broken.cu").write_text("__global__ void k() { this is not C++; }\n")
    cen, builds = census.census_fp8lab(["sm_80", "sm_89"], triton=False, kernels_dir=tmp_path)
    assert set(builds["arm"]) == {"mma_pair", "broken"}
    ok = builds.set_index(["arm", "arch"])["ok"]
    assert ok[("mma_pair", "sm_80")] and ok[("mma_pair", "sm_89")]
    assert not ok[("broken", "sm_80")]
    assert builds.set_index(["arm", "arch"]).loc[("broken", "sm_89"), "reason"]
    s = census.kernel_summary(cen).set_index(["arch", "kernel"])
    assert s.loc[("sm_89", "_Z8mma_e4m3ILi1EEvPKjS1_Pf"), "mma_families"] == "QMMA"
    assert s.loc[("sm_80", "mma_bf16"), "mma_families"] == "HMMA"
    assert set(s["arm"]) == {"mma_pair"}


#: the builds of fp8lab's own kernels that may fail, and why: CUTLASS's sm_90a kernels (and their
#: host probe) need the CUTLASS headers and Hopper; wgmma_blockwise is sm_90a code (wgmma,
#: setmaxnreg), which no plain arch compiles; FP8 mma.sync needs sm_89
_ARCHS = ("sm_80", "sm_89", "sm_90", "sm_120")
EXPECTED_BUILD_FAILURES = {(k, a) for k in ("cutlass_blockwise_sm90", "cutlass_blockwise_sm90_probe", "wgmma_blockwise")
                           for a in _ARCHS} | {("mma_blockwise", "sm_80")}


@needs_nvcc
def test_every_own_kernel_builds_for_every_census_arch():
    """Notebook 09 compiles fp8lab's kernel sources for sm_80 / 89 / 90 / 120: every build but the
    expected failures succeeds (a kernel that stops compiling for an arch this project has no GPU
    of, as quant_act.cu did for sm_80 with a cvt to e4m3x2, fails here, not in a user's build)."""
    _, builds = census.census_fp8lab(["sm_80", "sm_89", "sm_90", "sm_120"], triton=False)
    failed = builds[~builds["ok"].astype(bool)]
    unexpected = failed[[(a, r) not in EXPECTED_BUILD_FAILURES for a, r in zip(failed["arm"], failed["arch"])]]
    assert unexpected.empty, unexpected[["arm", "arch", "reason"]].to_string()
    assert len(builds) == 4 * len(census.census_sources())


def test_census_sources_skip_bindings(tmp_path):
    for name in ("a.cu", "a_ext.cu", "a_check.cu", "b.cuh"):
        (tmp_path / name).write_text("")
    assert [p.name for p in census.census_sources(tmp_path)] == ["a.cu"]


# ---------------------------------------------------------------------------------------
# Notebook 09's path for user binaries: fp8lab.toolchain.binaries, its own folder, the post's table

needs_tools = pytest.mark.skipif(not (have_tool("nvcc") and have_tool("cuobjdump") and have_tool("nvdisasm")),
                                 reason="nvcc, cuobjdump and nvdisasm needed")


@pytest.fixture(scope="session")
def pair_so(tmp_path_factory):
    """A tiny .so built now from the project's own fixture source (sm_80 + sm_89)."""
    from fp8lab.toolchain.tools import run_tool
    if not have_tool("nvcc"):
        pytest.skip("nvcc not installed")
    out = tmp_path_factory.mktemp("so09") / "libpair.so"
    run_tool("nvcc", ["-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
                      "-gencode", "arch=compute_89,code=sm_89", "-o", out, FIX / "mma_pair.cu"])
    return out


def test_binaries_resolve_from_where_the_command_was_typed(pair_so, tmp_path, monkeypatch):
    """The runner's kernel works in notebooks/; a relative path counts from the shell's $PWD."""
    from fp8lab.toolchain import binaries
    typed = pair_so.parent
    monkeypatch.chdir(tmp_path)                      # the kernel's folder (notebooks/)
    monkeypatch.setenv("FP8LAB_RUN_ID", "r1")        # run by the runner
    monkeypatch.setenv("PWD", str(typed))            # where the command was typed
    assert census.resolve_binaries([pair_so.name]) == [pair_so]
    with pytest.raises(binaries.CensusError) as e:   # one line, naming where it looked
        census.resolve_binaries(["no_such.whl"])
    assert str(e.value) == f"no_such.whl: no such file (looked for {typed / 'no_such.whl'})"
    monkeypatch.delenv("FP8LAB_RUN_ID")              # by hand (JupyterLab): the working folder
    with pytest.raises(binaries.CensusError):
        census.resolve_binaries([pair_so.name])


def test_binaries_folder_is_never_the_own_census(sandbox, tmp_path, monkeypatch):
    from fp8lab.toolchain import binaries
    data = sandbox / "data"
    whl = Path("/x/vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl")
    d = census.binaries_folder(data, "cpu", "09_sass_census", whl)
    assert d == data / "cpu" / "09_sass_census" / "binaries" / "vllm-0.11.0-cp38-abi3-manylinux1_x86_64"
    monkeypatch.chdir(tmp_path)
    assert census.binaries_folder(data, "cpu", "09_sass_census", whl, "out") == \
        tmp_path / "out" / "vllm-0.11.0-cp38-abi3-manylinux1_x86_64"
    # a folder named after a binary cannot land on the own census's tables
    with pytest.raises(binaries.CensusError, match="own"):
        census.binaries_folder(data, "cpu", "09_sass_census", Path("/x/09_sass_census.whl"), data / "cpu")


@needs_tools
def test_notebook_path_filters_first_and_writes_its_own_folder(pair_so, sandbox, monkeypatch):
    from fp8lab.toolchain import binaries
    from fp8lab.report import results
    seen = []
    real = binaries.Children.popen
    monkeypatch.setattr(binaries.Children, "popen", lambda self, cmd, **kw: seen.append(cmd) or real(self, cmd, **kw))
    res = census.census_user_binaries([pair_so], ["sm_89"], "bf16")[pair_so]
    dis = [c for c in seen if Path(c[0]).name == "nvdisasm"]
    assert len(dis) == 1 and "-fun" in dis[0]           # filter first: one function disassembled
    tabs = census.binary_tables(res)
    assert list(tabs["census_summary"].columns) == binaries.SUMMARY_COLUMNS
    assert tabs["census_summary"].to_dict("records") == [dict(
        library="libpair.so", arch="sm_89", activation="bf16", weight="?", mma_family="HMMA", kernels=1,
        conversions="-")]
    k = tabs["census_kernels"].iloc[0]
    assert (k["kernel"], k["n_mma"], k["mma_16bit"], k["mma_fp8"]) == ("mma_bf16", 1, 1, 0)
    folder = census.binaries_folder(sandbox / "data", "cpu", "09_sass_census", pair_so)
    census.write_tables(folder, tabs, {"notebook": "09_sass_census"})
    own = sandbox / "data" / "cpu" / "09_sass_census"
    assert sorted(p.name for p in own.iterdir()) == ["binaries"]   # nothing beside the own tables
    assert {p.name for p in folder.glob("*.csv")} == {"census_summary.csv", "census_kernels.csv", "census_notes.csv"}
    meta = results.read_sidecar(folder / "census_summary.meta.json")
    assert meta["table"]["rows"] == 1
    # the notebook prints the same table as `python -m fp8lab census`
    assert census.format_post_table(tabs["census_summary"]) in binaries.render(res)


def test_post_table_of_own_kernels_and_figure(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    cen = pd.DataFrame(
        _kernel("fp8lab/kernels/a.cu", "void fp8lab::a_w8a16_fp8(int)", {"HMMA.16816.F32.BF16": 4,
                                                                          "F2FP.F16.E4M3.UNPACK_B": 8})
        + _kernel("fp8lab/kernels/b.cu", "void b_w8a8(int)", {"QGMMA.64x64x32.F32.E4M3.E4M3": 2}, arch="sm_90a")
        + _kernel("fp8lab/kernels/b.cu", "void b2_w8a8(int)", {"QGMMA.64x64x32.F32.E4M3.E4M3": 2}, arch="sm_90a")
    ).assign(arm=["a"] * 2 + ["b"] * 2)
    post = census.post_table(census.own_kernel_rows(cen))
    assert post.to_dict("records") == [
        dict(library="a", arch="sm_89", activation="bf16", weight="fp8 e4m3", mma_family="HMMA", kernels=1,
             conversions="F2FP.F16.E4M3.UNPACK_B"),
        dict(library="b", arch="sm_90a", activation="fp8 e4m3", weight="8-bit", mma_family="QGMMA", kernels=2,
             conversions="-")]
    fig = census.post_figure(post, "t")
    assert fig.get_size_inches()[0] <= 8.0              # blog width
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "1" in texts and "2" in texts and "F2FP.F16.E4M3.UNPACK_B" in texts   # numbers on the bars


def _marlin(name_act: str, ops: dict, arch="sm_80"):
    return _kernel("vllm.whl!_C.so", f"void marlin::Marlin<{name_act}, 1099511627780l, 256, 4>(int)", ops, arch=arch)


def test_seed_row_holds_differs_and_not_run():
    ok = _summary(_marlin("__nv_bfloat16", {"HMMA.16816.F32.BF16": 8}) + A16_OK)
    v = census.c1_seed_verdict(ok, ["vllm.whl"])
    assert v["verdict"] == "holds" and v["our_figure"].startswith("1/1 Marlin A16 kernels"), v
    assert "Marlin" in v["rule"] and f">= {census.MIN_A16_OBSERVED}" in v["rule"]
    bad = _summary(_marlin("__nv_bfloat16", {"HMMA.16816.F32.BF16": 8, "QMMA.16832.F32.E4M3.E4M3": 1}))
    assert census.c1_seed_verdict(bad, ["vllm.whl"])["verdict"] == "differs"
    # no Marlin kernel with MMAs: not-run (MIN_A16_OBSERVED is 1), naming the command
    v = census.c1_seed_verdict(_summary(A16_OK), ["other.so"])
    assert v["verdict"] == "not-run" and census.SEED_COMMAND in v["reason"]
    v = census.c1_seed_verdict(None)
    assert v["verdict"] == "not-run" and census.SEED_COMMAND in v["reason"] and "\n" not in v["rule"]


def test_analogue_rule_is_one_line_from_the_constant():
    v = census.c1_verdict(_summary(A16_OK + A8_OK), _probe())
    assert "\n" not in v["rule"] and f">= {census.MIN_A16_OBSERVED} A16" in v["rule"]


def test_label_for_mma_blockwise():
    d = "void fp8lab::mma_blockwise_kernel<fp8lab::TileConfig<64, 128, 64, 64, 3>, 1, 0>(fp8lab::MmaParams)"
    assert census._label("mma_blockwise", "x", d) == "mma_blockwise per_block 64x128x128 w64x64 s3"


# ---------------------------------------------------------------------------------------
# The kill path end to end: the runner stopped while notebook 09's census builds

_BUILD_CELL = """
from pathlib import Path
from fp8lab.experiments import census
census.find_tool = lambda name: {fake!r}
census.have_tool = lambda name: True
census.census_fp8lab(["sm_89"], triton=False, kernels_dir=Path({src!r}))
"""


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs Linux /proc")
def test_a_stopped_run_leaves_no_census_temp_folder_or_tool(tmp_path):
    """A killed 09 left /tmp/fp8lab-census-* and its nvcc running: the runner stops the
    kernel with SIGTERM, on which the census kills its tools and removes its folder."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import nbformat
    import yaml

    from fp8lab.toolchain import binaries, procs
    root = Path(__file__).resolve().parent.parent
    systmp, pids, src = tmp_path / "systmp", tmp_path / "pids", tmp_path / "src"
    for d in (systmp, pids, src):
        d.mkdir()
    shutil.copy(FIX / "mma_pair.cu", src / "mma_pair.cu")
    fake = tmp_path / "fake_nvcc"
    fake.write_text(f"#!/bin/sh\necho x > \"$TMPDIR/tmpxft_scratch\"\necho $$ > {pids}/$$\nexec sleep 120\n")
    fake.chmod(0o755)
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell('mode = "auto"')
    p.metadata["tags"] = ["parameters"]
    nb.cells = [p, nbformat.v4.new_code_cell(_BUILD_CELL.format(fake=str(fake), src=str(src)))]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, nbdir / "90_build.ipynb")
    (nbdir / "manifest.yaml").write_text(yaml.safe_dump({"notebooks": [
        {"id": "90", "name": "90_build", "title": "build", "kind": "host", "timeout": 300}]}))
    runner_src = ("import sys\nfrom pathlib import Path\nfrom fp8lab.run import cli, notebooks\n"
                  "notebooks.manifest_path = lambda: Path(sys.argv[1])\nsys.exit(cli.main(sys.argv[2:]))\n")
    env = {**os.environ, "PYTHONPATH": str(root), "TMPDIR": str(systmp), "FP8LAB_CACHE_DIR": str(tmp_path / "cache"),
           "FP8LAB_DATA_DIR": str(tmp_path / "data"), "FP8LAB_FIGURES_DIR": str(tmp_path / "figs")}
    proc = subprocess.Popen([sys.executable, "-c", runner_src, str(nbdir / "manifest.yaml"), "run", "--mode",
                             "replot", "--no-progress", "--out", str(tmp_path / "run")],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        t_end = time.monotonic() + 120
        while not list(pids.iterdir()) and time.monotonic() < t_end and proc.poll() is None:
            time.sleep(0.1)
        assert list(pids.iterdir()), f"the fake nvcc never started: {proc.communicate() if proc.poll() is not None else ''}"
        assert [d for d in systmp.iterdir() if d.name.startswith(binaries.TEMP_PREFIX)]
        os.kill(proc.pid, signal.SIGTERM)            # stop the run
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    tool = int(next(pids.iterdir()).name)
    t_end = time.monotonic() + 10
    while procs.alive(tool) and time.monotonic() < t_end:
        time.sleep(0.1)
    assert not procs.alive(tool), "the census's nvcc outlived the run"
    left = [d.name for d in systmp.iterdir() if d.name.startswith(binaries.TEMP_PREFIX) or "tmpxft" in d.name]
    assert left == [], f"the kill path left {left}"
    cubins = tmp_path / "cache" / "cubin"        # nvcc wrote into the cubin cache's temp folder
    assert cubins.is_dir() and list(cubins.iterdir()) == [], f"the kill path left {list(cubins.iterdir())}"


def test_post_figure_says_only_what_it_shows():
    """No 'hatched' legend note without a warpgroup MMA, no conversions note without one."""
    import matplotlib
    matplotlib.use("Agg")
    post = census.post_table(census.own_kernel_rows(pd.DataFrame(
        _kernel("w.whl!lib/a.so", "k_w8a16", {"HMMA.16816.F32.BF16": 4})).assign(arm="w.whl!lib/a.so")))
    fig = census.post_figure(post, "t")
    assert "hatched" not in fig.legends[0].get_title().get_text()
    assert "conversion" not in fig.axes[0].get_xlabel()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["lib/a.so  ·  sm_89"]  # the wheel's member
    assert census.c1_checks(_summary(_kernel("a", "k", {"FFMA": 1}, arch="sm_120")
                                     + _kernel("a", "k", {"FFMA": 1}, arch="sm_80")))["archs"] == ["sm_80", "sm_120"]
