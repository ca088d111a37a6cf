"""Probe (issue 22, target 2): fp8lab's own TMA + wgmma blockwise FP8 GEMM (fp8lab.kernels.wgmma_blockwise)
against cuBLASLt blockwise, cuBLAS FP8 per-tensor, the CUTLASS arm and DeepGEMM (when built), at notebook 05's
shapes and M >= 1024.

    python scripts/probes/wgmma_blockwise.py [--ms 1024,4096,8192] [--shapes ...] [--rounds 3] [--out DIR]

1. Correctness first (asserts): both variants ('wait': each K block's MMAs complete before its
   promotion; 'overlap': the promotion of block kb - 1 under the MMAs of block kb) and the 112-wide
   tile (overlap) against float64 at odd shapes (M 1, 83, 300, 4096 x N 136, 2112 x K 128, 1152),
   outputs poisoned with NaN, and the two variants bit-identical; the tile walk at group_m 1, 8, 64.
   Timed: both variants at both tile widths (128, 112) pinned, and overlap with group_m 16.
2. Per (shape, M), every arm's first (untimed) call is checked on up to 128 rows against float64 (its
   own operands' product for a peer that quantises them itself), relative error < 4e-3. Timing: the arms in ``--rounds`` alternating rounds (order reversed every other
   round, so clock drift falls on every arm alike), each call timed by bench's "auto" (events with L2
   flushed at these sizes) over operand sets rotated past 2x L2 (blockwise.make_operands: per-token and
   per-block magnitudes as in notebook 05). Per arm: median TFLOP/s over the rounds and the median of
   the per-round ratio to cuBLASLt blockwise (target 2: >= 1.10).
Writes probe_wgmma_blockwise.csv into --out (or $OUT). Clocks are observed, never set.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def check(wg, torch):
    """Asserts; returns the number of checks."""
    from fp8lab.experiments import blockwise as bw

    n = 0
    for M in (1, 83, 300, 4096):
        for N in (136, 2112):
            for K in (128, 1152):
                s = bw.make_operands(M, N, K, seed=M + N + K)
                ref = wg.reference(s.a, s.a_scale, s.b, s.b_scale)
                outs = {}
                for v in (*wg.VARIANTS, "overlap/112"):
                    ops = wg.WgmmaBlockwise(s.a, s.a_scale, s.b, s.b_scale, variant=v.split("/")[0],
                                            tile_n=112 if "/" in v else 128)
                    ops.out.fill_(float("nan"))
                    out = ops()
                    torch.cuda.synchronize()
                    assert torch.isfinite(out).all(), (v, M, N, K, "unwritten (NaN) outputs")
                    rel = float((out.double() - ref).norm() / ref.norm())
                    assert rel < 4e-3, (v, M, N, K, rel)
                    outs[v] = out.clone()
                    n += 1
                assert torch.equal(outs["wait"], outs["overlap"]), (M, N, K, "variants differ")
    for g in (1, 8, 64):
        s = bw.make_operands(1000, 1160, 384, seed=g)
        ops = wg.WgmmaBlockwise(s.a, s.a_scale, s.b, s.b_scale, group_m=g)
        ops.out.fill_(float("nan"))
        out = ops()
        ref = wg.reference(s.a, s.a_scale, s.b, s.b_scale)
        assert torch.isfinite(out).all() and float((out.double() - ref).norm() / ref.norm()) < 4e-3, g
        n += 1
    return n


def arms(torch):
    """{name: (make(opset) -> zero-argument call, what its output is checked against)}: each arm's
    operands laid out once per set. The check: 'blockwise' (the float64 blockwise product of the
    set's codes and scales), 'codes' (the unscaled codes' product: the per-tensor reference arm), or
    a function of the made call returning its own float64 reference rows (a peer that quantises
    the operands itself)."""
    from fp8lab.kernels import baselines as bl
    from fp8lab.kernels import cutlass_blockwise_sm90 as cb
    from fp8lab.kernels import wgmma_blockwise as wg

    one = torch.ones((), device="cuda", dtype=torch.float32)

    def lt(s):
        return bl.BlockwiseOperands(s.a, s.a_scale, s.b, s.b_scale)

    def per_tensor(s):
        return lambda: torch._scaled_mm(s.a, s.b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    out = {"cublaslt_blockwise": (lt, "blockwise"), "cublas_fp8_tensorwise": (per_tensor, "codes")}
    if cb.available()[0]:
        out["cutlass_blockwise_sm90"] = (lambda s: cb.CutlassBlockwise(s.a, s.a_scale, s.b, s.b_scale), "blockwise")
    for v in wg.VARIANTS:
        for bn in wg.TILE_WIDTHS:   # both tile widths pinned (the arm picks one per shape: pick_tile_n)
            out[f"wgmma_{v}_n{bn}"] = (lambda s, v=v, bn=bn: wg.WgmmaBlockwise(s.a, s.a_scale, s.b, s.b_scale, variant=v,
                                                                             tile_n=bn), "blockwise")
    out["wgmma_overlap_g16"] = (lambda s: wg.WgmmaBlockwise(s.a, s.a_scale, s.b, s.b_scale, group_m=16, tile_n=128),
                                "blockwise")
    try:      # the best blockwise peer of notebook 05 (1.10-1.12x cuBLASLt at M = 4096 there), when built
        from fp8lab.emulate import blockscale
        from fp8lab.peers import adapters, discover

        discover.import_deepgemm()

        def deepgemm(s):
            # the same weights (our codes x scales, exact in fp32), quantised by DeepGEMM's own casts
            w = blockscale.dequant(s.b, s.b_scale, (128, 128)).float()
            p = adapters.deepgemm_blockwise(s.x, w)
            call = lambda: p.call(p.state, None, None)  # noqa: E731
            call.reference = lambda rows: p.extra["ref_x"][rows] @ p.w_ref.T   # its own codes and scales
            return call
        out["peer_deepgemm"] = (deepgemm, "own")
    except Exception as e:  # noqa: BLE001 - a missing peer is a line, not a stop
        print(f"peer_deepgemm not timed: {type(e).__name__}: {str(e)[:200]}", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ms", default="1024,4096,8192")
    ap.add_argument("--shapes", default="qwen3-8b:o_proj,qwen3-8b:down_proj,deepseek-v3:dense_down")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rep-ms", type=float, default=30)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args(argv)
    try:
        Ms = [int(m) for m in args.ms.split(",")]
    except ValueError:
        print(f"wgmma_blockwise probe: --ms must be comma-separated integers, got {args.ms!r}", file=sys.stderr)
        return 2

    import numpy as np
    import pandas as pd
    import torch

    from fp8lab.experiments import blockwise as bw
    from fp8lab.facts import shapes as shape_facts
    from fp8lab.kernels import wgmma_blockwise as wg
    from fp8lab.measure import bench, harness

    ok, why = wg.available()
    if not ok:
        print(f"wgmma_blockwise probe: {why}", file=sys.stderr)
        return 2
    t0 = time.time()
    ext = wg.load_extension()
    print(f"extension ready in {time.time() - t0:.0f} s; per tile width: " + ", ".join(
          f"{bn}: {ext.stages(bn)} stages, {ext.shared_memory_bytes(bn)} B shared memory per CTA" for bn in wg.TILE_WIDTHS),
          flush=True)
    t1 = time.time()
    print(f"correctness: {check(wg, torch)} checks passed ({time.time() - t1:.1f} s)", flush=True)

    l2 = bench.device_l2_bytes()
    makers = arms(torch)
    table = []
    for name in args.shapes.split(","):
        sh = shape_facts.get(name)
        for M in Ms:
            s0 = bw.make_operands(M, sh.N, sh.K, seed=M)
            per_set = M * sh.K + sh.N * sh.K + 2 * M * sh.N
            sets = harness.copies(s0, min(16, bench.n_rotation_sets(per_set, l2, max_sets=10**6)), bw.OpSet.clone)
            rows_np = bw.check_rows(M, max_rows=128, seed=M)
            rows = torch.as_tensor(rows_np, device="cuda")
            refs = {"blockwise": bw.reference_rows(s0.a, s0.a_scale, s0.b, s0.b_scale, rows),
                    "codes": s0.a[rows].double() @ s0.b.double().T}
            fns, errs = {}, {}
            for a, (mk, kind) in makers.items():
                first = mk(sets[0])
                out = first()                          # untimed: JIT compiles and plans happen here
                torch.cuda.synchronize()
                ref = first.reference(rows) if kind == "own" else refs[kind]
                errs[a] = float((out[rows].double() - ref).norm() / ref.norm())
                assert torch.isfinite(out).all() and errs[a] < 4e-3, (name, M, a, errs[a])
                fns[a] = harness.made_rotation(lambda i, mk=mk: mk(sets[i]), len(sets), first=first)
            flop = 2.0 * M * sh.N * sh.K
            order = list(fns)
            for r in range(args.rounds):
                for a in (order if r % 2 == 0 else order[::-1]):
                    t = bench.bench(fns[a], method="auto", warmup_ms=5, rep_ms=args.rep_ms)
                    table.append(dict(shape=name, M=M, N=sh.N, K=sh.K, arm=a, round=r, time_us=t.p50_s * 1e6,
                                      tflops=flop / t.p50_s / 1e12, method=t.method, relerr=errs[a]))
            here = pd.DataFrame(table[-len(order) * args.rounds:]).groupby("arm")["tflops"].median()
            print(f"{name:22s} M={M:<5d} " + "  ".join(f"{a} {here[a]:.0f}" for a in order), flush=True)
            sets = fns = s0 = refs = None
            torch.cuda.empty_cache()
    df = pd.DataFrame(table)
    lt = df[df.arm == "cublaslt_blockwise"].set_index(["shape", "M", "round"])["time_us"]
    df["over_cublaslt"] = [lt[(r.shape, r.M, r.round)] / r.time_us for r in df.itertuples()]
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        df.to_csv(os.path.join(args.out, "probe_wgmma_blockwise.csv"), index=False)
    summary = df.groupby(["shape", "M", "arm"], sort=False).agg(tflops=("tflops", "median"),
                                                                 over_cublaslt=("over_cublaslt", "median"),
                                                                 spread=("over_cublaslt", np.ptp))
    pd.set_option("display.width", 200)
    print("\nmedian over rounds (over_cublaslt: cuBLASLt time / arm time, per round; spread: its range):")
    print(summary.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"\ntotal {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
