// Writes .safetensors files (for tests and tools such as make_random_checkpoint).
//
// Tensors are laid out by decreasing element size, then by name, after a header padded with
// spaces to a multiple of 8 bytes, so every tensor is aligned to its element size. Data is
// streamed: a generated tensor is produced into a buffer of its own size just before it is
// written, so a large checkpoint never sits in memory at once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "vt/dtype.h"
#include "vt/tensor.h"

namespace vtllm::model {

class SafetensorsWriter {
 public:
  // Fills `dst` with the tensor's nbytes bytes.
  using Fill = std::function<void(void* dst, size_t nbytes)>;

  // Copies numel * DTypeSize(dtype) bytes from `data`.
  void Add(const std::string& name, vt::DType dtype, const vt::Shape& shape, const void* data);
  // Keeps a handle to `t` (a contiguous CPU tensor) and writes its bytes on Write.
  void Add(const std::string& name, const vt::Tensor& t);
  void AddGenerated(const std::string& name, vt::DType dtype, const vt::Shape& shape, Fill fill);
  void SetMetadata(const std::string& key, const std::string& value);

  // Writes the file (through PATH.tmp, renamed when complete); throws vt::Error naming the
  // path on an I/O failure, or on a duplicate tensor name.
  void Write(const std::string& path) const;

  uint64_t data_bytes() const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string name;
    vt::DType dtype;
    vt::Shape shape;
    Fill fill;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes model.safetensors.index.json for `weight_map` (tensor name -> shard file name).
void WriteSafetensorsIndex(const std::string& path, const std::map<std::string, std::string>& weight_map,
                           uint64_t total_size);

}  // namespace vtllm::model
