"""Weight-only decode bandwidth (notebook 08; claims C3, C4, C5, C8 of seed 003).

The sweep (:func:`measure_decode`) times the four weight-only kernels and cuBLAS BF16 on real
decode shapes for M = 1..64 tokens and reports the *effective bandwidth*: weight + scale bytes
(the stream a decode step must read) over the kernel's time, beside the copy bandwidth
measured in the same run. Every arm is checked against float64 before it is timed; inputs
rotate over more than twice the L2 so every call streams from DRAM; each call is timed
back to back in a CUDA graph (a decode step is a chain of such GEMMs).

:func:`profile_decode` runs the M = 1 kernels under Nsight Compute (clocks not locked) and
:func:`ncu_tables` turns the report into DRAM %, issue-active %, and executed instructions per
weight element from the per-opcode counts (all, and the dequant class).

The verdict rules (:func:`c3_verdict`, :func:`c4_verdict`, :func:`c5_verdict`,
:func:`c8_verdict`) and the target table (:func:`targets`) are plain functions of those tables,
tested on synthetic data.
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

from ..measure import bench, harness
from ..facts import devices, shapes
from ..arms import peer_catalog, registry
from ..kernels import gemv_rows, weight_only as wo
from . import gemv_sass as gs
from ..measure.progress import progress as track

DEFAULT_SHAPES = ("llama3-70b:down_proj", "qwen3-8b:gate_up")
DEFAULT_MS = (1, 4, 16, 64)
CUBLAS = "cublas_bf16"
#: the weight-only arms' launch schedules measure_decode takes: gemv_w16's (wo.SCHEDULES) and "rows",
#: the row-major GEMV of fp8lab.kernels.gemv_rows (every format) in the form it takes by default
#: at each M (gemv_rows.default_form) or the one measure_decode's rows_form names; the grid column
#: names the form
SCHEDULES = (*wo.SCHEDULES, "rows")
ARMS = tuple(wo.ARMS[f] for f in wo.FORMATS) + (CUBLAS,)
#: other people's weight-only kernels run beside ARMS (issue 17): fp8lab.peers.sweeps.decode,
#: their rows in a table of their own (the verdicts above read fp8lab's arms only)
PEERS = peer_catalog.ids_for("08")
#: the seed's figures
SEED_C3_DRAM = (0.91, 0.94)
SEED_C3_ISSUE = (0.13, 0.33)
SEED_C4_PARITY = 0.015
SEED_C5_FP8 = 1.81
SEED_C5_RANGE = (1.8, 2.9)
#: Issue 22's decode targets (target 1), each a ratio measured in one run:
#: at M = 1, FP8 and INT8 stream at least cuBLAS BF16's fraction of copy on the same shape, and at
#: least TARGET_BIG_FRACTION on shapes of >= TARGET_BIG_BYTES (one byte per weight); INT4 at least
#: TARGET_INT4_OF_BF16 of cuBLAS BF16's fraction; NVFP4 within TARGET_FP_INT of INT4 (the seed's
#: FP = INT); at M = 16 each format at least TARGET_M16_OF_M1 of its M = 1 rate; and each format
#: faster than every weight-only peer of the same format measured in the run, at every M <= 16.
#: Shapes count from TARGET_MIN_WEIGHT_BYTES of weights at one byte each.
TARGET_BIG_FRACTION = 0.92
TARGET_BIG_BYTES = 100e6
TARGET_INT4_OF_BF16 = 0.85
TARGET_FP_INT = 0.05
TARGET_M16_OF_M1 = 0.85
TARGET_PEER_MAX_M = 16
TARGET_MIN_WEIGHT_BYTES = 32 * 2**20
#: pattern_value: the same target computed from the access pattern's rates (wo.pattern_stream: the
#: row's own grid, occupancy and loads with nothing else; NaN where none was timed); limited_by, for
#: a miss: LIMIT_PATTERN when the pattern alone misses the goal too (the grid and access pattern
#: cost that much), LIMIT_WORK when the pattern meets it (the kernel's per-step work costs the rest)
TARGET_COLUMNS = ["target", "shape", "M", "arm", "value", "goal", "met", "shortfall", "reference",
                  "pattern_value", "limited_by"]
LIMIT_PATTERN = "access pattern"
LIMIT_WORK = "per-step work"

COLUMNS = ["shape", "N", "K", "M", "arm", "fmt", "act", "weight_bytes", "scale_bytes",
           "stream_bytes", "flop", "time_p20_s", "time_p50_s", "time_p80_s", "bw_p20", "bw_p50",
           "bw_p80", "tflops_p50", "copy_Bps", "fraction_of_copy", "spec_Bps", "fraction_of_spec",
           "splits", "grid", "ctas_per_sm", "check_relerr", "rotation_sets", "timing_method",
           "n_samples", "sm_mhz_median", "sm_mhz_min", "mem_mhz_median", "power_w_max",
           "schedule", "same_copy_Bps", "fraction_of_same_copy", "clock_source", "clock_note",
           "pattern_Bps", "pattern_fraction_of_copy", "fraction_of_pattern", "pattern_ctas_per_sm"]
#: the access pattern's columns (weight-only rows with pattern=True; NaN elsewhere and in tables
#: measured before them): its stream bytes over its p50 time, that over the copy rate, the
#: kernel's rate over it, and the CTAs per SM it ran at (the kernel's own)
PATTERN_COLUMNS = COLUMNS[-4:]


def _shape(name: str) -> shapes.Shape:
    return shapes.get(name)


# --------------------------------------------------------------------------------------
# The sweep (GPU)
# --------------------------------------------------------------------------------------
def _rows_form(fmt: str, M: int, rows_form: Optional[str]) -> str:
    """The rows schedule's kernel form for fmt at M: ``rows_form``, else gemv_rows.default_form."""
    return gemv_rows.default_form(fmt, M) if rows_form is None else gemv_rows.check_form(rows_form)


def _gemv_arm(fmt: str, N: int, K: int, act: str, seed: int, l2: int, check_m: int, rows: bool = False,
              rows_ms: Sequence[int] = (), rows_form: Optional[str] = None):
    """Weight copies for rotation and the float64 check of one format (``rows``: the rows layout of
    :mod:`fp8lab.kernels.gemv_rows`, schedule "rows", checked at check_m and at every M in ``rows_ms``,
    the timed Ms: its kernel (form, tokens per CTA) changes with M; ``rows_form``: gemv_rows' form, None
    its default_form at each M). Returns (copies, largest error)."""
    import torch

    if rows:
        pw_host, info = gemv_rows.random_rows(fmt, N, K, act=act, seed=seed)
    else:
        pw_host, info = wo.random_weight(fmt, N, K, act=act, seed=seed)
    pw = pw_host.to("cuda")
    del pw_host
    tdt = torch.bfloat16 if act == "bf16" else torch.float16
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    if rows:
        W = gemv_rows.dequantize_torch(fmt, info["codes"], info["scales"], global_scale=info["global_scale"])
    else:
        W = wo.dequantize_torch(fmt, info["codes"], info["scales"], info["global_scale"])
    errs = []
    for m in sorted({check_m, *(rows_ms if rows else ())}):
        x = torch.randn(m, K, device="cuda", generator=g).to(tdt)
        out = harness.poisoned((m, N), tdt)
        if rows:
            gemv_rows.gemv(x, pw, out=out, form=_rows_form(fmt, m, rows_form))
        else:
            wo.gemv_w16(x, pw, out=out)
        ref = x.double() @ W.t()
        form = f", {_rows_form(fmt, m, rows_form)} form" if rows else ""
        errs.append(harness.require(f"{wo.ARMS[fmt]} {N}x{K} M={m}{form}", out, ref))
        del x, out, ref
    del W
    err = max(errs)
    stream = registry.count(wo.ARMS[fmt], N=N, K=K).weight_bytes
    return harness.rotation_copies(pw, stream, l2, wo.PackedWeight.clone), err


def _cublas_arm(N: int, K: int, seed: int, l2: int, check_m: int):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    w = (0.02 * torch.randn(N, K, device="cuda", generator=g)).to(torch.bfloat16)   # (N, K) bf16
    x = torch.randn(check_m, K, device="cuda", generator=g).to(torch.bfloat16)
    err = harness.require(f"{CUBLAS} {N}x{K}", torch.mm(x, w.t(), out=harness.poisoned((check_m, N))),
                          x.double() @ w.double().t())
    return harness.rotation_copies(w, 2 * N * K, l2), err


