// The Llama / Qwen2 model against transformers (the hidden [.hf_oracle] case) and the independent
// Python reference (scripts/fixtures/make_llama.py): logits in float64 / float32, packed vs padded log-probs with a
// control that ignores sequence boundaries, chunked vs unchunked gradients, the HF config mapping, the peak memory
// of chunked vs unchunked log-probs, fused vs materialised attention and layer recompute vs none.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "fixtures.h"
#include "llama_test_util.h"
#include "models/llama/model.h"
#include "models/llama/weights.h"
#include "models/safetensors.h"
#include "runtime/peak_memory.h"

using namespace tandem;
using models::LlamaForCausalLM;

namespace {

struct Reference {
  std::vector<std::vector<int64_t>> sequences;
  std::vector<torch::Tensor> logits;  // per sequence (L, V) float64
};

Reference load_reference(const std::string& name) {
  const nlohmann::json j = test::load_fixture("llama/" + name + ".logits.json");
  Reference r;
  r.sequences = j.at("sequences").get<std::vector<std::vector<int64_t>>>();
  for (const auto& seq : j.at("logits")) {
    std::vector<torch::Tensor> rows;
    for (const auto& row : seq) rows.push_back(test::to_tensor(row, torch::kFloat64));
    r.logits.push_back(torch::stack(rows));
  }
  return r;
}

// Every parameter's gradient by name (float64 copies).
std::map<std::string, torch::Tensor> grads_of(torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> g;
  for (const auto& p : m.named_parameters()) g[p.key()] = p.value().grad().detach().to(torch::kFloat64).clone();
  return g;
}

double max_grad_error(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  double worst = 0;
  for (const auto& [name, g] : b) worst = std::max(worst, test::rel_to_max(a.at(name), g));
  return worst;
}

}  // namespace

TEST_CASE("HF config.json maps to LlamaConfig and back", "[llama]") {
  const models::LlamaConfig l = models::from_hf_config(models::read_hf_config(test::llama_fixture("tiny_llama")));
  CHECK(l.vocab_size == 97);
  CHECK(l.hidden_size == 32);
  CHECK(l.num_layers == 2);
  CHECK(l.num_heads == 4);
  CHECK(l.num_kv_heads == 2);
  CHECK(l.intermediate_size == 48);
  CHECK(l.max_seq_len == 64);
  CHECK(l.rms_eps == 1e-5);
  CHECK(!l.tie_embeddings);
  CHECK(!l.qkv_bias);
  const models::LlamaConfig q = models::from_hf_config(models::read_hf_config(test::llama_fixture("tiny_qwen2")));
  CHECK(q.qkv_bias);
  CHECK(q.tie_embeddings);
  CHECK(q.rope_theta == 1e6);
  CHECK(q.head_dim() == 8);
  for (const auto& c : {l, q}) {
    const models::LlamaConfig back = models::from_hf_config(models::to_hf_config(c, torch::kBFloat16));
    CHECK(back.vocab_size == c.vocab_size);
    CHECK(back.num_kv_heads == c.num_kv_heads);
    CHECK(back.qkv_bias == c.qkv_bias);
    CHECK(back.tie_embeddings == c.tie_embeddings);
    CHECK(back.rope_theta == c.rope_theta);
    CHECK(models::to_hf_config(c, torch::kBFloat16).at("torch_dtype") == "bfloat16");
  }
  // Llama 3.1 style: an explicit head_dim and llama3 rope_scaling survive the round trip.
  const nlohmann::json j31 = models::read_hf_config(test::llama_fixture("tiny_llama31"));
  const models::LlamaConfig l31 = models::from_hf_config(j31);
  CHECK(l31.head_dim() == 12);
  CHECK(l31.rope_scaling.kind == models::RopeScalingKind::kLlama3);
  CHECK(l31.rope_scaling.factor == 8.0);
  CHECK(l31.rope_scaling.original_max_seq_len == 64);
  const nlohmann::json out = models::to_hf_config(l31, torch::kFloat32, j31);
  CHECK(models::from_hf_config(out).rope_scaling == l31.rope_scaling);
  CHECK(models::from_hf_config(out).head_dim() == 12);
  // Keys tandem does not model are kept from the base config.json.
  CHECK(out.at("bos_token_id") == 1);
  CHECK(out.at("eos_token_id") == nlohmann::json::array({2, 3}));
  // A head_dim that spells out the default resolves like one left out.
  nlohmann::json spelled = models::read_hf_config(test::llama_fixture("tiny_llama"));
  spelled["head_dim"] = 8;
  CHECK(models::from_hf_config(spelled).explicit_head_dim == 0);
}

