#include "tensor/byte_spans.h"

#include <algorithm>

#include "util/check.h"

namespace inferscale {

void check_no_overlap(std::vector<ByteSpan> spans, const std::string& path) {
  std::erase_if(spans, [](const ByteSpan& s) { return s.end <= s.begin; });
  std::sort(spans.begin(), spans.end(), [](const ByteSpan& a, const ByteSpan& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i)
    IS_REQUIRE(spans[i].begin >= spans[i - 1].end, kInvalidInput, "{}: tensors '{}' and '{}' overlap in the data area",
               path, spans[i - 1].name, spans[i].name);
}

}  // namespace inferscale
