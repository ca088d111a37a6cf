"""fp8lab.experiments.blockwise on CPU: candidate rules, counting, and the table logic
(best rows, tile-by-M selection, crossovers, target ratios, verdicts) on synthetic tables."""

import math

import numpy as np
import pandas as pd
import pytest

from fp8lab.experiments import blockwise as bw
from fp8lab.kernels import mma_blockwise as mb


def _row(shape, M, arm, t, *, N=4096, K=4096, variant="", config="", quant="none", status="measured",
         path="", swizzle=8):
    r = {c: math.nan for c in bw.COLUMNS}
    r.update(shape=shape, model=shape.split(":")[0], site=shape.split(":")[-1], M=M, N=N, K=K, arm=arm,
             variant=variant, path=path, config=config, swizzle=swizzle, quant=quant, status=status,
             time_p50_s=t, tflops_p50=2 * M * N * K / t / 1e12 if t == t else math.nan)
    return r


def _df(rows):
    return pd.DataFrame(rows, columns=bw.COLUMNS)


# ------------------------------------------------------------------ rules and counting
def test_mma_candidates_rule():
    small = bw.mma_candidates(1, 3)
    big = bw.mma_candidates(4096, 3)
    assert len(small) == 3 and len(big) == 3
    assert all(c.bm == 16 for c in small)            # decode: the shortest tiles
    assert min(c.bm for c in big) >= 128              # prefill: the tallest
    assert len(bw.mma_candidates(64, "all")) == len(mb.configs()) == 16
    seeded = bw.mma_candidates(1, 2, include_seed=True)
    assert seeded[0] == mb.SEED_CONFIG and len(seeded) == 3
    assert bw.mma_candidates(4096, 1, include_seed=True).count(mb.SEED_CONFIG) == 1
    with pytest.raises(ValueError, match=">= 1 or 'all'"):
        bw.mma_candidates(1, 0)
    # with N known, too few thread blocks costs: M=128 on N=4096 also tries 64-row tiles
    assert any(c.bm == 64 for c in bw.mma_candidates(128, 5, N=4096))
    assert all(c.bm >= 128 for c in bw.mma_candidates(128, 4))


def test_triton_candidates():
    assert bw.triton_candidates(1)[0] == ("swapab", "per_block")
    assert all(p != "swapab" for p, _ in bw.triton_candidates(4096))
    assert bw.triton_candidates(4096, [("ptr", "per_block")]) == [("ptr", "per_block")]
    with pytest.raises(ValueError, match="pairs"):
        bw.triton_candidates(1, [("ptr",)])


def test_weight_and_min_bytes():
    assert bw.weight_bytes("cublas_bf16", 4096, 4096) == 2 * 4096 * 4096
    assert bw.weight_bytes("triton_blockwise", 4096, 4096) == 4096 * 4096 + 4 * 32 * 32
    assert bw.min_bytes("mma_blockwise", 1, 4096, 4096) == 4096 + 4096 * 4096 + 4 * 32 * 32 + 4 * 32 + 2 * 4096
    assert bw.min_bytes("cublas_bf16", 2, 8, 128) == 2 * (2 * 128 + 8 * 128 + 2 * 8)
    assert bw.weight_bytes("mma_blockwise", 4096, 100) != bw.weight_bytes("mma_blockwise", 4096, 100)  # NaN: no such shape


def test_resolve_shapes():
    s = bw.resolve_shapes(["qwen3-8b:o_proj", (264, 384)])
    assert (s[0].N, s[0].K) == (4096, 4096) and (s[1].N, s[1].K) == (264, 384)
    with pytest.raises(ValueError, match="'model:site'"):
        bw.resolve_shapes([3])
    with pytest.raises(ValueError, match="at least one"):
        bw.resolve_shapes([])


def test_check_rows_cover_edges():
    assert list(bw.check_rows(7)) == list(range(7))
    r = bw.check_rows(4097, max_rows=512)
    assert len(r) == 512 and r[0] == 0 and r[-1] == 4096 and len(set(r)) == 512
    assert set(range(64)) <= set(r) and set(range(4097 - 64, 4097)) <= set(r)


def test_passes_thresholds():
    ok = dict(relerr=1.7e-3, calc_diff=1.5e-6, max_err_norm=4e-3, nan_left=0)
    assert bw.passes(ok)
    assert not bw.passes(ok | dict(nan_left=1))
    assert not bw.passes(ok | dict(relerr=3e-2))         # one wrong scale block
    assert not bw.passes(ok | dict(calc_diff=1e-3))


# ------------------------------------------------------------------ best rows and tile selection
SMALL, MID, BIG = "16x64x128_w16x32_s4", "64x128x128_w64x64_s3", "128x128x128_w64x32_s3"


def _tile_df():
    # per (M, config) time, same on two shapes: SMALL wins at M <= 16, MID at 128, BIG at 4096
    t = {1: {SMALL: 10, MID: 14, BIG: 30}, 16: {SMALL: 11, MID: 15, BIG: 31},
         128: {SMALL: 40, MID: 20, BIG: 25}, 4096: {SMALL: 900, MID: 400, BIG: 300}}
    rows = []
    for shape in ("a:x", "b:y"):
        for M, d in t.items():
            for cfg, us in d.items():
                rows.append(_row(shape, M, "mma_blockwise", us * 1e-6, variant="per_block", config=cfg))
                # a slower swizzle of the same config and a failed row must not win
                rows.append(_row(shape, M, "mma_blockwise", us * 2e-6, variant="per_block", config=cfg, swizzle=1))
            rows.append(_row(shape, M, "mma_blockwise", 1e-9, variant="per_block", config="bad",
                             status="failed-check: relerr 0.3"))
    return _df(rows)


def test_best_rows_ignore_failed_and_pick_min():
    b = bw.best_rows(_tile_df())
    assert len(b) == 8 and (b["status"] == "measured").all()
    r = b[(b["shape"] == "a:x") & (b["M"] == 4096)].iloc[0]
    assert r["config"] == BIG and r["time_p50_s"] == pytest.approx(300e-6)


def test_tile_selection_is_derived_from_the_sweep():
    sel = bw.tile_selection(_tile_df())
    pp = sel["per_point"].set_index(["shape", "M"])
    assert pp.loc[("a:x", 1), "config"] == SMALL and pp.loc[("a:x", 4096), "config"] == BIG
    assert pp.loc[("a:x", 128), "margin_over_next"] == pytest.approx(25 / 20)
    by_m = sel["by_m"].set_index("M")
    assert list(by_m["config"]) == [SMALL, SMALL, MID, BIG]
    assert (by_m["geo_slowdown"] == 1).all()
    ranges = sel["ranges"]
    assert ranges.to_dict("records") == [dict(M_from=1, M_to=16, config=SMALL),
                                         dict(M_from=128, M_to=128, config=MID),
                                         dict(M_from=4096, M_to=4096, config=BIG)]


