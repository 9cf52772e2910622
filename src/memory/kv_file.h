// One fact's KV on disk, so a restart need not re-encode every fact. A cache of the text, never
// the source of truth: any mismatch (fingerprint, fact version, window, shape) or corruption
// (checksum) makes read_kv_file return nullopt and the caller re-encodes from the text.
//
//   header (little-endian): magic "ISKV", format u32, fingerprint u64, fact_id i64, version i64,
//                           window i32, num_tokens i32, num_layers i32, kv_size i32, checksum u64
//   payload: K then V, f32 [num_layers, num_tokens, kv_size]; K is before RoPE
//
// Files are written to a temporary name and renamed, so a reader never sees a half-written file.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

namespace inferscale {

struct KvFileKey {
  uint64_t fingerprint = 0;
  int64_t fact_id = 0;
  int64_t version = 0;
  int32_t window = 0;
  int32_t num_layers = 0;
  int32_t kv_size = 0;
};

struct FactKv {
  int32_t num_tokens = 0;
  std::vector<float> k;  // [num_layers, num_tokens, kv_size]
  std::vector<float> v;
};

void write_kv_file(const std::filesystem::path& path, const KvFileKey& key, const FactKv& kv);
std::optional<FactKv> read_kv_file(const std::filesystem::path& path, const KvFileKey& key);

}  // namespace inferscale
