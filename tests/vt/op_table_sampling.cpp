// Table cases of the sampling ops. The masks, the sparse add, the penalties and the draw are
// defined so that every backend computes the same bytes (each probability term is an exp in
// double rounded to f32, sums in double, ids walked in order): byte-exact. TopKLogprobs' ids
// and ranks are exact; its logprobs sum in double in another order per backend: 1e-5.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <limits>

#include "op_table.h"
#include "vt/ops/sampling.h"

namespace vt_table {

namespace {

using vt::DType;

// Rows of logits with repeated values (ties) and, in row 1, a stretch of -inf.
std::vector<float> Logits(int64_t R, int64_t V, uint32_t seed) {
  std::vector<float> x = Normal(static_cast<size_t>(R * V), seed, 2.0f);
  for (int64_t r = 0; r < R; ++r) {
    float* row = x.data() + r * V;
    for (int64_t i = 3; i < V; i += 7) row[i] = row[i - 3];  // ties
    if (r == 1)
      for (int64_t i = 0; i < V / 3; ++i) row[i] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

template <typename... A>
std::string Name(const char* fmt, A... a) {
  char buf[96];
  std::snprintf(buf, sizeof buf, fmt, static_cast<long long>(a)...);
  return buf;
}

vt::Tensor I32(const std::vector<int32_t>& v) { return HostOf(v, {static_cast<int64_t>(v.size())}, DType::kI32); }

// CSR lists: row r gets (r * 3 + 2) % 5 entries spread over the vocabulary (distinct, ascending).
void Sparse(int64_t R, int64_t V, std::vector<int32_t>& offsets, std::vector<int32_t>& ids) {
  offsets = {0};
  for (int64_t r = 0; r < R; ++r) {
    const int64_t n = std::min<int64_t>((r * 3 + 2) % 5, V);
    for (int64_t j = 0; j < n; ++j) ids.push_back(static_cast<int32_t>((j * V) / std::max<int64_t>(n, 1) + r % 3));
    offsets.push_back(static_cast<int32_t>(ids.size()));
  }
  if (ids.empty()) ids.push_back(0);  // entry tensors are never empty
}

const std::pair<int64_t, int64_t> kShapes[] = {{1, 7}, {3, 1000}, {4, 4099}};

}  // namespace

std::vector<OpCase> TopKLogprobsCases() {
  std::vector<OpCase> cases;
  for (const auto& [R, V] : kShapes)
    for (const int64_t K : {int64_t{0}, int64_t{1}, int64_t{5}}) {
      OpCase c;
      c.name = Name("R%lld V%lld K%lld", R, V, K);
      std::vector<int32_t> targets;
      for (int64_t r = 0; r < R; ++r) targets.push_back(static_cast<int32_t>((r * 131 + V - 1) % V));
      c.inputs = {Host(Logits(R, V, static_cast<uint32_t>(V + K)), {R, V}, DType::kF32), I32(targets)};
      c.outputs = {Filled({R, K}, DType::kI32), Filled({R, K}, DType::kF32), Filled({R}, DType::kF32),
                   Filled({R}, DType::kI32)};
      c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::TopKLogprobs(q, in[0], in[1], out[0], out[1], out[2], out[3]);
      };
      c.tol = [](size_t k, int64_t, double) { return k == 1 || k == 2 ? 1e-5 : 0.0; };
      cases.push_back(std::move(c));
    }
  return cases;
}

std::vector<OpCase> LogitsMaskCases() {
  std::vector<OpCase> cases;
  for (const auto& [R, V] : kShapes) {
    OpCase c;
    c.name = Name("R%lld V%lld", R, V);
    std::vector<int32_t> ao, ai, bo, bi;
    Sparse(R, V, ao, ai);
    Sparse(R, V, bo, bi);
    for (int32_t& b : bi) b = static_cast<int32_t>((b + 1) % V);
    c.inputs = {I32(ao), I32(ai), I32(bo), I32(bi)};
    c.outputs = {Host(Logits(R, V, 7), {R, V}, DType::kF32)};
    c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
      vt::LogitsMask(q, out[0], in[0], in[1], in[2], in[3]);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<OpCase> LogitsAddSparseCases() {
  std::vector<OpCase> cases;
  for (const auto& [R, V] : kShapes) {
    OpCase c;
    c.name = Name("R%lld V%lld", R, V);
    std::vector<int32_t> o, ids;
    Sparse(R, V, o, ids);
    c.inputs = {I32(o), I32(ids), Host(Normal(ids.size(), 11, 30.0f), {static_cast<int64_t>(ids.size())}, DType::kF32)};
    c.outputs = {Host(Logits(R, V, 8), {R, V}, DType::kF32)};
    c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
      vt::LogitsAddSparse(q, out[0], in[0], in[1], in[2]);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<OpCase> LogitsPenaltiesCases() {
  std::vector<OpCase> cases;
  for (const auto& [R, V] : kShapes) {
    OpCase c;
    c.name = Name("R%lld V%lld", R, V);
    std::vector<int32_t> o, ids, counts;
    Sparse(R, V, o, ids);
    for (size_t j = 0; j < ids.size(); ++j) counts.push_back(static_cast<int32_t>(j % 4));  // 0: prompt only
    std::vector<float> pen;
    for (int64_t r = 0; r < R; ++r) pen.insert(pen.end(), {1.0f + 0.3f * r, 0.5f - 0.4f * r, -0.7f + 0.9f * r});
    c.inputs = {I32(o), I32(ids), I32(counts), HostOf(pen, {R, 3}, DType::kF32)};
    c.outputs = {Host(Logits(R, V, 9), {R, V}, DType::kF32)};
    c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
      vt::LogitsPenalties(q, out[0], in[0], in[1], in[2], in[3]);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<OpCase> SampleTokensCases() {
  std::vector<OpCase> cases;
  // {T, top_p, min_p, top_k}: greedy, plain, each filter, all together.
  const float kParams[][4] = {{0.0f, 1.0f, 0.0f, 0},   {1.0f, 1.0f, 0.0f, 0},   {0.7f, 0.9f, 0.0f, 0},
                              {1.3f, 1.0f, 0.05f, 0},  {0.8f, 1.0f, 0.0f, 5},   {0.6f, 0.8f, 0.02f, 40}};
  for (const auto& [R, V] : kShapes)
    for (const auto& p : kParams) {
      OpCase c;
      char buf[128];
      std::snprintf(buf, sizeof buf, "R%lld V%lld T%g top_p%g min_p%g top_k%d", static_cast<long long>(R),
                    static_cast<long long>(V), p[0], p[1], p[2], static_cast<int>(p[3]));
      c.name = buf;
      std::vector<float> params;
      std::vector<int32_t> top_k;
      std::vector<int64_t> bits;
      for (int64_t r = 0; r < R; ++r) {
        params.insert(params.end(), {p[0], p[1], p[2]});
        top_k.push_back(static_cast<int32_t>(p[3]));
        bits.push_back(static_cast<int64_t>(vt::SampleBits(static_cast<uint64_t>(V), static_cast<uint64_t>(r))));
      }
      c.inputs = {Host(Logits(R, V, static_cast<uint32_t>(R + V)), {R, V}, DType::kF32), HostOf(params, {R, 3}, DType::kF32),
                  I32(top_k), HostOf(bits, {R}, DType::kI64)};
      c.outputs = {Filled({R}, DType::kI32)};
      c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::SampleTokens(q, out[0], in[0], in[1], in[2], in[3]);
      };
      cases.push_back(std::move(c));
    }
  {
    // A vocabulary wide enough that a backend splits a row across blocks: the maximum tied
    // on both sides of a 2048 boundary, at the last id alone, tied in every 4096 ids, and
    // a sampled row between greedy ones.
    const int64_t R = 4, V = 40961;
    std::vector<float> x = Logits(R, V, 77);
    for (float& v : x) v = std::min(v, 5.0f);
    x[2047] = x[2048] = 9.0f;
    x[V + V - 1] = 9.5f;
    for (int64_t i = 100; i < V; i += 4096) x[2 * V + i] = 7.0f;
    const std::vector<float> params = {0.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.9f, 1.0f, 0.0f};
    std::swap(x[3 * V + 5], x[3 * V + V - 2]);
    OpCase c;
    c.name = "greedy rows split across blocks, V 40961";
    c.inputs = {Host(x, {R, V}, DType::kF32), HostOf(params, {R, 3}, DType::kF32), I32({0, 0, 0, 0}),
                HostOf(std::vector<int64_t>{1, 2, 3, 4}, {R}, DType::kI64)};
    c.outputs = {Filled({R}, DType::kI32)};
    c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
      vt::SampleTokens(q, out[0], in[0], in[1], in[2], in[3]);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace vt_table
