// Kernel benchmark of the vt CPU backend, measured in one run against this machine's own
// memory read bandwidth:
//   1. streaming-read bandwidth of a buffer much larger than the caches (1 and N threads,
//      one plain stream, one prefetched stream, and 4 prefetched streams per thread as the
//      decode kernels read; the best is the limit the kernels are compared with);
//   2. the multiply limit: the rate of the kernel set's widest multiply-add instruction
//      (vdpbf16ps, or the F32 FMA) on every thread, independent accumulators, no loads.
//      A decode step of M rows needs M·K·N/w of them (w multiplies each: 32, 16 or 8), so
//      weights cannot stream faster than rate·w/M elements per second however the memory
//      performs: from M = 4 on this bounds the decode before the bandwidth does on a
//      2-core VM;
//   3. MatmulFp8 (fp8 weights prepared, as a model prepares them, and writable) and BF16
//      Matmul on Qwen3-0.6B- and Qwen3-8B-shaped projections: decode
//      (M = 1, 2, 4, 8, 16) as weight bytes streamed per second and the fraction of the
//      limit (the lower of the bandwidth and the multiply limit), the fp8 speedup over
//      BF16; prefill (M = 128, 512) as GFLOP/s;
//   4. block FP8 (MatmulFp8GroupScaled, 128 x 128 weight blocks) on the same projections
//      beside static FP8 (prepared and writable): decode (M = 1, 4, 16) as weight and scale
//      bytes streamed per second, prefill (M = 128) as GFLOP/s;
//   5. decode attention (PagedAttention, one query row over a paged cache of 1k and 4k
//      tokens, and 16 sequences of 176 tokens at once, Qwen3-0.6B and Qwen3-8B head layouts) with BF16 and FP8 caches, as cache
//      bytes read per second and the fraction of the bandwidth;
//   6. prefill attention (PagedAttention of a 1k and a 4k prompt, Qwen3-0.6B heads) with
//      BF16 and FP8 caches, the tile kernel beside 32-row items of the one-query kernel.
// Weights rotate through copies totalling more than the last-level cache, so decode reads
// them from memory as a model's forward pass does. Figures are medians of repeated runs
// (the fp8 and BF16 calls alternated, so all medians see the same machine state).
//
//   vt_kernels_bench [--quick] [--threads N] [--cpu-time] [--isa LEVEL]   (LEVEL: a vt::CpuIsaLevels name:
//                                                           scalar|avx2|avx512|avx512bf16|amx on
//                                                           x86-64, scalar|neon|neonbf16 on aarch64)
//                    [--fp8-decode half|f32-bits]   (the avx2/avx512 levels' fp8 stream decode;
//                                                    default: f32-bits on AMD, half elsewhere)
//                    [--only projections|block-fp8|attention|prefill-attention]
//                                                   (sections 1 and 2, then that one)
// It builds for aarch64 too (scripts/build_aarch64.sh --bench), there with NEON loads in the
// read loop and FMLA / BFDOT as the multiply limit (neonbf16 also prints the BFMMLA rate, the
// prefill GEMM's multiply, against BFDOT's).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "vt/cpu/attention_kernels.h"
#include "vt/cpu/matmul/kernels.h"
#include "vt/vt.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  bool quick = false;
  std::string only;  // --only: one section (bandwidth, multiply limit and it), empty: all
  int threads = 2;
  vt::CpuIsa isa = vt::CpuIsa::kBest;  // highest kernel level to use (--isa)
};

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// --cpu-time: TimeMedians counts the process's CPU time instead of the wall clock. With
// --threads 1 (the caller runs the work) that is the work's own time, unaffected by the
// time other programs hold the cores: on a machine shared with builds, far steadier.
bool g_cpu_time = false;
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string Fixed1(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs fn(rep) at least min_reps times and for at least min_seconds; median seconds.
double TimeMedian(const std::function<void(int)>& fn, int min_reps, double min_seconds) {
  fn(0);  // warm-up: page faults, thread wake-up, scratch allocation
  std::vector<double> t;
  const auto start = Clock::now();
  for (int rep = 1; static_cast<int>(t.size()) < min_reps || Seconds(start, Clock::now()) < min_seconds; ++rep) {
    const auto a = Clock::now();
    fn(rep);
    t.push_back(Seconds(a, Clock::now()));
    if (t.size() >= 200) break;
  }
  return Median(t);
}

// Median seconds of each fns[i](rep), run in turn (f0, f1, ..., f0, f1, ...) at least
// min_reps times each and for at least min_seconds: the medians then see the same moments
// of a machine whose speed drifts (this project's VM does), so their ratios are steadier
// than those of back-to-back TimeMedian calls.
std::vector<double> TimeMedians(const std::vector<std::function<void(int)>>& fns, int min_reps, double min_seconds) {
  for (const auto& f : fns) f(0);
  std::vector<std::vector<double>> t(fns.size());
  const auto start = Clock::now();
  for (int rep = 1; static_cast<int>(t[0].size()) < min_reps || Seconds(start, Clock::now()) < min_seconds; ++rep) {
    for (size_t i = 0; i < fns.size(); ++i) {
      const auto t0 = Clock::now();
      const double c0 = g_cpu_time ? CpuSeconds() : 0.0;
      fns[i](rep);
      t[i].push_back(g_cpu_time ? CpuSeconds() - c0 : Seconds(t0, Clock::now()));
    }
    if (t[0].size() >= 200) break;
  }
  std::vector<double> medians;
  for (auto& v : t) medians.push_back(Median(v));
  return medians;
}

// Streaming read of a buffer with `threads` threads; GB/s (1e9 bytes). Each thread reads
// its contiguous share as `streams` interleaved sequential streams (its share cut into
// that many parts, 64 bytes from each per step), prefetching kReadPrefetch bytes ahead
// when `prefetch` is set, as the decode kernels do (4 streams with prefetch). The plain
// single stream is the textbook figure; on this project's 2-core EPYC VM the kernels'
// pattern reads faster, and a bandwidth below what a kernel attains is no limit, so the
// benchmark compares against the best of the three.
constexpr int64_t kReadPrefetch = 1536;
double ReadBandwidth(const std::vector<uint64_t>& buf, int threads, int streams, bool prefetch, const Options& opt) {
  const vt::Queue q = vt::Queue::Cpu(threads);
  std::vector<uint64_t> sink(64);
  const int64_t n = static_cast<int64_t>(buf.size());
  auto read = [&](int) {
    q.ParallelFor(n, 4096, [&](int64_t b, int64_t e) {
      uint64_t s0 = 0, s1 = 0;
      const int64_t part = (e - b) / streams / 8 * 8;  // 64-byte steps per stream
#if defined(__SSE2__)
      __m128i v0 = _mm_setzero_si128(), v1 = v0, v2 = v0, v3 = v0;
      for (int64_t i = 0; i < part; i += 8) {
        for (int st = 0; st < streams; ++st) {
          const auto* p = reinterpret_cast<const __m128i*>(buf.data() + b + st * part + i);
          if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(p) + kReadPrefetch, _MM_HINT_T0);
          v0 = _mm_add_epi64(v0, _mm_load_si128(p));
          v1 = _mm_add_epi64(v1, _mm_load_si128(p + 1));
          v2 = _mm_add_epi64(v2, _mm_load_si128(p + 2));
          v3 = _mm_add_epi64(v3, _mm_load_si128(p + 3));
        }
      }
      alignas(16) uint64_t lanes[2];
      _mm_store_si128(reinterpret_cast<__m128i*>(lanes),
                      _mm_add_epi64(_mm_add_epi64(v0, v1), _mm_add_epi64(v2, v3)));
      s1 = lanes[0] + lanes[1];
#elif defined(__aarch64__)
      uint64x2_t v0 = vdupq_n_u64(0), v1 = v0, v2 = v0, v3 = v0;
      for (int64_t i = 0; i < part; i += 8) {
        for (int st = 0; st < streams; ++st) {
          const uint64_t* p = buf.data() + b + st * part + i;
          if (prefetch) __builtin_prefetch(reinterpret_cast<const char*>(p) + kReadPrefetch);
          v0 = vaddq_u64(v0, vld1q_u64(p));
          v1 = vaddq_u64(v1, vld1q_u64(p + 2));
          v2 = vaddq_u64(v2, vld1q_u64(p + 4));
          v3 = vaddq_u64(v3, vld1q_u64(p + 6));
        }
      }
      s1 = vaddvq_u64(vaddq_u64(vaddq_u64(v0, v1), vaddq_u64(v2, v3)));
#else
      for (int64_t i = b; i < b + streams * part; ++i) s0 += buf[i];
#endif
      for (int64_t i = b + streams * part; i < e; ++i) s0 += buf[i];
      sink[(b / 4096) % 64] += s0 + s1;
    });
  };
  const double t = TimeMedian(read, opt.quick ? 3 : 7, 0.0);
  return static_cast<double>(n) * 8.0 / t / 1e9;
}

