// Test support for the server tests: a tiny random Llama and a byte tokenizer, built in code.
//
// Until the built-in demo model (load_model("demo")) and the tokenizer library reach this branch,
// the tests bring their own model. The weak definitions at the bottom stand in for
// IncrementalDecoder and ChatTemplate::render; once the real ones are linked they take precedence
// (a strong definition overrides a weak one), so these shims can never shadow the real code.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/config.h"
#include "model/weights.h"
#include "server/served_model.h"
#include "tensor/host_tensor.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace inferscale::test_support {

// Replaces each invalid UTF-8 sequence with U+FFFD.
inline std::string sanitize_utf8(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

// Ids 0..255 are bytes; 256 is BOS, 257 EOS.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256, kEos = 257, kVocab = 258;
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts) const override {
    std::vector<int32_t> ids;
    if (opts.add_special) ids.push_back(kBos);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id < 256) s += static_cast<char>(id);
      else if (!skip_special) s += id == kBos ? "<s>" : "</s>";
    }
    return sanitize_utf8(s);
  }
  int32_t vocab_size() const override { return kVocab; }
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::vector<int32_t> eos_ids() const override { return {kEos}; }
  bool is_special(int32_t id) const override { return id >= 256; }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  std::string id_to_token(int32_t id) const override { return std::to_string(id); }
  bool adds_bos() const override { return true; }
  std::string kind() const override { return "byte"; }
};

// A backend wrapper for failure and timing tests: forward() throws when a poisoned token is in
// the batch, and sleeps `delay_ms` first (to make generations slow enough to cancel).
class ControlledBackend final : public Backend {
 public:
  ControlledBackend(std::unique_ptr<Backend> inner, int32_t poison) : inner_(std::move(inner)), poison_(poison) {}
  std::atomic<int> delay_ms{0};
  std::string name() const override { return "controlled"; }
  const ModelConfig& config() const override { return inner_->config(); }
  int32_t block_size() const override { return inner_->block_size(); }
  int64_t num_cache_blocks() const override { return inner_->num_cache_blocks(); }
  int64_t num_pool_blocks() const override { return inner_->num_pool_blocks(); }
  void forward(const ForwardBatch& b, std::vector<float>& out) override {
    if (const int ms = delay_ms.load()) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    for (int32_t t : b.token_ids)
      if (t == poison_) throw std::runtime_error("poisoned token in the batch");
    inner_->forward(b, out);
  }
  void inject(const InjectBatch& b) override { inner_->inject(b); }
  void read_pool(const std::vector<int64_t>& s, std::vector<float>& k, std::vector<float>& v) override { inner_->read_pool(s, k, v); }
  void write_pool(const std::vector<int64_t>& s, const std::vector<float>& k, const std::vector<float>& v) override {
    inner_->write_pool(s, k, v);
  }
  void read_cache(const std::vector<int64_t>& s, std::vector<float>& k, std::vector<float>& v) override { inner_->read_cache(s, k, v); }

 private:
  std::unique_ptr<Backend> inner_;
  int32_t poison_;
};

// A 2-layer Llama of hidden size 64 with seeded random weights: fast on one core, and its greedy
// output is a deterministic function of the prompt.
class TestModel {
 public:
  TestModel() : tok_(std::make_shared<ByteTokenizer>()) {
    cfg_.architecture = "LlamaForCausalLM";
    cfg_.hidden_size = 64;
    cfg_.intermediate_size = 128;
    cfg_.num_layers = 2;
    cfg_.num_heads = 4;
    cfg_.num_kv_heads = 2;
    cfg_.head_dim = 16;
    cfg_.vocab_size = ByteTokenizer::kVocab;
    cfg_.max_position_embeddings = 512;
    cfg_.rms_norm_eps = 1e-5;
    cfg_.bos_token_id = ByteTokenizer::kBos;
    cfg_.eos_token_ids = {ByteTokenizer::kEos};
    std::mt19937_64 rng(1234);
    auto randn = [&](std::vector<int64_t> shape, float stddev) {
      HostTensor t = HostTensor::zeros(DType::kF32, std::move(shape));
      std::normal_distribution<float> d(0.0f, stddev);
      for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = d(rng);
      return t;
    };
    auto ones = [](int64_t n) {
      HostTensor t = HostTensor::zeros(DType::kF32, {n});
      for (int64_t i = 0; i < n; ++i) t.as<float>()[i] = 1.0f;
      return t;
    };
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, QS = cfg_.q_size(), KS = cfg_.kv_size();
    w_.embed = randn({cfg_.vocab_size, H}, 1.0f);
    w_.final_norm = ones(H);
    w_.lm_head = randn({cfg_.vocab_size, H}, 0.5f);
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      LayerWeights lw;
      lw.attn_norm = ones(H);
      lw.wq = randn({QS, H}, 0.2f);
      lw.wk = randn({KS, H}, 0.2f);
      lw.wv = randn({KS, H}, 0.2f);
      lw.wo = randn({H, QS}, 0.1f);
      lw.ffn_norm = ones(H);
      lw.w_gate = randn({I, H}, 0.1f);
      lw.w_up = randn({I, H}, 0.1f);
      lw.w_down = randn({H, I}, 0.1f);
      w_.layers.push_back(std::move(lw));
    }
  }

  std::unique_ptr<Backend> backend(int64_t num_blocks = 64) const {
    BackendOptions bo;
    bo.block_size = 16;
    bo.num_cache_blocks = num_blocks;
    bo.num_threads = 1;
    return make_cpu_backend(cfg_, w_, bo);
  }
  std::unique_ptr<Engine> engine(int64_t num_blocks = 64, std::unique_ptr<Backend> be = nullptr) const {
    EngineOptions eo;
    eo.scheduler.max_num_seqs = 16;
    eo.scheduler.max_num_batched_tokens = 256;
    return std::make_unique<Engine>(be ? std::move(be) : backend(num_blocks), tok_, eo);
  }
  server::ServedModel served() const { return server::ServedModel{"test-model", tok_, ChatTemplate{}}; }
  std::shared_ptr<const Tokenizer> tokenizer() const { return tok_; }
  const ModelConfig& config() const { return cfg_; }

 private:
  ModelConfig cfg_;
  ModelWeights w_;
  std::shared_ptr<const Tokenizer> tok_;
};

}  // namespace inferscale::test_support

// ---- weak stand-ins until the tokenizer library lands (see the top of this file) ----
namespace inferscale {

__attribute__((weak)) std::string IncrementalDecoder::push(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  const std::string prefix = tok_.decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  const std::string text = tok_.decode(all.subspan(prefix_offset_), skip_special_);
  const bool incomplete = text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0;
  if (text.size() <= prefix.size() || incomplete) return {};
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return text.substr(prefix.size());
}

__attribute__((weak)) std::string IncrementalDecoder::flush() {
  const std::span<const int32_t> all(ids_);
  const std::string prefix = tok_.decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  const std::string text = tok_.decode(all.subspan(prefix_offset_), skip_special_);
  prefix_offset_ = read_offset_ = ids_.size();
  return text.size() > prefix.size() ? text.substr(prefix.size()) : std::string();
}

__attribute__((weak)) std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string s;
  for (const ChatMessage& m : messages) s += "<" + m.role + ">" + m.content + "\n";
  if (add_generation_prompt) s += "<assistant>";
  return s;
}

}  // namespace inferscale
