// HF naming, init, load (slice per tp rank) and save (gather over tp) for LlamaForCausalLM.
#include "models/llama/weights.h"

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/write_file.h"

namespace tandem::models {

namespace {

std::string shape_str(at::IntArrayRef shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

using Params = torch::OrderedDict<std::string, torch::Tensor>;

torch::Tensor param_of(const Params& params, const std::string& name) {
  const torch::Tensor* p = params.find(name);
  TORCH_CHECK(p != nullptr, "llama: the model has no parameter ", name);
  return *p;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void copy_slice(const LlamaForCausalLMImpl& model, const Params& params, const HfParamSpec& spec,
                const torch::Tensor& full) {
  const parallel::ParallelContext& ctx = model.parallel_context();
  torch::Tensor p = param_of(params, spec.name);
  const torch::Tensor slice = tp_slice(full, spec, ctx.tp_rank, ctx.tp_size);
  TORCH_CHECK(p.sizes() == slice.sizes(), "llama: ", spec.name, " holds ", p.sizes(), " but its tp slice is ",
              slice.sizes());
  torch::NoGradGuard no_grad;
  p.copy_(slice);
}

}  // namespace

std::vector<HfParamSpec> hf_param_specs(const LlamaConfig& c) {
  const int64_t d = c.hidden_size, hd = c.head_dim(), q = c.num_heads * hd, kv = c.num_kv_heads * hd;
  const int64_t f = c.intermediate_size;
  std::vector<HfParamSpec> specs{{"model.embed_tokens.weight", {c.vocab_size, d}, 0, 1}};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    specs.push_back({p + "self_attn.q_proj.weight", {q, d}, 0, hd});
    if (c.qkv_bias) specs.push_back({p + "self_attn.q_proj.bias", {q}, 0, hd});
    specs.push_back({p + "self_attn.k_proj.weight", {kv, d}, 0, hd});
    if (c.qkv_bias) specs.push_back({p + "self_attn.k_proj.bias", {kv}, 0, hd});
    specs.push_back({p + "self_attn.v_proj.weight", {kv, d}, 0, hd});
    if (c.qkv_bias) specs.push_back({p + "self_attn.v_proj.bias", {kv}, 0, hd});
    specs.push_back({p + "self_attn.o_proj.weight", {d, q}, 1, hd});
    if (c.qk_norm) {
      specs.push_back({p + "self_attn.q_norm.weight", {hd}, -1, 1});
      specs.push_back({p + "self_attn.k_norm.weight", {hd}, -1, 1});
    }
    specs.push_back({p + "mlp.gate_proj.weight", {f, d}, 0, 1});
    specs.push_back({p + "mlp.up_proj.weight", {f, d}, 0, 1});
    specs.push_back({p + "mlp.down_proj.weight", {d, f}, 1, 1});
    specs.push_back({p + "input_layernorm.weight", {d}, -1, 1});
    specs.push_back({p + "post_attention_layernorm.weight", {d}, -1, 1});
    if (c.block == DecoderBlock::kGemma3) {
      specs.push_back({p + "pre_feedforward_layernorm.weight", {d}, -1, 1});
      specs.push_back({p + "post_feedforward_layernorm.weight", {d}, -1, 1});
    }
  }
  specs.push_back({"model.norm.weight", {d}, -1, 1});
  if (!c.tie_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, d}, 0, 1});
  return specs;
}

torch::Tensor tp_slice(const torch::Tensor& full, const HfParamSpec& spec, int64_t tp_rank, int64_t tp_size) {
  if (spec.split_dim < 0 || tp_size == 1) return full;
  const int64_t units = full.size(spec.split_dim) / spec.split_unit;
  const parallel::ShardRange r = parallel::shard_range(units, tp_rank, tp_size, spec.split_unit);
  return full.narrow(spec.split_dim, r.begin, r.size());
}

