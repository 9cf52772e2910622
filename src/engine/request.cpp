#include "engine/request.h"

#include <algorithm>

namespace inferscale {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kNone: return "";
  }
  return "";
}

int32_t InjectedSpan::num_injected() const {
  return end - start - static_cast<int32_t>(std::count(recompute.begin(), recompute.end(), uint8_t{1}));
}

int32_t Request::num_remaining() const {
  int32_t n = num_tokens() - num_computed_tokens;
  if (injected) {
    const int32_t lo = std::max(injected->start, num_computed_tokens);
    if (injected->recompute.empty()) {
      if (injected->end > lo) n -= injected->end - lo;
    } else {
      for (int32_t i = lo; i < injected->end; ++i) n -= injected->injects(i) ? 1 : 0;
    }
  }
  return n;
}

}  // namespace inferscale
