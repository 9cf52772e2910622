#include "tokenizer/utf8.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "util/check.h"

namespace inferscale {

size_t utf8_scan(std::string_view s, bool& complete) {
  complete = false;
  if (s.empty()) return 0;
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) {
    complete = true;
    return 1;
  }
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (excludes overlongs/surrogates)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  size_t n = 1;
  for (; n < need && n < s.size(); ++n) {
    const auto b = static_cast<uint8_t>(s[n]);
    const bool ok = n == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return n;
  }
  complete = n == need;
  return n;
}

bool utf8_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    bool complete;
    const size_t n = utf8_scan(s.substr(i), complete);
    if (!complete) return false;
    i += n;
  }
  return true;
}

uint32_t utf8_next(std::string_view s, size_t& i) {
  bool complete;
  const size_t n = utf8_scan(s.substr(i), complete);
  if (!complete) {
    i += n == 0 ? 1 : n;
    return 0xFFFD;
  }
  const auto* p = reinterpret_cast<const uint8_t*>(s.data() + i);
  i += n;
  switch (n) {
    case 1: return p[0];
    case 2: return (uint32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3: return (uint32_t(p[0] & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
      return (uint32_t(p[0] & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) | (uint32_t(p[2] & 0x3F) << 6) |
             (p[3] & 0x3F);
  }
}

void utf8_append(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    bool complete;
    const size_t n = utf8_scan(s.substr(i), complete);
    if (complete) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += n == 0 ? 1 : n;
    }
  }
  return out;
}

std::string_view utf8_repaired(std::string_view s, std::string& storage) {
  if (utf8_valid(s)) return s;
  storage = utf8_lossy(s);
  return storage;
}

size_t utf8_incomplete_tail(std::string_view s) {
  // A character is at most 4 bytes, so only a start among the last 3 bytes can still be incomplete.
  const size_t first = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = first; i < s.size(); ++i) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b >= 0x80 && b <= 0xBF) continue;  // a continuation byte starts nothing
    bool complete;
    const size_t n = utf8_scan(s.substr(i), complete);
    if (!complete && n > 0 && i + n == s.size()) return n;
  }
  return 0;
}

namespace {

// utf8proc_map with `options`; `form` names the normalization in errors.
std::string utf8proc_normalize(std::string_view s, int options, const char* form) {
  IS_CHECK(utf8_valid(s), "{} input must be valid UTF-8", form);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                   static_cast<utf8proc_option_t>(options));
  IS_CHECK(n >= 0, "utf8proc {} failed: {}", form, utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> hold(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

}  // namespace

std::string utf8_nfc(std::string_view s) { return utf8proc_normalize(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE, "NFC"); }

std::string utf8_nfd(std::string_view s) { return utf8proc_normalize(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, "NFD"); }

}  // namespace inferscale
