// The engine's sampler on top of vt's sampling ops (vt/ops/sampling.h).
//
// Each step the host lays the per-row parameters and the sparse per-row lists (penalty
// tokens with their output counts, logit_bias pairs, allowed and banned ids) out as CSR
// arrays in one page-locked staging buffer, copies it to the device in one transfer, runs the
// ops in vLLM's order on views of that buffer, and copies the ids and logprobs back in one
// transfer; the copies are enqueued (vt/transfer.h), so Launch returns before the draw is
// done and Collect waits for it. Two staging buffers each way alternate, so a second draw can
// be launched before the first is collected. The device buffers are made once; the input
// buffers grow (rarely, geometrically) only when a step's sparse lists outgrow them.
#include "engine/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <cstring>
#include <string>

#include "vt/error.h"
#include "vt/ops/sampling.h"
#include "vt/transfer.h"

namespace vtllm::engine {

namespace {

// Words (4 bytes) of a step's fixed inputs for R rows: random bits (I64), sampling params
// [R, 3], top_k [R], penalties [R, 3], four offset arrays [R + 1].
int64_t FixedWords(int64_t R) { return 2 * R + 3 * R + R + 3 * R + 4 * (R + 1); }

}  // namespace

struct Sampler::Impl {
  vt::Queue q;
  int64_t vocab, max_rows;
  vt::Tensor raw;                // [max_rows, vocab] F32: the raw logits of rows that want logprobs
  vt::Tensor in_dev;             // [in_words] I32: the step's inputs (typed views below)
  vt::Tensor out_dev;            // [max_rows * (3 + 2 * kMaxTop)] I32: ids, ranks, logprobs, top lists
  // Page-locked staging of in_dev and out_dev, two of each (a launched draw's and the next's).
  std::array<vt::HostBuffer, 2> in_host, out_host;
  std::array<vt::Event, 2> in_copied;  // the last copy out of in_host[i] has run
  int next = 0;                        // the staging pair the next launch uses
  // A launched draw not yet collected.
  struct Pending {
    int buffer = 0;
    int64_t rows = 0, k = 0;
    std::vector<int> num_logprobs;
    vt::Event done;
  };
  std::deque<Pending> pending;
  std::vector<int32_t> lp_out;  // Logprobs' (synchronous) results
  std::vector<int32_t> count;   // [vocab] output counts of the row being laid out (kept zero)
  std::vector<uint8_t> listed;  // [vocab] token already listed for the row (kept zero)
  // Per-step CSR lists, built on the host.
  std::vector<int32_t> allowed, banned, bias_ids, pen_ids, pen_counts;
  std::vector<float> bias_values;

  static constexpr int64_t kMaxTop = 20;

  Impl(const vt::Queue& queue, int64_t V, int64_t rows) : q(queue), vocab(V), max_rows(rows) {
    VT_CHECK(V > 0 && rows > 0, "Sampler: vocab_size (", V, ") and max_rows (", rows, ") must be > 0");
    raw = vt::Tensor::Empty({rows, V}, vt::DType::kF32, q.device());
    Reserve(FixedWords(rows) + 4 * std::max<int64_t>(rows * 64, 4096));
    out_dev = vt::Tensor::Empty({rows * (3 + 2 * kMaxTop)}, vt::DType::kI32, q.device());
    for (vt::HostBuffer& b : out_host) b = vt::HostBuffer(q, static_cast<size_t>(out_dev.numel()) * 4);
    lp_out.resize(static_cast<size_t>(out_dev.numel()));
    count.assign(static_cast<size_t>(V), 0);
    listed.assign(static_cast<size_t>(V), 0);
  }

  void Reserve(int64_t words) {
    if (in_dev.defined() && in_dev.numel() >= words) return;
    const int64_t n = in_dev.defined() ? std::max(words, 2 * in_dev.numel()) : words;
    for (const vt::Event& e : in_copied) e.Wait();  // the old staging is about to go
    for (const Pending& p : pending) p.done.Wait();  // ... and the old device buffer
    in_dev = vt::Tensor::Empty({n + n % 2}, vt::DType::kI32, q.device());
    for (vt::HostBuffer& b : in_host) b = vt::HostBuffer(q, static_cast<size_t>(n + n % 2) * 4);
  }

