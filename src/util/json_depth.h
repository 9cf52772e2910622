// The nesting depth of JSON text, found by one scan of its bytes before any parser builds the
// value: a hostile document of a million '[' then costs a linear scan, never a deep value that
// later recursive walks (dump, comparisons, our own readers) would follow to a stack overflow.
#pragma once
#include <cstddef>
#include <string_view>

namespace inferscale {

// Whether `text` opens more than `limit` arrays or objects inside one another. Brackets inside
// strings do not count (escapes are followed); the text need not be valid JSON (the parser
// judges that), so this only ever says "too deep" for text that is at least that deep.
inline bool json_deeper_than(std::string_view text, size_t limit) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

}  // namespace inferscale
