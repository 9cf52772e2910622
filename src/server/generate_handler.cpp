#include "server/generate_handler.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/api_response.h"
#include "server/choice_outputs.h"
#include "server/connection_watch.h"
#include "server/memory_writeback.h"
#include "server/prompt_builder.h"
#include "server/tenant.h"

namespace inferscale::server {
namespace {

// How long a waiting HTTP thread sleeps before it looks at its connection again.
constexpr std::chrono::milliseconds kPollInterval{50};

const char* endpoint_name(ApiKind k) { return k == ApiKind::kChat ? "chat" : "completion"; }

// One request's result so far, and its metrics once it ends (exactly once).
struct Progress {
  ApiKind kind;
  ServerMetrics& metrics;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  Usage usage;
  bool recorded = false;
  RequestOutput all;  // non-streaming: every output's tokens and logprobs, for the ChoiceOutputs

  void add(const RequestOutput& o) {
    text += o.text;
    if (o.num_prompt_tokens > 0) usage.prompt_tokens = o.num_prompt_tokens;
    usage.completion_tokens = o.num_output_tokens;
    usage.cached_tokens = o.num_cached_tokens;
    usage.injected_tokens = o.num_injected_tokens;
    if (o.ttft_s > 0) metrics.record_ttft(o.ttft_s);
    if (o.finished) finish = o.finish;
  }
  void keep(const RequestOutput& o) {
    all.new_tokens.insert(all.new_tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
    all.logprobs.insert(all.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    if (!o.prompt_logprobs.empty()) all.prompt_logprobs = o.prompt_logprobs;
  }
  void end(const std::string& outcome) {
    if (recorded) return;
    recorded = true;
    metrics.record_request(endpoint_name(kind), outcome, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens);
  }
};

// Everything a streaming response needs after the handler has returned (httplib calls the
// content provider, then the releaser, on the same HTTP thread).
struct StreamingState {
  std::shared_ptr<RequestStream> stream;
  ResponseMeta meta;
  bool include_usage = false;
  ConnectionWatch watch;
  Progress progress;
  std::vector<RequestOutput> early;  // outputs that arrived while waiting for acceptance
  std::shared_ptr<const MemoryReport> memory;  // null without a memory object; complete (accepted)
  ChoiceOutputs outputs;                       // logprobs, echo, token ids, chunk by chunk
  std::optional<WriteBack> writeback;          // memory.store: written before the finish chunk
};

bool reply_complete(FinishReason r) { return r == FinishReason::kStop || r == FinishReason::kLength; }

// Streams until the request ends. Returns false when the client is gone (httplib then drops the
// connection; the releaser cancels the request).
bool stream_events(StreamingState& st, httplib::DataSink& sink) {
  auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
  const ChoiceFields head = st.outputs.first();
  if ((st.meta.kind == ApiKind::kChat || st.memory || !head.empty()) &&
      !write(sse_first_chunk(st.meta, st.include_usage, st.memory.get(), &head)))
    return false;
  std::vector<RequestOutput> outs = std::move(st.early);
  for (;;) {
    for (const RequestOutput& o : outs) {
      st.progress.add(o);
      const ChoiceFields extra = st.outputs.next(o);
      if ((!o.text.empty() || !extra.empty()) && !write(sse_text_chunk(st.meta, o.text, st.include_usage, &extra)))
        return false;
      if (o.finished) {
        // memory.store: durable before the finish chunk tells the client the reply is complete.
        std::optional<std::vector<int64_t>> stored;
        if (st.writeback && reply_complete(o.finish)) {
          try {
            stored = st.writeback->write(st.progress.text);
          } catch (...) {
            st.progress.end("error");
            if (write(sse_error(api_error_from(std::current_exception()).body()))) write(kSseDone);
            sink.done();
            return true;
          }
        }
        if (!write(sse_finish_chunk(st.meta, o.finish, st.include_usage, stored ? &*stored : nullptr))) return false;
        if (st.include_usage && !write(sse_usage_chunk(st.meta, st.progress.usage))) return false;
        st.progress.end(finish_reason_text(o.finish));
        write(kSseDone);
        sink.done();
        return true;
      }
    }
    RequestStream::Poll p = st.stream->poll(kPollInterval);
    outs = std::move(p.outputs);
    if (p.error && outs.empty()) {
      // Too late for a status code: the error travels as an event, as OpenAI's API does, and the
      // stream still ends the way clients wait for.
      st.progress.end("error");
      if (write(sse_error(api_error_from(p.error).body()))) write(kSseDone);
      sink.done();
      return true;
    }
    if (p.done && outs.empty()) return false;  // cancelled
    if (outs.empty() && st.watch.closed()) return false;
  }
}

// What admit() saw: whether the engine accepted the request, and the outputs so far.
struct Admitted {
  bool accepted = false;
  std::vector<RequestOutput> outputs;
};

// Waits until the engine accepted the request (or rejected it: that is still a plain JSON error,
// thrown), and for a non-streaming request until it ends. None when the client went away (the
// request is cancelled).
std::optional<Admitted> admit(RequestStream& stream, bool streaming, const ConnectionWatch& watch, Progress& progress) {
  Admitted a;
  for (;;) {
    RequestStream::Poll p = stream.poll(kPollInterval);
    a.accepted = a.accepted || p.accepted;
    for (RequestOutput& o : p.outputs) a.outputs.push_back(std::move(o));
    if (p.error) {
      progress.end("error");
      throw api_error_from(p.error);
    }
    if (streaming ? (p.accepted || p.done) : p.done) return a;
    if (watch.closed()) {
      stream.cancel();
      progress.end("cancelled");
      return std::nullopt;
    }
  }
}

void answer_whole(httplib::Response& res, const ResponseMeta& meta, const std::vector<RequestOutput>& outs,
                  Progress& progress, MemoryReport* report, ChoiceOutputs& outputs, std::optional<WriteBack>& writeback) {
  for (const RequestOutput& o : outs) {
    progress.add(o);
    progress.keep(o);
  }
  if (writeback && report && reply_complete(progress.finish)) {  // durable before the body is sent
    try {
      report->stored = writeback->write(progress.text);
    } catch (...) {
      progress.end("error");
      throw;
    }
  }
  progress.end(finish_reason_text(progress.finish));
  const ChoiceFields extra = outputs.next(progress.all);
  res.status = 200;
  res.set_content(response_body(meta, progress.text, progress.finish, progress.usage, report, &extra), "application/json");
}

void answer_stream(httplib::Response& res, std::shared_ptr<StreamingState> st) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [st](size_t, httplib::DataSink& sink) { return stream_events(*st, sink); },
      [st](bool) {
        // However the response ended, an unfinished request must not keep running.
        if (st->progress.recorded) return;
        st->stream->cancel();
        st->progress.end("cancelled");
      });
}

}  // namespace

// A request in four phases: parse, submit (the prompt and what the engine runs), admit (wait for
// the engine to accept it), answer (one JSON body, or a stream of events).
void GenerateHandler::handle(const httplib::Request& req, httplib::Response& res, ApiKind kind) {
  GenerateRequest g = parse(req, kind);
  std::optional<WriteBack> writeback = WriteBack::of(g, memory_);  // memory.store: 400s before any work
  ChoiceOutputs outputs(g, *model_.tokenizer);
  Submitted sub = submit(req, g, outputs);
  Progress progress{kind, metrics_, {}, FinishReason::kNone, {}, false, {}};
  progress.usage.prompt_tokens = sub.prompt_tokens;
  const ResponseMeta meta{kind, new_response_id(kind), unix_now(), model_.name};
  ConnectionWatch watch(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  std::optional<Admitted> admitted = admit(*sub.stream, g.stream, watch, progress);
  if (!admitted) {
    res.status = 499;  // nginx's "client closed request": nobody reads it
    return;
  }
  // Only now may this thread read what the engine thread served: it wrote it before accepting.
  std::shared_ptr<MemoryReport> report = admitted->accepted ? this->report(g, sub) : nullptr;
  if (report) metrics_.record_memory(*report);
  if (admitted->accepted && outputs.needs_prompt())
    outputs.set_prompt(sub.memory ? sub.memory->served.tokens : std::move(sub.prompt));
  if (!g.stream) {
    answer_whole(res, meta, admitted->outputs, progress, report.get(), outputs, writeback);
    return;
  }
  auto st = std::make_shared<StreamingState>(StreamingState{sub.stream, meta, g.include_usage, watch, std::move(progress),
                                                            std::move(admitted->outputs), std::move(report),
                                                            std::move(outputs), std::move(writeback)});
  answer_stream(res, std::move(st));
}

GenerateRequest GenerateHandler::parse(const httplib::Request& req, ApiKind kind) const {
  const nlohmann::json body = parse_json_body(req.body);
  GenerateRequest g =
      kind == ApiKind::kChat ? parse_chat_request(body, model_.sampling) : parse_completion_request(body, model_.sampling);
  if (g.memory) apply_tenant_header(req, *g.memory);
  if (g.model != model_.name)
    throw ApiError(404, "invalid_request_error", fmt::format("the model '{}' does not exist; this server serves '{}'", g.model, model_.name),
                   "model", "model_not_found");
  return g;
}

GenerateHandler::Submitted GenerateHandler::submit(const httplib::Request& req, GenerateRequest& g,
                                                   const ChoiceOutputs& outputs) {
  const PromptLimits limits{engine_.max_model_len(), engine_.num_blocks() * engine_.block_size()};
  const PromptFit fit{limits, g.max_tokens_given ? std::optional<int32_t>(g.sampling.max_tokens) : std::nullopt};
  PreparedPrompt prompt = build_prompt(g, *model_.tokenizer, model_.chat_template, memory_, fit);
  Submitted out;
  Submission sub{std::move(prompt.ids), g.sampling, {}, 0};
  // Tenants never share prefix-cache blocks (vLLM's cache_salt): a hit would tell one tenant
  // what another sent, through its latency.
  sub.cache_salt = tenant_cache_salt(generation_tenant(req, g.memory ? &*g.memory : nullptr));
  if (prompt.memory) {
    // Memory: the prompt exists only once the engine has planned it, which checks `fit`.
    out.memory = prompt.memory;
    sub.memory = std::move(prompt.memory);
  } else {
    fit_to_context(g, static_cast<int64_t>(sub.prompt.size()), limits);
    sub.sampling.max_tokens = g.sampling.max_tokens;
    if (outputs.needs_prompt()) out.prompt = sub.prompt;
  }
  out.prompt_tokens = static_cast<int64_t>(sub.prompt.size());
  out.stream = engine_.submit(std::move(sub));
  return out;
}

// Mode "off" asks no provider and reports no facts.
std::shared_ptr<MemoryReport> GenerateHandler::report(const GenerateRequest& g, const Submitted& sub) const {
  if (!g.memory) return nullptr;
  if (!sub.memory) {
    auto r = std::make_shared<MemoryReport>();
    r->mode = g.memory->mode;
    return r;
  }
  return std::make_shared<MemoryReport>(served_report(*sub.memory));
}

}  // namespace inferscale::server
