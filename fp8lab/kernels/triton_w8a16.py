"""``triton_w8a16``: a Triton weight-only FP8 GEMM for prefill, dequantising in the K loop.

    out[m, n] = sum_k x[m, k] * e4m3(q[n, k]) * s[n, k // 128]

x (M, K) bf16 row-major; q (N, K) e4m3 codes as uint8, row-major (K contiguous); s (N, K/128)
group scales, the same scales as ``gemv_w8a16_fp8`` (bf16, exponent-bias factor 2^120 folded
in: pass :func:`fold_scales`). out (M, N) bf16.

Each 128-wide K step converts the (BLOCK_N, 128) code tile with Marlin's and/shift/or trick
(e4m3 bits moved into bf16's fields, giving w x 2^-120), multiplies it by its row's folded
scale in bf16 (w x s rounded once to bf16, as Marlin does with group scales), and feeds
``tl.dot`` with bf16 operands, which is wgmma (HGMMA) on Hopper for BLOCK_M >= 64 and
mma.sync (HMMA) below: no FP8 tensor instruction and no FP8 conversion instruction anywhere,
the weight-only kernel of claim C1. The decode kernel (``gemv_w16``) is tuned for M <= 64;
this one is for prefill, where the GEMM is compute-bound and the tensor-core rate decides.

:func:`triton_w8a16_resource_usage` compiles it for sm_90 with no GPU (for the SASS census).

``path="swapab"`` (decode, M <= SWAPAB_MAX_M; issue 22's small-M weight-only route) computes
out^T = W x^T instead: the weight rows fill the MMA's 64 / 128-row side and the few tokens are
its N (16 / 32 / 64), so a 16-token step does not waste 3/4 of every wgmma on padding rows, and
SPLIT_K programs share each output tile along K, so the weight stream is spread over every SM
even when N / BLOCK_W tiles are fewer than the SMs. The last program of a tile to finish (an
atomic counter, re-armed by that program) sums the fp32 partials and writes the tile: one
launch, no memset (the split-K scheme of ``triton_blockwise``'s swapab path, whose workspace it
shares). The dequantisation is this module's: Marlin's bit trick, w x s rounded to bf16.
Measured on the H200 (afbd834, scripts/probes/w8a16_swapab.py), it is not issue 22's route: its best
config streams 0.39-0.52 of a same-size copy at M <= 16, where gemv_w8a16_fp8 streams 0.54-0.96,
because its dequant is ~7 integer instructions per weight; it stays opt-in.
"""

from __future__ import annotations

import functools

import numpy as np
import triton
import triton.language as tl

from .triton_blockwise import swapab_epilogue

GROUP = 128
FOLD = 2.0 ** 120          # e4m3 -> bf16 by shifting leaves w x 2^-120


