#include "tokenizer/pre_tokenizers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "util/check.h"

namespace inferscale {

const char* const kGpt2SplitRegex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

// name -> group, built once.
const std::map<std::string, GgufPreTokenizer>& table() {
  static const std::map<std::string, GgufPreTokenizer> t = [] {
    std::map<std::string, GgufPreTokenizer> m;
    auto group = [&](GgufPreTokenizer g, std::initializer_list<const char*> names) {
      for (const char* n : names) m.emplace(n, g);
    };
    group({"default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2SplitRegex, R"(\p{N}+)", "[0-9][0-9][0-9]"}}, {"default"});
    group({"gpt-2", {kGpt2SplitRegex}}, {"gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais"});
    group({"llama-bpe", {kLlama3SplitRegex}, /*ignore_merges=*/true, /*add_bos=*/true},
          {"llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral"});
    group({"dbrx", {kLlama3SplitRegex}}, {"dbrx", "smaug-bpe"});
    group({"qwen2", {kQwen2SplitRegex}}, {"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"});
    group({"smollm", {R"(\p{N})", kGpt2SplitRegex}},
          {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"});
    return m;
  }();
  return t;
}

}  // namespace

std::vector<std::string> gguf_pre_tokenizer_names() {
  std::vector<std::string> names;
  for (const auto& [name, g] : table()) names.push_back(name);
  return names;
}

const GgufPreTokenizer& gguf_pre_tokenizer(const std::string& name) {
  const auto it = table().find(name);
  IS_REQUIRE(it != table().end(), kUnsupported, "GGUF pre-tokenizer '{}' is not supported (known: {})", name,
             fmt::join(gguf_pre_tokenizer_names(), ", "));
  return it->second;
}

}  // namespace inferscale
