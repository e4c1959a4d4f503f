#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "vt/error.h"

namespace vtllm::model {

std::optional<vt::DType> ParseKvCacheDtype(const std::string& value) {
  if (value == "auto") return std::nullopt;
  if (value == "fp8" || value == "fp8_e4m3") return vt::DType::kF8E4M3;
  throw vt::Error(vt::StrCat("--kv-cache-dtype: \"", value, "\" is not auto, fp8 or fp8_e4m3",
                             value == "fp8_e5m2" || value == "fp8_inc" || value == "fp8_ds_mla"
                                 ? " (vLLM's other FP8 cache formats are not supported)"
                                 : ""));
}

int64_t KvCacheSpec::BytesPerBlock() const {
  return 2 * num_layers * block_size * num_kv_heads * head_dim * static_cast<int64_t>(vt::DTypeSize(dtype));
}

int64_t StateSpec::BytesPerSlot() const {
  const int64_t conv = (2 * key_channels + value_channels) * conv_width * static_cast<int64_t>(vt::DTypeSize(conv_dtype));
  const int64_t ssm = num_value_heads * key_head_dim * value_head_dim * static_cast<int64_t>(sizeof(float));
  return num_layers * (conv + ssm);
}

void KvCacheTensors::ZeroStateSlot(int64_t slot) const {
  VT_CHECK(slot >= 0 && slot < spec_.state.num_slots, "KvCache: state slot ", slot, " is outside [0, ",
           spec_.state.num_slots, ")");
  for (const LayerState& st : states_) {
    for (const vt::Tensor* t : {&st.conv_q, &st.conv_k, &st.conv_v, &st.ssm}) {
      vt::Tensor row = t->Slice(0, slot, slot + 1);
      std::vector<char> zeros(row.nbytes(), 0);
      row.CopyFrom(vt::Tensor::Borrow(zeros.data(), row.shape(), row.dtype(), vt::Device::Cpu(), nullptr));
    }
  }
}

namespace {

// Host cache tensors are written through (zeroed) once, when they are made, by up to 8
// threads. Otherwise their pages are first touched by the KV writes of serving steps, which
// then wait while the kernel faults in and clears fresh (huge) pages: on a 2-core VM that
// was 10% of a CPU server's time at 32 concurrent requests (bench/README.md, session 37).
void TouchHostPages(const std::vector<vt::Tensor>& tensors) {
  std::vector<std::pair<char*, size_t>> parts;  // (start, bytes) of each thread's share
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  for (const vt::Tensor& t : tensors) {
    if (!t.device().is_cpu() || t.nbytes() == 0) continue;
    char* p = static_cast<char*>(t.data());
    const size_t n = t.nbytes(), share = (n + threads - 1) / threads;
    for (size_t o = 0; o < n; o += share) parts.emplace_back(p + o, std::min(share, n - o));
  }
  std::vector<std::thread> pool;
  for (size_t i = 0; i < threads && i < parts.size(); ++i)
    pool.emplace_back([&parts, i, threads] {
      for (size_t j = i; j < parts.size(); j += threads) std::memset(parts[j].first, 0, parts[j].second);
    });
  for (std::thread& th : pool) th.join();
}

}  // namespace

KvCacheTensors::KvCacheTensors(const KvCacheSpec& spec) : spec_(spec) {
  VT_CHECK(spec.num_layers > 0 && spec.num_kv_heads > 0 && spec.head_dim > 0 && spec.block_size > 0 &&
               spec.num_blocks > 0,
           "KvCache: every size must be > 0 (layers ", spec.num_layers, ", kv heads ", spec.num_kv_heads,
           ", head_dim ", spec.head_dim, ", block_size ", spec.block_size, ", blocks ", spec.num_blocks, ")");
  VT_CHECK(spec.num_blocks <= INT32_MAX, "KvCache: ", spec.num_blocks, " blocks do not fit I32 block ids");
  const vt::Shape shape = {spec.num_blocks, spec.block_size, spec.num_kv_heads, spec.head_dim};
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    keys_.push_back(vt::Tensor::Empty(shape, spec.dtype, spec.device));
    values_.push_back(vt::Tensor::Empty(shape, spec.dtype, spec.device));
  }
  TouchHostPages(keys_);
  TouchHostPages(values_);
  const StateSpec& st = spec.state;
  if (st.num_layers == 0) return;
  VT_CHECK(st.num_slots > 0 && st.key_channels > 0 && st.value_channels > 0 && st.conv_width > 0 &&
               st.num_value_heads > 0 && st.key_head_dim > 0 && st.value_head_dim > 0,
           "KvCache: recurrent state sizes must be > 0 (slots ", st.num_slots, ", channels ", st.key_channels, "/",
           st.value_channels, ", conv width ", st.conv_width, ")");
  VT_CHECK(st.num_slots <= INT32_MAX, "KvCache: ", st.num_slots, " state slots do not fit I32 slot ids");
  for (int64_t l = 0; l < st.num_layers; ++l) {
    LayerState ls;
    ls.conv_q = vt::Tensor::Empty({st.num_slots, st.key_channels, st.conv_width}, st.conv_dtype, spec.device);
    ls.conv_k = vt::Tensor::Empty({st.num_slots, st.key_channels, st.conv_width}, st.conv_dtype, spec.device);
    ls.conv_v = vt::Tensor::Empty({st.num_slots, st.value_channels, st.conv_width}, st.conv_dtype, spec.device);
    ls.ssm = vt::Tensor::Empty({st.num_slots, st.num_value_heads, st.key_head_dim, st.value_head_dim},
                               vt::DType::kF32, spec.device);
    states_.push_back(std::move(ls));
  }
}

