"""Probe (issue 22): the activation quantisers under Nsight Compute at M = 1, 16, 256 and 1024,
K = 7168 (--ms). SGLang's quantiser ran faster than quant_act_subwarp in 06b on the H200
(2026-12-04): at M >= 256 mostly because its outputs were timed reused (see
scripts/probes/quant_pdl_overlap.py), at M = 1-16 by 0.2-0.4 us with both as PDL launches.
Per call: duration, DRAM throughput, issue activity, registers and the warp stall reasons of
quant_act_subwarp (plain16, ef), quant_act_warp_ilp (auto), traffic_copy and SGLang's JIT
quantiser (when built: python -m fp8lab.peers build sglang-quant), one launch each. ncu runs with
--clock-control none (the clocks as found; nothing is locked).

Run on the GPU box from the repo root:  python scripts/probes/quant_ncu.py [--out DIR]   (~1 min)
Prints one table; writes quant_ncu.csv and the .ncu-rep into --out (or $OUT).
"""
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd

from fp8lab.experiments import quantisers as qx
from fp8lab.toolchain import profile

SHOW_STALLS = ("long_scoreboard", "wait", "short_scoreboard", "lg_throttle", "barrier", "no_instruction",
               "math_pipe_throttle", "dispatch_stall", "membar", "drain", "selected", "not_selected")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    ap.add_argument("--ms", default="1,16,256,1024")
    ap.add_argument("--peers", default="peer_sglang_jit_quant_group")
    args = ap.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="quant_ncu_"))
    out.mkdir(parents=True, exist_ok=True)
    labels = out / "quant_ncu_labels.json"
    rep = qx.profile_quantisers(out / "quant_ncu", Ms=[int(m) for m in args.ms.split(",")],
                                peers=[p for p in args.peers.split(",") if p], labels=str(labels))
    df = profile.read_report(rep)
    names = json.loads(labels.read_text())
    if len(names) != len(df):
        print(f"the report has {len(df)} kernels for {len(names)} profiled calls: unlabelled", flush=True)
        names = [f"range {r}" for r in df["range"]]
    df.insert(0, "call", names)
    df.to_csv(out / "quant_ncu.csv", index=False)
    cols = ["call", "duration_s", "dram_pct", "issue_active_pct", "registers", "sm_clock_hz"]
    cols = [c for c in cols if c in df] + [f"stall_{r}" for r in SHOW_STALLS if f"stall_{r}" in df]
    t = df[cols].copy()
    t["duration_s"] *= 1e6
    t = t.rename(columns={"duration_s": "us"} | {f"stall_{r}": r for r in SHOW_STALLS})
    pd.set_option("display.width", 250)
    print(t.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(f"\nreport: {rep}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
