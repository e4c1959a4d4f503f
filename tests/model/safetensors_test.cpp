// SafetensorsFile and SafetensorsWriter: files written byte by byte from the format are
// read back correctly; the writer's output is checked by parsing it independently here.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "loader_test_util.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "vt/vt.h"

namespace vtllm::model {
namespace {

using nlohmann::json;
using testing::BytesOf;
using testing::TempDir;
using testing::WriteRawSafetensors;

// A header padded with spaces so the data section starts at a multiple of 8.
std::string Padded(std::string header) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

TEST(Safetensors, ReadsAHandWrittenFile) {
  TempDir tmp;
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f};
  const std::vector<uint16_t> b = {0x3F80, 0xC000, 0x7F80};  // bf16 1, -2, +inf
  const std::vector<uint8_t> c = {0x38, 0xFE};               // e4m3fn 1.0, -448
  const std::vector<int64_t> d = {-7};
  const std::string data = BytesOf(a) + BytesOf(b) + BytesOf(c) + BytesOf(d);
  const std::string header = Padded(R"({"__metadata__":{"format":"pt","note":"x"},)"
                                    R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                                    R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
                                    R"("c":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[22,24]},)"
                                    R"("d":{"dtype":"I64","shape":[],"data_offsets":[24,32]},)"
                                    R"("e":{"dtype":"U8","shape":[0,5],"data_offsets":[32,32]}})");
  WriteRawSafetensors(tmp / "m.safetensors", header, data);

