"""W8A8 blockwise FP8 GEMM arms over M: checked against float64, then timed (notebooks 03-05).

One registry of arms, one sweep, one tidy table; the three notebooks ask it different questions.

| arm                      | what runs                                                            |
| ------------------------ | -------------------------------------------------------------------- |
| mma_blockwise            | our CUDA kernel on mma.sync e4m3 (16 tiles x 3 main loops, swizzle)  |
| triton_blockwise         | our Triton kernel: ptr / tma / swapab paths, every candidate tile    |
| cutlass_blockwise_sm90   | CUTLASS 3.x Hopper blockwise collective (when its module imports)   |
| cublaslt_blockwise       | ``F.scaled_mm``, 1x128 activation / 128x128 weight scales            |
| cublas_bf16              | ``torch.mm`` on bf16 (the dequantised weights): the 16-bit baseline |
| cublas_fp8_tensorwise    | ``torch._scaled_mm``, one scale per tensor: the FP8 reference without |
|                          | per-block promotion (no blockwise kernel should beat it)              |

Every (shape, M) point gets fresh random operands (activations with per-token magnitudes and
outlier channels, weights with per-block magnitudes, both quantised by the reference
quantisers), a float64 reference of a subset of rows, and then, per arm candidate: one call
into a NaN-poisoned output, checked (relative error, DeepGEMM's scale-free
1 - 2Σxy/Σ(x²+y²), NaNs left), and only if it passes, timing over operand sets rotated past
L2. W8A8 arms are timed twice: on pre-quantised activations (``quant`` = none) and with the
1x128 activation quantiser inside the timed call (``quant`` = the quantiser's name).

Mind the hardware: on sm_90 an e4m3 ``mma.sync`` (our mma_blockwise) runs as F2FP conversions
plus fp16 HMMA (no FP8 tensor cores; the census of notebook 09 shows it), so mma_blockwise
cannot reach FP8 rates on Hopper; only wgmma (Triton with >= 64-row tiles, CUTLASS 3.x,
cuBLASLt) does.

The post-processing (best rows, tile-by-M selection, crossovers, target ratios, verdicts)
is pure pandas and runs on CPU tables (tests use synthetic ones).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd

from ..facts import shapes as shp
from ..arms import peer_catalog, registry
from ..kernels import mma_blockwise as mb
from ..emulate import blockscale
from ..measure import bench, harness
from ..measure.progress import progress as track
from .three_arms import B7_MARGIN   # one rule for B7 in notebooks 05 and 06

PER_TENSOR = "cublas_fp8_tensorwise"   # reference only: the same e4m3 codes with one scale per tensor
ARMS = ("mma_blockwise", "triton_blockwise", "cutlass_blockwise_sm90", "cublaslt_blockwise", "cublas_bf16", PER_TENSOR,
        "gemv_w8a8_blockwise", "wgmma_blockwise_sm90")
OURS = ("mma_blockwise", "triton_blockwise", "cutlass_blockwise_sm90", "gemv_w8a8_blockwise",
        "wgmma_blockwise_sm90")   # fp8lab's arms (targets)
W8A8 = ("mma_blockwise", "triton_blockwise", "cutlass_blockwise_sm90", "cublaslt_blockwise", "gemv_w8a8_blockwise",
        "wgmma_blockwise_sm90")
#: the arms that may be not-run where their hardware is absent (CUTLASS's module, sm_90a code)
MAY_NOT_RUN = ("cutlass_blockwise_sm90", "wgmma_blockwise_sm90")
#: gemv_w8a8_blockwise is a decode kernel (64 tokens per CTA, the weights re-read per 64): timed up to this M
GEMV_W8A8_MAX_M = 64
#: other people's blockwise FP8 GEMMs (issue 17): fp8lab.peers.sweeps.blockwise, a table of their own
PEERS = peer_catalog.ids_for("05")
#: What the ``quant`` column can name besides 'none': the CUDA quantiser, or the torch one
#: when it is missing (:func:`pick_quantiser`). Legend texts and colours: fp8lab.arms.registry.
QUANTISERS = ("quant_act_warp", "quant_act_reference")

DEFAULT_SHAPES = ("qwen3-8b:o_proj", "qwen3-8b:down_proj", "deepseek-v3:dense_down")
DEFAULT_MS = (1, 16, 128, 1024, 4096)

# Correctness gate before timing. bf16 output rounding alone gives a relative error of
# ~1.7e-3 (Frobenius) and a calc_diff of ~1.5e-6; a wrong scale block gives >= 3e-2 / 1e-3.
CHECK_RELERR = 5e-3
CHECK_DIFF = 5e-5

# Issue 22's targets (measured in the same run, each beside the best peer of that run).
TARGET_SPEEDUP = 1.10            # best fp8lab arm vs cuBLASLt blockwise, every M >= TARGET_LARGE_M
TARGET_LARGE_M = 1024
TARGET_BW_FRACTION = 0.88        # weight bytes / time vs measured copy bandwidth, M <= TARGET_SMALL_M
TARGET_SMALL_M = 16
TARGET_MIN_WEIGHT_BYTES = 32e6   # ... on shapes with >= 32 MB of FP8 weights

COLUMNS = ["shape", "model", "site", "M", "N", "K", "arm", "variant", "path", "config", "swizzle", "quant",
           "status", "time_p20_s", "time_p50_s", "time_p80_s", "tflops_p50", "tflops_p20", "tflops_p80",
           "weight_bytes", "weight_Bps_p50", "min_bytes", "relerr", "calc_diff", "max_err_norm", "nan_left",
           "poison", "n_samples", "timing_method", "rotation_sets", "sm_mhz_median", "sm_mhz_min",
           "power_w_max", "clock_reasons", "clock_source", "clock_note"]


# ------------------------------------------------------------------------------------------
# shapes and counting (CPU)
# ------------------------------------------------------------------------------------------
def resolve_shapes(names) -> list:
    """'model:site' names (or Shape objects, or (N, K) pairs for ad-hoc shapes) -> Shapes."""
    out = []
    for s in names:
        if isinstance(s, shp.Shape):
            out.append(s)
        elif isinstance(s, str):
            out.append(shp.get(s))
        elif isinstance(s, (tuple, list)) and len(s) == 2:
            out.append(shp.Shape("custom", f"{int(s[0])}x{int(s[1])}", int(s[0]), int(s[1])))
        else:
            raise ValueError(f"a shape is 'model:site', a Shape or an (N, K) pair, got {s!r}")
    if not out:
        raise ValueError("need at least one shape")
    return out


def weight_bytes(arm: str, N: int, K: int) -> float:
    """Bytes of the weight stream ``arm`` reads (codes + scales), from the arm registry's count;
    NaN where the format cannot take the shape (a row that records why it did not run)."""
    try:
        return registry.count(arm, M=1, N=N, K=K).weight_bytes
    except ValueError:
        return math.nan


def min_bytes(arm: str, M: int, N: int, K: int) -> float:
    """The fewest DRAM bytes of one call of ``arm`` (operands, scales and output once), from the
    arm registry's count; NaN where the format cannot take the shape."""
    try:
        return registry.count(arm, M=M, N=N, K=K).bytes
    except ValueError:
        return math.nan


def _next_pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def mma_candidates(M: int, n: int | str = 3, *, include_seed: bool = False, N: int | None = None,
                   sms: int = 132) -> list:
    """mma_blockwise tile configs to time at M (and N): the rule is "tile rows near M, narrow
    tiles for small M, wide for large M, and enough thread blocks for the SMs"; the top ``n``
    by that score, or all 16 with ``n='all'``. The sweep, not this rule, picks the winner.

    score = |log2(BM / BM*)| + 0.5 |log2(BN / BN*)| + 0.5 max(0, log2(2 SMs / tiles)), with
    BM* = clamp(next_pow2(M), 16, 256), BN* = 64 for M <= 64, 128 up to 1024, 256 above, and
    tiles = ceil(M / BM) ceil(N / BN) (the last term only when N is given); ties go to more
    warps, then to the config id.
    """
    cfgs = mb.configs()
    if n == "all":
        out = list(cfgs)
    else:
        if int(n) < 1:
            raise ValueError(f"n must be >= 1 or 'all', got {n!r}")
        bm_t = min(256, max(16, _next_pow2(M)))
        bn_t = 64 if M <= 64 else (128 if M <= 1024 else 256)

        def score(ic):
            i, c = ic
            s = abs(math.log2(c.bm / bm_t)) + 0.5 * abs(math.log2(c.bn / bn_t))
            if N is not None:
                tiles = math.ceil(M / c.bm) * math.ceil(N / c.bn)
                s += 0.5 * max(0.0, math.log2(2 * sms / tiles))
            return (round(s, 9), -c.warps, i)

        out = [c for _, c in sorted(enumerate(cfgs), key=score)[: int(n)]]
    if include_seed and mb.SEED_CONFIG not in out:
        out = [mb.SEED_CONFIG] + out
    return out


def triton_candidates(M: int, spec="auto") -> list:
    """(path, variant) pairs of triton_blockwise to time at M. 'auto': the swap-AB kernel and
    the pointer kernel for decode sizes (M <= 64); the TMA kernel in both promotions and the
    common pointer kernel above. A list of pairs is taken as given."""
    if spec == "auto":
        if M <= 64:
            return [("swapab", "per_block"), ("ptr", "per_block")]
        # per_block_inplace is left out: wrong on the H200 (tb.GPU_DISABLED says why)
        return [("tma", "per_block"), ("ptr", "per_block")]
    out = [tuple(p) for p in spec]
    for p in out:
        if len(p) != 2:
            raise ValueError(f"triton candidates are (path, variant) pairs, got {p!r}")
    return out


# ------------------------------------------------------------------------------------------
# operands and checking (GPU)
# ------------------------------------------------------------------------------------------
@dataclasses.dataclass
class OpSet:
    """One set of operands of one problem (rotated through when timing)."""
    x: object           # (M, K) bf16 activations before quantisation
    x_pad: object       # (Mp, K) bf16, Mp = M rounded up to 4 (cuBLASLt), zero rows appended
    a: object           # (M, K) e4m3
    a_scale: object     # (M, K/128) fp32, M-major (strides (1, M))
    b: object           # (N, K) e4m3
    b_scale: object     # (ceil(N/128), K/128) fp32 row-major
    w_bf16: object = None   # (N, K) bf16 dequantised weights (cublas_bf16)
    lt: object = None       # baselines.BlockwiseOperands, built on first use
    cutlass: object = None  # {config name: cutlass_blockwise_sm90.CutlassBlockwise plan}, built on first use
    cutlass_q: object = None  # {config name: (q, scales, plan)}: the quantiser's fixed buffers and the plan on them
    gemv_w8a8: object = None  # gemv_w8a8.PackedW8A8 of b (the decode kernel's layout), built on first use
    wgmma: object = None      # {variant: wgmma_blockwise.WgmmaBlockwise plan}, built on first use
    wgmma_q: object = None    # {variant: (q, scales, plan)}: the quantiser's fixed buffers and the plan on them

    def clone(self):
        c = lambda t: None if t is None else t.clone()  # noqa: E731
        sa = self.a_scale.t().contiguous().t()
        x = self.x.clone()
        xp = x if self.x_pad.shape[0] == x.shape[0] else self.x_pad.clone()
        return OpSet(x, xp, self.a.clone(), sa, self.b.clone(), self.b_scale.clone(), c(self.w_bf16))


