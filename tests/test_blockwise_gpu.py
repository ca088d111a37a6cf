"""Every W8A8 blockwise arm against float64 at odd shapes, on the GPU (fp8lab.experiments.blockwise).

Odd shapes: M = 1, 7, 83 (and 300 for the large-M paths); N = 272 (a multiple of 16 as cuBLASLt
needs, not of any tile width); K = 384 (3 scale blocks, K/128 not a multiple of 4) and, where
an arm takes it, K = 200. Outputs are NaN-poisoned before every call. Also: A5 both ways,
split-K re-arming, CUDA-graph replay, and the wrappers' ValueErrors.
"""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from fp8lab.experiments import blockwise as bw  # noqa: E402
from fp8lab.kernels import mma_blockwise as mb  # noqa: E402
from fp8lab.kernels import triton_blockwise as tb  # noqa: E402

SHAPES = [(1, 272, 384), (7, 272, 384), (83, 272, 384)]


def _setup(M, N, K, seed=0, bf16=False):
    s = bw.make_operands(M, N, K, seed=seed, bf16_weights=bf16)
    rows = np.arange(M)
    return s, rows, bw.reference_rows(s.a, s.a_scale, s.b, s.b_scale, rows)


def _assert_ok(chk, what):
    assert chk["nan_left"] == 0, (what, chk)
    assert chk["relerr"] < 4e-3, (what, chk)          # bf16 output rounding: ~1.7e-3
    assert chk["calc_diff"] < 2e-5, (what, chk)


@pytest.mark.parametrize("M, N, K", SHAPES)
def test_every_arm_matches_float64(M, N, K):
    s, rows, ref = _setup(M, N, K, seed=M, bf16=True)
    cands, skipped = bw.build_candidates(M, bw.ARMS, mma_variants=mb.VARIANTS, mma_configs=2,
                                         mma_seed_config=True, triton="auto")
    arms = {c.arm for c in cands} | {a for a, _ in skipped}
    assert arms == set(bw.ARMS)
    for arm, why in skipped:
        # CUTLASS where its module cannot run; the W8A8 decode GEMV above M = 64 (a decode kernel)
        assert arm in bw.MAY_NOT_RUN or (arm == "gemv_w8a8_blockwise" and M > bw.GEMV_W8A8_MAX_M), (arm, why)
    refs = {}
    for c in cands:
        # each arm against its own product (the per-tensor arm multiplies the codes with unit
        # scales): the reference run_point uses, from the one place that picks it
        chk, poison = bw.check_candidate(c, s, bw.reference_for(c.arm, s, rows, refs), rows)
        _assert_ok(chk, (c.arm, c.path, c.variant, c.config, bw.reference_kind(c.arm), poison))
    # the blockwise arms' reference is the one the other tests here build
    assert torch.equal(bw.reference_for("mma_blockwise", s, rows), ref)


@pytest.mark.parametrize("path, variant", [("ptr", "per_step"), ("ptr", "per_block"), ("tma", "per_block"),
                                           ("swapab", "per_block")])
@pytest.mark.parametrize("M", [1, 83, 300])
def test_triton_paths_pinned_configs(path, variant, M):
    """Every path with configs pinned (not just the autotuner's pick), incl. ragged M and N."""
    N, K = 272, 384
    s, rows, ref = _setup(M, N, K, seed=7)
    if path == "ptr":
        cfgs = [dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=3),
                dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
                dict(BLOCK_M=64, BLOCK_N=256, num_warps=8, num_stages=3)]
    elif path == "tma":
        cfgs = [dict(BLOCK_M=64, BLOCK_N=128, PERSIST=0, num_warps=4, num_stages=4),
                dict(BLOCK_M=128, BLOCK_N=256, PERSIST=1, num_warps=8, num_stages=3),
                dict(BLOCK_M=128, BLOCK_N=64, PERSIST=2, num_warps=4, num_stages=3)]
        if variant == "per_block":
            cfgs[1] = dict(BLOCK_M=64, BLOCK_N=256, PERSIST=1, num_warps=8, num_stages=3)
    else:
        if M > tb.SWAPAB_LIMIT_M:
            pytest.skip("swapab is for decode sizes")
        cfgs = [dict(BLOCK_W=64, BLOCK_T=16, SPLIT_K=1), dict(BLOCK_W=128, BLOCK_T=32, SPLIT_K=2),
                dict(BLOCK_W=64, BLOCK_T=64, SPLIT_K=4), dict(BLOCK_W=128, BLOCK_T=16, SPLIT_K=8),
                # KSTEP 2: K = 384 is 3 blocks, so split 1 has a half-masked second iteration and
                # split 2 a split whose second block lies past its end
                dict(BLOCK_W=128, BLOCK_T=16, SPLIT_K=1, KSTEP=2, num_stages=3),
                dict(BLOCK_W=64, BLOCK_T=32, SPLIT_K=2, KSTEP=2, num_stages=3)]
    for cfg in cfgs:
        out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        tb.blockwise_fp8_gemm(s.a, s.b, s.a_scale, s.b_scale, variant=variant, path=path, config=cfg, out=out)
        torch.cuda.synchronize()
        _assert_ok(bw.compare(out, ref, rows), (path, variant, cfg))


