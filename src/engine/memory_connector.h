// The memory connector (vLLM v1's KV-connector split): one object per engine, through which a
// request with memory gets its prompt and its facts' KV. A request with memory enters the engine
// with its RequestMemory (its state, held once, defined by the connector's implementation:
// memory/request_memory.h) instead of a prompt; the engine never looks inside it.
//
// Scheduler side, for each request with memory, on the engine thread:
//   add_memory_request(m)  ->  waiting, unresolved
//   each step, plan(m) for every unresolved request, in arrival order:
//     a backend that computes on the host: all of them, before scheduling;
//     one that overlaps its forward with the host (the GPU, Backend::launch_forward): while the
//     step's forward runs, at least one and then as many as the device's time covers (the rest
//     next step, first in line); an engine with nothing else ready asks them all before
//     scheduling. A request resolved during a forward is scheduled from the next step on.
//     kReady   the prompt (tokens, injected span): validated, the request becomes an ordinary
//              waiting request, and the step's outputs say so (RequestOutput::admitted): a
//              server accepts its stream then, a CLI shows the facts
//     kEncode  capture sequences to run first ([window][fact], K/V of some tokens kept in pool
//              slots): the engine queues them as internal requests just before this one, so they
//              are prefill work inside the step's token budget, batched with every other
//              request's tokens; plan() is asked again later
//     kWait    not yet (facts being encoded, its own or another request's): asked again next step
//     kProbe   a probe to run first (ProbeSeq: the composed prompt with every fact injected, the
//              attention its question pays to each fact token measured): queued as an internal
//              request just before this one; plan() is asked again once it is done
//   plan() throws: the request ends with RequestOutput::error, nothing computed
//   request_finished(m): once, when the request leaves the engine (finished, aborted, rejected):
//              what the connector holds for it (memory-pool pins) goes
//
// Worker side, as named phases of the step (Engine::step):
//   write_loads(): in the schedule phase, after the plans asked there and before the scheduler
//              runs, when no forward of this engine is running (scheduling ahead: the engine
//              queues no forward behind the running one while has_loads(), and writes them once
//              that one ends): the KV that plans read from KV files is written into its pool
//              slots. When any was, the engine plans every unresolved request again at once, so a
//              request whose facts were in files is ready in this step, and no device write ever
//              runs beside a forward.
//   captures_finished(done, dropped): "save", after the forward that computed the last tokens of
//              the captures `done` (their KV is in the pool slots: the entries become servable,
//              and KV files are written from them), or after the engine dropped captures
//              (`dropped`: Engine::drop_captures, after a failed step; their entries go). Never
//              throws.
//
// Running requests are scheduled before any waiting work, so a cold user's encoding never takes
// a decode's place in a step: it only fills the budget the running requests leave. A request
// whose memory waits never holds back the ready requests behind it.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/request.h"

namespace inferscale {

struct RequestMemory;  // memory/request_memory.h

// Prefill-only work: the sequence runs from position 0 in temporary cache blocks (released when
// done, never offered to the prefix cache) and the pre-RoPE K and V of some tokens are kept.
struct CaptureSeq {
  std::vector<int32_t> tokens;         // [n]
  std::vector<int64_t> capture_slots;  // [n] memory-pool slot keeping token i's K/V, or -1
  int64_t job = 0;                     // the connector's name for it (captures_finished)
};

// What a probe measured (ProbeSeq), shared by the engine, which fills it, and the connector.
struct ProbeResult {
  enum class State { kRunning, kDone, kDropped } state = State::kRunning;
  // kDone: [injected span tokens] the attention weight on each injected token, summed over the
  // probed rows, the layers from ProbeSeq::first_layer on and every query head.
  std::vector<float> mass;
};

// Prefill-only work that measures attention: `tokens` with the span `injected` (every token
// injected, copied into the probe's temporary blocks) computed as a request would compute them,
// and the attention weights of the rows [score_from, tokens) on the span's tokens in the layers
// [first_layer, num_layers) summed into `result` (ForwardBatch::probes). The blocks are released
// when done, never offered to the prefix cache. A question-aware recompute selector reads the
// result (memory/compose/recompute.h).
struct ProbeSeq {
  std::vector<int32_t> tokens;
  InjectedSpan injected;  // no recompute mask
  int32_t score_from = 0;  // >= injected.end
  int32_t first_layer = 0;  // < the model's layers
  std::shared_ptr<ProbeResult> result;
};

struct MemoryPlan {
  enum class State { kReady, kEncode, kWait, kProbe } state = State::kReady;
  // kReady:
  std::vector<int32_t> prompt;
  std::optional<InjectedSpan> injected;
  std::optional<int32_t> max_tokens;  // replaces the request's (it may depend on the prompt's length)
  // kEncode:
  std::vector<CaptureSeq> encode;
  // kProbe: run first; plan() is asked again until the result is in (then kReady), or dropped.
  std::optional<ProbeSeq> probe;

  static MemoryPlan wait() { return MemoryPlan{State::kWait, {}, {}, {}, {}, {}}; }
};

class MemoryConnector {
 public:
  virtual ~MemoryConnector() = default;
  // Scheduler side (engine thread).
  virtual MemoryPlan plan(RequestMemory& m) = 0;
  virtual void request_finished(RequestMemory& m) = 0;
  // Worker side (engine thread). write_loads returns whether it wrote any; has_loads whether
  // plans read KV from files that write_loads has not written yet.
  virtual bool write_loads() = 0;
  virtual bool has_loads() const = 0;
  virtual void captures_finished(std::span<const int64_t> done, std::span<const int64_t> dropped) = 0;
};

// A connector that passes every call to another: the base of decorators that watch or amend
// plans (a benchmark's timing, a test's checks). `inner` must outlive it.
class ForwardingConnector : public MemoryConnector {
 public:
  explicit ForwardingConnector(MemoryConnector& inner) : inner_(inner) {}
  MemoryPlan plan(RequestMemory& m) override { return inner_.plan(m); }
  void request_finished(RequestMemory& m) override { inner_.request_finished(m); }
  bool write_loads() override { return inner_.write_loads(); }
  bool has_loads() const override { return inner_.has_loads(); }
  void captures_finished(std::span<const int64_t> done, std::span<const int64_t> dropped) override {
    inner_.captures_finished(done, dropped);
  }

 protected:
  MemoryConnector& inner_;
};

}  // namespace inferscale
