// mma_blockwise_check.cu -- standalone GPU self-check of the blockwise FP8 mma kernels (no torch).
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_89,code=sm_89 -gencode arch=compute_90,code=sm_90 \
//        -I fp8lab/kernels fp8lab/kernels/mma_blockwise_check.cu -o /tmp/mma_blockwise_check
//   /tmp/mma_blockwise_check            # exit 0 = every case behaved as expected
//
// For each kernel configuration and each odd shape it: builds random e4m3 data with realistic
// scales (per-token 1x128 activation groups, 128x128 weight blocks, amax/448), poisons the output
// (bf16 NaN everywhere plus a guard zone after it), runs the kernel, and compares with a
// double-precision CPU reference computed here from the same e4m3 codes and scales. It prints
// the normalised max error max|out-ref|/max|ref| and the scale-free error
// 1 - 2*sum(x*y)/sum(x^2+y^2) (DeepGEMM's calc_diff). The deliberately buggy weight-scale lookups
// are run too and must FAIL where the seed says they are wrong (BN != 128 for the tile-index bug,
// BN > 128 for the first-column bug) and pass where they happen to be right: that also proves the
// check can fail.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mma_blockwise.cuh"

#define CUDA_CHECK(x)                                                                       \
  do {                                                                                      \
    cudaError_t err_ = (x);                                                                 \
    if (err_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_), __FILE__, \
                   __LINE__, cudaGetErrorString(err_));                                     \
      std::exit(2);                                                                         \
    }                                                                                       \
  } while (0)

