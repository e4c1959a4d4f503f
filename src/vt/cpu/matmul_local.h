// Small helpers of the CPU matmul kernel files (matmul_avx512.cpp, matmul_avx2.cpp,
// matmul_scalar.cpp). Internal linkage on purpose: each ISA-specific file gets its own copy
// compiled with its own flags, so the linker can never hand one file's code to another
// (see matmul_kernels.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "vt/cpu/matmul_kernels.h"

namespace vt::cpu::matmul {
namespace {

// How far ahead the streaming decode paths prefetch in each of their weight streams.
constexpr int64_t kStreamPrefetch = 1536;

// The micro-tiles of a packed GEMM block: rows of a in tiles of kRowsA (a last tile of
// 1 row at a time), kPanelRows panel rows each; tile(rows, m, n) with rows an
// std::integral_constant (kRowsA or 1).
template <int kRowsA, typename Tile>
[[maybe_unused]] void ForEachTile(int64_t M, int64_t nrows, Tile tile) {
  for (int64_t m = 0; m < M; m += kRowsA)
    for (int64_t n = 0; n < nrows; n += kPanelRows) {
      if (M - m >= kRowsA)
        tile(std::integral_constant<int, kRowsA>{}, m, n);
      else
        tile(std::integral_constant<int, 1>{}, m, n);
    }
}

}  // namespace
}  // namespace vt::cpu::matmul
