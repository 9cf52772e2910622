#include "server/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

#include "memory/store/fact_store.h"
#include "util/check.h"

namespace inferscale::server {
namespace {

constexpr std::string_view kDigestPrefix = "sha256:";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The fields of one line, split on spaces and tabs, the comment removed.
std::vector<std::string_view> fields_of(std::string_view line) {
  if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

KeyDigest digest_of(std::string_view key, const std::string& where) {
  if (key.substr(0, kDigestPrefix.size()) == kDigestPrefix) {
    const std::string_view hex = key.substr(kDigestPrefix.size());
    KeyDigest d{};
    IS_REQUIRE(hex.size() == 2 * d.size(), kInvalidInput, "{}: 'sha256:' must be followed by 64 hex digits, got {}", where,
               hex.size());
    for (size_t i = 0; i < d.size(); ++i) {
      const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
      IS_REQUIRE(hi >= 0 && lo >= 0, kInvalidInput, "{}: 'sha256:' must be followed by 64 hex digits", where);
      d[i] = static_cast<unsigned char>(hi * 16 + lo);
    }
    return d;
  }
  for (char c : key)
    IS_REQUIRE(c > 0x20 && c < 0x7f, kInvalidInput, "{}: a key must be printable ASCII without spaces", where);
  return sha256(key);
}

}  // namespace

KeyDigest sha256(std::string_view bytes) {
  KeyDigest d{};
  unsigned int n = 0;
  IS_CHECK(EVP_Digest(bytes.data(), bytes.size(), d.data(), &n, EVP_sha256(), nullptr) == 1 && n == d.size(),
           "SHA-256 failed");
  return d;
}

std::vector<ApiKeyEntry> parse_api_keys(std::string_view text, const std::string& origin) {
  std::vector<ApiKeyEntry> out;
  std::vector<size_t> lines;  // of each entry, for the duplicate message
  size_t line_no = 0;
  for (size_t start = 0; start <= text.size(); ++line_no) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::vector<std::string_view> f = fields_of(line);
    if (f.empty()) continue;
    const std::string where = fmt::format("{}:{}", origin, line_no + 1);
    IS_REQUIRE(f.size() == 2, kInvalidInput, "{}: expected 'KEY TENANT', got {} field{}", where, f.size(),
               f.size() == 1 ? "" : "s");
    const std::string tenant(f[1]);
    if (auto problem = name_problem(tenant))
      IS_THROW(kInvalidInput, "{}: the tenant {} (1 to {} bytes without control characters)", where, *problem,
               FactStore::kMaxNameBytes);
    ApiKeyEntry e{digest_of(f[0], where), tenant};
    for (size_t i = 0; i < out.size(); ++i)
      IS_REQUIRE(out[i].digest != e.digest, kInvalidInput, "{}: the same key as line {}", where, lines[i]);
    out.push_back(std::move(e));
    lines.push_back(line_no + 1);
  }
  return out;
}

ApiKeys::ApiKeys(std::filesystem::path file) : file_(std::move(file)), table_(read(file_)) {
  if (table_->empty()) spdlog::warn("API keys: {} holds no key: every route but GET /health answers 401", file_.string());
}

std::shared_ptr<const ApiKeys::Table> ApiKeys::read(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  IS_REQUIRE(in.good(), kNotFound, "cannot read the API key file {}", file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  IS_REQUIRE(!in.bad(), kNotFound, "cannot read the API key file {}", file.string());
  return std::make_shared<const Table>(parse_api_keys(ss.str(), file.string()));
}

bool ApiKeys::reload() {
  std::shared_ptr<const Table> fresh;
  try {
    fresh = read(file_);
  } catch (const Error& e) {
    spdlog::error("API keys: reload failed, the {} key(s) in use stay: {}", size(), e.what());
    return false;
  }
  {
    std::lock_guard lk(mu_);
    table_ = fresh;
  }
  spdlog::info("API keys: reloaded {}: {} key(s)", file_.string(), fresh->size());
  if (fresh->empty()) spdlog::warn("API keys: no key left: every route but GET /health answers 401");
  return true;
}

std::shared_ptr<const ApiKeys::Table> ApiKeys::table() const {
  std::lock_guard lk(mu_);
  return table_;
}

size_t ApiKeys::size() const { return table()->size(); }

std::optional<std::string> ApiKeys::tenant_of(std::string_view key) const {
  const KeyDigest d = sha256(key);
  const std::shared_ptr<const Table> t = table();
  const ApiKeyEntry* found = nullptr;
  // Every entry is compared, whatever matched before: no early exit, no data-dependent branch in
  // the comparison itself. Digests are unique (parse_api_keys), so at most one entry matches.
  for (const ApiKeyEntry& e : *t) {
    const bool same = CRYPTO_memcmp(e.digest.data(), d.data(), d.size()) == 0;
    found = same ? &e : found;
  }
  if (!found) return std::nullopt;
  return found->tenant;
}

}  // namespace inferscale::server
