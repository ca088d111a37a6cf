"""The weight-only decode kernels on the GPU: the dequant bit for bit against the emulators
over every code, the whole kernel exact on one-hot activations (every code, every packed
position, every tile width), random GEMMs against float64 at odd shapes, split-K leaving its
workspace clean, and bad input refused."""

import numpy as np
import pytest

from fp8lab.emulate import dequant
from fp8lab.emulate.compare import relerr
from fp8lab.kernels import weight_only as wo

pytestmark = pytest.mark.gpu

TORCH_DT = {"bf16": "bfloat16", "fp16": "float16"}


def _t(x, act):
    import torch
    return torch.from_numpy(np.asarray(x, dtype=np.float32)).to(getattr(torch, TORCH_DT[act])).cuda()


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("act", wo.ACT_DTYPES)
def test_dequant_probe_every_code_bitwise(fmt, act):
    codes = np.tile(np.arange(1 << wo.BITS[fmt]), 16)          # every code in every position
    rng = np.random.default_rng(7)
    codes = np.concatenate([codes, rng.permutation(codes)])
    words = dequant.pack(wo.CODE_FORMAT[fmt], codes)
    target = "fp16" if act == "fp16" else "bf16"
    emu = dequant.dequant(wo.CODE_FORMAT[fmt], target, words)
    got = wo.dequant_probe(fmt, act, words)
    assert got.dtype == np.uint16 and got.shape == emu.bits.shape
    assert np.array_equal(got, emu.bits)


