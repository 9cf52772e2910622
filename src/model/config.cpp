// ModelConfig from an HF config.json. Mirrors what transformers 5.x does with the same file for the
// four supported architectures (defaults included), and refuses what this engine cannot run
// (sliding window, o_proj/MLP biases, other rope types) with an error naming the key.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/json_file.h"
#include "util/check.h"

namespace inferscale {

using nlohmann::json;

std::string arch_name(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kQwen3: return "qwen3";
    case Arch::kMistral: return "mistral";
    case Arch::kBert: return "bert";
  }
  return "?";
}

namespace {

std::string rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kLlama3: return "llama3";
    case RopeType::kYarn: return "yarn";
  }
  return "?";
}

// ---- Reading keys. `where` prefixes the key in messages ("rope_scaling." for the nested dict).

// The value of `key`, or nullptr when absent or JSON null (HF writes null for "not set").
const json* find(const json& j, const std::string& key) {
  auto it = j.find(key);
  return (it == j.end() || it->is_null()) ? nullptr : &*it;
}

int64_t as_int(const json& v, const std::string& name) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {  // "4096.0" is fine, "4096.5" is not, nor one past int64's range
    const double d = v.get<double>();
    IS_REQUIRE(std::isfinite(d) && std::trunc(d) == d && d >= -0x1p63 && d < 0x1p63, kInvalidInput,
               "config key '{}' must be an integer, got {}", name, v.dump());
    return static_cast<int64_t>(d);
  }
  IS_THROW(kInvalidInput, "config key '{}' must be an integer, got {}", name, v.dump());
}

double as_double(const json& v, const std::string& name) {
  IS_REQUIRE(v.is_number(), kInvalidInput, "config key '{}' must be a number, got {}", name, v.dump());
  return v.get<double>();
}

bool as_bool(const json& v, const std::string& name) {
  IS_REQUIRE(v.is_boolean(), kInvalidInput, "config key '{}' must be true or false, got {}", name, v.dump());
  return v.get<bool>();
}

std::string as_string(const json& v, const std::string& name) {
  IS_REQUIRE(v.is_string(), kInvalidInput, "config key '{}' must be a string, got {}", name, v.dump());
  return v.get<std::string>();
}

const json& required(const json& j, const std::string& key, const std::string& where = "") {
  const json* v = find(j, key);
  IS_REQUIRE(v != nullptr, kInvalidInput, "missing required key '{}{}'", where, key);
  return *v;
}

int64_t req_int(const json& j, const std::string& key, const std::string& where = "") {
  return as_int(required(j, key, where), where + key);
}
double req_double(const json& j, const std::string& key, const std::string& where = "") {
  return as_double(required(j, key, where), where + key);
}
int64_t opt_int(const json& j, const std::string& key, int64_t def, const std::string& where = "") {
  const json* v = find(j, key);
  return v ? as_int(*v, where + key) : def;
}
double opt_double(const json& j, const std::string& key, double def, const std::string& where = "") {
  const json* v = find(j, key);
  return v ? as_double(*v, where + key) : def;
}
bool opt_bool(const json& j, const std::string& key, bool def, const std::string& where = "") {
  const json* v = find(j, key);
  return v ? as_bool(*v, where + key) : def;
}
std::string opt_string(const json& j, const std::string& key, const std::string& def) {
  const json* v = find(j, key);
  return v ? as_string(*v, key) : def;
}

// ---- Architecture.

struct ArchInfo {
  const char* hf_class;
  Arch arch;
};
constexpr ArchInfo kArchs[] = {
    {"LlamaForCausalLM", Arch::kLlama},
    {"Qwen2ForCausalLM", Arch::kQwen2},
    {"Qwen3ForCausalLM", Arch::kQwen3},
    {"MistralForCausalLM", Arch::kMistral},
    {"BertModel", Arch::kBert},
};

Arch parse_architecture(const json& j, std::string& name) {
  const json& archs = required(j, "architectures");
  IS_REQUIRE(archs.is_array() && !archs.empty(), kInvalidInput,
             "config key 'architectures' must be a non-empty list, got {}", archs.dump());
  IS_REQUIRE(archs.size() == 1, kUnsupported, "config lists several architectures {}; expected one", archs.dump());
  name = as_string(archs[0], "architectures[0]");
  for (const ArchInfo& a : kArchs)
    if (name == a.hf_class) return a.arch;
  IS_THROW(kUnsupported,
           "unsupported architecture '{}' (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
           "MistralForCausalLM, BertModel)",
           name);
}

