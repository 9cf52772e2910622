// GGUF v3 reader: metadata key/values, the tokenizer vocabulary arrays and tensors as views into
// the memory-mapped file. Only what Llama-family models need: F32/F16/BF16 tensors.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tensor/host_tensor.h"

namespace inferscale {

class MappedFile;

// A metadata value. Arrays of strings/numbers are kept whole (the vocabulary lives in them).
using GgufValue = std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<std::string>,
                               std::vector<double>, std::vector<int64_t>>;

class GgufFile {
 public:
  // Throws Error(kInvalidInput) naming the problem for a bad magic, version, truncation or
  // unsupported tensor type.
  static GgufFile open(const std::string& path);

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  // Typed getters; throw kInvalidInput naming the key when absent or of another type.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;     // any integer type
  double get_float(const std::string& key) const;    // any float or integer type
  bool get_bool(const std::string& key) const;
  const std::vector<std::string>& get_strings(const std::string& key) const;
  std::vector<double> get_floats(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;

  // Tensor views, shape in row-major order (GGUF's ne[] reversed: [ne1, ne0] for a matrix).
  const std::map<std::string, HostTensor>& tensors() const { return tensors_; }
  const HostTensor& tensor(const std::string& name) const;  // kNotFound naming it
  uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::map<std::string, HostTensor> tensors_;
  std::shared_ptr<MappedFile> file_;
};

}  // namespace inferscale