@triton.jit
def _w8a16_swapab_kernel(
    x_ptr,   # (M, K) bfloat16, row-major: activations (the few tokens)
    q_ptr,   # (N, K) uint8, row-major: e4m3 weight codes (the big stream)
    s_ptr,   # (N, K/128) bfloat16, row-major: group scales x 2^120
    c_ptr,   # (M, N) bfloat16, row stride stride_cm: output, written transposed from the (W, T) tile
    ws_ptr,  # (SPLIT_K, M, N) float32 contiguous: split-K partials (unused when SPLIT_K == 1)
    cnt_ptr,  # (>= grid(0) * grid(1),) int32, all zero between launches: finished splits per tile
    M, N, K,  # int32
    stride_xm, stride_qn, stride_sn, stride_cm,  # int32 row strides (elements)
    BLOCK_W: tl.constexpr,  # weight rows (output columns) per program: the MMA's M (64 or 128)
    BLOCK_T: tl.constexpr,  # tokens per program: the MMA's N (16, 32 or 64)
    SPLIT_K: tl.constexpr,  # programs sharing one output tile along K
    # The dequantisation: "trick" (Marlin's and / shift / or into bf16's fields, as the tiles path) or "cvt"
    # (Triton's e4m3 -> bf16 conversion, hardware cvt instructions; times the scale unfolded from s's 2^120:
    # the same bf16 product, rounded once). Which streams faster is what scripts/probes/w8a16_swapab.py times.
    DEQ: tl.constexpr = "trick",
    # For Triton's interpreter only, whose bf16 multiply and bf16 tl.dot give wrong values (triton 3.9):
    # w x s in fp32 rounded to bf16 (the bf16 multiply's value: a product of two bf16 is exact in fp32,
    # so both round it once) and the dot of those bf16 values in fp32. Compiled kernels keep the
    # default: a bf16x2 multiply and a bf16 MMA.
    INTERP_F32: tl.constexpr = False,
):
    pid_w = tl.program_id(0)
    pid_t = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_w = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_k = tl.arange(0, 128)
    mask_w = offs_w < N
    mask_t = offs_t < M
    rows_w = tl.where(mask_w, offs_w, 0)       # clamped loads, masked stores
    rows_t = tl.where(mask_t, offs_t, 0)
    q_ptrs = q_ptr + rows_w[:, None] * stride_qn + offs_k[None, :]     # (BLOCK_W, 128)
    x_ptrs = x_ptr + rows_t[None, :] * stride_xm + offs_k[:, None]     # (128, BLOCK_T): x^T
    s_ptrs = s_ptr + rows_w * stride_sn                                 # (BLOCK_W,)

    # fp8lab:excerpt w8a16_swapab_main_loop
    n_kb = K // 128
    kb_per = tl.cdiv(n_kb, SPLIT_K)
    kb0 = pid_k * kb_per
    kb1 = tl.minimum(kb0 + kb_per, n_kb)
    acc = tl.zeros((BLOCK_W, BLOCK_T), dtype=tl.float32)
    for kb in range(kb0, kb1):
        s = tl.load(s_ptrs + kb)
        x = tl.load(x_ptrs + kb * 128)
        if INTERP_F32:
            q = tl.load(q_ptrs + kb * 128).to(tl.uint16)
            bits = ((q & 0x80) << 8) | ((q & 0x7F) << 4)
            w = (bits.to(tl.bfloat16, bitcast=True).to(tl.float32) * s.to(tl.float32)[:, None]).to(tl.bfloat16)
            acc = tl.dot(w.to(tl.float32), x.to(tl.float32), acc)
        elif DEQ == "cvt":
            q8 = tl.load(q_ptrs + kb * 128)
            s_true = (s.to(tl.float32) * 7.52316384526264e-37).to(tl.bfloat16)   # s x 2^-120, exact
            w = q8.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16) * s_true[:, None]
            acc = tl.dot(w, x, acc)
        else:
            q = tl.load(q_ptrs + kb * 128).to(tl.uint16)
            bits = ((q & 0x80) << 8) | ((q & 0x7F) << 4)           # e4m3 -> bf16 fields: w x 2^-120
            w = bits.to(tl.bfloat16, bitcast=True) * s[:, None]    # x (s x 2^120): w x s in bf16
            acc = tl.dot(w, x, acc)
    # fp8lab:excerpt-end w8a16_swapab_main_loop
    # out^T's tile stored, or summed over the splits by the last to finish (triton_blockwise's)
    swapab_epilogue(acc, c_ptr, ws_ptr, cnt_ptr, offs_w, offs_t, mask_w, mask_t, M, N, stride_cm, pid_w, pid_t,
                    pid_k, BLOCK_W, BLOCK_T, SPLIT_K)


@triton.jit
def _w8a16_kernel(
    x_ptr,   # (M, K) bfloat16, row-major: activations
    q_ptr,   # (N, K) uint8, row-major: e4m3 weight codes
    s_ptr,   # (N, K/128) bfloat16, row-major: group scales x 2^120
    c_ptr,   # (M, N) bfloat16, row-major: output
    M, N, K,  # int32
    stride_xm, stride_qn, stride_sn, stride_cm,  # int32 row strides (elements)
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr,
):
    # grouped launch order: GROUP_M row tiles share a weight column tile while it is in L2
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % size_m
    pid_n = (pid % in_group) // size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, 128)
    rows_m = tl.where(offs_m < M, offs_m, 0)       # clamped loads, masked store
    rows_n = tl.where(offs_n < N, offs_n, 0)
    x_ptrs = x_ptr + rows_m[:, None] * stride_xm + offs_k[None, :]     # (BLOCK_M, 128)
    q_ptrs = q_ptr + rows_n[:, None] * stride_qn + offs_k[None, :]     # (BLOCK_N, 128)
    s_ptrs = s_ptr + rows_n * stride_sn                                 # (BLOCK_N,)

    # fp8lab:excerpt w8a16_main_loop
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, K // 128):
        x = tl.load(x_ptrs + kb * 128)
        q = tl.load(q_ptrs + kb * 128).to(tl.uint16)
        s = tl.load(s_ptrs + kb)
        # e4m3 -> bf16 bits: sign to bit 15, exponent + mantissa shifted into place (w x 2^-120)
        bits = ((q & 0x80) << 8) | ((q & 0x7F) << 4)
        w = bits.to(tl.bfloat16, bitcast=True) * s[:, None]    # x (s x 2^120): w x s in bf16
        acc = tl.dot(x, tl.trans(w), acc)
    # fp8lab:excerpt-end w8a16_main_loop
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(tl.bfloat16), mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])


