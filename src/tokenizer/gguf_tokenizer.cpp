// make_gguf_tokenizer: the GgufFile side of the GGUF vocabularies, kept apart from gguf_vocab.cpp
// and gguf_bpe.cpp so that code building a vocabulary from plain arrays does not need the GGUF reader.
#include "tensor/gguf_file.h"
#include "tokenizer/gguf_bpe.h"
#include "tokenizer/gguf_vocab.h"
#include "util/check.h"

namespace inferscale {
namespace {

// Unset ids are stored as 0xFFFFFFFF or absent: -1.
int32_t special_id(const GgufFile& file, const char* key, size_t n_tokens) {
  if (!file.has(key)) return -1;
  const int64_t x = file.get_int(key);
  return x >= 0 && x < static_cast<int64_t>(n_tokens) ? static_cast<int32_t>(x) : -1;
}

std::vector<int32_t> token_types(const GgufFile& file) {
  std::vector<int32_t> types;
  if (!file.has("tokenizer.ggml.token_type")) return types;
  for (const int64_t t : file.get_ints("tokenizer.ggml.token_type")) types.push_back(static_cast<int32_t>(t));
  return types;
}

std::optional<bool> flag(const GgufFile& file, const char* key) {
  if (!file.has(key)) return std::nullopt;
  return file.get_bool(key);
}

std::shared_ptr<const Tokenizer> make_spm(const GgufFile& file) {
  GgufVocabArrays v;
  v.tokens = file.get_strings("tokenizer.ggml.tokens");
  for (const double s : file.get_floats("tokenizer.ggml.scores")) v.scores.push_back(static_cast<float>(s));
  v.types = token_types(file);
  v.bos_id = special_id(file, "tokenizer.ggml.bos_token_id", v.tokens.size());
  v.eos_id = special_id(file, "tokenizer.ggml.eos_token_id", v.tokens.size());
  v.unk_id = special_id(file, "tokenizer.ggml.unknown_token_id", v.tokens.size());
  v.add_bos = flag(file, "tokenizer.ggml.add_bos_token").value_or(v.add_bos);
  v.add_space_prefix = flag(file, "tokenizer.ggml.add_space_prefix").value_or(v.add_space_prefix);
  return std::make_shared<GgufSpmTokenizer>(std::move(v));
}

std::shared_ptr<const Tokenizer> make_bpe(const GgufFile& file) {
  GgufBpeArrays a;
  a.tokens = file.get_strings("tokenizer.ggml.tokens");
  IS_REQUIRE(file.has("tokenizer.ggml.merges"), kInvalidInput, "a `gpt2` vocabulary needs tokenizer.ggml.merges");
  a.merges = file.get_strings("tokenizer.ggml.merges");
  a.types = token_types(file);
  if (file.has("tokenizer.ggml.pre")) a.pre = file.get_string("tokenizer.ggml.pre");
  a.bos_id = special_id(file, "tokenizer.ggml.bos_token_id", a.tokens.size());
  a.eos_id = special_id(file, "tokenizer.ggml.eos_token_id", a.tokens.size());
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (const int32_t id = special_id(file, key, a.tokens.size()); id >= 0) a.end_ids.push_back(id);
  a.add_bos = flag(file, "tokenizer.ggml.add_bos_token");
  a.add_eos = flag(file, "tokenizer.ggml.add_eos_token");
  return make_gguf_bpe_tokenizer(std::move(a));
}

}  // namespace

std::shared_ptr<const Tokenizer> make_gguf_tokenizer(const GgufFile& file) {
  const std::string model = file.get_string("tokenizer.ggml.model");
  IS_REQUIRE(model == "llama" || model == "gpt2", kUnsupported,
             "{}: GGUF tokenizer model '{}' is not supported (supported: 'llama' (SentencePiece), 'gpt2' (byte-level "
             "BPE))",
             file.path(), model);
  try {
    return model == "llama" ? make_spm(file) : make_bpe(file);
  } catch (const Error& e) {
    throw Error(e.kind(), file.path() + ": " + e.what());
  }
}

}  // namespace inferscale
