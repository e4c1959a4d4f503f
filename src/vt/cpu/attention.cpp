// CPU KvCacheWrite (each token's key and value rows copied into its cache slot) and
// PagedAttention: causal attention of each sequence's new tokens over its paged KV cache,
// with an f32 online softmax.
//
// Prefill work is split into items (sequence, KV head, group of query heads, range of query
// rows, PrefillItemRows of them); an item converts each cache block of its KV head to f32
// once and uses it for every query head of the group and every row of the range, so GQA
// reads the cache once per KV head and a prompt's blocks are widened once per item rather
// than once per few rows. Where the queue's ISA has a vector kernel set (attention_kernels.h)
// the item's queries go through its tile kernel, queries in vector lanes; else the portable
// loops below. Items are claimed one at a time by the pool's threads, the costliest first
// (a causal prompt's last rows see the most keys).
// Decode sequences (one query row) with a vector kernel set go in pieces of their context
// instead (sequence, range of blocks, every head): the kernel reads each block's key and
// value rows where they are, in the cache's dtype, so the block's bytes are read together;
// a long context is cut into several pieces, so that one sequence fills the pool, and
// their softmax states are combined after. An F8E4M3 cache is read through the kernel
// set's vector decode, or where there is none through a 256-entry table per call, entry b
// = KvCacheDequantizeFp8(b, scale): every widening path reads the same f32 keys and values
// (the in-place decode kernel folds the scales into the queries and the softmax weights,
// the same math rounded in another order). KvCacheWrite into an F8E4M3 cache quantizes with
// the kernel set's vector quantizer where there is one (the definition's bytes).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "vt/cpu/attention_kernels.h"
#include "vt/cpu/backend.h"
#include "vt/cpu/elem.h"
#include "vt/ops/attention.h"

namespace vt::cpu::attention {

const KernelSet* ForIsa(CpuIsa isa, int64_t D) {
  const KernelSet* ks = nullptr;
#if defined(VT_CPU_X86)
  if (isa >= CpuIsa::kAvx512)
    ks = Avx512Kernels();
  else if (isa >= CpuIsa::kAvx2)
    ks = Avx2Kernels();
#elif defined(VT_CPU_ARM)
  if (isa >= CpuIsa::kNeon) ks = NeonKernels();
#else
  (void)isa;
#endif
  return ks != nullptr && D % ks->lanes == 0 ? ks : nullptr;
}

bool DotBf16Fits(const KernelSet* ks, CpuIsa isa, DType query, DType cache, int64_t D) {
#if defined(VT_CPU_X86)
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi");
#else
  constexpr bool vbmi = false;
#endif
  return ks != nullptr && ks->attend_rows_bf16 != nullptr && vbmi && isa >= CpuIsa::kAvx512Bf16 &&
         isa <= CpuIsa::kAmx && query == DType::kBF16 &&
         (cache == DType::kBF16 || cache == DType::kF8E4M3) && D % 64 == 0 && D <= 256;
}

namespace {
std::atomic<int64_t> g_blocks_in_place{0}, g_pieces_combined{0}, g_tile_blocks{0};
std::atomic<bool> g_read_in_place{true}, g_prefill_tiles{true};
thread_local LastAttention t_last;
// Query rows per prefill item with SetPrefillTiles(false) (one-query kernel).
constexpr int64_t kOneQueryRows = 32;
// Query vectors (rows × query heads) per prefill item, about.
constexpr int64_t kItemQueries = 128;
}  // namespace

int64_t PrefillItemRows(int64_t heads) { return std::max<int64_t>(1, kItemQueries / std::max<int64_t>(1, heads)); }
int64_t TileBlocksWidened() { return g_tile_blocks.load(std::memory_order_relaxed); }
int64_t BlocksReadInPlace() { return g_blocks_in_place.load(std::memory_order_relaxed); }
int64_t PiecesCombined() { return g_pieces_combined.load(std::memory_order_relaxed); }
LastAttention LastAttentionOnThisThread() { return t_last; }
void SetReadInPlace(bool on) { g_read_in_place.store(on, std::memory_order_relaxed); }
void SetPrefillTiles(bool on) { g_prefill_tiles.store(on, std::memory_order_relaxed); }

}  // namespace vt::cpu::attention

