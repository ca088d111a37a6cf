"""``triton_blockwise``: Triton W8A8 GEMM with DeepSeek-style blockwise FP8 scales.

    out[m, n] = sum_kb  a_scale[m, kb] * b_scale[n // 128, kb] * sum_{k in block kb} A[m, k] * B[n, k]

A is e4m3 [M, K] with one fp32 scale per token per 128-wide K block (1x128), B is e4m3
[N, K] (the weight, K-major: "TN") with one fp32 scale per 128x128 block; out is bf16 [M, N].
``tl.dot`` on two e4m3 tiles is an FP8 tensor-core MMA (wgmma / QGMMA on sm_90 for
BLOCK_M >= 64, mma.sync / QMMA on sm_89), so the scales cannot go inside the MMA: the
fp32 partial product has to be scaled outside it ("promotion"). Two main loops:

- ``per_step``: every BLOCK_K = 32 step issues a fresh ``tl.dot`` into a zero fp32 tile,
  scales it and adds it to the accumulator. Four scale multiplies (and a second live fp32
  tile) per 128-wide K block: the register-hungry way of seed 000's first kernel.
- ``per_block``: the dots of one 128-wide scale block accumulate in the MMA's own
  accumulator (``tl.dot(a, b, blk)``) and are promoted once per block. With
  BLOCK_K = 128 (the default) that is one ``tl.dot`` per scale block.

Two entry points:

- :func:`blockwise_fp8_gemm` runs on a GPU (torch imported lazily), validates its inputs
  and autotunes over real tile configs.
- :func:`triton_resource_usage` compiles one config for sm_89 / sm_90 with **no GPU**
  and returns registers, spills, shared memory and the cubin (for ``fp8lab.sass``).
"""

from __future__ import annotations

import functools
import re
import tempfile
from pathlib import Path

import triton
import triton.language as tl

SCALE_BLOCK = 128  # the recipe's K (and weight-N) block: fixed by the checkpoint format
VARIANTS = ("per_step", "per_block")
# BLOCK_K each variant uses unless told otherwise; per_step at 32 mirrors seed 000's slice.
DEFAULT_BLOCK_K = {"per_step": 32, "per_block": 128}


@triton.jit
def _blockwise_fp8_kernel(
    a_ptr,  # (M, K) float8_e4m3fn, row-major: activations
    b_ptr,  # (N, K) float8_e4m3fn, row-major: weights, K contiguous ("TN")
    c_ptr,  # (M, N) bfloat16, row-major: output
    as_ptr,  # (M, ceil(K/128)) float32, any strides: 1x128 per-token activation scales
    bs_ptr,  # (ceil(N/128), ceil(K/128)) float32, any strides: 128x128 weight scales
    M, N, K,  # int32 problem size
    stride_am,  # int32, elements between rows of A (== K when contiguous)
    stride_bn,  # int32, elements between rows of B (== K when contiguous)
    stride_cm,  # int32, elements between rows of C (== N when contiguous)
    stride_asm, stride_ask,  # int32 strides of a_scale (M-major (1, M) as cuBLASLt wants, or row-major)
    stride_bsn, stride_bsk,  # int32 strides of b_scale
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,  # rows of output tiles launched together, for L2 reuse of B
    PER_BLOCK: tl.constexpr,  # False: promote every BLOCK_K step; True: once per 128-K block
):
    # Grouped ("swizzled") launch order: GROUP_M consecutive programs share one column of
    # B tiles, so the weight tile is still in L2 when the neighbouring rows ask for it.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    # Clamp rows for the loads so ragged tiles read valid memory; the store is masked.
    rows_a = tl.where(mask_m, offs_m, 0)
    cols_b = tl.where(mask_n, offs_n, 0)
    a_ptrs = a_ptr + rows_a[:, None] * stride_am + offs_k[None, :]  # (BLOCK_M, BLOCK_K)
    # B is loaded as a (BLOCK_K, BLOCK_N) tile with K contiguous: the K-major operand
    # layout the FP8 MMAs require, without a transpose in registers.
    b_ptrs = b_ptr + cols_b[None, :] * stride_bn + offs_k[:, None]  # (BLOCK_K, BLOCK_N)
    # One weight scale per output column, looked up per column rather than once per
    # program: correct for any BLOCK_N, also when a tile straddles two 128-wide N blocks.
    bs_ptrs = bs_ptr + (cols_b // 128) * stride_bsn  # (BLOCK_N,)
    as_ptrs = as_ptr + rows_a * stride_asm  # (BLOCK_M,)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if PER_BLOCK:
        STEPS: tl.constexpr = 128 // BLOCK_K
        for kb in range(0, tl.cdiv(K, 128)):
            blk = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            # static_range unrolls, so the outer loop is the one Triton software-pipelines.
            for s in tl.static_range(STEPS):
                k0 = kb * 128 + s * BLOCK_K
                k_ok = (k0 + offs_k) < K
                a = tl.load(a_ptrs + k0, mask=k_ok[None, :], other=0.0)
                b = tl.load(b_ptrs + k0, mask=k_ok[:, None], other=0.0)
                blk = tl.dot(a, b, blk)
            sa = tl.load(as_ptrs + kb * stride_ask)
            sb = tl.load(bs_ptrs + kb * stride_bsk)
            acc += blk * sa[:, None] * sb[None, :]
    else:
        for k0 in range(0, K, BLOCK_K):
            k_ok = (k0 + offs_k) < K
            a = tl.load(a_ptrs + k0, mask=k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs + k0, mask=k_ok[:, None], other=0.0)
            kb = k0 // 128
            sa = tl.load(as_ptrs + kb * stride_ask)
            sb = tl.load(bs_ptrs + kb * stride_bsk)
            # A fresh fp32 tile per step, scaled before it joins the accumulator: two live
            # (BLOCK_M, BLOCK_N) fp32 tiles and 128/BLOCK_K scale multiplies per 128-K block.
            acc += tl.dot(a, b) * sa[:, None] * sb[None, :]

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(tl.bfloat16), mask=mask_m[:, None] & mask_n[None, :])