// ---- Rope. transformers 4.x writes `rope_theta` + `rope_scaling` ({"type"|"rope_type": ...});
// 5.x writes one `rope_parameters` dict holding rope_theta and the scaling. As in transformers, a
// non-empty rope_scaling wins over rope_parameters, and a theta inside the dict wins over the top level.
void parse_rope(const json& j, ModelConfig& c) {
  const json* rs = find(j, "rope_scaling");
  const json* rp = find(j, "rope_parameters");
  const json* dict = nullptr;
  std::string where;
  if (rs != nullptr && !(rs->is_object() && rs->empty())) {
    dict = rs;
    where = "rope_scaling.";
  } else if (rp != nullptr) {
    dict = rp;
    where = "rope_parameters.";
  }
  if (dict != nullptr) {
    IS_REQUIRE(dict->is_object(), kInvalidInput, "config key '{}' must be an object, got {}",
               where.substr(0, where.size() - 1), dict->dump());
    for (const auto& [k, v] : dict->items())
      IS_REQUIRE(!v.is_object(), kUnsupported, "per-layer-type rope parameters ('{}{}') are not supported", where, k);
  }
  static const json kEmpty = json::object();
  const json& d = dict ? *dict : kEmpty;

  c.rope_theta = opt_double(d, "rope_theta", opt_double(j, "rope_theta", 10000.0), where);
  const double partial = opt_double(d, "partial_rotary_factor", opt_double(j, "partial_rotary_factor", 1.0), where);
  IS_REQUIRE(partial == 1.0, kUnsupported, "partial rotary embeddings (partial_rotary_factor={}) are not supported",
             partial);

  std::string type = "default";
  if (const json* t = find(d, "rope_type")) {
    type = as_string(*t, where + "rope_type");
  } else if (const json* t2 = find(d, "type")) {
    type = as_string(*t2, where + "type");
  }
  RopeScaling& s = c.rope_scaling;
  s = RopeScaling{};
  if (type == "default") {
    s.type = RopeType::kDefault;
  } else if (type == "linear") {
    s.type = RopeType::kLinear;
    s.factor = req_double(d, "factor", where);
  } else if (type == "llama3") {
    s.type = RopeType::kLlama3;
    s.factor = req_double(d, "factor", where);
    s.low_freq_factor = req_double(d, "low_freq_factor", where);
    s.high_freq_factor = req_double(d, "high_freq_factor", where);
    s.original_max_position_embeddings = req_int(d, "original_max_position_embeddings", where);
  } else if (type == "yarn") {
    s.type = RopeType::kYarn;
    s.factor = opt_double(d, "factor", 0.0, where);  // 0: max_position_embeddings / original (finalize)
    // A top-level original_max_position_embeddings (Phi-3 style) takes priority, as in transformers.
    s.original_max_position_embeddings =
        opt_int(j, "original_max_position_embeddings", opt_int(d, "original_max_position_embeddings", 0, where));
    // transformers reads `get("beta_fast") or 32`: absent, null and 0 all mean the default.
    s.beta_fast = opt_double(d, "beta_fast", 0.0, where);
    if (s.beta_fast == 0.0) s.beta_fast = 32.0;
    s.beta_slow = opt_double(d, "beta_slow", 0.0, where);
    if (s.beta_slow == 0.0) s.beta_slow = 1.0;
    s.mscale = opt_double(d, "mscale", 0.0, where);
    s.mscale_all_dim = opt_double(d, "mscale_all_dim", 0.0, where);
    s.attention_factor = opt_double(d, "attention_factor", 0.0, where);
    s.truncate = opt_bool(d, "truncate", true, where);
  } else {
    IS_THROW(kUnsupported, "unsupported rope type '{}' in '{}' (supported: default, linear, llama3, yarn)", type,
             where.empty() ? std::string("rope_scaling") : where.substr(0, where.size() - 1));
  }
}

