"""triton_w8a16's swapab path (out^T = W x^T with split-K, issue 22's small-M weight-only route)
without a GPU: its config rule and checks, the kernel run by Triton's interpreter against
float64 (ragged N and M, every split including empty ones, the counters re-armed; the multiply
and dot in fp32, INTERP_F32, as the interpreter's bf16 ones are wrong), and its
sm_90 compile (HGMMA, no FP8 instruction)."""

import pytest
import triton

from fp8lab.kernels import triton_w8a16 as tw


@pytest.mark.parametrize("M, N, K", [(1, 4096, 4096), (16, 28672, 4096), (16, 4096, 14336), (64, 1024, 8192),
                                     (7, 264, 384), (1, 8192, 128)])
def test_swapab_rule_fills_the_sms_and_keeps_two_k_blocks(M, N, K):
    c = tw.swapab_config(M, N, K, sms=132)
    assert tw._check_swapab(c) == c and c in tw.swapab_configs()
    assert c["BLOCK_T"] >= min(M, 64) and c["BLOCK_T"] // 2 < max(M, 16)       # the smallest that holds M
    n_kb = K // 128
    assert -(-n_kb // c["SPLIT_K"]) >= 2 or c["SPLIT_K"] == 1
    programs = -(-N // c["BLOCK_W"]) * -(-M // c["BLOCK_T"]) * c["SPLIT_K"]
    # two programs per SM unless K has too few blocks to split that far
    allowed = [sk for sk in tw.SWAPAB_SPACE["SPLIT_K"] if -(-n_kb // sk) >= 2] or [1]
    assert programs >= 2 * 132 or c["SPLIT_K"] == max(allowed)
    cands = tw.swapab_candidates(M, N, K, sms=132)
    assert cands[0] == c and len(cands) == len({tuple(sorted(x.items())) for x in cands})
    assert all(tw._check_swapab(x) == x for x in cands)


def test_swapab_config_checks():
    assert tw._check_swapab({"SPLIT_K": 8}) == dict(BLOCK_W=128, BLOCK_T=16, SPLIT_K=8, num_warps=4, num_stages=4,
                                                    DEQ="trick")
    with pytest.raises(ValueError, match="swapab DEQ must be one of"):
        tw._check_swapab({"DEQ": "lut"})
    with pytest.raises(ValueError, match="swapab SPLIT_K must be one of"):
        tw._check_swapab({"SPLIT_K": 3})
    with pytest.raises(ValueError, match="swapab BLOCK_W must be one of"):
        tw._check_swapab({"BLOCK_W": 32})
    with pytest.raises(ValueError, match="swapab config keys are"):
        tw._check_swapab({"BLOCK_M": 16})
    with pytest.raises(ValueError, match="path must be one of"):
        tw.triton_w8a16(None, None, None, path="splitk")


_INTERP = r'''
import os
os.environ["TRITON_INTERPRET"] = "1"
import ml_dtypes, numpy as np, torch, triton
from fp8lab.kernels import triton_w8a16 as tw

M, N, K = 7, 264, 640                       # ragged M and N; 5 K blocks: uneven and empty splits
rng = np.random.default_rng(0)
codes = rng.integers(0, 256, (N, K), dtype=np.uint8)
codes[(codes & 0x7F) == 0x7F] = 0x3C        # no NaN codes
scales = np.exp2(rng.integers(-6, 3, (N, K // 128))).astype(np.float64)   # exact in bf16
x = (rng.standard_normal((M, K)) * 0.5).astype(ml_dtypes.bfloat16)
ref = tw.reference(x.astype(np.float64), codes, scales)
xt = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
qt = torch.from_numpy(codes)
st = tw.fold_scales(torch.from_numpy(scales))

def check(out, what):
    o = out.float().numpy().astype(np.float64)
    err = np.linalg.norm(o - ref) / np.linalg.norm(ref)
    # w x s rounded to bf16 (as Marlin), the interpreter's truncation to bf16 at the end
    assert np.isfinite(o).all() and err < 8e-3, (what, err)
    print(what, f"{err:.2e}")

# split 4 over 5 blocks: kb_per 2, the last split empty; split 8: every split past the fifth empty
for bw, bt, split in ((64, 16, 1), (128, 16, 2), (64, 16, 4), (128, 32, 8)):
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    ws = torch.full((split * M * N,), float("nan"))
    cnt = torch.zeros(64, dtype=torch.int32)
    tw._w8a16_swapab_kernel[(triton.cdiv(N, bw), triton.cdiv(M, bt), split)](
        xt, qt, st, out, ws, cnt, M, N, K, K, K, K // 128, N, BLOCK_W=bw, BLOCK_T=bt, SPLIT_K=split, INTERP_F32=True)
    assert int(cnt.abs().sum()) == 0, "split-K counters not re-armed"
    check(out, f"swapab {bw}x{bt} split {split}")
'''


@pytest.mark.torch
def test_interpreter_runs_the_swapab_kernel(tmp_path):
    pytest.importorskip("torch")
    import os
    import subprocess
    import sys

    if tuple(int(v) for v in triton.__version__.split(".")[:2]) < (3, 9):
        pytest.skip(f"triton {triton.__version__}'s interpreter cannot run range() over run-time ints")
    script = tmp_path / "interp.py"
    script.write_text(_INTERP)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("swapab ") == 4


@pytest.mark.parametrize("BLOCK_W, BLOCK_T, SPLIT_K, DEQ", [(128, 16, 4, "trick"), (64, 64, 1, "trick"),
                                                          (128, 16, 4, "cvt")])
def test_swapab_compiles_to_hgmma_for_sm90(BLOCK_W, BLOCK_T, SPLIT_K, DEQ):
    """bf16 HGMMA, no FP8 MMA, no local memory; FP8 conversion instructions only with DEQ='cvt'."""
    import tempfile
    from pathlib import Path

    from fp8lab.toolchain import sass
    from fp8lab.toolchain.tools import have_tool
    if not have_tool("cuobjdump"):
        pytest.skip("needs cuobjdump")
    r = tw.triton_w8a16_swapab_resource_usage("sm_90", BLOCK_W=BLOCK_W, BLOCK_T=BLOCK_T, SPLIT_K=SPLIT_K, DEQ=DEQ)
    p = Path(tempfile.mkdtemp()) / "k.cubin"
    p.write_bytes(r["cubin"])
    s = sass.mma_summary(sass.sass_census(p, demangle_names=False)).iloc[0]
    assert s["mma_families"] == "HGMMA" and s["mma_fp8"] == 0 and s["local_mem"] == 0
    assert (s["fp8_converts"] > 0) == (DEQ == "cvt"), s["fp8_converts"]
    with pytest.raises(ValueError, match="swapab SPLIT_K"):
        tw.triton_w8a16_swapab_resource_usage("sm_90", SPLIT_K=5)
