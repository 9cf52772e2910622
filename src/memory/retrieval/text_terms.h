// The terms BM25 indexes and searches: words, lowercased, without English stop words, reduced to
// their Snowball (Porter 2) English stems, so "adopt", "adopted" and "adopting" are one term and
// "What is my ...?" does not match every fact that says "my".
//
//   text  --bm25_tokenize-->  words  --drop kStopWords-->  --Snowball english-->  terms
//
// A word that is not plain ASCII letters (digits, UTF-8 runs) is kept whole and unstemmed:
// the stemmer is English's, and numbers ("2023") are their own terms.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace inferscale {

// Lowercases ASCII and splits on every byte that is not an ASCII letter or digit; bytes >= 0x80
// count as word characters, so UTF-8 words (accents, CJK runs) stay whole tokens.
std::vector<std::string> bm25_tokenize(std::string_view text);

// True for an English function word that carries no topic ("the", "my", "what", "did", ...).
// `word` is lowercase.
bool is_stop_word(std::string_view word);

// The Snowball English stem of a lowercase ASCII word ("adopted" -> "adopt"); other words as they are.
std::string stem_word(std::string_view word);

// bm25_tokenize, then stop words dropped and the rest stemmed: what the index and its queries hold.
std::vector<std::string> bm25_terms(std::string_view text);

}  // namespace inferscale
