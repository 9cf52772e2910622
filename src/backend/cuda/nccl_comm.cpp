#include "backend/cuda/nccl_comm.h"

#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <mutex>

#include "util/check.h"

namespace inferscale {
namespace {

// The NCCL entry points this file uses, from libnccl.so.2.
struct Nccl {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) init_rank = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

const Nccl& nccl() {
  static Nccl n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    auto sym = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name)); };
    sym(n.get_unique_id, "ncclGetUniqueId");
    sym(n.init_rank, "ncclCommInitRank");
    sym(n.all_reduce, "ncclAllReduce");
    sym(n.destroy, "ncclCommDestroy");
    sym(n.abort, "ncclCommAbort");
    sym(n.error_string, "ncclGetErrorString");
  });
  IS_REQUIRE(n.get_unique_id && n.init_rank && n.all_reduce && n.destroy && n.abort && n.error_string, kUnsupported,
             "tensor parallelism on GPUs needs NCCL: libnccl.so.2 was not found (or lacks an entry point) on the "
             "library path");
  return n;
}

void check(ncclResult_t r, const char* what) {
  IS_REQUIRE(r == ncclSuccess, kUnavailable, "NCCL {}: {}", what, nccl().error_string(r));
}

}  // namespace

std::vector<char> NcclComm::unique_id() {
  ncclUniqueId id;
  check(nccl().get_unique_id(&id), "ncclGetUniqueId");
  return {id.internal, id.internal + sizeof(id.internal)};
}

NcclComm::NcclComm(const std::vector<char>& id, int32_t ranks, int32_t rank) : ranks_(ranks), rank_(rank) {
  ncclUniqueId u;
  IS_REQUIRE(id.size() == sizeof(u.internal), kInvalidInput, "an NCCL id of {} bytes", id.size());
  std::memcpy(u.internal, id.data(), sizeof(u.internal));
  ncclComm_t c = nullptr;
  check(nccl().init_rank(&c, ranks, u, rank), "ncclCommInitRank");
  comm_ = c;
}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) nccl().destroy(static_cast<ncclComm_t>(comm_));
}

void NcclComm::sum(float* data, int64_t n, cudaStream_t stream) {
  check(nccl().all_reduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum, static_cast<ncclComm_t>(comm_), stream),
        "ncclAllReduce");
}

void NcclComm::abort() {
  if (comm_ != nullptr) nccl().abort(static_cast<ncclComm_t>(comm_));
  comm_ = nullptr;
}

}  // namespace inferscale