namespace vt::cpu {

namespace {

constexpr int64_t kMinPieceBlocks = 8;  // cache blocks per decode piece, at least

struct WorkItem {
  int64_t seq, kv_head, head0, head1, row0, row1;
};

// Converts n contiguous elements of `dtype` at src to f32.
void ToF32(float* dst, const void* src, DType dtype, int64_t n) {
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::kBF16: {
      const auto* p = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(p[i]);
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = LoadFloat(src, dtype, i);
  }
}

// Dot product with 8 independent partial sums (vectorisable without reassociation flags).
inline float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

struct Geometry {
  int64_t Hq, Hk, D, group, block_size, num_blocks, max_blocks;
  DType dtype;        // query and out
  DType cache_dtype;  // the caches: dtype, or F8E4M3 read through the tables below
  const float* k_table = nullptr;  // [256]: KvCacheDequantizeFp8(b, k_scale) (F8E4M3 caches)
  const float* v_table = nullptr;
  float k_scale = 1.0f, v_scale = 1.0f;
  bool dot_bf16 = false;  // decode rows through attend_rows_bf16 (attention::DotBf16Fits)
};

// n cache elements at src as f32 (by the kernel set's vector widening, else an F8E4M3
// cache through `table`: the same floats).
inline void CacheToF32(float* dst, const void* src, const Geometry& g, const attention::KernelSet* ks,
                       const float* table, float scale, int64_t n) {
  if (ks != nullptr) {
    ks->cache_to_f32(dst, src, g.cache_dtype, n, scale);
    return;
  }
  if (g.cache_dtype == DType::kF8E4M3) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = table[p[i]];
    return;
  }
  ToF32(dst, src, g.cache_dtype, n);
}

// KV head kv_head's key and value rows j < count of cache block `block`, as f32 rows D apart.
void WidenBlock(const attention::KernelSet* ks, const Geometry& g, const Tensor& key_cache, const Tensor& value_cache,
                int64_t block, int64_t kv_head, int64_t count, float* kf, float* vf) {
  const size_t csize = DTypeSize(g.cache_dtype);
  const size_t base = static_cast<size_t>((block * g.block_size * g.Hk + kv_head) * g.D);
  const int64_t token_stride = g.Hk * g.D;  // between consecutive slots of a block
  for (int64_t j = 0; j < count; ++j) {
    const size_t at = (base + j * token_stride) * csize;
    CacheToF32(kf + j * g.D, static_cast<const char*>(key_cache.data()) + at, g, ks, g.k_table, g.k_scale, g.D);
    CacheToF32(vf + j * g.D, static_cast<const char*>(value_cache.data()) + at, g, ks, g.v_table, g.v_scale, g.D);
  }
}

// This KV head's rows of a block are Hk·D elements apart, too far apart for the hardware
// prefetchers: the next block's rows are prefetched while this one is converted and used.
void PrefetchBlock(const Geometry& g, const Tensor& key_cache, const Tensor& value_cache, int64_t block,
                   int64_t kv_head, int64_t count) {
  const size_t csize = DTypeSize(g.cache_dtype);
  const size_t base = static_cast<size_t>((block * g.block_size * g.Hk + kv_head) * g.D);
  const size_t row_bytes = static_cast<size_t>(g.D) * csize;
  for (int64_t j = 0; j < count; ++j) {
    const size_t at = (base + j * g.Hk * g.D) * csize;
    const char* k = static_cast<const char*>(key_cache.data()) + at;
    const char* v = static_cast<const char*>(value_cache.data()) + at;
    for (size_t o = 0; o < row_bytes; o += 64) {
      __builtin_prefetch(k + o);
      __builtin_prefetch(v + o);
    }
  }
}

// A prefill item (or, with SetReadInPlace(false), a decode row) by the portable loops, or
// by the kernel set's one-query kernel attend_block. Returns the attend_block calls, or
// without a kernel set the blocks the portable loops visited.
int64_t RunItem(const attention::KernelSet* ks, const WorkItem& w, const Geometry& g, const Tensor& out,
             const Tensor& query, const Tensor& key_cache, const Tensor& value_cache, const int32_t* block_row,
             int64_t ctx, int64_t q_start, int64_t n_new, float scale) {
  const int64_t D = g.D, heads = w.head1 - w.head0, rows = w.row1 - w.row0, nq = heads * rows;
  thread_local std::vector<float> qf, acc, m, l, kf, vf, score;
  qf.resize(nq * D);
  acc.assign(nq * D, 0.0f);
  m.assign(nq, -INFINITY);
  l.assign(nq, 0.0f);
  kf.resize(g.block_size * D);
  vf.resize(g.block_size * D);
  score.resize(g.block_size);
  const size_t esize = DTypeSize(g.dtype);
  // Query vector (r, h) at index (r - row0) * heads + (h - head0), pre-scaled.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      float* dst = &qf[(r * heads + h) * D];
      const int64_t t = q_start + w.row0 + r;
      ToF32(dst, static_cast<const char*>(query.data()) + ((t * g.Hq + w.head0 + h) * D) * esize, g.dtype, D);
      for (int64_t i = 0; i < D; ++i) dst[i] *= scale;
    }
  const int64_t first_pos = ctx - n_new;           // position of new row 0
  const int64_t last_pos = first_pos + w.row1 - 1;  // the furthest any row of the item sees
  auto count_of = [&](int64_t b) { return std::min(g.block_size, last_pos + 1 - b * g.block_size); };
  PrefetchBlock(g, key_cache, value_cache, block_row[0], w.kv_head, count_of(0));
  int64_t ran = 0;
  for (int64_t b = 0; b * g.block_size <= last_pos; ++b) {
    const int64_t tok0 = b * g.block_size, count = count_of(b);
    if ((b + 1) * g.block_size <= last_pos)
      PrefetchBlock(g, key_cache, value_cache, block_row[b + 1], w.kv_head, count_of(b + 1));
    WidenBlock(ks, g, key_cache, value_cache, block_row[b], w.kv_head, count, kf.data(), vf.data());
    if (ks == nullptr) ++ran;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pos = first_pos + w.row0 + r;
      const int64_t valid = std::min(count, pos + 1 - tok0);
      if (valid <= 0) continue;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t qi = r * heads + h;
        const float* qv = &qf[qi * D];
        if (ks != nullptr) {
          ks->attend_block(qv, kf.data(), vf.data(), valid, D, &acc[qi * D], m[qi], l[qi]);
          ++ran;
          continue;
        }
        float bm = -INFINITY;
        for (int64_t j = 0; j < valid; ++j) {
          score[j] = Dot(qv, &kf[j * D], D);
          bm = std::max(bm, score[j]);
        }
        float* a = &acc[qi * D];
        if (bm > m[qi]) {
          const float rescale = std::exp(m[qi] - bm);  // exp(-inf) = 0 on the first block
          for (int64_t i = 0; i < D; ++i) a[i] *= rescale;
          l[qi] *= rescale;
          m[qi] = bm;
        }
        for (int64_t j = 0; j < valid; ++j) {
          const float p = std::exp(score[j] - m[qi]);
          l[qi] += p;
          const float* v = &vf[j * D];
          for (int64_t i = 0; i < D; ++i) a[i] += p * v[i];
        }
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t qi = r * heads + h;
      const int64_t t = q_start + w.row0 + r;
      const float inv = 1.0f / l[qi];
      const int64_t o = (t * g.Hq + w.head0 + h) * D;
      for (int64_t i = 0; i < D; ++i) StoreFloat(out.data(), g.dtype, o + i, acc[qi * D + i] * inv);
    }
  return ran;
}

