// KV files: f32 round-trips exactly; a bf16 pool's KV (what a GPU pool reads back) goes through
// byte for byte in half the bytes, and an f32 pool's values stored as bf16 round to nearest even; f16 (the CPU pool's files)
// rounds to nearest even and is chosen only when every value fits; any key mismatch, an old
// format, truncation, a flipped byte or trailing bytes reads as "no file" (re-encode), never as KV.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "memory/kv/kv_file.h"
#include "util/check.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using inferscale::testing::TempDir;

namespace {

KvFileKey key() { return KvFileKey{0xfeedULL, 42, 3, 2, 3, 40}; }

// An f32 pool's KV (kv.pool kF32) stored as `dtype`; bf16_exact: values a bf16 pool could hold.
FactKv random_kv(int32_t tokens, DType dtype, bool bf16_exact) {
  FactKv kv;
  kv.num_tokens = tokens;
  kv.dtype = dtype;
  kv.pool = DType::kF32;
  const std::vector<int64_t> shape{key().num_layers, tokens, key().kv_size};
  kv.k = HostTensor::zeros(DType::kF32, shape);
  kv.v = HostTensor::zeros(DType::kF32, shape);
  std::mt19937 g(7);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (int64_t i = 0; i < kv.k.numel(); ++i) {
    float k = d(g), v = d(g);
    if (bf16_exact) k = bf16_to_f32(f32_to_bf16(k)), v = bf16_to_f32(f32_to_bf16(v));
    kv.k.as<float>()[i] = k;
    kv.v.as<float>()[i] = v;
  }
  return kv;
}

// The same values as a bf16 pool holds them (and its files store them).
FactKv as_bf16_pool(const FactKv& f32) {
  FactKv kv = f32;
  kv.pool = kv.dtype = DType::kBF16;
  kv.k = HostTensor::zeros(DType::kBF16, f32.k.shape);
  kv.v = HostTensor::zeros(DType::kBF16, f32.v.shape);
  convert_from_f32(DType::kBF16, f32.k.as<float>(), kv.k.data, static_cast<size_t>(f32.k.numel()));
  convert_from_f32(DType::kBF16, f32.v.as<float>(), kv.v.data, static_cast<size_t>(f32.v.numel()));
  return kv;
}

std::vector<float> floats(const HostTensor& t) {
  const HostTensor f = t.to_f32();
  return std::vector<float>(f.as<float>(), f.as<float>() + f.numel());
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && std::memcmp(a.data, b.data, a.nbytes()) == 0;
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
  EXPECT_TRUE(same_bytes(back->k, kv.k));
  EXPECT_TRUE(same_bytes(back->v, kv.v));
}

// A bf16 pool's KV goes to the file and back byte for byte, in half the bytes of f32, and comes
// back as bf16 (what its write_pool takes); an f32 pool's KV stored as bf16 rounds to nearest even
// and comes back as f32.
TEST(KvFile, Bf16HoldsPoolValuesExactlyInHalfTheBytes) {
  TempDir dir;
  const FactKv f32 = random_kv(9, DType::kF32, true);
  const FactKv bf = as_bf16_pool(f32);
  write_kv_file(dir.path() / "f.kv", key(), f32);
  write_kv_file(dir.path() / "b.kv", key(), bf);
  const auto back = read_kv_file(dir.path() / "b.kv", key());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->dtype, DType::kBF16);
  EXPECT_EQ(back->pool, DType::kBF16);
  EXPECT_TRUE(same_bytes(back->k, bf.k));
  EXPECT_TRUE(same_bytes(back->v, bf.v));
  EXPECT_EQ(floats(back->k), floats(f32.k));
  const auto payload = [](uintmax_t bytes) { return bytes - 72; };  // header: 72 bytes
  EXPECT_EQ(payload(std::filesystem::file_size(dir.path() / "b.kv")) * 2,
            payload(std::filesystem::file_size(dir.path() / "f.kv")));

