// The experts of calls with many tokens, FP8 (MoeExpertsFp8, MoeExpertsFp8PerToken) and BF16
// (MoeExperts): tensor-core tiles over the (token, slot) pairs sorted by expert, so that each
// expert's rows are read once per tile of up to 64 pairs instead of once per pair (moe.cu's
// per-pair kernels). Four launches (per-token FP8: five), no host synchronization (the expert
// ids stay on the device, the grids are sized for the worst case and idle CTAs return), so a
// step stays capturable:
//  1. sort (one CTA): counts the pairs of each expert, lays the experts' pairs out in
//     tiles of 64 rows (an expert's last tile padded with rows of pair -1), and writes each
//     tile's expert. A pair's row inside its expert comes from an atomic counter, so it can
//     change from run to run; nothing below depends on it: every output element is a sum
//     over one row of the tile only.
//  2. gate/up: CTA (tile, 64 columns i of I): the 64 gathered rows of x times the expert's
//     gate rows i and up rows I + i (mma.sync: m16n8k32 e4m3 or m16n8k16 BF16, f32 out), FP8
//     partial sums added into f32 registers every 128 of K (the tensor cores' FP8
//     accumulator keeps fewer bits than f32 over long sums). Epilogue as moe.cu's per-pair
//     kernel: g and u scaled (static FP8: the expert's alpha; per-token FP8: the token's and
//     the expert's scales) and rounded to the output dtype, SiLU(g)·u rounded; static FP8
//     quantizes it with the down input scale, per-token FP8 keeps it in f32 for
//     QuantFp8PerTokenGroup over each row (a scale per pair, as the per-pair path), BF16 keeps
//     it in BF16; stored in tile order ([rows, I]).
//  3. down: CTA (tile, 128 outputs h): the tile's activations times the expert's down rows,
//     the sums (FP8: promoted every 128 of K, then scaled) into y[pair, h] (f32).
//  4. combine: out[t, h] = Σ_j weights[t, j]·y[t·k + j, h] in slot order, rounded to out's
//     dtype: the per-pair kernel's accumulation, term by term.
// The sums run in another order than the CPU's; the op table's tolerance for the expert ops
// covers that, as for the per-pair kernels. An expert id outside [0, E) is recorded as an
// index error by the sort and its pair contributes nothing.
#include "vt/cuda/moe_tiled.h"

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/cuda/mma_sm80.cuh"
#include "vt/ops/quant.h"

