// One fact's KV on disk, so a restart need not re-encode every fact. A cache of the text, never
// the source of truth: any mismatch (fingerprint, fact version, window and the hash of its
// tokens, shape) or corruption (checksum) makes read_kv_file return nullopt and the caller
// re-encodes from the text.
//
//   header (little-endian): magic "ISKV", format u32 (3), fingerprint u64, fact_id i64, version i64,
//                           window i32, window_hash u64, num_tokens i32, num_layers i32, kv_size i32,
//                           dtype u32, pool u32, checksum u64 (XXH3 of the payload bytes)
//   payload: K then V, [num_layers, num_tokens, kv_size] in `dtype` (f32, f16 or bf16); K is before RoPE
//
// `pool` is the dtype of the memory pool that computed the KV (Backend::pool_dtype(): f32 on the
// CPU, bf16 on the GPU): the memory service serves only files its own backend computed; another
// backend's file is re-encoded, not converted. `dtype` is how the file stores the values
// (kv_file_dtype): bf16 from a bf16 pool (exactly what it held), f16 from an f32 pool (half the
// bytes; docs/QUALITY.md measures no loss against f32: KL 5e-8 per token, top-1 unchanged).
//
// Files are written to a temporary name of their own (process and write) and renamed, so a reader
// never sees a half-written file, even in a directory that several replicas share (--kv-dir).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/host_tensor.h"

namespace inferscale {

struct KvFileKey {
  uint64_t fingerprint = 0;
  int64_t fact_id = 0;  // Fact::key
  int64_t version = 0;
  int32_t window = 0;
  int32_t num_layers = 0;
  int32_t kv_size = 0;
  uint64_t window_hash = 0;  // FactKvKey::window_hash: the tokens the fact was encoded after
};

struct FactKv {
  int32_t num_tokens = 0;
  HostTensor k;  // [num_layers, num_tokens, kv_size] in `pool` (what Backend::read_pool gives)
  HostTensor v;
  DType dtype = DType::kF32;  // how the file stores them: kF32, kF16 or kBF16 (rounded to nearest even)
  DType pool = DType::kF32;   // the dtype of the pool that computed them (kF32 or kBF16)
};

// How a file stores the KV of a pool of `pool` dtype: bf16 from a bf16 pool; f16 from an f32 pool
// when every value is finite and within f16's range, else f32 (nothing is ever clipped).
DType kv_file_dtype(DType pool, const FactKv& kv);

// Stores kv.k / kv.v (in kv.pool) as kv.dtype: copied when the same, rounded from an f32 pool.
void write_kv_file(const std::filesystem::path& path, const KvFileKey& key, const FactKv& kv);
// k / v come back in the file's pool dtype (an f32 pool's f16 file widened), ready for write_pool.
std::optional<FactKv> read_kv_file(const std::filesystem::path& path, const KvFileKey& key);

}  // namespace inferscale