void initialize_weights(LlamaForCausalLMImpl& model, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const double std = model.config().initializer_range;
  const Params params = model.named_parameters();
  for (const HfParamSpec& spec : hf_param_specs(model.config())) {
    torch::Tensor full;
    if (ends_with(spec.name, "norm.weight")) {  // Gemma's norms scale by (1 + w): zeros are its identity
      full = model.config().block == DecoderBlock::kGemma3 ? torch::zeros(spec.shape, torch::kFloat64)
                                                           : torch::ones(spec.shape, torch::kFloat64);
    } else if (ends_with(spec.name, ".bias")) {
      full = torch::zeros(spec.shape, torch::kFloat64);
    } else {
      full = torch::randn(spec.shape, gen, torch::kFloat64) * std;
    }
    copy_slice(model, params, spec, full);
  }
}

namespace {

// name -> (shape, floating point?) against the specs: every problem, one per line.
struct TensorShape {
  std::vector<int64_t> shape;
  bool floating = true;
  std::string dtype;
};

void check_shapes(const LlamaConfig& c, const std::map<std::string, TensorShape>& tensors, const std::string& source) {
  std::vector<std::string> problems;
  std::set<std::string> expected;
  for (const HfParamSpec& spec : hf_param_specs(c)) {
    expected.insert(spec.name);
    const auto it = tensors.find(spec.name);
    if (it == tensors.end()) {
      problems.push_back(spec.name + ": missing (expected shape " + shape_str(spec.shape) + ")");
    } else if (it->second.shape != spec.shape) {
      problems.push_back(spec.name + ": expected shape " + shape_str(spec.shape) + ", got " +
                         shape_str(it->second.shape));
    } else if (!it->second.floating) {
      problems.push_back(spec.name + ": expected a floating-point tensor, got " + it->second.dtype);
    }
  }
  for (const auto& [name, t] : tensors) {
    if (expected.count(name) || ends_with(name, ".rotary_emb.inv_freq")) continue;
    if (c.tie_embeddings && name == "lm_head.weight") continue;
    problems.push_back(name + ": unexpected tensor " + shape_str(t.shape));
  }
  if (problems.empty()) return;
  std::string msg =
      source + ": the weights do not match the llama config (" + std::to_string(problems.size()) + " problems):";
  for (size_t i = 0; i < problems.size() && i < 20; ++i) msg += "\n  " + problems[i];
  throw UserError(msg);
}

}  // namespace

void check_hf_weights(const std::string& dir, const LlamaConfig& config) {
  const std::map<std::string, HfWeightEntry> headers = read_hf_weight_headers(dir);
  // The layer count first: a config.json claiming 10^6 layers must not make us list 10^7 tensors.
  int64_t layers = 0;
  const std::string prefix = "model.layers.";
  for (const auto& [name, e] : headers) {
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t dot = name.find('.', prefix.size());
    const std::string index =
        name.substr(prefix.size(), dot == std::string::npos ? std::string::npos : dot - prefix.size());
    if (!index.empty() && index.size() < 10 && index.find_first_not_of("0123456789") == std::string::npos)
      layers = std::max<int64_t>(layers, std::stoll(index) + 1);
  }
  if (layers != config.num_layers)
    throw UserError(dir + ": config.json says num_hidden_layers " + std::to_string(config.num_layers) +
                    " but the weights hold " + std::to_string(layers) +
                    " layers; the config and the weights do not match");
  std::map<std::string, TensorShape> shapes;
  for (const auto& [name, e] : headers) {
    const bool floating = c10::isFloatingType(e.info.torch_dtype);
    shapes[name] = {e.info.shape, floating, e.info.dtype};
  }
  check_shapes(config, shapes, dir);
}

void load_hf_state(LlamaForCausalLMImpl& model, const std::map<std::string, torch::Tensor>& tensors,
                   const std::string& source) {
  const LlamaConfig& c = model.config();
  std::map<std::string, TensorShape> shapes;
  for (const auto& [name, t] : tensors)
    shapes[name] = {t.sizes().vec(), t.is_floating_point(), std::string(c10::toString(t.scalar_type()))};
  check_shapes(c, shapes, source);
  const Params params = model.named_parameters();
  for (const HfParamSpec& spec : hf_param_specs(c)) {
    const torch::Tensor& t = tensors.at(spec.name);
    // A NaN or Inf weight would train into NaN losses many steps later; name it now.
    if (!torch::isfinite(t).all().item<bool>())
      throw UserError(source + ": tensor " + spec.name + " holds NaN or Inf values; the weights are damaged");
    copy_slice(model, params, spec, t);
  }
}