// Multiply-add instructions per second on `threads` threads (each running 24 independent
// accumulator chains, so latency is hidden), of the kind the chosen kernel set decodes
// with, and the multiplies each does; {0, 0} where none is measured (scalar set).
struct MultiplyRate {
  double per_second;
  int width;
};
#if defined(__x86_64__) || defined(_M_X64)
// One function per instruction (vector types cannot cross into code compiled without
// the ISA, so no shared template): 24 accumulators, `iters` rounds. The unroll pragma keeps
// the accumulators in registers: without it GCC 12 kept them in a stack array and each
// round loaded, multiplied twice into and stored every element, a latency-bound chain
// that measured a third of the real rate (so the kernels looked faster than the limit).
#define VT_BENCH_CHAINS(NAME, TARGET, VEC, ZERO, SEED, OP)                     \
  __attribute__((target(TARGET), noinline)) uint64_t NAME(int64_t iters) {     \
    const auto x = SEED;                                                       \
    VEC acc[24];                                                               \
    for (auto& a : acc) a = ZERO;                                              \
    for (int64_t i = 0; i < iters; ++i) {                                      \
      _Pragma("GCC unroll 24") for (int c = 0; c < 24; ++c) acc[c] =           \
          OP(acc[c], x, x);                                                    \
    }                                                                          \
    uint64_t sum = 0;                                                          \
    for (auto& a : acc) {                                                      \
      uint64_t u;                                                              \
      std::memcpy(&u, &a, sizeof u);                                           \
      sum += u;                                                                \
    }                                                                          \
    return sum;                                                                \
  }
VT_BENCH_CHAINS(DpChains, "avx512f,avx512bf16", __m512, _mm512_setzero_ps(),
                reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3F80)), _mm512_dpbf16_ps)