def test_single_tile_penalty():
    pen = bw.single_tile_penalty(_tile_df()).set_index("config")
    assert pen.loc[MID, "worst_slowdown"] == pytest.approx(14 / 10)       # at M=1
    assert pen.loc[SMALL, "worst_slowdown"] == pytest.approx(900 / 300)
    assert pen.loc[BIG, "worst_slowdown"] == pytest.approx(3.0)
    assert pen["covers_all"].all()


# ------------------------------------------------------------------ winners and crossovers
def _arms_df(lt_time=None):
    rows = []
    for shape, cross in (("s:one", 1.0), ("s:two", 0.65)):
        for M in (1, 16, 128, 1024):
            # triton fast at small M, cuBLASLt at large M; where they cross depends on the shape
            t_tri = 10e-6 * (1 + M / 100)
            t_lt = 12e-6 * (1 + M / (200 * cross)) if lt_time is None else lt_time
            rows.append(_row(shape, M, "triton_blockwise", t_tri, path="swapab"))
            rows.append(_row(shape, M, "triton_blockwise", t_tri * 3, path="ptr"))
            rows.append(_row(shape, M, "cublaslt_blockwise", t_lt))
            rows.append(_row(shape, M, "mma_blockwise", t_tri * 5))
            rows.append(_row(shape, M, "cublas_bf16", t_tri * 0.5))             # not W8A8: never a winner
            rows.append(_row(shape, M, "cublaslt_blockwise", t_lt * 1.2, quant="quant_act_reference"))
    return _df(rows)


def test_winners_and_crossovers():
    df = _arms_df()
    w = bw.winners(df).set_index(["shape", "M"])
    assert w.loc[("s:one", 1), "winner"] == "triton_blockwise"
    assert w.loc[("s:one", 1024), "winner"] == "cublaslt_blockwise"
    assert "cublas_bf16" not in set(w["winner"])
    x = bw.crossovers(df)
    one = x[x["shape"] == "s:one"].iloc[0]
    assert (one["M_below"], one["M_above"]) == (16, 128)
    assert (one["winner_below"], one["winner_above"]) == ("triton_blockwise", "cublaslt_blockwise")
    # the log-ratio interpolation by hand
    t = lambda M: (10e-6 * (1 + M / 100), 12e-6 * (1 + M / 200))  # noqa: E731
    r_lo, r_hi = (math.log(a / b) for a, b in (t(16), t(128)))
    want = math.exp(math.log(16) + r_lo / (r_lo - r_hi) * (math.log(128) - math.log(16)))
    assert one["M_cross"] == pytest.approx(want)
    assert 16 < one["M_cross"] < 128
    # shape two crosses later (cuBLASLt scales better there): a single threshold would be wrong
    assert x[x["shape"] == "s:two"].iloc[0]["M_below"] >= 128


def test_target_table():
    rows = []
    for M, t_ours, t_lt in ((1, 14e-6, 30e-6), (16, 20e-6, 35e-6), (1024, 150e-6, 160e-6), (4096, 500e-6, 600e-6)):
        for shape, N, K in (("qwen3-8b:down_proj", 4096, 12288), ("qwen3-8b:o_proj", 4096, 4096)):
            rows.append(_row(shape, M, "triton_blockwise", t_ours, N=N, K=K))
            rows.append(_row(shape, M, "mma_blockwise", t_ours * 4, N=N, K=K))
            rows.append(_row(shape, M, "cublaslt_blockwise", t_lt, N=N, K=K))
    tt = bw.target_table(_df(rows), copy_Bps=4.27e12)
    sp = tt[tt["target"] == "speedup vs cuBLASLt"].set_index(["shape", "M"])
    assert set(sp.index.get_level_values("M")) == {1024, 4096}
    assert sp.loc[("qwen3-8b:o_proj", 4096), "value"] == pytest.approx(1.2)
    assert sp.loc[("qwen3-8b:o_proj", 4096), "met"]
    assert not sp.loc[("qwen3-8b:o_proj", 1024), "met"]
    assert sp.loc[("qwen3-8b:o_proj", 1024), "shortfall"] == pytest.approx(1.10 / (160 / 150) - 1)
    bwt = tt[tt["target"] == "weight bandwidth / copy"]
    assert set(bwt["shape"]) == {"qwen3-8b:down_proj"}      # o_proj has 16.8 MB of weights: below 32 MB
    r = bwt.set_index("M").loc[1]
    wb = 4096 * 12288 + 4 * 32 * 96
    assert r["value"] == pytest.approx(wb / 14e-6 / 4.27e12)
    assert r["cublaslt_value"] == pytest.approx(wb / 30e-6 / 4.27e12)
    assert r["best_arm"] == "triton_blockwise" and bool(r["met"]) == (r["value"] >= bw.TARGET_BW_FRACTION)
    assert bw.TARGET_BW_FRACTION == 0.88                   # issue 22's target 3
    assert (tt["best_peer"] == "").all() and tt["own_over_peer"].isna().all()   # no peers table: no peer
    assert bw.target_table(_df(rows), copy_Bps=None)["target"].eq("speedup vs cuBLASLt").all()
    assert sp["per_tensor_value"].isna().all()             # no per-tensor reference timed
    # the per-tensor FP8 reference: cuBLASLt time over its time, beside the target; never "ours"
    rows.append(_row("qwen3-8b:o_proj", 4096, bw.PER_TENSOR, 480e-6, N=4096, K=4096))
    rows.append(_row("qwen3-8b:o_proj", 1024, bw.PER_TENSOR, 100e-6, N=4096, K=4096))
    sp2 = bw.target_table(_df(rows), copy_Bps=4.27e12).query("target == 'speedup vs cuBLASLt'").set_index(["shape", "M"])
    assert sp2.loc[("qwen3-8b:o_proj", 4096), "per_tensor_value"] == pytest.approx(600 / 480)
    assert sp2.loc[("qwen3-8b:o_proj", 1024), "best_arm"] == "triton_blockwise"   # faster, but a reference
    assert bw.weight_bytes(bw.PER_TENSOR, 4096, 4096) == 4096 * 4096 + 4      # codes + one fp32 scale


