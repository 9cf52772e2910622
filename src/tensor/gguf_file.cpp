#include "tensor/gguf_file.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "tensor/byte_spans.h"
#include "util/check.h"
#include "util/mapped_file.h"

namespace inferscale {

namespace {

enum GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;

// Size in bytes of a scalar metadata type (0 for string/array/unknown).
size_t scalar_size(uint32_t t) {
  switch (t) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

// A float32 metadata value as the double of its shortest decimal form: a file's 1e-5f reads as 1e-5,
// the value its writer meant, rather than 9.99999974e-06.
double widen_f32(float x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  double d = x;
  std::from_chars(buf, r.ptr, d);
  return d;
}

// The ggml tensor types we read, by their GGUF type id (ggml_type), and the dtype each becomes.
struct TensorType {
  uint32_t id;
  DType dtype;
};
constexpr TensorType kTensorTypes[] = {
    {0, DType::kF32},    {1, DType::kF16},    {30, DType::kBF16},  {2, DType::kQ4_0},  {3, DType::kQ4_1},
    {6, DType::kQ5_0},   {7, DType::kQ5_1},   {8, DType::kQ8_0},   {10, DType::kQ2_K}, {11, DType::kQ3_K},
    {12, DType::kQ4_K},  {13, DType::kQ5_K},  {14, DType::kQ6_K},
};

}  // namespace

std::string gguf_supported_types() {
  std::string s;
  for (const TensorType& t : kTensorTypes) s += (s.empty() ? "" : ", ") + gguf_type_name(t.id);
  return s;
}

std::string gguf_type_name(uint32_t type) {
  static const char* const kNames[] = {
      "F32",  "F16",  "Q4_0", "Q4_1",    "Q4_2",   "Q4_3",    "Q5_0",  "Q5_1",   "Q8_0",   "Q8_1",
      "Q2_K", "Q3_K", "Q4_K", "Q5_K",    "Q6_K",   "Q8_K",    "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8",  "I16",     "I32",   "I64",    "F64",    "IQ1_M",
      "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8",
      "MXFP4", "NVFP4", "Q1_0"};
  if (type < std::size(kNames)) return kNames[type];
  return "type " + std::to_string(type);
}

// Reads the file front to back; every read is bounds-checked, so a truncated or lying file ends in
// an Error naming what was being read and where.
class GgufParser {
 public:
  GgufParser(GgufFile& f) : f_(f), p_(f.file_->data()), size_(f.file_->size()) {}

  static GgufFile read(const std::string& path, bool metadata_only) {
    GgufFile f;
    f.path_ = path;
    f.file_ = MappedFile::open(path);
    GgufParser(f).parse(metadata_only);
    return f;
  }

  // metadata_only: stop after the key/values (GgufFile::open_metadata).
  void parse(bool metadata_only) {
    IS_REQUIRE(size_ >= 4 && read<uint32_t>("magic") == kMagic, kInvalidInput, "{}: not a GGUF file (bad magic)",
               f_.path_);
    f_.version_ = read<uint32_t>("version");
    IS_REQUIRE(f_.version_ == 2 || f_.version_ == 3, kUnsupported,
               "{}: unsupported GGUF version {} (supported: 2, 3; big-endian files are not supported)", f_.path_,
               f_.version_);
    const uint64_t n_tensors = read<uint64_t>("tensor count");
    const uint64_t n_kv = read<uint64_t>("metadata count");
    // Each key/value takes at least 13 bytes and each tensor info at least 28: bound the counts
    // by what is left before allocating anything.
    IS_REQUIRE(n_kv <= remaining() / 13, kInvalidInput, "{}: metadata count {} does not fit in the file", f_.path_, n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key = read_string("metadata key");
      const uint32_t type = read<uint32_t>("metadata type");
      GgufValue v = read_value(type, key, 0);
      IS_REQUIRE(f_.metadata_.emplace(key, std::move(v)).second, kInvalidInput, "{}: duplicate metadata key '{}'",
                 f_.path_, key);
    }
    if (metadata_only) {
      f_.data_offset_ = pos_;
      return;
    }
    IS_REQUIRE(n_tensors <= remaining() / 28, kInvalidInput, "{}: tensor count {} does not fit in the file", f_.path_,
               n_tensors);
    struct Info {
      std::string name;
      std::vector<int64_t> shape;  // row-major
      uint32_t type;
      uint64_t offset;
    };
    std::vector<Info> infos;
    for (uint64_t i = 0; i < n_tensors; ++i) {
      Info t;
      t.name = read_string("tensor name");
      const uint32_t n_dims = read<uint32_t>("tensor dims");
      IS_REQUIRE(n_dims >= 1 && n_dims <= kMaxDims, kInvalidInput, "{}: tensor '{}' has {} dimensions (1 to 4 allowed)",
                 f_.path_, t.name, n_dims);
      std::vector<int64_t> ne(n_dims);
      uint64_t numel = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t n = read<uint64_t>("tensor shape");
        IS_REQUIRE(n > 0 && numel <= (uint64_t{1} << 60) / n, kInvalidInput, "{}: tensor '{}' has a bad shape",
                   f_.path_, t.name);
        numel *= n;
        ne[d] = static_cast<int64_t>(n);
      }
      t.shape.assign(ne.rbegin(), ne.rend());  // ne[0] varies fastest
      t.type = read<uint32_t>("tensor type");
      t.offset = read<uint64_t>("tensor offset");
      infos.push_back(std::move(t));
    }

