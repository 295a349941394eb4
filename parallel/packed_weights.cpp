// oneDNN's own reorder and inner product (the mkldnn ops torch.compile's CPU freezing uses), reached
// through the dispatcher: LibTorch declares no C++ function for them.
#include "parallel/packed_weights.h"

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

namespace tandem::parallel {

namespace {

thread_local bool t_enabled = true;

std::mutex g_mutex;  // the registry, the scope count and every PackedWeight's state
std::unordered_set<PackedWeight*> g_held;
int64_t g_scopes = 0;

bool host_has_bf16_dot() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") != 0;
#else
  return false;
#endif
}

torch::Tensor reorder_linear_weight(const torch::Tensor& w) {  // (out, in) -> oneDNN's blocked copy
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mkldnn::_reorder_linear_weight", "")
                             .typed<at::Tensor(const at::Tensor&, std::optional<int64_t>)>();
  // No batch-size hint: the layout oneDNN picks then serves a decode step's rows and a prefill's alike.
  return op.call(w, std::nullopt);
}

}  // namespace

bool packed_sampling_supported() {
  static const bool supported = [] {
    const char* v = std::getenv("TANDEM_PACKED_SAMPLING");
    if (v != nullptr && std::string(v) == "0") return false;
    return at::hasMKLDNN() && at::globalContext().userEnabledMkldnn() && host_has_bf16_dot();
  }();
  return supported;
}

PackedSamplingGuard::PackedSamplingGuard(bool enabled) : ScopedValue(t_enabled, enabled) {}

PackedWeight::~PackedWeight() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_held.erase(this);
}

torch::Tensor PackedWeight::of(const std::vector<torch::Tensor>& weights) {
  if (!t_enabled || weights.empty() || !packed_sampling_supported()) return {};
  for (const torch::Tensor& w : weights)
    if (!w.defined() || !w.device().is_cpu() || w.scalar_type() != torch::kBFloat16 || w.dim() != 2 ||
        w.size(1) != weights[0].size(1) || w.is_mkldnn())
      return {};
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_scopes == 0) return {};
  bool fresh = packed_.defined() && data_.size() == weights.size();
  for (size_t i = 0; fresh && i < weights.size(); ++i)
    fresh = storages_[i].is_alias_of(weights[i].storage()) && data_[i] == weights[i].data_ptr() &&
            versions_[i] == weights[i]._version() && rows_[i] == weights[i].size(0);
  if (fresh) return packed_;
  torch::NoGradGuard no_grad;
  const torch::Tensor w = weights.size() == 1 ? weights[0].contiguous() : torch::cat(weights, 0);  // (sum out, in)
  g_held.insert(this);  // first: a failed insert leaves nothing held unregistered
  packed_ = reorder_linear_weight(w);
  storages_.clear(), data_.clear(), versions_.clear(), rows_.clear();
  for (const torch::Tensor& wi : weights) {
    storages_.push_back(wi.storage());
    data_.push_back(wi.data_ptr());
    versions_.push_back(wi._version());
    rows_.push_back(wi.size(0));
  }
  ++builds_;
  return packed_;
}

int64_t PackedWeight::builds() const {
  std::lock_guard<std::mutex> lock(g_mutex);
  return builds_;
}

bool PackedWeight::held() const {
  std::lock_guard<std::mutex> lock(g_mutex);
  return packed_.defined();
}

torch::Tensor packed_linear(const torch::Tensor& x2, const torch::Tensor& packed, const torch::Tensor& bias) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view,
                            c10::List<std::optional<at::Scalar>>, std::optional<c10::string_view>)>();
  TORCH_CHECK(x2.dim() == 2 && x2.size(1) == packed.size(1), "packed_linear: input ", x2.sizes(),
              " does not fit a packed weight of ", packed.sizes());
  return op.call(x2.contiguous(), packed, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt, "none",
                 c10::List<std::optional<at::Scalar>>(), std::nullopt);  // (M, sum out)
}

void enter_packed_scope() {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_scopes;
}

void leave_packed_scope() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_scopes > 0) return;
  for (PackedWeight* p : g_held) {
    p->packed_ = torch::Tensor();
    p->storages_.clear(), p->data_.clear();
  }
  g_held.clear();
}

PackedScope::PackedScope() { enter_packed_scope(); }
PackedScope::~PackedScope() { leave_packed_scope(); }

int64_t packed_bytes_held() {
  std::lock_guard<std::mutex> lock(g_mutex);
  int64_t bytes = 0;
  for (const PackedWeight* p : g_held)
    if (p->packed_.defined()) bytes += p->packed_.numel() * p->packed_.element_size();
  return bytes;
}

}  // namespace tandem::parallel
