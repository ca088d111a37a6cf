"""vLLM's CUDA per-token-group FP8 quantiser built from vLLM's released source
(fp8lab.peers.vllm_quant): its catalog row, the one-line reasons when something is missing, the
sdist unpack (only the pinned sdist, only the files the kernel compiles from), its CLI, the CPU
compile of its file and fp8lab's binding, and on the GPU its codes and scales at shapes it was
never tuned on."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from fp8lab.arms import peer_catalog, registry
from fp8lab.peers import discover, vllm_quant
from fp8lab.peers.discover import PeerUnavailable

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_source(tmp_path, monkeypatch):
    monkeypatch.setenv(vllm_quant.SRC_ENV, str(tmp_path / "nosrc"))
    monkeypatch.setenv(vllm_quant.BUILD_ENV, str(tmp_path / "nobuild"))
    discover.reset()
    yield tmp_path
    discover.reset()


def test_it_is_a_quantiser_peer_of_06b_built_from_source_with_an_adapter_and_a_style():
    p = peer_catalog.get("peer_vllm_cuda_quant_group")
    assert p.kind == "quantiser" and p.notebooks == ("06b",) and p.discover == "build" and p.group == 128
    assert p.module in discover.BUILD_IMPORTS and p.module in discover.BUILD_VERSIONS
    from fp8lab.peers import adapters
    assert adapters.QUANTISERS["peer_vllm_cuda_quant_group"] is adapters.vllm_cuda_quant_group
    assert registry.short_label("peer_vllm_cuda_quant_group") == "vLLM CUDA quant"


def test_missing_source_is_a_not_run_line_with_the_command(no_source):
    why = vllm_quant.missing_source()
    assert why and "--source-peers vllm" in why and "\n" not in why
    with pytest.raises(PeerUnavailable, match="--source-peers vllm"):
        vllm_quant.ops()
    ok, why = vllm_quant.prebuild_ready()
    assert not ok and "--source-peers vllm" in why


def _sdist(path: Path, files: dict) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{vllm_quant.VLLM_VERSION}/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def test_gather_takes_only_the_pinned_sdist_and_only_the_kernels_files(tmp_path, monkeypatch):
    files = {p: f"// {p}\n" for p in vllm_quant.SDIST_PATHS}
    files["csrc/other/big_kernel.cu"] = "// not needed\n"
    files["vllm/__init__.py"] = "\n"
    sdist = _sdist(tmp_path / vllm_quant.SDIST, files)
    with pytest.raises(ValueError, match="is not vLLM"):                 # another file than the pinned one
        vllm_quant.gather(tmp_path / "dest", sdist)
    monkeypatch.setattr(vllm_quant, "SDIST_SHA256", hashlib.sha256(sdist.read_bytes()).hexdigest())
    dest = tmp_path / "dest"
    assert vllm_quant.gather(dest, sdist) == vllm_quant.VLLM_VERSION
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert got == sorted([*vllm_quant.SDIST_PATHS, ".fp8lab-source.json"])
    assert vllm_quant.missing_source(dest) is None and vllm_quant.source_stamp(dest)["version"] == vllm_quant.VLLM_VERSION
    vllm_quant.gather(dest, sdist)                                       # replaces its own unpack
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(FileExistsError):                                 # never someone else's files
        vllm_quant.gather(tmp_path / "mine", sdist)
    del files["csrc/torch_utils.h"]
    short = _sdist(tmp_path / "short.tar.gz", files)
    monkeypatch.setattr(vllm_quant, "SDIST_SHA256", hashlib.sha256(short.read_bytes()).hexdigest())
    with pytest.raises(ValueError, match="lacks csrc/torch_utils.h"):
        vllm_quant.gather(tmp_path / "dest2", short)


def test_cli_build_without_source_says_what_to_run(no_source):
    env = {**os.environ, vllm_quant.SRC_ENV: str(no_source / "nosrc"), vllm_quant.BUILD_ENV: str(no_source / "b")}
    r = subprocess.run([sys.executable, "-m", "fp8lab.peers", "build", "vllm-quant"], capture_output=True,
                       text=True, cwd=ROOT, env=env)
    assert r.returncode == 2 and "--source-peers vllm" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "fp8lab.peers", "check-compile", "vllm-quant"], capture_output=True,
                       text=True, cwd=ROOT, env=env)
    assert r.returncode == 2 and "--source-peers vllm" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_the_source_and_binding_compile_for_sm90_here():
    """The CPU proof: needs the unpacked source, nvcc, and torch's headers (torch, or
    $FP8LAB_TORCH_INCLUDE: e.g. the box torch wheel's torch/include)."""
    if vllm_quant.missing_source():
        pytest.skip(vllm_quant.missing_source())
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    try:
        import torch  # noqa: F401
    except ImportError:
        if not os.environ.get("FP8LAB_TORCH_INCLUDE"):
            pytest.skip("needs torch or $FP8LAB_TORCH_INCLUDE (about 1 min)")
    from fp8lab.toolchain.tools import ToolNotFound

    try:
        r = vllm_quant.compile_check()
    except ToolNotFound as e:          # e.g. torch here but no cuobjdump (not the cpu extra)
        pytest.skip(str(e).splitlines()[0])
    assert r["ok"], r["errors"]
    assert any("per_token_group_quant_8bit" in k for k in r["kernels"])


@pytest.mark.gpu
@pytest.mark.parametrize("M, K", [(1, 256), (7, 1152), (33, 4096), (130, 640)])
def test_vllm_quantiser_at_shapes_it_was_not_tuned_on(M, K):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from fp8lab.kernels import baselines
    from fp8lab.peers import adapters

    a = discover.availability("peer_vllm_cuda_quant_group")
    if not a.ok:
        pytest.skip(a.reason)
    fn = adapters.vllm_cuda_quant_group()
    g = torch.Generator("cuda").manual_seed(M * K)
    x = (torch.randn(M, K, device="cuda", generator=g) * torch.logspace(-3, 2, K, device="cuda")).to(torch.bfloat16)
    q, s = fn(x)
    torch.cuda.synchronize()
    assert q.shape == (M, K) and q.dtype == torch.float8_e4m3fn and s.shape == (M, K // 128)
    assert torch.isfinite(s).all() and (s > 0).all() and torch.isfinite(q.float()).all()
    # round-to-nearest e4m3 is within 2^-4 of each normal value, relative; subnormals' absolute
    # error is nothing beside the group's norm: per group ||back - x|| <= 2^-4 ||x||
    back = (q.float().reshape(M, K // 128, 128) * s[..., None]).double()
    xd = x.double().reshape(M, K // 128, 128)
    err = (back - xd).norm(dim=-1) / xd.norm(dim=-1)
    assert float(err.max()) <= 2 ** -4 * 1.01, float(err.max())
    rq, rs = baselines.quant_act_reference(x)
    assert torch.allclose(s, rs, rtol=2 ** -20, atol=0), float(((s - rs).abs() / rs).max())