def make_operands(M: int, N: int, K: int, *, seed: int = 0, device="cuda", bf16_weights: bool = False) -> OpSet:
    """Random operands like a real layer's: activations N(0,1) x a per-token magnitude
    2^U(-3,3) with every 37th channel an outlier (x20), weights N(0, 0.02) x a per-128x128-block
    magnitude 2^U(-2,2) (a wrong scale block shows), both quantised by the reference
    quantisers (1x128 per token, 128x128 per block)."""
    import torch

    from ..kernels import baselines as bl

    if K % 128:
        raise ValueError(f"K must be a multiple of 128 (the reference quantisers' group), got {K}")
    g = torch.Generator(device=device).manual_seed(int(seed))
    x = torch.randn(M, K, generator=g, device=device)
    x *= torch.exp2(torch.rand(M, 1, generator=g, device=device) * 6 - 3)
    x[:, ::37] *= 20.0
    x = x.to(torch.bfloat16)
    nb, kb = math.ceil(N / 128), K // 128
    w = torch.randn(N, K, generator=g, device=device) * 0.02
    mag = torch.exp2(torch.rand(nb, kb, generator=g, device=device) * 4 - 2)
    w *= mag.repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)
    b, sb = bl.quant_weight_reference(w)
    del w
    a, sa = bl.quant_act_reference(x)
    sa = sa.t().contiguous().t()
    Mp = -(-M // 4) * 4
    x_pad = x if Mp == M else torch.nn.functional.pad(x, (0, 0, 0, Mp - M))
    w16 = bl.dequantize_weight(b, sb) if bf16_weights else None
    return OpSet(x, x_pad, a, sa, b, sb, w16)


def check_rows(M: int, max_rows: int = 512, seed: int = 0) -> np.ndarray:
    """Rows of the output compared with float64: all up to max_rows, else the first and last
    64 and a random rest (edges are where tiles go wrong)."""
    if M <= max_rows:
        return np.arange(M)
    rng = np.random.default_rng(seed)
    mid = rng.choice(np.arange(64, M - 64), size=max_rows - 128, replace=False)
    return np.unique(np.concatenate([np.arange(64), np.arange(M - 64, M), mid]))


# The references below take torch tensors (the GPU path) or numpy arrays (the CPU tests of
# which product each arm is checked against): only these three helpers tell them apart.
def _is_torch(t) -> bool:
    return hasattr(t, "double")


def _f64(t):
    return t.double() if _is_torch(t) else np.asarray(t, dtype=np.float64)


def _rows64(t, rows):
    """float64 rows ``rows`` of a 2-D tensor or array."""
    if _is_torch(t):
        import torch

        return t[torch.as_tensor(rows, device=t.device, dtype=torch.long)].double()
    return np.asarray(t, dtype=np.float64)[np.asarray(rows, dtype=np.int64)]


def reference_rows(a, a_scale, b, b_scale, rows):
    """float64 (len(rows), N) of the blockwise-scaled product, from dequantised operands
    (an e4m3 code times an fp32 scale is exact in float64)."""
    A = blockscale.dequant(_rows64(a, rows), _rows64(a_scale, rows), (1, 128))
    B = blockscale.dequant(b, b_scale, (128, 128))
    return A @ B.T


#: which float64 product each arm's output is checked against (``reference_for``); an arm not
#: listed is checked against the blockwise-scaled one. cublas_fp8_tensorwise runs the e4m3 codes
#: with unit scales (the FP8 GEMM without block scaling), so its output is the codes' product.
REFERENCE_OF = {"cublas_bf16": "bf16", PER_TENSOR: "codes"}
REFERENCES = {"blockwise": "(a * a_scale) @ (b * b_scale): e4m3 codes times their 1x128 / 128x128 scales",
              "bf16": "x @ w_bf16: the bf16 activations times the dequantised bf16 weights",
              "codes": "a @ b: the e4m3 codes with unit scales"}


def reference_kind(arm: str) -> str:
    """Which product (a key of REFERENCES) ``arm`` is checked against; ValueError for an
    unknown arm. CPU."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; known: {list(ARMS)}")
    return REFERENCE_OF.get(arm, "blockwise")


def reference_for(arm: str, s: "OpSet", rows, cache: Optional[dict] = None):
    """float64 (len(rows), N): what ``arm``'s output on operand set ``s`` must equal on rows
    ``rows``; the one place run_point and the GPU tests take an arm's reference from. Takes
    torch tensors or numpy arrays. ``cache`` (a dict, one per operand set and rows) keeps
    each kind of reference once."""
    kind = reference_kind(arm)
    if cache is not None and kind in cache:
        return cache[kind]
    if kind == "bf16":
        if s.w_bf16 is None:
            raise ValueError("cublas_bf16 needs operands made with bf16_weights=True")
        ref = _rows64(s.x, rows) @ _f64(s.w_bf16).T
    elif kind == "codes":
        ref = _rows64(s.a, rows) @ _f64(s.b).T
    else:
        ref = reference_rows(s.a, s.a_scale, s.b, s.b_scale, rows)
    if cache is not None:
        cache[kind] = ref
    return ref


def compare(out, ref_rows, rows) -> dict:
    """relerr (Frobenius, on the checked rows), calc_diff, max |err| / max |ref|, NaNs anywhere."""
    import torch

    nan_left = int(torch.isnan(out).sum().item())
    r = torch.as_tensor(rows, device=out.device, dtype=torch.long)
    got = out[r].double()
    ref = ref_rows
    finite = torch.isfinite(got).all().item()
    if not finite:
        return dict(relerr=math.inf, calc_diff=math.inf, max_err_norm=math.inf, nan_left=nan_left)
    err = got - ref
    den = float((got * got + ref * ref).sum())
    return dict(relerr=harness.relerr(got, ref),
                calc_diff=0.0 if den == 0 else 1.0 - 2.0 * float((got * ref).sum()) / den,
                max_err_norm=float(err.abs().max() / ref.abs().max()), nan_left=nan_left)


def passes(chk: dict) -> bool:
    return chk["nan_left"] == 0 and chk["relerr"] <= CHECK_RELERR and chk["calc_diff"] <= CHECK_DIFF


# ------------------------------------------------------------------------------------------
# quantiser
# ------------------------------------------------------------------------------------------
def pick_quantiser(device="cuda"):
    """(name, fn, note): fp8lab.kernels.quant_act.quant_act_warp when it imports and matches
    the reference quantiser on a test input, else baselines.quant_act_reference."""
    import torch

    from ..kernels import baselines as bl

    note = ""
    try:
        from ..kernels import quant_act as qa
        if hasattr(qa, "quant_act_warp"):
            fn = qa.quant_act_warp
        else:
            # M-major scales: what cuBLASLt and CUTLASS read, and any-stride for our kernels
            def fn(x):
                return qa.quant_act(x, "quant_act_warp", scale_layout="m_major")
        x = (torch.randn(67, 1024, device=device) * 3).to(torch.bfloat16)
        x[3, 128:256] = 0
        q, s = fn(x)
        qr, sr = bl.quant_act_reference(x)
        ok = (tuple(q.shape) == tuple(qr.shape) and tuple(s.shape) == tuple(sr.shape)
              and q.dtype == qr.dtype and torch.equal(q.view(torch.uint8), qr.view(torch.uint8))
              and torch.allclose(s.float(), sr, rtol=1e-6, atol=0))
        if ok:
            return QUANTISERS[0], fn, ("fp8lab.kernels.quant_act, one warp per 128-group, M-major scales "
                                       "(bit-exact vs the reference quantiser)")
        note = "quant_act_warp differs from the reference quantiser: not used"
    except ImportError as e:
        note = f"quant_act_warp not importable ({e})"
    except Exception as e:  # noqa: BLE001 - a different signature or a kernel error: say so, use the reference
        note = f"quant_act_warp failed its check ({type(e).__name__}: {str(e)[:120]})"
    return QUANTISERS[1], bl.quant_act_reference, note + "; using baselines.quant_act_reference (torch ops)"


# ------------------------------------------------------------------------------------------
# arms: each candidate computes out = gemm(opset, a, a_scale, out) for given activations
# ------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Candidate:
    arm: str
    gemm: Callable      # (opset, a (M,K) e4m3, a_scale (M,K/128) fp32, out or None) -> (M, N) bf16
    variant: str = ""
    path: str = ""
    config: str = ""
    swizzle: int = 0
    takes_out: bool = False


def _mma_candidate(cfg, variant: str, swizzle: int, lookup: str = "per_warp") -> Candidate:
    def gemm(s, a, sa, out):
        return mb.mma_blockwise(a, sa, s.b, s.b_scale, config=cfg, variant=variant, swizzle=swizzle,
                                scale_lookup=lookup, out=out, check_scales=False)
    return Candidate("mma_blockwise", gemm, variant=variant, path="mma.sync", config=cfg.name,
                     swizzle=swizzle, takes_out=True)


def _triton_candidate(path: str, variant: str, config: dict) -> Candidate:
    """One pinned tile of triton_blockwise: every tile its autotune policy would try is a candidate
    of its own, timed by run_point like the others (the fastest is the arm's best). Triton's own
    autotuner picks from do_bench on one operand set, and its pick moved a verdict between runs."""
    from ..kernels import triton_blockwise as tb

    def gemm(s, a, sa, out):
        return tb.blockwise_fp8_gemm(a, s.b, sa, s.b_scale, variant=variant, path=path, config=config, out=out,
                                     check_scales=False)
    return Candidate("triton_blockwise", gemm, variant=variant, path=path, config=tb.config_text(config),
                     takes_out=True)


def cutlass_status() -> str | None:
    """None when fp8lab.kernels.cutlass_blockwise_sm90 imports and says it can run here, else why not."""
    try:
        from ..kernels import cutlass_blockwise_sm90 as cb
        cb.cutlass_blockwise_sm90  # noqa: B018 - the entry point the brief names
    except Exception as e:  # noqa: BLE001 - ImportError, or its build failing at import
        return f"fp8lab.kernels.cutlass_blockwise_sm90 does not import ({type(e).__name__}: {str(e)[:160]})"
    available = getattr(cb, "available", None)
    if available is not None:
        try:
            ok, why = available()
        except Exception as e:  # noqa: BLE001
            ok, why = False, f"{type(e).__name__}: {e}"
        if not ok:
            return f"fp8lab.kernels.cutlass_blockwise_sm90 cannot run here: {str(why)[:200]}"
    return None


def cutlass_candidates(M: int, spec="auto") -> list:
    """cutlass_blockwise_sm90 config names to time at M. 'auto': every config from M >= 512 (where the
    arm competes for the 1.10x target and tile / cluster / raster / schedule decide it); below, the
    default plus the two that address small M: ping-pong's 64-row tile (less padding of M) and
    stream-K (splits K when the output has fewer tiles than SMs). A list of names is taken as given."""
    from ..kernels import cutlass_blockwise_sm90 as cb

    if isinstance(spec, str) and spec == "auto":
        if M >= 512:
            return list(cb.CONFIGS)
        return [cb.DEFAULT_CONFIG, "pingpong_64x128", "coop_128x128_streamk"]
    if isinstance(spec, str):
        spec = [spec]
    return [cb.get_config(n).name for n in spec]


def _cutlass_candidate(config: str | None = None) -> Candidate:
    from ..kernels import cutlass_blockwise_sm90 as cb

    plan_cls = getattr(cb, "CutlassBlockwise", None)
    kw = {} if config is None else {"config": config}

    def gemm(s, a, sa, out):
        if a is s.a and plan_cls is not None:
            # pre-quantised: scales laid out and TMA arguments built once (as for cuBLASLt)
            if s.cutlass is None:
                s.cutlass = {}
            if config not in s.cutlass:
                s.cutlass[config] = plan_cls(s.a, s.a_scale, s.b, s.b_scale, out=out, **kw)
            return s.cutlass[config]()
        return cb.cutlass_blockwise_sm90(a, sa, s.b, s.b_scale, out=out, **kw)
    return Candidate("cutlass_blockwise_sm90", gemm, path="cutlass 3.x", config=config or "", takes_out=True)


def cutlass_quant_call(config: str | None, M: int):
    """CUTLASS with its activation quantiser in the call, planned as a deployment would: the
    quantiser (quant_act_warp, M-major scales) writes into one fixed pair of buffers per operand
    set and the CUTLASS plan (scale layout, TMA descriptors) is built once on them, so the timed
    call is quantiser + GEMM. Without this, a new (q, scales) pair per call goes through
    ``cutlass_blockwise_sm90()``, which lays out the scales and builds the arguments on every
    call (host work and a copy that a real integration does not pay). Rows are padded to a
    multiple of 4 (``x_pad``, as for cuBLASLt: the SFA stride granularity); the result is the
    first M rows. Returns call(s, out=None) -> (M, N) bf16, or None when the plan class is absent."""
    from ..kernels import cutlass_blockwise_sm90 as cb

    plan_cls = getattr(cb, "CutlassBlockwise", None)
    if plan_cls is None:
        return None
    kw = {} if config is None else {"config": config}

    def call(s, out=None):
        return _planned_quant(s, "cutlass_q", config, M,
                              lambda q, sq, o: plan_cls(q, sq, s.b, s.b_scale, out=o, **kw))
    return call


def _planned_quant(s, cache: str, key, M: int, make_plan):
    """One timed call of quantiser + planned GEMM (cutlass_quant_call, wgmma_quant_call): on the
    first call per (operand set, key) the fixed buffers (q (Mp, K) e4m3, M-major scales, a
    NaN-filled (Mp, N) out) and ``make_plan(q, scales, out)`` are built and kept in ``s.<cache>``;
    every call quantises ``s.x_pad`` into them (quant_act_warp) and runs the plan. First M rows."""
    import torch

    from ..kernels import quant_act as qa

    if getattr(s, cache) is None:
        setattr(s, cache, {})
    st = getattr(s, cache).get(key)
    if st is None:
        Mp, K = s.x_pad.shape
        q = torch.empty((Mp, K), dtype=torch.float8_e4m3fn, device=s.x_pad.device)
        sq = torch.empty((K // 128, Mp), dtype=torch.float32, device=s.x_pad.device).t()   # M-major
        o = torch.full((Mp, s.b.shape[0]), float("nan"), dtype=torch.bfloat16, device=s.x_pad.device)
        qa.quant_act(s.x_pad, "quant_act_warp", scale_layout="m_major", q_out=q, s_out=sq)
        st = getattr(s, cache)[key] = (q, sq, make_plan(q, sq, o))
    q, sq, plan = st
    qa.quant_act(s.x_pad, "quant_act_warp", scale_layout="m_major", q_out=q, s_out=sq)
    return plan()[:M]


def wgmma_status() -> str | None:
    """None when fp8lab.kernels.wgmma_blockwise can run here, else why not (sm_90a code)."""
    from ..kernels import wgmma_blockwise as wg

    try:
        ok, why = wg.available()
    except Exception as e:  # noqa: BLE001
        ok, why = False, f"{type(e).__name__}: {e}"
    return None if ok else f"fp8lab.kernels.wgmma_blockwise cannot run here: {str(why)[:200]}"


def _wgmma_candidate(variant: str, tile_n: int) -> Candidate:
    """fp8lab's TMA + wgmma kernel, one variant, tiles of 128 x ``tile_n``. On pre-quantised
    activations the plan (per-token scales laid out M-major) is built once per operand set, as for
    CUTLASS."""
    from ..kernels import wgmma_blockwise as wg

    def gemm(s, a, sa, out):
        if a is s.a:
            if s.wgmma is None:
                s.wgmma = {}
            if variant not in s.wgmma:
                s.wgmma[variant] = wg.WgmmaBlockwise(s.a, s.a_scale, s.b, s.b_scale, out=out, variant=variant,
                                                     tile_n=tile_n)
            return s.wgmma[variant]()
        return wg.wgmma_blockwise(a, sa, s.b, s.b_scale, out=out, variant=variant, tile_n=tile_n)
    return Candidate("wgmma_blockwise_sm90", gemm, path="TMA + wgmma", variant=variant, config=f"128x{tile_n}",
                     takes_out=True)


def wgmma_quant_call(variant: str, tile_n: int, M: int):
    """The wgmma kernel with its activation quantiser in the call, planned as cutlass_quant_call
    plans CUTLASS (fixed buffers, M-major scales: the plan takes them without a copy)."""
    from ..kernels import wgmma_blockwise as wg

    def call(s, out=None):
        return _planned_quant(s, "wgmma_q", (variant, tile_n), M,
                              lambda q, sq, o: wg.WgmmaBlockwise(q, sq, s.b, s.b_scale, out=o, variant=variant,
                                                                 tile_n=tile_n))
    return call


def _gemv_w8a8_candidate(pdl: bool = False) -> Candidate:
    """fp8lab's W8A8 decode GEMV (gemv_w16.cuh's kFp8A8): split-K at the split model's pick. Its
    weight layout is packed once per operand set, outside the timing (as Marlin's repack).
    ``pdl``: launched as a programmatic dependent launch (variant 'pdl', sm_90+; elsewhere a
    not-run row): each call's first weight loads overlap the tail of the kernel before it, as in a
    decode step whose kernels all launch so; a call touches its activations, output and workspace
    only after that kernel has finished."""
    from ..kernels import gemv_w8a8 as g8

    def gemm(s, a, sa, out):
        if s.gemv_w8a8 is None:
            s.gemv_w8a8 = g8.pack(s.b, s.b_scale)
        return g8.gemv_w8a8(a, sa, s.gemv_w8a8, out=out, pdl=pdl)
    return Candidate("gemv_w8a8_blockwise", gemm, variant="pdl" if pdl else "", path="mma.sync f16 (e4m3 cvt)",
                     config="split-K auto", takes_out=True)


def _lt(s):
    from ..kernels import baselines as bl

    if s.lt is None:
        s.lt = bl.BlockwiseOperands(s.a, s.a_scale, s.b, s.b_scale)
    return s.lt


def _cublaslt_candidate() -> Candidate:
    import torch

    F = torch.nn.functional

    def gemm(s, a, sa, out):
        lt = _lt(s)
        if a is s.a:   # pre-quantised: the layout prepared once, outside the timing
            a2, sa2 = lt.a, lt.a_scale
        else:          # quantised in the call from x_pad: M already a multiple of 4; scales M-major
            a2, sa2 = a, sa.t().contiguous().t()
        c = F.scaled_mm(a2, lt.b.t(), sa2, F.ScalingType.BlockWise1x128, lt.b_scale,
                        F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)
        return c[: lt.M] if c.shape[0] != lt.M else c
    return Candidate("cublaslt_blockwise", gemm, path="cuBLASLt")


def _per_tensor_candidate() -> Candidate:
    """cuBLAS FP8 with one scale per tensor (torch._scaled_mm) on the same e4m3 codes: no
    per-block promotion at all, so at the same clock no blockwise kernel should beat it. A
    reference for the speedup target, not a W8A8 blockwise arm (its result is checked against
    the unscaled codes' product)."""
    import torch

    ones = {}

    def gemm(s, a, sa, out):
        one = ones.get(s.b.device)
        if one is None:
            one = ones[s.b.device] = torch.ones((), device=s.b.device, dtype=torch.float32)
        # TN as cuBLAS FP8 wants: A (M, K) row-major, B (N, K) row-major seen as (K, N) column-major
        return torch._scaled_mm(a, s.b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return Candidate(PER_TENSOR, gemm, path="cuBLASLt per-tensor")


def _bf16_candidate() -> Candidate:
    import torch

    def gemm(s, a, sa, out):
        return torch.mm(s.x, s.w_bf16.t())
    return Candidate("cublas_bf16", gemm, path="cuBLAS")


# ------------------------------------------------------------------------------------------
# the sweep
# ------------------------------------------------------------------------------------------
def _row(shape, M, cand: Candidate, quant: str, status: str, **kw) -> dict:
    row = {c: math.nan for c in COLUMNS}
    row.update(shape=shape.name, model=shape.model, site=shape.site, M=M, N=shape.N, K=shape.K, arm=cand.arm,
               variant=cand.variant, path=cand.path, config=cand.config, swizzle=cand.swizzle, quant=quant,
               status=status, weight_bytes=weight_bytes(cand.arm, shape.N, shape.K),
               min_bytes=min_bytes(cand.arm, M, shape.N, shape.K), poison="", timing_method="",
               clock_reasons="", clock_source="", clock_note="")
    row.update(kw)
    return row


def _warm_every_set(fn) -> None:
    """One call per operand set before timing: per-set state built on first use (cuBLASLt's
    padded operands, CUTLASS plans) must not be built inside a CUDA-graph capture, where its
    copies would be replayed with every timed call."""
    import torch

    for _ in range(getattr(fn, "n_sets", 1)):
        fn()
    torch.cuda.synchronize()


def timing_cols(tm, cnt, weight_bytes: Optional[float] = None) -> dict:
    """Timing columns of a row; rates from ``cnt``, the arm registry's count of one call
    (``weight_bytes``: the bytes of the tensors a peer really built, where they are known)."""
    flop, wbytes = float(cnt.flops), cnt.weight_bytes if weight_bytes is None else weight_bytes
    return dict(time_p20_s=tm.p20_s, time_p50_s=tm.p50_s, time_p80_s=tm.p80_s,
                tflops_p50=flop / tm.p50_s / 1e12, tflops_p20=flop / tm.p80_s / 1e12,
                tflops_p80=flop / tm.p20_s / 1e12, weight_Bps_p50=wbytes / tm.p50_s,
                n_samples=tm.n, timing_method=tm.method, rotation_sets=tm.rotation_sets)


def check_call(arm: str, call, s: OpSet, ref_rows, rows, *, takes_out: bool) -> tuple[dict, str]:
    """One ``call(s, out)`` on operand set ``s`` into a NaN-poisoned output (``out=`` when it
    ``takes_out``, else through the caching allocator), compared with the float64 reference rows.
    Returns (compare() dict, how the output was poisoned)."""
    import torch

    M, N = s.x.shape[0], s.b.shape[0]
    if takes_out:
        out = call(s, harness.poisoned((M, N), device=s.b.device))
        poison = "out="
    else:
        # a first call builds any per-operand state (cuBLASLt's padded copies), so that the
        # poisoned block freed next is the one the output of the checked call gets
        call(s, None)
        harness.poison_allocator((M, N), device=s.b.device)
        out = call(s, None)
        poison = "allocator"
    torch.cuda.synchronize()
    if tuple(out.shape) != (M, N) or out.dtype != torch.bfloat16:
        raise RuntimeError(f"{arm} returned {tuple(out.shape)} {out.dtype}, expected ({M}, {N}) bfloat16")
    return compare(out, ref_rows, rows), poison


def check_candidate(cand: Candidate, s: OpSet, ref_rows, rows, a=None, a_scale=None) -> tuple[dict, str]:
    """:func:`check_call` of a candidate's GEMM on its operands (activations ``a`` / ``a_scale``
    in place of the set's own where given)."""
    a = s.a if a is None else a
    a_scale = s.a_scale if a_scale is None else a_scale
    return check_call(cand.arm, lambda s_, out: cand.gemm(s_, a, a_scale, out), s, ref_rows, rows,
                      takes_out=cand.takes_out)


def _check_then_time(shape, M: int, cand: Candidate, quant: str, check, call, sets, *, timing: dict,
                     log=None) -> tuple[dict, Optional[float]]:
    """The check-then-time step of one (candidate, quantiser) at one point: ``check()`` -> (compare
    dict, poison); ``call(s)`` the timed call on operand set ``s``, rotated over ``sets``, one warm
    call per set, then timed (``timing``: harness.timed keywords). (row, p50 seconds or None)."""
    what = f"{shape.name} M={M} {cand.arm} {cand.path} {cand.variant} {cand.config}" + (
        f" +{quant}" if quant != "none" else "")
    try:
        chk, poison = check()
    except Exception as e:  # noqa: BLE001 - one arm failing must not stop the others
        status = ("not-run: " if isinstance(e, (ValueError, NotImplementedError)) else "error: ") + harness.error_text(e)
        if log:
            log(f"{what}: {status}")
        return _row(shape, M, cand, quant, status), None
    if not passes(chk):
        if log:
            log(f"{what}: FAILED CHECK {chk}")
        return _row(shape, M, cand, quant, f"failed-check: relerr {chk['relerr']:.3g}, calc_diff "
                    f"{chk['calc_diff']:.3g}, NaNs {chk['nan_left']}", poison=poison, **chk), None
    fn = bench.rotating(call, [(s,) for s in sets])
    try:
        _warm_every_set(fn)
        tm, clk = harness.timed(fn, **timing)
    except Exception as e:  # noqa: BLE001
        return _row(shape, M, cand, quant, "error: timing: " + harness.error_text(e), poison=poison, **chk), None
    cnt = registry.count(cand.arm, M=M, N=shape.N, K=shape.K)
    if log:
        log(f"{what}: {tm.p50_s * 1e6:.1f} us, {cnt.flops / tm.p50_s / 1e12:.1f} TFLOP/s, relerr {chk['relerr']:.2e}")
    return _row(shape, M, cand, quant, "measured", poison=poison, **chk, **timing_cols(tm, cnt), **clk), tm.p50_s


def _point_sets(shape, M: int, *, seed: int, bf16_weights: bool, max_sets: int):
    """Operands of one (shape, M): the checked set, its rotated copies (together past 2x L2, at most
    ``max_sets``) and the rows the float64 check compares."""
    s0 = make_operands(M, shape.N, shape.K, seed=seed, bf16_weights=bf16_weights)
    per_set = M * shape.K + shape.N * shape.K + 2 * M * shape.N + (2 * shape.N * shape.K if bf16_weights else 0)
    n_sets = min(max_sets, bench.n_rotation_sets(per_set, bench.device_l2_bytes(), max_sets=10**6))
    return s0, harness.copies(s0, n_sets, OpSet.clone), check_rows(M, seed=seed)


def run_point(shape, M: int, candidates: Sequence[Candidate], *, quantiser=None, quant_arms=(),
              quant_each=False, seed: int = 0, warmup_ms: float = 10, rep_ms: float = 50, graph_threshold_s: float = 20e-6,
              graph_max_m: int = 64, max_sets: int = 16, sampler=None, log=None) -> list:
    """Check and time every candidate at one (shape, M); then, for each arm in quant_arms, its
    fastest candidate (every candidate with ``quant_each`` True, or of the arms it names: claim A3
    compares two main loops at one tile, both with the quantiser, as the seed's vLLM microbenchmark
    timed them) again with the activation quantiser inside the timed call. Rows out.

    Timing: CUDA-graph replay for M <= graph_max_m (decode-sized calls last a few us, less than
    the Python launch path of a Triton or torch call, so only replay measures the GPU), else
    bench's "auto" (events with L2 flushed; replay under graph_threshold_s). Operand sets are
    rotated so that together they exceed 2x L2 either way."""
    import torch

    need_bf16 = any(c.arm == "cublas_bf16" for c in candidates)
    s0, sets, rows = _point_sets(shape, M, seed=seed, bf16_weights=need_bf16, max_sets=max_sets)
    refs: dict = {}                      # one reference per kind (reference_for), built on first use
    timing = dict(sampler=sampler, method="graph" if M <= graph_max_m else "auto", warmup_ms=warmup_ms,
                  rep_ms=rep_ms, graph_threshold_s=graph_threshold_s)
    out_rows, timed = [], []
    for cand in candidates:
        row, t = _check_then_time(
            shape, M, cand, "none", lambda c=cand: check_candidate(c, s0, reference_for(c.arm, s0, rows, refs), rows),
            lambda s, c=cand: c.gemm(s, s.a, s.a_scale, None), sets, timing=timing, log=log)
        out_rows.append(row)
        if t is not None:
            timed.append((t, cand))

    if quantiser is not None and quant_arms:
        qname, qfn = quantiser
        todo = []
        for arm in quant_arms:
            mine = sorted([(t, i, c) for i, (t, c) in enumerate(timed) if c.arm == arm], key=lambda x: x[:2])
            every = quant_each is True or (not isinstance(quant_each, bool) and arm in quant_each)
            todo += [c for _, _, c in (mine if every else mine[:1])]
        for cand in todo:
            lt = cand.arm == "cublaslt_blockwise"

            def call(s, out=None, c=cand, lt=lt):
                q, sq = qfn(s.x_pad if lt else s.x)
                return c.gemm(s, q, sq, out)
            planned = None
            if qname == QUANTISERS[0] and cand.arm == "cutlass_blockwise_sm90":
                planned = cutlass_quant_call(cand.config or None, M)
            elif qname == QUANTISERS[0] and cand.arm == "wgmma_blockwise_sm90":
                planned = wgmma_quant_call(cand.variant, int(cand.config.split("x")[1]), M)
            if planned is not None:
                call = planned          # noqa: F811 - quantiser into fixed buffers, plan built once

            def check(c=cand, call=call):
                q0, sq0 = qfn(s0.x)
                refq = reference_rows(q0, sq0, s0.b, s0.b_scale, rows)
                return check_call(c.arm, lambda s_, out: call(s_, out=out), s0, refq, rows, takes_out=c.takes_out)
            row, _ = _check_then_time(shape, M, cand, qname, check, call, sets, timing=timing, log=log)
            out_rows.append(row)
    sets = s0 = refs = None
    torch.cuda.empty_cache()
    return out_rows


PAIRED_ARMS= ("cublaslt_blockwise", PER_TENSOR)


def paired_point(shape, M: int, *, rounds: int = 9, seed: int = 0, warmup_ms: float = 5, rep_ms: float = 20,
                 max_sets: int = 16, sampler=None, log=None) -> list:
    """B5's two arms (cuBLASLt blockwise and cuBLAS FP8 per-tensor) at one (shape, M), checked and
    timed in alternating rounds (A B, B A, A B, ...), each round a short timing of each arm: both
    see the same clocks and power state, so their ratio per round does not carry the drift between
    a sweep's far-apart points (at M = 4096 under the H200's 700 W cap the per-tensor rate moved
    1119..1343 TFLOP/s between three runs while blockwise stayed at 1112..1124). Rows with a
    ``round`` column; the same columns as the sweep's otherwise."""
    import torch

    s0, sets, rows = _point_sets(shape, M, seed=seed, bf16_weights=False, max_sets=max_sets)
    refs: dict = {}
    timing = dict(sampler=sampler, method="auto", warmup_ms=warmup_ms, rep_ms=rep_ms, graph_threshold_s=20e-6)
    cands = [_cublaslt_candidate(), _per_tensor_candidate()]
    out = []
    for r in range(rounds):
        for cand in (cands if r % 2 == 0 else cands[::-1]):
            row, _ = _check_then_time(
                shape, M, cand, "none", lambda c=cand: check_candidate(c, s0, reference_for(c.arm, s0, rows, refs), rows),
                lambda s, c=cand: c.gemm(s, s.a, s.a_scale, None), sets, timing=timing, log=log)
            row["round"] = r
            out.append(row)
    sets = s0 = refs = None
    torch.cuda.empty_cache()
    return out


def paired_b5(shapes=DEFAULT_SHAPES, M: int = 4096, **kw) -> pd.DataFrame:
    """:func:`paired_point` at M for every shape: the table B5's rule reads first."""
    return pd.DataFrame([r for shape in resolve_shapes(shapes) for r in paired_point(shape, M, **kw)])


def paired_ratios(paired: pd.DataFrame) -> pd.DataFrame:
    """Per shape: blockwise rate / per-tensor rate of every round (= per-tensor time / blockwise
    time of that round), its median and p10..p90 over the rounds, and the arms' median SM clocks."""
    ok = paired[paired["status"] == "measured"]
    t = ok.pivot_table(index=["shape", "M", "round"], columns="arm", values="time_p50_s")
    mhz = ok.groupby(["shape", "arm"])["sm_mhz_median"].median().unstack("arm")
    rows = []
    if not set(PAIRED_ARMS) <= set(t.columns):
        return pd.DataFrame(columns=["shape", "M", "rounds", "ratio_p50", "ratio_p10", "ratio_p90"])
    t = t.dropna(subset=list(PAIRED_ARMS))
    for (shape, M), g in t.groupby(level=["shape", "M"]):
        r = g[PER_TENSOR] / g["cublaslt_blockwise"]
        rows.append(dict(shape=shape, M=int(M), rounds=len(r), ratio_p50=float(r.median()),
                         ratio_p10=float(r.quantile(0.1)), ratio_p90=float(r.quantile(0.9)),
                         mhz_blockwise=float(mhz.loc[shape, "cublaslt_blockwise"]),
                         mhz_per_tensor=float(mhz.loc[shape, PER_TENSOR])))
    return pd.DataFrame(rows)


def build_candidates(M: int, arms: Sequence[str], *, N: int | None = None, K: int | None = None, sms: int = 132,
                     mma_variants=("per_block",), mma_configs=3, mma_seed_config=False, mma_always=(),
                     mma_swizzle=(8,), triton="auto", cutlass="auto") -> tuple[list, list]:
    """(candidates, not-run rows' (arm, reason)) for one (M, N). ``mma_always``: config names
    timed at every M besides the rule's picks (so one tile's cost over all M is known).
    ``triton``: :func:`triton_candidates`' spec; each (path, variant) gives one candidate per tile
    of its autotune policy (``tb.autotune_space``; N and K default to 4096 when not given).
    ``cutlass``: :func:`cutlass_candidates`' spec (the arm's best config per M is then picked by
    best_rows, as for mma_blockwise's tiles)."""
    unknown = set(arms) - set(ARMS)
    if unknown:
        raise ValueError(f"unknown arms {sorted(unknown)}; known: {list(ARMS)}")
    cands, skipped = [], []
    for arm in arms:
        if arm == "mma_blockwise":
            picked = mma_candidates(M, mma_configs, include_seed=mma_seed_config, N=N, sms=sms)
            picked += [c for c in map(mb.get_config, mma_always) if c not in picked]
            for cfg in picked:
                for v in mma_variants:
                    for swz in mma_swizzle:
                        cands.append(_mma_candidate(cfg, v, int(swz)))
        elif arm == "triton_blockwise":
            from ..kernels import triton_blockwise as tb

            for path, variant in triton_candidates(M, triton):
                for cfg in tb.autotune_space(variant, path, M, N or 4096, K or 4096, sms=sms):
                    cands.append(_triton_candidate(path, variant, cfg))
        elif arm == "cutlass_blockwise_sm90":
            why = cutlass_status()
            if why:
                skipped.append((arm, why))
            else:
                cands += [_cutlass_candidate(c) for c in cutlass_candidates(M, cutlass)]
        elif arm == "cublaslt_blockwise":
            cands.append(_cublaslt_candidate())
        elif arm == "wgmma_blockwise_sm90":
            why = wgmma_status()
            if why:
                skipped.append((arm, why))
            else:
                from ..kernels import wgmma_blockwise as wg

                # the tile width pick_tile_n gives this (M, N) on ``sms`` SMs (N: 4096 when not given)
                bn = wg.pick_tile_n(M, N or 4096, sms)
                cands += [_wgmma_candidate(v, bn) for v in wg.VARIANTS]
        elif arm == "gemv_w8a8_blockwise":
            if M <= GEMV_W8A8_MAX_M:
                cands += [_gemv_w8a8_candidate(), _gemv_w8a8_candidate(pdl=True)]
            else:
                skipped.append((arm, f"a decode kernel: timed at M <= {GEMV_W8A8_MAX_M} (above, each 64 tokens "
                                     f"re-read the weights)"))
        elif arm == PER_TENSOR:
            cands.append(_per_tensor_candidate())
        else:
            cands.append(_bf16_candidate())
    return cands, skipped


def sweep(shapes=DEFAULT_SHAPES, Ms=DEFAULT_MS, arms=ARMS, *, mma_variants=("per_block",), mma_configs=3,
          mma_seed_config=False, mma_always=(), mma_swizzle=(8,), triton="auto", cutlass="auto", with_quant=True,
          quant_each=False, seed=0, warmup_ms=10.0, rep_ms=50.0, graph_threshold_s=20e-6, sampler=None,
          log=None) -> pd.DataFrame:
    """Check and time the arms at every (shape, M); one tidy row per candidate (and per
    quantised W8A8 arm: its fastest candidate, or every candidate with ``quant_each``: True or a
    tuple of arms).
    ``df.attrs``: quantiser name and note, cutlass status, triton version.

    Budget at the defaults (3 shapes x 5 M, 3 mma configs, autotune limited): ~15 rows per
    point, ~2-3 s of GPU time per point on an H200, plus compiles.
    """
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("sweep needs a CUDA device")
    shape_objs = resolve_shapes(shapes)
    Ms = [int(m) for m in Ms]
    if any(m < 1 for m in Ms):
        raise ValueError(f"every M must be >= 1, got {Ms}")
    quantiser, qnote = None, "activation quantisation not timed (with_quant=False)"
    if with_quant:
        qname, qfn, qnote = pick_quantiser()
        quantiser = (qname, qfn)
    quant_arms = [a for a in arms if a in W8A8]
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    rows = []
    for shape in track(shape_objs, desc="blockwise sweep", unit="shapes"):
        for M in track(Ms, desc="M"):
            cands, skipped = build_candidates(M, arms, N=shape.N, K=shape.K, sms=sms, mma_variants=mma_variants,
                                              mma_configs=mma_configs,
                                              mma_seed_config=mma_seed_config, mma_always=mma_always,
                                              mma_swizzle=mma_swizzle,
                                              triton=triton, cutlass=cutlass)
            for arm, why in skipped:
                rows.append(_row(shape, M, Candidate(arm, None), "none", f"not-run: {why}"))
            rows += run_point(shape, M, cands, quantiser=quantiser, quant_arms=quant_arms, quant_each=quant_each,
                              seed=seed + M,
                              warmup_ms=warmup_ms, rep_ms=rep_ms, graph_threshold_s=graph_threshold_s,
                              sampler=sampler, log=log)
    df = pd.DataFrame(rows, columns=COLUMNS)
    import triton as _triton

    df.attrs.update(quantiser=quantiser[0] if quantiser else "none", quantiser_note=qnote,
                    cutlass_status=cutlass_status() or "imported", triton_version=_triton.__version__,
                    torch_version=torch.__version__)
    return df


def measure_copy_bandwidth(copy_gib: float = 2.0, sampler=None) -> dict:
    """The device-to-device copy ceiling, measured now (bytes read + written per second)."""
    from . import ceilings as ce

    df = ce.measure_ceilings(copy_gib=copy_gib, ceilings=["copy_bandwidth"], sampler=sampler)
    r = df.iloc[0]
    if r["status"] != "measured":
        raise RuntimeError(f"copy bandwidth not measured: {r['status']}")
    return dict(copy_Bps_p50=float(r["rate_p50"]), copy_Bps_p20=float(r["rate_p20"]),
                copy_Bps_p80=float(r["rate_p80"]), spec_Bps=float(r["spec"]))


# ------------------------------------------------------------------------------------------
# notebook 03: the mma family's correctness (A4), the buggy lookups (A5), K tails
# ------------------------------------------------------------------------------------------
A4_SHAPES = ((1, 264, 384), (7, 264, 384), (83, 264, 384), (4097, 264, 384))


def check_mma_family(shapes=A4_SHAPES, *, seed=0, swizzle=8) -> pd.DataFrame:
    """Every config x variant of mma_blockwise at each (M, N, K): fresh random inputs, a
    NaN-poisoned output, float64 reference of every row. N = 264 is not a multiple of any tile
    width (64 / 128 / 256), so the last column tile is ragged everywhere."""
    import torch

    rows = []
    for (M, N, K) in track(shapes, desc="A4 tile check", unit="shapes"):
        d = mb.generate_inputs(M, N, K, seed=seed + M, backend="torch")
        ref = mb.mma_blockwise_reference(**d)
        all_rows = np.arange(M)
        for cfg in mb.configs():
            for v in mb.VARIANTS:
                out = harness.poisoned((M, N), device=d["a"].device)
                mb.mma_blockwise(**d, config=cfg, variant=v, swizzle=swizzle, out=out)
                torch.cuda.synchronize()
                chk = compare(out, ref, all_rows)
                rows.append(dict(M=M, N=N, K=K, config=cfg.name, variant=v, bm=cfg.bm, bn=cfg.bn,
                                 swizzle=swizzle, **chk, passed=passes(chk)))
        del d, ref
    return pd.DataFrame(rows)


def a5_lookups(M: int = 64, N: int = 520, K: int = 256, *, seed=1) -> pd.DataFrame:
    """The weight-scale lookups (claim A5) per N tile width: per_warp (right) against the two
    deliberately buggy ones, on configs whose BN is 64, 128 and 256."""
    import torch

    d = mb.generate_inputs(M, N, K, seed=seed, backend="torch")
    ref = mb.mma_blockwise_reference(**d)
    rows = []
    for cfg in track(mb.configs(), desc="A5 scale lookups", unit="configs"):
        if cfg not in (mb.MMAConfig(64, 64, 32, 32, 4), mb.SEED_CONFIG, mb.MMAConfig(64, 256, 64, 64, 2),
                       mb.MMAConfig(16, 64, 16, 32, 4), mb.MMAConfig(128, 256, 64, 64, 2)):
            continue
        for lookup in mb.SCALE_LOOKUPS:
            out = harness.poisoned((M, N), device=d["a"].device)
            mb.mma_blockwise(**d, config=cfg, variant="per_block", scale_lookup=lookup, out=out)
            torch.cuda.synchronize()
            chk = compare(out, ref, np.arange(M))
            rows.append(dict(config=cfg.name, bm=cfg.bm, bn=cfg.bn, lookup=lookup, M=M, N=N, K=K, **chk,
                             correct=passes(chk)))
    return pd.DataFrame(rows)


def k_tail_behaviour(M: int = 7, N: int = 256, K: int = 200) -> pd.DataFrame:
    """K not a multiple of 128: which arm refuses (and with what message), which computes it
    (checked against float64)."""
    import torch

    from ..kernels import baselines as bl, triton_blockwise as tb

    g = torch.Generator(device="cuda").manual_seed(3)
    kb, nb = -(-K // 128), -(-N // 128)
    a = (torch.randn(M, K, generator=g, device="cuda") * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, generator=g, device="cuda") * 2).to(torch.float8_e4m3fn)
    sa = torch.rand(M, kb, generator=g, device="cuda") + 0.5
    sb = torch.rand(nb, kb, generator=g, device="cuda") + 0.5
    ref = reference_rows(a, sa, b, sb, np.arange(M))
    rows = []
    tries = [("mma_blockwise", lambda: mb.mma_blockwise(a, sa, b, sb)),
             ("triton_blockwise", lambda: tb.blockwise_fp8_gemm(a, b, sa, sb)),
             ("cublaslt_blockwise", lambda: bl.cublaslt_blockwise(a, sa, b, sb))]
    if cutlass_status() is None:
        from ..kernels.cutlass_blockwise_sm90 import cutlass_blockwise_sm90
        tries.append(("cutlass_blockwise_sm90", lambda: cutlass_blockwise_sm90(a, sa, b, sb)))
    for arm, fn in tries:
        try:
            out = fn()
            torch.cuda.synchronize()
            chk = compare(out, ref, np.arange(M))
            rows.append(dict(arm=arm, M=M, N=N, K=K, outcome="computed" if passes(chk) else "wrong",
                             message="", **chk))
        except ValueError as e:
            rows.append(dict(arm=arm, M=M, N=N, K=K, outcome="refused", message=str(e)[:200]))
        except Exception as e:  # noqa: BLE001 - an unclear error is a finding too
            rows.append(dict(arm=arm, M=M, N=N, K=K, outcome="error (not a ValueError)", message=harness.error_text(e)))
    return pd.DataFrame(rows)


def swizzle_sweep(shape="qwen3-8b:down_proj", M: int = 4096, config=None, swizzles=(1, 2, 4, 8, 16), *,
                  variant="per_block", repeats: int = 3, seed=0, warmup_ms=10.0, rep_ms=50.0,
                  sampler=None) -> pd.DataFrame:
    """mma_blockwise at one point with the launch-order group size varied; every swizzle is
    timed ``repeats`` times, interleaved, so drift lands on all of them (one row per run)."""
    import torch

    (shape,) = resolve_shapes([shape])
    cfg = mb.get_config(config) if config is not None else mma_candidates(M, 1, N=shape.N)[0]
    s0 = make_operands(M, shape.N, shape.K, seed=seed)
    rows_chk = check_rows(M)
    ref = reference_for("mma_blockwise", s0, rows_chk)
    cnt = registry.count("mma_blockwise", M=M, N=shape.N, K=shape.K)
    cands = {s: _mma_candidate(cfg, variant, int(s)) for s in swizzles}
    rows = []
    for s, c in cands.items():
        out = c.gemm(s0, s0.a, s0.a_scale, harness.poisoned((M, shape.N), device=s0.a.device))
        torch.cuda.synchronize()
        chk = compare(out, ref, rows_chk)
        assert passes(chk), f"swizzle {s}: {chk}"
    for rep in track(range(repeats), desc="swizzle sweep", unit="repeats"):
        for s, c in cands.items():
            fn = lambda c=c, ops=s0: c.gemm(ops, ops.a, ops.a_scale, None)  # noqa: E731
            tm, clk = harness.timed(fn, sampler=sampler, method="auto", warmup_ms=warmup_ms, rep_ms=rep_ms,
                                    graph_threshold_s=0)
            rows.append(dict(shape=shape.name, M=M, N=shape.N, K=shape.K, config=cfg.name, variant=variant,
                             swizzle=s, repeat=rep, **timing_cols(tm, cnt), **clk))
    del s0, ref
    torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def weight_only_point(shape="qwen3-8b:o_proj", M: int = 1, fmt: str = "fp8", *, seed: int = 0,
                      warmup_ms: float = 10.0, rep_ms: float = 50.0, max_sets: int = 16, sampler=None) -> dict:
    """The other half of A8: a Marlin-style weight-only kernel (``fp8lab.kernels.weight_only``,
    notebook 08's ``gemv_w8a16_fp8``: e4m3 weights with one bf16 scale per row per 128, bf16
    activations) at the same point, checked against its own float64 reference, timed by graph
    replay over weight copies rotated past L2. One row in this module's columns; status
    'not-run: ...' when that module is missing or refuses."""
    import torch

    (shape,) = resolve_shapes([shape])
    N, K = shape.N, shape.K
    arm = f"gemv_w8a16_{fmt}" if fmt in ("fp8", "int8") else f"gemv_w4a16_{fmt}"
    cand = Candidate(arm, None, path="weight-only")
    cnt = registry.count(arm, M=M, N=N, K=K)
    wb = cnt.weight_bytes
    try:
        from ..kernels import weight_only as wo

        d = wo.generate(fmt, M, N, K, seed=seed)
        packed = wo.pack_weights(fmt, d["codes"], d["scales"], act="bf16", global_scale=d["global_scale"])
        act = torch.tensor(d["act"], dtype=torch.bfloat16, device="cuda")
        n_sets = min(max_sets, bench.n_rotation_sets(wb, bench.device_l2_bytes(), max_sets=10**6))
        pws = [packed.to("cuda") for _ in range(n_sets)]
        ref = torch.as_tensor(wo.reference(fmt, d["act"], d["codes"], d["scales"], d["global_scale"]),
                              device="cuda")
        out = harness.poisoned((M, N), device=act.device)
        wo.gemv_w16(act, pws[0], out=out)
        torch.cuda.synchronize()
        chk = compare(out, ref, np.arange(M))
    except Exception as e:  # noqa: BLE001 - another module's arm: record why it did not run
        row = _row(shape, M, cand, "none", "not-run: " + harness.error_text(e))
        row["weight_bytes"] = wb
        return row
    if not passes(chk):
        return _row(shape, M, cand, "none", f"failed-check: relerr {chk['relerr']:.3g}", weight_bytes=wb, **chk)
    fn = bench.rotating(lambda pw: wo.gemv_w16(act, pw), [(pw,) for pw in pws])
    tm, clk = harness.timed(fn, sampler=sampler, method="graph", warmup_ms=warmup_ms, rep_ms=rep_ms,
                            graph_threshold_s=20e-6)
    return _row(shape, M, cand, "none", "measured", poison="out=", weight_bytes=wb, **chk,
                **timing_cols(tm, cnt), **clk)


# ------------------------------------------------------------------------------------------
# post-processing (CPU): best rows, tile selection, crossovers, targets
# ------------------------------------------------------------------------------------------
TEXT_COLUMNS = ("shape", "arm", "variant", "path", "config", "quant", "status")


def measured(df: pd.DataFrame) -> pd.DataFrame:
    """The measured rows; text columns read back from CSV as NaN when empty become ''."""
    if df.empty:
        return df.copy()
    df = df.assign(**{c: df[c].fillna("").astype(str) for c in TEXT_COLUMNS if c in df.columns})
    return df[(df["status"] == "measured") & df["time_p50_s"].notna()]


def best_rows(df: pd.DataFrame, by=("shape", "M", "arm", "quant")) -> pd.DataFrame:
    """The fastest measured row (lowest p50) per group: "best variant and tile per M"."""
    m = measured(df)
    if m.empty:
        return m.copy()
    idx = m.groupby(list(by), sort=True)["time_p50_s"].idxmin()
    return m.loc[idx.values].reset_index(drop=True)


def tile_selection(df: pd.DataFrame, arm: str = "mma_blockwise", variant: str | None = "per_block",
                   quant: str = "none") -> dict:
    """Tile-by-M selection derived from the sweep (no threshold typed in).

    Returns dict(per_point: best config per (shape, M) with its margin over the runner-up,
    by_m: for each M the config with the lowest geometric-mean slowdown over the shapes (and
    its worst slowdown), ranges: consecutive Ms with the same pick merged into M ranges)."""
    m = measured(df)
    m = m[(m["arm"] == arm) & (m["quant"] == quant)]
    if variant is not None:
        m = m[m["variant"] == variant]
    if m.empty:
        return dict(per_point=pd.DataFrame(), by_m=pd.DataFrame(), ranges=pd.DataFrame())
    # one time per (shape, M, config): the best swizzle of that config
    t = m.groupby(["shape", "M", "config"])["time_p50_s"].min().reset_index()
    t["best"] = t.groupby(["shape", "M"])["time_p50_s"].transform("min")
    t["slowdown"] = t["time_p50_s"] / t["best"]
    pp = []
    for (shape, M), g in t.groupby(["shape", "M"]):
        g = g.sort_values("time_p50_s")
        runner = g.iloc[1]["time_p50_s"] / g.iloc[0]["time_p50_s"] if len(g) > 1 else math.nan
        pp.append(dict(shape=shape, M=M, config=g.iloc[0]["config"], time_p50_s=g.iloc[0]["time_p50_s"],
                       margin_over_next=runner, n_configs=len(g)))
    per_point = pd.DataFrame(pp)
    bm = []
    for M, g in t.groupby("M"):
        shapes_here = g["shape"].nunique()
        full = g.groupby("config").filter(lambda x: x["shape"].nunique() == shapes_here)
        if full.empty:
            continue
        agg = full.groupby("config")["slowdown"].agg(geo=lambda s: float(np.exp(np.log(s).mean())), worst="max")
        agg = agg.sort_values(["geo", "worst"])
        pick = agg.index[0]
        bm.append(dict(M=M, config=pick, geo_slowdown=agg.iloc[0]["geo"], worst_slowdown=agg.iloc[0]["worst"],
                       bm=int(pick.split("x")[0]), bn=int(pick.split("x")[1]), shapes=shapes_here))
    by_m = pd.DataFrame(bm).sort_values("M").reset_index(drop=True) if bm else pd.DataFrame()
    ranges = []
    if not by_m.empty:
        start = 0
        for i in range(1, len(by_m) + 1):
            if i == len(by_m) or by_m.loc[i, "config"] != by_m.loc[start, "config"]:
                ranges.append(dict(M_from=int(by_m.loc[start, "M"]), M_to=int(by_m.loc[i - 1, "M"]),
                                   config=by_m.loc[start, "config"]))
                start = i
    return dict(per_point=per_point, by_m=by_m, ranges=pd.DataFrame(ranges))


def single_tile_penalty(df: pd.DataFrame, arm: str = "mma_blockwise", variant: str | None = "per_block") -> pd.DataFrame:
    """For every config timed at every (shape, M): its worst and geometric-mean slowdown
    against the per-point best. The cost of one tile for all M (claim A6)."""
    m = measured(df)
    m = m[(m["arm"] == arm) & (m["quant"] == "none")]
    if variant is not None:
        m = m[m["variant"] == variant]
    if m.empty:
        return pd.DataFrame()
    t = m.groupby(["shape", "M", "config"])["time_p50_s"].min().reset_index()
    t["slowdown"] = t["time_p50_s"] / t.groupby(["shape", "M"])["time_p50_s"].transform("min")
    n_points = t.groupby(["shape", "M"]).ngroups
    out = []
    for cfg, g in t.groupby("config"):
        out.append(dict(config=cfg, points=len(g), covers_all=len(g) == n_points,
                        worst_slowdown=g["slowdown"].max(),
                        geo_slowdown=float(np.exp(np.log(g["slowdown"]).mean())),
                        worst_at=f"{g.loc[g['slowdown'].idxmax(), 'shape']} M={int(g.loc[g['slowdown'].idxmax(), 'M'])}"))
    return pd.DataFrame(out).sort_values(["covers_all", "worst_slowdown"], ascending=[False, True]).reset_index(drop=True)


def winners(df: pd.DataFrame, arms=W8A8, quant: str = "none") -> pd.DataFrame:
    """Per (shape, M): the fastest of ``arms`` (each at its best candidate) and its margin."""
    b = best_rows(df)
    b = b[b["arm"].isin(arms) & (b["quant"] == quant)]
    out = []
    for (shape, M), g in b.groupby(["shape", "M"]):
        g = g.sort_values("time_p50_s")
        out.append(dict(shape=shape, M=int(M), winner=g.iloc[0]["arm"], time_p50_s=g.iloc[0]["time_p50_s"],
                        runner_up=g.iloc[1]["arm"] if len(g) > 1 else "",
                        margin=g.iloc[1]["time_p50_s"] / g.iloc[0]["time_p50_s"] if len(g) > 1 else math.nan,
                        n_arms=len(g)))
    return pd.DataFrame(out)


def crossovers(df: pd.DataFrame, arms=W8A8, quant: str = "none") -> pd.DataFrame:
    """Where the winning arm changes with M, per shape, found from the data: between two
    measured Ms the winner changes; the crossover M is where the two arms' log-time ratio,
    interpolated linearly in log M, crosses zero. ``lead_below`` / ``lead_above``: how much
    faster the winner is than the other arm at each end (t(other) / t(winner) - 1); ``decisive``
    when both reach B7_MARGIN (a swap inside it is a near-tie, not a threshold)."""
    w = winners(df, arms, quant)
    b = best_rows(df)
    b = b[(b["quant"] == quant)]
    out = []
    for shape, g in w.groupby("shape"):
        g = g.sort_values("M").reset_index(drop=True)
        t = b[b["shape"] == shape].set_index(["arm", "M"])["time_p50_s"]
        for i in range(1, len(g)):
            lo, hi = g.loc[i - 1], g.loc[i]
            if lo["winner"] == hi["winner"]:
                continue
            m_cross = lead_lo = lead_hi = math.nan
            try:
                lead_lo = float(t[(hi["winner"], lo["M"])] / t[(lo["winner"], lo["M"])] - 1)
                lead_hi = float(t[(lo["winner"], hi["M"])] / t[(hi["winner"], hi["M"])] - 1)
                r_lo, r_hi = -math.log1p(lead_lo), math.log1p(lead_hi)
                if r_lo != r_hi:
                    f = r_lo / (r_lo - r_hi)
                    m_cross = float(np.exp(np.log(lo["M"]) + f * (np.log(hi["M"]) - np.log(lo["M"]))))
            except KeyError:
                pass
            out.append(dict(shape=shape, quant=quant, M_below=int(lo["M"]), M_above=int(hi["M"]),
                            winner_below=lo["winner"], winner_above=hi["winner"], M_cross=m_cross,
                            lead_below=lead_lo, lead_above=lead_hi,
                            decisive=bool(lead_lo >= B7_MARGIN and lead_hi >= B7_MARGIN)))  # NaN: False
    return pd.DataFrame(out, columns=["shape", "quant", "M_below", "M_above", "winner_below", "winner_above",
                                      "M_cross", "lead_below", "lead_above", "decisive"])


TARGET_COLUMNS = ["shape", "M", "N", "K", "target", "best_arm", "best_detail", "best_time_p50_s", "value", "goal",
                  "met", "shortfall", "cublaslt_value", "cublaslt_time_p50_s", "per_tensor_value", "best_peer",
                  "peer_value", "peer_time_p50_s", "own_over_peer", "pattern_value", "limited_by"]
#: the bandwidth target's "why" (issue 22): the decode GEMV's access pattern alone at each point
#: (pattern_points); where the best arm is that GEMV and misses, limited_by says whether its loads
#: alone miss the goal too (LIMIT_PATTERN) or meet it (LIMIT_WORK)
PATTERN_ARM = "gemv_w8a8_blockwise"
PATTERN_COLUMNS = ["shape", "M", "N", "K", "arm", "status", "splits", "ctas_per_sm", "rotation_sets",
                   "pattern_time_p50_s", "weight_bytes", "copy_Bps", "pattern_value"]
LIMIT_PATTERN = "access pattern"
LIMIT_WORK = "per-step work"


def pattern_points(shapes, Ms, copy_Bps: float, *, seed: int = 0, warmup_ms: float = 10.0, rep_ms: float = 50.0,
                   max_sets: int = 16, sampler=None) -> pd.DataFrame:
    """At every (shape, M) the bandwidth target applies to (M <= TARGET_SMALL_M, >= TARGET_MIN_WEIGHT_BYTES
    of weights), :data:`PATTERN_ARM`'s access pattern alone (``gemv_w8a8.pattern_stream``: its grid,
    its CTAs per SM, its threads' weight and scale loads, nothing else) at the launch the arm makes,
    over weight copies rotated past L2, timed by graph replay as the arms are. ``pattern_value``:
    the target's weight bytes per second over ``copy_Bps``. One row per point (:data:`PATTERN_COLUMNS`);
    status 'not-run: ...' where the kernel's module refuses."""
    import torch

    from ..kernels import gemv_w8a8 as g8, weight_only as wo

    rows = []
    for shape in track(resolve_shapes(shapes), desc="access patterns", unit="shapes"):
        N, K = shape.N, shape.K
        if N * K < TARGET_MIN_WEIGHT_BYTES:
            continue
        wb = weight_bytes("triton_blockwise", N, K)
        pts = [M for M in Ms if M <= TARGET_SMALL_M]
        if not pts:
            continue
        base = dict(shape=shape.name, N=N, K=K, arm=PATTERN_ARM, weight_bytes=wb, copy_Bps=copy_Bps)
        try:
            gen = torch.Generator(device="cuda").manual_seed(seed)
            b = (0.02 * torch.randn(N, K, generator=gen, device="cuda")).to(torch.float8_e4m3fn)
            sb = torch.ones(-(-N // 128), K // 128, device="cuda")
            first = g8.pack(b, sb)
            del b
            n_sets = min(max_sets, bench.n_rotation_sets(wb, bench.device_l2_bytes(), max_sets=10**6))
            sets = [first] + [g8.PackedW8A8(N, K, first.w.clone(), first.s.clone()) for _ in range(n_sets - 1)]
        except Exception as e:  # noqa: BLE001 - the kernel's module: record why it did not run
            rows += [dict(base, M=M, status="not-run: " + harness.error_text(e)) for M in pts]
            continue
        for M in pts:
            cfg = g8.launch_config(first, M)
            geo = wo.pattern_geometry("fp8", M, N, K, schedule="splitk", splits=cfg["splits"])
            sink = wo.pattern_sink(first.w.device, geo["threads"])
            occ = {}

            def call(pw, M=M, cfg=cfg, sink=sink, occ=occ):
                occ[0] = g8.pattern_stream(pw, M, splits=cfg["splits"], ctas_per_sm=cfg["ctas_per_sm"], sink=sink)

            tm, _ = harness.timed(bench.rotating(call, [(pw,) for pw in sets]), sampler=sampler, method="graph",
                                  warmup_ms=warmup_ms, rep_ms=rep_ms)
            if occ.get(0) != cfg["ctas_per_sm"]:
                raise RuntimeError(f"{PATTERN_ARM}'s access pattern ran at {occ.get(0)} CTAs per SM, the kernel at "
                                   f"{cfg['ctas_per_sm']}")
            rows.append(dict(base, M=M, status="measured", splits=cfg["splits"], ctas_per_sm=occ[0],
                             rotation_sets=len(sets), pattern_time_p50_s=tm.p50_s,
                             pattern_value=wb / tm.p50_s / copy_Bps))
        del sets, first
        torch.cuda.empty_cache()
    return pd.DataFrame(rows, columns=PATTERN_COLUMNS)


def _best_peers(peers: Optional[pd.DataFrame], quant: str) -> pd.DataFrame:
    """The fastest measured peer row per (shape, M) at ``quant`` ('none': pre-quantised; any
    other: the peer with its own quantiser in the call)."""
    if peers is None or peers.empty or "status" not in peers:
        return pd.DataFrame(columns=["shape", "M", "arm", "time_p50_s"])
    m = peers[(peers["status"] == "measured") & peers["time_p50_s"].notna()]
    m = m[m["quant"] == "none"] if quant == "none" else m[m["quant"] != "none"]
    if m.empty:
        return pd.DataFrame(columns=["shape", "M", "arm", "time_p50_s"])
    return m.loc[m.groupby(["shape", "M"])["time_p50_s"].idxmin().values, ["shape", "M", "arm", "time_p50_s"]]


def target_table(df: pd.DataFrame, copy_Bps: float | None, quant: str = "none",
                 peers: Optional[pd.DataFrame] = None, pattern: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """Issue 22's blockwise targets, one row per (shape, M) they apply to, from the same run's rows.

    speedup: cuBLASLt blockwise time / the best fp8lab arm's time, every M >= 1024 (target
    1.10); ``per_tensor_value`` beside it is cuBLASLt / cuBLAS FP8 per-tensor (the stretch:
    block scaling for free). bandwidth: the best fp8lab arm's weight bytes per second / the
    measured copy bandwidth, M <= 16 on shapes with >= 32 MB of FP8 weights (target 0.88);
    cuBLASLt's own fraction beside it. ``peers``: the peers table of the same run; the fastest
    measured peer at each point (``best_peer``) gets the same metric (``peer_value``) and
    ``own_over_peer`` = its time / the best fp8lab arm's time (> 1: fp8lab ahead). ``pattern``:
    :func:`pattern_points` of the same run; the bandwidth rows get its ``pattern_value`` and, where
    the best arm is :data:`PATTERN_ARM` and misses, ``limited_by``."""
    pv = {}
    if pattern is not None and len(pattern):
        pm = pattern[pattern["status"] == "measured"]
        pv = {(r.shape, int(r.M)): float(r.pattern_value) for r in pm.itertuples()}
    b = best_rows(df)
    b = b[b["quant"] == quant]
    bp = _best_peers(peers, quant).set_index(["shape", "M"])
    out = []
    for (shape, M), g in b.groupby(["shape", "M"]):
        g = g.set_index("arm")
        ours = g[g.index.isin(OURS)]
        if ours.empty:
            continue
        best = ours["time_p50_s"].idxmin()
        r0 = g.iloc[0]
        t_own = float(ours.loc[best, "time_p50_s"])
        peer = bp.loc[(shape, M)] if (shape, M) in bp.index else None
        t_peer = float(peer["time_p50_s"]) if peer is not None else math.nan
        base = dict(shape=shape, M=int(M), N=int(r0["N"]), K=int(r0["K"]), best_arm=best,
                    best_detail=f"{ours.loc[best, 'path']} {ours.loc[best, 'variant']} {ours.loc[best, 'config']}".strip(),
                    best_time_p50_s=t_own, best_peer=peer["arm"] if peer is not None else "",
                    peer_time_p50_s=t_peer, own_over_peer=t_peer / t_own)
        lt = float(g.loc["cublaslt_blockwise", "time_p50_s"]) if "cublaslt_blockwise" in g.index else math.nan
        base.update(pattern_value=math.nan, limited_by="")
        if M >= TARGET_LARGE_M and math.isfinite(lt):
            val = lt / t_own
            pt = (lt / float(g.loc[PER_TENSOR, "time_p50_s"])) if PER_TENSOR in g.index else math.nan
            out.append(dict(base, target="speedup vs cuBLASLt", value=val, goal=TARGET_SPEEDUP,
                            met=bool(val >= TARGET_SPEEDUP), shortfall=max(0.0, TARGET_SPEEDUP / val - 1),
                            cublaslt_value=1.0, cublaslt_time_p50_s=lt, per_tensor_value=pt,
                            peer_value=lt / t_peer))
        wb = weight_bytes("triton_blockwise", int(r0["N"]), int(r0["K"]))
        if M <= TARGET_SMALL_M and r0["N"] * r0["K"] >= TARGET_MIN_WEIGHT_BYTES and copy_Bps:
            val = wb / t_own / copy_Bps
            p = pv.get((shape, int(M)), math.nan)
            why = ""
            if best == PATTERN_ARM and val < TARGET_BW_FRACTION and math.isfinite(p):
                why = LIMIT_PATTERN if p < TARGET_BW_FRACTION else LIMIT_WORK
            base.update(pattern_value=p, limited_by=why)
            out.append(dict(base, target="weight bandwidth / copy", value=val, goal=TARGET_BW_FRACTION,
                            met=bool(val >= TARGET_BW_FRACTION), shortfall=max(0.0, TARGET_BW_FRACTION / val - 1),
                            cublaslt_value=wb / lt / copy_Bps, cublaslt_time_p50_s=lt,
                            peer_value=wb / t_peer / copy_Bps))
    return pd.DataFrame(out, columns=TARGET_COLUMNS)


def versus_peers(df: pd.DataFrame, peers: Optional[pd.DataFrame]) -> pd.DataFrame:
    """The best fp8lab arm against the best peer measured in the same run, per (shape, M), in
    TFLOP/s (``own_over_peer`` > 1: fp8lab ahead), twice: pre-quantised activations (``quant``
    'none') and with activation quantisation inside the timed call ('included': ours with the
    table's quantiser, each peer with its own, as seed 000 timed vLLM's kernels)."""
    from ..peers import report

    mine = best_rows(df)
    cols = ["quant", "shape", "M", "own_arm", "own", "best_peer", "peer", "own_over_peer"]
    if mine.empty or peers is None or peers.empty:
        return pd.DataFrame(columns=cols)
    parts = []
    for label, own_rows, peer_rows in (("none", mine[mine["quant"] == "none"], peers[peers["quant"] == "none"]),
                                       (QUANT_INCLUDED, mine[mine["quant"] != "none"], peers[peers["quant"] != "none"])):
        v = report.versus_best_peer(own_rows, peer_rows, list(OURS), metric="tflops_p50")
        if len(v):
            parts.append(v.assign(quant=label))
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


# ------------------------------------------------------------------------------------------
# verdicts (computed from tables; never typed)
# ------------------------------------------------------------------------------------------
# Every verdict names its subject (claims.SUBJECTS) and the one-line rule that decided it; the
# rule is an f-string over the very constants the code compares with, so it cannot drift.
def _v(claim, verdict, fig, reason="", *, subject="analogue", rule, variant=""):
    from ..report import claims

    return claims.Verdict(claim=claim, verdict=verdict, our_figure=fig, reason=reason, subject=subject,
                          rule=rule, variant=variant)


SEED_A3_FIX = 6536 / 1374       # 4.76x on the L4
SEED_A7_GAIN = 7144 / 5614      # 1.27x
SEED_A9_RATIO = 6159 / 5584     # 1.10x
#: A3: "comparable size" is within this factor of the seed's 4.8x either way; below it the
#: per-block loop must still be at least A3_PAYS faster for "the mechanism reproduces".
A3_BAND = 2.0
A3_PAYS = 1.2
#: A6: one fixed tile for every M must cost at least this much somewhere for "one tile does not fit".
A6_COST = 1.10
#: A7: swizzle gain (off / best) for holds, and the least gain that counts at all (beyond noise).
A7_HOLDS = 1.15
A7_LEAST = 1.02
#: A8: "a fraction of the 175 us": the seed kernel takes at least this many times the streaming floor.
A8_FLOOR_X = 2.0
#: A9: the seed's gap is SEED_A9_RATIO - 1 (10%); behind Triton by up to A9_HOLDS_GAPS of those gaps
#: holds, up to A9_KIND_GAPS is the same kind of gap (behind, larger); faster, or behind by more, differs.
A9_HOLDS_GAPS = 2.0
A9_KIND_GAPS = 5.0
#: B5: "reaches the FP8 rate": blockwise TFLOP/s at least this fraction of FP8 per-tensor (same run).
B5_OF_FP8 = 0.90
#: The quantisers a W8A8 row may name when activation quantisation is inside the timed call.
QUANT_INCLUDED = "included"


def _quant_rows(m: pd.DataFrame, quant: str) -> pd.DataFrame:
    """'none': pre-quantised activations; 'included': the quantiser inside the timed call (any
    of QUANTISERS); any other string: that quantiser."""
    if quant == "none":
        return m[m["quant"] == "none"]
    if quant == QUANT_INCLUDED:
        return m[m["quant"] != "none"]
    return m[m["quant"] == quant]


def _quant_words(quant: str) -> str:
    return "pre-quantised activations" if quant == "none" else "activation quantisation inside the timed call"


def verdict_a3(df: pd.DataFrame, shape="qwen3-8b:o_proj", M: int = 4096, quant: str = QUANT_INCLUDED):
    """A3 (analogue: mma_blockwise). The figure is the same-tile effect at the seed's tile:
    r = t(per_slice) / t(the faster per-block loop, per_block or per_block_inplace), both at
    64x128x128 / 64x64x128 / 3 stages, timed with ``quant`` (default: activation quantisation
    included, as the seed's vLLM microbenchmark). Beside it: the tile effect (per-block at the
    seed tile / best per-block at any tile), the two together, and per_slice vs best Triton."""
    lo, hi = SEED_A3_FIX / A3_BAND, SEED_A3_FIX * A3_BAND
    rule = (f"{shape} M={M}, {_quant_words(quant)}: r = t(per_slice) / t(faster per-block loop), both at the seed "
            f"tile; holds if {lo:.2f} <= r <= {hi:.2f} (seed {SEED_A3_FIX:.2f}x within {A3_BAND:g}x), "
            f"holds-in-kind if r >= {A3_PAYS:g} otherwise, else differs")
    m = measured(df)
    m = _quant_rows(m[(m["shape"] == shape) & (m["M"] == M)], quant)
    mma = m[m["arm"] == "mma_blockwise"]
    at_seed = mma[mma["config"] == mb.SEED_CONFIG.name]
    ps = at_seed[at_seed["variant"] == "per_slice"]
    pb = at_seed[at_seed["variant"].isin(["per_block", "per_block_inplace"])]
    if ps.empty or pb.empty:
        return _v("A3", "not-run", f"no per_slice and per-block timings at the seed tile, {shape} M={M}, "
                  f"{_quant_words(quant)}",
                  "the run did not time both main loops at the seed's tile with that activation handling",
                  rule=rule)
    t_slice = float(ps["time_p50_s"].min())
    b = pb.loc[pb["time_p50_s"].idxmin()]
    r = t_slice / b["time_p50_s"]
    parts = [f"{shape} M={M} ({_quant_words(quant)}), seed tile: per_slice {t_slice * 1e6:.0f} us -> "
             f"{b['variant']} {b['time_p50_s'] * 1e6:.0f} us = {r:.2f}x (same tile)"]
    fixed = mma[mma["variant"].isin(["per_block", "per_block_inplace"])]
    best = fixed.loc[fixed["time_p50_s"].idxmin()]
    if best["config"] != mb.SEED_CONFIG.name:
        parts.append(f"tile effect: {best['variant']} at {best['config']} {best['time_p50_s'] * 1e6:.0f} us = "
                     f"{b['time_p50_s'] / best['time_p50_s']:.2f}x, together {t_slice / best['time_p50_s']:.2f}x")
    tri = m[m["arm"] == "triton_blockwise"]
    if not tri.empty:
        parts.append(f"per_slice vs best Triton: {t_slice / tri['time_p50_s'].min():.2f}x (seed ~4x)")
    fig = "; ".join(parts)
    if lo <= r <= hi:
        return _v("A3", "holds", fig, rule=rule)
    if r >= A3_PAYS:
        return _v("A3", "holds-in-kind", fig, f"the per-block loop pays {r:.2f}x at the seed tile, not the seed's "
                  f"{SEED_A3_FIX:.1f}x", rule=rule)
    return _v("A3", "differs", fig, f"at the seed tile per-block promotion is worth {r:.2f}x here", rule=rule)


A4_ERR_BAND = (0.5e-3, 4e-3)     # "relative error around 2e-3"
A4_VARIANTS = 48


def verdict_a4(check: pd.DataFrame):
    """A4 (analogue): every config x variant passes at every shape (relative error at the bf16
    level, scale-free error, no NaN left); holds when all 48 pass and the median relative error is
    'around 2e-3' (A4_ERR_BAND)."""
    lo, hi = A4_ERR_BAND
    rule = (f"differs if any variant fails the float64 check (relerr <= {CHECK_RELERR:g}, calc_diff <= "
            f"{CHECK_DIFF:g}, no NaN); holds if all {A4_VARIANTS} pass with median relerr in [{lo:g}, {hi:g}]; "
            f"else holds-in-kind")
    if check.empty:
        return _v("A4", "not-run", "no correctness table", "the check did not run", rule=rule)
    n_var = check.groupby(["config", "variant"]).ngroups
    failed = check[~check["passed"]]
    med = float(check["relerr"].median())
    fig = (f"{n_var} variants x {check.groupby(['M', 'N', 'K']).ngroups} shapes (M = "
           f"{', '.join(str(m) for m in sorted(check['M'].unique()))}): {len(check) - len(failed)}/{len(check)} pass; "
           f"median rel. err {med:.2e}, worst {check['relerr'].max():.2e}, worst calc_diff {check['calc_diff'].max():.1e}")
    if len(failed):
        bad = ", ".join(f"{r.config}/{r.variant}@M={r.M}" for r in failed.head(5).itertuples())
        return _v("A4", "differs", fig, f"failing: {bad}", rule=rule)
    if n_var != A4_VARIANTS:
        return _v("A4", "holds-in-kind", fig, f"{n_var} variants checked, not {A4_VARIANTS}", rule=rule)
    if not lo <= med <= hi:
        return _v("A4", "holds-in-kind", fig, f"all correct, but the typical error {med:.1e} is not ~2e-3", rule=rule)
    return _v("A4", "holds", fig, rule=rule)


def verdict_a5(a5: pd.DataFrame):
    """A5 (analogue): per_warp right at every N tile; per_cta wrong exactly when BN != 128;
    per_cta_first_col wrong when BN = 256 (a tile spanning two weight blocks)."""
    rule = ("holds if per_warp passes at every BN, per_cta fails exactly when BN != 128 and "
            "per_cta_first_col fails exactly when BN > 128; else differs")
    if a5.empty:
        return _v("A5", "not-run", "no lookup table", "the check did not run", rule=rule)
    pw = a5[a5["lookup"] == "per_warp"]
    pc = a5[a5["lookup"] == "per_cta"]
    pf = a5[a5["lookup"] == "per_cta_first_col"]
    ok_pw = bool(pw["correct"].all())
    ok_pc = bool((pc["correct"] == (pc["bn"] == 128)).all())
    ok_pf = bool((~pf[pf["bn"] > 128]["correct"]).all() and pf[pf["bn"] <= 128]["correct"].all())

    def worst(d):
        return ", ".join(f"BN={int(bn)}: {g['relerr'].max():.1e}" for bn, g in d.groupby("bn"))
    fig = f"rel. err per_warp [{worst(pw)}]; per_cta [{worst(pc)}]; per_cta_first_col [{worst(pf)}]"
    if ok_pw and ok_pc and ok_pf:
        return _v("A5", "holds", fig, rule=rule)
    return _v("A5", "differs", fig, f"per_warp all right: {ok_pw}; per_cta wrong iff BN != 128: {ok_pc}; "
              f"first-col wrong iff BN > 128: {ok_pf}", rule=rule)


def verdict_a6(df: pd.DataFrame):
    """A6 (analogue): the tile picked at the smallest M has fewer rows (BM) than the one picked
    at the largest M on every shape, and one fixed tile costs >= A6_COST somewhere.
    holds-in-kind: the ordering holds but one tile costs less (or its cost is unknown)."""
    rule = (f"holds if on every shape the best tile at the smallest M has a smaller BM than at the largest M "
            f"and the best single tile for all M is >= {A6_COST:.2f}x slower somewhere; holds-in-kind if only "
            f"the ordering holds; else differs")
    sel = tile_selection(df)
    pp = sel["per_point"]
    pen = single_tile_penalty(df)
    if pp.empty or pp["M"].nunique() < 2:
        return _v("A6", "not-run", "fewer than two M values with tile timings", "the tile sweep did not run",
                  rule=rule)
    orders, parts = [], []
    for shape, g in pp.groupby("shape"):
        g = g.sort_values("M")
        lo, hi = g.iloc[0], g.iloc[-1]
        bm_lo, bm_hi = int(lo["config"].split("x")[0]), int(hi["config"].split("x")[0])
        orders.append(bm_lo < bm_hi)
        parts.append(f"{shape}: M={int(lo['M'])} -> {lo['config']}, M={int(hi['M'])} -> {hi['config']}")
    full = pen[pen["covers_all"]]
    one = full.iloc[0] if not full.empty else None
    cost = float(one["worst_slowdown"]) if one is not None else math.nan
    fig = "; ".join(parts) + (f"; best single tile {one['config']} is up to {cost:.2f}x slower "
                              f"({one['worst_at']})" if one is not None else "")
    if all(orders) and one is not None and cost >= A6_COST:
        return _v("A6", "holds", fig, rule=rule)
    if all(orders):
        return _v("A6", "holds-in-kind", fig, "small M picks smaller tiles, but " + (
            f"one tile loses only {cost:.2f}x" if one is not None else "no tile was timed at every M, so the "
            "cost of one tile for all M is unknown"), rule=rule)
    return _v("A6", "differs", fig, "the smallest M does not pick a tile with fewer rows on every shape", rule=rule)


def swizzle_summary(swz: pd.DataFrame) -> pd.DataFrame:
    """Per swizzle: median of the run medians, spread (max - min of run medians)."""
    g = swz.groupby("swizzle")["time_p50_s"]
    return pd.DataFrame({"time_p50_s": g.median(), "spread_s": g.max() - g.min(), "runs": g.size()}).reset_index()


def verdict_a7(swz: pd.DataFrame):
    """A7 (analogue): gain = t(swizzle 1) / t(best swizzle), and the difference beyond the
    run-to-run spread. holds: >= A7_HOLDS (the seed: 1.27); holds-in-kind: > A7_LEAST; else differs."""
    rule = (f"gain = t(swizzle off) / t(best group), counted only when the difference exceeds the run-to-run "
            f"spread; holds if gain >= {A7_HOLDS:.2f} (seed {SEED_A7_GAIN:.2f}), holds-in-kind if > {A7_LEAST:.2f}, "
            f"else differs")
    if swz.empty:
        return _v("A7", "not-run", "no swizzle timings", "the swizzle sweep did not run", rule=rule)
    s = swizzle_summary(swz).set_index("swizzle")
    if 1 not in s.index or len(s) < 2:
        return _v("A7", "not-run", "swizzle off (1) not timed", "need swizzle 1 and at least one other", rule=rule)
    best = s.drop(index=1)["time_p50_s"].idxmin()
    off, on = s.loc[1], s.loc[best]
    gain = off["time_p50_s"] / on["time_p50_s"]
    noise = max(off["spread_s"], on["spread_s"])
    distinct = (off["time_p50_s"] - on["time_p50_s"]) > noise
    r0 = swz.iloc[0]
    fig = (f"{r0['shape']} M={int(r0['M'])} {r0['config']}: swizzle off {off['time_p50_s'] * 1e6:.0f} us -> "
           f"group {best} {on['time_p50_s'] * 1e6:.0f} us ({gain:.2f}x, {1 - 1 / gain:.0%} less; "
           f"run-to-run spread {noise * 1e6:.0f} us)")
    if gain >= A7_HOLDS and distinct:
        return _v("A7", "holds", fig, rule=rule)
    if gain > A7_LEAST and distinct:
        return _v("A7", "holds-in-kind", fig, f"the launch order gains {gain:.2f}x here, the seed {SEED_A7_GAIN:.2f}x",
                  rule=rule)
    return _v("A7", "differs", fig, f"gain {gain:.2f}x" + ("" if distinct else ", within the run-to-run spread"),
              rule=rule)


#: Marlin runs here as a peer arm (issue 17): any arm id starting with this.
#: A8's seed half: the seed's Marlin was vLLM's MarlinFP8 (FP8 weights, bf16 activations); the
#: original INT4 Marlin reads half the bytes and is shown beside it, not judged as the seed's kernel
PEER_MARLIN = "peer_vllm_marlin_fp8"
MARLIN_HOWTO = ("vLLM's FP8 Marlin (the seed's MarlinFP8) not measured in this run: unpack its source (python "
                "scripts/peers_offline.py --sources; make run builds it; peer arm peer_vllm_marlin_fp8 of issue 17) "
                "and re-run notebook 04")


def _best_w8a8_quant(m: pd.DataFrame):
    w8 = best_rows(_quant_rows(m, QUANT_INCLUDED))
    w8 = w8[w8["arm"].isin(W8A8)]
    return None if w8.empty else w8.loc[w8["time_p50_s"].idxmin()]


def verdict_a8(df: pd.DataFrame, copy_Bps: float | None, shape="qwen3-8b:o_proj"):
    """A8 at M = 1, two rows, the W8A8 arms timed with activation quantisation inside the call
    (the seed: "Triton and this kernel include quantizing the activations to FP8; Marlin doesn't
    need that step").

    analogue: fp8lab's weight-only kernel (``gemv_w8a16_*``) against the best W8A8 arm + quantiser;
    the seed's first kernel (per_slice at the seed tile, + quantiser) against the weight-streaming
    floor (weight bytes / measured copy bandwidth) when timed.
    seed: Marlin itself (any ``peer_marlin*`` arm in the same table) against the best W8A8 + quantiser;
    not-run when no such arm was measured."""
    m = measured(df)
    m = m[(m["shape"] == shape) & (m["M"] == 1)]
    best = _best_w8a8_quant(m)
    btxt = (f"best W8A8 + quantiser {best['arm']} {best['time_p50_s'] * 1e6:.2f} us" if best is not None else "")
    rule_a = (f"{shape} M=1: holds if t(weight-only) < t(best W8A8 arm + activation quantiser) and, where timed, "
              f"t(per_slice seed tile + quantiser) >= {A8_FLOOR_X:g}x the streaming floor (weight bytes / copy "
              f"bandwidth of the run); else differs")
    rule_s = f"{shape} M=1: holds if t({PEER_MARLIN}) < t(best W8A8 arm + activation quantiser); else differs"
    rows = []
    # --- analogue
    wo = m[m["arm"].str.startswith("gemv_w")]
    if wo.empty or best is None:
        rows.append(_v("A8", "not-run", f"{shape} M=1: " + ("no weight-only timing" if wo.empty else
                                                             "no W8A8 timing with the quantiser"),
                       "needs fp8lab's weight-only arm and the W8A8 arms with activation quantisation, same run",
                       rule=rule_a))
    else:
        w = wo.loc[wo["time_p50_s"].idxmin()]
        beats = bool(w["time_p50_s"] < best["time_p50_s"])
        parts = [f"{shape} M=1: weight-only {w['arm']} {w['time_p50_s'] * 1e6:.2f} us vs {btxt} "
                 f"({best['time_p50_s'] / w['time_p50_s']:.2f}x)"]
        why = [] if beats else ["the best W8A8 arm with its quantiser is at least as fast as the weight-only kernel"]
        seed_k = _quant_rows(m, QUANT_INCLUDED)
        seed_k = seed_k[(seed_k["arm"] == "mma_blockwise") & (seed_k["variant"] == "per_slice")
                        & (seed_k["config"] == mb.SEED_CONFIG.name)]
        if not seed_k.empty and copy_Bps:
            floor = weight_bytes("mma_blockwise", int(seed_k.iloc[0]["N"]), int(seed_k.iloc[0]["K"])) / copy_Bps
            t_seed = float(seed_k["time_p50_s"].min())
            parts.append(f"per_slice seed tile + quantiser {t_seed * 1e6:.1f} us = {t_seed / floor:.1f}x the "
                         f"{floor * 1e6:.1f} us streaming floor")
            if t_seed / floor < A8_FLOOR_X:
                why.append(f"the seed-tile kernel streams within {A8_FLOOR_X:g}x of the copy rate here")
        rows.append(_v("A8", "differs" if why else "holds", "; ".join(parts), "; ".join(why), rule=rule_a))
    # --- seed: Marlin
    mar = m[m["arm"].str.startswith(PEER_MARLIN)]
    if mar.empty or best is None:
        rows.append(_v("A8", "not-run", f"{shape} M=1: no {PEER_MARLIN} timing" if mar.empty else
                       "no W8A8 timing with the quantiser", MARLIN_HOWTO if mar.empty else
                       "the W8A8 arms were not timed with activation quantisation", subject="seed", rule=rule_s))
    else:
        w = mar.loc[mar["time_p50_s"].idxmin()]
        fig = (f"{shape} M=1: {w['arm']} {w['time_p50_s'] * 1e6:.2f} us vs {btxt} "
               f"({best['time_p50_s'] / w['time_p50_s']:.2f}x)")
        if w["time_p50_s"] < best["time_p50_s"]:
            rows.append(_v("A8", "holds", fig, subject="seed", rule=rule_s))
        else:
            rows.append(_v("A8", "differs", fig, "Marlin is not faster than the best W8A8 arm with its quantiser",
                           subject="seed", rule=rule_s))
    return rows


def verdict_a9(df: pd.DataFrame, arm: str = "cutlass_blockwise_sm90", shape="qwen3-8b:down_proj",
               min_m: int = 1024, quant: str = QUANT_INCLUDED):
    """A9 (analogue): r = t(best ``arm``) / t(best triton_blockwise) at the largest M >= min_m of
    down_proj, both timed with ``quant``. The seed: its CUTLASS kernel 1.10x behind Triton; the
    main row is cutlass_blockwise_sm90 (a CUTLASS kernel on FP8 tensor cores, variant "CUTLASS"),
    mma_blockwise is a second one (variant "mma.sync")."""
    gap = SEED_A9_RATIO - 1
    hold_hi, kind_hi = 1 + A9_HOLDS_GAPS * gap, 1 + A9_KIND_GAPS * gap
    variant = {"cutlass_blockwise_sm90": "CUTLASS", "mma_blockwise": "mma.sync"}.get(arm, arm)
    rule = (f"{shape}, largest M >= {min_m}, {_quant_words(quant)}: r = t({arm}) / t(triton_blockwise); holds if "
            f"1 <= r <= {hold_hi:.2f}, holds-in-kind if {hold_hi:.2f} < r <= {kind_hi:.2f} (seed {SEED_A9_RATIO:.2f}), "
            f"else differs")
    b = _quant_rows(best_rows(df), quant)
    b = b[(b["shape"] == shape) & (b["M"] >= min_m)]
    ms = sorted(set(b[b["arm"] == arm]["M"]) & set(b[b["arm"] == "triton_blockwise"]["M"]))
    if not ms:
        return _v("A9", "not-run", f"no {arm} and Triton timings at {shape} M >= {min_m} ({_quant_words(quant)})",
                  "the sweep lacks them", rule=rule, variant=variant)
    M = ms[-1]
    t = b[b["M"] == M].set_index("arm")["time_p50_s"]
    r = t[arm] / t["triton_blockwise"]
    fig = (f"{shape} M={M} ({_quant_words(quant)}): {arm} {t[arm] * 1e6:.0f} us vs triton_blockwise "
           f"{t['triton_blockwise'] * 1e6:.0f} us = {r:.2f}x (seed: {SEED_A9_RATIO:.2f}x)")
    if 1.0 <= r <= hold_hi:
        return _v("A9", "holds", fig, rule=rule, variant=variant)
    if hold_hi < r <= kind_hi:
        return _v("A9", "holds-in-kind", fig, f"behind Triton by {r - 1:.0%}, the seed by {gap:.0%}", rule=rule,
                  variant=variant)
    return _v("A9", "differs", fig, f"{arm} is faster than Triton here" if r < 1 else
              f"behind Triton by {r - 1:.0%}, more than {A9_KIND_GAPS:g}x the seed's {gap:.0%}", rule=rule,
              variant=variant)


def _mhz(g: pd.DataFrame, arm: str) -> str:
    v = g.loc[g["arm"] == arm, "sm_mhz_median"] if "sm_mhz_median" in g else pd.Series(dtype=float)
    v = pd.to_numeric(v, errors="coerce").dropna()
    return f"{v.iloc[0]:.0f}" if len(v) else "?"


def verdict_b5(df: pd.DataFrame, paired: Optional[pd.DataFrame] = None):
    """B5 (seed: cuBLASLt's block-scaled FP8 GEMM). It runs at every point asked (M padded to 4
    by the wrapper), and at the largest common M of every shape its TFLOP/s is >= B5_OF_FP8 of
    cuBLAS FP8 *per-tensor* measured in the same run (what block scaling costs). With ``paired``
    (:func:`paired_b5`'s table) the ratio is the median over its alternating rounds, one per shape;
    without it (runs before paired rounds existed), the sweep's own p50s. Beside it: the ratio to
    cuBLAS BF16 (2x on paper), and each arm's median SM clock from its own rows."""
    pr = paired_ratios(paired) if paired is not None and len(paired) else pd.DataFrame()
    if len(pr):
        rule = (f"differs if cuBLASLt blockwise fails at any point of the sweep; at the largest M per shape, "
                f"r = TFLOP/s(blockwise) / TFLOP/s({PER_TENSOR}) per round of rounds that time both alternately: "
                f"holds if r's p10 >= {B5_OF_FP8:.2f} on every shape; differs if r's p90 < {B5_OF_FP8:.2f} on any "
                f"shape; else (the rounds' p10-p90 spans {B5_OF_FP8:.2f}) holds-in-kind "
                f"(vs BF16 from the sweep shown beside, 2x on paper)")
    else:
        rule = (f"differs if cuBLASLt blockwise fails at any point; at the largest M per shape holds if TFLOP/s(blockwise) "
                f">= {B5_OF_FP8:.2f} x TFLOP/s({PER_TENSOR}) of the same run on every shape, else differs "
                f"(vs BF16 shown beside, 2x on paper)")
    lt = df[(df["arm"] == "cublaslt_blockwise") & (df["quant"].fillna("none") == "none")]
    if lt.empty:
        return _v("B5", "not-run", "cuBLASLt blockwise not in the sweep", "arm not requested", subject="seed",
                  rule=rule)
    failed = lt[lt["status"] != "measured"]
    if failed.shape[0]:
        return _v("B5", "differs", f"cuBLASLt blockwise did not run at {len(failed)} of {len(lt)} points",
                  "; ".join(sorted(set(failed["status"].astype(str).str[:100]))), subject="seed", rule=rule)
    b = best_rows(df)
    b = b[b["quant"] == "none"]
    rows = []
    for shape, g in b.groupby("shape"):
        both = g.pivot_table(index="M", columns="arm", values="tflops_p50")
        if {"cublaslt_blockwise", PER_TENSOR} <= set(both.columns):
            both = both.dropna(subset=["cublaslt_blockwise", PER_TENSOR])
            if not both.empty:
                M = both.index.max()
                at = g[g["M"] == M]
                bf = both.loc[M, "cublas_bf16"] if "cublas_bf16" in both.columns else math.nan
                rows.append((shape, int(M), both.loc[M, "cublaslt_blockwise"], both.loc[M, PER_TENSOR], bf,
                             f"{_mhz(at, 'cublaslt_blockwise')} / {_mhz(at, PER_TENSOR)} / {_mhz(at, 'cublas_bf16')}"))
    if not rows:
        return _v("B5", "not-run", f"cuBLASLt blockwise ran at all {len(lt)} points (M padded to 4)",
                  f"no {PER_TENSOR} timing in this run to compare its rate with", subject="seed", rule=rule)
    if len(pr):
        by = pr.set_index("shape")
        missing = sorted({r[0] for r in rows} - set(by.index))
        if missing:
            return _v("B5", "not-run", f"cuBLASLt blockwise ran at all {len(lt)} points (M padded to 4)",
                      f"no paired rounds for {', '.join(missing)}", subject="seed", rule=rule)
        worst = float(by["ratio_p50"].min())
        low, high = by["ratio_p10"], by["ratio_p90"]
        fig = (f"ran at all {len(lt)} points; blockwise / FP8 per-tensor rate, median of alternating rounds: " + "; ".join(
            f"{s} M={int(by.loc[s, 'M'])}: {by.loc[s, 'ratio_p50']:.2f}x (p10-p90 {by.loc[s, 'ratio_p10']:.2f}-"
            f"{by.loc[s, 'ratio_p90']:.2f}, {int(by.loc[s, 'rounds'])} rounds, SM MHz {by.loc[s, 'mhz_blockwise']:.0f} / "
            f"{by.loc[s, 'mhz_per_tensor']:.0f})" + (f", sweep: {a / c:.2f}x BF16 ({c:.0f})" if c == c else "")
            for s, m, a, p, c, mhz in rows))
    else:
        worst = min(r[2] / r[3] for r in rows)
        fig = (f"ran at all {len(lt)} points; at the largest M: " + "; ".join(
            f"{s} M={m}: {a:.0f} TFLOP/s = {a / p:.2f}x FP8 per-tensor ({p:.0f})"
            + (f", {a / c:.2f}x BF16 ({c:.0f})" if c == c else "") + f", SM MHz {mhz}"
            for s, m, a, p, c, mhz in rows))
    if len(pr):
        # the bar is judged against the rounds' spread: a median that lands either side of it
        # from run to run (down_proj: 0.896 at 545c5c9, 0.923 at 4dd7705, H200) is not a verdict
        if (low >= B5_OF_FP8).all():
            return _v("B5", "holds", fig, subject="seed", rule=rule)
        short = by[high < B5_OF_FP8]
        if len(short):
            return _v("B5", "differs", fig, "block scaling costs: " + "; ".join(
                f"{s} {r.ratio_p50:.3f}x of the FP8 per-tensor rate, p10-p90 {r.ratio_p10:.3f}-{r.ratio_p90:.3f} "
                f"all under {B5_OF_FP8:.2f}" for s, r in short.iterrows()), subject="seed", rule=rule)
        span = by[low < B5_OF_FP8]
        return _v("B5", "holds-in-kind", fig, "at the bar within the rounds' spread: " + "; ".join(
            f"{s} p10-p90 {r.ratio_p10:.3f}-{r.ratio_p90:.3f} spans {B5_OF_FP8:.2f} (median {r.ratio_p50:.3f})"
            for s, r in span.iterrows()), subject="seed", rule=rule)
    if worst >= B5_OF_FP8:
        return _v("B5", "holds", fig, subject="seed", rule=rule)
    return _v("B5", "differs", fig, f"block scaling costs: {worst:.2f}x of the FP8 per-tensor rate at worst",
              subject="seed", rule=rule)


def verdict_b7(df: pd.DataFrame):
    """B7 (analogue: the W8A8 arms of this run) from the crossovers: holds when the winner among
    the W8A8 arms changes with M and the crossover differs between shapes (or only some shapes
    cross): one threshold would be wrong; holds-in-kind when every shape crosses in the same
    bracket; differs when one arm wins at every M. Only decisive changes count (the winner
    >= B7_MARGIN faster than the other arm at both Ms, as in notebook 06): a swap inside that
    margin is a near-tie that flips from run to run, not a threshold."""
    rule = ("among the W8A8 arms (pre-quantised activations), counting a change of the fastest arm only where "
            f"the winner is >= {B7_MARGIN:.0%} faster than the other at both Ms around it: holds if the fastest "
            "arm changes with M and the crossover brackets differ between shapes (or not every shape crosses); "
            "holds-in-kind if every shape crosses in the same bracket; differs if no arm change is decisive")
    w = winners(df)
    if w.empty or w["M"].nunique() < 2:
        return _v("B7", "not-run", "fewer than two M values measured", "the sweep did not cover M", rule=rule)
    x = crossovers(df)
    n_shapes = w["shape"].nunique()
    seq = "; ".join(f"{s}: " + ", ".join(f"M={int(r.M)} {r.winner}" for r in g.sort_values("M").itertuples())
                    for s, g in w.groupby("shape"))

    def say(r):
        return (f"{r.shape}: {r.winner_below} -> {r.winner_above} between M={r.M_below} and {r.M_above} "
                f"(~{r.M_cross:.0f}; leads {r.lead_below:.1%} / {r.lead_above:.1%})")

    dec = x[x["decisive"]] if len(x) else x
    ties = x[~x["decisive"]] if len(x) else x
    tie_txt = (f"; within the {B7_MARGIN:.0%} margin, not counted: " + "; ".join(say(r) for r in ties.itertuples())
               if len(ties) else "")
    if dec.empty:
        why = (f"{len(x)} change(s) of winner, none with a {B7_MARGIN:.0%} lead on both sides" if len(x)
               else "no crossover in the measured range")
        return _v("B7", "differs", f"one arm wins at every M (decisively): {seq}{tie_txt}", why, rule=rule)
    brackets = {(r.M_below, r.M_above, r.winner_below, r.winner_above) for r in dec.itertuples()}
    crossing = dec["shape"].nunique()
    fig = "crossovers: " + "; ".join(say(r) for r in dec.itertuples()) + tie_txt
    if len(brackets) > 1 or crossing < n_shapes:
        return _v("B7", "holds", fig, rule=rule)
    return _v("B7", "holds-in-kind", fig, "every shape crosses over in the same M bracket here", rule=rule)


# ------------------------------------------------------------------------------------------
# notebook views (CPU)
# ------------------------------------------------------------------------------------------
def promotion_ratios(df: pd.DataFrame, quant: str = "none") -> pd.DataFrame:
    """Per (shape, M): mma_blockwise per_slice against the per-block loops (claim A3's ratio),
    from the rows timed with ``quant`` ('none', 'included' or a quantiser's name).

    same_tile: t(per_slice) / t(per_block) at the seed's tile (64x128x128 / 64x64x128 / 3 stages);
    same_tile_promo: t(per_slice) / t(faster of per_block and per_block_inplace), both at the seed
    tile (verdict_a3's figure); seed_to_best: t(per_slice at the seed tile) / t(fastest per_block or
    per_block_inplace, any tile): the tile effect and the promotion together; slice_vs_triton:
    t(per_slice, seed tile) / t(best triton_blockwise)."""
    m = _quant_rows(measured(df), quant)
    out = []
    for (shape, M), g in m.groupby(["shape", "M"]):
        mma = g[g["arm"] == "mma_blockwise"]
        seed = mma[mma["config"] == mb.SEED_CONFIG.name]

        def t(d, variants):
            d = d[d["variant"].isin(variants)]
            return float(d["time_p50_s"].min()) if not d.empty else math.nan
        r = dict(shape=shape, M=int(M),
                 t_slice_seed=t(seed, ["per_slice"]), t_block_seed=t(seed, ["per_block"]),
                 t_inplace_seed=t(seed, ["per_block_inplace"]), t_slice_best=t(mma, ["per_slice"]),
                 t_block_best=t(mma, ["per_block", "per_block_inplace"]),
                 t_triton_best=float(g[g["arm"] == "triton_blockwise"]["time_p50_s"].min())
                 if (g["arm"] == "triton_blockwise").any() else math.nan)
        r["same_tile"] = r["t_slice_seed"] / r["t_block_seed"]
        r["same_tile_inplace"] = r["t_slice_seed"] / r["t_inplace_seed"]
        r["same_tile_promo"] = r["t_slice_seed"] / min(r["t_block_seed"], r["t_inplace_seed"])
        r["seed_to_best"] = r["t_slice_seed"] / r["t_block_best"]
        r["slice_vs_triton"] = r["t_slice_seed"] / r["t_triton_best"]
        out.append(r)
    return pd.DataFrame(out)


def arms_table(df: pd.DataFrame, value: str = "time_p50_s") -> pd.DataFrame:
    """One wide table of the best row per arm (and per quantiser): index (shape, M), one column
    per arm ('arm' or 'arm + quantiser'); ``value`` is any numeric column (time in us when
    value == 'time_p50_s')."""
    b = best_rows(df)
    if b.empty:
        return pd.DataFrame()
    b = b.assign(column=[a if q == "none" else f"{a} + {q}" for a, q in zip(b["arm"], b["quant"])])
    t = b.pivot_table(index=["shape", "M"], columns="column", values=value, aggfunc="min")
    if value == "time_p50_s":
        t = t * 1e6
    order = [c for a in ARMS for c in t.columns if c == a or c.startswith(a + " + ")]
    return t[order + [c for c in t.columns if c not in order]]
