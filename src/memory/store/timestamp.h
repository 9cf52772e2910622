// Parsing of the free-form time strings facts carry into seconds since 1970.
//
// Accepted (case-insensitive; month names full or 3-letter):
//   LoCoMo:   "1:56 pm on 8 May, 2023"   "10:04 am on 19 December, 2023"
//   ISO 8601: "2023-05-08"  "2023-05-08T13:56"  "2023-05-08 13:56:07"  "...Z"  "...+02:00"
//   Dates:    "8 May 2023"  "8 May, 2023"  "May 8, 2023"  (optionally with "h:mm [am|pm]")
// A string without a zone is read as UTC: the epoch orders facts and measures recency, it does
// not claim to know the speaker's zone.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace inferscale {

// Seconds since 1970-01-01T00:00:00Z, or nullopt when the string is not a recognised date
// (or names an impossible one, such as 31 February).
std::optional<int64_t> parse_timestamp(std::string_view text);

// Days since 1970-01-01 of a proleptic Gregorian date (month 1..12, day 1..31).
int64_t days_from_civil(int64_t year, int month, int day);

// ISO 8601 in UTC, both read back by parse_timestamp():
//   iso_utc_seconds(1709389567)      "2024-03-02T14:26:07Z"               (a fact's date)
//   iso_utc_micros(1709389567123)    "2024-03-02T14:26:07.123000+00:00"   (Python's
//                                    datetime.now(timezone.utc).isoformat(), as Mem0 writes them)
std::string iso_utc_seconds(int64_t unix_s);
std::string iso_utc_micros(int64_t unix_ms);

}  // namespace inferscale
