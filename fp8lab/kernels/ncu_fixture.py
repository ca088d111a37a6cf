"""The Nsight Compute test fixture: three small kernels of known behaviour profiled into the small
report committed as ``tests/fixtures/ncu/h200_small.ncu-rep``, which the CPU tests of
``fp8lab.toolchain.profile`` read back.

On a GPU box with ncu: ``python -m fp8lab.kernels.ncu_fixture [OUT.ncu-rep]`` profiles an
elementwise scale (DRAM-bound), a bf16 matmul (tensor cores) and the FP32 FMA kernel (issue-bound)
and prints the tables it reads back.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Union

from ..toolchain import profile
from ..toolchain.tools import find_tool

#: the NVTX range the fixture's timed body runs in (ncu filters on it)
FIXTURE_NVTX_RANGE = "fp8lab_fixture"

#: elements of the fixture's elementwise kernel: 256 MiB in and out, so the output
#: cannot hide in a 60 MiB L2 and DRAM bytes are predictable
FIXTURE_SCALE_ELEMENTS = 64 * 2**20
FIXTURE_GEMM = 1024


def _fixture_kernels():
    """Two small Triton kernels for the fixture: a DRAM-bound scale and a bf16 GEMM
    whose tensor-core instructions (HGMMA on sm_90, HMMA elsewhere) show in the
    per-opcode counts. ncu stores the whole module of every profiled kernel, and
    torch's and cuBLAS's modules are megabytes each; Triton's hold one kernel."""
    import triton
    import triton.language as tl

    @triton.jit
    def fixture_scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)

    @triton.jit
    def fixture_dot_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
        rm = pid_m * BLOCK + tl.arange(0, BLOCK)
        rn = pid_n * BLOCK + tl.arange(0, BLOCK)
        rk = tl.arange(0, BLOCK)
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for k in range(0, n, BLOCK):
            a = tl.load(a_ptr + rm[:, None] * n + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * n + rn[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * n + rn[None, :], acc.to(tl.bfloat16))

    return fixture_scale_kernel, fixture_dot_kernel


def fixture_workload():
    """Three kernels inside the NVTX range the fixture filters on: a Triton
    scale (DRAM-bound, 256 MiB read + 256 MiB written), a small Triton bf16 GEMM
    (tensor cores) and fp8lab's FP32 FMA kernel (issue-bound, no DRAM). Warm-up runs
    outside the range, so set-up and Triton compilation are not profiled."""
    import torch
    import triton

    from . import fma_peak

    # inputs drawn on the host and copied: no random-number kernels on the device, so
    # a kernel-name filter (the fallback) sees only the three kernels below
    g = torch.Generator().manual_seed(0)
    n = FIXTURE_GEMM
    x = torch.randn(FIXTURE_SCALE_ELEMENTS, generator=g).to("cuda")   # (64 Mi,) fp32
    y = torch.empty_like(x)                                            # (64 Mi,) fp32
    a = torch.randn(n, n, generator=g).to(torch.bfloat16).to("cuda")  # (M, K) bf16
    b = torch.randn(n, n, generator=g).to(torch.bfloat16).to("cuda")  # (K, N) bf16
    c = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")        # (M, N) bf16
    scale, dot = _fixture_kernels()
    block = 64
    cfg = fma_peak.small_config()
    fma_in, fma_out = fma_peak.make_buffers(cfg)

    def body():
        scale[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)
        dot[(n // block, n // block)](a, b, c, n, BLOCK=block)
        fma_peak.launch(fma_in, fma_out, cfg)

    body()
    torch.cuda.synchronize()
    ref = (a.double() @ b.double())
    err = float((c.double() - ref).norm() / ref.norm())
    assert err < 1e-2, f"fixture GEMM is wrong (rel. err {err:.3g})"
    assert torch.equal(y, x * 2.0), "fixture scale kernel is wrong"
    torch.cuda.nvtx.range_push(FIXTURE_NVTX_RANGE)
    body()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


FIXTURE_KERNEL_REGEX = r"fixture_scale|fma_peak|fixture_dot"


def make_fixture(output: Union[str, Path], timeout: float = 600) -> Path:
    """Profile ``fixture_workload`` into ``output`` (a small .ncu-rep), then read it
    back and print the tables. Tries the NVTX filter with the full metric list
    first; if ncu rejects something, falls back to a kernel-name filter and then to
    sections only, saying which attempt produced the file."""

    find_tool("ncu")  # no point in retrying without it
    nvtx = [FIXTURE_NVTX_RANGE + "/"]
    no_thread_ops = tuple(m for m in profile.DEFAULT_METRICS if m != "sass__thread_inst_executed_true_per_opcode")
    attempts = [
        dict(nvtx_include=nvtx),
        dict(nvtx_include=nvtx, metrics=no_thread_ops),
        dict(kernel_regex=FIXTURE_KERNEL_REGEX, launch_skip=3, launch_count=3),
        dict(nvtx_include=nvtx, metrics=()),
    ]
    errors = []
    for i, kw in enumerate(attempts):
        try:
            out = profile.profile("fp8lab.kernels.ncu_fixture:fixture_workload", output, timeout=timeout, **kw)
        except RuntimeError as e:
            errors.append(str(e))
            print(f"[fixture] attempt {i} failed:\n{str(e)[-2000:]}", file=sys.stderr)
            continue
        try:
            df = profile.read_report(out)
        except ImportError as e:   # a box with ncu but no report reader: keep the file
            print(f"[fixture] wrote {out} ({out.stat().st_size} bytes) with {kw}; cannot read it "
                  f"here ({e}); read it where ncu-report is installed", file=sys.stderr)
            return out
        if len(df) == 0:
            errors.append(f"attempt {i}: report has no kernels")
            print(f"[fixture] attempt {i} profiled no kernels ({kw})", file=sys.stderr)
            continue
        print(f"[fixture] attempt {i} ({kw}) wrote {out} ({out.stat().st_size} bytes)")
        return out
    raise RuntimeError("could not produce the ncu fixture:\n" + "\n".join(errors))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fp8lab.kernels.ncu_fixture",
                                 description="write the small ncu fixture report and print it")
    ap.add_argument("output", nargs="?", default="tests/fixtures/ncu/h200_small.ncu-rep")
    args = ap.parse_args(argv)
    out = make_fixture(args.output)
    try:
        profile.print_tables(out)
    except ImportError as e:
        print(f"[fixture] not printed: {e}", file=sys.stderr)
    size = out.stat().st_size
    if size > 1_000_000:
        print(f"[fixture] WARNING: {out} is {size} bytes (> 1 MB); do not commit it as is",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