// A prefill item by the kernel set's tile kernel: the item's queries transposed into qt
// (query (r, h) at index (r - row0) * heads + (h - head0), pre-scaled; padded to whole
// vectors with zero queries at the last row's position), each block widened once, then
// attend_tile for the queries that see any of its keys. Returns the attend_tile calls.
int64_t RunTileItem(const attention::KernelSet* ks, const WorkItem& w, const Geometry& g, const Tensor& out,
                 const Tensor& query, const Tensor& key_cache, const Tensor& value_cache, const int32_t* block_row,
                 int64_t ctx, int64_t q_start, int64_t n_new, float scale) {
  const int64_t D = g.D, heads = w.head1 - w.head0, rows = w.row1 - w.row0, nq = heads * rows;
  const int64_t ldq = (nq + ks->lanes - 1) / ks->lanes * ks->lanes;
  thread_local std::vector<float> qt, qrow, pos, acc, m, l, kf, vf;
  qt.assign(D * ldq, 0.0f);
  qrow.resize(D);
  pos.resize(ldq);
  acc.assign(ldq * D, 0.0f);
  m.assign(ldq, -INFINITY);
  l.assign(ldq, 0.0f);
  kf.resize((g.block_size + 31) / 32 * 32 * D);  // whole passes of 32 keys (attend_tile)
  vf.resize(g.block_size * D);
  const size_t esize = DTypeSize(g.dtype);
  const int64_t first_pos = ctx - n_new;           // position of new row 0
  const int64_t last_pos = first_pos + w.row1 - 1;  // the furthest any row of the item sees
  const char* const src = static_cast<const char*>(query.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t i = r * heads + h, t = q_start + w.row0 + r;
      ToF32(qrow.data(), src + ((t * g.Hq + w.head0 + h) * D) * esize, g.dtype, D);
      for (int64_t d = 0; d < D; ++d) qt[d * ldq + i] = qrow[d] * scale;
      pos[i] = static_cast<float>(first_pos + w.row0 + r);
    }
  for (int64_t i = nq; i < ldq; ++i) pos[i] = static_cast<float>(last_pos);
  auto count_of = [&](int64_t b) { return std::min(g.block_size, last_pos + 1 - b * g.block_size); };
  PrefetchBlock(g, key_cache, value_cache, block_row[0], w.kv_head, count_of(0));
  int64_t blocks = 0;
  for (int64_t b = 0; b * g.block_size <= last_pos; ++b, ++blocks) {
    const int64_t tok0 = b * g.block_size, count = count_of(b);
    if ((b + 1) * g.block_size <= last_pos)
      PrefetchBlock(g, key_cache, value_cache, block_row[b + 1], w.kv_head, count_of(b + 1));
    WidenBlock(ks, g, key_cache, value_cache, block_row[b], w.kv_head, count, kf.data(), vf.data());
    // The first query at or after tok0 (queries ascend in position), from its vector on.
    const int64_t first = tok0 <= first_pos + w.row0 ? 0 : (tok0 - first_pos - w.row0) * heads;
    const int64_t q0 = first / ks->lanes * ks->lanes;
    ks->attend_tile(qt.data(), ldq, pos.data(), q0, ldq, kf.data(), vf.data(), count, tok0, D, acc.data(), m.data(),
                    l.data());
  }
  attention::g_tile_blocks.fetch_add(blocks, std::memory_order_relaxed);
  void* const dst = out.data();
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t r = i / heads, h = i % heads, t = q_start + w.row0 + r;
    const float inv = 1.0f / l[i];
    const int64_t o = (t * g.Hq + w.head0 + h) * D;
    const float* a = &acc[i * D];
    if (g.dtype == DType::kBF16) {
      auto* p = static_cast<uint16_t*>(dst) + o;
      for (int64_t d = 0; d < D; ++d) p[d] = FloatToBf16(a[d] * inv);
    } else {
      for (int64_t d = 0; d < D; ++d) StoreFloat(dst, g.dtype, o + d, a[d] * inv);
    }
  }
  return blocks;
}