TEST_CASE("transformers 5's config.json spelling and Qwen3 map to LlamaConfig and back", "[llama]") {
  // What Qwen3Config(...).save_pretrained writes with transformers 5: rope_parameters, dtype, layer_types.
  const nlohmann::json qwen3 = nlohmann::json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": false, "dtype": "bfloat16",
    "head_dim": 16, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096, "vocab_size": 96,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "use_sliding_window": false, "sliding_window": null,
    "layer_types": ["full_attention", "full_attention"],
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}})");
  const models::LlamaConfig c = models::from_hf_config(qwen3);
  CHECK(c.qk_norm);
  CHECK(!c.qkv_bias);
  CHECK(c.head_dim() == 16);
  CHECK(c.rope_theta == 1e6);  // from rope_parameters
  CHECK(c.rope_scaling.kind == models::RopeScalingKind::kNone);
  const nlohmann::json out = models::to_hf_config(c, torch::kFloat32, qwen3);
  CHECK(out.at("model_type") == "qwen3");
  CHECK(out.at("architectures") == nlohmann::json::array({"Qwen3ForCausalLM"}));
  CHECK(out.at("attention_bias") == false);
  CHECK(out.at("dtype") == "float32");  // the base's spelling is kept
  CHECK(!out.contains("torch_dtype"));
  CHECK(!out.contains("rope_scaling"));
  CHECK(out.at("rope_parameters").at("rope_theta") == 1e6);
  const models::LlamaConfig back = models::from_hf_config(out);
  CHECK(back.qk_norm);
  CHECK(back.rope_theta == 1e6);
  // llama3 scaling in rope_parameters, as transformers 5 writes a Llama 3.1 config.json.
  nlohmann::json l31 = models::read_hf_config(test::llama_fixture("tiny_llama31"));
  const models::LlamaConfig legacy = models::from_hf_config(l31);
  nlohmann::json v5 = l31;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5["rope_parameters"] = l31.at("rope_scaling");
  v5["rope_parameters"]["rope_theta"] = legacy.rope_theta;
  const models::LlamaConfig from_v5 = models::from_hf_config(v5);
  CHECK(from_v5.rope_scaling == legacy.rope_scaling);
  CHECK(from_v5.rope_theta == legacy.rope_theta);
  // Sliding-window layers are not modelled: refused by name.
  nlohmann::json sliding = qwen3;
  sliding["layer_types"] = {"full_attention", "sliding_attention"};
  CHECK_THROWS_WITH(models::from_hf_config(sliding), Catch::Contains("layer_types"));
}

