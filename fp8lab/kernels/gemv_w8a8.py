"""W8A8 blockwise FP8 GEMM for decode: ``gemv_w8a8_blockwise`` (format ``kFp8A8`` of
``gemv_w16.cuh``; issue 22 target 3, blockwise W8A8 at M <= 16 at the copy rate).

    out[m, n] = sum_kb a_scale[m, kb] * b_scale[n // 128, kb] * sum_{k in kb} a[m, k] * b[n, k]

The operands of every blockwise arm (``fp8lab.experiments.blockwise``): ``a`` (M, K) e4m3 with
1 x 128 fp32 scales (any strides), ``b`` (N, K) e4m3 with 128 x 128 fp32 scales; bf16 out.

The weight-only decode kernel's machinery (weights as the mma's 16-row A operand streamed into a
ring of registers, activations in shared memory, split-K with the batched finalise, programmatic
dependent launch) with e4m3 activations. Hopper has no e4m3 ``mma.sync`` (ptxas lowers it to
conversions and fp16 HMMAs), so the kernel converts both operands with ``cvt.rn.f16x2.e4m3x2``
(exact) and runs ``mma.m16n8k16`` on fp16 into fp32, promoting once per 128 K in fp32.

Inside each k16 sub-step K is permuted, the same way for both operands (see gemv_w16.cuh,
``compute_step_a8``): the activations stay one byte each in shared memory and ``ldmatrix`` gives
a thread four consecutive codes; :func:`pack` puts the weights under the same permutation.
:func:`fragment_product` rebuilds the mma's logical operands from what each thread holds, by the
PTX fragment layouts, so the CPU test checks the packing against the kernel's reading of it.

torch is imported lazily: everything but the launch runs on CPU.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np

from . import weight_only as wo
from ._build import COMMON_HEADERS, KERNEL_DIR, extension

ARM = "gemv_w8a8_blockwise"
KERNEL = "gemv_w8a8_blockwise"
EXT_SOURCES = (KERNEL_DIR / "gemv_w8a8_ext.cpp", KERNEL_DIR / "gemv_w8a8_ext.cu")
EXT_DIGEST_SOURCES = (wo.HEADER, wo.PARAMS_HEADER, wo.BIND_HEADER, *COMMON_HEADERS, *EXT_SOURCES)
STEP_K = wo.STEP_K
GROUP = 128          # the blockwise scales' 128 x 128 (weights) and 1 x 128 (activations)
#: the decode tile's largest M per CTA; larger M runs more blocks of 64 tokens, each re-reading
#: the weights (from L2 at best): the arm is meant for M <= 64
M_BLOCK = wo.M_BLOCK


def load_extension(verbose: bool = False):
    """Build (once per content hash) and import the extension (NT = 1, 2, 4, 8: four kernels)."""
    return extension("gemv_w8a8", EXT_SOURCES, EXT_DIGEST_SOURCES, include_paths=[KERNEL_DIR], verbose=verbose)


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


@dataclasses.dataclass
class PackedW8A8:
    """A blockwise FP8 weight in the kernel's layout: ``w`` the e4m3 codes as 32-bit words
    (numpy uint32 or torch int32), ``s`` one fp32 scale per (16-row tile, 128-K step) (numpy
    float32 or torch int32 holding the fp32 bits)."""

    N: int
    K: int
    w: object
    s: object

    @property
    def n_tiles16(self) -> int:
        return -(-self.N // 16)

    @property
    def n_rows(self) -> int:
        return 16 * self.n_tiles16

    @property
    def steps(self) -> int:
        return self.K // STEP_K


def _layout(codes):
    """(rows, K) uint8 codes (rows % 16 == 0) -> 1-D bytes in the kernel's memory order:
    [tile][step][q][g][tq][kkl][h][rsel][c], i.e. uint4 q of lane 4 g + tq, word 2 kkl + h, byte
    2 rsel + c, for row 16 tile + 8 rsel + g and K 128 step + 32 q + 16 kkl + 4 tq + 2 h + c.
    Works on numpy arrays and torch tensors alike (reshape + transpose)."""
    rows, K = codes.shape
    a = codes.reshape(rows // 16, 2, 8, K // STEP_K, 4, 2, 4, 2, 2)
    perm = (0, 3, 4, 2, 6, 5, 7, 1, 8)
    a = a.permute(*perm).contiguous() if _is_torch(a) else np.ascontiguousarray(a.transpose(perm))
    return a.reshape(-1)


@lru_cache(maxsize=8)
def positions(n_tiles: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, k) of every packed byte in memory order, from the fragment semantics (a second
    derivation of :func:`_layout`: the test checks they agree). Memory order [tile][step][q]
    [lane][word wi][byte e]; k16 sub-step kk = 2 q + wi // 2, half h = wi % 2; byte e is row
    g + 8 (e // 2) at physical K 16 kk + 4 tq + 2 h + e % 2 (lane = 4 g + tq)."""
    t, st, q, ln, wi, e = np.meshgrid(np.arange(n_tiles), np.arange(steps), np.arange(4), np.arange(32),
                                      np.arange(4), np.arange(4), indexing="ij")
    g, tq = ln // 4, ln % 4
    kk, h = 2 * q + wi // 2, wi % 2
    row = 16 * t + g + 8 * (e // 2)
    k = STEP_K * st + 16 * kk + 4 * tq + 2 * h + e % 2
    return row.reshape(-1), k.reshape(-1)


def _need(cond, msg):
    if not cond:
        raise ValueError(msg)


def pack(b, b_scale) -> PackedW8A8:
    """b (N, K) e4m3 (torch float8_e4m3fn, or numpy uint8 codes) and b_scale (ceil(N/128), K/128)
    fp32 -> :class:`PackedW8A8` on b's device (torch) or in numpy. Rows are padded to 16 with
    zero codes."""
    torch_in = _is_torch(b)
    _need(getattr(b, "ndim", None) == 2, f"b must be 2-D (N, K), got {type(b).__name__} of shape "
                                         f"{tuple(getattr(b, 'shape', ()))}")
    N, K = (int(x) for x in b.shape)
    _need(N >= 1 and K >= STEP_K and K % STEP_K == 0, f"b must be (N >= 1, K a positive multiple of 128), got {(N, K)}")
    nb, kb = -(-N // GROUP), K // GROUP
    _need(tuple(b_scale.shape) == (nb, kb), f"b_scale must be (ceil(N/128), K/128) = {(nb, kb)}, got "
                                            f"{tuple(b_scale.shape)}")
    rows = -(-N // 16) * 16
    tiles = rows // 16
    if torch_in:
        import torch

        _need(b.dtype == torch.float8_e4m3fn, f"b must be float8_e4m3fn, got {b.dtype}")
        codes = b.contiguous().view(torch.uint8)
        if rows != N:
            codes = torch.nn.functional.pad(codes, (0, 0, 0, rows - N))
        w = _layout(codes).view(torch.int32)
        s = b_scale.to(torch.float32)[torch.arange(tiles, device=b.device) * 16 // GROUP].contiguous()
        return PackedW8A8(N, K, w, s.view(torch.int32))
    codes = np.asarray(b, dtype=np.uint8)
    if rows != N:
        codes = np.pad(codes, ((0, rows - N), (0, 0)))
    w = _layout(codes).view("<u4").astype(np.uint32, copy=False)
    s = np.ascontiguousarray(np.asarray(b_scale, dtype=np.float32)[np.arange(tiles) * 16 // GROUP])
    return PackedW8A8(N, K, w, s)


def to_device(pw: PackedW8A8, device="cuda") -> PackedW8A8:
    """A copy with torch int32 tensors on ``device``."""
    import torch

    def t(a):
        if _is_torch(a):
            return a.to(device)
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int32)).to(device)

    return dataclasses.replace(pw, w=t(pw.w), s=t(pw.s))


def _np_words(pw: PackedW8A8) -> tuple[np.ndarray, np.ndarray]:
    w, s = pw.w, pw.s
    if _is_torch(w):
        w = w.cpu().numpy()
    if _is_torch(s):
        s = s.cpu().numpy()
    return np.asarray(w).view(np.uint32), np.asarray(s).view(np.float32).reshape(pw.n_tiles16, pw.steps)


def unpack(pw: PackedW8A8) -> tuple[np.ndarray, np.ndarray]:
    """(codes (n_rows, K) uint8, per-row scales (n_rows, K/128) fp32) from the packed words,
    through :func:`positions` (independent of :func:`_layout`)."""
    w, s = _np_words(pw)
    row, k = positions(pw.n_tiles16, pw.steps)
    codes = np.zeros((pw.n_rows, pw.K), np.uint8)
    codes[row, k] = w.view(np.uint8)
    return codes, np.repeat(s, 16, axis=0)


def _e4m3(codes) -> np.ndarray:
    import ml_dtypes

    return np.asarray(codes, np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def fragment_product(pw: PackedW8A8, act_codes, tile: int, step: int) -> np.ndarray:
    """The (16, 8) fp32-exact sum one warp's 8 k16 mmas form for 16-row tile ``tile`` and 128-K
    step ``step`` (before scales), rebuilt from what each thread holds, by the PTX layouts:

    - thread (g, tq) (lane 4 g + tq) loads words 2 kk + h of the step; e4m3x4_to_f16x2 splits a
      word into its low pair (bytes 0, 1) and high pair (bytes 2, 3): a0 / a1 = word (kk, 0)'s
      low / high pair, a2 / a3 = word (kk, 1)'s;
    - ldmatrix.x4 at byte 64 h of the step gives it, for matrix mi, bytes 4 tq .. 4 tq + 3 of
      token row g at 64 h + 16 mi, i.e. k16 sub-step kk = 4 h + mi; b0 = their low pair, b1 the
      high pair;
    - m16n8k16: a0 = A[g][2tq, 2tq+1], a1 = A[g+8][2tq, 2tq+1], a2 = A[g][2tq+8, +9],
      a3 = A[g+8][2tq+8, +9]; b0 = B[2tq, 2tq+1][g], b1 = B[2tq+8, +9][g]; D = A B.

    ``act_codes``: (8, K) uint8 e4m3 codes of 8 tokens."""
    w, _ = _np_words(pw)
    words = w.reshape(pw.n_tiles16, pw.steps, 4, 32, 4)[tile, step]       # [q][lane][wi]
    wb = words.view(np.uint8).reshape(4, 32, 4, 4)                        # [q][lane][wi][byte]
    act = np.asarray(act_codes, np.uint8)[:, STEP_K * step: STEP_K * (step + 1)]
    D = np.zeros((16, 8))
    for kk in range(8):
        A = np.full((16, 16), np.nan)
        B = np.full((16, 8), np.nan)
        q = kk // 2
        for lane in range(32):
            g, tq = lane // 4, lane % 4
            lo0, hi0 = wb[q, lane, 2 * (kk % 2)][:2], wb[q, lane, 2 * (kk % 2)][2:]
            lo1, hi1 = wb[q, lane, 2 * (kk % 2) + 1][:2], wb[q, lane, 2 * (kk % 2) + 1][2:]
            A[g, 2 * tq: 2 * tq + 2] = _e4m3(lo0)
            A[g + 8, 2 * tq: 2 * tq + 2] = _e4m3(hi0)
            A[g, 2 * tq + 8: 2 * tq + 10] = _e4m3(lo1)
            A[g + 8, 2 * tq + 8: 2 * tq + 10] = _e4m3(hi1)
            h, mi = kk // 4, kk % 4
            four = act[g, 64 * h + 16 * mi + 4 * tq: 64 * h + 16 * mi + 4 * tq + 4]
            B[2 * tq: 2 * tq + 2, g] = _e4m3(four[:2])
            B[2 * tq + 8: 2 * tq + 10, g] = _e4m3(four[2:])
        D += A @ B
    return D


def reference(a, a_scale, b, b_scale) -> np.ndarray:
    """float64 (M, N) from e4m3 codes / tensors and their scales (rows of any device)."""
    def f64(x):
        if _is_torch(x):
            import torch

            x = x.float().cpu() if x.dtype == torch.float8_e4m3fn else x.double().cpu()
            return x.numpy().astype(np.float64)
        x = np.asarray(x)
        return _e4m3(x) if x.dtype == np.uint8 else x.astype(np.float64)

    A, B = f64(a), f64(b)
    sa, sb = f64(a_scale), f64(b_scale)
    M, K = A.shape
    N = B.shape[0]
    Ad = A * np.repeat(sa, GROUP, axis=1)[:, :K]
    Bd = B * np.repeat(np.repeat(sb, GROUP, axis=0)[:N], GROUP, axis=1)[:, :K]
    return Ad @ Bd.T


def launch_config(pw: PackedW8A8, M: int, device=None) -> dict:
    """What :func:`gemv_w8a8` launches for this weight and M: splits from weight_only's split
    model for fp8 weights (the same bytes per weight element and the same CTA tiles)."""
    import torch

    dev = torch.device("cuda") if device is None else torch.device(device)
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    sms = torch.cuda.get_device_properties(idx).multi_processor_count
    nt = wo.n_tiles(M)
    occ = _occupancy(nt, idx)
    splits = wo.choose_splits("fp8", M, pw.N, pw.K, sms=sms, ctas_per_sm=occ)
    return {"nt": nt, "ctas_per_sm": occ, "sms": sms, "splits": splits,
            "grid": (wo.grid_x("fp8", pw.N, M), splits, -(-M // M_BLOCK))}


@lru_cache(maxsize=None)
def _occupancy(nt: int, device_index: int) -> int:
    n = int(load_extension().occupancy(nt))
    if n < 1:
        raise RuntimeError(f"occupancy query failed for {KERNEL} nt={nt}: {n}")
    return n


def _validate(a, a_scale, pw, out, splits, torch):
    _need(isinstance(pw, PackedW8A8), f"pw must be a PackedW8A8 (to_device(pack(b, b_scale))), got {type(pw).__name__}")
    _need(isinstance(a, torch.Tensor), f"a must be a torch.Tensor, got {type(a).__name__}")
    _need(a.dtype == torch.float8_e4m3fn, f"a must be float8_e4m3fn, got {a.dtype}")
    _need(a.dim() == 2, f"a must be 2-D (M, K), got shape {tuple(a.shape)}")
    _need(a.is_cuda, f"a must be on a CUDA device, got {a.device}")
    _need(a.is_contiguous(), "a must be contiguous (row-major, K innermost)")
    _need(a.data_ptr() % 16 == 0, f"a must be 16-byte aligned for cp.async (data_ptr % 16 = {a.data_ptr() % 16})")
    M, K = a.shape
    _need(M >= 1, f"M must be >= 1, got {M}")
    _need(K == pw.K, f"a is (M, K) = {tuple(a.shape)} but the weight has K = {pw.K}")
    _need(isinstance(a_scale, torch.Tensor) and a_scale.dtype == torch.float32,
          f"a_scale must be a float32 tensor, got {getattr(a_scale, 'dtype', type(a_scale).__name__)}")
    _need(tuple(a_scale.shape) == (M, K // GROUP), f"a_scale must be (M, K/128) = {(M, K // GROUP)}, got "
                                                   f"{tuple(a_scale.shape)}")
    _need(a_scale.device == a.device, f"a_scale is on {a_scale.device} but a is on {a.device}")
    _need(min(a_scale.stride()) >= 0 and max(a_scale.stride()) < 2**31, "a_scale's strides must fit in int32")
    for name, t in (("pw.w", pw.w), ("pw.s", pw.s)):
        _need(isinstance(t, torch.Tensor) and t.is_cuda and t.dtype == torch.int32 and t.is_contiguous(),
              f"{name} must be a contiguous int32 CUDA tensor (to_device(pack(...)))")
        _need(t.device == a.device, f"{name} is on {t.device} but a is on {a.device}")
    _need(pw.w.numel() == pw.n_rows * pw.K // 4, f"pw.w has {pw.w.numel()} words, the layout needs "
                                                  f"{pw.n_rows * pw.K // 4}")
    _need(pw.s.numel() == pw.n_tiles16 * pw.steps, f"pw.s has {pw.s.numel()} words, the layout needs "
                                                    f"{pw.n_tiles16 * pw.steps}")
    _need(pw.w.data_ptr() % 16 == 0, "packed weights must be 16-byte aligned")
    _need(max(M, pw.N, pw.K) < 2**31 and M * pw.N < 2**62, "sizes must fit in int32")
    if out is not None:
        _need(isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16, "out must be a bfloat16 tensor")
        _need(tuple(out.shape) == (M, pw.N), f"out must be (M, N) = {(M, pw.N)}, got {tuple(out.shape)}")
        _need(out.is_contiguous() and out.device == a.device, "out must be contiguous, on a's device")
    if splits is not None:
        _need(isinstance(splits, int) and not isinstance(splits, bool) and 1 <= splits <= pw.steps,
              f"splits must be an integer in [1, K/128 = {pw.steps}], got {splits!r}")


def gemv_w8a8(a, a_scale, pw: PackedW8A8, *, splits: int | None = None, out=None, act_resident: bool = True,
              pdl: bool = False):
    """out (M, N) bf16 = blockwise-scaled a (M, K) e4m3 @ b^T, with ``pw`` = ``to_device(pack(b,
    b_scale))``. ``splits``: split-K factor (None: weight_only's split model for fp8 weights).
    ``act_resident`` and ``pdl`` as in :func:`fp8lab.kernels.weight_only.gemv_w16` (pdl: the
    GEMV's first weight loads overlap the tail of the kernel before it, the activation quantiser;
    ``pw`` must not be written by that kernel). Any M works; it is a decode kernel (64 tokens per
    CTA, the weights re-read per 64 tokens). With ``splits`` >= 3 the fp32 workspace adds partial
    sums in the order CTAs finish (the last bit may differ between launches)."""
    import torch

    _validate(a, a_scale, pw, out, splits, torch)
    for name, v in (("act_resident", act_resident), ("pdl", pdl)):
        _need(isinstance(v, (bool, np.bool_)), f"{name} must be True or False, got {v!r}")
    M = a.shape[0]
    if pdl and not wo.pdl_supported(a.device):
        cap = torch.cuda.get_device_capability(a.device)
        raise ValueError(f"pdl=True needs sm_{wo.PDL_MIN_SM} or newer (griddepcontrol); this GPU is sm_{cap[0]}{cap[1]}")
    if splits is None:
        splits = launch_config(pw, M, a.device)["splits"]
    sps = -(-pw.steps // splits)
    splits = -(-pw.steps // sps)
    if out is None:
        out = torch.empty((M, pw.N), dtype=torch.bfloat16, device=a.device)
    ctas = wo.grid_x("fp8", pw.N, M) * -(-M // M_BLOCK)
    ws, cnt = wo.workspace(a.device, M * pw.N if splits > 1 else 1, ctas)
    return load_extension().gemv(a, a_scale, pw.w, pw.s, out, ws, cnt, pw.N, pw.n_tiles16, splits, sps,
                                 bool(act_resident), bool(pdl))


def pattern_stream(pw: PackedW8A8, M: int, *, splits: int | None = None, ctas_per_sm: int | None = None,
                   sink=None, key: int = wo.PATTERN_KEY) -> int:
    """The weight and scale loads of ``gemv_w8a8(a (M, K), ..., pw, splits=...)`` alone, on its grid
    at its CTAs per SM (:func:`fp8lab.kernels.weight_only.pattern_stream`'s kernels with this
    kernel's layout: e4m3 codes as for the weight-only FP8 kernel, one fp32 scale word per (16-row
    tile, step)): what its access pattern allows, with no activations, conversions, mma or
    reduction. Defaults as :func:`gemv_w8a8` picks them. Returns the CTAs per SM it ran at."""
    import torch

    _need(isinstance(pw, PackedW8A8), f"pw must be a PackedW8A8 (to_device(pack(b, b_scale))), got {type(pw).__name__}")
    for name, t in (("pw.w", pw.w), ("pw.s", pw.s)):
        _need(isinstance(t, torch.Tensor) and t.is_cuda and t.dtype == torch.int32 and t.is_contiguous(),
              f"{name} must be a contiguous int32 CUDA tensor (to_device(pack(...)))")
    _need(pw.w.numel() == pw.n_rows * pw.K // 4 and pw.s.numel() == pw.n_tiles16 * pw.steps,
          f"pw's arrays do not have the packed layout of an (N, K) = {(pw.N, pw.K)} weight")
    _need(pw.w.data_ptr() % 16 == 0, "packed weights must be 16-byte aligned")
    M = wo._pos_int("M", M)
    cfg = launch_config(pw, M, pw.w.device) if (splits is None or ctas_per_sm is None) else {}
    splits = cfg["splits"] if splits is None else splits
    ctas_per_sm = wo._pos_int("ctas_per_sm", cfg["ctas_per_sm"] if ctas_per_sm is None else ctas_per_sm)
    g = wo.pattern_geometry("fp8", M, pw.N, pw.K, schedule="splitk", splits=splits)
    return wo.launch_pattern(wo.PATTERN_FP8A8, g, pw.w, pw.s, pw.n_tiles16, pw.steps, ctas_per_sm, sink, key)


def cubin(arch: str = "sm_90"):
    """The four kernels compiled here (no GPU) for the SASS checks: content-hashed cache."""
    from ..toolchain.cubin import compile_cubin

    src = KERNEL_DIR / "gemv_w8a8_ext.cu"
    b = compile_cubin(src, arch, include=[KERNEL_DIR], key_files=(wo.HEADER, wo.PARAMS_HEADER, src, *COMMON_HEADERS))
    if not b.ok:
        raise RuntimeError(f"nvcc failed ({' '.join(b.cmd)}):\n{b.log[-3000:]}")
    return b.cubin