  // Typed views of the device input buffer at word offset `at`.
  vt::Tensor In(int64_t at, const vt::Shape& shape, vt::DType d) const {
    return vt::Tensor::Borrow(in_dev.data_as<int32_t>() + at, shape, d, q.device(), nullptr);
  }
  vt::Tensor Out(int64_t at, const vt::Shape& shape, vt::DType d) const {
    return vt::Tensor::Borrow(out_dev.data_as<int32_t>() + at, shape, d, q.device(), nullptr);
  }
  int32_t* HostWords(int b) const { return static_cast<int32_t*>(in_host[static_cast<size_t>(b)].data()); }
  const int32_t* OutWords(int b) const { return static_cast<const int32_t*>(out_host[static_cast<size_t>(b)].data()); }

  void CheckToken(int32_t t, size_t row, const char* field) const {
    VT_CHECK(t >= 0 && t < vocab, "Sampler: row ", row, " has ", field, " token id ", t, " outside the vocabulary [0, ",
             vocab, ")");
  }

  // Lays out the row's penalty tokens: every distinct output token with its count, and the
  // prompt's tokens (count 0 unless also in the output) when the repetition penalty applies.
  void AddPenaltyTokens(const SamplingRow& row, size_t r) {
    const size_t first = pen_ids.size();
    for (int32_t t : row.output_tokens) {
      CheckToken(t, r, "output");
      if (count[t]++ == 0 && !listed[t]) listed[t] = 1, pen_ids.push_back(t);
    }
    if (row.repetition_penalty != 1.0f) {
      for (int32_t t : row.prompt_tokens) {
        CheckToken(t, r, "prompt");
        if (!listed[t]) listed[t] = 1, pen_ids.push_back(t);
      }
    }
    for (size_t j = first; j < pen_ids.size(); ++j) {
      pen_counts.push_back(count[pen_ids[j]]);
      count[pen_ids[j]] = 0;
      listed[pen_ids[j]] = 0;
    }
  }

