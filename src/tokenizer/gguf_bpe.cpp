#include "tokenizer/gguf_bpe.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "tokenizer/gguf_vocab.h"
#include "tokenizer/pre_tokenizers.h"
#include "util/check.h"

namespace inferscale {

std::shared_ptr<BpeTokenizer> make_gguf_bpe_tokenizer(GgufBpeArrays a) {
  const auto n = static_cast<int64_t>(a.tokens.size());
  IS_REQUIRE(n > 0, kInvalidInput, "GGUF vocabulary: tokenizer.ggml.tokens is empty");
  IS_REQUIRE(a.types.empty() || static_cast<int64_t>(a.types.size()) == n, kInvalidInput,
             "GGUF vocabulary: {} tokens but {} token types", n, a.types.size());
  for (const int32_t id : {a.bos_id, a.eos_id})
    IS_REQUIRE(id >= -1 && id < n, kInvalidInput, "GGUF vocabulary: special id {} out of range (vocabulary size {})",
               id, n);
  for (const int32_t id : a.end_ids)
    IS_REQUIRE(id >= 0 && id < n, kInvalidInput, "GGUF vocabulary: end-of-turn id {} out of range (vocabulary size {})",
               id, n);

  if (a.pre.empty())
    spdlog::warn("GGUF vocabulary has no tokenizer.ggml.pre: using llama.cpp's 'default' pre-tokenizer; text may "
                 "split differently from how the model was trained");
  const std::string pre_name = a.pre.empty() ? "default" : a.pre;
  const GgufPreTokenizer& pre = gguf_pre_tokenizer(pre_name);

  BpeTokenizerSpec spec;
  spec.kind = "gguf-bpe";
  spec.pre_name = pre_name;
  spec.splits = pre.regexes;
  spec.ignore_merges = pre.ignore_merges;
  spec.merges.reserve(a.merges.size());
  for (size_t rank = 0; rank < a.merges.size(); ++rank) {
    const std::string& m = a.merges[rank];
    // As llama.cpp: the parts are split at the first space after the first character.
    const size_t sp = m.find(' ', 1);
    IS_REQUIRE(sp != std::string::npos && sp + 1 < m.size(), kInvalidInput,
               "GGUF vocabulary: merge #{} '{}' is not two tokens separated by a space", rank, m);
    spec.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  for (int32_t id = 0; id < n; ++id) {
    const auto type = a.types.empty() ? GgufTokenType::kNormal : static_cast<GgufTokenType>(a.types[id]);
    const std::string& text = a.tokens[static_cast<size_t>(id)];
    if (type == GgufTokenType::kControl || type == GgufTokenType::kUnknown)
      spec.added.push_back({id, text, /*special=*/true});
    else if (type == GgufTokenType::kUserDefined)
      spec.added.push_back({id, text, /*special=*/false});
  }
  spec.tokens = std::move(a.tokens);

  const bool add_bos = a.add_bos.value_or(pre.add_bos);
  const bool add_eos = a.add_eos.value_or(false);
  IS_REQUIRE(!add_bos || a.bos_id >= 0, kInvalidInput,
             "GGUF vocabulary: add_bos_token is set but there is no tokenizer.ggml.bos_token_id");
  IS_REQUIRE(!add_eos || a.eos_id >= 0, kInvalidInput,
             "GGUF vocabulary: add_eos_token is set but there is no tokenizer.ggml.eos_token_id");
  if (add_bos) spec.prefix = {a.bos_id};
  if (add_eos) spec.suffix = {a.eos_id};

  auto tok = std::make_shared<BpeTokenizer>(std::move(spec));
  SpecialIds s;
  if (a.bos_id >= 0) s.bos = a.bos_id;
  s.add_bos = add_bos;
  auto add_end = [&](int32_t id) {
    if (std::find(s.eos.begin(), s.eos.end(), id) == s.eos.end()) s.eos.push_back(id);
  };
  if (a.eos_id >= 0) add_end(a.eos_id);
  for (const int32_t id : a.end_ids) add_end(id);
  for (const int32_t id : known_end_ids(*tok)) add_end(id);
  tok->set_specials(std::move(s));
  return tok;
}

}  // namespace inferscale
