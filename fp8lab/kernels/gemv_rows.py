"""fp8lab's row-major decode GEMV for 8-bit and 4-bit weights: the weight-only arms' ``"rows"`` schedule.

    out[m, n] = out_factor * sum_k act[m, k] * value(code[n, k]) * scale[n, k // 128]

The kernel (``gemv_rows.cuh``) reads the weight as row-major (N, K) bytes with one 16-bit group
scale per (row, 128 K): CTAs of 4 warps that split 4 rows' K among their 128 threads, every load of
a K block issued before any arithmetic, fp32 FMAs on the CUDA cores, no split-K. At M = 1 on the
H200 it streamed 0.86-0.99 of the copy rate on notebook 08's shapes where the tensor-core kernel
(:func:`fp8lab.kernels.weight_only.gemv_w16`'s split-K and stream-K schedules) streamed 0.73-0.93
(``scripts/probes/decode_rows.py``). Its CUDA-core work grows with M (every M works: blocks of up
to 4 tokens, each streaming the whole weight). A tensor-core form (``gemv_rows_mma.cuh``,
``form="mma"``; for fp8 and int8 the default from :data:`MMA_MIN_M` tokens on, for int4 opt-in)
reads the same weight and scales: CTAs of 16 rows (``"mma32"``: 32) x 8 or 16 tokens, mma.sync on
exactly converted operands, fp32 sums promoted per group.

Formats: ``fp8`` (e4m3; the two NaN codes decode as NaN, where the tile layout's bit trick gives
+-480), ``int8`` (codes 0..255, value = code - 128, as :mod:`weight_only`), ``int4`` (codes
0..15, value = code - 8, two per byte with the even k in the low nibble; multiplied and summed in
fp16, 16 products per sum, on activations scaled per 32 by a power of two: see gemv_rows.cuh) and
``nvfp4`` (e2m1 codes packed as int4's, one e4m3 block scale per (row, 16 K), an fp32 global
scale; the codes enter fp16 exactly as e2m1 x 2^-14 by byte permutes, 8 products per fp16 sum, the
block scale in fp32). A rows weight is a :class:`~fp8lab.kernels.weight_only.PackedWeight` with
``layout="rows"``: ``w`` the codes' bytes as 32-bit words, ``s`` the 16-bit scales (the activation
dtype; nvfp4: the e4m3 bytes) as 32-bit words, ``out_factor`` 1 (nvfp4: the global scale x 2^14).
The 4-bit formats have an opt-in CUDA-core form of 8 rows per CTA (``"cuda8"``): each thread's
activation conversion then serves 8 rows instead of 4 (fewer instructions per weight; four CTAs per
SM instead of eight).
:func:`gemv` runs it (``weight_only.gemv_w16`` reads the tile layout only and refuses such a weight).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from . import weight_only as wo
from ._build import COMMON_HEADERS, KERNEL_DIR, extension

HEADER = KERNEL_DIR / "gemv_rows.cuh"
MMA_HEADER = KERNEL_DIR / "gemv_rows_mma.cuh"
PARAMS_HEADER = KERNEL_DIR / "gemv_rows_params.h"
EXT_SOURCES = (KERNEL_DIR / "gemv_rows_ext.cpp", KERNEL_DIR / "gemv_rows_ext.cu")
EXT_DIGEST_SOURCES = (HEADER, MMA_HEADER, PARAMS_HEADER, *COMMON_HEADERS, *EXT_SOURCES)

FORMATS = ("fp8", "int8", "int4", "nvfp4")
ROWS_PER_CTA = 4
#: the formats with the 8-rows-per-CTA CUDA-core form "cuda8", and its rows per CTA
ROWS8_FORMATS = ("int4", "nvfp4")
ROWS8_PER_CTA = 8
#: the 4-bit formats take the 8-row form by default at M = 1 (a token block of one: the form has no
#: other). H200 probe rows_4bit at 67935aa, M = 1, 8 rows over 4: INT4 1.01-1.08x on three of notebook
#: 08's shapes, NVFP4 0.98-1.04x (the 4-bit kernels there at 0.55-0.75 of copy, their loads alone at
#: 0.67-0.95: issue-bound); since then the 8-row loop lost 6% (INT4) / 16% (NVFP4) of its SASS, the 4-row
#: one 1% / 8%
ROWS8_AT_M1 = True
#: nvfp4: K per e4m3 block scale, and the factor its codes carry in fp16 (e2m1 x 2^-14)
NVFP4_BLOCK = 16
NVFP4_CODE_FACTOR = 2.0 ** 14
THREADS = 128
#: the kernel forms: "cuda" (gemv_rows.cuh: products on the CUDA cores, 4 rows x 1, 2 or 4 tokens per
#: CTA), "mma" (gemv_rows_mma.cuh: mma.sync, 16 rows x 8 or 16 tokens per CTA), "mma32" (the same
#: at 32 rows per CTA: each warp's activations serve twice the rows) and "cuda8" (the 4-bit formats'
#: CUDA-core form at 8 rows x 1 token per CTA)
FORMS = ("cuda", "mma", "mma32", "cuda8")
FORM_ID = {"cuda": 0, "mma": 1, "mma32": 2, "cuda8": 3}
#: the tensor-core forms and their rows per CTA
MMA_FORMS = {"mma": 16, "mma32": 32}
#: the formats with a tensor-core form
MMA_FORMATS = ("fp8", "int8", "int4")
#: the formats whose default is the tensor-core form from MMA_MIN_M on (int4's stays opt-in until
#: notebook 08 has timed it on the H200)
MMA_DEFAULT_FORMATS = ("fp8", "int8")
#: the fewest tokens the tensor-core form is taken for by default (form=None; None would make it
#: opt-in). The CUDA-core form's work grows with M: at M = 4 it streamed 0.34-0.43 of copy where
#: split-K streamed 0.72-0.90 (notebook 08, H200, 648d9df); at M = 1 it streamed 0.86-0.99.
MMA_MIN_M: int | None = 2
#: from this many tokens on (16 per CTA) the default tensor-core form is "mma32": at M = 16 the 16-row
#: form loads 2 activation bytes per weight byte, from L2 where 16 tokens x K outgrow L1 (llama3-70b
#: down_proj, K = 28672: 0.72 of copy against mma32's 0.90; level within 0.02 on K = 4096 / 14336;
#: M = 64 1.13-1.46x; at M <= 4 the 16-row form is level or ahead: H100, rows_forms probe, f9fb980)
MMA32_MIN_M = 9
MMA_ROWS_PER_CTA = MMA_FORMS["mma"]
#: the tensor-core form's warps per CTA grow (4, 8, 16; 8 at most above 8 tokens) until the grid holds
#: this many warps (~ 132 SMs x 32 resident warps), while each warp keeps two 128-K steps
MMA_TARGET_WARPS = 4096
LAYOUT = "rows"
#: the word the loads-only kernel's XOR is compared with before its one store
LOADS_KEY = 0x2F5A17C3


def load_extension(verbose: bool = False):
    """Build (once per content hash) and import the extension: the CUDA-core form (4 formats x 2
    dtypes x 3 token blocks, and the 4-bit formats' 8-row form x 2 dtypes) and the tensor-core forms
    (3 formats x 2 dtypes x 9 row / warp / token configs), each kernel with its loads-only twin:
    48 + 8 + 108 small kernels (16 rows per CTA in 4, 8 or 16 warps at 8 tokens, 4 or 8 at 16; 32
    rows per CTA in 4 or 8 warps)."""
    return extension("gemv_rows", EXT_SOURCES, EXT_DIGEST_SOURCES, include_paths=[KERNEL_DIR], verbose=verbose)


def check_fmt(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"the rows layout takes formats {FORMATS}, got {fmt!r}")
    return fmt


def check_form(form: str) -> str:
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    return form


def default_form(fmt: str, M: int) -> str:
    """The form :func:`gemv` takes for ``fmt`` at M tokens: for :data:`MMA_DEFAULT_FORMATS` "mma"
    from :data:`MMA_MIN_M` on (when set), "mma32" from :data:`MMA32_MIN_M` on; for
    :data:`ROWS8_FORMATS` at M = 1 "cuda8" when :data:`ROWS8_AT_M1`; else "cuda"."""
    if M == 1 and ROWS8_AT_M1 and fmt in ROWS8_FORMATS:
        return "cuda8"
    if MMA_MIN_M is None or fmt not in MMA_DEFAULT_FORMATS or M < MMA_MIN_M:
        return "cuda"
    return "mma32" if M >= MMA32_MIN_M else "mma"


def check_form_for(fmt: str, form: str) -> str:
    """``form``, checked against ``fmt``: the tensor-core forms take :data:`MMA_FORMATS`, "cuda8"
    :data:`ROWS8_FORMATS`."""
    check_form(form)
    if form in MMA_FORMS and fmt not in MMA_FORMATS:
        raise ValueError(f"form {form!r} (tensor cores) takes formats {MMA_FORMATS}, not {fmt!r}")
    if form == "cuda8" and fmt not in ROWS8_FORMATS:
        raise ValueError(f"form 'cuda8' (8 rows per CTA) takes formats {ROWS8_FORMATS}, not {fmt!r}")
    return form


def _form_for(fmt: str, M: int, form) -> str:
    if form is None:
        return default_form(fmt, M)
    return check_form_for(fmt, form)


def warps_for(N: int, M: int, K: int, form: str = "mma") -> int:
    """Warps per CTA of a tensor-core form (gemv_rows_mma.cuh warps_for): the smallest of 4, 8, 16
    (8 above 8 tokens or at 32 rows per CTA) whose grid holds :data:`MMA_TARGET_WARPS` warps, no
    larger than leaves each warp two K steps."""
    tok = tokens_per_cta(M, form)
    rows = MMA_FORMS[form]
    ctas = -(-N // rows) * -(-M // tok)
    top = 16 if tok == 8 and rows == 16 else 8
    w = 4
    while w < top and ctas * w < MMA_TARGET_WARPS and K // 128 >= 4 * w:
        w *= 2
    return w


def tokens_per_cta(M: int, form: str = "cuda") -> int:
    """Tokens one CTA takes: the CUDA-core form (gemv_rows.cuh mb_for) 1, 2, else 4; the tensor-core
    form (gemv_rows_mma.cuh nt_for) 8 up to M = 8, else 16; "cuda8" 1."""
    if check_form(form) in MMA_FORMS:
        return 8 if M <= 8 else 16
    if form == "cuda8":
        return 1
    return 1 if M <= 1 else (2 if M == 2 else 4)


def geometry(N: int, M: int, form: str = "cuda", K: int | None = None) -> dict:
    """The launch: the CUDA-core form's grid (ceil(N / 4), ceil(M / tokens_per_cta(M))) of THREADS-thread
    CTAs ("cuda8": (ceil(N / 8), M)); the tensor-core form's 1-D grid of ceil(N / 16) x ceil(M / tokens_per_cta(M, "mma")) CTAs
    (the token block fastest) of warps_for(N, M, K) warps (K needed). "threads": the threads in all
    (the loads-only kernel's sink words)."""
    mb = tokens_per_cta(M, form)
    if form in MMA_FORMS:
        if K is None:
            raise ValueError("the tensor-core form's geometry needs K (its warps per CTA depend on it)")
        grid, threads = (-(-N // MMA_FORMS[form]) * -(-M // mb), 1), 32 * warps_for(N, M, K, form)
        return {"grid": grid, "mb": mb, "threads": grid[0] * threads, "form": form, "block": threads}
    grid = (-(-N // (ROWS8_PER_CTA if form == "cuda8" else ROWS_PER_CTA)), -(-M // mb))
    return {"grid": grid, "mb": mb, "threads": grid[0] * grid[1] * THREADS, "form": form, "block": THREADS}


def code_values(fmt: str) -> np.ndarray:
    """float64 value of every code as the rows kernel decodes it (e4m3: NaN codes are NaN; int4 and
    nvfp4: codes 0..15, nvfp4 the e2m1 values)."""
    check_fmt(fmt)
    if fmt == "int4":
        return np.arange(16, dtype=np.float64) - 8.0
    if fmt == "nvfp4":
        return wo._E2M1_VALUES.astype(np.float64)
    codes = np.arange(256, dtype=np.uint8)
    if fmt == "fp8":
        return codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return codes.astype(np.float64) - 128.0


def _nvfp4_scales(scales, N: int, K: int) -> np.ndarray:
    """nvfp4 block scales: (N, K / 16) e4m3 codes (integers 0..255) -> uint8."""
    sc = np.asarray(scales)
    if sc.shape != (N, K // NVFP4_BLOCK):
        raise ValueError(f"nvfp4 scales must be (N, K/16) = {(N, K // NVFP4_BLOCK)} e4m3 codes, got {sc.shape}")
    if not np.issubdtype(sc.dtype, np.integer) or (sc.size and (sc.min() < 0 or sc.max() > 255)):
        raise ValueError("nvfp4 scales must be e4m3 codes (integers 0..255)")
    return np.ascontiguousarray(sc.astype(np.uint8))


def pack_rows(fmt: str, codes, scales, *, act: str = "bf16", global_scale: float = 1.0) -> wo.PackedWeight:
    """Logical codes (N, K) integers (0..255; int4 and nvfp4 0..15) and scales (N, K/128), exactly
    representable in ``act`` (nvfp4: (N, K/16) e4m3 codes, and ``global_scale`` an fp32) -> a
    rows-layout PackedWeight (numpy words; ``.to('cuda')`` as any packed weight). The 4-bit formats
    pack two codes per byte, k even in the low nibble."""
    check_fmt(fmt)
    wo._check_act(act)
    c = np.asarray(codes)
    if not np.issubdtype(c.dtype, np.integer):
        raise ValueError(f"codes must be an integer array, got dtype {c.dtype}")
    if c.ndim != 2 or c.shape[0] < 1:
        raise ValueError(f"codes must be 2-D (N, K) with N >= 1, got shape {c.shape}")
    top = 15 if fmt in ("int4", "nvfp4") else 255
    if c.size and (c.min() < 0 or c.max() > top):
        raise ValueError(f"{fmt} codes must lie in 0..{top}, got min {c.min()} max {c.max()}")
    N, K = c.shape
    if K < wo.STEP_K or K % wo.STEP_K:
        raise ValueError(f"K must be a positive multiple of {wo.STEP_K}, got K={K}")
    gs = float(global_scale)
    if not (np.isfinite(gs) and gs > 0 and float(np.float32(gs)) == gs):
        raise ValueError(f"global_scale must be a positive fp32 number, got {global_scale!r}")
    if fmt != "nvfp4" and gs != 1.0:
        raise ValueError(f"global_scale is nvfp4's; {fmt} takes its scales per 128 only")
    b = np.ascontiguousarray(c.astype(np.uint8))
    if fmt in ("int4", "nvfp4"):
        b = np.ascontiguousarray(b[:, 0::2] | (b[:, 1::2] << 4))
    w = b.reshape(-1).view(np.uint32)
    if fmt == "nvfp4":
        s8 = _nvfp4_scales(scales, N, K)             # K % 128 == 0: N * K / 16 bytes are whole words
        return wo.PackedWeight(fmt, act, N, K, w.copy(), s8.reshape(-1).view(np.uint32).copy(),
                               gs * NVFP4_CODE_FACTOR, layout=LAYOUT)
    s = wo._scales_16(scales, act, (N, K // wo.STEP_K))
    s16 = s.astype(wo._NP_DTYPE[act]).view(np.uint16).reshape(-1)
    if s16.size % 2:
        s16 = np.concatenate([s16, np.zeros(1, np.uint16)])
    return wo.PackedWeight(fmt, act, N, K, w.copy(), s16.view(np.uint32).copy(), 1.0, layout=LAYOUT)


def random_rows(fmt: str, N: int, K: int, *, act: str = "bf16", seed: int = 0) -> tuple[wo.PackedWeight, dict]:
    """A benchmark-size rows weight: uniformly random codes (e4m3's NaN codes redrawn as their
    neighbours 0x7e / 0xfe, as no quantiser emits NaN) with :func:`weight_only.random_weight`'s
    scales (nvfp4: e4m3 block scales 2^-3 .. 2^5 and a global 2^-8). Returns (PackedWeight on the
    host, dict(codes (N, K) uint8, scales, global_scale))."""
    check_fmt(fmt)
    wo._check_act(act)
    N, K = wo._pos_int("N", N), wo._pos_int("K", K)
    if K % wo.STEP_K:
        raise ValueError(f"K must be a multiple of {wo.STEP_K}, got {K}")
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16 if fmt in ("int4", "nvfp4") else 256, size=(N, K), dtype=np.uint8)
    if fmt == "fp8":
        codes[(codes & 0x7F) == 0x7F] -= 1
    if fmt == "nvfp4":
        scales = rng.integers(0x20, 0x60, size=(N, K // NVFP4_BLOCK), dtype=np.uint8)
        gs = 2.0 ** -8
        return pack_rows(fmt, codes, scales, act=act, global_scale=gs), {"codes": codes, "scales": scales,
                                                                          "global_scale": gs}
    scales = np.exp2(rng.uniform(-10, -6, size=(N, K // 128))).astype(wo._NP_DTYPE[act]).astype(np.float64)
    return pack_rows(fmt, codes, scales, act=act), {"codes": codes, "scales": scales, "global_scale": 1.0}


def dequantize_torch(fmt: str, codes, scales, dtype=None, global_scale: float = 1.0):
    """(N, K) weight on the GPU as the rows kernel decodes it (float64 by default); nvfp4's scales
    are its e4m3 codes, times ``global_scale``."""
    import torch

    dtype = dtype or torch.float64
    dev = codes.device if isinstance(codes, torch.Tensor) else torch.device("cuda")
    c = codes if isinstance(codes, torch.Tensor) else torch.from_numpy(np.asarray(codes, np.uint8)).to(dev)
    W = torch.from_numpy(code_values(fmt)).to(dev, dtype)[c.long()]
    if fmt == "nvfp4":
        sv = np.asarray(scales, np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64) * float(global_scale)
        return W * torch.from_numpy(sv).to(dev, dtype).repeat_interleave(NVFP4_BLOCK, dim=1)
    W *= torch.from_numpy(np.asarray(scales, np.float64)).to(dev, dtype).repeat_interleave(128, dim=1)
    return W


def _launch_form(fmt: str, M: int, form) -> str:
    form = _form_for(fmt, M, form)
    if form == "cuda8" and M > 65535:
        raise ValueError(f"form 'cuda8' takes one token per CTA row of the grid: M = {M} > 65535")
    return form


def _validate(act, pw, out, torch):
    def need(cond, msg):
        if not cond:
            raise ValueError(msg)

    need(isinstance(pw, wo.PackedWeight) and pw.layout == LAYOUT,
         "pw must be a rows-layout PackedWeight (gemv_rows.pack_rows(...).to('cuda'))")
    check_fmt(pw.fmt)
    need(isinstance(act, torch.Tensor), f"act must be a torch.Tensor, got {type(act).__name__}")
    want = torch.bfloat16 if pw.act == "bf16" else torch.float16
    need(act.dtype == want, f"act must be {want} (the weight was packed for {pw.act}), got {act.dtype}")
    need(act.dim() == 2, f"act must be 2-D (M, K), got shape {tuple(act.shape)}")
    need(act.is_cuda, f"act must be on a CUDA device, got {act.device}")
    need(act.is_contiguous(), "act must be contiguous (row-major, K innermost)")
    need(act.data_ptr() % 16 == 0, f"act must be 16-byte aligned (data_ptr % 16 = {act.data_ptr() % 16})")
    M, K = act.shape
    need(M >= 1, f"M must be >= 1, got {M}")
    need(K == pw.K, f"act is (M, K) = {tuple(act.shape)} but the weight has K = {pw.K}")
    for name, t in (("pw.w", pw.w), ("pw.s", pw.s)):
        need(isinstance(t, torch.Tensor) and t.is_cuda and t.dtype == torch.int32 and t.is_contiguous(),
             f"{name} must be a contiguous int32 CUDA tensor (call pw.to('cuda'))")
        need(t.device == act.device, f"{name} is on {t.device} but act is on {act.device}")
    need(pw.w.data_ptr() % 16 == 0, "pw.w must be 16-byte aligned")
    words = pw.N * pw.K * wo.BITS[pw.fmt] // 32
    need(pw.w.numel() == words, f"pw.w has {pw.w.numel()} words, the rows layout of {pw.fmt} needs {words}")
    s_words = pw.N * (pw.K // NVFP4_BLOCK) // 4 if pw.fmt == "nvfp4" else -(-pw.N * (pw.K // wo.STEP_K) // 2)
    need(pw.s.numel() == s_words, f"pw.s has {pw.s.numel()} words, the rows layout of {pw.fmt} needs {s_words}")
    need(max(M, pw.N, pw.K) < 2**31 and M * pw.N < 2**62 and pw.N * pw.K < 2**62, "sizes must fit")
    need(-(-M // tokens_per_cta(M)) < 65536, f"M = {M} needs more than 65535 token blocks")
    need(geometry(pw.N, M, "mma", pw.K)["grid"][0] < 2**31, f"(M, N) = {(M, pw.N)} needs too many CTAs")
    if out is not None:
        need(isinstance(out, torch.Tensor) and out.dtype == want, f"out must be a {want} tensor")
        need(tuple(out.shape) == (M, pw.N), f"out must be (M, N) = {(M, pw.N)}, got {tuple(out.shape)}")
        need(out.is_contiguous() and out.device == act.device, "out must be contiguous, on act's device")


def gemv(act, pw: wo.PackedWeight, *, out=None, form=None):
    """out (M, N) = act (M, K) @ dequant(pw).T in act's dtype, for a rows-layout ``pw`` on the GPU.
    ``form``: "cuda", "mma", "mma32" or "cuda8" (:data:`FORMS`, :func:`check_form_for`); None:
    :func:`default_form`."""
    import torch

    _validate(act, pw, out, torch)
    form = _launch_form(pw.fmt, act.shape[0], form)
    if out is None:
        out = torch.empty((act.shape[0], pw.N), dtype=act.dtype, device=act.device)
    return load_extension().gemv(act, pw.w, pw.s, out, pw.N, pw.K, wo.FORMAT_ID[pw.fmt], float(pw.out_factor),
                                 FORM_ID[form])


def ctas_per_sm(fmt: str, act: str, M: int, form=None, *, N: int | None = None, K: int | None = None) -> int:
    """CTAs per SM of the rows GEMV for (fmt, act dtype, M, form) on the current device; the
    tensor-core form needs the shape (N, K: its warps per CTA depend on it)."""
    check_fmt(fmt)
    wo._check_act(act)
    form = _form_for(fmt, M, form)
    if form in MMA_FORMS and (N is None or K is None):
        raise ValueError("ctas_per_sm of the tensor-core form needs N and K (its warps per CTA depend on them)")
    return int(load_extension().occupancy(wo.FORMAT_ID[fmt], act == "bf16", int(N or 1), int(M), int(K or 128),
                                          False, FORM_ID[form]))


def loads(act, pw: wo.PackedWeight, *, sink, form=None) -> int:
    """The rows GEMV's launch with its weight, scale and activation loads alone (XORed; one store
    where the XOR equals :data:`LOADS_KEY`), at the GEMV's CTAs per SM: that launch's access-pattern
    ceiling. ``sink``: int32 CUDA tensor of at least ``geometry(N, M, form, K)['threads']`` words.
    ``form`` as :func:`gemv`. Returns the CTAs per SM it ran at."""
    import torch

    _validate(act, pw, None, torch)
    form = _launch_form(pw.fmt, act.shape[0], form)
    need = geometry(pw.N, act.shape[0], form, pw.K)["threads"]
    if not (isinstance(sink, torch.Tensor) and sink.is_cuda and sink.dtype == torch.int32 and sink.numel() >= need):
        raise ValueError(f"sink must be an int32 CUDA tensor of at least {need} words")
    return int(load_extension().loads(act, pw.w, pw.s, sink, pw.N, pw.K, wo.FORMAT_ID[pw.fmt], LOADS_KEY,
                                      FORM_ID[form]))


def rows_cubin(arch: str = "sm_90"):
    """gemv_rows_ext.cu (every rows kernel, no torch) for ``arch``: what the SASS tests read."""
    from ..toolchain.cubin import compile_cubin

    b = compile_cubin(EXT_SOURCES[1], arch, include=[KERNEL_DIR],
                      key_files=(HEADER, MMA_HEADER, PARAMS_HEADER, *COMMON_HEADERS, EXT_SOURCES[1]))
    if not b.ok:
        raise RuntimeError(f"nvcc failed ({' '.join(b.cmd)}):\n{b.log[-3000:]}")
    return b.cubin
