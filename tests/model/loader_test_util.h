// Helpers for the checkpoint-loader tests: temporary directories, and files written byte
// by byte from the safetensors format itself (not through the writer under test).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/load_error.h"

#ifndef VTLLM_TOOL_RUNNER
#define VTLLM_TOOL_RUNNER ""  // a cross build's emulator, e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu "
#endif

namespace vtllm::model::testing {

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "vtllm_loader_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  // A subdirectory, created.
  std::string Sub(const std::string& name) const {
    std::filesystem::create_directories(path_ + "/" + name);
    return path_ + "/" + name;
  }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline void WriteText(const std::string& path, const std::string& text) { WriteBytes(path, text); }
inline void WriteJson(const std::string& path, const nlohmann::json& j) { WriteBytes(path, j.dump(1)); }

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The 8-byte little-endian length prefix of a safetensors file.
inline std::string LengthPrefix(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

// A safetensors file as the format defines it: prefix, header text, data bytes.
inline void WriteRawSafetensors(const std::string& path, const std::string& header, const std::string& data) {
  WriteBytes(path, LengthPrefix(header.size()) + header + data);
}

template <typename T>
std::string BytesOf(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Asserts that `fn` throws a LoadError whose message contains every needle; returns the
// message ("" if nothing or something else was thrown). With VTLLM_SHOW_ERRORS set in the
// environment, each message is also printed, for reviewing their wording.
template <typename Fn>
std::string ExpectLoadError(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected a LoadError mentioning " << ::testing::PrintToString(needles);
  } catch (const LoadError& e) {
    const std::string msg = e.what();
    if (std::getenv("VTLLM_SHOW_ERRORS")) std::fprintf(stderr, "  error: %s\n", msg.c_str());
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "message lacks '" << n << "': " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a LoadError, got another exception: " << e.what();
  }
  return "";
}

// Asserts that `fn` throws a vt::Error (any kind: a LoadError, or another refusal) whose
// message contains every needle; VTLLM_SHOW_ERRORS prints it, as above.
template <typename Fn>
void ExpectError(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning " << ::testing::PrintToString(needles);
  } catch (const vt::Error& e) {
    const std::string msg = e.what();
    if (std::getenv("VTLLM_SHOW_ERRORS")) std::fprintf(stderr, "  error: %s\n", msg.c_str());
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "message lacks '" << n << "': " << msg;
  }
}

// Runs the built make_random_checkpoint with `args` (e.g. "--preset qwen3-tiny --format bf16")
// into `out`; a test failure (with the command) when it does not exit with 0.
inline bool RunRandomCheckpoint(const std::string& out, const std::string& args) {
  const std::string cmd =
      std::string(VTLLM_BINARY_DIR) + "/tools/make_random_checkpoint --out " + out + " " + args + " 2>/dev/null";
  const int rc = std::system((VTLLM_TOOL_RUNNER + cmd).c_str());
  EXPECT_EQ(rc, 0) << cmd;
  return rc == 0;
}

// The fixtures' root: VTLLM_FIXTURES_DIR from the environment (a copy of the tree elsewhere,
// as on a GPU machine), else the build's.
inline std::string FixturesRoot() {
  if (const char* env = std::getenv("VTLLM_FIXTURES_DIR")) return env;
  return VTLLM_FIXTURES_DIR;
}

inline std::string FixtureDir(const std::string& name) {
  return std::string(VTLLM_FIXTURES_DIR) + "/oracles/qwen3-tiny/" + name;
}

}  // namespace vtllm::model::testing
