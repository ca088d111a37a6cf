"""Library baselines every GEMM notebook measures against, and the reference quantisers.

- ``cublas_bf16``: ``torch.mm`` on bf16 (cuBLAS).
- ``cublaslt_blockwise``: ``torch.nn.functional.scaled_mm`` with 1x128 activation and
  128x128 weight scales (cuBLASLt >= 12.9, Hopper).
- ``quant_act_reference`` / ``quant_weight_reference``: the quantisers whose output the
  CUDA quantisers must match bit for bit.

cuBLASLt's blockwise rules, as measured on the H200 (torch 2.11.0+cu130, cuBLASLt 13.1;
``.devrun`` probe, 2026-11-29): M must be a multiple of 4 (M = 1, 2, 7, 83 are refused:
CUBLAS_STATUS_NOT_SUPPORTED, and M = 1 first fails a stride check), N a multiple of 16;
scale_a is (M, K/128) M-major (strides (1, M)); scale_b is the (N/128, K/128) row-major
weight scale seen transposed, and when K/128 is not a multiple of 4 its K/128 dimension
must be zero-padded up to one (scale_a is not padded). A wrong layout runs and returns
wrong numbers (rel. error ~0.35), so every wrapper here is checked against float64.
``cublaslt_blockwise`` pads M up to a multiple of 4 itself (zero rows, sliced off) and
reports it: the padded rows cost a little bandwidth that the arm's row in a table carries.
"""

from __future__ import annotations

from ..emulate import blockscale

FP8_MAX = 448.0          # largest finite e4m3fn
GROUP = 128              # K elements per activation scale; weight blocks are GROUP x GROUP


def _torch():
    import torch
    return torch


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def quant_act_reference(x):
    """1x128 per-token quantisation: x (M, K) bf16 -> (q (M, K) e4m3fn, s (M, K/128) fp32).

    s = amax(|x| over the group, in fp32) / 448, q = round_to_nearest_even(x / s) as e4m3.
    A group of zeros gets s = 1 (q = 0), so no division by zero. Kernels that match this bit
    for bit must round as torch does: on CUDA, ``amax / 448.0`` (a tensor by a Python
    number) is computed as ``amax * fp32(1/448)``, while ``x / s`` (tensor by tensor) is a
    true IEEE division.
    """
    return _quant_act(x, true_division=False)


def quant_act_true_division(x):
    """:func:`quant_act_reference` with ``s = amax / 448`` by IEEE division (tensor by tensor, on any
    device) instead of torch-on-CUDA's ``amax * fp32(1/448)``: the other rule a quantiser may
    follow (what torch does on a CPU), for telling a peer's rounding from a wrong answer."""
    return _quant_act(x, true_division=True)