// A decode step's sequence (one query row, t) over blocks [b0, b1) of its context, every
// head: the vector kernel reads each block's key and value rows where they are, in the
// cache's dtype, for one KV head's query heads at a time, so a block's bytes (contiguous:
// [block_size, Hk, D]) are read together. With `partial`, the unnormalised state (m, l,
// acc of each query head) goes there for CombinePieces; else the result goes to out.
// Returns the attend_rows calls.
int64_t RunDecodePiece(const attention::KernelSet* ks, const Geometry& g, const Tensor& out, const Tensor& query,
                    const Tensor& key_cache, const Tensor& value_cache, const int32_t* block_row, int64_t ctx,
                    int64_t t, int64_t b0, int64_t b1, float scale, float* partial) {
  const int64_t D = g.D, Hq = g.Hq;
  thread_local std::vector<float> qf, acc, m, l;
  qf.resize(Hq * D);
  acc.assign(Hq * D, 0.0f);
  m.assign(Hq, -INFINITY);
  l.assign(Hq, 0.0f);
  const auto* q_row = static_cast<const char*>(query.data()) + t * Hq * D * DTypeSize(g.dtype);
  if (!g.dot_bf16) {
    ToF32(qf.data(), q_row, g.dtype, Hq * D);
    for (float& x : qf) x *= scale;
  }
  const size_t csize = DTypeSize(g.cache_dtype);
  const int64_t token_stride = g.Hk * D;
  const size_t block_bytes = static_cast<size_t>(g.block_size * token_stride) * csize;
  const auto* kc = static_cast<const char*>(key_cache.data());
  const auto* vc = static_cast<const char*>(value_cache.data());
  // The blocks lie anywhere: block b + 1 is prefetched while block b is used, a share of
  // it during each KV head's call (attend_rows spreads the requests among its loads). Into
  // L2 (prefetcht1), not L1: a block's keys and values (64 KiB for 8 KV heads of 128 in
  // BF16) do not fit L1 beside the block in use, and the L1 prefetch measured slower
  // (bench/README.md).
  const size_t share = (block_bytes / static_cast<size_t>(g.Hk) + 63) / 64 * 64;
  int64_t calls = 0;
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t valid = std::min(g.block_size, ctx - b * g.block_size);
    const size_t base = static_cast<size_t>(block_row[b]) * block_bytes;
    const size_t ahead = b + 1 < b1 ? static_cast<size_t>(block_row[b + 1]) * block_bytes : SIZE_MAX;
    for (int64_t kh = 0; kh < g.Hk; ++kh) {
      attention::PrefetchSpan span;
      const size_t from = static_cast<size_t>(kh) * share, to = std::min(block_bytes, (kh + 1) * share);
      if (ahead != SIZE_MAX && from < to)
        span = {kc + ahead + from, vc + ahead + from, static_cast<int64_t>((to - from + 63) / 64)};
      // An F8E4M3 cache: the next call's rows (this block's next KV head, or the next
      // block's first) also into L1, 4 KiB for 16 rows of 128 (measured 1-6% faster; a
      // BF16 cache's twice as many lines measured mixed, bench/README.md).
      if (g.cache_dtype == DType::kF8E4M3) {
        const bool last = kh + 1 == g.Hk;
        if (!last || ahead != SIZE_MAX) {
          const size_t nb = last ? ahead : base;
          const size_t nh = static_cast<size_t>((last ? 0 : kh + 1) * D) * csize;
          const int64_t nvalid = last ? std::min(g.block_size, ctx - (b + 1) * g.block_size) : valid;
          const size_t rb = static_cast<size_t>(D) * csize, ts = static_cast<size_t>(token_stride) * csize;
          for (int64_t j = 0; j < nvalid; ++j)
            for (size_t o = 0; o < rb; o += 64) {
              __builtin_prefetch(kc + nb + nh + j * ts + o, 0, 3);
              __builtin_prefetch(vc + nb + nh + j * ts + o, 0, 3);
            }
        }
      }
      const size_t head = static_cast<size_t>(kh * D) * csize;
      const int64_t h0 = kh * g.group;
      if (g.dot_bf16)
        ks->attend_rows_bf16(reinterpret_cast<const uint16_t*>(q_row) + h0 * D, scale, g.group, kc + base + head,
                             vc + base + head, token_stride, g.cache_dtype, g.k_scale, g.v_scale, valid, D,
                             &acc[h0 * D], &m[h0], &l[h0], &span);
      else
        ks->attend_rows(&qf[h0 * D], g.group, kc + base + head, vc + base + head, token_stride, g.cache_dtype,
                        g.k_scale, g.v_scale, valid, D, &acc[h0 * D], &m[h0], &l[h0], &span);
      ++calls;
    }
  }
  attention::g_blocks_in_place.fetch_add((b1 - b0) * g.Hk, std::memory_order_relaxed);
  if (g.dot_bf16) ks->acc_to_natural(acc.data(), Hq, D, g.cache_dtype);
  if (partial != nullptr) {
    std::copy(m.begin(), m.end(), partial);
    std::copy(l.begin(), l.end(), partial + Hq);
    std::copy(acc.begin(), acc.end(), partial + 2 * Hq);
    return calls;
  }
  for (int64_t h = 0; h < Hq; ++h) {
    const float inv = 1.0f / l[h];
    for (int64_t i = 0; i < D; ++i) StoreFloat(out.data(), g.dtype, (t * Hq + h) * D + i, acc[h * D + i] * inv);
  }
  return calls;
}

