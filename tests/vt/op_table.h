// The cross-backend op table: every op of vt declares its cases once (shapes with tails
// and odd sizes, dtypes, special values, and the comparison the contract allows), and one
// harness (op_table_test.cpp) runs each case on every backend of the build and on every
// CPU ISA level of this processor, against the CPU's plain scalar kernels.
//
// A case owns host tensors; the harness copies them to the backend under test, runs the
// op there, and brings the outputs back. Outputs start from the case's contents, so ops
// that update tensors in place (RotaryEmbedding, KvCacheWrite, a residual) are cases too.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "vt/vt.h"

namespace vt_table {

using Tensors = std::vector<vt::Tensor>;
// Runs the op on q; `in` and `out` are the case's tensors in the case's order, on q's device.
using RunFn = std::function<void(const vt::Queue& q, const Tensors& in, const Tensors& out)>;
// Allowed |got - want| for element i of output k, given the reference value.
using TolFn = std::function<double(size_t k, int64_t i, double want)>;

struct OpCase {
  std::string name;  // what this case varies, for failure messages
  Tensors inputs;    // host tensors the op only reads (shared by the CPU runs; a case may
                     // mark one read-only, as a model does its weights)
  Tensors outputs;   // host tensors the op writes or updates (their contents are the start)
  RunFn run;
  // Empty: byte-exact, as the FP8 contract demands of the quantizers and fused recipes
  // (two NaNs of one sign count as equal in F32/BF16/F16: payloads are not part of it).
  TolFn tol;
  // Optional: the op's definition on the same backend (a fused recipe's composite), whose
  // outputs the op must reproduce byte for byte.
  RunFn definition;
  // A NaN the op's arithmetic makes (SiluMul of a -inf gate: -inf * 0) has no defined sign:
  // x86 makes the negative default NaN, CUDA the positive canonical one. Set for such ops: a
  // NaN then equals any NaN. Unset, a NaN must keep its sign (the quantizers' contract).
  bool nan_sign_free = false;
  // Set with a tolerance that only another backend needs (CUDA may contract a multiply and
  // an add into an fma): every CPU ISA level must still equal the scalar kernels byte for
  // byte, as the CPU build never contracts.
  bool exact_on_cpu = false;
};

// The cases of one op; every OpId has an entry (op_table_test.cpp's switch).
std::vector<OpCase> QuantCases();
std::vector<OpCase> QuantFp8PerTokenGroupCases();
std::vector<OpCase> MatmulFp8GroupScaledCases();
std::vector<OpCase> RmsNormCases();
std::vector<OpCase> RmsNormGatedCases();
std::vector<OpCase> RmsNormZeroCentredCases();
std::vector<OpCase> SiluMulCases();
std::vector<OpCase> SigmoidGatedAddCases();
std::vector<OpCase> CastCases();
std::vector<OpCase> RmsNormQuantFp8Cases();
std::vector<OpCase> RmsNormZeroCentredQuantFp8Cases();
std::vector<OpCase> RmsNormGatedQuantFp8Cases();
std::vector<OpCase> SiluMulQuantFp8Cases();
std::vector<OpCase> MatmulFp8SiluMulQuantFp8Cases();
std::vector<OpCase> RmsNormQuantFp8PerTokenGroupCases();
std::vector<OpCase> RmsNormZeroCentredQuantFp8PerTokenGroupCases();
std::vector<OpCase> RmsNormGatedQuantFp8PerTokenGroupCases();
std::vector<OpCase> SiluMulQuantFp8PerTokenGroupCases();
std::vector<OpCase> MatmulFp8Cases();
std::vector<OpCase> MatmulCases();
std::vector<OpCase> EmbeddingCases();
std::vector<OpCase> RotaryEmbeddingCases();
std::vector<OpCase> KvCacheWriteCases();
std::vector<OpCase> QkNormRopeCacheWriteCases();
std::vector<OpCase> PagedAttentionCases();
std::vector<OpCase> PagedAttentionQuantFp8Cases();
std::vector<OpCase> TopKLogprobsCases();
std::vector<OpCase> LogitsMaskCases();
std::vector<OpCase> LogitsAddSparseCases();
std::vector<OpCase> LogitsPenaltiesCases();
std::vector<OpCase> SampleTokensCases();
std::vector<OpCase> MoeTopKRoutingCases();
std::vector<OpCase> MoeExpertsCases();
std::vector<OpCase> MoeExpertsFp8Cases();
std::vector<OpCase> MoeExpertsFp8PerTokenCases();
std::vector<OpCase> MoeExpertsFp8GroupScaledCases();
std::vector<OpCase> CausalConv1dCases();
std::vector<OpCase> GatedDeltaRuleCases();

// ---- helpers for building cases ----------------------------------------------------------

// A host tensor of a float dtype (F32/BF16/F16) holding v rounded to it.
vt::Tensor Host(const std::vector<float>& v, const vt::Shape& shape, vt::DType dtype);
// A host tensor of any dtype copied from raw elements.
template <typename T>
vt::Tensor HostOf(const std::vector<T>& v, const vt::Shape& shape, vt::DType dtype) {
  return vt::Tensor::FromHost(v.data(), shape, dtype);
}
// An output tensor whose every byte starts as 0x5A (so a skipped element shows).
vt::Tensor Filled(const vt::Shape& shape, vt::DType dtype);
// n near-normal values of standard deviation sigma, each times 2^u with u uniform in
// [-spread, spread] (spread 0: none), from the seed.
std::vector<float> Normal(size_t n, uint32_t seed, float sigma = 1.0f, float spread = 0.0f);
// Rows of varied magnitude (the sum of squares is order-sensitive) with 0, -0, a large
// value and (from the third row) a NaN in them.
std::vector<float> RowsWithSpecials(int64_t rows, int64_t width, uint32_t seed);
// One unit in the last place of dtype d at magnitude |x|.
double Ulp(vt::DType d, double x);
// Element i of a host tensor of any float dtype (F8E4M3 included), as a double.
double ValueAt(const vt::Tensor& t, int64_t i);

// The metadata of a PagedAttention batch: sequence s has seqs[s].first tokens in the cache
// (its seqs[s].second new ones included); its blocks are handed out in a shuffled order, so
// they are not contiguous, and three spare blocks hold garbage nobody may read.
struct PagedBatch {
  int64_t S = 0, T = 0, max_blocks = 1, num_blocks = 0;
  std::vector<int32_t> tables, lens, query_start_loc;  // [S, max_blocks] (-1: none), [S], [S+1]
};
PagedBatch MakePagedBatch(const std::vector<std::pair<int64_t, int64_t>>& seqs, int64_t block_size, uint32_t seed);

// Byte equality with the first difference in the message; NaNs as OpCase::tol says.
::testing::AssertionResult SameBytes(const vt::Tensor& got, const vt::Tensor& want, bool nan_sign_free = false);

}  // namespace vt_table