// ---- Sliding window: the engine attends over the whole context, so a model whose attention is
// windowed would silently give other numbers once a sequence passes the window.
void check_sliding_window(const json& j, const ModelConfig& c) {
  const int64_t max_pos = c.max_position_embeddings;
  if (c.arch == Arch::kMistral) {
    // MistralConfig's default window is 4096 when the key is absent; null switches it off.
    const auto it = j.find("sliding_window");
    const int64_t window = it == j.end() ? 4096 : (it->is_null() ? 0 : as_int(*it, "sliding_window"));
    IS_REQUIRE(window == 0 || window >= max_pos, kUnsupported,
               "sliding window attention is not supported (sliding_window={}{} < max_position_embeddings={})", window,
               it == j.end() ? ", MistralConfig's default for an absent key" : "", max_pos);
    return;
  }
  if (c.arch != Arch::kQwen2 && c.arch != Arch::kQwen3) return;
  // Qwen2/3: the window applies only when use_sliding_window is true, to the layers that layer_types
  // marks "sliding_attention" (default: layers at index >= max_window_layers).
  if (!opt_bool(j, "use_sliding_window", false)) return;
  const auto it = j.find("sliding_window");
  if (it != j.end() && it->is_null()) return;  // null: no window
  const int64_t window = it == j.end() ? 4096 : as_int(*it, "sliding_window");
  if (window >= max_pos) return;
  int64_t sliding_layers = 0;
  if (const json* lt = find(j, "layer_types")) {
    IS_REQUIRE(lt->is_array(), kInvalidInput, "config key 'layer_types' must be a list");
    for (const json& t : *lt) sliding_layers += (t.is_string() && t.get<std::string>() == "sliding_attention");
  } else {
    sliding_layers = std::max<int64_t>(0, c.num_layers - opt_int(j, "max_window_layers", 28));
  }
  IS_REQUIRE(sliding_layers == 0, kUnsupported,
             "sliding window attention is not supported (use_sliding_window=true, sliding_window={} on {} of {} "
             "layers)",
             window, sliding_layers, c.num_layers);
}

std::vector<int32_t> parse_eos(const json& j) {
  const json* e = find(j, "eos_token_id");
  std::vector<int32_t> ids;
  if (e == nullptr) return ids;
  if (e->is_array()) {
    for (const json& v : *e) ids.push_back(static_cast<int32_t>(as_int(v, "eos_token_id[]")));
  } else {
    ids.push_back(static_cast<int32_t>(as_int(*e, "eos_token_id")));
  }
  return ids;
}

// BertModel (all-MiniLM, bge, e5, gte): the keys of transformers' BertConfig.
ModelConfig bert_from_hf_json(const json& j, ModelConfig c) {
  c.hidden_size = req_int(j, "hidden_size");
  c.intermediate_size = req_int(j, "intermediate_size");
  c.num_layers = req_int(j, "num_hidden_layers");
  c.num_heads = req_int(j, "num_attention_heads");
  c.num_kv_heads = c.num_heads;
  c.vocab_size = req_int(j, "vocab_size");
  c.max_position_embeddings = opt_int(j, "max_position_embeddings", 512);
  c.type_vocab_size = opt_int(j, "type_vocab_size", 2);
  c.layer_norm_eps = opt_double(j, "layer_norm_eps", 1e-12);
  c.torch_dtype = opt_string(j, "torch_dtype", opt_string(j, "dtype", "float32"));
  const std::string act = opt_string(j, "hidden_act", "gelu");
  IS_REQUIRE(act == "gelu", kUnsupported, "unsupported hidden_act '{}' for BertModel (only gelu, the erf form)", act);
  const std::string pos = opt_string(j, "position_embedding_type", "absolute");
  IS_REQUIRE(pos == "absolute", kUnsupported, "unsupported position_embedding_type '{}' (only absolute)", pos);
  IS_REQUIRE(c.type_vocab_size > 0, kInvalidInput, "type_vocab_size must be positive, got {}", c.type_vocab_size);
  IS_REQUIRE(c.layer_norm_eps > 0, kInvalidInput, "layer_norm_eps must be positive, got {}", c.layer_norm_eps);
  c.finalize();
  return c;
}

}  // namespace

