"""Measured ceilings of the card (notebook 00): what the hardware actually gives.

One row per ceiling, each checked for correctness before it is timed:

| ceiling              | arm                     | work counted                                   |
| -------------------- | ----------------------- | ---------------------------------------------- |
| copy_bandwidth       | copy_d2d                | bytes read + bytes written, >= 2 GiB copied    |
| fp32_fma             | fma_peak                | 2 FLOP per FMA of our own kernel               |
| bf16_tensor          | cublas_bf16             | 2 M N K, bf16 in, bf16 out, fp32 accumulate    |
| fp8_tensor           | cublas_fp8_tensorwise   | 2 M N K, e4m3 in, one scale per tensor         |
| fp8_tensor_blockwise | cublaslt_blockwise      | 2 M N K, e4m3 in, 1x128 / 128x128 block scales |

The GEMMs are square (``gemm_size``^3) on random data (never zeros: a bf16 GEMM ran
13% faster on zeros on an H200). Bytes for a GEMM are the minimum (A and B read
once, C written once), so its row can sit on a roofline.

Rates are reported at p20 / p50 / p80 *of the rate* (the p20 rate is the p80 time),
beside the spec-sheet value for the same unit and the fraction p50 / spec.
Per-row clock columns come from the NVML sampler's window around that row.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from ..measure import harness
from ..facts import devices
from ..measure.clocks import ClockSampler
from ..measure.progress import progress as track
from ..emulate import blockscale

__all__ = ["CEILINGS", "measure_ceilings", "ceilings_for_roofline", "COLUMNS"]

#: ceiling -> (arm id, unit, spec precision or 'bandwidth')
CEILINGS = {
    "copy_bandwidth": ("copy_d2d", "B/s", "bandwidth"),
    "fp32_fma": ("fma_peak", "FLOP/s", "fp32"),
    "bf16_tensor": ("cublas_bf16", "FLOP/s", "bf16"),
    # the warp-level mma.sync path (wmma, HMMA.16816): the ceiling of any non-wgmma kernel on Hopper
    "bf16_mma_sync": ("hmma_peak", "FLOP/s", "bf16"),
    "fp8_tensor": ("cublas_fp8_tensorwise", "FLOP/s", "fp8"),
    "fp8_tensor_blockwise": ("cublaslt_blockwise", "FLOP/s", "fp8"),
}

COLUMNS = ["ceiling", "arm", "status", "unit", "size", "flop", "bytes", "time_p20_s",
           "time_p50_s", "time_p80_s", "rate_p20", "rate_p50", "rate_p80", "spec", "fraction_of_spec",
           "check", "check_value", "n_samples", "timing_method", "l2_flushed", "sm_mhz_median",
           "sm_mhz_min", "mem_mhz_median", "power_w_max", "clock_reasons", "clock_source", "clock_note"]

FP8_MAX = 448.0  # largest finite e4m3fn


# --------------------------------------------------------------------------------- arms
def _copy_arm(copy_gib: float):
    import torch

    n = int(copy_gib * 2**30) // 4
    src = torch.randn(n, device="cuda")                  # (n,) fp32, random: never zeros
    dst = torch.full_like(src, float("nan"))             # poisoned: a skipped write shows
    dst.copy_(src)
    torch.cuda.synchronize()
    ok = bool(torch.equal(dst, src))
    assert ok, "device-to-device copy did not reproduce its source"
    return dict(fn=lambda: dst.copy_(src), flop=0.0, bytes=2.0 * n * 4,
                size=f"{n * 4 / 2**30:.2f} GiB", check="bit-exact", check_value=0.0,
                keep=(src, dst))


def _fma_arm(sms: int, programs_per_sm: int, n_iters: int):
    from ..kernels import fma_peak

    small_err = fma_peak.check(fma_peak.small_config())
    cfg = fma_peak.default_config(sms, programs_per_sm=programs_per_sm, n_iters=n_iters)
    err = fma_peak.check(cfg, atol=1e-3)
    x0, out = fma_peak.make_buffers(cfg)
    return dict(fn=lambda: fma_peak.launch(x0, out, cfg), flop=fma_peak.flop(cfg),
                bytes=2.0 * cfg.chains * 4,
                size=(f"{cfg.n_programs} programs x {cfg.rows * cfg.block} chains x "
                      f"{cfg.steps} FMAs"),
                check="max abs err vs closed form", check_value=max(err, small_err),
                keep=(x0, out))


def _hmma_arm(sms: int):
    from ..kernels import hmma_peak

    small = hmma_peak.check(hmma_peak.HmmaConfig(blocks=3, n_iters=37))
    cfg = hmma_peak.default_config(sms)
    hmma_peak.check(cfg)
    a, b, out = hmma_peak.make_buffers(cfg)
    return dict(fn=lambda: hmma_peak.launch(a, b, out, cfg), flop=hmma_peak.flop(cfg), bytes=4.0 * out.numel(),
                size=f"{cfg.blocks} blocks x {hmma_peak.WARPS} warps x {hmma_peak.CHAINS} chains x {cfg.n_iters} wmma",
                check="bit-exact vs n_iters * (A @ B)", check_value=0.0 if small else math.nan,
                keep=(a, b, out))


def _bf16_arm(n: int, check_rows: int):
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)    # (M, K) bf16 row-major
    bt = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)   # (N, K) bf16 row-major
    c = torch.full((n, n), float("nan"), device="cuda", dtype=torch.bfloat16)  # (M, N)

    def fn():
        return torch.mm(a, bt.t(), out=c)

    err = harness.require("bf16 GEMM", fn(), a[:check_rows].double() @ bt.double().t())
    return dict(fn=fn, flop=2.0 * n**3, bytes=2.0 * (2 * n * n) + 2.0 * n * n,
                size=f"{n}x{n}x{n}", check="rel. err vs float64 (rows)", check_value=err,
                keep=(a, bt, c))


def _quant_tensorwise(x):
    """(e4m3 tensor, fp32 scalar scale) with x ~ q * scale."""
    import torch

    scale = (x.abs().amax().float() / FP8_MAX).clamp(min=1e-12)
    return (x.float() / scale).to(torch.float8_e4m3fn), scale


def _fp8_tensorwise_arm(n: int, check_rows: int):
    import torch

    a8, sa = _quant_tensorwise(torch.randn(n, n, device="cuda"))   # (M, K) e4m3, () fp32
    b8, sb = _quant_tensorwise(torch.randn(n, n, device="cuda"))   # (N, K) e4m3, () fp32
    sa, sb = sa.reshape(()), sb.reshape(())

    def fn():
        # cuBLAS FP8 wants TN: A row-major, B column-major (b8 (N, K) row-major, transposed)
        return torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    harness.poison_allocator((n, n))
    err = harness.require("FP8 per-tensor GEMM", fn(),
                          (a8[:check_rows].double() * sa.double()) @ (b8.double() * sb.double()).t())
    return dict(fn=fn, flop=2.0 * n**3, bytes=1.0 * (2 * n * n) + 2.0 * n * n,
                size=f"{n}x{n}x{n}", check="rel. err vs float64 of dequantised inputs (rows)",
                check_value=err, keep=(a8, b8, sa, sb))


def _fp8_blockwise_arm(n: int, check_rows: int):
    import torch
    import torch.nn.functional as F

    if n % 128 or (n // 128) % 4:
        raise ValueError(f"blockwise GEMM needs size a multiple of 512 (K/128 a multiple of 4), got {n}")
    kb = n // 128
    a = torch.randn(n, n, device="cuda")                          # (M, K) fp32
    b = torch.randn(n, n, device="cuda")                          # (N, K) fp32
    # activations: one scale per row per 128-wide K block
    sa = (a.view(n, kb, 128).abs().amax(-1) / FP8_MAX).clamp(min=1e-12)       # (M, K/128)
    a8 = (a.view(n, kb, 128) / sa[..., None]).view(n, n).to(torch.float8_e4m3fn)
    # weights: one scale per 128x128 block
    sb = (b.view(n // 128, 128, kb, 128).abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=1e-12)  # (N/128, K/128)
    b8 = (b.view(n // 128, 128, kb, 128) / sb[:, None, :, None]).view(n, n).to(torch.float8_e4m3fn)
    del a, b
    # cuBLASLt wants the 1x128 scales M-major: shape (M, K/128), strides (1, M)
    sa_mmajor = sa.t().contiguous().t()
    # and the 128x128 scales as sb.t(): shape (K/128, N/128), strides (1, K/128).
    # A wrong layout runs and returns wrong numbers (GPU-NOTES), hence the check below.
    sb_t = sb.t()

    def fn():
        return F.scaled_mm(a8, b8.t(), sa_mmajor, F.ScalingType.BlockWise1x128, sb_t,
                           F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)

    deq_a = blockscale.dequant(a8[:check_rows], sa[:check_rows], (1, 128))
    deq_b = blockscale.dequant(b8, sb, (128, 128))
    harness.poison_allocator((n, n))
    # a wrong scale layout gives ~0.35
    err = harness.require("FP8 blockwise GEMM", fn(), deq_a @ deq_b.t())
    del deq_a, deq_b
    return dict(fn=fn, flop=2.0 * n**3,
                bytes=1.0 * (2 * n * n) + 2.0 * n * n + 4.0 * (n * kb + kb * kb),
                size=f"{n}x{n}x{n}", check="rel. err vs float64 of dequantised inputs (rows)",
                check_value=err, keep=(a8, b8, sa_mmajor, sb))


# --------------------------------------------------------------------------------- driver
def measure_ceilings(copy_gib: float = 2.0, gemm_size: int = 8192, *,
                     ceilings: Optional[Sequence[str]] = None, warmup_ms: float = 25,
                     rep_ms: float = 200, fma_programs_per_sm: int = 48, fma_iters: int = 256,
                     check_rows: int = 256, sampler: Optional[ClockSampler] = None,
                     spec: Optional[devices.DeviceSpec] = None) -> pd.DataFrame:
    """Measure the ceilings on the current CUDA device; one row per ceiling.

    A ceiling the card cannot run (FP8 before sm_89, blockwise scaling without
    cuBLAS >= 12.9) gets ``status`` 'not-run: <why>' and NaN numbers instead of
    stopping the others. ``df.attrs['clocks']`` holds the sampler summary over the
    whole measurement (it goes into the table's meta sidecar).
    """
    import torch

    if copy_gib < 2.0:
        raise ValueError(f"copy_gib must be >= 2 (the copy must dwarf L2 and launch cost), got {copy_gib}")
    if gemm_size < 512 or gemm_size % 512:
        raise ValueError(f"gemm_size must be a multiple of 512, >= 512, got {gemm_size}")
    wanted = list(CEILINGS) if ceilings is None else list(ceilings)
    unknown = set(wanted) - set(CEILINGS)
    if unknown:
        raise ValueError(f"unknown ceilings {sorted(unknown)}; known: {list(CEILINGS)}")
    if not torch.cuda.is_available():
        raise RuntimeError("measure_ceilings needs a CUDA device")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    spec = spec if spec is not None else devices.spec_for(props.name)
    cc = (props.major, props.minor)
    torch.manual_seed(0)

    own_sampler = sampler is None
    if own_sampler:
        sampler = ClockSampler(uuid=str(getattr(props, "uuid", "")) or None, interval_s=0.02).start()

    builders = {
        "copy_bandwidth": lambda: _copy_arm(copy_gib),
        "fp32_fma": lambda: _fma_arm(props.multi_processor_count, fma_programs_per_sm, fma_iters),
        "bf16_tensor": lambda: _bf16_arm(gemm_size, check_rows),
        "bf16_mma_sync": lambda: _hmma_arm(props.multi_processor_count),
        "fp8_tensor": lambda: _fp8_tensorwise_arm(gemm_size, check_rows),
        "fp8_tensor_blockwise": lambda: _fp8_blockwise_arm(gemm_size, check_rows),
    }
    rows = []
    try:
        for name in track(wanted, desc="ceilings", unit="ceilings"):
            arm, unit, spec_kind = CEILINGS[name]
            row = {c: math.nan for c in COLUMNS}
            row.update(ceiling=name, arm=arm, unit=unit, check="", clock_reasons="", clock_source="",
                       clock_note="", timing_method="", size="")
            if spec is not None:
                row["spec"] = spec.bandwidth_Bps if spec_kind == "bandwidth" else (
                    spec.peak_flops(spec_kind) if spec.peak_flops(spec_kind) is not None else math.nan)
            if spec_kind == "fp8" and cc < (8, 9):
                row["status"] = f"not-run: no FP8 tensor cores before sm_89 (this is sm_{cc[0]}{cc[1]})"
                rows.append(row)
                continue
            try:
                built = builders[name]()
            except (RuntimeError, NotImplementedError, AttributeError, TypeError) as e:
                # e.g. blockwise scaling refused by an older cuBLAS or another arch:
                # record why, measure the rest
                row["status"] = f"not-run: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                rows.append(row)
                torch.cuda.empty_cache()
                continue
            timing, clk = harness.timed(built["fn"], sampler=sampler, method="events", warmup_ms=warmup_ms,
                                        rep_ms=rep_ms)
            work = built["bytes"] if unit == "B/s" else built["flop"]
            r = timing.rate(work)
            row.update(
                status="measured", size=built["size"], flop=built["flop"], bytes=built["bytes"],
                time_p20_s=timing.p20_s, time_p50_s=timing.p50_s, time_p80_s=timing.p80_s,
                rate_p20=r["p20"], rate_p50=r["p50"], rate_p80=r["p80"],
                check=built["check"], check_value=built["check_value"], n_samples=timing.n,
                timing_method=timing.method, l2_flushed=timing.flushed_l2, **clk,
            )
            if not math.isnan(row["spec"]) and row["spec"] > 0:
                row["fraction_of_spec"] = row["rate_p50"] / row["spec"]
            rows.append(row)
            del built
            torch.cuda.empty_cache()
    finally:
        if own_sampler:
            sampler.stop()
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.attrs["clocks"] = sampler.summary()
    df.attrs["spec_key"] = spec.key if spec is not None else None
    return df


def ceilings_for_roofline(df: pd.DataFrame) -> dict:
    """{'hbm': B/s, 'fp32', 'bf16', 'fp8', 'fp8_blockwise': FLOP/s} at p50 from a
    ceilings table; missing or not-run ceilings are left out."""
    key = {"copy_bandwidth": "hbm", "fp32_fma": "fp32", "bf16_tensor": "bf16",
           "fp8_tensor": "fp8", "fp8_tensor_blockwise": "fp8_blockwise"}
    out = {}
    for _, r in df.iterrows():
        k = key.get(r["ceiling"])
        v = r.get("rate_p50")
        if k and r.get("status") == "measured" and v is not None and np.isfinite(v) and v > 0:
            out[k] = float(v)
    return out
