#include "tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "util/check.h"

namespace inferscale {

struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
};

RegexSplitter::RegexSplitter(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &err, &err_offset, nullptr);
  if (impl_->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    IS_THROW(kInvalidInput, "pre-tokenizer regex does not compile at offset {}: {} (pattern: {})", err_offset,
             reinterpret_cast<const char*>(msg), pattern);
  }
  // JIT is an optimisation: when the platform lacks it, pcre2_match interprets the pattern.
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

RegexSplitter::~RegexSplitter() {
  if (impl_ && impl_->code) pcre2_code_free(impl_->code);
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  // Match data is per call, so one splitter serves many threads.
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(impl_->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;  // where the next search starts
  size_t gap = 0;  // start of text not yet emitted
  while (pos < text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    IS_CHECK(rc > 0, "pcre2_match failed with code {}", rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (b > gap) out.push_back(text.substr(gap, b - gap));
    if (e > b) {
      out.push_back(text.substr(b, e - b));
      gap = pos = e;
    } else {
      // An empty match emits nothing; step over one whole character.
      pos = b + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      gap = b;
    }
  }
  if (gap < text.size()) out.push_back(text.substr(gap));
}

RegexPreTokenizer::RegexPreTokenizer(const std::vector<std::string>& patterns) : patterns_(patterns) {
  for (const std::string& p : patterns_) splitters_.push_back(std::make_unique<RegexSplitter>(p));
}

std::vector<std::string_view> RegexPreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> words, next;
  if (text.empty()) return words;
  words.push_back(text);
  for (const auto& splitter : splitters_) {
    next.clear();
    for (const std::string_view w : words) splitter->split(w, next);
    words.swap(next);
  }
  return words;
}

}  // namespace inferscale
