// HF weight directories for the Llama model: load (sharded index), save (sharded or single
// file) and reload bitwise, config.json round trip, and UserErrors that name the tensor.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>

#include "common/error.h"
#include "fixtures.h"
#include "llama_test_util.h"
#include "models/llama/weights.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

void check_same_tensors(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : b) {
    INFO(name);
    REQUIRE(a.count(name) == 1);
    CHECK(a.at(name).scalar_type() == t.scalar_type());
    CHECK(torch::equal(a.at(name), t));
  }
}

}  // namespace

TEST_CASE("save / load round trip in the HF layout, sharded and single-file", "[llama][weights]") {
  for (const std::string name : {"tiny_llama", "tiny_qwen2"}) {
    INFO(name);
    const std::string src = test::llama_fixture(name);
    models::LlamaForCausalLM model = models::load_llama(src, {}, torch::kFloat32);
    const auto original = models::load_hf_weights(src);
    check_same_tensors(models::gather_hf_state(*model), original);
    test::TempDir sharded("tandem_llama"), single("tandem_llama");
    models::save_llama(*model, sharded.str(), true, 20'000);
    models::save_llama(*model, single.str());
    CHECK(fs::exists(sharded.str() + "/model.safetensors.index.json"));
    CHECK(fs::exists(single.str() + "/model.safetensors"));
    check_same_tensors(models::load_hf_weights(sharded.str()), original);
    check_same_tensors(models::load_hf_weights(single.str()), original);
    CHECK(original.count("lm_head.weight") == (name == "tiny_llama" ? 1u : 0u));
    const nlohmann::json cfg = models::read_hf_config(single.str());
    const nlohmann::json src_cfg = models::read_hf_config(src);
    for (const char* key :
         {"model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "intermediate_size", "rope_theta", "rms_norm_eps", "tie_word_embeddings", "torch_dtype"})
      CHECK(cfg.at(key) == src_cfg.at(key));
    models::LlamaForCausalLM again = models::load_llama(sharded.str(), {}, torch::kFloat32);
    const test::RaggedBatch b = test::ragged_batch(test::random_sequences({5, 8}, 97, 3));
    torch::NoGradGuard no_grad;
    CHECK(torch::equal(again->logits(b.packed), model->logits(b.packed)));
  }
}

TEST_CASE("the saved dtype is the model's dtype", "[llama][weights]") {
  models::LlamaForCausalLM model = models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kBFloat16);
  test::TempDir dir("tandem_llama");
  models::save_llama(*model, dir.str());
  CHECK(models::read_hf_config(dir.str()).at("torch_dtype") == "bfloat16");
  const models::SafetensorsInfo info = models::read_safetensors_header(dir.str() + "/model.safetensors");
  CHECK(info.tensors.at("model.norm.weight").dtype == "BF16");
  CHECK(info.metadata.at("format") == "pt");
}

TEST_CASE("missing, mis-shaped and unexpected tensors are UserErrors naming them", "[llama][weights]") {
  const std::string src = test::llama_fixture("tiny_qwen2");
  const models::LlamaConfig cfg = models::from_hf_config(models::read_hf_config(src));
  const auto good = models::load_hf_weights(src);
  models::LlamaForCausalLM model(cfg, parallel::ParallelContext{}, std::nullopt);
  const auto fails_with = [&](std::map<std::string, torch::Tensor> t, const std::string& needle) {
    CHECK_THROWS_WITH(models::load_hf_state(*model, t, "ckpt"), Catch::Contains(needle) && Catch::Contains("ckpt"));
  };
  auto missing = good;
  missing.erase("model.layers.1.self_attn.k_proj.bias");
  fails_with(missing, "model.layers.1.self_attn.k_proj.bias: missing (expected shape [16])");
  auto wrong = good;
  wrong["model.embed_tokens.weight"] = torch::zeros({96, 48});
  fails_with(wrong, "model.embed_tokens.weight: expected shape [97, 48], got [96, 48]");
  auto extra = good;
  extra["model.layers.2.mlp.up_proj.weight"] = torch::zeros({40, 48});
  fails_with(extra, "model.layers.2.mlp.up_proj.weight: unexpected tensor");
  auto ints = good;
  ints["model.norm.weight"] = torch::zeros({48}, torch::kInt64);
  fails_with(ints, "model.norm.weight: expected a floating-point tensor");
  // Ignored: RoPE buffers of old checkpoints, and lm_head.weight when the embeddings are tied.
  auto tolerated = good;
  tolerated["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch::zeros({4});
  tolerated["lm_head.weight"] = torch::zeros({97, 48});
  CHECK_NOTHROW(models::load_hf_state(*model, tolerated, "ckpt"));
  CHECK(torch::equal(model->model->embed_tokens->weight, good.at("model.embed_tokens.weight")));
  CHECK_THROWS_AS(models::load_llama(test::llama_fixture("missing_dir")), UserError);
}

// Not a unit test: writes the fixtures back with the C++ writer into $TANDEM_LLAMA_OUT_DIR for
// scripts/fixtures/make_llama.py --check (ctest llama.python_reads_cpp).
TEST_CASE("write llama dirs for the Python reference", "[.llama_writer]") {
  const char* out = std::getenv("TANDEM_LLAMA_OUT_DIR");
  REQUIRE(out != nullptr);
  for (const std::string name : {"tiny_llama", "tiny_qwen2"}) {
    models::LlamaForCausalLM model = models::load_llama(test::llama_fixture(name), {}, torch::kFloat32);
    models::save_llama(*model, std::string(out) + "/" + name, true,
                       name == "tiny_llama" ? 30'000 : models::kDefaultMaxShardBytes);
  }
}

TEST_CASE("set_hf_dtype sets every spelling config.json has, so none is left stale", "[llama][weights]") {
  nlohmann::json v5{{"dtype", "bfloat16"}}, both{{"dtype", "bfloat16"}, {"torch_dtype", "bfloat16"}}, none{};
  models::set_hf_dtype(v5, torch::kFloat32);
  CHECK(v5 == nlohmann::json{{"dtype", "float32"}});  // transformers 5 reads "dtype"
  models::set_hf_dtype(both, torch::kFloat32);
  CHECK(both == nlohmann::json{{"dtype", "float32"}, {"torch_dtype", "float32"}});
  models::set_hf_dtype(none, torch::kBFloat16);
  CHECK(none == nlohmann::json{{"torch_dtype", "bfloat16"}});
}
