// The LoRA base's identity (lora_checkpoint.h): the hash of exactly the weight files the loader
// reads, so the same weights elsewhere match, other weights do not, and files the loader ignores
// (a Mistral repo's consolidated.safetensors) change nothing.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "core/tracks/lora_checkpoint.h"
#include "fixtures.h"
#include "models/safetensors.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

std::map<std::string, torch::Tensor> weights(double shift) {
  return {{"a.weight", torch::arange(6, torch::kFloat32).reshape({2, 3}) + shift},
          {"b.weight", torch::ones({4}, torch::kFloat32)},
          {"c.weight", torch::zeros({3}, torch::kFloat32)}};
}

std::string digest(const std::string& dir) { return hf_dir_identity(dir)["weights_xxh64"].get<std::string>(); }

}  // namespace

TEST_CASE("the base identity hashes the files the loader reads, wherever the directory is", "[lora_checkpoint]") {
  const test::TempDir tmp("lora_identity");
  const std::string one = tmp.file("one"), moved = tmp.file("moved"), other = tmp.file("other");
  models::save_hf_weights(one, weights(0));
  models::save_hf_weights(moved, weights(0));
  models::save_hf_weights(other, weights(1));
  CHECK(digest(one) == digest(moved));  // the path is not part of it
  CHECK_NOTHROW(check_base_identity(hf_dir_identity(one), hf_dir_identity(moved), "ckpt"));
  CHECK(digest(one) != digest(other));  // control: other weights
  CHECK_THROWS_AS(check_base_identity(hf_dir_identity(one), hf_dir_identity(other), "ckpt"), UserError);
  // A weight file the loader does not read beside model.safetensors changes nothing.
  models::save_safetensors(moved + "/consolidated.safetensors", weights(2));
  CHECK(digest(one) == digest(moved));

  // Shards named by the index in a subdirectory are hashed too: changing one changes the identity.
  const std::string sharded = tmp.file("sharded");
  fs::create_directories(sharded + "/sub");
  auto w = weights(0);
  models::save_safetensors(sharded + "/sub/x.safetensors", {{"a.weight", w["a.weight"]}});
  models::save_safetensors(sharded + "/sub/y.safetensors", {{"b.weight", w["b.weight"]}, {"c.weight", w["c.weight"]}});
  std::ofstream(sharded + "/model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"a.weight": "sub/x.safetensors", "b.weight": "sub/y.safetensors", )"
      << R"("c.weight": "sub/y.safetensors"}})";
  const std::string before = digest(sharded);
  models::save_safetensors(sharded + "/sub/x.safetensors", {{"a.weight", w["a.weight"] * 2}});
  CHECK(digest(sharded) != before);
}

TEST_CASE(
    "LoRA --base: refused for a checkpoint without adapters or holding its base; else the base and its tokenizer move",
    "[lora_checkpoint]") {
  const test::TempDir tmp("lora_base");
  const std::string ckpt = tmp.file("step_000004"), base = tmp.file("moved");
  fs::create_directories(ckpt);
  fs::create_directories(base);
  Config config;
  config.tracks.ar.model.hf_dir = "/old/qwen";
  config.tracks.ar.tokenizer.path = "/old/qwen";
  // No ar_adapter/: not a LoRA checkpoint.
  const std::string no_adapters = test::user_error_of([&] { require_adapters_for_base(ckpt, base); });
  CHECK(no_adapters == "--base " + base + ": " + ckpt + " holds no LoRA adapters (ar_adapter/); --base names the " +
                           "base model of a LoRA checkpoint");
  CHECK(test::user_error_of([&] { use_lora_base(config, ckpt, base); }) == no_adapters);
  // Adapters whose base the checkpoint holds itself (ar_base/).
  fs::create_directories(ckpt + "/" + kAdapterDir);
  std::ofstream(ckpt + "/" + kAdapterDir + "/" + kBaseIdentityFile) << R"({"source": "checkpoint"})";
  CHECK_NOTHROW(require_adapters_for_base(ckpt, base));
  CHECK_THAT(test::user_error_of([&] { use_lora_base(config, ckpt, base); }), Catch::Contains("holds its base itself"));
  // A damaged identity file: not JSON, or an object without its source.
  const std::string id_file = ckpt + "/" + kAdapterDir + "/" + kBaseIdentityFile;
  std::ofstream(id_file) << R"({"source": )";
  CHECK(test::user_error_of([&] { use_lora_base(config, ckpt, base); }) ==
        id_file + ": not a JSON object; use another checkpoint");
  std::ofstream(id_file) << R"({"sha256": "0"})";
  CHECK_THAT(test::user_error_of([&] { use_lora_base(config, ckpt, base); }),
             Catch::StartsWith(id_file + ": damaged (no \"source\" string"));
  // A base read from a Hugging Face directory: the recipe's paths move, the tokenizer with them.
  std::ofstream(ckpt + "/" + kAdapterDir + "/" + kBaseIdentityFile) << R"({"source": "hf_dir"})";
  CHECK_THAT(test::user_error_of([&] { use_lora_base(config, ckpt, tmp.file("nowhere")); }),
             Catch::Contains("no such directory"));
  use_lora_base(config, ckpt, base);
  CHECK(*config.tracks.ar.model.hf_dir == base);
  CHECK(*config.tracks.ar.tokenizer.path == base);
}
