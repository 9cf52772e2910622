// inferscale info: the model's config, parameter count and memory needs, as text or JSON.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "model/weights.h"

namespace inferscale::cli {
namespace {

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

void run_info(const ModelArgs& a, bool as_json) {
  Model m = load_model_from_args(a);
  const ModelConfig& c = m.config;
  const double params = static_cast<double>(c.num_parameters());
  nlohmann::json j;
  j["name"] = m.name;
  j["source"] = m.source;
  j["random_weights"] = m.random_weights;
  j["fingerprint"] = m.fingerprint;
  j["config"] = c.to_json();
  j["parameters"] = c.num_parameters();
  const Tokenizer& tok = *m.tokenizer;
  const std::string pre = tok.pre_tokenizer();
  std::vector<std::string> eos;
  for (const int32_t id : tok.eos_ids()) eos.push_back(tok.id_to_token(id));
  j["tokenizer"] = {{"kind", tok.kind()},
                    {"pre_tokenizer", pre.empty() ? nlohmann::json(nullptr) : nlohmann::json(pre)},
                    {"vocab_size", tok.vocab_size()},
                    {"bos", tok.bos_id() ? nlohmann::json(tok.id_to_token(*tok.bos_id())) : nlohmann::json(nullptr)},
                    {"adds_bos", tok.adds_bos()},
                    {"eos", eos},
                    {"chat_template", chat_family_name(m.chat_template.family())},
                    {"default_system_prompt", m.chat_template.default_system().empty()
                                                  ? nlohmann::json(nullptr)
                                                  : nlohmann::json(m.chat_template.default_system())}};
  const WeightStats ws = weight_stats(m.weights);
  nlohmann::json stored = nlohmann::json::object();
  for (const auto& [dt, d] : ws.by_dtype) stored[std::string(dtype_name(dt))] = {{"tensors", d.tensors}, {"bytes", d.bytes}};
  j["memory"] = {{"weights_stored_bytes", ws.bytes},
                 {"weights_stored_dtypes", stored},
                 {"weights_bf16_bytes", params * 2},
                 {"weights_f32_bytes", params * 4},
                 {"kv_bytes_per_token_bf16", c.kv_bytes_per_token(2)},
                 {"kv_bytes_per_token_f32", c.kv_bytes_per_token(4)}};
  if (as_json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("model        %s (%s)%s\n", m.name.c_str(), m.source.c_str(), m.random_weights ? "  [random weights: text is meaningless]" : "");
  std::printf("architecture %s: %lld layers, hidden %lld, %lld heads / %lld kv heads x %lld, FFN %lld, vocab %lld\n",
              c.architecture.c_str(), (long long)c.num_layers, (long long)c.hidden_size, (long long)c.num_heads,
              (long long)c.num_kv_heads, (long long)c.head_dim, (long long)c.intermediate_size, (long long)c.vocab_size);
  std::printf("rope         theta %g%s, max positions %lld%s%s%s\n", c.rope_theta,
              c.rope_interleaved ? " (adjacent pairs)" : "", (long long)c.max_position_embeddings,
              c.attention_bias ? ", qkv bias" : "", c.qk_norm ? ", q/k norm" : "", c.tie_word_embeddings ? ", tied embeddings" : "");
  std::printf("parameters   %.3f M: weights %s in bf16, %s in f32\n", params / 1e6, gib(params * 2).c_str(), gib(params * 4).c_str());
  bool quantized = false;
  for (const auto& [dt, d] : ws.by_dtype) quantized = quantized || is_block_quantized(dt);
  std::printf("stored       %.2f MiB: %s%s\n", static_cast<double>(ws.bytes) / (1024.0 * 1024.0), ws.dtypes_summary().c_str(),
              quantized ? "; block-quantized tensors are dequantized at load (f32 on the CPU, bf16 on the GPU)" : "");
  std::printf("KV cache     %lld bytes/token in bf16 (%s per 100k tokens), %lld in f32\n", (long long)c.kv_bytes_per_token(2),
              gib(static_cast<double>(c.kv_bytes_per_token(2)) * 1e5).c_str(), (long long)c.kv_bytes_per_token(4));
  std::printf("tokenizer    %s%s, %d tokens, BOS %s%s, end of generation %s\n", tok.kind().c_str(),
              pre.empty() ? "" : (" (pre-tokenizer " + pre + ")").c_str(), tok.vocab_size(),
              tok.bos_id() ? tok.id_to_token(*tok.bos_id()).c_str() : "none", tok.adds_bos() ? " (added)" : "",
              fmt::format("{}", fmt::join(eos, " ")).c_str());
  std::printf("chat         %s%s\n", chat_family_name(m.chat_template.family()),
              m.chat_template.default_system().empty()
                  ? ""
                  : (" (default system prompt: \"" + m.chat_template.default_system() + "\")").c_str());
  std::printf("fingerprint  %s\n", m.fingerprint.c_str());
}

}  // namespace

void register_info(CLI::App& app) {
  auto args = std::make_shared<ModelArgs>();
  auto as_json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("info", "print a model's config and memory needs");
  add_model_options(*cmd, *args);
  cmd->add_flag("--json", *as_json, "print JSON");
  cmd->callback([args, as_json] { run_info(*args, *as_json); });
}

}  // namespace inferscale::cli
