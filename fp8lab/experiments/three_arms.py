"""Notebook 06: seed 001 on hardware: the scalar kernel, the WMMA W8A16 kernel and the W8A8
route, over M at DeepSeek-V3 shapes (claims B1, B3, B4, B7, B8, B9).

Arms (one id from file to table row to legend):

| arm                 | what                                              | extra per-step work timed    |
| ------------------- | ------------------------------------------------- | ---------------------------- |
| scalar_tiled        | seed 001's scalar shared-memory kernel (fp8 W)    | -                            |
| wmma_w8a16          | seed 001's WMMA bf16 kernel on fp8 W              | -                            |
| triton_blockwise    | fp8lab's Triton W8A8 (wgmma on Hopper)            | quant_act_warp (activations) |
| mma_blockwise       | fp8lab's mma.sync W8A8                            | quant_act_warp               |
| cublaslt_blockwise  | cuBLASLt 1x128 / 128x128 blockwise FP8            | quant_act_warp               |
| cublas_bf16         | cuBLAS on weights dequantised to bf16             | dequant_w8_bf16 (weights)    |

"The best fp8lab W8A8 arm" is measured, not assumed: at every (shape, M) both fp8lab W8A8
kernels run (triton_blockwise on its own path for M, every tile of its autotune policy timed
here and the fastest kept, or pinned by :func:`triton_config_for`; mma_blockwise with a tile from the M rule :func:`mma_config_for`)
and the faster total is flagged ``best_w8a8``. A faster W8A8 kernel
plugs in by adding it to ``W8A8_IMPLS`` and ``_gemm_factory``.

Every arm is checked against float64 on a subset of rows before it is timed (W8A16 arms
against bf16 activations x exactly dequantised weights, W8A8 arms against their own quantised
activations), its output poisoned with NaN first. Timing: CUDA events with L2 flushed for
calls over ``GRAPH_BELOW_S``; shorter calls are replayed in a CUDA graph with the weights
rotated over copies that together exceed L2 (activations stay L2-resident: in a model the
previous layer has just written them). The prep passes (quantiser, dequantiser) are timed the
same way and added to the GEMM's median as ``total_p50_s`` (a sum of medians).

B4 uses DeepSeek-V3's seven dense-layer sites (``DENSE_SITES``) as the stand-in for the
seed's unnamed model (7 sites x 43 layers = 4.238 G parameters): what is *measured* is the sum
of the seven sites' times at M = 256; what is *scaled* is that sum x 4.238 G / (the seven
sites' parameters), i.e. per-parameter time times the seed's parameter count.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from ..measure import bench, clocks, harness
from ..report import claims
from ..facts import devices, shapes as shp
from ..arms import registry
from ..kernels import seed001
from ..measure.progress import progress as track
from ..emulate import blockscale

__all__ = ["SEED", "DEFAULT_SITES", "DEFAULT_MS", "DENSE_SITES", "STEP_M", "GEMM_ARMS", "W8A8_IMPLS",
           "FAMILY_IDS", "FAMILIES", "triton_config_for", "mma_config_for", "measure", "three_arms_view",
           "crossovers", "step_table", "numerics", "b9_compile_check", "b9_gpu_probe", "b1_verdict", "b3_verdict",
           "b4_verdict", "b7_verdict", "b8_verdict", "b9_verdict", "ceiling_rate", "verdicts", "wmma_tiles",
           "TILE_CHECK", "COLUMNS"]

#: What seed 001 states (its own figures; B4's are derived from the H200 datasheet).
SEED = {
    "step_params": 4.238e9,          # 7 sites/layer x 43 layers
    "step_batch": 256,
    "step_flop": 2.170e12,
    "step_bytes": 4.238e9,
    "floors_ms": {"fp32": 32.4, "bf16": 2.19, "fp8": 1.10, "hbm": 0.88},
    "scalar_fraction_fp32": 0.068,   # "it achieves 6.8% of it"
    "scalar_ceiling": 0.25,          # "cannot exceed ~1/4 of the FP32 CUDA-core rate"
    "scalar_step_ms": 524.0,
    "wmma_fraction": (0.50, 0.70),   # "50-70% of peak" of the BF16 tensor rate
    "bf16_peak": 989.5e12,
}

MODEL = "deepseek-v3"
DEFAULT_SITES = ("q_a", "o_proj", "dense_gate_up")
DEFAULT_MS = (1, 16, 128, 1024, 4096)
DENSE_SITES = ("q_a", "kv_a", "q_b", "kv_b", "o_proj", "dense_gate_up", "dense_down")
STEP_M = 256
SCALAR_MAX_M = 256          # the scalar kernel takes ~0.1 s per GEMM at M = 4096: capped by default
GRAPH_BELOW_S = 30e-6       # calls shorter than this are timed by CUDA-graph replay
CHECK_ROWS = 32             # rows checked against float64 at each end of M
TOL = 1e-2                  # relative Frobenius error vs the arm's own float64 reference (bf16 output)

GEMM_ARMS = ("scalar_tiled", "wmma_w8a16", "triton_blockwise", "mma_blockwise", "cublaslt_blockwise",
             "cublas_bf16")
W8A8_IMPLS = ("triton_blockwise", "mma_blockwise")
PREP_OF = {"triton_blockwise": "quant_act_warp", "mma_blockwise": "quant_act_warp",
           "cublaslt_blockwise": "quant_act_warp", "cublas_bf16": "dequant_w8_bf16"}
KIND_OF = {"scalar_tiled": "w8a16", "wmma_w8a16": "w8a16", "triton_blockwise": "w8a8", "mma_blockwise": "w8a8",
           "cublaslt_blockwise": "w8a8", "cublas_bf16": "bf16", "quant_act_warp": "prep", "dequant_w8_bf16": "prep"}
#: The per-step alternatives compared for B4 / B7 (the deployable cost of each route): each is
#: an arm, or the faster fp8lab W8A8 arm (``best_w8a8``), with the pass it needs every step.
FAMILY_IDS = ("scalar_tiled", "wmma_w8a16", "best_w8a8", "cublaslt_blockwise", "cublas_bf16")


def _family_label(fam: str) -> str:
    """The route's legend text (fp8lab.arms.registry) plus its per-step pass."""
    prep = PREP_OF.get(W8A8_IMPLS[0] if fam == "best_w8a8" else fam)
    return registry.label(fam) + (f" + {registry.label(prep)}" if prep else "")


#: family -> legend text
FAMILIES = {fam: _family_label(fam) for fam in FAMILY_IDS}
#: Which datasheet bound each family's B=256 step is compared with.
FAMILY_BOUND = {"scalar_tiled": "fp32", "wmma_w8a16": "bf16", "best_w8a8": "fp8", "cublaslt_blockwise": "fp8",
                "cublas_bf16": "bf16"}

COLUMNS = ["site", "model", "N", "K", "M", "arm", "role", "kind", "impl_config", "status", "flop", "bytes",
           "time_p20_s", "time_p50_s", "time_p80_s", "tflops_p50", "gbps_p50", "prep_arm", "prep_p50_s",
           "total_p50_s", "total_tflops_p50", "best_w8a8", "check_relerr", "n_samples", "timing_method",
           "rotation_sets", "sm_mhz_median", "sm_mhz_min", "power_w_max", "clock_reasons", "clock_source",
           "clock_note"]


# ----------------------------------------------------------------------------------------- rules
def triton_config_for(M: int) -> dict:
    """Tile of triton_blockwise by M (from its own tile list): narrow tiles for decode so enough
    programs exist, 128x128 for prefill. A rule, not an autotune: one compile per rung."""
    if M <= 16:
        return dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=4)
    if M <= 64:
        return dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=4)
    if M <= 256:
        return dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)


