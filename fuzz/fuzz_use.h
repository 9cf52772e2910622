// What the targets do with what a parser returned, as the engine would use it: read every byte
// of a tensor (and convert a small one to f32, which dequantizes block types), run a tokenizer
// both ways.
#pragma once
#include <cstdint>

#include "tensor/host_tensor.h"
#include "tokenizer/load_tokenizer.h"

namespace inferscale::fuzz {

inline void use_tensor(const HostTensor& t) {
  const size_t n = t.nbytes();
  volatile uint8_t sink = 0;
  if (n > 0) sink = sink + static_cast<const uint8_t*>(t.data)[0] + static_cast<const uint8_t*>(t.data)[n - 1];
  if (t.numel() <= (int64_t{1} << 16)) t.to_f32();
}

// Loads the tokenizer file at `path` as load_tokenizer does for a model, then encodes and decodes.
inline void use_tokenizer_file(const std::string& path) {
  const LoadedTokenizer t = load_tokenizer(path);
  const auto ids = t.tokenizer->encode("Hello, world! 123 <|im_start|> <s> caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87", {.add_special = true});
  t.tokenizer->decode(ids);
  t.tokenizer->decode(ids, /*skip_special=*/false);
}

}  // namespace inferscale::fuzz