VT_BENCH_CHAINS(Fma512Chains, "avx512f", __m512, _mm512_setzero_ps(), _mm512_set1_ps(0.5f), _mm512_fmadd_ps)
VT_BENCH_CHAINS(Fma256Chains, "avx2,fma", __m256, _mm256_setzero_ps(), _mm256_set1_ps(0.5f), _mm256_fmadd_ps)
#undef VT_BENCH_CHAINS
#elif defined(__aarch64__)
// The same 24 chains with FMLA (4 lanes) and BFDOT (8 BF16 products into 4 lanes).
__attribute__((noinline)) uint64_t FmlaChains(int64_t iters) {
  const float32x4_t x = vdupq_n_f32(0.5f);
  float32x4_t acc[24];
  for (auto& a : acc) a = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < iters; ++i) {
    _Pragma("GCC unroll 24") for (int c = 0; c < 24; ++c) acc[c] = vfmaq_f32(acc[c], x, x);
  }
  uint64_t sum = 0;
  for (auto& a : acc) sum += vgetq_lane_u64(vreinterpretq_u64_f32(a), 0);
  return sum;
}
__attribute__((target("arch=armv8.2-a+bf16"), noinline)) uint64_t BfdotChains(int64_t iters) {
  volatile uint16_t one = 0x3F80;  // from memory: a constant became an fp16 FMOV, which +bf16 lacks
  const bfloat16x8_t x = vreinterpretq_bf16_u16(vdupq_n_u16(one));
  float32x4_t acc[24];
  for (auto& a : acc) a = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < iters; ++i) {
    _Pragma("GCC unroll 24") for (int c = 0; c < 24; ++c) acc[c] = vbfdotq_f32(acc[c], x, x);
  }
  uint64_t sum = 0;
  for (auto& a : acc) sum += vgetq_lane_u64(vreinterpretq_u64_f32(a), 0);
  return sum;
}
// BFMMLA (16 BF16 products into a 2x2 f32 tile), the neonbf16 prefill GEMM's multiply.
__attribute__((target("arch=armv8.2-a+bf16"), noinline)) uint64_t BfmmlaChains(int64_t iters) {
  volatile uint16_t one = 0x3F80;
  const bfloat16x8_t x = vreinterpretq_bf16_u16(vdupq_n_u16(one));
  float32x4_t acc[24];
  for (auto& a : acc) a = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < iters; ++i) {
    _Pragma("GCC unroll 24") for (int c = 0; c < 24; ++c) acc[c] = vbfmmlaq_f32(acc[c], x, x);
  }
  uint64_t sum = 0;
  for (auto& a : acc) sum += vgetq_lane_u64(vreinterpretq_u64_f32(a), 0);
  return sum;
}
#endif

// Instructions per second of 24 independent chains of `chains`'s instruction on every thread.
double ChainRate(const vt::Queue& q, uint64_t (*chains)(int64_t), int threads, const Options& opt) {
  const int64_t iters = opt.quick ? 200000 : 1000000;
  std::vector<uint64_t> sink(static_cast<size_t>(threads));
  const double t = TimeMedian(
      [&](int) {
        q.ParallelFor(threads, 1, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) sink[static_cast<size_t>(i)] += chains(iters);
        });
      },
      opt.quick ? 3 : 7, 0.0);
  return 24.0 * static_cast<double>(iters) * threads / t;
}

MultiplyRate MeasureMultiplyRate(const vt::Queue& q, int threads, const Options& opt) {
#if defined(__x86_64__) || defined(_M_X64) || defined(__aarch64__)
  uint64_t (*chains)(int64_t) = nullptr;
  int width = 0;
  switch (q.cpu_isa()) {
#if defined(__aarch64__)
    case vt::CpuIsa::kNeonBf16: chains = &BfdotChains, width = 8; break;
    case vt::CpuIsa::kNeon: chains = &FmlaChains, width = 4; break;
#else
    case vt::CpuIsa::kAvx512Bf16: chains = &DpChains, width = 32; break;
    case vt::CpuIsa::kAvx512: chains = &Fma512Chains, width = 16; break;
    case vt::CpuIsa::kAvx2: chains = &Fma256Chains, width = 8; break;
#endif
    default: return {0.0, 0};
  }
  return {ChainRate(q, chains, threads, opt), width};
#else
  (void)q, (void)threads, (void)opt;
  return {0.0, 0};
#endif
}

struct ShapeSpec {
  const char* model;
  const char* proj;
  int64_t K, N;
};

// Copies of one weight matrix, enough of them to exceed the caches.
struct Rotation {
  std::vector<vt::Tensor> copies;
  const vt::Tensor& At(int rep) const { return copies[static_cast<size_t>(rep) % copies.size()]; }
};

Rotation MakeRotation(const vt::Tensor& w, int64_t total_bytes) {
  Rotation r;
  const int64_t count = std::max<int64_t>(2, (total_bytes + static_cast<int64_t>(w.nbytes()) - 1) /
                                                 static_cast<int64_t>(w.nbytes()));
  for (int64_t i = 0; i < count; ++i) {
    vt::Tensor c = vt::Tensor::Empty(w.shape(), w.dtype());
    c.CopyFrom(w);
    r.copies.push_back(c);
  }
  return r;
}

vt::Tensor RandomFp8(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint8_t> v(static_cast<size_t>(rows * cols));
  std::uniform_int_distribution<int> code(0, 0x7E);
  for (auto& b : v) b = static_cast<uint8_t>(code(rng) | ((rng() & 1) << 7));
  return vt::Tensor::FromHost(v.data(), {rows, cols}, vt::DType::kF8E4M3);
}

vt::Tensor RandomBf16(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint16_t> v(static_cast<size_t>(rows * cols));
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (auto& h : v) h = vt::FloatToBf16(nd(rng));
  return vt::Tensor::FromHost(v.data(), {rows, cols}, vt::DType::kBF16);
}


// Rows x cols fp8 block scales (powers of two near 2^-8, as a quantizer of small weights makes).
vt::Tensor RandomScales(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  std::uniform_int_distribution<int> e(-10, -6);
  for (auto& x : v) x = std::ldexp(1.0f, e(rng));
  return vt::Tensor::FromHost(v.data(), {rows, cols}, vt::DType::kF32);
}