def test_target_table_says_whether_the_decode_gemvs_loads_or_its_work_miss_the_bandwidth_target():
    """pattern_points' rows (the decode GEMV's access pattern alone) give the bandwidth rows a
    pattern_value; where that GEMV is the best arm and misses 0.88, limited_by names the access
    pattern (its loads alone miss too) or the per-step work (they meet it); speedup rows, other best
    arms and met rows name nothing."""
    sh, N, K = "qwen3-8b:down_proj", 4096, 12288
    wb = bw.weight_bytes("triton_blockwise", N, K)
    copy = 4.27e12
    rows = []
    for M, t_gemv in ((1, wb / (0.80 * copy)), (4, wb / (0.80 * copy)), (16, wb / (0.90 * copy)), (1024, 150e-6)):
        rows.append(_row(sh, M, bw.PATTERN_ARM, t_gemv, N=N, K=K))
        rows.append(_row(sh, M, "triton_blockwise", t_gemv * (0.9 if M == 4 else 1.5), N=N, K=K))
        rows.append(_row(sh, M, "cublaslt_blockwise", 160e-6 if M == 1024 else 30e-6, N=N, K=K))
    pat = pd.DataFrame([dict(shape=sh, M=M, N=N, K=K, arm=bw.PATTERN_ARM, status="measured", pattern_value=v)
                        for M, v in ((1, 0.95), (4, 0.95), (16, 0.85))], columns=bw.PATTERN_COLUMNS)
    assert set(bw.TARGET_COLUMNS) >= {"pattern_value", "limited_by"}
    tt = bw.target_table(_df(rows), copy_Bps=copy, pattern=pat)
    b = tt[tt["target"] == "weight bandwidth / copy"].set_index("M")
    assert b.loc[1, "best_arm"] == bw.PATTERN_ARM and b.loc[1, "value"] == pytest.approx(0.80)
    assert b.loc[1, "pattern_value"] == 0.95 and b.loc[1, "limited_by"] == bw.LIMIT_WORK
    assert b.loc[4, "best_arm"] == "triton_blockwise" and b.loc[4, "limited_by"] == ""   # another arm's miss
    assert b.loc[4, "pattern_value"] == 0.95                                             # still shown
    assert b.loc[16, "met"] and b.loc[16, "limited_by"] == ""
    sp = tt[tt["target"] == "speedup vs cuBLASLt"]
    assert sp["pattern_value"].isna().all() and (sp["limited_by"] == "").all()
    # the loads alone below the target too: the access pattern
    low = pat.assign(pattern_value=[0.84, 0.84, 0.84])
    r = bw.target_table(_df(rows), copy_Bps=copy, pattern=low).query("target == 'weight bandwidth / copy' and M == 1")
    assert r["limited_by"].iloc[0] == bw.LIMIT_PATTERN
    # no pattern table, or a not-run row: nothing to say
    none = bw.target_table(_df(rows), copy_Bps=copy)
    assert none["pattern_value"].isna().all() and (none["limited_by"] == "").all()
    nr = bw.target_table(_df(rows), copy_Bps=copy, pattern=pat.assign(status="not-run: x"))
    assert (nr["limited_by"] == "").all()


def test_target_table_names_the_best_peer_of_the_same_run():
    rows = [_row("qwen3-8b:down_proj", M, a, t, N=4096, K=12288)
            for M, t_ours, t_lt in ((1, 14e-6, 30e-6), (4096, 500e-6, 600e-6))
            for a, t in (("triton_blockwise", t_ours), ("cublaslt_blockwise", t_lt))]
    peers = _df([_row("qwen3-8b:down_proj", 4096, "peer_deepgemm", 450e-6, N=4096, K=12288),
                 _row("qwen3-8b:down_proj", 4096, "peer_torchao_blockwise", 700e-6, N=4096, K=12288),
                 # faster, but with its own quantiser in the call: not the pre-quantised comparison
                 _row("qwen3-8b:down_proj", 4096, "peer_torchao_blockwise", 100e-6, N=4096, K=12288,
                      quant="own quantiser"),
                 _row("qwen3-8b:down_proj", 1, "peer_deepgemm", 10e-6, N=4096, K=12288, status="not-run: x"),
                 _row("qwen3-8b:down_proj", 1, "peer_torchao_blockwise", 20e-6, N=4096, K=12288)])
    tt = bw.target_table(_df(rows), copy_Bps=4.27e12, peers=peers).set_index("M")
    big, small = tt.loc[4096], tt.loc[1]
    assert big["best_peer"] == "peer_deepgemm" and big["peer_value"] == pytest.approx(600 / 450)
    assert big["own_over_peer"] == pytest.approx(450 / 500)              # DeepGEMM ahead: < 1
    assert small["best_peer"] == "peer_torchao_blockwise"                  # the not-run one never counts
    assert small["own_over_peer"] == pytest.approx(20 / 14)
    assert small["peer_value"] == pytest.approx(small["value"] * 14 / 20)
    # with the quantiser in the call: that peer row is the one compared
    wq = [dict(r, quant="quant_act_warp") for r in rows]
    tq = bw.target_table(_df(wq), copy_Bps=4.27e12, quant="quant_act_warp", peers=peers).set_index("M")
    assert tq.loc[4096, "own_over_peer"] == pytest.approx(100 / 500)


# ------------------------------------------------------------------ verdicts
Q = "quant_act_warp"     # a W8A8 row timed with the activation quantiser inside the call


def _a3_df(t_slice, t_block, t_triton=None, quant=Q, t_best_tile=None):
    seed = mb.SEED_CONFIG.name
    rows = [_row("qwen3-8b:o_proj", 4096, "mma_blockwise", t_slice, variant="per_slice", config=seed, quant=quant),
            _row("qwen3-8b:o_proj", 4096, "mma_blockwise", t_block, variant="per_block", config=seed, quant=quant),
            # the in-place loop at the seed tile, slower here: the faster per-block loop is the one compared
            _row("qwen3-8b:o_proj", 4096, "mma_blockwise", t_block * 1.3, variant="per_block_inplace", config=seed,
                 quant=quant)]
    if t_best_tile:
        rows.append(_row("qwen3-8b:o_proj", 4096, "mma_blockwise", t_best_tile, variant="per_block", config=BIG,
                         quant=quant))
    if t_triton:
        rows.append(_row("qwen3-8b:o_proj", 4096, "triton_blockwise", t_triton, quant=quant))
    return _df(rows)


A3_LO, A3_HI = bw.SEED_A3_FIX / bw.A3_BAND, bw.SEED_A3_FIX * bw.A3_BAND


@pytest.mark.parametrize("r, want", [(A3_LO, "holds"), (A3_HI, "holds"), (A3_LO * 0.999, "holds-in-kind"),
                                     (A3_HI * 1.001, "holds-in-kind"), (bw.A3_PAYS, "holds-in-kind"),
                                     (bw.A3_PAYS * 0.999, "differs"), (0.84, "differs")])
