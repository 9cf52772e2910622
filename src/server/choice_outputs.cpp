#include "server/choice_outputs.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace inferscale::server {
namespace {

using nlohmann::json;

// Characters (code points) of valid UTF-8 text.
int64_t code_points(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

json legacy_object() {
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

}  // namespace

ChoiceOutputs::ChoiceOutputs(const GenerateRequest& req, const Tokenizer& tok)
    : tok_(tok),
      chat_(req.kind == ApiKind::kChat),
      logprobs_(req.logprobs),
      prompt_logprobs_(req.prompt_logprobs),
      echo_(req.echo),
      token_ids_(req.return_token_ids),
      generated_(tok) {}

void ChoiceOutputs::set_prompt(std::vector<int32_t> ids) { prompt_ = std::move(ids); }

std::string ChoiceOutputs::token_text(int32_t id) const { return utf8_lossy(tok_.token_bytes(id, /*skip_special=*/false)); }

json ChoiceOutputs::chat_content(const std::vector<LogprobEntry>& entries) const {
  auto one = [&](int32_t id, double logprob) {
    json bytes = json::array();
    for (char c : tok_.token_bytes(id, false)) bytes.push_back(static_cast<unsigned char>(c));
    return json{{"token", token_text(id)}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
  };
  json content = json::array();
  for (const LogprobEntry& e : entries) {
    json item = one(e.token, e.logprob);
    json top = json::array();
    for (size_t k = 0; k < std::min<size_t>(e.top.size(), static_cast<size_t>(logprobs_)); ++k)
      top.push_back(one(e.top[k].id, e.top[k].logprob));
    item["top_logprobs"] = std::move(top);
    content.push_back(std::move(item));
  }
  return content;
}

json ChoiceOutputs::prompt_logprobs_json(const std::vector<std::optional<LogprobEntry>>& entries) const {
  json out = json::array();
  for (const std::optional<LogprobEntry>& e : entries) {
    if (!e) {
      out.push_back(nullptr);
      continue;
    }
    json d = json::object();
    d[std::to_string(e->token)] = {{"logprob", e->logprob}, {"rank", e->rank}, {"decoded_token", token_text(e->token)}};
    for (size_t k = 0; k < std::min<size_t>(e->top.size(), static_cast<size_t>(prompt_logprobs_)); ++k) {
      const TokenLogprob& t = e->top[k];
      const std::string key = std::to_string(t.id);
      if (!d.contains(key))
        d[key] = {{"logprob", t.logprob}, {"rank", static_cast<int64_t>(k) + 1}, {"decoded_token", token_text(t.id)}};
    }
    out.push_back(std::move(d));
  }
  return out;
}

void ChoiceOutputs::legacy_append(json& lp, int32_t token, const LogprobEntry* e, int32_t top_n, const std::string& text) {
  const std::string s = token_text(token);
  lp["tokens"].push_back(s);
  lp["text_offset"].push_back(text_offset_);
  text_offset_ += code_points(text);
  if (!e) {
    lp["token_logprobs"].push_back(nullptr);
    lp["top_logprobs"].push_back(nullptr);
    return;
  }
  lp["token_logprobs"].push_back(e->logprob);
  json top = json::object();  // the top N and the token itself (OpenAI: up to N + 1 entries)
  for (size_t k = 0; k < std::min<size_t>(e->top.size(), static_cast<size_t>(top_n)); ++k) {
    const std::string key = token_text(e->top[k].id);
    if (!top.contains(key)) top[key] = e->top[k].logprob;
  }
  if (!top.contains(s)) top[s] = e->logprob;
  lp["top_logprobs"].push_back(std::move(top));
}

ChoiceFields ChoiceOutputs::first() {
  ChoiceFields f;
  if (token_ids_ && !prompt_ids_sent_) {
    prompt_ids_target(f)["prompt_token_ids"] = prompt_;
    prompt_ids_sent_ = true;
  }
  return f;
}

ChoiceFields ChoiceOutputs::next(const RequestOutput& o) {
  ChoiceFields f = first();
  const bool first_piece = !prompt_part_sent_;
  prompt_part_sent_ = true;
  const bool legacy = !chat_ && logprobs_ >= 0;
  json lp = legacy ? legacy_object() : json();
  if (first_piece) {
    if (prompt_logprobs_ >= 0) (chat_ ? f.top : f.choice)["prompt_logprobs"] = prompt_logprobs_json(o.prompt_logprobs);
    if (echo_) {
      // The prompt's text token by token; with logprobs, its scores (the first token has none).
      IncrementalDecoder dec(tok_);
      for (size_t i = 0; i < prompt_.size(); ++i) {
        std::string piece = dec.push(prompt_[i]);
        if (i + 1 == prompt_.size()) piece += dec.flush();
        if (legacy) {
          const LogprobEntry* e = i < o.prompt_logprobs.size() && o.prompt_logprobs[i] ? &*o.prompt_logprobs[i] : nullptr;
          legacy_append(lp, prompt_[i], e, logprobs_, piece);
        } else {
          text_offset_ += code_points(piece);
        }
        f.echo += piece;
      }
    }
  }
  if (logprobs_ >= 0 && (first_piece || !o.new_tokens.empty())) {
    if (chat_) {
      f.choice["logprobs"] = {{"content", chat_content(o.logprobs)}};
    } else {
      for (size_t i = 0; i < o.new_tokens.size(); ++i)
        legacy_append(lp, o.new_tokens[i], i < o.logprobs.size() ? &o.logprobs[i] : nullptr, logprobs_,
                      generated_.push(o.new_tokens[i]));
      f.choice["logprobs"] = std::move(lp);
    }
  }
  if (token_ids_ && (first_piece || !o.new_tokens.empty())) f.choice["token_ids"] = o.new_tokens;
  return f;
}

}  // namespace inferscale::server
