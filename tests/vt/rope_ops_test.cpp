// RotaryEmbedding (neox style) against a double-precision rotation written from the
// formula, and its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "vt/vt.h"

namespace vt {
namespace {

// cache row p = [cos(p*f_i) | sin(p*f_i)] with f_i = 10000^(-2i/D).
std::vector<float> MakeCache(int64_t max_pos, int64_t D) {
  std::vector<float> c(max_pos * D);
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double a = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / D);
      c[p * D + i] = static_cast<float>(std::cos(a));
      c[p * D + D / 2 + i] = static_cast<float>(std::sin(a));
    }
  return c;
}

TEST(RotaryEmbeddingOp, RotatesHalvesOfEachHead) {
  Queue q = Queue::Cpu(2);
  const int64_t T = 3, D = 8, Hq = 2, Hk = 1, max_pos = 32;
  const std::vector<int64_t> pos = {0, 5, 31};
  std::vector<float> query(T * Hq * D), key(T * Hk * D);
  for (size_t i = 0; i < query.size(); ++i) query[i] = std::sin(0.7 * i) + 0.1f;
  for (size_t i = 0; i < key.size(); ++i) key[i] = std::cos(0.3 * i) - 0.2f;
  const std::vector<float> cache = MakeCache(max_pos, D);
  Tensor tq = Tensor::FromHost(query.data(), {T, Hq * D}, DType::kF32);
  Tensor tk = Tensor::FromHost(key.data(), {T, Hk * D}, DType::kF32);
  RotaryEmbedding(q, Tensor::FromHost(pos.data(), {T}, DType::kI64), tq, &tk,
                  Tensor::FromHost(cache.data(), {max_pos, D}, DType::kF32), D);
  std::vector<float> gq(query.size()), gk(key.size());
  tq.CopyToHost(gq.data());
  tk.CopyToHost(gk.data());
  auto check = [&](const std::vector<float>& in, const std::vector<float>& got, int64_t heads) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double a = static_cast<double>(pos[t]) * std::pow(10000.0, -2.0 * static_cast<double>(i) / D);
          const double x1 = in[(t * heads + h) * D + i], x2 = in[(t * heads + h) * D + D / 2 + i];
          EXPECT_NEAR(got[(t * heads + h) * D + i], x1 * std::cos(a) - x2 * std::sin(a), 1e-5);
          EXPECT_NEAR(got[(t * heads + h) * D + D / 2 + i], x2 * std::cos(a) + x1 * std::sin(a), 1e-5);
        }
  };
  check(query, gq, Hq);
  check(key, gk, Hk);
}

TEST(RotaryEmbeddingOp, Bf16RoundsOnce) {
  Queue q = Queue::Cpu(1);
  const int64_t D = 4;
  const std::vector<float> cache = MakeCache(4, D);
  const std::vector<int32_t> pos = {3};
  const std::vector<uint16_t> x = {FloatToBf16(1.5f), FloatToBf16(-0.75f), FloatToBf16(2.0f), FloatToBf16(0.125f)};
  Tensor t = Tensor::FromHost(x.data(), {1, D}, DType::kBF16);
  RotaryEmbedding(q, Tensor::FromHost(pos.data(), {1}, DType::kI32), t, nullptr,
                  Tensor::FromHost(cache.data(), {4, D}, DType::kF32), D);
  std::vector<uint16_t> got(D);
  t.CopyToHost(got.data());
  for (int i = 0; i < 2; ++i) {
    const float c = cache[3 * D + i], s = cache[3 * D + 2 + i];
    const float x1 = Bf16ToFloat(x[i]), x2 = Bf16ToFloat(x[2 + i]);
    EXPECT_EQ(got[i], FloatToBf16(x1 * c - x2 * s));
    EXPECT_EQ(got[2 + i], FloatToBf16(x2 * c + x1 * s));
  }
}

TEST(RotaryEmbeddingOp, BadPositionOrShapeIsAnError) {
  Queue q = Queue::Cpu(1);
  const std::vector<float> cache = MakeCache(4, 4);
  Tensor tc = Tensor::FromHost(cache.data(), {4, 4}, DType::kF32);
  Tensor x = Tensor::Empty({1, 8}, DType::kF32);
  const std::vector<int32_t> pos = {4};
  try {
    RotaryEmbedding(q, Tensor::FromHost(pos.data(), {1}, DType::kI32), x, nullptr, tc, 4);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("positions[0] = 4"), std::string::npos) << e.what();
  }
  const std::vector<int32_t> ok = {1};
  EXPECT_THROW(RotaryEmbedding(q, Tensor::FromHost(ok.data(), {1}, DType::kI32), x, nullptr, tc, 3), Error);
  EXPECT_THROW(RotaryEmbedding(q, Tensor::FromHost(ok.data(), {1}, DType::kI32), Tensor::Empty({1, 6}, DType::kF32),
                               nullptr, tc, 4),
               Error);
}

}  // namespace
}  // namespace vt
