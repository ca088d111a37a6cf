"""``cutlass_blockwise_sm90``: CUTLASS 3.x's Hopper blockwise-scaled FP8 GEMM, from the headers of the
``nvidia-cutlass`` wheel (tested with 4.2.0.0).

C[M, N] (bf16) = sum over 128-wide K blocks kb of
    a_scale[m, kb] * b_scale[n // 128, kb] * sum_k a[m, k] * b[n, k]

The same operands as ``fp8lab.kernels.baselines.cublaslt_blockwise`` and ``mma_blockwise``:

- ``a``       (M, K)               float8_e4m3fn, row-major (contiguous), 16-byte aligned
- ``a_scale`` (M, K/128)           float32, 1x128 per-token scales, any strides
- ``b``       (N, K)               float8_e4m3fn, row-major = K-major (``nn.Linear.weight``), 16-byte aligned
- ``b_scale`` (ceil(N/128), K/128) float32, 128x128 weight-block scales, any strides
- result      (M, N)               bfloat16, row-major

The kernel (``cutlass_blockwise_sm90.cu``) instantiates
``CollectiveBuilder<Sm90, ..., KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum>`` (the
``MainloopSm90TmaGmmaWarpSpecializedBlockwiseFP8`` collective) with tile 128x128x128, cluster 1x1x1 and
``Sm90BlockwiseScaleConfig<1, 128, 128, MN, K>``: it issues ``wgmma`` (SASS ``QGMMA.64x128x32.F32.E4M3.E4M3``)
into a fresh fp32 accumulator per 128-wide K tile and adds it, scaled, into the main one (promotion).

Configurations (``config=`` name, :data:`CONFIGS`; default :data:`DEFAULT_CONFIG` = the one above): a
compiled *kernel* (:data:`KERNELS`: tile, cluster, cooperative / ping-pong schedule, persistent /
stream-K tile scheduler; one translation unit each, so the extension's kernels compile in parallel) plus
run-time scheduler options (raster order, swizzle). No 128x256 / 256x128 tile: the collective keeps two
fp32 accumulators per consumer warpgroup (main + per-k-tile), 2 x 128 registers per thread for a
128x128 warpgroup tile, over the 232-240 setmaxnreg ceiling (it would spill).

Scale layouts the collective reads (the ``prepare`` step converts once, so timing excludes it):

- SFA: CuTe layout ``((1, Mp), (128, K/128), 1) : ((0, 1), (0, Mp), Mp*K/128)`` -- M-major: the scale
  of (m, k) is at ``(k // 128) * Mp + m``, i.e. a (K/128, Mp) row-major buffer = ``a_scale.t()`` with
  its rows padded from M to ``Mp = round_up(M, 4)``. Why M-major: a tile's 128 per-token scales are
  then one contiguous TMA box (the collective uses TMA for SFA only when it is M-major). Why the
  padding: a TMA global stride must be a multiple of 16 bytes, i.e. Mp % 4 == 0; CUTLASS's
  ``can_implement`` checks exactly that. Padded rows hold 1.0 and only meet rows of A that TMA
  zero-fills (out of bounds), and those output rows are never stored. An ``a_scale`` that is already
  M-major with M % 4 == 0 (what ``mma_blockwise.generate_inputs`` and cuBLASLt use) is used as is.
- SFB: ``((128, ceil(N/128)), (128, K/128), 1) : ((0, K/128), (0, 1), ...)`` -- K-major, which is
  ``b_scale`` row-major as the quantiser writes it (only made contiguous). One weight scale per
  128-wide N tile: the producer warp loads it with cp.async.

Shape rules (ValueError naming each): K % 128 == 0 (the scale block); N % 8 == 0 (the bf16 output
rows must be 16-byte multiples for the TMA store; cuBLASLt needs N % 16); M any >= 1 (TMA zero-fills
partial tiles; this is the arm that runs M = 1, 7, 83 unpadded, where cuBLASLt needs M % 4 == 0);
a, b and the output contiguous and 16-byte aligned.

Everything except the torch wrapper runs without torch or a GPU: the include-dir lookup, the
scale-layout model, shape validation, the standalone nvcc command and its SASS/register summary.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.util
import math
import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np

from . import _checks, mma_blockwise as _mb
from ._build import KERNEL_DIR
from ._checks import need as _need

ARM = "cutlass_blockwise_sm90"

SOURCE = KERNEL_DIR / "cutlass_blockwise_sm90.cu"
HEADER = KERNEL_DIR / "cutlass_blockwise_sm90.h"
CONFIG_HEADER = KERNEL_DIR / "cutlass_blockwise_sm90_config.h"
EXT_SOURCE = KERNEL_DIR / "cutlass_blockwise_sm90_ext.cpp"
PROBE_SOURCE = KERNEL_DIR / "cutlass_blockwise_sm90_probe.cu"
# Every file the extension build depends on: its cache key hashes all of them.
SOURCES = (SOURCE, HEADER, CONFIG_HEADER, EXT_SOURCE)

TILE_MNK = (128, 128, 128)      # the default config's tile
CLUSTER_MNK = (1, 1, 1)         # the default config's cluster
SCALE_BLOCK = 128          # K per activation scale; weight blocks are 128 x 128
N_ALIGN = 8                # bf16 elements in 16 bytes: the TMA store's row granularity
SFA_LD_ALIGN = 4           # fp32 elements in 16 bytes: the SFA TMA descriptor's stride granularity
ARCH = "sm_90a"            # wgmma and setmaxnreg exist only on the arch-specific target

INCLUDE_ENV = "FP8LAB_CUTLASS_INCLUDE"
# A header only a CUTLASS with the Hopper blockwise collective has: the lookup checks for it.
_MARKER = Path("cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp")

# The nvcc flags the kernel needs, beyond the arch. The -U flags undo torch's -D__CUDA_NO_HALF_*
# defaults (CUTLASS's numeric types want the cuda_fp16/bf16 operators); they are no-ops standalone.
NVCC_FLAGS = ("-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
              "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__")
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"



# ---------------------------------------------------------------------------------------------
# Kernel configurations
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Kernel:
    """One compiled instantiation (one translation unit: cutlass_blockwise_sm90.cu with these macros)."""
    name: str
    tile_m: int            # CTA tile M (64: ping-pong's one-warpgroup tile; 128: cooperative's two)
    tile_n: int            # CTA tile N (128 = one weight scale per tile: SFB on cp.async)
    cluster_m: int = 1     # CTAs of a cluster along M: they share (TMA-multicast) the B tile
    cluster_n: int = 1     # CTAs of a cluster along N: they share the A tile
    pingpong: bool = False  # KernelTmaWarpSpecializedPingpongFP8BlockScaledAccum instead of Cooperative
    streamk: bool = False   # cutlass::gemm::StreamKScheduler instead of the persistent scheduler

    @property
    def schedule(self) -> str:
        return ("KernelTmaWarpSpecializedPingpongFP8BlockScaledAccum" if self.pingpong
                else "KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum")

    def defines(self) -> list[str]:
        """The -D flags (or #defines) that select this kernel in cutlass_blockwise_sm90.cu."""
        return [f"FP8LAB_CUTLASS_KERNEL={self.name}", f"FP8LAB_CUTLASS_TILE_M={self.tile_m}",
                f"FP8LAB_CUTLASS_TILE_N={self.tile_n}", f"FP8LAB_CUTLASS_CLUSTER_M={self.cluster_m}",
                f"FP8LAB_CUTLASS_CLUSTER_N={self.cluster_n}", f"FP8LAB_CUTLASS_PINGPONG={int(self.pingpong)}",
                f"FP8LAB_CUTLASS_STREAMK={int(self.streamk)}"]


RASTER = {"heuristic": 0, "along_m": 1, "along_n": 2}   # the .cu's Problem.raster codes
SWIZZLES = (1, 2, 4, 8)                                  # CUTLASS's max_swizzle_size values


@dataclasses.dataclass(frozen=True)
class Config:
    """A kernel plus the tile scheduler's run-time options (no recompile)."""
    name: str
    kernel: str
    raster: str = "heuristic"   # CTA walk order over the tile grid
    swizzle: int = 1            # tiles per swizzle group: CTAs in flight that share an A/B panel in L2

    @property
    def k(self) -> Kernel:
        return KERNELS[self.kernel]


KERNELS = {k.name: k for k in (
    Kernel("coop_128x128", 128, 128),                               # the original arm
    Kernel("pingpong_64x128", 64, 128, pingpong=True),               # epilogue overlapped; less M waste
    Kernel("coop_128x128_c2x1", 128, 128, cluster_m=2),              # B tile multicast to 2 M-neighbours
    Kernel("coop_128x128_c1x2", 128, 128, cluster_n=2),              # A tile multicast to 2 N-neighbours
    Kernel("coop_128x128_streamk", 128, 128, streamk=True),          # no wave-quantisation tail
)}

CONFIGS = {c.name: c for c in (
    Config("coop_128x128", "coop_128x128"),
    Config("coop_128x128_alongm_swz4", "coop_128x128", "along_m", 4),
    Config("coop_128x128_alongn_swz4", "coop_128x128", "along_n", 4),
    Config("pingpong_64x128", "pingpong_64x128"),
    Config("coop_128x128_c2x1", "coop_128x128_c2x1"),
    Config("coop_128x128_c1x2", "coop_128x128_c1x2"),
    Config("coop_128x128_streamk", "coop_128x128_streamk"),
)}
DEFAULT_CONFIG = "coop_128x128"

# Restricts the extension build to these kernels (comma-separated names), e.g. for a quick test build.
KERNELS_ENV = "FP8LAB_CUTLASS_KERNELS"


def get_config(config=None) -> Config:
    """A :class:`Config` by name (None: the default); ValueError listing the known names otherwise."""
    if config is None:
        return CONFIGS[DEFAULT_CONFIG]
    if isinstance(config, Config):
        config = config.name
    if not isinstance(config, str) or config not in CONFIGS:
        raise ValueError(f"unknown cutlass_blockwise_sm90 config {config!r}; known configs: {list(CONFIGS)}")
    return CONFIGS[config]


def get_kernel(name: str) -> Kernel:
    if name not in KERNELS:
        raise ValueError(f"unknown cutlass_blockwise_sm90 kernel {name!r}; known kernels: {list(KERNELS)}")
    return KERNELS[name]


def built_kernels() -> list[str]:
    """The kernels the extension builds: all of :data:`KERNELS`, or ${KERNELS_ENV}'s subset."""
    env = os.environ.get(KERNELS_ENV, "").strip()
    if not env:
        return list(KERNELS)
    names = [n.strip() for n in env.split(",") if n.strip()]
    for n in names:
        get_kernel(n)
    if not names:
        raise ValueError(f"${KERNELS_ENV} names no kernel")
    return [n for n in KERNELS if n in names]   # table order: deterministic build key


def _check_config_consistency() -> None:
    for c in CONFIGS.values():
        if c.kernel not in KERNELS or c.raster not in RASTER or c.swizzle not in SWIZZLES:
            raise AssertionError(f"bad config table entry {c}")


_check_config_consistency()


# Reused from mma_blockwise: the same operands, so the same shapes, reference, inputs and metric.
check_shape = _mb.check_shape
reference = _mb.mma_blockwise_reference
generate_inputs = _mb.generate_inputs
calc_diff = _mb.calc_diff


# ---------------------------------------------------------------------------------------------
# Finding CUTLASS
# ---------------------------------------------------------------------------------------------
class CutlassNotFound(RuntimeError):
    """The CUTLASS/CuTe headers are not where fp8lab looks for them."""


def _wheel_include_dir() -> Path | None:
    # find_spec does not execute cutlass_library/__init__.py (it imports the Python emitter modules).
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None:
        return None
    roots = list(spec.submodule_search_locations or []) or ([os.path.dirname(spec.origin)] if spec.origin else [])
    for root in roots:
        cand = Path(root) / "source" / "include"
        if cand.is_dir():
            return cand
    return None


def cutlass_include_dir() -> Path:
    """The directory holding ``cutlass/`` and ``cute/``: $FP8LAB_CUTLASS_INCLUDE, else the
    ``nvidia-cutlass`` wheel's ``cutlass_library/source/include``. Raises CutlassNotFound."""
    env = os.environ.get(INCLUDE_ENV)
    if env:
        inc, source = Path(env).expanduser(), f"${INCLUDE_ENV}"
    else:
        inc, source = _wheel_include_dir(), "the nvidia-cutlass wheel (cutlass_library)"
        if inc is None:
            raise CutlassNotFound(
                "CUTLASS headers not found: install them with `pip install --no-deps nvidia-cutlass` "
                f"(they land in site-packages/cutlass_library/source/include) or set {INCLUDE_ENV} to a "
                "CUTLASS include directory")
    for need in (Path("cute/tensor.hpp"), _MARKER):
        if not (inc / need).is_file():
            raise CutlassNotFound(f"{inc} (from {source}) has no {need}: need CUTLASS >= 3.9 headers with "
                                  "the Hopper blockwise-scaled FP8 collective")
    return inc.resolve()


def cutlass_version(include: Path | None = None) -> str:
    """'MAJOR.MINOR.PATCH' from cutlass/version.h."""
    text = ((include or cutlass_include_dir()) / "cutlass" / "version.h").read_text()
    parts = [re.search(rf"#define\s+CUTLASS_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise CutlassNotFound("cutlass/version.h has no CUTLASS_MAJOR/MINOR/PATCH")
    return ".".join(p.group(1) for p in parts)


# ---------------------------------------------------------------------------------------------
# Shapes and scale layouts (numpy: the model the tests check the torch conversion against)
# ---------------------------------------------------------------------------------------------
def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def check_shapes(M: int, N: int, K: int) -> None:
    """Raise ValueError naming the violated constraint of this kernel."""
    for name, v in (("M", M), ("N", N), ("K", K)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if v >= 2**31:
            raise ValueError(f"{name} must fit in int32, got {v}")
    if K % SCALE_BLOCK:
        raise ValueError(f"K must be a multiple of {SCALE_BLOCK} (the scale block), got K={K}")
    if N % N_ALIGN:
        raise ValueError(f"N must be a multiple of {N_ALIGN}: each bf16 output row must be a multiple of "
                         f"16 bytes for CUTLASS's TMA store, got N={N}")


def sfa_leading_dim(M: int) -> int:
    """Mp: the padded M extent of the SFA buffer (TMA strides are multiples of 16 bytes)."""
    return _round_up(int(M), SFA_LD_ALIGN)


def sfa_layout(M: int, K: int):
    """CuTe (shape, stride) of SFA as the kernel builds it: ``tile_atom_to_shape_SFA((Mp, N, K, 1))`` of
    ``Sm90BlockwiseScaleConfig<1, 128, 128, MN, K>``, mode order ((m), (k), l)."""
    Mp, kb = sfa_leading_dim(M), K // SCALE_BLOCK
    return (((1, Mp), (SCALE_BLOCK, kb), 1), ((0, 1), (0, Mp), Mp * kb))


def sfb_layout(N: int, K: int):
    """CuTe (shape, stride) of SFB: ``tile_atom_to_shape_SFB((M, N, K, 1))``, K-major."""
    nb, kb = math.ceil(N / SCALE_BLOCK), K // SCALE_BLOCK
    return (((SCALE_BLOCK, nb), (SCALE_BLOCK, kb), 1), ((0, kb), (0, 1), nb * kb))


def cute_offset(coord, shape, stride) -> int:
    """Offset of a coordinate in a CuTe layout (hierarchical shape/stride), CuTe's semantics: an integer
    coordinate for a tuple mode is split colexicographically (first sub-mode fastest)."""
    if isinstance(shape, tuple):
        if isinstance(coord, tuple):
            if len(coord) != len(shape):
                raise ValueError(f"coordinate {coord} does not match shape {shape}")
            return sum(cute_offset(c, s, d) for c, s, d in zip(coord, shape, stride))
        total = int(np.prod(_flatten(shape)))
        if not 0 <= coord < total:
            raise ValueError(f"coordinate {coord} out of range for shape {shape} (size {total})")
        off, rest = 0, int(coord)
        for s, d in zip(shape, stride):
            size = int(np.prod(_flatten(s)))
            off += cute_offset(rest % size, s, d)
            rest //= size
        return off
    if not 0 <= coord < shape:
        raise ValueError(f"coordinate {coord} out of range for extent {shape}")
    return int(coord) * int(stride)


def _flatten(t):
    return [x for s in t for x in _flatten(s)] if isinstance(t, tuple) else [t]


def prepare_sfa_numpy(a_scale) -> np.ndarray:
    """(M, K/128) scales -> the (K/128, Mp) float32 buffer SFA reads (padding rows = 1.0)."""
    s = np.asarray(a_scale, dtype=np.float32)
    if s.ndim != 2:
        raise ValueError(f"a_scale must be 2-D (M, K/128), got shape {s.shape}")
    M, kb = s.shape
    out = np.ones((kb, sfa_leading_dim(M)), np.float32)
    out[:, :M] = s.T
    return out


def prepare_sfb_numpy(b_scale) -> np.ndarray:
    """(ceil(N/128), K/128) scales -> the row-major buffer SFB reads (a contiguous copy)."""
    s = np.asarray(b_scale, dtype=np.float32)
    if s.ndim != 2:
        raise ValueError(f"b_scale must be 2-D (ceil(N/128), K/128), got shape {s.shape}")
    return np.ascontiguousarray(s)


def parse_cute_layout(text: str):
    """'((_1,8),(_128,3),1):((_0,_1),(_0,8),24)' (cute::print of a Layout) -> (shape, stride) tuples."""
    try:
        shape, stride = (ast.literal_eval(part.replace("_", "")) for part in text.strip().split(":"))
    except (ValueError, SyntaxError) as e:
        raise ValueError(f"not a CuTe layout: {text!r}") from e
    return shape, stride


def probe_layouts(M: int, N: int, K: int, *, include: Path | None = None) -> dict:
    """CuTe's own SFA/SFB layouts for one problem, from the host-only probe
    (``cutlass_blockwise_sm90_probe.cu``, compiled once per content hash into the cache: ~10 s of nvcc).

    Returns dict(sfa=(shape, stride), sfb=(shape, stride), sfa_offsets (M, K) int array,
    sfb_offsets (N, K) int array): what the kernel's ScaleConfig maps each (m, k) / (n, k) to.
    """
    from ..toolchain import tools
    from ..paths import cache_dir

    check_shapes(M, N, K)
    include = include or cutlass_include_dir()
    h = hashlib.sha256()
    for p in (PROBE_SOURCE, CONFIG_HEADER):
        h.update(p.read_bytes())
    h.update(f"{include} {cutlass_version(include)} {tools.tool_version('nvcc')}".encode())
    exe = cache_dir("cutlass_probe") / f"probe_{h.hexdigest()[:16]}"
    if not exe.is_file():
        tmp = exe.with_name(f"{exe.name}.{os.getpid()}.tmp")
        tools.run_tool("nvcc", ["-std=c++17", "--expt-relaxed-constexpr", f"-I{include}", f"-I{KERNEL_DIR}",
                                "-o", tmp, PROBE_SOURCE], timeout=600)
        os.replace(tmp, exe)  # atomic: a half-written probe is never found
    out = subprocess.run([str(exe), str(M), str(N), str(K)], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    return {"sfa": parse_cute_layout(lines["SFA"]), "sfb": parse_cute_layout(lines["SFB"]),
            "sfa_offsets": np.array(lines["SFA_OFFSETS"].split(), dtype=np.int64).reshape(M, K),
            "sfb_offsets": np.array(lines["SFB_OFFSETS"].split(), dtype=np.int64).reshape(N, K)}


# ---------------------------------------------------------------------------------------------
# Standalone nvcc (no torch, no GPU): registers, spills, SASS
# ---------------------------------------------------------------------------------------------
def nvcc_args(output, *, include: Path | None = None, cubin: bool = True, extra=(), kernel: str | None = None
              ) -> list[str]:
    """nvcc arguments that compile one kernel (default: the default config's) alone for sm_90a
    (``-cubin`` or ``-c``)."""
    include = include or cutlass_include_dir()
    k = get_kernel(kernel or CONFIGS[DEFAULT_CONFIG].kernel)
    return ["-std=c++17", "-arch=sm_90a", *NVCC_FLAGS, *(f"-D{d}" for d in k.defines()), f"-I{include}",
            f"-I{KERNEL_DIR}", "-Xptxas=-v", "-cubin" if cubin else "-c", *extra, "-o", str(output), str(SOURCE)]


SASS_OPCODES = ("QGMMA", "HGMMA", "HMMA", "QMMA", "USETMAXREG", "UTMALDG", "UTMASTG", "LDGSTS", "STL", "LDL")
_SASS_OP = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)")
_SETMAXREG = re.compile(r"USETMAXREG\.(\w+)\.\w+\s+(?:U?P\w+,\s*)?(0x[0-9a-f]+|\d+)")


def sass_summary(sass: str) -> dict:
    """Opcode counts that say what the kernel is: QGMMA (FP8 wgmma) present, no HMMA fallback, the
    warp-specialised register split (setmaxnreg targets), TMA loads/stores, spills."""
    ops = [o.split(".")[0] for o in _SASS_OP.findall(sass)]
    out = {f"sass_{k.lower()}": ops.count(k) for k in SASS_OPCODES}
    out["sass_qgmma_shapes"] = " ".join(sorted(set(re.findall(r"QGMMA\.(\d+x\d+x\d+\.\w+\.\w+\.\w+)", sass))))
    regs = {kind.lower(): int(v, 0) for kind, v in _SETMAXREG.findall(sass)}
    out["setmaxnreg_alloc"] = regs.get("try_alloc", regs.get("alloc"))
    out["setmaxnreg_dealloc"] = regs.get("dealloc")
    out["sass_instructions"] = len(ops)
    return out


def compile_standalone(out_dir=None, *, include: Path | None = None, kernel: str | None = None) -> dict:
    """Compile one kernel of the .cu alone to a cubin (toolchain.cubin's cache: keyed on fp8lab's
    sources, the CUTLASS version and folder, the defines and nvcc); return compile seconds (of the
    compile that made the entry), ptxas registers/spills and :func:`sass_summary`; ``out_dir``: a
    copy of the cubin there. Minutes of nvcc when not cached: CUTLASS 3.x templates are heavy."""
    import shutil

    from ..toolchain import resources, tools
    from ..toolchain.cubin import compile_cubin

    include = include or cutlass_include_dir()
    k = get_kernel(kernel or CONFIGS[DEFAULT_CONFIG].kernel)
    b = compile_cubin(SOURCE, "sm_90a", flags=("-std=c++17", *NVCC_FLAGS, "-Xptxas=-v"), defines=k.defines(),
                      include=[include, KERNEL_DIR], key_files=SOURCES,
                      extra_key=f"cutlass {cutlass_version(include)} at {include}", timeout=1800)
    if not b.ok:
        raise RuntimeError(f"nvcc failed (exit {b.rc}): {' '.join(b.cmd)}\n{b.log[-3000:]}")
    compile_s = b.compile_s
    ptx = resources.parse_ptxas_v(b.log)
    sass = tools.run_tool("cuobjdump", ["-sass", b.cubin], timeout=300).stdout
    if out_dir is not None:
        shutil.copy(b.cubin, Path(out_dir) / "cutlass_blockwise_sm90.cubin")
    kernels = {k: v for k, v in ptx.items() if "GemmUniversal" in k}
    if len(kernels) != 1:
        raise RuntimeError(f"expected one GemmUniversal kernel in the ptxas log, got {list(ptx)}")
    (name, p), = kernels.items()
    return {"config_kernel": kernel or CONFIGS[DEFAULT_CONFIG].kernel, "kernel": name, "arch": p["arch"], "registers": p["registers"], "stack_bytes": p["stack_bytes"],
            "spill_store_bytes": p["spill_store_bytes"], "spill_load_bytes": p["spill_load_bytes"],
            "compile_s": round(compile_s, 1), "nvcc": tools.tool_version("nvcc"),
            "cutlass": cutlass_version(include), **sass_summary(sass)}


# ---------------------------------------------------------------------------------------------
# Availability and the torch extension
# ---------------------------------------------------------------------------------------------
def available(device=None) -> tuple[bool, str]:
    """(True, '') when this arm can run here (on ``device``, default the current one), else (False, why)."""
    try:
        cutlass_include_dir()
    except CutlassNotFound as e:
        return False, str(e)
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA device visible to torch"
    cc = torch.cuda.get_device_capability(device)
    if cc != (9, 0):
        return False, (f"needs an sm_90 GPU (Hopper: wgmma, TMA, setmaxnreg; sm_90a code does not run on other "
                       f"archs), device has compute capability {cc[0]}.{cc[1]}")
    if not hasattr(torch, "float8_e4m3fn"):
        return False, f"torch {torch.__version__} has no float8_e4m3fn"
    return True, ""


def _build_flags() -> list[str]:
    return [*NVCC_FLAGS, GENCODE]


_EXT = None
LAST_BUILD_S: float | None = None   # seconds the last load_extension() took (build or cached import)


def _write_kernel_sources(kernels: list[str], gen_dir: Path) -> list[Path]:
    """One wrapper TU per kernel (its #defines + an #include of the .cu) and the binding's kernel list,
    written into gen_dir (inside the content-hashed cache); returns the wrapper paths."""
    gen_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in kernels:
        body = "".join(f"#define {d.replace('=', ' ', 1)}\n" for d in KERNELS[name].defines())
        body = (f"// generated by fp8lab.kernels.cutlass_blockwise_sm90: kernel {name}\n{body}"
                f'#include "{SOURCE}"\n')
        path = gen_dir / f"cutlass_sm90_k_{name}.cu"
        if not path.is_file() or path.read_text() != body:
            path.write_text(body)
        paths.append(path)
    inc = ("// generated: the kernels compiled into this build\n#define FP8LAB_CUTLASS_KERNEL_LIST(X) "
           + " ".join(f"X({n})" for n in kernels) + "\n")
    inc_path = gen_dir / "cutlass_blockwise_sm90_kernels.inc"
    if not inc_path.is_file() or inc_path.read_text() != inc:
        inc_path.write_text(inc)
    return paths


def load_extension(verbose: bool = False):
    """Build (once per content hash) and import the torch extension.

    Build directory: <cache>/torch_ext/cutlass_sm90_<hash> (fp8lab.paths.cache_dir; $FP8LAB_CACHE_DIR
    overrides), the hash covering the sources, the kernel table, torch/CUDA/CUTLASS versions, the include
    dir and the flags. Each kernel of :func:`built_kernels` is its own translation unit (~1.5-3 min of
    nvcc each, a few GB of host memory), compiled in parallel by ninja: MAX_JOBS (default: all cores)
    >= the number of kernels makes the build as long as the slowest one.
    """
    global _EXT, LAST_BUILD_S
    if _EXT is not None:
        return _EXT
    import torch

    from ..paths import cache_dir
    from ._build import extension_digest, load_torch_extension

    include = cutlass_include_dir()
    kernels = built_kernels()
    table = [dataclasses.astuple(KERNELS[n]) for n in kernels]
    digest = extension_digest(SOURCES, torch, f"cutlass={cutlass_version(include)} include={include} "
                              f"flags={_build_flags()} kernels={table}", gpu_archs=False)
    gen_dir = cache_dir("torch_ext", f"cutlass_sm90_src_{digest}")
    wrappers = _write_kernel_sources(kernels, gen_dir)
    # An -arch flag in extra_cuda_cflags already stops torch adding its own -gencode; the arch list is
    # set too, in case a torch version does not: a plain sm_90 pass would hit the .cu's #error.
    env = {"TORCH_CUDA_ARCH_LIST": "9.0a", "MAX_JOBS": os.environ.get("MAX_JOBS", str(os.cpu_count() or 1))}
    t0 = time.perf_counter()
    _EXT = load_torch_extension("cutlass_sm90", [*wrappers, EXT_SOURCE], digest=digest,
                                include_paths=[KERNEL_DIR, gen_dir, include], cflags=["-O3", "-DNDEBUG"],
                                cuda_cflags=_build_flags(), env=env, verbose=verbose)
    LAST_BUILD_S = time.perf_counter() - t0
    return _EXT


def _ext_for(config: Config):
    """The extension, with config's kernel compiled in (ValueError when the build left it out)."""
    ext = load_extension()
    if config.kernel not in ext.kernels():
        raise ValueError(f"config {config.name!r} needs kernel {config.kernel!r}, not in this build "
                         f"(${KERNELS_ENV} limits it to {ext.kernels()})")
    return ext


def kernel_info(config=None) -> dict:
    """What was instantiated for ``config``, for a results table's metadata (builds/loads the extension)."""
    c = get_config(config)
    k = c.k
    ext = _ext_for(c)
    return {"arm": ARM, "config": c.name, "kernel": k.name, "tile_mnk": f"{k.tile_m}x{k.tile_n}x128",
            "cluster_mnk": f"{k.cluster_m}x{k.cluster_n}x1", "scale_granularity_mnk": "1x128x128",
            "schedule": k.schedule, "scheduler": "stream-k" if k.streamk else "persistent",
            "raster": c.raster, "swizzle": c.swizzle, "stages": ext.stages(k.name), "threads": ext.threads(k.name),
            "shared_memory_bytes": ext.shared_memory_bytes(k.name), "cutlass": cutlass_version()}


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
        _checks.bf16_out(out, M, N, a, torch, align=16, why="the TMA store")
    return M, N, K


def prepare_sfa(a_scale, torch):
    """(M, K/128) fp32 scales, any strides -> ((K/128, Mp) contiguous buffer, Mp): see the module
    docstring. Zero-copy when a_scale is already M-major with M % 4 == 0 and 16-byte aligned."""
    M, kb = a_scale.shape
    Mp = sfa_leading_dim(M)
    t = a_scale.t()
    if Mp == M and t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t, Mp
    sfa = torch.ones((kb, Mp), dtype=torch.float32, device=a_scale.device)
    sfa[:, :M].copy_(t)
    return sfa, Mp


class CutlassBlockwise:
    """Operands laid out once the way the CUTLASS collective wants them and its arguments (TMA
    descriptors) built once, so a timing loop measures only the GEMM: ``CutlassBlockwise(a, a_scale, b,
    b_scale)()`` -> (M, N) bf16.

    The output buffer is owned by the instance and reused by every call (pass ``out=`` to choose it):
    clone a result you want to keep across calls. The instance keeps references to all operands.
    """

    def __init__(self, a, a_scale, b, b_scale, *, out=None, config=None):
        import torch

        self.config = get_config(config)
        M, N, K = _validate(a, a_scale, b, b_scale, out, torch)
        ok, why = available(a.device)
        if not ok:
            raise RuntimeError(f"{ARM} is not available here: {why}")
        self.M, self.N, self.K = M, N, K
        self.sfa, self.sfa_ld = prepare_sfa(a_scale, torch)
        self.sfb = b_scale.contiguous()
        self.a, self.b = a, b
        self.out = out if out is not None else torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
        ext = _ext_for(self.config)
        sched = (self.config.kernel, RASTER[self.config.raster], self.config.swizzle)
        ws = ext.workspace_size(*sched, M, N, K, self.sfa_ld)
        self.workspace = torch.empty(max(ws, 16), dtype=torch.uint8, device=a.device)
        self._plan = ext.Plan(*sched, self.a, self.sfa, self.b, self.sfb, self.out, self.workspace)

    def __call__(self):
        return self._plan.run()


def cutlass_blockwise_sm90(a, a_scale, b, b_scale, *, out=None, config=None):
    """a (M, K) e4m3, a_scale (M, K/128) fp32, b (N, K) e4m3, b_scale (ceil(N/128), K/128) fp32 ->
    (M, N) bf16, through CUTLASS's Hopper blockwise-scaled FP8 GEMM (``config``: a :data:`CONFIGS` name,
    default :data:`DEFAULT_CONFIG`). Converts the scales and builds the arguments on every call: use
    :class:`CutlassBlockwise` to time."""
    import torch

    c = get_config(config)
    M, N, K = _validate(a, a_scale, b, b_scale, out, torch)
    ok, why = available(a.device)
    if not ok:
        raise RuntimeError(f"{ARM} is not available here: {why}")
    sfa, _ = prepare_sfa(a_scale, torch)
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    ext = _ext_for(c)
    sched = (c.kernel, RASTER[c.raster], c.swizzle)
    ws = torch.empty(max(ext.workspace_size(*sched, M, N, K, sfa.shape[1]), 16), dtype=torch.uint8, device=a.device)
    return ext.run(*sched, a, sfa, b, b_scale.contiguous(), out, ws)
