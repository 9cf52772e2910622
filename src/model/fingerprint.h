// A running XXH3-64 hash for model and KV fingerprints: feed it the things that decide a model's
// numbers (config text, file sizes, weight headers, tokenizer bytes), then read hex().
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace inferscale {

class Fingerprinter {
 public:
  Fingerprinter();
  ~Fingerprinter();
  Fingerprinter(const Fingerprinter&) = delete;
  Fingerprinter& operator=(const Fingerprinter&) = delete;

  // Each piece is length-prefixed, so ("ab", "c") and ("a", "bc") hash differently.
  Fingerprinter& add(std::string_view bytes);
  Fingerprinter& add(uint64_t v);
  // The whole file's bytes (kNotFound naming it when it cannot be read).
  Fingerprinter& add_file(const std::string& path);
  // "xxh3:" + 16 hex digits.
  std::string hex() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace inferscale
