// --tensor-parallel-size N from the command line: the model's ranks as processes, one per GPU
// (on the CPU, one per rank), this process being rank 0 (backend/rank_group.h). Ranks 1.. are
// this binary run again as the hidden subcommand `rank-worker`, each with its end of a command
// channel, and reading the model options from this process's own command line.
//
// Start-up, rank 0 and each rank r:
//   1. rank r loads the model and takes its shard; it says "loaded" (or why not, and exits);
//   2. rank 0 sends "go": on GPUs the NCCL group's id; every rank joins the group (rank r on
//      CUDA device r), makes its rank backend and says "ready";
//   3. rank r serves rank 0's commands until rank 0 stops it or exits (a rank dies with rank 0).
// The all-reduce is NCCL on GPUs and the channel sum of backend/cpu/rank_reduce.h on the CPU
// (a second channel per rank).
#pragma once
#include <CLI/CLI.hpp>
#include <memory>

#include "backend/backend.h"
#include "cli/model_options.h"

namespace inferscale::cli {

// Keeps this process's command line for the rank workers it starts (main()).
void set_command_line(int argc, char** argv);

// `bo` as backend_options() made it for one rank; `gpu`: CUDA ranks, else CPU ones.
std::unique_ptr<Backend> make_rank_processes(const ModelArgs& a, const Model& m, const BackendOptions& bo, bool gpu);

// The hidden `rank-worker` subcommand.
void register_rank_worker(CLI::App& app);

}  // namespace inferscale::cli
