// safetensors: the real fixtures (single file, two shards, f32/f16/bf16) and every corruption case,
// written as damaged copies in a scratch directory: each must be an Error naming file and tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "model/safetensors.h"
#include "model_test_util.h"

using namespace inferscale;
using namespace inferscale::testing;
using nlohmann::json;

namespace {

// [u64 LE header length][header JSON][data]
std::string make_file(const json& header, const std::string& data) {
  const std::string h = header.dump();
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + h + data;
}

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

// Two f32 tensors: a [2, 2] at bytes 0..16 and b [3] at 16..28.
json good_header() {
  return json{{"__metadata__", {{"format", "pt"}}},
              {"a", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}},
              {"b", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {16, 28}}}}};
}
std::string good_data() { return floats({1, 2, 3, 4, 5, 6, 7}); }

}  // namespace

TEST(Safetensors, ReadsWrittenFile) {
  ScratchDir dir;
  write_file(dir.file("m.safetensors"), make_file(good_header(), good_data()));
  const SafetensorsFile f = SafetensorsFile::open(dir.file("m.safetensors"));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
  const HostTensor a = f.get("a");
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.shape_str(), "[2, 2]");
  EXPECT_EQ(a.as<float>()[3], 4.0f);
  const HostTensor b = f.get("b");
  EXPECT_EQ(b.as<float>()[0], 5.0f);
  EXPECT_EQ(b.as<float>()[2], 7.0f);
  EXPECT_NE(f.header().find("\"format\""), std::string_view::npos);
}

TEST(Safetensors, TensorOutlivesFileObject) {
  ScratchDir dir;
  write_file(dir.file("m.safetensors"), make_file(good_header(), good_data()));
  HostTensor b;
  { b = SafetensorsFile::open(dir.file("m.safetensors")).get("b"); }
  EXPECT_EQ(b.as<float>()[1], 6.0f);  // the view's owner keeps the mapping alive
}