namespace vt::cuda {

namespace {

std::atomic<int64_t> g_tiled_launches{0};

// What a call's tiles compute: MoeExpertsFp8 (e4m3fn x and weights, static scales),
// MoeExpertsFp8PerToken (e4m3fn x with a scale per token, weights with a scale per expert,
// the activations quantized per pair between the two products) or MoeExperts on BF16.
enum class TileKind { kFp8Static, kFp8PerToken, kBf16 };

constexpr bool IsFp8(TileKind kind) { return kind != TileKind::kBf16; }

constexpr int kRows = 64;             // pairs per tile
constexpr int kSortThreads = 1024;
constexpr int kMaxExperts = 1024;
constexpr int kBk = 64;               // K bytes per pipeline stage
constexpr int kStages = 3;
constexpr int kPitch = kBk + 16;      // a row of a stage in shared memory: ldmatrix without bank conflicts
constexpr int kBRows = 128;           // weight rows per CTA (gate/up: 64 gate + 64 up)
constexpr int kThreads = 128;         // 4 warps: 2 (32 rows each) x 2 (64 weight rows each)
constexpr int kPromoteStages = 2;     // f32 promotion every 128 of K

// ---- 1. sort ---------------------------------------------------------------------------

// sorted_pair[r]: the pair of tile row r (-1: padding); tile_expert[tile]; *num_tiles.
__global__ void __launch_bounds__(kSortThreads)
    MoeTileSortKernel(int32_t* sorted_pair, int32_t* tile_expert, int32_t* num_tiles, const int32_t* ids, int64_t P,
                      int E, IndexErrorRecord* err) {
  PdlWait();
  __shared__ int count[kMaxExperts], start[kMaxExperts], fill[kMaxExperts];
  __shared__ int total_rows;
  const int tid = static_cast<int>(threadIdx.x);
  for (int e = tid; e < E; e += kSortThreads) {
    count[e] = 0;
    fill[e] = 0;
  }
  __syncthreads();
  for (int64_t p = tid; p < P; p += kSortThreads) {
    const int e = ids[p];
    if (e >= 0 && e < E)
      atomicAdd(&count[e], 1);
    else
      RecordIndexError(err, IndexError::kMoeExpertId, p, e, E);
  }
  __syncthreads();
  if (tid < 32) {  // warp 0: lane l lays out experts [l·per, (l + 1)·per)
    const int per = (E + 31) / 32;
    const int e0 = min(E, tid * per), e1 = min(E, e0 + per);
    int tiles = 0;
    for (int e = e0; e < e1; ++e) tiles += (count[e] + kRows - 1) / kRows;
    int incl = tiles;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int o = __shfl_up_sync(0xFFFFFFFFu, incl, off);
      if (tid >= off) incl += o;
    }
    int run = incl - tiles;
    for (int e = e0; e < e1; ++e) {
      start[e] = run * kRows;
      const int n = (count[e] + kRows - 1) / kRows;
      for (int j = 0; j < n; ++j) tile_expert[run + j] = e;
      run += n;
    }
    if (tid == 31) {
      *num_tiles = incl;
      total_rows = incl * kRows;
    }
  }
  __syncthreads();
  for (int r = tid; r < total_rows; r += kSortThreads) sorted_pair[r] = -1;
  __syncthreads();  // the padding's -1 before the pairs (global writes of one CTA, ordered by the barrier)
  for (int64_t p = tid; p < P; p += kSortThreads) {
    const int e = ids[p];
    if (e >= 0 && e < E) sorted_pair[start[e] + atomicAdd(&fill[e], 1)] = static_cast<int32_t>(p);
  }
}

// ---- the tile product --------------------------------------------------------------------

// c += a b on e4m3fn: a the 16x32 row-major A fragment, (b0, b1) the 32x8 column-major B
// fragment (sm_89+).
__device__ __forceinline__ void MmaFp8(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef VT_CUDA_FP8
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)c, (void)a, (void)b0, (void)b1;
  __trap();  // MoeTiledFits refuses FP8 without VT_CUDA_FP8
#endif
}

struct TileSmem {
  uint8_t a[kStages][kRows * kPitch];
  uint8_t b[kStages][kBRows * kPitch];
};

// The rows a thread copies: A rows tid / 4 + 32 j (j < 2), weight rows tid / 4 + 32 j
// (j < 4), each its 16-byte chunk tid % 4 of a stage. a_ok false: 16 zero bytes.
struct TileSources {
  const uint8_t* a[2];
  bool a_ok[2];
  const uint8_t* b[4];
};

__device__ __forceinline__ void LoadStage(TileSmem& s, int slot, const TileSources& src, int64_t k0, int tid) {
  const int c = tid % 4, r = tid / 4;
#pragma unroll
  for (int j = 0; j < 2; ++j)
    CpAsync16(&s.a[slot][(r + 32 * j) * kPitch + c * 16], src.a[j] + k0 + c * 16, src.a_ok[j]);
#pragma unroll
  for (int j = 0; j < 4; ++j) CpAsync16(&s.b[slot][(r + 32 * j) * kPitch + c * 16], src.b[j] + k0 + c * 16, true);
}

// The first weight row of the warp's n-tile nt (8 rows each, pairs of tiles contiguous).
// kGateUp: n-tiles 0-3 are gate rows wn·32 + 8 nt, 4-7 the up rows 64 rows further; else
// wn·64 + 8 nt.
template <bool kGateUp>
__device__ __forceinline__ int WeightRow(int wn, int nt) {
  if constexpr (kGateUp) return nt < 4 ? wn * 32 + nt * 8 : 64 + wn * 32 + (nt - 4) * 8;
  return wn * 64 + nt * 8;
}