  // An f32 pool's values that are not bf16 round to nearest even.
  const FactKv odd = random_kv(2, DType::kBF16, false);
  write_kv_file(dir.path() / "o.kv", key(), odd);
  const auto r = read_kv_file(dir.path() / "o.kv", key());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->k.dtype, DType::kF32);
  const std::vector<float> got = floats(r->k), want = floats(odd.k);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i], bf16_to_f32(f32_to_bf16(want[i])));
    EXPECT_NEAR(got[i], want[i], std::abs(want[i]) / 256);
  }
}

// KV whose dtype or shape is not the file's pool and key's is refused, not written.
TEST(KvFile, WritingKvOfAnotherDtypeOrShapeIsAnError) {
  TempDir dir;
  FactKv kv = random_kv(3, DType::kF32, false);
  kv.pool = DType::kBF16;  // says bf16, holds f32
  EXPECT_THROW(write_kv_file(dir.path() / "a.kv", key(), kv), Error);
  kv = random_kv(3, DType::kF32, false);
  kv.num_tokens = 4;
  EXPECT_THROW(write_kv_file(dir.path() / "a.kv", key(), kv), Error);
  FactKv bf = as_bf16_pool(random_kv(3, DType::kF32, true));
  bf.dtype = DType::kF16;  // a bf16 pool rounded to f16: not a pair this format makes
  EXPECT_THROW(write_kv_file(dir.path() / "a.kv", key(), bf), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "a.kv"));
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
  EXPECT_EQ(back->k.dtype, DType::kF32) << "widened for the f32 pool";
  const std::vector<float> bk = floats(back->k), bv = floats(back->v), k = floats(kv.k), v = floats(kv.v);
  for (size_t i = 0; i < k.size(); ++i) {
    ASSERT_EQ(bk[i], f16_to_f32(f32_to_f16(k[i])));
    ASSERT_EQ(bv[i], f16_to_f32(f32_to_f16(v[i])));
    ASSERT_NEAR(bk[i], k[i], std::abs(k[i]) / 2048 + 6e-8f);
  }
  FactKv big = random_kv(6, DType::kF32, false);
  big.v.as<float>()[3] = 70000.0f;  // beyond f16's largest finite value: the file stays f32
  EXPECT_EQ(kv_file_dtype(DType::kF32, big), DType::kF32);
  big.v.as<float>()[3] = -65504.0f;
  EXPECT_EQ(kv_file_dtype(DType::kF32, big), DType::kF16);
  big.k.as<float>()[0] = std::nanf("");
  EXPECT_EQ(kv_file_dtype(DType::kF32, big), DType::kF32);
}

TEST(KvFile, EveryMismatchOrDamageReadsAsNoFile) {
  TempDir dir;
  const auto p = dir.path() / "a.kv";
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    write_kv_file(p, key(), dt == DType::kBF16 ? as_bf16_pool(random_kv(5, dt, true)) : random_kv(5, dt, true));
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

// A header is checked against the file's size before anything is allocated for its payload: a
// file (another replica's directory is not trusted) whose header announces 2^20 tokens of a huge
// shape reads as no file, where it sized a buffer of 2^55 bytes from the header alone.
TEST(KvFile, AHeaderLargerThanItsFileAllocatesNothing) {
  TempDir dir;
  const auto p = dir.path() / "big.kv";
  write_kv_file(p, key(), random_kv(5, DType::kF32, true));
  std::string bytes = [&] {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), {});
  }();
  auto put_i32 = [&](size_t at, int32_t v) { std::memcpy(bytes.data() + at, &v, 4); };
  put_i32(44, 1 << 20);  // num_tokens
  put_i32(48, 4096);     // num_layers
  put_i32(52, 1 << 20);  // kv_size
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  KvFileKey huge = key();
  huge.num_layers = 4096;
  huge.kv_size = 1 << 20;
  std::optional<FactKv> got;
  EXPECT_NO_THROW(got = read_kv_file(p, huge));
  EXPECT_FALSE(got);
}
