"""One small, checked call of a built peer, meant to run in its own process
(``python -m fp8lab.peers probe-marlin``): a kernel that faults leaves the CUDA context of its
process unusable, so a notebook asks a child process first (``discover.probe_marlin``)."""

from __future__ import annotations

import os


def marlin(variant: str) -> int:
    """Marlin at N=256, K=1024, M=16 against float64 on what its own pack encoded; prints one
    line, "ok ..." and exit 0 when it agrees, else the error and exit 1."""
    from . import adapters, discover

    os.environ[discover.MARLIN_VARIANT_ENV] = variant
    try:
        import torch

        torch.manual_seed(0)
        w = torch.randn(256, 1024, device="cuda", dtype=torch.float32)
        prep = adapters.marlin_int4(w)
        x = torch.randn(16, 1024, device="cuda", dtype=torch.float16)
        out = torch.full((16, 256), float("nan"), device="cuda", dtype=torch.float16)
        prep.call(prep.state, x, out)
        torch.cuda.synchronize()
        ref = x.double() @ prep.w_ref.t()
        err = float((out.double() - ref).norm() / ref.norm())
    except Exception as e:  # noqa: BLE001 - the probe's whole job is to report this in one line
        print(f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:240])
        return 1
    if not err < 1e-2:
        print(f"error: wrong result, relative error {err:.2e}")
        return 1
    print(f"ok: relative error {err:.1e} at N=256 K=1024 M=16 ({variant})")
    return 0
