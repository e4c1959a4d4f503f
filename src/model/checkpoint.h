// A checkpoint directory: model.safetensors, or model.safetensors.index.json and its shards
// (or, with neither, every *.safetensors file in the directory). Every file is mmapped and
// validated on Open; tensors come back as zero-copy, read-only CPU tensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/safetensors.h"
#include "vt/tensor.h"

namespace vtllm::model {

class Checkpoint {
 public:
  // Throws LoadError naming the directory, index or shard on any defect: no weights, an
  // index entry pointing to a missing shard or to a tensor its shard lacks, one tensor in
  // two files, or any defect of a safetensors file.
  static Checkpoint Open(const std::string& dir);

  bool Has(std::string_view name) const;
  // Throws naming the tensor and the directory when absent.
  const TensorInfo& Info(std::string_view name) const;
  vt::Tensor Get(std::string_view name) const;  // zero-copy CPU tensor
  // Get, also checking dtype and shape; a mismatch throws naming the file and tensor.
  vt::Tensor GetAs(std::string_view name, vt::DType expected, const vt::Shape& expected_shape) const;
  // A scalar stored as [] or [1] in F32 (BF16/F16 are widened exactly); throws naming the
  // file and tensor when missing or of another shape or dtype.
  float GetScalarF32(std::string_view name) const;
  // GetScalarF32 for a quantization scale: also requires it finite and > 0.
  float GetScaleF32(std::string_view name) const;
  std::string FileOf(std::string_view name) const;  // path of the file holding the tensor
  const std::string& dir() const { return dir_; }

  std::vector<std::string> names() const;  // sorted
  uint64_t total_bytes() const;            // sum of all tensors' bytes
  uint64_t prefix_bytes(std::string_view prefix) const;  // sum over the tensors named prefix...
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  // Drops this process's pages of a tensor Get returned (SafetensorsFile::DropPages), once
  // nothing reads them any more; false where the tensor's bytes are not in a mapping.
  bool DropPages(const vt::Tensor& t) const;

 private:
  struct Entry {
    const SafetensorsFile* file = nullptr;
    const TensorInfo* info = nullptr;
  };
  const Entry& Lookup(std::string_view name) const;

  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// Returns `value` if it is a usable quantization scale (finite and > 0); otherwise throws
// LoadError naming `what` (e.g. "FILE: tensor 'model.layers.0.mlp.up_proj.input_scale'").
float ValidateScale(float value, std::string_view what);

// A loaded weight on `device` (copied there unless it already is), marked read-only
// (vt::Tensor::SetReadOnly): no op may write it, and the CUDA decode GEMV may start
// loading it before the kernel ahead of it finishes.
vt::Tensor WeightOnDevice(const vt::Tensor& t, vt::Device device);

// A float weight (norm weights, embeddings) of `shape` as stored (F32/BF16/F16), on the
// device, read-only; a tensor of another dtype is a LoadError naming file and tensor.
vt::Tensor LoadFloatWeight(const Checkpoint& ckpt, const std::string& name, const vt::Shape& shape, vt::Device device);

}  // namespace vtllm::model
