// API keys (server/api_keys.h) and the auth layer (server/auth.h) without a server: the key file's
// format and its errors, lookups, reloads that keep the old keys when the new file is bad, every
// way a request presents (or fails to present) a key, and the loopback check behind the start-up
// warning.
#include <gtest/gtest.h>

#include <fstream>

#include "server/api_keys.h"
#include "server/auth.h"
#include "server/tenant.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using namespace inferscale::server;
using inferscale::testing::expect_error;
using inferscale::testing::TempDir;

namespace {

std::string hex(const KeyDigest& d) {
  std::string s;
  for (unsigned char c : d) s += fmt::format("{:02x}", c);
  return s;
}

void write(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
}

}  // namespace

TEST(ApiKeys, Sha256MatchesTheStandardVectors) {
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(ApiKeys, FileFormat) {
  const std::string text = "# keys of the staging cluster\n"
                           "\n"
                           "key-acme acme\n"
                           "\tkey-acme-2\t\tacme   # a second key of acme\r\n"
                           "sha256:" + hex(sha256("key-globex")) + " globex\n"
                           "SHA256:00 x\n";  // the prefix is case-sensitive: this is a literal key
  const std::vector<ApiKeyEntry> e = parse_api_keys(text, "keys.txt");
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].digest, sha256("key-acme"));
  EXPECT_EQ(e[0].tenant, "acme");
  EXPECT_EQ(e[1].digest, sha256("key-acme-2"));
  EXPECT_EQ(e[1].tenant, "acme");
  EXPECT_EQ(e[2].digest, sha256("key-globex"));
  EXPECT_EQ(e[2].tenant, "globex");
  EXPECT_EQ(e[3].digest, sha256("SHA256:00"));
  // Upper-case hex digits are digits too.
  std::string upper = hex(sha256("k"));
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(parse_api_keys("sha256:" + upper + " t", "f").at(0).digest, sha256("k"));
  EXPECT_TRUE(parse_api_keys("", "f").empty());
  EXPECT_TRUE(parse_api_keys("# nothing\n\n   \n", "f").empty());
}

TEST(ApiKeys, BadLinesNameTheFileAndLine) {
  const std::string d = hex(sha256("dup"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ok t\nlonely\n", "keys.txt:2: expected 'KEY TENANT', got 1 field"},
      {"a b c\n", "keys.txt:1: expected 'KEY TENANT', got 3 fields"},
      {"sha256:abc t\n", "keys.txt:1: 'sha256:' must be followed by 64 hex digits, got 3"},
      {"sha256:" + std::string(63, 'a') + "g t\n", "keys.txt:1: 'sha256:' must be followed by 64 hex digits"},
      {"dup t\n\nsha256:" + d + " u\n", "keys.txt:3: the same key as line 1"},
      {"k " + std::string(300, 't') + "\n", "keys.txt:1: the tenant is 300 bytes"},
      {"k\x01y t\n", "keys.txt:1: a key must be printable ASCII"},
      {"k\xc3\xa9 t\n", "keys.txt:1: a key must be printable ASCII"},
  };
  for (const auto& c : cases)
    expect_error([&] { parse_api_keys(c.first, "keys.txt"); }, ErrorKind::kInvalidInput, c.second);
}

TEST(ApiKeys, LookupAndReload) {
  TempDir dir;
  const auto file = dir.path() / "keys.txt";
  write(file, "key-acme acme\nsha256:" + hex(sha256("key-globex")) + " globex\n");
  ApiKeys keys(file);
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys.tenant_of("key-acme"), "acme");
  EXPECT_EQ(keys.tenant_of("key-globex"), "globex");  // its line holds only the digest
  for (const char* wrong : {"", "key-acm", "key-acme ", "Key-acme", "key-acmex", "acme"}) EXPECT_FALSE(keys.tenant_of(wrong)) << wrong;

  // A good file: swapped in whole.
  write(file, "key-new acme\n");
  EXPECT_TRUE(keys.reload());
  EXPECT_EQ(keys.size(), 1u);
  EXPECT_FALSE(keys.tenant_of("key-acme"));
  EXPECT_EQ(keys.tenant_of("key-new"), "acme");
  // A bad file (even one bad line among good ones), or none: the keys in use stay.
  write(file, "key-newer acme\nbroken\n");
  EXPECT_FALSE(keys.reload());
  EXPECT_EQ(keys.tenant_of("key-new"), "acme");
  EXPECT_FALSE(keys.tenant_of("key-newer"));
  std::filesystem::remove(file);
  EXPECT_FALSE(keys.reload());
  EXPECT_EQ(keys.tenant_of("key-new"), "acme");
  // An empty file is a valid one: every key revoked.
  write(file, "# revoked\n");
  EXPECT_TRUE(keys.reload());
  EXPECT_EQ(keys.size(), 0u);
  EXPECT_FALSE(keys.tenant_of("key-new"));

  expect_error([&] { ApiKeys(dir.path() / "missing.txt"); }, ErrorKind::kNotFound, "cannot read the API key file");
  write(file, "x\n");
  expect_error([&] { ApiKeys bad(file); }, ErrorKind::kInvalidInput, "keys.txt:1");
}

