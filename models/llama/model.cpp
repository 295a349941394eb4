// The forward of both layouts: build the AttentionLayout (RoPE tables, segments or padding mask,
// the cp shard), run the decoder, then the lm head as chunked log-probs or full logits; and the
// prefill / decode forwards over a KV cache.
#include "models/llama/model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "models/layers/fused_attention.h"
#include "models/llama/weights.h"

namespace tandem::models {

namespace {

// Token ids outside [0, vocab): under tp the embedding would give them a zero row and the head
// -lse, silently. Host tensors only (the ids are built there; a device copy would cost a sync).
void require_ids_in_vocab(const torch::Tensor& ids, int64_t vocab, const char* what) {
  if (!ids.defined() || ids.numel() == 0 || !ids.is_cpu()) return;
  const auto [lo, hi] = torch::aminmax(ids);
  const int64_t low = lo.item<int64_t>(), high = hi.item<int64_t>();
  if (low < 0 || high >= vocab)
    throw std::invalid_argument("llama: " + std::string(what) + " id " + std::to_string(low < 0 ? low : high) +
                                " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

// What a recomputed layer needs in the backward, when the forward's layout (a local of the
// caller) is gone: a copy of it with the cp shard it points to, shared by every layer.
struct ReplayLayout {
  AttentionLayout layout;
  parallel::CpShard shard;
};
struct LayerReplay : torch::CustomClassHolder {
  std::shared_ptr<const ReplayLayout> run;
  LlamaDecoderLayerImpl* layer = nullptr;  // owned by the model, which outlives its backward
  bool lora = true;  // the forward's parallel::lora_active(): the backward may run on another thread
};

// A decoder layer whose activations are not kept: the forward runs without a graph (custom
// functions run their forward in no-grad mode), keeping only the layer's input; the backward runs
// the layer again with a graph and differentiates it. Parameters are inputs, so their gradients
// reach the engine's AccumulateGrad exactly as without recompute.
struct RecomputedLayer : torch::autograd::Function<RecomputedLayer> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                at::TensorList params, const c10::intrusive_ptr<LayerReplay>& replay) {
    ctx->save_for_backward({x});
    ctx->saved_data["replay"] = c10::IValue::make_capsule(replay);
    ctx->saved_data["params"] = static_cast<int64_t>(params.size());
    return {replay->layer->forward(x, replay->run->layout)};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto replay = c10::static_intrusive_pointer_cast<LayerReplay>(ctx->saved_data["replay"].toCapsule());
    const torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::autograd::variable_list inputs{x};
    for (const auto& p : replay->layer->parameters())
      if (p.requires_grad()) inputs.push_back(p);
    TORCH_CHECK(static_cast<int64_t>(inputs.size()) == ctx->saved_data["params"].toInt() + 1,
                "recompute: the layer's trainable parameters changed between forward and backward");
    torch::Tensor out;
    {
      torch::AutoGradMode grad(true);
      parallel::LoraModeGuard lora(replay->lora);
      out = replay->layer->forward(x, replay->run->layout);  // (N, hidden), the same arithmetic as the forward
    }
    torch::autograd::variable_list g =
        torch::autograd::grad({out}, inputs, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
    g.emplace_back();  // the replay is no tensor
    return g;
  }
};

}  // namespace

LlamaModelImpl::LlamaModelImpl(const LlamaConfig& c, const parallel::ParallelContext& ctx) {
  embed_tokens = register_module("embed_tokens", parallel::VocabParallelEmbedding(c.vocab_size, c.hidden_size, ctx));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) layers->push_back(LlamaDecoderLayer(c, ctx, i));
  const bool gemma = c.block == DecoderBlock::kGemma3;
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_eps, gemma));
  if (gemma) embed_scale_ = std::sqrt(static_cast<double>(c.hidden_size));
  recompute_ = c.recompute_layers;
}

