#include "tokenizer/byte_level.h"

#include <array>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace inferscale {
namespace {

struct Alphabet {
  std::array<std::string, 256> to_char;
  std::unordered_map<uint32_t, unsigned char> to_byte;

  Alphabet() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      utf8_append(cp, to_char[b]);
      to_byte[cp] = static_cast<unsigned char>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

const std::string& byte_level_char(unsigned char b) { return alphabet().to_char[b]; }

std::optional<std::string> byte_level_decode(std::string_view token) {
  const auto& map = alphabet().to_byte;
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const auto it = map.find(utf8_next(token, i));
    if (it == map.end()) return std::nullopt;
    out += static_cast<char>(it->second);
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += byte_level_char(static_cast<unsigned char>(c));
  return out;
}

}  // namespace inferscale