// Query row t's result from the states of `count` pieces (consecutive, each 2·Hq + Hq·D
// floats): per head, m = max m_i, l = Σ l_i·e^(m_i - m), out = Σ acc_i·e^(m_i - m) / l.
void CombinePieces(const Geometry& g, const Tensor& out, int64_t t, const float* pieces, int64_t count) {
  const int64_t D = g.D, Hq = g.Hq, stride = 2 * Hq + Hq * D;
  std::vector<float> w(static_cast<size_t>(count)), acc(static_cast<size_t>(D));
  for (int64_t h = 0; h < Hq; ++h) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < count; ++i) mx = std::max(mx, pieces[i * stride + h]);
    float l = 0.0f;
    for (int64_t i = 0; i < count; ++i) {
      w[i] = std::exp(pieces[i * stride + h] - mx);
      l += pieces[i * stride + Hq + h] * w[i];
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t i = 0; i < count; ++i) {
      const float* a = pieces + i * stride + 2 * Hq + h * D;
      for (int64_t d = 0; d < D; ++d) acc[d] += a[d] * w[i];
    }
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < D; ++d) StoreFloat(out.data(), g.dtype, (t * Hq + h) * D + d, acc[d] * inv);
  }
  attention::g_pieces_combined.fetch_add(count, std::memory_order_relaxed);
}

