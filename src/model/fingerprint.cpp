#include "model/fingerprint.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <fstream>
#include <vector>

#include "util/check.h"

namespace inferscale {

struct Fingerprinter::State {
  XXH3_state_t* st = XXH3_createState();
  ~State() { XXH3_freeState(st); }
};

Fingerprinter::Fingerprinter() : s_(std::make_unique<State>()) {
  IS_CHECK(s_->st != nullptr, "XXH3_createState failed");
  XXH3_64bits_reset(s_->st);
}

Fingerprinter::~Fingerprinter() = default;

Fingerprinter& Fingerprinter::add(uint64_t v) {
  XXH3_64bits_update(s_->st, &v, sizeof v);
  return *this;
}

Fingerprinter& Fingerprinter::add(std::string_view bytes) {
  add(static_cast<uint64_t>(bytes.size()));
  XXH3_64bits_update(s_->st, bytes.data(), bytes.size());
  return *this;
}

Fingerprinter& Fingerprinter::add_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  IS_REQUIRE(in.good(), kNotFound, "cannot read {}", path);
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<size_t>(in.gcount());
    XXH3_64bits_update(s_->st, buf.data(), n);
    total += n;
  }
  return add(total);
}

std::string Fingerprinter::hex() const { return fmt::format("xxh3:{:016x}", XXH3_64bits_digest(s_->st)); }

}  // namespace inferscale
