// A catalog of malformed checkpoints. Each case starts from a small valid static-FP8
// checkpoint written byte by byte, breaks one thing, and loads it the way a model does
// (config, quantization config, every expected tensor with its dtype and shape, scales).
// Each must fail with a LoadError whose message names the file and the tensor or field —
// never a crash (the ASan/UBSan build runs this too).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>

#include "loader_test_util.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/quant_config.h"

namespace vtllm::model {
namespace {

using nlohmann::json;
using testing::BytesOf;
using testing::TempDir;

// The pieces of a checkpoint directory, before they are written.
struct Files {
  json config;
  json header;        // model.safetensors header
  std::string data;   // its data section
  std::function<std::string(std::string)> edit_file;  // edits model.safetensors' bytes
  json index;         // model.safetensors.index.json when not null
  std::map<std::string, std::string> extra;  // more files: name -> bytes
};

constexpr float kWeightScale = 0.01f, kInputScale = 0.02f;

Files ValidFiles() {
  Files f;
  f.config = {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"},  {"hidden_size", 8},
              {"intermediate_size", 16},                 {"num_hidden_layers", 1}, {"num_attention_heads", 2},
              {"num_key_value_heads", 1},                {"head_dim", 4},          {"vocab_size", 16},
              {"max_position_embeddings", 64},           {"rms_norm_eps", 1e-6},   {"dtype", "bfloat16"},
              {"rope_parameters", {{"rope_theta", 1e6}, {"rope_type", "default"}}},
              {"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}, {"exclude_modules", {"lm_head"}}}}};
  const std::vector<float> scales = {kWeightScale, kInputScale};
  const std::vector<uint16_t> embed(16 * 8, 0x3C00);
  const std::vector<uint8_t> weight(4 * 8, 0x38);
  f.data = BytesOf(scales) + BytesOf(embed) + BytesOf(weight);
  f.header = {{"__metadata__", {{"format", "pt"}}},
              {"layers.0.proj.weight_scale", {{"dtype", "F32"}, {"shape", json::array()}, {"data_offsets", {0, 4}}}},
              {"layers.0.proj.input_scale", {{"dtype", "F32"}, {"shape", json::array()}, {"data_offsets", {4, 8}}}},
              {"embed.weight", {{"dtype", "BF16"}, {"shape", {16, 8}}, {"data_offsets", {8, 264}}}},
              {"layers.0.proj.weight", {{"dtype", "F8_E4M3"}, {"shape", {4, 8}}, {"data_offsets", {264, 296}}}}};
  return f;
}

std::string FileBytes(const Files& f) {
  const std::string header = f.header.dump();
  std::string bytes = testing::LengthPrefix(header.size()) + header + f.data;
  return f.edit_file ? f.edit_file(bytes) : bytes;
}

void WriteFiles(const Files& f, const std::string& dir) {
  testing::WriteJson(dir + "/config.json", f.config);
  if (f.index.is_null()) {
    testing::WriteBytes(dir + "/model.safetensors", FileBytes(f));
  } else {
    testing::WriteJson(dir + "/model.safetensors.index.json", f.index);
    testing::WriteBytes(dir + "/model-00001-of-00001.safetensors", FileBytes(f));
  }
  for (const auto& [name, bytes] : f.extra) testing::WriteBytes(dir + "/" + name, bytes);
}

// What a model does on load.
void LoadLikeAModel(const std::string& dir) {
  const ModelConfig cfg = ModelConfig::FromDir(dir);
  const QuantConfig q = QuantConfig::FromDir(dir);
  const Checkpoint ck = Checkpoint::Open(dir);
  ck.GetAs("embed.weight", vt::DType::kBF16, {cfg.vocab_size, cfg.hidden_size});
  if (q.IsQuantized("layers.0.proj")) {
    ck.GetAs("layers.0.proj.weight", vt::DType::kF8E4M3, {4, cfg.hidden_size});
    ck.GetScaleF32("layers.0.proj.weight_scale");
    ck.GetScaleF32("layers.0.proj.input_scale");
  } else {
    ck.GetAs("layers.0.proj.weight", vt::DType::kBF16, {4, cfg.hidden_size});
  }
}

struct Case {
  const char* name;
  std::function<void(Files&)> edit;
  std::vector<std::string> needles;  // besides these, the message must name `file`
  const char* file;                  // the file the message must name
};

void SetScale(Files& f, float v) { std::memcpy(&f.data[4], &v, 4); }

const Case kCases[] = {
    {"TruncatedFile", [](Files& f) { f.edit_file = [](std::string b) { return b.substr(0, b.size() - 10); }; },
     {"layers.0.proj.weight", "run past the end of the data section"}, "model.safetensors"},
    {"ShorterThanEightBytes", [](Files& f) { f.edit_file = [](std::string) { return std::string("\x10\0\0", 3); }; },
     {"3 bytes", "shorter than the 8-byte header length"}, "model.safetensors"},
    {"HeaderLengthPastEof",
     [](Files& f) { f.edit_file = [](std::string b) { return testing::LengthPrefix(b.size()) + b.substr(8); }; },
     {"header length", "runs past the end of the file"}, "model.safetensors"},
    {"AbsurdHeaderLength",
     [](Files& f) { f.edit_file = [](std::string b) { return testing::LengthPrefix(1ull << 60) + b.substr(8); }; },
     {"header length 1152921504606846976", "absurd"}, "model.safetensors"},
    {"HeaderNotJson",
     [](Files& f) {
       f.edit_file = [](std::string b) {
         b[8] = '!';
         return b;
       };
     },
     {"header is not valid JSON"}, "model.safetensors"},
    {"HeaderNotAnObject", [](Files& f) { f.header = json::array({1, 2}); }, {"not a JSON object", "array"},
     "model.safetensors"},
    {"HeaderNestedTooDeep",
     [](Files& f) { f.edit_file = [](std::string) {
         const std::string h = std::string(100000, '[') + std::string(100000, ']');
         return testing::LengthPrefix(h.size()) + h;
       }; },
     {"nests deeper"}, "model.safetensors"},
    {"OverlappingOffsets", [](Files& f) { f.header["layers.0.proj.weight"]["data_offsets"] = {232, 264}; },
     {"'embed.weight'", "'layers.0.proj.weight'", "overlap"}, "model.safetensors"},
    {"OffsetsPastDataSection",
     [](Files& f) {
       f.header["layers.0.proj.weight"]["data_offsets"] = {296, 328};
     },
     {"layers.0.proj.weight", "[296, 328]", "past the end of the data section (296 bytes)"}, "model.safetensors"},
    {"OffsetsBeginAfterEnd", [](Files& f) { f.header["layers.0.proj.weight"]["data_offsets"] = {296, 264}; },
     {"layers.0.proj.weight", "begin after"}, "model.safetensors"},
    {"WrongByteLength", [](Files& f) { f.header["layers.0.proj.weight"]["shape"] = {4, 9}; },
     {"layers.0.proj.weight", "[4, 9]", "needs 36 bytes", "span 32"}, "model.safetensors"},
    {"UnknownDtype", [](Files& f) { f.header["embed.weight"]["dtype"] = "F64"; },
     {"embed.weight", "unknown dtype 'F64'"}, "model.safetensors"},
    {"EntryMissingOffsets", [](Files& f) { f.header["embed.weight"].erase("data_offsets"); },
     {"embed.weight", "missing field 'data_offsets'"}, "model.safetensors"},
    {"ShapeNotAList", [](Files& f) { f.header["embed.weight"]["shape"] = "16x8"; },
     {"embed.weight", "'shape'", "\"16x8\""}, "model.safetensors"},
    {"NegativeDimension", [](Files& f) { f.header["embed.weight"]["shape"] = {-16, -8}; },
     {"embed.weight", "non-negative"}, "model.safetensors"},
    {"DuplicateTensor",
     [](Files& f) {
       f.edit_file = [](std::string) {
         const std::string dup = R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"x":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
         return testing::LengthPrefix(dup.size()) + dup + "ab";
       };
     },
     {"'x'", "appears twice"}, "model.safetensors"},
    {"MetadataNotStrings", [](Files& f) { f.header["__metadata__"]["step"] = 5; },
     {"__metadata__", "'step'", "string"}, "model.safetensors"},
    {"MissingTensor", [](Files& f) { f.header.erase("embed.weight"); }, {"'embed.weight'", "not found"}, "model.safetensors"},
    {"F16WhereF8E4M3Expected", [](Files& f) {
       f.header["layers.0.proj.weight"]["dtype"] = "F16";
       f.header["layers.0.proj.weight"]["shape"] = {2, 8};
     },
     {"'layers.0.proj.weight'", "[2, 8] F16", "expected [4, 8] F8_E4M3"}, "model.safetensors"},
    {"TransposedWeight", [](Files& f) { f.header["layers.0.proj.weight"]["shape"] = {8, 4}; },
     {"'layers.0.proj.weight'", "[8, 4] F8_E4M3", "expected [4, 8]"}, "model.safetensors"},
    {"MissingInputScale", [](Files& f) { f.header.erase("layers.0.proj.input_scale"); },
     {"'layers.0.proj.input_scale'", "not found"}, "model.safetensors"},
    {"NanInputScale", [](Files& f) { SetScale(f, std::numeric_limits<float>::quiet_NaN()); },
     {"'layers.0.proj.input_scale'", "nan", "finite and > 0"}, "model.safetensors"},
    {"ZeroInputScale", [](Files& f) { SetScale(f, 0.0f); },
     {"'layers.0.proj.input_scale'", "scale is 0", "finite and > 0"}, "model.safetensors"},
    {"NegativeInputScale", [](Files& f) { SetScale(f, -0.5f); },
     {"'layers.0.proj.input_scale'", "-0.5", "finite and > 0"}, "model.safetensors"},
    {"InfiniteInputScale", [](Files& f) { SetScale(f, std::numeric_limits<float>::infinity()); },
     {"'layers.0.proj.input_scale'", "inf"}, "model.safetensors"},
    {"InputScaleNotScalar",
     [](Files& f) {
       f.header["layers.0.proj.input_scale"]["shape"] = {2};
       f.header["layers.0.proj.input_scale"]["dtype"] = "BF16";
     },
     {"'layers.0.proj.input_scale'", "[2] BF16", "scalar"}, "model.safetensors"},
    {"UnknownQuantMethod", [](Files& f) { f.config["quantization_config"] = {{"quant_method", "hqq"}}; },
     {"quantization_config.quant_method", "\"hqq\"", "not supported yet"}, "config.json"},
    {"MissingConfigField", [](Files& f) { f.config.erase("hidden_size"); }, {"'hidden_size'", "missing"},
     "config.json"},
    {"IllTypedConfigField", [](Files& f) { f.config["num_hidden_layers"] = "one"; },
     {"'num_hidden_layers'", "integer", "\"one\""}, "config.json"},
    {"ConfigNotJson", [](Files& f) { f.extra["config.json"] = "{\"hidden_size\": 8,,}"; }, {"not valid JSON"},
     "config.json"},
    {"IndexPointsToMissingShard",
     [](Files& f) {
       f.index = {{"weight_map",
                   {{"embed.weight", "model-00001-of-00001.safetensors"},
                    {"layers.0.proj.weight", "model-00002-of-00002.safetensors"}}}};
     },
     {"'layers.0.proj.weight'", "model-00002-of-00002.safetensors", "does not exist"},
     "model.safetensors.index.json"},
    {"IndexTensorAbsentFromShard",
     [](Files& f) {
       f.index = {{"weight_map",
                   {{"embed.weight", "model-00001-of-00001.safetensors"}, {"lm_head.weight", "model-00001-of-00001.safetensors"}}}};
     },
     {"'lm_head.weight'", "absent from its shard", "model-00001-of-00001.safetensors"},
     "model.safetensors.index.json"},
    {"IndexWeightMapNotAnObject", [](Files& f) { f.index = {{"weight_map", {"a", "b"}}}; },
     {"'weight_map'", "object"}, "model.safetensors.index.json"},
    {"IndexShardOutsideDirectory",
     [](Files& f) { f.index = {{"weight_map", {{"embed.weight", "../model-00001-of-00001.safetensors"}}}}; },
     {"'embed.weight'", "outside the checkpoint directory"}, "model.safetensors.index.json"},
};

class Malformed : public ::testing::TestWithParam<Case> {};

TEST_P(Malformed, FailsWithAMessageNamingFileAndTensorOrField) {
  const Case& c = GetParam();
  TempDir tmp;
  // The valid checkpoint loads.
  Files files = ValidFiles();
  WriteFiles(files, tmp.path());
  ASSERT_NO_THROW(LoadLikeAModel(tmp.path()));

  TempDir bad;
  c.edit(files);
  WriteFiles(files, bad.path());
  std::vector<std::string> needles = c.needles;
  needles.push_back(bad.path() + "/" + c.file);
  testing::ExpectLoadError([&] { LoadLikeAModel(bad.path()); }, needles);
}

INSTANTIATE_TEST_SUITE_P(Catalog, Malformed, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(MalformedCatalog, HasAtLeastFifteenCases) { EXPECT_GE(std::size(kCases), 15u); }

}  // namespace
}  // namespace vtllm::model
