#include "model/architecture.h"

#include "util/check.h"

namespace inferscale {

std::unique_ptr<Architecture> make_architecture(const ModelConfig& cfg) {
  if (cfg.arch == Arch::kBert) return make_bert_architecture(cfg);
  return make_llama_architecture(cfg);
}

void run_forward(Architecture& arch, ForwardOps& ops, const ForwardBatch& b, ForwardOutput& out) {
  ops.begin(b, arch.mask());
  const ForwardResult r = arch.forward(ops, b);
  if (r.empty() && !b.probes.empty()) {  // no output rows, but the probes' weights leave the backend
    ops.finish(Act{}, false, out);
    return;
  }
  if (r.empty()) {
    out.values.clear();
    out.ids.clear();
    return;
  }
  ops.finish(r.rows, r.ids, out);
}

const HostTensor& expect_weight(const HostTensor& t, std::initializer_list<int64_t> shape, const char* role) {
  int64_t n = 1;
  std::string want;
  for (int64_t d : shape) {
    n *= d;
    want += (want.empty() ? "[" : ", ") + std::to_string(d);
  }
  IS_REQUIRE(!t.empty(), kInvalidInput, "weight {} is missing", role);
  IS_REQUIRE(t.numel() == n, kInvalidInput, "weight {} has shape {}, expected {}]", role, t.shape_str(), want);
  return t;
}

}  // namespace inferscale
