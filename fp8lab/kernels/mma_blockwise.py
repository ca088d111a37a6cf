"""``mma_blockwise``: W8A8 blockwise-scaled FP8 GEMM on ``mma.sync.m16n8k32.e4m3`` (sm_89+).

C[M, N] (bf16) = sum over 128-wide K blocks kb of
    a_scale[m, kb] * b_scale[n // 128, kb] * sum_k a[m, k] * b[n, k]

- ``a``       [M, K]            float8_e4m3fn, row-major (contiguous)
- ``a_scale`` [M, K/128]        float32, per-token 1x128 activation scales; any strides (the kernel
                                takes them as arguments). M-major (strides (1, M)) is what cuBLASLt
                                wants and what :func:`generate_inputs` makes; row-major works too.
- ``b``       [N, K]            float8_e4m3fn, row-major = K-major (``nn.Linear.weight`` layout)
- ``b_scale`` [ceil(N/128), K/128] float32, 128x128 weight-block scales; any strides.
- result      [M, N]            bfloat16, row-major.

The CUDA source (``mma_blockwise.cuh``) documents the three main-loop variants and the two
deliberately buggy weight-scale lookups. This module holds what the rest of fp8lab needs:
the configuration list (parsed from ``mma_blockwise_configs.h``, the one list C++ also uses),
config validation, the torch wrapper (torch imported lazily, so this module imports without
torch), a float64 reference, a FLOP/byte count and an input generator.
"""

from __future__ import annotations

import dataclasses
import math
import re
from functools import lru_cache

import numpy as np

from ..emulate import blockscale
from . import _checks
from ._build import COMMON_HEADERS, KERNEL_DIR, WarpTiled, extension
from ._checks import need

HEADER = KERNEL_DIR / "mma_blockwise.cuh"
PARAMS_HEADER = KERNEL_DIR / "mma_blockwise_params.h"
CONFIGS_HEADER = KERNEL_DIR / "mma_blockwise_configs.h"
STANDALONE_SOURCE = KERNEL_DIR / "mma_blockwise.cu"
# The binding, its dispatch and the five kernel tables, one TU each so ninja compiles them in parallel
# (mma_blockwise_ext_tables.h says why); the tables header is hashed with them.
EXT_SOURCES = (KERNEL_DIR / "mma_blockwise_ext.cpp", KERNEL_DIR / "mma_blockwise_ext.cu",
               *(KERNEL_DIR / f"mma_blockwise_{t}_ext.cu"
                 for t in ("per_slice", "per_block", "per_cta_tile", "per_cta_first_col", "inplace")))
EXT_HEADERS = (KERNEL_DIR / "mma_blockwise_ext_tables.h",)
# Every file a compile depends on: the cache keys hash all of them.
SOURCES = (HEADER, PARAMS_HEADER, CONFIGS_HEADER, STANDALONE_SOURCE, *COMMON_HEADERS)
EXT_DIGEST_SOURCES = (*SOURCES, *EXT_HEADERS, *EXT_SOURCES)   # the extension's cache key

BK = 128            # K per pipeline stage == the scale block along K
SCALE_BLOCK = 128
MMA_M, MMA_N, MMA_K = 16, 8, 32

# Main-loop variants, in the order of the C++ enum Variant.
VARIANTS = ("per_slice", "per_block", "per_block_inplace")
# Weight-scale lookups, in the order of the C++ enum ScaleLookup. Only per_warp is correct for every
# tile; the other two are the seed's latent bug kept for claim A5 (compiled for per_block only).
SCALE_LOOKUPS = ("per_warp", "per_cta", "per_cta_first_col")

# Largest dynamic shared memory one block may opt into, bytes (CUDA programming guide, compute
# capabilities table): sm_89 99 KB, sm_90 227 KB.
SMEM_LIMIT = {"sm_89": 99 * 1024, "sm_90": 227 * 1024}
MAX_THREADS = 1024


