// Table cases of the ops the model layer needs beyond linear algebra: Embedding and
// KvCacheWrite move bytes (byte-exact); RotaryEmbedding computes the same unfused f32
// expression everywhere (within one unit in the last place: a backend may contract it; the
// CPU levels, which never contract, byte for byte);
// PagedAttention sums in f32 in another order per backend (2 ulp of the output dtype plus
// 1e-5: the two roundings straddling a tie, and the f32 exp and sums).
// F8E4M3 caches: KvCacheWrite's bytes are exact (one quantizer everywhere, with specials);
// QkNormRopeCacheWrite's value bytes are exact, its key bytes within one e4m3 step (k' may
// differ by an ulp of the keys' dtype across backends; on one backend the op equals its
// definition byte for byte); PagedAttention as above on the dequantized values.
// PagedAttentionQuantFp8: its output as PagedAttention's, its codes within one e4m3 step of
// the reference's, and on every backend both byte for byte its definition's.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "op_table.h"
#include "vt/ops/attention.h"
#include "vt/ops/embedding.h"
#include "vt/ops/rope.h"

namespace vt_table {

namespace {

using vt::DType;

const DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// A cos/sin table like the model layer's (theta 1e6): row p is cos(p·f_i) then sin(p·f_i).
vt::Tensor CosSinCache(int64_t max_pos, int64_t D) {
  std::vector<float> cs(static_cast<size_t>(max_pos * D));
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double f = std::pow(1.0e6, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      cs[p * D + i] = static_cast<float>(std::cos(p * f));
      cs[p * D + D / 2 + i] = static_cast<float>(std::sin(p * f));
    }
  return HostOf(cs, {max_pos, D}, DType::kF32);
}

// One step of the e4m3 grid at |x| (twice the spacing below it, covering a binade edge).
double Fp8Step(double x) { return std::exp2(std::floor(std::log2(std::max(std::fabs(x), 0x1p-6))) - 2); }

// n keys or values around magnitude `sigma` with the specials a cache write must keep: 0, -0,
// NaN of each sign, +-Inf and values past 448 * scale (saturated).
std::vector<float> KvWithSpecials(size_t n, uint32_t seed, float sigma) {
  std::vector<float> v = Normal(n, seed, sigma, 4.0f);
  const float specials[] = {0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, 1e6f, -1e6f, 1e-30f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]) && 3 * i + 1 < n; ++i) v[3 * i + 1] = specials[i];
  return v;
}

struct AttnGeometry {
  int64_t Hq, Hk, D, block_size;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // per sequence: cached length, new rows
};

}  // namespace