@pytest.mark.parametrize("path, variant", [("ptr", "per_block"), ("swapab", "per_block"), ("tma", "per_block")])
def test_triton_k_not_a_multiple_of_128(path, variant):
    """K = 208: a partial last scale block (masked loads, or TMA zero fill)."""
    M, N, K = 7, 272, 208
    g = torch.Generator(device="cuda").manual_seed(1)
    a = (torch.randn(M, K, generator=g, device="cuda") * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, generator=g, device="cuda") * 2).to(torch.float8_e4m3fn)
    sa = torch.rand(M, 2, generator=g, device="cuda") + 0.5
    sb = torch.rand(3, 2, generator=g, device="cuda") + 0.5
    ref = bw.reference_rows(a, sa, b, sb, np.arange(M))
    out = tb.blockwise_fp8_gemm(a, b, sa, sb, variant=variant, path=path)
    _assert_ok(bw.compare(out, ref, np.arange(M)), path)


def test_k_tail_refused_or_computed():
    t = bw.k_tail_behaviour().set_index("arm")
    assert t.loc["mma_blockwise", "outcome"] == "refused" and "multiple of 128" in t.loc["mma_blockwise", "message"]
    assert t.loc["cublaslt_blockwise", "outcome"] == "refused"
    assert t.loc["triton_blockwise", "outcome"] == "computed"
    assert not t["outcome"].str.startswith("error").any(), t


@pytest.mark.parametrize("M, N, K", [(1, 392, 4096), (7, 3080, 7168), (16, 2056, 1152)])
def test_swapab_limited_configs_match_float64(M, N, K):
    """Every config the limited autotune may pick for a decode problem (incl. KSTEP 2 and the
    4-programs-per-SM split), pinned one by one, poisoned output, N = 128-multiple + 8-tail."""
    s, rows, ref = _setup(M, N, K, seed=M + N)
    cfgs = tb.limited_configs("per_block", "swapab", M, N, K, sms=tb._sm_count(), limit=8)
    assert any(c["KSTEP"] == 2 for c in cfgs)
    for cfg in cfgs:
        out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        tb.blockwise_fp8_gemm(s.a, s.b, s.a_scale, s.b_scale, path="swapab", config=cfg, out=out)
        torch.cuda.synchronize()
        _assert_ok(bw.compare(out, ref, rows), cfg)


def test_swapab_split_k_rearms_and_is_deterministic():
    s, rows, ref = _setup(3, 1024, 4096, seed=3)
    cfg = dict(BLOCK_W=64, BLOCK_T=16, SPLIT_K=8)
    outs = [tb.blockwise_fp8_gemm(s.a, s.b, s.a_scale, s.b_scale, path="swapab", config=cfg) for _ in range(3)]
    torch.cuda.synchronize()
    for o in outs:
        _assert_ok(bw.compare(o, ref, rows), "swapab split 8")
        assert torch.equal(o, outs[0])                  # partials summed in a fixed order
    cnt = tb._SWAPAB_BUFFERS[torch.cuda.current_device()][1]
    assert int(cnt.abs().sum()) == 0                    # every counter re-armed


