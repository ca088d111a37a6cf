"""fp8lab.toolchain.binaries / ``python -m fp8lab census``: the filter-first census of user binaries.

Fixtures are built now from tests/fixtures/sass/mma_pair.cu (kernels ``mma_bf16`` and
``mma_e4m3<1>``): a cubin (conftest's ``mma_pair_cubin``, sm_89), an sm_90 cubin, and a
shared object for sm_80 + sm_89; ``--filter bf16`` matches one kernel and not the other.
"""

import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from fp8lab.toolchain import binaries
from fp8lab.run import cli
from fp8lab.toolchain.tools import have_tool, run_tool

SRC = Path(__file__).parent / "fixtures" / "sass" / "mma_pair.cu"
E4M3 = "_Z8mma_e4m3ILi1EEvPKjS1_Pf"

pytestmark = pytest.mark.skipif(not (have_tool("nvcc") and have_tool("cuobjdump")

                                     and have_tool("nvdisasm")),
                                reason="needs nvcc, cuobjdump and nvdisasm")


@pytest.fixture(scope="session")
def pair_so(tmp_path_factory):
    out = tmp_path_factory.mktemp("so") / "libpair.so"
    run_tool("nvcc", ["-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
                      "-gencode", "arch=compute_89,code=sm_89", "-o", out, SRC])
    return out


@pytest.fixture(scope="session")
def sm90_cubin(tmp_path_factory):
    out = tmp_path_factory.mktemp("cubin90") / "mma_pair_sm_90.cubin"
    run_tool("nvcc", ["-cubin", "-arch=sm_90", "-o", out, SRC])
    return out


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """tempfile's folder moved into tmp_path, so 'no temp folder left' is checked in isolation."""
    d = tmp_path / "systmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


@pytest.fixture
def spy(monkeypatch):
    """Every tool command the census starts."""
    cmds = []
    real = binaries.Children.popen

    def popen(self, cmd, **kw):
        cmds.append([Path(cmd[0]).name] + list(cmd[1:]))
        return real(self, cmd, **kw)
    monkeypatch.setattr(binaries.Children, "popen", popen)
    return cmds


def _disassembly_cmds(cmds):
    return [c for c in cmds if c[0] == "nvdisasm" or "-sass" in c]


def test_long_function_lists_are_split(monkeypatch):
    """Thousands of matching kernels do not make one command line too long."""
    monkeypatch.setattr(binaries, "_ARGS_BUDGET", 100)
    cub = binaries.Cubin("lib", "sm_80", Path("x.cubin"), [(i, "k" * 30 + str(i)) for i in range(10)])
    chunks = binaries._fun_chunks(cub, everything=False)
    assert len(chunks) > 1 and [f for c in chunks for f in c] == cub.functions
    assert binaries._fun_chunks(cub, everything=True) == [[]]


# ---------------------------------------------------------------------------------------
# Reading cubins without a tool

def test_cubin_functions_and_arch(mma_pair_cubin):
    names = {n for _, n in binaries.cubin_functions(mma_pair_cubin)}
    assert names == {"mma_bf16", E4M3}
    m, flags, abi, _ = binaries._read_elf(mma_pair_cubin)
    assert m == binaries.EM_CUDA and binaries.cubin_arch(flags, abi) == "sm_89"
    assert binaries.is_cubin(mma_pair_cubin)


# ---------------------------------------------------------------------------------------
# Filter first

def test_filter_first_disassembles_only_the_matching_kernel(pair_so, spy, own_tmp):
    r = binaries.census([pair_so], archs=["sm_89"], kernel_filter="bf16")
    assert [(k["arch"], k["kernel"]) for k in r.kernels] == [("sm_89", "mma_bf16")]
    dis = _disassembly_cmds(spy)
    assert len(dis) == 1 and dis[0][:2] == ["nvdisasm", "-c"]
    # restricted to the one matching function (its symbol index), on one extracted cubin
    cubin = Path(dis[0][-1])
    assert cubin.name.endswith(".sm_89.cubin")
    assert dis[0][dis[0].index("-fun") + 1].isdigit()  # one symbol index, not a list
    # only the requested arch was extracted
    xelf = [c for c in spy if "-xelf" in c]
    assert len(xelf) == 1 and xelf[0][xelf[0].index("-arch") + 1] == "sm_89"
    assert not list(own_tmp.iterdir())


