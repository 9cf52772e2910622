// KV files on disk (a fact's K and V): the header against the key asked for, the dtype and the
// sizes against the file's.
#include "fuzz_input.h"
#include "memory/kv/kv_file.h"

using namespace inferscale;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::as_file(data, size, ".kv");
  // The key of the seed corpus's files (fuzz/make_corpus.py): a header that matches it gets past
  // the key check into the sizes.
  const KvFileKey key{0x1234abcd5678ef00ull, 7, 1, 2, 2, 8, 0x99};
  fuzz::expect_clear_error([&] {
    const auto kv = read_kv_file(path, key);
    if (!kv) return;
    volatile uint8_t sink = 0;
    const size_t n = kv->k.nbytes();
    if (n > 0) sink = sink + static_cast<const uint8_t*>(kv->k.data)[n - 1] + static_cast<const uint8_t*>(kv->v.data)[kv->v.nbytes() - 1];
  });
  return 0;
}