def test_triton_paths_in_a_cuda_graph():
    """bench times small kernels by CUDA-graph replay: every path must capture and replay."""
    s, rows, ref = _setup(16, 1024, 1024, seed=5)
    for path, variant in (("swapab", "per_block"), ("ptr", "per_block"), ("tma", "per_block")):
        fn = lambda: tb.blockwise_fp8_gemm(s.a, s.b, s.a_scale, s.b_scale, variant=variant, path=path,  # noqa: E731
                                           check_scales=False)
        fn()
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn()
        out.fill_(float("nan"))
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        _assert_ok(bw.compare(out, ref, rows), path)


def test_a5_both_ways():
    a5 = bw.a5_lookups()
    assert set(a5["bn"]) == {64, 128, 256}
    assert a5[a5["lookup"] == "per_warp"]["correct"].all()
    pc = a5[a5["lookup"] == "per_cta"].set_index("bn")["correct"]
    assert not pc[64].any() and pc[128].all() and not pc[256].any()
    assert bw.verdict_a5(a5).verdict == "holds"


def test_mma_family_check_table():
    t = bw.check_mma_family(shapes=((7, 264, 384),))
    assert len(t) == 48 and t["passed"].all(), t[~t["passed"]]


def test_triton_wrapper_validation():
    s, _, _ = _setup(7, 256, 384)
    with pytest.raises(ValueError, match="per_block variant only"):
        tb.blockwise_fp8_gemm(s.a, s.b, s.a_scale, s.b_scale, variant="per_step", path="swapab")
    with pytest.raises(ValueError, match="disabled on the GPU"):        # wrong on the H200
        tb.blockwise_fp8_gemm(s.a, s.b, s.a_scale, s.b_scale, variant="per_block_inplace")
    with pytest.raises(ValueError, match="path must be one of"):
        tb.blockwise_fp8_gemm(s.a, s.b, s.a_scale, s.b_scale, path="wgmma")
    with pytest.raises(ValueError, match="out must be"):
        tb.blockwise_fp8_gemm(s.a, s.b, s.a_scale, s.b_scale, out=torch.empty(7, 255, dtype=torch.bfloat16,
                                                                             device="cuda"))
    with pytest.raises(ValueError, match="finite and > 0"):
        tb.blockwise_fp8_gemm(s.a, s.b, s.a_scale * 0, s.b_scale, check_scales=True)
    with pytest.raises(ValueError, match="BLOCK_W must be"):
        tb.blockwise_fp8_gemm(s.a, s.b, s.a_scale, s.b_scale, path="swapab", config=dict(BLOCK_W=32))
    with pytest.raises(ValueError, match="tma tiles need"):
        tb.blockwise_fp8_gemm(s.a, s.b, s.a_scale, s.b_scale, path="tma", config=dict(BLOCK_M=32, BLOCK_N=64))
    big = bw.make_operands(300, 256, 384)
    with pytest.raises(ValueError, match="M <= 256"):
        tb.blockwise_fp8_gemm(big.a, big.b, big.a_scale, big.b_scale, path="swapab")
    a = (torch.randn(7, 200, device="cuda")).to(torch.float8_e4m3fn)
    b = (torch.randn(256, 200, device="cuda")).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="K % 16"):
        tb.blockwise_fp8_gemm(a, b, torch.ones(7, 2, device="cuda"), torch.ones(2, 2, device="cuda"), path="tma")


def test_quantiser_pick_is_exact():
    from fp8lab.kernels import baselines as bl

    name, fn, note = bw.pick_quantiser()
    x = (torch.randn(33, 4096, device="cuda") * 5).to(torch.bfloat16)
    q, s = fn(x)
    qr, sr = bl.quant_act_reference(x)
    assert torch.equal(q.view(torch.uint8), qr.view(torch.uint8)) and torch.allclose(s, sr, rtol=1e-6, atol=0)
    assert name in ("quant_act_warp", "quant_act_reference") and note