TEST_CASE("Gemma 3's config.json in both spellings maps to LlamaConfig and back", "[llama]") {
  // What Gemma3TextConfig(...).save_pretrained writes with transformers 5.
  const nlohmann::json v5 = nlohmann::json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": false,
    "attn_logit_softcapping": null, "final_logit_softcapping": null, "dtype": "float32", "head_dim": 16,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 131072, "vocab_size": 64,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "query_pre_attn_scalar": 24, "rms_norm_eps": 1e-06, "sliding_window": 4, "sliding_window_pattern": 2,
    "tie_word_embeddings": true, "use_bidirectional_attention": false,
    "rope_parameters": {"full_attention": {"factor": 2.0, "rope_theta": 1000000.0, "rope_type": "linear"},
                        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}})");
  const models::LlamaConfig c = models::from_hf_config(v5);
  CHECK(c.block == models::DecoderBlock::kGemma3);
  CHECK(c.qk_norm);
  CHECK(c.tie_embeddings);
  CHECK(c.head_dim() == 16);
  CHECK(c.sliding_window == 4);
  CHECK(c.full_attention_layers == std::vector<int64_t>{1, 3});
  CHECK(c.layer_sliding(0));
  CHECK(!c.layer_sliding(1));
  CHECK(c.mixed_layers());
  CHECK(c.rope_theta == 1e6);
  CHECK(c.rope_local_theta == 1e4);
  CHECK(c.rope_scaling.kind == models::RopeScalingKind::kLinear);
  CHECK(c.rope_scaling.factor == 2.0);
  CHECK(c.query_pre_attn_scalar == 24);
  const nlohmann::json out = models::to_hf_config(c, torch::kBFloat16, v5);
  for (const char* key : {"architectures", "model_type", "layer_types", "rope_parameters", "sliding_window",
                          "query_pre_attn_scalar", "hidden_activation", "head_dim"}) {
    INFO(key);
    CHECK(out.at(key) == v5.at(key));
  }
  CHECK(out.at("dtype") == "bfloat16");
  CHECK(!out.contains("hidden_act"));
  // The hub's gemma-3-1b spelling (transformers 4): sliding_window_pattern, rope_local_base_freq,
  // rope_theta and rope_scaling at the top level; head_dim and tie_word_embeddings by default.
  nlohmann::json v4 = nlohmann::json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
    "num_key_value_heads": 1, "max_position_embeddings": 32768, "vocab_size": 262144, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
    "attn_logit_softcapping": null, "final_logit_softcapping": null})");
  const models::LlamaConfig one_b = models::from_hf_config(v4);
  CHECK(one_b.head_dim() == 256);
  CHECK(one_b.tie_embeddings);
  CHECK(one_b.full_attention_layers == std::vector<int64_t>{5, 11, 17, 23});
  CHECK(one_b.rope_local_theta == 1e4);
  CHECK(one_b.rope_theta == 1e6);
  const nlohmann::json one_b_out = models::to_hf_config(one_b, torch::kBFloat16, v4);
  CHECK(one_b_out.at("rope_local_base_freq") == 1e4);
  CHECK(one_b_out.at("layer_types").size() == 26);
  CHECK(!one_b_out.contains("sliding_window_pattern"));
  const models::LlamaConfig again = models::from_hf_config(one_b_out);
  CHECK(again.full_attention_layers == one_b.full_attention_layers);
  CHECK(again.head_dim() == 256);
  // Every Gemma feature tandem lacks is refused by name.
  const auto refused = [&](const char* key, const nlohmann::json& value, const std::string& needle) {
    nlohmann::json j = v5;
    j[key] = value;
    INFO(key);
    CHECK_THROWS_WITH(models::from_hf_config(j, "g.json"), Catch::Contains(needle) && Catch::Contains("g.json"));
  };
  refused("final_logit_softcapping", 30.0, "final_logit_softcapping is not supported");
  refused("attn_logit_softcapping", 50.0, "attn_logit_softcapping is not supported");
  refused("use_bidirectional_attention", true, "use_bidirectional_attention");
  refused("hidden_activation", "gelu", "hidden_activation must be gelu_pytorch_tanh");
  refused("attention_bias", true, "attention_bias");
  refused("sliding_window", nullptr, "sliding_window must be an integer");
  refused("layer_types", {"sliding_attention", "full_attention"}, "one type per layer (4)");
  refused("layer_types", {"sliding_attention", "chunked_attention", "full_attention", "full_attention"},
          "'chunked_attention'");
  refused("rope_parameters",
          {{"full_attention", {{"rope_type", "default"}}},
           {"sliding_attention", {{"rope_type", "linear"}, {"factor", 2.0}}}},
          "rope_parameters.sliding_attention must be rope_type default");
}

TEST_CASE("unsupported or malformed HF configs are UserErrors naming the field", "[llama]") {
  const nlohmann::json good = models::read_hf_config(test::llama_fixture("tiny_llama"));
  const auto fails_with = [&](const char* key, const nlohmann::json& value, const std::string& needle) {
    nlohmann::json j = good;
    if (value.is_discarded())
      j.erase(key);
    else
      j[key] = value;
    INFO(key);
    CHECK_THROWS_WITH(models::from_hf_config(j, "cfg.json"), Catch::Contains(needle) && Catch::Contains("cfg.json"));
  };
  fails_with("num_hidden_layers", nlohmann::json::value_t::discarded, "num_hidden_layers is missing");
  fails_with("hidden_size", "32", "hidden_size must be an integer");
  fails_with("rope_scaling", {{"type", "llama3"}}, "original_max_position_embeddings");  // llama3 needs it
  fails_with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}, "'yarn' is not supported");
  fails_with("rope_scaling", {{"rope_type", "linear"}, {"factor", 0.5}}, "factor");
  fails_with("vocab_size", int64_t{1} << 40, "vocab_size 1099511627776 is out of range");
  fails_with("intermediate_size", int64_t{1} << 40, "intermediate_size");
  fails_with("num_hidden_layers", 0, "num_hidden_layers 0 is out of range");
  fails_with("attention_bias", true, "attention_bias");
  fails_with("model_type", "gemma2",
             "model_type 'gemma2' is not supported (llama, mistral, qwen2, qwen3 or gemma3_text)");
  fails_with("model_type", "gemma3", "Gemma3ForConditionalGeneration");
  {  // Mistral: the window read from config.json and written back; null is no window; Qwen2's is ignored.
    nlohmann::json m = good;
    m["model_type"] = "mistral";
    m["sliding_window"] = 4096;
    const models::LlamaConfig mc = models::from_hf_config(m);
    CHECK(mc.sliding_window == 4096);
    const nlohmann::json back = models::to_hf_config(mc, torch::kFloat32);
    CHECK(back.at("model_type") == "mistral");
    CHECK(back.at("architectures") == nlohmann::json::array({"MistralForCausalLM"}));
    CHECK(back.at("sliding_window") == 4096);
    CHECK(models::from_hf_config(back).sliding_window == 4096);
    m["sliding_window"] = nullptr;
    CHECK(models::from_hf_config(m).sliding_window == 0);
    CHECK(models::to_hf_config(models::from_hf_config(m), torch::kFloat32, m).at("model_type") == "mistral");
    m["sliding_window"] = 0;
    CHECK_THROWS_WITH(models::from_hf_config(m), Catch::Contains("sliding_window 0 is out of range"));
    nlohmann::json q = good;
    q["model_type"] = "qwen2";
    q["sliding_window"] = 4096;
    CHECK(models::from_hf_config(q).sliding_window == 0);
  }
  fails_with("hidden_act", "gelu", "hidden_act");
  fails_with("num_key_value_heads", 3, "num_kv_heads");
  fails_with("head_dim", 7, "head_dim 7 must be even");
  models::LlamaConfig c = models::from_hf_config(good);
  CHECK_THROWS_AS(c.validate_tp(4), UserError);  // 2 kv heads over 4 ranks
}

