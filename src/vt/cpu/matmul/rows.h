// Products whose rows do not depend on one another: GemmRowsAsOne gives every row of out
// exactly the bytes that Matmul (alpha 1, no bias) or MatmulFp8 give that row of a alone,
// for any number of rows, while reading each weight byte from memory once for all of
// them. The MoE experts use it to multiply all the tokens routed to one expert at once
// without a token's bytes depending on its batch (cpu/moe.cpp).
//
// How (matmul.cpp, RunGemm): a call takes the path a one-row call would take for the
// queue's kernel set and dtypes, whatever M is:
//  - a weight laid out for an outer-product kernel (PackedKernels): that kernel, whose
//    rows never depend on M (matmul/kernels.h);
//  - the set's streaming path (where a one-row call streams): the stream of the set's
//    `rows_as_one` set over all rows at once, or one call per row where a set has none;
//  - otherwise the blocked path with all of K in one block, as a one-row call blocks it
//    (longer products cut K into blocks, whose sums would round differently).
#pragma once

#include <cstdint>

#include "vt/queue.h"
#include "vt/tensor.h"

namespace vt::cpu::matmul {

// out [M, N] = alpha · a [M, K] · b [N, K]ᵀ, each row as its own M = 1 product: a and b
// both fp8 (MatmulFp8's operands; b may be a prepared weight), or Matmul's (alpha 1).
void GemmRowsAsOne(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha);

// Calls of GemmRowsAsOne in this process with more than one row, and their rows (tests).
int64_t RowsAsOneCalls();
int64_t RowsAsOneRows();

}  // namespace vt::cpu::matmul