KvCache::KvCache(const KvCacheSpec& spec) : tensors_(spec) {
  free_.reserve(static_cast<size_t>(spec.num_blocks));
  for (int64_t b = spec.num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  for (int64_t s = spec.state.num_layers > 0 ? spec.state.num_slots - 1 : -1; s >= 0; --s)
    free_slots_.push_back(static_cast<int32_t>(s));
}

void KvCache::Reserve(SequenceKv& seq, int64_t new_tokens) {
  VT_CHECK(new_tokens >= 0, "KvCache::Reserve: negative token count ", new_tokens);
  const int64_t need = BlocksFor(seq.num_tokens + new_tokens) - static_cast<int64_t>(seq.block_table.size());
  const bool needs_slot = spec().state.num_layers > 0 && seq.state_slot < 0;
  VT_CHECK(!needs_slot || !free_slots_.empty(), "KvCache: all ", spec().state.num_slots,
           " recurrent-state slots are taken (one per sequence)");
  if (need > 0)
    VT_CHECK(need <= num_free_blocks(), "KvCache: a sequence of ", seq.num_tokens, " tokens needs ", need,
             " more blocks of ", spec().block_size, " tokens for ", new_tokens, " new tokens, but only ",
             num_free_blocks(), " of ", spec().num_blocks, " are free");
  if (needs_slot) {  // zeroed by the model when the sequence's first token runs
    seq.state_slot = free_slots_.back();
    free_slots_.pop_back();
  }
  if (need <= 0) return;
  for (int64_t i = 0; i < need; ++i) {
    seq.block_table.push_back(free_.back());
    free_.pop_back();
  }
}

void KvCache::Release(SequenceKv& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) free_.push_back(*it);
  seq.block_table.clear();
  seq.num_tokens = 0;
  if (seq.state_slot >= 0) free_slots_.push_back(seq.state_slot);
  seq.state_slot = -1;
}

int64_t KvCache::SlotOf(const SequenceKv& seq, int64_t pos) const {
  const int64_t bs = spec().block_size;
  const int64_t b = pos / bs;
  VT_CHECK(pos >= 0 && b < static_cast<int64_t>(seq.block_table.size()), "KvCache: position ", pos,
           " is outside the sequence's ", seq.block_table.size(), " blocks of ", bs, " tokens");
  return static_cast<int64_t>(seq.block_table[static_cast<size_t>(b)]) * bs + pos % bs;
}

const std::vector<KvCacheTensors>& KvCacheTensors::peer_shards() const {
  static const std::vector<KvCacheTensors> kNone;
  return peers_ ? *peers_ : kNone;
}

void KvCacheTensors::set_peer_shards(std::vector<KvCacheTensors> peers) {
  peers_ = std::make_shared<const std::vector<KvCacheTensors>>(std::move(peers));
}

}  // namespace vtllm::model
