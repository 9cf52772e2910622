// `inferscale serve`: the OpenAI-compatible HTTP server.
//
//   serve [model options: --model PATH|demo, --kv-cache-mb, ...] [--host 127.0.0.1] [--port 8000]
//         [--max-pending N] [--http-threads N] [--shutdown-timeout S]
//         [--read-timeout S] [--keep-alive-timeout S] [--write-timeout S] [--listen-backlog N]
//         [--data-dir D | --store URL] [--memory-k K] [--window W] ...   per-user memory (requests'
//                                                        `memory` object) in SQLite or a shared PostgreSQL
//         [--api-keys FILE]                              API keys -> tenants (server/api_keys.h)
//
// Threads: this (main) thread loads the model, then waits for SIGINT/SIGTERM (and SIGHUP, which
// reloads the API keys; a bad file keeps the keys in use) with sigwait; the signals are blocked
// before any other thread exists, so every thread inherits the mask and only that wait sees them. The AsyncEngine's thread builds and runs the engine; cpp-httplib's pool
// serves HTTP. Shutdown: stop taking requests (503 with Retry-After), let live ones finish for
// --shutdown-timeout seconds, abort the rest (a stream gets an error event, then [DONE]), then
// close idle connections at once and the listening socket: the process exits within the timeout
// plus about a second.
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/memory_options.h"
#include "cli/model_options.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/api_keys.h"
#include "server/async_engine.h"
#include "server/http_server.h"
#include "server/memory_bridge.h"
#include "util/check.h"