def measure_copy(copy_gib: float = 2.0, sampler=None) -> dict:
    """The device-to-device copy ceiling (notebook 00's arm) in this run: dict(rate_p50 B/s,
    ...) from :func:`fp8lab.experiments.ceilings.measure_ceilings`."""
    from . import ceilings as ce

    df = ce.measure_ceilings(copy_gib=copy_gib, ceilings=["copy_bandwidth"], sampler=sampler)
    r = df.iloc[0]
    if r["status"] != "measured":
        raise RuntimeError(f"copy ceiling not measured: {r['status']}")
    return {k: (float(r[k]) if isinstance(r[k], (int, float, np.floating)) else r[k]) for k in df.columns}


def same_copy_half_bytes(stream_bytes: int) -> int:
    """Bytes each side of the same-size copy: stream_bytes / 2 rounded down to a whole 4 KiB
    (at least 4 KiB); the rounding changes a >= 1 MB stream by < 0.5%."""
    b = int(stream_bytes)
    if b <= 0:
        raise ValueError(f"stream_bytes must be positive, got {stream_bytes!r}")
    return max(4096, (b // 2) // 4096 * 4096)


def same_size_copy(stream_bytes: int, l2: int, *, rep_ms: float = 40, sampler=None) -> dict:
    """The copy ceiling at this call's size: a device-to-device copy of stream_bytes / 2 into
    stream_bytes / 2 (the same DRAM traffic as reading the weight stream once), rotated over
    more than the L2 and timed in a CUDA graph as the kernels are. Its launch and ramp costs are
    the ones any kernel of this size pays, so kernel / same-size copy tells how much of a miss
    against the 2 GiB copy is size-dependent. dict(Bps, time_p50_s)."""
    import torch

    half = same_copy_half_bytes(stream_bytes)
    n_sets = bench.n_rotation_sets(2 * half, l2)
    # fp32 elements and a whole number of 4 KiB: an odd byte count (the NVFP4 stream is one) sends
    # a uint8 copy down a slow unvectorised path (seen on the H200: 0.62 of the big copy at 132 MB
    # against 0.94 at 121 MB), which is not the ceiling this column means
    srcs = [torch.randn(half // 4, device="cuda") for _ in range(n_sets)]
    dsts = [torch.empty_like(t) for t in srcs]
    t, _ = harness.timed(lambda d, s_: d.copy_(s_), list(zip(dsts, srcs)), sampler=sampler, method="graph",
                         rep_ms=rep_ms)
    return {"Bps": 2 * half / t.p50_s, "time_p50_s": t.p50_s}


def measure_decode(shape_names: Sequence[str] = DEFAULT_SHAPES, Ms: Sequence[int] = DEFAULT_MS,
                   formats: Sequence[str] = wo.FORMATS, *, act: str = "bf16", cublas: bool = True,
                   rep_ms: float = 40, seed: int = 0, check_m: int = 4, copy: Optional[dict] = None,
                   sampler=None, splits: Optional[int] = None, schedule: Optional[str] = None,
                   same_copy: bool = True, pattern: bool = True, rows_form: Optional[str] = None) -> pd.DataFrame:
    """Time every arm at every (shape, M); one row per (shape, arm, M) (see COLUMNS).

    ``copy``: a :func:`measure_copy` result (measured here when None). ``splits`` pins the
    split-K factor of the weight-only kernels (None: chosen per shape and M). ``schedule``:
    the weight-only kernels' launch schedule (None: ``wo.DEFAULT_SCHEDULE``; ``"streamk"``
    ignores ``splits``). ``same_copy``: also time :func:`same_size_copy` per stream size
    (``same_copy_Bps``, ``fraction_of_same_copy``). ``pattern``: also time each weight-only row's
    access pattern alone (:func:`fp8lab.kernels.weight_only.pattern_stream`: its grid, occupancy and
    loads, on the same rotated weights; :data:`PATTERN_COLUMNS`; not for the bulk schedule).
    ``rows_form``: the rows schedule's kernel form ("cuda"; "mma", "mma32": fp8 / int8 / int4, nvfp4
    left out; "cuda8": int4 / nvfp4, the 8-bit formats left out); None: gemv_rows.default_form at each M."""
    import torch

    for f in formats:
        wo.check_fmt(f)
    for m in Ms:
        wo._pos_int("M", m)
    if rows_form is not None:
        gemv_rows.check_form(rows_form)
    if not torch.cuda.is_available():
        raise RuntimeError("measure_decode needs a CUDA device")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    schedule = wo.DEFAULT_SCHEDULE if schedule is None else schedule
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule == "bulk" and not wo._bulk_capable(torch.cuda.current_device()):
        # one clear line before any timing (launch_config has no bulk keys on such a GPU)
        raise ValueError(f"schedule='bulk' needs sm_{wo.BULK_MIN_SM} or newer (cp.async.bulk); this GPU is "
                         f"sm_{props.major}{props.minor}")
    spec = devices.spec_for(props.name)
    l2 = bench.device_l2_bytes()
    if copy is None:
        copy = measure_copy(sampler=sampler)
    copy_Bps = copy["rate_p50"]
    tdt = torch.bfloat16 if act == "bf16" else torch.float16
    rows = []
    same: dict = {}

    def same_Bps(nbytes):
        if not same_copy:
            return math.nan
        if nbytes not in same:
            same[nbytes] = same_size_copy(nbytes, l2, rep_ms=rep_ms)["Bps"]
        return same[nbytes]

    def timed(fn, sets):
        return harness.timed(fn, sets, sampler=sampler, method="graph", rep_ms=rep_ms)

    pat: dict = {}

    def pattern_of(fmt, N, K, M, sets, cfg, s, stream_bytes, x=None):
        """(pattern Bps, its CTAs per SM) of this row's launch; one timing per distinct launch."""
        if pattern and schedule == "rows":
            # the rows GEMV's own loads-only twin: same grid, same loads, padded to its CTAs per SM
            form = _rows_form(fmt, M, rows_form)
            sink = wo.pattern_sink(sets[0].w.device, gemv_rows.geometry(N, M, form, K)["threads"])
            occ = {}

            def run_loads(pw):
                occ[0] = gemv_rows.loads(x, pw, sink=sink, form=form)

            t, _ = timed(run_loads, [(pw,) for pw in sets])
            if occ.get(0) != cfg["ctas_per_sm"]:
                raise RuntimeError(f"the rows loads of {fmt} at M = {M} ran at {occ.get(0)} CTAs per SM, "
                                   f"its kernel at {cfg['ctas_per_sm']}")
            return stream_bytes / t.p50_s, occ[0]
        if not pattern or schedule not in wo.PATTERN_SCHEDULES:
            return math.nan, math.nan
        kw = dict(splits=int(s)) if schedule == "splitk" else dict(ctas=int(cfg["streamk_ctas"]))
        g = wo.pattern_geometry(fmt, M, N, K, schedule=schedule, **kw)
        key = (fmt, N, K, schedule, g["nt"], g["gz"], g["splits"], cfg["ctas_per_sm"])
        if key not in pat:
            sink = wo.pattern_sink(sets[0].w.device, g["threads"])
            occ = {}

            def run_pattern(pw):
                occ[0] = wo.pattern_stream(pw, M, schedule=schedule, ctas_per_sm=cfg["ctas_per_sm"], sink=sink, **kw)

            t, _ = timed(run_pattern, [(pw,) for pw in sets])
            if occ.get(0) != cfg["ctas_per_sm"]:
                raise RuntimeError(f"the access pattern of {fmt} at M = {M} ran at {occ.get(0)} CTAs per SM, "
                                   f"its kernel at {cfg['ctas_per_sm']}")
            pat[key] = (stream_bytes / t.p50_s, occ[0])
        return pat[key]

    for name in track(shape_names, desc="decode sweep", unit="shapes"):
        sh = _shape(name)
        N, K = sh.N, sh.K
        for fmt in track(formats, desc="format"):
            if schedule == "rows" and (fmt not in gemv_rows.FORMATS
                                       or (rows_form in gemv_rows.MMA_FORMS and fmt not in gemv_rows.MMA_FORMATS)
                                       or (rows_form == "cuda8" and fmt not in gemv_rows.ROWS8_FORMATS)):
                continue       # a form the format has no kernel of (nvfp4: no tensor-core form; 8-bit: no cuda8)
            sets, err = _gemv_arm(fmt, N, K, act, seed, l2, check_m, rows=schedule == "rows", rows_ms=Ms,
                                  rows_form=rows_form)
            b = stream_split(wo.ARMS[fmt], N, K)
            # the split-K workspace at its largest before any graph captures its pointer
            wo.workspace(torch.device("cuda"), max(Ms) * N,
                         max(wo.grid_x(fmt, N, m) * -(-m // wo.M_BLOCK) for m in Ms))
            for M in Ms:
                x = torch.randn(M, K, device="cuda").to(tdt)
                if schedule == "rows":
                    cfg = {"ctas_per_sm": gemv_rows.ctas_per_sm(fmt, act, M, _rows_form(fmt, M, rows_form), N=N, K=K)}
                else:
                    cfg = wo.launch_config(sets[0], M)
                outs = [torch.empty(M, N, dtype=tdt, device="cuda") for _ in sets]
                if schedule == "rows":
                    s = np.nan
                    form = _rows_form(fmt, M, rows_form)
                    g = gemv_rows.geometry(N, M, form, K)
                    grid = f"{form} {g['grid']} x{g['block']}"
                    timing, clk = timed(lambda pw, o: gemv_rows.gemv(x, pw, out=o, form=form), list(zip(sets, outs)))
                elif schedule == "streamk":
                    s = np.nan
                    grid = str(tuple(cfg["streamk_grid"]))
                    timing, clk = timed(lambda pw, o: wo.gemv_w16(x, pw, out=o, schedule="streamk"),
                                        list(zip(sets, outs)))
                else:
                    s = splits or cfg["bulk_splits" if schedule == "bulk" else "splits"]
                    grid = str(tuple(cfg["grid"][:1]) + (s, cfg["grid"][2]))
                    timing, clk = timed(lambda pw, o: wo.gemv_w16(x, pw, splits=s, out=o, schedule=schedule),
                                        list(zip(sets, outs)))
                occ = cfg["bulk_ctas_per_sm"] if schedule == "bulk" else cfg["ctas_per_sm"]
                p_Bps, p_occ = pattern_of(fmt, N, K, M, sets, cfg, s, b["stream_bytes"], x)
                rows.append(_row(name, N, K, M, wo.ARMS[fmt], fmt, act, b, timing, clk, copy_Bps, spec,
                                 splits=s, grid=grid, ctas=occ, err=err,
                                 schedule=schedule, same_Bps=same_Bps(b["stream_bytes"]),
                                 pattern_Bps=p_Bps, pattern_ctas=p_occ))
                del outs
            del sets
            torch.cuda.empty_cache()
        if cublas:
            ws, err = _cublas_arm(N, K, seed, l2, check_m)
            b = stream_split(CUBLAS, N, K)
            for M in Ms:
                x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
                outs = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in ws]
                timing, clk = timed(lambda w, o: torch.mm(x, w.t(), out=o), list(zip(ws, outs)))
                rows.append(_row(name, N, K, M, CUBLAS, "bf16", "bf16", b, timing, clk, copy_Bps, spec,
                                 splits=np.nan, grid="", ctas=np.nan, err=err, schedule="",
                                 same_Bps=same_Bps(b["stream_bytes"])))
                del outs
            del ws
            torch.cuda.empty_cache()
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.attrs["copy"] = copy
    return df


def best_schedule(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (shape, arm, M): where a weight-only arm was timed under several launch
    schedules (split-K, stream-K), its fastest row by p50 time, as a user would launch it.
    Tables without a ``schedule`` column (or with one schedule) come back unchanged."""
    if "schedule" not in df or df.empty:
        return df
    key = ["shape", "arm", "M"]
    if not df.duplicated(key).any():
        return df
    keep = df.groupby(key, sort=False)["time_p50_s"].idxmin()
    out = df.loc[sorted(keep)].reset_index(drop=True)
    out.attrs = dict(df.attrs)
    return out


def schedule_table(df: pd.DataFrame, M: int = 1) -> pd.DataFrame:
    """The launch schedules per (shape, fmt) at M: fraction of the copy bandwidth of each, each
    other schedule's speed over split-K (``<schedule>_speedup``, > 1: faster) and the fastest
    (empty if only one schedule was timed)."""
    if "schedule" not in df:
        return pd.DataFrame()
    d = df[(df["M"] == M) & (df["arm"] != CUBLAS) & df["schedule"].isin(SCHEDULES)]
    if d["schedule"].nunique() < 2:
        return pd.DataFrame()
    t = d.pivot_table(index=["shape", "fmt"], columns="schedule", values="fraction_of_copy")
    tm = d.pivot_table(index=["shape", "fmt"], columns="schedule", values="time_p50_s")
    order = [c for c in SCHEDULES if c in t.columns]
    t = t[order]
    if "splitk" in tm:
        for c in order:
            if c != "splitk":
                t[f"{c}_speedup"] = tm["splitk"] / tm[c]
    t["faster"] = tm[order].idxmin(axis=1)
    return t


def stream_split(arm: str, N: int, K: int) -> dict:
    """The decode table's byte columns of ``arm``'s weight at (N, K), from the arm registry's
    count: ``weight_bytes`` (codes), ``scale_bytes`` and ``stream_bytes`` (both, what the
    bandwidth counts)."""
    c = registry.count(arm, N=N, K=K)
    return {"weight_bytes": c.parts["codes"], "scale_bytes": c.parts.get("scales", 0), "stream_bytes": c.weight_bytes}


def _row(name, N, K, M, arm, fmt, act, b, timing, clk, copy_Bps, spec, *, splits, grid, ctas, err,
         schedule="", same_Bps=math.nan, pattern_Bps=math.nan, pattern_ctas=math.nan):
    r = timing.rate(b["stream_bytes"])
    flop = float(registry.count(arm, M=M, N=N, K=K).flops)
    spec_bw = spec.bandwidth_Bps if spec is not None else math.nan
    return dict(shape=name, N=N, K=K, M=M, arm=arm, fmt=fmt, act=act, weight_bytes=b["weight_bytes"],
                scale_bytes=b["scale_bytes"], stream_bytes=b["stream_bytes"], flop=flop,
                bw_p20=r["p20"], bw_p50=r["p50"], bw_p80=r["p80"], tflops_p50=flop / timing.p50_s / 1e12,
                copy_Bps=copy_Bps, fraction_of_copy=r["p50"] / copy_Bps, spec_Bps=spec_bw,
                fraction_of_spec=r["p50"] / spec_bw, splits=splits, grid=grid, ctas_per_sm=ctas,
                check_relerr=err, schedule=schedule, same_copy_Bps=same_Bps,
                fraction_of_same_copy=r["p50"] / same_Bps, **harness.timing_columns(timing, clk),
                pattern_Bps=pattern_Bps, pattern_fraction_of_copy=pattern_Bps / copy_Bps,
                fraction_of_pattern=r["p50"] / pattern_Bps, pattern_ctas_per_sm=pattern_ctas)


# --------------------------------------------------------------------------------------
# Nsight Compute (GPU; the workload runs in ncu's child process)
# --------------------------------------------------------------------------------------
NCU_ENV = "FP8LAB_DECODE_NCU"


def ncu_workload() -> None:
    """The profiled program: every arm once at M tokens (cfg "M", default 1: the notebook's
    profile) between cudaProfilerStart / Stop, after a warm-up outside the profiled range; then the
    weight-only peers named in ``peers`` (the original Marlin, the seed's subject: C3's and C5's
    seed rows), each on weights it packed itself. Configuration from $FP8LAB_DECODE_NCU (JSON)."""
    import torch

    cfg = json.loads(os.environ[NCU_ENV])
    N, K, act = cfg["N"], cfg["K"], cfg["act"]
    M = int(cfg.get("M", 1))
    tdt = torch.bfloat16 if act == "bf16" else torch.float16
    calls = []
    for fmt in cfg["formats"]:
        kw = dict(cfg.get("launch", {}).get(fmt, {}))
        if kw.get("schedule") == "rows":
            pw_host, _ = gemv_rows.random_rows(fmt, N, K, act=act, seed=cfg.get("seed", 0))
        else:
            pw_host, _ = wo.random_weight(fmt, N, K, act=act, seed=cfg.get("seed", 0), keep_codes=False)
        pw = pw_host.to("cuda")
        x = torch.randn(M, K, device="cuda").to(tdt)
        if kw.get("schedule") == "rows":
            calls.append(lambda x=x, pw=pw: gemv_rows.gemv(x, pw))
        else:
            calls.append(lambda x=x, pw=pw, kw=kw: wo.gemv_w16(x, pw, **kw))
    if cfg.get("cublas", True):
        w = (0.02 * torch.randn(N, K, device="cuda")).to(torch.bfloat16)
        xb = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        calls.append(lambda: torch.mm(xb, w.t()))
    if cfg.get("stream", True):
        # C3's reference: a streaming kernel moving the bf16 weight's bytes (half read, half
        # written). torch's copy_ of a contiguous tensor is a cudaMemcpy, which ncu does not
        # profile; bitwise_not is an elementwise kernel with the same traffic and no math
        half = same_copy_half_bytes(registry.count(CUBLAS, N=N, K=K).weight_bytes)
        src = torch.arange(half // 4, device="cuda", dtype=torch.int32)
        dst = torch.empty_like(src)
        calls.append(lambda: torch.bitwise_not(src, out=dst))
    for p in cfg.get("peers", []):
        from ..peers import adapters, harness as peer_harness

        prep = adapters.WEIGHT_ONLY[p](adapters.dense_weight(N, K, cfg.get("seed", 0)))
        pdt = peer_harness.act_dtype(prep.act)
        xp = torch.randn(M, K, device="cuda").to(pdt)
        out = torch.empty(M, N, dtype=pdt, device="cuda") if prep.takes_out else None
        calls.append(lambda prep=prep, xp=xp, out=out: prep.call(prep.state, xp, out))
    from ..toolchain import profile

    # two warm-up calls each: module loads, cuBLAS heuristics, split choice
    profile.profiled_once_each(calls, warmups=2)


def launch_of_best(df: pd.DataFrame, shape_name: str, M: int = 1) -> dict:
    """{fmt: gemv_w16 keyword arguments} of the fastest timed tile schedule per format at (shape,
    M), for :func:`profile_decode`: ncu profiles the tile kernels (C5's and C8's subject, the seed's
    tensor-core dequant design), never the rows schedule (gemv_rows: no tensor cores)."""
    if "schedule" in df:
        df = df[df["schedule"] != "rows"]
    d = best_schedule(df)
    d = d[(d["shape"] == shape_name) & (d["M"] == M) & (d["arm"] != CUBLAS)]
    return {r["fmt"]: ({"schedule": r["schedule"]} if r.get("schedule") in wo.SCHEDULES else {})
            for _, r in d.iterrows()}


def profile_decode(shape_name: str, out: Path, *, formats: Sequence[str] = wo.FORMATS, act: str = "bf16",
                   cublas: bool = True, seed: int = 0, timeout: float = 900,
                   launch: Optional[dict] = None, peers: Sequence[str] = (), M: int = 1) -> Path:
    """Profile :func:`ncu_workload` for one shape at ``M`` tokens; returns the .ncu-rep path.
    ``launch``: {fmt: gemv_w16 keyword arguments} (e.g. :func:`launch_of_best`; default launches
    otherwise). ``peers``: weight-only peers to profile too (ids in PEER_KERNELS: the original Marlin)."""
    from ..toolchain import profile

    sh = _shape(shape_name)
    env = dict(os.environ)
    if isinstance(M, bool) or not isinstance(M, int) or not 1 <= M <= 64:
        raise ValueError(f"M must be an integer in 1..64 (decode), got {M!r}")
    bad = [p for p in peers if p not in PEER_KERNELS]
    if bad:
        raise ValueError(f"no kernel name known for peers {bad}; profilable: {sorted(PEER_KERNELS)}")
    env[NCU_ENV] = json.dumps(dict(N=sh.N, K=sh.K, act=act, formats=list(formats), cublas=cublas, seed=seed,
                                   launch=launch or {}, peers=list(peers), M=M))
    return profile.profile("fp8lab.experiments.decode:ncu_workload", out, timeout=timeout, env=env,
                           metrics=profile.DEFAULT_METRICS + profile.STALL_METRICS + C8_METRICS,
                           extra=["--profile-from-start", "off"])


#: C8's measured corrections (sm_90 names): issued instructions (executed + replays) and the
#: cycles each SM sub-partition was active, beside DEFAULT_METRICS' executed instructions,
#: duration and clock. table column -> metric.
C8_METRIC_COLUMNS = {"inst_issued": "smsp__inst_issued.sum", "cycles_active": "smsp__cycles_active.avg"}
C8_METRICS = tuple(C8_METRIC_COLUMNS.values())


def read_c8_metrics(path) -> pd.DataFrame:
    """C8_METRICS of every profiled kernel of a report: one row per (range, action), the order
    and keys of :func:`fp8lab.toolchain.profile.read_report` (merge on them); NaN where not collected."""
    from ..toolchain import profile

    rows = []
    for ri, ai, a in profile._actions(profile.load_report(path)):
        row = {"range": ri, "action": ai}
        for col, name in C8_METRIC_COLUMNS.items():
            row[col] = profile._num(profile._value(a, (name,)))
        rows.append(row)
    return pd.DataFrame(rows, columns=["range", "action", *C8_METRIC_COLUMNS])


#: the streaming kernel of :func:`ncu_workload` (torch's elementwise kernel, named so by torch)
STREAM_KERNEL = "elementwise_kernel"
STREAM_ARM = "copy_d2d"


#: vLLM's Marlin kernels are one template, ``marlin::Marlin<scalar_t, w_type_id, ...>``: the weight
#: format is vLLM's ScalarType id, a template argument (``ScalarType.id`` of uint4b8, uint8b128,
#: float8_e4m3fn at kernels-community vllm-quantization @ 8836a01; a test checks them against the
#: source where it is unpacked). ncu's short name of both Marlins is ``Marlin``: the ids are read
#: from the mangled name (``Ll<id>E``) or the demangled one.
VLLM_MARLIN_TYPE_IDS = {"peer_vllm_marlin_fp8": 2814749767172868, "peer_vllm_marlin_int8": 1125899923621888,
                        "peer_vllm_marlin_int4": 1125899907892224}
#: weight-only peers :func:`ncu_workload` can profile: arm id -> a pattern of ncu's kernel name
#: (short name, then the mangled one); vLLM's first, then the original Marlin's one kernel,
#: ``Marlin<...>`` outside any namespace (mangled ``_Z6Marlin``)
PEER_KERNELS = {
    **{arm: re.compile(rf"(?:_ZN6marlin6MarlinI\w*?L[lx]{i}E|marlin::Marlin<[^,<>]+,\s*\(?(?:long\)\s*)?{i}l?\b)")
       for arm, i in VLLM_MARLIN_TYPE_IDS.items()},
    "peer_marlin_int4": re.compile(r"(?<![A-Za-z0-9_:])Marlin(?![A-Za-z0-9_])|(?<![A-Za-z0-9_])_Z6MarlinI"),
}


def arm_of_kernel(name: str, mangled: Optional[str] = None) -> str:
    """fp8lab arm of a profiled kernel: the weight-only kernels by name, a profiled peer's kernel
    by PEER_KERNELS (on the name and its mangled form), torch's elementwise kernel is the
    streaming reference (``copy_d2d``), anything else (cuBLAS's gemm / gemv / split-K reduce
    kernels) is the cuBLAS arm."""
    for arm in wo.FORMAT_OF_ARM:
        if arm in name:
            return arm
    full = f"{name} {mangled}" if isinstance(mangled, str) and mangled else name
    for arm, pat in PEER_KERNELS.items():
        if pat.search(full):
            return arm
    if STREAM_KERNEL in name:
        return STREAM_ARM
    return CUBLAS


def ncu_tables(kernels: pd.DataFrame, opcodes: pd.DataFrame, shape_name: str,
               M: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-arm summary and per-opcode table of one shape's profile at M tokens (the M column).

    ``kernels`` / ``opcodes``: :func:`fp8lab.toolchain.profile.read_report` / ``read_opcodes`` of the
    report. A cuBLAS call that launched several kernels is summed (times, instructions) and
    averaged (DRAM %, issue %, weighted by duration). Instructions per weight element use the
    thread-level counts where ncu collected them (the seed's unit), else 32 x warp-level."""
    sh = _shape(shape_name)
    elems = sh.N * sh.K
    k = kernels.copy()
    mangled = k["kernel_mangled"] if "kernel_mangled" in k else pd.Series([None] * len(k), index=k.index)
    k["arm"] = [arm_of_kernel(n, m) for n, m in zip(k["kernel"], mangled)]
    o = opcodes.copy()
    if {"range", "action"} <= set(o) and {"range", "action"} <= set(k):
        # the opcode rows carry the short name only: each takes its kernel row's arm
        arm_at = {(r, a): arm for r, a, arm in zip(k["range"], k["action"], k["arm"])}
        o["arm"] = [arm_at.get((r, a)) or arm_of_kernel(n) for r, a, n in zip(o["range"], o["action"], o["kernel"])]
    else:
        o["arm"] = o["kernel"].map(arm_of_kernel)
    if "thread_inst" not in o or o["thread_inst"].isna().all():
        o["thread_inst"] = 32 * o["warp_inst"]
    o["thread_inst"] = o["thread_inst"].fillna(32 * o["warp_inst"])
    o["dequant_class"] = o["opcode"].map(lambda op: any(op.startswith(f) for f in gs.DEQUANT_FAMILIES))
    rows = []
    for arm, g in k.groupby("arm", sort=False):
        w = g["duration_s"].fillna(0)
        wsum = float(w.sum()) or 1.0
        og = o[o["arm"] == arm]
        fmt = peer_catalog.get(arm).fmt if arm in PEER_KERNELS else wo.FORMAT_OF_ARM.get(arm, "bf16")
        # the format's codes + scales; the streaming reference copies a bf16 tensor of the weight's size
        stream = registry.count(arm, N=sh.N, K=sh.K).weight_bytes if arm != STREAM_ARM else 2 * elems
        dur = float(g["duration_s"].sum())
        # C8's corrections where profiled: counts and active cycles add up over an arm's kernels
        corr = {c: (float(g[c].sum()) if c in g and g[c].notna().all() else math.nan)
                for c in ("inst_executed", *C8_METRIC_COLUMNS)}
        rows.append(dict(
            shape=shape_name, N=sh.N, K=sh.K, M=M, arm=arm, fmt=fmt, kernels=len(g),
            duration_s=dur, dram_pct=float((g["dram_pct"] * w).sum() / wsum),
            issue_active_pct=float((g["issue_active_pct"] * w).sum() / wsum),
            issue_slots_busy_pct=float((g["issue_slots_busy_pct"] * w).sum() / wsum),
            sm_clock_hz=float((g["sm_clock_hz"] * w).sum() / wsum),
            dram_bytes=float(g["dram_bytes"].sum()), stream_bytes=stream,
            eff_bw=stream / dur if dur > 0 else math.nan,
            registers=float(g["registers"].max()),
            warp_inst=float(og["warp_inst"].sum()), thread_inst=float(og["thread_inst"].sum()),
            inst_per_element=float(og["thread_inst"].sum()) / elems,
            warp_inst_per_element=float(og["warp_inst"].sum()) / elems,
            dequant_inst_per_element=float(og.loc[og["dequant_class"], "thread_inst"].sum()) / elems,
            **corr,
            **{c: float((g[c] * w).sum() / wsum) if g[c].notna().all() else math.nan
               for c in k.columns if c.startswith("stall_")},
        ))
    summary = pd.DataFrame(rows)
    o = o.assign(shape=shape_name, per_element=o["thread_inst"] / elems)
    per_op = o.groupby(["shape", "arm", "opcode"], as_index=False).agg(
        warp_inst=("warp_inst", "sum"), thread_inst=("thread_inst", "sum"), per_element=("per_element", "sum"),
        dequant_class=("dequant_class", "first"))
    return summary, per_op


def stall_table(summary: pd.DataFrame, top: int = 4) -> pd.DataFrame:
    """Where the warps of each profiled kernel wait (ncu's stall reasons, per issued instruction):
    one row per (shape, arm) with the total warp cycles per issued instruction, the share of each
    reason in it and the ``top`` largest reasons named. Empty when the profile has no stall
    metrics (reports collected before they were asked for)."""
    cols = [c for c in summary.columns if c.startswith("stall_")]
    if not cols or summary[cols].isna().all(axis=None):
        return pd.DataFrame()
    s = summary.dropna(subset=cols)
    total = s[cols].sum(axis=1)
    shares = s[cols].div(total.where(total > 0), axis=0)
    out = s[["shape", "arm"]].copy()
    out["cycles_per_issue"] = total
    for c in cols:
        out[c.replace("stall_", "share_")] = shares[c]
    out["top"] = [", ".join(f"{c[len('stall_'):]} {v:.0%}" for c, v in row.nlargest(top).items())
                  for _, row in shares.iterrows()]
    return out.reset_index(drop=True)


def c8_model(summary: pd.DataFrame, sms: int, *, schedulers_per_sm: int = 4) -> pd.DataFrame:
    """Seed 003's issue-slot model on the profiled kernels: predicted issue use =
    (thread instructions per element / 32) x elements per second / (SMs x schedulers x clock),
    with ncu's duration and SM clock; beside ncu's issue-active %.

    And the measured factors between the two (C8): ``issue_factor`` = issued / executed
    instructions (``inst_issued``, ``inst_executed`` where profiled: replays), ``active_fraction``
    = active / elapsed SM-sub-partition cycles (``cycles_active`` over duration x clock: ncu's
    issue-active % is per *active* cycle, the model per elapsed one), and ``warp_factor`` =
    executed warp instructions / (thread instructions / 32) (partial warps).
    ``issue_corrected_pct`` = predicted x issue_factor / active_fraction: the two corrections
    seed 003's model leaves out by its definition (it counts executed instructions per elapsed
    cycle). The partial-warp factor is shown but not applied: with it the product is ncu's own
    issue-active % by definition (issued instructions / active cycles), a comparison that could
    not fail; without it, what is left over is the model's instruction count (thread
    instructions / 32) against the warp instructions really executed. NaN where not measured."""
    from ..facts import roofline

    out = summary.copy()
    pred = []
    for _, r in out.iterrows():
        eps = r["N"] * r["K"] / r["duration_s"]
        if not (r["inst_per_element"] > 0 and eps > 0 and r["sm_clock_hz"] > 0):
            pred.append(math.nan)          # e.g. the streaming kernel of a profile without its opcodes
            continue
        pred.append(100 * roofline.issue_slot_utilisation(r["inst_per_element"], eps, sms, r["sm_clock_hz"],
                                                          schedulers_per_sm=schedulers_per_sm))
    out["issue_predicted_pct"] = pred
    out["issue_model_error"] = out["issue_predicted_pct"] / out["issue_active_pct"] - 1

    def col(c):
        return out[c].astype(float) if c in out else pd.Series(np.nan, index=out.index)
    out["warp_factor"] = col("warp_inst") * 32 / col("thread_inst")
    out["issue_factor"] = col("inst_issued") / col("inst_executed")
    out["active_fraction"] = col("cycles_active") / (col("duration_s") * col("sm_clock_hz"))
    out["issue_corrected_pct"] = out["issue_predicted_pct"] * out["issue_factor"] / out["active_fraction"]
    return out


# --------------------------------------------------------------------------------------
# Tables and verdicts (CPU)
# --------------------------------------------------------------------------------------
def parity(df: pd.DataFrame, M: int = 1) -> pd.DataFrame:
    """FP vs INT at the same width (C4): one row per (shape, pair) at ``M``: the two effective
    bandwidths (p50) and fp / int - 1."""
    rows = []
    d = df[df["M"] == M]
    for sh, g in d.groupby("shape", sort=False):
        bw = g.set_index("fmt")["bw_p50"]
        for fp, it in wo.PAIRS.items():
            if fp in bw and it in bw:
                rows.append(dict(shape=sh, M=M, fp=fp, int=it, bw_fp=bw[fp], bw_int=bw[it],
                                 rel_diff=bw[fp] / bw[it] - 1))
    return pd.DataFrame(rows, columns=["shape", "M", "fp", "int", "bw_fp", "bw_int", "rel_diff"])


def versus_peers(df: pd.DataFrame, peers: Optional[pd.DataFrame]) -> pd.DataFrame:
    """Each of fp8lab's weight-only formats against the fastest peer of the same weight format
    measured in the same run, per (shape, M, fmt), by time (``own_over_peer`` = peer time /
    fp8lab time, > 1: fp8lab faster). Formats are compared only with themselves: a peer's scales
    may differ (``peer_scales``), the weight codes and their bytes per weight do not."""
    from ..peers import report

    cols = ["shape", "M", "fmt", "own_arm", "own_time_us", "best_peer", "peer_time_us", "own_over_peer", "peer_scales"]
    m = report.measured(peers)
    if m.empty:
        return pd.DataFrame(columns=cols)
    m = m.assign(fmt=[peer_catalog.get(a).fmt for a in m["arm"]])
    v = report.versus_best_peer(df, m, list(wo.FORMAT_OF_ARM), keys=("shape", "M", "fmt"), metric="time_p50_s",
                                higher=False)
    v["peer_scales"] = [peer_catalog.get(a).scales for a in v["best_peer"]]
    v["own_time_us"], v["peer_time_us"] = v["own"] * 1e6, v["peer"] * 1e6
    return v[cols]


def targets(df: pd.DataFrame, peers: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """Issue 22's decode targets (see TARGET_*), one row per check: the measured ``value``, its
    ``goal``, whether it is ``met``, the ``shortfall`` (how much faster it would have to be) and
    what the goal came from (``reference``). ``df``: one row per (shape, arm, M) (best_schedule);
    ``peers``: the peers table of the same run (their rows: see versus_peers). Where ``df`` has the
    access pattern's columns (:data:`PATTERN_COLUMNS`), ``pattern_value`` is the same target
    computed from the pattern's rates, and a miss is ``limited_by`` :data:`LIMIT_PATTERN` (the
    pattern misses the goal too) or :data:`LIMIT_WORK` (the pattern meets it)."""
    rows = []
    if "pattern_Bps" not in df:
        df = df.assign(pattern_Bps=math.nan, pattern_fraction_of_copy=math.nan)

    def add(target, sh, M, arm, value, goal, reference, strict=False, pattern=math.nan):
        met = bool(value > goal) if strict else bool(value >= goal)
        pattern = float(pattern)
        why = "" if met or not math.isfinite(pattern) else (LIMIT_PATTERN if pattern < goal else LIMIT_WORK)
        rows.append(dict(target=target, shape=sh, M=int(M), arm=arm, value=value, goal=goal, met=met,
                         shortfall=max(0.0, goal / value - 1) if value > 0 else math.inf, reference=reference,
                         pattern_value=pattern, limited_by=why))

    big = df[df["N"] * df["K"] >= TARGET_MIN_WEIGHT_BYTES]
    m1 = big[big["M"] == 1]
    for sh, g in m1.groupby("shape", sort=False):
        frac = g.set_index("arm")["fraction_of_copy"]
        pfrac = g.set_index("arm")["pattern_fraction_of_copy"]
        if CUBLAS not in frac:
            continue
        cb = float(frac[CUBLAS])
        nk = int(g["N"].iloc[0]) * int(g["K"].iloc[0])
        goal8 = max(cb, TARGET_BIG_FRACTION) if nk >= TARGET_BIG_BYTES else cb
        ref8 = f"cuBLAS BF16 at {cb:.3f} of copy" + (
            f"; >= {TARGET_BIG_FRACTION:.2f} on >= {TARGET_BIG_BYTES / 1e6:.0f} MB" if nk >= TARGET_BIG_BYTES else "")
        for f in ("fp8", "int8"):
            if wo.ARMS[f] in frac:
                add("8-bit M=1 fraction of copy", sh, 1, wo.ARMS[f], float(frac[wo.ARMS[f]]), goal8, ref8,
                    pattern=pfrac[wo.ARMS[f]])
        if wo.ARMS["int4"] in frac:
            add("INT4 M=1 fraction of copy", sh, 1, wo.ARMS["int4"], float(frac[wo.ARMS["int4"]]),
                TARGET_INT4_OF_BF16 * cb, f"{TARGET_INT4_OF_BF16:.2f} x cuBLAS BF16's {cb:.3f}",
                pattern=pfrac[wo.ARMS["int4"]])
        bw1 = g.set_index("arm")["bw_p50"]
        pbw1 = g.set_index("arm")["pattern_Bps"]
        if wo.ARMS["nvfp4"] in bw1 and wo.ARMS["int4"] in bw1:
            add("NVFP4 / INT4 bandwidth at M=1", sh, 1, wo.ARMS["nvfp4"],
                float(bw1[wo.ARMS["nvfp4"]] / bw1[wo.ARMS["int4"]]), 1 - TARGET_FP_INT,
                f"within {TARGET_FP_INT:.0%} of {wo.ARMS['int4']} (FP = INT)",
                pattern=pbw1[wo.ARMS["nvfp4"]] / pbw1[wo.ARMS["int4"]])
    for (sh, arm), g in big[big["arm"].isin(list(wo.FORMAT_OF_ARM))].groupby(["shape", "arm"], sort=False):
        bwm = g.set_index("M")["bw_p50"]
        pbwm = g.set_index("M")["pattern_Bps"]
        if 1 in bwm and 16 in bwm:
            add("M=16 rate / M=1 rate", sh, 16, arm, float(bwm[16] / bwm[1]), TARGET_M16_OF_M1,
                f"{TARGET_M16_OF_M1:.2f} x its own M=1 rate", pattern=pbwm[16] / pbwm[1])
    vp = versus_peers(big, peers)
    for r in vp[vp["M"] <= TARGET_PEER_MAX_M].itertuples():
        add("faster than the best peer of its format", r.shape, r.M, r.own_arm, float(r.own_over_peer), 1.0,
            f"{r.best_peer} time / this time ({r.peer_scales})", strict=True)
    return pd.DataFrame(rows, columns=TARGET_COLUMNS)


def _v(claim, verdict, figure, reason="", *, subject, rule, variant=""):
    from ..report import claims

    return claims.Verdict(claim=claim, verdict=verdict, our_figure=figure, reason=reason, subject=subject,
                          rule=rule, variant=variant)


#: the seed's subject for C3, C4, C5: Marlin, measured as a peer arm (issue 17) whose id starts so
MARLIN_PREFIX = "peer_marlin"
#: every Marlin peer arm: the original (``peer_marlin_*``) and vLLM's (``peer_vllm_marlin_*``)
MARLIN_ARMS = tuple(p for p in peer_catalog.ids("weight_only") if "marlin" in p)
MARLIN_NOT_RUN = ("Marlin not measured in this run: unpack the original Marlin's and vLLM's Marlin's sources "
                  "(python scripts/peers_offline.py --sources; make run builds them) and re-run this notebook "
                  "(peer arms starting 'peer_marlin' and 'peer_vllm_marlin')")
#: streaming kernels whose ncu DRAM % is C3's reference: the copy profiled beside the GEMVs, and
#: cuBLAS BF16's GEMV (a weight stream with almost no math)
STREAM_ARMS = (STREAM_ARM, CUBLAS)
#: C3: DRAM-bound = at least this fraction of the best DRAM % a streaming kernel reaches under ncu on
#: the same device (the seed's 91-94% of peak; this card's streaming kernels reach ~83-86% of peak)
C3_OF_STREAM = 0.90
#: C3: the issue-slot half, the seed's 13-33% with a little room
C3_ISSUE_MAX = 0.40
C4_KIND = 2 * SEED_C4_PARITY
C5_TOL, C5_KIND_TOL = 0.10, 0.25
#: C8: the seed's model met ncu within ~2% (32% vs 32.5%): agreement within this, relative
C8_AGREE = 0.05


def _ours(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of fp8lab's four weight-only kernels."""
    return df[df["arm"].isin(list(wo.FORMAT_OF_ARM))]


def _marlin(df: Optional[pd.DataFrame]) -> pd.DataFrame:
    """Rows of Marlin kernels (the seed's subject): the original Marlin and vLLM's Marlin GEMMs."""
    if df is None or "arm" not in df:
        return pd.DataFrame()
    return df[df["arm"].astype(str).map(_is_marlin)]


def _is_marlin(arm: str) -> bool:
    return arm.startswith(MARLIN_PREFIX) or arm.startswith("peer_vllm_marlin")


def _marlin_variant(*dfs) -> str:
    """The seed rows' variant: which Marlin ran ("original Marlin", "vLLM Marlin", "" for both / none)."""
    arms = set()
    for d in dfs:
        m = _marlin(d)
        if len(m):
            arms |= set(m["arm"].astype(str))
    if not arms:
        return ""
    if all(a.startswith(MARLIN_PREFIX) for a in arms):
        return "original Marlin"
    if all("vllm" in a for a in arms):
        return "vLLM Marlin"
    return "original and vLLM Marlin"


def stream_reference(ncu: Optional[pd.DataFrame]) -> Optional[pd.Series]:
    """The profiled streaming kernel with the highest DRAM % (C3's reference): the copy where the
    profile has it, else cuBLAS BF16's GEMV; None without either."""
    if ncu is None or ncu.empty:
        return None
    st = ncu[ncu["arm"].isin(STREAM_ARMS) & ncu["dram_pct"].notna()]
    if st.empty:
        return None
    return st.loc[st["dram_pct"].idxmax()]


def _span(v: pd.Series) -> str:
    """'42%-77%' for fractions, or one figure when they round to the same percent."""
    lo, hi = f"{v.min():.0%}", f"{v.max():.0%}"
    return lo if lo == hi else f"{lo}-{hi}"


def _c3_one(d1: pd.DataFrame, n: pd.DataFrame, ref: Optional[pd.Series], subject: str, variant: str = ""):
    bar_txt = (f"DRAM-bound: every kernel's ncu DRAM % >= {C3_OF_STREAM:.0%} of the best streaming kernel's "
               f"({'/'.join(STREAM_ARMS)}) on the same device; issue slots active <= {C3_ISSUE_MAX:.0%}")
    rule = (f"holds if {bar_txt}; holds-in-kind if DRAM-bound but issue > {C3_ISSUE_MAX:.0%}; differs if not "
            "DRAM-bound; not-run without ncu")
    fr = d1["fraction_of_copy"].dropna() if len(d1) else pd.Series(dtype=float)
    fig_t = (f"; M=1 effective bandwidth {_span(fr)} of the copy bandwidth" if len(fr) else "")
    if n.empty or ref is None:
        why = "no ncu profile of these kernels" if n.empty else "no streaming kernel in the ncu profile"
        return _v("C3", "not-run", "M=1 not profiled" + fig_t, f"{why} (needs Nsight Compute, measure mode)",
                  subject=subject, rule=rule, variant=variant)
    rel = n["dram_pct"] / float(ref["dram_pct"])
    issue = n["issue_active_pct"] / 100
    fig = (f"ncu M=1: DRAM {_span(n['dram_pct'] / 100)} of peak = {_span(rel)} of {ref['arm']}'s "
           f"{ref['dram_pct']:.0f}%; issue slots {_span(issue)} active" + fig_t)
    if rel.min() < C3_OF_STREAM:
        w = n.loc[rel.idxmin()]
        return _v("C3", "differs", fig, f"{w['arm']} ({w['shape']}) reaches {w['dram_pct']:.0f}% of DRAM peak, "
                  f"{rel.min():.0%} of the streaming reference (< {C3_OF_STREAM:.0%})",
                  subject=subject, rule=rule, variant=variant)
    if issue.max() > C3_ISSUE_MAX:
        w = n.loc[issue.idxmax()]
        return _v("C3", "holds-in-kind", fig, f"DRAM-bound, but {w['arm']} keeps {w['issue_active_pct']:.0f}% "
                  f"of issue slots busy (seed: 13-33%)", subject=subject, rule=rule, variant=variant)
    return _v("C3", "holds", fig, subject=subject, rule=rule, variant=variant)


def c3_verdicts(df: pd.DataFrame, ncu: Optional[pd.DataFrame] = None) -> list:
    """C3 (seed: at M = 1 Marlin uses 91-94% of DRAM bandwidth and 13-33% of issue slots).

    The bar is relative to this device: a kernel is DRAM-bound when its ncu DRAM % is at least
    C3_OF_STREAM of the best DRAM % a streaming kernel (the copy profiled beside the GEMVs, or
    cuBLAS BF16's GEMV) reaches in the same profile; the seed's 85%-of-peak reading would ask for
    more than any streaming kernel reaches on an H200. Two rows: ``analogue`` (fp8lab's kernels)
    and ``seed`` (Marlin, from ``peer_marlin*`` rows; not-run when absent)."""
    d1 = df[df["M"] == 1]
    ref = stream_reference(ncu)
    n_ours = _ours(ncu) if ncu is not None and not ncu.empty else pd.DataFrame()
    rows = [_c3_one(_ours(d1), n_ours, ref, "analogue")]
    n_m, d_m = _marlin(ncu), _marlin(d1)
    if n_m.empty and d_m.empty:
        rows.append(_v("C3", "not-run", "Marlin not measured", MARLIN_NOT_RUN, subject="seed",
                       rule=rows[0].rule))
    else:           # profiled: judged as fp8lab's kernels; timed only: not-run, its timing shown
        rows.append(_c3_one(d_m, n_m, ref, "seed", _marlin_variant(d_m, n_m)))
    return rows


def _c4_one(p: pd.DataFrame, subject: str, variant: str = "", ran: Sequence[str] = ()):
    rule = (f"holds if every same-width FP/INT pair at M=1 is within {SEED_C4_PARITY:.1%} on every shape; "
            f"holds-in-kind within {C4_KIND:.1%}; differs beyond")
    kw = dict(subject=subject, rule=rule, variant=variant)
    if p.empty:
        if subject == "seed":
            why = (f"no same-width FP / INT pair among the Marlin kernels measured ({', '.join(ran)}; the Marlin "
                   "peers fp8lab knows are the original INT4 and vLLM's FP8, INT8 and INT4)" if ran else MARLIN_NOT_RUN)
            return _v("C4", "not-run", "no same-width FP / INT pair of Marlin kernels measured at M = 1", why, **kw)
        return _v("C4", "not-run", "no FP / INT pair measured at M = 1", "a pair's arms were not in the sweep", **kw)
    worst = p.loc[p["rel_diff"].abs().idxmax()]
    fig = "; ".join(f"{r['fp']}/{r['int']} {r['rel_diff']:+.1%} ({r['shape']})" for _, r in p.iterrows())
    a = abs(worst["rel_diff"])
    if a <= SEED_C4_PARITY:
        return _v("C4", "holds", fig, **kw)
    why = (f"largest gap {worst['fp']} vs {worst['int']} on {worst['shape']}: {worst['rel_diff']:+.1%} "
           f"(seed: within {SEED_C4_PARITY:.1%})")
    return _v("C4", "holds-in-kind" if a <= C4_KIND else "differs", fig, why, **kw)


def c4_verdicts(df: pd.DataFrame) -> list:
    """C4: same-width FP and INT formats run at the same effective bandwidth at M = 1 (seed:
    within 1.5%). ``analogue``: fp8lab's four kernels; ``seed``: the Marlin rows (MARLIN_ARMS,
    paired by their ``fmt``)."""
    m = _marlin(df)
    ran = sorted(set(m.loc[m["M"] == 1, "arm"].astype(str))) if len(m) else []
    pairs = parity(m)
    judged = m[m["fmt"].isin(set(pairs["fp"]) | set(pairs["int"]))] if len(pairs) else m
    return [_c4_one(parity(_ours(df)), "analogue"),
            _c4_one(pairs, "seed", _marlin_variant(judged), ran)]


def _c5_one(n: pd.Series, static_txt: str, subject: str, variant: str = ""):
    lo, hi = SEED_C5_RANGE
    rule = (f"holds if FP8 is within {C5_TOL:.0%} of {SEED_C5_FP8} and every format within "
            f"[{lo * (1 - C5_TOL):.2f}, {hi * (1 + C5_TOL):.2f}] dequant instr./element ({C5_TOL:.0%} around the "
            f"seed's {lo}-{hi}); holds-in-kind if every format within [{lo * (1 - C5_KIND_TOL):.2f}, "
            f"{hi * (1 + C5_KIND_TOL):.2f}]; differs otherwise")
    if n.empty:
        if subject == "seed":
            return _v("C5", "not-run", "Marlin not profiled",
                      "no Marlin kernel in this run's ncu profile (notebook 08 profiles the original Marlin beside "
                      "fp8lab's kernels when it was timed at M = 1 on every profiled shape); " + MARLIN_NOT_RUN,
                      subject=subject, rule=rule, variant=variant)
        return _v("C5", "not-run", "no ncu profile", "needs Nsight Compute's per-opcode counts (measure mode)",
                  subject=subject, rule=rule, variant=variant)
    fig = ", ".join(f"{f} {v:.2f}" for f, v in n.items()) + " dequant instr./element (ncu, M=1)" + static_txt
    if "fp8" not in n:
        if subject == "seed":
            # the original Marlin is INT4 only: the range half of the claim, judged alone
            inside = n.min() >= lo * (1 - C5_TOL) and n.max() <= hi * (1 + C5_TOL)
            return _v("C5", "holds-in-kind" if inside else "differs", fig,
                      f"only {', '.join(n.index)} profiled (no FP8 Marlin here, so the FP8 figure is not judged); "
                      f"{n.min():.2f}-{n.max():.2f} {'inside' if inside else 'outside'} "
                      f"[{lo * (1 - C5_TOL):.2f}, {hi * (1 + C5_TOL):.2f}]", subject=subject, variant=variant,
                      rule=rule + "; without FP8 (the seed's Marlin only INT4 here): holds-in-kind if every "
                      f"format within [{lo * (1 - C5_TOL):.2f}, {hi * (1 + C5_TOL):.2f}], else differs")
        return _v("C5", "not-run", fig, "FP8 was not profiled", subject=subject, rule=rule, variant=variant)
    rel = abs(n["fp8"] / SEED_C5_FP8 - 1)
    if rel <= C5_TOL and n.min() >= lo * (1 - C5_TOL) and n.max() <= hi * (1 + C5_TOL):
        return _v("C5", "holds", fig, subject=subject, rule=rule, variant=variant)
    kind = n.min() >= lo * (1 - C5_KIND_TOL) and n.max() <= hi * (1 + C5_KIND_TOL)
    return _v("C5", "holds-in-kind" if kind else "differs", fig,
              f"FP8 {n['fp8']:.2f} vs the seed's {SEED_C5_FP8} ({rel:.0%} apart); range {n.min():.2f}-{n.max():.2f} "
              f"vs {lo}-{hi}", subject=subject, rule=rule, variant=variant)


def c5_verdicts(ncu: Optional[pd.DataFrame], static: Optional[pd.DataFrame] = None, act: str = "bf16") -> list:
    """C5: dequant costs 1.8-2.9 instructions per weight element (FP8: 1.81), executed counts
    from ncu's per-opcode metrics (the dequant class: LOP3 / SHF / PRMT / HADD2 / HFMA2 / HMUL2
    / FADD / IMAD.SHL / SHFL), averaged over the profiled shapes. ``static``:
    :func:`fp8lab.experiments.gemv_sass.gemv_sass_counts` rows, quoted beside on the analogue row
    (those of ``act``). ``analogue``: fp8lab's kernels; ``seed``: ``peer_marlin*`` rows."""
    static_txt = ""
    if static is not None and len(static):
        st = static[static["act"] == act] if "act" in static else static
        s = st[st["dequant_class"]].groupby("fmt")["per_element"].sum()
        static_txt = "; static SASS " + ", ".join(f"{f} {v:.2f}" for f, v in s.items())
    have = ncu is not None and not ncu.empty
    ours = _ours(ncu).groupby("fmt")["dequant_inst_per_element"].mean() if have else pd.Series(dtype=float)
    # the seed's figures are vLLM's Marlin kernels (its FP8 Marlin): judged where they were
    # profiled, one kernel per format (never averaged with the original Marlin's INT4, which is
    # quoted beside); the original Marlin alone otherwise
    m = _marlin(ncu) if have else pd.DataFrame()
    vllm = m[m["arm"].astype(str).str.startswith("peer_vllm_marlin")] if len(m) else m
    judged = vllm if len(vllm) else m
    marl = judged.groupby("fmt")["dequant_inst_per_element"].mean() if len(judged) else pd.Series(dtype=float)
    beside = ""
    if len(vllm) and len(m) > len(vllm):
        rest = m.drop(vllm.index).groupby("arm")["dequant_inst_per_element"].mean()
        beside = "; beside (not judged): " + ", ".join(f"{a} {v:.2f}" for a, v in rest.items())
    return [_c5_one(ours, static_txt, "analogue"),
            _c5_one(marl, beside, "seed", _marlin_variant(judged) if len(judged) else "")]


def c8_verdict(model: Optional[pd.DataFrame]):
    """C8 (analogue): seed 003's issue-slot model against ncu's issue-active % on fp8lab's
    kernels (seed: 32% predicted vs 32.5% measured).

    holds if every kernel's prediction is within C8_AGREE (relative) of ncu's figure; otherwise
    holds-in-kind only if the *corrected* prediction (the model times the two measured factors
    its definition leaves out, :func:`c8_model`: issued / executed instructions and elapsed /
    active cycles) is within C8_AGREE for every kernel, i.e. a measured correction explains the
    gap; differs otherwise, including when the correction was not measured. The partial-warp
    factor is reported, never applied (applied too, the corrected model equals ncu's figure by
    definition)."""
    rule = (f"holds if |model / ncu - 1| <= {C8_AGREE:.0%} for every kernel; holds-in-kind if not but the model "
            "x measured issued/executed instructions x elapsed/active cycles is within "
            f"{C8_AGREE:.0%} (partial warps shown, not applied); differs otherwise")
    if model is None or model.empty:
        return _v("C8", "not-run", "no ncu profile", "the measured side needs ncu (measure mode)",
                  subject="analogue", rule=rule)
    m = _ours(model)
    if m.empty:
        return _v("C8", "not-run", "no weight-only kernel in the ncu profile", "the profile lacks fp8lab's kernels",
                  subject="analogue", rule=rule)
    has_corr = "issue_corrected_pct" in m and m["issue_corrected_pct"].notna().all()
    by_shape = m.groupby("shape", sort=False) if "shape" in m and m["shape"].nunique() > 1 else [(None, m)]

    def one(r):
        c = f", corrected {r['issue_corrected_pct']:.1f}%" if has_corr else ""
        return f"{r['fmt']} predicted {r['issue_predicted_pct']:.1f}%{c} vs ncu {r['issue_active_pct']:.1f}%"
    fig = " | ".join((f"{shape}: " if shape else "") + "; ".join(one(r) for _, r in g.iterrows())
                     for shape, g in by_shape)
    worst = float(m["issue_model_error"].abs().max())
    if worst <= C8_AGREE:
        return _v("C8", "holds", fig, subject="analogue", rule=rule)
    if not has_corr:
        parts = []
        if "warp_factor" in m and m["warp_factor"].notna().all():
            parts.append(f"warp/thread inst. x{m['warp_factor'].min():.3f}-{m['warp_factor'].max():.3f} measured")
        return _v("C8", "differs", fig, f"model off by up to {worst:.0%}; "
                  + "; ".join(parts + ["issued/executed and active/elapsed cycles not in this profile"]),
                  subject="analogue", rule=rule)
    cerr = (m["issue_corrected_pct"] / m["issue_active_pct"] - 1).abs()
    cworst, w = float(cerr.max()), m.loc[cerr.idxmax()]
    where = " at ".join(str(w[c]) for c in ("arm", "shape") if c in m and pd.notna(w[c]))
    why = (f"model off by up to {worst:.0%}; measured factors: issued/executed x{m['issue_factor'].min():.3f}-"
           f"{m['issue_factor'].max():.3f}, active/elapsed cycles {m['active_fraction'].min():.3f}-"
           f"{m['active_fraction'].max():.3f}; corrected model off by up to {cworst:.2%}"
           f"{f' ({where})' if where else ''}, bar {C8_AGREE:.0%}; left over: partial warps "
           f"(warp/thread inst. x{m['warp_factor'].min():.3f}-{m['warp_factor'].max():.3f}, not in the model)")
    return _v("C8", "holds-in-kind" if cworst <= C8_AGREE else "differs", fig, why, subject="analogue", rule=rule)


def shape_table(shape_names: Sequence[str] = DEFAULT_SHAPES) -> pd.DataFrame:
    """The decode shapes with their weight bytes per format."""
    rows = []
    for n in shape_names:
        s = _shape(n)
        r = dict(shape=n, N=s.N, K=s.K, note=s.note)
        for f in wo.FORMATS:
            r[f"{f}_MiB"] = registry.count(wo.ARMS[f], N=s.N, K=s.K).weight_bytes / 2**20
        r["bf16_MiB"] = registry.count(CUBLAS, N=s.N, K=s.K).weight_bytes / 2**20
        rows.append(r)
    return pd.DataFrame(rows)
