// The FP8 KV cache on the CPU (vt/ops/attention.h): KvCacheWrite's bytes against the
// definition's reference (kv_fp8_ref.h: the f32 quotient, the enumerated e4m3 grid, ties to
// even, NaN kept, saturation), QkNormRopeCacheWrite's F8E4M3 bytes as the quantized BF16/F32
// run of the same op, PagedAttention against a float64 attention over the dequantized cache
// (every ISA level, decode and prefill, scales far from 1 so that a kernel ignoring a scale
// fails), and the argument errors. Cross-backend byte identity: the op table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "elementwise_test_util.h"
#include "kv_fp8_ref.h"
#include "vt/cpu/attention_kernels.h"
#include "vt/vt.h"

namespace {

using vt::DType;
using vt::Tensor;

// Writes keys and values (rows of `width`) into fresh F8E4M3 caches, token t to slot t.
std::pair<std::vector<uint8_t>, std::vector<uint8_t>> WriteFp8(const vt::Queue& q, const Tensor& k, const Tensor& v,
                                                               float ks, float vs) {
  const int64_t T = k.dim(0), width = k.dim(1);
  Tensor kc = Tensor::Empty({T, 1, 1, width}, DType::kF8E4M3), vc = Tensor::Empty({T, 1, 1, width}, DType::kF8E4M3);
  std::vector<int64_t> slots(static_cast<size_t>(T));
  std::iota(slots.begin(), slots.end(), 0);
  vt::KvCacheWrite(q, k, v, kc, vc, Tensor::FromHost(slots.data(), {T}, DType::kI64), ks, vs);
  return {vt_test::BytesOf(kc), vt_test::BytesOf(vc)};
}

TEST(KvCacheFp8, QuantizerBytesMatchTheDefinition) {
  // Ties and codes at power-of-two scales (x / s exact) and at others (x / s rounded first),
  // random values, every input dtype; the value cache gets another scale than the keys.
  const float scales[] = {1.0f, 0.25f, 0.0371f, 3.7f, 1.0f / 448.0f};
  int checked = 0;
  for (float ks : scales) {
    std::vector<float> x = vt_kvfp8::ProbeInputs(ks);
    std::mt19937 rng(static_cast<uint32_t>(ks * 1000));
    std::normal_distribution<float> nd(0.0f, 100.0f * ks);
    for (int i = 0; i < 500; ++i) x.push_back(nd(rng));
    while (x.size() % 16 != 0) x.push_back(0.5f * ks);
    const int64_t width = 16, T = static_cast<int64_t>(x.size()) / width;
    const float vs = ks * 1.37f;
    for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
      const Tensor k = vt_test::MakeTensor(x, {T, width}, d);
      std::vector<float> xv(x.rbegin(), x.rend());
      const Tensor v = vt_test::MakeTensor(xv, {T, width}, d);
      // Every ISA level: the vector levels quantize with their kernel set's quantizer.
      for (vt::CpuIsa isa : vt_test::IsaLevels())
      for (int threads : {1, 3}) {
        const auto [kb, vb] = WriteFp8(vt_test::QueueFor(isa, threads), k, v, ks, vs);
        int bad = 0;
        for (int64_t i = 0; i < T * width && bad < 5; ++i) {
          const uint8_t wk = vt_kvfp8::QuantRef(vt_test::ValueAt(k, i), ks);
          const uint8_t wv = vt_kvfp8::QuantRef(vt_test::ValueAt(v, i), vs);
          if (kb[i] != wk || vb[i] != wv)
            ADD_FAILURE() << vt::CpuIsaName(isa) << " " << vt::DTypeName(d) << " scale " << ks << " element " << i << ": key "
                          << vt_test::ValueAt(k, i) << " -> " << int(kb[i]) << " want " << int(wk) << ", value "
                          << vt_test::ValueAt(v, i) << " -> " << int(vb[i]) << " want " << int(wv) << (++bad, "");
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

TEST(KvCacheFp8, DivisionIsNotReciprocalMultiply) {
  // vLLM's reshape_and_cache divides; QuantFp8Static multiplies by 1/s. Inputs exist where
  // the two give different bytes, so a kernel that multiplies fails the test above.
  int differ = 0;
  for (float s : {0.0371f, 3.7f, 0.013f}) {
    const std::vector<float> x = vt_kvfp8::ProbeInputs(s);
    const float inv = 1.0f / s;
    for (float v : x) differ += vt_kvfp8::QuantRef(v, s) != vt_test::QuantRef(v, inv);
  }
  EXPECT_GT(differ, 0);
}

TEST(KvCacheFp8, QkNormRopeCacheWriteQuantizesTheRotatedKeys) {
  // The F8E4M3 bytes equal the same op's F32/BF16 cache run, quantized by the reference: the
  // key as rounded to the keys' dtype (the definition's k'), the value as given.
  const int64_t T = 5, Hq = 4, Hk = 2, D = 64, blocks = 3, bs = 4, max_pos = 64;
  std::vector<float> cs(static_cast<size_t>(max_pos * D));
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      cs[p * D + i] = static_cast<float>(std::cos(p * std::pow(1e4, -2.0 * i / D)));
      cs[p * D + D / 2 + i] = static_cast<float>(std::sin(p * std::pow(1e4, -2.0 * i / D)));
    }
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  auto randv = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  const std::vector<int64_t> pos = {0, 5, 63, 17, 17}, slots = {3, -1, 0, 11, 7};
  const float ks = 0.0213f, vs = 0.3f;
  for (DType d : {DType::kF32, DType::kBF16}) {
    const Tensor query = vt_test::MakeTensor(randv(T * Hq * D), {T, Hq * D}, d);
    const Tensor key = vt_test::MakeTensor(randv(T * Hk * D), {T, Hk * D}, d);
    const Tensor value = vt_test::MakeTensor(randv(T * Hk * D), {T, Hk * D}, d);
    const Tensor qn = vt_test::MakeTensor(randv(D), {D}, DType::kF32), kn = vt_test::MakeTensor(randv(D), {D}, d);
    const Tensor positions = Tensor::FromHost(pos.data(), {T}, DType::kI64);
    const Tensor cache = Tensor::FromHost(cs.data(), {max_pos, D}, DType::kF32);
    const Tensor sm = Tensor::FromHost(slots.data(), {T}, DType::kI64);
    vt::Queue q = vt::Queue::Cpu(2);
    Tensor qo = Tensor::Empty({T, Hq * D}, d), qo8 = Tensor::Empty({T, Hq * D}, d);
    Tensor kc = Tensor::Empty({blocks, bs, Hk, D}, d), vc = Tensor::Empty({blocks, bs, Hk, D}, d);
    Tensor kc8 = Tensor::Empty({blocks, bs, Hk, D}, DType::kF8E4M3), vc8 = Tensor::Empty({blocks, bs, Hk, D}, DType::kF8E4M3);
    vt::QkNormRopeCacheWrite(q, qo, query, key, value, &qn, &kn, 1e-6f, positions, cache, kc, vc, sm);
    vt::QkNormRopeCacheWrite(q, qo8, query, key, value, &qn, &kn, 1e-6f, positions, cache, kc8, vc8, sm, ks, vs);
    EXPECT_EQ(vt_test::BytesOf(qo), vt_test::BytesOf(qo8));
    const std::vector<uint8_t> k8 = vt_test::BytesOf(kc8), v8 = vt_test::BytesOf(vc8);
    for (int64_t t = 0; t < T; ++t) {
      if (slots[t] < 0) continue;
      for (int64_t i = 0; i < Hk * D; ++i) {
        const int64_t e = slots[t] * Hk * D + i;
        ASSERT_EQ(k8[e], vt_kvfp8::QuantRef(vt_test::ValueAt(kc, e), ks)) << vt::DTypeName(d) << " key " << e;
        ASSERT_EQ(v8[e], vt_kvfp8::QuantRef(vt_test::ValueAt(value, t * Hk * D + i), vs)) << "value " << e;
      }
    }
  }
}

struct Seq {
  int64_t ctx, n;  // context after the step, rows in this step
};

// Writes every sequence's context through KvCacheWrite into F8E4M3 caches (blocks handed
// out shuffled), attends its last n positions, and returns max |got - ref| / bound where
// ref is a float64 attention over the cache's dequantized bytes.
double RunAttention(const vt::Queue& q, DType d, int64_t Hq, int64_t Hk, int64_t D, int64_t bs,
                    const std::vector<Seq>& seqs, float ks, float vs, uint32_t seed, double bound) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t S = static_cast<int64_t>(seqs.size());
  int64_t max_blocks = 1, total = 0;
  for (const Seq& s : seqs) {
    max_blocks = std::max(max_blocks, (s.ctx + bs - 1) / bs);
    total += (s.ctx + bs - 1) / bs;
  }
  const int64_t num_blocks = total + 2;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  Tensor kc = Tensor::Empty({num_blocks, bs, Hk, D}, DType::kF8E4M3);
  Tensor vc = Tensor::Empty({num_blocks, bs, Hk, D}, DType::kF8E4M3);
  std::vector<int32_t> tables(static_cast<size_t>(S * max_blocks), 0), lens, qsl = {0};
  std::vector<float> query;
  size_t next = 0;
  for (int64_t s = 0; s < S; ++s) {
    std::vector<float> k(static_cast<size_t>(seqs[s].ctx * Hk * D)), v(k.size());
    for (float& x : k) x = nd(rng) * 2.0f;  // keys / ks reach the hundreds
    for (float& x : v) x = nd(rng);
    std::vector<int64_t> slots;
    for (int64_t b = 0; b < (seqs[s].ctx + bs - 1) / bs; ++b) tables[s * max_blocks + b] = ids[next++];
    for (int64_t p = 0; p < seqs[s].ctx; ++p) slots.push_back(tables[s * max_blocks + p / bs] * bs + p % bs);
    vt::KvCacheWrite(q, vt_test::MakeTensor(k, {seqs[s].ctx, Hk * D}, d), vt_test::MakeTensor(v, {seqs[s].ctx, Hk * D}, d),
                     kc, vc, Tensor::FromHost(slots.data(), {seqs[s].ctx}, DType::kI64), ks, vs);
    for (int64_t i = 0; i < seqs[s].n * Hq * D; ++i) query.push_back(nd(rng));
    lens.push_back(static_cast<int32_t>(seqs[s].ctx));
    qsl.push_back(qsl.back() + static_cast<int32_t>(seqs[s].n));
  }
  const int64_t T = qsl.back();
  const Tensor qt = vt_test::MakeTensor(query, {T, Hq * D}, d);
  Tensor out = Tensor::Empty({T, Hq * D}, d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  vt::PagedAttention(q, out, qt, kc, vc, Tensor::FromHost(tables.data(), {S, max_blocks}, DType::kI32),
                     Tensor::FromHost(lens.data(), {S}, DType::kI32), Tensor::FromHost(qsl.data(), {S + 1}, DType::kI32),
                     scale, ks, vs);
  const std::vector<uint8_t> kb = vt_test::BytesOf(kc), vb = vt_test::BytesOf(vc);
  double worst = 0;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t r = 0; r < seqs[s].n; ++r) {
      const int64_t t = qsl[s] + r, pos = seqs[s].ctx - seqs[s].n + r;
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kh = h / (Hq / Hk);
        auto at = [&](int64_t j, int64_t i) {
          return ((tables[s * max_blocks + j / bs] * bs + j % bs) * Hk + kh) * D + i;
        };
        std::vector<double> sc(static_cast<size_t>(pos + 1));
        for (int64_t j = 0; j <= pos; ++j) {
          double dot = 0;
          for (int64_t i = 0; i < D; ++i) dot += vt_test::ValueAt(qt, (t * Hq + h) * D + i) * vt_kvfp8::DequantRef(kb[at(j, i)], ks);
          sc[j] = dot * scale;
        }
        const double m = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (double& x : sc) z += (x = std::exp(x - m));
        for (int64_t i = 0; i < D; ++i) {
          double ref = 0;
          for (int64_t j = 0; j <= pos; ++j) ref += sc[j] / z * vt_kvfp8::DequantRef(vb[at(j, i)], vs);
          worst = std::max(worst, std::fabs(vt_test::ValueAt(out, (t * Hq + h) * D + i) - ref) / bound);
        }
      }
    }
  return worst;
}

TEST(KvCacheFp8, PagedAttentionMatchesFloat64OfTheDequantizedCache) {
  // F32 queries: f32 arithmetic only (2e-6, the bound of the BF16-cache tests). BF16: the
  // output rounded once (half an ulp at |out| <= 4, plus the f32 arithmetic: 8e-3). The
  // scales (k 1/64, v 1/128) are far from 1: a kernel that ignored one would be off by 64x.
  for (vt::CpuIsa isa : vt_test::IsaLevels())
    for (int threads : {1, 3}) {
      const vt::Queue q = vt_test::QueueFor(isa, threads);
      for (DType d : {DType::kF32, DType::kBF16}) {
        const double bound = d == DType::kF32 ? 2e-6 : 8e-3;
        const std::string where = std::string(vt::CpuIsaName(isa)) + " " + std::string(vt::DTypeName(d));
        EXPECT_LT(RunAttention(q, d, 4, 2, 16, 8, {{37, 37}, {25, 5}}, 1.0f / 64, 1.0f / 128, 1, bound), 1.0) << where;
        EXPECT_LT(RunAttention(q, d, 8, 1, 32, 16, {{50, 1}, {1, 1}, {17, 1}}, 0.02f, 0.0077f, 2, bound), 1.0) << where;
        EXPECT_LT(RunAttention(q, d, 4, 2, 128, 80, {{200, 200}, {90, 3}}, 1.0f / 64, 1.0f / 128, 3, bound), 1.0)
            << where;
        EXPECT_LT(RunAttention(q, d, 3, 3, 6, 4, {{9, 1}, {5, 5}}, 0.5f, 3.0f, 4, bound), 1.0) << where;
      }
    }
}

// Long prompts over an F8E4M3 cache, whole and as a later chunk over cached tokens, at GQA
// ratios 2 and 4: the vector levels run them through the prefill tile kernel (its widening
// count moves). F32 queries: the op table's absolute term (1e-5), since over hundreds of keys of
// these magnitudes the portable loops' f32 sums alone exceed 2e-6; BF16 as above.
TEST(KvCacheFp8, LongPrefillChunksThroughTheTileKernel) {
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    const vt::Queue q = vt_test::QueueFor(isa, 2);
    const bool vector = vt::cpu::attention::ForIsa(isa, 64) != nullptr;
    for (DType d : {DType::kF32, DType::kBF16}) {
      const double bound = d == DType::kF32 ? 1e-5 : 8e-3;
      const std::string where = std::string(vt::CpuIsaName(isa)) + " " + std::string(vt::DTypeName(d));
      const int64_t before = vt::cpu::attention::TileBlocksWidened();
      EXPECT_LT(RunAttention(q, d, 8, 4, 64, 16, {{400, 130}, {150, 150}, {40, 1}}, 1.0f / 64, 1.0f / 128, 5, bound),
                1.0)
          << where;
      EXPECT_LT(RunAttention(q, d, 16, 4, 64, 16, {{300, 90}}, 0.02f, 0.0077f, 6, bound), 1.0) << where;
      EXPECT_EQ(vt::cpu::attention::TileBlocksWidened() > before, vector) << where;
    }
  }
}

TEST(KvCacheFp8, BadArgumentsAreErrors) {
  const vt::Queue q = vt::Queue::Cpu(1);
  const Tensor k = vt_test::MakeTensor(std::vector<float>(8, 1.0f), {1, 8}, DType::kBF16);
  const Tensor slots = Tensor::FromHost(std::vector<int64_t>{0}.data(), {1}, DType::kI64);
  Tensor c8 = Tensor::Empty({1, 1, 1, 8}, DType::kF8E4M3), c16 = Tensor::Empty({1, 1, 1, 8}, DType::kBF16);
  vt_test::ExpectErrorWith([&] { vt::KvCacheWrite(q, k, k, c8, c8, slots, 0.0f, 1.0f); }, {"KvCacheWrite", "k_scale"});
  vt_test::ExpectErrorWith([&] { vt::KvCacheWrite(q, k, k, c8, c8, slots, 1.0f, NAN); }, {"KvCacheWrite", "v_scale"});
  vt_test::ExpectErrorWith([&] { vt::KvCacheWrite(q, k, k, c8, c8, slots, -2.0f, 1.0f); }, {"k_scale"});
  vt_test::ExpectErrorWith([&] { vt::KvCacheWrite(q, k, k, c16, c16, slots, 2.0f, 1.0f); },
                           {"KvCacheWrite", "F8E4M3 cache only"});
  const Tensor k32 = vt_test::MakeTensor(std::vector<float>(8, 1.0f), {1, 8}, DType::kF32);
  vt_test::ExpectErrorWith([&] { vt::KvCacheWrite(q, k, k32, c8, c8, slots); }, {"KvCacheWrite", "value"});
  // PagedAttention: out must have the query's dtype; the caches one dtype.
  const std::vector<int32_t> table = {0}, lens = {1}, qsl = {0, 1};
  const Tensor bt = Tensor::FromHost(table.data(), {1, 1}, DType::kI32);
  const Tensor sl = Tensor::FromHost(lens.data(), {1}, DType::kI32), ql = Tensor::FromHost(qsl.data(), {2}, DType::kI32);
  Tensor out32 = Tensor::Empty({1, 8}, DType::kF32);
  vt_test::ExpectErrorWith([&] { vt::PagedAttention(q, out32, k, c8, c8, bt, sl, ql, 0.5f); }, {"PagedAttention", "out"});
  vt_test::ExpectErrorWith([&] { vt::PagedAttention(q, out32, k32, c8, c16, bt, sl, ql, 0.5f); },
                           {"PagedAttention", "value_cache"});
  vt_test::ExpectErrorWith([&] { vt::PagedAttention(q, out32, k32, c8, c8, bt, sl, ql, 0.5f, INFINITY, 1.0f); },
                           {"PagedAttention", "k_scale"});
}

}  // namespace