def test_nothing_matching_disassembles_nothing(pair_so, spy, own_tmp):
    r = binaries.census([pair_so], kernel_filter="marlin|Marlin")
    assert r.kernels == [] and _disassembly_cmds(spy) == []
    assert r.notes == [("libpair.so", "no function matches the filter")]
    assert "no kernel matched" in binaries.render(r)


def test_arch_absent_extracts_nothing(pair_so, spy, own_tmp):
    r = binaries.census([pair_so], archs=["sm_120"])
    assert r.kernels == [] and not [c for c in spy if "-xelf" in c]
    assert "has sm_80, sm_89" in r.notes[0][1]


def test_disassembly_runs_in_parallel(pair_so, monkeypatch, own_tmp):
    """Both archs' cubins are disassembled at the same time with two workers."""
    barrier = threading.Barrier(2, timeout=20)
    real = binaries.disassemble_cubin

    def both_at_once(*a, **kw):
        barrier.wait()  # a serial census would time out here (BrokenBarrierError)
        return real(*a, **kw)
    monkeypatch.setattr(binaries, "disassemble_cubin", both_at_once)
    r = binaries.census([pair_so], archs=["sm_80", "sm_89"], kernel_filter="bf16", workers=2)
    assert sorted(k["arch"] for k in r.kernels) == ["sm_80", "sm_89"]


# ---------------------------------------------------------------------------------------
# The table

def test_table_from_cubins(mma_pair_cubin, sm90_cubin, own_tmp):
    r = binaries.census([mma_pair_cubin, sm90_cubin])
    rows = {(s["library"], s["arch"], s["activation"], s["mma_family"]): s for s in r.summary()}
    assert rows[(mma_pair_cubin.name, "sm_89", "bf16", "HMMA")]["kernels"] == 1
    assert rows[(mma_pair_cubin.name, "sm_89", "fp8 e4m3", "QMMA")]["kernels"] == 1
    # sm_90 has no e4m3 mma.sync: ptxas unpacks e4m3 to f16 (the conversion, in full) for HMMA
    r90 = rows[(sm90_cubin.name, "sm_90", "fp16", "HMMA")]
    assert "F2FP.F16.E4M3.UNPACK_B" in r90["conversions"].split()
    text = binaries.render(r)
    header = text.splitlines()[0].split()
    assert header[:3] == ["library", "arch", "activation"]
    assert "F2FP.F16.E4M3.UNPACK_B" in text and "QMMA" in text
    k = {(x["arch"], x["kernel"]): x for x in r.kernels}
    assert k[("sm_89", E4M3)]["demangled"].startswith("void mma_e4m3<1>")


def test_describe_kernel_and_names():
    d = binaries.describe_kernel(Counter({"HMMA.16816.F32.BF16": 8, "I2F.F64.S32": 1,
                                          "HADD2.F32": 2, "HADD2": 3, "PRMT": 4,
                                          "F2FP.BF16.F32.PACK_AB": 2}), "kernel")
    assert d["activation"] == "bf16" and d["mma_family"] == "HMMA" and d["mma_instructions"] == 8
    assert d["conversions"].split() == ["F2FP.BF16.F32.PACK_AB", "HADD2.F32", "I2F.F64.S32"]
    assert binaries.describe_kernel(Counter({"IMMA.16832.S8.S8": 1}), "k")["activation"] == "int8"
    assert binaries.describe_kernel(Counter({"HMMA.16816.F32": 1}), "k")["activation"] == "fp16"
    assert binaries.describe_kernel(Counter({"FFMA": 1}), "k")["activation"] == "no MMA"
    # vLLM ScalarType ids: uint4b8 (exponent 0, mantissa 4, unsigned, bias 8), e4m3
    u4b8 = 4 << 8 | 8 << 17
    assert binaries.scalar_type_name(u4b8) == "uint4b8"
    assert binaries.scalar_type_name(4 | 3 << 8 | 1 << 16) == "fp8 e4m3"
    assert binaries.weight_type(f"void Marlin<__nv_bfloat16, {u4b8}l, 256, 4>(int)") == "uint4b8"
    # w8a16 says the width, not the format; fp8lab's namespace is not a type
    assert binaries.weight_type("gemm_w8a16_kernel") == "8-bit"
    assert binaries.weight_type("void fp8lab::wo::gemv_w8a16_fp8<1>()") == "fp8 e4m3"
    assert binaries.weight_type("fp8lab::hmma_peak::hmma_peak_kernel(const __nv_bfloat16 *)") == "?"
    assert binaries.weight_type("gemv_w4a16_int4") == "int4"
    assert binaries.weight_type("void mma_bf16()") == "?"


