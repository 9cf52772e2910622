// GPT-2's byte-level alphabet: every byte gets a printable code point so a BPE vocabulary over
// bytes can be written as text (tokenizer.json keys). Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF map to
// themselves; the other 68 bytes map to U+0100.. in byte order (so ' ' becomes 'Ġ', '\n' 'Ċ').
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace inferscale {

// The UTF-8 text of byte b's code point.
const std::string& byte_level_char(unsigned char b);
// The bytes a byte-level token string stands for; nullopt if it holds a character outside the alphabet.
std::optional<std::string> byte_level_decode(std::string_view token);
// The byte-level token string of raw bytes.
std::string byte_level_encode(std::string_view bytes);

}  // namespace inferscale