// The vector sets' widening of an F8E4M3 cache against KvCacheDequantizeFp8 (all codes,
// NaN bits on NEON) is Fp8DecodeNeon.CacheToF32AllCodesBitIdentical (fp8_decode_neon_test.cpp,
// which the aarch64 CI stage runs too).

// n random key and value codes, none NaN: keys of magnitude below 16, values of any.
std::pair<std::vector<uint8_t>, std::vector<uint8_t>> RandomCacheCodes(std::mt19937& rng, int64_t n) {
  std::vector<uint8_t> k(static_cast<size_t>(n)), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<uint8_t>(rng() % 0x60) | static_cast<uint8_t>(rng() % 2 ? 0x80 : 0);
    v[i] = static_cast<uint8_t>(rng() % 0x7F) | static_cast<uint8_t>(rng() % 2 ? 0x80 : 0);
  }
  return {k, v};
}

// The attention kernel sets of this processor's vector levels for head size D.
std::vector<const vt::cpu::attention::KernelSet*> VectorKernelSets(int64_t D) {
  std::vector<const vt::cpu::attention::KernelSet*> sets;
  for (vt::CpuIsa isa : vt::CpuIsaLevels()) {
    if (isa == vt::CpuIsa::kScalar || isa > vt::DetectCpuIsa()) continue;
    if (const vt::cpu::attention::KernelSet* ks = vt::cpu::attention::ForIsa(isa, D)) sets.push_back(ks);
  }
  return sets;
}

