"""Compute headroom of weight-only decode without touching the clocks (notebook 10; claim C6).

Seed 003 locks the SM clock and watches M = 1 bandwidth: flat down to 1200 MHz, then the 4-bit
formats lose 15-16% at 900 MHz (cuBLAS BF16: -16% at 1200, -36% at 900). A shared H200 must not
have its clocks locked, so this module emulates a lower clock instead: the EXTRA_ALU kernels
(gemv_w16.cuh, fp8 / bf16 / M <= 8) issue k extra dependent integer instructions per weight
element while reading the same bytes, which eats issue slots as a lower clock would.

Equivalence (seed 003's issue-slot model, fp8lab.facts.roofline.issue_slot_utilisation): a kernel
needs I instructions per element; at clock f and bandwidth B (elements/s proportional to B) it
uses a fraction u = I B / (c f) of the issue slots (c: SMs x schedulers x 32). The k-kernel
(I_k) at clock f asks for as many slots per byte as the k = 0 kernel (I_0) at clock
f_eq = f I_0 / I_k. From measured utilisations, I_k / I_0 = (u_k / B_k) / (u_0 / B_0), so

    f_eq = f * (u_0 / B_0) / (u_k / B_k)          (= f u_0 / u_k while the bandwidth is flat)

:func:`equivalent_clock_mhz` computes it; without ncu :func:`equivalent_clock_from_instr` uses
the static SASS instruction counts per element instead (I_k = I_0 + k). The emulation is only
"in kind": a lower clock also slows the loads' address math, the L2 / shared-memory path and
the mma, which the extra ALU work does not.

:func:`measure_headroom` runs the sweep (GPU, torch imported lazily), :func:`profile_headroom`
gets ncu's issue-active %, :func:`find_knee` and :func:`c6_verdict` are plain functions of the
table, tested on synthetic data.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from ..measure import bench, clocks, harness
from ..facts import roofline as rl
from ..arms import registry
from ..kernels import weight_only as wo
from ..measure.progress import progress as track

DEFAULT_SHAPE = "llama3-70b:down_proj"
DEFAULT_EXTRA_ALU = wo.EXTRA_ALU_LEVELS
CUBLAS = "cublas_bf16"
ARM = "gemv_w8a16_fp8_xalu"
#: C6's "unchanged": the seed's Marlin bandwidth stayed within 1% at >= 1200 MHz; a point counts as
#: unchanged while it is within this of k = 0 (or of unlocked)
FLAT_BAR = 0.02
#: the sweep resolves FLAT_BAR only if its own run-to-run spread (:func:`sweep_noise`) is at most
#: this fraction of it
NOISE_OF_BAR = 0.5
KNEE_DROP = FLAT_BAR        # the knee threshold (the grey band of the figures)
#: seed 003 section 4.3 (RTX 3090, locked SM clock, M = 1): bandwidth change vs unlocked
SEED_C6_HEADROOM_MHZ = 1200.0
SEED_C6_TABLE = pd.DataFrame([
    dict(sm_mhz=1200.0, arm="4-bit (nvfp4, int4)", change=0.0),
    dict(sm_mhz=900.0, arm="4-bit (nvfp4, int4)", change=-0.155),
    dict(sm_mhz=1200.0, arm=CUBLAS, change=-0.16),
    dict(sm_mhz=900.0, arm=CUBLAS, change=-0.36),
])
NCU_ENV = "FP8LAB_HEADROOM_NCU"
_XALU_MANGLED = re.compile(r"gemv_w8a16_fp8_xaluILb\dELi\d+ELi(\d+)E")

COLUMNS = ["shape", "N", "K", "M", "arm", "extra_alu", "lock_mhz", "lock_status", "stream_bytes",
           "time_p20_s", "time_p50_s", "time_p80_s", "bw_p20", "bw_p50", "bw_p80", "check_relerr",
           "rotation_sets", "n_samples", "sm_mhz_median", "sm_mhz_min", "sm_mhz_max", "mem_mhz_median",
           "power_w_max", "clock_source", "clock_note", "repeat"]


def equivalent_clock_mhz(issue_util, base_issue_util: float, base_clock_mhz: float, *,
                         bw=None, base_bw: Optional[float] = None):
    """The SM clock (MHz) at which the k = 0 kernel would be as short of issue slots as a
    kernel that uses fraction ``issue_util`` of them at ``base_clock_mhz``:
    f * (u_0 / B_0) / (u / B); with no bandwidths given, f * u_0 / u (flat bandwidth).
    Utilisations are fractions or percentages (the same unit for both); arrays work."""
    u0 = rl.positive("base_issue_util", base_issue_util)
    f = rl.positive("base_clock_mhz", base_clock_mhz)
    ratio = rl.positive_array("issue_util", issue_util) / u0
    if (bw is None) != (base_bw is None):
        raise ValueError("give both bw and base_bw, or neither")
    if bw is not None:
        ratio = ratio * rl.positive("base_bw", base_bw) / rl.positive_array("bw", bw)
    return rl.scalar_or_array(f / ratio)


def equivalent_clock_from_instr(instr_per_element, base_instr_per_element: float, base_clock_mhz: float):
    """f * I_0 / I_k from instructions per weight element (static SASS or ncu counts)."""
    i0 = rl.positive("base_instr_per_element", base_instr_per_element)
    f = rl.positive("base_clock_mhz", base_clock_mhz)
    return rl.scalar_or_array(f * i0 / rl.positive_array("instr_per_element", instr_per_element))


def _sweep_rows(df: pd.DataFrame, bw: str) -> pd.DataFrame:
    need = {"extra_alu", bw}
    if not need <= set(df.columns):
        raise ValueError(f"the table needs columns {sorted(need)}, has {sorted(df.columns)}")
    d = df[df["extra_alu"].notna()]
    if "arm" in d:
        d = d[d["arm"] == ARM]
    if "lock_status" in d:
        d = d[d["lock_status"].fillna("").isin(("", "not requested"))]
    if "repeat" in d:          # k = 0 timed again at the end: the noise estimate, not a sweep point
        d = d[d["repeat"].fillna(0) == 0]
    d = d.sort_values("extra_alu")
    if d.empty or not (d["extra_alu"] == 0).any():
        raise ValueError("the sweep needs a k = 0 (extra_alu == 0) row as its baseline")
    return d


def find_knee(df: pd.DataFrame, *, drop: float = KNEE_DROP, bw: str = "bw_p50") -> dict:
    """The first k of the unlocked sweep whose bandwidth is more than ``drop`` below k = 0's.

    Returns dict(knee_extra_alu (None if no k drops), knee_clock_mhz (its ``eq_clock_mhz`` if
    the table has it), knee_clock_interp_mhz (the equivalent clock where the change crosses
    -``drop``, linear between the last flat point and the knee), last_flat_extra_alu / last_flat_clock_mhz (the largest k before the
    knee), base_bw, change (per k, relative to k = 0), flat_until_knee)."""
    if not 0 < drop < 1:
        raise ValueError(f"drop must be in (0, 1), got {drop}")
    d = _sweep_rows(df, bw)
    base = float(d.loc[d["extra_alu"] == 0, bw].iloc[0])
    change = d[bw].to_numpy(float) / base - 1.0
    ks = d["extra_alu"].to_numpy(float)
    eq_mhz = d["eq_clock_mhz"].to_numpy(float) if "eq_clock_mhz" in d else np.full(len(d), np.nan)
    below = np.nonzero(change < -drop)[0]
    i = int(below[0]) if below.size else None
    last = (i - 1) if i is not None else len(d) - 1
    interp = None
    if i is not None and i > 0 and np.isfinite(eq_mhz[[i - 1, i]]).all():
        # where the line between the last flat point and the first dropped one crosses -drop
        c0, c1 = change[i - 1], change[i]
        t = (-drop - c0) / (c1 - c0)
        interp = float(eq_mhz[i - 1] + t * (eq_mhz[i] - eq_mhz[i - 1]))
    return dict(
        knee_extra_alu=None if i is None else int(ks[i]),
        knee_clock_mhz=None if i is None or not np.isfinite(eq_mhz[i]) else float(eq_mhz[i]),
        knee_clock_interp_mhz=interp,
        last_flat_extra_alu=int(ks[last]) if last >= 0 else None,
        last_flat_clock_mhz=float(eq_mhz[last]) if last >= 0 and np.isfinite(eq_mhz[last]) else None,
        base_bw=base, change=dict(zip(ks.astype(int).tolist(), change.tolist())),
        flat_until_knee=bool(np.all(np.abs(change[: last + 1]) <= drop)),
    )


def add_equivalent_clock(df: pd.DataFrame, *, static: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """``eq_clock_mhz`` and ``eq_source`` on the sweep rows: from ncu's issue-active % where
    the table has it (``issue_active_pct``), else from static SASS instructions per element
    (``static``: :func:`fp8lab.experiments.gemv_sass.xalu_sass_counts`). The base clock is the
    NVML median SM clock of the k = 0 row."""
    out = df.copy()
    out["eq_clock_mhz"] = np.nan
    out["eq_source"] = ""
    d = _sweep_rows(out, "bw_p50")
    b0 = d[d["extra_alu"] == 0].iloc[0]
    f0 = float(b0["sm_mhz_median"])
    if not (f0 > 0):
        return out
    if "issue_active_pct" in d and d["issue_active_pct"].notna().all() and b0["issue_active_pct"] > 0:
        out.loc[d.index, "eq_clock_mhz"] = equivalent_clock_mhz(
            d["issue_active_pct"].to_numpy(float), float(b0["issue_active_pct"]), f0,
            bw=d["bw_p50"].to_numpy(float), base_bw=float(b0["bw_p50"]))
        out.loc[d.index, "eq_source"] = "ncu issue-active"
    elif static is not None and not static.empty:
        s = static[static["extra_alu"].notna()].set_index("extra_alu")["per_element"]
        ipe = d["extra_alu"].map(lambda k: s.get(float(k), np.nan)).to_numpy(float)
        if np.isfinite(ipe).all():
            out.loc[d.index, "eq_clock_mhz"] = equivalent_clock_from_instr(ipe, float(s.loc[0.0]), f0)
            out.loc[d.index, "eq_source"] = "static SASS instr./element"
    return out


def change_at_clock(df: pd.DataFrame, mhz: float, *, bw: str = "bw_p50") -> Optional[float]:
    """Bandwidth change vs k = 0 at equivalent clock ``mhz``, interpolated linearly in the
    clock between sweep points; None outside the swept range."""
    d = _sweep_rows(df, bw)
    if "eq_clock_mhz" not in d or d["eq_clock_mhz"].isna().any():
        return None
    base = float(d.loc[d["extra_alu"] == 0, bw].iloc[0])
    x = d["eq_clock_mhz"].to_numpy(float)
    y = d[bw].to_numpy(float) / base - 1.0
    o = np.argsort(x)
    x, y = x[o], y[o]
    if not x[0] <= mhz <= x[-1]:
        return None
    return float(np.interp(mhz, x, y))


LOCK_NOT_RUN = "locked-clock sweep not run (clock locking not requested / not permitted on this machine)"
LOCK_HOW = ("clock locking is opt-in: pass lock_clocks (SM MHz) on a machine you own, never on a shared GPU; "
            "fp8lab never changes clocks otherwise")
SEED_C6_FIGURE = ">= 1200 MHz unchanged; 900 MHz: 4-bit -15-16%, cuBLAS BF16 -16% at 1200 / -36% at 900"
EMULATED, LOCKED = "emulated clock", "locked clock"


def sweep_noise(df: pd.DataFrame, *, bw: str = "bw_p50") -> dict:
    """The sweep's own run-to-run spread, relative: ``spread`` = the largest (p80 - p20) / 2 /
    p50 of the sweep points, ``repeat`` = |k = 0 timed again at the end / k = 0 - 1| (NaN
    without a repeat row), ``noise`` = the larger of the two."""
    d = _sweep_rows(df, bw)
    spread = float(((d["bw_p80"] - d["bw_p20"]) / 2 / d[bw]).max()) if {"bw_p20", "bw_p80"} <= set(d) else math.nan
    rep = math.nan
    if "repeat" in df:
        r = df[(df["repeat"].fillna(0) > 0) & (df["extra_alu"] == 0)]
        if "arm" in r:
            r = r[r["arm"] == ARM]
        if len(r):
            rep = float(abs(r[bw].iloc[-1] / d.loc[d["extra_alu"] == 0, bw].iloc[0] - 1))
    vals = [v for v in (spread, rep) if np.isfinite(v)]
    return dict(spread=spread, repeat=rep, noise=max(vals) if vals else math.nan)


def c6_verdict(df: pd.DataFrame, *, locked: str = LOCK_NOT_RUN, bar: float = FLAT_BAR):
    """C6 from the emulated sweep: an ``analogue`` row (fp8lab's fp8 kernel) with variant
    'emulated clock' (extra issue work stands in for a lower clock).

    holds-in-kind: the bandwidth stays within ``bar`` of k = 0 at every equivalent clock >= the
    seed's 1200 MHz (the knee, interpolated where the change crosses -bar, is below 1200 MHz, or
    the sweep is flat down to a clock below 1200 MHz); differs: the knee is at or above 1200 MHz;
    not-run: no sweep, no equivalent clock, a sweep that never reaches 1200 MHz-equivalent, or a
    run-to-run spread above NOISE_OF_BAR x bar (the sweep cannot resolve the bar)."""
    from ..report import claims

    rule = (f"emulated clocks: holds-in-kind if M=1 bandwidth stays within {bar:.0%} of k=0 at every "
            f"equivalent clock >= {SEED_C6_HEADROOM_MHZ:.0f} MHz (knee interpolated at -{bar:.0%}); differs if "
            f"the knee is at >= {SEED_C6_HEADROOM_MHZ:.0f} MHz; not-run if the run-to-run spread exceeds "
            f"{NOISE_OF_BAR * bar:.1%}")

    def V(verdict, fig, reason):
        return claims.Verdict("C6", verdict, fig, reason, seed_figure=SEED_C6_FIGURE, seed_hardware="RTX 3090",
                              subject="analogue", variant=EMULATED, rule=rule)
    try:
        d = _sweep_rows(df, "bw_p50")
    except ValueError:
        return V("not-run", "no EXTRA_ALU sweep measured", "no emulated-clock sweep in this run")
    if "eq_clock_mhz" not in d or d["eq_clock_mhz"].isna().any():
        return V("not-run", "EXTRA_ALU sweep without an equivalent clock",
                 "neither ncu issue-active % nor static SASS counts to map k to a clock")
    knee = find_knee(df, drop=bar)
    noise = sweep_noise(df)
    pts = ", ".join(f"k={k}: {c:+.1%} @ {f:.0f} MHz-eq" for (k, c), f in
                    zip(knee["change"].items(), d["eq_clock_mhz"].to_numpy(float)))
    at900 = change_at_clock(df, 900.0)
    fig = (f"fp8 M=1, clocks emulated by EXTRA_ALU (not locked): {pts}"
           + (f"; {at900:+.1%} at 900 MHz-eq" if at900 is not None else "")
           + (f"; run-to-run spread {noise['noise']:.2%}" if np.isfinite(noise["noise"]) else ""))
    if np.isfinite(noise["noise"]) and noise["noise"] > NOISE_OF_BAR * bar:
        return V("not-run", fig, f"run-to-run spread {noise['noise']:.1%} > {NOISE_OF_BAR * bar:.1%}: the sweep "
                 f"cannot resolve a {bar:.0%} bar")
    lowest = float(d["eq_clock_mhz"].min())
    if knee["knee_extra_alu"] is None:
        if lowest >= SEED_C6_HEADROOM_MHZ:
            return V("not-run", fig, f"flat within {bar:.0%} but the sweep only reached {lowest:.0f} MHz-equivalent "
                     f"(>= {SEED_C6_HEADROOM_MHZ:.0f}): add larger k")
        return V("holds-in-kind", fig, f"within {bar:.0%} down to {lowest:.0f} MHz-equivalent; emulated by extra "
                 "issue work, not a lower clock")
    kc = knee["knee_clock_interp_mhz"] if knee["knee_clock_interp_mhz"] is not None else knee["knee_clock_mhz"]
    if kc < SEED_C6_HEADROOM_MHZ:
        return V("holds-in-kind", fig, f"first {bar:.0%} drop at {kc:.0f} MHz-equivalent (k={knee['knee_extra_alu']}), "
                 f"below the seed's {SEED_C6_HEADROOM_MHZ:.0f} MHz; emulated by extra issue work, not a lower clock")
    return V("differs", fig, f"bandwidth {knee['change'][knee['knee_extra_alu']]:+.1%} at k={knee['knee_extra_alu']}; "
             f"it crosses -{bar:.0%} at {kc:.0f} MHz-equivalent (interpolated), >= the seed's "
             f"{SEED_C6_HEADROOM_MHZ:.0f} MHz")


def c6_verdicts(df: pd.DataFrame, locked_df: Optional[pd.DataFrame] = None, *, locked: str = LOCK_NOT_RUN) -> list:
    """C6's three rows: the emulated sweep (:func:`c6_verdict`), the locked-clock sweep of
    fp8lab's kernels (:func:`c6_locked_verdict` where clocks were really locked, else not-run
    saying why (``locked``) and how a user gets it), and the same for Marlin, the seed's subject
    (:func:`c6_locked_seed_verdict`)."""
    from ..report import claims

    rows = [c6_verdict(df)]
    lv = c6_locked_verdict(locked_df) if locked_df is not None else None
    if lv is None:
        lv = claims.Verdict("C6", "not-run", "no SM clock locked", f"{locked}; {LOCK_HOW}",
                            seed_figure=SEED_C6_FIGURE, seed_hardware="RTX 3090", subject="analogue",
                            variant=LOCKED, rule=_locked_rule(FLAT_BAR))
    return rows + [lv, c6_locked_seed_verdict(locked_df, locked=locked)]


# --------------------------------------------------------------------------------------
# GPU side
# --------------------------------------------------------------------------------------
def measure_headroom(shape_name: str = DEFAULT_SHAPE, extra_alu: Sequence[int] = DEFAULT_EXTRA_ALU, *,
                     cublas: bool = True, rep_ms: float = 40, seed: int = 0, check_m: int = 1,
                     sampler=None, lock_mhz: Optional[float] = None, lock_status: str = "not requested"
                     ) -> pd.DataFrame:
    """Time the EXTRA_ALU fp8 kernel at M = 1 for every k (and cuBLAS BF16 as a reference,
    extra_alu NaN), rotating weights over > L2, each call in a CUDA graph. Every k is first
    checked bit for bit against k = 0 (the chain must be the identity) and k = 0 against
    float64. ``lock_mhz`` / ``lock_status`` only label the rows (the caller holds the lock)."""
    import torch

    ks = [int(k) for k in extra_alu]
    for k in ks:
        if k not in wo.EXTRA_ALU_LEVELS:
            raise ValueError(f"extra_alu values must be in {wo.EXTRA_ALU_LEVELS}, got {k}")
    if 0 not in ks:
        raise ValueError("extra_alu must include 0 (the baseline)")
    if not torch.cuda.is_available():
        raise RuntimeError("measure_headroom needs a CUDA device")
    from .decode import _shape

    sh = _shape(shape_name)
    N, K, M = sh.N, sh.K, 1
    l2 = bench.device_l2_bytes()
    pw_host, info = wo.random_weight("fp8", N, K, act="bf16", seed=seed)
    pw = pw_host.to("cuda")
    del pw_host
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    x = torch.randn(max(check_m, M), K, device="cuda", generator=g).to(torch.bfloat16)
    W = wo.dequantize_torch("fp8", info["codes"], info["scales"], info["global_scale"])
    ref = x.double() @ W.t()
    del W, info
    outs0 = harness.poisoned((x.shape[0], N))
    wo.gemv_w16(x, pw, out=outs0, extra_alu=0)
    err = harness.require(f"EXTRA_ALU k=0 {N}x{K}", outs0, ref)
    # At this shape the kernel splits K and sums the partials in arrival order, so two
    # calls may differ in the last bit (seen on the H200, 2026-11-29): compare against the
    # float64 reference and against k=0 with a tolerance. Bit-exactness of every k is
    # tested where the sum is one CTA's (tests/test_headroom_gpu.py).
    harness.require("EXTRA_ALU k=0 against the regular fp8 kernel", wo.gemv_w16(x, pw), outs0.double(), bound=1e-3)
    for k in track(ks, desc="headroom check", unit="ALU levels"):
        o = harness.poisoned(outs0.shape)
        wo.gemv_w16(x, pw, out=o, extra_alu=k)
        harness.require(f"EXTRA_ALU k={k}", o, ref)
        harness.require(f"EXTRA_ALU k={k} against k=0 (beyond the split-K reduction order)", o, outs0.double(),
                        bound=1e-3)
    stream = registry.count("gemv_w8a16_fp8_xalu", N=N, K=K).weight_bytes
    sets = harness.rotation_copies(pw, stream, l2, wo.PackedWeight.clone)
    x1 = x[:M].contiguous()
    splits = wo.launch_config(pw, M)["splits"]
    wo.workspace(torch.device("cuda"), M * N, wo.grid_x("fp8", N, M))
    rows = []

    def timed(fn, args):
        return harness.timed(fn, args, sampler=sampler, method="graph", rep_ms=rep_ms)

    def row(arm, k, timing, clk, nbytes, e, repeat=0):
        r = timing.rate(nbytes)
        return dict(shape=shape_name, N=N, K=K, M=M, arm=arm, extra_alu=k, lock_mhz=lock_mhz, repeat=repeat,
                    lock_status=lock_status, stream_bytes=nbytes, bw_p20=r["p20"], bw_p50=r["p50"],
                    bw_p80=r["p80"], check_relerr=e, **harness.timing_columns(timing, clk))

    # k = 0 once more after the sweep (``repeat`` = 1): its distance from the first k = 0 is the
    # run-to-run spread C6's 2% bar is judged against (sweep_noise)
    for k, rep in track([(k, 0) for k in ks] + [(0, 1)], desc="headroom sweep", unit="ALU levels"):
        outs = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in sets]
        timing, clk = timed(lambda p, o, k=k: wo.gemv_w16(x1, p, splits=splits, out=o, extra_alu=k),
                            list(zip(sets, outs)))
        rows.append(row(ARM, k, timing, clk, stream, err, repeat=rep))
    del sets, outs
    torch.cuda.empty_cache()
    if cublas:
        w = (0.02 * torch.randn(N, K, device="cuda", generator=g)).to(torch.bfloat16)   # (N, K) bf16
        e = harness.require(f"{CUBLAS} {N}x{K}", torch.mm(x, w.t()), x.double() @ w.double().t())
        ws = harness.rotation_copies(w, 2 * N * K, l2)
        outs = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in ws]
        timing, clk = timed(lambda w_, o: torch.mm(x1, w_.t(), out=o), list(zip(ws, outs)))
        rows.append(row(CUBLAS, math.nan, timing, clk, registry.count(CUBLAS, N=N, K=K).weight_bytes, e))
        del ws, outs
        torch.cuda.empty_cache()
    return pd.DataFrame(rows, columns=COLUMNS)


def ncu_workload() -> None:
    """The profiled program: each EXTRA_ALU level once at M = 1 between cudaProfilerStart / Stop
    (after a warm-up). Configuration from $FP8LAB_HEADROOM_NCU (JSON: N, K, levels)."""
    import torch

    cfg = json.loads(os.environ[NCU_ENV])
    N, K = cfg["N"], cfg["K"]
    pw_host, _ = wo.random_weight("fp8", N, K, act="bf16", seed=cfg.get("seed", 0), keep_codes=False)
    pw = pw_host.to("cuda")
    x = torch.randn(1, K, device="cuda").to(torch.bfloat16)
    from ..toolchain import profile

    profile.profiled_once_each([lambda k=k: wo.gemv_w16(x, pw, extra_alu=k) for k in cfg["levels"]])


def profile_headroom(shape_name: str, out: Path, *, extra_alu: Sequence[int] = DEFAULT_EXTRA_ALU,
                     seed: int = 0, timeout: float = 600) -> pd.DataFrame:
    """ncu over the EXTRA_ALU levels at M = 1: one row per k with ``issue_active_pct``,
    ``dram_pct``, ``ncu_sm_clock_mhz``, ``ncu_duration_s`` (clocks not locked by ncu)."""
    from ..toolchain import profile
    from .decode import _shape

    sh = _shape(shape_name)
    env = dict(os.environ)
    levels = [int(k) for k in extra_alu]
    env[NCU_ENV] = json.dumps(dict(N=sh.N, K=sh.K, levels=levels, seed=seed))
    rep = profile.profile("fp8lab.experiments.headroom:ncu_workload", out, timeout=timeout, env=env,
                          extra=["--profile-from-start", "off"])
    return ncu_rows(profile.read_report(rep), levels)


def ncu_rows(kernels: pd.DataFrame, levels: Sequence[int]) -> pd.DataFrame:
    """k of each profiled EXTRA_ALU kernel from its mangled name (else launch order)."""
    k = kernels[kernels["kernel"].astype(str).str.contains(ARM)].reset_index(drop=True)
    if len(k) != len(levels):
        raise RuntimeError(f"expected {len(levels)} profiled EXTRA_ALU kernels, found {len(k)}")
    ks = []
    for i, name in enumerate(k.get("kernel_mangled", pd.Series([None] * len(k)))):
        m = _XALU_MANGLED.search(str(name or ""))
        ks.append(int(m.group(1)) if m else int(levels[i]))
    return pd.DataFrame(dict(extra_alu=ks, issue_active_pct=k["issue_active_pct"].to_numpy(float),
                             dram_pct=k["dram_pct"].to_numpy(float),
                             ncu_sm_clock_mhz=k["sm_clock_hz"].to_numpy(float) / 1e6,
                             ncu_duration_s=k["duration_s"].to_numpy(float)))


# --------------------------------------------------------------------------------------
# The locked-clock sweep (opt-in, a machine you own): seed 003's table, measured
# --------------------------------------------------------------------------------------
LOCKED_PREFILL_SHAPE = "llama3-70b:o_proj"
LOCKED_PREFILL_M = 8192
LOCKED_COLUMNS = ["phase", "shape", "N", "K", "M", "arm", "fmt", "lock_mhz", "lock_status", "rate_p20",
                  "rate_p50", "rate_p80", "rate_unit", "time_p50_s", "sm_mhz_median", "sm_mhz_min",
                  "clock_source", "clock_note", "check_relerr", "change_vs_unlocked"]
LOCK_FLAT = FLAT_BAR    # "does not change" at >= 1200 MHz: the same bar as the emulated sweep
FP_INT_PARITY = 0.02    # the issue's FP vs INT tolerance


def _prefill_fmt(arm: str) -> str:
    if arm == CUBLAS:
        return "bf16"
    if registry.is_peer(arm):
        from ..arms import peer_catalog
        return peer_catalog.get(arm).fmt
    return "fp8"


def _measured(df: pd.DataFrame) -> pd.DataFrame:
    """A peer sweep's measured rows (a peer that is missing or fails its check has no rate to lock)."""
    return df[df["status"] == "measured"] if "status" in df else df


