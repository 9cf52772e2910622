// Pieces of HF tokenizer.json that every model type spells the same way, shared by the BPE
// (hf_tokenizer.h) and WordPiece (wordpiece.h) loaders.
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/added_vocab.h"

namespace inferscale {

// Token ids a tokenizer file may name: [0, kMaxTokenId).
inline constexpr int64_t kMaxTokenId = int64_t{1} << 24;
// A token id of the file `source`: an integer in [0, kMaxTokenId), else kInvalidInput naming
// `what` (a float is refused: converting one past int's range is undefined behaviour).
int32_t hf_token_id(const nlohmann::json& v, const std::string& source, const std::string& what);

// A count or length setting of the file `source` (max_length, max_input_chars_per_word): an
// integer in [0, max], else kInvalidInput naming `what`.
size_t hf_size(const nlohmann::json& v, const std::string& source, const std::string& what, size_t max);

// The "type" of a component object; "" when absent (or not an object).
std::string hf_type_of(const nlohmann::json& j);
// j[key] when it is a boolean, else false.
bool hf_flag(const nlohmann::json& j, const char* key);
// One entry of "added_tokens" (content, special, lstrip, rstrip, single_word).
AddedToken hf_added_token(const nlohmann::json& t, int32_t id);

// The ids TemplateProcessing's single-sequence template puts before and after the sequence.
// Throws kUnsupported (naming `source`) for a template with a second sequence.
void hf_template_single(const nlohmann::json& p, const std::string& source, std::vector<int32_t>& prefix,
                        std::vector<int32_t>& suffix);

}  // namespace inferscale
