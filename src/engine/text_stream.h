// Turns a request's generated ids into text deltas: complete UTF-8 only (IncrementalDecoder),
// and stop strings applied. Text that could be the start of a stop string is held back until
// it cannot, so a stop string never leaks into streamed output.
#pragma once
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace inferscale {

class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::string> stop);
  // Appends one generated id; returns text now safe to emit. Sets stopped() on a stop string
  // (the returned text then ends right before it).
  std::string push(int32_t id);
  // Everything still held back (call once when the request finishes without a stop string).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::string release();
  IncrementalDecoder dec_;
  std::vector<std::string> stop_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace inferscale
