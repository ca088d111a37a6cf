"""Notebook 06b: 1x128 activation quantisers against the copy ceiling (claim B6).

Arms: ``quant_act_naive`` (the seed's 1024-thread launch with one busy row and 128 shared
atomics per group), ``quant_act_warp`` (one warp per group), ``quant_act_16t`` (16 threads per
group, 16-byte loads), ``quant_act_warp_ilp`` (the warp kernel built for bandwidth: 16-byte loads,
2-8 groups per warp in flight, whole-warp butterfly on packed maxima, one reciprocal per group;
by default ``groups_per_warp='auto'``: 2 groups per warp for small M, 4 or 8 once the grid fills
three waves (``quant_act.auto_launch``; the one-chunk-per-warp grid kernel at every M); B6's verdict is on
``quant_act_warp``, see ``b6_verdict``), ``quant_act_warp_ilp_pdl`` (the same kernel and grid as a
programmatic dependent launch, sm_90 and newer: its launch overlaps the previous kernel's tail, as
vLLM's quantiser launches), ``quant_act_subwarp`` (8 lanes x 32 bytes per group, four groups per warp,
a flat grid: SGLang's work split with fp8lab's arithmetic, in its default form; the arm fp8lab's
fraction-of-copy performance targets are reported on where measured, see ``target_arm``) and ``quant_act_subwarp_pdl`` (it as a
programmatic dependent launch, as SGLang launches its quantiser on sm_90+), and ``torch_reference`` (``baselines.quant_act_reference``: the eager
torch recipe the kernels must match, several kernels long; context, not a contender).

Every kernel's output is compared bit for bit with the torch reference on the same input
before it is timed (codes and scales); the input has groups spread over 2^-8 .. 2^8 and an
all-zero group, so a wrong scale or a mishandled zero group shows.

The ceiling: a device-to-device copy moving the same number of bytes (read + write), timed the
same way, beside the 2 GiB copy of notebook 00. Inputs are rotated over copies that together
exceed 2x L2 (CUDA-graph replay for calls under ``GRAPH_BELOW_S``, CUDA events with L2 flushed
above). Which method a call gets is decided from its GPU time alone (a short graph replay), not
from an event pair around one Python call: the Python wrapper's ~10-20 us of host time made every
call look slow and sent every row to events, where an SM kernel pays a few us of launch gap that
the copy (cudaMemcpyAsync) does not. ``diagnostic_arms`` adds ``traffic_copy`` (the ilp kernel's
loads and stores with no arithmetic: the ceiling of that launch shape) and ``traffic_copy_pdl`` (the
same as a programmatic dependent launch: the ceiling the PDL arms are held to); where that would
need more than ``MAX_SETS`` copies (M = 1, 16 at K = 7168: a few tens of KB) the input is L2-resident and the row says so: those are latency, not bandwidth, figures.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import pandas as pd

from ..measure import bench, clocks, harness
from ..report import claims
from ..arms import peer_catalog, registry
from ..kernels import quant_act as qa
from ..measure.progress import progress as track

__all__ = ["DEFAULT_MS", "DEFAULT_KS", "TARGET_M_RANGE", "TARGET_FRACTION", "TARGET_SMALL_M_RANGE",
           "TARGET_SMALL_FRACTION", "TARGET_BANDS", "ARMS", "PDL_ARM", "SUBWARP_PDL_ARM", "PDL_ARMS", "DIAGNOSTIC_ARMS", "TIMINGS",
           "TARGET_ARMS", "LAUNCH_SHAPE_COPY", "PDL_COPY", "pdl_twin", "FIX_ARM", "MIN_SPEEDUP", "make_input", "measure", "target_arm", "target_rows", "target_table", "b6_verdict", "COLUMNS",
           "NCU_ENV", "NCU_ARMS", "ncu_workload", "profile_quantisers"]

DEFAULT_MS = (1, 16, 256, 1024, 4096, 8192)
DEFAULT_KS = (7168,)
# Issue 22's target 4: the bandwidth kernel at >= 88% of a same-traffic copy at every M in 256..8192
# (K = 7168; also B6's range), and >= 80% at M = 1..16, where launch latency weighs most.
TARGET_M_RANGE = (256, 8192)
TARGET_FRACTION = 0.88
TARGET_SMALL_M_RANGE = (1, 16)
TARGET_SMALL_FRACTION = 0.80
TARGET_BANDS = ((TARGET_SMALL_M_RANGE, TARGET_SMALL_FRACTION), (TARGET_M_RANGE, TARGET_FRACTION))
MIN_SPEEDUP = 2.0                 # "the fix": the warp kernel at least this much faster than the naive one
                                  # (the naive launch's idle threads cost far more: a smaller gain is no fix)
GRAPH_BELOW_S = 200e-6            # the whole target range (M <= 8192 at K = 7168) replays in graphs
MAX_SETS = 256
#: quant_act_warp_ilp launched as a programmatic dependent launch (qa.quant_act(..., pdl=True)):
#: the same kernel and launch shape, its launch latency overlapping the previous kernel's tail (sm_90+)
PDL_ARM = "quant_act_warp_ilp_pdl"
#: quant_act_subwarp as a programmatic dependent launch (waits before its loads and releases the next kernel
#: right after that, quant_act.PDL_DEFAULT_RELEASE; SGLang's quantiser, also launched so on sm_90+,
#: releases after its stores)
SUBWARP_PDL_ARM = "quant_act_subwarp_pdl"
PDL_ARMS = {PDL_ARM: "quant_act_warp_ilp", SUBWARP_PDL_ARM: "quant_act_subwarp"}
ARMS = (*qa.VARIANTS, PDL_ARM, SUBWARP_PDL_ARM, "torch_reference")
#: traffic_copy as a programmatic dependent launch with quant_act's default release (that of both PDL arms):
#: the yardstick of a PDL quantiser, which a plain copy is not (a PDL launch hides the launch gap a plain
#: launch pays; the target table's pdl_fraction_of_pdl_copy)
PDL_COPY = "traffic_copy_pdl"
DIAGNOSTIC_ARMS = ("traffic_copy", PDL_COPY)
#: other people's per-token-group quantisers (issue 17): fp8lab.peers.sweeps.quantisers
PEERS = peer_catalog.ids_for("06b")
TIMINGS = ("auto", "events", "graph")
# The fraction-of-copy performance targets are reported on the first of these present in the data: the subwarp kernel
# (fp8lab's fastest quantiser from M = 256 up in the runs of 2026-12-04) when it was measured, else the warp kernel built
# for bandwidth, else the seed's one-warp-per-group kernel (tables recorded before those arms existed).
TARGET_ARMS = ("quant_act_subwarp", "quant_act_warp_ilp", "quant_act_warp")
#: the diagnostic copy that has a target arm's launch shape (traffic_copy is quant_act_warp_ilp's grid kernel's
#: loads and stores): the target table's launch_shape column is filled only for that arm
LAUNCH_SHAPE_COPY = {"quant_act_warp_ilp": "traffic_copy"}
#: B6's verdict is on the seed's fix as the seed describes it (one warp per 128-group, shuffle
#: reduction): quant_act_warp. The bandwidth-built kernels are performance, not the claim.
FIX_ARM = "quant_act_warp"

COLUMNS = ["arm", "M", "K", "status", "bytes", "time_p20_s", "time_p50_s", "time_p80_s", "gbps_p50", "copy_gbps_p50",
           "fraction_of_copy", "fraction_of_big_copy", "bitwise_ok", "codes_differing", "scales_differing",
           "scales_differing_true_division", "l2_resident", "timing_method", "copy_timing_method", "rotation_sets",
           "n_samples",
           "sm_mhz_median", "power_w_max", "clock_reasons", "clock_source", "clock_note"]


def make_input(M: int, K: int, seed: int = 0, device="cuda"):
    """x (M, K) bf16: N(0, 1) times 2^U(-8, 8) per 128-group (scales spread over 16 octaves), with
    the first group all zeros (its scale must come out as 1)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    kb = K // qa.GROUP
    x = torch.randn(M, kb, qa.GROUP, generator=g, device=device)
    x *= torch.exp2(torch.rand(M, kb, 1, generator=g, device=device) * 16 - 8)
    x[0, 0] = 0.0
    return x.view(M, K).to(torch.bfloat16).contiguous()