    uint64_t alignment = 32;
    if (f_.has("general.alignment")) {
      alignment = static_cast<uint64_t>(f_.get_int("general.alignment"));
      IS_REQUIRE(alignment > 0 && (alignment & (alignment - 1)) == 0 && alignment <= (1u << 20), kInvalidInput,
                 "{}: general.alignment {} is not a power of two", f_.path_, alignment);
    }
    // A file without tensors (vocabulary only) may end right after its metadata.
    const uint64_t data = infos.empty() ? pos_ : (pos_ + alignment - 1) / alignment * alignment;
    IS_REQUIRE(data <= size_, kInvalidInput, "{}: truncated before the tensor data", f_.path_);
    f_.data_offset_ = static_cast<size_t>(data);

    std::vector<ByteSpan> spans;
    for (Info& t : infos) {
      const TensorType* tt = std::find_if(std::begin(kTensorTypes), std::end(kTensorTypes),
                                          [&](const TensorType& x) { return x.id == t.type; });
      IS_REQUIRE(tt != std::end(kTensorTypes), kUnsupported, "{}: tensor '{}' has type {}, which is not supported ({})",
                 f_.path_, t.name, gguf_type_name(t.type), "supported: " + gguf_supported_types());
      const DType dt = tt->dtype;
      const int64_t block = dtype_block(dt).elems;
      IS_REQUIRE(t.shape.back() % block == 0, kInvalidInput,
                 "{}: tensor '{}' of type {} has rows of {} values, not a multiple of its {}-value blocks", f_.path_,
                 t.name, gguf_type_name(t.type), t.shape.back(), block);
      IS_REQUIRE(t.offset % alignment == 0, kInvalidInput, "{}: tensor '{}' offset {} is not aligned to {}", f_.path_,
                 t.name, t.offset, alignment);
      HostTensor view = HostTensor::view(dt, t.shape, nullptr);
      const uint64_t nbytes = view.nbytes();
      IS_REQUIRE(t.offset <= size_ - data && nbytes <= size_ - data - t.offset, kInvalidInput,
                 "{}: tensor '{}' data [{}, {}) runs past the end of the file ({} bytes)", f_.path_, t.name,
                 data + t.offset, data + t.offset + nbytes, size_);
      auto* ptr = const_cast<uint8_t*>(p_ + data + t.offset);
      view.data = ptr;
      view.owner = std::shared_ptr<void>(f_.file_, ptr);  // keeps the mapping alive
      spans.push_back({static_cast<size_t>(t.offset), static_cast<size_t>(t.offset + nbytes), t.name});
      IS_REQUIRE(f_.tensors_.emplace(t.name, std::move(view)).second, kInvalidInput, "{}: duplicate tensor '{}'",
                 f_.path_, t.name);
    }
    check_no_overlap(std::move(spans), f_.path_);
  }

 private:
  size_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const char* what) {
    IS_REQUIRE(n <= remaining(), kInvalidInput, "{}: truncated while reading {} at byte {} (file is {} bytes)",
               f_.path_, what, pos_, size_);
  }

  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

