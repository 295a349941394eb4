// Which modules carry adapters, their peft names, init, tp slicing, and the adapter directory.
#include "models/llama/lora.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/error.h"
#include "models/safetensors.h"

namespace tandem::models {

namespace {

// One linear layer that can carry an adapter: its module path as HF names it, and the layer.
struct Linear {
  std::string module;  // e.g. model.layers.0.self_attn.q_proj
  std::string name;    // q_proj
  parallel::ColumnParallelLinearImpl* col = nullptr;
  parallel::RowParallelLinearImpl* row = nullptr;
  const parallel::LoraFactors& lora() const { return col ? col->lora() : row->lora(); }
  int64_t in() const { return col ? col->in_features : row->in_features; }
  int64_t out() const { return col ? col->out_features : row->out_features; }
  torch::Tensor weight() const { return col ? col->weight : row->weight; }
  std::string key(const char* factor) const { return "base_model.model." + module + ".lora_" + factor + ".weight"; }
};

// Every linear layer of the decoder in module order (the lm head is never adapted, as in peft).
std::vector<Linear> linears(LlamaForCausalLMImpl& model) {
  std::vector<Linear> out;
  for (size_t i = 0; i < model.model->layers->size(); ++i) {
    auto* layer = model.model->layers[i]->as<LlamaDecoderLayerImpl>();
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto& a = *layer->self_attn;
    auto& m = *layer->mlp;
    out.push_back({p + "self_attn.q_proj", "q_proj", a.q_proj.get(), nullptr});
    out.push_back({p + "self_attn.k_proj", "k_proj", a.k_proj.get(), nullptr});
    out.push_back({p + "self_attn.v_proj", "v_proj", a.v_proj.get(), nullptr});
    out.push_back({p + "self_attn.o_proj", "o_proj", nullptr, a.o_proj.get()});
    out.push_back({p + "mlp.gate_proj", "gate_proj", m.gate_proj.get(), nullptr});
    out.push_back({p + "mlp.up_proj", "up_proj", m.up_proj.get(), nullptr});
    out.push_back({p + "mlp.down_proj", "down_proj", nullptr, m.down_proj.get()});
  }
  return out;
}

std::vector<Linear> adapted(LlamaForCausalLMImpl& model) {
  std::vector<Linear> all = linears(model), out;
  for (auto& l : all)
    if (l.lora().defined()) out.push_back(l);
  return out;
}

// This rank's slice of a full factor: column parallel B by W's rows, row parallel A by W's columns.
torch::Tensor slice_a(const Linear& l, const torch::Tensor& full) {  // (r, in) -> (r, in_local)
  return l.row ? full.narrow(1, l.row->in_range.begin, l.row->in_range.size()) : full;
}
torch::Tensor slice_b(const Linear& l, const torch::Tensor& full) {  // (out, r) -> (out_local, r)
  return l.col ? full.narrow(0, l.col->out_range.begin, l.col->out_range.size()) : full;
}

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

const std::vector<std::string>& lora_linear_names() {
  static const std::vector<std::string> kNames{"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                               "gate_proj", "up_proj", "down_proj"};
  return kNames;
}

void attach_lora(LlamaForCausalLMImpl& model, const LoraSpec& spec, uint64_t seed) {
  TORCH_CHECK(spec.rank > 0 && spec.alpha > 0 && !spec.targets.empty(), "attach_lora: an empty LoRA spec");
  TORCH_CHECK(!has_lora(model), "attach_lora: the model already has adapters");
  for (auto& p : model.parameters()) p.set_requires_grad(false);
  const torch::Device device = model.parameters().front().device();
  // In the base's dtype, as every parameter the trainer steps: under run.dtype bfloat16 the
  // trainer's float32 master weights hold the float32 adapters the optimizer trains, accumulate
  // their gradients in float32 and round them into these bf16 copies after each update, so the
  // forward never converts a factor.
  const torch::Dtype dtype = model.parameters().front().scalar_type();
  at::Generator gen = at::detail::createCPUGenerator(seed);
  torch::NoGradGuard no_grad;
  for (Linear& l : linears(model)) {
    if (std::find(spec.targets.begin(), spec.targets.end(), l.name) == spec.targets.end()) continue;
    const double bound = 1.0 / std::sqrt(static_cast<double>(l.in()));  // kaiming_uniform(a = sqrt(5))
    const torch::Tensor a_full = torch::rand({spec.rank, l.in()}, gen, torch::kFloat64) * (2 * bound) - bound;
    const torch::Tensor b_full = torch::zeros({l.out(), spec.rank}, torch::kFloat64);
    const auto to_param = [&](const torch::Tensor& t) {
      return t.to(dtype).to(device).contiguous().set_requires_grad(true);
    };
    const torch::Tensor a = to_param(slice_a(l, a_full)), b = to_param(slice_b(l, b_full));
    if (l.col)
      l.col->attach_lora(a, b, spec.scale());
    else
      l.row->attach_lora(a, b, spec.scale());
  }
}

bool has_lora(const LlamaForCausalLMImpl& model) { return !adapted(const_cast<LlamaForCausalLMImpl&>(model)).empty(); }

std::vector<torch::Tensor> lora_parameters(LlamaForCausalLMImpl& model) {
  std::vector<torch::Tensor> out;
  for (const Linear& l : adapted(model)) out.push_back(l.lora().a), out.push_back(l.lora().b);
  return out;
}

std::map<std::string, torch::Tensor> gather_lora_state(LlamaForCausalLMImpl& model) {
  const parallel::ParallelContext& ctx = model.parallel_context();
  std::map<std::string, torch::Tensor> out;
  for (const Linear& l : adapted(model)) {
    torch::Tensor a = l.lora().a.detach(), b = l.lora().b.detach();
    if (ctx.tp_enabled() && l.row) a = ctx.tp->all_gather_v(a.t().contiguous()).t();  // (r, in)
    if (ctx.tp_enabled() && l.col) b = ctx.tp->all_gather_v(b.contiguous());          // (out, r)
    // float32 as peft writes them (a bf16 run saves its float32 master); float64 stays (the tests).
    const torch::Dtype dtype = a.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    out[l.key("A")] = a.to(torch::kCPU, dtype).contiguous().clone();
    out[l.key("B")] = b.to(torch::kCPU, dtype).contiguous().clone();
  }
  return out;
}

void load_lora_state(LlamaForCausalLMImpl& model, const std::map<std::string, torch::Tensor>& tensors,
                     const std::string& source) {
  std::vector<std::string> problems;
  std::set<std::string> expected;
  const std::vector<Linear> ls = adapted(model);
  for (const Linear& l : ls)
    for (const char* f : {"A", "B"}) {
      const std::string key = l.key(f);
      expected.insert(key);
      const int64_t r = l.lora().a.size(0);
      const std::vector<int64_t> want =
          f[0] == 'A' ? std::vector<int64_t>{r, l.in()} : std::vector<int64_t>{l.out(), r};
      const auto it = tensors.find(key);
      if (it == tensors.end())
        problems.push_back(key + ": missing (expected shape " + shape_str(want) + ")");
      else if (it->second.sizes() != at::IntArrayRef(want))
        problems.push_back(key + ": expected shape " + shape_str(want) + ", got " + shape_str(it->second.sizes()));
      else if (!it->second.is_floating_point() || !torch::isfinite(it->second).all().item<bool>())
        problems.push_back(key + ": not finite floating-point values");
    }
  for (const auto& [name, t] : tensors)
    if (!expected.count(name)) problems.push_back(name + ": unexpected tensor " + shape_str(t.sizes()));
  if (!problems.empty()) {
    std::string msg = source + ": the adapters do not match this run's LoRA (tracks.ar.lora) on this model (" +
                      std::to_string(problems.size()) + " problems):";
    for (size_t i = 0; i < problems.size() && i < 20; ++i) msg += "\n  " + problems[i];
    throw UserError(msg);
  }
  torch::NoGradGuard no_grad;
  for (const Linear& l : ls) {
    l.lora().a.copy_(slice_a(l, tensors.at(l.key("A"))));
    l.lora().b.copy_(slice_b(l, tensors.at(l.key("B"))));
  }
}

void save_peft_adapter(LlamaForCausalLMImpl& model, const LoraSpec& spec, const std::string& dir, bool writer,
                       const nlohmann::json& extra) {
  const std::map<std::string, torch::Tensor> state = gather_lora_state(model);
  if (!writer) return;
  write_peft_adapter(dir, spec, state, causal_lm_adapter_info(extra));
}

LoraSpec read_peft_config(const std::string& dir) {
  const std::string file = dir + "/" + kAdapterConfig;
  std::ifstream in(file);
  if (!in) throw UserError(file + ": cannot be read; an adapter directory holds adapter_config.json");
  const nlohmann::json c = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const auto bad = [&](const std::string& what) { return UserError(file + ": " + what); };
  if (c.is_discarded() || !c.is_object()) throw bad("not a JSON object");
  if (c.value("peft_type", std::string()) != "LORA") throw bad("peft_type must be \"LORA\"");
  if (!c.contains("r") || !c["r"].is_number_integer() || c["r"].get<int64_t>() <= 0)
    throw bad("r must be a positive integer");
  if (!c.contains("lora_alpha") || !c["lora_alpha"].is_number() || c["lora_alpha"].get<double>() <= 0)
    throw bad("lora_alpha must be a positive number");
  const auto is_true = [&](const char* k) { return c.contains(k) && c[k].is_boolean() && c[k].get<bool>(); };
  const auto is_set = [&](const char* k) { return c.contains(k) && !c[k].is_null() && !c[k].empty(); };
  if (is_true("use_rslora") || is_true("use_dora") || is_true("fan_in_fan_out"))
    throw bad("rslora, DoRA and fan_in_fan_out adapters are not supported (tandem applies scale alpha / r, W x)");
  if (c.contains("bias") && c["bias"] != "none") throw bad("bias must be \"none\" (adapters without biases)");
  for (const char* k : {"modules_to_save", "layers_to_transform", "rank_pattern", "alpha_pattern"})
    if (is_set(k)) throw bad(std::string(k) + " is set; tandem's adapters have one rank and alpha on every layer");
  LoraSpec spec;
  spec.rank = c["r"].get<int64_t>();
  spec.alpha = c["lora_alpha"].get<double>();
  const nlohmann::json& t = c.contains("target_modules") ? c["target_modules"] : nlohmann::json();
  if (t.is_string() && t.get<std::string>() == "all-linear") {
    spec.targets = lora_linear_names();
  } else if (t.is_array()) {
    for (const auto& name : t) {
      const auto& known = lora_linear_names();
      if (!name.is_string() || std::find(known.begin(), known.end(), name.get<std::string>()) == known.end())
        throw bad("target_modules holds " + name.dump() +
                  "; tandem adapts q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
      spec.targets.push_back(name.get<std::string>());
    }
  }
  if (spec.targets.empty()) throw bad("target_modules must be \"all-linear\" or a non-empty list of module names");
  return spec;
}

void merge_lora(LlamaForCausalLMImpl& model) {
  TORCH_CHECK(!model.parallel_context().tp_enabled(), "merge_lora: merge a tp = 1 model");
  torch::NoGradGuard no_grad;
  for (const Linear& l : adapted(model)) {
    const auto& f = l.lora();
    const torch::Tensor delta = torch::matmul(f.b.to(torch::kFloat64), f.a.to(torch::kFloat64)) * f.scale;  // (out, in)
    torch::Tensor w = l.weight();
    w.copy_((w.to(torch::kFloat64) + delta.to(w.device())).to(w.scalar_type()));
    f.b.zero_();
  }
}

}  // namespace tandem::models
