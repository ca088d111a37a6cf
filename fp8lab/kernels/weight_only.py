"""Weight-only (A16) decode kernels: ``gemv_w8a16_fp8``, ``gemv_w8a16_int8``,
``gemv_w4a16_nvfp4``, ``gemv_w4a16_int4`` (CUDA source: ``gemv_w16.cuh``).

    out[m, n] = sum_k act[m, k] * value(code[n, k]) * scale(n, k)        (M = 1 .. any; tuned for <= 64)

| format | code (``fp8lab.emulate.formats``) | scale per (row n, K group) | bytes per weight element |
| --- | --- | --- | --- |
| ``fp8``   | e4m3                      | one 16-bit (act dtype) per 128 | 1 + 2/128       |
| ``int8``  | int8 (code c means c-128) | one 16-bit per 128             | 1 + 2/128       |
| ``nvfp4`` | e2m1                      | one e4m3 per 16, one fp32 global | 1/2 + 1/16     |
| ``int4``  | int4 (code c means c-8)   | one 16-bit per 128             | 1/2 + 2/128     |

Activations (and output) are bf16 or fp16; the mma is ``mma.sync.m16n8k16`` on that type
(HMMA): no mma takes a 16-bit and an 8/4-bit operand, so the weights are converted in
registers with the bit tricks of :mod:`fp8lab.emulate.dequant`, instruction for instruction.

What this module holds (torch is imported lazily: everything but the launch runs on CPU):

- the packed layouts (:func:`pack_weights`): logical codes -> the words each thread loads,
  built with :func:`fp8lab.emulate.dequant.pack_bytes` / ``pack_nibbles`` (the emulators' byte order);
  the exponent-bias factor of the float tricks (2^8 / 2^120 for e4m3) folded into the scale;
- :func:`emulate_packed`: the dense weight the kernel multiplies, rebuilt from the packed words
  with the emulators (a CPU check of the packing, scale folding and byte order);
- :func:`reference` (float64, from :func:`fp8lab.emulate.formats.decode`, independent of the tricks),
  (FLOPs and bytes: ``fp8lab.arms.registry.count``, rule ``weight_only``),
  :func:`generate` (realistic random quantised weights and activations);
- :func:`choose_splits` (split-K by a fitted model of CTA generations and the stream's knee), the torch wrapper
  :func:`gemv_w16` and :func:`dequant_probe`;
- :func:`dequant_cubin` / :func:`gemv_cubin` / :func:`xalu_cubin`: the kernels compiled here
  (no GPU) into a content-hashed cache; fp8lab.experiments.gemv_sass counts their SASS.
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from pathlib import Path

import ml_dtypes
import numpy as np

from ..emulate import dequant, formats
from ._build import COMMON_HEADERS, KERNEL_DIR, extension

HEADER = KERNEL_DIR / "gemv_w16.cuh"
PARAMS_HEADER = KERNEL_DIR / "gemv_w16_params.h"
BIND_HEADER = KERNEL_DIR / "gemv_w16_bind.h"   # the two bindings' shared checks and WoParams
STANDALONE_SOURCE = KERNEL_DIR / "gemv_w16.cu"
CHECK_SOURCE = KERNEL_DIR / "gemv_w16_check.cu"
EXT_SOURCES = (KERNEL_DIR / "gemv_w16_ext.cpp", KERNEL_DIR / "gemv_w16_ext.cu", KERNEL_DIR / "gemv_w16_sk_ext.cu",
               KERNEL_DIR / "gemv_w16_bulk_ext.cu")
SOURCES = (HEADER, PARAMS_HEADER, STANDALONE_SOURCE, CHECK_SOURCE, *COMMON_HEADERS)
# What each extension's cache key hashes: its sources and every header they include.
EXT_DIGEST_SOURCES = (HEADER, PARAMS_HEADER, BIND_HEADER, *COMMON_HEADERS, *EXT_SOURCES)
# The pattern kernels (gemv_pattern.cuh: a GEMV's weight and scale loads alone): an extension of their own.
PATTERN_HEADER = KERNEL_DIR / "gemv_pattern.cuh"
PATTERN_PARAMS_HEADER = KERNEL_DIR / "gemv_pattern_params.h"
PATTERN_EXT_SOURCES = (KERNEL_DIR / "gemv_pattern_ext.cpp", KERNEL_DIR / "gemv_pattern_ext.cu")
PATTERN_EXT_DIGEST_SOURCES = (HEADER, PARAMS_HEADER, PATTERN_HEADER, PATTERN_PARAMS_HEADER, *COMMON_HEADERS,
                              *PATTERN_EXT_SOURCES)

FORMATS = ("fp8", "int8", "nvfp4", "int4")
FORMAT_ID = {f: i for i, f in enumerate(FORMATS)}   # the C++ enum Format
ARMS = {"fp8": "gemv_w8a16_fp8", "int8": "gemv_w8a16_int8", "nvfp4": "gemv_w4a16_nvfp4",
        "int4": "gemv_w4a16_int4"}
FORMAT_OF_ARM = {v: k for k, v in ARMS.items()}
CODE_FORMAT = {"fp8": "e4m3", "int8": "int8", "nvfp4": "e2m1", "int4": "int4"}
BITS = {"fp8": 8, "int8": 8, "nvfp4": 4, "int4": 4}
GROUP = {"fp8": 128, "int8": 128, "nvfp4": 16, "int4": 128}     # K elements per scale
SCALE_BYTES = {"fp8": 2, "int8": 2, "nvfp4": 1, "int4": 2}      # bytes per scale
PAIRS = {"fp8": "int8", "nvfp4": "int4"}                         # same width, other dequant (C4)
ACT_DTYPES = ("bf16", "fp16")

STEP_K = 128        # K per pipeline step (== the 128-wide scale group)
WARPS = 8           # warps per CTA
THREADS = 32 * WARPS
M_BLOCK = 64        # tokens per CTA; blockIdx.z walks the rest
RING = 3            # steps per loop iteration (register buffers)
CHUNK_K = RING * STEP_K
ACT_STRIDE = CHUNK_K + 8
ZERO_BYTES = (CHUNK_K + 32) * 2
NVFP4_SHIFT = 7     # dequant(w) x decoded scale = w * s * 2^-7 in both types; out_factor = 2^7 * global

_NP_DTYPE = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}


def check_fmt(fmt: str) -> str:
    """``fmt`` if it is one of FORMATS, else ValueError naming them."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    return fmt


def _check_act(act: str) -> str:
    if act not in ACT_DTYPES:
        raise ValueError(f"act dtype must be one of {ACT_DTYPES}, got {act!r}")
    return act


def _pos_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def fold_factor(fmt: str, act: str) -> float:
    """The exact power of two the float tricks leave out (the emulator's ``factor``): folded
    into the 16-bit group scale for fp8 (2^8 fp16, 2^120 bf16), 1 for the integer formats.
    NVFP4 keeps 2^7 x its global scale in ``out_factor`` instead (see gemv_w16.cuh)."""
    check_fmt(fmt)
    target = "fp16" if _check_act(act) == "fp16" else "bf16"
    return dequant.dequant(CODE_FORMAT[fmt], target, np.zeros(1, np.uint32)).factor


# ---------------------------------------------------------------------------------------------
# Tiling: the host's mirror of gemv_w16.cuh (Tiling<F, NT>)
# ---------------------------------------------------------------------------------------------
def n_tiles(M: int) -> int:
    """n8 tiles (8 tokens each) per CTA: the kernel instantiation for this M (1, 2, 4, 8)."""
    mb = min(_pos_int("M", M), M_BLOCK)
    return 1 if mb <= 8 else 2 if mb <= 16 else 4 if mb <= 32 else 8


def tiles_per_warp(fmt: str, nt: int) -> int:
    """16-row tiles per warp (TM): two for the 4-bit formats at M <= 8, else one."""
    return 2 if BITS[check_fmt(fmt)] == 4 and nt == 1 else 1


