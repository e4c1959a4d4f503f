// FP8 GEMM/GEMV on CUDA: TFLOP/s and weight GB/s of MatmulFp8 (as dispatched, and each
// variant) for M in {1, 4, 16, 64, 256, 4096} on Qwen3-8B-shaped projections, against
// cuBLASLt FP8 and cuBLASLt BF16, and a device-to-device copy measured in the same run.
// Timings per kernel:
//  - 'call': the median of single calls, each between its own pair of CUDA events (so it
//    includes the launch and the ramp of one kernel);
//  - 'chain': the median over 5 batches of 20 back-to-back calls divided by 20, as in a
//    forward pass where each kernel follows the last (GB/s and TFLOP/s use it), and
//    'issue', the host time the 20 calls took to issue, per call: where issue is close to
//    chain, the host's launches bound the chain, not the GPU;
//  - 'graph' (M = 1): the same 20 calls captured once into a CUDA graph and replayed, the
//    way an engine replays its decode step (no host launch cost per call; programmatic
//    dependent launches stay overlapped as graph edges), with its GB/s.
// Weights rotate through copies totalling >= 256 MiB so that they stream from HBM rather
// than L2. The read roofline is a kernel that only streams a weight-sized buffer, timed
// the same ways. `--gemv` measures M = 1 only (the decode kernels, a shorter run).
// `--block` measures block-FP8 MatmulFp8GroupScaled (dispatched and naive) beside cuBLASLt's
// per-tensor FP8. `--rows` measures the row kernels of a decoder layer instead (residual add + RMSNorm +
// FP8 quantization, SiLU-mul + FP8 quantization) for 1 to 4096 rows of the 0.6B and 8B
// widths, with the bytes each reads and writes per second. `--floor` measures the floor of a
// replayed chain of dependent kernels of a decode step's grid shapes (cuda_chain_floor.cu).
// `--persistent` measures a 0.6B-shaped FP8 decode step as one persistent kernel (grid
// barriers or tagged words between its stages; cuda_persistent_floor.cu), checked against
// the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda_bench_util.h"
#include "vt/cuda/matmul.h"
#include "vt/cuda/runtime.h"
#include "vt/vt.h"

namespace {

using vtllm_bench::EventMedianUs;

// Median microseconds of fn(i) over `iters` calls, timed with events on `stream`.
double MedianUs(cudaStream_t stream, int iters, const std::function<void(int)>& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) CHECK_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    CHECK_CUDA(cudaEventRecord(ev[2 * i], stream));
    fn(i);
    CHECK_CUDA(cudaEventRecord(ev[2 * i + 1], stream));
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> t(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t[i] = ms * 1000.0;
  }
  for (auto& e : ev) CHECK_CUDA(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  return t[iters / 2];
}

std::vector<uint8_t> RandomFp8(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(0, 255);
  std::vector<uint8_t> v(n);
  for (auto& b : v) {
    do b = static_cast<uint8_t>(d(rng));
    while ((b & 0x7F) == 0x7F || (b & 0x78) >= 0x60);  // finite, |x| < 16: no overflow in BF16 either
  }
  return v;
}

// Per-call microseconds of fn(i) run `chain` times back to back between two events (the
// median over `batches` batches), and the host time spent issuing them, per call.
struct ChainTime {
  double us, issue_us;
};
ChainTime ChainUs(cudaStream_t stream, int batches, int chain, const std::function<void(int)>& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  std::vector<double> issue;
  const double us = EventMedianUs(stream, batches, chain, [&](int b) {
    const auto h0 = std::chrono::steady_clock::now();
    for (int i = 0; i < chain; ++i) fn(b * chain + i);
    issue.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() / chain);
  });
  std::sort(issue.begin(), issue.end());
  return {us, issue[issue.size() / 2]};
}

// Per-call microseconds of fn(0..chain-1) captured into one CUDA graph, replayed `reps`
// times (median); -1 if the calls cannot be captured.
double GraphUs(cudaStream_t stream, int reps, int chain, const std::function<void(int)>& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  bool captured = true;
  try {
    for (int i = 0; i < chain; ++i) fn(i);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "graph capture: %s\n", e.what());
    captured = false;
  }
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || graph == nullptr || !captured) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return -1.0;
  }
  cudaGraphExec_t exec = nullptr;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) CHECK_CUDA(cudaGraphLaunch(exec, stream));
  const double us = EventMedianUs(stream, reps, chain, [&](int) { CHECK_CUDA(cudaGraphLaunch(exec, stream)); });
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return us;
}

}  // namespace

void LaunchStreamRead(const void* p, int64_t bytes, uint32_t* sink, int sms, cudaStream_t stream);
void RunChainFloor();
void RunPersistentFloor();