namespace inferscale::cli {
namespace {

// open_memory(), waiting while a PostgreSQL store cannot be reached (a replica started before its
// database): a line to the log every 5 s, a retry every second, and the listening socket opened
// only once memory works, so a load balancer's health check keeps the replica out meanwhile.
// SIGINT/SIGTERM while waiting stop the start (an empty result).
OpenedMemory open_memory_waiting(const MemoryArgs& args, bool gpu, const sigset_t& stop_signals) {
  for (int attempt = 0;; ++attempt) {
    try {
      return open_memory(args, gpu);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kUnavailable) throw;
      if (attempt % 5 == 0) spdlog::error("{}; waiting for it (retried every second)", e.what());
    }
    const timespec second{1, 0};
    siginfo_t info;
    const int sig = sigtimedwait(&stop_signals, &info, &second);
    if (sig == SIGINT || sig == SIGTERM) {
      spdlog::info("stopped while waiting for the memory store");
      return {};
    }
  }
}

struct ServeArgs {
  ModelArgs model;
  MemoryArgs memory;
  std::string host = "127.0.0.1";
  int port = 8000;
  int64_t max_pending = 256;
  server::HttpServerOptions http;  // host and port are set from the fields above
  double shutdown_timeout_s = 5.0;
  std::string api_keys;  // "": no keys, every route open
  std::string served_model_name;  // "": the model's own name (GGUF file stem, HF directory name)
  bool no_background_encoding = false;  // facts' KV only on demand (the first request that retrieves them)
  double background_step_ms = 200;      // EngineOptions::background_step_seconds, in ms (0: fixed caps)
};

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

void run_serve(const ServeArgs& a) {
  IS_REQUIRE(a.port >= 0 && a.port <= 65535, kInvalidInput, "--port must be in 0..65535, got {}", a.port);
  IS_REQUIRE(a.shutdown_timeout_s >= 0, kInvalidInput, "--shutdown-timeout must be >= 0");
  IS_REQUIRE(a.background_step_ms >= 0, kInvalidInput, "--background-step-ms must be >= 0, got {}", a.background_step_ms);

  // Before any thread starts (model loading may start OpenMP workers): see the header comment.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);

  // Keys first: a bad file fails the start before the model loads.
  std::shared_ptr<server::ApiKeys> keys;
  if (!a.api_keys.empty()) {
    keys = std::make_shared<server::ApiKeys>(a.api_keys);
    spdlog::info("API keys: {} key(s) from {} (SIGHUP reloads it); every route but GET /health needs one", keys->size(),
                 a.api_keys);
  }

  spdlog::info("loading model '{}'", a.model.model);
  const Model model = load_model_from_args(a.model);
  const ModelConfig& cfg = model.config;
  // Memory (optional): the store and retriever live here; the bridge hands work to the engine thread.
  OpenedMemory memory;
  std::unique_ptr<server::MemoryBridge> bridge;
  if (memory_enabled(a.memory)) {
    memory = open_memory_waiting(a.memory, gpu_selected(a.model), stop_signals);
    if (!memory.store) return;  // stopped while waiting for the store
    const MemoryOptions mo = memory_options(a.memory, *memory.store);
    bridge = std::make_unique<server::MemoryBridge>(*memory.store, *memory.retriever, model, mo);
    spdlog::info("memory: store {} ({} users), retrieval {}, default k {}, window {}", memory.store->describe(),
                 memory.store->users().size(), memory.retriever->name(), a.memory.k, mo.default_window);
  }

  server::AsyncEngineOptions ao;
  ao.max_pending = a.max_pending;
  // The memory service is the engine's connector; facts written through the API get their KV
  // encoded between requests (memory_bridge.h).
  if (bridge) bridge->attach(ao, !a.no_background_encoding);
  // The backend is built on the engine thread, which runs it.
  EngineOptions eo = engine_options(a.model);
  eo.background_step_seconds = a.background_step_ms / 1000.0;
  server::AsyncEngine engine([&] { return std::make_unique<Engine>(make_backend(a.model, model), model.tokenizer, eo); }, ao);
  if (bridge) bridge->set_wake([&engine] { engine.request_idle_work(); });

  const bool gpu = picks_cuda(a.model, cfg);
  // bf16 on the GPU, f32 on the CPU, or FP8 codes and scales (--kv-cache-dtype fp8)
  const int64_t kv_per_token = kv_store_bytes_per_token(cfg, gpu, a.model.kv_cache_fp8());
  const int64_t cache_tokens = engine.num_blocks() * engine.block_size();
  const WeightStats ws = weight_stats(model.weights);
  spdlog::info("memory: weights {:.1f} MiB as stored ({}), KV cache {:.1f} MiB = {} blocks of {} tokens ({} tokens, "
               "{:.1f} KiB per token), max model len {}",
               mib(ws.bytes), ws.dtypes_summary(), mib(cache_tokens * kv_per_token), engine.num_blocks(), engine.block_size(),
               cache_tokens, static_cast<double>(kv_per_token) / 1024, engine.max_model_len());

  server::HttpServerOptions ho = a.http;
  ho.host = a.host;
  ho.port = a.port;
  ho.api_keys = keys;
  server::ServedModel served = server::ServedModel::from(model);
  if (!a.served_model_name.empty()) served.name = a.served_model_name;
  const std::string served_name = served.name;
  server::HttpServer http(std::move(served), engine, ho, bridge.get());
  http.start();
  spdlog::info("serving '{}' at {}/v1 (OpenAI API; GET /health, /metrics); Ctrl-C to stop", served_name, http.url());

  int sig = 0;
  for (;;) {
    sigwait(&stop_signals, &sig);
    if (sig != SIGHUP) break;
    if (keys) keys->reload();
    else spdlog::info("SIGHUP received: no --api-keys file to reload");
  }
  spdlog::info("{} received: finishing requests in flight (up to {} s), then stopping", sig == SIGINT ? "SIGINT" : "SIGTERM",
               a.shutdown_timeout_s);
  engine.shutdown(std::chrono::milliseconds(static_cast<int64_t>(a.shutdown_timeout_s * 1000)));
  http.stop();
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  spdlog::info("stopped");
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* s = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  add_model_options(*s, a->model);
  add_memory_options(*s, a->memory, false);
  s->add_option("--host", a->host, "Address to listen on")->capture_default_str();
  s->add_option("--port", a->port, "Port to listen on (0: any free port, logged at start)")->capture_default_str();
  s->add_option("--max-pending", a->max_pending, "Requests queued or running before new ones get 503")->capture_default_str();
  s->add_option("--http-threads", a->http.http_threads, "Connections served at once, a thread each (0 = max-pending + 1024)")
      ->capture_default_str();
  s->add_option("--read-timeout", a->http.read_timeout_s, "Seconds a request's headers and body may take to arrive in full")
      ->capture_default_str();
  s->add_option("--keep-alive-timeout", a->http.keep_alive_timeout_s, "Seconds an idle connection is kept open between requests")
      ->capture_default_str();
  s->add_option("--write-timeout", a->http.write_timeout_s, "Seconds one write of an answer may wait for a client that does not read")
      ->capture_default_str();
  s->add_option("--listen-backlog", a->http.listen_backlog, "Connections the kernel queues before they are accepted")
      ->capture_default_str();
  s->add_flag("--no-background-encoding", a->no_background_encoding,
              "Encode a written fact's KV only when a request first retrieves it (default: between requests, soon "
              "after the write)");
  s->add_option("--background-step-ms", a->background_step_ms,
                "Background encoding: size its steps so that one takes about this long (a request arriving during "
                "one waits at most that), from the engine's own timing; 0: fixed caps of 256 tokens a step (64 "
                "beside requests)")
      ->capture_default_str();
  s->add_option("--served-model-name", a->served_model_name,
                 "The name clients send as \"model\" and GET /v1/models lists (default: the model's own name), as "
                 "vLLM's flag: an application written for another name keeps it")
      ->check([](const std::string& n) -> std::string {
        if (n.empty() || n.size() > 256) return "the name must be 1 to 256 bytes";
        for (unsigned char c : n)
          if (c < 0x20 || c == 0x7f) return "the name must not hold control characters";
        return "";
      });
  s->add_option("--api-keys", a->api_keys,
                 "File of 'KEY TENANT' lines (KEY or sha256:HEX; # comments): every route but GET /health then needs a "
                 "key, and the tenant is the key's; SIGHUP reloads it");
  s->add_option("--shutdown-timeout", a->shutdown_timeout_s, "Seconds requests in flight get to finish on SIGINT/SIGTERM")
      ->capture_default_str();
  s->callback([a] { run_serve(*a); });
}

}  // namespace inferscale::cli
