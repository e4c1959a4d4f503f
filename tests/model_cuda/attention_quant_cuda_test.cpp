// PagedAttentionQuantFp8 on CUDA in a model: the decode kernels' stores write o_proj's FP8
// input (StoreAttnOut), so a decode step runs one QuantFp8Static kernel fewer per layer. A
// random Qwen3-0.6B-shaped static-FP8 checkpoint of two layers (head size 128, 16 query heads
// over 8 KV heads: the tensor-core decode kernel with its splits combined in the launch for a
// BF16 cache, the CUDA-core / general kernels for an FP8 cache) is loaded twice on the GPU,
// fused (the default) and with LoadOptions::fuse_quant off: the logits of a prompt and of
// greedy decode steps (eager and replayed from CUDA graphs) are bit-identical, the fused op
// ran once per layer and forward, and the fused model ran no standalone quantizer at decode (the norms', SiLU-mul's and the
// attention's codes all come from fused kernels; on the CPU the attention's would take one
// per layer and step).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/config.h"
#include "model/fused_logits.h"
#include "model/loader_test_util.h"
#include "model/model_oracle.h"
#include "vt/vt.h"

namespace vtllm::model {
namespace {

using vt::DeviceType;
using vt::OpId;

int64_t CudaDispatches(OpId op) { return vt::DispatchCount(op, DeviceType::kCUDA); }

TEST(AttentionQuantFp8Cuda, DecodeKernelsWriteTheCodes) {
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("q06");
  ASSERT_TRUE(testing::RunRandomCheckpoint(
      dir, "--preset qwen3-0.6b --layers 2 --seed 9 --threads 8 --format fp8-modelopt"));
  const int64_t L = ModelConfig::FromDir(dir).num_hidden_layers;
  const std::vector<int32_t> prompt = {1, 7, 3, 12, 5, 9, 2, 40, 41, 1000};
  const int steps = 6;
  for (const char* kv : {"auto", "fp8"}) {
    SCOPED_TRACE(kv);
    LoadOptions opt{.device = vt::Device::Cuda(0), .dtype = vt::DType::kBF16, .cpu_threads = 2, .progress = false};
    opt.kv_cache_dtype = kv;
    std::vector<float> fused, unfused;
    int64_t fused_forwards = 0, unfused_forwards = 0, quant_fused = 0, quant_unfused = 0;
    {
      auto model = Model::Load(dir, opt);
      const int64_t op0 = CudaDispatches(OpId::kPagedAttentionQuantFp8), q0 = CudaDispatches(OpId::kQuantFp8Static);
      fused = testing::RunLogits(*model, prompt, steps);
      const int64_t ran = CudaDispatches(OpId::kPagedAttentionQuantFp8) - op0;
      EXPECT_EQ(ran % L, 0) << ran;
      fused_forwards = ran / L;
      quant_fused = CudaDispatches(OpId::kQuantFp8Static) - q0;
    }
    opt.fuse_quant = false;
    {
      auto model = Model::Load(dir, opt);
      const int64_t op0 = CudaDispatches(OpId::kPagedAttentionQuantFp8), a0 = CudaDispatches(OpId::kPagedAttention),
                    q0 = CudaDispatches(OpId::kQuantFp8Static);
      unfused = testing::RunLogits(*model, prompt, steps);
      EXPECT_EQ(CudaDispatches(OpId::kPagedAttentionQuantFp8) - op0, 0);
      unfused_forwards = (CudaDispatches(OpId::kPagedAttention) - a0) / L;
      quant_unfused = CudaDispatches(OpId::kQuantFp8Static) - q0;
    }
    // Decode steps replay a recorded CUDA graph, which dispatches nothing: the forwards that
    // dispatched ops are the prompt's, the recording one's and any eager step's, the same
    // number in both models.
    EXPECT_GE(fused_forwards, 2);
    EXPECT_EQ(fused_forwards, unfused_forwards);
    // Only the prompt's attention codes may come from QuantFp8Static (after the tensor-core
    // prefill kernel); the unfused model quantizes each linear's input itself.
    EXPECT_LE(quant_fused, L);
    EXPECT_GE(quant_unfused, 3 * L * unfused_forwards);
    testing::ExpectSameLogits(fused, unfused);
  }
}

}  // namespace
}  // namespace vtllm::model
