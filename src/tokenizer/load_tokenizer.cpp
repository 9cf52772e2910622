#include "tokenizer/load_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "tensor/gguf_file.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/json_file.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/wordpiece.h"
#include "util/check.h"

namespace inferscale {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// tokenizer_config.json writes special tokens as a string or as {"content": ...}.
std::optional<std::string> token_text(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// chat_template is a string, or a list of {name, template} of which "default" is the chat one.
std::string chat_template_text(const json& config) {
  if (!config.contains("chat_template")) return {};
  const json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const json& item : t)
      if (item.value("name", "") == "default" && item.contains("template")) return item["template"].get<std::string>();
  return {};
}

// A tiktoken rank file (base64 token, space, rank) is not a SentencePiece model.
bool looks_like_tiktoken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (!std::getline(in, line) || line.empty()) return false;
  const size_t sp = line.find(' ');
  return sp != std::string::npos && sp > 0 && std::all_of(line.begin() + sp + 1, line.end(), ::isdigit) &&
         std::all_of(line.begin(), line.begin() + sp, [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '='; });
}

// A tokenizer.json by its model type: WordPiece (BERT family) or byte-level BPE.
std::shared_ptr<TokenizerBase> load_tokenizer_json(const fs::path& file) {
  const json j = read_tokenizer_json(file.string());
  const bool wordpiece = j.is_object() && j.contains("model") && hf_type_of(j["model"]) == "WordPiece";
  if (wordpiece) return WordPieceTokenizer::from_json(j, file.string());
  return HfTokenizer::from_json(j, file.string());
}

std::shared_ptr<TokenizerBase> load_model_file(const fs::path& file) {
  const std::string name = file.filename().string();
  if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".json") == 0) return load_tokenizer_json(file);
  IS_REQUIRE(!looks_like_tiktoken(file.string()), kUnsupported,
             "{} is a tiktoken rank file; use the model's tokenizer.json instead", file.string());
  return SpmTokenizer::from_file(file.string());
}

}  // namespace

ChatFamily guess_chat_family(const Tokenizer& tok) {
  if (tok.token_to_id("<|start_header_id|>")) return ChatFamily::kLlama31;
  if (tok.token_to_id("<|im_start|>")) return ChatFamily::kChatML;
  if (const auto id = tok.token_to_id("[INST]"); id && tok.is_special(*id)) return ChatFamily::kMistral;
  return ChatFamily::kNone;
}

ChatTemplate resolve_chat_template(const std::string& jinja, const Tokenizer& tok, std::string bos_text,
                                   std::string eos_text, const std::string& origin) {
  ChatTemplate t = ChatTemplate::from_source(jinja, bos_text, eos_text);
  if (t.family() != ChatFamily::kNone) {
    if (t.family() == ChatFamily::kChatML && jinja.find("<think>") != std::string::npos)
      t.set_note(fmt::format("{}: the chat template writes reasoning blocks (<think>); they are not rendered: "
                             "assistant turns are plain ChatML", origin));
    return t;
  }
  ChatFamily family = guess_chat_family(tok);
  const char* fallback = family == ChatFamily::kNone ? "the plain format (\"role: content\" lines)"
                                                     : chat_family_name(family);
  if (family == ChatFamily::kNone) family = ChatFamily::kPlain;
  ChatTemplate out(family, std::move(bos_text), std::move(eos_text));
  if (jinja.empty())
    out.set_note(fmt::format("{}: no chat template; chat requests use {}", origin, fallback));
  else
    out.set_note(fmt::format("{}: chat template not recognized (none of llama3, chatml, mistral); chat requests use {}",
                             origin, fallback));
  return out;
}

