"""Probe (issue 22): which part of the decode kernel's per-step work costs the copy rate at M = 1,
and at M = 16 (--m 16), where FP8 falls from 0.82-0.96 of a same-size copy to 0.54-0.77 (H200, afbd834)?

    python scripts/probes/decode_ablate.py [--rep-ms 6] [--out DIR] [--m 16] [--splitk-only]   # on a GPU
    python scripts/probes/decode_ablate.py --ptxas [--m 16]             # CPU: build each variant, print registers

At M = 16 a CTA's K slice at 16 rows does not fit resident, so the activations come in 384-K
chunks through two buffers with two barriers per chunk (ncu at afbd834: 11-13% of the warps'
cycles at a barrier, none at M = 1), and every 8-warp CTA reads 16 x 2 bytes of activations per
128 bytes of weights (a quarter of its weight bytes, from L2). The variants act3, w16, no_act and
no_bar below separate those costs.

decode_stream.py showed that a pure stream of gemv_w16's exact access pattern and grid reaches
0.85-0.97 of copy where the FP8 kernel reaches 0.70-0.90. This probe takes the kernel header
(fp8lab/kernels/gemv_w16.cuh), makes one copy per variant with a few lines replaced (each
replacement must match exactly once, or the probe stops), puts each copy in a namespace of its
own, and builds them all into one extension, so every variant is timed in the same process,
on the same packed weights, with weights rotated past 2x L2 and CUDA-graph replays as notebook
08 does. Variants (FP8 weights, bf16 activations, the n8-tile count gemv_w16 uses at --m:
NT = 1 at M <= 8, 2 at M = 16):

  base         the header as it is (must time as the package's own gemv_w16)
  light_epi    split-K / stream-K handshake as cooperative groups' grid sync does it: one
               barrier, then thread 0 alone fences and bumps the counter (and fences again if
               its CTA is last); every thread used to fence (MEMBAR.SC.GPU + CCTL.IVALL)
  dual_acc     the 8 mmas of a step accumulate into two fp32 fragments (even / odd k16) instead
               of one, halving the dependent HMMA chain; summed at the promotion
  both         light_epi + dual_acc
  lb3          __launch_bounds__(256, 3): three CTAs per SM (ptxas must fit 80 registers)
  cpaSx3       cpaS (below) with the split-K kernel's launch bounds asking for three CTAs per SM (the
               ring keeps the weights out of registers: 68-70 without spills); with --splits 12,16
               it tests the grid notebook 08's access patterns stream best at
  hint         the weight loads with the .L2::256B prefetch hint gemv_w16 had until it was dropped
               (without it the kernel streamed 0.9-2.6 points of copy more at M = 1): the A/B
  cpaS         split-K, M = 1 (resident activations) only: the weights and scales of a step go to a
               shared-memory ring of S stages by per-thread cp.async and are read back with
               ld.shared just before the step (S - 1 steps in flight during a step's compute, the
               register ring keeps 2); stream-K rows of these variants are the base kernel's
  l2pfD        before each step, lane 0 prefetches into L2 the warp's step D past its next refill
               (cp.async.bulk.prefetch.L2, 2 KB): bytes in flight from DRAM without registers
  fin_onepass  the split-K finalise one value at a time (load, zero, store), as before 2026-12-04
  fin_all      the split-K finalise loads all its workspace values before it stores any (see FIN_NOW)
  w16res       w16 with resident activations up to 200 KB (one CTA per SM): at M = 16 a K slice of up to
               6144 (qwen3-8b / llama3-8b gate_up at splits = 1: 4096, 138 KB) loaded once, no barrier per chunk
  act3         three activation chunk buffers, one barrier per chunk (the chunked path's two)
  w16          CTAs of 16 warps, one per SM (256 rows of N: one activation chunk serves twice the
               weights), also timed at twice the splits (as many CTAs as the 8-warp grid)
  w4, w2       CTAs of 4 / 2 warps instead of 8 (64 / 32 rows of N per CTA, twice / four times the
               CTAs; launch bounds of 4 / 8 CTAs per SM keep the 8-warp kernel's registers, so an
               SM holds as many warps): gemlite's FP8 GEMV, which
               outstreams the split-K kernel at K = 4096, runs many 4-warp CTAs of a few rows each
  -- ablations (outputs wrong by design; they bound what a part costs) --
  no_epi       split-K partial sums are red.add-ed and nothing else: no fence, counter or finalise
  fixed_scales every step re-reads one scale word (an L1 hit): the scale stream's cost
  kstagger     split-K CTA x starts its K walk at one of 8 places and wraps (see k_stagger)
  act_rep8     split-K CTA x reads copy x % 8 of the activations (8 identical copies back to back):
               the same bytes and result, 8x fewer CTAs on each activation line at once (ACT_COPIES)
  no_act       chunked path: only the first activation chunk is loaded (the others read stale shared
               memory): what the activations' L2 reads cost
  no_bar       chunked path: no barrier per chunk (races by design): what the barriers cost
  no_mma       dequant and ldmatrix kept, the HMMA replaced by an XOR-and-add: the tensor-core chain's cost

Each variant runs split-K at the package's chosen splits and at splits = 1, and stream-K with
the package's persistent CTA count, with resident activations (`streamk`, where the header has
them) and with the two chunk buffers (`streamk-chunked`). The real variants are checked against
the package's kernel at splits = 1 (itself checked against float64 by the GPU tests): relative
Frobenius error < 1e-2 (dual_acc sums in another order); ablations are marked "ablation".
Writes probe_decode_ablate.csv into --out (or $OUT); prints fractions of the 2 GiB copy.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KDIR = os.path.join(HERE, "..", "..", "fp8lab", "kernels")

FENCE_SPLIT_OLD = """  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    const int prev = atomicAdd(p.counters + blockIdx.z * gridDim.x + blockIdx.x, 1);
    s_last = (prev == static_cast<int>(gridDim.y) - 1);
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
"""
FENCE_SPLIT_NEW = """  __shared__ int s_last;
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    const int prev = atomicAdd(p.counters + blockIdx.z * gridDim.x + blockIdx.x, 1);
    s_last = (prev == static_cast<int>(gridDim.y) - 1);
    if (s_last) __threadfence();
  }
  __syncthreads();
  if (!s_last) return;