int main(int argc, char** argv) {
  // --gemv: only M = 1 (cuBLASLt FP8, the dispatched kernel and every GEMV variant).
  const bool gemv_only = argc > 1 && std::string(argv[1]) == "--gemv";
  const bool rows_only = argc > 1 && std::string(argv[1]) == "--rows";
  // --block: MatmulFp8GroupScaled (128 x 128 weight blocks, 1 x 128 activation groups) as
  // dispatched and by its naive kernel, against cuBLASLt's per-tensor FP8 on the same codes.
  const bool block_only = argc > 1 && std::string(argv[1]) == "--block";
  if (vt::CudaDeviceCount() == 0) {
    std::printf("cuda_fp8_bench: no CUDA device, nothing measured\n");
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "--floor") {
    RunChainFloor();
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "--persistent") {
    RunPersistentFloor();
    return 0;
  }
  vt::Queue q = vt::Queue::Cuda(0);
  auto stream = static_cast<cudaStream_t>(vt::cuda::NativeStream(q));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

  // Device copy: 1 GiB, bytes read + written per second.
  {
    const size_t n = size_t{1} << 30;
    vt::Tensor src = vt::Tensor::Empty({static_cast<int64_t>(n)}, vt::DType::kU8, vt::Device::Cuda(0));
    vt::Tensor dst = vt::Tensor::Empty({static_cast<int64_t>(n)}, vt::DType::kU8, vt::Device::Cuda(0));
    CHECK_CUDA(cudaMemsetAsync(src.data(), 1, n, stream));
    const double us = MedianUs(stream, 20, [&](int) {
      CHECK_CUDA(cudaMemcpyAsync(dst.data(), src.data(), n, cudaMemcpyDeviceToDevice, stream));
    });
    std::printf("d2d copy 1 GiB: %.1f us, %.0f GB/s (read+write)\n", us, 2.0 * n / us / 1e3);
  }

  // Read roofline: stream weight-sized buffers (rotating through >= 256 MiB).
  {
    vt::Tensor sink = vt::Tensor::Empty({16}, vt::DType::kU8, vt::Device::Cuda(0));
    for (int64_t mb : {16, 48, 144}) {
      const int64_t bytes = mb << 20;
      const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{256} << 20) / bytes + 1));
      std::vector<vt::Tensor> bufs;
      for (int c = 0; c < copies; ++c) {
        bufs.push_back(vt::Tensor::Empty({bytes}, vt::DType::kU8, vt::Device::Cuda(0)));
        CHECK_CUDA(cudaMemsetAsync(bufs.back().data(), 1, static_cast<size_t>(bytes), stream));
      }
      auto read = [&](int i) {
        LaunchStreamRead(bufs[i % copies].data(), bytes, static_cast<uint32_t*>(sink.data()),
                         prop.multiProcessorCount, stream);
      };
      const double call = MedianUs(stream, 40, read);
      const ChainTime chain = ChainUs(stream, 5, 20, read);
      const double graph = GraphUs(stream, 9, 20, read);
      std::printf("read roofline %3lld MiB: call %.2f us (%.0f GB/s), chain %.2f us (%.0f GB/s; issue %.2f us), "
                  "graph %.2f us (%.0f GB/s)\n",
                  static_cast<long long>(mb), call, bytes / call / 1e3, chain.us, bytes / chain.us / 1e3,
                  chain.issue_us, graph, bytes / graph / 1e3);
    }
  }

  if (rows_only) {
    std::printf("%-28s %5s %6s %9s %9s %10s\n", "kernel", "rows", "width", "chain_us", "graph_us", "GB/s(graph)");
    for (const int64_t H : {int64_t{1024}, int64_t{4096}}) {
      const int64_t I = 3 * H;  // the MLP width of both shapes
      for (const int64_t M : {int64_t{1}, int64_t{16}, int64_t{64}, int64_t{256}, int64_t{1024}, int64_t{4096}}) {
        const auto dev = vt::Device::Cuda(0);
        vt::Tensor x = vt::Tensor::Empty({M, H}, vt::DType::kBF16, dev);
        vt::Tensor res = vt::Tensor::Empty({M, H}, vt::DType::kBF16, dev);
        vt::Tensor w = vt::Tensor::Empty({H}, vt::DType::kBF16, dev);
        vt::Tensor qo = vt::Tensor::Empty({M, H}, vt::DType::kF8E4M3, dev);
        vt::Tensor no = vt::Tensor::Empty({M, H}, vt::DType::kBF16, dev);
        vt::Tensor gu = vt::Tensor::Empty({M, 2 * I}, vt::DType::kBF16, dev);
        vt::Tensor qi = vt::Tensor::Empty({M, I}, vt::DType::kF8E4M3, dev);
        for (auto* t : {&x, &res, &w, &gu}) CHECK_CUDA(cudaMemsetAsync(t->data(), 0x3c, t->nbytes(), stream));
        const int chain = 20;
        auto row = [&](const char* name, double bytes, const std::function<void(int)>& fn) {
          const ChainTime ct = ChainUs(stream, 5, chain, fn);
          const double graph = GraphUs(stream, 9, chain, fn);
          std::printf("%-28s %5lld %6lld %9.2f %9.2f %10.0f\n", name, static_cast<long long>(M),
                      static_cast<long long>(name[0] == 'S' ? I : H), ct.us, graph, bytes / graph / 1e3);
        };
        const double mh = static_cast<double>(M * H);
        // x read, residual read and written, FP8 written (the weight row stays in L2).
        row("RmsNormQuantFp8+residual", 7.0 * mh, [&](int) { vt::RmsNormQuantFp8(q, qo, x, w, 1e-6f, 0.01f, &res); });
        row("RmsNorm+residual (bf16)", 8.0 * mh, [&](int) { vt::RmsNorm(q, no, x, w, 1e-6f, &res); });
        row("SiluMulQuantFp8", 5.0 * static_cast<double>(M * I),
            [&](int) { vt::SiluMulQuantFp8(q, qi, gu, 0.01f); });
      }
    }
    q.Synchronize();
    return 0;
  }

  struct ShapeNK {
    const char* name;
    int64_t N, K;
  };
  const ShapeNK shapes[] = {{"qkv/gate_up-like 4096->12288", 12288, 4096},
                            {"down-like 12288->4096", 4096, 12288},
                            {"o_proj-like 4096->4096", 4096, 4096},
                            {"qkv-like 4096->6144", 6144, 4096},
                            {"0.6B gate_up 1024->6144", 6144, 1024},
                            {"0.6B qkv 1024->4096", 4096, 1024},
                            {"0.6B o 2048->1024", 1024, 2048},
                            {"0.6B down 3072->1024", 1024, 3072}};
  const std::vector<int64_t> Ms = gemv_only    ? std::vector<int64_t>{1}
                                  : block_only ? std::vector<int64_t>{1, 16, 256, 2048, 4096}
                                               : std::vector<int64_t>{1, 4, 16, 64, 256, 4096};
  std::mt19937 rng(1);
  std::printf("%-30s %5s %-16s %9s %9s %9s %9s %10s %8s %9s %9s\n", "shape", "M", "kernel", "call_us", "chain_us",
              "issue_us", "TFLOP/s", "weightGB/s", "vs_lt", "graph_us", "graphGB/s");
  for (const auto& s : shapes) {
    const int64_t N = s.N, K = s.K;
    const size_t wbytes = static_cast<size_t>(N * K);
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t{256} << 20) / wbytes + 1));
    const auto wh = RandomFp8(wbytes, rng);
    std::vector<vt::Tensor> w8, w16;
    vt::Tensor w8_0 = vt::Tensor::FromHost(wh.data(), {N, K}, vt::DType::kF8E4M3, vt::Device::Cuda(0));
    for (int c = 0; c < copies; ++c) {
      w8.push_back(w8_0.To(vt::Device::Cuda(0)));
      w8.back().SetReadOnly();  // as a model marks its weights
      vt::Tensor b16 = vt::Tensor::Empty({N, K}, vt::DType::kBF16, vt::Device::Cuda(0));
      vt::Cast(q, b16, w8.back());
      w16.push_back(b16);
    }
    for (int64_t M : Ms) {
      const auto ah = RandomFp8(static_cast<size_t>(M * K), rng);
      vt::Tensor a8 = vt::Tensor::FromHost(ah.data(), {M, K}, vt::DType::kF8E4M3, vt::Device::Cuda(0));
      vt::Tensor a16 = vt::Tensor::Empty({M, K}, vt::DType::kBF16, vt::Device::Cuda(0));
      vt::Cast(q, a16, a8);
      vt::Tensor out = vt::Tensor::Empty({M, N}, vt::DType::kBF16, vt::Device::Cuda(0));
      const float alpha = 1e-3f;
      const int iters = M >= 1024 ? 15 : 40;
      const double flops = 2.0 * M * N * K;
      const int chain = M >= 1024 ? 5 : 20;
      double lt_us = 0;
      // Times fn each way and prints a row; returns the chain time. Graph replay for M = 1
      // (decode) only.
      auto measure = [&](const char* kernel, double wb, const std::function<void(int)>& fn) {
        const double call = MedianUs(stream, iters, fn);
        const ChainTime ct = ChainUs(stream, 5, chain, fn);
        const double us = ct.us;
        const double graph = M == 1 ? GraphUs(stream, 9, chain, fn) : -1.0;
        std::printf("%-30s %5lld %-16s %9.2f %9.2f %9.2f %9.1f %10.0f %8.2f", s.name, static_cast<long long>(M), kernel,
                    call, us, ct.issue_us, flops / us / 1e6, wb / us / 1e3, lt_us > 0 ? lt_us / us : 1.0);
        if (graph > 0)
          std::printf(" %9.2f %9.0f\n", graph, wb / graph / 1e3);
        else
          std::printf(" %9s %9s\n", "-", "-");
        return us;
      };
      const double wb = static_cast<double>(wbytes);
      lt_us = measure("cublasLt-fp8", wb, [&](int i) { vt::cuda::MatmulFp8Lt(q, out, a8, w8[i % copies], alpha, nullptr); });
      if (block_only) {
        const int64_t G = (K + 127) / 128, NB = (N + 127) / 128;
        std::vector<float> sah(static_cast<size_t>(M * G)), sbh(static_cast<size_t>(NB * G));
        std::uniform_real_distribution<float> sd(1e-3f, 2e-3f);
        for (auto& x : sah) x = sd(rng);
        for (auto& x : sbh) x = sd(rng);
        vt::Tensor sa = vt::Tensor::FromHost(sah.data(), {M, G}, vt::DType::kF32, vt::Device::Cuda(0));
        vt::Tensor sb = vt::Tensor::FromHost(sbh.data(), {NB, G}, vt::DType::kF32, vt::Device::Cuda(0));
        sb.SetReadOnly();
        measure("vt-block", wb, [&](int i) { vt::MatmulFp8GroupScaled(q, out, a8, sa, w8[i % copies], sb, 128, 128); });
        if (M <= 16)
          measure("vt-block-naive", wb, [&](int i) {
            vt::cuda::MatmulFp8GroupScaledNaive(q, out, a8, sa, w8[i % copies], sb, 128, 128, nullptr);
          });
        continue;
      }
      measure("vt-MatmulFp8", wb, [&](int i) { vt::MatmulFp8(q, out, a8, w8[i % copies], alpha); });
      if (M == 1) {
        // The weights are read-only (as a model's are), so MatmulFp8Gemv loads them early;
        // the other launches of the same kernel for comparison.
        measure("vt-gemv", wb, [&](int i) { vt::cuda::MatmulFp8Gemv(q, out, a8, w8[i % copies], alpha, nullptr); });
        const std::pair<const char*, vt::cuda::GemvLaunch> launches[] = {
            {"gemv-writable", vt::cuda::kGemvDefaultLaunch},          // a weight that is not read-only
            {"gemv-early+l2pf", {true, 16u << 10, true}},             // early loads and the L2 prefetch
            {"gemv-pdl-only", {true, 0, false}},                      // overlapped, nothing before the wait
            {"vt-gemv-plain", {}}};                                   // an ordinary launch
        for (const auto& [name, how] : launches)
          measure(name, wb, [&, how = how](int i) {
            vt::cuda::MatmulFp8GemvVariant(q, out, a8, w8[i % copies], alpha, nullptr, -1, how);
          });
        // Each tuning with early loads, and with the launch for a weight that is not read-only.
        for (int v = 0; v < vt::cuda::GemvVariantCount(); ++v) {
          // (skipping tunings that would leave three quarters of their threads idle)
          if (K > vt::cuda::GemvVariantMaxK(v) || vt::cuda::GemvVariantMaxK(v) >= 4 * K) continue;
          for (const bool early : {true, false}) {
            const std::string name = vt::cuda::GemvVariantName(v) + (early ? "" : "-l2pf");
            const vt::cuda::GemvLaunch how = early ? vt::cuda::kGemvReadOnlyLaunch : vt::cuda::kGemvDefaultLaunch;
            measure(name.c_str(), wb, [&](int i) {
              vt::cuda::MatmulFp8GemvVariant(q, out, a8, w8[i % copies], alpha, nullptr, v, how);
            });
          }
        }
      }
      if (gemv_only) continue;
      if (M <= 16)
        measure("vt-smallM", wb, [&](int i) { vt::cuda::MatmulFp8Small(q, out, a8, w8[i % copies], alpha, nullptr); });
      if (M <= 16)
        measure("vt-splitK", wb, [&](int i) { vt::cuda::MatmulFp8SplitK(q, out, a8, w8[i % copies], alpha, nullptr); });
      measure("vt-viaBf16", wb, [&](int i) { vt::cuda::MatmulFp8ViaBf16(q, out, a8, w8[i % copies], alpha, nullptr); });
      measure("cublasLt-bf16", 2.0 * wb, [&](int i) { vt::Matmul(q, out, a16, w16[i % copies]); });
    }
  }
  q.Synchronize();
  return 0;
}
