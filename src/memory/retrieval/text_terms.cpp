#include "memory/retrieval/text_terms.h"

#include <libstemmer.h>

#include <algorithm>
#include <array>
#include <memory>

#include "util/check.h"

namespace inferscale {
namespace {

// English function words: pronouns, determiners, auxiliaries, prepositions, conjunctions and
// question words (the Snowball English list's kind, plus the question words people ask with).
// Sorted, for binary search.
constexpr std::array<std::string_view, 129> kStopWords = {
    "a",       "about",  "above", "after",  "again",  "against", "all",     "am",      "an",     "and",
    "any",     "are",    "as",    "at",     "be",     "because", "been",    "before",  "being",  "below",
    "between", "both",   "but",   "by",     "can",    "could",   "did",     "do",      "does",   "doing",
    "down",    "during", "each",  "few",    "for",    "from",    "further", "had",     "has",    "have",
    "having",  "he",     "her",   "here",   "hers",   "herself", "him",     "himself", "his",    "how",
    "i",       "if",     "in",    "into",   "is",     "it",      "its",     "itself",  "just",   "me",
    "more",    "most",   "my",    "myself", "no",     "nor",     "not",     "now",     "of",     "off",
    "on",      "once",   "only",  "or",     "other",  "our",     "ours",    "ourselves", "out",  "over",
    "own",     "s",      "same",  "she",    "should", "so",      "some",    "such",    "t",      "than",
    "that",    "the",    "their", "theirs", "them",   "themselves", "then", "there",   "these",  "they",
    "this",    "those",  "through", "to",   "too",    "under",   "until",   "up",      "very",   "was",
    "we",      "were",   "what",  "when",   "where",  "which",   "while",   "who",     "whom",   "whose",
    "why",     "will",   "with",  "would",  "you",    "your",    "yours",   "yourself", "yourselves",
};
static_assert(std::is_sorted(kStopWords.begin(), kStopWords.end()), "kStopWords must be sorted");

bool is_ascii_letters(std::string_view w) {
  return !w.empty() && std::all_of(w.begin(), w.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

// libstemmer's stemmer keeps state between calls: one per thread.
struct Stemmer {
  sb_stemmer* s = sb_stemmer_new("english", "UTF_8");
  Stemmer() { IS_CHECK(s != nullptr, "libstemmer has no English stemmer"); }
  ~Stemmer() { sb_stemmer_delete(s); }
  Stemmer(const Stemmer&) = delete;
  Stemmer& operator=(const Stemmer&) = delete;
};

}  // namespace

std::vector<std::string> bm25_tokenize(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')) {
      cur.push_back(static_cast<char>(c));
    } else if (c >= 'A' && c <= 'Z') {
      cur.push_back(static_cast<char>(c - 'A' + 'a'));
    } else if (!cur.empty()) {
      out.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

bool is_stop_word(std::string_view word) {
  return std::binary_search(kStopWords.begin(), kStopWords.end(), word);
}

std::string stem_word(std::string_view word) {
  if (!is_ascii_letters(word)) return std::string(word);
  thread_local Stemmer stemmer;
  const sb_symbol* out = sb_stemmer_stem(stemmer.s, reinterpret_cast<const sb_symbol*>(word.data()),
                                         static_cast<int>(word.size()));
  IS_CHECK(out != nullptr, "libstemmer ran out of memory");
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(sb_stemmer_length(stemmer.s)));
}

std::vector<std::string> bm25_terms(std::string_view text) {
  std::vector<std::string> out;
  for (const std::string& w : bm25_tokenize(text))
    if (!is_stop_word(w)) out.push_back(stem_word(w));
  return out;
}

}  // namespace inferscale
