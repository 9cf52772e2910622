#include "memory/compose/prompt_layout.h"

#include <cctype>

#include "util/check.h"

namespace inferscale {
namespace {

// Stands for the facts in the chat text, so the template renders the block where it puts the
// system message; the text is then cut there. Control characters inside keep it out of any real
// text; its first and last characters are not whitespace, so templates that trim a message's
// content (Llama 3 and Mistral: Jinja's `trim`, Python's isspace, which counts \x1c-\x1f) keep
// it whole even with an empty header or footer.
constexpr std::string_view kMarker = "<\x1einferscale-memory\x1e>";

// Client text as text: no special tokens parsed (BOS added where asked).
constexpr EncodeOptions kTextFirst{.add_special = true, .parse_special = false};
constexpr EncodeOptions kTextRest{.add_special = false, .parse_special = false};

void append(std::vector<int32_t>& to, const std::vector<int32_t>& from) { to.insert(to.end(), from.begin(), from.end()); }

// The text before the facts, through the cache when there is one.
std::vector<int32_t> encode_before(const Tokenizer& tok, const std::string& text, EncodeOptions opts, EncodeCache* cache) {
  return cache ? cache->encode(tok, text, opts) : tok.encode(text, opts);
}

PromptFrame frame_chat(const PromptSource& src, const Tokenizer& tok, const ChatTemplate& tmpl, const FactsBlock* block,
                       EncodeCache* cache) {
  // The text before the facts starts the prompt (BOS where the template wants one); the rest follows.
  const EncodeOptions first = tmpl.encode_options(tok);
  if (!block) return {tok.encode(render_chat(tmpl, src.messages, src.render), first), {}};
  const std::string marked = block->header + std::string(kMarker) + block->footer;
  std::vector<ChatMessage> msgs = src.messages;
  if (!msgs.empty() && msgs[0].role == "system") {
    msgs[0].content += (msgs[0].content.empty() ? "" : "\n\n") + marked;
  } else {
    // The system prompt the template would have written (SmolLM2's ChatML has one) stays: the
    // memory follows it, as it follows a system prompt the client gives.
    const std::string& def = tmpl.default_system();
    msgs.insert(msgs.begin(), ChatMessage{"system", def.empty() ? marked : def + "\n\n" + marked});
  }
  const std::string text = render_chat(tmpl, msgs, src.render);
  const size_t at = text.find(kMarker);
  // Mistral's template writes the system text into the final user turn only: a chat that ends
  // with another role has nowhere for the block.
  IS_REQUIRE(at != std::string::npos, kUnsupported,
             "the chat template ({}) drops the system message, where memory goes, from this chat: end the "
             "messages with a user turn",
             chat_family_name(tmpl.family()));
  const EncodeOptions rest{.add_special = false, .parse_special = first.parse_special};
  return {encode_before(tok, text.substr(0, at), first, cache), tok.encode(text.substr(at + kMarker.size()), rest)};
}

// A completion's footer runs into the prompt: a newline between them unless the footer ends in
// whitespace (or is empty). A chat's footer ends the system message, whose end the template writes.
std::string completion_footer(const std::string& footer) {
  const bool ends_open = !footer.empty() && !std::isspace(static_cast<unsigned char>(footer.back()));
  return ends_open ? footer + "\n" : footer;
}

PromptFrame frame_completion(const PromptSource& src, const Tokenizer& tok, const FactsBlock* block, EncodeCache* cache) {
  if (src.ids) {
    if (!block) return {*src.ids, {}};
    const std::vector<int32_t>& ids = *src.ids;
    const bool bos_first = !ids.empty() && tok.bos_id() && ids[0] == *tok.bos_id();
    PromptFrame f;
    if (bos_first) f.before.push_back(ids[0]);
    append(f.before, encode_before(tok, block->header, kTextRest, cache));
    f.after = tok.encode(completion_footer(block->footer), kTextRest);
    f.after.insert(f.after.end(), ids.begin() + (bos_first ? 1 : 0), ids.end());
    return f;
  }
  if (!block) return {tok.encode(src.text, kTextFirst), {}};
  return {encode_before(tok, block->header, kTextFirst, cache), tok.encode(completion_footer(block->footer) + src.text, kTextRest)};
}

}  // namespace

namespace {

std::string fill_user(const std::string& tmpl, std::string_view name) {
  static constexpr std::string_view kUser = "{user}";
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = tmpl.find(kUser, at)) != std::string::npos; at = hit + kUser.size())
    out.append(tmpl, at, hit - at).append(name);
  return out.append(tmpl, at);
}

}  // namespace

FactsBlock FactsBlock::for_user(const std::string& header_template, const std::string& footer_template,
                                std::string_view name) {
  return FactsBlock{fill_user(header_template, name), fill_user(footer_template, name)};
}

std::vector<int32_t> EncodeCache::encode(const Tokenizer& tok, const std::string& text, EncodeOptions opts) {
  std::string key(1, static_cast<char>((opts.add_special ? 1 : 0) | (opts.parse_special ? 2 : 0)));
  key += text;
  if (auto it = map_.find(key); it != map_.end()) return it->second;
  std::vector<int32_t> ids = tok.encode(text, opts);
  if (map_.size() >= max_entries_) map_.clear();
  map_.emplace(std::move(key), ids);
  return ids;
}

PromptSource PromptSource::of_chat(std::vector<ChatMessage> messages, ChatRenderOptions render) {
  PromptSource s;
  s.chat = true;
  s.messages = std::move(messages);
  s.render = render;
  return s;
}

PromptSource PromptSource::of_text(std::string text) {
  PromptSource s;
  s.chat = false;
  s.text = std::move(text);
  return s;
}

PromptSource PromptSource::of_ids(std::vector<int32_t> ids) {
  PromptSource s;
  s.chat = false;
  s.ids = std::move(ids);
  return s;
}

std::string PromptSource::default_query(const Tokenizer& tok) const {
  if (!chat) return ids ? tok.decode(*ids) : text;
  for (auto it = messages.rbegin(); it != messages.rend(); ++it)
    if (it->role == "user") return it->content;
  return {};
}

PromptFrame frame_prompt(const PromptSource& src, const Tokenizer& tok, const ChatTemplate& tmpl, const FactsBlock* block,
                         EncodeCache* before_cache) {
  return src.chat ? frame_chat(src, tok, tmpl, block, before_cache) : frame_completion(src, tok, block, before_cache);
}

}  // namespace inferscale