def test_verdict_a3_same_tile_boundaries(r, want):
    v = bw.verdict_a3(_a3_df(1e-3 * r, 1e-3, 0.25e-3))
    assert (v.claim, v.verdict, v.subject) == ("A3", want, "analogue")
    assert f"{bw.A3_PAYS:g}" in v.rule and f"{A3_LO:.2f}" in v.rule and "quantisation inside" in v.rule
    assert "Triton" in v.our_figure


def test_verdict_a3_judges_the_same_tile_not_the_tile_effect():
    # per_slice 845 us at the seed tile, per_block 1006 us there (0.84x), 549 us at another tile (1.54x
    # together): the committed case of issue 16. The verdict is the same-tile 0.84x; 1.54x is beside it.
    v = bw.verdict_a3(_a3_df(845e-6, 1006e-6, t_best_tile=549e-6))
    assert v.verdict == "differs" and "= 0.84x (same tile)" in v.our_figure
    assert "tile effect" in v.our_figure and "together 1.54x" in v.our_figure


def test_verdict_a3_uses_the_quant_included_timings():
    # only pre-quantised timings: not-run by default (the seed timed with the quantiser) ...
    none_only = _a3_df(6536e-6, 1374e-6, quant="none")
    assert bw.verdict_a3(none_only).verdict == "not-run"
    # ... and asked for explicitly they are judged, the rule saying so
    v = bw.verdict_a3(none_only, quant="none")
    assert v.verdict == "holds" and "pre-quantised" in v.rule
    # quant rows and none rows together: the none rows (a bigger ratio here) do not leak in
    mixed = pd.concat([_a3_df(1.1e-3, 1e-3), _a3_df(6536e-6, 1374e-6, quant="none")], ignore_index=True)
    assert bw.verdict_a3(mixed).verdict == "differs"
    assert bw.verdict_a3(_df([])).verdict == "not-run"


def _a4_df(fail=False, err=1.8e-3, n_cfg=16):
    rows = []
    for M in (1, 7, 83, 4097):
        for i in range(n_cfg):
            for v in mb.VARIANTS:
                bad = fail and i == 3 and v == "per_slice" and M == 83
                rows.append(dict(M=M, N=264, K=384, config=f"c{i}", variant=v, relerr=0.3 if bad else err,
                                 calc_diff=1e-6, max_err_norm=1e-3, nan_left=0, passed=not bad))
    return pd.DataFrame(rows)


def test_verdict_a4():
    v = bw.verdict_a4(_a4_df())
    assert v.verdict == "holds" and v.subject == "analogue" and "48" in v.rule
    v = bw.verdict_a4(_a4_df(fail=True))
    assert v.verdict == "differs" and "c3/per_slice@M=83" in v.reason
    assert bw.verdict_a4(_a4_df(n_cfg=15)).verdict == "holds-in-kind"
    lo, hi = bw.A4_ERR_BAND
    assert bw.verdict_a4(_a4_df(err=hi)).verdict == "holds"
    assert bw.verdict_a4(_a4_df(err=hi * 1.01)).verdict == "holds-in-kind"
    assert bw.verdict_a4(_a4_df(err=lo)).verdict == "holds"
    assert bw.verdict_a4(_a4_df(err=lo * 0.99)).verdict == "holds-in-kind"


def _a5_df(per_warp_ok=True, per_cta_ok_everywhere=False):
    rows = []
    for bn in (64, 128, 256):
        for lookup in mb.SCALE_LOOKUPS:
            if lookup == "per_warp":
                ok = per_warp_ok
            elif lookup == "per_cta":
                ok = bn == 128 or per_cta_ok_everywhere
            else:
                ok = bn <= 128
            rows.append(dict(config=f"x{bn}", bm=64, bn=bn, lookup=lookup, relerr=1.7e-3 if ok else 0.2,
                             calc_diff=1e-6, nan_left=0, correct=ok))
    return pd.DataFrame(rows)


def test_verdict_a5():
    v = bw.verdict_a5(_a5_df())
    assert v.verdict == "holds" and v.subject == "analogue" and v.rule
    assert bw.verdict_a5(_a5_df(per_warp_ok=False)).verdict == "differs"
    # the deliberately buggy lookup being right at BN = 64 means the test did not show the bug
    assert bw.verdict_a5(_a5_df(per_cta_ok_everywhere=True)).verdict == "differs"


def test_verdict_a6():
    v = bw.verdict_a6(_tile_df())
    assert v.verdict == "holds" and v.subject == "analogue" and f"{bw.A6_COST:.2f}" in v.rule
    # the same tile wins everywhere: no ordering
    flat = _tile_df()
    flat.loc[flat["config"] == BIG, "time_p50_s"] = 1e-7
    assert bw.verdict_a6(flat).verdict == "differs"
    assert bw.verdict_a6(_df([])).verdict == "not-run"


@pytest.mark.parametrize("c, want", [(bw.A6_COST, "holds"), (bw.A6_COST * 0.99, "holds-in-kind")])
def test_verdict_a6_one_tile_cost_boundary(c, want):
    # the small tile wins at M=1, the big one at M=4096, each costing c at the other end
    rows = []
    for shape in ("a:x", "b:y"):
        rows += [_row(shape, 1, "mma_blockwise", 10e-6, variant="per_block", config=SMALL),
                 _row(shape, 1, "mma_blockwise", 10e-6 * c, variant="per_block", config=BIG),
                 _row(shape, 4096, "mma_blockwise", 10e-6, variant="per_block", config=BIG),
                 _row(shape, 4096, "mma_blockwise", 10e-6 * c, variant="per_block", config=SMALL)]
    assert bw.verdict_a6(_df(rows)).verdict == want


def _swz(off, on, spread=5e-6):
    rows = []
    for rep in range(3):
        for s, t in ((1, off), (8, on), (16, on * 1.01)):
            rows.append(dict(shape="qwen3-8b:down_proj", M=4096, config=BIG, swizzle=s, repeat=rep,
                             time_p50_s=t + (rep - 1) * spread / 2))
    return pd.DataFrame(rows)


@pytest.mark.parametrize("gain, want", [(7144 / 5614, "holds"), (bw.A7_HOLDS, "holds"),
                                        (bw.A7_HOLDS * 0.999, "holds-in-kind"), (bw.A7_LEAST * 1.001, "holds-in-kind"),
                                        (bw.A7_LEAST, "differs"), (1.0, "differs")])
def test_verdict_a7_boundaries(gain, want):
    v = bw.verdict_a7(_swz(1000e-6 * gain, 1000e-6, spread=1e-9))
    assert v.verdict == want and v.subject == "analogue" and f"{bw.A7_HOLDS:.2f}" in v.rule