"""
FENCE_SK_OLD = """  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int prev = atomicAdd(counter, done);
    *s_last = (prev + done == p.steps);
  }
  __syncthreads();
  if (!*s_last) return;
  __threadfence();
"""
FENCE_SK_NEW = """  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const int prev = atomicAdd(counter, done);
    *s_last = (prev + done == p.steps);
    if (*s_last) __threadfence();
  }
  __syncthreads();
  if (!*s_last) return;
"""
DUAL = [
    ("""  float gacc[TM][NT][4];
  if constexpr (T::kGroup) {
    zero_fill(gacc);
  }""", """  float gacc[2][TM][NT][4];
  if constexpr (T::kGroup) {
    zero_fill(gacc[0]);
    zero_fill(gacc[1]);
  }"""),
    ("mma16816<BF16>(gacc[t][j], a, b[j][2 * sub], b[j][2 * sub + 1]);",
     "mma16816<BF16>(gacc[sub][t][j], a, b[j][2 * sub], b[j][2 * sub + 1]);"),
] + [(f"fmaf(gacc[t][j][{e}], ", f"fmaf(gacc[0][t][j][{e}] + gacc[1][t][j][{e}], ") for e in range(4)]

def l2_prefetch(d: int):
    """ring_step: before a step's compute, lane 0 asks the L2 for the warp's whole step (2 KB, one
    cp.async.bulk.prefetch.L2) d steps past the refill it is about to issue, so that refill finds
    its bytes in L2: more bytes in flight from DRAM without registers (8-bit formats only)."""
    return [("""  compute_step<F, BF16, NT, XA>(f, acc, rows, u, lane, salt);
  if (cur + kRing < limit) {""", f"""  if (lane == 0 && cur + kRing + {d} < limit)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], 2048;" :: "l"(wnext - lane + {d} * Strides<F>::kW) : "memory");
  compute_step<F, BF16, NT, XA>(f, acc, rows, u, lane, salt);
  if (cur + kRing < limit) {{""")]


def cp_async_ring(stages: int):
    """Split-K only, resident activations only (decode M = 1): the weights and scales of a step go
    to shared memory by per-thread cp.async (each thread's own 16-byte words and scale word, one
    commit group per step) into a ring of `stages` stages after the activation chunks, and are
    read back with ld.shared right before the step's compute, so stages - 1 steps stay in flight
    during the compute (the register ring keeps 2) at no register cost. A thread only reads what
    it wrote itself: cp.async.wait_group is the only synchronisation. The activation group is
    committed first, so the wait before the main loop lets the weight stages stay in flight."""
    S = stages
    ring_bytes = f"({S} * (kWarps * Tiling<F, NT>::kLoads * 512 + kThreads * 4 * Tiling<F, NT>::kScaleWords))"
    return [
        ("""  } else if (active) {
#pragma unroll
    for (int u = 0; u < kRing; ++u) {
      if (u < nsteps) {
        load_frag<F, NT>(f[u], wnext, snext);
        wnext += S::kW;
        snext += S::kS;
      }
    }
  }
  pdl_wait_then_release();     // weights in flight; activations, out, ws and counters only after this
  if (resident) {
    for (int it = 0; it < iters; ++it) load_chunk(it);
  } else {
    load_chunk(0);
  }
  ptx::cp_async_commit();
""", f"""  }}
  pdl_wait_then_release();
  if (resident) {{
    for (int it = 0; it < iters; ++it) load_chunk(it);
  }} else {{
    load_chunk(0);
  }}
  ptx::cp_async_commit();
  constexpr uint32_t kWStage = kWarps * T::kLoads * 512;
  constexpr uint32_t kSStage = kThreads * 4 * T::kScaleWords;
  const uint32_t cpa_w = smem_base + static_cast<uint32_t>(p.act_smem) + (warp * T::kLoads * 32 + lane) * 16;
  const uint32_t cpa_s = smem_base + static_cast<uint32_t>(p.act_smem) + {S} * kWStage + tid * 4 * T::kScaleWords;
  auto cpa_issue = [&](int stage) {{
#pragma unroll
    for (int i = 0; i < T::kLoads; ++i) ptx::cp_async_16(cpa_w + stage * kWStage + i * 512, wnext + i * 32);
#pragma unroll
    for (int t = 0; t < T::kScaleWords; ++t)
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(cpa_s + stage * kSStage + 4 * t), "l"(snext + t) : "memory");
    wnext += S::kW;
    snext += S::kS;
  }};
