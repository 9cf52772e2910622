// The scheduler-side memory connector (vLLM v1's KV-connector split): a request with memory
// enters the engine with a MemoryTicket instead of a prompt, and at admission the engine asks the
// ticket what the request is:
//
//   add_request(ticket)  ->  waiting, unresolved
//   each step, each unresolved request's ticket->resolve(engine), in arrival order:
//     a backend that computes on the host: all of them, before scheduling;
//     one that overlaps its forward with the host (the GPU, Backend::launch_forward): while the
//     step's forward runs, at least one and then as many as the device's time covers (the rest
//     next step, first in line); an engine with nothing else ready asks them all before
//     scheduling. A ticket resolved during a forward is scheduled from the next step on.
//     kReady   the prompt (tokens, injected span): validated, the request becomes an ordinary
//              waiting request, and the step's outputs say so (RequestOutput::admitted): a
//              server accepts its stream then, a CLI shows the facts
//     kEncode  capture sequences to run first ([window][fact], K/V of some tokens kept in pool
//              slots): the engine queues them as internal requests just before this one, so they
//              are prefill work inside the step's token budget, batched with every other
//              request's tokens; their `done` runs when computed; the ticket is asked again later
//     kWait    not yet (facts another request is encoding): asked again next step
//   resolve() throws: the request ends with RequestOutput::error, nothing computed
//   the request leaves the engine (finished, aborted, rejected): ticket->release() (its pins)
//
// Running requests are scheduled before any waiting work, so a cold user's encoding never takes
// a decode's place in a step: it only fills the budget the running requests leave. A request
// whose ticket waits never holds back the ready requests behind it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/request.h"

namespace inferscale {

class Engine;

// Prefill-only work: the sequence runs from position 0 in temporary cache blocks (released when
// done, never offered to the prefix cache) and the pre-RoPE K and V of some tokens are kept.
struct CaptureSeq {
  std::vector<int32_t> tokens;         // [n]
  std::vector<int64_t> capture_slots;  // [n] memory-pool slot keeping token i's K/V, or -1
  // Engine thread, exactly once: true when every token went through a forward (the slots hold
  // their KV), false when the engine dropped the work (Engine::drop_captures, after a failed step).
  std::function<void(bool ok)> done;
};

struct MemoryPlan {
  enum class State { kReady, kEncode, kWait } state = State::kReady;
  // kReady:
  std::vector<int32_t> prompt;
  std::optional<InjectedSpan> injected;
  std::optional<int32_t> max_tokens;  // replaces the request's (it may depend on the prompt's length)
  // kEncode:
  std::vector<CaptureSeq> encode;

  static MemoryPlan wait() { return MemoryPlan{State::kWait, {}, {}, {}, {}}; }
};

class MemoryTicket {
 public:
  virtual ~MemoryTicket() = default;
  // Engine thread, until it returns kReady. What it throws rejects the request.
  virtual MemoryPlan resolve(Engine& engine) = 0;
  // Engine thread, once, when the request leaves the engine for any reason (admitted or not):
  // what the ticket holds for the request (memory-pool pins) goes.
  virtual void release() {}
};

}  // namespace inferscale