namespace {

// A GGUF file carries its vocabulary, specials and chat template in its metadata; the tensors are
// not looked at (any tensor type will do).
LoadedTokenizer load_gguf(const std::string& path) {
  const GgufFile file = GgufFile::open_metadata(path);
  LoadedTokenizer out;
  out.tokenizer = make_gguf_tokenizer(file);
  const std::string jinja = file.has("tokenizer.chat_template") ? file.get_string("tokenizer.chat_template") : "";
  const auto bos = out.tokenizer->bos_id();
  const auto eos = out.tokenizer->eos_ids();
  out.chat = resolve_chat_template(jinja, *out.tokenizer, bos ? out.tokenizer->id_to_token(*bos) : "",
                                   eos.empty() ? "" : out.tokenizer->id_to_token(eos[0]), path);
  return out;
}

}  // namespace

LoadedTokenizer load_tokenizer(const std::string& path) {
  const fs::path p(path);
  IS_REQUIRE(fs::exists(p), kNotFound, "tokenizer path {} does not exist", path);
  if (!fs::is_directory(p) && p.extension() == ".gguf") return load_gguf(path);
  const fs::path dir = fs::is_directory(p) ? p : p.parent_path();
  const fs::path config_path = dir / "tokenizer_config.json";
  const json config = fs::exists(config_path) ? read_tokenizer_json(config_path.string()) : json::object();
  IS_REQUIRE(config.is_object(), kInvalidInput, "{}: expected a JSON object", config_path.string());

  std::shared_ptr<TokenizerBase> tok;
  if (!fs::is_directory(p)) {
    tok = load_model_file(p);
  } else if (fs::exists(dir / "tokenizer.json")) {
    tok = load_tokenizer_json(dir / "tokenizer.json");
  } else if (fs::exists(dir / "tokenizer.model")) {
    tok = load_model_file(dir / "tokenizer.model");
  } else if (fs::exists(dir / "tokenizer.model.v3")) {
    tok = load_model_file(dir / "tokenizer.model.v3");
  } else if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
    const std::string cls = config.value("tokenizer_class", "");
    IS_REQUIRE(cls == "Qwen2Tokenizer" || cls == "Qwen2TokenizerFast", kUnsupported,
               "{}: vocab.json + merges.txt are supported for Qwen2Tokenizer only (tokenizer_class is '{}')",
               config_path.string(), cls);
    tok = HfTokenizer::from_qwen2_files((dir / "vocab.json").string(), (dir / "merges.txt").string(), config);
  } else {
    IS_THROW(kNotFound, "no tokenizer in {} (looked for tokenizer.json, tokenizer.model, tokenizer.model.v3, "
             "vocab.json + merges.txt)", path);
  }

  // Refine specials from the config: its bos/eos name tokens of this vocabulary.
  SpecialIds s = tok->specials();
  auto lookup = [&](const char* key) -> std::optional<int32_t> {
    const auto text = token_text(config, key);
    if (!text) return std::nullopt;
    const auto id = tok->token_to_id(*text);
    IS_REQUIRE(id.has_value(), kInvalidInput, "{}: {} '{}' is not in the vocabulary", config_path.string(), key, *text);
    return id;
  };
  if (const auto bos = lookup("bos_token")) s.bos = bos;
  // A tokenizer.json decides BOS by its post-processor (as HF's fast tokenizers do); otherwise the
  // config's add_bos_token does.
  const bool has_post_processor = (dynamic_cast<const HfTokenizer*>(tok.get()) != nullptr ||
                                   dynamic_cast<const WordPieceTokenizer*>(tok.get()) != nullptr) &&
                                  (fs::exists(dir / "tokenizer.json") || p.extension() == ".json");
  if (!has_post_processor && config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
    s.add_bos = config["add_bos_token"].get<bool>() && s.bos.has_value();
  if (const auto eos = lookup("eos_token")) {
    std::vector<int32_t> ids{*eos};
    for (const int32_t id : s.eos)
      if (id != *eos) ids.push_back(id);
    s.eos = std::move(ids);
  }
  tok->set_specials(std::move(s));

  LoadedTokenizer out;
  out.chat = resolve_chat_template(chat_template_text(config), *tok, token_text(config, "bos_token").value_or(""),
                                   token_text(config, "eos_token").value_or(""), path);
  out.tokenizer = std::move(tok);
  return out;
}

}  // namespace inferscale
