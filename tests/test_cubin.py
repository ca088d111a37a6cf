"""The one nvcc -cubin cache (fp8lab.toolchain.cubin): keyed on content, errors kept, kills not."""
from pathlib import Path

import pytest

from fp8lab.toolchain import cubin
from fp8lab.toolchain.tools import have_tool


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FP8LAB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "cubin"


class FakeNvcc:
    """A runner: writes the -o file (rc 0) or fails with ``rc`` and ``err``."""

    def __init__(self, rc=0, err=""):
        self.rc, self.err, self.calls = rc, err, []

    def __call__(self, cmd):
        self.calls.append(cmd)
        if self.rc == 0:
            Path(cmd[cmd.index("-o") + 1]).write_bytes(b"ELF" + " ".join(cmd).encode())
        return self.rc, "ptxas info    : Used 32 registers\n", self.err


def _src(tmp_path):
    src, hdr = tmp_path / "k.cu", tmp_path / "k.cuh"
    src.write_text('#include "k.cuh"\n__global__ void k() {}\n')
    hdr.write_text("// v1\n")
    return src, hdr


def test_a_hit_returns_the_entry_and_its_log(cache, tmp_path):
    src, hdr = _src(tmp_path)
    nvcc = FakeNvcc()
    a = cubin.compile_cubin(src, "sm_90", key_files=[hdr], runner=nvcc)
    b = cubin.compile_cubin(src, "sm_90", key_files=[hdr], runner=nvcc)
    assert a.ok and not a.cached and b.cached and len(nvcc.calls) == 1
    assert a.cubin == b.cubin and a.cubin.read_bytes().startswith(b"ELF") and "32 registers" in b.log
    assert b.compile_s == pytest.approx(a.compile_s, abs=1e-3)          # the compile that made the entry
    assert [p.name for p in cache.iterdir() if p.name.startswith("tmp-")] == []   # no temp folder left
    assert cubin.compile_cubin(src, "sm_90", key_files=[hdr], runner=nvcc, refresh=True).cached is False
    assert len(nvcc.calls) == 2


def test_the_key_covers_headers_flags_defines_and_arch(cache, tmp_path):
    src, hdr = _src(tmp_path)
    nvcc = FakeNvcc()
    keys = {cubin.compile_cubin(src, "sm_90", key_files=[hdr], runner=nvcc).key}
    keys.add(cubin.compile_cubin(src, "sm_89", key_files=[hdr], runner=nvcc).key)
    keys.add(cubin.compile_cubin(src, "sm_90", key_files=[hdr], defines=["X=1"], runner=nvcc).key)
    keys.add(cubin.compile_cubin(src, "sm_90", key_files=[hdr], flags=("-O2",), runner=nvcc).key)
    hdr.write_text("// v2\n")                            # an edit to an included header: a new entry
    keys.add(cubin.compile_cubin(src, "sm_90", key_files=[hdr], runner=nvcc).key)
    assert len(keys) == 5 and len(nvcc.calls) == 5
    assert "-DX=1" in nvcc.calls[2] and "-O2" in nvcc.calls[3] and "-arch=sm_89" in nvcc.calls[1]


def test_a_compile_error_is_kept_a_kill_is_not(cache, tmp_path):
    src, hdr = _src(tmp_path)
    bad = FakeNvcc(rc=2, err="k.cu(2): error: static assertion failed with \"pad\"\n")
    first = cubin.compile_cubin(src, "sm_90", runner=bad)
    again = cubin.compile_cubin(src, "sm_90", runner=bad)
    assert not first.ok and first.cubin is None and again.cached and len(bad.calls) == 1
    assert again.error() == 'nvcc: static assertion failed with "pad"' and "static assertion" in again.log
    killed = FakeNvcc(rc=-9)
    src.write_text("__global__ void other() {}\n")
    assert cubin.compile_cubin(src, "sm_90", runner=killed).rc == -9
    assert cubin.compile_cubin(src, "sm_90", runner=killed).cached is False and len(killed.calls) == 2
    assert not list(cache.glob("*.json.tmp")) and not [p for p in cache.iterdir() if p.name.startswith("tmp-")]


def test_headers_under(tmp_path):
    (tmp_path / "common").mkdir()
    for name in ("a.cuh", "b.h", "common/c.cuh", "d.cu", "e.py", "f.inc"):
        (tmp_path / name).write_text("")
    assert [p.relative_to(tmp_path).as_posix() for p in cubin.headers_under(tmp_path)] == \
        ["a.cuh", "b.h", "common/c.cuh", "f.inc"]


@pytest.mark.skipif(not have_tool("nvcc"), reason="nvcc not installed")
def test_real_nvcc_builds_and_reports(cache, tmp_path):
    src = tmp_path / "add.cu"
    src.write_text("__global__ void add(float* x) { x[threadIdx.x] += 1.0f; }\n")
    b = cubin.compile_cubin(src, "sm_90", flags=("-O3", "-Xptxas", "-v"))
    assert b.ok and b.cubin.stat().st_size > 0 and "Used" in b.log and "registers" in b.log
    src.write_text("__global__ void add(float* x) { x[threadIdx.x] += undefined_name; }\n")
    e = cubin.compile_cubin(src, "sm_90")
    assert not e.ok and "undefined" in e.error()
