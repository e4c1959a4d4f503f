#include "model/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "model/safetensors.h"
#include "vt/error.h"

namespace vtllm::model {

namespace {

uint64_t NumBytes(vt::DType dtype, const vt::Shape& shape) {
  uint64_t n = vt::DTypeSize(dtype);
  for (int64_t d : shape) {
    VT_CHECK(d >= 0, "SafetensorsWriter: negative dimension in ", vt::ShapeToString(shape));
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

// A FILE* that closes itself; Close() reports the error of the final flush.
struct File {
  std::FILE* f = nullptr;
  ~File() {
    if (f) std::fclose(f);
  }
  bool Close() {
    const int rc = std::fclose(f);
    f = nullptr;
    return rc == 0;
  }
};

}  // namespace

void SafetensorsWriter::Add(const std::string& name, vt::DType dtype, const vt::Shape& shape, const void* data) {
  const uint64_t n = NumBytes(dtype, shape);
  auto bytes = std::make_shared<std::vector<unsigned char>>(n);
  if (n) std::memcpy(bytes->data(), data, n);
  entries_.push_back({name, dtype, shape, [bytes](void* dst, size_t nbytes) {
                        if (nbytes) std::memcpy(dst, bytes->data(), nbytes);
                      }});
}

void SafetensorsWriter::Add(const std::string& name, const vt::Tensor& t) {
  VT_CHECK(t.device().is_cpu() && t.is_contiguous(), "SafetensorsWriter: tensor '", name, "' is ", t.Describe(),
           "; it must be a contiguous CPU tensor");
  entries_.push_back({name, t.dtype(), t.shape(), [t](void* dst, size_t nbytes) {
                        if (nbytes) std::memcpy(dst, t.data(), nbytes);
                      }});
}

void SafetensorsWriter::AddGenerated(const std::string& name, vt::DType dtype, const vt::Shape& shape, Fill fill) {
  NumBytes(dtype, shape);
  entries_.push_back({name, dtype, shape, std::move(fill)});
}

void SafetensorsWriter::SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t total = 0;
  for (const auto& e : entries_) total += NumBytes(e.dtype, e.shape);
  return total;
}

void SafetensorsWriter::Write(const std::string& path) const {
  std::vector<const Entry*> order;
  std::set<std::string> names;
  for (const auto& e : entries_) {
    VT_CHECK(names.insert(e.name).second, "SafetensorsWriter: tensor '", e.name, "' added twice (", path, ")");
    order.push_back(&e);
  }
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    if (vt::DTypeSize(a->dtype) != vt::DTypeSize(b->dtype)) return vt::DTypeSize(a->dtype) > vt::DTypeSize(b->dtype);
    return a->name < b->name;
  });

  nlohmann::json header = nlohmann::json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry* e : order) {
    const uint64_t n = NumBytes(e->dtype, e->shape);
    header[e->name] = {{"dtype", std::string(SafetensorsDTypeName(e->dtype))},
                       {"shape", e->shape},
                       {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  File out;
  out.f = std::fopen(tmp.c_str(), "wb");
  VT_CHECK(out.f, "SafetensorsWriter: cannot create ", tmp, " (", std::strerror(errno), ")");
  auto put = [&](const void* p, size_t n) {
    VT_CHECK(n == 0 || std::fwrite(p, 1, n, out.f) == n, "SafetensorsWriter: write to ", tmp, " failed (",
             std::strerror(errno), ")");
  };
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  put(len, 8);
  put(text.data(), text.size());
  std::vector<unsigned char> buf;
  for (const Entry* e : order) {
    const size_t n = NumBytes(e->dtype, e->shape);
    buf.resize(n);
    e->fill(buf.data(), n);
    put(buf.data(), n);
  }
  VT_CHECK(out.Close(), "SafetensorsWriter: closing ", tmp, " failed (", std::strerror(errno), ")");
  VT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "SafetensorsWriter: cannot rename ", tmp, " to ", path,
           " (", std::strerror(errno), ")");
}

void WriteSafetensorsIndex(const std::string& path, const std::map<std::string, std::string>& weight_map,
                           uint64_t total_size) {
  nlohmann::json j = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  std::FILE* f = std::fopen(path.c_str(), "wb");
  VT_CHECK(f, "WriteSafetensorsIndex: cannot create ", path, " (", std::strerror(errno), ")");
  const std::string text = j.dump(2) + "\n";
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  VT_CHECK(std::fclose(f) == 0 && ok, "WriteSafetensorsIndex: write to ", path, " failed");
}

}  // namespace vtllm::model
