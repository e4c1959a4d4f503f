// Helpers of the CUDA tests: GPU detection (a test without a GPU reports SKIPPED),
// host<->device tensors, byte comparison with the first difference in the message.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
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

// NaN of a float dtype (F32/BF16/F16) in es little-endian bytes at p.
inline bool IsNan(const uint8_t* p, vt::DType d) {
  switch (d) {
    case vt::DType::kF32: {
      uint32_t u;
      std::memcpy(&u, p, 4);
      return (u & 0x7FFFFFFFu) > 0x7F800000u;
    }
    case vt::DType::kBF16: {
      uint16_t u;
      std::memcpy(&u, p, 2);
      return (u & 0x7FFFu) > 0x7F80u;
    }
    case vt::DType::kF16: {
      uint16_t u;
      std::memcpy(&u, p, 2);
      return (u & 0x7FFFu) > 0x7C00u;
    }
    default: return false;
  }
}

// Byte equality of two tensors (any devices) of the same dtype; reports the first difference.
// In F32/BF16/F16 tensors two NaNs of the same sign count as equal: NaN payloads are not part
// of the contract (CUDA arithmetic yields the canonical NaN, x86 propagates the operand's).
// F8E4M3 bytes must match exactly (NaN is S.1111.111 there, sign kept).
inline ::testing::AssertionResult SameBytes(const vt::Tensor& a, const vt::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return ::testing::AssertionFailure() << a.Describe() << " vs " << b.Describe();
  const auto x = Bytes(a), y = Bytes(b);
  const size_t es = vt::DTypeSize(a.dtype());
  size_t diffs = 0, first = 0;
  for (size_t i = 0; i < x.size(); i += es) {
    const bool nan_pair = IsNan(&x[i], a.dtype()) && IsNan(&y[i], a.dtype()) && (x[i + es - 1] & 0x80) == (y[i + es - 1] & 0x80);
    if (!nan_pair && std::memcmp(&x[i], &y[i], es) != 0) {
      if (diffs++ == 0) first = i / es;
    }
  }
  if (diffs == 0) return ::testing::AssertionSuccess();
  auto hex = [&](const std::vector<uint8_t>& v) {
    uint64_t u = 0;
    std::memcpy(&u, &v[first * es], es);
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(u));
    return std::string(buf);
  };
  return ::testing::AssertionFailure() << diffs << " of " << x.size() / es << " elements differ; first at " << first
                                       << ": " << hex(x) << " vs " << hex(y);
}

inline std::string FixturesDir() {
  if (const char* env = std::getenv("VTLLM_FIXTURES_DIR")) return env;
  return VTLLM_FIXTURES_DIR;
}

}  // namespace vtt
