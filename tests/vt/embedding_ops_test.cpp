// Embedding: rows gathered by id, dtype conversion exact or RNE, bad ids refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "vt/vt.h"

namespace vt {
namespace {

TEST(EmbeddingOp, GathersRowsAndConverts) {
  Queue q = Queue::Cpu(2);
  const int64_t V = 7, H = 5;
  std::vector<float> table(V * H);
  for (int64_t i = 0; i < V * H; ++i) table[i] = 0.1f * static_cast<float>(i) - 1.0f;
  const std::vector<int32_t> ids = {3, 0, 6, 3};
  Tensor t = Tensor::FromHost(table.data(), {V, H}, DType::kF32);
  Tensor id = Tensor::FromHost(ids.data(), {4}, DType::kI32);
  Tensor out = Tensor::Empty({4, H}, DType::kF32);
  Embedding(q, out, t, id);
  std::vector<float> got(4 * H);
  out.CopyToHost(got.data());
  for (int r = 0; r < 4; ++r)
    for (int64_t i = 0; i < H; ++i) EXPECT_EQ(got[r * H + i], table[ids[r] * H + i]) << r << "," << i;
  // F32 table -> BF16 out rounds each value to nearest even.
  Tensor out16 = Tensor::Empty({4, H}, DType::kBF16);
  Embedding(q, out16, t, id);
  std::vector<uint16_t> got16(4 * H);
  out16.CopyToHost(got16.data());
  for (int r = 0; r < 4; ++r)
    for (int64_t i = 0; i < H; ++i) {
      // Independent RNE: keep the top 16 bits, round on the dropped 16 (no NaNs here).
      uint32_t u;
      std::memcpy(&u, &table[ids[r] * H + i], 4);
      const uint32_t rest = u & 0xFFFFu;
      uint32_t top = u >> 16;
      if (rest > 0x8000u || (rest == 0x8000u && (top & 1u))) ++top;
      EXPECT_EQ(got16[r * H + i], top);
    }
}

TEST(EmbeddingOp, OutOfRangeIdIsAnErrorNamingIt) {
  Queue q = Queue::Cpu(1);
  Tensor t = Tensor::Empty({4, 2}, DType::kBF16);
  const std::vector<int32_t> ids = {1, 4};
  Tensor id = Tensor::FromHost(ids.data(), {2}, DType::kI32);
  Tensor out = Tensor::Empty({2, 2}, DType::kBF16);
  try {
    Embedding(q, out, t, id);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ids[1] = 4"), std::string::npos) << e.what();
  }
  const std::vector<int32_t> neg = {-1, 0};
  EXPECT_THROW(Embedding(q, out, t, Tensor::FromHost(neg.data(), {2}, DType::kI32)), Error);
  // Shape and dtype errors at the boundary.
  EXPECT_THROW(Embedding(q, Tensor::Empty({2, 3}, DType::kBF16), t, id), Error);
  EXPECT_THROW(Embedding(q, out, t, Tensor::Empty({2}, DType::kI64)), Error);
}

}  // namespace
}  // namespace vt
