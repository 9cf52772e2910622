// What the HTTP layer needs to know about the model it serves: its name, tokenizer and chat
// template (used read-only, concurrently, by HTTP threads). The weights stay with the engine.
#pragma once
#include <memory>
#include <string>

#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace inferscale::server {

struct ServedModel {
  std::string name;  // the "model" clients must send, listed by GET /v1/models
  std::shared_ptr<const Tokenizer> tokenizer;
  ChatTemplate chat_template;
  SamplingDefaults sampling;  // for the sampling fields a request does not set

  static ServedModel from(const Model& m) {
    return ServedModel{m.name.empty() ? m.source : m.name, m.tokenizer, m.chat_template, m.sampling};
  }
};

}  // namespace inferscale::server
