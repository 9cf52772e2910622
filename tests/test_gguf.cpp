// GGUF reader: the real stories260K file (metadata, config, tensor shapes and bytes) and synthetic
// files covering every metadata type, nested arrays, alignment, half types and each way a file can
// be broken (every truncation, bad counts, offsets, types): an Error naming the problem, never a crash.
#include <gtest/gtest.h>

#include <cstring>

#include "model/gguf.h"
#include "model_test_util.h"
#include "tensor/dtype.h"

using namespace inferscale;
using namespace inferscale::testing;

namespace {

const std::string kStories = "models/stories260K/stories260K.gguf";

// Builds a GGUF file byte by byte (little-endian host).
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) {
    raw("GGUF", 4);
    u32(version);
  }
  template <class T>
  void put(T v) { raw(&v, sizeof v); }
  void u32(uint32_t v) { put(v); }
  void u64(uint64_t v) { put(v); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) { body_.append(static_cast<const char*>(p), n); }
  // Key + type; the caller writes the value.
  void key(const std::string& k, uint32_t type) {
    str(k);
    u32(type);
  }
  void pad_to(size_t alignment) {
    while ((header_size() + body_.size()) % alignment) body_.push_back('\0');
  }
  // Counts are patched in by finish(): the header is magic, version, n_tensors, n_kv.
  std::string finish(uint64_t n_tensors, uint64_t n_kv) const {
    std::string out = body_.substr(0, 8);
    out.append(reinterpret_cast<const char*>(&n_tensors), 8);
    out.append(reinterpret_cast<const char*>(&n_kv), 8);
    return out + body_.substr(8);
  }
  size_t header_size() const { return 16; }  // the two counts not yet in body_

 private:
  std::string body_;
};

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;  // GGUF order: ne[0] fastest
  uint32_t type;
  std::string data;
};

// A file with one metadata value of every type, nested arrays, alignment 64 and three tensors.
std::string synthetic_gguf(const std::vector<TensorSpec>& tensors, uint32_t alignment = 64) {
  GgufWriter w;
  uint64_t n_kv = 0;
  w.key("general.architecture", 8), w.str("llama"), ++n_kv;
  w.key("general.alignment", 4), w.u32(alignment), ++n_kv;
  w.key("t.u8", 0), w.put<uint8_t>(200), ++n_kv;
  w.key("t.i8", 1), w.put<int8_t>(-100), ++n_kv;
  w.key("t.u16", 2), w.put<uint16_t>(60000), ++n_kv;
  w.key("t.i16", 3), w.put<int16_t>(-30000), ++n_kv;
  w.key("t.i32", 5), w.put<int32_t>(-2000000000), ++n_kv;
  w.key("t.f32", 6), w.put<float>(1e-5f), ++n_kv;
  w.key("t.bool", 7), w.put<uint8_t>(1), ++n_kv;
  w.key("t.u64", 10), w.put<uint64_t>(1ull << 40), ++n_kv;
  w.key("t.i64", 11), w.put<int64_t>(-(1ll << 40)), ++n_kv;
  w.key("t.f64", 12), w.put<double>(0.1), ++n_kv;
  w.key("t.strings", 9), w.u32(8), w.u64(3), w.str("a"), w.str(""), w.str("<0x0A>"), ++n_kv;
  w.key("t.floats", 9), w.u32(6), w.u64(2), w.put<float>(0.5f), w.put<float>(-2.0f), ++n_kv;
  w.key("t.ints", 9), w.u32(5), w.u64(3), w.put<int32_t>(1), w.put<int32_t>(-2), w.put<int32_t>(3), ++n_kv;
  w.key("t.bools", 9), w.u32(7), w.u64(2), w.put<uint8_t>(0), w.put<uint8_t>(1), ++n_kv;
  w.key("t.empty", 9), w.u32(8), w.u64(0), ++n_kv;
  // [["x", "y"], ["z"]] and [[1, 2], []]
  w.key("t.nested_strings", 9), w.u32(9), w.u64(2);
  w.u32(8), w.u64(2), w.str("x"), w.str("y");
  w.u32(8), w.u64(1), w.str("z"), ++n_kv;
  w.key("t.nested_ints", 9), w.u32(9), w.u64(2);
  w.u32(4), w.u64(2), w.put<uint32_t>(1), w.put<uint32_t>(2);
  w.u32(4), w.u64(0), ++n_kv;

  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const TensorSpec& t : tensors) {
    w.str(t.name);
    w.u32(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t n : t.ne) w.u64(n);
    w.u32(t.type);
    w.u64(offset);
    offsets.push_back(offset);
    offset += (t.data.size() + alignment - 1) / alignment * alignment;
  }
  w.pad_to(alignment);
  for (size_t i = 0; i < tensors.size(); ++i) {
    w.raw(tensors[i].data.data(), tensors[i].data.size());
    if (i + 1 < tensors.size()) w.pad_to(alignment);
  }
  return w.finish(tensors.size(), n_kv);
}

