// The registry tells the truth and refuses by name.
#include <gtest/gtest.h>

#include "vt/vt.h"

namespace {

TEST(Registry, CpuKernelsAreRegistered) {
  for (vt::OpId op : {vt::OpId::kQuantFp8Static, vt::OpId::kMatmulFp8, vt::OpId::kMatmul, vt::OpId::kRmsNorm,
                      vt::OpId::kRmsNormGated, vt::OpId::kSiluMul, vt::OpId::kCast, vt::OpId::kRmsNormQuantFp8,
                      vt::OpId::kRmsNormGatedQuantFp8, vt::OpId::kSiluMulQuantFp8}) {
    EXPECT_TRUE(vt::OpRegistered(op, vt::DeviceType::kCPU)) << vt::OpName(op);
  }
}

}  // namespace