def test_verdict_a7_within_noise_differs():
    assert bw.verdict_a7(_swz(1100e-6, 1000e-6, spread=300e-6)).verdict == "differs"
    assert "L2" not in bw.verdict_a7(_swz(1100e-6, 1000e-6)).reason       # no typed cause


def _a8_rows(t_seed=60e-6, t_w8q=12e-6, t_w8=6e-6):
    return [_row("qwen3-8b:o_proj", 1, "mma_blockwise", t_seed, variant="per_slice", config=mb.SEED_CONFIG.name,
                 quant=Q),
            _row("qwen3-8b:o_proj", 1, "triton_blockwise", t_w8),                 # pre-quantised: not compared
            _row("qwen3-8b:o_proj", 1, "triton_blockwise", t_w8q, quant=Q),
            _row("qwen3-8b:o_proj", 1, "cublaslt_blockwise", t_w8q * 1.5, quant=Q)]


def _a8(rows, copy=4.27e12):
    v = bw.verdict_a8(_df(rows), copy)
    assert [x.subject for x in v] == ["analogue", "seed"] and all(x.claim == "A8" and x.rule for x in v)
    return v


def test_verdict_a8_weight_only_against_w8a8_with_quantiser():
    wo = lambda t: _row("qwen3-8b:o_proj", 1, "gemv_w8a16_fp8", t, path="weight-only")  # noqa: E731
    # 9.63 us weight-only vs 11.98 us best W8A8 + quantiser (the committed case): holds, although
    # the W8A8 arm without its quantiser (6 us) would win
    ana, seed = _a8(_a8_rows(t_w8q=11.98e-6) + [wo(9.63e-6)])
    assert ana.verdict == "holds" and "9.63 us" in ana.our_figure and "11.98 us" in ana.our_figure
    assert seed.verdict == "not-run" and seed.reason == bw.MARLIN_HOWTO
    assert "FP8 Marlin" in seed.reason and "not measured in this run" in seed.reason
    # at the boundary: equal times do not "beat"
    assert _a8(_a8_rows(t_w8q=9.63e-6) + [wo(9.63e-6)])[0].verdict == "differs"
    # no weight-only timing: not-run (not holds-in-kind)
    assert _a8(_a8_rows())[0].verdict == "not-run"


@pytest.mark.parametrize("x, want", [(bw.A8_FLOOR_X, "holds"), (bw.A8_FLOOR_X * 0.99, "differs")])
def test_verdict_a8_streaming_floor_boundary(x, want):
    copy = 4.27e12
    floor = bw.weight_bytes("mma_blockwise", 4096, 4096) / copy
    rows = _a8_rows(t_seed=floor * x) + [_row("qwen3-8b:o_proj", 1, "gemv_w8a16_fp8", 5e-6, path="weight-only")]
    assert _a8(rows, copy)[0].verdict == want


def test_verdict_a8_seed_row_from_peer_marlin():
    rows = _a8_rows(t_w8q=12e-6)
    fast = _a8(rows + [_row("qwen3-8b:o_proj", 1, "peer_vllm_marlin_fp8", 10e-6)])[1]
    assert fast.verdict == "holds" and fast.subject == "seed" and "peer_vllm_marlin_fp8" in fast.our_figure
    slow = _a8(rows + [_row("qwen3-8b:o_proj", 1, "peer_vllm_marlin_fp8", 12e-6)])[1]
    assert slow.verdict == "differs"
    # an arm that is not Marlin does not count
    assert _a8(rows + [_row("qwen3-8b:o_proj", 1, "peer_vllm_triton", 1e-6)])[1].verdict == "not-run"


A9_GAP = bw.SEED_A9_RATIO - 1
A9_HOLD_HI, A9_KIND_HI = 1 + bw.A9_HOLDS_GAPS * A9_GAP, 1 + bw.A9_KIND_GAPS * A9_GAP


def _a9_df(r, arm="cutlass_blockwise_sm90", quant=Q):
    return _df([_row("qwen3-8b:down_proj", M, a, t, quant=quant) for M in (1024, 4096)
                for a, t in ((arm, r * 1e-3), ("triton_blockwise", 1e-3))])


@pytest.mark.parametrize("r, want", [(bw.SEED_A9_RATIO, "holds"), (1.0, "holds"), (0.99, "differs"),
                                     (A9_HOLD_HI, "holds"), (A9_HOLD_HI * 1.001, "holds-in-kind"),
                                     (A9_KIND_HI, "holds-in-kind"), (A9_KIND_HI * 1.001, "differs"),
                                     (4.09, "differs")])
def test_verdict_a9_bounded(r, want):
    v = bw.verdict_a9(_a9_df(r))
    assert v.verdict == want and v.subject == "analogue" and v.variant == "CUTLASS"
    assert f"{A9_KIND_HI:.2f}" in v.rule


def test_verdict_a9_rows_and_quant():
    v = bw.verdict_a9(_a9_df(1.1, arm="mma_blockwise"), arm="mma_blockwise")
    assert v.verdict == "holds" and v.variant == "mma.sync"
    # pre-quantised timings only: not judged as the quant-included claim
    assert bw.verdict_a9(_a9_df(1.1, quant="none")).verdict == "not-run"
    assert bw.verdict_a9(_a9_df(1.1, quant="none"), quant="none").verdict == "holds"


def _b5_rows(of_fp8, bf16_x=1.7, mhz=(1755, 1980, 1980)):
    rows = []
    for M, scale in ((4096, 1e-3), (16, 1e-5)):
        t_pt = scale
        for arm, t, clk in (("cublaslt_blockwise", t_pt / of_fp8, mhz[0]), (bw.PER_TENSOR, t_pt, mhz[1]),
                            ("cublas_bf16", t_pt / of_fp8 * bf16_x, mhz[2])):
            r = _row("s:x", M, arm, t)
            r["sm_mhz_median"] = clk
            rows.append(r)
    return rows


@pytest.mark.parametrize("of_fp8, want", [(1.0, "holds"), (bw.B5_OF_FP8 * 1.000001, "holds"),
                                            (bw.B5_OF_FP8 * 0.99, "differs")])
def test_verdict_b5_against_fp8_per_tensor(of_fp8, want):
    v = bw.verdict_b5(_df(_b5_rows(of_fp8)))
    assert v.verdict == want and v.subject == "seed" and f"{bw.B5_OF_FP8:.2f}" in v.rule
    assert "x BF16" in v.our_figure and "SM MHz 1755 / 1980 / 1980" in v.our_figure
    assert "power" not in v.reason          # no typed cause: the clocks are in the figure


