// Cast: exact decodes of every 16-bit and fp8 code and RNE narrowing, on every CPU ISA
// level. The op table (op_table_test.cpp) checks every (source, destination) pair on every
// level and backend against the scalar bytes.
#include <gtest/gtest.h>

#include <random>

#include "elementwise_test_util.h"

namespace {

// All 65536 codes of a 16-bit dtype.
vt::Tensor AllCodes(vt::DType d) {
  vt::Tensor t = vt::Tensor::Empty({65536}, d);
  for (uint32_t c = 0; c < 65536; ++c) t.data_as<uint16_t>()[c] = static_cast<uint16_t>(c);
  return t;
}

TEST(Cast, WideningIsExactOnEveryIsa) {
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    vt::Queue q = vt_test::QueueFor(isa);
    for (vt::DType from : {vt::DType::kBF16, vt::DType::kF16}) {
      vt::Tensor x = AllCodes(from);
      vt::Tensor out = vt::Tensor::Empty(x.shape(), vt::DType::kF32);
      vt::Cast(q, out, x);
      for (uint32_t c = 0; c < 65536; ++c) {
        const double want = vt_test::ValueAt(x, c);
        const float got = out.data_as<float>()[c];
        if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << std::hex << c;
        else ASSERT_EQ(static_cast<double>(got), want) << vt_test::Name(from) << " code 0x" << std::hex << c;
      }
    }
    vt::Tensor f8 = vt::Tensor::Empty({256}, vt::DType::kF8E4M3);
    for (int c = 0; c < 256; ++c) f8.data_as<uint8_t>()[c] = static_cast<uint8_t>(c);
    vt::Tensor out = vt::Tensor::Empty({256}, vt::DType::kF32);
    vt::Cast(q, out, f8);
    for (int c = 0; c < 256; ++c) {
      const double want = vt_test::DecodeE4M3(static_cast<uint8_t>(c));
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(out.data_as<float>()[c]));
      else EXPECT_EQ(static_cast<double>(out.data_as<float>()[c]), want) << c;
    }
  }
}

TEST(Cast, NarrowingRoundsToNearestEven) {
  // 1 + 2^-8 is the BF16 midpoint between 1 and 1 + 2^-7; 1 + 3*2^-8 between 1 + 2^-7 and 1 + 2^-6.
  vt::Tensor x = vt_test::MakeTensor({1.00390625f, 1.01171875f, 1.00048828125f, 1.00146484375f}, {4}, vt::DType::kF32);
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    vt::Queue q = vt_test::QueueFor(isa);
    vt::Tensor b = vt::Tensor::Empty({4}, vt::DType::kBF16);
    vt::Cast(q, b, x);
    EXPECT_EQ(b.data_as<uint16_t>()[0], 0x3F80) << vt::CpuIsaName(isa);  // tie -> even (1.0)
    EXPECT_EQ(b.data_as<uint16_t>()[1], 0x3F82) << vt::CpuIsaName(isa);  // tie -> even (1 + 2^-6)
    vt::Tensor h = vt::Tensor::Empty({4}, vt::DType::kF16);
    vt::Cast(q, h, x);
    EXPECT_EQ(h.data_as<uint16_t>()[2], 0x3C00) << vt::CpuIsaName(isa);  // 1 + 2^-11: tie -> 1.0
    EXPECT_EQ(h.data_as<uint16_t>()[3], 0x3C02) << vt::CpuIsaName(isa);  // 1 + 3*2^-11: tie -> 1 + 2^-9
  }
}

}  // namespace
