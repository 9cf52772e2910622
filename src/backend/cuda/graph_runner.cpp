#include "backend/cuda/graph_runner.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "util/check.h"

namespace inferscale {

void GraphRunner::run(const ForwardBatch& b, ForwardOutput& out) {
  const GraphShape shape = enabled_ ? graph_shape(b, max_position_) : GraphShape{};
  if (shape.kind == GraphShape::Kind::kNone) {
    run_forward(arch_, ops_, b, out);
    return;
  }
  ops_.check(b);  // the real batch against the real cache; the padded one also reaches the scratch blocks
  ForwardGraph& g = graph_for(b, shape);
  pad_for_graph(b, shape, scratch_block_, block_size_, padded_);
  ForwardResult r;
  try {
    ops_.begin_graph(padded_, arch_.mask());
    switch (phase_of(g)) {
      case Phase::kWarm: r = warm(g); break;
      case Phase::kCapture: capture(g); [[fallthrough]];
      case Phase::kReplay:
        CUDA_CHECK(cudaGraphLaunch(g.exec, stream_));
        ++stats_.replays;
        r = g.result;
        break;
    }
  } catch (...) {
    ops_.abort_forward();
    g.reset();
    g.warm = false;
    throw;
  }
  // The padded batch's dummies' rows come last: only the real batch's leave the device.
  r.rows.rows = std::min<int64_t>(r.rows.rows, static_cast<int64_t>(b.output_tokens.size()));
  ops_.finish(r.rows, r.ids, out);
}

ForwardGraph& GraphRunner::graph_for(const ForwardBatch& b, GraphShape shape) {
  const auto key = std::make_tuple(static_cast<int>(shape.kind), shape.bucket, static_cast<int>(b.output),
                                   argmax_span(b, vocab_size_), static_cast<int>(ops_.decode_attention()),
                                   cuda::programmatic_launch(), b.reads_facts_in_place());
  std::unique_ptr<ForwardGraph>& g = graphs_[key];
  if (g == nullptr) g = std::make_unique<ForwardGraph>();
  return *g;
}

// Replay when nothing the graph points into has moved; capture after a warm-up with these
// buffers (it sized them all, so the capture allocates nothing); else warm up.
GraphRunner::Phase GraphRunner::phase_of(const ForwardGraph& g) const {
  const bool same = g.state == ops_.graph_state();
  if (same && g.exec != nullptr) return Phase::kReplay;
  if (same && g.warm) return Phase::kCapture;
  return Phase::kWarm;
}

ForwardResult GraphRunner::warm(ForwardGraph& g) {
  g.reset();
  g.warm = false;
  const ForwardResult r = arch_.forward(ops_, padded_);
  g.state = ops_.graph_state();  // after the ops sized their buffers
  g.warm = true;
  ++stats_.eager_warmups;
  return r;
}

void GraphRunner::capture(ForwardGraph& g) {
  g.reset();
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    g.result = arch_.forward(ops_, padded_);
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);  // invalidated or not, the stream leaves capture mode
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  const cudaError_t e = cudaGraphInstantiate(&g.exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(e);
  // The warm-up sized every buffer: a capture that moved one would replay into freed memory.
  IS_CHECK(g.state == ops_.graph_state(), "a buffer grew while a CUDA graph was captured");
  ++stats_.captures;
}

}  // namespace inferscale
