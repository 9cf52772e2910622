// Hugging Face tokenizer.json (BPE and WordPiece models, normalizers, pre-tokenizers, added
// tokens, post-processors), loaded as load_tokenizer loads one, then used.
#include "fuzz_input.h"
#include "fuzz_use.h"

using namespace inferscale;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::as_file(data, size, "-tokenizer.json");
  fuzz::expect_clear_error([&] { fuzz::use_tokenizer_file(path); });
  return 0;
}
