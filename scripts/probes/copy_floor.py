"""Probe (issue 22, target 4 at M = 1..16): what the quantiser's yardstick copy is, and the floor
under a launch of a few kilobytes.

Notebook 06b holds the plain quantiser to "the same-traffic copy": torch's uint8 ``dst.copy_(src)``
of bytes / 2 into bytes / 2. At M = 1 / 16 (K = 7168, ~22 / ~350 KB, L2-resident) the zero-math
kernel with the quantiser's loads and stores (``traffic_copy``) reached only 0.81 of it (1.36 vs
~1.09 us at afbd834). A same-dtype contiguous ``copy_`` is a cudaMemcpyAsync, which a CUDA graph
records as a memcpy node, not a kernel; this probe times, in the same graph replay and rotation
as the notebook (quantisers.measure's ``_time``):

* ``memcpy``: the yardstick as the notebook launches it (uint8 -> uint8 ``copy_``);
* ``kernel_copy``: the same bytes copied by a kernel (torch's elementwise uint8 -> int8 ``copy_``);
* ``fill_1``: a kernel that stores 4 bytes (torch ``fill_`` of one int32): the floor of a launch;
* ``traffic_copy`` / ``traffic_copy_pdl`` and ``quant_act_subwarp`` / its PDL launch, as in 06b.

Each callable is also run once under torch.profiler, and the device activities it shows are
printed (a memcpy shows as ``Memcpy DtoD``, a kernel by its name), so the table says what each
row launched. Prints p50 per call and each row over ``memcpy`` and over ``kernel_copy``; writes
probe_copy_floor.csv into --out (or $OUT).

    python scripts/probes/copy_floor.py [--ms 1,16,256] [--k 7168] [--rep-ms 20] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def activities(fn) -> str:
    """The device activities one call of fn launches (names, in order, deduplicated)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = []
    for e in prof.events():
        if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA"):
            n = e.name if len(e.name) < 60 else e.name[:57] + "..."
            if n not in names:
                names.append(n)
    return " | ".join(names) or "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ms", default="1,16,256")
    ap.add_argument("--k", type=int, default=7168)
    ap.add_argument("--rep-ms", type=float, default=20.0)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args(argv)
    try:
        Ms = [int(m) for m in args.ms.split(",")]
    except ValueError:
        print(f"copy_floor: --ms must be comma-separated integers, got {args.ms!r}", file=sys.stderr)
        return 2

    import pandas as pd
    import torch

    from fp8lab.arms import registry
    from fp8lab.experiments import quantisers as qx
    from fp8lab.kernels import quant_act as qa
    from fp8lab.measure import bench

    if not torch.cuda.is_available():
        print("copy_floor: needs a CUDA device", file=sys.stderr)
        return 2
    t0 = time.time()
    pdl = qa.pdl_supported(0)
    l2 = bench.device_l2_bytes()
    rows = []
    for M in Ms:
        K = args.k
        nbytes = registry.count("quant_act_warp", M=M, K=K).bytes
        n_sets, resident = qx._n_sets(nbytes, l2)
        half = nbytes // 2
        srcs = [torch.randint(0, 255, (half,), dtype=torch.uint8, device="cuda") for _ in range(n_sets)]
        d_u8 = [torch.empty_like(s) for s in srcs]
        d_i8 = [torch.empty(half, dtype=torch.int8, device="cuda") for _ in srcs]
        one = [torch.zeros(1, dtype=torch.int32, device="cuda") for _ in srcs]
        xs = [qx.make_input(M, K, seed=M)] + [None] * (n_sets - 1)
        xs[1:] = [xs[0].clone() for _ in range(n_sets - 1)]
        outs = [(torch.empty((M, K), dtype=torch.float8_e4m3fn, device="cuda"),
                 torch.empty((M, K // qa.GROUP), dtype=torch.float32, device="cuda")) for _ in xs]
        q0, s0 = outs[0]
        q0.view(torch.uint8).fill_(0x7F)
        s0.fill_(float("nan"))
        q_ref, s_ref = qa.quant_act(xs[0], "quant_act_subwarp")
        arms = {
            "memcpy": lambda i: (lambda: d_u8[i].copy_(srcs[i])),
            "kernel_copy": lambda i: (lambda: d_i8[i].copy_(srcs[i])),
            "fill_1": lambda i: (lambda: one[i].fill_(7)),
            "traffic_copy": lambda i: (lambda: qa.traffic_copy(xs[i], q_out=outs[i][0], s_out=outs[i][1])),
            "quant_act_subwarp": lambda i: (lambda: qa.quant_act(xs[i], "quant_act_subwarp", q_out=outs[i][0],
                                                                 s_out=outs[i][1])),
        }
        if pdl:
            arms["traffic_copy_pdl"] = lambda i: (lambda: qa.traffic_copy(xs[i], q_out=outs[i][0], s_out=outs[i][1],
                                                                          pdl=True))
            arms["quant_act_subwarp_pdl"] = lambda i: (lambda: qa.quant_act(xs[i], "quant_act_subwarp", pdl=True,
                                                                            q_out=outs[i][0], s_out=outs[i][1]))
        # correctness of the copies and of the quantiser's outputs before any timing
        arms["kernel_copy"](0)()
        assert torch.equal(d_i8[0].view(torch.uint8), srcs[0]), "kernel_copy"
        arms["memcpy"](0)()
        assert torch.equal(d_u8[0], srcs[0]), "memcpy"
        q0.view(torch.uint8).fill_(0x7F)
        s0.fill_(float("nan"))
        arms["quant_act_subwarp"](0)()
        torch.cuda.synchronize()
        assert torch.equal(q0.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(s0, s_ref), "subwarp"
        for name, make in arms.items():
            what = activities(make(0))
            t = qx._time(make, n_sets, rep_ms=args.rep_ms, warmup_ms=5, timing="graph")
            rows.append(dict(M=M, K=K, bytes=nbytes, l2_resident=resident, n_sets=n_sets, arm=name,
                             p50_us=t.p50_s * 1e6, p20_us=t.p20_s * 1e6, p80_us=t.p80_s * 1e6, launches=what))
            print(f"M={M:<5d} {name:22s} {t.p50_s * 1e6:8.3f} us  {what}", flush=True)
        srcs = d_u8 = d_i8 = one = xs = outs = arms = None
        torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    for ref in ("memcpy", "kernel_copy"):
        base = df[df.arm == ref].set_index("M")["p50_us"]
        df[f"over_{ref}"] = df["p50_us"] / df["M"].map(base)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        df.to_csv(os.path.join(args.out, "probe_copy_floor.csv"), index=False)
    pd.set_option("display.width", 200)
    print("\np50 per call (us); over_*: time / that copy's time (a fraction of copy is its inverse):")
    print(df[["M", "arm", "p50_us", "over_memcpy", "over_kernel_copy"]].to_string(
        index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"\ntotal {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