torch::Tensor LlamaModelImpl::forward(const torch::Tensor& ids, const AttentionLayout& layout) {
  torch::Tensor h = embed_tokens(ids);  // (N, hidden)
  // Gemma: sqrt(hidden) rounded to the activation dtype first, as transformers' embed_scale buffer is.
  if (embed_scale_ > 0) h = h * torch::scalar_tensor(embed_scale_, h.options());
  // Recompute only where there is a backward to save memory for: a graph is being built and
  // no cache is written (the replay would write it twice).
  const bool recompute = recompute_ && torch::GradMode::is_enabled() && layout.cache == nullptr;
  std::shared_ptr<ReplayLayout> run;
  if (recompute) {
    run = std::make_shared<ReplayLayout>();
    run->layout = layout;
    if (layout.cp_shard != nullptr) run->shard = *layout.cp_shard, run->layout.cp_shard = &run->shard;
    if (layout.sliding) {
      run->layout.sliding = std::make_shared<AttentionLayout>(*layout.sliding);
      if (layout.cp_shard != nullptr) run->layout.sliding->cp_shard = &run->shard;
    }
  }
  for (size_t i = 0; i < layers->size(); ++i) {
    auto* layer = layers[i]->as<LlamaDecoderLayerImpl>();
    if (recompute) {
      auto replay = c10::make_intrusive<LayerReplay>();
      replay->run = run;
      replay->layer = layer;
      replay->lora = parallel::lora_active();
      std::vector<torch::Tensor> params;
      for (const auto& p : layer->parameters())
        if (p.requires_grad()) params.push_back(p);
      h = RecomputedLayer::apply(h, at::TensorList(params), replay)[0];
      continue;
    }
    LayerKv* kv = layout.cache != nullptr ? &layout.cache->layer(static_cast<int64_t>(i)) : nullptr;
    h = layer->forward(h, layout, kv);
  }
  return norm(h);
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& config, const parallel::ParallelContext& ctx,
                                           std::optional<uint64_t> init_seed)
    : config_(config), ctx_(ctx) {
  config_.validate();
  ctx_.validate();
  config_.validate_tp(ctx_.tp_size);
  model = register_module("model", LlamaModel(config_, ctx_));
  if (!config_.tie_embeddings)
    lm_head = register_module("lm_head",
                              parallel::ColumnParallelLinear(config_.hidden_size, config_.vocab_size, false, ctx_));
  if (init_seed) initialize_weights(*this, *init_seed);
}

void LlamaForCausalLMImpl::set_execution(AttentionKernel attention, bool recompute_layers) {
  config_.attention = attention;
  config_.recompute_layers = recompute_layers;
  model->set_recompute(recompute_layers);
}

torch::Tensor LlamaForCausalLMImpl::lm_head_weight() const {
  return config_.tie_embeddings ? model->embed_tokens->weight : lm_head->weight;  // (V_local, hidden)
}

void LlamaForCausalLMImpl::finish_layout(AttentionLayout& layout, const torch::Tensor& pos, int64_t q_rows,
                                         int64_t k_rows) const {
  const torch::Tensor& w = model->norm->weight;
  const LlamaConfig& c = config_;
  const bool packed = !layout.padded() && !layout.decode();
  const bool mixed = c.mixed_layers();
  layout.fused = use_fused_attention(c.attention, w.scalar_type());
  // Without a sliding view every layer is alike: all windowed (Mistral) or none.
  layout.window = !mixed && c.layer_sliding(0) ? c.sliding_window : 0;
  if (packed) plan_layout(layout, q_rows, k_rows, c.num_heads / ctx_.tp_size, w.device());
  layout.rotary = rotary_tables(pos, c.head_dim(), c.rope_theta, w.scalar_type(), c.rope_scaling);
  if (!mixed) return;
  auto view = std::make_shared<AttentionLayout>(layout);  // the same rows, cache and cp shard
  view->window = c.sliding_window;
  if (packed) plan_layout(*view, q_rows, k_rows, c.num_heads / ctx_.tp_size, w.device());
  if (c.rope_local_theta > 0) view->rotary = rotary_tables(pos, c.head_dim(), c.rope_local_theta, w.scalar_type());
  layout.sliding = std::move(view);
}

