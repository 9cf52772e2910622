#include "cli/rank_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/rank_group.h"
#include "model/tensor_parallel.h"
#include "util/check.h"
#ifdef INFERSCALE_HAS_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/nccl_comm.h"
#endif

namespace inferscale::cli {
namespace {

std::vector<std::string>& command_line() {
  static std::vector<std::string> args;
  return args;
}

// Whether this binary has the rank-worker subcommand (the inferscale CLI; benchmarks that share
// its model options do not).
bool& has_rank_worker() {
  static bool has = false;
  return has;
}

// Handshake messages: a status byte (0 ok) and a text (the error, or a payload).
void say(ByteChannel& c, bool ok, const std::string& text) {
  Wire w;
  w.put(static_cast<uint8_t>(ok ? 0 : 1)).put_bytes(text.data(), text.size());
  c.send_message(w.bytes());
}

std::string hear(ByteChannel& c, int32_t rank, const char* what) {
  WireReader r(c.recv_message());
  const bool ok = r.get<uint8_t>() == 0;
  const auto [p, n] = r.get_bytes();
  IS_REQUIRE(ok, kUnavailable, "tensor-parallel rank {} {}: {}", rank, what, std::string(p, n));
  return std::string(p, n);
}

// Starts `inferscale rank-worker` for rank r with `fds` (its channel ends) kept open across exec.
// The child only calls async-signal-safe functions between fork and exec; it dies with rank 0.
int spawn_worker(const std::vector<std::string>& argv, const std::vector<int>& fds) {
  std::vector<char*> cargv;
  for (const std::string& s : argv) cargv.push_back(const_cast<char*>(s.c_str()));
  cargv.push_back(nullptr);
  const pid_t pid = ::fork();
  IS_REQUIRE(pid >= 0, kResource, "fork: {}", std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int fd : fds) ::fcntl(fd, F_SETFD, 0);
    ::execv("/proc/self/exe", cargv.data());
    ::_exit(127);
  }
  return pid;
}

struct WorkerArgs {
  int32_t rank = 1, ranks = 2;
  bool gpu = false;
  int commands_fd = -1, reduce_fd = -1;
  std::vector<std::string> model_args;  // rank 0's command line after its subcommand
};

// Rank r: its shard of the model, its backend, then rank 0's commands until the end.
void run_rank_worker(const WorkerArgs& w) {
  IS_REQUIRE(w.ranks >= 2 && w.rank >= 1 && w.rank < w.ranks, kInvalidInput, "rank-worker: rank {} of {}", w.rank, w.ranks);
  struct stat st {};
  IS_REQUIRE(::fstat(w.commands_fd, &st) == 0 && S_ISSOCK(st.st_mode), kInvalidInput,
             "rank-worker: --commands-fd {} is not a socket (rank 0 starts this subcommand)", w.commands_fd);
  IS_REQUIRE(w.gpu || (::fstat(w.reduce_fd, &st) == 0 && S_ISSOCK(st.st_mode)), kInvalidInput,
             "rank-worker: --reduce-fd {} is not a socket", w.reduce_fd);
  ByteChannel commands(w.commands_fd);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] [rank " + std::to_string(w.rank) + "] %v");
  ModelArgs a;
  ModelConfig rank_cfg;
  ModelWeights weights;
  BackendOptions bo;
  try {
    CLI::App app;
    add_model_options(app, a);
    app.allow_extras();
    std::vector<std::string> args(w.model_args.rbegin(), w.model_args.rend());  // CLI11 parses a reversed vector
    app.parse(args);
    const Model m = load_model_from_args(a);
    rank_cfg = shard_config(m.config, w.ranks);
    weights = shard_weights(m.weights, m.config, {w.rank, w.ranks});
    bo = backend_options(a, rank_cfg, w.gpu);
    if (!w.gpu) bo = cpu_rank_options(bo, w.ranks);
#ifdef INFERSCALE_HAS_CUDA
    if (w.gpu) IS_REQUIRE(cudaSetDevice(w.rank) == cudaSuccess, kUnsupported, "no CUDA device {}", w.rank);
#endif
  } catch (const std::exception& e) {
    say(commands, false, e.what());
    throw;
  }
  say(commands, true, "");
  const std::string go = hear(commands, 0, "stopped the start");
#ifdef INFERSCALE_HAS_CUDA
  if (w.gpu) {
    NcclComm comm(std::vector<char>(go.begin(), go.end()), w.ranks, w.rank);
    auto be = make_cuda_rank_backend(rank_cfg, weights, bo, comm);
    say(commands, true, "");
    serve_rank(*be, commands, [&] { comm.abort(); });
    return;
  }
#else
  IS_REQUIRE(!w.gpu, kUnsupported, "this build has no CUDA backend");
#endif
  RankReduce reduce{ByteChannel(w.reduce_fd)};
  auto be = make_cpu_rank_backend(rank_cfg, weights, bo, {&reduce, w.rank});
  say(commands, true, "");
  serve_rank(*be, commands, [&] { reduce.shutdown(); });
}

}  // namespace

