// Fuzzes tokenizer.json loading: any bytes either load or raise TokenizerError; a tokenizer that
// loads must encode and decode without crashing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    const vtllm::Tokenizer t = vtllm::Tokenizer::FromJson(json);
    for (const std::string_view text :
         {std::string_view("Hello world! 123 <|im_start|>x\n\n  y"), std::string_view("\xff\xe2\x82 caf\xc3\xa9"),
          std::string_view("")}) {
      const auto ids = t.Encode(text, true);
      (void)t.Decode(ids, false);
      (void)t.Decode(ids, true);
    }
    const int32_t probe[] = {0, 1, 255, 256, -1, 1 << 21, static_cast<int32_t>(t.VocabSize()) - 1};
    (void)t.Decode(probe);
    vtllm::IncrementalDetokenizer d(t);
    for (const int32_t id : probe) (void)d.Push(id);
    (void)d.Finish();
  } catch (const vtllm::TokenizerError&) {
    // Rejected with a message: the expected outcome for bad files.
  }
  return 0;
}