# --------------------------------------------------------------------------------------
# Tile configurations

def _check_tile(variant: str, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, GROUP_M: int,
                num_warps: int, num_stages: int) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    for name, v in (("BLOCK_M", BLOCK_M), ("BLOCK_N", BLOCK_N), ("BLOCK_K", BLOCK_K)):
        if v < 16 or v & (v - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot tile), got {v}")
    if BLOCK_K > SCALE_BLOCK or SCALE_BLOCK % BLOCK_K:
        raise ValueError(f"BLOCK_K must divide the 128-wide scale block, got {BLOCK_K}")
    if BLOCK_K < 32:
        raise ValueError(f"BLOCK_K must be >= 32 (the K of one FP8 MMA), got {BLOCK_K}")
    if GROUP_M < 1:
        raise ValueError(f"GROUP_M must be >= 1, got {GROUP_M}")
    if num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"num_warps must be a power of two <= 16, got {num_warps}")
    if num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {num_stages}")


def tile_configs(variant: str) -> list[dict]:
    """The autotune space (kwargs dicts incl. num_warps / num_stages) for one variant.

    Small BLOCK_M for decode-sized M (enough programs to fill the SMs), large for prefill;
    BLOCK_N up to 256 so one program covers two weight-scale blocks; 3-5 stages.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    bk = DEFAULT_BLOCK_K[variant]
    out = []
    for bm, bn, warps, stages in [
        (16, 64, 4, 4), (16, 128, 4, 4), (32, 64, 4, 4), (32, 128, 4, 3),
        (64, 64, 4, 4), (64, 128, 4, 3), (64, 128, 4, 4), (64, 256, 8, 3),
        (128, 64, 4, 4), (128, 128, 8, 3), (128, 128, 8, 4), (128, 256, 8, 3),
        (128, 128, 4, 5),
    ]:
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                        num_warps=warps, num_stages=stages))
    return out


@functools.lru_cache(maxsize=None)
def _autotuned(variant: str):
    configs = [
        triton.Config({k: v for k, v in c.items() if k not in ("num_warps", "num_stages")},
                      num_warps=c["num_warps"], num_stages=c["num_stages"])
        for c in tile_configs(variant)
    ]
    return triton.autotune(configs=configs, key=["M", "N", "K"])(_blockwise_fp8_kernel)


# --------------------------------------------------------------------------------------
# GPU entry point

def _validate(a, b, a_scale, b_scale):
    import torch  # lazy: this module must import on a CPU-only machine without torch

    e4m3 = torch.float8_e4m3fn
    for name, t in (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
        if not t.is_cuda:
            raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
        if t.device != a.device:
            raise ValueError(f"all inputs must be on one device: {name} is on {t.device}, a on {a.device}")
    # The K-contiguous operand tiles are what the FP8 MMAs read; scales may have any strides.
    for name, t in (("a", a), ("b", b)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (row-major, K contiguous), got strides {t.stride()}")
    if a.data_ptr() % 16 or b.data_ptr() % 16:
        raise ValueError("a and b must be 16-byte aligned (vectorised FP8 loads)")
    if a.dtype != e4m3 or b.dtype != e4m3:
        raise ValueError(f"a and b must be float8_e4m3fn, got {a.dtype} and {b.dtype}")
    if a_scale.dtype != torch.float32 or b_scale.dtype != torch.float32:
        raise ValueError(f"scales must be float32, got {a_scale.dtype} and {b_scale.dtype}")
    M, K = a.shape
    N, Kb = b.shape
    if Kb != K:
        raise ValueError(f"a is [M, K] = {tuple(a.shape)} and b is [N, K] = {tuple(b.shape)}: K differs")
    if M < 1 or N < 1 or K < 1:
        raise ValueError(f"M, N, K must be >= 1, got {M}, {N}, {K}")
    kb = -(-K // SCALE_BLOCK)
    nb = -(-N // SCALE_BLOCK)
    if tuple(a_scale.shape) != (M, kb):
        raise ValueError(f"a_scale must be [M, ceil(K/128)] = [{M}, {kb}] (1x128 per-token), "
                         f"got {tuple(a_scale.shape)}")
    if tuple(b_scale.shape) != (nb, kb):
        raise ValueError(f"b_scale must be [ceil(N/128), ceil(K/128)] = [{nb}, {kb}] (128x128), "
                         f"got {tuple(b_scale.shape)}")
    major, minor = torch.cuda.get_device_capability(a.device)
    if major * 10 + minor < 89:
        raise ValueError(f"FP8 tensor-core dot needs compute capability >= 8.9, "
                         f"this device is {major}.{minor}")
    return M, N, K


def blockwise_fp8_gemm(a, b, a_scale, b_scale, *, variant: str = "per_block",
                       config: dict | None = None):
    """out (M, N) bf16 = blockwise-scaled A (M, K) e4m3 @ B (N, K) e4m3 ^T.

    a_scale: (M, ceil(K/128)) float32; b_scale: (ceil(N/128), ceil(K/128)) float32; both
    with any strides (the M-major a_scale prepared for cuBLASLt works as is).
    ``config`` (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages) pins one tile;
    without it the kernel autotunes over :func:`tile_configs` (keyed on M, N, K).
    """
    import torch

    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    M, N, K = _validate(a, b, a_scale, b_scale)
    out = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    args = (a, b, out, a_scale, b_scale, M, N, K, a.stride(0), b.stride(0), out.stride(0),
            a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1))
    per_block = variant == "per_block"
    if config is None:
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        _autotuned(variant)[grid](*args, PER_BLOCK=per_block)
    else:
        cfg = dict(BLOCK_K=DEFAULT_BLOCK_K[variant], GROUP_M=8, num_warps=4, num_stages=3) | dict(config)
        _check_tile(variant, **cfg)
        grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
        _blockwise_fp8_kernel[grid](*args, PER_BLOCK=per_block, **cfg)
    return out


def reference_blockwise_gemm(a, b, a_scale, b_scale):
    """Naive float64 reference on numpy arrays: a (M, K), b (N, K) already-decoded values
    (float), a_scale (M, ceil(K/128)), b_scale (ceil(N/128), ceil(K/128)); returns (M, N)
    float64. Written per scale block on purpose, independent of the kernel's loop."""
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    M, K = a.shape
    N = b.shape[0]
    out = np.zeros((M, N))
    for kb in range(-(-K // SCALE_BLOCK)):
        ks = slice(kb * SCALE_BLOCK, min(K, (kb + 1) * SCALE_BLOCK))
        partial = a[:, ks] @ b[:, ks].T
        sb = np.repeat(np.asarray(b_scale, np.float64)[:, kb], SCALE_BLOCK)[:N]
        out += partial * np.asarray(a_scale, np.float64)[:, kb][:, None] * sb[None, :]
    return out


def flops_bytes(M: int, N: int, K: int) -> tuple[int, int]:
    """(FLOPs, minimum DRAM bytes): 2MNK; A and B once at 1 byte, scales at 4, C at 2."""
    kb, nb = -(-K // SCALE_BLOCK), -(-N // SCALE_BLOCK)
    return 2 * M * N * K, M * K + N * K + 4 * (M * kb + nb * kb) + 2 * M * N


# --------------------------------------------------------------------------------------
# Compile without a GPU

_POINTERS = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16", "as_ptr": "*fp32",
             "bs_ptr": "*fp32"}


def launch_ints(M: int, N: int, K: int) -> dict:
    """The integer arguments a launch on contiguous tensors with row-major scales passes."""
    kb = -(-K // SCALE_BLOCK)
    return dict(M=M, N=N, K=K, stride_am=K, stride_bn=K, stride_cm=N,
                stride_asm=kb, stride_ask=1, stride_bsn=kb, stride_bsk=1)


def launch_specialization(M: int, N: int, K: int) -> tuple[dict, dict, dict]:
    """(signature, constexprs, divisible-by-16 names) that Triton's JIT derives for a
    launch with these sizes, so a GPU-less compile builds the kernel a real launch builds.

    The JIT's rules (the same in triton 3.x): an integer argument equal to 1 becomes a
    compile-time constant; an integer divisible by 16, and a 16-byte-aligned pointer
    (torch allocations are), get ``tt.divisibility = 16``, which lets loads vectorise.
    """
    sig, const, div = dict(_POINTERS), {}, list(_POINTERS)
    for name, v in launch_ints(M, N, K).items():
        if v == 1:
            sig[name] = "constexpr"
            const[name] = 1
        else:
            sig[name] = "i32"
            if v % 16 == 0:
                div.append(name)
    return sig, const, div


def _parse_arch(arch) -> int:
    m = re.fullmatch(r"(?:sm_?)?(\d{2,3})a?", str(arch))
    if not m:
        raise ValueError(f"arch must look like 'sm_90' or 90, got {arch!r}")
    cc = int(m.group(1))
    if cc < 89:
        raise ValueError(f"e4m3 tl.dot needs arch >= sm_89, got sm_{cc}")
    return cc


def _res_usage(cubin: bytes) -> dict:
    """Registers / stack / shared / local of the kernel in ``cubin`` (``cuobjdump -res-usage``).

    Read back from the cubin itself: the numbers of the binary that would actually run.
    """
    from fp8lab.tools import run_tool

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        text = run_tool("cuobjdump", ["-res-usage", path], timeout=120).stdout
    from fp8lab.resources import parse_res_usage

    funcs = parse_res_usage(text)
    if len(funcs) != 1:
        raise RuntimeError(f"expected one kernel in Triton's cubin, cuobjdump -res-usage shows {list(funcs)}")
    (r,) = funcs.values()
    return dict(registers=r["REG"], stack_bytes=r.get("STACK", 0), static_shared=r.get("SHARED", 0),
                local_bytes=r.get("LOCAL", 0))


def _ptxas_spills(ptx: str, cc: int) -> dict | None:
    """Spill stores / loads from ``ptxas -v`` re-run on Triton's PTX with Triton's ptxas.

    triton.compile runs ``ptxas -v`` itself but deletes the log, and the cubin records only
    the stack frame (which also holds non-spill locals), so the spill bytes need this
    second, cheap (~0.1 s) ptxas run. Returns None when that ptxas cannot be found or its
    register count disagrees with the cubin's (then the re-run is not the same compile).
    """
    import subprocess

    try:
        from triton.backends.nvidia import compiler as nvc
        try:
            tool = nvc.get_ptxas(cc)
        except TypeError:  # older triton: get_ptxas() takes no arch
            tool = nvc.get_ptxas()
        ptxas = tool.path
        arch = nvc.sm_arch_from_capability(cc)
    except Exception:  # noqa: BLE001 - any API drift: fall back to the cubin's numbers only
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        # Triton 3.x passes these flags (regAllocOptLevel works around a ptxas 13 bug).
        for extra in (["--regAllocOptLevel=2"], []):
            proc = subprocess.run([ptxas, "-v", "-lineinfo", *extra, f"--gpu-name={arch}", str(src),
                                   "-o", str(Path(tmp) / "k.o")], capture_output=True, text=True,
                                  timeout=300)
            if proc.returncode == 0:
                break
        else:
            return None
    from fp8lab.resources import parse_ptxas_v

    try:
        funcs = parse_ptxas_v(proc.stdout + proc.stderr)
    except ValueError:
        return None
    if len(funcs) != 1:
        return None
    (r,) = funcs.values()
    return dict(ptxas_registers=r["registers"], stack_frame=r["stack_bytes"],
                spill_stores=r["spill_store_bytes"], spill_loads=r["spill_load_bytes"])


def triton_resource_usage(variant: str = "per_block", arch="sm_90", *, BLOCK_M: int = 128,
                          BLOCK_N: int = 128, BLOCK_K: int | None = None, GROUP_M: int = 8,
                          num_warps: int = 8, num_stages: int = 3, M: int = 4096, N: int = 4096,
                          K: int = 4096) -> dict:
    """Compile one tile config for ``arch`` (sm_89 / sm_90) on this machine, no GPU needed.

    M, N, K only decide the JIT's specialisation (which arguments are multiples of 16 or
    equal to 1, see :func:`launch_specialization`); the defaults are a real layer's.

    Returns dict(variant, arch, tile config, registers and stack_bytes (from the cubin),
    spill_stores / spill_loads (bytes, ptxas -v; None if the re-run did not reproduce the
    cubin's register count), shared_mem (bytes the launch requests: Triton's dynamic shared
    memory), num_warps, threads, name, triton_version, ptx (str), cubin (bytes)).
    """
    if BLOCK_K is None:
        BLOCK_K = DEFAULT_BLOCK_K.get(variant, 128)
    _check_tile(variant, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages)
    cc = _parse_arch(arch)
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = _blockwise_fp8_kernel
    if min(M, N, K) < 1:
        raise ValueError(f"M, N, K must be >= 1, got {M}, {N}, {K}")
    sig, constexprs, divisible = launch_specialization(M, N, K)
    constexprs |= dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                       PER_BLOCK=variant == "per_block")
    signature = {name: sig.get(name, "constexpr") for name in fn.arg_names}
    # Tuple keys (arg index,) are what both triton 3.6 and 3.9 accept for constexprs and attrs.
    idx = {name: i for i, name in enumerate(fn.arg_names)}
    src = ASTSource(fn, signature, {(idx[k],): v for k, v in constexprs.items()},
                    {(idx[k],): [["tt.divisibility", 16]] for k in divisible})
    compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                              options=dict(num_warps=num_warps, num_stages=num_stages,
                                           # explicit: the default a GPU launch uses too (and
                                           # triton 3.9 warns when it is left unset)
                                           enable_fp_fusion=True))
    cubin = compiled.asm["cubin"]
    res = _res_usage(cubin)
    spills = _ptxas_spills(compiled.asm["ptx"], cc)
    if spills is not None and spills["ptxas_registers"] != res["registers"]:
        spills = None
    md = compiled.metadata
    return dict(
        variant=variant, arch=f"sm_{cc}", M=M, N=N, K=K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        GROUP_M=GROUP_M, num_warps=md.num_warps, num_stages=num_stages,
        registers=res["registers"], stack_bytes=res["stack_bytes"],
        spill_stores=None if spills is None else spills["spill_stores"],
        spill_loads=None if spills is None else spills["spill_loads"],
        shared_mem=int(md.shared), static_shared=res["static_shared"],
        threads=md.num_warps * 32, name=md.name, triton_version=triton.__version__,
        ptx=compiled.asm["ptx"], cubin=cubin,
    )
