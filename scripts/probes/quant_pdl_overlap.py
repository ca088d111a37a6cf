"""Probe (issue 22): is SGLang's 1x128 quantiser faster than quant_act_subwarp because of its kernel or
because of its launch? Under ncu (one kernel at a time, scripts/probes/quant_ncu.py) the two take the
same time at M = 256 and 1024; in notebook 06b's CUDA-graph timing SGLang's (launched as a
programmatic dependent launch, as SGLang launches it on sm_90) is 1.2-1.5x faster than subwarp's
plain launch. Here both run plain and with PDL, and the same-traffic copy plainly, in one process,
with 06b's timing (quantisers._time: CUDA-graph replay, inputs rotated past 2x L2).

Where the next kernel is released (pdl_release): SGLang's kernel lets the next kernel launch after its
stores; quant_act_warp_ilp right after its wait, and in 06b (H200, 722fafc) its PDL launch was faster
than subwarp's releasing after its stores at M = 1 and 16 (0.96 / 1.06 us against 1.22 / 1.32). So
subwarp runs with both releases ("subwarp + PDL": after its stores; "... early": after its wait, its
default since 4874bcf), and the same-traffic copy (traffic_copy) as a PDL launch with both, the
yardstick for a PDL quantiser (a plain copy pays the launch gap a PDL launch hides).

    python scripts/probes/quant_pdl_overlap.py        (needs `python -m fp8lab.peers build sglang-quant`)

Correctness first: each SGLang launch's codes and scales against the plain SGLang launch's (bitwise),
subwarp against baselines.quant_act_reference (bitwise). Prints a table of p50 times (us) and ratios.
"""
import sys
import time

import pandas as pd
import torch

from fp8lab.experiments import quantisers as qx
from fp8lab.kernels import baselines, quant_act as qa
from fp8lab.measure import bench
from fp8lab.peers import sglang_quant

T0 = time.time()
K = 7168
Ms = (1, 16, 256, 1024, 4096)
fn_c = sglang_quant.ops()


def sglang(x, q, s, pdl):
    sglang_quant.quantise(fn_c, x, q, s, pdl=pdl)


def subwarp(x, q, s, pdl):
    qa.quant_act(x, "quant_act_subwarp", q_out=q, s_out=s, pdl=pdl)


def subwarp_late(x, q, s, pdl):
    qa.quant_act(x, "quant_act_subwarp", q_out=q, s_out=s, pdl=pdl, pdl_release="after_stores")


def subwarp_early(x, q, s, pdl):
    qa.quant_act(x, "quant_act_subwarp", q_out=q, s_out=s, pdl=pdl, pdl_release="after_wait")


def ilp(x, q, s, pdl):
    qa.quant_act(x, "quant_act_warp_ilp", q_out=q, s_out=s, pdl=pdl)


def copy(x, q, s, pdl):
    qa.traffic_copy(x, q_out=q, s_out=s, pdl=pdl)


def copy_late(x, q, s, pdl):
    qa.traffic_copy(x, q_out=q, s_out=s, pdl=pdl, pdl_release="after_stores")


def copy_early(x, q, s, pdl):
    qa.traffic_copy(x, q_out=q, s_out=s, pdl=pdl, pdl_release="after_wait")


# Every PDL row names its release: the defaults (qa.PDL_DEFAULT_RELEASE) moved once already, and a row
# that followed them silently compared a release with itself.
COPIES = ("copy", "copy + PDL", "copy + PDL early")
ARMS = {"subwarp": (subwarp, False), "subwarp + PDL": (subwarp_late, True), "subwarp + PDL early": (subwarp_early, True),
        "ilp + PDL (early)": (ilp, True), "sglang": (sglang, False), "sglang + PDL": (sglang, True),
        "copy": (copy, False), "copy + PDL": (copy_late, True), "copy + PDL early": (copy_early, True)}

