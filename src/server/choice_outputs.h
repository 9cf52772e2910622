// What a choice returns besides its generated text and finish reason, as the request asked
// (GenerateRequest: logprobs, echo, prompt_logprobs, return_token_ids), in the shapes clients parse:
//
//   chat (OpenAI)         choice.logprobs = {"content": [{"token", "logprob", "bytes",
//                                             "top_logprobs": [{"token", "logprob", "bytes"}]}]}
//   completion (legacy)   choice.logprobs = {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}],
//                                             "text_offset"}; top_logprobs holds the top N and the
//                         token itself; with echo the prompt's tokens come first (the first one null)
//                         and choice.text starts with the prompt
//   prompt (vLLM)         "prompt_logprobs": [null, {"<id>": {"logprob", "rank", "decoded_token"}}, ...]
//                         (the prompt token itself and the top N): top-level on chat, per choice on
//                         completions, as vLLM places it
//   token ids (vLLM)      return_token_ids: "prompt_token_ids" (top-level on chat, per choice on
//                         completions) and choice "token_ids"
//
// Fed the engine's outputs in order, it builds the fields piece by piece: one piece of everything
// for a whole response, or one per streamed chunk. Legacy text_offset counts the characters (code
// points) of the choice's text before each token, so pieces continue each other. A token's string
// is its raw bytes with invalid UTF-8 replaced (U+FFFD), special tokens written out; "bytes" has
// the raw bytes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/api_request.h"
#include "tokenizer/tokenizer.h"

namespace inferscale::server {

// Fields of one piece, merged into its choice and into the response (or chunk) object.
struct ChoiceFields {
  std::string echo;                            // text that goes before the piece's generated text
  nlohmann::json choice = nlohmann::json::object();
  nlohmann::json top = nlohmann::json::object();
  bool empty() const { return echo.empty() && choice.empty() && top.empty(); }
};

class ChoiceOutputs {
 public:
  // `tok` must outlive this object.
  ChoiceOutputs(const GenerateRequest& req, const Tokenizer& tok);

  // True when the prompt's ids are needed (echo, return_token_ids): pass them to set_prompt().
  bool needs_prompt() const { return echo_ || token_ids_; }
  // The prompt as served (memory composed in), before the first piece.
  void set_prompt(std::vector<int32_t> ids);

  // A streamed chunk sent before any output (the role chunk): prompt_token_ids.
  ChoiceFields first();
  // The fields of `o`'s piece (its tokens; the prompt part with its first output). Empty when the
  // request asked for none of these.
  ChoiceFields next(const RequestOutput& o);

 private:
  nlohmann::json chat_content(const std::vector<LogprobEntry>& entries) const;
  nlohmann::json prompt_logprobs_json(const std::vector<std::optional<LogprobEntry>>& entries) const;
  // Appends one token to a legacy logprobs object; `text` is what it adds to the choice's text.
  void legacy_append(nlohmann::json& lp, int32_t token, const LogprobEntry* entry, int32_t top_n, const std::string& text);
  std::string token_text(int32_t id) const;
  nlohmann::json& prompt_ids_target(ChoiceFields& f) const { return chat_ ? f.top : f.choice; }

  const Tokenizer& tok_;
  const bool chat_;
  const int32_t logprobs_;         // -1: none
  const int32_t prompt_logprobs_;  // -1: none
  const bool echo_;
  const bool token_ids_;
  std::vector<int32_t> prompt_;
  bool prompt_ids_sent_ = false;
  bool prompt_part_sent_ = false;  // echo / prompt_logprobs
  int64_t text_offset_ = 0;        // legacy: characters of the choice's text so far
  IncrementalDecoder generated_;   // legacy: each generated token's text, as the choice's text has it
};

}  // namespace inferscale::server
