"""vLLM's Triton block-FP8 GEMM run from vLLM's released source (fp8lab.peers.vllm_triton): its
catalog row, the one-line reason when the source is missing, the kernel cut unchanged out of vLLM's
file (and refused when the file changed shape), vLLM's config choice, and on the GPU its result at
shapes nobody tuned it on and at one it ships a tuned H200 config for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8lab.arms import peer_catalog, registry
from fp8lab.peers import discover, vllm_quant, vllm_triton
from fp8lab.peers.discover import PeerUnavailable

KERNEL_TEXT = '''import triton

def helper():
    pass


@triton.jit
def _w8a8_triton_block_scaled_mm(A, B, C, BLOCK_SIZE_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    tl.store(C + pid, pid)


def after():
    pass
'''


def _fake_source(root: Path, text: str = KERNEL_TEXT) -> Path:
    f = root / vllm_quant.FP8_UTILS
    f.parent.mkdir(parents=True)
    f.write_text(text)
    return root


def test_it_is_a_blockwise_peer_of_05_and_06_with_an_adapter_and_a_style():
    p = peer_catalog.get("peer_vllm_triton_blockwise")
    assert p.kind == "blockwise" and set(p.notebooks) == {"05", "06"} and p.discover == "build"
    assert p.module in discover.BUILD_IMPORTS and p.module in discover.BUILD_VERSIONS
    from fp8lab.peers import adapters
    assert adapters.BLOCKWISE["peer_vllm_triton_blockwise"] is adapters.vllm_triton_blockwise
    assert registry.short_label("peer_vllm_triton_blockwise") == "vLLM Triton (src)"


def test_missing_source_is_a_not_run_line(tmp_path, monkeypatch):
    monkeypatch.setenv(vllm_quant.SRC_ENV, str(tmp_path / "nosrc"))
    why = vllm_triton.missing_source()
    assert why and "--source-peers vllm" in why and "\n" not in why
    with pytest.raises(PeerUnavailable, match="--source-peers vllm"):
        vllm_triton.kernel()


def test_the_kernel_is_cut_unchanged_and_refused_when_the_file_changed_shape(tmp_path):
    src = _fake_source(tmp_path / "a")
    cut = vllm_triton.kernel_source(src)
    assert cut.startswith("@triton.jit\ndef _w8a8_triton_block_scaled_mm(") and "tl.store(C + pid, pid)" in cut
    assert "def helper" not in cut and "def after" not in cut and cut in KERNEL_TEXT
    gone = _fake_source(tmp_path / "b", KERNEL_TEXT.replace("_w8a8_triton_block_scaled_mm", "_renamed"))
    with pytest.raises(ValueError, match="has no function"):
        vllm_triton.kernel_source(gone)
    autotuned = _fake_source(tmp_path / "c", KERNEL_TEXT.replace("@triton.jit", "@triton.autotune(configs=[])\n@triton.jit"))
    with pytest.raises(ValueError, match="not @triton.jit alone"):
        vllm_triton.kernel_source(autotuned)


def test_the_real_source_parses_when_unpacked():
    if vllm_triton.missing_source():
        pytest.skip(vllm_triton.missing_source())
    cut = vllm_triton.kernel_source()
    assert "tl.dot(a, b) * a_s[:, None] * b_s[None, :]" in cut      # the per-128-K promotion it is known for


def test_config_is_vllms_tuned_entry_nearest_m_else_its_default(tmp_path):
    d = tmp_path / vllm_triton.CONFIG_DIR
    d.mkdir(parents=True)
    f = vllm_triton.config_file(7168, 2304, "NVIDIA H200", tmp_path)
    assert f.parent == d and "device_name=NVIDIA_H200," in f.name
    f.write_text(json.dumps({"1": {"BLOCK_SIZE_M": 16, "num_warps": 4}, "64": {"BLOCK_SIZE_M": 64, "num_warps": 4},
                             "1024": {"BLOCK_SIZE_M": 128, "num_warps": 8}}))
    assert vllm_triton.pick_config(7, 7168, 2304, "NVIDIA H200", tmp_path)[0]["BLOCK_SIZE_M"] == 16
    assert vllm_triton.pick_config(40, 7168, 2304, "NVIDIA H200", tmp_path)[0]["BLOCK_SIZE_M"] == 64
    cfg, where = vllm_triton.pick_config(5000, 7168, 2304, "NVIDIA H200", tmp_path)
    assert cfg["BLOCK_SIZE_M"] == 128 and "entry M=1024" in where
    cfg, where = vllm_triton.pick_config(7, 7168, 2304, "NVIDIA L4", tmp_path)
    assert cfg == vllm_triton.DEFAULT_CONFIG and "default" in where


@pytest.mark.gpu
@pytest.mark.parametrize("N, K, M", [(256, 384, 1), (384, 1280, 7), (1152, 2304, 33), (4224, 896, 130),
                                     (7168, 2304, 7)])       # the last: a shape vLLM ships an H200 config for
def test_vllm_triton_is_right_at_shapes_it_was_not_tuned_on(N, K, M):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    if vllm_triton.missing_source() is not None:
        pytest.skip(vllm_triton.missing_source())
    from fp8lab.peers import adapters, harness

    g = torch.Generator("cuda").manual_seed(M)
    x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    prep = adapters.vllm_triton_blockwise(x, adapters.dense_weight(N, K, seed=N + K))
    err, nan_left = harness.check(prep, x, ref_x=prep.extra["ref_x"], rows=M)
    assert nan_left == 0, f"left {nan_left} outputs unwritten at N={N} K={K} M={M} ({prep.config})"
    assert err < 1e-2, f"relative error {err:.2e} at N={N} K={K} M={M} ({prep.config})"