x = qx.make_input(83, K)
ref_q, ref_s = baselines.quant_act_reference(x)
for name, (f, pdl) in ARMS.items():
    if name in COPIES:
        continue
    q = torch.full((83, K), float("nan"), device="cuda").to(torch.float8_e4m3fn)
    s = torch.full((83, K // 128), float("nan"), device="cuda")
    f(x, q, s, pdl)
    torch.cuda.synchronize()
    if name.startswith("sglang"):
        if name == "sglang":
            sg_q, sg_s = q.clone(), s.clone()
        else:
            assert torch.equal(q.view(torch.uint8), sg_q.view(torch.uint8)) and torch.equal(s, sg_s), name
    else:
        assert torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8)) and torch.equal(s, ref_s), name
print(f"correctness ok ({time.time() - T0:.0f} s)", flush=True)

l2 = bench.device_l2_bytes()
rows = []
for M in Ms:
    n_sets, resident = qx._n_sets(M * K * 2 + M * K + M * (K // 128) * 4, l2)
    xs = [qx.make_input(M, K, seed=i) for i in range(n_sets)]
    outs = [(torch.empty(M, K, dtype=torch.float8_e4m3fn, device="cuda"),
             torch.empty(M, K // 128, dtype=torch.float32, device="cuda")) for _ in range(n_sets)]
    for rnd in range(2):                       # two rounds, arms alternating: drift shows as a spread
        for name, (f, pdl) in ARMS.items():
            def make(i, f=f, pdl=pdl):
                return lambda: f(xs[i], outs[i][0], outs[i][1], pdl)
            t = qx._time(make, n_sets, rep_ms=20, warmup_ms=5, timing="graph")
            rows.append(dict(M=M, arm=name, round=rnd, us=t.p50_s * 1e6, sets=n_sets, l2_resident=resident))
    print(f"M={M} timed ({time.time() - T0:.0f} s)", flush=True)

df = pd.DataFrame(rows)
us = df.pivot_table(index="arm", columns="M", values="us", aggfunc="median")
spread = df.pivot_table(index="arm", columns="M", values="us", aggfunc=lambda v: v.max() / v.min() - 1)
print("\np50 time (us), median of 2 rounds, K = 7168")
print(us.round(2).to_string())
print("\nround-to-round spread (max/min - 1)")
print(spread.round(3).to_string())
print("\nratios")
r = pd.DataFrame({"subwarp / sglang (both plain)": us.loc["subwarp"] / us.loc["sglang"],
                  "subwarp+PDL / sglang+PDL": us.loc["subwarp + PDL"] / us.loc["sglang + PDL"],
                  "sglang plain / sglang PDL": us.loc["sglang"] / us.loc["sglang + PDL"],
                  "subwarp plain / subwarp PDL": us.loc["subwarp"] / us.loc["subwarp + PDL"],
                  "subwarp+PDL early / subwarp+PDL": us.loc["subwarp + PDL early"] / us.loc["subwarp + PDL"],
                  "subwarp+PDL early / sglang+PDL": us.loc["subwarp + PDL early"] / us.loc["sglang + PDL"],
                  "copy+PDL early / copy+PDL": us.loc["copy + PDL early"] / us.loc["copy + PDL"]}).T
print(r.round(3).to_string())
print("\nfraction of the same-traffic copy launched the same way (time of copy / time of arm)")
f = pd.DataFrame({"subwarp / copy": us.loc["copy"] / us.loc["subwarp"],
                  "sglang / copy": us.loc["copy"] / us.loc["sglang"],
                  "subwarp+PDL / copy+PDL": us.loc["copy + PDL"] / us.loc["subwarp + PDL"],
                  "sglang+PDL / copy+PDL": us.loc["copy + PDL"] / us.loc["sglang + PDL"],
                  "subwarp+PDL early / copy+PDL early": us.loc["copy + PDL early"] / us.loc["subwarp + PDL early"],
                  "ilp+PDL / copy+PDL early": us.loc["copy + PDL early"] / us.loc["ilp + PDL (early)"]}).T
print(f.round(3).to_string())
print(f"total {time.time() - T0:.0f} s")
sys.exit(0)
