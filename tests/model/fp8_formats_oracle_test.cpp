// FP8 as users download it, against float64 emulations of vLLM's math made by
// tools/oracle/fp8_formats_oracle.py (tests/fixtures/models):
//   qwen3-fp8-block-tiny    block FP8 as the official Qwen3-*-FP8 releases store it
//                           (weight_scale_inv per 128x128 block, activations quantized per
//                           token and 128 columns, s = max(amax, 1e-10) / 448, q = x / s);
//   qwen3-fp8-dynamic-tiny  compressed-tensors per-channel weights, dynamic per-token
//                           activations (s = max(amax / 448, 1 / (448 * 512))).
// hidden 192 = 1.5 blocks: the last K tile and the down projection's last block row end
// partway. With f32 activations only summation orders differ, so positions match within 1e-4
// (measured 5e-6) except where one activation sits on an e4m3 rounding boundary and its
// code flips between the two (block fixture, prompt 2: one position off by 0.034 with the
// AVX-512 kernels; per-channel fixture, prompt 3 of 61 tokens: 0.025 with the AVX2 ones, the
// first position still within 3e-6): the all-positions bound of both cases is 0.05 for that,
// the first position's stays 1e-4, and greedy tokens must agree up to the first near-tie.
// BF16 activations move fp8 codes where a value sits near a rounding boundary: looser.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "loader_test_util.h"
#include "model_oracle.h"
#include "vt/cpu/matmul/kernels.h"

namespace vtllm::model {
namespace {

const std::string kBlock = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen3-fp8-block-tiny";
const std::string kDynamic = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen3-fp8-dynamic-tiny";

TEST(Fp8FormatsOracle, BlockFp8MatchesTheEmulationAtEveryPosition) {
  namespace mm = vt::cpu::matmul;
  const int64_t weights_before = mm::Fp8GroupScaledPackedWeights();
  auto model = Model::Load(kBlock, testing::CpuOptions(vt::DType::kF32));
  EXPECT_EQ(model->quant().method, QuantMethod::kFp8Block);
  const int64_t laid_out = mm::Fp8GroupScaledPackedWeights() - weights_before;
  const int64_t avx2_before = mm::Fp8GroupScaledAvx2Calls(), packed_before = mm::Fp8GroupScaledPackedCalls();
  const int64_t avx512_before = mm::Fp8GroupScaledAvx512Calls();
  testing::CheckAgainstOracle(*model, kBlock, {.first_row = 1e-4, .all_rows = 0.05}, "block fp8 / f32 act");
  // The block linears' weights were laid out at load on every x86 level from AVX2, and every
  // call then multiplied the laid-out copy.
  EXPECT_EQ(laid_out > 0, testing::LaysOutGroupScaledWeights());
  if (laid_out > 0) {
    EXPECT_GT(mm::Fp8GroupScaledPackedCalls() - packed_before, 0);
    EXPECT_EQ(mm::Fp8GroupScaledAvx2Calls() - avx2_before, 0);
    EXPECT_EQ(mm::Fp8GroupScaledAvx512Calls() - avx512_before, 0);
  }
}

TEST(Fp8FormatsOracle, PerChannelPerTokenMatchesTheEmulationAtEveryPosition) {
  auto model = Model::Load(kDynamic, testing::CpuOptions(vt::DType::kF32));
  EXPECT_EQ(model->quant().method, QuantMethod::kFp8ChannelToken);
  testing::CheckAgainstOracle(*model, kDynamic, {.first_row = 1e-4, .all_rows = 0.05}, "channel/token fp8 / f32 act");
}

TEST(Fp8FormatsOracle, Bf16ActivationsAreCloseToTheEmulation) {
  for (const std::string& dir : {kBlock, kDynamic}) {
    auto model = Model::Load(dir, testing::CpuOptions(vt::DType::kBF16));
    testing::CheckAgainstOracle(*model, dir,
                                {.first_row = 0.4, .all_rows = 0.6, .greedy_to_near_tie = false, .greedy_min_agree = 0},
                                (dir.substr(dir.rfind('/') + 1) + " / bf16 act").c_str());
  }
}

}  // namespace
}  // namespace vtllm::model

namespace vtllm::model {
namespace {

// A copy of the block fixture whose safetensors file `edit` may change: the header text (same
// length, so the data offsets hold) and the data bytes, given each tensor's data offsets.
std::string EditedBlockCopy(const testing::TempDir& tmp,
                            const std::function<void(std::string& header, std::string& data,
                                                     const nlohmann::json& h)>& edit) {
  for (const char* f : {"config.json", "generation_config.json"})
    std::filesystem::copy_file(kBlock + "/" + f, tmp / f);
  const std::string bytes = testing::ReadBytes(kBlock + "/model.safetensors");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  std::string header = bytes.substr(8, n), data = bytes.substr(8 + n);
  edit(header, data, nlohmann::json::parse(header));
  testing::WriteRawSafetensors(tmp / "model.safetensors", header, data);
  return tmp.path();
}

void SetFloat(std::string& data, const nlohmann::json& h, const std::string& name, int64_t i, float v) {
  const int64_t off = h.at(name).at("data_offsets")[0].get<int64_t>() + 4 * i;
  std::memcpy(data.data() + off, &v, 4);
}

const std::string kScale = "model.layers.1.mlp.down_proj.weight_scale_inv";

// Malformed block scales are load errors naming the tensor (and the value or shape).
TEST(Fp8FormatsOracle, MalformedBlockScalesNameTheTensor) {
  for (float bad : {0.0f, -1.0f, std::nanf(""), INFINITY}) {
    testing::TempDir tmp;
    const std::string dir = EditedBlockCopy(tmp, [&](std::string&, std::string& data, const nlohmann::json& h) {
      SetFloat(data, h, kScale, 1, bad);
    });
    testing::ExpectLoadError([&] { Model::Load(dir, testing::CpuOptions(vt::DType::kF32)); },
                             {kScale, "finite and > 0", "element 1"});
  }
  {  // missing: the name changed, same length
    testing::TempDir tmp;
    const std::string dir = EditedBlockCopy(tmp, [&](std::string& header, std::string&, const nlohmann::json&) {
      const size_t at = header.find(kScale);
      ASSERT_NE(at, std::string::npos);
      header.replace(at + kScale.size() - 3, 3, "inx");
    });
    testing::ExpectLoadError([&] { Model::Load(dir, testing::CpuOptions(vt::DType::kF32)); }, {kScale, "missing"});
  }
  {  // wrong shape: [2, 3] (down_proj: N 192, K 384) written as [3, 2]
    testing::TempDir tmp;
    const std::string dir = EditedBlockCopy(tmp, [&](std::string& header, std::string&, const nlohmann::json& h) {
      ASSERT_EQ(h.at(kScale).at("shape"), nlohmann::json({2, 3}));
      const size_t at = header.find("[2,3]", header.find(kScale));
      ASSERT_NE(at, std::string::npos) << header.substr(header.find(kScale), 120);
      header.replace(at, 5, "[3,2]");
    });
    testing::ExpectLoadError([&] { Model::Load(dir, testing::CpuOptions(vt::DType::kF32)); }, {kScale, "[3, 2]", "expected [2, 3]"});
  }
}

}  // namespace
}  // namespace vtllm::model
