// attention::KernelSet::attend_block written once against simd_vec.h; attention_avx512.cpp
// and attention_avx2.cpp compile it at their width. Products accumulate with fma in
// vector lanes (the portable loops add rounded products instead), and e^x is the vector
// form of numerics::Exp, so results differ from the portable path in the last bits only
// (the attention tests bound every path against a float64 reference).
#pragma once

#include <cmath>

#include "vt/cpu/attention_kernels.h"
#include "vt/cpu/simd_vec.h"

namespace vt::cpu::VT_SIMD_NS {
namespace {

// Keys per pass: their scores wait in a stack array between the passes.
constexpr int64_t kKeysPerPass = 64;

void AttendKeys(const float* q, const float* k, const float* v, int64_t n, int64_t D, float* acc, float& m,
                float& l) {
  alignas(64) float s[kKeysPerPass];
  float bm = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const float* kj = k + j * D;
    V a0 = Zero(), a1 = Zero();
    int64_t i = 0;
    for (; i + 2 * kLanes <= D; i += 2 * kLanes) {
      a0 = Fma(LoadF32(q + i), LoadF32(kj + i), a0);
      a1 = Fma(LoadF32(q + i + kLanes), LoadF32(kj + i + kLanes), a1);
    }
    if (i < D) a0 = Fma(LoadF32(q + i), LoadF32(kj + i), a0);
    s[j] = SumLanes(Add(a0, a1));
    bm = s[j] > bm ? s[j] : bm;
  }
  if (bm > m) {
    // e^-inf = 0 on a row's first keys. (The vector Exp, not the scalar numerics::Exp: an
    // inline function with external linkage compiled here could be the copy the linker
    // keeps for code meant to run on any processor.)
    const V r = Exp(Set1(m - bm));
    for (int64_t i = 0; i < D; i += kLanes) StoreF32(acc + i, Mul(LoadF32(acc + i), r));
    l *= FirstLane(r);
    m = bm;
  }
  const V mv = Set1(m);
  for (int64_t j = 0; j < n; j += kLanes) {
    const int c = n - j < kLanes ? static_cast<int>(n - j) : kLanes;
    StoreN(s, DType::kF32, j, Exp(Sub(LoadN(s, DType::kF32, j, c), mv)), c);
  }
  for (int64_t j = 0; j < n; ++j) l += s[j];
  // acc stays in registers across the keys, a few vectors of it at a time.
  constexpr int kAccVectors = 4;
  for (int64_t i0 = 0; i0 < D; i0 += kAccVectors * kLanes) {
    const int nv = static_cast<int>((D - i0) / kLanes < kAccVectors ? (D - i0) / kLanes : kAccVectors);
    V a[kAccVectors];
    for (int t = 0; t < nv; ++t) a[t] = LoadF32(acc + i0 + t * kLanes);
    for (int64_t j = 0; j < n; ++j) {
      const V p = Set1(s[j]);
      const float* vj = v + j * D + i0;
      for (int t = 0; t < nv; ++t) a[t] = Fma(p, LoadF32(vj + t * kLanes), a[t]);
    }
    for (int t = 0; t < nv; ++t) StoreF32(acc + i0 + t * kLanes, a[t]);
  }
}

void Fp8ToF32(float* dst, const uint8_t* src, int64_t n, float scale) {
  const V s = Set1(scale);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) StoreF32(dst + i, Mul(DecodeFp8(LoadU8(src + i)), s));
  if (i < n) {
    const int c = static_cast<int>(n - i);
    StoreN(dst, DType::kF32, i, Mul(LoadFp8N(src, i, c), s), c);
  }
}

void AttendBlock(const float* q, const float* k, const float* v, int64_t valid, int64_t D, float* acc, float& m,
                 float& l) {
  for (int64_t j = 0; j < valid; j += kKeysPerPass) {
    const int64_t n = valid - j < kKeysPerPass ? valid - j : kKeysPerPass;
    AttendKeys(q, k + j * D, v + j * D, n, D, acc, m, l);
  }
}

}  // namespace
}  // namespace vt::cpu::VT_SIMD_NS
