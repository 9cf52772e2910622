#include "memory/formats/chat_turn.h"

#include "memory/store/timestamp.h"

namespace inferscale {

NewFact chat_turn(std::string speaker, std::string text, int64_t at_s, std::string metadata) {
  NewFact t;
  t.text = std::move(text);
  t.source.speaker = std::move(speaker);
  t.timestamp = iso_utc_seconds(at_s);
  t.metadata = std::move(metadata);
  return t;
}

}  // namespace inferscale
