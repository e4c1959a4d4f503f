#include "model/checkpoint.h"

#include <dirent.h>

#include <algorithm>
#include <cmath>

#include "model/load_error.h"

namespace vtllm::model {

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::vector<std::string> ListSafetensors(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) ThrowLoadError(dir, ": cannot open checkpoint directory");
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    constexpr std::string_view kExt = ".safetensors";
    if (name.size() > kExt.size() && name.compare(name.size() - kExt.size(), kExt.size(), kExt) == 0)
      out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// A shard name from an index must stay inside the checkpoint directory.
bool IsSafeShardName(const std::string& name) {
  if (name.empty() || name.front() == '/') return false;
  size_t start = 0;
  while (start <= name.size()) {
    const size_t slash = std::min(name.find('/', start), name.size());
    if (name.compare(start, slash - start, "..") == 0 && slash - start == 2) return false;
    start = slash + 1;
  }
  return true;
}

}  // namespace

float ValidateScale(float value, std::string_view what) {
  if (!std::isfinite(value) || !(value > 0.0f))
    ThrowLoadError(what, ": scale is ", value, "; a quantization scale must be finite and > 0");
  return value;
}

Checkpoint Checkpoint::Open(const std::string& dir) {
  Checkpoint c;
  c.dir_ = dir;
  std::map<std::string, size_t> file_index;  // file name -> files_ position
  auto open_file = [&](const std::string& name) -> const SafetensorsFile* {
    auto it = file_index.find(name);
    if (it != file_index.end()) return c.files_[it->second].get();
    c.files_.push_back(SafetensorsFile::Open(JoinPath(dir, name)));
    file_index[name] = c.files_.size() - 1;
    return c.files_.back().get();
  };

  const std::string index_path = JoinPath(dir, kIndexFile);
  if (FileExists(index_path)) {
    const nlohmann::json index = ReadJsonFile(index_path);
    if (!index.is_object()) ThrowLoadError(index_path, ": must be a JSON object, got ", DescribeJson(index));
    if (!index.contains("weight_map")) ThrowLoadError(index_path, ": missing field 'weight_map'");
    const auto& map = index["weight_map"];
    if (!map.is_object())
      ThrowLoadError(index_path, ": field 'weight_map' must be an object, got ", DescribeJson(map));
    if (map.empty()) ThrowLoadError(index_path, ": field 'weight_map' is empty");
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it.value().is_string())
        ThrowLoadError(index_path, ": weight_map entry for tensor '", it.key(),
                       "' must be a file name string, got ", DescribeJson(it.value()));
      const std::string shard = it.value().get<std::string>();
      if (!IsSafeShardName(shard))
        ThrowLoadError(index_path, ": weight_map entry for tensor '", it.key(), "' names shard '", shard,
                       "', which is outside the checkpoint directory");
      if (!file_index.count(shard) && !FileExists(JoinPath(dir, shard)))
        ThrowLoadError(index_path, ": weight_map entry for tensor '", it.key(), "' names shard '", shard,
                       "', which does not exist in ", dir);
      const SafetensorsFile* f = open_file(shard);
      const TensorInfo* info = f->Find(it.key());
      if (!info)
        ThrowLoadError(index_path, ": tensor '", it.key(), "' is listed in weight_map but absent from its shard ",
                       f->path());
      c.entries_[it.key()] = Entry{f, info};
    }
    // Tensors a shard holds beyond the index are still loadable (vLLM reads whole shards).
    for (const auto& f : c.files_)
      for (const auto& t : f->tensors()) c.entries_.try_emplace(t.name, Entry{f.get(), &t});
    return c;
  }

  std::vector<std::string> names;
  if (FileExists(JoinPath(dir, kSingleFile))) {
    names.push_back(kSingleFile);
  } else {
    names = ListSafetensors(dir);
    if (names.empty())
      ThrowLoadError(dir, ": no ", kSingleFile, ", ", kIndexFile, " or other *.safetensors file");
  }
  for (const auto& name : names) {
    const SafetensorsFile* f = open_file(name);
    for (const auto& t : f->tensors()) {
      auto [it, inserted] = c.entries_.try_emplace(t.name, Entry{f, &t});
      if (!inserted)
        ThrowLoadError(dir, ": tensor '", t.name, "' is in both ", it->second.file->path(), " and ", f->path());
    }
  }
  return c;
}

