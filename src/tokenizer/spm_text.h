// SentencePiece's text conventions, shared by the sentencepiece and GGUF vocabularies: spaces are
// written as U+2581 "▁" inside pieces, and byte-fallback pieces are spelled "<0xXX>".
#pragma once
#include <string>
#include <string_view>

namespace inferscale {

inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

// ' ' -> "▁"
std::string spm_escape(std::string_view text);
// "▁" -> ' '
std::string spm_unescape(std::string_view piece);
// The byte of a "<0xXX>" piece, or -1 when `piece` is not one.
int spm_byte_piece(std::string_view piece);

}  // namespace inferscale
