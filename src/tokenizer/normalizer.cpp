#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <bitset>
#include <cstdlib>
#include <memory>

#include "tokenizer/utf8.h"

namespace vtllm::tok {
namespace {

// Code points that may change under NFC, alone or next to their neighbours: combining marks,
// characters with a canonical decomposition, and every non-initial character of a canonical
// decomposition (which includes all characters that can combine with a preceding starter), plus
// the Hangul vowel and trailing jamo. Text free of them is already in NFC, so NFC can skip it.
// Computed once from utf8proc's tables; a superset is harmless (it only costs speed).
class NfcUnsafeTable {
 public:
  NfcUnsafeTable() : bits_(std::make_unique<std::bitset<0x110000>>()) {
    auto& b = *bits_;
    for (utf8proc_int32_t cp = 0x300; cp < 0x110000; ++cp) {
      const utf8proc_property_t* p = utf8proc_get_property(cp);
      if (p->combining_class != 0) b.set(cp);
      if (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0) continue;
      b.set(cp);  // has a canonical decomposition
      utf8proc_int32_t dec[8];
      int last = 0;
      const utf8proc_ssize_t n = utf8proc_decompose_char(cp, dec, 8, UTF8PROC_DECOMPOSE, &last);
      for (utf8proc_ssize_t k = 1; k < n && k < 8; ++k) {
        if (dec[k] >= 0 && dec[k] < 0x110000) b.set(static_cast<size_t>(dec[k]));
      }
    }
    for (char32_t cp = 0x1161; cp <= 0x1175; ++cp) b.set(cp);
    for (char32_t cp = 0x11A8; cp <= 0x11C2; ++cp) b.set(cp);
  }
  bool unsafe(char32_t cp) const { return (*bits_)[cp]; }

 private:
  std::unique_ptr<std::bitset<0x110000>> bits_;
};

const NfcUnsafeTable& NfcTable() {
  static const NfcUnsafeTable table;
  return table;
}

// True when `s` (valid UTF-8) is certainly unchanged by NFC.
bool QuickIsNfc(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  const size_t n = s.size();
  const NfcUnsafeTable* table = nullptr;
  while (i < n) {
    if (p[i] < 0xCC) {  // every code point below U+0300 is NFC-stable
      ++i;
      continue;
    }
    const char32_t cp = NextCodePoint(s, i);
    if (!table) table = &NfcTable();
    if (table->unsafe(cp)) return false;
  }
  return true;
}

utf8proc_option_t Options(Normalizer::Form f) {
  switch (f) {
    case Normalizer::Form::kNFC: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    case Normalizer::Form::kNFD: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case Normalizer::Form::kNFKC:
      return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case Normalizer::Form::kNFKD:
      return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  return UTF8PROC_STABLE;
}

}  // namespace

Normalizer Normalizer::FromJson(const Json& j, std::string_view path) {
  Normalizer n;
  if (!j.is_null()) n.Parse(j, path);
  return n;
}

void Normalizer::Parse(const Json& j, std::string_view path) {
  const std::string& type = RequireString(j, path, "type");
  if (type == "NFC") {
    forms_.push_back(Form::kNFC);
  } else if (type == "NFD") {
    forms_.push_back(Form::kNFD);
  } else if (type == "NFKC") {
    forms_.push_back(Form::kNFKC);
  } else if (type == "NFKD") {
    forms_.push_back(Form::kNFKD);
  } else if (type == "Sequence") {
    const std::string p = JoinPath(path, "normalizers");
    const Json& list = Require(j, path, "normalizers");
    if (!list.is_array()) ThrowField(p, "expected an array, got " + Describe(list));
    for (size_t i = 0; i < list.size(); ++i) Parse(list[i], p + "[" + std::to_string(i) + "]");
  } else {
    ThrowField(JoinPath(path, "type"),
               "unsupported normalizer type \"" + type +
                   "\" (supported: NFC, NFD, NFKC, NFKD, Sequence)");
  }
}

std::string_view Normalizer::Apply(std::string_view in, std::string& buf) const {
  std::string_view cur = in;
  for (const Form f : forms_) {
    if (f == Form::kNFC && QuickIsNfc(cur)) continue;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t r =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(cur.data()),
                     static_cast<utf8proc_ssize_t>(cur.size()), &out, Options(f));
    if (r < 0) {
      // Only possible for invalid UTF-8, which Encode replaces beforehand; keep the text as is.
      std::free(out);
      continue;
    }
    std::string next(reinterpret_cast<const char*>(out), static_cast<size_t>(r));
    std::free(out);
    buf = std::move(next);
    cur = buf;
  }
  return cur;
}

}  // namespace vtllm::tok
