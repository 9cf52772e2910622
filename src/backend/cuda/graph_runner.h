// The one place that decides how a forward of the CUDA backend runs: eagerly, or through the CUDA
// graph of its bucket (graph_batch.h says which batches have one and how they are padded). The
// ops (CudaForwardOps) only launch kernels; they do not know whether they are being recorded.
//
//   eager    run_forward: ops.begin, the architecture's ops, ops.finish
//   warm     the padded batch eagerly in the graph workspace, which sizes every buffer the graph
//            will point into; those pointers and the launch shape are recorded
//   capture  the next forward of the bucket finding the same pointers and shape: ops.begin (the
//            metadata upload stays outside the graph), the architecture's ops recorded on the
//            stream, instantiated, then launched
//   replay   every later one: ops.begin, then the graph; no op runs on the host
//
// A graph holds the graph workspace's addresses and the RoPE table's: a forward finding others (a
// bigger bucket grew a buffer, the table grew) warms up again, then captures again. A forward
// that throws leaves its graph to be warmed up again.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_forward_ops.h"
#include "backend/cuda/graph_batch.h"
#include "model/architecture.h"

namespace inferscale {

// One bucket's graph and what it was recorded with.
struct ForwardGraph {
  ForwardGraph() = default;
  ForwardGraph(const ForwardGraph&) = delete;
  ForwardGraph& operator=(const ForwardGraph&) = delete;
  ~ForwardGraph() { reset(); }
  void reset() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    exec = nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  CudaForwardOps::GraphState state;  // at the last warm-up, and at capture
  bool warm = false;                 // a warm-up sized every buffer of `state`
  ForwardResult result;              // the captured forward's result rows (in the graph workspace)
};

class GraphRunner {
 public:
  // scratch_block: the first block past the cache's, where padding goes (graph_batch.h);
  // max_position: the model's last position (graph_shape).
  GraphRunner(Architecture& arch, CudaForwardOps& ops, cudaStream_t stream, int32_t scratch_block,
              int32_t block_size, int64_t vocab_size, int32_t max_position)
      : arch_(arch), ops_(ops), stream_(stream), scratch_block_(scratch_block), block_size_(block_size),
        vocab_size_(vocab_size), max_position_(max_position) {}

  // Graphs for decode steps and short prefills; off: every forward eager.
  void set_enabled(bool on) { enabled_ = on; }
  // One forward of `b`, queued: ops.complete() fills `out` (CudaForwardOps::finish).
  void run(const ForwardBatch& b, ForwardOutput& out);
  const GraphStats& stats() const { return stats_; }

 private:
  enum class Phase { kWarm, kCapture, kReplay };
  Phase phase_of(const ForwardGraph& g) const;
  ForwardResult warm(ForwardGraph& g);
  void capture(ForwardGraph& g);
  ForwardGraph& graph_for(const ForwardBatch& b, GraphShape shape);

  Architecture& arch_;
  CudaForwardOps& ops_;
  cudaStream_t stream_;
  int32_t scratch_block_, block_size_;
  int64_t vocab_size_;
  int32_t max_position_;
  bool enabled_ = true;
  // A graph keeps the launch mode it was captured with (PDL edges or plain ones), its decode
  // attention kernel and whether it reads facts in place (its kernels' arguments differ): key
  // (shape kind, bucket, output kind, argmax span, decode attention, PDL, facts in place).
  std::map<std::tuple<int, int32_t, int, int64_t, int, bool, bool>, std::unique_ptr<ForwardGraph>> graphs_;
  ForwardBatch padded_;  // the padded batch of a graph forward (reused)
  GraphStats stats_;
};

}  // namespace inferscale