def mma_config_for(M: int) -> tuple[str, int]:
    """(config name, swizzle) of mma_blockwise by M, from mma_blockwise_configs.h."""
    if M <= 16:
        return "16x64x128_w16x32_s4", 1
    if M <= 32:
        return "32x64x128_w32x32_s4", 1
    if M <= 128:
        return "64x128x128_w32x64_s3", 1
    return "128x128x128_w64x32_s3", 8


def check_rows(M: int, per_end: int = CHECK_ROWS) -> list:
    """Row indices checked against float64: the first and last ``per_end`` rows."""
    if M < 1:
        raise ValueError(f"M must be >= 1, got {M}")
    return sorted(set(range(min(M, per_end))) | set(range(max(0, M - per_end), M)))


def site_shapes(sites: Sequence[str]) -> list:
    return shp.shapes(MODEL, list(sites))


# ----------------------------------------------------------------------------------------- GPU
class _Site:
    """One site's weights, made once and shared by every M and arm: FP8 codes + 128x128 scales,
    the bf16 dequantised copy, float64 dequantised weights for the references, and weight
    copies for rotation (made on demand)."""

    def __init__(self, shape, seed: int):
        import torch

        self.shape = shape
        d = seed001.generate_inputs(1, shape.N, shape.K, seed=seed)
        self.q, self.s = d["w"], d["w_scale"]
        self.deq = seed001.dequant_w8_bf16(self.q, self.s)
        self.w64 = blockscale.dequant(self.q, self.s, (128, 128))          # (N, K) float64, exact
        from ..kernels import baselines

        # the dequantiser is the one every bf16 arm depends on: bit for bit the reference's
        assert torch.equal(self.deq.view(torch.int16), baselines.dequantize_weight(self.q, self.s).view(torch.int16)), \
            "dequant_w8_bf16 differs from baselines.dequantize_weight"
        self._fp8 = [(self.q, self.s)]
        self._bf16 = [self.deq]

    def fp8(self, i: int):
        import torch

        while len(self._fp8) <= i:   # copies through uint8: fp8 tensors support few ops directly
            self._fp8.append((self.q.view(torch.uint8).clone().view(torch.float8_e4m3fn), self.s.clone()))
        return self._fp8[i]

    def bf16(self, i: int):
        while len(self._bf16) <= i:
            self._bf16.append(self.deq.clone())
        return self._bf16[i]


def _rotation_sets(weight_bytes: int, l2: int) -> int:
    """Weight copies for graph-replay timing: enough to exceed 2x L2 (1 when one copy does)."""
    if weight_bytes >= 2 * l2:
        return 1
    return min(bench.n_rotation_sets(weight_bytes, l2), 64)


def _time(make, n_sets: int, *, rep_ms: float, warmup_ms: float):
    """Time make(0)() (events, L2 flushed) or, for calls short on the GPU or bound by their
    launch (bench.choose_method), a graph replay cycling over make(0..n_sets-1) (weights rotated;
    graph replay has no flush)."""
    fn0 = make(0)
    pace = bench.choose_method(fn0, GRAPH_BELOW_S)      # launch-bound calls replay in graphs too
    if pace.method == "events":
        return bench.bench(fn0, method="events", warmup_ms=warmup_ms, rep_ms=max(rep_ms, 3e3 * pace.host_s))
    return bench.bench(harness.made_rotation(make, n_sets, first=fn0), method="graph", warmup_ms=warmup_ms,
                       rep_ms=rep_ms)


def triton_tiles(M: int, N: int, K: int, triton_mode: str = "auto", *, sms: Optional[int] = None) -> list:
    """The triton_blockwise tiles measure() times at one problem: 'rule' pins
    :func:`triton_config_for`; 'auto' takes the kernel's own path for M (``tb.auto_path``) and every
    tile its autotune policy would try there (``tb.autotune_space``), each timed by this sweep, the
    fastest kept. Triton's autotuner picks from do_bench on one operand set, and its pick moved B7
    between runs."""
    from ..kernels import triton_blockwise as tb

    if triton_mode == "rule":
        return [triton_config_for(M)]
    return tb.autotune_space("per_block", tb.auto_path(M), M, N, K, sms=sms)


def _gemm_factory(arm: str, site: _Site, x, qa, sa, M: int, triton_cfg: Optional[dict] = None):
    """(make(i) -> no-arg callable writing into a preallocated output, output tensor, config text).
    make(i) uses weight copy i. ``triton_cfg``: the pinned triton_blockwise tile (triton_tiles)."""
    import torch

    N, K = site.shape.N, site.shape.K
    dev = x.device
    if arm == "scalar_tiled":
        out = torch.empty((M, N), dtype=torch.bfloat16, device=dev)

        def make(i):
            q, s = site.fp8(i)
            return lambda: seed001.scalar_tiled(x, q, s, tile=seed001.SEED_SCALAR_TILE, out=out)
        return make, out, f"tile {seed001.SEED_SCALAR_TILE}"
    if arm == "wmma_w8a16":
        plan = seed001.wmma_plan(M, N, K, dev)
        out = torch.empty((M, N), dtype=torch.bfloat16, device=dev)
        ws = torch.empty(max(1, plan["splits"]) * M * N if plan["splits"] > 1 else 0, dtype=torch.float32, device=dev)

        def make(i):
            q, s = site.fp8(i)
            return lambda: seed001.wmma_w8a16(x, q, s, out=out, workspace=ws if plan["splits"] > 1 else None)
        return make, out, f"{plan['config_name']} splits {plan['splits']}"
    if arm == "triton_blockwise":
        from ..kernels import triton_blockwise as tb

        if triton_cfg is None:
            raise ValueError("triton_blockwise needs a pinned tile (triton_tiles)")
        out = torch.empty((M, N), dtype=torch.bfloat16, device=dev)

        def make(i):
            q, s = site.fp8(i)
            return lambda: tb.blockwise_fp8_gemm(qa, q, sa, s, variant="per_block", config=triton_cfg, out=out)
        return make, out, f"{tb.path_of(triton_cfg)} {tb.config_text(triton_cfg)}"
    if arm == "mma_blockwise":
        from ..kernels import mma_blockwise as mb

        name, swz = mma_config_for(M)
        out = torch.empty((M, N), dtype=torch.bfloat16, device=dev)

        def make(i):
            q, s = site.fp8(i)
            return lambda: mb.mma_blockwise(qa, sa, q, s, config=name, variant="per_block", swizzle=swz,
                                            out=out, check_scales=False)
        return make, out, f"{name} swizzle {swz}"
    if arm == "cublaslt_blockwise":
        from ..kernels import baselines

        ops = {}
        holder = {}

        def make(i):
            q, s = site.fp8(i)
            if i not in ops:
                ops[i] = baselines.BlockwiseOperands(qa, sa, q, s)

            def call():
                holder["out"] = ops[i]()
                return holder["out"]
            return call
        return make, holder, "BlockWise1x128 / BlockWise128x128"
    if arm == "cublas_bf16":
        out = torch.empty((M, N), dtype=torch.bfloat16, device=dev)

        def make(i):
            wb = site.bf16(i)
            return lambda: torch.mm(x, wb.t(), out=out)
        return make, out, "torch.mm, bf16 weights"
    raise ValueError(f"unknown arm {arm!r}; known: {GEMM_ARMS}")