def _onehot_run(fmt, act, M, N=64, K=256, seed=0):
    import torch
    codes = wo.all_codes(fmt, N, K, seed=seed)
    sc, gs, a = wo.unit_scales(fmt, act, N, K)
    pw = wo.pack_weights(fmt, codes, sc, act=act, global_scale=gs)
    W = wo.emulate_packed(pw)                   # value x scale, through the emulators
    dev = pw.to("cuda")
    for r in range(K // M):                     # every K column is probed once
        cols = np.arange(M) * (K // M) + r
        x = wo.onehot(M, K, cols, a)
        out = torch.full((M, N), float("nan"), dtype=getattr(torch, TORCH_DT[act]), device="cuda")
        wo.gemv_w16(_t(x, act), dev, out=out)
        expect = x @ W.T                        # exact: one product per output
        got = out.double().cpu().numpy()
        assert np.array_equal(got, expect), (fmt, act, M, r, np.argwhere(got != expect)[:5])


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("act", wo.ACT_DTYPES)
@pytest.mark.parametrize("M", [8, 16, 32, 64])
def test_gemv_onehot_exact_every_code_and_position(fmt, act, M):
    """out[m, n] = value(code[n, k_m]) exactly (compared as values: -0 and +0 are equal), for
    every code in every packed position, with each tile width (NT = 1, 2, 4, 8)."""
    _onehot_run(fmt, act, M)


@pytest.mark.parametrize("act", wo.ACT_DTYPES)
def test_nvfp4_every_block_scale_code(act):
    N, K, M = 64, 1024, 64
    codes = np.full((N, K), 0x2, np.uint8)                       # e2m1 0x2 = 1.0
    rng = np.random.default_rng(3)
    sc = rng.permutation(np.resize(np.arange(256), N * K // 16)).reshape(N, K // 16).astype(np.uint8)
    pw = wo.pack_weights("nvfp4", codes, sc, act=act)
    W = wo.emulate_packed(pw)
    dev = pw.to("cuda")
    for r in range(16):
        cols = np.arange(M) * 16 + r                            # one column of each 16-group
        x = wo.onehot(M, K, cols, 1.0)
        out = wo.gemv_w16(_t(x, act), dev)
        assert np.array_equal(out.double().cpu().numpy(), x @ W.T)
    # and the emulated scale decode is the e4m3 value (0x7F / 0xFF: the trick's +-480)
    v = np.asarray(dequant.dequant_e4m3_fp16(dequant.pack_bytes(np.arange(256))).values())
    assert v[0x38] == 1.0 and abs(v[0x7F]) == 480


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("act", wo.ACT_DTYPES)
@pytest.mark.parametrize("M,N,K", [(1, 96, 384), (7, 200, 640), (83, 136, 256), (3, 2048, 1024)])
def test_gemv_random_vs_float64(fmt, act, M, N, K):
    import torch
    d = wo.generate(fmt, M, N, K, act=act, seed=M * 7 + N)
    pw = wo.pack_weights(fmt, d["codes"], d["scales"], act=act, global_scale=d["global_scale"]).to("cuda")
    ref = wo.reference(fmt, d["act"], d["codes"], d["scales"], d["global_scale"])
    x = _t(d["act"], act)
    out = torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")
    wo.gemv_w16(x, pw, out=out)
    got = out.double().cpu().numpy()
    assert np.isfinite(got).all()
    tol = 6e-3 if act == "bf16" else 1e-3                      # the 16-bit output rounding
    assert relerr(got, ref) < tol
    # every output element, not only the norm
    assert np.max(np.abs(got - ref) / (np.abs(ref) + 1e-3 * np.abs(ref).max())) < 4 * tol


@pytest.mark.parametrize("fmt", ["fp8", "nvfp4"])
def test_split_k_agrees_and_leaves_the_workspace_clean(fmt):
    import torch
    M, N, K = 5, 256, 1280                                      # 10 steps
    d = wo.generate(fmt, M, N, K, seed=11)
    pw = wo.pack_weights(fmt, d["codes"], d["scales"], global_scale=d["global_scale"]).to("cuda")
    ref = wo.reference(fmt, d["act"], d["codes"], d["scales"], d["global_scale"])
    x = _t(d["act"], "bf16")
    outs = []
    for s in (1, 2, 3, 10):
        o = wo.gemv_w16(x, pw, splits=s)
        torch.cuda.synchronize()
        assert relerr(o.double().cpu().numpy(), ref) < 6e-3, s
        outs.append(o.float())
        ws, cnt = wo.workspace(x.device, 1, 1)
        assert float(ws.abs().sum()) == 0 and int(cnt.abs().sum()) == 0, s
    for o in outs[1:]:                      # fp32 sums in another order: bf16-rounding close
        assert float((o - outs[0]).abs().max()) <= 2 ** -6 * float(outs[0].abs().max())


def test_launch_config_fills_the_gpu():
    import torch
    pw = wo.pack_weights("fp8", np.zeros((4096, 4096), np.uint8), np.ones((4096, 32))).to("cuda")
    cfg = wo.launch_config(pw, 1)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert cfg["ctas_per_sm"] >= 1 and cfg["sms"] == sms
    gx, gy, gz = cfg["grid"]
    assert gz == 1 and gx == 32 and gx * gy >= sms      # split-K fills the SMs


def test_gemv_rejects_bad_input():
    import torch
    d = wo.generate("fp8", 2, 32, 256)
    pw_host = wo.pack_weights("fp8", d["codes"], d["scales"])
    pw = pw_host.to("cuda")
    x = _t(d["act"], "bf16")
    with pytest.raises(ValueError, match="torch.bfloat16"):
        wo.gemv_w16(x.half(), pw)
    with pytest.raises(ValueError, match="K = 256"):
        wo.gemv_w16(x[:, :128].contiguous(), pw)
    with pytest.raises(ValueError, match="contiguous"):
        wo.gemv_w16(torch.zeros(256, 2, dtype=torch.bfloat16, device="cuda").t(), pw)
    with pytest.raises(ValueError, match="CUDA device"):
        wo.gemv_w16(x.cpu(), pw)
    with pytest.raises(ValueError, match="int32 CUDA tensor"):
        wo.gemv_w16(x, pw_host)
    with pytest.raises(ValueError, match="splits"):
        wo.gemv_w16(x, pw, splits=3)
    with pytest.raises(ValueError, match=r"out must be \(M, N\)"):
        wo.gemv_w16(x, pw, out=torch.empty(2, 31, dtype=torch.bfloat16, device="cuda"))
    import dataclasses
    with pytest.raises(ValueError, match="pw.s has"):
        wo.gemv_w16(x, dataclasses.replace(pw, s=pw.s[:-2]))
    with pytest.raises(ValueError, match="pw.s must be contiguous"):
        wider = torch.zeros(2 * pw.s.numel(), dtype=torch.int32, device="cuda")
        wo.gemv_w16(x, dataclasses.replace(pw, s=wider[::2]))


@pytest.mark.parametrize("M,N,K", [(1, 96, 384), (7, 200, 640), (83, 136, 256), (130, 256, 1024)])
def test_triton_w8a16_vs_float64(M, N, K):
    import torch
    from fp8lab.kernels import triton_w8a16 as tw
    d = wo.generate("fp8", M, N, K, act="bf16", seed=M + N)
    x = _t(d["act"], "bf16")
    q = torch.from_numpy(d["codes"]).cuda()
    s = tw.fold_scales(torch.from_numpy(d["scales"]).to(torch.bfloat16).cuda())
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    tw.triton_w8a16(x, q, s, out=out, config=dict(BLOCK_M=16 if M < 64 else 128, BLOCK_N=128,
                                                  num_warps=4 if M < 64 else 8, num_stages=3))
    ref = tw.reference(d["act"], d["codes"], d["scales"])
    assert np.allclose(ref, wo.reference("fp8", d["act"], d["codes"], d["scales"]))
    got = out.double().cpu().numpy()
    assert np.isfinite(got).all()
    assert relerr(got, ref) < 8e-3          # w x s rounded to bf16 once, then the bf16 output
    if M < 16:                               # autotuned (one small config: cheap to compile)
        auto = tw.triton_w8a16(x, q, s)
        assert relerr(auto.double().cpu().numpy(), ref) < 8e-3
    with pytest.raises(ValueError, match="uint8"):
        tw.triton_w8a16(x, q.to(torch.int16), s)
    with pytest.raises(ValueError, match=r"\(N, K/128\)"):
        tw.triton_w8a16(x, q, s[:, :1].contiguous())
    if M > 1:                                # (one row of a transpose is still a row)
        with pytest.raises(ValueError, match="columns must be adjacent"):
            tw.triton_w8a16(x, q, s, out=torch.empty((N, M), dtype=torch.bfloat16, device="cuda").t())


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("M,chunks", [(1, 16), (1, 17), (1, 126), (2, 9), (9, 4), (64, 2), (64, 3)])
def test_resident_and_ring_activations_both_right(fmt, M, chunks):
    """The split-K body keeps all of a CTA's activation chunks in shared memory (no barrier per
    chunk) when they fit: within the two chunk buffers (chunks x rows <= 16 NT: M = 1 with 16
    chunks, M = 64 with 2), in more shared memory the launcher gives (up to 96 KB: M = 1 with 17,
    M = 2 with 9, M = 9 with 4), else it alternates two buffers (M = 1 with 126 chunks is over
    96 KB; M = 64's buffers are larger than 96 KB already). At one and two splits, against float64
    with a poisoned output, each also with act_resident=False; with one split (no atomics) the two
    loops agree bit for bit."""
    import torch
    K = chunks * wo.RING * wo.STEP_K
    N = 160
    d = wo.generate(fmt, M, N, K, seed=M * 31 + chunks)
    pw = wo.pack_weights(fmt, d["codes"], d["scales"], global_scale=d["global_scale"]).to("cuda")
    ref = wo.reference(fmt, d["act"], d["codes"], d["scales"], d["global_scale"])
    x = _t(d["act"], "bf16")
    for splits in (1, 2):
        for resident in (True, False):
            out = torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")
            wo.gemv_w16(x, pw, splits=splits, out=out, act_resident=resident)
            got = out.double().cpu().numpy()
            assert np.isfinite(got).all() and relerr(got, ref) < 6e-3, (splits, resident, relerr(got, ref))
    a = wo.gemv_w16(x, pw, splits=1, act_resident=True)
    b = wo.gemv_w16(x, pw, splits=1, act_resident=False)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
