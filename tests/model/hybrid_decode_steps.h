// A run of decode steps over a hybrid model's recurrent-state slots, the same on every
// backend and step mode, so that two runs can be compared step by step: the CPU test of
// padded steps (tests/model/hybrid_padded_steps_test.cpp) and the CUDA test of graph
// replays (tests/model_cuda/hybrid_graph_test.cpp).
//
// Five prompts (an oracle's, folded into the vocabulary) are prefilled in one step; then
// decode steps of 5 sequences (graph bucket 8: three padding rows), two sequences finish and
// give their slots back, steps of 3 (bucket 4: one padding row), a new one-token request
// takes a freed slot still holding a finished sequence's state and starts at position 0
// inside a step of 4 (bucket 4), steps of 4, and one of 1 (bucket 1). The tokens fed are a
// fixed function of the step and the row, not the argmax, so the runs stay comparable when
// their logits differ. Every state tensor starts filled with kStatePattern; at the end the
// run keeps the bytes of every state tensor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "model/model.h"

namespace vtllm::model::testing {

constexpr uint8_t kStatePattern = 0x3F;  // f32 0.747, bf16 0.746: finite, not zero

struct DecodeRun {
  std::vector<std::string> steps;          // a name per step, e.g. "decode S=5 #2"
  std::vector<int64_t> step_seqs;          // sequences of each step
  std::vector<std::vector<float>> logits;  // per step [S, V]
  std::vector<std::string> state_names;    // "layer 1 ssm", ...
  std::vector<std::vector<uint8_t>> state; // the bytes of each state tensor at the end
  std::vector<bool> slot_used;             // per slot: held by a sequence at some step
  int64_t num_decode_steps = 0;            // steps a graph may run (one token per sequence)
  Model::GraphStats stats;                 // the model's counts over the run
};

inline std::vector<LayerState> StateTensors(const KvCache& cache) {
  std::vector<LayerState> out;
  for (int64_t l = 0; l < cache.spec().state.num_layers; ++l) out.push_back(cache.tensors().state(l));
  return out;
}

inline DecodeRun RunHybridDecodeSteps(Model& m, const std::vector<std::vector<int32_t>>& prompts_in) {
  DecodeRun run;
  EXPECT_GE(prompts_in.size(), 5u);
  if (prompts_in.size() < 5) return run;
  const int64_t V = m.vocab_size();
  std::vector<std::vector<int32_t>> prompts(prompts_in.begin(), prompts_in.begin() + 5);
  int64_t tokens = 64;  // the joining request
  for (auto& p : prompts) {
    for (auto& id : p) id = static_cast<int32_t>(id % V);
    tokens += (static_cast<int64_t>(p.size()) + 16 + 15) / 16 * 16;
  }
  KvCache cache = m.MakeKvCache(tokens, 16, 8);
  run.slot_used.assign(8, false);
  for (const LayerState& st : StateTensors(cache))
    for (const vt::Tensor* t : {&st.conv_q, &st.conv_k, &st.conv_v, &st.ssm}) {
      std::vector<uint8_t> fill(t->nbytes(), kStatePattern);
      vt::Tensor dst = *t;
      dst.CopyFrom(vt::Tensor::Borrow(fill.data(), t->shape(), t->dtype(), vt::Device::Cpu(), nullptr));
    }
  const Model::GraphStats before = m.graph_stats();

  std::vector<SequenceKv> seqs(6);
  auto step = [&](const std::string& name, const std::vector<size_t>& rows, const std::vector<int32_t>& ids,
                  const std::vector<int64_t>& num_new) {
    std::vector<BatchEntry> batch;
    for (size_t i = 0; i < rows.size(); ++i) batch.push_back({&seqs[rows[i]], num_new[i]});
    run.logits.push_back(m.ForwardBatch(cache, ids, batch));
    run.steps.push_back(name);
    run.step_seqs.push_back(static_cast<int64_t>(rows.size()));
    for (size_t r : rows) run.slot_used[static_cast<size_t>(seqs[r].state_slot)] = true;
  };
  auto decode = [&](const std::string& name, const std::vector<size_t>& rows, int n) {
    for (int k = 0; k < n; ++k) {
      std::vector<int32_t> ids;
      const int64_t at = static_cast<int64_t>(run.steps.size());
      for (size_t i = 0; i < rows.size(); ++i) ids.push_back(static_cast<int32_t>((31 * at + 7 * rows[i] + 3) % V));
      step(name + " #" + std::to_string(k), rows, ids, std::vector<int64_t>(rows.size(), 1));
      ++run.num_decode_steps;
    }
  };
  {
    std::vector<int32_t> ids;
    std::vector<int64_t> lens;
    for (const auto& p : prompts) {
      ids.insert(ids.end(), p.begin(), p.end());
      lens.push_back(static_cast<int64_t>(p.size()));
    }
    step("prefill of 5", {0, 1, 2, 3, 4}, ids, lens);
  }
  decode("decode S=5 (bucket 8)", {0, 1, 2, 3, 4}, 3);
  cache.Release(seqs[3]);  // finished: slots 3 and 4 are free, holding their states
  cache.Release(seqs[4]);
  decode("decode S=3 (bucket 4)", {0, 1, 2}, 2);
  // A one-token request joins at position 0 in a freed slot (the model zeroes it first).
  step("a new request at position 0 among 3 decodes", {0, 5, 1, 2},
       {static_cast<int32_t>(11 % V), prompts[0][0], static_cast<int32_t>(13 % V), static_cast<int32_t>(17 % V)},
       {1, 1, 1, 1});
  ++run.num_decode_steps;
  decode("decode S=4 (bucket 4)", {0, 5, 1, 2}, 2);
  decode("decode S=1 (bucket 1)", {5}, 1);

  m.queue().Synchronize();
  const Model::GraphStats after = m.graph_stats();
  run.stats.captures = after.captures - before.captures;
  run.stats.replays = after.replays - before.replays;
  run.stats.eager = after.eager - before.eager;
  run.stats.padded_eager = after.padded_eager - before.padded_eager;
  const std::vector<LayerState> states = StateTensors(cache);
  for (size_t l = 0; l < states.size(); ++l) {
    const char* names[] = {"conv_q", "conv_k", "conv_v", "ssm"};
    const vt::Tensor* ts[] = {&states[l].conv_q, &states[l].conv_k, &states[l].conv_v, &states[l].ssm};
    for (int i = 0; i < 4; ++i) {
      std::vector<uint8_t> bytes(ts[i]->nbytes());
      ts[i]->CopyToHost(bytes.data());
      run.state.push_back(std::move(bytes));
      run.state_names.push_back("recurrent layer " + std::to_string(l) + " " + names[i]);
    }
  }
  return run;
}

// "" when every step's logits are equal bit for bit, else where they first differ.
inline std::string FirstLogitDifference(const DecodeRun& a, const DecodeRun& b, int64_t V) {
  if (a.logits.size() != b.logits.size()) return "the runs have different numbers of steps";
  for (size_t s = 0; s < a.logits.size(); ++s) {
    if (a.logits[s].size() != b.logits[s].size()) return "step '" + a.steps[s] + "': logits of different sizes";
    for (size_t i = 0; i < a.logits[s].size(); ++i)
      if (std::bit_cast<uint32_t>(a.logits[s][i]) != std::bit_cast<uint32_t>(b.logits[s][i])) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "row %lld logit %lld: %.9g vs %.9g", static_cast<long long>(i / V),
                      static_cast<long long>(i % V), a.logits[s][i], b.logits[s][i]);
        return "step " + std::to_string(s) + " '" + a.steps[s] + "' " + buf;
      }
  }
  return "";
}