torch::Tensor LlamaForCausalLMImpl::hidden_packed(const PackedInput& in, AttentionLayout* layout,
                                                  parallel::CpShard* shard) {
  const torch::Tensor& w = model->norm->weight;
  require_ids_in_vocab(in.input_ids, config_.vocab_size, "input");
  torch::Tensor ids = in.input_ids.reshape({-1}).to(w.device());     // (N)
  torch::Tensor pos = in.position_ids.reshape({-1}).to(w.device());  // (N)
  const int64_t n = ids.size(0);
  require_host_metadata(in, "llama");
  if (pos.size(0) != n || in.cu_seqlens.dim() != 1 || in.cu_seqlens.numel() < 1 ||
      in.cu_seqlens[-1].item<int64_t>() != n)
    throw std::invalid_argument("llama: packed input with " + std::to_string(n) +
                                " tokens does not match its position_ids / cu_seqlens");
  if (in.prefix_of.defined() && ctx_.cp_enabled())
    throw std::invalid_argument("llama: shared prompts (prefix_of) are not split across context-parallel ranks");
  if (ctx_.cp_enabled()) {
    *shard = parallel::make_cp_shard(in.cu_seqlens, ctx_.cp_rank, ctx_.cp_size);
    const torch::Tensor local = shard->rank_index[ctx_.cp_rank].to(w.device());  // (n_local)
    ids = ids.index_select(0, local);
    pos = pos.index_select(0, local);
    for (const parallel::CpSegment& s : shard->segments)
      layout->segments.push_back({s.local_begin, s.length, shard->seq_begin[s.sequence], s.seq_offset});
    layout->cp_shard = shard;
    layout->cp = ctx_.cp;
  } else {
    layout->segments = in.prefix_of.defined() ? segments_with_prefixes(in.cu_seqlens, in.prefix_of)
                                              : segments_from_cu_seqlens(in.cu_seqlens);
  }
  finish_layout(*layout, pos, ids.size(0), ctx_.cp_enabled() ? shard->num_tokens() : ids.size(0));
  return model(ids, *layout);  // (n_local, hidden)
}

torch::Tensor LlamaForCausalLMImpl::hidden_padded(const PaddedInput& in) {
  if (ctx_.cp_enabled()) throw std::invalid_argument("llama: context parallelism needs the packed layout");
  const torch::Tensor& w = model->norm->weight;
  AttentionLayout layout;
  layout.batch = in.input_ids.size(0);
  layout.width = in.input_ids.size(1);
  require_ids_in_vocab(in.input_ids, config_.vocab_size, "input");
  layout.key_valid = in.attention_mask.to(w.device()).to(torch::kBool);    // (B, T)
  const torch::Tensor pos = in.position_ids.reshape({-1}).to(w.device());  // (B*T)
  finish_layout(layout, pos, 0, 0);
  return model(in.input_ids.reshape({-1}).to(w.device()), layout);  // (B*T, hidden)
}

TokenLogProbs LlamaForCausalLMImpl::head_log_probs(const torch::Tensor& hidden, const torch::Tensor& targets,
                                                   const LogProbOptions& o, const torch::Tensor& token_index) {
  TORCH_CHECK(o.chunked || !o.token_loss, "log_probs: a fused token loss needs the chunked head");
  if (!o.chunked)
    return parallel::full_logits_log_probs(hidden, lm_head_weight(), targets, vocab_begin(), ctx_.tp, o.with_entropy);
  return parallel::vocab_parallel_log_probs(
      hidden, lm_head_weight(), targets, vocab_begin(), ctx_.tp,
      {o.with_entropy, o.chunk_tokens, o.save_logits_max_bytes, o.token_loss, token_index});
}

torch::Tensor LlamaForCausalLMImpl::head_logits(const torch::Tensor& hidden) {
  const torch::Tensor w = lm_head_weight();
  const torch::Tensor local = parallel::sampling_linear(parallel::copy_to_tp(hidden, ctx_.tp), w, torch::Tensor(),
                                                        head_packed_);  // (N, V_local)
  return parallel::gather_last_dim_from_tp(local.to(parallel::logits_dtype(w.scalar_type())), ctx_.tp, vocab_begin());
}

namespace {

// The rows of `keep` (n) that go through the head: its nonzero ones, else row 0 alone (none when
// n is 0: a cp rank without rows).
torch::Tensor wanted_rows(const torch::Tensor& keep) {
  const torch::Tensor rows = (keep != 0).nonzero().squeeze(1);  // (R)
  return rows.numel() > 0 || keep.numel() == 0 ? rows : torch::zeros({1}, rows.options());
}

// (R) values at `rows` of an (n) axis, 0 elsewhere.
torch::Tensor scatter_rows(const torch::Tensor& v, const torch::Tensor& rows, int64_t n) {
  return torch::zeros({n}, v.options()).index_copy(0, rows.to(v.device()), v);
}

}  // namespace

