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

constexpr int64_t kStreamPrefetch = 1536;

// Byte offset from row j's current position (element k of rows of `ld` elements of `elt`
// bytes) to prefetch, when a thread streams its weight rows in groups of `nr`. A thread's
// rows are contiguous, and row j of a group is followed by row j of the next group, where
// this row's stream continues: long rows prefetch kStreamPrefetch bytes ahead in the row
// and, past its end, the matching place in the next group (without that, every group began
// with nr cold misses: Qwen3-8B's 4096-wide rows streamed at ~60% of the rate of
// 12288-wide ones); short rows prefetch the same place in the group at least
// kStreamPrefetch bytes on in the stream.
[[maybe_unused]] inline int64_t StreamAhead(int64_t k, int64_t ld, int nr, int64_t elt) {
  const int64_t row = ld * elt;
  if (row <= kStreamPrefetch) return (kStreamPrefetch + row - 1) / row * nr * row;
  return k * elt + kStreamPrefetch < row ? kStreamPrefetch : kStreamPrefetch + (nr - 1) * row;
}

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
