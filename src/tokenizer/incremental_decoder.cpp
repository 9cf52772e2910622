#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace inferscale {

// Mirrors Tokenizer::decode piece by piece: the same leading-space rule on the first non-empty
// piece, then lossy UTF-8 over the bytes. Bytes are released up to the last complete character;
// utf8_lossy gives the same text whether or not its input is split there, so the emitted pieces
// concatenate to decode(all ids).
std::string IncrementalDecoder::push(int32_t id) {
  std::string piece = tok_.token_bytes(id, skip_special_);
  if (piece.empty()) return {};
  if (!seen_bytes_ && tok_.strips_leading_space() && piece[0] == ' ') piece.erase(0, 1);
  seen_bytes_ = true;
  pending_ += piece;
  const size_t keep = utf8_incomplete_tail(pending_);
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace inferscale
