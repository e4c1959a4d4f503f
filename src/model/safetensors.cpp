#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include "model/load_error.h"

namespace vtllm::model {

namespace {

struct DTypeName {
  std::string_view name;
  vt::DType dtype;
};
// The safetensors spellings of the dtypes vt has (F8E4M3 is spelled F8_E4M3 on disk).
constexpr DTypeName kSafetensorsDTypes[] = {
    {"F32", vt::DType::kF32},     {"F16", vt::DType::kF16}, {"BF16", vt::DType::kBF16},
    {"F8_E4M3", vt::DType::kF8E4M3}, {"I32", vt::DType::kI32}, {"I64", vt::DType::kI64},
    {"U8", vt::DType::kU8},
};
static_assert(std::size(kSafetensorsDTypes) == vt::kNumDTypes,
              "every vt dtype needs a safetensors spelling");

std::string SupportedDTypes() {
  std::string s;
  for (const auto& d : kSafetensorsDTypes) {
    if (!s.empty()) s += ", ";
    s += d.name;
  }
  return s;
}

// The deepest nesting a valid header has: root object -> entry object -> shape array.
constexpr int kMaxHeaderDepth = 3;

// Multiplies non-negative values, returning false on overflow past 2^63.
bool MulChecked(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / a) return false;
  *out = a * b;
  return true;
}

std::string Range(uint64_t b, uint64_t e) { return vt::StrCat("[", b, ", ", e, "]"); }

}  // namespace

std::optional<vt::DType> ParseSafetensorsDType(std::string_view name) {
  for (const auto& d : kSafetensorsDTypes)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

std::string_view SafetensorsDTypeName(vt::DType dtype) {
  for (const auto& d : kSafetensorsDTypes)
    if (d.dtype == dtype) return d.name;
  return "?";
}

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  Mapping(void* a, size_t s) : addr(a), size(s) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (addr) ::munmap(addr, size);
  }
  const unsigned char* bytes() const { return static_cast<const unsigned char*>(addr); }
};