namespace {

struct AuthCase {
  std::string name;
  std::string method, path;
  httplib::Headers headers;
  int status;        // 0: accepted
  std::string code;  // of the error
};

httplib::Request request(const AuthCase& c) {
  httplib::Request r;
  r.method = c.method;
  r.path = c.path;
  r.headers = c.headers;
  return r;
}

}  // namespace

TEST(Auth, EveryWayOfPresentingAKey) {
  TempDir dir;
  write(dir.path() / "keys.txt", "key-acme acme\nkey-globex globex\n");
  const ApiKeys keys(dir.path() / "keys.txt");
  const std::string chat = "/v1/chat/completions";
  const std::vector<AuthCase> cases = {
      {"no key", "POST", chat, {}, 401, "missing_api_key"},
      {"Bearer", "POST", chat, {{"Authorization", "Bearer key-acme"}}, 0, ""},
      {"bearer, spaces", "POST", chat, {{"Authorization", "  bearer   key-acme  "}}, 0, ""},
      {"Token (Mem0's MemoryClient)", "POST", chat, {{"Authorization", "Token key-acme"}}, 0, ""},
      {"X-API-Key (Mem0's server)", "GET", "/memories", {{"x-api-key", "key-acme"}}, 0, ""},
      {"both, the same key", "POST", chat, {{"Authorization", "Bearer key-acme"}, {"X-API-Key", "key-acme"}}, 0, ""},
      {"both, two keys", "POST", chat, {{"Authorization", "Bearer key-acme"}, {"X-API-Key", "key-globex"}}, 401,
       "invalid_api_key"},
      {"two Authorization headers", "POST", chat, {{"Authorization", "Bearer key-acme"}, {"Authorization", "Bearer key-acme"}},
       401, "invalid_api_key"},
      {"wrong key", "POST", chat, {{"Authorization", "Bearer key-acme2"}}, 401, "invalid_api_key"},
      {"Basic", "POST", chat, {{"Authorization", "Basic a2V5LWFjbWU6"}}, 401, "invalid_api_key"},
      {"a scheme without a key", "POST", chat, {{"Authorization", "Bearer"}}, 401, "invalid_api_key"},
      {"an empty X-API-Key", "POST", chat, {{"X-API-Key", ""}}, 401, "missing_api_key"},
      {"tenant header agrees", "POST", chat, {{"Authorization", "Bearer key-acme"}, {kTenantHeader, "acme"}}, 0, ""},
      {"tenant header disagrees", "POST", chat, {{"Authorization", "Bearer key-acme"}, {kTenantHeader, "globex"}}, 403,
       "tenant_mismatch"},
      {"one of two tenant headers disagrees", "POST", chat,
       {{"Authorization", "Bearer key-acme"}, {kTenantHeader, "acme"}, {kTenantHeader, "globex"}}, 403, "tenant_mismatch"},
      {"health", "GET", "/health", {}, 0, ""},
      {"health, HEAD", "HEAD", "/health", {}, 0, ""},
      {"health, POST", "POST", "/health", {}, 401, "missing_api_key"},
      {"metrics", "GET", "/metrics", {}, 401, "missing_api_key"},
      {"an unknown route", "GET", "/nowhere", {}, 401, "missing_api_key"},
  };
  for (const AuthCase& c : cases) {
    httplib::Request r = request(c);
    r.headers.emplace(kTenantFromKeyHeader, "1");  // a client's own copy is never trusted
    const std::optional<ApiError> e = authenticate(r, &keys);
    if (c.status == 0) {
      ASSERT_FALSE(e) << c.name << ": " << e->what();
      if (c.path == "/health") continue;
      EXPECT_EQ(r.get_header_value_count(kTenantHeader), 1u) << c.name;
      EXPECT_EQ(r.get_header_value(kTenantHeader), "acme") << c.name;
      EXPECT_EQ(r.get_header_value_count(kTenantFromKeyHeader), 1u) << c.name;
      continue;
    }
    ASSERT_TRUE(e) << c.name;
    EXPECT_EQ(e->status, c.status) << c.name;
    EXPECT_EQ(e->code, c.code) << c.name;
    EXPECT_EQ(std::string(e->what()).find("key-"), std::string::npos) << c.name << ": the message quotes a key: " << e->what();
  }
  // The key's tenant, whatever the client wrote.
  httplib::Request g = request({"", "POST", chat, {{"X-API-Key", "key-globex"}}, 0, ""});
  ASSERT_FALSE(authenticate(g, &keys));
  EXPECT_EQ(request_tenant(g), "globex");
}

