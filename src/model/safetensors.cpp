#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tensor/byte_spans.h"
#include "model/json_file.h"
#include "util/check.h"
#include "util/mapped_file.h"

namespace inferscale {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The safetensors format caps the header at 100 MB; a larger length is a corrupt file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Bits per element of every dtype the format defines (0 = unknown to us: bounds-checked only).
int dtype_bits(const std::string& d) {
  static const std::map<std::string, int> bits = {
      {"F64", 64}, {"F32", 32}, {"F16", 16}, {"BF16", 16}, {"I64", 64}, {"I32", 32}, {"I16", 16}, {"I8", 8},
      {"U64", 64}, {"U32", 32}, {"U16", 16}, {"U8", 8},    {"BOOL", 8}, {"F8_E4M3", 8}, {"F8_E5M2", 8},
      {"F8_E8M0", 8}, {"C64", 64}};
  auto it = bits.find(d);
  return it == bits.end() ? 0 : it->second;
}

bool supported_dtype(const std::string& d, DType& out) {
  if (d == "F32") out = DType::kF32;
  else if (d == "F16") out = DType::kF16;
  else if (d == "BF16") out = DType::kBF16;
  else return false;
  return true;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative integer JSON value, or a kInvalidInput naming what it is.
uint64_t as_index(const json& v, const std::string& what, const std::string& path, const std::string& name) {
  IS_REQUIRE(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), kInvalidInput,
             "{}: tensor '{}': {} must be a non-negative integer, got {}", path, name, what, v.dump());
  return v.get<uint64_t>();
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.file_ = MappedFile::open(path);
  const size_t size = f.file_->size();
  IS_REQUIRE(size >= 8, kInvalidInput, "{}: truncated safetensors file ({} bytes, the header length alone takes 8)",
             path, size);
  const uint64_t n = read_u64_le(f.file_->data());
  IS_REQUIRE(n <= size - 8, kInvalidInput, "{}: header length {} runs past the end of the file ({} bytes)", path, n,
             size);
  IS_REQUIRE(n <= kMaxHeaderBytes, kInvalidInput, "{}: header length {} exceeds the format's 100 MB limit", path, n);
  f.data_start_ = 8 + static_cast<size_t>(n);
  const size_t data_size = size - f.data_start_;

  json header;
  try {
    header = json::parse(f.header());
  } catch (const json::exception& e) {
    IS_THROW(kInvalidInput, "{}: header is not valid JSON: {}", path, e.what());
  }
  IS_REQUIRE(header.is_object(), kInvalidInput, "{}: header must be a JSON object", path);

  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    IS_REQUIRE(info.is_object() && info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"),
               kInvalidInput, "{}: tensor '{}': entry needs dtype, shape and data_offsets, got {}", path, name,
               info.dump());
    Entry e;
    IS_REQUIRE(info["dtype"].is_string(), kInvalidInput, "{}: tensor '{}': dtype must be a string", path, name);
    e.dtype = info["dtype"].get<std::string>();
    IS_REQUIRE(info["shape"].is_array(), kInvalidInput, "{}: tensor '{}': shape must be a list", path, name);
    uint64_t numel = 1;
    for (const json& d : info["shape"]) {
      const uint64_t dim = as_index(d, "shape", path, name);
      IS_REQUIRE(dim == 0 || numel <= (uint64_t{1} << 62) / dim, kInvalidInput, "{}: tensor '{}': shape {} overflows",
                 path, name, info["shape"].dump());
      numel *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const json& off = info["data_offsets"];
    IS_REQUIRE(off.is_array() && off.size() == 2, kInvalidInput,
               "{}: tensor '{}': data_offsets must be [begin, end], got {}", path, name, off.dump());
    const uint64_t begin = as_index(off[0], "data_offsets", path, name);
    const uint64_t end = as_index(off[1], "data_offsets", path, name);
    IS_REQUIRE(begin <= end && end <= data_size, kInvalidInput,
               "{}: tensor '{}': data_offsets [{}, {}] out of range (data area is {} bytes)", path, name, begin, end,
               data_size);
    if (const int bits = dtype_bits(e.dtype); bits > 0) {
      // Every known dtype takes at least a byte, so numel <= data_size keeps the product in range.
      IS_REQUIRE(numel <= data_size, kInvalidInput, "{}: tensor '{}': shape {} is larger than the data area", path,
                 name, info["shape"].dump());
      const uint64_t want = numel * static_cast<uint64_t>(bits) / 8;
      IS_REQUIRE(end - begin == want, kInvalidInput,
                 "{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets span {}", path, name,
                 info["shape"].dump(), e.dtype, want, end - begin);
    }
    e.begin = static_cast<size_t>(begin);
    e.end = static_cast<size_t>(end);
    f.entries_.emplace(name, std::move(e));
  }

  std::vector<ByteSpan> spans;
  for (const auto& [name, e] : f.entries_) spans.push_back({e.begin, e.end, name});
  check_no_overlap(std::move(spans), path);
  return f;
}

HostTensor SafetensorsFile::get(const std::string& name) const {
  auto it = entries_.find(name);
  IS_REQUIRE(it != entries_.end(), kNotFound, "tensor '{}' not found in {}", name, path_);
  const Entry& e = it->second;
  DType dt;
  IS_REQUIRE(supported_dtype(e.dtype, dt), kUnsupported,
             "tensor '{}' in {} has unsupported dtype {} (supported: F32, F16, BF16)", name, path_, e.dtype);
  const uint8_t* p = file_->data() + data_start_ + e.begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(dt) == 0) {
    // The view keeps the mapping alive (aliasing shared_ptr: owns file_, points at the bytes).
    std::shared_ptr<void> owner(file_, const_cast<uint8_t*>(p));
    return HostTensor::view(dt, e.shape, const_cast<uint8_t*>(p), std::move(owner));
  }
  // The format does not promise alignment; a misaligned tensor is copied once.
  HostTensor t = HostTensor::zeros(dt, e.shape);
  std::memcpy(t.data, p, t.nbytes());
  return t;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

size_t SafetensorsFile::file_size() const { return file_->size(); }

std::string_view SafetensorsFile::header() const {
  return {reinterpret_cast<const char*>(file_->data()) + 8, data_start_ - 8};
}

// ---- Checkpoint (single file or sharded).

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path) {
  SafetensorsCheckpoint c;
  std::string index = path;
  if (fs::is_directory(path)) {
    const fs::path single = fs::path(path) / "model.safetensors";
    const fs::path idx = fs::path(path) / "model.safetensors.index.json";
    if (fs::exists(idx)) {
      index = idx.string();
    } else {
      IS_REQUIRE(fs::exists(single), kNotFound, "no model.safetensors or model.safetensors.index.json in {}", path);
      index = single.string();
    }
  }
  c.source_ = index;
  if (index.size() < 5 || index.substr(index.size() - 5) != ".json") {
    c.files_.push_back(SafetensorsFile::open(index));
    for (const std::string& n : c.files_[0].names()) c.where_[n] = 0;
    return c;
  }

  const json j = load_json_file(index);
  IS_REQUIRE(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), kInvalidInput,
             "{}: missing 'weight_map' object", index);
  const fs::path dir = fs::path(index).parent_path();
  std::map<std::string, size_t> shard_of_file;
  for (const auto& [name, file] : j["weight_map"].items()) {
    IS_REQUIRE(file.is_string(), kInvalidInput, "{}: weight_map['{}'] must be a file name", index, name);
    const std::string shard = file.get<std::string>();
    const fs::path rel(shard);
    IS_REQUIRE(!rel.is_absolute() && std::find(rel.begin(), rel.end(), "..") == rel.end(), kInvalidInput,
               "{}: weight_map['{}'] points outside the checkpoint: {}", index, name, shard);
    auto it = shard_of_file.find(shard);
    if (it == shard_of_file.end()) {
      c.files_.push_back(SafetensorsFile::open((dir / rel).string()));
      it = shard_of_file.emplace(shard, c.files_.size() - 1).first;
    }
    IS_REQUIRE(c.files_[it->second].has(name), kNotFound, "tensor '{}' listed in {} is missing from shard {}", name,
               index, c.files_[it->second].path());
    c.where_[name] = it->second;
  }
  return c;
}

HostTensor SafetensorsCheckpoint::get(const std::string& name) const {
  auto it = where_.find(name);
  IS_REQUIRE(it != where_.end(), kNotFound, "tensor '{}' not found in {}", name, source_);
  return files_[it->second].get(name);
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

}  // namespace inferscale
