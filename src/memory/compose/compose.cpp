#include "memory/compose/compose.h"

#include <utility>
#include <vector>

#include "util/check.h"

namespace inferscale {

MemoryMode parse_memory_mode(const std::string& s) {
  if (s == "inject") return MemoryMode::kInject;
  if (s == "text") return MemoryMode::kText;
  if (s == "off") return MemoryMode::kOff;
  IS_THROW(kInvalidInput, "memory mode must be inject, text or off, not '{}'", s);
}

MemoryOrder parse_memory_order(const std::string& s) {
  if (s == "rank") return MemoryOrder::kRank;
  if (s == "time") return MemoryOrder::kTime;
  IS_THROW(kInvalidInput, "memory order must be rank or time, not '{}'", s);
}

const char* memory_mode_name(MemoryMode m) {
  switch (m) {
    case MemoryMode::kInject: return "inject";
    case MemoryMode::kText: return "text";
    case MemoryMode::kOff: return "off";
  }
  return "?";
}

void check_memory_limits(int32_t k, int32_t window, int32_t recompute, int32_t recompute_last) {
  const auto in = [](const char* name, int32_t v, int32_t max) {
    IS_REQUIRE(v >= 0 && v <= max, kInvalidInput, "memory.{} must be in 0..{}, got {}", name, max, v);
  };
  in("k", k, MemoryRequest::kMaxK);
  in("w", window, MemoryRequest::kMaxWindow);
  in("recompute", recompute, MemoryRequest::kMaxRecompute);
  in("recompute_last", recompute_last, MemoryRequest::kMaxRecomputeLast);
}

ComposedPrompt compose_tokens(const std::vector<int32_t>& prefix, const std::vector<std::vector<int32_t>>& facts,
                              const std::vector<int32_t>& suffix) {
  ComposedPrompt c;
  c.tokens = prefix;
  c.facts_start = static_cast<int32_t>(c.tokens.size());
  c.fact_offsets.push_back(0);
  for (const auto& f : facts) {
    c.tokens.insert(c.tokens.end(), f.begin(), f.end());
    c.fact_offsets.push_back(static_cast<int32_t>(c.tokens.size()) - c.facts_start);
  }
  c.facts_end = static_cast<int32_t>(c.tokens.size());
  c.tokens.insert(c.tokens.end(), suffix.begin(), suffix.end());
  return c;
}

std::string render_fact(const std::string& tmpl, const std::string& text, const std::string& speaker,
                        const std::string& date) {
  // Split into literal and placeholder parts: parts[i].second is true for a placeholder value.
  std::vector<std::pair<std::string, bool>> parts{{"", false}};
  for (size_t i = 0; i < tmpl.size(); ++i) {
    const char c = tmpl[i];
    if ((c == '{' || c == '}') && i + 1 < tmpl.size() && tmpl[i + 1] == c) {
      parts.back().first += c;
      ++i;
      continue;
    }
    if (c != '{') {
      parts.back().first += c;
      continue;
    }
    const size_t close = tmpl.find('}', i);
    IS_REQUIRE(close != std::string::npos, kInvalidInput, "fact template has an unclosed '{{' at {}", i);
    const std::string key = tmpl.substr(i + 1, close - i - 1);
    const std::string* value = key == "text" ? &text : key == "speaker" ? &speaker : key == "date" ? &date : nullptr;
    IS_REQUIRE(value != nullptr, kInvalidInput,
               "fact template has an unknown placeholder {{{}}}; use {{text}}, {{speaker}}, {{date}}", key);
    parts.emplace_back(*value, true);
    parts.emplace_back("", false);
    i = close;
  }
  // An empty value takes its decoration with it: the literal run touching it on the left back to
  // a space, and on the right up to and including a space ("[{date}] " and "{speaker}: " vanish).
  for (size_t i = 1; i + 1 < parts.size(); i += 2) {
    if (!parts[i].first.empty()) continue;
    std::string& left = parts[i - 1].first;
    const size_t sp = left.find_last_of(' ');
    left.erase(sp == std::string::npos ? 0 : sp + 1);
    std::string& right = parts[i + 1].first;
    const size_t rs = right.find(' ');
    right.erase(0, rs == std::string::npos ? right.size() : rs + 1);
  }
  std::string out;
  for (const auto& p : parts) out += p.first;
  return out;
}

}  // namespace inferscale