# (BLOCK_M, BLOCK_N, num_warps, num_stages): prefill tiles (wgmma wants BLOCK_M >= 64) and two
# small ones so any M runs.
TILES = [(128, 128, 8, 3), (128, 256, 8, 3), (128, 128, 4, 4), (256, 128, 8, 3), (64, 128, 4, 4),
         (64, 256, 8, 3), (16, 128, 4, 4), (32, 64, 4, 4)]


#: the swapab path: tokens at most this (the split-K workspace is SPLIT_K x M x N floats, and past
#: a few tens of tokens the grid of ``tiles`` fills the SMs by itself)
SWAPAB_MAX_M = 64
SWAPAB_SPACE = dict(BLOCK_W=(64, 128), BLOCK_T=(16, 32, 64), SPLIT_K=(1, 2, 4, 8, 16, 32), num_warps=(4,),
                    num_stages=(3, 4), DEQ=("trick", "cvt"))
PATHS = ("tiles", "swapab")


def swapab_configs() -> list[dict]:
    """Every swapab config (BLOCK_W, BLOCK_T, SPLIT_K, num_warps, num_stages)."""
    sp = SWAPAB_SPACE
    return [dict(BLOCK_W=bw, BLOCK_T=bt, SPLIT_K=sk, num_warps=w, num_stages=st, DEQ=dq)
            for bw in sp["BLOCK_W"] for bt in sp["BLOCK_T"] for sk in sp["SPLIT_K"]
            for w in sp["num_warps"] for st in sp["num_stages"] for dq in sp["DEQ"]]


def _check_swapab(c: dict) -> dict:
    """A complete swapab config from ``c`` (missing keys from :func:`swapab_config`'s defaults),
    ValueError for a key or value outside SWAPAB_SPACE."""
    unknown = set(c) - set(SWAPAB_SPACE)
    if unknown:
        raise ValueError(f"swapab config keys are {tuple(SWAPAB_SPACE)}, got {sorted(unknown)}")
    full = dict(BLOCK_W=128, BLOCK_T=16, SPLIT_K=1, num_warps=4, num_stages=4, DEQ="trick") | dict(c)
    for k, allowed in SWAPAB_SPACE.items():
        if full[k] not in allowed or isinstance(full[k], bool):
            raise ValueError(f"swapab {k} must be one of {allowed}, got {full[k]!r}")
    return full