void set_command_line(int argc, char** argv) { command_line().assign(argv, argv + argc); }

std::unique_ptr<Backend> make_rank_processes(const ModelArgs& a, const Model& m, const BackendOptions& bo, bool gpu) {
  const int32_t N = a.tensor_parallel_size;
  const ModelConfig rank_cfg = shard_config(m.config, N);
  IS_REQUIRE(has_rank_worker() && command_line().size() >= 2, kUnsupported,
             "--tensor-parallel-size: ranks are started by the inferscale binary (serve, generate, chat, memory)");
  RankGroup g;
  std::vector<ByteChannel> reduce_ends;
  for (int32_t r = 1; r < N; ++r) {
    auto [cmd0, cmdr] = ByteChannel::pair();
    std::vector<std::string> argv{"inferscale", "rank-worker", "--rank", std::to_string(r), "--ranks", std::to_string(N),
                                  "--device", gpu ? "cuda" : "cpu", "--commands-fd", std::to_string(cmdr.fd())};
    std::vector<int> fds{cmdr.fd()};
    ByteChannel red_r;
    if (!gpu) {
      auto [red0, red] = ByteChannel::pair();
      reduce_ends.push_back(std::move(red0));
      red_r = std::move(red);
      argv.insert(argv.end(), {"--reduce-fd", std::to_string(red_r.fd())});
      fds.push_back(red_r.fd());
    }
    argv.push_back("--");
    argv.insert(argv.end(), command_line().begin() + 2, command_line().end());
    g.workers.pids.push_back(spawn_worker(argv, fds));
    g.commands.push_back(std::move(cmd0));
  }  // the children's ends close here, in this process
  try {
    for (int32_t r = 1; r < N; ++r) hear(g.commands[static_cast<size_t>(r - 1)], r, "could not start");
    const BackendOptions ro = gpu ? bo : cpu_rank_options(bo, N);
    const ModelWeights weights = shard_weights(m.weights, m.config, {0, N});
#ifdef INFERSCALE_HAS_CUDA
    if (gpu) {
      const std::vector<char> id = NcclComm::unique_id();
      for (auto& c : g.commands) say(c, true, std::string(id.begin(), id.end()));
      IS_REQUIRE(cudaSetDevice(0) == cudaSuccess, kUnsupported, "no CUDA device 0");
      auto comm = std::make_shared<NcclComm>(id, N, 0);
      g.local = make_cuda_rank_backend(rank_cfg, weights, ro, *comm);
      g.abort_reduce = [c = comm.get()] { c->abort(); };
      g.reduce = std::move(comm);
    }
#endif
    if (!gpu) {
      for (auto& c : g.commands) say(c, true, "");
      make_cpu_root_rank(g, rank_cfg, weights, ro, std::move(reduce_ends));
    }
    for (int32_t r = 1; r < N; ++r) hear(g.commands[static_cast<size_t>(r - 1)], r, "could not start");
  } catch (...) {
    // A rank may wait in the NCCL group's start for rank 0: end them all, then RankWorkers
    // waits for them.
    for (auto& c : g.commands) c.shutdown();
    g.workers.kill();
    throw;
  }
  spdlog::info("{} tensor-parallel ranks: this process and {} rank-worker processes ({})", N, N - 1, gpu ? "one GPU each" : "CPU");
  return std::make_unique<RankGroupBackend>(m.config, std::move(g));
}

void register_rank_worker(CLI::App& app) {
  has_rank_worker() = true;
  auto w = std::make_shared<WorkerArgs>();
  CLI::App* cmd = app.add_subcommand("rank-worker", "one tensor-parallel rank, started by --tensor-parallel-size");
  cmd->group("");  // hidden: rank 0 starts it
  cmd->add_option("--rank", w->rank)->required();
  cmd->add_option("--ranks", w->ranks)->required();
  cmd->add_option("--device", w->gpu)->transform(CLI::CheckedTransformer(std::map<std::string, bool>{{"cpu", false}, {"cuda", true}}));
  cmd->add_option("--commands-fd", w->commands_fd)->required();
  cmd->add_option("--reduce-fd", w->reduce_fd);
  cmd->add_option("model_args", w->model_args);
  cmd->callback([w] { run_rank_worker(*w); });
}

}  // namespace inferscale::cli
