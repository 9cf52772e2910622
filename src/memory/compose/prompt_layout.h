// The one prompt builder: every request's prompt, chat or completion, with or without memory, is
// laid out here, with an optional block of facts.
//
//   chat        the chat template's text, the block at the end of the system message (one is
//               added, holding the template's default system prompt if it has one, when the
//               conversation has none):
//                 [ BOS ... system prompt  header ][ facts ][ footer  conversation  generation prompt ]
//   completion  the block before the prompt text (a newline after a footer that does not end in
//               whitespace):
//                 text       [ BOS header ][ facts ][ footer prompt text ]
//                 token ids  [ BOS header ][ facts ][ footer ids ]   the BOS only when the client's
//                            ids start with it (it stays first); the ids are kept as sent
//
// Without a block (no memory object, mode off, k = 0, or no fact retrieved) `before` is exactly
// the prompt of a plain request and `after` is empty, on both endpoints: memory changes a prompt
// only by the facts it places. Client text is never parsed for special tokens except where the
// chat template writes them (a completion's "<|eot_id|>" stays text).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/chat_render.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace inferscale {

// What a request's prompt is made of, before any memory.
struct PromptSource {
  bool chat = true;
  std::vector<ChatMessage> messages;               // chat
  ChatRenderOptions render;                        // chat
  std::string text;                                // completion: a text prompt, or
  std::optional<std::vector<int32_t>> ids;         // completion: token ids as the client sent them

  static PromptSource of_chat(std::vector<ChatMessage> messages, ChatRenderOptions render = {});
  static PromptSource of_text(std::string text);
  static PromptSource of_ids(std::vector<int32_t> ids);

  // The retrieval query when the request gives none: the last user message (chat), the prompt
  // (completion; token ids decoded).
  std::string default_query(const Tokenizer& tok) const;
};

// The block's text around the facts (MemoryOptions::header / footer).
struct FactsBlock {
  std::string header;
  std::string footer;

  // The block of one user: every "{user}" in the two templates replaced by `name` (the user's
  // display name, else the user id), so the model is told whose memories these are.
  static FactsBlock for_user(const std::string& header_template, const std::string& footer_template,
                             std::string_view name);
};

struct PromptFrame {
  std::vector<int32_t> before;  // the prompt up to the facts; without a block, all of it
  std::vector<int32_t> after;   // the prompt after the facts; without a block, empty
};

// Encodes of the text a frame puts before the facts, memoized by text and options. That text is
// the same for every request with one template, system prompt and header, and its encode right
// after a forward (cold caches) took ~0.2 ms of a k = 5 request's preparation on the CPU
// (bench_memory_prepare). Holds one tokenizer's encodes; at most `max_entries` (cleared when
// full); not thread-safe (MemoryService keeps one for its engine thread).
class EncodeCache {
 public:
  explicit EncodeCache(size_t max_entries = 64) : max_entries_(max_entries) {}
  std::vector<int32_t> encode(const Tokenizer& tok, const std::string& text, EncodeOptions opts);
  size_t size() const { return map_.size(); }

 private:
  size_t max_entries_;
  std::unordered_map<std::string, std::vector<int32_t>> map_;  // key: options byte + text
};

// Lays out `src` with the facts' place marked by `block` (null: no block). Throws what the chat
// template throws (kUnsupported without a known family, kInvalidInput for bad messages).
// `before_cache` (optional) serves the encode of the text before the block; the frame is the same
// with or without it.
PromptFrame frame_prompt(const PromptSource& src, const Tokenizer& tok, const ChatTemplate& tmpl, const FactsBlock* block,
                         EncodeCache* before_cache = nullptr);

}  // namespace inferscale