def _locked_rows(dec: pd.DataFrame, pre: pd.DataFrame, lock_mhz, status: str) -> list[dict]:
    rows = []
    for _, r in dec.iterrows():
        rows.append(dict(phase="decode", shape=r["shape"], N=r["N"], K=r["K"], M=r["M"], arm=r["arm"],
                         fmt=r["fmt"], lock_mhz=lock_mhz, lock_status=status, rate_p20=r["bw_p20"],
                         rate_p50=r["bw_p50"], rate_p80=r["bw_p80"], rate_unit="B/s", time_p50_s=r["time_p50_s"],
                         sm_mhz_median=r["sm_mhz_median"], sm_mhz_min=r["sm_mhz_min"],
                         clock_source=r.get("clock_source", ""), clock_note=r.get("clock_note", ""),
                         check_relerr=r["check_relerr"]))
    for _, r in pre.iterrows():
        if bool(r.get("with_quant", False)):
            continue
        rows.append(dict(phase="prefill", shape=r["shape"], N=r["N"], K=r["K"], M=r["M"], arm=r["arm"],
                         fmt=_prefill_fmt(r["arm"]), lock_mhz=lock_mhz, lock_status=status,
                         rate_p20=r["tflops_p20"] * 1e12, rate_p50=r["tflops_p50"] * 1e12,
                         rate_p80=r["tflops_p80"] * 1e12, rate_unit="FLOP/s", time_p50_s=r["time_p50_s"],
                         sm_mhz_median=r["sm_mhz_median"], sm_mhz_min=r["sm_mhz_min"],
                         clock_source=r.get("clock_source", ""), clock_note=r.get("clock_note", ""),
                         check_relerr=r["check_relerr"]))
    return rows


