// make_gguf_tokenizer: the GgufFile side of the GGUF vocabulary, kept apart from gguf_vocab.cpp so
// that code building the vocabulary from plain arrays does not need the GGUF reader.
#include "model/gguf.h"
#include "tokenizer/gguf_vocab.h"
#include "util/check.h"

namespace inferscale {

std::shared_ptr<const Tokenizer> make_gguf_tokenizer(const GgufFile& file) {
  const std::string model = file.get_string("tokenizer.ggml.model");
  IS_REQUIRE(model == "llama", kUnsupported, "{}: GGUF tokenizer model '{}' is not supported (only 'llama')",
             file.path(), model);
  GgufVocabArrays v;
  v.tokens = file.get_strings("tokenizer.ggml.tokens");
  for (const double s : file.get_floats("tokenizer.ggml.scores")) v.scores.push_back(static_cast<float>(s));
  for (const int64_t t : file.get_ints("tokenizer.ggml.token_type")) v.types.push_back(static_cast<int32_t>(t));
  // Unset ids are stored as 0xFFFFFFFF or absent.
  auto id = [&](const char* key) -> int32_t {
    if (!file.has(key)) return -1;
    const int64_t x = file.get_int(key);
    return x >= 0 && x < static_cast<int64_t>(v.tokens.size()) ? static_cast<int32_t>(x) : -1;
  };
  v.bos_id = id("tokenizer.ggml.bos_token_id");
  v.eos_id = id("tokenizer.ggml.eos_token_id");
  v.unk_id = id("tokenizer.ggml.unknown_token_id");
  if (file.has("tokenizer.ggml.add_bos_token")) v.add_bos = file.get_bool("tokenizer.ggml.add_bos_token");
  if (file.has("tokenizer.ggml.add_space_prefix")) v.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix");
  return std::make_shared<GgufSpmTokenizer>(std::move(v));
}

}  // namespace inferscale
