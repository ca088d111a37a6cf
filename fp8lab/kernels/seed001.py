"""Seed 001's GEMM kernels and the weight dequantiser, with their torch binding.

- ``scalar_tiled``: the scalar shared-memory kernel (``scalar_tiled.cu``; claim B1).
- ``wmma_w8a16``: the nvcuda::wmma bf16 tensor-core kernel on FP8 weights, promoted once per
  128-wide K block (``wmma_w8a16.cu``; claims B3, B8, B9).
- ``dequant_w8_bf16``: FP8 block-scaled weights -> bf16, the per-step pass the seed wants to
  delete (``seed001_dequant.cu``).

All three GEMM-side operands use one layout (the ``nn.Linear`` one):

- ``a``       (M, K)             bfloat16, row-major, 16-byte aligned: activations
- ``w``       (N, K)             float8_e4m3fn, row-major (K contiguous), 16-byte aligned: weights
- ``w_scale`` (ceil(N/128), K/128) float32, row-major: one scale per 128 x 128 weight block
- result      (M, N)             bfloat16 (or float32 for the numerics study), row-major

K must be a multiple of 128 (one scale per 128 along K); M and N are free (ragged tiles are
masked). The 1x128 activation quantisers live in :mod:`fp8lab.kernels.quant_act` and share
this module's extension.

This module imports without torch (the CPU tests use the configuration list, the counts, the
input generator and the float64 reference); everything that launches imports torch lazily.
"""

from __future__ import annotations

import dataclasses
import math
import re
from functools import lru_cache

import numpy as np

from ..emulate import blockscale
from ._build import COMMON_HEADERS, KERNEL_DIR, WarpTiled, extension

SCALAR_SOURCE = KERNEL_DIR / "scalar_tiled.cu"
WMMA_SOURCE = KERNEL_DIR / "wmma_w8a16.cu"
QUANT_SOURCE = KERNEL_DIR / "quant_act.cu"
DEQUANT_SOURCE = KERNEL_DIR / "seed001_dequant.cu"
BINDING_SOURCE = KERNEL_DIR / "seed001_ext.cpp"
EXT_SOURCES = (BINDING_SOURCE, SCALAR_SOURCE, WMMA_SOURCE, QUANT_SOURCE, DEQUANT_SOURCE)
EXT_DIGEST_SOURCES = (*EXT_SOURCES, *COMMON_HEADERS)   # the cache key: sources + included headers

BK = 128                 # K per wmma stage == the scale block along K
SCALE_BLOCK = 128
E4M3_MAX = 448.0
SCALAR_TILES = (16, 32)
SEED_SCALAR_TILE = 32    # 32 x 32 = 1024 threads: the seed's launch
# Largest dynamic shared memory one block may opt into / one SM has, bytes (CUDA programming
# guide, compute capabilities table). Used to pick a config that fits before launching.
SMEM_OPTIN = {(8, 0): 163 * 1024, (8, 6): 99 * 1024, (8, 9): 99 * 1024, (9, 0): 227 * 1024}
SMEM_PER_SM = {(8, 0): 164 * 1024, (8, 6): 100 * 1024, (8, 9): 100 * 1024, (9, 0): 228 * 1024}
WMMA_PAD_RULE = ("wmma::load_matrix_sync needs a leading dimension that is a multiple of 8 bf16 "
                 "(16 bytes): the tile row is 128 + pad bf16, so pad must be a multiple of 8")


