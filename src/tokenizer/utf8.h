// UTF-8 helpers shared by the tokenizers: validation, lossy repair (U+FFFD for invalid bytes, one
// per maximal subpart, as Rust's String::from_utf8_lossy and so HF tokenizers do), the incomplete
// tail a streaming decoder must hold back, and NFC / NFD normalization (utf8proc).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace inferscale {

// Length of the valid UTF-8 prefix of a character starting at s[0]: 0 when s[0] cannot start a
// character; otherwise the bytes that are valid so far (1..4). `complete` tells whether they form a
// whole character; a valid but cut-off sequence has complete == false.
size_t utf8_scan(std::string_view s, bool& complete);

bool utf8_valid(std::string_view s);

// `s` with every invalid maximal subpart (including a truncated character at the end) replaced by
// U+FFFD. Splitting `s` anywhere but inside a truncated character gives the same result piecewise.
std::string utf8_lossy(std::string_view s);

// `s` itself when valid, else its lossy repair kept in `storage`. Tokenizers take any bytes but
// work on valid UTF-8 (HF's input is a Rust String).
std::string_view utf8_repaired(std::string_view s, std::string& storage);

// Number of trailing bytes of `s` that start a valid character not yet complete (0..3): the part a
// streaming decoder holds back until more bytes arrive.
size_t utf8_incomplete_tail(std::string_view s);

// Decodes the code point at s[i] and advances i; invalid bytes yield U+FFFD and advance by their
// maximal subpart (at least one byte).
uint32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(uint32_t cp, std::string& out);

// Unicode NFC (canonical composition). Input must be valid UTF-8.
std::string utf8_nfc(std::string_view s);
// Unicode NFD (canonical decomposition, Hangul included). Input must be valid UTF-8.
std::string utf8_nfd(std::string_view s);

}  // namespace inferscale
