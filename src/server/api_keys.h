// API keys and the tenant each one belongs to (`inferscale serve --api-keys FILE`).
//
// The file holds one `KEY TENANT` per line, separated by spaces or tabs:
//
//   # comments start with '#', anywhere on a line; blank lines are skipped
//   sk-acme-7f3c2a10d4   acme
//   sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08   globex
//
// KEY is the key itself (printable ASCII without spaces or '#') or `sha256:` and the 64 hex
// digits of the key's SHA-256, so the file need not hold the key. TENANT follows the store's name
// rule (memory/store/fact_store.h: 1 to 256 bytes, no control characters; no spaces here). A key may
// appear once, in either form; several keys may share a tenant. A bad line makes the whole file
// bad (Error kInvalidInput naming the file and the line): no key of a half-read file is used.
//
// Only SHA-256 digests are kept. A lookup hashes the presented key and compares the digest with
// EVERY entry's through CRYPTO_memcmp, never stopping early, so its time depends neither on
// which entry matches nor on where a wrong key differs (only on the presented key's length and
// the number of entries).
//
// Thread-safe: lookups from the HTTP threads, reload() from the thread that waits for SIGHUP.
// A reload swaps the whole table at once; one that fails keeps the table in use and logs why.
#pragma once
#include <array>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace inferscale::server {

using KeyDigest = std::array<unsigned char, 32>;  // SHA-256

KeyDigest sha256(std::string_view bytes);

struct ApiKeyEntry {
  KeyDigest digest;
  std::string tenant;
};

// Parses a key file's text; `origin` names it in errors ("keys.txt:3: ..."). Throws Error
// kInvalidInput for a bad line or a key given twice.
std::vector<ApiKeyEntry> parse_api_keys(std::string_view text, const std::string& origin);

class ApiKeys {
 public:
  // Reads `file` (Error kNotFound when it cannot be read, kInvalidInput when a line is bad).
  explicit ApiKeys(std::filesystem::path file);

  // Reads the file again and swaps the table in; on any error keeps the current one, logs why
  // and returns false.
  bool reload();

  // The tenant of `key`, or nullopt; constant time (see the header comment).
  std::optional<std::string> tenant_of(std::string_view key) const;

  size_t size() const;
  const std::filesystem::path& file() const { return file_; }

 private:
  using Table = std::vector<ApiKeyEntry>;
  std::shared_ptr<const Table> table() const;
  static std::shared_ptr<const Table> read(const std::filesystem::path& file);

  const std::filesystem::path file_;
  mutable std::mutex mu_;
  std::shared_ptr<const Table> table_;  // replaced whole under mu_, never changed in place
};

}  // namespace inferscale::server
