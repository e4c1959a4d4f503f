// Sampling ops on CUDA against the CPU kernels: the sparse ops byte for byte, the same
// sampled ids and logprob ranks, logprobs within 1e-5; DispatchCount proves the CUDA
// kernels ran. Without a GPU every test reports SKIPPED.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "vt/cuda/kernels.h"  // SampleTokensClusterLaunches
#include "vt/ops/sampling.h"
#include "vt/sampling_test_ref.h"
#include "vt_cuda/cuda_test_util.h"

namespace {

using sampling_ref::Params;

vt::Tensor On(const vt::Tensor& t, const vt::Device& d) { return t.device() == d ? t : t.To(d); }
vt::Tensor I32(const std::vector<int32_t>& v) {
  return vt::Tensor::FromHost(v.data(), {static_cast<int64_t>(v.size())}, vt::DType::kI32);
}
template <typename T>
std::vector<T> Host(const vt::Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  if (!v.empty()) t.CopyToHost(v.data());
  return v;
}

struct Batch {
  int64_t R, V;
  std::vector<float> logits, params;
  std::vector<int32_t> top_k;
  std::vector<int64_t> bits;
};

Batch MakeBatch(int64_t V, const std::vector<Params>& configs, int draws, uint32_t seed) {
  Batch b{static_cast<int64_t>(configs.size()) * draws, V, {}, {}, {}, {}};
  for (size_t c = 0; c < configs.size(); ++c)
    for (int d = 0; d < draws; ++d) {
      const auto x = sampling_ref::RandomLogits(V, seed + static_cast<uint32_t>(c * 131 + d), 2.5f, (c + d) % 3 == 0);
      b.logits.insert(b.logits.end(), x.begin(), x.end());
      b.params.insert(b.params.end(), {configs[c].temperature, configs[c].top_p, configs[c].min_p});
      b.top_k.push_back(configs[c].top_k);
      b.bits.push_back(static_cast<int64_t>(vt::SampleBits(seed + c, static_cast<uint64_t>(d))));
    }
  return b;
}

std::vector<int32_t> Sample(const vt::Queue& q, const Batch& b) {
  const vt::Device d = q.device();
  vt::Tensor out = vt::Tensor::Empty({b.R}, vt::DType::kI32, d);
  vt::SampleTokens(q, out, vt::Tensor::FromHost(b.logits.data(), {b.R, b.V}, vt::DType::kF32, d),
                   vt::Tensor::FromHost(b.params.data(), {b.R, 3}, vt::DType::kF32, d), On(I32(b.top_k), d),
                   vt::Tensor::FromHost(b.bits.data(), {b.R}, vt::DType::kI64, d));
  return Host<int32_t>(out);
}

const std::vector<Params> kConfigs = {{0.0f},
                                      {1.0f, 1.0f, 0.0f, 0},
                                      {0.7f, 0.9f, 0.0f, 0},
                                      {1.3f, 0.5f, 0.05f, 10},
                                      {1.0f, 1.0f, 0.0f, 40},
                                      {0.5f, 1.0f, 1.0f, 0},
                                      {1.0f, 0.3f, 0.0f, 5},
                                      {2.0f, 1.0f, 0.2f, 0},
                                      {1e-4f, 1.0f, 0.0f, 0},
                                      {1.0f, 0.95f, 0.0f, 3},
                                      {0.9f, 0.6f, 0.1f, 200},
                                      {1.0f, 0.999f, 0.0f, 0},
                                      {1.0f, 0.9f, 0.0f, 5000}};

// Every config at vocabularies whose slices fit a cluster of 8 CTAs (up to 152064), of 16
// (Qwen3.5's 248320), and at one too large for either (the one-CTA-per-row kernel).
TEST(SamplingCuda, SampleTokensMatchesCpu) {
  VT_REQUIRE_CUDA();
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  for (int64_t V : {int64_t{37}, int64_t{4096}, int64_t{152064}, int64_t{248320}, int64_t{600000}}) {
    const Batch b = MakeBatch(V, kConfigs, V > 10000 ? (V > 200000 ? 1 : 2) : 16, static_cast<uint32_t>(V));
    const int64_t before = vt::DispatchCount(vt::OpId::kSampleTokens, vt::DeviceType::kCUDA);
    const int64_t cluster_before = vt::cuda::SampleTokensClusterLaunches();
    const int64_t gathered_before = vt::cuda::SampleTokensGatheredRows();
    const auto g = Sample(gpu, b);
    EXPECT_EQ(vt::DispatchCount(vt::OpId::kSampleTokens, vt::DeviceType::kCUDA), before + 1);
    const bool cluster = V <= 400000;
    EXPECT_EQ(vt::cuda::SampleTokensClusterLaunches() - cluster_before, cluster ? 1 : 0) << "V " << V;
    // Rows with 0 < top_k <= 40 < V keep few candidates: those (untied ones at least) are gathered.
    if (cluster && V > 40) {
      EXPECT_GT(vt::cuda::SampleTokensGatheredRows() - gathered_before, 0) << "V " << V;
    }
    const auto c = Sample(cpu, b);
    for (int64_t r = 0; r < b.R; ++r)
      EXPECT_EQ(g[r], c[r]) << "V " << V << " row " << r << " config "
                            << r / (b.R / static_cast<int64_t>(kConfigs.size()));
  }
}

TEST(SamplingCuda, TopKLogprobsMatchesCpu) {
  VT_REQUIRE_CUDA();
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  const int64_t V = 152064, R = 6, K = 20;
  std::vector<float> logits;
  for (int64_t r = 0; r < R; ++r) {
    auto x = sampling_ref::RandomLogits(V, 40 + static_cast<uint32_t>(r), 3.0f, r % 2 == 1);
    if (r == 2) {
      for (int64_t i = 0; i < V; i += 2) x[i] = -sampling_ref::kInf;
    }
    logits.insert(logits.end(), x.begin(), x.end());
  }
  const std::vector<int32_t> targets = {0, 5, 7, 152063, 1000, 77};
  auto run = [&](const vt::Queue& q) {
    const vt::Device d = q.device();
    vt::Tensor ids = vt::Tensor::Empty({R, K}, vt::DType::kI32, d), lps = vt::Tensor::Empty({R, K}, vt::DType::kF32, d);
    vt::Tensor tl = vt::Tensor::Empty({R}, vt::DType::kF32, d), tr = vt::Tensor::Empty({R}, vt::DType::kI32, d);
    vt::TopKLogprobs(q, vt::Tensor::FromHost(logits.data(), {R, V}, vt::DType::kF32, d), On(I32(targets), d), ids, lps,
                     tl, tr);
    return std::make_tuple(Host<int32_t>(ids), Host<float>(lps), Host<float>(tl), Host<int32_t>(tr));
  };
  const int64_t before = vt::DispatchCount(vt::OpId::kTopKLogprobs, vt::DeviceType::kCUDA);
  const auto [gi, gl, gt, gr] = run(gpu);
  EXPECT_EQ(vt::DispatchCount(vt::OpId::kTopKLogprobs, vt::DeviceType::kCUDA), before + 1);
  const auto [ci, cl, ct, cr] = run(cpu);
  EXPECT_EQ(gi, ci);
  EXPECT_EQ(gr, cr);
  for (int64_t r = 0; r < R; ++r) {
    if (std::isinf(ct[r])) {
      EXPECT_EQ(gt[r], ct[r]) << r;
    } else {
      EXPECT_NEAR(gt[r], ct[r], 1e-5) << r;
    }
  }
  for (size_t j = 0; j < gl.size(); ++j) EXPECT_NEAR(gl[j], cl[j], 1e-5) << j;
}

TEST(SamplingCuda, SparseOpsMatchCpuByteForByte) {
  VT_REQUIRE_CUDA();
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  const int64_t V = 5000, R = 3;
  std::vector<float> logits;
  for (int64_t r = 0; r < R; ++r) {
    const auto x = sampling_ref::RandomLogits(V, 60 + static_cast<uint32_t>(r));
    logits.insert(logits.end(), x.begin(), x.end());
  }
  std::vector<int32_t> a_off = {0, 3, 3, 4}, allowed = {10, 20, 4999, 7};
  std::vector<int32_t> b_off = {0, 1, 3, 3}, banned = {20, 0, 0};
  std::vector<int32_t> s_off = {0, 2, 2, 3}, s_ids = {10, 11, 7};
  std::vector<float> s_val = {1.5f, -2.0f, 0.75f};
  std::vector<int32_t> p_off = {0, 2, 4, 5}, p_ids = {10, 4999, 1, 2, 7}, p_cnt = {0, 3, 1, 0, 2};
  std::vector<float> pen = {1.3f, 0.5f, 0.2f, 0.8f, -0.1f, 1.0f, 1.0f, 0.0f, 0.5f};
  auto run = [&](const vt::Queue& q) {
    const vt::Device d = q.device();
    vt::Tensor x = vt::Tensor::FromHost(logits.data(), {R, V}, vt::DType::kF32, d);
    vt::LogitsMask(q, x, On(I32(a_off), d), On(I32(allowed), d), On(I32(b_off), d), On(I32(banned), d));
    vt::LogitsAddSparse(q, x, On(I32(s_off), d), On(I32(s_ids), d),
                        vt::Tensor::FromHost(s_val.data(), {3}, vt::DType::kF32, d));
    vt::LogitsPenalties(q, x, On(I32(p_off), d), On(I32(p_ids), d), On(I32(p_cnt), d),
                        vt::Tensor::FromHost(pen.data(), {R, 3}, vt::DType::kF32, d));
    return x;
  };
  const int64_t before = vt::DispatchCount(vt::OpId::kLogitsPenalties, vt::DeviceType::kCUDA);
  const vt::Tensor g = run(gpu);
  EXPECT_EQ(vt::DispatchCount(vt::OpId::kLogitsPenalties, vt::DeviceType::kCUDA), before + 1);
  EXPECT_GT(vt::DispatchCount(vt::OpId::kLogitsMask, vt::DeviceType::kCUDA), 0);
  EXPECT_GT(vt::DispatchCount(vt::OpId::kLogitsAddSparse, vt::DeviceType::kCUDA), 0);
  EXPECT_TRUE(vtt::SameBytes(g, run(cpu)));
}

}  // namespace
