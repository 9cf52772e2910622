// Byte-level BPE over raw bytes: a vocabulary of byte strings and ranked merges. Encoding one
// pre-tokenized word starts from one symbol per byte and repeatedly applies the lowest-ranked merge
// present (leftmost first on ties), as HF's BPE model does. Results are cached per word.
#pragma once
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace inferscale {

class BpeModel {
 public:
  // `vocab[id]` is the byte string of token id (ids are dense from 0; an empty string marks a hole).
  // `merges` are byte-string pairs in rank order; a merge whose parts or result are not in the
  // vocabulary throws kInvalidInput naming it. ignore_merges: a word that is itself a token is
  // emitted whole (Llama 3).
  BpeModel(std::vector<std::string> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           bool ignore_merges);

  // Appends the ids of one word. Bytes with no single-byte token are dropped (HF without unk_token).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> id(std::string_view bytes) const;
  const std::string& bytes(int32_t id) const { return vocab_[static_cast<size_t>(id)]; }
  int32_t size() const { return static_cast<int32_t>(vocab_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256];
  bool ignore_merges_;

  // Word -> ids. Bounded: cleared when full (conversations reuse a small working set of words).
  static constexpr size_t kCacheLimit = 100000;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace inferscale
