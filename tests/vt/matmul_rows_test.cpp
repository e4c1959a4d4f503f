// matmul::GemmRowsAsOne (matmul/rows.h): every row of a product of M rows has exactly the
// bytes of Matmul/MatmulFp8 on that row alone, on every CPU ISA level, for each operand
// pairing that picks a different path (F32 x BF16 and F32 x F32: the blocked path; BF16 x
// BF16: the stream; fp8 x fp8 as stored: the stream with its fp8 decode; fp8 on a prepared
// weight: the outer-product kernels, on AVX2 by tiles for one row and panels for many), M across the streams' and tiles' row counts (2 to 4,
// past 4 and 16 where plain calls change path or block K) and K past the K blocks of long
// products (1024 f32 and 2048 BF16 values), with tails in N and K.
#include <gtest/gtest.h>

#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "elementwise_test_util.h"
#include "matmul_test_util.h"
#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/rows.h"
#include "vt/vt.h"

namespace {

using vt::DType;
using vt::Tensor;

enum class Pairing { kF32Bf16, kF32F32, kBf16Bf16, kFp8, kFp8Prepared };

const char* Name(Pairing p) {
  switch (p) {
    case Pairing::kF32Bf16: return "f32 x bf16";
    case Pairing::kF32F32: return "f32 x f32";
    case Pairing::kBf16Bf16: return "bf16 x bf16";
    case Pairing::kFp8: return "fp8 x fp8";
    case Pairing::kFp8Prepared: return "fp8 x prepared fp8";
  }
  return "?";
}

// Random operands a [rows, K] and b [N, K]: e4m3 codes (fp8), else normal values stored
// as ad / bd. The same draws from rng in the same order as before the helper existed.
std::pair<Tensor, Tensor> RandomOperands(bool fp8, int64_t rows, int64_t N, int64_t K, DType ad, DType bd,
                                         std::mt19937& rng) {
  if (fp8)
    return {Tensor::FromHost(vt_test::RandomFp8(rows * K, rng).data(), {rows, K}, DType::kF8E4M3),
            Tensor::FromHost(vt_test::RandomFp8(N * K, rng).data(), {N, K}, DType::kF8E4M3)};
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> av(static_cast<size_t>(rows * K)), bv(static_cast<size_t>(N * K));
  for (float& v : av) v = d(rng);
  for (float& v : bv) v = d(rng);
  return {vt_test::MakeTensor(av, {rows, K}, ad), vt_test::MakeTensor(bv, {N, K}, bd)};
}

TEST(GemmRowsAsOne, EveryRowHasTheBytesOfItsOneRowProductOnEveryIsa) {
  namespace mm = vt::cpu::matmul;
  const int64_t N = 45;
  std::mt19937 rng(77);
  int checked = 0;
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    const vt::Queue q = vt_test::QueueFor(isa);
    for (Pairing pairing :
         {Pairing::kF32Bf16, Pairing::kF32F32, Pairing::kBf16Bf16, Pairing::kFp8, Pairing::kFp8Prepared}) {
      const bool fp8 = pairing == Pairing::kFp8 || pairing == Pairing::kFp8Prepared;
      const DType ad = fp8 ? DType::kF8E4M3 : pairing == Pairing::kBf16Bf16 ? DType::kBF16 : DType::kF32;
      const DType bd = fp8 ? DType::kF8E4M3 : pairing == Pairing::kF32F32 ? DType::kF32 : DType::kBF16;
      for (int64_t K : {37, 2100}) {
        Tensor a_all, b;
        const int64_t max_m = 33;
        std::tie(a_all, b) = RandomOperands(fp8, max_m, N, K, ad, bd, rng);
        if (pairing == Pairing::kFp8Prepared) {
          b.SetReadOnly();
          b = vt::PrepareWeight(q, b, vt::WeightUse::kMatmulB);
        }
        for (DType od : {DType::kF32, DType::kBF16}) {
          const float alpha = fp8 ? 0.013f : 1.0f;
          for (int64_t M : {2, 3, 4, 5, 7, 16, 17, 33}) {
            const Tensor a = a_all.Slice(0, max_m - M, max_m);  // rows not at the start of a
            Tensor out = Tensor::Empty({M, N}, od);
            const int64_t calls = mm::RowsAsOneCalls(), rows = mm::RowsAsOneRows();
#if defined(__x86_64__)
            const int64_t panels = mm::Avx2PanelGemms();
#endif
            mm::GemmRowsAsOne(q, out, a, b, alpha);
            EXPECT_EQ(mm::RowsAsOneCalls() - calls, 1);
            EXPECT_EQ(mm::RowsAsOneRows() - rows, M);
#if defined(__x86_64__)
            // The AVX2 outer-product kernel's panels (many rows) against its tiles (one row).
            if (pairing == Pairing::kFp8Prepared && (isa == vt::CpuIsa::kAvx2 || isa == vt::CpuIsa::kAvx512)) {
              EXPECT_EQ(mm::Avx2PanelGemms() > panels, M >= mm::kAvx2PanelMinRows) << "M=" << M;
            }
#endif
            const std::vector<uint8_t> got = vt_test::BytesOf(out);
            const size_t row = static_cast<size_t>(N) * vt::DTypeSize(od);
            for (int64_t m = 0; m < M; ++m) {
              Tensor one = Tensor::Empty({1, N}, od);
              if (fp8)
                vt::MatmulFp8(q, one, a.Slice(0, m, m + 1), b, alpha);
              else
                vt::Matmul(q, one, a.Slice(0, m, m + 1), b);
              const std::vector<uint8_t> want = vt_test::BytesOf(one);
              const std::vector<uint8_t> got_row(got.begin() + m * row, got.begin() + (m + 1) * row);
              ASSERT_EQ(vt_test::FirstDiff(want, got_row), -1)
                  << vt::CpuIsaName(isa) << " " << Name(pairing) << " out " << vt::DTypeName(od) << " M=" << M
                  << " K=" << K << " row " << m;
              ++checked;
            }
          }
        }
      }
    }
  }
  std::printf("[ %d rows checked on %s ]\n", checked, vt_test::IsaNames().c_str());
}