def _run_checked(make, out, ref, rows, out_shape):
    """Poison, run once, compare the checked rows with float64; returns (rel. error, output)."""
    import torch

    if isinstance(out, torch.Tensor):
        out.fill_(float("nan"))
    else:
        # the arm allocates its own output: so a kernel that writes nothing is unlikely to pass on
        # another arm's stale result
        harness.poison_allocator(out_shape)
    fn = make(0)
    res = fn()
    torch.cuda.synchronize()
    got = res if isinstance(res, torch.Tensor) else out
    if isinstance(out, dict):
        got = out["out"]
    return harness.relerr(got[rows], ref)


def _fastest(tried: list) -> dict:
    """The row of the fastest measured tile (the first one's row when none was measured); with
    several tiles its impl_config says how many were timed and the runners-up's medians."""
    best, t_best = min(tried, key=lambda rt: rt[1])
    if len(tried) > 1 and math.isfinite(t_best):
        others = sorted(t for r, t in tried if r is not best and math.isfinite(t))
        best = dict(best)
        best["impl_config"] += (f"; fastest of {len(tried)} tiles timed here"
                                + (f" (others {', '.join(f'{t * 1e6:.1f}' for t in others)} us)" if others else ""))
    return best


def _not_run(e: Exception, prefix: str = "") -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"not-run: {prefix}{type(e).__name__}: {first[:160]}"


