#include "memory/store/timestamp.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <string>
#include <vector>

namespace inferscale {

int64_t days_from_civil(int64_t y, int m, int d) {
  // Howard Hinnant's days_from_civil: eras of 400 years, March-based years so leap days come last.
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

namespace {

struct Civil {
  int64_t year;
  int month, day;
};

// The inverse of days_from_civil (Howard Hinnant's civil_from_days).
Civil civil_from_days(int64_t z) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  const int m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  return Civil{yoe + era * 400 + (m <= 2 ? 1 : 0), m, d};
}

// "YYYY-MM-DDTHH:MM:SS" of a unix second.
std::string iso_date_time(int64_t unix_s) {
  const int64_t days = unix_s >= 0 ? unix_s / 86400 : -((-unix_s + 86399) / 86400);
  const int64_t secs = unix_s - days * 86400;
  const Civil c = civil_from_days(days);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}", c.year, c.month, c.day, secs / 3600, secs / 60 % 60, secs % 60);
}

bool valid_date(int64_t y, int m, int d) {
  static constexpr std::array<int, 12> kDays = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (y < 1 || y > 9999 || m < 1 || m > 12 || d < 1 || d > kDays[static_cast<size_t>(m - 1)]) return false;
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m != 2 || d <= 28 || leap;
}

// Reads exactly n digits at s[pos]; advances pos.
bool digits(std::string_view s, size_t& pos, size_t n, int& out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    const char c = s[pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  pos += n;
  out = v;
  return true;
}

bool is_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

int to_int(std::string_view s) {
  int v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return v;
}

// "H:MM" or "H:MM:SS" (1-2 digit hour).
bool parse_clock(std::string_view s, int& h, int& mi, int& sec) {
  const size_t c1 = s.find(':');
  if (c1 == std::string_view::npos || c1 == 0 || c1 > 2) return false;
  const std::string_view hh = s.substr(0, c1);
  std::string_view rest = s.substr(c1 + 1);
  const size_t c2 = rest.find(':');
  const std::string_view mm = rest.substr(0, c2);
  const std::string_view ss = c2 == std::string_view::npos ? std::string_view("0") : rest.substr(c2 + 1);
  if (!is_digits(hh) || mm.size() != 2 || !is_digits(mm) || ss.size() > 2 || !is_digits(ss)) return false;
  h = to_int(hh);
  mi = to_int(mm);
  sec = to_int(ss);
  return h <= 23 && mi <= 59 && sec <= 60;
}

int month_number(std::string_view w) {
  static constexpr std::array<const char*, 12> kNames = {"january", "february", "march",     "april",   "may",      "june",
                                                         "july",    "august",   "september", "october", "november", "december"};
  if (!w.empty() && w.back() == '.') w.remove_suffix(1);
  if (w.size() < 3) return 0;
  for (size_t i = 0; i < kNames.size(); ++i) {
    const std::string_view name = kNames[i];
    if (w == name || w == name.substr(0, 3) || (w == "sept" && i == 8)) return static_cast<int>(i) + 1;
  }
  return 0;
}

std::optional<int64_t> parse_iso(std::string_view s) {
  size_t p = 0;
  int y = 0, m = 0, d = 0, h = 0, mi = 0, sec = 0;
  if (!digits(s, p, 4, y) || p >= s.size() || s[p++] != '-' || !digits(s, p, 2, m) || p >= s.size() ||
      s[p++] != '-' || !digits(s, p, 2, d))
    return std::nullopt;
  if (!valid_date(y, m, d)) return std::nullopt;
  int64_t offset_s = 0;
  if (p < s.size()) {
    if (s[p] != 'T' && s[p] != 't' && s[p] != ' ') return std::nullopt;
    ++p;
    if (!digits(s, p, 2, h) || p >= s.size() || s[p++] != ':' || !digits(s, p, 2, mi)) return std::nullopt;
    if (p < s.size() && s[p] == ':') {
      ++p;
      if (!digits(s, p, 2, sec)) return std::nullopt;
      if (p < s.size() && (s[p] == '.' || s[p] == ',')) {  // fractional seconds: dropped
        ++p;
        while (p < s.size() && std::isdigit(static_cast<unsigned char>(s[p]))) ++p;
      }
    }
    if (h > 23 || mi > 59 || sec > 60) return std::nullopt;
    if (p < s.size() && (s[p] == 'Z' || s[p] == 'z')) {
      ++p;
    } else if (p < s.size() && (s[p] == '+' || s[p] == '-')) {
      const int sign = s[p++] == '-' ? -1 : 1;
      int oh = 0, om = 0;
      if (!digits(s, p, 2, oh)) return std::nullopt;
      if (p < s.size() && s[p] == ':') ++p;
      if (!digits(s, p, 2, om) || oh > 23 || om > 59) return std::nullopt;
      offset_s = sign * (oh * 3600 + om * 60);
    }
    if (p != s.size()) return std::nullopt;
  }
  return days_from_civil(y, m, d) * 86400 + h * 3600 + mi * 60 + sec - offset_s;
}

// Word-based dates: a month name, a 1-2 digit day, a 4 digit year, optionally a clock time and
// am/pm, in any order; "on", "at" and commas are ignored.
std::optional<int64_t> parse_words(std::string_view s) {
  std::vector<std::string> words;
  std::string cur;
  for (char c : s) {
    if (c == ' ' || c == ',' || c == '\t') {
      if (!cur.empty()) words.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));

  int year = -1, month = -1, day = -1, h = -1, mi = 0, sec = 0;
  int meridiem = 0;  // 0 none, 1 am, 2 pm
  for (std::string w : words) {
    if (w == "on" || w == "at") continue;
    // "1:56pm" -> clock + meridiem.
    if (w.size() > 2 && (w.ends_with("am") || w.ends_with("pm")) && w.find(':') != std::string::npos) {
      if (meridiem != 0) return std::nullopt;
      meridiem = w.ends_with("am") ? 1 : 2;
      w.resize(w.size() - 2);
    }
    if (w == "am" || w == "a.m." || w == "pm" || w == "p.m.") {
      if (meridiem != 0) return std::nullopt;
      meridiem = w[0] == 'a' ? 1 : 2;
    } else if (w.find(':') != std::string::npos) {
      if (h >= 0 || !parse_clock(w, h, mi, sec)) return std::nullopt;
    } else if (const int m = month_number(w); m > 0) {
      if (month > 0) return std::nullopt;
      month = m;
    } else {
      std::string_view num = w;
      for (const char* suffix : {"st", "nd", "rd", "th"})
        if (num.size() > 2 && num.ends_with(suffix)) num.remove_suffix(2);
      if (!is_digits(num)) return std::nullopt;
      if (num.size() == 4 && year < 0) {
        year = to_int(num);
      } else if (num.size() <= 2 && day < 0) {
        day = to_int(num);
      } else {
        return std::nullopt;
      }
    }
  }
  if (year < 0 || month < 0 || day < 0 || !valid_date(year, month, day)) return std::nullopt;
  if (meridiem != 0) {
    if (h < 1 || h > 12) return std::nullopt;
    h = h % 12 + (meridiem == 2 ? 12 : 0);
  }
  if (h < 0) h = 0;
  return days_from_civil(year, month, day) * 86400 + h * 3600 + mi * 60 + sec;
}

}  // namespace

std::optional<int64_t> parse_timestamp(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  if (text.size() >= 10 && text[4] == '-') return parse_iso(text);
  return parse_words(text);
}

std::string iso_utc_seconds(int64_t unix_s) { return iso_date_time(unix_s) + "Z"; }

std::string iso_utc_micros(int64_t unix_ms) {
  const int64_t s = unix_ms >= 0 ? unix_ms / 1000 : -((-unix_ms + 999) / 1000);
  return fmt::format("{}.{:03}000+00:00", iso_date_time(s), unix_ms - s * 1000);
}

}  // namespace inferscale
