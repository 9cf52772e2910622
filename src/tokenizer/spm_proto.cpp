#include "tokenizer/spm_proto.h"

#include <cstdint>

#include "util/check.h"

namespace inferscale {
namespace {

constexpr uint32_t kNormalizerSpec = 3;  // ModelProto field
constexpr uint32_t kAddDummyPrefix = 3;  // NormalizerSpec field

struct Reader {
  std::string_view s;
  size_t pos = 0;
  const std::string& source;

  [[noreturn]] void fail() const { IS_THROW(kInvalidInput, "{}: malformed SentencePiece model (at byte {})", source, pos); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= s.size()) fail();
      const auto b = static_cast<uint8_t>(s[pos++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail();
  }
  // Skips the payload of a field of wire type `wt`; returns the payload's [begin, end).
  std::pair<size_t, size_t> payload(uint32_t wt) {
    const size_t begin = pos;
    switch (wt) {
      case 0: varint(); break;
      case 1: pos += 8; break;
      case 2: {
        const uint64_t n = varint();
        if (n > s.size() - pos) fail();
        pos += n;
        return {pos - n, pos};
      }
      case 5: pos += 4; break;
      default: fail();
    }
    if (pos > s.size()) fail();
    return {begin, pos};
  }
};

void put_varint(uint64_t v, std::string& out) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

// The NormalizerSpec bytes with add_dummy_prefix replaced.
std::string patch_normalizer(std::string_view spec, bool value, bool& previous, const std::string& source) {
  Reader r{spec, 0, source};
  std::string out;
  while (r.pos < spec.size()) {
    const size_t start = r.pos;
    const uint64_t tag = r.varint();
    const auto [b, e] = r.payload(static_cast<uint32_t>(tag & 7));
    if ((tag >> 3) == kAddDummyPrefix && (tag & 7) == 0) {
      Reader v{spec.substr(b, e - b), 0, source};
      previous = v.varint() != 0;
      continue;  // dropped; written once below
    }
    out.append(spec.substr(start, r.pos - start));
  }
  put_varint((kAddDummyPrefix << 3) | 0, out);
  put_varint(value ? 1 : 0, out);
  return out;
}

}  // namespace

std::string spm_set_add_dummy_prefix(std::string_view proto, bool value, bool& previous, const std::string& source) {
  previous = true;  // the proto default
  Reader r{proto, 0, source};
  std::string out;
  out.reserve(proto.size() + 8);
  bool patched = false;
  while (r.pos < proto.size()) {
    const size_t start = r.pos;
    const uint64_t tag = r.varint();
    const auto [b, e] = r.payload(static_cast<uint32_t>(tag & 7));
    if ((tag >> 3) == kNormalizerSpec && (tag & 7) == 2 && !patched) {
      const std::string spec = patch_normalizer(proto.substr(b, e - b), value, previous, source);
      put_varint((kNormalizerSpec << 3) | 2, out);
      put_varint(spec.size(), out);
      out += spec;
      patched = true;
      continue;
    }
    out.append(proto.substr(start, r.pos - start));
  }
  if (!patched) {
    const std::string spec = patch_normalizer({}, value, previous, source);
    put_varint((kNormalizerSpec << 3) | 2, out);
    put_varint(spec.size(), out);
    out += spec;
  }
  return out;
}

}  // namespace inferscale