// acc[mt][nt][c]: the warp's 32 x 64 share of the tile's products over K bytes (a multiple
// of kBk): rows wm·32 + 16 mt + (lane / 4) (+8 for c >= 2), weight row WeightRow(wn, nt) +
// 2 (lane % 4) + (c % 2). Each 32-byte step of K is one m16n8k32 e4m3 product (kFp8) or one
// m16n8k16 BF16 product: the fragments' bytes are laid out alike, so the ldmatrix loads are
// the same. BF16 products accumulate in f32 and need no promotion.
template <bool kGateUp, bool kFp8>
__device__ __forceinline__ void TileProduct(float (&acc)[2][8][4], TileSmem& s, const TileSources& src, int64_t K,
                                            int tid) {
  const int lane = tid % 32, warp = tid / 32, wm = warp % 2, wn = warp / 2;
  float part[2][8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][nt][c] = part[mt][nt][c] = 0.0f;
  const int nk = static_cast<int>(K / kBk);
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < nk) LoadStage(s, st, src, int64_t{st} * kBk, tid);
    CpAsyncCommit();
  }
  // ldmatrix rows of this lane: matrix m = lane / 8, its row lane % 8.
  const int lm = lane / 8, lr = lane % 8;
  for (int kt = 0; kt < nk; ++kt) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < nk) LoadStage(s, next % kStages, src, int64_t{next} * kBk, tid);
    CpAsyncCommit();
    const uint8_t* sa = s.a[kt % kStages];
    const uint8_t* sb = s.b[kt % kStages];
#pragma unroll
    for (int ks = 0; ks < kBk / 32; ++ks) {
      uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)  // matrices: rows 0-7 / 8-15 of bytes 0-15, then of bytes 16-31
        LdMatrixX4(a[mt], sa + (wm * 32 + mt * 16 + (lm % 2) * 8 + lr) * kPitch + ks * 32 + (lm / 2) * 16);
#pragma unroll
      for (int q = 0; q < 4; ++q) {  // n-tiles 2q and 2q + 1: bytes 0-15 / 16-31 of each
        uint32_t b[4];
        LdMatrixX4(b, sb + (WeightRow<kGateUp>(wn, 2 * q) + (lm / 2) * 8 + lr) * kPitch + ks * 32 + (lm % 2) * 16);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          if constexpr (kFp8) {
            MmaFp8(part[mt][2 * q], a[mt], b[0], b[1]);
            MmaFp8(part[mt][2 * q + 1], a[mt], b[2], b[3]);
          } else {
            Mma(acc[mt][2 * q], a[mt], b[0], b[1]);
            Mma(acc[mt][2 * q + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }
    if (kFp8 && ((kt + 1) % kPromoteStages == 0 || kt + 1 == nk)) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            acc[mt][nt][c] = acc[mt][nt][c] + part[mt][nt][c];
            part[mt][nt][c] = 0.0f;
          }
    }
  }
  CpAsyncWait<0>();
}

// ---- 2. gate/up ----------------------------------------------------------------------------

// The activations of the rows r of tile blockIdx.x and i in [64 blockIdx.y, +64), g and u the
// gate/up sums of row r rounded to OTag after their scales, zero for padding rows:
//  kFp8Static: a_out[r, i] = the e4m3fn code of round(SiLU(g)·u)·inv_down (scales: alpha13[e]);
//  kFp8PerToken: ((float*)a_out)[r, i] = round(SiLU(g)·u) (scales: x_scales[token] and
//    alpha13[e], the expert's weight scale), quantized per row afterwards;
//  kBf16: ((bf16*)a_out)[r, i] = round(SiLU(g)·u) (no scales; OTag is BF16).
template <typename OTag, TileKind kKind>
__global__ void __launch_bounds__(kThreads)
    MoeTileGateUpKernel(uint8_t* a_out, const uint8_t* x, const float* x_scales, const int32_t* sorted_pair,
                        const int32_t* tile_expert, const int32_t* num_tiles, const uint8_t* w13,
                        const float* alpha13, float inv_down, int k, int H, int I) {
  PdlWait();
  const int tile = static_cast<int>(blockIdx.x);
  if (tile >= *num_tiles) return;  // uniform across the CTA
  __shared__ __align__(16) TileSmem s;
  constexpr bool kFp8 = IsFp8(kKind);
  constexpr int kElem = kFp8 ? 1 : 2;
  const int tid = static_cast<int>(threadIdx.x);
  const int e = tile_expert[tile], i0 = static_cast<int>(blockIdx.y) * 64;
  const int64_t row0 = int64_t{tile} * kRows;
  TileSources src;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int p = sorted_pair[row0 + tid / 4 + 32 * j];
    src.a_ok[j] = p >= 0;
    src.a[j] = x + (p >= 0 ? int64_t{p / k} * H * kElem : 0);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int n = tid / 4 + 32 * j;
    const int w_row = n < 64 ? i0 + n : I + i0 + (n - 64);
    src.b[j] = w13 + (int64_t{e} * 2 * I + w_row) * H * kElem;
  }
  float acc[2][8][4];
  TileProduct<true, kFp8>(acc, s, src, int64_t{H} * kElem, tid);
  const int lane = tid % 32, warp = tid / 32, wm = warp % 2, wn = warp / 2;
  const float al = kFp8 ? alpha13[e] : 1.0f;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t r = row0 + wm * 32 + mt * 16 + lane / 4 + 8 * half;
      const int p = sorted_pair[r];
      const bool ok = p >= 0;
      const float sx = kKind == TileKind::kFp8PerToken && ok ? x_scales[p / k] : 1.0f;
      // The per-pair kernel's scaling: al·sum (static), sum·sx·ws (per token), sum (BF16).
      auto scaled = [&](float sum) {
        if constexpr (kKind == TileKind::kFp8Static) return RoundTo<OTag>(al * sum);
        if constexpr (kKind == TileKind::kFp8PerToken) return RoundTo<OTag>(sum * sx * al);
        return RoundTo<OTag>(sum);
      };
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        float v[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float g = scaled(acc[mt][nt][2 * half + c]), u = scaled(acc[mt][nt + 4][2 * half + c]);
          v[c] = ok ? RoundTo<OTag>(numerics::Silu(g) * u) : 0.0f;
        }
        const int64_t at = r * I + i0 + wn * 32 + nt * 8 + 2 * (lane % 4);
        if constexpr (kKind == TileKind::kFp8Static) {
          const uint16_t c0 = ok ? QuantizeFp8KeepNan(v[0], inv_down) : 0;
          const uint16_t c1 = ok ? QuantizeFp8KeepNan(v[1], inv_down) : 0;
          *reinterpret_cast<uint16_t*>(a_out + at) = static_cast<uint16_t>(c0 | (c1 << 8));
        } else if constexpr (kKind == TileKind::kFp8PerToken) {
          *reinterpret_cast<float2*>(a_out + 4 * at) = make_float2(v[0], v[1]);
        } else {
          *reinterpret_cast<uint32_t*>(a_out + 2 * at) = PackBf16(v[0], v[1]);
        }
      }
    }
}

