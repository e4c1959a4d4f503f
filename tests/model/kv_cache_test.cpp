// The paged KV cache: block allocation, slot mapping, and the step input of a batch.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/resource.h>
#endif

#include "model/kv_cache.h"
#include "model/model.h"
#include "model/step_input.h"
#include "model_oracle.h"
#include "vt/error.h"

namespace vtllm::model {
namespace {

KvCacheSpec Spec(int64_t blocks, int64_t block_size) {
  KvCacheSpec s;
  s.num_layers = 2;
  s.num_kv_heads = 1;
  s.head_dim = 4;
  s.block_size = block_size;
  s.num_blocks = blocks;
  s.dtype = vt::DType::kF32;
  return s;
}


TEST(KvCache, ReservesBlocksAndMapsPositionsToSlots) {
  KvCache cache(Spec(5, 4));
  EXPECT_EQ(cache.key(0).shape(), (vt::Shape{5, 4, 1, 4}));
  SequenceKv a, b;
  cache.Reserve(a, 6);  // 2 blocks
  cache.Reserve(b, 1);  // 1 block
  EXPECT_EQ(a.block_table.size(), 2u);
  EXPECT_EQ(cache.num_free_blocks(), 2);
  a.num_tokens = 6;
  cache.Reserve(a, 2);  // 8 tokens still fit in 2 blocks
  EXPECT_EQ(a.block_table.size(), 2u);
  cache.Reserve(a, 3);  // 9..11 need a third
  EXPECT_EQ(a.block_table.size(), 3u);
  for (int64_t p = 0; p < 11; ++p)
    EXPECT_EQ(cache.SlotOf(a, p), a.block_table[p / 4] * 4 + p % 4);
  EXPECT_THROW(cache.SlotOf(a, 12), vt::Error);
  // Not enough blocks: an error naming the counts, and nothing taken.
  try {
    cache.Reserve(b, 9);
    FAIL() << "no error";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("only 1 of 5 are free"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.num_free_blocks(), 1);
  cache.Release(a);
  EXPECT_EQ(cache.num_free_blocks(), 4);
  EXPECT_TRUE(a.block_table.empty());
}

// A host cache's pages are touched when it is made, so the KV writes of serving steps do not
// fault them in (and clear them) one by one: writing a byte into every 4 KiB of a 64 MiB
// cache takes (almost) no page faults on this thread. Untouched, it takes one per page (4 KiB
// pages) or one per 2 MiB (transparent huge pages): 32 or more. Its bytes read as zeros.
TEST(KvCache, HostCachePagesAreTouchedWhenMade) {
#if defined(__linux__) && defined(RUSAGE_THREAD)
  KvCacheSpec s;
  s.num_layers = 2;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.block_size = 16;
  s.num_blocks = 512;  // 16 MiB a layer's keys or values (BF16): 64 MiB in all
  s.dtype = vt::DType::kBF16;
  KvCacheTensors cache(s);
  std::vector<vt::Tensor> all;
  for (int64_t l = 0; l < s.num_layers; ++l) {
    all.push_back(cache.key(l));
    all.push_back(cache.value(l));
  }
  size_t bytes = 0, nonzero = 0;
  for (const vt::Tensor& t : all) {
    const auto* p = static_cast<const unsigned char*>(t.data());
    for (size_t o = 0; o < t.nbytes(); o += 4096) nonzero += p[o] != 0;
    bytes += t.nbytes();
  }
  EXPECT_EQ(nonzero, 0u);
  ASSERT_EQ(bytes, size_t{64} << 20);
  rusage before{}, after{};
  ASSERT_EQ(getrusage(RUSAGE_THREAD, &before), 0);
  for (const vt::Tensor& t : all) {
    auto* p = static_cast<unsigned char*>(t.data());
    for (size_t o = 0; o < t.nbytes(); o += 4096) p[o] = 1;
  }
  ASSERT_EQ(getrusage(RUSAGE_THREAD, &after), 0);
  EXPECT_LT(after.ru_minflt - before.ru_minflt, 8) << "page faults while writing a made cache";
#else
  GTEST_SKIP() << "per-thread page-fault counts (RUSAGE_THREAD) are Linux's";
#endif
}

TEST(StepInput, RowsFollowEachSequencesBlockTable) {
  KvCache cache(Spec(8, 2));
  SequenceKv a, b;
  cache.Reserve(b, 3);  // b gets blocks first, so a's blocks are not 0, 1, ...
  b.num_tokens = 3;
  cache.Reserve(b, 1);
  cache.Reserve(a, 3);
  StepInput step;
  step.Clear(2);
  const std::vector<int32_t> ta = {7, 8, 9}, tb = {5};
  EXPECT_EQ(step.AddSequence(ta, 0, a.block_table, 2), 0);
  EXPECT_EQ(step.AddSequence(tb, 3, b.block_table, 2), 3);
  EXPECT_EQ(step.num_tokens(), 4);
  EXPECT_EQ(step.token_ids, (std::vector<int32_t>{7, 8, 9, 5}));
  EXPECT_EQ(step.positions, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(step.slot_mapping[0], a.block_table[0] * 2);
  EXPECT_EQ(step.slot_mapping[2], a.block_table[1] * 2);
  EXPECT_EQ(step.slot_mapping[3], b.block_table[1] * 2 + 1);
  for (int64_t p = 0; p < 3; ++p) EXPECT_EQ(step.slot_mapping[p], cache.SlotOf(a, p));
  EXPECT_EQ(step.seq_lens, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(step.query_start_loc, (std::vector<int32_t>{0, 3, 4}));
  ASSERT_EQ(step.block_tables.size(), 4u);
  EXPECT_EQ(step.block_tables[0], a.block_table[0]);
  EXPECT_EQ(step.block_tables[2], b.block_table[0]);
  // A table that does not cover the new positions, or is wider than the stride, is an error.
  EXPECT_THROW(step.AddSequence(ta, 2, a.block_table, 2), vt::Error);
  const std::vector<int32_t> wide = {0, 1, 2};
  EXPECT_THROW(step.AddSequence(tb, 0, wide, 2), vt::Error);
}

// The engine budgets a hybrid model's recurrent state as max_num_seqs * StateBytesPerSlot()
// and its KV blocks at KvCacheBytesPerBlock() each (engine.cpp); both are the bytes of the
// tensors MakeKvCacheTensors allocates for those counts, for each hybrid fixture with f32 and
// with bf16 activations (the conv state is kept in the activation dtype).
TEST(KvCacheBytes, HybridBudgetIsWhatTheCacheAllocates) {
  const std::string models = std::string(VTLLM_FIXTURES_DIR) + "/models/";
  for (const char* name : {"qwen3-next-tiny", "qwen3_5-tiny", "qwen3_5-moe-tiny"}) {
    for (vt::DType act : {vt::DType::kF32, vt::DType::kBF16}) {
      SCOPED_TRACE(std::string(name) + " " + std::string(vt::DTypeName(act)));
      auto model = Model::Load(models + name, testing::CpuOptions(act));
      ASSERT_TRUE(model->has_recurrent_state());
      const int64_t blocks = 3, block_size = 16, slots = 5;
      const KvCacheTensors t = model->MakeKvCacheTensors(blocks, block_size, slots);
      ASSERT_GT(t.spec().state.num_layers, 0);
      int64_t state = 0, kv = 0;
      for (int64_t l = 0; l < t.spec().state.num_layers; ++l) {
        const LayerState& st = t.state(l);
        for (const vt::Tensor* x : {&st.conv_q, &st.conv_k, &st.conv_v, &st.ssm})
          state += static_cast<int64_t>(x->nbytes());
      }
      for (int64_t l = 0; l < t.spec().num_layers; ++l)
        kv += static_cast<int64_t>(t.key(l).nbytes() + t.value(l).nbytes());
      EXPECT_EQ(state, slots * model->StateBytesPerSlot());
      EXPECT_EQ(kv, blocks * model->KvCacheBytesPerBlock(block_size));
    }
  }
}

}  // namespace
}  // namespace vtllm::model
