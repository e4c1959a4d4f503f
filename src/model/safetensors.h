// One .safetensors file, mmapped read-only (MAP_PRIVATE) and validated strictly on open.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON (an object mapping each
// tensor name to {dtype, shape, data_offsets: [begin, end]} plus an optional
// "__metadata__" string->string map), then the data section; offsets are relative to the
// data section's start. Tensors come back as zero-copy CPU tensors borrowing the mapping;
// the mapping stays alive as long as any of them (or the file object) does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "vt/dtype.h"
#include "vt/tensor.h"

namespace vtllm::model {

struct TensorInfo {
  std::string name;
  vt::DType dtype = vt::DType::kF32;
  vt::Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets within the data section
  uint64_t nbytes() const { return end - begin; }
};

// safetensors dtype strings ("F32", "BF16", "F8_E4M3", ...) <-> vt dtypes. Only the dtypes
// vt has are accepted; ParseSafetensorsDType returns nullopt for any other string.
std::optional<vt::DType> ParseSafetensorsDType(std::string_view name);
std::string_view SafetensorsDTypeName(vt::DType dtype);

// Largest header accepted; real headers are well under 10 MB.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

class SafetensorsFile {
 public:
  // Maps and validates the file; throws LoadError naming the file (and tensor) on any defect.
  static std::shared_ptr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const TensorInfo* Find(std::string_view name) const;  // nullptr if absent
  std::vector<std::string> names() const;               // sorted
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by name
  // Zero-copy CPU tensor over the mapping (a copy only if the bytes are misaligned for the
  // dtype). Throws LoadError naming the file and tensor if absent.
  vt::Tensor Get(std::string_view name) const;
  const nlohmann::json& metadata() const { return metadata_; }  // {} when absent
  // Drops this process's pages of the mapping within [p, p + n) (whole pages only): the
  // bytes stay readable (a later read faults them in from the page cache), but no longer
  // count as this process's memory. False, and nothing done, where the range is not
  // inside this file's mapping.
  bool DropPages(const void* p, size_t n) const;
  uint64_t file_size() const { return file_size_; }
  uint64_t data_offset() const { return data_offset_; }  // 8 + header length

  struct Mapping;

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::shared_ptr<Mapping> mapping_;
  uint64_t file_size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

}  // namespace vtllm::model
