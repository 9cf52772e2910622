// What every fuzz target shares. A target feeds one input to a parser and lets only the errors a
// caller is promised through: inferscale::Error (a typed, named failure). Anything else that
// escapes (a std::out_of_range, a JSON library's exception) ends the run as a crash, as do the
// sanitizers' reports, a timeout or an allocation past libFuzzer's -rss_limit_mb.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "util/check.h"

namespace inferscale::fuzz {

inline std::string_view text(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

// The input as a file, for parsers that read paths (model files, KV files): one file per process,
// rewritten for each input, in $FUZZ_TMPDIR (default /dev/shm when present, else /tmp).
inline const std::string& as_file(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path = [&] {
    const char* dir = std::getenv("FUZZ_TMPDIR");
    std::string d = dir ? dir : (std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp");
    return d + "/inferscale-fuzz-" + std::to_string(getpid()) + suffix;
  }();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

// A file holding `text` (a keys file a target's server reads), made once per call under /tmp.
inline std::string temp_file(const char* prefix, std::string_view text) {
  std::string path = std::string("/tmp/") + prefix + "-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) std::abort();
  if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) std::abort();
  close(fd);
  return path;
}

// Runs `parse`; a typed Error is the promised outcome for bad input.
template <class F>
void expect_clear_error(F&& parse) {
  try {
    parse();
  } catch (const Error&) {
  }
}

}  // namespace inferscale::fuzz