def test_verdict_b5_ignores_the_bf16_ratio_and_needs_per_tensor():
    # 2x BF16 is beside, not the bar: at 1.2x BF16 but at the per-tensor rate it holds
    assert bw.verdict_b5(_df(_b5_rows(0.95, bf16_x=1.2))).verdict == "holds"
    no_pt = [r for r in _b5_rows(1.0) if r["arm"] != bw.PER_TENSOR]
    assert bw.verdict_b5(_df(no_pt)).verdict == "not-run"
    failed = _b5_rows(1.0) + [_row("s:x", 1, "cublaslt_blockwise", math.nan, status="not-run: ValueError: M")]
    assert bw.verdict_b5(_df(failed)).verdict == "differs"


def test_verdict_b7():
    v = bw.verdict_b7(_arms_df())
    assert v.verdict == "holds" and v.subject == "analogue" and v.rule
    assert bw.verdict_b7(_arms_df(lt_time=1.0)).verdict == "differs"    # triton everywhere
    assert bw.verdict_b7(_df([])).verdict == "not-run"
    # both shapes crossing in the same bracket: one threshold would do
    same = _arms_df()
    two = same["shape"] == "s:two"
    one = same[same["shape"] == "s:one"].copy()
    same = pd.concat([same[~two], one.assign(shape="s:two")], ignore_index=True)
    assert bw.verdict_b7(same).verdict == "holds-in-kind"



def test_verdict_b7_does_not_count_a_near_tie():
    """Both shapes cross triton -> cuBLASLt in the same bracket; one of them then swaps cuBLASLt
    for CUTLASS at M = 1024 by 1%: a near-tie that flips from run to run. It is listed, not counted,
    so the verdict stays holds-in-kind (without the margin it would read as a second bracket)."""
    same = _arms_df()
    one = same[same["shape"] == "s:one"].copy()
    same = pd.concat([one, one.assign(shape="s:two")], ignore_index=True)
    lt = same[(same["shape"] == "s:two") & (same["M"] == 1024) & (same["arm"] == "cublaslt_blockwise")
              & (same["quant"] == "none")]
    same = pd.concat([same, _df([_row("s:two", M, "cutlass_blockwise_sm90",
                                      float(lt["time_p50_s"].iloc[0]) * (0.99 if M == 1024 else 1.5))
                                 for M in (1, 16, 128, 1024)])], ignore_index=True)
    x = bw.crossovers(same)
    tie = x[(x["shape"] == "s:two") & (x["winner_above"] == "cutlass_blockwise_sm90")]
    assert len(tie) == 1 and not tie.iloc[0]["decisive"]
    assert tie.iloc[0]["lead_above"] == pytest.approx(1 / 0.99 - 1)
    assert x[x["winner_above"] == "cublaslt_blockwise"]["decisive"].all()
    v = bw.verdict_b7(same)
    assert v.verdict == "holds-in-kind", v
    assert "not counted" in v.our_figure and "B7" == v.claim
    # the same swap by 10% is decisive: two brackets, one threshold would be wrong
    lt10 = same.copy()
    sel = (lt10["shape"] == "s:two") & (lt10["M"] == 1024) & (lt10["arm"] == "cutlass_blockwise_sm90")
    lt10.loc[sel, "time_p50_s"] = float(lt["time_p50_s"].iloc[0]) * 0.9
    assert bw.verdict_b7(lt10).verdict == "holds"


def test_every_verdict_names_subject_and_rule():
    from fp8lab.report import claims

    vs = [bw.verdict_a3(_a3_df(6536e-6, 1374e-6)), bw.verdict_a4(_a4_df()), bw.verdict_a5(_a5_df()),
          bw.verdict_a6(_tile_df()), bw.verdict_a7(_swz(2e-3, 1e-3)), *bw.verdict_a8(_df(_a8_rows()), 4.27e12),
          bw.verdict_a9(_a9_df(1.1)), bw.verdict_b5(_df(_b5_rows(1.0))), bw.verdict_b7(_arms_df())]
    for v in vs:
        assert isinstance(v, claims.Verdict) and v.our_figure and v.subject in claims.SUBJECTS
        assert v.rule and "\n" not in v.rule


def test_swizzle_summary():
    s = bw.swizzle_summary(_swz(2e-3, 1e-3)).set_index("swizzle")
    assert s.loc[1, "time_p50_s"] == pytest.approx(2e-3)
    assert s.loc[8, "spread_s"] == pytest.approx(5e-6)
    assert (s["runs"] == 3).all()


def test_sweep_rejects_bad_arms():
    with pytest.raises(ValueError, match="unknown arms"):
        bw.build_candidates(1, ["marlin"])


def test_promotion_ratios():
    rows = [_row("s:x", 4096, "mma_blockwise", 6e-3, variant="per_slice", config=mb.SEED_CONFIG.name),
            _row("s:x", 4096, "mma_blockwise", 3e-3, variant="per_block", config=mb.SEED_CONFIG.name),
            _row("s:x", 4096, "mma_blockwise", 2e-3, variant="per_block_inplace", config=mb.SEED_CONFIG.name),
            _row("s:x", 4096, "mma_blockwise", 1e-3, variant="per_block", config=BIG),
            _row("s:x", 4096, "mma_blockwise", 5e-3, variant="per_slice", config=BIG),
            _row("s:x", 4096, "triton_blockwise", 0.5e-3)]
    r = bw.promotion_ratios(_df(rows)).iloc[0]
    assert r["same_tile"] == pytest.approx(2.0) and r["same_tile_inplace"] == pytest.approx(3.0)
    assert r["seed_to_best"] == pytest.approx(6.0) and r["slice_vs_triton"] == pytest.approx(12.0)
    assert r["t_slice_best"] == pytest.approx(5e-3)
    assert r["same_tile_promo"] == pytest.approx(3.0)           # the faster per-block loop at the seed tile
    # the quantiser's rows are another table: by default left out, asked for they are used alone
    q = [dict(r_, quant=Q, time_p50_s=r_["time_p50_s"] * 2) for r_ in rows[:2]]
    assert bw.promotion_ratios(_df(rows + q)).iloc[0]["same_tile"] == pytest.approx(2.0)
    rq = bw.promotion_ratios(_df(rows + q), quant="included").iloc[0]
    assert rq["same_tile"] == pytest.approx(2.0) and rq["t_slice_seed"] == pytest.approx(12e-3)