void PagedAttentionCpu(const Queue& q, const Tensor& out, const Tensor& query, const Tensor& key_cache,
                       const Tensor& value_cache, const Tensor& block_tables, const Tensor& seq_lens,
                       const Tensor& query_start_loc, float scale, float k_scale, float v_scale) {
  Geometry g{};
  g.D = key_cache.dim(3);
  g.Hk = key_cache.dim(2);
  g.Hq = query.dim(1) / g.D;
  g.group = g.Hq / g.Hk;
  g.block_size = key_cache.dim(1);
  g.num_blocks = key_cache.dim(0);
  g.max_blocks = block_tables.dim(1);
  g.dtype = query.dtype();
  g.cache_dtype = key_cache.dtype();
  float k_table[256], v_table[256];
  if (g.cache_dtype == DType::kF8E4M3) {
    for (int b = 0; b < 256; ++b) {
      k_table[b] = KvCacheDequantizeFp8(static_cast<uint8_t>(b), k_scale);
      v_table[b] = KvCacheDequantizeFp8(static_cast<uint8_t>(b), v_scale);
    }
    g.k_table = k_table;
    g.v_table = v_table;
    g.k_scale = k_scale;
    g.v_scale = v_scale;
  }
  const int64_t S = seq_lens.dim(0), T = query.dim(0);
  const auto* lens = seq_lens.data_as<int32_t>();
  const auto* qsl = query_start_loc.data_as<int32_t>();
  const auto* tables = block_tables.data_as<int32_t>();

  const attention::KernelSet* ks = attention::ForIsa(Cpu(q).isa, g.D);
  g.dot_bf16 = attention::DotBf16Fits(ks, Cpu(q).isa, g.dtype, g.cache_dtype, g.D);
  // Decode sequences (one new row) are read in place by the vector kernels.
  const bool decode_in_place = ks != nullptr && attention::g_read_in_place.load(std::memory_order_relaxed);
  // Validate the metadata and count the row chunks (and the decode sequences' blocks).
  VT_CHECK(qsl[0] == 0 && qsl[S] == T, "PagedAttention: query_start_loc must run from 0 to the ", T,
           " query rows, got [", qsl[0], " .. ", qsl[S], "]");
  // Query rows per prefill item, for a whole group of query heads (kept when the groups
  // are split below).
  const bool tiles = ks != nullptr && attention::g_prefill_tiles.load(std::memory_order_relaxed);
  const int64_t item_rows = tiles ? attention::PrefillItemRows(g.group) : attention::kOneQueryRows;
  int64_t chunks = 0, decode_blocks = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = qsl[s + 1] - qsl[s], ctx = lens[s];
    VT_CHECK(n >= 0, "PagedAttention: query_start_loc decreases at sequence ", s, " (", qsl[s], " -> ", qsl[s + 1],
             ")");
    VT_CHECK(n <= ctx, "PagedAttention: sequence ", s, " has ", n, " new query rows but seq_lens[", s, "] = ", ctx);
    VT_CHECK(ctx <= g.max_blocks * g.block_size, "PagedAttention: seq_lens[", s, "] = ", ctx, " exceeds its ",
             g.max_blocks, " block-table entries of ", g.block_size, " tokens");
    for (int64_t b = 0; b * g.block_size < ctx; ++b) {
      const int32_t id = tables[s * g.max_blocks + b];
      VT_CHECK(id >= 0 && id < g.num_blocks, "PagedAttention: block_tables[", s, ", ", b, "] = ", id,
               " is outside the cache's ", g.num_blocks, " blocks");
    }
    if (!decode_in_place || n != 1) chunks += (n + item_rows - 1) / item_rows;
    else decode_blocks += (ctx + g.block_size - 1) / g.block_size;
  }
  // Split query-head groups further when there are too few items to fill the pool.
  const int threads = Cpu(q).pool.size();
  int64_t split = 1;
  while (chunks > 0 && chunks * g.Hk * split < threads && split < g.group && g.group % (split * 2) == 0) split *= 2;
  std::vector<WorkItem> items;
  items.reserve(static_cast<size_t>(chunks * g.Hk * split));
  // Decode sequences in pieces of at most `piece` blocks: about two per thread over the
  // step's decode blocks, at least kMinPieceBlocks each (a long context alone still fills
  // the pool; short ones stay whole). A sequence in several pieces is combined after.
  struct Piece {
    int64_t seq, b0, b1, partial;  // partial: index of its state, or -1 (written directly)
  };
  std::vector<Piece> pieces;
  std::vector<std::pair<int64_t, int64_t>> combine;  // (sequence, first partial) per split sequence
  int64_t partials = 0;
  const int64_t piece = std::max(kMinPieceBlocks, (decode_blocks + 2 * threads - 1) / (2 * threads));
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = qsl[s + 1] - qsl[s];
    if (decode_in_place && n == 1) {
      const int64_t nb = (lens[s] + g.block_size - 1) / g.block_size, count = (nb + piece - 1) / piece;
      if (count > 1) combine.emplace_back(s, partials);
      for (int64_t i = 0; i < count; ++i)
        pieces.push_back({s, nb * i / count, nb * (i + 1) / count, count > 1 ? partials++ : -1});
      continue;
    }
    for (int64_t r0 = 0; r0 < n; r0 += item_rows)
      for (int64_t kh = 0; kh < g.Hk; ++kh)
        for (int64_t part = 0; part < split; ++part) {
          const int64_t per = g.group / split;
          const int64_t h0 = kh * g.group + part * per;
          items.push_back({s, kh, h0, h0 + per, r0, std::min(n, r0 + item_rows)});
        }
  }
  const int64_t state = 2 * g.Hq + g.Hq * g.D;
  std::vector<float> states(static_cast<size_t>(partials * state));
  const int64_t npieces = static_cast<int64_t>(pieces.size());
  const int64_t ntasks = npieces + static_cast<int64_t>(items.size());
  // Tasks in order of decreasing cost (query vectors times the keys they see), claimed one
  // at a time: the pool's contiguous split of a causal prompt would give the thread with the
  // last rows most of the work.
  std::vector<std::pair<int64_t, int64_t>> order(static_cast<size_t>(ntasks));  // (-cost, task)
  for (int64_t i = 0; i < ntasks; ++i) {
    int64_t cost;
    if (i < npieces) {
      cost = (pieces[i].b1 - pieces[i].b0) * g.block_size * g.Hq;
    } else {
      const WorkItem& w = items[i - npieces];
      const int64_t n = qsl[w.seq + 1] - qsl[w.seq];
      cost = (w.head1 - w.head0) * (w.row1 - w.row0) * (lens[w.seq] - n + w.row1);
    }
    order[i] = {-cost, i};
  }
  std::sort(order.begin(), order.end());
  std::atomic<int64_t> next{0};
  // The dispatch record's counts (attention::LastAttentionOnThisThread), summed over threads.
  std::atomic<int64_t> rows_calls{0}, tile_calls{0}, block_calls{0}, portable_blocks{0};
  Cpu(q).pool.ParallelFor(std::min<int64_t>(ntasks, threads), 1, [&](int64_t, int64_t) {
    for (int64_t k = next.fetch_add(1); k < ntasks; k = next.fetch_add(1)) {
      const int64_t i = order[k].second;
      if (i < npieces) {
        const Piece& p = pieces[i];
        rows_calls.fetch_add(
            RunDecodePiece(ks, g, out, query, key_cache, value_cache, tables + p.seq * g.max_blocks, lens[p.seq],
                           qsl[p.seq], p.b0, p.b1, scale, p.partial < 0 ? nullptr : &states[p.partial * state]),
            std::memory_order_relaxed);
        continue;
      }
      const WorkItem& w = items[i - npieces];
      const int64_t n = qsl[w.seq + 1] - qsl[w.seq];
      if (tiles && n > 1) {
        tile_calls.fetch_add(RunTileItem(ks, w, g, out, query, key_cache, value_cache, tables + w.seq * g.max_blocks,
                                         lens[w.seq], qsl[w.seq], n, scale),
                             std::memory_order_relaxed);
      } else {
        const int64_t ran = RunItem(ks, w, g, out, query, key_cache, value_cache, tables + w.seq * g.max_blocks,
                                    lens[w.seq], qsl[w.seq], n, scale);
        (ks != nullptr ? block_calls : portable_blocks).fetch_add(ran, std::memory_order_relaxed);
      }
    }
  });
  attention::LastAttention& last = attention::t_last;
  last.set = ks != nullptr ? ks->name : "scalar";
  last.rows_calls = rows_calls.load();
  last.rows_bf16_calls = g.dot_bf16 ? last.rows_calls : 0;
  last.tile_calls = tile_calls.load();
  last.block_calls = block_calls.load();
  last.portable_blocks = portable_blocks.load();
  for (size_t c = 0; c < combine.size(); ++c) {
    const int64_t first = combine[c].second;
    const int64_t count = (c + 1 < combine.size() ? combine[c + 1].second : partials) - first;
    CombinePieces(g, out, qsl[combine[c].first], &states[first * state], count);
  }
}

