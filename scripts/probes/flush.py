"""Probe: does the events timer's L2 flush add time of its own to a short call?

On 2026-12-02 five rows of notebook 05 at M = 128 switched between graph replay and events from
one run to the next (bench's host-bound rule sits near them) and moved 16-22% with the method:
cuBLAS BF16 at qwen3-8b down_proj M = 128 took 42.6 us with events and 33.2 us replayed. The
events timer flushes L2 by *writing* 256 MB (``zero_``, as Triton's do_bench does), so the call
starts with L2 full of dirty lines; evicting them writes ~L2-size bytes back to DRAM while the
call reads its weights. A flush that only *reads* leaves clean lines, nothing to write back.

For each call this times, in one process, interleaved over ``--rounds``:

* ``graph``: bench's CUDA-graph replay, inputs rotated past 2x L2 (no flush);
* ``events-write``: bench's events loop (256 MB ``zero_``, the head-start spin, an event pair);
* ``events-read``: the same loop with the 256 MB buffer *read* (a sum) instead of written;
* ``events-both``: written, then another 256 MB buffer read (the dirty lines evicted first).

Expectation if the write-back explains the gap: events-read ~ events-both ~ graph, and
events-write - graph ~ L2 bytes / DRAM write bandwidth (~60 MB / ~4 TB/s = ~15 us on an H200).

    python scripts/probes/flush.py [--rounds 3] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys


def _events(fn, flush, n: int, head_start_cycles: int = 400_000) -> float:
    """Median per-call seconds: per sample ``flush()``, a spin kernel, an event pair around fn."""
    import torch

    for _ in range(5):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    torch.cuda.synchronize()
    for i in range(n):
        flush()
        torch.cuda._sleep(head_start_cycles)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e-3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args(argv)

    import pandas as pd
    import torch

    from fp8lab.measure import bench

    dev = "cuda"
    buf_w = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device=dev)
    buf_r = torch.ones(256 * 2**20 // 4, dtype=torch.int32, device=dev)
    sink = torch.empty((), dtype=torch.int64, device=dev)
    flushes = {
        "events-write": lambda: buf_w.zero_(),
        "events-read": lambda: torch.sum(buf_r, dim=0, out=sink),
        "events-both": lambda: (buf_w.zero_(), torch.sum(buf_r, dim=0, out=sink)),
    }
    l2 = bench.device_l2_bytes()

    def gemm_bf16(M, N, K):
        sets = [(torch.randn(M, K, device=dev, dtype=torch.bfloat16),
                 torch.randn(N, K, device=dev, dtype=torch.bfloat16)) for _ in
                range(bench.n_rotation_sets(N * K * 2, l2))]
        return bench.rotating(lambda a, w: a @ w.T, sets)

    def copy(nbytes):
        sets = [(torch.empty(nbytes // 2, device=dev, dtype=torch.bfloat16),
                 torch.empty(nbytes // 2, device=dev, dtype=torch.bfloat16)) for _ in
                range(bench.n_rotation_sets(nbytes, l2))]
        return bench.rotating(lambda a, b: b.copy_(a), sets)

    calls = {
        "cublas_bf16 qwen3-8b:down_proj M=128": gemm_bf16(128, 4096, 12288),
        "cublas_bf16 qwen3-8b:o_proj M=128": gemm_bf16(128, 4096, 4096),
        "cublas_bf16 deepseek-v3:dense_down M=128": gemm_bf16(128, 7168, 18432),
        "copy 32 MB": copy(32 * 2**20),
    }
    rows = []
    for r in range(args.rounds):
        for name, fn in calls.items():
            rows.append(dict(call=name, round=r, method="graph",
                             time_s=bench.bench(fn, method="graph").p50_s))
            for method, flush in flushes.items():
                rows.append(dict(call=name, round=r, method=method,
                                 time_s=_events(fn, flush, args.samples)))
    df = pd.DataFrame(rows)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        df.to_csv(os.path.join(args.out, "flush.csv"), index=False)
    t = df.groupby(["call", "method"])["time_s"].median().unstack("method") * 1e6
    t["write-graph_us"] = t["events-write"] - t["graph"]
    t["read-graph_us"] = t["events-read"] - t["graph"]
    print(f"{torch.cuda.get_device_name()}  L2 {l2 / 2**20:.0f} MiB; medians over {args.rounds} rounds (us)")
    print(t.round(1).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
