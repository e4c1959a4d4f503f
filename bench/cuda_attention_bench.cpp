// CUDA PagedAttention as the model layer calls it (BF16 queries over a BF16 paged cache of
// 16-token blocks), on Qwen3-8B heads (32 query heads, 8 KV heads, head size 128):
//  - decode: S sequences of one query row each over contexts of ctx tokens;
//  - prefill: one causal prompt of L tokens.
// Each case is timed as 20 calls captured into one CUDA graph (vt::Graph) and replayed, per
// call (the median of 9 replays), the way an engine replays its decode step, beside the
// device-to-device copy bandwidth measured in the same run: decode reports the keys and
// values it reads per second, prefill its TFLOP/s (4 · Hq · D · L² / 2 for the causal half).
// bench/torch_sdpa_peer.py times PyTorch's SDPA backends (cuDNN, FlashAttention, memory-
// efficient) on the same shapes over contiguous keys and values, the peer of this table.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_bench_util.h"
#include "vt/cuda/runtime.h"
#include "vt/vt.h"

namespace {

constexpr int64_t kHq = 32, kHk = 8, kD = 128, kBlock = 16;
constexpr int kChain = 20, kReps = 9;

// The median over kReps replays of `graph` (kChain calls) between two events, per call.
double ReplayUs(cudaStream_t stream, const vt::Graph& graph) {
  for (int i = 0; i < 2; ++i) graph.Replay();
  return vtllm_bench::EventMedianUs(stream, kReps, kChain, [&](int) { graph.Replay(); });
}

vt::Tensor RandomBf16(const vt::Shape& shape, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> h(static_cast<size_t>(n));
  for (auto& v : h) {
    const float f = dist(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    v = static_cast<uint16_t>(bits >> 16);
  }
  return vt::Tensor::FromHost(h.data(), shape, vt::DType::kBF16, vt::Device::Cuda(0));
}

vt::Tensor I32(const std::vector<int32_t>& v, vt::Shape shape) {
  return vt::Tensor::FromHost(v.data(), std::move(shape), vt::DType::kI32, vt::Device::Cuda(0));
}

// S sequences, the rows of sequence s the last rows[s] of its ctx[s] tokens; returns the
// replayed per-call microseconds.
double TimeCase(const vt::Queue& q, cudaStream_t stream, const std::vector<int64_t>& ctx,
                const std::vector<int64_t>& rows, std::mt19937& rng) {
  const int64_t S = static_cast<int64_t>(ctx.size());
  int64_t T = 0, max_blocks = 0, blocks = 0;
  for (int64_t s = 0; s < S; ++s) {
    T += rows[s];
    max_blocks = std::max(max_blocks, (ctx[s] + kBlock - 1) / kBlock);
    blocks += (ctx[s] + kBlock - 1) / kBlock;
  }
  // Each sequence's blocks are a shuffled run of the cache, as a paged cache holds them.
  std::vector<int32_t> ids(static_cast<size_t>(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> tables(static_cast<size_t>(S * max_blocks), 0), lens, starts{0};
  int64_t next = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t nb = (ctx[s] + kBlock - 1) / kBlock;
    for (int64_t b = 0; b < nb; ++b) tables[static_cast<size_t>(s * max_blocks + b)] = ids[static_cast<size_t>(next++)];
    lens.push_back(static_cast<int32_t>(ctx[s]));
    starts.push_back(static_cast<int32_t>(starts.back() + rows[s]));
  }
  const vt::Tensor kc = RandomBf16({blocks, kBlock, kHk, kD}, rng), vc = RandomBf16({blocks, kBlock, kHk, kD}, rng);
  const vt::Tensor query = RandomBf16({T, kHq * kD}, rng);
  const vt::Tensor out = vt::Tensor::Empty({T, kHq * kD}, vt::DType::kBF16, vt::Device::Cuda(0));
  const vt::Tensor bt = I32(tables, {S, max_blocks}), sl = I32(lens, {S}), qs = I32(starts, {S + 1});
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD));
  auto call = [&] { vt::PagedAttention(q, out, query, kc, vc, bt, sl, qs, scale, 1.0f, 1.0f); };
  call();
  q.Synchronize();
  std::string why;
  const vt::Graph g = vt::Graph::Capture(q, [&] { for (int i = 0; i < kChain; ++i) call(); }, &why);
  if (!g.defined()) {
    std::fprintf(stderr, "graph capture failed: %s\n", why.c_str());
    return -1.0;
  }
  const double us = ReplayUs(stream, g);
  q.Synchronize();
  return us;
}

}  // namespace

int main() {
  if (vt::CudaDeviceCount() == 0) {
    std::printf("cuda_attention_bench: no CUDA device, nothing measured\n");
    return 0;
  }
  vt::Queue q = vt::Queue::Cuda(0);
  auto stream = static_cast<cudaStream_t>(vt::cuda::NativeStream(q));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  // Device copy: 1 GiB, bytes read + written per second (median of 9).
  double copy_gbs = 0;
  {
    const size_t bytes = size_t{1} << 30;
    void *a = nullptr, *b = nullptr;
    CHECK_CUDA(cudaMalloc(&a, bytes));
    CHECK_CUDA(cudaMalloc(&b, bytes));
    const double us = vtllm_bench::EventMedianUs(stream, 9, 1, [&](int) {
      CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
    });
    copy_gbs = 2.0 * static_cast<double>(bytes) / (us * 1e-6) / 1e9;
    CHECK_CUDA(cudaFree(a));
    CHECK_CUDA(cudaFree(b));
  }
  std::printf("device: %s, %d SMs; copy %.0f GB/s\n", prop.name, prop.multiProcessorCount, copy_gbs);
  std::printf("Qwen3-8B heads (%lld query, %lld KV, D %lld), BF16, %lld-token blocks, graph-replayed, per call\n",
              static_cast<long long>(kHq), static_cast<long long>(kHk), static_cast<long long>(kD),
              static_cast<long long>(kBlock));
  std::mt19937 rng(7);
  std::printf("%-8s %5s %6s %10s %10s %8s\n", "case", "S", "ctx", "us", "KV GB/s", "of copy");
  for (int64_t S : {1, 16, 64})
    for (int64_t ctx : {160, 1024, 4096}) {
      const double us = TimeCase(q, stream, std::vector<int64_t>(static_cast<size_t>(S), ctx),
                                 std::vector<int64_t>(static_cast<size_t>(S), 1), rng);
      const double bytes = 2.0 * static_cast<double>(S * ctx * kHk * kD) * 2.0;
      const double gbs = bytes / (us * 1e-6) / 1e9;
      std::printf("%-8s %5lld %6lld %10.2f %10.0f %7.0f%%\n", "decode", static_cast<long long>(S),
                  static_cast<long long>(ctx), us, gbs, 100.0 * gbs / copy_gbs);
    }
  std::printf("%-8s %5s %6s %10s %10s\n", "case", "S", "L", "us", "TFLOP/s");
  for (int64_t L : {1024, 4096}) {
    const double us = TimeCase(q, stream, {L}, {L}, rng);
    const double flops = 4.0 * kHq * kD * static_cast<double>(L) * static_cast<double>(L) / 2.0;
    std::printf("%-8s %5d %6lld %10.2f %10.1f\n", "prefill", 1, static_cast<long long>(L), us, flops / (us * 1e-6) / 1e12);
  }
  return 0;
}
