// The default model's files, as linked into the binary (see CMakeLists.txt beside this file).
#pragma once

#include <span>

namespace vtllm {

struct EmbeddedFile {
  const char* name;
  const char* begin;
  const char* end;
};

std::span<const EmbeddedFile> DefaultModelFiles();

}  // namespace vtllm
