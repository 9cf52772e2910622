// A Backend that hands every call to another one: test wrappers derive from it and override what
// they watch or change (forward, mostly). It computes each forward whole (the Backend defaults of
// launch_forward / wait_forward), so an override of forward() sees every forward.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace inferscale::test_support {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  const ModelConfig& config() const override { return inner_->config(); }
  int32_t block_size() const override { return inner_->block_size(); }
  int64_t num_cache_blocks() const override { return inner_->num_cache_blocks(); }
  int64_t num_pool_blocks() const override { return inner_->num_pool_blocks(); }
  DType pool_dtype() const override { return inner_->pool_dtype(); }
  using Backend::forward;
  void forward(const ForwardBatch& b, ForwardOutput& out) override { inner_->forward(b, out); }
  void inject(const InjectBatch& b) override { inner_->inject(b); }
  void read_pool(const std::vector<int64_t>& s, HostTensor& k, HostTensor& v) override { inner_->read_pool(s, k, v); }
  void write_pool(const std::vector<int64_t>& s, const HostTensor& k, const HostTensor& v) override {
    inner_->write_pool(s, k, v);
  }
  void read_cache(const std::vector<int64_t>& s, HostTensor& k, HostTensor& v) override { inner_->read_cache(s, k, v); }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace inferscale::test_support