# ---------------------------------------------------------------------------------------
# Wheels, temp folders, interruption

def _wheel(tmp_path, so):
    whl = tmp_path / "pkg-0.1-py3-none-any.whl"
    import _ctypes  # a shared object with no CUDA device code
    with zipfile.ZipFile(whl, "w") as zf:
        zf.write(so, "pkg/lib/libpair.so")
        zf.write(_ctypes.__file__, "pkg/_plain.so")
        zf.writestr("pkg/__init__.py", "")
    return whl


def test_wheel_extracts_only_shared_objects(pair_so, tmp_path, own_tmp, monkeypatch):
    whl = _wheel(tmp_path, pair_so)
    extracted = []
    real = zipfile.ZipFile.extract
    monkeypatch.setattr(zipfile.ZipFile, "extract",
                        lambda self, m, *a, **kw: extracted.append(m.filename) or real(self, m, *a, **kw))
    r = binaries.census([whl], archs=["sm_80"], kernel_filter="bf16")
    assert sorted(extracted) == ["pkg/_plain.so", "pkg/lib/libpair.so"]
    assert [(k["library"], k["kernel"]) for k in r.kernels] == [
        (f"{whl.name}!pkg/lib/libpair.so", "mma_bf16")]
    assert (f"{whl.name}!pkg/_plain.so", "no CUDA device code") in r.notes
    text = binaries.render(r)  # the wheel named once, its members in the rows
    assert text.splitlines()[0] == f"{whl.name}:" and "\npkg/lib/libpair.so  sm_80  bf16" in text
    assert not list(own_tmp.iterdir())


def test_interrupt_kills_children_and_removes_temp(pair_so, tmp_path, own_tmp, monkeypatch):
    whl = _wheel(tmp_path, pair_so)
    started = []

    def fake(cub, rx, children, tool):
        if cub.arch == "sm_80":  # a long tool run
            p = children.popen(["sleep", "60"])
            started.append(p)
            p.wait()
            children.done(p)
            return []
        for _ in range(200):  # the other job: Ctrl-C once the sleep runs
            if started:
                break
            threading.Event().wait(0.05)
        raise KeyboardInterrupt
    monkeypatch.setattr(binaries, "disassemble_cubin", fake)
    with pytest.raises(KeyboardInterrupt):
        binaries.census([whl], archs=["sm_80", "sm_89"], workers=2)
    assert started and started[0].poll() == -9  # killed (SIGKILL), not left running
    assert not list(own_tmp.iterdir())


# ---------------------------------------------------------------------------------------
# The command line