// The blocked path's rows (M > 4, past the streams) do not depend on M or on the rows beside
// them (matmul/kernels.h asks it of every set's gemm): each row of the last M rows of a 33-row
// product has the bytes of that row in the whole product, for M of both parities (so a row's
// neighbours in a micro-tile, and its partner in neonbf16's BFMMLA pairs, change) and K
// within one K block (4096 bytes of packed row), with tails in N and K.
TEST(GemmRows, BlockedRowsDoNotDependOnMOnEveryIsa) {
  namespace mm = vt::cpu::matmul;
  const int64_t N = 45, max_m = 33;
  std::mt19937 rng(78);
  int checked = 0;
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    const vt::Queue q = vt_test::QueueFor(isa);
    for (Pairing pairing : {Pairing::kF32F32, Pairing::kBf16Bf16, Pairing::kFp8}) {
      const bool fp8 = pairing == Pairing::kFp8;
      const DType dt = fp8 ? DType::kF8E4M3 : pairing == Pairing::kBf16Bf16 ? DType::kBF16 : DType::kF32;
      for (int64_t K : {37, 200}) {
        Tensor a_all, b;
        std::tie(a_all, b) = RandomOperands(fp8, max_m, N, K, dt, dt, rng);
        bool streamed = false;  // the last product took a set's stream (some x86 sets do past M = 4)
        auto product = [&](const Tensor& a) {
          Tensor out = Tensor::Empty({a.dim(0), N}, DType::kF32);
          if (fp8)
            vt::MatmulFp8(q, out, a, b, 0.013f);
          else
            vt::Matmul(q, out, a, b);
          streamed = mm::LastGemmOnThisThread().stream;
          return vt_test::BytesOf(out);
        };
        const std::vector<uint8_t> all = product(a_all);
        if (streamed) {
          // Only the AMX set streams this many rows (its tiles take every M up to 4,096): it
          // has no blocked path at these M to check.
          ASSERT_EQ(isa, vt::CpuIsa::kAmx) << vt::CpuIsaName(isa) << " " << Name(pairing);
          continue;
        }
        const size_t row = static_cast<size_t>(N) * sizeof(float);
        for (int64_t M : {5, 6, 7, 9, 16, 17}) {
          const std::vector<uint8_t> got = product(a_all.Slice(0, max_m - M, max_m));
          if (streamed) continue;
          for (int64_t m = 0; m < M; ++m) {
            const size_t at = static_cast<size_t>(max_m - M + m) * row;
            const std::vector<uint8_t> want(all.begin() + at, all.begin() + at + row);
            const std::vector<uint8_t> got_row(got.begin() + m * row, got.begin() + (m + 1) * row);
            ASSERT_EQ(vt_test::FirstDiff(want, got_row), -1) << vt::CpuIsaName(isa) << " " << Name(pairing)
                                                            << " M=" << M << " K=" << K << " row " << m;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
  std::printf("[ %d rows checked on %s ]\n", checked, vt_test::IsaNames().c_str());
}

}  // namespace
