#include "memory/kv_file.h"

#include <xxhash.h>

#include <cstring>
#include <fstream>

#include "util/check.h"

namespace inferscale {
namespace {

constexpr char kMagic[4] = {'I', 'S', 'K', 'V'};
constexpr uint32_t kFormat = 1;

#pragma pack(push, 1)
struct Header {
  char magic[4];
  uint32_t format;
  uint64_t fingerprint;
  int64_t fact_id;
  int64_t version;
  int32_t window;
  int32_t num_tokens;
  int32_t num_layers;
  int32_t kv_size;
  uint64_t checksum;
};
#pragma pack(pop)

uint64_t payload_checksum(const FactKv& kv) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, kv.k.data(), kv.k.size() * sizeof(float));
  XXH3_64bits_update(st, kv.v.data(), kv.v.size() * sizeof(float));
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace

void write_kv_file(const std::filesystem::path& path, const KvFileKey& key, const FactKv& kv) {
  const size_t n = static_cast<size_t>(key.num_layers) * kv.num_tokens * key.kv_size;
  IS_CHECK(kv.k.size() == n && kv.v.size() == n, "KV of {} floats for a {}-float file", kv.k.size(), n);
  Header h{};
  std::memcpy(h.magic, kMagic, 4);
  h.format = kFormat;
  h.fingerprint = key.fingerprint;
  h.fact_id = key.fact_id;
  h.version = key.version;
  h.window = key.window;
  h.num_tokens = kv.num_tokens;
  h.num_layers = key.num_layers;
  h.kv_size = key.kv_size;
  h.checksum = payload_checksum(kv);
  std::filesystem::create_directories(path.parent_path());
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    IS_REQUIRE(f.good(), kResource, "cannot write KV file {}", tmp.string());
    f.write(reinterpret_cast<const char*>(&h), sizeof h);
    f.write(reinterpret_cast<const char*>(kv.k.data()), static_cast<std::streamsize>(n * sizeof(float)));
    f.write(reinterpret_cast<const char*>(kv.v.data()), static_cast<std::streamsize>(n * sizeof(float)));
    IS_REQUIRE(f.good(), kResource, "short write to KV file {} (disk full?)", tmp.string());
  }
  std::filesystem::rename(tmp, path);
}

std::optional<FactKv> read_kv_file(const std::filesystem::path& path, const KvFileKey& key) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  Header h{};
  if (!f.read(reinterpret_cast<char*>(&h), sizeof h)) return std::nullopt;
  if (std::memcmp(h.magic, kMagic, 4) != 0 || h.format != kFormat || h.fingerprint != key.fingerprint ||
      h.fact_id != key.fact_id || h.version != key.version || h.window != key.window || h.num_layers != key.num_layers ||
      h.kv_size != key.kv_size || h.num_tokens <= 0 || h.num_tokens > (1 << 20))
    return std::nullopt;
  FactKv kv;
  kv.num_tokens = h.num_tokens;
  const size_t n = static_cast<size_t>(h.num_layers) * h.num_tokens * h.kv_size;
  kv.k.resize(n);
  kv.v.resize(n);
  if (!f.read(reinterpret_cast<char*>(kv.k.data()), static_cast<std::streamsize>(n * sizeof(float))) ||
      !f.read(reinterpret_cast<char*>(kv.v.data()), static_cast<std::streamsize>(n * sizeof(float))))
    return std::nullopt;
  if (f.peek() != std::char_traits<char>::eof()) return std::nullopt;  // trailing bytes: not our file
  if (payload_checksum(kv) != h.checksum) return std::nullopt;
  return kv;
}

}  // namespace inferscale