#pragma unroll
  for (int u = 0; u < {S} - 1; ++u) {{
    if (active && u < nsteps) cpa_issue(u);
    ptx::cp_async_commit();
  }}
"""),
        ("""      ptx::cp_async_wait<0>();                             // every chunk, committed as one group""",
         f"""      ptx::cp_async_wait<{S} - 1>();                       // the chunks' group, the oldest"""),
        ("""          if (st < nsteps) ring_step<F, BF16, NT, XA>(f[u], acc, rows, u, lane, st, nsteps, wnext, snext, salt);""",
         f"""          if (st < nsteps) {{
            if (st + {S} - 1 < nsteps) cpa_issue((st + {S} - 1) % {S});
            ptx::cp_async_commit();
            ptx::cp_async_wait<{S} - 1>();
            const int rd = st % {S};
            Frag<F, NT> g;
#pragma unroll
            for (int i = 0; i < T::kLoads; ++i) {{
              const uint4 v = ptx::lds_128(cpa_w + rd * kWStage + i * 512);
              g.w[4 * i + 0] = v.x;
              g.w[4 * i + 1] = v.y;
              g.w[4 * i + 2] = v.z;
              g.w[4 * i + 3] = v.w;
            }}
#pragma unroll
            for (int t = 0; t < T::kScaleWords; ++t) g.s[t] = ptx::lds_32(cpa_s + rd * kSStage + 4 * t);
            compute_step<F, BF16, NT, XA>(g, acc, rows, u, lane, salt);
          }}"""),
        ("""  return launch_wo(KernelFor<F, BF16, NT>::fn, grid, kZeroBytes + p.act_smem, stream, p);""",
         f"""  return launch_wo(KernelFor<F, BF16, NT>::fn, grid, kZeroBytes + p.act_smem + {ring_bytes}, stream, p);"""),
        ("""  constexpr int smem = max_smem_bytes<NT>();""",
         f"""  constexpr int smem = max_smem_bytes<NT>() + {ring_bytes};"""),
    ]


