"""``wgmma_blockwise``: fp8lab's own Hopper blockwise-scaled FP8 GEMM (issue 22, target 2), written
in CUDA with inline PTX (``wgmma_blockwise.cu``; no CUTLASS): persistent, warp-specialised, TMA +
wgmma, 128 x 128 tiles, per-128-K promotion.

C[M, N] (bf16) = sum over 128-wide K blocks kb of
    a_scale[m, kb] * b_scale[n // 128, kb] * sum_k a[m, k] * b[n, k]

The operands are those of ``cutlass_blockwise_sm90`` and ``baselines.cublaslt_blockwise``: a (M, K)
and b (N, K) e4m3 row-major, a_scale (M, K/128) fp32 per-token scales (any strides: converted once to
the M-major (K/128, round_up(M, 4)) buffer the scale TMA reads, as ``cutlass_blockwise_sm90.prepare_sfa``
does), b_scale (ceil(N/128), K/128) fp32 128 x 128 weight-block scales; result (M, N) bf16. K % 128 == 0,
N % 8 == 0, any M >= 1.

Two variants (:data:`VARIANTS`) of the consumers' K loop, the A/B this kernel exists for:

- ``wait``: each K block's wgmmas complete (wait_group 0) before the block is promoted (main +=
  temp x a_scale x b_scale), the order of CUTLASS's blockwise collective and of DeepGEMM: the tensor
  cores wait while each consumer thread scales its 64 values.
- ``overlap`` (the default): two temporary accumulators; block kb - 1 is promoted while block kb's
  wgmmas run (wait_group 1), so the promotion is hidden under the MMAs. Same operations in the same
  order: the two variants' outputs are bit-identical.

Two tile widths (:data:`TILE_WIDTHS`): 128 columns (one weight scale block per tile) and 112 (a tile
may straddle two scale blocks; each n8 column group takes its own). ``tile_n=None`` picks the width
whose last wave leaves the fewest SMs idle (:func:`pick_tile_n`): at N = 7168, M = 1024 on 132 SMs,
448 tiles of 128 take 4 waves at 85% occupancy, 512 tiles of 112 take 4 at 97%.

The layout of the kernel (producer warpgroup, two consumer warpgroups of 64 rows, 6 or 7 stages,
grouped tile walk, direct bf16 stores) is described in the .cu's head.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

from . import _checks
from . import cutlass_blockwise_sm90 as _cb
from ._build import COMMON_HEADERS, KERNEL_DIR
from ._checks import need as _need

ARM = "wgmma_blockwise_sm90"
SOURCE = KERNEL_DIR / "wgmma_blockwise.cu"
HEADER = KERNEL_DIR / "wgmma_blockwise.h"
EXT_SOURCE = KERNEL_DIR / "wgmma_blockwise_ext.cpp"
SOURCES = (SOURCE, HEADER, EXT_SOURCE)
#: the extension's translation units
EXT_SOURCES = (SOURCE, EXT_SOURCE)
#: every file the extension's cache key hashes (the sources and every header they include)
EXT_DIGEST_SOURCES = (*SOURCES, *COMMON_HEADERS)

VARIANTS = ("wait", "overlap")
DEFAULT_VARIANT = "overlap"
VARIANT_ID = {"wait": 0, "overlap": 1}
#: tile rows per group of the persistent tile walk (the CTAs running at once share B tiles in L2)
DEFAULT_GROUP_M = 8
TILE_MNK = (128, 128, 128)
#: columns of N per tile the kernel is built for (wgmma m64n128k32 / m64n112k32)
TILE_WIDTHS = (128, 112)
TILE_M = 128
SCALE_BLOCK = 128
N_ALIGN = 8
ARCH = "sm_90a"
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"
NVCC_FLAGS = ("-O3", "-DNDEBUG", "-std=c++17")

#: the kernel's entry names in the cubin, by variant (template <BN, STAGES, kOverlap>)
_KERNEL_RE = re.compile(r"wgmma_blockwise_kernelILi(\d+)ELi(\d+)ELb([01])E")

reference = _cb.reference
calc_diff = _cb.calc_diff


#: a narrower tile reads each A tile for fewer columns (more shared-memory traffic per MMA): it is
#: picked only when its modelled work per SM is at least this much smaller
NARROW_TILE_MARGIN = 0.95


def pick_tile_n(M: int, N: int, sms: int) -> int:
    """The tile width of :data:`TILE_WIDTHS` with the least work per SM in the persistent walk,
    ceil(tiles / sms) waves x the width (a wave of narrower tiles is shorter): 112 only where that
    is below :data:`NARROW_TILE_MARGIN` x 128's. CPU."""
    for name, v in (("M", M), ("N", N), ("sms", sms)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")

    def cost(bn):
        tiles = math.ceil(M / TILE_M) * math.ceil(N / bn)
        return math.ceil(tiles / sms) * bn
    return 112 if cost(112) < NARROW_TILE_MARGIN * cost(128) else 128


def check_shapes(M: int, N: int, K: int) -> None:
    """ValueError naming the rule each shape breaks."""
    for name, v in (("M", M), ("N", N), ("K", K)):
        _need(isinstance(v, int) and v >= 1, f"{name} must be a positive integer, got {v!r}")
    _need(K % SCALE_BLOCK == 0, f"K must be a multiple of {SCALE_BLOCK} (the scale block), got {K}")
    _need(N % N_ALIGN == 0, f"N must be a multiple of {N_ALIGN} (bf16 pairs stored per thread, 16-byte "
                            f"TMA rows of B), got {N}")


def get_variant(variant=None) -> str:
    v = DEFAULT_VARIANT if variant is None else variant
    _need(v in VARIANTS, f"variant must be one of {VARIANTS}, got {variant!r}")
    return v


# ---------------------------------------------------------------------------------------------
# CPU: the standalone compile, its registers and SASS
# ---------------------------------------------------------------------------------------------
def _functions(sass: str) -> dict:
    """cuobjdump -sass text -> {function name: its SASS}."""
    parts = re.split(r"^\s*Function : (\S+)\s*$", sass, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def compile_standalone(out_dir=None) -> dict:
    """Compile the .cu alone to an sm_90a cubin (toolchain.cubin's cache); return, per variant, the
    ptxas registers / spills and :func:`cutlass_blockwise_sm90.sass_summary` of its kernel, plus the
    count of wgmma fences (WARPGROUP.ARRIVE) and waits (WARPGROUP.DEPBAR) in the SASS: ptxas inserts
    waits of its own where it cannot prove the accumulators safe, which would serialise the MMAs."""
    from ..toolchain import resources, tools
    from ..toolchain.cubin import compile_cubin

    b = compile_cubin(SOURCE, ARCH, flags=(*NVCC_FLAGS, "-Xptxas=-v"), include=[KERNEL_DIR],
                      key_files=(HEADER, *COMMON_HEADERS), timeout=600)
    if not b.ok:
        raise RuntimeError(f"nvcc failed (exit {b.rc}): {' '.join(b.cmd)}\n{b.log[-3000:]}")
    ptx = resources.parse_ptxas_v(b.log)
    sass = tools.run_tool("cuobjdump", ["-sass", b.cubin], timeout=300).stdout
    if out_dir is not None:
        shutil.copy(b.cubin, Path(out_dir) / "wgmma_blockwise.cubin")
    funcs = _functions(sass)
    out = {}
    for name, p in ptx.items():
        m = _KERNEL_RE.search(name)
        if not m:
            continue
        variant = VARIANTS[int(m.group(3))]
        if int(m.group(1)) != 128:
            variant = f"{variant}/{int(m.group(1))}"     # the narrower tile: 'wait/112', 'overlap/112'
        text = funcs.get(name, "")
        out[variant] = {"kernel": name, "tile_n": int(m.group(1)), "stages": int(m.group(2)),
                        "registers": p["registers"], "stack_bytes": p["stack_bytes"],
                        "spill_store_bytes": p["spill_store_bytes"], "spill_load_bytes": p["spill_load_bytes"],
                        "wgmma_fences": text.count("WARPGROUP.ARRIVE"),
                        "wgmma_waits": len(re.findall(r"WARPGROUP\.DEPBAR", text)),
                        "compile_s": round(b.compile_s, 1), **_cb.sass_summary(text)}
    want = {*VARIANTS, *(f"{v}/{bn}" for v in VARIANTS for bn in TILE_WIDTHS if bn != 128)}
    if set(out) != want:
        raise RuntimeError(f"expected one kernel per variant and tile width {sorted(want)} in the ptxas log, got {list(ptx)}")
    return out


# ---------------------------------------------------------------------------------------------
# Availability and the torch extension
# ---------------------------------------------------------------------------------------------
def available(device=None) -> tuple[bool, str]:
    """(True, '') when this arm can run here, else (False, why)."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA device visible to torch"
    cc = torch.cuda.get_device_capability(device)
    if cc != (9, 0):
        return False, (f"needs an sm_90 GPU (Hopper: wgmma, TMA, setmaxnreg; sm_90a code runs on no other "
                       f"arch), device has compute capability {cc[0]}.{cc[1]}")
    if not hasattr(torch, "float8_e4m3fn"):
        return False, f"torch {torch.__version__} has no float8_e4m3fn"
    return True, ""


def load_extension(verbose: bool = False):
    """Build (once per content hash: ~20 s of nvcc) and import the torch extension."""
    from ._build import extension

    return extension("wgmma_blockwise", EXT_SOURCES, EXT_DIGEST_SOURCES, verbose=verbose,
                     include_paths=[KERNEL_DIR], cflags=["-O3", "-DNDEBUG"], cuda_cflags=[*NVCC_FLAGS, GENCODE],
                     env={"TORCH_CUDA_ARCH_LIST": "9.0a"})


def _validate(a, a_scale, b, b_scale, out, torch) -> tuple[int, int, int]:
    _checks.w8a8_operands(a, a_scale, b, b_scale, torch, aligned_for="TMA")
    M, K = a.shape
    N = b.shape[0]
    _need(b.shape[1] == K, f"a is (M, K) = {tuple(a.shape)} and b must be (N, K) with the same K, got "
                           f"{tuple(b.shape)}")
    check_shapes(M, N, K)
    kb, nb = K // SCALE_BLOCK, math.ceil(N / SCALE_BLOCK)
    _need(tuple(a_scale.shape) == (M, kb), f"a_scale must be (M, K/128) = {(M, kb)}, got {tuple(a_scale.shape)}")
    _need(tuple(b_scale.shape) == (nb, kb),
          f"b_scale must be (ceil(N/128), K/128) = {(nb, kb)}, got {tuple(b_scale.shape)}")
    if out is not None:
        _checks.bf16_out(out, M, N, a, torch, align=4, why="bf16 pairs stored per thread")
    return M, N, K


class WgmmaBlockwise:
    """Scales laid out once (the per-token scales M-major), so a timing loop measures only the GEMM:
    ``WgmmaBlockwise(a, a_scale, b, b_scale)()`` -> (M, N) bf16 in ``self.out`` (reused by every
    call; pass ``out=`` to choose it). ``variant``: one of :data:`VARIANTS`; ``group_m``: tile rows
    per group of the tile walk; ``tile_n``: one of :data:`TILE_WIDTHS`, or None for
    :func:`pick_tile_n`'s. The tensor maps are encoded on every call (host only, ~1 us)."""

    def __init__(self, a, a_scale, b, b_scale, *, out=None, variant=None, group_m: int = DEFAULT_GROUP_M,
                 tile_n: int | None = None):
        import torch

        self.variant = get_variant(variant)
        _need(isinstance(group_m, int) and group_m >= 1, f"group_m must be a positive integer, got {group_m!r}")
        _need(tile_n is None or (not isinstance(tile_n, bool) and tile_n in TILE_WIDTHS),
              f"tile_n must be one of {TILE_WIDTHS} or None, got {tile_n!r}")
        M, N, K = _validate(a, a_scale, b, b_scale, out, torch)
        ok, why = available(a.device)
        if not ok:
            raise RuntimeError(f"{ARM} is not available here: {why}")
        self.M, self.N, self.K, self.group_m = M, N, K, group_m
        self.sfa, self.sfa_ld = _cb.prepare_sfa(a_scale, torch)
        self.sfb = b_scale.contiguous()
        self.a, self.b = a, b
        self.out = out if out is not None else torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
        self.sms = torch.cuda.get_device_properties(a.device).multi_processor_count
        self.tile_n = pick_tile_n(M, N, self.sms) if tile_n is None else int(tile_n)
        self._ext = load_extension()

    def __call__(self):
        return self._ext.run(self.a, self.sfa, self.b, self.sfb, self.out, VARIANT_ID[self.variant], self.group_m,
                             self.sms, self.tile_n)


def wgmma_blockwise(a, a_scale, b, b_scale, *, out=None, variant=None, group_m: int = DEFAULT_GROUP_M,
                    tile_n: int | None = None):
    """a (M, K) e4m3, a_scale (M, K/128) fp32, b (N, K) e4m3, b_scale (ceil(N/128), K/128) fp32 ->
    (M, N) bf16. Converts the per-token scales on every call: use :class:`WgmmaBlockwise` to time."""
    return WgmmaBlockwise(a, a_scale, b, b_scale, out=out, variant=variant, group_m=group_m, tile_n=tile_n)()
