// common/ptx.cuh -- the inline-PTX helpers fp8lab's hand-written kernels share (issue 18).
//
// One definition each, used by mma_blockwise.cuh, gemv_w16.cuh and wmma_w8a16.cu. Before this
// header each kernel carried its own copy and the copies had drifted: only mma_blockwise's
// cp.async / commit / wait carried a "memory" clobber. scripts/sass_identical.py compares every
// kernel's SASS before and after a change here.
//
// Include it as "common/ptx.cuh" from a file in fp8lab/kernels/: nvcc looks next to the including
// file first, so every build (torch extensions, nvcc -cubin, the census) finds it without an -I.
// Every build cache that hashes kernel sources lists this file (kernels/_build.py COMMON_HEADERS).
//
// Clobbers: an asm statement's operands tell the compiler only about registers. These helpers
// move data between global and shared memory through 32-bit shared-window addresses the
// compiler cannot see, so each one that reads or writes memory, or that orders memory, says
// "memory". That makes it a compiler barrier: no ordinary load or store is moved across it and
// no value of memory is kept in a register across it. `volatile` alone keeps asm statements in
// order among themselves, not ordinary C++ memory accesses around them. The hardware ordering
// (which thread sees which shared-memory bytes when) is still __syncthreads()'s job.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

namespace fp8lab {
namespace ptx {

// cvta.to.shared: a generic pointer into shared memory -> its 32-bit shared-window address, the
// operand form cp.async and ldmatrix take (and one register instead of two).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async.cg.shared.global [dst], [src], 16 (SASS LDGSTS.E.BYPASS.128): 16 bytes global ->
// shared without a register round trip, cached in L2 only (.cg: streamed operands are not reused
// from L1). "memory": it writes shared memory the compiler does not see.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// cp.async.cg.shared.global [dst], [src], 16, src_size: as cp_async_16, but with valid = false it
// reads nothing and zero-fills the 16 bytes (src_size 0), which is how M/N tails are predicated
// without a branch around the copy; src must still be a mappable address (callers clamp it).
__device__ __forceinline__ void cp_async_16_zfill(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

// cp.async.commit_group (SASS LDGDEPBAR): closes the group of cp.async copies issued so far by
// this thread. It touches no memory itself; "memory" keeps ordinary shared-memory accesses on
// their side of the group boundary, so code between a commit and the matching wait reads as it is
// written.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// cp.async.wait_group N (SASS DEPBAR.LE SB0, N): blocks until at most N of this thread's committed
// groups are still in flight. "memory" is required here: the bytes of the completed groups appear
// in shared memory behind the compiler's back, so no shared-memory load may be hoisted above the
// wait and no earlier load of those bytes may be reused after it. (Other threads' copies still need
// a __syncthreads() after the wait.)
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 (SASS LDSM.16.M88.4): four 8x8 b16 matrices from shared
// memory; lane l gives the row address of row l % 8 of matrix l / 8 and receives, from matrix i,
// the 4 bytes at row l / 4, byte 4 (l % 4) in r[i] -- the mma.sync A/B fragment layout.
// "memory": it reads shared memory through an address the compiler does not see, so ordinary
// stores to that memory must not sink below it.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// ---- mbarrier + cp.async.bulk (sm_90: the TMA unit's one-dimensional bulk copy) ------------------
// A bulk copy moves `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to
// shared memory on the copy engine, without registers or a thread per 16 bytes, and signals
// completion as a transaction count on an mbarrier in shared memory. The consumer waits on the
// barrier's phase parity. Used by the weight-only decode kernels' bulk schedule (gemv_w16.cuh).

// mbarrier.init.shared::cta.b64 [bar], count: a barrier that completes a phase after `count`
// arrivals plus every expected transaction byte.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes initialised mbarriers visible to the async proxy (the copy engine) and to other threads,
// before the first copy signals them.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// fence.proxy.async.shared::cta: orders this thread's earlier generic-proxy accesses to shared
// memory (ld.shared of a stage) before later async-proxy writes to it (the next bulk copy).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// mbarrier.arrive.expect_tx: one arrival that also announces `bytes` of transactions to come.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Blocks until the barrier's phase with parity `parity` has completed (try_wait spins in hardware
// for a while before returning false; the loop retries).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// mbarrier.arrive: one arrival, no transactions (a consumer handing a stage back).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// cp.async.bulk.tensor.2d global -> shared through a tensor map (TMA): the box at coordinates
// (c0 inner, c1 outer) of the tensor `map` describes (the generic address of a CUtensorMap, e.g. a
// __grid_constant__ kernel parameter), completing its bytes as transactions on mbarrier `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
      ::"r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// prefetch.tensormap: brings a tensor map (see tma_load_2d) into the cache before its first use.
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// mbar_wait that gives up: after `limit` failed try_waits (each suspends the thread for a while;
// seconds in all for limit ~2^24) the kernel traps, so a pipeline bug (a transaction count that
// never arrives) fails the launch with an error instead of hanging the GPU.
__device__ __forceinline__ void mbar_wait_or_trap(uint32_t bar, uint32_t parity, uint32_t limit) {
  for (uint32_t n = 0;; ++n) {
    uint32_t done;
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done) return;
    if (n == limit) __trap();
  }
}

// createpolicy ... L2::evict_first: an L2 cache policy for data read once (streamed weights).
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}

// cp.async.bulk global -> shared, completing `bytes` transactions on mbarrier `bar`, with an L2
// cache policy (l2_evict_first_policy).
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                         uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n"
      ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}

// cp.async.bulk global -> shared without a cache hint (data read by more than one warp).
__device__ __forceinline__ void bulk_g2s_plain(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// ld.shared.v4.b32: 16 bytes of shared memory at a shared-window address into four registers.
__device__ __forceinline__ uint4 lds_128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ uint32_t lds_32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

// mma.sync.m16n8k16 with fp32 accumulators, bf16 or fp16 operands: d += a (16x16, row) x b (16x8, col).
// Fragments (g = lane / 4, tq = lane % 4): a[0] row g, K 2tq + {0, 1}; a[1] row g + 8, the same K;
// a[2] / a[3] the same rows at K 2tq + 8 + {0, 1}; b0 K 2tq + {0, 1} of column g, b1 K 2tq + 8 + {0, 1};
// d[0..1] row g, columns 2tq + {0, 1}; d[2..3] row g + 8.
template <bool BF16>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four e4m3 codes (bytes 0..3) -> two f16x2: lo = (byte 0, byte 1), hi = (byte 2, byte 3).
__device__ __forceinline__ void e4m3x4_to_f16x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n\t}"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
}

}  // namespace ptx
}  // namespace fp8lab
