"""CPU tests of quant_act_warp_ilp (issue 6 item 5): launch shape, argument checks, the B6 target
arm, and the fast division's arithmetic (the FFMA sequence of quant_act.cu's div_by_scale, with
exact rational arithmetic) against the IEEE quotient torch's reference divides with."""
from fractions import Fraction

import ml_dtypes
import numpy as np
import pandas as pd
import pytest

from fp8lab.experiments import quantisers as qx
from fp8lab.kernels import quant_act as qa


def test_ilp_launch_shape():
    c = qa.ilp_launch(256, 7168)                       # the smallest target M
    assert c["groups"] == 256 * 56 and c["groups_per_block"] == 8 * 4 and c["threads"] == 256
    assert c["blocks"] == 448 and c["idle_warp_slots"] == 0 and c["bytes_in_flight_per_warp"] == 1024
    c = qa.ilp_launch(7, 384, groups_per_warp=8)       # 21 groups, one block, 43 idle slots
    assert (c["blocks"], c["idle_warp_slots"], c["loads_per_lane"]) == (1, 64 - 21, 4)
    c = qa.ilp_launch(4097, 7168, groups_per_warp=2)
    assert c["blocks"] == -(-4097 * 56 // 16)
    assert c["blocks"] * c["groups_per_block"] - c["groups"] == c["idle_warp_slots"] < c["groups_per_block"]
    with pytest.raises(ValueError, match="groups_per_warp"):
        qa.ilp_launch(8, 128, groups_per_warp=3)
    with pytest.raises(ValueError, match="multiple of 128"):
        qa.ilp_launch(8, 100)


def test_variant_arguments_refused_before_any_gpu_work():
    assert "quant_act_warp_ilp" in qa.VARIANTS and "quant_act_warp_ilp" in qx.ARMS
    with pytest.raises(ValueError, match="groups_per_warp must be one of"):
        qa.quant_act(None, "quant_act_warp_ilp", groups_per_warp=16)
    with pytest.raises(ValueError, match="quant_act_warp_ilp only"):
        qa.quant_act(None, "quant_act_warp", groups_per_warp=4)
    # the binding's numbers are distinct and match quant_act.cu's launch()
    ids = [*qa._VARIANT_IDS.values(), *qa._ILP_IDS.values(), qa._TRAFFIC_COPY_ID]
    assert len(set(ids)) == len(ids)
    src = (qa.__file__[:-3] + ".cu")
    text = open(src).read()
    assert "variant == 3 ? launch_ilp<kScaleMulRecip, 2>" in text      # 4 groups per warp = 2 loads
    assert ": variant == 4 ? launch_ilp<kScaleMulRecip, 1>" in text and "launch_ilp<kScaleMulRecip, 4>" in text
    assert "variant == 9" in text
    assert qa._VARIANT_IDS["quant_act_subwarp"] == 12 and "variant == 10" in text and "launch_subwarp<" in text
    # the subwarp forms: the default ('plain16') is quant_act_subwarp's id, each form's id launches its kForm
    assert qa.SUBWARP_DEFAULT_FORM == "plain16" and qa._variant_id("quant_act_subwarp", None) == 12
    assert qa._SUBWARP_IDS[qa.SUBWARP_DEFAULT_FORM] == qa._VARIANT_IDS["quant_act_subwarp"]
    for form, k in zip(qa.SUBWARP_FORMS, range(3)):
        vid = qa._SUBWARP_IDS[form]
        assert qa._variant_id("quant_act_subwarp", None, None, form) == vid
        assert f"launch_subwarp<kScaleMulRecip, {k}>" in text
    assert "variant >= 10 && variant <= 12" in text and qa._SUBWARP_IDS == {"ef": 10, "plain": 11, "plain16": 12}
    assert "variant == 10   ? launch_subwarp<kScaleMulRecip, 0>" in text
    assert ": variant == 11 ? launch_subwarp<kScaleMulRecip, 1>" in text
    assert ": launch_subwarp<kScaleMulRecip, 2>" in text
    with pytest.raises(ValueError, match="subwarp_form must be one of"):
        qa.quant_act(None, "quant_act_subwarp", subwarp_form="fast")
    with pytest.raises(ValueError, match="subwarp_form applies to quant_act_subwarp only"):
        qa.quant_act(None, "quant_act_warp_ilp", subwarp_form="plain")
    with pytest.raises(ValueError, match="subwarp_form must be one of"):
        qx.measure(subwarp_form="ef16")


def test_pdl_arguments_refused_before_any_gpu_work():
    assert qx.PDL_ARM in qx.ARMS and qx.PDL_ARM not in qa.VARIANTS
    assert qx.SUBWARP_PDL_ARM in qx.ARMS and set(qx.PDL_ARMS.values()) == set(qa.PDL_VARIANTS)
    with pytest.raises(ValueError, match="grid kernel and quant_act_subwarp only, not quant_act_16t"):
        qa.quant_act(None, "quant_act_16t", pdl=True)
    with pytest.raises(ValueError, match="with persistent=True"):
        qa.quant_act(None, "quant_act_warp_ilp", groups_per_warp=2, persistent=True, pdl=True)
    with pytest.raises(ValueError, match="pdl must be True or False"):
        qa.quant_act(None, "quant_act_warp_ilp", pdl="yes")
    with pytest.raises(ValueError, match="CUDA torch.Tensor"):
        qa.quant_act(None, "quant_act_warp_ilp", groups_per_warp=2, pdl=True)
    with pytest.raises(ValueError, match="groups_per_warp applies to quant_act_warp_ilp only"):
        qa.quant_act(None, "quant_act_subwarp", groups_per_warp=4, pdl=True)
    with pytest.raises(ValueError, match="CUDA torch.Tensor"):
        qa.quant_act(None, "quant_act_subwarp", pdl=True)
    # the flag bit is the source's, and the source launches PDL only for the ilp grid kernels and subwarp
    text = open(qa.__file__[:-3] + ".cu").read()
    assert f"constexpr int kPdlFlag = {qa._PDL_FLAG:#x};" in text
    assert "if (pdl && !(variant == 3 || variant == 4 || variant == 5 || (variant >= 9 && variant <= 12)))" in text
    assert "cudaLaunchAttributeProgrammaticStreamSerialization" in text and "griddepcontrol.wait" in text


def test_pdl_release_refused_before_any_gpu_work():
    with pytest.raises(ValueError, match="pdl_release must be one of"):
        qa.quant_act(None, "quant_act_subwarp", pdl=True, pdl_release="early")
    with pytest.raises(ValueError, match="pdl_release applies with pdl=True only"):
        qa.quant_act(None, "quant_act_subwarp", pdl_release="after_wait")
    with pytest.raises(ValueError, match="quant_act_warp_ilp releases the next kernel after_wait only"):
        qa.quant_act(None, "quant_act_warp_ilp", pdl=True, pdl_release="after_stores")
    with pytest.raises(ValueError, match="pdl_release applies with pdl=True only"):
        qa.traffic_copy(None, pdl_release="after_stores")
    with pytest.raises(ValueError, match="pdl must be True or False"):
        qa.traffic_copy(None, pdl="yes")
    with pytest.raises(ValueError, match="CUDA torch.Tensor"):
        qa.quant_act(None, "quant_act_subwarp", pdl=True, pdl_release="after_wait")
    with pytest.raises(ValueError, match="CUDA torch.Tensor"):
        qa.traffic_copy(None, pdl=True)
    # every PDL kernel has a default release among its choices; the flag bit and the source agree
    for k, r in qa.PDL_DEFAULT_RELEASE.items():
        assert r in qa.PDL_RELEASE_CHOICES[k]
    text = open(qa.__file__[:-3] + ".cu").read()
    assert f"constexpr int kEarlyReleaseFlag = {qa._EARLY_RELEASE_FLAG:#x};" in text
    assert "if (early && !(pdl && variant >= 9 && variant <= 12))" in text


def test_measure_refuses_bad_options():
    with pytest.raises(ValueError, match="timing"):
        qx.measure(timing="fastest")
    with pytest.raises(ValueError, match="diagnostic"):
        qx.measure(diagnostic_arms=["memcpy"])
    with pytest.raises(ValueError, match="groups_per_warp"):
        qx.measure(groups_per_warp=5)
    with pytest.raises(ValueError, match="persistent=True does not apply"):
        qx.measure(arms=(qx.PDL_ARM,), groups_per_warp=4, persistent=True)


def _rows(arms_fracs):
    rows = []
    for M in (256, 1024, 8192):
        for arm, t, frac in arms_fracs:
            rows.append({"arm": arm, "M": M, "K": 7168, "status": "measured", "time_p50_s": t * M / 256,
                         "fraction_of_copy": frac})
    return pd.DataFrame(rows)


def test_performance_target_on_the_ilp_arm_b6_on_the_warp_arm():
    df = _rows([("quant_act_naive", 100e-6, 0.02), ("quant_act_warp", 8e-6, 0.5), ("quant_act_warp_ilp", 4e-6, 0.85)])
    # the 80%-of-copy performance target is reported on the bandwidth kernel when measured ...
    assert qx.target_arm(df) == "quant_act_warp_ilp"
    # ... while B6 (the seed's fix) is judged on quant_act_warp, whatever fraction of copy it reaches
    v = qx.b6_verdict(df)
    assert v.verdict == "holds" and "quant_act_warp 12.5-12.5x" in v.our_figure
    old = df[df["arm"] != "quant_act_warp_ilp"]
    assert qx.target_arm(old) == "quant_act_warp" and qx.b6_verdict(old).verdict == "holds"
    # a failed (unmeasured) ilp row does not count as measured
    df.loc[df["arm"] == "quant_act_warp_ilp", "status"] = "wrong: 3 codes"
    assert qx.target_arm(df) == "quant_act_warp"


# ------------------------------------------------------------------ the fast division, exactly
def _rn32(v: Fraction) -> Fraction:
    """Round a rational to the nearest fp32 (ties to even), subnormals included; no overflow here."""
    if v == 0:
        return Fraction(0)
    sign, a = (-1 if v < 0 else 1), abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    quantum = Fraction(2) ** (max(e, -126) - 23)
    n, rem = divmod(a, quantum)
    n = int(n)
    if rem * 2 > quantum or (rem * 2 == quantum and n % 2 == 1):
        n += 1
    return sign * n * quantum


def _f32(v) -> Fraction:
    return Fraction(float(np.float32(v)))


def _to_f32(fr: Fraction) -> np.float32:
    return np.float32(float(fr))       # exact: fr is an fp32 value


def _e4m3_code(v: np.float32) -> int:
    return int(np.array([v], dtype=np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)[0])


@pytest.mark.parametrize("seed", [0, 1])
def test_fast_division_is_the_ieee_quotient(seed):
    """div_by_scale's sequence, each FFMA rounded once, with the reciprocal estimate y0 anywhere
    within 1 ulp of 1/b (MUFU.RCP's accuracy), equals RN(a / b) for |a| >= 2^-100 and scales in the
    fast range, and gives the same e4m3 code (sign included) for every smaller |a| (zeros too)."""
    rng = np.random.default_rng(seed)
    inv448 = np.float32(1) / np.float32(448)
    n_checked = 0
    for _ in range(150):
        amax = np.float32(ml_dtypes.bfloat16(np.float32(rng.uniform(1, 2)) * np.float32(2.0) ** int(rng.integers(-70, 127))))
        b = np.float32(amax * inv448)
        if not (qa_fast_min() <= b <= qa_fast_max()):
            continue
        B = _f32(b)
        exact_rcp = _rn32(1 / B)
        ulp = Fraction(2) ** (exact_rcp.numerator.bit_length() - exact_rcp.denominator.bit_length() - 24)
        for y0 in (exact_rcp - ulp, exact_rcp, exact_rcp + ulp):
            y = _rn32(y0 * _rn32(1 - B * y0) + y0)
            for _ in range(6):
                kind = rng.integers(0, 4)
                if kind == 0:
                    a = np.float32(ml_dtypes.bfloat16(amax * np.float32(rng.uniform(-1, 1))))
                elif kind == 1:
                    a = np.float32(ml_dtypes.bfloat16(amax * np.float32(rng.choice([-1, 1]) * 2.0 ** -rng.uniform(0, 30))))
                elif kind == 2:   # far below the group's max, down to bf16 subnormals
                    a = np.float32(ml_dtypes.bfloat16(np.float32(rng.choice([-1, 1]) * 2.0 ** -rng.uniform(95, 133))))
                else:
                    a = np.float32(rng.choice([0.0, -0.0]))
                A = _f32(a)
                q0 = _rn32(A * y)
                r = _rn32(A - B * q0)
                q = _to_f32(_rn32(y * r + q0))
                q = np.float32(np.copysign(q, a)) if (q == 0 or np.signbit(a)) else q   # the OR of a's sign bit
                ieee = np.float32(np.copysign(_to_f32(_rn32(A / B)), a))   # b > 0: the sign is a's (-0 on underflow)
                if abs(a) >= 2.0 ** -100:
                    assert q == ieee, (a, b, y0)
                assert _e4m3_code(q) == _e4m3_code(ieee), (a, b, y0, q, ieee)
                n_checked += 1
    assert n_checked > 1000


def qa_fast_min():
    return np.float32(2.0 ** -80)      # kFastScaleMin in quant_act.cu


def qa_fast_max():
    return np.float32(2.0 ** 125)      # kFastScaleMax


def test_fast_range_constants_match_the_source():
    text = open(qa.__file__[:-3] + ".cu").read()
    assert "constexpr float kFastScaleMin = 0x1p-80f;" in text
    assert "constexpr float kFastScaleMax = 0x1p125f;" in text


def test_target_table_is_the_performance_target_not_the_verdict():
    df = _rows([("quant_act_naive", 100e-6, 0.02), ("quant_act_warp", 8e-6, 0.5), ("quant_act_warp_ilp", 4e-6, 0.90)])
    df.loc[(df["arm"] == "quant_act_warp_ilp") & (df["M"] == 1024), "fraction_of_copy"] = 0.8799
    t = qx.target_table(df)
    assert list(t["M"]) == [256, 1024, 8192] and (t["arm"] == "quant_act_warp_ilp").all()
    assert list(t["met"]) == [True, False, True] and (t["target"] == 0.88).all()     # issue 22's target 4
    df.loc[(df["arm"] == "quant_act_warp_ilp") & (df["M"] == 1024), "fraction_of_copy"] = 0.88
    assert qx.target_table(df)["met"].all()
    assert qx.b6_verdict(df).verdict == "holds"                # missing the target never moves B6
    assert qx.target_table(df[df["arm"] == "quant_act_naive"]).empty


def test_target_table_small_m_band_and_the_best_peer():
    small = pd.DataFrame([{"arm": "quant_act_warp_ilp", "M": M, "K": 7168, "status": "measured",
                           "time_p50_s": 2e-6, "fraction_of_copy": f} for M, f in ((1, 0.79), (16, 0.81))])
    df = pd.concat([_rows([("quant_act_warp_ilp", 4e-6, 0.90)]), small], ignore_index=True)
    peers = pd.DataFrame([{"arm": a, "M": 16, "K": 7168, "status": s, "time_p50_s": t, "fraction_of_copy": f}
                          for a, s, t, f in (("peer_vllm_quant_group", "measured", 3e-6, 0.55),
                                             ("peer_sglang_quant_group", "measured", 2.5e-6, 0.66),
                                             ("peer_vllm_quant_group", "not-run: x", 1e-9, 9.0))])
    t = qx.target_table(df, peers=peers).set_index("M")
    assert list(t.index) == [1, 16, 256, 1024, 8192]
    assert t.loc[1, "target"] == t.loc[16, "target"] == 0.80 and t.loc[256, "target"] == 0.88
    assert not t.loc[1, "met"] and t.loc[16, "met"]
    assert t.loc[16, "best_peer"] == "peer_sglang_quant_group" and t.loc[16, "peer_fraction_of_copy"] == 0.66
    assert t.loc[1, "best_peer"] == "" and np.isnan(t.loc[1, "peer_fraction_of_copy"])
    assert np.isnan(t["pdl_fraction_of_copy"]).all() and np.isnan(t["launch_shape_fraction_of_copy"]).all()


def test_target_table_says_what_pdl_and_the_launch_shape_reach():
    rows = [{"arm": a, "M": M, "K": 7168, "status": st, "time_p50_s": 2e-6, "fraction_of_copy": f}
            for M in (1, 256) for a, st, f in (("quant_act_warp_ilp", "measured", 0.56 if M == 1 else 0.8),
                                                (qx.PDL_ARM, "measured", 0.7 if M == 1 else 0.82),
                                                ("traffic_copy", "measured", 0.75 if M == 1 else 0.95),
                                                (qx.PDL_ARM, "not-run: x", 9.0))]
    t = qx.target_table(pd.DataFrame(rows)).set_index("M")
    assert (t["arm"] == "quant_act_warp_ilp").all()        # the target stays on the default launch
    assert t.loc[1, "pdl_fraction_of_copy"] == 0.7 and t.loc[256, "pdl_fraction_of_copy"] == 0.82
    assert t.loc[1, "launch_shape_fraction_of_copy"] == 0.75 and t.loc[256, "launch_shape_fraction_of_copy"] == 0.95


def test_target_table_reports_on_subwarp_with_its_own_pdl_twin():
    rows = [{"arm": a, "M": M, "K": 7168, "status": st, "time_p50_s": 2e-6, "fraction_of_copy": f}
            for M in (1, 256) for a, st, f in (("quant_act_warp_ilp", "measured", 0.6),
                                                (qx.PDL_ARM, "measured", 0.99),
                                                ("quant_act_subwarp", "measured", 0.72 if M == 1 else 0.91),
                                                (qx.SUBWARP_PDL_ARM, "measured", 0.85 if M == 1 else 1.05),
                                                ("traffic_copy", "measured", 0.75))]
    df = pd.DataFrame(rows)
    assert qx.target_arm(df) == "quant_act_subwarp" and qx.pdl_twin("quant_act_subwarp") == qx.SUBWARP_PDL_ARM
    t = qx.target_table(df).set_index("M")
    assert (t["arm"] == "quant_act_subwarp").all() and (t["pdl_arm"] == qx.SUBWARP_PDL_ARM).all()
    assert list(t["met"]) == [False, True]
    # the PDL column is subwarp's own twin, not the ilp kernel's
    assert t.loc[1, "pdl_fraction_of_copy"] == 0.85 and t.loc[256, "pdl_fraction_of_copy"] == 1.05
    # traffic_copy has the ilp kernel's launch shape, not subwarp's: no launch-shape figure for this arm
    assert t["launch_shape_fraction_of_copy"].isna().all()
    # a subwarp row that failed its check does not count: the target falls back to the ilp kernel
    df.loc[df["arm"] == "quant_act_subwarp", "status"] = "wrong: 1 code"
    t = qx.target_table(df).set_index("M")
    assert (t["arm"] == "quant_act_warp_ilp").all() and (t["pdl_arm"] == qx.PDL_ARM).all()
    assert t.loc[1, "pdl_fraction_of_copy"] == 0.99 and t.loc[1, "launch_shape_fraction_of_copy"] == 0.75
    assert qx.pdl_twin("quant_act_warp") is None and qx.pdl_twin(None) is None


def test_target_table_holds_the_pdl_twin_to_the_pdl_copy():
    rows = [{"arm": a, "M": M, "K": 7168, "status": "measured", "time_p50_s": 2e-6, "fraction_of_copy": f}
            for M in (1, 256) for a, f in (("quant_act_subwarp", 0.72 if M == 1 else 0.91),
                                            (qx.SUBWARP_PDL_ARM, 0.88 if M == 1 else 1.10),
                                            (qx.PDL_COPY, 0.96 if M == 1 else 1.20))]
    t = qx.target_table(pd.DataFrame(rows)).set_index("M")
    # 0.88 / 0.96 = 0.917 >= 0.80 at M = 1; 1.10 / 1.20 = 0.917 >= 0.88 at M = 256
    assert t.loc[1, "pdl_fraction_of_pdl_copy"] == pytest.approx(0.88 / 0.96)
    assert t.loc[256, "pdl_fraction_of_pdl_copy"] == pytest.approx(1.10 / 1.20)
    assert list(t["met"]) == [False, True] and list(t["pdl_met"]) == [True, True]
    # the PDL arm under its copy at M = 256: missed there, and only there
    rows[-1]["fraction_of_copy"] = 1.30
    t = qx.target_table(pd.DataFrame(rows)).set_index("M")
    assert list(t["pdl_met"]) == [True, False]
    # tables from before the PDL copy existed: NaN, never met
    old = pd.DataFrame([r for r in rows if r["arm"] != qx.PDL_COPY])
    t = qx.target_table(old)
    assert t["pdl_fraction_of_pdl_copy"].isna().all() and not t["pdl_met"].any()
    assert qx.PDL_COPY in qx.DIAGNOSTIC_ARMS and qx.PDL_COPY not in qx.ARMS


def test_pdl_release_defaults():
    # quant_act_subwarp and traffic_copy release right after the wait unless told otherwise; the
    # ilp kernel always does, without the flag bit
    assert qa._early_release("quant_act_subwarp", True, None) and qa._early_release("traffic_copy", True, None)
    assert not qa._early_release("quant_act_subwarp", True, "after_stores")
    assert not qa._early_release("traffic_copy", True, "after_stores")
    assert not qa._early_release("quant_act_warp_ilp", True, None)
    assert not qa._early_release("quant_act_subwarp", False, None)
    assert qa.PDL_DEFAULT_RELEASE == {"quant_act_warp_ilp": "after_wait", "quant_act_subwarp": "after_wait",
                                      "traffic_copy": "after_wait"}


def test_target_table_prices_a_peer_against_the_copy_timed_beside_fp8labs_kernel():
    # the peers table of a measured run has no copy of its own: its fraction is the peer's
    # bandwidth over the same-traffic copy of fp8lab's row at that M
    df = pd.DataFrame([{"arm": "quant_act_warp_ilp", "M": 256, "K": 7168, "status": "measured", "time_p50_s": 4e-6,
                        "fraction_of_copy": 0.9, "gbps_p50": 1800.0, "copy_gbps_p50": 2000.0}])
    peers = pd.DataFrame([{"arm": "peer_vllm_cuda_quant_group", "M": 256, "K": 7168, "status": "measured",
                           "time_p50_s": 5e-6, "gbps_p50": 1400.0, "fraction_of_copy": np.nan}])
    t = qx.target_table(df, peers=peers).set_index("M")
    assert t.loc[256, "best_peer"] == "peer_vllm_cuda_quant_group"
    assert t.loc[256, "peer_fraction_of_copy"] == pytest.approx(0.7)


def test_peer_check_notes_come_from_the_rows():
    rows = []
    for M in (1, 256):
        rows += [dict(arm="peer_vllm_cuda_quant_group", M=M, K=7168, status="measured", codes_differing=2 * M,
                      scales_differing=28 * M, codes_vs_true_division=0, scales_vs_true_division=0,
                      zero_group_scale=1.0, zero_group_nan_codes=0),
                 dict(arm="peer_torchao_quant_group", M=M, K=7168, status="measured", codes_differing=128,
                      scales_differing=1, codes_vs_true_division=128 + M, scales_vs_true_division=1 + 3 * M,
                      zero_group_scale=0.0, zero_group_nan_codes=128),
                 dict(arm="peer_sglang_quant_group", M=M, K=7168, status="not-run: x")]
    notes = qx.peer_check_notes(pd.DataFrame(rows))
    assert len(notes) == 2
    vllm = next(n for n in notes if n.startswith("vLLM"))
    tao = next(n for n in notes if n.startswith("torchao"))
    assert "codes differ from the reference at 2 of 2 points (at most 512), scales at 2 (at most 7168)" in vllm
    assert "scales are `amax / 448` by true division at every point, and so are its codes" in vllm
    assert "all-zero group comes out" not in vllm and "gets scale" not in vllm
    # torchao's differences are its all-zero group alone: counted there, not against the rest
    assert "outside the all-zero group, bit for bit equal to the reference at all 2 points" in tao
    assert "codes differ from `amax / 448` by true division at 2 of 2 points (at most 256), scales at 2 (at most 768)" in tao
    assert "all-zero group comes out as 128 NaN codes (scale 0)" in tao
    # vLLM as measured at 4dd7705: true-division scales except its epsilon-clamped all-zero group,
    # codes by another rule
    measured = pd.DataFrame([dict(arm="peer_vllm_cuda_quant_group", M=M, K=7168, status="measured",
                                  codes_differing=8 * M, scales_differing=28 * M, codes_vs_true_division=3 * M,
                                  scales_vs_true_division=1, zero_group_scale=1e-10 / 448, zero_group_nan_codes=0)
                             for M in (1, 16)])
    (n,) = qx.peer_check_notes(measured)
    assert "its scales are `amax / 448` by true division at every point but its codes are not (at most 48 differ)" in n
    assert "scales at 2 (at most 447)" in n and "the all-zero group gets scale 2.23214e-13 (the reference: 1)" in n
    # an older table without the true-division columns: only what it has
    old = pd.DataFrame(rows).drop(columns=["codes_vs_true_division", "scales_vs_true_division",
                                           "zero_group_scale", "zero_group_nan_codes"])
    assert all("true division" not in n and "zero" not in n for n in qx.peer_check_notes(old))
    assert qx.peer_check_notes(None) == [] and qx.peer_check_table(pd.DataFrame()).empty


def test_profile_quantisers_hands_ncu_the_workload_and_its_config(monkeypatch):
    import json

    from fp8lab.toolchain import profile

    seen = {}

    def fake(target, out, **kw):
        seen.update(target=target, out=out, **kw)
        return out

    monkeypatch.setattr(profile, "profile", fake)
    qx.profile_quantisers("rep", Ms=(256,), peers=["peer_sglang_jit_quant_group"], labels="/tmp/l.json")
    assert seen["target"] == "fp8lab.experiments.quantisers:ncu_workload"
    assert profile._resolve(seen["target"]) is qx.ncu_workload
    cfg = json.loads(seen["env"][qx.NCU_ENV])
    assert cfg == {"Ms": [256], "K": 7168, "peers": ["peer_sglang_jit_quant_group"], "labels": "/tmp/l.json"}
    assert set(profile.STALL_METRICS) <= set(seen["metrics"])
    assert "clock_control" not in seen                      # ncu_command's default: none (clocks as found)
    assert [a for a, _, _ in qx.NCU_ARMS] == ["subwarp plain16", "subwarp ef", "ilp auto"]