TokenLogProbs LlamaForCausalLMImpl::log_probs(const PackedInput& in, const torch::Tensor& targets,
                                              const LogProbOptions& o) {
  require_ids_in_vocab(targets, config_.vocab_size, "target");
  AttentionLayout layout;
  parallel::CpShard shard;
  const torch::Tensor hidden = hidden_packed(in, &layout, &shard);  // (n_local, hidden)
  const int64_t n_local = hidden.size(0);
  torch::Tensor t = targets.reshape({-1}).to(hidden.device());  // (N)
  // A fused loss sees this rank's tokens at their positions in the whole micro.
  const torch::Tensor index = ctx_.cp_enabled() ? shard.rank_index[ctx_.cp_rank] : torch::Tensor();  // (n_local)
  if (index.defined()) t = t.index_select(0, index.to(t.device()));
  TokenLogProbs r;
  if (o.wanted.defined()) {
    torch::Tensor keep = o.wanted.reshape({-1}).to(hidden.device());  // (N)
    if (index.defined()) keep = keep.index_select(0, index.to(keep.device()));
    const torch::Tensor rows = wanted_rows(keep);  // (R) local rows
    const TokenLogProbs part =
        head_log_probs(hidden.index_select(0, rows), t.index_select(0, rows), o,
                       index.defined() ? index.to(rows.device()).index_select(0, rows) : rows);  // (R)
    r.loss = part.loss;
    r.logp = scatter_rows(part.logp, rows, n_local);  // (n_local)
    if (part.entropy.defined()) r.entropy = scatter_rows(part.entropy, rows, n_local);
  } else {
    r = head_log_probs(hidden, t, o, index);  // (n_local)
  }
  if (ctx_.cp_enabled() && n_local == 0 && hidden.requires_grad()) {
    // A cp rank without rows: the head saw none, so tie its outputs to the (empty) hidden rows,
    // else this rank's backward would skip the layers' cp collectives (attention.cpp).
    const torch::Tensor zero = hidden.sum() * 0;  // ()
    r.logp = r.logp + zero;
    if (r.entropy.defined()) r.entropy = r.entropy + zero;
    if (r.loss.defined()) r.loss = r.loss + zero;
  }
  if (ctx_.cp_enabled()) {
    r.logp = parallel::cp_gather_outputs(r.logp, shard, ctx_.cp);  // (N)
    if (r.entropy.defined()) r.entropy = parallel::cp_gather_outputs(r.entropy, shard, ctx_.cp);
  }
  return r;
}

TokenLogProbs LlamaForCausalLMImpl::log_probs(const PaddedInput& in, const torch::Tensor& targets,
                                              const LogProbOptions& o) {
  require_ids_in_vocab(targets, config_.vocab_size, "target");
  const int64_t b = in.input_ids.size(0), t = in.input_ids.size(1);
  const torch::Tensor hidden = hidden_padded(in);                            // (B*T, hidden)
  torch::Tensor keep = in.attention_mask.reshape({-1}).to(hidden.device());  // (B*T)
  if (o.wanted.defined()) keep = keep.logical_and(o.wanted.reshape({-1}).to(hidden.device()) != 0);
  const torch::Tensor rows = o.wanted.defined() ? wanted_rows(keep) : keep.nonzero().squeeze(1);  // (R)
  const TokenLogProbs real = head_log_probs(hidden.index_select(0, rows),
                                            targets.reshape({-1}).to(hidden.device()).index_select(0, rows), o, rows);
  TokenLogProbs r;  // (B, T), 0 on padding and on rows not wanted
  r.loss = real.loss;
  r.logp = scatter_rows(real.logp, rows, b * t).view({b, t});
  if (real.entropy.defined()) r.entropy = scatter_rows(real.entropy, rows, b * t).view({b, t});
  return r;
}

torch::Tensor LlamaForCausalLMImpl::logits(const PackedInput& in) {
  AttentionLayout layout;
  parallel::CpShard shard;
  const torch::Tensor z = head_logits(hidden_packed(in, &layout, &shard));  // (n_local, V)
  return ctx_.cp_enabled() ? parallel::cp_gather_outputs(z, shard, ctx_.cp) : z;
}

KvCache LlamaForCausalLMImpl::make_kv_cache(int64_t slots, int64_t capacity, int64_t prefix_slots,
                                            int64_t prefix_capacity) const {
  const torch::Tensor& w = model->norm->weight;
  const int64_t kv_heads = config_.num_kv_heads / ctx_.tp_size;  // validate_tp: tp divides the kv heads
  return KvCache(config_.num_layers, slots, capacity, kv_heads, config_.head_dim(), w.options(), prefix_slots,
                 prefix_capacity);
}