def special_input(M: int, K: int, seed: int = 0):
    """:func:`make_input` with special groups first (one each, as far as there are groups): all
    zero, all -0, a NaN, +Inf, -Inf, a ramp to near the bf16 maximum, and groups scaled to a
    subnormal fp32 scale (1e-37, 1e-39, 2^-70, 2^-75). For the bit-exact checks (GPU)."""
    import torch

    x = make_input(M, K, seed=seed).float()
    flat = x.view(M * K // qa.GROUP, qa.GROUP)
    specials = [lambda g: g.zero_(), lambda g: g.fill_(-0.0), lambda g: g.__setitem__(5, float("nan")),
                lambda g: g.__setitem__(7, float("inf")), lambda g: g.__setitem__(3, float("-inf")),
                lambda g: g.copy_(torch.linspace(-3e38, 3e38, qa.GROUP)), lambda g: g.mul_(1e-37),
                lambda g: g.mul_(1e-39), lambda g: g.mul_(2.0 ** -70), lambda g: g.mul_(2.0 ** -75)]
    for i, f in enumerate(specials):
        if i < flat.shape[0]:
            f(flat[i])
    return x.to(torch.bfloat16)


def wide_input(M: int, K: int, seed: int = 0):
    """x (M, K) bf16 with group maxima over 2^-130 .. 2^120 (both sides of the fast division path's
    2^-80 scale edge), elements up to 2^40 below their group's, bf16 subnormals, zeros and -0.
    For the bit-exact checks (GPU)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    kb = K // qa.GROUP
    mant = torch.rand(M, kb, qa.GROUP, generator=g, device="cuda") + 1.0
    e = torch.randint(-130, 120, (M, kb, 1), generator=g, device="cuda").float()
    e = e - torch.randint(0, 40, (M, kb, qa.GROUP), generator=g, device="cuda").float()
    sign = torch.where(torch.rand(M, kb, qa.GROUP, generator=g, device="cuda") < 0.5, -1.0, 1.0)
    x = sign * mant * torch.exp2(e.clamp(-133, 126))
    x[torch.rand(M, kb, qa.GROUP, generator=g, device="cuda") < 0.02] = 0.0
    x[torch.rand(M, kb, qa.GROUP, generator=g, device="cuda") < 0.02] = -0.0
    return x.view(M, K).to(torch.bfloat16)


def _n_sets(nbytes: int, l2: int) -> tuple[int, bool]:
    """(input copies to rotate over, L2-resident?)."""
    need = math.floor(2 * l2 / nbytes) + 1
    if need > MAX_SETS:
        return 1, True
    return max(1, need), False


def _time(make, n_sets: int, *, rep_ms: float, warmup_ms: float, timing: str = "auto"):
    fn0 = make(0)
    if timing == "events" or (timing == "auto" and bench.choose_method(fn0, GRAPH_BELOW_S).method == "events"):
        return bench.bench(fn0, method="events", warmup_ms=warmup_ms, rep_ms=rep_ms)
    return bench.bench(harness.made_rotation(make, n_sets, first=fn0), method="graph", warmup_ms=warmup_ms,
                       rep_ms=rep_ms)


def measure(Ms: Sequence[int] = DEFAULT_MS, Ks: Sequence[int] = DEFAULT_KS, *, arms: Sequence[str] = ARMS,
            rep_ms: float = 40, warmup_ms: float = 10, seed: int = 0, big_copy_Bps: Optional[float] = None,
            sampler=None, progress=None, timing: str = "auto", groups_per_warp=None,
            persistent: Optional[bool] = None, diagnostic_arms: Sequence[str] = (),
            subwarp_form: Optional[str] = None) -> pd.DataFrame:
    """Check bit for bit, then time, every arm at every (M, K); one row per (arm, M, K), with the
    same-traffic copy's bandwidth on every row (and the 2 GiB copy's, when given).

    timing: 'auto' (graph replay with rotated inputs for calls under GRAPH_BELOW_S of GPU time or
    bound by their launch, events for longer GPU-bound calls: bench.choose_method), or 'events' /
    'graph' for every row (copy included). groups_per_warp (2, 4, 8 or 'auto') and persistent
    (True / False, with a number only): passed to quant_act_warp_ilp (None: its default, 'auto').
    subwarp_form (one of quant_act.SUBWARP_FORMS): passed to quant_act_subwarp and its PDL arm.
    diagnostic_arms: any of DIAGNOSTIC_ARMS (timed, not checked)."""
    unknown = set(arms) - set(ARMS)
    if unknown:
        raise ValueError(f"unknown arms {sorted(unknown)}; known: {ARMS}")
    unknown = set(diagnostic_arms) - set(DIAGNOSTIC_ARMS)
    if unknown:
        raise ValueError(f"unknown diagnostic arms {sorted(unknown)}; known: {DIAGNOSTIC_ARMS}")
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS}, got {timing!r}")
    # the same checks quant_act makes, before any GPU work
    qa._variant_id("quant_act_warp_ilp", groups_per_warp, persistent)
    qa._variant_id("quant_act_subwarp", None, None, subwarp_form)
    if PDL_ARM in arms and persistent:
        raise ValueError(f"{PDL_ARM} is the grid kernel: persistent=True does not apply to it (leave it out of arms)")
    for K in Ks:
        if K % qa.GROUP or K <= 0:
            raise ValueError(f"every K must be a positive multiple of {qa.GROUP}, got {K}")
    if not Ms or min(Ms) < 1:
        raise ValueError(f"Ms must be positive integers, got {list(Ms)}")
    import torch

    from ..kernels import baselines

    if not torch.cuda.is_available():
        raise RuntimeError("measure() needs a CUDA device")
    l2 = bench.device_l2_bytes()
    rows = []
    for K in track(Ks, desc="quantiser sweep", unit="K values"):
        for M in track(Ms, desc="M"):
            if progress:
                progress(f"M={M} K={K}")
            cnt = registry.count("quant_act_warp", M=M, K=K)
            nbytes = cnt.bytes
            n_sets, resident = _n_sets(nbytes, l2)
            xs = [make_input(M, K, seed=seed + M)]
            xs += [xs[0].clone() for _ in range(n_sets - 1)]
            ref_q, ref_s = baselines.quant_act_reference(xs[0])
            ref_bits = ref_q.view(torch.uint8)

            # the ceiling at this traffic: copy bytes/2 -> bytes/2
            half = nbytes // 2
            srcs = [torch.randint(0, 255, (half,), dtype=torch.uint8, device="cuda") for _ in range(n_sets)]
            dsts = [torch.empty_like(s) for s in srcs]
            tc = _time(lambda i: (lambda: dsts[i].copy_(srcs[i])), n_sets, rep_ms=rep_ms, warmup_ms=warmup_ms,
                       timing=timing)
            copy_gbps = 2 * half / tc.p50_s / 1e9
            srcs = dsts = None

            for arm in (*arms, *diagnostic_arms):
                r = {c: math.nan for c in COLUMNS}
                r.update(arm=arm, M=int(M), K=int(K), bytes=float(nbytes), l2_resident=resident, status="",
                         timing_method="", clock_reasons="", clock_source="", clock_note="", copy_gbps_p50=copy_gbps,
                         copy_timing_method=tc.method)
                kw = ({"groups_per_warp": groups_per_warp, "persistent": persistent} if arm == "quant_act_warp_ilp"
                      else {"subwarp_form": subwarp_form} if arm == "quant_act_subwarp" else {})
                variant = arm
                if arm in PDL_ARMS:    # the ilp grid kernel (groups_per_warp as asked) or subwarp as a programmatic
                    variant = PDL_ARMS[arm]   # dependent launch
                    kw = ({"groups_per_warp": groups_per_warp, "pdl": True} if arm == PDL_ARM
                          else {"subwarp_form": subwarp_form, "pdl": True})
                    if not qa.pdl_supported(xs[0].device.index):
                        r["status"] = "not-run: needs sm_90 or newer (programmatic dependent launch)"
                        rows.append(r)
                        continue
                if arm == PDL_COPY and not qa.pdl_supported(xs[0].device.index):
                    r["status"] = "not-run: needs sm_90 or newer (programmatic dependent launch)"
                    rows.append(r)
                    continue
                if arm in ("traffic_copy", PDL_COPY):
                    outs = [(torch.empty((M, K), dtype=torch.float8_e4m3fn, device="cuda"),
                             torch.empty((M, K // qa.GROUP), dtype=torch.float32, device="cuda")) for _ in xs]

                    def make(i, outs=outs, pdl=arm == PDL_COPY):
                        return lambda: qa.traffic_copy(xs[i], q_out=outs[i][0], s_out=outs[i][1], pdl=pdl)
                elif arm == "torch_reference":
                    def make(i):
                        return lambda: baselines.quant_act_reference(xs[i])
                    r.update(bitwise_ok=True, codes_differing=0, scales_differing=0)
                else:
                    outs = [(torch.empty((M, K), dtype=torch.float8_e4m3fn, device="cuda"),
                             torch.empty((M, K // qa.GROUP), dtype=torch.float32, device="cuda")) for _ in xs]
                    q0, s0 = outs[0]
                    q0.view(torch.uint8).fill_(0x7F)        # NaN codes: an unwritten code shows
                    s0.fill_(float("nan"))
                    qa.quant_act(xs[0], variant, q_out=q0, s_out=s0, **kw)
                    torch.cuda.synchronize()
                    codes_diff = int((q0.view(torch.uint8) != ref_bits).sum())
                    scales_diff = int((s0.view(torch.int32) != ref_s.view(torch.int32)).sum())
                    r.update(bitwise_ok=codes_diff == 0 and scales_diff == 0, codes_differing=codes_diff,
                             scales_differing=scales_diff)
                    if arm == "quant_act_warp":
                        _, s_td = qa.quant_act(xs[0], arm, scale_rule="true_division")
                        r["scales_differing_true_division"] = int((s_td.view(torch.int32) != ref_s.view(torch.int32)).sum())
                    if not r["bitwise_ok"]:
                        r["status"] = f"wrong: {codes_diff} codes, {scales_diff} scales differ from the reference"
                        rows.append(r)
                        continue

                    def make(i, variant=variant, outs=outs, kw=kw):
                        return lambda: qa.quant_act(xs[i], variant, q_out=outs[i][0], s_out=outs[i][1], **kw)
                tm, clk = clocks.timed(sampler, lambda: _time(make, n_sets, rep_ms=rep_ms, warmup_ms=warmup_ms,
                                                              timing=timing))
                gbps = nbytes / tm.p50_s / 1e9
                r.update(status="measured", gbps_p50=gbps, fraction_of_copy=gbps / copy_gbps,
                         fraction_of_big_copy=(gbps * 1e9 / big_copy_Bps) if big_copy_Bps else math.nan,
                         **harness.timing_columns(tm, clk))
                rows.append(r)
            xs = None
            torch.cuda.empty_cache()
    return pd.DataFrame(rows, columns=COLUMNS)


def target_arm(df: pd.DataFrame) -> Optional[str]:
    """The arm the fraction-of-copy performance targets are reported on: the first of TARGET_ARMS measured."""
    measured = set(df.loc[df["status"] == "measured", "arm"])
    return next((a for a in TARGET_ARMS if a in measured), None)


def pdl_twin(arm: Optional[str]) -> Optional[str]:
    """The arm that is ``arm``'s kernel launched as a programmatic dependent launch (PDL_ARMS), or None."""
    return next((p for p, base in PDL_ARMS.items() if base == arm), None)