  // One scalar as the widest type of its kind.
  GgufValue read_scalar(uint32_t type) {
    switch (type) {
      case kU8: return uint64_t{read<uint8_t>("value")};
      case kU16: return uint64_t{read<uint16_t>("value")};
      case kU32: return uint64_t{read<uint32_t>("value")};
      case kU64: return read<uint64_t>("value");
      case kI8: return int64_t{read<int8_t>("value")};
      case kI16: return int64_t{read<int16_t>("value")};
      case kI32: return int64_t{read<int32_t>("value")};
      case kI64: return read<int64_t>("value");
      case kF32: return widen_f32(read<float>("value"));
      case kF64: return read<double>("value");
      case kBool: {
        const uint8_t b = read<uint8_t>("value");
        IS_REQUIRE(b <= 1, kInvalidInput, "{}: bool value {} at byte {}", f_.path_, b, pos_ - 1);
        return b == 1;
      }
      default: IS_THROW(kInternal, "not a scalar type {}", type);
    }
  }

  GgufValue read_value(uint32_t type, const std::string& key, int depth) {
    if (type == kString) return read_string("string value");
    if (type != kArray) {
      IS_REQUIRE(scalar_size(type) > 0, kInvalidInput, "{}: metadata '{}' has unknown value type {}", f_.path_, key,
                 type);
      return read_scalar(type);
    }
    IS_REQUIRE(depth < kMaxArrayDepth, kInvalidInput, "{}: metadata '{}' nests arrays deeper than {}", f_.path_, key,
               kMaxArrayDepth);
    const uint32_t elem = read<uint32_t>("array type");
    const uint64_t n = read<uint64_t>("array length");
    // Smallest encoding of one element: a string or an array needs at least its 8/12-byte header.
    const size_t min_elem = elem == kString ? 8 : elem == kArray ? 12 : scalar_size(elem);
    IS_REQUIRE(min_elem > 0, kInvalidInput, "{}: metadata '{}' has unknown array element type {}", f_.path_, key, elem);
    IS_REQUIRE(n <= remaining() / min_elem, kInvalidInput, "{}: truncated in array '{}' ({} elements announced)",
               f_.path_, key, n);
    switch (elem) {
      case kString: {
        std::vector<std::string> v;
        v.reserve(static_cast<size_t>(n));
        for (uint64_t i = 0; i < n; ++i) v.push_back(read_string("string array"));
        return v;
      }
      case kF32:
      case kF64: {
        std::vector<double> v(static_cast<size_t>(n));
        for (auto& x : v) x = std::get<double>(read_scalar(elem));
        return v;
      }
      case kArray: {
        auto arr = std::make_shared<GgufArray>();
        arr->items.reserve(static_cast<size_t>(n));
        for (uint64_t i = 0; i < n; ++i) arr->items.push_back(read_value(kArray, key, depth + 1));
        return std::shared_ptr<const GgufArray>(std::move(arr));
      }
      default: {  // integers and bools
        std::vector<int64_t> v(static_cast<size_t>(n));
        for (auto& x : v) {
          const GgufValue s = read_scalar(elem);
          if (const auto* u = std::get_if<uint64_t>(&s)) {
            IS_REQUIRE(*u <= static_cast<uint64_t>(INT64_MAX), kUnsupported,
                       "{}: metadata '{}' holds a u64 beyond the int64 range", f_.path_, key);
            x = static_cast<int64_t>(*u);
          } else if (const auto* b = std::get_if<bool>(&s)) {
            x = *b;
          } else {
            x = std::get<int64_t>(s);
          }
        }
        return v;
      }
    }
  }

  GgufFile& f_;
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
};

GgufFile GgufFile::open(const std::string& path) { return GgufParser::read(path, false); }
GgufFile GgufFile::open_metadata(const std::string& path) { return GgufParser::read(path, true); }

size_t GgufFile::file_size() const { return file_->size(); }
const uint8_t* GgufFile::header_bytes() const { return file_->data(); }