  const auto f = SafetensorsFile::Open(tmp / "m.safetensors");
  EXPECT_EQ(f->names(), (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(f->metadata(), json({{"format", "pt"}, {"note", "x"}}));
  EXPECT_EQ(f->data_offset(), 8 + header.size());
  EXPECT_EQ(f->Find("zz"), nullptr);

  const vt::Tensor ta = f->Get("a");
  EXPECT_EQ(ta.dtype(), vt::DType::kF32);
  EXPECT_EQ(ta.shape(), (vt::Shape{2, 2}));
  EXPECT_EQ(std::memcmp(ta.data(), a.data(), 16), 0);
  const vt::Tensor tb = f->Get("b");
  EXPECT_EQ(tb.dtype(), vt::DType::kBF16);
  EXPECT_EQ(vt::Bf16ToFloat(tb.data_as<uint16_t>()[1]), -2.0f);
  const vt::Tensor tc = f->Get("c");
  EXPECT_EQ(tc.dtype(), vt::DType::kF8E4M3);
  EXPECT_EQ(vt::Fp8E4M3ToFloat(tc.data_as<uint8_t>()[1]), -448.0f);
  const vt::Tensor td = f->Get("d");
  EXPECT_EQ(td.shape(), vt::Shape{});
  EXPECT_EQ(td.data_as<int64_t>()[0], -7);
  EXPECT_EQ(f->Get("e").numel(), 0);
  const TensorInfo* info = f->Find("b");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->begin, 16u);
  EXPECT_EQ(info->end, 22u);
}

TEST(Safetensors, TensorsBorrowTheMappingAndOutliveTheFileObject) {
  TempDir tmp;
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  WriteRawSafetensors(tmp / "m.safetensors",
                      Padded(R"({"a":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})"), BytesOf(a));
  auto f = SafetensorsFile::Open(tmp / "m.safetensors");
  vt::Tensor t1 = f->Get("a");
  const vt::Tensor t2 = f->Get("a");
  EXPECT_EQ(t1.data(), t2.data()) << "Get must not copy aligned tensors";
  f.reset();  // the tensors keep the file mapped
  std::vector<float> back(6);
  t1.CopyToHost(back.data());
  EXPECT_EQ(back, a);
  // The mapping is read-only memory: an op asked to write it refuses by name (no fault),
  // and the bytes stay as they were.
  EXPECT_TRUE(t1.read_only());
  const vt::Tensor src = vt::Tensor::FromHost(a.data(), {6}, vt::DType::kF32);
  vt::Queue q = vt::Queue::Cpu(1);
  try {
    vt::Cast(q, t1, src);
    ADD_FAILURE() << "Cast into a mapped checkpoint tensor did not throw";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Cast: out"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("read-only"), std::string::npos) << e.what();
  }
  t1.CopyToHost(back.data());
  EXPECT_EQ(back, a);
}

TEST(Safetensors, MisalignedTensorsAreCopiedNotMisread) {
  TempDir tmp;
  // A 61-byte header puts the data section at byte 69: the F32 tensor is misaligned.
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append(61 - header.size(), ' ');
  const std::vector<float> a = {0.5f, -0.25f};
  WriteRawSafetensors(tmp / "m.safetensors", header, BytesOf(a));
  const auto f = SafetensorsFile::Open(tmp / "m.safetensors");
  const vt::Tensor t = f->Get("a");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 4, 0u);
  EXPECT_TRUE(t.read_only());  // like the mapped tensors
  EXPECT_EQ(t.data_as<float>()[0], 0.5f);
  EXPECT_EQ(t.data_as<float>()[1], -0.25f);
}

TEST(Safetensors, EmptyHeaderAndGapsAreAccepted) {
  TempDir tmp;
  WriteRawSafetensors(tmp / "empty.safetensors", "{}", "");
  EXPECT_TRUE(SafetensorsFile::Open(tmp / "empty.safetensors")->names().empty());
  // Unused bytes between tensors do not make a file invalid.
  const std::vector<uint8_t> data = {1, 2, 99, 99, 3, 4};
  WriteRawSafetensors(tmp / "gap.safetensors",
                      R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                      R"("y":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                      BytesOf(data));
  const auto f = SafetensorsFile::Open(tmp / "gap.safetensors");
  EXPECT_EQ(f->Get("y").data_as<uint8_t>()[1], 4);
}

TEST(Safetensors, DTypeNames) {
  const std::pair<const char*, vt::DType> known[] = {
      {"F32", vt::DType::kF32}, {"F16", vt::DType::kF16}, {"BF16", vt::DType::kBF16}, {"F8_E4M3", vt::DType::kF8E4M3},
      {"I32", vt::DType::kI32}, {"I64", vt::DType::kI64}, {"U8", vt::DType::kU8}};
  for (const auto& [name, dtype] : known) {
    EXPECT_EQ(ParseSafetensorsDType(name), dtype) << name;
    EXPECT_EQ(SafetensorsDTypeName(dtype), name);
  }
  for (const char* name : {"F64", "F8_E5M2", "I8", "BOOL", "f32", "F8E4M3", ""})
    EXPECT_FALSE(ParseSafetensorsDType(name).has_value()) << name;
}

TEST(SafetensorsWriter, OutputFollowsTheFormat) {
  TempDir tmp;
  std::mt19937 rng(7);
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (auto& ch : s) ch = static_cast<char>(rng() & 0xFF);
    return s;
  };
  struct Case {
    std::string name, st_dtype;
    vt::DType dtype;
    vt::Shape shape;
    std::string bytes;
  };
  std::vector<Case> cases = {
      {"w.fp8", "F8_E4M3", vt::DType::kF8E4M3, {3, 5}, random_bytes(15)},
      {"w.bf16", "BF16", vt::DType::kBF16, {7}, random_bytes(14)},
      {"s.f32", "F32", vt::DType::kF32, {}, random_bytes(4)},
      {"h.f16", "F16", vt::DType::kF16, {1, 3}, random_bytes(6)},
      {"i.i32", "I32", vt::DType::kI32, {2}, random_bytes(8)},
      {"i.i64", "I64", vt::DType::kI64, {3}, random_bytes(24)},
      {"u.u8", "U8", vt::DType::kU8, {0}, ""},
      {"g.gen", "F32", vt::DType::kF32, {5}, random_bytes(20)},
  };
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  for (const auto& c : cases) {
    if (c.name == "g.gen") {
      const std::string bytes = c.bytes;
      w.AddGenerated(c.name, c.dtype, c.shape, [bytes](void* dst, size_t n) {
        ASSERT_EQ(n, bytes.size());
        std::memcpy(dst, bytes.data(), n);
      });
    } else if (c.name == "i.i64") {
      w.Add(c.name, vt::Tensor::FromHost(c.bytes.data(), c.shape, c.dtype));
    } else {
      w.Add(c.name, c.dtype, c.shape, c.bytes.data());
    }
  }
  const std::string path = tmp / "w.safetensors";
  w.Write(path);

  // Parse the file here, from the format.
  const std::string file = testing::ReadBytes(path);
  ASSERT_GE(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[i]);
  EXPECT_EQ((8 + n) % 8, 0u) << "data section should start 8-aligned";
  const json header = json::parse(file.substr(8, n));
  EXPECT_EQ(header["__metadata__"], json({{"format", "pt"}}));
  uint64_t covered = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(header.contains(c.name));
    const json& e = header[c.name];
    EXPECT_EQ(e["dtype"], c.st_dtype);
    EXPECT_EQ(e["shape"].get<vt::Shape>(), c.shape);
    const uint64_t b = e["data_offsets"][0], end = e["data_offsets"][1];
    EXPECT_EQ(end - b, c.bytes.size());
    EXPECT_EQ(b % vt::DTypeSize(c.dtype), 0u) << "tensor not aligned to its element size";
    EXPECT_EQ(file.substr(8 + n + b, end - b), c.bytes);
    covered += end - b;
  }
  EXPECT_EQ(8 + n + covered, file.size()) << "the data section holds exactly the tensors";

