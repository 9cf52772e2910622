// Tensor-parallel ranks as one Backend (model/tensor_parallel.h says how the model splits).
//
// Rank 0 runs in the serving process: its own rank backend plus a command channel to each other
// rank (util/byte_channel.h). Those run serve_rank(): a loop that reads a command, runs it on
// its rank's backend and replies. The engine sees RankGroupBackend, the whole model:
//   forward    the batch goes to every rank, then rank 0 runs it too; the ranks meet in the
//              forward's all-reduces (their backend's business: a channel sum on the CPU, NCCL on
//              GPUs). Every rank computes the same output rows; rank 0's are the answer. Probes'
//              attention mass is per rank's heads, so the replies carry it and rank 0 adds it up.
//   inject     every rank, over its kv heads.
//   pool / cache rows  move whole-head ([L, n, KS]): rank r reads and writes columns
//              [r KS/N, (r+1) KS/N) (its kv heads), so KV files are the same at any N.
// A forward is checked on rank 0 before it is sent, so a malformed batch fails alone. A failure
// after that, on any rank, ends the group: every channel is shut (ranks waiting in an all-reduce
// or for a command see it closed), and every later call throws.
//
// Ranks 1.. are threads (the CPU: backend/cpu/cpu_tensor_parallel.cpp) or processes, one per
// GPU (started by the CLI before any GPU work); RankWorkers joins them.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "util/byte_channel.h"

namespace inferscale {

// Runs the commands of rank 0's channel on `rank` until rank 0 stops it or closes the channel.
// on_failed_forward runs when a forward throws (after rank 0 sent it, so the group is over): it
// shuts what the rank's all-reduce waits on.
void serve_rank(Backend& rank, ByteChannel& commands, const std::function<void()>& on_failed_forward = {});

// The threads or processes of ranks 1.. (joined, or waited for, on destruction).
struct RankWorkers {
  std::vector<std::thread> threads;
  std::vector<int> pids;
  RankWorkers() = default;
  RankWorkers(RankWorkers&&) = default;
  RankWorkers& operator=(RankWorkers&&) = default;
  // Ends the processes now (SIGKILL): after a failure a rank may wait in a GPU collective that
  // nothing will complete. Threads are ended by their channels' shutdown instead.
  void kill();
  ~RankWorkers();
};

// What RankGroupBackend runs: rank 0's backend, a command channel to each other rank
// (commands[r - 1]: rank r's), their threads or processes, and rank 0's side of the all-reduce:
// `reduce` keeps it alive while `local` uses it, `abort_reduce` shuts it (so ranks waiting in it
// stop waiting).
struct RankGroup {
  std::unique_ptr<Backend> local;
  std::vector<ByteChannel> commands;
  RankWorkers workers;
  std::shared_ptr<void> reduce;
  std::function<void()> abort_reduce;
};

class RankGroupBackend final : public Backend {
 public:
  // cfg: the whole model.
  RankGroupBackend(const ModelConfig& cfg, RankGroup group);
  ~RankGroupBackend() override;

  std::string name() const override { return local_->name(); }
  const ModelConfig& config() const override { return cfg_; }
  int32_t block_size() const override { return local_->block_size(); }
  int64_t num_cache_blocks() const override { return local_->num_cache_blocks(); }
  int64_t num_pool_blocks() const override { return local_->num_pool_blocks(); }
  DType pool_dtype() const override { return local_->pool_dtype(); }
  bool reads_facts_in_place() const override { return local_->reads_facts_in_place(); }
  int32_t ranks() const { return static_cast<int32_t>(commands_.size()) + 1; }

  using Backend::forward;
  void forward(const ForwardBatch& b, ForwardOutput& out) override;
  void inject(const InjectBatch& b) override;
  void read_pool(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) override;
  void write_pool(const std::vector<int64_t>& slots, const HostTensor& k, const HostTensor& v) override;
  void read_cache(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) override;

 private:
  // Sends message(r) to each other rank r, runs `local` here, then reads each rank's reply into
  // replies[r - 1]. A failure ends the group.
  template <typename MessageFn, typename LocalFn>
  std::vector<std::vector<char>> on_every_rank(const MessageFn& message, const LocalFn& local);
  std::vector<char> reply_of(int32_t rank);
  [[noreturn]] void fail(const std::string& why);
  void gather_rows(const std::vector<int64_t>& slots, bool pool, HostTensor& k, HostTensor& v);

  // Destroyed last to first: rank 0's backend, then its all-reduce, the channels, the workers.
  ModelConfig cfg_;
  RankWorkers workers_;
  std::vector<ByteChannel> commands_;
  std::shared_ptr<void> reduce_;
  std::function<void()> abort_reduce_;
  std::unique_ptr<Backend> local_;
  std::string failed_;  // why the group ended; empty while it serves
};

}  // namespace inferscale