TEST_CASE("logits match the independent reference: float64 1e-10, float32 1e-4 of max |logit|", "[llama]") {
  for (const std::string name : {"tiny_llama", "tiny_qwen2", "tiny_llama31"}) {
    const Reference ref = load_reference(name);
    for (const auto [dtype, tol] : {std::pair{torch::kFloat64, 1e-10}, std::pair{torch::kFloat32, 1e-4}}) {
      INFO(name << " " << c10::toString(dtype));
      LlamaForCausalLM model = models::load_llama(test::llama_fixture(name), {}, dtype);
      torch::NoGradGuard no_grad;
      // Each sequence alone, then all of them in one pack and one padded batch.
      for (size_t i = 0; i < ref.sequences.size(); ++i) {
        const test::RaggedBatch one = test::ragged_batch({ref.sequences[i]});
        CHECK(test::rel_to_max(model->logits(one.packed), ref.logits[i]) < tol);
      }
      const test::RaggedBatch all = test::ragged_batch(ref.sequences);
      const torch::Tensor packed = model->logits(all.packed);  // (N, V)
      const torch::Tensor padded = model->logits(all.padded);  // (B, T, V)
      CHECK(packed.scalar_type() == dtype);
      for (size_t i = 0; i < ref.sequences.size(); ++i) {
        const int64_t s = all.cu[i].item<int64_t>(), n = ref.logits[i].size(0);
        CHECK(test::rel_to_max(packed.narrow(0, s, n), ref.logits[i]) < tol);
        CHECK(test::rel_to_max(padded[i].narrow(0, 0, n), ref.logits[i]) < tol);
      }
    }
  }
}

TEST_CASE("bfloat16 weights run with float32 log-prob statistics", "[llama]") {
  const Reference ref = load_reference("tiny_qwen2");
  LlamaForCausalLM model = models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kBFloat16);
  const test::RaggedBatch b = test::ragged_batch(ref.sequences);
  const models::TokenLogProbs r = model->log_probs(b.packed, b.packed_targets, {true});
  CHECK(r.logp.scalar_type() == torch::kFloat32);
  CHECK(torch::isfinite(r.logp).all().item<bool>());
  const torch::Tensor logits = model->logits(b.packed);
  CHECK(test::rel_to_max(logits.narrow(0, 0, 3), ref.logits[0]) < 5e-2);  // bf16 has 8 mantissa bits
  r.logp.sum().backward();
  CHECK(model->model->embed_tokens->weight.grad().scalar_type() == torch::kBFloat16);
}

