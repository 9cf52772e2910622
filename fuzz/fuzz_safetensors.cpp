// safetensors files: the 8-byte header length, the JSON header (dtypes, shapes, offsets,
// __metadata__) and the tensor table against the file's size; then every tensor read.
#include "fuzz_input.h"
#include "fuzz_use.h"
#include "model/safetensors.h"

using namespace inferscale;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::as_file(data, size, ".safetensors");
  fuzz::expect_clear_error([&] {
    const SafetensorsFile f = SafetensorsFile::open(path);
    for (const std::string& name : f.names()) fuzz::expect_clear_error([&] { fuzz::use_tensor(f.get(name)); });
  });
  return 0;
}