@dataclasses.dataclass(frozen=True)
class MMAConfig(WarpTiled):
    """One tile configuration: threadblock BM x BN x 128, warp tile WM x WN x 128, STAGES."""

    bm: int
    bn: int
    wm: int
    wn: int
    stages: int
    bk: int = BK

    @property
    def name(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}_w{self.wm}x{self.wn}_s{self.stages}"

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory the launcher requests: the cp.async ring of A and B tiles."""
        return self.stages * (self.bm + self.bn) * self.bk

    @property
    def acc_floats(self) -> int:
        """fp32 accumulator registers per thread of ONE warp-tile fragment (WM*WN/32)."""
        return self.wm * self.wn // 32

    def validate(self, arch: str | None = None) -> "MMAConfig":
        """Raise ValueError naming the violated constraint; returns self when valid.

        The same constraints are static_asserts in mma_blockwise.cuh; checking here means a bad
        configuration is refused before nvcc runs.
        """
        for f in ("bm", "bn", "wm", "wn", "stages", "bk"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{f} must be a positive integer, got {v!r}")
        if self.bk != BK:
            raise ValueError(f"BK must be {BK} (one pipeline stage = one 128-wide scale block), got {self.bk}")
        if self.bm % self.wm or self.bn % self.wn:
            raise ValueError(f"warp tile {self.wm}x{self.wn} must divide the threadblock tile "
                             f"{self.bm}x{self.bn}")
        if self.wm % MMA_M:
            raise ValueError(f"WM={self.wm} must be a multiple of the mma M ({MMA_M})")
        if self.wn % (2 * MMA_N):
            raise ValueError(f"WN={self.wn} must be a multiple of 16 (the mma N is 8 and ldmatrix.x4 "
                             "loads B fragments for two n8 tiles)")
        if SCALE_BLOCK % self.wn:
            raise ValueError(f"WN={self.wn} must divide {SCALE_BLOCK} so that a warp's columns share one "
                             "weight scale (per-warp scale lookup)")
        if self.stages < 2:
            raise ValueError(f"STAGES must be >= 2 for the cp.async pipeline, got {self.stages}")
        if self.threads > MAX_THREADS:
            raise ValueError(f"{self.warps} warps = {self.threads} threads exceeds {MAX_THREADS} threads "
                             "per block")
        if arch is not None:
            if arch not in SMEM_LIMIT:
                raise ValueError(f"arch must be one of {sorted(SMEM_LIMIT)}, got {arch!r}")
            if self.smem_bytes > SMEM_LIMIT[arch]:
                raise ValueError(f"shared memory {self.smem_bytes} B ({self.smem_bytes / 1024:g} KB) exceeds "
                                 f"the {arch} per-block limit of {SMEM_LIMIT[arch]} B "
                                 f"({SMEM_LIMIT[arch] // 1024} KB)")
        return self


# The seed's configuration: threadblock 64x128x128, warp tile 64x64x128, 3 stages (2 warps).
SEED_CONFIG = MMAConfig(64, 128, 64, 64, 3)

_CONFIG_LINE = re.compile(r"X\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")


@lru_cache(maxsize=None)
def _configs_from_header(text: str) -> tuple[MMAConfig, ...]:
    return tuple(MMAConfig(*map(int, m.groups())) for m in _CONFIG_LINE.finditer(text))


def configs() -> list[MMAConfig]:
    """The tile configurations compiled into the extension, in config-id order."""
    cfgs = list(_configs_from_header(CONFIGS_HEADER.read_text()))
    if not cfgs:
        raise RuntimeError(f"no X(BM, BN, WM, WN, STAGES) lines found in {CONFIGS_HEADER}")
    return cfgs


def get_config(config) -> MMAConfig:
    """An MMAConfig from an MMAConfig, a config name ('64x128x128_w64x64_s3'), or an id."""
    cfgs = configs()
    if isinstance(config, MMAConfig):
        return config
    if isinstance(config, (int, np.integer)) and not isinstance(config, bool):
        if not 0 <= config < len(cfgs):
            raise ValueError(f"config id must be in [0, {len(cfgs)}), got {config}")
        return cfgs[int(config)]
    if isinstance(config, str):
        for c in cfgs:
            if c.name == config:
                return c
        raise ValueError(f"unknown config name {config!r}; known: {[c.name for c in cfgs]}")
    raise ValueError(f"config must be an MMAConfig, a config name or an id, got {config!r}")


def config_id(config) -> int:
    """Index of a configuration in mma_blockwise_configs.h (what the extension dispatches on)."""
    cfg = get_config(config)
    cfgs = configs()
    if cfg not in cfgs:
        raise ValueError(f"config {cfg.name} is not compiled into the extension; add it to "
                         f"{CONFIGS_HEADER.name} or pick one of {[c.name for c in cfgs]}")
    return cfgs.index(cfg)


def _check_choice(kind: str, value: str, choices) -> int:
    if value not in choices:
        raise ValueError(f"{kind} must be one of {choices}, got {value!r}")
    return choices.index(value)


# ---------------------------------------------------------------------------------------------
# Shapes (FLOPs and bytes: fp8lab.arms.registry.count, rule w8a8_blockwise)
# ---------------------------------------------------------------------------------------------
def check_shape(M: int, N: int, K: int) -> None:
    """ValueError unless (M, N, K) is a shape the kernel takes: positive, K a multiple of BK."""
    for name, v in (("M", M), ("N", N), ("K", K)):
        if int(v) != v or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if K % BK:
        raise ValueError(f"K must be a multiple of {BK}, got {K}")


# ---------------------------------------------------------------------------------------------
# Inputs and reference
# ---------------------------------------------------------------------------------------------
E4M3_MAX = 448.0


def generate_inputs(M: int, N: int, K: int, *, seed: int = 0, backend: str = "numpy",
                    device: str = "cuda") -> dict:
    """Random e4m3 operands with realistic scales.

    Activations: N(0, 1) times a per-token magnitude 2^U(-3, 3), with every 37th channel an
    outlier (x20), quantised per 1x128 group with scale = amax / 448. Weights: N(0, 0.02) times a
    per-128x128-block magnitude 2^U(-2, 2) (so reading the wrong block's scale shows), quantised
    per block. Scales are clamped away from zero (amax >= 1e-10), as real quantisers do.

    Returns dict(a, a_scale, b, b_scale): numpy arrays (ml_dtypes.float8_e4m3fn) or torch tensors
    on ``device`` (backend="torch"); a_scale is M-major (strides (1, M)) in both.
    """
    import ml_dtypes

    check_shape(M, N, K)
    if backend not in ("numpy", "torch"):
        raise ValueError(f"backend must be 'numpy' or 'torch', got {backend!r}")
    rng = np.random.default_rng(seed)
    kb, nb = K // BK, math.ceil(N / SCALE_BLOCK)

    x = rng.standard_normal((M, K), dtype=np.float32)
    x *= np.exp2(rng.uniform(-3, 3, size=(M, 1))).astype(np.float32)
    x[:, ::37] *= 20.0
    xg = x.reshape(M, kb, BK)
    a_scale = np.maximum(np.abs(xg).max(axis=2), 1e-10).astype(np.float32) / np.float32(E4M3_MAX)
    a = np.clip(xg / a_scale[:, :, None], -E4M3_MAX, E4M3_MAX).reshape(M, K).astype(ml_dtypes.float8_e4m3fn)

    w = 0.02 * rng.standard_normal((N, K), dtype=np.float32)
    mag = np.exp2(rng.uniform(-2, 2, size=(nb, kb))).astype(np.float32)
    w *= np.repeat(np.repeat(mag, SCALE_BLOCK, axis=0)[:N], BK, axis=1)
    pad = nb * SCALE_BLOCK - N
    wp = np.pad(w, ((0, pad), (0, 0))).reshape(nb, SCALE_BLOCK, kb, BK)
    b_scale = np.maximum(np.abs(wp).max(axis=(1, 3)), 1e-10).astype(np.float32) / np.float32(E4M3_MAX)
    bq = np.clip(wp / b_scale[:, None, :, None], -E4M3_MAX, E4M3_MAX).reshape(nb * SCALE_BLOCK, K)[:N]
    b = bq.astype(ml_dtypes.float8_e4m3fn)

    a_scale_mmajor = np.asfortranarray(a_scale)  # strides (4, 4*M) bytes = (1, M) elements
    if backend == "numpy":
        return {"a": a, "a_scale": a_scale_mmajor, "b": b, "b_scale": b_scale}

    import torch

    def f8(arr):
        return torch.from_numpy(np.ascontiguousarray(arr).view(np.uint8)).view(torch.float8_e4m3fn).to(device)

    sa = torch.from_numpy(np.ascontiguousarray(a_scale.T)).to(device).t()  # (M, kb), strides (1, M)
    return {"a": f8(a), "a_scale": sa, "b": f8(b),
            "b_scale": torch.from_numpy(np.ascontiguousarray(b_scale)).to(device)}


def mma_blockwise_reference(a, a_scale, b, b_scale):
    """float64 reference: dequantise both operands exactly, then one matmul.

    An e4m3 code times an fp32 scale is exact in float64 (4 + 24 significant bits), so the only
    rounding is the float64 matmul's. Accepts numpy arrays (float8_e4m3fn from ml_dtypes) or torch
    tensors (computed in float64 on their device); returns the same kind, shape [M, N].
    """
    M, K = a.shape
    N = b.shape[0]
    if b.shape[1] != K or K % BK:
        raise ValueError(f"a [M, K] and b [N, K] need the same K, a multiple of {BK}; got {a.shape}, {b.shape}")
    if tuple(a_scale.shape) != (M, K // BK) or tuple(b_scale.shape) != (math.ceil(N / SCALE_BLOCK), K // BK):
        raise ValueError(f"a_scale must be [M, K/128] = {(M, K // BK)} and b_scale [ceil(N/128), K/128] = "
                         f"{(math.ceil(N / SCALE_BLOCK), K // BK)}; got {tuple(a_scale.shape)}, "
                         f"{tuple(b_scale.shape)}")
    return blockscale.dequant(a, a_scale, (1, BK)) @ blockscale.dequant(b, b_scale, (SCALE_BLOCK, BK)).T


def calc_diff(x, y) -> float:
    """Scale-free error 1 - 2*sum(x*y) / sum(x^2 + y^2) (DeepGEMM): 0 when equal."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    den = float((x * x + y * y).sum())
    return 0.0 if den == 0 else 1.0 - 2.0 * float((x * y).sum()) / den


# ---------------------------------------------------------------------------------------------
# Torch binding
# ---------------------------------------------------------------------------------------------


def load_extension(verbose: bool = False):
    """Build (once per content hash) and import the torch extension.

    The build directory is ~/.cache/fp8lab/torch_ext/<hash> ($FP8LAB_CACHE_DIR overrides the root),
    the hash covering every source, the torch/CUDA versions and the GPU archs, so an edit rebuilds
    and an unchanged tree imports in a second. The first build instantiates 16 configs x 5
    kernels, in five translation units that ninja compiles in parallel (~10-15 s of nvcc each).
    """
    return extension("mma_blockwise", EXT_SOURCES, EXT_DIGEST_SOURCES, include_paths=[KERNEL_DIR], verbose=verbose)


def _validate(a, a_scale, b, b_scale, out, torch):
    _checks.w8a8_operands(a, a_scale, b, b_scale, torch, aligned_for="cp.async")
    for name, t in (("a_scale", a_scale), ("b_scale", b_scale)):
        need(min(t.stride()) >= 0, f"{name} must have non-negative strides, got {t.stride()}")
        need(t.data_ptr() % 4 == 0, f"{name} must be 4-byte aligned")
    M, K = a.shape
    N = b.shape[0]
    need(M >= 1 and N >= 1 and K >= 1, f"M, N, K must be >= 1, got M={M}, N={N}, K={K}")
    need(b.shape[1] == K, f"a is [M, K] = {tuple(a.shape)} and b must be [N, K] with the same K, got "
                          f"{tuple(b.shape)}")
    need(K % BK == 0, f"K must be a multiple of {BK} (the scale block), got K={K}")
    need(max(M, N, K) < 2**31, "M, N and K must fit in int32")
    need(tuple(a_scale.shape) == (M, K // BK), f"a_scale must be [M, K/128] = {(M, K // BK)}, got "
                                               f"{tuple(a_scale.shape)}")
    nb = math.ceil(N / SCALE_BLOCK)
    need(tuple(b_scale.shape) == (nb, K // BK), f"b_scale must be [ceil(N/128), K/128] = {(nb, K // BK)}, got "
                                                f"{tuple(b_scale.shape)}")
    if out is not None:
        _checks.bf16_out(out, M, N, a, torch, align=4, why="bf16 pair stores")


def mma_blockwise(a, a_scale, b, b_scale, *, config=SEED_CONFIG, variant: str = "per_block",
                  scale_lookup: str = "per_warp", swizzle: int = 1, out=None, check_scales: bool | None = None):
    """C = blockwise-scaled a @ b.T in bf16 (see the module docstring for shapes and layouts).

    config: an MMAConfig from :func:`configs`, its name, or its id. variant: one of VARIANTS.
    scale_lookup: "per_warp" (correct) or a buggy lookup (claim A5; per_block variant only).
    swizzle: launch-order group size in tile rows (1 = off, e.g. 8 = on).
    check_scales: verify every scale is finite and > 0 (a device sync). per_block_inplace divides
    by the scales, so it defaults to True for that variant and False otherwise; pass False when
    timing.
    """
    import torch

    cfg = get_config(config)
    cid = config_id(cfg)
    v = _check_choice("variant", variant, VARIANTS)
    lk = _check_choice("scale_lookup", scale_lookup, SCALE_LOOKUPS)
    if lk != 0 and variant != "per_block":
        raise ValueError(f"scale_lookup={scale_lookup!r} (a deliberately buggy lookup) is compiled for the "
                         "per_block variant only")
    if int(swizzle) != swizzle or swizzle < 1:
        raise ValueError(f"swizzle must be an integer >= 1 (1 = off), got {swizzle!r}")
    _validate(a, a_scale, b, b_scale, out, torch)
    major, minor = torch.cuda.get_device_capability(a.device)
    if (major, minor) < (8, 9):
        raise ValueError(f"mma.sync e4m3 needs compute capability >= 8.9, device has {major}.{minor}")
    if check_scales is None:
        check_scales = variant == "per_block_inplace"
    if check_scales:
        _checks.positive_scales(a_scale, b_scale, variant, torch)
    M, N = a.shape[0], b.shape[0]
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    return load_extension().mma_blockwise(a, a_scale, b, b_scale, out, cid, v, lk, int(swizzle))
