"""Probe (issue 6, item 5): quant_act_warp_ilp's launch schedules against the same-traffic copy, K = 7168.

Arms: the one-chunk-per-warp grid kernel at 2 / 4 / 8 groups per warp ('grid g2/g4/g8', the last
probe's arms), the persistent grid-stride kernel at 2 / 4 / 8 groups per chunk ('persistent
g2/g4/g8': grid no larger than what is resident, the next chunk's loads issued before the current
chunk is reduced and stored, every warp within one chunk of the others), 'auto' (the default:
quant_act.auto_launch picks one of the above from the launch shape) and traffic_copy (the grid g4
kernel's loads and stores with no arithmetic); 'subwarp <form>' and 'subwarp <form> + PDL' (quant_act_subwarp:
8 lanes x 32 bytes per group, four groups per warp, a flat grid, in each of quant_act.SUBWARP_FORMS; plain
and as a programmatic dependent launch).

1. Correctness first: every arm bit for bit against baselines.quant_act_reference at M = 1, 7, 83,
   1024, 4097 x K = 128, 384, 7168 (the PDL launches too, row-major scales) on inputs with special groups (zero, -0, NaN, +-Inf, near bf16
   max, subnormal scale, bf16 subnormals) and on wide-exponent inputs, outputs poisoned first; both
   scale layouts at (83, 384) and (1024, 7168). Any mismatch stops the probe (assert).
2. Timing: quantisers.measure, timing='graph' (CUDA-graph replay, inputs rotated past 2x L2), M in
   (1, 16, 256, 1024, 4096, 8192); prints each arm's fraction of the same-traffic copy and p50 times.

The grid kernels are also checked and timed as programmatic dependent launches ('... + PDL'), and
timing covers M = 1 and 16 (L2-resident there: latency, not bandwidth) with issue 22's small-M band.

Run on the H200 from the repo root:  python scripts/probes/quant.py   (~40-60 s of GPU time + build)
"""
import sys
import time

import pandas as pd
import torch

from fp8lab.experiments import quantisers as qx
from fp8lab.kernels import baselines, quant_act as qa

T0 = time.time()
ILP = "quant_act_warp_ilp"
CASES = {**{f"grid g{g}": dict(groups_per_warp=g, persistent=False) for g in qa.ILP_GROUPS_PER_WARP},
         **{f"persistent g{g}": dict(groups_per_warp=g, persistent=True) for g in qa.ILP_GROUPS_PER_WARP},
         "auto": dict(groups_per_warp="auto", persistent=None)}
#: the grid kernels again as programmatic dependent launches (issue 22: timed back to back, each launch
#: overlaps the previous kernel's tail; quantisers.PDL_ARM)
PDL_CASES = {f"grid g{g} + PDL": dict(groups_per_warp=g) for g in qa.ILP_GROUPS_PER_WARP}
PDL_CASES["auto + PDL"] = dict(groups_per_warp="auto")
#: quant_act_subwarp (8 lanes x 32 B per group, SGLang's work split with fp8lab's arithmetic), plain and as a
#: programmatic dependent launch (quantisers.SUBWARP_PDL_ARM: waits before its loads, releases after its stores)
SUB = "quant_act_subwarp"
SUB_CASES = {**{f"subwarp {f}": {"subwarp_form": f} for f in qa.SUBWARP_FORMS},
             **{f"subwarp {f} + PDL": {"subwarp_form": f, "pdl": True} for f in qa.SUBWARP_FORMS}}


special_input, wide_input = qx.special_input, qx.wide_input   # the GPU test's inputs


