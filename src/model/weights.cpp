#include "model/weights.h"

#include <fmt/format.h>

#include <algorithm>

namespace inferscale {

void for_each_weight(const ModelWeights& w, const std::function<void(const std::string&, const HostTensor&)>& fn) {
  auto visit = [&](const std::string& role, const HostTensor& t) {
    if (!t.empty()) fn(role, t);
  };
  visit("embed", w.embed);
  visit("final_norm", w.final_norm);
  if (w.lm_head.data != w.embed.data) visit("lm_head", w.lm_head);
  static constexpr std::pair<const char*, HostTensor LayerWeights::*> kRoles[] = {
      {"attn_norm", &LayerWeights::attn_norm}, {"wq", &LayerWeights::wq},         {"wk", &LayerWeights::wk},
      {"wv", &LayerWeights::wv},               {"wo", &LayerWeights::wo},         {"bq", &LayerWeights::bq},
      {"bk", &LayerWeights::bk},               {"bv", &LayerWeights::bv},         {"q_norm", &LayerWeights::q_norm},
      {"k_norm", &LayerWeights::k_norm},       {"ffn_norm", &LayerWeights::ffn_norm},
      {"w_gate", &LayerWeights::w_gate},       {"w_up", &LayerWeights::w_up},     {"w_down", &LayerWeights::w_down},
  };
  for (size_t i = 0; i < w.layers.size(); ++i)
    for (const auto& [name, field] : kRoles) visit(fmt::format("layers.{}.{}", i, name), w.layers[i].*field);
  for (const BertEmbeddingRole& r : bert_embedding_roles()) visit(fmt::format("bert.{}", r.role), w.bert.*r.field);
  for (size_t i = 0; i < w.bert.layers.size(); ++i)
    for (const BertLayerRole& r : bert_layer_roles())
      visit(fmt::format("bert.layers.{}.{}", i, r.role), w.bert.layers[i].*r.field);
}

WeightStats weight_stats(const ModelWeights& w) {
  WeightStats s;
  for_each_weight(w, [&](const std::string&, const HostTensor& t) {
    const auto n = static_cast<int64_t>(t.nbytes());
    s.bytes += n;
    WeightStats::PerDType& d = s.by_dtype[t.dtype];
    ++d.tensors;
    d.bytes += n;
  });
  return s;
}

namespace {
std::string size_str(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b < 1024.0 * 1024) return fmt::format("{:.1f} KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", b / (1024 * 1024));
  return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
}
}  // namespace

std::string WeightStats::dtypes_summary() const {
  std::vector<std::pair<DType, PerDType>> v(by_dtype.begin(), by_dtype.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
  std::string out;
  for (const auto& [dt, d] : v)
    out += fmt::format("{}{} x{} ({})", out.empty() ? "" : ", ", dtype_name(dt), d.tensors, size_str(d.bytes));
  return out;
}

}  // namespace inferscale