// A decode step reads the F8E4M3 cache in place (attend_rows: its own decode of the codes,
// as value·2^-8, with 2^8·k_scale folded into the queries and 2^8·v_scale into the softmax
// weights): within f32 rounding (a few ulps of the state) of attend_rows over the same rows
// widened first by cache_to_f32 (the definition's floats), at ordinary scales and at a key
// scale past the range of the 2^8-scaled decode (2^121: attend_rows then widens the rows
// itself, bit for bit). Codes of every sign, subnormals and zeros; 13 keys, twice (a second
// block's call with a running state), for 1 to 6 query heads (each kernel's keys-per-step
// loop, 4, 2 or 1 keys at a time, and its tail). A decode that misread a code or dropped a
// scale is off by far more.
TEST(KvCacheFp8, AttendRowsInPlaceEqualsTheWidenedRows) {
  constexpr int64_t D = 128, valid = 13, stride = 2 * D;  // two KV heads per slot
  std::mt19937 rng(11);
  const auto [k, v] = RandomCacheCodes(rng, valid * stride);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int sets = 0;
  for (const vt::cpu::attention::KernelSet* ks : VectorKernelSets(D)) {
    ++sets;
    for (auto [k_scale, v_scale] : {std::pair{0.0371f, 1.0f / 128}, std::pair{3.7f, 0.02f}, std::pair{0x1p121f, 0.5f}})
    for (int64_t heads : {1, 2, 3, 4, 6}) {
      std::vector<float> q(static_cast<size_t>(heads * D));
      for (float& x : q) x = nd(rng) * 0.3f / (k_scale > 1e30f ? k_scale : 1.0f);
      std::vector<float> kf(static_cast<size_t>(valid * D)), vf(kf.size());
      for (int64_t j = 0; j < valid; ++j) {
        ks->cache_to_f32(&kf[j * D], &k[j * stride], DType::kF8E4M3, D, k_scale);
        ks->cache_to_f32(&vf[j * D], &v[j * stride], DType::kF8E4M3, D, v_scale);
      }
      std::vector<float> acc8(static_cast<size_t>(heads * D), 0.0f), acc32 = acc8;
      std::vector<float> m8(heads, -INFINITY), m32 = m8, l8(heads, 0.0f), l32 = l8;
      // Twice over the keys (a second block's call with a running state).
      for (int rep = 0; rep < 2; ++rep) {
        ks->attend_rows(q.data(), heads, k.data(), v.data(), stride, DType::kF8E4M3, k_scale, v_scale, valid, D,
                        acc8.data(), m8.data(), l8.data(), nullptr);
        ks->attend_rows(q.data(), heads, kf.data(), vf.data(), D, DType::kF32, 1.0f, 1.0f, valid, D, acc32.data(),
                        m32.data(), l32.data(), nullptr);
      }
      const std::string where =
          std::string(ks->name) + " k_scale " + std::to_string(k_scale) + " heads " + std::to_string(heads);
      const bool exact = k_scale > 1e30f;
      for (int64_t h = 0; h < heads; ++h) {
        ASSERT_TRUE(std::isfinite(l8[h]) && l8[h] > 0.0f) << where;
        EXPECT_NEAR(m8[h], m32[h], exact ? 0.0f : 1e-5f * (1.0f + std::fabs(m32[h]))) << where << " head " << h;
        EXPECT_NEAR(l8[h], l32[h], exact ? 0.0f : 1e-5f * l32[h]) << where << " head " << h;
        float amax = 0.0f;
        for (int64_t i = 0; i < D; ++i) amax = std::max(amax, std::fabs(acc32[h * D + i]));
        for (int64_t i = 0; i < D; ++i)
          ASSERT_NEAR(acc8[h * D + i], acc32[h * D + i], exact ? 0.0f : 1e-5f * amax) << where << " head " << h << " " << i;
      }
    }
  }
  if (vt::DetectCpuIsa() != vt::CpuIsa::kScalar) {
    EXPECT_GT(sets, 0);
  }
}

