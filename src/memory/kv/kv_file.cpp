#include "memory/kv/kv_file.h"

#include <unistd.h>

#include <atomic>

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "tensor/dtype.h"
#include "util/check.h"

namespace inferscale {
namespace {

constexpr char kMagic[4] = {'I', 'S', 'K', 'V'};
constexpr uint32_t kFormat = 3;

#pragma pack(push, 1)
struct Header {
  char magic[4];
  uint32_t format;
  uint64_t fingerprint;
  int64_t fact_id;
  int64_t version;
  int32_t window;
  uint64_t window_hash;
  int32_t num_tokens;
  int32_t num_layers;
  int32_t kv_size;
  uint32_t dtype;  // DType: kF32, kF16 or kBF16
  uint32_t pool;   // DType of the pool that computed the KV
  uint64_t checksum;
};
#pragma pack(pop)

// One tensor of the payload: `pool`-dtype values into `file` dtype at dst (same: copied; an f32
// pool's values rounded to nearest even).
void encode_values(const HostTensor& t, DType file, char* dst) {
  const size_t n = static_cast<size_t>(t.numel());
  if (t.dtype == file) {
    std::memcpy(dst, t.data, n * dtype_size(file));
    return;
  }
  IS_CHECK(t.dtype == DType::kF32 && (file == DType::kF16 || file == DType::kBF16), "KV files store a {} pool as {}? no",
           dtype_name(t.dtype), dtype_name(file));
  convert_from_f32(file, t.as<float>(), dst, n);
}

// The payload as stored: K then V in `dtype`.
std::vector<char> encode_payload(const FactKv& kv) {
  const size_t n = static_cast<size_t>(kv.k.numel()), bytes = n * dtype_size(kv.dtype);
  std::vector<char> out(2 * bytes);
  encode_values(kv.k, kv.dtype, out.data());
  encode_values(kv.v, kv.dtype, out.data() + bytes);
  return out;
}

// n values of the file's dtype as a tensor of the pool's; false when the file's pair is not one
// write_kv_file makes (a bf16 pool stores bf16; an f32 pool f32, f16 or bf16).
bool decode_values(const char* src, DType file, DType pool, HostTensor& t) {
  const size_t n = static_cast<size_t>(t.numel());
  if (file == pool) {
    std::memcpy(t.data, src, n * dtype_size(file));
    return true;
  }
  if (pool != DType::kF32) return false;
  convert_to_f32(file, src, t.as<float>(), n);
  return true;
}

bool stored_dtype(uint32_t d) {
  return d == static_cast<uint32_t>(DType::kF32) || d == static_cast<uint32_t>(DType::kF16) ||
         d == static_cast<uint32_t>(DType::kBF16);
}

constexpr float kF16Max = 65504.0f;

}  // namespace

DType kv_file_dtype(DType pool, const FactKv& kv) {
  if (pool == DType::kBF16) return DType::kBF16;
  IS_CHECK(kv.k.dtype == DType::kF32 && kv.v.dtype == DType::kF32, "an f32 pool's KV is f32");
  auto fits = [](const HostTensor& t) {
    // Below f16's rounding overflow point (65520 rounds to infinity); NaN fails both tests.
    const float* x = t.as<float>();
    return std::all_of(x, x + t.numel(), [](float v) { return std::fabs(v) <= kF16Max; });
  };
  return fits(kv.k) && fits(kv.v) ? DType::kF16 : DType::kF32;
}

void write_kv_file(const std::filesystem::path& path, const KvFileKey& key, const FactKv& kv) {
  const std::vector<int64_t> shape{key.num_layers, kv.num_tokens, key.kv_size};
  IS_CHECK(kv.k.shape == shape && kv.v.shape == shape && kv.k.dtype == kv.pool && kv.v.dtype == kv.pool,
           "KV {} {} for a {} file of {} tokens", dtype_name(kv.k.dtype), kv.k.shape_str(), dtype_name(kv.pool),
           kv.num_tokens);
  IS_CHECK(stored_dtype(static_cast<uint32_t>(kv.dtype)) && stored_dtype(static_cast<uint32_t>(kv.pool)),
           "KV files hold f32, f16 or bf16, not {} (pool {})", dtype_name(kv.dtype), dtype_name(kv.pool));
  const std::vector<char> payload = encode_payload(kv);
  Header h{};
  std::memcpy(h.magic, kMagic, 4);
  h.format = kFormat;
  h.fingerprint = key.fingerprint;
  h.fact_id = key.fact_id;
  h.version = key.version;
  h.window = key.window;
  h.window_hash = key.window_hash;
  h.num_tokens = kv.num_tokens;
  h.num_layers = key.num_layers;
  h.kv_size = key.kv_size;
  h.dtype = static_cast<uint32_t>(kv.dtype);
  h.pool = static_cast<uint32_t>(kv.pool);
  h.checksum = XXH3_64bits(payload.data(), payload.size());
  std::filesystem::create_directories(path.parent_path());
  // A temporary name of this process and write alone: replicas sharing the directory may write
  // the same fact's file at once, and each renames only a whole file of its own over it.
  static std::atomic<uint64_t> writes{0};
  const std::filesystem::path tmp = fmt::format("{}.tmp.{}.{}", path.string(), ::getpid(), writes.fetch_add(1));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    IS_REQUIRE(f.good(), kResource, "cannot write KV file {}", tmp.string());
    f.write(reinterpret_cast<const char*>(&h), sizeof h);
    f.write(payload.data(), static_cast<std::streamsize>(payload.size()));
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
      h.fact_id != key.fact_id || h.version != key.version || h.window != key.window || h.window_hash != key.window_hash || h.num_layers != key.num_layers ||
      h.kv_size != key.kv_size || h.num_tokens <= 0 || h.num_tokens > (1 << 20) || !stored_dtype(h.dtype) ||
      !stored_dtype(h.pool))
    return std::nullopt;
  FactKv kv;
  kv.num_tokens = h.num_tokens;
  kv.dtype = static_cast<DType>(h.dtype);
  kv.pool = static_cast<DType>(h.pool);
  const size_t n = static_cast<size_t>(h.num_layers) * h.num_tokens * h.kv_size;
  const size_t payload_bytes = 2 * n * dtype_size(kv.dtype);
  // The file must hold exactly the payload the header announces before anything is allocated for
  // it: a header's num_tokens alone (up to 2^20) would otherwise size a buffer of up to
  // 2 * layers * 2^20 * kv_size values, whatever the file holds.
  std::error_code ec;
  const auto file_bytes = std::filesystem::file_size(path, ec);
  if (ec || file_bytes != sizeof h + payload_bytes) return std::nullopt;
  std::vector<char> payload(payload_bytes);
  if (!f.read(payload.data(), static_cast<std::streamsize>(payload.size()))) return std::nullopt;
  if (f.peek() != std::char_traits<char>::eof()) return std::nullopt;  // grew since: not our file
  if (XXH3_64bits(payload.data(), payload.size()) != h.checksum) return std::nullopt;
  const std::vector<int64_t> shape{h.num_layers, h.num_tokens, h.kv_size};
  kv.k = HostTensor::uninitialized(kv.pool, shape);
  kv.v = HostTensor::uninitialized(kv.pool, shape);
  if (!decode_values(payload.data(), kv.dtype, kv.pool, kv.k) ||
      !decode_values(payload.data() + n * dtype_size(kv.dtype), kv.dtype, kv.pool, kv.v))
    return std::nullopt;
  return kv;
}

}  // namespace inferscale
