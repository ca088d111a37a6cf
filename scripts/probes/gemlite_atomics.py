"""Probe (issue 17): why gemlite's A16W4 INT4 misses the 1e-2 check on the H200, by measurement.

    python scripts/probes/gemlite_atomics.py [--shapes qwen3-8b:gate_up,llama3-8b:down_proj] [--M 1,16]

Notebook 08's peers table (H200, 545c5c9) has gemlite's INT4 off float64 of its own dequantised
weights by 1.36% at K = 4096 / 8192 and 2.46-2.49% at K = 14336 / 28672, the same at every M,
while its FP8 and INT8 pass. Its split-K kernels add their partial sums into the output with
atomics, in bf16 where the GPU has bf16 atomics (sm_90: ``gemlite.core.set_native_atomic_bfp16``,
on by default), else in fp32 with one cast at the end. The probe runs the same layer, the same
inputs, both ways, and prints the relative error of each against float64 of the layer's own
dequantised weights (fp8lab's adapter, the check notebook 08 uses): if the fp32 way passes and
the bf16 way does not, the miss is the bf16 accumulation of partial sums, a property of gemlite's
default on this GPU, not of fp8lab's reference. Reads nothing but the GPU; changes no clock.
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="qwen3-8b:gate_up,llama3-8b:down_proj",
                    help="fp8lab.facts.shapes names, comma-separated (notebook 08's)")
    ap.add_argument("--M", default="1,16", help="rows of the activation, comma-separated")
    ap.add_argument("--peer", default="peer_gemlite_w4a16_int4",
                    choices=("peer_gemlite_w4a16_int4", "peer_gemlite_w8a16_int8", "peer_gemlite_w8a16_fp8"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        Ms = [int(m) for m in args.M.split(",")]
        if any(m < 1 for m in Ms):
            raise ValueError
    except ValueError:
        print(f"gemlite_atomics: --M must be positive integers, comma-separated; got {args.M!r}", file=sys.stderr)
        return 2

    from fp8lab.facts import shapes
    try:
        shs = [shapes.get(s) for s in args.shapes.split(",")]
    except (KeyError, ValueError) as exc:
        print(f"gemlite_atomics: {exc}", file=sys.stderr)
        return 2

    try:
        import torch
    except ImportError:
        print("gemlite_atomics: needs torch with CUDA (make setup EXTRAS=gpu-tools,test,peers)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gemlite_atomics: needs a CUDA GPU", file=sys.stderr)
        return 2
    try:
        from gemlite import core
    except ImportError as exc:
        print(f"gemlite_atomics: gemlite is not installed ({exc}); pip install gemlite==0.6.0.post2", file=sys.stderr)
        return 2
    from fp8lab.peers import adapters

    print(f"# {torch.cuda.get_device_name(0)}, gemlite {getattr(__import__('gemlite'), '__version__', '?')}, "
          f"torch {torch.__version__}, peer {args.peer}")
    print(f"{'shape':<24} {'N':>6} {'K':>6} {'M':>4} {'relerr bf16 atomics':>20} {'relerr fp32 atomics':>20}")
    worst = {True: 0.0, False: 0.0}
    for sh in shs:
        g = torch.Generator(device="cpu").manual_seed(args.seed)
        w = torch.randn(sh.N, sh.K, generator=g).to("cuda")
        prep = adapters.WEIGHT_ONLY[args.peer](w)
        for M in Ms:
            x = torch.randn(M, sh.K, generator=g).to("cuda", torch.bfloat16)
            ref = x.double() @ prep.w_ref.double().t()
            err = {}
            for native in (True, False):
                core.set_native_atomic_bfp16(native)
                try:
                    y = prep.call(prep.state, x, None)
                    torch.cuda.synchronize()
                finally:
                    core.set_native_atomic_bfp16(True)       # gemlite's default again
                err[native] = float((y.double() - ref).norm() / ref.norm())
                worst[native] = max(worst[native], err[native])
            print(f"{sh.name:<24} {sh.N:>6} {sh.K:>6} {M:>4} {err[True]:>20.3e} {err[False]:>20.3e}")
    print(f"worst: bf16 atomics {worst[True]:.3e}, fp32 atomics {worst[False]:.3e} (notebook 08's check: < 1e-2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