const Checkpoint::Entry& Checkpoint::Lookup(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::string files;
    for (const auto& f : files_) files += (files.empty() ? "" : ", ") + f->path();
    ThrowLoadError(dir_, ": tensor '", name, "' not found in the checkpoint (", entries_.size(),
                   " tensors in ", files, ")");
  }
  return it->second;
}

bool Checkpoint::Has(std::string_view name) const { return entries_.find(name) != entries_.end(); }

const TensorInfo& Checkpoint::Info(std::string_view name) const { return *Lookup(name).info; }

vt::Tensor Checkpoint::Get(std::string_view name) const { return Lookup(name).file->Get(name); }

vt::Tensor Checkpoint::GetAs(std::string_view name, vt::DType expected,
                             const vt::Shape& expected_shape) const {
  const Entry& e = Lookup(name);
  if (e.info->dtype != expected || e.info->shape != expected_shape)
    ThrowLoadError(e.file->path(), ": tensor '", name, "' is ", vt::ShapeToString(e.info->shape), " ",
                   SafetensorsDTypeName(e.info->dtype), ", expected ", vt::ShapeToString(expected_shape), " ",
                   SafetensorsDTypeName(expected));
  return e.file->Get(name);
}

float Checkpoint::GetScalarF32(std::string_view name) const {
  const Entry& e = Lookup(name);
  const TensorInfo& info = *e.info;
  const bool scalar_shape = info.shape.empty() || (info.shape.size() == 1 && info.shape[0] == 1);
  if (!scalar_shape)
    ThrowLoadError(e.file->path(), ": tensor '", name, "' is ", vt::ShapeToString(info.shape), " ",
                   SafetensorsDTypeName(info.dtype), ", expected a scalar ([] or [1])");
  const vt::Tensor t = e.file->Get(name);
  switch (info.dtype) {
    case vt::DType::kF32: {
      float v;
      t.CopyToHost(&v);
      return v;
    }
    case vt::DType::kBF16: {
      uint16_t h;
      t.CopyToHost(&h);
      return vt::Bf16ToFloat(h);
    }
    case vt::DType::kF16: {
      uint16_t h;
      t.CopyToHost(&h);
      return vt::F16ToFloat(h);
    }
    default:
      ThrowLoadError(e.file->path(), ": tensor '", name, "' is ", SafetensorsDTypeName(info.dtype),
                     ", expected an F32 scalar");
  }
}

float Checkpoint::GetScaleF32(std::string_view name) const {
  const float v = GetScalarF32(name);
  return ValidateScale(v, vt::StrCat(FileOf(name), ": tensor '", name, "'"));
}

vt::Tensor WeightOnDevice(const vt::Tensor& t, vt::Device device) {
  vt::Tensor w = t.device() == device ? t : t.To(device);
  w.SetReadOnly();
  return w;
}

vt::Tensor LoadFloatWeight(const Checkpoint& ckpt, const std::string& name, const vt::Shape& shape, vt::Device device) {
  const vt::DType dt = ckpt.Info(name).dtype;
  VT_CHECK(dt == vt::DType::kF32 || dt == vt::DType::kBF16 || dt == vt::DType::kF16, ckpt.FileOf(name), ": tensor '",
           name, "' is ", vt::DTypeName(dt), " but must be F32, BF16 or F16");
  return WeightOnDevice(ckpt.GetAs(name, dt, shape), device);
}

bool Checkpoint::DropPages(const vt::Tensor& t) const {
  if (!t.device().is_cpu() || t.bytes_released()) return false;
  for (const auto& f : files_)
    if (f->DropPages(t.data(), t.nbytes())) return true;
  return false;
}

std::string Checkpoint::FileOf(std::string_view name) const { return Lookup(name).file->path(); }

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

uint64_t Checkpoint::prefix_bytes(std::string_view prefix) const {
  uint64_t total = 0;
  for (const auto& [name, e] : entries_)
    if (std::string_view(name).substr(0, prefix.size()) == prefix) total += e.info->nbytes();
  return total;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, e] : entries_) total += e.info->nbytes();
  return total;
}

}  // namespace vtllm::model