def test_arms_table():
    t = bw.arms_table(_arms_df())
    assert list(t.columns[:2]) == ["mma_blockwise", "triton_blockwise"]
    assert "cublaslt_blockwise + quant_act_reference" in t.columns
    assert t.loc[("s:one", 1), "triton_blockwise"] == pytest.approx(10e-6 * 1.01 * 1e6)   # swapab, not ptr
    assert bw.arms_table(_df([])).empty


def test_build_candidates_mma_always():
    cands, skipped = bw.build_candidates(1, ["mma_blockwise"], N=4096, mma_configs=2,
                                         mma_always=[mb.SEED_CONFIG.name, "16x64x128_w16x32_s4"],
                                         mma_variants=("per_slice", "per_block"))
    names = [c.config for c in cands]
    assert not skipped and len(cands) == 2 * 3            # 2 by the rule (16x64 among them) + the seed tile
    assert names.count(mb.SEED_CONFIG.name) == 2 and all(c.arm == "mma_blockwise" for c in cands)


def test_build_candidates_pins_every_triton_tile():
    pytest.importorskip("triton")
    from fp8lab.kernels import triton_blockwise as tb

    cands, skipped = bw.build_candidates(1, ["triton_blockwise"], N=4096, K=12288, sms=132)
    want = [(p, tb.config_text(c)) for p, v in bw.triton_candidates(1)
            for c in tb.autotune_space(v, p, 1, 4096, 12288, sms=132)]
    assert not skipped and [(c.path, c.config) for c in cands] == want
    assert len(want) > len(bw.triton_candidates(1))      # more than one tile per path: each timed
    assert all(c.arm == "triton_blockwise" and c.takes_out for c in cands)


def test_verdict_a6_without_a_common_tile():
    df = _tile_df()
    # only the decode tile at M=1, no decode tile at M=4096: no tile covers every point
    keep = ~(((df["M"] == 1) & (df["config"] != SMALL)) | ((df["M"] == 4096) & (df["config"] == SMALL)))
    v = bw.verdict_a6(df[keep])
    assert v.verdict == "holds-in-kind" and "unknown" in v.reason


def test_cutlass_candidates_follow_m():
    from fp8lab.kernels import cutlass_blockwise_sm90 as cb

    assert bw.cutlass_candidates(4096) == list(cb.CONFIGS)          # large M: every config competes
    small = bw.cutlass_candidates(16)
    assert small[0] == cb.DEFAULT_CONFIG and set(small) < set(cb.CONFIGS)
    assert bw.cutlass_candidates(1, ["pingpong_64x128"]) == ["pingpong_64x128"]
    assert bw.cutlass_candidates(1, "coop_128x128_c2x1") == ["coop_128x128_c2x1"]
    with pytest.raises(ValueError, match="known configs"):
        bw.cutlass_candidates(1, ["coop_256x256"])
    c = bw._cutlass_candidate("coop_128x128_streamk")
    assert c.arm == "cutlass_blockwise_sm90" and c.config == "coop_128x128_streamk" and c.takes_out


