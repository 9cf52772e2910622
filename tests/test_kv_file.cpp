// KV files: f32 round-trips exactly; bf16 holds bf16-representable values (what a GPU pool reads
// back) exactly in half the bytes and rounds others to nearest even; f16 (the CPU pool's files)
// rounds to nearest even and is chosen only when every value fits; any key mismatch, an old
// format, truncation, a flipped byte or trailing bytes reads as "no file" (re-encode), never as KV.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "memory/kv_file.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using inferscale::testing::TempDir;

namespace {

KvFileKey key() { return KvFileKey{0xfeedULL, 42, 3, 2, 3, 40}; }

FactKv random_kv(int32_t tokens, DType dtype, bool bf16_exact) {
  FactKv kv;
  kv.num_tokens = tokens;
  kv.dtype = dtype;
  const size_t n = static_cast<size_t>(key().num_layers) * tokens * key().kv_size;
  std::mt19937 g(7);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (size_t i = 0; i < n; ++i) {
    float k = d(g), v = d(g);
    if (bf16_exact) k = bf16_to_f32(f32_to_bf16(k)), v = bf16_to_f32(f32_to_bf16(v));
    kv.k.push_back(k);
    kv.v.push_back(v);
  }
  return kv;
}

void patch(const std::filesystem::path& p, std::streamoff at, char x) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(at);
  f.write(&x, 1);
}

}  // namespace

TEST(KvFile, F32RoundTripsExactly) {
  TempDir dir;
  const auto p = dir.path() / "a.kv";
  const FactKv kv = random_kv(7, DType::kF32, false);
  write_kv_file(p, key(), kv);
  const auto back = read_kv_file(p, key());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->num_tokens, 7);
  EXPECT_EQ(back->dtype, DType::kF32);
  EXPECT_EQ(back->k, kv.k);
  EXPECT_EQ(back->v, kv.v);
}

TEST(KvFile, Bf16HoldsPoolValuesExactlyInHalfTheBytes) {
  TempDir dir;
  const FactKv f32 = random_kv(9, DType::kF32, true);
  FactKv bf = f32;
  bf.dtype = DType::kBF16;
  write_kv_file(dir.path() / "f.kv", key(), f32);
  write_kv_file(dir.path() / "b.kv", key(), bf);
  const auto back = read_kv_file(dir.path() / "b.kv", key());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->dtype, DType::kBF16);
  EXPECT_EQ(back->k, f32.k);
  EXPECT_EQ(back->v, f32.v);
  const auto payload = [](uintmax_t bytes) { return bytes - 72; };  // header: 72 bytes
  EXPECT_EQ(payload(std::filesystem::file_size(dir.path() / "b.kv")) * 2,
            payload(std::filesystem::file_size(dir.path() / "f.kv")));

  // Values that are not bf16 round to nearest even.
  FactKv odd = random_kv(2, DType::kBF16, false);
  write_kv_file(dir.path() / "o.kv", key(), odd);
  const auto r = read_kv_file(dir.path() / "o.kv", key());
  ASSERT_TRUE(r);
  for (size_t i = 0; i < odd.k.size(); ++i) {
    EXPECT_EQ(r->k[i], bf16_to_f32(f32_to_bf16(odd.k[i])));
    EXPECT_NEAR(r->k[i], odd.k[i], std::abs(odd.k[i]) / 256);
  }
}

// An f32 pool's files are f16 (measured lossless against f32: docs/QUALITY.md), unless a value
// falls outside f16's range; a bf16 pool's are bf16. Reading gives f16's rounding of each value
// and says which pool computed them.
TEST(KvFile, F32PoolsStoreF16WhenEveryValueFits) {
  TempDir dir;
  FactKv kv = random_kv(6, DType::kF32, false);
  EXPECT_EQ(kv_file_dtype(DType::kF32, kv), DType::kF16);
  EXPECT_EQ(kv_file_dtype(DType::kBF16, kv), DType::kBF16);
  kv.dtype = DType::kF16;
  kv.pool = DType::kF32;
  write_kv_file(dir.path() / "h.kv", key(), kv);
  const auto back = read_kv_file(dir.path() / "h.kv", key());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->dtype, DType::kF16);
  EXPECT_EQ(back->pool, DType::kF32);
  for (size_t i = 0; i < kv.k.size(); ++i) {
    ASSERT_EQ(back->k[i], f16_to_f32(f32_to_f16(kv.k[i])));
    ASSERT_EQ(back->v[i], f16_to_f32(f32_to_f16(kv.v[i])));
    ASSERT_NEAR(back->k[i], kv.k[i], std::abs(kv.k[i]) / 2048 + 6e-8f);
  }
  FactKv big = kv;
  big.v[3] = 70000.0f;  // beyond f16's largest finite value: the file stays f32
  EXPECT_EQ(kv_file_dtype(DType::kF32, big), DType::kF32);
  big.v[3] = -65504.0f;
  EXPECT_EQ(kv_file_dtype(DType::kF32, big), DType::kF16);
  big.k[0] = std::nanf("");
  EXPECT_EQ(kv_file_dtype(DType::kF32, big), DType::kF32);
}

TEST(KvFile, EveryMismatchOrDamageReadsAsNoFile) {
  TempDir dir;
  const auto p = dir.path() / "a.kv";
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    write_kv_file(p, key(), random_kv(5, dt, true));
    ASSERT_TRUE(read_kv_file(p, key()));
    for (int field = 0; field < 7; ++field) {
      KvFileKey k = key();
      if (field == 0) k.fingerprint ^= 1;
      if (field == 1) k.fact_id += 1;
      if (field == 2) k.version += 1;
      if (field == 3) k.window += 1;
      if (field == 4) k.num_layers += 1;
      if (field == 5) k.kv_size -= 1;
      if (field == 6) k.window_hash ^= 1;
      EXPECT_FALSE(read_kv_file(p, k)) << "field " << field;
    }
    EXPECT_FALSE(read_kv_file(dir.path() / "missing.kv", key()));
    const std::string bytes = [&] {
      std::ifstream f(p, std::ios::binary);
      return std::string((std::istreambuf_iterator<char>(f)), {});
    }();
    auto rewrite = [&](const std::string& b) { std::ofstream(p, std::ios::binary | std::ios::trunc) << b; };
    rewrite(bytes.substr(0, bytes.size() - 1));  // truncated
    EXPECT_FALSE(read_kv_file(p, key()));
    rewrite(bytes + "x");  // trailing bytes
    EXPECT_FALSE(read_kv_file(p, key()));
    rewrite(bytes);
    patch(p, 100, static_cast<char>(bytes[100] ^ 0x21));  // a payload byte
    EXPECT_FALSE(read_kv_file(p, key()));
    rewrite(bytes);
    patch(p, 4, 1);  // format 1 (the f32-only format before dtypes)
    EXPECT_FALSE(read_kv_file(p, key()));
    rewrite(bytes);
    patch(p, 56, 7);  // an unknown dtype (the header's u32 at byte 56)
    EXPECT_FALSE(read_kv_file(p, key()));
    rewrite(bytes);
    patch(p, 60, 7);  // an unknown pool dtype (byte 60)
    EXPECT_FALSE(read_kv_file(p, key()));
    rewrite(bytes);
    EXPECT_TRUE(read_kv_file(p, key()));
  }
}