def _split_for(M: int, N: int, K: int, bw: int, bt: int, per_sm: int, sms: int) -> int:
    """The smallest SPLIT_K giving >= per_sm programs per SM while every split keeps >= 2 K
    blocks of 128 (the largest such split when none reaches per_sm)."""
    n_kb = K // GROUP
    splits = [sk for sk in SWAPAB_SPACE["SPLIT_K"] if -(-n_kb // sk) >= 2] or [1]
    tiles = -(-N // bw) * -(-M // bt)
    enough = [sk for sk in splits if tiles * sk >= per_sm * sms]
    return enough[0] if enough else splits[-1]


def swapab_config(M: int, N: int, K: int, *, sms: int = 132) -> dict:
    """The swapab config the wrapper runs when none is given, by rule: BLOCK_T the smallest
    allowed size >= M, 128 weight rows per program, and the split that gives two programs per
    SM (:func:`_split_for`). Untimed: scripts/probes/w8a16_swapab.py times :func:`swapab_candidates`."""
    bt = next(t for t in SWAPAB_SPACE["BLOCK_T"] if t >= min(M, 64))
    return dict(BLOCK_W=128, BLOCK_T=bt, SPLIT_K=_split_for(M, N, K, 128, bt, 2, sms), num_warps=4, num_stages=4,
                DEQ="trick")


def swapab_candidates(M: int, N: int, K: int, *, sms: int = 132) -> list[dict]:
    """A few swapab configs worth timing at (M, N, K): the rule's, 4 programs per SM, 64-row
    tiles, half the rule's split, 3 stages, the rule's with the conversion dequantisation (DEQ
    'cvt') (distinct, the rule's first)."""
    base = swapab_config(M, N, K, sms=sms)
    bt = base["BLOCK_T"]
    want = [base, base | dict(SPLIT_K=_split_for(M, N, K, 128, bt, 4, sms)),
            base | dict(BLOCK_W=64, SPLIT_K=_split_for(M, N, K, 64, bt, 2, sms)),
            base | dict(SPLIT_K=max(1, base["SPLIT_K"] // 2)), base | dict(num_stages=3), base | dict(DEQ="cvt")]
    out = []
    for c in want:
        if c not in out:
            out.append(c)
    return out


def tile_configs() -> list[dict]:
    return [dict(BLOCK_M=bm, BLOCK_N=bn, GROUP_M=8, num_warps=w, num_stages=s) for bm, bn, w, s in TILES]


def _fits(block_m: int, M: int) -> bool:
    """A tile worth trying at M: BLOCK_M no taller than M rounded up to a power of two (16 at least)."""
    return block_m <= max(16, 1 << max(0, int(M) - 1).bit_length())


def candidate_tiles(M: int) -> list[dict]:
    """The tiles of :func:`tile_configs` the autotuner would try at M (its early prune): what a
    sweep times one by one (each pinned with ``config=``) to keep the fastest itself."""
    small = [c for c in tile_configs() if _fits(c["BLOCK_M"], M)]
    return small or tile_configs()[:1]


def tile_text(c: dict) -> str:
    """One tile as the tables print it: BLOCK_MxBLOCK_N, warps, stages."""
    return f"{c['BLOCK_M']}x{c['BLOCK_N']} w{c['num_warps']} s{c['num_stages']}"


def _prune(configs, named_args, **kwargs):
    M = named_args["M"]
    small = [c for c in configs if _fits(c.kwargs["BLOCK_M"], M)]
    return small or configs[:1]


@functools.lru_cache(maxsize=None)
def _autotuned():
    cfgs = [triton.Config({k: v for k, v in c.items() if k not in ("num_warps", "num_stages")},
                          num_warps=c["num_warps"], num_stages=c["num_stages"]) for c in tile_configs()]
    return triton.autotune(configs=cfgs, key=["M", "N", "K"], prune_configs_by={"early_config_prune": _prune})(
        _w8a16_kernel)


def fold_scales(scales):
    """Logical group scales (N, K/128) (torch or numpy, exactly representable in bf16) -> the
    kernel's bf16 scales x 2^120 (a torch tensor when given one)."""
    try:
        import torch
        if isinstance(scales, torch.Tensor):
            s = scales.to(torch.float64) * FOLD
            out = s.to(torch.bfloat16)
            if not torch.equal(out.to(torch.float64), s):
                raise ValueError("scales x 2^120 must be exact in bf16 (bf16 scales below 2^8)")
            return out
    except ImportError:
        pass
    import ml_dtypes
    s = np.asarray(scales, np.float64) * FOLD
    with np.errstate(over="ignore"):
        out = s.astype(ml_dtypes.bfloat16)
    if not np.array_equal(out.astype(np.float64), s):
        raise ValueError("scales x 2^120 must be exact in bf16 (bf16 scales below 2^8)")
    return out


def _validate(x, q, s, torch, out=None):
    def need(c, msg):
        if not c:
            raise ValueError(msg)
    for name, t in (("x", x), ("q", q), ("s", s)):
        need(isinstance(t, torch.Tensor), f"{name} must be a torch.Tensor, got {type(t).__name__}")
        need(t.dim() == 2, f"{name} must be 2-D, got shape {tuple(t.shape)}")
        need(t.is_cuda and t.device == x.device, f"{name} must be on x's CUDA device")
        need(t.is_contiguous(), f"{name} must be contiguous (row-major)")
    need(x.dtype == torch.bfloat16, f"x must be torch.bfloat16, got {x.dtype}")
    need(q.dtype == torch.uint8, f"q must be torch.uint8 (e4m3 codes), got {q.dtype}")
    need(s.dtype == torch.bfloat16, f"s must be torch.bfloat16 (fold_scales), got {s.dtype}")
    M, K = x.shape
    N = q.shape[0]
    need(q.shape[1] == K, f"x is (M, K) = {tuple(x.shape)} and q must be (N, K), got {tuple(q.shape)}")
    need(K % GROUP == 0, f"K must be a multiple of {GROUP}, got K={K}")
    need(tuple(s.shape) == (N, K // GROUP), f"s must be (N, K/128) = {(N, K // GROUP)}, got {tuple(s.shape)}")
    need(M >= 1 and N >= 1, f"M and N must be >= 1, got M={M}, N={N}")
    need(max(M * K, N * K, M * N) < 2**31, "M*K, N*K and M*N must fit in int32")
    if out is not None:
        # The kernel gets out's row stride only (columns at stride 1): any other layout, or
        # rows that overlap, is written wrongly without an error.
        need(isinstance(out, torch.Tensor), f"out must be a torch.Tensor, got {type(out).__name__}")
        need(out.dtype == torch.bfloat16, f"out must be torch.bfloat16, got {out.dtype}")
        need(tuple(out.shape) == (M, N), f"out must be (M, N) = {(M, N)}, got {tuple(out.shape)}")
        need(out.is_cuda and out.device == x.device, f"out must be on x's CUDA device, got {out.device}")
        rs, cs = out.stride()
        need(cs == 1 or N == 1, f"out's columns must be adjacent (stride 1), got strides {(rs, cs)}")
        need(rs >= N or M == 1, f"out's rows must not overlap (row stride >= N = {N}), got strides {(rs, cs)}")
        need(rs * (M - 1) + N < 2**31, "out's extent must fit in int32")
    return M, N, K


def triton_w8a16(x, q, s, *, config: dict | None = None, out=None, path: str = "tiles"):
    """out (M, N) bf16 = x (M, K) bf16 @ (e4m3(q) x s)^T; ``s`` from :func:`fold_scales`.
    path 'tiles' (the default): ``config`` pins one tile (keys of :func:`tile_configs`), else
    autotuned on (M, N, K). path 'swapab' (M <= SWAPAB_MAX_M): out^T = W x^T with split-K (see the
    module's text); ``config`` keys of SWAPAB_SPACE, else :func:`swapab_config`'s rule."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    import torch

    M, N, K = _validate(x, q, s, torch, out=out)
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=x.device)
    if path == "swapab":
        return _run_swapab(x, q, s, out, M, N, K, config, torch)
    args = (x, q, s, out, M, N, K, x.stride(0), q.stride(0), s.stride(0), out.stride(0))
    if config is None:
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        _autotuned()[grid](*args)
    else:
        c = dict(GROUP_M=8) | dict(config)
        grid = (triton.cdiv(M, c["BLOCK_M"]) * triton.cdiv(N, c["BLOCK_N"]),)
        _w8a16_kernel[grid](*args, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], GROUP_M=c["GROUP_M"],
                            num_warps=c.get("num_warps", 8), num_stages=c.get("num_stages", 3))
    return out


def _run_swapab(x, q, s, out, M, N, K, config, torch):
    from .triton_blockwise import _swapab_buffers

    if M > SWAPAB_MAX_M:
        raise ValueError(f"path='swapab' is for M <= {SWAPAB_MAX_M} tokens, got M={M}")
    if config is None:
        cfg = swapab_config(M, N, K, sms=torch.cuda.get_device_properties(x.device).multi_processor_count)
    else:
        cfg = _check_swapab(config)
    split = cfg["SPLIT_K"]
    if split * M * N >= 2**31:
        raise ValueError(f"swapab: SPLIT_K * M * N = {split} * {M} * {N} must stay below 2^31 (int32 offsets into "
                         "the split-K workspace)")
    n_cnt = triton.cdiv(N, min(SWAPAB_SPACE["BLOCK_W"])) * triton.cdiv(M, min(SWAPAB_SPACE["BLOCK_T"]))
    ws, cnt = _swapab_buffers(x.device, split * M * N if split > 1 else 1, n_cnt)
    grid = (triton.cdiv(N, cfg["BLOCK_W"]), triton.cdiv(M, cfg["BLOCK_T"]), split)
    _w8a16_swapab_kernel[grid](x, q, s, out, ws, cnt, M, N, K, x.stride(0), q.stride(0), s.stride(0), out.stride(0),
                               BLOCK_W=cfg["BLOCK_W"], BLOCK_T=cfg["BLOCK_T"], SPLIT_K=split, DEQ=cfg["DEQ"],
                               num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return out


def chosen_config() -> dict | None:
    """The autotuner's last choice, or None before the first autotuned call."""
    k = _autotuned()
    c = getattr(k, "best_config", None)
    if c is None:
        return None
    return dict(c.kwargs) | dict(num_warps=c.num_warps, num_stages=c.num_stages)


def reference(x, q, scales):
    """float64 reference: x (M, K) values, q (N, K) e4m3 codes, ``scales`` the *logical*
    (N, K/128) group scales (numpy); decoded with ml_dtypes (independent of the trick)."""
    import ml_dtypes
    w = np.asarray(q, np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    w = w * np.repeat(np.asarray(scales, np.float64), GROUP, axis=1)
    return np.asarray(x, np.float64) @ w.T


def triton_w8a16_resource_usage(arch: str = "sm_90", *, BLOCK_M: int = 128, BLOCK_N: int = 128,
                                num_warps: int = 8, num_stages: int = 3) -> dict:
    """Compile one tile for ``arch`` on this machine (no GPU): dict(name, cubin (bytes), ptx,
    shared_mem, num_warps)."""
    return _compile(_w8a16_kernel, arch, dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, GROUP_M=8), num_warps, num_stages)


def triton_w8a16_swapab_resource_usage(arch: str = "sm_90", *, BLOCK_W: int = 128, BLOCK_T: int = 16,
                                       SPLIT_K: int = 4, num_warps: int = 4, num_stages: int = 4,
                                       DEQ: str = "trick") -> dict:
    """The swapab kernel compiled for ``arch`` with no GPU, as :func:`triton_w8a16_resource_usage`."""
    _check_swapab(dict(BLOCK_W=BLOCK_W, BLOCK_T=BLOCK_T, SPLIT_K=SPLIT_K, num_warps=num_warps, num_stages=num_stages,
                       DEQ=DEQ))
    return _compile(_w8a16_swapab_kernel, arch, dict(BLOCK_W=BLOCK_W, BLOCK_T=BLOCK_T, SPLIT_K=SPLIT_K, DEQ=DEQ),
                    num_warps, num_stages)


def _compile(fn, arch: str, consts: dict, num_warps: int, num_stages: int) -> dict:
    import re

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    m = re.fullmatch(r"(?:sm_?)?(\d{2,3})a?", str(arch))
    if not m:
        raise ValueError(f"arch must look like 'sm_90', got {arch!r}")
    cc = int(m.group(1))
    sig = {"x_ptr": "*bf16", "q_ptr": "*u8", "s_ptr": "*bf16", "c_ptr": "*bf16", "ws_ptr": "*fp32",
           "cnt_ptr": "*i32", "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32", "stride_qn": "i32",
           "stride_sn": "i32", "stride_cm": "i32"}
    signature = {n: sig.get(n, "constexpr") for n in fn.arg_names}
    idx = {n: i for i, n in enumerate(fn.arg_names)}
    divisible = ["x_ptr", "q_ptr", "s_ptr", "c_ptr", "N", "K", "stride_xm", "stride_qn", "stride_cm"]
    src = ASTSource(fn, signature, {(idx[k],): v for k, v in consts.items()},
                    {(idx[k],): [["tt.divisibility", 16]] for k in divisible})
    compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                              options=dict(num_warps=num_warps, num_stages=num_stages))
    return dict(name=compiled.name, cubin=compiled.asm["cubin"], ptx=compiled.asm["ptx"],
                shared_mem=compiled.metadata.shared, num_warps=num_warps)
