"""The mma.sync (HMMA) BF16 ceiling: what a wmma / mma.sync kernel can reach on this device.

Seed 001's ``wmma_w8a16`` uses nvcuda::wmma, i.e. warp-level ``mma.sync`` (SASS HMMA.16816). On
Hopper the datasheet BF16 rate needs ``wgmma``; mma.sync reaches only part of it. Claim B3 compares
the WMMA kernel with "the BF16 tensor rate"; this kernel measures the rate its instruction can reach
at all (register-resident fragments, 4 independent accumulators per warp, no memory traffic), so the
notebook can say how much of a miss is the kernel and how much the instruction.

The kernel (``hmma_peak.cu``) multiplies small-integer A and B fragments, so every result is exact
in fp32 and :func:`check` compares bit for bit with ``n_iters * (A @ B)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._build import KERNEL_DIR, extension

EXT_SOURCES = [KERNEL_DIR / "hmma_peak.cu", KERNEL_DIR / "hmma_peak_ext.cpp"]
WARPS, CHAINS = 8, 4          # must match kWarps / kChains in hmma_peak.cu
TILE_FLOP = 2 * 16 * 16 * 16  # one wmma 16x16x16 multiply-add
MAX_ITERS = 2**24 // (16 * 4)  # |A @ B| <= 16 * 2 * 2: keep n_iters * that below 2^24 (exact fp32)



@dataclass(frozen=True)
class HmmaConfig:
    blocks: int       # grid size (blocks of WARPS warps)
    n_iters: int      # mma_sync per accumulator

    def __post_init__(self):
        for name in ("blocks", "n_iters"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.n_iters > MAX_ITERS:
            raise ValueError(f"n_iters must be <= {MAX_ITERS} (fp32 exactness of the check), got {self.n_iters}")

    @property
    def tiles(self) -> int:
        return self.blocks * WARPS * CHAINS


def default_config(sms: int, blocks_per_sm: int = 4, n_iters: int = 4096) -> HmmaConfig:
    """4 blocks x 8 warps per SM (8 warps per scheduler), 4 chains each: HMMA latency covered."""
    return HmmaConfig(blocks=int(sms) * blocks_per_sm, n_iters=n_iters)


def flop(cfg: HmmaConfig) -> float:
    return float(cfg.tiles) * cfg.n_iters * TILE_FLOP


def operands(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A (16, 16) and B (16, 16) with entries in {-2, ..., 2}: exact in bf16, exact sums in fp32."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-2, 3, (16, 16)).astype(np.float32), rng.integers(-2, 3, (16, 16)).astype(np.float32))


def reference(a: np.ndarray, b: np.ndarray, n_iters: int) -> np.ndarray:
    """Every output tile: n_iters * (A @ B), in float64 (exact for these operands)."""
    return n_iters * (a.astype(np.float64) @ b.astype(np.float64))


def load_extension(verbose: bool = False):
    return extension("hmma_peak", EXT_SOURCES, cuda_cflags=["-O3"], verbose=verbose)


def make_buffers(cfg: HmmaConfig, seed: int = 0):
    """(a, b_colmajor, out) on the GPU; out poisoned with NaN."""
    import torch

    a, b = operands(seed)
    ta = torch.tensor(a, dtype=torch.bfloat16, device="cuda").contiguous()      # (16, 16) row-major
    tb = torch.tensor(b.T.copy(), dtype=torch.bfloat16, device="cuda").contiguous()  # B column-major
    out = torch.full((cfg.tiles, 16, 16), float("nan"), dtype=torch.float32, device="cuda")
    return ta, tb, out


def launch(a, b, out, cfg: HmmaConfig) -> None:
    load_extension().launch(a, b, out, cfg.blocks, cfg.n_iters)


def check(cfg: HmmaConfig, seed: int = 0) -> int:
    """Run once and compare every tile bit for bit; returns the number of tiles checked."""
    import torch

    a, b, out = make_buffers(cfg, seed)
    launch(a, b, out, cfg)
    torch.cuda.synchronize()
    ref = torch.tensor(reference(*operands(seed), cfg.n_iters), dtype=torch.float32, device="cuda")
    bad = int((out != ref).flatten(1).any(1).sum())
    if bad:
        raise AssertionError(f"hmma_peak: {bad} of {cfg.tiles} tiles differ from n_iters * (A @ B)")
    return cfg.tiles
