// Row blocks of a block-FP8 or per-channel FP8 weight (LinearShard::row_offset, as the hybrid
// models read Qwen3-Next's in_proj_qkvz): a linear of row blocks, merged in any order and
// starting anywhere in a scale block, gives each output column exactly the column of the whole
// weight's output for its stored row (same fp8 codes, same scales, same groups), on the
// scalar level and the best one of this processor. Online FP8 of such row blocks scans the
// stored tensor once per load.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <vector>

#include "loader_test_util.h"
#include "model/checkpoint.h"
#include "model/layers/linear.h"
#include "model/quant_config.h"
#include "model/safetensors_writer.h"
#include "vt/vt.h"

namespace vtllm::model {
namespace {

constexpr int64_t kRows = 40, kK = 48, kBlock = 16;

// "w": [40, 48] random finite codes with random scales; block [16, 16] or per-channel.
std::string WriteCheckpoint(const testing::TempDir& tmp, bool block) {
  std::mt19937 rng(block ? 11 : 12);
  std::vector<uint8_t> w(static_cast<size_t>(kRows * kK));
  for (auto& b : w) {
    b = static_cast<uint8_t>(rng() & 0xFF);
    if ((b & 0x7F) == 0x7F) b = 0x38;  // no NaN weights
  }
  const int64_t srows = block ? (kRows + kBlock - 1) / kBlock : kRows, scols = block ? kK / kBlock : 1;
  std::vector<float> s(static_cast<size_t>(srows * scols));
  std::uniform_real_distribution<float> ud(0.001f, 0.02f);
  for (auto& v : s) v = ud(rng);
  SafetensorsWriter wr;
  wr.Add("w.weight", vt::DType::kF8E4M3, {kRows, kK}, w.data());
  wr.Add(block ? "w.weight_scale_inv" : "w.weight_scale", vt::DType::kF32, {srows, scols}, s.data());
  wr.Write(tmp / "model.safetensors");
  std::ofstream(tmp / "config.json")
      << (block ? R"({"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
                     "weight_block_size": [16, 16]}})"
                : R"({"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized",
          "config_groups": {"g": {"targets": ["Linear"],
            "weights": {"type": "float", "num_bits": 8, "strategy": "channel", "dynamic": false},
            "input_activations": {"type": "float", "num_bits": 8, "strategy": "token", "dynamic": true}}}}})");
  return tmp.path();
}

void CheckRowBlocks(bool block) {
  testing::TempDir tmp;
  const std::string dir = WriteCheckpoint(tmp, block);
  // Layouts of row blocks [first, first + rows): one block starting inside scale block 0;
  // whole scale blocks in order; the stored order split inside a scale block; blocks out of
  // stored order (scale rows mixed within a merged block); blocks starting and ending anywhere.
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> layouts = {
      {{8, 16}}, {{0, 16}, {16, 16}, {32, 8}}, {{0, 8}, {8, 24}, {32, 8}}, {{16, 16}, {0, 8}, {32, 8}},
      {{5, 16}, {30, 7}, {0, 3}}};
  for (vt::CpuIsa isa : {vt::CpuIsa::kScalar, vt::CpuIsa::kBest}) {
    vt::Queue q = vt::Queue::Cpu(2, isa);
    SCOPED_TRACE(vt::CpuIsaName(q.cpu_isa()));
    Checkpoint ckpt = Checkpoint::Open(dir);
    QuantConfig quant = QuantConfig::FromDir(dir);
    ASSERT_EQ(quant.method, block ? QuantMethod::kFp8Block : QuantMethod::kFp8ChannelToken);
    LinearContext ctx{&ckpt, &quant, vt::Device::Cpu(), &q};
    const int64_t T = 3;
    std::vector<float> x(static_cast<size_t>(T * kK));
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    for (auto& v : x) v = nd(rng);
    const vt::Tensor tx = vt::Tensor::FromHost(x.data(), {T, kK}, vt::DType::kF32);
    Linear whole = Linear::Load(ctx, {{"w", kRows}}, kK, false);
    vt::Tensor out_whole = vt::Tensor::Empty({T, kRows}, vt::DType::kF32);
    whole.Apply(q, tx, out_whole);
    std::vector<float> want(static_cast<size_t>(T * kRows));
    out_whole.CopyToHost(want.data());
    for (const auto& layout : layouts) {
      std::vector<LinearShard> shards;
      std::vector<int64_t> stored_row;  // per merged row
      for (const auto& [first, rows] : layout) {
        shards.push_back({"w", rows, first, kRows});
        for (int64_t r = 0; r < rows; ++r) stored_row.push_back(first + r);
      }
      const int64_t N = static_cast<int64_t>(stored_row.size());
      Linear lin = Linear::Load(ctx, shards, kK, false);
      vt::Tensor all = vt::Tensor::Empty({T, N}, vt::DType::kF32);
      lin.Apply(q, tx, all);
      std::vector<vt::Tensor> outs;
      for (const auto& [first, rows] : layout) outs.push_back(vt::Tensor::Empty({T, rows}, vt::DType::kF32));
      lin.ApplyShards(q, tx, outs);
      std::vector<float> got(static_cast<size_t>(T * N));
      all.CopyToHost(got.data());
      int64_t col = 0;
      for (size_t s = 0; s < layout.size(); ++s) {
        const int64_t rows = layout[s].second;
        std::vector<float> shard(static_cast<size_t>(T * rows));
        outs[s].CopyToHost(shard.data());
        for (int64_t t = 0; t < T; ++t)
          for (int64_t n = 0; n < rows; ++n) {
            const float w = want[t * kRows + stored_row[col + n]];
            EXPECT_EQ(got[t * N + col + n], w) << "layout " << layout.size() << " shards, merged row " << col + n;
            EXPECT_EQ(shard[t * rows + n], w) << "shard " << s << " row " << n;
          }
        col += rows;
      }
    }
  }
}

