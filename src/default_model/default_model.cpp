#include "default_model/default_model.h"

#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <unistd.h>

#include "default_model/default_model_data.h"

namespace vtllm {

namespace {

namespace fs = std::filesystem;

fs::path CacheRoot() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return fs::path(x) / "vtllm";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return fs::path(h) / ".cache" / "vtllm";
  return fs::temp_directory_path() / "vtllm";
}

std::string ContentHash() {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const EmbeddedFile& f : DefaultModelFiles()) {
    XXH3_64bits_update(st, f.name, std::char_traits<char>::length(f.name) + 1);
    XXH3_64bits_update(st, f.begin, static_cast<size_t>(f.end - f.begin));
  }
  const XXH64_hash_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string Materialize() {
  const fs::path dir = CacheRoot() / ("default-model-" + ContentHash());
  if (fs::exists(dir / ".complete")) return dir.string();
  // Write into a private folder, then rename: concurrent first uses never see half a model.
  const fs::path tmp = CacheRoot() / ("tmp-" + std::to_string(::getpid()) + "-" + ContentHash());
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) throw std::runtime_error("default model: cannot create " + tmp.string() + ": " + ec.message());
  for (const EmbeddedFile& f : DefaultModelFiles()) {
    std::ofstream out(tmp / f.name, std::ios::binary);
    out.write(f.begin, static_cast<std::streamsize>(f.end - f.begin));
    if (!out.good()) throw std::runtime_error("default model: cannot write " + (tmp / f.name).string());
  }
  std::ofstream(tmp / ".complete") << "ok\n";
  fs::rename(tmp, dir, ec);
  if (ec) {  // another process won the race: use its copy
    fs::remove_all(tmp, ec);
    if (!fs::exists(dir / ".complete")) throw std::runtime_error("default model: cannot create " + dir.string());
  }
  return dir.string();
}

}  // namespace

std::string DefaultModelDir() {
  static std::mutex mu;
  static std::string dir;
  std::lock_guard<std::mutex> lock(mu);
  if (dir.empty()) dir = Materialize();
  return dir;
}

}  // namespace vtllm