def locked_sweep(lock_clocks: Sequence[float], *, decode_shape: str = DEFAULT_SHAPE,
                 prefill_shape: str = LOCKED_PREFILL_SHAPE, prefill_m: int = LOCKED_PREFILL_M,
                 formats: Sequence[str] = wo.FORMATS, rep_ms: float = 40, seed: int = 0, sampler=None,
                 lock=None, peers: Sequence[str] = (), peer_avail=None, peer_prepare=None
                 ) -> tuple[pd.DataFrame, list[dict]]:
    """Seed 003's locked-clock experiment: the four weight-only kernels and cuBLAS BF16 at M = 1
    (``decode_shape``), the W8A16 prefill arms and cuBLAS BF16 at M = ``prefill_m``
    (``prefill_shape``), once unlocked and once per SM clock in ``lock_clocks``.

    ``peers``: weight-only peers (fp8lab.peers; Marlin is the seed's own subject) timed at the same
    two points under each lock through their own sweeps (checked, rotated, the same sampler);
    only their measured rows enter the table (``peer_avail`` / ``peer_prepare``: tests).

    ``lock``: a context manager factory ``lock(sm_mhz=...)`` yielding an object with ``status``
    (default :func:`fp8lab.measure.clocks.locked_clocks` with ``opt_in=True``: the caller's list IS the
    opt-in, and it resets the clocks on exit, error, interrupt and SIGTERM). A clock whose
    status is not 'locked' (not permitted, no NVML, ...) is logged and NOT measured: an unlocked
    run labelled with a clock would be a wrong result. Returns (table, log); ``change_vs_unlocked``
    is each row's rate over the same arm's unlocked rate, minus one."""
    from . import decode, prefill

    if not lock_clocks:
        raise ValueError("lock_clocks is empty: the locked sweep needs at least one SM clock (MHz)")
    mhz = [float(rl.positive("lock_clocks entry", f)) for f in lock_clocks]
    wo._pos_int("prefill_m", prefill_m)
    for f in formats:
        wo.check_fmt(f)
    if lock is None:
        def lock(sm_mhz):
            return clocks.locked_clocks(sm_mhz=sm_mhz, opt_in=True)

    peers = list(peers)
    if peers:
        from ..arms import peer_catalog
        peer_catalog.check_ids(peers, "10")
    pre_arms = tuple(prefill.W8A16_ARMS) + (CUBLAS,)
    copy = decode.measure_copy(sampler=sampler)

    def point(lock_mhz, status):
        dec = decode.measure_decode([decode_shape], [1], formats, cublas=True, rep_ms=rep_ms, seed=seed,
                                    copy=copy, sampler=sampler, pattern=False)   # 08 times the patterns
        pre = prefill.measure_prefill(prefill_shape, [prefill_m], pre_arms, rep_ms=rep_ms, seed=seed,
                                      sampler=sampler)
        rows = _locked_rows(dec, pre, lock_mhz, status)
        if peers:
            from ..peers import sweeps as peer_sweeps
            kw = dict(rep_ms=rep_ms, seed=seed, sampler=sampler, avail=peer_avail, prepare=peer_prepare)
            pdec = peer_sweeps.decode([decode_shape], [1], peers, copy=copy, same_copy=False, **kw)
            ppre = peer_sweeps.prefill(prefill_shape, [prefill_m], peers, **kw)
            rows += _locked_rows(_measured(pdec), _measured(ppre), lock_mhz, status)
        return rows

    rows = point(math.nan, "unlocked")
    log = []
    for f in track(mhz, desc="locked-clock sweep", unit="clocks"):
        with lock(sm_mhz=f) as state:
            log.append(dict(sm_mhz=f, status=str(state.status)))
            if state.status == "locked":
                rows += point(f, "locked")
    df = pd.DataFrame(rows, columns=LOCKED_COLUMNS)
    return add_locked_change(df), log