TEST(LinearRowBlocks, BlockFp8RowsKeepTheirStoredScales) { CheckRowBlocks(true); }
TEST(LinearRowBlocks, PerChannelFp8RowsKeepTheirStoredScales) { CheckRowBlocks(false); }

// Online FP8: linears of row blocks of one stored tensor (Qwen3-Next's q, k, v, z of
// in_proj_qkvz) share the load's amax cache, so the tensor is scanned once, and each gives the
// columns of the whole tensor's online linear (one scale over the stored tensor).
TEST(LinearRowBlocks, OnlineFp8ScansAStoredTensorOnceForItsRowBlocks) {
  testing::TempDir tmp;
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  std::vector<uint16_t> w(static_cast<size_t>(kRows * kK));
  for (auto& h : w) h = vt::FloatToBf16(nd(rng));
  SafetensorsWriter wr;
  wr.Add("w.weight", vt::DType::kBF16, {kRows, kK}, w.data());
  wr.Write(tmp / "model.safetensors");
  vt::Queue q = vt::Queue::Cpu(2);
  Checkpoint ckpt = Checkpoint::Open(tmp.path());
  const QuantConfig quant = QuantConfig::Online();
  OnlineFp8AmaxCache cache;
  LinearContext ctx{&ckpt, &quant, vt::Device::Cpu(), &q, nullptr, &cache};
  const int64_t T = 2;
  std::vector<float> x(static_cast<size_t>(T * kK));
  for (auto& v : x) v = nd(rng);
  const vt::Tensor tx = vt::Tensor::FromHost(x.data(), {T, kK}, vt::DType::kF32);
  LinearContext uncached = ctx;
  uncached.amax_cache = nullptr;
  Linear whole = Linear::Load(uncached, {{"w", kRows}}, kK, false);
  vt::Tensor out_whole = vt::Tensor::Empty({T, kRows}, vt::DType::kF32);
  whole.Apply(q, tx, out_whole);
  std::vector<float> want(static_cast<size_t>(T * kRows));
  out_whole.CopyToHost(want.data());
  for (const auto& [first, rows] : std::vector<std::pair<int64_t, int64_t>>{{0, 8}, {8, 8}, {16, 16}, {32, 8}}) {
    Linear lin = Linear::Load(ctx, {{"w", rows, first, kRows}}, kK, false);
    vt::Tensor out = vt::Tensor::Empty({T, rows}, vt::DType::kF32);
    lin.Apply(q, tx, out);
    std::vector<float> got(static_cast<size_t>(T * rows));
    out.CopyToHost(got.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < rows; ++n)
        EXPECT_EQ(got[t * rows + n], want[t * kRows + first + n]) << "rows from " << first << ", row " << n;
  }
  EXPECT_EQ(cache.scans(), 1);
}

}  // namespace
}  // namespace vtllm::model
