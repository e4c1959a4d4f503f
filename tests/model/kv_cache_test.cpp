// The paged KV cache: block allocation, slot mapping and the attention metadata of a batch.
#include <gtest/gtest.h>

#include <vector>

#include "model/kv_cache.h"
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

std::vector<int64_t> ToVec64(const vt::Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  t.CopyToHost(v.data());
  return v;
}
std::vector<int32_t> ToVec32(const vt::Tensor& t) {
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  t.CopyToHost(v.data());
  return v;
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

TEST(KvCache, BatchMetadataFollowsEachSequencesBlockTable) {
  KvCache cache(Spec(8, 2));
  SequenceKv a, b;
  cache.Reserve(b, 3);  // b gets blocks first, so a's blocks are not 0, 1, ...
  b.num_tokens = 3;
  cache.Reserve(b, 1);
  cache.Reserve(a, 3);
  const StepSequence steps[] = {{&a, 3}, {&b, 1}};
  AttentionMetadata m = BuildAttentionMetadata(cache, steps);
  EXPECT_EQ(m.num_tokens, 4);
  EXPECT_EQ(ToVec64(m.positions), (std::vector<int64_t>{0, 1, 2, 3}));
  const std::vector<int64_t> slots = ToVec64(m.slot_mapping);
  EXPECT_EQ(slots[0], a.block_table[0] * 2);
  EXPECT_EQ(slots[2], a.block_table[1] * 2);
  EXPECT_EQ(slots[3], b.block_table[1] * 2 + 1);
  EXPECT_EQ(ToVec32(m.seq_lens), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(ToVec32(m.query_start_loc), (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(m.block_tables.shape(), (vt::Shape{2, 2}));
  const std::vector<int32_t> tables = ToVec32(m.block_tables);
  EXPECT_EQ(tables[0], a.block_table[0]);
  EXPECT_EQ(tables[2], b.block_table[0]);
}

}  // namespace
}  // namespace vtllm::model