TEST_CASE("packed and padded log-probs agree; a pack that ignores cu_seqlens does not", "[llama]") {
  // Relative error max |a - b| / max(|b|, 1) per token. The control keeps the restarting
  // positions but gives attention one block over the whole pack, so it crosses boundaries.
  const auto seqs = test::random_sequences({7, 1, 12, 4, 9}, 97, 5);
  const test::RaggedBatch b = test::ragged_batch(seqs);
  for (const std::string name : {"tiny_llama", "tiny_qwen2"}) {
    for (const auto [dtype, tol] : {std::pair{torch::kFloat64, 1e-12}, std::pair{torch::kFloat32, 1e-5}}) {
      INFO(name << " " << c10::toString(dtype));
      LlamaForCausalLM model = models::load_llama(test::llama_fixture(name), {}, dtype);
      torch::NoGradGuard no_grad;
      const models::TokenLogProbs packed = model->log_probs(b.packed, b.packed_targets, {true});
      const models::TokenLogProbs padded = model->log_probs(b.padded, b.padded_targets, {true});
      const torch::Tensor valid = b.padded.attention_mask;
      CHECK(test::rel_floor1(packed.logp, padded.logp.masked_select(valid)) < tol);
      // Entropy: absolute below 1, and float32 entropies of the peaked Qwen2 fixture (|logit| up to 26)
      // carry the logits' rounding, so float32 allows 3e-5 here.
      CHECK(test::rel_floor1(packed.entropy, padded.entropy.masked_select(valid)) <
            (dtype == torch::kFloat32 ? 3e-5 : tol));
      CHECK((padded.logp.masked_select(~valid) == 0).all().item<bool>());
      models::PackedInput control = b.packed;
      control.cu_seqlens = torch::tensor({0, static_cast<int>(b.cu[-1].item<int64_t>())}, torch::kInt32);
      const models::TokenLogProbs crossed = model->log_probs(control, b.packed_targets);
      CHECK(test::rel_floor1(crossed.logp, padded.logp.masked_select(valid)) > 1e-3);
      // The first sequence sees nothing before it, so it is unaffected even in the control.
      CHECK(test::rel_floor1(crossed.logp.narrow(0, 0, 7), packed.logp.narrow(0, 0, 7)) < tol);
    }
  }
}

TEST_CASE("chunked log-prob backward equals the unchunked autograd one (float64 1e-12)", "[llama]") {
  // Errors relative to the largest magnitude of each reference tensor.
  const auto seqs = test::random_sequences({6, 11, 3}, 97, 9);
  const test::RaggedBatch b = test::ragged_batch(seqs);
  const int64_t n = b.packed_targets.size(0);
  const torch::Tensor wl = test::random_weights(n, 1, torch::kFloat64),
                      we = test::random_weights(n, 2, torch::kFloat64);
  for (const std::string name : {"tiny_llama", "tiny_qwen2"}) {
    LlamaForCausalLM model = models::load_llama(test::llama_fixture(name), {}, torch::kFloat64);
    const auto run = [&](models::LogProbOptions o) {
      model->zero_grad();
      o.with_entropy = true;
      const models::TokenLogProbs r = model->log_probs(b.packed, b.packed_targets, o);
      ((r.logp * wl).sum() + (r.entropy * we).sum()).backward();
      return std::make_tuple(r.logp.detach(), r.entropy.detach(), grads_of(*model));
    };
    const auto [logp0, ent0, grads0] = run({false, false});
    for (int64_t chunk : {1, 7, 1000}) {
      INFO(name << " chunk " << chunk);
      const auto [logp, ent, grads] = run({false, true, chunk});
      CHECK(test::rel_to_max(logp, logp0) < 1e-12);
      CHECK(test::rel_to_max(ent, ent0) < 1e-12);
      CHECK(max_grad_error(grads, grads0) < 1e-12);
    }
    // Only one of the two outputs used: the other's gradient is absent in the backward.
    model->zero_grad();
    model->log_probs(b.packed, b.packed_targets, {true, true, 4}).entropy.sum().backward();
    const auto only_entropy = grads_of(*model);
    model->zero_grad();
    model->log_probs(b.packed, b.packed_targets, {true, false}).entropy.sum().backward();
    CHECK(max_grad_error(only_entropy, grads_of(*model)) < 1e-12);
  }
}

TEST_CASE("random init: HF conventions, and the same seed gives the same model", "[llama]") {
  models::LlamaConfig c = models::from_hf_config(models::read_hf_config(test::llama_fixture("tiny_qwen2")));
  c.initializer_range = 0.5;
  const parallel::ParallelContext one;
  LlamaForCausalLM a(c, one, 7), b(c, one, 7), other(c, one, 8);
  CHECK(torch::equal(a->model->embed_tokens->weight, b->model->embed_tokens->weight));
  CHECK(!torch::equal(a->model->embed_tokens->weight, other->model->embed_tokens->weight));
  const auto layer = a->model->layers[0]->as<models::LlamaDecoderLayerImpl>();
  CHECK(torch::equal(layer->input_layernorm->weight, torch::ones({48})));
  CHECK(torch::equal(layer->self_attn->q_proj->bias, torch::zeros({48})));
  CHECK(layer->mlp->up_proj->weight.std().item<double>() == Approx(0.5).epsilon(0.1));
  CHECK(!a->lm_head);  // tied
}

