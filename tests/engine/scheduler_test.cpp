// The scheduler and KV-cache manager on their own: budgets, chunks, order, preemption,
// prefix hits and the block pool's LRU order, with requests driven by hand (no model).
#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "engine/block_pool.h"
#include "engine/kv_cache_manager.h"
#include "engine/scheduler.h"

namespace vtllm::engine {
namespace {

std::unique_ptr<Request> MakeRequest(const std::string& id, int64_t prompt_len, int first_token = 1,
                                     int priority = 0, double arrival = 0) {
  auto r = std::make_unique<Request>();
  r->id = id;
  r->parent_id = id;
  for (int64_t i = 0; i < prompt_len; ++i) r->prompt.push_back(first_token + static_cast<int>(i));
  r->all_tokens = r->prompt;
  r->max_tokens = 1000;
  r->priority = priority;
  r->arrival_time = arrival;
  return r;
}

// What the engine does after a step: every request whose computation reached its end gets one
// new token.
void SampleAll(const SchedulerOutput& out, std::vector<std::unique_ptr<Request>>& reqs) {
  for (const ScheduledRequest& s : out.scheduled)
    for (auto& r : reqs)
      if (r->id == s.request_id && r->num_computed_tokens == r->num_tokens()) r->all_tokens.push_back(7);
}

int64_t Scheduled(const SchedulerOutput& out, const std::string& id) {
  for (const ScheduledRequest& s : out.scheduled)
    if (s.request_id == id) return s.num_new_tokens;
  return 0;
}

TEST(Scheduler, OneTokenBudgetCoversDecodesAndPrefillChunks) {
  KvCacheManager kv(100, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 16;
  Scheduler s(c, kv);
  std::vector<std::unique_ptr<Request>> reqs;
  reqs.push_back(MakeRequest("a", 10));
  reqs.push_back(MakeRequest("b", 10));
  reqs.push_back(MakeRequest("c", 10));
  for (auto& r : reqs) s.AddRequest(r.get());
  SchedulerOutput o = s.Schedule();
  EXPECT_EQ(Scheduled(o, "a"), 10);
  EXPECT_EQ(Scheduled(o, "b"), 6);  // chunked prefill: what the budget leaves
  EXPECT_EQ(Scheduled(o, "c"), 0);
  EXPECT_EQ(o.num_scheduled_tokens, 16);
  EXPECT_TRUE(o.scheduled[0].is_new);
  EXPECT_EQ(o.scheduled[0].block_ids.size(), 3u);  // 10 tokens in blocks of 4
  SampleAll(o, reqs);
  o = s.Schedule();
  // Running ones first: a's decode token, b's remaining 4, then c gets the rest.
  EXPECT_EQ(Scheduled(o, "a"), 1);
  EXPECT_EQ(Scheduled(o, "b"), 4);
  EXPECT_EQ(Scheduled(o, "c"), 10);
  EXPECT_EQ(o.scheduled[0].request_id, "a");
  EXPECT_FALSE(o.scheduled[1].is_new);
  EXPECT_EQ(o.num_scheduled_tokens, 15);
}

TEST(Scheduler, LongPrefillThresholdAndMaxNumSeqs) {
  KvCacheManager kv(100, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.long_prefill_token_threshold = 5;
  c.max_num_seqs = 2;
  Scheduler s(c, kv);
  std::vector<std::unique_ptr<Request>> reqs;
  for (const char* id : {"a", "b", "c"}) reqs.push_back(MakeRequest(id, 12));
  for (auto& r : reqs) s.AddRequest(r.get());
  SchedulerOutput o = s.Schedule();
  EXPECT_EQ(Scheduled(o, "a"), 5);
  EXPECT_EQ(Scheduled(o, "b"), 5);
  EXPECT_EQ(Scheduled(o, "c"), 0);  // two sequences at most
  EXPECT_EQ(s.waiting().size(), 1u);
}

TEST(Scheduler, FcfsAndPriorityOrderOfWaitingRequests) {
  for (bool priority : {false, true}) {
    KvCacheManager kv(100, 4, false);
    SchedulerConfig c;
    c.max_num_batched_tokens = 8;
    c.priority = priority;
    Scheduler s(c, kv);
    std::vector<std::unique_ptr<Request>> reqs;
    reqs.push_back(MakeRequest("late-urgent", 8, 1, /*priority=*/-5, /*arrival=*/2));
    reqs.push_back(MakeRequest("early", 8, 1, 0, 1));
    for (auto& r : reqs) s.AddRequest(r.get());
    const SchedulerOutput o = s.Schedule();
    ASSERT_EQ(o.scheduled.size(), 1u);
    // fcfs: queue order; priority: the lower value first whatever the arrival.
    EXPECT_EQ(o.scheduled[0].request_id, "late-urgent") << "priority=" << priority;
  }
  KvCacheManager kv(100, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 8;
  c.priority = true;
  Scheduler s(c, kv);
  std::vector<std::unique_ptr<Request>> reqs;
  reqs.push_back(MakeRequest("low", 8, 1, 3, 1));
  reqs.push_back(MakeRequest("high", 8, 1, 1, 2));
  for (auto& r : reqs) s.AddRequest(r.get());
  EXPECT_EQ(s.Schedule().scheduled[0].request_id, "high");
}

TEST(Scheduler, PreemptsTheLastRunningRequestWhenBlocksRunOut) {
  // 6 blocks of 4 tokens: a and b take 3 each after 12 tokens; a's 13th token needs a 7th.
  KvCacheManager kv(6, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  Scheduler s(c, kv);
  std::vector<std::unique_ptr<Request>> reqs;
  reqs.push_back(MakeRequest("a", 11));
  reqs.push_back(MakeRequest("b", 12));
  for (auto& r : reqs) s.AddRequest(r.get());
  SchedulerOutput o = s.Schedule();
  EXPECT_EQ(o.num_scheduled_tokens, 23);
  EXPECT_EQ(kv.num_free_blocks(), 0);
  SampleAll(o, reqs);  // a: 12 tokens (fits 3 blocks), b: 13 tokens (needs a 4th)
  o = s.Schedule();
  // a's decode fits; b needs a block: b (the last running) is preempted, not a.
  ASSERT_EQ(o.preempted.size(), 1u);
  EXPECT_EQ(o.preempted[0], "b");
  EXPECT_EQ(Scheduled(o, "a"), 1);
  EXPECT_EQ(reqs[1]->num_computed_tokens, 0);
  EXPECT_EQ(reqs[1]->status, RequestStatus::kPreempted);
  EXPECT_EQ(s.waiting().front(), reqs[1].get());
  EXPECT_EQ(s.num_preemptions(), 1u);
  EXPECT_EQ(kv.num_free_blocks(), 3);  // b's blocks came back
  // Nothing waiting is admitted in a step that preempted.
  EXPECT_EQ(s.running().size(), 1u);
  SampleAll(o, reqs);
  s.FinishRequest(reqs[0].get(), FinishReason::kStop);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  o = s.Schedule();
  EXPECT_EQ(Scheduled(o, "b"), 13);  // recomputed: prompt and its generated token
  EXPECT_TRUE(o.scheduled[0].is_new);
}

TEST(Scheduler, PriorityPreemptsTheLowestPriorityRequest) {
  KvCacheManager kv(6, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.priority = true;
  Scheduler s(c, kv);
  std::vector<std::unique_ptr<Request>> reqs;
  reqs.push_back(MakeRequest("important", 12, 1, 0, 1));
  reqs.push_back(MakeRequest("minor", 11, 1, 9, 2));
  for (auto& r : reqs) s.AddRequest(r.get());
  SchedulerOutput o = s.Schedule();
  SampleAll(o, reqs);  // important needs a 4th block, minor does not
  o = s.Schedule();
  ASSERT_EQ(o.preempted.size(), 1u);
  EXPECT_EQ(o.preempted[0], "minor");
  EXPECT_EQ(Scheduled(o, "important"), 1);
  EXPECT_EQ(Scheduled(o, "minor"), 0);
}

TEST(Scheduler, AbortFreesBlocksAndMaxModelLenCapsTheChunk) {
  KvCacheManager kv(10, 4, false);
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 9;
  Scheduler s(c, kv);
  auto a = MakeRequest("a", 12);  // longer than max_model_len: only 9 positions are scheduled
  s.AddRequest(a.get());
  const SchedulerOutput o = s.Schedule();
  EXPECT_EQ(Scheduled(o, "a"), 9);
  EXPECT_EQ(kv.num_free_blocks(), 7);
  s.FinishRequest(a.get(), FinishReason::kAbort);
  EXPECT_EQ(kv.num_free_blocks(), 10);
  EXPECT_TRUE(s.running().empty());
  EXPECT_EQ(*a->finish_reason, FinishReason::kAbort);
}

TEST(KvCacheManager, PrefixHitsChainAndNeverCoverTheLastToken) {
  KvCacheManager kv(20, 4, true);
  auto a = MakeRequest("a", 12);
  ASSERT_TRUE(kv.AllocateSlots(*a, 12).has_value());
  a->num_computed_tokens = 12;
  // Same 12 tokens: 3 full blocks cached, but the last token must be computed: 2 blocks hit.
  auto b = MakeRequest("b", 12);
  ComputedBlocks hit = kv.GetComputedBlocks(*b);
  EXPECT_EQ(hit.num_tokens, 8);
  EXPECT_EQ(hit.blocks, (std::vector<int32_t>(kv.BlockTable("a").begin(), kv.BlockTable("a").begin() + 2)));
  // 13 tokens sharing the first 12: 3 blocks hit.
  auto c = MakeRequest("c", 13);
  EXPECT_EQ(kv.GetComputedBlocks(*c).num_tokens, 12);
  // A different first block breaks the chain even where later blocks' tokens agree.
  auto d = MakeRequest("d", 13);
  d->all_tokens[0] = d->prompt[0] = 99;
  EXPECT_EQ(kv.GetComputedBlocks(*d).num_tokens, 0);
  // A cache salt is part of the first block's hash.
  auto e = MakeRequest("e", 13);
  e->cache_salt = "tenant-2";
  EXPECT_EQ(kv.GetComputedBlocks(*e).num_tokens, 0);
  EXPECT_EQ(kv.prefix_queries(), 12u + 13 + 13 + 13);
  EXPECT_EQ(kv.prefix_hits(), 8u + 12);
  // Taking the hits shares the blocks (ref count 2) and allocates only the rest.
  ASSERT_TRUE(kv.AllocateSlots(*b, 4, &hit).has_value());
  EXPECT_EQ(kv.BlockTable("b").size(), 3u);
  EXPECT_EQ(kv.num_free_blocks(), 20 - 3 - 1);
}

TEST(KvCacheManager, FreedBlocksStayCachedUntilReallocatedLastBlocksFirst) {
  KvCacheManager kv(4, 2, true);
  auto a = MakeRequest("a", 8);
  ASSERT_TRUE(kv.AllocateSlots(*a, 8).has_value());
  const std::vector<int32_t> table = kv.BlockTable("a");
  kv.Free(*a);
  EXPECT_EQ(kv.num_free_blocks(), 4);
  // Still cached after the free: a new request with the same prompt hits 3 blocks.
  auto b = MakeRequest("b", 8);
  EXPECT_EQ(kv.GetComputedBlocks(*b).num_tokens, 6);
  // One new block is evicted from the free queue's head: a's LAST block (freed first).
  auto x = MakeRequest("x", 1, 500);
  ASSERT_TRUE(kv.AllocateSlots(*x, 1).has_value());
  EXPECT_EQ(kv.BlockTable("x")[0], table[3]);
  EXPECT_EQ(kv.GetComputedBlocks(*b).num_tokens, 6);  // the first three are still there
  auto y = MakeRequest("y", 1, 600);
  ASSERT_TRUE(kv.AllocateSlots(*y, 1).has_value());
  EXPECT_EQ(kv.BlockTable("y")[0], table[2]);
  EXPECT_EQ(kv.GetComputedBlocks(*b).num_tokens, 4);  // the third block was evicted
}

TEST(KvCacheManager, AllocationFailsWithoutTakingAnything) {
  KvCacheManager kv(3, 4, true);
  auto a = MakeRequest("a", 13);  // needs 4 blocks
  EXPECT_FALSE(kv.AllocateSlots(*a, 13).has_value());
  EXPECT_EQ(kv.num_free_blocks(), 3);
  EXPECT_FALSE(kv.HasBlocks("a"));
}

TEST(BlockPool, HashesDependOnParentTokensAndExtraKeys) {
  const std::vector<int32_t> t1 = {1, 2, 3, 4}, t2 = {1, 2, 3, 5};
  const BlockHash h1 = HashBlock(std::nullopt, t1, "");
  EXPECT_EQ(h1, HashBlock(std::nullopt, t1, ""));
  EXPECT_FALSE(h1 == HashBlock(std::nullopt, t2, ""));
  EXPECT_FALSE(h1 == HashBlock(std::nullopt, t1, "salt"));
  EXPECT_FALSE(HashBlock(h1, t1, "") == HashBlock(HashBlock(std::nullopt, t2, ""), t1, ""));
  EXPECT_FALSE(h1 == HashBlock(h1, t1, ""));
}

// A hybrid model's manager: each running request holds one state slot beside its blocks;
// without a free slot AllocateSlots changes nothing; Free gives the slot back; a preempted
// request is rescheduled with a slot again.
TEST(KvCacheManagerStateSlots, OneSlotPerRunningRequest) {
  KvCacheManager kv(16, 4, /*enable_prefix_caching=*/false, /*num_state_slots=*/2);
  auto a = MakeRequest("a", 5), b = MakeRequest("b", 5), c = MakeRequest("c", 5);
  ASSERT_TRUE(kv.AllocateSlots(*a, 5));
  ASSERT_TRUE(kv.AllocateSlots(*b, 5));
  EXPECT_EQ(kv.num_free_state_slots(), 0);
  EXPECT_NE(kv.StateSlot("a"), kv.StateSlot("b"));
  const int64_t free_blocks = kv.num_free_blocks();
  EXPECT_FALSE(kv.AllocateSlots(*c, 5));
  EXPECT_EQ(kv.num_free_blocks(), free_blocks);
  EXPECT_EQ(kv.StateSlot("c"), -1);
  const int32_t slot_a = kv.StateSlot("a");
  a->num_computed_tokens = 5;
  ASSERT_TRUE(kv.AllocateSlots(*a, 1));  // a decode keeps its slot
  EXPECT_EQ(kv.StateSlot("a"), slot_a);
  kv.Free(*a);
  EXPECT_EQ(kv.num_free_state_slots(), 1);
  ASSERT_TRUE(kv.AllocateSlots(*c, 5));
  EXPECT_EQ(kv.StateSlot("c"), slot_a);
  kv.Free(*b);
  kv.Free(*c);
  EXPECT_EQ(kv.num_free_state_slots(), 2);
  EXPECT_EQ(kv.num_free_blocks(), 16);
}

TEST(SchedulerStateSlots, ScheduledRequestsCarryTheirSlotsAndPreemptionFreesThem) {
  // 6 blocks of 4 tokens, 4 slots: two 10-token prompts fit (3 blocks each); their decodes
  // then need a 4th block each and one is preempted.
  KvCacheManager kv(6, 4, false, 4);
  SchedulerConfig cfg;
  cfg.max_num_seqs = 4;
  cfg.max_num_batched_tokens = 64;
  cfg.max_model_len = 64;
  Scheduler s(cfg, kv);
  std::vector<std::unique_ptr<Request>> reqs;
  reqs.push_back(MakeRequest("a", 10));
  reqs.push_back(MakeRequest("b", 10));
  for (auto& r : reqs) s.AddRequest(r.get());
  SchedulerOutput out = s.Schedule();
  ASSERT_EQ(out.scheduled.size(), 2u);
  EXPECT_GE(out.scheduled[0].state_slot, 0);
  EXPECT_GE(out.scheduled[1].state_slot, 0);
  EXPECT_NE(out.scheduled[0].state_slot, out.scheduled[1].state_slot);
  bool preempted = false;
  for (int step = 0; step < 8 && !preempted; ++step) {
    SampleAll(out, reqs);
    out = s.Schedule();
    preempted = !out.preempted.empty();
  }
  ASSERT_TRUE(preempted);
  EXPECT_EQ(kv.StateSlot(out.preempted[0]), -1);
  EXPECT_EQ(kv.num_free_state_slots(), 3);
}

}  // namespace
}  // namespace vtllm::engine