// "" when the state tensors are equal bit for bit, else the first slot and byte that differ.
inline std::string FirstStateDifference(const DecodeRun& a, const DecodeRun& b) {
  if (a.state.size() != b.state.size()) return "the runs have different numbers of state tensors";
  const size_t slots = a.slot_used.size();
  for (size_t t = 0; t < a.state.size(); ++t) {
    const auto [pa, pb] = std::mismatch(a.state[t].begin(), a.state[t].end(), b.state[t].begin(), b.state[t].end());
    if (pa == a.state[t].end()) continue;
    const size_t at = static_cast<size_t>(pa - a.state[t].begin()), per_slot = a.state[t].size() / slots;
    return a.state_names[t] + " slot " + std::to_string(at / per_slot) + " byte " + std::to_string(at % per_slot) +
           ": " + std::to_string(*pa) + " vs " + std::to_string(*pb);
  }
  return "";
}

// "" when every slot no sequence held still holds kStatePattern in every state tensor.
inline std::string UnusedSlotsChanged(const DecodeRun& r) {
  const size_t slots = r.slot_used.size();
  for (size_t t = 0; t < r.state.size(); ++t) {
    const size_t per_slot = r.state[t].size() / slots;
    for (size_t s = 0; s < slots; ++s) {
      if (r.slot_used[s]) continue;
      for (size_t i = 0; i < per_slot; ++i)
        if (r.state[t][s * per_slot + i] != kStatePattern)
          return r.state_names[t] + " slot " + std::to_string(s) + " (held by no sequence) byte " +
                 std::to_string(i) + " is " + std::to_string(r.state[t][s * per_slot + i]);
    }
  }
  return "";
}

// The largest |a - b| over every step's logits; sets *where to its step and row.
inline double MaxStepLogitDiff(const DecodeRun& a, const DecodeRun& b, int64_t V, std::string* where) {
  double worst = 0;
  for (size_t s = 0; s < std::min(a.logits.size(), b.logits.size()); ++s)
    for (size_t i = 0; i < std::min(a.logits[s].size(), b.logits[s].size()); ++i) {
      const double d = std::fabs(static_cast<double>(a.logits[s][i]) - b.logits[s][i]);
      if (!(d <= worst)) {  // NaN counts as the worst
        worst = std::isnan(d) ? INFINITY : d;
        if (where) *where = "step " + std::to_string(s) + " '" + a.steps[s] + "' row " + std::to_string(i / V);
      }
    }
  return worst;
}

}  // namespace vtllm::model::testing