def add_locked_change(df: pd.DataFrame) -> pd.DataFrame:
    """``change_vs_unlocked`` = rate_p50 / (the same phase, shape, M and arm's unlocked rate) - 1."""
    out = df.copy()
    key = ["phase", "shape", "M", "arm"]
    base = out[out["lock_status"] == "unlocked"].set_index(key)["rate_p50"]
    if base.index.duplicated().any():
        raise ValueError("more than one unlocked row per (phase, shape, M, arm)")
    idx = pd.MultiIndex.from_frame(out[key])
    out["change_vs_unlocked"] = out["rate_p50"].to_numpy(float) / base.reindex(idx).to_numpy(float) - 1
    return out


def locked_table(df: pd.DataFrame) -> pd.DataFrame:
    """Seed 003's C6 table from a locked sweep: one row per (phase, arm), one column per locked
    SM clock, the change vs unlocked."""
    d = df[df["lock_status"] == "locked"]
    if d.empty:
        return pd.DataFrame()
    return d.pivot_table(index=["phase", "arm"], columns="lock_mhz", values="change_vs_unlocked").sort_index(
        axis=1, ascending=False)


def _locked_rule(flat: float) -> str:
    return (f"locked clocks: holds if every weight-only kernel's M=1 bandwidth is within {flat:.0%} of unlocked "
            f"at every locked clock >= {SEED_C6_HEADROOM_MHZ:.0f} MHz and FP vs INT within {FP_INT_PARITY:.0%} at "
            "every locked clock; differs otherwise")