// ---- 3. down -------------------------------------------------------------------------------

// y[p, h] for the pairs p of tile blockIdx.x and h in [128 blockIdx.y, +128): the sum over i
// of a[r, i]·w2[e·H + h, i] (a: e4m3fn codes or BF16), times alpha2[e] (kFp8Static), or
// times a_scales[r] and then alpha2[e], the expert's weight scale (kFp8PerToken).
template <TileKind kKind>
__global__ void __launch_bounds__(kThreads)
    MoeTileDownKernel(float* y, const uint8_t* a, const float* a_scales, const int32_t* sorted_pair,
                      const int32_t* tile_expert, const int32_t* num_tiles, const uint8_t* w2, const float* alpha2,
                      int H, int I) {
  PdlWait();
  const int tile = static_cast<int>(blockIdx.x);
  if (tile >= *num_tiles) return;  // uniform across the CTA
  __shared__ __align__(16) TileSmem s;
  constexpr bool kFp8 = IsFp8(kKind);
  constexpr int kElem = kFp8 ? 1 : 2;
  const int tid = static_cast<int>(threadIdx.x);
  const int e = tile_expert[tile], h0 = static_cast<int>(blockIdx.y) * kBRows;
  const int64_t row0 = int64_t{tile} * kRows;
  TileSources src;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    src.a_ok[j] = true;  // padding rows hold zeros
    src.a[j] = a + (row0 + tid / 4 + 32 * j) * I * kElem;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) src.b[j] = w2 + (int64_t{e} * H + h0 + tid / 4 + 32 * j) * I * kElem;
  float acc[2][8][4];
  TileProduct<false, kFp8>(acc, s, src, int64_t{I} * kElem, tid);
  const int lane = tid % 32, warp = tid / 32, wm = warp % 2, wn = warp / 2;
  const float al = kFp8 ? alpha2[e] : 1.0f;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t r = row0 + wm * 32 + mt * 16 + lane / 4 + 8 * half;
      const int p = sorted_pair[r];
      if (p < 0) continue;
      const float sa = kKind == TileKind::kFp8PerToken ? a_scales[r] : 1.0f;
      auto scaled = [&](float sum) {
        if constexpr (kKind == TileKind::kFp8Static) return al * sum;
        if constexpr (kKind == TileKind::kFp8PerToken) return sum * sa * al;
        return sum;
      };
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int h = h0 + wn * 64 + nt * 8 + 2 * (lane % 4);
        *reinterpret_cast<float2*>(y + int64_t{p} * H + h) =
            make_float2(scaled(acc[mt][nt][2 * half]), scaled(acc[mt][nt][2 * half + 1]));
      }
    }
}

