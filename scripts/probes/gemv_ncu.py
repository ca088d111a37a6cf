"""Probe (issue 22, target 1 at M = 16): why the decode GEMV streams FP8 weights at 0.49-0.71 of a
same-size copy at M = 16 (notebook 08, H200) when it reaches 0.73-0.89 at M = 1, and vLLM's FP8
Marlin holds 0.59-0.81 at M = 16. Nsight Compute (clocks not locked: --clock-control none, as
notebook 08) on the FP8 GEMV with its default launch, cuBLAS BF16, the streaming reference and
vLLM's FP8 Marlin (where built), at M = 1 and M = 16 on each shape.

    python scripts/probes/gemv_ncu.py [--shapes a,b] [--ms 1,16] [--formats fp8] [--out DIR]

Prints first what the GEMV launches at each (shape, M) (weight_only.launch_config: tiles per warp,
CTAs per SM, grid, splits: the static SASS of its main loop grows only from 2.44 to 2.72
instructions per weight from M = 1 to M = 16, so the launch is the first suspect), then per
(shape, M, arm): duration, effective bandwidth (weight + scale bytes / time), DRAM %,
issue-active %, thread instructions per weight element (all, and the dequant class), registers,
and the top stall reasons; writes probe_gemv_ncu.csv and the reports into --out (or $OUT).

Measured (H200, afbd834, 2026-12-04; offline_box step gemv-ncu; qwen3-8b gate_up, llama3-70b
down_proj): from M = 1 to 16 the GEMV's instructions per weight grow 2.64-2.68 -> 3.39-3.45, issue
stays 33-40% active, DRAM falls 62-78% -> 55-62%, and 11-13% of its warps' cycles go to barriers
(at most 5% at M = 1); vLLM's FP8 Marlin keeps 2.38-2.70 instructions per weight and 61-75% DRAM. Neither
the issue rate nor the DRAM bound explains the drop; scripts/probes/decode_ablate.py --m 16 names
the parts (the split-K finalise first).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="qwen3-8b:gate_up,llama3-70b:down_proj")
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--formats", default="fp8")
    ap.add_argument("--out", default=os.environ.get("OUT", "") or "runs/probe-gemv-ncu")
    args = ap.parse_args(argv)

    import torch

    from fp8lab.experiments import decode as dx
    from fp8lab.facts import shapes
    from fp8lab.kernels import weight_only as wo
    from fp8lab.peers import vllm_marlin
    from fp8lab.toolchain import profile

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # vLLM's FP8 Marlin where its build is there (python -m fp8lab.peers build vllm-marlin)
    peers = ["peer_vllm_marlin_fp8"] if vllm_marlin.built() is not None else []
    print(f"peers profiled: {peers or 'none built'}", flush=True)
    t0 = time.time()
    Ms = [int(m) for m in args.ms.split(",")]
    launches = []
    for sn in args.shapes.split(","):
        sh = shapes.get(sn)
        for fmt in args.formats.split(","):
            pw = wo.random_weight(fmt, sh.N, sh.K, keep_codes=False)[0].to("cuda")
            for M in Ms:
                c = wo.launch_config(pw, M)
                launches.append(dict(shape=sn, fmt=fmt, M=M, **{k: c[k] for k in ("nt", "tm", "ctas_per_sm", "grid",
                                                                                  "splits", "sms")}))
            del pw
            torch.cuda.empty_cache()
    pd.set_option("display.width", 250)
    print("what the GEMV launches (default schedule):")
    print(pd.DataFrame(launches).to_string(index=False), flush=True)
    summaries, stalls = [], []
    for sn in args.shapes.split(","):
        for M in Ms:
            rep = dx.profile_decode(sn, out / f"gemv_{sn.replace(':', '_')}_m{M}", formats=args.formats.split(","),
                                    peers=peers, M=M)
            kern = profile.read_report(rep).merge(dx.read_c8_metrics(rep), on=["range", "action"], how="left")
            s, _ = dx.ncu_tables(kern, profile.read_opcodes(rep), sn, M=M)
            summaries.append(s)
            st = dx.stall_table(s)
            if len(st):
                stalls.append(st.assign(M=M))
            print(f"{sn} M={M} profiled ({time.time() - t0:.0f} s)", flush=True)
    s = pd.concat(summaries, ignore_index=True)
    s["eff_TBps"] = s["eff_bw"] / 1e12
    s["us"] = s["duration_s"] * 1e6
    cols = ["shape", "M", "arm", "us", "eff_TBps", "dram_pct", "issue_active_pct", "inst_per_element",
            "dequant_inst_per_element", "registers"]
    print(s[cols].to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    if stalls:
        st = pd.concat(stalls, ignore_index=True)
        print("\nwhere the warps wait (share of warp cycles per issued instruction):")
        print(st[["shape", "M", "arm", "cycles_per_issue", "top"]].to_string(index=False,
                                                                           float_format=lambda v: f"{v:.1f}"))
    s.to_csv(out / "probe_gemv_ncu.csv", index=False)
    pd.DataFrame(launches).to_csv(out / "probe_gemv_launches.csv", index=False)
    print(f"total {time.time() - t0:.0f} s; reports in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
