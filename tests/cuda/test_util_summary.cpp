// The summary table of every parity check, printed when the test program ends (the GPU run's
// reply shows the end of the output), and written to $PARITY_OUT when set.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include "cuda_test_util.h"

namespace inferscale::test {
namespace {

struct Row {
  std::string name, value;
  bool ok;
  double score;  // rel_l2 of a parity check; -1 for notes
};
std::mutex g_mu;
std::vector<Row>& rows() {
  static std::vector<Row> r;
  return r;
}

class SummaryEnv : public ::testing::Environment {
 public:
  void TearDown() override {
    std::lock_guard<std::mutex> lock(g_mu);
    if (rows().empty()) return;
    // Full table to $PARITY_OUT; stdout gets one line per family (name up to the first '/').
    char line[512];
    std::string full = "check | result | ok\n";
    struct Fam {
      std::string name, worst;
      int n = 0, bad = 0;
      double score = -2;
    };
    std::vector<Fam> fams;
    for (const Row& r : rows()) {
      std::snprintf(line, sizeof line, "%s | %s | %s\n", r.name.c_str(), r.value.c_str(), r.ok ? "yes" : "NO");
      full += line;
      const std::string fam = r.name.substr(0, r.name.find('/'));
      auto it = std::find_if(fams.begin(), fams.end(), [&](const Fam& x) { return x.name == fam; });
      if (it == fams.end()) it = fams.insert(fams.end(), Fam{fam, "", 0, 0, -2});
      Fam& f = *it;
      ++f.n;
      if (!r.ok) ++f.bad;
      // Worst = the first failure, else the largest rel_l2 (notes: the last one).
      if ((!r.ok && f.bad == 1) || (f.bad == 0 && r.score >= f.score)) {
        f.worst = r.value;
        f.score = r.score;
      }
    }
    std::string out = "\n== parity summary (GPU vs CPU twin); worst line per family ==\n";
    int bad = 0;
    for (const Fam& f : fams) {
      std::snprintf(line, sizeof line, "%-26s %4d checks %3d failed  %s\n", f.name.c_str(), f.n, f.bad, f.worst.c_str());
      out += line;
      bad += f.bad;
    }
    std::snprintf(line, sizeof line, "total %zu checks, %d failed\n", rows().size(), bad);
    out += line;
    std::fputs(out.c_str(), stdout);
    if (const char* p = std::getenv("PARITY_OUT")) std::ofstream(p, std::ios::app) << full << out;  // appends: one file for several runs
  }
};
const auto* g_env = ::testing::AddGlobalTestEnvironment(new SummaryEnv);

}  // namespace

void record(const std::string& name, const Err& e, double tol) {
  const bool ok = e.unwritten == 0 && e.rel_l2 <= tol && e.max_rel() <= 4 * tol;
  char buf[160];
  std::snprintf(buf, sizeof buf, "rel_l2 %.2e max_rel %.2e unwritten %zu", e.rel_l2, e.max_rel(), e.unwritten);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    rows().push_back({name, buf, ok, e.rel_l2});
  }
  EXPECT_EQ(e.unwritten, 0u) << name << ": elements left unwritten (poison)";
  EXPECT_LE(e.rel_l2, tol) << name;
  EXPECT_LE(e.max_rel(), 4 * tol) << name;
}

void note(const std::string& name, const std::string& value) {
  std::lock_guard<std::mutex> lock(g_mu);
  rows().push_back({name, value, true, -1});
}

}  // namespace inferscale::test
