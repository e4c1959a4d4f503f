// Small helpers of the CPU matmul kernel files (matmul/gemm_avx512.cpp, matmul/gemm_avx2.cpp,
// matmul/gemm_neon.cpp, matmul/gemm_neonbf16.cpp, matmul/gemm_scalar.cpp). Internal linkage on purpose: each ISA-specific file gets its own copy
// compiled with its own flags, so the linker can never hand one file's code to another
// (see matmul/kernels.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "vt/cpu/matmul/kernels.h"

namespace vt::cpu::matmul {
namespace {

// f(std::integral_constant<int, 0>{}), ..., f(...<N - 1>{}): the indices are constants from
// the start, so that arrays indexed by them become registers (with loops over the indices,
// GCC 12 kept gemm_neon.cpp's accumulators in memory and stored them in every iteration of
// the streaming loop, as its disassembly showed).
template <int N, typename F>
[[maybe_unused]] __attribute__((always_inline)) inline void Unroll(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) __attribute__((always_inline)) {
    (f(std::integral_constant<int, I>{}), ...);
  }(std::make_integer_sequence<int, N>{});
}

// How far ahead the streaming decode paths prefetch in each of their weight streams.
constexpr int64_t kStreamPrefetch = 1536;

// The layouts of the streaming decode paths' groups of kPanelRows weight rows:
//  - quarters (M <= 4): the rows are cut into 4 contiguous quarters and group g takes row g
//    of each, so every row a step reads continues one of 4 sequential streams, whatever K
//    is, and the prefetch target is a plain distance ahead; with short rows (1 KiB in
//    Qwen3-0.6B) adjacent groups would read 4 interleaved strided streams per page instead.
//  - adjacent (M > 4): group g is rows 4g..4g+3. There the multiplies bound the stream,
//    so the layout of the reads matters less than near M = 1.
// bench/kernel_notes.md has the measurements behind the M = 4 boundary.
// Byte offset from a row's current position (element k of rows of `ld` elements of `elt`
// bytes) to prefetch in the adjacent layout: row j of a group is followed by row j of the
// next group, so long rows prefetch kStreamPrefetch bytes ahead in the row and, past its
// end, the matching place in the next group (without that, every group began with nr cold
// misses); short rows prefetch the same place at least kStreamPrefetch bytes on.
[[maybe_unused]] inline int64_t AdjacentAhead(int64_t k, int64_t ld, int nr, int64_t elt) {
  const int64_t row = ld * elt;
  if (row <= kStreamPrefetch) return (kStreamPrefetch + row - 1) / row * nr * row;
  return k * elt + kStreamPrefetch < row ? kStreamPrefetch : kStreamPrefetch + (nr - 1) * row;
}

// Group g of a stream over nrows weight rows starts at row g * first and takes every
// stride-th row from there (kPanelRows of them); rows past groups * kPanelRows go one by
// one. Quarters up to 4 rows of a (first 1, stride = groups), adjacent otherwise.
struct StreamGroups {
  int64_t groups, first, stride;
};
[[maybe_unused]] inline StreamGroups GroupsFor(int64_t M, int64_t nrows) {
  const int64_t groups = nrows / kPanelRows;
  return M <= 4 ? StreamGroups{groups, 1, groups} : StreamGroups{groups, kPanelRows, 1};
}

// Bytes ahead of a row's position k to prefetch, for a group whose rows are ldb elements
// apart: ldb == K is the adjacent layout (or quarters of a single group, which is the
// same rows), anything else a quarter stream.
[[maybe_unused]] inline int64_t PrefetchAhead(int64_t k, int64_t ldb, int64_t K, int nr, int64_t elt) {
  return ldb == K ? AdjacentAhead(k, K, nr, elt) : kStreamPrefetch;
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

// The tiles of an outer-product kernel on re-laid-out weights (PackedKernels), `group`
// blocks per tile (the weights its row tiles share); tile(mr, m, j, nb, stride): rows
// [m, m + mr) against the nb blocks j, j + stride, ..., j + (nb - 1) stride.
//  - parts (M <= kPackedPartsMaxRows, decode): blocks [block0, block1) are cut into
//    `group` contiguous parts and tile i takes block i of each part (then every row tile
//    of it), so each of a tile's weight streams runs on through its part in address
//    order and the prefetches stay ahead across block boundaries; adjacent blocks
//    restarted `group` streams every tile (bench/kernel_notes.md compares the two walks
//    and the part counts). The last (n mod group) blocks go one at a time.
//  - adjacent (prefill, bound by the multiplies; the driver passes 256-column chunks):
//    groups of adjacent blocks, and for each group every tile of up to `rows_per_tile`
//    rows in turn, so the group's weights come from memory once; a group is cut into
//    tiles of 4, 3 (only where group is 3), 2 or 1 blocks.
template <typename Tile>
[[maybe_unused]] void ForEachPackedTile(int64_t M, int64_t rows_per_tile, int64_t block0, int64_t block1, int group,
                                        Tile tile) {
  if (M <= kPackedPartsMaxRows) {
    const int64_t part = (block1 - block0) / group;
    for (int64_t i = 0; i < part; ++i)
      for (int64_t m = 0; m < M; m += rows_per_tile) tile(std::min(rows_per_tile, M - m), m, block0 + i, group, part);
    for (int64_t j = block0 + group * part; j < block1; ++j)
      for (int64_t m = 0; m < M; m += rows_per_tile) tile(std::min(rows_per_tile, M - m), m, j, 1, int64_t{1});
    return;
  }
  for (int64_t j = block0; j < block1; j += group) {
    const int nb = static_cast<int>(std::min<int64_t>(group, block1 - j));
    for (int64_t m = 0; m < M; m += rows_per_tile) {
      const int64_t mr = std::min(rows_per_tile, M - m);
      for (int done = 0; done < nb;) {
        const int rest = nb - done;
        const int take = rest == 4 ? 4 : rest == 3 && group == 3 ? 3 : rest >= 2 ? 2 : 1;
        tile(mr, m, j + done, take, int64_t{1});
        done += take;
      }
    }
  }
}

}  // namespace
}  // namespace vt::cpu::matmul
