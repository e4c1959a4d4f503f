// Helpers of the CUDA tests: GPU detection (a test without a GPU reports SKIPPED) and
// host<->device tensors. Byte comparisons with the CPU live in the op table
// (tests/vt/op_table.h).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "vt/vt.h"

#define VT_REQUIRE_CUDA()                                                               \
  do {                                                                                  \
    if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped"; \
  } while (0)

namespace vtt {

inline const vt::Device kCuda = vt::Device::Cuda(0);

// A CPU tensor of dtype d holding v (rounded RNE to d).
inline vt::Tensor HostTensor(const std::vector<float>& v, vt::DType d, const vt::Shape& shape) {
  vt::Tensor t = vt::Tensor::Empty(shape, d, vt::Device::Cpu());
  for (size_t i = 0; i < v.size(); ++i) {
    switch (d) {
      case vt::DType::kF32: t.data_as<float>()[i] = v[i]; break;
      case vt::DType::kBF16: t.data_as<uint16_t>()[i] = vt::FloatToBf16(v[i]); break;
      case vt::DType::kF16: t.data_as<uint16_t>()[i] = vt::FloatToF16(v[i]); break;
      default: ADD_FAILURE() << "HostTensor: unsupported dtype";
    }
  }
  return t;
}

// n draws of N(0, sigma^2) from a generator seeded with `seed`.
inline std::vector<float> Normal(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

inline std::vector<uint8_t> Bytes(const vt::Tensor& t) {
  std::vector<uint8_t> b(t.nbytes());
  t.CopyToHost(b.data());
  return b;
}

inline std::vector<float> Floats(const vt::Tensor& t) {
  vt::Tensor h = t.device().is_cpu() ? t : t.To(vt::Device::Cpu());
  std::vector<float> out(static_cast<size_t>(h.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (h.dtype()) {
      case vt::DType::kF32: out[i] = h.data_as<float>()[i]; break;
      case vt::DType::kBF16: out[i] = vt::Bf16ToFloat(h.data_as<uint16_t>()[i]); break;
      case vt::DType::kF16: out[i] = vt::F16ToFloat(h.data_as<uint16_t>()[i]); break;
      case vt::DType::kF8E4M3: out[i] = vt::Fp8E4M3ToFloat(h.data_as<uint8_t>()[i]); break;
      default: ADD_FAILURE() << "Floats: unsupported dtype";
    }
  }
  return out;
}

// Byte equality of two tensors (any devices) of one dtype and shape; reports the first
// difference.
inline ::testing::AssertionResult SameBytes(const vt::Tensor& a, const vt::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return ::testing::AssertionFailure() << a.Describe() << " vs " << b.Describe();
  std::vector<uint8_t> x(a.nbytes()), y(b.nbytes());
  a.CopyToHost(x.data());
  b.CopyToHost(y.data());
  const size_t es = vt::DTypeSize(a.dtype());
  for (size_t i = 0; i < x.size(); i += es)
    if (std::memcmp(&x[i], &y[i], es) != 0)
      return ::testing::AssertionFailure() << "element " << i / es << " of " << a.Describe() << " differs";
  return ::testing::AssertionSuccess();
}

// Whether the tensor-core decode kernel runs the query heads as the N columns of its
// products for an F8E4M3 (fp8) or a BF16 cache: by default for F8E4M3 only;
// VT_CUDA_ATTN_DECODE_HEADS_N=1 for both, =0 for neither (the tests run under each).
inline bool DecodeHeadsNOn(bool fp8) {
  const char* v = std::getenv("VT_CUDA_ATTN_DECODE_HEADS_N");
  return v == nullptr ? fp8 : std::string(v) != "0";
}

inline std::string FixturesDir() {
  if (const char* env = std::getenv("VTLLM_FIXTURES_DIR")) return env;
  return VTLLM_FIXTURES_DIR;
}

}  // namespace vtt
