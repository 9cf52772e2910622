// Pre-tokenizer split by a regular expression (HF Split with behavior "Isolated"): every match and
// every gap between matches becomes its own piece, in order. Runs PCRE2 with UTF + UCP (so \s, \p{L}
// and (?i) are Unicode-aware, as in HF's Oniguruma) and JIT.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace inferscale {

class RegexSplitter {
 public:
  // Throws Error(kInvalidInput) naming the pattern and PCRE2's message when it does not compile.
  explicit RegexSplitter(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // `text` must be valid UTF-8 (checked by the caller). Appends views into `text`. Thread-safe.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace inferscale
