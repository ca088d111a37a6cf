"""Probe (issue 7): does the order in which the decode kernels walk their weights cap DRAM
bandwidth? A read-only Triton kernel streams the same bytes in two layouts, with nothing else
to do, so only the access pattern differs:

* ``tile-major`` (the packed layout of fp8lab's weight-only kernels): stream i (one warp, one
  16-row tile x one K split) reads its own contiguous region, 2 KB per step; at any moment the
  GPU's ~2000 warps read ~2000 regions far apart.
* ``step-major``: the same streams and steps, but step s of all tiles is stored together, so
  warps that run in step read neighbouring 2 KB chunks (as a plain copy does).

Each program is one warp reading CHUNK = 2 KB per step with ``num_stages`` loads in flight
(Triton's software pipelining), XOR-reducing them (the result is checked, so nothing is dead).
Bandwidth = bytes read / time (CUDA-graph replay, buffers rotated past 2x L2), beside the
2 GiB device copy of notebook 00 (which counts read + write). If tile-major reads fall
clearly short of step-major, the weight layout, not the SM side, caps the decode kernels.

    python scripts/probes/stream_pattern.py [--rep-ms 20] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rep-ms", type=float, default=20.0)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args(argv)

    import pandas as pd
    import torch
    import triton
    import triton.language as tl

    from fp8lab.measure import bench
    from fp8lab.experiments import decode

    @triton.jit
    def stream_read(x_ptr, out_ptr, n_steps, n_tiles, stride_tile, stride_split, stride_step, CHUNK: tl.constexpr):
        pid = tl.program_id(0)                     # launch order: split-major, as the split-K grid
        t = pid % n_tiles
        j = pid // n_tiles
        offs = tl.arange(0, CHUNK)
        base = x_ptr + t.to(tl.int64) * stride_tile + j.to(tl.int64) * stride_split
        acc = tl.zeros([CHUNK], dtype=tl.int32)
        for s in range(n_steps):
            acc ^= tl.load(base + s.to(tl.int64) * stride_step + offs, cache_modifier=".cg")
        tl.store(out_ptr + pid * CHUNK + offs, acc)

    def xor_rows(t):
        while t.shape[0] > 1:
            if t.shape[0] % 2:
                t = torch.cat([t, torch.zeros_like(t[:1])])
            t = t[0::2] ^ t[1::2]
        return t[0]

    CHUNK = 512                       # int32 words: 2 KB, one warp's 128-K step of an 8-bit 16-row tile
    t0 = time.time()
    l2 = bench.device_l2_bytes()
    copy = decode.measure_copy(copy_gib=2.0)["rate_p50"]
    print(f"2 GiB copy {copy / 1e12:.3f} TB/s", flush=True)
    # (name, 16-row tiles, steps = K / 128, K splits): one stream per (tile, split)
    cases = [("llama3-70b down_proj fp8", 8192 // 16, 28672 // 128, 4),
             ("qwen3-8b gate_up fp8", 24576 // 16, 4096 // 128, 1),
             ("qwen3-8b down_proj fp8", 4096 // 16, 12288 // 128, 4)]
    rows = []
    for name, tiles, steps, splits in cases:
        words = tiles * steps * CHUNK
        nbytes = 4 * words
        sets = [torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32, device="cuda")
                for _ in range(bench.n_rotation_sets(nbytes, l2))]
        want = xor_rows(sets[0].view(-1, CHUNK))
        per = steps // splits
        streams = tiles * splits
        out = torch.empty(streams * CHUNK, dtype=torch.int32, device="cuda")
        strides = {   # (stride_tile, stride_split, stride_step) in words
            "tile-major": (steps * CHUNK, per * CHUNK, CHUNK),             # the weight-only kernels' layout
            "step-major": (CHUNK, per * tiles * CHUNK, tiles * CHUNK),     # step s of all tiles together
        }
        for layout, (st_t, st_j, st_s) in strides.items():
            for stages in (2, 3, 4):
                def run(x, st_t=st_t, st_j=st_j, st_s=st_s, stages=stages):
                    stream_read[(streams,)](x, out, per, tiles, st_t, st_j, st_s, CHUNK=CHUNK,
                                            num_warps=1, num_stages=stages)
                    return out
                run(sets[0])
                # every chunk read exactly once: the XOR of the outputs is the XOR of the buffer
                assert torch.equal(xor_rows(out.view(streams, CHUNK)), want), (name, layout, stages)
                t = bench.bench(bench.rotating(run, [(s,) for s in sets]), method="graph", rep_ms=args.rep_ms)
                bw = nbytes / t.p50_s
                rows.append(dict(case=name, layout=layout, stages=stages, streams=streams, steps=per,
                                 MB=nbytes / 2**20, time_us=t.p50_s * 1e6, TBps=bw / 1e12, frac_copy=bw / copy))
                print(f"{name:26s} {layout:10s} stages={stages} {t.p50_s * 1e6:8.2f} us {bw / 1e12:6.3f} TB/s "
                      f"{bw / copy:5.3f} of copy", flush=True)
        del sets
        torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    print(df.pivot_table(index="case", columns=["layout", "stages"], values="frac_copy").round(3).to_string())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        df.to_csv(os.path.join(args.out, "probe_stream_pattern.csv"), index=False)
    print(f"total {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