// ---- 4. combine ------------------------------------------------------------------------------

// out[t, h .. h + 3] for thread (t, h / 4): Σ_j weights[p]·y[p, h] over the slots in order,
// p = t·k + j, skipping pairs whose expert id is outside [0, E).
template <typename OTag>
__global__ void MoeTileCombineKernel(typename OTag::T* out, const float* y, const int32_t* ids, const float* weights,
                                     int64_t T, int k, int H, int E) {
  PdlWait();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t quads = H / 4;
  if (idx >= T * quads) return;
  const int64_t t = idx / quads, h = (idx % quads) * 4;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int j = 0; j < k; ++j) {
    const int64_t p = t * k + j;
    const int e = ids[p];
    if (e < 0 || e >= E) continue;
    const float w = weights[p];
    const float4 v = *reinterpret_cast<const float4*>(y + p * H + h);
    const float wy[4] = {w * v.x, w * v.y, w * v.z, w * v.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[c] = acc[c] + wy[c];
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) out[t * H + h + c] = OTag::Store(acc[c]);
}

// One call's four launches (kFp8PerToken: five, QuantFp8PerTokenGroup over the activation
// rows between the products, as the per-pair path quantizes its rows).
template <typename OTag, TileKind kKind>
void LaunchTiles(const Queue& q, CudaQueue& cq, const Tensor& out, const Tensor& x, const float* x_scales,
                 const Tensor& ids, const Tensor& weights, const Tensor& w13, const float* alpha13, const Tensor& w2,
                 float inv_down, const float* alpha2) {
  const int64_t T = x.dim(0), H = x.dim(1), k = ids.dim(1), I = w2.dim(1), E = w13.dim(0) / (2 * I);
  const int64_t P = T * k;
  // Σ_e ceil(count_e / 64) <= P / 64 + (experts with a pair)
  const int64_t max_tiles = (P + kRows - 1) / kRows + std::min(E, P);
  const int64_t max_rows = max_tiles * kRows;
  VT_CHECK(P <= 0x7FFFFFFF && max_rows <= 0x7FFFFFFF && I / 64 <= 65535 && H / kBRows <= 65535,
           "MoeExperts on cuda: ", P, " (token, slot) pairs with H=", H, ", I=", I, " exceed the tiled kernels' grid");
  const Tensor meta = Tensor::Empty({max_rows + max_tiles + 1}, DType::kI32, out.device());
  int32_t* sorted_pair = meta.data_as<int32_t>();
  int32_t* tile_expert = sorted_pair + max_rows;
  int32_t* num_tiles = tile_expert + max_tiles;
  constexpr DType kActDType = kKind == TileKind::kFp8Static     ? DType::kF8E4M3
                              : kKind == TileKind::kFp8PerToken ? DType::kF32
                                                                : DType::kBF16;
  const Tensor act = Tensor::Empty({max_rows, I}, kActDType, out.device());
  const Tensor y = Tensor::Empty({P, H}, DType::kF32, out.device());
  LaunchOverlapped(cq, "MoeTileSortKernel", MoeTileSortKernel, 1, kSortThreads, 0, sorted_pair, tile_expert,
                   num_tiles, ids.data_as<int32_t>(), P, static_cast<int>(E), cq.index_errors);
  const int32_t *sorted = sorted_pair, *experts = tile_expert, *tiles = num_tiles;
  const dim3 grid13(static_cast<unsigned>(max_tiles), static_cast<unsigned>(I / 64));
  LaunchOverlapped(cq, "MoeTileGateUpKernel", MoeTileGateUpKernel<OTag, kKind>, grid13, kThreads, 0,
                   static_cast<uint8_t*>(act.data()), static_cast<const uint8_t*>(x.data()), x_scales, sorted, experts,
                   tiles, static_cast<const uint8_t*>(w13.data()), alpha13, inv_down, static_cast<int>(k),
                   static_cast<int>(H), static_cast<int>(I));
  // The down product's input: act, or (kFp8PerToken) its rows' e4m3fn codes and scales.
  Tensor a8, a_scales;
  if constexpr (kKind == TileKind::kFp8PerToken) {
    a8 = Tensor::Empty({max_rows, I}, DType::kF8E4M3, out.device());
    a_scales = Tensor::Empty({max_rows, 1}, DType::kF32, out.device());
    QuantFp8PerTokenGroup(q, a8, a_scales, act, I, 0.0f, kFp8PerTokenScaleFloor);
  }
  const Tensor& down_in = kKind == TileKind::kFp8PerToken ? a8 : act;
  const float* down_scales = kKind == TileKind::kFp8PerToken ? a_scales.data_as<float>() : nullptr;
  const dim3 grid2(static_cast<unsigned>(max_tiles), static_cast<unsigned>(H / kBRows));
  LaunchOverlapped(cq, "MoeTileDownKernel", MoeTileDownKernel<kKind>, grid2, kThreads, 0, y.data_as<float>(),
                   static_cast<const uint8_t*>(down_in.data()), down_scales, sorted, experts, tiles,
                   static_cast<const uint8_t*>(w2.data()), alpha2, static_cast<int>(H), static_cast<int>(I));
  const int64_t threads = 256, quads = T * (H / 4);
  LaunchOverlapped(cq, "MoeTileCombineKernel", MoeTileCombineKernel<OTag>,
                   static_cast<unsigned>((quads + threads - 1) / threads), static_cast<unsigned>(threads), 0,
                   out.data_as<typename OTag::T>(), static_cast<const float*>(y.data_as<float>()),
                   ids.data_as<int32_t>(), weights.data_as<float>(), T, static_cast<int>(k), static_cast<int>(H),
                   static_cast<int>(E));
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool MoeTiledFits(const CudaQueue& cq, const Tensor& out, const Tensor& x, const Tensor& w13, const Tensor& w2) {
  static const bool on = SwitchOn("VT_CUDA_MOE_TILED");
  const int64_t H = x.dim(1), I = w2.dim(1), E = w13.dim(0) / (2 * I);
  const bool shapes = H % kBRows == 0 && I % 64 == 0 && E <= kMaxExperts && Aligned16(x.data()) &&
                      Aligned16(w13.data()) && Aligned16(w2.data());
  const int cc = cq.cc_major * 10 + cq.cc_minor;
  bool types = false;
#ifdef VT_CUDA_FP8
  types = x.dtype() == DType::kF8E4M3 && w13.dtype() == DType::kF8E4M3 && w2.dtype() == DType::kF8E4M3 && cc >= 89 &&
          (out.dtype() == DType::kF32 || out.dtype() == DType::kBF16);
#endif
  types = types || (x.dtype() == DType::kBF16 && w13.dtype() == DType::kBF16 && w2.dtype() == DType::kBF16 &&
                    out.dtype() == DType::kBF16 && cc >= 80);
  return on && shapes && types;
}

void LaunchMoeTiled(const Queue& q, const Tensor& out, const Tensor& x, const float* x_scales, const Tensor& ids,
                    const Tensor& weights, const Tensor& w13, const float* alpha13, const Tensor& w2, float inv_down,
                    const float* alpha2) {
  CudaQueue& cq = Cuda(q);
  const bool f32 = out.dtype() == DType::kF32;
  if (x.dtype() == DType::kBF16)
    LaunchTiles<Bf16, TileKind::kBf16>(q, cq, out, x, nullptr, ids, weights, w13, nullptr, w2, 0.0f, nullptr);
  else if (x_scales != nullptr && f32)
    LaunchTiles<F32, TileKind::kFp8PerToken>(q, cq, out, x, x_scales, ids, weights, w13, alpha13, w2, 0.0f, alpha2);
  else if (x_scales != nullptr)
    LaunchTiles<Bf16, TileKind::kFp8PerToken>(q, cq, out, x, x_scales, ids, weights, w13, alpha13, w2, 0.0f, alpha2);
  else if (f32)
    LaunchTiles<F32, TileKind::kFp8Static>(q, cq, out, x, nullptr, ids, weights, w13, alpha13, w2, inv_down, alpha2);
  else
    LaunchTiles<Bf16, TileKind::kFp8Static>(q, cq, out, x, nullptr, ids, weights, w13, alpha13, w2, inv_down, alpha2);
  g_tiled_launches.fetch_add(1, std::memory_order_relaxed);
}

int64_t MoeTiledLaunches() { return g_tiled_launches.load(std::memory_order_relaxed); }

}  // namespace vt::cuda