void KvCacheWriteCpu(const Queue& q, const Tensor& key, const Tensor& value, const Tensor& key_cache,
                     const Tensor& value_cache, const Tensor& slot_mapping, float k_scale, float v_scale) {
  const int64_t T = slot_mapping.dim(0);
  const int64_t num_slots = key_cache.dim(0) * key_cache.dim(1);
  const auto* slots = slot_mapping.data_as<int64_t>();
  for (int64_t t = 0; t < T; ++t)
    VT_CHECK(slots[t] < num_slots, "KvCacheWrite: slot_mapping[", t, "] = ", slots[t], " but the cache has ",
             num_slots, " slots (", key_cache.dim(0), " blocks of ", key_cache.dim(1), ")");
  if (key_cache.dtype() == DType::kF8E4M3) {  // quantized element by element
    const int64_t width = key.dim(1);
    auto* kc = static_cast<uint8_t*>(key_cache.data());
    auto* vc = static_cast<uint8_t*>(value_cache.data());
    // The kernel set's vector quantizer where there is one (any row width: D = 0 asks for
    // the set whatever the lane count) and the rows are F32/BF16/F16; the same bytes.
    auto wide = [](DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; };
    const attention::KernelSet* ks = wide(key.dtype()) && wide(value.dtype()) ? attention::ForIsa(Cpu(q).isa, 0) : nullptr;
    const size_t kes = DTypeSize(key.dtype()), ves = DTypeSize(value.dtype());
    Cpu(q).pool.ParallelFor(T, 8, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        if (slots[t] < 0) continue;
        if (ks != nullptr) {
          ks->quantize_to_cache(kc + slots[t] * width, static_cast<const char*>(key.data()) + t * width * kes,
                                key.dtype(), width, k_scale);
          ks->quantize_to_cache(vc + slots[t] * width, static_cast<const char*>(value.data()) + t * width * ves,
                                value.dtype(), width, v_scale);
          continue;
        }
        for (int64_t i = 0; i < width; ++i) {
          kc[slots[t] * width + i] = KvCacheQuantizeFp8(LoadFloat(key.data(), key.dtype(), t * width + i), k_scale);
          vc[slots[t] * width + i] =
              KvCacheQuantizeFp8(LoadFloat(value.data(), value.dtype(), t * width + i), v_scale);
        }
      }
    });
    return;
  }
  const size_t row = static_cast<size_t>(key.dim(1)) * DTypeSize(key.dtype());
  Cpu(q).pool.ParallelFor(T, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (slots[t] < 0) continue;
      std::memcpy(static_cast<char*>(key_cache.data()) + slots[t] * row,
                  static_cast<const char*>(key.data()) + t * row, row);
      std::memcpy(static_cast<char*>(value_cache.data()) + slots[t] * row,
                  static_cast<const char*>(value.data()) + t * row, row);
    }
  });
}

// The definition op by op, each on this queue's level (no fused CPU kernel).
void PagedAttentionQuantFp8Cpu(const Queue& q, const Tensor& out, const Tensor& out8, const Tensor& query,
                               const Tensor& key_cache, const Tensor& value_cache, const Tensor& block_tables,
                               const Tensor& seq_lens, const Tensor& query_start_loc, float scale, float input_scale,
                               float k_scale, float v_scale) {
  PagedAttention(q, out, query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, scale, k_scale,
                 v_scale);
  QuantFp8Static(q, out8, out, input_scale);
}

}  // namespace

void RegisterAttentionKernels() {
  Register<OpId::kKvCacheWrite>(DeviceType::kCPU, &KvCacheWriteCpu);
  // The CPU runs the definition op by op (no fused CPU kernel).
  Register<OpId::kQkNormRopeCacheWrite>(DeviceType::kCPU, &QkNormRopeCacheWriteComposite);
  Register<OpId::kPagedAttention>(DeviceType::kCPU, &PagedAttentionCpu);
  Register<OpId::kPagedAttentionQuantFp8>(DeviceType::kCPU, &PagedAttentionQuantFp8Cpu);
}

}  // namespace vt::cpu