TEST(Safetensors, MisalignedDataIsCopied) {
  ScratchDir dir;
  json h = good_header();
  h["__metadata__"]["pad"] = "x";  // header length no longer a multiple of 4 (checked below)
  std::string bytes = make_file(h, good_data());
  if ((bytes.size() - 28) % 4 == 0) {
    h["__metadata__"]["pad"] = "xy";
    bytes = make_file(h, good_data());
  }
  ASSERT_NE((bytes.size() - 28) % 4, 0u);
  write_file(dir.file("m.safetensors"), bytes);
  const HostTensor b = SafetensorsFile::open(dir.file("m.safetensors")).get("b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 4, 0u);
  EXPECT_EQ(b.as<float>()[2], 7.0f);
}

TEST(Safetensors, FixtureSingleFile) {
  const SafetensorsCheckpoint c = SafetensorsCheckpoint::open(fixture("models/llama3_scaled"));
  EXPECT_EQ(c.files().size(), 1u);
  const HostTensor e = c.get("model.embed_tokens.weight");
  EXPECT_EQ(e.dtype, DType::kF32);
  EXPECT_EQ(e.shape_str(), "[300, 64]");
  EXPECT_EQ(c.get("model.layers.1.self_attn.k_proj.weight").shape_str(), "[32, 64]");
  EXPECT_EQ(c.get("lm_head.weight").shape_str(), "[300, 64]");
}

TEST(Safetensors, FixtureShardedAndHalfTypes) {
  const SafetensorsCheckpoint c = SafetensorsCheckpoint::open(fixture("models/qwen2_bias_tied"));
  EXPECT_EQ(c.files().size(), 2u);
  EXPECT_TRUE(c.has("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(c.has("lm_head.weight"));  // tied
  // Tensors from both shards.
  size_t from[2] = {0, 0};
  for (const std::string& n : c.names()) {
    const HostTensor t = c.get(n);
    for (size_t i = 0; i < 2; ++i) from[i] += c.files()[i].has(n);
    EXPECT_EQ(t.dtype, DType::kF32) << n;
  }
  EXPECT_GT(from[0], 0u);
  EXPECT_GT(from[1], 0u);
  // The index file itself opens the same way.
  EXPECT_EQ(SafetensorsCheckpoint::open(fixture("models/qwen2_bias_tied/model.safetensors.index.json")).names(),
            c.names());

  EXPECT_EQ(SafetensorsCheckpoint::open(fixture("models/mistral")).get("model.norm.weight").dtype, DType::kBF16);
  const HostTensor qn = SafetensorsCheckpoint::open(fixture("models/qwen3_qknorm")).get("model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(qn.dtype, DType::kF16);
  EXPECT_EQ(qn.shape_str(), "[32]");
}

TEST(Safetensors, EveryTruncationIsAnError) {
  ScratchDir dir;
  const std::string bytes = make_file(good_header(), good_data());
  for (size_t len = 0; len < bytes.size(); ++len) {
    SCOPED_TRACE(len);
    write_file(dir.file("t.safetensors"), bytes.substr(0, len));
    expect_error([&] { SafetensorsFile::open(dir.file("t.safetensors")); }, ErrorKind::kInvalidInput, {"t.safetensors"});
  }
  // A truncated real fixture.
  const std::string real = read_file(fixture("models/mistral/model.safetensors"));
  write_file(dir.file("cut.safetensors"), real.substr(0, real.size() - 100));
  expect_error([&] { SafetensorsFile::open(dir.file("cut.safetensors")); }, ErrorKind::kInvalidInput,
               {"cut.safetensors", "out of range"});
}

TEST(Safetensors, HeaderLengthPastEnd) {
  ScratchDir dir;
  std::string bytes = make_file(good_header(), good_data());
  bytes[5] = 1;  // header length += 2^40
  write_file(dir.file("h.safetensors"), bytes);
  expect_error([&] { SafetensorsFile::open(dir.file("h.safetensors")); }, ErrorKind::kInvalidInput,
               {"h.safetensors", "past the end"});
}

TEST(Safetensors, BadHeaders) {
  ScratchDir dir;
  const std::string path = dir.file("x.safetensors");
  auto expect_bad = [&](const json& h, std::initializer_list<std::string> parts, ErrorKind kind = ErrorKind::kInvalidInput) {
    write_file(path, make_file(h, good_data()));
    expect_error([&] { SafetensorsFile::open(path); }, kind, parts);
  };
  {  // not JSON
    std::string bytes = make_file(good_header(), good_data());
    bytes[8] = '[';
    bytes[9] = '!';
    write_file(path, bytes);
    expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::kInvalidInput, {"x.safetensors", "JSON"});
  }
  expect_bad(json::array(), {"object"});
  json h = good_header();
  h["b"]["data_offsets"] = {16, 32};  // past the data area
  expect_bad(h, {"'b'", "out of range"});
  h = good_header();
  h["b"]["data_offsets"] = {-8, 4};  // would reach into the header
  expect_bad(h, {"'b'", "data_offsets"});
  h = good_header();
  h["b"]["data_offsets"] = {20, 16};
  expect_bad(h, {"'b'", "out of range"});
  h = good_header();
  h["b"]["data_offsets"] = {8, 20};  // overlaps a
  expect_bad(h, {"overlap", "'a'", "'b'"});
  h = good_header();
  h["b"]["shape"] = {4};  // 16 bytes needed, 12 given
  expect_bad(h, {"'b'", "needs 16 bytes"});
  h = good_header();
  h["b"]["shape"] = {-3};
  expect_bad(h, {"'b'", "shape"});
  h = good_header();
  h["b"].erase("dtype");
  expect_bad(h, {"'b'", "dtype"});
  h = good_header();
  h["b"]["data_offsets"] = {16};
  expect_bad(h, {"'b'", "data_offsets"});
}

TEST(Safetensors, MissingTensorAndUnsupportedDtype) {
  ScratchDir dir;
  json h = good_header();
  h["b"] = {{"dtype", "F64"}, {"shape", {1}}, {"data_offsets", {16, 24}}};
  h["c"] = {{"dtype", "I32"}, {"shape", {1}}, {"data_offsets", {24, 28}}};
  write_file(dir.file("m.safetensors"), make_file(h, good_data()));
  const SafetensorsFile f = SafetensorsFile::open(dir.file("m.safetensors"));  // opening is fine
  EXPECT_NO_THROW(f.get("a"));
  expect_error([&] { f.get("b"); }, ErrorKind::kUnsupported, {"'b'", "F64", "m.safetensors"});
  expect_error([&] { f.get("c"); }, ErrorKind::kUnsupported, {"'c'", "I32"});
  expect_error([&] { f.get("zzz"); }, ErrorKind::kNotFound, {"'zzz'", "m.safetensors"});
}

TEST(Safetensors, BadIndexes) {
  ScratchDir dir;
  write_file(dir.file("s1.safetensors"), make_file(good_header(), good_data()));
  const std::string idx = dir.file("model.safetensors.index.json");
  write_file(idx, json{{"weight_map", {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}}}}.dump());
  const SafetensorsCheckpoint ok = SafetensorsCheckpoint::open(dir.path().string());
  EXPECT_EQ(ok.get("b").as<float>()[0], 5.0f);
  expect_error([&] { ok.get("nope"); }, ErrorKind::kNotFound, {"'nope'", "index.json"});

  write_file(idx, json{{"weight_map", {{"a", "s1.safetensors"}, {"q", "s1.safetensors"}}}}.dump());
  expect_error([&] { SafetensorsCheckpoint::open(idx); }, ErrorKind::kNotFound, {"'q'", "s1.safetensors"});
  write_file(idx, json{{"weight_map", {{"a", "s2.safetensors"}}}}.dump());
  expect_error([&] { SafetensorsCheckpoint::open(idx); }, ErrorKind::kNotFound, {"s2.safetensors"});
  write_file(idx, json{{"weight_map", {{"a", "../s1.safetensors"}}}}.dump());
  expect_error([&] { SafetensorsCheckpoint::open(idx); }, ErrorKind::kInvalidInput, {"outside"});
  write_file(idx, json{{"metadata", {}}}.dump());
  expect_error([&] { SafetensorsCheckpoint::open(idx); }, ErrorKind::kInvalidInput, {"weight_map"});
  write_file(idx, "{");
  expect_error([&] { SafetensorsCheckpoint::open(idx); }, ErrorKind::kInvalidInput, {"JSON"});

  ScratchDir empty;
  expect_error([&] { SafetensorsCheckpoint::open(empty.path().string()); }, ErrorKind::kNotFound, {"model.safetensors"});
}
