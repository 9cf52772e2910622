// One file per architecture family sequences a forward in ForwardOps (model/forward_ops.h):
//   llama.cpp   Llama, Qwen2, Qwen3, Mistral (decoders: RMSNorm, RoPE, GQA, SwiGLU)
//   bert.cpp    BertModel encoders (all-MiniLM, bge, e5, gte: LayerNorm, absolute positions, GELU)
// A backend makes the architecture of its config, lets it prepare its weights on the backend's
// ops once, then runs every forward through it: ops.begin(), the architecture's ops, ops.finish()
// of the result (run_forward). The calls around the architecture are the backend's, so that a
// backend can replay a recorded forward's ops instead (the CUDA backend's graphs).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/forward_batch.h"
#include "model/forward_ops.h"
#include "model/weights.h"

namespace inferscale {

class Architecture {
 public:
  virtual ~Architecture() = default;
  // Prepares `w` on `ops` (throws kInvalidInput naming a tensor of the wrong shape).
  virtual void load(ForwardOps& ops, const ModelWeights& w) = 0;
  // Benchmarks: seeded random weights made by the backend (matrices normal(0, 0.02), norms 1, biases 0).
  virtual void load_random(ForwardOps& ops, uint64_t seed) = 0;
  // The layers of one forward of `b`, between ops.begin(b, mask()) and ops.finish(): checks `b`
  // against the model (kUnsupported), then runs its ops and returns the result rows. Empty for a
  // batch without tokens (no op runs).
  virtual ForwardResult forward(ForwardOps& ops, const ForwardBatch& b) = 0;
  // Whether a forward attends causally (decoders) or to whole sequences (encoders).
  virtual AttnMask mask() const = 0;
};

// One eager forward (Backend::forward's contract, backend.h): begin, the architecture's ops,
// finish; an empty result clears `out`.
void run_forward(Architecture& arch, ForwardOps& ops, const ForwardBatch& b, ForwardOutput& out);

std::unique_ptr<Architecture> make_llama_architecture(const ModelConfig& cfg);
std::unique_ptr<Architecture> make_bert_architecture(const ModelConfig& cfg);
// The one for cfg.arch.
std::unique_ptr<Architecture> make_architecture(const ModelConfig& cfg);

// `t`, after checking it is present with `shape`'s number of elements (kInvalidInput naming `role`).
const HostTensor& expect_weight(const HostTensor& t, std::initializer_list<int64_t> shape, const char* role);

}  // namespace inferscale