def target_rows(df: pd.DataFrame, K: int = 7168) -> pd.DataFrame:
    """Measured rows in the target range (M 256..8192 at K), every arm."""
    lo, hi = TARGET_M_RANGE
    return df[(df["K"] == K) & (df["M"] >= lo) & (df["M"] <= hi) & (df["status"] == "measured")]


def target_table(df: pd.DataFrame, K: int = 7168, peers: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """fp8lab's performance targets (not a verdict): ``target_arm`` at >= TARGET_FRACTION of a
    same-traffic copy at every measured M in TARGET_M_RANGE and >= TARGET_SMALL_FRACTION in
    TARGET_SMALL_M_RANGE. One row per measured M: the arm, its fraction of copy, the goal,
    whether it is met; with ``peers`` (the same run's peers table) the fastest measured peer at
    that M and its fraction of copy. Two columns say where a miss comes from, when the table has
    those rows: ``pdl_fraction_of_copy`` (the same kernel as a programmatic dependent launch: the
    arm's twin in PDL_ARMS, ``pdl_arm``) and ``launch_shape_fraction_of_copy`` (the copy with the
    arm's launch shape, loads and stores with no arithmetic: LAUNCH_SHAPE_COPY; NaN for an arm
    that has none). ``pdl_fraction_of_pdl_copy``: the PDL twin's bandwidth over PDL_COPY's (the
    same-traffic copy launched the same way, when the table has it), and ``pdl_met`` whether that
    reaches the goal: the like-for-like figure for a PDL launch, as fraction_of_copy is for the
    plain one (NaN / False without those rows)."""
    cols = ["arm", "M", "K", "fraction_of_copy", "target", "met", "pdl_arm", "pdl_fraction_of_copy",
            "pdl_fraction_of_pdl_copy", "pdl_met", "launch_shape_fraction_of_copy", "best_peer",
            "peer_fraction_of_copy"]
    d = df[(df["K"] == K) & (df["status"] == "measured")]
    arm = target_arm(d)
    twin = pdl_twin(arm)
    shape_copy = LAUNCH_SHAPE_COPY.get(arm)

    def at(name, M):
        v = d.loc[(d["arm"] == name) & (d["M"] == M), "fraction_of_copy"]
        return float(v.iloc[0]) if len(v) else math.nan

    pm = pd.DataFrame()
    if peers is not None and len(peers) and "status" in peers:
        pm = peers[(peers["status"] == "measured") & (peers["K"] == K)]
    rows = []
    for (lo, hi), goal in TARGET_BANDS:
        w = d[(d["arm"] == arm) & (d["M"] >= lo) & (d["M"] <= hi)].sort_values("M") if arm else d.iloc[0:0]
        for _, r in w.iterrows():
            p = pm[pm["M"] == r["M"]] if len(pm) else pm
            best = p.loc[p["time_p50_s"].idxmin()] if len(p) else None
            pdl_vs_pdl = at(twin, r["M"]) / at(PDL_COPY, r["M"]) if twin else math.nan
            rows.append(dict(arm=arm, M=int(r["M"]), K=K, fraction_of_copy=r["fraction_of_copy"], target=goal,
                             met=bool(r["fraction_of_copy"] >= goal), pdl_arm=twin or "",
                             pdl_fraction_of_copy=at(twin, r["M"]) if twin else math.nan,
                             pdl_fraction_of_pdl_copy=pdl_vs_pdl, pdl_met=bool(pdl_vs_pdl >= goal),
                             launch_shape_fraction_of_copy=at(shape_copy, r["M"]) if shape_copy else math.nan,
                             best_peer=best["arm"] if best is not None else "",
                             peer_fraction_of_copy=_peer_fraction(best, r)))
    return pd.DataFrame(rows, columns=cols)


def _peer_fraction(peer_row, own_row) -> float:
    """A peer's bandwidth over the same-traffic copy the run timed beside fp8lab's kernels at that
    (M, K): the peers table times no copy of its own (its fraction_of_copy column, where set, wins)."""
    if peer_row is None:
        return math.nan
    f = peer_row.get("fraction_of_copy", math.nan)
    if pd.notna(f):
        return float(f)
    return float(peer_row["gbps_p50"] / own_row["copy_gbps_p50"])


#: the columns of the peers' bit-for-bit table, in the order shown (the last four: peers sweeps
#: after 8230038; older tables lack them)
PEER_CHECK_COLUMNS = ["arm", "M", "K", "codes_differing", "scales_differing", "codes_vs_true_division",
                      "scales_vs_true_division", "zero_group_scale", "zero_group_nan_codes"]


def peer_check_table(peers: Optional[pd.DataFrame]) -> pd.DataFrame:
    """The measured peers' codes and scales that differ from fp8lab's reference and from its
    true-division twin, and what each wrote for the input's all-zero group (those it has)."""
    if peers is None or not len(peers) or "status" not in peers:
        return pd.DataFrame()
    m = peers[peers["status"] == "measured"]
    return m[[c for c in PEER_CHECK_COLUMNS if c in m]].sort_values(["arm", "K", "M"]).reset_index(drop=True)


def peer_check_notes(peers: Optional[pd.DataFrame]) -> list:
    """One sentence per measured peer, from its rows alone. The input's all-zero group is told
    apart: both references write scale 1 and codes 0 there, so a peer's NaN codes or other scale
    for it is counted once, in its own clause, and the comparisons before it are of every other
    group: with fp8lab's reference (``amax * fp32(1/448)``), then with ``amax / 448`` by true
    division (tables that have those columns)."""
    t = peer_check_table(peers)
    notes = []
    if t.empty:
        return notes
    for arm, g in t.groupby("arm", sort=False):
        n = len(g)
        label = registry.label(arm).removesuffix(" (peer)")
        zero = all(c in g and g[c].notna().all() for c in ("zero_group_scale", "zero_group_nan_codes"))
        zc = g["zero_group_nan_codes"].astype(int) if zero else 0        # NaN codes where 0 belongs
        zs = (g["zero_group_scale"] != 1.0).astype(int) if zero else 0    # a scale other than 1
        where = "outside the all-zero group, " if zero else ""

        def differ(codes, scales, against):
            c, s = codes - zc, scales - zs
            if (c == 0).all() and (s == 0).all():
                return f"{where}bit for bit equal to {against} at all {n} points"
            return (f"{where}codes differ from {against} at {int((c > 0).sum())} of {n} points "
                    f"(at most {int(c.max())}), scales at {int((s > 0).sum())}"
                    + (f" (at most {int(s.max())})" if (s > 0).any() else ""))

        bits = [f"{label}: " + differ(g["codes_differing"], g["scales_differing"], "the reference")]
        if all(c in g and g[c].notna().all() for c in ("codes_vs_true_division", "scales_vs_true_division")):
            c, s = g["codes_vs_true_division"] - zc, g["scales_vs_true_division"] - zs
            if (s == 0).all():
                bits.append("its scales are `amax / 448` by true division at every point"
                            + (", and so are its codes" if (c == 0).all()
                               else f" but its codes are not (at most {int(c.max())} differ)"))
            else:
                bits.append(differ(g["codes_vs_true_division"], g["scales_vs_true_division"],
                                   "`amax / 448` by true division").removeprefix(where))
        if zero:
            nan, s = int(g["zero_group_nan_codes"].max()), g["zero_group_scale"]
            if nan:
                bits.append(f"the all-zero group comes out as {nan} NaN codes (scale {s.iloc[0]:g})")
            elif not (s == 1.0).all():
                bits.append(f"the all-zero group gets scale {s.iloc[0]:g} (the reference: 1)")
        notes.append("; ".join(bits) + ".")
    return notes


def b6_verdict(df: pd.DataFrame, K: int = 7168) -> claims.Verdict:
    """B6 (subject analogue: fp8lab's kernels of the seed's two designs). The claim is structural:
    the naive 1024-thread launch leaves 31/32 of each block idle and serialises 128 atomics per
    group, and one warp per group with a shuffle reduction fixes it. Judged on ``FIX_ARM``
    (quant_act_warp, exactly that design) against quant_act_naive: at least MIN_SPEEDUP x faster
    at every measured M in TARGET_M_RANGE holds, else differs. The fraction-of-copy bars are fp8lab's
    performance target for its bandwidth kernel: it is in the notebook's table and figure, not here."""
    lo, hi = TARGET_M_RANGE
    rule = (f"{FIX_ARM} >= {MIN_SPEEDUP:g}x faster than quant_act_naive (p50) at every measured M in {lo}..{hi}, "
            f"K={K}: holds; else differs")
    d = target_rows(df, K)
    w = d[d["arm"] == FIX_ARM].set_index("M")
    n = d[d["arm"] == "quant_act_naive"].set_index("M")
    Ms = sorted(set(w.index) & set(n.index))
    if not Ms:
        return claims.Verdict("B6", "not-run", f"no measured {FIX_ARM} and naive rows for M in {lo}..{hi} at K={K}",
                              reason="the quantiser sweep did not run here", subject="analogue", rule=rule)
    speed = {m: float(n.loc[m, "time_p50_s"] / w.loc[m, "time_p50_s"]) for m in Ms}
    fig = (f"K={K}, M {Ms[0]}..{Ms[-1]}: {FIX_ARM} {min(speed.values()):.1f}-{max(speed.values()):.1f}x faster "
           f"than quant_act_naive, whose launch keeps {qa.NAIVE_BUSY_THREADS}/{qa.NAIVE_THREADS_PER_BLOCK} threads "
           f"busy with {qa.NAIVE_ATOMICS_PER_GROUP} shared atomics per group")
    slow = [m for m in Ms if not speed[m] >= MIN_SPEEDUP]
    if slow:
        return claims.Verdict("B6", "differs", fig, subject="analogue", rule=rule,
                              reason=f"{FIX_ARM} is under {MIN_SPEEDUP:g}x faster at M=" + ", ".join(
                                  f"{m} ({speed[m]:.2f}x)" for m in slow))
    return claims.Verdict("B6", "holds", fig, subject="analogue", rule=rule)


# --------------------------------------------------------------------------------- ncu (issue 22)
#: the environment variable :func:`ncu_workload` reads its configuration from (JSON)
NCU_ENV = "FP8LAB_QUANT_NCU"
#: fp8lab's arms :func:`ncu_workload` profiles: (label, quant_act variant, keyword arguments); the
#: label names the row of scripts/probes/quant_ncu.py's table
NCU_ARMS = (("subwarp plain16", "quant_act_subwarp", {"subwarp_form": "plain16"}),
            ("subwarp ef", "quant_act_subwarp", {"subwarp_form": "ef"}),
            ("ilp auto", "quant_act_warp_ilp", {}))


def ncu_workload() -> None:
    """The profiled program (issue 22: what separates fp8lab's quantiser from SGLang's at M = 256 and
    1024): at each M of $FP8LAB_QUANT_NCU's ``Ms`` (K = ``K``), NCU_ARMS, traffic_copy and each peer
    of ``peers`` that loads (its adapter's error is printed, not raised), each once between
    cudaProfilerStart / Stop after two warm-up calls (quant_act launches plainly here: ncu
    serialises kernels, so PDL has nothing to overlap). The labels of the profiled calls, in launch
    order (one report range each), go to the JSON file ``labels`` when given."""
    import json
    import os

    from ..toolchain import profile

    cfg = json.loads(os.environ[NCU_ENV])
    K = int(cfg.get("K", 7168))
    peers = []
    for p in cfg.get("peers", []):
        from ..peers import adapters

        try:
            peers.append((p, adapters.QUANTISERS[p]()))
        except Exception as e:  # noqa: BLE001
            print(f"peer {p} not profiled: {e}", flush=True)
    calls, labels = [], []
    for M in cfg.get("Ms", [256, 1024]):
        x = make_input(M, K, seed=M)
        for label, variant, kw in NCU_ARMS:
            calls.append(lambda x=x, v=variant, kw=kw: qa.quant_act(x, v, **kw))
            labels.append(f"{label} M={M}")
        calls.append(lambda x=x: qa.traffic_copy(x))
        labels.append(f"traffic_copy M={M}")
        for p, fn in peers:
            calls.append(lambda x=x, fn=fn: fn(x))
            labels.append(f"{p} M={M}")
    if cfg.get("labels"):                   # the parent names the report's ranges from this file
        with open(cfg["labels"], "w") as f:
            json.dump(labels, f)
    profile.profiled_once_each(calls, warmups=2)


def profile_quantisers(out, *, Ms: Sequence[int] = (256, 1024), K: int = 7168, peers: Sequence[str] = (),
                       labels: Optional[str] = None, timeout: float = 600):
    """Profile :func:`ncu_workload` under ncu (``--clock-control none``: the clocks as found) with
    the stall-reason metrics; returns the .ncu-rep path. ``labels``: where the workload writes the
    profiled calls' labels (JSON list, report range order)."""
    import json
    import os

    from ..toolchain import profile

    env = dict(os.environ)
    env[NCU_ENV] = json.dumps(dict(Ms=[int(m) for m in Ms], K=int(K), peers=list(peers), labels=labels or ""))
    return profile.profile("fp8lab.experiments.quantisers:ncu_workload", out, timeout=timeout, env=env,
                           metrics=profile.DEFAULT_METRICS + profile.STALL_METRICS,
                           extra=["--profile-from-start", "off"])
