// inferscale generate: stream a completion of one prompt to stdout (diagnostics on stderr).
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/sampling_options.h"
#include "util/check.h"

namespace inferscale::cli {
namespace {

struct GenerateArgs {
  ModelArgs model;
  std::string prompt;
  bool chat = false;
  std::string system;
  int32_t max_tokens = 128;
  SamplingArgs sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

void run_generate(const GenerateArgs& a) {
  Model m = load_model_from_args(a.model);
  const Tokenizer& tok = *m.tokenizer;
  std::vector<int32_t> ids;
  if (a.chat) {
    std::vector<ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", a.prompt});
    ids = tok.encode(m.chat_template.render(msgs, true), m.chat_template.encode_options(tok));
  } else if (a.prompt.empty()) {
    IS_REQUIRE(tok.bos_id().has_value(), kInvalidInput, "the prompt is empty and this tokenizer has no BOS token to start from");
    ids = {*tok.bos_id()};
  } else {
    ids = tok.encode(a.prompt, {.add_special = tok.adds_bos(), .parse_special = false});
  }
  SamplingParams sp = sampling_params(a.sampling, m.sampling);
  sp.max_tokens = a.max_tokens;
  sp.stop = a.stop;
  sp.ignore_eos = a.ignore_eos;

  Engine engine(make_backend(a.model, m), m.tokenizer, engine_options(a.model));
  const auto t0 = std::chrono::steady_clock::now();
  engine.add_request(ids, sp);
  RequestOutput last;
  int64_t generated = 0;
  double ttft = 0;
  while (engine.has_unfinished()) {
    for (const RequestOutput& o : engine.step()) {
      std::fwrite(o.text.data(), 1, o.text.size(), stdout);
      std::fflush(stdout);
      generated += static_cast<int64_t>(o.new_tokens.size());
      if (o.ttft_s > 0) ttft = o.ttft_s;
      last = o;
    }
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);  // the text's newline before the log line on stderr
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double decode_rate = generated > 1 && total > ttft ? static_cast<double>(generated - 1) / (total - ttft) : 0.0;
  spdlog::info("{} prompt tokens, {} generated ({}), TTFT {:.1f} ms, decode {:.1f} tok/s, total {:.2f} s",
               ids.size(), generated, finish_reason_name(last.finish), ttft * 1e3, decode_rate, total);
}

}  // namespace

void register_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt (streams to stdout)");
  add_model_options(*cmd, args->model);
  cmd->add_option("--prompt,-p", args->prompt, "prompt text (empty: start from BOS)");
  cmd->add_flag("--chat", args->chat, "wrap the prompt as a user message in the model's chat template");
  cmd->add_option("--system", args->system, "system message (with --chat)");
  cmd->add_option("--max-tokens,-n", args->max_tokens, "tokens to generate")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  add_sampling_options(*cmd, args->sampling);
  cmd->add_option("--stop", args->stop, "stop string (repeatable)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace inferscale::cli