// A NaN code in the cache (KvCacheWrite keeps NaN) reads as NaN in place as in the widened
// rows: a key's NaN makes the whole state of every head that scores it NaN, a value's NaN
// that column of every head's accumulators. The in-place kernel skips the decode's NaN test on rows
// without a NaN code, so this holds only if it finds the NaN rows: one code among 13 rows,
// in each position of a row's 16-code steps, for 1 to 6 heads.
TEST(KvCacheFp8, AttendRowsInPlaceKeepsNaNCodes) {
  constexpr int64_t D = 128, valid = 13, stride = 2 * D;
  std::mt19937 rng(12);
  const auto [k, v] = RandomCacheCodes(rng, valid * stride);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int checked = 0;
  for (const vt::cpu::attention::KernelSet* ks : VectorKernelSets(D)) {
    for (int in_value = 0; in_value < 2; ++in_value)
      for (int64_t pos : {0, 7, 8, 15, 77, 127})
        for (int64_t heads : {1, 2, 3, 4, 6}) {
          std::vector<uint8_t> kn = k, vn = v;
          const int64_t row = 9, at = row * stride + pos;
          (in_value ? vn : kn)[static_cast<size_t>(at)] = (pos % 2) ? 0xFF : 0x7F;  // NaN of either sign
          std::vector<float> q(static_cast<size_t>(heads * D));
          for (float& x : q) x = nd(rng) * 0.3f;
          std::vector<float> kf(static_cast<size_t>(valid * D)), vf(kf.size());
          for (int64_t j = 0; j < valid; ++j) {
            ks->cache_to_f32(&kf[j * D], &kn[j * stride], DType::kF8E4M3, D, 0.0371f);
            ks->cache_to_f32(&vf[j * D], &vn[j * stride], DType::kF8E4M3, D, 0.02f);
          }
          ASSERT_TRUE(std::isnan((in_value ? vf : kf)[static_cast<size_t>(row * D + pos)]));
          std::vector<float> acc8(static_cast<size_t>(heads * D), 0.0f), acc32 = acc8;
          std::vector<float> m8(heads, -INFINITY), m32 = m8, l8(heads, 0.0f), l32 = l8;
          ks->attend_rows(q.data(), heads, kn.data(), vn.data(), stride, DType::kF8E4M3, 0.0371f, 0.02f, valid, D,
                          acc8.data(), m8.data(), l8.data(), nullptr);
          ks->attend_rows(q.data(), heads, kf.data(), vf.data(), D, DType::kF32, 1.0f, 1.0f, valid, D, acc32.data(),
                          m32.data(), l32.data(), nullptr);
          const std::string where = std::string(ks->name) + (in_value ? " value" : " key") + " code " +
                                    std::to_string(pos) + " heads " + std::to_string(heads);
          for (int64_t h = 0; h < heads; ++h) {
            // The definition's floats give NaN here; the in-place state must too.
            EXPECT_EQ(std::isnan(l8[h]), std::isnan(l32[h])) << where << " head " << h;
            EXPECT_EQ(std::isnan(l32[h]), in_value == 0) << where << " head " << h;
            for (int64_t i = 0; i < D; ++i) {
              // A key's NaN reaches every element; a value's only its own column.
              const bool nan = in_value == 0 || i == pos;
              ASSERT_EQ(std::isnan(acc32[h * D + i]), nan) << where << " head " << h << " " << i;
              ASSERT_EQ(std::isnan(acc8[h * D + i]), nan) << where << " head " << h << " " << i;
            }
          }
          ++checked;
        }
  }
  if (vt::DetectCpuIsa() != vt::CpuIsa::kScalar) {
    EXPECT_GT(checked, 0);
  }
}