def padded_rows(fmt: str, N: int) -> int:
    """Rows of the packed weight: N up to a whole (super-)tile (16 rows 8-bit, 32 rows 4-bit)."""
    t = 16 if BITS[check_fmt(fmt)] == 8 else 32
    return -(-_pos_int("N", N) // t) * t


def smem_bytes(nt: int) -> int:
    return 2 * 8 * nt * ACT_STRIDE * 2 + ZERO_BYTES


def grid_x(fmt: str, N: int, M: int) -> int:
    """CTAs along N."""
    nt = n_tiles(M)
    tiles16 = padded_rows(fmt, N) // 16
    per_cta = WARPS * tiles_per_warp(fmt, nt)
    return -(-tiles16 // per_cta)


#: the split-count model's constants, fitted on an H200 (2026-12-03) to two split sweeps of
#: ``scripts/probes/gemv.py --splitk-only`` (commits acf7b0b and 7197bc1; the tables and commands:
#: scripts/probes/data/gemv_splits_h200.json): 228 points over nine decode shapes (llama3-70b
#: down_proj / qkv / o_proj, llama3-8b down_proj / gate_up, qwen3-8b gate_up / down_proj / o_proj,
#: deepseek-v3 dense_down), four formats, M = 1, 4, 16, 64, 128, split counts 1-32. A grid search
#: for the picks closest to the fastest split measured: the picked split runs at a geometric mean
#: of 0.99 of the fastest (the wave-count model before it: 0.985), within 2% at 207 of 228 points
#: (197), the worst 0.78 (0.61, qwen3-8b o_proj at M = 128). What it misses: at M = 64 on the
#: o_proj shapes one split is fastest and it picks 2 or 3 (0.78-0.89 of the fastest; down_proj
#: 4-bit at M = 64: 3 for 4, 0.86); which odd split count divides the K steps best (7 at llama3-70b
#: qkv, 4-bit: 0.95-0.98); NVFP4 vs INT4 at the same geometry (qwen3-8b gate_up, M = 1: INT4
#: fastest at 2, NVFP4 at 4; 0.92-0.93). The grid search, re-runnable on new sweeps: scripts/fit_splits.py.
#:
#: CTAs per SM at the knee of the stream: a generation of c CTAs streams at
#: copy x c / (c + knee x SMs) (each CTA's register ring keeps a fixed number of bytes in flight,
#: so few CTAs are latency-bound; many share the copy rate)
SPLIT_KNEE_CTAS_PER_SM = 0.85
#: fixed cost of each generation of CTAs (the tail of the one before, the new CTAs' prologue
#: before their first weights arrive), in bytes streamed at the copy rate (~1.9 us on an H200)
SPLIT_GENERATION_BYTES = 8e6
#: cost of the split-K partial sums (red.add into the fp32 workspace in L2, the last CTA's
#: read-back, convert and re-zeroing): REDUCE_BYTE_COST x rows x 4 bytes x min(M, 64) ^
#: REDUCE_M_EXPONENT per CTA, in weight bytes streamed at the copy rate; superlinear in M (the
#: fit: at M = 64 and 128 one split is often fastest, up to 1.6x)
REDUCE_BYTE_COST = 1.0
REDUCE_M_EXPONENT = 1.5


def weight_stream_bytes(fmt: str, N: int, K: int) -> int:
    """Bytes one pass over the packed weight reads: the padded rows' codes and their scales."""
    rows = padded_rows(fmt, N)
    return rows * K * BITS[check_fmt(fmt)] // 8 + rows * (K // GROUP[fmt]) * SCALE_BYTES[fmt]


def split_time_model(fmt: str, M: int, N: int, K: int, splits: int, *, sms: int,
                     ctas_per_sm: int) -> tuple[float, int]:
    """(modelled time in bytes streamed at the copy rate, split count launched) of a split-K
    launch: C CTAs of equal work (b bytes each) run in generations of at most ``sms`` x
    ``ctas_per_sm``; a generation of c CTAs costs c x b + knee x b (knee =
    :data:`SPLIT_KNEE_CTAS_PER_SM` x ``sms``: its stream runs at copy x c / (c + knee)) plus
    :data:`SPLIT_GENERATION_BYTES`; more than one split adds the partial sums
    (:data:`REDUCE_BYTE_COST`)."""
    steps = K // STEP_K
    nt = n_tiles(M)
    rows = 16 * WARPS * tiles_per_warp(fmt, nt)
    z = -(-M // M_BLOCK)
    sps = -(-steps // splits)
    s_eff = -(-steps // sps)
    ctas = grid_x(fmt, N, M) * z * s_eff
    per_cta = weight_stream_bytes(fmt, N, K) * z / ctas
    slots = sms * ctas_per_sm
    knee = SPLIT_KNEE_CTAS_PER_SM * sms
    gens = -(-ctas // slots)
    t = per_cta * (ctas + gens * knee) + gens * SPLIT_GENERATION_BYTES
    if s_eff > 1:
        t += REDUCE_BYTE_COST * rows * 4 * min(M, M_BLOCK) ** REDUCE_M_EXPONENT * ctas
    return t, s_eff


def choose_splits(fmt: str, M: int, N: int, K: int, *, sms: int, ctas_per_sm: int,
                  max_splits: int = 64) -> int:
    """Split-K factor with the smallest :func:`split_time_model` time on ``sms`` SMs of
    ``ctas_per_sm`` CTA slots each (the first among equals, so the fewest splits). Returns the
    split count actually launched (ceil(steps / ceil(steps / s)))."""
    check_fmt(fmt)
    for name, v in (("M", M), ("N", N), ("K", K), ("sms", sms), ("ctas_per_sm", ctas_per_sm),
                    ("max_splits", max_splits)):
        _pos_int(name, v)
    if K % STEP_K:
        raise ValueError(f"K must be a multiple of {STEP_K}, got {K}")
    best, best_t = 1, math.inf
    for s in range(1, min(K // STEP_K, max_splits) + 1):
        t, s_eff = split_time_model(fmt, M, N, K, s, sms=sms, ctas_per_sm=ctas_per_sm)
        if t < best_t * (1 - 1e-9):
            best, best_t = s_eff, t
    return best


#: the launch schedules of :func:`gemv_w16`: ``splitk`` (grid of CTA tiles x K splits, the
#: original), ``streamk`` (persistent CTAs walking the (tile, K step) units; issue 7) and ``bulk``
#: (the split-K grid with each warp's weights in a shared-memory ring filled by cp.async.bulk,
#: sm_90+; issue 22: twice the register ring's bytes in flight per SM). The default stays
#: ``splitk``; notebook 08 times split-K and stream-K by default, and beside them the row-major GEMV
#: of fp8lab.kernels.gemv_rows (its schedule "rows", every format), and plots the fastest per point;
#: scripts/probes/gemv.py times the tile schedules side by side.
SCHEDULES = ("splitk", "streamk", "bulk")
#: the bulk schedule's copy engine (cp.async.bulk, mbarrier transaction counts) needs Hopper
BULK_MIN_SM = 90
DEFAULT_SCHEDULE = "splitk"
#: ``pdl=True`` (programmatic dependent launch: griddepcontrol) needs Hopper too
PDL_MIN_SM = 90


def streamk_plan(fmt: str, M: int, N: int, K: int, ctas: int) -> dict:
    """The stream-K launch the kernel derives from ``ctas`` persistent CTAs per M block (the
    mirror of launch_gemv_sk): ``tiles_x`` CTA tiles along N, ``units`` = tiles_x x K/128,
    ``units_per_cta``, the ``grid`` actually launched and ``whole_tiles``: whether every CTA
    owns exactly whole tiles (then no partial sums are reduced and the result is bit-identical
    to ``splits=1``)."""
    check_fmt(fmt)
    ctas = _pos_int("ctas", ctas)
    if K % STEP_K:
        raise ValueError(f"K must be a multiple of {STEP_K}, got {K}")
    steps = K // STEP_K
    tx = grid_x(fmt, N, M)
    units = tx * steps
    upc = -(-units // ctas)
    gx = -(-units // upc)
    return {"tiles_x": tx, "steps": steps, "units": units, "units_per_cta": upc,
            "grid": (gx, 1, -(-M // M_BLOCK)), "whole_tiles": upc % steps == 0}


# ---------------------------------------------------------------------------------------------
# Scale words and bytes per element (FLOPs and bytes of a call: fp8lab.arms.registry.count)
# ---------------------------------------------------------------------------------------------
def scale_words(fmt: str, N: int, K: int) -> int:
    """32-bit words of packed scales (:func:`pack_scales`) for an (N, K) weight: per 128-K
    step, 8 per 16-row tile (8-bit formats), 16 (int4) or 64 (nvfp4) per 32-row super-tile,
    as gemv_w16.cuh's ``Strides::kS`` reads them."""
    check_fmt(fmt)
    rows, steps = padded_rows(fmt, _pos_int("N", N)), _pos_int("K", K) // STEP_K
    if BITS[fmt] == 8:
        return rows // 16 * steps * 8
    return rows // 32 * steps * (64 if fmt == "nvfp4" else 16)


def bytes_per_element(fmt: str) -> float:
    """Weight + scale bytes per weight element."""
    return BITS[check_fmt(fmt)] / 8 + SCALE_BYTES[fmt] / GROUP[fmt]


# ---------------------------------------------------------------------------------------------
# Packing
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=16)
def _positions(bits: int, n_super: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, k) of every packed element in memory order (int64 arrays, one per element).

    Memory order is [super-tile][step][q = 0..3][lane][word wi = 0..3][element e], a uint4
    per (q, lane). Lane = 4 g + tq. The mma A fragment of a 16x16 tile (PTX m16n8k16): a0 =
    (row g, cols 2tq, 2tq+1), a1 = (row g+8, same cols), a2 = (row g, cols 2tq+8, +9), a3 =
    (row g+8, cols 2tq+8, +9); each a-register is a half2 of two consecutive elements.

    8-bit (super-tile = one 16-row tile): word wi of uint4 q is k16 sub-step kk = 2q + wi//2,
    half h = wi % 2; its 4 elements are (a0, a1) for h = 0 or (a2, a3) for h = 1.
    4-bit (super-tile = two 16-row tiles t): uint4 q holds tile t = q // 2, k16 sub-steps
    kk = 4 (q % 2) + wi; a word's 8 elements are a0..a3.
    """
    lane = np.arange(32)
    g, tq = lane // 4, lane % 4
    if bits == 8:
        su, st, q, ln, wi, e = np.meshgrid(np.arange(n_super), np.arange(steps), np.arange(4),
                                           lane, np.arange(4), np.arange(4), indexing="ij")
        kk = 2 * q + wi // 2
        half = wi % 2
        row = g[ln] + 8 * (e // 2)
        col = 2 * tq[ln] + e % 2 + 8 * half
        n = 16 * su + row
    else:
        su, st, q, ln, wi, e = np.meshgrid(np.arange(n_super), np.arange(steps), np.arange(4),
                                           lane, np.arange(4), np.arange(8), indexing="ij")
        t = q // 2
        kk = 4 * (q % 2) + wi
        r = e // 2
        row = g[ln] + 8 * (r % 2)
        col = 2 * tq[ln] + e % 2 + 8 * (r // 2)
        n = 32 * su + 16 * t + row
    k = STEP_K * st + 16 * kk + col
    return n.reshape(-1), k.reshape(-1)


def _layout(codes: np.ndarray, bits: int) -> np.ndarray:
    """Padded (rows, K) uint8 codes -> 1-D in the packed memory order of :func:`_positions`,
    by reshape and transpose (a second derivation of the same layout: the test checks that
    they agree; this one is fast enough for 10^8-element weights)."""
    rows, K = codes.shape
    S = K // STEP_K
    if bits == 8:
        # row = 16 tile + 8 rsel + g; k = 128 step + 32 q + 16 kkl + 8 half + 2 tq + c
        a = codes.reshape(rows // 16, 2, 8, S, 4, 2, 2, 4, 2)
        # -> [tile][step][q][g][tq][kkl][half][rsel][c]: lane = 4 g + tq, word = 2 kkl + half,
        #    element = 2 rsel + c
        a = a.transpose(0, 3, 4, 2, 7, 5, 6, 1, 8)
    else:
        # row = 32 su + 16 t + 8 rr + g; k = 128 step + 64 qh + 16 wi + 8 rk + 2 tq + c
        a = codes.reshape(rows // 32, 2, 2, 8, S, 2, 4, 2, 4, 2)
        # -> [su][step][t][qh][g][tq][wi][rk][rr][c]: q = 2 t + qh, element = 4 rk + 2 rr + c
        a = a.transpose(0, 4, 1, 5, 3, 8, 6, 7, 2, 9)
    return np.ascontiguousarray(a).reshape(-1)


def pack_words(bits: int, logical: np.ndarray) -> np.ndarray:
    """Logical-order codes (uint8) -> uint32 words, the byte / nibble order of
    :func:`fp8lab.emulate.dequant.pack_bytes` / ``pack_nibbles`` (the test checks they agree), built
    with byte views instead of 32-bit arithmetic so that large weights pack quickly."""
    c = np.asarray(logical, dtype=np.uint8)
    if bits == 8:
        if c.size % 4:
            raise ValueError(f"8-bit codes pack 4 to a word, got {c.size}")
        # byte i of a (little-endian) word holds element BYTE_ORDER[i]
        b = c.reshape(-1, 4)[:, list(dequant.BYTE_ORDER)]
    else:
        if c.size % 8:
            raise ValueError(f"4-bit codes pack 8 to a word, got {c.size}")
        if c.size and c.max() > 15:
            raise ValueError("4-bit codes must lie in 0..15")
        e = c.reshape(-1, 8)
        no = dequant.NIBBLE_ORDER     # nibble i holds element no[i]; byte j = nibbles 2j, 2j+1
        b = np.stack([e[:, no[2 * j]] | (e[:, no[2 * j + 1]] << 4) for j in range(4)], axis=1)
    return np.ascontiguousarray(b, dtype=np.uint8).reshape(-1).view("<u4").astype(np.uint32, copy=False)


def unpack_codes(fmt: str, words, rows: int, K: int):
    """Inverse of the packing: words (numpy uint32 or torch int32, on any device) -> (rows, K)
    uint8 logical codes (padding rows included). The same reshapes as :func:`_layout`, undone."""
    bits = BITS[check_fmt(fmt)]
    S = K // STEP_K
    is_np = isinstance(words, np.ndarray)
    if is_np:
        b = np.ascontiguousarray(words, dtype=np.uint32).view(np.uint8).reshape(-1, 4)
    else:
        import torch
        b = words.contiguous().view(torch.uint8).reshape(-1, 4)
    if bits == 8:
        e = b[:, list(dequant.BYTE_ORDER)]      # its own inverse: swaps bytes 1 and 2
        shape, perm = (rows // 16, S, 4, 8, 4, 2, 2, 2, 2), (0, 7, 3, 1, 2, 5, 6, 4, 8)
    else:
        no = dequant.NIBBLE_ORDER
        cols = [None] * 8
        for j in range(4):
            cols[no[2 * j]] = b[:, j] & 15
            cols[no[2 * j + 1]] = b[:, j] >> 4
        e = np.stack(cols, axis=1) if is_np else __import__("torch").stack(cols, dim=1)
        shape, perm = (rows // 32, S, 2, 2, 8, 4, 4, 2, 2, 2), (0, 2, 8, 4, 1, 3, 6, 7, 5, 9)
    e = e.reshape(shape)
    e = e.transpose(perm) if is_np else e.permute(*perm)
    return e.reshape(rows, K) if is_np else e.contiguous().reshape(rows, K)


@dataclasses.dataclass
class PackedWeight:
    """A weight in the kernel's layout. ``w`` and ``s`` are numpy uint32 (host) or torch
    int32 (device, after :meth:`to`) words; ``out_factor`` multiplies every output."""

    fmt: str
    act: str            # "bf16" | "fp16": the activation / mma / scale dtype it was packed for
    N: int
    K: int
    w: object           # packed weight words
    s: object           # packed scale words
    out_factor: float
    layout: str = "tiles"   # "tiles": this module's kernels; "rows": gemv_rows.py (row-major bytes, 16-bit scales)

    @property
    def n_rows(self) -> int:
        return padded_rows(self.fmt, self.N)

    @property
    def n_tiles16(self) -> int:
        return self.n_rows // 16

    @property
    def steps(self) -> int:
        return self.K // STEP_K

    def to(self, device="cuda") -> "PackedWeight":
        """A copy with torch int32 tensors on ``device``."""
        import torch

        def t(a):
            if isinstance(a, torch.Tensor):
                return a.to(device)
            return torch.from_numpy(np.ascontiguousarray(a).view(np.int32)).to(device)

        return dataclasses.replace(self, w=t(self.w), s=t(self.s))

    def clone(self) -> "PackedWeight":
        """A copy with its own weight and scale words (device tensors cloned, host arrays copied)."""
        return dataclasses.replace(self, w=self.w.clone() if hasattr(self.w, "clone") else self.w.copy(),
                                   s=self.s.clone() if hasattr(self.s, "clone") else self.s.copy())

    def numpy(self) -> "PackedWeight":
        def n(a):
            if isinstance(a, np.ndarray):
                return a
            return a.cpu().numpy().view(np.uint32)

        return dataclasses.replace(self, w=n(self.w), s=n(self.s))


def _as_codes(fmt: str, codes, N: int | None = None, K: int | None = None) -> np.ndarray:
    codes = np.asarray(codes)
    if not np.issubdtype(codes.dtype, np.integer):
        raise ValueError(f"codes must be an integer array, got dtype {codes.dtype}")
    if codes.ndim != 2:
        raise ValueError(f"codes must be 2-D (N, K), got shape {codes.shape}")
    lim = 1 << BITS[fmt]
    if codes.size and (codes.min() < 0 or codes.max() >= lim):
        raise ValueError(f"{fmt} codes must lie in 0..{lim - 1}, got min {codes.min()} max {codes.max()}")
    if codes.shape[1] % STEP_K:
        raise ValueError(f"K must be a multiple of {STEP_K}, got K={codes.shape[1]}")
    return codes.astype(np.uint32)


def _scales_16(scales, act: str, shape) -> np.ndarray:
    """Group scales as float64, each exactly representable in the act dtype."""
    s = np.asarray(scales, dtype=np.float64)
    if s.shape != shape:
        raise ValueError(f"scales must have shape (N, K/128) = {shape}, got {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scales must be finite")
    with np.errstate(over="ignore"):
        r = s.astype(_NP_DTYPE[act]).astype(np.float64)
    if not np.array_equal(r, s):
        bad = int(np.sum(r != s))
        raise ValueError(f"scales must be exactly representable in {act} ({bad} are not): round them "
                         f"to {act} first (the kernel keeps its group scales in the activation dtype)")
    return s


def pack_weights(fmt: str, codes, scales, *, act: str = "bf16", global_scale: float = 1.0) -> PackedWeight:
    """Logical codes and scales -> the kernel's packed layout (numpy).

    codes: (N, K) integers, the format's codes (e4m3 bytes, offset-binary int8, e2m1 / int4
    nibbles 0..15), K a multiple of 128. scales: fp8 / int8 / int4: (N, K/128) floats, exactly
    representable in ``act`` (the kernel's scale dtype); nvfp4: (N, K/16) e4m3 codes (uint8).
    global_scale: NVFP4's per-tensor fp32 scale (others must leave it at 1).

    The fp8 scale is stored times the trick's exponent-bias factor (2^8 for fp16, 2^120 for
    bf16), so the kernel never multiplies per element; a scale whose folded value overflows
    or underflows the 16-bit type is refused.
    """
    check_fmt(fmt)
    _check_act(act)
    c = _as_codes(fmt, codes)
    N, K = c.shape
    rows = padded_rows(fmt, N)
    zero = {"fp8": 0, "int8": 128, "nvfp4": 0, "int4": 8}[fmt]
    cp = np.full((rows, K), zero, dtype=np.uint8)
    cp[:N] = c
    w = pack_words(BITS[fmt], _layout(cp, BITS[fmt]))

    s_words, out_factor = pack_scales(fmt, scales, N, K, act=act, global_scale=global_scale)
    return PackedWeight(fmt, act, N, K, w, s_words, out_factor)


def pack_scales(fmt: str, scales, N: int, K: int, *, act: str = "bf16",
                global_scale: float = 1.0) -> tuple[np.ndarray, float]:
    """The scale half of :func:`pack_weights`: (packed scale words, out_factor)."""
    check_fmt(fmt)
    _check_act(act)
    N, K = _pos_int("N", N), _pos_int("K", K)
    if K % STEP_K:
        raise ValueError(f"K must be a multiple of {STEP_K}, got K={K}")
    steps = K // STEP_K
    rows = padded_rows(fmt, N)
    bits = BITS[fmt]
    n_super = rows // (16 if bits == 8 else 32)
    if fmt == "nvfp4":
        if not (np.isfinite(global_scale) and global_scale > 0):
            raise ValueError(f"global_scale must be a positive finite number, got {global_scale!r}")
        sc = np.asarray(scales)
        if sc.shape != (N, K // 16):
            raise ValueError(f"nvfp4 scales must be (N, K/16) = {(N, K // 16)} e4m3 codes, got {sc.shape}")
        if not np.issubdtype(sc.dtype, np.integer) or (sc.size and (sc.min() < 0 or sc.max() > 255)):
            raise ValueError("nvfp4 scales must be e4m3 codes (integers 0..255)")
        sp = np.zeros((rows, K // 16), dtype=np.uint32)
        sp[:N] = sc
        # words [super][step][g][q][t]; logical bytes (s(n, j), s(n+8, j), s(n, j+1), s(n+8, j+1)),
        # n = 32 super + 16 t + g, j = 8 step + 2 q
        su, st, g, q, t = np.meshgrid(np.arange(n_super), np.arange(steps), np.arange(8), np.arange(4),
                                      np.arange(2), indexing="ij")
        n = 32 * su + 16 * t + g
        j = 8 * st + 2 * q
        lg = np.stack([sp[n, j], sp[n + 8, j], sp[n, j + 1], sp[n + 8, j + 1]], axis=-1)
        s_words = dequant.pack_bytes(lg.reshape(-1))
        out_factor = float(np.float32(2.0 ** NVFP4_SHIFT * np.float32(global_scale)))
        if not np.isfinite(out_factor):
            raise ValueError(f"2^{NVFP4_SHIFT} x global_scale must be finite in fp32")
        return s_words, out_factor

    if global_scale != 1.0:
        raise ValueError(f"global_scale is NVFP4's; {fmt} takes its scales per group only (leave it at 1)")
    s = _scales_16(scales, act, (N, K // 128))
    fold = fold_factor(fmt, act)
    with np.errstate(over="ignore", under="ignore"):
        folded = (s * fold).astype(_NP_DTYPE[act])
    back = folded.astype(np.float64) / fold
    if not np.array_equal(back, s):
        raise ValueError(f"scale x 2^{int(np.log2(fold))} (the {CODE_FORMAT[fmt]} exponent-bias factor "
                         f"folded into the scale) must stay exact in {act}: some scales overflow or "
                         "underflow it")
    bits16 = np.zeros((rows, K // 128), dtype=np.uint32)
    bits16[:N] = folded.view(np.uint16)
    if bits == 8:
        # words [tile16][step][g]: (s(16 tile + g), s(16 tile + g + 8))
        tl, st, g = np.meshgrid(np.arange(rows // 16), np.arange(steps), np.arange(8), indexing="ij")
        n = 16 * tl + g
    else:
        # words [super][step][g][t]
        su, st, g, t = np.meshgrid(np.arange(n_super), np.arange(steps), np.arange(8), np.arange(2),
                                   indexing="ij")
        n = 32 * su + 16 * t + g
    s_words = (bits16[n, st] | (bits16[n + 8, st] << np.uint32(16))).reshape(-1).astype(np.uint32)
    return s_words, 1.0


def emulate_packed(pw: PackedWeight) -> np.ndarray:
    """The dense (N, K) float64 weight the kernel multiplies, rebuilt from the packed words
    through the emulators (the kernel's instruction sequences), its scale words and
    ``out_factor``: ``out = act @ emulate_packed(pw).T`` up to the kernel's rounding."""
    pw = pw.numpy()
    fmt, act = pw.fmt, pw.act
    target = "fp16" if act == "fp16" else "bf16"
    bits = BITS[fmt]
    rows, K, steps = pw.n_rows, pw.K, pw.steps
    n_super = rows // (16 if bits == 8 else 32)
    res = dequant.dequant(CODE_FORMAT[fmt], target, np.asarray(pw.w, dtype=np.uint32))
    vals = res.values()                      # trick value = pattern x factor
    pattern = vals / res.factor              # what the registers hold
    n_idx, k_idx = _positions(bits, n_super, steps)
    W = np.zeros((rows, K))
    s_words = np.asarray(pw.s, dtype=np.uint32)
    if fmt == "nvfp4":
        # scale words decode with the e4m3 trick, then x 2^15 (fp16) / 2^239 (bf16)
        sres = dequant.dequant("e4m3", target, s_words)
        sval = sres.values()                 # the e4m3 value s (trick x factor)
        su, st, g, q, t = np.meshgrid(np.arange(n_super), np.arange(steps), np.arange(8), np.arange(4),
                                      np.arange(2), indexing="ij")
        n = (32 * su + 16 * t + g).reshape(-1)
        j = (8 * st + 2 * q).reshape(-1)
        S = np.zeros((rows, K // 16))
        v = sval.reshape(-1, 4)
        S[n, j], S[n + 8, j], S[n, j + 1], S[n + 8, j + 1] = v[:, 0], v[:, 1], v[:, 2], v[:, 3]
        # in registers: pattern x (s x 2^(Bw - 7)) with Bw the trick's exponent: value x s x 2^-7
        W[n_idx, k_idx] = pattern * res.factor * 2.0 ** -NVFP4_SHIFT * S[n_idx, k_idx // 16]
        return W[: pw.N] * pw.out_factor
    dt = _NP_DTYPE[act]
    lo = (s_words & np.uint32(0xFFFF)).astype(np.uint16).view(dt).astype(np.float64)
    hi = (s_words >> np.uint32(16)).astype(np.uint16).view(dt).astype(np.float64)
    S = np.zeros((rows, steps))
    if bits == 8:
        tl, st, g = np.meshgrid(np.arange(rows // 16), np.arange(steps), np.arange(8), indexing="ij")
        n = (16 * tl + g).reshape(-1)
    else:
        su, st, g, t = np.meshgrid(np.arange(n_super), np.arange(steps), np.arange(8), np.arange(2),
                                   indexing="ij")
        n = (32 * su + 16 * t + g).reshape(-1)
    st = st.reshape(-1)
    S[n, st], S[n + 8, st] = lo, hi
    W[n_idx, k_idx] = pattern * S[n_idx, k_idx // STEP_K]
    return W[: pw.N] * pw.out_factor


# ---------------------------------------------------------------------------------------------
# Reference and inputs
# ---------------------------------------------------------------------------------------------
def dequantize(fmt: str, codes, scales, global_scale: float = 1.0) -> np.ndarray:
    """(N, K) float64 weight from logical codes and scales, through fp8lab.emulate.formats.decode
    (ml_dtypes / integer arithmetic: independent of the bit tricks)."""
    check_fmt(fmt)
    c = _as_codes(fmt, codes)
    v = formats.decode(CODE_FORMAT[fmt], c)
    if fmt == "nvfp4":
        s = formats.decode("e4m3", np.asarray(scales))
        return v * np.repeat(s, 16, axis=1) * float(np.float32(global_scale))
    return v * np.repeat(np.asarray(scales, dtype=np.float64), 128, axis=1)


def reference(fmt: str, act, codes, scales, global_scale: float = 1.0) -> np.ndarray:
    """float64 out[M, N] = act @ dequantize(...).T (act: any array of 16-bit values)."""
    a = np.asarray(act, dtype=np.float64) if isinstance(act, np.ndarray) else np.asarray(
        act.double().cpu().numpy())
    return a @ dequantize(fmt, codes, scales, global_scale).T


_E2M1_VALUES = formats.decode("e2m1", np.arange(16))


def _round_e2m1(x: np.ndarray) -> np.ndarray:
    """Nearest e2m1 code (ties to the even code) of values already scaled into [-6, 6]."""
    pos = np.abs(np.clip(x, -6, 6))
    mags = _E2M1_VALUES[:8]                          # codes 0..7: 0, .5, 1, 1.5, 2, 3, 4, 6
    d = np.abs(pos[..., None] - mags)
    best = d.min(axis=-1, keepdims=True)
    ties = d == best
    # among equally near codes prefer an even mantissa (RNE): codes 0, 2, 4, 6 have mantissa 0
    even = ties & (np.arange(8) % 2 == 0)
    code = np.where(even.any(axis=-1), even.argmax(axis=-1), ties.argmax(axis=-1))
    return (code | np.where(x < 0, 8, 0)).astype(np.uint8)


def generate(fmt: str, M: int, N: int, K: int, *, act: str = "bf16", seed: int = 0) -> dict:
    """Random quantised weights and activations with realistic magnitudes.

    W ~ N(0, 0.02) x a per-row magnitude 2^U(-1, 1); activations N(0, 1) x a per-token
    2^U(-2, 2) with every 37th channel an outlier (x 8). Quantised as a checkpoint would be:
    fp8 / int8 / int4 with one scale per 128 (amax / 448, 127, 7; rounded to ``act``),
    nvfp4 with an fp32 global (amax / (448 x 6)) and e4m3 block scales per 16.

    Returns dict(act (M, K) float64 values exact in ``act``, codes (N, K) uint8, scales,
    global_scale, fmt, act_dtype).
    """
    check_fmt(fmt)
    _check_act(act)
    M, N, K = _pos_int("M", M), _pos_int("N", N), _pos_int("K", K)
    if K % STEP_K:
        raise ValueError(f"K must be a multiple of {STEP_K}, got {K}")
    rng = np.random.default_rng(seed)
    dt = _NP_DTYPE[act]
    x = rng.standard_normal((M, K)) * np.exp2(rng.uniform(-2, 2, size=(M, 1)))
    x[:, ::37] *= 8
    x = x.astype(dt).astype(np.float64)
    w = 0.02 * rng.standard_normal((N, K)) * np.exp2(rng.uniform(-1, 1, size=(N, 1)))
    out = {"act": x, "fmt": fmt, "act_dtype": act, "global_scale": 1.0}
    if fmt == "nvfp4":
        gs = float(np.float32(np.abs(w).max() / (448.0 * 6.0)))
        blocks = w.reshape(N, K // 16, 16)
        bs = np.abs(blocks).max(axis=2) / 6.0 / gs
        sc = np.clip(bs, 2.0 ** -9, 448).astype(ml_dtypes.float8_e4m3fn)
        sval = sc.astype(np.float64)
        codes = _round_e2m1(blocks / (sval[..., None] * gs)).reshape(N, K)
        out.update(codes=codes, scales=sc.view(np.uint8), global_scale=gs)
        return out
    g = w.reshape(N, K // 128, 128)
    amax = np.maximum(np.abs(g).max(axis=2), 1e-8)
    qmax = {"fp8": 448.0, "int8": 127.0, "int4": 7.0}[fmt]
    s = (amax / qmax).astype(dt).astype(np.float64)
    y = g / s[..., None]
    if fmt == "fp8":
        codes = np.clip(y, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    else:
        zp = 128 if fmt == "int8" else 8
        codes = (np.clip(np.rint(y), -zp, zp - 1) + zp).astype(np.uint8)
    out.update(codes=codes.reshape(N, K), scales=s)
    return out


# ---------------------------------------------------------------------------------------------
# Torch binding
# ---------------------------------------------------------------------------------------------


def load_extension(verbose: bool = False):
    """Build (once per content hash) and import the torch extension (4 formats x 2 dtypes x
    4 tiles = 32 kernels: about a minute of nvcc for one arch)."""
    return extension("gemv_w16", EXT_SOURCES, EXT_DIGEST_SOURCES, include_paths=[KERNEL_DIR], verbose=verbose)


#: the EXTRA_ALU levels instantiated (extra dependent integer instructions per weight element)
EXTRA_ALU_LEVELS = (0, 1, 2, 4, 8, 16)
XALU_EXT_SOURCES = (KERNEL_DIR / "gemv_w16_xalu_ext.cpp", KERNEL_DIR / "gemv_w16_xalu_ext.cu")
XALU_EXT_DIGEST_SOURCES = (HEADER, PARAMS_HEADER, BIND_HEADER, *COMMON_HEADERS, *XALU_EXT_SOURCES)
XALU_KERNEL = "gemv_w8a16_fp8_xalu"


def load_xalu_extension(verbose: bool = False):
    """Build (once per content hash) and import the EXTRA_ALU extension (5 fp8 kernels, bf16,
    NT = 1: a few seconds of nvcc on top of the main extension)."""
    return extension("gemv_w16_xalu", XALU_EXT_SOURCES, XALU_EXT_DIGEST_SOURCES, include_paths=[KERNEL_DIR],
                     verbose=verbose)


_WORKSPACES: dict = {}


def workspace(device, n_floats: int, n_counters: int):
    """(fp32 workspace, int32 counters) for split-K on ``device``, zero and reused: the kernel
    leaves both zero again. Grown (reallocated zero) when a larger call needs more, so before
    capturing CUDA graphs of several sizes, call it once with the largest (a graph keeps the
    pointer it captured). Not safe for two calls running at once on different streams."""
    import torch

    dev = torch.device(device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    key = str(dev)
    ws, cnt = _WORKSPACES.get(key, (None, None))
    if ws is None or ws.numel() < n_floats:
        ws = torch.zeros(max(n_floats, 1 << 16), dtype=torch.float32, device=dev)
    if cnt is None or cnt.numel() < n_counters:
        cnt = torch.zeros(max(n_counters, 1024), dtype=torch.int32, device=dev)
    _WORKSPACES[key] = (ws, cnt)
    return ws, cnt


def reset_workspace() -> None:
    """Forget the cached workspaces (after an interrupted launch left them dirty)."""
    _WORKSPACES.clear()


@lru_cache(maxsize=None)
def _occupancy(fmt: str, bf16: bool, nt: int, device_index: int, schedule: str = "splitk") -> int:
    ext = load_extension()
    n = int((ext.occupancy_bulk if schedule == "bulk" else ext.occupancy)(FORMAT_ID[fmt], bf16, nt))
    if n < 1:
        raise RuntimeError(f"occupancy query failed for {fmt} nt={nt}: {n}")
    return n


def _bulk_capable(device_index: int) -> bool:
    import torch

    major, minor = torch.cuda.get_device_capability(device_index)
    return 10 * major + minor >= BULK_MIN_SM


def pdl_supported(device=None) -> bool:
    """Whether :func:`gemv_w16` takes ``pdl=True`` on this CUDA device (sm_90 and newer)."""
    import torch

    if not torch.cuda.is_available():
        return False
    idx = torch.cuda.current_device() if device is None else torch.device(device).index
    major, minor = torch.cuda.get_device_capability(torch.cuda.current_device() if idx is None else idx)
    return 10 * major + minor >= PDL_MIN_SM


def launch_config(pw: PackedWeight, M: int, device=None) -> dict:
    """What :func:`gemv_w16` launches for this weight and M on the current device."""
    import torch

    dev = torch.device("cuda") if device is None else torch.device(device)
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    sms = torch.cuda.get_device_properties(idx).multi_processor_count
    nt = n_tiles(M)
    occ = _occupancy(pw.fmt, pw.act == "bf16", nt, idx)
    splits = choose_splits(pw.fmt, M, pw.N, pw.K, sms=sms, ctas_per_sm=occ)
    z = -(-M // M_BLOCK)
    sk = streamk_plan(pw.fmt, M, pw.N, pw.K, max(1, sms * occ // z))
    cfg = {}
    if _bulk_capable(idx):
        occ_b = _occupancy(pw.fmt, pw.act == "bf16", nt, idx, "bulk")
        cfg = {"bulk_ctas_per_sm": occ_b,
               "bulk_splits": choose_splits(pw.fmt, M, pw.N, pw.K, sms=sms, ctas_per_sm=occ_b)}
    return {**cfg, "nt": nt, "tm": tiles_per_warp(pw.fmt, nt), "ctas_per_sm": occ, "sms": sms,
            "grid": (grid_x(pw.fmt, pw.N, M), splits, z), "splits": splits,
            "streamk_ctas": max(1, sms * occ // z), "streamk_grid": sk["grid"],
            "streamk_units_per_cta": sk["units_per_cta"]}


def _validate(act, pw: PackedWeight, out, splits, torch):
    def need(cond, msg):
        if not cond:
            raise ValueError(msg)

    need(isinstance(pw, PackedWeight), f"pw must be a PackedWeight (pack_weights(...).to('cuda')), got "
                                       f"{type(pw).__name__}")
    need(pw.layout == "tiles", f"pw has layout {pw.layout!r}; this kernel reads the tile layout (pack_weights)")
    need(isinstance(act, torch.Tensor), f"act must be a torch.Tensor, got {type(act).__name__}")
    want = torch.bfloat16 if pw.act == "bf16" else torch.float16
    need(act.dtype == want, f"act must be {want} (the weight was packed for {pw.act}), got {act.dtype}")
    need(act.dim() == 2, f"act must be 2-D (M, K), got shape {tuple(act.shape)}")
    need(act.is_cuda, f"act must be on a CUDA device, got {act.device}")
    need(act.is_contiguous(), "act must be contiguous (row-major, K innermost)")
    need(act.data_ptr() % 16 == 0, f"act must be 16-byte aligned for cp.async (data_ptr % 16 = "
                                   f"{act.data_ptr() % 16})")
    M, K = act.shape
    need(M >= 1, f"M must be >= 1, got {M}")
    need(K == pw.K, f"act is (M, K) = {tuple(act.shape)} but the weight has K = {pw.K}")
    for name, t in (("pw.w", pw.w), ("pw.s", pw.s)):
        need(isinstance(t, torch.Tensor) and t.is_cuda and t.dtype == torch.int32,
             f"{name} must be an int32 CUDA tensor (call pw.to('cuda'))")
        need(t.device == act.device, f"{name} is on {t.device} but act is on {act.device}")
    need(pw.w.data_ptr() % 16 == 0, "packed weights must be 16-byte aligned")
    words = pw.n_rows * pw.K * BITS[pw.fmt] // 32
    need(pw.w.numel() == words, f"pw.w has {pw.w.numel()} words, the layout needs {words}")
    # The kernel reads both through raw pointers at fixed strides: a view with gaps, or too
    # few scale words, reads other memory without any error.
    need(pw.w.is_contiguous(), "pw.w must be contiguous (the packed layout, as pw.to('cuda') makes it)")
    s_words = scale_words(pw.fmt, pw.N, pw.K)
    need(pw.s.numel() == s_words, f"pw.s has {pw.s.numel()} words, the layout of an {pw.fmt} "
                                  f"(N, K) = {(pw.N, pw.K)} weight needs {s_words} (pack_scales)")
    need(pw.s.is_contiguous(), "pw.s must be contiguous (the packed layout, as pw.to('cuda') makes it)")
    need(pw.s.data_ptr() % 8 == 0, f"pw.s must be 8-byte aligned (two-tile warps load scale pairs "
                                   f"as 64-bit words; data_ptr % 8 = {pw.s.data_ptr() % 8})")
    need(max(M, pw.N, pw.K) < 2**31 and M * pw.N < 2**62, "sizes must fit in int32")
    if out is not None:
        need(isinstance(out, torch.Tensor) and out.dtype == want, f"out must be a {want} tensor")
        need(tuple(out.shape) == (M, pw.N), f"out must be (M, N) = {(M, pw.N)}, got {tuple(out.shape)}")
        need(out.is_contiguous() and out.device == act.device, "out must be contiguous, on act's device")
    if splits is not None:
        need(isinstance(splits, int) and 1 <= splits <= pw.steps,
             f"splits must be an integer in [1, K/128 = {pw.steps}], got {splits!r}")


def _check_extra_alu(extra_alu, pw: PackedWeight, M: int) -> int:
    if isinstance(extra_alu, bool) or not isinstance(extra_alu, (int, np.integer)) or \
            int(extra_alu) not in EXTRA_ALU_LEVELS:
        raise ValueError(f"extra_alu must be one of {EXTRA_ALU_LEVELS} (the instantiated EXTRA_ALU "
                         f"kernels), got {extra_alu!r}")
    if pw.fmt != "fp8" or pw.act != "bf16":
        raise ValueError(f"extra_alu is built for fp8 weights with bf16 activations only, got "
                         f"{pw.fmt}/{pw.act}")
    if M > 8:
        raise ValueError(f"extra_alu is built for the decode tile only (M <= 8), got M = {M}")
    return int(extra_alu)


def gemv_w16(act, pw: PackedWeight, *, splits: int | None = None, out=None, extra_alu: int | None = None,
             schedule: str | None = None, ctas: int | None = None, act_resident: bool = True, pdl: bool = False):
    """out (M, N) = act (M, K) @ dequant(pw).T, in act's dtype (bf16 or fp16).

    ``pw``: :func:`pack_weights` moved to the GPU (``.to('cuda')``). ``splits``: split-K
    factor (None: :func:`choose_splits` for this device). Any M works; the kernel takes 64
    tokens per CTA (more M = more blocks, the weights re-read from L2).

    ``extra_alu``: None (the regular kernel) or k in :data:`EXTRA_ALU_LEVELS`: the EXTRA_ALU
    kernel (fp8, bf16, M <= 8 only) that issues k extra dependent integer instructions per
    weight element before the dequant (same result bit for bit; notebook 10). k = 0 is the
    regular kernel's SASS in the other extension (a control for the build).

    ``schedule``: None (:data:`DEFAULT_SCHEDULE`), ``"splitk"``, ``"streamk"``: persistent
    CTAs (``ctas`` per 64-token block; None: SMs x CTAs per SM) each walking a contiguous range
    of the (CTA tile along N, 128-K step) units, partial tiles reduced through the same fp32
    workspace (see gemv_w16.cuh), or ``"bulk"``: the split-K grid with the weights and scales
    brought into shared memory by cp.async.bulk (sm_90+, pw.s 16-byte aligned; the same sums in
    the same order as split-K with the same ``splits``). ``splits`` applies to split-K and bulk;
    ``ctas`` to stream-K only. ``"rows"`` is not one of these: it is the row-major CUDA-core GEMV
    :func:`fp8lab.kernels.gemv_rows.gemv` (every format; the decode M = 1 schedule), and this
    function refuses it, and any weight packed with ``layout="rows"``, in one line.

    ``act_resident`` (split-K, bulk, stream-K): True lets a CTA keep its activations in shared
    memory when they fit (one barrier in all instead of two per 384-K chunk). Split-K and bulk:
    every chunk of the CTA's K slice (decode M = 1 with a short K slice). Stream-K, M <= 16: the
    M block's rows of the whole K when min(M, 64) x (K + 8) x 2 bytes <= 96 KiB (M = 1: K up to
    49 144). False always alternates two chunk buffers (the A/B control; same sums, same order:
    bit-identical).

    ``pdl`` (every schedule, sm_90+; not with ``extra_alu``): launch as a programmatic dependent
    launch. Each CTA requests its first K steps of weights and scales, then waits for the kernel
    before it in the stream, then reads ``act`` and writes ``out``: the GEMV's launch and first
    DRAM round trip overlap that kernel's tail. So ``pw`` must not be written by the kernel the
    GEMV follows (activations, ``out`` and the workspace may be). Each CTA computes the same sums
    as with ``pdl=False``.

    Reproducibility: where an output gets at most two partial sums (split-K and bulk with
    ``splits`` <= 2, stream-K with whole tiles or two CTAs per tile) the result is the same bit for
    bit on every launch, PDL or not. With three or more (``splits`` >= 3, stream-K tiles shared by
    three or more CTAs) the fp32 workspace adds them in the order the CTAs finish, so two launches
    may differ in the last bit of an element (``scripts/probes/gemv.py`` counts how often)."""
    import torch

    if schedule == "rows":
        raise ValueError("schedule 'rows' is fp8lab.kernels.gemv_rows.gemv (a weight from gemv_rows.pack_rows), "
                         "not a gemv_w16 schedule")
    _validate(act, pw, out, splits, torch)
    M = act.shape[0]
    schedule = DEFAULT_SCHEDULE if schedule is None else schedule
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if not isinstance(act_resident, (bool, np.bool_)):
        raise ValueError(f"act_resident must be True or False, got {act_resident!r}")
    if not isinstance(pdl, (bool, np.bool_)):
        raise ValueError(f"pdl must be True or False, got {pdl!r}")
    if pdl:
        if extra_alu is not None:
            raise ValueError("pdl=True takes no extra_alu (the EXTRA_ALU kernels launch plainly)")
        if not pdl_supported(act.device):
            cap = torch.cuda.get_device_capability(act.device)
            raise ValueError(f"pdl=True needs sm_{PDL_MIN_SM} or newer (griddepcontrol); this GPU is "
                             f"sm_{cap[0]}{cap[1]}")
    if schedule == "streamk":
        if splits is not None or extra_alu is not None:
            raise ValueError("schedule='streamk' takes neither splits nor extra_alu (split-K only)")
        if ctas is None:
            ctas = launch_config(pw, M, act.device)["streamk_ctas"]
        elif isinstance(ctas, bool) or not isinstance(ctas, (int, np.integer)) or not 1 <= ctas < 2**31:
            raise ValueError(f"ctas must be a positive integer (persistent CTAs per M block), got {ctas!r}")
        if out is None:
            out = torch.empty((M, pw.N), dtype=act.dtype, device=act.device)
        plan = streamk_plan(pw.fmt, M, pw.N, pw.K, int(ctas))
        ws, cnt = workspace(act.device, M * pw.N, plan["tiles_x"] * plan["grid"][2])
        return load_extension().gemv(act, pw.w, pw.s, out, ws, cnt, FORMAT_ID[pw.fmt], float(pw.out_factor),
                                     pw.N, pw.n_tiles16, -int(ctas), pw.steps, bool(act_resident), bool(pdl))
    if ctas is not None:
        raise ValueError("ctas applies to schedule='streamk' only")
    bulk = schedule == "bulk"
    if bulk:
        if extra_alu is not None:
            raise ValueError("schedule='bulk' takes no extra_alu (the EXTRA_ALU kernels are split-K only)")
        idx = act.device.index if act.device.index is not None else torch.cuda.current_device()
        if not _bulk_capable(idx):
            cap = torch.cuda.get_device_capability(idx)
            raise ValueError(f"schedule='bulk' needs sm_{BULK_MIN_SM} or newer (cp.async.bulk); this GPU is "
                             f"sm_{cap[0]}{cap[1]}")
        if pw.s.data_ptr() % 16:
            raise ValueError(f"schedule='bulk' copies the packed scales with cp.async.bulk: pw.s must be 16-byte "
                             f"aligned (data_ptr % 16 = {pw.s.data_ptr() % 16})")
    if extra_alu is not None:
        extra_alu = _check_extra_alu(extra_alu, pw, M)
    if splits is None:
        splits = launch_config(pw, M, act.device)["bulk_splits" if bulk else "splits"]
    sps = -(-pw.steps // splits)
    splits = -(-pw.steps // sps)
    if out is None:
        out = torch.empty((M, pw.N), dtype=act.dtype, device=act.device)
    ctas = grid_x(pw.fmt, pw.N, M) * -(-M // M_BLOCK)
    ws, cnt = workspace(act.device, M * pw.N if splits > 1 else 1, ctas)
    if extra_alu is not None:
        # salt 0: the chain is the identity, but only the host knows that
        return load_xalu_extension().gemv_xalu(act, pw.w, pw.s, out, ws, cnt, float(pw.out_factor), pw.N,
                                               pw.n_tiles16, splits, sps, extra_alu, 0)
    return (load_extension().gemv_bulk if bulk else load_extension().gemv)(
        act, pw.w, pw.s, out, ws, cnt, FORMAT_ID[pw.fmt], float(pw.out_factor), pw.N, pw.n_tiles16, splits, sps,
        bool(act_resident), bool(pdl))


# ---------------------------------------------------------------------------------------------
# The access pattern's ceiling (issue 22): a GEMV's weight and scale loads with nothing else
# ---------------------------------------------------------------------------------------------
#: the schedules :func:`pattern_stream` mirrors (the bulk schedule's loads are the copy engine's)
PATTERN_SCHEDULES = ("splitk", "streamk")
#: the order :func:`pattern_stream` reads the packed chunks in: "tile" the GEMV's own (the packed
#: layout, [super-tile][step]); "step" a what-if for the probes (split-K only): where a step-major
#: packing ([step][super-tile]) would put them, so a CTA's warps read adjacent chunks at each step
PATTERN_ORDERS = ("tile", "step")
#: the word the pattern kernel's XOR is compared with before its one store (any constant does: the
#: store only keeps the loads live)
PATTERN_KEY = 0x2F5A17C3
#: kernel format ids the pattern extension takes beyond FORMAT_ID: the W8A8 kernel's e4m3 weights
#: with one fp32 scale word per (16-row tile, step) (gemv_w16.cuh kFp8A8)
PATTERN_FP8A8 = 4


def load_pattern_extension(verbose: bool = False):
    """Build (once per content hash) and import the pattern extension (5 weight layouts x 4 tiles x
    split-K, its step-major what-if and stream-K: 60 small kernels, a few seconds of nvcc)."""
    return extension("gemv_pattern", PATTERN_EXT_SOURCES, PATTERN_EXT_DIGEST_SOURCES, include_paths=[KERNEL_DIR],
                     verbose=verbose)


_SINKS: dict = {}


def pattern_sink(device, n_words: int):
    """The pattern kernels' int32 sink on ``device`` (one word per launched thread), reused and grown
    like :func:`workspace`: before capturing CUDA graphs of several sizes, call it once with the
    largest."""
    import torch

    dev = torch.device(device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    t = _SINKS.get(str(dev))
    if t is None or t.numel() < n_words:
        t = torch.zeros(max(int(n_words), 1 << 16), dtype=torch.int32, device=dev)
        _SINKS[str(dev)] = t
    return t


def pattern_geometry(fmt: str, M: int, N: int, K: int, *, schedule: str, splits: int | None = None,
                     ctas: int | None = None) -> dict:
    """The launch :func:`pattern_stream` makes (host arithmetic only): ``nt``, ``gz`` (M blocks),
    ``splits`` (split-K: the count launched; stream-K: -ctas, the binding's convention),
    ``steps_per_split``, ``grid`` and ``threads`` (the sink words it needs). ``splits`` / ``ctas``
    as :func:`gemv_w16` takes them (required here: the caller resolves the defaults)."""
    check_fmt(fmt)
    if schedule not in PATTERN_SCHEDULES:
        raise ValueError(f"schedule must be one of {PATTERN_SCHEDULES} (the bulk schedule's loads are the copy "
                         f"engine's), got {schedule!r}")
    steps = K // STEP_K
    nt = n_tiles(M)
    gz = -(-M // M_BLOCK)
    if schedule == "splitk":
        if isinstance(splits, bool) or not isinstance(splits, (int, np.integer)) or not 1 <= splits <= steps:
            raise ValueError(f"splits must be an integer in [1, K/128 = {steps}], got {splits!r}")
        sps = -(-steps // int(splits))
        s_eff = -(-steps // sps)
        grid = (grid_x(fmt, N, M), s_eff, gz)
        launch_splits = s_eff
    else:
        if isinstance(ctas, bool) or not isinstance(ctas, (int, np.integer)) or not 1 <= ctas < 2**31:
            raise ValueError(f"ctas must be a positive integer (persistent CTAs per M block), got {ctas!r}")
        plan = streamk_plan(fmt, M, N, K, int(ctas))
        grid, sps, launch_splits = plan["grid"], steps, -int(ctas)
    return {"nt": nt, "gz": gz, "splits": launch_splits, "steps_per_split": sps, "grid": tuple(grid),
            "threads": THREADS * grid[0] * grid[1] * grid[2]}


def pattern_stream(pw: PackedWeight, M: int, *, schedule: str | None = None, splits: int | None = None,
                   ctas: int | None = None, ctas_per_sm: int | None = None, sink=None, key: int = PATTERN_KEY,
                   order: str = "tile") -> int:
    """The weight and scale loads of ``gemv_w16(act (M, K), pw, schedule=..., splits=..., ctas=...)``
    alone: the same grid, every warp the same 16-byte words with the same load instruction through
    the same three-step register ring, each word XORed into one register (gemv_pattern.cuh). No
    activations, no dequant, no mma, no barrier, no reduction: what the GEMV's access pattern
    allows. Defaults as :func:`gemv_w16` picks them on this device. ``ctas_per_sm``: the CTAs per
    SM the pattern runs at (its shared memory is padded so; None: the GEMV's own occupancy).
    ``sink``: an int32 tensor of at least one word per launched thread (None: :func:`pattern_sink`);
    a thread stores its XOR there only where it equals ``key`` (a 32-bit value; the GPU tests set it
    to one thread's expected XOR). ``order``: one of :data:`PATTERN_ORDERS` ("step": split-K only; the
    same bytes in another address order, a what-if: not what the GEMV reads). Returns the CTAs per SM
    it ran at (the caller compares it with what it asked for)."""
    import torch

    if not isinstance(pw, PackedWeight):
        raise ValueError(f"pw must be a PackedWeight (pack_weights(...).to('cuda')), got {type(pw).__name__}")
    for name, t in (("pw.w", pw.w), ("pw.s", pw.s)):
        if not (isinstance(t, torch.Tensor) and t.is_cuda and t.dtype == torch.int32 and t.is_contiguous()):
            raise ValueError(f"{name} must be a contiguous int32 CUDA tensor (call pw.to('cuda'))")
    if pw.w.data_ptr() % 16 or pw.s.data_ptr() % 8:
        raise ValueError("packed weights must be 16-byte and scales 8-byte aligned")
    if pw.w.numel() != pw.n_rows * pw.K * BITS[pw.fmt] // 32 or pw.s.numel() != scale_words(pw.fmt, pw.N, pw.K):
        raise ValueError(f"pw's arrays do not have the packed layout of an {pw.fmt} (N, K) = {(pw.N, pw.K)} weight")
    M = _pos_int("M", M)
    schedule = DEFAULT_SCHEDULE if schedule is None else schedule
    if schedule not in PATTERN_SCHEDULES:
        raise ValueError(f"schedule must be one of {PATTERN_SCHEDULES} (the bulk schedule's loads are the copy "
                         f"engine's), got {schedule!r}")
    if schedule == "splitk" and ctas is not None:
        raise ValueError("ctas applies to schedule='streamk' only")
    if schedule == "streamk" and splits is not None:
        raise ValueError("schedule='streamk' takes no splits")
    if order not in PATTERN_ORDERS:
        raise ValueError(f"order must be one of {PATTERN_ORDERS}, got {order!r}")
    if order == "step" and schedule != "splitk":
        raise ValueError("order='step' is a split-K what-if (schedule='splitk')")
    need_cfg = ctas_per_sm is None or (schedule == "splitk" and splits is None) or (schedule == "streamk" and ctas is None)
    cfg = launch_config(pw, M, pw.w.device) if need_cfg else {}
    if ctas_per_sm is None:
        ctas_per_sm = cfg["ctas_per_sm"]
    ctas_per_sm = _pos_int("ctas_per_sm", ctas_per_sm)
    if schedule == "splitk" and splits is None:
        splits = cfg["splits"]
    if schedule == "streamk" and ctas is None:
        ctas = cfg["streamk_ctas"]
    g = pattern_geometry(pw.fmt, M, pw.N, pw.K, schedule=schedule, splits=splits, ctas=ctas)
    return launch_pattern(FORMAT_ID[pw.fmt], g, pw.w, pw.s, pw.n_tiles16, pw.steps, ctas_per_sm, sink, key,
                          step_major=order == "step")


def launch_pattern(fmt_id: int, g: dict, w, s, n_tiles16: int, steps: int, ctas_per_sm: int, sink, key: int,
                   step_major: bool = False) -> int:
    """The pattern extension's launch of :func:`pattern_geometry`'s ``g`` over the packed arrays
    ``w`` / ``s`` (layout ``fmt_id``: FORMAT_ID or :data:`PATTERN_FP8A8`), after the checks every
    caller shares (sink, key). Returns the CTAs per SM it ran at."""
    import torch

    if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or not 0 <= key < 2**32:
        raise ValueError(f"key must be a 32-bit unsigned integer, got {key!r}")
    if sink is None:
        sink = pattern_sink(w.device, g["threads"])
    if not (isinstance(sink, torch.Tensor) and sink.is_cuda and sink.dtype == torch.int32 and sink.is_contiguous()
            and sink.numel() >= g["threads"] and sink.device == w.device):
        raise ValueError(f"sink must be a contiguous int32 tensor of >= {g['threads']} words on {w.device}")
    return int(load_pattern_extension().pattern(w, s, sink, int(fmt_id), g["nt"], n_tiles16, steps, g["splits"],
                                                g["steps_per_split"], g["gz"], int(ctas_per_sm), int(key),
                                                bool(step_major)))


def dequant_probe(fmt: str, act: str, words) -> np.ndarray:
    """Run the kernel's dequant alone on the GPU: uint32 words -> uint16 patterns in logical
    element order (the emulators' ``bits``)."""
    import torch

    check_fmt(fmt)
    _check_act(act)
    w = np.ascontiguousarray(np.asarray(words, dtype=np.uint32))
    if w.ndim != 1 or w.size == 0:
        raise ValueError("words must be a non-empty 1-D uint32 array")
    t = torch.from_numpy(w.view(np.int32)).cuda()
    out = load_extension().probe(t, FORMAT_ID[fmt], act == "bf16")
    pairs = out.cpu().numpy().view(np.uint32).reshape(-1)
    lanes = np.stack([(pairs & np.uint32(0xFFFF)), pairs >> np.uint32(16)], axis=1)
    return lanes.reshape(-1).astype(np.uint16)


def _compile(source: Path, arch: str, defines=()) -> Path:
    """cubin of ``source`` for ``arch`` (toolchain.cubin's content-hashed cache, outside the repo)."""
    from ..toolchain.cubin import compile_cubin

    b = compile_cubin(source, arch, defines=defines, include=[KERNEL_DIR], key_files=SOURCES)
    if not b.ok:
        raise RuntimeError(f"nvcc failed ({' '.join(b.cmd)}):\n{b.log[-3000:]}")
    return b.cubin


# The cubins the SASS tables read, one function each so `python -m fp8lab build` compiles the same
# files (same cache key) before the notebooks ask for them.
def dequant_cubin(arch: str = "sm_90") -> Path:
    """gemv_w16_check.cu (the dequant probes) for ``arch``: what ``gemv_sass.dequant_sass_counts`` reads."""
    return _compile(CHECK_SOURCE, arch)


def gemv_cubin(arch: str = "sm_90", nt: int = 1) -> Path:
    """gemv_w16.cu with NT = ``nt`` for ``arch``: what ``gemv_sass.gemv_sass_counts`` reads."""
    if nt not in (1, 2, 4, 8):
        raise ValueError(f"nt must be 1, 2, 4 or 8, got {nt}")
    return _compile(STANDALONE_SOURCE, arch, (f"FP8LAB_WO_NT={nt}",))


def xalu_cubin(arch: str = "sm_90") -> Path:
    """gemv_w16.cu's EXTRA_ALU kernels (fp8, bf16, NT = 1) for ``arch``: what ``gemv_sass.xalu_sass_counts`` reads."""
    return _compile(STANDALONE_SOURCE, arch, ("FP8LAB_WO_XALU", "FP8LAB_WO_FORMAT=0", "FP8LAB_WO_BF16=1",
                                              "FP8LAB_WO_NT=1"))


def pattern_cubin(arch: str = "sm_90") -> Path:
    """gemv_pattern_ext.cu (every pattern kernel, no torch) for ``arch``: what the SASS test compares
    with the GEMV's loads."""
    from ..toolchain.cubin import compile_cubin

    b = compile_cubin(PATTERN_EXT_SOURCES[1], arch, include=[KERNEL_DIR],
                      key_files=(*SOURCES, PATTERN_HEADER, PATTERN_PARAMS_HEADER, PATTERN_EXT_SOURCES[1]))
    if not b.ok:
        raise RuntimeError(f"nvcc failed ({' '.join(b.cmd)}):\n{b.log[-3000:]}")
    return b.cubin


def unit_scales(fmt: str, act: str, N: int, K: int) -> tuple[np.ndarray, float, float]:
    """(scales, global_scale, act_value) under which a one-hot activation row of value
    ``act_value`` makes the kernel output the code's value exactly.

    bf16 e4m3 weights sit in the registers as w x 2^-120 (bf16 subnormals for the smallest
    codes); an activation of 2^64 keeps every product and fp32 partial sum a normal number,
    and the scale 2^-64 (2^56 once the 2^120 is folded in) undoes it exactly."""
    check_fmt(fmt)
    _check_act(act)
    if fmt == "nvfp4":
        return np.full((N, K // 16), 0x38, dtype=np.uint8), 1.0, 1.0   # e4m3 0x38 = 1.0
    a = 2.0 ** 64 if (fmt == "fp8" and act == "bf16") else 1.0
    return np.full((N, K // 128), 1.0 / a), 1.0, a


def all_codes(fmt: str, N: int, K: int, seed: int = 0) -> np.ndarray:
    """(N, K) codes in which every code of the format appears, shuffled over positions."""
    check_fmt(fmt)
    n_codes = 1 << BITS[fmt]
    if N * K < n_codes:
        raise ValueError(f"N x K = {N * K} cannot hold all {n_codes} codes")
    rng = np.random.default_rng(seed)
    return rng.permutation(np.resize(np.arange(n_codes), N * K)).reshape(N, K).astype(np.uint8)


def onehot(M: int, K: int, cols, value: float) -> np.ndarray:
    """(M, K) activations with act[m, cols[m]] = value and zeros elsewhere."""
    cols = np.asarray(cols)
    if cols.shape != (M,) or cols.min() < 0 or cols.max() >= K:
        raise ValueError(f"cols must be M = {M} column indices in [0, {K})")
    a = np.zeros((M, K))
    a[np.arange(M), cols] = value
    return a


# ---------------------------------------------------------------------------------------------
# Benchmark-size weights
# ---------------------------------------------------------------------------------------------
def random_weight(fmt: str, N: int, K: int, *, act: str = "bf16", seed: int = 0,
                  keep_codes: bool = True) -> tuple[PackedWeight, dict]:
    """A benchmark-size weight: uniformly random packed words (so uniformly random codes,
    e4m3's two NaN codes too: the trick decodes them to +-480) with realistic scales (one per
    group, 2^U(-10, -6) rounded to ``act``; NVFP4 block scales e4m3 in [2^-3, 2^5], global
    2^-8). ``generate`` quantises a real weight but needs ~50 bytes per element and seconds
    per 10^7 elements; this draws the words directly.

    Returns (PackedWeight on the host, dict(codes (N, K) uint8 or None, scales, global_scale))."""
    check_fmt(fmt)
    _check_act(act)
    N, K = _pos_int("N", N), _pos_int("K", K)
    if K % STEP_K:
        raise ValueError(f"K must be a multiple of {STEP_K}, got {K}")
    rng = np.random.default_rng(seed)
    rows = padded_rows(fmt, N)
    # uniformly random words are uniformly random codes in every position
    w = rng.integers(0, 1 << 32, size=rows * K * BITS[fmt] // 32, dtype=np.uint32)
    if fmt == "nvfp4":
        lo, hi = 0x20, 0x60          # e4m3 2^-3 .. 2^5
        scales = rng.integers(lo, hi, size=(N, K // 16), dtype=np.uint8)
        gs = 2.0 ** -8
    else:
        scales = np.exp2(rng.uniform(-10, -6, size=(N, K // 128))).astype(_NP_DTYPE[act]).astype(np.float64)
        gs = 1.0
    s_words, out_factor = pack_scales(fmt, scales, N, K, act=act, global_scale=gs)
    pw = PackedWeight(fmt, act, N, K, w, s_words, out_factor)
    codes = unpack_codes(fmt, w, rows, K)[:N] if keep_codes else None
    return pw, {"codes": codes, "scales": scales, "global_scale": gs}


def trick_values(fmt: str) -> np.ndarray:
    """Value of every code as the kernel decodes it (the emulator's trick value: e4m3's NaN
    codes become +-480), float64, indexed by code."""
    check_fmt(fmt)
    codes = np.arange(1 << BITS[fmt])
    r = dequant.dequant(CODE_FORMAT[fmt], "fp16", dequant.pack(CODE_FORMAT[fmt], codes))
    return r.values()


def dequantize_torch(fmt: str, codes, scales, global_scale: float = 1.0, dtype=None):
    """(N, K) weight on the GPU from logical codes (torch uint8 or numpy) and logical scales,
    through :func:`trick_values` (the kernel's decode; float64 by default), for checking a
    benchmark-size run against float64 without a host round trip."""
    import torch

    dtype = dtype or torch.float64
    dev = codes.device if isinstance(codes, torch.Tensor) else torch.device("cuda")
    c = codes if isinstance(codes, torch.Tensor) else torch.from_numpy(np.asarray(codes, np.uint8)).to(dev)
    lut = torch.from_numpy(trick_values(fmt)).to(dev, dtype)
    W = lut[c.long()]
    if fmt == "nvfp4":
        sv = torch.from_numpy(trick_values("fp8")[np.asarray(scales, np.uint8)]).to(dev, dtype)
        W *= sv.repeat_interleave(16, dim=1) * float(np.float32(global_scale))
    else:
        W *= torch.from_numpy(np.asarray(scales, np.float64)).to(dev, dtype).repeat_interleave(128, dim=1)
    return W
