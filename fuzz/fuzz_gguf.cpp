// GGUF model files: the header, metadata (every value type, arrays of arrays), tensor infos with
// their types and offsets (block-quantized types included), then what the engine reads from them:
// the model config, the vocabulary and merges (make_gguf_tokenizer), and every tensor's bytes.
#include "fuzz_input.h"
#include "fuzz_use.h"
#include "model/gguf.h"
#include "tensor/gguf_file.h"
#include "tokenizer/gguf_vocab.h"

using namespace inferscale;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::as_file(data, size, ".gguf");
  fuzz::expect_clear_error([&] {
    const GgufFile f = GgufFile::open(path);
    for (const auto& [name, t] : f.tensors()) fuzz::use_tensor(t);
    fuzz::expect_clear_error([&] { config_from_gguf(f); });
    fuzz::expect_clear_error([&] {
      const auto tok = make_gguf_tokenizer(f);
      tok->decode(tok->encode("Hello, world! 123 <s> \xe4\xb8\xad\xe6\x96\x87"));
    });
  });
  return 0;
}
