// The API keys file (one key a line, with its tenant).
#include "fuzz_input.h"
#include "server/api_keys.h"

using namespace inferscale;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clear_error([&] { server::parse_api_keys(fuzz::text(data, size), "keys.txt"); });
  return 0;
}
