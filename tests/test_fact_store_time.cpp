// parse_timestamp: LoCoMo session dates, ISO 8601 and word dates; impossible dates are rejected.
#include <gtest/gtest.h>

#include "memory/store/timestamp.h"

using namespace inferscale;

namespace {
constexpr int64_t kDay = 86400;
// 2023-05-08T00:00:00Z
constexpr int64_t k20230508 = 1683504000;
}  // namespace

TEST(Timestamp, DaysFromCivil) {
  EXPECT_EQ(days_from_civil(1970, 1, 1), 0);
  EXPECT_EQ(days_from_civil(2000, 3, 1), 11017);
  EXPECT_EQ(days_from_civil(1969, 12, 31), -1);
  EXPECT_EQ(days_from_civil(2023, 5, 8) * kDay, k20230508);
}

TEST(Timestamp, LocomoSessionDates) {
  EXPECT_EQ(parse_timestamp("1:56 pm on 8 May, 2023"), k20230508 + 13 * 3600 + 56 * 60);
  EXPECT_EQ(parse_timestamp("10:04 am on 19 December, 2023"), days_from_civil(2023, 12, 19) * kDay + 10 * 3600 + 4 * 60);
  EXPECT_EQ(parse_timestamp("12:09 am on 13 September, 2023"), days_from_civil(2023, 9, 13) * kDay + 9 * 60);
  EXPECT_EQ(parse_timestamp("12:30 pm on 1 Jan, 2024"), days_from_civil(2024, 1, 1) * kDay + 12 * 3600 + 30 * 60);
  EXPECT_EQ(parse_timestamp("1:56pm on 8 may 2023"), k20230508 + 13 * 3600 + 56 * 60);
}

TEST(Timestamp, Iso8601) {
  EXPECT_EQ(parse_timestamp("2023-05-08"), k20230508);
  EXPECT_EQ(parse_timestamp("2023-05-08T13:56"), k20230508 + 13 * 3600 + 56 * 60);
  EXPECT_EQ(parse_timestamp("2023-05-08 13:56:07"), k20230508 + 13 * 3600 + 56 * 60 + 7);
  EXPECT_EQ(parse_timestamp("2023-05-08T13:56:07.123Z"), k20230508 + 13 * 3600 + 56 * 60 + 7);
  EXPECT_EQ(parse_timestamp("2023-05-08T13:56:07+02:00"), k20230508 + 11 * 3600 + 56 * 60 + 7);
  EXPECT_EQ(parse_timestamp("2023-05-08T13:56:07-0130"), k20230508 + 15 * 3600 + 26 * 60 + 7);
  EXPECT_EQ(parse_timestamp("  2024-02-29  "), days_from_civil(2024, 2, 29) * kDay);
}

TEST(Timestamp, WordDates) {
  EXPECT_EQ(parse_timestamp("8 May 2023"), k20230508);
  EXPECT_EQ(parse_timestamp("8 May, 2023"), k20230508);
  EXPECT_EQ(parse_timestamp("May 8, 2023"), k20230508);
  EXPECT_EQ(parse_timestamp("May 8th, 2023 at 9:00"), k20230508 + 9 * 3600);
  EXPECT_EQ(parse_timestamp("Sept 1 2023"), days_from_civil(2023, 9, 1) * kDay);
}

TEST(Timestamp, RejectsWhatItCannotRead) {
  for (const char* s : {"", "   ", "yesterday", "2023-02-29", "2023-13-01", "2023-05-08T25:00", "2023-05-08X",
                        "31 February 2023", "8 May", "May 2023", "13:00 pm on 8 May, 2023", "0:30 am on 8 May, 2023",
                        "8 May 2023 extra", "8 8 May 2023", "1:5 pm on 8 May, 2023"}) {
    EXPECT_FALSE(parse_timestamp(s).has_value()) << s;
  }
}

TEST(Timestamp, IsoUtcFormatsReadBack) {
  const int64_t t = k20230508 + 13 * 3600 + 56 * 60 + 7;
  EXPECT_EQ(iso_utc_seconds(t), "2023-05-08T13:56:07Z");
  EXPECT_EQ(iso_utc_micros(t * 1000 + 45), "2023-05-08T13:56:07.045000+00:00");
  EXPECT_EQ(iso_utc_seconds(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(iso_utc_micros(-1), "1969-12-31T23:59:59.999000+00:00");
  EXPECT_EQ(iso_utc_seconds(days_from_civil(2024, 2, 29) * kDay + kDay - 1), "2024-02-29T23:59:59Z");
  for (int64_t s : {int64_t{0}, t, days_from_civil(2000, 3, 1) * kDay + 1, days_from_civil(2099, 12, 31) * kDay + 86399}) {
    EXPECT_EQ(parse_timestamp(iso_utc_seconds(s)), s) << s;
    EXPECT_EQ(parse_timestamp(iso_utc_micros(s * 1000 + 999)), s) << s;
  }
}