def c6_locked_verdict(df: pd.DataFrame, *, emulated: Optional[str] = None, flat: float = LOCK_FLAT):
    """C6 from a real locked sweep (an ``analogue`` row, variant 'locked clock'), or None when no
    clock was locked.

    holds: every weight-only kernel's M = 1 bandwidth within ``flat`` of unlocked at every
    locked clock >= 1200 MHz, and FP vs INT (fp8 vs int8, nvfp4 vs int4) within 2% of each
    other at every locked clock; differs otherwise. The figure lists the changes at each clock
    (4-bit, 8-bit, cuBLAS BF16 decode and prefill) beside the seed's."""
    arms = {wo.ARMS[f]: f for f in wo.FORMATS}
    pairs = [(wo.ARMS["fp8"], wo.ARMS["int8"]), (wo.ARMS["nvfp4"], wo.ARMS["int4"])]
    return _c6_locked(df, arms, pairs, rule=_locked_rule(flat), subject="analogue", variant=LOCKED,
                      what="weight-only M = 1", emulated=emulated, flat=flat)


#: seed 003's subject at locked clocks: the Marlin kernels among the peers, and its FP vs INT pair
#: (vLLM's FP8 and INT8 Marlin; no NVFP4 Marlin is among the peers, so the 4-bit pair is not judged)
MARLIN_PEERS = ("peer_vllm_marlin_fp8", "peer_vllm_marlin_int8", "peer_vllm_marlin_int4", "peer_marlin_int4")
MARLIN_PAIRS = (("peer_vllm_marlin_fp8", "peer_vllm_marlin_int8"),)
LOCKED_MARLIN = "Marlin, locked clock"