ModelConfig ModelConfig::from_hf_json(const json& j) {
  IS_REQUIRE(j.is_object(), kInvalidInput, "config must be a JSON object");
  ModelConfig c;
  c.arch = parse_architecture(j, c.architecture);
  if (c.arch == Arch::kBert) return bert_from_hf_json(j, c);
  IS_REQUIRE(find(j, "quantization_config") == nullptr, kUnsupported,
             "quantized checkpoints (quantization_config) are not supported");

  c.hidden_size = req_int(j, "hidden_size");
  c.intermediate_size = req_int(j, "intermediate_size");
  c.num_layers = req_int(j, "num_hidden_layers");
  c.num_heads = req_int(j, "num_attention_heads");
  c.vocab_size = req_int(j, "vocab_size");
  c.max_position_embeddings = req_int(j, "max_position_embeddings");
  c.num_kv_heads = opt_int(j, "num_key_value_heads", c.num_heads);
  // Qwen3Config defaults head_dim to 128; the others derive it from hidden / heads.
  c.head_dim = opt_int(j, "head_dim", c.arch == Arch::kQwen3 ? 128 : 0);
  c.rms_norm_eps = opt_double(j, "rms_norm_eps", 1e-6);
  c.tie_word_embeddings = opt_bool(j, "tie_word_embeddings", false);
  c.torch_dtype = opt_string(j, "torch_dtype", opt_string(j, "dtype", "float32"));
  c.bos_token_id = static_cast<int32_t>(opt_int(j, "bos_token_id", -1));
  c.eos_token_ids = parse_eos(j);

  const std::string act = opt_string(j, "hidden_act", "silu");
  IS_REQUIRE(act == "silu", kUnsupported, "unsupported hidden_act '{}' (only silu)", act);
  IS_REQUIRE(!opt_bool(j, "mlp_bias", false), kUnsupported, "mlp_bias=true is not supported");
  switch (c.arch) {
    case Arch::kQwen2:  // q/k/v carry a bias by architecture; o_proj has none
      c.attention_bias = true;
      break;
    case Arch::kQwen3:
      c.qk_norm = true;
      [[fallthrough]];
    case Arch::kLlama:
      // In LlamaAttention / Qwen3Attention attention_bias adds a bias to o_proj as well, which the
      // weights and backends here do not carry.
      IS_REQUIRE(!opt_bool(j, "attention_bias", false), kUnsupported,
                 "attention_bias=true is not supported for {} (it adds an o_proj bias)", c.architecture);
      break;
    case Arch::kMistral:
    case Arch::kBert:
      break;
  }
  parse_rope(j, c);
  c.finalize();
  check_sliding_window(j, c);
  return c;
}

ModelConfig ModelConfig::from_hf_file(const std::string& path) {
  const json j = load_json_file(path);
  try {
    return from_hf_json(j);
  } catch (const Error& e) {
    throw Error(e.kind(), path + ": " + e.what());
  }
}

void ModelConfig::finalize() {
  IS_REQUIRE(hidden_size > 0 && intermediate_size > 0 && num_layers > 0 && num_heads > 0 && vocab_size > 0,
             kInvalidInput,
             "model sizes must be positive (hidden_size={}, intermediate_size={}, num_hidden_layers={}, "
             "num_attention_heads={}, vocab_size={})",
             hidden_size, intermediate_size, num_layers, num_heads, vocab_size);
  if (num_kv_heads == 0) num_kv_heads = num_heads;
  IS_REQUIRE(num_kv_heads > 0 && num_heads % num_kv_heads == 0, kInvalidInput,
             "num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", num_heads, num_kv_heads);
  if (head_dim == 0) {
    IS_REQUIRE(hidden_size % num_heads == 0, kInvalidInput,
               "hidden_size ({}) is not a multiple of num_attention_heads ({}) and no head_dim is given", hidden_size,
               num_heads);
    head_dim = hidden_size / num_heads;
  }
  IS_REQUIRE(head_dim > 0 && head_dim % 2 == 0, kInvalidInput, "head_dim must be positive and even, got {}", head_dim);
  IS_REQUIRE(max_position_embeddings > 0, kInvalidInput, "max_position_embeddings must be positive, got {}",
             max_position_embeddings);
  IS_REQUIRE(rms_norm_eps > 0, kInvalidInput, "rms_norm_eps must be positive, got {}", rms_norm_eps);
  IS_REQUIRE(rope_theta > 0, kInvalidInput, "rope_theta must be positive, got {}", rope_theta);

  RopeScaling& s = rope_scaling;
  switch (s.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      IS_REQUIRE(s.factor > 0, kInvalidInput, "rope_scaling.factor must be positive, got {}", s.factor);
      break;
    case RopeType::kLlama3:
      IS_REQUIRE(s.factor > 0, kInvalidInput, "rope_scaling.factor must be positive, got {}", s.factor);
      IS_REQUIRE(s.original_max_position_embeddings > 0, kInvalidInput,
                 "rope_scaling.original_max_position_embeddings must be positive, got {}",
                 s.original_max_position_embeddings);
      IS_REQUIRE(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor, kInvalidInput,
                 "llama3 rope needs 0 < low_freq_factor < high_freq_factor, got {} and {}", s.low_freq_factor,
                 s.high_freq_factor);
      break;
    case RopeType::kYarn:
      if (s.original_max_position_embeddings <= 0) s.original_max_position_embeddings = max_position_embeddings;
      if (s.factor <= 0)
        s.factor = static_cast<double>(max_position_embeddings) / static_cast<double>(s.original_max_position_embeddings);
      IS_REQUIRE(s.factor > 0, kInvalidInput, "rope_scaling.factor must be positive, got {}", s.factor);
      break;
  }
}