def measure(sites: Sequence[str] = DEFAULT_SITES, Ms: Sequence[int] = DEFAULT_MS, *,
            arms: Sequence[str] = GEMM_ARMS, scalar_max_m: int = SCALAR_MAX_M, rep_ms: float = 40,
            warmup_ms: float = 10, seed: int = 0, triton_mode: str = "auto", sampler=None,
            progress=None) -> pd.DataFrame:
    """Check and time every arm at every (site, M); one tidy row per (site, M, arm), plus prep
    rows (quant_act_warp per (site, M); dequant_w8_bf16 once per site, with M = 0).

    A GEMM row's ``total_p50_s`` adds its prep pass's median (``prep_arm``); ``best_w8a8`` flags
    the faster fp8lab W8A8 total. An arm the card or library refuses gets ``status`` 'not-run:
    ...'; a wrong result gets 'wrong: ...' and is not timed. The scalar kernel runs only for
    M <= scalar_max_m ('skipped: ...' above). triton_mode: 'auto' times triton_blockwise on its own
    path for M in every tile its autotune policy would try (:func:`triton_tiles`) and keeps the
    fastest (a wrong tile makes the row 'wrong'), 'rule' pins
    :func:`triton_config_for` (pointer path, no autotune).
    """
    unknown = set(arms) - set(GEMM_ARMS)
    if unknown:
        raise ValueError(f"unknown arms {sorted(unknown)}; known: {GEMM_ARMS}")
    Ms = [int(m) for m in Ms]
    if not Ms or min(Ms) < 1:
        raise ValueError(f"Ms must be positive integers, got {Ms}")
    if scalar_max_m < 0:
        raise ValueError(f"scalar_max_m must be >= 0, got {scalar_max_m}")
    if triton_mode not in ("auto", "rule"):
        raise ValueError(f"triton_mode must be 'auto' or 'rule', got {triton_mode!r}")
    site_shapes(sites)                     # unknown site names raise here, before any GPU work
    import torch

    from ..kernels import baselines, quant_act as qa_mod

    if not torch.cuda.is_available():
        raise RuntimeError("measure() needs a CUDA device")
    l2 = bench.device_l2_bytes()
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    rows = []

    def row(site_shape, M, arm, **kw):
        r = {c: math.nan for c in COLUMNS}
        r.update(site=site_shape.site, model=MODEL, N=site_shape.N, K=site_shape.K, M=M, arm=arm,
                 role="prep" if KIND_OF[arm] == "prep" else "gemm", kind=KIND_OF[arm], impl_config="",
                 status="", prep_arm="", best_w8a8=False, timing_method="", clock_reasons="", clock_source="",
                 clock_note="")
        r.update(kw)
        return r

    def timed_cols(timing, flop, nbytes, clk):
        rate = timing.rate(flop) if flop else None
        return dict(harness.timing_columns(timing, clk), tflops_p50=(rate["p50"] / 1e12) if rate else math.nan,
                    gbps_p50=nbytes / timing.p50_s / 1e9, status="measured")

    for i_site, shape in enumerate(track(site_shapes(sites), desc="three-arms sweep", unit="sites")):
        N, K = shape.N, shape.K
        site = _Site(shape, seed=seed + i_site)
        # the dequantiser, once per site
        dq_out = {}

        def make_dq(i):
            q, s = site.fp8(i)
            dq_out.setdefault(i, torch.empty((N, K), dtype=torch.bfloat16, device=q.device))
            return lambda: seed001.dequant_w8_bf16(q, s, out=dq_out[i])
        tm, clk = clocks.timed(sampler, lambda: _time(make_dq, _rotation_sets(N * K, l2), rep_ms=rep_ms,
                                                      warmup_ms=warmup_ms))
        cnt = registry.count("dequant_w8_bf16", N=N, K=K)
        rows.append(row(shape, 0, "dequant_w8_bf16", flop=0.0, bytes=float(cnt.bytes), check_relerr=0.0,
                        impl_config="16 codes per thread", **timed_cols(tm, 0, cnt.bytes, clk)))
        dequant_p50 = tm.p50_s
        dq_out = None

        for M in track(Ms, desc="M"):
            if progress:
                progress(f"{shape.site} M={M}")
            g = torch.Generator(device="cuda").manual_seed(seed * 1000 + M)
            x = torch.randn(M, K, generator=g, device="cuda").to(torch.bfloat16)    # (M, K) bf16
            qa, sa = qa_mod.quant_act(x, "quant_act_warp", scale_layout="m_major")  # (M, K) e4m3, (M, K/128)
            rq, rs = baselines.quant_act_reference(x)
            assert torch.equal(qa.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(sa, rs), \
                "quant_act_warp differs from quant_act_reference"
            # the quantiser's own time, input L2-resident below L2 (see module docstring)
            qo, so = torch.empty_like(qa), torch.empty_like(sa)
            tq, clk = clocks.timed(sampler, lambda: _time(
                lambda i: (lambda: qa_mod.quant_act(x, "quant_act_warp", q_out=qo, s_out=so)), 1,
                rep_ms=rep_ms, warmup_ms=warmup_ms))
            qcnt = registry.count("quant_act_warp", M=M, K=K)
            rows.append(row(shape, M, "quant_act_warp", flop=0.0, bytes=float(qcnt.bytes), check_relerr=0.0,
                            impl_config="1 warp / group, m-major scales",
                            **timed_cols(tq, 0, qcnt.bytes, clk)))
            quant_p50 = tq.p50_s

            r_idx = check_rows(M)
            ref16 = x[r_idx].double() @ site.w64.T                                   # (rows, N) float64
            a8 = (qa.view(torch.uint8)[r_idx].view(torch.float8_e4m3fn).double()
                  * sa[r_idx].double().repeat_interleave(128, 1))
            ref8 = a8 @ site.w64.T
            for arm in arms:
                fb = registry.count(arm, M=M, N=N, K=K)
                prep = PREP_OF.get(arm, "")
                prep_p50 = quant_p50 if prep == "quant_act_warp" else dequant_p50 if prep else 0.0
                base = dict(flop=float(fb.flops), bytes=float(fb.bytes), prep_arm=prep,
                            prep_p50_s=prep_p50 if prep else 0.0)
                if arm == "scalar_tiled" and M > scalar_max_m:
                    rows.append(row(shape, M, arm, status=f"skipped: M > scalar_max_m = {scalar_max_m}", **base))
                    continue
                tiles = triton_tiles(M, N, K, triton_mode, sms=sms) if arm == "triton_blockwise" else [None]
                tried = []                  # (row, p50) of each measured tile; the fastest is kept
                for cfg in tiles:
                    try:
                        make, out, cfg_text = _gemm_factory(arm, site, x, qa, sa, M, cfg)
                        err = _run_checked(make, out, ref8 if KIND_OF[arm] == "w8a8" else ref16, r_idx, (M, N))
                    except Exception as e:  # noqa: BLE001 - a library refusal or a compile failure: say which
                        tried.append((row(shape, M, arm, status=_not_run(e), **base), math.inf))
                        continue
                    if not err < TOL:
                        # a wrong tile is a wrong arm (its row, not timed), even when another tile is right
                        tried = [(row(shape, M, arm, status=f"wrong: rel. err {err:.3g} >= {TOL}",
                                      impl_config=cfg_text, check_relerr=err, **base), math.inf)]
                        break
                    n_sets = _rotation_sets(N * K * (2 if arm == "cublas_bf16" else 1), l2)
                    try:
                        tm, clk = clocks.timed(sampler, lambda: _time(make, n_sets, rep_ms=rep_ms,
                                                                      warmup_ms=warmup_ms))
                    except Exception as e:  # noqa: BLE001 - e.g. a kernel that cannot be graph-captured
                        tried.append((row(shape, M, arm, impl_config=cfg_text, check_relerr=err, **base,
                                          status=_not_run(e, "timing failed: ")), math.inf))
                        continue
                    r = row(shape, M, arm, impl_config=cfg_text, check_relerr=err, **base,
                            **timed_cols(tm, fb.flops, fb.bytes, clk))
                    r["total_p50_s"] = r["time_p50_s"] + r["prep_p50_s"]
                    r["total_tflops_p50"] = fb.flops / r["total_p50_s"] / 1e12
                    tried.append((r, tm.p50_s))
                if tried:
                    rows.append(_fastest(tried))
            x = qa = sa = ref16 = ref8 = a8 = None
        site = None                         # free this site's weights before the next one is made
        torch.cuda.empty_cache()
    df = pd.DataFrame(rows, columns=COLUMNS)
    return mark_best_w8a8(df)


def mark_best_w8a8(df: pd.DataFrame) -> pd.DataFrame:
    """Flag, per (site, M), the measured fp8lab W8A8 row with the smallest total time."""
    df = df.copy()
    df["best_w8a8"] = False
    ok = df[df["arm"].isin(W8A8_IMPLS) & (df["status"] == "measured")]
    if len(ok):
        idx = ok.groupby(["site", "M"])["total_p50_s"].idxmin()
        df.loc[idx.values, "best_w8a8"] = True
    return df


#: columns of :func:`versus_peers`
VERSUS_COLUMNS = ["quant", "site", "M", "own_arm", "own_time_s", "best_peer", "peer_time_s", "own_over_peer"]


def versus_peers(sweep: pd.DataFrame, peers: Optional[pd.DataFrame]) -> pd.DataFrame:
    """fp8lab's fastest W8A8 route against the fastest blockwise peer of the same run (issue 17),
    per (site, M), by time per call (``own_over_peer`` = the peer's time / fp8lab's; > 1: fp8lab
    ahead), twice: the GEMM alone on activations quantised beforehand (``quant`` 'none'), and per
    step with the activation quantiser (``quant`` = the peers' QUANT_OWN: fp8lab's GEMM plus
    quant_act_warp, timed apart and summed, as this notebook's routes are; each peer with its own
    quantiser inside the timed call, as seed 000 timed vLLM's kernels). Empty without peers."""
    from ..peers import report

    if peers is None or peers.empty:
        return pd.DataFrame(columns=VERSUS_COLUMNS)
    own = sweep[(sweep["role"] == "gemm") & sweep["arm"].isin(W8A8_IMPLS) & (sweep["status"] == "measured")]
    out = []
    for label, own_rows in (("none", own), (report.QUANT_OWN, own.assign(time_p50_s=own["total_p50_s"]))):
        v = report.versus_best_peer(own_rows, peers[peers["quant"] == label], list(W8A8_IMPLS), keys=("site", "M"),
                                    metric="time_p50_s", higher=False)
        v.insert(0, "quant", label)
        out.append(v)
    df = pd.concat(out, ignore_index=True).rename(columns={"own": "own_time_s", "peer": "peer_time_s"})
    return df[VERSUS_COLUMNS]


# ----------------------------------------------------------------------------------------- views
def three_arms_view(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (site, M): each family's per-step time (GEMM + its prep pass) in seconds,
    the winner and, for the best W8A8 family, which kernel it was."""
    g = df[(df["role"] == "gemm") & (df["status"] == "measured")]
    out = []
    for (site, M), d in g.groupby(["site", "M"], sort=True):
        rec = {"site": site, "M": int(M), "N": int(d["N"].iloc[0]), "K": int(d["K"].iloc[0])}
        for fam in FAMILIES:
            if fam == "best_w8a8":
                b = d[d["best_w8a8"].astype(bool)]
                rec[fam] = float(b["total_p50_s"].iloc[0]) if len(b) else math.nan
                rec["best_w8a8_impl"] = str(b["arm"].iloc[0]) if len(b) else ""
            else:
                b = d[d["arm"] == fam]
                rec[fam] = float(b["total_p50_s"].iloc[0]) if len(b) else math.nan
        times = {f: rec[f] for f in FAMILIES if np.isfinite(rec[f])}
        rec["winner"] = min(times, key=times.get) if times else ""
        out.append(rec)
    return pd.DataFrame(out, columns=["site", "M", "N", "K", *FAMILIES, "best_w8a8_impl", "winner"])


def crossovers(view: pd.DataFrame) -> pd.DataFrame:
    """Where the winner changes along M, per site: one row per change (between two measured Ms)."""
    out = []
    for site, d in view.sort_values(["site", "M"]).groupby("site", sort=True):
        d = d[d["winner"] != ""]
        prev = None
        for _, r in d.iterrows():
            if prev is not None and r["winner"] != prev["winner"]:
                out.append({"site": site, "M_below": int(prev["M"]), "M_above": int(r["M"]),
                            "winner_below": prev["winner"], "winner_above": r["winner"]})
            prev = r
    return pd.DataFrame(out, columns=["site", "M_below", "M_above", "winner_below", "winner_above"])


def step_table(step_df: pd.DataFrame, *, spec=None, ceilings: Optional[dict] = None) -> pd.DataFrame:
    """B4: the B = 256 decode step per family, measured over DeepSeek-V3's dense sites and scaled.

    measured_layer_ms: sum over the sites in ``step_df`` of each family's total time at M = 256
    (one DeepSeek-V3 dense layer when all seven sites are there); scaled_step_ms: that x
    SEED['step_params'] / (the sites' parameters). Beside it the seed's derived floor for the
    family's bound, our spec sheet's, and (with ``ceilings``: {'fp32', 'bf16', 'fp8_blockwise'
    or 'fp8', 'hbm'} in FLOP/s or B/s) the floor at the rates measured in this run.
    """
    view = three_arms_view(step_df[step_df["M"] == SEED["step_batch"]])
    if view.empty:
        raise ValueError(f"no measured rows at M = {SEED['step_batch']} in the step table")
    params = float((view["N"] * view["K"]).sum())
    spec = spec if spec is not None else devices.get("h200")
    flop = 2 * SEED["step_batch"] * SEED["step_params"]
    rows = []
    for fam, label in FAMILIES.items():
        t = view[fam]
        complete = bool(np.isfinite(t).all())
        layer_ms = float(t.sum() * 1e3) if complete else math.nan
        scaled = layer_ms * SEED["step_params"] / params if complete else math.nan
        bound = FAMILY_BOUND[fam]
        spec_floor = flop / spec.peak_flops(bound) * 1e3
        meas_rate = None
        if ceilings:
            meas_rate = ceilings.get("fp8_blockwise" if bound == "fp8" else bound) or ceilings.get(bound)
        meas_floor = flop / meas_rate * 1e3 if meas_rate else math.nan
        rows.append({"family": fam, "label": label, "sites": int(len(view)), "sites_params": params,
                     "complete": complete, "measured_layer_ms": layer_ms, "scaled_step_ms": scaled,
                     "bound": bound, "seed_floor_ms": SEED["floors_ms"][bound], "spec_floor_ms": spec_floor,
                     "measured_ceiling_floor_ms": meas_floor,
                     "fraction_of_spec_floor": spec_floor / scaled if complete else math.nan,
                     "fraction_of_measured_floor": meas_floor / scaled if complete and meas_rate else math.nan,
                     "hbm_floor_ms": SEED["step_bytes"] / spec.bandwidth_Bps * 1e3})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------- WMMA tiles
TILE_CHECK = ("large", "large_n64", "medium", "large_pad0", "large_s3", "large_s2", "large_n64_s2", "large_il",
              "large_il_w32")


def wmma_tiles(site: str = "dense_gate_up", M: int = 4096, configs: Sequence[str] = TILE_CHECK, *,
               rep_ms: float = 40, warmup_ms: float = 10, seed: int = 0, sampler=None) -> pd.DataFrame:
    """wmma_w8a16 in several tile configurations at one large shape: is the M rule's pick the
    fastest (B3 takes the best), and what the +8 pad buys over +0 (bank-conflicted ldmatrix).
    Rows follow the sweep's columns (arm wmma_w8a16, impl_config the configuration name)."""
    for c in configs:
        seed001.wmma_config(c)
    import torch

    shape = site_shapes([site])[0]
    N, K = shape.N, shape.K
    d = seed001.generate_inputs(M, N, K, seed=seed)
    r_idx = check_rows(M)
    ref = seed001.reference_w8a16(d["a"], d["w"], d["w_scale"], rows=r_idx)
    cnt = registry.count("wmma_w8a16", M=M, N=N, K=K)
    rows = []
    for c in track(configs, desc="wmma tile check", unit="configs"):
        cid, cfg = seed001.wmma_config(c)
        r = {col: math.nan for col in COLUMNS}
        r.update(site=site, model=MODEL, N=N, K=K, M=M, arm="wmma_w8a16", role="gemm", kind="w8a16",
                 impl_config=cfg.name, status="", prep_arm="", prep_p50_s=0.0, best_w8a8=False, timing_method="",
                 clock_reasons="", clock_source="", clock_note="", flop=float(cnt.flops), bytes=float(cnt.bytes))
        out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        try:
            plan = seed001.wmma_plan(M, N, K, config=c)
            ws = torch.empty(plan["splits"] * M * N if plan["splits"] > 1 else 0, dtype=torch.float32, device="cuda")

            def fn(c=c, ws=ws, plan=plan):
                return seed001.wmma_w8a16(d["a"], d["w"], d["w_scale"], config=c, out=out,
                                          workspace=ws if plan["splits"] > 1 else None)
            fn()
            torch.cuda.synchronize()
            err = harness.relerr(out[r_idx], ref)
        except Exception as e:  # noqa: BLE001 - e.g. a tile that does not fit this card's shared memory
            r["status"] = _not_run(e)
            rows.append(r)
            continue
        r["check_relerr"] = err
        if not err < TOL:
            r["status"] = f"wrong: rel. err {err:.3g} >= {TOL}"
            rows.append(r)
            continue
        tm, clk = harness.timed(fn, sampler=sampler, method="events", warmup_ms=warmup_ms, rep_ms=rep_ms)
        r.update(status="measured", tflops_p50=cnt.flops / tm.p50_s / 1e12, gbps_p50=cnt.bytes / tm.p50_s / 1e9,
                 total_p50_s=tm.p50_s, total_tflops_p50=cnt.flops / tm.p50_s / 1e12,
                 **harness.timing_columns(tm, clk))
        rows.append(r)
    return pd.DataFrame(rows, columns=COLUMNS)


# ----------------------------------------------------------------------------------------- B8, B9
def numerics(Ks: Sequence[int] = (512, 2048, 7168, 18432), M: int = 64, N: int = 512, seed: int = 0) -> pd.DataFrame:
    """Error of every arm against float64 on the same inputs (bf16 activations x exactly
    dequantised weights), over K. W8A16 kernels run with fp32 *and* bf16 outputs: bf16 output
    rounding (~2^-9) would hide the accumulation differences B8 is about. W8A8 arms quantise the
    activations (their error includes that, which is the point of comparing). Two floors: the
    float64 result rounded to fp32 and to bf16."""
    import torch

    from ..kernels import baselines, mma_blockwise as mb, quant_act as qa_mod, triton_blockwise as tb

    rows = []
    for K in track(Ks, desc="B8 numerics", unit="K values"):
        d = seed001.generate_inputs(M, N, K, seed=seed + K)
        a, w, s = d["a"], d["w"], d["w_scale"]
        ref = seed001.reference_w8a16(a, w, s)                                   # (M, N) float64
        qa, sa = qa_mod.quant_act(a, "quant_act_warp", scale_layout="m_major")
        kb = K // 128
        outs = {
            ("float64 -> fp32 (floor)", "fp32"): ref.float(),
            ("float64 -> bf16 (floor)", "bf16"): ref.to(torch.bfloat16),
            ("scalar_tiled", "fp32"): seed001.scalar_tiled(a, w, s, out_dtype=torch.float32),
            ("scalar_tiled", "bf16"): seed001.scalar_tiled(a, w, s),
            # no K split: the pure per-128-K promotion chain the seed describes
            ("wmma_w8a16", "fp32"): seed001.wmma_w8a16(a, w, s, config="medium", kb_per_split=kb,
                                                       out_dtype=torch.float32),
            ("wmma_w8a16", "bf16"): seed001.wmma_w8a16(a, w, s, config="medium", kb_per_split=kb),
            ("cublas_bf16", "bf16"): torch.mm(a, seed001.dequant_w8_bf16(w, s).t()),
        }
        w8a8 = {
            ("triton_blockwise", "bf16"): lambda: tb.blockwise_fp8_gemm(qa, w, sa, s, config=triton_config_for(M)),
            ("mma_blockwise", "bf16"): lambda: mb.mma_blockwise(qa, sa, w, s, config=mma_config_for(M)[0]),
            ("cublaslt_blockwise", "bf16"): lambda: baselines.cublaslt_blockwise(qa, sa, w, s),
        }
        for key, fn in w8a8.items():
            try:
                outs[key] = fn()
            except Exception:  # noqa: BLE001 - a library or arch that refuses: the row says not-run
                outs[key] = None
        torch.cuda.synchronize()
        for (arm, odt), o in outs.items():
            if o is None:
                rows.append({"arm": arm, "out_dtype": odt, "K": K, "M": M, "N": N, "status": "not-run"})
                continue
            o64 = o.double()
            diff = o64 - ref
            rows.append({"arm": arm, "out_dtype": odt, "K": K, "M": M, "N": N, "status": "measured",
                         "rel_err": harness.relerr(o64, ref),
                         "max_abs_err_rel": float(diff.abs().max() / ref.abs().max()),
                         "calc_diff": float(1 - 2 * (o64 * ref).sum() / ((o64 * o64 + ref * ref).sum()))})
    return pd.DataFrame(rows, columns=["arm", "out_dtype", "K", "M", "N", "status", "rel_err", "max_abs_err_rel",
                                       "calc_diff"])


def b9_compile_check(arch: str = "sm_90a", pads: Sequence[int] = (8, 0, 1, 4)) -> pd.DataFrame:
    """Compile wmma_w8a16.cu in its pad-check mode (one kernel) for each pad, as the code stands
    (static_assert on), and the +1 pad once more with the assert bypassed (FP8LAB_WMMA_FORCE_PAD),
    to show nvcc itself accepts it. No GPU. One row per compile: accepted, the diagnostic, and for
    accepted builds the SASS count of ldmatrix (LDSM) loads, whose 8 row addresses must each be
    16-byte aligned."""
    import re

    from ..toolchain import tools
    from ..toolchain.cubin import compile_cubin, headers_under

    rows = []
    jobs = [(p, False) for p in pads] + [(1, True)]
    for pad, force in jobs:
        # flags as the check has always compiled (-O3, nvcc's default C++ standard)
        b = compile_cubin(seed001.WMMA_SOURCE, arch, flags=("-O3",),
                          defines=[f"FP8LAB_WMMA_PAD_CHECK={pad}", *(["FP8LAB_WMMA_FORCE_PAD"] if force else [])],
                          key_files=headers_under(seed001.WMMA_SOURCE.parent), timeout=600)
        msg = ""
        m = re.search(r"static assertion failed with \"([^\"]+)\"", b.log)
        if m:
            msg = m.group(1)
        elif b.rc:
            msg = (b.log.strip().splitlines() or ["nvcc failed"])[-1]
        ldsm = math.nan
        if b.ok:
            sass = tools.run_tool("cuobjdump", ["-sass", str(b.cubin)]).stdout
            ldsm = len(re.findall(r"\bLDSM\.", sass))
        lds_bytes = (128 + pad) * 2
        rows.append({"pad": pad, "forced": force, "row_bytes": lds_bytes, "row_bytes_mod_16": lds_bytes % 16,
                     "accepted": b.ok, "static_assert": bool(m), "diagnostic": msg,
                     "ldsm_in_sass": ldsm, "arch": arch})
    return pd.DataFrame(rows)


def _b9_child() -> None:
    """Run in a throw-away process (a misaligned shared-memory access can poison the CUDA
    context): the +8 and the forced +1 pad builds of the same tile on one problem; prints JSON."""
    import torch

    M, N, K = 64, 256, 512
    d = seed001.generate_inputs(M, N, K, seed=9)
    ref = seed001.reference_w8a16(d["a"], d["w"], d["w_scale"])
    res = {"M": M, "N": N, "K": K}
    c8 = seed001.wmma_w8a16(d["a"], d["w"], d["w_scale"], config="medium")
    torch.cuda.synchronize()
    res["pad8_relerr"] = harness.relerr(c8, ref)
    try:
        c1 = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        seed001.wmma_w8a16(d["a"], d["w"], d["w_scale"], config="pad1_forced", out=c1, allow_forced_pad=True)
        torch.cuda.synchronize()
        res["pad1_finite"] = bool(torch.isfinite(c1).all())
        res["pad1_relerr"] = harness.relerr(c1.nan_to_num(0.0), ref)
        res["pad1_outcome"] = "correct" if res["pad1_finite"] and res["pad1_relerr"] < TOL else "wrong"
    except Exception as e:  # noqa: BLE001 - the fault is the result
        res["pad1_outcome"] = "fault"
        res["pad1_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    print("B9-RESULT " + json.dumps(res))


def b9_gpu_probe(timeout_s: int = 900) -> dict:
    """Run :func:`_b9_child` in a subprocess and return its result (a crash is a 'fault')."""
    code = "from fp8lab.experiments.three_arms import _b9_child; _b9_child()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    for line in proc.stdout.splitlines():
        if line.startswith("B9-RESULT "):
            return json.loads(line[len("B9-RESULT "):])
    tail = (proc.stderr.strip().splitlines() or [""])[-1][:300]
    return {"pad1_outcome": "fault", "pad1_error": f"process exited {proc.returncode}: {tail}",
            "pad8_relerr": math.nan}


# ----------------------------------------------------------------------------------------- verdicts
#: Every seed-001 row measured here is about fp8lab's own kernels of the seed's design (the seed's
#: kernels live in its engine and never ran): subject "analogue".
SUBJECT = "analogue"
#: B1 / B4: "within this factor of the seed's 6.8%" reads as agreeing with it (the seed measured
#: its own engine's step; a factor, not a percentage, because the shapes differ).
SEED_FRACTION_FACTOR = 2.0
#: B4: a family's step below FLOOR_SLACK x its datasheet floor is a counting or timing bug
#: (no kernel beats the datasheet): the row is not-run, never a verdict.
FLOOR_SLACK = 0.98
#: B7: a change of winner counts only when, at both Ms around it, the winner is at least this
#: much faster than the other family (a 1% swap between two routes is noise, not a threshold).
B7_MARGIN = 0.05
#: B8: the tensor-core path counts as more accurate when its error is at most this fraction of
#: the scalar path's, at every K measured for both.
B8_RATIO = 0.9


def _measured(df, arm):
    return df[(df["arm"] == arm) & (df["status"] == "measured")]


def _v(claim, verdict, fig, rule, reason=""):
    return claims.Verdict(claim, verdict, fig, reason=reason, subject=SUBJECT, rule=rule)


def _seed_band():
    f = SEED["scalar_fraction_fp32"]
    return f / SEED_FRACTION_FACTOR, f * SEED_FRACTION_FACTOR


def b1_verdict(df: pd.DataFrame, fp32_flops: Optional[float]) -> claims.Verdict:
    """Scalar kernel's best rate as a fraction of the FP32 FMA rate measured in the same run,
    over points where its 32-row tile is full (M >= 32): above the seed's ~1/4 ceiling differs;
    under it and within SEED_FRACTION_FACTOR of the seed's 6.8% holds; under it but further from
    6.8% holds-in-kind (the ceiling holds, the seed's point figure does not)."""
    tile, ceil, seed_f = seed001.SEED_SCALAR_TILE, SEED["scalar_ceiling"], SEED["scalar_fraction_fp32"]
    lo, hi = _seed_band()
    rule = (f"best scalar_tiled rate (M >= {tile}) / measured FP32 FMA rate: > {ceil:.0%} differs; "
            f"<= {ceil:.0%} and in [{lo:.1%}, {hi:.1%}] ({SEED_FRACTION_FACTOR:g}x around the seed's {seed_f:.1%}) "
            f"holds; else holds-in-kind")
    s = _measured(df, "scalar_tiled")
    s = s[s["M"] >= tile]
    if s.empty or not fp32_flops:
        return _v("B1", "not-run", f"no measured scalar_tiled point with M >= {tile} and an FP32 ceiling", rule,
                  reason="nothing to compare in this run")
    best = s.loc[s["tflops_p50"].idxmax()]
    frac = best["tflops_p50"] * 1e12 / fp32_flops
    fig = (f"{frac:.1%} of the measured FP32 FMA rate ({fp32_flops / 1e12:.1f} TFLOP/s): best scalar_tiled point "
           f"{best['site']} M={int(best['M'])}, {best['tflops_p50']:.2f} TFLOP/s")
    if frac > ceil:
        return _v("B1", "differs", fig, rule, reason=f"{frac:.1%} is above the claimed ~{ceil:.0%} ceiling")
    if lo <= frac <= hi:
        return _v("B1", "holds", fig, rule)
    return _v("B1", "holds-in-kind", fig, rule,
              reason=f"under the {ceil:.0%} ceiling, but {frac:.1%} is {frac / seed_f:.1f}x the seed's {seed_f:.1%}")


def b3_verdict(df: pd.DataFrame, bf16_measured: Optional[float], bf16_spec: float = SEED["bf16_peak"],
               mma_sync_measured: Optional[float] = None) -> claims.Verdict:
    """Best wmma_w8a16 rate against the seed's 50-70% of the BF16 tensor rate: at or above the
    lower end of the datasheet rate holds; only of cuBLAS BF16 measured in the same run
    holds-in-kind; below both differs."""
    lo = SEED["wmma_fraction"][0]
    rule = (f"best wmma_w8a16 rate >= {lo:.0%} of the BF16 datasheet rate ({bf16_spec / 1e12:.0f} TFLOP/s) holds; "
            f">= {lo:.0%} of cuBLAS BF16 measured in the same run holds-in-kind; else differs")
    w = _measured(df, "wmma_w8a16")
    if w.empty:
        return _v("B3", "not-run", "no measured wmma_w8a16 point", rule, reason="nothing to compare in this run")
    best = w.loc[w["tflops_p50"].idxmax()]
    rate = best["tflops_p50"] * 1e12
    f_spec = rate / bf16_spec
    f_meas = rate / bf16_measured if bf16_measured else math.nan
    fig = (f"best wmma_w8a16 {best['tflops_p50']:.0f} TFLOP/s ({best['site']} M={int(best['M'])}, "
           f"{best.get('impl_config', '')}): {f_spec:.0%} of "
           f"the BF16 datasheet peak ({bf16_spec / 1e12:.0f}), "
           + (f"{f_meas:.0%} of cuBLAS BF16 measured in this run ({bf16_measured / 1e12:.0f})" if bf16_measured
              else "no measured BF16 ceiling")
           + (f"; {rate / mma_sync_measured:.0%} of the mma.sync (HMMA) peak measured here "
              f"({mma_sync_measured / 1e12:.0f}, the ceiling of any wmma kernel)" if mma_sync_measured else ""))
    if f_spec >= lo:
        return _v("B3", "holds", fig, rule)
    if np.isfinite(f_meas) and f_meas >= lo:
        return _v("B3", "holds-in-kind", fig, rule,
                  reason=f"{f_spec:.0%} of the datasheet rate, {f_meas:.0%} of what cuBLAS BF16 reached in this run")
    return _v("B3", "differs", fig, rule,
              reason=f"{f_spec:.0%} of the datasheet and "
                     + (f"{f_meas:.0%} of the measured" if np.isfinite(f_meas) else "no measured")
                     + f" BF16 rate, under {lo:.0%}")


def b4_verdict(step: Optional[pd.DataFrame]) -> claims.Verdict:
    """The measured side of B4, as the seed computed it: the scalar kernel's step (scaled to the
    seed's 4.238 G parameters) against the 32.4 ms FP32 floor, within SEED_FRACTION_FACTOR of the
    seed's 6.8% holds, else differs. Every family's step is shown; one below FLOOR_SLACK x its
    datasheet floor is a counting or timing bug and makes the row not-run (never a verdict)."""
    seed_f, floor = SEED["scalar_fraction_fp32"], SEED["floors_ms"]["fp32"]
    lo, hi = _seed_band()
    rule = (f"{floor} ms FP32 floor / scalar_tiled's scaled B={SEED['step_batch']} step in [{lo:.1%}, {hi:.1%}] "
            f"({SEED_FRACTION_FACTOR:g}x around the seed's {seed_f:.1%}) holds, else differs; any family under "
            f"{FLOOR_SLACK:g}x its datasheet floor: not-run (a counting bug)")
    if step is None:
        return _v("B4", "not-run", "no B=256 step table", rule, reason="the step sweep did not run")
    ok = step[step["complete"].astype(bool)]
    if ok.empty or "scalar_tiled" not in set(ok["family"]):
        return _v("B4", "not-run", "no complete B=256 step (all dense sites) for scalar_tiled", rule,
                  reason="the step sweep did not run here")
    parts = [f"{r['family']} {r['scaled_step_ms']:.3g} ms" for _, r in ok.iterrows()]
    sc = ok[ok["family"] == "scalar_tiled"].iloc[0]
    frac = floor / sc["scaled_step_ms"]
    fig = (f"B=256 step scaled from {int(sc['sites'])} DeepSeek-V3 dense sites ({sc['sites_params'] / 1e6:.0f} M params) "
           f"to 4.238 G params: " + ", ".join(parts) + f"; scalar at {frac:.1%} of the {floor} ms FP32 floor")
    below = ok[ok["scaled_step_ms"] < ok["spec_floor_ms"] * FLOOR_SLACK]
    if len(below):
        return _v("B4", "not-run", fig, rule,
                  reason="faster than the datasheet allows: " + ", ".join(
                      f"{r['family']} {r['scaled_step_ms']:.3g} ms < floor {r['spec_floor_ms']:.3g} ms"
                      for _, r in below.iterrows()))
    if lo <= frac <= hi:
        return _v("B4", "holds", fig, rule)
    return _v("B4", "differs", fig, rule, reason=f"the scalar step reaches {frac:.1%} of its FP32 floor, "
                                                 f"{frac / seed_f:.1f}x the seed's {seed_f:.1%}")


def _decisive(view: pd.DataFrame, cx: pd.DataFrame) -> pd.DataFrame:
    """The crossovers where the winner leads the other family by >= B7_MARGIN at both Ms."""
    keep = []
    for _, r in cx.iterrows():
        d = view[view["site"] == r["site"]].set_index("M")
        lead_below = d.loc[r["M_below"], r["winner_above"]] / d.loc[r["M_below"], r["winner_below"]] - 1
        lead_above = d.loc[r["M_above"], r["winner_below"]] / d.loc[r["M_above"], r["winner_above"]] - 1
        keep.append(bool(lead_below >= B7_MARGIN and lead_above >= B7_MARGIN))   # NaN compares False
    return cx[keep] if len(cx) else cx


def b7_verdict(view: pd.DataFrame) -> claims.Verdict:
    """The winning family changes along M (a threshold exists and needs the sweep): holds when at
    least one change of winner is decisive (the winner leads by >= B7_MARGIN on both sides);
    differs when one family wins everywhere or every swap is within the margin."""
    rule = (f"holds if, at some site, the fastest family changes between two measured Ms with the winner "
            f">= {B7_MARGIN:.0%} ahead of the other on both sides; else differs")
    if view.empty:
        return _v("B7", "not-run", "no measured sweep", rule, reason="nothing to compare in this run")
    cx = crossovers(view)
    dec = _decisive(view, cx)
    sites = sorted(view["site"].unique())
    winners = {s: " / ".join(dict.fromkeys(view[view["site"] == s].sort_values("M")["winner"])) for s in sites}
    if dec.empty:
        return _v("B7", "differs", "winners by M: " + "; ".join(f"{s}: {w}" for s, w in winners.items()), rule,
                  reason=(f"{len(cx)} change(s) of winner, none with a {B7_MARGIN:.0%} lead on both sides"
                          if len(cx) else "one family wins at every measured M"))
    desc = "; ".join(f"{r['site']}: {r['winner_below']} -> {r['winner_above']} between M={r['M_below']} and "
                     f"{r['M_above']}" for _, r in dec.iterrows())
    return _v("B7", "holds", f"the winner changes with M: {desc}", rule)


def b8_verdict(num: Optional[pd.DataFrame]) -> claims.Verdict:
    """fp32-output error against float64: the WMMA path at most B8_RATIO x the scalar path's at
    every K measured for both holds; otherwise differs."""
    rule = (f"wmma_w8a16 rel. error (fp32 output, vs float64) <= {B8_RATIO:g} x scalar_tiled's at every K "
            f"measured for both holds; else differs")
    if num is None:
        return _v("B8", "not-run", "no numerics table", rule, reason="the error study did not run")
    d = num[(num["status"] == "measured") & (num["out_dtype"] == "fp32")]
    s = d[d["arm"] == "scalar_tiled"].set_index("K")["rel_err"]
    w = d[d["arm"] == "wmma_w8a16"].set_index("K")["rel_err"]
    Ks = sorted(set(s.index) & set(w.index))
    if not Ks:
        return _v("B8", "not-run", "no fp32-output errors for both kernels", rule, reason="numerics did not run")
    ratio = {K: float(w[K] / s[K]) for K in Ks}
    fig = (f"rel. error vs float64 (fp32 outputs), K {Ks[0]}..{Ks[-1]}: wmma_w8a16 / scalar_tiled = "
           + ", ".join(f"{ratio[K]:.2f} (K={K})" for K in Ks)
           + f"; at K={Ks[-1]}: {float(w[Ks[-1]]):.2e} vs {float(s[Ks[-1]]):.2e}")
    worse = [K for K in Ks if not ratio[K] <= B8_RATIO]
    if not worse:
        return _v("B8", "holds", fig, rule)
    return _v("B8", "differs", fig, rule,
              reason="not more accurate at K=" + ", ".join(f"{K} (ratio {ratio[K]:.2f})" for K in worse))


def b9_verdict(compile_df: Optional[pd.DataFrame], probe: Optional[dict]) -> claims.Verdict:
    """The +8 pad builds and computes correctly, our static_assert refuses +1, and the +1 build
    forced past it does not compute correct results (a fault or a wrong answer): holds. A correct
    forced +1 result, a failing +8 or an unrefused +1 differs."""
    rule = (f"holds if +8 compiles and is correct (rel. err < {TOL:g}), our static_assert refuses +1, and the "
            f"forced +1 build faults or is wrong; else differs")
    if compile_df is None or compile_df.empty or not probe:
        return _v("B9", "not-run", "no compile check and GPU probe in this run", rule, reason="needs nvcc and a GPU")
    c = compile_df.set_index(["pad", "forced"])
    ok8 = bool(c.loc[(8, False), "accepted"]) if (8, False) in c.index else False
    refused1 = (1, False) in c.index and not bool(c.loc[(1, False), "accepted"]) and bool(c.loc[(1, False), "static_assert"])
    nvcc_takes_1 = (1, True) in c.index and bool(c.loc[(1, True), "accepted"])
    outcome = probe.get("pad1_outcome", "")
    pad8_err = probe.get("pad8_relerr", math.nan)
    pad1 = (f"forced +1 build faulted ({probe.get('pad1_error', '')[:80]})" if outcome == "fault"
            else f"forced +1 build returned {'correct' if outcome == 'correct' else 'wrong'} results "
                 f"(rel. err {probe.get('pad1_relerr', math.nan):.3g})")
    fig = (f"+8 pad: rel. err {pad8_err:.2e}; +1 pad: refused at compile time by our static_assert"
           f"{'' if refused1 else ' (NOT refused)'}; nvcc itself {'accepts' if nvcc_takes_1 else 'rejects'} ldm=129; "
           + pad1)
    good8 = ok8 and pad8_err < TOL
    if good8 and refused1 and outcome in ("fault", "wrong"):
        return _v("B9", "holds", fig, rule)
    why = [m for m, bad in ((f"the +8 build {'is not correct' if ok8 else 'did not compile'}", not good8),
                            ("our static_assert did not refuse +1", not refused1),
                            ("the forced +1 build computed correct results", outcome == "correct"),
                            (f"the forced +1 outcome is {outcome!r}", outcome not in ("fault", "wrong", "correct")))
           if bad]
    return _v("B9", "differs", fig, rule, reason="; ".join(why))


def ceiling_rate(ceil: Optional[pd.DataFrame], name: str) -> Optional[float]:
    """p50 rate of one measured ceiling ('fp32_fma', 'bf16_tensor', 'fp8_tensor_blockwise') from a
    ceilings table, or None."""
    if ceil is None:
        return None
    r = ceil[(ceil["ceiling"] == name) & (ceil["status"] == "measured")]
    return float(r["rate_p50"].iloc[0]) if len(r) else None


def gemm_rows(sweep: pd.DataFrame, arm: str, site: str) -> pd.DataFrame:
    """The measured GEMM rows of one arm at one site, by M (B1 / B3's figures)."""
    g = sweep[(sweep["role"] == "gemm") & (sweep["status"] == "measured") & (sweep["arm"] == arm)
              & (sweep["site"] == site)]
    return g.sort_values("M")


def mark_seed_fractions(a_scalar, a_wmma, ylabel: str = "fraction of the ceiling") -> None:
    """The seed's figures on the B1 (scalar_tiled / FP32) and B3 (wmma_w8a16 / BF16) panels, in
    grey with their own labels: the structural 1/4 ceiling and the measured 6.8%, the 50-70% band."""
    a_scalar.axhline(SEED["scalar_ceiling"], color="#555555", ls="--", lw=1)
    a_scalar.text(0.02, SEED["scalar_ceiling"], "seed: structural ceiling 1/4", fontsize=7, va="bottom",
                  transform=a_scalar.get_yaxis_transform())
    a_scalar.axhline(SEED["scalar_fraction_fp32"], color="#999999", ls=":", lw=1)
    a_scalar.text(0.02, SEED["scalar_fraction_fp32"], "seed: measured 6.8%", fontsize=7, va="bottom",
                  transform=a_scalar.get_yaxis_transform())
    a_wmma.axhspan(*SEED["wmma_fraction"], color="#dddddd", alpha=0.6, lw=0)
    a_wmma.text(0.02, SEED["wmma_fraction"][1], "seed: 50-70%", fontsize=7, va="bottom",
                transform=a_wmma.get_yaxis_transform())
    for ax in (a_scalar, a_wmma):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel(ylabel)


def verdicts(sweep: pd.DataFrame, step: Optional[pd.DataFrame], ceil: Optional[pd.DataFrame],
             num: Optional[pd.DataFrame], comp: Optional[pd.DataFrame], probe: Optional[dict],
             tiles: Optional[pd.DataFrame] = None) -> list:
    """Notebook 06's six verdicts from its tables (B1 and B3 over every measured point: sweep,
    step and the WMMA tile check)."""
    both = pd.concat([t for t in (sweep, step, tiles) if t is not None], ignore_index=True)
    out = [b1_verdict(both, ceiling_rate(ceil, "fp32_fma")),
           b3_verdict(both, ceiling_rate(ceil, "bf16_tensor"), mma_sync_measured=ceiling_rate(ceil, "bf16_mma_sync"))]
    if step is not None:
        st = step_table(step, ceilings={"fp32": ceiling_rate(ceil, "fp32_fma"),
                                        "bf16": ceiling_rate(ceil, "bf16_tensor"),
                                        "fp8_blockwise": ceiling_rate(ceil, "fp8_tensor_blockwise")})
        out.append(b4_verdict(st))
    else:
        out.append(b4_verdict(None))
    out.append(b7_verdict(three_arms_view(sweep)))
    out.append(b8_verdict(num))
    out.append(b9_verdict(comp, probe))
    return out
