"""SGLang's per-token-group FP8 quantiser built from sglang's wheel (fp8lab.peers.sglang_quant): its
catalog row, the one-line reasons when something is missing, the wheel unpack (only the pinned
wheels, only the kernel's header, the headers it includes and tvm-ffi's headers and library), its
CLI, the CPU compile of fp8lab's entry with sglang's header, and on the GPU its codes and scales at
shapes it was never tuned on, inside a CUDA graph too."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fp8lab.arms import peer_catalog, registry
from fp8lab.peers import discover, sglang_quant as sq
from fp8lab.peers.discover import PeerUnavailable

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_source(tmp_path, monkeypatch):
    monkeypatch.setenv(sq.SRC_ENV, str(tmp_path / "nosrc"))
    monkeypatch.setenv(sq.BUILD_ENV, str(tmp_path / "nobuild"))
    discover.reset()
    yield tmp_path
    discover.reset()


def test_it_is_a_quantiser_peer_of_06b_built_from_source_with_an_adapter_and_a_style():
    p = peer_catalog.get("peer_sglang_jit_quant_group")
    assert p.kind == "quantiser" and p.notebooks == ("06b",) and p.discover == "build" and p.group == 128
    assert p.module in discover.BUILD_IMPORTS and p.module in discover.BUILD_VERSIONS and p.min_sm == 90
    from fp8lab.peers import adapters
    assert adapters.QUANTISERS["peer_sglang_jit_quant_group"] is adapters.sglang_jit_quant_group
    assert registry.short_label("peer_sglang_jit_quant_group") == "SGLang quant"
    assert "sglang" in p.install and "no sdist" in p.note


def test_missing_source_is_a_not_run_line_with_the_command(no_source):
    why = sq.missing_source()
    assert why and "--source-peers sglang" in why and "\n" not in why
    with pytest.raises(PeerUnavailable, match="--source-peers sglang"):
        sq.ops()
    ok, why = sq.prebuild_ready()
    assert not ok and "--source-peers sglang" in why


def _wheel(path: Path, files: dict) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def test_gather_takes_only_the_pinned_wheels_and_only_the_kernels_files(tmp_path, monkeypatch):
    sfiles = {p: f"// {p}\n" for p in sq.SGL_PATHS}
    sfiles["sglang/kernels/jit/csrc/gemm/other.cuh"] = "// not needed\n"
    sfiles["sglang/__init__.py"] = "\n"
    tfiles = {"tvm_ffi/include/tvm/ffi/extra/c_env_api.h": "//\n", "tvm_ffi/include/dlpack/dlpack.h": "//\n",
              "tvm_ffi/lib/libtvm_ffi.so": "ELF", "tvm_ffi/lib/libtvm_ffi_testing.so": "ELF",
              "tvm_ffi/core.abi3.so": "ELF", f"apache_tvm_ffi-{sq.TVM_FFI_VERSION}.dist-info/licenses/LICENSE": "L"}
    sw, tw = _wheel(tmp_path / sq.WHEEL, sfiles), _wheel(tmp_path / sq.TVM_WHEEL, tfiles)
    with pytest.raises(ValueError, match="is not sglang"):                # another file than the pinned one
        sq.gather(tmp_path / "dest", sw, tw)
    monkeypatch.setattr(sq, "WHEEL_SHA256", hashlib.sha256(sw.read_bytes()).hexdigest())
    with pytest.raises(ValueError, match="is not apache_tvm_ffi"):
        sq.gather(tmp_path / "dest", sw, tw)
    monkeypatch.setattr(sq, "TVM_WHEEL_SHA256", hashlib.sha256(tw.read_bytes()).hexdigest())
    dest = tmp_path / "dest"
    assert sq.gather(dest, sw, tw) == sq.SGLANG_VERSION
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    want = [*sq.SGL_PATHS, ".fp8lab-source.json", "tvm_ffi/include/tvm/ffi/extra/c_env_api.h",
            "tvm_ffi/include/dlpack/dlpack.h", "tvm_ffi/lib/libtvm_ffi.so",
            f"apache_tvm_ffi-{sq.TVM_FFI_VERSION}.dist-info/licenses/LICENSE"]
    assert got == sorted(want)                                             # not the other .so files, not sglang's rest
    assert sq.missing_source(dest) is None and sq.source_stamp(dest)["tvm_ffi"] == sq.TVM_FFI_VERSION
    sq.gather(dest, sw, tw)                                                 # replaces its own unpack
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(FileExistsError):                                   # never someone else's files
        sq.gather(tmp_path / "mine", sw, tw)
    del sfiles[sq.KERNEL_HEADER]
    short = _wheel(tmp_path / "short.whl", sfiles)
    monkeypatch.setattr(sq, "WHEEL_SHA256", hashlib.sha256(short.read_bytes()).hexdigest())
    with pytest.raises(ValueError, match="lacks sglang/kernels/jit/csrc/gemm/per_token_group_quant.cuh"):
        sq.gather(tmp_path / "dest2", short, tw)


def test_the_build_links_the_carried_tvm_ffi_with_sglangs_flags(tmp_path):
    cmd = sq.compile_command(tmp_path / "src", tmp_path / "out.so", "nvcc")
    assert "-shared" in cmd and "-ltvm_ffi" in cmd and "--use_fast_math" in cmd and "-std=c++20" in cmd
    assert "-DSGL_CUDA_ARCH=900" in cmd and "-gencode=arch=compute_90a,code=sm_90a" in cmd
    assert f"-L{tmp_path / 'src' / 'tvm_ffi' / 'lib'}" in cmd
    assert "-c" in sq.compile_command(tmp_path / "src", tmp_path / "o.o", "nvcc", shared=False)


def test_cli_build_without_source_says_what_to_run(no_source):
    env = {**os.environ, sq.SRC_ENV: str(no_source / "nosrc"), sq.BUILD_ENV: str(no_source / "b")}
    for args in (["build", "sglang-quant"], ["check-compile", "sglang-quant"]):
        r = subprocess.run([sys.executable, "-m", "fp8lab.peers", *args], capture_output=True, text=True, cwd=ROOT,
                           env=env)
        assert r.returncode == 2 and "--source-peers sglang" in r.stderr and "Traceback" not in r.stderr, args


def test_the_entry_and_sglangs_header_compile_for_sm90a_here():
    """The CPU proof (about 10 s): needs the unpacked source and nvcc."""
    if sq.missing_source():
        pytest.skip(sq.missing_source())
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    from fp8lab.toolchain.tools import ToolNotFound

    try:
        r = sq.compile_check()
    except ToolNotFound as e:
        pytest.skip(str(e).splitlines()[0])
    assert r["ok"], r["errors"]
    assert len(r["kernels"]) == 4 and all("per_token_group_quant_flat_kernel" in k for k in r["kernels"])


def _fn():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    a = discover.availability("peer_sglang_jit_quant_group")
    if not a.ok:
        pytest.skip(a.reason)
    from fp8lab.peers import adapters
    return torch, adapters.sglang_jit_quant_group()


def _check(torch, x, q, s):
    from fp8lab.kernels import baselines
    M, K = x.shape
    assert q.shape == (M, K) and q.dtype == torch.float8_e4m3fn and s.shape == (M, K // 128)
    assert torch.isfinite(s).all() and (s > 0).all() and torch.isfinite(q.float()).all()
    # round-to-nearest e4m3 is within 2^-4 of each normal value, relative: per group ||back - x|| <= 2^-4 ||x||
    back = (q.float().reshape(M, K // 128, 128) * s[..., None]).double()
    xd = x.double().reshape(M, K // 128, 128)
    err = (back - xd).norm(dim=-1) / xd.norm(dim=-1)
    assert float(err.max()) <= 2 ** -4 * 1.01, float(err.max())
    _, rs = baselines.quant_act_reference(x)
    assert torch.allclose(s, rs, rtol=2 ** -20, atol=0), float(((s - rs).abs() / rs).max())   # amax / 448


@pytest.mark.gpu
@pytest.mark.parametrize("M, K", [(1, 256), (7, 1152), (33, 4096), (130, 640)])
def test_sglang_quantiser_at_shapes_it_was_not_tuned_on(M, K):
    torch, fn = _fn()
    g = torch.Generator("cuda").manual_seed(M * K)
    x = (torch.randn(M, K, device="cuda", generator=g) * torch.logspace(-3, 2, K, device="cuda")).to(torch.bfloat16)
    q, s = fn(x)
    torch.cuda.synchronize()
    _check(torch, x, q, s)


@pytest.mark.gpu
def test_sglang_quantiser_on_torchs_stream_and_in_a_cuda_graph():
    """It runs on the caller's stream (tvm-ffi's environment stream set for the call): captured
    into a CUDA graph after a kernel that writes its input, replayed, right."""
    torch, fn = _fn()
    M, K = 16, 7168
    src = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    x = torch.zeros_like(src)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        torch.mul(src, 1, out=x)
        q, s = fn(x)
    g.replay()
    torch.cuda.synchronize()
    _check(torch, src, q, s)
