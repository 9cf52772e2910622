#include "tokenizer/spm_text.h"

namespace inferscale {

std::string spm_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (const char c : text) {
    if (c == ' ')
      out += kSpmSpace;
    else
      out += c;
  }
  return out;
}

std::string spm_unescape(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i, kSpmSpace.size()) == kSpmSpace) {
      out += ' ';
      i += kSpmSpace.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

int spm_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int v = 0;
  for (const char c : piece.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

}  // namespace inferscale