std::shared_ptr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ThrowLoadError(path, ": cannot open safetensors file (", std::strerror(errno), ")");
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    ThrowLoadError(path, ": not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    ThrowLoadError(path, ": file is ", size, " bytes, shorter than the 8-byte header length");
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (addr == MAP_FAILED) ThrowLoadError(path, ": mmap failed (", std::strerror(map_errno), ")");

  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->mapping_ = std::make_shared<Mapping>(addr, size);
  f->file_size_ = size;
  const unsigned char* p = f->mapping_->bytes();

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | p[i];
  if (header_len > kMaxSafetensorsHeaderBytes)
    ThrowLoadError(path, ": header length ", header_len, " is absurd (limit ",
                   kMaxSafetensorsHeaderBytes, " bytes); not a safetensors file?");
  if (header_len > size - 8)
    ThrowLoadError(path, ": header length ", header_len, " runs past the end of the file (",
                   size, " bytes; at most ", size - 8, " available)");
  f->data_offset_ = 8 + header_len;
  const uint64_t data_size = size - f->data_offset_;

  // Parse with a callback that rejects duplicate tensor names (JSON parsers keep the last
  // silently) and nesting deeper than any valid header has.
  std::set<std::string> seen;
  std::string duplicate;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(
        reinterpret_cast<const char*>(p + 8), reinterpret_cast<const char*>(p + 8 + header_len),
        [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          if (depth > kMaxHeaderDepth)
            ThrowLoadError(path, ": header nests deeper than ", kMaxHeaderDepth,
                           " levels; not a safetensors header");
          if (event == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string()) {
            if (!seen.insert(parsed.get<std::string>()).second && duplicate.empty())
              duplicate = parsed.get<std::string>();
          }
          return true;
        });
  } catch (const nlohmann::json::exception& e) {
    ThrowLoadError(path, ": header is not valid JSON (", e.what(), ")");
  }
  if (!header.is_object())
    ThrowLoadError(path, ": header is not a JSON object (got ", DescribeJson(header), ")");
  if (!duplicate.empty()) ThrowLoadError(path, ": tensor '", duplicate, "' appears twice in the header");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (name == "__metadata__") {
      if (e.is_null()) continue;
      if (!e.is_object())
        ThrowLoadError(path, ": __metadata__ must be an object of strings, got ", DescribeJson(e));
      for (auto m = e.begin(); m != e.end(); ++m)
        if (!m.value().is_string())
          ThrowLoadError(path, ": __metadata__ field '", m.key(), "' must be a string, got ",
                         DescribeJson(m.value()));
      f->metadata_ = e;
      continue;
    }
    const std::string where = vt::StrCat(path, ": tensor '", name, "'");
    if (!e.is_object()) ThrowLoadError(where, ": entry must be an object, got ", DescribeJson(e));
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!e.contains(field)) ThrowLoadError(where, ": missing field '", field, "'");

    TensorInfo info;
    info.name = name;
    const auto& jd = e["dtype"];
    if (!jd.is_string()) ThrowLoadError(where, ": field 'dtype' must be a string, got ", DescribeJson(jd));
    const auto dtype = ParseSafetensorsDType(jd.get<std::string>());
    if (!dtype)
      ThrowLoadError(where, ": unknown dtype '", jd.get<std::string>(), "' (supported: ",
                     SupportedDTypes(), ")");
    info.dtype = *dtype;

    const auto& js = e["shape"];
    if (!js.is_array()) ThrowLoadError(where, ": field 'shape' must be an array, got ", DescribeJson(js));
    uint64_t numel = 1;
    for (const auto& d : js) {
      if (!d.is_number_unsigned())
        ThrowLoadError(where, ": field 'shape' must hold non-negative integers, got ", DescribeJson(js));
      const uint64_t dim = d.get<uint64_t>();
      if (!MulChecked(numel, dim, &numel))
        ThrowLoadError(where, ": shape ", js.dump(), " has too many elements");
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t expected_bytes = 0;
    if (!MulChecked(numel, vt::DTypeSize(info.dtype), &expected_bytes))
      ThrowLoadError(where, ": shape ", js.dump(), " has too many bytes");

    const auto& jo = e["data_offsets"];
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
      ThrowLoadError(where, ": field 'data_offsets' must be [begin, end] with non-negative integers, got ",
                     DescribeJson(jo));
    info.begin = jo[0].get<uint64_t>();
    info.end = jo[1].get<uint64_t>();
    if (info.begin > info.end)
      ThrowLoadError(where, ": data_offsets ", Range(info.begin, info.end), " begin after they end");
    if (info.end > data_size)
      ThrowLoadError(where, ": data_offsets ", Range(info.begin, info.end),
                     " run past the end of the data section (", data_size, " bytes)");
    if (info.end - info.begin != expected_bytes)
      ThrowLoadError(where, ": shape ", vt::ShapeToString(info.shape), " x ", jd.get<std::string>(), " (",
                     vt::DTypeSize(info.dtype), " bytes) needs ", expected_bytes,
                     " bytes but data_offsets ", Range(info.begin, info.end), " span ",
                     info.end - info.begin);
    f->tensors_.push_back(std::move(info));
  }

  // No two tensors may share bytes.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : f->tensors_)
    if (t.end > t.begin) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (b.begin < a.end)
      ThrowLoadError(path, ": tensors '", a.name, "' (data_offsets ", Range(a.begin, a.end), ") and '",
                     b.name, "' (data_offsets ", Range(b.begin, b.end), ") overlap");
  }
  // json objects iterate in key order, so tensors_ is sorted by name.
  return f;
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  if (it == tensors_.end() || it->name != name) return nullptr;
  return &*it;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& t : tensors_) out.push_back(t.name);
  return out;
}

bool SafetensorsFile::DropPages(const void* p, size_t n) const {
  const auto begin = reinterpret_cast<uintptr_t>(p), end = begin + n;
  const auto map_begin = reinterpret_cast<uintptr_t>(mapping_->addr), map_end = map_begin + mapping_->size;
  if (begin < map_begin || end > map_end) return false;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  // A read-only private file mapping: dropped pages read back from the file.
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  return true;
}

vt::Tensor SafetensorsFile::Get(std::string_view name) const {
  const TensorInfo* info = Find(name);
  if (!info) ThrowLoadError(path_, ": no tensor '", name, "'");
  const unsigned char* data = mapping_->bytes() + data_offset_ + info->begin;
  // The header's length is arbitrary, so a tensor's bytes may be misaligned for its dtype
  // (writers pad to 8, but not all do); those few get copied so kernels see aligned data.
  // Either way the tensor is read-only: the mapping is PROT_READ, so an op asked to write it
  // refuses by name instead of faulting (and a copy behaves the same).
  vt::Tensor t = reinterpret_cast<uintptr_t>(data) % vt::DTypeSize(info->dtype) != 0
                     ? vt::Tensor::FromHost(data, info->shape, info->dtype, vt::Device::Cpu())
                     : vt::Tensor::Borrow(const_cast<unsigned char*>(data), info->shape, info->dtype,
                                          vt::Device::Cpu(), mapping_);
  t.SetReadOnly();
  return t;
}

}  // namespace vtllm::model