def _marlin_rule(flat: float) -> str:
    return (f"locked clocks, the Marlin kernels measured (vLLM FP8 / INT8 / INT4, the original INT4): holds if each "
            f"one's M=1 bandwidth is within {flat:.0%} of unlocked at every locked clock >= "
            f"{SEED_C6_HEADROOM_MHZ:.0f} MHz and vLLM's FP8 vs INT8 Marlin within {FP_INT_PARITY:.0%} at every "
            "locked clock; differs otherwise (no NVFP4 Marlin among the peers: the 4-bit FP vs INT pair is not judged)")


def c6_locked_seed_verdict(df: Optional[pd.DataFrame], *, locked: str = LOCK_NOT_RUN, flat: float = LOCK_FLAT):
    """C6's ``seed`` row: Marlin, seed 003's subject, at really locked clocks (the analogue row's
    rule over the Marlin peers measured); not-run saying why when no clock was locked or no
    Marlin ran under a lock."""
    from ..report import claims

    rule = _marlin_rule(flat)
    kw = dict(seed_figure=SEED_C6_FIGURE, seed_hardware="RTX 3090", subject="seed", variant=LOCKED_MARLIN, rule=rule)
    d = df[df["lock_status"] == "locked"] if df is not None and len(df) else None
    if d is None or d.empty:
        return claims.Verdict("C6", "not-run", "no SM clock locked", f"{locked}; {LOCK_HOW}", **kw)
    arms = {a: registry.short_label(a) for a in MARLIN_PEERS if a in set(d["arm"])}
    if not arms:
        return claims.Verdict("C6", "not-run", "clocks were locked, but no Marlin kernel was measured under a lock",
                              "build them (python -m fp8lab.peers build marlin / vllm-marlin) and pass peers", **kw)
    return _c6_locked(df, arms, list(MARLIN_PAIRS), rule=rule, subject="seed", variant=LOCKED_MARLIN,
                      what="Marlin M = 1", flat=flat)