std::string ModelConfig::fingerprint() const {
  // fmt prints doubles in their shortest exact form, so equal text means equal numbers.
  std::string s = fmt::format(
      "arch={} hidden={} inter={} layers={} heads={} kv_heads={} head_dim={} vocab={} eps={} theta={} tie={} "
      "qkv_bias={} qk_norm={} interleaved={} rope={}",
      arch_name(arch), hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim, vocab_size,
      rms_norm_eps, rope_theta, int(tie_word_embeddings), int(attention_bias), int(qk_norm), int(rope_interleaved),
      rope_type_name(rope_scaling.type));
  if (arch == Arch::kBert) s += fmt::format(" ln_eps={} type_vocab={} max_pos={}", layer_norm_eps, type_vocab_size, max_position_embeddings);
  const RopeScaling& r = rope_scaling;
  switch (r.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      s += fmt::format(" factor={}", r.factor);
      break;
    case RopeType::kLlama3:
      s += fmt::format(" factor={} low={} high={} orig={}", r.factor, r.low_freq_factor, r.high_freq_factor,
                       r.original_max_position_embeddings);
      break;
    case RopeType::kYarn:
      s += fmt::format(" factor={} orig={} beta_fast={} beta_slow={} mscale={} mscale_all_dim={} attn_factor={} truncate={}",
                       r.factor, r.original_max_position_embeddings, r.beta_fast, r.beta_slow, r.mscale,
                       r.mscale_all_dim, r.attention_factor, int(r.truncate));
      break;
  }
  return s;
}

json ModelConfig::to_json() const {
  json rope = {{"type", rope_type_name(rope_scaling.type)}, {"factor", rope_scaling.factor}};
  if (rope_scaling.type == RopeType::kLlama3) {
    rope["low_freq_factor"] = rope_scaling.low_freq_factor;
    rope["high_freq_factor"] = rope_scaling.high_freq_factor;
  }
  if (rope_scaling.type == RopeType::kLlama3 || rope_scaling.type == RopeType::kYarn)
    rope["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
  if (rope_scaling.type == RopeType::kYarn) {
    rope["beta_fast"] = rope_scaling.beta_fast;
    rope["beta_slow"] = rope_scaling.beta_slow;
    rope["mscale"] = rope_scaling.mscale;
    rope["mscale_all_dim"] = rope_scaling.mscale_all_dim;
    rope["attention_factor"] = rope_scaling.attention_factor;
    rope["truncate"] = rope_scaling.truncate;
  }
  return json{
      {"arch", arch_name(arch)},
      {"architecture", architecture},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_layers", num_layers},
      {"num_heads", num_heads},
      {"num_kv_heads", num_kv_heads},
      {"head_dim", head_dim},
      {"vocab_size", vocab_size},
      {"max_position_embeddings", max_position_embeddings},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
      {"rope_scaling", rope},
      {"tie_word_embeddings", tie_word_embeddings},
      {"attention_bias", attention_bias},
      {"qk_norm", qk_norm},
      {"rope_interleaved", rope_interleaved},
      {"bos_token_id", bos_token_id},
      {"eos_token_ids", eos_token_ids},
      {"torch_dtype", torch_dtype},
      {"num_parameters", num_parameters()},
  };
}

int64_t ModelConfig::num_parameters() const {
  const int64_t h = hidden_size;
  if (arch == Arch::kBert) {
    const int64_t layer = 4 * (h * h + h) + 2 * h * intermediate_size + intermediate_size + h + 4 * h;
    return (vocab_size + max_position_embeddings + type_vocab_size) * h + 2 * h + num_layers * layer;
  }
  int64_t layer = 2 * h                       // attn_norm, ffn_norm
                  + h * q_size() + 2 * h * kv_size() + q_size() * h  // q, k, v, o
                  + 3 * h * intermediate_size;                      // gate, up, down
  if (attention_bias) layer += q_size() + 2 * kv_size();
  if (qk_norm) layer += 2 * head_dim;
  return vocab_size * h + num_layers * layer + h + (tie_word_embeddings ? 0 : vocab_size * h);
}

}  // namespace inferscale
