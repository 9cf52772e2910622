// A served model's default sampling (model/generation_config.h): generation_config.json as vLLM
// reads it, a GGUF's general.sampling keys, --default-sampling overrides, and their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "model/generation_config.h"
#include "tensor/gguf_file.h"
#include "test_fact_store_util.h"
#include "util/check.h"

using namespace inferscale;

namespace {

std::string write(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p) << text;
  return p.string();
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

// A GGUF v3 file with no tensors and these f32 / u32 metadata values.
void write_gguf(const std::filesystem::path& p, const std::vector<std::pair<std::string, float>>& floats,
                const std::vector<std::pair<std::string, uint32_t>>& ints) {
  std::string b = "GGUF";
  auto put = [&b](const void* v, size_t n) { b.append(static_cast<const char*>(v), n); };
  const uint32_t version = 3;
  const uint64_t n_tensors = 0, n_kv = floats.size() + ints.size();
  put(&version, 4);
  put(&n_tensors, 8);
  put(&n_kv, 8);
  auto key = [&](const std::string& k, uint32_t type) {
    const uint64_t n = k.size();
    put(&n, 8);
    put(k.data(), k.size());
    put(&type, 4);
  };
  for (const auto& [k, v] : floats) {
    key(k, 6);  // GGUF_TYPE_FLOAT32
    put(&v, 4);
  }
  for (const auto& [k, v] : ints) {
    key(k, 4);  // GGUF_TYPE_UINT32
    put(&v, 4);
  }
  while (b.size() % 32) b.push_back('\0');
  std::ofstream(p, std::ios::binary) << b;
}

}  // namespace

TEST(GenerationConfig, LlamaCppDefaultsAreTheBase) {
  const SamplingDefaults d = llama_cpp_sampling_defaults();
  EXPECT_FLOAT_EQ(d.temperature, 0.8f);
  EXPECT_EQ(d.top_k, 40);
  EXPECT_FLOAT_EQ(d.top_p, 0.95f);
  EXPECT_FLOAT_EQ(d.min_p, 0.05f);
  const SamplingDefaults openai;
  EXPECT_FLOAT_EQ(openai.temperature, 1.0f);
  EXPECT_EQ(openai.top_k, 0);
  EXPECT_FLOAT_EQ(openai.top_p, 1.0f);
  EXPECT_FLOAT_EQ(openai.min_p, 0.0f);
}

TEST(GenerationConfig, ReadsTheSamplingFieldsItHolds) {
  inferscale::testing::TempDir dir;
  const auto base = llama_cpp_sampling_defaults();
  // SmolLM2's model card: temperature and top_p; the rest stays the base's; other keys ignored.
  SamplingDefaults d = read_generation_config(
      write(dir.path() / "a.json", R"({"temperature": 0.2, "top_p": 0.9, "eos_token_id": 2, "max_new_tokens": 10})"), base);
  EXPECT_FLOAT_EQ(d.temperature, 0.2f);
  EXPECT_FLOAT_EQ(d.top_p, 0.9f);
  EXPECT_EQ(d.top_k, 40);
  EXPECT_FLOAT_EQ(d.min_p, 0.05f);
  EXPECT_NE(d.source.find("a.json"), std::string::npos);
  // top_k -1 is HF's and vLLM's "off"; do_sample false is greedy.
  d = read_generation_config(write(dir.path() / "b.json", R"({"top_k": -1, "min_p": 0.1, "do_sample": false})"), base);
  EXPECT_EQ(d.top_k, 0);
  EXPECT_FLOAT_EQ(d.min_p, 0.1f);
  EXPECT_FLOAT_EQ(d.temperature, 0.0f);
  // Nothing about sampling: the base, and its source.
  d = read_generation_config(write(dir.path() / "c.json", R"({"bos_token_id": 1})"), base);
  EXPECT_EQ(d.source, base.source);
  EXPECT_FLOAT_EQ(d.temperature, 0.8f);
}

TEST(GenerationConfig, BadFilesNameTheFileAndField) {
  inferscale::testing::TempDir dir;
  const auto base = llama_cpp_sampling_defaults();
  EXPECT_NE(error_of([&] { read_generation_config(write(dir.path() / "t.json", R"({"temperature": "hot"})"), base); })
                .find("'temperature' must be a number"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_generation_config(write(dir.path() / "p.json", R"({"top_p": 1.5})"), base); }).find("top_p"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_generation_config(write(dir.path() / "j.json", "{not json"), base); }).find("j.json"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_generation_config(dir.path() / "missing.json", base); }).find("missing.json"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_generation_config(write(dir.path() / "k.json", R"({"top_k": 2.5})"), base); }).find("top_k"),
            std::string::npos);
  // Past float's range: refused before the conversion (which would be undefined behaviour).
  EXPECT_NE(error_of([&] { read_generation_config(write(dir.path() / "b.json", R"({"temperature": 1e300})"), base); })
                .find("'temperature' must be a number in float's range"),
            std::string::npos);
}

TEST(GenerationConfig, OverridesNameSingleFields) {
  const auto base = llama_cpp_sampling_defaults();
  SamplingDefaults d = parse_sampling_overrides("temperature=0,top_k=1,min_p=0", base);
  EXPECT_FLOAT_EQ(d.temperature, 0.0f);
  EXPECT_EQ(d.top_k, 1);
  EXPECT_FLOAT_EQ(d.min_p, 0.0f);
  EXPECT_FLOAT_EQ(d.top_p, 0.95f);
  EXPECT_NE(d.source.find("--default-sampling"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_sampling_overrides("temp=0.1", base); }).find("unknown sampling field 'temp'"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_sampling_overrides("temperature", base); }).find("not NAME=VALUE"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_sampling_overrides("top_p=abc", base); }).find("'abc' is not a number"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_sampling_overrides("temperature=3", base); }).find("temperature"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_sampling_overrides("top_p=nan", base); }).find("top_p"), std::string::npos);
}

TEST(GenerationConfig, GgufSamplingKeys) {
  inferscale::testing::TempDir dir;
  const auto base = llama_cpp_sampling_defaults();
  write_gguf(dir.path() / "s.gguf", {{"general.sampling.temp", 0.6f}, {"general.sampling.top_p", 0.8f}},
             {{"general.sampling.top_k", 20}});
  SamplingDefaults d = gguf_sampling_defaults(GgufFile::open_metadata((dir.path() / "s.gguf").string()), base);
  EXPECT_FLOAT_EQ(d.temperature, 0.6f);
  EXPECT_FLOAT_EQ(d.top_p, 0.8f);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_FLOAT_EQ(d.min_p, 0.05f);
  write_gguf(dir.path() / "n.gguf", {{"general.alignment_unused", 1.0f}}, {});
  d = gguf_sampling_defaults(GgufFile::open_metadata((dir.path() / "n.gguf").string()), base);
  EXPECT_EQ(d.source, base.source);
}
