// Helpers shared by the memory tests: a temporary directory, error-kind assertions and a top-k
// comparison against a brute-force reference.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "memory/retrieval/retriever.h"
#include "util/check.h"

namespace inferscale::testing {

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "inferscale-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Runs `fn`, expecting an inferscale::Error of `kind` whose message contains `needle`.
template <class F>
void expect_error(F&& fn, ErrorKind kind, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

// `got` must be the top k of `ref` (every candidate, in ranking order): the same scores position
// by position within `rel_tol`; a different id only where its score ties (within tolerance)
// with the reference's at that position.
inline void expect_top_k(const std::vector<ScoredFact>& got, const std::vector<ScoredFact>& ref, size_t k,
                         const std::string& ctx, double rel_tol = 1e-9) {
  ASSERT_EQ(got.size(), std::min(k, ref.size())) << ctx;
  std::map<int64_t, double> ref_score;
  for (const auto& r : ref) ref_score[r.id] = r.score;
  std::set<int64_t> seen;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rel_tol * std::max(1.0, std::fabs(ref[i].score));
    EXPECT_NEAR(got[i].score, ref[i].score, tol) << ctx << " rank " << i;
    ASSERT_TRUE(ref_score.count(got[i].id)) << ctx << " unexpected id " << got[i].id;
    EXPECT_NEAR(ref_score[got[i].id], got[i].score, tol) << ctx << " id " << got[i].id;
    EXPECT_TRUE(seen.insert(got[i].id).second) << ctx << " repeated id " << got[i].id;
    if (i > 0) EXPECT_FALSE(ranks_before(got[i], got[i - 1])) << ctx << " out of order at " << i;
  }
}

}  // namespace inferscale::testing
