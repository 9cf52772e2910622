// Helpers shared by the model-loading tests (config, rope, safetensors, GGUF, weights): fixture
// paths, a scratch directory, whole-file read/write and a check that a call throws a given Error.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>

#include "util/check.h"

namespace inferscale::testing {

inline std::string fixture(const std::string& rel) { return std::string(INFERSCALE_FIXTURES) + "/" + rel; }
inline std::string shared_data(const std::string& rel) { return std::string(INFERSCALE_SHARED_DATA) + "/" + rel; }
inline bool exists(const std::string& path) { return std::filesystem::exists(path); }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh directory under the system temp dir, removed when the object goes away.
class ScratchDir {
 public:
  ScratchDir() {
    static int counter = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("inferscale_" + std::string(info ? info->name() : "test") + "_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs f, which must throw inferscale::Error of `kind` whose message contains every part.
template <class F>
void expect_error(F&& f, ErrorKind kind, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "missing '" << p << "' in: " << e.what();
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected inferscale::Error, got std::exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected an inferscale::Error, nothing was thrown";
}

}  // namespace inferscale::testing
