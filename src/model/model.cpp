// load_model: "demo", an HF directory, a .gguf file, or a config with random weights. Each path
// builds config + weights + tokenizer and a fingerprint of everything that decides the numbers.
#include "model/model.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

#include "model/fingerprint.h"
#include "model/gguf.h"
#include "model/safetensors.h"
#include "model/weight_loader.h"
#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/load_tokenizer.h"
#include "util/check.h"

namespace inferscale {

namespace fs = std::filesystem;

namespace {

// Bumped whenever make_random_weights would give other values for the same (config, seed, dtype).
constexpr const char* kRandomWeightsVersion = "random-weights-v1";

// Files whose presence makes a directory hold a tokenizer, and every file a tokenizer load may read.
constexpr const char* kTokenizerMain[] = {"tokenizer.json", "tokenizer.model", "tokenizer.model.v3", "vocab.json"};
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",        "tokenizer.model",        "tokenizer.model.v3",
                                           "vocab.json",            "merges.txt",             "tokenizer_config.json",
                                           "special_tokens_map.json"};

struct TokenizerPick {
  std::shared_ptr<const Tokenizer> tokenizer;
  ChatTemplate chat;
};

bool holds_tokenizer(const fs::path& p) {
  if (fs::is_regular_file(p)) return true;
  for (const char* f : kTokenizerMain)
    if (fs::exists(p / f)) return true;
  return false;
}

// The tokenizer in `path` (a directory, a tokenizer file or a .gguf). Hashes every tokenizer file it
// may read (a .gguf's vocabulary is in the header its loader hashed).
TokenizerPick tokenizer_from(const fs::path& path, Fingerprinter& fp) {
  if (path.extension() != ".gguf") {
    const fs::path dir = fs::is_regular_file(path) ? path.parent_path() : path;
    if (fs::is_regular_file(path)) fp.add(path.filename().string()).add_file(path.string());
    for (const char* f : kTokenizerFiles)
      if (fs::exists(dir / f)) fp.add(f).add_file((dir / f).string());
  }
  LoadedTokenizer lt = load_tokenizer(path.string());
  return {std::move(lt.tokenizer), std::move(lt.chat)};
}

// For HF directories and configs: an explicit tokenizer path, else the directory's own tokenizer,
// else the byte tokenizer (random-weight benchmark models need no real vocabulary).
TokenizerPick pick_tokenizer(const fs::path& dir, const LoadOptions& opts, Fingerprinter& fp) {
  if (!opts.tokenizer_path.empty()) {
    IS_REQUIRE(fs::exists(opts.tokenizer_path), kNotFound, "tokenizer not found: {}", opts.tokenizer_path);
    return tokenizer_from(opts.tokenizer_path, fp);
  }
  if (holds_tokenizer(dir)) return tokenizer_from(dir, fp);
  spdlog::warn("no tokenizer in {}: using the byte tokenizer (ids 0-259), not the model's vocabulary", dir.string());
  return {std::make_shared<ByteTokenizer>(), ChatTemplate(ChatFamily::kChatML)};
}

void attach_tokenizer(Model& m, TokenizerPick pick, Fingerprinter& fp) {
  IS_CHECK(pick.tokenizer != nullptr, "tokenizer loader returned null");
  IS_REQUIRE(pick.tokenizer->vocab_size() <= m.config.vocab_size, kInvalidInput,
             "the tokenizer has {} ids but the model's vocabulary has only {}", pick.tokenizer->vocab_size(),
             m.config.vocab_size);
  fp.add(pick.tokenizer->kind());
  m.tokenizer = std::move(pick.tokenizer);
  m.chat_template = std::move(pick.chat);
}

// "a/b/" -> "b"
std::string dir_name(const fs::path& p) {
  fs::path q = p;
  if (!q.has_filename()) q = q.parent_path();
  return q.filename().string();
}

ModelWeights timed_random_weights(const ModelConfig& cfg, uint64_t seed, DType dtype) {
  const auto t0 = std::chrono::steady_clock::now();
  ModelWeights w = make_random_weights(cfg, seed, dtype);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (s > 1.0)
    spdlog::info("random weights: {:.2f} B parameters in {} made in {:.1f} s", cfg.num_parameters() / 1e9,
                 dtype_name(dtype), s);
  return w;
}

Model load_demo(const LoadOptions& opts) {
  IS_REQUIRE(opts.tokenizer_path.empty(), kInvalidInput,
             "the demo model has its own byte tokenizer; a tokenizer path cannot be used with it");
  Model m;
  m.config = demo_config();
  m.weights = timed_random_weights(m.config, opts.seed, opts.random_dtype);
  m.name = m.source = "demo";
  m.random_weights = true;
  m.sampling = llama_cpp_sampling_defaults();
  Fingerprinter fp;
  fp.add("demo").add(kRandomWeightsVersion).add(m.config.fingerprint()).add(opts.seed).add(dtype_name(opts.random_dtype));
  attach_tokenizer(m, {std::make_shared<ByteTokenizer>(), ChatTemplate(ChatFamily::kChatML)}, fp);
  m.fingerprint = fp.hex();
  return m;
}

// A config.json (or a directory holding one) with seeded random weights of its shape.
Model load_random(const fs::path& p, const LoadOptions& opts) {
  const bool is_dir = fs::is_directory(p);
  const fs::path config = is_dir ? p / "config.json" : p;
  IS_REQUIRE(fs::is_regular_file(config), kNotFound, "no config.json in {}", p.string());
  Model m;
  m.config = ModelConfig::from_hf_file(config.string());
  m.weights = timed_random_weights(m.config, opts.seed, opts.random_dtype);
  const std::string stem = config.stem().string();
  m.name = (is_dir || stem == "config" ? dir_name(config.parent_path()) : stem) + "-random";
  m.source = p.string();
  m.random_weights = true;
  m.sampling = llama_cpp_sampling_defaults();
  Fingerprinter fp;
  fp.add(kRandomWeightsVersion).add(m.config.fingerprint()).add(opts.seed).add(dtype_name(opts.random_dtype));
  attach_tokenizer(m, pick_tokenizer(config.parent_path(), opts, fp), fp);
  m.fingerprint = fp.hex();
  return m;
}

Model load_hf_dir(const fs::path& dir, const LoadOptions& opts) {
  const fs::path config = dir / "config.json";
  IS_REQUIRE(fs::is_regular_file(config), kNotFound, "no config.json in model directory {}", dir.string());
  Model m;
  m.config = ModelConfig::from_hf_file(config.string());
  const SafetensorsCheckpoint ckpt = SafetensorsCheckpoint::open(dir.string());
  m.weights = load_weights(m.config, ckpt);
  m.name = dir_name(dir);
  m.source = dir.string();
  m.sampling = llama_cpp_sampling_defaults();
  if (fs::is_regular_file(dir / "generation_config.json"))
    m.sampling = read_generation_config(dir / "generation_config.json", m.sampling);
  // Weights: each file's size and header (names, dtypes, shapes, offsets). Hashing the data itself
  // would read gigabytes at every start.
  Fingerprinter fp;
  fp.add("hf").add(m.config.fingerprint());
  for (const SafetensorsFile& f : ckpt.files()) fp.add(f.file_size()).add(f.header());
  attach_tokenizer(m, pick_tokenizer(dir, opts, fp), fp);
  m.fingerprint = fp.hex();
  return m;
}

Model load_gguf(const fs::path& path, const LoadOptions& opts) {
  const GgufFile g = GgufFile::open(path.string());
  Model m;
  m.config = config_from_gguf(g);
  m.weights = load_weights(m.config, g);
  m.name = path.stem().string();
  m.source = path.string();
  m.sampling = gguf_sampling_defaults(g, llama_cpp_sampling_defaults());
  // The header holds the metadata (vocabulary included) and every tensor's type, shape and offset.
  Fingerprinter fp;
  fp.add("gguf").add(m.config.fingerprint()).add(g.file_size());
  fp.add(std::string_view(reinterpret_cast<const char*>(g.header_bytes()), g.header_size()));
  // The vocabulary is inside the file (load_tokenizer reads it from a .gguf path); already hashed.
  const fs::path tok = opts.tokenizer_path.empty() ? path : fs::path(opts.tokenizer_path);
  IS_REQUIRE(fs::exists(tok), kNotFound, "tokenizer not found: {}", tok.string());
  attach_tokenizer(m, tokenizer_from(tok, fp), fp);
  m.fingerprint = fp.hex();
  return m;
}

}  // namespace

Model load_model(const std::string& spec, const LoadOptions& opts) {
  if (spec == "demo") return load_demo(opts);
  const fs::path p(spec);
  IS_REQUIRE(fs::exists(p), kNotFound,
             "no model at '{}' (expected \"demo\", a model directory, a .gguf file, or a config.json with random "
             "weights)",
             spec);
  if (opts.random_weights) return load_random(p, opts);
  if (fs::is_directory(p)) return load_hf_dir(p, opts);
  if (p.extension() == ".gguf") return load_gguf(p, opts);
  IS_REQUIRE(p.extension() != ".json", kInvalidInput,
             "{} is a config file: load its model directory, or ask for random weights of its shape", spec);
  IS_THROW(kUnsupported, "cannot load '{}': not a model directory or a .gguf file", spec);
}

}  // namespace inferscale
