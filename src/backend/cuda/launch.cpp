#include <atomic>

#include "backend/cuda/cuda_ops.h"

namespace inferscale::cuda {
namespace {
std::atomic<bool> g_programmatic{true};
}

bool programmatic_launch() { return g_programmatic.load(std::memory_order_relaxed); }
void set_programmatic_launch(bool on) { g_programmatic.store(on, std::memory_order_relaxed); }

}  // namespace inferscale::cuda