namespace {
const char* value_kind(const GgufValue& v) {
  static const char* const kKinds[] = {"unsigned integer", "integer",          "float",
                                       "bool",             "string",           "string array",
                                       "float array",      "integer array",    "array of arrays"};
  return kKinds[v.index()];
}
}  // namespace

const GgufValue& GgufFile::value(const std::string& key) const {
  auto it = metadata_.find(key);
  IS_REQUIRE(it != metadata_.end(), kInvalidInput, "{}: missing GGUF metadata key '{}'", path_, key);
  return it->second;
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v_ = value(key);
  const auto* s = std::get_if<std::string>(&v_);
  IS_REQUIRE(s, kInvalidInput, "{}: GGUF metadata '{}' is a {}, expected a string", path_, key, value_kind(v_));
  return *s;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v_ = value(key);
  if (const auto* i = std::get_if<int64_t>(&v_)) return *i;
  const auto* u = std::get_if<uint64_t>(&v_);
  IS_REQUIRE(u, kInvalidInput, "{}: GGUF metadata '{}' is a {}, expected an integer", path_, key, value_kind(v_));
  IS_REQUIRE(*u <= static_cast<uint64_t>(INT64_MAX), kInvalidInput, "{}: GGUF metadata '{}' = {} is out of range",
             path_, key, *u);
  return static_cast<int64_t>(*u);
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v_ = value(key);
  if (const auto* d = std::get_if<double>(&v_)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v_)) return static_cast<double>(*i);
  const auto* u = std::get_if<uint64_t>(&v_);
  IS_REQUIRE(u, kInvalidInput, "{}: GGUF metadata '{}' is a {}, expected a number", path_, key, value_kind(v_));
  return static_cast<double>(*u);
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue& v_ = value(key);
  const auto* b = std::get_if<bool>(&v_);
  IS_REQUIRE(b, kInvalidInput, "{}: GGUF metadata '{}' is a {}, expected a bool", path_, key, value_kind(v_));
  return *b;
}

const std::vector<std::string>& GgufFile::get_strings(const std::string& key) const {
  const GgufValue& v_ = value(key);
  const auto* s = std::get_if<std::vector<std::string>>(&v_);
  IS_REQUIRE(s, kInvalidInput, "{}: GGUF metadata '{}' is a {}, expected a string array", path_, key, value_kind(v_));
  return *s;
}

std::vector<double> GgufFile::get_floats(const std::string& key) const {
  const GgufValue& v_ = value(key);
  if (const auto* d = std::get_if<std::vector<double>>(&v_)) return *d;
  const auto* i = std::get_if<std::vector<int64_t>>(&v_);
  IS_REQUIRE(i, kInvalidInput, "{}: GGUF metadata '{}' is a {}, expected a number array", path_, key, value_kind(v_));
  return {i->begin(), i->end()};
}

std::vector<int64_t> GgufFile::get_ints(const std::string& key) const {
  const GgufValue& v_ = value(key);
  const auto* i = std::get_if<std::vector<int64_t>>(&v_);
  IS_REQUIRE(i, kInvalidInput, "{}: GGUF metadata '{}' is a {}, expected an integer array", path_, key,
             value_kind(v_));
  return *i;
}

const GgufArray& GgufFile::get_arrays(const std::string& key) const {
  const GgufValue& v_ = value(key);
  const auto* a = std::get_if<std::shared_ptr<const GgufArray>>(&v_);
  IS_REQUIRE(a, kInvalidInput, "{}: GGUF metadata '{}' is a {}, expected an array of arrays", path_, key,
             value_kind(v_));
  return **a;
}

size_t GgufFile::array_size(const std::string& key) const {
  const GgufValue& v_ = value(key);
  return std::visit(
      [&](const auto& x) -> size_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<double>> ||
                      std::is_same_v<T, std::vector<int64_t>>) {
          return x.size();
        } else if constexpr (std::is_same_v<T, std::shared_ptr<const GgufArray>>) {
          return x->items.size();
        } else {
          IS_THROW(kInvalidInput, "{}: GGUF metadata '{}' is a {}, expected an array", path_, key, value_kind(v_));
        }
      },
      v_);
}

const HostTensor& GgufFile::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  IS_REQUIRE(it != tensors_.end(), kNotFound, "tensor '{}' not found in {}", name, path_);
  return it->second;
}

}  // namespace inferscale