PagedBatch MakePagedBatch(const std::vector<std::pair<int64_t, int64_t>>& seqs, int64_t block_size, uint32_t seed) {
  PagedBatch b;
  b.S = static_cast<int64_t>(seqs.size());
  int64_t total_blocks = 0;
  for (const auto& [ctx, n] : seqs) {
    const int64_t nb = (ctx + block_size - 1) / block_size;
    b.max_blocks = std::max(b.max_blocks, nb);
    total_blocks += nb;
    b.T += n;
  }
  b.num_blocks = total_blocks + 3;
  std::vector<int32_t> perm(static_cast<size_t>(b.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  b.tables.assign(static_cast<size_t>(b.S * b.max_blocks), -1);
  b.query_start_loc = {0};
  size_t next = 0;
  for (int64_t s = 0; s < b.S; ++s) {
    const auto [ctx, n] = seqs[s];
    for (int64_t blk = 0; blk < (ctx + block_size - 1) / block_size; ++blk) b.tables[s * b.max_blocks + blk] = perm[next++];
    b.lens.push_back(static_cast<int32_t>(ctx));
    b.query_start_loc.push_back(b.query_start_loc.back() + static_cast<int32_t>(n));
  }
  return b;
}

std::vector<OpCase> EmbeddingCases() {
  std::vector<OpCase> cases;
  const int64_t V = 37;
  const std::vector<int32_t> ids = {0, 36, 5, 5, 17, 0, 36, 2, 9};
  const int64_t T = static_cast<int64_t>(ids.size());
  for (int64_t H : {1, 7, 64, 130}) {
    for (DType td : kFloatTypes) {
      for (DType od : {DType::kF32, DType::kBF16, DType::kF16}) {
        if (od == DType::kF16 && td != DType::kF16) continue;  // out: the table's dtype, F32 or BF16
        OpCase c{vt::StrCat("H ", H, " ", vt::DTypeName(td), " -> ", vt::DTypeName(od)),
                 {Host(Normal(static_cast<size_t>(V * H), 11, 3.0f), {V, H}, td), HostOf(ids, {T}, DType::kI32)},
                 {Filled({T, H}, od)},
                 nullptr,
                 nullptr,
                 nullptr};
        c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) { vt::Embedding(q, out[0], in[0], in[1]); };
        cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}

std::vector<OpCase> RotaryEmbeddingCases() {
  std::vector<OpCase> cases;
  const int64_t max_pos = 300, Hq = 4, Hk = 2;
  const std::vector<int64_t> pos64 = {0, 1, 2, 299, 150, 7, 7};
  const std::vector<int32_t> pos32(pos64.begin(), pos64.end());
  const int64_t T = static_cast<int64_t>(pos64.size());
  // Halves of 3 and 10 pairs: narrower than a vector, and whole vectors plus a partial one.
  for (int64_t D : {6, 8, 20, 64, 128}) {
    const vt::Tensor cache = CosSinCache(max_pos, D);
    for (DType d : kFloatTypes) {
      for (DType pd : {DType::kI32, DType::kI64}) {
        for (bool with_key : {true, false}) {
          OpCase c{vt::StrCat("D ", D, " ", vt::DTypeName(d), " positions ", vt::DTypeName(pd), with_key ? " key" : ""),
                   {pd == DType::kI32 ? HostOf(pos32, {T}, pd) : HostOf(pos64, {T}, pd), cache},
                   {Host(Normal(static_cast<size_t>(T * Hq * D), 21, 2.0f), {T, Hq * D}, d)},
                   nullptr,
                   [d](size_t, int64_t, double want) { return Ulp(d, want); },
                   nullptr};
          c.exact_on_cpu = true;
          if (with_key) c.outputs.push_back(Host(Normal(static_cast<size_t>(T * Hk * D), 22, 2.0f), {T, Hk * D}, d));
          c.run = [D](const vt::Queue& q, const Tensors& in, const Tensors& out) {
            vt::RotaryEmbedding(q, in[0], out[0], out.size() > 1 ? &out[1] : nullptr, in[1], D);
          };
          cases.push_back(std::move(c));
        }
      }
    }
  }
  return cases;
}

std::vector<OpCase> KvCacheWriteCases() {
  std::vector<OpCase> cases;
  const int64_t blocks = 5, bs = 4;
  const std::vector<int64_t> slots = {19, -1, 0, 7, 8, -5, 12};  // negative: skipped
  const int64_t T = static_cast<int64_t>(slots.size());
  for (int64_t Hk : {1, 3}) {
    for (int64_t D : {6, 64}) {
      for (DType d : kFloatTypes) {
        const vt::Shape cshape{blocks, bs, Hk, D};
        const size_t cn = static_cast<size_t>(blocks * bs * Hk * D);
        OpCase c{vt::StrCat("Hk ", Hk, " D ", D, " ", vt::DTypeName(d)),
                 {Host(Normal(static_cast<size_t>(T * Hk * D), 33), {T, Hk * D}, d),
                  Host(Normal(static_cast<size_t>(T * Hk * D), 34), {T, Hk * D}, d), HostOf(slots, {T}, DType::kI64)},
                 {Host(Normal(cn, 31), cshape, d), Host(Normal(cn, 32), cshape, d)},
                 nullptr,
                 nullptr,
                 nullptr};
        c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
          vt::KvCacheWrite(q, in[0], in[1], out[0], out[1], in[2]);
        };
        cases.push_back(std::move(c));
      }
      // An F8E4M3 cache: keys and values of each float dtype quantized with their scales.
      for (DType d : kFloatTypes) {
        for (const auto& [ks, vs] : {std::pair{1.0f, 1.0f}, std::pair{0.0371f, 2.5f}}) {
          const vt::Shape cshape{blocks, bs, Hk, D};
          OpCase c{vt::StrCat("Hk ", Hk, " D ", D, " ", vt::DTypeName(d), " -> F8E4M3 scales ", ks, " ", vs),
                   {Host(KvWithSpecials(static_cast<size_t>(T * Hk * D), 35, 4.0f), {T, Hk * D}, d),
                    Host(KvWithSpecials(static_cast<size_t>(T * Hk * D), 36, 40.0f), {T, Hk * D}, d),
                    HostOf(slots, {T}, DType::kI64)},
                   {Filled(cshape, DType::kF8E4M3), Filled(cshape, DType::kF8E4M3)},
                   nullptr,
                   nullptr,
                   nullptr};
          c.run = [ks, vs](const vt::Queue& q, const Tensors& in, const Tensors& out) {
            vt::KvCacheWrite(q, in[0], in[1], out[0], out[1], in[2], ks, vs);
          };
          cases.push_back(std::move(c));
        }
      }
    }
  }
  return cases;
}

std::vector<OpCase> QkNormRopeCacheWriteCases() {
  // Decode and prefill rows, GQA and MHA, head sizes on and off the warp width, with and
  // without the q/k norms; slots include padding (-1) and are not in token order.
  struct Geometry {
    int64_t Hq, Hk, D;
  };
  const Geometry geometries[] = {{4, 2, 64}, {2, 1, 128}, {3, 3, 8}, {2, 2, 80}};
  const int64_t max_pos = 300, blocks = 6, bs = 4;
  const std::vector<int64_t> pos64 = {0, 1, 299, 150, 7, 7, 42};
  const std::vector<int32_t> pos32(pos64.begin(), pos64.end());
  const std::vector<int64_t> slots = {19, -1, 0, 7, 8, 23, 12};
  const int64_t T = static_cast<int64_t>(pos64.size());
  std::vector<OpCase> cases;
  uint32_t seed = 500;
  for (const Geometry& g : geometries) {
    const vt::Tensor cache = CosSinCache(max_pos, g.D);
    for (DType d : kFloatTypes) {
      for (int norms : {0, 1, 2}) {  // none; both; the key's only
        seed += 10;
        const DType pd = (seed / 10) % 2 == 0 ? DType::kI32 : DType::kI64;
        const vt::Shape cshape{blocks, bs, g.Hk, g.D};
        const size_t cn = static_cast<size_t>(blocks * bs * g.Hk * g.D);
        OpCase c{vt::StrCat("Hq ", g.Hq, " Hk ", g.Hk, " D ", g.D, " ", vt::DTypeName(d),
                            norms == 0 ? " no norms" : norms == 1 ? " q/k norms" : " k norm", " positions ",
                            vt::DTypeName(pd)),
                 {Host(Normal(static_cast<size_t>(T * g.Hq * g.D), seed, 2.0f, 3.0f), {T, g.Hq * g.D}, d),
                  Host(Normal(static_cast<size_t>(T * g.Hk * g.D), seed + 1, 2.0f, 3.0f), {T, g.Hk * g.D}, d),
                  Host(Normal(static_cast<size_t>(T * g.Hk * g.D), seed + 2), {T, g.Hk * g.D}, d),
                  pd == DType::kI32 ? HostOf(pos32, {T}, pd) : HostOf(pos64, {T}, pd), cache,
                  HostOf(slots, {T}, DType::kI64),
                  Host(Normal(static_cast<size_t>(g.D), seed + 3, 0.5f), {g.D}, DType::kF32),
                  Host(Normal(static_cast<size_t>(g.D), seed + 4, 0.5f), {g.D}, DType::kBF16)},
                 {Filled({T, g.Hq * g.D}, d), Host(Normal(cn, seed + 5), cshape, d), Host(Normal(cn, seed + 6), cshape, d)},
                 nullptr,
                 [d](size_t, int64_t, double want) { return Ulp(d, want); },
                 nullptr};
        const auto op = [norms](bool composite) {
          return [norms, composite](const vt::Queue& q, const Tensors& in, const Tensors& out) {
            const vt::Tensor* qn = norms == 1 ? &in[6] : nullptr;
            const vt::Tensor* kn = norms >= 1 ? &in[7] : nullptr;
            (composite ? vt::QkNormRopeCacheWriteComposite : vt::QkNormRopeCacheWrite)(
                q, out[0], in[0], in[1], in[2], qn, kn, 1e-6f, in[3], in[4], out[1], out[2], in[5], 1.0f, 1.0f);
          };
        };
        c.run = op(false);
        c.definition = op(true);
        // The same into an F8E4M3 cache (scales chosen so the keys span the e4m3 range).
        OpCase f{c.name + " -> F8E4M3", c.inputs,
                 {Filled({T, g.Hq * g.D}, d), Filled(cshape, DType::kF8E4M3), Filled(cshape, DType::kF8E4M3)},
                 nullptr,
                 [d](size_t k, int64_t, double want) { return k == 0 ? Ulp(d, want) : k == 1 ? Fp8Step(want) : 0.0; },
                 nullptr};
        const auto op8 = [norms](bool composite) {
          return [norms, composite](const vt::Queue& q, const Tensors& in, const Tensors& out) {
            const vt::Tensor* qn = norms == 1 ? &in[6] : nullptr;
            const vt::Tensor* kn = norms >= 1 ? &in[7] : nullptr;
            (composite ? vt::QkNormRopeCacheWriteComposite : vt::QkNormRopeCacheWrite)(
                q, out[0], in[0], in[1], in[2], qn, kn, 1e-6f, in[3], in[4], out[1], out[2], in[5], 0.0213f, 0.75f);
          };
        };
        f.run = op8(false);
        f.definition = op8(true);
        cases.push_back(std::move(c));
        cases.push_back(std::move(f));
      }
    }
  }
  return cases;
}

std::vector<OpCase> PagedAttentionCases() {
  // Fresh prompts, chunked prefill over earlier context, decode; GQA, MQA, MHA; head sizes
  // on and off the vector widths; blocks handed out shuffled, spare blocks of garbage.
  const std::vector<AttnGeometry> geometries = {
      {4, 2, 32, 16, {{5, 5}, {40, 40}, {70, 9}}},   // GQA 2, prefill chunks
      {8, 1, 64, 16, {{33, 33}, {100, 1}}},          // MQA, a decode row
      {6, 6, 128, 8, {{45, 45}}},                    // MHA, small blocks
      {12, 4, 80, 16, {{3, 3}, {1, 1}, {48, 48}}},   // a head size not a multiple of 32
      {4, 4, 8, 4, {{9, 1}, {17, 1}, {2, 1}}},       // decode batch, a head size of 8
      {16, 8, 64, 16, {{300, 300}}},                 // enough CTAs that CUDA does not split the context
      {8, 2, 128, 16, {{2100, 1}, {700, 1}}},        // long decode contexts (CUDA: split across CTAs)
  };
  std::vector<OpCase> cases;
  uint32_t seed = 100;
  for (const AttnGeometry& g : geometries) {
    for (DType d : kFloatTypes) {
      seed += 10;
      const PagedBatch b = MakePagedBatch(g.seqs, g.block_size, seed);
      const int64_t S = b.S, T = b.T, max_blocks = b.max_blocks, num_blocks = b.num_blocks;
      const vt::Shape cshape{num_blocks, g.block_size, g.Hk, g.D};
      const size_t cn = static_cast<size_t>(num_blocks * g.block_size * g.Hk * g.D);
      const float scale = 1.0f / std::sqrt(static_cast<float>(g.D));
      OpCase c{vt::StrCat("Hq ", g.Hq, " Hk ", g.Hk, " D ", g.D, " block ", g.block_size, " seqs ", S, " ",
                          vt::DTypeName(d)),
               {Host(Normal(static_cast<size_t>(T * g.Hq * g.D), seed + 3, 1.5f), {T, g.Hq * g.D}, d),
                Host(Normal(cn, seed + 1), cshape, d), Host(Normal(cn, seed + 2), cshape, d),
                HostOf(b.tables, {S, max_blocks}, DType::kI32), HostOf(b.lens, {S}, DType::kI32),
                HostOf(b.query_start_loc, {S + 1}, DType::kI32)},
               {Filled({T, g.Hq * g.D}, d)},
               nullptr,
               [d](size_t, int64_t, double want) { return 2.0 * Ulp(d, want) + 1e-5; },
               nullptr};
      c.run = [scale](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::PagedAttention(q, out[0], in[0], in[1], in[2], in[3], in[4], in[5], scale);
      };
      // An F8E4M3 cache holding keys / k_scale and values / v_scale: the CUDA kernel decodes
      // 16 bytes at a time where D allows (not for D = 8), the CPU through its tables.
      const float ks = 0.011f, vs = 0.0625f;
      const auto fp8_cache = [&](uint32_t sd, float s) {
        const std::vector<float> x = Normal(cn, sd);
        std::vector<uint8_t> b(cn);
        for (size_t i = 0; i < cn; ++i) b[i] = vt::KvCacheQuantizeFp8(x[i], s);
        return HostOf(b, cshape, DType::kF8E4M3);
      };
      OpCase f{c.name + " F8E4M3 cache",
               {c.inputs[0], fp8_cache(seed + 4, ks), fp8_cache(seed + 5, vs), c.inputs[3], c.inputs[4], c.inputs[5]},
               {Filled({T, g.Hq * g.D}, d)},
               nullptr,
               [d](size_t, int64_t, double want) { return 2.0 * Ulp(d, want) + 1e-5; },
               nullptr};
      f.run = [scale, ks, vs](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::PagedAttention(q, out[0], in[0], in[1], in[2], in[3], in[4], in[5], scale, ks, vs);
      };
      cases.push_back(std::move(c));
      cases.push_back(std::move(f));
    }
  }
  return cases;
}

std::vector<OpCase> PagedAttentionQuantFp8Cases() {
  // The paths of the CUDA kernels: the tensor-core decode kernel at one BF16 sequence (its
  // splits combined in the launch), the CUDA-core decode kernel (8+ sequences), the general
  // kernel and its combine kernel (F32 / F16 queries, a head size of 8), and the fresh and
  // mixed prefill steps whose codes QuantFp8Static writes after the tensor-core prefill.
  const std::vector<AttnGeometry> geometries = {
      {16, 8, 128, 16, {{40, 1}}},                            // one decode row, Qwen3-0.6B heads
      {8, 2, 128, 16, {{2100, 1}, {700, 1}}},                 // long contexts, split across CTAs
      {16, 8, 64, 16, {{9, 1}, {30, 1}, {2, 1}, {17, 1}, {5, 1}, {64, 1}, {1, 1}, {40, 1}, {3, 1}}},
      {4, 4, 8, 4, {{9, 1}, {17, 1}, {2, 1}}},                // a head size of 8
      {16, 8, 64, 16, {{300, 300}}},                          // a fresh prompt
      {8, 2, 128, 16, {{70, 70}, {200, 1}, {33, 1}}},         // a mixed step
  };
  std::vector<OpCase> cases;
  uint32_t seed = 900;
  for (const AttnGeometry& g : geometries) {
    for (DType d : kFloatTypes) {
      for (const bool fp8_cache : {false, true}) {
        if (fp8_cache && d != DType::kBF16) continue;
        seed += 10;
        const PagedBatch b = MakePagedBatch(g.seqs, g.block_size, seed);
        const int64_t S = b.S, T = b.T;
        const vt::Shape cshape{b.num_blocks, g.block_size, g.Hk, g.D};
        const size_t cn = static_cast<size_t>(b.num_blocks * g.block_size * g.Hk * g.D);
        const float scale = 1.0f / std::sqrt(static_cast<float>(g.D));
        const float ks = fp8_cache ? 0.011f : 1.0f, vs = fp8_cache ? 0.0625f : 1.0f;
        // 0.004 saturates the outputs past 1.79; 0.0173 keeps every one in range.
        const float input_scale = seed % 20 == 0 ? 0.004f : 0.0173f;
        const auto cache = [&](uint32_t sd, float s) {
          const std::vector<float> x = Normal(cn, sd);
          if (!fp8_cache) return Host(x, cshape, d);
          std::vector<uint8_t> bytes(cn);
          for (size_t i = 0; i < cn; ++i) bytes[i] = vt::KvCacheQuantizeFp8(x[i], s);
          return HostOf(bytes, cshape, DType::kF8E4M3);
        };
        OpCase c{vt::StrCat("Hq ", g.Hq, " Hk ", g.Hk, " D ", g.D, " seqs ", S, " rows ", T, " ", vt::DTypeName(d),
                            fp8_cache ? " F8E4M3 cache" : "", " input_scale ", input_scale),
                 {Host(Normal(static_cast<size_t>(T * g.Hq * g.D), seed + 3, 1.5f), {T, g.Hq * g.D}, d),
                  cache(seed + 1, ks), cache(seed + 2, vs), HostOf(b.tables, {S, b.max_blocks}, DType::kI32),
                  HostOf(b.lens, {S}, DType::kI32), HostOf(b.query_start_loc, {S + 1}, DType::kI32)},
                 {Filled({T, g.Hq * g.D}, d), Filled({T, g.Hq * g.D}, DType::kF8E4M3)},
                 nullptr,
                 [d](size_t k, int64_t, double want) {
                   // The output as PagedAttention's; a code may move by one step where its
                   // input moved by those ulps.
                   return k == 0 ? 2.0 * Ulp(d, want) + 1e-5 : std::max(std::fabs(want) / 8.0, std::ldexp(1.0, -9));
                 },
                 nullptr};
        c.run = [scale, input_scale, ks, vs](const vt::Queue& q, const Tensors& in, const Tensors& out) {
          vt::PagedAttentionQuantFp8(q, out[0], out[1], in[0], in[1], in[2], in[3], in[4], in[5], scale, input_scale,
                                     ks, vs);
        };
        c.definition = [scale, input_scale, ks, vs](const vt::Queue& q, const Tensors& in, const Tensors& out) {
          vt::PagedAttention(q, out[0], in[0], in[1], in[2], in[3], in[4], in[5], scale, ks, vs);
          vt::QuantFp8Static(q, out[1], out[0], input_scale);
        };
        cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}

}  // namespace vt_table