  // And read it back through the reader.
  const auto f = SafetensorsFile::Open(path);
  for (const auto& c : cases) {
    const vt::Tensor t = f->Get(c.name);
    EXPECT_EQ(t.dtype(), c.dtype);
    EXPECT_EQ(t.shape(), c.shape);
    EXPECT_EQ(std::string(static_cast<const char*>(t.data()), t.nbytes()), c.bytes);
  }
}

TEST(SafetensorsWriter, RejectsDuplicateNames) {
  TempDir tmp;
  SafetensorsWriter w;
  const float x = 1;
  w.Add("a", vt::DType::kF32, {}, &x);
  w.Add("a", vt::DType::kF32, {}, &x);
  EXPECT_THROW(w.Write(tmp / "d.safetensors"), vt::Error);
}

// The transformers-written fixture: every tensor HF Qwen3 names, with the config's shapes.
TEST(Safetensors, ReadsTheTransformersFixture) {
  const auto f = SafetensorsFile::Open(testing::FixtureDir("bf16") + "/model.safetensors");
  const int64_t hidden = 128, inter = 384, heads = 4, kv = 2, hd = 32, vocab = 512;
  std::map<std::string, vt::Shape> expected = {
      {"model.embed_tokens.weight", {vocab, hidden}}, {"model.norm.weight", {hidden}}, {"lm_head.weight", {vocab, hidden}}};
  for (int l = 0; l < 3; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expected[p + "input_layernorm.weight"] = {hidden};
    expected[p + "post_attention_layernorm.weight"] = {hidden};
    expected[p + "self_attn.q_proj.weight"] = {heads * hd, hidden};
    expected[p + "self_attn.k_proj.weight"] = {kv * hd, hidden};
    expected[p + "self_attn.v_proj.weight"] = {kv * hd, hidden};
    expected[p + "self_attn.o_proj.weight"] = {hidden, heads * hd};
    expected[p + "self_attn.q_norm.weight"] = {hd};
    expected[p + "self_attn.k_norm.weight"] = {hd};
    expected[p + "mlp.gate_proj.weight"] = {inter, hidden};
    expected[p + "mlp.up_proj.weight"] = {inter, hidden};
    expected[p + "mlp.down_proj.weight"] = {hidden, inter};
  }
  EXPECT_EQ(f->names().size(), expected.size());
  for (const auto& [name, shape] : expected) {
    const TensorInfo* info = f->Find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, vt::DType::kBF16) << name;
    EXPECT_EQ(info->shape, shape) << name;
  }
  EXPECT_EQ(f->metadata().value("format", ""), "pt");
}

}  // namespace
}  // namespace vtllm::model