torch::Tensor LlamaForCausalLMImpl::prefill(const PackedInput& in, KvCache* cache, const std::vector<int64_t>& slots,
                                            bool into_prefixes) {
  const torch::Tensor& w = model->norm->weight;
  require_ids_in_vocab(in.input_ids, config_.vocab_size, "input");
  const torch::Tensor ids = in.input_ids.reshape({-1}).to(w.device());     // (N)
  const torch::Tensor pos = in.position_ids.reshape({-1}).to(w.device());  // (N)
  require_host_metadata(in, "llama prefill");
  AttentionLayout layout;
  layout.segments = segments_from_cu_seqlens(in.cu_seqlens);
  const int64_t sequences = in.cu_seqlens.numel() - 1;
  if (static_cast<int64_t>(layout.segments.size()) != sequences || pos.size(0) != ids.size(0) ||
      in.cu_seqlens[-1].item<int64_t>() != ids.size(0))
    throw std::invalid_argument("llama prefill: every sequence must be non-empty and match position_ids");
  if (cache != nullptr) {
    if (into_prefixes)
      cache->check_prefix_prefill(layout.segments, slots);
    else
      cache->check_prefill(layout.segments, slots);
    layout.cache = cache;
    layout.cache_slots = slots;
    layout.cache_prefixes = into_prefixes;
  }
  finish_layout(layout, pos, ids.size(0), ids.size(0));
  const torch::Tensor hidden = model(ids, layout);  // (N, hidden)
  std::vector<int64_t> last;
  for (const AttentionSegment& s : layout.segments) last.push_back(s.q_begin + s.length - 1);
  const torch::Tensor rows = torch::tensor(last, torch::kInt64).to(w.device());  // (B)
  // Only the last rows go through the lm head: the other tokens' logits are never needed.
  const torch::Tensor z = head_logits(hidden.index_select(0, rows));  // (B, V)
  if (cache != nullptr)
    for (size_t i = 0; i < slots.size(); ++i)
      if (into_prefixes)
        cache->set_prefix_length(slots[i], layout.segments[i].length);
      else
        cache->set_length(slots[i], layout.segments[i].length);
  return z;
}

torch::Tensor LlamaForCausalLMImpl::decode_step(const torch::Tensor& ids, KvCache& cache) {
  require_ids_in_vocab(ids, config_.vocab_size, "input");
  const torch::Tensor& w = model->norm->weight;
  const int64_t n = ids.numel();
  AttentionLayout layout;
  layout.cache = &cache;
  const torch::Tensor positions = cache.decode_positions(n, w.device());  // (n), validated
  std::vector<int64_t> rows;  // each slot's own rows so far: where its new row goes
  int64_t span = 0;           // own keys after this step's store: the longest slot + 1
  for (int64_t i = 0; i < n; ++i) rows.push_back(cache.length(i)), span = std::max(span, cache.length(i) + 1);
  const auto idx = torch::TensorOptions().dtype(torch::kInt64).device(w.device());
  layout.cache_rows = torch::tensor(rows, torch::kInt64).to(w.device());  // (n)
  std::vector<int64_t> current;  // each sequence's position (host), for a window over shared prefixes
  if (config_.sliding_window > 0)
    for (int64_t i = 0; i < n; ++i) current.push_back(cache.position(i));
  const std::vector<PrefixGroup> groups = cache.prefix_groups(n);
  const auto masks = [&](AttentionLayout& view) {  // the own-row mask and prefix index of view.window
    view.cache_key_valid =                         // (n, S): row i sees its own rows j <= rows[i], the new one included
        torch::arange(span, idx).unsqueeze(0) <= view.cache_rows.unsqueeze(1);
    if (view.window > 0)  // own row j is position (prefix + j): seen while j > rows[i] - window
      view.cache_key_valid &= torch::arange(span, idx).unsqueeze(0) > view.cache_rows.unsqueeze(1) - view.window;
    view.prefixes = prefix_index(groups, n, w.device(), view.window, current);  // once for every layer
  };
  finish_layout(layout, positions, 0, 0);
  masks(layout);
  if (layout.sliding) masks(*layout.sliding);
  const torch::Tensor z = head_logits(model(ids.reshape({-1}).to(w.device()), layout));  // (n, V)
  for (int64_t i = 0; i < n; ++i) cache.set_length(i, cache.length(i) + 1);
  return z;
}

torch::Tensor LlamaForCausalLMImpl::logits(const PaddedInput& in) {
  const torch::Tensor z = head_logits(hidden_padded(in));  // (B*T, V)
  return z.view({in.input_ids.size(0), in.input_ids.size(1), -1});
}

}  // namespace tandem::models
