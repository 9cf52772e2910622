#include "engine/text_stream.h"

#include <algorithm>

namespace inferscale {

TextStream::TextStream(const Tokenizer& tok, std::vector<std::string> stop) : dec_(tok), stop_(std::move(stop)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
}

std::string TextStream::release() {
  // Earliest stop string anywhere in the held text ends the output right before it.
  size_t first = std::string::npos;
  for (const std::string& s : stop_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stop_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > hold; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string TextStream::push(int32_t id) {
  if (stopped_) return {};
  held_ += dec_.push(id);
  return release();
}

std::string TextStream::finish() {
  if (stopped_) return {};
  held_ += dec_.flush();
  std::string out = release();
  if (!stopped_) {
    out += held_;
    held_.clear();
  }
  return out;
}

}  // namespace inferscale
