#include "backend/rank_group.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstring>

#include "backend/kv_rows.h"

namespace inferscale {
namespace {

enum class RankOp : uint8_t { kForward, kInject, kWritePool, kReadPool, kReadCache, kStop };

// Every field of a forward (a const one to write, another to read into), in one order.
template <typename Batch, typename F>
void batch_fields(Batch& b, F&& f) {
  f(b.token_ids), f(b.positions), f(b.slot_mapping), f(b.q_indptr), f(b.kv_indptr), f(b.kv_indices);
  f(b.kv_start), f(b.token_src), f(b.output_tokens), f(b.output), f(b.argmax_vocab), f(b.sampling);
  f(b.capture_tokens), f(b.capture_slots), f(b.fact_indptr), f(b.fact_start), f(b.fact_slots), f(b.probes);
}

void put_rows(Wire& w, const HostTensor& t) {
  w.put(t.dtype).put(t.shape);
  w.put_bytes(t.data, t.nbytes());
}

HostTensor get_rows(WireReader& r) {
  const DType dt = r.get<DType>();
  std::vector<int64_t> shape;
  r.get(shape);
  HostTensor t = HostTensor::uninitialized(dt, shape);
  const auto [p, n] = r.get_bytes();
  IS_REQUIRE(n == t.nbytes(), kInvalidInput, "rows of {} bytes for a tensor {}", n, t.shape_str());
  std::memcpy(t.data, p, n);
  return t;
}

// Replies: a status byte (0 ok), then the result, or the error's kind and message.
std::vector<char> ok_reply(Wire w = {}) {
  Wire r;
  r.put(uint8_t{0});
  const auto& b = w.bytes();
  std::vector<char> out = r.bytes();
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

std::vector<char> error_reply(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  const std::string what = e.what();
  Wire w;
  w.put(uint8_t{1}).put(err ? err->kind() : ErrorKind::kInternal).put_bytes(what.data(), what.size());
  return w.bytes();
}

// The message of a command every rank gets alike.
auto same(const Wire& w) {
  return [&w](int32_t) -> const std::vector<char>& { return w.bytes(); };
}

// Columns [first, first + cols) of every row of `src` ([rows, src_cols], `elem` bytes a value)
// into `dst` ([rows, dst_cols]) at column dst_first.
void copy_columns(const HostTensor& src, int64_t first, HostTensor& dst, int64_t dst_first, int64_t cols) {
  const size_t elem = dtype_size(src.dtype);
  const int64_t rows = src.num_rows(), sc = src.row_size(), dc = dst.row_size();
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(dst.as<char>() + (i * dc + dst_first) * elem, src.as<const char>() + (i * sc + first) * elem, cols * elem);
}

}  // namespace

void serve_rank(Backend& rank, ByteChannel& commands, const std::function<void()>& on_failed_forward) {
  for (;;) {
    std::vector<char> msg;
    try {
      msg = commands.recv_message();
    } catch (const Error&) {
      return;  // rank 0 closed the channel
    }
    WireReader in(std::move(msg));
    if (in.done()) return;  // not a command of rank 0's: the channel is not ours
    const auto op = in.get<RankOp>();
    if (op >= RankOp::kStop) return;  // stop (or, past it, not a command: the same)
    std::vector<char> reply;
    try {
      Wire out;
      if (op == RankOp::kForward) {
        ForwardBatch b;
        batch_fields(b, [&](auto& v) { in.get(v); });
        ForwardOutput fo;
        try {
          rank.forward(b, fo);
        } catch (...) {
          if (on_failed_forward) on_failed_forward();
          throw;
        }
        out.put(fo.probe_mass);
      } else if (op == RankOp::kInject) {
        InjectBatch b;
        in.get(b.src_slots), in.get(b.dst_slots), in.get(b.positions);
        rank.inject(b);
      } else if (op == RankOp::kWritePool) {
        std::vector<int64_t> slots;
        in.get(slots);
        const HostTensor k = get_rows(in), v = get_rows(in);
        rank.write_pool(slots, k, v);
      } else {
        std::vector<int64_t> slots;
        in.get(slots);
        HostTensor k, v;
        if (op == RankOp::kReadPool) rank.read_pool(slots, k, v);
        else rank.read_cache(slots, k, v);
        put_rows(out, k);
        put_rows(out, v);
      }
      reply = ok_reply(std::move(out));
    } catch (const std::exception& e) {
      reply = error_reply(e);
    }
    try {
      commands.send_message(reply);
    } catch (const Error&) {
      return;
    }
  }
}

void RankWorkers::kill() {
  for (int pid : pids) ::kill(pid, SIGKILL);
}

RankWorkers::~RankWorkers() {
  for (auto& t : threads)
    if (t.joinable()) t.join();
  for (int pid : pids) ::waitpid(pid, nullptr, 0);
}

RankGroupBackend::RankGroupBackend(const ModelConfig& cfg, RankGroup g)
    : cfg_(cfg), workers_(std::move(g.workers)), commands_(std::move(g.commands)), reduce_(std::move(g.reduce)),
      abort_reduce_(std::move(g.abort_reduce)), local_(std::move(g.local)) {}

RankGroupBackend::~RankGroupBackend() {
  Wire stop;
  stop.put(RankOp::kStop);
  for (auto& c : commands_) {
    try {
      if (failed_.empty()) c.send_message(stop.bytes());
    } catch (const Error&) {
    }
    c.shutdown();
  }
  if (failed_.empty()) return;
  workers_.kill();
  if (abort_reduce_) abort_reduce_();
}

void RankGroupBackend::fail(const std::string& why) {
  if (failed_.empty()) failed_ = why;
  for (auto& c : commands_) c.shutdown();
  if (abort_reduce_) abort_reduce_();
  IS_THROW(kInternal, "a tensor-parallel rank failed: {}", failed_);
}

std::vector<char> RankGroupBackend::reply_of(int32_t rank) {
  std::vector<char> reply = commands_[static_cast<size_t>(rank - 1)].recv_message();
  WireReader r(reply);
  if (r.get<uint8_t>() == 0) return {reply.begin() + 1, reply.end()};
  const auto kind = r.get<ErrorKind>();
  const auto [p, n] = r.get_bytes();
  throw Error(kind, "rank " + std::to_string(rank) + ": " + std::string(p, n));
}

template <typename MessageFn, typename LocalFn>
std::vector<std::vector<char>> RankGroupBackend::on_every_rank(const MessageFn& message, const LocalFn& local) {
  IS_REQUIRE(failed_.empty(), kInternal, "a tensor-parallel rank failed: {}", failed_);
  std::vector<std::vector<char>> replies;
  try {
    for (int32_t r = 1; r < ranks(); ++r) commands_[static_cast<size_t>(r - 1)].send_message(message(r));
    local();
    for (int32_t r = 1; r < ranks(); ++r) replies.push_back(reply_of(r));
  } catch (const std::exception& e) {
    fail(e.what());
  }
  return replies;
}

void RankGroupBackend::forward(const ForwardBatch& b, ForwardOutput& out) {
  // Checked here first: a batch every rank would refuse fails before any rank runs it.
  check_forward_batch(b, local_->num_cache_blocks() * local_->block_size(), local_->block_size(),
                      local_->num_pool_blocks() * local_->block_size(), cfg_.vocab_size);
  Wire w;
  w.put(RankOp::kForward);
  batch_fields(b, [&](const auto& v) { w.put(v); });
  const auto replies = on_every_rank(same(w), [&] { local_->forward(b, out); });
  // Each rank's attention mass covers its own heads: the model's is their sum, in rank order.
  for (const auto& reply : replies) {
    WireReader r(reply);
    std::vector<float> mass;
    r.get(mass);
    IS_CHECK(mass.size() == out.probe_mass.size(), "ranks returned {} and {} probe weights", out.probe_mass.size(), mass.size());
    for (size_t i = 0; i < mass.size(); ++i) out.probe_mass[i] += mass[i];
  }
}

void RankGroupBackend::inject(const InjectBatch& b) {
  Wire w;
  w.put(RankOp::kInject).put(b.src_slots).put(b.dst_slots).put(b.positions);
  on_every_rank(same(w), [&] { local_->inject(b); });
}

void RankGroupBackend::write_pool(const std::vector<int64_t>& slots, const HostTensor& k, const HostTensor& v) {
  const int64_t n = static_cast<int64_t>(slots.size()), L = cfg_.num_layers, KS = cfg_.kv_size(), ks = KS / ranks();
  check_kv_rows(k, pool_dtype(), L, n, KS, "write_pool K");
  check_kv_rows(v, pool_dtype(), L, n, KS, "write_pool V");
  auto columns = [&](const HostTensor& t, int32_t r) {
    HostTensor c = make_kv_rows(t.dtype, L, n, ks);
    copy_columns(t, r * ks, c, 0, ks);
    return c;
  };
  // Each rank gets its own columns.
  auto message = [&](int32_t r) {
    Wire w;
    w.put(RankOp::kWritePool).put(slots);
    put_rows(w, columns(k, r));
    put_rows(w, columns(v, r));
    return w.bytes();
  };
  on_every_rank(message, [&] { local_->write_pool(slots, columns(k, 0), columns(v, 0)); });
}

void RankGroupBackend::gather_rows(const std::vector<int64_t>& slots, bool pool, HostTensor& k, HostTensor& v) {
  Wire w;
  w.put(pool ? RankOp::kReadPool : RankOp::kReadCache).put(slots);
  std::vector<HostTensor> rk(static_cast<size_t>(ranks())), rv(rk.size());  // each rank's rows
  const auto replies = on_every_rank(same(w), [&] {
    if (pool) local_->read_pool(slots, rk[0], rv[0]);
    else local_->read_cache(slots, rk[0], rv[0]);
  });
  for (size_t r = 1; r < rk.size(); ++r) {
    WireReader in(replies[r - 1]);
    rk[r] = get_rows(in);
    rv[r] = get_rows(in);
  }
  const int64_t n = static_cast<int64_t>(slots.size()), KS = cfg_.kv_size(), ks = KS / ranks();
  k = make_kv_rows(rk[0].dtype, cfg_.num_layers, n, KS);
  v = make_kv_rows(rv[0].dtype, cfg_.num_layers, n, KS);
  for (size_t r = 0; r < rk.size(); ++r) {
    copy_columns(rk[r], 0, k, static_cast<int64_t>(r) * ks, ks);
    copy_columns(rv[r], 0, v, static_cast<int64_t>(r) * ks, ks);
  }
}

void RankGroupBackend::read_pool(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) { gather_rows(slots, true, k, v); }

void RankGroupBackend::read_cache(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) { gather_rows(slots, false, k, v); }

}  // namespace inferscale