# ---------------------------------------------------------------------------------------------
# WMMA configurations: parsed from the X-macro list in wmma_w8a16.cu (the one list C++ also uses)
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class WmmaConfig(WarpTiled):
    """CTA tile BM x BN x 128, warp tile WM x WN, shared-memory row pad (bf16 elements).

    stages 0: the original two-stage kernel; 2..4: the pipelined kernel with that many shared-memory
    stages (cp.async A, W converted into a stage STAGES - 1 blocks ahead, fragment double buffering).
    schedule 1: the interleaved kernel (stages 3..4): W converted and stored one chunk per k-step
    between the MMAs with a conflict-free store mapping, fragments prefetched across the barrier.
    """

    bm: int
    bn: int
    wm: int
    wn: int
    pad: int
    force_pad: bool = False
    stages: int = 0
    schedule: int = 0

    @property
    def name(self) -> str:
        forced = "_forced" if self.force_pad else ""
        pipe = (f"_il{self.stages}" if self.schedule else f"_s{self.stages}") if self.stages else ""
        return f"{self.bm}x{self.bn}x{BK}_w{self.wm}x{self.wn}_pad{self.pad}{forced}{pipe}"

    @property
    def n_stages(self) -> int:
        """Shared-memory stages (the original kernel has two)."""
        return self.stages or 2

    @property
    def lds(self) -> int:
        """Shared-memory row stride of the A and W tiles, in bf16 elements."""
        return BK + self.pad

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per CTA: the stages of A and W tiles, or the fp32 epilogue tile."""
        main = self.n_stages * (self.bm + self.bn) * self.lds * 2
        epi = self.bm * (self.bn + 4) * 4
        return max(main, epi)

    def validate(self) -> "WmmaConfig":
        """Raise ValueError naming the violated constraint (the .cu's static_asserts, in Python)."""
        for f in ("bm", "bn", "wm", "wn"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{f} must be a positive integer, got {v!r}")
        if not isinstance(self.pad, (int, np.integer)) or self.pad < 0:
            raise ValueError(f"pad must be an integer >= 0, got {self.pad!r}")
        if self.pad % 8 and not self.force_pad:
            raise ValueError(f"{WMMA_PAD_RULE}; got pad={self.pad} (row = {self.lds * 2} bytes)")
        if self.bm % self.wm or self.bn % self.wn:
            raise ValueError(f"warp tile {self.wm}x{self.wn} must divide the CTA tile {self.bm}x{self.bn}")
        if self.wm % 16 or self.wn % 16:
            raise ValueError(f"warp tile {self.wm}x{self.wn} must be made of 16x16 wmma fragments")
        if BK % self.bn:
            raise ValueError(f"BN={self.bn} must divide 128 so that a CTA tile sees one weight scale per K block")
        if self.stages and not (2 <= self.stages <= 4):
            raise ValueError(f"the pipelined kernel has 2 to 4 stages, got stages={self.stages}")
        if self.schedule not in (0, 1):
            raise ValueError(f"schedule must be 0 (original / pipelined) or 1 (interleaved), got {self.schedule!r}")
        if self.schedule == 1:
            if not 3 <= self.stages <= 4:
                raise ValueError("the interleaved kernel prefetches the next block's fragments before the barrier: "
                                 f"it needs 3 or 4 stages, got stages={self.stages}")
            if self.warps % 2:
                raise ValueError(f"the interleaved W store mapping needs an even warp count, got {self.warps}")
            if self.bn * (BK // 16) > 8 * self.threads:
                raise ValueError("the interleaved kernel stores one W chunk per k-step: BN * 8 / threads must be <= 8, "
                                 f"got {self.bn * (BK // 16) / self.threads:g}")
        if self.stages and (self.pad % 8 or self.force_pad):
            raise ValueError("the pipelined kernel fills A with cp.async: it needs 16-byte aligned rows "
                             f"(pad % 8 == 0, not forced); got pad={self.pad}")
        if (self.bm * (BK // 8)) % self.threads or (self.bn * (BK // 16)) % self.threads:
            raise ValueError(f"tile loads of {self.name} do not split evenly over {self.threads} threads")
        return self


_CONFIG_LINE = re.compile(r"X\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*([01])\s*,"
                          r"\s*(\d+)\s*,\s*(\d+)\s*\)")


@lru_cache(maxsize=None)
def _configs_from_source(text: str) -> tuple[WmmaConfig, ...]:
    start = text.index("#define FP8LAB_WMMA_CONFIGS(X)")
    block = text[start:text.index("#ifdef FP8LAB_WMMA_PAD_CHECK", start)]
    return tuple(WmmaConfig(*map(int, m.groups()[:5]), force_pad=m.group(6) == "1", stages=int(m.group(7)),
                            schedule=int(m.group(8)))
                 for m in _CONFIG_LINE.finditer(block))


def wmma_configs() -> list[WmmaConfig]:
    """The configurations compiled into the extension, in config-id order."""
    cfgs = list(_configs_from_source(WMMA_SOURCE.read_text()))
    if not cfgs:
        raise RuntimeError(f"no X(BM, BN, WM, WN, PAD, FORCE, STAGES, SCHED) lines found in {WMMA_SOURCE}")
    return cfgs


# Named roles of the configuration list (ids are positions in wmma_w8a16.cu's list).
WMMA_ROLES = {"decode": 0, "small": 1, "medium": 2, "large": 3, "large_pad0": 4, "pad1_forced": 5, "large_n64": 6,
              "large_s3": 7, "large_s2": 8, "large_n64_s2": 9, "large_il": 10, "large_il_w32": 11}
#: The prefill-sized configurations, original, pipelined and interleaved (the tile study times all of them).
WMMA_LARGE_ROLES = ("large", "large_n64", "large_s3", "large_s2", "large_n64_s2", "large_il", "large_il_w32")


def wmma_config(config) -> tuple[int, WmmaConfig]:
    """(id, WmmaConfig) from an id, a role name ('large'), a config name, or a WmmaConfig."""
    cfgs = wmma_configs()
    if isinstance(config, WmmaConfig):
        if config not in cfgs:
            raise ValueError(f"config {config.name} is not compiled in; known: {[c.name for c in cfgs]}")
        return cfgs.index(config), config
    if isinstance(config, (int, np.integer)) and not isinstance(config, bool):
        if not 0 <= config < len(cfgs):
            raise ValueError(f"config id must be in [0, {len(cfgs)}), got {config}")
        return int(config), cfgs[int(config)]
    if isinstance(config, str):
        if config in WMMA_ROLES:
            return WMMA_ROLES[config], cfgs[WMMA_ROLES[config]]
        for i, c in enumerate(cfgs):
            if c.name == config:
                return i, c
        raise ValueError(f"unknown wmma config {config!r}; roles {list(WMMA_ROLES)}, names {[c.name for c in cfgs]}")
    raise ValueError(f"config must be 'auto', a role, a name, an id or a WmmaConfig, got {config!r}")


def ctas_per_sm(cfg: WmmaConfig, smem_per_sm: int = 228 * 1024, max_threads: int = 2048) -> int:
    """Resident CTAs per SM as shared memory and threads allow (1 KB of smem is reserved per CTA)."""
    return max(1, min((smem_per_sm) // (cfg.smem_bytes + 1024), max_threads // cfg.threads))


def pick_wmma(M: int, N: int, K: int, *, sms: int = 132, smem_optin: int = 227 * 1024,
              smem_per_sm: int = 228 * 1024) -> dict:
    """The documented rule for choosing a configuration and a K split.

    Tile by M (decode M <= 16, small <= 32, medium <= 128, large_il above: the interleaved kernel,
    the fastest prefill tile on the H200, 264 vs 235 TFLOP/s for 'large' at M = 4096, probe of
    2026-11-29 session 3); drop to the next smaller tile (large_il -> large -> medium ...) when the
    device cannot give the shared memory. When the tiles alone cannot fill the GPU
    (fewer than SMs x resident CTAs), split K into at most K/128 pieces so that they do; the
    pieces are summed in fp32 by a second kernel, in a fixed order.
    """
    _check_mnk(M, N, K)
    order = ["decode", "small", "medium", "large", "large_il"]
    role = "decode" if M <= 16 else "small" if M <= 32 else "medium" if M <= 128 else "large_il"
    idx = order.index(role)
    while idx > 0 and wmma_config(order[idx])[1].smem_bytes > smem_optin:
        idx -= 1
    cid, cfg = wmma_config(order[idx])
    if cfg.smem_bytes > smem_optin:
        raise ValueError(f"no wmma config fits {smem_optin} B of shared memory per block")
    tiles = math.ceil(M / cfg.bm) * math.ceil(N / cfg.bn)
    kblocks = K // BK
    target = sms * ctas_per_sm(cfg, smem_per_sm)
    splits = 1
    if tiles < target:
        splits = min(kblocks, math.ceil(target / tiles), 64)
    kb_per_split = math.ceil(kblocks / splits)
    splits = math.ceil(kblocks / kb_per_split)
    return {"config": cid, "config_name": cfg.name, "role": order[idx], "kb_per_split": kb_per_split,
            "splits": splits, "tiles": tiles, "target_ctas": target}


# ---------------------------------------------------------------------------------------------
# Shared-memory model of one 128-wide K block (issue 6: where the wmma kernel's time goes)
# ---------------------------------------------------------------------------------------------
SMEM_BYTES_PER_CLK = 128        # shared-memory bandwidth per SM and clock (32 banks x 4 B)


def smem_wavefronts(byte_addrs, access_bytes: int) -> int:
    """Wavefronts (shared-memory cycles) one warp-wide access takes: a 4-, 8- or 16-byte access is
    served 32, 16 or 8 threads (128 bytes) at a time; within that phase each bank delivers one
    4-byte word per wavefront, so the phase takes max over banks of the distinct words it hits."""
    if access_bytes not in (4, 8, 16):
        raise ValueError(f"access_bytes must be 4, 8 or 16, got {access_bytes}")
    addrs = [int(a) for a in byte_addrs]
    if any(a % access_bytes for a in addrs):
        raise ValueError(f"every address must be {access_bytes}-byte aligned")
    per_phase = 128 // access_bytes
    total = 0
    for p0 in range(0, len(addrs), per_phase):
        banks: dict[int, set] = {}
        for a in addrs[p0:p0 + per_phase]:
            for w in range(a // 4, (a + access_bytes) // 4):
                banks.setdefault(w % 32, set()).add(w)
        total += max(len(v) for v in banks.values())
    return total


def _il_w_row(q: int) -> int:       # wmma_w8a16.cu il_w_row
    return 8 * ((q >> 5) >> 1) + 2 * ((q & 31) >> 3) + (q & 1)


def _il_w_col(q: int) -> int:       # wmma_w8a16.cu il_w_col
    return 64 * ((q >> 5) & 1) + 16 * ((q & 7) >> 1)


def w_store_chunks(cfg: WmmaConfig) -> list[tuple[int, int]]:
    """(row, first code) of the 16-code W chunk each thread of warp 0 converts first, in lane order:
    the original mapping (8 consecutive chunks of one row per quarter-warp) or the interleaved
    kernel's (2 rows x 4 chunks per quarter-warp)."""
    if cfg.schedule == 1:
        return [(_il_w_row(q), _il_w_col(q)) for q in range(32)]
    return [(q // (BK // 16), (q % (BK // 16)) * 16) for q in range(32)]


def smem_access_patterns(cfg: WmmaConfig) -> dict:
    """Byte addresses (within a stage) of warp 0's shared-memory accesses, in lane / row order:
    the two STS.128 of a converted W chunk, one cp.async (16 B) of A, and the eight 16-byte row
    reads of one 8x8 matrix of an LDSM (stride: the padded row, 2 * (128 + pad) bytes)."""
    row_b = 2 * cfg.lds
    chunks = w_store_chunks(cfg)
    return {
        "sts_w_lo": [r * row_b + 2 * c for r, c in chunks],
        "sts_w_hi": [r * row_b + 2 * c + 16 for r, c in chunks],
        "cp_async_a": [(q // (BK // 8)) * row_b + (q % (BK // 8)) * 16 for q in range(32)],
        "ldsm_rows": [r * row_b for r in range(8)],
    }


def kblock_budget(cfg: WmmaConfig, hmma_per_clk_sm: float = 0.602) -> dict:
    """Per 128-wide K block: per warp and per CTA instruction counts and shared-memory cycles at
    128 B/clock (bank conflicts included), next to the tensor-pipe cycles of the HMMAs.

    hmma_per_clk_sm: HMMA.16816 issue rate per SM and clock; 0.602 = the 644.5 TFLOP/s the
    register-only hmma_peak kernel reached on the H200 at 1980 MHz (4096 FLOP per HMMA.16816,
    132 SMs). Counts assume the instructions the SASS shows (one LDSM.x4 per 16x16 fragment,
    two HMMA.16816 per 16x16x16 wmma, two STS.128 per 16 converted codes, one cp.async per 16 B).
    """
    pats = smem_access_patterns(cfg)
    wf = {k: smem_wavefronts(v, 16) for k, v in pats.items()}
    ks = BK // 16
    fm, fn = cfg.wm // 16, cfg.wn // 16
    ldsm_warp = ks * (fm + fn)
    hmma_warp = ks * fm * fn * 2
    w_chunks = cfg.bn * (BK // 16)              # 16-code chunks per CTA per block
    a_chunks = cfg.bm * (BK // 8)               # 16-byte cp.async pieces per CTA per block
    warps = cfg.warps
    # an 8x8 matrix of an LDSM: 8 rows of 16 B = one 128-byte phase; an LDSM.x4 = 4 matrices
    ldsm_cyc = warps * ldsm_warp * 4 * wf["ldsm_rows"]
    sts_cyc = (w_chunks // 32) * (wf["sts_w_lo"] + wf["sts_w_hi"])
    cp_cyc = (a_chunks // 32) * wf["cp_async_a"]
    hmma_cta = warps * hmma_warp
    smem_cyc = ldsm_cyc + sts_cyc + cp_cyc
    return {"config": cfg.name, "warps": warps, "hmma_per_warp": hmma_warp, "ldsm_per_warp": ldsm_warp,
            "ldsm_bytes_per_warp": ldsm_warp * 512, "sts_w_bytes_per_cta": w_chunks * 32,
            "cp_async_a_bytes_per_cta": a_chunks * 16, "f2fp_unpack_per_thread": w_chunks * 8 // cfg.threads,
            "wavefronts_sts_w": wf["sts_w_lo"], "wavefronts_sts_w_ideal": 4, "wavefronts_cp_async": wf["cp_async_a"],
            "wavefronts_ldsm_matrix": wf["ldsm_rows"], "smem_cycles_ldsm": ldsm_cyc, "smem_cycles_sts_w": sts_cyc,
            "smem_cycles_cp_async": cp_cyc, "smem_cycles": smem_cyc, "hmma_per_cta": hmma_cta,
            "hmma_cycles": hmma_cta / hmma_per_clk_sm, "smem_cycles_per_hmma": smem_cyc / hmma_cta,
            "ldsm_per_hmma": ldsm_warp / hmma_warp}


def tile_of_pid(pid: int, tiles_m: int, tiles_n: int, group_m: int = 8) -> tuple[int, int]:
    """(tile row, tile column) of CTA ``pid``: the grouped launch order of wmma_w8a16_kernel,
    written out in Python so a test can check it visits every tile exactly once."""
    width = group_m * tiles_n
    first_m = (pid // width) * group_m
    rows = min(tiles_m - first_m, group_m)
    return first_m + (pid % width) % rows, (pid % width) // rows


# ---------------------------------------------------------------------------------------------
# Shapes (FLOPs and bytes: fp8lab.arms.registry.count, rules w8a16_blockwise and dequant_w8)
# ---------------------------------------------------------------------------------------------
def _check_mnk(M, N, K):
    for name, v in (("M", M), ("N", N), ("K", K)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if K % SCALE_BLOCK:
        raise ValueError(f"K must be a multiple of {SCALE_BLOCK} (one weight scale per 128 along K), got K={K}")


# ---------------------------------------------------------------------------------------------
# Inputs and the float64 reference
# ---------------------------------------------------------------------------------------------
def quantise_weight_numpy(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """128x128 block quantisation in numpy (the CPU twin of baselines.quant_weight_reference):
    w (N, K) float32 -> (q (N, K) float8_e4m3fn, s (ceil(N/128), K/128) float32)."""
    import ml_dtypes

    w = np.asarray(w, dtype=np.float32)
    N, K = w.shape
    _check_mnk(1, N, K)
    nb, kb = math.ceil(N / SCALE_BLOCK), K // SCALE_BLOCK
    wp = np.pad(w, ((0, nb * SCALE_BLOCK - N), (0, 0))).reshape(nb, SCALE_BLOCK, kb, SCALE_BLOCK)
    amax = np.abs(wp).max(axis=(1, 3))
    s = np.where(amax > 0, amax / np.float32(E4M3_MAX), np.float32(1)).astype(np.float32)
    q = (wp / s[:, None, :, None]).reshape(nb * SCALE_BLOCK, K)[:N].astype(ml_dtypes.float8_e4m3fn)
    return q, s


def generate_inputs(M: int, N: int, K: int, seed: int = 0, *, backend: str = "torch", device="cuda") -> dict:
    """Random operands: a ~ N(0, 1) in bf16; w ~ N(0, 0.02) with each 128 x 128 block scaled by
    2^U(-2, 2) (so a wrong block's scale shows), quantised to e4m3 with 128x128 scales.

    backend 'numpy' returns ml_dtypes arrays (bfloat16, float8_e4m3fn) and float32 scales;
    'torch' builds the same kind of data on ``device`` (not the same numbers: torch's generator).
    """
    _check_mnk(M, N, K)
    nb, kb = math.ceil(N / SCALE_BLOCK), K // SCALE_BLOCK
    if backend == "numpy":
        import ml_dtypes

        rng = np.random.default_rng(seed)
        a = rng.standard_normal((M, K), dtype=np.float32).astype(ml_dtypes.bfloat16)
        w = 0.02 * rng.standard_normal((N, K), dtype=np.float32)
        mag = np.exp2(rng.uniform(-2, 2, size=(nb, kb))).astype(np.float32)
        w *= np.repeat(np.repeat(mag, SCALE_BLOCK, axis=0)[:N], SCALE_BLOCK, axis=1)
        q, s = quantise_weight_numpy(w)
        return {"a": a, "w": q, "w_scale": s}
    if backend != "torch":
        raise ValueError(f"backend must be 'torch' or 'numpy', got {backend!r}")
    import torch

    from . import baselines

    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(M, K, generator=g, device=device).to(torch.bfloat16)
    w = 0.02 * torch.randn(N, K, generator=g, device=device)
    mag = torch.exp2(torch.rand(nb, kb, generator=g, device=device) * 4 - 2)
    w *= mag.repeat_interleave(SCALE_BLOCK, 0)[:N].repeat_interleave(SCALE_BLOCK, 1)
    q, s = baselines.quant_weight_reference(w)
    del w
    return {"a": a.contiguous(), "w": q.contiguous(), "w_scale": s.contiguous()}


def reference_w8a16(a, w, w_scale, rows=None):
    """float64 reference: bf16 activations times the exactly dequantised weights (an e4m3 code
    times an fp32 scale is exact in float64), one float64 matmul. numpy or torch in, same kind
    out, shape (len(rows) or M, N); ``rows`` picks activation rows (a check subset)."""
    M, K = a.shape
    N = w.shape[0]
    if w.shape[1] != K or K % SCALE_BLOCK:
        raise ValueError(f"a (M, K) and w (N, K) need the same K, a multiple of 128; got {tuple(a.shape)}, "
                         f"{tuple(w.shape)}")
    if tuple(w_scale.shape) != (math.ceil(N / SCALE_BLOCK), K // SCALE_BLOCK):
        raise ValueError(f"w_scale must be (ceil(N/128), K/128) = {(math.ceil(N / SCALE_BLOCK), K // SCALE_BLOCK)}, "
                         f"got {tuple(w_scale.shape)}")
    w64 = blockscale.dequant(w, w_scale, (SCALE_BLOCK, SCALE_BLOCK))
    if isinstance(w64, np.ndarray):
        aa = np.asarray(a) if rows is None else np.asarray(a)[rows]
        return aa.astype(np.float64) @ w64.T
    return (a if rows is None else a[rows]).double() @ w64.T


def emulate_wmma_fp32(a, w, w_scale, kb_per_split: int | None = None) -> np.ndarray:
    """CPU model of wmma_w8a16's arithmetic with an fp32 output, for the numerics claim (B8):
    each 128-wide K block's exact dot product (the tensor core forms exact bf16 x bf16 products;
    its fp32 sum is modelled as one rounding), promoted into an fp32 accumulator with one fused
    multiply-add per block; K splits summed in fp32 in order. numpy in, float32 (M, N) out."""
    a64 = np.asarray(a).astype(np.float64)
    w64 = np.asarray(w).astype(np.float64)
    M, K = a64.shape
    N = w64.shape[0]
    kblocks = K // BK
    kb_per_split = kb_per_split or kblocks
    sc = np.repeat(np.asarray(w_scale, np.float64), SCALE_BLOCK, 0)[:N]          # (N, K/128)
    total = np.zeros((M, N), np.float32)
    for k0 in range(0, kblocks, kb_per_split):
        acc = np.zeros((M, N), np.float32)
        for kb in range(k0, min(kblocks, k0 + kb_per_split)):
            blk = (a64[:, kb * BK:(kb + 1) * BK] @ w64[:, kb * BK:(kb + 1) * BK].T).astype(np.float32)
            # fmaf(scale, blk, acc): one rounding of the exact scale * blk + acc
            acc = (sc[None, :, kb] * blk.astype(np.float64) + acc.astype(np.float64)).astype(np.float32)
        total = (total.astype(np.float32) + acc).astype(np.float32)
    return total


def emulate_scalar_fp32(a, w, w_scale) -> np.ndarray:
    """CPU model of scalar_tiled's arithmetic (fp32 output): every weight dequantised to fp32
    (w * scale rounded), then one fp32 fused multiply-add per k, in k order."""
    a32 = np.asarray(a).astype(np.float32)
    M, K = a32.shape
    N = np.asarray(w).shape[0]
    wd = (np.asarray(w).astype(np.float32) *
          np.repeat(np.repeat(np.asarray(w_scale, np.float32), SCALE_BLOCK, 0)[:N], SCALE_BLOCK, 1)).astype(np.float32)
    acc = np.zeros((M, N), np.float32)
    for k in range(K):
        acc = (np.outer(a32[:, k].astype(np.float64), wd[:, k].astype(np.float64)) + acc.astype(np.float64)).astype(np.float32)
    return acc


# ---------------------------------------------------------------------------------------------
# Torch binding
# ---------------------------------------------------------------------------------------------


def load_extension(verbose: bool = False):
    """Build (once per content hash) and import the torch extension with all seed 001 kernels.

    The build directory is ~/.cache/fp8lab/torch_ext/<hash> ($FP8LAB_CACHE_DIR overrides the root),
    the hash covering every source, the torch/CUDA versions and the GPU archs. No fast-math: the
    quantisers' division must be IEEE to match torch bit for bit.
    """
    return extension("seed001", EXT_SOURCES, EXT_DIGEST_SOURCES, include_paths=[KERNEL_DIR],
                     cuda_cflags=["-O3", "-lineinfo"], verbose=verbose)


def _need(cond, msg):
    if not cond:
        raise ValueError(msg)


def _validate_gemm(a, w, w_scale, torch):
    for name, t in (("a", a), ("w", w), ("w_scale", w_scale)):
        _need(isinstance(t, torch.Tensor), f"{name} must be a torch.Tensor, got {type(t).__name__}")
        _need(t.dim() == 2, f"{name} must be 2-D, got shape {tuple(t.shape)}")
        _need(t.is_cuda, f"{name} must be on a CUDA device, got {t.device}")
        _need(t.device == a.device, f"{name} is on {t.device} but a is on {a.device}: all on one device")
        _need(t.is_contiguous(), f"{name} must be contiguous (row-major)")
    _need(a.dtype == torch.bfloat16, f"a must be torch.bfloat16, got {a.dtype}")
    _need(w.dtype == torch.float8_e4m3fn, f"w must be torch.float8_e4m3fn, got {w.dtype}")
    _need(w_scale.dtype == torch.float32, f"w_scale must be torch.float32, got {w_scale.dtype}")
    for name, t in (("a", a), ("w", w)):
        _need(t.data_ptr() % 16 == 0, f"{name} must be 16-byte aligned (16-byte loads; data_ptr % 16 = "
                                      f"{t.data_ptr() % 16})")
    M, K = a.shape
    N = w.shape[0]
    _need(M >= 1 and N >= 1, f"M and N must be >= 1, got M={M}, N={N}")
    _need(w.shape[1] == K, f"a is (M, K) = {tuple(a.shape)} and w must be (N, K) with the same K, got {tuple(w.shape)}")
    _need(K >= SCALE_BLOCK and K % SCALE_BLOCK == 0, f"K must be a multiple of 128 (the scale block), got K={K}")
    _need(max(M, N, K) < 2**31, "M, N and K must fit in int32")
    shape = (math.ceil(N / SCALE_BLOCK), K // SCALE_BLOCK)
    _need(tuple(w_scale.shape) == shape, f"w_scale must be (ceil(N/128), K/128) = {shape}, got {tuple(w_scale.shape)}")
    return M, N, K


def _out(out, out_dtype, M, N, a, torch):
    if out_dtype is None:
        out_dtype = out.dtype if out is not None else torch.bfloat16
    _need(out_dtype in (torch.bfloat16, torch.float32), f"out_dtype must be torch.bfloat16 or torch.float32, got {out_dtype}")
    if out is None:
        return torch.empty((M, N), dtype=out_dtype, device=a.device)
    _need(isinstance(out, torch.Tensor) and out.dtype == out_dtype, f"out must be a {out_dtype} tensor")
    _need(tuple(out.shape) == (M, N), f"out must be (M, N) = {(M, N)}, got {tuple(out.shape)}")
    _need(out.is_contiguous() and out.device == a.device, "out must be contiguous and on a's device")
    return out


def scalar_tiled(a, w, w_scale, *, tile: int = SEED_SCALAR_TILE, out=None, out_dtype=None):
    """C (M, N) = a (M, K) bf16 @ dequant(w (N, K) e4m3, w_scale)^T with the seed's scalar kernel.

    tile: 32 (the seed's 32 x 32 = 1024-thread block) or 16. out_dtype: bf16 (default) or fp32.
    """
    import torch

    _need(tile in SCALAR_TILES, f"tile must be one of {SCALAR_TILES}, got {tile!r}")
    M, N, K = _validate_gemm(a, w, w_scale, torch)
    _need(math.ceil(M / tile) <= 65535, f"M must be <= {65535 * tile} for tile {tile} (grid.y limit), got {M}")
    out = _out(out, out_dtype, M, N, a, torch)
    return load_extension().scalar_tiled(a, w, w_scale, out, int(tile))


def wmma_plan(M: int, N: int, K: int, device=None, config="auto", kb_per_split: int | None = None) -> dict:
    """Configuration and K split for a launch on ``device`` (see :func:`pick_wmma`)."""
    import torch

    props = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
    cc = (props.major, props.minor)
    optin = int(getattr(props, "shared_memory_per_block_optin", 0) or SMEM_OPTIN.get(cc, 99 * 1024))
    per_sm = int(getattr(props, "shared_memory_per_multiprocessor", 0) or SMEM_PER_SM.get(cc, 100 * 1024))
    if config == "auto":
        plan = pick_wmma(M, N, K, sms=props.multi_processor_count, smem_optin=optin, smem_per_sm=per_sm)
    else:
        _check_mnk(M, N, K)
        cid, cfg = wmma_config(config)
        if cfg.smem_bytes > optin:
            raise ValueError(f"config {cfg.name} needs {cfg.smem_bytes} B of shared memory per block; this device "
                             f"allows {optin} B")
        kblocks = K // BK
        plan = {"config": cid, "config_name": cfg.name, "role": next((r for r, i in WMMA_ROLES.items() if i == cid), ""),
                "kb_per_split": kblocks, "splits": 1, "tiles": None, "target_ctas": None}
    if kb_per_split is not None:
        _need(isinstance(kb_per_split, (int, np.integer)) and kb_per_split >= 1,
              f"kb_per_split must be an integer >= 1, got {kb_per_split!r}")
        plan["kb_per_split"] = int(min(kb_per_split, K // BK))
        plan["splits"] = math.ceil((K // BK) / plan["kb_per_split"])
    return plan


def wmma_w8a16(a, w, w_scale, *, config="auto", kb_per_split: int | None = None, out=None, out_dtype=None,
               workspace=None, allow_forced_pad: bool = False):
    """C (M, N) = sum over 128-K blocks of w_scale * (a (M, K) bf16 @ w (N, K) e4m3 ^T) on WMMA.

    config: 'auto' (:func:`pick_wmma`), a role ('decode', 'small', 'medium', 'large',
    'large_pad0'), a config name or id. kb_per_split: K blocks per split (default from the plan).
    workspace: an fp32 tensor of >= splits * M * N elements for the split-K partial sums
    (allocated when missing). The forced +1 pad build (claim B9) computes garbage or faults by
    design: it runs only with allow_forced_pad=True, and only in a throw-away process.
    """
    import torch

    M, N, K = _validate_gemm(a, w, w_scale, torch)
    major, minor = torch.cuda.get_device_capability(a.device)
    _need((major, minor) >= (8, 0), f"bf16 WMMA needs compute capability >= 8.0, device has {major}.{minor}")
    plan = wmma_plan(M, N, K, a.device, config, kb_per_split)
    cfg = wmma_configs()[plan["config"]]
    if cfg.force_pad and not allow_forced_pad:
        raise ValueError(f"config {cfg.name} breaks the wmma ldm rule ({WMMA_PAD_RULE}); it exists only for the "
                         "B9 experiment: pass allow_forced_pad=True in a process you can throw away")
    out = _out(out, out_dtype, M, N, a, torch)
    splits = plan["splits"]
    if splits > 1:
        if workspace is None:
            workspace = torch.empty(splits * M * N, dtype=torch.float32, device=a.device)
        _need(isinstance(workspace, torch.Tensor) and workspace.dtype == torch.float32 and workspace.is_contiguous()
              and workspace.numel() >= splits * M * N and workspace.device == a.device,
              f"workspace must be a contiguous fp32 tensor on a's device with >= splits*M*N = {splits * M * N} elements")
    else:
        workspace = torch.empty(0, dtype=torch.float32, device=a.device)
    return load_extension().wmma_w8a16(a, w, w_scale, out, workspace, int(plan["config"]), int(plan["kb_per_split"]))


def dequant_w8_bf16(q, scale, out=None):
    """(N, K) e4m3 codes with (ceil(N/128), K/128) fp32 scales -> (N, K) bf16, bit for bit
    ``baselines.dequantize_weight``."""
    import torch

    for name, t in (("q", q), ("scale", scale)):
        _need(isinstance(t, torch.Tensor) and t.dim() == 2 and t.is_cuda and t.is_contiguous(),
              f"{name} must be a contiguous 2-D CUDA tensor")
    _need(q.dtype == torch.float8_e4m3fn, f"q must be torch.float8_e4m3fn, got {q.dtype}")
    _need(scale.dtype == torch.float32, f"scale must be torch.float32, got {scale.dtype}")
    N, K = q.shape
    _need(K % SCALE_BLOCK == 0 and K > 0, f"K must be a multiple of 128, got K={K}")
    _need(q.data_ptr() % 16 == 0, "q must be 16-byte aligned")
    shape = (math.ceil(N / SCALE_BLOCK), K // SCALE_BLOCK)
    _need(tuple(scale.shape) == shape, f"scale must be (ceil(N/128), K/128) = {shape}, got {tuple(scale.shape)}")
    if out is None:
        out = torch.empty((N, K), dtype=torch.bfloat16, device=q.device)
    _need(out.dtype == torch.bfloat16 and tuple(out.shape) == (N, K) and out.is_contiguous() and out.data_ptr() % 16 == 0,
          "out must be a contiguous, 16-byte aligned (N, K) bf16 tensor")
    return load_extension().dequant_w8_bf16(q, scale, out)