TEST(Auth, WithoutKeysEverythingPassesAsBefore) {
  httplib::Request r = request({"", "POST", "/v1/chat/completions", {{kTenantHeader, "acme"}, {kTenantFromKeyHeader, "1"}}, 0, ""});
  EXPECT_FALSE(authenticate(r, nullptr));
  EXPECT_EQ(request_tenant(r), "acme");  // the client's header, as before
  EXPECT_FALSE(r.has_header(kTenantFromKeyHeader));  // only the layer sets it
  httplib::Request bare = request({"", "GET", "/v1/memory/users", {}, 0, ""});
  EXPECT_FALSE(authenticate(bare, nullptr));
  EXPECT_EQ(request_tenant(bare), kDefaultTenant);
}

TEST(Auth, MemoryTenantMustBeTheKeys) {
  TempDir dir;
  write(dir.path() / "keys.txt", "key-acme acme\n");
  const ApiKeys keys(dir.path() / "keys.txt");
  httplib::Request r = request({"", "POST", "/v1/chat/completions", {{"Authorization", "Bearer key-acme"}}, 0, ""});
  ASSERT_FALSE(authenticate(r, &keys));
  MemorySpec same;
  same.tenant = "acme";
  apply_tenant_header(r, same);
  EXPECT_EQ(same.tenant, "acme");
  MemorySpec none;
  apply_tenant_header(r, none);
  EXPECT_EQ(none.tenant, "acme");
  MemorySpec other;
  other.tenant = "globex";
  try {
    apply_tenant_header(r, other);
    ADD_FAILURE() << "memory.tenant of another tenant was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 403);
    EXPECT_EQ(e.code, "tenant_mismatch");
    EXPECT_EQ(e.param, "memory.tenant");
  }
  // Without keys the same conflict with a client's header stays the 400 it was.
  httplib::Request open = request({"", "POST", "/v1/chat/completions", {{kTenantHeader, "acme"}}, 0, ""});
  ASSERT_FALSE(authenticate(open, nullptr));
  try {
    apply_tenant_header(open, other);
    ADD_FAILURE() << "a conflict was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "memory.tenant");
  }
}

TEST(Auth, LoopbackHosts) {
  for (const char* h : {"localhost", "LocalHost", "127.0.0.1", "127.1.2.3", "::1", "[::1]", "::ffff:127.0.0.1"})
    EXPECT_TRUE(is_loopback_host(h)) << h;
  for (const char* h : {"0.0.0.0", "10.0.0.1", "128.0.0.1", "::", "::ffff:10.0.0.1", "example.com", "localhost.example.com", ""})
    EXPECT_FALSE(is_loopback_host(h)) << h;
}

TEST(Auth, TenantSaltsDiffer) {
  EXPECT_NE(tenant_cache_salt("acme"), tenant_cache_salt("globex"));
  EXPECT_NE(tenant_cache_salt(kDefaultTenant), 0u);
  EXPECT_EQ(tenant_cache_salt("acme"), tenant_cache_salt(std::string("acme")));
}