TEST_CASE("peak memory of a forward + backward: chunked log-probs vs full logits", "[llama][memory]") {
  // A model whose lm head dominates: vocab 16384, hidden 64, one layer, 4 x 1024 tokens, float32.
  // Full (tokens, vocab) float32 logits are 4096 * 16384 * 4 B = 256 MiB; the default chunk
  // (kDefaultLogitsChunkBytes) is 2048 of these tokens, so auto cuts two chunks.
  models::LlamaConfig c;
  c.vocab_size = 16384, c.hidden_size = 64, c.num_layers = 1, c.num_heads = 4, c.num_kv_heads = 2;
  c.intermediate_size = 128, c.max_seq_len = 1024;
  LlamaForCausalLM model(c, parallel::ParallelContext{}, 1);
  const test::RaggedBatch b = test::ragged_batch(test::random_sequences({1024, 1024, 1024, 1024}, c.vocab_size, 4));
  REQUIRE(parallel::logits_chunk_tokens({}, c.vocab_size, 4) < 4096);
  const auto peak_mib = [&](models::LogProbOptions o) {
    model->zero_grad();
    PeakMemoryScope scope;
    {
      const models::TokenLogProbs r = model->log_probs(b.packed, b.packed_targets, o);
      (r.logp.sum() + r.entropy.sum()).backward();
    }
    return static_cast<double>(scope.peak_bytes()) / (1 << 20);
  };
  const double full = peak_mib({true, false});
  const double chunked = peak_mib({true, true, 256});
  const double chunked_auto = peak_mib({true, true, 0});
  std::printf(
      "[memory] log-prob + entropy forward+backward, 4096 tokens x vocab 16384 (float32): peak tensor memory "
      "unchunked %.1f MiB, chunked (256 tokens) %.1f MiB, chunked (auto, %lld tokens) %.1f MiB\n",
      full, chunked, static_cast<long long>(parallel::logits_chunk_tokens({}, c.vocab_size, 4)), chunked_auto);
  CHECK(full > 256.0 * 2);  // at least the logits and their log-softmax
  CHECK(chunked < full / 4);
  CHECK(chunked_auto < full / 2);
}

namespace {

// Sequences 0 and 4 stand alone; 1-3 are responses continuing sequence 0 (a shared prompt).
models::PackedInput shared_prompt_input() {
  const std::vector<std::vector<int64_t>> seqs = test::random_sequences({5, 4, 1, 6, 3}, 97, 21);
  models::PackedInput in = test::ragged_batch(seqs).packed;
  in.prefix_of = torch::tensor({-1, 0, 0, 0, -1}, torch::kInt64);
  in.position_ids =
      torch::tensor({0, 1, 2, 3, 4, 5, 6, 7, 8, 5, 5, 6, 7, 8, 9, 10, 0, 1, 2}, torch::kInt64).view({1, -1});
  return in;
}

// log-probs and every parameter gradient of one packed and one padded batch and a shared-prompt
// pack, with the model run as `attention` / `recompute`.
struct Run {
  std::vector<torch::Tensor> logp;
  std::map<std::string, torch::Tensor> grads;
};
Run run_layouts(LlamaForCausalLM& model, models::AttentionKernel attention, bool recompute) {
  model->set_execution(attention, recompute);
  model->zero_grad();
  const test::RaggedBatch b = test::ragged_batch(test::random_sequences({7, 1, 12, 4, 9}, 97, 5));
  const models::PackedInput shared = shared_prompt_input();
  const torch::Tensor shared_targets = torch::tensor(test::random_sequences({19}, 97, 22)[0], torch::kInt64);  // (N)
  Run r;
  torch::Tensor loss = torch::zeros({}, torch::kFloat64);
  for (const models::TokenLogProbs& t :
       {model->log_probs(b.packed, b.packed_targets, {true}), model->log_probs(b.padded, b.padded_targets, {true}),
        model->log_probs(shared, shared_targets, {true})}) {
    r.logp.push_back(t.logp.detach().to(torch::kFloat64));
    loss = loss +
           (t.logp.to(torch::kFloat64) * test::random_weights(t.logp.numel(), 3, torch::kFloat64).view(t.logp.sizes()))
               .sum() +
           t.entropy.to(torch::kFloat64).sum();
  }
  loss.backward();
  r.grads = grads_of(*model);
  return r;
}

}  // namespace