namespace {

// Independent e4m3fn decoder (bias 7, no infinities, S.1111.111 = NaN), checked below against
// cuda_fp8.h for all 256 codes so the reference does not share the kernel's conversion path.
double decode_e4m3(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 0xF, man = v & 7;
  if (exp == 0xF && man == 7) return NAN;
  const double mag = exp == 0 ? std::ldexp(man / 8.0, -6) : std::ldexp(1.0 + man / 8.0, exp - 7);
  return sign ? -mag : mag;
}

uint8_t encode_e4m3(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Problem {
  int M, N, K;
  std::vector<uint8_t> a, b;      // [M, K], [N, K] e4m3 codes
  std::vector<float> sa_mmajor;   // [K/128, M]: element (m, kb) at kb*M + m
  std::vector<float> sa_rowmajor; // [M, K/128]
  std::vector<float> sb;          // [ceil(N/128), K/128] row-major
  std::vector<double> ref;        // [M, N]
  double ref_absmax = 0;
};

Problem make_problem(int M, int N, int K, unsigned seed) {
  Problem P;
  P.M = M, P.N = N, P.K = K;
  const int KB = K / 128, NB = (N + 127) / 128;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uni(-3.f, 3.f);

  // Activations: per-token magnitude spread over 2^-3..2^3 and a few outlier channels (x20),
  // the shape that makes per-token 1x128 scales worth having.
  std::vector<float> x(static_cast<size_t>(M) * K);
  std::vector<float> row_mag(M), col_mag(K, 1.f);
  for (auto& r : row_mag) r = std::exp2(uni(rng));
  for (int k = 0; k < K; k += 37) col_mag[k] = 20.f;
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) x[static_cast<size_t>(m) * K + k] = normal(rng) * row_mag[m] * col_mag[k];
  P.a.resize(x.size());
  P.sa_mmajor.resize(static_cast<size_t>(M) * KB);
  P.sa_rowmajor.resize(static_cast<size_t>(M) * KB);
  for (int m = 0; m < M; ++m)
    for (int kb = 0; kb < KB; ++kb) {
      float amax = 0.f;
      for (int k = kb * 128; k < kb * 128 + 128; ++k) amax = std::fmax(amax, std::fabs(x[static_cast<size_t>(m) * K + k]));
      const float s = std::fmax(amax, 1e-10f) / 448.f;
      P.sa_mmajor[static_cast<size_t>(kb) * M + m] = s;
      P.sa_rowmajor[static_cast<size_t>(m) * KB + kb] = s;
      for (int k = kb * 128; k < kb * 128 + 128; ++k)
        P.a[static_cast<size_t>(m) * K + k] = encode_e4m3(x[static_cast<size_t>(m) * K + k] / s);
    }

  // Weights: ~N(0, 0.02) with a per-128x128-block magnitude 2^(u + 2*(nb odd)), u in [-0.5, 0.5]:
  // neighbouring N blocks differ by 2x..8x in scale, so reading the wrong block's scale always shows
  // (the buggy lookups below must fail for sure, not by luck of the draw).
  std::uniform_real_distribution<float> uni2(-0.5f, 0.5f);
  std::vector<float> w(static_cast<size_t>(N) * K);
  std::vector<float> blk_mag(static_cast<size_t>(NB) * KB);
  for (int nb = 0; nb < NB; ++nb)
    for (int kb = 0; kb < KB; ++kb) blk_mag[static_cast<size_t>(nb) * KB + kb] = std::exp2(uni2(rng) + 2.f * (nb & 1));
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      w[static_cast<size_t>(n) * K + k] = 0.02f * normal(rng) * blk_mag[static_cast<size_t>(n / 128) * KB + k / 128];
  P.b.resize(w.size());
  P.sb.resize(static_cast<size_t>(NB) * KB);
  for (int nb = 0; nb < NB; ++nb)
    for (int kb = 0; kb < KB; ++kb) {
      float amax = 0.f;
      for (int n = nb * 128; n < std::min(N, nb * 128 + 128); ++n)
        for (int k = kb * 128; k < kb * 128 + 128; ++k) amax = std::fmax(amax, std::fabs(w[static_cast<size_t>(n) * K + k]));
      const float s = std::fmax(amax, 1e-10f) / 448.f;
      P.sb[static_cast<size_t>(nb) * KB + kb] = s;
      for (int n = nb * 128; n < std::min(N, nb * 128 + 128); ++n)
        for (int k = kb * 128; k < kb * 128 + 128; ++k)
          P.b[static_cast<size_t>(n) * K + k] = encode_e4m3(w[static_cast<size_t>(n) * K + k] / s);
    }

  // Reference: sum over K blocks of As * Bs * (exact dot of the decoded codes), in double.
  std::vector<double> ad(P.a.size()), bd(P.b.size());
  for (size_t i = 0; i < ad.size(); ++i) ad[i] = decode_e4m3(P.a[i]);
  for (size_t i = 0; i < bd.size(); ++i) bd[i] = decode_e4m3(P.b[i]);
  P.ref.assign(static_cast<size_t>(M) * N, 0.0);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double c = 0;
      for (int kb = 0; kb < KB; ++kb) {
        double dot = 0;
        const double* ar = &ad[static_cast<size_t>(m) * K + kb * 128];
        const double* br = &bd[static_cast<size_t>(n) * K + kb * 128];
        for (int k = 0; k < 128; ++k) dot += ar[k] * br[k];
        c += dot * P.sa_rowmajor[static_cast<size_t>(m) * KB + kb] * P.sb[static_cast<size_t>(n / 128) * KB + kb];
      }
      P.ref[static_cast<size_t>(m) * N + n] = c;
      P.ref_absmax = std::fmax(P.ref_absmax, std::fabs(c));
    }
  return P;
}

struct DeviceProblem {
  uint8_t *a = nullptr, *b = nullptr;
  float *sa_m = nullptr, *sa_r = nullptr, *sb = nullptr;
  __nv_bfloat16* c = nullptr;
  size_t c_elems = 0;
  static constexpr size_t kGuard = 1024;  // bf16 elements after C that must stay poisoned

