// inferscale chat: an interactive conversation with memory. Each question retrieves the user's
// top-k facts, injects their KV (or pastes them, --mode text), and streams the answer; stderr
// shows which facts were used and the time to first token. With --remember, what the user says is
// stored as conversation turns, so later questions can retrieve it (--remember-replies: the
// answers too, as the server's "store": "all").
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "cli/memory_options.h"
#include "cli/model_options.h"
#include "cli/sampling_options.h"
#include "memory/memory_service.h"
#include "util/check.h"

namespace inferscale::cli {
namespace {

struct ChatArgs {
  ModelArgs model;
  MemoryArgs memory;
  std::string user;
  std::string tenant = kDefaultTenant;
  std::string mode = "inject";
  std::string order = "rank";
  std::string system;
  int32_t max_tokens = 256;
  SamplingArgs sampling;
  bool remember = false;
  bool remember_replies = false;
  bool quiet = false;
};

void run_chat(const ChatArgs& a) {
  const MemoryMode mode = parse_memory_mode(a.mode);
  const MemoryOrder order = parse_memory_order(a.order);
  Model model = load_model_from_args(a.model);
  OpenedMemory mem = open_memory(a.memory, gpu_selected(a.model));
  Engine engine(make_backend(a.model, model), model.tokenizer, engine_options(a.model));
  MemoryService service(*mem.store, *mem.retriever, model, engine.backend(), engine.blocks(),
                        memory_options(a.memory, *mem.store));
  engine.set_memory(&service);
  std::fprintf(stderr, "chat with %s as user '%s' (%zu facts, mode %s, k %d, window %d); Ctrl-D to quit\n",
               model.name.c_str(), a.user.c_str(), mem.store->count(a.tenant, a.user), memory_mode_name(mode),
               service.options().default_k, service.options().default_window);
  std::vector<ChatMessage> history;
  if (!a.system.empty()) history.push_back({"system", a.system});
  const std::string conversation = fmt::format("chat-{}", std::chrono::system_clock::now().time_since_epoch().count());
  std::string line;
  while (true) {
    std::fprintf(stderr, "\n> ");
    if (!std::getline(std::cin, line)) break;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    history.push_back({"user", line});
    MemoryRequest req;
    req.tenant = a.tenant;
    req.user = a.user;
    req.mode = mode;
    req.order = order;
    SamplingParams sp = sampling_params(a.sampling, model.sampling);
    sp.max_tokens = a.max_tokens;
    // The request's memory is planned by the engine's connector, as the server's is
    // (engine/memory_connector.h): the facts are shown once its prompt is ready (the step's output
    // `admitted`), before the answer streams.
    auto memory = std::make_shared<RequestMemory>(req, PromptSource::of_chat(history));
    auto show = [&] {
      const MemoryPrompt& p = memory->served;
      if (!p.fallback.empty()) std::fprintf(stderr, "  (facts served as text, not injected: %s)\n", p.fallback.c_str());
      if (a.quiet) return;
      for (size_t i = 0; i < p.facts.size(); ++i)
        std::fprintf(stderr, "  [fact %lld, score %.2f] %s\n", static_cast<long long>(p.facts[i].id), p.scores[i],
                     p.facts[i].text.c_str());
    };
    std::string answer;
    double ttft = 0;
    bool failed = false;
    int64_t id = -1;
    try {
      id = engine.add_memory_request(memory, sp);
      while (engine.has_unfinished()) {
        for (const RequestOutput& o : engine.step()) {
          if (o.error) std::rethrow_exception(o.error);
          if (o.admitted) show();
          std::fwrite(o.text.data(), 1, o.text.size(), stdout);
          std::fflush(stdout);
          answer += o.text;
          if (o.ttft_s > 0) ttft = o.ttft_s;
        }
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      failed = answer.empty();
      if (id >= 0) engine.abort(id);  // a failed step: the next question starts clean
    }
    if (failed) {  // nothing answered (an unknown user, a prompt too long): the question is dropped
      history.pop_back();
      continue;
    }
    std::fputc('\n', stdout);
    const MemoryPrompt& p = memory->served;
    if (!a.quiet)
      std::fprintf(stderr, "  (%zu prompt tokens, %d injected, %d facts encoded; retrieval %.1f ms, KV %.1f ms, TTFT %.1f ms)\n",
                   p.tokens.size(), p.injected ? p.injected->num_injected() : 0, p.encoded, p.retrieve_ms, p.kv_ms,
                   ttft * 1e3);
    history.push_back({"assistant", answer});
    if (a.remember || a.remember_replies) {
      std::vector<NewFact> turns(1);
      turns[0].text = line;
      turns[0].source.speaker = a.user;
      if (a.remember_replies) {
        turns.emplace_back();
        turns[1].text = answer;
        turns[1].source.speaker = "assistant";
      }
      mem.store->add_turns(a.tenant, a.user, conversation, turns);
      mem.retriever->refresh(a.tenant, a.user);  // dense: embed the new turns now, not at the next question
    }
  }
}

}  // namespace

void register_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "interactive chat that retrieves and injects the user's memory");
  add_model_options(*cmd, a->model);
  add_memory_options(*cmd, a->memory, true);
  cmd->add_option("--user,-u", a->user, "whose memory")->required();
  cmd->add_option("--tenant", a->tenant, "tenant of the user")->capture_default_str();
  cmd->add_option("--mode", a->mode, "inject | text | off")->capture_default_str();
  cmd->add_option("--order", a->order, "rank (best fact last) | time")->capture_default_str();
  cmd->add_option("--system", a->system, "system prompt");
  cmd->add_option("--max-tokens,-n", a->max_tokens, "tokens per answer")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  add_sampling_options(*cmd, a->sampling);
  cmd->add_flag("--remember", a->remember, "store what the user says as conversation turns");
  cmd->add_flag("--remember-replies", a->remember_replies, "store the answers too (the model's words become memories)");
  cmd->add_flag("--quiet,-q", a->quiet, "do not print facts and timings");
  cmd->callback([a] { run_chat(*a); });
}

}  // namespace inferscale::cli