TEST_CASE("fused attention through the model equals the materialised one: packed, padded, shared prompts",
          "[llama][fused]") {
  // Float64 on both kernels to 1e-12 (the flash kernel runs float64 too); float32 fused against
  // float32 materialised to 2e-5 of each tensor's largest entry.
  for (const auto [dtype, tol] : {std::pair{torch::kFloat64, 1e-12}, std::pair{torch::kFloat32, 2e-5}}) {
    INFO(c10::toString(dtype));
    LlamaForCausalLM model = models::load_llama(test::llama_fixture("tiny_qwen2"), {}, dtype);  // GQA 6 / 2
    const Run fused = run_layouts(model, models::AttentionKernel::kFused, false);
    const Run materialised = run_layouts(model, models::AttentionKernel::kMaterialised, false);
    for (size_t i = 0; i < fused.logp.size(); ++i) CHECK(test::rel_floor1(fused.logp[i], materialised.logp[i]) < tol);
    CHECK(max_grad_error(fused.grads, materialised.grads) < tol);
  }
}

TEST_CASE("recompute: layers equals none bit for bit, and holds less memory", "[llama][recompute]") {
  // The replayed forward is the same arithmetic, so gradients are identical: float64 on the
  // materialised reference, float32 on the fused kernels.
  for (const auto [dtype, attention] : {std::pair{torch::kFloat64, models::AttentionKernel::kAuto},
                                        std::pair{torch::kFloat32, models::AttentionKernel::kAuto}}) {
    INFO(c10::toString(dtype));
    LlamaForCausalLM model = models::load_llama(test::llama_fixture("tiny_llama"), {}, dtype);
    const Run plain = run_layouts(model, attention, false);
    const Run replayed = run_layouts(model, attention, true);
    for (size_t i = 0; i < plain.logp.size(); ++i) CHECK(torch::equal(plain.logp[i], replayed.logp[i]));
    for (const auto& [name, g] : plain.grads) {
      INFO(name);
      CHECK(torch::equal(g, replayed.grads.at(name)));
    }
  }
  // The control that recompute happened: a deep, narrow-vocab model on 2 x 1024 tokens holds a
  // fraction of the activations (the layer inputs and one layer's at a time).
  models::LlamaConfig c;
  c.vocab_size = 64, c.hidden_size = 128, c.num_layers = 6, c.num_heads = 4, c.num_kv_heads = 2;
  c.intermediate_size = 384, c.max_seq_len = 1024;
  LlamaForCausalLM model(c, parallel::ParallelContext{}, 1);
  const test::RaggedBatch b = test::ragged_batch(test::random_sequences({1024, 1024}, c.vocab_size, 4));
  const auto peak_mib = [&](bool recompute) {
    model->set_execution(models::AttentionKernel::kAuto, recompute);
    model->zero_grad();
    PeakMemoryScope scope;
    model->log_probs(b.packed, b.packed_targets, {}).logp.sum().backward();
    return static_cast<double>(scope.peak_bytes()) / (1 << 20);
  };
  const double none = peak_mib(false), layers = peak_mib(true);
  std::printf(
      "[memory] 6 layers x 2048 tokens, hidden 128 (float32, fused): peak tensor memory recompute none "
      "%.1f MiB, layers %.1f MiB\n",
      none, layers);
  CHECK(layers < none / 2);
}

