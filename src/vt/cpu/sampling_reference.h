// Plain scalar references of the sampling kernels (vt/ops/sampling.h), one row at a time,
// written from the definitions with full sorts: the named baseline the fast CPU kernels and
// the CUDA kernels are tested against. The inputs are already validated.
#pragma once

#include <cstdint>

namespace vt::cpu::ref {

// x: one row of V raw logits. Writes the target's logprob and rank and the top k tokens.
void TopKLogprobsRow(const float* x, int64_t V, int32_t target, int64_t k, int32_t* top_ids, float* top_logprobs,
                     float* target_logprob, int32_t* target_rank);

// allowed: na ascending distinct ids (na == 0: no restriction); banned: nb ids.
void LogitsMaskRow(float* x, int64_t V, const int32_t* allowed, int64_t na, const int32_t* banned, int64_t nb);

void LogitsAddSparseRow(float* x, const int32_t* ids, const float* values, int64_t n);

void LogitsPenaltiesRow(float* x, const int32_t* ids, const int32_t* counts, int64_t n, float repetition,
                        float frequency, float presence);

// The token SampleTokens picks for one row.
int32_t SampleRow(const float* x, int64_t V, float temperature, float top_p, float min_p, int32_t top_k,
                  uint64_t random_bits);

}  // namespace vt::cpu::ref
