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

// A pre-tokenizer made of regex splits applied in order, each to every piece the ones before it
// produced: HF's Sequence of Split(Isolated) steps (and ByteLevel's GPT-2 split), llama.cpp's
// regex_exprs of a `tokenizer.ggml.pre`. No patterns: the text is one piece.
class RegexPreTokenizer {
 public:
  RegexPreTokenizer() = default;
  // Throws like RegexSplitter, naming the pattern that does not compile.
  explicit RegexPreTokenizer(const std::vector<std::string>& patterns);

  // `text` must be valid UTF-8. Returns views into `text`, in order, covering it exactly (an empty
  // text gives no pieces). Thread-safe.
  std::vector<std::string_view> split(std::string_view text) const;
  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  std::vector<std::string> patterns_;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;
};

}  // namespace inferscale