  explicit DeviceProblem(const Problem& P) {
    CUDA_CHECK(cudaMalloc(&a, P.a.size()));
    CUDA_CHECK(cudaMalloc(&b, P.b.size()));
    CUDA_CHECK(cudaMalloc(&sa_m, P.sa_mmajor.size() * 4));
    CUDA_CHECK(cudaMalloc(&sa_r, P.sa_rowmajor.size() * 4));
    CUDA_CHECK(cudaMalloc(&sb, P.sb.size() * 4));
    c_elems = static_cast<size_t>(P.M) * P.N;
    CUDA_CHECK(cudaMalloc(&c, (c_elems + kGuard) * 2));
    CUDA_CHECK(cudaMemcpy(a, P.a.data(), P.a.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b, P.b.data(), P.b.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(sa_m, P.sa_mmajor.data(), P.sa_mmajor.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(sa_r, P.sa_rowmajor.data(), P.sa_rowmajor.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(sb, P.sb.data(), P.sb.size() * 4, cudaMemcpyHostToDevice));
  }
  ~DeviceProblem() {
    cudaFree(a), cudaFree(b), cudaFree(sa_m), cudaFree(sa_r), cudaFree(sb), cudaFree(c);
  }
};

struct Outcome {
  double max_err, diff;
  bool finite, guard_ok;
};

template <class Cfg, int V, int L>
Outcome run_case(const Problem& P, DeviceProblem& D, int swizzle, bool mmajor_scales) {
  // 0xFFFF is a bf16 NaN: any output the kernel fails to write stays NaN and fails the check.
  CUDA_CHECK(cudaMemset(D.c, 0xFF, (D.c_elems + DeviceProblem::kGuard) * 2));
  fp8lab::MmaParams p{};
  p.a = D.a;
  p.b = D.b;
  p.b_scale = D.sb;
  p.bs_sn = P.K / 128;
  p.bs_sk = 1;
  if (mmajor_scales) {
    p.a_scale = D.sa_m, p.as_sm = 1, p.as_sk = P.M;
  } else {
    p.a_scale = D.sa_r, p.as_sm = P.K / 128, p.as_sk = 1;
  }
  p.c = D.c;
  p.M = P.M, p.N = P.N, p.K = P.K;
  p.swizzle = swizzle;
  CUDA_CHECK((fp8lab::launch_mma_blockwise<Cfg, V, L>(p, nullptr)));
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> out(D.c_elems + DeviceProblem::kGuard);
  CUDA_CHECK(cudaMemcpy(out.data(), D.c, out.size() * 2, cudaMemcpyDeviceToHost));
  Outcome o{0, 0, true, true};
  double sxy = 0, sxx_yy = 0, max_abs = 0;
  for (size_t i = 0; i < D.c_elems; ++i) {
    const double y = bf16_to_float(out[i]), x = P.ref[i];
    if (!std::isfinite(y)) o.finite = false;
    max_abs = std::fmax(max_abs, std::fabs(y - x));
    sxy += x * y;
    sxx_yy += x * x + y * y;
  }
  for (size_t i = D.c_elems; i < out.size(); ++i)
    if (out[i] != 0xFFFF) o.guard_ok = false;
  o.max_err = o.finite ? max_abs / P.ref_absmax : INFINITY;
  o.diff = o.finite ? 1.0 - 2.0 * sxy / sxx_yy : INFINITY;
  return o;
}

// Tolerances: bf16 output rounding alone is up to 2^-9 = 2.0e-3 relative per element; fp32
// accumulation adds far less. calc_diff of bf16 rounding is ~1e-6.
constexpr double kMaxErrTol = 8e-3;
constexpr double kDiffTol = 2e-5;

int g_failures = 0;

template <class Cfg, int V, int L>
void check(const char* name, const Problem& P, DeviceProblem& D, int swizzle, bool mmajor, bool expect_ok) {
  const Outcome o = run_case<Cfg, V, L>(P, D, swizzle, mmajor);
  const bool ok = o.finite && o.guard_ok && o.max_err < kMaxErrTol && o.diff < kDiffTol;
  const bool as_expected = ok == expect_ok && o.guard_ok;  // a guard overwrite is never acceptable
  if (!as_expected) ++g_failures;
  std::printf("%-46s M=%4d N=%4d K=%5d swz=%d %-7s max_err=%.3e calc_diff=%.3e finite=%d guard=%d  %s%s\n", name,
              P.M, P.N, P.K, swizzle, mmajor ? "Mmajor" : "rowmaj", o.max_err, o.diff, o.finite, o.guard_ok,
              ok ? "pass" : "FAIL", as_expected ? (expect_ok ? "" : " (expected: buggy lookup)") : "  <-- UNEXPECTED");
}

}  // namespace

int main() {
  using namespace fp8lab;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  if (prop.major * 10 + prop.minor < 89) {
    std::printf("mma.sync e4m3 needs sm_89 or newer\n");
    return 2;
  }

  // The reference's decoder against cuda_fp8.h, all 256 codes.
  for (int v = 0; v < 256; ++v) {
    __nv_fp8_e4m3 q;
    q.__x = static_cast<__nv_fp8_storage_t>(v);
    const double mine = decode_e4m3(static_cast<uint8_t>(v)), theirs = static_cast<float>(q);
    if (!(mine == theirs || (std::isnan(mine) && std::isnan(theirs)))) {
      std::printf("e4m3 decode mismatch at 0x%02x: %g vs %g\n", v, mine, theirs);
      return 1;
    }
  }

  // The launcher refuses K % 128 != 0.
  {
    MmaParams p{};
    p.M = 8, p.N = 8, p.K = 200;
    if (launch_mma_blockwise<TileConfig<16, 64, 16, 32, 4>, kPerBlock, kPerWarp>(p, nullptr) != cudaErrorInvalidValue) {
      std::printf("launcher accepted K=200\n");
      return 1;
    }
  }

  using Seed = TileConfig<64, 128, 64, 64, 3>;
  using Decode = TileConfig<16, 64, 16, 32, 4>;
  using Mid = TileConfig<32, 128, 32, 64, 3>;
  using Narrow = TileConfig<64, 64, 32, 32, 4>;
  using Tall = TileConfig<128, 64, 64, 32, 4>;
  using Wide = TileConfig<128, 256, 64, 64, 2>;
  using Big = TileConfig<256, 128, 64, 64, 2>;

  struct Shape { int M, N, K; };
  std::vector<Shape> shapes;
  for (int M : {1, 7, 83, 300})
    for (int N : {136, 256})
      for (int K : {256, 384}) shapes.push_back({M, N, K});
  shapes.push_back({129, 264, 1536});  // many K blocks: every pipeline slot is reused several times
  shapes.push_back({513, 392, 640});   // several tile rows, so the swizzled launch order is exercised

  unsigned seed = 1234;
  for (const Shape& s : shapes) {
    const Problem P = make_problem(s.M, s.N, s.K, seed++);
    DeviceProblem D(P);
    check<Seed, kPerSlice, kPerWarp>("seed 64x128/64x64/3 per_slice", P, D, 1, true, true);
    check<Seed, kPerBlock, kPerWarp>("seed 64x128/64x64/3 per_block", P, D, 1, true, true);
    check<Seed, kPerBlockInplace, kPerWarp>("seed 64x128/64x64/3 per_block_inplace", P, D, 1, true, true);
    check<Seed, kPerBlock, kPerWarp>("seed 64x128/64x64/3 per_block", P, D, 8, false, true);
    check<Decode, kPerBlock, kPerWarp>("16x64/16x32/4 per_block", P, D, 1, true, true);
    check<Decode, kPerSlice, kPerWarp>("16x64/16x32/4 per_slice", P, D, 4, false, true);
    check<Mid, kPerSlice, kPerWarp>("32x128/32x64/3 per_slice", P, D, 1, true, true);
    check<Mid, kPerBlockInplace, kPerWarp>("32x128/32x64/3 per_block_inplace", P, D, 8, true, true);
    check<Tall, kPerBlock, kPerWarp>("128x64/64x32/4 per_block", P, D, 8, true, true);
    check<Wide, kPerBlockInplace, kPerWarp>("128x256/64x64/2 per_block_inplace", P, D, 1, true, true);
    check<Wide, kPerBlock, kPerWarp>("128x256/64x64/2 per_block", P, D, 8, true, true);
    check<Big, kPerSlice, kPerWarp>("256x128/64x64/2 per_slice", P, D, 1, true, true);
    // Buggy lookups (claim A5). All shapes here have N > 128, so the bugs must show.
    check<Seed, kPerBlock, kPerCtaTile>("BUG per_cta 64x128 (BN == 128: right)", P, D, 1, true, true);
    check<Narrow, kPerBlock, kPerCtaTile>("BUG per_cta 64x64 (BN != 128: wrong)", P, D, 1, true, false);
    check<Wide, kPerBlock, kPerCtaTile>("BUG per_cta 128x256 (BN != 128: wrong)", P, D, 1, true, false);
    check<Narrow, kPerBlock, kPerCtaFirstCol>("BUG first_col 64x64 (BN <= 128: right)", P, D, 1, true, true);
    check<Wide, kPerBlock, kPerCtaFirstCol>("BUG first_col 128x256 (BN > 128: wrong)", P, D, 1, true, false);
  }
  if (g_failures) {
    std::printf("\n%d case(s) did not behave as expected\n", g_failures);
    return 1;
  }
  std::printf("\nall cases behaved as expected\n");
  return 0;
}
