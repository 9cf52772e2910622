// safetensors reader: tensors as HostTensor views into the memory-mapped file (no copy).
//
// File layout (all little-endian):
//   | u64 N | N bytes of JSON header | data area ...................................... |
//   0       8                        8+N
// header: {"<name>": {"dtype": "F32", "shape": [d0, d1], "data_offsets": [begin, end]}, ...,
//          "__metadata__": {...}}   offsets are relative to the data area, end exclusive.
//
// Every header entry is validated when the file is opened (offsets inside the data area, byte span
// equal to shape x dtype size, no two tensors overlapping), so a corrupt file is an Error naming the
// file and the tensor, never a read outside the mapping. A tensor whose dtype is not F32/F16/BF16 is
// refused only when asked for (kUnsupported), so a stray tensor of another type does not block a load.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/host_tensor.h"

namespace inferscale {

class MappedFile;

class SafetensorsFile {
 public:
  // Throws kNotFound (cannot open) or kInvalidInput (truncated, bad header, bad offsets), naming the file.
  static SafetensorsFile open(const std::string& path);

  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  // A view into the mapping (copied only if the data is misaligned for its dtype). Throws
  // kNotFound or kUnsupported (dtype) naming the tensor and the file.
  HostTensor get(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::string& path() const { return path_; }
  size_t file_size() const;
  // The raw JSON header (for fingerprints).
  std::string_view header() const;

 private:
  struct Entry {
    std::string dtype;  // as written, e.g. "BF16"
    std::vector<int64_t> shape;
    size_t begin = 0, end = 0;  // in the data area
  };
  std::string path_;
  std::shared_ptr<MappedFile> file_;
  size_t data_start_ = 0;  // 8 + N
  std::map<std::string, Entry> entries_;
};

// An HF checkpoint's tensors: one model.safetensors, or the shards that model.safetensors.index.json
// maps tensor names to.
class SafetensorsCheckpoint {
 public:
  // `path`: a directory holding model.safetensors or model.safetensors.index.json, an index file,
  // or a single .safetensors file. kNotFound naming the path when there is none.
  static SafetensorsCheckpoint open(const std::string& path);

  bool has(const std::string& name) const { return where_.count(name) != 0; }
  HostTensor get(const std::string& name) const;  // kNotFound naming the tensor and the checkpoint
  std::vector<std::string> names() const;
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // What was opened (index or file path), for messages.
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

}  // namespace inferscale
