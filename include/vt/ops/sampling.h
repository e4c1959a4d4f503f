// Sampling: the ops that turn rows of logits into sampled token ids, in vLLM's order
// (the engine's Sampler calls them in this order):
//
//   TopKLogprobs on a copy of the raw logits (the logprobs snapshot)
//   -> LogitsMask (allowed ids, banned ids) -> LogitsAddSparse (logit_bias)
//   -> LogitsPenalties (repetition, frequency, presence) -> SampleTokens.
//
// Every op works on F32 logits [R, V] on the queue's device, row by row; rows are
// independent, so a row gives the same result whatever other rows are in the batch.
// Per-row sparse inputs are CSR: `offsets` I32 [R + 1] (offsets[0] = 0, non-decreasing)
// and the entries of row r at [offsets[r], offsets[r + 1]) of the entry tensors (I32 / F32,
// 1-D, at least offsets[R] long). Ids outside [0, V) and malformed offsets are a vt::Error
// on the CPU, whose kernels read the offsets on the host; the CUDA kernels, which cannot
// report without a synchronization, skip such entries (never touching memory outside the
// row) — the engine validates ids when a request is added.
//
// The draw. A row's uniform number is a pure function of (seed, draw_index):
//   bits = SampleBits(seed, draw_index), u = (bits >> 11) * 2^-53  in [0, 1),
// passed to SampleTokens as I64 bits. After the processing the kept tokens are walked in
// ascending id order, their unnormalised probabilities accumulated in double, and the
// first token whose running sum exceeds u * (their sum) is taken. CPU and CUDA therefore
// pick the same token except where two float or double roundings decide a boundary.
#pragma once

#include <cstdint>

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// splitmix64's finaliser: a bijection of 64-bit words with good avalanche.
constexpr uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// The random bits of draw `draw_index` of a generator seeded with `seed`.
constexpr uint64_t SampleBits(uint64_t seed, uint64_t draw_index) {
  return SplitMix64(SplitMix64(seed) ^ SplitMix64(draw_index ^ 0xD1B54A32D192ED03ull));
}
// The uniform double in [0, 1) that the bits stand for (53 bits, exact).
constexpr double SampleUniform(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1p-53; }

// Temperatures below this are greedy (argmax), as vLLM.
inline constexpr float kGreedyTemperature = 1e-5f;

// The logprobs of rows of raw logits: lp[i] = x[i] - (m + log Σ_j exp(x[j] - m)), m = the
// row's max (each exp(x[j] - m) in double rounded to f32, so that every backend gets the
// same terms; the sum and the log in double; a token equal to m counts exp(0) = 1
// even when m is ±inf). For each row r:
//   target_logprobs[r] = lp[targets[r]]; target_ranks[r] = 1 + #{j : x[j] > x[targets[r]]};
//   top_ids[r, :K], top_logprobs[r, :K] = the K most likely tokens, ties by lower id first.
// logits: [R, V] F32; targets: [R] I32 in [0, V); top_ids: [R, K] I32; top_logprobs: [R, K]
// F32 (K = top_ids.dim(1), 0 <= K <= V); target_logprobs: [R] F32; target_ranks: [R] I32.
void TopKLogprobs(const Queue& q, const Tensor& logits, const Tensor& targets, const Tensor& top_ids,
                  const Tensor& top_logprobs, const Tensor& target_logprobs, const Tensor& target_ranks);

// In place: in a row whose allowed list is non-empty, every token not in it becomes -inf;
// then every token of the row's banned list becomes -inf. Allowed ids of a row must be
// ascending and distinct (the kernels look them up by binary search); banned ids may repeat.
// logits: [R, V] F32; *_offsets: [R + 1] I32; *_ids: I32.
void LogitsMask(const Queue& q, const Tensor& logits, const Tensor& allowed_offsets, const Tensor& allowed_ids,
                const Tensor& banned_offsets, const Tensor& banned_ids);

// In place: logits[r, ids[j]] += values[j] for the entries j of row r (logit_bias). Ids of
// a row should be distinct (the CPU adds repeats in entry order, CUDA in any order).
// offsets: [R + 1] I32; ids: I32; values: F32.
void LogitsAddSparse(const Queue& q, const Tensor& logits, const Tensor& offsets, const Tensor& ids,
                     const Tensor& values);

// In place, vLLM's penalties: for every entry j of row r (a token seen in the prompt or the
// output; ids distinct within a row) with output count c = counts[j] >= 0, and
// (rp, f, p) = penalties[r, 0..2]:
//   x = logits[r, ids[j]];  x = x > 0 ? x / rp : x * rp;  x -= f * c;  if (c > 0) x -= p.
// penalties: [R, 3] F32 {repetition > 0, frequency, presence}; offsets: [R + 1] I32;
// ids, counts: I32.
void LogitsPenalties(const Queue& q, const Tensor& logits, const Tensor& offsets, const Tensor& ids,
                     const Tensor& counts, const Tensor& penalties);

// One token per row. With (T, top_p, min_p) = params[r, 0..2], k = top_k[r]:
// - T < kGreedyTemperature: the argmax of the row (ties: the lowest id);
// - else x = logit / T (f32), m = max x, p = (x == m) ? 1 : f32(exp(double(x - m))), and a
//   token is kept when it passes every filter:
//     min_p:  p >= min_p (p of the most likely token is 1);
//     top_k:  k <= 0 or k >= V, or x >= the k-th largest x of the row (ties at the k-th kept);
//     top_p:  top_p >= 1, or p >= p*, where p* is the largest p among the tokens kept by
//             min_p and top_k such that their tokens with p >= p* hold at least
//             top_p * (their total mass), sums in double (ties at p* kept; one token at least);
//   then the draw above over the kept tokens with u from random_bits[r].
// logits: [R, V] F32 (unchanged); params: [R, 3] F32 {T, top_p in (0, 1], min_p in [0, 1]};
// top_k: [R] I32; random_bits: [R] I64 (SampleBits); out_ids: [R] I32.
void SampleTokens(const Queue& q, const Tensor& out_ids, const Tensor& logits, const Tensor& params,
                  const Tensor& top_k, const Tensor& random_bits);

template <>
struct OpTraits<OpId::kTopKLogprobs> {
  using Fn = void(const Queue& q, const Tensor& logits, const Tensor& targets, const Tensor& top_ids,
                  const Tensor& top_logprobs, const Tensor& target_logprobs, const Tensor& target_ranks);
};
template <>
struct OpTraits<OpId::kLogitsMask> {
  using Fn = void(const Queue& q, const Tensor& logits, const Tensor& allowed_offsets, const Tensor& allowed_ids,
                  const Tensor& banned_offsets, const Tensor& banned_ids);
};
template <>
struct OpTraits<OpId::kLogitsAddSparse> {
  using Fn = void(const Queue& q, const Tensor& logits, const Tensor& offsets, const Tensor& ids, const Tensor& values);
};
template <>
struct OpTraits<OpId::kLogitsPenalties> {
  using Fn = void(const Queue& q, const Tensor& logits, const Tensor& offsets, const Tensor& ids, const Tensor& counts,
                  const Tensor& penalties);
};
template <>
struct OpTraits<OpId::kSampleTokens> {
  using Fn = void(const Queue& q, const Tensor& out_ids, const Tensor& logits, const Tensor& params,
                  const Tensor& top_k, const Tensor& random_bits);
};

}  // namespace vt