# ------------------------------------------------------------------ which product each arm must equal
def _np_opset(M=5, N=200, K=200, seed=0):
    """Operands as numpy arrays (reference_for takes them as it takes torch tensors): small
    integer codes and power-of-two scales, so every product is exact in float64."""
    rng = np.random.default_rng(seed)
    kb, nb = -(-K // 128), -(-N // 128)
    a = rng.integers(-8, 9, (M, K)).astype(float)
    b = rng.integers(-8, 9, (N, K)).astype(float)
    sa = 2.0 ** rng.integers(-3, 4, (M, kb))
    sb = 2.0 ** rng.integers(-3, 4, (nb, kb))
    x, w = rng.standard_normal((M, K)), rng.standard_normal((N, K))
    return bw.OpSet(x=x, x_pad=x, a=a, a_scale=sa, b=b, b_scale=sb, w_bf16=w)


def test_every_arm_has_one_reference():
    kinds = {a: bw.reference_kind(a) for a in bw.ARMS}
    assert kinds == {"mma_blockwise": "blockwise", "triton_blockwise": "blockwise",
                     "cutlass_blockwise_sm90": "blockwise", "cublaslt_blockwise": "blockwise",
                     "cublas_bf16": "bf16", bw.PER_TENSOR: "codes", "gemv_w8a8_blockwise": "blockwise",
                     "wgmma_blockwise_sm90": "blockwise"}
    assert set(kinds.values()) == set(bw.REFERENCES)
    with pytest.raises(ValueError, match="unknown arm"):
        bw.reference_kind("cublas_fp8_rowwise")


def test_the_w8a8_decode_gemv_is_a_candidate_up_to_m_64_only():
    for M in (1, 16, bw.GEMV_W8A8_MAX_M):
        cands, skipped = bw.build_candidates(M, ["gemv_w8a8_blockwise"])
        assert [(c.arm, c.variant) for c in cands] == [("gemv_w8a8_blockwise", ""), ("gemv_w8a8_blockwise", "pdl")]
        assert not skipped and all(c.takes_out for c in cands)
    cands, skipped = bw.build_candidates(bw.GEMV_W8A8_MAX_M + 1, ["gemv_w8a8_blockwise"])
    assert not cands and skipped[0][0] == "gemv_w8a8_blockwise" and "decode kernel" in skipped[0][1]
    assert "gemv_w8a8_blockwise" in bw.OURS and "gemv_w8a8_blockwise" in bw.W8A8


def test_the_wgmma_arm_is_a_not_run_row_where_it_cannot_run(monkeypatch):
    from fp8lab.kernels import wgmma_blockwise as wg

    monkeypatch.setattr(wg, "available", lambda device=None: (False, "needs an sm_90 GPU"))
    cands, skipped = bw.build_candidates(4096, ["wgmma_blockwise_sm90"])
    assert not cands and skipped == [("wgmma_blockwise_sm90",
                                      "fp8lab.kernels.wgmma_blockwise cannot run here: needs an sm_90 GPU")]
    monkeypatch.setattr(wg, "available", lambda device=None: (True, ""))
    cands, skipped = bw.build_candidates(4096, ["wgmma_blockwise_sm90"])
    assert [c.variant for c in cands] == list(wg.VARIANTS) and not skipped
    assert all(c.arm == "wgmma_blockwise_sm90" and c.takes_out and c.config == "128x128" for c in cands)
    cands, _ = bw.build_candidates(1024, ["wgmma_blockwise_sm90"], N=7168, sms=132)
    assert {c.config for c in cands} == {"128x112"}       # pick_tile_n's width for the last wave
    assert set(bw.MAY_NOT_RUN) == {"cutlass_blockwise_sm90", "wgmma_blockwise_sm90"} < set(bw.OURS)


def test_reference_for_each_arm():
    s = _np_opset()
    rows = np.array([0, 2, 4])
    # blockwise: every code times its own two scales, summed (written out, not via reference_rows)
    want = np.zeros((len(rows), s.b.shape[0]))
    for i, r in enumerate(rows):
        for j in range(s.b.shape[0]):
            want[i, j] = sum(s.a[r, k] * s.a_scale[r, k // 128] * s.b[j, k] * s.b_scale[j // 128, k // 128]
                             for k in range(s.a.shape[1]))
    for arm in ("mma_blockwise", "triton_blockwise", "cutlass_blockwise_sm90", "cublaslt_blockwise",
                "gemv_w8a8_blockwise", "wgmma_blockwise_sm90"):
        np.testing.assert_array_equal(bw.reference_for(arm, s, rows), want)
    # per-tensor: the codes with unit scales (what torch._scaled_mm with scale 1 computes); the
    # scaled product is a different matrix, so checking this arm against it fails (issue 14)
    codes = s.a[rows] @ s.b.T
    np.testing.assert_array_equal(bw.reference_for(bw.PER_TENSOR, s, rows), codes)
    assert not np.allclose(codes, want)
    # bf16: the unquantised activations times the dequantised bf16 weights
    np.testing.assert_array_equal(bw.reference_for("cublas_bf16", s, rows), s.x[rows] @ s.w_bf16.T)


def test_reference_for_caches_per_kind_and_needs_bf16_weights():
    s = _np_opset()
    rows = np.arange(5)
    cache = {}
    r1 = bw.reference_for("mma_blockwise", s, rows, cache)
    assert bw.reference_for("triton_blockwise", s, rows, cache) is r1          # same kind: built once
    assert bw.reference_for(bw.PER_TENSOR, s, rows, cache) is not r1
    assert len(cache) == 2
    s.w_bf16 = None
    with pytest.raises(ValueError, match="bf16_weights=True"):
        bw.reference_for("cublas_bf16", s, rows)


def _paired(ratios, shape="s:x", M=4096, mhz=(1500, 1450)):
    """paired_b5-shaped rows: per round, blockwise at t / ratio (its rate = ratio x per-tensor's)."""
    rows = []
    for r, ratio in enumerate(ratios):
        for arm, t, clk in (("cublaslt_blockwise", 1e-3 / ratio, mhz[0]), (bw.PER_TENSOR, 1e-3, mhz[1])):
            row = _row(shape, M, arm, t)
            row.update(round=r, sm_mhz_median=clk)
            rows.append(row)
    return pd.DataFrame(rows)


def test_paired_ratios_are_per_round_and_median():
    pr = bw.paired_ratios(_paired([0.80, 0.95, 0.92, 0.99, 0.91]))
    assert len(pr) == 1 and pr.iloc[0]["rounds"] == 5
    assert pr.iloc[0]["ratio_p50"] == pytest.approx(0.92)
    assert pr.iloc[0]["ratio_p10"] < 0.92 < pr.iloc[0]["ratio_p90"]
    assert pr.iloc[0]["mhz_blockwise"] == 1500 and pr.iloc[0]["mhz_per_tensor"] == 1450


@pytest.mark.parametrize("ratios, want", [([0.95, 0.91, 0.93], "holds"), ([0.85, 0.89, 0.88], "differs")])
def test_verdict_b5_reads_the_paired_rounds_first(ratios, want):
    # the sweep alone says the opposite of the rounds: the rounds decide
    sweep = _df(_b5_rows(0.85 if want == "holds" else 0.99))
    v = bw.verdict_b5(sweep, _paired(ratios))
    assert v.verdict == want and "alternating rounds" in v.our_figure and "alternately" in v.rule
    assert "3 rounds" in v.our_figure
    # without rounds: the sweep's rule, as for runs before them
    assert bw.verdict_b5(sweep).verdict == ("differs" if want == "holds" else "holds")
    assert bw.verdict_b5(sweep, pd.DataFrame()).verdict == bw.verdict_b5(sweep).verdict


@pytest.mark.parametrize("ratios", [[0.95, 0.85, 0.93, 0.92, 0.86], [0.86, 0.91, 0.88, 0.85, 0.89]])
def test_verdict_b5_median_inside_the_rounds_spread_is_not_decided_by_it(ratios):
    """Rounds whose p10-p90 spans the bar: holds-in-kind whichever side the median falls (at
    545c5c9 and 4dd7705 the H200's down_proj median was 0.896 and 0.923, with the verdict the
    median rule gave flipping between them). The reason names the shape and its spread."""
    v = bw.verdict_b5(_df(_b5_rows(1.0)), _paired(ratios))
    assert v.verdict == "holds-in-kind", v
    assert "s:x p10-p90" in v.reason and f"spans {bw.B5_OF_FP8:.2f}" in v.reason and "p10" in v.rule
    # one shape wholly under the bar decides, whatever another shape does
    both = pd.concat([_paired(ratios), _paired([0.80, 0.82, 0.81], shape="s:y")], ignore_index=True)
    sweep = _df(_b5_rows(1.0) + [dict(r, shape="s:y") for r in _b5_rows(1.0)])
    v = bw.verdict_b5(sweep, both)
    assert v.verdict == "differs" and "s:y 0.810x" in v.reason and "s:x" not in v.reason


def test_verdict_b5_paired_rounds_missing_a_shape_is_not_run():
    v = bw.verdict_b5(_df(_b5_rows(1.0)), _paired([1.0, 1.0], shape="other:y"))
    assert v.verdict == "not-run" and "s:x" in v.reason


def test_versus_peers_pairs_like_with_like():
    rows = [_row("s:one", 4096, "cutlass_blockwise_sm90", 500e-6), _row("s:one", 4096, "cublaslt_blockwise", 400e-6),
            _row("s:one", 4096, "cutlass_blockwise_sm90", 600e-6, quant="quant_act_warp")]
    peers = _df([_row("s:one", 4096, "peer_deepgemm", 450e-6), _row("s:one", 4096, "peer_deepgemm", 900e-6,
                                                                    quant="own quantiser")])
    v = bw.versus_peers(_df(rows), peers).set_index("quant")
    assert list(v.index) == ["none", bw.QUANT_INCLUDED]
    # cuBLASLt is faster still, but it is a library baseline, not an fp8lab arm
    assert v.loc["none", "own_arm"] == "cutlass_blockwise_sm90"
    assert v.loc["none", "own_over_peer"] == pytest.approx(450 / 500)
    assert v.loc[bw.QUANT_INCLUDED, "own_over_peer"] == pytest.approx(900 / 600)
    assert bw.versus_peers(_df(rows), None).empty and bw.versus_peers(_df(rows), _df([])).empty
