"""FLOPs and bytes of one call of an arm: the one source of every rate fp8lab reports.

Each rule below counts one kind of kernel; the arm registry (``registry.count(id, ...)``) says
which rule each arm id takes, so a table's TFLOP/s or GB/s and a figure's roof come from the
same arithmetic. Every rule returns a :class:`Count`:

- ``flops``: 2 M N K for a GEMM, 0 for a kernel that only moves data (a quantiser, a dequant pass).
- ``bytes``: the fewest DRAM bytes one call must move: every operand, scale and output once.
- ``weight_bytes``: the weight stream alone (codes + scales), what a decode bandwidth counts;
  0 where there is no weight.
- ``parts``: the terms ``bytes`` adds up, by name (``codes``, ``scales``, ``act``,
  ``act_scales``, ``out``, ``in``).

Scale granularities are the formats' (128 x 128 weight blocks and 1 x 128 activation groups of
fp32 for blockwise FP8; the weight-only formats' groups from ``kernels.weight_only``; a peer's
from ``arms.peer_catalog``). Shapes are checked here: a count of a shape the kernel cannot take
raises ValueError with one line.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

__all__ = ["Count", "RULES", "w8a8_blockwise", "w8a8_tensorwise", "w16a16", "w8a16_blockwise",
           "dequant_w8", "weight_only", "quant_act", "peer"]

BLOCK = 128   # blockwise FP8: weight blocks are BLOCK x BLOCK, activation groups 1 x BLOCK (fp32 scales)


@dataclass(frozen=True)
class Count:
    flops: int
    bytes: int
    weight_bytes: int
    parts: dict = field(default_factory=dict)


def _pos(name: str, v) -> int:
    """A positive integer from an int, a numpy integer or an integral float (a table's cell)."""
    try:
        i = operator.index(v) if not isinstance(v, float) or v.is_integer() else None
    except TypeError:
        i = float(v) if hasattr(v, "is_integer") and float(v).is_integer() else None
    if isinstance(v, bool) or i is None or int(i) < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(i)


def _mnk(M, N, K, k_multiple: int = 1):
    M, N, K = _pos("M", M), _pos("N", N), _pos("K", K)
    if K % k_multiple:
        raise ValueError(f"K must be a multiple of {k_multiple}, got K={K}")
    return M, N, K


def _count(flops: int, weight: tuple, **parts) -> Count:
    """``weight``: the names in ``parts`` that make up the weight stream."""
    return Count(flops, sum(parts.values()), sum(parts[p] for p in weight), parts)


def w8a8_blockwise(M, N, K) -> Count:
    """W8A8 with DeepSeek-V3 scales: e4m3 A and W, fp32 scales per 1x128 activation group and per
    128x128 weight block, bf16 C."""
    M, N, K = _mnk(M, N, K, BLOCK)
    kb, nb = K // BLOCK, math.ceil(N / BLOCK)
    return _count(2 * M * N * K, ("codes", "scales"), act=M * K, act_scales=4 * M * kb, codes=N * K,
                  scales=4 * nb * kb, out=2 * M * N)


def w8a8_tensorwise(M, N, K) -> Count:
    """W8A8 with one fp32 scale per tensor (cuBLAS FP8's own path), bf16 C."""
    M, N, K = _mnk(M, N, K)
    return _count(2 * M * N * K, ("codes", "scales"), act=M * K, act_scales=4, codes=N * K, scales=4,
                  out=2 * M * N)


def w16a16(M, N, K) -> Count:
    """bf16 A, W and C."""
    M, N, K = _mnk(M, N, K)
    return _count(2 * M * N * K, ("codes",), act=2 * M * K, codes=2 * N * K, out=2 * M * N)


def w8a16_blockwise(M, N, K, out_bytes: int = 2) -> Count:
    """Seed 001's W8A16: bf16 A, e4m3 W with fp32 128x128 block scales, C of ``out_bytes`` per
    element (2: bf16, 4: fp32)."""
    M, N, K = _mnk(M, N, K, BLOCK)
    if out_bytes not in (2, 4):
        raise ValueError(f"out_bytes must be 2 (bf16) or 4 (fp32), got {out_bytes!r}")
    return _count(2 * M * N * K, ("codes", "scales"), act=2 * M * K, codes=N * K,
                  scales=4 * math.ceil(N / BLOCK) * (K // BLOCK), out=out_bytes * M * N)


def dequant_w8(N, K, M=None) -> Count:
    """One dequantisation pass: e4m3 codes and fp32 128x128 scales in, bf16 weights out (M,
    where given, plays no part)."""
    _, N, K = _mnk(1, N, K, BLOCK)
    return _count(0, ("codes", "scales"), codes=N * K, scales=4 * math.ceil(N / BLOCK) * (K // BLOCK),
                  out=2 * N * K)


def weight_only(fmt: str, M, N, K, act_bytes: int = 2) -> Count:
    """A weight-only GEMM / GEMV in one of ``kernels.weight_only.FORMATS``: the packed codes and
    their group scales (NVFP4: plus its one fp32 global scale), 16-bit activations and output."""
    from ..kernels import weight_only as wo

    wo.check_fmt(fmt)
    M, N, K = _mnk(M, N, K, wo.STEP_K)
    codes = N * K * wo.BITS[fmt] // 8
    scales = N * (K // wo.GROUP[fmt]) * wo.SCALE_BYTES[fmt] + (4 if fmt == "nvfp4" else 0)
    return _count(2 * M * N * K, ("codes", "scales"), act=act_bytes * M * K, codes=codes, scales=scales,
                  out=act_bytes * M * N)


def quant_act(M, K, N=None) -> Count:
    """A 1x128 activation quantiser: bf16 in, e4m3 out, one fp32 scale per group (N, where
    given, plays no part)."""
    M, K = _pos("M", M), _pos("K", K)
    if K % BLOCK:
        raise ValueError(f"K must be a multiple of {BLOCK}, got K={K}")
    return _count(0, (), **{"in": 2 * M * K}, out=M * K, act_scales=4 * M * (K // BLOCK))


def peer(peer_id: str, M, N, K) -> Count:
    """Another library's GEMM: its weight stream from its own format (``arms.peer_catalog``),
    activations as its scheme reads them (W8A8: e4m3 with 1x128 fp32 scales; else 16-bit) and a
    16-bit output."""
    from . import peer_catalog

    M, N, K = _mnk(M, N, K)
    p = peer_catalog.get(peer_id)
    stream = peer_catalog.weight_stream_bytes(peer_id, N, K)
    codes = N * K // 2 if p.fmt in ("int4", "nvfp4", "fp4") else N * K
    act = dict(act=M * K, act_scales=4 * M * math.ceil(K / BLOCK)) if p.fmt == "fp8_blockwise" \
        else dict(act=2 * M * K)
    return _count(2 * M * N * K, ("codes", "scales"), **act, codes=codes, scales=stream - codes, out=2 * M * N)


#: the rules by name (what a registry row's ``count`` names)
RULES = {f.__name__: f for f in (w8a8_blockwise, w8a8_tensorwise, w16a16, w8a16_blockwise, dequant_w8,
                                 weight_only, quant_act, peer)}