def test_cli_prints_table_and_resolves_from_cwd(pair_so, monkeypatch, capsys, own_tmp):
    monkeypatch.chdir(pair_so.parent)
    assert cli.main(["census", pair_so.name, "--arch", "sm_89", "--filter", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "libpair.so" in out and "bf16" in out and "HMMA" in out and "mma_e4m3" not in out


@pytest.mark.parametrize("args, msg", [
    (["no/such.so"], "no/such.so: no such file"),
    (["{notcuda}"], "is not a CUDA binary"),
    (["{so}", "--filter", "("], "not a valid regular expression"),
    (["{so}", "--arch", "hopper"], "arch must look like"),
])
def test_cli_errors_one_line_before_any_work(args, msg, pair_so, tmp_path, spy, capsys):
    notcuda = tmp_path / "x.so"
    notcuda.write_text("hello")
    args = [a.format(so=pair_so, notcuda=notcuda) for a in args]
    assert cli.main(["census", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1 and err.startswith("fp8lab census: error:")
    assert spy == []


def test_cli_out_writes_csvs_not_into_the_committed_census(pair_so, sandbox, tmp_path, capsys):
    own = sandbox / "data" / "cpu" / "09_sass_census"
    assert cli.main(["census", str(pair_so), "--out", str(own)]) == 2
    assert "committed census" in capsys.readouterr().err and not own.exists()
    out = own / "binaries" / "libpair"
    assert cli.main(["census", str(pair_so), "--filter", "bf16", "--out", str(out)]) == 0
    kernels = (out / "census_kernels.csv").read_text().splitlines()
    assert kernels[0] == ",".join(binaries.KERNEL_COLUMNS) and len(kernels) == 3  # 2 archs
    summary = (out / "census_summary.csv").read_text().splitlines()
    assert summary[0] == ",".join(binaries.SUMMARY_COLUMNS)
    assert any(line.startswith("libpair.so,sm_80,bf16,?,HMMA,1") for line in summary)


def test_cli_default_writes_nothing(pair_so, sandbox, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = sorted(p for p in sandbox.rglob("*"))
    assert cli.main(["census", str(pair_so), "--filter", "bf16"]) == 0
    assert sorted(p for p in sandbox.rglob("*")) == before


@pytest.mark.parametrize("tool", ["nvdisasm", "cuobjdump"])
@pytest.mark.parametrize("kernel_filter", [None, "bf16|e4m3"])
def test_counts_agree_with_the_full_disassembly(pair_so, own_tmp, tool, kernel_filter):
    """Filter-first (nvdisasm / cuobjdump on extracted cubins, -fun or not) counts what
    sass.sass_census (cuobjdump -sass on the whole .so) counts, kernel by kernel: the
    alignment NOPs after nvdisasm's labelled self-branch are not counted either."""
    from fp8lab.toolchain import sass
    full = sass.sass_census(pair_so, arch=["sm_80", "sm_89"], demangle_names=False)
    want = {(a, k): int(n) for (a, k), n in full.groupby(["arch", "kernel"])["count"].sum().items()}
    r = binaries.census([pair_so], archs=["sm_80", "sm_89"], demangle_names=False, tool=tool,
                        kernel_filter=kernel_filter)
    assert {(k["arch"], k["kernel"]): k["instructions"] for k in r.kernels} == want


def test_tools_scratch_files_go_into_the_census_temp_folder(pair_so, own_tmp, monkeypatch):
    """cuobjdump -sass leaves /tmp/tmpxft_* when killed: every tool runs with TMPDIR inside
    the census's own temp folder, which is removed at the end."""
    tmpdirs = []
    real = subprocess.Popen

    def popen(cmd, **kw):
        if Path(cmd[0]).name in ("cuobjdump", "nvdisasm"):
            tmpdirs.append((kw.get("env") or {}).get("TMPDIR"))
        return real(cmd, **kw)
    monkeypatch.setattr(subprocess, "Popen", popen)
    binaries.census([pair_so], archs=["sm_89"], kernel_filter="bf16", tool="cuobjdump")
    assert tmpdirs and all(t and Path(t).parent.parent == own_tmp for t in tmpdirs)
    assert not list(own_tmp.iterdir())


def test_bare_cubin_notes(mma_pair_cubin, tmp_path, own_tmp):
    """A cubin of another arch, or one whose ELF cannot be read, is a note, not a traceback."""
    r = binaries.census([mma_pair_cubin], archs=["sm_80"])
    assert r.notes == [(mma_pair_cubin.name, "no cubin for the requested architectures (has sm_89)")]
    broken = tmp_path / "broken.cubin"
    data = bytearray(mma_pair_cubin.read_bytes())
    data[40:48] = (len(data) + 10_000).to_bytes(8, "little")  # section headers past the end
    broken.write_bytes(bytes(data))
    r = binaries.census([broken])
    assert r.kernels == [] and r.notes[0][1].startswith("cubin not readable")


# ---------------------------------------------------------------------------------------
# sm_90a vs sm_90 in a bare cubin

@pytest.fixture(scope="session")
def sm90a_cubin(tmp_path_factory):
    out = tmp_path_factory.mktemp("cubin90a") / "mma_pair_sm_90a.cubin"
    run_tool("nvcc", ["-cubin", "-arch=sm_90a", "-o", out, SRC])
    return out


def test_bare_cubin_tells_sm_90a_from_sm_90(sm90_cubin, sm90a_cubin, own_tmp):
    """Same e_flags; the suffix comes from the cubin's sections, as cuobjdump reads it."""
    assert binaries._read_elf(sm90_cubin)[1] == binaries._read_elf(sm90a_cubin)[1]
    assert binaries.bare_cubin_arch(sm90_cubin) == "sm_90"
    assert binaries.bare_cubin_arch(sm90a_cubin) == "sm_90a"
    # without the compiler's note, .nv.compat's attribute 0x09 tells 'a'
    _m, flags, abi, _s, sec = binaries._read_elf_sections(sm90a_cubin)
    assert binaries.cubin_arch(flags, abi, {".nv.compat": sec[".nv.compat"]}) == "sm_90a"
    _m, flags, abi, _s, sec = binaries._read_elf_sections(sm90_cubin)
    assert binaries.cubin_arch(flags, abi, {".nv.compat": sec[".nv.compat"]}) == "sm_90"
    # --arch sm_90 takes the family (sm_90 and sm_90a) and reports which; sm_90a only itself
    r = binaries.census([sm90_cubin, sm90a_cubin], archs=["sm_90"], kernel_filter="bf16")
    assert sorted((k["library"], k["arch"]) for k in r.kernels) == [
        (sm90_cubin.name, "sm_90"), (sm90a_cubin.name, "sm_90a")]
    r = binaries.census([sm90_cubin, sm90a_cubin], archs=["sm_90a"], kernel_filter="bf16")
    assert [k["arch"] for k in r.kernels] == ["sm_90a"]
    assert r.notes == [(sm90_cubin.name, "no cubin for the requested architectures (has sm_90)")]
    assert "sm_90a" in binaries.render(r)


# ---------------------------------------------------------------------------------------
# The kill path: SIGTERM (what the runner sends the kernel's process group) cleans up

_KILLED = """
import sys, tempfile
tempfile.tempdir = sys.argv[1]
from pathlib import Path
from fp8lab.toolchain import binaries
from fp8lab.experiments import census
fake = sys.argv[2]
if sys.argv[3] == "nvcc":     # notebook 09's build of fp8lab's kernels
    census.find_tool = lambda name: fake
    census.have_tool = lambda name: True
    census.census_fp8lab(["sm_89"], triton=False, kernels_dir=Path(sys.argv[4]))
else:                         # a user binary through fp8lab.toolchain.binaries
    binaries.find_tool = lambda name: fake
    binaries.census([sys.argv[4]], kernel_filter="bf16", tool="nvdisasm")
"""


@pytest.mark.parametrize("what", ["nvcc", "nvdisasm"])
def test_sigterm_kills_tools_and_removes_the_temp_folder(what, tmp_path, mma_pair_cubin):
    import os
    import signal
    import time
    systmp = tmp_path / "systmp"
    systmp.mkdir()
    pids = tmp_path / "pids"
    pids.mkdir()
    fake = tmp_path / "fake_tool"
    # a tool that writes a scratch file into its TMPDIR and runs for a minute
    fake.write_text(f"#!/bin/sh\necho x > \"$TMPDIR/tmpxft_scratch\"\necho $$ > {pids}/$$\nexec sleep 60\n")
    fake.chmod(0o755)
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(SRC, src / "mma_pair.cu")
    target = src if what == "nvcc" else mma_pair_cubin
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(systmp), str(fake), what, str(target)],
                            env={**os.environ, "PYTHONPATH": str(root), "FP8LAB_CACHE_DIR": str(tmp_path / "cache")},
                            start_new_session=True)
    try:
        t_end = time.monotonic() + 60
        while not list(pids.iterdir()) and time.monotonic() < t_end and proc.poll() is None:
            time.sleep(0.05)
        assert list(pids.iterdir()), "the fake tool never started"
        assert [p.name for p in systmp.iterdir() if p.name.startswith(binaries.TEMP_PREFIX)]
        os.kill(proc.pid, signal.SIGTERM)   # the process only: its own clean-up must kill the tool
        assert proc.wait(timeout=20) == -signal.SIGTERM   # it still ends, as asked
    finally:
        if proc.poll() is None:
            proc.kill()
    tool_pid = int(next(pids.iterdir()).name)
    from fp8lab.toolchain import procs
    assert not procs.alive(tool_pid)
    assert list(systmp.iterdir()) == []     # no fp8lab-census-*, no tmpxft_* left
    cubins = tmp_path / "cache" / "cubin"   # nvcc's output folder in the cubin cache: gone, no entry
    assert not cubins.is_dir() or list(cubins.iterdir()) == []
