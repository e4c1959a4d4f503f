// The decode kernel whose scores are BF16 dot products (attend_rows_bf16, the avx512 set on
// levels with AVX-512 BF16 and VBMI, attention_dot_bf16.h): its state against the f32 kernel
// of the same set over the same rows widened to f32, its NaN codes, and which decodes
// PagedAttention sends to it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "elementwise_test_util.h"
#include "vt/cpu/attention_kernels.h"
#include "vt/vt.h"

namespace {

namespace at = vt::cpu::attention;
using vt::CpuIsa;
using vt::DType;

// Whether this processor should have the kernel: the level and VBMI (the test's own check,
// so that a DotBf16Fits that wrongly said no cannot turn the tests below into skips).
bool ProcessorHasDotBf16() {
#if defined(__x86_64__)
  return vt::DetectCpuIsa() >= CpuIsa::kAvx512Bf16 && vt::DetectCpuIsa() <= CpuIsa::kAmx &&
         __builtin_cpu_supports("avx512vbmi");
#else
  return false;
#endif
}

const at::KernelSet* DotSet(int64_t D, DType cache) {
  if (!ProcessorHasDotBf16()) return nullptr;
  const at::KernelSet* ks = at::ForIsa(CpuIsa::kAvx512Bf16, D);
  EXPECT_TRUE(at::DotBf16Fits(ks, CpuIsa::kAvx512Bf16, DType::kBF16, cache, D)) << "D " << D;
  return ks;
}

struct Rows {
  std::vector<uint8_t> k, v;  // valid rows of `stride` elements of the cache dtype
};

// valid rows of two KV heads (stride 2·D); F8E4M3: codes of every sign, subnormals and
// zeros, no NaN (keys below 16 in magnitude); BF16: normal values.
Rows RandomRows(std::mt19937& rng, DType cache, int64_t valid, int64_t D) {
  const int64_t n = valid * 2 * D;
  Rows r;
  if (cache == DType::kF8E4M3) {
    r.k.resize(static_cast<size_t>(n));
    r.v.resize(r.k.size());
    for (size_t i = 0; i < r.k.size(); ++i) {
      r.k[i] = static_cast<uint8_t>(rng() % 0x60) | static_cast<uint8_t>(rng() % 2 ? 0x80 : 0);
      r.v[i] = static_cast<uint8_t>(rng() % 0x7F) | static_cast<uint8_t>(rng() % 2 ? 0x80 : 0);
    }
    return r;
  }
  std::normal_distribution<float> nd(0.0f, 1.0f);
  r.k.resize(static_cast<size_t>(n * 2));
  r.v.resize(r.k.size());
  auto* k = reinterpret_cast<uint16_t*>(r.k.data());
  auto* v = reinterpret_cast<uint16_t*>(r.v.data());
  for (int64_t i = 0; i < n; ++i) {
    k[i] = vt::FloatToBf16(nd(rng));
    v[i] = vt::FloatToBf16(nd(rng));
  }
  return r;
}

struct State {
  std::vector<float> acc, m, l;
  State(int64_t heads, int64_t D)
      : acc(static_cast<size_t>(heads * D), 0.0f), m(static_cast<size_t>(heads), -INFINITY),
        l(static_cast<size_t>(heads), 0.0f) {}
};

// The dot kernel over the rows (twice: a second block's call with a running state, a
// prefetch span over the rows given) and the f32 kernel of the same set over the rows
// widened by cache_to_f32, with the query as f32 times the scale.
void RunBoth(const at::KernelSet* ks, DType cache, const Rows& r, const std::vector<uint16_t>& q, int64_t heads,
             int64_t valid, int64_t D, float scale, float k_scale, float v_scale, State& dot, State& f32) {
  const int64_t stride = 2 * D;
  const size_t csize = vt::DTypeSize(cache);
  std::vector<float> qf(q.size());
  for (size_t i = 0; i < q.size(); ++i) qf[i] = vt::Bf16ToFloat(q[i]) * scale;
  std::vector<float> kf(static_cast<size_t>(valid * D)), vf(kf.size());
  for (int64_t j = 0; j < valid; ++j) {
    ks->cache_to_f32(&kf[j * D], &r.k[j * stride * csize], cache, D, k_scale);
    ks->cache_to_f32(&vf[j * D], &r.v[j * stride * csize], cache, D, v_scale);
  }
  const at::PrefetchSpan span{reinterpret_cast<const char*>(r.k.data()), reinterpret_cast<const char*>(r.v.data()),
                              static_cast<int64_t>(r.k.size() / 64)};
  for (int rep = 0; rep < 2; ++rep) {
    ks->attend_rows_bf16(q.data(), scale, heads, r.k.data(), r.v.data(), stride, cache, k_scale, v_scale, valid, D,
                         dot.acc.data(), dot.m.data(), dot.l.data(), rep == 0 ? &span : nullptr);
    ks->attend_rows(qf.data(), heads, kf.data(), vf.data(), D, DType::kF32, 1.0f, 1.0f, valid, D, f32.acc.data(),
                    f32.m.data(), f32.l.data(), nullptr);
  }
  ks->acc_to_natural(dot.acc.data(), heads, D, cache);
}

std::vector<uint16_t> RandomQuery(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> q(static_cast<size_t>(n));
  for (uint16_t& x : q) x = vt::FloatToBf16(nd(rng) * 0.5f);
  return q;
}

// Within f32 rounding (a few ulps of the state) of the f32 kernel over the same rows, for
// head sizes 64, 128 and 256, 1 to 6 query heads (the head tiles of 4 and their tails), 13
// keys (the 4-key steps and a tail) and 70 (two passes), both cache dtypes and scales of
// both sizes. A query in the wrong order, a dropped scale or an accumulator left in the
// kernel's order is off by far more.
TEST(AttentionDotBf16, StateEqualsTheF32KernelOverTheWidenedRows) {
  if (!ProcessorHasDotBf16()) GTEST_SKIP() << "this processor lacks AVX-512 BF16 or VBMI";
  std::mt19937 rng(5);
  int checked = 0;
  for (DType cache : {DType::kBF16, DType::kF8E4M3})
    for (int64_t D : {64, 128, 256})
      for (int64_t valid : {13, 70})
        for (int64_t heads : {1, 2, 3, 4, 6}) {
          const at::KernelSet* ks = DotSet(D, cache);
          ASSERT_NE(ks, nullptr);
          const Rows r = RandomRows(rng, cache, valid, D);
          const std::vector<uint16_t> q = RandomQuery(rng, heads * D);
          const bool fp8 = cache == DType::kF8E4M3;
          const float scale = 1.0f / std::sqrt(static_cast<float>(D));
          const float k_scale = fp8 ? (heads % 2 ? 0.0371f : 3.7f) : 1.0f, v_scale = fp8 ? 0.02f : 1.0f;
          State dot(heads, D), f32(heads, D);
          RunBoth(ks, cache, r, q, heads, valid, D, scale, k_scale, v_scale, dot, f32);
          const std::string where = vt::StrCat(vt::DTypeName(cache), " D ", D, " keys ", valid, " heads ", heads);
          for (int64_t h = 0; h < heads; ++h) {
            ASSERT_TRUE(std::isfinite(dot.l[h]) && dot.l[h] > 0.0f) << where;
            EXPECT_NEAR(dot.m[h], f32.m[h], 1e-5f * (1.0f + std::fabs(f32.m[h]))) << where << " head " << h;
            EXPECT_NEAR(dot.l[h], f32.l[h], 1e-5f * f32.l[h]) << where << " head " << h;
            float amax = 0.0f;
            for (int64_t i = 0; i < D; ++i) amax = std::max(amax, std::fabs(f32.acc[h * D + i]));
            for (int64_t i = 0; i < D; ++i)
              ASSERT_NEAR(dot.acc[h * D + i], f32.acc[h * D + i], 2e-5f * amax) << where << " head " << h << " " << i;
          }
          ++checked;
        }
  EXPECT_EQ(checked, 2 * 3 * 2 * 5);
}

// A NaN code (KvCacheWrite keeps NaN) reads as NaN through the table: a key's NaN makes its
// score NaN and so that head's l and every accumulator NaN; a value's NaN makes the
// accumulators of its element NaN. The same positions as the f32 kernel over the widened
// rows, whose NaN the widening keeps.
TEST(AttentionDotBf16, NaNCodesGiveNaNWhereTheWidenedRowsDo) {
  if (!ProcessorHasDotBf16()) GTEST_SKIP() << "this processor lacks AVX-512 BF16 or VBMI";
  constexpr int64_t D = 128, valid = 13, heads = 2;
  std::mt19937 rng(9);
  const at::KernelSet* ks = DotSet(D, DType::kF8E4M3);
  ASSERT_NE(ks, nullptr);
  int checked = 0;
  for (bool in_value : {false, true})
    for (int64_t pos : {0, 37, 127}) {
      Rows r = RandomRows(rng, DType::kF8E4M3, valid, D);
      (in_value ? r.v : r.k)[static_cast<size_t>(5 * 2 * D + pos)] = pos % 2 ? 0xFF : 0x7F;
      const std::vector<uint16_t> q = RandomQuery(rng, heads * D);
      State dot(heads, D), f32(heads, D);
      RunBoth(ks, DType::kF8E4M3, r, q, heads, valid, D, 0.088f, 0.0371f, 0.02f, dot, f32);
      const std::string where = vt::StrCat(in_value ? "value" : "key", " code ", pos);
      int nans = 0;
      for (int64_t h = 0; h < heads; ++h) {
        EXPECT_EQ(std::isnan(dot.l[h]), std::isnan(f32.l[h])) << where << " head " << h;
        for (int64_t i = 0; i < D; ++i) {
          const size_t x = static_cast<size_t>(h * D + i);
          EXPECT_EQ(std::isnan(dot.acc[x]), std::isnan(f32.acc[x])) << where << " head " << h << " " << i;
          nans += std::isnan(dot.acc[x]) ? 1 : 0;
        }
      }
      EXPECT_EQ(nans, in_value ? heads : heads * D) << where;
      ++checked;
    }
  EXPECT_EQ(checked, 6);
}

// PagedAttention sends a decode step's rows to the dot kernel exactly where DotBf16Fits says
// (a BF16 query, a BF16 or F8E4M3 cache, the levels with AVX-512 BF16 and VBMI), counted per
// call; an F32 query (over an F8E4M3 cache) and the other levels take attend_rows. The results of the two paths
// agree within the op's bound (the op tables compare each level with the scalar kernels).
TEST(AttentionDotBf16, PagedAttentionDecodesThroughItWhereItFits) {
  constexpr int64_t Hq = 4, Hk = 2, D = 128, bs = 16, num_blocks = 10, max_blocks = 5;
  std::mt19937 rng(3);
  const std::vector<int32_t> lens = {40, 70}, starts = {0, 1, 2}, table = {7, 2, 9, 0, 0, 1, 4, 6, 3, 8};
  const vt::Tensor tlens = vt::Tensor::FromHost(lens.data(), {2}, DType::kI32);
  const vt::Tensor tstarts = vt::Tensor::FromHost(starts.data(), {3}, DType::kI32);
  const vt::Tensor ttable = vt::Tensor::FromHost(table.data(), {2, max_blocks}, DType::kI32);
  int dot_levels = 0;
  for (DType cache : {DType::kBF16, DType::kF8E4M3}) {
    const Rows r = RandomRows(rng, cache, num_blocks * bs, D);  // 2 KV heads per slot: Hk = 2
    const vt::Tensor kc = vt::Tensor::FromHost(r.k.data(), {num_blocks, bs, Hk, D}, cache);
    const vt::Tensor vc = vt::Tensor::FromHost(r.v.data(), {num_blocks, bs, Hk, D}, cache);
    const float kv_scale = cache == DType::kF8E4M3 ? 0.02f : 1.0f;
    for (DType qtype : {DType::kBF16, DType::kF32}) {
      if (cache == DType::kBF16 && qtype == DType::kF32) continue;  // a BF16 cache takes BF16 queries only
      std::vector<float> qv(static_cast<size_t>(2 * Hq * D));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& x : qv) x = nd(rng);
      const vt::Tensor query = vt_test::MakeTensor(qv, {2, Hq * D}, qtype);
      const vt::Tensor out = vt::Tensor::Empty({2, Hq * D}, qtype);
      for (CpuIsa isa : vt_test::IsaLevels()) {
        if (isa == CpuIsa::kScalar) continue;
        SCOPED_TRACE(vt::StrCat(vt::CpuIsaName(isa), " cache ", vt::DTypeName(cache), " query ", vt::DTypeName(qtype)));
        vt::PagedAttention(vt_test::QueueFor(isa), out, query, kc, vc, ttable, tlens, tstarts, 0.088f, kv_scale,
                           kv_scale);
        const at::LastAttention last = at::LastAttentionOnThisThread();
        EXPECT_EQ(last.rows_calls, 8 * Hk);
        const bool want = ProcessorHasDotBf16() && isa >= CpuIsa::kAvx512Bf16 && isa <= CpuIsa::kAmx &&
                          qtype == DType::kBF16;
        EXPECT_EQ(last.rows_bf16_calls, want ? last.rows_calls : 0);
        dot_levels += want ? 1 : 0;
      }
    }
  }
  if (ProcessorHasDotBf16()) {
    EXPECT_GT(dot_levels, 0);
  }
}

}  // namespace