def check(x, ref, kw, layout, variant=ILP):
    M, K = x.shape
    rq, rs = ref
    q = torch.empty((M, K), dtype=torch.uint8, device="cuda").fill_(0x55).view(torch.float8_e4m3fn)
    s = (torch.full((M, K // 128), float("nan"), device="cuda") if layout == "row"
         else torch.full((K // 128, M), float("nan"), device="cuda").t())
    qa.quant_act(x, variant, q_out=q, s_out=s, **kw)
    torch.cuda.synchronize()
    dq = int((q.view(torch.uint8) != rq.view(torch.uint8)).sum())
    ds = int((s.contiguous().view(torch.int32) != rs.view(torch.int32)).sum())
    return dq, ds


print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}", flush=True)
qa.quant_act(torch.zeros(1, 128, dtype=torch.bfloat16, device="cuda"))   # build / load the extension
torch.cuda.synchronize()
sms = torch.cuda.get_device_properties(0).multi_processor_count
print(f"extension ready after {time.time() - T0:.0f} s; {sms} SMs", flush=True)

bad = []
n = 0
for M in (1, 7, 83, 1024, 4097):
    for K in (128, 384, 7168):
        for kind, mk in (("special", special_input), ("wide", wide_input)):
            x = mk(M, K, seed=M * 7 + K)
            ref = baselines.quant_act_reference(x)
            for name, kw in CASES.items():
                for layout in (("row", "m_major") if (M, K) in ((83, 384), (1024, 7168)) else ("row",)):
                    dq, ds = check(x, ref, kw, layout)
                    n += 1
                    if dq or ds:
                        bad.append((name, M, K, kind, layout, dq, ds))
            for name, kw in PDL_CASES.items():
                dq, ds = check(x, ref, {**kw, "pdl": True}, "row")
                n += 1
                if dq or ds:
                    bad.append((name, M, K, kind, "row", dq, ds))
            for name, kw in SUB_CASES.items():
                for layout in (("row", "m_major") if (M, K) in ((83, 384), (1024, 7168)) else ("row",)):
                    dq, ds = check(x, ref, kw, layout, variant=SUB)
                    n += 1
                    if dq or ds:
                        bad.append((name, M, K, kind, layout, dq, ds))
for b in bad:
    print("MISMATCH %s M=%d K=%d input=%s scales=%s: %d codes, %d scales differ" % b)
assert not bad, f"{len(bad)} of {n} checks differ from the torch reference"
print(f"correctness: {n} checks bit-exact ({time.time() - T0:.0f} s)", flush=True)

Ms = (1, 16, 256, 1024, 4096, 8192)
for M in Ms:
    a = qa.auto_launch(M, 7168, sms)
    print(f"auto at M={M}: {'persistent' if a['persistent'] else 'grid'} g{a['groups_per_warp']}", flush=True)
out = []
for i, (name, kw) in enumerate(CASES.items()):
    df = qx.measure(Ms, (7168,), arms=(ILP,), diagnostic_arms=qx.DIAGNOSTIC_ARMS if i == 0 else (), rep_ms=20,
                    warmup_ms=5, timing="graph", **kw)
    df.loc[df["arm"] == ILP, "arm"] = name
    out.append(df)
    print(f"timed {name} ({time.time() - T0:.0f} s)", flush=True)
for name, kw in PDL_CASES.items():
    df = qx.measure(Ms, (7168,), arms=(qx.PDL_ARM,), rep_ms=20, warmup_ms=5, timing="graph", **kw)
    df.loc[df["arm"] == qx.PDL_ARM, "arm"] = name
    out.append(df)
    print(f"timed {name} ({time.time() - T0:.0f} s)", flush=True)
for name, kw in SUB_CASES.items():
    arm = qx.SUBWARP_PDL_ARM if kw.get("pdl") else SUB
    df = qx.measure(Ms, (7168,), arms=(arm,), rep_ms=20, warmup_ms=5, timing="graph", subwarp_form=kw["subwarp_form"])
    df.loc[df["arm"] == arm, "arm"] = name
    out.append(df)
    print(f"timed {name} ({time.time() - T0:.0f} s)", flush=True)
d = pd.concat(out, ignore_index=True)
assert d.loc[d["arm"] != "traffic_copy", "bitwise_ok"].astype(bool).all()
assert (d["status"] == "measured").all(), d.loc[d["status"] != "measured", ["arm", "M", "status"]]
pd.set_option("display.width", 200)
order = [*CASES, *PDL_CASES, *SUB_CASES, "traffic_copy"]
frac = d.pivot_table(index="arm", columns="M", values="fraction_of_copy").reindex(order)
us = d.pivot_table(index="arm", columns="M", values="time_p50_s").reindex(order) * 1e6
cp = d.pivot_table(index="arm", columns="M", values="copy_gbps_p50").reindex(order) / 1e3
print("\nfraction of the same-traffic copy (p50, graph timing), K = 7168")
print(frac.round(3).to_string())
print("\ntime p50 (us)")
print(us.round(2).to_string())
print("\nsame-traffic copy of each arm's run (TB/s, read + write)")
print(cp.round(3).to_string())
for arm in ("auto", *[c for c in order if c not in ("auto", "traffic_copy")]):
    for (lo, hi), goal in qx.TARGET_BANDS:
        f = frac.loc[arm, [m for m in frac.columns if lo <= m <= hi]]
        print(f"target {arm} (>= {goal:.0%} at M {lo}..{hi}): "
              f"{'MET' if (f >= goal).all() else 'MISSED'}; min {f.min():.3f} at M={int(f.idxmin())}")
print(f"total {time.time() - T0:.0f} s")
sys.exit(0)