template <class T>
std::string bytes_of(std::initializer_list<T> v) {
  return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(T));
}

std::vector<TensorSpec> three_tensors() {
  return {
      {"m.f32", {3, 2}, 0, bytes_of<float>({1, 2, 3, 4, 5, 6})},
      {"m.f16", {4}, 1, bytes_of<uint16_t>({f32_to_f16(1.5f), f32_to_f16(-2), 0, f32_to_f16(0.25f)})},
      {"m.bf16", {2, 3}, 30, bytes_of<uint16_t>({f32_to_bf16(7), f32_to_bf16(8), f32_to_bf16(9), 0, 0, f32_to_bf16(-1)})},
  };
}

}  // namespace

TEST(Gguf, AllMetadataTypesAndTensors) {
  ScratchDir dir;
  write_file(dir.file("s.gguf"), synthetic_gguf(three_tensors()));
  const GgufFile f = GgufFile::open(dir.file("s.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("t.u8"), 200);
  EXPECT_EQ(f.get_int("t.i8"), -100);
  EXPECT_EQ(f.get_int("t.u16"), 60000);
  EXPECT_EQ(f.get_int("t.i16"), -30000);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000);
  EXPECT_EQ(f.get_int("t.u64"), 1ll << 40);
  EXPECT_EQ(f.get_int("t.i64"), -(1ll << 40));
  EXPECT_EQ(f.get_float("t.f32"), 1e-5);  // shortest decimal form of 1e-5f
  EXPECT_EQ(f.get_float("t.f64"), 0.1);
  EXPECT_EQ(f.get_float("t.u16"), 60000.0);
  EXPECT_TRUE(f.get_bool("t.bool"));
  EXPECT_EQ(f.get_strings("t.strings"), (std::vector<std::string>{"a", "", "<0x0A>"}));
  EXPECT_EQ(f.get_floats("t.floats"), (std::vector<double>{0.5, -2.0}));
  EXPECT_EQ(f.get_ints("t.ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_floats("t.ints"), (std::vector<double>{1, -2, 3}));
  EXPECT_EQ(f.get_ints("t.bools"), (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(f.get_strings("t.empty").empty());
  EXPECT_EQ(f.array_size("t.strings"), 3u);
  const GgufArray& ns = f.get_arrays("t.nested_strings");
  ASSERT_EQ(ns.items.size(), 2u);
  EXPECT_EQ(std::get<std::vector<std::string>>(ns.items[0]), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(std::get<std::vector<std::string>>(ns.items[1]), (std::vector<std::string>{"z"}));
  const GgufArray& ni = f.get_arrays("t.nested_ints");
  EXPECT_EQ(std::get<std::vector<int64_t>>(ni.items[0]), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(std::get<std::vector<int64_t>>(ni.items[1]).empty());
  EXPECT_EQ(f.array_size("t.nested_ints"), 2u);

  ASSERT_EQ(f.tensors().size(), 3u);
  const HostTensor& a = f.tensor("m.f32");
  EXPECT_EQ(a.shape_str(), "[2, 3]");  // ne reversed
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.as<float>()[5], 6.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 64, 0u);
  const HostTensor& h = f.tensor("m.f16");
  EXPECT_EQ(h.dtype, DType::kF16);
  EXPECT_EQ(h.to_f32().as<float>()[0], 1.5f);
  EXPECT_EQ(h.to_f32().as<float>()[3], 0.25f);
  const HostTensor& b = f.tensor("m.bf16");
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_EQ(b.shape_str(), "[3, 2]");
  EXPECT_EQ(b.to_f32().as<float>()[5], -1.0f);
}

TEST(Gguf, GetterErrorsNameTheKey) {
  ScratchDir dir;
  write_file(dir.file("s.gguf"), synthetic_gguf(three_tensors()));
  const GgufFile f = GgufFile::open(dir.file("s.gguf"));
  expect_error([&] { f.get_int("general.architecture"); }, ErrorKind::kInvalidInput, {"general.architecture", "string"});
  expect_error([&] { f.get_string("t.u8"); }, ErrorKind::kInvalidInput, {"t.u8"});
  expect_error([&] { f.get_strings("t.floats"); }, ErrorKind::kInvalidInput, {"t.floats"});
  expect_error([&] { f.get_arrays("t.ints"); }, ErrorKind::kInvalidInput, {"t.ints"});
  expect_error([&] { f.array_size("t.u8"); }, ErrorKind::kInvalidInput, {"t.u8"});
  expect_error([&] { f.get_bool("nope.key"); }, ErrorKind::kInvalidInput, {"nope.key"});
  expect_error([&] { f.tensor("nope.weight"); }, ErrorKind::kNotFound, {"nope.weight"});
}

TEST(Gguf, EveryTruncationIsAnError) {
  ScratchDir dir;
  const std::string bytes = synthetic_gguf(three_tensors());
  for (size_t len = 0; len < bytes.size(); ++len) {
    SCOPED_TRACE(len);
    write_file(dir.file("t.gguf"), bytes.substr(0, len));
    expect_error([&] { GgufFile::open(dir.file("t.gguf")); }, ErrorKind::kInvalidInput, {"t.gguf"});
  }
}

TEST(Gguf, BrokenFiles) {
  ScratchDir dir;
  const std::string path = dir.file("b.gguf");
  const std::string good = synthetic_gguf(three_tensors());
  auto expect_bad = [&](const std::string& bytes, ErrorKind kind, std::initializer_list<std::string> parts) {
    write_file(path, bytes);
    expect_error([&] { GgufFile::open(path); }, kind, parts);
  };
  std::string b = good;
  b[0] = 'X';
  expect_bad(b, ErrorKind::kInvalidInput, {"magic"});
  b = good;
  b[4] = 1;
  expect_bad(b, ErrorKind::kUnsupported, {"version 1"});
  b = good;
  b[4] = 0, b[7] = 3;  // a big-endian file's version
  expect_bad(b, ErrorKind::kUnsupported, {"version"});
  b = good;
  b[15] = 0x10;  // tensor count ~2^60: refused before allocating
  expect_bad(b, ErrorKind::kInvalidInput, {"tensor count"});
  b = good;
  b[23] = 0x10;  // metadata count
  expect_bad(b, ErrorKind::kInvalidInput, {"metadata count"});
  {  // a string length past the end
    GgufWriter w;
    w.str("key");
    w.u32(8);
    w.u64(1ull << 50);
    expect_bad(w.finish(0, 1), ErrorKind::kInvalidInput, {"truncated"});
  }
  {  // a huge array count
    GgufWriter w;
    w.key("arr", 9), w.u32(6), w.u64(1ull << 61);
    expect_bad(w.finish(0, 1), ErrorKind::kInvalidInput, {"arr"});
  }
  {  // unknown value type
    GgufWriter w;
    w.key("weird", 77), w.u32(0);
    expect_bad(w.finish(0, 1), ErrorKind::kInvalidInput, {"weird", "77"});
  }
  {  // arrays nested too deep
    GgufWriter w;
    w.key("deep", 9);
    for (int i = 0; i < 20; ++i) w.u32(9), w.u64(1);
    w.u32(4), w.u64(0);
    expect_bad(w.finish(0, 1), ErrorKind::kInvalidInput, {"deep", "deeper"});
  }
  {  // duplicate key
    GgufWriter w;
    w.key("k", 4), w.u32(1);
    w.key("k", 4), w.u32(2);
    expect_bad(w.finish(0, 2), ErrorKind::kInvalidInput, {"duplicate", "'k'"});
  }
  auto t = three_tensors();
  t[1].type = 2;  // Q4_0 rows of 4 values: not whole 32-value blocks
  expect_bad(synthetic_gguf(t), ErrorKind::kInvalidInput, {"m.f16", "Q4_0", "4 values", "32"});
  t = three_tensors();
  t[0].type = 12;
  expect_bad(synthetic_gguf(t), ErrorKind::kInvalidInput, {"m.f32", "Q4_K", "256"});
  // Types we do not take: named with the tensor and the list of the supported ones.
  for (const auto& [type, name] : std::vector<std::pair<uint32_t, std::string>>{
           {9, "Q8_1"}, {15, "Q8_K"}, {16, "IQ2_XXS"}, {20, "IQ4_NL"}, {23, "IQ4_XS"}, {24, "I8"}, {28, "F64"},
           {31, "Q4_0_4_4"}, {34, "TQ1_0"}, {35, "TQ2_0"}, {39, "MXFP4"}, {4, "Q4_2"}, {77, "type 77"}}) {
    SCOPED_TRACE(name);
    t = three_tensors();
    t[0].type = type;
    expect_bad(synthetic_gguf(t), ErrorKind::kUnsupported,
               {"'m.f32'", "type " + name + ",", "supported: F32, F16, BF16, Q4_0, Q4_1", "Q6_K"});
  }
  t = three_tensors();
  t[2].ne = {2, 3, 1, 1, 1};
  expect_bad(synthetic_gguf(t), ErrorKind::kInvalidInput, {"m.bf16", "dimensions"});
  t = three_tensors();
  t[2].ne = {2, 0};
  expect_bad(synthetic_gguf(t), ErrorKind::kInvalidInput, {"m.bf16", "shape"});
  t = three_tensors();
  t[2].ne = {64, 64};  // more data than the file holds
  expect_bad(synthetic_gguf(t), ErrorKind::kInvalidInput, {"m.bf16", "past the end"});
  t = three_tensors();
  t[0].ne = {16, 2};  // 128 bytes: runs into m.f16's slot
  t[0].data.resize(64);
  expect_bad(synthetic_gguf(t), ErrorKind::kInvalidInput, {"overlap"});
  expect_bad(synthetic_gguf(three_tensors(), 48), ErrorKind::kInvalidInput, {"alignment"});
}

TEST(Gguf, MisalignedTensorOffset) {
  // A tensor offset that is not a multiple of general.alignment.
  GgufWriter w;
  w.key("general.alignment", 4), w.u32(32);
  w.str("x"), w.u32(1), w.u64(1), w.u32(0), w.u64(4);
  w.pad_to(32);
  float v[2] = {1, 2};
  w.raw(v, sizeof v);
  ScratchDir dir;
  write_file(dir.file("m.gguf"), w.finish(1, 1));
  expect_error([&] { GgufFile::open(dir.file("m.gguf")); }, ErrorKind::kInvalidInput, {"'x'", "aligned"});
}

TEST(Gguf, Stories260KMetadataAndTensors) {
  const std::string path = shared_data(kStories);
  if (!exists(path)) GTEST_SKIP() << "shared data not present: " << path;
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 19u);
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  const auto& tokens = f.get_strings("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(tokens[258], "<0xFF>");
  EXPECT_EQ(f.get_floats("tokenizer.ggml.scores").size(), 512u);
  EXPECT_EQ(f.get_ints("tokenizer.ggml.token_type").size(), 512u);
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 4294967295ll);

  EXPECT_EQ(f.tensor("token_embd.weight").shape_str(), "[512, 64]");
  EXPECT_EQ(f.tensor("blk.0.attn_q.weight").shape_str(), "[64, 64]");
  EXPECT_EQ(f.tensor("blk.4.attn_k.weight").shape_str(), "[32, 64]");
  EXPECT_EQ(f.tensor("blk.2.ffn_gate.weight").shape_str(), "[172, 64]");
  EXPECT_EQ(f.tensor("blk.2.ffn_down.weight").shape_str(), "[64, 172]");
  EXPECT_EQ(f.tensor("output_norm.weight").shape_str(), "[64]");
  for (const auto& [name, t] : f.tensors()) EXPECT_EQ(t.dtype, DType::kF32) << name;

  // The embedding bytes equal the llama2.c repack of the same model (after its 7 x int32 header).
  const std::string bin_path = shared_data("models/stories260K/stories260K.llama2c.bin");
  if (exists(bin_path)) {
    const std::string bin = read_file(bin_path);
    const HostTensor& e = f.tensor("token_embd.weight");
    ASSERT_GE(bin.size(), 28 + e.nbytes());
    EXPECT_EQ(std::memcmp(bin.data() + 28, e.data, e.nbytes()), 0);
  }
}

TEST(Gguf, Stories260KConfig) {
  const std::string path = shared_data(kStories);
  if (!exists(path)) GTEST_SKIP() << "shared data not present: " << path;
  const ModelConfig c = config_from_gguf(GgufFile::open(path));
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kDefault);
  EXPECT_TRUE(c.rope_interleaved);
  EXPECT_TRUE(c.tie_word_embeddings);  // output.weight is a byte copy of token_embd.weight
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(c.num_parameters(), 260032);
}

TEST(Gguf, ConfigErrors) {
  ScratchDir dir;
  // The synthetic file says llama but has no llama.* keys.
  write_file(dir.file("s.gguf"), synthetic_gguf(three_tensors()));
  expect_error([&] { config_from_gguf(GgufFile::open(dir.file("s.gguf"))); }, ErrorKind::kInvalidInput,
               {"llama.embedding_length"});
  GgufWriter w;
  w.key("general.architecture", 8), w.str("qwen2");
  write_file(dir.file("q.gguf"), w.finish(0, 1));
  expect_error([&] { config_from_gguf(GgufFile::open(dir.file("q.gguf"))); }, ErrorKind::kUnsupported, {"qwen2"});
}

// Block-quantized tensors are views of their raw blocks in the file, in a block dtype, sized by
// blocks; to_f32 dequantizes them (values checked bit for bit in test_quant.cpp).
TEST(Gguf, QuantizedTensorsAreBlockViews) {
  const std::string q8 = read_file(fixture("quant/q8_0.blocks"));    // 96 blocks of 32
  const std::string q4k = read_file(fixture("quant/q4_k.blocks"));   // 16 blocks of 256
  const std::string e8 = read_file(fixture("quant/q8_0.f32"));
  const std::string e4k = read_file(fixture("quant/q4_k.f32"));
  std::vector<TensorSpec> specs = three_tensors();
  specs.push_back({"m.q8_0", {64, 48}, 8, q8});    // 48 rows of 2 blocks
  specs.push_back({"m.q4_k", {512, 8}, 12, q4k});  // 8 rows of 2 super-blocks
  ScratchDir dir;
  write_file(dir.file("q.gguf"), synthetic_gguf(specs));
  const GgufFile f = GgufFile::open(dir.file("q.gguf"));
  const HostTensor& a = f.tensor("m.q8_0");
  EXPECT_EQ(a.dtype, DType::kQ8_0);
  EXPECT_EQ(a.shape_str(), "[48, 64]");
  EXPECT_EQ(a.nbytes(), q8.size());
  EXPECT_EQ(std::memcmp(a.data, q8.data(), q8.size()), 0);  // the file's bytes, not a copy
  EXPECT_EQ(std::memcmp(a.to_f32().data, e8.data(), e8.size()), 0);
  const HostTensor& b = f.tensor("m.q4_k");
  EXPECT_EQ(b.dtype, DType::kQ4_K);
  EXPECT_EQ(b.shape_str(), "[8, 512]");
  EXPECT_EQ(b.nbytes(), q4k.size());
  EXPECT_EQ(std::memcmp(b.to_f32().data, e4k.data(), e4k.size()), 0);

  // Announcing more blocks than the file holds is caught by the block size, not an element size.
  specs.back().ne = {512, 9};
  write_file(dir.file("short.gguf"), synthetic_gguf(specs));
  expect_error([&] { GgufFile::open(dir.file("short.gguf")); }, ErrorKind::kInvalidInput, {"m.q4_k", "past the end"});
}