def few_warps(warps: int):
    """CTAs of ``warps`` warps, with the launch bounds asking for 16 / warps CTAs per SM (8 / warps
    at NT > 2), so ptxas keeps the 8-warp kernel's register budget and an SM holds as many warps.
    warps = 16 (w16): one CTA of 512 threads per SM holding 256 rows of N, so one activation chunk
    serves twice the weights (at M = 16 a chunk is a quarter of the bytes of the 8-warp CTA's weights)."""
    per_sm, wide = max(16 // warps, 1), max(8 // warps, 1)
    return [("constexpr int kWarps = 8;", f"constexpr int kWarps = {warps};"),
            ("__launch_bounds__(kThreads, (NT <= 2 ? 2 : 1)) NAME(const WoParams p)",
             f"__launch_bounds__(kThreads, (NT <= 2 ? {per_sm} : {wide})) NAME(const WoParams p)"),
            ("__launch_bounds__(kThreads, (NT <= 2 ? 2 : 1)) NAME##_sk(const WoParams p)",
             f"__launch_bounds__(kThreads, (NT <= 2 ? {per_sm} : {wide})) NAME##_sk(const WoParams p)")]


PROLOGUE = """  if (resident) {
    for (int it = 0; it < iters; ++it) load_chunk(it);
  } else {
    load_chunk(0);
  }
  ptx::cp_async_commit();
"""
LOOP_HEAD = """    if (!resident) {
      if (it + 1 < iters) load_chunk(it + 1);
      ptx::cp_async_commit();
      ptx::cp_async_wait<1>();
    } else if (it == 0) {
      ptx::cp_async_wait<0>();                             // every chunk, committed as one group
    }
"""
BARRIER = "    if (!resident || it == 0) __syncthreads();             // resident: once, for all chunks\n"
TAIL_BARRIER = "    if (!resident) __syncthreads();                        // the buffer is refilled next chunk\n"


def act_ring3():
    """Split-K, chunked activations (M = 16's path: the CTA's K slice at 16 rows does not fit
    resident): three chunk buffers instead of two and one barrier per chunk instead of two. The
    loads of chunk it + 2 are issued right after the barrier of chunk it, into the buffer chunk
    it - 1 used (every warp has passed that barrier, so it is done with it); wait_group 1 before the
    barrier leaves only the newest chunk in flight."""
    return [
        ("return resident ? smem_base + static_cast<uint32_t>(it * mb * kActStride * 2) : smem_base + (it & 1) * kBufBytes;",
         "return resident ? smem_base + static_cast<uint32_t>(it * mb * kActStride * 2) : smem_base + (it % 3) * kBufBytes;"),
        (PROLOGUE, """  if (resident) {
    for (int it = 0; it < iters; ++it) load_chunk(it);
  } else {
    load_chunk(0);
    ptx::cp_async_commit();
    if (iters > 1) load_chunk(1);
  }
  ptx::cp_async_commit();
"""),
        (LOOP_HEAD + BARRIER, """    if (!resident) {
      ptx::cp_async_wait<1>();
    } else if (it == 0) {
      ptx::cp_async_wait<0>();                             // every chunk, committed as one group
    }
    if (!resident || it == 0) __syncthreads();
    if (!resident) {
      if (it + 2 < iters) load_chunk(it + 2);
      ptx::cp_async_commit();
    }
"""),
        (TAIL_BARRIER, ""),
        ("  return (p.act_resident && need > two && need <= kResidentCap) ? static_cast<int>(need) : two;",
         "  return (p.act_resident && need > two && need <= kResidentCap) ? static_cast<int>(need) : 3 * act_buf_bytes<NT>();"),
        ("  return 2 * act_buf_bytes<NT>() + kZeroBytes;", "  return 3 * act_buf_bytes<NT>() + kZeroBytes;"),
    ]


FIN_NOW = """        float v[4];
        for_each_output_of(p, t, j, tile16, g, q, active, m0, mb,
                           [&](int, int, int e, size_t idx) { v[e] = __ldcg(p.ws + idx); });
        for_each_output_of(p, t, j, tile16, g, q, active, m0, mb, [&](int, int, int e, size_t idx) {
          __stcg(p.ws + idx, 0.f);
          store16<BF16>(p.out, idx, v[e]);
        });"""
# finalize_tile's split-K order (LOADS_FIRST): each (t, j)'s four workspace loads, then their stores.
# fin_onepass: one value at a time, as before (each load waits for the stores ahead of it, 8 L2
# round trips in sequence per thread at M = 16); fin_all: all TM x NT x 4 loads first (the order
# first measured here as fin_batch: +0.09..0.15 of copy at M = 16 on the split-K shapes), 4 more
# registers than per (t, j).
FIN_ONEPASS = [(FIN_NOW, """        for_each_output_of(p, t, j, tile16, g, q, active, m0, mb, [&](int, int, int, size_t idx) {
          const float v = __ldcg(p.ws + idx);
          __stcg(p.ws + idx, 0.f);
          store16<BF16>(p.out, idx, v);
        });""")]
FIN_ALL = [("""#pragma unroll
    for (int t = 0; t < TM; ++t) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
""" + FIN_NOW + """
      }
    }""", """    float v[TM][NT][4];
    for_each_output<NT, TM>(p, tile16, g, q, active, m0, mb, [&](int t, int j, int e, size_t idx) {
      v[t][j][e] = __ldcg(p.ws + idx);
    });
    for_each_output<NT, TM>(p, tile16, g, q, active, m0, mb, [&](int t, int j, int e, size_t idx) {
      __stcg(p.ws + idx, 0.f);
      store16<BF16>(p.out, idx, v[t][j][e]);
    });""")]


#: act_rep8: split-K CTA x reads copy x % ACT_COPIES of the activations (the probe passes that many
#: identical copies, back to back): the same bytes and the same result, but at splits = 1, where
#: every CTA walks K from 0 in step with the others, 8x fewer CTAs read each activation line at
#: the same moment. If it gains what no_act gains (+0.08-0.09 of copy at M = 16 on the splits = 1
#: shapes at 002caf6), the cost is those simultaneous reads of the same L2 lines, and staggering
#: where each CTA starts in K is the fix; if not, it is the loads themselves.
ACT_COPIES = 8
REPLICATED = {"act_rep8"}

def k_stagger(groups: int = 8):
    """Split-K: CTA x walks its K slice starting at step rot = (x % groups) * (nsteps / groups) and
    wraps around (weights, scales and activation slots alike), so at splits = 1 the CTAs spread
    over `groups` places in K instead of all reading the same activation chunk at the same moment:
    act_rep8's effect without copies. The fp32 sums run in another order (checked within 1e-2)."""
    adv = """        wnext += S::kW;
        snext += S::kS;
        if (++wst == nsteps) {
          wst = 0;
          wnext -= static_cast<size_t>(nsteps) * S::kW;
          snext -= static_cast<size_t>(nsteps) * S::kS;
        }"""
    return [
        ("  const int iters = (nsteps + kRing - 1) / kRing;\n",
         f"  const int iters = (nsteps + kRing - 1) / kRing;\n"
         f"  const int rot = (static_cast<int>(blockIdx.x) % {groups}) * (nsteps / {groups});   // first step walked\n"
         f"  int wst = rot;                                           // the step wnext points at\n"),
        ("""    const int kc = (st0 + kRing * it) * kStepK;            // first K of the chunk
    const uint32_t buf = buf_of(it);
    constexpr int kSegs = kChunkK / 8;                     // 16-byte segments per row
    for (int idx = tid; idx < mb * kSegs; idx += kThreads) {
      const int m = idx / kSegs;
      const int seg = idx - m * kSegs;
      const int k = kc + 8 * seg;
      if (k < kend) ptx::cp_async_16(buf + (m * kActStride + 8 * seg) * 2, act + (static_cast<size_t>(m) * p.K + k) * 2);
    }""", """    const uint32_t buf = buf_of(it);
    constexpr int kSegs = kChunkK / 8;                     // 16-byte segments per row
    for (int idx = tid; idx < mb * kSegs; idx += kThreads) {
      const int m = idx / kSegs;
      const int seg = idx - m * kSegs;
      const int lst = kRing * it + seg / (kStepK / 8);     // the walked step this slot holds
      if (lst < nsteps) {
        const int pst = lst + rot < nsteps ? lst + rot : lst + rot - nsteps;
        const int k = (st0 + pst) * kStepK + 8 * (seg % (kStepK / 8));
        ptx::cp_async_16(buf + (m * kActStride + 8 * seg) * 2, act + (static_cast<size_t>(m) * p.K + k) * 2);
      }
    }"""),
        ("p.steps, tile16, st0,\n                   lane, g, wnext, snext);",
         "p.steps, tile16, st0 + rot,\n                   lane, g, wnext, snext);"),
        ("""      if (u < nsteps) {
        load_frag<F, NT>(f[u], wnext, snext);
        wnext += S::kW;
        snext += S::kS;
      }""", """      if (u < nsteps) {
        load_frag<F, NT>(f[u], wnext, snext);
""" + adv + """
      }"""),
        ("          if (st < nsteps) ring_step<F, BF16, NT, XA>(f[u], acc, rows, u, lane, st, nsteps, wnext, snext, salt);",
         """          if (st < nsteps) {
            compute_step<F, BF16, NT, XA>(f[u], acc, rows, u, lane, salt);
            if (st + kRing < nsteps) {
              load_frag<F, NT>(f[u], wnext, snext);
""" + adv.replace("\n        ", "\n            ").replace("        wnext += S::kW;", "            wnext += S::kW;", 1) + """
            }
          }"""),
    ]


#: the split-K kernel's launch bounds asking for three CTAs per SM (lb3's first patch)
LB3_SPLIT = ("__launch_bounds__(kThreads, (NT <= 2 ? 2 : 1)) NAME(const WoParams p)",
             "__launch_bounds__(kThreads, (NT <= 2 ? 3 : 1)) NAME(const WoParams p)")

#: warps per CTA of the variants that change it (the others keep gemv_w16's 8)
WARPS = {"w4": 4, "w2": 2, "w16": 16, "w16res": 16}

VARIANTS = {
    "base": ([], False),
    "light_epi": ([(FENCE_SPLIT_OLD, FENCE_SPLIT_NEW), (FENCE_SK_OLD, FENCE_SK_NEW)], False),
    "dual_acc": (DUAL, False),
    "both": ([(FENCE_SPLIT_OLD, FENCE_SPLIT_NEW), (FENCE_SK_OLD, FENCE_SK_NEW)] + DUAL, False),
    "lb3": ([LB3_SPLIT,
             ("__launch_bounds__(kThreads, (NT <= 2 ? 2 : 1)) NAME##_sk(const WoParams p)",
              "__launch_bounds__(kThreads, (NT <= 2 ? 3 : 1)) NAME##_sk(const WoParams p)")], False),
    "l2pf2": (l2_prefetch(2), False),
    "l2pf4": (l2_prefetch(4), False),
    "l2pf8": (l2_prefetch(8), False),
    "hint": ([('asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"',
               'asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"')], False),
    "cpa4": (cp_async_ring(4), False),
    "cpa5": (cp_async_ring(5), False),
    # the cp.async ring (68-70 registers, no spills) with the split-K kernel's launch bounds asking for
    # three CTAs per SM: notebook 08's access patterns stream best at 3 CTAs per SM and 11-16 splits
    # (decode_pattern probe, H200, 2026-12-05), which the register ring's 127 registers cannot hold
    "cpa3x3": (cp_async_ring(3) + [LB3_SPLIT], False),
    "cpa4x3": (cp_async_ring(4) + [LB3_SPLIT], False),
    "w4": (few_warps(4), False),
    "w2": (few_warps(2), False),
    "w16": (few_warps(16), False),
    "w16res": (few_warps(16) + [("constexpr int kResidentCap = 96 * 1024;", "constexpr int kResidentCap = 200 * 1024;")],
               False),
    "act3": (act_ring3(), False),
    "fin_onepass": (FIN_ONEPASS, False),
    "kstagger": (k_stagger(8), False),
    "act_rep8": ([("""  const unsigned char* act = reinterpret_cast<const unsigned char*>(p.act) + static_cast<size_t>(m0) * p.K * 2;
  const int kend""", """  const unsigned char* act = reinterpret_cast<const unsigned char*>(p.act) + static_cast<size_t>(m0) * p.K * 2 +
                             static_cast<size_t>(blockIdx.x % ACT_COPIES) * p.M * p.K * 2;
  const int kend""".replace("ACT_COPIES", str(ACT_COPIES)))], False),
    "fin_all": (FIN_ALL, False),
    "no_epi": ([("  if (!split) return;\n\n  // Split-K: the last CTA", "  return;\n\n  // Split-K: the last CTA")],
               True),
    "fixed_scales": ([("    wnext += Strides<F>::kW;\n    snext += Strides<F>::kS;\n  }\n}",
                       "    wnext += Strides<F>::kW;\n  }\n}")], True),
    "no_act": ([("      if (it + 1 < iters) load_chunk(it + 1);\n", "")], True),
    "no_bar": ([(BARRIER, "    if (resident && it == 0) __syncthreads();\n"), (TAIL_BARRIER, "")], True),
    "no_mma": ([("mma16816<BF16>(gacc[t][j], a, b[j][2 * sub], b[j][2 * sub + 1]);",
                 "gacc[t][j][0] += __uint_as_float((a[0] ^ a[1] ^ a[2] ^ a[3] ^ b[j][2 * sub] ^ b[j][2 * sub + 1]) "
                 "& 0x3c7fffffu);")], True),
}


def variant_header(text: str, name: str, patches) -> str:
    for old, new in patches:
        n = text.count(old)
        if n != 1:
            raise SystemExit(f"variant {name}: a replacement matched {n} times, not once: {old[:60]!r}")
        text = text.replace(old, new)
    text = text.replace("namespace wo {", f"namespace wo_{name} {{\nusing ::fp8lab::wo::WoParams;", 1)
    # the launchers' function-local statics and the kernels are per namespace already
    return text


def write_sources(dst: str, names) -> list[str]:
    """Copy the kernel headers into dst, write one patched copy per variant and the binding."""
    shutil.copytree(os.path.join(KDIR, "common"), os.path.join(dst, "common"))
    for f in ("gemv_w16_params.h", "gemv_w16_bind.h"):
        shutil.copy(os.path.join(KDIR, f), dst)
    text = open(os.path.join(KDIR, "gemv_w16.cuh")).read()
    bad = [n for n in names if n not in VARIANTS]
    if bad:
        raise SystemExit(f"unknown variants {bad}; known: {', '.join(VARIANTS)}")
    for name in names:
        with open(os.path.join(dst, f"v_{name}.cuh"), "w") as fh:
            fh.write(variant_header(text, name, VARIANTS[name][0]))
    return names


def kernels_cu(names, nt: int = 1) -> str:
    inc = "".join(f'#include "v_{n}.cuh"\n' for n in names)
    cases_split = "".join(
        f"    case {i}: return fp8lab::wo_{n}::launch_gemv<fp8lab::wo_{n}::kFp8, true, {nt}>(p, splits, s);\n"
        for i, n in enumerate(names))
    cases_sk = "".join(
        f"    case {i}: return fp8lab::wo_{n}::launch_gemv_sk<fp8lab::wo_{n}::kFp8, true, {nt}>(p, ctas, s);\n"
        for i, n in enumerate(names))
    cases_occ = "".join(
        f"    case {i}: return fp8lab::wo_{n}::occupancy_gemv<fp8lab::wo_{n}::kFp8, true, {nt}>();\n"
        for i, n in enumerate(names))
    return f"""#include <cuda_runtime.h>
{inc}
cudaError_t probe_split(int v, const fp8lab::wo::WoParams& p, int splits, cudaStream_t s) {{
  switch (v) {{
{cases_split}    default: return cudaErrorInvalidValue;
  }}
}}
cudaError_t probe_sk(int v, const fp8lab::wo::WoParams& p, int ctas, cudaStream_t s) {{
  switch (v) {{
{cases_sk}    default: return cudaErrorInvalidValue;
  }}
}}
int probe_occ(int v) {{
  switch (v) {{
{cases_occ}    default: return -1;
  }}
}}
"""


BIND_CPP = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include "gemv_w16_bind.h"
cudaError_t probe_split(int v, const fp8lab::wo::WoParams& p, int splits, cudaStream_t s);
cudaError_t probe_sk(int v, const fp8lab::wo::WoParams& p, int ctas, cudaStream_t s);
int probe_occ(int v);
// sched > 0: split-K with that many splits; sched < 0: stream-K with -sched CTAs.
// act_src: where the kernel reads the activations (act itself, or copies of it back to back for the
// replicated variants); act gives the shape.
void run(int64_t v, torch::Tensor act, torch::Tensor w, torch::Tensor scales, torch::Tensor out, torch::Tensor ws,
         torch::Tensor counters, int64_t N, int64_t n_tiles16, int64_t sched, bool resident, torch::Tensor act_src) {
  fp8lab::wo::check_tensors(act, w, scales, out, ws, counters, N);
  const int64_t steps = act.size(1) / 128;
  const int64_t splits = sched > 0 ? sched : 1;
  const int64_t sps = (steps + splits - 1) / splits;
  auto p = fp8lab::wo::params(act, w, scales, out, ws, counters, 1.0, N, n_tiles16, sps, resident);
  TORCH_CHECK(act_src.is_contiguous() && act_src.scalar_type() == act.scalar_type() && act_src.size(1) == act.size(1) &&
              act_src.size(0) % act.size(0) == 0, "act_src must be copies of act");
  p.act = act_src.data_ptr();
  auto s = c10::cuda::getCurrentCUDAStream();
  const cudaError_t e = sched > 0 ? probe_split(static_cast<int>(v), p, static_cast<int>((steps + sps - 1) / sps), s)
                                  : probe_sk(static_cast<int>(v), p, static_cast<int>(-sched), s);
  TORCH_CHECK(e == cudaSuccess, "probe launch failed: ", cudaGetErrorString(e));
}
int64_t occ(int64_t v) { return probe_occ(static_cast<int>(v)); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("run", &run);
  m.def("occ", &occ);
}
"""


def ptxas(names, src):
    """CPU: compile the kernels for sm_90 and print registers / spills per variant kernel."""
    cu = os.path.join(src, "kernels.cu")
    cmd = ["nvcc", "-cubin", "-arch=sm_90", "-O3", "-std=c++17", "-Xptxas", "-v", "-I", src, cu, "-o",
           os.path.join(src, "k.cubin")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print(r.stderr[-4000:])
        return r.returncode
    cur = None
    for line in r.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = m.group(1)
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            ns = re.search(r"(\d+)wo_", cur)
            vname = cur[ns.end():ns.end() + int(ns.group(1)) - 3] if ns else cur
            kind = "sk" if "_sk" in cur else "split"
            spill = re.search(r"(\d+) bytes spill stores", r.stderr[r.stderr.find(cur):])
            print(f"{vname:14s} {kind:6s} {m.group(1)} registers  "
                  f"{spill.group(1) if spill else '?'} bytes spill stores")
            cur = None
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rep-ms", type=float, default=6)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    ap.add_argument("--ptxas", action="store_true", help="CPU only: build every variant and print registers")
    ap.add_argument("--variants", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--m", type=int, default=1, help="tokens (1..64; the kernels' n8-tile count follows, as "
                                                      "gemv_w16 picks it)")
    ap.add_argument("--splitk-only", action="store_true", help="time split-K at the chosen splits only (no "
                                                                "splits = 1, no stream-K)")
    ap.add_argument("--splits", default="", help="comma-separated split counts timed too (split-K, every "
                                                 "variant and the package's kernel), e.g. 12,16")
    ap.add_argument("--shapes", default="llama3-70b:down_proj,qwen3-8b:gate_up,llama3-8b:gate_up,"
                                        "llama3-8b:down_proj,llama3-70b:qkv")
    args = ap.parse_args(argv)
    if not 1 <= args.m <= 64:
        ap.error(f"--m must be 1..64, got {args.m}")
    try:
        extra_splits = sorted({int(x) for x in args.splits.split(",") if x})
    except ValueError:
        ap.error(f"--splits takes comma-separated integers, got {args.splits!r}")
    if any(x < 1 for x in extra_splits):
        ap.error(f"--splits must be positive, got {args.splits!r}")
    nt = next(n for n, top in ((1, 8), (2, 16), (4, 32), (8, 64)) if args.m <= top)   # gemv_w16.cuh's nt_for_rows
    src = tempfile.mkdtemp(prefix="fp8lab_ablate_")
    names = write_sources(src, [v for v in args.variants.split(",") if v] or list(VARIANTS))
    with open(os.path.join(src, "kernels.cu"), "w") as fh:
        fh.write(kernels_cu(names, nt))
    if args.ptxas:
        return ptxas(names, src)

    import pandas as pd
    import torch
    from torch.utils.cpp_extension import load

    from fp8lab.experiments import decode
    from fp8lab.facts import shapes
    from fp8lab.kernels import weight_only as wo
    from fp8lab.measure import bench, harness

    t0 = time.time()
    ext = load("fp8lab_probe_decode_ablate", [_bind(src), os.path.join(src, "kernels.cu")],
               extra_include_paths=[src], extra_cuda_cflags=["-O3", "-std=c++17"], verbose=False)
    wo.load_extension()
    print(f"built in {time.time() - t0:.0f} s; CTAs per SM: "
          + ", ".join(f"{n} {ext.occ(i)}" for i, n in enumerate(names)), flush=True)
    l2 = bench.device_l2_bytes()
    big = decode.measure_copy(copy_gib=2.0)["rate_p50"]
    print(f"2 GiB copy: {big / 1e12:.3f} TB/s", flush=True)
    rows = []
    for name in args.shapes.split(","):
        sh = shapes.get(name)
        N, K = sh.N, sh.K
        pw = wo.random_weight("fp8", N, K, keep_codes=False)[0].to("cuda")
        M = args.m
        cfg = wo.launch_config(pw, M)
        xb = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        # the reference: the package's kernel at splits = 1 (itself checked against float64 by the GPU tests)
        want = wo.gemv_w16(xb, pw, splits=1).double()
        gbytes = decode.stream_split(wo.ARMS["fp8"], N, K)["stream_bytes"]
        sets = harness.rotation_copies(pw, gbytes, l2, wo.PackedWeight.clone)
        ws = torch.zeros(M * N, dtype=torch.float32, device="cuda")
        # one counter per CTA tile along N: n_tiles16 covers every variant down to one warp per CTA
        cnt = torch.zeros(max(pw.n_tiles16, 1), dtype=torch.int32, device="cuda")
        sk = cfg["streamk_ctas"]
        scheds = [("split", s, s, True) for s in sorted({cfg["splits"], 1})] + [("streamk", sk, -sk, True),
                                                                               ("streamk-chunked", sk, -sk, False)]
        if args.splitk_only:
            scheds = [("split", cfg["splits"], cfg["splits"], True)]
        have = {a for s_, a, c, r in scheds if s_ == "split"}
        scheds += [("split", x, x, True) for x in extra_splits if x <= K // 128 and x not in have]
        # the package's own kernel at the same points, as the yardstick for "base"
        for sched, arg, code, res in scheds:
            oo = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in sets]
            kw = dict(splits=arg) if sched == "split" else dict(schedule="streamk", act_resident=res)
            fn = bench.rotating(lambda p_, o_, kw=kw: wo.gemv_w16(xb, p_, out=o_, **kw), list(zip(sets, oo)))
            t = bench.bench(fn, method="graph", rep_ms=args.rep_ms, warmup_ms=5)
            rows.append(dict(shape=name, M=M, variant="package", schedule=sched, arg=arg, time_us=t.p50_s * 1e6,
                             frac=gbytes / t.p50_s / big, check="-"))
        for vi, vname in enumerate(names):
            ablation = VARIANTS[vname][1]
            # stream-K with as many warps in flight as the package's persistent grid: w4 / w2 launch
            # 2x / 4x its CTAs (each of 4 / 2 warps)
            grow = 8 / WARPS.get(vname, 8)
            vscheds = [(s, int(a * grow), int(c * grow), r) if c < 0 else (s, a, c, r) for s, a, c, r in scheds]
            if grow < 1:   # half the CTAs along N: also twice the splits (as many CTAs as the 8-warp grid)
                vscheds += [(s, min(2 * a, K // 128), min(2 * a, K // 128), r) for s, a, c, r in scheds if c > 0]
            if grow > 1:   # more CTAs along N: also fewer splits (as many CTAs as the 8-warp grid, fewer partial sums)
                vscheds += [(s, max(1, round(a / grow)), max(1, round(a / grow)), r) for s, a, c, r in scheds
                            if c > 1 and round(a / grow) < a]
            src = xb.repeat(ACT_COPIES, 1).contiguous() if vname in REPLICATED else xb
            for sched, arg, code, res in vscheds:
                o = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                ws.zero_()
                cnt.zero_()
                ext.run(vi, xb, pw.w, pw.s, o, ws, cnt, N, pw.n_tiles16, code, res, src)
                torch.cuda.synchronize()
                err = float(torch.linalg.norm(o.double() - want) / torch.linalg.norm(want))
                check = "ablation" if ablation else ("ok" if err < 1e-2 else f"FAIL {err:.2e}")
                oo = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in sets]
                fn = bench.rotating(lambda p_, o_, c=code, v=vi, r=res, a=src: ext.run(v, xb, p_.w, p_.s, o_, ws, cnt,
                                                                                       N, p_.n_tiles16, c, r, a),
                                    list(zip(sets, oo)))
                t = bench.bench(fn, method="graph", rep_ms=args.rep_ms, warmup_ms=5)
                rows.append(dict(shape=name, M=M, variant=vname, schedule=sched, arg=arg, time_us=t.p50_s * 1e6,
                                 frac=gbytes / t.p50_s / big, check=check, relerr=err))
                if ablation:
                    ws.zero_()
                    cnt.zero_()
        for r in rows:
            if r["shape"] == name:
                print(f"{name:22s} {r['variant']:13s} {r['schedule']:8s} {r['arg']:<4d} {r['time_us']:8.2f} us "
                      f"{r['frac']:.3f}  {r['check']}", flush=True)
        del sets, pw
        torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    df["point"] = df["schedule"] + ":" + df["arg"].astype(str)
    piv = df.pivot_table(index=["shape", "point"], columns="variant", values="frac", sort=False)
    pd.set_option("display.width", 250)
    print("\nfraction of the 2 GiB copy (weight + scale bytes):")
    print(piv[["package"] + names].to_string(float_format=lambda v: f"{v:.3f}"))
    bad = df[df["check"].astype(str).str.startswith("FAIL")]
    print(f"\nchecks: {int((df['check'] == 'ok').sum())} ok, {len(bad)} failed")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        df.to_csv(os.path.join(args.out, "probe_decode_ablate.csv"), index=False)
    print(f"total {time.time() - t0:.0f} s", flush=True)
    return 1 if len(bad) else 0


def _bind(src):
    path = os.path.join(src, "bind.cpp")
    with open(path, "w") as fh:
        fh.write(BIND_CPP)
    return path


if __name__ == "__main__":
    sys.exit(main())
