// Overlap check for tensor byte ranges inside one weight file (safetensors, GGUF): a crafted header
// could otherwise alias one tensor onto another.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace inferscale {

struct ByteSpan {
  size_t begin = 0, end = 0;  // [begin, end)
  std::string name;
};

// Throws kInvalidInput naming `path` and both tensors when two non-empty spans share a byte.
void check_no_overlap(std::vector<ByteSpan> spans, const std::string& path);

}  // namespace inferscale