def _quant_act(x, true_division: bool):
    torch = _torch()
    _need(isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16,
          f"x must be a bfloat16 tensor, got {getattr(x, 'dtype', type(x))}")
    _need(x.dim() == 2, f"x must be 2-D (M, K), got shape {tuple(x.shape)}")
    M, K = x.shape
    _need(K % GROUP == 0, f"K must be a multiple of {GROUP}, got K={K}")
    g = x.float().view(M, K // GROUP, GROUP)
    amax = g.abs().amax(dim=-1)                                   # (M, K/128) fp32
    # a tensor by a Python number is what torch-on-CUDA turns into a multiply by fp32(1/448)
    s448 = amax / torch.full_like(amax, FP8_MAX) if true_division else amax / FP8_MAX
    s = torch.where(amax > 0, s448, torch.ones_like(amax))
    q = (g / s[..., None]).to(torch.float8_e4m3fn).view(M, K)
    return q, s


def quant_weight_reference(w):
    """128x128 block quantisation: w (N, K) -> (q (N, K) e4m3fn, s (ceil(N/128), K/128) fp32)."""
    torch = _torch()
    _need(isinstance(w, torch.Tensor) and w.dtype in (torch.bfloat16, torch.float16, torch.float32),
          f"w must be a bf16/fp16/fp32 tensor, got {getattr(w, 'dtype', type(w))}")
    _need(w.dim() == 2, f"w must be 2-D (N, K), got shape {tuple(w.shape)}")
    N, K = w.shape
    _need(K % GROUP == 0, f"K must be a multiple of {GROUP}, got K={K}")
    nb = -(-N // GROUP)
    wp = torch.nn.functional.pad(w.float(), (0, 0, 0, nb * GROUP - N))
    blocks = wp.view(nb, GROUP, K // GROUP, GROUP)
    amax = blocks.abs().amax(dim=(1, 3))                          # (N/128, K/128)
    s = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (blocks / s[:, None, :, None]).view(nb * GROUP, K)[:N].to(torch.float8_e4m3fn)
    return q.contiguous(), s


def dequantize_weight(q, s, dtype=None):
    """(N, K) e4m3 with (N/128, K/128) scales -> (N, K) in ``dtype`` (bf16 by default)."""
    torch = _torch()
    dtype = dtype or torch.bfloat16
    N, K = q.shape
    return (q.float() * blockscale.expand(s, N, K, (GROUP, GROUP))).to(dtype)


def cublas_bf16(a, w, out=None):
    """a (M, K) bf16 @ w (N, K) bf16 ^T -> (M, N) bf16 via cuBLAS."""
    torch = _torch()
    _need(a.dtype == torch.bfloat16 and w.dtype == torch.bfloat16,
          f"a and w must be bfloat16, got {a.dtype} and {w.dtype}")
    _need(a.dim() == 2 and w.dim() == 2 and a.shape[1] == w.shape[1],
          f"need a (M, K) and w (N, K) with the same K, got {tuple(a.shape)} and {tuple(w.shape)}")
    return torch.mm(a, w.t(), out=out)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


class BlockwiseOperands:
    """Operands laid out once the way cuBLASLt wants them, so timing excludes the layout
    work (which a real engine would also do once, at load time, for the weights)."""

    def __init__(self, a, a_scale, b, b_scale):
        torch = _torch()
        _need(a.dtype == torch.float8_e4m3fn and b.dtype == torch.float8_e4m3fn,
              f"a and b must be float8_e4m3fn, got {a.dtype} and {b.dtype}")
        _need(a.dim() == 2 and b.dim() == 2, "a must be (M, K) and b (N, K)")
        M, K = a.shape
        N, Kb = b.shape
        _need(K == Kb, f"a and b disagree on K: {K} vs {Kb}")
        _need(K % GROUP == 0, f"K must be a multiple of {GROUP}, got K={K}")
        _need(N % 16 == 0, f"cuBLASLt blockwise needs N a multiple of 16, got N={N}")
        kb = K // GROUP
        _need(tuple(a_scale.shape) == (M, kb), f"a_scale must be (M, K/128) = {(M, kb)}, got {tuple(a_scale.shape)}")
        _need(tuple(b_scale.shape) == (-(-N // GROUP), kb),
              f"b_scale must be (ceil(N/128), K/128) = {(-(-N // GROUP), kb)}, got {tuple(b_scale.shape)}")
        _need(a_scale.dtype == torch.float32 and b_scale.dtype == torch.float32, "scales must be float32")
        self.M, self.N, self.K = M, N, K
        self.Mp = _round_up(M, 4)
        if self.Mp != M:        # cuBLASLt refuses M % 4 != 0: zero rows, sliced off after
            a = torch.nn.functional.pad(a.view(torch.uint8), (0, 0, 0, self.Mp - M)).view(torch.float8_e4m3fn)
            a_scale = torch.nn.functional.pad(a_scale, (0, 0, 0, self.Mp - M), value=1.0)
        self.a = a.contiguous()
        self.a_scale = a_scale.t().contiguous().t()                 # (Mp, K/128), strides (1, Mp)
        kb4 = _round_up(kb, 4)
        sb = torch.nn.functional.pad(b_scale, (0, kb4 - kb)) if kb4 != kb else b_scale
        self.b = b.contiguous()
        self.b_scale = sb.contiguous().t()                          # (kb4, N/128), strides (1, kb4)
        self.padded_rows = self.Mp - M

    def __call__(self):
        torch = _torch()
        F = torch.nn.functional
        c = F.scaled_mm(self.a, self.b.t(), self.a_scale, F.ScalingType.BlockWise1x128,
                        self.b_scale, F.ScalingType.BlockWise128x128,
                        output_dtype=torch.bfloat16)
        return c[: self.M] if self.padded_rows else c


def cublaslt_blockwise(a, a_scale, b, b_scale):
    """a (M, K) e4m3, a_scale (M, K/128) fp32, b (N, K) e4m3, b_scale (ceil(N/128), K/128)
    fp32 -> (M, N) bf16, through cuBLASLt's blockwise-scaled FP8 GEMM."""
    return BlockwiseOperands(a, a_scale, b, b_scale)()