// 4. Block FP8 beside static FP8 on the same codes: MatmulFp8GroupScaled on a prepared weight
// (as a model runs block FP8: laid out for the outer-product tiles where the level has them)
// and on the weight as stored, against MatmulFp8 on a prepared copy (as a model runs static
// FP8) and on writable weights (streamed as stored), alternately; decode (M = 1, 4, 16) as
// weight and scale bytes streamed per second, prefill (M = 128) as GFLOP/s.
void BlockFp8(const vt::Queue& q, const std::vector<ShapeSpec>& shapes, double bw, int64_t rotation_bytes,
              int reps, double secs, int prefill_reps, std::mt19937& rng) {
  std::printf("\n%-11s %-17s %4s | %9s %9s %6s | %9s | %9s %9s | %9s | %8s %8s\n", "model", "projection", "M",
              "block us", "GB/s", "of bw", "stored us", "prep us", "GB/s", "rw us", "blk/prep", "blk/strd");
  for (const ShapeSpec& s : shapes) {
    const int64_t G = (s.K + 127) / 128, NB = (s.N + 127) / 128;
    const vt::Tensor w_src = RandomFp8(s.N, s.K, rng);
    const Rotation w = MakeRotation(w_src, rotation_bytes), ws = MakeRotation(w_src, rotation_bytes);
    Rotation wp = MakeRotation(w_src, rotation_bytes), wbp = MakeRotation(w_src, rotation_bytes);
    for (vt::Tensor& t : wp.copies) {
      t.SetReadOnly();
      t = vt::PrepareWeight(q, t, vt::WeightUse::kMatmulB);
    }
    for (vt::Tensor& t : wbp.copies) {
      t.SetReadOnly();
      t = vt::PrepareWeight(q, t, vt::WeightUse::kMatmulGroupScaledB);
      if (t.backend_layout() != nullptr) t.ReleaseBytes();
    }
    const vt::Tensor sb = RandomScales(NB, G, rng);
    for (int64_t M : {1, 4, 16, 128}) {
      const vt::Tensor sa = RandomScales(M, G, rng), a = RandomFp8(M, s.K, rng);
      vt::Tensor out = vt::Tensor::Empty({M, s.N}, vt::DType::kBF16);
      for (size_t i = 0; i < w.copies.size(); ++i) {
        vt::MatmulFp8GroupScaled(q, out, a, sa, wbp.At(static_cast<int>(i)), sb, 128, 128);
        vt::MatmulFp8GroupScaled(q, out, a, sa, w.At(static_cast<int>(i)), sb, 128, 128);
        vt::MatmulFp8(q, out, a, wp.At(static_cast<int>(i)), 0.01f);
        vt::MatmulFp8(q, out, a, ws.At(static_cast<int>(i)), 0.01f);
      }
      const bool prefill = M > 16;
      const std::vector<double> t =
          TimeMedians({[&](int rep) { vt::MatmulFp8GroupScaled(q, out, a, sa, wbp.At(rep), sb, 128, 128); },
                       [&](int rep) { vt::MatmulFp8GroupScaled(q, out, a, sa, w.At(rep), sb, 128, 128); },
                       [&](int rep) { vt::MatmulFp8(q, out, a, wp.At(rep), 0.01f); },
                       [&](int rep) { vt::MatmulFp8(q, out, a, ws.At(rep), 0.01f); }},
                      prefill ? prefill_reps : reps, prefill ? 0.0 : secs);
      const double bytes_blk = static_cast<double>(s.N * s.K + NB * G * 4), bytes_st = static_cast<double>(s.N * s.K);
      const double flop = 2.0 * static_cast<double>(M * s.N * s.K);
      if (prefill)
        std::printf("%-11s %-17s %4lld | %9.1f %7.1fGF %6s | %9.1f | %9.1f %7.1fGF | %9.1f | %7.2fx %7.2fx\n",
                    s.model, s.proj, static_cast<long long>(M), t[0] * 1e6, flop / t[0] / 1e9, "", t[1] * 1e6,
                    t[2] * 1e6, flop / t[2] / 1e9, t[3] * 1e6, t[0] / t[2], t[0] / t[1]);
      else
        std::printf("%-11s %-17s %4lld | %9.1f %9.1f %5.0f%% | %9.1f | %9.1f %9.1f | %9.1f | %7.2fx %7.2fx\n",
                    s.model, s.proj, static_cast<long long>(M), t[0] * 1e6, bytes_blk / t[0] / 1e9,
                    100.0 * bytes_blk / t[0] / 1e9 / bw, t[1] * 1e6, t[2] * 1e6, bytes_st / t[2] / 1e9, t[3] * 1e6,
                    t[0] / t[2], t[0] / t[1]);
    }
  }
  std::printf("block: MatmulFp8GroupScaled on a prepared weight (as a model runs block FP8; its [N/128, K/128] f32 "
              "scales, rows of a with their K/128 scales); stored: the same on the weight as stored; prep: "
              "MatmulFp8 on a prepared copy of the same codes (as a model runs static FP8); rw: MatmulFp8 on them "
              "writable (as stored). GB/s counts weight (and scale) bytes; M = 128: GFLOP/s.\n");
}

// rows copies of src's rows, cycled (random data is slow to draw; the caches only need
// data no cache holds).
vt::Tensor Tiled(const vt::Tensor& src, int64_t rows) {
  vt::Tensor t = vt::Tensor::Empty({rows, src.dim(1)}, src.dtype());
  const size_t row_bytes = src.nbytes() / static_cast<size_t>(src.dim(0));
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(t.data()) + static_cast<size_t>(r) * row_bytes,
                static_cast<const char*>(src.data()) + static_cast<size_t>(r % src.dim(0)) * row_bytes, row_bytes);
  return t;
}

