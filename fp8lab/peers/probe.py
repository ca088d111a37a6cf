"""One small, checked call of a built peer, meant to run in its own process
(``python -m fp8lab.peers probe-marlin`` / ``probe-deepgemm``): a kernel that faults leaves the
CUDA context of its process unusable, and a binding that crashes ends it, so a notebook asks a
child process first (``discover.probe_marlin`` / ``discover.probe_deepgemm``)."""

from __future__ import annotations

import os


def _unbuffered_c_stdout() -> None:
    """This process's C stdio unbuffered, so what a peer's C++ prints before a crash reaches the
    pipe (glibc; elsewhere nothing changes)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.setvbuf(ctypes.c_void_p.in_dll(libc, "stdout"), None, 2, 0)     # 2: _IONBF
    except (OSError, ValueError, AttributeError):
        pass


def _checked(run, what: str, tol: float = 1e-2) -> int:
    """``run()`` -> (got, float64 reference); prints one line, "ok ..." and exit 0 when the
    relative error is under ``tol``, else the error and exit 1."""
    try:
        import torch

        torch.manual_seed(0)
        got, ref = run(torch)
        torch.cuda.synchronize()
        err = float((got.double() - ref).norm() / ref.norm())
    except Exception as e:  # noqa: BLE001 - the probe's whole job is to report this in one line
        print(f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:240])
        return 1
    if not err < tol:
        print(f"error: wrong result, relative error {err:.2e} ({what})")
        return 1
    print(f"ok: relative error {err:.1e} at {what}")
    return 0


def marlin(variant: str) -> int:
    """Marlin at N=256, K=1024, M=16 against float64 on what its own pack encoded."""
    from . import adapters, discover

    os.environ[discover.MARLIN_VARIANT_ENV] = variant

    def run(torch):
        w = torch.randn(256, 1024, device="cuda", dtype=torch.float32)
        prep = adapters.marlin_int4(w)
        x = torch.randn(16, 1024, device="cuda", dtype=torch.float16)
        out = torch.full((16, 256), float("nan"), device="cuda", dtype=torch.float16)
        prep.call(prep.state, x, out)
        return out, x.double() @ prep.w_ref.t()
    return _checked(run, f"N=256 K=1024 M=16 ({variant})")


def deepgemm(variant: str = "as-is") -> int:
    """DeepGEMM's fp8_gemm_nt through fp8lab's adapter (its own quantisers; its JIT compiles the
    kernel at this first call) at N=256, K=512, M=128, with ``variant``
    (discover.DEEPGEMM_VARIANTS), against float64 on its dequantised operands."""
    from . import adapters, discover

    os.environ[discover.DEEPGEMM_VARIANT_ENV] = variant
    _unbuffered_c_stdout()

    def run(torch):
        w = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16)
        prep = adapters.deepgemm_blockwise(x, w)
        print(f"prepared: {prep.config}", flush=True)
        got = prep.call(prep.state, x, None)
        return got, prep.extra["ref_x"].double() @ prep.w_ref.double().t()
    return _checked(run, f"N=256 K=512 M=128 ({variant})")


def vllm_cutlass() -> int:
    """vLLM's CUTLASS blockwise FP8 GEMM built here at N=256, K=512 and M=130 (not a multiple of 4:
    its swapped-operand kernel), against float64 on the operands its adapter quantised."""
    from . import adapters

    def run(torch):
        w = torch.randn(256, 512, device="cuda", dtype=torch.float32)
        x = torch.randn(130, 512, device="cuda", dtype=torch.bfloat16)
        prep = adapters.vllm_cutlass_blockwise(x, w)
        return prep.call(prep.state, x, None), prep.extra["ref_x"].double() @ prep.w_ref.double().t()
    return _checked(run, "N=256 K=512 M=130 (sm_90a, built from source)")


def _quantiser(make, what: str) -> int:
    """A per-token-group quantiser peer (``make()`` -> fn(x) -> (q, s)) at M=7, K=640: its codes times
    its scales against fp8lab's reference recipe's (baselines.quant_act_reference), float64."""
    from ..kernels import baselines

    def run(torch):
        x = torch.randn(7, 640, device="cuda", dtype=torch.float32).to(torch.bfloat16)
        q, s = make()(x)
        rq, rs = baselines.quant_act_reference(x)

        def back(q_, s_):
            return (q_.double().reshape(7, 5, 128) * s_.double().reshape(7, 5, 1)).reshape(7, 640)
        return back(q, s), back(rq, rs)
    return _checked(run, f"M=7 K=640 ({what})")


def vllm_quant() -> int:
    """vLLM's CUDA per-token-group quantiser built here (see _quantiser)."""
    from . import adapters

    return _quantiser(adapters.vllm_cuda_quant_group, "built from vLLM's source")


def sglang_quant() -> int:
    """SGLang's per-token-group quantiser built here from sglang's wheel (see _quantiser)."""
    from . import adapters

    return _quantiser(adapters.sglang_jit_quant_group, "built from sglang's wheel")


def vllm_marlin() -> int:
    """vLLM's Marlin GEMMs built here, FP8, INT8 and INT4, at N=256, K=1024, M=16 against float64
    on the weights its own quantisers encoded (bf16 activations)."""
    from . import adapters

    def run(torch):
        w = torch.randn(256, 1024, device="cuda", dtype=torch.float32)
        x = torch.randn(16, 1024, device="cuda", dtype=torch.bfloat16)
        got, ref = [], []
        for prep in (adapters.vllm_marlin_fp8(w), adapters.vllm_marlin_int8(w), adapters.vllm_marlin_int4(w)):
            got.append(prep.call(prep.state, x, None).double())
            ref.append(x.double() @ prep.w_ref.t())
        return torch.cat(got, 1), torch.cat(ref, 1)
    return _checked(run, "N=256 K=1024 M=16 (FP8, INT8 and INT4, built from source)")
