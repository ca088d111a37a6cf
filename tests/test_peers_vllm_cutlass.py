"""vLLM's CUTLASS blockwise FP8 GEMM for Hopper built from its source (fp8lab.peers.vllm_cutlass):
what it needs, the one-line reasons when something is missing, the CUTLASS 4 forwarding header,
its CLI, and on the GPU its result at shapes it was never tuned on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fp8lab.arms import peer_catalog, registry
from fp8lab.peers import discover, vllm_cutlass
from fp8lab.peers.discover import PeerUnavailable

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_source(tmp_path, monkeypatch):
    monkeypatch.setenv("FP8LAB_VLLM_SRC", str(tmp_path / "nosrc"))
    monkeypatch.setenv(vllm_cutlass.BUILD_ENV, str(tmp_path / "nobuild"))
    discover.reset()
    yield tmp_path
    discover.reset()


def test_it_is_a_blockwise_peer_of_05_and_06_with_an_adapter_and_a_style():
    p = peer_catalog.get("peer_vllm_cutlass_blockwise")
    assert p.kind == "blockwise" and set(p.notebooks) == {"05", "06"} and p.discover == "build"
    assert p.module in discover.BUILD_IMPORTS and p.module in discover.BUILD_VERSIONS and p.min_sm == 90
    from fp8lab.peers import adapters
    assert adapters.BLOCKWISE["peer_vllm_cutlass_blockwise"] is adapters.vllm_cutlass_blockwise
    assert registry.short_label("peer_vllm_cutlass_blockwise") == "vLLM CUTLASS"


def test_missing_source_is_a_not_run_line_with_the_commands(no_source):
    why = vllm_cutlass.missing_source()
    assert why and "--source-peers vllm" in why and "\n" not in why
    a = discover.availability("peer_vllm_cutlass_blockwise")
    assert not a.ok and a.status().startswith("not-run: ") and "build vllm-cutlass" in a.install


def test_a_source_without_a_build_says_to_build_it(tmp_path, monkeypatch):
    src = tmp_path / "src"
    for rel in (*vllm_cutlass.CU_SOURCES, *vllm_cutlass.HEADERS, "csrc/torch_utils.h"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("//\n")
    monkeypatch.setenv("FP8LAB_VLLM_SRC", str(src))
    monkeypatch.setenv(vllm_cutlass.BUILD_ENV, str(tmp_path / "b"))
    assert vllm_cutlass.missing_source() is None and vllm_cutlass.built() is None
    with pytest.raises(PeerUnavailable, match="build vllm-cutlass"):
        vllm_cutlass.ops()


def test_include_dirs_are_vllms_csrc_and_cutlass_with_its_util(tmp_path):
    inc = tmp_path / "c4" / "include"
    (tmp_path / "c4" / "tools" / "util" / "include").mkdir(parents=True)
    incs = vllm_cutlass.include_dirs(tmp_path / "src", inc)
    assert incs[0].endswith("src/csrc") and incs[1].endswith("csrc/quantization/w8a8/cutlass")
    assert incs[2] == str(inc) and incs[3].endswith("tools/util/include")


def test_the_cli_says_what_is_missing_without_a_traceback(no_source):
    for args in (["build", "vllm-cutlass"], ["check-compile", "vllm-cutlass"]):
        r = subprocess.run([sys.executable, "-m", "fp8lab.peers", *args], capture_output=True, text=True,
                           cwd=ROOT, timeout=120, env={**__import__("os").environ})
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "--source-peers vllm" in r.stderr


def test_its_source_compiles_for_sm90a_into_cutlass_gemm_kernels():
    """CPU proof of the build: vLLM's blockwise sm90 file and fp8lab's binding with the build's
    flags (torch's headers, the wheel's CUTLASS headers): its SASS holds the GEMMs."""
    import os
    import shutil

    if not os.environ.get("FP8LAB_SLOW"):
        pytest.skip("runs nvcc on a CUTLASS file (~6 min on 2 cores): set FP8LAB_SLOW=1")
    if vllm_cutlass.missing_source() is not None or shutil.which("nvcc") is None:
        pytest.skip("needs the unpacked source and nvcc")
    try:
        r = vllm_cutlass.compile_check()
    except Exception as e:  # noqa: BLE001 - no torch headers / CUTLASS here
        pytest.skip(str(e).splitlines()[0])
    assert r["ok"] and len(r["kernels"]) >= 2, (r["errors"], r["kernels"])


# ------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("N, K, M", [(256, 384, 1), (384, 1280, 7), (1152, 2304, 33), (4224, 896, 130),
                                     (640, 7168, 4)])
def test_vllm_cutlass_is_right_at_shapes_it_was_not_tuned_on(N, K, M):
    """vLLM's CUTLASS blockwise GEMM built here at odd shapes (N, K multiples of 128, M of every
    residue mod 4, stream-K where K > 3 N), every row checked against float64 on the operands its
    adapter quantised, with a NaN-poisoned output (harness.check). Skips only without the source
    or a Hopper GPU; a source that does not build or probe fails."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs a Hopper (sm_90) GPU")
    if vllm_cutlass.missing_source() is not None:
        pytest.skip(vllm_cutlass.missing_source())
    from fp8lab.peers import adapters, harness

    if vllm_cutlass.built() is None:
        vllm_cutlass.build()
    g = torch.Generator("cuda").manual_seed(M)
    x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    prep = adapters.vllm_cutlass_blockwise(x, adapters.dense_weight(N, K, seed=N + K))
    err, nan_left = harness.check(prep, x, ref_x=prep.extra["ref_x"], rows=M)
    assert nan_left == 0, f"left {nan_left} outputs unwritten at N={N} K={K} M={M}"
    assert err < 1e-2, f"relative error {err:.2e} at N={N} K={K} M={M}"


def test_its_version_line_comes_from_the_builds_own_record(tmp_path, monkeypatch):
    """The config column's provenance: build_info.json of this build (vLLM version, CUTLASS, nvcc),
    read by the reader vLLM's Marlin build shares; no record: "source build"."""
    import json

    monkeypatch.setenv(vllm_cutlass.BUILD_ENV, str(tmp_path))
    assert vllm_cutlass.build_info() == {} and vllm_cutlass.version() == "source build"
    (tmp_path / "build_info.json").write_text(json.dumps(dict(version="0.34.0", cutlass="4.2.0",
                                                              nvcc="Build cuda_13.0")))
    assert vllm_cutlass.version() == "vLLM 0.34.0 sdist (CUTLASS 4.2.0 headers; built with Build cuda_13.0)"
    from fp8lab.peers import build, vllm_marlin
    assert vllm_marlin.build_info(tmp_path)["cutlass"] == "4.2.0"
    import shutil
    if shutil.which("nvcc"):
        assert "cuda" in build._nvcc_version(shutil.which("nvcc")).lower()