def _c6_locked(df, arms: dict, pairs, *, rule: str, subject: str, variant: str, what: str,
               emulated: Optional[str] = None, flat: float = LOCK_FLAT):
    """The locked-clock rule over ``arms`` ({arm: label}) and FP vs INT ``pairs`` of arms."""
    from ..report import claims

    d = df[(df["lock_status"] == "locked")]
    if d.empty:
        return None
    dec = d[(d["phase"] == "decode") & (d["M"] == 1)]
    parts, problems = [], []
    for f, g in dec.groupby("lock_mhz"):
        ch = {arms[r["arm"]]: float(r["change_vs_unlocked"]) for _, r in g.iterrows() if r["arm"] in arms}
        cb = g[g["arm"] == CUBLAS]["change_vs_unlocked"]
        pf = d[(d["phase"] == "prefill") & (d["lock_mhz"] == f) & (d["arm"] == CUBLAS)]["change_vs_unlocked"]
        parts.append(f"{f:.0f} MHz: " + ", ".join(f"{k} {v:+.1%}" for k, v in ch.items())
                     + (f", cuBLAS decode {float(cb.iloc[0]):+.1%}" if len(cb) else "")
                     + (f", cuBLAS prefill {float(pf.iloc[0]):+.1%}" if len(pf) else ""))
        if f >= SEED_C6_HEADROOM_MHZ:
            bad = [k for k, v in ch.items() if abs(v) > flat]
            if bad:
                problems.append(f"{', '.join(bad)} change more than {flat:.0%} at {f:.0f} MHz")
        for a, b in pairs:
            ra = g[g["arm"] == a]["rate_p50"]
            rb = g[g["arm"] == b]["rate_p50"]
            if len(ra) and len(rb):
                gap = float(ra.iloc[0]) / float(rb.iloc[0]) - 1
                if abs(gap) > FP_INT_PARITY:
                    problems.append(f"{arms.get(a, a)} vs {arms.get(b, b)} {gap:+.1%} at {f:.0f} MHz")
    fig = "; ".join(parts)
    tail = f"; emulated sweep: {emulated}" if emulated else ""
    kw = dict(seed_figure=SEED_C6_FIGURE, seed_hardware="RTX 3090", subject=subject, variant=variant, rule=rule)
    if problems:
        return claims.Verdict("C6", "differs", fig, "; ".join(problems) + tail, **kw)
    return claims.Verdict("C6", "holds", fig,
                          f"{what} within {flat:.0%} at every locked clock >= 1200 MHz and FP vs INT "
                          f"within {FP_INT_PARITY:.0%}{tail}", **kw)
