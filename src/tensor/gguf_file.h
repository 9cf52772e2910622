// GGUF v3 reader (below the tokenizer, which reads GGUF vocabularies, and the model loaders,
// which read its tensors): metadata key/values, the tokenizer vocabulary arrays and tensors as views into
// the memory-mapped file. Only what the supported models need: F32/F16/BF16 tensors and the block
// types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, kept as raw blocks (a view of the file, in a
// block-quantized DType: HostTensor::to_f32 dequantizes). Other types (IQ*, TQ*, Q8_1, Q8_K,
// MXFP4, the repacked Q4_0_4_4 ...) are refused by name.
//
// File layout (little-endian; v2 has the same layout):
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv x (string key, u32 type, value)
//   | n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset)
//   | padding to general.alignment (default 32) | data area (tensor offsets are relative to it)
// A string is u64 length + bytes; an array is u32 element type + u64 count + elements.
// Every length and offset is checked against the file size before it is used.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "tensor/host_tensor.h"

namespace inferscale {

class MappedFile;

struct GgufArray;  // an array whose elements are arrays (rare; e.g. nested merges or ranges)

// A metadata value: unsigned integer types -> uint64_t, signed -> int64_t, float32/64 -> double
// (a float32 scalar through its shortest decimal form: 1e-5f reads as 1e-5), bool, string. Arrays are kept whole (the vocabulary lives in them): of strings, of floats, of
// integers or bools (-> int64_t), or of arrays (-> GgufArray, recursively).
using GgufValue = std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<std::string>,
                               std::vector<double>, std::vector<int64_t>, std::shared_ptr<const GgufArray>>;

struct GgufArray {
  std::vector<GgufValue> items;  // each an array value
};

class GgufFile {
 public:
  // Throws kNotFound (cannot open), kInvalidInput naming the problem (bad magic, truncation, bad
  // offsets) or kUnsupported (version, tensor type: naming the type and the tensor).
  static GgufFile open(const std::string& path);

  // The header and metadata only: tensor infos are not read (tensors() is empty, header_size()
  // ends with the metadata), so any tensor type will do. For readers of the vocabulary and chat
  // template (load_tokenizer). Throws as open() does for the part it reads.
  static GgufFile open_metadata(const std::string& path);

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  const GgufValue& value(const std::string& key) const;  // kInvalidInput naming the key when absent
  // Typed getters; throw kInvalidInput naming the key when absent or of another type.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;     // any integer type
  double get_float(const std::string& key) const;    // any float or integer type
  bool get_bool(const std::string& key) const;
  const std::vector<std::string>& get_strings(const std::string& key) const;
  std::vector<double> get_floats(const std::string& key) const;  // float or integer arrays
  std::vector<int64_t> get_ints(const std::string& key) const;
  const GgufArray& get_arrays(const std::string& key) const;     // an array of arrays
  // Number of elements of any array value (kInvalidInput when not an array).
  size_t array_size(const std::string& key) const;

  // Tensor views, shape in row-major order (GGUF's ne[] reversed: [ne1, ne0] for a matrix).
  const std::map<std::string, HostTensor>& tensors() const { return tensors_; }
  bool has_tensor(const std::string& name) const { return tensors_.count(name) != 0; }
  const HostTensor& tensor(const std::string& name) const;  // kNotFound naming it
  uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }
  size_t file_size() const;
  // Bytes before the data area: header, metadata and tensor infos (for fingerprints).
  size_t header_size() const { return data_offset_; }
  const uint8_t* header_bytes() const;

 private:
  friend class GgufParser;
  std::string path_;
  uint32_t version_ = 0;
  size_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::map<std::string, HostTensor> tensors_;
  std::shared_ptr<MappedFile> file_;
};

// The ggml type name of a GGUF tensor type id ("Q4_K", "type 77" when unknown).
std::string gguf_type_name(uint32_t type);
// The tensor types GgufFile reads, by ggml name: "F32, F16, BF16, Q4_0, ...".
std::string gguf_supported_types();

}  // namespace inferscale