// transformers as the oracle: tests/check_transformers_oracle.sh has scripts/fixtures/hf_oracle.py
// write random-init Qwen2 / Llama directories with save_pretrained and transformers' own logits, then
// runs this case on them (TANDEM_HF_ORACLE names the manifest). Float64 equals at 1e-10 of max
// |logit|, each sequence alone, packed together and padded. bf16 is compared with transformers'
// bf16 forward: the two round at different points (tandem keeps float32 log-prob statistics and
// accumulates in its own order), so the tolerance is 4e-2 of max |logit|, about five bf16 ulps
// at the largest logit; a wrong rope, bias or norm moves logits by order one.
TEST_CASE("logits equal transformers' (float64 1e-10; bf16 4e-2 of max |logit|)", "[.hf_oracle]") {
  const char* manifest_path = std::getenv("TANDEM_HF_ORACLE");
  REQUIRE(manifest_path != nullptr);
  const nlohmann::json manifest = nlohmann::json::parse(std::ifstream(manifest_path));
  REQUIRE(!manifest.empty());
  for (const nlohmann::json& entry : manifest) {
    const std::string name = entry.at("name"), dir = entry.at("dir");
    const auto ref = models::load_safetensors(entry.at("ref").get<std::string>());
    const int64_t n = entry.at("sequences").get<int64_t>();
    std::vector<std::vector<int64_t>> seqs;
    for (int64_t i = 0; i < n; ++i) {
      const torch::Tensor ids = ref.at("ids_" + std::to_string(i)).contiguous();
      seqs.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    }
    const test::RaggedBatch all = test::ragged_batch(seqs);
    for (const auto [dtype, key, tol] :
         {std::tuple{torch::kFloat64, "f64_", 1e-10}, std::tuple{torch::kBFloat16, "bf16_", 4e-2}}) {
      INFO(name << " " << c10::toString(dtype));
      LlamaForCausalLM model = models::load_llama(dir, {}, dtype);
      torch::NoGradGuard no_grad;
      const torch::Tensor packed = model->logits(all.packed);  // (N, V)
      const torch::Tensor padded = model->logits(all.padded);  // (B, T, V)
      for (int64_t i = 0; i < n; ++i) {
        const torch::Tensor want = ref.at(key + std::to_string(i));  // (L, V)
        const int64_t s = all.cu[i].item<int64_t>(), len = want.size(0);
        const double alone = test::rel_to_max(model->logits(test::ragged_batch({seqs[i]}).packed), want);
        const double in_pack = test::rel_to_max(packed.narrow(0, s, len), want);
        const double in_pad = test::rel_to_max(padded[i].narrow(0, 0, len), want);
        INFO("sequence " << i << ": alone " << alone << ", packed " << in_pack << ", padded " << in_pad);
        CHECK(alone < tol);
        CHECK(in_pack < tol);
        CHECK(in_pad < tol);
        // The KV cache: the first 3 tokens prefilled (into a slot, or into the prefix store as a
        // shared prompt), then one token per decode step; a sliding window bites there too.
        if (len <= 3) continue;
        for (const bool shared : {false, true}) {
          models::KvCache cache = model->make_kv_cache(1, len, shared ? 1 : 0, shared ? 3 : 0);
          const std::vector<int64_t> head(seqs[i].begin(), seqs[i].begin() + 3);
          const std::vector<int64_t> slot = shared ? cache.free_prefixes(1) : std::vector<int64_t>{0};
          torch::Tensor z = model->prefill(test::ragged_batch({head}).packed, &cache, slot, shared);  // (1, V)
          if (shared) cache.attach(0, slot[0]);
          double worst = test::rel_to_max(z, want.narrow(0, 2, 1));
          for (int64_t t = 3; t < len; ++t) {
            z = model->decode_step(torch::tensor({seqs[i][static_cast<size_t>(t)]}, torch::kInt64), cache);
            worst = std::max(worst, test::rel_to_max(z, want.narrow(0, t, 1)));
          }
          INFO("sequence " << i << (shared ? ", shared-prefix" : "") << " decode: " << worst);
          CHECK(worst < tol);
        }
      }
      if (dtype != torch::kFloat64) continue;
      // Control: one norm weight moved by 1e-6 is seen at float64's tolerance.
      for (auto& p : model->named_parameters())
        if (p.key().find("norm") != std::string::npos) {
          p.value().data()[0] += 1e-6;
          break;
        }
      const double moved = test::rel_to_max(model->logits(test::ragged_batch({seqs[0]}).packed), ref.at("f64_0"));
      INFO("control: " << moved);
      CHECK(moved > tol);
    }
  }
}

TEST_CASE("the packing metadata must stay on the host: a device cu_seqlens or prefix_of is refused by name",
          "[llama]") {
  const auto seqs = test::random_sequences({5, 3}, 97, 6);
  const test::RaggedBatch b = test::ragged_batch(seqs);
  LlamaForCausalLM model = models::load_llama(test::llama_fixture("tiny_llama"), {}, torch::kFloat32);
  torch::NoGradGuard no_grad;
  CHECK_NOTHROW(model->log_probs(b.packed, b.packed_targets));
  models::PackedInput moved = b.packed;
  moved.cu_seqlens = torch::empty_like(b.packed.cu_seqlens, torch::TensorOptions().device(torch::kMeta));
  CHECK_THROWS_WITH(model->log_probs(moved, b.packed_targets),
                    Catch::Contains("cu_seqlens is on meta") && Catch::Contains("host"));
  moved = b.packed;
  moved.prefix_of = torch::full({2}, -1, torch::TensorOptions(torch::kInt64).device(torch::kMeta));
  CHECK_THROWS_WITH(model->log_probs(moved, b.packed_targets), Catch::Contains("prefix_of is on meta"));
}