  // The structured-output mask of row r, whose allowed_token_ids start at allowed[a0]: those
  // the grammar also allows or, without them, the grammar's allowed tokens (or its refused
  // ones as banned, when it allows most of the vocabulary: the shorter list).
  void AddGrammarMask(const SamplingRow& row, size_t r, size_t a0) {
    const std::span<const uint32_t> m = row.grammar_bitmask;
    VT_CHECK(static_cast<int64_t>(m.size()) == (vocab + 31) / 32, "Sampler: row ", r, " grammar bitmask has ", m.size(),
             " words, the vocabulary ", vocab, " tokens");
    auto ok = [&](int64_t t) { return ((m[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u) != 0; };
    if (allowed.size() > a0) {
      allowed.erase(std::remove_if(allowed.begin() + static_cast<std::ptrdiff_t>(a0), allowed.end(),
                                   [&](int32_t t) { return !ok(t); }),
                    allowed.end());
      if (allowed.size() > a0) return;
    }
    int64_t n_ok = 0;
    for (int64_t t = 0; t < vocab; ++t) n_ok += ok(t);
    if (n_ok == 0) return;  // nothing to draw under the grammar: left unmasked
    if (2 * n_ok <= vocab) {
      for (int64_t t = 0; t < vocab; ++t)
        if (ok(t)) allowed.push_back(static_cast<int32_t>(t));
    } else {
      for (int64_t t = 0; t < vocab; ++t)
        if (!ok(t)) banned.push_back(static_cast<int32_t>(t));
    }
  }

  static void CheckRow(const SamplingRow& row, size_t r, int64_t vocab) {
    VT_CHECK(std::isfinite(row.temperature) && row.temperature >= 0, "Sampler: row ", r, " temperature ",
             row.temperature, " must be finite and >= 0");
    VT_CHECK(row.top_p > 0 && row.top_p <= 1, "Sampler: row ", r, " top_p ", row.top_p, " must be in (0, 1]");
    VT_CHECK(row.min_p >= 0 && row.min_p <= 1, "Sampler: row ", r, " min_p ", row.min_p, " must be in [0, 1]");
    VT_CHECK(std::isfinite(row.repetition_penalty) && row.repetition_penalty > 0, "Sampler: row ", r,
             " repetition_penalty ", row.repetition_penalty, " must be finite and > 0");
    VT_CHECK(std::isfinite(row.frequency_penalty) && std::isfinite(row.presence_penalty), "Sampler: row ", r,
             " frequency/presence penalties must be finite");
    VT_CHECK(row.num_logprobs <= std::min<int64_t>(kMaxTop, vocab), "Sampler: row ", r, " asks for ", row.num_logprobs,
             " logprobs; at most ", std::min<int64_t>(kMaxTop, vocab), " are supported");
  }

  // Reads row r's logprobs from result words `w` laid out as TopKLogprobs wrote them.
  static PositionLogprobs ReadLogprobs(const int32_t* w, int64_t R, int64_t K, int64_t r, int32_t chosen, int k) {
    PositionLogprobs lp;
    lp.chosen.token_id = chosen;
    lp.chosen.rank = w[R + r];
    std::memcpy(&lp.chosen.logprob, &w[2 * R + r], sizeof(float));
    for (int j = 0; j < k; ++j) {
      TokenLogprob t;
      t.token_id = w[3 * R + r * K + j];
      std::memcpy(&t.logprob, &w[3 * R + R * K + r * K + j], sizeof(float));
      t.rank = j + 1;
      lp.top.push_back(t);
    }
    return lp;
  }

  // TopKLogprobs of `logits` rows with targets at input word `targets_at` into out_dev.
  void RunLogprobs(const vt::Tensor& logits, int64_t R, int64_t K, int64_t targets_at) {
    vt::TopKLogprobs(q, logits, In(targets_at, {R}, vt::DType::kI32), Out(3 * R, {R, K}, vt::DType::kI32),
                     Out(3 * R + R * K, {R, K}, vt::DType::kF32), Out(2 * R, {R}, vt::DType::kF32),
                     Out(R, {R}, vt::DType::kI32));
  }

  void CheckLogits(const vt::Tensor& logits, size_t rows, const char* what) const {
    VT_CHECK(logits.defined() && logits.dtype() == vt::DType::kF32 && logits.ndim() == 2 &&
                 logits.dim(0) == static_cast<int64_t>(rows) && logits.dim(1) == vocab,
             "Sampler::", what, ": logits ", logits.Describe(), " must be [", rows, ", ", vocab, "] F32");
    VT_CHECK(static_cast<int64_t>(rows) <= max_rows, "Sampler::", what, ": ", rows,
             " rows but the sampler was made for ", max_rows);
  }
};

Sampler::Sampler(const vt::Queue& q, int64_t vocab_size, int64_t max_rows)
    : impl_(std::make_unique<Impl>(q, vocab_size, max_rows)) {}

Sampler::~Sampler() = default;

void Sampler::Launch(const vt::Tensor& logits, std::span<const SamplingRow> rows) {
  Impl& s = *impl_;
  s.CheckLogits(logits, rows.size(), "Launch");
  VT_CHECK(s.pending.size() < 2, "Sampler::Launch: two draws are launched and not collected");
  const int64_t R = static_cast<int64_t>(rows.size());
  Impl::Pending job;
  job.rows = R;
  if (R == 0) {
    s.pending.push_back(std::move(job));
    return;
  }
  int64_t K = 0;
  bool want_logprobs = false, any_mask = false, any_bias = false, any_penalty = false;
  s.allowed.clear(), s.banned.clear(), s.bias_ids.clear(), s.bias_values.clear();
  s.pen_ids.clear(), s.pen_counts.clear();
  std::vector<int32_t> off(static_cast<size_t>(4 * (R + 1)), 0);  // allowed, banned, bias, penalties
  for (int64_t r = 0; r < R; ++r) {
    const SamplingRow& row = rows[r];
    Impl::CheckRow(row, r, s.vocab);
    if (row.num_logprobs >= 0) want_logprobs = true, K = std::max<int64_t>(K, row.num_logprobs);
    const size_t a0 = s.allowed.size();
    for (int32_t t : row.allowed_token_ids) s.CheckToken(t, r, "allowed"), s.allowed.push_back(t);
    if (!row.grammar_bitmask.empty()) s.AddGrammarMask(row, r, a0);
    std::sort(s.allowed.begin() + a0, s.allowed.end());
    s.allowed.erase(std::unique(s.allowed.begin() + a0, s.allowed.end()), s.allowed.end());
    for (int32_t t : row.banned_token_ids) s.CheckToken(t, r, "banned"), s.banned.push_back(t);
    for (const auto& [t, v] : row.logit_bias) {
      s.CheckToken(t, r, "logit_bias");
      VT_CHECK(std::isfinite(v), "Sampler: row ", r, " logit_bias of token ", t, " is ", v, ", not finite");
      s.bias_ids.push_back(t), s.bias_values.push_back(v);
    }
    if (row.repetition_penalty != 1.0f || row.frequency_penalty != 0.0f || row.presence_penalty != 0.0f)
      s.AddPenaltyTokens(row, r);
    off[0 * (R + 1) + r + 1] = static_cast<int32_t>(s.allowed.size());
    off[1 * (R + 1) + r + 1] = static_cast<int32_t>(s.banned.size());
    off[2 * (R + 1) + r + 1] = static_cast<int32_t>(s.bias_ids.size());
    off[3 * (R + 1) + r + 1] = static_cast<int32_t>(s.pen_ids.size());
  }
  any_mask = !s.allowed.empty() || !s.banned.empty();
  any_bias = !s.bias_ids.empty();
  any_penalty = !s.pen_ids.empty();

  // Layout (words): bits | params | top_k | penalties | offsets x4 | allowed | banned |
  // bias ids | bias values | penalty ids | penalty counts.
  const int64_t at_params = 2 * R, at_topk = at_params + 3 * R, at_pen = at_topk + R, at_off = at_pen + 3 * R;
  const int64_t at_allowed = at_off + 4 * (R + 1);
  const int64_t at_banned = at_allowed + static_cast<int64_t>(s.allowed.size());
  const int64_t at_bias_ids = at_banned + static_cast<int64_t>(s.banned.size());
  const int64_t at_bias_values = at_bias_ids + static_cast<int64_t>(s.bias_ids.size());
  const int64_t at_pen_ids = at_bias_values + static_cast<int64_t>(s.bias_values.size());
  const int64_t at_pen_counts = at_pen_ids + static_cast<int64_t>(s.pen_ids.size());
  const int64_t words = at_pen_counts + static_cast<int64_t>(s.pen_counts.size());
  s.Reserve(words);
  const int b = s.next;
  s.next ^= 1;
  s.in_copied[static_cast<size_t>(b)].Wait();  // the copy out of this staging buffer has run
  int32_t* w = s.HostWords(b);
  for (int64_t r = 0; r < R; ++r) {
    const SamplingRow& row = rows[r];
    const auto bits = static_cast<int64_t>(vt::SampleBits(row.seed, row.draw_index));
    std::memcpy(&w[2 * r], &bits, sizeof bits);
    const float params[3] = {row.temperature, row.top_p, row.min_p};
    const float pen[3] = {row.repetition_penalty, row.frequency_penalty, row.presence_penalty};
    std::memcpy(&w[at_params + 3 * r], params, sizeof params);
    std::memcpy(&w[at_pen + 3 * r], pen, sizeof pen);
    w[at_topk + r] = row.top_k;
  }
  auto put = [&](int64_t at, const void* src, size_t n) {
    if (n > 0) std::memcpy(&w[at], src, n * 4);
  };
  put(at_off, off.data(), off.size());
  put(at_allowed, s.allowed.data(), s.allowed.size());
  put(at_banned, s.banned.data(), s.banned.size());
  put(at_bias_ids, s.bias_ids.data(), s.bias_ids.size());
  put(at_bias_values, s.bias_values.data(), s.bias_values.size());
  put(at_pen_ids, s.pen_ids.data(), s.pen_ids.size());
  put(at_pen_counts, s.pen_counts.data(), s.pen_counts.size());
  vt::CopyToDeviceAsync(s.q, s.in_dev, s.in_host[static_cast<size_t>(b)], w, static_cast<size_t>(words) * 4);
  s.in_copied[static_cast<size_t>(b)] = vt::Event::Record(s.q);

  auto entries = [&](int64_t at, int64_t n, vt::DType d) { return s.In(at, {n}, d); };
  auto offsets = [&](int i) { return s.In(at_off + i * (R + 1), {R + 1}, vt::DType::kI32); };
  // The logprobs snapshot: the raw logits, before any processing.
  vt::Tensor raw = s.raw.Slice(0, 0, R);
  if (want_logprobs) vt::CopyOnDeviceAsync(s.q, raw, logits, static_cast<size_t>(R * s.vocab) * sizeof(float));
  if (any_mask)
    vt::LogitsMask(s.q, logits, offsets(0), entries(at_allowed, at_banned - at_allowed, vt::DType::kI32), offsets(1),
                   entries(at_banned, at_bias_ids - at_banned, vt::DType::kI32));
  if (any_bias)
    vt::LogitsAddSparse(s.q, logits, offsets(2), entries(at_bias_ids, at_bias_values - at_bias_ids, vt::DType::kI32),
                        entries(at_bias_values, at_pen_ids - at_bias_values, vt::DType::kF32));
  if (any_penalty)
    vt::LogitsPenalties(s.q, logits, offsets(3), entries(at_pen_ids, at_pen_counts - at_pen_ids, vt::DType::kI32),
                        entries(at_pen_counts, words - at_pen_counts, vt::DType::kI32),
                        s.In(at_pen, {R, 3}, vt::DType::kF32));
  const vt::Tensor ids = s.Out(0, {R}, vt::DType::kI32);
  vt::SampleTokens(s.q, ids, logits, s.In(at_params, {R, 3}, vt::DType::kF32), s.In(at_topk, {R}, vt::DType::kI32),
                   s.In(0, {R}, vt::DType::kI64));
  if (want_logprobs) {
    vt::TopKLogprobs(s.q, raw, ids, s.Out(3 * R, {R, K}, vt::DType::kI32),
                     s.Out(3 * R + R * K, {R, K}, vt::DType::kF32), s.Out(2 * R, {R}, vt::DType::kF32),
                     s.Out(R, {R}, vt::DType::kI32));
  }
  const int64_t out_words = want_logprobs ? 3 * R + 2 * R * K : R;
  const vt::HostBuffer& out = s.out_host[static_cast<size_t>(b)];
  vt::CopyToHostAsync(s.q, out, out.data(), s.out_dev, static_cast<size_t>(out_words) * 4);
  job.buffer = b;
  job.k = K;
  for (const SamplingRow& row : rows) job.num_logprobs.push_back(row.num_logprobs);
  job.done = vt::Event::Record(s.q);
  s.pending.push_back(std::move(job));
}

std::vector<SampledToken> Sampler::Collect() {
  Impl& s = *impl_;
  VT_CHECK(!s.pending.empty(), "Sampler::Collect: no draw was launched");
  const Impl::Pending job = std::move(s.pending.front());
  s.pending.pop_front();
  job.done.Wait();
  std::vector<SampledToken> out(static_cast<size_t>(job.rows));
  const int32_t* w = s.OutWords(job.buffer);
  for (int64_t r = 0; r < job.rows; ++r) {
    out[r].token_id = w[r];
    const int k = job.num_logprobs[static_cast<size_t>(r)];
    if (k >= 0) out[r].logprobs = Impl::ReadLogprobs(w, job.rows, job.k, r, out[r].token_id, k);
  }
  return out;
}

std::vector<SampledToken> Sampler::Sample(const vt::Tensor& logits, std::span<const SamplingRow> rows) {
  VT_CHECK(impl_->pending.empty(), "Sampler::Sample: a launched draw is not collected");
  Launch(logits, rows);
  return Collect();
}

vt::Tensor Sampler::sampled_ids() const { return impl_->Out(0, {impl_->max_rows}, vt::DType::kI32); }

size_t Sampler::num_pending() const { return impl_->pending.size(); }

std::vector<PositionLogprobs> Sampler::Logprobs(const vt::Tensor& logits, std::span<const int32_t> targets, int k) {
  Impl& s = *impl_;
  const int64_t R = static_cast<int64_t>(targets.size());
  VT_CHECK(logits.defined() && logits.dtype() == vt::DType::kF32 && logits.ndim() == 2 && logits.dim(0) == R &&
               logits.dim(1) == s.vocab,
           "Sampler::Logprobs: logits ", logits.Describe(), " must be [", R, ", ", s.vocab, "] F32");
  VT_CHECK(k >= 0 && k <= std::min<int64_t>(Impl::kMaxTop, s.vocab), "Sampler::Logprobs: k = ", k, " must be in [0, ",
           std::min<int64_t>(Impl::kMaxTop, s.vocab), "]");
  for (int64_t r = 0; r < R; ++r) s.CheckToken(targets[r], r, "target");
  // Launched draws read their inputs from in_dev and leave their ids in out_dev: this
  // (synchronous) call waits for them first.
  for (const Impl::Pending& p : s.pending) p.done.Wait();
  std::vector<PositionLogprobs> out(static_cast<size_t>(R));
  // A prompt may have more positions than the sampler has rows: max_rows at a time.
  for (int64_t r0 = 0; r0 < R; r0 += s.max_rows) {
    const int64_t n = std::min(s.max_rows, R - r0);
    s.in_dev.Slice(0, 0, n).CopyFrom(
        vt::Tensor::Borrow(const_cast<int32_t*>(targets.data() + r0), {n}, vt::DType::kI32, vt::Device::Cpu(), nullptr));
    s.RunLogprobs(logits.Slice(0, r0, r0 + n), n, k, 0);
    const int64_t words = 3 * n + 2 * n * k;
    s.out_dev.Slice(0, 0, words).CopyToHost(s.lp_out.data());
    for (int64_t r = 0; r < n; ++r) out[r0 + r] = Impl::ReadLogprobs(s.lp_out.data(), n, k, r, targets[r0 + r], k);
  }
  return out;
}

}  // namespace vtllm::engine
