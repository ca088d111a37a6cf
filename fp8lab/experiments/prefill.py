"""Weight-only prefill against cuBLAS BF16, and W8A8 vs W8A16 vs BF16 across M (notebook 11;
claims C7 and C9 of seed 003).

Arms (one ID each, as in every table and legend):

| arm | scheme | what |
| --- | --- | --- |
| ``cublas_bf16`` | W16A16 | ``torch.mm`` on bf16 weights |
| ``gemv_w8a16_fp8`` | W8A16 | fp8lab's mma.sync decode kernel, 64 tokens per CTA (any M) |
| ``triton_w8a16`` | W8A16 | Triton, e4m3 -> bf16 in the K loop, ``tl.dot`` (wgmma on Hopper) |
| ``cublaslt_blockwise`` | W8A8 | cuBLASLt blockwise FP8 (1x128 activations, 128x128 weights) |
| ``triton_blockwise`` | W8A8 | fp8lab's Triton blockwise FP8 kernel |

W8A8 arms are also reported with the activation quantisation added (``+quant`` rows: the
1x128 quantiser's time, measured separately, added to the GEMM's): a decode step has to
quantise its activations before an FP8 GEMM.

Every arm is checked against float64 (a few rows) before it is timed; timing is CUDA events
with L2 flushed (``bench.bench``), and the NVML sampler's SM clock over each measurement
turns TFLOP/s into TFLOP/s per GHz, the unit in which C7 compares kernels "at the same clock".
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from ..measure import harness
from ..facts import devices, shapes
from ..arms import peer_catalog, registry
from ..kernels import weight_only as wo
from ..measure.progress import progress as track

DEFAULT_SHAPE = "llama3-70b:o_proj"
DEFAULT_MS = (1, 64, 1024, 8192)
ARMS = ("cublas_bf16", "gemv_w8a16_fp8", "triton_w8a16", "cublaslt_blockwise", "triton_blockwise")
SCHEME = {arm: registry.scheme(arm) for arm in ARMS}     # the table's ``scheme`` column
W8A16_ARMS = ("gemv_w8a16_fp8", "triton_w8a16")
W8A8_ARMS = ("cublaslt_blockwise", "triton_blockwise")
#: other people's weight-only kernels at prefill M (issue 17): fp8lab.peers.sweeps.prefill
PEERS = peer_catalog.ids_for("11")
SEED_C7 = (0.95, 0.97)
SEED_C7_CUBLAS_OF_SPEC = 0.99
#: C7 bars: the seed's 95% with a little slack; below C7_KIND the weight-only cost is a different size
C7_SLACK, C7_KIND = 0.02, 0.80
C7_HOLDS = SEED_C7[0] - C7_SLACK
#: C7's cuBLAS half: within this of the seed's ~99% of the spec per GHz
C7_CUBLAS_TOL = 0.03
#: C9: "doubles the ceiling": the best W8A8 arm's TFLOP/s over the best 16-bit-activation arm's
#: at the largest M, holds from C9_HOLDS (2x less 10%), holds-in-kind from C9_KIND; at the smallest
#: M, W8A8 + its activation quantisation must take at least C9_DECODE x the best W8A16 time
C9_DOUBLE, C9_HOLDS, C9_KIND, C9_DECODE = 2.0, 1.8, 1.5, 0.95
#: dense BF16 tensor FLOP per clock per SM (FP32 accumulation), by chip, from the architecture
#: whitepapers (GH100 4096: the H100 whitepaper's 989.4 TFLOPS on 132 SMs at 1830 MHz; GA100
#: 2048; GeForce GA102 / AD102 / GB202 512 with FP32 accumulation; AD104 / AD102 data-centre 1024;
#: GA102's 512 x 82 SMs x 1.695 GHz is the seed's 71 TFLOPS on the 3090). The datasheet's BF16 figure over SMs x this is the clock the
#: datasheet assumed: 989.5 TFLOP/s / (132 x 4096) = 1.83 GHz on the H200, not its 1.98 GHz boost.
BF16_FLOP_PER_CLK_SM = {"h100": 4096, "h200": 4096, "a100": 2048, "rtx-3090": 512, "rtx-4090": 512,
                        "rtx-5090": 512, "l4": 1024, "l40s": 1024}
#: the seed's subject for C7: Marlin, a peer arm (issue 17) whose id starts so
MARLIN_PREFIX = "peer_marlin"
MARLIN_NOT_RUN = ("Marlin not measured in this run: unpack the original Marlin's source (python "
                  "scripts/peers_offline.py --sources; make run builds it) and re-run this notebook "
                  "(peer arms starting 'peer_marlin')")


def spec_per_ghz(spec) -> tuple[float, float]:
    """(BF16 TFLOP/s per GHz of SM clock, the SM clock in GHz the datasheet's BF16 figure
    assumes) of a :class:`fp8lab.facts.devices.DeviceSpec`: SMs x BF16_FLOP_PER_CLK_SM / 1000, and the
    datasheet's BF16 TFLOP/s over that. (nan, nan) for a chip not in BF16_FLOP_PER_CLK_SM or
    without a BF16 figure."""
    per_clk = BF16_FLOP_PER_CLK_SM.get(getattr(spec, "key", None)) if spec is not None else None
    peak = spec.peak_flops("bf16") if spec is not None else None
    if not per_clk or not peak:
        return math.nan, math.nan
    per_ghz = spec.sms * per_clk / 1e3              # TFLOP/s per GHz
    return per_ghz, peak / 1e12 / per_ghz

COLUMNS = ["shape", "N", "K", "M", "arm", "scheme", "with_quant", "flop", "time_p20_s", "time_p50_s",
           "time_p80_s", "tflops_p20", "tflops_p50", "tflops_p80", "quant_time_s", "sm_mhz_median",
           "sm_mhz_min", "power_w_max", "tflops_per_ghz", "spec_tflops_per_ghz", "check_relerr", "config",
           "timing_method", "n_samples", "clock_source", "clock_note"]


def _quantiser(K: int):
    """The fastest 1x128 activation quantiser fp8lab has that works here: (name, fn(x) -> (q,
    s M-major)). The CUDA warp-per-group quantiser if it builds and agrees with the torch
    reference on a probe, else the reference itself."""
    import torch

    from ..kernels import baselines

    def ref(x):
        a, s = baselines.quant_act_reference(x)
        return a, s.t().contiguous().t()

    try:
        from ..kernels import quant_act

        def fast(x):
            return quant_act.quant_act(x, "quant_act_warp", scale_layout="m_major")

        probe = torch.randn(8, K, device="cuda").to(torch.bfloat16)
        (qa, sa), (qb, sb) = fast(probe), ref(probe)
        if torch.equal(qa.view(torch.uint8), qb.view(torch.uint8)) and torch.equal(sa, sb):
            return "quant_act_warp", fast
    except Exception:  # the CUDA quantiser is missing or does not build: the reference times
        pass
    return "quant_act_reference", ref


def measure_prefill(shape_name: str = DEFAULT_SHAPE, Ms: Sequence[int] = DEFAULT_MS,
                    arms: Sequence[str] = ARMS, *, rep_ms: float = 100, warmup_ms: float = 25,
                    check_rows: int = 4, seed: int = 0, sampler=None) -> pd.DataFrame:
    """One row per (M, arm), plus ``+quant`` rows for the W8A8 arms (see COLUMNS)."""
    import torch

    from ..kernels import baselines, triton_w8a16 as tw

    unknown = set(arms) - set(ARMS)
    if unknown:
        raise ValueError(f"unknown arms {sorted(unknown)}; known: {list(ARMS)}")
    for m in Ms:
        wo._pos_int("M", m)
    if not torch.cuda.is_available():
        raise RuntimeError("measure_prefill needs a CUDA device")
    sh = shapes.get(shape_name)
    N, K = sh.N, sh.K
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    spec = devices.spec_for(props.name)
    spec_per_ghz_ = spec_per_ghz(spec)[0]
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = 0.02 * torch.randn(N, K, device="cuda", generator=g)                     # (N, K) fp32

    # W16A16 and W8A16 operands
    w_bf16 = w.to(torch.bfloat16)
    grp = w.view(N, K // 128, 128)
    s_log = (grp.abs().amax(-1).clamp_min(1e-8) / 448.0).to(torch.bfloat16)     # (N, K/128) logical
    codes = (grp / s_log.float()[..., None]).to(torch.float8_e4m3fn).view(N, K).view(torch.uint8)
    s_np = s_log.float().cpu().numpy().astype(np.float64)
    pw = None
    if "gemv_w8a16_fp8" in arms:
        pw = wo.pack_weights("fp8", codes.cpu().numpy(), s_np, act="bf16").to("cuda")
    s_fold = tw.fold_scales(s_log)
    w8a16_ref = codes.view(torch.float8_e4m3fn).double() * s_log.double().repeat_interleave(128, 1)
    # W8A8 operands (128x128 weight blocks)
    b8, sb = baselines.quant_weight_reference(w_bf16)
    w8a8_ref = baselines.dequantize_weight(b8, sb, torch.float64)
    qname, quant = _quantiser(K)
    del w, grp

    rows = []

    def add(M, arm, timing, clk, err, config="", with_quant=False, quant_s=math.nan):
        flop = float(registry.count(arm, M=M, N=N, K=K).flops)
        t50 = timing.p50_s + (quant_s if with_quant else 0.0)
        t20 = timing.p20_s + (quant_s if with_quant else 0.0)
        t80 = timing.p80_s + (quant_s if with_quant else 0.0)
        mhz = clk.get("sm_mhz_median", math.nan)
        tf = flop / t50 / 1e12
        rows.append(dict(shape=shape_name, N=N, K=K, M=M, arm=arm + ("+quant" if with_quant else ""),
                         scheme=SCHEME[arm], with_quant=with_quant, flop=flop, time_p20_s=t20, time_p50_s=t50,
                         time_p80_s=t80, tflops_p20=flop / t80 / 1e12, tflops_p50=tf, tflops_p80=flop / t20 / 1e12,
                         quant_time_s=quant_s, tflops_per_ghz=tf / (mhz / 1e3) if mhz and mhz > 0 else math.nan,
                         spec_tflops_per_ghz=spec_per_ghz_, check_relerr=err, config=config,
                         timing_method=timing.method, n_samples=timing.n, **clk))

    def timed(fn):
        return harness.timed(fn, sampler=sampler, method="events", warmup_ms=warmup_ms, rep_ms=rep_ms)

    def checked(what, fn, ref):
        """One call (into its poisoned output, if it takes one): NaNs anywhere, the float64 rows."""
        return harness.require(f"{what} M={M}", fn(), ref)

    for M in track(Ms, desc="prefill sweep", unit="M values"):
        x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)    # (M, K) bf16
        r = slice(0, min(check_rows, M))
        xr = x[r].double()
        ref16 = xr @ w_bf16.double().t()
        ref8 = xr @ w8a16_ref.t()
        if "cublas_bf16" in arms:
            out = harness.poisoned((M, N))
            fn = lambda: torch.mm(x, w_bf16.t(), out=out)
            err = checked("cublas_bf16", fn, ref16)
            tm, clk = timed(fn)
            add(M, "cublas_bf16", tm, clk, err)
        if "gemv_w8a16_fp8" in arms:
            out = harness.poisoned((M, N))
            cfg = wo.launch_config(pw, M)
            fn = lambda: wo.gemv_w16(x, pw, splits=cfg["splits"], out=out)
            err = checked("gemv_w8a16_fp8", fn, ref8)
            tm, clk = timed(fn)
            add(M, "gemv_w8a16_fp8", tm, clk, err, config=f"grid {cfg['grid']}")
        if "triton_w8a16" in arms:
            # every tile Triton's autotuner would try at this M, each checked and timed here; the
            # fastest is kept (the autotuner's own pick, from do_bench on one operand set, can move
            # between runs: B7's lesson, notebook 06); a tile over the card's shared memory is
            # skipped, as the autotuner skips it
            tried, too_big = [], []
            for cfg in tw.candidate_tiles(M):
                out = harness.poisoned((M, N))
                fn = lambda cfg=cfg, out=out: tw.triton_w8a16(x, codes, s_fold, config=cfg, out=out)
                try:
                    err = checked(f"triton_w8a16 {tw.tile_text(cfg)}", fn, ref8)
                except Exception as e:  # noqa: BLE001 - only Triton's OutOfResources is a skip
                    if type(e).__name__ != "OutOfResources":
                        raise
                    too_big.append(tw.tile_text(cfg))
                    continue
                tm, clk = timed(fn)
                tried.append((tm.p50_s, tw.tile_text(cfg), tm, clk, err))
            if not tried:
                raise RuntimeError(f"triton_w8a16 M={M}: no tile fits this card ({', '.join(too_big)})")
            tried.sort(key=lambda t: t[0])
            _, text, tm, clk, err = tried[0]
            if len(tried) > 1:
                text += (f"; fastest of {len(tried)} tiles timed here (others "
                         + ", ".join(f"{t[0] * 1e6:.1f}" for t in tried[1:]) + " us)")
            if too_big:
                text += f"; over the shared memory: {', '.join(too_big)}"
            add(M, "triton_w8a16", tm, clk, err, config=text)
        if any(a in arms for a in W8A8_ARMS):
            a8, sa = quant(x)                          # (M, K) e4m3, (M, K/128) fp32 M-major
            qt, _ = timed(lambda: quant(x))
            ref_a8 = (a8[r].double() * sa[r].double().repeat_interleave(128, 1)) @ w8a8_ref.t()
            if "cublaslt_blockwise" in arms:
                ops = baselines.BlockwiseOperands(a8, sa, b8, sb)
                harness.poison_allocator((M, N))
                err = checked("cublaslt_blockwise", ops, ref_a8)
                tm, clk = timed(ops)
                add(M, "cublaslt_blockwise", tm, clk, err, config=f"pad {ops.padded_rows}")
                add(M, "cublaslt_blockwise", tm, clk, err, config=qname, with_quant=True, quant_s=qt.p50_s)
            if "triton_blockwise" in arms:
                from ..kernels import triton_blockwise as tb

                fn = lambda: tb.blockwise_fp8_gemm(a8, b8, sa, sb, variant="per_block")
                harness.poison_allocator((M, N))
                err = checked("triton_blockwise", fn, ref_a8)
                tm, clk = timed(fn)
                add(M, "triton_blockwise", tm, clk, err)
                add(M, "triton_blockwise", tm, clk, err, config=qname, with_quant=True, quant_s=qt.p50_s)
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.attrs["quantiser"] = qname
    return df


# --------------------------------------------------------------------------------------
# Tables and verdicts (CPU)
# --------------------------------------------------------------------------------------
def best_by_scheme(df: pd.DataFrame, with_quant: bool = False) -> pd.DataFrame:
    """Per (M, scheme): the fastest arm (p50). With ``with_quant`` the W8A8 scheme is judged by
    its ``+quant`` rows (GEMM + activation quantisation), else by the GEMM alone."""
    keep = (df["scheme"] != "W8A8") | (df["with_quant"] == with_quant)
    d = df[keep & ~((df["scheme"] != "W8A8") & df["with_quant"])]
    idx = d.groupby(["M", "scheme"])["time_p50_s"].idxmin()
    return d.loc[idx].sort_values(["M", "scheme"]).reset_index(drop=True)


def table_spec_per_ghz(df: pd.DataFrame) -> tuple[float, float]:
    """(spec BF16 TFLOP/s per GHz, the datasheet's clock in GHz) for a prefill table: derived
    with :func:`spec_per_ghz` from the device its metadata names (tables recorded before the
    derivation carried boost-clock figures in ``spec_tflops_per_ghz``), else that column."""
    name = (df.attrs.get("meta") or {}).get("device_name")
    spec = devices.spec_for(name) if isinstance(name, str) and name.strip() else None
    per_ghz, clk = spec_per_ghz(spec)
    if np.isfinite(per_ghz):
        return per_ghz, clk
    col = df["spec_tflops_per_ghz"].dropna() if "spec_tflops_per_ghz" in df else pd.Series(dtype=float)
    return (float(col.iloc[0]) if len(col) else math.nan), math.nan


def c7_table(df: pd.DataFrame, M: Optional[int] = None, arms: Optional[Sequence[str]] = None) -> dict:
    """C7 at the largest M: the best of ``arms`` (default the W8A16 arms) in TFLOP/s per GHz
    over cuBLAS BF16's, and cuBLAS per GHz over the spec sheet's (:func:`table_spec_per_ghz`)."""
    M = int(df["M"].max()) if M is None else M
    d = df[(df["M"] == M) & (~df["with_quant"].astype(bool))]
    cb = d[d["arm"] == "cublas_bf16"]
    w = d[d["arm"].isin(W8A16_ARMS if arms is None else arms)]
    if cb.empty or w.empty:
        return {}
    best = w.loc[w["tflops_per_ghz"].idxmax()] if w["tflops_per_ghz"].notna().any() else w.iloc[0]
    c = cb.iloc[0]
    spec, spec_clk = table_spec_per_ghz(df)
    return dict(M=M, best_w8a16=best["arm"], w8a16_per_ghz=float(best["tflops_per_ghz"]),
                cublas_per_ghz=float(c["tflops_per_ghz"]), ratio=float(best["tflops_per_ghz"] / c["tflops_per_ghz"]),
                ratio_raw=float(best["tflops_p50"] / c["tflops_p50"]), spec_per_ghz=spec, spec_clock_ghz=spec_clk,
                cublas_of_spec=float(c["tflops_per_ghz"] / spec),
                w8a16_mhz=float(best["sm_mhz_median"]), cublas_mhz=float(c["sm_mhz_median"]))


def _v(claim, verdict, figure, reason="", *, subject, rule, variant=""):
    from ..report import claims

    return claims.Verdict(claim=claim, verdict=verdict, our_figure=figure, reason=reason, subject=subject,
                          rule=rule, variant=variant)


C7_RULE = (f"holds if the best weight-only GEMM at the largest M reaches >= {C7_HOLDS:.0%} of cuBLAS BF16's "
           f"TFLOP/s per GHz (seed {SEED_C7[0]:.0%}-{SEED_C7[1]:.0%}, less {C7_SLACK:.0%}); holds-in-kind >= "
           f"{C7_KIND:.0%}; differs below")


def _c7_one(df, arms, subject, variant=""):
    t = c7_table(df, arms=arms)
    if not t:
        if subject == "seed":
            return _v("C7", "not-run", "Marlin not measured", MARLIN_NOT_RUN, subject=subject, rule=C7_RULE, variant=variant)
        return _v("C7", "not-run", "no W8A16 and cuBLAS rows at the same M", "the sweep lacked an arm",
                  subject=subject, rule=C7_RULE, variant=variant)
    if not np.isfinite(t["ratio"]):
        return _v("C7", "not-run", f"M={t['M']}: no SM clock samples", "NVML clocks were not readable",
                  subject=subject, rule=C7_RULE, variant=variant)
    fig = (f"M={t['M']}: {t['best_w8a16']} {t['w8a16_per_ghz']:.0f} vs cuBLAS BF16 {t['cublas_per_ghz']:.0f} "
           f"TFLOP/s per GHz = {t['ratio']:.0%} ({t['ratio_raw']:.0%} unnormalised; clocks {t['w8a16_mhz']:.0f} / "
           f"{t['cublas_mhz']:.0f} MHz)")
    if t["ratio"] >= C7_HOLDS:
        return _v("C7", "holds", fig, subject=subject, rule=C7_RULE, variant=variant)
    why = (f"{t['best_w8a16']} at {t['ratio']:.0%} of cuBLAS BF16 per GHz: a gap of "
           f"{1 - t['ratio']:.0%} (seed: 3-5%)")
    return _v("C7", "holds-in-kind" if t["ratio"] >= C7_KIND else "differs", fig, why, subject=subject, rule=C7_RULE, variant=variant)


def c7_cublas_verdict(df: pd.DataFrame):
    """C7's second half (seed: cuBLAS BF16 reaches ~99% of the spec's TFLOP/s per GHz): a
    ``seed`` row (cuBLAS is what the seed measured), variant 'cuBLAS vs spec'. The spec per GHz
    is SMs x dense BF16 FLOP per clock (:func:`spec_per_ghz`), i.e. the datasheet figure at the
    clock it assumes, not at the boost clock."""
    rule = (f"holds if cuBLAS BF16 at the largest M reaches >= {SEED_C7_CUBLAS_OF_SPEC - C7_CUBLAS_TOL:.0%} of the "
            f"spec's TFLOP/s per GHz (SMs x dense BF16 FLOP/clk; seed ~{SEED_C7_CUBLAS_OF_SPEC:.0%}); differs below")
    t = c7_table(df)
    kw = dict(subject="seed", rule=rule, variant="cuBLAS vs spec")
    if not t or not np.isfinite(t["cublas_of_spec"]):
        return _v("C7", "not-run", "no cuBLAS rows with a clock and a spec per GHz",
                  "no cuBLAS BF16 row, no SM clock samples, or a device without a BF16 FLOP/clk entry", **kw)
    fig = (f"M={t['M']}: cuBLAS BF16 {t['cublas_per_ghz']:.0f} of the spec's {t['spec_per_ghz']:.0f} TFLOP/s per GHz "
           f"= {t['cublas_of_spec']:.0%} (at {t['cublas_mhz']:.0f} MHz; the datasheet assumes "
           f"{t['spec_clock_ghz'] * 1e3:.0f} MHz)")
    if t["cublas_of_spec"] >= SEED_C7_CUBLAS_OF_SPEC - C7_CUBLAS_TOL:
        return _v("C7", "holds", fig, **kw)
    return _v("C7", "differs", fig, f"cuBLAS BF16 at {t['cublas_of_spec']:.0%} of the spec per GHz (seed: "
              f"~{SEED_C7_CUBLAS_OF_SPEC:.0%})", **kw)


def c7_verdicts(df: pd.DataFrame) -> list:
    """C7: at M = 8192 the weight-only GEMM runs at 95-97% of cuBLAS BF16 at the same clock
    (TFLOP/s per GHz of the NVML-sampled SM clock). Rows: ``analogue`` (fp8lab's W8A16 arms),
    ``seed`` (Marlin, ``peer_marlin*`` arms; not-run when absent) and the cuBLAS-vs-spec half
    (:func:`c7_cublas_verdict`)."""
    marlin = sorted(a for a in df["arm"].astype(str).unique() if a.startswith(MARLIN_PREFIX))
    return [_c7_one(df, W8A16_ARMS, "analogue"), _c7_one(df, marlin, "seed", "original Marlin" if marlin else ""),
            c7_cublas_verdict(df)]


def c9_verdict(df: pd.DataFrame):
    """C9 (seed: derived, no system measured): W8A8 doubles the compute ceiling of prefill; at
    decode quantising activations does not help. An ``analogue`` row over the best measured arm
    of each scheme (fp8lab's and cuBLAS / cuBLASLt; the figure names them).

    holds: at the largest M the best W8A8 arm reaches >= C9_HOLDS x the best BF16 / W8A16
    TFLOP/s, and at the smallest M the best W8A8 (+quant) takes >= C9_DECODE x the best W8A16
    time; holds-in-kind: the prefill gain is >= C9_KIND and the decode half holds; differs
    otherwise."""
    rule = (f"holds if the best W8A8 arm's TFLOP/s at the largest M is >= {C9_HOLDS}x the best 16-bit-activation "
            f"arm's (seed: {C9_DOUBLE:.0f}x ceiling) and at the smallest M W8A8 + activation quantisation takes >= "
            f"{C9_DECODE}x the best W8A16 time; holds-in-kind if the gain is >= {C9_KIND}x and the decode half "
            "holds; differs otherwise")
    Mmax, Mmin = int(df["M"].max()), int(df["M"].min())
    wq = df["with_quant"].astype(bool)
    big = df[(df["M"] == Mmax) & ~wq]
    w8 = big[big["scheme"] == "W8A8"]
    w16 = big[big["scheme"] != "W8A8"]
    small = df[df["M"] == Mmin]
    a8q = small[small["with_quant"].astype(bool)]
    a16 = small[small["scheme"] == "W8A16"]
    if w8.empty or w16.empty or a8q.empty or a16.empty:
        return _v("C9", "not-run", "W8A8 or W8A16 rows missing", "the sweep lacked W8A8 or W8A16 arms",
                  subject="analogue", rule=rule)
    b8, b16 = w8.loc[w8["tflops_p50"].idxmax()], w16.loc[w16["tflops_p50"].idxmax()]
    q8, q16 = a8q.loc[a8q["time_p50_s"].idxmin()], a16.loc[a16["time_p50_s"].idxmin()]
    gain = float(b8["tflops_p50"] / b16["tflops_p50"])
    dec = float(q8["time_p50_s"] / q16["time_p50_s"])          # > 1: W8A8 + quant slower at decode
    fig = (f"M={Mmax}: best W8A8 {b8['arm']} {b8['tflops_p50']:.0f} vs best 16-bit-activation {b16['arm']} "
           f"{b16['tflops_p50']:.0f} TFLOP/s ({gain:.2f}x); M={Mmin}: {q8['arm']} takes {dec:.2f}x the time of "
           f"{q16['arm']}")
    why = []
    if gain < C9_HOLDS:
        why.append(f"W8A8 gains {gain:.2f}x at M={Mmax} (< {C9_HOLDS}x)")
    if dec < C9_DECODE:
        why.append(f"W8A8 + quantisation is faster than W8A16 at M={Mmin} ({dec:.2f}x its time)")
    if not why:
        return _v("C9", "holds", fig, subject="analogue", rule=rule)
    verdict = "holds-in-kind" if gain >= C9_KIND and dec >= C9_DECODE else "differs"
    return _v("C9", verdict, fig, "; ".join(why), subject="analogue", rule=rule)