std::map<std::string, torch::Tensor> gather_hf_state(LlamaForCausalLMImpl& model) {
  const parallel::ParallelContext& ctx = model.parallel_context();
  const Params params = model.named_parameters();
  std::map<std::string, torch::Tensor> out;
  for (const HfParamSpec& spec : hf_param_specs(model.config())) {
    const torch::Tensor p = param_of(params, spec.name).detach();
    torch::Tensor full;
    if (spec.split_dim < 0 || !ctx.tp_enabled()) {
      full = p.clone();
    } else if (spec.split_dim == 0) {
      full = ctx.tp->all_gather_v(p.contiguous());
    } else {
      full = ctx.tp->all_gather_v(p.t().contiguous()).t();
    }
    TORCH_CHECK(full.sizes() == at::IntArrayRef(spec.shape), "llama: gathered ", spec.name, " is ", full.sizes());
    out[spec.name] = full.to(torch::kCPU).contiguous();
  }
  return out;
}

std::vector<bool> tp_sharded(LlamaForCausalLMImpl& model, const std::vector<torch::Tensor>& params) {
  std::map<std::string, int64_t> split;  // HF name -> split_dim
  for (const HfParamSpec& spec : hf_param_specs(model.config())) split[spec.name] = spec.split_dim;
  std::map<const void*, bool> by_tensor;
  for (const auto& p : model.named_parameters()) {
    const std::string& key = p.key();
    bool sharded = false;
    if (const auto it = split.find(key); it != split.end()) {
      sharded = it->second >= 0;
    } else if (ends_with(key, ".lora_A") || ends_with(key, ".lora_B")) {
      const auto it_w = split.find(key.substr(0, key.size() - 6) + "weight");  // "...q_proj." + "weight"
      TORCH_CHECK(it_w != split.end(), "tp_sharded: no layer for ", key);
      sharded = (key.back() == 'B' && it_w->second == 0) || (key.back() == 'A' && it_w->second == 1);
    }
    by_tensor[p.value().unsafeGetTensorImpl()] = sharded;
  }
  const bool tp = model.parallel_context().tp_enabled();
  std::vector<bool> out;
  for (const auto& t : params) {
    const auto it = by_tensor.find(t.unsafeGetTensorImpl());
    TORCH_CHECK(it != by_tensor.end(), "tp_sharded: a tensor that is not the model's");
    out.push_back(tp && it->second);
  }
  return out;
}

LlamaForCausalLM load_llama(const std::string& dir, const parallel::ParallelContext& ctx, torch::ScalarType dtype) {
  const LlamaConfig config = from_hf_config(read_hf_config(dir), dir + "/" + kHfConfigFile);
  check_hf_weights(dir, config);  // before the model is sized from config.json or any data is read
  // Built in `dtype` directly: a float32 model converted afterwards holds both copies at once (3 GB
  // for a 0.5B model loaded in bf16, the peak of a LoRA run's start-up).
  const caffe2::TypeMeta saved_default = torch::get_default_dtype();
  torch::set_default_dtype(caffe2::TypeMeta::fromScalarType(dtype));
  LlamaForCausalLM model{nullptr};
  try {
    model = LlamaForCausalLM(config, ctx, std::nullopt);
  } catch (...) {
    torch::set_default_dtype(saved_default);
    throw;
  }
  torch::set_default_dtype(saved_default);
  model->to(dtype);
  load_hf_state(*model, load_hf_weights(dir), dir);
  return model;
}

void save_llama(LlamaForCausalLMImpl& model, const std::string& dir, bool writer, uint64_t max_shard_bytes) {
  const std::map<std::string, torch::Tensor> state = gather_hf_state(model);
  if (!writer) return;
  save_hf_weights(dir, state, max_shard_bytes);
  const torch::ScalarType dtype = model.model->norm->weight.scalar_type();
  write_file_atomically(dir + "/" + kHfConfigFile, to_hf_config(model.config(), dtype).dump(2) + "\n");
}

}  // namespace tandem::models