// 5. Decode attention over a paged cache: one sequence of ctx tokens in 16-token blocks
// whose ids are shuffled (as a cache that has served a while holds them), copies of the
// cache rotating past the caches as the layers of a model do.
void DecodeAttention(const vt::Queue& q, bool quick, double bw, int64_t rotation_bytes, int reps, double secs,
                     std::mt19937& rng) {
  struct Heads {
    const char* model;
    int64_t Hq, Hk, D;
  };
  constexpr int64_t kBlock = 16;
  std::printf("\n%-11s %9s | %9s %9s %6s | %9s %9s %6s | %7s | %9s %9s\n", "heads", "seqs x ctx", "bf16 us", "GB/s",
              "of bw", "fp8 us", "GB/s", "of bw", "fp8/bf16", "bf16 wid.", "fp8 wid.");
  struct Case {
    int64_t seqs, ctx;
  };
  // One long context, and 16 concurrent sequences at the engine benchmark's decode context
  // (prompt 128, 64 out: 176 tokens at the end).
  const std::vector<Case> cases = quick ? std::vector<Case>{{1, 4096}, {16, 176}}
                                        : std::vector<Case>{{1, 1024}, {1, 4096}, {16, 176}};
  for (const Heads& h : {Heads{"Qwen3-0.6B", 16, 8, 128}, Heads{"Qwen3-8B", 32, 8, 128}}) {
    for (const Case& c : cases) {
      const int64_t S = c.seqs, ctx = c.ctx;
      const int64_t blocks = (ctx + kBlock - 1) / kBlock, row = h.Hk * h.D;
      const int64_t per_copy = S * 2 * ctx * row * 2;  // BF16 keys and values
      const int64_t copies = std::max<int64_t>(2, rotation_bytes / per_copy);
      std::vector<vt::Tensor> tables;
      std::vector<int32_t> ids(static_cast<size_t>(S * blocks * copies));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
      std::shuffle(ids.begin(), ids.end(), rng);
      for (int64_t k = 0; k < copies; ++k)
        tables.push_back(vt::Tensor::FromHost(ids.data() + k * S * blocks, {S, blocks}, vt::DType::kI32));
      const std::vector<int32_t> lens(static_cast<size_t>(S), static_cast<int32_t>(ctx));
      std::vector<int32_t> qsl(static_cast<size_t>(S + 1));
      for (int64_t i = 0; i <= S; ++i) qsl[static_cast<size_t>(i)] = static_cast<int32_t>(i);
      const vt::Tensor seq_lens = vt::Tensor::FromHost(lens.data(), {S}, vt::DType::kI32);
      const vt::Tensor starts = vt::Tensor::FromHost(qsl.data(), {S + 1}, vt::DType::kI32);
      const vt::Tensor query = RandomBf16(S, h.Hq * h.D, rng);
      vt::Tensor out = vt::Tensor::Empty({S, h.Hq * h.D}, vt::DType::kBF16);
      const int64_t slots = S * blocks * copies * kBlock;
      const vt::Tensor k16 = Tiled(RandomBf16(4096, row, rng), slots), v16 = Tiled(RandomBf16(4096, row, rng), slots);
      const vt::Tensor k8 = Tiled(RandomFp8(4096, row, rng), slots), v8 = Tiled(RandomFp8(4096, row, rng), slots);
      const std::vector<int64_t> shape = {S * blocks * copies, kBlock, h.Hk, h.D};
      const vt::Tensor kc16 = k16.View(shape), vc16 = v16.View(shape);
      const vt::Tensor kc8 = k8.View(shape), vc8 = v8.View(shape);
      const float scale = 1.0f / std::sqrt(static_cast<float>(h.D));
      auto run = [&](const vt::Tensor& kc, const vt::Tensor& vc, float kv_scale, int rep) {
        vt::PagedAttention(q, out, query, kc, vc, tables[static_cast<size_t>(rep) % tables.size()], seq_lens, starts,
                           scale, kv_scale, kv_scale);
      };
      for (int rep = 0; rep < static_cast<int>(copies); ++rep) {
        run(kc16, vc16, 1.0f, rep);
        run(kc8, vc8, 0.01f, rep);
      }
      // Alternated: in place (what a decode step runs) and widened to f32 first.
      auto widened = [&](const vt::Tensor& kc, const vt::Tensor& vc, float kv_scale, int rep) {
        vt::cpu::attention::SetReadInPlace(false);
        run(kc, vc, kv_scale, rep);
        vt::cpu::attention::SetReadInPlace(true);
      };
      const std::vector<double> t = TimeMedians({[&](int rep) { run(kc16, vc16, 1.0f, rep); },
                                                 [&](int rep) { run(kc8, vc8, 0.01f, rep); },
                                                 [&](int rep) { widened(kc16, vc16, 1.0f, rep); },
                                                 [&](int rep) { widened(kc8, vc8, 0.01f, rep); }},
                                                reps, secs);
      const double b16 = static_cast<double>(S * 2 * ctx * row * 2), b8 = static_cast<double>(S * 2 * ctx * row);
      char what[32];
      std::snprintf(what, sizeof what, "%lld x %lld", static_cast<long long>(S), static_cast<long long>(ctx));
      std::printf("%-11s %9s | %9.1f %9.1f %5.0f%% | %9.1f %9.1f %5.0f%% | %6.2fx | %9.1f %9.1f\n", h.model, what,
                  t[0] * 1e6, b16 / t[0] / 1e9, 100.0 * b16 / t[0] / 1e9 / bw,
                  t[1] * 1e6, b8 / t[1] / 1e9, 100.0 * b8 / t[1] / 1e9 / bw, t[1] / t[0], t[2] * 1e6, t[3] * 1e6);
    }
  }
  std::printf("one layer's decode attention of one sequence or 16 (BF16 query, %lld-token blocks), the cache read in "
              "place as a decode step does; wid.: the same with each block widened to f32 first (as prefill "
              "chunks do), us. GB/s counts the cache's key and value bytes.\n",
              static_cast<long long>(kBlock));
}

