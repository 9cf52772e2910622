// The progress bar used by `memory import-locomo`: rate, ETA, redraw throttling, plain lines
// when the output is not a terminal. A fake clock makes it deterministic.
#include <gtest/gtest.h>
#include <stdio.h>

#include <algorithm>
#include <cstdlib>

#include "util/progress.h"

using namespace inferscale;

namespace {

// Collects what Progress writes (open_memstream), with a clock the test moves.
struct Capture {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  double t = 100.0;
  ~Capture() {
    if (f != nullptr) std::fclose(f);
    std::free(buf);
  }
  std::string text() {
    std::fflush(f);
    return std::string(buf, len);
  }
  Progress::Options options(bool tty) {
    Progress::Options o;
    o.out = f;
    o.tty = tty;
    o.unit = "facts";
    o.clock = [this] { return t; };
    return o;
  }
};

}  // namespace

TEST(Progress, LineShowsCountPercentRateAndEta) {
  Capture c;
  Progress p("import", 200, c.options(false));
  c.t += 2.0;
  p.set(50);
  EXPECT_EQ(p.line(), "import  50/200   25% |#####               |  25.0 facts/s  ETA 0:06");
  c.t += 6.0;
  p.set(200);
  EXPECT_EQ(p.line(), "import  200/200  100% |####################|  25.0 facts/s  in 0:08");
}

TEST(Progress, UnknownTotalHasNoEta) {
  Capture c;
  Progress p("scan", 0, c.options(false));
  c.t += 4.0;
  p.add(10);
  EXPECT_EQ(p.line(), "scan  10  2.5 facts/s");
}

TEST(Progress, PlainLinesWhenNotATerminal) {
  Capture c;
  {
    Progress p("job", 100, c.options(false));
    for (int i = 0; i < 100; ++i) {
      c.t += 0.1;  // 10 s in all: a line at the start, at 5 s and at 10 s at most
      p.add();
    }
    p.finish();
    p.finish();  // idempotent
  }
  const std::string out = c.text();
  EXPECT_EQ(out.find('\r'), std::string::npos);
  const auto lines = std::count(out.begin(), out.end(), '\n');
  EXPECT_GE(lines, 2);
  EXPECT_LE(lines, 4);
  EXPECT_NE(out.find("job  100/100  100%"), std::string::npos) << out;
  EXPECT_EQ(out.substr(out.size() - 1), "\n");
}

TEST(Progress, TerminalRedrawsInPlaceAFewTimesASecond) {
  Capture c;
  {
    Progress p("job", 1000, c.options(true));
    for (int i = 0; i < 1000; ++i) {
      c.t += 0.002;  // 2 s in all: at most ~5 redraws a second
      p.add();
    }
  }  // the destructor finishes
  const std::string out = c.text();
  const auto redraws = std::count(out.begin(), out.end(), '\r');
  EXPECT_GE(redraws, 5);
  EXPECT_LE(redraws, 13);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);  // only after the final line
  EXPECT_NE(out.find("1000/1000"), std::string::npos);
}

TEST(Progress, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(7.4), "0:07");
  EXPECT_EQ(format_duration(723), "12:03");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "?");
}