def test_small_sweep_end_to_end():
    df = bw.sweep(shapes=[(272, 384)], Ms=[1, 83], warmup_ms=2, rep_ms=5, mma_configs=1)
    # every candidate of ours and of the libraries is checked and timed; the CUTLASS arm (another
    # module) and the wgmma arm (sm_90a) may be absent or not run here, but never pass wrong numbers
    # (the wgmma arm's rows must all be measured where it can run: an error there is ours)
    wgmma_absent = bw.wgmma_status() is not None
    cutlass = df["arm"].eq("cutlass_blockwise_sm90") | (df["arm"].eq("wgmma_blockwise_sm90") & wgmma_absent)
    # the W8A8 decode GEMV is a not-run row above M = 64, with the reason
    gemv_above = (df["arm"] == "gemv_w8a8_blockwise") & (df["M"] > bw.GEMV_W8A8_MAX_M)
    assert df.loc[gemv_above, "status"].str.startswith("not-run: a decode kernel").all()
    assert df[(df["arm"] == "gemv_w8a8_blockwise") & ~gemv_above]["status"].eq("measured").all()
    ok = df["status"].eq("measured") | (cutlass & ~df["status"].str.startswith("failed-check")) | gemv_above
    assert ok.all(), df.loc[~ok, ["M", "arm", "path", "variant", "status"]]
    assert (df[df["status"] == "measured"]["time_p50_s"] > 0).all()
    quant = df[df["quant"] != "none"]
    assert set(quant["arm"]) >= {"mma_blockwise", "triton_blockwise", "cublaslt_blockwise"}
    assert df.attrs["quantiser"] in ("quant_act_warp", "quant_act_reference")


def test_b5_paired_rounds_alternate_and_are_checked():
    df = bw.paired_b5(shapes=[(256, 384)], M=132, rounds=3, warmup_ms=1, rep_ms=3)
    assert len(df) == 6 and df["status"].eq("measured").all(), df[["round", "arm", "status"]]
    assert (df["relerr"] < bw.CHECK_RELERR).all() and (df["time_p50_s"] > 0).all()
    order = [tuple(g["arm"]) for _, g in df.groupby("round", sort=True)]
    assert order[0] == bw.PAIRED_ARMS and order[1] == bw.PAIRED_ARMS[::-1] and order[2] == bw.PAIRED_ARMS
    pr = bw.paired_ratios(df)
    assert len(pr) == 1 and pr.iloc[0]["rounds"] == 3 and pr.iloc[0]["ratio_p50"] > 0


def test_quant_each_times_every_candidate_with_the_quantiser():
    # A3 compares two main loops at one tile, both with the activation quantiser in the call
    # (as the seed's vLLM microbenchmark timed them): every mma candidate gets a quant row, not
    # only the fastest one
    df = bw.sweep(shapes=[(256, 384)], Ms=[64], arms=("mma_blockwise",), mma_variants=mb.VARIANTS,
                  mma_configs=1, mma_seed_config=True, quant_each=True, warmup_ms=2, rep_ms=5)
    m = bw.measured(df)
    none, q = m[m["quant"] == "none"], m[m["quant"] != "none"]
    assert len(none) == 2 * len(mb.VARIANTS)                 # the seed tile + one picked tile, 3 loops each
    key = ["config", "variant"]
    assert sorted(map(tuple, q[key].values)) == sorted(map(tuple, none[key].values))
    assert bw.verdict_a3(df, shape=df["shape"].iloc[0], M=64).verdict != "not-run"


@pytest.mark.parametrize("M", [1, 7, 128])
def test_cutlass_with_its_quantiser_is_planned_once_and_correct(M):
    # CUTLASS + activation quantisation: the quantiser writes fixed buffers, the plan is built
    # once on them; the result matches float64 on the quantised operands, and a second call
    # reuses the same plan (no per-call argument building inside the timing)
    if bw.cutlass_status() is not None:
        pytest.skip(bw.cutlass_status())
    from fp8lab.kernels import baselines as bl
    s = bw.make_operands(M, 384, 512)
    call = bw.cutlass_quant_call(None, M)
    assert call is not None
    out = call(s)
    plan = s.cutlass_q[None][2]
    out2 = call(s)
    assert s.cutlass_q[None][2] is plan and out.shape == (M, 384)
    q, sq = bl.quant_act_reference(s.x)
    rows = list(range(M))
    chk = bw.compare(out2.clone(), bw.reference_rows(q, sq, s.b, s.b_scale, rows), rows)
    assert chk["nan_left"] == 0 and chk["relerr"] < bw.CHECK_RELERR, chk