// 6. Prefill attention: one layer's PagedAttention of a fresh prompt of n tokens (every row
// a query, causal), 16-token blocks in shuffled order, BF16 and FP8 caches; the tile kernel
// (what a prefill step runs) alternated with SetPrefillTiles(false), items of 32 rows through
// the one-query kernel. GFLOP/s counts 4·D multiply-add flops per (query head, key) pair a
// causal prompt has.
void PrefillAttention(const vt::Queue& q, bool quick, std::mt19937& rng) {
  constexpr int64_t kBlock = 16, Hq = 16, Hk = 8, D = 128;
  std::printf("\n%-11s %6s | %9s %9s %9s | %9s %9s %9s\n", "heads", "prompt", "bf16 ms", "GF/s", "32-row ms",
              "fp8 ms", "GF/s", "32-row ms");
  for (int64_t n : quick ? std::vector<int64_t>{1024} : std::vector<int64_t>{1024, 4096}) {
    const int64_t blocks = n / kBlock, row = Hk * D;
    std::vector<int32_t> ids(static_cast<size_t>(blocks));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::shuffle(ids.begin(), ids.end(), rng);
    const vt::Tensor table = vt::Tensor::FromHost(ids.data(), {1, blocks}, vt::DType::kI32);
    const int32_t len = static_cast<int32_t>(n), qsl[2] = {0, static_cast<int32_t>(n)};
    const vt::Tensor seq_lens = vt::Tensor::FromHost(&len, {1}, vt::DType::kI32);
    const vt::Tensor starts = vt::Tensor::FromHost(qsl, {2}, vt::DType::kI32);
    const vt::Tensor query = Tiled(RandomBf16(1024, Hq * D, rng), n);
    vt::Tensor out = vt::Tensor::Empty({n, Hq * D}, vt::DType::kBF16);
    const std::vector<int64_t> shape = {blocks, kBlock, Hk, D};
    const vt::Tensor kc16 = Tiled(RandomBf16(1024, row, rng), n).View(shape);
    const vt::Tensor vc16 = Tiled(RandomBf16(1024, row, rng), n).View(shape);
    const vt::Tensor kc8 = Tiled(RandomFp8(1024, row, rng), n).View(shape);
    const vt::Tensor vc8 = Tiled(RandomFp8(1024, row, rng), n).View(shape);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    auto run = [&](const vt::Tensor& kc, const vt::Tensor& vc, float kv_scale, bool tiles) {
      vt::cpu::attention::SetPrefillTiles(tiles);
      vt::PagedAttention(q, out, query, kc, vc, table, seq_lens, starts, scale, kv_scale, kv_scale);
      vt::cpu::attention::SetPrefillTiles(true);
    };
    const std::vector<double> t = TimeMedians({[&](int) { run(kc16, vc16, 1.0f, true); },
                                               [&](int) { run(kc16, vc16, 1.0f, false); },
                                               [&](int) { run(kc8, vc8, 0.01f, true); },
                                               [&](int) { run(kc8, vc8, 0.01f, false); }},
                                              3, 0.5);
    const double flop = 4.0 * static_cast<double>(D) * static_cast<double>(Hq) * static_cast<double>(n) *
                        static_cast<double>(n + 1) / 2.0;
    std::printf("%-11s %6lld | %9.1f %9.1f %9.1f | %9.1f %9.1f %9.1f\n", "Qwen3-0.6B", static_cast<long long>(n),
                t[0] * 1e3, flop / t[0] / 1e9, t[1] * 1e3, t[2] * 1e3, flop / t[2] / 1e9, t[3] * 1e3);
  }
  std::printf("one layer's prefill attention of one prompt (BF16 queries, 16 / 8 heads of 128); 32-row: items of 32 "
              "rows through the one-query kernel (SetPrefillTiles(false)).\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it is measured, also into a file or pipe
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--cpu-time") {
      g_cpu_time = true;
    } else if (arg == "--quick") {
      opt.quick = true;
    } else if (arg == "--only" && i + 1 < argc) {
      opt.only = argv[++i];
      if (opt.only != "projections" && opt.only != "block-fp8" && opt.only != "attention" &&
          opt.only != "prefill-attention") {
        std::fprintf(stderr, "unknown --only %s (projections, block-fp8, attention or prefill-attention)\n",
                     opt.only.c_str());
        return 2;
      }
    } else if (arg == "--threads" && i + 1 < argc) {
      opt.threads = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--isa" && i + 1 < argc) {
      const std::string name = argv[++i];
      bool known = false;
      std::string names;
      for (vt::CpuIsa isa : vt::CpuIsaLevels()) {
        names += vt::StrCat(names.empty() ? "" : ", ", vt::CpuIsaName(isa));
        if (name == vt::CpuIsaName(isa)) {
          opt.isa = isa;
          known = true;
        }
      }
      if (!known) {
        std::fprintf(stderr, "unknown --isa %s (this build: %s)\n", name.c_str(), names.c_str());
        return 2;
      }
    } else if (arg == "--fp8-decode" && i + 1 < argc) {
      const std::string name = argv[++i];
      if (name != "half" && name != "f32-bits") {
        std::fprintf(stderr, "unknown --fp8-decode %s (half or f32-bits)\n", name.c_str());
        return 2;
      }
      vt::cpu::matmul::SetFp8StreamDecode(name == "half" ? vt::cpu::matmul::Fp8StreamDecode::kHalf
                                                         : vt::cpu::matmul::Fp8StreamDecode::kF32Bits);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--threads N] [--cpu-time] [--isa LEVEL] "
                   "[--fp8-decode half|f32-bits] [--only projections|block-fp8|attention|prefill-attention]\n",
                   argv[0]);
      return 2;
    }
  }
  const vt::Queue q = vt::Queue::Cpu(opt.threads, opt.isa);
  std::printf("vt kernel benchmark: %d threads, CPU ISA %s%s\n", opt.threads, vt::CpuIsaName(q.cpu_isa()),
              opt.quick ? " (quick)" : "");

  // 1. Memory read bandwidth.
  const int64_t bw_bytes = (opt.quick ? 256LL : 1024LL) << 20;
  double bw = 0.0;
  {
    std::vector<uint64_t> buf(static_cast<size_t>(bw_bytes / 8), 1);
    std::string line;
    for (int threads : {1, opt.threads}) {
      const double plain = ReadBandwidth(buf, threads, 1, false, opt), pf = ReadBandwidth(buf, threads, 1, true, opt);
      const double four = ReadBandwidth(buf, threads, 4, true, opt);
      const double best = std::max({plain, pf, four});
      if (threads == opt.threads) bw = best;
      line += vt::StrCat(line.empty() ? "" : "; ", threads, threads == 1 ? " thread " : " threads ",
                         Fixed1(plain), " / ", Fixed1(pf), " / ", Fixed1(four));
    }
    std::printf("memory read bandwidth (%lld MiB buffer; GB/s of 1 stream plain / 1 stream with prefetch / 4 "
                "streams with prefetch per thread): %s; 'of bw' below is against the best, %.1f GB/s\n\n",
                static_cast<long long>(bw_bytes >> 20), line.c_str(), bw);
  }

  // 2. The multiply limit.
  const MultiplyRate mul = MeasureMultiplyRate(q, opt.threads, opt);
  // Weight elements per second the multiplies allow at M rows of a (0: not measured).
  auto mul_limit = [&](int64_t M) { return mul.per_second * mul.width / static_cast<double>(M); };
  if (mul.width > 0)
    std::printf("multiply limit: %.2f G %d-wide multiply-adds/s on %d threads, so at most %.1f / M G weight "
                "elements/s (fp8: GB/s; BF16: twice that in GB/s)\n\n",
                mul.per_second / 1e9, mul.width, opt.threads, mul_limit(1) / 1e9);
