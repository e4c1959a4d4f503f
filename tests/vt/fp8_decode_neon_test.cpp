// The NEON attention kernels' fp8 (e4m3fn) cache decode (simd_vec.h DecodeFp8Over256 and
// DecodeFp8Over256Pair, on the half trick of matmul/fp8_decode_neon.h) against the scalar
// decode, bit for bit, for all 256 codes: zeros, subnormals, normals and the NaN codes 0x7F
// and 0xFF (Fp8E4M3ToFloat's NaN, 0x7FC00000 with the code's sign, times 2^-8 keeps its
// bits). Also the NEON set's cache_to_f32 against KvCacheDequantizeFp8, NaN bits included.
// Part of vt_ci_tests, so it runs under every qemu CPU model of the aarch64 CI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "vt/cpu/attention_kernels.h"
#include "vt/vt.h"

#if defined(__aarch64__)
#include "vt/cpu/simd_vec.h"
#endif

namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

bool IsNanCode(int c) { return (c & 0x7F) == 0x7F; }

}  // namespace

#if defined(__aarch64__)
namespace {
// The scalar decode of code c, times 2^-8 (exact for every code).
uint32_t ScalarOver256(uint8_t c) { return Bits(vt::Fp8E4M3ToFloat(c) * 0x1p-8f); }
}  // namespace

// Every code in every lane position, from loads at every offset of a 4-byte group.
TEST(Fp8DecodeNeon, AllCodesBitIdenticalToScalarDecode) {
  namespace nv = vt::cpu::neon;
  std::vector<uint8_t> codes(256 + 16);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i);
  for (int off = 0; off < 4; ++off) {
    float got[8];
    for (int i = off; i + nv::kLanes <= 256 + off; i += nv::kLanes) {
      nv::StoreF32(got, nv::DecodeFp8Over256<true>(&codes[static_cast<size_t>(i)]));
      for (int l = 0; l < nv::kLanes; ++l) {
        const uint8_t c = codes[static_cast<size_t>(i + l)];
        ASSERT_EQ(Bits(got[l]), ScalarOver256(c)) << "DecodeFp8Over256<true> code " << int{c};
      }
    }
    for (int i = off; i + 8 <= 256 + off; i += 2 * nv::kLanes) {
      nv::V x0, x1;
      nv::DecodeFp8Over256Pair<true>(&codes[static_cast<size_t>(i)], x0, x1);
      nv::StoreF32(got, x0);
      nv::StoreF32(got + nv::kLanes, x1);
      for (int l = 0; l < 2 * nv::kLanes; ++l) {
        const uint8_t c = codes[static_cast<size_t>(i + l)];
        ASSERT_EQ(Bits(got[l]), ScalarOver256(c)) << "DecodeFp8Over256Pair<true> code " << int{c};
      }
    }
  }
  // kNaN false (the caller found no NaN code): every other code the same bits.
  std::vector<uint8_t> finite;
  for (int c = 0; c < 256; ++c)
    if (!IsNanCode(c)) finite.push_back(static_cast<uint8_t>(c));
  finite.resize(256, 0);  // 254 codes, then two zeros: whole vectors
  float got[8];
  for (size_t i = 0; i + 8 <= finite.size(); i += 8) {
    nv::V x0, x1;
    nv::DecodeFp8Over256Pair<false>(&finite[i], x0, x1);
    nv::StoreF32(got, x0);
    nv::StoreF32(got + nv::kLanes, x1);
    for (int l = 0; l < 8; ++l) ASSERT_EQ(Bits(got[l]), ScalarOver256(finite[i + l])) << "Pair<false> code " << int{finite[i + l]};
    nv::StoreF32(got, nv::DecodeFp8Over256<false>(&finite[i]));
    for (int l = 0; l < nv::kLanes; ++l) ASSERT_EQ(Bits(got[l]), ScalarOver256(finite[i + l])) << "<false> code " << int{finite[i + l]};
  }
}
#endif

// The CPU attention widens an F8E4M3 cache with each kernel set's vector decode
// (cache_to_f32: the 2^8-scaled decode times 2^8·scale): the same floats as
// KvCacheDequantizeFp8 (what the float64 attention tests read), for all 256 codes, at scales
// whose products round, and for lengths with a partial vector at the end; NaN codes with
// their bits on NEON (x86's half-trick decodes give NaN codes an unsigned NaN: there any NaN
// passes).
TEST(Fp8DecodeNeon, CacheToF32AllCodesBitIdentical) {
  std::vector<uint8_t> codes(256 + 37);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 97 + 13) % 256);
  for (size_t i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  int sets = 0;
  for (vt::CpuIsa isa : vt::CpuIsaLevels()) {
    if (isa == vt::CpuIsa::kScalar || isa > vt::DetectCpuIsa()) continue;
    const vt::cpu::attention::KernelSet* ks = vt::cpu::attention::ForIsa(isa, 128);
    if (ks == nullptr) continue;
    ++sets;
    const bool nan_bits = isa == vt::CpuIsa::kNeon || isa == vt::CpuIsa::kNeonBf16;
    // 1e-30: products in the f32 subnormals; 2^121: past the 2^8-scaled decode's range (the
    // exact one then; large codes overflow to infinity, as the definition's do).
    for (float scale : {1.0f, 0.0371f, 3.7f, 1.0f / 448.0f, 1e-30f, 0x1p121f})
      for (int64_t n : {int64_t{256}, int64_t{256 + 37}, int64_t{5}}) {
        std::vector<float> got(static_cast<size_t>(n), -1.0f);
        ks->cache_to_f32(got.data(), codes.data(), vt::DType::kF8E4M3, n, scale);
        for (int64_t i = 0; i < n; ++i) {
          const uint8_t c = codes[static_cast<size_t>(i)];
          const float want = vt::KvCacheDequantizeFp8(c, scale);
          const float g = got[static_cast<size_t>(i)];
          if (IsNanCode(c) && !nan_bits)
            ASSERT_TRUE(std::isnan(g)) << ks->name << " code " << int{c};
          else
            ASSERT_EQ(Bits(g), Bits(want)) << ks->name << " code " << int{c} << " scale " << scale << " n " << n
                                           << ": " << g << " vs " << want;
        }
      }
  }
  // Every vector level of this processor has the widening (x86 CI machines have AVX2).
  if (vt::DetectCpuIsa() != vt::CpuIsa::kScalar) {
    EXPECT_GT(sets, 0);
  }
}
