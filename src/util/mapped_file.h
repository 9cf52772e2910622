// A read-only memory-mapped file. Shared by weight loaders; tensors hold a shared_ptr to it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace inferscale {

class MappedFile {
 public:
  // Throws Error(kNotFound) when the file cannot be opened, naming the path.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace inferscale