#if defined(__aarch64__)
  if (q.cpu_isa() == vt::CpuIsa::kNeonBf16 && mul.width > 0) {
    // The prefill GEMM multiplies with BFMMLA, the decode GEMV with BFDOT (the limit above).
    const double mmla = ChainRate(q, &BfmmlaChains, opt.threads, opt);
    std::printf("prefill multiply: %.2f G BFMMLA/s on %d threads = %.1f G BF16 products/s, %.2fx BFDOT's %.1f G\n\n",
                mmla / 1e9, opt.threads, mmla * 16 / 1e9, mmla * 16 / (mul.per_second * mul.width),
                mul.per_second * mul.width / 1e9);
  }
#endif

  // 3. Projections.
  std::vector<ShapeSpec> shapes = {
      {"Qwen3-0.6B", "q 1024->2048", 1024, 2048},     {"Qwen3-0.6B", "up 1024->3072", 1024, 3072},
      {"Qwen3-0.6B", "down 3072->1024", 3072, 1024},  {"Qwen3-8B", "o 4096->4096", 4096, 4096},
      {"Qwen3-8B", "up 4096->12288", 4096, 12288},    {"Qwen3-8B", "down 12288->4096", 12288, 4096},
      {"Qwen3-0.6B", "lm_head 1024->151936", 1024, 151936},
  };
  std::vector<int64_t> decode_ms = {1, 2, 4, 8, 16};
  std::vector<int64_t> prefill_ms = {128, 512};
  if (opt.quick) {
    shapes = {shapes[1], shapes[4], shapes[6]};
    decode_ms = {1, 16};
    prefill_ms = {128};
  }
  // Weight copies per shape: well past any last-level cache a VM core sees (the measured
  // rate of a 256 MiB rotation here still exceeded the read bandwidth).
  const int64_t rotation_bytes = (opt.quick ? 128LL : 768LL) << 20;
  const int decode_reps = opt.quick ? 5 : 20;
  const double decode_secs = opt.quick ? 0.02 : 0.3;
  const int prefill_reps = opt.quick ? 1 : 3;

  // fp8 weights twice: prepared (read-only and vt::PrepareWeight, as a model does with its
  // weights; the vdpbf16ps level then multiplies a copy laid out once for its outer-product
  // kernel) and writable (multiplied as stored: the direct streaming path).
  std::printf("%-11s %-17s %4s | %9s %9s %6s %8s | %9s %8s | %9s %9s %6s %8s | %9s %8s | %7s\n", "model",
              "projection", "M", "fp8 us", "fp8 GB/s", "of bw", "of limit", "rw GB/s", "of limit", "bf16 us",
              "bf16 GB/s", "of bw", "of limit", "rw GB/s", "of limit", "fp8/bf16");
  std::mt19937 rng(42);
  std::vector<std::string> prefill_lines;
  for (const ShapeSpec& s : shapes) {
    if (!opt.only.empty() && opt.only != "projections") break;
    const vt::Tensor w8_src = RandomFp8(s.N, s.K, rng);
    const Rotation w8 = MakeRotation(w8_src, rotation_bytes);
    Rotation w8ro = MakeRotation(w8_src, rotation_bytes);
    // Prepared now, as a model does at load: the pass over every copy below then reads
    // the copies once before timing, as it does the weights (on this VM the first read of
    // freshly written memory is slow; laid out in that pass, the M = 1 rows of the small
    // shapes measured 24-38 GB/s against 33-42 in a probe that lays out first).
    for (vt::Tensor& t : w8ro.copies) {
      t.SetReadOnly();
      t = vt::PrepareWeight(q, t, vt::WeightUse::kMatmulB);
    }
    const vt::Tensor w16_src = RandomBf16(s.N, s.K, rng);
    const Rotation w16 = MakeRotation(w16_src, rotation_bytes);
    Rotation w16ro = MakeRotation(w16_src, rotation_bytes);  // prepared, as the fp8 copies above
    for (vt::Tensor& t : w16ro.copies) {
      t.SetReadOnly();
      t = vt::PrepareWeight(q, t, vt::WeightUse::kMatmulB);
    }
    const float alpha = 0.0117f;
    for (int64_t M : decode_ms) {
      const vt::Tensor a8 = RandomFp8(M, s.K, rng), a16 = RandomBf16(M, s.K, rng);
      vt::Tensor out = vt::Tensor::Empty({M, s.N}, vt::DType::kBF16);
      // One pass over every copy first: on this project's VM the first read of freshly
      // written memory ran at a third of the speed of later reads (nested-paging warm-up),
      // and a model reads its weights every step.
      for (size_t i = 0; i < w8.copies.size(); ++i) vt::MatmulFp8(q, out, a8, w8.At(static_cast<int>(i)), alpha);
      for (size_t i = 0; i < w8ro.copies.size(); ++i) vt::MatmulFp8(q, out, a8, w8ro.At(static_cast<int>(i)), alpha);
      for (size_t i = 0; i < w16.copies.size(); ++i) vt::Matmul(q, out, a16, w16.At(static_cast<int>(i)));
      for (size_t i = 0; i < w16ro.copies.size(); ++i) vt::Matmul(q, out, a16, w16ro.At(static_cast<int>(i)));
      const std::vector<double> t = TimeMedians({[&](int rep) { vt::MatmulFp8(q, out, a8, w8ro.At(rep), alpha); },
                                                 [&](int rep) { vt::MatmulFp8(q, out, a8, w8.At(rep), alpha); },
                                                 [&](int rep) { vt::Matmul(q, out, a16, w16ro.At(rep)); },
                                                 [&](int rep) { vt::Matmul(q, out, a16, w16.At(rep)); }},
                                                decode_reps, decode_secs);
      const double t8 = t[0], t8rw = t[1], t16 = t[2];
      const double g8 = static_cast<double>(s.N * s.K) / t8 / 1e9, g8rw = static_cast<double>(s.N * s.K) / t8rw / 1e9;
      const double g16 = static_cast<double>(s.N * s.K * 2) / t16 / 1e9;
      const double g16rw = static_cast<double>(s.N * s.K * 2) / t[3] / 1e9;
      // The limit in GB/s: the bandwidth, or the multiplies (elements/s times bytes each).
      const double lim8 = mul.width > 0 ? std::min(bw, mul_limit(M) / 1e9) : bw;
      const double lim16 = mul.width > 0 ? std::min(bw, 2.0 * mul_limit(M) / 1e9) : bw;
      std::printf("%-11s %-17s %4lld | %9.1f %9.1f %5.0f%% %7.0f%% | %9.1f %7.0f%% | %9.1f %9.1f %5.0f%% %7.0f%% | "
                  "%9.1f %7.0f%% | %6.2fx\n",
                  s.model, s.proj, static_cast<long long>(M), t8 * 1e6, g8, 100.0 * g8 / bw, 100.0 * g8 / lim8, g8rw,
                  100.0 * g8rw / lim8, t16 * 1e6, g16, 100.0 * g16 / bw, 100.0 * g16 / lim16, g16rw,
                  100.0 * g16rw / lim16, t16 / t8);
    }
    for (int64_t M : prefill_ms) {
      const vt::Tensor a8 = RandomFp8(M, s.K, rng), a16 = RandomBf16(M, s.K, rng);
      vt::Tensor out = vt::Tensor::Empty({M, s.N}, vt::DType::kBF16);
      const std::vector<double> t = TimeMedians({[&](int rep) { vt::MatmulFp8(q, out, a8, w8ro.At(rep), alpha); },
                                                 [&](int rep) { vt::MatmulFp8(q, out, a8, w8.At(rep), alpha); },
                                                 [&](int rep) { vt::Matmul(q, out, a16, w16ro.At(rep)); },
                                                 [&](int rep) { vt::Matmul(q, out, a16, w16.At(rep)); }},
                                                prefill_reps, 0.0);
      const double flop = 2.0 * static_cast<double>(M * s.N * s.K);
      char line[256];
      std::snprintf(line, sizeof line, "%-11s %-17s %4lld | %9.2f %9.1f | %9.1f | %9.2f %9.1f | %9.1f\n", s.model,
                    s.proj, static_cast<long long>(M), t[0] * 1e3, flop / t[0] / 1e9, flop / t[1] / 1e9, t[2] * 1e3,
                    flop / t[2] / 1e9, flop / t[3] / 1e9);
      prefill_lines.push_back(line);
    }
  }
  std::printf("\n%-11s %-17s %4s | %9s %9s | %9s | %9s %9s | %9s\n", "model", "projection", "M", "fp8 ms", "fp8 GF/s",
              "rw GF/s", "bf16 ms", "bf16 GF/s", "rw GF/s");
  for (const auto& l : prefill_lines) std::fputs(l.c_str(), stdout);
  std::printf("\nfp8: MatmulFp8 (F8E4M3 x F8E4M3 -> BF16) on prepared weights, as a model runs it; rw: the same on "
              "writable weights (no re-laid-out copy); bf16: Matmul (BF16 x BF16 -> BF16) likewise on prepared "
              "weights, then (rw) on writable ones. GB/s counts weight bytes; 'of bw' is the fraction of the "
              "%d-thread read bandwidth above, 'of limit' of the lower of it and the multiply limit.\n",
              opt.threads);

  if (opt.only.empty() || opt.only == "block-fp8")
    BlockFp8(q, opt.quick ? shapes : std::vector<ShapeSpec>(shapes.begin(), shapes.begin() + 3), bw,
             rotation_bytes, decode_reps, decode_secs, prefill_reps, rng);
  if (opt.only.empty() || opt.only == "attention") DecodeAttention(q, opt.quick, bw, rotation_bytes, decode_reps, decode_secs, rng);
  if (opt.only.empty() || opt.only == "prefill-attention") PrefillAttention(q, opt.quick, rng);
  return 0;
}
