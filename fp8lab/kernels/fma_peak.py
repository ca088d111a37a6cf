"""FP32 FMA rate: a Triton kernel that does nothing but fused multiply-adds.

The FP32 ceiling in notebook 00 is our own measurement, not a library's: every
program holds ROWS x BLOCK independent chains ``x <- fma(x, b, c)`` (32 per thread
with the defaults), runs ``n_iters x UNROLL`` steps of each, and stores the ends.

Why it reaches the FMA pipe's peak:
* independent chains per thread (32) hide FFMA latency (~4 cycles) with room to
  spare, and 8 warps per program give every scheduler several warps;
* the trip count is a run-time argument, so the compiler cannot fold the loop, and
  each chain's value depends on the previous step, so nothing can be hoisted;
* b and c are kernel scalars, so an FFMA reads one register, one constant and one
  uniform/register operand: no loads in the loop;
* the grid is many programs per SM (48, divisible by every plausible occupancy), so
  the last partial wave costs little.

FLOP count (the one source of truth for the rate): 2 x chains x n_iters x UNROLL.

The values stay bounded: with b < 1 the recurrence contracts toward c / (1 - b),
so there is no overflow or denormal slow path, and the closed form
x_n = f + (x_0 - f) b^n with f = c / (1 - b) checks every output (``reference``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

try:
    import triton
    import triton.language as tl
except ImportError:  # the module must import on a machine without triton
    triton = None
    tl = None

__all__ = ["FmaConfig", "default_config", "small_config", "flop", "make_buffers", "launch",
           "reference", "check", "fma_peak_kernel"]

if triton is not None:
    # fp8lab:excerpt fma_peak_kernel
    @triton.jit
    def fma_peak_kernel(x_ptr,    # (n_programs * ROWS * BLOCK,) fp32: chain start values
                        out_ptr,  # (n_programs * ROWS * BLOCK,) fp32: chain end values
                        n_iters,  # int32 scalar: run-time trip count (the loop cannot be folded)
                        b,        # fp32 scalar multiplier, 0 < b < 1 keeps the chains bounded
                        c,        # fp32 scalar addend
                        ROWS: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
        pid = tl.program_id(0)
        offs = (pid * ROWS * BLOCK + tl.arange(0, ROWS)[:, None] * BLOCK
                + tl.arange(0, BLOCK)[None, :])
        acc = tl.load(x_ptr + offs)
        for _ in range(n_iters):
            for _u in tl.static_range(UNROLL):
                acc = tl.fma(acc, b, c)
        tl.store(out_ptr + offs, acc)
    # fp8lab:excerpt-end fma_peak_kernel
else:  # pragma: no cover
    fma_peak_kernel = None


@dataclass(frozen=True)
class FmaConfig:
    n_programs: int
    n_iters: int = 256
    rows: int = 8
    block: int = 1024
    unroll: int = 8
    num_warps: int = 8
    b: float = 0.5 ** (1.0 / 2048)   # b^(n_iters*unroll) = 0.5 at the default trip count
    c: float = 1e-3

    def __post_init__(self):
        for name in ("n_programs", "n_iters", "rows", "block", "unroll", "num_warps"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        for name in ("rows", "block"):
            v = getattr(self, name)
            if v & (v - 1):
                raise ValueError(f"{name} must be a power of two (a Triton block dim), got {v}")
        if not (0 < self.b < 1):
            raise ValueError(f"b must be in (0, 1) so the chains contract, got {self.b}")
        if self.n_programs * self.rows * self.block >= 2**31:
            raise ValueError("n_programs x rows x block must fit in int32 offsets")

    @property
    def chains(self) -> int:
        return self.n_programs * self.rows * self.block

    @property
    def steps(self) -> int:
        return self.n_iters * self.unroll

    @property
    def chains_per_thread(self) -> int:
        return self.rows * self.block // (32 * self.num_warps)


def default_config(sms: int, programs_per_sm: int = 48, n_iters: int = 256) -> FmaConfig:
    """A grid that fills ``sms`` SMs many times over (~2 ms on an H100-class card)."""
    if sms <= 0:
        raise ValueError(f"sms must be > 0, got {sms}")
    return FmaConfig(n_programs=sms * programs_per_sm, n_iters=n_iters)


def small_config() -> FmaConfig:
    """A short run for correctness checks and the ncu fixture."""
    return FmaConfig(n_programs=264, n_iters=8, b=0.5 ** (1.0 / 64))


def flop(cfg: FmaConfig) -> float:
    """FLOP executed: 2 per FMA, chains x steps FMAs."""
    return 2.0 * cfg.chains * cfg.steps


def reference(x0: np.ndarray, cfg: FmaConfig) -> np.ndarray:
    """Closed form of ``steps`` applications of x <- x*b + c, in float64 with the
    fp32-rounded b and c the kernel sees."""
    b = float(np.float32(cfg.b))
    c = float(np.float32(cfg.c))
    f = c / (1.0 - b)
    return f + (np.asarray(x0, dtype=np.float64) - f) * b ** cfg.steps


def make_buffers(cfg: FmaConfig, seed: int = 0):
    """(x0, out): random starts in [0, 2) drawn on the host (no generator kernel on the
    device, so a kernel-name filter in ncu sees only ours); out poisoned with NaN."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x0 = (torch.rand(cfg.chains, generator=g, dtype=torch.float32) * 2.0).to("cuda")
    out = torch.full((cfg.chains,), float("nan"), dtype=torch.float32).to("cuda")
    return x0, out


def launch(x0, out, cfg: FmaConfig):
    """One launch. ``x0``, ``out``: (cfg.chains,) contiguous fp32 CUDA tensors."""
    import torch

    for name, t in (("x0", x0), ("out", out)):
        if t.dtype != torch.float32 or not t.is_cuda or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous fp32 CUDA tensor")
        if t.numel() != cfg.chains:
            raise ValueError(f"{name} must have cfg.chains = {cfg.chains} elements, got {t.numel()}")
    fma_peak_kernel[(cfg.n_programs,)](x0, out, cfg.n_iters, cfg.b, cfg.c, ROWS=cfg.rows,
                                       BLOCK=cfg.block, UNROLL=cfg.unroll,
                                       num_warps=cfg.num_warps)
    return out


def check(cfg: FmaConfig, atol: float = 2e-4) -> float:
    """Run ``cfg`` once on fresh random starts and compare every output with the
    closed form; returns the max abs error, raises AssertionError past ``atol``."""
    import torch

    x0, out = make_buffers(cfg, seed=1234)
    launch(x0, out, cfg)
    torch.cuda.synchronize()
    got = out.cpu().numpy().astype(np.float64)
    assert np.all(np.isfinite(got)), "FMA kernel left unwritten (NaN) outputs"
    want = reference(x0.cpu().numpy(), cfg)
    err = float(np.max(np.abs(got - want)))
    assert err <= atol, f"FMA kernel max abs error {err:.3g} > {atol:.1g} against the closed form"
    return err
